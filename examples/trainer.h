/* SPDX-License-Identifier: BSD-3-Clause */
/* trainer.h: what the trainer's files share: the state of a run (trainer_t)
 * and its messages (trainer_util.c), the checkpoints (trainer_ckpt.c).
 * trainer.c has main, the setup and the training loop. */
#ifndef TRAINER_H
#define TRAINER_H

#include "ddpc.h"
#include "model.h"
#include "options.h"

#include <stdint.h>
#include <stdio.h>

#ifdef __GNUC__
#define TR_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define TR_PRINTF(f, a)
#endif

#define EVAL_BATCH 1000 /* samples per evaluation forward */

typedef struct {
    options_t opt;
    ddpc_t rt;
    const ddpc_world_t *w;
    int rank, size;
    ddpc_comm_t comm;               /* the world's (MPI, host memory): control messages */
    ddpc_comm_t dcomm;              /* cuda: the device communicator the engine uses */
    void *stream;                   /* cuda: the compute stream of the engine and model */
    ddpc_ddp_t ddp;
    ddpc_optim_t optim;
    const model_ops_t *ops;         /* the device's model implementation */
    int gpu;                        /* its GPU, -1 on the cpu */
    model_t *model;
    size_t nparams;                 /* floats in the parameter arena */
    float *hparams;                 /* (nparams,) host: initialization, checksums */
    int graphs;                     /* --cuda-graph on and possible here */
    void *graph_exec[2];            /* a captured step per input slot (cudaGraphExec_t) */
    ddpc_idx_t train, test;
    ddpc_sampler_t sampler;
    ddpc_loader_t loader;
    ddpc_ckpt_t ckpt;               /* NULL: no checkpoints */
    ddpc_ddp_t full_ddp;            /* pipelines: the whole model's engine over the world,
                                       for checkpoints only (trainer_ckpt.c) */
    ddpc_optim_t full_optim;
    FILE *metrics;
    int metrics_errno;              /* the first write error of --metrics (0: none) */
    char err[1024];                 /* this rank's failure, said by fail() */
    /* where training stands (what a checkpoint saves, with the sampler state) */
    uint64_t epoch;                 /* current epoch, 0-based */
    int64_t step;                   /* optimizer steps done */
    int mid_epoch;                  /* resumed inside t->epoch: the loader is positioned */
    int64_t saved_step;             /* step of the last checkpoint written or read (-1: none) */
    ddpc_work_t vote;               /* the stop vote in flight (see stop_vote) */
    int32_t vote_in, vote_out;      /* its buffers: this rank's signal, the max over ranks
                                       (without MPI: the last check's, read at the next) */
    int64_t votes;                  /* checks made, and the seconds they took */
    double vote_s;
    int stopped_by;                 /* the signal the vote stopped on (0: none) */
    test_hooks_t hooks;             /* DDPC_TRAINER_TEST_* */
    /* this run */
    int64_t steps_per_epoch;        /* optimizer steps of a full epoch */
    int64_t log_every;
    float *eval_x;                  /* (EVAL_BATCH, dim) */
    uint8_t *eval_y;
    size_t *eval_idx;
    double t_start;                 /* now() at start */
    double train_s;                 /* seconds spent in training steps */
    double samples_run;             /* global samples trained in this run */
    int64_t steps_run;
    double test_loss, test_acc;     /* of the last evaluation */
    int64_t eval_step;              /* step of the last evaluation (-1: none) */
    /* data parallel over pipelines (trainer_pipe.c, doc/pipeline.md); the
     * unsplit trainer is one stage: R = size, replica = rank */
    int pipelined;                  /* --pipeline-stages > 1 or --micro-batches > 1 */
    int S, R;                       /* stages, replicas: world = R x S, rank = replica*S + stage */
    int stage, replica;
    int first_layer[MODEL_MAX_LAYERS + 1]; /* stage s: layers [first_layer[s], first_layer[s+1]) */
    ddpc_comm_t row;                /* this replica's pipeline (rank = stage), host memory:
                                       activations on the cpu; the sums' and checksum's
                                       broadcasts, checkpoints' tensors on every device */
    ddpc_comm_t col;                /* this stage's replicas (rank = replica), host memory:
                                       the engine on the cpu; the sums of the stats */
    ddpc_comm_t drow, dcol;         /* cuda: the same grid of dcomm (its backend and the
                                       compute stream): activations and the engine */
    ddpc_dtype_t act_dtype;         /* the activations' elements on the wire */
    int nslots;                     /* micro-batches whose activations this stage keeps */
    model_t **slots;                /* (nslots,) models on the same arenas; slots[0] = model;
                                       a stage > 0 receives into ops->input(slot) (cuda:
                                       device memory; slot 0 holds EVAL_BATCH) */
    float *step_x;                  /* stage 0: this step's micro-batches' inputs */
    uint8_t *step_y;                /* last stage: their labels */
    int *step_n;                    /* (M,) samples of each */
    model_stats_t pstats;           /* last stage: the training forwards since the last
                                       log, added in micro-batch order */
    double pipe_wait_s;             /* seconds training steps waited for transfers */
} trainer_t;

/* ------------------------------------------------------------------ trainer_util.c */
/* Monotonic seconds. */
double tr_now(void);
/* The control messages' all-reduce: MPI, else the device communicator or PMIx. */
int tr_allreduce(trainer_t *t, const void *in, void *out, size_t n, ddpc_dtype_t dt,
                 ddpc_redop_t op);
