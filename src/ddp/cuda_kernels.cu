/* SPDX-License-Identifier: BSD-3-Clause */
/* cuda_kernels.cu: the engine's device code (cuda_kernels.h): the optimizer
 * step over device arenas, the twin of optim.c's ddpc_optim_step, and the
 * wire-compression copies, twins of half.c / reducer.c. Not a second
 * optimizer: every rule here is optim.c's, in the same order of operations,
 * and tests/gpu_optim.c holds the two against each other.
 *
 * Rounding. nvcc contracts a*b+c into one FMA by default; the CPU build has
 * no FMA (x86-64 without -mfma), so each float and double operation whose
 * rounding matters is written as an explicit round-to-nearest intrinsic
 * (__fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn, __fsqrt_rn, __dmul_rn, ...),
 * which nvcc never fuses and --use_fast_math does not approximate. Subnormals
 * must not be flushed (no -ftz=true, which --use_fast_math implies): the CPU
 * keeps them. */
#include "cuda_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

namespace {

constexpr unsigned kThreads = 256;      /* threads per block, every kernel */
constexpr unsigned kMaxGrid = 4096;     /* grid cap of the element-wise kernels */

/* The per-step factors that the decision kernel hands to the update kernel.
 * They live in the tail of the caller's partials workspace (the last
 * kFactorDoubles doubles), not in a __device__ static, so that several
 * optimizers (each with its own workspace) can step on different streams. */
struct step_factors {
    unsigned long long steps; /* steps before this one: SGD's first-step buffer */
    float inv;                /* 1/scale, applied when unscale */
    float coef;               /* clipping coefficient, applied when clip */
    float step_size;          /* AdamW: lr / (1 - beta1^t) */
    float inv_sqrt_bc2;       /* AdamW: 1 / sqrt(1 - beta2^t) */
    float decay;              /* AdamW: 1 - lr * weight_decay */
    float lr, wd, mu, damp;   /* SGD's constants, cast to float as optim.c */
    float b1, omb1, b2, omb2, eps; /* AdamW's, float betas and eps, 1 - beta in float */
    int apply;                /* 0: the step was skipped (overflow): touch nothing */
    int unscale;              /* dynamic loss scaling: g *= inv */
    int clip;                 /* clipping applies this step: g *= coef */
};

constexpr unsigned kFactorDoubles = 16; /* 128 bytes of the workspace's tail */
static_assert(sizeof(step_factors) <= kFactorDoubles * sizeof(double),
              "step_factors must fit the workspace tail");
static_assert(alignof(step_factors) <= alignof(double), "workspace tail alignment");

/* Blocks of the sum of squares: partials[0, kSumBlocks) per block, the tail
 * the factors. */
constexpr unsigned kSumBlocks = DDPC_CUDA_OPTIM_PARTIALS - kFactorDoubles;
static_assert(kSumBlocks >= 1 && kSumBlocks <= DDPC_CUDA_OPTIM_PARTIALS, "workspace size");

inline step_factors *factors_of(double *partials)
{
    return reinterpret_cast<step_factors *>(partials + kSumBlocks);
}

/* ceil(n / kThreads), at most cap; n > 0 */
inline unsigned grid_for(size_t n, unsigned cap)
{
    size_t b = n / kThreads + (n % kThreads != 0);
    return b < cap ? (unsigned)b : cap;
}

/* The structure of the rules, by value; their values are in the device's
 * ddpc_cuda_optim_hyper_t, read by the decision kernel, which hands the
 * update kernel its float constants (cast as optim.c casts them) in the
 * factors. (decay, a double expression a - b*c, is made with explicit
 * roundings, so no compiler flag can fuse it.) */
struct decide_args {
    int dynamic, interval, adamw;
};

struct sgd_args {
    int mom, nesterov;
};

/* Block-wide sum of v over kThreads threads, in a fixed tree order; the
 * result is valid in thread 0. Every thread of the block must call it. */
__device__ double block_sum(double v)
{
    __shared__ double sh[kThreads];
    const unsigned t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (unsigned w = kThreads / 2; w > 0; w >>= 1) {
        if (t < w)
            sh[t] = __dadd_rn(sh[t], sh[t + w]);
        __syncthreads();
    }
    return sh[0];
}

/* Kernel 1: partials[b] = sum over i = b*kThreads + t + k*(gridDim.x*kThreads)
 * of (double)g[i]^2. Launch: grid_for(n, kSumBlocks) blocks (a function of n
 * only, so the order is the same on every rank and every run) x kThreads
 * threads, on the step's stream. Each thread adds its elements in index
 * order, then the block sums its threads in a fixed tree. The product of two
 * floats is exact in double, so the explicit __dmul_rn only documents intent. */
__global__ void __launch_bounds__(kThreads)
sumsq_partials(const float *__restrict__ g, size_t n, double *__restrict__ partials)
{
    double s = 0;
    const size_t stride = (size_t)gridDim.x * kThreads;
    for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
        const double x = (double)g[i];
        s = __dadd_rn(s, __dmul_rn(x, x));
    }
    s = block_sum(s);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = s;
}

