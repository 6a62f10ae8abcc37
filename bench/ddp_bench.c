/* SPDX-License-Identifier: BSD-3-Clause */
/* ddp_bench.c: benchmarks of the DDP engine (issue 3). Not a test: it times,
 * it does not check numbers. bench/ddp_bench.sh runs every mode and sums up.
 *
 *   ddp_bench allreduce [-s MiB,MiB,..] [-r reps] [-w warmups] [-t ms]
 *     One float32 parameter of each size in one bucket; an engine step
 *     (grad_ready + ddpc_ddp_wait, which averages) against a raw
 *     MPI_Allreduce(MPI_IN_PLACE, MPI_SUM) of the same bytes from the main
 *     thread (which does not divide), interleaved in the same run. Between the
 *     two, the steps that tell where a gap comes from: raw + the /N pass on
 *     the main thread, and ddpc_allreduce SUM / AVG through the progress thread.
 *     Then the reduction with the update: raw + ddpc_optim_step, the engine
 *     + ddpc_optim_step, and the engine folding the 1/N into that step.
 *   ddp_bench overlap [-L layers] [-H width] [-B batch] [-b bucket MiB] [-z 0|1] [-r ..] [-w ..]
 *     A synthetic deep MLP step (sgemm forward; backward from the last layer,
 *     grad_ready for each weight and bias as soon as computed; ddpc_ddp_wait;
 *     SGD via ddpc_optim_step): compute only (sync off), overlapped
 *     (overlap=1), reduction after backward (overlap=0), the reduction alone,
 *     and the design without a progress thread: MPI_Iallreduce from the main
 *     thread at each bucket's ready time, MPI_Waitall at the end (nb), and the
 *     same with an MPI_Testall after each layer to let MPI progress (nbtest).
 *     -z 1: compute off the CPU, as on a GPU: each sgemm is replaced by a
 *     sleep as long as it took (measured at start), so the core is free for
 *     communication; what each design can hide when a core is spare.
 *   ddp_bench mpi single|funneled|serialized|multiple [-s ..] [-r ..] [-t ..]
 *     Raw MPI_Allreduce only, MPI initialized here at that thread level: what
 *     MPI_THREAD_MULTIPLE costs MPICH by itself (ddpc itself asks for MULTIPLE).
 *
 * Every time is the slowest rank's, per repetition (a repetition: barrier, then
 * enough back-to-back operations to last -t ms); variants are interleaved
 * repetition by repetition in a rotating order, and medians are reported.
 * Output: '#' info lines and one 'R' line (key=value) per measurement.
 * BLAS: run with OPENBLAS_NUM_THREADS=1 (one core per rank); the script does. */
#include "ddpc.h"

#include <cblas.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_rank, g_size;
static MPI_Comm g_comm = MPI_COMM_NULL; /* the bench's own, for raw MPI and barriers */

#define DIE(...)                                                                               \
    do {                                                                                       \
        fprintf(stderr, "ddp_bench[rank %d]: ", g_rank);                                       \
        fprintf(stderr, __VA_ARGS__);                                                          \
        fprintf(stderr, "\n");                                                                 \
        MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
    } while (0)
