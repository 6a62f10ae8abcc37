/* SPDX-License-Identifier: BSD-3-Clause */
/* kernels_ddp.c: host twins of the engine's device code
 * (src/ddp/cuda_kernels.h) for the emulation (emu.h): the same launchers,
 * argument checks and stream semantics, each computing on its stream what
 * the kernels compute, with the same roundings (float and double operations
 * one at a time, no contraction: build without -ffp-contract=fast and
 * without FMA), the same sum order of the squared norm (per-thread strided
 * sums of 256 threads x grid_for(n) blocks, fixed trees), and the kernels'
 * arguments taken at launch (a graph replays them). The GPU is the only
 * evidence for the kernels themselves; these prove what calls them. */
#include "cuda_kernels.h"
#include "emu_internal.h"

#include <math.h>
#include <string.h>

#define THREADS 256u
#define MAX_GRID 4096u
#define FACTOR_DOUBLES 16u
#define SUM_BLOCKS (DDPC_CUDA_OPTIM_PARTIALS - FACTOR_DOUBLES)

/* the kernels' grid: ceil(n / THREADS), at most cap */
static unsigned grid_for(size_t n, unsigned cap)
{
    size_t b = n / THREADS + (n % THREADS != 0);
    return b < cap ? (unsigned)b : cap;
}

/* sum of v[0, THREADS) in the kernels' tree order */
static double tree_sum(double *v)
{
    for (unsigned w = THREADS / 2; w > 0; w >>= 1)
        for (unsigned t = 0; t < w; t++)
            v[t] = v[t] + v[t + w];
    return v[0];
}

/* kernel 1: per-block partial sums of squares of g[0, n); returns the blocks */
static unsigned sumsq_partials(const float *g, size_t n, double *partials)
{
    const unsigned nb = n ? grid_for(n, SUM_BLOCKS) : 0;
    double th[THREADS];
    for (unsigned b = 0; b < nb; b++) {
        for (unsigned t = 0; t < THREADS; t++) {
            double s = 0;
            for (size_t i = (size_t)b * THREADS + t; i < n; i += (size_t)nb * THREADS) {
                double x = (double)g[i];
                s = s + x * x;
            }
            th[t] = s;
        }
        partials[b] = tree_sum(th);
    }
    return nb;
}

/* kernel 2's sum of partials[0, nb): thread-strided, then the tree */
static double sum_partials(const double *partials, unsigned nb)
{
    double th[THREADS];
    for (unsigned t = 0; t < THREADS; t++) {
        double s = 0;
        for (unsigned b = t; b < nb; b += THREADS)
            s = s + partials[b];
        th[t] = s;
    }
    return tree_sum(th);
}

typedef struct {
    ddpc_optim_config_t cfg; /* by value, as the launcher takes it */
    size_t n;
    float *p, *g, *s0, *s1;
    ddpc_cuda_optim_scalars_t *sc;
    double *partials;
    const double *sums; /* NULL: kernel 1 first, its partials the sums */
    unsigned nsums;
    double *out;        /* the sumsq launcher: kernels 1 and the sum only */
    const ddpc_cuda_optim_hyper_t *hy;
} step_t;

