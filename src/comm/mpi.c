/* SPDX-License-Identifier: BSD-3-Clause */
/* mpi.c: the MPI backends of the communicator. Every collective, blocking or
 * not, is queued to one progress thread per communicator that issues it on a
 * private MPI communicator, so the order is the call order on every rank and
 * the caller's thread (the backward pass) keeps computing. Waits time out
 * with a message naming the operation.
 * Backend "mpi" works on host memory. Backend "mpi-staged" works on device
 * memory: the progress thread waits for the caller's stream (an event
 * recorded at submit), copies each piece into a pinned host buffer, reduces
 * it with MPI and copies it back; several ranks may share one GPU this way,
 * and sites without NCCL can still train on GPUs. Not here: NCCL (nccl.c).
 * Host memory from ddpc_comm_mem_alloc on a communicator whose ranks share
 * one node lies in an MPI-3 shared window, and an in-place float all-reduce
 * of it is made there by the ranks themselves (shm_allreduce), without MPI's
 * copies. */
#define _GNU_SOURCE /* pthread_timedjoin_np */
#include "config.h"
#include "comm_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef DDPC_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#define MOD "comm"

/* MPI_Comm_create_group's tag: a rank makes one communicator at a time */
#define GROUP_TAG 0x6464

typedef struct {
    MPI_Comm mpi;
    pthread_t thread;
    pthread_cond_t has_work, work_done;
    struct ddpc_work *head, *tail;
    int stop, thread_started;
    int abandon;        /* destroy gave up on a collective that never completed */
    uint64_t queued;    /* operations submitted (collectives and transfers) */
    uint64_t completed; /* operations finished, in queue order */
    uint64_t coll_done; /* collectives among them (the side channel's count) */
    int sync_waiters;   /* threads in ddpc_comm_synchronize */
    int waiters;        /* threads in a wait or synchronize: the caller is idle */
    int progress;       /* DDPC_PROGRESS: PROGRESS_AUTO, _SPIN or _BLOCKING */
    pthread_cond_t poke; /* a new waiter ends the progress thread's nap */
    MPI_Op half_sum[2]; /* bf16, f16 sum as user ops */
    int staged;
    MPI_Comm node;      /* the ranks again, where they all share one node; else NULL */
    int shm;            /* DDPC_SHM_ALLREDUCE: SHM_AUTO or SHM_OFF */
    struct shm_seg *segs; /* shared windows made on node, newest first */
    int nsegs;
#ifdef DDPC_HAVE_CUDA
    void *stage;        /* pinned host buffer of STAGE_BYTES */
    cudaStream_t stream; /* the staging copies */
    comm_events_t events; /* free events (under the communicator's mutex) */
#endif
} mpi_impl_t;

static MPI_Datatype mpi_type(ddpc_dtype_t dt)
{
    switch (dt) {
    case DDPC_F32: return MPI_FLOAT;
    case DDPC_F64: return MPI_DOUBLE;
    case DDPC_I32: return MPI_INT32_T;
    case DDPC_I64: return MPI_INT64_T;
    case DDPC_BF16:
    case DDPC_F16: return MPI_UINT16_T;
    case DDPC_U8: return MPI_UINT8_T;
    default: return MPI_DATATYPE_NULL;
    }
}

static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = ddpc_f32_to_bf16(ddpc_bf16_to_f32(a[i]) + ddpc_bf16_to_f32(b[i]));
}

static void f16_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = ddpc_f32_to_f16(ddpc_f16_to_f32(a[i]) + ddpc_f16_to_f32(b[i]));
}

static MPI_Op mpi_op(const mpi_impl_t *m, ddpc_dtype_t dt, ddpc_redop_t op)
{
    if (dt == DDPC_BF16 || dt == DDPC_F16)
        return m->half_sum[dt == DDPC_F16];
    switch (op) {
    case DDPC_SUM:
    case DDPC_AVG: return MPI_SUM;
    case DDPC_MIN: return MPI_MIN;
    case DDPC_MAX: return MPI_MAX;
    default: return MPI_OP_NULL;
    }
}

/* ------------------------------------------------------------------ waiting for MPI */

/* How the progress thread waits for an operation in flight (DDPC_PROGRESS).
 * MPI moves a collective only inside MPI calls, and MPICH's blocking calls
 * poll without pause. Where no core is spare (the ranks fill the node, the
 * usual CPU training job), a polling thread takes half the core from the
 * backward pass it shares the core with, most of it while it waits for
 * another rank to arrive; overlap then made steps slower than none
 * (doc/ddp.md). So by default (auto) an operation that starts while the
 * caller computes runs as MPI's non-blocking form, and the thread tests it
 * without pause for SPIN_FIRST_S (a small operation whose ranks are all in
 * ends within it, and the caller often arrives), then naps between tests,
 * from NAP_MIN doubling to NAP_MAX, until a caller
 * waits for this communicator (its thread sleeps then, and the core is
 * free): the waiter ends the nap and the thread tests without pause.
 * spin: tests without pause (a core spare per rank: GPU jobs, or fewer
 * ranks than cores); blocking: MPI's blocking calls, as before. */
enum { PROGRESS_AUTO, PROGRESS_SPIN, PROGRESS_BLOCKING };
static const char *const progress_names[] = {"auto", "spin", "blocking", NULL};
#define SPIN_FIRST_S 50e-6 /* small operations complete in this, once every rank is in */
#define NAP_MIN_NS 10000L  /* 10 us */
#define NAP_MAX_NS 500000L /* 0.5 ms */

/* One pause of a progress loop that waits for other ranks: none while it
 * spins (DDPC_PROGRESS=spin, a caller waiting, the first SPIN_FIRST_S), else
 * a nap, from NAP_MIN doubling to NAP_MAX, that a new waiter ends. */
static void progress_pause(struct ddpc_comm *c, mpi_impl_t *m, long *nap, double spin_until)
{
    if (m->progress == PROGRESS_SPIN || __atomic_load_n(&m->waiters, __ATOMIC_ACQUIRE) ||
        (*nap == 0 && ddpc_now() < spin_until))
        return;
    *nap = *nap ? (*nap * 2 < NAP_MAX_NS ? *nap * 2 : NAP_MAX_NS) : NAP_MIN_NS;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += *nap;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&c->mu);
    if (!__atomic_load_n(&m->waiters, __ATOMIC_ACQUIRE))
        pthread_cond_timedwait(&m->poke, &c->mu, &until);
    pthread_mutex_unlock(&c->mu);
}

static int poll_requests(struct ddpc_comm *c, mpi_impl_t *m, MPI_Request *req, int nreq)
{
    long nap = 0;
    const double spin_until = ddpc_now() + SPIN_FIRST_S;
    for (;;) {
        int flag = 0;
        MPI_Status sts[DDPC_P2P_BATCH_MAX]; /* not MPI_STATUSES_IGNORE: gcc 12 warns on it */
        int rc = MPI_Testall(nreq, req, &flag, sts);
        if (rc != MPI_SUCCESS || flag)
            return rc;
        if (__atomic_load_n(&m->abandon, __ATOMIC_ACQUIRE))
            return MPI_ERR_PENDING; /* left in flight: see mpi_destroy */
        progress_pause(c, m, &nap, spin_until);
    }
}

