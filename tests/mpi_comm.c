/* SPDX-License-Identifier: BSD-3-Clause */
/* mpi_comm.c: the communicator under 1, 2, 3 and 4 real MPI ranks. Every
 * collective and dtype against values computed by hand, async handles,
 * bitwise identical results across ranks, the errors, the timeout message. */
#include "mpitest.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

START_TEST(allreduce_int_and_double)
{
    enum { N = 1000 };
    int32_t a[N], s32[N];
    int64_t b[N], s64[N];
    double d[N], dmin[N], dmax[N];
    for (int i = 0; i < N; i++) {
        a[i] = T_rank + 1 + i;
        b[i] = ((int64_t)1 << 40) + T_rank;
        d[i] = (double)(T_rank * 3 - i);
    }
    T_OK(ddpc_allreduce(T_comm, a, s32, N, DDPC_I32, DDPC_SUM));
    T_OK(ddpc_allreduce(T_comm, b, s64, N, DDPC_I64, DDPC_SUM));
    T_OK(ddpc_allreduce(T_comm, d, dmin, N, DDPC_F64, DDPC_MIN));
    T_OK(ddpc_allreduce(T_comm, d, dmax, N, DDPC_F64, DDPC_MAX));
    int64_t tri = (int64_t)T_size * (T_size + 1) / 2;
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(s32[i], tri + (int64_t)T_size * i);
        ck_assert_int_eq(s64[i], ((int64_t)T_size << 40) + (int64_t)T_size * (T_size - 1) / 2);
        ck_assert_double_eq(dmin[i], (double)(-i));
        ck_assert_double_eq(dmax[i], (double)((T_size - 1) * 3 - i));
    }
}
END_TEST

START_TEST(allreduce_avg_in_place)
{
    enum { N = 4097 };
    static float x[N];
    static int64_t k[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(2 * T_rank + i);
        k[i] = 10 * T_rank + 7;
    }
    T_OK(ddpc_allreduce(T_comm, x, x, N, DDPC_F32, DDPC_AVG));
    T_OK(ddpc_allreduce(T_comm, k, k, N, DDPC_I64, DDPC_AVG));
    for (int i = 0; i < N; i++) {
        ck_assert_float_eq(x[i], (float)(T_size - 1 + i));
        ck_assert_int_eq(k[i], (10 * (int64_t)T_size * (T_size - 1) / 2 + 7 * T_size) / T_size);
    }
}
END_TEST

/* AVG is SUM then an IEEE division by the size, bit for bit, whatever the
 * vector width of the /N pass (and its multiply when the size is 2^k): mixed
 * magnitudes down to subnormals, a count that is not a multiple of any vector */
START_TEST(allreduce_avg_is_sum_then_divide)
{
    enum { N = 4099 };
    static float x[N], s[N];
    static double y[N], t[N];
    uint64_t z = 0x9e3779b97f4a7c15ull * (uint64_t)(T_rank + 1);
    for (int i = 0; i < N; i++) {
        z ^= z << 13, z ^= z >> 7, z ^= z << 17;
        double m = (double)((int64_t)(z >> 11) - (1ll << 52)) * 0x1p-52;
        x[i] = (float)m * (i % 5 == 0 ? 0x1p-140f : (float)(1 + i % 97));
        y[i] = m * (i % 5 == 0 ? 0x1p-1060 : (double)(1 + i % 89));
    }
    T_OK(ddpc_allreduce(T_comm, x, s, N, DDPC_F32, DDPC_SUM));
    T_OK(ddpc_allreduce(T_comm, y, t, N, DDPC_F64, DDPC_SUM));
    T_OK(ddpc_allreduce(T_comm, x, x, N, DDPC_F32, DDPC_AVG));
    T_OK(ddpc_allreduce(T_comm, y, y, N, DDPC_F64, DDPC_AVG));
    for (int i = 0; i < N; i++) {
        volatile float fs = s[i] / (float)T_size; /* scalar, one at a time */
        volatile double ds = t[i] / (double)T_size;
        ck_assert_msg(memcmp(&x[i], (const void *)&fs, sizeof fs) == 0,
                      "float32 AVG element %d: %a, SUM/N is %a", i, (double)x[i], (double)fs);
        ck_assert_msg(memcmp(&y[i], (const void *)&ds, sizeof ds) == 0,
                      "float64 AVG element %d: %a, SUM/N is %a", i, y[i], (double)ds);
    }
}
END_TEST

/* Buffers larger than one piece (all-reduces go in pieces of 4 MiB): every
 * element reduced, averaged once, across the piece boundaries. */
