/* SPDX-License-Identifier: BSD-3-Clause */
/* model_cuda.c: the trainer's models on one GPU (model.h), the twin of
 * model_cpu.c: the same layers, parameters, loss and order of grad_ready
 * calls, computed with cuBLASLt GEMMs and a few kernels (model_cuda_kernels.h)
 * on the DDP engine's compute stream. This file is the host side, plain C;
 * the device code is model_cuda_kernels.cu. Nothing is allocated and nothing
 * waits for the host inside a step (stats and params_io wait, when asked).
 *
 * Layout. cuBLASLt is column-major; a row-major (rows, cols) matrix is a
 * column-major (cols, rows) one with the same pointer and ld = cols. So for
 * layer l (in -> out), with W (out, in) row-major as PyTorch's and a batch
 * of B samples:
 *   forward   Y(out x B) = op_T(W: in x out) * X(in x B)         + bias
 *   weights   dW(in x out) += X(in x B) * op_T(dY: out x B)
 *   data      dX(in x B) = W(in x out) * dY(out x B)
 * GEMM epilogues (shared/GPU.md "cuBLASLt epilogues"), when the library
 * offers them for the shapes and types ("fused"):
 *   hidden forward: RELU_AUX_BIAS: bias, ReLU and a bit-mask of the ReLU;
 *   last forward: BIAS;
 *   last weight gradient: BGRADB: the last bias gradient from dY;
 *   data gradient: DRELU_BGRAD: the previous layer's ReLU gradient from its
 *   mask, and that layer's bias gradient.
 * The bias gradients come out of the epilogue (which overwrites) into a
 * scratch vector and a small kernel adds them to the gradient arena, which
 * accumulates over micro-steps. Where an epilogue is not offered, its
 * group (forward, data gradient, last bias gradient) runs as plain
 * GEMMs and kernels for bias, ReLU and the bias gradients instead
 * ("unfused"; DDPC_TRAINER_GEMM=unfused forces it for all, for the tests).
 *
 * The loss: one kernel computes softmax, cross-entropy and the argmax of
 * every row and overwrites the logits with their gradient (p - onehot(y))/B
 * in float32; backward scales it (1/grad_accum, the fp16 loss scale) and, in
 * bf16/fp16, rounds it to the GEMMs' type. Losses and hits add up on the
 * device in a fixed order (one block), read only by stats().
 *
 * Precision: fp32 is CUBLAS_COMPUTE_32F (no TF32, as PyTorch's default).
 * bf16/fp16 cast the whole parameter arena to a half copy at each forward
 * (one kernel) and run the GEMMs on half operands with float32 accumulation;
 * the weight gradients are written in float32 straight into the arena.
 *
 * Input: upload() copies the host batch into one of two pinned buffers and
 * from there, on a copy stream, into one of two device buffers; the compute
 * stream waits for that copy with an event, and the copy into a device buffer
 * waits for the work that read it two batches ago.
 *
 * A pipeline stage (model_place_t's stage_first, stage_end) computes layers
 * [first, end) with the same GEMMs and kernels, on the same shapes, as the
 * whole model runs for them; its arenas are the stage's (offsets from layer
 * first). A stage after the first reads its input from xin (the previous
 * stage's activations, GEMM type, which the caller receives there on the
 * compute stream) and ends its backward with layer first's data-gradient
 * GEMM into gin, without an epilogue: the ReLU and the bias gradient of
 * layer first-1 belong to the previous stage. A stage before the last ends
 * its forward at the ReLU of layer end-1 (act[end-1] is its output) and
 * starts its backward from gout: layer end-1's ReLU gradient and bias
 * gradient by the unfused kernel (mk_bias_grad, masking by act[end-1]), then
 * on as the whole model. So at a stage boundary the whole model's unfused
 * path runs; where the whole model fuses that data gradient (DRELU_BGRAD),
 * the split is bitwise the whole model only where the epilogue sums as the
 * kernel does (the emulation, in float32) or under DDPC_TRAINER_GEMM=unfused.
 *
 * BatchNorm1d (spec batchnorm; fp32, the whole model only): a BN layer's
 * forward GEMM runs without an epilogue, then the bias kernel without ReLU,
 * the statistics kernel (with bn_comm, ddpc_batchnorm_stats on the device
 * communicator: no host round trip), and the normalize-affine-ReLU kernel;
 * its backward, after the next layer's plain data gradient: the ReLU mask
 * and the sums of dy and dy * xhat (dgamma, dbeta), with bn_comm their
 * device all-reduce, the input gradient, then the plain bias gradient. The
 * arithmetic is model_cpu.c's (model_cuda_kernels.h). */
#ifndef TRAINER_HAVE_CUDA_MODEL
#define TRAINER_HAVE_CUDA_MODEL 1 /* this file is the CUDA model: model.h declares it */
#endif
#include "model.h"

#include "ddpc.h"
#include "model_cuda_kernels.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORKSPACE ((size_t)32 << 20) /* cuBLASLt workspace (Hopper: 32 MiB) */
#define PLANS 256

enum gemm_kind { G_FWD, G_DW, G_DX };

/* The epilogue groups, each used where cuBLASLt offers it for every layer:
 * the forward's bias (+ ReLU and its mask), the data gradient's ReLU and
 * bias gradient (needs the forward's mask), the last bias gradient. */
enum { FUSE_FWD = 1, FUSE_DX = 2, FUSE_BGRAD = 4, FUSE_ALL = 7 };

typedef struct {
    int used, layer, kind, B, epi;
    uint32_t align[3];         /* of A, B and D: the heuristic was told them */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} plan_t;