/* The blocking call, or its non-blocking form and the wait above. The
 * choice is the same on every rank (DDPC_PROGRESS must be, and so must the
 * engine's hint, w->blocking): MPI does not match a blocking collective with
 * a non-blocking one. */
#define MPI_RUN(call, icall, ...)                                                                  \
    (m->progress == PROGRESS_BLOCKING || w->blocking                                               \
         ? call(__VA_ARGS__)                                                                       \
         : mpi_finish(c, m, icall(__VA_ARGS__, &req), &req))

static int mpi_finish(struct ddpc_comm *c, mpi_impl_t *m, int rc, MPI_Request *req)
{
    return rc == MPI_SUCCESS ? poll_requests(c, m, req, 1) : rc;
}

/* A reduce is always the non-blocking call and its wait, on every rank:
 * MPICH 4.0's blocking MPI_Reduce with MPI_IN_PLACE at the root segfaults
 * (Debian 12's 4.0.2, shared memory, 1000 floats at 2 ranks: reproduced
 * outside ddpc), and its MPI_Ireduce does not. */
#define MPI_RUN_NB(icall, ...)                                                                     \
    (m->progress == PROGRESS_BLOCKING ? mpi_wait_one(icall(__VA_ARGS__, &req), &req)              \
                                      : mpi_finish(c, m, icall(__VA_ARGS__, &req), &req))

static int mpi_wait_one(int rc, MPI_Request *req)
{
    return rc == MPI_SUCCESS ? MPI_Wait(req, MPI_STATUS_IGNORE) : rc;
}

/* ------------------------------------------------------------------ host memory */

/* Point-to-point transfers are tagged apart from anything else on the
 * communicator; MPI keeps collectives apart already. */
#define P2P_TAG 0x7032

/* A batch: every transfer posted, then all waited for. Host memory, or
 * (bufs set) the staging slots that stand for each transfer's piece. */
static int post_p2p(mpi_impl_t *m, const ddpc_p2p_op_t *o, void *buf, size_t count,
                    MPI_Request *rq)
{
    MPI_Datatype t = mpi_type(o->dt);
    return o->is_send ? MPI_Isend(buf, (int)count, t, o->peer, P2P_TAG, m->mpi, rq)
                      : MPI_Irecv(buf, (int)count, t, o->peer, P2P_TAG, m->mpi, rq);
}

static int finish_p2p(struct ddpc_comm *c, mpi_impl_t *m, MPI_Request *rq, int n)
{
    MPI_Status sts[DDPC_P2P_BATCH_MAX];
    if (m->progress == PROGRESS_BLOCKING)
        return MPI_Waitall(n, rq, sts);
    return poll_requests(c, m, rq, n);
}

static int run_p2p(struct ddpc_comm *c, mpi_impl_t *m, struct ddpc_work *w)
{
    MPI_Request rq[DDPC_P2P_BATCH_MAX];
    int k = 0, rc = MPI_SUCCESS;
    for (int i = 0; i < w->np && rc == MPI_SUCCESS; i++) {
        rc = post_p2p(m, &w->p2p[i], w->p2p[i].buf, w->p2p[i].count, &rq[k]);
        k += rc == MPI_SUCCESS;
    }
    int rc2 = k ? finish_p2p(c, m, rq, k) : MPI_SUCCESS;
    return rc != MPI_SUCCESS ? rc : rc2;
}

/* MPI counts are int: large operations go in pieces of at most 1 Gi elements. */
#define CHUNK ((size_t)1 << 30)

/* All-reduces go in pieces of at most 4 MiB: MPICH 4.0.2 all-reduces 64 MiB
 * in one call at about half the speed of the same bytes in 1-4 MiB calls
 * (shared memory and TCP alike), and AVG's /N pass then finds each piece
 * still in cache instead of streaming the whole buffer from memory again
 * (bench/ddp_bench allreduce; doc/ddp.md, Performance). Pieces are the same
 * on every rank, so results stay identical across ranks. */
#define PIECE_BYTES ((size_t)4 << 20)

/* ------------------------------------------------------------------ shared memory */

/* Where every rank of the communicator is on one node, host memory from
 * ddpc_comm_mem_alloc (the DDP engine's gradient arena) lies in an MPI-3
 * shared window (MPI_Win_allocate_shared on the node's communicator), which
 * every rank maps. An in-place float all-reduce (sum or average) of it is
 * then made by the ranks themselves, on their progress threads: all arrive,
 * each reduces its slice of the buffer across every rank's copy, in rank
 * order, and writes the result into every copy; all arrive again. Each
 * element is read N times and written N times in all, by one rank, where
 * MPI's shared-memory all-reduce copies every piece through its own
 * buffers (bench/ddp_bench allreduce; doc/ddp.md, Performance). Every rank
 * ends with the same bits; the sum's order is rank order (MPI's may differ
 * from 3 ranks on: the results can differ from the MPI path's in the last
 * bit, never between ranks).
 * The arrivals are counters, one cache line per rank after its copy,
 * stored with release and read with acquire (C11 atomics; the window's
 * memory model must be MPI_WIN_UNIFIED, checked). A rank that never arrives
 * leaves the others in the wait until the caller's wait times out and names
 * the operation, as in MPI. DDPC_SHM_ALLREDUCE=0 turns it off (the same on
 * every rank: the allocation agrees). Windows stay with the communicator
 * until it is destroyed (MPI_Win_free is collective, and destroying an
 * engine is not); a freed one is reused by the next allocation that fits,
 * when every rank agrees which. */
enum { SHM_AUTO, SHM_OFF, SHM_ON };
static const char *const shm_names[] = {"auto", "0", "1", NULL};

#define SHM_SLICE_ALIGN 16   /* floats: a slice starts on a cache line */
#define SHM_CHUNK 8192       /* floats: N copies of a chunk stay in L2 */

typedef struct shm_seg {
    struct shm_seg *next;
    MPI_Win win;
    size_t bytes;            /* each rank's copy (a multiple of 64) */
    char **base;             /* (size,) each rank's copy, mapped here */
    uint64_t **arrived;      /* (size,) each rank's arrival counter */
    uint64_t seq;            /* arrivals so far (the progress thread's) */
    int id;                  /* its place in allocation order: the same on every rank */
    int in_use;
} shm_seg_t;

/* Collective over the communicator's ranks (the caller's thread, in the
 * same order everywhere). *out NULL: no shared memory here (the caller
 * allocates its own), else a zeroed copy of bytes in a shared window. */
