/* SPDX-License-Identifier: BSD-3-Clause */
/* optim.c: optimizers over the engine's flat arenas, with PyTorch's update
 * rules: SGD (momentum, dampening, Nesterov, L2 weight decay) and AdamW
 * (decoupled weight decay, bias correction), global-norm clipping, and
 * dynamic loss scaling. Every rank holds identical averaged gradients, so
 * every rank makes the same decisions without communicating; only a norm
 * group (pieces of one model on several ranks: pipeline stages) passes its
 * partial sums of squares along. On a device
 * engine the same rules run as CUDA kernels on the engine's stream
 * (cuda_kernels.cu), with the scalars (scale, steps, norm, skip) on the
 * device; the getters read them back when asked. */
#include "config.h"
#include "ddp_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef DDPC_HAVE_CUDA
#include "cuda_kernels.h"
#endif

struct ddpc_optim {
    ddpc_ddp_t ddp;
    ddpc_optim_config_t cfg;
    int nstates;
    const char *state_names[2];
    float *state[2];   /* (state_len,) each: the floats [state_off, state_off +
                          state_len) of the parameter arena's layout */
    size_t state_off, state_len; /* the engine's shard; 0 and numel unsharded */
    int sharded;       /* the engine's shard != DDPC_SHARD_NONE */
    int counted;       /* in the engine's optims (a host optimizer, created) */
    uint64_t steps;    /* updates applied */
    double scale;      /* dynamic loss scale */
    int good_steps;    /* since the last overflow or growth */
    double last_norm;
    int last_stepped;
    int device;        /* the engine's; DDPC_DEVICE_HOST for the CPU rules */
    ddpc_comm_t norm_group; /* ddpc_optim_set_norm_group, or NULL */
    size_t norm_offset;     /* this engine's first float in the group's model */
#ifdef DDPC_HAVE_CUDA
    ddpc_cuda_optim_scalars_t *sc; /* device: the scalars above, authoritative there */
    double *partials;  /* device: DDPC_CUDA_OPTIM_PARTIALS */
    ddpc_cuda_optim_hyper_t *hyper; /* device: the update's values, read when a step runs */
    double *sums;      /* device, sharded: every rank's slice sum of squares, by rank */
    int set_err;       /* a cudaError_t of ddpc_optim_set_lr, reported by the next step */
#endif
};

#ifdef DDPC_HAVE_CUDA
/* Device scalars to and from the host struct, after the engine's stream. */
static ddpc_status_t pull(ddpc_optim_t o)
{
    ddpc_ddp_t d = o->ddp;
    ddpc_cuda_optim_scalars_t h;
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)d->stream);
    if (e == cudaSuccess)
        e = cudaMemcpy(&h, o->sc, sizeof h, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess)
        return ddp_cuda_check(d, e, "reading the optimizer's scalars");
    o->scale = h.scale;
    o->last_norm = h.last_norm;
    o->steps = h.steps;
    o->good_steps = h.good_steps;
    o->last_stepped = h.stepped;
    return DDPC_OK;
}

static ddpc_status_t push(ddpc_optim_t o)
{
    ddpc_ddp_t d = o->ddp;
    ddpc_cuda_optim_scalars_t h = {o->scale, o->last_norm, (unsigned long long)o->steps,
                                   o->good_steps, o->last_stepped};
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)d->stream);
    if (e == cudaSuccess)
        e = cudaMemcpy(o->sc, &h, sizeof h, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? DDPC_OK : ddp_cuda_check(d, e, "writing the optimizer's scalars");
}
/* The values of the update into device memory (at creation). */
static ddpc_status_t push_hyper(ddpc_optim_t o)
{
    const ddpc_optim_config_t *c = &o->cfg;
    ddpc_cuda_optim_hyper_t h = {c->lr, c->weight_decay, c->momentum, c->dampening,
                                 c->beta1, c->beta2, c->eps, c->clip_norm};
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)o->ddp->stream);
    if (e == cudaSuccess)
        e = cudaMemcpy(o->hyper, &h, sizeof h, cudaMemcpyHostToDevice);
    return e == cudaSuccess ? DDPC_OK : ddp_cuda_check(o->ddp, e, "writing the optimizer's config");
}
#define ON_DEVICE(o) ((o)->device != DDPC_DEVICE_HOST)
#endif