START_TEST(allreduce_across_pieces)
{
    const size_t nf = ((size_t)1 << 20) * 2 + 5, nl = ((size_t)1 << 19) + 3;
    float *x = malloc(nf * sizeof *x);
    int64_t *k = malloc(nl * sizeof *k);
    for (size_t i = 0; i < nf; i++)
        x[i] = (float)(T_rank + (int)(i % 7));
    for (size_t i = 0; i < nl; i++)
        k[i] = (int64_t)i * (T_rank + 1);
    T_OK(ddpc_allreduce(T_comm, x, x, nf, DDPC_F32, DDPC_AVG));
    T_OK(ddpc_allreduce(T_comm, k, k, nl, DDPC_I64, DDPC_SUM));
    for (size_t i = 0; i < nf; i++)
        if (x[i] != 0.5f * (float)(T_size - 1) + (float)(i % 7))
            ck_abort_msg("float32 AVG element %zu is %g, expected %g", i, (double)x[i],
                         0.5 * (T_size - 1) + (double)(i % 7));
    for (size_t i = 0; i < nl; i++)
        if (k[i] != (int64_t)i * T_size * (T_size + 1) / 2)
            ck_abort_msg("int64 SUM element %zu is %lld", i, (long long)k[i]);
    free(x);
    free(k);
}
END_TEST

START_TEST(allreduce_half_precision)
{
    enum { N = 257 };
    uint16_t h[N], f[N];
    for (int i = 0; i < N; i++) {
        h[i] = ddpc_f32_to_bf16((float)(T_rank + (i % 8)));
        f[i] = ddpc_f32_to_f16(0.5f * (float)(T_rank + (i % 8)));
    }
    T_OK(ddpc_allreduce(T_comm, h, h, N, DDPC_BF16, DDPC_SUM));
    T_OK(ddpc_allreduce(T_comm, f, f, N, DDPC_F16, DDPC_AVG));
    for (int i = 0; i < N; i++) {
        float want = (float)(T_size * (T_size - 1) / 2 + T_size * (i % 8));
        ck_assert_float_eq(ddpc_bf16_to_f32(h[i]), want);
        ck_assert_float_eq(ddpc_f16_to_f32(f[i]), 0.5f * want / (float)T_size);
    }
}
END_TEST

START_TEST(broadcast_allgather_reduce_scatter_barrier)
{
    int root = T_size - 1;
    double v[5];
    for (int i = 0; i < 5; i++)
        v[i] = T_rank == root ? 1.5 * i : -1.0;
    T_OK(ddpc_broadcast(T_comm, v, 5, DDPC_F64, root));
    for (int i = 0; i < 5; i++)
        ck_assert_double_eq(v[i], 1.5 * i);

    int32_t mine[3] = {T_rank * 10, T_rank * 10 + 1, T_rank * 10 + 2};
    int32_t *all = calloc((size_t)T_size * 3, sizeof *all);
    T_OK(ddpc_allgather(T_comm, mine, all, 3, DDPC_I32));
    for (int r = 0; r < T_size; r++)
        for (int j = 0; j < 3; j++)
            ck_assert_int_eq(all[r * 3 + j], r * 10 + j);

    float *send = malloc((size_t)T_size * 2 * sizeof *send), recv[2];
    for (int r = 0; r < T_size; r++) {
        send[2 * r] = (float)r;
        send[2 * r + 1] = (float)T_rank;
    }
    T_OK(ddpc_reduce_scatter(T_comm, send, recv, 2, DDPC_F32, DDPC_SUM));
    ck_assert_float_eq(recv[0], (float)(T_rank * T_size));
    ck_assert_float_eq(recv[1], (float)(T_size * (T_size - 1) / 2));
    T_OK(ddpc_barrier(T_comm));
    free(all);
    free(send);
}
END_TEST

START_TEST(async_in_order_and_seq)
{
    enum { K = 8, N = 100000 };
    float *buf = malloc(sizeof(float) * K * N);
    ddpc_work_t w[K];
    uint64_t seq0 = ddpc_comm_seq(T_comm);
    for (int k = 0; k < K; k++) {
        for (int i = 0; i < N; i++)
            buf[k * N + i] = (float)(k + T_rank);
        T_OK(ddpc_iallreduce(T_comm, buf + k * N, buf + k * N, N, DDPC_F32, DDPC_SUM, &w[k]));
    }
    ck_assert_uint_eq(ddpc_comm_seq(T_comm), seq0 + K);
    /* in order: once the last is done, every earlier one is done too. No
     * polling deadline (pass/fail must not depend on timing): on the Slurm
     * testbed (4 ranks on 2 netns nodes sharing 2 cores) MPICH's UCX stalls
     * these all-reduces now and then for 10 to over 60 s under load, with or
     * without ddpc (measured with the code of 170b2f7) */
    int done = 0;
    T_OK(ddpc_work_test(w[0], &done)); /* may or may not be done yet */
    ddpc_work_t last = w[K - 1];
    T_OK(ddpc_work_wait(last, -1));
    for (int k = 0; k < K - 1; k++) {
        T_OK(ddpc_work_test(w[k], &done));
        ck_assert_msg(done == 1, "operation %d not done after the later operation %d", k, K - 1);
    }
    for (int k = 0; k < K - 1; k++)
        T_OK(ddpc_work_wait(w[k], -1));
    for (int k = 0; k < K; k++)
        ck_assert_float_eq(buf[k * N + 7], (float)(k * T_size + T_size * (T_size - 1) / 2));
    free(buf);
}
END_TEST

