/* gpu_ddp.c: the DDP engine on device arenas under 1, 2 and 4 MPI ranks
 * sharing one GPU (backend mpi-staged; nccl too with 1 rank). The device
 * twin of mpi_ddp.c's equivalence test; plain C with its own checks.
 * A linear model (K weight blocks and a bias; small buckets, so several)
 * is trained 20 steps with N ranks on batch B each. Gradients are computed
 * on the host from the downloaded parameters and uploaded per parameter
 * with cudaMemcpyAsync on the compute stream, grad_ready last parameter
 * first, then ddpc_ddp_wait and the device optimizer step. Checks:
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
 *    bitwise as saved, the optimizer's step count and the step restored.
 * Without a usable CUDA device it is skipped (exit 77 on every rank).
 * GPU_TEST_ON_HOST=1 runs the same on host memory (backend mpi, the CPU
 * optimizer): a check of this program itself on a machine without a GPU.
 * A check that fails is counted (exit 1 on every rank); a call that fails
 * ends every rank at once through ddpc_abort (the collectives would no
 * longer match). */
#include "ddpc.h"

#include <cuda_runtime.h>
#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { D = 37, O = 24, K = 4, B = 8, STEPS = 20 }; /* input, output, blocks, per-rank batch */

static ddpc_t rt;
static ddpc_comm_t world;      /* host memory: agreement, hashes, barriers */
static int rank, size;
static int nfail;
static int on_host;            /* GPU_TEST_ON_HOST=1 */
static int device = DDPC_DEVICE_HOST;
static cudaStream_t strm;      /* the compute stream */
static char label[96] = "setup";

/* ------------------------------------------------------------------ checks */

static void die(const char *file, int line, const char *call, const char *why)
{
    fprintf(stderr, "gpu_ddp: rank %d: %s:%d: [%s] %s failed: %s\n", rank, file, line, label,
            call, why);
    fflush(stderr);
    ddpc_abort(rt, 1, "gpu_ddp: a call failed (above); ending every rank");
}

#define CU(call)                                                                               \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess)                                                                 \
            die(__FILE__, __LINE__, #call, cudaGetErrorString(e_));                            \
    } while (0)

/* A ddpc call that must return DDPC_OK; msg is the message to show. */
#define OK_MSG(call, msg)                                                                      \
    do {                                                                                       \
        ddpc_status_t s_ = (call);                                                             \
        if (s_ != DDPC_OK) {                                                                   \
            char m_[1400];                                                                     \
            snprintf(m_, sizeof m_, "%s: %s", ddpc_strerror(s_), (msg));                       \
            die(__FILE__, __LINE__, #call, m_);                                                \
        }                                                                                      \
    } while (0)
#define OK(call) OK_MSG(call, ddpc_last_error(rt))
#define OK_D(d, call) OK_MSG(call, ddpc_ddp_last_error(d))
#define OK_CK(ck, call) OK_MSG(call, ddpc_ckpt_last_error(ck))

#define FAILF(...)                                                                             \
    do {                                                                                       \
        fprintf(stderr, "gpu_ddp: rank %d: %s:%d: [%s] ", rank, __FILE__, __LINE__, label);    \
        fprintf(stderr, __VA_ARGS__);                                                          \
        fputc('\n', stderr);                                                                   \
        nfail++;                                                                               \
    } while (0)

#define EXPECT_EQ_INT(a, b)                                                                    \
    do {                                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                                    \
        if (a_ != b_)                                                                          \
            FAILF("%s == %s: %lld != %lld", #a, #b, a_, b_);                                   \
    } while (0)

#define EXPECT_EQ_HASH(what, a, b)                                                             \
    do {                                                                                       \
        uint64_t a_ = (a), b_ = (b);                                                           \
        if (a_ != b_)                                                                          \
            FAILF("%s: FNV-1a %016" PRIx64 " != %016" PRIx64, what, a_, b_);                   \
    } while (0)

static uint64_t fnv1a(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void expect_same_on_all_ranks(const char *file, int line, const char *what,
                                     const void *buf, size_t bytes)
{
    uint64_t h = fnv1a(buf, bytes), *all = malloc((size_t)size * sizeof *all);
    if (!all)
        die(file, line, "malloc", "out of memory");
    OK(ddpc_allgather(world, &h, all, 1, DDPC_I64));
    for (int r = 0; r < size; r++)
        if (all[r] != all[0]) {
            fprintf(stderr, "gpu_ddp: rank %d: %s:%d: [%s] %s: rank %d's FNV-1a %016" PRIx64
                    " != rank 0's %016" PRIx64 "\n", rank, file, line, label, what, r, all[r],
                    all[0]);
            nfail++;
            break;
        }
    free(all);
}
#define EXPECT_SAME_ON_ALL_RANKS(what, buf, bytes)                                             \
    expect_same_on_all_ranks(__FILE__, __LINE__, what, buf, bytes)

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
        fprintf(stderr, "gpu_ddp: rank %d: %s:%d: [%s] %s: element %zu: got %.9g, expected "
                "%.9g: error %.3g > tolerance %g\n", rank, file, line, label, what, at, got[at],
                want[at], worst, tol);
        nfail++;
    }
    return worst;
}
#define EXPECT_CLOSE(what, got, want, n, tol)                                                  \
    expect_close(__FILE__, __LINE__, what, got, want, n, tol)

/* ------------------------------------------------------------------ memory */
/* Arenas are device memory (host memory with GPU_TEST_ON_HOST); copies go
 * on the compute stream and wait for it. */

static void upload(void *dev, const void *host, size_t bytes)
{
    if (on_host) {
        memcpy(dev, host, bytes);
        return;
    }
    CU(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, strm));
    CU(cudaStreamSynchronize(strm));
}