const char *ddpc_optim_name(ddpc_optim_type_t t)
{
    return t == DDPC_OPTIM_SGD ? "sgd" : t == DDPC_OPTIM_ADAMW ? "adamw" : "unknown";
}

ddpc_status_t ddpc_optim_create(ddpc_ddp_t d, const ddpc_optim_config_t *cfg, ddpc_optim_t *out)
{
    static const ddpc_optim_config_t defaults = DDPC_OPTIM_CONFIG_INIT;
    if (!d || !out)
        return DDPC_ERR_INVALID;
    *out = NULL;
    if (!d->built)
        return ddp_err(d, DDPC_ERR_STATE, "optimizer created before ddpc_ddp_build");
    const ddpc_optim_config_t c = cfg ? *cfg : defaults;
    const char *bad = NULL;
    if (c.type != DDPC_OPTIM_SGD && c.type != DDPC_OPTIM_ADAMW)
        bad = "type (sgd or adamw)";
    else if (!(c.lr >= 0) || !isfinite(c.lr))
        bad = "lr >= 0";
    else if (!(c.momentum >= 0 && c.momentum < 1) && c.type == DDPC_OPTIM_SGD)
        bad = "momentum in [0, 1)";
    else if (c.nesterov && (c.momentum <= 0 || c.dampening != 0))
        bad = "nesterov only with momentum > 0 and dampening 0";
    else if (!(c.weight_decay >= 0))
        bad = "weight_decay >= 0";
    else if (c.type == DDPC_OPTIM_ADAMW &&
             !(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1 && c.eps > 0))
        bad = "betas in [0, 1) and eps > 0";
    else if (!(c.clip_norm >= 0))
        bad = "clip_norm >= 0 (0: off)";
    else if (c.dynamic_loss_scale && !(c.loss_scale > 0 && c.scale_growth_interval > 0))
        bad = "loss_scale > 0 and scale_growth_interval > 0";
    if (bad)
        return ddp_err(d, DDPC_ERR_INVALID, "optimizer config: expected %s", bad);
    ddpc_optim_t o = calloc(1, sizeof *o);
    if (!o)
        return ddp_err(d, DDPC_ERR_NOMEM, "cannot allocate the optimizer");
    o->ddp = d;
    o->cfg = c;
    o->scale = c.dynamic_loss_scale ? c.loss_scale : 1.0;
    if (c.type == DDPC_OPTIM_SGD && c.momentum > 0) {
        o->nstates = 1;
        o->state_names[0] = "momentum_buffer";
    } else if (c.type == DDPC_OPTIM_ADAMW) {
        o->nstates = 2;
        o->state_names[0] = "exp_avg";
        o->state_names[1] = "exp_avg_sq";
    }
    /* sharded: the state of this rank's slice of the arena only */
    o->sharded = d->cfg.shard != DDPC_SHARD_NONE;
    o->state_off = d->shard_off;
    o->state_len = d->shard_len;
    size_t bytes = ((o->state_len ? o->state_len : 1) * sizeof(float) + 63) / 64 * 64;
    o->device = d->device;
    o->last_stepped = 1;
    if (o->device != DDPC_DEVICE_HOST) {
#ifdef DDPC_HAVE_CUDA
        ddpc_status_t st = DDPC_OK;
        for (int k = 0; k < o->nstates && !st; k++)
            st = ddp_dev_alloc(d, (void **)&o->state[k], bytes, "optimizer state");
        if (!st)
            st = ddp_dev_alloc(d, (void **)&o->sc, sizeof *o->sc, "optimizer scalars");
        if (!st)
            st = ddp_dev_alloc(d, (void **)&o->partials,
                               DDPC_CUDA_OPTIM_PARTIALS * sizeof(double), "optimizer workspace");
        if (!st)
            st = ddp_dev_alloc(d, (void **)&o->hyper, sizeof *o->hyper, "optimizer config");
        if (!st && o->sharded)
            st = ddp_dev_alloc(d, (void **)&o->sums, (size_t)d->size * sizeof(double),
                               "the shards' sums of squares");
        if (!st)
            st = push_hyper(o);
        if (!st)
            st = push(o);
        if (st) {
            ddpc_optim_destroy(o);
            return st;
        }
        *out = o;
        return DDPC_OK;
#else
        ddpc_optim_destroy(o);
        return ddp_err(d, DDPC_ERR_UNSUPPORTED, "device optimizer without CUDA");
#endif
    }
    for (int k = 0; k < o->nstates; k++) {
        o->state[k] = aligned_alloc(64, bytes);
        if (!o->state[k]) {
            ddpc_optim_destroy(o);
            return ddp_err(d, DDPC_ERR_NOMEM, "cannot allocate optimizer state of %zu bytes", bytes);
        }
        memset(o->state[k], 0, bytes);
    }
    d->optims++;
    o->counted = 1;
    *out = o;
    return DDPC_OK;
}

