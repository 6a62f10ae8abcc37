/* SPDX-License-Identifier: BSD-3-Clause */
/* options.h: the trainer's command line. Parsing is a pure function (no
 * output, no exit) so that the unit tests can call it; main prints. */
#ifndef TRAINER_OPTIONS_H
#define TRAINER_OPTIONS_H

#include "ddpc.h"
#include "model.h"

#include <stddef.h>
#include <stdint.h>

/* Exit codes of the trainer (doc/trainer.md). */
enum {
    TRAINER_EXIT_OK = 0,        /* trained to the end */
    TRAINER_EXIT_ERROR = 1,     /* something failed; a message says what */
    TRAINER_EXIT_USAGE = 2,     /* bad command line */
    TRAINER_EXIT_PREEMPTED = 3, /* a SIGUSR1/SIGTERM stopped it after a checkpoint */
    TRAINER_EXIT_INTERRUPTED = 130 /* a SIGINT (Ctrl-C) stopped it after a checkpoint:
                                      128 + SIGINT, what a shell reports; not requeued */
};

#define TRAINER_DEFAULT_DATA "/usr/share/datasets/fashion-mnist"

typedef enum { DEVICE_AUTO = 0, DEVICE_CPU, DEVICE_CUDA } device_kind_t;
typedef enum { RESUME_AUTO = 0, RESUME_NEVER, RESUME_FILE } resume_mode_t;
typedef enum { SCHEDULE_1F1B = 0, SCHEDULE_GPIPE } schedule_t;

typedef struct {
    const char *data;        /* --data DIR: MNIST-format idx files */
    model_spec_t model;      /* --model, --hidden */
    int epochs;              /* --epochs N */
    int64_t max_steps;       /* --max-steps N: stop after N optimizer steps (0: no limit) */
    int batch_size;          /* --batch-size B, per rank */
    int optimizer;           /* --optimizer: DDPC_OPTIM_SGD or DDPC_OPTIM_ADAMW */
    double lr;               /* --lr */
    double momentum;         /* --momentum (sgd) */
    double weight_decay;     /* --weight-decay */
    int grad_accum;          /* --grad-accum K: micro-batches per optimizer step */
    double clip;             /* --clip NORM (0: off) */
    uint64_t seed;           /* --seed S */
    const char *ckpt_dir;    /* --ckpt-dir DIR (NULL: no checkpoints, "--ckpt-dir none") */
    int64_t ckpt_every;      /* --ckpt-every STEPS (0: only at epoch ends and stop) */
    int ckpt_keep;           /* --ckpt-keep N */
    resume_mode_t resume;    /* --resume auto|never|FILE */
    const char *resume_file;
    const char *metrics;     /* --metrics FILE (JSON lines, rank 0) */
    device_kind_t device;    /* --device cpu|cuda|auto */
    model_precision_t precision; /* --precision fp32|bf16|fp16 (bf16/fp16: cuda) */
    ddpc_dtype_t grad_dtype; /* --grad-dtype fp32|bf16|fp16: the all-reduce's wire type */
    int cuda_graph;          /* --cuda-graph on|off: replay whole steps as CUDA graphs */
    int64_t log_every;       /* --log-every STEPS (0: about 10 lines per epoch) */
    int stop_check_every;    /* --stop-check-every K: steps between preemption votes */
    int threads;             /* --threads N: BLAS threads per rank (0: cores / local ranks) */
    int pipeline_stages;     /* --pipeline-stages S: the layers split over S ranks (1: off) */
    int micro_batches;       /* --micro-batches M: each replica's batch in M pieces */
    int schedule;            /* --schedule: SCHEDULE_1F1B or SCHEDULE_GPIPE */
    int pipe_batch;          /* pipelines (S > 1 or M > 1): --batch-size as given, the
                                replica's batch; batch_size is then its micro-batch
                                (B / M) and grad_accum is M, as the unsplit trainer
                                with --grad-accum M runs it */
    int sync_bn;             /* --sync-bn: batchnorm's training statistics over every
                                rank of the data-parallel group (SyncBatchNorm);
                                --batchnorm is model.batchnorm */
    int print_crc_all;       /* --print-crc-all: every rank prints its checksum */
    int quiet;               /* --quiet: no progress lines, summaries only */
    int help;                /* --help */
} options_t;

/* The test-only hooks (doc/trainer.md, "Test hooks"), from the environment,
 * parsed strictly: a malformed value is a usage error, never a guess. */
typedef struct {
    int64_t fail_at_step;    /* DDPC_TRAINER_TEST_FAIL_AT_STEP=N[:MARKER] (-1: off) */
    const char *fail_marker; /* its MARKER (a file), or NULL */
    double step_sleep_s;     /* DDPC_TRAINER_TEST_STEP_SLEEP=SECONDS, 0..60 (0: off) */
} test_hooks_t;

/* 0, or -1 with a message naming the variable in err. */
int options_test_hooks(test_hooks_t *h, char *err, size_t n);

/* The defaults (doc/trainer.md lists them). */
void options_default(options_t *o);

/* Parse argv[1..argc) into o (already defaulted). Returns 0, or -1 with a
 * message in err naming the option and what was expected. Strings in o point
 * into argv. */
int options_parse(options_t *o, int argc, char **argv, char *err, size_t errlen);

/* The --help text. */
const char *options_usage(void);

#endif /* TRAINER_OPTIONS_H */
