/* SPDX-License-Identifier: BSD-3-Clause */
/* ddpc_comm.h: the communicator ("process group"). Collectives over host
 * memory through MPI, and over GPU memory through NCCL or through MPI with
 * pinned host staging, behind the same calls; blocking and asynchronous with
 * work handles; the GPU each rank uses.
 * Every collective must be called by every rank of the communicator, in the
 * same order, with the same count, dtype, op and root. Communicators over
 * some ranks (groups, a 2-D grid) are split from a parent; point-to-point
 * transfers go between two ranks of one communicator. */
#ifndef DDPC_COMM_H
#define DDPC_COMM_H

#include "ddpc_core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DDPC_F32 = 0,
    DDPC_F64,
    DDPC_I32,
    DDPC_I64,
    DDPC_BF16, /* bfloat16, stored as uint16_t */
    DDPC_F16,  /* IEEE half, stored as uint16_t */
    DDPC_U8,
    DDPC_DTYPE_COUNT
} ddpc_dtype_t;

DDPC_API size_t ddpc_dtype_size(ddpc_dtype_t dt);   /* bytes; 0 if invalid */
DDPC_API const char *ddpc_dtype_name(ddpc_dtype_t dt); /* "float32", ... */

typedef enum { DDPC_SUM = 0, DDPC_AVG, DDPC_MIN, DDPC_MAX, DDPC_REDOP_COUNT } ddpc_redop_t;

typedef struct ddpc_comm *ddpc_comm_t;
typedef struct ddpc_work *ddpc_work_t;

/* The communicator over all ranks that ddpc_init made (backend MPI, host
 * memory). Owned by the runtime; valid until ddpc_finalize. NULL when MPI
 * is not wired in this launch (srun --mpi=pmix with an MPI without a PMIx
 * client, allowed with the nccl backend: then make a device communicator). */
DDPC_API ddpc_comm_t ddpc_comm_world(ddpc_t rt);
DDPC_API int ddpc_comm_rank(ddpc_comm_t c);
DDPC_API int ddpc_comm_size(ddpc_comm_t c);
DDPC_API ddpc_backend_t ddpc_comm_backend(ddpc_comm_t c);
DDPC_API const char *ddpc_backend_name(ddpc_backend_t b); /* "auto", "mpi", "nccl", "mpi-staged" */
DDPC_API ddpc_t ddpc_comm_runtime(ddpc_comm_t c);
/* The CUDA device of the communicator's buffers, or DDPC_DEVICE_HOST. */
DDPC_API int ddpc_comm_device(ddpc_comm_t c);

/* ------------------------------------------------------------------ devices */
#define DDPC_DEVICE_HOST (-1) /* host memory */
#define DDPC_DEVICE_AUTO (-2) /* this rank's GPU by the local-rank rule (ddpc_device_select) */

/* The one-GPU-per-rank rule, pure (no CUDA call): ndev visible devices,
 * `visible` the value of CUDA_VISIBLE_DEVICES (NULL if unset). One visible
 * GPU: device 0 (srun --gpus-per-task=1, or ranks sharing a GPU); at least
 * local_size: device local_rank (srun --gpus-per-node); else -1 with the
 * reason in err (fewer GPUs than ranks on the node, or none). */
DDPC_API int ddpc_gpu_rule(int local_rank, int local_size, int ndev, const char *visible,
                           char *err, size_t errlen);
/* CUDA devices visible to this process; -1 in a build without CUDA or when
 * the CUDA driver is missing or fails. */
DDPC_API int ddpc_device_count(void);
/* Not collective. Picks this rank's GPU by ddpc_gpu_rule from the world's
 * local rank and local size (DDPC_DEVICE=N forces device N), makes it
 * current (cudaSetDevice) and logs it at info level with its name and PCI
 * bus id. DDPC_ERR_CUDA when no GPU is usable, DDPC_ERR_UNSUPPORTED in a
 * build without CUDA; the message says why. */
DDPC_API ddpc_status_t ddpc_device_select(ddpc_t rt, int *device);
/* "0 (NVIDIA H200, PCI 0000:19:00.0, sm_90)" into buf; "none" for the host. */
DDPC_API const char *ddpc_device_describe(int device, char *buf, size_t n);