/* kernels 2 and 3 from the sum of squares ss */
static void decide_and_update(const step_t *a, double ss)
{
    const ddpc_optim_config_t *c = &a->cfg;
    const ddpc_cuda_optim_hyper_t hy = *a->hy; /* read on the stream, as the kernels do */
    const size_t n = a->n;
    ddpc_cuda_optim_scalars_t st = *a->sc;
    const unsigned long long steps0 = st.steps;
    float inv = 1.0f, coef = 1.0f;
    int unscale = 0, clip = 0;
    if (c->dynamic_loss_scale) {
        if (!isfinite(ss)) {
            st.scale = st.scale * 0.5;
            st.good_steps = 0;
            st.last_norm = INFINITY;
            st.stepped = 0;
            *a->sc = st;
            return;
        }
        inv = (float)(1.0 / st.scale);
        unscale = 1;
        ss = ss / (st.scale * st.scale);
        if (++st.good_steps >= c->scale_growth_interval) {
            st.scale = st.scale * 2.0;
            st.good_steps = 0;
        }
    }
    st.last_norm = sqrt(ss);
    if (hy.clip_norm > 0 && st.last_norm > hy.clip_norm) {
        coef = (float)(hy.clip_norm / (st.last_norm + 1e-6));
        clip = 1;
    }
    float step_size = 0, inv_sqrt_bc2 = 0, decay = 1;
    const int adamw = c->type == DDPC_OPTIM_ADAMW;
    if (adamw) {
        const double t = (double)(st.steps + 1);
        step_size = (float)(hy.lr / (1.0 - pow(hy.beta1, t)));
        inv_sqrt_bc2 = (float)(1.0 / sqrt(1.0 - pow(hy.beta2, t)));
        decay = (float)(1.0 - hy.lr * hy.weight_decay);
    }
    st.steps++;
    st.stepped = 1;
    *a->sc = st;
    /* kernel 3: the update */
    const float lr = (float)hy.lr, wd = (float)hy.weight_decay, mu = (float)hy.momentum;
    const float damp = 1.0f - (float)hy.dampening;
    const int mom = (float)c->momentum > 0.0f; /* the structure: the launch's */
    const float b1 = (float)hy.beta1, omb1 = 1.0f - b1, b2 = (float)hy.beta2, omb2 = 1.0f - b2;
    const float eps = (float)hy.eps;
    for (size_t i = 0; i < n; i++) {
        float gi = a->g[i];
        if (unscale)
            gi = gi * inv;
        if (clip)
            gi = gi * coef;
        if (unscale || clip)
            a->g[i] = gi;
        if (adamw) {
            const float pi = a->p[i] * decay;
            const float mi = b1 * a->s0[i] + omb1 * gi;
            const float vi = b2 * a->s1[i] + (omb2 * gi) * gi;
            a->s0[i] = mi;
            a->s1[i] = vi;
            const float den = sqrtf(vi) * inv_sqrt_bc2 + eps;
            a->p[i] = pi - (step_size * mi) / den;
        } else {
            const float pi = a->p[i];
            gi = gi + wd * pi;
            if (mom) {
                const float b = steps0 == 0 ? gi : mu * a->s0[i] + damp * gi;
                a->s0[i] = b;
                gi = c->nesterov ? gi + mu * b : b;
            }
            a->p[i] = pi - lr * gi;
        }
    }
}

static void run_step(void *arg)
{
    const step_t *a = arg;
    unsigned nb = sumsq_partials(a->g, a->n, a->partials);
    decide_and_update(a, sum_partials(a->partials, nb));
}

static void run_sumsq(void *arg)
{
    const step_t *a = arg;
    unsigned nb = sumsq_partials(a->g, a->n, a->partials);
    *a->out = sum_partials(a->partials, nb);
}

static void run_apply(void *arg)
{
    const step_t *a = arg;
    decide_and_update(a, sum_partials(a->sums, a->nsums));
}

/* the launchers' checks: 0 when the arguments are good and the memory live */
static int check_step(const char *call, const ddpc_optim_config_t *cfg, size_t n, float *p,
                      float *g, float *s0, float *s1, ddpc_cuda_optim_scalars_t *sc,
                      double *partials, const ddpc_cuda_optim_hyper_t *hyper)
{
    if (!cfg || !sc || !partials || !hyper ||
        (cfg->type != DDPC_OPTIM_SGD && cfg->type != DDPC_OPTIM_ADAMW))
        return -1;
    const int adamw = cfg->type == DDPC_OPTIM_ADAMW;
    const int mom = (float)cfg->momentum > 0.0f;
    if (n > 0 && (!p || !g || (adamw ? (!s0 || !s1) : (mom && !s0))))
        return -1;
    size_t b = n * sizeof(float);
    if (emu_check(sc, sizeof *sc, EMU_DEVICE, call, "scalars") ||
        emu_check(partials, DDPC_CUDA_OPTIM_PARTIALS * sizeof(double), EMU_DEVICE, call,
                  "partials") ||
        emu_check(hyper, sizeof *hyper, EMU_DEVICE, call, "hyper") ||
        emu_check(p, b, EMU_DEVICE, call, "params") || emu_check(g, b, EMU_DEVICE, call, "grads") ||
        ((adamw || mom) && emu_check(s0, b, EMU_DEVICE, call, "state 0")) ||
        (adamw && emu_check(s1, b, EMU_DEVICE, call, "state 1")))
        return 1;
    return 0;
}

