# tests/emu: libddpc-emu, the strict host emulation of the CUDA runtime, NCCL
# and cuBLASLt that `configure --with-cuda=emulate` links instead of the
# libraries (emu.h; doc/gpu.md "Emulation"). Never installed: a shared
# library of the build tree (-rpath there), so that libddpc, the trainer and
# the tests share one emulated device. Built with -ffp-contract=off: the
# kernels' twins round each operation as the kernels do.
EMU_SOURCES = tests/emu/emu.h tests/emu/emu_internal.h tests/emu/cudart.c tests/emu/nccl.c \
	tests/emu/kernels_ddp.c
EXTRA_DIST += $(EMU_SOURCES) tests/emu/local.mk
if CUDA_EMULATE
noinst_LTLIBRARIES += tests/emu/libddpc-emu.la
tests_emu_libddpc_emu_la_SOURCES = $(EMU_SOURCES)
tests_emu_libddpc_emu_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/src/ddp -I$(top_srcdir)/examples \
	$(CUDA_CFLAGS)
tests_emu_libddpc_emu_la_CFLAGS = -Wall -Wextra -Wno-unused-parameter -ffp-contract=off
tests_emu_libddpc_emu_la_LDFLAGS = -rpath '$(abs_builddir)/tests/emu/.libs' -avoid-version
tests_emu_libddpc_emu_la_LIBADD = $(BLAS_LIBS) -lpthread -lm
EXTRA_libddpc_la_DEPENDENCIES = tests/emu/libddpc-emu.la
endif
