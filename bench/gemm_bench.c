/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * gemm_bench.c -- time single-precision GEMM the way ddpc's CPU MLP trainer
 * calls it, through the CBLAS interface (or oneDNN's dnnl_sgemm with
 * -DGB_DNNL), and check every result against a naive triple loop.
 *
 * Standalone: needs no BLAS header. The CBLAS prototype below is the standard
 * one (enum values fixed by the CBLAS spec), so one source links against any
 * libblas.so.3 / libopenblas.so.0 / libblis.so.4 given on the command line:
 *
 *   cc -O2 -o gemm_bench gemm_bench.c /usr/lib/.../libopenblas.so.0 \
 *      -Wl,-rpath,/usr/lib/.../openblas-pthread -lm -ldl
 *   cc -O2 -DGB_DNNL -o gemm_bench_dnnl gemm_bench.c -ldnnl -lm -ldl
 *
 * Library introspection (which file really got loaded, OpenBLAS core name,
 * BLIS arch, oneDNN ISA) is done with dlsym/dladdr at run time so the same
 * source serves every backend.
 *
 * Shapes: MLP 784 -> 1024 -> 1024 -> 10 with weights W[in][out] row-major.
 * For each layer (K_in, N_out) and batch B:
 *   fwd   NN  Y[B,out]   = X[B,in]    * W[in,out]          M=B   N=out K=in
 *   bwd-d NT  dX[B,in]   = dY[B,out]  * W[in,out]^T        M=B   N=in  K=out
 *   bwd-w TN  dW[in,out] += X[B,in]^T * dY[B,out]  (beta=1) M=in  N=out K=B
 *
 * -L picks the layout, the same FLOP in other transposes:
 *   bench   (default) as above: W (in, out), activations (B, features)
 *   torch   W (out, in) as PyTorch's and the trainer's, activations (B, features):
 *           fwd NT (M=B N=out K=in), bwd_d NN (M=B N=in K=out), bwd_w TN (M=out N=in K=B)
 *   feature W (out, in), activations stored (features, B):
 *           fwd NN (M=out N=B K=in), bwd_d TN (M=in N=B K=out), bwd_w NT (M=out N=in K=B)
 *
 * Usage: gemm_bench [-l label] [-L layout] [-r reps] [-b batches] [-t min_ms] [-T threads] [-q]
 *   -r reps      timed repetitions per shape (median reported), default 7
 *   -b list      comma-separated batch sizes, default 64,128,256
 *   -t ms        minimum duration of one repetition (calls are looped), default 20
 *   -T n         call openblas_set_num_threads(n)/bli_thread_set_num_threads(n)
 *                when present (default 1); 0 leaves the library's own choice
 *                (environment variables still apply)
 * Each repetition is timed twice: wall clock, and process CPU time (all
 * threads). On a shared machine the CPU-time rate is the robust one: time the
 * process spent preempted does not count, while any extra threads the library
 * spins up still do (so it measures what one core buys).
 * Output: '#' info lines, then
 *   R label op trans M N K wall_med wall_min wall_max cpu_med err/bound normwise ok|FAIL
 *     (GFLOP/s; medians over the repetitions)
 *   S label step_gflops=<wall> step_gflops_cpu=<cpu> geomean=<wall> geomean_cpu=<cpu>
 *     step_batch=N cpu_wall=<CPU time / wall time while timing> shapes=N fails=N
 *   step_*: flops of one training step (all shapes at batch 128, or the first
 *   batch given) over the sum of its median times; geomean_*: geometric mean of
 *   the per-shape medians over every shape. Exit 1 if any check fails.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef GB_DNNL
typedef int64_t dnnl_dim_t;
typedef int dnnl_status_t;
extern dnnl_status_t dnnl_sgemm(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                dnnl_dim_t K, float alpha, const float *A, dnnl_dim_t lda,
                                const float *B, dnnl_dim_t ldb, float beta, float *C,
                                dnnl_dim_t ldc);
#define GB_SYM ((void *)dnnl_sgemm)
#else
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };
extern void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta,
                        enum CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                        const float *A, int lda, const float *B, int ldb, float beta,
                        float *C, int ldc);
#define GB_SYM ((void *)cblas_sgemm)
#endif

static int gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                const float *B, int ldb, float beta, float *C, int ldc)
{
#ifdef GB_DNNL
    return dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta,
                      C, ldc);
