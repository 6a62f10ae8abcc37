/* SPDX-License-Identifier: BSD-3-Clause */
/* mpi_ddp.c: the DDP engine and optimizers under 1, 2 and 4 real MPI ranks.
 * The equivalence test trains a linear model (several weight blocks, so
 * several buckets) with N ranks on per-rank batch B and, on every rank, a
 * one-process reference on the N*B batch; parameters must agree within
 * float tolerance, and be bitwise identical across ranks after every step.
 * Also: accumulation, unused parameters, errors, compression, bucket plans,
 * clipping, loss scaling and the update rules against hand-computed values;
 * the folded average (DDPC_FOLD_AVERAGE) bitwise the averaging all-reduce;
 * the sharded optimizer (DDPC_SHARD=optim) bitwise the unsharded one;
 * synchronized batch norm's statistics against two passes over every rank's
 * samples. */
#include "linear_model.h"
#include "mpitest.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { B = 8 }; /* per-rank batch */

/* A DDP engine over the linear model on comm, with buckets small enough to have several. */
static ddpc_ddp_t make_ddp_on(ddpc_comm_t comm, const ddpc_ddp_config_t *cfg)
{
    ddpc_ddp_t d;
    T_OK(ddpc_ddp_create(comm, cfg, &d));
    for (int k = 0; k < K; k++) {
        char name[16];
        snprintf(name, sizeof name, "w.%d", k);
        int64_t shape[2] = {O / K, D};
        ck_assert_int_eq(ddpc_ddp_add_param(d, name, 2, shape, NULL), DDPC_OK);
    }
    int64_t bs[1] = {O};
    ck_assert_int_eq(ddpc_ddp_add_param(d, "b", 1, bs, NULL), DDPC_OK);
    ck_assert_msg(ddpc_ddp_build(d) == DDPC_OK, "%s", ddpc_ddp_last_error(d));
    size_t n;
    float *p = ddpc_ddp_params(d, &n); /* n is set by the call: not in the same expression */
    init_params(p, n, T_rank);
    ck_assert_int_eq(ddpc_ddp_broadcast_params(d), DDPC_OK);
    return d;
}

static ddpc_ddp_t make_ddp(const ddpc_ddp_config_t *cfg) { return make_ddp_on(T_comm, cfg); }

static ddpc_ddp_config_t small_buckets(void)
{
    ddpc_ddp_config_t c = DDPC_DDP_CONFIG_INIT;
    c.first_bucket_bytes = 512;
    c.bucket_bytes = 1500;
    return c;
}

/* Every rank's arena hashes the same. */
static void assert_identical_across_ranks(const float *a, size_t n, const char *what, int step)
{
    uint64_t h = fnv1a(a, n * sizeof *a), *all = calloc((size_t)T_size, sizeof *all);
    T_OK(ddpc_allgather(T_comm, &h, all, 1, DDPC_I64));
    for (int r = 1; r < T_size; r++)
        ck_assert_msg(all[r] == all[0], "%s differ between rank 0 and rank %d after step %d", what,
                      r, step);
    free(all);
}

/* backward: gradients become ready last parameter first; ranks use
 * different orders inside that (rank-dependent rotation), which must not
 * matter. */
static void backward_ready(ddpc_ddp_t d, int rotate)
{
    int np = ddpc_ddp_num_params(d);
    for (int j = 0; j < np; j++) {
        int i = np - 1 - (j + rotate) % np;
        ck_assert_msg(ddpc_ddp_grad_ready(d, i) == DDPC_OK, "%s", ddpc_ddp_last_error(d));
    }
}

static void check_equivalence(ddpc_optim_type_t type)
{
    ddpc_ddp_config_t dc = small_buckets();
    ddpc_ddp_t d = make_ddp(&dc);
    ck_assert_int_gt(ddpc_ddp_num_buckets(d), 2);
    ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
    oc.type = type;
    oc.lr = type == DDPC_OPTIM_SGD ? 0.05 : 0.01;
    oc.momentum = 0.9;
    oc.weight_decay = 0.01;
    ddpc_optim_t opt;
    T_OK(ddpc_optim_create(d, &oc, &opt));

    /* the one-process reference: its own engine state in plain arrays */
    size_t n;
    float *p = ddpc_ddp_params(d, &n), *g = ddpc_ddp_grads(d, NULL);
    float *rp = malloc(n * sizeof *rp), *rg = malloc(n * sizeof *rg);
    float *rm = calloc(n, sizeof *rm), *rv = calloc(n, sizeof *rv);
    memcpy(rp, p, n * sizeof *rp);
    for (int t = 0; t < 6; t++) {
        T_OK(ddpc_ddp_zero_grad(d));
        grad_linear(p, g, t, T_rank * B, B, 1.0f);
        backward_ready(d, T_rank);
        ck_assert_msg(ddpc_ddp_wait(d) == DDPC_OK, "%s", ddpc_ddp_last_error(d));
        T_OK(ddpc_optim_step(opt, NULL));
        assert_identical_across_ranks(p, n, "parameters", t);

        memset(rg, 0, n * sizeof *rg);
        grad_linear(rp, rg, t, 0, T_size * B, 1.0f);
        for (size_t i = 0; i < n; i++) { /* PyTorch's rules, in double */
            double gi = rg[i], pi = rp[i];
            if (type == DDPC_OPTIM_SGD) {
                gi += oc.weight_decay * pi;
                rm[i] = (float)(t == 0 ? gi : oc.momentum * rm[i] + gi);
                pi -= oc.lr * rm[i];
            } else {
                pi *= 1 - oc.lr * oc.weight_decay;
                rm[i] = (float)(oc.beta1 * rm[i] + (1 - oc.beta1) * gi);
                rv[i] = (float)(oc.beta2 * rv[i] + (1 - oc.beta2) * gi * gi);
                double mh = rm[i] / (1 - pow(oc.beta1, t + 1)), vh = rv[i] / (1 - pow(oc.beta2, t + 1));
                pi -= oc.lr * mh / (sqrt(vh) + oc.eps);
            }
            rp[i] = (float)pi;
        }
    }
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)p[i] - rp[i]));
    ck_assert_msg(worst < 2e-4, "DDP with %d ranks differs from 1 process on %dx batch by %g",
                  T_size, T_size, worst);
    ck_assert_uint_eq(ddpc_optim_steps(opt), 6);
    free(rp), free(rg), free(rm), free(rv);
    ddpc_optim_destroy(opt);
    ddpc_ddp_destroy(d);
}

START_TEST(equivalence_sgd_momentum) { check_equivalence(DDPC_OPTIM_SGD); }
END_TEST

START_TEST(equivalence_adamw) { check_equivalence(DDPC_OPTIM_ADAMW); }
END_TEST

START_TEST(accumulation_without_sync)
{
    /* k micro-steps of batch B with loss/k and no sync == one step on k*B */
    enum { KM = 3 };
    ddpc_ddp_config_t dc = small_buckets();
    ddpc_ddp_t d = make_ddp(&dc);
    size_t n;
    float *p = ddpc_ddp_params(d, &n), *g = ddpc_ddp_grads(d, NULL);
    T_OK(ddpc_ddp_zero_grad(d));
    uint64_t seq0 = ddpc_comm_seq(T_comm);
    for (int m = 0; m < KM; m++) {
        T_OK(ddpc_ddp_set_sync(d, m == KM - 1));
        grad_linear(p, g, 0, (T_rank * KM + m) * B, B, 1.0f / KM);
        backward_ready(d, 0);
        if (m < KM - 1)
            ck_assert_uint_eq(ddpc_comm_seq(T_comm), seq0); /* nothing on the wire */
        ck_assert_msg(ddpc_ddp_wait(d) == DDPC_OK, "%s", ddpc_ddp_last_error(d));
    }
    float *ref = calloc(n, sizeof *ref), *part = calloc(n, sizeof *part);
    for (int r = 0; r < T_size; r++) { /* the mean over all ranks' k*B samples */
        memset(part, 0, n * sizeof *part);
        grad_linear(p, part, 0, r * KM * B, KM * B, 1.0f);
        for (size_t i = 0; i < n; i++)
            ref[i] += part[i] / (float)T_size;
    }
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabsf(g[i] - ref[i]) < 1e-4f, "grad %zu: %g vs %g", i, g[i], ref[i]);
    free(ref), free(part);
    ddpc_ddp_destroy(d);
}
END_TEST

START_TEST(unused_parameters)
{
    ddpc_ddp_config_t dc = small_buckets();
    dc.find_unused = 1;
    ddpc_ddp_t d = make_ddp(&dc);
    size_t n;
    float *g = ddpc_ddp_grads(d, &n);
    T_OK(ddpc_ddp_zero_grad(d));
    for (size_t i = 0; i < n; i++)
        g[i] = 1.0f;
    int skip = ddpc_ddp_find_param(d, "w.1");
    ddpc_param_info_t info;
    T_OK(ddpc_ddp_param_info(d, skip, &info));
    memset(g + info.offset, 0, info.numel * sizeof *g); /* never touched in backward */
    for (int i = ddpc_ddp_num_params(d) - 1; i >= 0; i--)
        if (i != skip)
            T_OK(ddpc_ddp_grad_ready(d, i));
    ck_assert_msg(ddpc_ddp_wait(d) == DDPC_OK, "%s", ddpc_ddp_last_error(d));
    for (size_t i = 0; i < n; i++)
        ck_assert_float_eq(g[i], i >= info.offset && i < info.offset + info.numel ? 0.0f : 1.0f);
    ddpc_ddp_destroy(d);
}
END_TEST