/* Two threads wait on different handles of one communicator at once (the
 * progress thread wakes only the waiters of what completed): every wait
 * returns, with the right values. */
enum { WT_K = 8, WT_N = 50000 };
static ddpc_work_t wt_w[WT_K];
static ddpc_status_t wt_st[WT_K];

static void *wait_odd_reversed(void *arg)
{
    for (int k = WT_K - 1; k >= 0; k--)
        if (k % 2)
            wt_st[k] = ddpc_work_wait(wt_w[k], 60);
    return arg;
}

START_TEST(waits_from_two_threads)
{
    float *buf = malloc(sizeof(float) * WT_K * WT_N);
    for (int k = 0; k < WT_K; k++) {
        for (int i = 0; i < WT_N; i++)
            buf[k * WT_N + i] = (float)(k + T_rank);
        T_OK(ddpc_iallreduce(T_comm, buf + k * WT_N, buf + k * WT_N, WT_N, DDPC_F32, DDPC_SUM,
                             &wt_w[k]));
    }
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, wait_odd_reversed, NULL), 0);
    for (int k = 0; k < WT_K; k += 2)
        wt_st[k] = ddpc_work_wait(wt_w[k], 60);
    pthread_join(th, NULL);
    for (int k = 0; k < WT_K; k++) {
        ck_assert_msg(wt_st[k] == DDPC_OK, "wait on operation %d: %s", k, ddpc_strerror(wt_st[k]));
        ck_assert_float_eq(buf[k * WT_N + 7], (float)(k * T_size + T_size * (T_size - 1) / 2));
    }
    free(buf);
}
END_TEST

START_TEST(bitwise_identical_on_all_ranks)
{
    /* random floats of mixed magnitude: any reduction-order difference between
     * ranks would show in the last bits */
    enum { N = (1 << 20) + 3 };
    float *x = malloc(sizeof(float) * N);
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(T_rank + 1);
    for (int i = 0; i < N; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = (float)((int64_t)(s >> 11) - (1ll << 52)) * 0x1p-40f * (float)(1 + (i % 97));
    }
    T_OK(ddpc_allreduce(T_comm, x, x, N, DDPC_F32, DDPC_AVG));
    uint64_t h = fnv1a(x, sizeof(float) * N), *hs = calloc((size_t)T_size, sizeof *hs);
    T_OK(ddpc_allgather(T_comm, &h, hs, 1, DDPC_I64));
    for (int r = 1; r < T_size; r++)
        ck_assert_msg(hs[r] == hs[0], "rank %d's averaged buffer differs from rank 0's", r);
    free(hs);
    free(x);
}
END_TEST

START_TEST(bad_arguments_named)
{
    float x = 0;
    ck_assert_int_eq(ddpc_allreduce(T_comm, &x, &x, 1, (ddpc_dtype_t)42, DDPC_SUM), DDPC_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(ddpc_last_error(T_rt), "invalid dtype"));
    uint16_t h = 0;
    ck_assert_int_eq(ddpc_allreduce(T_comm, &h, &h, 1, DDPC_BF16, DDPC_MAX), DDPC_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(ddpc_last_error(T_rt), "bfloat16"));
    ck_assert_int_eq(ddpc_broadcast(T_comm, &x, 1, DDPC_F32, T_size), DDPC_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(ddpc_last_error(T_rt), "root"));
    ck_assert_ptr_nonnull(strstr(ddpc_last_error(T_rt), "ddpc[rank "));
}
END_TEST

START_TEST(late_rank_times_out_with_a_message)
{
    /* rank 0 waits 0.3 s for a collective that the others join only after
     * 1.5 s: it gets DDPC_ERR_TIMEOUT naming the operation, then completes. */
    if (T_size == 1)
        return;
    double v = 1.0;
    ddpc_work_t w;
    if (T_rank != 0)
        usleep(1500000);
    T_OK(ddpc_iallreduce(T_comm, &v, &v, 1, DDPC_F64, DDPC_SUM, &w));
    if (T_rank == 0) {
        ck_assert_int_eq(ddpc_work_wait(w, 0.3), DDPC_ERR_TIMEOUT);
        const char *m = ddpc_last_error(T_rt);
        ck_assert_msg(strstr(m, "allreduce #") && strstr(m, "1 x float64") && strstr(m, "0.3s"),
                      "timeout message: %s", m);
    }
    T_OK(ddpc_work_wait(w, -1));
    ck_assert_double_eq(v, (double)T_size);
}
END_TEST