/* Kernel 2: the step's decisions, optim.c's ddpc_optim_step up to the update.
 * (A sharded step passes the ranks' sums of squares as its partials.)
 * Launch: 1 block x kThreads threads, on the step's stream, after kernel 1.
 * Thread t adds partials[t], partials[t + kThreads], ... (< nblocks) in
 * order, the block sums in a fixed tree, and thread 0 alone reads and writes
 * *sc and the factors. nblocks == 0 (n == 0): the sum is 0, as on the CPU.
 * steps is incremented here when the step applies; the update kernel uses
 * the pre-increment value saved in the factors. */
__device__ double sum_partials(const double *__restrict__ partials, unsigned nblocks)
{
    double s = 0;
    for (unsigned b = threadIdx.x; b < nblocks; b += kThreads)
        s = __dadd_rn(s, partials[b]);
    return block_sum(s);
}

/* A sharded step's first half: *out = the sum of partials[0, nblocks), as
 * kernel 2 sums them. Launch: 1 block x kThreads threads, after kernel 1. */
__global__ void __launch_bounds__(kThreads)
sumsq_total(const double *__restrict__ partials, unsigned nblocks, double *__restrict__ out)
{
    const double ss = sum_partials(partials, nblocks);
    if (threadIdx.x == 0)
        *out = ss;
}

__global__ void __launch_bounds__(kThreads)
optim_decide(const double *__restrict__ partials, unsigned nblocks,
             ddpc_cuda_optim_scalars_t *__restrict__ sc, step_factors *__restrict__ fac,
             const ddpc_cuda_optim_hyper_t *__restrict__ hyper, decide_args a)
{
    double ss = sum_partials(partials, nblocks);
    if (threadIdx.x != 0)
        return;

    ddpc_cuda_optim_scalars_t st = *sc;
    const ddpc_cuda_optim_hyper_t hy = *hyper;
    step_factors f;
    f.steps = st.steps;
    f.inv = 1.0f;
    f.coef = 1.0f;
    f.step_size = 0.0f;
    f.inv_sqrt_bc2 = 0.0f;
    f.decay = 1.0f;
    f.apply = 0;
    f.unscale = 0;
    f.clip = 0;
    f.lr = (float)hy.lr;
    f.wd = (float)hy.weight_decay;
    f.mu = (float)hy.momentum;
    f.damp = __fsub_rn(1.0f, (float)hy.dampening);
    f.b1 = (float)hy.beta1;
    f.omb1 = __fsub_rn(1.0f, f.b1);
    f.b2 = (float)hy.beta2;
    f.omb2 = __fsub_rn(1.0f, f.b2);
    f.eps = (float)hy.eps;

    if (a.dynamic) {
        if (!isfinite(ss)) { /* overflow: skip, back off (identical on all ranks) */
            st.scale = __dmul_rn(st.scale, 0.5);
            st.good_steps = 0;
            st.last_norm = INFINITY;
            st.stepped = 0;
            *sc = st;
            *fac = f;
            return;
        }
        f.inv = (float)__ddiv_rn(1.0, st.scale);
        f.unscale = 1;
        ss = __ddiv_rn(ss, __dmul_rn(st.scale, st.scale));
        if (++st.good_steps >= a.interval) {
            st.scale = __dmul_rn(st.scale, 2.0);
            st.good_steps = 0;
        }
    }
    st.last_norm = __dsqrt_rn(ss);
    if (hy.clip_norm > 0 && st.last_norm > hy.clip_norm) {
        f.coef = (float)__ddiv_rn(hy.clip_norm, __dadd_rn(st.last_norm, 1e-6));
        f.clip = 1;
    }
    if (a.adamw) {
        const double t = (double)(st.steps + 1);
        f.step_size = (float)__ddiv_rn(hy.lr, __dsub_rn(1.0, pow(hy.beta1, t)));
        f.inv_sqrt_bc2 = (float)__ddiv_rn(1.0, __dsqrt_rn(__dsub_rn(1.0, pow(hy.beta2, t))));
        f.decay = (float)__dsub_rn(1.0, __dmul_rn(hy.lr, hy.weight_decay));
    }
    f.apply = 1;
    st.steps++;
    st.stepped = 1;
    *sc = st;
    *fac = f;
}

