/* SPDX-License-Identifier: BSD-3-Clause */
/* cublaslt.c: the cuBLASLt calls ddpc's CUDA model uses, emulated on the
 * host for tests (emu.h): handles, matmul descriptors, matrix layouts,
 * preferences, a heuristic that offers one algorithm, and cublasLtMatmul,
 * D = alpha op(A) op(B) + beta C in column-major order, with the epilogues
 * of an MLP (bias, ReLU and its bit-mask, the ReLU gradient, the bias
 * gradients). The signatures are the real header's (cublasLt.h is
 * included). Strict as the real library is and, where a misuse would only
 * be undefined there, stricter: shapes that do not match the operation,
 * leading dimensions, types, the epilogues' aux rules, pointer alignments
 * against the algorithm chosen, and every operand checked (emu_check) for
 * the bytes its layout spans. The product runs on the stream (emu_launch)
 * with everything copied at the call, as cuBLASLt does, so that a graph
 * replays it: float32 operands (bf16/fp16 widened exactly), cblas_sgemm
 * for the product (float accumulation, not the GPU's order: results agree
 * to float rounding, not bit for bit), the epilogue in float, D rounded to
 * its type to nearest even.
 * Emulated: CUBLAS_COMPUTE_32F with float scale, host alpha/beta, A and B
 * of one type (CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F), C = D's type (A's,
 * or float32), batch count 1, column order. Not: GELU epilogues, device
 * pointer modes, fp8, TF32, batched or strided layouts. The ReLU mask's
 * bit order (bit i of column j: byte j * ld / 8 + i / 8, bit i % 8) is this
 * emulation's; cuBLASLt's is opaque and only ever read back by cuBLASLt. */
#include "emu_internal.h"
#include "model_cuda_kernels.h"

#include <cblas.h>
#include <cublasLt.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ objects */

enum { OBJ_HANDLE = 1, OBJ_DESC, OBJ_LAYOUT, OBJ_PREF };
static const char *obj_name[] = {"", "cuBLASLt handle", "matmul descriptor", "matrix layout",
                                 "matmul preference"};

struct cublasLtContext {
    int device; /* current when created */
};

typedef struct {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t pointer_mode, transa, transb, transc;
    uint32_t epilogue;
    const void *bias; /* bias, or the bias gradient's output */
    int32_t bias_type; /* -1: cuBLASLt's default (D's type) */
    void *aux;
    int64_t aux_ld; /* bits, for the ReLU mask */
} desc_t;

typedef struct {
    int32_t type; /* cudaDataType_t */
    uint64_t rows, cols;
    int64_t ld;
} layout_t;

typedef struct {
    uint32_t search;
    uint64_t max_ws;
    uint32_t red_mask;
    uint32_t align[4]; /* A, B, C, D */
    float max_waves;
    uint64_t impl_mask;
} pref_t;

/* Live objects: a call given anything else (destroyed, never created) is a
 * violation; the real library would read freed memory. */
static pthread_mutex_t L = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const void *p;
    int kind;
} *live;
static int nlive, cap_live;

static int live_add(const void *p, int kind)
{
    pthread_mutex_lock(&L);
    if (nlive == cap_live) {
        int c = cap_live ? 2 * cap_live : 64;
        void *n = realloc(live, (size_t)c * sizeof *live);
        if (!n) {
            pthread_mutex_unlock(&L);
            return -1;
        }
        live = n;
        cap_live = c;
    }
    live[nlive].p = p;
    live[nlive].kind = kind;
    nlive++;
    pthread_mutex_unlock(&L);
    return 0;
}

/* 1 if p is a live object of kind (and removes it if del) */
static int live_find(const void *p, int kind, int del)
{
    int found = 0;
    pthread_mutex_lock(&L);
    for (int i = nlive - 1; i >= 0; i--)
        if (live[i].p == p && live[i].kind == kind) {
            found = 1;
            if (del)
                live[i] = live[--nlive];
            break;
        }
    pthread_mutex_unlock(&L);
    return found;
}

/* p must be a live object of kind: else a violation (NULL: a plain error) */
static cublasStatus_t need(const void *p, int kind, const char *call, const char *what)
{
    if (!p)
        return kind == OBJ_HANDLE ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_INVALID_VALUE;
    if (live_find(p, kind, 0))
        return CUBLAS_STATUS_SUCCESS;
    emu_violation("%s: %s = %p is not a live %s (destroyed, or never created)", call, what, p,
                  obj_name[kind]);
    return kind == OBJ_HANDLE ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_INVALID_VALUE;
}

