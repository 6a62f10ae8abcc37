/* comm.c: the MPI backend of the communicator. Every collective, blocking or
 * not, is queued to one progress thread per communicator that issues it on a
 * private MPI communicator, so the order is the call order on every rank and
 * the caller's thread (the backward pass) keeps computing. Waits time out
 * with a message naming the operation. The NCCL backend is src/comm/nccl.c. */
#include "config.h"
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MOD "comm"

typedef enum { OP_ALLREDUCE, OP_BCAST, OP_ALLGATHER, OP_REDUCE_SCATTER, OP_BARRIER } op_kind_t;
static const char *const op_names[] = {"allreduce", "broadcast", "allgather", "reduce_scatter",
                                       "barrier"};

struct ddpc_work {
    struct ddpc_work *next;
    struct ddpc_comm *comm;
    op_kind_t kind;
    const void *send;
    void *recv;
    size_t count;
    ddpc_dtype_t dt;
    ddpc_redop_t op;
    int root;
    uint64_t seq;
    int done;
    int waited;     /* a thread sleeps in ddpc_work_wait on it */
    ddpc_status_t status;
    char err[DDPC_ERRMSG_LEN];
};

struct ddpc_comm {
    ddpc_t rt;
    MPI_Comm mpi;
    int rank, size;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t has_work, work_done;
    struct ddpc_work *head, *tail;
    int stop, thread_started;
    uint64_t seq;           /* next sequence number to hand out */
    MPI_Op half_sum[2];     /* bf16, f16 sum as user ops */
};

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

static MPI_Op mpi_op(const struct ddpc_comm *c, ddpc_dtype_t dt, ddpc_redop_t op)
{
    if (dt == DDPC_BF16 || dt == DDPC_F16)
        return (op == DDPC_SUM || op == DDPC_AVG) ? c->half_sum[dt == DDPC_F16] : MPI_OP_NULL;
    switch (op) {
    case DDPC_SUM:
    case DDPC_AVG: return MPI_SUM;
    case DDPC_MIN: return MPI_MIN;
    case DDPC_MAX: return MPI_MAX;
    default: return MPI_OP_NULL;
    }
}

/* Floats are scaled in blocks of a fixed length, which compilers vectorize at
 * -O2 (a plain loop of unknown length stays scalar with gcc 12's -O2 cost
 * model: one divss per element, 4.9 GB/s, a quarter of a 64 MiB all-reduce's
 * time; bench/ddp_bench allreduce), and on x86-64 in an AVX-512 and an AVX2
 * clone picked at load time (a 1 MiB bucket, in cache after its all-reduce:
 * 38 us with SSE, 11 us with AVX-512). Same results bit for bit: an IEEE
 * division is exact-then-rounded whatever the vector width, and when size is
 * a power of two x * (1/size) is the same exact-then-rounded value as x / size. */
#define BLOCK 16
#if defined(__x86_64__) && defined(__ELF__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef VECTOR_CLONES
#define VECTOR_CLONES
#endif

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
static void divide(void *buf, size_t count, ddpc_dtype_t dt, int size)
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

/* ------------------------------------------------------------------ progress thread */

/* MPI counts are int: large operations go in pieces of at most 1 Gi elements. */
#define CHUNK ((size_t)1 << 30)

/* All-reduces go in pieces of at most 4 MiB: MPICH 4.0.2 all-reduces 64 MiB
 * in one call at about half the speed of the same bytes in 1-4 MiB calls
 * (shared memory and TCP alike), and AVG's /N pass then finds each piece
 * still in cache instead of streaming the whole buffer from memory again
 * (bench/ddp_bench allreduce; doc/ddp.md, Performance). Pieces are the same
 * on every rank, so results stay identical across ranks. */
#define PIECE_BYTES ((size_t)4 << 20)

