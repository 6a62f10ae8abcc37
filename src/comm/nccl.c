/* SPDX-License-Identifier: BSD-3-Clause */
/* nccl.c: the NCCL backend of the communicator (device memory). One
 * non-blocking NCCL communicator (config.blocking = 0) per ddpc
 * communicator, its own stream, and a watchdog thread. A collective waits
 * for the caller's stream through an event, runs on the communication
 * stream, and records an end event; ddpc_work_wait makes the caller's stream
 * wait on that event, so the host never blocks in a step. The watchdog polls
 * the end events and ncclCommGetAsyncError against each operation's
 * deadline (DDPC_TIMEOUT); on expiry or an error it aborts every NCCL
 * communicator of the process (NCCL's abort is collective within a node)
 * and leaves the failure for the next call.
 * Bootstrap needs no MPI: rank 0's ncclUniqueId travels through
 * ddpc_kvs_allgather (PMIx under srun --mpi=pmix, else MPI), together with
 * every rank's GPU check, so that a rank without a GPU fails every rank
 * before NCCL could hang. Only compiled --with-nccl. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "config.h"
#include "comm_internal.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dlfcn.h>

#define MOD "comm"

/* The watchdog's period: PyTorch's ProcessGroupNCCL watchdog sleeps 100 ms. */
#define WATCH_PERIOD_S 0.02

typedef struct nccl_impl {
    struct nccl_impl *next_live; /* every live NCCL communicator of the process */
    ncclComm_t nc;
    cudaStream_t stream;
    int *scratch;                /* (1,) int32 on the device: barrier */
    struct ddpc_work *head, *tail; /* in flight, in issue order */
    comm_events_t events;        /* free events */
    pthread_t watchdog;
    pthread_cond_t wake;         /* the watchdog's sleep, and synchronize's */
    int stop, started, aborted;
    uint64_t stuck_seq;          /* the collective the watchdog found stuck */
    /* the timeline (on when the communicator was made): GPU times of the
       stream's collectives from their events, against a reference event
       whose host time is known */
    cudaEvent_t tl_ref;
    double tl_ref_host, tl_last_end;
    int tl_track;
    struct ddpc_work stuck_p2p;  /* the transfers it found stuck (kind OP_P2P), or kind 0 */
} nccl_impl_t;

/* Every NCCL communicator of this process, so that a failure aborts all. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ddpc_comm *live[64];
static int nlive;

static ncclDataType_t nccl_type(ddpc_dtype_t dt)
{
    switch (dt) {
    case DDPC_F32: return ncclFloat32;
    case DDPC_F64: return ncclFloat64;
    case DDPC_I32: return ncclInt32;
    case DDPC_I64: return ncclInt64;
    case DDPC_BF16: return ncclBfloat16;
    case DDPC_F16: return ncclFloat16;
    default: return ncclUint8;
    }
}

static ncclRedOp_t nccl_op(ddpc_redop_t op)
{
    switch (op) {
    case DDPC_AVG: return ncclAvg;
    case DDPC_MIN: return ncclMin;
    case DDPC_MAX: return ncclMax;
    default: return ncclSum;
    }
}

/* ------------------------------------------------------------------ failure */

/* With c->mu held: mark c failed (first cause wins), abort its NCCL
 * communicator, fail what is in flight. The caller logs. */
static void fail_locked(struct ddpc_comm *c, ddpc_status_t st, const char *msg)
{
    nccl_impl_t *n = c->impl;
    if (!c->failed) {
        c->failed = st;
        snprintf(c->fail_msg, sizeof c->fail_msg, "%s", msg);
        if (c->fail_seq == UINT64_MAX && n->head && n->head->kind != OP_P2P) /* the oldest: stuck */
            c->fail_seq = n->head->seq;
    }
    if (n->nc && !n->aborted) {
        n->aborted = 1;
        ncclCommAbort(n->nc); /* NCCL kernels of this communicator exit */
        n->nc = NULL;
    }
    for (struct ddpc_work *w = n->head; w; w = w->next) {
        w->done = 1;
        w->status = st;
    }
    pthread_cond_broadcast(&n->wake);
}

/* Abort every other live NCCL communicator of the process (after c failed):
 * NCCL's abort is collective among the ranks of a node, and a peer waiting in
 * another communicator would otherwise hang. */
static void abort_others(struct ddpc_comm *c, const char *why)
{
    pthread_mutex_lock(&live_mu);
    for (int i = 0; i < nlive; i++) {
        struct ddpc_comm *o = live[i];
        if (o == c)
            continue;
        pthread_mutex_lock(&o->mu);
        char m[DDPC_ERRMSG_LEN];
        snprintf(m, sizeof m, "aborted because another communicator of this process failed: %.900s",
                 why);
        fail_locked(o, DDPC_ERR_REMOTE, m);
        pthread_mutex_unlock(&o->mu);
    }
    pthread_mutex_unlock(&live_mu);
}