ddpc_status_t comm_mpi_mem_alloc(struct ddpc_comm *c, size_t bytes, void **out)
{
    mpi_impl_t *m = c->impl;
    *out = NULL;
    if (m->staged || m->node == MPI_COMM_NULL)
        return DDPC_OK; /* the verdict of comm_mpi_create, the same on every rank */
    bytes = (bytes ? bytes : 1);
    bytes = (bytes + 63) / 64 * 64;
    pthread_mutex_lock(&c->mu);
    int cand = -1;
    for (shm_seg_t *s = m->segs; s; s = s->next)
        if (!s->in_use && s->bytes >= bytes && (cand < 0 || s->id < cand))
            cand = s->id;
    pthread_mutex_unlock(&c->mu);
    /* agree: on, the same size, the same free window (or none) */
    long v[5] = {m->shm != SHM_OFF, cand, -(long)cand, (long)bytes, -(long)bytes};
    int rc = MPI_Allreduce(MPI_IN_PLACE, v, 5, MPI_LONG, MPI_MIN, m->node);
    if (rc != MPI_SUCCESS)
        return ddpc_mpi_err(c->rt, rc, MOD, "shared memory: MPI_Allreduce");
    if (!v[0])
        return DDPC_OK;
    if (v[3] != -v[4])
        return ddpc_err(c->rt, DDPC_ERR_MISMATCH, MOD,
                        "shared memory: the ranks ask for different sizes (%ld to %ld bytes)",
                        v[3], -v[4]);
    if (v[1] >= 0 && v[1] == -v[2]) {
        pthread_mutex_lock(&c->mu);
        for (shm_seg_t *s = m->segs; s; s = s->next)
            if (s->id == v[1]) {
                s->in_use = 1;
                memset(s->base[c->rank], 0, s->bytes);
                *out = s->base[c->rank];
            }
        pthread_mutex_unlock(&c->mu);
        return MPI_Barrier(m->node) == MPI_SUCCESS ? DDPC_OK /* every copy zeroed */
                   : ddpc_err(c->rt, DDPC_ERR_MPI, MOD, "shared memory: MPI_Barrier");
    }
    shm_seg_t *s = calloc(1, sizeof *s);
    if (s) {
        s->base = calloc((size_t)c->size, sizeof *s->base);
        s->arrived = calloc((size_t)c->size, sizeof *s->arrived);
    }
    if (!s || !s->base || !s->arrived) {
        if (s) {
            free(s->base);
            free(s->arrived);
        }
        free(s);
        return ddpc_err(c->rt, DDPC_ERR_NOMEM, MOD, "shared memory: out of memory");
    }
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true"); /* each copy near its rank */
    char *mine = NULL;
    /* 64 bytes to align the copy (Open MPI's are 8-byte aligned), 64 for the counter */
    rc = MPI_Win_allocate_shared((MPI_Aint)(bytes + 128), 1, info, m->node, &mine, &s->win);
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS) {
        free(s->base);
        free(s->arrived);
        free(s);
        return ddpc_mpi_err(c->rt, rc, MOD, "shared memory: MPI_Win_allocate_shared");
    }
    int *model = NULL, flag = 0, ok = 1;
    MPI_Win_get_attr(s->win, MPI_WIN_MODEL, &model, &flag);
    ok = flag && *model == MPI_WIN_UNIFIED;
    for (int r = 0; r < c->size && ok; r++) {
        MPI_Aint sz;
        int du;
        void *p;
        ok = MPI_Win_shared_query(s->win, r, &sz, &du, &p) == MPI_SUCCESS &&
             (size_t)sz >= bytes + 128;
        s->base[r] = (char *)(((uintptr_t)p + 63) & ~(uintptr_t)63);
        s->arrived[r] = (uint64_t *)(s->base[r] + bytes);
    }
    /* the same verdict on every rank, or none uses the window */
    int all = ok;
    rc = MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, m->node);
    if (rc != MPI_SUCCESS || !all) {
        MPI_Win_free(&s->win);
        free(s->base);
        free(s->arrived);
        free(s);
        if (rc != MPI_SUCCESS)
            return ddpc_mpi_err(c->rt, rc, MOD, "shared memory: MPI_Allreduce");
        ddpc_log(c->rt, DDPC_LOG_WARN, "comm: shared memory: a window is not in the unified "
                 "model on some rank: using private memory");
        return DDPC_OK;
    }
    mine = s->base[c->rank];
    memset(mine, 0, bytes);
    __atomic_store_n(s->arrived[c->rank], 0, __ATOMIC_RELEASE);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, s->win); /* a passive epoch for loads and stores */
    rc = MPI_Barrier(m->node); /* every copy zeroed, every counter 0 */
    s->bytes = bytes;
    s->in_use = 1;
    pthread_mutex_lock(&c->mu);
    s->id = m->nsegs++;
    s->next = m->segs;
    m->segs = s;
    pthread_mutex_unlock(&c->mu);
    *out = mine;
    return rc == MPI_SUCCESS ? DDPC_OK
                             : ddpc_err(c->rt, DDPC_ERR_MPI, MOD, "shared memory: MPI_Barrier");
}

/* Not collective: the window goes back to the communicator's pool. 0: p is
 * not in one (the caller's own memory). */
int comm_mpi_mem_release(struct ddpc_comm *c, void *p, int release)
{
    mpi_impl_t *m = c->impl;
    int found = 0;
    pthread_mutex_lock(&c->mu);
    for (shm_seg_t *s = m ? m->segs : NULL; s && !found; s = s->next)
        if (s->in_use && s->base[c->rank] == p) {
            s->in_use = !release;
            found = 1;
        }
    pthread_mutex_unlock(&c->mu);
    return found;
}

/* Under c->mu (submit): the window whose copy holds [buf, buf + bytes). */
static shm_seg_t *shm_find(mpi_impl_t *m, int rank, const void *buf, size_t bytes)
{
    for (shm_seg_t *s = m->segs; s; s = s->next) {
        const char *b = s->base[rank];
        if (s->in_use && (const char *)buf >= b && (const char *)buf + bytes <= b + s->bytes)
            return s;
    }
    return NULL;
}

/* Every rank's counter has reached t. */
static int shm_arrive(struct ddpc_comm *c, mpi_impl_t *m, shm_seg_t *s, uint64_t t)
{
    __atomic_store_n(s->arrived[c->rank], t, __ATOMIC_RELEASE);
    long nap = 0;
    const double spin_until = ddpc_now() + SPIN_FIRST_S;
    for (int r = 0; r < c->size;) {
        if (__atomic_load_n(s->arrived[r], __ATOMIC_ACQUIRE) >= t) {
            r++;
            continue;
        }
        if (__atomic_load_n(&m->abandon, __ATOMIC_ACQUIRE))
            return MPI_ERR_PENDING; /* left in flight: see mpi_destroy */
        progress_pause(c, m, &nap, spin_until);
    }
    return MPI_SUCCESS;
}

