/* SPDX-License-Identifier: BSD-3-Clause */
/* check_emu_lt.c: the emulated cuBLASLt (tests/emu/cublaslt.c) against a
 * naive triple loop in double: every epilogue the model uses, every
 * transpose, float32/bf16/fp16 operands, padded leading dimensions, beta 0
 * and in place; the refusals (shapes, aux ld, alignments, attributes,
 * algorithms used out of their problem); and, in forked children that must
 * exit EMU_VIOLATION_EXIT, the misuses it reports as violations. Also the
 * model kernels' twins' roundings (tests/emu/kernels_model.c). Linked with
 * libddpc-emu only: no GPU involved. */
#include "emu.h"
#include "model_cuda_kernels.h"

#include <check.h>
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CU(x) ck_assert_int_eq((int)(x), (int)cudaSuccess)
#define LT(x) ck_assert_int_eq((int)(x), (int)CUBLAS_STATUS_SUCCESS)

/* ------------------------------------------------------------------ host helpers */

static uint64_t rng = 42;
static float frand(void) /* [-1, 1) */
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) / 16777216.0) * 2.0f - 1.0f;
}

static size_t esz(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

/* The test's own conversions (by arithmetic, not by bits as the emulation
 * converts): bf16 and IEEE half of the values frand and NaN give. */
static float h_get(const void *p, cudaDataType_t t, size_t i)
{
    if (t == CUDA_R_32F)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    if (t == CUDA_R_16BF) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    int e = h >> 10 & 0x1f, m = h & 0x3ff;
    double v = e == 0x1f ? (m ? NAN : INFINITY) : e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return (float)(h & 0x8000 ? -v : v);
}

static void h_put(void *p, cudaDataType_t t, size_t i, float v)
{
    if (t == CUDA_R_32F) {
        ((float *)p)[i] = v;
    } else if (t == CUDA_R_16BF) {
        uint32_t u;
        memcpy(&u, &v, 4);
        u += 0x7fffu + ((u >> 16) & 1u);
        ((uint16_t *)p)[i] = isnan(v) ? 0x7fff : (uint16_t)(u >> 16);
    } else { /* |v| < 1 or NaN; nearbyint rounds to nearest even */
        uint16_t h;
        double a = fabs(v);
        if (isnan(v)) {
            h = 0x7fff;
        } else if (a < ldexp(1, -14)) {
            h = (uint16_t)nearbyint(ldexp(a, 24));
        } else {
            int e;
            double m = nearbyint(ldexp(frexp(a, &e), 11)); /* [1024, 2048] */
            if (m == 2048) {
                m = 1024;
                e++;
            }
            h = (uint16_t)((e + 14) << 10 | ((int)m - 1024));
        }
        ((uint16_t *)p)[i] = (uint16_t)(h | (signbit(v) ? 0x8000 : 0));
    }
}

/* half an ulp of type t, relative */
static double rel_ulp(cudaDataType_t t)
{
    return t == CUDA_R_32F ? 6e-8 : t == CUDA_R_16BF ? 1.0 / 256 : 1.0 / 2048;
}

/* device copy of a random (rows x cols, ld) column-major matrix of type t;
 * *host gets the same bytes */
static void *dev_matrix(cudaDataType_t t, int rows, int cols, int ld, void **host)
{
    size_t n = (size_t)ld * cols, b = n * esz(t);
    void *h = malloc(b), *d;
    ck_assert_ptr_nonnull(h);
    for (size_t i = 0; i < n; i++)
        h_put(h, t, i, (int)(i % (size_t)ld) < rows ? frand() : NAN);
    CU(cudaMalloc(&d, b));
    CU(cudaMemcpy(d, h, b, cudaMemcpyHostToDevice));
    *host = h;
    return d;
}

/* One matmul with its own descriptors, planned by the heuristic with the
 * pointers' alignments; returns the status of the first failing call. */
typedef struct {
    cublasOperation_t ta, tb;
    int M, N, K, lda, ldb, ldd;
    cudaDataType_t ab, dt;
    cublasLtEpilogue_t epi;
    const void *A, *B;
    void *D, *bias, *aux;
    int64_t aux_ld;
    float alpha, beta;
} mm_t;

static cublasStatus_t matmul(cublasLtHandle_t h, const mm_t *g, cudaStream_t s, void *ws,
                             size_t wsb)
{
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t ta = g->ta, tb = g->tb;
    uint32_t epi = g->epi;
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (g->bias)
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                          sizeof g->bias));
    if (g->aux)
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux,
                                          sizeof g->aux));
    if (g->aux_ld)
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &g->aux_ld,
                                          sizeof g->aux_ld));
    const int ar = g->ta == CUBLAS_OP_N ? g->M : g->K, ac = g->ta == CUBLAS_OP_N ? g->K : g->M;
    const int br = g->tb == CUBLAS_OP_N ? g->K : g->N, bc = g->tb == CUBLAS_OP_N ? g->N : g->K;
    LT(cublasLtMatrixLayoutCreate(&la, g->ab, ar, ac, g->lda));
    LT(cublasLtMatrixLayoutCreate(&lb, g->ab, br, bc, g->ldb));
    LT(cublasLtMatrixLayoutCreate(&ld, g->dt, g->M, g->N, g->ldd));
    LT(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t w = wsb;
    uint32_t aa = mk_align_of(g->A), abb = mk_align_of(g->B), ad = mk_align_of(g->D);
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w,
                                            sizeof w));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa,
                                            sizeof aa));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                            &abb, sizeof abb));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ad,
                                            sizeof ad));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ad,
                                            sizeof ad));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, ld, ld, pref, 1, &res, &found);
    if (st == CUBLAS_STATUS_SUCCESS && found < 1)
        st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (st == CUBLAS_STATUS_SUCCESS) {
        ck_assert_uint_le(res.workspaceSize, wsb);
        st = cublasLtMatmul(h, op, &g->alpha, g->A, la, g->B, lb, &g->beta, g->D, ld, g->D, ld,
                            &res.algo, ws, wsb, s);
    }
    LT(cublasLtMatmulPreferenceDestroy(pref));
    LT(cublasLtMatrixLayoutDestroy(la));
    LT(cublasLtMatrixLayoutDestroy(lb));
    LT(cublasLtMatrixLayoutDestroy(ld));
    LT(cublasLtMatmulDescDestroy(op));
    return st;
}

