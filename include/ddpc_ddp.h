/* SPDX-License-Identifier: BSD-3-Clause */
/* ddpc_ddp.h: the DDP engine. Named parameters live in one contiguous
 * parameter arena and one gradient arena; gradients are averaged over the
 * ranks by bucketed all-reduces that start while the backward pass is still
 * producing gradients (grad_ready), as PyTorch's DistributedDataParallel does.
 *
 * Who calls what, on every rank, in the same order:
 *   ddpc_ddp_create -> ddpc_ddp_add_param (each parameter, same order) ->
 *   ddpc_ddp_build (collective: checks all ranks registered the same model,
 *   allocates the arenas) -> fill parameters -> ddpc_ddp_broadcast_params
 *   (collective: rank 0's values everywhere) -> per step:
 *   [ddpc_ddp_set_sync(0) for accumulation micro-steps] ->
 *   ddpc_ddp_zero_grad (first micro-step) -> backward, calling
 *   ddpc_ddp_grad_ready(p) as each gradient is complete -> ddpc_ddp_wait
 *   (gradients averaged, identical on every rank) -> optimizer step.
 * A backward that may run under DDPC_SHARD=grads takes each gradient's
 * pointer with ddpc_ddp_grad(p) just before it writes it (below). */
#ifndef DDPC_DDP_H
#define DDPC_DDP_H

#include "ddpc_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ddpc_ddp *ddpc_ddp_t;

typedef struct {
    size_t first_bucket_bytes; /* DDPC_FIRST_BUCKET_MB; PyTorch: 1 MiB */
    size_t bucket_bytes;       /* DDPC_BUCKET_MB; PyTorch: 25 MiB */
    int find_unused;           /* DDPC_FIND_UNUSED=0|1: reduce never-ready grads as zeros */
    ddpc_dtype_t compress;     /* DDPC_COMPRESS=none|bf16|fp16: wire dtype (F32 = none) */
    int overlap;               /* DDPC_OVERLAP=auto|0|1: launch buckets during backward
                                  (1) or all at wait (0); DDPC_OVERLAP_AUTO: 1, except
                                  for a host engine whose ranks are all on one node
                                  with at most one CPU each (no core to spare for the
                                  all-reduce, which is CPU work there) */
    void *stream;              /* device engines: the caller's compute stream
                                  (cudaStream_t; NULL: the stream the communicator
                                  already follows) */
    int broadcast_buffers;     /* DDPC_BROADCAST_BUFFERS=0|1: rank 0's buffers overwrite
                                  everyone's at the end of each synced wait, i.e. before
                                  the next step's forward (PyTorch's broadcast_buffers;
                                  default 1) */
    int shard;                 /* DDPC_SHARD=none|optim|grads: ddpc_shard_t (ZeRO-1/2) */
    int fold_average;          /* DDPC_FOLD_AVERAGE=auto|0|1: the all-reduce sums and the
                                  1/N is applied in ddpc_optim_step's pass (below);
                                  DDPC_FOLD_AUTO: 1 while a ddpc optimizer is attached */
    int shard_gather;          /* DDPC_SHARD_GATHER=step|forward: ddpc_shard_gather_t,
                                  when a sharded step's updated parameters are gathered */
    int grad_stages;           /* DDPC_GRAD_STAGES (>= 1, default 2): shard grads' bucket
                                  stages, the gradient memory besides the slice */
} ddpc_ddp_config_t;

/* Folding the average (host engines with compress none and shard none; a
 * device engine averages inside NCCL, a compressed one in its conversion
 * copy): the buckets are all-reduced as sums and the division by the world
 * size, a pass of its own over the gradient arena otherwise, is made inside
 * the optimizer's pass, with the same bits (x / N, or x * (1/N) when N is a
 * power of two, as the communicator's average). Between ddpc_ddp_wait and
 * ddpc_ddp_zero_grad the arena then holds the sums (the optimizer divides
 * them in registers and leaves them): ddpc_ddp_grad and ddpc_ddp_grads
 * called in that window divide it first, so a program that reads the
 * averaged gradients there must take its pointer from them then, not keep
 * one from before the wait (or set DDPC_FOLD_AVERAGE=0). A backward that
 * adds onto a folded sum (no zero_grad or accessor call since the wait) is
 * refused at its next wait with DDPC_ERR_STATE. */
#define DDPC_FOLD_AUTO (-1)

