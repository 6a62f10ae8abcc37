/* SPDX-License-Identifier: BSD-3-Clause */
/* embed.c: a complete training program built on ddpc, to copy and change.
 * A 2-layer MLP (8 -> 16 tanh -> 1) fits y = sin(x . v) on synthetic data,
 * data-parallel over the ranks: each rank takes its share of every batch,
 * computes gradients in its own backward pass and tells ddpc when each one is
 * ready, ddpc averages them over the ranks, the optimizer steps. Every K steps
 * it saves an HDF5 checkpoint; run again and it resumes from the newest one.
 * It is not a tutorial on models: the model is as small as it can be.
 *
 *   make && mpiexec -n 2 ./embed --steps 40        (then again with --steps 80)
 *   ./embed [--steps N] [--save-every K] [--ckpt-dir DIR]
 *
 * Rank 0 prints "start: fresh" or "start: resumed step=S from PATH", then
 * "step=S loss=L" after its first step and every K steps, and "done: step=N
 * loss=L". Exit status 0, or 1 after a message on any failure. */
#include <ddpc.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { IN = 8, HID = 16, BATCH = 32 }; /* BATCH: global samples per step */

static ddpc_t rt; /* the runtime; every failure below ends the job */

/* Print what failed and why, and end every rank: a rank that carried on alone
 * would wait forever in the next collective. */
static void die(const char *call, ddpc_status_t st, const char *detail)
{
    fprintf(stderr, "embed: %s failed: %s%s%s\n", call, ddpc_strerror(st),
            detail && *detail ? ": " : "", detail ? detail : "");
    if (rt)
        ddpc_abort(rt, 1, "embed: giving up");
    exit(1);
}

/* CHECK(call, detail): detail is the handle's last error, e.g. ddpc_ddp_last_error(ddp). */
#define CHECK(call, detail)                                                                    \
    do {                                                                                       \
        ddpc_status_t st_ = (call);                                                            \
        if (st_ != DDPC_OK)                                                                    \
            die(#call, st_, detail);                                                           \
    } while (0)

/* A deterministic generator, so that sample i is the same on every rank and
 * in every run: data and initial weights need no communication. */
static float unit(uint64_t x) /* splitmix64 -> [-1, 1) */
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    return (float)(x >> 40) * 0x1p-23f - 1.0f;
}

/* Sample i of the data set: x (IN,) and its target y = sin(x . v). */
static float sample(uint64_t i, float *x)
{
    float dot = 0;
    for (int k = 0; k < IN; k++) {
        x[k] = unit(i << 4 | (uint64_t)k);
        dot += x[k] * unit((1ull << 60) + (uint64_t)k); /* v: the true direction */
    }
    return sinf(dot);
}

