/* SPDX-License-Identifier: BSD-3-Clause */
/* nccl.c: the NCCL calls ddpc uses, emulated over MPI on the emulated
 * device memory (emu.h). A communicator is an MPI communicator split from
 * MPI_COMM_WORLD by the unique id (so every rank of the world must create
 * it, as ddpc's world communicator does); collectives are operations on
 * the stream given, run in order by its thread as non-blocking MPI calls
 * that an abort interrupts. Non-blocking communicators (config.blocking =
 * 0) answer ncclInProgress for a random number of polls after init,
 * finalize and each collective, and a call before the previous one settled
 * is a violation, so that ddpc's polling is exercised. As NCCL: two ranks
 * on one device of one host are refused, device pointers only, Abort ends
 * what is in flight. Test hooks: DDPC_EMU_NCCL_HANG=RANK:N makes the N-th
 * collective (from 1) of that world rank's communicators never complete;
 * DDPC_EMU_NCCL_FAIL=RANK:N makes it fail asynchronously (ncclRemoteError).
 * Not emulated: NCCL's algorithms and their rounding (MPI's reduction
 * order), point-to-point, splits. */
#define _GNU_SOURCE
#include "emu_internal.h"

#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

enum coll { C_ALLREDUCE, C_BCAST, C_ALLGATHER, C_REDUCE_SCATTER };

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

static void run_coll(void *arg)
{
    coll_t *a = arg;
    struct ncclComm *c = a->comm;
    if (__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST))
        return;
    long seq = __atomic_add_fetch(&c->executed, 1, __ATOMIC_SEQ_CST);
    if (c->hang_at == seq) {
        fprintf(stderr, "ddpc-emu[%d]: NCCL collective #%ld of rank %d never completes "
                "(DDPC_EMU_NCCL_HANG)\n", (int)getpid(), seq, c->rank);
        while (!__atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST))
            usleep(1000);
        return;
    }
    if (c->fail_at == seq) {
        fprintf(stderr, "ddpc-emu[%d]: NCCL collective #%ld of rank %d fails asynchronously "
                "(DDPC_EMU_NCCL_FAIL)\n", (int)getpid(), seq, c->rank);
        set_last(c, "emulated remote failure in collective #%ld (DDPC_EMU_NCCL_FAIL)", seq);
        __atomic_store_n(&c->async_err, ncclRemoteError, __ATOMIC_SEQ_CST);
        return;
    }
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
    if (a->op == ncclAvg && (a->kind == C_ALLREDUCE || a->kind == C_REDUCE_SCATTER))
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
    if (emu_check(a->recv, recv_elems * es, EMU_DEVICE, call, "recvbuff"))
        return ncclInvalidArgument;
    cudaError_t e = emu_submit_fn(s, call, run_coll, a, sizeof *a, OP_COLLECTIVE);
    if (e != cudaSuccess) {
        set_last(c, "%s: enqueuing on the stream: %s", call, cudaGetErrorString(e));
        return ncclUnhandledCudaError;
    }
    return in_progress(c);
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

static int group_depth;
ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void)
{
    if (group_depth <= 0)
        return ncclInvalidUsage;
    group_depth--;
    return ncclSuccess;
}

/* ------------------------------------------------------------------ lifecycle */

ncclResult_t ncclGetVersion(int *v)
{
    if (!v)
        return ncclInvalidArgument;
    *v = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id)
        return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(id->internal, 1, 32, f) : 0;
    if (f)
        fclose(f);
    if (got != 32)
        return ncclSystemError;
    memcpy(id->internal + 32, "ddpc-emu", 8);
    return ncclSuccess;
}

typedef struct {
    char host[64];
    int device;
} who_t;

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *cfg)
{
    if (!out)
        return ncclInvalidArgument;
    *out = NULL;
    if (cfg && (cfg->magic != 0xcafebeef || cfg->size != sizeof(ncclConfig_t))) {
        emu_violation("ncclCommInitRankConfig: the config was not initialized with "
                      "NCCL_CONFIG_INITIALIZER");
        return ncclInvalidArgument;
    }
    if (memcmp(id.internal + 32, "ddpc-emu", 8) != 0) {
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
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c)
        return ncclSystemError;
    c->magic = COMM_MAGIC;
    c->rank = rank;
    c->nranks = nranks;
    c->device = emu_current_device();
    c->blocking = !cfg || cfg->blocking == NCCL_CONFIG_UNDEF_INT || cfg->blocking != 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank);
    c->hang_at = hook("DDPC_EMU_NCCL_HANG", c->world_rank);
    c->fail_at = hook("DDPC_EMU_NCCL_FAIL", c->world_rank);
    uint32_t color = 2166136261u; /* FNV-1a of the id */
    for (int i = 0; i < 32; i++)
        color = (color ^ (unsigned char)id.internal[i]) * 16777619u;
    if (MPI_Comm_split(MPI_COMM_WORLD, (int)(color & 0x3fffffff), rank, &c->mc) != MPI_SUCCESS) {
        free(c);
        return ncclSystemError;
    }
    int size = 0, me = 0;
    MPI_Comm_size(c->mc, &size);
    MPI_Comm_rank(c->mc, &me);
    ncclResult_t r = ncclSuccess;
    if (size != nranks || me != rank) {
        set_last(c, "ncclCommInitRankConfig: %d rank(s) joined with this id, %d expected (or "
                    "two ranks gave the same rank)", size, nranks);
        r = ncclInvalidUsage;
    }
    who_t mine = {{0}, c->device}, *all = calloc((size_t)size, sizeof *all);
    gethostname(mine.host, sizeof mine.host - 1);
    if (r == ncclSuccess && all &&
        MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all, sizeof mine, MPI_BYTE, c->mc) == MPI_SUCCESS) {
        for (int a = 0; a < size && r == ncclSuccess; a++)
            for (int b = 0; b < a; b++)
                if (all[a].device == all[b].device && !strcmp(all[a].host, all[b].host)) {
                    set_last(c, "Duplicate GPU detected : rank %d and rank %d both on CUDA "
                                "device %d (emulated)", b, a, all[a].device);
                    r = ncclInvalidUsage;
                    break;
                }
    }
    free(all);
    if (r != ncclSuccess) {
        snprintf(global_last, sizeof global_last, "%s", c->last);
        MPI_Comm_free(&c->mc);
        free(c);
        return r;
    }
    pthread_mutex_lock(&L);
    c->next = comms;
    comms = c;
    pthread_mutex_unlock(&L);
    *out = c;
    return in_progress(c);
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