/* g[i] unscaled and clipped as optim.c does (two roundings, in that order),
 * written back when changed; returns the new g[i]. */
__device__ __forceinline__ float prepare_grad(float *__restrict__ g, size_t i, const step_factors &f)
{
    float gi = g[i];
    if (f.unscale)
        gi = __fmul_rn(gi, f.inv);
    if (f.clip)
        gi = __fmul_rn(gi, f.coef);
    if (f.unscale || f.clip)
        g[i] = gi;
    return gi;
}

/* Kernel 3 (SGD): optim.c's sgd() per element. Launch: grid_for(n, kMaxGrid)
 * blocks x kThreads threads, grid-stride, on the step's stream, after kernel
 * 2. buf (the momentum buffer) is read only when the rule uses it. */
__global__ void __launch_bounds__(kThreads)
sgd_update(size_t n, float *__restrict__ p, float *__restrict__ g, float *__restrict__ buf,
           const step_factors *__restrict__ fac, sgd_args a)
{
    const step_factors f = *fac;
    if (!f.apply)
        return;
    const bool first = f.steps == 0;
    const size_t stride = (size_t)gridDim.x * kThreads;
    for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
        const float pi = p[i];
        float gi = __fadd_rn(prepare_grad(g, i, f), __fmul_rn(f.wd, pi));
        if (a.mom) {
            const float b = first ? gi : __fadd_rn(__fmul_rn(f.mu, buf[i]), __fmul_rn(f.damp, gi));
            buf[i] = b;
            gi = a.nesterov ? __fadd_rn(gi, __fmul_rn(f.mu, b)) : b;
        }
        p[i] = __fsub_rn(pi, __fmul_rn(f.lr, gi));
    }
}

/* Kernel 3 (AdamW): optim.c's adamw() per element. Launch as sgd_update.
 * m = exp_avg, v = exp_avg_sq. */
__global__ void __launch_bounds__(kThreads)
adamw_update(size_t n, float *__restrict__ p, float *__restrict__ g, float *__restrict__ m,
             float *__restrict__ v, const step_factors *__restrict__ fac)
{
    const step_factors f = *fac;
    if (!f.apply)
        return;
    const size_t stride = (size_t)gridDim.x * kThreads;
    for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
        const float gi = prepare_grad(g, i, f);
        const float pi = __fmul_rn(p[i], f.decay);
        const float mi = __fadd_rn(__fmul_rn(f.b1, m[i]), __fmul_rn(f.omb1, gi));
        const float vi = __fadd_rn(__fmul_rn(f.b2, v[i]), __fmul_rn(__fmul_rn(f.omb2, gi), gi));
        m[i] = mi;
        v[i] = vi;
        const float den = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), f.inv_sqrt_bc2), f.eps);
        p[i] = __fsub_rn(pi, __fdiv_rn(__fmul_rn(f.step_size, mi), den));
    }
}

