/* SPDX-License-Identifier: BSD-3-Clause */
/* ddp_internal.h: the engine's struct, shared by the registry and plan
 * (ddp.c), the reducer (reducer.c) and the optimizers (optim.c). */
#ifndef DDPC_DDP_INTERNAL_H
#define DDPC_DDP_INTERNAL_H

#include "ddpc_ddp.h"
#include "internal.h"

#define DDP_NAME_MAX 128
#define DDP_MAX_DIMS 8
#define DDP_SHARD_ALIGN 16 /* floats: 64 bytes, the optimizer's BLOCK */

typedef struct {
    char name[DDP_NAME_MAX];
    int ndim;
    int64_t shape[DDP_MAX_DIMS];
    size_t numel, offset; /* elements; offset into both arenas */
    int bucket;
    int ready;            /* grad_ready seen in this micro-step */
} ddp_param_t;

/* Bucket b: gradient arena slice [offset, offset + numel), holding
 * parameters [first_param, last_param] (registration order, contiguous). */
typedef struct {
    size_t offset, numel;
    int first_param, last_param;
    int pending;          /* parameters not yet ready in this step */
    int launched;
    uint64_t seq;         /* sequence number of its last all-reduce (kept across steps) */
    int launched_once;
    ddpc_work_t work;
    uint16_t *wire;       /* compression: (numel,) bf16/fp16 copy on the wire (device
                             memory for a device engine) */
    ddpc_work_t *rs_work; /* shard grads: (size,) the reduces of its pieces, one per
                             rank whose slice it meets, rs_n of them this step */
    int rs_n;
    int staged;           /* shard grads: its stage was taken (zeroed) in this micro-step */
    ddpc_work_t *ag_work; /* sharded, gather FORWARD: (size,) the broadcasts of its
                             pieces' updated parameters, ag_n of them in flight */
    int ag_n;
} ddp_bucket_t;

struct ddpc_ddp {
    ddpc_comm_t comm;
    ddpc_t rt;
    ddpc_ddp_config_t cfg;
    int rank, size;
    char prefix[112];
    char err[DDPC_ERRMSG_LEN];

    ddp_param_t *params;
    int nparams, cap;
    int built;
    size_t numel;         /* total elements of each arena */
    float *param_arena;   /* (numel,) */
    float *grad_arena;    /* (numel,); shard grads: (shard_len + (nstages + zero stage)
                             * stage_len,), the slice then the stages */
    float *grad_shard;    /* this rank's slice of the gradients: grad_arena + shard_off, or
                             with shard grads its own shard_len floats at the arena's start */
    /* shard grads (ZeRO-2): bucket b's gradients are written into stage
     * b % nstages (ddpc_ddp_grad), reduced from there into the slices'
     * owners; the slice accumulates a window's sums (acc_fresh: the next
     * reduce into it copies, not adds) and the synced wait averages it */
    float *stages;        /* (nstages, stage_len) */
    float *zero_stage;    /* find_unused: (stage_len,) zeros, for untaken buckets */
    int nstages;
    size_t stage_len;     /* floats: the largest bucket */
    int *stage_holder;    /* (nstages,) the bucket whose gradients it holds, -1: none */
    int acc_fresh;
    /* sharding (cfg.shard != NONE): rank r owns the floats [r * shard_len,
     * (r + 1) * shard_len) of the arenas; shard_len is a multiple of
     * DDP_SHARD_ALIGN and the arenas hold size * shard_len floats (>= numel,
     * the padding zero), so that an all-gather of equal counts runs in place */
    size_t shard_len;     /* floats per rank (numel when unsharded) */
    size_t shard_off;     /* this rank's first float (0 when unsharded) */
    int gather_forward;   /* shard_gather FORWARD in effect: sharded, more than one rank, a
                             device engine or a host engine that overlaps (a broadcast on
                             the host needs a core to spare, as a bucket does) */
    int model_waits;      /* the model has called ddpc_ddp_param_wait: only then does a
                             FORWARD step leave its gather running (one that never waits
                             reads its parameters, so it gets the step's-end all-gather) */

