# bench: fragment of the top Makefile.am (sources, programs, tests of this part)
# loader_bench: how long a training loop waits for Fashion-MNIST batches, with
# the loader's prefetch off and on (doc/sampler.md has its figures). Built
# with the package, never run by make check.
noinst_PROGRAMS += bench/loader_bench
bench_loader_bench_SOURCES = bench/loader_bench.c
bench_loader_bench_LDADD = libddpc.la
