/* SPDX-License-Identifier: BSD-3-Clause */
/* trainer_util.c: the trainer's clock, failures (recorded, agreed on,
 * fatal), and its two outputs: rank 0's lines and the --metrics file. */
#include "trainer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>


double tr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Record this rank's failure; returns -1. */
int tr_fail(trainer_t *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(t->err, sizeof t->err, "trainer[rank %d/%d %s]: ", t->rank, t->size,
                     t->w ? t->w->host : "?");
    vsnprintf(t->err + k, sizeof t->err - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}

/* Collective: the trainer's control messages (the run's agreement, the
 * evaluation and log sums, the stop vote) over all ranks, on the world
 * communicator (MPI). Where MPI is not wired in this launch (srun --mpi=pmix
 * with an MPI without a PMIx client; the nccl backend carries the
 * gradients): through the device communicator once it exists, before that
 * (the few agreements of the setup) through the key exchange (PMIx, whose
 * fences grow dearer with each exchange: not for every step). 0: done. */
int tr_allreduce(trainer_t *t, const void *in, void *out, size_t n, ddpc_dtype_t dt,
                 ddpc_redop_t op)
{
    ddpc_status_t st = t->comm    ? ddpc_allreduce(t->comm, in, out, n, dt, op)
                       : t->dcomm ? ddpc_comm_host_allreduce(t->dcomm, in, out, n, dt, op)
                                  : ddpc_kvs_allreduce(t->rt, in, out, n, dt, op);
    return st != DDPC_OK;
}

/* Collective: 0 when every rank's rc is 0. Otherwise each failing rank prints
 * its message and every rank returns -1, so all stop together. A failing
 * all-reduce leaves no way to agree: the job is aborted, the message saying
 * "trainer: agreement" (a rank that stopped makes the others time out here,
 * between steps: around a checkpoint, at setup). */
int tr_agree(trainer_t *t, int rc)
{
    int32_t mine = rc != 0, any = 0;
    if (tr_allreduce(t, &mine, &any, 1, DDPC_I32, DDPC_MAX))
        tr_fatal(t, "agreement", ddpc_last_error(t->rt));
    if (mine)
        fprintf(stderr, "%s\n", t->err[0] ? t->err : "trainer: failed (no message)");
    return any ? -1 : 0;
}

/* tr_agree() for a check that every rank makes of the same thing (the data
 * files, a shared directory): when rank 0 failed, only rank 0 says why (the
 * others would say the same); else every failing rank does. */
int tr_agree_same(trainer_t *t, int rc)
{
    int32_t mine[2] = {rc != 0, t->rank == 0 && rc != 0}, any[2] = {0, 0};
    if (tr_allreduce(t, mine, any, 2, DDPC_I32, DDPC_MAX))
        tr_fatal(t, "agreement", ddpc_last_error(t->rt));
    if (mine[0] && (t->rank == 0 || !any[1]))
        fprintf(stderr, "%s\n", t->err[0] ? t->err : "trainer: failed (no message)");
    return any[0] ? -1 : 0;
}

/* A failure in the middle of a step cannot be agreed on (the other ranks are
 * in a collective): end the job with the message. */
void tr_fatal(trainer_t *t, const char *what, const char *msg)
{
    /* ddpc_abort prints the rank prefix once (it drops the one msg carries);
     * say `what` only when the library's message does not start with it */
    const char *body = msg;
    if (!strncmp(body, "ddpc[rank ", 10) && strstr(body, "] "))
        body = strstr(body, "] ") + 2;
    size_t n = strlen(what);
    char buf[1200];
    if (!strncmp(body, what, n) && body[n] == ':')
        snprintf(buf, sizeof buf, "trainer: %s", body);
    else
        snprintf(buf, sizeof buf, "trainer: %s: %s", what, body);
    ddpc_abort(t->rt, TRAINER_EXIT_ERROR, buf);
}

void tr_say(trainer_t *t, const char *fmt, ...)
{
    if (t->rank != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

/* --metrics could not be written (errno e): said once; the exit becomes 1 */
void tr_metrics_failed(trainer_t *t, int e)
{
    if (t->metrics_errno)
        return;
    t->metrics_errno = e ? e : EIO;
    fprintf(stderr, "trainer[rank 0/%d %s]: warning: --metrics \"%s\": cannot write: %s; "
            "training goes on, and a run that completes exits 1\n", t->size, t->w->host, t->opt.metrics,
            strerror(t->metrics_errno));
}

void tr_metric(trainer_t *t, const char *fmt, ...)
{
    if (t->rank != 0 || !t->metrics)
        return;
    va_list ap;
    va_start(ap, fmt);
    errno = 0;
    int bad = vfprintf(t->metrics, fmt, ap) < 0;
    va_end(ap);
    bad |= fputc('\n', t->metrics) == EOF;
    bad |= fflush(t->metrics) != 0;
    if (bad || ferror(t->metrics)) {
        tr_metrics_failed(t, errno);
        clearerr(t->metrics);
    }
}

/* s as a JSON string literal, quotes included */
const char *tr_json_str(const char *s, char *buf, size_t n)
{
    size_t k = 0;
    buf[k++] = '"';
    for (; *s && k + 8 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            k += (size_t)snprintf(buf + k, n - k, "\\%c", c);
        else if (c < 0x20)
            k += (size_t)snprintf(buf + k, n - k, "\\u%04x", c);
        else
            buf[k++] = (char)c;
    }
    buf[k++] = '"';
    buf[k] = 0;
    return buf;
}

/* A failure of the model's device work inside a step: end the job. */
void tr_model_fatal(trainer_t *t, const char *what)
{
    tr_fatal(t, what, t->ops->error(t->model));
}

int tr_arena_copy(trainer_t *t, void *dst, const void *src, size_t bytes, int to_arena)
{
#ifdef TRAINER_HAVE_CUDA_MODEL
    if (t->stream) { /* the engine's arenas are the GPU's */
        char err[256];
        if (model_cuda_copy(t->stream, dst, src, bytes, to_arena, err, sizeof err))
            return tr_fail(t, "%s", err);
        return 0;
    }
#endif
    memcpy(dst, src, bytes);
    return 0;
}

void tr_stage_params(const trainer_t *t, int s, int *p0, int *p1)
{
    *p0 = t->pipelined ? 2 * t->first_layer[s] : 0; /* a weight and a bias per layer */
    *p1 = t->pipelined ? 2 * t->first_layer[s + 1] : model_num_params(&t->opt.model);
}

int tr_add_params(trainer_t *t, ddpc_ddp_t d, int p0, int p1)
{
    for (int i = p0; i < p1; i++) {
        char name[32];
        int ndim;
        int64_t shape[2];
        model_param_desc(&t->opt.model, i, name, &ndim, shape);
        if (ddpc_ddp_add_param(d, name, ndim, shape, NULL) != DDPC_OK)
            return tr_fail(t, "%s", ddpc_ddp_last_error(d));
    }
    return 0;
}
