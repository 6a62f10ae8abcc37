/* SPDX-License-Identifier: BSD-3-Clause */
/* ddpc_ckpt.h: HDF5 checkpoints of a DDP engine. Rank 0 writes one file per
 * checkpoint (parameters, optimizer state, data position, RNG, counters, the
 * application's attributes and tensors), crash-atomically, optionally from a
 * background thread; a restart reads the newest valid one on rank 0 and
 * broadcasts it, so every rank resumes with identical state. The file layout
 * is documented in doc/checkpoint.md and readable without ddpc (h5py, h5dump).
 *
 * Who calls what, on every rank, in the same order:
 *   ddpc_ddp_build -> [ddpc_optim_create] -> ddpc_ckpt_create ->
 *   [add_user_tensor ...] -> ddpc_ckpt_load (collective; DDPC_ERR_NOT_FOUND:
 *   start from scratch) -> per K steps, between optimizer steps:
 *   ddpc_ckpt_save (collective) -> ... -> ddpc_ckpt_wait (collective) ->
 *   ddpc_ckpt_destroy.
 * Saves and loads use the engine's communicator; call them when no gradient
 * reduction is in flight (after ddpc_ddp_wait and the optimizer step). */
#ifndef DDPC_CKPT_H
#define DDPC_CKPT_H

#include "ddpc_ddp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddpc_ckpt *ddpc_ckpt_t;

/* Options; DDPC_CKPT_* environment variables override them (doc/options.md).
 * Initialize with DDPC_CKPT_CONFIG_INIT. Append-only. */
typedef struct {
    const char *dir;    /* DDPC_CKPT_DIR: the checkpoint directory (copied);
                           rank 0 creates it and its parents on the first save */
    int keep;           /* DDPC_CKPT_KEEP: newest checkpoints kept, 0 = all */
    int async;          /* DDPC_CKPT_ASYNC=0|1: save snapshots to host memory and
                           writes in a background thread */
    size_t chunk_bytes; /* DDPC_CKPT_CHUNK_MB: load broadcasts in windows of at
                           most this many bytes */
} ddpc_ckpt_config_t;

#define DDPC_CKPT_CONFIG_INIT {NULL, 3, 0, (size_t)64 << 20}

/* What a checkpoint holds besides tensors. Same layout as the sampler's
 * resumable state (the sampler_* fields), kept as plain fields so that this
 * module does not depend on the sampler. Append-only. */
typedef struct {
    uint64_t step, epoch;     /* the trainer's counters */
    int has_sampler;          /* 0: the sampler_* fields are not saved */
    uint64_t sampler_seed, sampler_epoch, sampler_consumed, sampler_dataset_size;
    int sampler_shuffle, sampler_drop_last;
    uint8_t rng[256];         /* the trainer's RNG state, rng_bytes of it */
    size_t rng_bytes;
    int world_size;           /* load: the world size at save (ignored by save) */
} ddpc_ckpt_meta_t;

/* Not collective. ddp must be built; opt may be NULL (parameters only; a
 * load then ignores any optimizer state in the file). cfg may be NULL
 * (defaults, with the directory from DDPC_CKPT_DIR). On failure *out is set
 * when a handle exists, for ddpc_ckpt_last_error; destroy it. */
DDPC_API ddpc_status_t ddpc_ckpt_create(ddpc_ddp_t ddp, ddpc_optim_t opt,
                                        const ddpc_ckpt_config_t *cfg, ddpc_ckpt_t *out);

/* Waits for an asynchronous save in flight (rank 0; its error, if never
 * reported, is logged), then frees. Not collective. NULL is a no-op. */
DDPC_API void ddpc_ckpt_destroy(ddpc_ckpt_t ck);

/* Application attributes saved with every later save, under /user. Not
 * collective; rank 0's are the ones written. name: 1..63 bytes, at most 64
 * attributes; strings at most 1023 bytes. Setting a name again replaces it. */
DDPC_API ddpc_status_t ddpc_ckpt_set_user_attr_double(ddpc_ckpt_t ck, const char *name, double v);
DDPC_API ddpc_status_t ddpc_ckpt_set_user_attr_string(ddpc_ckpt_t ck, const char *name,
                                                      const char *v);
/* After a load: the checkpoint's attributes (before: the ones set). Not
 * collective. DDPC_ERR_NOT_FOUND if absent or of the other kind. */
DDPC_API ddpc_status_t ddpc_ckpt_get_user_attr_double(ddpc_ckpt_t ck, const char *name, double *v);
DDPC_API ddpc_status_t ddpc_ckpt_get_user_attr_string(ddpc_ckpt_t ck, const char *name, char *buf,
                                                      size_t n);

