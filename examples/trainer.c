/* SPDX-License-Identifier: BSD-3-Clause */
/* trainer.c: the reference ddpc program. Trains a linear classifier or an MLP
 * on MNIST-format data (Fashion-MNIST by default), data-parallel over the
 * ranks of an mpiexec or srun launch: every rank holds a replica, reads its
 * shard of each epoch through ddpc's sampler and loader, and ddpc's DDP
 * engine averages the gradients while backward runs. Checkpoints, resume
 * and preemption (SIGUSR1/SIGTERM -> checkpoint -> exit 3; SIGINT -> checkpoint
 * -> exit 130) make it restartable
 * under Slurm. doc/trainer.md is the user's guide.
 *
 * Reading order: main() at the bottom, then train_epoch() and step().
 * Errors: any rank may fail (a missing file, a full disk); the ranks agree
 * with a tiny all-reduce (tr_agree()) so that every rank stops together, and
 * the failing rank says why. */
#define _GNU_SOURCE /* sched_getaffinity */
#include "config.h"
#include "device.h"
#include "trainer.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

/* Fashion-MNIST's pixel statistics (x / 255): features are (x/255 - mean) / std */
#define PIXEL_MEAN 0.2860f
#define PIXEL_STD 0.3530f
/* --cuda-graph: eager steps before the first capture (cuBLASLt's plans,
 * NCCL's first collectives, the engine's missing-gradient check) */
#define GRAPH_WARMUP 3

/* ------------------------------------------------------------------ signals */
/* Set by the handler, read at step boundaries: the only thing the handler does.
 * SIGINT (Ctrl-C) stops like a preemption (checkpoint) but exits 130, not 3:
 * the user stopped the run, a requeue-on-3 script must not start it again.
 * Of several signals the numerically highest is kept, on every rank (the
 * vote's MAX): SIGTERM (15) and SIGUSR1 (10) outrank SIGINT (2), so a job
 * that Slurm preempts while a user presses Ctrl-C is still requeued. The
 * handlers block each other (sa_mask), so the compare and store is safe. */
static volatile sig_atomic_t stop_signal = 0;

static void on_stop_signal(int sig)
{
    if (sig > stop_signal)
        stop_signal = sig;
}

/* Installed before MPI_Init, on purpose: MPICH installs a SIGUSR1 handler of
 * its own there (hydra's process-failure notification) and it calls the
 * handler it found, so both see the signal. Installing ours after init would
 * take SIGUSR1 away from MPICH. tests/trainer.sh and the Slurm tests check
 * that a SIGUSR1 reaches the trainer under mpiexec and srun. */
static void install_signal_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR1);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaddset(&sa.sa_mask, SIGINT);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* SIGINT ignored at start (`nohup`, a background job of a script) stays
       ignored, as the shells and Python keep it */
    struct sigaction old;
    if (sigaction(SIGINT, NULL, &old) == 0 && old.sa_handler != SIG_IGN)
        sigaction(SIGINT, &sa, NULL);
}

/* ------------------------------------------------------------------ BLAS threads */
/* The thread-count call of the CBLAS configure found (see doc/blas.md). */
#if defined(HAVE_OPENBLAS_SET_NUM_THREADS)
void openblas_set_num_threads(int n);
#define set_threads(n) openblas_set_num_threads(n)
#elif defined(HAVE_BLI_THREAD_SET_NUM_THREADS)
void bli_thread_set_num_threads(int64_t n);
#define set_threads(n) bli_thread_set_num_threads(n)
#endif

/* BLAS threads per rank: --threads, else the environment's *_NUM_THREADS,
 * else the cores this process may run on shared by the ranks of the node.
 * Returns the count set, 0 when left to the library. */
static int set_blas_threads(int requested, int local_size)
{
    int n = requested;
    if (n == 0) {
        if (getenv("OPENBLAS_NUM_THREADS") || getenv("BLIS_NUM_THREADS") ||
            getenv("OMP_NUM_THREADS"))
            return 0; /* the user's environment decides */
        cpu_set_t cs;
        int cores = sched_getaffinity(0, sizeof cs, &cs) == 0 ? CPU_COUNT(&cs)
                                                              : (int)sysconf(_SC_NPROCESSORS_ONLN);
        n = cores / (local_size > 0 ? local_size : 1);
        n = n < 1 ? 1 : n;
    }
#ifdef set_threads
    set_threads(n);
    return n;
#else
    return 0; /* a CBLAS without a known call: its own default */
#endif
}

static uint32_t params_crc32(trainer_t *t)
{
    size_t n = t->nparams;
    if (ddpc_ddp_param_wait(t->ddp, -1) != DDPC_OK) /* a gather in flight (sharded) */
        tr_fatal(t, "checksum", ddpc_ddp_last_error(t->ddp));
    if (t->ops->params_io(t->model, t->hparams, 0))
        tr_model_fatal(t, "checksum");
    const float *p = t->hparams;
    uLong crc = crc32(0L, Z_NULL, 0);
    const unsigned char *b = (const unsigned char *)p;
    size_t bytes = n * sizeof(float);
    while (bytes) { /* crc32 takes uInt lengths */
        uInt chunk = bytes > (1u << 30) ? (1u << 30) : (uInt)bytes;
        crc = crc32(crc, b, chunk);
        b += chunk;
        bytes -= chunk;
    }
    return (uint32_t)crc;
}

static void fmt_duration(double s, char *buf, size_t n)
{
    long x = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
    if (x >= 3600)
        snprintf(buf, n, "%ld:%02ld:%02ld", x / 3600, x / 60 % 60, x % 60);
    else
        snprintf(buf, n, "%ld:%02ld", x / 60, x % 60);
}

