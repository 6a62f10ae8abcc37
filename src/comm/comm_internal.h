/* SPDX-License-Identifier: BSD-3-Clause */
/* comm_internal.h: what the communicator's front end (comm.c) and its
 * backends share: the work handle, the backend table, the communicator.
 * Backends: mpi.c (host memory; device memory staged through pinned host
 * buffers) and nccl.c (device memory, --with-nccl). */
#ifndef DDPC_COMM_INTERNAL_H
#define DDPC_COMM_INTERNAL_H

#include "comm.h"

#include <pthread.h>
#include <time.h>

/* OP_WATCH is no collective: ddpc_comm_watch's deadline on the work queued on
 * the caller's stream (a CUDA graph replay), for the nccl watchdog. */
/* OP_P2P is a batch of point-to-point transfers (w->p2p[0..np)): no
 * collective sequence number (w->seq is the communicator's transfer count). */
typedef enum {
    OP_ALLREDUCE, OP_BCAST, OP_ALLGATHER, OP_REDUCE_SCATTER, OP_BARRIER, OP_WATCH,
    OP_ALLTOALL, OP_GATHER, OP_SCATTER, OP_REDUCE, OP_P2P
} op_kind_t;

/* Communicators the side channel reports on (ddpc_t.comms) */
#define MON_MAX_COMMS 8
extern const char *const comm_op_names[];

struct ddpc_work {
    struct ddpc_work *next;
    struct ddpc_comm *comm;
    op_kind_t kind;
    const void *send;
    void *recv;
    size_t count;
    ddpc_dtype_t dt;
    ddpc_redop_t op;
    int root;
    uint64_t seq;
    int done;
    int waited;      /* mpi: a thread sleeps in ddpc_work_wait on it */
    int blocking;    /* mpi: issue as MPI's blocking call (ddpc_comm_blocking_next) */
    int refs;        /* nccl: the caller's handle and the watchdog's list */
    ddpc_status_t status;
    double t_enqueue, deadline; /* ddpc_now() seconds */
    void *ev_ready;  /* device backends: cudaEvent_t recorded on the caller's stream */
    void *ev_done;   /* nccl: cudaEvent_t recorded on the communication stream */
    void *shm;       /* mpi: the shared window an in-place all-reduce is made in */
    char err[DDPC_ERRMSG_LEN];
    char label[96];  /* OP_WATCH: what the caller said it is */
    int np;          /* OP_P2P: transfers in p2p */
    ddpc_p2p_op_t p2p[DDPC_P2P_BATCH_MAX];
};

struct ddpc_comm;

/* A backend. submit is called with c->mu held and w->seq assigned, so that
 * the order of sequence numbers is the order of issue. wait frees w unless
 * it returns DDPC_ERR_TIMEOUT. */
typedef struct comm_ops {
    ddpc_status_t (*submit)(struct ddpc_comm *c, struct ddpc_work *w);
    ddpc_status_t (*test)(struct ddpc_work *w, int *done);
    ddpc_status_t (*wait)(struct ddpc_work *w, double timeout_s);
    ddpc_status_t (*synchronize)(struct ddpc_comm *c, double timeout_s);
    void (*abort)(struct ddpc_comm *c);
    void (*destroy)(struct ddpc_comm *c);
    /* OP_WATCH (c->mu held; NULL: the backend's own waits enforce the timeout) */
    ddpc_status_t (*watch)(struct ddpc_comm *c, struct ddpc_work *w);
} comm_ops_t;