#define CK(call)                                                                               \
    do {                                                                                       \
        ddpc_status_t st_ = (call);                                                            \
        if (st_ != DDPC_OK)                                                                    \
            DIE("%s: %s (%s)", #call, ddpc_strerror(st_), g_rt ? ddpc_last_error(g_rt) : "");  \
    } while (0)
#define CKD(d, call)                                                                           \
    do {                                                                                       \
        ddpc_status_t st_ = (call);                                                            \
        if (st_ != DDPC_OK)                                                                    \
            DIE("%s: %s (%s)", #call, ddpc_strerror(st_), ddpc_ddp_last_error(d));             \
    } while (0)

static ddpc_t g_rt;

static double clock_s(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median, min and max of n values (v is left as it was) */
static double median(const double *v, int n, double *lo, double *hi)
{
    double *s = malloc((size_t)n * sizeof *s);
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_d);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    if (lo)
        *lo = s[0];
    if (hi)
        *hi = s[n - 1];
    free(s);
    return m;
}

/* every rank's per-repetition times -> the slowest rank's, on every rank */
static void max_over_ranks(double *t, int n)
{
    MPI_Allreduce(MPI_IN_PLACE, t, n, MPI_DOUBLE, MPI_MAX, g_comm);
}

/* the /N pass as the engine does it after an uncompressed SUM (src/comm/comm.c:
 * blocks of 16, which the compiler vectorizes, AVX-512/AVX2 clones on x86-64;
 * a multiply when size is 2^k) */
#if defined(__x86_64__) && defined(__ELF__) && defined(__has_attribute)
#if __has_attribute(target_clones)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
static void divide(float *x, size_t n, int size)
{
    size_t i = 0;
    if ((size & (size - 1)) == 0) {
        const float r = 1.0f / (float)size;
        for (; i + 16 <= n; i += 16)
            for (int k = 0; k < 16; k++)
                x[i + k] *= r;
        for (; i < n; i++)
            x[i] *= r;
    } else {
        const float d = (float)size;
        for (; i + 16 <= n; i += 16)
            for (int k = 0; k < 16; k++)
                x[i + k] /= d;
        for (; i < n; i++)
            x[i] /= d;
    }
}

/* ------------------------------------------------------------------ options */
typedef struct {
    double sizes_mib[32];
    int nsizes;
    int reps, warmups;
    double rep_ms;      /* a repetition lasts at least this (allreduce, mpi) */
    int L, H, B;        /* overlap: layers, width, batch */
    double bucket_mib;  /* overlap: bucket cap (0: the engine's default, 25 MiB) */
    int offcpu;         /* overlap -z: each sgemm replaced by a sleep as long as it takes */
} opts_t;

static void parse(int argc, char **argv, int first, opts_t *o)
{
    static const double def_sizes[] = {1, 2, 4, 8, 16, 32, 64};
    memset(o, 0, sizeof *o);
    memcpy(o->sizes_mib, def_sizes, sizeof def_sizes);
    o->nsizes = 7;
    o->reps = 11;
    o->warmups = 2;
    o->rep_ms = 30;
    o->L = 16;
    o->H = 1024;
    o->B = 64;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            DIE("option %s needs a value", a);
        i++;
        if (!strcmp(a, "-s")) {
            o->nsizes = 0;
            for (char *s = (char *)v, *e; *s && o->nsizes < 32; s = *e ? e + 1 : e) {
                o->sizes_mib[o->nsizes++] = strtod(s, &e);
                if (e == s)
                    DIE("-s expects MiB,MiB,..., not %s", v);
            }
        } else if (!strcmp(a, "-r")) {
            o->reps = atoi(v);
        } else if (!strcmp(a, "-w")) {
            o->warmups = atoi(v);
        } else if (!strcmp(a, "-t")) {
            o->rep_ms = atof(v);
        } else if (!strcmp(a, "-L")) {
            o->L = atoi(v);
        } else if (!strcmp(a, "-H")) {
            o->H = atoi(v);
        } else if (!strcmp(a, "-B")) {
            o->B = atoi(v);
        } else if (!strcmp(a, "-b")) {
            o->bucket_mib = atof(v);
        } else if (!strcmp(a, "-z")) {
            o->offcpu = atoi(v);
        } else {
            DIE("unknown option %s", a);
        }
    }
    if (o->reps < 1 || o->warmups < 0 || o->L < 1 || o->H < 1 || o->B < 1)
        DIE("bad options: reps %d warmups %d L %d H %d B %d", o->reps, o->warmups, o->L, o->H,
            o->B);
}

static void print_env(const char *mode)
{
    if (g_rank)
        return;
    int level;
    MPI_Query_thread(&level);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(lib, &len);
    char *nl = strchr(lib, '\n');
    if (nl)
        *nl = 0;
    printf("# ddp_bench %s: %d ranks, MPI thread level %d, %s\n", mode, g_size, level, lib);
    const char *ev[] = {"OPENBLAS_NUM_THREADS", "UCX_TLS", "SLURM_JOB_ID", "DDPC_BUCKET_MB",
                        "DDPC_FIRST_BUCKET_MB"};
    for (size_t i = 0; i < sizeof ev / sizeof *ev; i++)
        if (getenv(ev[i]))
            printf("# %s=%s\n", ev[i], getenv(ev[i]));
    if (!getenv("OPENBLAS_NUM_THREADS") && !strcmp(mode, "overlap"))
        printf("# warning: OPENBLAS_NUM_THREADS unset: BLAS threads compete with the ranks\n");
    fflush(stdout);
}

/* ------------------------------------------------------------------ allreduce */
/* The variants of one repetition, in the order of the R line. */
enum { V_RAW, V_RAWDIV, V_THR_SUM, V_THR_AVG, V_ENGINE, V_RAWSTEP, V_ENGSTEP, V_FOLD, NV };
static const char *const vname[NV] = {"raw",     "rawdiv",  "thr_sum", "thr_avg",
                                      "engine",  "rawstep", "engstep", "fold"};

/* The reduction and the update (rawstep, engstep, fold): each variant its
 * own engine with an SGD optimizer (no momentum, lr 0: the parameters stay
 * as they are), one pass over p and g; each starts with zero_grad, as a
 * training step does (a memset of the arena, the same on all three). rawstep: raw MPI_Allreduce SUM on the
 * engine's arena, then ddpc_optim_step (no division anywhere: the bound);
 * engstep: the engine averaging in its all-reduce, then the step; fold: the
 * engine folding the 1/N into the step's pass (DDPC_FOLD_AVERAGE). */
typedef struct {
    size_t n;            /* floats */
    float *buf[NV];      /* one buffer per variant; the engines' are their grad arenas */
    ddpc_ddp_t ddp, dstep[3];
    ddpc_optim_t ostep[3];
} ar_case_t;

static void ar_op(ar_case_t *c, int v)
{
    switch (v) {
    case V_RAW:
        MPI_Allreduce(MPI_IN_PLACE, c->buf[v], (int)c->n, MPI_FLOAT, MPI_SUM, g_comm);
        break;
    case V_RAWDIV:
        MPI_Allreduce(MPI_IN_PLACE, c->buf[v], (int)c->n, MPI_FLOAT, MPI_SUM, g_comm);
        divide(c->buf[v], c->n, g_size);
        break;
    case V_THR_SUM:
        CK(ddpc_allreduce(ddpc_comm_world(g_rt), c->buf[v], c->buf[v], c->n, DDPC_F32, DDPC_SUM));
        break;
    case V_THR_AVG:
        CK(ddpc_allreduce(ddpc_comm_world(g_rt), c->buf[v], c->buf[v], c->n, DDPC_F32, DDPC_AVG));
        break;
    case V_ENGINE:
        CKD(c->ddp, ddpc_ddp_grad_ready(c->ddp, 0));
        CKD(c->ddp, ddpc_ddp_wait(c->ddp));
        break;
    case V_RAWSTEP:
        CKD(c->dstep[0], ddpc_ddp_zero_grad(c->dstep[0]));
        MPI_Allreduce(MPI_IN_PLACE, c->buf[v], (int)c->n, MPI_FLOAT, MPI_SUM, g_comm);
        CKD(c->dstep[0], ddpc_optim_step(c->ostep[0], NULL));
        break;
    case V_ENGSTEP:
    case V_FOLD: {
        ddpc_ddp_t d = c->dstep[v - V_RAWSTEP];
        CKD(d, ddpc_ddp_zero_grad(d));
        CKD(d, ddpc_ddp_grad_ready(d, 0));
        CKD(d, ddpc_ddp_wait(d));
        CKD(d, ddpc_optim_step(c->ostep[v - V_RAWSTEP], NULL));
        break;
    }
    }
}

/* Times variants [v0, v1) of case c: warmups, then reps interleaved repetitions
 * of iters operations each; t[v][rep] = seconds per operation, slowest rank. */
static void time_variants(ar_case_t *c, int v0, int v1, const opts_t *o, int iters,
                          double t[][64])
{
    int nv = v1 - v0;
    for (int v = v0; v < v1; v++)
        for (int k = 0; k < o->warmups; k++)
            ar_op(c, v);
    for (int r = 0; r < o->reps; r++)
        for (int j = 0; j < nv; j++) {
            int v = v0 + (r + j) % nv; /* rotate who goes first */
            MPI_Barrier(g_comm);
            double t0 = now();
            for (int k = 0; k < iters; k++)
                ar_op(c, v);
            t[v][r] = (now() - t0) / iters;
        }
    for (int v = v0; v < v1; v++)
        max_over_ranks(t[v], o->reps);
}

/* operations per repetition so that one lasts about rep_ms (same on all ranks):
 * from the fastest of a few raw operations, the machine being shared */
static int calibrate(ar_case_t *c, double rep_ms)
{
    double dt = 1e9;
    ar_op(c, V_RAW);
    for (int k = 0; k < 5; k++) {
        MPI_Barrier(g_comm);
        double t0 = now();
        ar_op(c, V_RAW);
        double t = now() - t0;
        dt = t < dt ? t : dt;
    }
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, g_comm);
    int iters = (int)ceil(rep_ms * 1e-3 / dt);
    return iters < 1 ? 1 : iters > 10000 ? 10000 : iters;
}