static void fail_and_log(struct ddpc_comm *c, ddpc_status_t st, const char *msg)
{
    pthread_mutex_lock(&c->mu);
    int first = !c->failed;
    fail_locked(c, st, msg);
    pthread_mutex_unlock(&c->mu);
    if (first) {
        ddpc_log(c->rt, DDPC_LOG_ERROR, "comm: %s", msg);
        abort_others(c, msg);
    }
}

/* Wait while NCCL reports ncclInProgress for c (non-blocking mode), up to
 * the deadline. Returns the final result; ncclInProgress on timeout. */
static ncclResult_t settle(ncclComm_t nc, ncclResult_t r, double deadline)
{
    while (r == ncclInProgress) {
        if (ddpc_now() > deadline)
            return ncclInProgress;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
        if (ncclCommGetAsyncError(nc, &r) != ncclSuccess)
            return ncclInternalError;
    }
    return r;
}

/* With c->mu held: drop one reference; the last frees the work. */
static void unref(struct ddpc_comm *c, struct ddpc_work *w)
{
    if (--w->refs > 0)
        return;
    nccl_impl_t *n = c->impl;
    comm_events_put(&n->events, w->ev_ready);
    comm_events_put(&n->events, w->ev_done);
    free(w);
}

/* With c->mu held: w joins the in-flight list that the watchdog polls. */
static void track(nccl_impl_t *n, struct ddpc_work *w)
{
    if (n->tail)
        n->tail->next = w;
    else
        n->head = w;
    n->tail = w;
}

/* ------------------------------------------------------------------ issue */

/* Operations made of sends and receives in one NCCL group (NCCL's own
 * all-to-all, gather and scatter are recent: 2.28), and the transfers of a
 * batch. A rank's own block is a copy on the communication stream. */
static ncclResult_t issue_grouped(struct ddpc_comm *c, nccl_impl_t *n, struct ddpc_work *w)
{
    ncclDataType_t t = nccl_type(w->dt);
    const size_t bytes = w->count * ddpc_dtype_size(w->dt);
    const char *snd = w->send;
    char *rcv = w->recv;
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess)
        return r;
    switch (w->kind) {
    case OP_ALLTOALL:
        for (int p = 0; p < c->size && r == ncclSuccess; p++) {
            if (p == c->rank) {
                if (bytes && cudaMemcpyAsync(rcv + (size_t)p * bytes, snd + (size_t)p * bytes,
                                             bytes, cudaMemcpyDeviceToDevice,
                                             n->stream) != cudaSuccess)
                    r = ncclUnhandledCudaError;
                continue;
            }
            r = ncclSend(snd + (size_t)p * bytes, w->count, t, p, n->nc, n->stream);
            if (r == ncclSuccess)
                r = ncclRecv(rcv + (size_t)p * bytes, w->count, t, p, n->nc, n->stream);
        }
        break;
    case OP_GATHER:
        if (c->rank != w->root) {
            r = ncclSend(snd, w->count, t, w->root, n->nc, n->stream);
            break;
        }
        for (int p = 0; p < c->size && r == ncclSuccess; p++)
            if (p != c->rank)
                r = ncclRecv(rcv + (size_t)p * bytes, w->count, t, p, n->nc, n->stream);
            else if (bytes && cudaMemcpyAsync(rcv + (size_t)p * bytes, snd, bytes,
                                              cudaMemcpyDeviceToDevice, n->stream) != cudaSuccess)
                r = ncclUnhandledCudaError;
        break;
    case OP_SCATTER:
        if (c->rank != w->root) {
            r = ncclRecv(rcv, w->count, t, w->root, n->nc, n->stream);
            break;
        }
        for (int p = 0; p < c->size && r == ncclSuccess; p++)
            if (p != c->rank)
                r = ncclSend(snd + (size_t)p * bytes, w->count, t, p, n->nc, n->stream);
            else if (bytes && cudaMemcpyAsync(rcv, snd + (size_t)p * bytes, bytes,
                                              cudaMemcpyDeviceToDevice, n->stream) != cudaSuccess)
                r = ncclUnhandledCudaError;
        break;
    default: /* OP_P2P */
        for (int i = 0; i < w->np && r == ncclSuccess; i++) {
            const ddpc_p2p_op_t *o = &w->p2p[i];
            r = o->is_send ? ncclSend(o->buf, o->count, nccl_type(o->dt), o->peer, n->nc, n->stream)
                           : ncclRecv(o->buf, o->count, nccl_type(o->dt), o->peer, n->nc,
                                      n->stream);
        }
        break;
    }
    ncclResult_t e = ncclGroupEnd(); /* always: the group must close */
    return r != ncclSuccess ? r : e;
}

