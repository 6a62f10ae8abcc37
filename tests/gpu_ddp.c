/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu_ddp.c: the DDP engine on device arenas under 1, 2 and 4 MPI ranks
 * sharing one GPU (backend mpi-staged; nccl too with 1 rank). The device
 * twin of mpi_ddp.c's equivalence test; plain C with its own checks.
 * The linear model of linear_model.h (K weight blocks and a bias; small
 * buckets, so several) is trained 20 steps with N ranks on batch B each.
 * Gradients are computed on the host from the downloaded parameters and
 * uploaded per parameter with cudaMemcpyAsync on the compute stream,
 * grad_ready last parameter first, then ddpc_ddp_wait and the device
 * optimizer step. Checks:
 *  - after every step, gradients and parameters are bitwise identical on all
 *    ranks (FNV-1a allgathered on the world communicator);
 *  - after 20 steps the parameters match a plain C one-process reference on
 *    the N*B batch (optim.c's update rules, in its order) within 1e-5
 *    relative, for SGD (momentum 0.9, lr 0.05, weight decay 0.01) and AdamW;
 *  - bf16 wire compression trains within 1e-2 of the uncompressed reference;
 *  - find_unused: a parameter never marked ready reduces as zeros (its
 *    gradient is 0 on every rank) and the step goes on;
 *  - checkpoint round trip on device arenas: save, zero the parameters and
 *    optimizer state on the device, load: parameters and every state tensor
 *    bitwise as saved, the optimizer's step count and the step restored;
 *  - DDPC_SHARD=optim (ZeRO-1) and grads (ZeRO-2) on device arenas: each
 *    rank's optimizer state is its slice (offset rank * L, L = ceil(n / N)
 *    rounded up to 16 floats); the parameters after 20 steps are bitwise the
 *    unsharded run's with optim, within 1e-6 relative with grads (a reduce
 *    per slice instead of the all-reduce), and the gradient norm (from the
 *    all-gathered sums of the slices) within 1e-12 of the unsharded one
 *    with optim, 1e-6 with grads;
 *    the checkpoint round trip as above, every rank's slice bitwise;
 *  - DDPC_SHARD_GATHER=forward on device arenas: after each step every
 *    bucket's broadcasts are in flight, none once the "forward" has waited
 *    for each parameter (ddpc_ddp_param_wait: the engine's stream waits),
 *    and the parameters are bitwise those of the step's-end gather;
 *  - ddpc_batchnorm_stats on device memory equals its host path.
 * Without a usable CUDA device it is skipped (exit 77 on every rank).
 * GPU_TEST_ON_HOST=1 runs the same on host memory (backend mpi, the CPU
 * optimizer): a check of this program itself on a machine without a GPU.
 * A check that fails is counted (exit 1 on every rank); a call that fails
 * ends every rank at once through ddpc_abort (the collectives would no
 * longer match). */
#include "gputest.h"
#include "linear_model.h"

#include <dirent.h>
#include <math.h>
#include <unistd.h>

enum { B = 8, STEPS = 20 }; /* per-rank batch, steps of each run */

/* ------------------------------------------------------------------ checks */

#define OK_D(d, call) OK_MSG(call, ddpc_ddp_last_error(d))
#define OK_CK(ck, call) OK_MSG(call, ddpc_ckpt_last_error(ck))

#define EXPECT_EQ_HASH(what, a, b)                                                             \
    do {                                                                                       \
        uint64_t a_ = (a), b_ = (b);                                                           \
        if (a_ != b_)                                                                          \
            FAILF("%s: FNV-1a %016" PRIx64 " != %016" PRIx64, what, a_, b_);                   \
    } while (0)

/* max over i of |got - want| / max(|want|, 1) <= tol, printing the worst. */
static double expect_close(const char *file, int line, const char *what, const float *got,
                           const float *want, size_t n, double tol)
{
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / fmax(fabs((double)want[i]), 1.0);
        if (!(e <= worst)) /* NaN too */
            worst = e, at = i;
    }
    if (!(worst <= tol)) {
        fail_at(file, line, "%s: element %zu: got %.9g, expected %.9g: error %.3g > tolerance %g",
                what, at, got[at], want[at], worst, tol);
    }
    return worst;
}
#define EXPECT_CLOSE(what, got, want, n, tol)                                                  \
    expect_close(__FILE__, __LINE__, what, got, want, n, tol)