/* ------------------------------------------------------------------ epilogues */

static const cudaDataType_t ab_types[] = {CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_16F,
                                          CUDA_R_16F};
static const cudaDataType_t d_types[] = {CUDA_R_32F, CUDA_R_16BF, CUDA_R_32F, CUDA_R_16F,
                                         CUDA_R_32F};
static const cublasLtEpilogue_t epis[] = {
    CUBLASLT_EPILOGUE_DEFAULT,     CUBLASLT_EPILOGUE_BIAS,        CUBLASLT_EPILOGUE_RELU_BIAS,
    CUBLASLT_EPILOGUE_RELU_AUX_BIAS, CUBLASLT_EPILOGUE_DRELU,     CUBLASLT_EPILOGUE_DRELU_BGRAD,
    CUBLASLT_EPILOGUE_BGRADA,      CUBLASLT_EPILOGUE_BGRADB};
#define NTYPES ((int)(sizeof ab_types / sizeof ab_types[0]))
#define NEPIS ((int)(sizeof epis / sizeof epis[0]))

/* _i: epilogue index * NTYPES * 4 + type * 4 + transposes */
START_TEST(epilogue)
{
    const int e = _i / (NTYPES * 4), ty = _i / 4 % NTYPES, tr = _i % 4;
    const cublasLtEpilogue_t epi = epis[e];
    const cudaDataType_t abt = ab_types[ty], dt = d_types[ty];
    const cublasOperation_t ta = tr & 1 ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = tr & 2 ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int M = 37, N = 29, K = 45;
    const int ar = ta == CUBLAS_OP_N ? M : K, ac = ta == CUBLAS_OP_N ? K : M;
    const int br = tb == CUBLAS_OP_N ? K : N, bc = tb == CUBLAS_OP_N ? N : K;
    const int lda = ar + 3, ldb = br + 5, ldd = M + 2;
    const int relu_in = epi == CUBLASLT_EPILOGUE_DRELU || epi == CUBLASLT_EPILOGUE_DRELU_BGRAD;
    const int has_bias = epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_RELU_BIAS ||
                         epi == CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    const int bgrad = epi == CUBLASLT_EPILOGUE_DRELU_BGRAD || epi == CUBLASLT_EPILOGUE_BGRADA ||
                      epi == CUBLASLT_EPILOGUE_BGRADB;
    const int relu = epi == CUBLASLT_EPILOGUE_RELU_BIAS || epi == CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    const float beta = bgrad || relu_in ? 0.0f : (tr == 1 ? 0.5f : 0.0f); /* one in place */
    rng = 1000 + (uint64_t)_i;
    cublasLtHandle_t h;
    cudaStream_t s;
    LT(cublasLtCreate(&h));
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *hA, *hB, *hD, *hbias = NULL;
    void *A = dev_matrix(abt, ar, ac, lda, &hA), *B = dev_matrix(abt, br, bc, ldb, &hB);
    void *D = dev_matrix(dt, M, N, ldd, &hD); /* C = D: the in-place input */
    const int64_t aux_ld = 128;               /* bits: M = 37 rows fit one unit */
    const size_t vlen = epi == CUBLASLT_EPILOGUE_BGRADB ? (size_t)N : (size_t)M;
    void *bias = NULL, *aux = NULL, *ws;
    unsigned char *hmask = calloc((size_t)N * aux_ld / 8, 1);
    if (has_bias)
        bias = dev_matrix(dt, (int)vlen, 1, (int)vlen, &hbias);
    if (bgrad)
        CU(cudaMalloc(&bias, vlen * esz(dt)));
    if (relu_in || epi == CUBLASLT_EPILOGUE_RELU_AUX_BIAS)
        CU(cudaMalloc(&aux, (size_t)N * aux_ld / 8));
    CU(cudaMalloc(&ws, 1 << 20));
    if (relu_in) {
        /* the mask from a forward RELU_AUX_BIAS over another M x N product,
           read back as the emulation lays it out */
        void *hZ, *hZb, *Z, *Zb;
        Z = dev_matrix(dt, M, N, M, &hZ);
        Zb = dev_matrix(dt, M, 1, M, &hZb);
        void *hX, *X = dev_matrix(dt, K, N, K, &hX);
        void *hW, *W = dev_matrix(dt, M, K, M, &hW);
        mm_t f = {CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, M, K, M, dt, dt,
                  CUBLASLT_EPILOGUE_RELU_AUX_BIAS, W, X, Z, Zb, aux, aux_ld, 1.0f, 0.0f};
        LT(matmul(h, &f, s, ws, 1 << 20));
        CU(cudaMemcpyAsync(hmask, aux, (size_t)N * aux_ld / 8, cudaMemcpyDeviceToHost, s));
        CU(cudaStreamSynchronize(s));
        cudaFree(Z);
        cudaFree(Zb);
        cudaFree(X);
        cudaFree(W);
        free(hZ);
        free(hZb);
        free(hX);
        free(hW);
    }
    mm_t g = {ta, tb, M, N, K, lda, ldb, ldd, abt, dt, epi, A, B, D, bias, aux, aux_ld, 1.0f,
              beta};
    if (epi == CUBLASLT_EPILOGUE_DEFAULT)
        g.alpha = 0.75f;
    cublasStatus_t st = matmul(h, &g, s, ws, 1 << 20);
    ck_assert_int_eq(st, CUBLAS_STATUS_SUCCESS);
    size_t db = (size_t)ldd * N * esz(dt);
    void *out = malloc(db), *vout = malloc(vlen * esz(dt) + 1);
    unsigned char *mout = calloc((size_t)N * aux_ld / 8, 1);
    CU(cudaMemcpyAsync(out, D, db, cudaMemcpyDeviceToHost, s));
    if (bgrad)
        CU(cudaMemcpyAsync(vout, bias, vlen * esz(dt), cudaMemcpyDeviceToHost, s));
    if (epi == CUBLASLT_EPILOGUE_RELU_AUX_BIAS)
        CU(cudaMemcpyAsync(mout, aux, (size_t)N * aux_ld / 8, cudaMemcpyDeviceToHost, s));
    CU(cudaStreamSynchronize(s));
    /* the reference */
    double *vref = calloc(vlen, sizeof(double)), *vtol = calloc(vlen, sizeof(double));
    for (int j = 0; j < N; j++)
        for (int i = 0; i < M; i++) {
            double acc = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                double a = h_get(hA, abt, ta == CUBLAS_OP_N ? (size_t)k * lda + i
                                                            : (size_t)i * lda + k);
                double b = h_get(hB, abt, tb == CUBLAS_OP_N ? (size_t)j * ldb + k
                                                            : (size_t)k * ldb + j);
                acc += a * b;
                mag += fabs(a * b);
            }
            double r = g.alpha * acc;
            if (beta != 0.0f) {
                double c = h_get(hD, dt, (size_t)j * ldd + i);
                r += beta * c;
                mag += fabs(c);
            }
            if (has_bias) {
                double bv = h_get(hbias, dt, (size_t)i);
                r += bv;
                mag += fabs(bv);
            }
            double tol = 1e-5 * mag + 1e-6;
            if (epi == CUBLASLT_EPILOGUE_RELU_AUX_BIAS && fabs(r) > tol) {
                int bit = mout[(size_t)j * aux_ld / 8 + i / 8] >> (i % 8) & 1;
                ck_assert_msg(bit == (r > 0), "mask (%d, %d): %d for %g", i, j, bit, r);
            }
            if (relu)
                r = r > 0 ? r : 0;
            if (relu_in && !(hmask[(size_t)j * aux_ld / 8 + i / 8] >> (i % 8) & 1))
                r = 0;
            if (epi == CUBLASLT_EPILOGUE_DRELU_BGRAD) {
                vref[i] += r;
                vtol[i] += tol;
            }
            double got = h_get(out, dt, (size_t)j * ldd + i);
            ck_assert_msg(fabs(got - r) <= tol + rel_ulp(dt) * fabs(r),
                          "epilogue %d types %d/%d tr %d: D(%d, %d) = %.9g, expected %.9g", epi,
                          abt, dt, tr, i, j, got, r);
        }
    if (epi == CUBLASLT_EPILOGUE_BGRADA || epi == CUBLASLT_EPILOGUE_BGRADB) {
        const int a_side = epi == CUBLASLT_EPILOGUE_BGRADA;
        for (size_t v = 0; v < vlen; v++)
            for (int k = 0; k < K; k++) {
                double x = a_side ? h_get(hA, abt, ta == CUBLAS_OP_N ? (size_t)k * lda + v
                                                                     : v * lda + (size_t)k)
                                  : h_get(hB, abt, tb == CUBLAS_OP_N ? v * ldb + (size_t)k
                                                                     : (size_t)k * ldb + v);
                vref[v] += x;
                vtol[v] += 1e-5 * fabs(x);
            }
    }
    if (bgrad)
        for (size_t v = 0; v < vlen; v++) {
            double got = h_get(vout, dt, v);
            ck_assert_msg(fabs(got - vref[v]) <= vtol[v] + 1e-6 + rel_ulp(dt) * fabs(vref[v]),
                          "epilogue %d: bias gradient[%zu] = %.9g, expected %.9g", epi, v, got,
                          vref[v]);
        }
    cudaFree(A);
    cudaFree(B);
    cudaFree(D);
    cudaFree(bias);
    cudaFree(aux);
    cudaFree(ws);
    CU(cudaStreamDestroy(s));
    LT(cublasLtDestroy(h));
    free(hA);
    free(hB);
    free(hD);
    free(hbias);
    free(hmask);
    free(mout);
    free(out);
    free(vout);
    free(vref);
    free(vtol);
}
END_TEST