static ncclResult_t issue(struct ddpc_comm *c, nccl_impl_t *n, struct ddpc_work *w)
{
    ncclDataType_t t = nccl_type(w->dt);
    switch (w->kind) {
    case OP_ALLREDUCE:
        return ncclAllReduce(w->send, w->recv, w->count, t, nccl_op(w->op), n->nc, n->stream);
    case OP_BCAST:
        return ncclBroadcast(w->recv, w->recv, w->count, t, w->root, n->nc, n->stream);
    case OP_ALLGATHER:
        return ncclAllGather(w->send, w->recv, w->count, t, n->nc, n->stream);
    case OP_REDUCE_SCATTER:
        return ncclReduceScatter(w->send, w->recv, w->count, t, nccl_op(w->op), n->nc, n->stream);
    case OP_BARRIER:
        return ncclAllReduce(n->scratch, n->scratch, 1, ncclInt32, ncclSum, n->nc, n->stream);
    case OP_REDUCE:
        return ncclReduce(w->send, w->recv, w->count, t, nccl_op(w->op), w->root, n->nc,
                          n->stream);
    case OP_ALLTOALL:
    case OP_GATHER:
    case OP_SCATTER:
    case OP_P2P:
        return issue_grouped(c, n, w);
    case OP_WATCH: /* not a collective: nccl_watch */
        break;
    }
    return ncclInvalidArgument;
}

static ddpc_status_t nccl_submit(struct ddpc_comm *c, struct ddpc_work *w)
{
    nccl_impl_t *n = c->impl;
    char what[160];
    comm_describe(w, what, sizeof what);
    if (c->failed || !n->nc)
        return ddpc_err(c->rt, c->failed ? c->failed : DDPC_ERR_STATE, MOD, "%s: %s", what,
                        c->failed ? c->fail_msg : "the NCCL communicator is gone");
    cudaEvent_t ready = comm_events_get(&n->events), done = comm_events_get(&n->events);
    w->ev_ready = ready;
    w->ev_done = done;
    /* Inside a CUDA graph capture of the caller's stream the events are the
     * graph's edges, not things to query: the collective joins the graph and
     * the watchdog watches the graph's replays instead (ddpc_comm_watch). */
    enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    cudaError_t e = ready && done ? cudaSuccess : cudaErrorMemoryAllocation;
    if (e == cudaSuccess)
        e = cudaStreamIsCapturing((cudaStream_t)c->stream, &cap);
    if (e == cudaSuccess)
        e = cudaEventRecord(ready, (cudaStream_t)c->stream);
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(n->stream, ready, 0);
    if (e != cudaSuccess) {
        comm_events_put(&n->events, ready);
        comm_events_put(&n->events, done);
        return ddpc_err(c->rt, DDPC_ERR_CUDA, MOD, "%s: ordering after the caller's stream: %s",
                        what, cudaGetErrorString(e));
    }
    ncclResult_t r = settle(n->nc, issue(c, n, w), w->deadline);
    if (r != ncclSuccess) {
        char msg[DDPC_ERRMSG_LEN];
        snprintf(msg, sizeof msg, "%s: NCCL %s: %s (%s); NCCL communicator aborted", what,
                 r == ncclInProgress ? "did not accept it in time" : "failed",
                 ncclGetErrorString(r), ncclGetLastError(n->nc));
        comm_events_put(&n->events, ready);
        comm_events_put(&n->events, done);
        if (!c->failed && w->kind != OP_P2P)
            c->fail_seq = w->seq;
        fail_locked(c, r == ncclInProgress ? DDPC_ERR_TIMEOUT : DDPC_ERR_NCCL, msg);
        return ddpc_err(c->rt, c->failed, MOD, "%s", msg);
    }
    if ((e = cudaEventRecord(done, n->stream)) != cudaSuccess) {
        char msg[DDPC_ERRMSG_LEN];
        snprintf(msg, sizeof msg, "%s: recording its end event: %s", what, cudaGetErrorString(e));
        comm_events_put(&n->events, ready);
        comm_events_put(&n->events, done);
        if (!c->failed && w->kind != OP_P2P)
            c->fail_seq = w->seq;
        fail_locked(c, DDPC_ERR_CUDA, msg);
        return ddpc_err(c->rt, DDPC_ERR_CUDA, MOD, "%s", msg);
    }
    if (cap == cudaStreamCaptureStatusActive) {
        w->refs = 1; /* the caller's handle only; wait joins the caller's stream */
        w->done = 1;
        if (w->kind != OP_P2P) {
            __atomic_add_fetch(&c->completed, 1, __ATOMIC_RELAXED); /* for the side channel */
            comm_flight_end(c, w->seq, FR_DONE);                     /* issued into the graph */
        }
        return DDPC_OK;
    }
    w->refs = 2; /* the caller's handle, the in-flight list */
    track(n, w);
    return DDPC_OK;
}