void ddpc_optim_destroy(ddpc_optim_t o)
{
    if (!o)
        return;
#ifdef DDPC_HAVE_CUDA
    if (ON_DEVICE(o)) {
        cudaStreamSynchronize((cudaStream_t)o->ddp->stream);
        for (int k = 0; k < o->nstates; k++)
            ddp_dev_free(o->state[k]);
        ddp_dev_free(o->sc);
        ddp_dev_free(o->partials);
        ddp_dev_free(o->hyper);
        ddp_dev_free(o->sums);
        free(o);
        return;
    }
#endif
    for (int k = 0; k < o->nstates; k++)
        free(o->state[k]);
    if (o->ddp->optims > 0 && o->counted)
        o->ddp->optims--;
    free(o);
}

/* The CPU passes go in blocks of BLOCK elements with fixed inner loops,
 * which gcc -O2 vectorizes (its cheap cost model does not vectorize a loop
 * of unknown length), and the ends element by element. Contraction into
 * FMA stays off where it would make one rank's update differ from
 * another's on a different CPU: the default target has no FMA. */
#define BLOCK 16

/* Sum of squares in double: BLOCK partial sums, acc[k] gathering the
 * elements whose index in the model is k modulo BLOCK, each in index order;
 * g is the model's floats [phase, phase + n). Partial sums handed from one
 * piece of the model to the next and then added up, k after k, give the
 * bitwise sum of the whole arena. */
static void sumsq_acc(const float *restrict g, size_t n, size_t phase, double acc[BLOCK])
{
    size_t i = 0;
    for (; i < n && (phase + i) % BLOCK; i++)
        acc[(phase + i) % BLOCK] += (double)g[i] * (double)g[i];
    for (; i + BLOCK <= n; i += BLOCK)
        for (int k = 0; k < BLOCK; k++)
            acc[k] += (double)g[i + k] * (double)g[i + k];
    for (int k = 0; i < n; i++, k++)
        acc[k] += (double)g[i] * (double)g[i];
}

static double acc_total(const double acc[BLOCK])
{
    double s = 0;
    for (int k = 0; k < BLOCK; k++)
        s += acc[k];
    return s;
}

static double sumsq(const float *restrict g, size_t n)
{
    double acc[BLOCK] = {0};
    sumsq_acc(g, n, 0, acc);
    return acc_total(acc);
}

/* A folded average's owed 1/N (ddpc_ddp_config_t's fold_average) made in
 * place, gathering the sum of squares of the averages as sumsq does: x * r
 * with r = 1/N when N is a power of two (the same value as x / N), else
 * x / N: the communicator's average bit for bit. */
static inline __attribute__((always_inline)) void settle_pass(float *restrict g, size_t n,
                                                              float f, int div,
                                                              double acc[BLOCK])
{
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK)
        for (int k = 0; k < BLOCK; k++) {
            g[i + k] = div ? g[i + k] / f : g[i + k] * f;
            acc[k] += (double)g[i + k] * (double)g[i + k];
        }
    for (int k = 0; i < n; i++, k++) {
        g[i] = div ? g[i] / f : g[i] * f;
        acc[k] += (double)g[i] * (double)g[i];
    }
}

static double settle_sumsq(float *restrict g, size_t n, int size)
{
    double acc[BLOCK] = {0};
    if ((size & (size - 1)) == 0)
        settle_pass(g, n, 1.0f / (float)size, 0, acc);
    else
        settle_pass(g, n, (float)size, 1, acc);
    return acc_total(acc);
}

/* The sum of squares of the whole model held in pieces by c's ranks (a norm
 * group, or a sharded engine's communicator): the partial sums go along c in
 * rank order (each rank adds its piece's, g: the model's floats [phase,
 * phase + n)), and the last rank's go back to every rank. Collective over c. */
