/* SPDX-License-Identifier: BSD-3-Clause */
/* gputest.h: the scaffold of the plain-C multi-rank GPU tests (gpu_comm.c,
 * gpu_ddp.c): one ddpc runtime and its world communicator, checks that count
 * failures and name the rank and the case, calls that must succeed or end
 * every rank, copies on the stream, and a main() that skips (77) on every
 * rank unless every rank has a usable CUDA device. GPU_TEST_ON_HOST=1 runs
 * the same on host memory. Not for Check suites: that is mpitest.h. */
#ifndef DDPC_GPUTEST_H
#define DDPC_GPUTEST_H

#include "ddpc.h"
#include "testutil.h"

#include <cuda_runtime.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *prog = "gputest"; /* the test's name, first in its messages */
static ddpc_t rt;
static ddpc_comm_t world;            /* host memory: agreement, hashes, barriers */
static int rank, size;
static int nfail;                    /* checks failed on this rank */
static int on_host;                  /* GPU_TEST_ON_HOST=1 */
static int device = DDPC_DEVICE_HOST;
static cudaStream_t strm;            /* the communicators' stream; copies go on it */
static char label[96] = "setup";     /* what is being checked, for messages */

/* ------------------------------------------------------------------ checks */

/* A call failed: say where, then end every rank (the collectives would no
 * longer match). */
static inline void die(const char *file, int line, const char *call, const char *why)
{
    fprintf(stderr, "%s: rank %d: %s:%d: [%s] %s failed: %s\n", prog, rank, file, line, label,
            call, why);
    fflush(stderr);
    char m[128];
    snprintf(m, sizeof m, "%s: a call failed (above); ending every rank", prog);
    ddpc_abort(rt, 1, m);
}

/* A CUDA call that must succeed. */
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

/* A check failed on this rank: counted, and said as
 * "prog: rank r: file:line: [label] message". */
__attribute__((format(printf, 3, 4))) static inline void fail_at(const char *file, int line,
                                                                  const char *fmt, ...)
{
    fprintf(stderr, "%s: rank %d: %s:%d: [%s] ", prog, rank, file, line, label);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    nfail++;
}
#define FAILF(...) fail_at(__FILE__, __LINE__, __VA_ARGS__)

/* n float32 equal to want within tol (0: exactly) */
static inline void expect_f32(const char *file, int line, const char *what, const float *got,
                              const float *want, size_t n, double tol)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (tol == 0 ? !(got[i] == want[i]) : !(fabs((double)got[i] - want[i]) <= tol))
            if (bad++ == 0)
                first = i;
    if (bad) {
        fail_at(file, line, "%s: %zu of %zu elements differ; first at %zu: got %.9g, expected "
                "%.9g (tolerance %g)", what, bad, n, first, got[first], want[first], tol);
    }
}
#define EXPECT_F32(what, got, want, n, tol) expect_f32(__FILE__, __LINE__, what, got, want, n, tol)

/* a call's status is want; otherwise the message says both and the runtime's error */
#define EXPECT_STATUS(st, want)                                                                \
    do {                                                                                       \
        ddpc_status_t g_ = (st), w_ = (want);                                                  \
        if (g_ != w_)                                                                          \
            FAILF("%s: got %s, expected %s (%s)", #st, ddpc_strerror(g_), ddpc_strerror(w_),   \
                  ddpc_last_error(rt));                                                        \
    } while (0)