static int shm_allreduce(struct ddpc_comm *c, mpi_impl_t *m, shm_seg_t *s, struct ddpc_work *w)
{
    const int N = c->size;
    const size_t off = (size_t)((char *)w->recv - s->base[c->rank]);
    const uint64_t t = 2 * ++s->seq;
    int rc = shm_arrive(c, m, s, t - 1); /* every rank's copy is ready */
    if (rc != MPI_SUCCESS)
        return rc;
    size_t per = (w->count + (size_t)N - 1) / (size_t)N;
    per = (per + SHM_SLICE_ALIGN - 1) / SHM_SLICE_ALIGN * SHM_SLICE_ALIGN;
    const size_t lo = (size_t)c->rank * per < w->count ? (size_t)c->rank * per : w->count;
    const size_t hi = lo + per < w->count ? lo + per : w->count;
    float *d = (float *)(s->base[0] + off);
    for (size_t c0 = lo; c0 < hi; c0 += SHM_CHUNK) {
        const size_t n = hi - c0 < SHM_CHUNK ? hi - c0 : SHM_CHUNK;
        float *restrict acc = d + c0;
        for (int r = 1; r < N; r++) /* rank order: ((x0 + x1) + x2) + ... */
            comm_add_f32(acc, (const float *)(s->base[r] + off) + c0, n);
        if (w->op == DDPC_AVG)
            comm_divide(acc, n, DDPC_F32, N); /* as the MPI path divides */
        for (int r = 1; r < N; r++)
            memcpy((float *)(s->base[r] + off) + c0, acc, n * sizeof(float));
    }
    return shm_arrive(c, m, s, t); /* every slice is in every copy */
}

/* An in-place all-gather in a window: every rank copies the others' blocks
 * from their copies into its own, between two arrivals (the blocks are
 * final before anyone reads; nobody writes its block again before everyone
 * has read it). Each block is read once per rank that lacks it, where MPI's
 * shared-memory all-gather copies it through its cells twice (ZeRO-1's
 * gather of the updated parameters: doc/ddp.md). Any type: bytes. */
static int shm_allgather(struct ddpc_comm *c, mpi_impl_t *m, shm_seg_t *s, struct ddpc_work *w)
{
    const size_t off = (size_t)((char *)w->recv - s->base[c->rank]);
    const size_t blk = w->count * ddpc_dtype_size(w->dt);
    const uint64_t t = 2 * ++s->seq;
    int rc = shm_arrive(c, m, s, t - 1); /* every rank's block is final */
    if (rc != MPI_SUCCESS)
        return rc;
    for (int r = 0; r < c->size; r++)
        if (r != c->rank)
            memcpy(s->base[c->rank] + off + (size_t)r * blk, s->base[r] + off + (size_t)r * blk,
                   blk);
    return shm_arrive(c, m, s, t); /* every rank has every block */
}

/* At destroy (collective, as MPI_Comm_free): the windows and the node's
 * communicator. */
static void shm_free_all(mpi_impl_t *m)
{
    while (m->segs) {
        shm_seg_t *s = m->segs;
        m->segs = s->next;
        MPI_Win_unlock_all(s->win);
        MPI_Win_free(&s->win);
        free(s->base);
        free(s->arrived);
        free(s);
    }
    if (m->node != MPI_COMM_NULL)
        MPI_Comm_free(&m->node);
}

static int run_host(struct ddpc_comm *c, mpi_impl_t *m, struct ddpc_work *w)
{
    MPI_Request req;
    MPI_Datatype t = mpi_type(w->dt);
    size_t es = ddpc_dtype_size(w->dt);
    int rc = MPI_SUCCESS;
    switch (w->kind) {
    case OP_ALLREDUCE: {
        if (w->shm)
            return shm_allreduce(c, m, w->shm, w);
        const size_t piece = PIECE_BYTES / es;
        for (size_t off = 0; off < w->count && rc == MPI_SUCCESS; off += piece) {
            size_t n = w->count - off < piece ? w->count - off : piece;
            const void *s = w->send == w->recv ? MPI_IN_PLACE : (const char *)w->send + off * es;
            char *r = (char *)w->recv + off * es;
            rc = MPI_RUN(MPI_Allreduce, MPI_Iallreduce, s, r, (int)n, t, mpi_op(m, w->dt, w->op),
                         m->mpi);
            if (rc == MPI_SUCCESS && w->op == DDPC_AVG && c->size > 1)
                comm_divide(r, n, w->dt, c->size); /* while the piece is in cache */
        }
        break;
    }
    case OP_BCAST:
        for (size_t off = 0; off < w->count && rc == MPI_SUCCESS; off += CHUNK) {
            size_t n = w->count - off < CHUNK ? w->count - off : CHUNK;
            rc = MPI_RUN(MPI_Bcast, MPI_Ibcast, (char *)w->recv + off * es, (int)n, t, w->root,
                         m->mpi);
        }
        break;
    case OP_ALLGATHER:
        if (w->shm)
            return shm_allgather(c, m, w->shm, w);
        /* send at rank r's own block of recv: in place (MPI_IN_PLACE) */
        rc = MPI_RUN(MPI_Allgather, MPI_Iallgather,
                     w->send == (const char *)w->recv + (size_t)c->rank * w->count * es
                         ? MPI_IN_PLACE : w->send,
                     (int)w->count, t, w->recv, (int)w->count, t, m->mpi);
        break;
    case OP_REDUCE_SCATTER:
        rc = MPI_RUN(MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block, w->send, w->recv,
                     (int)w->count, t, mpi_op(m, w->dt, w->op), m->mpi);
        if (rc == MPI_SUCCESS && w->op == DDPC_AVG && c->size > 1)
            comm_divide(w->recv, w->count, w->dt, c->size);
        break;
    case OP_BARRIER: rc = MPI_RUN(MPI_Barrier, MPI_Ibarrier, m->mpi); break;
    case OP_ALLTOALL:
        rc = MPI_RUN(MPI_Alltoall, MPI_Ialltoall, w->send, (int)w->count, t, w->recv,
                     (int)w->count, t, m->mpi);
        break;
    case OP_GATHER:
        rc = MPI_RUN(MPI_Gather, MPI_Igather, w->send, (int)w->count, t, w->recv, (int)w->count,
                     t, w->root, m->mpi);
        break;
    case OP_SCATTER:
        rc = MPI_RUN(MPI_Scatter, MPI_Iscatter, w->send, (int)w->count, t, w->recv,
                     (int)w->count, t, w->root, m->mpi);
        break;
    case OP_REDUCE: {
        const size_t piece = PIECE_BYTES / es;
        const int root = c->rank == w->root;
        for (size_t off = 0; off < w->count && rc == MPI_SUCCESS; off += piece) {
            size_t n = w->count - off < piece ? w->count - off : piece;
            const void *s = root && w->send == w->recv ? MPI_IN_PLACE
                                                       : (const char *)w->send + off * es;
            char *r = root ? (char *)w->recv + off * es : NULL;
            rc = MPI_RUN_NB(MPI_Ireduce, s, r, (int)n, t, mpi_op(m, w->dt, w->op), w->root,
                            m->mpi);
            if (rc == MPI_SUCCESS && root && w->op == DDPC_AVG && c->size > 1)
                comm_divide(r, n, w->dt, c->size);
        }
        break;
    }
    case OP_P2P: rc = run_p2p(c, m, w); break;
    case OP_WATCH: rc = MPI_ERR_OTHER; break; /* not a collective: never submitted */
    }
    return rc;
}