static int run_mpi(struct ddpc_comm *c, struct ddpc_work *w)
{
    MPI_Datatype t = mpi_type(w->dt);
    size_t es = ddpc_dtype_size(w->dt);
    int rc = MPI_SUCCESS;
    switch (w->kind) {
    case OP_ALLREDUCE: {
        const size_t piece = PIECE_BYTES / es;
        for (size_t off = 0; off < w->count && rc == MPI_SUCCESS; off += piece) {
            size_t n = w->count - off < piece ? w->count - off : piece;
            const void *s = w->send == w->recv ? MPI_IN_PLACE : (const char *)w->send + off * es;
            char *r = (char *)w->recv + off * es;
            rc = MPI_Allreduce(s, r, (int)n, t, mpi_op(c, w->dt, w->op), c->mpi);
            if (rc == MPI_SUCCESS && w->op == DDPC_AVG && c->size > 1)
                divide(r, n, w->dt, c->size); /* while the piece is in cache */
        }
        break;
    }
    case OP_BCAST:
        for (size_t off = 0; off < w->count && rc == MPI_SUCCESS; off += CHUNK) {
            size_t n = w->count - off < CHUNK ? w->count - off : CHUNK;
            rc = MPI_Bcast((char *)w->recv + off * es, (int)n, t, w->root, c->mpi);
        }
        break;
    case OP_ALLGATHER:
        rc = MPI_Allgather(w->send, (int)w->count, t, w->recv, (int)w->count, t, c->mpi);
        break;
    case OP_REDUCE_SCATTER:
        rc = MPI_Reduce_scatter_block(w->send, w->recv, (int)w->count, t,
                                      mpi_op(c, w->dt, w->op), c->mpi);
        if (rc == MPI_SUCCESS && w->op == DDPC_AVG && c->size > 1)
            divide(w->recv, w->count, w->dt, c->size);
        break;
    case OP_BARRIER: rc = MPI_Barrier(c->mpi); break;
    }
    return rc;
}

static void *progress_main(void *arg)
{
    struct ddpc_comm *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->head && !c->stop)
            pthread_cond_wait(&c->has_work, &c->mu);
        if (!c->head)
            break; /* stop requested and nothing left */
        struct ddpc_work *w = c->head;
        pthread_mutex_unlock(&c->mu);

        int rc = run_mpi(c, w);

        pthread_mutex_lock(&c->mu);
        if (rc != MPI_SUCCESS) {
            char s[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(rc, s, &len);
            w->status = DDPC_ERR_MPI;
            snprintf(w->err, sizeof w->err, "%s #%llu failed: %s", op_names[w->kind],
                     (unsigned long long)w->seq, s);
        }
        c->head = w->next;
        if (!c->head)
            c->tail = NULL;
        w->done = 1;
        /* wake waiters only for what they wait for: ddpc_ddp_wait sleeps on
         * its last operation, and a wake-up per earlier bucket would take the
         * core from this thread on a machine without a spare one */
        if (w->waited)
            pthread_cond_broadcast(&c->work_done);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

ddpc_status_t ddpc_comm_create_world(ddpc_t rt, struct ddpc_comm **out)
{
    struct ddpc_comm *c = calloc(1, sizeof *c);
    if (!c)
        return ddpc_err(rt, DDPC_ERR_NOMEM, MOD, "cannot allocate the world communicator");
    c->rt = rt;
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi);
    if (rc != MPI_SUCCESS) {
        free(c);
        return ddpc_mpi_err(rt, rc, MOD, "MPI_Comm_dup");
    }
    MPI_Comm_rank(c->mpi, &c->rank);
    MPI_Comm_size(c->mpi, &c->size);
    MPI_Op_create(bf16_sum, 1, &c->half_sum[0]);
    MPI_Op_create(f16_sum, 1, &c->half_sum[1]);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->has_work, NULL);
    pthread_cond_init(&c->work_done, NULL);
    if (pthread_create(&c->thread, NULL, progress_main, c) != 0) {
        ddpc_comm_destroy(c);
        return ddpc_err(rt, DDPC_ERR_INTERNAL, MOD, "cannot start the progress thread");
    }
    c->thread_started = 1;
    *out = c;
    return DDPC_OK;
}

void ddpc_comm_destroy(struct ddpc_comm *c)
{
    if (!c)
        return;
    if (c->thread_started) {
        pthread_mutex_lock(&c->mu);
        c->stop = 1;
        pthread_cond_signal(&c->has_work);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->thread, NULL);
    }
    MPI_Op_free(&c->half_sum[0]);
    MPI_Op_free(&c->half_sum[1]);
    MPI_Comm_free(&c->mpi);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->has_work);
    pthread_cond_destroy(&c->work_done);
    free(c);
}

/* ------------------------------------------------------------------ public calls */