/* ------------------------------------------------------------------ memory */
/* Arenas are device memory (host memory with GPU_TEST_ON_HOST); halloc,
 * upload and download are gputest.h's, on the compute stream strm. */

static void dzero(void *dev, size_t bytes)
{
    if (on_host) {
        memset(dev, 0, bytes);
        return;
    }
    CU(cudaMemsetAsync(dev, 0, bytes, strm));
    CU(cudaStreamSynchronize(strm));
}

/* ------------------------------------------------------------------ reference */
/* optim.c's rules (sgd(), adamw()), in float, in its order of operations:
 * no clipping and no loss scaling here. steps: updates applied before. */

static void ref_step(const ddpc_optim_config_t *c, uint64_t steps, float *p, const float *g,
                     float *m, float *v, size_t n)
{
    if (c->type == DDPC_OPTIM_SGD) {
        const float lr = (float)c->lr, wd = (float)c->weight_decay, mu = (float)c->momentum;
        const float damp = 1.0f - (float)c->dampening;
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * p[i];
            if (mu > 0) {
                m[i] = steps == 0 ? gi : mu * m[i] + damp * gi;
                gi = c->nesterov ? gi + mu * m[i] : m[i];
            }
            p[i] -= lr * gi;
        }
        return;
    }
    const double t = (double)(steps + 1);
    const float b1 = (float)c->beta1, b2 = (float)c->beta2, eps = (float)c->eps;
    const float decay = (float)(1.0 - c->lr * c->weight_decay);
    const float step_size = (float)(c->lr / (1.0 - pow(c->beta1, t)));
    const float inv_sqrt_bc2 = (float)(1.0 / sqrt(1.0 - pow(c->beta2, t)));
    for (size_t i = 0; i < n; i++) {
        p[i] *= decay;
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        p[i] -= step_size * m[i] / (sqrtf(v[i]) * inv_sqrt_bc2 + eps);
    }
}

/* ------------------------------------------------------------------ runs */

typedef struct {
    const char *name;
    ddpc_optim_type_t type;
    ddpc_dtype_t compress; /* DDPC_F32: none */
    int unused;            /* find_unused on, a parameter never ready: 1 "w.1", 2 "w.0" (a
                              bucket of its own) */
    double tol;            /* against the reference (float32 gradients, always) */
    int ckpt;              /* checkpoint round trip after training */
    ddpc_shard_t shard;    /* DDPC_SHARD_NONE runs first: the sharded runs' yardstick */
    int forward;           /* DDPC_SHARD_GATHER=forward: the updated slices broadcast by
                              bucket, each waited for (ddpc_ddp_param_wait) before its use */
} run_t;