/* rank r's value at i: magnitudes apart, so that the order of a sum shows */
static float shm_value(int r, size_t i)
{
    return (float)((i * 7919u + (size_t)r * 104729u) % 1000u) * 1e-3f * (float)(r + 1) +
           (i % 3 == 0 ? 1e3f * (float)r : 0.0f);
}

/* the rank-order sum (and average, as the communicator divides) at i */
static float shm_expect(size_t i, ddpc_redop_t op)
{
    float acc = shm_value(0, i);
    for (int r = 1; r < T_size; r++)
        acc += shm_value(r, i);
    if (op == DDPC_AVG && T_size > 1)
        acc = (T_size & (T_size - 1)) ? acc / (float)T_size : acc * (1.0f / (float)T_size);
    return acc;
}

/* shared windows on the world: more than one rank, all on one node (not
 * across the Slurm testbed's two), not turned off */
static int shm_on(void)
{
    const char *e = getenv("DDPC_SHM_ALLREDUCE");
    return T_size > 1 && ddpc_world(T_rt)->local_size == T_size && !(e && !strcmp(e, "0"));
}

/* x is the rank-order result: bitwise in shared memory; through MPI (across
 * nodes, where its order of summation is its own) within float rounding */
static int shm_same(float x, float want)
{
    if (shm_on() || T_size <= 2)
        return !memcmp(&x, &want, sizeof want);
    return fabsf(x - want) <= 1e-6f * fabsf(want) + 1e-30f;
}

START_TEST(shared_memory_allreduce)
{
    /* ddpc_comm_mem_alloc on ranks of one node: an MPI-3 shared window, in
     * which in-place float sums and averages of any part are made by the
     * ranks: bitwise the rank-order result on every rank, the rest of the
     * buffer untouched, empty slices (fewer elements than ranks * 16) too */
    const size_t n = 40000;
    float *x = NULL;
    T_OK(ddpc_comm_mem_alloc(T_comm, n * sizeof(float), (void **)&x));
    ck_assert_ptr_nonnull(x);
    ck_assert_uint_eq((uintptr_t)x % 64, 0);
    ck_assert_int_eq(ddpc_comm_mem_shared(T_comm, x), shm_on());
    ck_assert_int_eq(ddpc_comm_mem_shared(T_comm, x + 1), 0); /* only the start */
    size_t nz = 0;
    for (size_t i = 0; i < n; i++)
        nz += x[i] != 0.0f;
    ck_assert_uint_eq(nz, 0);
    const size_t cases[][2] = {{0, 40000}, {5, 1}, {3, 17}, {100, 33}, {1000, 4099}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int avg = 0; avg < 2; avg++) {
            const ddpc_redop_t op = avg ? DDPC_AVG : DDPC_SUM;
            const size_t off = cases[k][0], cnt = cases[k][1];
            for (size_t i = 0; i < n; i++)
                x[i] = shm_value(T_rank, i);
            ddpc_work_t w;
            T_OK(ddpc_iallreduce(T_comm, x + off, x + off, cnt, DDPC_F32, op, &w));
            T_OK(ddpc_work_wait(w, -1));
            size_t bad = 0, first = n;
            for (size_t i = 0; i < n; i++) {
                const int in = i >= off && i < off + cnt;
                float want = in ? shm_expect(i, op) : shm_value(T_rank, i);
                if (in ? !shm_same(x[i], want) : memcmp(&x[i], &want, sizeof want) != 0) {
                    bad++;
                    first = first < i ? first : i;
                }
            }
            ck_assert_msg(bad == 0, "rank %d: %s of [%zu, +%zu): %zu element(s) differ, first %zu "
                          "(%.9g)", T_rank, avg ? "avg" : "sum", off, cnt, bad, first,
                          first < n ? (double)x[first] : 0.0);
            T_OK(ddpc_barrier(T_comm)); /* every rank has read its copy before the next fill */
        }
    /* other operations on it go through MPI */
    for (size_t i = 0; i < 64; i++)
        x[i] = (float)(T_rank * 64 + (int)i);
    T_OK(ddpc_allreduce(T_comm, x, x, 64, DDPC_F32, DDPC_MAX));
    for (size_t i = 0; i < 64; i++)
        ck_assert_float_eq(x[i], (float)((T_size - 1) * 64 + (int)i));
    /* freed, it is reused (zeroed) by an allocation that fits */
    ddpc_comm_mem_free(T_comm, x);
    ck_assert_int_eq(ddpc_comm_mem_shared(T_comm, x), 0);
    float *y = NULL;
    T_OK(ddpc_comm_mem_alloc(T_comm, 1000 * sizeof(float), (void **)&y));
    ck_assert_int_eq(ddpc_comm_mem_shared(T_comm, y), shm_on());
    if (shm_on())
        ck_assert_ptr_eq(y, x);
    nz = 0;
    for (size_t i = 0; i < 1000; i++)
        nz += y[i] != 0.0f;
    ck_assert_uint_eq(nz, 0);
    for (size_t i = 0; i < 1000; i++)
        y[i] = shm_value(T_rank, i);
    T_OK(ddpc_allreduce(T_comm, y, y, 1000, DDPC_F32, DDPC_SUM));

    /* DDPC_SHM_ALLREDUCE=0: the process's own memory and MPI's all-reduce;
     * at 2 ranks the same bits (a sum of two is the same either way) */
    setenv("DDPC_SHM_ALLREDUCE", "0", 1);
    ddpc_comm_config_t cc = DDPC_COMM_CONFIG_INIT;
    ddpc_comm_t c2 = NULL;
    ddpc_status_t st = ddpc_comm_create(T_rt, &cc, &c2);
    unsetenv("DDPC_SHM_ALLREDUCE");
    T_OK(st);
    float *z = NULL;
    T_OK(ddpc_comm_mem_alloc(c2, 1000 * sizeof(float), (void **)&z));
    ck_assert_int_eq(ddpc_comm_mem_shared(c2, z), 0);
    for (size_t i = 0; i < 1000; i++)
        z[i] = shm_value(T_rank, i);
    T_OK(ddpc_allreduce(c2, z, z, 1000, DDPC_F32, DDPC_SUM));
    if (T_size <= 2)
        ck_assert_int_eq(memcmp(y, z, 1000 * sizeof(float)), 0);
    ddpc_comm_mem_free(c2, z);
    ddpc_comm_destroy(c2);
    ddpc_comm_mem_free(T_comm, y);
    ck_assert_int_eq(ddpc_comm_mem_alloc(NULL, 8, (void **)&z), DDPC_ERR_INVALID);
}
END_TEST