/* ------------------------------------------------------------------ communicators */
typedef struct {
    ddpc_backend_t backend; /* auto: nccl for device memory when compiled in, else
                               mpi (mpi-staged for device memory); DDPC_BACKEND
                               (other than auto) overrides */
    int device;             /* DDPC_DEVICE_HOST, DDPC_DEVICE_AUTO, or a CUDA device */
    void *stream;           /* cudaStream_t the collectives follow (device memory;
                               NULL: the legacy default stream) */
} ddpc_comm_config_t;

#define DDPC_COMM_CONFIG_INIT {DDPC_BACKEND_AUTO, DDPC_DEVICE_HOST, NULL}

/* Collective over every rank of the job: a new communicator. For device
 * memory, every rank first checks its GPU and the ranks agree before any
 * NCCL call: if one rank has no usable GPU every rank fails with
 * DDPC_ERR_CUDA naming those ranks (no hang). The nccl backend needs no MPI:
 * its unique id travels with the GPU checks through ddpc_kvs_allgather (PMIx
 * under srun --mpi=pmix).
 * Two ranks on one GPU cannot share an NCCL communicator (NCCL refuses a
 * duplicate GPU): that is DDPC_ERR_UNSUPPORTED naming them; the mpi backend
 * stages and allows it. */
DDPC_API ddpc_status_t ddpc_comm_create(ddpc_t rt, const ddpc_comm_config_t *cfg,
                                        ddpc_comm_t *out);
/* Waits for outstanding work (up to DDPC_TIMEOUT), frees. NULL and the world
 * communicator (owned by the runtime) are no-ops. After a collective timed
 * out, end the job with ddpc_abort instead: an MPI operation that a peer
 * never joined cannot be cancelled, and destroy would wait for it. */
DDPC_API void ddpc_comm_destroy(ddpc_comm_t c);
/* ------------------------------------------------------------------ groups */
/* A communicator over some ranks of a parent (torch.distributed's new_group,
 * MPI_Comm_split, ncclCommSplit). Collective over the parent: every rank of
 * the parent calls it, in the same order as the parent's other calls. Ranks
 * with the same color form one communicator, ordered by key, then by their
 * rank in the parent; color DDPC_COLOR_NONE (MPI_UNDEFINED) joins none and
 * gets *out = NULL with DDPC_OK. Colors are >= 0 otherwise. cfg (may be
 * NULL: the parent's backend, device and stream) is this rank's; every rank
 * of one new communicator must ask for the same backend. The parent's
 * outstanding work is waited for first. Backends: mpi and mpi-staged split
 * MPI_COMM_WORLD's group (MPI_Comm_create_group, collective over the new
 * group only); nccl splits the parent's NCCL communicator with ncclCommSplit
 * where the parent is nccl and the NCCL at run time has it (>= 2.18;
 * DDPC_NCCL_SPLIT=0 turns it off), else makes a new NCCL communicator whose
 * unique id travels through the parent. Every rank gets the same status: a
 * bad color, or backends that differ within a group, is DDPC_ERR_INVALID on
 * every rank naming the ranks; a rank that never calls it is a timeout
 * naming it. */
#define DDPC_COLOR_NONE (-1)
DDPC_API ddpc_status_t ddpc_comm_split(ddpc_comm_t parent, int color, int key,
                                       const ddpc_comm_config_t *cfg, ddpc_comm_t *out);
/* torch's new_group(ranks): a communicator over ranks[0..n) of the parent,
 * in that order (rank i of the new one is parent rank ranks[i]). Collective
 * over the parent, with the same list on every rank (checked: a rank whose
 * list differs fails every rank); ranks not listed get *out = NULL and
 * DDPC_OK. The list must hold distinct ranks of the parent. */
DDPC_API ddpc_status_t ddpc_comm_group(ddpc_comm_t parent, const int *ranks, int n,
                                       const ddpc_comm_config_t *cfg, ddpc_comm_t *out);
