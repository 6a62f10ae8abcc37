/* internal.h: what the modules of libddpc share and users never see: the
 * discovery and key-exchange entry points, the communicators' internal
 * calls. The handle's struct, errors, logging, options and the clock are
 * src/util/util.h. */
#ifndef DDPC_INTERNAL_H
#define DDPC_INTERNAL_H

#include "../util/util.h"

/* zlib's CRC-32 (src/ckpt/crc.c): checkpoints, and the replica check of the DDP engine. */
uint32_t ck_crc32(uint32_t crc, const void *buf, size_t len);

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
