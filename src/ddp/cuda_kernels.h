/* SPDX-License-Identifier: BSD-3-Clause */
/* cuda_kernels.h: the engine's device code, callable from C (cuda_kernels.cu).
 * The optimizers' update rules over device arenas, twins of optim.c (same
 * order of operations, so the results match the CPU code to float rounding),
 * and the wire-compression copies, twins of reducer.c's loops. Everything is
 * enqueued on the stream given; nothing here synchronizes the host or
 * allocates. Only compiled --with-cuda. */
#ifndef DDPC_CUDA_KERNELS_H
#define DDPC_CUDA_KERNELS_H

#include "ddpc_ddp.h"

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The optimizer's scalars, in device memory (one per optimizer), so that the
 * loss-scaling skip decision and the clipping coefficient never reach the
 * host inside a step. The host reads it only when asked (checkpoints). */
typedef struct {
    double scale;            /* dynamic loss scale (1 when off) */
    double last_norm;        /* global gradient norm seen by the last step, before
                                clipping, after unscaling; INFINITY on overflow */
    unsigned long long steps; /* updates applied (AdamW's bias correction) */
    int good_steps;          /* steps since the scale last changed */
    int stepped;             /* the last step was applied (1) or skipped (0) */
} ddpc_cuda_optim_scalars_t;

/* The optimizer's hyper-parameters, in device memory (one per optimizer),
 * read by the kernels when they run: a CUDA graph that captured a step
 * replays it with the values of the replay's time, so ddpc_optim_set_lr
 * (a stream-ordered copy into this struct) reaches captured steps too. The
 * rules' structure (type, Nesterov, whether there is momentum, loss
 * scaling and its interval) is the launch's, passed by value. */
typedef struct {
    double lr, weight_decay, momentum, dampening, beta1, beta2, eps, clip_norm;
} ddpc_cuda_optim_hyper_t;

/* Doubles of device workspace ddpc_cuda_optim_step needs, one workspace per
 * optimizer: per-block partial sums of squares (at most
 * DDPC_CUDA_OPTIM_PARTIALS - 8 blocks, the count a function of n alone, so
 * the reduction order is fixed and every rank computes the same norm bit for
 * bit), and in its last 8 doubles the per-step factors (skip, 1/scale,
 * clipping coefficient, AdamW's bias corrections) that the decision kernel
 * hands to the update kernel. Two steps that may run at the same time (other
 * streams) need two workspaces. cudaMalloc'd (8-byte aligned); no need to
 * initialize it. */
#define DDPC_CUDA_OPTIM_PARTIALS 1024

/* One optimizer step over n elements, enqueued on stream, with optim.c's
 * rules (ddpc_optim_step): sum of squares of g in double; with dynamic loss
 * scaling, a non-finite sum skips the step and halves the scale, else g is
 * multiplied by 1/scale and the scale doubles after scale_growth_interval
 * good steps; clipping to clip_norm; then SGD (momentum buffer s0) or AdamW
 * (exp_avg s0, exp_avg_sq s1); steps++ when applied. g is modified in place
 * (unscaled, clipped) as on the CPU. s0/s1 may be NULL when the config has
 * no such state. sc, partials and hyper are device memory; the values of
 * the update (lr, weight decay, momentum, dampening, betas, eps, clip norm)
 * are read from hyper on the stream, the rest of cfg on the host.
 * Three kernels (sum of squares, decisions on one block, update); with
 * n == 0 only the decision kernel runs, so that steps, the loss scale and
 * the norm advance as on the CPU. Returns cudaErrorInvalidValue for a NULL
 * or missing argument (nothing enqueued), else cudaGetLastError() after the
 * launches. */
cudaError_t ddpc_cuda_optim_step(const ddpc_optim_config_t *cfg, size_t n, float *p, float *g,
                                 float *s0, float *s1, ddpc_cuda_optim_scalars_t *sc,
                                 double *partials, const ddpc_cuda_optim_hyper_t *hyper,
                                 cudaStream_t stream);

/* A sharded step (DDPC_SHARD on a device engine) is ddpc_cuda_optim_step in
 * two halves around the exchange of the slices' sums of squares:
 * ddpc_cuda_optim_sumsq writes the sum of squares of g[0, n) into *out
 * (device memory; kernel 1, then kernel 2's sum of the block partials in
 * its order; n == 0 writes 0). The caller gathers every rank's *out into
 * sums[0, nsums), in rank order, and ddpc_cuda_optim_apply makes the step's
 * decisions from their sum (added as kernel 2 adds block partials: thread
 * t adds sums[t], sums[t + 256], ..., then the fixed tree; the same bits on
 * every rank that holds the same sums) and updates n elements. Apply uses
 * only the factors tail of partials. Arguments and errors as
 * ddpc_cuda_optim_step. */
cudaError_t ddpc_cuda_optim_sumsq(size_t n, const float *g, double *partials, double *out,
                                  cudaStream_t stream);
cudaError_t ddpc_cuda_optim_apply(const ddpc_optim_config_t *cfg, size_t n, float *p, float *g,
                                  float *s0, float *s1, ddpc_cuda_optim_scalars_t *sc,
                                  double *partials, const double *sums, unsigned nsums,
                                  const ddpc_cuda_optim_hyper_t *hyper, cudaStream_t stream);

/* Wire compression: w[i] = half(g[i] * scale) (round to nearest even;
 * f16 != 0: IEEE half, else bfloat16), and back: g[i] = float(w[i]). Bit
 * for bit half.c's, NaNs included. n == 0 enqueues nothing. */
cudaError_t ddpc_cuda_pack_half(const float *g, uint16_t *w, size_t n, float scale, int f16,
                                cudaStream_t stream);
cudaError_t ddpc_cuda_unpack_half(const uint16_t *w, float *g, size_t n, int f16,
                                  cudaStream_t stream);

/* x[i] *= scale over n floats (the staged backend's AVG and the tests).
 * n == 0 enqueues nothing. */
cudaError_t ddpc_cuda_scale(float *x, size_t n, float scale, cudaStream_t stream);
/* y[i] += x[i] over n floats (shard grads: a micro-step's piece added into
 * the slice). n == 0 enqueues nothing. */
cudaError_t ddpc_cuda_add(float *y, const float *x, size_t n, cudaStream_t stream);

/* Synchronized batch normalization (batchnorm.c, whose host loop is the
 * twin): pack writes this rank's row of 2C + 2 floats into send, (hi, lo,
 * mean[0..C), var[0..C)) with the count hi * 2^24 + lo; combine reads the
 * all-gathered rows recv (size, 2C + 2) and writes the global mean and
 * biased variance into mean and var, and (total not NULL, one thread) the
 * global count; Chan's formula in double, ranks in order. One thread per
 * channel, kThreads per block, on stream. */
cudaError_t ddpc_cuda_bn_pack(float hi, float lo, const float *mean, const float *var, int C,
                              float *send, cudaStream_t stream);
cudaError_t ddpc_cuda_bn_combine(const float *recv, int size, int C, float *mean, float *var,
                                 double *total, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
