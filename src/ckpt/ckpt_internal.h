/* SPDX-License-Identifier: BSD-3-Clause */
/* ckpt_internal.h: what the checkpoint module's files share: the handle, the
 * list of tensors a checkpoint holds (items), the writer's job, and the HDF5
 * helpers of h5.c. Layout of the file: doc/checkpoint.md. */
#ifndef DDPC_CKPT_INTERNAL_H
#define DDPC_CKPT_INTERNAL_H

#include "ddpc_ckpt.h"
#include "internal.h"

#include <hdf5.h>
#include <pthread.h>

#define CK_FORMAT "ddpc-checkpoint"
#define CK_FORMAT_VERSION 1
#define CK_NAME_MAX 128   /* tensor names: 1..127 bytes, as the engine's */
#define CK_NAMES_MAX (1 << 22)  /* a file's /model names: at most this many, */
#define CK_NAME_BYTES_MAX 4096  /* each at most this long, 256 MiB in all */
#define CK_DSET_MAX 200   /* "/optim/<state>/<name>" */
#define CK_FILE_MAX 1024  /* file paths; the directory at most CK_DIR_MAX */
#define CK_DIR_MAX (CK_FILE_MAX - 40)
#define CK_MAX_ATTRS 64
#define CK_ATTR_NAME 64
#define CK_ATTR_STR 1024
#define CK_LOCK_FILE "ddpc.lock" /* in the directory: lock.c */
#define CK_PIECE ((size_t)8 << 20) /* bytes per HDF5 read or write: the CRC's input is still cached */

/* A user attribute: a double or a string. */
typedef struct {
    char name[CK_ATTR_NAME];
    int is_string;
    double num;
    char str[CK_ATTR_STR];
} ck_attr_t;

/* One dataset of the file: a parameter (/model/<name>), an optimizer state
 * (/optim/<state>/<name>) or a user tensor (/user/<name>); float32, stored
 * with its shape, row-major. data: where save reads and load writes; it is
 * element pos of arena number run (the same numbers on every rank), so
 * items that follow each other in a run are contiguous in memory. NULL:
 * a host engine's sharded optimizer state, read through ck_shard_read at
 * a save and kept through ck_shard_keep at a load. */
typedef struct {
    char path[CK_DSET_MAX];
    int ndim;
    int64_t shape[8];
    size_t numel;
    float *data;
    int run;
    size_t pos;
} ck_item_t;

/* Everything one save writes, owned by the writer (the background thread
 * while an async save is in flight). items[0, nparams) are the parameters. */
typedef struct {
    char prefix[112];             /* messages: "ddpc[rank 0/n host]" */
    char dir[CK_DIR_MAX], path[CK_FILE_MAX], tmp[CK_FILE_MAX + 320]; /* path.tmp.<pid>.<host> */
    ddpc_ckpt_meta_t meta;
    int world_size, keep;
    int exclusive;                /* the directory's lock is held: any .tmp is stale */
    uint64_t fingerprint;
    int has_optim;
    ddpc_optim_config_t ocfg;
    uint64_t osteps;
    double oscale;
    int32_t ogood;                /* loss scaler's good steps */
    ck_attr_t attrs[CK_MAX_ATTRS];
    int nattrs;
    ck_item_t *items;
    int nitems, nparams;
    double stall_s;               /* DDPC_CKPT_TEST_STALL: sleep halfway (tests only) */
    ddpc_t rt;                    /* for warnings only */
    ddpc_ckpt_t src;              /* a sync save: items with data NULL come from
                                     ck_shard_read (sharded optimizer state) */
    ddpc_status_t st;             /* result */
    char err[DDPC_ERRMSG_LEN];
} ck_job_t;

typedef struct {
    char name[CK_NAME_MAX];
    float *data;
    size_t numel;
} ck_user_t;

struct ddpc_ckpt {
    ddpc_ddp_t ddp;
    ddpc_optim_t opt;
    ddpc_comm_t comm;
    ddpc_t rt;
    int rank, size;
    ddpc_ckpt_config_t cfg;
    char dir[CK_DIR_MAX];
    double stall_s;
    char prefix[112];
    char err[DDPC_ERRMSG_LEN];
    int prepared;                 /* rank 0: ck_prepare_dir succeeded */
    enum { CK_LOCK_OFF, CK_LOCK_HELD, CK_LOCK_NONE } lock_state; /* NONE: no locks there */
    int lock_fd;                  /* rank 0, HELD: the open <dir>/ddpc.lock */
    double lock_wait_s;           /* DDPC_CKPT_LOCK_WAIT */

