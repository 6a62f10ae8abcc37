/* SPDX-License-Identifier: BSD-3-Clause */
/* reducer.c: the reducer. grad_ready counts down each bucket; the next
 * bucket in index order whose gradients are all ready is all-reduced
 * asynchronously on the communicator's progress thread while backward goes
 * on. wait() launches the rest, checks that no parameter was left unready
 * (on every rank at once), and waits. Averaging happens in the reduction
 * (uncompressed: SUM then /N on the progress thread), in the optimizer's
 * pass (folded: SUM, the /N made in ddpc_optim_step's pass or by the
 * accessors; ddp_folds) or in the conversion copy (compressed: g/N rounded
 * to bf16/fp16, then SUM). A device engine
 * does the same on its stream: the conversions are kernels, the all-reduces
 * wait for the compute stream through the communicator, and wait() makes
 * the compute stream wait for them (cuda_kernels.cu, src/comm/nccl.c). */
#include "config.h"
#include "ddp_internal.h"

#include <stdio.h>
#include <string.h>

#ifdef DDPC_HAVE_CUDA
#include "cuda_kernels.h"
#endif

#define ON_DEVICE(d) ((d)->device != DDPC_DEVICE_HOST)

#include "../comm/comm_internal.h" /* fail_seq: which collective aborted a device communicator */

/* A device communicator fails asynchronously (its watchdog aborts it): the
 * engine learns at its next call, and names the bucket whose all-reduce it
 * was, like the host path's timeout message. */
static ddpc_status_t comm_failed(ddpc_ddp_t d)
{
    ddpc_status_t st = ddpc_comm_status(d->comm);
    if (st == DDPC_OK)
        return DDPC_OK;
    const uint64_t f = d->comm->fail_seq;
    for (int b = 0; b < d->nbuckets; b++) {
        const ddp_bucket_t *bk = &d->buckets[b];
        if (bk->launched_once && bk->seq == f)
            return ddp_err(d, st, "bucket %d of %d (parameters %d..%d, %zu floats): %s", b,
                           d->nbuckets, bk->first_param, bk->last_param, bk->numel,
                           ddpc_last_error(d->rt));
    }
    return ddp_err(d, st, "%s", ddpc_last_error(d->rt));
}

ddpc_status_t ddpc_ddp_set_sync(ddpc_ddp_t d, int sync)
{
    if (!d)
        return DDPC_ERR_INVALID;
    if (d->step_active)
        return ddp_err(d, DDPC_ERR_STATE, "set_sync in the middle of a step (after grad_ready, "
                                          "before wait)");
    d->sync = sync != 0;
    return DDPC_OK;
}

/* Folding applies to host engines with float32 buckets, unsharded (a
 * shard's optimizer steps only its slice: the rest would stay sums), across
 * more than one rank; DDPC_FOLD_AUTO wants a ddpc optimizer to pay the
 * division (a program's own optimizer reads the arena through a pointer it
 * holds). The same on every rank where the ranks build the same engine and
 * optimizer; were it not, each rank's gradients still come out the same,
 * as the wire carries a sum either way. */
int ddp_folds(ddpc_ddp_t d)
{
    return !ON_DEVICE(d) && d->size > 1 && d->cfg.compress == DDPC_F32 &&
           d->cfg.shard == DDPC_SHARD_NONE &&
           (d->cfg.fold_average == DDPC_FOLD_AUTO ? d->optims > 0 : d->cfg.fold_average != 0);
}

void ddp_settle_average(ddpc_ddp_t d)
{
    if (!d->avg_pending)
        return;
    comm_divide(d->grad_arena, d->numel, DDPC_F32, d->size);
    d->avg_pending = 0;
}

ddpc_status_t ddpc_ddp_zero_grad(ddpc_ddp_t d)
{
    if (!d || !d->built)
        return d ? ddp_err(d, DDPC_ERR_STATE, "zero_grad before build") : DDPC_ERR_INVALID;
    if (d->step_active)
        return ddp_err(d, DDPC_ERR_STATE, "zero_grad while reductions may be running (before wait)");
    d->avg_pending = 0;
    /* shard grads: the slice (its window starts afresh); the stages are
       zeroed as each bucket takes one */
    float *g = d->stages ? d->grad_shard : d->grad_arena;
    const size_t n = d->stages ? d->shard_len : d->numel;
    d->acc_fresh = 1;
    if (ON_DEVICE(d)) {
#ifdef DDPC_HAVE_CUDA
        return ddp_cuda_check(d, cudaMemsetAsync(g, 0, n * sizeof(float), (cudaStream_t)d->stream),
                              "cudaMemsetAsync");
#endif
    }
    memset(g, 0, n * sizeof(float));
    return DDPC_OK;
}