static void mpi_fail(struct ddpc_work *w, int rc)
{
    char s[MPI_MAX_ERROR_STRING], what[160];
    int len = 0;
    MPI_Error_string(rc, s, &len);
    comm_describe(w, what, sizeof what);
    w->status = DDPC_ERR_MPI;
    snprintf(w->err, sizeof w->err, "%s failed: %s", what, s);
}

/* ------------------------------------------------------------------ device memory, staged */

#ifdef DDPC_HAVE_CUDA
/* The pinned buffer every piece passes through: 16 MiB, allocated with the
 * communicator (never inside a step). Pieces are the same on every rank. */
#define STAGE_BYTES ((size_t)16 << 20)

#define CU(call)                                                                               \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            char what_[160];                                                                   \
            comm_describe(w, what_, sizeof what_);                                             \
            w->status = DDPC_ERR_CUDA;                                                         \
            snprintf(w->err, sizeof w->err, "%s: %s failed (%s:%d): %s", what_, #call,         \
                     __FILE__, __LINE__, cudaGetErrorString(e_));                              \
            return MPI_SUCCESS;                                                                \
        }                                                                                      \
    } while (0)

/* Copy n bytes and wait: the staging stream is this thread's alone. */
#define COPY(dst, src, n, kind)                                                                \
    do {                                                                                       \
        CU(cudaMemcpyAsync((dst), (src), (n), (kind), m->stream));                            \
        CU(cudaStreamSynchronize(m->stream));                                                  \
    } while (0)

/* 2D: height blocks of width bytes, from pitch sp to pitch dp. */
#define COPY2D(dst, dp, src, sp, width, height, kind)                                          \
    do {                                                                                       \
        CU(cudaMemcpy2DAsync((dst), (dp), (src), (sp), (width), (height), (kind), m->stream)); \
        CU(cudaStreamSynchronize(m->stream));                                                  \
    } while (0)

