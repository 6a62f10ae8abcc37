/* SPDX-License-Identifier: BSD-3-Clause */
/* emu_nccl.c: the emulated NCCL (tests/emu/nccl.c) on 4 ranks (mpiexec,
 * tests/emu/emu_nccl.mpi), for process groups and pipelines: communicators
 * over some ranks only ({0,2} beside {1,3}), ncclCommSplit (reversed keys,
 * NOCOLOR, non-blocking), send/receive in groups (a ring, a pair both ways,
 * to self, nested) and alone, ncclReduce to a non-zero root, the refusals,
 * and that sends and receives count for DDPC_EMU_NCCL_FAIL. Values are
 * integers or exactly representable floats, compared exactly. Linked with
 * libddpc-emu only; one emulated device per rank (DDPC_EMU_DEVICES=4).
 * Built with -DEMU_NCCL_FORK (tests/emu/emu_nccl_fork) it is the check
 * that the emulated NCCL needs no MPI: no MPI call, no launcher; it forks
 * 4 ranks (argv[1]: 2-4) that get the unique id through pipes, and checks
 * every collective (int32, int64, float32, bf16), that the reductions are
 * in rank order and bitwise the same on every rank, a split, a ring past
 * the socket buffers, and that a rank that exits makes the others' next
 * all-reduce fail with ncclRemoteError instead of hanging. */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef EMU_NCCL_FORK
#include <check.h>
#include <mpi.h>

static int me, np; /* world rank and size */

#define CU(x) ck_assert_msg((x) == cudaSuccess, "rank %d: %s failed", me, #x)
/* x must answer ncclSuccess (or ncclInProgress: then c is polled to the
 * end; NC(c, ncclInProgress) polls c until it settles) */
#define NC(c, x) nc_ok((c), (x), #x, __LINE__)

static void nc_ok(ncclComm_t c, ncclResult_t r, const char *what, int line)
{
    while (r == ncclInProgress && c) {
        ncclResult_t a = ncclSuccess;
        ck_assert_int_eq(ncclCommGetAsyncError(c, &a), ncclSuccess);
        r = a;
    }
    ck_assert_msg(r == ncclSuccess, "rank %d, line %d: %s -> %s: %s", me, line, what,
                  ncclGetErrorString(r), ncclGetLastError(c));
}

/* A communicator of the ranks of sub (an MPI communicator carrying the
 * id): the id from sub's rank `creator`, nccl rank = rank(sub) rotated so
 * that the creator is rank `creator_rank`. blocking 0: non-blocking. */
static ncclComm_t make_comm(MPI_Comm sub, int creator, int creator_rank, int blocking)
{
    int r, n;
    MPI_Comm_rank(sub, &r);
    MPI_Comm_size(sub, &n);
    ncclUniqueId id;
    if (r == creator)
        NC(NULL, ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, creator, sub);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = blocking;
    ncclComm_t c = NULL;
    int rank = ((r - creator + n) % n + creator_rank) % n;
    ncclResult_t res = ncclCommInitRankConfig(&c, n, id, rank, &cfg);
    ck_assert_msg(res == ncclSuccess || res == ncclInProgress, "rank %d: init: %s: %s", me,
                  ncclGetErrorString(res), ncclGetLastError(NULL));
    NC(c, res);
    int got;
    NC(c, ncclCommUserRank(c, &got));
    ck_assert_int_eq(got, rank);
    NC(c, ncclCommCount(c, &got));
    ck_assert_int_eq(got, n);
    return c;
}

/* n int32 on the device, set from host h (NULL: left poisoned) */
static int32_t *dev_i32(size_t n, const int32_t *h)
{
    int32_t *d = NULL;
    CU(cudaMalloc((void **)&d, n * sizeof *d));
    if (h)
        CU(cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice));
    return d;
}