static void print_ar_line(const char *mode, size_t bytes, int iters, int v0, int v1,
                          double t[][64], int reps)
{
    if (g_rank)
        return;
    double med[NV] = {0}, lo[NV] = {0}, hi[NV] = {0};
    for (int v = v0; v < v1; v++)
        med[v] = median(t[v], reps, &lo[v], &hi[v]);
    const double busf = g_size > 1 ? 2.0 * (g_size - 1) / g_size : 1.0;
    printf("R %s np=%d bytes=%zu iters=%d reps=%d", mode, g_size, bytes, iters, reps);
    for (int v = v0; v < v1; v++)
        printf(" %s_us=%.1f %s_min_us=%.1f %s_max_us=%.1f", vname[v], med[v] * 1e6, vname[v],
               lo[v] * 1e6, vname[v], hi[v] * 1e6);
    double algbw = bytes / med[V_RAW] / 1e9;
    printf(" raw_algbw=%.3f raw_busbw=%.3f", algbw, algbw * busf);
    if (v1 > V_ENGINE) {
        double ealg = bytes / med[V_ENGINE] / 1e9, pr[64];
        for (int r = 0; r < reps; r++)
            pr[r] = t[V_RAW][r] / t[V_ENGINE][r];
        printf(" engine_algbw=%.3f engine_busbw=%.3f ratio=%.4f ratio_paired=%.4f", ealg,
               ealg * busf, med[V_RAW] / med[V_ENGINE], median(pr, reps, NULL, NULL));
    }
    if (v1 > V_FOLD)
        printf(" fold_ratio=%.4f engstep_ratio=%.4f", med[V_RAWSTEP] / med[V_FOLD],
               med[V_RAWSTEP] / med[V_ENGSTEP]);
    printf("\n");
    fflush(stdout);
}

static void *xalloc(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p)
        DIE("cannot allocate %zu bytes", bytes);
    return p;
}

static void fill(float *x, size_t n, float v)
{
    for (size_t i = 0; i < n; i++)
        x[i] = v;
}

