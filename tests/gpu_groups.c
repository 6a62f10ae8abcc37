/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu_groups.c: communicators over some ranks and point-to-point transfers
 * on device memory, under 1, 2 and 4 MPI ranks, for the backends
 * mpi-staged and nccl (nccl where every rank has a GPU of its own: with the
 * emulation, DDPC_EMU_DEVICES=4). Plain C with its own checks, as
 * gpu_comm.c; not a Check suite. What it checks, with exact values (small
 * integers, as int32 or float32) copied in and out of cudaMalloc'd buffers:
 *  - ddpc_comm_split of the device world into even and odd ranks with
 *    reversed keys, and one with rank 0 in DDPC_COLOR_NONE: sizes, ranks,
 *    ddpc_comm_world_rank, the backend and device, an allreduce on each, and
 *    a split of the even/odd group (its own device exchanges); on nccl
 *    twice, through ncclCommSplit and with DDPC_NCCL_SPLIT=0 (the new
 *    communicator's unique id through the parent);
 *  - ddpc_comm_grid (2 x 2 at 4 ranks, else 1 x N): sizes, ranks, sums;
 *  - a ring in one ddpc_p2p_batch of 1, 5000 and 3<<20 float32 (past
 *    mpi-staged's 1 MiB slots); a pair exchange with ddpc_send/ddpc_recv
 *    (even ranks send first); the same with isend/irecv handles;
 *  - ddpc_alltoall, ddpc_gather and ddpc_scatter (root size-1), ddpc_reduce
 *    SUM and AVG (root size-1 out of place, and in place at root 0);
 *  - (2 or more ranks, last) mpi-staged: on a pair {0,1} split off the
 *    world, rank 0's isend of 1<<20 int32 without its receive:
 *    ddpc_work_wait(w, 1.0) returns DDPC_ERR_TIMEOUT naming "from rank 0 to
 *    rank 1"; then rank 1 receives late and the send completes.
 * `gpu_groups timeout-nccl` (tests/gpu-groups-timeout.sh, a process run of
 * its own: the watchdog aborts every NCCL communicator of the process) does
 * the same on nccl: the wait returns at once, the watchdog aborts within 1 s
 * (DDPC_TIMEOUT 10 unless set), and rank 0's next call is DDPC_ERR_TIMEOUT
 * naming the send and both ranks; rank 1 never receives, nothing hangs.
 * Without a usable CUDA device it is skipped (exit 77 on every rank);
 * GPU_TEST_ON_HOST=1 runs the same on host memory (backend mpi). */
#include "gputest.h"

#include <math.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ checks */

#define EXPECT_IN(msg, part)                                                                   \
    do {                                                                                       \
        if (!strstr((msg), (part)))                                                            \
            FAILF("message does not name \"%s\": %s", (part), (msg));                          \
    } while (0)

/* ------------------------------------------------------------------ memory */

/* Device memory filled with 0xff bytes (NaN as float32, -1 as int32): what
 * no transfer writes. */
static void dpoison(void *d, size_t bytes)
{
    if (on_host) {
        memset(d, 0xff, bytes);
        return;
    }
    CU(cudaMemsetAsync(d, 0xff, bytes, strm));
    CU(cudaStreamSynchronize(strm));
}

/* ------------------------------------------------------------------ values */

/* Element i of world rank r in case salt: an integer below 2^20, exact in
 * float32, and so are sums of up to 16 ranks. */
static float val(int r, size_t i, unsigned salt)
{
    return (float)((int)((i * 7 + salt * 131) % 9973) + 10000 * r + 100000 * (int)(salt % 8));
}

/* Buffers of one backend's run: device dX, dY; host hX, hY, hW. MAXN
 * float32 each. */
enum { BIG = 3 << 20 };
static size_t MAXN;
static float *dX, *dY, *hX, *hY, *hW;

/* ------------------------------------------------------------------ groups */

/* c's members are world ranks want[0..n): size, ranks, world ranks, the
 * parent's backend and device, and an allreduce of 1000 float32 on it. */
static void check_members(ddpc_comm_t c, ddpc_comm_t parent, const int *want, int n,
                          const char *what)
{
    char w[160];
    if (!c) {
        FAILF("%s: no communicator", what);
        return;
    }
    EXPECT_EQ_INT(ddpc_comm_size(c), n);
    int me = -1;
    for (int i = 0; i < n; i++)
        if (want[i] == rank)
            me = i;
    EXPECT_EQ_INT(ddpc_comm_rank(c), me);
    for (int i = 0; i < n; i++)
        if (ddpc_comm_world_rank(c, i) != want[i])
            FAILF("%s: ddpc_comm_world_rank(c, %d) = %d, expected %d", what, i,
                  ddpc_comm_world_rank(c, i), want[i]);
    EXPECT_EQ_INT(ddpc_comm_world_rank(c, n), -1);
    EXPECT_EQ_INT(ddpc_comm_world_rank(c, -1), -1);
    EXPECT_EQ_INT(ddpc_comm_backend(c), ddpc_comm_backend(parent));
    EXPECT_EQ_INT(ddpc_comm_device(c), ddpc_comm_device(parent));
    const size_t N = 1000;
    for (size_t i = 0; i < N; i++) {
        hX[i] = val(rank, i, 1);
        hW[i] = 0;
        for (int k = 0; k < n; k++)
            hW[i] += val(want[k], i, 1);
    }
    upload(dX, hX, N * 4);
    dpoison(dY, N * 4);
    OK(ddpc_allreduce(c, dX, dY, N, DDPC_F32, DDPC_SUM));
    download(hY, dY, N * 4);
    snprintf(w, sizeof w, "%s: allreduce SUM of %zu float32", what, N);
    EXPECT_F32(w, hY, hW, N, 0);
}

static void check_split(ddpc_comm_t dw, const char *how)
{
    char what[160];
    snprintf(label, sizeof label, "%s, split%s", ddpc_backend_name(ddpc_comm_backend(dw)), how);
    /* even and odd world ranks, the keys reversed: the highest rank first */
    ddpc_comm_t c = NULL;
    OK(ddpc_comm_split(dw, rank % 2, -rank, NULL, &c));
    int want[16], n = 0;
    for (int r = size - 1; r >= 0; r--)
        if (r % 2 == rank % 2)
            want[n++] = r;
    snprintf(what, sizeof what, "the %s ranks, highest first", rank % 2 ? "odd" : "even");
    check_members(c, dw, want, n, what);
    /* control all-reduces in host memory: through the group's device path,
     * and over the world's communicator, reduced in rank order */
    for (int w = 0; w < 2; w++) {
        ddpc_comm_t cc = w ? dw : c;
        const int cs = ddpc_comm_size(cc);
        double in[2] = {0.1 * (rank + 1), -(double)rank}, out[2] = {0, 0}, sum = 0;
        int64_t iin = rank, iout = -1;
        OK(ddpc_comm_host_allreduce(cc, in, out, 2, DDPC_F64, DDPC_SUM));
        OK(ddpc_comm_host_allreduce(cc, &iin, &iout, 1, DDPC_I64, DDPC_MAX));
        for (int k = 0; k < cs; k++)
            sum += 0.1 * (ddpc_comm_world_rank(cc, k) + 1);
        /* on a host communicator it is MPI's all-reduce, in MPI's order */
        int near = on_host ? fabs(out[0] - sum) <= 1e-15 : out[0] == sum;
        if (!near || iout != (w ? size - 1 : want[0]))
            FAILF("ddpc_comm_host_allreduce over %s: sum %.17g (expected %.17g), max %lld "
                  "(expected %d)", w ? "the world" : what, out[0], sum, (long long)iout,
                  w ? size - 1 : want[0]);
    }
    if (ddpc_comm_host_allreduce(c, hX, hY, 1, DDPC_BF16, DDPC_SUM) != DDPC_ERR_UNSUPPORTED)
        FAILF("ddpc_comm_host_allreduce took bf16");
    /* a split of that group (its exchanges go through the group's own
     * device path): its rank 0 in none, the others by reversed keys */
    const int cr = ddpc_comm_rank(c), cn = ddpc_comm_size(c);
    ddpc_comm_t g = (ddpc_comm_t)&g; /* must become NULL at the group's rank 0 */
    OK(ddpc_comm_split(c, cr == 0 ? DDPC_COLOR_NONE : 0, -cr, NULL, &g));
    if (cr == 0) {
        if (g)
            FAILF("a split of a split, DDPC_COLOR_NONE: got a communicator, expected NULL");
    } else {
        int w2[16], m = 0;
        for (int k = cn - 1; k >= 1; k--)
            w2[m++] = want[k];
        check_members(g, c, w2, m, "a split of that group, without its rank 0");
        ddpc_comm_destroy(g);
    }
    ddpc_comm_destroy(c);
    /* rank 0 in none, the others in one by key 0: parent order */
    c = (ddpc_comm_t)&c; /* must become NULL at rank 0 */
    OK(ddpc_comm_split(dw, rank == 0 ? DDPC_COLOR_NONE : 7, 0, NULL, &c));
    if (rank == 0) {
        if (c)
            FAILF("DDPC_COLOR_NONE: got a communicator, expected NULL");
    } else {
        for (n = 0; n < size - 1; n++)
            want[n] = n + 1;
        check_members(c, dw, want, n, "ranks 1.. (rank 0 in DDPC_COLOR_NONE)");
        ddpc_comm_destroy(c);
    }
}

static void check_grid(ddpc_comm_t dw)
{
    snprintf(label, sizeof label, "%s, grid", ddpc_backend_name(ddpc_comm_backend(dw)));
    const int nrows = size == 4 ? 2 : 1, ncols = size / nrows;
    ddpc_comm_t row = NULL, col = NULL;
    OK(ddpc_comm_grid(dw, nrows, ncols, NULL, &row, &col));
    const int r = rank / ncols, q = rank % ncols;
    int want[16];
    char what[96];
    for (int k = 0; k < ncols; k++)
        want[k] = r * ncols + k;
    snprintf(what, sizeof what, "row %d of a %d x %d grid", r, nrows, ncols);
    check_members(row, dw, want, ncols, what);
    for (int k = 0; k < nrows; k++)
        want[k] = k * ncols + q;
    snprintf(what, sizeof what, "column %d of a %d x %d grid", q, nrows, ncols);
    check_members(col, dw, want, nrows, what);
    ddpc_comm_destroy(row);
    ddpc_comm_destroy(col);
}

/* ------------------------------------------------------------------ point-to-point */

/* Send to the next rank and receive from the previous, in one batch. */
static void check_ring(ddpc_comm_t c, size_t n)
{
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (size_t i = 0; i < n; i++) {
        hX[i] = val(rank, i, 2);
        hW[i] = val(prev, i, 2);
    }
    upload(dX, hX, n * 4);
    dpoison(dY, n * 4);
    ddpc_p2p_op_t ops[2] = {{1, next, dX, n, DDPC_F32}, {0, prev, dY, n, DDPC_F32}};
    OK(ddpc_p2p_batch(c, ops, 2, NULL));
    download(hY, dY, n * 4);
    char what[128];
    snprintf(what, sizeof what, "ring of %zu float32 in one batch, from rank %d", n, prev);
    EXPECT_F32(what, hY, hW, n, 0);
}

/* Pairs (0,1), (2,3): the even rank sends first, then receives; blocking
 * calls (handles: isend/irecv, waited for in the other order). */
static void check_pair(ddpc_comm_t c, size_t n, int handles)
{
    const int peer = rank ^ 1;
    if (peer >= size)
        return;
    for (size_t i = 0; i < n; i++) {
        hX[i] = val(rank, i, 3);
        hW[i] = val(peer, i, 3);
    }
    upload(dX, hX, n * 4);
    dpoison(dY, n * 4);
    if (!handles) {
        if (rank % 2 == 0) {
            OK(ddpc_send(c, dX, n, DDPC_F32, peer));
            OK(ddpc_recv(c, dY, n, DDPC_F32, peer));
        } else {
            OK(ddpc_recv(c, dY, n, DDPC_F32, peer));
            OK(ddpc_send(c, dX, n, DDPC_F32, peer));
        }
    } else {
        ddpc_work_t ws = NULL, wr = NULL;
        if (rank % 2 == 0) {
            OK(ddpc_isend(c, dX, n, DDPC_F32, peer, &ws));
            OK(ddpc_irecv(c, dY, n, DDPC_F32, peer, &wr));
        } else {
            OK(ddpc_irecv(c, dY, n, DDPC_F32, peer, &wr));
            OK(ddpc_isend(c, dX, n, DDPC_F32, peer, &ws));
        }
        OK(ddpc_comm_synchronize(c, -1));
        int done = 0;
        EXPECT_STATUS(ddpc_work_test(wr, &done), DDPC_OK);
        EXPECT_EQ_INT(done, 1);
        OK(ddpc_work_wait(wr, -1));
        OK(ddpc_work_wait(ws, -1));
    }
    download(hY, dY, n * 4);
    char what[128];
    snprintf(what, sizeof what, "%s of %zu float32 with rank %d",
             handles ? "isend/irecv" : "send/recv", n, peer);
    EXPECT_F32(what, hY, hW, n, 0);
}

static void check_p2p(ddpc_comm_t dw)
{
    snprintf(label, sizeof label, "%s, p2p", ddpc_backend_name(ddpc_comm_backend(dw)));
    if (size < 2) {
        ddpc_work_t w = NULL; /* no peer but itself: refused */
        EXPECT_STATUS(ddpc_isend(dw, dX, 1, DDPC_F32, 0, &w), DDPC_ERR_INVALID);
        return;
    }
    static const size_t counts[] = {1, 5000, BIG};
    for (size_t k = 0; k < sizeof counts / sizeof *counts; k++)
        check_ring(dw, counts[k]);
    check_pair(dw, 5000, 0);
    check_pair(dw, BIG, 0);
    check_pair(dw, 5000, 1);
    check_pair(dw, BIG, 1);
}

/* ------------------------------------------------------------------ collectives */

/* Rank r's block p (n elements) of the alltoall's input. */
static void check_alltoall(ddpc_comm_t c, size_t n)
{
    for (int p = 0; p < size; p++)
        for (size_t i = 0; i < n; i++) {
            hX[(size_t)p * n + i] = val(rank, (size_t)p * n + i, 4);
            hW[(size_t)p * n + i] = val(p, (size_t)rank * n + i, 4);
        }
    upload(dX, hX, (size_t)size * n * 4);
    dpoison(dY, (size_t)size * n * 4);
    OK(ddpc_alltoall(c, dX, dY, n, DDPC_F32));
    download(hY, dY, (size_t)size * n * 4);
    char what[96];
    snprintf(what, sizeof what, "alltoall of %zu float32 per block", n);
    EXPECT_F32(what, hY, hW, (size_t)size * n, 0);
}

static void check_gather_scatter(ddpc_comm_t c, size_t n)
{
    const int root = size - 1;
    char what[96];
    /* gather: others' receive buffer NULL */
    for (size_t i = 0; i < n; i++)
        hX[i] = val(rank, i, 5);
    upload(dX, hX, n * 4);
    dpoison(dY, (size_t)size * n * 4);
    OK(ddpc_gather(c, dX, rank == root ? dY : NULL, n, DDPC_F32, root));
    if (rank == root) {
        for (int p = 0; p < size; p++)
            for (size_t i = 0; i < n; i++)
                hW[(size_t)p * n + i] = val(p, i, 5);
        download(hY, dY, (size_t)size * n * 4);
        snprintf(what, sizeof what, "gather of %zu float32 per rank to rank %d", n, root);
        EXPECT_F32(what, hY, hW, (size_t)size * n, 0);
    }
    /* scatter: others' send buffer NULL */
    if (rank == root) {
        for (int p = 0; p < size; p++)
            for (size_t i = 0; i < n; i++)
                hX[(size_t)p * n + i] = val(p, i, 6);
        upload(dX, hX, (size_t)size * n * 4);
    }
    dpoison(dY, n * 4);
    OK(ddpc_scatter(c, rank == root ? dX : NULL, dY, n, DDPC_F32, root));
    for (size_t i = 0; i < n; i++)
        hW[i] = val(rank, i, 6);
    download(hY, dY, n * 4);
    snprintf(what, sizeof what, "scatter of %zu float32 per rank from rank %d", n, root);
    EXPECT_F32(what, hY, hW, n, 0);
}

static void check_reduce(ddpc_comm_t c, size_t n)
{
    char what[128];
    for (int k = 0; k < 2; k++) {
        const ddpc_redop_t op = k ? DDPC_AVG : DDPC_SUM;
        const char *opn = k ? "AVG" : "SUM";
        /* AVG is exact when size is a power of two (1, 2, 4), else an ulp */
        const double tol = k && (size & (size - 1)) ? 0.125 : 0;
        /* out of place at root size-1; the others' receive buffer NULL */
        int root = size - 1;
        for (size_t i = 0; i < n; i++) {
            hX[i] = val(rank, i, 7 + k);
            float s = 0;
            for (int r = 0; r < size; r++)
                s += val(r, i, 7 + k);
            hW[i] = k ? s / (float)size : s;
        }
        upload(dX, hX, n * 4);
        dpoison(dY, n * 4);
        OK(ddpc_reduce(c, dX, rank == root ? dY : NULL, n, DDPC_F32, op, root));
        if (rank == root) {
            download(hY, dY, n * 4);
            snprintf(what, sizeof what, "reduce %s of %zu float32 to rank %d", opn, n, root);
            EXPECT_F32(what, hY, hW, n, tol);
        }
        download(hY, dX, n * 4);
        snprintf(what, sizeof what, "reduce %s of %zu float32: the send buffer", opn, n);
        EXPECT_F32(what, hY, hX, n, 0);
        /* in place at root 0: the others' buffers are their inputs, left alone */
        root = 0;
        OK(ddpc_reduce(c, dX, dX, n, DDPC_F32, op, root));
        download(hY, dX, n * 4);
        snprintf(what, sizeof what, "reduce %s of %zu float32 in place %s rank 0", opn, n,
                 rank == root ? "at" : "beside");
        EXPECT_F32(what, hY, rank == root ? hW : hX, n, rank == root ? tol : 0);
    }
}

static void check_collectives(ddpc_comm_t dw)
{
    snprintf(label, sizeof label, "%s, collectives", ddpc_backend_name(ddpc_comm_backend(dw)));
    check_alltoall(dw, 1000);
    check_alltoall(dw, BIG / 4); /* 12 MiB in all: past half of mpi-staged's 16 MiB stage */
    check_gather_scatter(dw, 1000);
    check_gather_scatter(dw, BIG / 4);
    check_reduce(dw, 1000);
    check_reduce(dw, BIG);
}

/* ------------------------------------------------------------------ runs */

static void run_backend(ddpc_backend_t be)
{
    ddpc_comm_t dw;
    if (!open_comm(be, &dw))
        return;
    if (rank == 0) {
        printf("gpu_groups: %d rank(s), backend %s%s\n", size, label,
               on_host ? " on the host" : "");
        fflush(stdout);
    }
    /* the largest: a ring of BIG, alltoall and gather of BIG / 4 per rank */
    MAXN = (size_t)(size > 4 ? size : 4) * (BIG / 4) + 16;
    dX = dalloc(MAXN * 4), dY = dalloc(MAXN * 4);
    hX = halloc(MAXN * 4), hY = halloc(MAXN * 4), hW = halloc(MAXN * 4);

    check_split(dw, "");
    if (ddpc_comm_backend(dw) == DDPC_BACKEND_NCCL) {
        setenv("DDPC_NCCL_SPLIT", "0", 1); /* the unique id through the parent */
        check_split(dw, " (DDPC_NCCL_SPLIT=0)");
        unsetenv("DDPC_NCCL_SPLIT");
    }
    check_grid(dw);
    check_p2p(dw);
    check_collectives(dw);

    snprintf(label, sizeof label, "%s, end", ddpc_backend_name(ddpc_comm_backend(dw)));
    EXPECT_STATUS(ddpc_comm_status(dw), DDPC_OK);
    OK(ddpc_comm_synchronize(dw, -1));
    ddpc_comm_destroy(dw);
    dfree(dX), dfree(dY), free(hX), free(hY), free(hW);
}

/* The pair {0,1} of a device world of backend be, split off it; ranks 2..
 * get NULL. */
static ddpc_comm_t pair_of(ddpc_comm_t dw)
{
    ddpc_comm_t pair = NULL;
    OK(ddpc_comm_split(dw, rank < 2 ? 0 : DDPC_COLOR_NONE, 0, NULL, &pair));
    if ((rank < 2) != (pair != NULL))
        FAILF("pair {0,1}: communicator %p at rank %d", (void *)pair, rank);
    return pair;
}

enum { TN = 1 << 20 }; /* int32: 4 MiB, above any eager limit */

/* mpi-staged: rank 0's send without its receive times out in the wait;
 * then rank 1 receives late (after a host barrier that says rank 0 timed
 * out) and the send completes: a timed-out handle may be waited for again. */
static void check_timeout_staged(void)
{
    snprintf(label, sizeof label, "%s, timeout", on_host ? "mpi" : "mpi-staged");
    ddpc_comm_t dw;
    OK(make_comm(DDPC_BACKEND_MPI, &dw));
    ddpc_comm_t pair = pair_of(dw);
    int32_t *d = dalloc(TN * 4), *h = halloc(TN * 4);
    ddpc_work_t w = NULL;
    if (rank == 0) {
        for (size_t i = 0; i < TN; i++)
            h[i] = (int32_t)i * 3 + 1;
        upload(d, h, TN * 4);
        OK(ddpc_isend(pair, d, TN, DDPC_I32, 1, &w));
        const double t0 = now();
        ddpc_status_t st = ddpc_work_wait(w, 1.0);
        const double el = now() - t0;
        if (st != DDPC_ERR_TIMEOUT) {
            /* the handle is gone: rank 1's late receive would have no send */
            char m[1400];
            snprintf(m, sizeof m, "expected DDPC_ERR_TIMEOUT, got %s: %s", ddpc_strerror(st),
                     ddpc_last_error(rt));
            die(__FILE__, __LINE__, "ddpc_work_wait(w, 1.0)", m);
        }
        const char *m = ddpc_last_error(rt);
        EXPECT_IN(m, "send #0 (1048576 x int32) from rank 0 to rank 1");
        EXPECT_IN(m, "matching receive");
        if (!(el >= 0.9 && el <= 4.0))
            FAILF("ddpc_work_wait(w, 1.0) returned DDPC_ERR_TIMEOUT after %.3f s, expected 1 s "
                  "(+3 s)", el);
        printf("gpu_groups: timeout after %.2f s, as expected: %s\n", el, m);
        fflush(stdout);
        int done = 1;
        EXPECT_STATUS(ddpc_work_test(w, &done), DDPC_OK);
        EXPECT_EQ_INT(done, 0);
    }
    OK(ddpc_barrier(world)); /* rank 0 has timed out */
    if (rank == 1) {
        dpoison(d, TN * 4);
        OK(ddpc_recv(pair, d, TN, DDPC_I32, 0));
        download(h, d, TN * 4);
        size_t bad = 0;
        for (size_t i = 0; i < TN; i++)
            bad += h[i] != (int32_t)i * 3 + 1;
        if (bad)
            FAILF("the late receive: %zu of %d int32 differ", bad, TN);
    }
    if (rank == 0)
        OK(ddpc_work_wait(w, 30));
    if (pair)
        OK(ddpc_comm_synchronize(pair, 30));
    ddpc_comm_destroy(pair);
    ddpc_comm_destroy(dw);
    dfree(d), free(h);
}

/* nccl (its own process run): the wait returns at once; the watchdog
 * aborts every NCCL communicator of rank 0 within the wait's 1 s (well
 * before DDPC_TIMEOUT), and rank 0's next call says why. Rank 1 never
 * posts the receive (its side stays healthy) and nobody waits on the
 * devices for the other: the ranks meet on the host world only. */
static void check_timeout_nccl(void)
{
    snprintf(label, sizeof label, "nccl, timeout");
    int32_t mine = ndev_least >= ddpc_world(rt)->local_size, all = mine;
    OK(ddpc_allreduce(world, &mine, &all, 1, DDPC_I32, DDPC_MIN));
    if (size < 2 || on_host || !all) {
        if (rank == 0)
            printf("gpu_groups: timeout-nccl: skipped: %s\n",
                   size < 2 ? "needs 2 ranks" : on_host ? "GPU_TEST_ON_HOST=1"
                                                        : "fewer GPUs than ranks on a node");
        skip_all = 1;
        return;
    }
    ddpc_comm_t dw;
    if (!open_comm(DDPC_BACKEND_NCCL, &dw)) {
        skip_all = 1;
        return;
    }
    snprintf(label, sizeof label, "nccl, timeout");
    ddpc_comm_t pair = pair_of(dw);
    int32_t *d = dalloc(TN * 4), *h = halloc(TN * 4);
    upload(d, h, TN * 4); /* zeros */
    OK(ddpc_barrier(world)); /* every rank has its pair before rank 0's clock starts */
    if (rank == 0) {
        ddpc_work_t w = NULL;
        OK(ddpc_isend(pair, d, TN, DDPC_I32, 1, &w));
        const double t0 = now();
        EXPECT_STATUS(ddpc_work_wait(w, 1.0), DDPC_OK); /* stream-ordered: no host wait */
        const double t_wait = now() - t0;
        if (t_wait > 0.5)
            FAILF("ddpc_work_wait(w, 1.0) on nccl blocked the host for %.3f s", t_wait);
        ddpc_status_t st = DDPC_OK;
        while ((st = ddpc_comm_status(pair)) == DDPC_OK && now() - t0 < 20)
            usleep(10000);
        const double el = now() - t0;
        EXPECT_STATUS(st, DDPC_ERR_TIMEOUT);
        if (!(el >= 0.9 && el <= 4.0))
            FAILF("the watchdog aborted after %.3f s, expected 1 s (the wait's timeout, +3 s)",
                  el);
        /* the next call: refused with the watchdog's verdict */
        st = ddpc_send(pair, d, 1, DDPC_I32, 1);
        EXPECT_STATUS(st, DDPC_ERR_TIMEOUT);
        const char *m = ddpc_last_error(rt);
        EXPECT_IN(m, "send #0 (1048576 x int32) from rank 0 to rank 1");
        EXPECT_IN(m, "did not complete");
        EXPECT_IN(m, "watchdog");
        printf("gpu_groups: nccl: the watchdog aborted after %.2f s, as expected; the next "
               "send: %s\n", el, m);
        fflush(stdout);
        /* every NCCL communicator of the process is aborted */
        EXPECT_STATUS(ddpc_comm_status(dw), DDPC_ERR_REMOTE);
    }
    OK(ddpc_barrier(world));
    if (rank != 0) {
        EXPECT_STATUS(ddpc_comm_status(dw), DDPC_OK);
        if (pair)
            EXPECT_STATUS(ddpc_comm_status(pair), DDPC_OK);
    }
    ddpc_comm_destroy(pair);
    ddpc_comm_destroy(dw);
    dfree(d), free(h);
}

static int timeout_nccl; /* argument "timeout-nccl" */

/* The cases: each backend, then (2 or more ranks) mpi-staged's timeout,
 * last; or, alone, nccl's timeout. */
static void cases(void)
{
    if (timeout_nccl) {
        check_timeout_nccl();
        return;
    }
    each_backend(run_backend);
    if (size >= 2)
        check_timeout_staged();
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "timeout-nccl")) {
        timeout_nccl = 1;
        setenv("DDPC_TIMEOUT", "10", 0); /* every other wait of the run; the case uses 1 s */
    } else if (argc > 1) {
        fprintf(stderr, "usage: gpu_groups [timeout-nccl]\n");
        return 2;
    }
    return gpu_test_main("gpu_groups", argc, argv, cases);
}
