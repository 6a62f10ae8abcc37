# SPDX-License-Identifier: BSD-3-Clause
# src/ckpt: HDF5 checkpoints (rank 0 writes, load on rank 0 and broadcast).
include_HEADERS += include/ddpc_ckpt.h
libddpc_la_SOURCES += src/ckpt/ckpt_internal.h src/ckpt/ckpt.c src/ckpt/h5.c \
	src/ckpt/write.c src/ckpt/load.c src/ckpt/lock.c \
	src/ckpt/names.c src/ckpt/shard.c
# the reading side for untrusted files, shared with ddpc-ckpt (src/tools/ckpt.mk)
libddpc_la_SOURCES += src/ckpt/reader.h src/ckpt/reader.c
dist_doc_DATA += doc/checkpoint.md

if HAVE_CHECK
check_PROGRAMS += tests/mpi_ckpt
tests_mpi_ckpt_SOURCES = tests/mpi_ckpt.c tests/mpitest.h
tests_mpi_ckpt_CPPFLAGS = $(AM_CPPFLAGS) $(HDF5_CFLAGS)
tests_mpi_ckpt_CFLAGS = $(DDPC_TEST_CF)
tests_mpi_ckpt_LDFLAGS = $(DDPC_TEST_LD)
tests_mpi_ckpt_LDADD = $(DDPC_TEST_LIBS) $(HDF5_LIBS)
# the CRC against zlib's, compiled in (it is not exported)
check_PROGRAMS += tests/check_ckpt_crc
tests_check_ckpt_crc_SOURCES = tests/check_ckpt_crc.c src/util/crc.c
tests_check_ckpt_crc_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/src/ckpt $(HDF5_CFLAGS) $(ZLIB_CFLAGS)
tests_check_ckpt_crc_CFLAGS = $(DDPC_TEST_CF)
tests_check_ckpt_crc_LDADD = $(CHECK_LIBS) $(ZLIB_LIBS)
# which temporary files a save removes (names.c has no dependencies)
check_PROGRAMS += tests/check_ckpt_names
tests_check_ckpt_names_SOURCES = tests/check_ckpt_names.c src/ckpt/names.c
tests_check_ckpt_names_CFLAGS = $(DDPC_TEST_CF)
tests_check_ckpt_names_LDADD = $(CHECK_LIBS)
TESTS += tests/ckpt.mpi tests/check_ckpt_crc tests/check_ckpt_names
endif
dist_check_DATA += tests/ckpt.mpi

# the training program of the restart scripts (no Check needed)
check_PROGRAMS += tests/mpi_ckpt_train
tests_mpi_ckpt_train_SOURCES = tests/mpi_ckpt_train.c
tests_mpi_ckpt_train_LDFLAGS = $(DDPC_TEST_LD)
tests_mpi_ckpt_train_LDADD = libddpc.la
TESTS += tests/ckpt-resume.sh tests/ckpt-interop.sh tests/ckpt-faults.sh tests/ckpt-full.sh \
	tests/ckpt-bcast-die.sh
dist_check_SCRIPTS += tests/ckpt-resume.sh tests/ckpt-interop.sh tests/ckpt-faults.sh \
	tests/ckpt-full.sh tests/ckpt-bcast-die.sh
# preloaded by ckpt-bcast-die.sh (which builds it with cc, or $CC if set)
dist_check_DATA += tests/die_in_read.c