/* A 2-D grid of the parent's ranks, nrows x ncols = the parent's size,
 * row-major: parent rank p sits in row p / ncols, column p % ncols. *row is
 * the communicator of p's row (ncols ranks, rank = column), *col that of
 * its column (nrows ranks, rank = row). For data parallel over pipelines of
 * S stages (ranks r*S .. r*S+S-1 form replica r's pipeline): nrows = the
 * replicas, ncols = S; *row is the pipeline (point-to-point between
 * stages), *col the stage's replicas (the DDP engine's all-reduces).
 * Collective over the parent; a factorization that does not give the
 * parent's size is DDPC_ERR_INVALID on every rank. Either out may be NULL
 * (that split is still made and destroyed: every rank must pass the same). */
DDPC_API ddpc_status_t ddpc_comm_grid(ddpc_comm_t parent, int nrows, int ncols,
                                      const ddpc_comm_config_t *cfg, ddpc_comm_t *row,
                                      ddpc_comm_t *col);
/* The rank in ddpc_comm_world (the job) of rank r of c; -1 when r is not a
 * rank of c. Not collective. */
DDPC_API int ddpc_comm_world_rank(ddpc_comm_t c, int r);

/* Device communicators: the stream later collectives follow (see below). */
DDPC_API ddpc_status_t ddpc_comm_set_stream(ddpc_comm_t c, void *stream);
DDPC_API void *ddpc_comm_stream(ddpc_comm_t c);
/* Host blocks until every collective issued so far on c has completed, up
 * to timeout_s (< 0: DDPC_TIMEOUT). Returns the communicator's failure if it
 * failed (a device communicator stays failed once aborted). */
DDPC_API ddpc_status_t ddpc_comm_synchronize(ddpc_comm_t c, double timeout_s);
/* DDPC_OK, or the error that aborted a device communicator (its watchdog's
 * timeout or NCCL's asynchronous error), with the message in
 * ddpc_last_error. Not collective, does not block. */
DDPC_API ddpc_status_t ddpc_comm_status(ddpc_comm_t c);

/* Collectives. Buffers are host memory for the mpi backend and memory of the
 * communicator's device for mpi-staged and nccl. send == recv is in-place
 * and allowed for allreduce and broadcast. Counts are elements.
 * AVG divides the sum by the size (integers: truncating division).
 * BF16 and F16 support SUM and AVG only (accumulated in their own type, as
 * NCCL does); U8 is not reduced (DDPC_ERR_UNSUPPORTED). The i* variants
 * return a work handle at once; the operation runs in call order (mpi: on
 * the communicator's progress thread; device backends: after the work
 * enqueued on the communicator's stream at the call); the buffers must not
 * be touched until the work completes.
 * On device communicators the blocking calls are stream-ordered, as NCCL's
 * are: on return the communicator's stream waits for the result (nccl), or
 * the result is in place (mpi-staged). */
DDPC_API ddpc_status_t ddpc_allreduce(ddpc_comm_t c, const void *send, void *recv, size_t count,
                                      ddpc_dtype_t dt, ddpc_redop_t op);
DDPC_API ddpc_status_t ddpc_iallreduce(ddpc_comm_t c, const void *send, void *recv, size_t count,
                                       ddpc_dtype_t dt, ddpc_redop_t op, ddpc_work_t *work);
DDPC_API ddpc_status_t ddpc_broadcast(ddpc_comm_t c, void *buf, size_t count, ddpc_dtype_t dt,
                                      int root);
DDPC_API ddpc_status_t ddpc_ibroadcast(ddpc_comm_t c, void *buf, size_t count, ddpc_dtype_t dt,
                                       int root, ddpc_work_t *work);
/* Collective over the whole world, for control messages (flags, counters,
 * a few sums) in host memory: in[0..count) of every rank reduced with op
 * into out on every rank, bitwise the same everywhere (rank order). Through
 * the key exchange (MPI when wired, else PMIx), so it needs no communicator
 * and works in a launch where ddpc_comm_world is NULL (srun --mpi=pmix with
 * an MPI without a PMIx client). F32, F64, I32, I64; SUM, MIN, MAX (AVG for
 * F32 and F64). Not for data: without MPI each call is one PMIx fence. */
DDPC_API ddpc_status_t ddpc_kvs_allreduce(ddpc_t rt, const void *in, void *out, size_t count,
                                          ddpc_dtype_t dt, ddpc_redop_t op);