/* Shard grads: wait for bucket b's reduces (issued in order; after a
 * timeout, quick: do not wait again); the first failure, a timeout named. */
static ddpc_status_t reduces_wait(ddpc_ddp_t d, int b, int quick)
{
    ddp_bucket_t *bk = &d->buckets[b];
    ddpc_status_t st = DDPC_OK;
    for (int k = 0; k < bk->rs_n; k++) {
        ddpc_status_t ws = ddpc_work_wait(bk->rs_work[k], quick || st == DDPC_ERR_TIMEOUT ? 0 : -1);
        bk->rs_work[k] = NULL;
        if (ws != DDPC_OK && st == DDPC_OK)
            st = ddp_err(d, ws, "bucket %d of %d (parameters %d..%d, %zu floats), reduce %d of "
                         "%d: %s", b, d->nbuckets, bk->first_param, bk->last_param, bk->numel,
                         k + 1, bk->rs_n, ddpc_last_error(d->rt));
    }
    bk->rs_n = 0;
    return st;
}

/* Shard grads: take bucket b's stage for this micro-step. The bucket that
 * held it before must be reduced: if it is still being, wait (a device
 * engine: the stream waits); if it is not yet launched, the backward took
 * gradients out of order. Then the bucket's part of the stage is zeroed. */
static ddpc_status_t stage_take(ddpc_ddp_t d, int b, float **out)
{
    ddp_bucket_t *bk = &d->buckets[b];
    const int k = b % d->nstages;
    float *s = d->stages + (size_t)k * d->stage_len;
    *out = s;
    if (bk->staged)
        return DDPC_OK;
    const int h = d->stage_holder[k];
    if (h >= 0 && h != b && d->buckets[h].staged && !d->buckets[h].launched) {
        const ddp_bucket_t *hb = &d->buckets[h];
        *out = NULL;
        return ddp_err(d, DDPC_ERR_STATE,
                       "DDPC_SHARD=grads: bucket %d (parameters %d..%d) needs gradient stage %d "
                       "of %d, which bucket %d (parameters %d..%d) still holds with %d of its "
                       "parameters not ready. Take each gradient (ddpc_ddp_grad) in the "
                       "backward's order, after grad_ready of the buckets before it, or raise "
                       "DDPC_GRAD_STAGES", b, bk->first_param, bk->last_param, k, d->nstages, h,
                       hb->first_param, hb->last_param, hb->pending);
    }
    ddpc_status_t st = h >= 0 ? reduces_wait(d, h, 0) : DDPC_OK;
    if (st == DDPC_OK && ON_DEVICE(d)) {
#ifdef DDPC_HAVE_CUDA
        st = ddp_cuda_check(d, cudaMemsetAsync(s, 0, bk->numel * sizeof(float),
                                               (cudaStream_t)d->stream), "cudaMemsetAsync");
#endif
    } else if (st == DDPC_OK) {
        memset(s, 0, bk->numel * sizeof(float));
    }
    if (st != DDPC_OK) {
        *out = NULL;
        return st;
    }
    d->stage_holder[k] = b;
    bk->staged = 1;
    return DDPC_OK;
}

float *ddp_stage_take(ddpc_ddp_t d, int b)
{
    float *s;
    return stage_take(d, b, &s) == DDPC_OK ? s : NULL;
}

/* Shard grads: bucket b's piece [lo, hi) into its owner r's slice. The
 * owner first puts its own part there (the window's first micro-step
 * copies it, later ones add it) and reduces in place; the others send from
 * the stage (or the zero stage, for an untaken bucket under find_unused). */