/* half.c's conversions: the intrinsics round to nearest even like half.c;
 * NaN is handled first so that the bits match half.c's (the intrinsics
 * return a canonical NaN). */
__device__ __forceinline__ uint16_t to_bf16(float x)
{
    const uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

__device__ __forceinline__ uint16_t to_f16(float x)
{
    const uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u);
    return __half_as_ushort(__float2half_rn(x));
}

__device__ __forceinline__ float from_bf16(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ float from_f16(uint16_t h)
{
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) /* NaN: keep its payload as half.c */
        return __uint_as_float(((uint32_t)(h & 0x8000u) << 16) | 0x7f800000u |
                               ((uint32_t)(h & 0x3ffu) << 13));
    return __half2float(__ushort_as_half(h));
}

/* x * s as the CPU computes it, NaN included: x86's mulss returns a NaN
 * operand quieted, payload and sign kept, where the GPU's multiply returns
 * its canonical NaN; so a NaN gradient crosses the wire with the same bits
 * from either kind of rank. (s is 1/N or a loss scale: never a NaN.) */
__device__ __forceinline__ float mul_like_cpu(float x, float s)
{
    const uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return __uint_as_float(u | 0x400000u);
    return __fmul_rn(x, s);
}

/* w[i] = half(g[i] * scale). Launch: grid_for(n, kMaxGrid) x kThreads,
 * grid-stride, on the caller's stream. */
__global__ void __launch_bounds__(kThreads)
pack_half(const float *__restrict__ g, uint16_t *__restrict__ w, size_t n, float scale, int f16)
{
    const size_t stride = (size_t)gridDim.x * kThreads;
    for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride) {
        const float x = mul_like_cpu(g[i], scale);
        w[i] = f16 ? to_f16(x) : to_bf16(x);
    }
}

/* g[i] = float(w[i]). Launch as pack_half. */
__global__ void __launch_bounds__(kThreads)
unpack_half(const uint16_t *__restrict__ w, float *__restrict__ g, size_t n, int f16)
{
    const size_t stride = (size_t)gridDim.x * kThreads;
    for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride)
        g[i] = f16 ? from_f16(w[i]) : from_bf16(w[i]);
}

/* x[i] *= scale. Launch as pack_half. */
__global__ void __launch_bounds__(kThreads) scale_kernel(float *__restrict__ x, size_t n, float scale)
{
    const size_t stride = (size_t)gridDim.x * kThreads;
    for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride)
        x[i] = mul_like_cpu(x[i], scale);
}

__global__ void __launch_bounds__(kThreads)
    add_kernel(float *__restrict__ y, const float *__restrict__ x, size_t n)
{
    const size_t stride = (size_t)gridDim.x * kThreads;
    for (size_t i = (size_t)blockIdx.x * kThreads + threadIdx.x; i < n; i += stride)
        y[i] = __fadd_rn(y[i], x[i]);
}

/* The argument checks of a step's launchers; 0 when they hold. */
int bad_step_args(const ddpc_optim_config_t *cfg, size_t n, const float *p, const float *g,
                  const float *s0, const float *s1, const void *sc, const double *partials,
                  const void *hyper)
{
    if (!cfg || !sc || !partials || !hyper ||
        (cfg->type != DDPC_OPTIM_SGD && cfg->type != DDPC_OPTIM_ADAMW))
        return 1;
    const int adamw = cfg->type == DDPC_OPTIM_ADAMW;
    const int mom = (float)cfg->momentum > 0.0f;
    return n > 0 && (!p || !g || (adamw ? (!s0 || !s1) : (mom && !s0)));
}