#else
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return 0;
#endif
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cputime(void) /* CPU time of the whole process, all threads */
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static float *falloc(size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, (n ? n : 1) * sizeof(float))) {
        perror("posix_memalign");
        exit(2);
    }
    return p;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Row-major element (i,j) of op(X) where X is stored with leading dim ld. */
#define OPX(X, t, i, j, ld) ((t) ? (X)[(size_t)(j) * (ld) + (i)] : (X)[(size_t)(i) * (ld) + (j)])

/* Naive reference in double; returns max over elements of
 * |C - Cref| / (|alpha| sum_k |a_ik||b_kj| + |beta||C0_ij|), the quantity that
 * the standard error bound gamma_K ~ K*u bounds. Also the normwise error
 * ||C - Cref||_F / ||Cref||_F (reported only). */
static double check(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, const float *C0, const float *C,
                    int ldc, double *normwise)
{
    double worst = 0, num2 = 0, den2 = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0, sa = 0;
            for (int k = 0; k < K; k++) {
                double a = OPX(A, ta, i, k, lda), b = OPX(B, tb, k, j, ldb);
                s += a * b;
                sa += fabs(a * b);
            }
            double c0 = C0[(size_t)i * ldc + j];
            double ref = alpha * s + beta * c0;
            double bound = fabs(alpha) * sa + fabs(beta) * fabs(c0) + DBL_MIN;
            double err = fabs((double)C[(size_t)i * ldc + j] - ref);
            if (!(err == err)) err = INFINITY; /* NaN */
            if (err / bound > worst) worst = err / bound;
            num2 += err * err;
            den2 += ref * ref;
        }
    *normwise = sqrt(num2 / (den2 + DBL_MIN));
    return worst;
}

static void describe_library(const char *label)
{
    Dl_info di;
    printf("# label=%s\n", label);
    if (dladdr(GB_SYM, &di) && di.dli_fname) {
        char rp[4096];
        const char *r = realpath(di.dli_fname, rp);
        printf("# sgemm_from=%s (%s)\n", di.dli_fname, r ? r : "?");
    }
    /* OpenBLAS */
    char *(*corename)(void) = (char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_corename");
    char *(*config)(void) = (char *(*)(void))dlsym(RTLD_DEFAULT, "openblas_get_config");
    int (*ob_nth)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
    if (corename) printf("# openblas_corename=%s\n", corename());
    if (config) printf("# openblas_config=%s\n", config());
    if (ob_nth) printf("# openblas_num_threads=%d\n", ob_nth());
    /* BLIS */
    int (*arch_id)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "bli_arch_query_id");
    const char *(*arch_str)(int) = (const char *(*)(int))dlsym(RTLD_DEFAULT, "bli_arch_string");
    const char *(*bli_ver)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT,
                                                              "bli_info_get_version_str");
    long (*bli_nth)(void) = (long (*)(void))dlsym(RTLD_DEFAULT, "bli_thread_get_num_threads");
    if (arch_id) {
        int id = arch_id();
        printf("# blis_arch_id=%d blis_arch=%s\n", id, arch_str ? arch_str(id) : "?");
    }
    if (bli_ver) printf("# blis_version=%s\n", bli_ver());
    if (bli_nth) printf("# blis_num_threads=%ld\n", bli_nth());
    /* oneDNN */
    struct dnnl_ver { int major, minor, patch; const char *hash; unsigned cpu_rt, gpu_rt; };
    const struct dnnl_ver *(*dv)(void) =
        (const struct dnnl_ver *(*)(void))dlsym(RTLD_DEFAULT, "dnnl_version");
    int (*isa)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "dnnl_get_effective_cpu_isa");
    if (dv) {
        const struct dnnl_ver *v = dv();
        printf("# dnnl_version=%d.%d.%d cpu_runtime=0x%x\n", v->major, v->minor, v->patch,
               v->cpu_rt);
    }
    if (isa) {
        int i = isa();
        const char *s = i == 0x7 ? "avx2" : i == 0x27 ? "avx512_core" : i == 0x67 ?
            "avx512_core_vnni" : i == 0xe7 ? "avx512_core_bf16" : i == 0x3e7 ?
            "avx512_core_amx" : i == 0x407 ? "avx2_vnni" : i == 0x3 ? "avx" : "other";
        printf("# dnnl_effective_isa=0x%x (%s)\n", i, s);
    }
}

