/* SPDX-License-Identifier: BSD-3-Clause */
/* mpi_groups.c: communicators over some ranks (split, rank lists, a 2-D
 * grid), point-to-point transfers (blocking, with handles, batched), the
 * collectives all-to-all, gather, scatter and reduce, a DDP engine over a
 * group, and an optimizer's norm over a group (ddpc_optim_set_norm_group), under 1-4 real MPI ranks on the host backend. Values are exact
 * (integers, small floats); wrong use must fail on every rank. */
#include "mpitest.h"

#include <math.h>
#include <string.h>

/* rank r's value for element i */
#define VAL(r, i) ((int32_t)((r) * 1000 + (i)))

START_TEST(split_orders_by_key_then_rank)
{
    /* even and odd world ranks, the keys reversed: the highest rank first */
    ddpc_comm_t c = NULL;
    T_OK(ddpc_comm_split(T_comm, T_rank % 2, -T_rank, NULL, &c));
    ck_assert_ptr_nonnull(c);
    int n = (T_size - T_rank % 2 + 1) / 2; /* ranks of my parity */
    ck_assert_int_eq(ddpc_comm_size(c), n);
    for (int r = 0; r < n; r++) {
        /* rank r is the r-th highest world rank of my parity */
        int top = (T_size - 1) - ((T_size - 1) % 2 != T_rank % 2);
        ck_assert_int_eq(ddpc_comm_world_rank(c, r), top - 2 * r);
    }
    ck_assert_int_eq(ddpc_comm_world_rank(c, ddpc_comm_rank(c)), T_rank);
    ck_assert_int_eq(ddpc_comm_world_rank(c, n), -1);
    int32_t mine = T_rank, sum = -1, want = 0;
    for (int r = T_rank % 2; r < T_size; r += 2)
        want += r;
    T_OK(ddpc_allreduce(c, &mine, &sum, 1, DDPC_I32, DDPC_SUM));
    ck_assert_int_eq(sum, want);
    ddpc_comm_destroy(c);
}
END_TEST

START_TEST(split_equal_keys_keep_parent_order_and_none_gets_nothing)
{
    ddpc_comm_t c = (ddpc_comm_t)1;
    int color = T_rank == 0 ? DDPC_COLOR_NONE : 7;
    T_OK(ddpc_comm_split(T_comm, color, 0, NULL, &c));
    if (T_rank == 0) {
        ck_assert_ptr_null(c);
        return;
    }
    ck_assert_int_eq(ddpc_comm_size(c), T_size - 1);
    ck_assert_int_eq(ddpc_comm_rank(c), T_rank - 1);
    T_OK(ddpc_barrier(c));
    ddpc_comm_destroy(c);
}
END_TEST

START_TEST(group_from_a_list)
{
    /* torch's new_group([size-1, 0]): the listed order is the new order */
    int list[2] = {T_size - 1, 0};
    int n = T_size > 1 ? 2 : 1;
    ddpc_comm_t g = NULL;
    T_OK(ddpc_comm_group(T_comm, list, n, NULL, &g));
    if (T_size > 2 && T_rank != 0 && T_rank != T_size - 1) {
        ck_assert_ptr_null(g);
        return;
    }
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(ddpc_comm_size(g), n);
    ck_assert_int_eq(ddpc_comm_rank(g), T_rank == T_size - 1 ? 0 : 1);
    int32_t b = T_rank == T_size - 1 ? 4242 : -1;
    T_OK(ddpc_broadcast(g, &b, 1, DDPC_I32, 0));
    ck_assert_int_eq(b, 4242);
    ddpc_comm_destroy(g);
}
END_TEST

