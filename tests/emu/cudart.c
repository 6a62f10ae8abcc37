/* SPDX-License-Identifier: BSD-3-Clause */
/* cudart.c: the CUDA runtime calls ddpc uses, emulated on the host for
 * tests (emu.h). Device and pinned memory come from tracked allocations
 * filled with NaN bytes (0xff); each stream is a thread that runs its
 * queue in order, each operation after a seeded random delay, so a host
 * read that does not wait for its stream, or a stream that does not wait
 * for another's event, sees poison or stale data. The legacy default
 * stream orders against blocking streams as CUDA's does. Capture records
 * operations (arguments by value) into a graph, across the streams that
 * join it through events, and enforces the capture modes' rules; a replay
 * runs the recorded operations in recording order on the launch stream.
 * Not emulated: kernels (their launchers' twins are in kernels_*.c),
 * multiple devices' memories (one host address space), unified memory. */
#define _GNU_SOURCE
#include "emu.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "emu_internal.h"

/* ------------------------------------------------------------------ state */

static pthread_mutex_t G = PTHREAD_MUTEX_INITIALIZER; /* everything below */
static pthread_cond_t progress = PTHREAD_COND_INITIALIZER; /* any op completed */

typedef struct alloc {
    char *p;
    size_t bytes;
    int kind, device;
} alloc_t;
static alloc_t *allocs;
static int nallocs, cap_allocs;

static int violations;
static cudaError_t sticky = cudaSuccess;
static __thread cudaError_t last_error = cudaSuccess;
static __thread int cur_device;
/* cudaThreadExchangeStreamCaptureMode: this thread's interaction with captures */
static __thread enum cudaStreamCaptureMode thread_mode = cudaStreamCaptureModeGlobal;
static int ndevices = -1;
static unsigned delay_us = 100;
static uint64_t rng_state;

static struct CUstream_st *streams; /* every stream ever created (never freed) */
static struct CUstream_st *legacy;

/* a graph under construction or instantiated */
struct CUgraph_st {
    op_t *head, *tail;
    int nops;
};
struct CUgraphExec_st {
    op_t *ops; /* copies, in order */
    int nops;
};

typedef struct capture {
    enum cudaStreamCaptureMode mode;
    enum cudaStreamCaptureStatus status;
    pthread_t owner;
    struct CUstream_st *origin;
    struct CUgraph_st *graph;
    struct capture *next;
} capture_t;
static capture_t *captures; /* live ones */

struct CUstream_st {
    struct CUstream_st *next_all;
    unsigned flags;
    int device, id, destroyed, quit;
    pthread_t thread;
    op_t *head, *tail;
    uint64_t enq, done; /* tickets: enqueued, completed */
    capture_t *cap;     /* the capture this stream records into */
    int cap_last;       /* index in the graph of this stream's last recorded op */
    int cap_joined;     /* the origin waited on this stream's ops up to this index */
};

struct CUevent_st {
    unsigned flags;
    int destroyed, recorded;
    struct CUstream_st *s;
    uint64_t ticket;
    double t;              /* when its record ran (timing) */
    capture_t *cap;        /* recorded during this capture */
    int cap_index;         /* the graph's length when recorded */
    struct CUstream_st *cap_stream;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void on_exit_check(void)
{
    if (violations) {
        fprintf(stderr, "ddpc-emu[%d]: %d violation(s) of the device rules above: exit %d\n",
                (int)getpid(), violations, EMU_VIOLATION_EXIT);
        fflush(stderr);
        _exit(EMU_VIOLATION_EXIT);
    }
}

static void init_once_body(void)
{
    const char *v = getenv("DDPC_EMU_DEVICES");
    ndevices = v && *v ? atoi(v) : 1;
    if (ndevices < 0)
        ndevices = 0;
    v = getenv("DDPC_EMU_DELAY_US");
    if (v && *v)
        delay_us = (unsigned)atoi(v);
    v = getenv("DDPC_EMU_SEED");
    uint64_t seed = v && *v ? strtoull(v, NULL, 0) : 1;
    /* each process of a job its own sequence, reproducible from the seed */
    rng_state = (seed * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)getpid() << 17) ^ 0x2545F4914F6CDD1Dull;
    if (!rng_state)
        rng_state = 1;
    atexit(on_exit_check);
}
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void emu_init(void) { pthread_once(&init_once, init_once_body); }

/* ------------------------------------------------------------------ reports */

EMU_API cudaError_t emu_violation(const char *fmt, ...)
{
    emu_init();
    char m[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ddpc-emu[%d]: violation: %s\n", (int)getpid(), m);
    fflush(stderr);
    if (getenv("DDPC_EMU_ABORT"))
        abort();
    __atomic_add_fetch(&violations, 1, __ATOMIC_SEQ_CST);
    sticky = cudaErrorIllegalAddress;
    return cudaErrorIllegalAddress;
}

EMU_API uint32_t emu_rand(uint32_t n)
{
    emu_init();
    if (n <= 1)
        return 0;
    pthread_mutex_lock(&G);
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rng_state = x;
    pthread_mutex_unlock(&G);
    return (uint32_t)(x % n);
}

static cudaError_t ret(cudaError_t e)
{
    if (e != cudaSuccess)
        last_error = e;
    return e;
}

EMU_API cudaError_t emu_last_error(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e != cudaSuccess ? e : sticky;
}

EMU_API void emu_set_error(cudaError_t e) { last_error = e; }
EMU_API int emu_current_device(void) { return cur_device; }

/* allocation, free, device synchronize: never while NCCL may spin */
static cudaError_t check_no_collective(const char *call)
{
    int n = emu_nccl_in_flight();
    if (n > 0)
        return emu_violation("%s while %d NCCL operation(s) are in flight: on a GPU this can "
                             "deadlock against NCCL's spinning kernels (allocate every buffer "
                             "before the first collective)", call, n);
    return cudaSuccess;
}

/* ------------------------------------------------------------------ memory */

/* With G held: the allocation holding p, or NULL. */
static alloc_t *find_locked(const void *p)
{
    const char *c = p;
    for (int i = 0; i < nallocs; i++)
        if (c >= allocs[i].p && c < allocs[i].p + (allocs[i].bytes ? allocs[i].bytes : 1))
            return &allocs[i];
    return NULL;
}

EMU_API int emu_kind_of(const void *p)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&G);
    alloc_t *a = find_locked(p);
    int k = a ? a->kind : 0;
    pthread_mutex_unlock(&G);
    return k;
}