/* ------------------------------------------------------------------ watchdog */

/* The timeline: a completed operation's span on the NCCL stream, from the
 * later of its ready event (the caller's stream got there) and the end of
 * the stream's previous one, to its done event. */
static void timeline_gpu_span(nccl_impl_t *n, const struct ddpc_work *w)
{
    float a = 0, b = 0;
    if (!n->tl_ref || !ddpc_tl_on() ||
        cudaEventElapsedTime(&a, n->tl_ref, (cudaEvent_t)w->ev_ready) != cudaSuccess ||
        cudaEventElapsedTime(&b, n->tl_ref, (cudaEvent_t)w->ev_done) != cudaSuccess)
        return;
    double t0 = n->tl_ref_host + a / 1e3, t1 = n->tl_ref_host + b / 1e3;
    if (t0 < n->tl_last_end)
        t0 = n->tl_last_end;
    if (t1 < t0)
        t1 = t0;
    n->tl_last_end = t1;
    ddpc_tl_span_at(n->tl_track, w->kind == OP_P2P ? "p2p" : comm_op_names[w->kind], t0, t1, -1,
                    w->kind == OP_P2P ? -1 : (int64_t)w->seq);
}

/* With c->mu held: retire completed operations from the head; report a
 * failure through *st and msg. 1 when the list is empty. */
static int poll_locked(struct ddpc_comm *c, ddpc_status_t *st, char *msg, size_t len)
{
    nccl_impl_t *n = c->impl;
    *st = DDPC_OK;
    while (n->head) {
        struct ddpc_work *w = n->head;
        cudaError_t q = w->done ? cudaSuccess : cudaEventQuery((cudaEvent_t)w->ev_done);
        if (q == cudaErrorNotReady) {
            double now = ddpc_now();
            if (now > w->deadline) {
                char what[160];
                comm_describe(w, what, sizeof what);
                *st = DDPC_ERR_TIMEOUT;
                n->stuck_seq = w->kind == OP_P2P     ? UINT64_MAX
                               : w->kind == OP_WATCH ? c->seq
                                                     : w->seq;
                n->stuck_p2p.kind = OP_ALLREDUCE;
                if (w->kind == OP_P2P) { /* its peers, for the message */
                    n->stuck_p2p.kind = OP_P2P;
                    n->stuck_p2p.np = w->np;
                    memcpy(n->stuck_p2p.p2p, w->p2p, sizeof w->p2p);
                }
                snprintf(msg, len,
                         "%s did not complete within %gs (watchdog, %.1fs since it was issued): "
                         "%s; NCCL communicator aborted; set DDPC_TIMEOUT to wait longer", what,
                         w->deadline - w->t_enqueue, now - w->t_enqueue,
                         w->kind == OP_P2P ? "the peer has not issued the matching transfer "
                                             "(crashed, stuck, or transfers in a different order)"
                                           : "another rank has not called it (crashed, stuck, or "
                                             "issuing collectives in a different order)");
            }
            break; /* NCCL completes in order on one stream */
        }
        if (q != cudaSuccess) {
            char what[160];
            comm_describe(w, what, sizeof what);
            *st = DDPC_ERR_CUDA;
            snprintf(msg, len, "%s: its end event reports %s; NCCL communicator aborted", what,
                     cudaGetErrorString(q));
            break;
        }
        w->done = 1;
        if (w->kind != OP_WATCH && w->kind != OP_P2P) {
            __atomic_add_fetch(&c->completed, 1, __ATOMIC_RELAXED);
            comm_flight_end(c, w->seq, FR_DONE);
        }
        if (w->kind != OP_WATCH)
            timeline_gpu_span(n, w);
        n->head = w->next;
        if (!n->head)
            n->tail = NULL;
        w->next = NULL;
        unref(c, w);
    }
    if (*st == DDPC_OK && n->nc && !n->aborted) {
        ncclResult_t a = ncclSuccess;
        ncclCommGetAsyncError(n->nc, &a);
        if (a != ncclSuccess && a != ncclInProgress) {
            *st = DDPC_ERR_NCCL;
            snprintf(msg, len, "NCCL asynchronous error after collective #%llu was issued: %s "
                     "(%s); NCCL communicator aborted", (unsigned long long)c->seq - 1,
                     ncclGetErrorString(a), ncclGetLastError(n->nc));
        }
    }
    return n->head == NULL;
}