/* ------------------------------------------------------------------ refusals */

typedef struct {
    cublasLtHandle_t h;
    cudaStream_t s;
    float *A, *B, *D, *bias, *ws;
    unsigned char *aux;
} fx_t;

static void fx_open(fx_t *f)
{
    LT(cublasLtCreate(&f->h));
    CU(cudaStreamCreateWithFlags(&f->s, cudaStreamNonBlocking));
    CU(cudaMalloc((void **)&f->A, 256 * 256 * 4));
    CU(cudaMalloc((void **)&f->B, 256 * 256 * 4));
    CU(cudaMalloc((void **)&f->D, 256 * 256 * 4));
    CU(cudaMalloc((void **)&f->bias, 256 * 4));
    CU(cudaMalloc((void **)&f->aux, 256 * 64));
    CU(cudaMalloc((void **)&f->ws, 1 << 20));
    CU(cudaMemset(f->A, 0, 256 * 256 * 4));
    CU(cudaMemset(f->B, 0, 256 * 256 * 4));
    CU(cudaMemset(f->bias, 0, 256 * 4));
}

static void fx_close(fx_t *f)
{
    CU(cudaStreamSynchronize(f->s));
    cudaFree(f->A);
    cudaFree(f->B);
    cudaFree(f->D);
    cudaFree(f->bias);
    cudaFree(f->aux);
    cudaFree(f->ws);
    CU(cudaStreamDestroy(f->s));
    LT(cublasLtDestroy(f->h));
}