/* A refusal the caller sees only as a status: said on stderr too, so that
 * a test's log says why (cublasLtMatmul only; the heuristic's refusals are
 * the caller's to report). */
static cublasStatus_t refuse(cublasStatus_t st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static cublasStatus_t refuse(cublasStatus_t st, const char *fmt, ...)
{
    char m[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ddpc-emu[%d]: cublasLtMatmul: %s (status %d)\n", (int)getpid(), m, (int)st);
    return st;
}

/* ------------------------------------------------------------------ element types */

static int type_ok(int32_t t) { return t == CUDA_R_32F || t == CUDA_R_16BF || t == CUDA_R_16F; }

static size_t esize(int32_t t) { return t == CUDA_R_32F ? 4 : 2; }

static float get(const void *p, int32_t t, size_t i)
{
    if (t == CUDA_R_32F)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return t == CUDA_R_16BF ? emu_bits_f((uint32_t)h << 16) : emu_from_f16(h);
}

static void put(void *p, int32_t t, size_t i, float v)
{
    if (t == CUDA_R_32F)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = t == CUDA_R_16BF ? emu_to_bf16(v) : emu_to_f16(v);
}

/* ------------------------------------------------------------------ epilogues */

enum {
    E_BIAS = 1,     /* adds the bias vector (length M) */
    E_RELU = 2,     /* ReLU */
    E_AUX_OUT = 4,  /* writes the ReLU bit-mask to aux */
    E_DRELU = 8,    /* applies the mask read from aux */
    E_BGRAD = 16,   /* bias gradient of the (masked) product, length M */
    E_BGRADA = 32,  /* bias gradient from op(A), length M */
    E_BGRADB = 64,  /* bias gradient from op(B), length N */
    E_UNKNOWN = -1, /* not an epilogue of cuBLASLt */
    E_GELU = -2     /* cuBLASLt's, not emulated */
};

static int epi_flags(uint32_t e)
{
    switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: return 0;
    case CUBLASLT_EPILOGUE_RELU: return E_RELU;
    case CUBLASLT_EPILOGUE_RELU_AUX: return E_RELU | E_AUX_OUT;
    case CUBLASLT_EPILOGUE_BIAS: return E_BIAS;
    case CUBLASLT_EPILOGUE_RELU_BIAS: return E_BIAS | E_RELU;
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS: return E_BIAS | E_RELU | E_AUX_OUT;
    case CUBLASLT_EPILOGUE_DRELU: return E_DRELU;
    case CUBLASLT_EPILOGUE_DRELU_BGRAD: return E_DRELU | E_BGRAD;
    case CUBLASLT_EPILOGUE_BGRADA: return E_BGRADA;
    case CUBLASLT_EPILOGUE_BGRADB: return E_BGRADB;
    case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU:
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return E_GELU;
    default: return E_UNKNOWN;
    }
}

#define E_VEC (E_BIAS | E_BGRAD | E_BGRADA | E_BGRADB) /* uses the bias pointer */
#define E_AUX (E_AUX_OUT | E_DRELU)                    /* uses the aux pointer */
#define AUX_ALIGN 16u /* the aux pointer: its columns are 128-bit units */

/* ------------------------------------------------------------------ handles */

EMU_API cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    if (!h)
        return CUBLAS_STATUS_INVALID_VALUE;
    struct cublasLtContext *c = calloc(1, sizeof *c);
    if (!c || live_add(c, OBJ_HANDLE)) {
        free(c);
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    c->device = emu_current_device();
    *h = c;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    cublasStatus_t st = need(h, OBJ_HANDLE, "cublasLtDestroy", "handle");
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    live_find(h, OBJ_HANDLE, 1);
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------ matmul descriptors */

EMU_API cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *out,
                                                cublasComputeType_t compute,
                                                cudaDataType_t scale)
{
    if (!out)
        return CUBLAS_STATUS_INVALID_VALUE;
    desc_t *d = calloc(1, sizeof *d);
    if (!d || live_add(d, OBJ_DESC)) {
        free(d);
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    d->compute = compute;
    d->scale = scale;
    d->pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    d->transa = d->transb = d->transc = CUBLAS_OP_N;
    d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    d->bias_type = -1;
    *out = (cublasLtMatmulDesc_t)(void *)d;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc)
{
    cublasStatus_t st = need(desc, OBJ_DESC, "cublasLtMatmulDescDestroy", "descriptor");
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    live_find(desc, OBJ_DESC, 1);
    free(desc);
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                      cublasLtMatmulDescAttributes_t attr,
                                                      const void *buf, size_t size)
{
    cublasStatus_t st = need(desc, OBJ_DESC, "cublasLtMatmulDescSetAttribute", "descriptor");
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (!buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    desc_t *d = (desc_t *)(void *)desc;
    int32_t i32;
    uint32_t u32;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
    case CUBLASLT_MATMUL_DESC_TRANSC:
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        if (size != sizeof i32)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&i32, buf, sizeof i32);
        if ((attr == CUBLASLT_MATMUL_DESC_TRANSA || attr == CUBLASLT_MATMUL_DESC_TRANSB ||
             attr == CUBLASLT_MATMUL_DESC_TRANSC) &&
            i32 != CUBLAS_OP_N && i32 != CUBLAS_OP_T && i32 != CUBLAS_OP_C)
            return CUBLAS_STATUS_INVALID_VALUE;
        if (attr == CUBLASLT_MATMUL_DESC_SCALE_TYPE)
            d->scale = (cudaDataType_t)i32;
        else if (attr == CUBLASLT_MATMUL_DESC_POINTER_MODE)
            d->pointer_mode = i32;
        else if (attr == CUBLASLT_MATMUL_DESC_TRANSA)
            d->transa = i32;
        else if (attr == CUBLASLT_MATMUL_DESC_TRANSB)
            d->transb = i32;
        else if (attr == CUBLASLT_MATMUL_DESC_TRANSC)
            d->transc = i32;
        else
            d->bias_type = i32;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (size != sizeof u32)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&u32, buf, sizeof u32);
        if (epi_flags(u32) == E_UNKNOWN)
            return CUBLAS_STATUS_INVALID_VALUE;
        d->epilogue = u32;
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        if (size != sizeof(void *))
            return CUBLAS_STATUS_INVALID_VALUE;
        if (attr == CUBLASLT_MATMUL_DESC_BIAS_POINTER)
            memcpy(&d->bias, buf, sizeof d->bias);
        else
            memcpy(&d->aux, buf, sizeof d->aux);
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        if (size != sizeof(int64_t))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&d->aux_ld, buf, sizeof d->aux_ld);
        return CUBLAS_STATUS_SUCCESS;
    default: /* an attribute this emulation does not know */
        return CUBLAS_STATUS_INVALID_VALUE;
    }
}

