/* SPDX-License-Identifier: BSD-3-Clause */
/* trainer_ckpt.c: the trainer's checkpoints: the handle and its attributes,
 * --resume (with the hyper-parameters a resumed run changes warned about),
 * saves with their lines and metrics events, and the stop marker. */
#include "trainer.h"
#include "marker.h"

#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

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
    if (ddpc_ckpt_create(t->ddp, t->optim, &c, &t->ckpt) != DDPC_OK)
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