static void *watchdog_main(void *arg)
{
    struct ddpc_comm *c = arg;
    nccl_impl_t *n = c->impl;
    cudaSetDevice(c->device); /* event queries on this thread */
    /* they are legal beside a caller's capture in any mode only if this
       thread does not interact with global-mode captures (PyTorch's default
       mode: another thread's query would invalidate the caller's capture) */
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
    cudaThreadExchangeStreamCaptureMode(&mode);
    pthread_mutex_lock(&c->mu);
    double last = ddpc_now();
    while (!n->stop) {
        ddpc_status_t st;
        char msg[DDPC_ERRMSG_LEN];
        /* a stretch in which the process did not run (scontrol suspend: SIGSTOP)
           does not count toward the deadlines (comm_clock_t's rule) */
        double now = ddpc_now();
        if (now - last > WATCH_PERIOD_S + COMM_STOP_GAP_S)
            for (struct ddpc_work *w = n->head; w; w = w->next)
                w->deadline += now - last - WATCH_PERIOD_S;
        last = now;
        if (!c->failed) {
            poll_locked(c, &st, msg, sizeof msg);
            if (st) {
                pthread_mutex_unlock(&c->mu);
                if (st == DDPC_ERR_TIMEOUT) { /* who never came, or how the peers are */
                    char ex[768];
                    size_t k = strlen(msg);
                    int got = n->stuck_seq != UINT64_MAX
                                  ? ddpc_monitor_explain(c, n->stuck_seq, ex, sizeof ex)
                                  : ddpc_monitor_explain_peers(c, &n->stuck_p2p, ex, sizeof ex);
                    if (got == 0 && k + 2 < sizeof msg)
                        snprintf(msg + k, sizeof msg - k, "; %s", ex);
                }
                char fr[4200];
                ddpc_flight_dump(c->rt, msg, fr, sizeof fr);
                size_t k = strlen(msg);
                if (fr[0] && k + 2 < sizeof msg)
                    snprintf(msg + k, sizeof msg - k, "; flight recorder: %.900s", fr);
                fail_and_log(c, st, msg);
                pthread_mutex_lock(&c->mu);
            }
        }
        pthread_cond_broadcast(&n->wake); /* synchronize() re-checks */
        struct timespec ts;
        comm_deadline(&ts, WATCH_PERIOD_S);
        pthread_cond_timedwait(&n->wake, &c->mu, &ts);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ------------------------------------------------------------------ calls */

static ddpc_status_t nccl_test(struct ddpc_work *w, int *done)
{
    struct ddpc_comm *c = w->comm;
    pthread_mutex_lock(&c->mu);
    int d = w->done || cudaEventQuery((cudaEvent_t)w->ev_done) == cudaSuccess;
    ddpc_status_t st = w->done ? w->status : c->failed;
    pthread_mutex_unlock(&c->mu);
    *done = d || st != DDPC_OK;
    return st;
}

static ddpc_status_t nccl_wait(struct ddpc_work *w, double timeout_s)
{
    struct ddpc_comm *c = w->comm;
    pthread_mutex_lock(&c->mu);
    double dl = ddpc_now() + timeout_s;
    if (dl < w->deadline)
        w->deadline = dl;
    ddpc_status_t st = w->done ? w->status : c->failed;
    cudaError_t e = cudaSuccess;
    if (st == DDPC_OK)
        e = cudaStreamWaitEvent((cudaStream_t)c->stream, (cudaEvent_t)w->ev_done, 0);
    char what[160];
    comm_describe(w, what, sizeof what);
    char msg[DDPC_ERRMSG_LEN];
    snprintf(msg, sizeof msg, "%s", c->fail_msg);
    unref(c, w);
    pthread_mutex_unlock(&c->mu);
    if (st)
        return ddpc_err(c->rt, st, MOD, "%s", msg);
    if (e != cudaSuccess)
        return ddpc_err(c->rt, DDPC_ERR_CUDA, MOD, "%s: making the caller's stream wait: %s",
                        what, cudaGetErrorString(e));
    return DDPC_OK;
}

static ddpc_status_t nccl_synchronize(struct ddpc_comm *c, double timeout_s)
{
    nccl_impl_t *n = c->impl;
    const double dl = ddpc_now() + timeout_s;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        ddpc_status_t st;
        char msg[DDPC_ERRMSG_LEN];
        int empty = c->failed ? 1 : poll_locked(c, &st, msg, sizeof msg);
        if (!c->failed && st) {
            pthread_mutex_unlock(&c->mu);
            fail_and_log(c, st, msg);
            return ddpc_err(c->rt, st, MOD, "%s", msg);
        }
        if (empty || c->failed)
            break;
        if (ddpc_now() > dl) {
            struct ddpc_work *w = n->head;
            char what[160];
            comm_describe(w, what, sizeof what);
            pthread_mutex_unlock(&c->mu);
            return ddpc_err(c->rt, DDPC_ERR_TIMEOUT, MOD,
                            "synchronize: %s still running after %gs", what, timeout_s);
        }
        struct timespec ts;
        comm_deadline(&ts, 0.0002); /* finer than the watchdog: the caller waits */
        pthread_cond_timedwait(&n->wake, &c->mu, &ts);
    }
    pthread_mutex_unlock(&c->mu);
    return DDPC_OK;
}

static void nccl_abort(struct ddpc_comm *c)
{
    fail_and_log(c, DDPC_ERR_REMOTE, "aborted by ddpc_abort");
}

static void nccl_destroy(struct ddpc_comm *c)
{
    nccl_impl_t *n = c->impl;
    if (!n)
        return;
    pthread_mutex_lock(&live_mu);
    for (int i = 0; i < nlive; i++)
        if (live[i] == c) {
            live[i] = live[--nlive];
            break;
        }
    pthread_mutex_unlock(&live_mu);
    if (n->started) {
        pthread_mutex_lock(&c->mu);
        n->stop = 1;
        pthread_cond_broadcast(&n->wake);
        pthread_mutex_unlock(&c->mu);
        pthread_join(n->watchdog, NULL);
    }
    pthread_mutex_lock(&c->mu);
    if (n->nc) {
        /* a healthy communicator: finalize (flushes), then destroy */
        ncclResult_t r = ncclCommFinalize(n->nc);
        r = settle(n->nc, r, ddpc_now() + c->rt->cfg.timeout_s);
        if (r == ncclSuccess)
            ncclCommDestroy(n->nc);
        else
            ncclCommAbort(n->nc);
        n->nc = NULL;
    }
    while (n->head) { /* aborted with work in flight: the handles the watchdog held */
        struct ddpc_work *w = n->head;
        n->head = w->next;
        unref(c, w);
    }
    pthread_mutex_unlock(&c->mu);
    if (n->scratch)
        cudaFree(n->scratch);
    if (n->stream)
        cudaStreamDestroy(n->stream);
    comm_events_free(&n->events);
    if (n->tl_ref)
        cudaEventDestroy(n->tl_ref);
    pthread_cond_destroy(&n->wake);
    free(n);
    c->impl = NULL;
}

/* OP_WATCH: an end event on the caller's stream joins the in-flight list, so
 * that the watchdog holds the work queued there (a CUDA graph replay with
 * its collectives) to the same deadline as a collective. */
static ddpc_status_t nccl_watch(struct ddpc_comm *c, struct ddpc_work *w)
{
    nccl_impl_t *n = c->impl;
    if (c->failed || !n->nc)
        return ddpc_err(c->rt, c->failed ? c->failed : DDPC_ERR_STATE, MOD, "%s: %s", w->label,
                        c->failed ? c->fail_msg : "the NCCL communicator is gone");
    cudaEvent_t done = comm_events_get(&n->events);
    cudaError_t e = done ? cudaEventRecord(done, (cudaStream_t)c->stream)
                         : cudaErrorMemoryAllocation;
    if (e != cudaSuccess) {
        comm_events_put(&n->events, done);
        return ddpc_err(c->rt, DDPC_ERR_CUDA, MOD, "%s: recording its end event: %s", w->label,
                        cudaGetErrorString(e));
    }
    w->ev_done = done;
    w->refs = 1; /* the in-flight list only */
    track(n, w);
    return DDPC_OK;
}

static const comm_ops_t nccl_ops = {nccl_submit, nccl_test, nccl_wait,        nccl_synchronize,
                                    nccl_abort,  nccl_destroy, nccl_watch};

/* ------------------------------------------------------------------ bootstrap */

_Static_assert(sizeof(ncclUniqueId) == sizeof(((comm_nccl_boot_t *)0)->id),
               "ncclUniqueId is 128 bytes");

/* This rank's entry of the bootstrap table: its GPU, and the unique id when
 * it leads (rank 0 of the new communicator). */
void comm_nccl_boot_local(struct ddpc_comm *c, int leader, comm_nccl_boot_t *me)
{
    ddpc_t rt = c->rt;
    memset(me, 0, sizeof *me);
    snprintf(me->host, sizeof me->host, "%s", ddpc_world(rt)->host);
    me->ok = 1;
    if (c->device == DDPC_DEVICE_AUTO) {
        if (ddpc_device_select(rt, &c->device) != DDPC_OK) {
            me->ok = 0; /* its prefix goes when the verdict chains it (ddpc_err) */
            snprintf(me->why, sizeof me->why, "%s", ddpc_last_error(rt));
        }
    } else {
        cudaError_t e = cudaSetDevice(c->device);
        if (e != cudaSuccess) {
            me->ok = 0;
            snprintf(me->why, sizeof me->why, "no usable GPU: cudaSetDevice(%d): %s", c->device,
                     cudaGetErrorString(e));
        }
    }
    me->device = c->device;
    if (me->ok && cudaDeviceGetPCIBusId(me->bus, sizeof me->bus, c->device) != cudaSuccess)
        snprintf(me->bus, sizeof me->bus, "device %d", c->device);
    if (leader) {
        ncclUniqueId id;
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess && me->ok) {
            me->ok = 0;
            snprintf(me->why, sizeof me->why, "ncclGetUniqueId failed: %s", ncclGetErrorString(r));
        }
        memcpy(me->id, &id, sizeof id);
    }
}