/* An engine over one float32 parameter of n floats in one bucket. */
static ddpc_ddp_t one_bucket_engine(size_t n, int fold_average)
{
    ddpc_ddp_t d;
    ddpc_ddp_config_t cfg = DDPC_DDP_CONFIG_INIT;
    cfg.first_bucket_bytes = cfg.bucket_bytes = n * sizeof(float);
    cfg.fold_average = fold_average;
    CK(ddpc_ddp_create(ddpc_comm_world(g_rt), &cfg, &d));
    int64_t shape[1] = {(int64_t)n};
    CKD(d, ddpc_ddp_add_param(d, "g", 1, shape, NULL));
    CKD(d, ddpc_ddp_build(d));
    if (ddpc_ddp_num_buckets(d) != 1)
        DIE("expected one bucket, the engine planned %d", ddpc_ddp_num_buckets(d));
    return d;
}

static void run_allreduce(const opts_t *o)
{
    double t[NV][64];
    if (g_rank == 0)
        printf("# allreduce: engine = grad_ready + ddpc_ddp_wait on one parameter in one bucket "
               "(SUM then /N); raw = MPI_Allreduce(MPI_IN_PLACE, MPI_SUM), no division; "
               "rawdiv = raw + the /N pass; thr_sum/thr_avg = ddpc_allreduce through the "
               "progress thread; rawstep/engstep/fold = raw, the averaging engine and the "
               "engine folding 1/N into the optimizer, each zero_grad + the reduction + "
               "ddpc_optim_step (SGD, one pass). Times: median per operation of the slowest rank.\n");
    for (int s = 0; s < o->nsizes; s++) {
        size_t bytes = (size_t)(o->sizes_mib[s] * 1048576.0) / 4 * 4;
        ar_case_t c = {.n = bytes / 4};
        c.ddp = one_bucket_engine(c.n, DDPC_FOLD_AUTO); /* no optimizer: it averages */
        for (int k = 0; k < 3; k++) { /* rawstep, engstep, fold */
            c.dstep[k] = one_bucket_engine(c.n, k == 2);
            ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
            oc.lr = 0;
            oc.momentum = 0;
            CKD(c.dstep[k], ddpc_optim_create(c.dstep[k], &oc, &c.ostep[k]));
            fill(ddpc_ddp_param(c.dstep[k], 0), c.n, 0.5f);
        }
        for (int v = 0; v < NV; v++) {
            c.buf[v] = v == V_ENGINE    ? ddpc_ddp_grad(c.ddp, 0)
                       : v >= V_RAWSTEP ? ddpc_ddp_grad(c.dstep[v - V_RAWSTEP], 0)
                                        : xalloc(bytes);
            /* SUM variants: zeros stay zeros (repeated in-place sums of nonzeros
             * would overflow; float adds take the same time either way); the
             * step variants' zero_grad zeroes theirs anyway */
            fill(c.buf[v], c.n, v == V_RAW || v == V_THR_SUM || v == V_RAWSTEP ? 0.0f
                                                                                : (float)(g_rank + 1));
        }
        int iters = calibrate(&c, o->rep_ms);
        time_variants(&c, 0, NV, o, iters, t);
        print_ar_line("allreduce", bytes, iters, 0, NV, t, o->reps);
        for (int v = 0; v < V_ENGINE; v++)
            free(c.buf[v]);
        for (int k = 0; k < 3; k++) {
            ddpc_optim_destroy(c.ostep[k]);
            ddpc_ddp_destroy(c.dstep[k]);
        }
        ddpc_ddp_destroy(c.ddp);
    }
}

/* raw MPI only (mode mpi): no ddpc at all */
static void run_mpi(const opts_t *o)
{
    double t[NV][64];
    for (int s = 0; s < o->nsizes; s++) {
        size_t bytes = (size_t)(o->sizes_mib[s] * 1048576.0) / 4 * 4;
        ar_case_t c = {.n = bytes / 4};
        c.buf[V_RAW] = xalloc(bytes);
        c.buf[V_RAWDIV] = xalloc(bytes);
        fill(c.buf[V_RAW], c.n, 0.0f);
        fill(c.buf[V_RAWDIV], c.n, (float)(g_rank + 1));
        int iters = calibrate(&c, o->rep_ms);
        time_variants(&c, V_RAW, V_RAWDIV + 1, o, iters, t);
        print_ar_line("mpi", bytes, iters, V_RAW, V_RAWDIV + 1, t, o->reps);
        free(c.buf[V_RAW]);
        free(c.buf[V_RAWDIV]);
    }
}

/* ------------------------------------------------------------------ overlap */
/* MLP of L layers H -> H, ReLU between, batch B; layer l: W_l (H, H) row-major
 * [in][out], b_l (H,), registered as parameters 2l and 2l+1. */
typedef struct {
    int L, H, B;
    float *A;  /* (L+1, B, H): A_0 the input, A_{l+1} = relu(Z_l) (A_L = Z_{L-1}) */
    float *Z;  /* (L, B, H) pre-activations */
    float *T;  /* (B, H) target */
    float *dA, *dZ; /* (B, H) scratch */
} mlp_t;

typedef enum { OV_COMPUTE, OV_OVERLAP, OV_NOOVERLAP, OV_NB, OV_NBTEST, OV_COMM, NOV } ov_t;
static const char *const ovname[NOV] = {"compute", "overlap", "nooverlap", "nb", "nbtest",
                                        "comm"};