static void to_host(void *h, const void *d, size_t bytes, cudaStream_t s)
{
    CU(cudaStreamSynchronize(s));
    CU(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* allreduce of v (sum, int32) over c */
static int32_t allreduce_i32(ncclComm_t c, int32_t v)
{
    int32_t *d = dev_i32(1, &v), out = -1;
    NC(c, ncclAllReduce(d, d, 1, ncclInt32, ncclSum, c, NULL));
    to_host(&out, d, sizeof out, NULL);
    CU(cudaFree(d));
    return out;
}

static void finish_comm(ncclComm_t c)
{
    CU(cudaDeviceSynchronize());
    NC(c, ncclCommFinalize(c));
    NC(c, ncclCommDestroy(c));
}

/* ------------------------------------------------------------------ init */

START_TEST(init_world_and_halves)
{
    ncclComm_t w = make_comm(MPI_COMM_WORLD, 0, 0, 1);
    ck_assert_int_eq(allreduce_i32(w, me + 1), 10);
    /* {0,2} from world rank 0 and {1,3} from world rank 3 (its nccl rank 0),
       at the same time, neither pair's ranks calling the other's init */
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, me % 2, me, &half);
    int odd = me % 2;
    ncclComm_t h = make_comm(half, odd ? 1 : 0, 0, 1);
    int r;
    NC(h, ncclCommUserRank(h, &r));
    ck_assert_int_eq(r, odd ? (me == 3 ? 0 : 1) : me / 2);
    ck_assert_int_eq(allreduce_i32(h, me), odd ? 1 + 3 : 0 + 2);
    /* and non-blocking, from the other end of each pair */
    ncclComm_t hn = make_comm(half, odd ? 0 : 1, 1, 0);
    ck_assert_int_eq(allreduce_i32(hn, 10 * me), odd ? 40 : 20);
    finish_comm(hn);
    finish_comm(h);
    finish_comm(w);
    MPI_Comm_free(&half);
}
END_TEST

/* An id whose creator (world rank 0) is no member: {1,2} fail after
 * DDPC_EMU_NCCL_INIT_TIMEOUT, saying why; a one-rank communicator of
 * another rank's id fails at once. (Their joins stay unanswered in rank
 * 0's listener of the id.) */
START_TEST(init_creator_not_member)
{
    ncclUniqueId id;
    if (me == 0)
        NC(NULL, ncclGetUniqueId(&id));
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    setenv("DDPC_EMU_NCCL_INIT_TIMEOUT", "1", 1);
    if (me == 1 || me == 2) {
        ncclComm_t c = (ncclComm_t)1;
        ncclResult_t r = ncclCommInitRank(&c, 2, id, me - 1);
        ck_assert_int_eq(r, ncclInvalidUsage);
        ck_assert_ptr_null(c);
        ck_assert_msg(strstr(ncclGetLastError(NULL), "must be a rank of the communicator"),
                      "rank %d: %s", me, ncclGetLastError(NULL));
    }
    if (me == 3) {
        ncclComm_t c;
        ck_assert_int_eq(ncclCommInitRank(&c, 1, id, 0), ncclInvalidUsage);
        ck_assert_msg(strstr(ncclGetLastError(NULL), "must be a rank of the communicator"),
                      "rank %d: %s", me, ncclGetLastError(NULL));
    }
    unsetenv("DDPC_EMU_NCCL_INIT_TIMEOUT");
    MPI_Barrier(MPI_COMM_WORLD);
}
END_TEST

/* ------------------------------------------------------------------ split */

START_TEST(split)
{
    ncclComm_t w = make_comm(MPI_COMM_WORLD, 0, 0, 1);
    /* odd/even with reversed keys: even {2, 0}, odd {3, 1} */
    ncclComm_t s = NULL;
    NC(w, ncclCommSplit(w, me % 2, -me, &s, NULL));
    ck_assert_ptr_nonnull(s);
    int r, n;
    NC(s, ncclCommUserRank(s, &r));
    NC(s, ncclCommCount(s, &n));
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(r, (me < 2 ? 1 : 0));
    ck_assert_int_eq(allreduce_i32(s, me + 1), me % 2 ? 2 + 4 : 1 + 3);
    /* world rank 0 in none; {1,2,3} non-blocking, by key then parent rank */
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t t = (ncclComm_t)1;
    ncclResult_t res = ncclCommSplit(w, me == 0 ? NCCL_SPLIT_NOCOLOR : 5, me == 3 ? 0 : 1, &t, &cfg);
    if (me == 0) {
        NC(w, res);
        ck_assert_ptr_null(t);
    } else {
        ck_assert_ptr_nonnull(t);
        NC(t, res);
        NC(t, ncclCommUserRank(t, &r));
        NC(t, ncclCommCount(t, &n));
        ck_assert_int_eq(n, 3);
        ck_assert_int_eq(r, me == 3 ? 0 : me);
        ck_assert_int_eq(allreduce_i32(t, me + 1), 2 + 3 + 4);
        /* a split of a non-blocking parent inherits its mode (config NULL);
           both may answer ncclInProgress for a while */
        ncclComm_t u = NULL;
        NC(t, ncclCommSplit(t, 0, 0, &u, NULL));
        ck_assert_ptr_nonnull(u);
        NC(u, ncclInProgress);
        ck_assert_int_eq(allreduce_i32(u, 1), 3);
        finish_comm(u);
        finish_comm(t);
    }
    finish_comm(s);
    finish_comm(w);
}
END_TEST

/* ------------------------------------------------------------------ send/receive */

enum { BIG = 1 << 18 }; /* 1 MiB of int32: past the emulation's socket buffers */

static void fill(int32_t *h, size_t n, int32_t base)
{
    for (size_t i = 0; i < n; i++)
        h[i] = base + (int32_t)i;
}

static void expect(const int32_t *h, size_t n, int32_t base, const char *what)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(h[i] == base + (int32_t)i, "rank %d: %s[%zu] = %d, expected %d", me, what, i,
                      h[i], base + (int32_t)i);
}