/* Returns an MPI code; CUDA failures are recorded in w (status set). */
static int run_staged(struct ddpc_comm *c, mpi_impl_t *m, struct ddpc_work *w)
{
    MPI_Datatype t = mpi_type(w->dt);
    const size_t es = ddpc_dtype_size(w->dt);
    const size_t cap = STAGE_BYTES / es; /* elements the stage holds */
    char *h = m->stage;
    int rc = MPI_SUCCESS;
    MPI_Request req;
    CU(cudaSetDevice(c->device));
    if (w->ev_ready)
        CU(cudaStreamWaitEvent(m->stream, (cudaEvent_t)w->ev_ready, 0));
    switch (w->kind) {
    case OP_ALLREDUCE: {
        const size_t piece = cap < PIECE_BYTES / es ? cap : PIECE_BYTES / es;
        for (size_t off = 0; off < w->count && rc == MPI_SUCCESS; off += piece) {
            size_t n = w->count - off < piece ? w->count - off : piece;
            COPY(h, (const char *)w->send + off * es, n * es, cudaMemcpyDeviceToHost);
            rc = MPI_RUN(MPI_Allreduce, MPI_Iallreduce, MPI_IN_PLACE, h, (int)n, t,
                         mpi_op(m, w->dt, w->op), m->mpi);
            if (rc == MPI_SUCCESS && w->op == DDPC_AVG && c->size > 1)
                comm_divide(h, n, w->dt, c->size);
            if (rc == MPI_SUCCESS)
                COPY((char *)w->recv + off * es, h, n * es, cudaMemcpyHostToDevice);
        }
        break;
    }
    case OP_BCAST:
        for (size_t off = 0; off < w->count && rc == MPI_SUCCESS; off += cap) {
            size_t n = w->count - off < cap ? w->count - off : cap;
            char *d = (char *)w->recv + off * es;
            if (c->rank == w->root)
                COPY(h, d, n * es, cudaMemcpyDeviceToHost);
            rc = MPI_RUN(MPI_Bcast, MPI_Ibcast, h, (int)n, t, w->root, m->mpi);
            if (rc == MPI_SUCCESS && c->rank != w->root)
                COPY(d, h, n * es, cudaMemcpyHostToDevice);
        }
        break;
    case OP_ALLGATHER: {
        /* k elements of every rank's block at a time: the stage holds
         * size * k, laid out by rank; each lands at r * count + off */
        const size_t k = cap / (size_t)c->size;
        if (k == 0)
            return MPI_ERR_COUNT;
        for (size_t off = 0; off < w->count && rc == MPI_SUCCESS; off += k) {
            size_t n = w->count - off < k ? w->count - off : k;
            char *mine = h + (size_t)c->rank * n * es;
            COPY(mine, (const char *)w->send + off * es, n * es, cudaMemcpyDeviceToHost);
            rc = MPI_RUN(MPI_Allgather, MPI_Iallgather, MPI_IN_PLACE, 0, t, h, (int)n, t, m->mpi);
            if (rc == MPI_SUCCESS)
                COPY2D((char *)w->recv + off * es, w->count * es, h, n * es, n * es,
                       (size_t)c->size, cudaMemcpyHostToDevice);
        }
        break;
    }
    case OP_REDUCE_SCATTER: {
        /* k elements of every rank's block at a time, reduced in place:
         * the result lands in the stage's first k elements */
        const size_t k = cap / (size_t)c->size;
        if (k == 0)
            return MPI_ERR_COUNT;
        for (size_t off = 0; off < w->count && rc == MPI_SUCCESS; off += k) {
            size_t n = w->count - off < k ? w->count - off : k;
            COPY2D(h, n * es, (const char *)w->send + off * es, w->count * es, n * es,
                   (size_t)c->size, cudaMemcpyDeviceToHost);
            rc = MPI_RUN(MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block, MPI_IN_PLACE, h,
                         (int)n, t, mpi_op(m, w->dt, w->op), m->mpi);
            if (rc == MPI_SUCCESS && w->op == DDPC_AVG && c->size > 1)
                comm_divide(h, n, w->dt, c->size);
            if (rc == MPI_SUCCESS)
                COPY((char *)w->recv + off * es, h, n * es, cudaMemcpyHostToDevice);
        }
        break;
    }
    case OP_BARRIER: rc = MPI_RUN(MPI_Barrier, MPI_Ibarrier, m->mpi); break;
    case OP_ALLTOALL: {
        /* k elements of every block at a time: the stage's first half holds
           the blocks to send, laid out by rank, the second those received */
        const size_t half = cap / 2, k = half / (size_t)c->size;
        char *h2 = h + half * es;
        if (k == 0)
            return MPI_ERR_COUNT;
        for (size_t off = 0; off < w->count && rc == MPI_SUCCESS; off += k) {
            size_t n = w->count - off < k ? w->count - off : k;
            COPY2D(h, n * es, (const char *)w->send + off * es, w->count * es, n * es,
                   (size_t)c->size, cudaMemcpyDeviceToHost);
            rc = MPI_RUN(MPI_Alltoall, MPI_Ialltoall, h, (int)n, t, h2, (int)n, t, m->mpi);
            if (rc == MPI_SUCCESS)
                COPY2D((char *)w->recv + off * es, w->count * es, h2, n * es, n * es,
                       (size_t)c->size, cudaMemcpyHostToDevice);
        }
        break;
    }
    case OP_GATHER: {
        const size_t k = cap / (size_t)c->size;
        const int root = c->rank == w->root;
        if (k == 0)
            return MPI_ERR_COUNT;
        for (size_t off = 0; off < w->count && rc == MPI_SUCCESS; off += k) {
            size_t n = w->count - off < k ? w->count - off : k;
            COPY(root ? h + (size_t)c->rank * n * es : h, (const char *)w->send + off * es,
                 n * es, cudaMemcpyDeviceToHost);
            if (root)
                rc = MPI_RUN(MPI_Gather, MPI_Igather, MPI_IN_PLACE, (int)n, t, h, (int)n, t,
                             w->root, m->mpi);
            else
                rc = MPI_RUN(MPI_Gather, MPI_Igather, h, (int)n, t, NULL, 0, t, w->root, m->mpi);
            if (rc == MPI_SUCCESS && root)
                COPY2D((char *)w->recv + off * es, w->count * es, h, n * es, n * es,
                       (size_t)c->size, cudaMemcpyHostToDevice);
        }
        break;
    }
    case OP_SCATTER: {
        const size_t k = cap / (size_t)c->size;
        const int root = c->rank == w->root;
        if (k == 0)
            return MPI_ERR_COUNT;
        for (size_t off = 0; off < w->count && rc == MPI_SUCCESS; off += k) {
            size_t n = w->count - off < k ? w->count - off : k;
            if (root) {
                COPY2D(h, n * es, (const char *)w->send + off * es, w->count * es, n * es,
                       (size_t)c->size, cudaMemcpyDeviceToHost);
                rc = MPI_RUN(MPI_Scatter, MPI_Iscatter, h, (int)n, t, MPI_IN_PLACE, (int)n, t,
                             w->root, m->mpi);
            } else {
                rc = MPI_RUN(MPI_Scatter, MPI_Iscatter, NULL, 0, t, h, (int)n, t, w->root,
                             m->mpi);
            }
            if (rc == MPI_SUCCESS)
                COPY((char *)w->recv + off * es, root ? h + (size_t)c->rank * n * es : h,
                     n * es, cudaMemcpyHostToDevice);
        }
        break;
    }
    case OP_REDUCE: {
        const size_t piece = cap < PIECE_BYTES / es ? cap : PIECE_BYTES / es;
        const int root = c->rank == w->root;
        for (size_t off = 0; off < w->count && rc == MPI_SUCCESS; off += piece) {
            size_t n = w->count - off < piece ? w->count - off : piece;
            COPY(h, (const char *)w->send + off * es, n * es, cudaMemcpyDeviceToHost);
            rc = MPI_RUN_NB(MPI_Ireduce, root ? MPI_IN_PLACE : h, root ? h : NULL, (int)n, t,
                            mpi_op(m, w->dt, w->op), w->root, m->mpi);
            if (rc == MPI_SUCCESS && root && w->op == DDPC_AVG && c->size > 1)
                comm_divide(h, n, w->dt, c->size);
            if (rc == MPI_SUCCESS && root)
                COPY((char *)w->recv + off * es, h, n * es, cudaMemcpyHostToDevice);
        }
        break;
    }
    case OP_P2P: {
        /* each transfer has its slot of the stage and goes in pieces of
           the slot's size, the same on both sides: round j moves piece j
           of every transfer that has one */
        const size_t slot = STAGE_BYTES / DDPC_P2P_BATCH_MAX;
        for (size_t j = 0;; j++) {
            MPI_Request rq[DDPC_P2P_BATCH_MAX];
            int k = 0, more = 0;
            for (int i = 0; i < w->np && rc == MPI_SUCCESS; i++) {
                const ddpc_p2p_op_t *o = &w->p2p[i];
                const size_t oes = ddpc_dtype_size(o->dt), pe = slot / oes, off = j * pe;
                if (off >= o->count)
                    continue;
                size_t n = o->count - off < pe ? o->count - off : pe;
                char *sl = h + (size_t)i * slot;
                if (o->is_send)
                    COPY(sl, (const char *)o->buf + off * oes, n * oes, cudaMemcpyDeviceToHost);
                rc = post_p2p(m, o, sl, n, &rq[k]);
                k += rc == MPI_SUCCESS;
                more = 1;
            }
            if (k) {
                int rc2 = finish_p2p(c, m, rq, k);
                rc = rc != MPI_SUCCESS ? rc : rc2;
            }
            if (!more || rc != MPI_SUCCESS)
                break;
            for (int i = 0; i < w->np; i++) {
                const ddpc_p2p_op_t *o = &w->p2p[i];
                const size_t oes = ddpc_dtype_size(o->dt), pe = slot / oes, off = j * pe;
                if (o->is_send || off >= o->count)
                    continue;
                size_t n = o->count - off < pe ? o->count - off : pe;
                COPY((char *)o->buf + off * oes, h + (size_t)i * slot, n * oes,
                     cudaMemcpyHostToDevice);
            }
        }
        break;
    }
    case OP_WATCH: rc = MPI_ERR_OTHER; break; /* not a collective: never submitted */
    }
    return rc;
}
#endif

/* ------------------------------------------------------------------ progress thread */

static void *progress_main(void *arg)
{
    struct ddpc_comm *c = arg;
    mpi_impl_t *m = c->impl;
#ifdef DDPC_HAVE_CUDA
    if (m->staged) { /* its copies and syncs must not break a caller's global-mode capture */
        cudaSetDevice(c->device);
        enum cudaStreamCaptureMode mode = cudaStreamCaptureModeThreadLocal;
        cudaThreadExchangeStreamCaptureMode(&mode);
    }
#endif
    ddpc_tl_name_thread(m->staged ? "comm progress (mpi-staged)" : "comm progress (mpi)");
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!m->head && !m->stop)
            pthread_cond_wait(&m->has_work, &c->mu);
        if (!m->head || m->abandon)
            break; /* stop requested and nothing left, or given up */
        struct ddpc_work *w = m->head;
        pthread_mutex_unlock(&c->mu);

        double t0 = ddpc_tl_t0();
#ifdef DDPC_HAVE_CUDA
        int rc = m->staged ? run_staged(c, m, w) : run_host(c, m, w);
#else
        int rc = run_host(c, m, w);