    ck_attr_t attrs[CK_MAX_ATTRS];
    int nattrs;
    ck_user_t *user;
    int nuser;

    /* rank 0's writer: at most one asynchronous save in flight */
    ck_job_t job;
    pthread_t thread;
    int inflight;
    ddpc_status_t async_st;       /* result of the last async save, not yet reported */
    float *snap;                  /* host snapshot for async saves */
    size_t snap_numel;

    /* device engines: the arenas live on the GPU. Their host copy (parameters
     * then each optimizer state, arena by arena) is what the file is written
     * from (rank 0; also the async snapshot) and loaded into; data windows of
     * a load travel through a device bounce buffer of the communicator. */
    /* a sharded optimizer (shard.c): rank 0's window of a save (win_len
     * floats, then the write piece) or every rank's two windows of a load;
     * held during the save or load only. win_t: the save's last window
     * loaded, win_st: its status (a failure ends the stream) */
    float *win;
    size_t win_cap, win_len;
    long win_t;
    ddpc_status_t win_st;
    size_t mem_peak;              /* ddpc_ckpt_host_bytes */
    int device;
    float *shadow;                /* (1 + states) x numel, pinned */
    size_t shadow_numel;
    float *bounce;                /* device, bounce_numel floats */
    size_t bounce_numel;
};

#define ck_err(ck, st, ...) DDPC_HANDLE_ERR(ck, "ckpt", st, __VA_ARGS__)

/* A CUDA call of handle ck (in a function returning ddpc_status_t, where
 * <cuda_runtime.h> is included): on failure its text, the GPU and CUDA's
 * message. */
#define CK_CU(call, what)                                                                      \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess)                                                                 \
            return ck_err(ck, DDPC_ERR_CUDA, "%s on GPU %d: %s failed: %s", what, ck->device,   \
                          #call, cudaGetErrorString(e_));                                      \
    } while (0)

/* ckpt.c: the tensors of a checkpoint, in file order (parameters, optimizer
 * states, user tensors); *items is malloc'ed. Same on every rank. */
ddpc_status_t ck_items(ddpc_ckpt_t ck, ck_item_t **items, int *nitems, int *nparams);
/* ckpt.c, sharded optimizer state: 1 if ck's optimizer holds a slice only
 * (*off, *len: its range; *pad: size * len, one state's floats in full). */
int ck_sharded(ddpc_ckpt_t ck, size_t *off, size_t *len, size_t *pad);
/* shard.c. A save, collective: begin (a device engine: the whole state
 * gathered into rank 0's shadow), rank 0's writer reads state s's floats
 * [pos, pos + n) in file order (ck_shard_read, into dst: ck_shard_piece
 * holds one write piece), end (rank 0: the windows not read; the others:
 * their slices' parts, window by window). A load, collective: begin (two
 * windows of min(chunk, a piece) on every rank, agreed), then every
 * broadcast window of a staged run (an optimizer state) goes through
 * ck_shard_stage and ck_shard_keep copies its part in this rank's slice. */
ddpc_status_t ck_shard_save_begin(ddpc_ckpt_t ck);
ddpc_status_t ck_shard_read(ddpc_ckpt_t ck, int s, size_t pos, float *dst, size_t n);
float *ck_shard_piece(ddpc_ckpt_t ck);
ddpc_status_t ck_shard_save_end(ddpc_ckpt_t ck);
ddpc_status_t ck_shard_load_begin(ddpc_ckpt_t ck, size_t chunk);
int ck_shard_staged(ddpc_ckpt_t ck, int run);
size_t ck_shard_stage_len(ddpc_ckpt_t ck);
float *ck_shard_stage(ddpc_ckpt_t ck, int which);
ddpc_status_t ck_shard_keep(ddpc_ckpt_t ck, int s, size_t start, const float *data, size_t n);
void ck_shard_release(ddpc_ckpt_t ck);
/* the host bytes the handle holds now, into its peak */
void ck_note_mem(ddpc_ckpt_t ck);
/* FNV-1a 64: h (start with CK_FNV_BASIS) extended by n bytes. */
#define CK_FNV_BASIS 0xcbf29ce484222325ull
uint64_t ck_fnv(uint64_t h, const void *p, size_t n);
/* FNV-1a 64 of the model: (name, dtype, ndim, shape) of each parameter in order. */
uint64_t ck_model_fingerprint(ddpc_ddp_t ddp);
/* A message of this handle without its "ddpc[rank ...]" prefix, for ddpc_log. */
const char *ck_body(ddpc_ckpt_t ck, const char *msg);
/* rank 0: join an async save in flight; its status stays in ck->async_st. */
void ck_join(ddpc_ckpt_t ck);

