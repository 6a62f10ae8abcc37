/* SPDX-License-Identifier: BSD-3-Clause */
/* ddpc_core.h: the runtime core of ddpc, a C runtime for synchronous data-parallel
 * training. Init and finalize, the world facts (rank, size, local rank, node,
 * where they came from), status codes, messages and logging.
 * Programs include <ddpc.h>, which includes every module's header. */
#ifndef DDPC_CORE_H
#define DDPC_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DDPC_BUILDING) && defined(__GNUC__)
#define DDPC_API __attribute__((visibility("default")))
#else
#define DDPC_API
#endif

/* ------------------------------------------------------------------ status */
/* X-macro table: one place for the codes and their strings. */
#define DDPC_STATUS_TABLE(X)                                                   \
    X(DDPC_OK, 0, "success")                                                   \
    X(DDPC_ERR_INVALID, 1, "invalid argument or option")                       \
    X(DDPC_ERR_NOMEM, 2, "out of memory")                                      \
    X(DDPC_ERR_IO, 3, "input/output error")                                    \
    X(DDPC_ERR_FORMAT, 4, "bad file format or contents")                       \
    X(DDPC_ERR_MPI, 5, "MPI error")                                            \
    X(DDPC_ERR_PMIX, 6, "PMIx error")                                          \
    X(DDPC_ERR_NCCL, 7, "NCCL error")                                          \
    X(DDPC_ERR_CUDA, 8, "CUDA error")                                          \
    X(DDPC_ERR_HDF5, 9, "HDF5 error")                                          \
    X(DDPC_ERR_TIMEOUT, 10, "operation timed out")                             \
    X(DDPC_ERR_MISMATCH, 11, "ranks disagree")                                 \
    X(DDPC_ERR_STATE, 12, "call not valid in this state")                      \
    X(DDPC_ERR_LAUNCH, 13, "inconsistent launch environment")                  \
    X(DDPC_ERR_UNSUPPORTED, 14, "not supported by this build")                 \
    X(DDPC_ERR_NOT_FOUND, 15, "not found")                                     \
    X(DDPC_ERR_REMOTE, 16, "failed on another rank")                           \
    X(DDPC_ERR_INTERNAL, 17, "internal error")                                 \
    X(DDPC_ERR_BUSY, 18, "in use by another job")

typedef enum {
#define DDPC_X_ENUM(name, value, text) name = value,
    DDPC_STATUS_TABLE(DDPC_X_ENUM)
#undef DDPC_X_ENUM
    DDPC_STATUS_COUNT
} ddpc_status_t;

/* Static string for a status code; never NULL. */
DDPC_API const char *ddpc_strerror(ddpc_status_t st);

/* ------------------------------------------------------------------ world */
/* Where the world facts came from, in the order they are tried. */
typedef enum {
    DDPC_SOURCE_PMIX = 0,  /* a PMIx server (srun --mpi=pmix, prterun, ...) */
    DDPC_SOURCE_SLURM,     /* SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, ... */
    DDPC_SOURCE_MPI_ENV,   /* MPICH hydra PMI_* / Open MPI OMPI_COMM_WORLD_* */
    DDPC_SOURCE_TORCHRUN,  /* RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE */
    DDPC_SOURCE_SINGLE     /* nothing found: a single process */
} ddpc_source_t;

DDPC_API const char *ddpc_source_name(ddpc_source_t src);

typedef struct {
    int rank, size;             /* this process in the job */
    int local_rank, local_size; /* on this node */
    int node_id, num_nodes;     /* node index in [0, num_nodes) */
    char host[64];              /* this node's host name */
    ddpc_source_t source;       /* where rank/size came from */
    int mpi_rank, mpi_size;     /* what MPI_COMM_WORLD says (they must agree) */
} ddpc_world_t;

/* ------------------------------------------------------------------ logging */
typedef enum {
    DDPC_LOG_ERROR = 0,
    DDPC_LOG_WARN = 1,
    DDPC_LOG_INFO = 2,
    DDPC_LOG_DEBUG = 3
} ddpc_log_level_t;

/* ------------------------------------------------------------------ config */
typedef enum {
    DDPC_BACKEND_AUTO = 0,
    DDPC_BACKEND_MPI,        /* host memory; device memory is then staged (below) */
    DDPC_BACKEND_NCCL,       /* device memory */
    DDPC_BACKEND_MPI_STAGED  /* what a device communicator on backend mpi reports */
} ddpc_backend_t;

/* Options of the runtime. Initialize with DDPC_CONFIG_INIT, then set fields;
 * DDPC_* environment variables override them (doc/options.md). Append-only. */
typedef struct {
    ddpc_log_level_t log_level; /* DDPC_LOG_LEVEL=error|warn|info|debug */
    double timeout_s;           /* DDPC_TIMEOUT: a collective past this fails (s) */
    ddpc_backend_t backend;     /* DDPC_BACKEND=auto|mpi|nccl: device communicators'
                                   backend; with nccl, a launch whose MPI is not wired
                                   (PMIx without an MPI PMIx client) is allowed */
    int allow_mpi_mismatch;     /* report, not fail, when MPI and the launcher
                                   disagree on the world (ddpc-info uses this) */
} ddpc_config_t;