static ddpc_status_t reduce_piece(ddpc_ddp_t d, int b, const float *src, size_t lo, size_t hi,
                                  int r)
{
    ddp_bucket_t *bk = &d->buckets[b];
    const size_t n = hi - lo;
    float *from = (float *)src + (lo - bk->offset);
    float *buf = from;
    if (r == d->rank) {
        buf = d->grad_shard + (lo - d->shard_off);
        if (ON_DEVICE(d)) {
#ifdef DDPC_HAVE_CUDA
            cudaStream_t s = (cudaStream_t)d->stream;
            ddpc_status_t st = ddp_cuda_check(
                d, d->acc_fresh ? cudaMemcpyAsync(buf, from, n * 4, cudaMemcpyDeviceToDevice, s)
                                : ddpc_cuda_add(buf, from, n, s),
                "putting a bucket's piece into the slice");
            if (st)
                return st;
#endif
        } else if (d->acc_fresh) {
            memcpy(buf, from, n * sizeof(float));
        } else {
            comm_add_f32(buf, from, n);
        }
    }
    return ddpc_ireduce(d->comm, buf, buf, n, DDPC_F32, DDPC_SUM, r, &bk->rs_work[bk->rs_n]);
}

static ddpc_status_t launch(ddpc_ddp_t d, int b)
{
    ddp_bucket_t *bk = &d->buckets[b];
    float *g = d->grad_arena + bk->offset;
    ddpc_status_t st;
    const double t_issue = ddpc_tl_t0();
    if (d->next_launch == 0) {
        d->t_first_launch = ddpc_now();
        if (d->avg_pending) /* the backward added onto a folded sum: the average is lost */
            return ddp_err(d, DDPC_ERR_STATE,
                           "this step's gradients were added onto the previous step's summed "
                           "gradients (DDPC_FOLD_AVERAGE: the all-reduce sums and "
                           "ddpc_optim_step divides in its pass, leaving the sums): call "
                           "ddpc_ddp_zero_grad before the next backward (or ddpc_ddp_grads, "
                           "which makes the averages, to accumulate onto them), or set "
                           "DDPC_FOLD_AVERAGE=0");
        d->fold_step = ddp_folds(d);
    }
    if (ON_DEVICE(d) && (st = comm_failed(d)) != DDPC_OK)
        return st;
    bk->seq = ddpc_comm_seq(d->comm); /* the engine issues its collectives from one thread */
    bk->launched_once = 1;
    char tag[32];
    snprintf(tag, sizeof tag, "ddp bucket %d", b);
    ddpc_comm_tag_next(d->comm, tag); /* for the flight recorder */
    if (!d->cfg.overlap) /* launched in the wait on every rank (overlap is agreed at build) */
        ddpc_comm_blocking_next(d->comm);
    if (d->stages) {
        /* ZeRO-2: the bucket's piece in rank r's slice is summed into rank
         * r only, one reduce per rank whose slice the bucket meets (the
         * slices are equal and aligned, the buckets cut at parameters: the
         * pieces differ in length, so no equal-count reduce-scatter); the
         * synced wait averages the slice */
        const size_t end = bk->offset + bk->numel;
        float *src = NULL;
        st = DDPC_OK;
        if (!bk->staged && d->zero_stage)
            src = d->zero_stage; /* nothing of it was taken: zeros (find_unused) */
        else if ((st = stage_take(d, b, &src)) != DDPC_OK)
            return st;
        bk->rs_n = 0;
        for (size_t lo = bk->offset; st == DDPC_OK && lo < end;) {
            int r;
            const size_t hi = ddp_piece_end(d, lo, end, &r);
            if (bk->rs_n)
                ddpc_comm_tag_next(d->comm, tag);
            if (!d->cfg.overlap)
                ddpc_comm_blocking_next(d->comm);
            st = reduce_piece(d, b, src, lo, hi, r);
            if (st == DDPC_OK)
                bk->rs_n++;
            lo = hi;
        }
    } else if (d->cfg.compress == DDPC_F32) {
        st = ddpc_iallreduce(d->comm, g, g, bk->numel, DDPC_F32,
                             d->fold_step ? DDPC_SUM : DDPC_AVG, &bk->work);
    } else {
        /* fold the 1/N into the conversion copy: no extra pass */
        const float inv = 1.0f / (float)d->size;
        if (ON_DEVICE(d)) {
#ifdef DDPC_HAVE_CUDA
            if ((st = ddp_cuda_check(d, ddpc_cuda_pack_half(g, bk->wire, bk->numel, inv,
                                                            d->cfg.compress == DDPC_F16,
                                                            (cudaStream_t)d->stream),
                                     "packing a bucket")))
                return st;
#endif
        } else if (d->cfg.compress == DDPC_BF16)
            for (size_t i = 0; i < bk->numel; i++)
                bk->wire[i] = ddpc_f32_to_bf16(g[i] * inv);
        else
            for (size_t i = 0; i < bk->numel; i++)
                bk->wire[i] = ddpc_f32_to_f16(g[i] * inv);
        st = ddpc_iallreduce(d->comm, bk->wire, bk->wire, bk->numel, d->cfg.compress, DDPC_SUM,
                             &bk->work);
    }
    if (st)
        return ddp_err(d, st, "launching bucket %d: %s", b, ddpc_last_error(d->rt));
    bk->launched = 1;
    d->next_launch = b + 1;
    ddpc_tl_span_seq("bucket issued", t_issue, b, (int64_t)bk->seq);
    return DDPC_OK;
}