static const run_t runs[] = {
    {"sgd", DDPC_OPTIM_SGD, DDPC_F32, 0, 1e-5, 1, DDPC_SHARD_NONE, 0},
    {"adamw", DDPC_OPTIM_ADAMW, DDPC_F32, 0, 1e-5, 1, DDPC_SHARD_NONE, 0},
    {"sgd, bf16 compression", DDPC_OPTIM_SGD, DDPC_BF16, 0, 1e-2, 0, DDPC_SHARD_NONE, 0},
    {"sgd, find_unused with w.1 unused", DDPC_OPTIM_SGD, DDPC_F32, 1, 1e-5, 0, DDPC_SHARD_NONE, 0},
    {"sgd, DDPC_SHARD=optim", DDPC_OPTIM_SGD, DDPC_F32, 0, 1e-5, 1, DDPC_SHARD_OPTIM, 0},
    {"adamw, DDPC_SHARD=optim", DDPC_OPTIM_ADAMW, DDPC_F32, 0, 1e-5, 1, DDPC_SHARD_OPTIM, 0},
    {"adamw, DDPC_SHARD=grads", DDPC_OPTIM_ADAMW, DDPC_F32, 0, 1e-5, 1, DDPC_SHARD_GRADS, 0},
    {"sgd, DDPC_SHARD=grads", DDPC_OPTIM_SGD, DDPC_F32, 0, 1e-5, 0, DDPC_SHARD_GRADS, 0},
    {"adamw, DDPC_SHARD=optim, gathered in the forward", DDPC_OPTIM_ADAMW, DDPC_F32, 0, 1e-5, 1,
     DDPC_SHARD_OPTIM, 1},
    {"sgd, DDPC_SHARD=grads, gathered in the forward", DDPC_OPTIM_SGD, DDPC_F32, 0, 1e-5, 0,
     DDPC_SHARD_GRADS, 1},
    /* w.0 is a bucket of its own: never taken, reduced from the zero stage */
    {"sgd, DDPC_SHARD=grads, find_unused with w.0 unused", DDPC_OPTIM_SGD, DDPC_F32, 2, 1e-5, 0,
     DDPC_SHARD_GRADS, 0},
};

/* The forward's reads of the parameters (a download, in parameter order):
 * each parameter's bucket waited for first, on the engine's stream. */
static void use_params(ddpc_ddp_t d, const run_t *run, float *hp, const float *dp, size_t n)
{
    for (int i = 0; run->forward && i < ddpc_ddp_num_params(d); i++)
        if (ddpc_ddp_param_wait(d, i) != DDPC_OK)
            FAILF("param_wait(%d): %s", i, ddpc_ddp_last_error(d));
    if (run->forward && ddpc_ddp_param_pending(d))
        FAILF("%d buckets' gathers pending after every parameter's wait",
              ddpc_ddp_param_pending(d));
    download(hp, dp, n * 4);
}

/* The unsharded runs' final parameters and gradient norm, by optimizer type
 * (this backend's), for the sharded runs. */
static float *unsharded_params[2];
static double unsharded_norm[2];

static void remove_dir(const char *dir)
{
    OK(ddpc_barrier(world));
    if (rank != 0)
        return;
    remove_flat_dir(dir);
}