#define DDPC_CONFIG_INIT {DDPC_LOG_WARN, 600.0, DDPC_BACKEND_AUTO, 0}

/* ------------------------------------------------------------------ runtime */
typedef struct ddpc *ddpc_t;

/* Collective over every process of the job. Discovers the world (PMIx, Slurm,
 * MPI launcher, torchrun, single), initializes MPI (thread level
 * MPI_THREAD_MULTIPLE requested, SERIALIZED required) and checks that MPI and
 * the launcher agree. cfg may be NULL (defaults). On failure *out is still set
 * when a handle could be made, so that ddpc_last_error(*out) has the message;
 * call ddpc_finalize on it. On error without a handle, ddpc_init_error()
 * returns the message. argc/argv may be NULL. */
DDPC_API ddpc_status_t ddpc_init(const ddpc_config_t *cfg, int *argc, char ***argv, ddpc_t *out);

/* Message of the last ddpc_init that failed before it had a handle. */
DDPC_API const char *ddpc_init_error(void);

/* Collective. Waits for outstanding work, finalizes MPI and PMIx when ddpc
 * initialized them. NULL is a no-op. After a collective timed out (a rank is
 * missing) it does not wait again, nor finalize MPI (which would wait for that
 * collective forever): it logs why and returns DDPC_ERR_TIMEOUT at once; exit
 * non-zero then, or better call ddpc_abort. */
DDPC_API ddpc_status_t ddpc_finalize(ddpc_t rt);

/* Not collective: ends every rank of the job now (MPI_Abort / PMIx_Abort),
 * printing msg first and pausing 0.2 s so that the launcher forwards it
 * before the job is torn down. For programs, after a failure they cannot
 * recover from (a timed-out collective); a failure every rank saw alike is
 * better ended with ddpc_finalize and an exit status. If MPI's abort has not
 * ended the process 5 s later (a rank cut off from its launcher's daemon
 * waits in it), the process exits with code itself. Does not return. */
DDPC_API void ddpc_abort(ddpc_t rt, int code, const char *msg);

DDPC_API const ddpc_world_t *ddpc_world(ddpc_t rt);
DDPC_API const ddpc_config_t *ddpc_config(ddpc_t rt);

/* Detailed message of the last failure on this handle, prefixed with
 * "ddpc[rank r/n host] module:". Empty string when none. Valid until the next
 * call on the handle. */
DDPC_API const char *ddpc_last_error(ddpc_t rt);

/* Log a line prefixed "ddpc[rank r/n host] " when level <= the log level. */
DDPC_API void ddpc_log(ddpc_t rt, ddpc_log_level_t level, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Version string "MAJOR.MINOR.PATCH" and a one-line build summary
 * (MPI library and version, PMIx, HDF5, CUDA, NCCL, BLAS). */
DDPC_API const char *ddpc_version(void);
DDPC_API const char *ddpc_build_info(void);
/* What this process finds at run time: CUDA driver and runtime versions,
 * the NCCL library loaded (ncclGetVersion), the GPUs visible. */
DDPC_API const char *ddpc_runtime_info(void);

/* ------------------------------------------------------------------ key exchange */
/* Collective: root's len bytes at buf reach every rank's buf (same len on all).
 * Through PMIx put/commit/fence/get when the world came from PMIx, else MPI.
 * For small blobs such as an ncclUniqueId. */
DDPC_API ddpc_status_t ddpc_kvs_bcast(ddpc_t rt, void *buf, size_t len, int root);

/* Collective: every rank contributes len bytes; all[r*len ..] holds rank r's.
 * Same transport choice as ddpc_kvs_bcast. Used by ddpc-info to gather lines
 * even when MPI is broken by a wrong launch. */
DDPC_API ddpc_status_t ddpc_kvs_allgather(ddpc_t rt, const void *mine, void *all, size_t len);

/* ------------------------------------------------------------------ timeline */
/* A timeline of every rank's steps (doc/timeline.md), in Chrome Trace Event
 * Format: ddpc's own phases (the loader's wait, grad_ready, each bucket's
 * issue and all-reduce, wait, the optimizer step, checkpoints) and the
 * program's spans. DDPC_TIMELINE=DIR makes ddpc_init start it and
 * ddpc_finalize write it. start: collective over the world (the clock
 * offsets to rank 0 go through the key exchange); allocates a ring of
 * DDPC_TIMELINE_EVENTS events (default 131072; the oldest are overwritten).
 * stop: not collective; writes DIR/timeline-rank<r>.json, times in
 * microseconds of rank 0's clock, and frees the ring. Nothing is recorded
 * while stopped. */
DDPC_API ddpc_status_t ddpc_timeline_start(ddpc_t rt, const char *dir);
DDPC_API ddpc_status_t ddpc_timeline_stop(ddpc_t rt);
/* The program's own span on this thread's track (like an NVTX range):
 * begin opens it, end closes the innermost open one; they nest, up to 16
 * deep. name: at most 31 bytes are kept. No-ops while no timeline records. */
DDPC_API void ddpc_timeline_begin(const char *name);
DDPC_API void ddpc_timeline_end(void);

#ifdef __cplusplus
}
#endif

#endif /* DDPC_CORE_H */