struct model {
    model_spec_t spec;
    model_place_t where;
    int nlayers, max_batch;
    int first, end;            /* the layers computed: [first, end) of nlayers */
    int fuse;                  /* FUSE_* bits: the epilogues in use */
    int noalgo;                /* the last plan failed: cuBLASLt offered no algorithm */
    int warned;                /* messages about a batch size without an epilogue */
    int mask_ok[MODEL_MAX_LAYERS]; /* the last forward wrote layer l's ReLU mask */
    size_t nparams;
    size_t esize;              /* bytes of an element of the GEMMs' type */
    cudaDataType_t ctype;      /* that type */
    cudaStream_t s, copy;
    cublasLtHandle_t lt;
    void *ws;                  /* cuBLASLt workspace */
    float *params, *grads;     /* the engine's arenas */
    void *half;                /* bf16/fp16: (nparams,) copy of params; NULL in fp32 */
    /* the uploaded batches: two slots */
    float *hx[2], *dx[2];      /* pinned host, device (max_batch, inputs) float32 */
    int *hy[2], *dy[2];        /* labels as ints */
    cudaEvent_t copied[2], consumed[2];
    int slot, have_slot, nb[2];
    void *xh;                  /* bf16/fp16: (max_batch, inputs) cast of x */
    void *act[MODEL_MAX_LAYERS];   /* hidden outputs (max_batch, out), GEMM type */
    unsigned char *mask[MODEL_MAX_LAYERS]; /* their ReLU bit-masks (FUSE_FWD) */
    int64_t mask_ld[MODEL_MAX_LAYERS];     /* bits, a multiple of 128 */
    float *logits;             /* end == nlayers: (max_batch, classes) float32, then its gradient */
    void *xin;                 /* first > 0: (max_batch, in(first)) GEMM type: input() */
    void *gin;                 /* first > 0: (max_batch, in(first)) GEMM type: input_grad() */
    void *gout;                /* end < nlayers: (max_batch, out(end-1)) GEMM type: output_grad() */
    void *dbuf[2];             /* (max_batch, widest) gradient ping-pong, GEMM type */
    void *bscratch;            /* (widest,) an epilogue's bias gradient (float32 or type) */
    double *acc;               /* device (4,): the stats */
    double *hacc;              /* pinned (4,) */
    int B;                     /* samples of the last forward */
    /* batchnorm: per BN layer xhat (max_batch, out) and its mean, var and
       invstd (3 * out); 2 * widest sums for backward; with bn_comm the
       statistics' workspace and the global count (device double) */
    int train;
    float *xhat[MODEL_MAX_LAYERS], *bstat[MODEL_MAX_LAYERS];
    float *bn_sums, *bn_work;
    double *bn_total;
    plan_t plans[PLANS];
    int next_plan;
    char err[512];
};

static int fail(model_t *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(m->err, sizeof m->err, "model (cuda): ");
    vsnprintf(m->err + k, sizeof m->err - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}

static int cu(model_t *m, cudaError_t e, const char *call)
{
    return e == cudaSuccess ? 0 : fail(m, "%s: %s", call, cudaGetErrorString(e));
}

static int lt(model_t *m, cublasStatus_t e, const char *call)
{
    return e == CUBLAS_STATUS_SUCCESS ? 0 : fail(m, "%s: cuBLAS status %d", call, (int)e);
}

static size_t layer_offset(const model_t *m, int l) /* of W_l in the (stage's) arena */
{
    return model_layers_param_offset(&m->spec, l) - model_layers_param_offset(&m->spec, m->first);
}

/* views of layer l's weight and bias in the GEMMs' type (the half copy or the arena) */
static const void *W_of(model_t *m, int l)
{
    size_t off = layer_offset(m, l);
    return m->half ? (const void *)((const char *)m->half + off * m->esize)
                   : (const void *)(m->params + off);
}

static const void *b_of(model_t *m, int l)
{
    size_t off = layer_offset(m, l) +
                 (size_t)model_layer_out(&m->spec, l) * (size_t)model_layer_in(&m->spec, l);
    return m->half ? (const void *)((const char *)m->half + off * m->esize)
                   : (const void *)(m->params + off);
}

/* The forward bias of layer l in its output's type: the hidden layers' in
 * the GEMMs' type, the last layer's (float32 logits) from the arena. */
static const void *fwd_bias(model_t *m, int l)
{
    if (l < m->nlayers - 1)
        return b_of(m, l);
    return m->params + layer_offset(m, l) +
           (size_t)model_layer_out(&m->spec, l) * (size_t)model_layer_in(&m->spec, l);
}


/* a BN layer's gamma and beta (fp32: the arena itself), dgamma and dbeta,
   its running mean, var and count in the buffer arena */
static float *gamma_of(model_t *m, int l)
{
    return m->params + layer_offset(m, l) +
           (size_t)model_layer_out(&m->spec, l) * ((size_t)model_layer_in(&m->spec, l) + 1);
}
/* Where the backward writes layer l's parameter `kind`'s gradient (MODEL_P_*):
 * the engine's pointer for this micro-step (where.grad_at, asked just before
 * each write, in the backward's order), or the arena's. NULL where the engine
 * gave none: the backward then fails with a positive return (the engine's
 * message). */
static float *grad_of(model_t *m, int l, int kind)
{
    const model_spec_t *sp = &m->spec;
    if (m->where.grad_at)
        return m->where.grad_at(m->where.param_use_ctx,
                                model_param_index(sp, l, kind) -
                                    model_param_index(sp, m->first, MODEL_P_WEIGHT));
    const size_t wn = (size_t)model_layer_out(sp, l) * (size_t)model_layer_in(sp, l);
    switch (kind) {
    case MODEL_P_WEIGHT: return m->grads + layer_offset(m, l);
    case MODEL_P_BIAS: return m->grads + layer_offset(m, l) + wn;
    case MODEL_P_BN_WEIGHT: return m->grads + (gamma_of(m, l) - m->params);
    default: return m->grads + (gamma_of(m, l) - m->params) + model_layer_out(sp, l);
    }
}
static float *rmean_of(model_t *m, int l)
{
    size_t off = 0;
    for (int i = 0; i < l; i++)
        off += model_layer_bn(&m->spec, i) ? 2 * (size_t)model_layer_out(&m->spec, i) + 1 : 0;
    return m->where.buffers + off;
}

static void plan_free(plan_t *p)
{
    if (p->op)
        cublasLtMatmulDescDestroy(p->op);
    if (p->la)
        cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb)
        cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc)
        cublasLtMatrixLayoutDestroy(p->lc);
    memset(p, 0, sizeof *p);
}

typedef struct {
    int layer, kind;
    cublasOperation_t ta, tb;
    int M, N, K;
    const void *A;
    cudaDataType_t at;
    int lda;
    const void *Bm;
    cudaDataType_t bt;
    int ldb;
    void *D;
    cudaDataType_t dt;
    int ldd;
    float alpha, beta;
    cublasLtEpilogue_t epi;
    void *bias;      /* bias, or the bias gradient output */
    void *aux;       /* ReLU mask */
    int64_t aux_ld;
} gemm_t;

/* Descriptors and algorithm for g, made once per (layer, kind, batch, epilogue);
 * NULL with the reason in m->err (m->noalgo: none offered). The
 * heuristic excludes in-place (atomic) split-K reductions, so that a step is
 * bitwise repeatable, and is told the real pointer alignments. */
