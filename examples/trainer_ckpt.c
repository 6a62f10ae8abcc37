/* SPDX-License-Identifier: BSD-3-Clause */
/* trainer_ckpt.c: the trainer's checkpoints: the handle and its attributes,
 * --resume (with the hyper-parameters a resumed run changes warned about),
 * saves with their lines and metrics events, and the stop marker. */
#include "trainer.h"
#include "marker.h"

#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ pipelines */
/* A pipeline's checkpoint (--pipeline-stages > 1) is the file an unsplit run
 * writes: the whole model under its own names, its optimizer state, so that
 * it resumes on any layout (doc/pipeline.md). Every rank keeps an engine of
 * the whole model over the world with an optimizer of the same kind: their
 * arenas only (they never reduce or step; the model's size again per rank).
 * Before a save, the stages of replica 0 send their parameters and
 * optimizer state, packed in the model's order, to world rank 0 (stage 0 of
 * replica 0), which writes them; a load fills every rank's copy, and each
 * stage takes its layers' share. */

static int pipe_ckpt_open(trainer_t *t)
{
    const options_t *o = &t->opt;
    if (ddpc_ddp_create(t->comm, NULL, &t->full_ddp) != DDPC_OK)
        return tr_fail(t, "%s", ddpc_ddp_last_error(t->full_ddp));
    if (tr_add_params(t, t->full_ddp, 0, model_num_params(&o->model)))
        return -1;
    if (ddpc_ddp_build(t->full_ddp) != DDPC_OK) /* collective over the world */
        return tr_fail(t, "%s", ddpc_ddp_last_error(t->full_ddp));
    ddpc_optim_config_t oc = *ddpc_optim_config(t->optim);
    if (ddpc_optim_create(t->full_ddp, &oc, &t->full_optim) != DDPC_OK)
        return tr_fail(t, "%s", ddpc_ddp_last_error(t->full_ddp));
    return 0;
}

/* dir 1: the stage's tensors (parameters, then each optimizer state) into
 * buf, packed; 0: back from buf. The whole model's engine (full, host
 * memory) when full_s >= 0: stage full_s's share of it; else the stage's
 * engine, whose arenas are the GPU's on cuda (tr_arena_copy). Returns the
 * floats moved; *rc -1 (through tr_fail) if a copy failed. */
static size_t pack(trainer_t *t, int full_s, float *buf, int dir, int *rc)
{
    ddpc_ddp_t d = full_s >= 0 ? t->full_ddp : t->ddp;
    ddpc_optim_t op = full_s >= 0 ? t->full_optim : t->optim;
    int p0, p1;
    tr_stage_params(t, full_s >= 0 ? full_s : t->stage, &p0, &p1);
    const int base = full_s >= 0 ? p0 : 0, nst = ddpc_optim_num_states(op);
    size_t k = 0;
    if (ddpc_ddp_param_wait(d, -1) != DDPC_OK && *rc == 0) /* a gather in flight (sharded) */
        *rc = tr_fail(t, "%s", ddpc_ddp_last_error(d));
    for (int a = -1; a < nst; a++) {
        float *arena = a < 0 ? ddpc_ddp_params(d, NULL) : ddpc_optim_state(op, a, NULL);
        for (int i = p0; i < p1; i++) {
            ddpc_param_info_t pi;
            ddpc_ddp_param_info(d, base + i - p0, &pi);
            size_t bytes = pi.numel * sizeof *buf;
            if (buf && full_s >= 0 && dir)
                memcpy(buf + k, arena + pi.offset, bytes);
            else if (buf && full_s >= 0)
                memcpy(arena + pi.offset, buf + k, bytes);
            else if (buf && *rc == 0)
                *rc = dir ? tr_arena_copy(t, buf + k, arena + pi.offset, bytes, 0)
                          : tr_arena_copy(t, arena + pi.offset, buf + k, bytes, 1);
            k += pi.numel;
        }
    }
    return k;
}

/* Collective over the world, before a save: world rank 0's whole-model
 * copy holds every stage's tensors; every rank's copy of the optimizer the
 * counters (the same on every stage: every stage steps every step). */