ddpc_comm_t ddpc_comm_world(ddpc_t rt) { return rt ? rt->world_comm : NULL; }
int ddpc_comm_rank(ddpc_comm_t c) { return c ? c->rank : -1; }
int ddpc_comm_size(ddpc_comm_t c) { return c ? c->size : -1; }
ddpc_backend_t ddpc_comm_backend(ddpc_comm_t c) { return DDPC_BACKEND_MPI; }
ddpc_t ddpc_comm_runtime(ddpc_comm_t c) { return c ? c->rt : NULL; }

uint64_t ddpc_comm_seq(ddpc_comm_t c)
{
    pthread_mutex_lock(&c->mu);
    uint64_t s = c->seq;
    pthread_mutex_unlock(&c->mu);
    return s;
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
            return ddpc_err(rt, DDPC_ERR_INVALID, MOD, "%s: invalid dtype %d", op_names[kind],
                            (int)dt);
        if (count && (!recv || (kind != OP_BCAST && !send)))
            return ddpc_err(rt, DDPC_ERR_INVALID, MOD, "%s: NULL buffer for %zu elements",
                            op_names[kind], count);
    }
    if ((kind == OP_ALLREDUCE || kind == OP_REDUCE_SCATTER) && mpi_op(c, dt, op) == MPI_OP_NULL)
        return ddpc_err(rt, DDPC_ERR_UNSUPPORTED, MOD, "%s: reduction %d is not supported for %s",
                        op_names[kind], (int)op, ddpc_dtype_name(dt));
    if (kind == OP_BCAST && (root < 0 || root >= c->size))
        return ddpc_err(rt, DDPC_ERR_INVALID, MOD, "broadcast: root %d is not a rank of 0..%d",
                        root, c->size - 1);
    if ((kind == OP_ALLGATHER || kind == OP_REDUCE_SCATTER) && count > (size_t)INT32_MAX)
        return ddpc_err(rt, DDPC_ERR_UNSUPPORTED, MOD, "%s: count %zu exceeds 2^31-1",
                        op_names[kind], count);
    struct ddpc_work *w = calloc(1, sizeof *w);
    if (!w)
        return ddpc_err(rt, DDPC_ERR_NOMEM, MOD, "cannot allocate a work handle");
    *w = (struct ddpc_work){.comm = c, .kind = kind, .send = send, .recv = recv, .count = count,
                            .dt = dt, .op = op, .root = root};
    pthread_mutex_lock(&c->mu);
    w->seq = c->seq++;
    if (c->tail)
        c->tail->next = w;
    else
        c->head = w;
    c->tail = w;
    pthread_cond_signal(&c->has_work);
    pthread_mutex_unlock(&c->mu);
    *out = w;
    return DDPC_OK;
}

ddpc_status_t ddpc_work_test(ddpc_work_t w, int *done)
{
    if (!w || !done)
        return DDPC_ERR_INVALID;
    struct ddpc_comm *c = w->comm;
    pthread_mutex_lock(&c->mu);
    *done = w->done;
    ddpc_status_t st = w->done ? w->status : DDPC_OK;
    pthread_mutex_unlock(&c->mu);
    return st;
}

ddpc_status_t ddpc_work_wait(ddpc_work_t w, double timeout_s)
{
    if (!w)
        return DDPC_ERR_INVALID;
    struct ddpc_comm *c = w->comm;
    if (timeout_s < 0)
        timeout_s = c->rt->cfg.timeout_s;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    double whole = floor(timeout_s);
    dl.tv_sec += (time_t)whole;
    dl.tv_nsec += (long)((timeout_s - whole) * 1e9);
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    w->waited = 1;
    while (!w->done && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&c->work_done, &c->mu, &dl);
    int done = w->done;
    pthread_mutex_unlock(&c->mu);
    if (!done)
        return ddpc_err(c->rt, DDPC_ERR_TIMEOUT, MOD,
                        "%s #%llu (%zu x %s, root %d) did not complete within %gs: another rank "
                        "has not called it (crashed, stuck, or issuing collectives in a different "
                        "order); set DDPC_TIMEOUT to wait longer",
                        op_names[w->kind], (unsigned long long)w->seq, w->count,
                        ddpc_dtype_name(w->dt), w->root, timeout_s);
    ddpc_status_t st = w->status;
    if (st != DDPC_OK)
        ddpc_err(c->rt, st, MOD, "%s", w->err);
    free(w);
    return st;
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

ddpc_status_t ddpc_barrier(ddpc_comm_t c)
{
    return run_blocking(c, OP_BARRIER, NULL, NULL, 0, DDPC_U8, DDPC_SUM, 0);
}
