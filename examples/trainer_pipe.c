/* SPDX-License-Identifier: BSD-3-Clause */
/* trainer_pipe.c: data parallel over pipelines (--pipeline-stages S,
 * --micro-batches M, --schedule). The world is R replicas x S stages
 * (ddpc_comm_grid): a replica's S ranks hold consecutive layers and pass
 * activations forward and their gradients back over point-to-point on the
 * row communicator; each stage's DDP engine holds its own parameters and
 * averages them over the column communicator (its R replicas).
 * Exactness: every micro-batch goes through the same per-layer calls as in
 * the unsplit model, and backwards run in micro-batch order on every stage,
 * so the step is bitwise the unsplit trainer's with --grad-accum M.
 * On cuda the activations stay in device memory: stage 0 uploads its
 * micro-batches from the host, the others receive straight into their
 * models' input buffers, and the transfers and the engine run on the grid
 * of the device communicator (drow, dcol), stream-ordered with the model's
 * work; the host communicators (row, col) keep the host-memory messages.
 * Not here: the host loop (trainer.c), checkpoints of pipelines
 * (trainer_ckpt.c: the whole model through world rank 0). */
#include "trainer.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ------------------------------------------------------------------ setup */
void tr_pipe_describe(trainer_t *t, char *buf, size_t n)
{
    const model_spec_t *m = &t->opt.model;
    size_t k = (size_t)snprintf(buf, n, "pipeline: %d stage(s) x %d replica(s) (%s, %d "
                                "micro-batch(es) of %d)", t->S, t->R,
                                t->opt.schedule == SCHEDULE_GPIPE ? "gpipe" : "1f1b",
                                t->opt.micro_batches, t->opt.batch_size);
    for (int s = 0; s < t->S && k < n; s++) {
        double f = 0;
        for (int l = t->first_layer[s]; l < t->first_layer[s + 1]; l++)
            f += model_layer_flops(m, l);
        int a = t->first_layer[s], b = t->first_layer[s + 1] - 1;
        if (a == b)
            k += (size_t)snprintf(buf + k, n - k, "%s stage %d: layer %d (%.3f MFLOP/sample)",
                                  s ? "," : ";", s, a, f / 1e6);
        else
            k += (size_t)snprintf(buf + k, n - k, "%s stage %d: layers %d-%d (%.3f MFLOP/sample)",
                                  s ? "," : ";", s, a, b, f / 1e6);
    }
}

int tr_pipe_setup(trainer_t *t)
{
    const options_t *o = &t->opt;
    t->S = o->pipeline_stages;
    if (t->size % t->S) {
        if (t->rank == 0)
            fprintf(stderr, "trainer: --pipeline-stages %d: %d rank(s) do not divide into "
                    "pipelines of %d stages (launch a multiple of %d ranks)\n", t->S, t->size,
                    t->S, t->S);
        return -1;
    }
    t->R = t->size / t->S;
    t->stage = t->rank % t->S;
    t->replica = t->rank / t->S;
    model_partition(&o->model, t->S, t->first_layer);
    if (ddpc_comm_grid(t->comm, t->R, t->S, NULL, &t->row, &t->col) != DDPC_OK) {
        fprintf(stderr, "trainer: %s\n", ddpc_last_error(t->rt));
        return -1;
    }
    t->act_dtype = DDPC_F32;
    return 0;
}

int tr_pipe_device_grid(trainer_t *t)
{
    /* cfg NULL: dcomm's backend (nccl or mpi-staged), GPU and stream */
    if (ddpc_comm_grid(t->dcomm, t->R, t->S, NULL, &t->drow, &t->dcol) != DDPC_OK) {
        if (t->rank == 0)
            fprintf(stderr, "trainer: %s\n", ddpc_last_error(t->rt));
        return -1;
    }
    /* the model's activations are in its GEMMs' type */
    t->act_dtype = t->opt.precision == PRECISION_BF16 ? DDPC_BF16
                   : t->opt.precision == PRECISION_FP16 ? DDPC_F16 : DDPC_F32;
    return 0;
}