static int pipe_ckpt_collect(trainer_t *t)
{
    ddpc_optim_set_steps(t->full_optim, ddpc_optim_steps(t->optim));
    ddpc_optim_set_lr(t->full_optim, ddpc_optim_config(t->optim)->lr);
    ddpc_optim_set_loss_scale(t->full_optim, ddpc_optim_loss_scale(t->optim));
    ddpc_optim_set_scale_good_steps(t->full_optim, ddpc_optim_scale_good_steps(t->optim));
    if (t->replica != 0)
        return 0;
    size_t most = 0;
    int rc = 0;
    for (int s = 0; s < t->S; s++) {
        size_t k = pack(t, s, NULL, 1, &rc);
        most = k > most ? k : most;
    }
    /* host memory: the stages' tensors travel on the host row (MPI) */
    float *buf = malloc(most * sizeof *buf);
    if (!buf)
        rc = tr_fail(t, "checkpoint: no memory for %zu floats", most);
    for (int s = 0; rc == 0 && s < t->S; s++) {
        if (t->stage == 0) { /* world rank 0: its own, then each stage's */
            if (s > 0 && ddpc_recv(t->row, buf, pack(t, s, NULL, 1, &rc), DDPC_F32, s) != DDPC_OK)
                rc = tr_fail(t, "checkpoint: stage %d's tensors: %s", s, ddpc_last_error(t->rt));
            else if (s == 0)
                pack(t, -1, buf, 1, &rc);
            if (rc == 0)
                pack(t, s, buf, 0, &rc);
        } else if (s == t->stage) {
            size_t k = pack(t, -1, buf, 1, &rc);
            /* a failed copy still sends (the peer waits for it); the
               failure is agreed on after */
            if (ddpc_send(t->row, buf, k, DDPC_F32, 0) != DDPC_OK)
                rc = tr_fail(t, "checkpoint: sending stage %d's tensors: %s", s,
                             ddpc_last_error(t->rt));
        }
    }
    free(buf);
    return rc;
}

/* After a load (every rank's whole-model copy holds the file): this
 * stage's share into its engine and optimizer. */
static int pipe_ckpt_take(trainer_t *t)
{
    int rc = 0;
    float *buf = malloc(pack(t, t->stage, NULL, 1, &rc) * sizeof *buf);
    if (!buf)
        return tr_fail(t, "resume: no memory for the stage's tensors");
    pack(t, t->stage, buf, 1, &rc);
    pack(t, -1, buf, 0, &rc);
    free(buf);
    if (rc)
        return rc;
    ddpc_optim_set_steps(t->optim, ddpc_optim_steps(t->full_optim));
    ddpc_optim_set_lr(t->optim, ddpc_optim_config(t->full_optim)->lr);
    ddpc_optim_set_loss_scale(t->optim, ddpc_optim_loss_scale(t->full_optim));
    ddpc_optim_set_scale_good_steps(t->optim, ddpc_optim_scale_good_steps(t->full_optim));
    return 0;
}

void tr_close_checkpoints(trainer_t *t)
{
    ddpc_ckpt_destroy(t->ckpt); /* joins a writer still in flight (an error path) */
    t->ckpt = NULL;
    ddpc_optim_destroy(t->full_optim);
    ddpc_ddp_destroy(t->full_ddp);
    t->full_optim = NULL;
    t->full_ddp = NULL;
}

/* ------------------------------------------------------------------ the handle */

int tr_open_checkpoints(trainer_t *t)
{
    const options_t *o = &t->opt;
    static char dir[4096];
    ddpc_ckpt_config_t c = DDPC_CKPT_CONFIG_INIT;
    if (o->ckpt_dir) {
        c.dir = o->ckpt_dir;
    } else if (o->resume == RESUME_FILE) { /* read only: the file's directory */
        snprintf(dir, sizeof dir, "%s", o->resume_file);
        c.dir = dirname(dir);
    } else {
        return 0;
    }
    c.keep = o->ckpt_keep;
    const int whole = t->pipelined && t->S > 1; /* a stage holds a part of the model */
    if (whole && tr_agree(t, pipe_ckpt_open(t)))
        return -1;
    if (ddpc_ckpt_create(whole ? t->full_ddp : t->ddp, whole ? t->full_optim : t->optim, &c,
                         &t->ckpt) != DDPC_OK)
        return tr_fail(t, "%s", ddpc_ckpt_last_error(t->ckpt));
    char desc[128];
    model_describe(&o->model, desc, sizeof desc);
    if (ddpc_ckpt_set_user_attr_string(t->ckpt, "trainer_model", desc) != DDPC_OK ||
        ddpc_ckpt_set_user_attr_string(t->ckpt, "trainer_data", o->data) != DDPC_OK ||
        ddpc_ckpt_set_user_attr_double(t->ckpt, "trainer_batch_size", o->batch_size) != DDPC_OK ||
        ddpc_ckpt_set_user_attr_double(t->ckpt, "trainer_grad_accum", o->grad_accum) != DDPC_OK)
        return tr_fail(t, "%s", ddpc_ckpt_last_error(t->ckpt));
    return 0;
}

/* After a load: this run's options against the checkpoint's. The library
 * restored the checkpoint's learning rate with the optimizer's state (a
 * program with a schedule wants that); this program's rate is its --lr
 * (given or the default), constant, so it is set again, as the library keeps
 * this run's momentum and weight decay. Every rank holds the same values. */