/* One variant's engine and, for nb/nbtest, the raw-MPI reducer state. */
typedef struct {
    ddpc_ddp_t ddp;
    ddpc_optim_t opt;
    int nb;              /* buckets of the plan */
    int *pbucket;        /* (nparams,) bucket of each parameter */
    int *pending;        /* (nb,) parameters not yet ready this step */
    int next;            /* buckets [0, next) launched */
    MPI_Request *req;    /* (nb,) */
    MPI_Status *sts;     /* (nb,); not MPI_STATUSES_IGNORE, which gcc 12 misreads */
    int test;            /* nbtest: MPI_Testall after each layer */
} ovrun_t;

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static float urand(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static void ov_make(ovrun_t *r, const mlp_t *m, int overlap, int nbmode, double bucket_mib)
{
    memset(r, 0, sizeof *r);
    ddpc_ddp_config_t cfg = DDPC_DDP_CONFIG_INIT; /* PyTorch's buckets: 1 MiB, then 25 MiB */
    cfg.overlap = overlap;
    /* the backward overwrites its gradients (beta = 0, no zero_grad): averaged
       in the all-reduce, since a folded sum left by a step refuses that */
    cfg.fold_average = 0;
    if (bucket_mib > 0)
        cfg.bucket_bytes = (size_t)(bucket_mib * 1048576.0);
    CK(ddpc_ddp_create(ddpc_comm_world(g_rt), &cfg, &r->ddp));
    for (int l = 0; l < m->L; l++) {
        char name[32];
        int64_t ws[2] = {m->H, m->H}, bs[1] = {m->H};
        snprintf(name, sizeof name, "l%d.weight", l);
        CKD(r->ddp, ddpc_ddp_add_param(r->ddp, name, 2, ws, NULL));
        snprintf(name, sizeof name, "l%d.bias", l);
        CKD(r->ddp, ddpc_ddp_add_param(r->ddp, name, 1, bs, NULL));
    }
    CKD(r->ddp, ddpc_ddp_build(r->ddp));
    /* same initial weights in every variant: He-uniform, zero bias */
    rng_state = 0x243f6a8885a308d3ull;
    const float a = sqrtf(6.0f / (float)m->H);
    for (int l = 0; l < m->L; l++) {
        float *W = ddpc_ddp_param(r->ddp, 2 * l), *b = ddpc_ddp_param(r->ddp, 2 * l + 1);
        for (size_t i = 0; i < (size_t)m->H * m->H; i++)
            W[i] = a * urand();
        fill(b, (size_t)m->H, 0.0f);
    }
    CKD(r->ddp, ddpc_ddp_broadcast_params(r->ddp));
    ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
    oc.lr = 1e-3;
    CKD(r->ddp, ddpc_optim_create(r->ddp, &oc, &r->opt));
    if (nbmode) {
        int np = ddpc_ddp_num_params(r->ddp);
        r->nb = ddpc_ddp_num_buckets(r->ddp);
        r->pbucket = calloc((size_t)np, sizeof *r->pbucket);
        r->pending = calloc((size_t)r->nb, sizeof *r->pending);
        r->req = calloc((size_t)r->nb, sizeof *r->req);
        r->sts = calloc((size_t)r->nb, sizeof *r->sts);
        for (int i = 0; i < np; i++) {
            ddpc_param_info_t pi;
            CKD(r->ddp, ddpc_ddp_param_info(r->ddp, i, &pi));
            r->pbucket[i] = pi.bucket;
        }
        r->test = nbmode == 2;
    }
}

static void ov_free(ovrun_t *r)
{
    ddpc_optim_destroy(r->opt);
    ddpc_ddp_destroy(r->ddp);
    free(r->pbucket);
    free(r->pending);
    free(r->req);
    free(r->sts);
}

/* nb: the reducer without a progress thread. Parameter i is ready: launch
 * every consecutive complete bucket, in index order (as the engine does). */
static void nb_ready(ovrun_t *r, int i)
{
    r->pending[r->pbucket[i]]--;
    while (r->next < r->nb && r->pending[r->next] == 0) {
        size_t off, n;
        CKD(r->ddp, ddpc_ddp_bucket(r->ddp, r->next, &off, &n));
        float *g = ddpc_ddp_grads(r->ddp, NULL) + off;
        MPI_Iallreduce(MPI_IN_PLACE, g, (int)n, MPI_FLOAT, MPI_SUM, g_comm, &r->req[r->next]);
        r->next++;
    }
}

static void nb_begin(ovrun_t *r)
{
    for (int b = 0; b < r->nb; b++) {
        size_t off, n;
        CKD(r->ddp, ddpc_ddp_bucket(r->ddp, b, &off, &n));
        int cnt = 0;
        for (int i = 0; i < ddpc_ddp_num_params(r->ddp); i++)
            cnt += r->pbucket[i] == b;
        r->pending[b] = cnt;
        r->req[b] = MPI_REQUEST_NULL;
    }
    r->next = 0;
}

static void nb_end(ovrun_t *r)
{
    MPI_Waitall(r->nb, r->req, r->sts);
    size_t n;
    float *g = ddpc_ddp_grads(r->ddp, &n);
    divide(g, n, g_size); /* the same SUM then /N as the engine */
}

/* Gradient of (weight, bias) of layer l is complete. */
static void ov_ready(ovrun_t *r, ov_t v, int l)
{
    if (v == OV_NB || v == OV_NBTEST) {
        nb_ready(r, 2 * l + 1);
        nb_ready(r, 2 * l);
        if (r->test) {
            int flag;
            MPI_Testall(r->next, r->req, &flag, r->sts);
        }
    } else {
        CKD(r->ddp, ddpc_ddp_grad_ready(r->ddp, 2 * l + 1));
        CKD(r->ddp, ddpc_ddp_grad_ready(r->ddp, 2 * l));
    }
}

/* -z: the three sgemms of a layer (forward, weight gradient, input gradient)
 * become sleeps of their measured length (slowest rank's median) */
enum { G_FWD, G_WGRAD, G_XGRAD };
static int g_offcpu;
static double g_gemm_s[3];

static void sleep_s(double s)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double end = (double)t.tv_sec + 1e-9 * (double)t.tv_nsec + s;
    t.tv_sec = (time_t)end;
    t.tv_nsec = (long)((end - (double)t.tv_sec) * 1e9);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) != 0)
        ;
}

