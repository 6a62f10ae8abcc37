# src/tools/ckpt.mk: ddpc-ckpt, the checkpoint inspection tool (installed), and its test.
# Plain HDF5 + zlib: the CRC (src/ckpt/crc.c, not exported by the library) is
# compiled in; the tool does not link libddpc and never initializes MPI.
bin_PROGRAMS += ddpc-ckpt
ddpc_ckpt_SOURCES = src/tools/ddpc-ckpt.c src/ckpt/crc.c
ddpc_ckpt_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/src/ckpt $(HDF5_CFLAGS) $(ZLIB_CFLAGS)
ddpc_ckpt_LDADD = $(HDF5_LIBS) $(ZLIB_LIBS) -lm

TESTS += tests/ddpc-ckpt.sh
dist_check_SCRIPTS += tests/ddpc-ckpt.sh tests/safetensors_ref.py
