# SPDX-License-Identifier: BSD-3-Clause
# tests/gpu.mk: fragment of the top Makefile.am: the GPU path's tests. They
# build --with-cuda (gpu_boot needs NCCL) and exit 77 with the reason where
# no GPU is usable (here and in CI); scripts/gpu-check.sh runs them on a GPU.
#  gpu_optim     the optimizers' CUDA kernels against the CPU code (100 steps)
#  gpu_comm.mpi  device collectives (mpi-staged with 1/2/4 ranks on one GPU,
#                nccl with 1), stream order, timeout; GPU_COMM_BENCH=1: busbw
#  gpu_groups.mpi communicators over some ranks (split, grid), point-to-point
#                and alltoall, gather, scatter, reduce on device memory
#                (mpi-staged, nccl with a GPU per rank), mpi-staged's timeout
#  gpu-groups-timeout.sh nccl's send timeout (the watchdog), alone
#  gpu_ddp.mpi   the device DDP engine: N ranks x B = 1 x N*B, identical
#                parameters on all ranks, compression, checkpoint round trip
#  gpu_graph.mpi a DDP step captured in a CUDA graph (nccl): set_lr between
#                replays, DDPC_CHECK_PARAMS, a global-mode capture beside the
#                watchdog
#  gpu_model     the trainer's CUDA model against its cpu twin (fp32 fused and
#                unfused, bf16, fp16): losses, hits, gradients, grad_ready order
#  gpu-boot.sh   the nccl bootstrap under mpiexec: no GPU -> one message per rank
#  slurm-nccl.sh srun --mpi=pmix with the nccl backend and MPICH (no PMIx client)
#  trainer-gpu.sh the trainer --device cuda against the CPU trainer: fp32,
#                bf16, fp16, graphs, accumulation, resume, checkpoints across
#                kinds (on a GPU, or under configure --with-cuda=emulate)
dist_check_SCRIPTS += tests/gpu-boot.sh tests/slurm-nccl.sh tests/trainer-gpu.sh \
	tests/gpu-groups-timeout.sh
TESTS += tests/gpu-boot.sh tests/slurm-nccl.sh tests/trainer-gpu.sh tests/gpu-groups-timeout.sh
if HAVE_NCCL
check_PROGRAMS += tests/gpu_boot
tests_gpu_boot_SOURCES = tests/gpu_boot.c
tests_gpu_boot_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CFLAGS)
tests_gpu_boot_LDFLAGS = $(DDPC_TEST_LD)
tests_gpu_boot_LDADD = libddpc.la $(CUDA_LIBS)
endif
if HAVE_CUDA
# the kernels are hidden in libddpc.so: the test links their object itself
check_PROGRAMS += tests/gpu_optim
tests_gpu_optim_SOURCES = tests/gpu_optim.c
tests_gpu_optim_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/src/ddp $(CUDA_CFLAGS)
tests_gpu_optim_LDFLAGS = $(DDPC_TEST_LD)
if HAVE_NVCC
tests_gpu_optim_LDADD = src/ddp/cuda_kernels.lo libddpc.la $(CUDA_LIBS) -lm
else
tests_gpu_optim_LDADD = libddpc.la $(CUDA_LIBS) -lm
endif
TESTS += tests/gpu_optim
check_PROGRAMS += tests/gpu_comm tests/gpu_ddp tests/gpu_groups
tests_gpu_comm_SOURCES = tests/gpu_comm.c tests/gputest.h
tests_gpu_comm_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CFLAGS)
tests_gpu_comm_LDFLAGS = $(DDPC_TEST_LD)
tests_gpu_comm_LDADD = libddpc.la $(CUDA_LIBS) -lm
tests_gpu_groups_SOURCES = tests/gpu_groups.c tests/gputest.h
tests_gpu_groups_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CFLAGS)
tests_gpu_groups_LDFLAGS = $(DDPC_TEST_LD)
tests_gpu_groups_LDADD = libddpc.la $(CUDA_LIBS) -lm
tests_gpu_ddp_SOURCES = tests/gpu_ddp.c tests/gputest.h tests/linear_model.h
tests_gpu_ddp_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CFLAGS) $(HDF5_CFLAGS)
tests_gpu_ddp_LDFLAGS = $(DDPC_TEST_LD)
tests_gpu_ddp_LDADD = libddpc.la $(CUDA_LIBS) -lm
check_PROGRAMS += tests/gpu_graph
tests_gpu_graph_SOURCES = tests/gpu_graph.c tests/gputest.h
tests_gpu_graph_CPPFLAGS = $(AM_CPPFLAGS) $(CUDA_CFLAGS)
tests_gpu_graph_LDFLAGS = $(DDPC_TEST_LD)
tests_gpu_graph_LDADD = libddpc.la $(CUDA_LIBS) -lm
TESTS += tests/gpu_comm.mpi tests/gpu_ddp.mpi tests/gpu_graph.mpi tests/gpu_groups.mpi
endif
dist_check_DATA += tests/gpu_comm.mpi tests/gpu_ddp.mpi tests/gpu_graph.mpi tests/gpu_groups.mpi
if HAVE_CUBLASLT
check_PROGRAMS += tests/gpu_model
tests_gpu_model_SOURCES = tests/gpu_model.c
tests_gpu_model_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/examples -DTRAINER_HAVE_CUDA_MODEL \
	$(CUDA_CFLAGS)
tests_gpu_model_LDFLAGS = $(DDPC_TEST_LD)
tests_gpu_model_LDADD = examples/libtrainer.la libddpc.la $(CUDA_LIBS) -lm
TESTS += tests/gpu_model
endif