/* The same verdict on every rank of c from the same table (rank r's entry
 * at all[r]): a rank without its GPU, or two ranks on one GPU, fail all. */
static ddpc_status_t boot_verdict(struct ddpc_comm *c, const comm_nccl_boot_t *all)
{
    ddpc_t rt = c->rt;
    const comm_nccl_boot_t *me = &all[c->rank];
    char bad[512] = "";
    int nbad = 0, dup_a = -1, dup_b = -1;
    for (int r = 0; r < c->size; r++) {
        if (!all[r].ok) {
            size_t k = strlen(bad);
            if (nbad < 8 && k < sizeof bad)
                snprintf(bad + k, sizeof bad - k, "%s%d (%s)", nbad ? ", " : "", r, all[r].host);
            nbad++;
        }
        for (int q = 0; q < r && dup_a < 0; q++)
            if (all[r].ok && all[q].ok && !strcmp(all[r].host, all[q].host) &&
                !strcmp(all[r].bus, all[q].bus))
                dup_a = q, dup_b = r;
    }
    if (nbad)
        return ddpc_err(rt, DDPC_ERR_CUDA, MOD,
                        "backend nccl: no usable GPU on %d of %d rank(s): %s%s; %s%s", nbad,
                        c->size, bad, nbad > 8 ? " ..." : "",
                        me->ok ? "see their messages" : "here: ", me->ok ? "" : me->why);
    const char *shared = getenv("DDPC_NCCL_ALLOW_SHARED_GPU");
    if (dup_a >= 0 && !(shared && !strcmp(shared, "1")))
        return ddpc_err(rt, DDPC_ERR_UNSUPPORTED, MOD,
                        "backend nccl: ranks %d and %d on %s share GPU %s; NCCL needs one GPU per "
                        "rank (srun --gpus-per-node=<ranks per node>), or use DDPC_BACKEND=mpi, "
                        "which stages through host memory and allows sharing",
                        dup_a, dup_b, all[dup_a].host, all[dup_a].bus);
    return DDPC_OK;
}