/* Record this rank's failure (said by tr_agree); returns -1. */
int tr_fail(trainer_t *t, const char *fmt, ...) TR_PRINTF(2, 3);
/* Collective: 0 when every rank's rc is 0. Otherwise each failing rank prints
 * its message and every rank returns -1, so all stop together. A failing
 * all-reduce leaves no way to agree: the job is aborted. */
int tr_agree(trainer_t *t, int rc);
/* tr_agree for a check that every rank makes of the same thing (the data
 * files, a shared directory): when rank 0 failed, only rank 0 says why. */
int tr_agree_same(trainer_t *t, int rc);
/* A failure in the middle of a step cannot be agreed on (the other ranks are
 * in a collective): end the job with the message. */
void tr_fatal(trainer_t *t, const char *what, const char *msg);
/* bytes between host memory and the stage engine's arenas (t->ddp, t->optim:
 * the GPU's on cuda, copied on the compute stream and waited for; to_arena:
 * host -> arena). 0, or -1 through tr_fail. */
int tr_arena_copy(trainer_t *t, void *dst, const void *src, size_t bytes, int to_arena);
/* Stage s's parameters: [*p0, *p1) of the model's (all of them unpipelined). */
void tr_stage_params(const trainer_t *t, int s, int *p0, int *p1);
/* Register the model's parameters [p0, p1), in the model's order, with d. */
int tr_add_params(trainer_t *t, ddpc_ddp_t d, int p0, int p1);
/* A failure of the model's device work inside a step: end the job. */
void tr_model_fatal(trainer_t *t, const char *what);
/* rank 0 only, to stdout, flushed at once (logs of batch jobs are files) */
void tr_say(trainer_t *t, const char *fmt, ...) TR_PRINTF(2, 3);
/* --metrics: one JSON object per line, rank 0, flushed so that a killed job
 * keeps it; a write error is said once (tr_metrics_failed) and the exit
 * becomes 1 */
void tr_metric(trainer_t *t, const char *fmt, ...) TR_PRINTF(2, 3);
void tr_metrics_failed(trainer_t *t, int e);
/* s as a JSON string literal, quotes included */
const char *tr_json_str(const char *s, char *buf, size_t n);

/* ------------------------------------------------------------------ trainer_pipe.c */
/* Collective over the world, after options and before the model: checks the
 * world's size against --pipeline-stages, makes the grid (row, col), splits
 * the layers by FLOPs. 0, or -1 (said on rank 0; a usage error). */
int tr_pipe_setup(trainer_t *t);
/* "pipeline: 2 stages x 2 replicas (1f1b, ...); stage 0: layers 0-1 (...)" */
void tr_pipe_describe(trainer_t *t, char *buf, size_t n);
/* cuda, collective over the world once the device communicator is made:
 * the grid again on it (drow, dcol). 0, or -1 (said on rank 0). */
int tr_pipe_device_grid(trainer_t *t);
/* After the engine is built: the stage's models (one per micro-batch in
 * flight) and buffers. 0, or -1 through tr_fail. */
int tr_pipe_start(trainer_t *t, const model_place_t *where, float *params, float *grads);
void tr_pipe_destroy(trainer_t *t);
/* Collective over the world: one optimizer step of k micro-batches through
 * the schedule. Returns the samples of the replica's batch. */
size_t tr_pipe_step(trainer_t *t, int k);
/* Collective over the pipeline: the forward of n evaluation samples, x on
 * stage 0, y on the last stage (NULL elsewhere); the loss adds to the last
 * stage's slot 0 stats. */
void tr_pipe_eval_forward(trainer_t *t, const float *x, const uint8_t *y, int n);
/* Collective over the world: sums of the last stage's v over the replicas
 * (the same all-reduce the unsplit trainer makes over its R ranks), then on
 * every rank. */
void tr_pipe_reduce(trainer_t *t, double *v, int n);
/* Collective over the world: CRC-32 of the whole model's parameters (in the
 * model's order), gathered from the stages of each replica; every rank gets
 * its replica's. */
uint32_t tr_pipe_params_crc32(trainer_t *t);
/* Collective over the world: each stage's measured bubble against the
 * schedule's theory, said on rank 0. */
void tr_pipe_report(trainer_t *t);

/* ------------------------------------------------------------------ trainer_ckpt.c */
/* The checkpoint handle (--ckpt-dir; read only for --resume FILE without
 * one), with the trainer's attributes. 0, or -1 through tr_fail. */
int tr_open_checkpoints(trainer_t *t);
/* The handle and, for pipelines, the whole model's engine it saves (not collective). */
void tr_close_checkpoints(trainer_t *t);
/* Collective, before training: the directory made, checked and locked
 * (ddpc_ckpt_prepare), the last run's stop marker removed. 0, or -1 (said
 * on rank 0). */
int tr_prepare_checkpoints(trainer_t *t);
/* Collective: --resume. 0 (resumed, or nothing to resume from), -1. */
int tr_resume(trainer_t *t);
/* Collective: a checkpoint of this step (why: its reason in the lines); last:
 * wait for it to be durable. 0, or -1 (said on rank 0). */
int tr_save_checkpoint(trainer_t *t, const char *why, int last);
/* rank 0, after the checkpoint of a stop signal: <ckpt-dir>/trainer.stop */
void tr_write_marker(trainer_t *t, int code);

#endif