/* every rank sends to rank+1 and receives from rank-1 in one group, on a
 * blocking and on a non-blocking communicator */
START_TEST(ring)
{
    int32_t *h = malloc(BIG * sizeof *h);
    int32_t *sb = dev_i32(BIG, NULL), *rb = dev_i32(BIG, NULL);
    for (int blocking = 1; blocking >= 0; blocking--) {
        ncclComm_t c = make_comm(MPI_COMM_WORLD, 0, 0, blocking);
        cudaStream_t s;
        CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        fill(h, BIG, 1000 * me + blocking);
        CU(cudaMemcpy(sb, h, BIG * sizeof *h, cudaMemcpyHostToDevice));
        NC(c, ncclGroupStart());
        NC(c, ncclSend(sb, BIG, ncclInt32, (me + 1) % np, c, s));
        NC(c, ncclRecv(rb, BIG, ncclInt32, (me + np - 1) % np, c, s));
        NC(c, ncclGroupEnd());
        to_host(h, rb, BIG * sizeof *h, s);
        expect(h, BIG, 1000 * ((me + np - 1) % np) + blocking, "ring");
        CU(cudaStreamDestroy(s));
        finish_comm(c);
    }
    CU(cudaFree(sb));
    CU(cudaFree(rb));
    free(h);
}
END_TEST

/* pairs {0,1} and {2,3} exchange both ways in one group (each sends
 * first), and each rank with itself; nested groups end at the outermost */
START_TEST(pair_and_self)
{
    ncclComm_t c = make_comm(MPI_COMM_WORLD, 0, 0, 1);
    int peer = me ^ 1;
    int32_t *h = malloc(BIG * sizeof *h);
    int32_t *sb = dev_i32(BIG, NULL), *rb = dev_i32(BIG, NULL), *self = dev_i32(16, NULL);
    fill(h, BIG, 100 * me);
    CU(cudaMemcpy(sb, h, BIG * sizeof *h, cudaMemcpyHostToDevice));
    NC(c, ncclGroupStart());
    NC(c, ncclGroupStart());
    NC(c, ncclSend(sb, BIG, ncclInt32, peer, c, NULL));
    NC(c, ncclGroupEnd()); /* inner: nothing may start yet */
    NC(c, ncclRecv(rb, BIG, ncclInt32, peer, c, NULL));
    NC(c, ncclSend(sb, 16, ncclInt32, me, c, NULL));
    NC(c, ncclRecv(self, 16, ncclInt32, me, c, NULL));
    NC(c, ncclGroupEnd());
    to_host(h, rb, BIG * sizeof *h, NULL);
    expect(h, BIG, 100 * peer, "pair");
    to_host(h, self, 16 * sizeof *h, NULL);
    expect(h, 16, 100 * me, "self");
    CU(cudaFree(sb));
    CU(cudaFree(rb));
    CU(cudaFree(self));
    free(h);
    finish_comm(c);
}
END_TEST

