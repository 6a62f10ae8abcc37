/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu_comm.c: device communicators under 1, 2 and 4 MPI ranks sharing one
 * GPU: backend mpi-staged for any size, and nccl too with 1 rank (NCCL
 * refuses two ranks on one GPU). Plain C with its own checks; not a Check
 * suite (the staged threads and CUDA do not mix with Check's runner).
 * What it checks, on device memory, against values computed on the host:
 *  - allreduce float32 SUM (in place) and AVG (out of place, the input left
 *    alone) on 1, 1000, 3<<20+7 and 5<<20+3 elements (past the 4 MiB pieces
 *    and the 16 MiB stage), small integers so that every sum is exact;
 *  - AVG of random floats: close to the mean, bitwise identical on all ranks
 *    (FNV-1a of the result, allgathered on the world communicator);
 *  - int32 MAX and MIN; bfloat16 SUM (bits); broadcast from rank size-1;
 *    allgather and reduce_scatter (SUM, AVG) of 1000 and 5<<20 per rank;
 *  - two iallreduces in flight, waited for in the other order;
 *  - stream order: a cudaMemcpyAsync or cudaMemsetAsync of the input on the
 *    communicator's stream, behind a slow copy and without a host sync, is
 *    what the iallreduce right after it reduces;
 *  - ddpc_comm_synchronize completes issued work (work_test then says done),
 *    the sequence number advances by one per collective on every rank;
 *  - timeout (2 or more ranks, last, on its own communicator): rank 1 skips
 *    an iallreduce, ddpc_work_wait(w, 2.0) on the others returns
 *    DDPC_ERR_TIMEOUT within 2 s + 3 s naming "allreduce #"; then rank 1
 *    issues it late, every handle completes and everything shuts down cleanly.
 * GPU_COMM_BENCH=1 adds bus bandwidth lines (nccl-tests' busbw) per size.
 * Without a usable CUDA device it is skipped (exit 77 on every rank).
 * GPU_TEST_ON_HOST=1 runs the same cases on host memory (backend mpi): a
 * check of this program itself on a machine without a GPU, not of the GPU path.
 * A check that fails is counted (exit 1 on every rank); a call that fails
 * ends every rank at once through ddpc_abort, since the ranks' collectives
 * would no longer match. */
#include "gputest.h"

#include <math.h>
#include <time.h>

/* ------------------------------------------------------------------ checks */

static void expect_bits(const char *file, int line, const char *what, const void *got,
                        const void *want, size_t n, size_t es)
{
    size_t bad = 0, first = 0;
    const unsigned char *g = got, *w = want;
    for (size_t i = 0; i < n; i++)
        if (memcmp(g + i * es, w + i * es, es) && bad++ == 0)
            first = i;
    if (bad) {
        long long gv = 0, wv = 0;
        if (es == 4) {
            int32_t a, b;
            memcpy(&a, g + first * es, 4), memcpy(&b, w + first * es, 4);
            gv = a, wv = b;
        } else if (es == 2) {
            uint16_t a, b;
            memcpy(&a, g + first * es, 2), memcpy(&b, w + first * es, 2);
            gv = a, wv = b;
        }
        fail_at(file, line, "%s: %zu of %zu elements differ; first at %zu: got %lld (0x%llx), "
                "expected %lld (0x%llx)", what, bad, n, first, gv, (unsigned long long)gv, wv,
                (unsigned long long)wv);
    }
}
#define EXPECT_BITS(what, got, want, n, es) expect_bits(__FILE__, __LINE__, what, got, want, n, es)

/* ------------------------------------------------------------------ memory */
/* Device buffers (host memory with GPU_TEST_ON_HOST): dalloc, dfree, halloc,
 * upload and download are gputest.h's. */

/* Page-locked: cudaMemcpyAsync from it is truly asynchronous. */
static void *palloc(size_t bytes)
{
    void *p = NULL;
    if (on_host)
        return halloc(bytes);
    CU(cudaMallocHost(&p, bytes ? bytes : 1));
    return p;
}

static void pfree(void *p)
{
    if (on_host)
        free(p);
    else if (p)
        CU(cudaFreeHost(p));
}

/* ------------------------------------------------------------------ values */

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t key(size_t i, int r, unsigned salt)
{
    return mix((uint64_t)i * 0x100000001b3ull + (uint64_t)r * 0x9e3779b1ull +
               ((uint64_t)salt << 48));
}

/* Element i of rank r in case `salt`: an integer in [-8, 8], so that every
 * partial sum is exact in float32 (up to 2^21 ranks) and in bfloat16 (32). */
static float ival(size_t i, int r, unsigned salt)
{
    return (float)((int)(key(i, r, salt) % 17) - 8);
}

/* A float in [-1, 1). */
static float fval(size_t i, int r, unsigned salt)
{
    return (float)((double)(key(i, r, salt) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static int32_t i32val(size_t i, int r, unsigned salt)
{
    return (int32_t)(key(i, r, salt) % 2000001) - 1000000;
}

static float sum_over_ranks(size_t i, unsigned salt)
{
    float s = 0;
    for (int r = 0; r < size; r++)
        s += ival(i, r, salt);
    return s;
}

/* Tolerance of AVG of small integers: exact when size is a power of two
 * (x/N and x*(1/N) are then the same exact value), else an ulp or so. */
static double avg_tol(void) { return (size & (size - 1)) ? 1e-5 : 0; }

/* ------------------------------------------------------------------ cases */

/* Buffers of one backend's run: device dX, dY; host hX, hY, hW (expected);
 * pinned hP. MAXN floats each. */
static size_t MAXN;
static float *dX, *dY, *hX, *hY, *hW, *hP;

enum { BIG_PER_RANK = 5 << 20 };

static void check_allreduce_f32(ddpc_comm_t c, size_t n)
{
    char what[128];
    /* SUM in place */
    for (size_t i = 0; i < n; i++)
        hX[i] = ival(i, rank, 1);
    upload(dX, hX, n * 4);
    OK(ddpc_allreduce(c, dX, dX, n, DDPC_F32, DDPC_SUM));
    download(hY, dX, n * 4);
    for (size_t i = 0; i < n; i++)
        hW[i] = sum_over_ranks(i, 1);
    snprintf(what, sizeof what, "allreduce SUM of %zu float32 in place", n);
    EXPECT_F32(what, hY, hW, n, 0);
    /* AVG out of place; the input stays */
    for (size_t i = 0; i < n; i++)
        hX[i] = ival(i, rank, 2);
    upload(dX, hX, n * 4);
    OK(ddpc_allreduce(c, dX, dY, n, DDPC_F32, DDPC_AVG));
    download(hY, dY, n * 4);
    for (size_t i = 0; i < n; i++)
        hW[i] = sum_over_ranks(i, 2) / (float)size;
    snprintf(what, sizeof what, "allreduce AVG of %zu float32 out of place", n);
    EXPECT_F32(what, hY, hW, n, avg_tol());
    download(hY, dX, n * 4);
    snprintf(what, sizeof what, "allreduce AVG of %zu float32: the send buffer", n);
    EXPECT_F32(what, hY, hX, n, 0);
}

/* Random floats: AVG close to the mean and bitwise the same on every rank. */
static void check_allreduce_random_avg(ddpc_comm_t c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        hX[i] = fval(i, rank, 3);
    upload(dX, hX, n * 4);
    OK(ddpc_allreduce(c, dX, dX, n, DDPC_F32, DDPC_AVG));
    download(hY, dX, n * 4);
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (int r = 0; r < size; r++)
            s += fval(i, r, 3);
        hW[i] = (float)(s / size);
    }
    char what[128];
    snprintf(what, sizeof what, "allreduce AVG of %zu random float32", n);
    EXPECT_F32(what, hY, hW, n, 1e-6);
    EXPECT_SAME_ON_ALL_RANKS(what, hY, n * 4);
}

static void check_allreduce_i32(ddpc_comm_t c, size_t n)
{
    int32_t *x = (int32_t *)hX, *y = (int32_t *)hY, *w = (int32_t *)hW;
    for (int k = 0; k < 2; k++) {
        ddpc_redop_t op = k ? DDPC_MIN : DDPC_MAX;
        for (size_t i = 0; i < n; i++)
            x[i] = i32val(i, rank, 4);
        upload(dX, x, n * 4);
        OK(ddpc_allreduce(c, dX, dY, n, DDPC_I32, op));
        download(y, dY, n * 4);
        for (size_t i = 0; i < n; i++) {
            int32_t m = i32val(i, 0, 4);
            for (int r = 1; r < size; r++) {
                int32_t v = i32val(i, r, 4);
                m = k ? (v < m ? v : m) : (v > m ? v : m);
            }
            w[i] = m;
        }
        char what[128];
        snprintf(what, sizeof what, "allreduce %s of %zu int32", k ? "MIN" : "MAX", n);
        EXPECT_BITS(what, y, w, n, 4);
    }
}

static void check_allreduce_bf16(ddpc_comm_t c, size_t n)
{
    uint16_t *x = (uint16_t *)hX, *y = (uint16_t *)hY, *w = (uint16_t *)hW;
    for (size_t i = 0; i < n; i++)
        x[i] = ddpc_f32_to_bf16(ival(i, rank, 5));
    upload(dX, x, n * 2);
    OK(ddpc_allreduce(c, dX, dX, n, DDPC_BF16, DDPC_SUM));
    download(y, dX, n * 2);
    for (size_t i = 0; i < n; i++)
        w[i] = ddpc_f32_to_bf16(sum_over_ranks(i, 5));
    char what[128];
    snprintf(what, sizeof what, "allreduce SUM of %zu bfloat16", n);
    EXPECT_BITS(what, y, w, n, 2);
}

static void check_broadcast(ddpc_comm_t c, size_t n)
{
    const int root = size - 1;
    for (size_t i = 0; i < n; i++)
        hX[i] = ival(i, rank, 6);
    upload(dX, hX, n * 4);
    OK(ddpc_broadcast(c, dX, n, DDPC_F32, root));
    download(hY, dX, n * 4);
    for (size_t i = 0; i < n; i++)
        hW[i] = ival(i, root, 6);
    char what[128];
    snprintf(what, sizeof what, "broadcast of %zu float32 from rank %d", n, root);
    EXPECT_F32(what, hY, hW, n, 0);
}

static void check_allgather(ddpc_comm_t c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        hX[i] = ival(i, rank, 7);
    upload(dX, hX, n * 4);
    OK(ddpc_allgather(c, dX, dY, n, DDPC_F32));
    download(hY, dY, (size_t)size * n * 4);
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < n; i++)
            hW[(size_t)r * n + i] = ival(i, r, 7);
    char what[128];
    snprintf(what, sizeof what, "allgather of %zu float32 per rank", n);
    EXPECT_F32(what, hY, hW, (size_t)size * n, 0);
}

static void check_reduce_scatter(ddpc_comm_t c, size_t n)
{
    const size_t total = (size_t)size * n;
    for (int k = 0; k < 2; k++) {
        ddpc_redop_t op = k ? DDPC_AVG : DDPC_SUM;
        for (size_t i = 0; i < total; i++)
            hX[i] = ival(i, rank, 8);
        upload(dX, hX, total * 4);
        OK(ddpc_reduce_scatter(c, dX, dY, n, DDPC_F32, op));
        download(hY, dY, n * 4);
        for (size_t i = 0; i < n; i++) {
            float s = sum_over_ranks((size_t)rank * n + i, 8);
            hW[i] = k ? s / (float)size : s;
        }
        char what[128];
        snprintf(what, sizeof what, "reduce_scatter %s of %zu float32 per rank", k ? "AVG" : "SUM",
                 n);
        EXPECT_F32(what, hY, hW, n, k ? avg_tol() : 0);
    }
}

/* Two operations in flight, waited for in the other order. */
static void check_two_in_flight(ddpc_comm_t c, size_t n1, size_t n2)
{
    int32_t *y2 = (int32_t *)hW + n1;
    for (size_t i = 0; i < n1; i++)
        hX[i] = ival(i, rank, 9);
    int32_t *x2 = (int32_t *)hX + n1;
    for (size_t i = 0; i < n2; i++)
        x2[i] = i32val(i, rank, 10);
    upload(dX, hX, n1 * 4);
    upload(dY, x2, n2 * 4);
    ddpc_work_t w1, w2;
    OK(ddpc_iallreduce(c, dX, dX, n1, DDPC_F32, DDPC_SUM, &w1));
    OK(ddpc_iallreduce(c, dY, dY, n2, DDPC_I32, DDPC_MAX, &w2));
    OK(ddpc_work_wait(w2, -1));
    OK(ddpc_work_wait(w1, -1));
    download(hY, dX, n1 * 4);
    for (size_t i = 0; i < n1; i++)
        hW[i] = sum_over_ranks(i, 9);
    EXPECT_F32("iallreduce SUM float32, waited for second", hY, hW, n1, 0);
    int32_t *got2 = (int32_t *)hY;
    download(got2, dY, n2 * 4);
    for (size_t i = 0; i < n2; i++) {
        int32_t m = i32val(i, 0, 10);
        for (int r = 1; r < size; r++) {
            int32_t v = i32val(i, r, 10);
            m = v > m ? v : m;
        }
        y2[i] = m;
    }
    EXPECT_BITS("iallreduce MAX int32, waited for first", got2, y2, n2, 4);
}

/* What the stream holds at the call is what is reduced: the input is
 * rewritten on the stream behind a slow copy (MAXN floats from pinned
 * memory into dY), with no host synchronization before the iallreduce. */
static void check_stream_order(ddpc_comm_t c, size_t n)
{
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < n; i++)
            hX[i] = ival(i, rank, 11); /* stale */
        upload(dX, hX, n * 4);
        for (size_t i = 0; i < n; i++)
            hP[i] = ival(i, rank, 12); /* what the stream writes */
        if (on_host) {
            if (k == 0)
                memcpy(dX, hP, n * 4);
            else
                memset(dX, 0, n * 4);
        } else {
            CU(cudaMemcpyAsync(dY, hP, MAXN * 4, cudaMemcpyHostToDevice, strm));
            if (k == 0)
                CU(cudaMemcpyAsync(dX, hP, n * 4, cudaMemcpyHostToDevice, strm));
            else
                CU(cudaMemsetAsync(dX, 0, n * 4, strm));
        }
        ddpc_work_t w;
        OK(ddpc_iallreduce(c, dX, dX, n, DDPC_F32, DDPC_SUM, &w));
        OK(ddpc_work_wait(w, -1));
        download(hY, dX, n * 4);
        for (size_t i = 0; i < n; i++)
            hW[i] = k == 0 ? sum_over_ranks(i, 12) : 0.0f;
        EXPECT_F32(k == 0 ? "iallreduce after cudaMemcpyAsync of its input on the stream"
                          : "iallreduce after cudaMemsetAsync of its input on the stream",
                   hY, hW, n, 0);
    }
}

static void check_synchronize(ddpc_comm_t c, size_t n)
{
    OK(ddpc_comm_synchronize(c, 30)); /* nothing in flight: at once */
    for (size_t i = 0; i < n; i++)
        hX[i] = ival(i, rank, 13);
    upload(dX, hX, n * 4);
    uint64_t seq = ddpc_comm_seq(c);
    EXPECT_SAME_ON_ALL_RANKS("sequence number", &seq, sizeof seq);
    ddpc_work_t w;
    OK(ddpc_iallreduce(c, dX, dX, n, DDPC_F32, DDPC_SUM, &w));
    EXPECT_EQ_INT(ddpc_comm_seq(c), seq + 1);
    OK(ddpc_comm_synchronize(c, 60));
    int done = 0;
    EXPECT_STATUS(ddpc_work_test(w, &done), DDPC_OK);
    EXPECT_EQ_INT(done, 1);
    OK(ddpc_work_wait(w, 10));
    EXPECT_STATUS(ddpc_comm_status(c), DDPC_OK);
    download(hY, dX, n * 4);
    for (size_t i = 0; i < n; i++)
        hW[i] = sum_over_ranks(i, 13);
    EXPECT_F32("iallreduce completed by ddpc_comm_synchronize", hY, hW, n, 0);
}

/* nccl: an iallreduce captured into a CUDA graph with the kernel-free work
 * around it (a copy in, the wait) runs only when the graph is launched, each
 * launch reduces again, and ddpc_comm_watch holds the launch to the
 * watchdog's deadline; other backends: watch does nothing. */
static void check_graph(ddpc_comm_t c, size_t n)
{
    if (on_host || ddpc_comm_backend(c) != DDPC_BACKEND_NCCL) {
        EXPECT_STATUS(ddpc_comm_watch(c, "nothing"), DDPC_OK);
        return;
    }
    for (size_t i = 0; i < n; i++)
        hP[i] = ival(i, rank, 14);
    CU(cudaMemsetAsync(dX, 0, n * 4, strm));
    CU(cudaStreamSynchronize(strm));
    uint64_t seq = ddpc_comm_seq(c);
    cudaGraph_t g;
    cudaGraphExec_t x;
    CU(cudaStreamBeginCapture(strm, cudaStreamCaptureModeThreadLocal));
    CU(cudaMemcpyAsync(dX, hP, n * 4, cudaMemcpyHostToDevice, strm));
    ddpc_work_t w;
    OK(ddpc_iallreduce(c, dX, dX, n, DDPC_F32, DDPC_SUM, &w));
    OK(ddpc_work_wait(w, -1));
    CU(cudaStreamEndCapture(strm, &g));
    CU(cudaGraphInstantiate(&x, g, 0));
    EXPECT_EQ_INT(ddpc_comm_seq(c), seq + 1);
    download(hY, dX, n * 4); /* captured, not run: still zero */
    for (size_t i = 0; i < n; i++)
        hW[i] = 0.0f;
    EXPECT_F32("iallreduce inside a capture, before the graph is launched", hY, hW, n, 0);
    for (int k = 0; k < 2; k++) {
        CU(cudaGraphLaunch(x, strm));
        OK(ddpc_comm_watch(c, "a test graph"));
        OK(ddpc_comm_synchronize(c, 60));
        CU(cudaStreamSynchronize(strm));
        download(hY, dX, n * 4);
        for (size_t i = 0; i < n; i++)
            hW[i] = sum_over_ranks(i, 14);
        EXPECT_F32("iallreduce replayed from a CUDA graph", hY, hW, n, 0);
    }
    EXPECT_STATUS(ddpc_comm_status(c), DDPC_OK);
    CU(cudaGraphExecDestroy(x));
    CU(cudaGraphDestroy(g));
}

/* ------------------------------------------------------------------ bandwidth */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* nccl-tests' definitions: algbw = bytes / time, busbw = algbw * 2(N-1)/N.
 * Each timed iteration starts together (a host barrier) and counts as the
 * slowest rank's time; the median of 10 after 3 warm-ups. */
static void bench(ddpc_comm_t c)
{
    enum { WARM = 3, ITERS = 10 };
    static const size_t mib[] = {1, 4, 16, 64, 256};
    const size_t maxb = (size_t)256 << 20;
    const int nccl = ddpc_comm_backend(c) == DDPC_BACKEND_NCCL;
    float *d = dalloc(maxb);
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (on_host) {
        memset(d, 0, maxb);
    } else {
        CU(cudaMemsetAsync(d, 0, maxb, strm));
        CU(cudaStreamSynchronize(strm));
        CU(cudaEventCreate(&e0));
        CU(cudaEventCreate(&e1));
    }
    for (size_t k = 0; k < sizeof mib / sizeof *mib; k++) {
        const size_t bytes = mib[k] << 20, n = bytes / 4;
        double t[ITERS], tmax[ITERS];
        for (int it = 0; it < WARM + ITERS; it++) {
            OK(ddpc_barrier(world));
            double s;
            if (nccl) {
                CU(cudaEventRecord(e0, strm));
                OK(ddpc_allreduce(c, d, d, n, DDPC_F32, DDPC_SUM));
                CU(cudaEventRecord(e1, strm));
                CU(cudaEventSynchronize(e1));
                float ms = 0;
                CU(cudaEventElapsedTime(&ms, e0, e1));
                s = ms * 1e-3;
            } else {
                OK(ddpc_comm_synchronize(c, -1));
                double t0 = now();
                OK(ddpc_allreduce(c, d, d, n, DDPC_F32, DDPC_SUM));
                OK(ddpc_comm_synchronize(c, -1));
                s = now() - t0;
            }
            if (it >= WARM)
                t[it - WARM] = s;
        }
        OK(ddpc_allreduce(world, t, tmax, ITERS, DDPC_F64, DDPC_MAX));
        qsort(tmax, ITERS, sizeof *tmax, cmp_double);
        const double med = 0.5 * (tmax[ITERS / 2 - 1] + tmax[ITERS / 2]);
        const double algbw = (double)bytes / med / 1e9;
        const double busbw = size > 1 ? algbw * 2.0 * (size - 1) / size : 0.0;
        if (rank == 0)
            printf("busbw backend=%s ranks=%d bytes=%zu median_us=%.1f algbw_GBps=%.3f "
                   "busbw_GBps=%.3f%s\n", ddpc_backend_name(ddpc_comm_backend(c)), size, bytes,
                   med * 1e6, algbw, busbw, size > 1 ? "" : " (1 rank: no traffic between ranks)");
    }
    if (rank == 0)
        fflush(stdout);
    if (e0)
        CU(cudaEventDestroy(e0));
    if (e1)
        CU(cudaEventDestroy(e1));
    dfree(d);
}

/* ------------------------------------------------------------------ runs */

static void run_backend(ddpc_backend_t be)
{
    ddpc_comm_t c;
    if (!open_comm(be, &c))
        return;
    EXPECT_EQ_INT(ddpc_comm_size(c), size);
    EXPECT_EQ_INT(ddpc_comm_rank(c), rank);
    if (rank == 0) {
        if (on_host)
            printf("gpu_comm: %d rank(s), backend %s on the host\n", size, label);
        else
            printf("gpu_comm: %d rank(s), backend %s on GPU %d\n", size, label, device);
        fflush(stdout);
    }

    MAXN = (size_t)size * BIG_PER_RANK + 16;
    dX = dalloc(MAXN * 4), dY = dalloc(MAXN * 4);
    hX = halloc(MAXN * 4), hY = halloc(MAXN * 4), hW = halloc(MAXN * 4);
    hP = palloc(MAXN * 4);

    static const size_t counts[] = {1, 1000, (3 << 20) + 7, (5 << 20) + 3};
    for (size_t k = 0; k < sizeof counts / sizeof *counts; k++)
        check_allreduce_f32(c, counts[k]);
    check_allreduce_random_avg(c, (3 << 20) + 7);
    check_allreduce_i32(c, 1000);
    check_allreduce_i32(c, (3 << 20) + 7);
    check_allreduce_bf16(c, 1000);
    check_allreduce_bf16(c, (3 << 20) + 7);
    check_broadcast(c, 1000);
    check_broadcast(c, (5 << 20) + 3);
    check_allgather(c, 1000);
    check_allgather(c, BIG_PER_RANK);
    check_reduce_scatter(c, 1000);
    check_reduce_scatter(c, BIG_PER_RANK);
    check_two_in_flight(c, (3 << 20) + 7, 1000);
    check_stream_order(c, (3 << 20) + 7);
    check_synchronize(c, (3 << 20) + 7);
    check_graph(c, (3 << 20) + 7);

    const char *b = getenv("GPU_COMM_BENCH");
    if (b && !strcmp(b, "1"))
        bench(c);

    OK(ddpc_comm_synchronize(c, -1));
    ddpc_comm_destroy(c);
    dfree(dX), dfree(dY), free(hX), free(hY), free(hW), pfree(hP);
}

/* Rank 1 skips an iallreduce that the others issue: their wait times out
 * and names it. The others' operation stays queued on their progress
 * threads (blocked in MPI with no partner), so to end cleanly rank 1 issues
 * it late, after a host barrier on the world communicator (a different MPI
 * communicator, so it is not blocked by the pending one) that says the
 * others have timed out; every handle then completes: a timed-out handle is
 * not freed and may be waited for again. */
static void check_timeout(void)
{
    snprintf(label, sizeof label, "%s", on_host ? "mpi, timeout" : "mpi-staged, timeout");
    enum { N = 1000 };
    ddpc_comm_t c;
    OK(make_comm(DDPC_BACKEND_MPI, &c));
    float *d = dalloc(N * 4), *h = halloc(N * 4), *w = halloc(N * 4);
    for (size_t i = 0; i < N; i++)
        h[i] = ival(i, rank, 14);
    upload(d, h, N * 4);
    ddpc_work_t work = NULL;
    if (rank != 1) {
        OK(ddpc_iallreduce(c, d, d, N, DDPC_F32, DDPC_SUM, &work));
        const double t0 = now();
        ddpc_status_t st = ddpc_work_wait(work, 2.0);
        const double el = now() - t0;
        if (st != DDPC_ERR_TIMEOUT) {
            /* the handle is gone (or never completes): rank 1's late call
             * would have no partner; nothing sane is left to do */
            char m[1400];
            snprintf(m, sizeof m, "expected DDPC_ERR_TIMEOUT, got %s: %s", ddpc_strerror(st),
                     ddpc_last_error(rt));
            die(__FILE__, __LINE__, "ddpc_work_wait(work, 2.0)", m);
        }
        if (!strstr(ddpc_last_error(rt), "allreduce #"))
            FAILF("timeout message does not name \"allreduce #\": %s", ddpc_last_error(rt));
        if (!(el >= 1.9 && el <= 5.0))
            FAILF("ddpc_work_wait(work, 2.0) returned DDPC_ERR_TIMEOUT after %.3f s, expected "
                  "2 s (+3 s)", el);
        if (rank == 0) {
            printf("gpu_comm: timeout after %.2f s, as expected: %s\n", el, ddpc_last_error(rt));
            fflush(stdout);
        }
        int done = 1;
        EXPECT_STATUS(ddpc_work_test(work, &done), DDPC_OK);
        EXPECT_EQ_INT(done, 0);
    }
    OK(ddpc_barrier(world)); /* every rank but 1 has timed out */
    if (rank == 1) {
        EXPECT_EQ_INT(ddpc_comm_seq(c), 0);
        OK(ddpc_iallreduce(c, d, d, N, DDPC_F32, DDPC_SUM, &work));
    }
    OK(ddpc_work_wait(work, 30));
    download(w, d, N * 4);
    for (size_t i = 0; i < N; i++)
        h[i] = sum_over_ranks(i, 14);
    EXPECT_F32("the timed-out allreduce, completed late", w, h, N, 0);
    EXPECT_EQ_INT(ddpc_comm_seq(c), 1);
    OK(ddpc_comm_synchronize(c, 30));
    ddpc_comm_destroy(c);
    dfree(d), free(h), free(w);
}

/* The cases: each backend, then (2 or more ranks) the timeout, last. */
static void cases(void)
{
    each_backend(run_backend);
    if (size >= 2)
        check_timeout();
}

int main(int argc, char **argv)
{
    return gpu_test_main("gpu_comm", argc, argv, cases);
}