static mm_t plain(fx_t *f, int M, int N, int K)
{
    mm_t g = {CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, M, K, M, CUDA_R_32F, CUDA_R_32F,
              CUBLASLT_EPILOGUE_DEFAULT, f->A, f->B, f->D, NULL, NULL, 0, 1.0f, 0.0f};
    return g;
}

START_TEST(refusals)
{
    fx_t f;
    fx_open(&f);
    mm_t g = plain(&f, 64, 32, 48);
    LT(matmul(f.h, &g, f.s, f.ws, 1 << 20));
    /* the ReLU mask's ld: a multiple of 128 bits, at least the rows */
    g = plain(&f, 64, 32, 48);
    g.epi = CUBLASLT_EPILOGUE_RELU_AUX_BIAS;
    g.bias = f.bias;
    g.aux = f.aux;
    g.aux_ld = 100;
    ck_assert_int_ne(matmul(f.h, &g, f.s, f.ws, 1 << 20), CUBLAS_STATUS_SUCCESS);
    g.M = g.lda = g.ldd = 200;
    g.aux_ld = 128;
    ck_assert_int_ne(matmul(f.h, &g, f.s, f.ws, 1 << 20), CUBLAS_STATUS_SUCCESS);
    g.aux_ld = 256;
    LT(matmul(f.h, &g, f.s, f.ws, 1 << 20));
    /* GELU: cuBLASLt's, not emulated */
    g = plain(&f, 64, 32, 48);
    g.epi = CUBLASLT_EPILOGUE_GELU_BIAS;
    g.bias = f.bias;
    ck_assert_int_eq(matmul(f.h, &g, f.s, f.ws, 1 << 20), CUBLAS_STATUS_NOT_SUPPORTED);
    /* a leading dimension below the rows */
    g = plain(&f, 64, 32, 48);
    g.lda = 63;
    ck_assert_int_eq(matmul(f.h, &g, f.s, f.ws, 1 << 20), CUBLAS_STATUS_INVALID_VALUE);
    /* an A pointer aligned to 4 bytes, the prefs say so: fine */
    g = plain(&f, 64, 32, 48);
    g.A = f.A + 1;
    LT(matmul(f.h, &g, f.s, f.ws, 1 << 20));
    /* descriptors of our own: algorithms used out of their problem */
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld, lbad;
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 64, 48, 64));
    LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 48, 32, 48));
    LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, 64, 32, 64));
    LT(cublasLtMatmulPreferenceCreate(&pref));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    /* no workspace allowed (the default) still finds one */
    LT(cublasLtMatmulAlgoGetHeuristic(f.h, op, la, lb, ld, ld, pref, 1, &res, &found));
    ck_assert_int_eq(found, 1);
    ck_assert_uint_eq(res.workspaceSize, 0);
    /* the algorithm was chosen for 256-byte alignment: a 4-aligned A is refused */
    const float one = 1, zero = 0;
    ck_assert_int_eq(cublasLtMatmul(f.h, op, &one, f.A + 1, la, f.B, lb, &zero, f.D, ld, f.D, ld,
                                    &res.algo, f.ws, 1 << 20, f.s),
                     CUBLAS_STATUS_INVALID_VALUE);
    /* ... with another epilogue than it was chosen for */
    uint32_t e = CUBLASLT_EPILOGUE_BIAS;
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &f.bias,
                                      sizeof f.bias));
    ck_assert_int_eq(cublasLtMatmul(f.h, op, &one, f.A, la, f.B, lb, &zero, f.D, ld, f.D, ld,
                                    &res.algo, f.ws, 1 << 20, f.s),
                     CUBLAS_STATUS_INVALID_VALUE);
    /* an alignment preference below the element */
    uint32_t two = 2;
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                            &two, sizeof two));
    ck_assert_int_ne(cublasLtMatmulAlgoGetHeuristic(f.h, op, la, lb, ld, ld, pref, 1, &res,
                                                    &found) == CUBLAS_STATUS_SUCCESS &&
                         found > 0,
                     1);
    /* shapes that do not make a product: K 47 against 48 */
    LT(cublasLtMatrixLayoutCreate(&lbad, CUDA_R_32F, 47, 32, 48));
    ck_assert_int_eq(cublasLtMatmulAlgoGetHeuristic(f.h, op, la, lbad, ld, ld, pref, 1, &res,
                                                    &found),
                     CUBLAS_STATUS_INVALID_VALUE);
    ck_assert_int_eq(cublasLtMatmul(f.h, op, &one, f.A, la, f.B, lbad, &zero, f.D, ld, f.D, ld,
                                    NULL, f.ws, 1 << 20, f.s),
                     CUBLAS_STATUS_INVALID_VALUE);
    /* attributes: unknown, wrong size, bad value */
    int8_t fast = 1;
    ck_assert_int_eq(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                                    sizeof fast),
                     CUBLAS_STATUS_INVALID_VALUE);
    int64_t big = 1;
    ck_assert_int_eq(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &big,
                                                    sizeof big),
                     CUBLAS_STATUS_INVALID_VALUE);
    int32_t t7 = 7;
    ck_assert_int_eq(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t7,
                                                    sizeof t7),
                     CUBLAS_STATUS_INVALID_VALUE);
    uint32_t e99 = 99;
    ck_assert_int_eq(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &e99,
                                                    sizeof e99),
                     CUBLAS_STATUS_INVALID_VALUE);
    ck_assert_int_eq(cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)77,
                                                          &two, sizeof two),
                     CUBLAS_STATUS_INVALID_VALUE);
    /* a compute type not emulated */
    cublasLtMatmulDesc_t op16;
    LT(cublasLtMatmulDescCreate(&op16, CUBLAS_COMPUTE_16F, CUDA_R_16F));
    ck_assert_int_eq(cublasLtMatmulAlgoGetHeuristic(f.h, op16, la, lb, ld, ld, pref, 1, &res,
                                                    &found),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    ck_assert_int_eq(cublasLtMatmulAlgoGetHeuristic(f.h, op, la, lb, ld, ld, pref, 0, &res,
                                                    &found),
                     CUBLAS_STATUS_INVALID_VALUE);
    LT(cublasLtMatmulDescDestroy(op16));
    LT(cublasLtMatmulDescDestroy(op));
    LT(cublasLtMatrixLayoutDestroy(la));
    LT(cublasLtMatrixLayoutDestroy(lb));
    LT(cublasLtMatrixLayoutDestroy(ld));
    LT(cublasLtMatrixLayoutDestroy(lbad));
    LT(cublasLtMatmulPreferenceDestroy(pref));
    fx_close(&f);
}
END_TEST