static plan_t *plan_for(model_t *m, const gemm_t *g, int B)
{
    /* the alignments are part of the key: a gradient written into a bucket
       stage (DDPC_SHARD=grads) is not where the arena's would be */
    const uint32_t aa = mk_align_of(g->A), ab = mk_align_of(g->Bm), ad = mk_align_of(g->D);
    for (int i = 0; i < PLANS; i++) {
        plan_t *p = &m->plans[i];
        if (p->used && p->layer == g->layer && p->kind == g->kind && p->B == B &&
            p->epi == (int)g->epi && p->align[0] == aa && p->align[1] == ab && p->align[2] == ad)
            return p;
    }
    plan_t *p = &m->plans[m->next_plan];
    m->next_plan = (m->next_plan + 1) % PLANS;
    plan_free(p);
    int32_t ta = g->ta, tb = g->tb;
    cublasLtEpilogue_t epi = g->epi;
    if (lt(m, cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
           "cublasLtMatmulDescCreate"))
        return NULL;
    int ok = 1;
    ok = ok && !lt(m, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                     sizeof ta), "TRANSA");
    ok = ok && !lt(m, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                     sizeof tb), "TRANSB");
    ok = ok && !lt(m, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                     sizeof epi), "EPILOGUE");
    if (ok && g->bias)
        ok = !lt(m, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &g->bias, sizeof g->bias), "BIAS_POINTER");
    if (ok && g->aux) {
        ok = !lt(m, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                   &g->aux, sizeof g->aux), "AUX_POINTER") &&
             !lt(m, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                   &g->aux_ld, sizeof g->aux_ld), "AUX_LD");
    }
    int ar = g->ta == CUBLAS_OP_N ? g->M : g->K, ac = g->ta == CUBLAS_OP_N ? g->K : g->M;
    int br = g->tb == CUBLAS_OP_N ? g->K : g->N, bc = g->tb == CUBLAS_OP_N ? g->N : g->K;
    ok = ok && !lt(m, cublasLtMatrixLayoutCreate(&p->la, g->at, ar, ac, g->lda), "layout A");
    ok = ok && !lt(m, cublasLtMatrixLayoutCreate(&p->lb, g->bt, br, bc, g->ldb), "layout B");
    ok = ok && !lt(m, cublasLtMatrixLayoutCreate(&p->lc, g->dt, g->M, g->N, g->ldd), "layout D");
    cublasLtMatmulPreference_t pref = NULL;
    ok = ok && !lt(m, cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
    if (ok) {
        uint64_t wsb = WORKSPACE;
        uint32_t red = CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_INPLACE;
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                             sizeof wsb);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                             &red, sizeof red);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa,
                                             sizeof aa);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab,
                                             sizeof ab);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad,
                                             sizeof ad);
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad,
                                             sizeof ad);
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(m->lt, p->op, p->la, p->lb, p->lc,
                                                           p->lc, pref, 1, &res, &found);
        if (st != CUBLAS_STATUS_SUCCESS || found < 1) {
            m->noalgo = 1;
            fail(m, "no cuBLASLt algorithm for layer %d %s GEMM (%d x %d x %d, epilogue %d, "
                 "status %d)", g->layer, g->kind == G_FWD ? "forward" : g->kind == G_DW ?
                 "weight-gradient" : "data-gradient", g->M, g->N, g->K, (int)g->epi, (int)st);
            ok = 0;
        } else {
            p->algo = res.algo;
        }
    }
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (!ok) {
        plan_free(p);
        return NULL;
    }
    p->used = 1;
    p->layer = g->layer;
    p->kind = g->kind;
    p->B = B;
    p->epi = (int)g->epi;
    p->align[0] = aa;
    p->align[1] = ab;
    p->align[2] = ad;
    return p;
}

static int gemm(model_t *m, const gemm_t *g, int B)
{
    plan_t *p = plan_for(m, g, B);
    if (!p)
        return -1;
    /* the pointers may be other buffers of the same shape (the input slots) */
    if (g->bias &&
        lt(m, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                             sizeof g->bias), "BIAS_POINTER"))
        return -1;
    if (g->aux &&
        lt(m, cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                             &g->aux, sizeof g->aux), "AUX_POINTER"))
        return -1;
    return lt(m, cublasLtMatmul(m->lt, p->op, &g->alpha, g->A, p->la, g->Bm, p->lb, &g->beta,
                                g->D, p->lc, g->D, p->lc, &p->algo, m->ws, WORKSPACE, m->s),
              "cublasLtMatmul");
}

/* g; where cuBLASLt offers no algorithm for its epilogue at this batch size
 * (fused_offered asked for the largest), the plain GEMM instead, *fused = 0,
 * and the caller runs the epilogue's kernels. */
static int gemm_or_plain(model_t *m, gemm_t *g, int B, int *fused)
{
    *fused = g->epi != CUBLASLT_EPILOGUE_DEFAULT;
    m->noalgo = 0;
    if (!gemm(m, g, B))
        return 0;
    if (!*fused || !m->noalgo)
        return -1;
    if (m->warned++ < 3)
        fprintf(stderr, "trainer: GPU %d: %s; separate kernels at this batch size\n",
                m->where.device, m->err + strlen("model (cuda): "));
    g->epi = CUBLASLT_EPILOGUE_DEFAULT;
    g->bias = NULL;
    g->aux = NULL;
    g->aux_ld = 0;
    *fused = 0;
    return gemm(m, g, B);
}

/* ------------------------------------------------------------------ kernels */
static int launch_cast(model_t *m, const float *in, void *out, size_t n)
{
    return cu(m, mk_cast(in, out, m->ctype, n, m->s), "cast kernel");
}

static int launch_bias_act(model_t *m, void *y, cudaDataType_t t, const void *bias, int n, int B,
                           int relu)
{
    return cu(m, mk_bias_act(y, bias, t, n, B, relu, m->s), "bias kernel");
}

static int launch_bias_add(model_t *m, float *db, const void *src, cudaDataType_t t, int n)
{
    return cu(m, mk_bias_add(db, src, t, n, m->s), "bias-gradient kernel");
}

static int launch_bias_grad(model_t *m, void *d, const void *act, cudaDataType_t t, int n, int B,
                            float *db)
{
    return cu(m, mk_bias_grad(d, act, t, n, B, db, m->s), "bias-gradient kernel");
}