static const char *kind_name(int k)
{
    return k == EMU_DEVICE ? "device" : k == EMU_PINNED ? "pinned host" : "pageable host";
}

EMU_API cudaError_t emu_check(const void *p, size_t bytes, int kind, const char *call,
                              const char *what)
{
    if (!p && bytes == 0)
        return cudaSuccess;
    if (!p)
        return emu_violation("%s: %s is NULL (%zu bytes expected)", call, what, bytes);
    pthread_mutex_lock(&G);
    alloc_t *a = find_locked(p);
    alloc_t c = a ? *a : (alloc_t){0};
    pthread_mutex_unlock(&G);
    const char *want = kind == EMU_DEVICE ? "device" : kind == EMU_PINNED ? "pinned host"
                                                                           : "device or pinned";
    if (!a)
        return emu_violation("%s: %s = %p is not in any live %s allocation (a host pointer, "
                             "freed memory, or out of bounds)", call, what, p, want);
    if (kind && c.kind != kind)
        return emu_violation("%s: %s = %p is %s memory, %s expected", call, what, p,
                             kind_name(c.kind), want);
    size_t off = (size_t)((const char *)p - c.p);
    if (bytes > c.bytes - off)
        return emu_violation("%s: %s = %p + %zu bytes runs past its allocation (%p, %zu bytes: "
                             "%zu bytes over)", call, what, p, bytes, (void *)c.p, c.bytes,
                             bytes - (c.bytes - off));
    return cudaSuccess;
}

static cudaError_t track(size_t bytes, int kind, void **out)
{
    size_t b = bytes ? bytes : 1;
    b = (b + 255) & ~(size_t)255;
    void *p = aligned_alloc(256, b);
    if (!p)
        return cudaErrorMemoryAllocation;
    memset(p, 0xff, b); /* poison: every float and double reads NaN */
    pthread_mutex_lock(&G);
    if (nallocs == cap_allocs) {
        int nc = cap_allocs ? cap_allocs * 2 : 64;
        alloc_t *na = realloc(allocs, nc * sizeof *na);
        if (!na) {
            pthread_mutex_unlock(&G);
            free(p);
            return cudaErrorMemoryAllocation;
        }
        allocs = na;
        cap_allocs = nc;
    }
    allocs[nallocs++] = (alloc_t){p, bytes, kind, cur_device};
    pthread_mutex_unlock(&G);
    *out = p;
    return cudaSuccess;
}

static void drain_all(void);
static cudaError_t unsafe_call(const char *call, struct CUstream_st *s);

static cudaError_t untrack(void *p, int kind, const char *call)
{
    if (!p)
        return cudaSuccess;
    drain_all(); /* cudaFree and cudaFreeHost synchronize the device */
    pthread_mutex_lock(&G);
    int i;
    for (i = 0; i < nallocs; i++)
        if (allocs[i].p == p)
            break;
    if (i == nallocs || allocs[i].kind != kind) {
        alloc_t *a = find_locked(p);
        int k = a ? a->kind : 0;
        pthread_mutex_unlock(&G);
        return emu_violation("%s(%p): not the start of a live %s allocation (%s)", call, p,
                             kind_name(kind),
                             k ? (k == kind ? "inside one" : "memory of another kind")
                               : "unknown pointer, or freed twice");
    }
    alloc_t a = allocs[i];
    allocs[i] = allocs[--nallocs];
    pthread_mutex_unlock(&G);
    memset(a.p, 0xfe, a.bytes); /* a late reader sees garbage */
    free(a.p);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    emu_init();
    if (!p)
        return ret(cudaErrorInvalidValue);
    cudaError_t e = unsafe_call("cudaMalloc", NULL);
    if (e == cudaSuccess)
        e = check_no_collective("cudaMalloc");
    if (e != cudaSuccess)
        return ret(e);
    if (ndevices == 0)
        return ret(cudaErrorNoDevice);
    return ret(track(bytes, EMU_DEVICE, p));
}

cudaError_t cudaFree(void *p)
{
    emu_init();
    cudaError_t e = unsafe_call("cudaFree", NULL);
    if (e == cudaSuccess && p)
        e = check_no_collective("cudaFree");
    return ret(e != cudaSuccess ? e : untrack(p, EMU_DEVICE, "cudaFree"));
}

cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned int flags)
{
    emu_init();
    (void)flags;
    if (!p)
        return ret(cudaErrorInvalidValue);
    cudaError_t e = unsafe_call("cudaHostAlloc", NULL);
    if (e == cudaSuccess)
        e = check_no_collective("cudaHostAlloc");
    return ret(e != cudaSuccess ? e : track(bytes, EMU_PINNED, p));
}

cudaError_t cudaMallocHost(void **p, size_t bytes) { return cudaHostAlloc(p, bytes, 0); }

cudaError_t cudaFreeHost(void *p)
{
    emu_init();
    cudaError_t e = unsafe_call("cudaFreeHost", NULL);
    if (e == cudaSuccess && p)
        e = check_no_collective("cudaFreeHost");
    return ret(e != cudaSuccess ? e : untrack(p, EMU_PINNED, "cudaFreeHost"));
}

/* ------------------------------------------------------------------ streams */

