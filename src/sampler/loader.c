/* SPDX-License-Identifier: BSD-3-Clause */
/* loader.c: batches of an idx dataset in the order of a sampler, with a
 * prefetch thread. Two slots: the loop reads the front slot while the thread
 * fills the back one (draws the sampler's next batch, gathers its rows); next
 * swaps them. The loader does not shuffle or shard: the sampler does. */
#include "config.h"
#include "ddpc_data.h"
#include "internal.h"
#include "local.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct slot {
    float *x;                    /* (B, dim) */
    uint8_t *y;                  /* (B,) */
    size_t *idx;                 /* (B,) */
    size_t n;                    /* rows filled, <= B */
    ddpc_status_t st;            /* of the sampler call that filled it */
    ddpc_sampler_state_t after;  /* sampler state once this batch is used */
    char err[DDPC_ERRMSG_LEN];   /* sampler message when st != DDPC_OK */
};

struct ddpc_loader {
    ddpc_idx_t ds;
    ddpc_sampler_t smp;          /* touched only by whoever fills a slot */
    size_t batch, dim;           /* B, floats per sample */
    int prefetch;
    struct slot slot[2];
    int front;                   /* slot the loop holds; 1 - front is the back */
    /* prefetch thread; the fields below are guarded by mu */
    pthread_t thread;
    int have_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int filling;                 /* the thread is filling the back slot */
    int ready;                   /* the back slot holds an undelivered batch */
    int quit;
    /* the loop's side */
    ddpc_sampler_state_t delivered; /* state after the batches returned so far */
    double wait_s;               /* seconds next() waited for data */
    int broken;
    char prefix[48];
    char err[DDPC_ERRMSG_LEN];
};

#define fail(h, st, ...) DDPC_HANDLE_ERR(h, "loader", st, __VA_ARGS__)

/* Draw the sampler's next batch into sl and gather its rows. */
static void fill(ddpc_loader_t ld, struct slot *sl)
{
    sl->n = 0;
    sl->st = ddpc_sampler_next_batch(ld->smp, sl->idx, &sl->n);
    if (sl->st == DDPC_OK)
        sl->st = ddpc_sampler_get_state(ld->smp, &sl->after);
    if (sl->st != DDPC_OK) {
        snprintf(sl->err, sizeof sl->err, "%s", ddpc_sampler_last_error(ld->smp));
        sl->n = 0;
        return;
    }
    ddpc_idx_gather_rows(ld->ds, sl->idx, sl->n, sl->x, sl->y);
}

static void *prefetch_main(void *arg)
{
    ddpc_loader_t ld = arg;
    ddpc_tl_name_thread("loader");
    pthread_mutex_lock(&ld->mu);
    for (;;) {
        while (!ld->filling && !ld->quit)
            pthread_cond_wait(&ld->cv, &ld->mu);
        if (ld->quit)
            break;
        struct slot *back = &ld->slot[1 - ld->front]; /* front changes only while idle */
        pthread_mutex_unlock(&ld->mu);
        fill(ld, back);
        pthread_mutex_lock(&ld->mu);
        ld->filling = 0;
        ld->ready = 1;
        pthread_cond_broadcast(&ld->cv);
    }
    pthread_mutex_unlock(&ld->mu);
    return NULL;
}

/* Ask the thread to fill the back slot. */
static void kick(ddpc_loader_t ld)
{
    if (!ld->prefetch)
        return;
    pthread_mutex_lock(&ld->mu);
    ld->filling = 1;
    ld->ready = 0;
    pthread_cond_broadcast(&ld->cv);
    pthread_mutex_unlock(&ld->mu);
}

/* Wait until the thread is idle; then the sampler and both slots are ours. */
static void quiesce(ddpc_loader_t ld)
{
    if (!ld->prefetch)
        return;
    pthread_mutex_lock(&ld->mu);
    while (ld->filling)
        pthread_cond_wait(&ld->cv, &ld->mu);
    pthread_mutex_unlock(&ld->mu);
}

ddpc_status_t ddpc_loader_create(ddpc_idx_t ds, ddpc_sampler_t sampler,
                                 const ddpc_loader_config_t *cfg, ddpc_loader_t *out)
{
    static const ddpc_loader_config_t defaults = DDPC_LOADER_CONFIG_INIT;
    if (!out)
        return DDPC_ERR_INVALID;
    *out = NULL;
    ddpc_loader_t ld = calloc(1, sizeof *ld);
    if (!ld)
        return DDPC_ERR_NOMEM;
    *out = ld;
    ld->broken = 1;
    snprintf(ld->prefix, sizeof ld->prefix, "%s",
             sampler ? ddpc_sampler_prefix(sampler) : "ddpc[rank ?]");
    if (!ds || !sampler)
        return fail(ld, DDPC_ERR_INVALID, "create: dataset and sampler must not be NULL");
    if (!ddpc_idx_count(ds) || !ddpc_sampler_batch_size(sampler) ||
        ddpc_sampler_get_state(sampler, &ld->delivered) != DDPC_OK)
        return fail(ld, DDPC_ERR_INVALID, "create: the dataset or the sampler is a handle "
                    "whose creation failed");
    if (ddpc_sampler_dataset_size(sampler) != ddpc_idx_count(ds))
        return fail(ld, DDPC_ERR_MISMATCH,
                    "create: the sampler is for %zu samples, the dataset has %zu: create the "
                    "sampler with ddpc_idx_count(ds)",
                    ddpc_sampler_dataset_size(sampler), ddpc_idx_count(ds));
    ld->ds = ds;
    ld->smp = sampler;
    ld->batch = ddpc_sampler_batch_size(sampler);
    ld->dim = ddpc_idx_dim(ds);
    ld->prefetch = (cfg ? cfg : &defaults)->prefetch != 0;
    for (int i = 0; i < 2; i++) {
        struct slot *sl = &ld->slot[i];
        sl->x = malloc(ld->batch * ld->dim * sizeof *sl->x);
        sl->y = malloc(ld->batch);
        sl->idx = malloc(ld->batch * sizeof *sl->idx);
        if (!sl->x || !sl->y || !sl->idx)
            return fail(ld, DDPC_ERR_NOMEM, "create: cannot allocate 2 batches of %zu x %zu "
                        "floats", ld->batch, ld->dim);
    }
    if (ld->prefetch) {
        pthread_mutex_init(&ld->mu, NULL);
        pthread_cond_init(&ld->cv, NULL);
        if (pthread_create(&ld->thread, NULL, prefetch_main, ld) != 0) {
            pthread_cond_destroy(&ld->cv);
            pthread_mutex_destroy(&ld->mu);
            ld->prefetch = 0;
            return fail(ld, DDPC_ERR_INTERNAL, "create: cannot start the prefetch thread");
        }
        ld->have_thread = 1;
    }
    ld->broken = 0;
    kick(ld);
    return DDPC_OK;
}