/* ------------------------------------------------------------------ layouts */

EMU_API cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *out, cudaDataType type,
                                                  uint64_t rows, uint64_t cols, int64_t ld)
{
    if (!out)
        return CUBLAS_STATUS_INVALID_VALUE;
    layout_t *l = calloc(1, sizeof *l);
    if (!l || live_add(l, OBJ_LAYOUT)) {
        free(l);
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    l->type = (int32_t)type;
    l->rows = rows;
    l->cols = cols;
    l->ld = ld;
    *out = (cublasLtMatrixLayout_t)(void *)l;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout)
{
    cublasStatus_t st = need(layout, OBJ_LAYOUT, "cublasLtMatrixLayoutDestroy", "layout");
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    live_find(layout, OBJ_LAYOUT, 1);
    free(layout);
    return CUBLAS_STATUS_SUCCESS;
}

/* bytes a column-major layout spans from its pointer */
static size_t span(const layout_t *l)
{
    if (!l->rows || !l->cols)
        return 0;
    return ((size_t)(l->cols - 1) * (size_t)l->ld + (size_t)l->rows) * esize(l->type);
}

/* ------------------------------------------------------------------ preferences */

EMU_API cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *out)
{
    if (!out)
        return CUBLAS_STATUS_INVALID_VALUE;
    pref_t *p = calloc(1, sizeof *p);
    if (!p || live_add(p, OBJ_PREF)) {
        free(p);
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    p->search = CUBLASLT_SEARCH_BEST_FIT;
    p->max_ws = 0;
    p->red_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
    for (int i = 0; i < 4; i++)
        p->align[i] = 256;
    p->impl_mask = UINT64_MAX;
    *out = (cublasLtMatmulPreference_t)(void *)p;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    cublasStatus_t st = need(pref, OBJ_PREF, "cublasLtMatmulPreferenceDestroy", "preference");
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    live_find(pref, OBJ_PREF, 1);
    free(pref);
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                            cublasLtMatmulPreferenceAttributes_t attr,
                                                            const void *buf, size_t size)
{
    cublasStatus_t st =
        need(pref, OBJ_PREF, "cublasLtMatmulPreferenceSetAttribute", "preference");
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (!buf)
        return CUBLAS_STATUS_INVALID_VALUE;
    pref_t *p = (pref_t *)(void *)pref;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
        uint32_t v;
        if (size != sizeof v)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&v, buf, sizeof v);
        if (attr == CUBLASLT_MATMUL_PREF_SEARCH_MODE)
            p->search = v;
        else if (attr == CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK)
            p->red_mask = v;
        else
            p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: {
        uint64_t v;
        if (size != sizeof v)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&v, buf, sizeof v);
        if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
            p->max_ws = v;
        else
            p->impl_mask = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT:
        if (size != sizeof(float))
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&p->max_waves, buf, sizeof(float));
        return CUBLAS_STATUS_SUCCESS;
    default:
        return CUBLAS_STATUS_INVALID_VALUE;
    }
}

