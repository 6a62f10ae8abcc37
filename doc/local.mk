# SPDX-License-Identifier: BSD-3-Clause
# doc: fragment of the top Makefile.am (sources, programs, tests of this part)
dist_doc_DATA += doc/options.md doc/launch.md doc/comm.md doc/groups.md doc/ddp.md doc/sampler.md doc/blas.md
dist_doc_DATA += doc/trainer.md doc/gpu.md doc/guide.md doc/site.md doc/performance.md doc/failures.md
dist_doc_DATA += doc/pipeline.md doc/timeline.md doc/timeline-overlap.png