void ddpc_loader_destroy(ddpc_loader_t ld)
{
    if (!ld)
        return;
    if (ld->have_thread) {
        pthread_mutex_lock(&ld->mu);
        ld->quit = 1;
        pthread_cond_broadcast(&ld->cv);
        pthread_mutex_unlock(&ld->mu);
        pthread_join(ld->thread, NULL); /* finishes a fill in progress first */
        pthread_cond_destroy(&ld->cv);
        pthread_mutex_destroy(&ld->mu);
    }
    for (int i = 0; i < 2; i++) {
        free(ld->slot[i].x);
        free(ld->slot[i].y);
        free(ld->slot[i].idx);
    }
    free(ld);
}

#define CHECK_USABLE(ld)                                                                       \
    do {                                                                                       \
        if (!(ld))                                                                             \
            return DDPC_ERR_INVALID;                                                           \
        if ((ld)->broken)                                                                      \
            return DDPC_ERR_STATE;                                                             \
    } while (0)

ddpc_status_t ddpc_loader_next(ddpc_loader_t ld, ddpc_batch_t *b)
{
    CHECK_USABLE(ld);
    if (!b)
        return fail(ld, DDPC_ERR_INVALID, "next: b must not be NULL");
    memset(b, 0, sizeof *b);
    int back = 1 - ld->front;
    double t0 = ddpc_now();
    if (ld->prefetch) {
        pthread_mutex_lock(&ld->mu);
        if (!ld->filling && !ld->ready) { /* nothing ahead (after the epoch's end) */
            ld->filling = 1;
            pthread_cond_broadcast(&ld->cv);
        }
        while (ld->filling)
            pthread_cond_wait(&ld->cv, &ld->mu);
        ld->ready = 0;
        pthread_mutex_unlock(&ld->mu);
    } else {
        fill(ld, &ld->slot[back]);
    }
    ld->wait_s += ddpc_now() - t0;
    ddpc_tl_span("loader wait", t0, -1);
    ld->front = back;
    struct slot *sl = &ld->slot[back];
    if (sl->st != DDPC_OK) {
        snprintf(ld->err, sizeof ld->err, "%s", sl->err);
        return sl->st;
    }
    ld->delivered = sl->after;
    if (sl->n > 0)
        kick(ld); /* gather the next batch while the caller works on this one */
    b->x = sl->x;
    b->y = sl->y;
    b->idx = sl->idx;
    b->n = sl->n;
    return DDPC_OK;
}

ddpc_status_t ddpc_loader_set_epoch(ddpc_loader_t ld, uint64_t epoch)
{
    CHECK_USABLE(ld);
    quiesce(ld);
    ddpc_status_t st = ddpc_sampler_set_epoch(ld->smp, epoch);
    if (st == DDPC_OK)
        st = ddpc_sampler_get_state(ld->smp, &ld->delivered);
    if (st != DDPC_OK)
        return fail(ld, st, "set_epoch: %s", ddpc_sampler_last_error(ld->smp));
    kick(ld);
    return DDPC_OK;
}

ddpc_status_t ddpc_loader_resume(ddpc_loader_t ld, const ddpc_sampler_state_t *st)
{
    CHECK_USABLE(ld);
    quiesce(ld);
    ddpc_status_t rc = ddpc_sampler_resume(ld->smp, st);
    if (rc == DDPC_OK)
        rc = ddpc_sampler_get_state(ld->smp, &ld->delivered);
    if (rc != DDPC_OK) {
        /* The sampler kept its position, and a batch gathered ahead stays ready. */
        snprintf(ld->err, sizeof ld->err, "%s", ddpc_sampler_last_error(ld->smp));
        return rc;
    }
    kick(ld);
    return DDPC_OK;
}

ddpc_status_t ddpc_loader_get_state(ddpc_loader_t ld, ddpc_sampler_state_t *st)
{
    CHECK_USABLE(ld);
    if (!st)
        return fail(ld, DDPC_ERR_INVALID, "get_state: st must not be NULL");
    *st = ld->delivered;
    return DDPC_OK;
}

double ddpc_loader_wait_seconds(ddpc_loader_t ld) { return ld ? ld->wait_s : 0.0; }

const char *ddpc_loader_last_error(ddpc_loader_t ld)
{
    return ld ? ld->err : "ddpc[rank ?] loader: no loader (out of memory or out == NULL)";
}