struct ddpc_comm {
    ddpc_t rt;
    const comm_ops_t *ops;
    ddpc_backend_t backend;  /* mpi, mpi-staged or nccl: never auto */
    int rank, size;
    int device;              /* DDPC_DEVICE_HOST or the CUDA device of the buffers */
    void *stream;            /* cudaStream_t the collectives follow (NULL: legacy default) */
    pthread_mutex_t mu;
    uint64_t seq;            /* next sequence number to hand out */
    uint64_t completed;      /* collectives completed, in order (atomic: the monitor reads) */
    int id;                  /* index in rt->comms, the same on every rank; -1: untracked */
    int *members;            /* (size,) the world rank of each rank; NULL: rank r is world
                                rank r (the world, and communicators made over all of it) */
    uint64_t p2p_seq;        /* point-to-point batches issued (this rank's own count) */
    void *ctrl;              /* device communicators: CTRL_BYTES of device memory for
                                control messages (ddpc_comm_host_*), made with them */
    struct comm_flight *fr;  /* (fr_cap,) the last collectives, slot seq % fr_cap; NULL: off */
    size_t fr_cap;
    char fr_tag[32];         /* what the next collective is for (ddpc_comm_tag_next) */
    int blocking_next;       /* the next collective: MPI's blocking call (mpi backend) */
    ddpc_status_t failed;    /* device backends: sticky, once aborted */
    char fail_msg[DDPC_ERRMSG_LEN]; /* its message, without the rank prefix */
    uint64_t fail_seq;       /* the collective that failed (UINT64_MAX: none known),
                                so that the DDP engine can name its bucket */
    void *impl;              /* the backend's state */
    int timed_out;           /* a wait on it timed out: destroy does not wait again */
    int abandoned;           /* destroy left a thread that holds it: not freed */
};

/* Errors of a call go to the runtime's message (ddpc_last_error), as
 * ddpc_err(c->rt, st, "comm", ...). */

/* comm.c, for group.c: a communicator's allocation (rank and size of the
 * world until set), its id for the side channel, its release; the backend a
 * config asks for (mpi, mpi-staged or nccl: DDPC_BACKEND applied); the
 * device buffer of control messages (device communicators, made before
 * their first collective); the log line of a new communicator. */
struct ddpc_comm *comm_alloc(ddpc_t rt, int device, void *stream);
void comm_register(struct ddpc_comm *c);
void comm_free(struct ddpc_comm *c);
ddpc_status_t comm_resolve(ddpc_t rt, const ddpc_comm_config_t *k, ddpc_backend_t *backend);
ddpc_status_t comm_ctrl_alloc(struct ddpc_comm *c);
void comm_announce(struct ddpc_comm *c);

/* "allreduce #17 (1048576 x float32, root 0)" */
void comm_describe(const struct ddpc_work *w, char *s, size_t n);

/* Backends' constructors: fill c->ops and c->impl (c->rt, rank, size,
 * device, stream, mu set by the caller). Collective. comm_mpi_create: over
 * the world, or (c->members set) over those world ranks only. */
ddpc_status_t comm_mpi_create(struct ddpc_comm *c, int staged);
/* The mpi backend's shared windows (ddpc_comm_mem_alloc): alloc is
 * collective and leaves *out NULL where the ranks do not share a node (or
 * DDPC_SHM_ALLREDUCE=0); release (or, release 0, only look) returns 0 when p
 * is not the start of a window in use. */
ddpc_status_t comm_mpi_mem_alloc(struct ddpc_comm *c, size_t bytes, void **out);
int comm_mpi_mem_release(struct ddpc_comm *c, void *p, int release);
#ifdef DDPC_HAVE_NCCL
ddpc_status_t comm_nccl_create(struct ddpc_comm *c);

/* A split's NCCL side (nccl.c). What each rank of the parent says in the
 * split's second exchange: its GPU check and, from the leader of each new
 * communicator, a unique id. */
typedef struct {
    int32_t ok;           /* this rank has its GPU */
    int32_t device;
    char why[288];        /* if not */
    char bus[32];         /* PCI bus id of its GPU */
    char host[64];
    unsigned char id[128]; /* ncclUniqueId, from the leader */
} comm_nccl_boot_t;
/* This rank's entry (device chosen, id made when leader). */
void comm_nccl_boot_local(struct ddpc_comm *c, int leader, comm_nccl_boot_t *me);
/* The verdict on the new communicator's entries (all[c->rank] is this
 * rank's, in its ranks' order), then ncclCommInitRankConfig with the
 * leader's id; or, with parent set, ncclCommSplit of the parent (every rank
 * of the parent calls it, those without a group with c == NULL). */
