/* SPDX-License-Identifier: BSD-3-Clause */
/* model_cuda_kernels.cu: the CUDA model's kernels (model_cuda_kernels.h)
 * behind C launchers, one per kernel family; the host code is
 * model_cuda.c. The twins tests/emu/kernels_model.c compute the same on the
 * host for the emulation; the GPU is the only evidence for these. */
#include "model_cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>

namespace {

constexpr int kThreads = MK_THREADS;
constexpr int kLossThreads = MK_LOSS_THREADS;

template <typename T> __device__ inline float to_f(T v);
template <> __device__ inline float to_f<float>(float v) { return v; }
template <> __device__ inline float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ inline float to_f<__half>(__half v) { return __half2float(v); }
template <typename T> __device__ inline T from_f(float v);
template <> __device__ inline float from_f<float>(float v) { return v; }
template <> __device__ inline __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ inline __half from_f<__half>(float v) { return __float2half_rn(v); }

inline unsigned grid_for(size_t n)
{
    size_t b = (n + kThreads - 1) / kThreads;
    return b > 65535 * 8 ? 65535 * 8 : (unsigned)(b ? b : 1);
}

inline unsigned grid_cols(int n) { return (unsigned)((n + kThreads - 1) / kThreads); }

inline bool type_ok(cudaDataType_t t)
{
    return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F;
}

/* out[i] = T(in[i]) */
template <typename T> __global__ void k_cast(const float *in, T *out, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = from_f<T>(in[i]);
}

/* y (B rows of n) += bias, then ReLU if relu: the unfused forward epilogue */
template <typename T>
__global__ void k_bias_act(T *y, const T *bias, int n, size_t total, int relu)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = to_f<T>(y[i]) + to_f<T>(bias[i % n]);
        y[i] = from_f<T>(relu && !(v > 0.0f) ? 0.0f : v);
    }
}

/* One block: per row of z (B x C), softmax, cross-entropy, argmax (the
 * first maximum, as the cpu), and z overwritten by (p - onehot(y)) / B.
 * acc[0] += mean loss, acc[1] += sum of losses, acc[2] += hits, acc[3] += 1,
 * summed in a fixed order. */
__global__ void k_softmax_xent(float *z, const int *y, int B, int C, double *acc)
{
    __shared__ double s_loss[kLossThreads];
    __shared__ double s_hit[kLossThreads];
    double loss = 0, hits = 0;
    const float invB = 1.0f / (float)B;
    for (int i = threadIdx.x; i < B; i += blockDim.x) {
        float *r = z + (size_t)i * C;
        int arg = 0;
        for (int c = 1; c < C; c++)
            arg = r[c] > r[arg] ? c : arg;
        const float mx = r[arg];
        double sum = 0;
        for (int c = 0; c < C; c++)
            sum += (double)expf(r[c] - mx);
        const int yi = y[i];
        loss += log(sum) - (double)(r[yi] - mx);
        hits += arg == yi;
        for (int c = 0; c < C; c++) {
            float p = (float)((double)expf(r[c] - mx) / sum);
            r[c] = (p - (c == yi ? 1.0f : 0.0f)) * invB;
        }
    }
    s_loss[threadIdx.x] = loss;
    s_hit[threadIdx.x] = hits;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) {
            s_loss[threadIdx.x] += s_loss[threadIdx.x + k];
            s_hit[threadIdx.x] += s_hit[threadIdx.x + k];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        acc[0] += s_loss[0] / B;
        acc[1] += s_loss[0];
        acc[2] += s_hit[0];
        acc[3] += 1;
    }
}

/* out[i] = T(g[i] * f * (*ls)): the loss gradient scaled (out may be g) */
template <typename T>
__global__ void k_grad_prep(const float *g, T *out, size_t n, float f, const double *ls)
{
    const float k = ls ? f * (float)*ls : f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = from_f<T>(g[i] * k);
}

/* db[j] += src[j]: an epilogue's bias gradient into the arena */
template <typename T> __global__ void k_bias_add(float *db, const T *src, int n)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < n)
        db[j] += to_f<T>(src[j]);
}

/* db[j] += sum over the B rows of d (B x n), and, when act is given, d is
 * first zeroed where act (B x n) is not positive (the unfused ReLU gradient) */
template <typename T>
__global__ void k_bias_grad(T *d, const T *act, int n, int B, float *db)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n)
        return;
    float s = 0;
    for (int i = 0; i < B; i++) {
        size_t k = (size_t)i * n + j;
        float v = to_f<T>(d[k]);
        if (act && !(to_f<T>(act[k]) > 0.0f)) {
            v = 0.0f;
            d[k] = from_f<T>(0.0f);
        }
        s += v;
    }
    db[j] += s;
}

} /* namespace */