static void *stream_main(void *arg);

/* With G held. */
static struct CUstream_st *stream_new_locked(unsigned flags)
{
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->flags = flags;
    s->device = cur_device;
    s->cap_last = -1;
    s->cap_joined = -1;
    static int next_id;
    s->id = next_id++;
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        free(s);
        return NULL;
    }
    pthread_detach(s->thread);
    s->next_all = streams;
    streams = s;
    return s;
}

/* With G held: the stream a handle names, NULL (and a violation) if none. */
static struct CUstream_st *stream_of_locked(cudaStream_t h, const char *call)
{
    if (h == NULL || h == cudaStreamLegacy || h == cudaStreamPerThread) {
        if (!legacy)
            legacy = stream_new_locked(0);
        return legacy;
    }
    for (struct CUstream_st *s = streams; s; s = s->next_all)
        if (s == h) {
            if (s->destroyed) {
                pthread_mutex_unlock(&G);
                emu_violation("%s: stream %p was destroyed", call, (void *)h);
                pthread_mutex_lock(&G);
                return NULL;
            }
            return s;
        }
    pthread_mutex_unlock(&G);
    emu_violation("%s: %p is not a stream", call, (void *)h);
    pthread_mutex_lock(&G);
    return NULL;
}

static void op_free(op_t *o)
{
    free(o->heap);
    free(o);
}

/* With G held: append o to s's queue (no capture involved). */
static void push_locked(struct CUstream_st *s, op_t *o)
{
    o->ticket = ++s->enq;
    o->next = NULL;
    if (s->tail)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
    if (o->flags & OP_COLLECTIVE)
        emu_nccl_op_begin(o->arg);
    pthread_cond_broadcast(&progress);
}

static op_t *op_wait_new(struct CUstream_st *on, uint64_t ticket)
{
    op_t *w = calloc(1, sizeof *w);
    if (w) {
        w->kind = OP_WAIT;
        w->wait_stream = on;
        w->wait_ticket = ticket;
        w->call = "(stream order)";
    }
    return w;
}

/* With G held: enqueue o on s for execution, with the legacy stream's
 * implicit ordering. */
static void enqueue_locked(struct CUstream_st *s, op_t *o)
{
    if (s == legacy) {
        for (struct CUstream_st *b = streams; b; b = b->next_all)
            if (b != s && !b->destroyed && !(b->flags & cudaStreamNonBlocking) && b->enq > b->done) {
                op_t *w = op_wait_new(b, b->enq);
                if (w)
                    push_locked(s, w);
            }
    } else if (!(s->flags & cudaStreamNonBlocking) && legacy && legacy->enq > legacy->done) {
        op_t *w = op_wait_new(legacy, legacy->enq);
        if (w)
            push_locked(s, w);
    }
    push_locked(s, o);
}

/* With G held: record o into s's capture. */
static void record_locked(struct CUstream_st *s, op_t *o)
{
    struct CUgraph_st *g = s->cap->graph;
    o->next = NULL;
    if (g->tail)
        g->tail->next = o;
    else
        g->head = o;
    g->tail = o;
    s->cap_last = g->nops++;
}

static void run_op(op_t *o)
{
    switch (o->kind) {
    case OP_FN:
        o->fn(o->heap_arg ? o->heap : o->arg);
        break;
    case OP_WAIT:
        pthread_mutex_lock(&G);
        while (o->wait_stream->done < o->wait_ticket)
            pthread_cond_wait(&progress, &G);
        pthread_mutex_unlock(&G);
        break;
    case OP_EVENT:
        break; /* the stream's done ticket is the event's state; its time below */
    }
}

static void *stream_main(void *arg)
{
    struct CUstream_st *s = arg;
    pthread_mutex_lock(&G);
    for (;;) {
        while (!s->head && !s->quit)
            pthread_cond_wait(&progress, &G);
        if (!s->head)
            break;
        op_t *o = s->head;
        pthread_mutex_unlock(&G);
        if (o->kind != OP_WAIT && delay_us)
            usleep(emu_rand(delay_us));
        cur_device = s->device;
        run_op(o);
        double t = now_s();
        pthread_mutex_lock(&G);
        if (o->kind == OP_EVENT && o->event)
            o->event->t = t;
        s->head = o->next;
        if (!s->head)
            s->tail = NULL;
        s->done = o->ticket;
        if (o->flags & OP_COLLECTIVE)
            emu_nccl_op_end(o->arg);
        pthread_cond_broadcast(&progress);
        op_free(o);
    }
    pthread_mutex_unlock(&G);
    return NULL;
}

/* With G held: wait until s has completed ticket t. */
static void wait_ticket_locked(struct CUstream_st *s, uint64_t t)
{
    while (s->done < t)
        pthread_cond_wait(&progress, &G);
}

static void drain_all(void)
{
    pthread_mutex_lock(&G);
    for (struct CUstream_st *s = streams; s; s = s->next_all)
        wait_ticket_locked(s, s->enq);
    pthread_mutex_unlock(&G);
}

/* With G held: invalidate every capture the rules say a prohibited call
 * from this thread breaks; returns the error code for the call or success. */
static cudaError_t unsafe_locked(const char *call, struct CUstream_st *s)
{
    cudaError_t e = cudaSuccess;
    for (capture_t *c = captures; c; c = c->next) {
        if (c->status != cudaStreamCaptureStatusActive)
            continue;
        int mine = pthread_equal(c->owner, pthread_self());
        /* CUDA's rules: the capturing thread unless the capture is relaxed; a
           thread in global mode while another thread captures in global
           mode; any thread that synchronizes with the capturing stream */
        int hit = (mine && c->mode != cudaStreamCaptureModeRelaxed) ||
                  (!mine && c->mode == cudaStreamCaptureModeGlobal &&
                   thread_mode == cudaStreamCaptureModeGlobal) ||
                  (s && s->cap == c);
        if (hit) {
            c->status = cudaStreamCaptureStatusInvalidated;
            e = cudaErrorStreamCaptureUnsupported;
            fprintf(stderr, "ddpc-emu[%d]: %s during a %s-mode capture (%s thread): the capture "
                    "is invalidated\n", (int)getpid(), call,
                    c->mode == cudaStreamCaptureModeGlobal ? "global"
                    : c->mode == cudaStreamCaptureModeThreadLocal ? "thread-local" : "relaxed",
                    mine ? "the capturing" : "another");
        }
    }
    return e;
}