ddpc_status_t comm_nccl_create_from(struct ddpc_comm *c, const comm_nccl_boot_t *all);
ddpc_status_t comm_nccl_split(struct ddpc_comm *parent, struct ddpc_comm *c, int color, int key);
int comm_nccl_can_split(void);
#endif
#define CTRL_BYTES ((size_t)64 << 10)

/* monitor.c. explain: after collective #seq of c timed out, what rank 0's
 * table says about the ranks that never entered it (into buf; -1 without a
 * side channel). check: DDPC_DEBUG=detail, before collective #seq: DDPC_OK
 * when every rank calls the same, else DDPC_ERR_MISMATCH naming both sides
 * (or DDPC_ERR_TIMEOUT naming who never came), the same on every rank.
 * forget: c is being destroyed. */
int ddpc_monitor_explain(struct ddpc_comm *c, uint64_t seq, char *buf, size_t n);
/* After the transfers of w (OP_P2P) timed out: what the table says about each
 * peer, by world rank (into buf; -1 without a side channel). */
int ddpc_monitor_explain_peers(struct ddpc_comm *c, const struct ddpc_work *w, char *buf,
                               size_t n);
ddpc_status_t ddpc_monitor_check(struct ddpc_comm *c, uint64_t seq, int op, size_t count,
                                 ddpc_dtype_t dt, int root);
void ddpc_monitor_forget(struct ddpc_comm *c);

/* The flight recorder (comm.c), with c->mu held: w was issued; the
 * collective #seq ended (state FR_DONE, FR_FAILED). */
enum { FR_ISSUED = 1, FR_DONE, FR_FAILED };
void comm_flight_issue(struct ddpc_comm *c, const struct ddpc_work *w);
void comm_flight_end(struct ddpc_comm *c, uint64_t seq, int state);

/* f32/f64/int AVG after a SUM on the host: buf[0..count) /= size. */
void comm_divide(void *buf, size_t count, ddpc_dtype_t dt, int size);
/* acc[i] += x[i] (float32, not overlapping): vectorized as comm_divide is,
 * each element's one addition, so the same bits at any vector width. */
void comm_add_f32(float *restrict acc, const float *restrict x, size_t n);

/* *ts = CLOCK_REALTIME now + s seconds, for pthread_cond_timedwait. */
void comm_deadline(struct timespec *ts, double s);

/* A timeout that counts only the time this process runs: Slurm's `scontrol
 * suspend` stops every task of a job (SIGSTOP) and `resume` continues them,
 * and a job stopped as a whole must not find its collectives timed out when
 * it resumes. The waiter sleeps in slices of at most COMM_SLICE_S; a slice
 * that took more than COMM_STOP_GAP_S longer than asked was a stop, and
 * only the slice is counted. Usage, with mu held:
 *   comm_clock_t k; comm_clock_start(&k);
 *   while (!cond && !comm_clock_wait(&cv, &mu, &k, timeout_s)) {}
 * comm_clock_wait returns 1 once the counted time reached timeout_s. */
#define COMM_SLICE_S 0.5
#define COMM_STOP_GAP_S 2.0
typedef struct {
    double last, counted;
} comm_clock_t;
void comm_clock_start(comm_clock_t *k);
int comm_clock_wait(pthread_cond_t *cv, pthread_mutex_t *mu, comm_clock_t *k, double timeout_s);

/* A pool of CUDA events (cudaEvent_t as void *, timing disabled), so that a
 * collective takes one made with its communicator instead of creating one
 * inside a step. Not locked: the backends hold their communicator's mutex.
 * comm_events_fill makes n; get returns NULL only when the pool is empty
 * and cudaEventCreate fails; put keeps an event (or destroys it when the
 * pool cannot grow). Only --with-cuda. */
typedef struct {
    void **ev;
    int n, cap;
    int timing; /* set before the first fill: events that time (the timeline's) */
} comm_events_t;
#ifdef DDPC_HAVE_CUDA
int comm_events_fill(comm_events_t *p, int n); /* cudaError_t */
void *comm_events_get(comm_events_t *p);
void comm_events_put(comm_events_t *p, void *ev);
void comm_events_free(comm_events_t *p);
#endif

#endif