START_TEST(missing_gradient_fails_every_rank)
{
    ddpc_ddp_config_t dc = small_buckets();
    ddpc_ddp_t d = make_ddp(&dc);
    /* rank 0 forgets "b"; the others do everything */
    for (int i = ddpc_ddp_num_params(d) - 1; i >= 0; i--)
        if (T_rank != 0 || i != ddpc_ddp_find_param(d, "b"))
            T_OK(ddpc_ddp_grad_ready(d, i));
    ddpc_status_t st = ddpc_ddp_wait(d);
    if (T_rank == 0) {
        ck_assert_int_eq(st, DDPC_ERR_STATE);
        ck_assert_msg(strstr(ddpc_ddp_last_error(d), "4 \"b\"") &&
                          strstr(ddpc_ddp_last_error(d), "find_unused"),
                      "%s", ddpc_ddp_last_error(d));
    } else {
        ck_assert_int_eq(st, DDPC_ERR_REMOTE);
        ck_assert_ptr_nonnull(strstr(ddpc_ddp_last_error(d), "another rank has 1 parameter"));
    }
    /* the engine recovers: the next full step works everywhere */
    backward_ready(d, 0);
    ck_assert_msg(ddpc_ddp_wait(d) == DDPC_OK, "%s", ddpc_ddp_last_error(d));
    ddpc_ddp_destroy(d);
}
END_TEST

START_TEST(ready_twice_is_named)
{
    ddpc_ddp_t d = make_ddp(NULL);
    T_OK(ddpc_ddp_grad_ready(d, 2));
    ck_assert_int_eq(ddpc_ddp_grad_ready(d, 2), DDPC_ERR_STATE);
    ck_assert_msg(strstr(ddpc_ddp_last_error(d), "parameter 2 \"w.2\" marked ready twice"), "%s",
                  ddpc_ddp_last_error(d));
    ck_assert_int_eq(ddpc_ddp_grad_ready(d, 99), DDPC_ERR_INVALID);
    for (int i = 4; i >= 0; i--)
        if (i != 2)
            T_OK(ddpc_ddp_grad_ready(d, i));
    ck_assert_int_eq(ddpc_ddp_wait(d), DDPC_OK);
    ddpc_ddp_destroy(d);
}
END_TEST

START_TEST(model_mismatch_named_on_every_rank)
{
    if (T_size == 1)
        return;
    ddpc_ddp_t d;
    T_OK(ddpc_ddp_create(T_comm, NULL, &d));
    int64_t a[2] = {10, 20}, b[1] = {10};
    if (T_rank == T_size - 1)
        a[1] = 21;
    const char *m;
    ck_assert_int_eq(ddpc_ddp_add_param(d, "fc.weight", 2, a, NULL), DDPC_OK);
    ck_assert_int_eq(ddpc_ddp_add_param(d, "fc.bias", 1, b, NULL), DDPC_OK);
    ck_assert_int_eq(ddpc_ddp_build(d), DDPC_ERR_MISMATCH);
    m = ddpc_ddp_last_error(d);
    if (T_rank == T_size - 1)
        ck_assert_msg(strstr(m, "parameter 0 is \"fc.weight\" float32[10, 21] on this rank") &&
                          strstr(m, "float32[10, 20] on rank 0"), "%s", m);
    else
        ck_assert_msg(strstr(m, "differs from rank 0 first at parameter 0 (\"fc.weight\""), "%s", m);
    ddpc_ddp_destroy(d);

    /* different sharding on the last rank: refused at build on every rank
     * (the arenas' shared windows and a step's collectives follow it) */
    ddpc_ddp_config_t dc = DDPC_DDP_CONFIG_INIT;
    dc.shard = T_rank == T_size - 1 ? DDPC_SHARD_OPTIM : DDPC_SHARD_NONE;
    T_OK(ddpc_ddp_create(T_comm, &dc, &d));
    ck_assert_int_eq(ddpc_ddp_add_param(d, "fc.bias", 1, b, NULL), DDPC_OK); /* the same model */
    ck_assert_int_eq(ddpc_ddp_build(d), DDPC_ERR_MISMATCH);
    m = ddpc_ddp_last_error(d);
    ck_assert_msg(strstr(m, "the ranks shard differently") &&
                      strstr(m, T_rank == T_size - 1 ? "DDPC_SHARD=optim here, none on rank 0"
                                                     : "DDPC_SHARD=none here, optim on rank"),
                  "%s", m);
    ddpc_ddp_destroy(d);

    /* a missing parameter on the last rank */
    T_OK(ddpc_ddp_create(T_comm, NULL, &d));
    ck_assert_int_eq(ddpc_ddp_add_param(d, "fc.weight", 2, a, NULL), DDPC_OK);
    if (T_rank != T_size - 1)
        ck_assert_int_eq(ddpc_ddp_add_param(d, "fc.bias", 1, b, NULL), DDPC_OK);
    ck_assert_int_eq(ddpc_ddp_build(d), DDPC_ERR_MISMATCH);
    ddpc_ddp_destroy(d);
}
END_TEST

START_TEST(compressed_bf16_close_and_identical)
{
    ddpc_ddp_config_t dc = small_buckets();
    dc.compress = DDPC_BF16;
    ddpc_ddp_t d = make_ddp(&dc);
    size_t n;
    float *p = ddpc_ddp_params(d, &n), *g = ddpc_ddp_grads(d, NULL);
    T_OK(ddpc_ddp_zero_grad(d));
    grad_linear(p, g, 3, T_rank * B, B, 1.0f);
    backward_ready(d, T_rank);
    ck_assert_msg(ddpc_ddp_wait(d) == DDPC_OK, "%s", ddpc_ddp_last_error(d));
    assert_identical_across_ranks(g, n, "compressed gradients", 0);
    float *ref = calloc(n, sizeof *ref);
    grad_linear(p, ref, 3, 0, T_size * B, 1.0f);
    double scale = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(ref[i]));
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs(g[i] - ref[i]) <= 0.02 * scale, "grad %zu: %g vs %g", i, g[i], ref[i]);
    free(ref);
    ddpc_ddp_destroy(d);
}
END_TEST

START_TEST(bucket_plans)
{
    /* sizes in floats: tiny ones, a zero-size one, one larger than the cap */
    static const int64_t sizes[] = {3, 0, 5000, 7, 100, 100, 100, 0, 1, 600};
    enum { NP = sizeof sizes / sizeof *sizes };
    ddpc_ddp_config_t c = DDPC_DDP_CONFIG_INIT;
    c.first_bucket_bytes = 400 * 4;
    c.bucket_bytes = 1000 * 4;
    ddpc_ddp_t d;
    T_OK(ddpc_ddp_create(T_comm, &c, &d));
    for (int i = 0; i < NP; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        T_OK(ddpc_ddp_add_param(d, name, 1, &sizes[i], NULL));
    }
    T_OK(ddpc_ddp_build(d));
    /* reverse order: {p9 (600 >= 400)}, {p8..p4: 1+0+100+100+100=301, +p3 7, +p2 5000 -> closes},
       {p1, p0} */
    ck_assert_int_eq(ddpc_ddp_num_buckets(d), 3);
    size_t off, cnt, end = 0, total;
    ddpc_ddp_params(d, &total);
    int64_t want[3][2] = {{5311, 600}, {3, 5308}, {0, 3}};
    for (int b = 0; b < 3; b++) {
        T_OK(ddpc_ddp_bucket(d, b, &off, &cnt));
        ck_assert_uint_eq(off, (size_t)want[b][0]);
        ck_assert_uint_eq(cnt, (size_t)want[b][1]);
        end += cnt;
    }
    ck_assert_uint_eq(end, total); /* the buckets tile the arena */
    ddpc_param_info_t info;
    T_OK(ddpc_ddp_param_info(d, 2, &info));
    ck_assert_int_eq(info.bucket, 1);
    ddpc_ddp_destroy(d);

    /* no parameters at all: build, step and wait still agree across ranks */
    T_OK(ddpc_ddp_create(T_comm, NULL, &d));
    T_OK(ddpc_ddp_build(d));
    ck_assert_int_eq(ddpc_ddp_num_buckets(d), 0);
    ck_assert_int_eq(ddpc_ddp_wait(d), DDPC_OK);
    ddpc_ddp_destroy(d);
}
END_TEST

START_TEST(clipping_and_loss_scaling)
{
    ddpc_ddp_t d = make_ddp(NULL);
    size_t n;
    float *p = ddpc_ddp_params(d, &n), *g = ddpc_ddp_grads(d, NULL);
    float *before = malloc(n * sizeof *before);
    ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
    oc.lr = 1.0;
    oc.clip_norm = 0.5;
    oc.dynamic_loss_scale = 1;
    oc.loss_scale = 1024;
    oc.scale_growth_interval = 2;
    ddpc_optim_t opt;
    T_OK(ddpc_optim_create(d, &oc, &opt));
    /* step 1: an inf on one rank reaches all after the reduction: skipped */
    T_OK(ddpc_ddp_zero_grad(d));
    if (T_rank == T_size - 1)
        g[5] = INFINITY;
    backward_ready(d, 0);
    T_OK(ddpc_ddp_wait(d));
    memcpy(before, p, n * sizeof *p);
    int stepped = -1;
    T_OK(ddpc_optim_step(opt, &stepped));
    ck_assert_int_eq(stepped, 0);
    ck_assert_double_eq(ddpc_optim_loss_scale(opt), 512);
    ck_assert_int_eq(memcmp(before, p, n * sizeof *p), 0);
    /* steps 2, 3: scaled gradient of norm 3 * 512 -> unscaled 3 -> clipped to 0.5 */
    for (int s = 0; s < 2; s++) {
        T_OK(ddpc_ddp_zero_grad(d));
        g[0] = 512.0f * 3.0f;
        backward_ready(d, 0);
        T_OK(ddpc_ddp_wait(d));
        memcpy(before, p, n * sizeof *p);
        T_OK(ddpc_optim_step(opt, &stepped));
        ck_assert_int_eq(stepped, 1);
        ck_assert_double_eq_tol(ddpc_optim_last_grad_norm(opt), 3.0, 1e-6);
        ck_assert_float_eq_tol(before[0] - p[0], 0.5f, 1e-5f);
    }
    ck_assert_double_eq(ddpc_optim_loss_scale(opt), 1024); /* grew after 2 good steps */
    free(before);
    ddpc_optim_destroy(opt);
    ddpc_ddp_destroy(d);
}
END_TEST