static ddpc_status_t group_sumsq(ddpc_optim_t o, ddpc_comm_t c, const float *g, size_t n,
                                 size_t phase, double *ss)
{
    ddpc_ddp_t d = o->ddp;
    const int r = ddpc_comm_rank(c), last = ddpc_comm_size(c) - 1;
    double acc[BLOCK] = {0};
    ddpc_status_t st = DDPC_OK;
    if (r > 0)
        st = ddpc_recv(c, acc, BLOCK, DDPC_F64, r - 1);
    if (st == DDPC_OK)
        sumsq_acc(g, n, phase, acc);
    if (st == DDPC_OK && r < last)
        st = ddpc_send(c, acc, BLOCK, DDPC_F64, r + 1);
    if (st == DDPC_OK)
        st = ddpc_broadcast(c, acc, BLOCK, DDPC_F64, last);
    if (st != DDPC_OK)
        return ddp_err(d, st, "the gradient norm over the %s (rank %d of %d): %s",
                       o->sharded ? "shards" : "norm group", r, last + 1, ddpc_last_error(d->rt));
    *ss = acc_total(acc);
    return DDPC_OK;
}

/* One SGD pass; mom, first, nest and fold are constants at each call site,
 * so every variant compiles to its own loop without branches. acc (BLOCK
 * doubles, or NULL) gathers the sum of squares of g on the way, when no
 * earlier pass needed it. fold 1 or 2: g holds a folded average's sums,
 * made the average on the way (x * f, or x / f; settle_pass) and left as
 * they are (the engine still owes the division to its accessors). */
static inline __attribute__((always_inline)) void
sgd_pass(float *restrict p, const float *restrict g, float *restrict buf, size_t n, float lr,
         float wd, float mu, float damp, int mom, int first, int nest, double *restrict acc,
         int fold, float f)
{
    size_t i = 0;
#define SGD_ONE(j, k)                                                                     \
    do {                                                                                  \
        const float gj = fold == 2 ? g[j] / f : fold ? g[j] * f : g[j];                   \
        float gi = gj + wd * p[j];                                                        \
        if (acc)                                                                          \
            acc[k] += (double)gj * (double)gj;                                            \
        if (mom) {                                                                        \
            float b = first ? gi : mu * buf[j] + damp * gi;                               \
            buf[j] = b;                                                                   \
            gi = nest ? gi + mu * b : b;                                                  \
        }                                                                                 \
        p[j] -= lr * gi;                                                                  \
    } while (0)
    for (; i + BLOCK <= n; i += BLOCK)
        for (int k = 0; k < BLOCK; k++)
            SGD_ONE(i + k, k);
    for (int k = 0; i < n; i++, k++)
        SGD_ONE(i, k);
#undef SGD_ONE
}

/* g *= f */
static void scale_pass(float *restrict g, size_t n, float f)
{
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK)
        for (int k = 0; k < BLOCK; k++)
            g[i + k] *= f;
    for (; i < n; i++)
        g[i] *= f;
}

#define SGD_VARIANTS(A, F)                                                                \
    do {                                                                                  \
        if (mu <= 0)                                                                      \
            sgd_pass(p, g, buf, n, lr, wd, mu, damp, 0, 0, 0, A, F, f);                   \
        else if (first && nest)                                                           \
            sgd_pass(p, g, buf, n, lr, wd, mu, damp, 1, 1, 1, A, F, f);                   \
        else if (first)                                                                   \
            sgd_pass(p, g, buf, n, lr, wd, mu, damp, 1, 1, 0, A, F, f);                   \
        else if (nest)                                                                    \
            sgd_pass(p, g, buf, n, lr, wd, mu, damp, 1, 0, 1, A, F, f);                   \
        else                                                                              \
            sgd_pass(p, g, buf, n, lr, wd, mu, damp, 1, 0, 0, A, F, f);                   \
    } while (0)

/* PyTorch's SGD: one pass over p, g and the momentum buffer; fold > 1: g
 * holds the sums of a folded average over fold ranks (only with acc: a
 * pass that needed the norm first has settled it) */
VECTOR_CLONES /* memory-bound, yet 0.92..1.18 ms for SSE's 1.12..1.25 (doc/performance.md) */
static void sgd(ddpc_optim_t o, float *p, const float *g, size_t n, double *acc, int fold)
{
    const ddpc_optim_config_t *c = &o->cfg;
    const float lr = (float)c->lr, wd = (float)c->weight_decay, mu = (float)c->momentum;
    const float damp = 1.0f - (float)c->dampening;
    const int first = o->steps == 0, nest = c->nesterov;
    float *buf = o->state[0];
    const int pow2 = (fold & (fold - 1)) == 0;
    const float f = pow2 ? 1.0f / (float)fold : (float)fold;
    if (!acc)
        SGD_VARIANTS(NULL, 0);
    else if (fold <= 1)
        SGD_VARIANTS(acc, 0);
    else if (pow2)
        SGD_VARIANTS(acc, 1);
    else
        SGD_VARIANTS(acc, 2);
}
#undef SGD_VARIANTS

