/* SPDX-License-Identifier: BSD-3-Clause */
/* init.c: the top layer of libddpc (doc/layers.md): ddpc_init, ddpc_finalize
 * and ddpc_abort, which orchestrate discovery (src/pmix), MPI, the world
 * communicator and the side channel (src/comm). Nothing below calls into it.
 * Messages, options and clocks are src/util; data moves in src/comm. */
#include "config.h"
#include "../util/util.h"
#include "../pmix/discover.h"
#include "../comm/comm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ options */

static ddpc_status_t read_env_options(ddpc_t rt)
{
    static const char *const levels[] = {"error", "warn", "info", "debug", NULL};
    static const char *const backends[] = {"auto", "mpi", "nccl", NULL}; /* ddpc_backend_t order */
    int lv = (int)rt->cfg.log_level, be = (int)rt->cfg.backend;
    ddpc_status_t st;
    if ((st = ddpc_env_choice(rt, "DDPC_LOG_LEVEL", levels, &lv)) ||
        (st = ddpc_env_double(rt, "DDPC_TIMEOUT", 0.001, 1e7, &rt->cfg.timeout_s)) ||
        (st = ddpc_env_choice(rt, "DDPC_BACKEND", backends, &be)) ||
        (st = ddpc_env_long(rt, "DDPC_FLIGHT_RECORDER", 0, 1 << 20, &rt->flight_n)))
        return st;
    rt->flight_dir = getenv("DDPC_FLIGHT_RECORDER_DIR");
    if (!rt->flight_dir || !*rt->flight_dir)
        rt->flight_dir = ".";
    rt->cfg.log_level = (ddpc_log_level_t)lv;
    rt->cfg.backend = (ddpc_backend_t)be;
    return DDPC_OK;
}

/* ------------------------------------------------------------------ lifecycle */

/* One error, on every rank that saw it, before returning. */
static ddpc_status_t init_fail(ddpc_t rt, ddpc_status_t st)
{
    fprintf(stderr, "%s\n", rt->err);
    return st;
}

/* DDPC_TIMELINE=DIR: record from here to ddpc_finalize. */
static ddpc_status_t start_timeline(ddpc_t rt)
{
    const char *dir = getenv("DDPC_TIMELINE");
    if (!dir || !*dir)
        return DDPC_OK;
    ddpc_status_t st = ddpc_timeline_start(rt, dir);
    return st ? init_fail(rt, st) : DDPC_OK;
}

ddpc_status_t ddpc_init(const ddpc_config_t *cfg, int *argc, char ***argv, ddpc_t *out)
{
    static const ddpc_config_t defaults = DDPC_CONFIG_INIT;
    ddpc_status_t st;
    ddpc_clear_init_error();
    if (!out)
        return ddpc_err(NULL, DDPC_ERR_INVALID, "init", "out must not be NULL");
    *out = NULL;
    ddpc_t rt = calloc(1, sizeof *rt);
    if (!rt)
        return ddpc_err(NULL, DDPC_ERR_NOMEM, "init", "cannot allocate the runtime handle");
    rt->cfg = cfg ? *cfg : defaults;
    rt->mpi_world = MPI_COMM_NULL;
    *out = rt;

    /* Discovery first, so that every later message carries rank and host. */
    if ((st = ddpc_discover(rt)) != DDPC_OK) {
        ddpc_set_prefix(rt);
        return init_fail(rt, st);
    }
    ddpc_set_prefix(rt);
    if ((st = read_env_options(rt)) != DDPC_OK)
        return init_fail(rt, st);

    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &rt->mpi_thread_level);
        if (rc != MPI_SUCCESS)
            return init_fail(rt, ddpc_mpi_err(rt, rc, "init", "MPI_Init_thread"));
        rt->own_mpi = 1;
    } else {
        MPI_Query_thread(&rt->mpi_thread_level);
    }
    if (rt->mpi_thread_level < MPI_THREAD_SERIALIZED)
        return init_fail(rt, ddpc_err(rt, DDPC_ERR_UNSUPPORTED, "init",
                                      "MPI provides thread level %d; ddpc needs at least "
                                      "MPI_THREAD_SERIALIZED (its progress thread calls MPI)",
                                      rt->mpi_thread_level));
    MPI_Comm_rank(MPI_COMM_WORLD, &rt->world.mpi_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &rt->world.mpi_size);
    if ((st = ddpc_discover_check_mpi(rt)) != DDPC_OK) {
        /* srun --mpi=pmix with an MPI that has no PMIx client (Debian's
         * MPICH): every process is a 1-rank MPI job. The nccl backend needs
         * no MPI (its id goes through PMIx), so that launch is fine there. */
        if (rt->cfg.backend == DDPC_BACKEND_NCCL && rt->world.source == DDPC_SOURCE_PMIX &&
            rt->world.mpi_size == 1 && rt->world.size > 1) {
            if ((st = ddpc_discover_without_mpi(rt)) != DDPC_OK)
                return init_fail(rt, st);
            rt->err[0] = 0;
            ddpc_log(rt, DDPC_LOG_INFO,
                     "world from pmix: local rank %d/%d, node %d/%d; MPI is not wired (no PMIx "
                     "client in this MPI): backend nccl only, no world communicator; timeout %gs",
                     rt->world.local_rank, rt->world.local_size, rt->world.node_id,
                     rt->world.num_nodes, rt->cfg.timeout_s);
            if ((st = ddpc_monitor_start(rt)) != DDPC_OK)
                return init_fail(rt, st);
            return start_timeline(rt);
        }
        if (!rt->cfg.allow_mpi_mismatch)
            return init_fail(rt, st);
        return DDPC_OK; /* ddpc-info: world from the launcher, no MPI communicator;
                           the disagreement stays in ddpc_last_error */
    }
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &rt->mpi_world);
    if (rc != MPI_SUCCESS)
        return init_fail(rt, ddpc_mpi_err(rt, rc, "init", "MPI_Comm_dup"));
    if ((st = ddpc_comm_create_world(rt, &rt->world_comm)) != DDPC_OK ||
        (st = ddpc_monitor_start(rt)) != DDPC_OK)
        return init_fail(rt, st);
    ddpc_log(rt, DDPC_LOG_INFO,
             "world from %s: local rank %d/%d, node %d/%d; MPI thread level %d; timeout %gs",
             ddpc_source_name(rt->world.source), rt->world.local_rank, rt->world.local_size,
             rt->world.node_id, rt->world.num_nodes, rt->mpi_thread_level, rt->cfg.timeout_s);
    return start_timeline(rt);
}