/* Sharding (doc/ddp.md): optim keeps on each rank only the optimizer state of
 * its contiguous, aligned range of the parameter arena (ZeRO-1,
 * ddpc_optim_state_range); grads (ZeRO-2) also keeps only that range's
 * gradients (ddpc_ddp_grad_slice) and no whole gradient arena: a backward
 * writes each bucket's gradients into one of grad_stages stages (bucket b
 * into stage b % grad_stages, each the size of the largest bucket), and a
 * complete bucket is reduced piece by piece into the slices' owners, which
 * frees its stage. Hence, with grads:
 *  - ddpc_ddp_grad(p) must be called in each micro-step before p's gradient
 *    is written, and only once the buckets before p's that share its stage
 *    are complete (grad_ready for all their parameters): the backward's
 *    order. It zeroes the stage for the micro-step (the first call for the
 *    bucket), waiting, where needed, for the reduce of the bucket that used
 *    it before (a device engine: its stream waits). The pointer is the same
 *    in every step (CUDA graphs may capture it); it is good until the
 *    bucket is reduced. Out of order it fails (NULL, ddpc_ddp_last_error
 *    says which bucket holds the stage); grad_ready of a parameter whose
 *    bucket was not taken this micro-step is DDPC_ERR_STATE.
 *  - ddpc_ddp_grads returns NULL; ddpc_ddp_grad_slice gives the averaged
 *    slice after the wait.
 *  - every micro-step reduces (set_sync(0) too: the wait is then collective
 *    as well, DeepSpeed's ZeRO-2 does the same) and the slice accumulates
 *    the sums; the synced wait averages it. The next backward after a
 *    synced wait starts a new window, zero_grad or not.
 *  - with find_unused, a bucket none of whose gradients was taken in a
 *    micro-step is reduced from a zero stage (one more stage of memory).
 * Host and device engines; grads not with compress (DDPC_ERR_UNSUPPORTED at
 * create). */
typedef enum { DDPC_SHARD_NONE = 0, DDPC_SHARD_OPTIM = 1, DDPC_SHARD_GRADS = 2 } ddpc_shard_t;

/* When a sharded step's updated slices reach every rank: STEP, one
 * all-gather at the end of ddpc_optim_step; FORWARD (more than one rank;
 * device engines, and host engines that overlap), one broadcast per piece
 * of each bucket (root: the slice's owner), issued at the step's end in
 * registration order and left running (host: on the progress thread;
 * device: on the communicator's stream), so that they overlap the next
 * forward: the program calls ddpc_ddp_param_wait(p) before its first use of
 * parameter p (device: the engine's stream then waits for p's bucket; the
 * host does not block). Where a host engine does not overlap (overlap 0, or
 * AUTO with no core to spare) FORWARD gathers as STEP and param_wait
 * returns at once. A device step captured into a CUDA graph gathers as
 * STEP (a capture cannot wait for work outside it): before capturing or
 * launching a graph of a step, call ddpc_ddp_param_wait(ddp, -1), since a
 * launch runs none of the forward's waits. */
typedef enum { DDPC_GATHER_STEP = 0, DDPC_GATHER_FORWARD = 1 } ddpc_shard_gather_t;

#define DDPC_OVERLAP_AUTO (-1)
#define DDPC_DDP_CONFIG_INIT                                                                   \
    {(size_t)1 << 20, (size_t)25 << 20, 0, DDPC_F32, DDPC_OVERLAP_AUTO, NULL, 1, DDPC_SHARD_NONE,   \
     DDPC_FOLD_AUTO, DDPC_GATHER_STEP, 2}

/* Not collective. cfg may be NULL. The engine uses comm for all its traffic.
 * On a device communicator (nccl, mpi-staged) the arenas (parameters,
 * gradients, optimizer state) are cudaMalloc'd on the communicator's GPU at
 * build, and the engine sets the communicator's stream to cfg->stream (or,
 * when that is NULL, takes the communicator's stream as its compute stream):
 * grad_ready(p) is called once the kernel writing p's gradient is enqueued
 * on that stream; a complete bucket's all-reduce waits for the stream (an
 * event), runs on the communication stream, and wait() makes the compute
 * stream wait for it: no host synchronization in a step (nccl). */
DDPC_API ddpc_status_t ddpc_ddp_create(ddpc_comm_t comm, const ddpc_ddp_config_t *cfg,
                                       ddpc_ddp_t *out);
/* NULL is a no-op. Waits for outstanding reductions. */
DDPC_API void ddpc_ddp_destroy(ddpc_ddp_t ddp);