/* gcc's -O2 cost model (very cheap) leaves a loop with sqrtf and a division
 * scalar; its "cheap" one vectorizes it (8 to 16 lanes) */
#if defined(__GNUC__) && !defined(__clang__)
#define ADAMW_VECTORIZE __attribute__((optimize("vect-cost-model=cheap")))
#else
#define ADAMW_VECTORIZE
#endif
VECTOR_CLONES ADAMW_VECTORIZE
static void adamw(ddpc_optim_t o, float *restrict p, const float *restrict g, size_t n)
{
    const ddpc_optim_config_t *c = &o->cfg;
    const double t = (double)(o->steps + 1);
    const float b1 = (float)c->beta1, b2 = (float)c->beta2, eps = (float)c->eps;
    const float decay = (float)(1.0 - c->lr * c->weight_decay);
    const float step_size = (float)(c->lr / (1.0 - pow(c->beta1, t)));
    const float inv_sqrt_bc2 = (float)(1.0 / sqrt(1.0 - pow(c->beta2, t)));
    float *restrict m = o->state[0], *restrict v = o->state[1];
    size_t i = 0;
    /* in blocks, each element in locals (one load and one store of each
     * array), which gcc vectorizes: the same operations in the same order
     * as one element at a time, so the same bits (sgd_pass) */
#define ADAMW_ONE(j)                                                                      \
    do {                                                                                  \
        const float gj = g[j], pj = p[j] * decay;                                         \
        const float mj = b1 * m[j] + (1.0f - b1) * gj;                                    \
        const float vj = b2 * v[j] + (1.0f - b2) * gj * gj;                               \
        m[j] = mj;                                                                        \
        v[j] = vj;                                                                        \
        p[j] = pj - step_size * mj / (sqrtf(vj) * inv_sqrt_bc2 + eps);                    \
    } while (0)
    for (; i + BLOCK <= n; i += BLOCK)
#pragma GCC unroll 16 /* whole, as sgd_pass's smaller body is: then vectorized */
        for (int k = 0; k < BLOCK; k++)
            ADAMW_ONE(i + k);
    for (; i < n; i++)
        ADAMW_ONE(i);
#undef ADAMW_ONE
}

/* The floats of this rank's slice that lie inside the arena (short of
 * state_len, or 0, where the slice reaches the padding). */
static size_t slice_numel(const ddpc_optim_t o)
{
    const size_t n = o->ddp->numel;
    return o->state_off >= n ? 0 : n - o->state_off < o->state_len ? n - o->state_off
                                                                   : o->state_len;
}

/* A sharded step's updated slice to every rank: broadcast by bucket and
 * left to the next forward's ddpc_ddp_param_wait (FORWARD in effect, a
 * model that waits, not inside a graph capture: a broadcast captured in one
 * step's graph could not be waited for by the next one's), else one
 * in-place all-gather. Host and device engines alike. */
static ddpc_status_t shard_gather(ddpc_optim_t o)
{
    ddpc_ddp_t d = o->ddp;
    if (d->gather_forward && d->model_waits && !ddp_capturing(d))
        return ddp_gather_issue(d);
    if (d->size == 1)
        return DDPC_OK;
    ddpc_comm_tag_next(d->comm, "ddp shard all-gather");
    ddpc_status_t st = ddpc_allgather(d->comm, d->param_arena + o->state_off, d->param_arena,
                                      o->state_len, DDPC_F32);
    if (st != DDPC_OK)
        return ddp_err(d, st, "all-gathering the updated parameter shards (%zu floats per "
                       "rank): %s", o->state_len, ddpc_last_error(d->rt));
    return DDPC_OK;
}

#ifdef DDPC_HAVE_CUDA
/* A sharded step on the device, all stream-ordered on the engine's stream:
 * the slice's sum of squares into sums[rank], the sums all-gathered (every
 * rank then adds the same N doubles in the same order: one norm, one skip
 * decision everywhere), the decisions and the slice's update, then the
 * updated slices to every rank (shard_gather: a bucket's broadcasts are
 * waited for on the compute stream by the forward's param_wait). A skipped
 * step (overflow) updates nothing and gathers the unchanged parameters. */
