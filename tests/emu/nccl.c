/* SPDX-License-Identifier: BSD-3-Clause */
/* nccl.c: the NCCL calls ddpc uses, emulated over MPI on the emulated
 * device memory (emu.h). A communicator is an MPI communicator of its ranks
 * only: ncclGetUniqueId writes its caller's world rank and a serial into
 * the id; at init each member sends its rank, host and device to that
 * creator over MPI_COMM_WORLD (tags 20000 + serial % 8192), which checks
 * them and answers the table, and the members make the communicator with
 * MPI_Comm_create_group in rank order. So the creator must be a member (a
 * member that hears nothing within DDPC_EMU_NCCL_INIT_TIMEOUT, 60 s,
 * fails saying so). ncclCommSplit is MPI_Comm_split of the parent's (by
 * key, then parent rank; NOCOLOR: NULL), and a violation while the parent
 * has operations in flight. Collectives, ncclReduce and sends/receives are
 * operations on the stream given, run in order by its thread as
 * non-blocking MPI calls that an abort interrupts. Groups (ncclGroupStart
 * nests) collect each thread's sends and receives until the outermost
 * ncclGroupEnd, which enqueues one operation per (communicator, stream),
 * in the order of their first call, that posts them all, then completes
 * them all (so a group on several communicators of one stream must name
 * them in the same order on every rank); a send to or receive from self is
 * allowed in a group and refused alone (it could never complete); at most
 * P2P_MAX per communicator and stream in one group. Collectives in a group
 * are enqueued at once (ddpc does not group them). Matching is by order
 * per pair of ranks and communicator, as NCCL's. Non-blocking communicators
 * (config.blocking = 0) answer ncclInProgress for a random number of polls
 * after init, split (the parent too), finalize, each call and each group's
 * end, and a call before the previous one settled is a violation, so that
 * ddpc's polling is exercised. As NCCL: two ranks on one device of one
 * host are refused, device pointers only, Abort ends what is in flight.
 * Test hooks: DDPC_EMU_NCCL_HANG=RANK:N makes the N-th operation (from 1;
 * collectives, reduces and send/receive operations alike) of that world
 * rank's communicators never complete; DDPC_EMU_NCCL_FAIL=RANK:N makes it
 * fail asynchronously (ncclRemoteError). Not emulated: NCCL's algorithms
 * and their rounding (MPI's reduction order), other NCCL calls (AllToAll,
 * shrink, windows, user buffers). */
#define _GNU_SOURCE
#include "emu_internal.h"

#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define COMM_MAGIC 0x6e63636cu

struct ncclComm {
    unsigned magic;
    int rank, nranks, device, world_rank;
    int blocking;
    MPI_Comm mc;
    int polls;               /* ncclInProgress answers left for the last call */
    int aborted, finalized;
    ncclResult_t async_err;
    char last[256];
    int inflight;            /* enqueued collectives not ended (atomic) */
    long executed;           /* collectives started on the stream */
    long hang_at, fail_at;   /* hooks: the n-th collective, 0 = none */
    struct ncclComm *next;
};

static pthread_mutex_t L = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm *comms; /* every live one, for the in-flight count */
static char global_last[256];

static void set_last(struct ncclComm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_last(struct ncclComm *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c ? c->last : global_last, sizeof global_last, fmt, ap);
    va_end(ap);
}

/* Collectives enqueued and not ended on communicators that are not aborted
 * (cudart.c refuses allocations while this is non-zero). */
int emu_nccl_in_flight(void)
{
    int n = 0;
    pthread_mutex_lock(&L);
    for (struct ncclComm *c = comms; c; c = c->next)
        if (!__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST))
            n += __atomic_load_n(&c->inflight, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&L);
    return n;
}

/* cudart.c calls these when an OP_COLLECTIVE operation (its argument
 * starts with the communicator) is enqueued (a graph replay too) and ends. */
void emu_nccl_op_begin(void *arg)
{
    struct ncclComm *c = *(struct ncclComm **)arg;
    __atomic_add_fetch(&c->inflight, 1, __ATOMIC_SEQ_CST);
}

void emu_nccl_op_end(void *arg)
{
    struct ncclComm *c = *(struct ncclComm **)arg;
    __atomic_sub_fetch(&c->inflight, 1, __ATOMIC_SEQ_CST);
}

static long hook(const char *var, int world_rank)
{
    const char *v = getenv(var);
    int r;
    long n;
    if (v && sscanf(v, "%d:%ld", &r, &n) == 2 && r == world_rank && n > 0)
        return n;
    return 0;
}

/* ------------------------------------------------------------------ types */

static size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

#define bf16_to_f emu_from_bf16
#define f_to_bf16 emu_to_bf16
#define f16_to_f emu_from_f16
#define f_to_f16 emu_to_f16

#define HALF_OP(NAME, CONV_IN, CONV_OUT, EXPR)                                           \
    static void NAME(void *in, void *io, int *len, MPI_Datatype *dt)                     \
    {                                                                                    \
        (void)dt;                                                                        \
        const uint16_t *a = in;                                                          \
        uint16_t *b = io;                                                                \
        for (int i = 0; i < *len; i++) {                                                 \
            float x = CONV_IN(a[i]), y = CONV_IN(b[i]);                                  \
            b[i] = CONV_OUT(EXPR);                                                       \
        }                                                                                \
    }
HALF_OP(bf16_sum, bf16_to_f, f_to_bf16, x + y)
HALF_OP(bf16_prod, bf16_to_f, f_to_bf16, x * y)
HALF_OP(bf16_max, bf16_to_f, f_to_bf16, x > y ? x : y)
HALF_OP(bf16_min, bf16_to_f, f_to_bf16, x < y ? x : y)
HALF_OP(f16_sum, f16_to_f, f_to_f16, x + y)
HALF_OP(f16_prod, f16_to_f, f_to_f16, x * y)
HALF_OP(f16_max, f16_to_f, f_to_f16, x > y ? x : y)
HALF_OP(f16_min, f16_to_f, f_to_f16, x < y ? x : y)