static cudaError_t unsafe_call(const char *call, struct CUstream_st *s)
{
    pthread_mutex_lock(&G);
    cudaError_t e = unsafe_locked(call, s);
    pthread_mutex_unlock(&G);
    return e;
}

/* Enqueue or record o on handle h. Takes ownership of o. */
static cudaError_t submit(cudaStream_t h, op_t *o)
{
    emu_init();
    pthread_mutex_lock(&G);
    struct CUstream_st *s = stream_of_locked(h, o->call);
    if (!s) {
        pthread_mutex_unlock(&G);
        op_free(o);
        return cudaErrorInvalidResourceHandle;
    }
    if (s->cap) {
        if (s->cap->status == cudaStreamCaptureStatusInvalidated) {
            pthread_mutex_unlock(&G);
            op_free(o);
            return cudaErrorStreamCaptureInvalidated;
        }
        record_locked(s, o);
    } else {
        /* work for the legacy stream while a global capture of a blocking
           stream runs would join it implicitly: CUDA refuses */
        if (s == legacy)
            for (capture_t *c = captures; c; c = c->next)
                if (c->status == cudaStreamCaptureStatusActive &&
                    !(c->origin->flags & cudaStreamNonBlocking)) {
                    c->status = cudaStreamCaptureStatusInvalidated;
                    pthread_mutex_unlock(&G);
                    op_free(o);
                    return cudaErrorStreamCaptureImplicit;
                }
        enqueue_locked(s, o);
    }
    pthread_mutex_unlock(&G);
    return cudaSuccess;
}

cudaError_t emu_submit_fn(cudaStream_t h, const char *call, emu_fn fn, const void *arg,
                          size_t size, int flags)
{
    if (size > EMU_ARG_MAX)
        return emu_violation("%s: %zu bytes of arguments (at most %d)", call, size, EMU_ARG_MAX);
    op_t *o = calloc(1, sizeof *o);
    if (!o)
        return cudaErrorMemoryAllocation;
    o->kind = OP_FN;
    o->fn = fn;
    o->call = call;
    o->flags = flags;
    if (size)
        memcpy(o->arg, arg, size);
    return submit(h, o);
}