/* wrong use: the same verdict on every rank, and the world still works */
START_TEST(wrong_splits_fail_every_rank)
{
    ddpc_comm_t c = (ddpc_comm_t)1;
    ddpc_status_t st = ddpc_comm_split(T_comm, T_rank == T_size - 1 ? -5 : 0, 0, NULL, &c);
    ck_assert_int_eq(st, DDPC_ERR_INVALID);
    ck_assert_ptr_null(c);
    char want[64];
    snprintf(want, sizeof want, "rank %d of the parent: color -5", T_size - 1);
    ck_assert_msg(strstr(ddpc_last_error(T_rt), want), "rank %d: %s", T_rank,
                  ddpc_last_error(T_rt));
    /* a list naming a rank twice, on one rank only */
    int dup[2] = {0, 0}, ok[1] = {0};
    st = ddpc_comm_group(T_comm, T_rank == 0 ? dup : ok, T_rank == 0 ? 2 : 1, NULL, &c);
    ck_assert_int_eq(st, DDPC_ERR_INVALID);
    ck_assert_msg(strstr(ddpc_last_error(T_rt), "listed twice"), "rank %d: %s", T_rank,
                  ddpc_last_error(T_rt));
    /* lists that differ across ranks */
    if (T_size > 1) {
        int a[1] = {T_rank == 1 ? 1 : 0};
        st = ddpc_comm_group(T_comm, a, 1, NULL, &c);
        ck_assert_int_eq(st, DDPC_ERR_INVALID);
        ck_assert_msg(strstr(ddpc_last_error(T_rt), "different lists"), "rank %d: %s", T_rank,
                      ddpc_last_error(T_rt));
    }
    /* a grid that does not factor the world */
    ddpc_comm_t row = NULL, col = NULL;
    st = ddpc_comm_grid(T_comm, T_size + 1, 1, NULL, &row, &col);
    ck_assert_int_eq(st, DDPC_ERR_INVALID);
    ck_assert_ptr_null(row);
    ck_assert_ptr_null(col);
    T_OK(ddpc_barrier(T_comm));
}
END_TEST

START_TEST(grid_rows_and_columns)
{
    const int ncols = T_size % 2 == 0 ? 2 : 1, nrows = T_size / ncols;
    ddpc_comm_t row = NULL, col = NULL;
    T_OK(ddpc_comm_grid(T_comm, nrows, ncols, NULL, &row, &col));
    ck_assert_int_eq(ddpc_comm_size(row), ncols);
    ck_assert_int_eq(ddpc_comm_size(col), nrows);
    ck_assert_int_eq(ddpc_comm_rank(row), T_rank % ncols);
    ck_assert_int_eq(ddpc_comm_rank(col), T_rank / ncols);
    int32_t me = T_rank, rs = 0, cs = 0, rwant = 0, cwant = 0;
    for (int q = 0; q < ncols; q++)
        rwant += T_rank / ncols * ncols + q;
    for (int r = 0; r < nrows; r++)
        cwant += r * ncols + T_rank % ncols;
    T_OK(ddpc_allreduce(row, &me, &rs, 1, DDPC_I32, DDPC_SUM));
    T_OK(ddpc_allreduce(col, &me, &cs, 1, DDPC_I32, DDPC_SUM));
    ck_assert_int_eq(rs, rwant);
    ck_assert_int_eq(cs, cwant);
    ddpc_comm_destroy(row);
    ddpc_comm_destroy(col);
}
END_TEST

/* every rank sends to the next and receives from the previous, in one batch */
static void ring(ddpc_comm_t c, size_t n)
{
    const int me = ddpc_comm_rank(c), size = ddpc_comm_size(c);
    if (size < 2)
        return;
    int32_t *out = malloc(n * sizeof *out), *in = malloc(n * sizeof *in);
    ck_assert_ptr_nonnull(out);
    ck_assert_ptr_nonnull(in);
    for (size_t i = 0; i < n; i++)
        out[i] = VAL(me, (int32_t)i), in[i] = -1;
    const int next = (me + 1) % size, prev = (me + size - 1) % size;
    ddpc_p2p_op_t ops[2] = {{1, next, out, n, DDPC_I32}, {0, prev, in, n, DDPC_I32}};
    ddpc_work_t w = NULL;
    T_OK(ddpc_p2p_batch(c, ops, 2, &w));
    T_OK(ddpc_work_wait(w, -1));
    for (size_t i = 0; i < n; i++)
        ck_assert_int_eq(in[i], VAL(prev, (int32_t)i));
    free(out);
    free(in);
}