EMU_API cudaError_t ddpc_cuda_optim_step(const ddpc_optim_config_t *cfg, size_t n, float *p,
                                         float *g, float *s0, float *s1,
                                         ddpc_cuda_optim_scalars_t *sc, double *partials,
                                         const ddpc_cuda_optim_hyper_t *hyper, cudaStream_t stream)
{
    const char *call = "ddpc_cuda_optim_step";
    int bad = check_step(call, cfg, n, p, g, s0, s1, sc, partials, hyper);
    if (bad)
        return bad < 0 ? cudaErrorInvalidValue : emu_last_error();
    step_t a = {*cfg, n, p, g, s0, s1, sc, partials, NULL, 0, NULL, hyper};
    emu_launch(stream, call, run_step, &a, sizeof a);
    return emu_last_error();
}

EMU_API cudaError_t ddpc_cuda_optim_sumsq(size_t n, const float *g, double *partials, double *out,
                                          cudaStream_t stream)
{
    const char *call = "ddpc_cuda_optim_sumsq";
    if (!partials || !out || (n > 0 && !g))
        return cudaErrorInvalidValue;
    if (emu_check(g, n * sizeof(float), EMU_DEVICE, call, "grads") ||
        emu_check(partials, DDPC_CUDA_OPTIM_PARTIALS * sizeof(double), EMU_DEVICE, call,
                  "partials") ||
        emu_check(out, sizeof *out, EMU_DEVICE, call, "out"))
        return emu_last_error();
    step_t a;
    memset(&a, 0, sizeof a);
    a.n = n;
    a.g = (float *)g;
    a.partials = partials;
    a.out = out;
    emu_launch(stream, call, run_sumsq, &a, sizeof a);
    return emu_last_error();
}

EMU_API cudaError_t ddpc_cuda_optim_apply(const ddpc_optim_config_t *cfg, size_t n, float *p,
                                          float *g, float *s0, float *s1,
                                          ddpc_cuda_optim_scalars_t *sc, double *partials,
                                          const double *sums, unsigned nsums,
                                          const ddpc_cuda_optim_hyper_t *hyper, cudaStream_t stream)
{
    const char *call = "ddpc_cuda_optim_apply";
    if (!sums || nsums == 0)
        return cudaErrorInvalidValue;
    int bad = check_step(call, cfg, n, p, g, s0, s1, sc, partials, hyper);
    if (bad)
        return bad < 0 ? cudaErrorInvalidValue : emu_last_error();
    if (emu_check(sums, nsums * sizeof *sums, EMU_DEVICE, call, "sums"))
        return emu_last_error();
    step_t a = {*cfg, n, p, g, s0, s1, sc, partials, sums, nsums, NULL, hyper};
    emu_launch(stream, call, run_apply, &a, sizeof a);
    return emu_last_error();
}

/* ------------------------------------------------------------------ wire compression */

/* x * s as the CPU multiplies, a NaN operand quieted with its payload */
static float mul_like_cpu(float x, float s)
{
    uint32_t u = emu_f_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return emu_bits_f(u | 0x400000u);
    return x * s;
}

/* half.c's conversions (the wire's): a NaN keeps its payload (bf16) or
 * becomes sign | 0x7e00 (f16) as on the CPU; the rest rounds as the GPU */