/* Register a float32 parameter before build. name is copied (unique, at most
 * 127 bytes); shape has ndim (0..8) extents, numel may be 0. *index (may be
 * NULL) is its index: parameters are indexed in registration order. */
DDPC_API ddpc_status_t ddpc_ddp_add_param(ddpc_ddp_t ddp, const char *name, int ndim,
                                          const int64_t *shape, int *index);

/* Collective. Verifies that every rank registered the same names, shapes and
 * dtypes (on mismatch every rank fails with DDPC_ERR_MISMATCH naming the first
 * differing parameter and the rank that differs), plans the buckets and
 * allocates the arenas (zeroed). */
DDPC_API ddpc_status_t ddpc_ddp_build(ddpc_ddp_t ddp);

/* Register a float32 buffer before build: module state that is not a
 * parameter and gets no gradient (BatchNorm's running_mean, running_var,
 * num_batches_tracked). Names are unique among parameters and buffers (they
 * are state_dict keys); shape as for add_param. Buffers live in their own
 * arena (the device's for a device engine), zeroed at build, indexed in
 * registration order. The ranks' lists are compared at build like the
 * parameters'. Checkpoints save them beside the parameters under /model/<name>
 * and restore them on load. */
DDPC_API ddpc_status_t ddpc_ddp_add_buffer(ddpc_ddp_t ddp, const char *name, int ndim,
                                           const int64_t *shape, int *index);

/* Collective: rank 0's parameters (and buffers) overwrite everyone's. */
DDPC_API ddpc_status_t ddpc_ddp_broadcast_params(ddpc_ddp_t ddp);
/* Collective: rank 0's buffers overwrite everyone's (ddpc_ddp_wait does it
 * after each synced step when broadcast_buffers is on). */
DDPC_API ddpc_status_t ddpc_ddp_broadcast_buffers(ddpc_ddp_t ddp);

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[8];
    size_t numel;
    size_t offset; /* elements from the start of the arenas */
    ddpc_dtype_t dtype;
    int bucket;    /* bucket holding its gradient */
} ddpc_param_info_t;

DDPC_API int ddpc_ddp_num_params(ddpc_ddp_t ddp);
DDPC_API ddpc_status_t ddpc_ddp_param_info(ddpc_ddp_t ddp, int index, ddpc_param_info_t *info);
/* Index of a parameter by name, or -1. */
DDPC_API int ddpc_ddp_find_param(ddpc_ddp_t ddp, const char *name);
/* The CUDA device of the arenas, or DDPC_DEVICE_HOST; the compute stream. */
DDPC_API int ddpc_ddp_device(ddpc_ddp_t ddp);
DDPC_API void *ddpc_ddp_stream(ddpc_ddp_t ddp);
/* Views into the arenas (after build); owned by the engine. Device memory
 * for a device engine. */
DDPC_API float *ddpc_ddp_param(ddpc_ddp_t ddp, int index);
DDPC_API float *ddpc_ddp_grad(ddpc_ddp_t ddp, int index);
/* Buffers (after build): count, description (bucket -1; offset into the
 * buffer arena), index by name (-1 if none), view, and the whole arena. */
DDPC_API int ddpc_ddp_num_buffers(ddpc_ddp_t ddp);
DDPC_API ddpc_status_t ddpc_ddp_buffer_info(ddpc_ddp_t ddp, int index, ddpc_param_info_t *info);
DDPC_API int ddpc_ddp_find_buffer(ddpc_ddp_t ddp, const char *name);
DDPC_API float *ddpc_ddp_buffer(ddpc_ddp_t ddp, int index);
DDPC_API float *ddpc_ddp_buffers(ddpc_ddp_t ddp, size_t *numel);
/* The whole arenas: (numel,) float32 each, parameters in registration order. */
DDPC_API float *ddpc_ddp_params(ddpc_ddp_t ddp, size_t *numel);
DDPC_API float *ddpc_ddp_grads(ddpc_ddp_t ddp, size_t *numel);
/* The gradients this rank holds averaged after a synced wait: with shard
 * grads its slice, floats [*offset, *offset + *numel) of the model (numel
 * short of the slice where it reaches the padding, 0 past the model's end);
 * otherwise the whole arena (offset 0), as ddpc_ddp_grads. Device memory
 * for a device engine. */