START_TEST(shared_memory_allgather)
{
    /* an in-place all-gather in a shared window (ZeRO-1's gather of the
     * updated parameters) is made by copies between the ranks' windows:
     * every block from every rank, any element size, at an offset in the
     * window, the rest of the buffer untouched; repeated at once (a rank
     * must not refill its block before the others have read it) */
    const size_t n = 1 << 16;
    unsigned char *x = NULL;
    T_OK(ddpc_comm_mem_alloc(T_comm, n, (void **)&x));
    ck_assert_int_eq(ddpc_comm_mem_shared(T_comm, x), shm_on());
    const struct { size_t off, count; ddpc_dtype_t dt; } cases[] = {
        {0, 1000, DDPC_F32}, {8, 3, DDPC_U8}, {64, 129, DDPC_F64}, {4096, 1, DDPC_I32}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int round = 0; round < 3; round++) {
            const size_t es = ddpc_dtype_size(cases[k].dt), blk = cases[k].count * es;
            unsigned char *base = x + cases[k].off;
            ck_assert_uint_le(cases[k].off + blk * (size_t)T_size + 64, n);
            for (size_t i = 0; i < n; i++) /* this rank's bytes everywhere, a round's mark */
                x[i] = (unsigned char)(T_rank * 31 + round * 7 + (int)(i % 251));
            T_OK(ddpc_allgather(T_comm, base + (size_t)T_rank * blk, base, cases[k].count,
                                cases[k].dt));
            size_t bad = 0, first = n;
            for (size_t i = 0; i < n; i++) {
                const int in = x + i >= base && x + i < base + blk * (size_t)T_size;
                const int from = in ? (int)((size_t)(x + i - base) / blk) : T_rank;
                const unsigned char want = (unsigned char)(from * 31 + round * 7 + (int)(i % 251));
                if (x[i] != want) {
                    bad++;
                    first = first < i ? first : i;
                }
            }
            ck_assert_msg(bad == 0, "rank %d: case %zu round %d: %zu byte(s) differ, first %zu",
                          T_rank, k, round, bad, first);
        }
    T_OK(ddpc_barrier(T_comm));
    ddpc_comm_mem_free(T_comm, x);
}
END_TEST

