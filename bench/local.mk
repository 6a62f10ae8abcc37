# bench: fragment of the top Makefile.am (sources, programs, tests of this part)
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
# doc/ddp.md: its Performance and Why-a-progress-thread sections come from these benchmarks
dist_doc_DATA += doc/ddp.md