/* the communicator of the activations: the device's on cuda */
static ddpc_comm_t act_comm(trainer_t *t) { return t->drow ? t->drow : t->row; }

int tr_pipe_start(trainer_t *t, const model_place_t *where, float *params, float *grads)
{
    const options_t *o = &t->opt;
    const model_spec_t *ms = &o->model;
    const int M = o->micro_batches, mb = o->batch_size;
    /* activations in flight: GPipe all M; 1F1B S - stage at most (warm-up
       forwards, then one forward for each backward) */
    t->nslots = o->schedule == SCHEDULE_GPIPE ? M : (t->S - t->stage < M ? t->S - t->stage : M);
    t->slots = calloc((size_t)t->nslots, sizeof *t->slots);
    t->step_n = calloc((size_t)M, sizeof *t->step_n);
    if (!t->slots || !t->step_n)
        return tr_fail(t, "out of memory for the pipeline");
    const int a = t->first_layer[t->stage], b = t->first_layer[t->stage + 1];
    model_place_t w = *where;
    w.stage_first = a;
    w.stage_end = b;
    const size_t in = (size_t)model_layer_in(ms, a);
    for (int i = 0; i < t->nslots; i++) {
        /* slot 0 also runs the evaluation's batches */
        int max_batch = i == 0 && mb < EVAL_BATCH ? EVAL_BATCH : mb;
        char err[512];
        t->slots[i] = t->ops->create(ms, &w, max_batch, params, grads, err, sizeof err);
        if (!t->slots[i])
            return tr_fail(t, "%s", err);
        if (t->stage > 0 && (!t->ops->input || !t->ops->input(t->slots[i])))
            return tr_fail(t, "the %s model has no input buffer for a pipeline stage",
                           t->ops->name);
    }
    t->model = t->slots[0];
    if (t->stage == 0 && !(t->step_x = malloc((size_t)M * mb * in * sizeof(float))))
        return tr_fail(t, "out of memory for the pipeline's inputs");
    if (t->stage == t->S - 1 && !(t->step_y = malloc((size_t)M * mb)))
        return tr_fail(t, "out of memory for the pipeline's labels");
    return 0;
}

void tr_pipe_destroy(trainer_t *t)
{
    for (int i = 0; t->slots && i < t->nslots; i++) {
        if (t->slots[i])
            t->ops->destroy(t->slots[i]);
    }
    t->model = NULL;
    free(t->slots);
    free(t->step_x);
    free(t->step_y);
    free(t->step_n);
}

/* ------------------------------------------------------------------ transfers */
/* The transfers of one slot of the schedule, issued together (a stage may
 * send to one neighbour and receive from the other, or both ways with one),
 * blocking; the time counts as the stage's wait. */
static void xfer(trainer_t *t, ddpc_p2p_op_t *ops, int n, int timed)
{
    if (n == 0)
        return;
    double t0 = tr_now();
    if (ddpc_p2p_batch(act_comm(t), ops, n, NULL) != DDPC_OK)
        tr_fatal(t, "pipeline", ddpc_last_error(t->rt));
    if (timed)
        t->pipe_wait_s += tr_now() - t0;
}

static int in_width(trainer_t *t)
{
    return model_layer_in(&t->opt.model, t->first_layer[t->stage]);
}

static int out_width(trainer_t *t)
{
    return model_layer_out(&t->opt.model, t->first_layer[t->stage + 1] - 1);
}

static model_t *slot(trainer_t *t, int i) { return t->slots[i % t->nslots]; }

/* Each adds its transfer for micro-batch i to ops (none on the stage that has
 * no such neighbour) and returns the new count. */
