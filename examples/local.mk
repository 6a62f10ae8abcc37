# SPDX-License-Identifier: BSD-3-Clause
# examples: the reference trainer (./trainer in the build tree, installed) and
# its parts. The parts the unit tests need are a convenience library.
noinst_LTLIBRARIES += examples/libtrainer.la
examples_libtrainer_la_SOURCES = \
	examples/model.h examples/model.c examples/model_cpu.c \
	examples/options.h examples/options.c examples/marker.h examples/marker.c \
	examples/device.h examples/device.c
examples_libtrainer_la_CPPFLAGS = $(AM_CPPFLAGS) $(BLAS_CFLAGS)
examples_libtrainer_la_LIBADD = $(BLAS_LIBS) -lm
trainer_cuda_cppflags =
EXTRA_DIST += examples/model_cuda.c examples/model_cuda_kernels.cu examples/model_cuda_kernels.h
if HAVE_CUBLASLT
# the CUDA model: host code in C, its kernels through nvcc (the .cu.lo rule
# of Makefile.am)
examples_libtrainer_la_SOURCES += examples/model_cuda.c examples/model_cuda_kernels.h
if HAVE_NVCC
examples_libtrainer_la_SOURCES += examples/model_cuda_kernels.cu
endif
examples_libtrainer_la_LIBADD += $(CUBLASLT_LIBS) $(CUDA_LIBS)
trainer_cuda_cppflags += -DTRAINER_HAVE_CUDA_MODEL $(CUDA_CFLAGS)
endif
examples_libtrainer_la_CPPFLAGS += $(trainer_cuda_cppflags)

if HAVE_CHECK
check_PROGRAMS += tests/check_trainer
tests_check_trainer_SOURCES = tests/check_trainer.c
tests_check_trainer_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/examples
tests_check_trainer_CFLAGS = $(DDPC_TEST_CF)
tests_check_trainer_LDFLAGS = $(DDPC_TEST_LD)
tests_check_trainer_LDADD = examples/libtrainer.la $(DDPC_TEST_LIBS) -lm
TESTS += tests/check_trainer
endif

# the trainer: ./trainer at the top of the build tree, installed in bindir
bin_PROGRAMS += trainer
trainer_SOURCES = examples/trainer.c examples/trainer.h examples/trainer_util.c \
	examples/trainer_ckpt.c examples/trainer_pipe.c
trainer_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/examples $(ZLIB_CFLAGS) $(trainer_cuda_cppflags)
trainer_LDADD = examples/libtrainer.la libddpc.la $(ZLIB_LIBS) -lm

TESTS += tests/trainer.sh tests/trainer-slurm.sh tests/trainer-preempt.sh tests/slurm-faults.sh \
	tests/trainer-resume.sh tests/trainer-sigint.sh tests/trainer-errors.sh tests/trainer-lock.sh \
	tests/trainer-pipeline.sh tests/trainer-pipeline-faults.sh tests/timeline.sh tests/trainer-bn.sh \
	tests/trainer-shard.sh tests/trainer-pmix.sh
dist_check_SCRIPTS += tests/trainer.sh tests/trainer-slurm.sh tests/trainer-preempt.sh \
	tests/slurm-faults.sh tests/trainer-resume.sh tests/trainer-sigint.sh tests/trainer-lock.sh \
	tests/trainer-errors.sh tests/trainer-pipeline.sh tests/trainer-pipeline-faults.sh tests/timeline.sh \
	tests/trainer-bn.sh tests/trainer-shard.sh tests/trainer-pmix.sh
