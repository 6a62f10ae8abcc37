# SPDX-License-Identifier: BSD-3-Clause
# tests/emu: libddpc-emu, the strict host emulation of the CUDA runtime, NCCL
# and cuBLASLt that `configure --with-cuda=emulate` links instead of the
# libraries (emu.h; doc/gpu.md "Emulation"). Never installed: a shared
# library of the build tree (-rpath there), so that libddpc, the trainer and
# the tests share one emulated device. Built with -ffp-contract=off: the
# kernels' twins round each operation as the kernels do.
EMU_SOURCES = tests/emu/emu.h tests/emu/emu_internal.h tests/emu/cudart.c tests/emu/nccl.c \
	tests/emu/kernels_ddp.c tests/emu/kernels_model.c tests/emu/cublaslt.c \
	tests/emu/halfconv.c
EXTRA_DIST += $(EMU_SOURCES) tests/emu/local.mk tests/emu/check_emu_lt.c tests/emu/emu_nccl.c
dist_check_DATA += tests/emu/emu_nccl.mpi
if CUDA_EMULATE
noinst_LTLIBRARIES += tests/emu/libddpc-emu.la
tests_emu_libddpc_emu_la_SOURCES = $(EMU_SOURCES)
tests_emu_libddpc_emu_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/src/ddp -I$(top_srcdir)/examples \
	$(CUDA_CFLAGS) $(BLAS_CFLAGS)
tests_emu_libddpc_emu_la_CFLAGS = -Wall -Wextra -Wno-unused-parameter -ffp-contract=off
tests_emu_libddpc_emu_la_LDFLAGS = -rpath '$(abs_builddir)/tests/emu/.libs' -avoid-version
tests_emu_libddpc_emu_la_LIBADD = $(BLAS_LIBS) -lpthread -lm
# CUDA_LIBS names the emulation, but automake leaves configure's
# substitutions out of the dependencies it computes: say them, or a parallel
# make links libddpc or the trainer's library before the emulation exists
EXTRA_libddpc_la_DEPENDENCIES = tests/emu/libddpc-emu.la
EXTRA_examples_libtrainer_la_DEPENDENCIES = tests/emu/libddpc-emu.la
if HAVE_CHECK
# the cuBLASLt emulation against a double-precision triple loop (every
# epilogue, type pair, transpose), its refusals, and violations (exit 86)
check_PROGRAMS += tests/emu/check_emu_lt
tests_emu_check_emu_lt_SOURCES = tests/emu/check_emu_lt.c
tests_emu_check_emu_lt_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tests/emu -I$(top_srcdir)/examples \
	$(CUDA_CFLAGS)
tests_emu_check_emu_lt_CFLAGS = $(DDPC_TEST_CF)
tests_emu_check_emu_lt_LDFLAGS = $(DDPC_TEST_LD)
tests_emu_check_emu_lt_LDADD = tests/emu/libddpc-emu.la $(CHECK_LIBS) -lm
TESTS += tests/emu/check_emu_lt
# the emulated NCCL on 4 ranks (mpiexec): communicators of some ranks,
# ncclCommSplit, send/receive in groups and alone, ncclReduce
check_PROGRAMS += tests/emu/emu_nccl
tests_emu_emu_nccl_SOURCES = tests/emu/emu_nccl.c
tests_emu_emu_nccl_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CFLAGS)
tests_emu_emu_nccl_CFLAGS = $(DDPC_TEST_CF)
tests_emu_emu_nccl_LDFLAGS = $(DDPC_TEST_LD)
tests_emu_emu_nccl_LDADD = tests/emu/libddpc-emu.la $(CHECK_LIBS)
TESTS += tests/emu/emu_nccl.mpi
endif
# the same source with -DEMU_NCCL_FORK: the emulated NCCL without MPI (no
# launcher, no MPI call: 4 forked ranks, the id through pipes)
check_PROGRAMS += tests/emu/emu_nccl_fork
tests_emu_emu_nccl_fork_SOURCES = tests/emu/emu_nccl.c
tests_emu_emu_nccl_fork_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CFLAGS) -DEMU_NCCL_FORK
tests_emu_emu_nccl_fork_CFLAGS = $(AM_CFLAGS)
tests_emu_emu_nccl_fork_LDFLAGS = $(DDPC_TEST_LD)
tests_emu_emu_nccl_fork_LDADD = tests/emu/libddpc-emu.la
TESTS += tests/emu/emu_nccl_fork
endif