/* ------------------------------------------------------------------ violations */

/* each must end its process with EMU_VIOLATION_EXIT (the sticky error
 * left: no cleanup) */
START_TEST(host_operand)
{
    fx_t f;
    fx_open(&f);
    mm_t g = plain(&f, 64, 32, 48);
    static float host[64 * 48];
    g.A = host;
    ck_assert_int_ne(matmul(f.h, &g, f.s, f.ws, 1 << 20), CUBLAS_STATUS_SUCCESS);
}
END_TEST

START_TEST(past_the_end)
{
    fx_t f;
    fx_open(&f);
    mm_t g = plain(&f, 256, 257, 48); /* D: 256 x 257 floats in 256 x 256 */
    g.B = f.B;
    g.K = 16;
    g.ldb = 16;
    ck_assert_int_ne(matmul(f.h, &g, f.s, f.ws, 1 << 20), CUBLAS_STATUS_SUCCESS);
}
END_TEST

START_TEST(aux_missing)
{
    fx_t f;
    fx_open(&f);
    mm_t g = plain(&f, 64, 32, 48);
    g.epi = CUBLASLT_EPILOGUE_DRELU_BGRAD;
    g.bias = f.bias;
    g.aux_ld = 128; /* and no aux pointer */
    ck_assert_int_ne(matmul(f.h, &g, f.s, f.ws, 1 << 20), CUBLAS_STATUS_SUCCESS);
}
END_TEST

