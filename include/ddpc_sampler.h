/* SPDX-License-Identifier: BSD-3-Clause */
/* ddpc_sampler.h: the distributed sampler (PyTorch DistributedSampler
 * semantics) with a resumable, world-size independent state, and the portable
 * random generator behind its permutations. Pure: no communication, rank and
 * world are passed in. The algorithm is specified in doc/sampler.md. */
#ifndef DDPC_SAMPLER_H
#define DDPC_SAMPLER_H

#include "ddpc_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ generator */
/* xoshiro256** seeded through splitmix64; the same numbers on every platform
 * and compiler (doc/sampler.md gives the exact algorithm). The state is a
 * plain struct: copy it to save it. */
typedef struct {
    uint64_t s[4];
} ddpc_rng_t;

/* Seed from (seed, stream); different streams give independent sequences.
 * The sampler uses stream = epoch. */
DDPC_API void ddpc_rng_seed(ddpc_rng_t *r, uint64_t seed, uint64_t stream);
/* Next 64 random bits. */
DDPC_API uint64_t ddpc_rng_next(ddpc_rng_t *r);
/* Uniform in [0, bound) without bias (Lemire's method); bound >= 1. */
DDPC_API uint64_t ddpc_rng_below(ddpc_rng_t *r, uint64_t bound);

/* The permutation of [0, n) for (seed, epoch): Fisher-Yates with
 * ddpc_rng_seed(seed, epoch). perm holds n elements (caller's memory). */
DDPC_API void ddpc_permutation(uint64_t seed, uint64_t epoch, size_t n, size_t *perm);

/* ------------------------------------------------------------------ sampler */
typedef struct ddpc_sampler *ddpc_sampler_t;

/* Same on every rank. Append-only. */
typedef struct {
    uint64_t seed;  /* permutation of epoch e comes from (seed, e) */
    int shuffle;    /* 0: the natural order 0, 1, ..., N-1 every epoch */
    int drop_last;  /* 1: drop the tail that does not divide by the world size;
                       0: pad by repeating indices from the epoch's start */
} ddpc_sampler_config_t;

#define DDPC_SAMPLER_CONFIG_INIT {0, 1, 0}

/* Where an epoch stands, independent of the world size and batch size: what a
 * checkpoint stores (/sampler attributes). consumed is the global count of
 * positions of the epoch's permutation used so far by all ranks together;
 * consumed == dataset_size means the epoch is finished. */
typedef struct {
    uint64_t seed;
    uint64_t epoch;
    uint64_t consumed;
    uint64_t dataset_size;
    int shuffle, drop_last;
} ddpc_sampler_state_t;

/* A sampler for rank `rank` of `world` over a dataset of dataset_size
 * samples, handing out batches of batch_size indices, positioned at the start
 * of epoch 0. dataset_size, world, batch_size and cfg must be the same on
 * every rank. dataset_size >= world (every rank needs a sample). cfg may be
 * NULL (DDPC_SAMPLER_CONFIG_INIT). On failure *out is still set when a handle
 * could be made: ddpc_sampler_last_error(*out) has the message, then destroy. */
DDPC_API ddpc_status_t ddpc_sampler_create(size_t dataset_size, int rank, int world,
                                           size_t batch_size, const ddpc_sampler_config_t *cfg,
                                           ddpc_sampler_t *out);
/* NULL is a no-op. */
DDPC_API void ddpc_sampler_destroy(ddpc_sampler_t s);

/* Start epoch `epoch` from its beginning (like PyTorch's set_epoch followed by
 * a new iteration). Call it with the same epoch on every rank. */
DDPC_API ddpc_status_t ddpc_sampler_set_epoch(ddpc_sampler_t s, uint64_t epoch);
DDPC_API uint64_t ddpc_sampler_epoch(ddpc_sampler_t s);

/* This rank's share of the current pass: the whole epoch after create or
 * set_epoch, what remains of it after resume. The same on every rank.
 * num_samples: indices; num_batches: ceil(num_samples / batch_size) (the last
 * batch is short when batch_size does not divide num_samples). */
DDPC_API size_t ddpc_sampler_num_samples(ddpc_sampler_t s);
DDPC_API size_t ddpc_sampler_num_batches(ddpc_sampler_t s);
DDPC_API size_t ddpc_sampler_batch_size(ddpc_sampler_t s);
DDPC_API size_t ddpc_sampler_dataset_size(ddpc_sampler_t s);

/* This rank's next batch: idx (room for batch_size indices, caller's memory)
 * receives *n indices in [0, dataset_size); *n == 0 once the epoch is over. */
DDPC_API ddpc_status_t ddpc_sampler_next_batch(ddpc_sampler_t s, size_t *idx, size_t *n);

/* The state after the batches handed out so far (equal on every rank when all
 * ranks drew the same number of batches). */
DDPC_API ddpc_status_t ddpc_sampler_get_state(ddpc_sampler_t s, ddpc_sampler_state_t *st);

/* Continue from a saved state, with this sampler's world size and batch size,
 * which may differ from those at save: the samples of the epoch not yet
 * consumed are shared out again, each exactly once (padding aside). Returns
 * DDPC_ERR_MISMATCH when the state is of another dataset size, seed, shuffle
 * or drop_last, DDPC_ERR_INVALID when consumed > dataset_size. */
DDPC_API ddpc_status_t ddpc_sampler_resume(ddpc_sampler_t s, const ddpc_sampler_state_t *st);

/* Message of the last failure, "ddpc[rank r/n] sampler: ..."; "" when none. */
DDPC_API const char *ddpc_sampler_last_error(ddpc_sampler_t s);

#ifdef __cplusplus
}
#endif

#endif /* DDPC_SAMPLER_H */