/* Save, zero the device arenas and the step count, load: all as saved. */
static void check_checkpoint(ddpc_ddp_t d, ddpc_optim_t opt)
{
    char dir[256];
    memset(dir, 0, sizeof dir);
    if (rank == 0) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/gpu_ddp-ckpt.XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir))
            die(__FILE__, __LINE__, "mkdtemp", dir);
    }
    OK(ddpc_kvs_bcast(rt, dir, sizeof dir, 0));
    ddpc_ckpt_config_t cc = DDPC_CKPT_CONFIG_INIT;
    cc.dir = dir;
    cc.keep = 0;
    ddpc_ckpt_t ck = NULL;
    OK_CK(ck, ddpc_ckpt_create(d, opt, &cc, &ck));
    ddpc_ckpt_meta_t meta;
    memset(&meta, 0, sizeof meta);
    meta.step = STEPS;
    meta.epoch = 1;
    OK_CK(ck, ddpc_ckpt_save(ck, &meta));

    size_t n, soff, slen;
    float *dp = ddpc_ddp_params(d, &n), *h = halloc(n * sizeof *h);
    const int ns = ddpc_optim_num_states(opt);
    OK(ddpc_optim_state_range(opt, &soff, &slen));
    const int sharded = !(soff == 0 && slen == n);
    if (slen > n) { /* the last slices' padding */
        free(h);
        h = halloc(slen * sizeof *h);
    }
    uint64_t hp, hs[2] = {0, 0};
    download(h, dp, n * sizeof *h);
    hp = fnv1a(h, n * sizeof *h);
    for (int k = 0; k < ns; k++) {
        download(h, ddpc_optim_state(opt, k, NULL), slen * sizeof *h);
        hs[k] = fnv1a(h, slen * sizeof *h);
    }
    EXPECT_EQ_INT(ddpc_optim_steps(opt), STEPS);
    size_t nbuf;
    float *db = ddpc_ddp_buffers(d, &nbuf), *hb = halloc(nbuf * sizeof *hb);
    download(hb, db, nbuf * sizeof *hb);
    uint64_t hbuf = fnv1a(hb, nbuf * sizeof *hb);

    dzero(db, nbuf * sizeof *hb);
    dzero(dp, n * sizeof *h);
    for (int k = 0; k < ns; k++)
        dzero(ddpc_optim_state(opt, k, NULL), slen * sizeof *h);
    ddpc_optim_set_steps(opt, 0);
    download(h, dp, n * sizeof *h);
    if (fnv1a(h, n * sizeof *h) == hp)
        FAILF("zeroing the parameter arena changed nothing");

    ddpc_ckpt_meta_t lm;
    memset(&lm, 0, sizeof lm);
    char path[600] = "";
    OK_CK(ck, ddpc_ckpt_load(ck, NULL, &lm, path, sizeof path));
    if (!strstr(path, "ckpt-00000020.h5"))
        FAILF("loaded \"%s\", expected .../ckpt-00000020.h5", path);
    EXPECT_EQ_INT(lm.step, STEPS);
    EXPECT_EQ_INT(lm.world_size, size);
    EXPECT_EQ_INT(ddpc_optim_steps(opt), STEPS);
    download(h, dp, n * sizeof *h);
    EXPECT_EQ_HASH("parameters after the load", fnv1a(h, n * sizeof *h), hp);
    download(hb, db, nbuf * sizeof *hb);
    EXPECT_EQ_HASH("buffers after the load", fnv1a(hb, nbuf * sizeof *hb), hbuf);
    free(hb);
    EXPECT_SAME_ON_ALL_RANKS("parameters after the load", h, n * sizeof *h);
    for (int k = 0; k < ns; k++) {
        const char *name;
        download(h, ddpc_optim_state(opt, k, &name), slen * sizeof *h);
        char what[96];
        snprintf(what, sizeof what, "optimizer state \"%s\" after the load%s", name,
                 sharded ? " (this rank's slice)" : "");
        EXPECT_EQ_HASH(what, fnv1a(h, slen * sizeof *h), hs[k]);
        if (!sharded)
            EXPECT_SAME_ON_ALL_RANKS(what, h, n * sizeof *h);
    }
    OK_CK(ck, ddpc_ckpt_wait(ck));
    ddpc_ckpt_destroy(ck);
    free(h);
    remove_dir(dir);
}