START_TEST(p2p_ring_small_and_large)
{
    ring(T_comm, 1);
    ring(T_comm, 5000);
    ring(T_comm, (size_t)3 << 20); /* 12 MiB: more than one piece anywhere */
}
END_TEST

START_TEST(p2p_pairs_blocking_and_with_handles)
{
    if (T_size < 2)
        return;
    const int peer = T_rank ^ 1;
    if (peer >= T_size) { /* the odd one out of an odd world */
        T_OK(ddpc_barrier(T_comm));
        return;
    }
    double a[3] = {T_rank + 0.5, -1, 2}, b[3] = {0};
    if (T_rank % 2 == 0) {
        T_OK(ddpc_send(T_comm, a, 3, DDPC_F64, peer));
        T_OK(ddpc_recv(T_comm, b, 3, DDPC_F64, peer));
    } else {
        T_OK(ddpc_recv(T_comm, b, 3, DDPC_F64, peer));
        T_OK(ddpc_send(T_comm, a, 3, DDPC_F64, peer));
    }
    ck_assert_double_eq(b[0], peer + 0.5);
    ck_assert_double_eq(b[2], 2);
    /* handles (they run in issue order, as on NCCL's stream: the even rank
       sends first, the odd one receives first) */
    int64_t x = 77 + T_rank, y = 0;
    ddpc_work_t r, s;
    if (T_rank % 2 == 0) {
        T_OK(ddpc_isend(T_comm, &x, 1, DDPC_I64, peer, &s));
        T_OK(ddpc_irecv(T_comm, &y, 1, DDPC_I64, peer, &r));
    } else {
        T_OK(ddpc_irecv(T_comm, &y, 1, DDPC_I64, peer, &r));
        T_OK(ddpc_isend(T_comm, &x, 1, DDPC_I64, peer, &s));
    }
    T_OK(ddpc_work_wait(s, -1));
    T_OK(ddpc_work_wait(r, -1));
    ck_assert_int_eq(y, 77 + peer);
    /* transfers keep their order per pair, and collectives still agree */
    float f[2] = {1, 2}, g[2] = {0, 0};
    ddpc_p2p_op_t two[2] = {{1, peer, f, 1, DDPC_F32}, {1, peer, f + 1, 1, DDPC_F32}};
    ddpc_p2p_op_t got[2] = {{0, peer, g, 1, DDPC_F32}, {0, peer, g + 1, 1, DDPC_F32}};
    ddpc_work_t w1, w2;
    T_OK(ddpc_p2p_batch(T_comm, T_rank % 2 ? got : two, 2, &w1));
    T_OK(ddpc_p2p_batch(T_comm, T_rank % 2 ? two : got, 2, &w2));
    T_OK(ddpc_work_wait(w1, -1));
    T_OK(ddpc_work_wait(w2, -1));
    ck_assert_float_eq(g[0], 1);
    ck_assert_float_eq(g[1], 2);
    T_OK(ddpc_barrier(T_comm));
}
END_TEST

START_TEST(p2p_wrong_peers_refused)
{
    int32_t v = 0;
    ck_assert_int_eq(ddpc_send(T_comm, &v, 1, DDPC_I32, T_rank), DDPC_ERR_INVALID);
    ck_assert_msg(strstr(ddpc_last_error(T_rt), "is not another rank"), "%s",
                  ddpc_last_error(T_rt));
    ck_assert_int_eq(ddpc_recv(T_comm, &v, 1, DDPC_I32, T_size), DDPC_ERR_INVALID);
    ck_assert_int_eq(ddpc_p2p_batch(T_comm, NULL, 0, NULL), DDPC_ERR_INVALID);
}
END_TEST