/* The backend's state and everything the steps need, before the first
 * collective: NCCL kernels spin while waiting for peers, and a cudaMalloc
 * then can deadlock. */
static ddpc_status_t impl_make(struct ddpc_comm *c)
{
    nccl_impl_t *n = calloc(1, sizeof *n);
    if (!n)
        return ddpc_err(c->rt, DDPC_ERR_NOMEM, MOD, "cannot allocate the NCCL backend");
    pthread_cond_init(&n->wake, NULL);
    c->impl = n;
    c->ops = &nccl_ops;
    cudaError_t e = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&n->scratch, sizeof(int));
    n->events.timing = ddpc_tl_on();
    if (e == cudaSuccess)
        e = (cudaError_t)comm_events_fill(&n->events, 64);
    if (e == cudaSuccess && n->events.timing) {
        if ((e = cudaEventCreate(&n->tl_ref)) == cudaSuccess &&
            (e = cudaEventRecord(n->tl_ref, n->stream)) == cudaSuccess &&
            (e = cudaEventSynchronize(n->tl_ref)) == cudaSuccess) {
            char name[48];
            snprintf(name, sizeof name, "GPU %d nccl stream", c->device);
            n->tl_ref_host = ddpc_now();
            n->tl_track = ddpc_tl_new_track(name);
        }
    }
    if (e != cudaSuccess)
        return ddpc_err(c->rt, DDPC_ERR_CUDA, MOD, "backend nccl on GPU %d: stream, scratch and "
                        "events: %s", c->device, cudaGetErrorString(e));
    return DDPC_OK;
}

/* The watchdog, and the list of live communicators that a failure aborts. */
static ddpc_status_t go_live(struct ddpc_comm *c)
{
    nccl_impl_t *n = c->impl;
    if (pthread_create(&n->watchdog, NULL, watchdog_main, c) != 0)
        return ddpc_err(c->rt, DDPC_ERR_INTERNAL, MOD, "cannot start the NCCL watchdog thread");
    n->started = 1;
    pthread_mutex_lock(&live_mu);
    if (nlive < (int)(sizeof live / sizeof *live))
        live[nlive++] = c;
    pthread_mutex_unlock(&live_mu);
    return DDPC_OK;
}

