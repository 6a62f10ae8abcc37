/* SPDX-License-Identifier: BSD-3-Clause */
/* sampler.c: the distributed sampler. The epoch's permutation P of [0, N),
 * its tail from the resume point, padded or truncated to a multiple of the
 * world size W, dealt round-robin: rank r takes positions r, r+W, ...
 * No communication and no I/O: a pure function of its arguments. */
#include "config.h"
#include "ddpc_sampler.h"
#include "internal.h"
#include "local.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ddpc_sampler {
    size_t n;                  /* N: dataset size */
    int rank, world;           /* r in [0, W) */
    size_t batch;              /* B: indices per batch */
    ddpc_sampler_config_t cfg;
    uint64_t epoch;
    size_t *perm;              /* (N,) P of this epoch (identity without shuffle) */
    size_t start;              /* c0: positions of P consumed before this pass */
    size_t per_rank;           /* M: indices this rank draws in this pass */
    size_t nbatches;           /* ceil(M / B) */
    size_t done;               /* batches handed out in this pass */
    int broken;                /* create failed: only last_error and destroy */
    char prefix[48];           /* "ddpc[rank r/n]" */
    char err[DDPC_ERRMSG_LEN];
};

#define fail(h, st, ...) DDPC_HANDLE_ERR(h, "sampler", st, __VA_ARGS__)

const char *ddpc_sampler_prefix(ddpc_sampler_t s) { return s->prefix; }

/* Begin a pass over positions [c0, N) of epoch's permutation: the first pass
 * of an epoch has c0 = 0 and is exactly PyTorch's DistributedSampler. */
static void begin_pass(ddpc_sampler_t s, uint64_t epoch, size_t c0)
{
    if (s->cfg.shuffle) {
        ddpc_permutation(s->cfg.seed, epoch, s->n, s->perm);
    } else {
        for (size_t i = 0; i < s->n; i++)
            s->perm[i] = i;
    }
    s->epoch = epoch;
    s->start = c0;
    size_t tail = s->n - c0, w = (size_t)s->world; /* L = N - c0 */
    s->per_rank = s->cfg.drop_last ? tail / w : (tail + w - 1) / w;
    s->nbatches = (s->per_rank + s->batch - 1) / s->batch;
    s->done = 0;
}

ddpc_status_t ddpc_sampler_create(size_t dataset_size, int rank, int world, size_t batch_size,
                                  const ddpc_sampler_config_t *cfg, ddpc_sampler_t *out)
{
    static const ddpc_sampler_config_t defaults = DDPC_SAMPLER_CONFIG_INIT;
    if (!out)
        return DDPC_ERR_INVALID;
    *out = NULL;
    ddpc_sampler_t s = calloc(1, sizeof *s);
    if (!s)
        return DDPC_ERR_NOMEM;
    *out = s;
    s->broken = 1;
    s->n = dataset_size;
    s->rank = rank;
    s->world = world;
    s->batch = batch_size;
    s->cfg = cfg ? *cfg : defaults;
    snprintf(s->prefix, sizeof s->prefix, "ddpc[rank %d/%d]", rank, world);
    if (world < 1 || rank < 0 || rank >= world)
        return fail(s, DDPC_ERR_INVALID, "rank %d of world size %d: expected 0 <= rank < world",
                    rank, world);
    if (batch_size < 1)
        return fail(s, DDPC_ERR_INVALID, "batch size 0: expected at least 1");
    if (dataset_size < (size_t)world)
        return fail(s, DDPC_ERR_INVALID,
                    "dataset of %zu samples is smaller than the world size %d: every rank needs "
                    "at least one sample (use fewer ranks or a larger dataset)",
                    dataset_size, world);
    s->perm = dataset_size <= SIZE_MAX / sizeof *s->perm
                  ? malloc(dataset_size * sizeof *s->perm) /* (N,) indices */
                  : NULL;
    if (!s->perm)
        return fail(s, DDPC_ERR_NOMEM, "cannot allocate the permutation of %zu samples",
                    dataset_size);
    begin_pass(s, 0, 0);
    s->broken = 0;
    return DDPC_OK;
}

void ddpc_sampler_destroy(ddpc_sampler_t s)
{
    if (!s)
        return;
    free(s->perm);
    free(s);
}

#define CHECK_USABLE(s)                                                                        \
    do {                                                                                       \
        if (!(s))                                                                              \
            return DDPC_ERR_INVALID;                                                           \
        if ((s)->broken)                                                                       \
            return DDPC_ERR_STATE;                                                             \
    } while (0)