static void gemm(int kind, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K,
                 const float *A, int lda, const float *B_, int ldb, float beta, float *C, int ldc)
{
    if (g_offcpu)
        sleep_s(g_gemm_s[kind]);
    else
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, B_, ldb, beta, C, ldc);
}

static void calibrate_gemms(const mlp_t *m, ddpc_ddp_t d)
{
    const int B = m->B, H = m->H;
    double t[3][7];
    const float *W = ddpc_ddp_param(d, 0);
    float *g = ddpc_ddp_grad(d, 0);
    for (int r = 0; r < 7; r++) {
        double t0 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, H, H, 1.0f, m->A, H, W, H, 0.0f,
                    m->Z, H);
        double t1 = now();
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, H, H, B, 1.0f, m->A, H, m->Z, H,
                    0.0f, g, H);
        double t2 = now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, H, H, 1.0f, m->Z, H, W, H, 0.0f,
                    m->dA, H);
        double t3 = now();
        t[0][r] = t1 - t0, t[1][r] = t2 - t1, t[2][r] = t3 - t2;
    }
    for (int k = 0; k < 3; k++)
        g_gemm_s[k] = median(t[k], 7, NULL, NULL);
    MPI_Allreduce(MPI_IN_PLACE, g_gemm_s, 3, MPI_DOUBLE, MPI_MAX, g_comm);
    if (g_rank == 0)
        printf("# -z 1: sgemms replaced by sleeps of %.2f (forward), %.2f (weight gradient), "
               "%.2f (input gradient) ms per layer\n",
               g_gemm_s[0] * 1e3, g_gemm_s[1] * 1e3, g_gemm_s[2] * 1e3);
}

static void forward(const mlp_t *m, ddpc_ddp_t d)
{
    const int B = m->B, H = m->H;
    for (int l = 0; l < m->L; l++) {
        const float *W = ddpc_ddp_param(d, 2 * l), *b = ddpc_ddp_param(d, 2 * l + 1);
        float *X = m->A + (size_t)l * B * H, *Z = m->Z + (size_t)l * B * H;
        float *Y = m->A + (size_t)(l + 1) * B * H;
        for (int i = 0; i < B; i++)
            memcpy(Z + (size_t)i * H, b, (size_t)H * sizeof *b);
        gemm(G_FWD, CblasNoTrans, CblasNoTrans, B, H, H, X, H, W, H, 1.0f, Z, H);
        const int last = l == m->L - 1;
        for (size_t i = 0; i < (size_t)B * H; i++)
            Y[i] = last || Z[i] > 0 ? Z[i] : 0.0f;
    }
}

/* loss = sum((A_L - T)^2) / (2B); backward from the last layer, each layer's
 * gradients announced as soon as they are written (beta = 0: no zero_grad). */
static void backward(const mlp_t *m, ovrun_t *r, ov_t v)
{
    const int B = m->B, H = m->H;
    ddpc_ddp_t d = r->ddp;
    const float *out = m->A + (size_t)m->L * B * H;
    for (size_t i = 0; i < (size_t)B * H; i++)
        m->dA[i] = (out[i] - m->T[i]) / (float)B;
    for (int l = m->L - 1; l >= 0; l--) {
        const float *X = m->A + (size_t)l * B * H, *Z = m->Z + (size_t)l * B * H;
        const float *W = ddpc_ddp_param(d, 2 * l);
        float *gW = ddpc_ddp_grad(d, 2 * l), *gb = ddpc_ddp_grad(d, 2 * l + 1);
        const int last = l == m->L - 1;
        for (size_t i = 0; i < (size_t)B * H; i++)
            m->dZ[i] = last || Z[i] > 0 ? m->dA[i] : 0.0f;
        gemm(G_WGRAD, CblasTrans, CblasNoTrans, H, H, B, X, H, m->dZ, H, 0.0f, gW, H);
        fill(gb, (size_t)H, 0.0f);
        for (int i = 0; i < B; i++)
            for (int j = 0; j < H; j++)
                gb[j] += m->dZ[(size_t)i * H + j];
        ov_ready(r, v, l);
        if (l > 0)
            gemm(G_XGRAD, CblasNoTrans, CblasTrans, B, H, H, m->dZ, H, W, H, 0.0f, m->dA, H);
    }
}