static void tr_resume_options(trainer_t *t, const char *path)
{
    const options_t *o = &t->opt;
    double lr = ddpc_optim_config(t->optim)->lr;
    if (lr != o->lr) {
        if (t->rank == 0)
            ddpc_log(t->rt, DDPC_LOG_WARN, "trainer: %s was saved with --lr %g; continuing with "
                     "--lr %g", path, lr, o->lr);
        ddpc_optim_set_lr(t->optim, o->lr);
    }
    /* the data position is in samples: another batch or accumulation goes on
       from the same sample, but the steps are no longer those of the saved run */
    static const char *const names[] = {"batch-size", "grad-accum"};
    const char *attrs[] = {"trainer_batch_size", "trainer_grad_accum"};
    const double here[] = {o->batch_size, o->grad_accum};
    for (int i = 0; i < 2 && t->rank == 0; i++) {
        double v;
        if (ddpc_ckpt_get_user_attr_double(t->ckpt, attrs[i], &v) == DDPC_OK && v != here[i])
            ddpc_log(t->rt, DDPC_LOG_WARN, "trainer: %s was saved with --%s %g; continuing with "
                     "--%s %g", path, names[i], v, names[i], here[i]);
    }
}

/* Collective: --resume. Parameters, optimizer state and the data position
 * come back from rank 0's read of the file; the loader is positioned so that
 * the next batch is the one the saved run would have drawn next. */
int tr_prepare_checkpoints(trainer_t *t)
{
    const options_t *o = &t->opt;
    if (!t->ckpt || !o->ckpt_dir)
        return 0;
    if (ddpc_ckpt_prepare(t->ckpt) != DDPC_OK) { /* rank 0's status on every rank */
        if (t->rank == 0)
            fprintf(stderr, "%s\n", ddpc_ckpt_last_error(t->ckpt));
        return -1;
    }
    if (t->rank != 0)
        return 0;
    char merr[4400];
    if (strcmp(ddpc_ckpt_dir(t->ckpt), o->ckpt_dir))
        tr_say(t, "trainer: checkpoints in %s (DDPC_CKPT_DIR, over --ckpt-dir %s)\n",
               ddpc_ckpt_dir(t->ckpt), o->ckpt_dir);
    if (marker_remove(ddpc_ckpt_dir(t->ckpt), merr, sizeof merr) != 0) /* the last run's */
        fprintf(stderr, "trainer[rank 0/%d %s]: warning: %s: a job script may take this run "
                "for a stopped one\n", t->size, t->w->host, merr);
    return 0;
}

int tr_resume(trainer_t *t)
{
    const options_t *o = &t->opt;
    if (!t->ckpt || o->resume == RESUME_NEVER)
        return 0;
    ddpc_ckpt_meta_t m;
    char path[4096];
    ddpc_status_t st = ddpc_ckpt_load(t->ckpt, o->resume == RESUME_FILE ? o->resume_file : NULL,
                                      &m, path, sizeof path);
    if (st == DDPC_ERR_NOT_FOUND && o->resume == RESUME_AUTO) {
        tr_say(t, "trainer: no checkpoint in %s: starting from scratch\n", ddpc_ckpt_dir(t->ckpt));
        return 0;
    }
    if (st == DDPC_ERR_TIMEOUT) /* rank 0 gone or stuck: the ranks that remain say so, end */
        tr_fatal(t, "resume", ddpc_ckpt_last_error(t->ckpt));
    if (st != DDPC_OK) { /* every rank has the same status; rank 0 says why */
        if (t->rank == 0)
            fprintf(stderr, "%s\n", ddpc_ckpt_last_error(t->ckpt));
        if (t->rank == 0 && st == DDPC_ERR_MISMATCH)
            fprintf(stderr, "trainer: the checkpoint is of another model or optimizer: use the "
                            "same --model/--hidden/--optimizer, another --ckpt-dir, or --resume "
                            "never\n");
        return -1;
    }
    if (!m.has_sampler) { /* the same file on every rank */
        if (t->rank == 0)
            fprintf(stderr, "trainer: %s holds no data position (sampler state): not a trainer "
                            "checkpoint\n", path);
        return -1;
    }
    if (t->full_ddp && tr_agree(t, pipe_ckpt_take(t)))
        return -1;
    t->step = (int64_t)m.step;
    t->saved_step = t->step;
    ddpc_sampler_state_t s = {m.sampler_seed, m.sampler_epoch, m.sampler_consumed,
                              m.sampler_dataset_size, m.sampler_shuffle, m.sampler_drop_last};
    if (s.consumed >= s.dataset_size) { /* saved at an epoch's end: start the next */
        t->epoch = s.epoch + 1;
    } else {
        t->epoch = s.epoch;
        int rc = 0;
        if (ddpc_loader_resume(t->loader, &s) != DDPC_OK)
            rc = tr_fail(t, "resuming from %s: %s", path, ddpc_loader_last_error(t->loader));
        if (tr_agree(t, rc))
            return -1;
        t->mid_epoch = 1;
    }
    tr_say(t, "trainer: resumed from %s: step %lld, epoch %llu, %llu of %llu samples of the epoch "
           "done (saved by %d rank(s))\n",
           path, (long long)t->step, (unsigned long long)s.epoch + 1,
           (unsigned long long)s.consumed, (unsigned long long)s.dataset_size, m.world_size);
    tr_resume_options(t, path);
    return 0;
}