static ddpc_status_t device_sharded_step(ddpc_optim_t o)
{
    ddpc_ddp_t d = o->ddp;
    cudaStream_t s = (cudaStream_t)d->stream;
    const size_t n = slice_numel(o), off = o->state_off;
    float *p = d->param_arena + off, *g = d->grad_shard;
    ddpc_status_t st = ddp_cuda_check(d, ddpc_cuda_optim_sumsq(n, g, o->partials,
                                                              o->sums + d->rank, s),
                                      "the optimizer step (the slice's sum of squares)");
    if (st == DDPC_OK && d->size > 1) {
        ddpc_comm_tag_next(d->comm, "ddp shard norms");
        if ((st = ddpc_allgather(d->comm, o->sums + d->rank, o->sums, 1, DDPC_F64)) != DDPC_OK)
            return ddp_err(d, st, "all-gathering the shards' sums of squares: %s",
                           ddpc_last_error(d->rt));
    }
    if (st == DDPC_OK)
        st = ddp_cuda_check(d, ddpc_cuda_optim_apply(&o->cfg, n, p, g, o->state[0], o->state[1],
                                                     o->sc, o->partials, o->sums,
                                                     (unsigned)d->size, o->hyper, s),
                            "the optimizer step (the slice's update)");
    return st == DDPC_OK ? shard_gather(o) : st;
}
#endif

static ddpc_status_t optim_step(ddpc_optim_t o, int *stepped)
{
    ddpc_ddp_t d = o->ddp;
    size_t n = d->numel;
    float *p = d->param_arena, *g = d->grad_arena;
    if (stepped)
        *stepped = 0;
#ifdef DDPC_HAVE_CUDA
    if (ON_DEVICE(o)) {
        if (o->set_err) {
            cudaError_t e = (cudaError_t)o->set_err;
            o->set_err = 0;
            return ddp_err(d, DDPC_ERR_CUDA, "ddpc_optim_set_lr could not reach the device "
                           "(%s)%s", cudaGetErrorString(e),
                           e == cudaErrorStreamCaptureUnsupported || ddp_capturing(d)
                               ? ": it was called while the engine's stream was being captured; "
                                 "call it between replays"
                               : "");
        }
        ddpc_status_t st = o->sharded ? device_sharded_step(o)
                                      : ddp_cuda_check(d, ddpc_cuda_optim_step(
                                                              &o->cfg, n, p, g, o->state[0],
                                                              o->state[1], o->sc, o->partials,
                                                              o->hyper, (cudaStream_t)d->stream),
                                                       "the optimizer step");
        if (st == DDPC_OK && stepped)
            *stepped = o->cfg.dynamic_loss_scale ? -1 : 1;
        return st;
    }
#endif
    /* sharded: this rank updates its slice [state_off, state_off + n) (n
     * short of state_len or 0 where the slice reaches the padding); the norm
     * of the whole arena comes from the slices' partial sums, passed along
     * the ranks, bitwise the unsharded one */
    if (o->sharded) {
        n = slice_numel(o);
        p += o->state_off;
        g = d->grad_shard; /* state_off is the engine's shard_off */
    }
    /* the norm decides the step when scaling or clipping: a pass of its
     * own first; otherwise the update pass gathers it on the way */
    const int norm_first =
        o->cfg.dynamic_loss_scale || o->cfg.clip_norm > 0 || o->norm_group || o->sharded;
    /* a folded average (never sharded) is made in the SGD pass, in registers:
     * the arena keeps the sums until zero_grad, or an accessor divides it;
     * where a norm comes first, or for AdamW, the norm's pass divides it in
     * place */
    const int fold = d->avg_pending && !norm_first && o->cfg.type == DDPC_OPTIM_SGD ? d->size : 0;
    double ss = 0, settled_ss = 0;
    int settled = 0;
    if (d->avg_pending && !fold) {
        if (o->norm_group)
            ddp_settle_average(d);
        else {
            settled_ss = settle_sumsq(d->grad_arena, d->numel, d->size);
            settled = 1;
            d->avg_pending = 0;
        }
    }
    if (o->norm_group || o->sharded) {
        ddpc_status_t st = o->sharded ? group_sumsq(o, d->comm, g, n, o->state_off, &ss)
                                      : group_sumsq(o, o->norm_group, g, n, o->norm_offset, &ss);
        if (st != DDPC_OK)
            return st;
    } else if (norm_first) {
        ss = settled ? settled_ss : sumsq(g, n);
    }
    o->last_stepped = 1;
    if (o->cfg.dynamic_loss_scale) {
        if (!isfinite(ss)) { /* overflow: skip, back off (identical on all ranks) */
            o->scale *= 0.5;
            o->good_steps = 0;
            o->last_norm = INFINITY;
            o->last_stepped = 0;
            return DDPC_OK;
        }
        scale_pass(g, n, (float)(1.0 / o->scale));
        ss /= o->scale * o->scale;
        if (++o->good_steps >= o->cfg.scale_growth_interval) {
            o->scale *= 2.0;
            o->good_steps = 0;
        }
    }
    if (norm_first) {
        o->last_norm = sqrt(ss);
        if (o->cfg.clip_norm > 0 && o->last_norm > o->cfg.clip_norm)
            scale_pass(g, n, (float)(o->cfg.clip_norm / (o->last_norm + 1e-6)));
    }
    double acc[BLOCK] = {0};
    if (o->cfg.type == DDPC_OPTIM_SGD) {
        sgd(o, p, g, n, norm_first ? NULL : acc, fold);
    } else {
        if (!norm_first)
            acc[0] = settled ? settled_ss : sumsq(g, n);
        adamw(o, p, g, n);
    }
    if (!norm_first) {
        for (int k = 0; k < BLOCK; k++)
            ss += acc[k];
        o->last_norm = sqrt(ss);
    }
    o->steps++;
    if (o->sharded) { /* every rank's updated slice to every rank */
        ddpc_status_t st = shard_gather(o);
        if (st != DDPC_OK)
            return st;
    }
    if (stepped)
        *stepped = 1;
    return DDPC_OK;
}