static MPI_Op half_ops[2][4]; /* [bf16, f16][sum, prod, max, min] */
static pthread_once_t ops_once = PTHREAD_ONCE_INIT;
static void make_ops(void)
{
    MPI_User_function *f[2][4] = {{bf16_sum, bf16_prod, bf16_max, bf16_min},
                                  {f16_sum, f16_prod, f16_max, f16_min}};
    for (int t = 0; t < 2; t++)
        for (int o = 0; o < 4; o++)
            MPI_Op_create(f[t][o], 1, &half_ops[t][o]);
}

static MPI_Datatype mpi_type(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat16: case ncclBfloat16: return MPI_UINT16_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
    }
}

/* ncclAvg sums, then divides (below) */
static MPI_Op mpi_op(ncclRedOp_t op, ncclDataType_t t)
{
    int k = op == ncclProd ? 1 : op == ncclMax ? 2 : op == ncclMin ? 3 : 0;
    if (t == ncclBfloat16 || t == ncclFloat16) {
        pthread_once(&ops_once, make_ops);
        return half_ops[t == ncclFloat16][k];
    }
    static const MPI_Op m[4] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
    return m[k];
}

static void divide(void *p, size_t n, ncclDataType_t t, int by)
{
    for (size_t i = 0; i < n; i++)
        switch (t) {
        case ncclFloat32: ((float *)p)[i] /= (float)by; break;
        case ncclFloat64: ((double *)p)[i] /= by; break;
        case ncclBfloat16: ((uint16_t *)p)[i] = f_to_bf16(bf16_to_f(((uint16_t *)p)[i]) / by); break;
        case ncclFloat16: ((uint16_t *)p)[i] = f_to_f16(f16_to_f(((uint16_t *)p)[i]) / by); break;
        case ncclInt8: ((int8_t *)p)[i] /= by; break;
        case ncclUint8: ((uint8_t *)p)[i] /= by; break;
        case ncclInt32: ((int32_t *)p)[i] /= by; break;
        case ncclUint32: ((uint32_t *)p)[i] /= by; break;
        case ncclInt64: ((int64_t *)p)[i] /= by; break;
        case ncclUint64: ((uint64_t *)p)[i] /= by; break;
        default: break;
        }
}

/* ------------------------------------------------------------------ collectives */

enum coll { C_ALLREDUCE, C_BCAST, C_ALLGATHER, C_REDUCE_SCATTER, C_REDUCE };

typedef struct {
    struct ncclComm *comm; /* first: cudart.c's begin/end hooks read it */
    int kind, root;
    const void *send;
    void *recv;
    size_t count; /* elements: per rank for allgather's send and reduce-scatter's recv */
    ncclDataType_t dt;
    ncclRedOp_t op;
} coll_t;

/* MPI requests left behind by aborted communicators (atomic). */
static int abandoned;

/* Complete an MPI request unless the communicator is aborted meanwhile. */
static int finish(struct ncclComm *c, MPI_Request *rq)
{
    for (;;) {
        int flag = 0;
        MPI_Test(rq, &flag, MPI_STATUS_IGNORE);
        if (flag)
            return 1;
        if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST)) {
            __atomic_add_fetch(&abandoned, 1, __ATOMIC_SEQ_CST);
            return 0; /* the request is abandoned with the communicator */
        }
        usleep(20);
    }
}

/* An abort of a real NCCL communicator leaves nothing behind in MPI; the
 * emulation's abandoned requests would make MPICH's MPI_Finalize wait for a
 * peer that never comes (seen: both ranks in MPI_Finalize after one rank's
 * collective failed). So this interposes MPI_Finalize (PMPI): with requests
 * abandoned, MPI is left unfinalized, said once, as ddpc leaves it after a
 * timed-out collective; otherwise MPI's own. */
EMU_API int MPI_Finalize(void)
{
    int n = __atomic_load_n(&abandoned, __ATOMIC_SEQ_CST);
    if (n > 0) {
        fprintf(stderr, "ddpc-emu[%d]: MPI_Finalize skipped: %d MPI request(s) of aborted emulated "
                "NCCL communicators are pending\n", (int)getpid(), n);
        return MPI_SUCCESS;
    }
    return PMPI_Finalize();
}

/* The start of every operation on its stream (a collective, a send/receive
 * batch): its number in the communicator's `executed` order, and the
 * hooks. Returns the number, or 0 when the operation must do nothing more
 * (aborted, hung until aborted, failed by the hook). */
static long start_op(struct ncclComm *c, const char *what)
{
    if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST))
        return 0;
    long seq = __atomic_add_fetch(&c->executed, 1, __ATOMIC_SEQ_CST);
    if (c->hang_at == seq) {
        fprintf(stderr, "ddpc-emu[%d]: NCCL %s #%ld of rank %d never completes "
                "(DDPC_EMU_NCCL_HANG)\n", (int)getpid(), what, seq, c->rank);
        while (!__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST))
            usleep(1000);
        return 0;
    }
    if (c->fail_at == seq) {
        fprintf(stderr, "ddpc-emu[%d]: NCCL %s #%ld of rank %d fails asynchronously "
                "(DDPC_EMU_NCCL_FAIL)\n", (int)getpid(), what, seq, c->rank);
        set_last(c, "emulated remote failure in %s #%ld (DDPC_EMU_NCCL_FAIL)", what, seq);
        __atomic_store_n(&c->async_err, ncclRemoteError, __ATOMIC_SEQ_CST);
        return 0;
    }
    return seq;
}