static void train(ddpc_comm_t c, const run_t *run, const char *backend)
{
    snprintf(label, sizeof label, "%s, %s", backend, run->name);
    ddpc_ddp_config_t dc = DDPC_DDP_CONFIG_INIT;
    dc.first_bucket_bytes = 512;
    dc.bucket_bytes = 1500;
    dc.compress = run->compress;
    dc.find_unused = run->unused != 0;
    dc.shard = run->shard;
    dc.shard_gather = run->forward ? DDPC_GATHER_FORWARD : DDPC_GATHER_STEP;
    if (on_host && run->forward) /* a host engine gathers in the forward where it overlaps */
        dc.overlap = 1;
    dc.stream = strm;
    ddpc_ddp_t d = NULL;
    OK_D(d, ddpc_ddp_create(c, &dc, &d));
    for (int k = 0; k < K; k++) {
        char name[16];
        snprintf(name, sizeof name, "w.%d", k);
        int64_t shape[2] = {O / K, D};
        OK_D(d, ddpc_ddp_add_param(d, name, 2, shape, NULL));
    }
    int64_t bs[1] = {O};
    OK_D(d, ddpc_ddp_add_param(d, "b", 1, bs, NULL));
    /* buffers in the device's buffer arena: rank 0's after broadcast_params
     * and after every synced wait (broadcast_buffers) */
    OK_D(d, ddpc_ddp_add_buffer(d, "bn.running_mean", 1, bs, NULL));
    OK_D(d, ddpc_ddp_add_buffer(d, "bn.num_batches_tracked", 0, NULL, NULL));
    OK_D(d, ddpc_ddp_build(d));
    const int np = ddpc_ddp_num_params(d);
    size_t nbuf;
    float *dbuf = ddpc_ddp_buffers(d, &nbuf), hbuf[O + 1], want[O + 1];
    EXPECT_EQ_INT(nbuf, O + 1);
    if (ddpc_ddp_num_buckets(d) <= 2)
        FAILF("%d buckets, expected more than 2", ddpc_ddp_num_buckets(d));
    EXPECT_EQ_INT(ddpc_ddp_device(d), device);

    size_t n;
    float *dp = ddpc_ddp_params(d, &n);
    /* the averaged gradients this rank holds: all, or its slice (grads) */
    size_t goff, gn;
    const float *dg = ddpc_ddp_grad_slice(d, &goff, &gn);
    if (run->shard == DDPC_SHARD_GRADS) { /* 1/N of the gradients, and the stages */
        size_t big = 0, bo, bn, L = ((n + (size_t)size - 1) / (size_t)size + 15) / 16 * 16;
        const int nb = ddpc_ddp_num_buckets(d);
        for (int b = 0; b < nb; b++)
            if (ddpc_ddp_bucket(d, b, &bo, &bn) == DDPC_OK && bn > big)
                big = bn;
        big = (big + 15) / 16 * 16;
        EXPECT_EQ_INT(ddpc_ddp_grad_bytes(d), (L + (size_t)((nb < 2 ? nb : 2) + !!run->unused) * big) * 4);
        if (ddpc_ddp_grads(d, NULL))
            FAILF("DDPC_SHARD=grads: ddpc_ddp_grads gave an arena");
    }
    float *hp = halloc(n * 4), *hg = halloc(n * 4);
    float *rp = halloc(n * 4), *rg = halloc(n * 4), *rm = halloc(n * 4), *rv = halloc(n * 4);
    init_params(hp, n, rank);
    upload(dp, hp, n * 4);
    for (size_t i = 0; i < nbuf; i++)
        hbuf[i] = (float)(1000 * rank) + (float)i;
    upload(dbuf, hbuf, sizeof hbuf);
    OK_D(d, ddpc_ddp_broadcast_params(d));
    download(hbuf, dbuf, sizeof hbuf);
    for (size_t i = 0; i < nbuf; i++)
        want[i] = (float)i;
    if (memcmp(hbuf, want, sizeof hbuf))
        FAILF("buffers after ddpc_ddp_broadcast_params are not rank 0's");
    download(hp, dp, n * 4);
    init_params(rp, n, 0);
    if (memcmp(hp, rp, n * 4))
        FAILF("parameters after ddpc_ddp_broadcast_params are not rank 0's");

    ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
    oc.type = run->type;
    oc.lr = run->type == DDPC_OPTIM_SGD ? 0.05 : 0.01;
    oc.momentum = 0.9;
    oc.weight_decay = 0.01;
    ddpc_optim_t opt = NULL;
    OK_D(d, ddpc_optim_create(d, &oc, &opt));
    size_t soff = 0, slen = 0;
    OK(ddpc_optim_state_range(opt, &soff, &slen));
    if (run->shard != DDPC_SHARD_NONE) { /* the slice: equal, aligned to 16 floats */
        size_t L = ((n + (size_t)size - 1) / (size_t)size + 15) / 16 * 16;
        EXPECT_EQ_INT(slen, L);
        EXPECT_EQ_INT(soff, (size_t)rank * L);
    } else {
        EXPECT_EQ_INT(soff, 0);
        EXPECT_EQ_INT(slen, n);
    }

    const char *skip_name = run->unused == 2 ? "w.0" : "w.1";
    const int skip = run->unused ? ddpc_ddp_find_param(d, skip_name) : -1;
    ddpc_param_info_t skip_info;
    memset(&skip_info, 0, sizeof skip_info);
    if (skip >= 0)
        OK_D(d, ddpc_ddp_param_info(d, skip, &skip_info));

    for (int t = 0; t < STEPS; t++) {
        char what[96];
        use_params(d, run, hp, dp, n);
        memset(hg, 0, n * 4);
        grad_linear(hp, hg, t, rank * B, B, 1.0f);
        for (size_t i = 0; i < nbuf; i++) /* this rank's running statistics */
            hbuf[i] = (float)(rank + 1) * (float)(t + 2) + (float)i;
        upload(dbuf, hbuf, sizeof hbuf);
        OK_D(d, ddpc_ddp_zero_grad(d));
        for (int i = np - 1; i >= 0; i--) { /* backward: last parameter first */
            if (i == skip)
                continue;
            ddpc_param_info_t info;
            OK_D(d, ddpc_ddp_param_info(d, i, &info));
            if (on_host)
                memcpy(ddpc_ddp_grad(d, i), hg + info.offset, info.numel * 4);
            else
                CU(cudaMemcpyAsync(ddpc_ddp_grad(d, i), hg + info.offset, info.numel * 4,
                                   cudaMemcpyHostToDevice, strm));
            OK_D(d, ddpc_ddp_grad_ready(d, i));
        }
        OK_D(d, ddpc_ddp_wait(d));
        download(hbuf, dbuf, sizeof hbuf);
        for (size_t i = 0; i < nbuf; i++)
            want[i] = (float)(t + 2) + (float)i;
        if (memcmp(hbuf, want, sizeof hbuf))
            FAILF("step %d: buffers after the wait are not rank 0's", t);
        memset(hg, 0, n * 4);
        download(hg + goff, dg, gn * 4);
        snprintf(what, sizeof what, "averaged gradients of step %d", t);
        if (run->shard != DDPC_SHARD_GRADS) /* ZeRO-2: each rank holds its slice */
            EXPECT_SAME_ON_ALL_RANKS(what, hg, n * 4);
        for (size_t i = skip_info.offset; skip >= 0 && i < skip_info.offset + skip_info.numel; i++)
            if (hg[i] != 0.0f) {
                FAILF("step %d: gradient %zu of unused \"%s\" is %g, expected 0", t, i, skip_name,
                      hg[i]);
                break;
            }
        OK_D(d, ddpc_optim_step(opt, NULL));
        /* gathered in the forward: every bucket's broadcasts in flight (from
           the first step on: the model waited before it), none otherwise */
        const int pending = ddpc_ddp_param_pending(d);
        if (run->forward && size > 1 ? pending != ddpc_ddp_num_buckets(d) : pending != 0)
            FAILF("step %d: %d buckets' gathers pending, expected %d", t, pending,
                  run->forward && size > 1 ? ddpc_ddp_num_buckets(d) : 0);
        use_params(d, run, hp, dp, n);
        snprintf(what, sizeof what, "parameters after step %d", t);
        EXPECT_SAME_ON_ALL_RANKS(what, hp, n * 4);

        /* the reference: one process, the whole N*B batch */
        memset(rg, 0, n * 4);
        grad_linear(rp, rg, t, 0, size * B, 1.0f);
        if (skip >= 0)
            memset(rg + skip_info.offset, 0, skip_info.numel * 4);
        ref_step(&oc, (uint64_t)t, rp, rg, rm, rv, n);
    }
    EXPECT_EQ_INT(ddpc_optim_steps(opt), STEPS);
    char what[160];
    snprintf(what, sizeof what, "parameters after %d steps on %d rank(s) vs 1 process on %dx batch",
             STEPS, size, size);
    double worst = EXPECT_CLOSE(what, hp, rp, n, run->tol);
    const int ty = run->type == DDPC_OPTIM_ADAMW;
    const double norm = ddpc_optim_last_grad_norm(opt);
    double vs_unsharded = 0, norm_err = 0;
    if (run->shard == DDPC_SHARD_NONE && !run->unused && run->compress == DDPC_F32) {
        free(unsharded_params[ty]);
        unsharded_params[ty] = halloc(n * 4);
        memcpy(unsharded_params[ty], hp, n * 4);
        unsharded_norm[ty] = norm;
    } else if (run->shard != DDPC_SHARD_NONE && !run->unused) {
        if (!unsharded_params[ty])
            FAILF("no unsharded %s run before this one", ddpc_optim_name(run->type));
        else if (run->shard == DDPC_SHARD_OPTIM)
            vs_unsharded = EXPECT_CLOSE("DDPC_SHARD=optim vs unsharded (expected bitwise)", hp,
                                        unsharded_params[ty], n, 0);
        else
            vs_unsharded = EXPECT_CLOSE("DDPC_SHARD=grads vs unsharded", hp,
                                        unsharded_params[ty], n, 1e-6);
        /* optim: the same float gradients, only the double sum regrouped;
           grads: the reduce sums each slice in its own order (float ulps) */
        const double norm_tol = run->shard == DDPC_SHARD_OPTIM ? 1e-12 : 1e-6;
        norm_err = fabs(norm - unsharded_norm[ty]) / fmax(unsharded_norm[ty], 1e-300);
        if (!(norm_err <= norm_tol) || !(norm > 0))
            FAILF("gradient norm %.17g, unsharded %.17g: relative %.3g > %.0e", norm,
                  unsharded_norm[ty], norm_err, norm_tol);
        EXPECT_SAME_ON_ALL_RANKS("the sharded gradient norm", &norm, sizeof norm);
        if (rank == 0)
            printf("gpu_ddp: %s: optimizer state %zu of %zu floats per rank, gradients %zu "
                   "bytes (unsharded %zu); vs the unsharded run: parameters %.3g, gradient norm "
                   "%.3g relative\n", label, slen, n, ddpc_ddp_grad_bytes(d), n * 4,
                   vs_unsharded, norm_err);
    }
    if (rank == 0) {
        printf("gpu_ddp: %s: %d buckets, worst relative difference from the %sreference %.3g "
               "(tolerance %g)\n", label, ddpc_ddp_num_buckets(d),
               run->compress == DDPC_F32 ? "" : "uncompressed ", worst, run->tol);
        fflush(stdout);
    }
    if (run->ckpt)
        check_checkpoint(d, opt);
    free(hp), free(hg), free(rp), free(rg), free(rm), free(rv);
    ddpc_optim_destroy(opt);
    ddpc_ddp_destroy(d);
}