ddpc_status_t ddpc_sampler_set_epoch(ddpc_sampler_t s, uint64_t epoch)
{
    CHECK_USABLE(s);
    begin_pass(s, epoch, 0);
    return DDPC_OK;
}

uint64_t ddpc_sampler_epoch(ddpc_sampler_t s) { return s && !s->broken ? s->epoch : 0; }
size_t ddpc_sampler_num_samples(ddpc_sampler_t s) { return s && !s->broken ? s->per_rank : 0; }
size_t ddpc_sampler_num_batches(ddpc_sampler_t s) { return s && !s->broken ? s->nbatches : 0; }
size_t ddpc_sampler_batch_size(ddpc_sampler_t s) { return s ? s->batch : 0; }
size_t ddpc_sampler_dataset_size(ddpc_sampler_t s) { return s ? s->n : 0; }

ddpc_status_t ddpc_sampler_next_batch(ddpc_sampler_t s, size_t *idx, size_t *n)
{
    CHECK_USABLE(s);
    if (!idx || !n)
        return fail(s, DDPC_ERR_INVALID, "next_batch: idx and n must not be NULL");
    *n = 0;
    if (s->done == s->nbatches)
        return DDPC_OK;
    /* This rank's j-th index of the pass is tail position q = j*W + r of
     * G = P[c0..N) followed by the padding P[0], P[1], ... (shorter than W). */
    size_t w = (size_t)s->world, tail = s->n - s->start;
    size_t j0 = s->done * s->batch, j1 = j0 + s->batch;
    if (j1 > s->per_rank)
        j1 = s->per_rank;
    for (size_t j = j0; j < j1; j++) {
        size_t q = j * w + (size_t)s->rank;
        idx[j - j0] = q < tail ? s->perm[s->start + q] : s->perm[(q - tail) % s->n];
    }
    *n = j1 - j0;
    s->done++;
    return DDPC_OK;
}

ddpc_status_t ddpc_sampler_get_state(ddpc_sampler_t s, ddpc_sampler_state_t *st)
{
    CHECK_USABLE(s);
    if (!st)
        return fail(s, DDPC_ERR_INVALID, "get_state: st must not be NULL");
    /* Batch k of the pass (all ranks together) covers tail positions
     * [k*B*W, (k+1)*B*W): after k batches, c0 + k*B*W positions are used.
     * After the last batch the epoch is over, padding and dropped tail alike. */
    size_t used = s->done == s->nbatches ? s->n - s->start : s->done * s->batch * (size_t)s->world;
    st->seed = s->cfg.seed;
    st->epoch = s->epoch;
    st->consumed = (uint64_t)(s->start + used);
    st->dataset_size = (uint64_t)s->n;
    st->shuffle = s->cfg.shuffle != 0;
    st->drop_last = s->cfg.drop_last != 0;
    return DDPC_OK;
}

ddpc_status_t ddpc_sampler_resume(ddpc_sampler_t s, const ddpc_sampler_state_t *st)
{
    CHECK_USABLE(s);
    if (!st)
        return fail(s, DDPC_ERR_INVALID, "resume: st must not be NULL");
    if (st->dataset_size != (uint64_t)s->n)
        return fail(s, DDPC_ERR_MISMATCH,
                    "saved state is of a dataset of %llu samples, this sampler has %zu: "
                    "resume with the dataset the state was saved with",
                    (unsigned long long)st->dataset_size, s->n);
    if ((st->shuffle != 0) != (s->cfg.shuffle != 0) ||
        (st->drop_last != 0) != (s->cfg.drop_last != 0) ||
        (s->cfg.shuffle && st->seed != s->cfg.seed))
        return fail(s, DDPC_ERR_MISMATCH,
                    "saved state has seed %llu, shuffle %d, drop_last %d; this sampler has seed "
                    "%llu, shuffle %d, drop_last %d: create the sampler with the saved settings",
                    (unsigned long long)st->seed, st->shuffle != 0, st->drop_last != 0,
                    (unsigned long long)s->cfg.seed, s->cfg.shuffle != 0, s->cfg.drop_last != 0);
    if (st->consumed > st->dataset_size)
        return fail(s, DDPC_ERR_INVALID,
                    "saved state has consumed %llu samples of a dataset of %llu: corrupt state",
                    (unsigned long long)st->consumed, (unsigned long long)st->dataset_size);
    begin_pass(s, st->epoch, (size_t)st->consumed);
    return DDPC_OK;
}

const char *ddpc_sampler_last_error(ddpc_sampler_t s)
{
    return s ? s->err : "ddpc[rank ?] sampler: no sampler (out of memory or out == NULL)";
}