/* A failed init or split: what NCCL says, and the communicator released. */
static ddpc_status_t init_failed(struct ddpc_comm *c, ncclResult_t r, const char *call)
{
    nccl_impl_t *n = c->impl;
    const char *last = ncclGetLastError(n->nc); /* NULL is allowed: the last error */
    if (n->nc)
        ncclCommAbort(n->nc);
    n->nc = NULL;
    return ddpc_err(c->rt, r == ncclInProgress ? DDPC_ERR_TIMEOUT : DDPC_ERR_NCCL, MOD,
                    "%s (rank %d of %d, GPU %d): %s%s%s", call, c->rank, c->size, c->device,
                    r == ncclInProgress ? "not done within DDPC_TIMEOUT (a rank did not join)"
                                        : ncclGetErrorString(r),
                    *last ? ": " : "", last);
}

ddpc_status_t comm_nccl_create_from(struct ddpc_comm *c, const comm_nccl_boot_t *all)
{
    ddpc_status_t st = boot_verdict(c, all);
    if (st == DDPC_OK)
        st = impl_make(c);
    if (st)
        return st;
    nccl_impl_t *n = c->impl;
    ncclUniqueId id;
    memcpy(&id, all[0].id, sizeof id);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    const double dl = ddpc_now() + c->rt->cfg.timeout_s;
    ncclResult_t r = ncclCommInitRankConfig(&n->nc, c->size, id, c->rank, &cfg);
    if (n->nc)
        r = settle(n->nc, r, dl);
    if (r != ncclSuccess)
        return init_failed(c, r, "ncclCommInitRankConfig");
    return go_live(c);
}

ddpc_status_t comm_nccl_create(struct ddpc_comm *c)
{
    ddpc_t rt = c->rt;
    int ver = 0;
    ncclGetVersion(&ver);
    ddpc_log(rt, DDPC_LOG_INFO, "comm: NCCL %d.%d.%d at run time, built against %s", ver / 10000,
             ver / 100 % 100, ver % 100, DDPC_NCCL_VERSION);
    comm_nccl_boot_t me;
    comm_nccl_boot_local(c, c->rank == 0, &me);
    comm_nccl_boot_t *all = malloc((size_t)c->size * sizeof *all);
    if (!all)
        return ddpc_err(rt, DDPC_ERR_NOMEM, MOD, "cannot allocate the NCCL bootstrap table");
    ddpc_status_t st = ddpc_kvs_allgather(rt, &me, all, sizeof me);
    if (st) {
        free(all);
        return ddpc_err(rt, st, MOD, "nccl bootstrap: exchanging the unique id: %s",
                        ddpc_last_error(rt));
    }
    st = comm_nccl_create_from(c, all);
    free(all);
    return st;
}

/* ncclCommSplit (NCCL >= 2.18), looked up at run time so that ddpc still
 * loads with an older NCCL; DDPC_NCCL_SPLIT=0 turns it off (then the unique
 * id of each new communicator travels through the parent). */
typedef ncclResult_t (*split_fn)(ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *);

static split_fn split_call(void)
{
    const char *v = getenv("DDPC_NCCL_SPLIT");
    if (v && !strcmp(v, "0"))
        return NULL;
    int ver = 0;
    if (ncclGetVersion(&ver) != ncclSuccess || ver < 21800)
        return NULL;
    return (split_fn)dlsym(RTLD_DEFAULT, "ncclCommSplit");
}

int comm_nccl_can_split(void) { return split_call() != NULL; }

ddpc_status_t comm_nccl_split(struct ddpc_comm *parent, struct ddpc_comm *c, int color, int key)
{
    nccl_impl_t *pn = parent->impl;
    split_fn f = split_call();
    ddpc_status_t st = DDPC_OK;
    if (c) {
        c->device = parent->device; /* NCCL splits keep the parent's GPU */
        st = impl_make(c);
    }
    if (!pn || !pn->nc || !f)
        return st ? st : ddpc_err(parent->rt, DDPC_ERR_STATE, MOD,
                                  "split: the parent's NCCL communicator is gone");
    /* the parent's lock: its watchdog polls the parent's NCCL communicator */
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t out = NULL;
    const double dl = ddpc_now() + parent->rt->cfg.timeout_s;
    pthread_mutex_lock(&parent->mu);
    ncclResult_t r = f(pn->nc, c && st == DDPC_OK ? color : NCCL_SPLIT_NOCOLOR, key, &out, &cfg);
    r = settle(pn->nc, r, dl);
    if (r == ncclSuccess && out)
        r = settle(out, ncclInProgress, dl);
    pthread_mutex_unlock(&parent->mu);
    if (!c || st)
        return st;
    nccl_impl_t *n = c->impl;
    n->nc = out;
    if (r != ncclSuccess)
        return init_failed(c, r, "ncclCommSplit");
    if (!out)
        return ddpc_err(c->rt, DDPC_ERR_NCCL, MOD, "ncclCommSplit gave no communicator");
    return go_live(c);
}