/* ------------------------------------------------------------------ the model */
static void cuda_destroy(model_t *m)
{
    if (!m)
        return;
    if (m->s)
        cudaStreamSynchronize(m->s);
    if (m->copy) {
        cudaStreamSynchronize(m->copy);
        cudaStreamDestroy(m->copy);
    }
    for (int i = 0; i < PLANS; i++)
        plan_free(&m->plans[i]);
    if (m->lt)
        cublasLtDestroy(m->lt);
    for (int k = 0; k < 2; k++) {
        cudaFreeHost(m->hx[k]);
        cudaFreeHost(m->hy[k]);
        cudaFree(m->dx[k]);
        cudaFree(m->dy[k]);
        cudaFree(m->dbuf[k]);
        if (m->copied[k])
            cudaEventDestroy(m->copied[k]);
        if (m->consumed[k])
            cudaEventDestroy(m->consumed[k]);
    }
    for (int l = 0; l < MODEL_MAX_LAYERS; l++) {
        cudaFree(m->act[l]);
        cudaFree(m->mask[l]);
        cudaFree(m->xhat[l]);
        cudaFree(m->bstat[l]);
    }
    cudaFree(m->bn_sums);
    cudaFree(m->bn_work);
    cudaFree(m->bn_total);
    cudaFree(m->ws);
    cudaFree(m->half);
    cudaFree(m->xh);
    cudaFree(m->logits);
    cudaFree(m->xin);
    cudaFree(m->gin);
    cudaFree(m->gout);
    cudaFree(m->bscratch);
    cudaFree(m->acc);
    cudaFreeHost(m->hacc);
    free(m);
}

static int dalloc(model_t *m, void **p, size_t bytes, const char *what)
{
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e != cudaSuccess)
        return fail(m, "cudaMalloc of %zu bytes for %s: %s", bytes, what, cudaGetErrorString(e));
    return 0;
}

/* The FUSE_* groups cuBLASLt offers for batch B in every layer (planning
 * them, so the first step finds them made); why not in why. */
static int fused_offered(model_t *m, int B, char *why, size_t n);

static model_t *cuda_create(const model_spec_t *s, const model_place_t *where, int max_batch,
                            float *params, float *grads, char *err, size_t errlen)
{
    if (!where || where->device < 0) {
        snprintf(err, errlen, "model (cuda): no GPU given");
        return NULL;
    }
    const int L = model_num_layers(s);
    const int first = where->stage_first, end = where->stage_end ? where->stage_end : L;
    if (first < 0 || first >= end || end > L) {
        snprintf(err, errlen, "model (cuda): stage of layers [%d, %d) out of range (%d layers)",
                 first, end, L);
        return NULL;
    }
    if (where->precision == PRECISION_FP16 && (first > 0 || end < L)) {
        snprintf(err, errlen, "model (cuda): --precision fp16: a pipeline stage has no loss "
                 "of its own to scale (use fp32 or bf16)");
        return NULL;
    }
    if (s->batchnorm && (where->precision != PRECISION_FP32 || first > 0 || end < L ||
                         !where->buffers)) {
        snprintf(err, errlen, "model (cuda): --batchnorm: fp32 and the whole model only, with "
                 "its buffers (not with --precision %s or pipeline stages)",
                 model_precision_name(where->precision));
        return NULL;
    }
    if (max_batch < 1 || s->nhidden < 0 || s->nhidden > MODEL_MAX_HIDDEN) {
        snprintf(err, errlen, "model (cuda): batch %d or %d hidden layers out of range",
                 max_batch, s->nhidden);
        return NULL;
    }
    if (where->precision == PRECISION_FP16 && !where->loss_scale) {
        snprintf(err, errlen, "model (cuda): fp16 needs the optimizer's dynamic loss scale");
        return NULL;
    }
    model_t *m = (model_t *)calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "model (cuda): out of memory");
        return NULL;
    }
    m->spec = *s;
    m->where = *where;
    m->nlayers = L;
    m->first = first;
    m->end = end;
    m->max_batch = max_batch;
    m->nparams = model_layers_param_count(s, first, end);
    m->params = params;
    m->grads = grads;
    m->s = (cudaStream_t)where->stream;
    m->ctype = where->precision == PRECISION_BF16   ? CUDA_R_16BF
               : where->precision == PRECISION_FP16 ? CUDA_R_16F
                                                    : CUDA_R_32F;
    m->esize = m->ctype == CUDA_R_32F ? 4 : 2;
    size_t widest = (size_t)model_layer_in(s, first), B = (size_t)max_batch;
    for (int l = first; l < end; l++)
        widest = (size_t)model_layer_out(s, l) > widest ? (size_t)model_layer_out(s, l) : widest;
    const size_t in0 = (size_t)model_layer_in(s, first), outn = (size_t)model_layer_out(s, end - 1);
    int ok = !cu(m, cudaSetDevice(where->device), "cudaSetDevice") &&
             !lt(m, cublasLtCreate(&m->lt), "cublasLtCreate") &&
             !cu(m, cudaStreamCreateWithFlags(&m->copy, cudaStreamNonBlocking),
                 "cudaStreamCreateWithFlags") &&
             !dalloc(m, &m->ws, WORKSPACE, "the cuBLASLt workspace");
    for (int k = 0; ok && k < 2; k++) {
        if (first == 0) /* the host's batches: the first stage's only */
            ok = !cu(m, cudaMallocHost((void **)&m->hx[k], B * s->inputs * sizeof(float)),
                     "cudaMallocHost") &&
                 !dalloc(m, (void **)&m->dx[k], B * s->inputs * sizeof(float), "a batch");
        ok = ok && !cu(m, cudaMallocHost((void **)&m->hy[k], B * sizeof(int)), "cudaMallocHost") &&
             !dalloc(m, (void **)&m->dy[k], B * sizeof(int), "labels") &&
             !dalloc(m, &m->dbuf[k], B * widest * m->esize, "gradients") &&
             !cu(m, cudaEventCreateWithFlags(&m->copied[k], cudaEventDisableTiming),
                 "cudaEventCreate") &&
             !cu(m, cudaEventCreateWithFlags(&m->consumed[k], cudaEventDisableTiming),
                 "cudaEventCreate");
    }
    for (int l = first; ok && l < end && l < m->nlayers - 1; l++) {
        size_t out = (size_t)model_layer_out(s, l);
        m->mask_ld[l] = (int64_t)((out + 127) / 128 * 128);
        ok = !dalloc(m, &m->act[l], B * out * m->esize, "activations") &&
             !dalloc(m, (void **)&m->mask[l], (size_t)m->mask_ld[l] / 8 * B, "a ReLU mask");
    }
    if (ok && end == m->nlayers)
        ok = !dalloc(m, (void **)&m->logits, B * s->classes * sizeof(float), "logits");
    else if (ok)
        ok = !dalloc(m, &m->gout, B * outn * m->esize, "the output's gradient");
    if (ok && first > 0)
        ok = !dalloc(m, &m->xin, B * in0 * m->esize, "the stage's input") &&
             !dalloc(m, &m->gin, B * in0 * m->esize, "the input's gradient");
    m->train = 1;
    for (int l = first; ok && l < end; l++) {
        size_t out = (size_t)model_layer_out(s, l);
        if (model_layer_bn(s, l))
            ok = !dalloc(m, (void **)&m->xhat[l], B * out * sizeof(float), "batchnorm's xhat") &&
                 !dalloc(m, (void **)&m->bstat[l], 3 * out * sizeof(float),
                         "batchnorm's statistics");
    }
    if (ok && s->batchnorm)
        ok = !dalloc(m, (void **)&m->bn_sums, 2 * widest * sizeof(float), "batchnorm's sums");
    if (ok && s->batchnorm && where->bn_comm)
        ok = !dalloc(m, (void **)&m->bn_work,
                     ddpc_batchnorm_workspace((ddpc_comm_t)where->bn_comm, (int)widest) *
                         sizeof(float), "batchnorm's workspace") &&
             !dalloc(m, (void **)&m->bn_total, sizeof(double), "batchnorm's count");
    ok = ok && !dalloc(m, &m->bscratch, widest * sizeof(float), "bias gradients") &&
         !dalloc(m, (void **)&m->acc, 4 * sizeof(double), "stats") &&
         !cu(m, cudaMallocHost((void **)&m->hacc, 4 * sizeof(double)), "cudaMallocHost") &&
         !cu(m, cudaMemsetAsync(m->acc, 0, 4 * sizeof(double), m->s), "cudaMemsetAsync");
    if (ok && m->ctype != CUDA_R_32F)
        ok = !dalloc(m, &m->half, m->nparams * m->esize, "the half copy of the parameters") &&
             (first > 0 ||
              !dalloc(m, &m->xh, B * s->inputs * m->esize, "the half copy of a batch"));
    if (ok) {
        const char *force = getenv("DDPC_TRAINER_GEMM");
        char why[512] = "";
        if (force && !strcmp(force, "unfused")) {
            m->fuse = 0;
        } else {
            m->fuse = fused_offered(m, max_batch, why, sizeof why);
            if (m->fuse != FUSE_ALL && force && !strcmp(force, "fused")) {
                ok = 0;
                fail(m, "DDPC_TRAINER_GEMM=fused: %s", why);
            } else if (m->fuse != FUSE_ALL) {
                fprintf(stderr, "trainer: GPU %d: %s: those epilogues run as separate kernels\n",
                        where->device, why);
            }
        }
    }
    if (!ok) {
        snprintf(err, errlen, "%s", m->err);
        cuda_destroy(m);
        return NULL;
    }
    return m;
}