/* Launch every consecutive complete bucket from next_launch on. */
static ddpc_status_t launch_ready(ddpc_ddp_t d)
{
    while (d->next_launch < d->nbuckets && d->buckets[d->next_launch].pending == 0) {
        ddpc_status_t st = launch(d, d->next_launch);
        if (st)
            return st;
    }
    return DDPC_OK;
}

ddpc_status_t ddpc_ddp_grad_ready(ddpc_ddp_t d, int i)
{
    if (!d || !d->built)
        return d ? ddp_err(d, DDPC_ERR_STATE, "grad_ready before build") : DDPC_ERR_INVALID;
    if (i < 0 || i >= d->nparams)
        return ddp_err(d, DDPC_ERR_INVALID, "grad_ready(%d): no such parameter (have %d)", i,
                       d->nparams);
    ddp_param_t *p = &d->params[i];
    if (d->stages && !d->buckets[p->bucket].staged)
        return ddp_err(d, DDPC_ERR_STATE,
                       "parameter %d \"%s\" marked ready, but its gradient was not taken in this "
                       "micro-step: with DDPC_SHARD=grads call ddpc_ddp_grad(%d) before writing "
                       "it (the pointer is a stage's, zeroed for each micro-step)", i, p->name, i);
    if (p->ready)
        return ddp_err(d, DDPC_ERR_STATE,
                       "parameter %d \"%s\" marked ready twice in one step (grad_ready must be "
                       "called once per parameter per micro-step)", i, p->name);
    p->ready = 1;
    d->step_active = 1;
    ddpc_tl_instant("grad_ready", i);
    d->buckets[p->bucket].pending--;
    /* shard grads reduces every micro-step, and as soon as it can: a
       complete bucket's stage is wanted back (without overlap, on this
       thread) */
    if (d->stages || (d->sync && d->cfg.overlap))
        return launch_ready(d);
    return DDPC_OK;
}

/* Next micro-step: nothing ready, nothing launched. */
static void reset_step(ddpc_ddp_t d)
{
    for (int i = 0; i < d->nparams; i++)
        d->params[i].ready = 0;
    for (int b = 0; b < d->nbuckets; b++) {
        d->buckets[b].pending = d->buckets[b].last_param - d->buckets[b].first_param + 1;
        d->buckets[b].launched = 0;
        d->buckets[b].work = NULL;
        d->buckets[b].rs_n = 0;
        d->buckets[b].staged = 0;
    }
    d->next_launch = 0;
    d->step_active = 0;
}

/* "a", "b", "c" and 4 more: the parameters that never became ready. */
static void list_unready(ddpc_ddp_t d, char *s, size_t n)
{
    size_t k = 0;
    int shown = 0, more = 0;
    s[0] = 0;
    for (int i = 0; i < d->nparams; i++) {
        if (d->params[i].ready)
            continue;
        if (shown < 8 && k < n) {
            k += (size_t)snprintf(s + k, n - k, "%s%d \"%s\"", shown ? ", " : "", i, d->params[i].name);
            shown++;
        } else {
            more++;
        }
    }
    if (more && k < n)
        snprintf(s + k, n - k, " and %d more", more);
}

/* Device engines: the previous step's count of unready parameters (the MAX
 * over ranks, read back into pinned memory long since: its event is past),
 * then this step's, enqueued behind the buckets: no host synchronization.
 * *late is the previous step's verdict, the same on every rank. */
