/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu_graph.c: a whole DDP step captured into a CUDA graph on the nccl
 * backend, and the rules a capture imposes on ddpc (each case a defect a
 * first GPU run would have shown):
 *  - the learning rate: ddpc_optim_set_lr between replays changes what the
 *    next replay applies (the update reads it from device memory, not from
 *    the kernels' arguments frozen at capture); lr 0 leaves the parameters
 *    alone, another lr moves them by exactly -lr * g;
 *  - DDPC_CHECK_PARAMS=1: the replica check (which synchronizes the host)
 *    is not called inside the capture: the capture succeeds, the eager steps
 *    are checked;
 *  - a capture in global mode (PyTorch's default) by the caller while a
 *    collective is in flight: the NCCL watchdog's event queries from its
 *    own thread must not invalidate it.
 * nccl only (mpi-staged runs host code in each all-reduce and cannot be
 * captured): every rank needs a GPU of its own, so with one GPU it runs on
 * one rank and skips (77) on more. Without a usable CUDA device: 77. */
#include "gputest.h"

#include <unistd.h>

#define OK_D(d, call) OK_MSG(call, ddpc_ddp_last_error(d))

enum { N0 = 3000, N1 = 257 }; /* two parameters: two buckets */

typedef struct {
    ddpc_comm_t c;
    ddpc_ddp_t d;
    ddpc_optim_t o;
    float *dp, *dg;  /* the engine's arenas (device) */
    float *gsrc;     /* device: the gradient every step copies in */
    float *hp, *hg;  /* pinned host */
    size_t n;
} eng_t;

static void eng_open(eng_t *e, ddpc_comm_t c, double lr)
{
    memset(e, 0, sizeof *e);
    e->c = c;
    ddpc_ddp_config_t dc = DDPC_DDP_CONFIG_INIT;
    dc.first_bucket_bytes = 1024;
    dc.bucket_bytes = 8192;
    dc.stream = strm;
    OK(ddpc_ddp_create(c, &dc, &e->d));
    int64_t s0[2] = {N0 / 100, 100}, s1[1] = {N1};
    OK_D(e->d, ddpc_ddp_add_param(e->d, "w", 2, s0, NULL));
    OK_D(e->d, ddpc_ddp_add_param(e->d, "b", 1, s1, NULL));
    OK_D(e->d, ddpc_ddp_build(e->d));
    e->dp = ddpc_ddp_params(e->d, &e->n);
    e->dg = ddpc_ddp_grads(e->d, NULL);
    ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
    oc.type = DDPC_OPTIM_SGD;
    oc.lr = lr;
    OK_D(e->d, ddpc_optim_create(e->d, &oc, &e->o));
    CU(cudaMalloc((void **)&e->gsrc, e->n * 4));
    CU(cudaMallocHost((void **)&e->hp, e->n * 4));
    CU(cudaMallocHost((void **)&e->hg, e->n * 4));
    for (size_t i = 0; i < e->n; i++) {
        e->hp[i] = 1.0f + (float)(i % 7) * 0.125f;
        e->hg[i] = (float)((int)(i % 5) - 2) * 0.25f; /* the same on every rank: the average */
    }
    upload(e->dp, e->hp, e->n * 4);
    upload(e->gsrc, e->hg, e->n * 4);
    OK_D(e->d, ddpc_ddp_broadcast_params(e->d));
    CU(cudaStreamSynchronize(strm));
}

static void eng_close(eng_t *e)
{
    CU(cudaStreamSynchronize(strm));
    ddpc_optim_destroy(e->o);
    ddpc_ddp_destroy(e->d);
    CU(cudaFree(e->gsrc));
    CU(cudaFreeHost(e->hp));
    CU(cudaFreeHost(e->hg));
}

/* One step, all on strm: gradients in, all-reduced (AVG of equal values),
 * the optimizer. Eager, or recorded when strm is being captured. */
static ddpc_status_t step(eng_t *e)
{
    ddpc_status_t st;
    if ((st = ddpc_ddp_zero_grad(e->d)))
        return st;
    if (cudaMemcpyAsync(e->dg, e->gsrc, e->n * 4, cudaMemcpyDeviceToDevice, strm) != cudaSuccess)
        return DDPC_ERR_CUDA;
    for (int i = ddpc_ddp_num_params(e->d) - 1; i >= 0; i--)
        if ((st = ddpc_ddp_grad_ready(e->d, i)))
            return st;
    if ((st = ddpc_ddp_wait(e->d)))
        return st;
    return ddpc_optim_step(e->o, NULL);
}

static cudaGraphExec_t capture(eng_t *e, enum cudaStreamCaptureMode mode)
{
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    CU(cudaStreamBeginCapture(strm, mode));
    ddpc_status_t st = step(e);
    cudaError_t ce = cudaStreamEndCapture(strm, &g);
    if (st != DDPC_OK) {
        FAILF("a step inside the capture: %s: %s", ddpc_strerror(st), ddpc_ddp_last_error(e->d));
        return NULL;
    }
    if (ce != cudaSuccess) {
        FAILF("cudaStreamEndCapture after a step: %s", cudaGetErrorString(ce));
        return NULL;
    }
    CU(cudaGraphInstantiate(&x, g, 0));
    CU(cudaGraphDestroy(g));
    return x;
}

static void replay(eng_t *e, cudaGraphExec_t x)
{
    CU(cudaGraphLaunch(x, strm));
    OK(ddpc_comm_watch(e->c, "a captured step"));
    CU(cudaStreamSynchronize(strm));
}

/* the parameters now are want[i] - lr * g[i], want updated to them */
static void expect_moved(eng_t *e, float *want, float lr, const char *what)
{
    for (size_t i = 0; i < e->n; i++)
        want[i] = want[i] - lr * e->hg[i];
    download(e->hp, e->dp, e->n * 4);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < e->n; i++)
        if (e->hp[i] != want[i] && !bad++)
            first = i;
    if (bad)
        FAILF("%s: %zu of %zu parameters differ from p - %g * g, first [%zu] %.9g != %.9g", what,
              bad, e->n, lr, first, e->hp[first], want[first]);
    EXPECT_SAME_ON_ALL_RANKS(what, e->hp, e->n * 4);
}

static void case_lr(ddpc_comm_t c)
{
    snprintf(label, sizeof label, "set_lr between replays");
    eng_t e;
    eng_open(&e, c, 0.5);
    float *want = halloc(e.n * 4);
    download(want, e.dp, e.n * 4);
    OK_D(e.d, step(&e)); /* eager warm-up: the engine's checks */
    CU(cudaStreamSynchronize(strm));
    expect_moved(&e, want, 0.5f, "eager step, lr 0.5");
    cudaGraphExec_t x = capture(&e, cudaStreamCaptureModeThreadLocal);
    if (x) {
        replay(&e, x);
        expect_moved(&e, want, 0.5f, "replay, lr 0.5");
        ddpc_optim_set_lr(e.o, 0.0);
        replay(&e, x);
        expect_moved(&e, want, 0.0f, "replay after ddpc_optim_set_lr(0)");
        ddpc_optim_set_lr(e.o, 0.25);
        replay(&e, x);
        expect_moved(&e, want, 0.25f, "replay after ddpc_optim_set_lr(0.25)");
        OK_D(e.d, step(&e)); /* an eager step after replays: the same rate */
        CU(cudaStreamSynchronize(strm));
        expect_moved(&e, want, 0.25f, "eager step after the replays, lr 0.25");
        EXPECT_EQ_INT(ddpc_optim_steps(e.o), 5);
        CU(cudaGraphExecDestroy(x));
    }
    free(want);
    eng_close(&e);
}

static void case_check_params(ddpc_comm_t c)
{
    snprintf(label, sizeof label, "DDPC_CHECK_PARAMS=1 and a capture");
    setenv("DDPC_CHECK_PARAMS", "1", 1);
    eng_t e;
    eng_open(&e, c, 0.125);
    unsetenv("DDPC_CHECK_PARAMS");
    float *want = halloc(e.n * 4);
    download(want, e.dp, e.n * 4);
    OK_D(e.d, step(&e));
    CU(cudaStreamSynchronize(strm));
    expect_moved(&e, want, 0.125f, "eager checked step");
    cudaGraphExec_t x = capture(&e, cudaStreamCaptureModeThreadLocal);
    if (x) {
        replay(&e, x);
        expect_moved(&e, want, 0.125f, "replay of a step captured with DDPC_CHECK_PARAMS=1");
        OK_D(e.d, step(&e)); /* eager again: checked again */
        CU(cudaStreamSynchronize(strm));
        expect_moved(&e, want, 0.125f, "eager checked step after a replay");
        CU(cudaGraphExecDestroy(x));
    }
    free(want);
    eng_close(&e);
}

/* A global-mode capture of unrelated work on another stream while a
 * collective issued before it is still in flight (behind slow copies on the
 * communicator's stream), so that the watchdog polls its end event during
 * the capture. */
static void case_global_mode(ddpc_comm_t c)
{
    snprintf(label, sizeof label, "global-mode capture beside the watchdog");
    const size_t big = (size_t)64 << 20;
    char *a, *b;
    float *x;
    cudaStream_t other;
    CU(cudaMalloc((void **)&a, big));
    CU(cudaMalloc((void **)&b, big));
    CU(cudaMalloc((void **)&x, 4096 * 4));
    CU(cudaMemsetAsync(x, 0, 4096 * 4, strm));
    CU(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
    CU(cudaStreamSynchronize(strm));
    for (int k = 0; k < 8; k++) /* the collective waits for these */
        CU(cudaMemcpyAsync(b, a, big, cudaMemcpyDeviceToDevice, strm));
    ddpc_work_t w;
    OK(ddpc_iallreduce(c, x, x, 4096, DDPC_F32, DDPC_SUM, &w));
    cudaGraph_t g = NULL;
    CU(cudaStreamBeginCapture(other, cudaStreamCaptureModeGlobal));
    cudaError_t e1 = cudaMemsetAsync(a, 1, 4096, other);
    usleep(200000); /* the watchdog polls every 20 ms */
    cudaError_t e2 = cudaMemsetAsync(a, 2, 4096, other);
    cudaError_t ce = cudaStreamEndCapture(other, &g);
    if (e1 != cudaSuccess || e2 != cudaSuccess || ce != cudaSuccess)
        FAILF("a global-mode capture while the NCCL watchdog polls: memset %s, memset %s, "
              "cudaStreamEndCapture %s", cudaGetErrorString(e1), cudaGetErrorString(e2),
              cudaGetErrorString(ce));
    if (g)
        CU(cudaGraphDestroy(g));
    OK(ddpc_work_wait(w, -1));
    OK(ddpc_comm_synchronize(c, 60));
    CU(cudaStreamSynchronize(strm));
    CU(cudaStreamDestroy(other));
    CU(cudaFree(a));
    CU(cudaFree(b));
    CU(cudaFree(x));
}

static void cases(void)
{
    int32_t mine = ndev_least >= ddpc_world(rt)->local_size, all = mine;
    OK(ddpc_allreduce(world, &mine, &all, 1, DDPC_I32, DDPC_MIN));
    if (!all || on_host) {
        if (rank == 0)
            printf("gpu_graph: skipped: nccl needs a GPU per rank (%d rank(s), %d GPU(s))%s\n",
                   size, (int)ndev_least, on_host ? "; GPU_TEST_ON_HOST=1" : "");
        skip_all = 1;
        return;
    }
    ddpc_comm_t c;
    if (!open_comm(DDPC_BACKEND_NCCL, &c)) {
        skip_all = 1;
        return;
    }
    case_lr(c);
    case_check_params(c);
    case_global_mode(c);
    OK(ddpc_comm_synchronize(c, 60));
    ddpc_comm_destroy(c);
    if (rank == 0)
        printf("gpu_graph: %d rank(s): set_lr, DDPC_CHECK_PARAMS and a global-mode capture "
               "checked\n", size);
}

int main(int argc, char **argv) { return gpu_test_main("gpu_graph", argc, argv, cases); }
