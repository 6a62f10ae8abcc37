/* SPDX-License-Identifier: BSD-3-Clause */
/* options.c: the trainer's command line: defaults, parsing with strict
 * number checks (every error names the option and what it expects), usage. */
#include "options.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void options_default(options_t *o)
{
    memset(o, 0, sizeof *o);
    o->data = TRAINER_DEFAULT_DATA;
    o->model.kind = MODEL_MLP;
    o->model.inputs = 784;
    o->model.classes = 10;
    o->model.nhidden = 2;
    o->model.hidden[0] = 256;
    o->model.hidden[1] = 128;
    o->epochs = 3;
    o->max_steps = 0;
    o->batch_size = 64;
    o->optimizer = DDPC_OPTIM_SGD;
    o->lr = -1;           /* per optimizer, set at the end of parsing */
    o->momentum = 0.9;
    o->weight_decay = -1; /* per optimizer */
    o->grad_accum = 1;
    o->clip = 0;
    o->seed = 42;
    o->ckpt_dir = "checkpoints";
    o->ckpt_every = 0;
    o->ckpt_keep = 3;
    o->resume = RESUME_AUTO;
    o->device = DEVICE_AUTO;
    o->precision = PRECISION_FP32;
    o->grad_dtype = DDPC_F32;
    o->stop_check_every = 1;
    o->pipeline_stages = 1;
    o->micro_batches = 1;
    o->schedule = SCHEDULE_1F1B;
}

const char *options_usage(void)
{
    return "usage: trainer [options]   (under mpiexec -n N or srun: data-parallel over N ranks)\n"
           "Trains a classifier on MNIST-format data with ddpc.\n"
           "\n"
           "data and model:\n"
           "  --data DIR            idx files {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]\n"
           "                        (default " TRAINER_DEFAULT_DATA ")\n"
           "  --model linear|mlp    784->10, or 784->hidden...->10 with ReLU (default mlp)\n"
           "  --hidden W1,W2,...    mlp hidden widths, at most 32 layers (default 256,128)\n"
           "  --batchnorm           mlp: BatchNorm1d after each hidden layer, before its\n"
           "                        ReLU (momentum 0.1, eps 1e-5; not with pipelines)\n"
           "  --sync-bn             with --batchnorm: training statistics over all ranks\n"
           "                        (SyncBatchNorm; default: each rank's own batch)\n"
           "  --device cpu|cuda|auto  where to train (default auto: cuda if usable, else cpu)\n"
           "  --threads N           BLAS threads per rank (default: cores / ranks on the node)\n"
           "  --cuda-graph on|off   cuda: capture a whole step (kernels, NCCL, optimizer)\n"
           "                        after warm-up and replay it (default off)\n"
           "  --precision fp32|bf16|fp16  GEMM arithmetic; float32 master weights either way,\n"
           "                        fp16 with dynamic loss scaling; bf16/fp16 need cuda\n"
           "                        (default fp32)\n"
           "training:\n"
           "  --epochs N            passes over the training set (default 3)\n"
           "  --max-steps N         stop after N optimizer steps in all (default 0: no limit)\n"
           "  --batch-size B        samples per rank per micro-step (default 64)\n"
           "  --grad-accum K        micro-steps per optimizer step (default 1)\n"
           "  --optimizer sgd|adamw (default sgd)\n"
           "  --lr LR               learning rate (default 0.05 sgd, 0.001 adamw)\n"
           "  --momentum M          sgd momentum (default 0.9)\n"
           "  --weight-decay WD     (default 0 sgd, 0.01 adamw)\n"
           "  --clip NORM           clip the global gradient norm (default 0: off)\n"
           "  --grad-dtype fp32|bf16|fp16  gradients on the wire of the all-reduce\n"
           "                        (default fp32)\n"
           "  --seed S              initialization and shuffling (default 42)\n"
           "pipeline (doc/pipeline.md; cpu and cuda):\n"
           "  --pipeline-stages S   split the layers over S consecutive ranks: the world is\n"
           "                        (ranks / S) replicas x S stages (default 1: off)\n"
           "  --micro-batches M     each replica's --batch-size in M micro-batches\n"
           "                        (default 1; the same step as --grad-accum M with\n"
           "                        --batch-size B/M)\n"
           "  --schedule 1f1b|gpipe at most S micro-batches in flight, or all forwards\n"
           "                        then all backwards (default 1f1b)\n"
           "checkpoints:\n"
           "  --ckpt-dir DIR|none   where checkpoints go (default checkpoints)\n"
           "  --ckpt-every STEPS    also every STEPS optimizer steps (default 0: at epoch\n"
           "                        ends, at the end and on preemption only)\n"
           "  --ckpt-keep N         keep the newest N (default 3)\n"
           "  --resume auto|never|FILE  auto: the newest valid checkpoint in --ckpt-dir\n"
           "                        (default auto)\n"
           "output:\n"
           "  --metrics FILE        JSON lines: one object per log interval and per epoch\n"
           "  --log-every STEPS     progress line interval (default 0: about 10 per epoch)\n"
           "  --quiet               no progress lines, epoch summaries and the final line only\n"
           "  --print-crc-all       every rank prints its parameter checksum at the end\n"
           "  --stop-check-every K  steps between the ranks' votes on a stop signal (default 1)\n"
           "  --help                this text\n"
           "\n"
           "exit codes: 0 done, 1 error, 2 bad command line,\n"
           "            3 stopped by SIGUSR1/SIGTERM after writing a checkpoint (requeue me)\n"
           "Documentation: doc/trainer.md\n";
}