static void set_threads(int n)
{
    void (*ob)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "openblas_set_num_threads");
    void (*bl)(long) = (void (*)(long))dlsym(RTLD_DEFAULT, "bli_thread_set_num_threads");
    if (n <= 0) return;
    if (ob) ob(n);
    if (bl) bl(n);
}

int main(int argc, char **argv)
{
    const char *label = "cblas";
    int reps = 7, quiet = 0, threads = 1, layout = 0; /* 0 bench, 1 torch, 2 feature */
    double min_ms = 20;
    int batches[16], nb = 0;
    char bl[256] = "64,128,256";
    int opt;
    while ((opt = getopt(argc, argv, "l:L:r:b:t:T:q")) != -1) {
        switch (opt) {
        case 'l': label = optarg; break;
        case 'L':
            layout = !strcmp(optarg, "bench") ? 0 : !strcmp(optarg, "torch") ? 1
                     : !strcmp(optarg, "feature") ? 2 : -1;
            if (layout < 0) {
                fprintf(stderr, "%s: -L %s: expected bench, torch or feature\n", argv[0], optarg);
                return 2;
            }
            break;
        case 'r': reps = atoi(optarg); break;
        case 'b': snprintf(bl, sizeof bl, "%s", optarg); break;
        case 't': min_ms = atof(optarg); break;
        case 'T': threads = atoi(optarg); break;
        case 'q': quiet = 1; break;
        default:
            fprintf(stderr, "usage: %s [-l label] [-L bench|torch|feature] [-r reps] [-b 64,128,256] [-t ms] [-T n] [-q]\n",
                    argv[0]);
            return 2;
        }
    }
    if (reps < 1 || reps > 101) reps = 7;
    for (char *t = strtok(bl, ","); t && nb < 16; t = strtok(NULL, ","))
        if (atoi(t) > 0) batches[nb++] = atoi(t);
    if (!nb) batches[nb++] = 128;

    set_threads(threads);
    { /* one tiny call so libraries initialise before we ask what they picked */
        float a = 1, b = 1, c = 0;
        gemm(0, 0, 1, 1, 1, 1.0f, &a, 1, &b, 1, 0.0f, &c, 1);
        if (c != 1.0f) { printf("# FAIL 1x1x1 gemm gave %g\n", c); return 1; }
    }
    describe_library(label);
    printf("# layout=%s\n", layout == 0 ? "bench" : layout == 1 ? "torch" : "feature");
    if (!quiet)
        printf("# %-6s %4s %5s %5s %5s %9s %9s %9s %9s %9s %9s\n", "op", "tr", "M", "N", "K",
               "wall_med", "wall_min", "wall_max", "cpu_med", "err/bnd", "normwise");

    static const int layers[][2] = {{784, 1024}, {1024, 1024}, {1024, 10}};
    const int nl = sizeof layers / sizeof layers[0];
    int fails = 0, nshapes = 0;
    double log_sum = 0, log_sum_c = 0, step_flops = 0, step_time = 0, step_ctime = 0;
    int step_batch = 128, have128 = 0;
    for (int b = 0; b < nb; b++) have128 |= batches[b] == 128;
    if (!have128) step_batch = batches[0];
    double *samples = malloc(sizeof(double) * reps), *csamples = malloc(sizeof(double) * reps);
    double cpu = 0, wall = 0; /* over the timed repetitions only */

    for (int bi = 0; bi < nb; bi++)
        for (int li = 0; li < nl; li++)
            for (int op = 0; op < 3; op++) {
                int B = batches[bi], in = layers[li][0], out = layers[li][1];
                int ta, tb, M, N, K;
                float beta;
                const char *name;
                if (op == 0) { name = "fwd"; ta = 0; tb = 0; M = B; N = out; K = in; beta = 0; }
                else if (op == 1) { name = "bwd_d"; ta = 0; tb = 1; M = B; N = in; K = out; beta = 0; }
                else { name = "bwd_w"; ta = 1; tb = 0; M = in; N = out; K = B; beta = 1; }
                if (layout == 1) { /* the transposes of W (out, in) */
                    if (op == 0) tb = 1;
                    else if (op == 1) tb = 0;
                    else { M = out; N = in; }
                } else if (layout == 2) { /* activations (features, B) */
                    if (op == 0) { ta = 0; tb = 0; M = out; N = B; K = in; }
                    else if (op == 1) { ta = 1; tb = 0; M = in; N = B; K = out; }
                    else { ta = 0; tb = 1; M = out; N = in; K = B; }
                }
                /* stored shapes (row-major, tight leading dims) */
                int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
                float *A = falloc((size_t)ar * ac), *Bm = falloc((size_t)br * bc);
                float *C = falloc((size_t)M * N), *C0 = falloc((size_t)M * N);
                for (size_t i = 0; i < (size_t)ar * ac; i++) A[i] = frand();
                for (size_t i = 0; i < (size_t)br * bc; i++) Bm[i] = frand();
                for (size_t i = 0; i < (size_t)M * N; i++) C0[i] = C[i] = frand();
                const float alpha = 1.0f;

                /* correctness first, on a fresh C */
                if (gemm(ta, tb, M, N, K, alpha, A, ac, Bm, bc, beta, C, N)) {
                    printf("# FAIL %s: backend returned an error\n", name);
                    fails++;
                }
                double nw, eb = check(ta, tb, M, N, K, alpha, A, ac, Bm, bc, beta, C0, C, N, &nw);
                /* The worst-case bound gamma_K = K*u/(1-K*u) on err/(|A||B|+|beta C0|) is
                 * too loose to catch one wrong element (a 1e-3 relative error in a single
                 * entry stays under it at K=1024). Rounding errors of sums of K terms grow
                 * like sqrt(K)*u in practice; 2*sqrt(K)*FLT_EPSILON = 4*sqrt(K)*u. Every
                 * library measured here (OpenBLAS, BLIS, oneDNN, ATLAS, netlib) stays
                 * under 6u, 10x or more below this. */
                double tol = 2.0 * sqrt((double)K) * (double)FLT_EPSILON;
                int ok = eb <= tol;
                if (!ok) fails++;

                /* calibrate inner loop so one repetition lasts >= min_ms */
                double flops = 2.0 * M * N * K;
                int inner = 1;
                for (;;) {
                    double t0 = now();
                    for (int i = 0; i < inner; i++)
                        gemm(ta, tb, M, N, K, alpha, A, ac, Bm, bc, beta, C, N);
                    double dt = now() - t0;
                    if (dt * 1e3 >= min_ms || inner >= (1 << 20)) break;
                    inner *= dt * 1e3 < min_ms / 8 ? 8 : 2;
                }
                double c0 = cputime(), w0 = now();
                for (int r = 0; r < reps; r++) {
                    double c1 = cputime(), t0 = now();
                    for (int i = 0; i < inner; i++)
                        gemm(ta, tb, M, N, K, alpha, A, ac, Bm, bc, beta, C, N);
                    samples[r] = (now() - t0) / inner;
                    csamples[r] = (cputime() - c1) / inner;
                    if (csamples[r] <= 0) csamples[r] = 1e-12;
                }
                cpu += cputime() - c0;
                wall += now() - w0;
                qsort(samples, reps, sizeof(double), cmp_d);
                qsort(csamples, reps, sizeof(double), cmp_d);
                double med = reps & 1 ? samples[reps / 2]
                                      : 0.5 * (samples[reps / 2 - 1] + samples[reps / 2]);
                double cmed = reps & 1 ? csamples[reps / 2]
                                       : 0.5 * (csamples[reps / 2 - 1] + csamples[reps / 2]);
                double gmed = flops / med * 1e-9, gmin = flops / samples[reps - 1] * 1e-9,
                       gmax = flops / samples[0] * 1e-9;
                double gcpu = flops / cmed * 1e-9;
                printf("R %s %-6s %c%c %5d %5d %5d %9.2f %9.2f %9.2f %9.2f %9.2e %9.2e %s\n",
                       label, name, ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, gmed, gmin, gmax,
                       gcpu, eb, nw, ok ? "ok" : "FAIL");
                log_sum += log(gmed);
                log_sum_c += log(gcpu);
                nshapes++;
                if (B == step_batch) { step_flops += flops; step_time += med; step_ctime += cmed; }
                free(A); free(Bm); free(C); free(C0);
            }
    printf("S %s step_gflops=%.2f step_gflops_cpu=%.2f geomean=%.2f geomean_cpu=%.2f "
           "step_batch=%d cpu_wall=%.2f shapes=%d fails=%d\n",
           label, step_flops / step_time * 1e-9, step_flops / step_ctime * 1e-9,
           exp(log_sum / nshapes), exp(log_sum_c / nshapes), step_batch, cpu / wall, nshapes,
           fails);
    free(samples);
    free(csamples);
    return fails ? 1 : 0;
}