START_TEST(sgd_nesterov_rule)
{
    /* one weight, gradient constant 1: hand-computed with PyTorch's formulas */
    ddpc_ddp_t d;
    T_OK(ddpc_ddp_create(T_comm, NULL, &d));
    int64_t one = 1;
    T_OK(ddpc_ddp_add_param(d, "w", 1, &one, NULL));
    T_OK(ddpc_ddp_build(d));
    ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
    oc.lr = 0.1;
    oc.momentum = 0.5;
    oc.nesterov = 1;
    ddpc_optim_t opt;
    T_OK(ddpc_optim_create(d, &oc, &opt));
    float *p = ddpc_ddp_param(d, 0), *g = ddpc_ddp_grad(d, 0);
    double w = 0, buf = 0;
    for (int t = 0; t < 3; t++) {
        g[0] = 1.0f;
        T_OK(ddpc_optim_step(opt, NULL));
        buf = t == 0 ? 1.0 : 0.5 * buf + 1.0;
        w -= 0.1 * (1.0 + 0.5 * buf);
        ck_assert_double_eq_tol(p[0], w, 1e-6);
    }
    const char *name;
    ck_assert_ptr_nonnull(ddpc_optim_state(opt, 0, &name));
    ck_assert_str_eq(name, "momentum_buffer");
    ck_assert_double_eq_tol(ddpc_optim_state(opt, 0, NULL)[0], buf, 1e-6);
    oc.nesterov = 1;
    oc.momentum = 0;
    ddpc_optim_t bad;
    ck_assert_int_eq(ddpc_optim_create(d, &oc, &bad), DDPC_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(ddpc_ddp_last_error(d), "nesterov"));
    ddpc_optim_destroy(opt);
    ddpc_ddp_destroy(d);
}
END_TEST

/* The replica check: identical replicas pass; one rank's parameter changed
 * outside the engine fails every rank, naming that rank; DDPC_CHECK_PARAMS=2
 * runs it in every second optimizer step. */
START_TEST(replicas_compared)
{
    const int odd = T_size - 1; /* the rank that changes a parameter */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            setenv("DDPC_CHECK_PARAMS", "2", 1);
        ddpc_ddp_t d = make_ddp(NULL);
        unsetenv("DDPC_CHECK_PARAMS");
        ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
        ddpc_optim_t opt;
        T_OK(ddpc_optim_create(d, &oc, &opt));
        T_OK(ddpc_ddp_check_params(d));
        T_OK(ddpc_ddp_zero_grad(d));
        T_OK(ddpc_optim_step(opt, NULL)); /* step 1: no gradient, no change */
        T_OK(ddpc_optim_step(opt, NULL)); /* step 2: checked in pass 1, identical */
        if (T_rank == odd)
            ddpc_ddp_params(d, NULL)[3] += 1.0f;
        ddpc_status_t want = T_size > 1 ? DDPC_ERR_MISMATCH : DDPC_OK;
        ddpc_status_t got = pass == 0 ? ddpc_ddp_check_params(d) : DDPC_OK;
        if (pass == 1) {
            T_OK(ddpc_optim_step(opt, NULL)); /* step 3: not checked */
            got = ddpc_optim_step(opt, NULL); /* step 4: checked */
        }
        ck_assert_msg(got == want, "pass %d: %s (%s)", pass, ddpc_strerror(got),
                      ddpc_ddp_last_error(d));
        if (T_size > 1) {
            char who[32];
            snprintf(who, sizeof who, "rank %d ", odd);
            const char *msg = ddpc_ddp_last_error(d);
            ck_assert_msg(strstr(msg, "parameters differ across ranks") && strstr(msg, who) &&
                              strstr(msg, "1 of "),
                          "message: %s", msg);
        }
        ddpc_optim_destroy(opt);
        ddpc_ddp_destroy(d);
    }
}
END_TEST

/* DDPC_OVERLAP: 0 and 1 as set; auto (the default) on for one rank, off
 * where every rank of one node has at most one CPU (this machine's tests:
 * unbound ranks, no more CPUs than two per rank); a bad value refused. */
START_TEST(overlap_setting)
{
    ddpc_ddp_t d;
    const char *set[] = {"0", "1"};
    for (int k = 0; k < 2; k++) {
        setenv("DDPC_OVERLAP", set[k], 1);
        T_OK(ddpc_ddp_create(T_comm, NULL, &d));
        ck_assert_int_eq(ddpc_ddp_overlap(d), k);
        ddpc_ddp_destroy(d);
    }
    unsetenv("DDPC_OVERLAP");
    T_OK(ddpc_ddp_create(T_comm, NULL, &d));
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (T_size == 1)
        ck_assert_int_eq(ddpc_ddp_overlap(d), 1);
    else if (online / T_size < 2 && ddpc_world(T_rt)->num_nodes <= 1)
        ck_assert_msg(ddpc_ddp_overlap(d) == 0, "auto: %d ranks on %ld CPUs overlap", T_size, online);
    ddpc_ddp_destroy(d);
    setenv("DDPC_OVERLAP", "yes", 1);
    ck_assert_int_eq(ddpc_ddp_create(T_comm, NULL, &d), DDPC_ERR_INVALID);
    ck_assert_msg(strstr(ddpc_ddp_last_error(d), "DDPC_OVERLAP=\"yes\": expected one of 0|1|auto"),
                  "%s", ddpc_ddp_last_error(d));
    ddpc_ddp_destroy(d);
    unsetenv("DDPC_OVERLAP");
}
END_TEST

/* ------------------------------------------------------------------ sharding */

/* The optimizer of the sharding and folding cases: lr 0.05 (SGD) or 0.01
 * (AdamW), weight decay 0.01, and with loss_scale a dynamic scale from 256
 * that doubles every 2 good steps. */
static ddpc_optim_config_t case_optim(ddpc_optim_type_t type, double mu, double clip, int loss_scale)
{
    ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
    oc.type = type;
    oc.lr = type == DDPC_OPTIM_SGD ? 0.05 : 0.01;
    oc.momentum = mu;
    oc.weight_decay = 0.01;
    oc.clip_norm = clip;
    if (loss_scale) {
        oc.dynamic_loss_scale = 1;
        oc.loss_scale = 256;
        oc.scale_growth_interval = 2;
    }
    return oc;
}

/* Step t's micro-steps on engine d, rank `rank` of its communicator: zero_grad,
 * then accum backwards of the linear model (the last one synced), the loss
 * scaled by o's loss scale when loss_scale; at t == 2 rank 0's first
 * micro-step overflows (the step is skipped everywhere). */
/* A backward as a model writes it under DDPC_SHARD=grads: the micro-step's
 * gradients g (the whole model's, computed aside) go in parameter by
 * parameter, last first, each through the pointer ddpc_ddp_grad gives just
 * before (its bucket's stage), then grad_ready. */
static void backward_staged(ddpc_ddp_t d, const float *g)
{
    for (int i = ddpc_ddp_num_params(d) - 1; i >= 0; i--) {
        ddpc_param_info_t info;
        T_OK(ddpc_ddp_param_info(d, i, &info));
        float *dst = ddpc_ddp_grad(d, i);
        ck_assert_msg(dst != NULL, "%s", ddpc_ddp_last_error(d));
        memcpy(dst, g + info.offset, info.numel * sizeof *dst);
        ck_assert_msg(ddpc_ddp_grad_ready(d, i) == DDPC_OK, "%s", ddpc_ddp_last_error(d));
    }
}

static void micro_steps(ddpc_ddp_t d, ddpc_optim_t o, int rank, int t, int accum, int loss_scale)
{
    size_t n;
    float *p = ddpc_ddp_params(d, &n), *g = ddpc_ddp_grads(d, NULL);
    float *aside = g ? NULL : malloc(n * sizeof *aside); /* shard grads: no arena */
    T_OK(ddpc_ddp_zero_grad(d));
    for (int m = 0; m < accum; m++) {
        T_OK(ddpc_ddp_set_sync(d, m == accum - 1));
        /* the forward's first use of each parameter: its bucket's gather
           (DDPC_GATHER_FORWARD; at once otherwise) */
        for (int i = 0; i < ddpc_ddp_num_params(d); i++)
            T_OK(ddpc_ddp_param_wait(d, i));
        float *w = g ? g : aside;
        if (aside)
            memset(aside, 0, n * sizeof *aside);
        grad_linear(p, w, t * 8 + m, rank * B, B,
                    (float)(loss_scale ? ddpc_optim_loss_scale(o) : 1.0) / (float)accum);
        if (loss_scale && t == 2 && rank == 0 && m == 0)
            w[n - 1] = INFINITY;
        if (aside)
            backward_staged(d, aside);
        else
            backward_ready(d, rank);
        ck_assert_msg(ddpc_ddp_wait(d) == DDPC_OK, "%s", ddpc_ddp_last_error(d));
    }
    free(aside);
}