START_TEST(shared_memory_late_rank_times_out)
{
    /* the shared-memory path waits for every rank like MPI: rank 0's wait
     * times out naming the operation, then completes once the others come */
    if (T_size == 1)
        return;
    float *x = NULL;
    T_OK(ddpc_comm_mem_alloc(T_comm, 256 * sizeof(float), (void **)&x));
    ck_assert_int_eq(ddpc_comm_mem_shared(T_comm, x), shm_on());
    for (size_t i = 0; i < 256; i++)
        x[i] = shm_value(T_rank, i);
    ddpc_work_t w;
    if (T_rank != 0)
        usleep(1500000);
    T_OK(ddpc_iallreduce(T_comm, x, x, 256, DDPC_F32, DDPC_SUM, &w));
    if (T_rank == 0) {
        ck_assert_int_eq(ddpc_work_wait(w, 0.3), DDPC_ERR_TIMEOUT);
        const char *m = ddpc_last_error(T_rt);
        ck_assert_msg(strstr(m, "allreduce #") && strstr(m, "256 x float32") && strstr(m, "0.3s"),
                      "timeout message: %s", m);
    }
    T_OK(ddpc_work_wait(w, -1));
    for (size_t i = 0; i < 256; i++) {
        float want = shm_expect(i, DDPC_SUM);
        ck_assert_msg(shm_same(x[i], want), "rank %d: element %zu: %.9g, want %.9g",
                      T_rank, i, (double)x[i], (double)want);
    }
    T_OK(ddpc_barrier(T_comm));
    ddpc_comm_mem_free(T_comm, x);
}
END_TEST

START_TEST(key_exchange)
{
    /* a 128-byte blob (an ncclUniqueId's size) from the last rank to all,
     * through PMIx under a PMIx server, else MPI; then an allgather */
    unsigned char blob[128];
    for (int i = 0; i < 128; i++)
        blob[i] = T_rank == T_size - 1 ? (unsigned char)(i * 7 + 3) : 0;
    T_OK(ddpc_kvs_bcast(T_rt, blob, sizeof blob, T_size - 1));
    for (int i = 0; i < 128; i++)
        ck_assert_uint_eq(blob[i], (unsigned char)(i * 7 + 3));
    int32_t mine = 100 + T_rank, *all = calloc((size_t)T_size, sizeof *all);
    T_OK(ddpc_kvs_allgather(T_rt, &mine, all, sizeof mine));
    for (int r = 0; r < T_size; r++)
        ck_assert_int_eq(all[r], 100 + r);
    free(all);
    ck_assert_int_eq(ddpc_kvs_bcast(T_rt, blob, sizeof blob, T_size), DDPC_ERR_INVALID);
}
END_TEST

/* ddpc_kvs_allreduce, the control messages' all-reduce of a launch without
 * MPI: each type and operation against the world communicator's, sums in
 * rank order (the same bits on every rank), and what it does not reduce. */
START_TEST(key_exchange_allreduce)
{
    const double v = 0.1 * (T_rank + 1) + 1e-17 * T_rank;
    int32_t i32[3] = {T_rank, -T_rank, 7}, o32[3], w32[3];
    int64_t i64[2] = {(int64_t)1 << 40 | T_rank, -(int64_t)T_rank}, o64[2];
    double f64[2] = {v, -v}, of64[2], want = 0;
    float f32[1] = {(float)v}, of32[1];
    T_OK(ddpc_kvs_allreduce(T_rt, i32, o32, 3, DDPC_I32, DDPC_SUM));
    T_OK(ddpc_allreduce(T_comm, i32, w32, 3, DDPC_I32, DDPC_SUM));
    ck_assert(!memcmp(o32, w32, sizeof o32));
    T_OK(ddpc_kvs_allreduce(T_rt, i32, o32, 3, DDPC_I32, DDPC_MAX));
    ck_assert(o32[0] == T_size - 1 && o32[1] == 0 && o32[2] == 7);
    T_OK(ddpc_kvs_allreduce(T_rt, i64, o64, 2, DDPC_I64, DDPC_MIN));
    ck_assert(o64[0] == (int64_t)1 << 40 && o64[1] == -(int64_t)(T_size - 1));
    for (int r = 0; r < T_size; r++)
        want += 0.1 * (r + 1) + 1e-17 * r; /* rank order */
    T_OK(ddpc_kvs_allreduce(T_rt, f64, of64, 2, DDPC_F64, DDPC_SUM));
    ck_assert(of64[0] == want && of64[1] == -want);
    T_OK(ddpc_kvs_allreduce(T_rt, f64, of64, 1, DDPC_F64, DDPC_AVG));
    ck_assert(of64[0] == want / T_size);
    T_OK(ddpc_kvs_allreduce(T_rt, f32, of32, 1, DDPC_F32, DDPC_MAX));
    ck_assert(of32[0] == (float)(0.1 * T_size + 1e-17 * (T_size - 1)));
    double bits[2] = {of64[0], 0}, all_bits[2];
    T_OK(ddpc_kvs_allreduce(T_rt, bits, all_bits, 1, DDPC_F64, DDPC_MAX));
    T_OK(ddpc_kvs_allreduce(T_rt, bits, all_bits + 1, 1, DDPC_F64, DDPC_MIN));
    ck_assert(all_bits[0] == all_bits[1]); /* every rank got the same average */
    ck_assert_int_eq(ddpc_kvs_allreduce(T_rt, i32, o32, 1, DDPC_I32, DDPC_AVG), DDPC_ERR_UNSUPPORTED);
    ck_assert_int_eq(ddpc_kvs_allreduce(T_rt, i32, o32, 1, DDPC_BF16, DDPC_SUM), DDPC_ERR_UNSUPPORTED);
    ck_assert(strstr(ddpc_last_error(T_rt), "kvs_allreduce"));
}
END_TEST