ddpc_status_t ddpc_optim_step(ddpc_optim_t o, int *stepped)
{
    if (!o)
        return DDPC_ERR_INVALID;
    const double t0 = ddpc_tl_t0();
    ddpc_status_t st = ddp_gather_wait(o->ddp, -1); /* the last step's, if nothing waited */
    if (st == DDPC_OK)
        st = optim_step(o, stepped);
    ddpc_tl_span("optimizer step", t0, -1);
    ddpc_ddp_t d = o->ddp;
    if (st != DDPC_OK || d->check_every <= 0)
        return st;
    if (ddp_capturing(d)) { /* the check reads the parameters on the host: never in a graph */
        if (!d->check_capture_said++)
            ddpc_log(d->rt, DDPC_LOG_INFO, "ddp: DDPC_CHECK_PARAMS: steps captured into a CUDA "
                     "graph are not checked (the check synchronizes the host); eager steps are");
        return st;
    }
    if (++d->optim_steps % (uint64_t)d->check_every == 0)
        st = ddpc_ddp_check_params(d);
    return st;
}

const ddpc_optim_config_t *ddpc_optim_config(ddpc_optim_t o) { return o ? &o->cfg : NULL; }

ddpc_status_t ddpc_optim_set_norm_group(ddpc_optim_t o, ddpc_comm_t group, size_t offset)
{
    if (!o)
        return DDPC_ERR_INVALID;
    ddpc_ddp_t d = o->ddp;
    if (!group) {
        o->norm_group = NULL;
        o->norm_offset = 0;
        return DDPC_OK;
    }
    if (o->sharded)
        return ddp_err(d, DDPC_ERR_UNSUPPORTED, "ddpc_optim_set_norm_group: the engine shards its "
                       "optimizer state (DDPC_SHARD=optim), whose norm already passes along the "
                       "engine's ranks; norm groups need DDPC_SHARD=none");
    if (o->device != DDPC_DEVICE_HOST)
        return ddp_err(d, DDPC_ERR_UNSUPPORTED, "ddpc_optim_set_norm_group: a device engine's "
                       "norm stays on its device; norm groups are for host engines");
    /* every rank's range, so that a gap or an overlap fails on every rank */
    const int n = ddpc_comm_size(group), r = ddpc_comm_rank(group);
    int64_t mine[2] = {(int64_t)offset, (int64_t)d->numel}, *all = malloc((size_t)n * sizeof mine);
    if (!all)
        return ddp_err(d, DDPC_ERR_NOMEM, "ddpc_optim_set_norm_group: out of memory");
    ddpc_status_t st = ddpc_allgather(group, mine, all, 2, DDPC_I64);
    if (st != DDPC_OK) {
        free(all);
        return ddp_err(d, st, "ddpc_optim_set_norm_group: %s", ddpc_last_error(d->rt));
    }
    for (int k = 1; k < n && st == DDPC_OK; k++)
        if (all[2 * k] != all[2 * k - 2] + all[2 * k - 1])
            st = ddp_err(d, DDPC_ERR_INVALID, "ddpc_optim_set_norm_group (rank %d of %d): group "
                         "rank %d's parameters start at float %llu, expected %llu (where group "
                         "rank %d's %llu floats from %llu end: the ranks of a norm group hold "
                         "consecutive pieces of one model, in rank order)", r, n, k,
                         (unsigned long long)all[2 * k],
                         (unsigned long long)(all[2 * k - 2] + all[2 * k - 1]), k - 1,
                         (unsigned long long)all[2 * k - 1], (unsigned long long)all[2 * k - 2]);
    free(all);
    if (st != DDPC_OK)
        return st;
    o->norm_group = group;
    o->norm_offset = offset;
    return DDPC_OK;
}
void ddpc_optim_set_lr(ddpc_optim_t o, double lr)
{
    if (!o)
        return;
    o->cfg.lr = lr;
#ifdef DDPC_HAVE_CUDA
    /* stream-ordered: steps enqueued before keep their rate, later ones and
     * the replays of a captured step read this one (the source is staged at
     * the call, as for any pageable copy) */
    if (ON_DEVICE(o)) {
        cudaError_t e = cudaMemcpyAsync(&o->hyper->lr, &lr, sizeof lr, cudaMemcpyHostToDevice,
                                        (cudaStream_t)o->ddp->stream);
        if (e != cudaSuccess && !o->set_err)
            o->set_err = (int)e;
    }
#endif
}
int ddpc_optim_num_states(ddpc_optim_t o) { return o ? o->nstates : 0; }