/* ------------------------------------------------------------------ the problem */

/* One matmul, checked and by value: what the stream runs. */
typedef struct {
    int ta, tb;                   /* op(A), op(B) transpose (CUBLAS_OP_C = T: real types) */
    int M, N, K;
    int flags;                    /* E_* */
    int32_t at, bt, ct, dt, vt;   /* A, B, C, D and the bias vector's types */
    int arows, acols, brows, bcols;
    int64_t lda, ldb, ldc, ldd, aux_ld;
    float alpha, beta;
    const void *A, *B, *C;
    void *D, *bias, *aux;
    void *ws;
    size_t ws_poison;             /* bytes of ws the algorithm scribbles */
} mm_t;

_Static_assert(sizeof(mm_t) <= EMU_ARG_MAX, "a matmul's arguments must fit an emu_launch");

/* The algorithm's record in cublasLtMatmulAlgo_t.data */
#define ALGO_MAGIC 0x646470632d656d75ull /* "ddpc-emu" */
enum { AL_MAGIC, AL_EPI, AL_TYPES, AL_ALIGN, AL_WS };

/* Check desc and the four layouts, fill the shape and types of m (no
 * pointers). INVALID_VALUE for what cuBLASLt calls impossible, NOT_SUPPORTED
 * for what it (or this emulation) does not offer; why says which. */
