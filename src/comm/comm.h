/* SPDX-License-Identifier: BSD-3-Clause */
/* comm.h: what the communicator layer (src/comm, doc/layers.md) offers the
 * layers above it beyond the public ddpc_comm.h: the world communicator's
 * lifecycle for ddpc_init, the side channel, host-memory control messages
 * and the flight recorder for the engines. Above src/pmix and src/util. */
#ifndef DDPC_COMM_LAYER_H
#define DDPC_COMM_LAYER_H

#include "../util/util.h"
#include "../pmix/discover.h"

struct ddpc_comm;

/* Small host-memory messages between the ranks of c, whatever memory c's
 * collectives take: c itself when it takes host memory, else the runtime's
 * key exchange (PMIx or MPI), which every launch has. For the engines'
 * control traffic (model checks, checkpoint statuses and headers). */
ddpc_status_t ddpc_comm_host_bcast(struct ddpc_comm *c, void *buf, size_t bytes, int root);
ddpc_status_t ddpc_comm_host_allgather(struct ddpc_comm *c, const void *mine, void *all,
                                       size_t bytes);

/* World communicator lifecycle (ddpc_init, ddpc_finalize). */
ddpc_status_t ddpc_comm_create_world(ddpc_t rt, struct ddpc_comm **out);
void ddpc_comm_destroy_internal(struct ddpc_comm *c);

/* monitor.c: the side channel to rank 0 (heartbeats, progress, the
 * DDPC_DEBUG=detail check). Collective; a rank that cannot reach rank 0
 * warns and goes on without it. stop: NULL and "never started" are fine. */
ddpc_status_t ddpc_monitor_start(ddpc_t rt);
void ddpc_monitor_stop(ddpc_t rt);

/* comm.c: the flight recorder. tag_next: what the next collective issued on
 * c is for (the DDP engine: "bucket 3"), kept with it. dump: every
 * communicator's recent collectives as JSON, once per process (a timeout or
 * a failure), into DDPC_FLIGHT_RECORDER_DIR/ddpc-flight-rank<r>.json; the
 * path into where (may be NULL). Nothing when DDPC_FLIGHT_RECORDER is 0. */
void ddpc_comm_tag_next(struct ddpc_comm *c, const char *tag);
/* The next collective on c goes to MPI as its blocking call (backend mpi;
 * others ignore it): for one that every rank issues while its caller waits,
 * where MPICH's blocking algorithms are faster than its non-blocking ones.
 * Every rank must say it for the same collective. */
void ddpc_comm_blocking_next(struct ddpc_comm *c);
void ddpc_flight_dump(ddpc_t rt, const char *why, char *where, size_t n);

#endif /* DDPC_COMM_LAYER_H */