static void download(void *host, const void *dev, size_t bytes)
{
    if (on_host) {
        memcpy(host, dev, bytes);
        return;
    }
    CU(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, strm));
    CU(cudaStreamSynchronize(strm));
}

static void dzero(void *dev, size_t bytes)
{
    if (on_host) {
        memset(dev, 0, bytes);
        return;
    }
    CU(cudaMemsetAsync(dev, 0, bytes, strm));
    CU(cudaStreamSynchronize(strm));
}

static void *halloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p)
        die(__FILE__, __LINE__, "calloc", "out of memory");
    return p;
}

/* ------------------------------------------------------------------ model */
/* As in mpi_ddp.c. */

/* deterministic sample s of step t: x (D,), target y (O,) */
static void sample(int t, int s, float *x, float *y)
{
    uint64_t z = 0x9e3779b97f4a7c15ull * (uint64_t)(t * 100003 + s + 1);
    for (int i = 0; i < D + O; i++) {
        z ^= z >> 31, z *= 0xbf58476d1ce4e5b9ull, z ^= z >> 27;
        float v = (float)((double)(z >> 11) * 0x1p-53 * 2.0 - 1.0);
        if (i < D)
            x[i] = v;
        else
            y[i - D] = v;
    }
}

/* Linear model y = W x + b, W as K row blocks "w.k" (O/K, D), then "b" (O).
 * MSE loss mean over n samples [s0, s0+n) of step t; accumulates gradients
 * into g (same layout as the arena). */
static void grad_linear(const float *p, float *g, int t, int s0, int n)
{
    float x[D], y[O], out[O];
    const float *W = p, *b = p + O * D;
    for (int s = s0; s < s0 + n; s++) {
        sample(t, s, x, y);
        for (int o = 0; o < O; o++) {
            float a = b[o];
            for (int i = 0; i < D; i++)
                a += W[o * D + i] * x[i];
            out[o] = a;
        }
        for (int o = 0; o < O; o++) {
            float e = 2.0f * (out[o] - y[o]) / (float)n;
            for (int i = 0; i < D; i++)
                g[o * D + i] += e * x[i];
            g[O * D + o] += e;
        }
    }
}

static void init_params(float *p, size_t n, int r)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)sin(0.37 * (double)i + r); /* differs per rank: broadcast fixes it */
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
    int unused;            /* "w.1" never ready, find_unused on */
    double tol;            /* against the reference (float32 gradients, always) */
    int ckpt;              /* checkpoint round trip after training */
} run_t;

static const run_t runs[] = {
    {"sgd", DDPC_OPTIM_SGD, DDPC_F32, 0, 1e-5, 1},
    {"adamw", DDPC_OPTIM_ADAMW, DDPC_F32, 0, 1e-5, 1},
    {"sgd, bf16 compression", DDPC_OPTIM_SGD, DDPC_BF16, 0, 1e-2, 0},
    {"sgd, find_unused with w.1 unused", DDPC_OPTIM_SGD, DDPC_F32, 1, 1e-5, 0},
};