/* a send whose receive is not there: a timeout naming both ranks and saying
 * how the peer is, then the receive comes and everything goes on */
START_TEST(p2p_send_without_receive_times_out_naming_both)
{
    if (T_size < 2)
        return;
    /* on a pair's own communicator, so that the world's queue stays free */
    ddpc_comm_t pair = NULL;
    T_OK(ddpc_comm_split(T_comm, T_rank < 2 ? 0 : DDPC_COLOR_NONE, 0, NULL, &pair));
    /* 4 MiB: above any eager limit, so that the send cannot complete alone */
    enum { N = 1 << 20 };
    int32_t *v = calloc(N, sizeof *v);
    ck_assert_ptr_nonnull(v);
    ddpc_work_t w = NULL;
    if (T_rank == 0) {
        v[N - 1] = 5;
        T_OK(ddpc_isend(pair, v, N, DDPC_I32, 1, &w));
        ck_assert_int_eq(ddpc_work_wait(w, 0.5), DDPC_ERR_TIMEOUT);
        const char *m = ddpc_last_error(T_rt);
        ck_assert_msg(strstr(m, "send #0 (1048576 x int32) from rank 0 to rank 1") &&
                      strstr(m, "matching receive"), "%s", m);
        /* and how the side channel sees the peer: alive (in the barrier) */
        ck_assert_msg(strstr(m, "; the peer: rank 1 on ") && strstr(m, ": alive (heartbeat"),
                      "%s", m);
    }
    T_OK(ddpc_barrier(T_comm)); /* only now does rank 1 receive */
    if (T_rank == 1) {
        T_OK(ddpc_recv(pair, v, N, DDPC_I32, 0));
        ck_assert_int_eq(v[N - 1], 5);
    }
    if (T_rank == 0)
        T_OK(ddpc_work_wait(w, -1));
    free(v);
    ddpc_comm_destroy(pair);
}
END_TEST

START_TEST(alltoall_gather_scatter_reduce)
{
    enum { K = 3 };
    const int n = T_size, root = T_size - 1;
    int32_t *snd = calloc((size_t)K * (size_t)n, sizeof(int32_t)),
            *rcv = malloc(sizeof(int32_t) * K * (size_t)n);
    for (int p = 0; p < n; p++)
        for (int i = 0; i < K; i++)
            snd[p * K + i] = VAL(T_rank, p * K + i);
    T_OK(ddpc_alltoall(T_comm, snd, rcv, K, DDPC_I32));
    for (int p = 0; p < n; p++) /* block p came from rank p's block for me */
        for (int i = 0; i < K; i++)
            ck_assert_int_eq(rcv[p * K + i], VAL(p, T_rank * K + i));
    memset(rcv, 0xff, sizeof(int32_t) * K * (size_t)n);
    T_OK(ddpc_gather(T_comm, snd, T_rank == root ? rcv : NULL, K, DDPC_I32, root));
    if (T_rank == root)
        for (int p = 0; p < n; p++)
            for (int i = 0; i < K; i++)
                ck_assert_int_eq(rcv[p * K + i], VAL(p, i));
    int32_t part[K] = {0};
    T_OK(ddpc_scatter(T_comm, T_rank == root ? snd : NULL, part, K, DDPC_I32, root));
    for (int i = 0; i < K; i++)
        ck_assert_int_eq(part[i], VAL(root, T_rank * K + i));
    float x[K] = {(float)T_rank, 1, (float)(2 * T_rank)}, s[K] = {-1, -1, -1};
    T_OK(ddpc_reduce(T_comm, x, s, K, DDPC_F32, DDPC_SUM, root));
    if (T_rank == root) {
        ck_assert_float_eq(s[0], (float)(n * (n - 1) / 2));
        ck_assert_float_eq(s[1], (float)n);
    } else {
        ck_assert_float_eq(s[0], -1); /* not the root's: untouched */
    }
    T_OK(ddpc_reduce(T_comm, x, x, K, DDPC_F32, DDPC_AVG, 0)); /* in place */
    if (T_rank == 0)
        ck_assert_float_eq(x[2], (float)(n - 1));
    ck_assert_int_eq(ddpc_alltoall(T_comm, snd, snd, K, DDPC_I32), DDPC_ERR_INVALID);
    ck_assert_int_eq(ddpc_gather(T_comm, snd, rcv, K, DDPC_I32, n), DDPC_ERR_INVALID);
    free(snd);
    free(rcv);
}
END_TEST