/* Collective over c: the same for control messages in host memory whatever
 * memory c's collectives take (a device communicator stages them through its
 * GPU, or through the key exchange where MPI is wired); blocking. Types,
 * operations and bound as ddpc_kvs_allreduce; on a host communicator it is
 * ddpc_allreduce. For a program's control traffic in a launch without MPI
 * once its device communicator exists (the trainer's stop vote). */
DDPC_API ddpc_status_t ddpc_comm_host_allreduce(ddpc_comm_t c, const void *in, void *out,
                                                size_t count, ddpc_dtype_t dt, ddpc_redop_t op);
/* Host memory for buffers that c all-reduces in place (a gradient arena;
 * as ncclMemAlloc or MPI_Alloc_mem): zeroed, 64-byte aligned. Collective
 * over c: every rank, the same bytes, in the same order. On the mpi backend,
 * where every rank of c is on one node (and DDPC_SHM_ALLREDUCE is not 0), it
 * lies in an MPI-3 shared window, and an in-place float32 DDPC_SUM or
 * DDPC_AVG all-reduce of any part of it (the same part on every rank) is
 * made in shared memory by the ranks themselves, without MPI's copies, and
 * so is an in-place all-gather (send at the rank's own block) of any type;
 * elsewhere it is the process's own memory. Every rank ends with the same
 * bits; the sum is in rank order. Every rank must pass such memory to the
 * operation, or none. mem_free is not collective; c must still
 * exist (its windows are freed with it; a freed one is reused). mem_shared:
 * 1 when p is in one of c's shared windows. */
DDPC_API ddpc_status_t ddpc_comm_mem_alloc(ddpc_comm_t c, size_t bytes, void **out);
DDPC_API void ddpc_comm_mem_free(ddpc_comm_t c, void *p);
DDPC_API int ddpc_comm_mem_shared(ddpc_comm_t c, const void *p);
/* recv holds size * count elements, rank r's block at r * count; send equal
 * to rank r's block of recv is in place (host memory, mpi backend). */
DDPC_API ddpc_status_t ddpc_allgather(ddpc_comm_t c, const void *send, void *recv, size_t count,
                                      ddpc_dtype_t dt);
/* send holds size * count elements; rank r receives the reduction of block r. */
DDPC_API ddpc_status_t ddpc_reduce_scatter(ddpc_comm_t c, const void *send, void *recv,
                                           size_t count, ddpc_dtype_t dt, ddpc_redop_t op);
DDPC_API ddpc_status_t ddpc_barrier(ddpc_comm_t c);
/* Rank r's count elements of send go to block r of every rank's recv
 * (size * count elements each side; MPI_Alltoall); send != recv. */
DDPC_API ddpc_status_t ddpc_alltoall(ddpc_comm_t c, const void *send, void *recv, size_t count,
                                     ddpc_dtype_t dt);
/* Every rank's count elements to root, rank r's at r * count of root's recv
 * (size * count elements; other ranks' recv is not touched and may be NULL). */
DDPC_API ddpc_status_t ddpc_gather(ddpc_comm_t c, const void *send, void *recv, size_t count,
                                   ddpc_dtype_t dt, int root);
/* Block r of root's send (size * count elements; others' may be NULL) to
 * rank r's recv (count elements). */
DDPC_API ddpc_status_t ddpc_scatter(ddpc_comm_t c, const void *send, void *recv, size_t count,
                                    ddpc_dtype_t dt, int root);
/* The reduction of every rank's send into root's recv (others' recv is not
 * touched and may be NULL); send == recv in place on every rank. */
DDPC_API ddpc_status_t ddpc_reduce(ddpc_comm_t c, const void *send, void *recv, size_t count,
                                   ddpc_dtype_t dt, ddpc_redop_t op, int root);
/* Its non-blocking form: a work handle at once, as ddpc_iallreduce. */
DDPC_API ddpc_status_t ddpc_ireduce(ddpc_comm_t c, const void *send, void *recv, size_t count,
                                    ddpc_dtype_t dt, ddpc_redop_t op, int root, ddpc_work_t *work);

