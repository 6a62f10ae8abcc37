/* SPDX-License-Identifier: BSD-3-Clause */
/* comm.c: the communicator's front end. Validates every collective, hands
 * out sequence numbers, and passes the work to the backend (mpi.c: host
 * memory, or device memory staged through pinned buffers; nccl.c: device
 * memory). Also the dtypes, the host-side AVG division, and the choice of
 * each rank's GPU. */
#include "config.h"
#include "comm_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef DDPC_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#define MOD "comm"

const char *const comm_op_names[] = {"allreduce", "broadcast", "allgather", "reduce_scatter",
                                     "barrier",   "watch",     "alltoall",  "gather",
                                     "scatter",   "reduce",    "p2p"};

/* ------------------------------------------------------------------ dtypes */

size_t ddpc_dtype_size(ddpc_dtype_t dt)
{
    static const size_t sz[] = {4, 8, 4, 8, 2, 2, 1};
    return (unsigned)dt < DDPC_DTYPE_COUNT ? sz[dt] : 0;
}

const char *ddpc_dtype_name(ddpc_dtype_t dt)
{
    static const char *const nm[] = {"float32", "float64", "int32", "int64",
                                     "bfloat16", "float16", "uint8"};
    return (unsigned)dt < DDPC_DTYPE_COUNT ? nm[dt] : "invalid";
}

const char *ddpc_backend_name(ddpc_backend_t b)
{
    static const char *const nm[] = {"auto", "mpi", "nccl", "mpi-staged"};
    return (unsigned)b < sizeof nm / sizeof *nm ? nm[b] : "invalid";
}

/* "rank 2 (world rank 5)", or "rank 2" when the two agree */
static void name_rank(const struct ddpc_comm *c, int r, char *s, size_t n)
{
    int wr = ddpc_comm_world_rank((ddpc_comm_t)c, r);
    if (wr == r)
        snprintf(s, n, "rank %d", r);
    else
        snprintf(s, n, "rank %d (world rank %d)", r, wr);
}

void comm_describe(const struct ddpc_work *w, char *s, size_t n)
{
    if (w->kind == OP_P2P) {
        /* "send #4 (1024 x float32) from rank 1 to rank 2", or a batch's
           transfers one after the other */
        size_t k = 0;
        if (w->np > 1)
            k += (size_t)snprintf(s, n, "batch #%llu of %d transfers: ",
                                  (unsigned long long)w->seq, w->np);
        for (int i = 0; i < w->np && k < n; i++) {
            const ddpc_p2p_op_t *o = &w->p2p[i];
            char me[48], peer[48];
            name_rank(w->comm, w->comm->rank, me, sizeof me);
            name_rank(w->comm, o->peer, peer, sizeof peer);
            char num[32] = "";
            if (w->np == 1)
                snprintf(num, sizeof num, " #%llu", (unsigned long long)w->seq);
            k += (size_t)snprintf(s + k, n - k, "%s%s%s (%zu x %s) %s %s %s %s", i ? "; " : "",
                                  o->is_send ? "send" : "receive", num, o->count,
                                  ddpc_dtype_name(o->dt), o->is_send ? "from" : "by", me,
                                  o->is_send ? "to" : "from", peer);
        }
        return;
    }
    if (w->kind == OP_WATCH) {
        snprintf(s, n, "%s (issued after collective #%llu)", w->label,
                 (unsigned long long)w->seq - 1);
        return;
    }
    snprintf(s, n, "%s #%llu (%zu x %s, root %d)", comm_op_names[w->kind],
             (unsigned long long)w->seq, w->count, ddpc_dtype_name(w->dt), w->root);
}

/* Floats are scaled (and added: the shared-memory all-reduce's sums, which
 * as a plain loop took 4% of a 2-rank MLP step in scalar addss) in blocks of
 * a fixed length, which compilers vectorize at
 * -O2 (a plain loop of unknown length stays scalar with gcc 12's -O2 cost
 * model: one divss per element, 4.9 GB/s, a quarter of a 64 MiB all-reduce's
 * time; bench/ddp_bench allreduce), and on x86-64 in an AVX-512 and an AVX2
 * clone picked at load time (a 1 MiB bucket, in cache after its all-reduce:
 * 38 us with SSE, 11 us with AVX-512). Same results bit for bit: an IEEE
 * division is exact-then-rounded whatever the vector width, and when size is
 * a power of two x * (1/size) is the same exact-then-rounded value as x / size
 * (VECTOR_CLONES, src/util/util.h). */
#define BLOCK 16

VECTOR_CLONES
static void add_f32(float *restrict acc, const float *restrict x, size_t n)
{
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK)
        for (int k = 0; k < BLOCK; k++)
            acc[i + k] += x[i + k];
    for (; i < n; i++)
        acc[i] += x[i];
}

void comm_add_f32(float *restrict acc, const float *restrict x, size_t n) { add_f32(acc, x, n); }

VECTOR_CLONES
static void scale_f32(float *x, size_t n, int size)
{
    size_t i = 0;
    if ((size & (size - 1)) == 0) {
        const float r = 1.0f / (float)size;
        for (; i + BLOCK <= n; i += BLOCK)
            for (int k = 0; k < BLOCK; k++)
                x[i + k] *= r;
        for (; i < n; i++)
            x[i] *= r;
    } else {
        const float d = (float)size;
        for (; i + BLOCK <= n; i += BLOCK)
            for (int k = 0; k < BLOCK; k++)
                x[i + k] /= d;
        for (; i < n; i++)
            x[i] /= d;
    }
}