static ddpc_status_t device_unready(ddpc_ddp_t d, int unready, ddpc_status_t *late)
{
    *late = DDPC_OK;
#ifdef DDPC_HAVE_CUDA
    cudaStream_t s = (cudaStream_t)d->stream;
    ddpc_status_t st;
    if (d->unready_pending) {
        if ((st = ddp_cuda_check(d, cudaEventSynchronize((cudaEvent_t)d->ev_unready),
                                 "reading the unready-parameter count")))
            return st;
        d->unready_pending = 0;
        int worst = d->h_unready[1];
        if (worst > 0)
            *late = d->prev_unready
                        ? ddp_err(d, DDPC_ERR_STATE,
                                  "%d parameter(s) got no gradient in the previous step: %s. "
                                  "Call grad_ready for every parameter, or enable find_unused "
                                  "(DDPC_FIND_UNUSED=1)", d->prev_unready, d->prev_names)
                        : ddp_err(d, DDPC_ERR_REMOTE,
                                  "another rank had %d parameter(s) without a gradient in the "
                                  "previous step (see its message); enable find_unused "
                                  "(DDPC_FIND_UNUSED=1) if parameters may go unused", worst);
    }
    d->prev_unready = unready;
    if (unready)
        list_unready(d, d->prev_names, sizeof d->prev_names);
    d->h_unready[0] = unready;
    if ((st = ddp_cuda_check(d, cudaMemcpyAsync(d->d_unready, &d->h_unready[0], sizeof(int32_t),
                                                cudaMemcpyHostToDevice, s),
                             "cudaMemcpyAsync")))
        return st;
    ddpc_comm_tag_next(d->comm, "ddp unready check");
    if ((st = ddpc_allreduce(d->comm, d->d_unready, d->d_unready, 1, DDPC_I32, DDPC_MAX)))
        return ddp_err(d, st, "unready-parameter check: %s", ddpc_last_error(d->rt));
    if ((st = ddp_cuda_check(d, cudaMemcpyAsync(&d->h_unready[1], d->d_unready, sizeof(int32_t),
                                                cudaMemcpyDeviceToHost, s),
                             "cudaMemcpyAsync")) ||
        (st = ddp_cuda_check(d, cudaEventRecord((cudaEvent_t)d->ev_unready, s),
                             "cudaEventRecord")))
        return st;
    d->unready_pending = 1;
    return DDPC_OK;
#else
    return ddp_err(d, DDPC_ERR_UNSUPPORTED, "device engine without CUDA");
#endif
}

size_t ddp_piece_end(const ddpc_ddp_t d, size_t lo, size_t end, int *owner)
{
    const size_t L = d->shard_len;
    *owner = (int)(lo / L);
    return (size_t)(*owner + 1) * L < end ? (size_t)(*owner + 1) * L : end;
}

/* A FORWARD gather (host engines, more than one rank): every bucket's
 * pieces broadcast from their slices' owners, in place, the buckets in
 * registration order (the order a forward uses them), on the progress
 * thread behind whatever the communicator runs already. */
ddpc_status_t ddp_gather_issue(ddpc_ddp_t d)
{
    const int nb = d->nbuckets;
    const int up = nb > 1 && d->buckets[0].first_param > d->buckets[nb - 1].first_param;
    for (int i = 0; i < nb; i++) {
        const int b = up ? nb - 1 - i : i;
        ddp_bucket_t *bk = &d->buckets[b];
        const size_t end = bk->offset + bk->numel;
        char tag[40];
        snprintf(tag, sizeof tag, "ddp shard gather %d", b);
        for (size_t lo = bk->offset; lo < end;) {
            int r;
            const size_t hi = ddp_piece_end(d, lo, end, &r);
            ddpc_comm_tag_next(d->comm, tag);
            ddpc_status_t st = ddpc_ibroadcast(d->comm, d->param_arena + lo, hi - lo, DDPC_F32,
                                               r, &bk->ag_work[bk->ag_n]);
            if (st != DDPC_OK)
                return ddp_err(d, st, "gathering bucket %d's updated parameters (floats [%zu, "
                               "%zu) from rank %d): %s", b, lo, hi, r, ddpc_last_error(d->rt));
            bk->ag_n++;
            lo = hi;
        }
    }
    return DDPC_OK;
}

