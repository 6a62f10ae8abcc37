/* SPDX-License-Identifier: BSD-3-Clause */
/* ddpc_data.h: datasets in the idx format of MNIST and Fashion-MNIST (raw or
 * gzip), validated at open, and a loader that gathers the next batch of a
 * sampler on a background thread while the training loop works on the current
 * one. No communication: each rank reads the files itself. */
#ifndef DDPC_DATA_H
#define DDPC_DATA_H

#include "ddpc_sampler.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ idx dataset */
typedef struct ddpc_idx *ddpc_idx_t;

/* Append-only. */
typedef struct {
    int num_classes; /* labels must lie in [0, num_classes); 1..256, default 10 */
    float mean, std; /* features are (pixel / 255 - mean) / std; default 0 and 1 */
    int rank, world; /* for the "ddpc[rank r/n]" prefix of messages; rank -1: unknown */
} ddpc_idx_config_t;

#define DDPC_IDX_CONFIG_INIT {10, 0.0f, 1.0f, -1, 0}

/* Read an images file (idx3-ubyte, magic 0x00000803: count x rows x cols
 * bytes) and its labels file (idx1-ubyte, magic 0x00000801: count bytes),
 * each gzip-compressed or not. Checks the magic numbers, the dimensions,
 * that each file is exactly as long as its header says, that both hold the
 * same count, and that every label is below num_classes. Pixels stay bytes
 * in memory (count x rows x cols); ddpc_idx_gather normalizes to float.
 * Errors: DDPC_ERR_IO (cannot open or read), DDPC_ERR_FORMAT (contents),
 * DDPC_ERR_INVALID (arguments); the message names the file and what was
 * expected. cfg may be NULL. On failure *out is still set when a handle could
 * be made: ddpc_idx_last_error(*out) has the message, then close it. */
DDPC_API ddpc_status_t ddpc_idx_open(const char *images_path, const char *labels_path,
                                     const ddpc_idx_config_t *cfg, ddpc_idx_t *out);
/* NULL is a no-op. */
DDPC_API void ddpc_idx_close(ddpc_idx_t ds);

/* The paths of the files of one split ("train" or "t10k") in dir, as their
 * distributions name them: <dir>/<split>-images-idx3-ubyte and
 * <dir>/<split>-labels-idx1-ubyte, each with ".gz" unless the uncompressed
 * file exists (readable or not: opening an unreadable one says why). images and labels have room for len bytes. DDPC_ERR_INVALID
 * when a path does not fit. */
DDPC_API ddpc_status_t ddpc_idx_default_paths(const char *dir, const char *split, char *images,
                                              char *labels, size_t len);

DDPC_API size_t ddpc_idx_count(ddpc_idx_t ds);  /* samples */
DDPC_API size_t ddpc_idx_rows(ddpc_idx_t ds);   /* image height */
DDPC_API size_t ddpc_idx_cols(ddpc_idx_t ds);   /* image width */
DDPC_API size_t ddpc_idx_dim(ddpc_idx_t ds);    /* rows * cols: floats per sample */
DDPC_API const uint8_t *ddpc_idx_pixels(ddpc_idx_t ds); /* (count, rows*cols) raw bytes */
DDPC_API const uint8_t *ddpc_idx_labels(ddpc_idx_t ds); /* (count,) */

/* Gather samples idx[0..n) into x (n, dim) float32, normalized, row i from
 * sample idx[i], and y (n,) labels; x or y may be NULL. Read-only on ds: any
 * number of threads may gather at once. DDPC_ERR_INVALID when an index is
 * not below the count (the message, on ds, names it; concurrent failing
 * gathers may overwrite each other's message). */
DDPC_API ddpc_status_t ddpc_idx_gather(ddpc_idx_t ds, const size_t *idx, size_t n, float *x,
                                       uint8_t *y);

/* Message of the last failure, "ddpc[rank r/n] data: ..."; "" when none. */
DDPC_API const char *ddpc_idx_last_error(ddpc_idx_t ds);

/* ------------------------------------------------------------------ loader */
typedef struct ddpc_loader *ddpc_loader_t;

/* Append-only. */
typedef struct {
    int prefetch; /* 1: a thread gathers batch k+1 while the loop uses batch k;
                     0: ddpc_loader_next gathers on the caller's thread */
} ddpc_loader_config_t;

#define DDPC_LOADER_CONFIG_INIT {1}

/* One batch, owned by the loader: valid until the next call on the loader. */
typedef struct {
    const float *x;     /* (n, dim) float32, normalized */
    const uint8_t *y;   /* (n,) labels */
    const size_t *idx;  /* (n,) the sample indices the sampler chose */
    size_t n;           /* 0: the epoch is over */
} ddpc_batch_t;

/* A loader of the batches `sampler` chooses from `ds`. Both must outlive the
 * loader, and the sampler is the loader's until destroy: position it (resume,
 * set_epoch) through the loader. The sampler's dataset size must be ds's
 * count (DDPC_ERR_MISMATCH). cfg may be NULL. Starts gathering the first
 * batch at once. On failure *out is set when a handle could be made. */
DDPC_API ddpc_status_t ddpc_loader_create(ddpc_idx_t ds, ddpc_sampler_t sampler,
                                          const ddpc_loader_config_t *cfg, ddpc_loader_t *out);
/* Stops the thread. NULL is a no-op. */
DDPC_API void ddpc_loader_destroy(ddpc_loader_t ld);

/* The next batch of the sampler's epoch (b->n == 0 at its end), and starts
 * gathering the one after. */
DDPC_API ddpc_status_t ddpc_loader_next(ddpc_loader_t ld, ddpc_batch_t *b);

/* ddpc_sampler_set_epoch / ddpc_sampler_resume through the loader: a batch
 * gathered ahead is dropped. */
DDPC_API ddpc_status_t ddpc_loader_set_epoch(ddpc_loader_t ld, uint64_t epoch);
DDPC_API ddpc_status_t ddpc_loader_resume(ddpc_loader_t ld, const ddpc_sampler_state_t *st);

/* The sampler state after the batches ddpc_loader_next has returned (not
 * counting the one gathered ahead): what a checkpoint saves. */
DDPC_API ddpc_status_t ddpc_loader_get_state(ddpc_loader_t ld, ddpc_sampler_state_t *st);

/* Seconds ddpc_loader_next spent waiting for data since create: waiting for
 * the thread with prefetch, gathering without. */
DDPC_API double ddpc_loader_wait_seconds(ddpc_loader_t ld);

/* Message of the last failure, "ddpc[rank r/n] loader: ..."; "" when none. */
DDPC_API const char *ddpc_loader_last_error(ddpc_loader_t ld);

#ifdef __cplusplus
}
#endif

#endif /* DDPC_DATA_H */
