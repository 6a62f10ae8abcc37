/* SPDX-License-Identifier: BSD-3-Clause */
/* model_cuda_kernels.h: the CUDA model's device code, callable from C
 * (model_cuda_kernels.cu): the few kernels model_cuda.c runs around its
 * cuBLASLt GEMMs (casts, the unfused bias/ReLU epilogues, the loss, the bias
 * gradients). Each launcher enqueues one kernel on the stream given; nothing
 * here synchronizes the host or allocates. The element type of a templated
 * kernel is a cudaDataType_t: CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F, each
 * converted to float for the arithmetic and back with round-to-nearest-even
 * (__float2bfloat16_rn, __float2half_rn). A launcher returns
 * cudaErrorInvalidValue for an unsupported type or a size out of range
 * (nothing enqueued), else cudaGetLastError() after the launch. The host
 * twins are tests/emu/kernels_model.c (--with-cuda=emulate). Matrices are
 * row-major (B rows of n) as the model's activations; all pointers are
 * device memory. */
#ifndef TRAINER_MODEL_CUDA_KERNELS_H
#define TRAINER_MODEL_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <library_types.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Threads per block of every kernel but the loss, and the loss's one block. */
#define MK_THREADS 256
#define MK_LOSS_THREADS 1024

/* The largest power of two dividing the address, at most 256: the alignment
 * cuBLASLt's heuristics are told (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES),
 * and the one its emulation checks. */
static inline uint32_t mk_align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uint32_t k = 256;
    while (k > 1 && a % k)
        k /= 2;
    return k;
}

/* out[i] = t(in[i]) for i in [0, n): in float32, out of type t.
 * Grid-stride, MK_THREADS per block, ceil(n / MK_THREADS) blocks (at most
 * 65535 * 8; one when n == 0, which computes nothing). */
cudaError_t mk_cast(const float *in, void *out, cudaDataType_t t, size_t n, cudaStream_t s);

/* The unfused forward epilogue: y (B rows of n, type t) += bias (n, type t)
 * broadcast over the rows, computed in float and rounded once; then, if
 * relu, every value that is not > 0 (NaN included) becomes 0. Grid-stride
 * over n * B elements, as mk_cast. n >= 1, B >= 0. */
cudaError_t mk_bias_act(void *y, const void *bias, cudaDataType_t t, int n, int B, int relu,
                        cudaStream_t s);

/* The loss, on one block of MK_LOSS_THREADS threads: for each row i of z
 * (B x C float32), softmax, cross-entropy against label y[i] (in [0, C)),
 * the argmax (the first maximum), and the row overwritten by its gradient
 * (p - onehot(y[i])) / B. Thread t takes rows t, t + MK_LOSS_THREADS, ...
 * summing its losses (double) in that order; then a tree over the threads
 * (halving strides). acc (4 doubles): acc[0] += the mean loss, acc[1] +=
 * the sum of losses, acc[2] += the hits, acc[3] += 1. B >= 1, C >= 1. */
cudaError_t mk_softmax_xent(float *z, const int *y, int B, int C, double *acc, cudaStream_t s);

/* The loss gradient scaled: out[i] = t(g[i] * k) for i in [0, n), with
 * k = f * (float)*ls when ls (device, the dynamic loss scale) is given, else
 * f; *ls is read on the stream. g float32, out of type t; out may be g
 * (t == CUDA_R_32F). Grid-stride, as mk_cast. */
cudaError_t mk_grad_prep(const float *g, void *out, cudaDataType_t t, size_t n, float f,
                         const double *ls, cudaStream_t s);

/* An epilogue's bias gradient into the arena: db[j] += float(src[j]) for j
 * in [0, n): db float32, src of type t. One thread per j, MK_THREADS per
 * block, ceil(n / MK_THREADS) blocks. n >= 1. */
cudaError_t mk_bias_add(float *db, const void *src, cudaDataType_t t, int n, cudaStream_t s);

/* The unfused bias gradient: db[j] += the sum over the B rows of d (B rows
 * of n, type t) of column j, summed in float in row order from 0. When act
 * (B x n, type t: the forward's ReLU output) is given, d is first zeroed
 * (written back as 0) where act is not > 0, and those zeros are summed: the
 * ReLU's gradient. db float32 (n). One thread per column, as mk_bias_add.
 * n >= 1, B >= 0. */
cudaError_t mk_bias_grad(void *d, const void *act, cudaDataType_t t, int n, int B, float *db,
                         cudaStream_t s);

/* BatchNorm1d, float32, one thread per channel c of C, MK_THREADS per block,
 * ceil(C / MK_THREADS) blocks; z, d, xhat, act are (B rows of C); the
 * arithmetic is model_cpu.c's (bn_forward, bn_backward), operation for
 * operation. n is the statistics' count: *total (device, the global count
 * from ddpc_batchnorm_stats) when total is given, else B.
 * mk_bn_stats: mean[c], var[c] = the mean and biased variance of column c,
 * two passes in double over the rows in order.
 * mk_bn_forward: train: invstd[c] = 1/sqrt(var + eps); the running
 * statistics move (momentum, the unbiased variance var * n / (n - 1)),
 * rcount[0] += 1 (thread 0); xhat = (z - mean) * invstd; z = relu(gamma *
 * xhat + beta). Eval (train 0): the running statistics instead, and
 * nothing but z is written.
 * mk_bn_backward_sums: d zeroed where act is not > 0 (the ReLU's gradient),
 * then sums[c] = sum of d, sums[C + c] = sum of d * xhat (double, then
 * float), dbeta[c] += sums[c], dgamma[c] += sums[C + c].
 * mk_bn_backward_dx: d = gamma * invstd * (d - sums[c] * (1/n) - xhat *
 * sums[C + c] * (1/n)), in place (sums all-reduced over the ranks first for
 * SyncBatchNorm). C >= 1, B >= 1. */
cudaError_t mk_bn_stats(const float *z, int B, int C, float *mean, float *var, cudaStream_t s);
cudaError_t mk_bn_forward(float *z, int B, int C, int train, const float *mean, const float *var,
                          const float *gamma, const float *beta, float *rmean, float *rvar,
                          float *rcount, const double *total, float momentum, double eps,
                          float *xhat, float *invstd, cudaStream_t s);
cudaError_t mk_bn_backward_sums(float *d, const float *act, const float *xhat, int B, int C,
                                float *dgamma, float *dbeta, float *sums, cudaStream_t s);
cudaError_t mk_bn_backward_dx(float *d, const float *xhat, int B, int C, const float *gamma,
                              const float *invstd, const float *sums, const double *total,
                              cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