static uint16_t to_bf16(float x)
{
    uint32_t u = emu_f_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    return emu_to_bf16(x);
}

static uint16_t to_f16(float x)
{
    uint32_t u = emu_f_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(((u >> 16) & 0x8000u) | 0x7e00u);
    return emu_to_f16(x);
}

typedef struct {
    const float *g;
    uint16_t *w;
    float *x;
    size_t n;
    float scale;
    int f16;
} half_t;

static void run_pack(void *arg)
{
    const half_t *a = arg;
    for (size_t i = 0; i < a->n; i++) {
        float x = mul_like_cpu(a->g[i], a->scale);
        a->w[i] = a->f16 ? to_f16(x) : to_bf16(x);
    }
}

static void run_unpack(void *arg)
{
    const half_t *a = arg;
    for (size_t i = 0; i < a->n; i++)
        a->x[i] = a->f16 ? emu_from_f16(a->w[i]) : emu_from_bf16(a->w[i]);
}

static void run_scale(void *arg)
{
    const half_t *a = arg;
    for (size_t i = 0; i < a->n; i++)
        a->x[i] = mul_like_cpu(a->x[i], a->scale);
}

EMU_API cudaError_t ddpc_cuda_pack_half(const float *g, uint16_t *w, size_t n, float scale, int f16,
                                        cudaStream_t stream)
{
    if (n == 0)
        return emu_last_error();
    if (!g || !w)
        return cudaErrorInvalidValue;
    if (emu_check(g, n * 4, EMU_DEVICE, "ddpc_cuda_pack_half", "g") ||
        emu_check(w, n * 2, EMU_DEVICE, "ddpc_cuda_pack_half", "w"))
        return emu_last_error();
    half_t a = {g, w, NULL, n, scale, f16};
    emu_launch(stream, "ddpc_cuda_pack_half", run_pack, &a, sizeof a);
    return emu_last_error();
}

EMU_API cudaError_t ddpc_cuda_unpack_half(const uint16_t *w, float *g, size_t n, int f16,
                                          cudaStream_t stream)
{
    if (n == 0)
        return emu_last_error();
    if (!g || !w)
        return cudaErrorInvalidValue;
    if (emu_check(w, n * 2, EMU_DEVICE, "ddpc_cuda_unpack_half", "w") ||
        emu_check(g, n * 4, EMU_DEVICE, "ddpc_cuda_unpack_half", "g"))
        return emu_last_error();
    half_t a = {NULL, (uint16_t *)w, g, n, 1.0f, f16};
    emu_launch(stream, "ddpc_cuda_unpack_half", run_unpack, &a, sizeof a);
    return emu_last_error();
}

EMU_API cudaError_t ddpc_cuda_scale(float *x, size_t n, float scale, cudaStream_t stream)
{
    if (n == 0)
        return emu_last_error();
    if (!x)
        return cudaErrorInvalidValue;
    if (emu_check(x, n * 4, EMU_DEVICE, "ddpc_cuda_scale", "x"))
        return emu_last_error();
    half_t a = {NULL, NULL, x, n, scale, 0};
    emu_launch(stream, "ddpc_cuda_scale", run_scale, &a, sizeof a);
    return emu_last_error();
}

typedef struct {
    float *y;
    const float *x;
    size_t n;
} add_t;

static void run_add(void *arg)
{
    const add_t *a = arg;
    for (size_t i = 0; i < a->n; i++)
        a->y[i] += a->x[i];
}

EMU_API cudaError_t ddpc_cuda_add(float *y, const float *x, size_t n, cudaStream_t stream)
{
    if (n == 0)
        return emu_last_error();
    if (!y || !x)
        return cudaErrorInvalidValue;
    if (emu_check(y, n * 4, EMU_DEVICE, "ddpc_cuda_add", "y") ||
        emu_check(x, n * 4, EMU_DEVICE, "ddpc_cuda_add", "x"))
        return emu_last_error();
    add_t a = {y, x, n};
    emu_launch(stream, "ddpc_cuda_add", run_add, &a, sizeof a);
    return emu_last_error();
}

