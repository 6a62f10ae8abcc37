/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu_optim.c: the device optimizer (cuda_kernels.cu) against its CPU twin
 * (optim.c) through the public API: same parameters, same gradients, 100
 * steps per config, then parameters, gradients, every state tensor and the
 * scalars compared; the same steps as a sharded device engine takes them
 * (DDPC_SHARD: ddpc_cuda_optim_sumsq per slice, the slices' sums gathered,
 * ddpc_cuda_optim_apply per slice with its own scalars, as SHARDS ranks
 * would) compared likewise, every slice's scalars too; and the
 * wire-compression copies against half.c, bit for bit. One process, one GPU; without a usable GPU it is skipped (exit 77). */
#include "ddpc.h"
#include "cuda_kernels.h"

#include <cuda_runtime.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-6 /* max |device - cpu| / max(|cpu|, 1e-3) */
#define SHARDS 3  /* the sharded twin's slices ("ranks") */

static int T_fail;           /* failed checks, all configs */
static const char *T_label;  /* the config being checked, for messages */

/* A CUDA call that must succeed; otherwise say where and jump to fail. */
#define CU(call)                                                                               \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "gpu_optim: %s:%d: [%s] %s -> %s\n", __FILE__, __LINE__, T_label,   \
                    #call, cudaGetErrorString(e_));                                            \
            T_fail++;                                                                          \
            goto fail;                                                                         \
        }                                                                                      \
    } while (0)

/* A ddpc call on engine d that must return DDPC_OK; otherwise jump to fail. */
#define T_OK(d, call)                                                                          \
    do {                                                                                       \
        ddpc_status_t st_ = (call);                                                            \
        if (st_ != DDPC_OK) {                                                                  \
            fprintf(stderr, "gpu_optim: %s:%d: [%s] %s -> %s: %s\n", __FILE__, __LINE__,        \
                    T_label, #call, ddpc_strerror(st_), ddpc_ddp_last_error(d));               \
            T_fail++;                                                                          \
            goto fail;                                                                         \
        }                                                                                      \
    } while (0)

/* dev == cpu for integers, printing both */
#define EXPECT_EQ_INT(what, dev, cpu)                                                          \
    do {                                                                                       \
        intmax_t d_ = (intmax_t)(dev), c_ = (intmax_t)(cpu);                                   \
        if (d_ != c_) {                                                                        \
            fprintf(stderr, "gpu_optim: %s:%d: [%s] %s: device %jd != cpu %jd\n", __FILE__,     \
                    __LINE__, T_label, what, d_, c_);                                          \
            T_fail++;                                                                          \
        }                                                                                      \
    } while (0)

/* relerr(dev, cpu) <= TOL, printing both; *maxerr keeps the largest seen */
#define EXPECT_REL(what, dev, cpu, maxerr)                                                     \
    do {                                                                                       \
        double d_ = (dev), c_ = (cpu), e_ = relerr(d_, c_);                                    \
        if (e_ > *(maxerr))                                                                    \
            *(maxerr) = e_;                                                                    \
        if (!(e_ <= TOL)) {                                                                    \
            fprintf(stderr, "gpu_optim: %s:%d: [%s] %s: device %.17g, cpu %.17g (rel %.3g > %g)\n", \
                    __FILE__, __LINE__, T_label, what, d_, c_, e_, TOL);                       \
            T_fail++;                                                                          \
        }                                                                                      \
    } while (0)

/* (no libm: the test links with libddpc and libcudart only) */
static double dabs(double x) { return x < 0 ? -x : x; }
static double dmax(double a, double b) { return a > b ? a : b; }

/* |dev - cpu| / max(|cpu|, 1e-3); equal values (infinities too) are 0, a NaN
 * or a lone infinity is infinitely wrong. */
static double relerr(double dev, double cpu)
{
    if (dev == cpu)
        return 0;
    if (!isfinite(dev) || !isfinite(cpu))
        return INFINITY;
    return dabs(dev - cpu) / dmax(dabs(cpu), 1e-3);
}

/* Compare n floats; returns the largest relative error, reports the worst
 * element when it is over TOL. */
static double compare(const char *what, const float *dev, const float *cpu, size_t n)
{
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = relerr(dev[i], cpu[i]);
        if (!(e <= worst)) { /* NaN-safe: relerr never returns NaN, but be sure */
            worst = e;
            at = i;
        }
    }
    if (!(worst <= TOL)) {
        fprintf(stderr, "gpu_optim: [%s] %s[%zu]: device %.9g, cpu %.9g (rel %.3g > %g)\n",
                T_label, what, at, dev[at], cpu[at], worst, TOL);
        T_fail++;
    }
    return worst;
}