#endif
        ddpc_tl_span_seq(comm_op_names[w->kind], t0, -1, (int64_t)w->seq);

        pthread_mutex_lock(&c->mu);
        if (rc != MPI_SUCCESS)
            mpi_fail(w, rc);
        m->head = w->next;
        if (!m->head)
            m->tail = NULL;
        w->done = 1;
        if (w->kind != OP_P2P)
            comm_flight_end(c, w->seq, rc == MPI_SUCCESS ? FR_DONE : FR_FAILED);
        m->completed++;
        if (w->kind != OP_P2P)
            __atomic_store_n(&c->completed, ++m->coll_done, __ATOMIC_RELAXED);
        /* wake waiters only for what they wait for: ddpc_ddp_wait sleeps on
         * its last operation, and a wake-up per earlier bucket would take the
         * core from this thread on a machine without a spare one */
        if (w->waited || m->sync_waiters)
            pthread_cond_broadcast(&m->work_done);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static ddpc_status_t mpi_submit(struct ddpc_comm *c, struct ddpc_work *w)
{
    mpi_impl_t *m = c->impl;
    if ((w->kind == OP_ALLREDUCE || w->kind == OP_REDUCE_SCATTER || w->kind == OP_REDUCE) &&
        mpi_op(m, w->dt, w->op) == MPI_OP_NULL)
        return ddpc_err(c->rt, DDPC_ERR_UNSUPPORTED, MOD, "%s: reduction %d is not supported",
                        comm_op_names[w->kind], (int)w->op);
#ifdef DDPC_HAVE_CUDA
    if (m->staged && w->kind != OP_BARRIER) {
        /* the progress thread's copies start after what the caller's
         * stream holds now: its kernels that write the buffer. Events come
         * from a pool (made with the communicator), so a step makes none. */
        cudaEvent_t ev = comm_events_get(&m->events);
        cudaError_t e = ev ? cudaSuccess : cudaErrorMemoryAllocation;
        if (e == cudaSuccess && (e = cudaEventRecord(ev, (cudaStream_t)c->stream)) != cudaSuccess)
            comm_events_put(&m->events, ev);
        if (e != cudaSuccess)
            return ddpc_err(c->rt, DDPC_ERR_CUDA, MOD, "%s: cannot record the stream's event: %s",
                            comm_op_names[w->kind], cudaGetErrorString(e));
        w->ev_ready = ev;
    }
#endif
    if (w->kind == OP_ALLREDUCE && w->dt == DDPC_F32 && (w->op == DDPC_SUM || w->op == DDPC_AVG) &&
        w->send == w->recv && w->count && m->segs)
        w->shm = shm_find(m, c->rank, w->recv, w->count * sizeof(float));
    else if (w->kind == OP_ALLGATHER && w->count && m->segs) {
        const size_t blk = w->count * ddpc_dtype_size(w->dt); /* in place: send is its block */
        if (w->send == (const char *)w->recv + (size_t)c->rank * blk)
            w->shm = shm_find(m, c->rank, w->recv, (size_t)c->size * blk);
    }
    if (m->tail)
        m->tail->next = w;
    else
        m->head = w;
    m->tail = w;
    m->queued++;
    pthread_cond_signal(&m->has_work);
    return DDPC_OK;
}

static void free_work(struct ddpc_work *w)
{
#ifdef DDPC_HAVE_CUDA
    if (w->ev_ready) {
        struct ddpc_comm *c = w->comm;
        pthread_mutex_lock(&c->mu);
        comm_events_put(&((mpi_impl_t *)c->impl)->events, w->ev_ready);
        pthread_mutex_unlock(&c->mu);
    }
#endif
    free(w);
}

static ddpc_status_t mpi_test(struct ddpc_work *w, int *done)
{
    struct ddpc_comm *c = w->comm;
    pthread_mutex_lock(&c->mu);
    *done = w->done;
    ddpc_status_t st = w->done ? w->status : DDPC_OK;
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* Under the communicator's mutex: the progress thread stops napping. */
static void waiter_arrives(mpi_impl_t *m)
{
    __atomic_add_fetch(&m->waiters, 1, __ATOMIC_RELEASE);
    pthread_cond_signal(&m->poke);
}

static ddpc_status_t mpi_wait(struct ddpc_work *w, double timeout_s)
{
    struct ddpc_comm *c = w->comm;
    mpi_impl_t *m = c->impl;
    comm_clock_t k;
    comm_clock_start(&k);
    pthread_mutex_lock(&c->mu);
    w->waited = 1;
    waiter_arrives(m);
    while (!w->done && !comm_clock_wait(&m->work_done, &c->mu, &k, timeout_s)) {
    }
    __atomic_sub_fetch(&m->waiters, 1, __ATOMIC_RELEASE);
    int done = w->done;
    if (!done && timeout_s >= c->rt->cfg.timeout_s)
        c->timed_out = 1; /* the watchdog's timeout, not a caller's short poll */
    pthread_mutex_unlock(&c->mu);
    if (!done) {
        char what[1200], ex[768] = "";
        comm_describe(w, what, sizeof what);
        if (timeout_s <= 0)
            timeout_s = c->rt->cfg.timeout_s;
        if (w->kind == OP_P2P) {
            ddpc_monitor_explain_peers(c, w, ex, sizeof ex); /* how the peers are, if it knows */
            return ddpc_err(c->rt, DDPC_ERR_TIMEOUT, MOD,
                            "%s did not complete within %gs: the peer has not issued the "
                            "matching %s (crashed, stuck, or transfers in a different order); "
                            "set DDPC_TIMEOUT to wait longer%s%s", what, timeout_s,
                            w->np > 1 ? "transfers" : w->p2p[0].is_send ? "receive" : "send",
                            ex[0] ? "; " : "", ex);
        }
        ddpc_monitor_explain(c, w->seq, ex, sizeof ex); /* who never came, if it knows */
        char fr[4200];
        ddpc_flight_dump(c->rt, what, fr, sizeof fr);
        /* a wait of 0 s polls an operation ahead of one that timed out: it has
           been waiting at least the configured timeout */
        return ddpc_err(c->rt, DDPC_ERR_TIMEOUT, MOD,
                        "%s did not complete within %gs: another rank has not called it "
                        "(crashed, stuck, or issuing collectives in a different order); set "
                        "DDPC_TIMEOUT to wait longer%s%s%s%s", what, timeout_s, ex[0] ? "; " : "",
                        ex, fr[0] ? "; flight recorder: " : "", fr);
    }
    ddpc_status_t st = w->status;
    if (st != DDPC_OK)
        ddpc_err(c->rt, st, MOD, "%s", w->err);
    free_work(w);
    return st;
}

/* Every operation submitted so far has completed. */
static ddpc_status_t mpi_synchronize(struct ddpc_comm *c, double timeout_s)
{
    mpi_impl_t *m = c->impl;
    comm_clock_t k;
    comm_clock_start(&k);
    pthread_mutex_lock(&c->mu);
    const uint64_t target = m->queued;
    m->sync_waiters++;
    waiter_arrives(m);
    while (m->completed < target && !comm_clock_wait(&m->work_done, &c->mu, &k, timeout_s)) {
    }
    __atomic_sub_fetch(&m->waiters, 1, __ATOMIC_RELEASE);
    m->sync_waiters--;
    int idle = m->completed >= target;
    if (!idle && timeout_s >= c->rt->cfg.timeout_s)
        c->timed_out = 1;
    pthread_mutex_unlock(&c->mu);
    return idle ? DDPC_OK
                : ddpc_err(c->rt, DDPC_ERR_TIMEOUT, MOD,
                           "collectives up to #%llu (and the transfers issued with them) did "
                           "not complete within %gs", (unsigned long long)c->seq - 1, timeout_s);
}

static void mpi_abort(struct ddpc_comm *c)
{
    MPI_Abort(((mpi_impl_t *)c->impl)->mpi, 1);
}

static void mpi_destroy(struct ddpc_comm *c)
{
    mpi_impl_t *m = c->impl;
    if (!m)
        return;
    if (m->thread_started) {
        pthread_mutex_lock(&c->mu);
        m->stop = 1;
        /* work still queued after the caller's synchronize gave up: a rank
         * never joined a collective, and the thread is inside it. Joining
         * would wait forever: the thread is told to leave it (it does at
         * its next test; not from inside a blocking call), and whatever it
         * may still touch is left allocated, its MPI communicator too */
        const int stuck = m->head != NULL;
        if (stuck)
            __atomic_store_n(&m->abandon, 1, __ATOMIC_RELEASE);
        pthread_cond_signal(&m->has_work);
        pthread_cond_signal(&m->poke);
        pthread_mutex_unlock(&c->mu);
        if (stuck) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 2;
            if (pthread_timedjoin_np(m->thread, NULL, &until) != 0) {
                pthread_detach(m->thread);
                c->abandoned = 1; /* comm_free keeps c: the thread holds it */
            }
            c->rt->stuck = 1; /* ddpc_finalize must not finalize MPI */
            c->impl = NULL;
            return;
        }
        pthread_join(m->thread, NULL);
    }
    shm_free_all(m);
    if (m->half_sum[0] != MPI_OP_NULL)
        MPI_Op_free(&m->half_sum[0]);
    if (m->half_sum[1] != MPI_OP_NULL)
        MPI_Op_free(&m->half_sum[1]);
    if (m->mpi != MPI_COMM_NULL)
        MPI_Comm_free(&m->mpi);
#ifdef DDPC_HAVE_CUDA
    if (m->stage)
        cudaFreeHost(m->stage);
    if (m->stream)
        cudaStreamDestroy(m->stream);
    comm_events_free(&m->events);
#endif
    pthread_cond_destroy(&m->has_work);
    pthread_cond_destroy(&m->work_done);
    pthread_cond_destroy(&m->poke);
    free(m);
    c->impl = NULL;
}