static cublasStatus_t problem(const desc_t *d, const layout_t *a, const layout_t *b,
                              const layout_t *c, const layout_t *dl, mm_t *m, char *why,
                              size_t n)
{
    memset(m, 0, sizeof *m);
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F) {
        snprintf(why, n, "compute type %d with scale type %d (emulated: CUBLAS_COMPUTE_32F, "
                 "CUDA_R_32F)", (int)d->compute, (int)d->scale);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (d->pointer_mode != CUBLASLT_POINTER_MODE_HOST) {
        snprintf(why, n, "pointer mode %d (emulated: host)", (int)d->pointer_mode);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (d->transc != CUBLAS_OP_N) {
        snprintf(why, n, "TRANSC must be CUBLAS_OP_N");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    int f = epi_flags(d->epilogue);
    if (f < 0) {
        snprintf(why, n, "epilogue %u is not emulated", (unsigned)d->epilogue);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    const layout_t *ls[4] = {a, b, c, dl};
    static const char nm[] = "ABCD";
    for (int i = 0; i < 4; i++) {
        if (!type_ok(ls[i]->type)) {
            snprintf(why, n, "%c: type %d (emulated: CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F)", nm[i],
                     (int)ls[i]->type);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
        if (ls[i]->rows > INT_MAX || ls[i]->cols > INT_MAX || ls[i]->ld > INT_MAX) {
            snprintf(why, n, "%c: %llu x %llu, ld %lld: too large for the emulation", nm[i],
                     (unsigned long long)ls[i]->rows, (unsigned long long)ls[i]->cols,
                     (long long)ls[i]->ld);
            return CUBLAS_STATUS_NOT_SUPPORTED;
        }
        if (ls[i]->ld < 1 || (uint64_t)ls[i]->ld < ls[i]->rows) {
            snprintf(why, n, "%c: ld %lld < %llu rows (column-major)", nm[i],
                     (long long)ls[i]->ld, (unsigned long long)ls[i]->rows);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
    }
    if (a->type != b->type || c->type != dl->type ||
        (dl->type != a->type && dl->type != CUDA_R_32F)) {
        snprintf(why, n, "types A %d, B %d, C %d, D %d: A and B one type, C and D that type "
                 "or CUDA_R_32F", (int)a->type, (int)b->type, (int)c->type, (int)dl->type);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    m->ta = d->transa != CUBLAS_OP_N;
    m->tb = d->transb != CUBLAS_OP_N;
    const uint64_t oar = m->ta ? a->cols : a->rows, oac = m->ta ? a->rows : a->cols;
    const uint64_t obr = m->tb ? b->cols : b->rows, obc = m->tb ? b->rows : b->cols;
    if (oar != dl->rows || obc != dl->cols || oac != obr || c->rows != dl->rows ||
        c->cols != dl->cols) {
        snprintf(why, n, "shapes: op(A) %llu x %llu, op(B) %llu x %llu, C %llu x %llu, D %llu x "
                 "%llu do not make D = op(A) op(B) + C", (unsigned long long)oar,
                 (unsigned long long)oac, (unsigned long long)obr, (unsigned long long)obc,
                 (unsigned long long)c->rows, (unsigned long long)c->cols,
                 (unsigned long long)dl->rows, (unsigned long long)dl->cols);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    m->M = (int)dl->rows;
    m->N = (int)dl->cols;
    m->K = (int)oac;
    m->flags = f;
    m->at = a->type;
    m->bt = b->type;
    m->ct = c->type;
    m->dt = dl->type;
    m->arows = (int)a->rows;
    m->acols = (int)a->cols;
    m->brows = (int)b->rows;
    m->bcols = (int)b->cols;
    m->lda = a->ld;
    m->ldb = b->ld;
    m->ldc = c->ld;
    m->ldd = dl->ld;
    /* the bias (gradient) vector: D's type unless BIAS_DATA_TYPE says float */
    m->vt = d->bias_type == -1 ? dl->type : d->bias_type;
    if ((f & E_VEC) && m->vt != dl->type && m->vt != CUDA_R_32F) {
        snprintf(why, n, "bias data type %d with D of type %d (D's type or CUDA_R_32F)",
                 (int)d->bias_type, (int)dl->type);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (f & E_AUX) {
        if (d->aux_ld <= 0 || d->aux_ld % 128 || (uint64_t)d->aux_ld < dl->rows) {
            snprintf(why, n, "EPILOGUE_AUX_LD %lld bits for a ReLU mask of %llu rows: a multiple "
                     "of 128, at least the rows", (long long)d->aux_ld,
                     (unsigned long long)dl->rows);
            return CUBLAS_STATUS_INVALID_VALUE;
        }
        m->aux_ld = d->aux_ld;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* bytes of the aux mask the epilogue touches: whole 128-bit units of each column */
static size_t aux_span(const mm_t *m)
{
    if (!m->M || !m->N)
        return 0;
    return (size_t)(m->N - 1) * (size_t)(m->aux_ld / 8) + ((size_t)m->M + 127) / 128 * 16;
}

static size_t vec_len(const mm_t *m) { return (size_t)((m->flags & E_BGRADB) ? m->N : m->M); }

static int pow2(uint32_t v) { return v && !(v & (v - 1)); }

/* ------------------------------------------------------------------ heuristic */

EMU_API cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int *count)
{
    const char *call = "cublasLtMatmulAlgoGetHeuristic";
    cublasStatus_t st;
    if ((st = need(h, OBJ_HANDLE, call, "handle")) || (st = need(desc, OBJ_DESC, call, "desc")) ||
        (st = need(Adesc, OBJ_LAYOUT, call, "Adesc")) ||
        (st = need(Bdesc, OBJ_LAYOUT, call, "Bdesc")) ||
        (st = need(Cdesc, OBJ_LAYOUT, call, "Cdesc")) ||
        (st = need(Ddesc, OBJ_LAYOUT, call, "Ddesc")) ||
        (st = need(pref, OBJ_PREF, call, "preference")))
        return st;
    if (requested <= 0 || !results || !count)
        return CUBLAS_STATUS_INVALID_VALUE;
    *count = 0;
    const desc_t *d = (const desc_t *)(const void *)desc;
    const pref_t *p = (const pref_t *)(const void *)pref;
    mm_t m;
    char why[512];
    st = problem(d, (const layout_t *)(void *)Adesc, (const layout_t *)(void *)Bdesc,
                 (const layout_t *)(void *)Cdesc, (const layout_t *)(void *)Ddesc, &m, why,
                 sizeof why);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (p->search != CUBLASLT_SEARCH_BEST_FIT)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* alignments: every matrix at least its element; the bias vector (its
       pointer is in desc) at least its element, the ReLU mask AUX_ALIGN */
    const int32_t ty[4] = {m.at, m.bt, m.ct, m.dt};
    uint32_t need_al[4];
    for (int i = 0; i < 4; i++) {
        if (!pow2(p->align[i]) || p->align[i] < esize(ty[i]))
            return CUBLAS_STATUS_NOT_SUPPORTED;
        need_al[i] = p->align[i] < 16 ? p->align[i] : 16;
    }
    if ((m.flags & E_VEC) && d->bias && mk_align_of(d->bias) < esize(m.vt))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if ((m.flags & E_AUX) && d->aux && mk_align_of(d->aux) < AUX_ALIGN)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (p->max_waves > 0.0f && p->max_waves < 1.0f)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    /* one algorithm: no split-K (reduction scheme NONE, which every mask
       allows), no workspace */
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    r.algo.data[AL_MAGIC] = ALGO_MAGIC;
    r.algo.data[AL_EPI] = d->epilogue;
    r.algo.data[AL_TYPES] = (uint64_t)(uint16_t)m.at | (uint64_t)(uint16_t)m.ct << 16;
    r.algo.data[AL_ALIGN] = (uint64_t)need_al[0] | (uint64_t)need_al[1] << 8 |
                            (uint64_t)need_al[2] << 16 | (uint64_t)need_al[3] << 24;
    r.algo.data[AL_WS] = 0;
    r.workspaceSize = 0;
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
    results[0] = r;
    *count = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* ------------------------------------------------------------------ the product */

static int bit_of(const unsigned char *aux, int64_t ld, int i, int j)
{
    return aux[(size_t)j * (size_t)(ld / 8) + (size_t)i / 8] >> (i % 8) & 1;
}

static void run_matmul(void *arg)
{
    const mm_t *m = arg;
    const int M = m->M, N = m->N, K = m->K;
    float *Af = malloc(((size_t)m->arows * m->acols + 1) * sizeof(float));
    float *Bf = malloc(((size_t)m->brows * m->bcols + 1) * sizeof(float));
    float *Df = calloc((size_t)M * N + 1, sizeof(float));
    float *vec = calloc(vec_len(m) + 1, sizeof(float));
    if (!Af || !Bf || !Df || !vec) {
        emu_violation("cublasLtMatmul: out of host memory for the emulated product "
                      "(%d x %d x %d)", M, N, K);
        goto out;
    }
    /* the operands widened to float, packed (ld = rows) */
    for (int j = 0; j < m->acols; j++)
        for (int i = 0; i < m->arows; i++)
            Af[(size_t)j * m->arows + i] = get(m->A, m->at, (size_t)j * m->lda + i);
    for (int j = 0; j < m->bcols; j++)
        for (int i = 0; i < m->brows; i++)
            Bf[(size_t)j * m->brows + i] = get(m->B, m->bt, (size_t)j * m->ldb + i);
    if (m->beta != 0.0f) /* C is not read when beta is 0 */
        for (int j = 0; j < N; j++)
            for (int i = 0; i < M; i++)
                Df[(size_t)j * M + i] = get(m->C, m->ct, (size_t)j * m->ldc + i);
    if (M && N)
        cblas_sgemm(CblasColMajor, m->ta ? CblasTrans : CblasNoTrans,
                    m->tb ? CblasTrans : CblasNoTrans, M, N, K, m->alpha, Af,
                    m->arows ? m->arows : 1, Bf, m->brows ? m->brows : 1, m->beta, Df, M ? M : 1);
    /* the epilogue, column by column, in float; D rounded to its type */
    unsigned char *aux = m->aux;
    const size_t colb = (size_t)(m->aux_ld / 8), used = ((size_t)M + 127) / 128 * 16;
    for (int j = 0; j < N; j++) {
        if (m->flags & E_AUX_OUT)
            memset(aux + (size_t)j * colb, 0, used);
        for (int i = 0; i < M; i++) {
            float v = Df[(size_t)j * M + i];
            if (m->flags & E_BIAS)
                v = v + get(m->bias, m->vt, (size_t)i);
            if (m->flags & E_RELU) {
                const int pos = v > 0.0f; /* NaN: 0, as max(x, 0) */
                if (m->flags & E_AUX_OUT)
                    aux[(size_t)j * colb + (size_t)i / 8] |= (unsigned char)(pos << (i % 8));
                v = pos ? v : 0.0f;
            }
            if ((m->flags & E_DRELU) && !bit_of(aux, m->aux_ld, i, j))
                v = 0.0f;
            if (m->flags & E_BGRAD)
                vec[i] = vec[i] + v;
            put(m->D, m->dt, (size_t)j * m->ldd + i, v);
        }
    }
    /* the operands' bias gradients, summed over k in order */
    if (m->flags & E_BGRADA) /* op(A)(i, k) */
        for (int i = 0; i < M; i++)
            for (int k = 0; k < K; k++)
                vec[i] = vec[i] + (m->ta ? Af[(size_t)i * m->arows + k]
                                         : Af[(size_t)k * m->arows + i]);
    if (m->flags & E_BGRADB) /* op(B)(k, j) */
        for (int j = 0; j < N; j++)
            for (int k = 0; k < K; k++)
                vec[j] = vec[j] + (m->tb ? Bf[(size_t)k * m->brows + j]
                                         : Bf[(size_t)j * m->brows + k]);
    if (m->flags & (E_BGRAD | E_BGRADA | E_BGRADB))
        for (size_t i = 0; i < vec_len(m); i++)
            put(m->bias, m->vt, i, vec[i]);
    if (m->ws_poison) /* scratch: nothing may rely on what it held */
        memset(m->ws, 0xff, m->ws_poison);
out:
    free(Af);
    free(Bf);
    free(Df);
    free(vec);
}

/* [p, p + pn) and [q, q + qn) overlap */
static int overlap(const void *p, size_t pn, const void *q, size_t qn)
{
    const char *a = p, *b = q;
    return pn && qn && a < b + qn && b < a + pn;
}

EMU_API cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                      const void *alpha, const void *A,
                                      cublasLtMatrixLayout_t Adesc, const void *B,
                                      cublasLtMatrixLayout_t Bdesc, const void *beta,
                                      const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                                      cublasLtMatrixLayout_t Ddesc,
                                      const cublasLtMatmulAlgo_t *algo, void *workspace,
                                      size_t wsbytes, cudaStream_t stream)
{
    const char *call = "cublasLtMatmul";
    cublasStatus_t st;
    if ((st = need(h, OBJ_HANDLE, call, "handle")) || (st = need(desc, OBJ_DESC, call, "desc")) ||
        (st = need(Adesc, OBJ_LAYOUT, call, "Adesc")) ||
        (st = need(Bdesc, OBJ_LAYOUT, call, "Bdesc")) ||
        (st = need(Cdesc, OBJ_LAYOUT, call, "Cdesc")) ||
        (st = need(Ddesc, OBJ_LAYOUT, call, "Ddesc")))
        return st;
    if (!alpha || !beta)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "alpha or beta is NULL");
    const desc_t *d = (const desc_t *)(const void *)desc;
    const layout_t *la = (const layout_t *)(const void *)Adesc,
                   *lb = (const layout_t *)(const void *)Bdesc,
                   *lc = (const layout_t *)(const void *)Cdesc,
                   *ld = (const layout_t *)(const void *)Ddesc;
    mm_t m;
    char why[512];
    st = problem(d, la, lb, lc, ld, &m, why, sizeof why);
    if (st != CUBLAS_STATUS_SUCCESS)
        return refuse(st, "%s", why);
    /* host pointer mode: alpha and beta are read now, from host memory */
    if (emu_kind_of(alpha) == EMU_DEVICE || emu_kind_of(beta) == EMU_DEVICE) {
        emu_violation("%s: alpha = %p, beta = %p: device memory with the host pointer mode", call,
                      alpha, beta);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    memcpy(&m.alpha, alpha, sizeof(float));
    memcpy(&m.beta, beta, sizeof(float));
    m.A = A;
    m.B = B;
    m.C = C;
    m.D = D;
    m.bias = (void *)d->bias;
    m.aux = d->aux;
    /* the algorithm: one of ours, for this epilogue and these types, and
       the alignments it was chosen for */
    uint32_t al[4] = {16, 16, 16, 16};
    if (algo) {
        if (algo->data[AL_MAGIC] != ALGO_MAGIC)
            return refuse(CUBLAS_STATUS_INVALID_VALUE,
                          "algo %p is not from cublasLtMatmulAlgoGetHeuristic", (void *)algo);
        if (algo->data[AL_EPI] != d->epilogue ||
            algo->data[AL_TYPES] != ((uint64_t)(uint16_t)m.at | (uint64_t)(uint16_t)m.ct << 16))
            return refuse(CUBLAS_STATUS_INVALID_VALUE,
                          "the algo was chosen for epilogue %llu and other types, not epilogue "
                          "%u", (unsigned long long)algo->data[AL_EPI], (unsigned)d->epilogue);
        for (int i = 0; i < 4; i++)
            al[i] = (uint32_t)(algo->data[AL_ALIGN] >> (8 * i) & 0xff);
        if (algo->data[AL_WS] > wsbytes)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, "workspace of %zu bytes, the algo needs %llu",
                          wsbytes, (unsigned long long)algo->data[AL_WS]);
        m.ws_poison = (size_t)algo->data[AL_WS];
    } else {
        /* cuBLASLt picks with the real pointers' alignments */
        const void *ptr[4] = {A, B, C, D};
        const int32_t ty[4] = {m.at, m.bt, m.ct, m.dt};
        for (int i = 0; i < 4; i++) {
            uint32_t k = mk_align_of(ptr[i]);
            if (ptr[i] && k < esize(ty[i]))
                return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "operand %c = %p is not aligned to "
                              "its element", "ABCD"[i], ptr[i]);
            al[i] = k < 16 ? k : 16;
        }
    }
    const void *ptr[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if (ptr[i] && mk_align_of(ptr[i]) < al[i])
            return refuse(CUBLAS_STATUS_INVALID_VALUE,
                          "operand %c = %p is aligned to %u bytes; the algo was chosen for %u "
                          "(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES)", "ABCD"[i], ptr[i],
                          mk_align_of(ptr[i]), al[i], "ABCD"[i]);
    if ((m.flags & E_VEC) && m.bias && mk_align_of(m.bias) < esize(m.vt))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "bias = %p is not aligned to its element",
                      m.bias);
    if ((m.flags & E_AUX) && m.aux && mk_align_of(m.aux) < AUX_ALIGN)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "aux = %p is not aligned to %u bytes", m.aux,
                      AUX_ALIGN);
    /* in place: C == D with C's layout D's */
    if (C == D && C && (lc->type != ld->type || lc->ld != ld->ld))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "C == D in place with different layouts "
                      "(ld %lld and %lld)", (long long)lc->ld, (long long)ld->ld);
    /* every operand inside device memory, for the bytes its layout spans */
    const size_t sa = span(la), sb = span(lb), sc = span(lc), sd = span(ld);
    const size_t sv = (m.flags & E_VEC) ? vec_len(&m) * esize(m.vt) : 0;
    const size_t sx = (m.flags & E_AUX) ? aux_span(&m) : 0;
    if (emu_check(A, sa, EMU_DEVICE, call, "A") || emu_check(B, sb, EMU_DEVICE, call, "B") ||
        emu_check(C, m.beta != 0.0f ? sc : 0, EMU_DEVICE, call, "C") ||
        emu_check(D, sd, EMU_DEVICE, call, "D") ||
        ((m.flags & E_VEC) && emu_check(m.bias, sv, EMU_DEVICE, call, "bias")) ||
        ((m.flags & E_AUX) && emu_check(m.aux, sx, EMU_DEVICE, call, "aux")) ||
        emu_check(workspace, wsbytes, EMU_DEVICE, call, "workspace"))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    /* outputs must not alias inputs (C == D is the in-place case) */
    if (overlap(D, sd, A, sa) || overlap(D, sd, B, sb) ||
        (C != D && overlap(D, sd, C, m.beta != 0.0f ? sc : 0)) ||
        overlap(m.bias, sv, D, sd) ||
        overlap(m.aux, (m.flags & E_AUX_OUT) ? sx : 0, D, sd) ||
        overlap(m.bias, sv, m.aux, sx)) {
        emu_violation("%s: an output overlaps another operand (D = %p, %zu bytes; A = %p; B = "
                      "%p; C = %p; bias = %p; aux = %p)", call, D, sd, A, B, C, m.bias, m.aux);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    m.ws = workspace;
    if (emu_launch(stream, call, run_matmul, &m, sizeof m) != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    return CUBLAS_STATUS_SUCCESS;
}