ddpc_status_t ddp_gather_wait(ddpc_ddp_t d, int bucket)
{
    ddpc_status_t st = DDPC_OK;
    for (int b = bucket < 0 ? 0 : bucket; b < (bucket < 0 ? d->nbuckets : bucket + 1); b++) {
        ddp_bucket_t *bk = &d->buckets[b];
        if (!bk->ag_n)
            continue;
        const double t0 = ddpc_tl_t0();
        for (int k = 0; k < bk->ag_n; k++) {
            ddpc_status_t ws = ddpc_work_wait(bk->ag_work[k], st == DDPC_ERR_TIMEOUT ? 0 : -1);
            bk->ag_work[k] = NULL;
            if (ws != DDPC_OK && st == DDPC_OK)
                st = ddp_err(d, ws, "bucket %d (parameters %d..%d), the broadcast %d of %d of "
                             "its updated parameters: %s", b, bk->first_param, bk->last_param,
                             k + 1, bk->ag_n, ddpc_last_error(d->rt));
        }
        bk->ag_n = 0;
        ddpc_tl_span("shard gather wait", t0, b);
    }
    return st;
}

int ddpc_ddp_param_pending(ddpc_ddp_t d)
{
    int n = 0;
    for (int b = 0; d && d->built && b < d->nbuckets; b++)
        n += d->buckets[b].ag_n > 0;
    return n;
}

ddpc_status_t ddpc_ddp_param_wait(ddpc_ddp_t d, int index)
{
    if (!d)
        return DDPC_ERR_INVALID;
    if (index < -1 || index >= d->nparams)
        return ddp_err(d, DDPC_ERR_INVALID, "param_wait: parameter %d of %d", index, d->nparams);
    d->model_waits = 1;
    if (!d->built)
        return DDPC_OK;
    return ddp_gather_wait(d, index < 0 ? -1 : d->params[index].bucket);
}

/* The compute stream is being captured into a CUDA graph: the step's host
 * checks run in the eager steps before the capture, not inside it. */
int ddp_capturing(ddpc_ddp_t d)
{
#ifdef DDPC_HAVE_CUDA
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    return ON_DEVICE(d) && cudaStreamIsCapturing((cudaStream_t)d->stream, &cs) == cudaSuccess &&
           cs == cudaStreamCaptureStatusActive;
#else
    (void)d;
    return 0;
#endif
}

/* Shard grads: the slice holds the window's sums; /N as the communicator's
 * average divides (x / N, or x * (1/N) for a power of two; the device
 * multiplies). */
static ddpc_status_t average_slice(ddpc_ddp_t d)
{
    if (ON_DEVICE(d)) {
#ifdef DDPC_HAVE_CUDA
        return ddp_cuda_check(d, ddpc_cuda_scale(d->grad_shard, d->shard_len, 1.0f / (float)d->size,
                                                 (cudaStream_t)d->stream),
                              "averaging the gradient slice");
#endif
    }
    comm_divide(d->grad_shard, d->shard_len, DDPC_F32, d->size);
    return DDPC_OK;
}

