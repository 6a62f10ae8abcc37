# SPDX-License-Identifier: BSD-3-Clause
# tests/fuzz: libFuzzer targets (configure --enable-fuzzing, clang): the idx reader, the
# trainer's command line and the checkpoint loader (files built from a recipe);
# `make fuzz` runs each for FUZZ_SECONDS from its seeds
EXTRA_DIST += tests/fuzz/fuzz_idx.c tests/fuzz/fuzz_options.c tests/fuzz/fuzz_ckpt.c \
	tests/fuzz/run.sh tests/fuzz/seeds
if ENABLE_FUZZING
noinst_PROGRAMS += tests/fuzz/fuzz_idx tests/fuzz/fuzz_options tests/fuzz/fuzz_ckpt
tests_fuzz_fuzz_idx_SOURCES = tests/fuzz/fuzz_idx.c
tests_fuzz_fuzz_idx_LDFLAGS = -fsanitize=fuzzer -no-install
tests_fuzz_fuzz_idx_LDADD = libddpc.la
tests_fuzz_fuzz_options_SOURCES = tests/fuzz/fuzz_options.c
tests_fuzz_fuzz_options_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/examples
tests_fuzz_fuzz_options_LDFLAGS = -fsanitize=fuzzer -no-install
tests_fuzz_fuzz_options_LDADD = examples/libtrainer.la libddpc.la -lm
tests_fuzz_fuzz_ckpt_SOURCES = tests/fuzz/fuzz_ckpt.c
tests_fuzz_fuzz_ckpt_CPPFLAGS = $(AM_CPPFLAGS) $(HDF5_CFLAGS)
tests_fuzz_fuzz_ckpt_LDFLAGS = -fsanitize=fuzzer -no-install
tests_fuzz_fuzz_ckpt_LDADD = libddpc.la $(HDF5_LIBS) -lm
FUZZ_SECONDS = 60
fuzz: tests/fuzz/fuzz_idx$(EXEEXT) tests/fuzz/fuzz_options$(EXEEXT) tests/fuzz/fuzz_ckpt$(EXEEXT)
	FUZZ_SECONDS=$(FUZZ_SECONDS) $(SHELL) $(top_srcdir)/tests/fuzz/run.sh $(top_srcdir)/tests/fuzz tests/fuzz
endif