static void remove_dir(const char *dir)
{
    OK(ddpc_barrier(world));
    if (rank != 0)
        return;
    DIR *d = opendir(dir);
    char p[600];
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    if (d)
        closedir(d);
    rmdir(dir);
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

    size_t n;
    float *dp = ddpc_ddp_params(d, &n), *h = halloc(n * sizeof *h);
    const int ns = ddpc_optim_num_states(opt);
    uint64_t hp, hs[2] = {0, 0};
    download(h, dp, n * sizeof *h);
    hp = fnv1a(h, n * sizeof *h);
    for (int k = 0; k < ns; k++) {
        download(h, ddpc_optim_state(opt, k, NULL), n * sizeof *h);
        hs[k] = fnv1a(h, n * sizeof *h);
    }
    EXPECT_EQ_INT(ddpc_optim_steps(opt), STEPS);

    dzero(dp, n * sizeof *h);
    for (int k = 0; k < ns; k++)
        dzero(ddpc_optim_state(opt, k, NULL), n * sizeof *h);
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
    EXPECT_SAME_ON_ALL_RANKS("parameters after the load", h, n * sizeof *h);
    for (int k = 0; k < ns; k++) {
        const char *name;
        download(h, ddpc_optim_state(opt, k, &name), n * sizeof *h);
        char what[96];
        snprintf(what, sizeof what, "optimizer state \"%s\" after the load", name);
        EXPECT_EQ_HASH(what, fnv1a(h, n * sizeof *h), hs[k]);
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
    dc.find_unused = run->unused;
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
    OK_D(d, ddpc_ddp_build(d));
    const int np = ddpc_ddp_num_params(d);
    if (ddpc_ddp_num_buckets(d) <= 2)
        FAILF("%d buckets, expected more than 2", ddpc_ddp_num_buckets(d));
    EXPECT_EQ_INT(ddpc_ddp_device(d), device);

    size_t n;
    float *dp = ddpc_ddp_params(d, &n), *dg = ddpc_ddp_grads(d, NULL);
    float *hp = halloc(n * 4), *hg = halloc(n * 4);
    float *rp = halloc(n * 4), *rg = halloc(n * 4), *rm = halloc(n * 4), *rv = halloc(n * 4);
    init_params(hp, n, rank);
    upload(dp, hp, n * 4);
    OK_D(d, ddpc_ddp_broadcast_params(d));
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

    const int skip = run->unused ? ddpc_ddp_find_param(d, "w.1") : -1;
    ddpc_param_info_t skip_info;
    memset(&skip_info, 0, sizeof skip_info);
    if (skip >= 0)
        OK_D(d, ddpc_ddp_param_info(d, skip, &skip_info));

    for (int t = 0; t < STEPS; t++) {
        char what[96];
        download(hp, dp, n * 4);
        memset(hg, 0, n * 4);
        grad_linear(hp, hg, t, rank * B, B);
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
        download(hg, dg, n * 4);
        snprintf(what, sizeof what, "averaged gradients of step %d", t);
        EXPECT_SAME_ON_ALL_RANKS(what, hg, n * 4);
        for (size_t i = skip_info.offset; skip >= 0 && i < skip_info.offset + skip_info.numel; i++)
            if (hg[i] != 0.0f) {
                FAILF("step %d: gradient %zu of unused \"w.1\" is %g, expected 0", t, i, hg[i]);
                break;
            }
        OK_D(d, ddpc_optim_step(opt, NULL));
        download(hp, dp, n * 4);
        snprintf(what, sizeof what, "parameters after step %d", t);
        EXPECT_SAME_ON_ALL_RANKS(what, hp, n * 4);

        /* the reference: one process, the whole N*B batch */
        memset(rg, 0, n * 4);
        grad_linear(rp, rg, t, 0, size * B);
        if (skip >= 0)
            memset(rg + skip_info.offset, 0, skip_info.numel * 4);
        ref_step(&oc, (uint64_t)t, rp, rg, rm, rv, n);
    }
    EXPECT_EQ_INT(ddpc_optim_steps(opt), STEPS);
    char what[160];
    snprintf(what, sizeof what, "parameters after %d steps on %d rank(s) vs 1 process on %dx batch",
             STEPS, size, size);
    double worst = EXPECT_CLOSE(what, hp, rp, n, run->tol);
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

static void run_backend(ddpc_backend_t be)
{
    const ddpc_backend_t want = on_host ? DDPC_BACKEND_MPI
                                : be == DDPC_BACKEND_NCCL ? DDPC_BACKEND_NCCL
                                                          : DDPC_BACKEND_MPI_STAGED;
    const char *name = ddpc_backend_name(want);
    snprintf(label, sizeof label, "%s", name);
    ddpc_comm_config_t cc = DDPC_COMM_CONFIG_INIT;
    cc.backend = be;
    cc.device = on_host ? DDPC_DEVICE_HOST : DDPC_DEVICE_AUTO;
    cc.stream = strm;
    ddpc_comm_t c;
    ddpc_status_t st = ddpc_comm_create(rt, &cc, &c);
    if (st == DDPC_ERR_UNSUPPORTED && be == DDPC_BACKEND_NCCL) {
        if (rank == 0)
            printf("gpu_ddp: nccl: skipped: %s\n", ddpc_last_error(rt));
        return;
    }
    OK(st);
    if (ddpc_comm_backend(c) != want)
        FAILF("backend %s, expected %s", ddpc_backend_name(ddpc_comm_backend(c)), name);
    EXPECT_EQ_INT(ddpc_comm_device(c), device);
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++)
        train(c, &runs[r], name);
    OK(ddpc_comm_synchronize(c, -1));
    ddpc_comm_destroy(c);
}

int main(int argc, char **argv)
{
    const char *forced = getenv("DDPC_BACKEND");
    char forced_copy[64] = "";
    if (forced) { /* this test picks its backends; DDPC_BACKEND would override them */
        snprintf(forced_copy, sizeof forced_copy, "%s", forced);
        unsetenv("DDPC_BACKEND");
    }
    const char *oh = getenv("GPU_TEST_ON_HOST");
    on_host = oh && !strcmp(oh, "1");
    ddpc_config_t cfg = DDPC_CONFIG_INIT;
    cfg.timeout_s = 120; /* DDPC_TIMEOUT overrides */
    if (ddpc_init(&cfg, &argc, &argv, &rt) != DDPC_OK) {
        fprintf(stderr, "gpu_ddp: %s\n", rt ? ddpc_last_error(rt) : ddpc_init_error());
        ddpc_finalize(rt);
        return 99;
    }
    world = ddpc_comm_world(rt);
    rank = ddpc_world(rt)->rank;
    size = ddpc_world(rt)->size;
    if (!world) {
        fprintf(stderr, "gpu_ddp: rank %d: MPI is not wired in this launch (use mpiexec)\n", rank);
        ddpc_finalize(rt);
        return 99;
    }
    if (forced_copy[0] && rank == 0)
        printf("gpu_ddp: note: ignoring DDPC_BACKEND=%s: this test picks its backends\n",
               forced_copy);
    int32_t ndev = on_host ? 1 : ddpc_device_count(), least = ndev;
    OK(ddpc_allreduce(world, &ndev, &least, 1, DDPC_I32, DDPC_MIN));
    if (least <= 0) {
        if (rank == 0)
            printf("gpu_ddp: skipped: no usable CUDA device\n");
        ddpc_finalize(rt);
        return 77;
    }
    if (!on_host) {
        OK(ddpc_device_select(rt, &device));
        CU(cudaStreamCreateWithFlags(&strm, cudaStreamNonBlocking));
    }

    run_backend(DDPC_BACKEND_MPI);
    if (size == 1) {
        if (on_host) {
            if (rank == 0)
                printf("gpu_ddp: nccl: skipped: GPU_TEST_ON_HOST=1\n");
        } else {
            run_backend(DDPC_BACKEND_NCCL);
        }
    }

    snprintf(label, sizeof label, "end");
    int32_t nf = nfail, any = nf;
    OK(ddpc_allreduce(world, &nf, &any, 1, DDPC_I32, DDPC_MAX));
    if (rank == 0)
        printf("gpu_ddp: %d rank(s): %s\n", size, any ? "FAILED (messages above, per rank)" : "ok");
    if (strm)
        CU(cudaStreamDestroy(strm));
    ddpc_finalize(rt);
    return any ? 1 : 0;
}