static void run_coll(void *arg)
{
    coll_t *a = arg;
    struct ncclComm *c = a->comm;
    long seq = start_op(c, "collective");
    if (!seq)
        return;
    size_t es = type_size(a->dt);
    MPI_Datatype t = mpi_type(a->dt);
    MPI_Request rq = MPI_REQUEST_NULL;
    int n = (int)a->count, rc = MPI_SUCCESS;
    void *tmp = NULL;
    switch (a->kind) {
    case C_ALLREDUCE:
        rc = MPI_Iallreduce(a->send == a->recv ? MPI_IN_PLACE : a->send, a->recv, n, t,
                            mpi_op(a->op, a->dt), c->mc, &rq);
        break;
    case C_BCAST:
        if (c->rank == a->root && a->send != a->recv)
            memmove(a->recv, a->send, a->count * es);
        rc = MPI_Ibcast(a->recv, n, t, a->root, c->mc, &rq);
        break;
    case C_ALLGATHER:
        rc = MPI_Iallgather((const char *)a->send == (char *)a->recv + (size_t)c->rank * a->count * es
                                ? MPI_IN_PLACE : a->send,
                            n, t, a->recv, n, t, c->mc, &rq);
        break;
    case C_REDUCE_SCATTER:
        tmp = malloc(a->count * es + 1);
        if (!tmp) {
            __atomic_store_n(&c->async_err, ncclSystemError, __ATOMIC_SEQ_CST);
            return;
        }
        rc = MPI_Ireduce_scatter_block(a->send, tmp, n, t, mpi_op(a->op, a->dt), c->mc, &rq);
        break;
    case C_REDUCE: /* recv only on the root */
        rc = MPI_Ireduce(c->rank == a->root && a->send == a->recv ? MPI_IN_PLACE : a->send,
                         c->rank == a->root ? a->recv : NULL, n, t, mpi_op(a->op, a->dt), a->root,
                         c->mc, &rq);
        break;
    }
    if (rc != MPI_SUCCESS) {
        set_last(c, "MPI failed under the emulated NCCL collective #%ld", seq);
        __atomic_store_n(&c->async_err, ncclSystemError, __ATOMIC_SEQ_CST);
        free(tmp);
        return;
    }
    if (!finish(c, &rq)) {
        free(tmp); /* abandoned: MPI may still write it; the process is ending anyway */
        return;
    }
    if (tmp) {
        memcpy(a->recv, tmp, a->count * es);
        free(tmp);
    }
    if (a->op == ncclAvg && (a->kind == C_ALLREDUCE || a->kind == C_REDUCE_SCATTER ||
                             (a->kind == C_REDUCE && c->rank == a->root)))
        divide(a->recv, a->count, a->dt, c->nranks);
}

/* With a non-blocking communicator, the next polls answer ncclInProgress. */
static ncclResult_t in_progress(struct ncclComm *c)
{
    if (c->blocking)
        return ncclSuccess;
    int n = (int)emu_rand(4);
    __atomic_store_n(&c->polls, n, __ATOMIC_SEQ_CST);
    return n ? ncclInProgress : ncclSuccess;
}

static ncclResult_t check_comm(struct ncclComm *c, const char *call)
{
    if (!c || c->magic != COMM_MAGIC) {
        emu_violation("%s: %p is not a live NCCL communicator", call, (void *)c);
        return ncclInvalidArgument;
    }
    if (__atomic_load_n(&c->polls, __ATOMIC_SEQ_CST) > 0) {
        emu_violation("%s on a non-blocking communicator whose previous call still answers "
                      "ncclInProgress: poll ncclCommGetAsyncError until ncclSuccess first", call);
        return ncclInvalidUsage;
    }
    if (c->aborted) {
        set_last(c, "%s: the communicator was aborted", call);
        return ncclInvalidUsage;
    }
    ncclResult_t a = __atomic_load_n(&c->async_err, __ATOMIC_SEQ_CST);
    if (a != ncclSuccess)
        return a;
    return ncclSuccess;
}

static ncclResult_t in_group(struct ncclComm *c);

static ncclResult_t enqueue(const char *call, coll_t *a, size_t send_elems, size_t recv_elems,
                            cudaStream_t s)
{
    struct ncclComm *c = a->comm;
    ncclResult_t r = check_comm(c, call);
    if (r != ncclSuccess)
        return r;
    size_t es = type_size(a->dt);
    if (!es || mpi_type(a->dt) == MPI_DATATYPE_NULL) {
        set_last(c, "%s: data type %d is not emulated", call, (int)a->dt);
        return ncclInvalidArgument;
    }
    if ((unsigned)a->op > (unsigned)ncclAvg) {
        set_last(c, "%s: reduction %d is not emulated", call, (int)a->op);
        return ncclInvalidArgument;
    }
    if (a->count > (size_t)0x7fffffff) {
        set_last(c, "%s: count %zu too large for the emulation", call, a->count);
        return ncclInvalidArgument;
    }
    if ((a->send || send_elems) && emu_check(a->send, send_elems * es, EMU_DEVICE, call, "sendbuff"))
        return ncclInvalidArgument;
    /* ncclReduce's recvbuff matters on the root only */
    if ((a->kind != C_REDUCE || recv_elems) &&
        emu_check(a->recv, recv_elems * es, EMU_DEVICE, call, "recvbuff"))
        return ncclInvalidArgument;
    cudaError_t e = emu_submit_fn(s, call, run_coll, a, sizeof *a, OP_COLLECTIVE);
    if (e != cudaSuccess) {
        set_last(c, "%s: enqueuing on the stream: %s", call, cudaGetErrorString(e));
        return ncclUnhandledCudaError;
    }
    return in_group(c);
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s)
{
    coll_t a = {comm, C_ALLREDUCE, 0, send, recv, count, dt, op};
    return enqueue("ncclAllReduce", &a, count, count, s);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root,
                           ncclComm_t comm, cudaStream_t s)
{
    if (comm && comm->magic == COMM_MAGIC && (root < 0 || root >= comm->nranks)) {
        set_last(comm, "ncclBroadcast: root %d of %d ranks", root, comm->nranks);
        return ncclInvalidArgument;
    }
    coll_t a = {comm, C_BCAST, root, send, recv, count, dt, ncclSum};
    int is_root = comm && comm->magic == COMM_MAGIC && comm->rank == root;
    return enqueue("ncclBroadcast", &a, is_root ? count : 0, count, s);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t dt,
                           ncclComm_t comm, cudaStream_t s)
{
    coll_t a = {comm, C_ALLGATHER, 0, send, recv, sendcount, dt, ncclSum};
    size_t n = comm && comm->magic == COMM_MAGIC ? (size_t)comm->nranks : 1;
    return enqueue("ncclAllGather", &a, sendcount, sendcount * n, s);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t dt,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t s)
{
    coll_t a = {comm, C_REDUCE_SCATTER, 0, send, recv, recvcount, dt, op};
    size_t n = comm && comm->magic == COMM_MAGIC ? (size_t)comm->nranks : 1;
    return enqueue("ncclReduceScatter", &a, recvcount * n, recvcount, s);
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t dt,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t s)
{
    if (comm && comm->magic == COMM_MAGIC && (root < 0 || root >= comm->nranks)) {
        set_last(comm, "ncclReduce: root %d of %d ranks", root, comm->nranks);
        return ncclInvalidArgument;
    }
    coll_t a = {comm, C_REDUCE, root, send, recv, count, dt, op};
    int is_root = comm && comm->magic == COMM_MAGIC && comm->rank == root;
    return enqueue("ncclReduce", &a, count, is_root ? count : 0, s);
}