/* ungrouped: 0 -> 1 and 3 -> 2, two sends matched in their order */
START_TEST(ungrouped)
{
    ncclComm_t c = make_comm(MPI_COMM_WORLD, 0, 0, 1);
    int32_t h[64];
    int32_t *a = dev_i32(64, NULL), *b = dev_i32(64, NULL);
    int sender = me == 0 || me == 3, peer = me == 0 ? 1 : me == 1 ? 0 : me == 2 ? 3 : 2;
    if (sender) {
        fill(h, 64, 7000 + me);
        CU(cudaMemcpy(a, h, sizeof h, cudaMemcpyHostToDevice));
        fill(h, 64, 9000 + me);
        CU(cudaMemcpy(b, h, sizeof h, cudaMemcpyHostToDevice));
        NC(c, ncclSend(a, 64, ncclInt32, peer, c, NULL));
        NC(c, ncclSend(b, 64, ncclInt32, peer, c, NULL));
    } else {
        NC(c, ncclRecv(a, 64, ncclInt32, peer, c, NULL));
        NC(c, ncclRecv(b, 64, ncclInt32, peer, c, NULL));
        to_host(h, a, sizeof h, NULL);
        expect(h, 64, 7000 + peer, "first");
        to_host(h, b, sizeof h, NULL);
        expect(h, 64, 9000 + peer, "second");
    }
    CU(cudaStreamSynchronize(NULL)); /* no cudaFree while a send is in flight */
    CU(cudaFree(a));
    CU(cudaFree(b));
    finish_comm(c);
}
END_TEST

START_TEST(p2p_refusals)
{
    ncclComm_t c = make_comm(MPI_COMM_WORLD, 0, 0, 1);
    int32_t *d = dev_i32(4, NULL);
    ck_assert_int_eq(ncclSend(d, 4, ncclInt32, np, c, NULL), ncclInvalidArgument);
    ck_assert_msg(strstr(ncclGetLastError(c), "peer 4 is not a rank"), "%s", ncclGetLastError(c));
    ck_assert_int_eq(ncclRecv(d, 4, ncclInt32, -1, c, NULL), ncclInvalidArgument);
    ck_assert_int_eq(ncclSend(d, (size_t)1 << 31, ncclInt32, 0, c, NULL), ncclInvalidArgument);
    /* to self alone could never complete */
    ck_assert_int_eq(ncclSend(d, 4, ncclInt32, me, c, NULL), ncclInvalidUsage);
    /* in a group: the call and the group's end fail, nothing is enqueued */
    NC(c, ncclGroupStart());
    ck_assert_int_eq(ncclSend(d, 4, ncclInt32, np + 1, c, NULL), ncclInvalidArgument);
    ck_assert_int_eq(ncclGroupEnd(), ncclInvalidArgument);
    ck_assert_int_eq(ncclGroupEnd(), ncclInvalidUsage); /* no group open */
    /* the communicator still works */
    ck_assert_int_eq(allreduce_i32(c, 1), np);
    CU(cudaFree(d));
    finish_comm(c);
}
END_TEST

/* sends and receives take their number in the hooks' order: world rank
 * 1's second operation (its receive) fails asynchronously (rank 0's send
 * stays unreceived in the socket buffers) */