/* One case of the sharded engine (DDPC_SHARD=optim) against the unsharded
 * one, trained side by side on the same data: after every step the
 * parameters, and the last gradient norm, are bitwise the same; the state
 * is rank r's slice of the unsharded state, also bitwise. */
typedef struct {
    ddpc_optim_type_t type;
    double clip;
    int loss_scale;     /* dynamic, with an overflow at step 2 */
    int accum;          /* micro-steps per step (set_sync(0) before the last) */
    ddpc_dtype_t compress;
    int shard;          /* DDPC_SHARD_OPTIM, or _GRADS: bitwise is not promised */
    int gather;         /* the sharded engine's shard_gather (ddpc_shard_gather_t) */
    int stages;         /* grad_stages (0: the default, 2) */
} shard_case_t;

/* |a - b| over max |b| of the arena, and whether any float differs */
static double rel_diff(const float *a, const float *b, size_t n, int *differ)
{
    double worst = 0, big = 0;
    *differ = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        big = fmax(big, fabs((double)b[i]));
        *differ |= memcmp(&a[i], &b[i], sizeof *a) != 0;
    }
    return big > 0 ? worst / big : worst;
}

static void check_sharded(const shard_case_t *sc)
{
    ddpc_ddp_config_t dc = small_buckets();
    dc.compress = sc->compress;
    ddpc_ddp_t d[2];
    ddpc_optim_t o[2];
    const ddpc_optim_config_t oc = case_optim(sc->type, 0.9, sc->clip, sc->loss_scale);
    for (int e = 0; e < 2; e++) { /* e = 0: unsharded, 1: sharded */
        dc.shard = e ? sc->shard : DDPC_SHARD_NONE;
        dc.shard_gather = e ? sc->gather : DDPC_GATHER_STEP;
        dc.grad_stages = sc->stages;
        if (sc->gather == DDPC_GATHER_FORWARD)
            dc.overlap = 1; /* a gather in the forward needs an engine that overlaps */
        d[e] = make_ddp(&dc);
        T_OK(ddpc_optim_create(d[e], &oc, &o[e]));
    }
    size_t n, off, len, off0, len0;
    ddpc_ddp_params(d[0], &n);
    T_OK(ddpc_optim_state_range(o[0], &off0, &len0));
    T_OK(ddpc_optim_state_range(o[1], &off, &len));
    ck_assert_uint_eq(off0, 0);
    ck_assert_uint_eq(len0, n);
    /* 1/N of the state, aligned to 16 floats */
    size_t want = ((n + (size_t)T_size - 1) / (size_t)T_size + 15) / 16 * 16;
    ck_assert_uint_eq(len, want);
    ck_assert_uint_eq(off, (size_t)T_rank * want);
    ck_assert_uint_eq(off % 16, 0);
    ck_assert_uint_ge(len * (size_t)T_size, n);
    ck_assert_uint_lt(len * (size_t)T_size, n + 16 * (size_t)T_size);
    if (sc->shard == DDPC_SHARD_GRADS) { /* the gradient memory: the slice and the stages */
        int nb = ddpc_ddp_num_buckets(d[1]), k = sc->stages ? sc->stages : 2;
        size_t big = 0, bo, bn;
        for (int b = 0; b < nb; b++)
            if (ddpc_ddp_bucket(d[1], b, &bo, &bn) == DDPC_OK && bn > big)
                big = bn;
        big = (big + 15) / 16 * 16;
        ck_assert_uint_eq(ddpc_ddp_grad_bytes(d[1]), (len + (size_t)(k < nb ? k : nb) * big) * 4);
        ck_assert_uint_eq(ddpc_ddp_grad_bytes(d[0]), n * 4);
        ck_assert_ptr_null(ddpc_ddp_grads(d[1], NULL));
    }
    for (int t = 0; t < 6; t++) {
        for (int e = 0; e < 2; e++) {
            micro_steps(d[e], o[e], T_rank, t, sc->accum, sc->loss_scale);
            int stepped = -1;
            ck_assert_msg(ddpc_optim_step(o[e], &stepped) == DDPC_OK, "%s",
                          ddpc_ddp_last_error(d[e]));
            ck_assert_int_eq(stepped, !(sc->loss_scale && t == 2));
            /* a FORWARD gather in flight after a step that updated, where
               the engine overlaps (not under DDPC_OVERLAP=0), then all of it */
            const int fwd = e && sc->gather == DDPC_GATHER_FORWARD && T_size > 1 && stepped &&
                            ddpc_ddp_overlap(d[e]);
            ck_assert_msg(fwd ? ddpc_ddp_param_pending(d[e]) == ddpc_ddp_num_buckets(d[e])
                              : ddpc_ddp_param_pending(d[e]) == 0,
                          "step %d, engine %d: %d buckets' gathers pending", t, e,
                          ddpc_ddp_param_pending(d[e]));
            T_OK(ddpc_ddp_param_wait(d[e], -1));
            ck_assert_int_eq(ddpc_ddp_param_pending(d[e]), 0);
        }
        const float *p0 = ddpc_ddp_params(d[0], NULL), *p1 = ddpc_ddp_params(d[1], NULL);
        assert_identical_across_ranks(p1, n, "sharded parameters", t);
        if (sc->shard == DDPC_SHARD_GRADS) { /* reduces may sum otherwise than all-reduces */
            int differ;
            double rel = rel_diff(p1, p0, n, &differ);
            ck_assert_msg(rel <= 1e-6, "rank %d of %d, step %d: ZeRO-2 parameters differ from "
                          "the unsharded ones by %g relative", T_rank, T_size, t, rel);
            if (t == 5 && T_rank == 0)
                fprintf(stderr, "ZeRO-2 (%s, clip %g) at %d ranks after 6 steps: %s (max "
                        "relative difference %g)\n", sc->type == DDPC_OPTIM_SGD ? "sgd" : "adamw",
                        sc->clip, T_size, differ ? "not bitwise" : "bitwise", rel);
            double n0 = ddpc_optim_last_grad_norm(o[0]), n1 = ddpc_optim_last_grad_norm(o[1]);
            ck_assert_msg(fabs(n0 - n1) <= 1e-6 * fabs(n0) || (isinf(n0) && isinf(n1)),
                          "step %d: ZeRO-2 gradient norm %.17g, unsharded %.17g", t, n1, n0);
            /* the slice holds this rank's part of the averaged gradients */
            size_t goff, gn;
            const float *gs = ddpc_ddp_grad_slice(d[1], &goff, &gn);
            const float *ga = ddpc_ddp_grads(d[0], NULL);
            ck_assert_uint_eq(goff, off < n ? off : n);
            ck_assert_uint_eq(gn, off < n ? (n - off < len ? n - off : len) : 0);
            if (!(sc->loss_scale && t == 2) && gn) {
                rel = rel_diff(gs, ga + goff, gn, &differ);
                ck_assert_msg(rel <= 1e-6, "rank %d, step %d: the ZeRO-2 gradient slice "
                              "differs from the unsharded gradients by %g relative", T_rank, t, rel);
            }
            continue;
        }
        size_t bad = n;
        for (size_t i = 0; i < n && bad == n; i++)
            if (memcmp(&p0[i], &p1[i], sizeof *p0))
                bad = i;
        ck_assert_msg(bad == n, "rank %d of %d, step %d: sharded parameter %zu is %.9g, "
                      "unsharded %.9g", T_rank, T_size, t, bad, bad < n ? p1[bad] : 0.0,
                      bad < n ? p0[bad] : 0.0);
        double n0 = ddpc_optim_last_grad_norm(o[0]), n1 = ddpc_optim_last_grad_norm(o[1]);
        ck_assert_msg(!memcmp(&n0, &n1, sizeof n0) || (isinf(n0) && isinf(n1)),
                      "step %d: sharded gradient norm %.17g, unsharded %.17g", t, n1, n0);
        ck_assert(ddpc_optim_loss_scale(o[0]) == ddpc_optim_loss_scale(o[1]));
    }
    ck_assert_int_eq(ddpc_optim_num_states(o[1]), ddpc_optim_num_states(o[0]));
    for (int k = 0; k < ddpc_optim_num_states(o[0]); k++) {
        const float *full = ddpc_optim_state(o[0], k, NULL), *mine = ddpc_optim_state(o[1], k, NULL);
        /* the first difference, then one assertion (Check writes each
         * assertion's location to a pipe: one per float is slow) */
        size_t i = 0;
        float w = 0.0f;
        /* ZeRO-2: a gradient summed in another order differs by its ulps,
           which cancellation makes large relative to a small element: the
           tolerance is relative to the tensor's largest element */
        double big = 0;
        for (size_t j = 0; j < len && off + j < n; j++)
            big = fmax(big, fabs((double)full[off + j]));
        for (; i < len; i++) {
            w = off + i < n ? full[off + i] : 0.0f; /* the padding stays zero */
            int same = sc->shard == DDPC_SHARD_GRADS
                           ? fabs((double)w - mine[i]) <= 1e-5 * (fabs((double)w) + big)
                           : !memcmp(&w, &mine[i], sizeof w);
            if (!same)
                break;
        }
        ck_assert_msg(i == len, "state %d float %zu: %g, expected %g (%s)", k, off + i,
                      i < len ? mine[i] : 0.0, w,
                      sc->shard == DDPC_SHARD_GRADS ? "within 1e-5 of the largest" : "bitwise");
    }
    for (int e = 0; e < 2; e++) {
        ddpc_optim_destroy(o[e]);
        ddpc_ddp_destroy(d[e]);
    }
}

