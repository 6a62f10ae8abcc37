/* SPDX-License-Identifier: BSD-3-Clause */
/* mpi_ckpt_train.c: a small deterministic training run with checkpoints, for
 * the restart tests (tests/ckpt-*.sh). Linear regression y = w.x + b on
 * generated data through the DDP engine: each step an RNG (whose state is
 * checkpointed) draws a global batch of 8 samples, rank r takes samples
 * r, r + size, ...; gradients by hand, grad_ready, ddpc_ddp_wait, optimizer
 * step. It resumes from the newest checkpoint in --dir when there is one.
 *
 *   mpi_ckpt_train --dir D --steps K [--stop-at S] [--save-every N] [--optim sgd|adamw]
 *                  [--dim N] [--keep N] [--async] [--dump FILE] [--pidfile FILE]
 *
 * Rank 0 prints "resumed step=S state=H path=P" (or "fresh start"), "saved step=S
 * state=H", "save failed step=S: MESSAGE" and at the end "final step=K state=H",
 * where H is an FNV-1a hash of the parameters and optimizer state (every rank
 * checks that it holds the same). Exit: 0, 3 if a save failed (training went
 * on), 1 on any other error. */
#include "ddpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { BATCH = 8, NSAMPLES = 4096 };

static ddpc_t rt;
static int rank, size;

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "mpi_ckpt_train: %s: %s\n", what, msg);
    ddpc_abort(rt, 1, "mpi_ckpt_train failed");
}