/* Control messages (host memory) go through ddpc_comm_host_bcast. */
/* Device engines: the arenas to the shadow (after the engine's stream) and
 * back; without a device, no-ops. */
ddpc_status_t ck_shadow_pull(ddpc_ckpt_t ck);
ddpc_status_t ck_shadow_push(ddpc_ckpt_t ck);
/* Device engines: broadcast n host floats from rank 0 through the bounce
 * buffer (n <= bounce_numel). */
ddpc_status_t ck_bcast_floats(ddpc_ckpt_t ck, float *host, size_t n);

/* write.c, rank 0: the checkpoint directory made (mkdir -p) and a file
 * created and removed in it; a dangling symbolic link is named as such. */
ddpc_status_t ck_prepare_dir(ddpc_ckpt_t ck);
/* lock.c, rank 0: the directory's lock taken (waiting up to lock_wait_s),
 * DDPC_ERR_BUSY naming the holder; a file system without locks is warned
 * about and gives DDPC_OK unlocked. release: at destroy. */
ddpc_status_t ck_lock_take(ddpc_ckpt_t ck);
void ck_lock_release(ddpc_ckpt_t ck);
/* Whether the directory entry name is a save's temporary file that can go:
 * any of them when exclusive (the lock is held), else only one of a dead
 * process of this host. */
int ck_tmp_is_stale(const char *name, const char *host, int exclusive);

/* write.c: write job->path crash-atomically (tmp, fsync, rename, fsync dir),
 * then keep the newest job->keep. Sets job->st and job->err. */
ddpc_status_t ck_write(ck_job_t *job);
/* The checkpoint files of dir, newest (highest step) first; *paths malloc'ed.
 * -1 with errno if dir cannot be read. */
int ck_list(const char *dir, char (**paths)[CK_FILE_MAX]);


/* h5.c: HDF5 from one thread at a time, with its error printing off. */
void ck_h5_enter(void);
void ck_h5_leave(void);
/* The innermost message of the first HDF5 call that failed since the last
 * ck_h5_msg (or ck_h5_enter), then forgotten. */
const char *ck_h5_msg(char *buf, size_t n);
hid_t ck_fapl(void);
int ck_attr_put(hid_t loc, const char *name, hid_t ftype, hid_t mtype, const void *v);
int ck_attr_u64(hid_t loc, const char *name, uint64_t v);
int ck_attr_i32(hid_t loc, const char *name, int v);
int ck_attr_f64(hid_t loc, const char *name, double v);
int ck_attr_str(hid_t loc, const char *name, const char *s);
/* Read a scalar attribute converted to mtype, or a string (truncated to n-1). */
int ck_attr_get(hid_t loc, const char *name, hid_t mtype, void *v);
int ck_attr_get_str(hid_t loc, const char *name, char *buf, size_t n);

/* The pieces in which a dataset is read or written: each a single hyperslab
 * of at most max_elems elements (but at least one innermost row), contiguous
 * in memory: elements [off, off + n) of the item. */
typedef struct {
    const ck_item_t *it;
    int d;                 /* the dimension split across pieces; -1: scalar */
    size_t rows;           /* extent of dimension d per piece */
    hsize_t start[8], count[8];
    size_t off, n;
} ck_piece_t;
int ck_piece_first(ck_piece_t *p, const ck_item_t *it, size_t max_elems);
int ck_piece_next(ck_piece_t *p);
/* Select the piece in the dataset's file space; returns the memory space. */
hid_t ck_piece_select(const ck_piece_t *p, hid_t filespace);

#endif