/* Folding the average (DDPC_FOLD_AVERAGE): the buckets all-reduced as sums
 * and the 1/N made in the optimizer's pass give the parameters, the norm and
 * the loss scale of the engine that averages in the all-reduce, bit for bit;
 * between wait and step the arena holds the sums (read through a pointer
 * kept from before the wait) and the accessors hand out the averages. On
 * comm, whose size may be any (a 3-rank split: x / 3, not x * (1/3)). */
typedef struct {
    ddpc_optim_type_t type;
    double mu, clip;
    int nesterov, loss_scale, accum;
} fold_case_t;

static void check_fold(ddpc_comm_t comm, const fold_case_t *fc)
{
    const int rank = ddpc_comm_rank(comm), size = ddpc_comm_size(comm);
    ddpc_ddp_config_t dc = small_buckets();
    ddpc_optim_config_t oc = case_optim(fc->type, fc->mu, fc->clip, fc->loss_scale);
    oc.nesterov = fc->nesterov;
    ddpc_ddp_t d[2];
    ddpc_optim_t o[2];
    for (int e = 0; e < 2; e++) { /* e = 0: averaged in the all-reduce, 1: folded */
        dc.fold_average = e ? DDPC_FOLD_AUTO : 0;
        d[e] = make_ddp_on(comm, &dc);
        T_OK(ddpc_optim_create(d[e], &oc, &o[e]));
    }
    size_t n;
    ddpc_ddp_params(d[0], &n);
    float *sums = malloc(n * sizeof *sums);
    int folded = 0;
    for (int t = 0; t < 6; t++) {
        for (int e = 0; e < 2; e++) {
            const float *g = ddpc_ddp_grads(d[e], NULL);
            micro_steps(d[e], o[e], rank, t, fc->accum, fc->loss_scale);
            if (e == 1 && t == 1) { /* the sums through the old pointer, the averages anew */
                memcpy(sums, g, n * sizeof *sums);
                const float *avg = ddpc_ddp_grads(d[e], NULL);
                size_t i = 0;
                for (; i < n; i++) {
                    float want = (size & (size - 1)) == 0 ? sums[i] * (1.0f / (float)size)
                                                          : sums[i] / (float)size;
                    if (memcmp(&want, &avg[i], sizeof want))
                        break;
                    folded += sums[i] != avg[i];
                }
                ck_assert_msg(i == n, "rank %d of %d: gradient %zu: sum %.9g, accessor %.9g",
                              rank, size, i, i < n ? sums[i] : 0.0, i < n ? avg[i] : 0.0);
            }
            int stepped = -1;
            ck_assert_msg(ddpc_optim_step(o[e], &stepped) == DDPC_OK, "%s",
                          ddpc_ddp_last_error(d[e]));
            ck_assert_int_eq(stepped, !(fc->loss_scale && t == 2));
        }
        const float *p0 = ddpc_ddp_params(d[0], NULL), *p1 = ddpc_ddp_params(d[1], NULL);
        const float *g0 = ddpc_ddp_grads(d[0], NULL), *g1 = ddpc_ddp_grads(d[1], NULL);
        size_t bad = n, badg = n;
        for (size_t i = 0; i < n && bad == n; i++)
            if (memcmp(&p0[i], &p1[i], sizeof *p0))
                bad = i;
        for (size_t i = 0; i < n && badg == n; i++) /* after the step: the averages (or their clip) */
            if (memcmp(&g0[i], &g1[i], sizeof *g0))
                badg = i;
        ck_assert_msg(bad == n && badg == n, "rank %d of %d, step %d (%s mu %g nesterov %d clip %g "
                      "scale %d accum %d): folded parameter %zu is %.9g, unfolded %.9g; gradient "
                      "%zu differs", rank, size, t, ddpc_optim_name(fc->type), fc->mu,
                      fc->nesterov, fc->clip, fc->loss_scale, fc->accum, bad,
                      bad < n ? p1[bad] : 0.0, bad < n ? p0[bad] : 0.0, badg);
        double n0 = ddpc_optim_last_grad_norm(o[0]), n1 = ddpc_optim_last_grad_norm(o[1]);
        ck_assert_msg(!memcmp(&n0, &n1, sizeof n0) || (isinf(n0) && isinf(n1)),
                      "step %d: folded gradient norm %.17g, unfolded %.17g", t, n1, n0);
        ck_assert(ddpc_optim_loss_scale(o[0]) == ddpc_optim_loss_scale(o[1]));
    }
    /* at 1 rank nothing is owed; otherwise the arena did hold sums */
    ck_assert_msg((size > 1) == (folded > 0), "rank %d of %d: %d gradients differed from their "
                  "sums' average", rank, size, folded);
    free(sums);
    for (int e = 0; e < 2; e++) {
        ddpc_optim_destroy(o[e]);
        ddpc_ddp_destroy(d[e]);
    }
}

