/* SPDX-License-Identifier: BSD-3-Clause */
/* discover.h: the second layer of libddpc (doc/layers.md): where this
 * process stands in the job, and the key exchange (ddpc_kvs_bcast,
 * ddpc_kvs_allgather, public in ddpc_core.h) through PMIx or MPI. Above
 * src/util only; the communicators and ddpc_init are above it. */
#ifndef DDPC_DISCOVER_H
#define DDPC_DISCOVER_H

#include "../util/util.h"

/* Fill rt->world (everything but mpi_*) from the first source that is
 * present; may start a PMIx client (rt->pmix_active). */
ddpc_status_t ddpc_discover(ddpc_t rt);
/* Check the world against MPI_COMM_WORLD after MPI_Init. */
ddpc_status_t ddpc_discover_check_mpi(ddpc_t rt);
/* A launch through PMIx whose MPI is not wired (no PMIx client in MPI): the
 * world from PMIx alone, node count through the key exchange. */
ddpc_status_t ddpc_discover_without_mpi(ddpc_t rt);
void ddpc_discover_finalize(ddpc_t rt);
void ddpc_discover_abort(ddpc_t rt, int code, const char *msg);

#endif /* DDPC_DISCOVER_H */