START_TEST(destroyed_desc)
{
    fx_t f;
    fx_open(&f);
    cublasLtMatmulDesc_t op;
    LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatmulDescDestroy(op));
    int32_t t = CUBLAS_OP_T;
    ck_assert_int_ne(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t),
                     CUBLAS_STATUS_SUCCESS);
}
END_TEST

START_TEST(output_overlaps)
{
    fx_t f;
    fx_open(&f);
    mm_t g = plain(&f, 64, 32, 48);
    g.D = f.A; /* D over A */
    ck_assert_int_ne(matmul(f.h, &g, f.s, f.ws, 1 << 20), CUBLAS_STATUS_SUCCESS);
}
END_TEST

START_TEST(alpha_on_device)
{
    fx_t f;
    fx_open(&f);
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 8, 8, 8));
    LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 8, 8, 8));
    LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, 8, 8, 8));
    const float zero = 0;
    ck_assert_int_ne(cublasLtMatmul(f.h, op, f.bias, f.A, la, f.B, lb, &zero, f.D, ld, f.D, ld,
                                    NULL, f.ws, 1 << 20, f.s),
                     CUBLAS_STATUS_SUCCESS);
}
END_TEST

/* ------------------------------------------------------------------ the model's kernels */

START_TEST(kernel_roundings)
{
    cudaStream_t s;
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    /* float -> bf16 / fp16: ties to even, NaN canonical, infinities, -0 */
    const float in[] = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -0.0f, NAN, INFINITY,
                        3.4e38f, 1.0f + 1.0f / 2048, 65520.0f, 1e-8f};
    const uint16_t bf[] = {0x3f80, 0x3f82, 0x8000, 0x7fff, 0x7f80, 0x7f80, 0x3f80, 0x4780, 0x322c};
    const uint16_t hf[] = {0x3c04, 0x3c0c, 0x8000, 0x7fff, 0x7c00, 0x7c00, 0x3c00, 0x7c00, 0x0000};
    const size_t n = sizeof in / sizeof in[0];
    float *din;
    uint16_t *dout, out[16];
    CU(cudaMalloc((void **)&din, sizeof in));
    CU(cudaMalloc((void **)&dout, n * 2));
    CU(cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice));
    CU(mk_cast(din, dout, CUDA_R_16BF, n, s));
    CU(cudaMemcpyAsync(out, dout, n * 2, cudaMemcpyDeviceToHost, s));
    CU(cudaStreamSynchronize(s));
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(out[i] == bf[i], "bf16(%g) = 0x%04x, expected 0x%04x", in[i], out[i], bf[i]);
    CU(mk_cast(din, dout, CUDA_R_16F, n, s));
    CU(cudaMemcpyAsync(out, dout, n * 2, cudaMemcpyDeviceToHost, s));
    CU(cudaStreamSynchronize(s));
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(out[i] == hf[i], "fp16(%g) = 0x%04x, expected 0x%04x", in[i], out[i], hf[i]);
    ck_assert_int_eq(mk_cast(din, dout, CUDA_R_8I, n, s), cudaErrorInvalidValue);
    /* the unfused bias gradient: column sums in row order, the ReLU zeroing */
    float d[6] = {1, 2, 3, 4, 5, 6}, act[6] = {1, 0, 1, -1, NAN, 1}, db[3] = {10, 20, 30};
    float *dd, *dact, *ddb;
    CU(cudaMalloc((void **)&dd, sizeof d));
    CU(cudaMalloc((void **)&dact, sizeof act));
    CU(cudaMalloc((void **)&ddb, sizeof db));
    CU(cudaMemcpy(dd, d, sizeof d, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dact, act, sizeof act, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(ddb, db, sizeof db, cudaMemcpyHostToDevice));
    CU(mk_bias_grad(dd, dact, CUDA_R_32F, 3, 2, ddb, s)); /* d: 2 rows of 3 */
    CU(cudaMemcpyAsync(d, dd, sizeof d, cudaMemcpyDeviceToHost, s));
    CU(cudaMemcpyAsync(db, ddb, sizeof db, cudaMemcpyDeviceToHost, s));
    CU(cudaStreamSynchronize(s));
    const float dwant[6] = {1, 0, 3, 0, 0, 6}, dbwant[3] = {11, 20, 39};
    for (int i = 0; i < 6; i++)
        ck_assert_float_eq(d[i], dwant[i]);
    for (int i = 0; i < 3; i++)
        ck_assert_float_eq(db[i], dbwant[i]);
    cudaFree(din);
    cudaFree(dout);
    cudaFree(dd);
    cudaFree(dact);
    cudaFree(ddb);
    CU(cudaStreamDestroy(s));
}
END_TEST