ddpc_status_t ddpc_finalize(ddpc_t rt)
{
    if (!rt)
        return DDPC_OK;
    if (ddpc_timeline_stop(rt) != DDPC_OK) /* DDPC_TIMELINE: this rank's file */
        ddpc_log(rt, DDPC_LOG_WARN, "%s", ddpc_last_error(rt));
    ddpc_monitor_stop(rt);
    ddpc_comm_destroy_internal(rt->world_comm);
    if (rt->stuck) {
        /* a collective never completed (a rank is missing): MPI_Finalize
         * would wait for it forever. MPI stays as it is, and so does rt
         * (a thread left in that collective holds it). */
        ddpc_log(rt, DDPC_LOG_ERROR,
                 "finalize: a collective never completed (another rank is missing), so MPI is "
                 "not finalized; exit with a non-zero status (or call ddpc_abort) so that the "
                 "launcher ends the job");
        return DDPC_ERR_TIMEOUT;
    }
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && rt->mpi_world != MPI_COMM_NULL)
        MPI_Comm_free(&rt->mpi_world);
    if (rt->own_mpi && !fin)
        MPI_Finalize();
    ddpc_discover_finalize(rt);
    free(rt);
    return DDPC_OK;
}

#define ABORT_GRACE_S 5

static void *abort_grace(void *arg)
{
    struct timespec t = {ABORT_GRACE_S, 0};
    while (nanosleep(&t, &t) != 0) {
    }
    _Exit(*(const int *)arg);
    return NULL;
}

void ddpc_abort(ddpc_t rt, int code, const char *msg)
{
    ddpc_flight_dump(rt, msg, NULL, 0); /* DDPC_FLIGHT_RECORDER: what this rank did last */
    if (msg && *msg) {
        char line[2 * DDPC_ERRMSG_LEN];
        snprintf(line, sizeof line, "%s %s", rt ? rt->prefix : "ddpc[rank ?]", msg);
        ddpc_drop_inner_prefixes(line); /* msg often chains a library message */
        fprintf(stderr, "%s\n", line);
    }
    fflush(NULL);
    /* the launcher forwards this rank's output through a pipe while the
     * abort tears the job down: give it a moment, or the message that says
     * why can be lost (seen with MPICH's hydra: no output, exit 1) */
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL);
    /* MPI_Abort can block: a rank cut off from its node's launcher daemon
     * (link down) waits in it as long as the link is down. The process
     * ends ABORT_GRACE_S later whatever MPI does. */
    static int grace_code;
    grace_code = code ? code : 1;
    pthread_t grace;
    if (pthread_create(&grace, NULL, abort_grace, &grace_code) == 0)
        pthread_detach(grace);
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (rt && rt->pmix_active && !(inited && !fin && rt->world.mpi_size == rt->world.size))
        ddpc_discover_abort(rt, code, msg);
    if (inited && !fin)
        MPI_Abort(MPI_COMM_WORLD, code);
    _Exit(code ? code : 1);
}