/* Kernels 2 and 3: decisions from sums[0, nsums), the update of n elements. */
void decide_and_update(const ddpc_optim_config_t *cfg, size_t n, float *p, float *g, float *s0,
                       float *s1, ddpc_cuda_optim_scalars_t *sc, double *partials,
                       const double *sums, unsigned nsums, const ddpc_cuda_optim_hyper_t *hyper,
                       cudaStream_t stream)
{
    const int adamw = cfg->type == DDPC_OPTIM_ADAMW;
    sgd_args sa;
    sa.mom = (float)cfg->momentum > 0.0f;
    sa.nesterov = cfg->nesterov != 0;
    decide_args da;
    da.dynamic = cfg->dynamic_loss_scale != 0;
    da.interval = cfg->scale_growth_interval;
    da.adamw = adamw;
    step_factors *fac = factors_of(partials);
    optim_decide<<<1, kThreads, 0, stream>>>(sums, nsums, sc, fac, hyper, da);

    if (n > 0) {
        const unsigned grid = grid_for(n, kMaxGrid);
        if (adamw)
            adamw_update<<<grid, kThreads, 0, stream>>>(n, p, g, s0, s1, fac);
        else
            sgd_update<<<grid, kThreads, 0, stream>>>(n, p, g, s0, fac, sa);
    }
}

} /* namespace */

extern "C" cudaError_t ddpc_cuda_optim_step(const ddpc_optim_config_t *cfg, size_t n, float *p,
                                            float *g, float *s0, float *s1,
                                            ddpc_cuda_optim_scalars_t *sc, double *partials,
                                            const ddpc_cuda_optim_hyper_t *hyper,
                                            cudaStream_t stream)
{
    if (bad_step_args(cfg, n, p, g, s0, s1, sc, partials, hyper))
        return cudaErrorInvalidValue;
    /* n == 0 still runs the decision kernel: the CPU's step counts, grows the
     * loss scale and records a zero norm with an empty arena too. */
    const unsigned nb = n > 0 ? grid_for(n, kSumBlocks) : 0;
    if (nb > 0)
        sumsq_partials<<<nb, kThreads, 0, stream>>>(g, n, partials);
    decide_and_update(cfg, n, p, g, s0, s1, sc, partials, partials, nb, hyper, stream);
    return cudaGetLastError();
}

extern "C" cudaError_t ddpc_cuda_optim_sumsq(size_t n, const float *g, double *partials,
                                             double *out, cudaStream_t stream)
{
    if (!partials || !out || (n > 0 && !g))
        return cudaErrorInvalidValue;
    const unsigned nb = n > 0 ? grid_for(n, kSumBlocks) : 0;
    if (nb > 0)
        sumsq_partials<<<nb, kThreads, 0, stream>>>(g, n, partials);
    sumsq_total<<<1, kThreads, 0, stream>>>(partials, nb, out);
    return cudaGetLastError();
}

extern "C" cudaError_t ddpc_cuda_optim_apply(const ddpc_optim_config_t *cfg, size_t n, float *p,
                                             float *g, float *s0, float *s1,
                                             ddpc_cuda_optim_scalars_t *sc, double *partials,
                                             const double *sums, unsigned nsums,
                                             const ddpc_cuda_optim_hyper_t *hyper,
                                             cudaStream_t stream)
{
    if (bad_step_args(cfg, n, p, g, s0, s1, sc, partials, hyper) || !sums || nsums == 0)
        return cudaErrorInvalidValue;
    decide_and_update(cfg, n, p, g, s0, s1, sc, partials, sums, nsums, hyper, stream);
    return cudaGetLastError();
}

extern "C" cudaError_t ddpc_cuda_pack_half(const float *g, uint16_t *w, size_t n, float scale,
                                           int f16, cudaStream_t stream)
{
    if (n == 0)
        return cudaGetLastError();
    if (!g || !w)
        return cudaErrorInvalidValue;
    pack_half<<<grid_for(n, kMaxGrid), kThreads, 0, stream>>>(g, w, n, scale, f16);
    return cudaGetLastError();
}