/* ------------------------------------------------------------------ setup */
static int open_data(trainer_t *t)
{
    char img[4096], lab[4096];
    ddpc_idx_config_t c = DDPC_IDX_CONFIG_INIT;
    c.num_classes = t->opt.model.classes;
    c.mean = PIXEL_MEAN;
    c.std = PIXEL_STD;
    c.rank = t->rank;
    c.world = t->size;
    const char *splits[2] = {"train", "t10k"};
    ddpc_idx_t *ds[2] = {&t->train, &t->test};
    struct stat sb;
    const char *hint = strcmp(t->opt.data, TRAINER_DEFAULT_DATA)
                           ? ""
                           : "; install Debian's dataset-fashion-mnist or pass --data DIR";
    if (stat(t->opt.data, &sb) != 0)
        return tr_fail(t, "--data \"%s\": not a directory: %s%s", t->opt.data, strerror(errno),
                       hint);
    if (!S_ISDIR(sb.st_mode))
        return tr_fail(t, "--data \"%s\": not a directory: a %s (give the directory that holds "
                       "the idx files)", t->opt.data, S_ISREG(sb.st_mode) ? "regular file" : "special file");
    for (int i = 0; i < 2; i++) {
        if (ddpc_idx_default_paths(t->opt.data, splits[i], img, lab, sizeof img))
            return tr_fail(t, "--data \"%s\": path too long", t->opt.data);
        if (ddpc_idx_open(img, lab, &c, ds[i]) != DDPC_OK)
            return tr_fail(t, "%s", ddpc_idx_last_error(*ds[i]));
    }
    size_t dim = ddpc_idx_dim(t->train);
    if (ddpc_idx_dim(t->test) != dim)
        return tr_fail(t, "--data \"%s\": train images have %zu pixels, test images %zu", t->opt.data,
                       dim, ddpc_idx_dim(t->test));
    if ((size_t)t->size > ddpc_idx_count(t->train) || (size_t)t->size > ddpc_idx_count(t->test))
        return tr_fail(t, "%d ranks but only %zu training / %zu test samples", t->size,
                       ddpc_idx_count(t->train), ddpc_idx_count(t->test));
    t->opt.model.inputs = (int)dim;
    return 0;
}

static int grad_ready(void *ctx, int p)
{
    return ddpc_ddp_grad_ready((ddpc_ddp_t)ctx, p) != DDPC_OK;
}

/* the forward's first use of parameter p: a sharded step's gather of its
   bucket (DDPC_SHARD_GATHER=forward) done */
static int param_use(void *ctx, int p)
{
    return ddpc_ddp_param_wait((ddpc_ddp_t)ctx, p) != DDPC_OK;
}

/* where the backward writes parameter p's gradient in this micro-step (a
   bucket stage's under DDPC_SHARD=grads) */
static float *grad_at(void *ctx, int p) { return ddpc_ddp_grad((ddpc_ddp_t)ctx, p); }

/* Register the model's parameters, build the engine, initialize on rank 0
 * and broadcast, create the optimizer and the device's model. */
static int build_model(trainer_t *t)
{
    const options_t *o = &t->opt;
    ddpc_ddp_config_t dc = DDPC_DDP_CONFIG_INIT;
    dc.compress = o->grad_dtype;
    dc.stream = t->stream;
    dc.shard_gather = DDPC_GATHER_FORWARD; /* the cpu model waits by layer (param_use) */
    /* a pipeline stage's engine: its own layers' parameters, over its replicas */
    ddpc_comm_t ec = t->pipelined ? (t->dcol ? t->dcol : t->col) : t->dcomm ? t->dcomm : t->comm;
    if (ddpc_ddp_create(ec, &dc, &t->ddp) != DDPC_OK)
        return tr_fail(t, "%s", ddpc_ddp_last_error(t->ddp));
    int p0, p1;
    tr_stage_params(t, t->stage, &p0, &p1);
    if (tr_add_params(t, t->ddp, p0, p1))
        return -1;
    /* batchnorm's running statistics: buffers (checkpointed, rank 0's
       broadcast after every synced step) */
    for (int i = 0; i < model_num_buffers(&o->model); i++) {
        char name[32];
        int ndim;
        int64_t shape[1];
        model_buffer_desc(&o->model, i, name, &ndim, shape);
        if (ddpc_ddp_add_buffer(t->ddp, name, ndim, shape, NULL) != DDPC_OK)
            return tr_fail(t, "%s", ddpc_ddp_last_error(t->ddp));
    }
    return 0;
}

static int start_model(trainer_t *t)
{
    const options_t *o = &t->opt;
    float *params = ddpc_ddp_params(t->ddp, &t->nparams);
    /* the whole gradient arena, NULL under DDPC_SHARD=grads: the models
       take each gradient's pointer as they write it (grad_at) */
    float *grads = ddpc_ddp_grads(t->ddp, NULL);
    ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
    oc.type = (ddpc_optim_type_t)o->optimizer;
    oc.lr = o->lr;
    oc.momentum = o->optimizer == DDPC_OPTIM_SGD ? o->momentum : 0.0;
    oc.weight_decay = o->weight_decay;
    oc.clip_norm = o->clip;
    /* fp16: PyTorch GradScaler's defaults (65536, x2 every 2000 good steps, x0.5) */
    oc.dynamic_loss_scale = o->precision == PRECISION_FP16;
    if (ddpc_optim_create(t->ddp, &oc, &t->optim) != DDPC_OK)
        return tr_fail(t, "%s", ddpc_ddp_last_error(t->ddp));
    /* --clip over stages: the whole model's norm, along the pipeline in
       layer order (bitwise the unsplit model's) */
    if (t->pipelined && t->S > 1 && o->clip > 0 &&
        ddpc_optim_set_norm_group(t->optim, t->row,
                                  model_layers_param_offset(&o->model,
                                                            t->first_layer[t->stage])) != DDPC_OK)
        return tr_fail(t, "%s", ddpc_ddp_last_error(t->ddp));
    int max_batch = o->batch_size > EVAL_BATCH ? o->batch_size : EVAL_BATCH;
    model_place_t where = {t->gpu, t->stream, o->precision,
                           ddpc_optim_loss_scale_device(t->optim), 0, 0, NULL, NULL,
                           param_use, t->ddp, grad_at};
    if (o->model.batchnorm) { /* the buffers' initial values on every rank (a pure function) */
        size_t nb = 0;
        where.buffers = ddpc_ddp_buffers(t->ddp, &nb);
        if (!where.buffers || nb != model_buffer_count(&o->model))
            return tr_fail(t, "batchnorm: the engine has %zu buffer floats, expected %zu", nb,
                           model_buffer_count(&o->model));
        float *hb = malloc(nb * sizeof *hb);
        if (!hb)
            return tr_fail(t, "out of memory for the batchnorm buffers");
        model_init_buffers(&o->model, hb);
        int rc = tr_arena_copy(t, where.buffers, hb, nb * sizeof *hb, 1);
        free(hb);
        if (rc)
            return -1;
        where.bn_comm = o->sync_bn ? ddpc_ddp_comm(t->ddp) : NULL;
    }
    char err[512];
    if (t->pipelined) {
        if (tr_pipe_start(t, &where, params, grads))
            return -1;
    } else if (!(t->model = t->ops->create(&o->model, &where, max_batch, params, grads, err,
                                           sizeof err))) {
        return tr_fail(t, "%s", err);
    }
    /* the whole model's on every rank (a pipeline's stage 0 gathers the checksum) */
    t->hparams = malloc(model_param_count(&o->model) * sizeof(float));
    t->eval_x = malloc((size_t)EVAL_BATCH * ddpc_idx_dim(t->test) * sizeof(float));
    t->eval_y = malloc(EVAL_BATCH);
    t->eval_idx = malloc(EVAL_BATCH * sizeof(size_t));
    if (!t->hparams || !t->eval_x || !t->eval_y || !t->eval_idx)
        return tr_fail(t, "out of memory for batch buffers");
    if (t->replica == 0) { /* the initial parameters (a stage's share); broadcast later */
        model_init_params(&o->model, o->seed, t->hparams);
        size_t off = t->pipelined ? model_layers_param_offset(&o->model, t->first_layer[t->stage])
                                  : 0;
        if (t->ops->params_io(t->model, t->hparams + off, 1))
            return tr_fail(t, "%s", t->ops->error(t->model));
    }
    return 0;
}