VECTOR_CLONES
static void scale_f64(double *x, size_t n, int size)
{
    size_t i = 0;
    if ((size & (size - 1)) == 0) {
        const double r = 1.0 / (double)size;
        for (; i + BLOCK / 2 <= n; i += BLOCK / 2)
            for (int k = 0; k < BLOCK / 2; k++)
                x[i + k] *= r;
        for (; i < n; i++)
            x[i] *= r;
    } else {
        const double d = (double)size;
        for (; i + BLOCK / 2 <= n; i += BLOCK / 2)
            for (int k = 0; k < BLOCK / 2; k++)
                x[i + k] /= d;
        for (; i < n; i++)
            x[i] /= d;
    }
}

/* recv[0..count) /= size, in its own type (AVG after the SUM). */
void comm_divide(void *buf, size_t count, ddpc_dtype_t dt, int size)
{
    switch (dt) {
    case DDPC_F32: scale_f32(buf, count, size); break;
    case DDPC_F64: scale_f64(buf, count, size); break;
    case DDPC_I32: {
        int32_t *x = buf;
        for (size_t i = 0; i < count; i++)
            x[i] /= size;
        break;
    }
    case DDPC_I64: {
        int64_t *x = buf;
        for (size_t i = 0; i < count; i++)
            x[i] /= size;
        break;
    }
    case DDPC_BF16: {
        uint16_t *x = buf;
        for (size_t i = 0; i < count; i++)
            x[i] = ddpc_f32_to_bf16(ddpc_bf16_to_f32(x[i]) / (float)size);
        break;
    }
    case DDPC_F16: {
        uint16_t *x = buf;
        for (size_t i = 0; i < count; i++)
            x[i] = ddpc_f32_to_f16(ddpc_f16_to_f32(x[i]) / (float)size);
        break;
    }
    default: break;
    }
}

void comm_clock_start(comm_clock_t *k)
{
    k->last = ddpc_now();
    k->counted = 0;
}

int comm_clock_wait(pthread_cond_t *cv, pthread_mutex_t *mu, comm_clock_t *k, double timeout_s)
{
    double left = timeout_s - k->counted;
    if (left <= 0)
        return 1;
    double slice = left < COMM_SLICE_S ? left : COMM_SLICE_S;
    struct timespec dl;
    comm_deadline(&dl, slice);
    pthread_cond_timedwait(cv, mu, &dl);
    double now = ddpc_now(), d = now - k->last;
    k->last = now;
    k->counted += d > slice + COMM_STOP_GAP_S ? slice : d; /* a stop: not counted */
    return k->counted >= timeout_s;
}