/* ------------------------------------------------------------------ point-to-point, groups */

/* One send or receive: count elements of dt to or from peer (a rank of the
 * communicator). count is checked to fit an int at the call. */
typedef struct {
    void *buf;
    int count, dt, peer, send;
} p2p_item_t;

/* Sends and receives of one communicator on one stream, run as one
 * operation that posts them all, then completes them all. Held by value in
 * the operation's argument (EMU_ARG_MAX), so a graph replays it as is: at
 * most P2P_MAX per communicator and stream in one group. */
#define P2P_MAX 20
typedef struct {
    struct ncclComm *comm; /* first: cudart.c's begin/end hooks read it */
    int n;
    p2p_item_t it[P2P_MAX];
} p2p_t;
_Static_assert(sizeof(p2p_t) <= EMU_ARG_MAX, "p2p_t must fit an operation's argument");

/* the tag of every send and receive on a communicator's MPI communicator:
 * MPI's order per (source, tag, communicator) is NCCL's matching by order
 * per pair of ranks and communicator */
#define P2P_TAG 7

static void run_p2p(void *arg)
{
    p2p_t *a = arg;
    struct ncclComm *c = a->comm;
    long seq = start_op(c, "send/receive");
    if (!seq)
        return;
    MPI_Request rq[P2P_MAX];
    for (int i = 0; i < a->n; i++) {
        p2p_item_t *p = &a->it[i];
        MPI_Datatype t = mpi_type((ncclDataType_t)p->dt);
        int rc = p->send ? MPI_Isend(p->buf, p->count, t, p->peer, P2P_TAG, c->mc, &rq[i])
                         : MPI_Irecv(p->buf, p->count, t, p->peer, P2P_TAG, c->mc, &rq[i]);
        if (rc != MPI_SUCCESS) {
            set_last(c, "MPI failed under the emulated NCCL send/receive #%ld", seq);
            __atomic_store_n(&c->async_err, ncclSystemError, __ATOMIC_SEQ_CST);
            __atomic_add_fetch(&abandoned, i, __ATOMIC_SEQ_CST); /* those posted */
            return;
        }
    }
    for (int i = 0; i < a->n; i++)
        if (!finish(c, &rq[i])) {
            __atomic_add_fetch(&abandoned, a->n - 1 - i, __ATOMIC_SEQ_CST);
            return;
        }
}

/* The calling thread's group (ncclGroupStart nests): its depth, the sends
 * and receives collected for the outermost ncclGroupEnd (entries with
 * it.count < 0 only name a communicator a collective in the group used,
 * for its ncclInProgress answers), and the first error of a call in it. */
typedef struct {
    struct ncclComm *comm;
    cudaStream_t s;
    p2p_item_t it;
} pending_t;
static __thread int group_depth;
static __thread pending_t *pend;
static __thread int npend, cap_pend;
static __thread ncclResult_t group_err;

static ncclResult_t pend_add(struct ncclComm *c, cudaStream_t s, const p2p_item_t *it)
{
    if (npend == cap_pend) {
        int cap = cap_pend ? 2 * cap_pend : 16;
        pending_t *p = realloc(pend, (size_t)cap * sizeof *p);
        if (!p)
            return ncclSystemError;
        pend = p;
        cap_pend = cap;
    }
    pend[npend++] = (pending_t){c, s, *it};
    return ncclSuccess;
}

/* After a call enqueued work on c: inside a group, ncclSuccess (the
 * group's end answers for c); outside, in_progress. */
static ncclResult_t in_group(struct ncclComm *c)
{
    if (group_depth == 0)
        return in_progress(c);
    p2p_item_t touch = {NULL, -1, 0, 0, 0};
    ncclResult_t r = pend_add(c, NULL, &touch);
    if (r != ncclSuccess && group_err == ncclSuccess)
        group_err = r;
    return r;
}

/* A call inside a group that fails makes the group's end fail (NCCL's). */
static ncclResult_t group_fail(ncclResult_t r)
{
    if (group_depth > 0 && group_err == ncclSuccess)
        group_err = r;
    return r;
}