static int cuda_upload(model_t *m, const float *x, const uint8_t *y, int B)
{
    if (B < 1 || B > m->max_batch)
        return fail(m, "batch of %d samples, expected 1 to %d", B, m->max_batch);
    if (!x != (m->first > 0))
        return fail(m, x ? "a stage after the first reads its input from input(), not the host"
                         : "the first stage needs the inputs");
    if (!y && m->end == m->nlayers)
        return fail(m, "the last stage needs the labels");
    for (int i = 0; y && i < B; i++)
        if (y[i] >= m->spec.classes)
            return fail(m, "label %d of sample %d is not in [0, %d)", y[i], i, m->spec.classes);
    /* what the compute stream did so far is all that can read the current slot */
    if (m->have_slot && cu(m, cudaEventRecord(m->consumed[m->slot], m->s), "cudaEventRecord"))
        return -1;
    int k = m->have_slot ? 1 - m->slot : 0;
    size_t xb = (size_t)B * m->spec.inputs * sizeof(float);
    if (cu(m, cudaEventSynchronize(m->copied[k]), "cudaEventSynchronize")) /* pinned slot free */
        return -1;
    if (x)
        memcpy(m->hx[k], x, xb);
    for (int i = 0; y && i < B; i++)
        m->hy[k][i] = y[i];
    if (cu(m, cudaStreamWaitEvent(m->copy, m->consumed[k], 0), "cudaStreamWaitEvent") ||
        (x && cu(m, cudaMemcpyAsync(m->dx[k], m->hx[k], xb, cudaMemcpyHostToDevice, m->copy),
                 "cudaMemcpyAsync")) ||
        (y && cu(m, cudaMemcpyAsync(m->dy[k], m->hy[k], (size_t)B * sizeof(int),
                                    cudaMemcpyHostToDevice, m->copy), "cudaMemcpyAsync")) ||
        cu(m, cudaEventRecord(m->copied[k], m->copy), "cudaEventRecord") ||
        cu(m, cudaStreamWaitEvent(m->s, m->copied[k], 0), "cudaStreamWaitEvent"))
        return -1;
    m->slot = k;
    m->have_slot = 1;
    m->nb[k] = B;
    return 0;
}

/* A GEMM D (M x N, ldd) = alpha op(A) op(B) + beta D of layer l, without an
 * epilogue (the callers add theirs); N or K is the batch, set by the caller. */
static gemm_t gemm_of(int layer, int kind, cublasOperation_t ta, cublasOperation_t tb, int M,
                      int N, int K, const void *A, cudaDataType_t at, int lda, const void *B,
                      cudaDataType_t bt, int ldb, void *D, cudaDataType_t dt, int ldd, float beta)
{
    gemm_t g;
    memset(&g, 0, sizeof g);
    g.layer = layer;
    g.kind = kind;
    g.ta = ta;
    g.tb = tb;
    g.M = M;
    g.N = N;
    g.K = K;
    g.A = A;
    g.at = at;
    g.lda = lda;
    g.Bm = B;
    g.bt = bt;
    g.ldb = ldb;
    g.D = D;
    g.dt = dt;
    g.ldd = ldd;
    g.alpha = 1.0f;
    g.beta = beta;
    g.epi = CUBLASLT_EPILOGUE_DEFAULT;
    return g;
}