static int start_data(trainer_t *t)
{
    ddpc_sampler_config_t sc = DDPC_SAMPLER_CONFIG_INIT;
    sc.seed = t->opt.seed;
    sc.shuffle = 1;
    sc.drop_last = 0;
    /* replicas split the data; a pipeline's stages read the same batches */
    if (ddpc_sampler_create(ddpc_idx_count(t->train), t->replica, t->R,
                            (size_t)t->opt.batch_size, &sc, &t->sampler) != DDPC_OK)
        return tr_fail(t, "%s", ddpc_sampler_last_error(t->sampler));
    if (ddpc_loader_create(t->train, t->sampler, NULL, &t->loader) != DDPC_OK)
        return tr_fail(t, "%s", ddpc_loader_last_error(t->loader));
    int64_t batches = (int64_t)ddpc_sampler_num_batches(t->sampler);
    t->steps_per_epoch = (batches + t->opt.grad_accum - 1) / t->opt.grad_accum;
    t->log_every = t->opt.log_every ? t->opt.log_every
                                    : (t->steps_per_epoch >= 10 ? t->steps_per_epoch / 10 : 1);
    return 0;
}

/* ------------------------------------------------------------------ evaluation */
/* Collective: the test set split into contiguous shards, one per rank, every
 * sample counted once; loss and hits summed over the ranks. */
static int evaluate(trainer_t *t)
{
    size_t N = ddpc_idx_count(t->test);
    size_t lo = N * (size_t)t->replica / (size_t)t->R;
    size_t hi = N * (size_t)(t->replica + 1) / (size_t)t->R;
    model_stats_t ms;
    if (t->ops->stats(t->model, &ms)) /* training's since the last log line: not ours */
        tr_model_fatal(t, "evaluation");
    if (t->ops->set_train) /* batchnorm: the running statistics */
        t->ops->set_train(t->model, 0);
    for (size_t b = lo; b < hi; b += EVAL_BATCH) {
        size_t n = hi - b < EVAL_BATCH ? hi - b : EVAL_BATCH;
        for (size_t i = 0; i < n; i++)
            t->eval_idx[i] = b + i;
        /* a pipeline's middle stages read nothing */
        int reads = t->stage == 0 || t->stage == t->S - 1;
        if (reads && ddpc_idx_gather(t->test, t->eval_idx, n, t->eval_x, t->eval_y) != DDPC_OK)
            tr_fatal(t, "evaluation", ddpc_idx_last_error(t->test));
        if (t->pipelined)
            tr_pipe_eval_forward(t, t->eval_x, t->eval_y, (int)n);
        else if (t->ops->upload(t->model, t->eval_x, t->eval_y, (int)n) ||
                 t->ops->forward(t->model))
            tr_model_fatal(t, "evaluation");
    }
    if (t->ops->stats(t->model, &ms))
        tr_model_fatal(t, "evaluation");
    if (t->ops->set_train)
        t->ops->set_train(t->model, 1);
    double sums[2] = {ms.loss_samples, ms.correct}, total[2];
    if (t->pipelined) {
        tr_pipe_reduce(t, sums, 2);
        memcpy(total, sums, sizeof total);
    } else if (tr_allreduce(t, sums, total, 2, DDPC_F64, DDPC_SUM)) {
        tr_fatal(t, "evaluation", ddpc_last_error(t->rt));
    }
    t->test_loss = total[0] / (double)N;
    t->test_acc = total[1] / (double)N;
    t->eval_step = t->step;
    return 0;
}

/* ------------------------------------------------------------------ training */
/* what the host counts; the loss and the hits are the model's (ops->stats) */
typedef struct {
    double batches;   /* micro-batches */
    double samples;   /* samples */
} stats_t;

#ifdef TRAINER_HAVE_CUDA_MODEL
static void graph_off(trainer_t *t, const char *why)
{
    t->graphs = 0;
    fprintf(stderr, "trainer[rank %d/%d %s]: --cuda-graph on: %s; training on without CUDA "
            "graphs\n", t->rank, t->size, t->w->host, why);
}

/* With --cuda-graph on: the step of the batch just uploaded, as a CUDA graph
 * (captured the first time for its input slot, then launched). 1 when done
 * so, 0 to run it eagerly (a partial batch, the warm-up, or a capture that
 * failed at its end, when nothing ran yet). A failure in the middle of a
 * capture leaves the engine inside a step: the job ends. */