ddpc_status_t ddpc_ddp_wait(ddpc_ddp_t d)
{
    if (!d || !d->built)
        return d ? ddp_err(d, DDPC_ERR_STATE, "wait before build") : DDPC_ERR_INVALID;
    ddpc_status_t gst = ddp_gather_wait(d, -1); /* the forward's, if it did not wait */
    if (gst)
        return gst;
    if (!d->sync && !d->stages) {
        reset_step(d); /* accumulation micro-step: gradients stay local */
        return DDPC_OK;
    }
    double t0 = ddpc_now();
    const double t_wait = ddpc_tl_t0();
    int unready = 0;
    for (int i = 0; i < d->nparams; i++)
        unready += !d->params[i].ready;
    ddpc_status_t st = DDPC_OK;
    /* Every rank launches every bucket exactly once per step, in order, even
     * when some gradients are missing: the collectives must match. */
    while (st == DDPC_OK && d->next_launch < d->nbuckets)
        st = launch(d, d->next_launch);
    /* Without find_unused a missing gradient is an error, and every rank must
     * learn it in the same step: one small MAX after the buckets (a device
     * engine reads it back at the next wait). */
    int64_t worst = unready;
    ddpc_status_t late = DDPC_OK;
    if (!d->sync) /* shard grads' accumulation micro-step: reduced, not checked */
        worst = 0;
    else if (st == DDPC_OK && !d->cfg.find_unused && d->size > 1) {
        if (ddp_capturing(d)) { /* a replay repeats a step the eager steps checked */
            worst = 0;
        } else if (ON_DEVICE(d)) {
            st = device_unready(d, unready, &late);
            worst = 0;
        } else {
            ddpc_comm_tag_next(d->comm, "ddp unready check");
            if ((st = ddpc_allreduce(d->comm, &worst, &worst, 1, DDPC_I64, DDPC_MAX)) != DDPC_OK)
                st = ddp_err(d, st, "unready-parameter check: %s", ddpc_last_error(d->rt));
        }
    }
    for (int b = 0; b < d->nbuckets; b++) {
        ddp_bucket_t *bk = &d->buckets[b];
        /* shard grads: the bucket's reduces, in order */
        ddpc_status_t rs = reduces_wait(d, b, st == DDPC_ERR_TIMEOUT);
        if (rs == DDPC_ERR_TIMEOUT)
            return rs;
        if (rs && st == DDPC_OK)
            st = rs;
        if (!bk->launched || !bk->work)
            continue;
        /* after a timed-out check behind them, the buckets (issued before it, completed
           in order) cannot have completed either: report at once, not after another
           DDPC_TIMEOUT */
        ddpc_status_t ws = ddpc_work_wait(bk->work, st == DDPC_ERR_TIMEOUT ? 0 : -1);
        if (ws != DDPC_OK && ON_DEVICE(d) && ddpc_comm_status(d->comm) != DDPC_OK) {
            bk->work = NULL;
            if (st == DDPC_OK)
                st = comm_failed(d); /* names the bucket whose all-reduce failed */
            continue;
        }
        if (ws == DDPC_ERR_TIMEOUT)
            return ddp_err(d, ws, "bucket %d of %d (parameters %d..%d, %zu floats): %s", b,
                           d->nbuckets, bk->first_param, bk->last_param, bk->numel,
                           ddpc_last_error(d->rt));
        bk->work = NULL;
        if (ws && st == DDPC_OK)
            st = ddp_err(d, ws, "bucket %d: %s", b, ddpc_last_error(d->rt));
        if (ws == DDPC_OK && d->cfg.compress != DDPC_F32) {
            float *g = d->grad_arena + bk->offset;
            if (ON_DEVICE(d)) {
#ifdef DDPC_HAVE_CUDA
                ddpc_status_t us = ddp_cuda_check(
                    d, ddpc_cuda_unpack_half(bk->wire, g, bk->numel, d->cfg.compress == DDPC_F16,
                                             (cudaStream_t)d->stream),
                    "unpacking a bucket");
                if (us && st == DDPC_OK)
                    st = us;
#endif
            } else if (d->cfg.compress == DDPC_BF16)
                for (size_t i = 0; i < bk->numel; i++)
                    g[i] = ddpc_bf16_to_f32(bk->wire[i]);
            else
                for (size_t i = 0; i < bk->numel; i++)
                    g[i] = ddpc_f16_to_f32(bk->wire[i]);
        }
    }
    double t1 = ddpc_now();
    d->comm_s = t1 - d->t_first_launch;
    d->blocked_s = t1 - t0;
    d->avg_pending = st == DDPC_OK && d->fold_step && d->nbuckets > 0;
    if (st == DDPC_OK && d->stages) { /* the window's sums in the slice: averaged when synced */
        d->acc_fresh = d->sync;
        if (d->sync && d->size > 1)
            st = average_slice(d);
    }
    if (st == DDPC_OK && late != DDPC_OK)
        st = late;
    if (st == DDPC_OK && worst > 0 && !d->cfg.find_unused) {
        char names[768];
        list_unready(d, names, sizeof names);
        st = unready
                 ? ddp_err(d, DDPC_ERR_STATE,
                           "%d parameter(s) got no gradient in this step: %s. Call grad_ready for "
                           "every parameter, or enable find_unused (DDPC_FIND_UNUSED=1)",
                           unready, names)
                 : ddp_err(d, DDPC_ERR_REMOTE,
                           "another rank has %lld parameter(s) without a gradient in this step "
                           "(see its message); enable find_unused (DDPC_FIND_UNUSED=1) if "
                           "parameters may go unused", (long long)worst);
    }
    reset_step(d);
    /* rank 0's buffers everywhere before the next forward (broadcast_buffers) */
    if (st == DDPC_OK && d->sync && d->cfg.broadcast_buffers && d->nbufs)
        st = ddpc_ddp_broadcast_buffers(d);
    ddpc_tl_span("ddp wait", t_wait, -1);
    return st;
}

void ddpc_ddp_last_timing(ddpc_ddp_t d, double *comm_s, double *blocked_s)
{
    if (comm_s)
        *comm_s = d ? d->comm_s : 0;
    if (blocked_s)
        *blocked_s = d ? d->blocked_s : 0;
}
