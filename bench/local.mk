# SPDX-License-Identifier: BSD-3-Clause
# bench: fragment of the top Makefile.am (sources, programs, tests of this part)
# loader_bench: how long a training loop waits for Fashion-MNIST batches, with
# the loader's prefetch off and on (doc/sampler.md has its figures). Built
# with the package, never run by make check.
noinst_PROGRAMS += bench/loader_bench
bench_loader_bench_SOURCES = bench/loader_bench.c
bench_loader_bench_LDADD = libddpc.la

# ckpt_bench: checkpoint save/load against raw I/O (doc/checkpoint.md); run by
# hand under mpiexec, not part of make check.
noinst_PROGRAMS += bench/ckpt_bench
bench_ckpt_bench_SOURCES = bench/ckpt_bench.c
bench_ckpt_bench_CPPFLAGS = $(AM_CPPFLAGS) $(HDF5_CFLAGS)
bench_ckpt_bench_LDADD = libddpc.la $(HDF5_LIBS)

# gemm_compare.sh builds gemm_bench.c against every CBLAS installed here and
# compares them (doc/blas.md); by hand, about 15 minutes.
EXTRA_DIST += bench/gemm_bench.c bench/gemm_compare.sh bench/gpu_bench.py bench/torch_mlp.py \
	bench/benchlib.py

# `make bench` (issue 11) runs bench/train_bench.sh: the SGEMM bound
# (gemm_bench against the trainer's CBLAS), the trainer against PyTorch DDP
# (bench/torch_ddp.py, report by bench/plot.py), ckpt_bench and
# bench/ddp_bench.sh (issue 3); BENCH_PARTS, REPEATS, MODELS, RANKS, QUICK=1
# choose (see the script). They are not tests: nothing here runs under
# `make check`.
EXTRA_PROGRAMS = bench/ddp_bench bench/gemm_bench
bench_ddp_bench_SOURCES = bench/ddp_bench.c
bench_ddp_bench_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS)
bench_ddp_bench_LDFLAGS = -no-install
bench_ddp_bench_LDADD = libddpc.la $(BLAS_LIBS) -lm
# the same CBLAS as the trainer (configure's choice), not libddpc
bench_gemm_bench_SOURCES = bench/gemm_bench.c
bench_gemm_bench_LDADD = $(BLAS_LIBS) -lm -ldl
CLEANFILES += bench/ddp_bench$(EXEEXT) bench/gemm_bench$(EXEEXT)
dist_noinst_SCRIPTS += bench/ddp_bench.sh bench/train_bench.sh bench/torch_ddp.py bench/plot.py \
	bench/pipe_bench.py bench/timeline_bench.py bench/shard_bench.py
EXTRA_DIST += bench/quiet.sh

.PHONY: bench
bench: bench/ddp_bench$(EXEEXT) bench/gemm_bench$(EXEEXT) trainer$(EXEEXT) bench/ckpt_bench$(EXEEXT)
	$(SHELL) $(top_srcdir)/bench/train_bench.sh

# allreduce_tail + ucx_tail.sh: all-reduce tail latency on the Slurm testbed
# under several UCX settings (doc/guide.md, "MPI transport settings"); plain
# MPI, by hand: make bench/allreduce_tail, then bench/ucx_tail.sh.
EXTRA_PROGRAMS += bench/allreduce_tail
bench_allreduce_tail_SOURCES = bench/allreduce_tail.c
CLEANFILES += bench/allreduce_tail$(EXEEXT)
dist_noinst_SCRIPTS += bench/ucx_tail.sh