static int graph_step(trainer_t *t, int n)
{
    if (!t->graphs || n != t->opt.batch_size || t->steps_run < GRAPH_WARMUP)
        return 0;
    int slot = model_cuda_upload_slot(t->model);
    char err[512];
    /* an eager step's gather still in flight (sharded, gathered in the
       forward): the stream waits for it here, outside the graph, whose
       forward does not wait (a capture cannot wait for work from outside it,
       and a launch runs no host code); a step inside the graph gathers at
       its end */
    if (ddpc_ddp_param_wait(t->ddp, -1) != DDPC_OK)
        tr_fatal(t, "cuda graph", ddpc_ddp_last_error(t->ddp));
    if (!t->graph_exec[slot]) {
        if (model_cuda_capture_begin(t->stream, err, sizeof err)) {
            graph_off(t, err);
            return 0;
        }
        const char *why = NULL;
        if (ddpc_ddp_set_sync(t->ddp, 1) != DDPC_OK || ddpc_ddp_zero_grad(t->ddp) != DDPC_OK)
            why = ddpc_ddp_last_error(t->ddp);
        else if (t->ops->forward(t->model))
            why = t->ops->error(t->model);
        else {
            int brc = t->ops->backward(t->model, 1.0, grad_ready, t->ddp);
            if (brc)
                why = brc < 0 ? t->ops->error(t->model) : ddpc_ddp_last_error(t->ddp);
            else if (ddpc_ddp_wait(t->ddp) != DDPC_OK || ddpc_optim_step(t->optim, NULL) != DDPC_OK)
                why = ddpc_ddp_last_error(t->ddp);
        }
        void *exec = NULL;
        int erc = model_cuda_capture_end(t->stream, &exec, err, sizeof err);
        if (why) {
            char m[1400];
            snprintf(m, sizeof m, "capturing step %lld%s%s: %s (--cuda-graph off trains "
                     "without graphs)", (long long)t->step + 1, erc ? ", " : "", erc ? err : "",
                     why);
            model_cuda_graph_free(exec);
            tr_fatal(t, "cuda graph", m);
        }
        if (erc) {
            graph_off(t, err);
            return 0;
        }
        t->graph_exec[slot] = exec;
    }
    if (model_cuda_graph_launch(t->graph_exec[slot], t->stream, err, sizeof err))
        tr_fatal(t, "cuda graph", err);
    if (ddpc_comm_watch(t->dcomm, "a CUDA graph of one training step") != DDPC_OK)
        tr_fatal(t, "cuda graph", ddpc_last_error(t->rt));
    return 1;
}
#else
static int graph_step(trainer_t *t, int n)
{
    (void)t;
    (void)n;
    return 0;
}
#endif

/* One optimizer step: k micro-batches (gradient accumulation), the last one
 * synchronizing. Returns the samples this rank used (0: the epoch is over). */
static size_t step(trainer_t *t, int k, stats_t *st)
{
    size_t used = 0;
    if (t->pipelined) {
        used = tr_pipe_step(t, k);
        st->batches += k;
        st->samples += (double)used;
        return used;
    }
    for (int m = 0; m < k; m++) {
        ddpc_batch_t b;
        if (ddpc_loader_next(t->loader, &b) != DDPC_OK)
            tr_fatal(t, "data", ddpc_loader_last_error(t->loader));
        if (b.n == 0)
            tr_fatal(t, "data", "the loader ran out of batches inside an accumulation window");
        if (t->ops->upload(t->model, b.x, b.y, (int)b.n))
            tr_model_fatal(t, "data");
        if (k == 1 && graph_step(t, (int)b.n)) {
            st->batches += 1;
            st->samples += (double)b.n;
            t->step++;
            return b.n;
        }
        ddpc_status_t s = ddpc_ddp_set_sync(t->ddp, m == k - 1);
        if (s == DDPC_OK && m == 0)
            s = ddpc_ddp_zero_grad(t->ddp);
        if (s != DDPC_OK)
            tr_fatal(t, "ddp", ddpc_ddp_last_error(t->ddp));
        ddpc_timeline_begin("forward"); /* DDPC_TIMELINE: the model's phases */
        if (t->ops->forward(t->model))
            tr_model_fatal(t, "forward");
        ddpc_timeline_end();
        ddpc_timeline_begin("backward");
        int brc = t->ops->backward(t->model, 1.0 / k, grad_ready, t->ddp);
        ddpc_timeline_end();
        if (brc < 0)
            tr_model_fatal(t, "backward");
        if (brc || ddpc_ddp_wait(t->ddp) != DDPC_OK)
            tr_fatal(t, "ddp", ddpc_ddp_last_error(t->ddp));
        st->batches += 1;
        st->samples += (double)b.n;
        used += b.n;
    }
    if (ddpc_optim_step(t->optim, NULL) != DDPC_OK)
        tr_fatal(t, "optimizer", ddpc_ddp_last_error(t->ddp));
    t->step++;
    return used;
}

/* Collective: the result of the stop vote in flight, 0 when none. */
static int finish_vote(trainer_t *t)
{
    if (!t->comm) /* the unwired launch's vote, taken at the last check (0 before one) */
        return t->vote_out;
    if (!t->vote)
        return 0;
    if (ddpc_work_wait(t->vote, -1) != DDPC_OK)
        tr_fatal(t, "stop vote", ddpc_last_error(t->rt));
    t->vote = NULL;
    return t->vote_out;
}

/* Collective, every --stop-check-every steps: did a stop signal reach any
 * rank? All ranks learn the same answer after the same step. The vote is
 * pipelined: the all-reduce launched after one check runs on the
 * communicator's thread during the next steps and is read at the next check,
 * so no step waits for it; a signal is acted on one check later. Where MPI
 * is not wired the vote goes through the device communicator at once (a
 * blocking exchange, staged through the GPU) and is held until the next
 * check, so that a signal is acted on at the same step on both paths. */
static int stop_vote(trainer_t *t)
{
    if (t->step % t->opt.stop_check_every)
        return 0;
    const double t0 = tr_now();
    int any = finish_vote(t);
    if (any) {
        t->stopped_by = any;
        return any;
    }
    t->vote_in = stop_signal;
    if (!t->comm) {
        if (tr_allreduce(t, &t->vote_in, &t->vote_out, 1, DDPC_I32, DDPC_MAX))
            tr_fatal(t, "stop vote", ddpc_last_error(t->rt));
    } else if (ddpc_iallreduce(t->comm, &t->vote_in, &t->vote_out, 1, DDPC_I32, DDPC_MAX,
                               &t->vote) != DDPC_OK) {
        tr_fatal(t, "stop vote", ddpc_last_error(t->rt));
    }
    t->vote_s += tr_now() - t0; /* what the checks cost the training loop */
    t->votes++;
    return 0;
}