#define EXPECT_EQ_INT(a, b)                                                                    \
    do {                                                                                       \
        long long a_ = (long long)(a), b_ = (long long)(b);                                    \
        if (a_ != b_)                                                                          \
            FAILF("%s == %s: %lld != %lld", #a, #b, a_, b_);                                   \
    } while (0)

/* The same bytes on every rank: one hash each, allgathered on the host. */
static inline void expect_same_on_all_ranks(const char *file, int line, const char *what,
                                            const void *buf, size_t bytes)
{
    uint64_t h = fnv1a(buf, bytes), *all = malloc((size_t)size * sizeof *all);
    if (!all)
        die(file, line, "malloc", "out of memory");
    OK(ddpc_allgather(world, &h, all, 1, DDPC_I64));
    for (int r = 0; r < size; r++)
        if (all[r] != all[0]) {
            fail_at(file, line, "%s: rank %d's FNV-1a %016" PRIx64 " != rank 0's %016" PRIx64,
                    what, r, all[r], all[0]);
            break;
        }
    free(all);
}
#define EXPECT_SAME_ON_ALL_RANKS(what, buf, bytes)                                             \
    expect_same_on_all_ranks(__FILE__, __LINE__, what, buf, bytes)

/* ------------------------------------------------------------------ memory */
/* Device memory is host memory with GPU_TEST_ON_HOST (and memcpy). Copies go
 * on strm and wait for it: what a stream-ordered collective wrote is read
 * after it. */

/* Zeroed host memory (the reference's optimizer state relies on it). */
static inline void *halloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p)
        die(__FILE__, __LINE__, "calloc", "out of memory");
    return p;
}

/* Device buffers (host memory with GPU_TEST_ON_HOST). */
static inline void *dalloc(size_t bytes)
{
    void *p = NULL;
    if (on_host) {
        if (!(p = malloc(bytes ? bytes : 1)))
            die(__FILE__, __LINE__, "malloc", "out of memory");
    } else {
        CU(cudaMalloc(&p, bytes ? bytes : 1));
    }
    return p;
}

static inline void dfree(void *p)
{
    if (on_host)
        free(p);
    else if (p)
        CU(cudaFree(p));
}

/* CLOCK_MONOTONIC seconds. */
static inline double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline void copy_sync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
    if (on_host) {
        memcpy(dst, src, bytes);
        return;
    }
    CU(cudaMemcpyAsync(dst, src, bytes, kind, strm));
    CU(cudaStreamSynchronize(strm));
}

static inline void upload(void *dev, const void *host, size_t bytes)
{
    copy_sync(dev, host, bytes, cudaMemcpyHostToDevice);
}

static inline void download(void *host, const void *dev, size_t bytes)
{
    copy_sync(host, dev, bytes, cudaMemcpyDeviceToHost);
}

/* ------------------------------------------------------------------ communicators */

/* A communicator of backend be on strm, for device memory (host memory with
 * GPU_TEST_ON_HOST). */
static inline ddpc_status_t make_comm(ddpc_backend_t be, ddpc_comm_t *c)
{
    ddpc_comm_config_t cc = DDPC_COMM_CONFIG_INIT;
    cc.backend = be;
    cc.device = on_host ? DDPC_DEVICE_HOST : DDPC_DEVICE_AUTO;
    cc.stream = strm;
    return ddpc_comm_create(rt, &cc, c);
}

/* The communicator of one backend's run (be: DDPC_BACKEND_MPI or _NCCL),
 * with label set to the backend it must get (mpi on the host, else
 * mpi-staged or nccl) and checks that it got that backend and device.
 * Returns 0, said on rank 0, where nccl is unsupported here: skip the run. */
static inline int open_comm(ddpc_backend_t be, ddpc_comm_t *c)
{
    const ddpc_backend_t want = on_host ? DDPC_BACKEND_MPI
                                : be == DDPC_BACKEND_NCCL ? DDPC_BACKEND_NCCL
                                                          : DDPC_BACKEND_MPI_STAGED;
    snprintf(label, sizeof label, "%s", ddpc_backend_name(want));
    ddpc_status_t st = make_comm(be, c);
    if (st == DDPC_ERR_UNSUPPORTED && be == DDPC_BACKEND_NCCL) {
        if (rank == 0)
            printf("%s: nccl: skipped: %s\n", prog, ddpc_last_error(rt));
        return 0;
    }
    OK(st);
    if (ddpc_comm_backend(*c) != want)
        FAILF("backend %s, expected %s", ddpc_backend_name(ddpc_comm_backend(*c)),
              ddpc_backend_name(want));
    EXPECT_EQ_INT(ddpc_comm_device(*c), device);
    return 1;
}

static int32_t ndev_least;           /* CUDA devices of the rank that sees fewest */
static int skip_all;                 /* set by a body that could run nothing here: exit 77 */