extern "C" {

cudaError_t mk_cast(const float *in, void *out, cudaDataType_t t, size_t n, cudaStream_t s)
{
    if (t == CUDA_R_32F)
        k_cast<<<grid_for(n), kThreads, 0, s>>>(in, (float *)out, n);
    else if (t == CUDA_R_16BF)
        k_cast<<<grid_for(n), kThreads, 0, s>>>(in, (__nv_bfloat16 *)out, n);
    else if (t == CUDA_R_16F)
        k_cast<<<grid_for(n), kThreads, 0, s>>>(in, (__half *)out, n);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

cudaError_t mk_bias_act(void *y, const void *bias, cudaDataType_t t, int n, int B, int relu,
                        cudaStream_t s)
{
    if (!type_ok(t) || n < 1 || B < 0)
        return cudaErrorInvalidValue;
    size_t total = (size_t)n * B;
    if (t == CUDA_R_32F)
        k_bias_act<<<grid_for(total), kThreads, 0, s>>>((float *)y, (const float *)bias, n, total,
                                                        relu);
    else if (t == CUDA_R_16BF)
        k_bias_act<<<grid_for(total), kThreads, 0, s>>>(
            (__nv_bfloat16 *)y, (const __nv_bfloat16 *)bias, n, total, relu);
    else
        k_bias_act<<<grid_for(total), kThreads, 0, s>>>((__half *)y, (const __half *)bias, n,
                                                        total, relu);
    return cudaGetLastError();
}

cudaError_t mk_softmax_xent(float *z, const int *y, int B, int C, double *acc, cudaStream_t s)
{
    if (B < 1 || C < 1)
        return cudaErrorInvalidValue;
    k_softmax_xent<<<1, kLossThreads, 0, s>>>(z, y, B, C, acc);
    return cudaGetLastError();
}

cudaError_t mk_grad_prep(const float *g, void *out, cudaDataType_t t, size_t n, float f,
                         const double *ls, cudaStream_t s)
{
    if (t == CUDA_R_32F)
        k_grad_prep<<<grid_for(n), kThreads, 0, s>>>(g, (float *)out, n, f, ls);
    else if (t == CUDA_R_16BF)
        k_grad_prep<<<grid_for(n), kThreads, 0, s>>>(g, (__nv_bfloat16 *)out, n, f, ls);
    else if (t == CUDA_R_16F)
        k_grad_prep<<<grid_for(n), kThreads, 0, s>>>(g, (__half *)out, n, f, ls);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

cudaError_t mk_bias_add(float *db, const void *src, cudaDataType_t t, int n, cudaStream_t s)
{
    if (!type_ok(t) || n < 1)
        return cudaErrorInvalidValue;
    if (t == CUDA_R_32F)
        k_bias_add<<<grid_cols(n), kThreads, 0, s>>>(db, (const float *)src, n);
    else if (t == CUDA_R_16BF)
        k_bias_add<<<grid_cols(n), kThreads, 0, s>>>(db, (const __nv_bfloat16 *)src, n);
    else
        k_bias_add<<<grid_cols(n), kThreads, 0, s>>>(db, (const __half *)src, n);
    return cudaGetLastError();
}

cudaError_t mk_bias_grad(void *d, const void *act, cudaDataType_t t, int n, int B, float *db,
                         cudaStream_t s)
{
    if (!type_ok(t) || n < 1 || B < 0)
        return cudaErrorInvalidValue;
    if (t == CUDA_R_32F)
        k_bias_grad<<<grid_cols(n), kThreads, 0, s>>>((float *)d, (const float *)act, n, B, db);
    else if (t == CUDA_R_16BF)
        k_bias_grad<<<grid_cols(n), kThreads, 0, s>>>((__nv_bfloat16 *)d,
                                                      (const __nv_bfloat16 *)act, n, B, db);
    else
        k_bias_grad<<<grid_cols(n), kThreads, 0, s>>>((__half *)d, (const __half *)act, n, B, db);
    return cudaGetLastError();
}

} /* extern "C" */

/* ------------------------------------------------------------------ BatchNorm1d */

__global__ void k_bn_stats(const float *z, int B, int C, float *mean, float *var)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    double sum = 0, q = 0;
    for (int i = 0; i < B; i++)
        sum += z[(size_t)i * C + c];
    double mu = sum / B;
    for (int i = 0; i < B; i++) {
        double d = z[(size_t)i * C + c] - mu;
        q += d * d;
    }
    mean[c] = (float)mu;
    var[c] = (float)(q / B);
}

__global__ void k_bn_forward(float *z, int B, int C, int train, const float *mean,
                             const float *var, const float *gamma, const float *beta,
                             float *rmean, float *rvar, float *rcount, const double *total,
                             float mom, double eps, float *xhat, float *invstd)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    float mu, is;
    if (train) {
        double n = total ? *total : (double)B;
        is = (float)(1.0 / sqrt((double)var[c] + eps));
        float unbiased = n > 1 ? (float)((double)var[c] * n / (n - 1)) : var[c];
        rmean[c] = (1.0f - mom) * rmean[c] + mom * mean[c];
        rvar[c] = (1.0f - mom) * rvar[c] + mom * unbiased;
        if (c == 0)
            rcount[0] += 1.0f;
        mu = mean[c];
        invstd[c] = is;
    } else {
        mu = rmean[c];
        is = (float)(1.0 / sqrt((double)rvar[c] + eps));
    }
    for (int i = 0; i < B; i++) {
        size_t k = (size_t)i * C + c;
        float x = (z[k] - mu) * is;
        if (train)
            xhat[k] = x;
        float y = gamma[c] * x + beta[c];
        z[k] = y > 0.0f ? y : 0.0f;
    }
}