static int recv_act(trainer_t *t, int i, ddpc_p2p_op_t *ops, int n)
{
    if (t->stage == 0)
        return n;
    ops[n] = (ddpc_p2p_op_t){0, t->stage - 1, t->ops->input(slot(t, i)),
                             (size_t)t->step_n[i] * (size_t)in_width(t), t->act_dtype};
    return n + 1;
}

static int send_act(trainer_t *t, int i, ddpc_p2p_op_t *ops, int n)
{
    if (t->stage == t->S - 1)
        return n;
    ops[n] = (ddpc_p2p_op_t){1, t->stage + 1, (void *)t->ops->output(slot(t, i)),
                             (size_t)t->step_n[i] * (size_t)out_width(t), t->act_dtype};
    return n + 1;
}

static int recv_grad(trainer_t *t, int i, ddpc_p2p_op_t *ops, int n)
{
    if (t->stage == t->S - 1)
        return n;
    ops[n] = (ddpc_p2p_op_t){0, t->stage + 1, t->ops->output_grad(slot(t, i)),
                             (size_t)t->step_n[i] * (size_t)out_width(t), t->act_dtype};
    return n + 1;
}

static int send_grad(trainer_t *t, int i, ddpc_p2p_op_t *ops, int n)
{
    if (t->stage == 0)
        return n;
    ops[n] = (ddpc_p2p_op_t){1, t->stage - 1, (void *)t->ops->input_grad(slot(t, i)),
                             (size_t)t->step_n[i] * (size_t)in_width(t), t->act_dtype};
    return n + 1;
}

/* ------------------------------------------------------------------ compute */
static int grad_ready(void *ctx, int p)
{
    return ddpc_ddp_grad_ready((ddpc_ddp_t)ctx, p) != DDPC_OK;
}

/* Micro-batch i's forward on its slot (its input received or read). */
static void forward(trainer_t *t, int i)
{
    model_t *m = slot(t, i);
    size_t off = (size_t)i * (size_t)t->opt.batch_size;
    /* a later stage's input was received into the model's input buffer */
    const float *x = t->stage == 0 ? t->step_x + off * (size_t)in_width(t) : NULL;
    const uint8_t *y = t->stage == t->S - 1 ? t->step_y + off : NULL;
    if (t->ops->upload(m, x, y, t->step_n[i]) || t->ops->forward(m))
        tr_model_fatal(t, "forward");
    if (t->stage == t->S - 1) { /* the loss of the micro-batches in their order */
        model_stats_t st;
        if (t->ops->stats(m, &st))
            tr_model_fatal(t, "forward");
        t->pstats.loss_sum += st.loss_sum;
        t->pstats.loss_samples += st.loss_samples;
        t->pstats.correct += st.correct;
        t->pstats.forwards += st.forwards;
    }
}

/* Micro-batch i's backward (of k), accumulating as --grad-accum does: the
 * last one synchronizes, and its wait is the caller's (after the gradient of
 * the input is on its way back). */
static void backward(trainer_t *t, int i, int k)
{
    ddpc_status_t s = ddpc_ddp_set_sync(t->ddp, i == k - 1);
    if (s == DDPC_OK && i == 0)
        s = ddpc_ddp_zero_grad(t->ddp);
    if (s != DDPC_OK)
        tr_fatal(t, "ddp", ddpc_ddp_last_error(t->ddp));
    int brc = t->ops->backward(slot(t, i), 1.0 / k, grad_ready, t->ddp);
    if (brc < 0)
        tr_model_fatal(t, "backward");
    if (brc || (i < k - 1 && ddpc_ddp_wait(t->ddp) != DDPC_OK))
        tr_fatal(t, "ddp", ddpc_ddp_last_error(t->ddp));
}

/* Every stage reads the step's micro-batches (the same sampler position on
 * every stage; stage 0 keeps the inputs, the last stage the labels). */
