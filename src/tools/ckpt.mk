# SPDX-License-Identifier: BSD-3-Clause
# src/tools/ckpt.mk: ddpc-ckpt, the checkpoint inspection tool (installed), and its test.
# Plain HDF5 + zlib: the checkpoint module's reader (src/ckpt/reader.c, with
# h5.c's pieces and crc.c's CRC; none exported by the library) is compiled
# in; the tool does not link libddpc and never initializes MPI.
bin_PROGRAMS += ddpc-ckpt
ddpc_ckpt_SOURCES = src/tools/ckpt_tool.h src/tools/main.c src/tools/out.c src/tools/attr.c \
	src/tools/cfile.c src/tools/check.c src/tools/ls.c src/tools/show.c src/tools/verify.c \
	src/tools/diff.c src/tools/export.c \
	src/ckpt/reader.h src/ckpt/reader.c src/ckpt/h5.c src/util/crc.c
ddpc_ckpt_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/src/ckpt $(HDF5_CFLAGS) $(ZLIB_CFLAGS)
ddpc_ckpt_LDADD = $(HDF5_LIBS) $(ZLIB_LIBS) -lm

TESTS += tests/ddpc-ckpt.sh
dist_check_SCRIPTS += tests/ddpc-ckpt.sh tests/safetensors_ref.py