static const comm_ops_t mpi_ops = {mpi_submit, mpi_test,  mpi_wait,
                                   mpi_synchronize, mpi_abort, mpi_destroy, NULL};

ddpc_status_t comm_mpi_create(struct ddpc_comm *c, int staged)
{
    ddpc_t rt = c->rt;
    if (rt->mpi_world == MPI_COMM_NULL)
        return ddpc_err(rt, DDPC_ERR_STATE, MOD,
                        "backend mpi: MPI is not wired in this launch (%s)",
                        rt->world.mpi_size != rt->world.size
                            ? "this MPI has no PMIx client; use the nccl backend on GPUs, or "
                              "launch with `srun --mpi=pmi2` or mpiexec"
                            : "MPI was not initialized");
    mpi_impl_t *m = calloc(1, sizeof *m);
    if (!m)
        return ddpc_err(rt, DDPC_ERR_NOMEM, MOD, "cannot allocate the MPI backend");
    m->mpi = MPI_COMM_NULL;
    m->node = MPI_COMM_NULL;
    m->half_sum[0] = m->half_sum[1] = MPI_OP_NULL;
    m->staged = staged;
    pthread_cond_init(&m->has_work, NULL);
    pthread_cond_init(&m->work_done, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the nap's deadline */
    pthread_cond_init(&m->poke, &ca);
    pthread_condattr_destroy(&ca);
    c->impl = m;
    c->ops = &mpi_ops;
    ddpc_status_t st = ddpc_env_choice(rt, "DDPC_PROGRESS", progress_names, &m->progress);
    if (st == DDPC_OK)
        st = ddpc_env_choice(rt, "DDPC_SHM_ALLREDUCE", shm_names, &m->shm);
    if (st != DDPC_OK)
        return st;
    int rc;
    if (c->members) { /* collective over these ranks only */
        MPI_Group wg, g;
        MPI_Comm_group(MPI_COMM_WORLD, &wg);
        rc = MPI_Group_incl(wg, c->size, c->members, &g);
        if (rc == MPI_SUCCESS) {
            rc = MPI_Comm_create_group(MPI_COMM_WORLD, g, GROUP_TAG, &m->mpi);
            MPI_Group_free(&g);
        }
        MPI_Group_free(&wg);
        if (rc != MPI_SUCCESS)
            return ddpc_mpi_err(rt, rc, MOD, "MPI_Comm_create_group");
    } else if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &m->mpi)) != MPI_SUCCESS) {
        return ddpc_mpi_err(rt, rc, MOD, "MPI_Comm_dup");
    }
    MPI_Comm_rank(m->mpi, &c->rank);
    MPI_Comm_size(m->mpi, &c->size);
    if (!staged && c->size > 1) {
        /* the ranks again where they all share one node (the same verdict on
           every rank): the shared windows' communicator; the setting is
           agreed when memory is asked for */
        MPI_Comm node;
        int ns = 0;
        if ((rc = MPI_Comm_split_type(m->mpi, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL,
                                      &node)) != MPI_SUCCESS)
            return ddpc_mpi_err(rt, rc, MOD, "MPI_Comm_split_type");
        MPI_Comm_size(node, &ns);
        if (ns == c->size)
            m->node = node;
        else
            MPI_Comm_free(&node);
    }
    MPI_Op_create(bf16_sum, 1, &m->half_sum[0]);
    MPI_Op_create(f16_sum, 1, &m->half_sum[1]);
    if (staged) {
#ifdef DDPC_HAVE_CUDA
        cudaError_t e = cudaSetDevice(c->device);
        if (e == cudaSuccess)
            e = cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking);
        if (e == cudaSuccess)
            e = cudaHostAlloc(&m->stage, STAGE_BYTES, cudaHostAllocDefault);
        if (e == cudaSuccess)
            e = (cudaError_t)comm_events_fill(&m->events, 16);
        if (e != cudaSuccess)
            return ddpc_err(rt, DDPC_ERR_CUDA, MOD,
                            "backend mpi-staged on GPU %d: cannot create its stream and %zu MiB "
                            "pinned buffer: %s", c->device, STAGE_BYTES >> 20,
                            cudaGetErrorString(e));
#else
        return ddpc_err(rt, DDPC_ERR_UNSUPPORTED, MOD,
                        "device memory needs a build --with-cuda (this one has no CUDA)");
#endif
    }
    if (pthread_create(&m->thread, NULL, progress_main, c) != 0)
        return ddpc_err(rt, DDPC_ERR_INTERNAL, MOD, "cannot start the progress thread");
    m->thread_started = 1;
    return DDPC_OK;
}