float *ddpc_optim_state(ddpc_optim_t o, int k, const char **name)
{
    if (!o || k < 0 || k >= o->nstates)
        return NULL;
    if (name)
        *name = o->state_names[k];
    return o->state[k];
}

ddpc_status_t ddpc_optim_state_range(ddpc_optim_t o, size_t *offset, size_t *numel)
{
    if (!o)
        return DDPC_ERR_INVALID;
    if (offset)
        *offset = o->state_off;
    if (numel)
        *numel = o->state_len;
    return DDPC_OK;
}

/* The scalars' getters and setters: on a device engine they go through the
 * device copy (synchronizing with the engine's stream). */
#ifdef DDPC_HAVE_CUDA
#define PULL(o) ((o) && ON_DEVICE(o) ? (void)pull(o) : (void)0)
#define PUSH(o) ((o) && ON_DEVICE(o) ? (void)push(o) : (void)0)
#else
#define PULL(o) ((void)0)
#define PUSH(o) ((void)0)
#endif

uint64_t ddpc_optim_steps(ddpc_optim_t o) { PULL(o); return o ? o->steps : 0; }
void ddpc_optim_set_steps(ddpc_optim_t o, uint64_t s)
{
    if (!o)
        return;
    PULL(o);
    o->steps = s;
    PUSH(o);
}
double ddpc_optim_loss_scale(ddpc_optim_t o) { PULL(o); return o ? o->scale : 1.0; }
void ddpc_optim_set_loss_scale(ddpc_optim_t o, double s)
{
    if (!o || !(s > 0))
        return;
    PULL(o);
    o->scale = s;
    PUSH(o);
}
double ddpc_optim_last_grad_norm(ddpc_optim_t o) { PULL(o); return o ? o->last_norm : 0; }
int ddpc_optim_scale_good_steps(ddpc_optim_t o) { PULL(o); return o ? o->good_steps : 0; }
void ddpc_optim_set_scale_good_steps(ddpc_optim_t o, int n)
{
    if (!o || n < 0)
        return;
    PULL(o);
    o->good_steps = n;
    PUSH(o);
}
int ddpc_optim_last_stepped(ddpc_optim_t o) { PULL(o); return o ? o->last_stepped : 0; }

const double *ddpc_optim_loss_scale_device(ddpc_optim_t o)
{
#ifdef DDPC_HAVE_CUDA
    if (o && ON_DEVICE(o))
        return &o->sc->scale;
#endif
    (void)o;
    return NULL;
}
