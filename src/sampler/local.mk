# src/sampler: fragment of the top Makefile.am: the distributed sampler
# (doc/sampler.md) and its tests.
include_HEADERS += include/ddpc_sampler.h
libddpc_la_SOURCES += \
	src/sampler/local.h \
	src/sampler/rng.c \
	src/sampler/sampler.c

# Tests: the sampler (check_sampler), the cross-check against the Python
# reference implementation of doc/sampler.md (sampler-ref.sh).
dist_check_SCRIPTS += tests/sampler-ref.sh tests/sampler_ref.py
if HAVE_CHECK
check_PROGRAMS += tests/check_sampler
tests_check_sampler_SOURCES = tests/check_sampler.c tests/quiet_assert.h
tests_check_sampler_CFLAGS = $(DDPC_TEST_CF)
tests_check_sampler_LDFLAGS = $(DDPC_TEST_LD)
tests_check_sampler_LDADD = $(DDPC_TEST_LIBS)
TESTS += tests/check_sampler
endif
check_PROGRAMS += tests/sampler_dump
tests_sampler_dump_SOURCES = tests/sampler_dump.c
tests_sampler_dump_LDFLAGS = $(DDPC_TEST_LD)
tests_sampler_dump_LDADD = libddpc.la
TESTS += tests/sampler-ref.sh


# Multi-rank: shards of real ranks through ddpc_allgather (sampler.mpi).
if HAVE_CHECK
check_PROGRAMS += tests/mpi_sampler
tests_mpi_sampler_SOURCES = tests/mpi_sampler.c tests/mpitest.h tests/quiet_assert.h
tests_mpi_sampler_CFLAGS = $(DDPC_TEST_CF)
tests_mpi_sampler_LDFLAGS = $(DDPC_TEST_LD)
tests_mpi_sampler_LDADD = $(DDPC_TEST_LIBS)
TESTS += tests/sampler.mpi
endif
dist_check_DATA += tests/sampler.mpi