static ncclResult_t p2p(const char *call, void *buf, size_t count, ncclDataType_t dt, int peer,
                        struct ncclComm *c, cudaStream_t s, int send)
{
    ncclResult_t r = check_comm(c, call);
    if (r != ncclSuccess)
        return group_fail(r);
    size_t es = type_size(dt);
    if (!es || mpi_type(dt) == MPI_DATATYPE_NULL) {
        set_last(c, "%s: data type %d is not emulated", call, (int)dt);
        return group_fail(ncclInvalidArgument);
    }
    if (count > (size_t)0x7fffffff) {
        set_last(c, "%s: count %zu too large for the emulation", call, count);
        return group_fail(ncclInvalidArgument);
    }
    if (peer < 0 || peer >= c->nranks) {
        set_last(c, "%s: peer %d is not a rank of this communicator (%d ranks)", call, peer,
                 c->nranks);
        return group_fail(ncclInvalidArgument);
    }
    if (peer == c->rank && group_depth == 0) {
        set_last(c, "%s: to or from rank %d itself outside a group: it could never complete "
                    "(pair it with its receive or send in ncclGroupStart/End)", call, peer);
        return ncclInvalidUsage;
    }
    if (emu_check(buf, count * es, EMU_DEVICE, call, send ? "sendbuff" : "recvbuff"))
        return group_fail(ncclInvalidArgument);
    p2p_item_t it = {buf, (int)count, (int)dt, peer, send};
    if (group_depth > 0)
        return group_fail(pend_add(c, s, &it));
    p2p_t a = {c, 1, {it}};
    cudaError_t e = emu_submit_fn(s, call, run_p2p, &a, sizeof a, OP_COLLECTIVE);
    if (e != cudaSuccess) {
        set_last(c, "%s: enqueuing on the stream: %s", call, cudaGetErrorString(e));
        return ncclUnhandledCudaError;
    }
    return in_progress(c);
}

ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t s)
{
    return p2p("ncclSend", (void *)send, count, dt, peer, comm, s, 1);
}

ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t s)
{
    return p2p("ncclRecv", recv, count, dt, peer, comm, s, 0);
}

ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

/* The outermost end: the collected sends and receives as one operation per
 * (communicator, stream), enqueued in the order of their first call; then
 * ncclInProgress if a non-blocking communicator of the group answers so. */
ncclResult_t ncclGroupEnd(void)
{
    if (group_depth <= 0) {
        set_last(NULL, "ncclGroupEnd without ncclGroupStart");
        return ncclInvalidUsage;
    }
    if (--group_depth > 0)
        return ncclSuccess;
    ncclResult_t r = group_err;
    group_err = ncclSuccess;
    for (int i = 0; i < npend && r == ncclSuccess; i++) {
        if (pend[i].it.count < 0 || !pend[i].comm)
            continue;
        struct ncclComm *c = pend[i].comm;
        cudaStream_t s = pend[i].s;
        p2p_t a = {c, 0, {{0}}};
        for (int j = i; j < npend; j++)
            if (pend[j].comm == c && pend[j].s == s && pend[j].it.count >= 0) {
                if (a.n == P2P_MAX) {
                    set_last(c, "ncclGroupEnd: more than %d sends and receives on one "
                                "communicator and stream in one group (the emulation's limit)",
                             P2P_MAX);
                    r = ncclInvalidUsage;
                    break;
                }
                a.it[a.n++] = pend[j].it;
                if (j > i)
                    pend[j].it.count = -1; /* taken; the entry still names c */
            }
        pend[i].it.count = -1;
        if (r != ncclSuccess)
            break;
        cudaError_t e = emu_submit_fn(s, "ncclGroupEnd", run_p2p, &a, sizeof a, OP_COLLECTIVE);
        if (e != cudaSuccess) {
            set_last(c, "ncclGroupEnd: enqueuing on the stream: %s", cudaGetErrorString(e));
            r = ncclUnhandledCudaError;
        }
    }
    /* every non-blocking communicator of the group answers for it */
    for (int i = 0; i < npend && (r == ncclSuccess || r == ncclInProgress); i++) {
        struct ncclComm *c = pend[i].comm;
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = pend[j].comm == c;
        if (!seen && in_progress(c) == ncclInProgress)
            r = ncclInProgress;
    }
    npend = 0;
    return r;
}

/* ------------------------------------------------------------------ lifecycle */

ncclResult_t ncclGetVersion(int *v)
{
    if (!v)
        return ncclInvalidArgument;
    *v = NCCL_VERSION_CODE;
    return ncclSuccess;
}

/* The unique id (128 opaque bytes): [0, 32) random, [32, 40) the marker
 * "ddpc-emu", then the creator's world rank and its serial (int32 each,
 * host order: one machine's build). The creator collects the ranks at init
 * over MPI_COMM_WORLD with the tag ID_TAG(serial), a range nothing else
 * there uses (ddpc's own traffic is on a duplicate of the world). */
#define ID_MARK 32
#define ID_CREATOR 40
#define ID_SERIAL 44
#define ID_TAG(serial) (20000 + (int)((unsigned)(serial) % 8192u))
static unsigned id_serial; /* ids this process made (atomic) */

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id)
        return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        set_last(NULL, "ncclGetUniqueId: the emulated NCCL runs over MPI, which this process has "
                       "not initialized (launch with mpiexec or srun --mpi=pmi2)");
        return ncclSystemError;
    }
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(id->internal, 1, 32, f) : 0;
    if (f)
        fclose(f);
    if (got != 32)
        return ncclSystemError;
    memcpy(id->internal + ID_MARK, "ddpc-emu", 8);
    int32_t creator = 0, serial = (int32_t)__atomic_add_fetch(&id_serial, 1, __ATOMIC_SEQ_CST);
    MPI_Comm_rank(MPI_COMM_WORLD, &creator);
    memcpy(id->internal + ID_CREATOR, &creator, sizeof creator);
    memcpy(id->internal + ID_SERIAL, &serial, sizeof serial);
    return ncclSuccess;
}