/* Synchronized batch norm on device memory: every rank's statistics (means
 * about 1e4, counts past 2^24 on rank 0) combined by the device path (pack
 * and combine kernels around the device all-gather) equal the host path's
 * on the world communicator within 1e-6 relative (bitwise under the
 * emulation, whose twins round as the host loop does), the same bytes on
 * every rank, and the count exact. Bad arguments refused. */
static void check_batchnorm(ddpc_comm_t c)
{
    enum { C = 300 }; /* more than one block of the kernels */
    snprintf(label, sizeof label, "%s batchnorm", ddpc_backend_name(ddpc_comm_backend(c)));
    float hm[C], hv[C], dm[C], dv[C];
    for (int k = 0; k < C; k++) {
        hm[k] = 1e4f + 0.01f * (float)k + 0.001f * (float)rank;
        hv[k] = 0.1f + 0.002f * (float)((k + rank) % 7);
    }
    int64_t count = rank == 0 ? ((int64_t)1 << 25) + 3 : 1000 + rank;
    size_t nw = ddpc_batchnorm_workspace(c, C);
    float *dmean = dalloc(C * sizeof(float)), *dvar = dalloc(C * sizeof(float));
    float *dwork = dalloc(nw * sizeof(float)), *hwork = halloc(nw * sizeof(float));
    double *dtotal = dalloc(sizeof(double)), dt = 0, ht = 0;
    upload(dmean, hm, sizeof hm);
    upload(dvar, hv, sizeof hv);
    OK(ddpc_batchnorm_stats(c, C, count, dmean, dvar, dtotal, dwork));
    download(dm, dmean, sizeof dm);
    download(dv, dvar, sizeof dv);
    download(&dt, dtotal, sizeof dt);
    OK(ddpc_batchnorm_stats(world, C, count, hm, hv, &ht, hwork));
    double want = (double)(((int64_t)1 << 25) + 3);
    for (int r = 1; r < size; r++)
        want += 1000 + r;
    if (dt != want || ht != want)
        FAILF("total: device %.17g, host %.17g, expected %.17g", dt, ht, want);
    double wm = EXPECT_CLOSE("mean (device vs host)", dm, hm, C, 1e-6);
    double wv = EXPECT_CLOSE("var (device vs host)", dv, hv, C, 1e-6);
    if (rank == 0)
        printf("%s: %s: %d channels, %.0f samples, worst relative difference from the host "
               "path: mean %.3g, var %.3g (tolerance 1e-06)\n",
               prog, label, C, dt, wm, wv);
    EXPECT_SAME_ON_ALL_RANKS("device means", dm, sizeof dm);
    EXPECT_SAME_ON_ALL_RANKS("device variances", dv, sizeof dv);
    EXPECT_STATUS(ddpc_batchnorm_stats(c, 0, count, dmean, dvar, NULL, dwork), DDPC_ERR_INVALID);
    EXPECT_STATUS(ddpc_batchnorm_stats(c, C, count, dmean, NULL, NULL, dwork), DDPC_ERR_INVALID);
    dfree(dmean);
    dfree(dvar);
    dfree(dwork);
    dfree(dtotal);
    free(hwork);
}