/* ------------------------------------------------------- synchronized batch norm */

typedef struct {
    float hi, lo;
    const float *mean, *var;
    float *send, *out_var;
    const float *recv;
    double *total;
    int C, size;
} bn_t;

static void run_bn_pack(void *arg)
{
    const bn_t *a = arg;
    a->send[0] = a->hi;
    a->send[1] = a->lo;
    memcpy(a->send + 2, a->mean, (size_t)a->C * 4);
    memcpy(a->send + 2 + a->C, a->var, (size_t)a->C * 4);
}

/* the kernel's loop: channel by channel, ranks in order, in double */
static void run_bn_combine(void *arg)
{
    const bn_t *a = arg;
    const size_t row = 2 * (size_t)a->C + 2;
    const double split = 16777216.0;
    float *mean = (float *)a->mean;
    if (a->total) {
        double n = 0;
        for (int r = 0; r < a->size; r++)
            n += (double)a->recv[(size_t)r * row] * split + (double)a->recv[(size_t)r * row + 1];
        *a->total = n;
    }
    for (int c = 0; c < a->C; c++) {
        double na = 0, ma = 0, m2a = 0;
        for (int r = 0; r < a->size; r++) {
            const float *b = a->recv + (size_t)r * row;
            double nb = (double)b[0] * split + (double)b[1];
            if (nb <= 0)
                continue;
            double mb = b[2 + c], m2b = (double)b[2 + a->C + c] * nb;
            double nab = na + nb, delta = mb - ma;
            ma += delta * (nb / nab);
            m2a += m2b + delta * delta * (na * nb / nab);
            na = nab;
        }
        mean[c] = na > 0 ? (float)ma : 0.0f;
        a->out_var[c] = na > 0 ? (float)(m2a / na) : 0.0f;
    }
}

EMU_API cudaError_t ddpc_cuda_bn_pack(float hi, float lo, const float *mean, const float *var,
                                      int C, float *send, cudaStream_t stream)
{
    if (C <= 0 || !mean || !var || !send)
        return cudaErrorInvalidValue;
    size_t n = (size_t)C * 4;
    if (emu_check(mean, n, EMU_DEVICE, "ddpc_cuda_bn_pack", "mean") ||
        emu_check(var, n, EMU_DEVICE, "ddpc_cuda_bn_pack", "var") ||
        emu_check(send, 2 * n + 8, EMU_DEVICE, "ddpc_cuda_bn_pack", "send"))
        return emu_last_error();
    bn_t a = {hi, lo, mean, var, send, NULL, NULL, NULL, C, 0};
    emu_launch(stream, "ddpc_cuda_bn_pack", run_bn_pack, &a, sizeof a);
    return emu_last_error();
}

EMU_API cudaError_t ddpc_cuda_bn_combine(const float *recv, int size, int C, float *mean,
                                         float *var, double *total, cudaStream_t stream)
{
    if (C <= 0 || size <= 0 || !recv || !mean || !var)
        return cudaErrorInvalidValue;
    size_t n = (size_t)C * 4;
    if (emu_check(recv, (size_t)size * (2 * n + 8), EMU_DEVICE, "ddpc_cuda_bn_combine",
                  "recv") ||
        emu_check(mean, n, EMU_DEVICE, "ddpc_cuda_bn_combine", "mean") ||
        emu_check(var, n, EMU_DEVICE, "ddpc_cuda_bn_combine", "var") ||
        (total && emu_check(total, 8, EMU_DEVICE, "ddpc_cuda_bn_combine", "total")))
        return emu_last_error();
    bn_t a = {0, 0, mean, NULL, NULL, var, recv, total, C, size};
    emu_launch(stream, "ddpc_cuda_bn_combine", run_bn_combine, &a, sizeof a);
    return emu_last_error();
}