/* The forward GEMM of layer l on input a (GEMM type): Y = op_T(W) a (+ bias, ReLU) */
static gemm_t fwd_gemm(model_t *m, int l, const void *a, int fuse)
{
    const int in = model_layer_in(&m->spec, l), out = model_layer_out(&m->spec, l);
    const int last = l == m->nlayers - 1;
    gemm_t g = gemm_of(l, G_FWD, CUBLAS_OP_T, CUBLAS_OP_N, out, 0, in, W_of(m, l), m->ctype, in,
                       a, m->ctype, in, last ? (void *)m->logits : m->act[l],
                       last ? CUDA_R_32F : m->ctype, out, 0.0f);
    if (fuse & FUSE_FWD) {
        g.bias = (void *)fwd_bias(m, l);
        g.epi = last ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
        if (!last) {
            g.aux = m->mask[l];
            g.aux_ld = m->mask_ld[l];
        }
    }
    return g;
}

/* The weight-gradient GEMM of layer l: dW += a * op_T(d), float32 into dW */
static gemm_t dw_gemm(model_t *m, int l, const void *a, const void *d, cudaDataType_t dtype,
                      float *dW, int fuse)
{
    const int in = model_layer_in(&m->spec, l), out = model_layer_out(&m->spec, l);
    gemm_t g = gemm_of(l, G_DW, CUBLAS_OP_N, CUBLAS_OP_T, in, out, 0, a, m->ctype, in, d, dtype,
                       out, dW, CUDA_R_32F, in, 1.0f);
    if ((fuse & FUSE_BGRAD) && l == m->nlayers - 1) { /* the last bias gradient, float32 */
        g.epi = CUBLASLT_EPILOGUE_BGRADB;
        g.bias = m->bscratch;
    }
    return g;
}

/* The data-gradient GEMM of layer l > 0: dprev = W d, through layer l-1's ReLU */
static gemm_t dx_gemm(model_t *m, int l, const void *d, void *dprev, int fuse)
{
    const int in = model_layer_in(&m->spec, l), out = model_layer_out(&m->spec, l);
    gemm_t g = gemm_of(l, G_DX, CUBLAS_OP_N, CUBLAS_OP_N, in, 0, out, W_of(m, l), m->ctype, in, d,
                       m->ctype, out, dprev, m->ctype, in, 0.0f);
    if ((fuse & FUSE_DX) && (fuse & FUSE_FWD)) { /* layer l-1's bias gradient, D's type */
        g.epi = CUBLASLT_EPILOGUE_DRELU_BGRAD;
        g.bias = m->bscratch;
        g.aux = m->mask[l - 1];
        g.aux_ld = m->mask_ld[l - 1];
    }
    return g;
}

/* The input of layer l (GEMM type) for the batch in upload slot k: the
 * batch (or its half copy) at layer 0, the previous stage's activations at a
 * later stage's first layer, else layer l-1's output. */
static const void *stage_input(const model_t *m, int l, int k)
{
    if (l == 0)
        return m->half ? m->xh : (const void *)m->dx[k];
    return l == m->first ? (const void *)m->xin : (const void *)m->act[l - 1];
}

static int fused_offered(model_t *m, int B, char *why, size_t n)
{
    int fuse = FUSE_ALL;
    size_t k = 0;
    why[0] = 0;
    for (int l = m->first; l < m->end; l++) {
        const int last = l == m->nlayers - 1;
        const void *a = stage_input(m, l, 0);
        const void *d = last && !m->half ? (const void *)m->logits : m->dbuf[0];
        cudaDataType_t dt = last && !m->half ? CUDA_R_32F : m->ctype;
        gemm_t g[3];
        int bit[3] = {FUSE_FWD, FUSE_BGRAD, FUSE_DX};
        g[0] = fwd_gemm(m, l, a, FUSE_ALL);
        g[0].N = B;
        /* the arena's gradient, or (DDPC_SHARD=grads: no arena) none: the
           plans of the real pointers are made at their first use */
        g[1] = dw_gemm(m, l, a, d, dt, m->grads ? m->grads + layer_offset(m, l) : NULL, FUSE_ALL);
        g[1].K = B;
        /* layer 0 has no data gradient; a stage's first layer's is plain */
        const int ng = l > m->first ? 3 : 2;
        if (l > 0) {
            g[2] = dx_gemm(m, l, d, m->dbuf[1], FUSE_ALL);
            g[2].N = B;
        }
        for (int i = 0; i < ng; i++) {
            if (!(fuse & bit[i]) || g[i].epi == CUBLASLT_EPILOGUE_DEFAULT)
                continue;
            if (!plan_for(m, &g[i], B)) {
                fuse &= ~bit[i];
                if (k < n)
                    k += (size_t)snprintf(why + k, n - k, "%s%s", k ? "; " : "",
                                          m->err + strlen("model (cuda): "));
            }
        }
    }
    if (!(fuse & FUSE_FWD)) /* the data gradient's epilogue needs the forward's mask */
        fuse &= ~FUSE_DX;
    return fuse;
}

/* BatchNorm1d of layer l over z (B, out), then its ReLU (model_cuda_kernels.h) */
static int bn_forward(model_t *m, int l, float *z, int B)
{
    const int C = model_layer_out(&m->spec, l);
    float *mean = m->bstat[l], *var = mean + C, *is = mean + 2 * C, *rm = rmean_of(m, l);
    ddpc_comm_t comm = (ddpc_comm_t)m->where.bn_comm;
    if (m->train) {
        if (cu(m, mk_bn_stats(z, B, C, mean, var, m->s), "batchnorm statistics kernel"))
            return -1;
        if (comm && ddpc_batchnorm_stats(comm, C, B, mean, var, m->bn_total, m->bn_work) !=
                        DDPC_OK)
            return fail(m, "bn%d: %s", l + 1, ddpc_last_error(ddpc_comm_runtime(comm)));
    }
    const float *gamma = gamma_of(m, l);
    return cu(m, mk_bn_forward(z, B, C, m->train, mean, var, gamma, gamma + C, rm, rm + C,
                               rm + 2 * C, comm ? m->bn_total : NULL, (float)MODEL_BN_MOMENTUM,
                               MODEL_BN_EPS, m->xhat[l], is, m->s),
              "batchnorm kernel");
}

/* Backward of layer l's BatchNorm1d and ReLU: d (B, out) from dloss/drelu
 * to dloss/dz in place; dgamma, dbeta, then the fc bias gradient. -1: the
 * model failed; 1: the engine gave no gradient pointer. */