static size_t read_step(trainer_t *t, int k)
{
    const size_t in = (size_t)in_width(t), mb = (size_t)t->opt.batch_size;
    size_t used = 0;
    for (int i = 0; i < k; i++) {
        ddpc_batch_t b;
        if (ddpc_loader_next(t->loader, &b) != DDPC_OK)
            tr_fatal(t, "data", ddpc_loader_last_error(t->loader));
        if (b.n == 0)
            tr_fatal(t, "data", "the loader ran out of batches inside a pipeline step");
        t->step_n[i] = (int)b.n;
        if (t->stage == 0)
            memcpy(t->step_x + (size_t)i * mb * in, b.x, b.n * in * sizeof(float));
        if (t->stage == t->S - 1)
            memcpy(t->step_y + (size_t)i * mb, b.y, b.n);
        used += b.n;
    }
    return used;
}

size_t tr_pipe_step(trainer_t *t, int k)
{
    ddpc_p2p_op_t ops[4];
    size_t used = read_step(t, k);
    if (t->opt.schedule == SCHEDULE_GPIPE) {
        /* all forwards, then all backwards (in micro-batch order: the
           accumulation's order) */
        for (int i = 0; i < k; i++) {
            xfer(t, ops, recv_act(t, i, ops, 0), 1);
            forward(t, i);
            xfer(t, ops, send_act(t, i, ops, 0), 1);
        }
        for (int i = 0; i < k; i++) {
            xfer(t, ops, recv_grad(t, i, ops, 0), 1);
            backward(t, i, k);
            xfer(t, ops, send_grad(t, i, ops, 0), 1);
        }
    } else {
        /* 1F1B: S - 1 - stage warm-up forwards, then one forward and one
           backward in turn, then the backwards left */
        int warm = t->S - 1 - t->stage < k ? t->S - 1 - t->stage : k, rest = k - warm;
        for (int i = 0; i < warm; i++) {
            xfer(t, ops, recv_act(t, i, ops, 0), 1);
            forward(t, i);
            xfer(t, ops, send_act(t, i, ops, 0), 1);
        }
        if (rest > 0)
            xfer(t, ops, recv_act(t, warm, ops, 0), 1);
        for (int j = 0; j < rest; j++) {
            int f = warm + j;
            forward(t, f);
            /* this forward's activations out, the next backward's gradient in */
            xfer(t, ops, recv_grad(t, j, ops, send_act(t, f, ops, 0)), 1);
            backward(t, j, k);
            /* that backward's gradient back, the next forward's input in */
            int n = send_grad(t, j, ops, 0);
            if (j < rest - 1)
                n = recv_act(t, f + 1, ops, n);
            xfer(t, ops, n, 1);
        }
        for (int i = rest; i < k; i++) {
            xfer(t, ops, recv_grad(t, i, ops, 0), 1);
            backward(t, i, k);
            xfer(t, ops, send_grad(t, i, ops, 0), 1);
        }
    }
    if (ddpc_ddp_wait(t->ddp) != DDPC_OK)
        tr_fatal(t, "ddp", ddpc_ddp_last_error(t->ddp));
    if (ddpc_optim_step(t->optim, NULL) != DDPC_OK)
        tr_fatal(t, "optimizer", ddpc_ddp_last_error(t->ddp));
    t->step++;
    return used;
}

/* ------------------------------------------------------------------ evaluation, results */
void tr_pipe_eval_forward(trainer_t *t, const float *x, const uint8_t *y, int n)
{
    ddpc_p2p_op_t op;
    model_t *m = t->slots[0];
    if (t->stage > 0) {
        op = (ddpc_p2p_op_t){0, t->stage - 1, t->ops->input(m), (size_t)n * (size_t)in_width(t),
                             t->act_dtype};
        xfer(t, &op, 1, 0);
        x = NULL;
    }
    if (t->ops->upload(m, x, t->stage == t->S - 1 ? y : NULL, n) || t->ops->forward(m))
        tr_model_fatal(t, "evaluation");
    if (t->stage < t->S - 1) {
        op = (ddpc_p2p_op_t){1, t->stage + 1, (void *)t->ops->output(m),
                             (size_t)n * (size_t)out_width(t), t->act_dtype};
        xfer(t, &op, 1, 0);
    }
}