/* One training step of variant v; returns wait()'s blocked seconds (engine). */
static double ov_step(const mlp_t *m, ovrun_t *r, ov_t v)
{
    double blocked = 0;
    if (v == OV_COMM) { /* the reduction alone: every bucket at once, no compute */
        for (int i = 0; i < ddpc_ddp_num_params(r->ddp); i++)
            CKD(r->ddp, ddpc_ddp_grad_ready(r->ddp, i));
        CKD(r->ddp, ddpc_ddp_wait(r->ddp));
        ddpc_ddp_last_timing(r->ddp, NULL, &blocked);
        return blocked;
    }
    forward(m, r->ddp);
    if (v == OV_NB || v == OV_NBTEST)
        nb_begin(r);
    backward(m, r, v);
    if (v == OV_NB || v == OV_NBTEST) {
        double t0 = now();
        nb_end(r);
        blocked = now() - t0;
    } else {
        CKD(r->ddp, ddpc_ddp_wait(r->ddp));
        if (v != OV_COMPUTE)
            ddpc_ddp_last_timing(r->ddp, NULL, &blocked);
    }
    CKD(r->ddp, ddpc_optim_step(r->opt, NULL));
    return blocked;
}

static void run_overlap(const opts_t *o)
{
    mlp_t m = {.L = o->L, .H = o->H, .B = o->B};
    const size_t bh = (size_t)o->B * o->H;
    m.A = xalloc((size_t)(o->L + 1) * bh * sizeof(float));
    m.Z = xalloc((size_t)o->L * bh * sizeof(float));
    m.T = xalloc(bh * sizeof(float));
    m.dA = xalloc(bh * sizeof(float));
    m.dZ = xalloc(bh * sizeof(float));
    rng_state = 0x9e3779b97f4a7c15ull * (uint64_t)(g_rank + 1); /* each rank its own batch */
    for (size_t i = 0; i < bh; i++) {
        m.A[i] = urand();
        m.T[i] = urand();
    }
    /* an engine per variant (the overlap setting is fixed at create); the
     * variant's own DDPC_OVERLAP would override it, so it is ignored here */
    unsetenv("DDPC_OVERLAP");
    ovrun_t run[NOV];
    ov_make(&run[OV_COMPUTE], &m, 1, 0, o->bucket_mib);
    CKD(run[OV_COMPUTE].ddp, ddpc_ddp_set_sync(run[OV_COMPUTE].ddp, 0));
    ov_make(&run[OV_OVERLAP], &m, 1, 0, o->bucket_mib);
    ov_make(&run[OV_NOOVERLAP], &m, 0, 0, o->bucket_mib);
    ov_make(&run[OV_NB], &m, 1, 1, o->bucket_mib);
    ov_make(&run[OV_NBTEST], &m, 1, 2, o->bucket_mib);
    ov_make(&run[OV_COMM], &m, 0, 0, o->bucket_mib);

    if (o->offcpu) {
        calibrate_gemms(&m, run[OV_COMPUTE].ddp);
        g_offcpu = 1;
    }
    size_t numel;
    ddpc_ddp_grads(run[OV_OVERLAP].ddp, &numel);
    const size_t gbytes = numel * sizeof(float);
    if (g_rank == 0) {
        printf("# overlap: MLP %d layers %dx%d, batch %d, %.1f MiB of gradients in %d buckets, "
               "%.2f GFLOP per step per rank\n",
               o->L, o->H, o->H, o->B, gbytes / 1048576.0, ddpc_ddp_num_buckets(run[0].ddp),
               6.0 * o->L * o->B * (double)o->H * o->H / 1e9);
        for (int b = 0; b < ddpc_ddp_num_buckets(run[0].ddp); b++) {
            size_t off, n;
            ddpc_ddp_bucket(run[0].ddp, b, &off, &n);
            printf("#   bucket %d: %.2f MiB\n", b, n * 4 / 1048576.0);
        }
        fflush(stdout);
    }

    /* the link: raw MPI_Allreduce of one layer's gradient and of all of them */
    {
        double t[NV][64];
        opts_t q = *o;
        q.reps = 5;
        q.warmups = 1;
        size_t sz[2] = {(size_t)o->H * o->H * 4, gbytes};
        for (int k = 0; k < 2; k++) {
            ar_case_t c = {.n = sz[k] / 4};
            c.buf[V_RAW] = xalloc(sz[k]);
            fill(c.buf[V_RAW], c.n, 0.0f);
            time_variants(&c, V_RAW, V_RAW + 1, &q, 1, t);
            print_ar_line("link", sz[k], 1, V_RAW, V_RAW + 1, t, q.reps);
            free(c.buf[V_RAW]);
        }
    }

    /* per step: wall time, wait()'s blocked time, CPU time of the whole process
     * and of the main thread (the rest: the progress thread, MPI's own threads) */
    double t[NOV][64], blk[NOV][64], cpu[NOV][64], mcpu[NOV][64];
    for (int v = 0; v < NOV; v++)
        for (int k = 0; k < o->warmups; k++)
            ov_step(&m, &run[v], (ov_t)v);
    for (int rep = 0; rep < o->reps; rep++)
        for (int j = 0; j < NOV; j++) {
            int v = (rep + j) % NOV;
            MPI_Barrier(g_comm);
            double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), m0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
            double t0 = now();
            blk[v][rep] = ov_step(&m, &run[v], (ov_t)v);
            t[v][rep] = now() - t0;
            cpu[v][rep] = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
            mcpu[v][rep] = clock_s(CLOCK_THREAD_CPUTIME_ID) - m0;
        }
    for (int v = 0; v < NOV; v++) {
        max_over_ranks(t[v], o->reps);
        max_over_ranks(blk[v], o->reps);
        max_over_ranks(cpu[v], o->reps);
        max_over_ranks(mcpu[v], o->reps);
    }
    if (g_rank == 0) {
        double med[NOV], lo[NOV], hi[NOV];
        for (int v = 0; v < NOV; v++) {
            med[v] = median(t[v], o->reps, &lo[v], &hi[v]);
            printf("R overlap_variant np=%d name=%s step_ms=%.2f min_ms=%.2f max_ms=%.2f "
                   "blocked_ms=%.2f cpu_ms=%.2f main_cpu_ms=%.2f\n",
                   g_size, ovname[v], med[v] * 1e3, lo[v] * 1e3, hi[v] * 1e3,
                   median(blk[v], o->reps, NULL, NULL) * 1e3,
                   median(cpu[v], o->reps, NULL, NULL) * 1e3,
                   median(mcpu[v], o->reps, NULL, NULL) * 1e3);
        }
        const double tc = med[OV_COMPUTE], to = med[OV_OVERLAP], tn = med[OV_NOOVERLAP];
        const double exposed = tn - tc;
        printf("R overlap np=%d L=%d H=%d B=%d offcpu=%d grad_bytes=%zu compute_ms=%.2f comm_ms=%.2f "
               "overlap_ms=%.2f nooverlap_ms=%.2f nb_ms=%.2f nbtest_ms=%.2f "
               "speedup=%.4f hidden=%.4f hidden_nb=%.4f hidden_nbtest=%.4f "
               "thread_vs_nb=%.4f thread_vs_nbtest=%.4f\n",
               g_size, o->L, o->H, o->B, o->offcpu, gbytes, tc * 1e3, med[OV_COMM] * 1e3, to * 1e3,
               tn * 1e3, med[OV_NB] * 1e3, med[OV_NBTEST] * 1e3, tn / to,
               exposed > 0 ? (tn - to) / exposed : 0.0,
               exposed > 0 ? (tn - med[OV_NB]) / exposed : 0.0,
               exposed > 0 ? (tn - med[OV_NBTEST]) / exposed : 0.0, med[OV_NB] / to,
               med[OV_NBTEST] / to);
        fflush(stdout);
    }
    for (int v = 0; v < NOV; v++)
        ov_free(&run[v]);
    free(m.A);
    free(m.Z);
    free(m.T);
    free(m.dA);
    free(m.dZ);
}