/* Copies n floats of device memory dev to back and raises *worst to their
 * error against cpu; -1 (counted in T_fail) where CUDA fails. */
static int compare_dev(cudaStream_t stream, float *back, const char *what, const float *dev,
                       const float *cpu, size_t n, double *worst)
{
    CU(cudaMemcpyAsync(back, dev, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CU(cudaStreamSynchronize(stream));
    *worst = dmax(*worst, compare(what, back, cpu, n));
    return 0;
fail:
    return -1;
}

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Uniform in [0, 1) from 24 bits of (seed, i). */
static float uniform(uint64_t seed, uint64_t i)
{
    return (float)(splitmix64(seed * 0x100000001b3ull ^ i) >> 40) * 0x1p-24f;
}

/* The float with sign s, exponent e (unbiased, normal range) and 23 bits
 * of mantissa m. */
static float make_float(int s, int e, uint32_t m)
{
    uint32_t u = (s ? 0x80000000u : 0) | (uint32_t)(e + 127) << 23 | (m & 0x7fffffu);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Step s's gradients: random signs, magnitudes log-uniform-ish in
 * [2^-7, 1) (random exponent -7..-1, random mantissa), times amp: every
 * fourth step is 1e-3 smaller, so that clipping applies on some steps
 * (global norm ~100) and not on others (~0.1). */
static void make_grads(float *g, size_t n, int s, float mul)
{
    const float amp = (s % 4 == 3 ? 1e-3f : 1.0f) * mul;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = splitmix64(((uint64_t)s << 40) ^ i ^ 0x5eedull);
        g[i] = make_float((int)(r & 1), -7 + (int)((r >> 1) % 7), (uint32_t)(r >> 40)) * amp;
    }
}

/* One config: nsteps steps on the CPU engine d and on the device from the
 * same parameters p0 and gradients, then everything compared. Returns 0
 * when it passed. */
static int run_config(ddpc_ddp_t d, const float *p0, const char *label,
                      const ddpc_optim_config_t *cfg, int nsteps)
{
    const int fail0 = T_fail;
    T_label = label;
    size_t n = 0;
    float *hp = ddpc_ddp_params(d, &n);
    float *hg = ddpc_ddp_grads(d, NULL);
    ddpc_optim_t o = NULL;
    cudaStream_t stream = NULL;
    float *dp = NULL, *dg = NULL, *ds[2] = {NULL, NULL}, *back = NULL;
    ddpc_cuda_optim_scalars_t *dsc = NULL, sc;
    double *dpart = NULL;
    ddpc_cuda_optim_hyper_t *dhy = NULL;
    double err_norm = 0, err_scale = 0, err_arena = 0;
    int reported = 0;
    const size_t bytes = n * sizeof(float);
    /* the sharded twin: its own arenas, a slice [off[k], off[k + 1]) and its
     * scalars per "rank", the slices' sums of squares in rank order */
    float *zp = NULL, *zg = NULL, *zs[2] = {NULL, NULL};
    ddpc_cuda_optim_scalars_t *zsc = NULL, zh[SHARDS];
    double *zsums = NULL, zerr = 0;
    size_t off[SHARDS + 1];
    for (int k = 0; k <= SHARDS; k++) /* aligned to 16 floats, the last one short */
        off[k] = k == SHARDS ? n : ((n + SHARDS - 1) / SHARDS + 15) / 16 * 16 * (size_t)k;
    for (int k = 0; k <= SHARDS; k++)
        if (off[k] > n)
            off[k] = n;

    memcpy(hp, p0, bytes);
    T_OK(d, ddpc_optim_create(d, cfg, &o));
    const int nstates = ddpc_optim_num_states(o);
    back = malloc(bytes ? bytes : 1);
    if (!back) {
        fprintf(stderr, "gpu_optim: [%s] cannot allocate %zu bytes\n", label, bytes);
        T_fail++;
        goto fail;
    }

    /* a non-blocking stream does not wait for the legacy default stream:
     * every copy goes through it too */
    CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CU(cudaMalloc((void **)&dp, bytes));
    CU(cudaMalloc((void **)&dg, bytes));
    for (int k = 0; k < nstates; k++) {
        CU(cudaMalloc((void **)&ds[k], bytes));
        CU(cudaMemcpyAsync(ds[k], ddpc_optim_state(o, k, NULL), bytes, cudaMemcpyHostToDevice,
                           stream));
    }
    CU(cudaMalloc((void **)&dsc, sizeof sc));
    ddpc_cuda_optim_hyper_t hy = {cfg->lr, cfg->weight_decay, cfg->momentum, cfg->dampening,
                                  cfg->beta1, cfg->beta2, cfg->eps, cfg->clip_norm};
    CU(cudaMalloc((void **)&dhy, sizeof hy));
    CU(cudaMemcpyAsync(dhy, &hy, sizeof hy, cudaMemcpyHostToDevice, stream));
    CU(cudaMalloc((void **)&dpart, DDPC_CUDA_OPTIM_PARTIALS * sizeof(double)));
    CU(cudaMemsetAsync(dpart, 0, DDPC_CUDA_OPTIM_PARTIALS * sizeof(double), stream));
    CU(cudaMemcpyAsync(dp, hp, bytes, cudaMemcpyHostToDevice, stream));
    memset(&sc, 0, sizeof sc);
    sc.scale = cfg->dynamic_loss_scale ? cfg->loss_scale : 1.0;
    CU(cudaMemcpyAsync(dsc, &sc, sizeof sc, cudaMemcpyHostToDevice, stream));
    CU(cudaMalloc((void **)&zp, bytes));
    CU(cudaMalloc((void **)&zg, bytes));
    CU(cudaMemcpyAsync(zp, hp, bytes, cudaMemcpyHostToDevice, stream));
    for (int k = 0; k < nstates; k++) {
        CU(cudaMalloc((void **)&zs[k], bytes));
        CU(cudaMemcpyAsync(zs[k], ddpc_optim_state(o, k, NULL), bytes, cudaMemcpyHostToDevice,
                           stream));
    }
    CU(cudaMalloc((void **)&zsc, sizeof zh));
    for (int k = 0; k < SHARDS; k++)
        zh[k] = sc;
    CU(cudaMemcpyAsync(zsc, zh, sizeof zh, cudaMemcpyHostToDevice, stream));
    CU(cudaMalloc((void **)&zsums, SHARDS * sizeof(double)));
    CU(cudaStreamSynchronize(stream));

    for (int s = 0; s < nsteps; s++) {
        char what[80];
        /* gradients as fp16 training hands them over: times the current scale */
        make_grads(hg, n, s, cfg->dynamic_loss_scale ? (float)ddpc_optim_loss_scale(o) : 1.0f);
        if (cfg->dynamic_loss_scale && s == 10)
            hg[n / 3] = INFINITY;
        if (cfg->dynamic_loss_scale && s == 37)
            hg[n - 1] = -INFINITY;
        CU(cudaMemcpyAsync(dg, hg, bytes, cudaMemcpyHostToDevice, stream));
        CU(cudaMemcpyAsync(zg, hg, bytes, cudaMemcpyHostToDevice, stream));
        CU(cudaStreamSynchronize(stream)); /* (the cpu step below unscales and clips hg) */

        int stepped = -1;
        T_OK(d, ddpc_optim_step(o, &stepped));
        CU(ddpc_cuda_optim_step(cfg, n, dp, dg, ds[0], ds[1], dsc, dpart, dhy, stream));
        CU(cudaMemcpyAsync(&sc, dsc, sizeof sc, cudaMemcpyDeviceToHost, stream));
        /* the sharded twin: every slice's sum, then every slice's update */
        for (int k = 0; k < SHARDS; k++)
            CU(ddpc_cuda_optim_sumsq(off[k + 1] - off[k], zg + off[k], dpart, zsums + k, stream));
        for (int k = 0; k < SHARDS; k++)
            CU(ddpc_cuda_optim_apply(cfg, off[k + 1] - off[k], zp + off[k], zg + off[k],
                                     zs[0] ? zs[0] + off[k] : NULL,
                                     zs[1] ? zs[1] + off[k] : NULL, zsc + k, dpart, zsums,
                                     SHARDS, dhy, stream));
        CU(cudaMemcpyAsync(zh, zsc, sizeof zh, cudaMemcpyDeviceToHost, stream));
        CU(cudaStreamSynchronize(stream));
        for (int k = 0; k < SHARDS; k++) {
            snprintf(what, sizeof what, "step %d: slice %d: stepped", s, k);
            EXPECT_EQ_INT(what, zh[k].stepped, stepped);
            snprintf(what, sizeof what, "step %d: slice %d: steps", s, k);
            EXPECT_EQ_INT(what, zh[k].steps, ddpc_optim_steps(o));
            snprintf(what, sizeof what, "step %d: slice %d: loss scale", s, k);
            EXPECT_REL(what, zh[k].scale, ddpc_optim_loss_scale(o), &zerr);
            snprintf(what, sizeof what, "step %d: slice %d: last norm", s, k);
            EXPECT_REL(what, zh[k].last_norm, ddpc_optim_last_grad_norm(o), &zerr);
            snprintf(what, sizeof what, "step %d: slice %d: last norm vs slice 0", s, k);
            if (zh[k].last_norm != zh[0].last_norm || zh[k].scale != zh[0].scale)
                EXPECT_EQ_INT(what, 1, 0); /* one decision on every rank, to the bit */
        }

        snprintf(what, sizeof what, "step %d: stepped", s);
        EXPECT_EQ_INT(what, sc.stepped, stepped);
        snprintf(what, sizeof what, "step %d: steps", s);
        EXPECT_EQ_INT(what, sc.steps, ddpc_optim_steps(o));
        snprintf(what, sizeof what, "step %d: good steps", s);
        EXPECT_EQ_INT(what, sc.good_steps, ddpc_optim_scale_good_steps(o));
        snprintf(what, sizeof what, "step %d: loss scale", s);
        EXPECT_REL(what, sc.scale, ddpc_optim_loss_scale(o), &err_scale);
        snprintf(what, sizeof what, "step %d: last norm", s);
        EXPECT_REL(what, sc.last_norm, ddpc_optim_last_grad_norm(o), &err_norm);
        if (T_fail > fail0 + 20) {
            fprintf(stderr, "gpu_optim: [%s] giving up after step %d\n", label, s);
            goto fail;
        }
    }
    if (cfg->dynamic_loss_scale && nsteps > 10)
        EXPECT_EQ_INT("steps skipped", (int64_t)nsteps - (int64_t)sc.steps, nsteps > 37 ? 2 : 1);

    if (compare_dev(stream, back, "params", dp, hp, n, &err_arena) ||
        compare_dev(stream, back, "grads (unscaled, clipped)", dg, hg, n, &err_arena) ||
        compare_dev(stream, back, "params (sharded)", zp, hp, n, &zerr) ||
        compare_dev(stream, back, "grads (sharded)", zg, hg, n, &zerr))
        goto fail;
    for (int k = 0; k < nstates; k++) {
        const char *name = NULL;
        const float *hs = ddpc_optim_state(o, k, &name);
        if (compare_dev(stream, back, name, ds[k], hs, n, &err_arena) ||
            compare_dev(stream, back, name, zs[k], hs, n, &zerr))
            goto fail;
    }
    printf("gpu_optim: %-34s n=%-7zu steps=%" PRIu64 " scale=%g norm=%.6g: max rel error "
           "arenas %.3g, norm %.3g, scale %.3g; sharded in %d: %.3g: %s\n",
           label, n, (uint64_t)sc.steps, sc.scale, sc.last_norm, err_arena, err_norm, err_scale,
           SHARDS, zerr, T_fail == fail0 ? "ok" : "FAILED");
    reported = 1;

fail:
    if (!reported)
        printf("gpu_optim: %-34s FAILED (stopped early, see above)\n", label);
    cudaFree(dp);
    cudaFree(dg);
    cudaFree(ds[0]);
    cudaFree(ds[1]);
    cudaFree(dsc);
    cudaFree(dpart);
    cudaFree(dhy);
    cudaFree(zp);
    cudaFree(zg);
    cudaFree(zs[0]);
    cudaFree(zs[1]);
    cudaFree(zsc);
    cudaFree(zsums);
    if (stream)
        cudaStreamDestroy(stream);
    free(back);
    ddpc_optim_destroy(o);
    return T_fail != fail0;
}

/* Wire compression and ddpc_cuda_scale against half.c and a float multiply,
 * bit for bit: edge values (signed zeros, infinities, NaNs with payloads,
 * ties, the half range's ends and subnormals) then random values over a wide
 * exponent range. */
static int run_wire(void)
{
    enum { N = 70001, NEDGE = 24 };
    static const uint32_t edge[NEDGE] = {
        0x00000000u, 0x80000000u, 0x3f800000u, 0xbf800000u, 0x7f800000u, 0xff800000u,
        0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fa12345u, /* NaNs: quiet, signalling, payloads */
        0x3f808000u, 0x3f818000u,                           /* bf16 ties to even, both ways */
        0x477fe000u, 0x477fefffu, 0x477ff000u,              /* 65504, just below, 65520 */
        0x7f7fffffu, 0x00000001u, 0x807fffffu,              /* FLT_MAX, float subnormals */
        0x38800000u, 0x33800000u, 0x33000000u, 0x33000001u, /* half normal min, subnormals */
        0x3a801000u, 0x3a803000u,                           /* f16 ties to even, both ways */
    };
    const float scales[2] = {1.0f, 1.0f / 3.0f};
    const int fail0 = T_fail;
    T_label = "wire";
    float *hx = malloc(N * sizeof(float)), *hy = malloc(N * sizeof(float));
    uint16_t *hw = malloc(N * sizeof(uint16_t));
    float *dx = NULL, *dy = NULL;
    uint16_t *dw = NULL;
    cudaStream_t stream = NULL;
    long bad = 0;
    if (!hx || !hy || !hw) {
        fprintf(stderr, "gpu_optim: [wire] out of memory\n");
        T_fail++;
        goto fail;
    }
    for (size_t i = 0; i < N; i++) {
        if (i < NEDGE) {
            memcpy(&hx[i], &edge[i], 4);
            continue;
        }
        uint64_t r = splitmix64(i ^ 0x31337ull);
        hx[i] = make_float((int)(r & 1), -40 + (int)((r >> 1) % 80), (uint32_t)(r >> 40));
    }
    CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CU(cudaMalloc((void **)&dx, N * sizeof(float)));
    CU(cudaMalloc((void **)&dy, N * sizeof(float)));
    CU(cudaMalloc((void **)&dw, N * sizeof(uint16_t)));
    for (int f16 = 0; f16 <= 1; f16++) {
        for (int k = 0; k < 2; k++) {
            CU(cudaMemcpyAsync(dx, hx, N * sizeof(float), cudaMemcpyHostToDevice, stream));
            CU(ddpc_cuda_pack_half(dx, dw, N, scales[k], f16, stream));
            CU(ddpc_cuda_unpack_half(dw, dy, N, f16, stream));
            CU(cudaMemcpyAsync(hw, dw, N * sizeof(uint16_t), cudaMemcpyDeviceToHost, stream));
            CU(cudaMemcpyAsync(hy, dy, N * sizeof(float), cudaMemcpyDeviceToHost, stream));
            CU(cudaStreamSynchronize(stream));
            for (size_t i = 0; i < N; i++) {
                const float x = hx[i] * scales[k];
                const uint16_t w = f16 ? ddpc_f32_to_f16(x) : ddpc_f32_to_bf16(x);
                const float y = f16 ? ddpc_f16_to_f32(w) : ddpc_bf16_to_f32(w);
                if (hw[i] != w || memcmp(&hy[i], &y, 4) != 0) {
                    if (bad++ < 10)
                        fprintf(stderr, "gpu_optim: [wire] %s scale %g x[%zu] = %a: device "
                                "0x%04x -> %a, cpu 0x%04x -> %a\n", f16 ? "f16" : "bf16",
                                scales[k], i, hx[i], hw[i], hy[i], w, y);
                }
            }
        }
    }
    CU(ddpc_cuda_scale(dx, N, scales[1], stream));
    CU(ddpc_cuda_scale(dx, 0, scales[1], stream)); /* n == 0: nothing, no error */
    CU(cudaMemcpyAsync(hy, dx, N * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CU(cudaStreamSynchronize(stream));
    for (size_t i = 0; i < N; i++) {
        const float y = hx[i] * scales[1];
        if (memcmp(&hy[i], &y, 4) != 0 && bad++ < 10)
            fprintf(stderr, "gpu_optim: [wire] scale x[%zu] = %a: device %a, cpu %a\n", i, hx[i],
                    hy[i], y);
    }
    if (bad) {
        fprintf(stderr, "gpu_optim: [wire] %ld values differ from half.c / the CPU\n", bad);
        T_fail++;
    }
    printf("gpu_optim: %-34s n=%-7d bf16, f16, scale: %ld differ: %s\n", "wire compression", N,
           bad, T_fail == fail0 ? "ok" : "FAILED");
fail:
    cudaFree(dx);
    cudaFree(dy);
    cudaFree(dw);
    if (stream)
        cudaStreamDestroy(stream);
    free(hx);
    free(hy);
    free(hw);
    return T_fail != fail0;
}

/* A CPU engine over the given parameters, built, with deterministic
 * parameters in [-1, 1]; *p0 receives a copy of them (malloc'd). */
static ddpc_status_t make_engine(ddpc_comm_t comm, int np, const char *const *names,
                                 const int64_t (*shapes)[2], ddpc_ddp_t *out, float **p0)
{
    ddpc_ddp_t d = NULL;
    *out = NULL;
    *p0 = NULL;
    ddpc_status_t st = ddpc_ddp_create(comm, NULL, &d);
    for (int i = 0; st == DDPC_OK && i < np; i++)
        st = ddpc_ddp_add_param(d, names[i], 2, shapes[i], NULL);
    if (st == DDPC_OK)
        st = ddpc_ddp_build(d);
    if (st != DDPC_OK) {
        fprintf(stderr, "gpu_optim: cannot build the engine: %s: %s\n", ddpc_strerror(st),
                d ? ddpc_ddp_last_error(d) : "");
        ddpc_ddp_destroy(d);
        return st;
    }
    size_t n = 0;
    float *p = ddpc_ddp_params(d, &n);
    for (size_t i = 0; i < n; i++)
        p[i] = 2.0f * uniform(1, i) - 1.0f;
    *p0 = malloc(n * sizeof(float) + 1);
    if (!*p0) {
        ddpc_ddp_destroy(d);
        return DDPC_ERR_NOMEM;
    }
    memcpy(*p0, p, n * sizeof(float));
    *out = d;
    return DDPC_OK;
}

int main(int argc, char **argv)
{
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev == 0) {
        printf("gpu_optim: skipped: no usable CUDA device (%s)\n",
               cudaGetErrorString(ce != cudaSuccess ? ce : cudaErrorNoDevice));
        return 77;
    }
    struct cudaDeviceProp prop; /* "(emulated)" in the name under the emulation */
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
        printf("gpu_optim: on %s\n", prop.name);

    ddpc_t rt = NULL;
    ddpc_status_t st = ddpc_init(NULL, &argc, &argv, &rt);
    if (st != DDPC_OK) {
        fprintf(stderr, "gpu_optim: ddpc_init: %s\n", rt ? ddpc_last_error(rt) : ddpc_init_error());
        ddpc_finalize(rt);
        return 99;
    }
    ddpc_comm_t comm = ddpc_comm_world(rt);

    ddpc_optim_config_t sgd = DDPC_OPTIM_CONFIG_INIT;
    sgd.lr = 0.1;

    ddpc_optim_config_t mom = DDPC_OPTIM_CONFIG_INIT;
    mom.momentum = 0.9;
    mom.dampening = 0.1;
    mom.weight_decay = 1e-2;

    ddpc_optim_config_t nest = DDPC_OPTIM_CONFIG_INIT;
    nest.momentum = 0.9;
    nest.nesterov = 1;
    nest.weight_decay = 1e-4;

    ddpc_optim_config_t adamw = DDPC_OPTIM_CONFIG_INIT;
    adamw.type = DDPC_OPTIM_ADAMW;
    adamw.lr = 1e-3;
    adamw.weight_decay = 1e-2;
    adamw.beta1 = 0.9;
    adamw.beta2 = 0.999;

    ddpc_optim_config_t adamw_clip = adamw;
    adamw_clip.clip_norm = 0.5;

    ddpc_optim_config_t scaled = DDPC_OPTIM_CONFIG_INIT;
    scaled.momentum = 0.9;
    scaled.dynamic_loss_scale = 1;
    scaled.loss_scale = 1024;
    scaled.scale_growth_interval = 5;
    scaled.clip_norm = 1.0;

    struct {
        const char *label;
        const ddpc_optim_config_t *cfg;
    } configs[] = {
        {"sgd lr 0.1", &sgd},
        {"sgd momentum, dampening, wd", &mom},
        {"sgd nesterov, wd", &nest},
        {"adamw", &adamw},
        {"adamw clip 0.5", &adamw_clip},
        {"sgd momentum, loss scale, clip 1", &scaled},
    };
    const int nconfigs = (int)(sizeof configs / sizeof configs[0]);

    int failed = 0;
    /* ~100k floats in three tensors, two of odd size: no size a multiple of
     * the block */
    static const char *const small_names[3] = {"fc1.weight", "fc1.bias", "fc2.weight"};
    static const int64_t small_shapes[3][2] = {{256, 300}, {1, 1013}, {97, 227}};
    /* one tensor over 1016 * 256 floats: the sum of squares' grid wraps */
    static const char *const large_names[1] = {"big.weight"};
    static const int64_t large_shapes[1][2] = {{1031, 263}};

    ddpc_ddp_t d = NULL;
    float *p0 = NULL;
    if (make_engine(comm, 3, small_names, small_shapes, &d, &p0) != DDPC_OK) {
        failed++;
    } else {
        for (int c = 0; c < nconfigs; c++)
            failed += run_config(d, p0, configs[c].label, configs[c].cfg, 100);
        ddpc_ddp_destroy(d);
        free(p0);
    }
    if (make_engine(comm, 1, large_names, large_shapes, &d, &p0) != DDPC_OK) {
        failed++;
    } else {
        failed += run_config(d, p0, "large: adamw clip 0.5", &adamw_clip, 40);
        failed += run_config(d, p0, "large: sgd momentum, loss scale", &scaled, 40);
        ddpc_ddp_destroy(d);
        free(p0);
    }
    failed += run_wire();

    printf("gpu_optim: %s (%d failed checks)\n", failed ? "FAILED" : "passed", T_fail);
    ddpc_finalize(rt);
    return failed ? 1 : 0;
}