#define CHECK(call, errfn)                                                                     \
    do {                                                                                       \
        if ((call) != DDPC_OK)                                                                 \
            die(#call, errfn);                                                                 \
    } while (0)

static uint64_t mix(uint64_t x) /* splitmix64 */
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static float unit(uint64_t h) { return (float)(h >> 40) * 0x1p-23f - 1.0f; } /* [-1, 1) */

/* Sample i: x[k] and its target, the same on every rank. */
static float sample(uint64_t i, int dim, float *x)
{
    float y = 0.5f;
    for (int k = 0; k < dim; k++) {
        x[k] = unit(mix(i * 1000003u + (uint64_t)k));
        y += x[k] * unit(mix((uint64_t)k + 17)); /* the true weights */
    }
    return y + 0.01f * unit(mix(i + 99));
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Hash of parameters and optimizer state; fails unless every rank agrees. */
static uint64_t state_hash(ddpc_ddp_t ddp, ddpc_optim_t opt)
{
    size_t n;
    const float *p = ddpc_ddp_params(ddp, &n);
    uint64_t h = fnv(0xcbf29ce484222325ull, p, n * sizeof(float));
    for (int k = 0; k < ddpc_optim_num_states(opt); k++)
        h = fnv(h, ddpc_optim_state(opt, k, NULL), n * sizeof(float));
    uint64_t s = ddpc_optim_steps(opt);
    h = fnv(h, &s, sizeof s);
    uint64_t *all = calloc((size_t)size, sizeof *all);
    CHECK(ddpc_allgather(ddpc_comm_world(rt), &h, all, 1, DDPC_I64), ddpc_last_error(rt));
    for (int r = 1; r < size; r++)
        if (all[r] != all[0])
            die("state_hash", "ranks hold different states");
    free(all);
    return h;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *dump = NULL, *pidfile = NULL, *optim = "sgd";
    long steps = 20, stop_at = -1, save_every = 0, dim = 16, keep = 3;
    int async = 0;
    if (ddpc_init(NULL, &argc, &argv, &rt) != DDPC_OK) {
        fprintf(stderr, "%s\n", ddpc_last_error(rt));
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--async")) {
            async = 1;
            continue;
        }
        if (!v)
            die("usage", a);
        i++;
        if (!strcmp(a, "--dir")) dir = v;
        else if (!strcmp(a, "--steps")) steps = atol(v);
        else if (!strcmp(a, "--stop-at")) stop_at = atol(v);
        else if (!strcmp(a, "--save-every")) save_every = atol(v);
        else if (!strcmp(a, "--optim")) optim = v;
        else if (!strcmp(a, "--dim")) dim = atol(v);
        else if (!strcmp(a, "--keep")) keep = atol(v);
        else if (!strcmp(a, "--dump")) dump = v;
        else if (!strcmp(a, "--pidfile")) pidfile = v;
        else die("unknown option", a);
    }
    if (!dir || dim < 1)
        die("usage", "--dir DIR --steps K [...]");
    rank = ddpc_world(rt)->rank;
    size = ddpc_world(rt)->size;
    if (pidfile && rank == 0) {
        FILE *f = fopen(pidfile, "w");
        fprintf(f, "%d\n", (int)getpid());
        fclose(f);
    }

    ddpc_ddp_t ddp;
    ddpc_optim_t opt;
    ddpc_ckpt_t ck;
    const int64_t wshape[2] = {1, dim}, bshape[1] = {1};
    int iw, ib;
    CHECK(ddpc_ddp_create(ddpc_comm_world(rt), NULL, &ddp), ddpc_last_error(rt));
    CHECK(ddpc_ddp_add_param(ddp, "fc.weight", 2, wshape, &iw), ddpc_ddp_last_error(ddp));
    CHECK(ddpc_ddp_add_param(ddp, "fc.bias", 1, bshape, &ib), ddpc_ddp_last_error(ddp));
    CHECK(ddpc_ddp_build(ddp), ddpc_ddp_last_error(ddp));
    ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
    oc.type = strcmp(optim, "adamw") ? DDPC_OPTIM_SGD : DDPC_OPTIM_ADAMW;
    oc.lr = oc.type == DDPC_OPTIM_SGD ? 0.05 : 0.01;
    oc.momentum = 0.9;
    oc.weight_decay = 1e-3;
    CHECK(ddpc_optim_create(ddp, &oc, &opt), ddpc_ddp_last_error(ddp));
    ddpc_ckpt_config_t cc = DDPC_CKPT_CONFIG_INIT;
    cc.dir = dir;
    cc.keep = (int)keep;
    cc.async = async;
    if (ddpc_ckpt_create(ddp, opt, &cc, &ck) != DDPC_OK)
        die("ddpc_ckpt_create", ddpc_ckpt_last_error(ck));

    float *w = ddpc_ddp_param(ddp, iw), *b = ddpc_ddp_param(ddp, ib);
    float *gw = ddpc_ddp_grad(ddp, iw), *gb = ddpc_ddp_grad(ddp, ib);
    ddpc_ckpt_meta_t meta;
    char path[1024];
    uint64_t rng = 12345; /* the trainer's RNG: draws each step's batch */
    ddpc_status_t st = ddpc_ckpt_load(ck, NULL, &meta, path, sizeof path);
    if (st == DDPC_ERR_NOT_FOUND) {
        for (long k = 0; k < dim; k++)
            w[k] = 0.1f * unit(mix((uint64_t)k + 5000));
        b[0] = 0;
        CHECK(ddpc_ddp_broadcast_params(ddp), ddpc_ddp_last_error(ddp));
        memset(&meta, 0, sizeof meta);
        if (rank == 0)
            printf("fresh start\n");
    } else if (st == DDPC_OK) {
        if (meta.rng_bytes != sizeof rng || !meta.has_sampler ||
            meta.sampler_consumed != meta.step * BATCH % NSAMPLES)
            die("load", "the checkpoint's RNG or sampler state is not what was saved");
        memcpy(&rng, meta.rng, sizeof rng);
        uint64_t h = state_hash(ddp, opt);
        if (rank == 0)
            printf("resumed step=%llu state=%016llx path=%s saved_by=%d\n",
                   (unsigned long long)meta.step, (unsigned long long)h, path, meta.world_size);
    } else if (st == DDPC_ERR_TIMEOUT || st == DDPC_ERR_MPI || st == DDPC_ERR_REMOTE) {
        /* a broadcast of the load never completed (rank 0 died in it): no
         * verdict every rank shares, and a collective still pending that
         * ddpc_finalize would wait for: end the job */
        die("ddpc_ckpt_load", ddpc_ckpt_last_error(ck));
    } else {
        /* every rank got the same verdict from the load: end normally, so
         * that the launcher forwards every rank's message (an abort races
         * with mpiexec's forwarding of stderr: the message could be lost) */
        fprintf(stderr, "mpi_ckpt_train: ddpc_ckpt_load: %s\n", ddpc_ckpt_last_error(ck));
        ddpc_ckpt_destroy(ck);
        ddpc_optim_destroy(opt);
        ddpc_ddp_destroy(ddp);
        ddpc_finalize(rt);
        return 1;
    }
    fflush(stdout);

    int save_failed = 0;
    long stop = stop_at >= 0 ? stop_at : steps;
    float *x = malloc((size_t)dim * sizeof *x);
    for (long step = (long)meta.step; step < stop; step++) {
        uint64_t idx[BATCH];
        for (int j = 0; j < BATCH; j++)
            idx[j] = (rng = mix(rng)) % NSAMPLES;
        CHECK(ddpc_ddp_zero_grad(ddp), ddpc_ddp_last_error(ddp));
        int mine = 0;
        for (int j = rank; j < BATCH; j += size)
            mine++;
        for (int j = rank; j < BATCH; j += size) { /* mean squared error / 2 over my samples */
            float y = sample(idx[j], (int)dim, x), pred = b[0];
            for (long k = 0; k < dim; k++)
                pred += w[k] * x[k];
            float e = (pred - y) / (float)mine;
            for (long k = 0; k < dim; k++)
                gw[k] += e * x[k];
            gb[0] += e;
        }
        /* backward: the last layer first */
        CHECK(ddpc_ddp_grad_ready(ddp, ib), ddpc_ddp_last_error(ddp));
        CHECK(ddpc_ddp_grad_ready(ddp, iw), ddpc_ddp_last_error(ddp));
        CHECK(ddpc_ddp_wait(ddp), ddpc_ddp_last_error(ddp));
        CHECK(ddpc_optim_step(opt, NULL), ddpc_ddp_last_error(ddp));
        if (save_every > 0 && (step + 1) % save_every == 0) {
            meta.step = (uint64_t)step + 1;
            meta.epoch = meta.step * BATCH / NSAMPLES;
            meta.has_sampler = 1;
            meta.sampler_seed = 12345;
            meta.sampler_epoch = meta.epoch;
            meta.sampler_consumed = meta.step * BATCH % NSAMPLES;
            meta.sampler_dataset_size = NSAMPLES;
            meta.sampler_shuffle = 1;
            meta.rng_bytes = sizeof rng;
            memcpy(meta.rng, &rng, sizeof rng);
            uint64_t h = state_hash(ddp, opt);
            if (ddpc_ckpt_save(ck, &meta) != DDPC_OK) {
                save_failed = 1; /* every rank got it; training goes on */
                if (rank == 0)
                    printf("save failed step=%llu: %s\n", (unsigned long long)meta.step,
                           ddpc_ckpt_last_error(ck));
            } else if (rank == 0) {
                printf("saved step=%llu state=%016llx\n", (unsigned long long)meta.step,
                       (unsigned long long)h);
            }
            if (dump && rank == 0) {
                FILE *f = fopen(dump, "wb");
                fwrite(w, sizeof *w, (size_t)dim, f);
                fclose(f);
            }
            fflush(stdout);
        }
    }
    if (ddpc_ckpt_wait(ck) != DDPC_OK) {
        save_failed = 1;
        if (rank == 0)
            printf("save failed (async): %s\n", ddpc_ckpt_last_error(ck));
    }
    uint64_t h = state_hash(ddp, opt);
    if (rank == 0)
        printf("final step=%ld state=%016llx\n", stop, (unsigned long long)h);
    free(x);
    ddpc_ckpt_destroy(ck);
    ddpc_optim_destroy(opt);
    ddpc_ddp_destroy(ddp);
    ddpc_finalize(rt);
    return save_failed ? 3 : 0;
}