/* A float32 tensor of the application saved as /user/<name> (1-D, numel) and
 * restored in place by load. Same names and sizes on every rank, in the same
 * order. The memory stays the caller's and must outlive the handle. */
DDPC_API ddpc_status_t ddpc_ckpt_add_user_tensor(ddpc_ckpt_t ck, const char *name, float *data,
                                                 size_t numel);

/* Collective, optional, before training: rank 0 makes the directory
 * (mkdir -p) and checks that it can create a file there, so that a
 * directory that cannot be written (read-only, a file in its path, a
 * dangling symbolic link, named as such) is found before any work rather
 * than at the first save. Then it takes the directory's lock
 * (<dir>/ddpc.lock, an fcntl lock held until ddpc_ckpt_destroy or the
 * process's end): while another process holds it, DDPC_ERR_BUSY with a
 * message naming its host, pid and Slurm job (after waiting up to
 * DDPC_CKPT_LOCK_WAIT seconds, default 0). A file system without locks is
 * warned about and not locked. Rank 0's status on every rank. The first
 * save does the same when this was not called; loads take no lock. */
DDPC_API ddpc_status_t ddpc_ckpt_prepare(ddpc_ckpt_t ck);

/* Collective. Writes <dir>/ckpt-<step, 8 digits>.h5 from rank 0: to a .tmp
 * file, closed, fsynced, renamed, directory fsynced; then only the newest
 * `keep` are kept. meta: rank 0's is written; may be NULL (zeros). Waits
 * first for the previous asynchronous save: if that one failed, this call
 * returns its error on every rank and starts nothing. Sync: returns when the file is durable, with rank
 * 0's status on every rank. Async: returns once rank 0 has copied the state
 * to host memory; the write goes on in a background thread and its result is
 * returned by the next save or ddpc_ckpt_wait. A failed save removes its
 * .tmp and never touches older checkpoints or the training state. */
DDPC_API ddpc_status_t ddpc_ckpt_save(ddpc_ckpt_t ck, const ddpc_ckpt_meta_t *meta);

/* Collective. Waits for an asynchronous save in flight; rank 0's result on
 * every rank. DDPC_OK when none. */
DDPC_API ddpc_status_t ddpc_ckpt_wait(ddpc_ckpt_t ck);

/* Collective. path NULL: the newest checkpoint of the directory that
 * validates (newest = highest step; a corrupt or truncated one is reported
 * with a warning and the previous one is tried). Rank 0 checks the file
 * against the registered model (names, shapes, dtypes in order; the first
 * difference is named), the optimizer's type and the user tensors, then reads
 * it and broadcasts it in windows of chunk_bytes: parameters, optimizer state,
 * step count, lr and loss scale, user tensors and attributes. *meta (may be
 * NULL) gets the counters, sampler state and RNG; loaded_path (may be NULL)
 * the file's path. All ranks return the same status: DDPC_ERR_NOT_FOUND when
 * there is no checkpoint (nothing changed), DDPC_ERR_MISMATCH for another
 * model, DDPC_ERR_FORMAT when none validates. After an error other than
 * NOT_FOUND and MISMATCH the parameters and optimizer state may be partly
 * overwritten. A broadcast that times out (rank 0 died in the load) gives
 * DDPC_ERR_TIMEOUT on the ranks that saw it, not a shared verdict: end the
 * job with ddpc_abort. The world size may differ from the one at save. */
DDPC_API ddpc_status_t ddpc_ckpt_load(ddpc_ckpt_t ck, const char *path, ddpc_ckpt_meta_t *meta,
                                      char *loaded_path, size_t n);

/* The directory this handle saves to and loads from: the config's dir, or
 * DDPC_CKPT_DIR's where that is set ("" after a failed create). Not
 * collective; the memory is the handle's. */
DDPC_API const char *ddpc_ckpt_dir(ddpc_ckpt_t ck);

/* Host memory this handle holds for copies of the training state, in bytes:
 * an asynchronous save's snapshot, a device engine's pinned shadow, and the
 * windows of a sharded optimizer's save or load (held during that call
 * only); *peak (may be NULL) gets the most it held at once since create.
 * A sharded optimizer's state never passes through a whole copy: a save
 * streams the slices to rank 0 in windows of at most min(chunk_bytes,
 * 8 MiB), two windows in all, and a load keeps each rank's part of every
 * broadcast window of as much (an asynchronous save's snapshot holds it
 * whole, as it holds everything). Not collective. */
DDPC_API size_t ddpc_ckpt_host_bytes(ddpc_ckpt_t ck, size_t *peak);

/* Message of the last failure on this handle (prefixed with rank); "" if none. */
DDPC_API const char *ddpc_ckpt_last_error(ddpc_ckpt_t ck);

#ifdef __cplusplus
}
#endif

#endif /* DDPC_CKPT_H */