void tr_pipe_reduce(trainer_t *t, double *v, int n)
{
    if (t->stage == t->S - 1 && ddpc_allreduce(t->col, v, v, (size_t)n, DDPC_F64, DDPC_SUM) != DDPC_OK)
        tr_fatal(t, "pipeline", ddpc_last_error(t->rt));
    if (t->S > 1 && ddpc_broadcast(t->row, v, (size_t)n, DDPC_F64, t->S - 1) != DDPC_OK)
        tr_fatal(t, "pipeline", ddpc_last_error(t->rt));
}

uint32_t tr_pipe_params_crc32(trainer_t *t)
{
    const model_spec_t *ms = &t->opt.model;
    /* stage s's parameters go to their place in the model's arena on stage 0 */
    size_t off = model_layers_param_offset(ms, t->first_layer[t->stage]);
    if (ddpc_ddp_param_wait(t->ddp, -1) != DDPC_OK) /* a gather in flight (sharded) */
        tr_fatal(t, "checksum", ddpc_ddp_last_error(t->ddp));
    if (t->ops->params_io(t->model, t->hparams + off, 0))
        tr_model_fatal(t, "checksum");
    int32_t crc = 0;
    if (t->stage > 0) {
        if (ddpc_send(t->row, t->hparams + off, t->nparams, DDPC_F32, 0) != DDPC_OK)
            tr_fatal(t, "checksum", ddpc_last_error(t->rt));
    } else {
        for (int s = 1; s < t->S; s++) {
            size_t o = model_layers_param_offset(ms, t->first_layer[s]);
            size_t c = model_layers_param_count(ms, t->first_layer[s], t->first_layer[s + 1]);
            if (ddpc_recv(t->row, t->hparams + o, c, DDPC_F32, s) != DDPC_OK)
                tr_fatal(t, "checksum", ddpc_last_error(t->rt));
        }
        uLong c = crc32(0L, Z_NULL, 0);
        const unsigned char *b = (const unsigned char *)t->hparams;
        size_t bytes = model_param_count(ms) * sizeof(float);
        while (bytes) { /* crc32 takes uInt lengths */
            uInt chunk = bytes > (1u << 30) ? (1u << 30) : (uInt)bytes;
            c = crc32(c, b, chunk);
            b += chunk;
            bytes -= chunk;
        }
        crc = (int32_t)(uint32_t)c;
    }
    if (t->S > 1 && ddpc_broadcast(t->row, &crc, 1, DDPC_I32, 0) != DDPC_OK)
        tr_fatal(t, "checksum", ddpc_last_error(t->rt));
    return (uint32_t)crc;
}

void tr_pipe_report(trainer_t *t)
{
    double mine = t->train_s > 0 ? t->pipe_wait_s / t->train_s : 0;
    double *all = malloc((size_t)t->size * sizeof(double));
    if (!all)
        tr_fatal(t, "pipeline", "out of memory");
    if (ddpc_allgather(t->comm, &mine, all, 1, DDPC_F64) != DDPC_OK)
        tr_fatal(t, "pipeline", ddpc_last_error(t->rt));
    const int M = t->opt.micro_batches;
    char buf[1024];
    size_t k = (size_t)snprintf(buf, sizeof buf, "pipeline: bubble (time waiting for transfers "
                                "/ step time, mean over replicas):");
    for (int s = 0; s < t->S && k < sizeof buf; s++) {
        double sum = 0;
        for (int r = 0; r < t->R; r++)
            sum += all[r * t->S + s];
        k += (size_t)snprintf(buf + k, sizeof buf - k, " stage %d %.1f%%", s, 100 * sum / t->R);
    }
    tr_say(t, "%s; theory (S-1)/(M+S-1) = %.1f%%\n", buf,
           100.0 * (t->S - 1) / (double)(M + t->S - 1));
    free(all);
}