/* ------------------------------------------------------------------ point-to-point */
/* count elements to or from rank peer of c (host memory on mpi, the
 * communicator's device memory on mpi-staged and nccl). A send is matched
 * by the peer's receive of the same count and dtype, in issue order per
 * pair of ranks. Transfers run in issue order with c's collectives (as on
 * NCCL's stream): a blocking send or receive returns when the transfer
 * completed (stream-ordered on nccl, as collectives are). A send without its
 * receive times out after DDPC_TIMEOUT with a message naming both ranks.
 * Two ranks that each send to the other first deadlock as with MPI_Ssend
 * and NCCL: issue such pairs together with ddpc_p2p_batch. peer == the
 * caller's rank is refused. The work handles are those of collectives. */
DDPC_API ddpc_status_t ddpc_send(ddpc_comm_t c, const void *buf, size_t count, ddpc_dtype_t dt,
                                 int peer);
DDPC_API ddpc_status_t ddpc_recv(ddpc_comm_t c, void *buf, size_t count, ddpc_dtype_t dt,
                                 int peer);
DDPC_API ddpc_status_t ddpc_isend(ddpc_comm_t c, const void *buf, size_t count, ddpc_dtype_t dt,
                                  int peer, ddpc_work_t *work);
DDPC_API ddpc_status_t ddpc_irecv(ddpc_comm_t c, void *buf, size_t count, ddpc_dtype_t dt,
                                  int peer, ddpc_work_t *work);
/* One transfer of a batch (torch's P2POp). */
typedef struct {
    int is_send;        /* 1: send buf to peer; 0: receive into buf from peer */
    int peer;
    void *buf;
    size_t count;
    ddpc_dtype_t dt;
} ddpc_p2p_op_t;
/* Transfers issued together, in one work handle (torch's batch_isend_irecv;
 * one ncclGroupStart/End on nccl; MPI_Isend/Irecv and a wait for all on
 * mpi), so that a rank may send to and receive from its neighbours at once
 * without deadlock. At most DDPC_P2P_BATCH_MAX transfers; work may be NULL
 * (then the call blocks as ddpc_send does). */
#define DDPC_P2P_BATCH_MAX 16
DDPC_API ddpc_status_t ddpc_p2p_batch(ddpc_comm_t c, const ddpc_p2p_op_t *ops, int n,
                                      ddpc_work_t *work);

/* Work handles. test sets *done (1 when finished, successfully or not) and
 * returns the operation's status once done. wait blocks up to timeout_s
 * (< 0: the runtime's DDPC_TIMEOUT) and frees the handle unless it timed out;
 * on DDPC_ERR_TIMEOUT the message names the operation, its sequence number and
 * its size, and the job should be ended with ddpc_abort.
 * nccl: wait does not block the host: it makes the communicator's stream
 * wait for the work and frees the handle; the watchdog thread enforces the
 * timeout (from the call, or timeout_s from the wait when that is earlier)
 * and on expiry or an NCCL error aborts every NCCL communicator of the
 * process, logs the operation, and the next call returns the error. */
DDPC_API ddpc_status_t ddpc_work_test(ddpc_work_t w, int *done);
DDPC_API ddpc_status_t ddpc_work_wait(ddpc_work_t w, double timeout_s);

/* CUDA graphs. A collective issued while the communicator's stream is being
 * captured (cudaStreamBeginCapture) joins the graph (nccl; NCCL >= 2.9.6):
 * its work handle's wait makes the stream wait inside the graph, and the
 * watchdog does not track it, since nothing runs until the graph is
 * launched. After each launch of such a graph on that stream, call
 * ddpc_comm_watch: the work queued on the stream so far then has DDPC_TIMEOUT
 * to complete, or the watchdog aborts the communicators as for a stuck
 * collective, naming `what` ("a CUDA graph of one training step"). Not
 * collective; host backends need no watch (DDPC_OK, nothing done). */
DDPC_API ddpc_status_t ddpc_comm_watch(ddpc_comm_t c, const char *what);

/* Sequence number of the next collective on this communicator (all ranks agree). */
DDPC_API uint64_t ddpc_comm_seq(ddpc_comm_t c);

/* bf16/fp16 <-> float32 conversions (round to nearest even), for compression. */
DDPC_API uint16_t ddpc_f32_to_bf16(float f);
DDPC_API float ddpc_bf16_to_f32(uint16_t h);
DDPC_API uint16_t ddpc_f32_to_f16(float f);
DDPC_API float ddpc_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif

#endif /* DDPC_COMM_H */