static int bn_backward(model_t *m, int l, float *d, int B)
{
    const int C = model_layer_out(&m->spec, l);
    const float *is = m->bstat[l] + 2 * C, *gamma = gamma_of(m, l);
    float *dbeta = grad_of(m, l, MODEL_P_BN_BIAS);
    float *dg = dbeta ? grad_of(m, l, MODEL_P_BN_WEIGHT) : NULL;
    float *db = dg ? grad_of(m, l, MODEL_P_BIAS) : NULL;
    if (!db)
        return 1;
    ddpc_comm_t comm = (ddpc_comm_t)m->where.bn_comm;
    if (cu(m, mk_bn_backward_sums(d, (const float *)m->act[l], m->xhat[l], B, C, dg, dbeta,
                                  m->bn_sums, m->s), "batchnorm backward kernel"))
        return -1;
    if (comm && ddpc_allreduce(comm, m->bn_sums, m->bn_sums, 2 * (size_t)C, DDPC_F32, DDPC_SUM) !=
                    DDPC_OK)
        return fail(m, "bn%d backward: %s", l + 1, ddpc_last_error(ddpc_comm_runtime(comm)));
    if (cu(m, mk_bn_backward_dx(d, m->xhat[l], B, C, gamma, is, m->bn_sums,
                                comm ? m->bn_total : NULL, m->s), "batchnorm backward kernel"))
        return -1;
    return launch_bias_grad(m, d, NULL, CUDA_R_32F, C, B, db);
}

static void cuda_set_train(model_t *m, int train) { m->train = train; }

/* The forward's first use of layer l's parameters (layer -1: all of this
 * stage's, as the half copy's cast reads them): a sharded step's gather of
 * their buckets waited for, on this stream (DDPC_SHARD_GATHER=forward). */
static int use_params(model_t *m, int l)
{
    if (!m->where.param_use)
        return 0;
    const model_spec_t *sp = &m->spec;
    const int p0 = model_param_index(sp, m->first, MODEL_P_WEIGHT);
    for (int j = l < 0 ? m->first : l; j < (l < 0 ? m->end : l + 1); j++)
        for (int q = MODEL_P_WEIGHT; q <= MODEL_P_BN_BIAS; q++) {
            const int pi = model_param_index(sp, j, q);
            if (pi >= 0 && m->where.param_use(m->where.param_use_ctx, pi - p0))
                return fail(m, "layer %d: waiting for parameter %d's gather failed", j, pi - p0);
        }
    return 0;
}

static int cuda_forward(model_t *m)
{
    if (!m->have_slot)
        return fail(m, "forward before any upload");
    const int k = m->slot, B = m->nb[k];
    if (m->half && use_params(m, -1))
        return -1;
    if (m->half && (launch_cast(m, m->params, m->half, m->nparams) ||
                    (m->first == 0 && launch_cast(m, m->dx[k], m->xh, (size_t)B * m->spec.inputs))))
        return -1;
    const void *a = stage_input(m, m->first, k);
    for (int l = m->first; l < m->end; l++) {
        const int last = l == m->nlayers - 1, bn = model_layer_bn(&m->spec, l);
        if (!m->half && use_params(m, l))
            return -1;
        gemm_t g = fwd_gemm(m, l, a, bn ? m->fuse & ~FUSE_FWD : m->fuse);
        g.N = B;
        int fused;
        if (gemm_or_plain(m, &g, B, &fused))
            return -1;
        m->mask_ok[l] = fused && !last;
        if (!fused && launch_bias_act(m, g.D, g.dt, fwd_bias(m, l), g.M, B, !last && !bn))
            return -1;
        if (bn && bn_forward(m, l, (float *)g.D, B))
            return -1;
        a = g.D;
    }
    m->B = B;
    if (m->end < m->nlayers) /* a stage before the last: its output goes on */
        return 0;
    cudaError_t e = mk_softmax_xent(m->logits, m->dy[k], B, m->spec.classes, m->acc, m->s);
    return cu(m, e, "loss kernel");
}

static int cuda_backward(model_t *m, double scale, model_grad_ready_fn cb, void *ctx)
{
    const int B = m->B, C = m->spec.classes, k = m->slot;
    if (!B)
        return fail(m, "backward before forward");
    const void *d;
    cudaDataType_t dt;
    int ping = 0; /* the dbuf the next data gradient goes to */
    if (m->end < m->nlayers) {
        /* a stage before the last: from the gradient of its output, which
           the next stage sent (scaled there); layer end-1's ReLU gradient
           and bias gradient as the whole model's unfused data-gradient step */
        const int l = m->end - 1;
        float *db = grad_of(m, l, MODEL_P_BIAS);
        if (!db)
            return 1;
        if (launch_bias_grad(m, m->gout, m->act[l], m->ctype, model_layer_out(&m->spec, l), B, db))
            return -1;
        d = m->gout;
        dt = m->ctype;
    } else {
        /* the loss gradient: float32 in the logits, scaled, in the GEMMs' type */
        d = m->logits;
        dt = CUDA_R_32F;
        size_t n = (size_t)B * C;
        const double *ls = m->where.precision == PRECISION_FP16 ? m->where.loss_scale : NULL;
        cudaError_t e;
        if (m->half) {
            e = mk_grad_prep(m->logits, m->dbuf[0], m->ctype, n, (float)scale, ls, m->s);
            d = m->dbuf[0];
            dt = m->ctype;
        } else if (scale != 1.0 || ls) {
            e = mk_grad_prep(m->logits, m->logits, CUDA_R_32F, n, (float)scale, ls, m->s);
        } else {
            e = cudaGetLastError();
        }
        if (cu(m, e, "loss-gradient kernel"))
            return -1;
        ping = m->half ? 1 : 0;
    }
    const model_spec_t *sp = &m->spec;
    /* grad_ready's indices are the stage's */
    const int p0 = model_param_index(sp, m->first, MODEL_P_WEIGHT);
    for (int l = m->end - 1; l >= m->first; l--) {
        const int in = model_layer_in(&m->spec, l), out = model_layer_out(&m->spec, l);
        const int last = l == m->nlayers - 1;
        const void *a = stage_input(m, l, k);
        /* the last layer's bias gradient is written here, after its weight's,
           but taken first: the backward's order (a bias's bucket is not after
           its weight's) */
        float *db = last ? grad_of(m, l, MODEL_P_BIAS) : NULL;
        float *dW = !last || db ? grad_of(m, l, MODEL_P_WEIGHT) : NULL;
        if (!dW)
            return 1;
        gemm_t g = dw_gemm(m, l, a, d, dt, dW, m->fuse);
        g.K = B;
        int fused;
        if (gemm_or_plain(m, &g, B, &fused))
            return -1;
        if (last && (fused ? launch_bias_add(m, db, m->bscratch, CUDA_R_32F, out)
                           : launch_bias_grad(m, (void *)d, NULL, dt, out, B, db)))
            return -1;
        /* layer l's bias is complete (the last: here; the others: at layer
           l+1, or from gout at a stage's last layer) */
        int rc = 0;
        if (model_layer_bn(sp, l) && cb) { /* its BatchNorm1d's, complete at layer l+1 */
            rc = cb(ctx, model_param_index(sp, l, MODEL_P_BN_BIAS) - p0);
            if (!rc)
                rc = cb(ctx, model_param_index(sp, l, MODEL_P_BN_WEIGHT) - p0);
        }
        if (!rc)
            rc = cb ? cb(ctx, model_param_index(sp, l, MODEL_P_BIAS) - p0) : 0;
        if (!rc)
            rc = cb ? cb(ctx, model_param_index(sp, l, MODEL_P_WEIGHT) - p0) : 0;
        if (rc)
            return rc;
        if (l == 0)
            break;
        if (l == m->first) {
            /* a later stage's first layer: the plain data gradient for the
               previous stage, which applies layer l-1's ReLU and bias gradient */
            g = dx_gemm(m, l, d, m->gin, m->fuse & ~FUSE_DX);
            g.N = B;
            if (gemm_or_plain(m, &g, B, &fused))
                return -1;
            break;
        }
        void *dprev = m->dbuf[ping];
        /* the ReLU's mask only where this batch's forward wrote it */
        g = dx_gemm(m, l, d, dprev, m->mask_ok[l - 1] ? m->fuse : m->fuse & ~FUSE_DX);
        g.N = B;
        if (gemm_or_plain(m, &g, B, &fused))
            return -1;
        if (model_layer_bn(sp, l - 1)) {
            int brc = bn_backward(m, l - 1, (float *)dprev, B);
            if (brc)
                return brc;
        } else {
            float *dbp = grad_of(m, l - 1, MODEL_P_BIAS);
            if (!dbp)
                return 1;
            if (fused ? launch_bias_add(m, dbp, m->bscratch, m->ctype, in)
                      : launch_bias_grad(m, dprev, m->act[l - 1], m->ctype, in, B, dbp))
                return -1;
        }
        d = dprev;
        dt = m->ctype;
        ping ^= 1;
    }
    return 0;
}