int main(int argc, char **argv)
{
    long steps = 40, save_every = 10;
    const char *dir = "embed-ckpt";

    /* 1. The runtime: finds rank and size (srun, mpiexec, torchrun-style
     * environment) and initializes MPI. On failure there may be no handle. */
    ddpc_status_t st = ddpc_init(NULL, &argc, &argv, &rt);
    if (st != DDPC_OK)
        die("ddpc_init", st, rt ? ddpc_last_error(rt) : ddpc_init_error());
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--steps"))
            steps = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--save-every"))
            save_every = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--ckpt-dir"))
            dir = argv[i + 1];
        else
            die("parsing the options", DDPC_ERR_INVALID, argv[i]);
    }
    if (argc % 2 == 0 || steps < 1 || save_every < 1)
        die("parsing the options", DDPC_ERR_INVALID,
            "usage: embed [--steps N >= 1] [--save-every K >= 1] [--ckpt-dir DIR]");
    const int rank = ddpc_world(rt)->rank, size = ddpc_world(rt)->size;

    /* 2. The DDP engine on the world communicator. Every rank registers the
     * same parameters in the same order; build checks that and allocates one
     * arena for the parameters and one for the gradients. */
    ddpc_ddp_t ddp;
    CHECK(ddpc_ddp_create(ddpc_comm_world(rt), NULL, &ddp), ddpc_last_error(rt));
    const int64_t w1s[2] = {HID, IN}, b1s[1] = {HID}, w2s[2] = {1, HID}, b2s[1] = {1};
    int iw1, ib1, iw2, ib2;
    CHECK(ddpc_ddp_add_param(ddp, "fc1.weight", 2, w1s, &iw1), ddpc_ddp_last_error(ddp));
    CHECK(ddpc_ddp_add_param(ddp, "fc1.bias", 1, b1s, &ib1), ddpc_ddp_last_error(ddp));
    CHECK(ddpc_ddp_add_param(ddp, "fc2.weight", 2, w2s, &iw2), ddpc_ddp_last_error(ddp));
    CHECK(ddpc_ddp_add_param(ddp, "fc2.bias", 1, b2s, &ib2), ddpc_ddp_last_error(ddp));
    CHECK(ddpc_ddp_build(ddp), ddpc_ddp_last_error(ddp));
    /* Views into the arenas: w1 is (HID, IN) row-major, and so on. */
    float *w1 = ddpc_ddp_param(ddp, iw1), *b1 = ddpc_ddp_param(ddp, ib1);
    float *w2 = ddpc_ddp_param(ddp, iw2), *b2 = ddpc_ddp_param(ddp, ib2);
    float *gw1 = ddpc_ddp_grad(ddp, iw1), *gb1 = ddpc_ddp_grad(ddp, ib1);
    float *gw2 = ddpc_ddp_grad(ddp, iw2), *gb2 = ddpc_ddp_grad(ddp, ib2);

    /* 3. The optimizer (its state is in the checkpoints too). */
    ddpc_optim_t opt;
    ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
    oc.type = DDPC_OPTIM_SGD;
    oc.lr = 0.1;
    oc.momentum = 0.9;
    CHECK(ddpc_optim_create(ddp, &oc, &opt), ddpc_ddp_last_error(ddp));

    /* 4. Checkpoints in dir (DDPC_CKPT_DIR overrides it). Resume from the
     * newest one if there is one, else initialize and broadcast rank 0's
     * parameters so that every rank starts from the same model. */
    ddpc_ckpt_t ck = NULL;
    ddpc_ckpt_config_t cc = DDPC_CKPT_CONFIG_INIT;
    cc.dir = dir;
    st = ddpc_ckpt_create(ddp, opt, &cc, &ck);
    if (st != DDPC_OK)
        die("ddpc_ckpt_create", st, ck ? ddpc_ckpt_last_error(ck) : "");
    ddpc_ckpt_meta_t meta;
    char path[1024];
    st = ddpc_ckpt_load(ck, NULL, &meta, path, sizeof path);
    if (st == DDPC_ERR_NOT_FOUND) {
        memset(&meta, 0, sizeof meta);
        for (int k = 0; k < HID * IN; k++)
            w1[k] = unit((2ull << 60) + (uint64_t)k) / sqrtf((float)IN);
        for (int k = 0; k < HID; k++)
            w2[k] = unit((3ull << 60) + (uint64_t)k) / sqrtf((float)HID);
        memset(b1, 0, HID * sizeof *b1);
        b2[0] = 0;
        CHECK(ddpc_ddp_broadcast_params(ddp), ddpc_ddp_last_error(ddp));
        if (rank == 0)
            printf("start: fresh, %d ranks, checkpoints in %s\n", size, dir);
    } else if (st == DDPC_OK) {
        if (rank == 0)
            printf("start: resumed step=%llu from %s (saved by %d ranks, now %d)\n",
                   (unsigned long long)meta.step, path, meta.world_size, size);
    } else {
        die("ddpc_ckpt_load", st, ddpc_ckpt_last_error(ck));
    }
    fflush(stdout);

    /* 5. Training. Step s uses samples [s*BATCH, (s+1)*BATCH); rank r takes
     * samples r, r+size, ...; the loss is the mean squared error over the
     * rank's share, and ddpc averages the gradients over the ranks. */
    float x[BATCH][IN], h[BATCH][HID], err[BATCH];
    double loss = 0;
    const long start = (long)meta.step; /* 0, or the step the checkpoint was saved at */
    for (long step = start; step < steps; step++) {
        CHECK(ddpc_ddp_zero_grad(ddp), ddpc_ddp_last_error(ddp));
        int n = 0; /* samples of this rank this step */
        double local = 0;
        for (int j = rank; j < BATCH; j += size, n++) { /* forward */
            float y = sample((uint64_t)step * BATCH + (uint64_t)j, x[n]), out = b2[0];
            for (int u = 0; u < HID; u++) {
                float a = b1[u];
                for (int k = 0; k < IN; k++)
                    a += w1[u * IN + k] * x[n][k];
                h[n][u] = tanhf(a);
                out += w2[u] * h[n][u];
            }
            err[n] = out - y;
            local += (double)err[n] * err[n];
        }
        /* backward, last layer first: fc2's gradients are complete before
         * fc1's, and grad_ready lets ddpc start reducing them while fc1's
         * are still being computed (d loss / d out = 2 err / n) */
        for (int s = 0; s < n; s++) {
            float d = 2.0f * err[s] / (float)n;
            for (int u = 0; u < HID; u++)
                gw2[u] += d * h[s][u];
            gb2[0] += d;
        }
        CHECK(ddpc_ddp_grad_ready(ddp, iw2), ddpc_ddp_last_error(ddp));
        CHECK(ddpc_ddp_grad_ready(ddp, ib2), ddpc_ddp_last_error(ddp));
        for (int s = 0; s < n; s++) {
            float d = 2.0f * err[s] / (float)n;
            for (int u = 0; u < HID; u++) {
                float da = d * w2[u] * (1.0f - h[s][u] * h[s][u]); /* through tanh */
                for (int k = 0; k < IN; k++)
                    gw1[u * IN + k] += da * x[s][k];
                gb1[u] += da;
            }
        }
        CHECK(ddpc_ddp_grad_ready(ddp, iw1), ddpc_ddp_last_error(ddp));
        CHECK(ddpc_ddp_grad_ready(ddp, ib1), ddpc_ddp_last_error(ddp));
        /* gradients averaged over the ranks, identical on every rank */
        CHECK(ddpc_ddp_wait(ddp), ddpc_ddp_last_error(ddp));
        CHECK(ddpc_optim_step(opt, NULL), ddpc_ddp_last_error(ddp));

        /* the loss of the whole batch, for printing: sum over the ranks */
        double part[2] = {local, (double)n}, all[2];
        CHECK(ddpc_allreduce(ddpc_comm_world(rt), part, all, 2, DDPC_F64, DDPC_SUM),
              ddpc_last_error(rt));
        loss = all[0] / all[1];

        /* every save_every steps (and at the end): a checkpoint, collective,
         * between optimizer steps; meta.step is where a restart continues */
        int save = (step + 1) % save_every == 0 || step + 1 == steps;
        if (save) {
            meta.step = (uint64_t)step + 1;
            CHECK(ddpc_ckpt_save(ck, &meta), ddpc_ckpt_last_error(ck));
        }
        if (rank == 0 && (save || step == start)) {
            printf("step=%ld loss=%.6f%s\n", step + 1, loss, save ? " checkpoint saved" : "");
            fflush(stdout);
        }
    }
    if (rank == 0 && start >= steps)
        printf("done: step=%ld (resumed there: nothing to train; ask for more --steps)\n", steps);
    else if (rank == 0)
        printf("done: step=%ld loss=%.6f\n", steps, loss);

    /* 6. Teardown: wait for a background save (none here: async is off),
     * then free in reverse order. */
    CHECK(ddpc_ckpt_wait(ck), ddpc_ckpt_last_error(ck));
    ddpc_ckpt_destroy(ck);
    ddpc_optim_destroy(opt);
    ddpc_ddp_destroy(ddp);
    st = ddpc_finalize(rt);
    rt = NULL; /* freed: die() must not abort through it */
    if (st != DDPC_OK)
        die("ddpc_finalize", st, "");
    return 0;
}