/* Collective: the loss and accuracy since the last log, over all ranks. */
static void log_progress(trainer_t *t, stats_t *st, int64_t step_in_epoch, double t_epoch,
                         double samples_epoch)
{
    model_stats_t ms;
    if (t->pipelined) { /* the last stage's, gathered as its forwards ran */
        ms = t->pstats;
        memset(&t->pstats, 0, sizeof t->pstats);
    } else if (t->ops->stats(t->model, &ms)) {
        tr_model_fatal(t, "log");
    }
    double sums[4] = {ms.loss_sum, st->batches, ms.correct, st->samples}, g[4];
    if (t->pipelined) {
        tr_pipe_reduce(t, sums, 4);
        memcpy(g, sums, sizeof g);
    } else if (tr_allreduce(t, sums, g, 4, DDPC_F64, DDPC_SUM)) {
        tr_fatal(t, "log", ddpc_last_error(t->rt));
    }
    memset(st, 0, sizeof *st);
    if (t->rank != 0)
        return;
    double elapsed = tr_now() - t_epoch;
    double sps = elapsed > 0 ? samples_epoch / elapsed : 0;
    /* time left: the steps still to do in this run, at this run's pace */
    int64_t total = (int64_t)t->opt.epochs * t->steps_per_epoch;
    if (t->opt.max_steps && t->opt.max_steps < total)
        total = t->opt.max_steps;
    double per_step = t->steps_run ? t->train_s / (double)t->steps_run : 0;
    char eta[32];
    fmt_duration(per_step * (double)(total - t->step), eta, sizeof eta);
    double loss = g[1] ? g[0] / g[1] : 0, acc = g[3] ? g[2] / g[3] : 0;
    if (!t->opt.quiet)
        tr_say(t, "epoch %llu/%d step %lld/%lld (%lld) loss %.4f acc %.3f %.0f samples/s eta %s\n",
               (unsigned long long)t->epoch + 1, t->opt.epochs, (long long)step_in_epoch,
               (long long)t->steps_per_epoch, (long long)t->step, loss, acc, sps, eta);
    tr_metric(t, "{\"event\":\"log\",\"epoch\":%llu,\"step\":%lld,\"loss\":%.6f,\"train_acc\":%.6f,"
              "\"samples_per_s\":%.1f,\"lr\":%g,\"eta_s\":%.1f,\"time_s\":%.6f}",
              (unsigned long long)t->epoch + 1, (long long)t->step, loss, acc, sps,
              ddpc_optim_config(t->optim)->lr, per_step * (double)(total - t->step),
              tr_now() - t->t_start);
}

typedef enum { RUN_EPOCH_DONE, RUN_MAX_STEPS, RUN_STOPPED, RUN_FAILED } run_t;

/* For the restart tests only: DDPC_TRAINER_TEST_FAIL_AT_STEP=N[:MARKER]
 * makes the last rank exit 1 at once after step N (and its checkpoint), as a
 * crashed rank would, leaving the others inside the next collective; with
 * MARKER, only while the file MARKER does not exist (it is created), so that
 * a restart gets past. */
static void test_fail_at_step(trainer_t *t)
{
    const char *marker = t->hooks.fail_marker;
    if (t->hooks.fail_at_step < 0 || t->rank != t->size - 1 || t->hooks.fail_at_step != t->step)
        return;
    if (marker) {
        if (access(marker, F_OK) == 0)
            return;
        FILE *f = fopen(marker, "w");
        if (f)
            fclose(f);
    }
    fprintf(stderr, "trainer[rank %d/%d]: DDPC_TRAINER_TEST_FAIL_AT_STEP=%s: exiting 1 after "
            "step %lld, as a crash would\n", t->rank, t->size,
            getenv("DDPC_TRAINER_TEST_FAIL_AT_STEP"), (long long)t->step);
    fflush(NULL);
    _exit(TRAINER_EXIT_ERROR);
}

/* Train what is left of the current epoch. */
static run_t train_epoch(trainer_t *t)
{
    const int K = t->opt.grad_accum;
    /* for the preemption tests only: slow each step down so that a signal
     * sent from outside reliably arrives mid-run, however fast the machine */
    const double sleep_s = t->hooks.step_sleep_s;
    size_t batches_left = ddpc_sampler_num_batches(t->sampler); /* of this pass */
    stats_t st = {0, 0}; /* since the last progress line */
    double t_epoch = tr_now(), samples_epoch = 0;
    while (batches_left > 0) {
        if (t->opt.max_steps && t->step >= t->opt.max_steps)
            return RUN_MAX_STEPS;
        int k = batches_left < (size_t)K ? (int)batches_left : K;
        double t0 = tr_now();
        stats_t s1 = {0, 0};
        step(t, k, &s1);
        t->train_s += tr_now() - t0;
        if (sleep_s > 0)
            nanosleep(&(struct timespec){(time_t)sleep_s, (long)(fmod(sleep_s, 1.0) * 1e9)}, NULL);
        t->steps_run++;
        batches_left -= (size_t)k;
        samples_epoch += s1.samples * t->R;
        t->samples_run += s1.samples * t->R;
        st.batches += s1.batches, st.samples += s1.samples;
        int64_t in_epoch = t->steps_per_epoch - (int64_t)((batches_left + K - 1) / K);
        if (in_epoch % t->log_every == 0 || batches_left == 0)
            log_progress(t, &st, in_epoch, t_epoch, samples_epoch);
        if (stop_vote(t))
            return RUN_STOPPED;
        if (t->opt.ckpt_every && t->step % t->opt.ckpt_every == 0 && tr_save_checkpoint(t, "periodic", 0))
            return RUN_FAILED;
        test_fail_at_step(t);
    }
    return RUN_EPOCH_DONE;
}