DDPC_API float *ddpc_ddp_grad_slice(ddpc_ddp_t ddp, size_t *offset, size_t *numel);
/* Bytes of gradient memory the engine holds on this rank (after build): the
 * arena (padded to whole slices when sharded); with shard grads the slice,
 * the stages and, with find_unused, the zero stage. */
DDPC_API size_t ddpc_ddp_grad_bytes(ddpc_ddp_t ddp);

/* Bucket plan (after build): count, and bucket b's slice [offset, offset+numel)
 * of the gradient arena. */
DDPC_API int ddpc_ddp_num_buckets(ddpc_ddp_t ddp);
DDPC_API ddpc_status_t ddpc_ddp_bucket(ddpc_ddp_t ddp, int b, size_t *offset, size_t *numel);

/* Accumulation: with sync off, grad_ready and wait only account, gradients
 * add up locally; the next micro-step with sync on reduces the sum. Not
 * collective, but all ranks must use the same sequence. */
DDPC_API ddpc_status_t ddpc_ddp_set_sync(ddpc_ddp_t ddp, int sync);
/* Zero the gradient arena (start of an accumulation window). */
DDPC_API ddpc_status_t ddpc_ddp_zero_grad(ddpc_ddp_t ddp);

/* p's gradient is complete for this micro-step. May launch bucket all-reduces
 * (in bucket order on every rank). Marking a parameter twice in one step is
 * DDPC_ERR_STATE naming it. */
DDPC_API ddpc_status_t ddpc_ddp_grad_ready(ddpc_ddp_t ddp, int index);

/* Collective (when sync is on): launches what is left, waits for every
 * bucket; gradients are then averaged over ranks and bitwise identical on
 * every rank. Parameters that never became ready: with find_unused their
 * gradient is reduced as it stands (zero if untouched since zero_grad); without it the call
 * fails with DDPC_ERR_STATE naming them (all ranks fail together). A device
 * engine learns of them one step late (the count travels with the step's
 * collectives and is read at the next wait, so that no step synchronizes
 * the host), as PyTorch's DDP does. */
DDPC_API ddpc_status_t ddpc_ddp_wait(ddpc_ddp_t ddp);
/* Sharded with shard_gather FORWARD: wait until parameter index (its
 * bucket) holds every rank's update of the last step; index -1: every
 * parameter. Returns at once where nothing is in flight (unsharded, STEP,
 * or already waited for); on a device engine it returns without blocking
 * the host once the engine's stream waits for the bucket. Not collective. Every ddpc call
 * that reads or overwrites the whole parameter arena waits first
 * (ddpc_ddp_wait, ddpc_optim_step, checkpoint save and load,
 * broadcast_params, check_params, destroy); a program that reads a
 * parameter outside its rank's slice before waiting for it reads the
 * previous step's values. */
DDPC_API ddpc_status_t ddpc_ddp_param_wait(ddpc_ddp_t ddp, int index);
/* The buckets whose gather (FORWARD) was issued and not yet waited for by
 * param_wait or the engine: 0 where nothing is in flight. */
DDPC_API int ddpc_ddp_param_pending(ddpc_ddp_t ddp);

/* CUDA graphs: on the nccl backend a whole step (zero_grad, the model's
 * kernels with their grad_ready calls, wait, ddpc_optim_step) issues only
 * work on the compute and NCCL streams, so it can be captured with
 * cudaStreamBeginCapture on the engine's stream and replayed; after each
 * launch call ddpc_comm_watch on the engine's communicator. Inside a
 * capture wait skips the missing-gradient check (the eager steps before the
 * capture made it) and DDPC_CHECK_PARAMS skips the replica check (it reads
 * the parameters on the host; ddpc_ddp_check_params refuses a capturing
 * engine); the optimizer's values (lr, and the rest of its config) are read
 * from device memory when a replay runs, so ddpc_optim_set_lr between
 * replays applies to the next one; its structure (type, Nesterov, loss
 * scaling) is the capture's. Capture in any mode: ddpc's own threads (the
 * NCCL watchdog, the staged progress thread) interact only thread-locally.
 * mpi-staged runs host code on its progress thread and cannot be captured. */

/* Message of the last failure on this engine (prefixed with rank). */
/* Collective: compare the replicas. Every rank hashes its parameter arena
 * (CRC-32; a device arena is read back first) and the hashes are gathered
 * through the key exchange, not the engine's communicator. When they differ,
 * DDPC_ERR_MISMATCH on every rank, with a message naming the ranks whose
 * parameters differ from rank 0's; nothing is changed. DDPC_CHECK_PARAMS=K
 * makes ddpc_optim_step run it after every K-th step (0: never, the default). */