void comm_deadline(struct timespec *ts, double s)
{
    clock_gettime(CLOCK_REALTIME, ts);
    double whole = floor(s);
    ts->tv_sec += (time_t)whole;
    ts->tv_nsec += (long)((s - whole) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

#ifdef DDPC_HAVE_CUDA
void comm_events_put(comm_events_t *p, void *ev)
{
    if (!ev)
        return;
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 16;
        void **q = realloc(p->ev, (size_t)cap * sizeof *q);
        if (!q) {
            cudaEventDestroy((cudaEvent_t)ev);
            return;
        }
        p->ev = q;
        p->cap = cap;
    }
    p->ev[p->n++] = ev;
}

void *comm_events_get(comm_events_t *p)
{
    if (p->n > 0)
        return p->ev[--p->n];
    cudaEvent_t e; /* the pool ran dry: more in flight than ever before */
    return cudaEventCreateWithFlags(&e, p->timing ? cudaEventDefault : cudaEventDisableTiming) ==
                   cudaSuccess
               ? e
               : NULL;
}

int comm_events_fill(comm_events_t *p, int n)
{
    cudaError_t e = cudaSuccess;
    for (int i = 0; e == cudaSuccess && i < n; i++) {
        cudaEvent_t ev;
        if ((e = cudaEventCreateWithFlags(&ev, p->timing ? cudaEventDefault
                                                         : cudaEventDisableTiming)) == cudaSuccess)
            comm_events_put(p, ev);
    }
    return (int)e;
}

void comm_events_free(comm_events_t *p)
{
    for (int i = 0; i < p->n; i++)
        cudaEventDestroy((cudaEvent_t)p->ev[i]);
    free(p->ev);
    *p = (comm_events_t){0};
}
#endif

/* ------------------------------------------------------------------ devices */

int ddpc_gpu_rule(int local_rank, int local_size, int ndev, const char *visible, char *err,
                  size_t errlen)
{
    char cvd[96];
    if (visible)
        snprintf(cvd, sizeof cvd, "CUDA_VISIBLE_DEVICES=\"%s\"", visible);
    else
        snprintf(cvd, sizeof cvd, "CUDA_VISIBLE_DEVICES unset");
    if (local_rank < 0 || local_size < 1 || local_rank >= local_size) {
        snprintf(err, errlen, "local rank %d of %d is not a valid place on this node", local_rank,
                 local_size);
        return -1;
    }
    if (ndev <= 0) {
        snprintf(err, errlen, "no CUDA device visible (%s); under Slurm ask for GPUs with "
                 "--gpus-per-node or --gpus-per-task", cvd);
        return -1;
    }
    if (ndev == 1)
        return 0;
    if (ndev >= local_size)
        return local_rank;
    snprintf(err, errlen, "%d ranks on this node but %d GPUs visible (%s): one GPU per rank is "
             "needed (srun --gpus-per-node=%d, or --gpus-per-task=1)", local_size, ndev, cvd,
             local_size);
    return -1;
}

int ddpc_device_count(void)
{
#ifdef DDPC_HAVE_CUDA
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : -1;
#else
    return -1;
#endif
}

const char *ddpc_device_describe(int device, char *buf, size_t n)
{
    snprintf(buf, n, "none");
#ifdef DDPC_HAVE_CUDA
    struct cudaDeviceProp p;
    char bus[32] = "?";
    if (device >= 0 && cudaGetDeviceProperties(&p, device) == cudaSuccess) {
        cudaDeviceGetPCIBusId(bus, sizeof bus, device);
        snprintf(buf, n, "%d (%s, PCI %s, sm_%d%d)", device, p.name, bus, p.major, p.minor);
    }
#endif
    return buf;
}

ddpc_status_t ddpc_device_select(ddpc_t rt, int *device)
{
    if (!rt || !device)
        return DDPC_ERR_INVALID;
    *device = DDPC_DEVICE_HOST;
#ifdef DDPC_HAVE_CUDA
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return ddpc_err(rt, DDPC_ERR_CUDA, "device",
                        "no usable GPU: cudaGetDeviceCount failed: %s (no NVIDIA driver, or no "
                        "device in this job's cgroup)", cudaGetErrorString(e));
    long forced = -1;
    ddpc_status_t st = ddpc_env_long(rt, "DDPC_DEVICE", 0, 1023, &forced);
    if (st)
        return st;
    int g;
    char why[256];
    if (forced >= 0) {
        if (forced >= n)
            return ddpc_err(rt, DDPC_ERR_CUDA, "device",
                            "DDPC_DEVICE=%ld but %d CUDA device(s) are visible", forced, n);
        g = (int)forced;
    } else {
        const ddpc_world_t *w = ddpc_world(rt);
        g = ddpc_gpu_rule(w->local_rank, w->local_size, n, getenv("CUDA_VISIBLE_DEVICES"), why,
                          sizeof why);
        if (g < 0)
            return ddpc_err(rt, DDPC_ERR_CUDA, "device", "no usable GPU: %s", why);
    }
    if ((e = cudaSetDevice(g)) != cudaSuccess)
        return ddpc_err(rt, DDPC_ERR_CUDA, "device", "no usable GPU: cudaSetDevice(%d): %s", g,
                        cudaGetErrorString(e));
    char desc[192];
    ddpc_log(rt, DDPC_LOG_INFO, "device: GPU %s of %d for local rank %d",
             ddpc_device_describe(g, desc, sizeof desc), n, ddpc_world(rt)->local_rank);
    *device = g;
    return DDPC_OK;
#else
    return ddpc_err(rt, DDPC_ERR_UNSUPPORTED, "device",
                    "this ddpc was built without CUDA (configure --with-cuda)");
#endif
}

/* ------------------------------------------------------------------ lifecycle */

struct ddpc_comm *comm_alloc(ddpc_t rt, int device, void *stream)
{
    struct ddpc_comm *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->rt = rt;
    c->device = device;
    c->stream = stream;
    c->rank = rt->world.rank;
    c->size = rt->world.size;
    c->fail_seq = UINT64_MAX;
    c->id = -1;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

/* ------------------------------------------------------------------ flight recorder */
struct comm_flight {
    uint64_t seq;
    int32_t op, dt, root, state;
    uint64_t count;
    double t_issue, t_end;
    char tag[32];
};

void ddpc_comm_tag_next(struct ddpc_comm *c, const char *tag)
{
    if (c && c->fr)
        snprintf(c->fr_tag, sizeof c->fr_tag, "%s", tag ? tag : "");
}

void ddpc_comm_blocking_next(struct ddpc_comm *c)
{
    if (c)
        c->blocking_next = 1;
}

void comm_flight_issue(struct ddpc_comm *c, const struct ddpc_work *w)
{
    if (!c->fr || w->kind == OP_WATCH)
        return;
    struct comm_flight *e = &c->fr[w->seq % c->fr_cap];
    *e = (struct comm_flight){.seq = w->seq, .op = (int32_t)w->kind, .dt = (int32_t)w->dt,
                              .root = w->root, .state = FR_ISSUED, .count = w->count,
                              .t_issue = w->t_enqueue};
    memcpy(e->tag, c->fr_tag, sizeof e->tag);
    c->fr_tag[0] = 0;
}

void comm_flight_end(struct ddpc_comm *c, uint64_t seq, int state)
{
    if (!c->fr)
        return;
    struct comm_flight *e = &c->fr[seq % c->fr_cap];
    if (e->seq == seq && e->state == FR_ISSUED) {
        e->state = state;
        e->t_end = ddpc_now();
    }
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

void ddpc_flight_dump(ddpc_t rt, const char *why, char *where, size_t n)
{
    if (where && n)
        where[0] = 0;
    if (!rt || rt->flight_n <= 0 || __atomic_exchange_n(&rt->flight_dumped, 1, __ATOMIC_ACQ_REL))
        return;
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/ddpc-flight-rank%d.json", rt->flight_dir, rt->world.rank);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        ddpc_log(rt, DDPC_LOG_WARN, "flight recorder: cannot write %s: %s", tmp, strerror(errno));
        return;
    }
    static const char *const states[] = {"?", "issued", "completed", "failed"};
    double now = ddpc_now();
    fprintf(f, "{\"rank\": %d, \"size\": %d, \"host\": ", rt->world.rank, rt->world.size);
    json_string(f, rt->world.host);
    fprintf(f, ", \"pid\": %d, \"why\": ", (int)getpid());
    json_string(f, why ? why : "");
    fprintf(f, ",\n \"communicators\": [");
    int first_c = 1;
    for (int i = 0; i < MON_MAX_COMMS; i++) {
        struct ddpc_comm *c = __atomic_load_n(&rt->comms[i], __ATOMIC_ACQUIRE);
        if (!c || !c->fr)
            continue;
        pthread_mutex_lock(&c->mu);
        fprintf(f, "%s\n  {\"id\": %d, \"backend\": \"%s\", \"next_seq\": %llu, "
                "\"completed\": %llu, \"collectives\": [", first_c ? "" : ",", c->id,
                ddpc_backend_name(c->backend), (unsigned long long)c->seq,
                (unsigned long long)c->completed);
        first_c = 0;
        uint64_t lo = c->seq > c->fr_cap ? c->seq - c->fr_cap : 0;
        int first = 1;
        for (uint64_t s = lo; s < c->seq; s++) {
            const struct comm_flight *e = &c->fr[s % c->fr_cap];
            if (e->seq != s || !e->state)
                continue;
            fprintf(f, "%s\n   {\"seq\": %llu, \"op\": \"%s\", \"count\": %llu, "
                    "\"dtype\": \"%s\", \"root\": %d, \"tag\": ", first ? "" : ",",
                    (unsigned long long)e->seq, comm_op_names[e->op], (unsigned long long)e->count,
                    ddpc_dtype_name((ddpc_dtype_t)e->dt), e->root);
            json_string(f, e->tag);
            fprintf(f, ", \"state\": \"%s\", \"issued_s_ago\": %.6f", states[e->state],
                    now - e->t_issue);
            if (e->state != FR_ISSUED)
                fprintf(f, ", \"took_s\": %.6f", e->t_end - e->t_issue);
            fputc('}', f);
            first = 0;
        }
        fprintf(f, "]}");
        pthread_mutex_unlock(&c->mu);
    }
    fprintf(f, "]}\n");
    int bad = ferror(f);
    if (fclose(f) || bad || rename(tmp, path)) {
        ddpc_log(rt, DDPC_LOG_WARN, "flight recorder: cannot write %s", path);
        remove(tmp);
        return;
    }
    if (where)
        snprintf(where, n, "%s", path);
}

/* A communicator made on every rank gets the next id, the same everywhere,
 * under which the side channel reports its progress. */
void comm_register(struct ddpc_comm *c)
{
    ddpc_t rt = c->rt;
    c->id = rt->ncomms < MON_MAX_COMMS ? rt->ncomms : -1;
    rt->ncomms++;
    if (rt->flight_n > 0 && c->id >= 0 && (c->fr = calloc((size_t)rt->flight_n, sizeof *c->fr)))
        c->fr_cap = (size_t)rt->flight_n;
    if (c->id >= 0)
        __atomic_store_n(&rt->comms[c->id], c, __ATOMIC_RELEASE);
}

void comm_free(struct ddpc_comm *c)
{
    ddpc_monitor_forget(c);
    if (c->ops)
        c->ops->destroy(c);
    if (c->abandoned)
        return; /* a thread stuck in a collective still holds it */
    free(c->fr);
    free(c->members);
#ifdef DDPC_HAVE_CUDA
    if (c->ctrl)
        cudaFree(c->ctrl);
#endif
    pthread_mutex_destroy(&c->mu);
    free(c);
}

ddpc_status_t ddpc_comm_create_world(ddpc_t rt, struct ddpc_comm **out)
{
    struct ddpc_comm *c = comm_alloc(rt, DDPC_DEVICE_HOST, NULL);
    if (!c)
        return ddpc_err(rt, DDPC_ERR_NOMEM, MOD, "cannot allocate the world communicator");
    c->backend = DDPC_BACKEND_MPI;
    ddpc_status_t st = comm_mpi_create(c, 0);
    if (st) {
        comm_free(c);
        return st;
    }
    comm_register(c);
    *out = c;
    return DDPC_OK;
}

void ddpc_comm_destroy_internal(struct ddpc_comm *c)
{
    if (!c)
        return;
    if (c->ops && !c->timed_out) /* after a timeout, waiting once more is no use */
        c->ops->synchronize(c, c->rt->cfg.timeout_s);
    comm_free(c);
}

void ddpc_comm_destroy(ddpc_comm_t c)
{
    if (c && c != c->rt->world_comm)
        ddpc_comm_destroy_internal(c);
}

ddpc_status_t comm_resolve(ddpc_t rt, const ddpc_comm_config_t *k, ddpc_backend_t *backend)
{
    /* DDPC_BACKEND (already in the runtime's config) wins over the
     * communicator's config, which wins over the runtime's default */
    const char *env = getenv("DDPC_BACKEND");
    int env_set = env && *env && strcmp(env, "auto") != 0;
    ddpc_backend_t be = env_set || k->backend == DDPC_BACKEND_AUTO ? rt->cfg.backend : k->backend;
    if (be == DDPC_BACKEND_MPI_STAGED)
        be = DDPC_BACKEND_MPI;
    if (k->device < DDPC_DEVICE_AUTO)
        return ddpc_err(rt, DDPC_ERR_INVALID, MOD, "device %d: expected DDPC_DEVICE_HOST (-1), "
                        "DDPC_DEVICE_AUTO (-2) or a CUDA device number", k->device);
    if (k->device == DDPC_DEVICE_HOST && be == DDPC_BACKEND_NCCL)
        return ddpc_err(rt, DDPC_ERR_INVALID, MOD,
                        "backend nccl needs device memory: set device (DDPC_DEVICE_AUTO) or use "
                        "backend mpi for host memory");
    if (be == DDPC_BACKEND_AUTO) {
#ifdef DDPC_HAVE_NCCL
        be = k->device == DDPC_DEVICE_HOST ? DDPC_BACKEND_MPI : DDPC_BACKEND_NCCL;
#else
        be = DDPC_BACKEND_MPI;
#endif
    }
#ifndef DDPC_HAVE_NCCL
    if (be == DDPC_BACKEND_NCCL)
        return ddpc_err(rt, DDPC_ERR_UNSUPPORTED, MOD,
                        "backend nccl: this ddpc was built without NCCL (configure --with-nccl)");
#endif
    if (be == DDPC_BACKEND_MPI && k->device != DDPC_DEVICE_HOST)
        be = DDPC_BACKEND_MPI_STAGED;
    *backend = be;
    return DDPC_OK;
}

ddpc_status_t comm_ctrl_alloc(struct ddpc_comm *c)
{
    if (c->device == DDPC_DEVICE_HOST)
        return DDPC_OK;
#ifdef DDPC_HAVE_CUDA
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess)
        e = cudaMalloc(&c->ctrl, CTRL_BYTES);
    if (e != cudaSuccess)
        return ddpc_err(c->rt, DDPC_ERR_CUDA, MOD, "GPU %d: cannot allocate %zu KiB for control "
                        "messages: %s", c->device, CTRL_BYTES >> 10, cudaGetErrorString(e));
#endif
    return DDPC_OK;
}

void comm_announce(struct ddpc_comm *c)
{
    char where[32] = "the host";
    if (c->device != DDPC_DEVICE_HOST)
        snprintf(where, sizeof where, "GPU %d", c->device);
    ddpc_log(c->rt, DDPC_LOG_INFO, "comm: backend %s on %s, %d rank(s)",
             ddpc_backend_name(c->backend), where, c->size);
}

ddpc_status_t ddpc_comm_create(ddpc_t rt, const ddpc_comm_config_t *cfg, ddpc_comm_t *out)
{
    static const ddpc_comm_config_t defaults = DDPC_COMM_CONFIG_INIT;
    if (!rt || !out)
        return ddpc_err(rt, DDPC_ERR_INVALID, MOD, "ddpc_comm_create: NULL runtime or out");
    *out = NULL;
    const ddpc_comm_config_t k = cfg ? *cfg : defaults;
    ddpc_backend_t be;
    ddpc_status_t st = comm_resolve(rt, &k, &be);
    if (st)
        return st;
    struct ddpc_comm *c = comm_alloc(rt, k.device, k.stream);
    if (!c)
        return ddpc_err(rt, DDPC_ERR_NOMEM, MOD, "cannot allocate a communicator");
    if (be != DDPC_BACKEND_NCCL) {
        if (c->device == DDPC_DEVICE_AUTO && (st = ddpc_device_select(rt, &c->device)) != DDPC_OK) {
            comm_free(c);
            return st;
        }
        c->backend = c->device == DDPC_DEVICE_HOST ? DDPC_BACKEND_MPI : DDPC_BACKEND_MPI_STAGED;
        st = comm_mpi_create(c, c->device != DDPC_DEVICE_HOST);
    } else {
#ifdef DDPC_HAVE_NCCL
        c->backend = DDPC_BACKEND_NCCL;
        st = comm_nccl_create(c);
#endif
    }
    if (st == DDPC_OK)
        st = comm_ctrl_alloc(c);
    if (st) {
        comm_free(c);
        return st;
    }
    comm_announce(c);
    comm_register(c);
    *out = c;
    return DDPC_OK;
}

/* ------------------------------------------------------------------ public calls */

ddpc_comm_t ddpc_comm_world(ddpc_t rt) { return rt ? rt->world_comm : NULL; }
int ddpc_comm_rank(ddpc_comm_t c) { return c ? c->rank : -1; }
int ddpc_comm_size(ddpc_comm_t c) { return c ? c->size : -1; }
ddpc_backend_t ddpc_comm_backend(ddpc_comm_t c) { return c ? c->backend : DDPC_BACKEND_AUTO; }
ddpc_t ddpc_comm_runtime(ddpc_comm_t c) { return c ? c->rt : NULL; }
int ddpc_comm_device(ddpc_comm_t c) { return c ? c->device : DDPC_DEVICE_HOST; }

ddpc_status_t ddpc_comm_set_stream(ddpc_comm_t c, void *stream)
{
    if (!c)
        return DDPC_ERR_INVALID;
    pthread_mutex_lock(&c->mu);
    c->stream = stream;
    pthread_mutex_unlock(&c->mu);
    return DDPC_OK;
}

void *ddpc_comm_stream(ddpc_comm_t c)
{
    if (!c)
        return NULL;
    pthread_mutex_lock(&c->mu);
    void *s = c->stream;
    pthread_mutex_unlock(&c->mu);
    return s;
}

uint64_t ddpc_comm_seq(ddpc_comm_t c)
{
    if (!c)
        return 0;
    pthread_mutex_lock(&c->mu);
    uint64_t s = c->seq;
    pthread_mutex_unlock(&c->mu);
    return s;
}

/* The sticky failure of a device communicator, into the runtime's message. */
static ddpc_status_t failed(ddpc_comm_t c)
{
    pthread_mutex_lock(&c->mu);
    ddpc_status_t st = c->failed;
    char msg[DDPC_ERRMSG_LEN];
    if (st)
        snprintf(msg, sizeof msg, "%s", c->fail_msg);
    pthread_mutex_unlock(&c->mu);
    return st ? ddpc_err(c->rt, st, MOD, "%s", msg) : DDPC_OK;
}

ddpc_status_t ddpc_comm_status(ddpc_comm_t c) { return c ? failed(c) : DDPC_ERR_INVALID; }

ddpc_status_t ddpc_comm_synchronize(ddpc_comm_t c, double timeout_s)
{
    if (!c)
        return DDPC_ERR_INVALID;
    ddpc_status_t st = c->ops->synchronize(c, timeout_s < 0 ? c->rt->cfg.timeout_s : timeout_s);
    return st ? st : failed(c);
}

/* Reductions each dtype supports: BF16/F16 sum and avg only; no reduction of U8. */
static int op_supported(ddpc_dtype_t dt, ddpc_redop_t op)
{
    if ((unsigned)op >= DDPC_REDOP_COUNT || dt == DDPC_U8)
        return 0;
    return !((dt == DDPC_BF16 || dt == DDPC_F16) && op != DDPC_SUM && op != DDPC_AVG);
}

/* A work handle of kind for c, its deadline DDPC_TIMEOUT from now; NULL
 * (the message set) when out of memory. */
static struct ddpc_work *work_new(struct ddpc_comm *c, op_kind_t kind)
{
    struct ddpc_work *w = calloc(1, sizeof *w);
    if (!w) {
        ddpc_err(c->rt, DDPC_ERR_NOMEM, MOD, "cannot allocate a work handle");
        return NULL;
    }
    w->comm = c;
    w->kind = kind;
    w->t_enqueue = ddpc_now();
    w->deadline = w->t_enqueue + c->rt->cfg.timeout_s;
    return w;
}

static ddpc_status_t submit(ddpc_comm_t c, op_kind_t kind, const void *send, void *recv,
                            size_t count, ddpc_dtype_t dt, ddpc_redop_t op, int root,
                            ddpc_work_t *out)
{
    if (!c || !out)
        return DDPC_ERR_INVALID;
    *out = NULL;
    ddpc_t rt = c->rt;
    if (kind != OP_BARRIER) {
        if (ddpc_dtype_size(dt) == 0)
            return ddpc_err(rt, DDPC_ERR_INVALID, MOD, "%s: invalid dtype %d", comm_op_names[kind],
                            (int)dt);
        /* which buffers this rank needs: a rooted operation's other side
           only at the root */
        const int rooted = kind == OP_GATHER || kind == OP_SCATTER || kind == OP_REDUCE;
        const int at_root = c->rank == root;
        int need_send = kind != OP_BCAST && (kind != OP_SCATTER || at_root);
        int need_recv = kind == OP_SCATTER || !rooted || at_root;
        if (count && ((need_recv && !recv) || (need_send && !send)))
            return ddpc_err(rt, DDPC_ERR_INVALID, MOD, "%s: NULL %s buffer for %zu elements",
                            comm_op_names[kind], need_recv && !recv ? "receive" : "send", count);
        if (kind == OP_ALLTOALL && count && send == recv)
            return ddpc_err(rt, DDPC_ERR_INVALID, MOD, "alltoall: send and receive buffers are "
                            "the same (not in place)");
    }
    if ((kind == OP_ALLREDUCE || kind == OP_REDUCE_SCATTER || kind == OP_REDUCE) &&
        !op_supported(dt, op))
        return ddpc_err(rt, DDPC_ERR_UNSUPPORTED, MOD, "%s: reduction %d is not supported for %s",
                        comm_op_names[kind], (int)op, ddpc_dtype_name(dt));
    if ((kind == OP_BCAST || kind == OP_GATHER || kind == OP_SCATTER || kind == OP_REDUCE) &&
        (root < 0 || root >= c->size))
        return ddpc_err(rt, DDPC_ERR_INVALID, MOD, "%s: root %d is not a rank of 0..%d",
                        comm_op_names[kind], root, c->size - 1);
    if ((kind == OP_ALLGATHER || kind == OP_REDUCE_SCATTER || kind == OP_ALLTOALL ||
         kind == OP_GATHER || kind == OP_SCATTER) && count > (size_t)INT32_MAX)
        return ddpc_err(rt, DDPC_ERR_UNSUPPORTED, MOD, "%s: count %zu exceeds 2^31-1",
                        comm_op_names[kind], count);
    /* DDPC_DEBUG=detail: every rank calls the same (one thread issues on c) */
    if (rt->check_collectives) {
        ddpc_status_t cs = ddpc_monitor_check(c, __atomic_load_n(&c->seq, __ATOMIC_RELAXED),
                                              kind, count, dt, root);
        if (cs)
            return cs;
    }
    /* an aborted device communicator refuses in its backend's submit, under
     * the lock that its watchdog fails it under */
    struct ddpc_work *w = work_new(c, kind);
    if (!w)
        return DDPC_ERR_NOMEM;
    w->send = send;
    w->recv = recv;
    w->count = count;
    w->dt = dt;
    w->op = op;
    w->root = root;
    w->blocking = c->blocking_next;
    c->blocking_next = 0;
    pthread_mutex_lock(&c->mu);
    w->seq = c->seq;
    comm_flight_issue(c, w);
    ddpc_status_t st = c->ops->submit(c, w);
    if (st == DDPC_OK)
        __atomic_store_n(&c->seq, c->seq + 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&c->mu);
    if (st) {
        free(w);
        return st;
    }
    *out = w;
    return DDPC_OK;
}

ddpc_status_t ddpc_comm_watch(ddpc_comm_t c, const char *what)
{
    if (!c)
        return DDPC_ERR_INVALID;
    if (!c->ops->watch)
        return DDPC_OK;
    struct ddpc_work *w = work_new(c, OP_WATCH);
    if (!w)
        return DDPC_ERR_NOMEM;
    snprintf(w->label, sizeof w->label, "%s", what && *what ? what : "work on the stream");
    pthread_mutex_lock(&c->mu);
    w->seq = c->seq; /* no collective: the count does not move */
    ddpc_status_t st = c->ops->watch(c, w);
    pthread_mutex_unlock(&c->mu);
    if (st)
        free(w);
    return st;
}

ddpc_status_t ddpc_work_test(ddpc_work_t w, int *done)
{
    if (!w || !done)
        return DDPC_ERR_INVALID;
    return w->comm->ops->test(w, done);
}

ddpc_status_t ddpc_work_wait(ddpc_work_t w, double timeout_s)
{
    if (!w)
        return DDPC_ERR_INVALID;
    struct ddpc_comm *c = w->comm;
    return c->ops->wait(w, timeout_s < 0 ? c->rt->cfg.timeout_s : timeout_s);
}

static ddpc_status_t run_blocking(ddpc_comm_t c, op_kind_t kind, const void *send, void *recv,
                                  size_t count, ddpc_dtype_t dt, ddpc_redop_t op, int root)
{
    ddpc_work_t w;
    ddpc_status_t st = submit(c, kind, send, recv, count, dt, op, root, &w);
    return st ? st : ddpc_work_wait(w, -1);
}

ddpc_status_t ddpc_allreduce(ddpc_comm_t c, const void *send, void *recv, size_t count,
                             ddpc_dtype_t dt, ddpc_redop_t op)
{
    return run_blocking(c, OP_ALLREDUCE, send, recv, count, dt, op, 0);
}

ddpc_status_t ddpc_iallreduce(ddpc_comm_t c, const void *send, void *recv, size_t count,
                              ddpc_dtype_t dt, ddpc_redop_t op, ddpc_work_t *work)
{
    return submit(c, OP_ALLREDUCE, send, recv, count, dt, op, 0, work);
}

ddpc_status_t ddpc_broadcast(ddpc_comm_t c, void *buf, size_t count, ddpc_dtype_t dt, int root)
{
    return run_blocking(c, OP_BCAST, buf, buf, count, dt, DDPC_SUM, root);
}

ddpc_status_t ddpc_ibroadcast(ddpc_comm_t c, void *buf, size_t count, ddpc_dtype_t dt, int root,
                              ddpc_work_t *work)
{
    return submit(c, OP_BCAST, buf, buf, count, dt, DDPC_SUM, root, work);
}

ddpc_status_t ddpc_allgather(ddpc_comm_t c, const void *send, void *recv, size_t count,
                             ddpc_dtype_t dt)
{
    return run_blocking(c, OP_ALLGATHER, send, recv, count, dt, DDPC_SUM, 0);
}

ddpc_status_t ddpc_reduce_scatter(ddpc_comm_t c, const void *send, void *recv, size_t count,
                                  ddpc_dtype_t dt, ddpc_redop_t op)
{
    return run_blocking(c, OP_REDUCE_SCATTER, send, recv, count, dt, op, 0);
}

ddpc_status_t ddpc_alltoall(ddpc_comm_t c, const void *send, void *recv, size_t count,
                            ddpc_dtype_t dt)
{
    return run_blocking(c, OP_ALLTOALL, send, recv, count, dt, DDPC_SUM, 0);
}

ddpc_status_t ddpc_gather(ddpc_comm_t c, const void *send, void *recv, size_t count,
                          ddpc_dtype_t dt, int root)
{
    return run_blocking(c, OP_GATHER, send, recv, count, dt, DDPC_SUM, root);
}

ddpc_status_t ddpc_scatter(ddpc_comm_t c, const void *send, void *recv, size_t count,
                           ddpc_dtype_t dt, int root)
{
    return run_blocking(c, OP_SCATTER, send, recv, count, dt, DDPC_SUM, root);
}

ddpc_status_t ddpc_reduce(ddpc_comm_t c, const void *send, void *recv, size_t count,
                          ddpc_dtype_t dt, ddpc_redop_t op, int root)
{
    return run_blocking(c, OP_REDUCE, send, recv, count, dt, op, root);
}

ddpc_status_t ddpc_ireduce(ddpc_comm_t c, const void *send, void *recv, size_t count,
                           ddpc_dtype_t dt, ddpc_redop_t op, int root, ddpc_work_t *work)
{
    return submit(c, OP_REDUCE, send, recv, count, dt, op, root, work);
}

/* ------------------------------------------------------------------ point-to-point */

ddpc_status_t ddpc_p2p_batch(ddpc_comm_t c, const ddpc_p2p_op_t *ops, int n, ddpc_work_t *out)
{
    if (out)
        *out = NULL;
    if (!c)
        return DDPC_ERR_INVALID;
    ddpc_t rt = c->rt;
    if (n < 1 || n > DDPC_P2P_BATCH_MAX || !ops)
        return ddpc_err(rt, DDPC_ERR_INVALID, MOD, "p2p: %d transfers in a batch: expected "
                        "1..%d", n, DDPC_P2P_BATCH_MAX);
    for (int i = 0; i < n; i++) {
        const ddpc_p2p_op_t *o = &ops[i];
        const char *what = o->is_send ? "send" : "receive";
        if (o->peer < 0 || o->peer >= c->size || o->peer == c->rank)
            return ddpc_err(rt, DDPC_ERR_INVALID, MOD, "%s: peer %d is not another rank of this "
                            "communicator (rank %d of 0..%d)", what, o->peer, c->rank,
                            c->size - 1);
        if (ddpc_dtype_size(o->dt) == 0)
            return ddpc_err(rt, DDPC_ERR_INVALID, MOD, "%s: invalid dtype %d", what, (int)o->dt);
        if (o->count && !o->buf)
            return ddpc_err(rt, DDPC_ERR_INVALID, MOD, "%s: NULL buffer for %zu elements", what,
                            o->count);
        if (o->count > (size_t)INT32_MAX)
            return ddpc_err(rt, DDPC_ERR_UNSUPPORTED, MOD, "%s: count %zu exceeds 2^31-1", what,
                            o->count);
    }
    struct ddpc_work *w = work_new(c, OP_P2P);
    if (!w)
        return DDPC_ERR_NOMEM;
    w->np = n;
    memcpy(w->p2p, ops, (size_t)n * sizeof *ops);
    pthread_mutex_lock(&c->mu);
    w->seq = c->p2p_seq; /* its own count: transfers are not collectives */
    ddpc_status_t st = c->ops->submit(c, w);
    if (st == DDPC_OK)
        c->p2p_seq++;
    pthread_mutex_unlock(&c->mu);
    if (st) {
        free(w);
        return st;
    }
    if (out) {
        *out = w;
        return DDPC_OK;
    }
    return ddpc_work_wait(w, -1);
}

static ddpc_status_t p2p_one(ddpc_comm_t c, int is_send, const void *buf, size_t count,
                             ddpc_dtype_t dt, int peer, ddpc_work_t *work)
{
    ddpc_p2p_op_t o = {is_send, peer, (void *)buf, count, dt};
    if (work)
        return ddpc_p2p_batch(c, &o, 1, work);
    return ddpc_p2p_batch(c, &o, 1, NULL);
}

ddpc_status_t ddpc_send(ddpc_comm_t c, const void *buf, size_t count, ddpc_dtype_t dt, int peer)
{
    return p2p_one(c, 1, buf, count, dt, peer, NULL);
}

ddpc_status_t ddpc_recv(ddpc_comm_t c, void *buf, size_t count, ddpc_dtype_t dt, int peer)
{
    return p2p_one(c, 0, buf, count, dt, peer, NULL);
}

ddpc_status_t ddpc_isend(ddpc_comm_t c, const void *buf, size_t count, ddpc_dtype_t dt, int peer,
                         ddpc_work_t *work)
{
    if (!work)
        return DDPC_ERR_INVALID;
    return p2p_one(c, 1, buf, count, dt, peer, work);
}

ddpc_status_t ddpc_irecv(ddpc_comm_t c, void *buf, size_t count, ddpc_dtype_t dt, int peer,
                         ddpc_work_t *work)
{
    if (!work)
        return DDPC_ERR_INVALID;
    return p2p_one(c, 0, buf, count, dt, peer, work);
}

ddpc_status_t ddpc_barrier(ddpc_comm_t c)
{
    return run_blocking(c, OP_BARRIER, NULL, NULL, 0, DDPC_U8, DDPC_SUM, 0);
}

ddpc_status_t ddpc_comm_mem_alloc(ddpc_comm_t c, size_t bytes, void **out)
{
    if (!out)
        return DDPC_ERR_INVALID;
    *out = NULL;
    if (!c)
        return DDPC_ERR_INVALID;
    if (c->backend == DDPC_BACKEND_MPI) {
        ddpc_status_t st = comm_mpi_mem_alloc(c, bytes, out);
        if (st != DDPC_OK || *out)
            return st;
    }
    size_t b = ((bytes ? bytes : 1) + 63) / 64 * 64;
    void *p = aligned_alloc(64, b);
    if (!p)
        return ddpc_err(c->rt, DDPC_ERR_NOMEM, "comm", "cannot allocate %zu bytes", b);
    memset(p, 0, b);
    *out = p;
    return DDPC_OK;
}

void ddpc_comm_mem_free(ddpc_comm_t c, void *p)
{
    if (p && !(c && c->backend == DDPC_BACKEND_MPI && comm_mpi_mem_release(c, p, 1)))
        free(p);
}

int ddpc_comm_mem_shared(ddpc_comm_t c, const void *p)
{
    return p && c && c->backend == DDPC_BACKEND_MPI && comm_mpi_mem_release(c, (void *)p, 0);
}
