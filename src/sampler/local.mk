# SPDX-License-Identifier: BSD-3-Clause
# src/sampler: fragment of the top Makefile.am: the distributed sampler, the
# idx reader and the prefetching loader (doc/sampler.md), and their tests.
include_HEADERS += include/ddpc_sampler.h include/ddpc_data.h
libddpc_la_SOURCES += \
	src/sampler/local.h \
	src/sampler/rng.c \
	src/sampler/sampler.c \
	src/sampler/idx.c \
	src/sampler/loader.c

# Tests: the sampler (check_sampler), the cross-check against the Python
# reference implementation of doc/sampler.md (sampler-ref.sh), the idx reader
# and the loader on files the test writes (check_data), the real
# Fashion-MNIST files (check_fmnist; skipped when absent); multi-rank: shards
# of real ranks through ddpc_allgather (sampler.mpi) and Fashion-MNIST through
# the loader on every rank (sampler-fmnist.mpi; skipped when absent).
dist_check_SCRIPTS += tests/sampler-ref.sh tests/sampler_ref.py
dist_check_DATA += tests/sampler.mpi tests/sampler-fmnist.mpi
check_PROGRAMS += tests/sampler_dump
tests_sampler_dump_SOURCES = tests/sampler_dump.c
tests_sampler_dump_LDFLAGS = $(DDPC_TEST_LD)
tests_sampler_dump_LDADD = libddpc.la
TESTS += tests/sampler-ref.sh
if HAVE_CHECK
check_PROGRAMS += tests/check_sampler tests/check_data tests/check_fmnist tests/mpi_sampler
tests_check_sampler_SOURCES = tests/check_sampler.c tests/quiet_assert.h
tests_check_sampler_CFLAGS = $(DDPC_TEST_CF)
tests_check_sampler_LDFLAGS = $(DDPC_TEST_LD)
tests_check_sampler_LDADD = $(DDPC_TEST_LIBS)
tests_check_data_SOURCES = tests/check_data.c tests/quiet_assert.h
tests_check_data_CPPFLAGS = $(AM_CPPFLAGS) $(ZLIB_CFLAGS)
tests_check_data_CFLAGS = $(DDPC_TEST_CF)
tests_check_data_LDFLAGS = $(DDPC_TEST_LD)
tests_check_data_LDADD = $(DDPC_TEST_LIBS) $(ZLIB_LIBS)
tests_check_fmnist_SOURCES = tests/check_fmnist.c tests/quiet_assert.h
tests_check_fmnist_CFLAGS = $(DDPC_TEST_CF)
tests_check_fmnist_LDFLAGS = $(DDPC_TEST_LD)
tests_check_fmnist_LDADD = $(DDPC_TEST_LIBS)
tests_mpi_sampler_SOURCES = tests/mpi_sampler.c tests/mpitest.h tests/quiet_assert.h
tests_mpi_sampler_CFLAGS = $(DDPC_TEST_CF)
tests_mpi_sampler_LDFLAGS = $(DDPC_TEST_LD)
tests_mpi_sampler_LDADD = $(DDPC_TEST_LIBS)
TESTS += tests/check_sampler tests/check_data tests/check_fmnist tests/sampler.mpi \
	tests/sampler-fmnist.mpi
endif
