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
EXTRA_DIST += bench/gemm_bench.c bench/gemm_compare.sh bench/gpu_bench.py bench/torch_mlp.py

# `make bench` builds the DDP benchmarks and runs bench/ddp_bench.sh (issue 3);
# they are not tests: nothing here runs under `make check`.
EXTRA_PROGRAMS = bench/ddp_bench
bench_ddp_bench_SOURCES = bench/ddp_bench.c
bench_ddp_bench_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS)
bench_ddp_bench_LDFLAGS = -no-install
bench_ddp_bench_LDADD = libddpc.la $(BLAS_LIBS) -lm
CLEANFILES += bench/ddp_bench$(EXEEXT)
dist_noinst_SCRIPTS += bench/ddp_bench.sh

.PHONY: bench
bench: bench/ddp_bench$(EXEEXT)
	$(SHELL) $(top_srcdir)/bench/ddp_bench.sh
