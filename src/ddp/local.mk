# SPDX-License-Identifier: BSD-3-Clause
# src/ddp: the DDP engine (registry, bucket plan, reducer) and the optimizers.
include_HEADERS += include/ddpc_ddp.h
libddpc_la_SOURCES += src/ddp/ddp_internal.h src/ddp/ddp.c src/ddp/reducer.c src/ddp/optim.c \
	src/ddp/batchnorm.c
if HAVE_CUDA
libddpc_la_SOURCES += src/ddp/cuda_kernels.h
if HAVE_NVCC
libddpc_la_SOURCES += src/ddp/cuda_kernels.cu
endif
endif
EXTRA_DIST += src/ddp/cuda_kernels.h src/ddp/cuda_kernels.cu
if HAVE_CHECK
check_PROGRAMS += tests/mpi_ddp
tests_mpi_ddp_SOURCES = tests/mpi_ddp.c tests/mpitest.h tests/linear_model.h
tests_mpi_ddp_CFLAGS = $(DDPC_TEST_CF)
tests_mpi_ddp_LDFLAGS = $(DDPC_TEST_LD)
tests_mpi_ddp_LDADD = $(DDPC_TEST_LIBS) -lm
TESTS += tests/ddp.mpi
endif
dist_check_DATA += tests/ddp.mpi