DDPC_API ddpc_status_t ddpc_ddp_check_params(ddpc_ddp_t ddp);
/* 1 when buckets are launched during backward, 0 when all at the wait: the
 * configured overlap, with auto resolved at create. */
DDPC_API int ddpc_ddp_overlap(ddpc_ddp_t ddp);
DDPC_API const char *ddpc_ddp_last_error(ddpc_ddp_t ddp);
DDPC_API ddpc_comm_t ddpc_ddp_comm(ddpc_ddp_t ddp);

/* Timing of the last synced step, for benchmarks: seconds from the first
 * launch to the end of wait, and seconds wait() blocked. */
DDPC_API void ddpc_ddp_last_timing(ddpc_ddp_t ddp, double *comm_s, double *blocked_s);

/* ------------------------------------------- synchronized batch normalization */
/* Per-channel batch statistics over all ranks of comm (SyncBatchNorm's
 * forward; doc/ddp.md). Each rank passes its own sample count and, per
 * channel, the mean and the biased variance (M2 / count) of its samples; on
 * return mean and var hold the mean and biased variance over the union of
 * every rank's samples, and *total (may be NULL) their count. One all-gather
 * of (count, mean, var) per rank, then Chan's parallel formula in double,
 * ranks combined in rank order: deterministic, bitwise the same on every
 * rank, and without the cancellation of sum / sum-of-squares formulas
 * (means of 1e4 keep their small variances). A rank with count 0 adds
 * nothing; a total of 0 gives mean 0 and var 0.
 * Collective: every rank passes the same channels. Memory: on a host
 * communicator mean, var, total and work are host memory and the call
 * returns with the result. On a device communicator (nccl, mpi-staged) they
 * are the communicator's device memory (total: one double), count is a host
 * value, and the work is enqueued on the communicator's stream (the DDP
 * engine's compute stream): kernels pack and combine, and nothing is copied
 * to the host (nccl: stream-ordered, as ddpc_allreduce). work holds
 * ddpc_batchnorm_workspace(comm, channels) floats, owned by the caller,
 * not touched by anything else until the call's work is done. mean and var
 * are updated in place. count < 0, channels <= 0 or NULL pointers:
 * DDPC_ERR_INVALID, the message in ddpc_last_error(ddpc_comm_runtime(comm)). */
DDPC_API ddpc_status_t ddpc_batchnorm_stats(ddpc_comm_t comm, int channels, int64_t count,
                                            float *mean, float *var, double *total,
                                            float *work);
/* Floats of work ddpc_batchnorm_stats needs: (size + 1) * (2 * channels + 2);
 * 0 for a NULL comm or channels <= 0. */
DDPC_API size_t ddpc_batchnorm_workspace(ddpc_comm_t comm, int channels);

/* ------------------------------------------------------------------ optimizers */
typedef struct ddpc_optim *ddpc_optim_t;

typedef enum { DDPC_OPTIM_SGD = 0, DDPC_OPTIM_ADAMW = 1 } ddpc_optim_type_t;

typedef struct {
    ddpc_optim_type_t type;
    double lr;
    double momentum;     /* SGD */
    double dampening;    /* SGD */
    int nesterov;        /* SGD */
    double weight_decay; /* SGD: L2 added to the gradient; AdamW: decoupled */
    double beta1, beta2, eps; /* AdamW */
    double clip_norm;    /* > 0: clip the global gradient norm to this */
    int dynamic_loss_scale; /* fp16 training: gradients arrive multiplied by the scale */
    double loss_scale;      /* initial scale (dynamic) */
    int scale_growth_interval; /* steps without overflow before the scale doubles */
} ddpc_optim_config_t;

#define DDPC_OPTIM_CONFIG_INIT                                                                 \
    {DDPC_OPTIM_SGD, 0.01, 0.0, 0.0, 0, 0.0, 0.9, 0.999, 1e-8, 0.0, 0, 65536.0, 2000}

/* State tensors per type, each (numel,) float32 in the parameter arena's
 * layout: SGD with momentum: "momentum_buffer"; AdamW: "exp_avg", "exp_avg_sq". */
DDPC_API ddpc_status_t ddpc_optim_create(ddpc_ddp_t ddp, const ddpc_optim_config_t *cfg,
                                         ddpc_optim_t *out);
DDPC_API void ddpc_optim_destroy(ddpc_optim_t opt);