EMU_API cudaError_t emu_launch(cudaStream_t s, const char *call, emu_fn fn, const void *arg,
                               size_t size)
{
    cudaError_t e = sticky != cudaSuccess ? sticky : emu_submit_fn(s, call, fn, arg, size, 0);
    return ret(e);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *out, unsigned int flags)
{
    emu_init();
    if (!out)
        return ret(cudaErrorInvalidValue);
    pthread_mutex_lock(&G);
    struct CUstream_st *s = stream_new_locked(flags);
    pthread_mutex_unlock(&G);
    if (!s)
        return ret(cudaErrorMemoryAllocation);
    *out = s;
    return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *out) { return cudaStreamCreateWithFlags(out, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t h)
{
    emu_init();
    pthread_mutex_lock(&G);
    struct CUstream_st *s = stream_of_locked(h, "cudaStreamDestroy");
    if (!s || s == legacy) {
        pthread_mutex_unlock(&G);
        return ret(cudaErrorInvalidResourceHandle);
    }
    if (s->cap) {
        pthread_mutex_unlock(&G);
        return ret(emu_violation("cudaStreamDestroy: stream %p is capturing", (void *)h));
    }
    /* pending work completes first, as CUDA's; then the thread ends */
    s->destroyed = 1;
    s->quit = 1;
    pthread_cond_broadcast(&progress);
    pthread_mutex_unlock(&G);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t h)
{
    emu_init();
    pthread_mutex_lock(&G);
    struct CUstream_st *s = stream_of_locked(h, "cudaStreamSynchronize");
    if (!s) {
        pthread_mutex_unlock(&G);
        return ret(cudaErrorInvalidResourceHandle);
    }
    cudaError_t e = unsafe_locked("cudaStreamSynchronize", s);
    if (e == cudaSuccess)
        wait_ticket_locked(s, s->enq);
    pthread_mutex_unlock(&G);
    return ret(e != cudaSuccess ? e : sticky);
}

cudaError_t cudaStreamQuery(cudaStream_t h)
{
    emu_init();
    pthread_mutex_lock(&G);
    struct CUstream_st *s = stream_of_locked(h, "cudaStreamQuery");
    cudaError_t e = s ? unsafe_locked("cudaStreamQuery", s) : cudaErrorInvalidResourceHandle;
    if (e == cudaSuccess && s->done < s->enq)
        e = cudaErrorNotReady;
    pthread_mutex_unlock(&G);
    return e == cudaErrorNotReady ? e : ret(e != cudaSuccess ? e : sticky);
}

cudaError_t cudaDeviceSynchronize(void)
{
    emu_init();
    cudaError_t e = unsafe_call("cudaDeviceSynchronize", NULL);
    if (e == cudaSuccess)
        e = check_no_collective("cudaDeviceSynchronize");
    if (e == cudaSuccess)
        drain_all();
    return ret(e != cudaSuccess ? e : sticky);
}

/* ------------------------------------------------------------------ events */

static struct CUevent_st *events_all[4096];
static int nevents_all;

/* With G held. */
static struct CUevent_st *event_of_locked(cudaEvent_t h, const char *call)
{
    for (int i = 0; i < nevents_all; i++)
        if (events_all[i] == h) {
            if (h->destroyed)
                break;
            return h;
        }
    pthread_mutex_unlock(&G);
    emu_violation("%s: %p is not a live event", call, (void *)h);
    pthread_mutex_lock(&G);
    return NULL;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *out, unsigned int flags)
{
    emu_init();
    if (!out)
        return ret(cudaErrorInvalidValue);
    struct CUevent_st *e = calloc(1, sizeof *e);
    if (!e)
        return ret(cudaErrorMemoryAllocation);
    e->flags = flags;
    pthread_mutex_lock(&G);
    int slot = -1;
    for (int i = 0; i < nevents_all; i++)
        if (events_all[i]->destroyed) { /* reuse a slot (the old event's memory too) */
            free(events_all[i]);
            slot = i;
            break;
        }
    if (slot < 0) {
        if (nevents_all == (int)(sizeof events_all / sizeof *events_all)) {
            pthread_mutex_unlock(&G);
            free(e);
            return ret(cudaErrorMemoryAllocation);
        }
        slot = nevents_all++;
    }
    events_all[slot] = e;
    pthread_mutex_unlock(&G);
    *out = e;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *out) { return cudaEventCreateWithFlags(out, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t h)
{
    emu_init();
    pthread_mutex_lock(&G);
    struct CUevent_st *e = event_of_locked(h, "cudaEventDestroy");
    if (e) { /* a pending record still completes; the state is the stream's ticket */
        e->destroyed = 1;
    }
    pthread_mutex_unlock(&G);
    return e ? cudaSuccess : ret(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventRecord(cudaEvent_t h, cudaStream_t sh)
{
    emu_init();
    op_t *o = calloc(1, sizeof *o);
    if (!o)
        return ret(cudaErrorMemoryAllocation);
    o->kind = OP_EVENT;
    o->call = "cudaEventRecord";
    pthread_mutex_lock(&G);
    struct CUevent_st *e = event_of_locked(h, "cudaEventRecord");
    struct CUstream_st *s = e ? stream_of_locked(sh, "cudaEventRecord") : NULL;
    if (!e || !s) {
        pthread_mutex_unlock(&G);
        free(o);
        return ret(cudaErrorInvalidResourceHandle);
    }
    if (s->cap) { /* a node of the graph: waits on it join the capture */
        if (s->cap->status != cudaStreamCaptureStatusActive) {
            pthread_mutex_unlock(&G);
            free(o);
            return ret(cudaErrorStreamCaptureInvalidated);
        }
        e->cap = s->cap;
        e->cap_index = s->cap_last;
        e->cap_stream = s;
        e->recorded = 1;
        e->s = NULL;
        free(o);
        pthread_mutex_unlock(&G);
        return cudaSuccess;
    }
    o->event = e;
    enqueue_locked(s, o);
    e->cap = NULL;
    e->recorded = 1;
    e->s = s;
    e->ticket = o->ticket;
    pthread_mutex_unlock(&G);
    return cudaSuccess;
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t h, cudaStream_t s, unsigned int flags)
{
    (void)flags;
    return cudaEventRecord(h, s);
}

/* With G held. */
static cudaError_t event_state_locked(struct CUevent_st *e)
{
    if (!e->recorded)
        return cudaSuccess;
    if (e->cap)
        return cudaErrorStreamCaptureUnsupported; /* a node, not an event to query */
    return e->s->done >= e->ticket ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventQuery(cudaEvent_t h)
{
    emu_init();
    pthread_mutex_lock(&G);
    struct CUevent_st *e = event_of_locked(h, "cudaEventQuery");
    cudaError_t r = e ? unsafe_locked("cudaEventQuery", NULL) : cudaErrorInvalidResourceHandle;
    if (r == cudaSuccess)
        r = event_state_locked(e);
    pthread_mutex_unlock(&G);
    if (r == cudaSuccess && sticky != cudaSuccess)
        r = sticky;
    return r == cudaErrorNotReady ? r : ret(r);
}

cudaError_t cudaEventSynchronize(cudaEvent_t h)
{
    emu_init();
    pthread_mutex_lock(&G);
    struct CUevent_st *e = event_of_locked(h, "cudaEventSynchronize");
    cudaError_t r = e ? unsafe_locked("cudaEventSynchronize", NULL) : cudaErrorInvalidResourceHandle;
    if (r == cudaSuccess && e->recorded) {
        if (e->cap)
            r = cudaErrorStreamCaptureUnsupported;
        else
            wait_ticket_locked(e->s, e->ticket);
    }
    pthread_mutex_unlock(&G);
    return ret(r != cudaSuccess ? r : sticky);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    emu_init();
    if (!ms)
        return ret(cudaErrorInvalidValue);
    pthread_mutex_lock(&G);
    struct CUevent_st *x = event_of_locked(a, "cudaEventElapsedTime");
    struct CUevent_st *y = x ? event_of_locked(b, "cudaEventElapsedTime") : NULL;
    cudaError_t r = cudaSuccess;
    if (!x || !y)
        r = cudaErrorInvalidResourceHandle;
    else if ((x->flags | y->flags) & cudaEventDisableTiming)
        r = cudaErrorInvalidResourceHandle;
    else if (!x->recorded || !y->recorded || x->cap || y->cap)
        r = cudaErrorInvalidResourceHandle;
    else if (event_state_locked(x) != cudaSuccess || event_state_locked(y) != cudaSuccess)
        r = cudaErrorNotReady;
    else
        *ms = (float)((y->t - x->t) * 1e3);
    pthread_mutex_unlock(&G);
    return r == cudaErrorNotReady ? r : ret(r);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t sh, cudaEvent_t h, unsigned int flags)
{
    emu_init();
    (void)flags;
    pthread_mutex_lock(&G);
    struct CUevent_st *e = event_of_locked(h, "cudaStreamWaitEvent");
    struct CUstream_st *s = e ? stream_of_locked(sh, "cudaStreamWaitEvent") : NULL;
    if (!e || !s) {
        pthread_mutex_unlock(&G);
        return ret(cudaErrorInvalidResourceHandle);
    }
    cudaError_t r = cudaSuccess;
    if (!e->recorded) {
        /* nothing to wait for */
    } else if (e->cap) {
        capture_t *c = e->cap;
        if (c->status != cudaStreamCaptureStatusActive) {
            r = cudaErrorStreamCaptureInvalidated;
        } else if (s->cap && s->cap != c) {
            r = cudaErrorStreamCaptureMerge;
        } else if (!s->cap) { /* s joins the capture (fork) */
            s->cap = c;
            s->cap_last = c->graph->nops - 1;
            s->cap_joined = -1;
        } else if (s == c->origin && e->cap_stream && e->cap_stream != s) { /* a join */
            if (e->cap_index > e->cap_stream->cap_joined)
                e->cap_stream->cap_joined = e->cap_index;
        }
        /* in the graph the order is the recording order: nothing to add */
    } else if (s->cap) {
        /* an event from outside the capture: a dependency the graph cannot
           hold; CUDA refuses it as crossing the capture's isolation */
        if (s->cap->status == cudaStreamCaptureStatusActive)
            r = cudaErrorStreamCaptureIsolation;
        s->cap->status = cudaStreamCaptureStatusInvalidated;
    } else {
        op_t *w = op_wait_new(e->s, e->ticket);
        if (!w)
            r = cudaErrorMemoryAllocation;
        else
            enqueue_locked(s, w);
    }
    pthread_mutex_unlock(&G);
    return ret(r);
}

/* ------------------------------------------------------------------ copies */

typedef struct {
    void *dst;
    const void *src;
    size_t dpitch, spitch, width, height;
    int value;
} copy_args_t;

static void do_copy2d(void *arg)
{
    copy_args_t *a = arg;
    for (size_t r = 0; r < a->height; r++)
        memmove((char *)a->dst + r * a->dpitch, (const char *)a->src + r * a->spitch, a->width);
}

static void do_set(void *arg)
{
    copy_args_t *a = arg;
    memset(a->dst, a->value, a->width);
}

/* the extent [p, p + (h-1)*pitch + w) of a 2-D region */
static size_t extent(size_t pitch, size_t w, size_t h) { return h ? (h - 1) * pitch + w : 0; }

/* Check a copy's direction against where its pointers are. */
static cudaError_t check_copy(const char *call, void *dst, size_t dn, const void *src, size_t sn,
                              enum cudaMemcpyKind kind)
{
    int kd = emu_kind_of(dst), ks = emu_kind_of(src);
    int dst_dev = 0, src_dev = 0;
    switch (kind) {
    case cudaMemcpyHostToDevice: dst_dev = 1; break;
    case cudaMemcpyDeviceToHost: src_dev = 1; break;
    case cudaMemcpyDeviceToDevice: dst_dev = src_dev = 1; break;
    case cudaMemcpyHostToHost: break;
    case cudaMemcpyDefault: dst_dev = kd == EMU_DEVICE; src_dev = ks == EMU_DEVICE; break;
    default: return emu_violation("%s: copy kind %d", call, (int)kind);
    }
    cudaError_t e = cudaSuccess;
    if (dn && dst_dev)
        e = emu_check(dst, dn, EMU_DEVICE, call, "dst");
    else if (dn && kd == EMU_DEVICE)
        e = emu_violation("%s: dst %p is device memory but the copy's kind says host", call, dst);
    if (e == cudaSuccess && dn && kd == EMU_PINNED)
        e = emu_check(dst, dn, EMU_PINNED, call, "dst");
    if (e == cudaSuccess && sn && src_dev)
        e = emu_check(src, sn, EMU_DEVICE, call, "src");
    else if (e == cudaSuccess && sn && ks == EMU_DEVICE)
        e = emu_violation("%s: src %p is device memory but the copy's kind says host", call, src);
    if (e == cudaSuccess && sn && ks == EMU_PINNED)
        e = emu_check(src, sn, EMU_PINNED, call, "src");
    return e;
}

/* Enqueue a copy on h; async: return when enqueued, with CUDA's pageable
 * rules (a pageable source is consumed before return; a pageable
 * destination is written before return). sync: on the legacy stream, wait. */
static cudaError_t copy2d(const char *call, void *dst, size_t dpitch, const void *src,
                          size_t spitch, size_t w, size_t h, enum cudaMemcpyKind kind,
                          cudaStream_t sh, int sync)
{
    emu_init();
    if (sticky != cudaSuccess)
        return ret(sticky);
    if (w > dpitch || w > spitch)
        return ret(cudaErrorInvalidPitchValue);
    size_t dn = extent(dpitch, w, h), sn = extent(spitch, w, h);
    cudaError_t e = check_copy(call, dst, dn, src, sn, kind);
    if (e != cudaSuccess)
        return ret(e);
    if (sync) {
        if ((e = unsafe_call(call, NULL)) != cudaSuccess)
            return ret(e == cudaErrorStreamCaptureUnsupported ? cudaErrorStreamCaptureImplicit : e);
    }
    if (dn == 0)
        return cudaSuccess;
    op_t *o = calloc(1, sizeof *o);
    if (!o)
        return ret(cudaErrorMemoryAllocation);
    o->kind = OP_FN;
    o->fn = do_copy2d;
    o->call = call;
    copy_args_t a = {dst, src, dpitch, spitch, w, h, 0};
    int src_pageable = emu_kind_of(src) == 0, dst_pageable = emu_kind_of(dst) == 0;
    if (src_pageable) { /* staged now: the caller may reuse its buffer at once */
        o->heap = malloc(sn);
        if (!o->heap) {
            free(o);
            return ret(cudaErrorMemoryAllocation);
        }
        memcpy(o->heap, src, sn);
        o->heap_size = sn;
        a.src = o->heap;
    }
    memcpy(o->arg, &a, sizeof a);
    pthread_mutex_lock(&G);
    struct CUstream_st *s = stream_of_locked(sync ? NULL : sh, call);
    int capturing = s && s->cap;
    pthread_mutex_unlock(&G);
    if (capturing && (src_pageable || dst_pageable)) {
        op_free(o);
        return ret(cudaErrorStreamCaptureUnsupported); /* pageable memory in a graph */
    }
    uint64_t ticket = 0;
    e = submit(sync ? NULL : sh, o);
    if (e != cudaSuccess)
        return ret(e);
    if (capturing)
        return cudaSuccess;
    if (sync || dst_pageable) {
        pthread_mutex_lock(&G);
        s = stream_of_locked(sync ? NULL : sh, call);
        ticket = s->enq;
        wait_ticket_locked(s, ticket);
        pthread_mutex_unlock(&G);
    }
    return sync ? ret(sticky) : cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t s)
{
    return copy2d("cudaMemcpyAsync", dst, n, src, n, n, n ? 1 : 0, kind, s, 0);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
    return copy2d("cudaMemcpy", dst, n, src, n, n, n ? 1 : 0, kind, NULL, 1);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t s)
{
    return copy2d("cudaMemcpy2DAsync", dst, dpitch, src, spitch, width, height, kind, s, 0);
}

static cudaError_t set(const char *call, void *p, int v, size_t n, cudaStream_t sh, int sync)
{
    emu_init();
    if (sticky != cudaSuccess)
        return ret(sticky);
    cudaError_t e = emu_check(p, n, EMU_DEVICE, call, "devPtr");
    if (e == cudaSuccess && sync)
        e = unsafe_call(call, NULL);
    if (e != cudaSuccess || n == 0)
        return ret(e);
    copy_args_t a = {p, NULL, 0, 0, n, 1, v};
    e = emu_submit_fn(sync ? NULL : sh, call, do_set, &a, sizeof a, 0);
    if (e == cudaSuccess && sync) {
        pthread_mutex_lock(&G);
        struct CUstream_st *s = stream_of_locked(NULL, call);
        wait_ticket_locked(s, s->enq);
        pthread_mutex_unlock(&G);
    }
    return ret(e);
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    return set("cudaMemsetAsync", p, v, n, s, 0);
}

cudaError_t cudaMemset(void *p, int v, size_t n) { return set("cudaMemset", p, v, n, NULL, 1); }

/* ------------------------------------------------------------------ capture, graphs */

cudaError_t cudaStreamBeginCapture(cudaStream_t h, enum cudaStreamCaptureMode mode)
{
    emu_init();
    if (h == NULL || h == cudaStreamLegacy)
        return ret(cudaErrorStreamCaptureUnsupported); /* the legacy stream cannot capture */
    capture_t *c = calloc(1, sizeof *c);
    struct CUgraph_st *g = calloc(1, sizeof *g);
    if (!c || !g) {
        free(c);
        free(g);
        return ret(cudaErrorMemoryAllocation);
    }
    pthread_mutex_lock(&G);
    struct CUstream_st *s = stream_of_locked(h, "cudaStreamBeginCapture");
    cudaError_t e = !s ? cudaErrorInvalidResourceHandle
                       : s->cap ? cudaErrorIllegalState : cudaSuccess;
    if (e == cudaSuccess) {
        c->mode = mode;
        c->status = cudaStreamCaptureStatusActive;
        c->owner = pthread_self();
        c->origin = s;
        c->graph = g;
        c->next = captures;
        captures = c;
        s->cap = c;
        s->cap_last = -1;
    }
    pthread_mutex_unlock(&G);
    if (e != cudaSuccess) {
        free(c);
        free(g);
    }
    return ret(e);
}

static void graph_free(struct CUgraph_st *g)
{
    if (!g)
        return;
    for (op_t *o = g->head, *n; o; o = n) {
        n = o->next;
        op_free(o);
    }
    free(g);
}

cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t *out)
{
    emu_init();
    if (!out)
        return ret(cudaErrorInvalidValue);
    *out = NULL;
    pthread_mutex_lock(&G);
    struct CUstream_st *s = stream_of_locked(h, "cudaStreamEndCapture");
    if (!s || !s->cap) {
        pthread_mutex_unlock(&G);
        return ret(s ? cudaErrorIllegalState : cudaErrorInvalidResourceHandle);
    }
    capture_t *c = s->cap;
    cudaError_t e = cudaSuccess;
    if (c->origin != s)
        e = cudaErrorStreamCaptureUnmatched;
    else if (c->mode != cudaStreamCaptureModeRelaxed && !pthread_equal(c->owner, pthread_self()))
        e = cudaErrorStreamCaptureWrongThread;
    if (e != cudaSuccess) {
        c->status = cudaStreamCaptureStatusInvalidated;
        pthread_mutex_unlock(&G);
        return ret(e);
    }
    if (c->status != cudaStreamCaptureStatusActive)
        e = cudaErrorStreamCaptureInvalidated;
    for (struct CUstream_st *o = streams; o; o = o->next_all) {
        if (o->cap != c)
            continue;
        if (o != s && o->cap_last > o->cap_joined && e == cudaSuccess)
            e = cudaErrorStreamCaptureUnjoined;
        o->cap = NULL;
        o->cap_last = o->cap_joined = -1;
    }
    for (int i = 0; i < nevents_all; i++) /* the graph's edges are no events to use later */
        if (events_all[i]->cap == c) {
            events_all[i]->cap = NULL;
            events_all[i]->recorded = 0;
        }
    for (capture_t **pp = &captures; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    pthread_mutex_unlock(&G);
    if (e != cudaSuccess)
        graph_free(c->graph);
    else
        *out = c->graph;
    free(c);
    return ret(e);
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    if (!mode || (unsigned)*mode > (unsigned)cudaStreamCaptureModeRelaxed)
        return ret(cudaErrorInvalidValue);
    enum cudaStreamCaptureMode old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t h, enum cudaStreamCaptureStatus *st)
{
    emu_init();
    if (!st)
        return ret(cudaErrorInvalidValue);
    pthread_mutex_lock(&G);
    struct CUstream_st *s = stream_of_locked(h, "cudaStreamIsCapturing");
    if (s)
        *st = s->cap ? s->cap->status : cudaStreamCaptureStatusNone;
    pthread_mutex_unlock(&G);
    return s ? cudaSuccess : ret(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *out, cudaGraph_t g, unsigned long long flags)
{
    emu_init();
    (void)flags;
    if (!out || !g)
        return ret(cudaErrorInvalidValue);
    struct CUgraphExec_st *x = calloc(1, sizeof *x);
    if (!x)
        return ret(cudaErrorMemoryAllocation);
    x->nops = g->nops;
    x->ops = calloc(g->nops ? g->nops : 1, sizeof *x->ops);
    if (!x->ops) {
        free(x);
        return ret(cudaErrorMemoryAllocation);
    }
    int i = 0;
    for (op_t *o = g->head; o; o = o->next, i++) {
        x->ops[i] = *o;
        x->ops[i].next = NULL;
        if (o->heap) { /* a staged source is the graph's own copy */
            x->ops[i].heap = malloc(o->heap_size);
            if (!x->ops[i].heap)
                return ret(cudaErrorMemoryAllocation);
            memcpy(x->ops[i].heap, o->heap, o->heap_size);
        }
    }
    *out = x;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t h)
{
    emu_init();
    if (!x)
        return ret(cudaErrorInvalidValue);
    if (sticky != cudaSuccess)
        return ret(sticky);
    for (int i = 0; i < x->nops; i++) {
        op_t *o = malloc(sizeof *o);
        if (!o)
            return ret(cudaErrorMemoryAllocation);
        *o = x->ops[i];
        o->heap = NULL;
        o->heap_arg = 0;
        if (x->ops[i].heap) {
            o->heap = malloc(x->ops[i].heap_size);
            if (!o->heap) {
                free(o);
                return ret(cudaErrorMemoryAllocation);
            }
            memcpy(o->heap, x->ops[i].heap, x->ops[i].heap_size);
            o->heap_arg = x->ops[i].heap_arg;
            if (o->fn == do_copy2d) { /* the staged source moved */
                copy_args_t *a = (copy_args_t *)o->arg;
                a->src = o->heap;
            }
        }
        if (o->kind == OP_EVENT)
            o->event = NULL; /* the captured record is only an edge */
        cudaError_t e = submit(h, o);
        if (e != cudaSuccess)
            return ret(e);
    }
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    graph_free(g);
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x)
{
    if (!x)
        return cudaSuccess;
    for (int i = 0; i < x->nops; i++)
        free(x->ops[i].heap);
    free(x->ops);
    free(x);
    return cudaSuccess;
}

/* ------------------------------------------------------------------ devices, errors */

cudaError_t cudaGetDeviceCount(int *n)
{
    emu_init();
    if (!n)
        return ret(cudaErrorInvalidValue);
    *n = ndevices;
    return ndevices > 0 ? cudaSuccess : ret(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int d)
{
    emu_init();
    if (d < 0 || d >= ndevices)
        return ret(cudaErrorInvalidDevice);
    cur_device = d;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
    emu_init();
    if (!d)
        return ret(cudaErrorInvalidValue);
    *d = cur_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
    emu_init();
    if (!p)
        return ret(cudaErrorInvalidValue);
    if (d < 0 || d >= ndevices)
        return ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "ddpc-emu device %d (emulated)", d);
    p->totalGlobalMem = (size_t)8 << 30;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 4;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->pciBusID = 0x10 + d;
    p->pciDomainID = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *bus, int len, int d)
{
    emu_init();
    if (!bus || len <= 0)
        return ret(cudaErrorInvalidValue);
    if (d < 0 || d >= ndevices)
        return ret(cudaErrorInvalidDevice);
    snprintf(bus, (size_t)len, "0000:%02x:00.0", 0x10 + d);
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    if (!v)
        return cudaErrorInvalidValue;
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v)
{
    if (!v)
        return cudaErrorInvalidValue;
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) { return emu_last_error(); }

cudaError_t cudaPeekAtLastError(void) { return last_error != cudaSuccess ? last_error : sticky; }

const char *cudaGetErrorName(cudaError_t e)
{
    switch (e) {
#define E(x) case x: return #x;
    E(cudaSuccess) E(cudaErrorInvalidValue) E(cudaErrorMemoryAllocation)
    E(cudaErrorInvalidDevice) E(cudaErrorInvalidResourceHandle) E(cudaErrorNotReady)
    E(cudaErrorNoDevice) E(cudaErrorIllegalAddress) E(cudaErrorInvalidPitchValue)
    E(cudaErrorIllegalState) E(cudaErrorStreamCaptureUnsupported)
    E(cudaErrorStreamCaptureInvalidated) E(cudaErrorStreamCaptureMerge)
    E(cudaErrorStreamCaptureUnmatched) E(cudaErrorStreamCaptureUnjoined)
    E(cudaErrorStreamCaptureIsolation) E(cudaErrorStreamCaptureImplicit)
    E(cudaErrorStreamCaptureWrongThread)
#undef E
    default: return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered (emulated: see the violation above)";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorStreamCaptureUnjoined: return "capture was not joined";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    default: return cudaGetErrorName(e);
    }
}