START_TEST(collectives_and_transfers_on_a_group)
{
    /* the odd ranks' communicator runs everything while the even ones
       run theirs: a group's traffic does not touch the other group's */
    ddpc_comm_t c = NULL;
    T_OK(ddpc_comm_split(T_comm, T_rank % 2, T_rank, NULL, &c));
    ring(c, 1000);
    const int n = ddpc_comm_size(c), me = ddpc_comm_rank(c);
    int32_t *snd = malloc(sizeof(int32_t) * (size_t)n), *rcv = malloc(sizeof(int32_t) * (size_t)n);
    for (int p = 0; p < n; p++)
        snd[p] = VAL(ddpc_comm_world_rank(c, me), p);
    T_OK(ddpc_alltoall(c, snd, rcv, 1, DDPC_I32));
    for (int p = 0; p < n; p++)
        ck_assert_int_eq(rcv[p], VAL(ddpc_comm_world_rank(c, p), me));
    free(snd);
    free(rcv);
    ddpc_comm_destroy(c);
}
END_TEST

/* the engine over the column of a grid averages over that column only */
START_TEST(ddp_over_a_group)
{
    const int ncols = T_size % 2 == 0 ? 2 : 1, nrows = T_size / ncols;
    ddpc_comm_t col = NULL;
    T_OK(ddpc_comm_grid(T_comm, nrows, ncols, NULL, NULL, &col));
    ddpc_ddp_t d = NULL;
    T_OK(ddpc_ddp_create(col, NULL, &d));
    int64_t shape[1] = {1000};
    int idx;
    T_OK(ddpc_ddp_add_param(d, "w", 1, shape, &idx));
    T_OK(ddpc_ddp_build(d));
    float *g = ddpc_ddp_grads(d, NULL);
    for (int i = 0; i < 1000; i++)
        g[i] = (float)(T_rank * 4 + i % 3);
    T_OK(ddpc_ddp_grad_ready(d, idx));
    T_OK(ddpc_ddp_wait(d));
    float mean = 0;
    for (int r = 0; r < nrows; r++)
        mean += (float)((r * ncols + T_rank % ncols) * 4);
    mean /= (float)nrows;
    for (int i = 0; i < 1000; i++)
        ck_assert_float_eq_tol(g[i], mean + (float)(i % 3), 1e-5f);
    T_OK(ddpc_ddp_check_params(d));
    ddpc_ddp_destroy(d);
    ddpc_comm_destroy(col);
}
END_TEST

/* One SGD step clipped to the norm of a model of N floats, as one engine
 * holding the whole model and as the world's ranks each holding a piece
 * (sizes not multiples of 16) with the world as norm group: the same norm
 * and the same parameters, bitwise. */
