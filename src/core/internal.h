/* internal.h: what the modules of libddpc share and users never see: the
 * runtime struct, error recording with the rank prefix, option parsing,
 * the discovery and key-exchange entry points. */
#ifndef DDPC_INTERNAL_H
#define DDPC_INTERNAL_H

#include "ddpc.h"

#include <mpi.h>
#include <stdarg.h>

#define DDPC_ERRMSG_LEN 1024

struct ddpc {
    ddpc_config_t cfg;
    ddpc_world_t world;
    char prefix[112];             /* "ddpc[rank r/n host]" */
    char err[DDPC_ERRMSG_LEN];    /* last error on this handle */
    int own_mpi;                  /* ddpc called MPI_Init */
    int stuck;                    /* a communicator was left with a collective in flight */
    int mpi_thread_level;
    int pmix_active;              /* PMIx_Init succeeded and owns discovery */
    unsigned kvs_round;           /* fresh PMIx key per exchange */
    MPI_Comm mpi_world;           /* dup of MPI_COMM_WORLD for runtime traffic */
    struct ddpc_comm *world_comm; /* ddpc_comm_world */
    /* the side channel (src/comm/monitor.c): NULL when off or one rank */
    struct ddpc_monitor *mon;
    struct ddpc_comm *comms[8];   /* by id, in creation order (the same on every rank) */
    int ncomms;                   /* ids handed out */
    int check_collectives;        /* DDPC_DEBUG=detail */
    long flight_n;                /* DDPC_FLIGHT_RECORDER: collectives kept per communicator */
    const char *flight_dir;       /* DDPC_FLIGHT_RECORDER_DIR */
    int flight_dumped;            /* once per process */
};

/* Record an error on rt (may be NULL: then only the init-error buffer) with
 * the "ddpc[rank r/n host] module: " prefix; returns st for `return ddpc_err(...)`. */
ddpc_status_t ddpc_err(ddpc_t rt, ddpc_status_t st, const char *module, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 4, 5)))
#endif
    ;
ddpc_status_t ddpc_verr(ddpc_t rt, ddpc_status_t st, const char *module, const char *fmt,
                        va_list ap);

/* Same, into a caller's buffer (for handles other than the runtime). */
void ddpc_format_msg(char *dst, size_t n, const char *prefix, const char *module,
                     const char *fmt, va_list ap);
ddpc_status_t ddpc_set_error(char *dst, size_t n, const char *prefix, const char *module,
                             ddpc_status_t st, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 6, 7)))
#endif
    ;
/* Record an error in handle h (fields err[] and prefix[]); returns st. Each
 * module wraps it: #define fail(s, st, ...) DDPC_HANDLE_ERR(s, "sampler", st, __VA_ARGS__) */
#define DDPC_HANDLE_ERR(h, module, st, ...)                                                    \
    ddpc_set_error((h)->err, sizeof (h)->err, (h)->prefix, module, st, __VA_ARGS__)

/* zlib's CRC-32 (src/ckpt/crc.c): checkpoints, and the replica check of the DDP engine. */
uint32_t ck_crc32(uint32_t crc, const void *buf, size_t len);

/* Build rt->prefix from the world facts. */
void ddpc_set_prefix(ddpc_t rt);

/* MPI failure -> status with MPI's own error string. */
ddpc_status_t ddpc_mpi_err(ddpc_t rt, int mpirc, const char *module, const char *what);

/* Options: parse a DDPC_* variable if set. Return DDPC_ERR_INVALID with a
 * message naming the variable and what was expected. */
ddpc_status_t ddpc_env_double(ddpc_t rt, const char *name, double lo, double hi, double *val);
ddpc_status_t ddpc_env_long(ddpc_t rt, const char *name, long lo, long hi, long *val);
ddpc_status_t ddpc_env_choice(ddpc_t rt, const char *name, const char *const *choices, int *val);

/* src/pmix/discover.c: fill rt->world (everything but mpi_*) from the first
 * source that is present; may start a PMIx client (rt->pmix_active). */
ddpc_status_t ddpc_discover(ddpc_t rt);
/* Check the world against MPI_COMM_WORLD after MPI_Init. */
ddpc_status_t ddpc_discover_check_mpi(ddpc_t rt);
void ddpc_discover_finalize(ddpc_t rt);
void ddpc_discover_abort(ddpc_t rt, int code, const char *msg);

/* src/comm: small host-memory messages between the ranks of c, whatever
 * memory c's collectives take: c itself when it takes host memory, else the
 * runtime's key exchange (PMIx or MPI), which every launch has. For the
 * engines' control traffic (model checks, checkpoint statuses and headers). */
ddpc_status_t ddpc_comm_host_bcast(struct ddpc_comm *c, void *buf, size_t bytes, int root);
ddpc_status_t ddpc_comm_host_allgather(struct ddpc_comm *c, const void *mine, void *all,
                                       size_t bytes);

/* src/comm: world communicator lifecycle. */
ddpc_status_t ddpc_comm_create_world(ddpc_t rt, struct ddpc_comm **out);
void ddpc_comm_destroy_internal(struct ddpc_comm *c);
/* A launch through PMIx whose MPI is not wired (no PMIx client in MPI): the
 * world from PMIx alone, node count through the key exchange. */
ddpc_status_t ddpc_discover_without_mpi(ddpc_t rt);

/* Monotonic seconds. */
double ddpc_now(void);

/* src/comm/monitor.c: the side channel to rank 0 (heartbeats, progress,
 * the DDPC_DEBUG=detail check). Collective; a rank that cannot reach rank 0
 * warns and goes on without it. stop: NULL and "never started" are fine. */
ddpc_status_t ddpc_monitor_start(ddpc_t rt);
void ddpc_monitor_stop(ddpc_t rt);

/* src/comm/comm.c: the flight recorder. tag_next: what the next collective
 * issued on c is for (the DDP engine: "bucket 3"), kept with it. dump: every
 * communicator's recent collectives as JSON, once per process (a timeout or
 * a failure), into DDPC_FLIGHT_RECORDER_DIR/ddpc-flight-rank<r>.json; the
 * path into where (may be NULL). Nothing when DDPC_FLIGHT_RECORDER is 0. */
struct ddpc_comm;
void ddpc_comm_tag_next(struct ddpc_comm *c, const char *tag);
/* The next collective on c goes to MPI as its blocking call (backend mpi;
 * others ignore it): for one that every rank issues while its caller waits,
 * where MPICH's blocking algorithms are faster than its non-blocking ones.
 * Every rank must say it for the same collective. */
void ddpc_comm_blocking_next(struct ddpc_comm *c);
void ddpc_flight_dump(ddpc_t rt, const char *why, char *where, size_t n);

#endif /* DDPC_INTERNAL_H */