/* One update from the averaged gradients (call after ddpc_ddp_wait). Not
 * collective: every rank computes the same update from identical inputs.
 * *stepped (may be NULL) is 0 when dynamic loss scaling skipped the step
 * because a gradient was inf or NaN (same decision on every rank). A device
 * engine runs the step as CUDA kernels on its stream and keeps the skip
 * decision on the device: *stepped is then -1 with dynamic loss scaling
 * (ddpc_optim_last_stepped reads it, synchronizing), else 1. */
DDPC_API ddpc_status_t ddpc_optim_step(ddpc_optim_t opt, int *stepped);

DDPC_API const ddpc_optim_config_t *ddpc_optim_config(ddpc_optim_t opt);
/* Model parallelism (pipeline stages): this engine's parameters are the
 * floats [offset, offset + numel) of a model whose other pieces the other
 * ranks of group hold, consecutive in group rank order. The global gradient
 * norm (clip_norm, the loss scaler's skip decision, ddpc_optim_last_grad_norm)
 * is then the whole model's: the partial sums of squares pass along the group
 * in rank order, so the norm is bitwise the one an engine holding the whole
 * arena computes, and every rank of the group makes the same decision. Each
 * step is then collective over group. Collective here too (a gap or overlap
 * between the ranks' pieces fails on every rank); NULL group: the engine's
 * own norm again. Host engines only (DDPC_ERR_UNSUPPORTED on a device). */
DDPC_API ddpc_status_t ddpc_optim_set_norm_group(ddpc_optim_t opt, ddpc_comm_t group,
                                                 size_t offset);
/* The learning rate of the steps issued after this call (on a device engine a
 * copy ordered on the engine's stream, which captured steps read when
 * replayed; not during a capture: the next step then fails saying so). */
DDPC_API void ddpc_optim_set_lr(ddpc_optim_t opt, double lr);
DDPC_API int ddpc_optim_num_states(ddpc_optim_t opt);
/* State tensor k: its name and float32 storage: unsharded (numel,) in the
 * parameter arena's layout; sharded (DDPC_SHARD=optim) the (numel,) of
 * ddpc_optim_state_range only, element i being the state of parameter-arena
 * float offset + i (floats past the model's numel are padding, zero). */
DDPC_API float *ddpc_optim_state(ddpc_optim_t opt, int k, const char **name);
/* The parameter-arena floats [*offset, *offset + *numel) whose state this
 * rank holds: 0 and the arena's numel unsharded; sharded, rank r's slice
 * r * L .. (r + 1) * L with L = ceil(numel / size) rounded up to 16 floats
 * (64 bytes), the same L on every rank, so the last slices may reach past
 * numel (padding). Either pointer may be NULL. */
DDPC_API ddpc_status_t ddpc_optim_state_range(ddpc_optim_t opt, size_t *offset, size_t *numel);
/* Steps taken (AdamW's bias correction uses it), current loss scale, and the
 * global gradient norm seen by the last step (before clipping). */
DDPC_API uint64_t ddpc_optim_steps(ddpc_optim_t opt);
DDPC_API void ddpc_optim_set_steps(ddpc_optim_t opt, uint64_t steps);
DDPC_API double ddpc_optim_loss_scale(ddpc_optim_t opt);
DDPC_API void ddpc_optim_set_loss_scale(ddpc_optim_t opt, double scale);
DDPC_API double ddpc_optim_last_grad_norm(ddpc_optim_t opt);
/* Good steps since the loss scale last changed (checkpoints keep it, so a
 * restart grows the scale on the same step as an uninterrupted run). */
DDPC_API int ddpc_optim_scale_good_steps(ddpc_optim_t opt);
DDPC_API void ddpc_optim_set_scale_good_steps(ddpc_optim_t opt, int n);
DDPC_API const char *ddpc_optim_name(ddpc_optim_type_t type); /* "sgd", "adamw" */
/* 1 if the last step was applied, 0 if loss scaling skipped it. On a device
 * engine this and the getters above wait for the engine's stream. */
DDPC_API int ddpc_optim_last_stepped(ddpc_optim_t opt);
/* Device engines: the current loss scale (one double in device memory, on
 * the engine's device), for a model that multiplies its loss gradient by it
 * on the device (fp16) without reading it back; NULL on the host. */
DDPC_API const double *ddpc_optim_loss_scale_device(ddpc_optim_t opt);

#ifdef __cplusplus
}
#endif

#endif /* DDPC_DDP_H */