static ddpc_ddp_t engine(ddpc_comm_t c, size_t first, size_t n, ddpc_optim_t *opt)
{
    ddpc_ddp_t d = NULL;
    T_OK(ddpc_ddp_create(c, NULL, &d));
    int64_t shape[1] = {(int64_t)n};
    int idx;
    T_OK(ddpc_ddp_add_param(d, "w", 1, shape, &idx));
    T_OK(ddpc_ddp_build(d));
    float *p = ddpc_ddp_params(d, NULL), *g = ddpc_ddp_grads(d, NULL);
    for (size_t i = 0; i < n; i++) {
        p[i] = (float)((first + i) % 7) * 0.25f;
        g[i] = sinf((float)(first + i)) * 0.125f;
    }
    T_OK(ddpc_ddp_grad_ready(d, idx));
    T_OK(ddpc_ddp_wait(d));
    ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
    oc.lr = 1;
    oc.clip_norm = 0.01;
    T_OK(ddpc_optim_create(d, &oc, opt));
    return d;
}

START_TEST(norm_group_is_the_whole_models)
{
    size_t off[5] = {0};
    for (int r = 0; r < T_size; r++)
        off[r + 1] = off[r] + 37 + 13 * (size_t)r;
    const size_t N = off[T_size], mine = off[T_rank + 1] - off[T_rank];
    ddpc_comm_t self = NULL;
    T_OK(ddpc_comm_split(T_comm, T_rank, 0, NULL, &self));
    ddpc_optim_t whole_o, piece_o;
    ddpc_ddp_t whole = engine(self, 0, N, &whole_o), piece = engine(self, off[T_rank], mine, &piece_o);
    T_OK(ddpc_optim_step(whole_o, NULL));
    T_OK(ddpc_optim_set_norm_group(piece_o, T_comm, off[T_rank]));
    T_OK(ddpc_optim_step(piece_o, NULL));
    double a = ddpc_optim_last_grad_norm(whole_o), b = ddpc_optim_last_grad_norm(piece_o);
    ck_assert_msg(a == b && a > 0.01, "norm %.17g, whole model's %.17g", b, a);
    const float *pw = ddpc_ddp_params(whole, NULL), *pp = ddpc_ddp_params(piece, NULL);
    ck_assert_int_eq(memcmp(pw + off[T_rank], pp, mine * sizeof(float)), 0);
    /* a gap between rank 0's piece and rank 1's fails on every rank */
    if (T_size > 1) {
        ck_assert_int_eq(ddpc_optim_set_norm_group(piece_o, T_comm, off[T_rank] + (T_rank == 1)),
                         DDPC_ERR_INVALID);
        ck_assert_ptr_nonnull(strstr(ddpc_ddp_last_error(piece), "group rank 1's parameters "
                                                                 "start at float"));
    }
    ck_assert_int_eq(ddpc_optim_set_norm_group(NULL, T_comm, 0), DDPC_ERR_INVALID);
    ddpc_optim_destroy(whole_o);
    ddpc_optim_destroy(piece_o);
    ddpc_ddp_destroy(whole);
    ddpc_ddp_destroy(piece);
    ddpc_comm_destroy(self);
}
END_TEST

static Suite *groups_suite(void)
{
    Suite *s = suite_create("groups");
    TCase *t = tcase_create("split");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, split_orders_by_key_then_rank);
    tcase_add_test(t, split_equal_keys_keep_parent_order_and_none_gets_nothing);
    tcase_add_test(t, group_from_a_list);
    tcase_add_test(t, wrong_splits_fail_every_rank);
    tcase_add_test(t, grid_rows_and_columns);
    suite_add_tcase(s, t);
    t = tcase_create("p2p");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, p2p_ring_small_and_large);
    tcase_add_test(t, p2p_pairs_blocking_and_with_handles);
    tcase_add_test(t, p2p_wrong_peers_refused);
    tcase_add_test(t, p2p_send_without_receive_times_out_naming_both);
    suite_add_tcase(s, t);
    t = tcase_create("collectives");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, alltoall_gather_scatter_reduce);
    tcase_add_test(t, collectives_and_transfers_on_a_group);
    tcase_add_test(t, ddp_over_a_group);
    tcase_add_test(t, norm_group_is_the_whole_models);
    suite_add_tcase(s, t);
    return s;
}

MPI_TEST_MAIN(groups_suite)