static void fold_cases(ddpc_comm_t comm)
{
    static const fold_case_t cases[] = {
        {DDPC_OPTIM_SGD, 0.9, 0, 0, 0, 1},    /* the fused pass */
        {DDPC_OPTIM_SGD, 0.0, 0, 0, 0, 1},    /* without momentum */
        {DDPC_OPTIM_SGD, 0.9, 0, 1, 0, 1},    /* Nesterov */
        {DDPC_OPTIM_SGD, 0.9, 0.05, 0, 0, 3}, /* clipping (the norm's pass), accumulation */
        {DDPC_OPTIM_ADAMW, 0, 0, 0, 0, 1},
        {DDPC_OPTIM_ADAMW, 0, 0.05, 0, 1, 1}, /* loss scaling with an overflow */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        check_fold(comm, &cases[k]);
}

START_TEST(folded_average_bitwise)
{
    fold_cases(T_comm);
    if (T_size < 4)
        return;
    ddpc_comm_t three; /* a world size that is not a power of two */
    T_OK(ddpc_comm_split(T_comm, T_rank < 3 ? 0 : DDPC_COLOR_NONE, 0, NULL, &three));
    if (three)
        fold_cases(three);
    ddpc_comm_destroy(three);
}
END_TEST

/* A backward that adds onto a folded sum (no zero_grad or accessor since the
 * wait; with or without an optimizer step between) is refused on every
 * rank; DDPC_FOLD_AVERAGE=0 takes it. */
START_TEST(folded_sum_accumulated_refused)
{
    ddpc_ddp_config_t dc = small_buckets();
    for (int c = 0; c < 3; c++) { /* 0: no step between, 1: a step, 2: not folded */
        const int off = c == 2;
        if (off)
            setenv("DDPC_FOLD_AVERAGE", "0", 1);
        ddpc_ddp_t d = make_ddp(&dc);
        ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
        ddpc_optim_t o;
        T_OK(ddpc_optim_create(d, &oc, &o));
        float *p = ddpc_ddp_params(d, NULL), *g = ddpc_ddp_grads(d, NULL);
        T_OK(ddpc_ddp_zero_grad(d));
        ddpc_status_t st = DDPC_OK;
        for (int t = 0; t < 2 && st == DDPC_OK; t++) { /* two backwards, one optimizer step */
            grad_linear(p, g, t, T_rank * B, B, 1.0f);
            /* with overlap (ranks on two nodes) the first grad_ready that
               launches a bucket refuses; without, the wait */
            for (int i = ddpc_ddp_num_params(d) - 1; i >= 0 && st == DDPC_OK; i--)
                st = ddpc_ddp_grad_ready(d, i);
            ddpc_status_t ws = ddpc_ddp_wait(d);
            st = st ? st : ws;
            if (st == DDPC_OK && t == 0 && c == 1)
                st = ddpc_optim_step(o, NULL);
        }
        if (off || T_size == 1) {
            ck_assert_msg(st == DDPC_OK, "%s", ddpc_ddp_last_error(d));
        } else {
            ck_assert_int_eq(st, DDPC_ERR_STATE);
            ck_assert_msg(strstr(ddpc_ddp_last_error(d), "DDPC_FOLD_AVERAGE=0"), "%s",
                          ddpc_ddp_last_error(d));
        }
        /* the engine goes on after zero_grad */
        T_OK(ddpc_ddp_zero_grad(d));
        grad_linear(p, g, 3, T_rank * B, B, 1.0f);
        backward_ready(d, T_rank);
        ck_assert_msg(ddpc_ddp_wait(d) == DDPC_OK, "%s", ddpc_ddp_last_error(d));
        T_OK(ddpc_optim_step(o, NULL));
        ddpc_optim_destroy(o);
        ddpc_ddp_destroy(d);
    }
    unsetenv("DDPC_FOLD_AVERAGE");
}
END_TEST

START_TEST(sharded_sgd_momentum_bitwise)
{
    shard_case_t c = {DDPC_OPTIM_SGD, 0, 0, 1, DDPC_F32, DDPC_SHARD_OPTIM, DDPC_GATHER_STEP};
    check_sharded(&c);
    c.clip = 0.05; /* clips every step */
    check_sharded(&c);
}
END_TEST

START_TEST(sharded_adamw_bitwise)
{
    shard_case_t c = {DDPC_OPTIM_ADAMW, 0, 0, 1, DDPC_F32, DDPC_SHARD_OPTIM, DDPC_GATHER_STEP};
    check_sharded(&c);
    c.clip = 0.05;
    check_sharded(&c);
}
END_TEST

START_TEST(sharded_scaling_accumulation_compression)
{
    shard_case_t c = {DDPC_OPTIM_ADAMW, 0.05, 1, 1, DDPC_F32, DDPC_SHARD_OPTIM, DDPC_GATHER_STEP};
    check_sharded(&c); /* loss scaling, one overflow */
    shard_case_t a = {DDPC_OPTIM_SGD, 0.05, 0, 3, DDPC_F32, DDPC_SHARD_OPTIM, DDPC_GATHER_STEP};
    check_sharded(&a); /* 3 micro-steps, set_sync(0) for 2 */
    shard_case_t z = {DDPC_OPTIM_SGD, 0, 0, 1, DDPC_BF16, DDPC_SHARD_OPTIM, DDPC_GATHER_STEP};
    check_sharded(&z); /* bf16 on the wire */
}
END_TEST

START_TEST(sharded_grads_close)
{
    /* ZeRO-2: reduces into the slices instead of all-reduces */
    shard_case_t c = {DDPC_OPTIM_SGD, 0.05, 0, 1, DDPC_F32, DDPC_SHARD_GRADS, DDPC_GATHER_STEP};
    check_sharded(&c);
    shard_case_t w = {DDPC_OPTIM_ADAMW, 0.05, 1, 1, DDPC_F32, DDPC_SHARD_GRADS, DDPC_GATHER_STEP};
    check_sharded(&w); /* with loss scaling and an overflow */
    shard_case_t a = {DDPC_OPTIM_ADAMW, 0, 0, 3, DDPC_F32, DDPC_SHARD_GRADS, DDPC_GATHER_STEP};
    check_sharded(&a); /* accumulation */
    /* one stage: each bucket's take waits for the reduce of the one before */
    c.stages = a.stages = 1;
    check_sharded(&c);
    check_sharded(&a);
    /* without overlap: each bucket reduced on this thread as it completes */
    setenv("DDPC_OVERLAP", "0", 1);
    check_sharded(&c);
    unsetenv("DDPC_OVERLAP");
}
END_TEST

/* DDPC_SHARD=grads' stages: a gradient taken out of the backward's order
 * fails, naming the bucket that holds its stage, and the step goes on;
 * grad_ready of a gradient not taken is refused; under find_unused a bucket
 * none of whose gradients was taken is reduced as zeros; a second step
 * starts from zero stages and a fresh window. */
START_TEST(sharded_grads_stages)
{
    ddpc_ddp_config_t dc = small_buckets();
    dc.shard = DDPC_SHARD_GRADS;
    dc.grad_stages = 1;
    dc.find_unused = 1;
    ddpc_ddp_t d = make_ddp(&dc);
    /* buckets {w.3, b}, {w.1, w.2}, {w.0}: w.0 alone, to be left untaken */
    const int last = ddpc_ddp_num_params(d) - 1, skip = ddpc_ddp_find_param(d, "w.0");
    ck_assert_int_gt(ddpc_ddp_num_buckets(d), 2);
    ddpc_param_info_t pl, p0, ps;
    T_OK(ddpc_ddp_param_info(d, last, &pl));
    T_OK(ddpc_ddp_param_info(d, 0, &p0));
    T_OK(ddpc_ddp_param_info(d, skip, &ps));
    ck_assert_int_ne(pl.bucket, p0.bucket);
    for (int i = 1; i < last; i++) { /* no other parameter in w.0's bucket */
        ddpc_param_info_t pi;
        T_OK(ddpc_ddp_param_info(d, i, &pi));
        ck_assert_int_ne(pi.bucket, ps.bucket);
    }
    size_t n;
    ddpc_ddp_params(d, &n);
    float *g = malloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++)
        g[i] = 1.0f + (float)T_rank;
    for (int step = 0; step < 2; step++) {
        if (step == 0)
            T_OK(ddpc_ddp_zero_grad(d)); /* the second step without: a window starts anyway */
        ck_assert_ptr_nonnull(ddpc_ddp_grad(d, last));
        /* parameter 0's bucket needs the one stage, which the last one's holds */
        ck_assert_ptr_null(ddpc_ddp_grad(d, 0));
        const char *e = ddpc_ddp_last_error(d);
        ck_assert_msg(strstr(e, "needs gradient stage 0 of 1") && strstr(e, "DDPC_GRAD_STAGES"),
                      "%s", e);
        ck_assert_int_eq(ddpc_ddp_grad_ready(d, 0), DDPC_ERR_STATE);
        ck_assert_msg(strstr(ddpc_ddp_last_error(d), "ddpc_ddp_grad(0)"), "%s",
                      ddpc_ddp_last_error(d));
        /* in order, w.0 never taken nor ready */
        for (int i = last; i >= 0; i--) {
            if (i == skip)
                continue;
            ddpc_param_info_t info;
            T_OK(ddpc_ddp_param_info(d, i, &info));
            float *dst = ddpc_ddp_grad(d, i);
            ck_assert_msg(dst != NULL, "%s", ddpc_ddp_last_error(d));
            for (size_t j = 0; j < info.numel; j++) /* the stage comes zeroed */
                ck_assert_msg(dst[j] == 0.0f, "step %d, parameter %d: stage float %zu is %g",
                              step, i, j, dst[j]);
            memcpy(dst, g + info.offset, info.numel * sizeof *dst);
            T_OK(ddpc_ddp_grad_ready(d, i));
        }
        ck_assert_msg(ddpc_ddp_wait(d) == DDPC_OK, "%s", ddpc_ddp_last_error(d));
        size_t off, gn;
        const float *gs = ddpc_ddp_grad_slice(d, &off, &gn);
        const float mean = (float)T_size * (float)(T_size + 1) / 2.0f / (float)T_size;
        for (size_t j = 0; j < gn; j++) {
            const size_t at = off + j;
            const float want = at >= ps.offset && at < ps.offset + ps.numel ? 0.0f : mean;
            ck_assert_msg(gs[j] == want, "rank %d, step %d: gradient %zu is %g, expected %g",
                          T_rank, step, at, gs[j], want);
        }
    }
    free(g);
    ddpc_ddp_destroy(d);
}
END_TEST

START_TEST(sharded_gather_forward)
{
    /* the updated slices broadcast by bucket and waited for in the next
       forward (ddpc_ddp_param_wait): the same bits as the all-gather */
    shard_case_t c = {DDPC_OPTIM_SGD, 0.05, 0, 1, DDPC_F32, DDPC_SHARD_OPTIM, DDPC_GATHER_FORWARD};
    check_sharded(&c);
    shard_case_t w = {DDPC_OPTIM_ADAMW, 0.05, 1, 3, DDPC_F32, DDPC_SHARD_OPTIM,
                      DDPC_GATHER_FORWARD};
    check_sharded(&w); /* loss scaling with a skipped step, accumulation */
    shard_case_t z = {DDPC_OPTIM_ADAMW, 0, 0, 1, DDPC_F32, DDPC_SHARD_GRADS, DDPC_GATHER_FORWARD};
    check_sharded(&z);
    setenv("DDPC_OVERLAP", "0", 1);
    check_sharded(&c);
    unsetenv("DDPC_OVERLAP");
    /* a program that never waits reads its parameters in the forward: its
       steps all-gather at their end (nothing left in flight to race with
       its reads); from its first param_wait on, they gather in the forward */
    ddpc_ddp_config_t dc = small_buckets();
    dc.shard = DDPC_SHARD_OPTIM;
    dc.shard_gather = DDPC_GATHER_FORWARD;
    dc.overlap = 1;
    ddpc_ddp_t d = make_ddp(&dc);
    ddpc_optim_config_t oc = case_optim(DDPC_OPTIM_SGD, 0.9, 0, 0);
    ddpc_optim_t o;
    T_OK(ddpc_optim_create(d, &oc, &o));
    for (int t = 0; t < 4; t++) {
        if (t == 2)
            T_OK(ddpc_ddp_param_wait(d, 0)); /* nothing pending: returns at once */
        T_OK(ddpc_ddp_zero_grad(d));
        if (t > 2)
            T_OK(ddpc_ddp_param_wait(d, -1));
        grad_linear(ddpc_ddp_params(d, NULL), ddpc_ddp_grads(d, NULL), t, T_rank * B, B, 1.0f);
        backward_ready(d, T_rank);
        T_OK(ddpc_ddp_wait(d));
        T_OK(ddpc_optim_step(o, NULL));
        const int fwd = t >= 2 && T_size > 1 && ddpc_ddp_overlap(d);
        ck_assert_msg(fwd ? ddpc_ddp_param_pending(d) > 0 : ddpc_ddp_param_pending(d) == 0,
                      "step %d: %d buckets' gathers pending", t, ddpc_ddp_param_pending(d));
    }
    T_OK(ddpc_ddp_param_wait(d, -1));
    size_t n;
    const float *p = ddpc_ddp_params(d, &n);
    assert_identical_across_ranks(p, n, "parameters gathered late", 4);
    ck_assert_int_eq(ddpc_ddp_param_wait(d, -2), DDPC_ERR_INVALID);
    ck_assert_int_eq(ddpc_ddp_param_wait(d, ddpc_ddp_num_params(d)), DDPC_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(ddpc_ddp_last_error(d), "param_wait"));
    ddpc_optim_destroy(o);
    ddpc_ddp_destroy(d);
    setenv("DDPC_SHARD_GATHER", "later", 1);
    ck_assert_int_eq(ddpc_ddp_create(T_comm, &dc, &d), DDPC_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(ddpc_ddp_last_error(d), "DDPC_SHARD_GATHER"));
    ddpc_ddp_destroy(d);
    unsetenv("DDPC_SHARD_GATHER");
}
END_TEST