extern "C" cudaError_t ddpc_cuda_unpack_half(const uint16_t *w, float *g, size_t n, int f16,
                                             cudaStream_t stream)
{
    if (n == 0)
        return cudaGetLastError();
    if (!g || !w)
        return cudaErrorInvalidValue;
    unpack_half<<<grid_for(n, kMaxGrid), kThreads, 0, stream>>>(w, g, n, f16);
    return cudaGetLastError();
}

extern "C" cudaError_t ddpc_cuda_scale(float *x, size_t n, float scale, cudaStream_t stream)
{
    if (n == 0)
        return cudaGetLastError();
    if (!x)
        return cudaErrorInvalidValue;
    scale_kernel<<<grid_for(n, kMaxGrid), kThreads, 0, stream>>>(x, n, scale);
    return cudaGetLastError();
}

extern "C" cudaError_t ddpc_cuda_add(float *y, const float *x, size_t n, cudaStream_t stream)
{
    if (n == 0)
        return cudaGetLastError();
    if (!y || !x)
        return cudaErrorInvalidValue;
    add_kernel<<<grid_for(n, kMaxGrid), kThreads, 0, stream>>>(y, x, n);
    return cudaGetLastError();
}

/* ------------------------------------------------------- synchronized batch norm */

/* grid ceil((C + 1) / kThreads) x kThreads; thread c < C copies channel c,
 * thread 0 the count */
__global__ void bn_pack_kernel(float hi, float lo, const float *mean, const float *var, int C,
                               float *send)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c == 0) {
        send[0] = hi;
        send[1] = lo;
    }
    if (c < C) {
        send[2 + c] = mean[c];
        send[2 + C + c] = var[c];
    }
}

/* grid ceil(C / kThreads) x kThreads; thread c combines channel c over the
 * ranks in order (batchnorm.c's bn_combine_host) */
__global__ void bn_combine_kernel(const float *recv, int size, int C, float *mean, float *var,
                                  double *total)
{
    const size_t row = 2 * (size_t)C + 2;
    const double split = 16777216.0;
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c == 0 && total) {
        double n = 0;
        for (int r = 0; r < size; r++)
            n += (double)recv[(size_t)r * row] * split + (double)recv[(size_t)r * row + 1];
        *total = n;
    }
    if (c >= C)
        return;
    double na = 0, ma = 0, m2a = 0;
    for (int r = 0; r < size; r++) {
        const float *b = recv + (size_t)r * row;
        double nb = (double)b[0] * split + (double)b[1];
        if (nb <= 0)
            continue;
        double mb = b[2 + c], m2b = (double)b[2 + C + c] * nb;
        double nab = na + nb, delta = mb - ma;
        ma += delta * (nb / nab);
        m2a += m2b + delta * delta * (na * nb / nab);
        na = nab;
    }
    mean[c] = na > 0 ? (float)ma : 0.0f;
    var[c] = na > 0 ? (float)(m2a / na) : 0.0f;
}

extern "C" cudaError_t ddpc_cuda_bn_pack(float hi, float lo, const float *mean, const float *var,
                                         int C, float *send, cudaStream_t stream)
{
    if (C <= 0 || !mean || !var || !send)
        return cudaErrorInvalidValue;
    unsigned grid = (unsigned)(((size_t)C + kThreads) / kThreads);
    bn_pack_kernel<<<grid, kThreads, 0, stream>>>(hi, lo, mean, var, C, send);
    return cudaGetLastError();
}

extern "C" cudaError_t ddpc_cuda_bn_combine(const float *recv, int size, int C, float *mean,
                                            float *var, double *total, cudaStream_t stream)
{
    if (C <= 0 || size <= 0 || !recv || !mean || !var)
        return cudaErrorInvalidValue;
    unsigned grid = (unsigned)(((size_t)C + kThreads - 1) / kThreads);
    bn_combine_kernel<<<grid, kThreads, 0, stream>>>(recv, size, C, mean, var, total);
    return cudaGetLastError();
}