/* Collective: the result of an asynchronous save still in flight
 * (DDPC_CKPT_ASYNC=1), before the run ends on it. */
int tr_wait_checkpoint(trainer_t *t)
{
    if (!t->ckpt || !t->opt.ckpt_dir || ddpc_ckpt_wait(t->ckpt) == DDPC_OK)
        return 0;
    if (t->rank == 0)
        fprintf(stderr, "%s\n", ddpc_ckpt_last_error(t->ckpt));
    return -1;
}

/* Collective: write a checkpoint of the state after the last optimizer step.
 * last: the run ends on it (exit 0 or 3): an asynchronous save is waited for,
 * and so is one of this step already in flight. */
int tr_save_checkpoint(trainer_t *t, const char *why, int last)
{
    if (!t->ckpt || !t->opt.ckpt_dir)
        return 0;
    if (t->saved_step == t->step)
        return last ? tr_wait_checkpoint(t) : 0;
    ddpc_sampler_state_t s;
    if (ddpc_loader_get_state(t->loader, &s) != DDPC_OK)
        tr_fatal(t, "checkpoint", ddpc_loader_last_error(t->loader));
    ddpc_ckpt_meta_t m;
    memset(&m, 0, sizeof m);
    m.step = (uint64_t)t->step;
    m.epoch = s.epoch;
    m.has_sampler = 1;
    m.sampler_seed = s.seed;
    m.sampler_epoch = s.epoch;
    m.sampler_consumed = s.consumed;
    m.sampler_dataset_size = s.dataset_size;
    m.sampler_shuffle = s.shuffle;
    m.sampler_drop_last = s.drop_last;
    double t0 = tr_now();
    if (t->full_ddp && tr_agree(t, pipe_ckpt_collect(t)))
        return -1;
    if (ddpc_ckpt_save(t->ckpt, &m) != DDPC_OK) { /* rank 0's status on every rank */
        if (t->rank == 0)
            fprintf(stderr, "%s\n", ddpc_ckpt_last_error(t->ckpt));
        return -1;
    }
    t->saved_step = t->step;
    if (last && tr_wait_checkpoint(t))
        return -1;
    tr_say(t, "checkpoint: %s/ckpt-%08lld.h5 (%s, step %lld, %.2fs)\n", ddpc_ckpt_dir(t->ckpt),
           (long long)t->step, why, (long long)t->step, tr_now() - t0);
    char path[4200], js[8400];
    snprintf(path, sizeof path, "%s/ckpt-%08lld.h5", ddpc_ckpt_dir(t->ckpt), (long long)t->step);
    tr_metric(t, "{\"event\":\"checkpoint\",\"step\":%lld,\"reason\":\"%s\",\"path\":%s}",
              (long long)t->step, why, tr_json_str(path, js, sizeof js));
    return 0;
}

/* rank 0, after the checkpoint of a stop signal: <ckpt-dir>/trainer.stop,
 * the exit code for job scripts whose launcher loses it (marker.h) */
void tr_write_marker(trainer_t *t, int code)
{
    char ck[4200], err[4400];
    snprintf(ck, sizeof ck, "%s/ckpt-%08lld.h5", ddpc_ckpt_dir(t->ckpt), (long long)t->step);
    marker_t m = {code, code == TRAINER_EXIT_INTERRUPTED ? "interrupted" : "preempted",
                  t->stopped_by == SIGINT ? "SIGINT" : t->stopped_by == SIGUSR1 ? "SIGUSR1"
                                                                                 : "SIGTERM",
                  t->step, ck, t->w->host};
    if (marker_write(ddpc_ckpt_dir(t->ckpt), &m, err, sizeof err) != 0)
        fprintf(stderr, "trainer[rank 0/%d %s]: warning: no stop marker: %s (the exit code "
                "alone says %d)\n", t->size, t->w->host, err, code);
}