static int cuda_stats(model_t *m, model_stats_t *st)
{
    if (cu(m, cudaMemcpyAsync(m->hacc, m->acc, 4 * sizeof(double), cudaMemcpyDeviceToHost, m->s),
           "cudaMemcpyAsync") ||
        cu(m, cudaMemsetAsync(m->acc, 0, 4 * sizeof(double), m->s), "cudaMemsetAsync") ||
        cu(m, cudaStreamSynchronize(m->s), "cudaStreamSynchronize"))
        return -1;
    st->loss_sum = m->hacc[0];
    st->loss_samples = m->hacc[1];
    st->correct = m->hacc[2];
    st->forwards = m->hacc[3];
    return 0;
}

static int cuda_params_io(model_t *m, float *host, int to_model)
{
    size_t bytes = m->nparams * sizeof(float);
    cudaError_t e = to_model ? cudaMemcpyAsync(m->params, host, bytes, cudaMemcpyHostToDevice, m->s)
                             : cudaMemcpyAsync(host, m->params, bytes, cudaMemcpyDeviceToHost, m->s);
    if (cu(m, e, "cudaMemcpyAsync"))
        return -1;
    return cu(m, cudaStreamSynchronize(m->s), "cudaStreamSynchronize");
}

static const char *cuda_error(model_t *m) { return m->err; }

/* a stage's buffers (model.h): device memory, GEMM type */
static const void *cuda_output(model_t *m) { return m->end < m->nlayers ? m->act[m->end - 1] : NULL; }
static void *cuda_output_grad(model_t *m) { return m->gout; }
static const void *cuda_input_grad(model_t *m) { return m->gin; }
static void *cuda_input(model_t *m) { return m->xin; }

const model_ops_t model_cuda_ops = {"cuda",       cuda_create,    cuda_destroy,
                                    cuda_upload,  cuda_forward,   cuda_backward,
                                    cuda_stats,   cuda_params_io, cuda_error,
                                    cuda_output,  cuda_output_grad, cuda_input_grad,
                                    cuda_input,   cuda_set_train};

int model_cuda_device_count(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

int model_cuda_open(int device, void **stream, char *err, size_t errlen)
{
    cudaStream_t s = NULL;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "model (cuda): GPU %d: %s", device, cudaGetErrorString(e));
        return -1;
    }
    *stream = s;
    return 0;
}

int model_cuda_upload_slot(const model_t *m) { return m->slot; }

int model_cuda_copy(void *stream, void *dst, const void *src, size_t bytes, int to_device,
                    char *err, size_t errlen)
{
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice
                                                               : cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "model (cuda): copying %zu bytes %s the device: %s", bytes,
                 to_device ? "to" : "from", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

static int graph_fail(char *err, size_t errlen, const char *call, cudaError_t e)
{
    snprintf(err, errlen, "%s: %s", call, cudaGetErrorString(e));
    return -1;
}

int model_cuda_capture_begin(void *stream, char *err, size_t errlen)
{
    cudaError_t e = cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeThreadLocal);
    return e == cudaSuccess ? 0 : graph_fail(err, errlen, "cudaStreamBeginCapture", e);
}

int model_cuda_capture_end(void *stream, void **exec, char *err, size_t errlen)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    *exec = NULL;
    cudaError_t e = cudaStreamEndCapture((cudaStream_t)stream, &g);
    if (e != cudaSuccess) {
        if (g)
            cudaGraphDestroy(g);
        cudaGetLastError(); /* the capture's error is reported here, not sticky */
        return graph_fail(err, errlen, "cudaStreamEndCapture", e);
    }
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return graph_fail(err, errlen, "cudaGraphInstantiate", e);
    }
    *exec = x;
    return 0;
}

int model_cuda_graph_launch(void *exec, void *stream, char *err, size_t errlen)
{
    cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)stream);
    return e == cudaSuccess ? 0 : graph_fail(err, errlen, "cudaGraphLaunch", e);
}

void model_cuda_graph_free(void *exec)
{
    if (exec)
        cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

void model_cuda_close(void *stream)
{
    if (stream) {
        cudaStreamSynchronize((cudaStream_t)stream);
        cudaStreamDestroy((cudaStream_t)stream);
    }
}
