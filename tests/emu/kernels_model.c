/* SPDX-License-Identifier: BSD-3-Clause */
/* kernels_model.c: host twins of the CUDA model's kernels
 * (examples/model_cuda_kernels.h) for the emulation (emu.h): the same
 * launchers, argument checks and stream semantics, each computing on its
 * stream what its kernel computes: float arithmetic one operation at a
 * time (build with -ffp-contract=off, no FMA), the loss's sums in the
 * kernel's order (per-thread strided rows of one 1024-thread block, then
 * its halving tree), the bias gradients' column sums in row order, and the
 * conversions to bf16/fp16 rounded to nearest even with NaN kept (the
 * canonical 0x7fff, as __float2bfloat16_rn and __float2half_rn give).
 * expf and log are the host's, not CUDA's (each within 2 ulp of the other):
 * the loss agrees to rounding, not bit for bit. The GPU is the only
 * evidence for the kernels themselves; these prove what calls them. */
#include "model_cuda_kernels.h"
#include "emu_internal.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------ element types */

static int type_ok(cudaDataType_t t)
{
    return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F;
}

static size_t esize(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

/* element i of p (type t) as float */
static float get(const void *p, cudaDataType_t t, size_t i)
{
    if (t == CUDA_R_32F)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == CUDA_R_16BF ? emu_bits_f((uint32_t)h << 16) : emu_from_f16(h);
}

/* element i of p (type t) = v, rounded */
static void put(void *p, cudaDataType_t t, size_t i, float v)
{
    if (t == CUDA_R_32F)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = t == CUDA_R_16BF ? emu_to_bf16(v) : emu_to_f16(v);
}

/* ------------------------------------------------------------------ the twins */

typedef struct {
    const float *in;
    void *out;
    cudaDataType_t t;
    size_t n;
} cast_t;

static void run_cast(void *arg)
{
    const cast_t *a = arg;
    for (size_t i = 0; i < a->n; i++)
        put(a->out, a->t, i, a->in[i]);
}

EMU_API cudaError_t mk_cast(const float *in, void *out, cudaDataType_t t, size_t n,
                            cudaStream_t s)
{
    if (!type_ok(t))
        return cudaErrorInvalidValue;
    const char *call = "mk_cast";
    if (emu_check(in, n * 4, EMU_DEVICE, call, "in") ||
        emu_check(out, n * esize(t), EMU_DEVICE, call, "out"))
        return emu_last_error();
    cast_t a = {in, out, t, n};
    emu_launch(s, call, run_cast, &a, sizeof a);
    return emu_last_error();
}

typedef struct {
    void *y;
    const void *bias;
    cudaDataType_t t;
    int n, B, relu;
} bias_act_t;

static void run_bias_act(void *arg)
{
    const bias_act_t *a = arg;
    const size_t total = (size_t)a->n * (size_t)a->B;
    for (size_t i = 0; i < total; i++) {
        float v = get(a->y, a->t, i) + get(a->bias, a->t, i % (size_t)a->n);
        put(a->y, a->t, i, a->relu && !(v > 0.0f) ? 0.0f : v);
    }
}

EMU_API cudaError_t mk_bias_act(void *y, const void *bias, cudaDataType_t t, int n, int B,
                                int relu, cudaStream_t s)
{
    if (!type_ok(t) || n < 1 || B < 0)
        return cudaErrorInvalidValue;
    const char *call = "mk_bias_act";
    const size_t es = esize(t);
    if (emu_check(y, (size_t)n * (size_t)B * es, EMU_DEVICE, call, "y") ||
        emu_check(bias, B ? (size_t)n * es : 0, EMU_DEVICE, call, "bias"))
        return emu_last_error();
    bias_act_t a = {y, bias, t, n, B, relu};
    emu_launch(s, call, run_bias_act, &a, sizeof a);
    return emu_last_error();
}

typedef struct {
    float *z;
    const int *y;
    int B, C;
    double *acc;
} xent_t;

static void run_softmax_xent(void *arg)
{
    const xent_t *a = arg;
    const int B = a->B, C = a->C;
    double s_loss[MK_LOSS_THREADS], s_hit[MK_LOSS_THREADS]; /* the block's shared memory */
    const float invB = 1.0f / (float)B;
    for (int t = 0; t < MK_LOSS_THREADS; t++) {
        double loss = 0, hits = 0;
        for (int i = t; i < B; i += MK_LOSS_THREADS) {
            float *r = a->z + (size_t)i * (size_t)C;
            const int yi = a->y[i];
            if (yi < 0 || yi >= C) {
                /* the kernel would read r[yi] outside its row */
                emu_violation("mk_softmax_xent: label y[%d] = %d is not in [0, %d)", i, yi, C);
                return;
            }
            int am = 0; /* the first maximum */
            for (int c = 1; c < C; c++)
                am = r[c] > r[am] ? c : am;
            const float mx = r[am];
            double sum = 0;
            for (int c = 0; c < C; c++)
                sum = sum + (double)expf(r[c] - mx);
            loss = loss + (log(sum) - (double)(r[yi] - mx));
            hits = hits + (am == yi);
            for (int c = 0; c < C; c++) {
                float p = (float)((double)expf(r[c] - mx) / sum);
                r[c] = (p - (c == yi ? 1.0f : 0.0f)) * invB;
            }
        }
        s_loss[t] = loss;
        s_hit[t] = hits;
    }
    for (int k = MK_LOSS_THREADS / 2; k > 0; k >>= 1)
        for (int t = 0; t < k; t++) {
            s_loss[t] = s_loss[t] + s_loss[t + k];
            s_hit[t] = s_hit[t] + s_hit[t + k];
        }
    a->acc[0] = a->acc[0] + s_loss[0] / B;
    a->acc[1] = a->acc[1] + s_loss[0];
    a->acc[2] = a->acc[2] + s_hit[0];
    a->acc[3] = a->acc[3] + 1;
}

EMU_API cudaError_t mk_softmax_xent(float *z, const int *y, int B, int C, double *acc,
                                    cudaStream_t s)
{
    if (B < 1 || C < 1)
        return cudaErrorInvalidValue;
    const char *call = "mk_softmax_xent";
    if (emu_check(z, (size_t)B * (size_t)C * 4, EMU_DEVICE, call, "z") ||
        emu_check(y, (size_t)B * sizeof(int), EMU_DEVICE, call, "y") ||
        emu_check(acc, 4 * sizeof(double), EMU_DEVICE, call, "acc"))
        return emu_last_error();
    xent_t a = {z, y, B, C, acc};
    emu_launch(s, call, run_softmax_xent, &a, sizeof a);
    return emu_last_error();
}

typedef struct {
    const float *g;
    void *out;
    cudaDataType_t t;
    size_t n;
    float f;
    const double *ls;
} prep_t;

static void run_grad_prep(void *arg)
{
    const prep_t *a = arg;
    const float k = a->ls ? a->f * (float)*a->ls : a->f;
    for (size_t i = 0; i < a->n; i++)
        put(a->out, a->t, i, a->g[i] * k);
}

EMU_API cudaError_t mk_grad_prep(const float *g, void *out, cudaDataType_t t, size_t n, float f,
                                 const double *ls, cudaStream_t s)
{
    if (!type_ok(t))
        return cudaErrorInvalidValue;
    const char *call = "mk_grad_prep";
    const size_t gb = n * 4, ob = n * esize(t);
    if (emu_check(g, gb, EMU_DEVICE, call, "g") || emu_check(out, ob, EMU_DEVICE, call, "out") ||
        (ls && emu_check(ls, sizeof(double), EMU_DEVICE, call, "loss scale")))
        return emu_last_error();
    /* in place only element for element: a narrower out over g races */
    const char *gp = (const char *)g, *op = (const char *)out;
    if (n && !((const void *)g == out && t == CUDA_R_32F) && gp < op + ob && op < gp + gb)
        return emu_violation("mk_grad_prep: out = %p (%zu bytes) overlaps g = %p (%zu bytes) "
                             "other than in place in float32", out, ob, (const void *)g, gb);
    prep_t a = {g, out, t, n, f, ls};
    emu_launch(s, call, run_grad_prep, &a, sizeof a);
    return emu_last_error();
}

typedef struct {
    float *db;
    void *d;
    const void *src; /* bias_add: the epilogue's vector; bias_grad: act */
    cudaDataType_t t;
    int n, B;
} bgrad_t;

static void run_bias_add(void *arg)
{
    const bgrad_t *a = arg;
    for (int j = 0; j < a->n; j++)
        a->db[j] = a->db[j] + get(a->src, a->t, (size_t)j);
}

EMU_API cudaError_t mk_bias_add(float *db, const void *src, cudaDataType_t t, int n,
                                cudaStream_t s)
{
    if (!type_ok(t) || n < 1)
        return cudaErrorInvalidValue;
    const char *call = "mk_bias_add";
    if (emu_check(db, (size_t)n * 4, EMU_DEVICE, call, "db") ||
        emu_check(src, (size_t)n * esize(t), EMU_DEVICE, call, "src"))
        return emu_last_error();
    bgrad_t a = {db, NULL, src, t, n, 0};
    emu_launch(s, call, run_bias_add, &a, sizeof a);
    return emu_last_error();
}

static void run_bias_grad(void *arg)
{
    const bgrad_t *a = arg;
    for (int j = 0; j < a->n; j++) {
        float s = 0;
        for (int i = 0; i < a->B; i++) {
            size_t k = (size_t)i * (size_t)a->n + (size_t)j;
            float v = get(a->d, a->t, k);
            if (a->src && !(get(a->src, a->t, k) > 0.0f)) {
                v = 0.0f;
                put(a->d, a->t, k, 0.0f);
            }
            s = s + v;
        }
        a->db[j] = a->db[j] + s;
    }
}

EMU_API cudaError_t mk_bias_grad(void *d, const void *act, cudaDataType_t t, int n, int B,
                                 float *db, cudaStream_t s)
{
    if (!type_ok(t) || n < 1 || B < 0)
        return cudaErrorInvalidValue;
    const char *call = "mk_bias_grad";
    const size_t mb = (size_t)n * (size_t)B * esize(t);
    if (emu_check(d, mb, EMU_DEVICE, call, "d") ||
        (act && emu_check(act, mb, EMU_DEVICE, call, "act")) ||
        emu_check(db, (size_t)n * 4, EMU_DEVICE, call, "db"))
        return emu_last_error();
    bgrad_t a = {db, d, act, t, n, B};
    emu_launch(s, call, run_bias_grad, &a, sizeof a);
    return emu_last_error();
}

/* ------------------------------------------------------------------ BatchNorm1d */

typedef struct {
    float *z, *xhat, *invstd, *rmean, *rvar, *rcount, *dgamma, *dbeta, *sums;
    const float *mean, *var, *gamma, *beta, *act, *csums;
    float *omean, *ovar;
    const double *total;
    double eps;
    float mom;
    int B, C, train;
} bn_t;

static void run_bn_stats(void *arg)
{
    const bn_t *a = arg;
    const int B = a->B, C = a->C;
    for (int c = 0; c < C; c++) {
        double sum = 0, q = 0;
        for (int i = 0; i < B; i++)
            sum += a->z[(size_t)i * C + c];
        double mu = sum / B;
        for (int i = 0; i < B; i++) {
            double d = a->z[(size_t)i * C + c] - mu;
            q += d * d;
        }
        a->omean[c] = (float)mu;
        a->ovar[c] = (float)(q / B);
    }
}

static void run_bn_forward(void *arg)
{
    const bn_t *a = arg;
    const int B = a->B, C = a->C;
    for (int c = 0; c < C; c++) {
        float mu, is;
        if (a->train) {
            double n = a->total ? *a->total : (double)B;
            is = (float)(1.0 / sqrt((double)a->var[c] + a->eps));
            float unbiased = n > 1 ? (float)((double)a->var[c] * n / (n - 1)) : a->var[c];
            a->rmean[c] = (1.0f - a->mom) * a->rmean[c] + a->mom * a->mean[c];
            a->rvar[c] = (1.0f - a->mom) * a->rvar[c] + a->mom * unbiased;
            if (c == 0)
                a->rcount[0] += 1.0f;
            mu = a->mean[c];
            a->invstd[c] = is;
        } else {
            mu = a->rmean[c];
            is = (float)(1.0 / sqrt((double)a->rvar[c] + a->eps));
        }
        for (int i = 0; i < B; i++) {
            size_t k = (size_t)i * C + c;
            float x = (a->z[k] - mu) * is;
            if (a->train)
                a->xhat[k] = x;
            float y = a->gamma[c] * x + a->beta[c];
            a->z[k] = y > 0.0f ? y : 0.0f;
        }
    }
}

static void run_bn_backward_sums(void *arg)
{
    const bn_t *a = arg;
    const int B = a->B, C = a->C;
    for (int c = 0; c < C; c++) {
        double s0 = 0, s1 = 0;
        for (int i = 0; i < B; i++) {
            size_t k = (size_t)i * C + c;
            float g = a->act[k] > 0.0f ? a->z[k] : 0.0f;
            a->z[k] = g;
            s0 += g;
            s1 += (double)g * a->xhat[k];
        }
        a->sums[c] = (float)s0;
        a->sums[C + c] = (float)s1;
        a->dbeta[c] += a->sums[c];
        a->dgamma[c] += a->sums[C + c];
    }
}

static void run_bn_backward_dx(void *arg)
{
    const bn_t *a = arg;
    const int B = a->B, C = a->C;
    const float inv_n = (float)(1.0 / (a->total ? *a->total : (double)B));
    for (int c = 0; c < C; c++) {
        const float sdy = a->csums[c] * inv_n, sdx = a->csums[C + c] * inv_n;
        const float k0 = a->gamma[c] * a->invstd[c];
        for (int i = 0; i < B; i++) {
            size_t k = (size_t)i * C + c;
            a->z[k] = k0 * (a->z[k] - sdy - a->xhat[k] * sdx);
        }
    }
}

/* [p, p + n floats) must be device memory of call */
static int bn_bad(const void *p, size_t n, const char *call, const char *what)
{
    return emu_check(p, n * 4, EMU_DEVICE, call, what) != cudaSuccess;
}

EMU_API cudaError_t mk_bn_stats(const float *z, int B, int C, float *mean, float *var,
                                cudaStream_t s)
{
    if (B < 1 || C < 1)
        return cudaErrorInvalidValue;
    const char *call = "mk_bn_stats";
    const size_t bc = (size_t)B * (size_t)C;
    if (bn_bad(z, bc, call, "z") || bn_bad(mean, (size_t)C, call, "mean") ||
        bn_bad(var, (size_t)C, call, "var"))
        return emu_last_error();
    bn_t a;
    memset(&a, 0, sizeof a);
    a.z = (float *)z, a.omean = mean, a.ovar = var, a.B = B, a.C = C;
    emu_launch(s, call, run_bn_stats, &a, sizeof a);
    return emu_last_error();
}

EMU_API cudaError_t mk_bn_forward(float *z, int B, int C, int train, const float *mean,
                                  const float *var, const float *gamma, const float *beta,
                                  float *rmean, float *rvar, float *rcount, const double *total,
                                  float momentum, double eps, float *xhat, float *invstd,
                                  cudaStream_t s)
{
    if (B < 1 || C < 1)
        return cudaErrorInvalidValue;
    const char *call = "mk_bn_forward";
    const size_t bc = (size_t)B * (size_t)C, c = (size_t)C;
    if (bn_bad(z, bc, call, "z") || bn_bad(gamma, c, call, "gamma") ||
        bn_bad(beta, c, call, "beta") || bn_bad(rmean, c, call, "rmean") ||
        bn_bad(rvar, c, call, "rvar") ||
        (train && (bn_bad(mean, c, call, "mean") || bn_bad(var, c, call, "var") ||
                   bn_bad(rcount, 1, call, "rcount") || bn_bad(xhat, bc, call, "xhat") ||
                   bn_bad(invstd, c, call, "invstd") ||
                   (total && emu_check(total, 8, EMU_DEVICE, call, "total")))))
        return emu_last_error();
    bn_t a;
    memset(&a, 0, sizeof a);
    a.z = z, a.B = B, a.C = C, a.train = train, a.mean = mean, a.var = var, a.gamma = gamma;
    a.beta = beta, a.rmean = rmean, a.rvar = rvar, a.rcount = rcount, a.total = total;
    a.mom = momentum, a.eps = eps, a.xhat = xhat, a.invstd = invstd;
    emu_launch(s, call, run_bn_forward, &a, sizeof a);
    return emu_last_error();
}

EMU_API cudaError_t mk_bn_backward_sums(float *d, const float *act, const float *xhat, int B,
                                        int C, float *dgamma, float *dbeta, float *sums,
                                        cudaStream_t s)
{
    if (B < 1 || C < 1)
        return cudaErrorInvalidValue;
    const char *call = "mk_bn_backward_sums";
    const size_t bc = (size_t)B * (size_t)C, c = (size_t)C;
    if (bn_bad(d, bc, call, "d") || bn_bad(act, bc, call, "act") ||
        bn_bad(xhat, bc, call, "xhat") || bn_bad(dgamma, c, call, "dgamma") ||
        bn_bad(dbeta, c, call, "dbeta") || bn_bad(sums, 2 * c, call, "sums"))
        return emu_last_error();
    bn_t a;
    memset(&a, 0, sizeof a);
    a.z = d, a.act = act, a.xhat = (float *)xhat, a.B = B, a.C = C, a.dgamma = dgamma;
    a.dbeta = dbeta, a.sums = sums;
    emu_launch(s, call, run_bn_backward_sums, &a, sizeof a);
    return emu_last_error();
}

EMU_API cudaError_t mk_bn_backward_dx(float *d, const float *xhat, int B, int C,
                                      const float *gamma, const float *invstd, const float *sums,
                                      const double *total, cudaStream_t s)
{
    if (B < 1 || C < 1)
        return cudaErrorInvalidValue;
    const char *call = "mk_bn_backward_dx";
    const size_t bc = (size_t)B * (size_t)C, c = (size_t)C;
    if (bn_bad(d, bc, call, "d") || bn_bad(xhat, bc, call, "xhat") ||
        bn_bad(gamma, c, call, "gamma") || bn_bad(invstd, c, call, "invstd") ||
        bn_bad(sums, 2 * c, call, "sums") ||
        (total && emu_check(total, 8, EMU_DEVICE, call, "total")))
        return emu_last_error();
    bn_t a;
    memset(&a, 0, sizeof a);
    a.z = d, a.xhat = (float *)xhat, a.B = B, a.C = C, a.gamma = gamma, a.invstd = (float *)invstd;
    a.csums = sums, a.total = total;
    emu_launch(s, call, run_bn_backward_dx, &a, sizeof a);
    return emu_last_error();
}