START_TEST(p2p_fail_hook)
{
    MPI_Comm pair;
    MPI_Comm_split(MPI_COMM_WORLD, me / 2, me, &pair);
    setenv("DDPC_EMU_NCCL_FAIL", "1:2", 1);
    ncclComm_t c = make_comm(pair, 0, 0, 1);
    unsetenv("DDPC_EMU_NCCL_FAIL");
    ck_assert_int_eq(allreduce_i32(c, 1), 2); /* #1 */
    int32_t v = 42, *d = dev_i32(1, &v);
    if (me % 2 == 0)
        NC(c, ncclSend(d, 1, ncclInt32, 1, c, NULL)); /* fits the buffers: completes alone */
    else
        NC(c, ncclRecv(d, 1, ncclInt32, 0, c, NULL)); /* #2 */
    CU(cudaStreamSynchronize(NULL));
    ncclResult_t a = ncclSuccess;
    NC(c, ncclCommGetAsyncError(c, &a));
    if (me == 1) {
        ck_assert_int_eq(a, ncclRemoteError);
        ck_assert_msg(strstr(ncclGetLastError(c), "send/receive #2"), "%s", ncclGetLastError(c));
        NC(NULL, ncclCommAbort(c));
    } else {
        ck_assert_int_eq(a, ncclSuccess);
        finish_comm(c);
    }
    CU(cudaFree(d));
    MPI_Comm_free(&pair);
}
END_TEST

/* ------------------------------------------------------------------ reduce */

START_TEST(reduce)
{
    ncclComm_t c = make_comm(MPI_COMM_WORLD, 0, 0, 1);
    const int root = 2;
    enum { N = 1000 };
    int32_t hi[N];
    for (int i = 0; i < N; i++)
        hi[i] = (me + 1) * (i + 1);
    int32_t *si = dev_i32(N, hi), *ri = me == root ? dev_i32(N, NULL) : NULL;
    float hf[N], *df = NULL;
    CU(cudaMalloc((void **)&df, sizeof hf)); /* every buffer before the first operation */
    /* recvbuff is NULL off the root: only the root's is used */
    NC(c, ncclReduce(si, ri, N, ncclInt32, ncclSum, root, c, NULL));
    if (me == root) {
        to_host(hi, ri, sizeof hi, NULL);
        for (int i = 0; i < N; i++)
            ck_assert_int_eq(hi[i], 10 * (i + 1));
    }
    /* avg in place, float32: (1+2+3+4)/4 (i+1) = 2.5 (i+1), exact */
    for (int i = 0; i < N; i++)
        hf[i] = (float)((me + 1) * (i + 1));
    CU(cudaMemcpy(df, hf, sizeof hf, cudaMemcpyHostToDevice));
    NC(c, ncclReduce(df, df, N, ncclFloat32, ncclAvg, root, c, NULL));
    to_host(hf, df, sizeof hf, NULL);
    for (int i = 0; i < N; i++)
        ck_assert_msg(hf[i] == (me == root ? 2.5f * (float)(i + 1) : (float)((me + 1) * (i + 1))),
                      "rank %d: avg[%d] = %g", me, i, (double)hf[i]);
    ck_assert_int_eq(ncclReduce(si, ri, N, ncclInt32, ncclSum, np, c, NULL), ncclInvalidArgument);
    CU(cudaFree(si));
    if (ri)
        CU(cudaFree(ri));
    CU(cudaFree(df));
    finish_comm(c);
}
END_TEST

static Suite *emu_nccl_suite(void)
{
    Suite *s = suite_create("emu_nccl");
    TCase *tc = tcase_create("init");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, init_world_and_halves);
    tcase_add_test(tc, init_creator_not_member);
    suite_add_tcase(s, tc);
    tc = tcase_create("split");
    tcase_add_test(tc, split);
    suite_add_tcase(s, tc);
    tc = tcase_create("send/receive");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, ring);
    tcase_add_test(tc, pair_and_self);
    tcase_add_test(tc, ungrouped);
    tcase_add_test(tc, p2p_refusals);
    tcase_add_test(tc, p2p_fail_hook);
    suite_add_tcase(s, tc);
    tc = tcase_create("reduce");
    tcase_add_test(tc, reduce);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    setenv("DDPC_EMU_DEVICES", "4", 0); /* before the first CUDA call */
    int level = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &level);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    if (np != 4 || level < MPI_THREAD_MULTIPLE) {
        if (me == 0)
            printf("emu_nccl: skipped: needs 4 ranks and MPI_THREAD_MULTIPLE (%d ranks, level %d)\n",
                   np, level);
        MPI_Finalize();
        return 77;
    }
    if (cudaSetDevice(me) != cudaSuccess) {
        fprintf(stderr, "emu_nccl: rank %d: cudaSetDevice(%d) failed: DDPC_EMU_DEVICES=%s\n", me,
                me, getenv("DDPC_EMU_DEVICES"));
        MPI_Abort(MPI_COMM_WORLD, 99);
    }
    SRunner *sr = srunner_create(emu_nccl_suite());
    srunner_set_fork_status(sr, CK_NOFORK); /* Check's fork and MPI don't mix */
    srunner_run_all(sr, me == 0 ? CK_NORMAL : CK_SILENT);
    int nf = srunner_ntests_failed(sr), any = 0;
    if (nf)
        srunner_print(sr, CK_NORMAL);
    srunner_free(sr);
    MPI_Allreduce(&nf, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return any ? 1 : 0;
}