/* what each member tells the id's creator at init */
typedef struct {
    int rank, nranks, world, device;
    char host[64];
} join_t;

/* the creator's answer: a status and its message, then the world rank of
 * each nccl rank (int[nranks]) */
typedef struct {
    int status;
    char msg[256];
} verdict_t;

/* Duplicate GPU among n members' (host, device): NCCL's message in msg. */
static int dup_gpu(const join_t *all, int n, char *msg, size_t size)
{
    for (int a = 0; a < n; a++)
        for (int b = 0; b < a; b++)
            if (all[a].device == all[b].device && !strcmp(all[a].host, all[b].host)) {
                snprintf(msg, size, "Duplicate GPU detected : rank %d and rank %d both on CUDA "
                                    "device %d (emulated)", all[b].rank, all[a].rank, all[a].device);
                return 1;
            }
    return 0;
}

/* Seconds a member waits for the creator's answer, and the creator for the
 * members (DDPC_EMU_NCCL_INIT_TIMEOUT, default 60): a rank that never
 * joins, or an id's creator that is not a member, fails init clearly
 * instead of hanging. */
static double init_timeout_s(void)
{
    const char *v = getenv("DDPC_EMU_NCCL_INIT_TIMEOUT");
    double t = v && *v ? atof(v) : 60;
    return t > 0 ? t : 60;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Complete rq by the deadline; otherwise cancel it and return 0. */
static int wait_until(MPI_Request *rq, double deadline, MPI_Status *st)
{
    for (;;) {
        int flag = 0;
        MPI_Test(rq, &flag, st);
        if (flag)
            return 1;
        if (mono_s() > deadline) {
            MPI_Cancel(rq);
            MPI_Wait(rq, MPI_STATUS_IGNORE);
            return 0;
        }
        usleep(50);
    }
}

/* The creator's side of init: collect nranks - 1 joins, check them, answer
 * each. world[nranks] gets the table; msg the error, if any. */
static ncclResult_t collect(const join_t *mine, int tag, int *world, char *msg, size_t size)
{
    int n = mine->nranks;
    join_t *all = calloc((size_t)n, sizeof *all);
    int *from = calloc((size_t)n, sizeof *from);
    char *reply = calloc(1, sizeof(verdict_t) + (size_t)n * sizeof(int));
    if (!all || !from || !reply) {
        free(all), free(from), free(reply);
        snprintf(msg, size, "ncclCommInitRankConfig: out of memory");
        return ncclSystemError;
    }
    ncclResult_t r = ncclSuccess;
    all[0] = *mine;
    int got = 1;
    double deadline = mono_s() + init_timeout_s();
    for (; got < n; got++) {
        MPI_Request rq;
        MPI_Status st;
        MPI_Irecv(&all[got], sizeof *all, MPI_BYTE, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &rq);
        if (!wait_until(&rq, deadline, &st)) {
            snprintf(msg, size, "ncclCommInitRankConfig: %d of %d rank(s) joined within %.0fs "
                                "(DDPC_EMU_NCCL_INIT_TIMEOUT)", got, n, init_timeout_s());
            r = ncclSystemError;
            break;
        }
        from[got] = st.MPI_SOURCE;
    }
    for (int i = 0; i < n; i++)
        world[i] = -1;
    for (int i = 0; r == ncclSuccess && i < got; i++) {
        const join_t *j = &all[i];
        if (j->nranks != n) {
            snprintf(msg, size, "ncclCommInitRankConfig: world rank %d gave nranks %d, world rank "
                                "%d (the id's creator) %d", j->world, j->nranks, mine->world, n);
            r = ncclInvalidUsage;
        } else if (world[j->rank] >= 0) {
            snprintf(msg, size, "ncclCommInitRankConfig: world ranks %d and %d both gave rank %d",
                     world[j->rank], j->world, j->rank);
            r = ncclInvalidUsage;
        } else {
            world[j->rank] = j->world;
        }
    }
    if (r == ncclSuccess && dup_gpu(all, n, msg, size))
        r = ncclInvalidUsage;
    verdict_t *v = (verdict_t *)reply;
    v->status = (int)r;
    snprintf(v->msg, sizeof v->msg, "%s", r == ncclSuccess ? "" : msg);
    memcpy(reply + sizeof *v, world, (size_t)n * sizeof(int));
    for (int i = 1; i < got; i++)
        MPI_Send(reply, (int)(sizeof *v + (size_t)n * sizeof(int)), MPI_BYTE, from[i], tag,
                 MPI_COMM_WORLD);
    free(all), free(from), free(reply);
    return r;
}

/* A member's side: tell the creator, wait for its table. */
static ncclResult_t join(const join_t *mine, int creator, int tag, int *world, char *msg,
                         size_t size)
{
    int n = mine->nranks;
    size_t bytes = sizeof(verdict_t) + (size_t)n * sizeof(int);
    char *reply = calloc(1, bytes);
    if (!reply) {
        snprintf(msg, size, "ncclCommInitRankConfig: out of memory");
        return ncclSystemError;
    }
    MPI_Request rq;
    MPI_Irecv(reply, (int)bytes, MPI_BYTE, creator, tag, MPI_COMM_WORLD, &rq);
    MPI_Send(mine, sizeof *mine, MPI_BYTE, creator, tag, MPI_COMM_WORLD);
    if (!wait_until(&rq, mono_s() + init_timeout_s(), MPI_STATUS_IGNORE)) {
        free(reply);
        snprintf(msg, size, "ncclCommInitRankConfig: no answer within %.0fs from world rank %d, "
                            "which made the unique id: the emulation gathers the ranks at the "
                            "id's creator, which must be a rank of the communicator "
                            "(DDPC_EMU_NCCL_INIT_TIMEOUT)", init_timeout_s(), creator);
        return ncclInvalidUsage;
    }
    verdict_t *v = (verdict_t *)reply;
    ncclResult_t r = (ncclResult_t)v->status;
    if (r != ncclSuccess)
        snprintf(msg, size, "%s", v->msg);
    else
        memcpy(world, reply + sizeof *v, (size_t)n * sizeof(int));
    free(reply);
    return r;
}

static int check_config(const ncclConfig_t *cfg, const char *call)
{
    if (cfg && (cfg->magic != 0xcafebeef || cfg->size != sizeof(ncclConfig_t))) {
        emu_violation("%s: the config was not initialized with NCCL_CONFIG_INITIALIZER", call);
        return 0;
    }
    return 1;
}

/* A new communicator on mc (its rank and size are the communicator's). */
static struct ncclComm *comm_new(MPI_Comm mc, int blocking)
{
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->magic = COMM_MAGIC;
    c->mc = mc;
    MPI_Comm_rank(mc, &c->rank);
    MPI_Comm_size(mc, &c->nranks);
    c->device = emu_current_device();
    c->blocking = blocking;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank);
    c->hang_at = hook("DDPC_EMU_NCCL_HANG", c->world_rank);
    c->fail_at = hook("DDPC_EMU_NCCL_FAIL", c->world_rank);
    pthread_mutex_lock(&L);
    c->next = comms;
    comms = c;
    pthread_mutex_unlock(&L);
    return c;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *cfg)
{
    if (!out)
        return ncclInvalidArgument;
    *out = NULL;
    if (!check_config(cfg, "ncclCommInitRankConfig"))
        return ncclInvalidArgument;
    if (memcmp(id.internal + ID_MARK, "ddpc-emu", 8) != 0) {
        set_last(NULL, "ncclCommInitRankConfig: the unique id is not one ncclGetUniqueId made");
        return ncclInvalidArgument;
    }
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        set_last(NULL, "ncclCommInitRankConfig: rank %d of %d", rank, nranks);
        return ncclInvalidArgument;
    }
    int inited = 0, level = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        set_last(NULL, "the emulated NCCL runs over MPI, which this process has not "
                       "initialized (launch with mpiexec or srun --mpi=pmi2)");
        return ncclSystemError;
    }
    MPI_Query_thread(&level);
    if (level < MPI_THREAD_MULTIPLE) {
        set_last(NULL, "the emulated NCCL needs MPI_THREAD_MULTIPLE (its streams are threads)");
        return ncclSystemError;
    }
    int32_t creator, serial;
    memcpy(&creator, id.internal + ID_CREATOR, sizeof creator);
    memcpy(&serial, id.internal + ID_SERIAL, sizeof serial);
    int wsize = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    if (creator < 0 || creator >= wsize) {
        set_last(NULL, "ncclCommInitRankConfig: the unique id's creator, world rank %d, is not "
                       "in this world of %d", (int)creator, wsize);
        return ncclInvalidArgument;
    }
    join_t mine = {rank, nranks, 0, emu_current_device(), {0}};
    MPI_Comm_rank(MPI_COMM_WORLD, &mine.world);
    if (nranks == 1 && mine.world != creator) {
        set_last(NULL, "ncclCommInitRankConfig: a communicator of 1 rank from world rank %d's "
                       "unique id: the emulation gathers the ranks at the id's creator, which "
                       "must be a rank of the communicator", (int)creator);
        return ncclInvalidUsage;
    }
    gethostname(mine.host, sizeof mine.host - 1);
    int *world = calloc((size_t)nranks, sizeof *world);
    if (!world)
        return ncclSystemError;
    int tag = ID_TAG(serial);
    ncclResult_t r = mine.world == creator
                         ? collect(&mine, tag, world, global_last, sizeof global_last)
                         : join(&mine, creator, tag, world, global_last, sizeof global_last);
    MPI_Comm mc = MPI_COMM_NULL;
    if (r == ncclSuccess) {
        MPI_Group wg, g;
        MPI_Comm_group(MPI_COMM_WORLD, &wg);
        MPI_Group_incl(wg, nranks, world, &g);
        int rc = MPI_Comm_create_group(MPI_COMM_WORLD, g, tag, &mc);
        MPI_Group_free(&g);
        MPI_Group_free(&wg);
        if (rc != MPI_SUCCESS || mc == MPI_COMM_NULL) {
            set_last(NULL, "ncclCommInitRankConfig: MPI_Comm_create_group failed");
            r = ncclSystemError;
        }
    }
    free(world);
    if (r != ncclSuccess)
        return r;
    struct ncclComm *c = comm_new(mc, !cfg || cfg->blocking == NCCL_CONFIG_UNDEF_INT ||
                                          cfg->blocking != 0);
    if (!c) {
        MPI_Comm_free(&mc);
        return ncclSystemError;
    }
    if (c->rank != rank || c->nranks != nranks) { /* the table said otherwise: a bug here */
        set_last(NULL, "ncclCommInitRankConfig: rank %d of %d in MPI, %d of %d asked", c->rank,
                 c->nranks, rank, nranks);
        ncclCommDestroy(c);
        return ncclInternalError;
    }
    *out = c;
    return in_progress(c);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *cfg)
{
    if (newcomm)
        *newcomm = NULL;
    ncclResult_t r = check_comm(comm, "ncclCommSplit");
    if (r != ncclSuccess)
        return r;
    if (!newcomm) {
        set_last(comm, "ncclCommSplit: newcomm is NULL");
        return ncclInvalidArgument;
    }
    if (!check_config(cfg, "ncclCommSplit"))
        return ncclInvalidArgument;
    int n = __atomic_load_n(&comm->inflight, __ATOMIC_SEQ_CST);
    if (n > 0) {
        emu_violation("ncclCommSplit of a communicator with %d operation(s) in flight: its MPI "
                      "communicator is busy on a stream's thread; synchronize the streams first",
                      n);
        return ncclInvalidUsage;
    }
    /* a negative color other than NOCOLOR is refused here, after taking
       part as NOCOLOR, so that the other ranks' split still completes */
    int mcolor = color;
    if (color == NCCL_SPLIT_NOCOLOR || color < 0) {
        if (color != NCCL_SPLIT_NOCOLOR) {
            set_last(comm, "ncclCommSplit: color %d (a color is >= 0, or NCCL_SPLIT_NOCOLOR)",
                     color);
            r = ncclInvalidArgument;
        }
        mcolor = MPI_UNDEFINED;
    }
    MPI_Comm mc = MPI_COMM_NULL;
    if (MPI_Comm_split(comm->mc, mcolor, key, &mc) != MPI_SUCCESS) {
        set_last(comm, "ncclCommSplit: MPI_Comm_split failed");
        return ncclSystemError;
    }
    if (r != ncclSuccess || mc == MPI_COMM_NULL)
        return r != ncclSuccess ? r : in_progress(comm);
    int blocking = !cfg ? comm->blocking
                        : cfg->blocking == NCCL_CONFIG_UNDEF_INT || cfg->blocking != 0;
    int size = 0;
    MPI_Comm_size(mc, &size);
    join_t mine = {0, size, comm->world_rank, emu_current_device(), {0}};
    MPI_Comm_rank(mc, &mine.rank);
    gethostname(mine.host, sizeof mine.host - 1);
    join_t *all = calloc((size_t)size, sizeof *all);
    if (!all || MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, mc) !=
                    MPI_SUCCESS) {
        free(all);
        MPI_Comm_free(&mc);
        set_last(comm, "ncclCommSplit: gathering the new communicator's devices failed");
        return ncclSystemError;
    }
    if (dup_gpu(all, size, comm->last, sizeof comm->last)) {
        snprintf(global_last, sizeof global_last, "%s", comm->last);
        free(all);
        MPI_Comm_free(&mc);
        return ncclInvalidUsage;
    }
    free(all);
    struct ncclComm *c = comm_new(mc, blocking);
    if (!c) {
        MPI_Comm_free(&mc);
        return ncclSystemError;
    }
    *newcomm = c;
    /* both answer ncclInProgress for some polls where non-blocking */
    ncclResult_t pr = in_progress(comm), cr = in_progress(c);
    return pr == ncclInProgress || cr == ncclInProgress ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank)
{
    return ncclCommInitRankConfig(out, nranks, id, rank, NULL);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err)
{
    if (!c || c->magic != COMM_MAGIC || !err)
        return ncclInvalidArgument;
    ncclResult_t a = __atomic_load_n(&c->async_err, __ATOMIC_SEQ_CST);
    if (a != ncclSuccess) {
        *err = a;
        return ncclSuccess;
    }
    int left = __atomic_load_n(&c->polls, __ATOMIC_SEQ_CST); /* the watchdog polls too */
    while (left > 0 && !__atomic_compare_exchange_n(&c->polls, &left, left - 1, 0,
                                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        ;
    if (left > 0) {
        *err = ncclInProgress;
        return ncclSuccess;
    }
    /* finalize is in progress until what was enqueued has ended */
    if (c->finalized && __atomic_load_n(&c->inflight, __ATOMIC_SEQ_CST) > 0) {
        *err = ncclInProgress;
        return ncclSuccess;
    }
    *err = ncclSuccess;
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c)
{
    ncclResult_t r = check_comm(c, "ncclCommFinalize");
    if (r != ncclSuccess)
        return r;
    c->finalized = 1;
    if (c->blocking) {
        while (__atomic_load_n(&c->inflight, __ATOMIC_SEQ_CST) > 0 &&
               !__atomic_load_n(&c->async_err, __ATOMIC_SEQ_CST))
            usleep(100);
        return __atomic_load_n(&c->async_err, __ATOMIC_SEQ_CST);
    }
    in_progress(c);
    return ncclInProgress;
}

static void unlink_comm(struct ncclComm *c)
{
    pthread_mutex_lock(&L);
    for (struct ncclComm **pp = &comms; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    pthread_mutex_unlock(&L);
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    if (!c)
        return ncclSuccess;
    if (c->magic != COMM_MAGIC) {
        emu_violation("ncclCommDestroy: %p is not a live NCCL communicator", (void *)c);
        return ncclInvalidArgument;
    }
    if (!c->aborted && __atomic_load_n(&c->inflight, __ATOMIC_SEQ_CST) > 0) {
        emu_violation("ncclCommDestroy with %d collective(s) in flight: finalize first, or abort",
                      c->inflight);
        return ncclInvalidUsage;
    }
    unlink_comm(c);
    if (!c->aborted)
        MPI_Comm_free(&c->mc);
    c->magic = 0; /* the memory stays: a stream op of an aborted comm may still read it */
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
    if (!c)
        return ncclSuccess;
    if (c->magic != COMM_MAGIC) {
        emu_violation("ncclCommAbort: %p is not a live NCCL communicator", (void *)c);
        return ncclInvalidArgument;
    }
    __atomic_store_n(&c->aborted, 1, __ATOMIC_SEQ_CST);
    unlink_comm(c);
    c->magic = 0;
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t c, int *n)
{
    if (!c || c->magic != COMM_MAGIC || !n)
        return ncclInvalidArgument;
    *n = c->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t c, int *r)
{
    if (!c || c->magic != COMM_MAGIC || !r)
        return ncclInvalidArgument;
    *r = c->rank;
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t c, int *d)
{
    if (!c || c->magic != COMM_MAGIC || !d)
        return ncclInvalidArgument;
    *d = c->device;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t c)
{
    if (c && c->magic == COMM_MAGIC && c->last[0])
        return c->last;
    return global_last;
}