/* DDPC_PROGRESS: each way of waiting for MPI gives the same results, with
 * operations completing while the caller computes (naps, in auto) and while
 * it waits; a value not known is refused with the choices. */
START_TEST(progress_policies)
{
    static const char *const ways[] = {"auto", "spin", "blocking"};
    enum { K = 6, N = 70000 }; /* 280 KB each: rendezvous-sized, more than one MPI step */
    float *buf = malloc(sizeof(float) * K * N);
    for (int p = 0; p < 3; p++) {
        setenv("DDPC_PROGRESS", ways[p], 1);
        ddpc_comm_config_t cc = DDPC_COMM_CONFIG_INIT;
        ddpc_comm_t c2 = NULL;
        T_OK(ddpc_comm_create(T_rt, &cc, &c2));
        ddpc_work_t w[K];
        for (int k = 0; k < K; k++) {
            for (int i = 0; i < N; i++)
                buf[k * N + i] = (float)(p + k + T_rank);
            T_OK(ddpc_iallreduce(c2, buf + k * N, buf + k * N, N, DDPC_F32, DDPC_SUM, &w[k]));
            if (k == 2) { /* the caller busy for a while: the progress thread naps */
                struct timespec ts = {0, 20000000};
                nanosleep(&ts, NULL);
            }
        }
        for (int k = K - 1; k >= 0; k--)
            T_OK(ddpc_work_wait(w[k], -1));
        for (int k = 0; k < K; k++)
            ck_assert_msg(buf[k * N + N - 1] == (float)((p + k) * T_size + T_size * (T_size - 1) / 2),
                          "DDPC_PROGRESS=%s: operation %d wrong", ways[p], k);
        T_OK(ddpc_barrier(c2));
        ddpc_comm_destroy(c2);
    }
    setenv("DDPC_PROGRESS", "busy", 1);
    ddpc_comm_config_t cc = DDPC_COMM_CONFIG_INIT;
    ddpc_comm_t bad = NULL;
    ck_assert_int_eq(ddpc_comm_create(T_rt, &cc, &bad), DDPC_ERR_INVALID);
    ck_assert_ptr_null(bad);
    ck_assert_msg(strstr(ddpc_last_error(T_rt), "DDPC_PROGRESS=\"busy\": expected one of "
                                                "auto|spin|blocking"),
                  "message: %s", ddpc_last_error(T_rt));
    unsetenv("DDPC_PROGRESS");
    free(buf);
}
END_TEST