static int bad(char *err, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* strict integer in [lo, hi] */
static int get_i64(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out,
                   char *err, size_t n)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
        return bad(err, n, "%s \"%s\": expected an integer in [%lld, %lld]", opt, v,
                   (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

static int get_int(const char *opt, const char *v, int lo, int hi, int *out, char *err, size_t n)
{
    int64_t x;
    if (get_i64(opt, v, lo, hi, &x, err, n))
        return -1;
    *out = (int)x;
    return 0;
}

/* strict finite number in [lo, hi]; lo_open: (lo, ...; hi_open: ..., hi) */
static int get_double(const char *opt, const char *v, double lo, int lo_open, double hi,
                      int hi_open, double *out, char *err, size_t n)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(x) || x < lo || x > hi || (lo_open && x == lo) ||
        (hi_open && x == hi))
        return bad(err, n, "%s \"%s\": expected a number in %s%g, %g%s", opt, v,
                   lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]");
    *out = x;
    return 0;
}

static int get_hidden(const char *v, model_spec_t *m, char *err, size_t n)
{
    int k = 0;
    const char *p = v;
    while (1) {
        char *end;
        errno = 0;
        long w = strtol(p, &end, 10);
        if (end == p || errno || w < 1 || w > 65536 || (*end && *end != ','))
            return bad(err, n, "--hidden \"%s\": expected comma-separated widths in [1, 65536], "
                       "e.g. 1024,1024", v);
        if (k == MODEL_MAX_HIDDEN)
            return bad(err, n, "--hidden \"%s\": at most %d hidden layers", v, MODEL_MAX_HIDDEN);
        m->hidden[k++] = (int)w;
        if (!*end)
            break;
        p = end + 1;
    }
    m->nhidden = k;
    return 0;
}

/* options that take a value */
static const char *const with_value[] = {
    "--data", "--model", "--hidden", "--epochs", "--max-steps", "--batch-size", "--optimizer",
    "--lr", "--momentum", "--weight-decay", "--grad-accum", "--clip", "--seed", "--ckpt-dir",
    "--ckpt-every", "--ckpt-keep", "--resume", "--metrics", "--device", "--log-every",
    "--stop-check-every", "--threads", "--precision", "--grad-dtype", "--cuda-graph",
    "--pipeline-stages", "--micro-batches", "--schedule", NULL};
static const char *const flags[] = {"--help", "--print-crc-all", "--quiet", "--batchnorm",
                                    "--sync-bn", NULL};

static int in_list(const char *const *list, const char *s)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], s))
            return 1;
    return 0;
}