START_TEST(shard_setting)
{
    ddpc_ddp_config_t dc = small_buckets();
    setenv("DDPC_SHARD", "optim", 1);
    ddpc_ddp_t d = make_ddp(&dc);
    ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
    oc.momentum = 0.9;
    ddpc_optim_t o;
    T_OK(ddpc_optim_create(d, &oc, &o));
    size_t n, len;
    ddpc_ddp_params(d, &n);
    T_OK(ddpc_optim_state_range(o, NULL, &len));
    ck_assert_uint_eq(len, ((n + (size_t)T_size - 1) / (size_t)T_size + 15) / 16 * 16);
    /* the optimizer's norm passes along the engine's ranks: no norm group */
    ck_assert_int_eq(ddpc_optim_set_norm_group(o, T_comm, 0), DDPC_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(ddpc_ddp_last_error(d), "DDPC_SHARD"));
    ddpc_optim_destroy(o);
    ddpc_ddp_destroy(d);
    setenv("DDPC_SHARD", "grads", 1); /* ZeRO-2 with compression: refused, saying so */
    dc.compress = DDPC_BF16;
    ck_assert_int_eq(ddpc_ddp_create(T_comm, &dc, &d), DDPC_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(ddpc_ddp_last_error(d), "DDPC_SHARD=grads"));
    ck_assert_ptr_nonnull(strstr(ddpc_ddp_last_error(d), "DDPC_COMPRESS=bf16"));
    ddpc_ddp_destroy(d);
    dc.compress = DDPC_F32;
    setenv("DDPC_SHARD", "half", 1);
    ck_assert_int_eq(ddpc_ddp_create(T_comm, &dc, &d), DDPC_ERR_INVALID);
    ddpc_ddp_destroy(d);
    unsetenv("DDPC_SHARD");
}
END_TEST

/* ------------------------------------------------------------ batch norm stats */

/* Sample i of rank r, channel c: 1e4 + c plus a small noise (uniform in
 * [-0.5, 0.5) times (c + 1)): an offset mean that defeats sum-of-squares
 * formulas in float. Deterministic, so any rank can regenerate any rank's. */
static double bn_sample(int r, long i, int c)
{
    uint64_t z = ((uint64_t)r << 40) ^ ((uint64_t)i << 4) ^ (uint64_t)c;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    double u = (double)(z >> 11) * 0x1.0p-53 - 0.5;
    return 1e4 + c + u * (c + 1);
}

enum { BN_C = 5 };

/* Rank r's sample count: large, different per rank; the last of several
 * ranks has none when empty_last. */
static long bn_count(int r, int empty_last)
{
    return empty_last && T_size > 1 && r == T_size - 1 ? 0 : 150000 + 7919L * r;
}

/* Two passes in double over samples [0, n) of the ranks in [r0, r1). */
static void bn_two_pass(int r0, int r1, int empty_last, double mean[BN_C], double var[BN_C])
{
    for (int c = 0; c < BN_C; c++) {
        double s = 0, n = 0, m2 = 0;
        for (int r = r0; r < r1; r++)
            for (long i = 0; i < bn_count(r, empty_last); i++)
                s += bn_sample(r, i, c), n++;
        mean[c] = n > 0 ? s / n : 0;
        for (int r = r0; r < r1; r++)
            for (long i = 0; i < bn_count(r, empty_last); i++) {
                double d = bn_sample(r, i, c) - mean[c];
                m2 += d * d;
            }
        var[c] = n > 0 ? m2 / n : 0;
    }
}

static void check_bn_stats(int empty_last)
{
    float mean[BN_C], var[BN_C];
    double lm[BN_C], lv[BN_C], gm[BN_C], gv[BN_C], total = -1;
    bn_two_pass(T_rank, T_rank + 1, empty_last, lm, lv);
    for (int c = 0; c < BN_C; c++)
        mean[c] = (float)lm[c], var[c] = (float)lv[c];
    size_t nw = ddpc_batchnorm_workspace(T_comm, BN_C);
    ck_assert_uint_eq(nw, ((size_t)T_size + 1) * (2 * BN_C + 2));
    float *work = malloc(nw * sizeof *work);
    T_OK(ddpc_batchnorm_stats(T_comm, BN_C, bn_count(T_rank, empty_last), mean, var, &total,
                              work));
    free(work);
    bn_two_pass(0, T_size, empty_last, gm, gv);
    double n = 0;
    for (int r = 0; r < T_size; r++)
        n += (double)bn_count(r, empty_last);
    ck_assert_msg(total == n, "rank %d: total %.17g, expected %.17g", T_rank, total, n);
    for (int c = 0; c < BN_C; c++) {
        /* the inputs are floats: a mean of 1e4 carries 5e-4 of rounding */
        ck_assert_msg(fabs(mean[c] - gm[c]) <= 1e-3, "rank %d channel %d: mean %.9g, expected %.9g",
                      T_rank, c, mean[c], gm[c]);
        ck_assert_msg(fabs(var[c] - gv[c]) <= 1e-4 * gv[c],
                      "rank %d channel %d: var %.9g, expected %.9g (two passes)", T_rank, c,
                      var[c], gv[c]);
    }
    assert_identical_across_ranks(mean, BN_C, "batchnorm means", 0);
    assert_identical_across_ranks(var, BN_C, "batchnorm variances", 0);
}

START_TEST(batchnorm_stats_two_pass) { check_bn_stats(0); }
END_TEST

START_TEST(batchnorm_stats_empty_rank) { check_bn_stats(1); }
END_TEST

/* Counts past 2^24 (a float's exact integers) stay exact, and the weights
 * follow them: rank r has 2^30 + r samples of mean r and variance 1. */
START_TEST(batchnorm_stats_large_counts)
{
    float mean[1] = {(float)T_rank}, var[1] = {1.0f};
    float *work = malloc(ddpc_batchnorm_workspace(T_comm, 1) * sizeof *work);
    double total = 0, n = 0, s = 0, m2 = 0;
    T_OK(ddpc_batchnorm_stats(T_comm, 1, ((int64_t)1 << 30) + T_rank, mean, var, &total, work));
    free(work);
    for (int r = 0; r < T_size; r++)
        n += (double)(((int64_t)1 << 30) + r), s += (double)(((int64_t)1 << 30) + r) * r;
    for (int r = 0; r < T_size; r++) {
        double nr = (double)(((int64_t)1 << 30) + r), d = r - s / n;
        m2 += nr * (1.0 + d * d);
    }
    ck_assert_msg(total == n, "total %.17g, expected %.17g", total, n);
    ck_assert_msg(fabs(mean[0] - s / n) <= 1e-6 * (1 + s / n), "mean %.9g, expected %.9g",
                  mean[0], s / n);
    ck_assert_msg(fabs(var[0] - m2 / n) <= 1e-6 * m2 / n, "var %.9g, expected %.9g", var[0],
                  m2 / n);
}
END_TEST

START_TEST(batchnorm_stats_bad_arguments)
{
    float m[2] = {0}, v[2] = {0}, w[64];
    ck_assert_int_eq(ddpc_batchnorm_stats(T_comm, 0, 1, m, v, NULL, w), DDPC_ERR_INVALID);
    ck_assert_msg(strstr(ddpc_last_error(T_rt), "channels is 0"), "%s", ddpc_last_error(T_rt));
    ck_assert_int_eq(ddpc_batchnorm_stats(T_comm, -3, 1, m, v, NULL, w), DDPC_ERR_INVALID);
    ck_assert_int_eq(ddpc_batchnorm_stats(T_comm, 2, -1, m, v, NULL, w), DDPC_ERR_INVALID);
    ck_assert_msg(strstr(ddpc_last_error(T_rt), "count is -1"), "%s", ddpc_last_error(T_rt));
    ck_assert_int_eq(ddpc_batchnorm_stats(T_comm, 2, 1, NULL, v, NULL, w), DDPC_ERR_INVALID);
    ck_assert_msg(strstr(ddpc_last_error(T_rt), "mean is NULL"), "%s", ddpc_last_error(T_rt));
    ck_assert_int_eq(ddpc_batchnorm_stats(T_comm, 2, 1, m, NULL, NULL, w), DDPC_ERR_INVALID);
    ck_assert_int_eq(ddpc_batchnorm_stats(T_comm, 2, 1, m, v, NULL, NULL), DDPC_ERR_INVALID);
    ck_assert_msg(strstr(ddpc_last_error(T_rt), "work is NULL"), "%s", ddpc_last_error(T_rt));
    ck_assert_int_eq(ddpc_batchnorm_stats(NULL, 2, 1, m, v, NULL, w), DDPC_ERR_INVALID);
    ck_assert_uint_eq(ddpc_batchnorm_workspace(NULL, 2), 0);
    ck_assert_uint_eq(ddpc_batchnorm_workspace(T_comm, 0), 0);
    /* nothing was sent: the communicator still works */
    T_OK(ddpc_barrier(T_comm));
}
END_TEST

/* Buffers: rank 0's values everywhere after broadcast_params and after each
 * synced wait (broadcast_buffers, the default), not after an accumulation
 * micro-step, and never with broadcast_buffers = 0. */