#else /* EMU_NCCL_FORK: without MPI */

#include <sys/wait.h>
#include <unistd.h>

static int me, np, failures; /* this rank, the ranks, the failed checks here */

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "emu_nccl_fork: rank %d, line %d: %s: ", me, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)
#define CU(x) CHECK((x) == cudaSuccess, "%s", "CUDA call failed")
#define NC(x) CHECK((x) == ncclSuccess, "%s", ncclGetLastError(NULL))

static void *dev(size_t bytes, const void *h)
{
    void *d = NULL;
    CU(cudaMalloc(&d, bytes));
    if (h)
        CU(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

static void back(void *h, const void *d, size_t bytes)
{
    CU(cudaStreamSynchronize(NULL));
    CU(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* bf16 by round to nearest even (no NaN here), and back */
static uint16_t bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* rank r's i-th float: not exactly summable, the same from every rank */
static float val(int r, int i)
{
    uint32_t x = (uint32_t)(r * 7919 + i) * 2654435761u;
    return (float)(x >> 8) / (float)(1 << 24) * 3.0f - 1.3f;
}

/* the float sum of every rank's i-th value in rank order 0..np-1 */
static float rank_order_sum(int np, int i)
{
    float want = val(0, i);
    for (int r = 1; r < np; r++)
        want = want + val(r, i);
    return want;
}

enum { N = 1003, BIG = 1 << 18 };

static void collectives(ncclComm_t c)
{
    /* int32 sum, and a count below the ranks (empty chunks) */
    static int32_t hi[N], ho[N];
    for (int i = 0; i < N; i++)
        hi[i] = (me + 1) * (i + 1);
    int32_t *di = dev(sizeof hi, hi);
    NC(ncclAllReduce(di, di, N, ncclInt32, ncclSum, c, NULL));
    back(ho, di, sizeof ho);
    for (int i = 0; i < N; i++)
        CHECK(ho[i] == np * (np + 1) / 2 * (i + 1), "sum[%d] = %d", i, ho[i]);
    CU(cudaMemcpy(di, hi, sizeof hi, cudaMemcpyHostToDevice));
    NC(ncclAllReduce(di, di, np - 1, ncclInt32, ncclMax, c, NULL));
    back(ho, di, (size_t)(np - 1) * sizeof *ho);
    for (int i = 0; i < np - 1; i++)
        CHECK(ho[i] == np * (i + 1), "max[%d] = %d", i, ho[i]);
    /* float32: out of place, rank order, the same bits everywhere */
    static float hf[N], hr[N], all[4 * N];
    for (int i = 0; i < N; i++)
        hf[i] = val(me, i);
    float *sf = dev(sizeof hf, hf), *rf = dev(sizeof hf, NULL), *gf = dev(sizeof all, NULL);
    NC(ncclAllReduce(sf, rf, N, ncclFloat32, ncclSum, c, NULL));
    back(hr, rf, sizeof hr);
    for (int i = 0; i < N; i++) {
        float want = rank_order_sum(np, i);
        CHECK(hr[i] == want, "float sum[%d] = %.9g, in rank order %.9g", i, (double)hr[i],
              (double)want);
    }
    NC(ncclAllGather(rf, gf, N, ncclFloat32, c, NULL));
    back(all, gf, (size_t)np * sizeof hr);
    for (int r = 1; r < np; r++)
        CHECK(!memcmp(all, all + (size_t)r * N, sizeof hr), "rank %d's sum differs from rank 0's",
              r);
    /* avg in place: the sum divided, once */
    CU(cudaMemcpy(sf, hf, sizeof hf, cudaMemcpyHostToDevice));
    NC(ncclAllReduce(sf, sf, N, ncclFloat32, ncclAvg, c, NULL));
    back(hr, sf, sizeof hr);
    for (int i = 0; i < N; i++)
        CHECK(hr[i] == rank_order_sum(np, i) / (float)np, "avg[%d] = %.9g", i, (double)hr[i]);
    /* bf16 sum: rounded after each step, in rank order */
    static uint16_t hb[N], rb[N];
    for (int i = 0; i < N; i++)
        hb[i] = bf16(val(me, i) * 100.0f);
    uint16_t *db = dev(sizeof hb, hb);
    NC(ncclAllReduce(db, db, N, ncclBfloat16, ncclSum, c, NULL));
    back(rb, db, sizeof rb);
    for (int i = 0; i < N; i++) {
        uint16_t want = bf16(val(0, i) * 100.0f);
        for (int r = 1; r < np; r++)
            want = bf16(from_bf16(want) + from_bf16(bf16(val(r, i) * 100.0f)));
        CHECK(rb[i] == want, "bf16 sum[%d] = 0x%04x, in rank order 0x%04x", i, rb[i], want);
    }
    /* broadcast from the last rank, reduce-scatter, reduce to rank 1 % np */
    for (int i = 0; i < N; i++)
        hi[i] = me == np - 1 ? 5 * i : -1;
    CU(cudaMemcpy(di, hi, sizeof hi, cudaMemcpyHostToDevice));
    NC(ncclBroadcast(di, di, N, ncclInt32, np - 1, c, NULL));
    back(ho, di, sizeof ho);
    for (int i = 0; i < N; i++)
        CHECK(ho[i] == 5 * i, "bcast[%d] = %d", i, ho[i]);
    int64_t hl[4 * 8], hlo[8];
    for (int i = 0; i < np * 8; i++)
        hl[i] = (int64_t)(me + 1) << (i % 12);
    int64_t *dl = dev(sizeof hl, hl), *dlo = dev(sizeof hlo, NULL);
    NC(ncclReduceScatter(dl, dlo, 8, ncclInt64, ncclSum, c, NULL));
    back(hlo, dlo, sizeof hlo);
    for (int i = 0; i < 8; i++)
        CHECK(hlo[i] == (int64_t)(np * (np + 1) / 2) << ((me * 8 + i) % 12), "rs[%d] = %lld", i,
              (long long)hlo[i]);
    int root = 1 % np;
    NC(ncclReduce(dl, dl, 8, ncclInt64, ncclProd, root, c, NULL));
    back(hlo, dl, sizeof hlo);
    for (int i = 0; i < 8; i++) {
        int64_t want = (int64_t)(me + 1) << (i % 12);
        if (me == root) {
            want = 1;
            for (int r = 0; r < np; r++)
                want *= (int64_t)(r + 1) << (i % 12);
        }
        CHECK(hlo[i] == want, "reduce[%d] = %lld, expected %lld", i, (long long)hlo[i],
              (long long)want);
    }
    CU(cudaFree(di));
    CU(cudaFree(sf));
    CU(cudaFree(rf));
    CU(cudaFree(gf));
    CU(cudaFree(db));
    CU(cudaFree(dl));
    CU(cudaFree(dlo));
}

/* a ring of BIG int32 in one group: past the sockets' buffers both ways */
static void ring(ncclComm_t c)
{
    static int32_t h[BIG];
    for (int i = 0; i < BIG; i++)
        h[i] = 1000 * me + i;
    int32_t *s = dev(sizeof h, h), *r = dev(sizeof h, NULL);
    NC(ncclGroupStart());
    NC(ncclSend(s, BIG, ncclInt32, (me + 1) % np, c, NULL));
    NC(ncclRecv(r, BIG, ncclInt32, (me + np - 1) % np, c, NULL));
    NC(ncclGroupEnd());
    back(h, r, sizeof h);
    int from = (me + np - 1) % np, bad = 0;
    for (int i = 0; i < BIG; i++)
        bad += h[i] != 1000 * from + i;
    CHECK(bad == 0, "%d of %d wrong", bad, BIG);
    CU(cudaFree(s));
    CU(cudaFree(r));
}

static int32_t sum_i32(ncclComm_t c, int32_t v, ncclResult_t *async)
{
    int32_t *d = dev(sizeof v, &v), out = -1;
    NC(ncclAllReduce(d, d, 1, ncclInt32, ncclSum, c, NULL));
    back(&out, d, sizeof out);
    CU(cudaFree(d));
    NC(ncclCommGetAsyncError(c, async));
    return out;
}

static int rank_main(int *fds)
{
    ncclUniqueId id;
    CU(cudaSetDevice(me));
    if (me == 0) {
        NC(ncclGetUniqueId(&id));
        for (int r = 1; r < np; r++)
            CHECK(write(fds[r], &id, sizeof id) == (ssize_t)sizeof id, "%s", "write");
    } else {
        CHECK(read(fds[me], &id, sizeof id) == (ssize_t)sizeof id, "%s", "read");
    }
    ncclComm_t c = NULL;
    NC(ncclCommInitRank(&c, np, id, me));
    if (failures)
        return failures;
    int r, n;
    NC(ncclCommUserRank(c, &r));
    NC(ncclCommCount(c, &n));
    CHECK(r == me && n == np, "rank %d of %d", r, n);
    collectives(c);
    ring(c);
    /* halves: even and odd ranks, by descending key */
    ncclComm_t h = NULL;
    NC(ncclCommSplit(c, me % 2, -me, &h, NULL));
    ncclResult_t a = ncclSuccess;
    if (h) {
        int want = 0;
        for (int q = me % 2; q < np; q += 2)
            want += q;
        CHECK(sum_i32(h, me, &a) == want && a == ncclSuccess, "a half's sum (%d)", a);
        CU(cudaDeviceSynchronize());
        NC(ncclCommFinalize(h));
        NC(ncclCommDestroy(h));
    }
    CHECK(sum_i32(c, 1, &a) == np && a == ncclSuccess, "the last sum (%d)", a);
    /* the last rank exits without a word: the others' next all-reduce fails */
    if (me == np - 1) {
        fflush(NULL);
        _exit(failures);
    }
    sum_i32(c, 1, &a);
    CHECK(a == ncclRemoteError, "after rank %d exited: async error %d (%s), expected "
          "ncclRemoteError", np - 1, a, ncclGetLastError(c));
    NC(ncclCommAbort(c));
    return failures;
}

int main(int argc, char **argv)
{
    setenv("DDPC_EMU_DEVICES", "4", 1); /* one per rank, before the first CUDA call */
    np = argc > 1 ? atoi(argv[1]) : 4;
    if (np < 2 || np > 4) {
        fprintf(stderr, "usage: emu_nccl_fork [RANKS (2-4)]\n");
        return 2;
    }
    int fds[4][2];
    for (int r = 1; r < np; r++)
        if (pipe(fds[r]) != 0) {
            perror("emu_nccl_fork: pipe");
            return 99;
        }
    pid_t pid[4];
    for (me = 0; me < np; me++) {
        pid[me] = fork();
        if (pid[me] == 0) {
            int mine[4] = {-1, -1, -1, -1};
            for (int r = 1; r < np; r++) {
                mine[r] = me == 0 ? fds[r][1] : fds[r][0];
                close(me == 0 ? fds[r][0] : fds[r][1]);
            }
            alarm(120); /* a hang fails, never blocks make check */
            int f = rank_main(mine);
            fflush(NULL);
            _exit(f > 100 ? 100 : f);
        }
        if (pid[me] < 0) {
            perror("emu_nccl_fork: fork");
            return 99;
        }
    }
    for (int r = 1; r < np; r++)
        close(fds[r][0]), close(fds[r][1]);
    int bad = 0;
    for (int r = 0; r < np; r++) {
        int st = 0;
        waitpid(pid[r], &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "emu_nccl_fork: rank %d (pid %d) %s %d\n", r, (int)pid[r],
                    WIFEXITED(st) ? "exited" : "died of signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            bad++;
        }
    }
    printf("emu_nccl_fork: %d ranks without MPI: %s\n", np, bad ? "FAILED" : "ok");
    return bad ? 1 : 0;
}
#endif