__global__ void k_bn_backward_sums(float *d, const float *act, const float *xhat, int B, int C,
                                   float *dgamma, float *dbeta, float *sums)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    double a = 0, b = 0;
    for (int i = 0; i < B; i++) {
        size_t k = (size_t)i * C + c;
        float g = act[k] > 0.0f ? d[k] : 0.0f;
        d[k] = g;
        a += g;
        b += (double)g * xhat[k];
    }
    sums[c] = (float)a;
    sums[C + c] = (float)b;
    dbeta[c] += sums[c];
    dgamma[c] += sums[C + c];
}

__global__ void k_bn_backward_dx(float *d, const float *xhat, int B, int C, const float *gamma,
                                 const float *invstd, const float *sums, const double *total)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    const float inv_n = (float)(1.0 / (total ? *total : (double)B));
    const float sdy = sums[c] * inv_n, sdx = sums[C + c] * inv_n, k0 = gamma[c] * invstd[c];
    for (int i = 0; i < B; i++) {
        size_t k = (size_t)i * C + c;
        d[k] = k0 * (d[k] - sdy - xhat[k] * sdx);
    }
}

extern "C" {

cudaError_t mk_bn_stats(const float *z, int B, int C, float *mean, float *var, cudaStream_t s)
{
    if (B < 1 || C < 1)
        return cudaErrorInvalidValue;
    k_bn_stats<<<grid_cols(C), kThreads, 0, s>>>(z, B, C, mean, var);
    return cudaGetLastError();
}

cudaError_t mk_bn_forward(float *z, int B, int C, int train, const float *mean, const float *var,
                          const float *gamma, const float *beta, float *rmean, float *rvar,
                          float *rcount, const double *total, float momentum, double eps,
                          float *xhat, float *invstd, cudaStream_t s)
{
    if (B < 1 || C < 1)
        return cudaErrorInvalidValue;
    k_bn_forward<<<grid_cols(C), kThreads, 0, s>>>(z, B, C, train, mean, var, gamma, beta, rmean,
                                                   rvar, rcount, total, momentum, eps, xhat,
                                                   invstd);
    return cudaGetLastError();
}

cudaError_t mk_bn_backward_sums(float *d, const float *act, const float *xhat, int B, int C,
                                float *dgamma, float *dbeta, float *sums, cudaStream_t s)
{
    if (B < 1 || C < 1)
        return cudaErrorInvalidValue;
    k_bn_backward_sums<<<grid_cols(C), kThreads, 0, s>>>(d, act, xhat, B, C, dgamma, dbeta, sums);
    return cudaGetLastError();
}

cudaError_t mk_bn_backward_dx(float *d, const float *xhat, int B, int C, const float *gamma,
                              const float *invstd, const float *sums, const double *total,
                              cudaStream_t s)
{
    if (B < 1 || C < 1)
        return cudaErrorInvalidValue;
    k_bn_backward_dx<<<grid_cols(C), kThreads, 0, s>>>(d, xhat, B, C, gamma, invstd, sums, total);
    return cudaGetLastError();
}

} /* extern "C" */