/* ------------------------------------------------------------------ main */
static void usage(void)
{
    fprintf(stderr, "usage: ddp_bench allreduce|overlap [options]\n"
                    "       ddp_bench mpi single|funneled|serialized|multiple [options]\n"
                    "see the head of bench/ddp_bench.c\n");
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "allreduce") && strcmp(argv[1], "overlap") &&
                     strcmp(argv[1], "mpi"))) {
        usage();
        return 2;
    }
    const char *mode = argv[1];
    opts_t o;
    if (!strcmp(mode, "mpi")) {
        static const char *const lv[] = {"single", "funneled", "serialized", "multiple"};
        int want = -1, got;
        for (int i = 0; argc > 2 && i < 4; i++)
            if (!strcmp(argv[2], lv[i]))
                want = i; /* MPI_THREAD_SINGLE..MULTIPLE are 0..3 in MPICH and Open MPI */
        if (want < 0) {
            usage();
            return 2;
        }
        MPI_Init_thread(&argc, &argv, want, &got);
        MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
        MPI_Comm_size(MPI_COMM_WORLD, &g_size);
        MPI_Comm_dup(MPI_COMM_WORLD, &g_comm);
        parse(argc, argv, 3, &o);
        if (o.reps > 64)
            DIE("at most 64 repetitions");
        print_env(mode);
        if (g_rank == 0)
            printf("# mpi: asked thread level %s (%d), got %d\n", lv[want], want, got);
        run_mpi(&o);
        MPI_Comm_free(&g_comm);
        MPI_Finalize();
        return 0;
    }
    if (ddpc_init(NULL, &argc, &argv, &g_rt) != DDPC_OK) {
        fprintf(stderr, "ddp_bench: %s\n", g_rt ? ddpc_last_error(g_rt) : ddpc_init_error());
        ddpc_finalize(g_rt);
        return 1;
    }
    g_rank = ddpc_world(g_rt)->rank;
    g_size = ddpc_world(g_rt)->size;
    MPI_Comm_dup(MPI_COMM_WORLD, &g_comm);
    parse(argc, argv, 2, &o);
    if (o.reps > 64)
        DIE("at most 64 repetitions");
    print_env(mode);
    if (!strcmp(mode, "allreduce"))
        run_allreduce(&o);
    else
        run_overlap(&o);
    /* everything is printed: a hang in MPI_Finalize (MPICH+UCX over TCP) loses nothing */
    if (g_rank == 0)
        printf("# done\n");
    fflush(stdout);
    MPI_Comm_free(&g_comm);
    ddpc_finalize(g_rt);
    return 0;
}
