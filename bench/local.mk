# bench: fragment of the top Makefile.am (sources, programs, tests of this part)

# ckpt_bench: checkpoint save/load against raw I/O (doc/checkpoint.md); run by
# hand under mpiexec, not part of make check.
noinst_PROGRAMS += bench/ckpt_bench
bench_ckpt_bench_SOURCES = bench/ckpt_bench.c
bench_ckpt_bench_CPPFLAGS = $(AM_CPPFLAGS) $(HDF5_CFLAGS)
bench_ckpt_bench_LDADD = libddpc.la $(HDF5_LIBS)