static Suite *emu_lt_suite(int forking)
{
    Suite *s = suite_create("emu_lt");
    TCase *tc = tcase_create("epilogues");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, epilogue, 0, NEPIS * NTYPES * 4);
    suite_add_tcase(s, tc);
    tc = tcase_create("refusals");
    tcase_add_test(tc, refusals);
    suite_add_tcase(s, tc);
    tc = tcase_create("kernels");
    tcase_add_test(tc, kernel_roundings);
    suite_add_tcase(s, tc);
    if (forking) { /* a violation ends the process: only in a child of its own */
        tc = tcase_create("violations");
        tcase_add_exit_test(tc, host_operand, EMU_VIOLATION_EXIT);
        tcase_add_exit_test(tc, past_the_end, EMU_VIOLATION_EXIT);
        tcase_add_exit_test(tc, aux_missing, EMU_VIOLATION_EXIT);
        tcase_add_exit_test(tc, destroyed_desc, EMU_VIOLATION_EXIT);
        tcase_add_exit_test(tc, output_overlaps, EMU_VIOLATION_EXIT);
        tcase_add_exit_test(tc, alpha_on_device, EMU_VIOLATION_EXIT);
        suite_add_tcase(s, tc);
    }
    return s;
}

int main(void)
{
    SRunner *probe = srunner_create(NULL);
    const int forking = srunner_fork_status(probe) != CK_NOFORK;
    srunner_free(probe);
    if (!forking)
        fprintf(stderr, "check_emu_lt: CK_FORK=no: the violation cases are left out (each "
                        "needs a process of its own)\n");
    SRunner *sr = srunner_create(emu_lt_suite(forking));
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf;
}