/* ------------------------------------------------------------------ main */
int main(int argc, char **argv)
{
    trainer_t T;
    trainer_t *t = &T;
    memset(t, 0, sizeof *t);
    t->eval_step = -1;
    t->saved_step = -1;
    t->t_start = tr_now();
    options_default(&t->opt);
    char perr[512];
    int prc = options_parse(&t->opt, argc, argv, perr, sizeof perr);
    if (prc == 0 && options_test_hooks(&t->hooks, perr, sizeof perr) != 0)
        prc = -1;
    if (prc == 0 && t->opt.help) {
        fputs(options_usage(), stdout);
        return TRAINER_EXIT_OK;
    }
    install_signal_handlers(); /* before MPI (see above); a signal during setup is acted
                                  on at the first step */

    ddpc_config_t rc = DDPC_CONFIG_INIT;
    if (ddpc_init(&rc, &argc, &argv, &t->rt) != DDPC_OK) {
        fprintf(stderr, "trainer: %s\n", t->rt ? ddpc_last_error(t->rt) : ddpc_init_error());
        ddpc_finalize(t->rt);
        return prc ? TRAINER_EXIT_USAGE : TRAINER_EXIT_ERROR;
    }
    t->w = ddpc_world(t->rt);
    t->rank = t->w->rank;
    t->size = t->w->size;
    t->comm = ddpc_comm_world(t->rt);
    if (prc) { /* every rank parsed the same argv: rank 0 says it */
        if (t->rank == 0)
            fprintf(stderr, "trainer: %s\n", perr);
        ddpc_finalize(t->rt);
        return TRAINER_EXIT_USAGE;
    }
    const options_t *o = &t->opt;
    t->pipelined = o->pipeline_stages > 1 || o->micro_batches > 1;
    /* DDPC_BACKEND=nccl accepted a launch whose MPI is not wired (srun --mpi=pmix, an MPI
       without a PMIx client): the control messages go through the device communicator
       (PMIx before it exists), the gradients through NCCL; what needs MPI is refused
       here, the same on every rank */
    if (!t->comm && (o->device == DEVICE_CPU || t->pipelined)) {
        if (t->rank == 0) /* every rank parsed the same argv */
            fprintf(stderr, "trainer: MPI is not wired in this launch (srun --mpi=pmix with an "
                    "MPI that has no PMIx client), and %s: launch with srun --mpi=pmi2 or "
                    "mpiexec, or %s\n",
                    o->device == DEVICE_CPU ? "--device cpu reduces its gradients through MPI"
                                            : "a pipeline's stages pass activations through "
                                              "MPI communicators",
                    o->device == DEVICE_CPU ? "train with --device cuda and DDPC_BACKEND=nccl"
                                            : "train unsplit (no --pipeline-stages or "
                                              "--micro-batches)");
        ddpc_finalize(t->rt);
        return TRAINER_EXIT_ERROR;
    }
    int code = TRAINER_EXIT_ERROR;
    t->S = 1, t->R = t->size, t->stage = 0, t->replica = t->rank;
    t->first_layer[0] = 0, t->first_layer[1] = model_num_layers(&o->model);
    if (t->pipelined && tr_pipe_setup(t)) { /* the same on every rank */
        code = TRAINER_EXIT_USAGE;
        goto out;
    }

    /* device, threads, data, model */
    device_kind_t dev;
    int gpu;
    char note[512] = "";
    char derr[512];
    int ndev = device_cuda_count(); /* -1: no CUDA model in this build */
    int rc1 = device_resolve(o->device, t->w->local_rank, t->w->local_size, ndev,
                             getenv("CUDA_VISIBLE_DEVICES"), &dev, &gpu, note, sizeof note,
                             derr, sizeof derr);
    if (rc1)
        tr_fail(t, "%s", derr);
    if (tr_agree(t, rc1))
        goto out;
    /* one device for the whole job: --device auto trains on the cpu unless every rank has
       its GPU */
    /* and one backend: NCCL refuses two ranks on one GPU, so where any ranks share
       theirs (mpiexec -n 2 on a one-GPU machine) every rank stages through MPI */
    const int on_gpu = dev == DEVICE_CUDA;
    int32_t mine[2] = {!on_gpu, on_gpu && t->w->local_size > 1 && ndev == 1}, any[2];
    if (tr_allreduce(t, mine, any, 2, DDPC_I32, DDPC_MAX))
        ddpc_abort(t->rt, TRAINER_EXIT_ERROR, ddpc_last_error(t->rt));
    const int all_gpu = !any[0], shared_gpu = any[1];
    (void)shared_gpu; /* read by the CUDA model's branch only */
    if (!t->comm && (!all_gpu || shared_gpu)) { /* the same verdict on every rank */
        if (t->rank == 0)
            fprintf(stderr, "trainer: MPI is not wired in this launch (srun --mpi=pmix with an "
                    "MPI that has no PMIx client), and %s: launch with srun --mpi=pmi2 or "
                    "mpiexec\n", shared_gpu ? "ranks share a GPU (their gradients would be "
                    "staged through MPI)" : "a rank has no usable GPU (the cpu path reduces "
                    "its gradients through MPI)");
        goto out;
    }
    if (on_gpu && !all_gpu) {
        dev = DEVICE_CPU;
        gpu = -1;
        snprintf(note, sizeof note, "--device auto: using the cpu (a rank has no usable GPU)");
    }
    if (dev == DEVICE_CPU && o->precision != PRECISION_FP32) {
        if (t->rank == 0)
            fprintf(stderr, "trainer: --precision %s: needs the cuda device (%s)\n",
                    model_precision_name(o->precision), note[0] ? note : "--device cpu");
        goto out;
    }
    if (dev == DEVICE_CUDA && t->S > 1 && (o->clip > 0 || o->precision == PRECISION_FP16)) {
        /* the norm and the loss scale's skip decision are each stage's own */
        if (t->rank == 0)
            fprintf(stderr, "trainer: %s: not supported with --pipeline-stages %d on cuda yet "
                    "(%s)\n", o->clip > 0 ? "--clip" : "--precision fp16", t->S,
                    o->clip > 0 ? "a device engine's gradient norm stays on its GPU, and each "
                                  "stage holds a part of the model; --device cpu clips over "
                                  "the whole pipeline"
                                : "each stage's optimizer would decide alone to skip a step; "
                                  "use fp32 or bf16");
        code = TRAINER_EXIT_USAGE;
        goto out;
    }
    t->gpu = gpu;
    t->ops = &model_cpu_ops;
#ifdef TRAINER_HAVE_CUDA_MODEL
    if (dev == DEVICE_CUDA) {
        t->ops = &model_cuda_ops;
        int src = model_cuda_open(gpu, &t->stream, derr, sizeof derr);
        if (src)
            tr_fail(t, "%s", derr);
        if (tr_agree(t, src))
            goto out;
        /* the engine's communicator: nccl where built in (DDPC_BACKEND may say mpi) */
        ddpc_comm_config_t cc = DDPC_COMM_CONFIG_INIT;
        cc.device = gpu;
        cc.stream = t->stream;
        if (shared_gpu) {
            cc.backend = DDPC_BACKEND_MPI; /* mpi-staged; DDPC_BACKEND=nccl still overrides */
            tr_say(t, "trainer: ranks share a GPU (%d local ranks, 1 GPU visible): the "
                   "gradients go through MPI, staged in pinned host memory (NCCL takes one GPU "
                   "per rank)\n", t->w->local_size);
        }
        if (ddpc_comm_create(t->rt, &cc, &t->dcomm) != DDPC_OK) { /* fails on every rank */
            fprintf(stderr, "trainer: %s\n", ddpc_last_error(t->rt));
            goto out;
        }
        /* a pipeline's stages pass activations and reduce on the device */
        if (t->pipelined && tr_pipe_device_grid(t))
            goto out;
        t->graphs = o->cuda_graph;
        if (t->graphs && t->S > 1) {
            t->graphs = 0;
            tr_say(t, "trainer: --cuda-graph on: pipeline stages (--pipeline-stages %d) are not "
                   "captured; training without CUDA graphs\n", t->S);
        } else if (t->graphs && ddpc_comm_backend(t->dcomm) != DDPC_BACKEND_NCCL) {
            t->graphs = 0;
            tr_say(t, "trainer: --cuda-graph on: the %s backend runs host code in each all-reduce "
                   "and cannot be captured; training without CUDA graphs\n",
                   ddpc_backend_name(ddpc_comm_backend(t->dcomm)));
        } else if (t->graphs && o->grad_accum != 1) {
            t->graphs = 0;
            tr_say(t, "trainer: --cuda-graph on: captures steps of one micro-batch "
                   "(--grad-accum 1); training without CUDA graphs\n");
        }
    }
#endif

    int threads = dev == DEVICE_CPU ? set_blas_threads(o->threads, t->w->local_size) : 0;
    if (tr_agree_same(t, open_data(t)) || tr_agree(t, build_model(t)))
        goto out;
    if (ddpc_ddp_build(t->ddp) != DDPC_OK) { /* collective: fails on all ranks together */
        if (t->rank == 0)
            fprintf(stderr, "%s\n", ddpc_ddp_last_error(t->ddp));
        goto out;
    }
    if (tr_agree(t, start_model(t)) || tr_agree(t, start_data(t)))
        goto out;
    int mrc = 0;
    if (o->metrics && t->rank == 0 && !(t->metrics = fopen(o->metrics, "a")))
        mrc = tr_fail(t, "--metrics \"%s\": cannot open for appending: %s", o->metrics,
                      strerror(errno));
    if (tr_agree(t, mrc))
        goto out;

    char desc[128];
    model_describe(&o->model, desc, sizeof desc);
    if (note[0] && ndev >= 0) /* a CPU-only build needs no explanation */
        tr_say(t, "%s\n", note);
    tr_say(t, "trainer: %d rank(s) on %d node(s) via %s, device %s", t->size, t->w->num_nodes,
           ddpc_source_name(t->w->source), dev == DEVICE_CPU ? "cpu" : "cuda");
    if (threads)
        tr_say(t, " (%s, %d thread(s) per rank)", DDPC_BLAS_NAME, threads);
    if (dev == DEVICE_CUDA) {
        char gd[160];
        tr_say(t, " (GPU %s, %s, all-reduce %s, gradients %s on the wire)",
               ddpc_device_describe(gpu, gd, sizeof gd), model_precision_name(o->precision),
               ddpc_backend_name(ddpc_comm_backend(t->dcomm)),
               o->grad_dtype == DDPC_BF16 ? "bf16" : o->grad_dtype == DDPC_F16 ? "fp16" : "fp32");
    }
    if (t->pipelined) {
        char pd[1024];
        tr_pipe_describe(t, pd, sizeof pd);
        tr_say(t, "\ntrainer: model %s, %s lr %g, batch %d x %d replica(s) in %d micro-batch(es), "
               "%lld steps/epoch\n%s\n", desc, ddpc_optim_name((ddpc_optim_type_t)o->optimizer),
               o->lr, o->pipe_batch, t->R, o->micro_batches, (long long)t->steps_per_epoch, pd);
    } else {
        tr_say(t, "\ntrainer: model %s, %s lr %g, batch %d x %d rank(s) x %d accum, %lld "
               "steps/epoch\n", desc, ddpc_optim_name((ddpc_optim_type_t)o->optimizer), o->lr,
               o->batch_size, t->size, o->grad_accum, (long long)t->steps_per_epoch);
    }

    /* the checkpoint handle's buffers (pinned and device memory on a GPU)
     * before the first collective: NCCL's kernels may still spin in the
     * broadcast below, and an allocation then can deadlock */
    if (tr_agree(t, tr_open_checkpoints(t)))
        goto out;
    /* a directory the run cannot write to, or one another job writes to, ends
       it now, not at the first save */
    if (tr_prepare_checkpoints(t))
        goto out;
    /* where to start: rank 0's initial parameters everywhere, or a checkpoint */
    if (ddpc_ddp_broadcast_params(t->ddp) != DDPC_OK) {
        if (t->rank == 0)
            fprintf(stderr, "%s\n", ddpc_last_error(t->rt));
        goto out;
    }
    if (tr_resume(t))
        goto out;

    /* the epochs; a resumed run starts inside the epoch it stopped in */
    run_t how = RUN_EPOCH_DONE;
    for (; t->epoch < (uint64_t)o->epochs; t->epoch++) {
        if (!t->mid_epoch && ddpc_loader_set_epoch(t->loader, t->epoch) != DDPC_OK)
            tr_fatal(t, "data", ddpc_loader_last_error(t->loader));
        t->mid_epoch = 0;
        double t0 = tr_now(), s0 = t->samples_run;
        how = train_epoch(t);
        if (how != RUN_EPOCH_DONE)
            break;
        double secs = tr_now() - t0;
        ddpc_timeline_begin("evaluation");
        evaluate(t);
        ddpc_timeline_end();
        tr_say(t, "epoch %llu/%d done: test_acc=%.4f test_loss=%.4f time=%.1fs samples_per_s=%.0f\n",
               (unsigned long long)t->epoch + 1, o->epochs, t->test_acc, t->test_loss, secs,
               secs > 0 ? (t->samples_run - s0) / secs : 0);
        tr_metric(t, "{\"event\":\"epoch\",\"epoch\":%llu,\"step\":%lld,\"test_acc\":%.6f,"
                  "\"test_loss\":%.6f,\"epoch_s\":%.3f,\"samples_per_s\":%.1f}",
                  (unsigned long long)t->epoch + 1, (long long)t->step, t->test_acc, t->test_loss,
                  secs, secs > 0 ? (t->samples_run - s0) / secs : 0);
        if (tr_save_checkpoint(t, "end of epoch", 0)) {
            how = RUN_FAILED;
            break;
        }
    }
    if (how == RUN_FAILED)
        goto out;
    if (how != RUN_STOPPED)
        finish_vote(t); /* training is complete: a signal now changes nothing */
    if (how == RUN_STOPPED) {
        const int intr = t->stopped_by == SIGINT;
        tr_say(t, "trainer: stop signal%s: stopping at step %lld (epoch %llu)\n",
               intr ? " (SIGINT)" : "", (long long)t->step, (unsigned long long)t->epoch + 1);
        if (tr_save_checkpoint(t, "stop signal", 1))
            goto out;
        if (!t->ckpt || !o->ckpt_dir)
            tr_say(t, "trainer: no checkpoint written (--ckpt-dir none)\n");
        else if (t->rank == 0)
            tr_write_marker(t, intr ? TRAINER_EXIT_INTERRUPTED : TRAINER_EXIT_PREEMPTED);
        tr_metric(t, "{\"event\":\"%s\",\"epoch\":%llu,\"step\":%lld}",
                  intr ? "interrupted" : "preempted", (unsigned long long)t->epoch + 1,
                  (long long)t->step);
        if (intr) {
            tr_say(t, "trainer: interrupted (SIGINT): exit %d (rerun the same command to "
                   "continue)\n", TRAINER_EXIT_INTERRUPTED);
            code = TRAINER_EXIT_INTERRUPTED;
        } else {
            tr_say(t, "trainer: preempted: exit %d (requeue to continue)\n",
                   TRAINER_EXIT_PREEMPTED);
            code = TRAINER_EXIT_PREEMPTED;
        }
        goto out;
    }
    if (tr_save_checkpoint(t, "end", 1))
        goto out;
    if (t->eval_step != t->step) {
        ddpc_timeline_begin("evaluation");
        evaluate(t);
        ddpc_timeline_end();
    }

    uint32_t crc = t->pipelined ? tr_pipe_params_crc32(t) : params_crc32(t);
    if (t->S > 1)
        tr_pipe_report(t);
    double sps = t->train_s > 0 ? t->samples_run / t->train_s : 0;
    if (t->votes)
        tr_say(t, "trainer: stop vote: %lld check(s) through %s, %.1f us each on rank 0 (mean)\n",
               (long long)t->votes, t->comm ? "MPI (pipelined: read at the next check)"
                                            : "the device communicator",
               1e6 * t->vote_s / (double)t->votes);
    tr_say(t, "final: test_acc=%.4f test_loss=%.4f steps=%lld samples_per_s=%.0f params_crc32=%08x\n",
           t->test_acc, t->test_loss, (long long)t->step, sps, crc);
    tr_metric(t, "{\"event\":\"final\",\"test_acc\":%.6f,\"test_loss\":%.6f,\"steps\":%lld,"
              "\"samples_per_s\":%.1f,\"params_crc32\":\"%08x\"}",
              t->test_acc, t->test_loss, (long long)t->step, sps, crc);
    if (o->print_crc_all) {
        printf("rank %d: params_crc32=%08x\n", t->rank, crc);
        fflush(stdout);
    }
    code = TRAINER_EXIT_OK;

out:
    if (t->metrics && fclose(t->metrics) != 0)
        tr_metrics_failed(t, errno);
    if (t->metrics_errno) { /* a completed run exits 1; a stopped one keeps 3 or 130 */
        if (code == TRAINER_EXIT_OK)
            code = TRAINER_EXIT_ERROR;
        fprintf(stderr, "trainer[rank 0/%d %s]: --metrics \"%s\": incomplete (%s): exit %d\n",
                t->size, t->w->host, o->metrics, strerror(t->metrics_errno), code);
    }
    ddpc_loader_destroy(t->loader);
    ddpc_sampler_destroy(t->sampler);
    ddpc_idx_close(t->train);
    ddpc_idx_close(t->test);
#ifdef TRAINER_HAVE_CUDA_MODEL
    for (int i = 0; i < 2; i++)
        model_cuda_graph_free(t->graph_exec[i]);
#endif
    if (t->pipelined)
        tr_pipe_destroy(t);
    else if (t->model)
        t->ops->destroy(t->model);
    tr_close_checkpoints(t); /* joins a writer still in flight (an error path) */
    ddpc_optim_destroy(t->optim);
    ddpc_ddp_destroy(t->ddp);
    ddpc_comm_destroy(t->dcomm);
    ddpc_comm_destroy(t->drow);
    ddpc_comm_destroy(t->dcol);
    ddpc_comm_destroy(t->row);
    ddpc_comm_destroy(t->col);
#ifdef TRAINER_HAVE_CUDA_MODEL
    model_cuda_close(t->stream);
#endif
    free(t->hparams);
    free(t->eval_x);
    free(t->eval_y);
    free(t->eval_idx);
    ddpc_finalize(t->rt);
    return code;
}