int options_parse(options_t *o, int argc, char **argv, char *err, size_t n)
{
    int hidden_given = 0, model_linear = o->model.kind == MODEL_LINEAR, wd_given = 0;
    int batchnorm = o->model.batchnorm;
    model_spec_t hidden = o->model;
    for (int i = 1; i < argc; i++) {
        char name[64];
        const char *arg = argv[i], *v = NULL, *eq = strchr(arg, '=');
        if (strncmp(arg, "--", 2) || (eq && (size_t)(eq - arg) >= sizeof name))
            return bad(err, n, "unexpected argument \"%s\" (options start with --; see --help)",
                       arg);
        if (eq) {
            memcpy(name, arg, (size_t)(eq - arg));
            name[eq - arg] = 0;
            v = eq + 1;
        } else {
            snprintf(name, sizeof name, "%s", arg);
        }
        if (in_list(flags, name)) {
            if (v)
                return bad(err, n, "%s takes no value", name);
            if (!strcmp(name, "--help"))
                o->help = 1;
            else if (!strcmp(name, "--print-crc-all"))
                o->print_crc_all = 1;
            else if (!strcmp(name, "--batchnorm"))
                batchnorm = 1;
            else if (!strcmp(name, "--sync-bn"))
                o->sync_bn = 1;
            else
                o->quiet = 1;
            continue;
        }
        if (!in_list(with_value, name))
            return bad(err, n, "unknown option \"%s\" (see --help)", name);
        if (!v) {
            if (i + 1 >= argc)
                return bad(err, n, "%s needs a value (see --help)", name);
            v = argv[++i];
        }
        int rc = 0;
        int64_t x;
        if (!strcmp(name, "--data")) {
            if (!*v)
                return bad(err, n, "--data: expected a directory, got an empty string");
            o->data = v;
        } else if (!strcmp(name, "--model")) {
            if (!strcmp(v, "linear"))
                model_linear = 1;
            else if (!strcmp(v, "mlp"))
                model_linear = 0;
            else
                return bad(err, n, "--model \"%s\": expected linear or mlp", v);
        } else if (!strcmp(name, "--hidden")) {
            rc = get_hidden(v, &hidden, err, n);
            hidden_given = 1;
        } else if (!strcmp(name, "--epochs")) {
            rc = get_int(name, v, 1, 1000000, &o->epochs, err, n);
        } else if (!strcmp(name, "--max-steps")) {
            rc = get_i64(name, v, 0, INT64_MAX, &o->max_steps, err, n);
        } else if (!strcmp(name, "--batch-size")) {
            rc = get_int(name, v, 1, 1 << 20, &o->batch_size, err, n);
        } else if (!strcmp(name, "--optimizer")) {
            if (!strcmp(v, "sgd"))
                o->optimizer = DDPC_OPTIM_SGD;
            else if (!strcmp(v, "adamw"))
                o->optimizer = DDPC_OPTIM_ADAMW;
            else
                return bad(err, n, "--optimizer \"%s\": expected sgd or adamw", v);
        } else if (!strcmp(name, "--lr")) {
            rc = get_double(name, v, 0, 1, 1e6, 0, &o->lr, err, n);
        } else if (!strcmp(name, "--momentum")) {
            rc = get_double(name, v, 0, 0, 1, 1, &o->momentum, err, n);
        } else if (!strcmp(name, "--weight-decay")) {
            rc = get_double(name, v, 0, 0, 1e6, 0, &o->weight_decay, err, n);
            wd_given = 1;
        } else if (!strcmp(name, "--grad-accum")) {
            rc = get_int(name, v, 1, 1 << 20, &o->grad_accum, err, n);
        } else if (!strcmp(name, "--clip")) {
            rc = get_double(name, v, 0, 0, 1e30, 0, &o->clip, err, n);
        } else if (!strcmp(name, "--seed")) {
            rc = get_i64(name, v, 0, INT64_MAX, &x, err, n);
            o->seed = (uint64_t)x;
        } else if (!strcmp(name, "--ckpt-dir")) {
            if (!*v)
                return bad(err, n, "--ckpt-dir: expected a directory or none, got an empty string");
            o->ckpt_dir = strcmp(v, "none") ? v : NULL;
        } else if (!strcmp(name, "--ckpt-every")) {
            rc = get_i64(name, v, 0, INT64_MAX, &o->ckpt_every, err, n);
        } else if (!strcmp(name, "--ckpt-keep")) {
            rc = get_int(name, v, 1, 1000000, &o->ckpt_keep, err, n);
        } else if (!strcmp(name, "--resume")) {
            if (!*v)
                return bad(err, n, "--resume: expected auto, never or a checkpoint file");
            o->resume = !strcmp(v, "auto") ? RESUME_AUTO : !strcmp(v, "never") ? RESUME_NEVER
                                                                                 : RESUME_FILE;
            o->resume_file = o->resume == RESUME_FILE ? v : NULL;
        } else if (!strcmp(name, "--metrics")) {
            if (!*v)
                return bad(err, n, "--metrics: expected a file name, got an empty string");
            o->metrics = v;
        } else if (!strcmp(name, "--device")) {
            if (!strcmp(v, "cpu"))
                o->device = DEVICE_CPU;
            else if (!strcmp(v, "cuda"))
                o->device = DEVICE_CUDA;
            else if (!strcmp(v, "auto"))
                o->device = DEVICE_AUTO;
            else
                return bad(err, n, "--device \"%s\": expected cpu, cuda or auto", v);
        } else if (!strcmp(name, "--log-every")) {
            rc = get_i64(name, v, 0, INT64_MAX, &o->log_every, err, n);
        } else if (!strcmp(name, "--stop-check-every")) {
            rc = get_int(name, v, 1, 1000000, &o->stop_check_every, err, n);
        } else if (!strcmp(name, "--precision")) {
            if (!strcmp(v, "fp32"))
                o->precision = PRECISION_FP32;
            else if (!strcmp(v, "bf16"))
                o->precision = PRECISION_BF16;
            else if (!strcmp(v, "fp16"))
                o->precision = PRECISION_FP16;
            else
                return bad(err, n, "--precision \"%s\": expected fp32, bf16 or fp16", v);
        } else if (!strcmp(name, "--cuda-graph")) {
            if (!strcmp(v, "on"))
                o->cuda_graph = 1;
            else if (!strcmp(v, "off"))
                o->cuda_graph = 0;
            else
                return bad(err, n, "--cuda-graph \"%s\": expected on or off", v);
        } else if (!strcmp(name, "--grad-dtype")) {
            if (!strcmp(v, "fp32"))
                o->grad_dtype = DDPC_F32;
            else if (!strcmp(v, "bf16"))
                o->grad_dtype = DDPC_BF16;
            else if (!strcmp(v, "fp16"))
                o->grad_dtype = DDPC_F16;
            else
                return bad(err, n, "--grad-dtype \"%s\": expected fp32, bf16 or fp16", v);
        } else if (!strcmp(name, "--pipeline-stages")) {
            rc = get_int(name, v, 1, MODEL_MAX_LAYERS, &o->pipeline_stages, err, n);
        } else if (!strcmp(name, "--micro-batches")) {
            rc = get_int(name, v, 1, 1 << 20, &o->micro_batches, err, n);
        } else if (!strcmp(name, "--schedule")) {
            if (!strcmp(v, "1f1b"))
                o->schedule = SCHEDULE_1F1B;
            else if (!strcmp(v, "gpipe"))
                o->schedule = SCHEDULE_GPIPE;
            else
                return bad(err, n, "--schedule \"%s\": expected 1f1b or gpipe", v);
        } else if (!strcmp(name, "--threads")) {
            rc = get_int(name, v, 0, 4096, &o->threads, err, n);
        }
        if (rc)
            return rc;
    }
    if (model_linear) {
        if (hidden_given)
            return bad(err, n, "--hidden: only for --model mlp (linear has no hidden layer)");
        o->model.kind = MODEL_LINEAR;
        o->model.nhidden = 0;
    } else {
        o->model = hidden;
        o->model.kind = MODEL_MLP;
    }
    if (batchnorm && model_linear)
        return bad(err, n, "--batchnorm: only for --model mlp (linear has no hidden layer to "
                   "normalize)");
    if (o->sync_bn && !batchnorm)
        return bad(err, n, "--sync-bn: needs --batchnorm (it synchronizes the BatchNorm "
                   "layers' statistics)");
    if (batchnorm && (o->pipeline_stages > 1 || o->micro_batches > 1))
        return bad(err, n, "--batchnorm: not with --pipeline-stages/--micro-batches (a "
                   "pipeline's micro-batches would each need their own statistics)");
    o->model.batchnorm = batchnorm;
    if (o->precision != PRECISION_FP32 && o->device == DEVICE_CPU)
        return bad(err, n, "--precision %s: needs --device cuda or auto (the cpu model computes "
                   "in fp32)", model_precision_name(o->precision));
    if (o->pipeline_stages > 1 || o->micro_batches > 1) {
        const int S = o->pipeline_stages, M = o->micro_batches;
        if (S > model_num_layers(&o->model))
            return bad(err, n, "--pipeline-stages %d: the model has %d layer(s), one stage needs "
                       "at least one (more layers: --hidden W1,W2,...)", S,
                       model_num_layers(&o->model));
        if (o->grad_accum != 1)
            return bad(err, n, "--grad-accum %d: with --pipeline-stages/--micro-batches the "
                       "micro-batches are the accumulation (--micro-batches M --batch-size B "
                       "steps as --grad-accum M --batch-size B/M)", o->grad_accum);
        if (o->batch_size % M)
            return bad(err, n, "--micro-batches %d: --batch-size %d does not divide into %d "
                       "equal micro-batches", M, o->batch_size, M);
        o->pipe_batch = o->batch_size;
        o->batch_size /= M;
        o->grad_accum = M;
    }
    if (o->lr < 0)
        o->lr = o->optimizer == DDPC_OPTIM_ADAMW ? 0.001 : 0.05;
    if (!wd_given)
        o->weight_decay = o->optimizer == DDPC_OPTIM_ADAMW ? 0.01 : 0.0;
    return 0;
}

int options_test_hooks(test_hooks_t *h, char *err, size_t n)
{
    h->fail_at_step = -1;
    h->fail_marker = NULL;
    h->step_sleep_s = 0;
    const char *v = getenv("DDPC_TRAINER_TEST_FAIL_AT_STEP");
    if (v && *v) {
        char *end;
        errno = 0;
        long long s = strtoll(v, &end, 10);
        if (end == v || errno || s < 0 || (*end && *end != ':')) {
            snprintf(err, n, "DDPC_TRAINER_TEST_FAIL_AT_STEP=\"%s\": expected STEP[:MARKER], "
                     "STEP an integer >= 0", v);
            return -1;
        }
        h->fail_at_step = s;
        h->fail_marker = *end == ':' && end[1] ? end + 1 : NULL;
    }
    v = getenv("DDPC_TRAINER_TEST_STEP_SLEEP");
    if (v && *v) {
        char *end;
        errno = 0;
        double d = strtod(v, &end);
        if (end == v || *end || errno || !(d >= 0 && d <= 60)) {
            snprintf(err, n, "DDPC_TRAINER_TEST_STEP_SLEEP=\"%s\": expected seconds in [0, 60]", v);
            return -1;
        }
        h->step_sleep_s = d;
    }
    return 0;
}