static ddpc_ddp_t buffer_engine(int broadcast, int *nb)
{
    ddpc_ddp_config_t c = DDPC_DDP_CONFIG_INIT;
    c.broadcast_buffers = broadcast;
    ddpc_ddp_t d;
    T_OK(ddpc_ddp_create(T_comm, &c, &d));
    int64_t w[2] = {3, 5}, ch[1] = {3};
    ck_assert_int_eq(ddpc_ddp_add_param(d, "fc.weight", 2, w, NULL), DDPC_OK);
    ck_assert_int_eq(ddpc_ddp_add_buffer(d, "bn.running_mean", 1, ch, NULL), DDPC_OK);
    ck_assert_int_eq(ddpc_ddp_add_param(d, "bn.weight", 1, ch, NULL), DDPC_OK);
    ck_assert_int_eq(ddpc_ddp_add_buffer(d, "bn.running_var", 1, ch, NULL), DDPC_OK);
    ck_assert_int_eq(ddpc_ddp_add_buffer(d, "bn.num_batches_tracked", 0, NULL, nb), DDPC_OK);
    ck_assert_msg(ddpc_ddp_build(d) == DDPC_OK, "%s", ddpc_ddp_last_error(d));
    return d;
}

static void fill_buffers(ddpc_ddp_t d, float v)
{
    size_t n = 0;
    float *b = ddpc_ddp_buffers(d, &n);
    for (size_t i = 0; i < n; i++)
        b[i] = v + (float)i;
}

/* every buffer element is v + its index */
static void expect_buffers(ddpc_ddp_t d, float v, const char *when)
{
    size_t n = 0;
    const float *b = ddpc_ddp_buffers(d, &n);
    ck_assert_uint_eq(n, 7);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(b[i] == v + (float)i, "rank %d, %s: buffer element %zu is %g, expected %g",
                      T_rank, when, i, (double)b[i], (double)(v + (float)i));
}

static void one_step(ddpc_ddp_t d)
{
    T_OK(ddpc_ddp_zero_grad(d));
    for (int i = ddpc_ddp_num_params(d) - 1; i >= 0; i--)
        T_OK(ddpc_ddp_grad_ready(d, i));
    ck_assert_msg(ddpc_ddp_wait(d) == DDPC_OK, "%s", ddpc_ddp_last_error(d));
}

START_TEST(buffers_broadcast)
{
    int nb = -1;
    ddpc_ddp_t d = buffer_engine(1, &nb);
    ck_assert_int_eq(nb, 2);
    ck_assert_int_eq(ddpc_ddp_num_buffers(d), 3);
    ck_assert_int_eq(ddpc_ddp_num_params(d), 2);
    ck_assert_int_eq(ddpc_ddp_find_buffer(d, "bn.running_var"), 1);
    ck_assert_int_eq(ddpc_ddp_find_buffer(d, "bn.weight"), -1);
    ddpc_param_info_t info;
    T_OK(ddpc_ddp_buffer_info(d, 2, &info));
    ck_assert_str_eq(info.name, "bn.num_batches_tracked");
    ck_assert_int_eq(info.ndim, 0);
    ck_assert_uint_eq(info.numel, 1);
    ck_assert_uint_eq(info.offset, 6);
    ck_assert_int_eq(info.bucket, -1);
    ck_assert_ptr_eq(ddpc_ddp_buffer(d, 1), ddpc_ddp_buffers(d, NULL) + 3);
    ck_assert_int_eq(ddpc_ddp_buffer_info(d, 3, &info), DDPC_ERR_INVALID);
    for (int i = 0; i < 7; i++)
        ck_assert_msg(ddpc_ddp_buffers(d, NULL)[i] == 0.0f, "buffer element %d not zeroed at build", i);
    fill_buffers(d, 100.0f * (float)(T_rank + 1));
    T_OK(ddpc_ddp_broadcast_params(d));
    expect_buffers(d, 100, "after broadcast_params");

    /* each rank updates its own (running statistics of its batch) */
    fill_buffers(d, 10.0f * (float)(T_rank + 1));
    T_OK(ddpc_ddp_set_sync(d, 0));
    one_step(d);
    expect_buffers(d, 10.0f * (float)(T_rank + 1), "after an accumulation micro-step");
    T_OK(ddpc_ddp_set_sync(d, 1));
    one_step(d);
    expect_buffers(d, 10, "after a synced wait");
    ddpc_ddp_destroy(d);

    d = buffer_engine(0, NULL);
    fill_buffers(d, 7.0f * (float)(T_rank + 1));
    one_step(d);
    expect_buffers(d, 7.0f * (float)(T_rank + 1), "after a wait with broadcast_buffers=0");
    T_OK(ddpc_ddp_broadcast_buffers(d));
    expect_buffers(d, 7, "after ddpc_ddp_broadcast_buffers");
    ddpc_ddp_destroy(d);

    setenv("DDPC_BROADCAST_BUFFERS", "0", 1);
    d = buffer_engine(1, NULL);
    unsetenv("DDPC_BROADCAST_BUFFERS");
    fill_buffers(d, 5.0f * (float)(T_rank + 1));
    one_step(d);
    expect_buffers(d, 5.0f * (float)(T_rank + 1), "after a wait with DDPC_BROADCAST_BUFFERS=0");
    ddpc_ddp_destroy(d);
}
END_TEST

START_TEST(buffer_names_and_mismatch)
{
    ddpc_ddp_t d;
    T_OK(ddpc_ddp_create(T_comm, NULL, &d));
    int64_t ch[1] = {4};
    T_OK(ddpc_ddp_add_param(d, "bn.weight", 1, ch, NULL));
    ck_assert_int_eq(ddpc_ddp_add_buffer(d, "bn.weight", 1, ch, NULL), DDPC_ERR_INVALID);
    ck_assert_msg(strstr(ddpc_ddp_last_error(d), "buffer \"bn.weight\": a parameter has that name"),
                  "%s", ddpc_ddp_last_error(d));
    T_OK(ddpc_ddp_add_buffer(d, "bn.running_mean", 1, ch, NULL));
    ck_assert_int_eq(ddpc_ddp_add_param(d, "bn.running_mean", 1, ch, NULL), DDPC_ERR_INVALID);
    ck_assert_msg(strstr(ddpc_ddp_last_error(d), "a buffer has that name"), "%s",
                  ddpc_ddp_last_error(d));
    ck_assert_int_eq(ddpc_ddp_broadcast_buffers(d), DDPC_ERR_STATE);
    ddpc_ddp_destroy(d);
    if (T_size == 1)
        return;
    /* the last rank's running_var has another shape: every rank fails, naming it */
    T_OK(ddpc_ddp_create(T_comm, NULL, &d));
    int64_t other[1] = {T_rank == T_size - 1 ? 5 : 4};
    T_OK(ddpc_ddp_add_param(d, "bn.weight", 1, ch, NULL));
    T_OK(ddpc_ddp_add_buffer(d, "bn.running_mean", 1, ch, NULL));
    T_OK(ddpc_ddp_add_buffer(d, "bn.running_var", 1, other, NULL));
    ck_assert_int_eq(ddpc_ddp_build(d), DDPC_ERR_MISMATCH);
    const char *m = ddpc_ddp_last_error(d);
    if (T_rank == T_size - 1)
        ck_assert_msg(strstr(m, "buffer 1 is \"bn.running_var\" float32[5] on this rank"), "%s", m);
    else
        ck_assert_msg(strstr(m, "first at buffer 1 (\"bn.running_var\" float32[4] on rank 0)"),
                      "%s", m);
    ddpc_ddp_destroy(d);
}
END_TEST

static Suite *ddp_suite(void)
{
    Suite *s = suite_create("ddp");
    TCase *core = tcase_create("core");
    tcase_set_timeout(core, 120);
    tcase_add_test(core, equivalence_sgd_momentum);
    tcase_add_test(core, equivalence_adamw);
    tcase_add_test(core, accumulation_without_sync);
    tcase_add_test(core, unused_parameters);
    tcase_add_test(core, compressed_bf16_close_and_identical);
    tcase_add_test(core, clipping_and_loss_scaling);
    tcase_add_test(core, sgd_nesterov_rule);
    tcase_add_test(core, replicas_compared);
    tcase_add_test(core, overlap_setting);
    tcase_add_test(core, buffers_broadcast);
    tcase_add_test(core, folded_average_bitwise);
    suite_add_tcase(s, core);
    TCase *sh = tcase_create("sharding");
    tcase_set_timeout(sh, 120);
    tcase_add_test(sh, sharded_sgd_momentum_bitwise);
    tcase_add_test(sh, sharded_adamw_bitwise);
    tcase_add_test(sh, sharded_scaling_accumulation_compression);
    tcase_add_test(sh, sharded_grads_close);
    tcase_add_test(sh, sharded_grads_stages);
    tcase_add_test(sh, sharded_gather_forward);
    tcase_add_test(sh, shard_setting);
    suite_add_tcase(s, sh);
    TCase *lim = tcase_create("limits");
    tcase_set_timeout(lim, 60);
    tcase_add_test(lim, bucket_plans);
    tcase_add_test(lim, batchnorm_stats_two_pass);
    tcase_add_test(lim, batchnorm_stats_empty_rank);
    tcase_add_test(lim, batchnorm_stats_large_counts);
    suite_add_tcase(s, lim);
    TCase *bad = tcase_create("bad input");
    tcase_add_test(bad, missing_gradient_fails_every_rank);
    tcase_add_test(bad, ready_twice_is_named);
    tcase_add_test(bad, model_mismatch_named_on_every_rank);
    tcase_add_test(bad, batchnorm_stats_bad_arguments);
    tcase_add_test(bad, buffer_names_and_mismatch);
    tcase_add_test(bad, folded_sum_accumulated_refused);
    suite_add_tcase(s, bad);
    return s;
}

MPI_TEST_MAIN(ddp_suite)