static void run_backend(ddpc_backend_t be)
{
    ddpc_comm_t c;
    if (!open_comm(be, &c))
        return;
    const char *name = ddpc_backend_name(ddpc_comm_backend(c));
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++)
        train(c, &runs[r], name);
    /* DDPC_SHARD=grads reduce-scatters float32 buckets only: compressed
       wire refused at create, naming both options */
    {
        ddpc_ddp_config_t dc = DDPC_DDP_CONFIG_INIT;
        dc.shard = DDPC_SHARD_GRADS;
        dc.compress = DDPC_BF16;
        dc.stream = strm;
        ddpc_ddp_t d = NULL;
        snprintf(label, sizeof label, "%s, DDPC_SHARD=grads with bf16 refused", name);
        EXPECT_STATUS(ddpc_ddp_create(c, &dc, &d), DDPC_ERR_UNSUPPORTED);
        if (!d || !strstr(ddpc_ddp_last_error(d), "DDPC_SHARD=") ||
            !strstr(ddpc_ddp_last_error(d), "DDPC_COMPRESS=bf16"))
            FAILF("the refusal does not name DDPC_SHARD and DDPC_COMPRESS: %s",
                  d ? ddpc_ddp_last_error(d) : "");
        ddpc_ddp_destroy(d);
    }
    check_batchnorm(c);
    OK(ddpc_comm_synchronize(c, -1));
    ddpc_comm_destroy(c);
}

/* The cases: every run on each backend. */
static void cases(void)
{
    each_backend(run_backend);
}

int main(int argc, char **argv)
{
    return gpu_test_main("gpu_ddp", argc, argv, cases);
}