    ddp_param_t *bufs;    /* buffers: state without gradients (bucket, ready unused) */
    int nbufs, bufcap;
    size_t buf_numel;     /* elements of the buffer arena */
    float *buf_arena;     /* (buf_numel,), the device's for a device engine */

    ddp_bucket_t *buckets;
    int nbuckets;
    int next_launch;      /* buckets [0, next_launch) are launched this step */
    int sync;             /* 0: accumulation micro-step */
    int step_active;      /* some grad_ready since the last wait */
    double t_first_launch, comm_s, blocked_s;

    /* device engines (device >= 0): arenas are cudaMalloc'd on it */
    int device;
    void *stream;           /* cudaStream_t of the caller's compute */
    int32_t *d_unready;     /* (1,) device: MAX over ranks of unready parameters */
    int32_t *h_unready;     /* (2,) pinned: [0] this rank's count, [1] the MAX read back */
    void *ev_unready;       /* cudaEvent_t after the read-back */
    int unready_pending;    /* a count is in flight, to check at the next wait */
    int prev_unready;       /* this rank's count of that step */
    char prev_names[768];   /* and the parameters */

    /* folding the average (cfg.fold_average): the arena holds the sums of a
     * folded wait until zero_grad, an accessor or an optimizer pass that
     * divides in place (a norm first, AdamW) */
    int optims;             /* host optimizers attached (DDPC_FOLD_AUTO) */
    int fold_step;          /* this step's buckets are all-reduced as sums */
    int avg_pending;        /* the arena holds the sums; 1/size is owed */

    long check_every;       /* DDPC_CHECK_PARAMS: compare the replicas every K optimizer steps */
    uint64_t optim_steps;   /* ddpc_optim_step calls, for check_every */
    int check_capture_said; /* the "captured steps are not checked" note was logged */
};

/* Device memory helpers (ddp.c), DDPC_ERR_CUDA with the call on failure;
 * without CUDA they return DDPC_ERR_UNSUPPORTED. */
ddpc_status_t ddp_dev_alloc(ddpc_ddp_t d, void **p, size_t bytes, const char *what);
void ddp_dev_free(void *p);
ddpc_status_t ddp_cuda_check(ddpc_ddp_t d, int cuda_error, const char *call);

/* The engine's stream is being captured into a CUDA graph (reducer.c):
 * nothing that synchronizes the host may run (the replica check, the
 * unused-parameter check). 0 on the host. */
int ddp_capturing(ddpc_ddp_t d);

/* Folding the average (reducer.c): whether a step launched now folds, and
 * the owed division made in a pass of its own (the accessors, the optimizer's
 * passes that cannot fold it). */
int ddp_folds(ddpc_ddp_t d);
void ddp_settle_average(ddpc_ddp_t d);

/* Sharding (reducer.c): the end of the arena piece that starts at lo in
 * rank *owner's slice, short of end; the updated slices' broadcasts of a
 * FORWARD gather issued by bucket (ddpc_optim_step), and their waits. */
size_t ddp_piece_end(const ddpc_ddp_t d, size_t lo, size_t end, int *owner);
ddpc_status_t ddp_gather_issue(ddpc_ddp_t d);
ddpc_status_t ddp_gather_wait(ddpc_ddp_t d, int bucket); /* -1: all */
/* Shard grads (reducer.c): bucket b's stage for this micro-step (taken and
 * zeroed on the first call), NULL on failure (d->err says why). */
float *ddp_stage_take(ddpc_ddp_t d, int b);

#define ddp_err(d, st, ...) DDPC_HANDLE_ERR(d, "ddp", st, __VA_ARGS__)

/* The bucket plan: a pure function of the parameters (numel, order) and the
 * two size limits. Fills d->buckets, d->nbuckets and params[].bucket. */
ddpc_status_t ddp_plan_buckets(ddpc_ddp_t d);

#endif