/* run(DDPC_BACKEND_MPI), then run(DDPC_BACKEND_NCCL) where every rank has a
 * GPU of its own (NCCL refuses two ranks on one GPU: with one GPU, one
 * rank; the emulation's DDPC_EMU_DEVICES gives more); GPU_TEST_ON_HOST has
 * no nccl. */
static inline void each_backend(void (*run)(ddpc_backend_t))
{
    run(DDPC_BACKEND_MPI);
    int32_t mine = ndev_least >= ddpc_world(rt)->local_size, all = mine;
    OK(ddpc_allreduce(world, &mine, &all, 1, DDPC_I32, DDPC_MIN));
    if (!all)
        return;
    if (on_host) {
        if (rank == 0)
            printf("%s: nccl: skipped: GPU_TEST_ON_HOST=1\n", prog);
    } else {
        run(DDPC_BACKEND_NCCL);
    }
}

/* ------------------------------------------------------------------ main */

/* main() of a GPU test named name: DDPC_BACKEND is ignored (the test picks
 * its backends), ddpc starts with a 120 s collective timeout, the device is
 * selected and strm made, body runs the cases. Exit status, the same on
 * every rank: 0, 1 when a check failed on any rank, 77 when a rank has no
 * usable CUDA device; 99 when ddpc does not start or MPI is not wired. */
static inline int gpu_test_main(const char *name, int argc, char **argv, void (*body)(void))
{
    prog = name;
    const char *forced = getenv("DDPC_BACKEND");
    char forced_copy[64] = "";
    if (forced) {
        snprintf(forced_copy, sizeof forced_copy, "%s", forced);
        unsetenv("DDPC_BACKEND");
    }
    const char *oh = getenv("GPU_TEST_ON_HOST");
    on_host = oh && !strcmp(oh, "1");
    ddpc_config_t cfg = DDPC_CONFIG_INIT;
    /* a collective with no partner fails in minutes, not 10; DDPC_TIMEOUT overrides */
    cfg.timeout_s = 120;
    if (ddpc_init(&cfg, &argc, &argv, &rt) != DDPC_OK) {
        fprintf(stderr, "%s: %s\n", prog, rt ? ddpc_last_error(rt) : ddpc_init_error());
        ddpc_finalize(rt);
        return 99;
    }
    world = ddpc_comm_world(rt);
    rank = ddpc_world(rt)->rank;
    size = ddpc_world(rt)->size;
    if (!world) {
        fprintf(stderr, "%s: rank %d: MPI is not wired in this launch (use mpiexec)\n", prog, rank);
        ddpc_finalize(rt);
        return 99;
    }
    if (forced_copy[0] && rank == 0)
        printf("%s: note: ignoring DDPC_BACKEND=%s: this test picks its backends\n", prog,
               forced_copy);

    int32_t ndev = on_host ? 1 : ddpc_device_count(), least = ndev;
    OK(ddpc_allreduce(world, &ndev, &least, 1, DDPC_I32, DDPC_MIN));
    ndev_least = least;
    if (least <= 0) {
        if (rank == 0)
            printf("%s: skipped: no usable CUDA device\n", prog);
        ddpc_finalize(rt);
        return 77;
    }
    if (!on_host) {
        OK(ddpc_device_select(rt, &device));
        struct cudaDeviceProp prop; /* "(emulated)" in the name under the emulation */
        if (rank == 0 && cudaGetDeviceProperties(&prop, device) == cudaSuccess)
            printf("%s: %d rank(s), rank 0 on %s\n", prog, size, prop.name);
        CU(cudaStreamCreateWithFlags(&strm, cudaStreamNonBlocking));
    }

    body();

    snprintf(label, sizeof label, "end");
    int32_t nf = nfail, any = nf;
    OK(ddpc_allreduce(world, &nf, &any, 1, DDPC_I32, DDPC_MAX));
    if (rank == 0)
        printf("%s: %d rank(s): %s\n", prog, size,
               any ? "FAILED (messages above, per rank)" : "ok");
    if (strm)
        CU(cudaStreamDestroy(strm));
    ddpc_finalize(rt);
    return any ? 1 : skip_all ? 77 : 0;
}

#endif