START_TEST(more_communicators_and_backends)
{
    /* a second host communicator: its own sequence, same results */
    ddpc_comm_config_t cc = DDPC_COMM_CONFIG_INIT;
    ddpc_comm_t c2 = NULL;
    T_OK(ddpc_comm_create(T_rt, &cc, &c2));
    ck_assert_int_eq(ddpc_comm_backend(c2), DDPC_BACKEND_MPI);
    ck_assert_str_eq(ddpc_backend_name(ddpc_comm_backend(c2)), "mpi");
    ck_assert_int_eq(ddpc_comm_device(c2), DDPC_DEVICE_HOST);
    ck_assert_int_eq(ddpc_comm_rank(c2), T_rank);
    ck_assert_int_eq(ddpc_comm_size(c2), T_size);
    ck_assert_uint_eq(ddpc_comm_seq(c2), 0);
    int64_t v = T_rank + 1;
    T_OK(ddpc_allreduce(c2, &v, &v, 1, DDPC_I64, DDPC_SUM));
    ck_assert_int_eq(v, (int64_t)T_size * (T_size + 1) / 2);
    ck_assert_uint_eq(ddpc_comm_seq(c2), 1);
    ddpc_work_t w;
    T_OK(ddpc_iallreduce(c2, &v, &v, 1, DDPC_I64, DDPC_MAX, &w));
    T_OK(ddpc_comm_synchronize(c2, -1)); /* done without a wait */
    int done = 0;
    T_OK(ddpc_work_test(w, &done));
    ck_assert_int_eq(done, 1);
    T_OK(ddpc_work_wait(w, -1));
    T_OK(ddpc_comm_status(c2));
    ddpc_comm_destroy(c2);
    ddpc_comm_destroy(T_comm); /* the world communicator is the runtime's: a no-op */
    T_OK(ddpc_barrier(T_comm));
    T_OK(ddpc_comm_synchronize(T_comm, 1.0));

    /* nccl on host memory is a usage error; device memory without a GPU (or
     * without CUDA) says so, on every rank alike, before any collective */
    cc.backend = DDPC_BACKEND_NCCL;
    ck_assert_int_eq(ddpc_comm_create(T_rt, &cc, &c2), DDPC_ERR_INVALID);
    ck_assert_ptr_null(c2);
    ck_assert_msg(strstr(ddpc_last_error(T_rt), "backend nccl needs device memory"), "%s",
                  ddpc_last_error(T_rt));
    cc.backend = DDPC_BACKEND_MPI;
    cc.device = -7;
    ck_assert_int_eq(ddpc_comm_create(T_rt, &cc, &c2), DDPC_ERR_INVALID);
    if (ddpc_device_count() <= 0) {
        cc.device = DDPC_DEVICE_AUTO;
        ddpc_status_t st = ddpc_comm_create(T_rt, &cc, &c2);
        ck_assert_msg(st == DDPC_ERR_CUDA || st == DDPC_ERR_UNSUPPORTED, "status %s",
                      ddpc_strerror(st));
        const char *m = ddpc_last_error(T_rt);
        ck_assert_msg(strstr(m, "no usable GPU") || strstr(m, "without CUDA"), "message: %s", m);
        int dev = 0;
        ck_assert_int_ne(ddpc_device_select(T_rt, &dev), DDPC_OK);
        ck_assert_int_eq(dev, DDPC_DEVICE_HOST);
    }
    ck_assert_str_eq(ddpc_backend_name(DDPC_BACKEND_MPI_STAGED), "mpi-staged");
    ck_assert_str_eq(ddpc_backend_name(DDPC_BACKEND_NCCL), "nccl");
}
END_TEST

START_TEST(gpu_rule)
{
    char e[256];
    for (int lr = 0; lr < 4; lr++)
        ck_assert_int_eq(ddpc_gpu_rule(lr, 4, 4, "0,1,2,3", e, sizeof e), lr);
    ck_assert_int_eq(ddpc_gpu_rule(3, 4, 1, "3", e, sizeof e), 0); /* --gpus-per-task */
    ck_assert_int_eq(ddpc_gpu_rule(1, 2, 8, NULL, e, sizeof e), 1);
    ck_assert_int_eq(ddpc_gpu_rule(2, 4, 2, "0,1", e, sizeof e), -1);
    ck_assert_msg(strstr(e, "4 ranks on this node but 2 GPUs visible") &&
                  strstr(e, "CUDA_VISIBLE_DEVICES=\"0,1\""), "%s", e);
    ck_assert_int_eq(ddpc_gpu_rule(0, 1, 0, NULL, e, sizeof e), -1);
    ck_assert_msg(strstr(e, "no CUDA device visible (CUDA_VISIBLE_DEVICES unset)"), "%s", e);
    ck_assert_int_eq(ddpc_gpu_rule(2, 2, 2, NULL, e, sizeof e), -1);
}
END_TEST

static Suite *comm_suite(void)
{
    Suite *s = suite_create("comm");
    TCase *core = tcase_create("core");
    tcase_set_timeout(core, 60);
    tcase_add_test(core, allreduce_int_and_double);
    tcase_add_test(core, allreduce_avg_in_place);
    tcase_add_test(core, allreduce_avg_is_sum_then_divide);
    tcase_add_test(core, allreduce_across_pieces);
    tcase_add_test(core, allreduce_half_precision);
    tcase_add_test(core, broadcast_allgather_reduce_scatter_barrier);
    tcase_add_test(core, async_in_order_and_seq);
    tcase_add_test(core, waits_from_two_threads);
    tcase_add_test(core, bitwise_identical_on_all_ranks);
    tcase_add_test(core, key_exchange);
    tcase_add_test(core, key_exchange_allreduce);
    tcase_add_test(core, progress_policies);
    tcase_add_test(core, more_communicators_and_backends);
    tcase_add_test(core, gpu_rule);
    tcase_add_test(core, shared_memory_allreduce);
    tcase_add_test(core, shared_memory_allgather);
    suite_add_tcase(s, core);
    TCase *bad = tcase_create("bad input");
    tcase_add_test(bad, bad_arguments_named);
    tcase_add_test(bad, late_rank_times_out_with_a_message);
    tcase_add_test(bad, shared_memory_late_rank_times_out);
    suite_add_tcase(s, bad);
    return s;
}

MPI_TEST_MAIN(comm_suite)
