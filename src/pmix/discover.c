/* SPDX-License-Identifier: BSD-3-Clause */
/* discover.c: where this process stands in the job. Tries PMIx, then Slurm's
 * environment, then an MPI launcher's, then torchrun's, else a single
 * process; checks the answer against MPI_COMM_WORLD; exchanges small blobs
 * (ddpc_kvs_*) through PMIx or MPI. It never guesses: an inconsistent
 * environment is an error that names the variables. */
#include "config.h"
#include "discover.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef DDPC_HAVE_PMIX
#include <pmix.h>
static pmix_proc_t pmix_me;
#endif

#define MOD "discover"

/* Parse an integer variable into *out; 0 if absent, 1 if set, -1 (with a
 * message) if set but not a non-negative integer. */
static int env_int(ddpc_t rt, const char *name, int *out)
{
    const char *s = getenv(name);
    if (!s)
        return 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < 0 || v > 1 << 30) {
        ddpc_err(rt, DDPC_ERR_LAUNCH, MOD, "%s=\"%s\": expected a non-negative integer", name, s);
        return -1;
    }
    *out = (int)v;
    return 1;
}

/* A source's variables, by role. Any may be NULL (unknown). */
struct env_source {
    ddpc_source_t src;
    const char *rank, *size, *local_rank, *local_size, *node_id, *num_nodes;
    const char *needs; /* a variable that must also be set for the source to count */
};

static const struct env_source env_sources[] = {
    {DDPC_SOURCE_SLURM, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL, "SLURM_NODEID",
     "SLURM_STEP_NUM_NODES", "SLURM_STEP_ID"},
    {DDPC_SOURCE_MPI_ENV, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", NULL,
     NULL, NULL},
    {DDPC_SOURCE_MPI_ENV, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", NULL, NULL, NULL},
    {DDPC_SOURCE_TORCHRUN, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
     NULL, NULL},
};

/* Fill w from one environment source. 0: not present, 1: used, -1: error. */
static int from_env(ddpc_t rt, const struct env_source *s, ddpc_world_t *w)
{
    int r, n, got;
    if (s->needs && !getenv(s->needs))
        return 0;
    if ((got = env_int(rt, s->rank, &r)) <= 0)
        return got;
    if ((got = env_int(rt, s->size, &n)) <= 0) {
        if (got == 0)
            ddpc_err(rt, DDPC_ERR_LAUNCH, MOD, "%s is set but %s is not", s->rank, s->size);
        return -1;
    }
    if (n < 1 || r >= n) {
        ddpc_err(rt, DDPC_ERR_LAUNCH, MOD, "%s=%d, %s=%d: expected 0 <= rank < size", s->rank, r,
                 s->size, n);
        return -1;
    }
    w->rank = r;
    w->size = n;
    w->local_rank = 0;
    w->local_size = -1; /* unknown: derived from host names once MPI is up */
    w->node_id = -1;
    w->num_nodes = -1;
    const char *opt[4] = {s->local_rank, s->local_size, s->node_id, s->num_nodes};
    int *dst[4] = {&w->local_rank, &w->local_size, &w->node_id, &w->num_nodes};
    for (int i = 0; i < 4; i++)
        if (opt[i] && env_int(rt, opt[i], dst[i]) < 0)
            return -1;
    if (w->local_size > 0 && w->local_rank >= w->local_size) {
        ddpc_err(rt, DDPC_ERR_LAUNCH, MOD, "%s=%d, %s=%d: expected local rank < local size",
                 s->local_rank, w->local_rank, s->local_size, w->local_size);
        return -1;
    }
    if (w->local_size > n) {
        ddpc_err(rt, DDPC_ERR_LAUNCH, MOD, "%s=%d exceeds %s=%d", s->local_size, w->local_size,
                 s->size, n);
        return -1;
    }
    w->source = s->src;
    return 1;
}

#ifdef DDPC_HAVE_PMIX
static int pmix_get_u32(const pmix_proc_t *proc, const char *key, uint32_t *out)
{
    pmix_value_t *val = NULL;
    if (PMIx_Get(proc, key, NULL, 0, &val) != PMIX_SUCCESS || !val)
        return -1;
    int ok = 0;
    switch (val->type) {
    case PMIX_UINT32: *out = val->data.uint32; break;
    case PMIX_UINT16: *out = val->data.uint16; break;
    case PMIX_INT: *out = (uint32_t)val->data.integer; break;
    case PMIX_UINT: *out = val->data.uint; break;
    case PMIX_PROC_RANK: *out = val->data.rank; break;
    default: ok = -1;
    }
    PMIX_VALUE_RELEASE(val);
    return ok;
}

/* 1: world from PMIx, 0: no PMIx server here, -1: error. */
static int from_pmix(ddpc_t rt, ddpc_world_t *w)
{
    if (!getenv("PMIX_NAMESPACE") && !getenv("PMIX_RANK"))
        return 0; /* no server advertised: do not pay for a failed connect */
    pmix_status_t rc = PMIx_Init(&pmix_me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        ddpc_err(rt, DDPC_ERR_PMIX, MOD,
                 "PMIX_NAMESPACE is set but PMIx_Init failed: %s; is the launcher's PMIx "
                 "server reachable?", PMIx_Error_string(rc));
        return -1;
    }
    rt->pmix_active = 1;
    pmix_proc_t wild;
    PMIX_PROC_CONSTRUCT(&wild);
    PMIX_LOAD_PROCID(&wild, pmix_me.nspace, PMIX_RANK_WILDCARD);
    uint32_t size, local_size, local_rank, node_id, num_nodes;
    if (pmix_get_u32(&wild, PMIX_JOB_SIZE, &size) || pmix_get_u32(&wild, PMIX_LOCAL_SIZE, &local_size) ||
        pmix_get_u32(&pmix_me, PMIX_LOCAL_RANK, &local_rank) ||
        pmix_get_u32(&pmix_me, PMIX_NODEID, &node_id)) {
        ddpc_err(rt, DDPC_ERR_PMIX, MOD,
                 "PMIx server of namespace %s did not provide job size, local size, local rank "
                 "and node id", pmix_me.nspace);
        return -1;
    }
    if (pmix_get_u32(&wild, PMIX_NUM_NODES, &num_nodes))
        num_nodes = 0; /* derived later */
    w->rank = (int)pmix_me.rank;
    w->size = (int)size;
    w->local_rank = (int)local_rank;
    w->local_size = (int)local_size;
    w->node_id = (int)node_id;
    w->num_nodes = num_nodes ? (int)num_nodes : -1;
    w->source = DDPC_SOURCE_PMIX;
    pmix_value_t *hv = NULL;
    if (PMIx_Get(&pmix_me, PMIX_HOSTNAME, NULL, 0, &hv) == PMIX_SUCCESS && hv &&
        hv->type == PMIX_STRING && hv->data.string)
        snprintf(w->host, sizeof w->host, "%s", hv->data.string);
    if (hv)
        PMIX_VALUE_RELEASE(hv);
    return 1;
}
#endif

ddpc_status_t ddpc_discover(ddpc_t rt)
{
    ddpc_world_t *w = &rt->world;
    memset(w, 0, sizeof *w);
    if (gethostname(w->host, sizeof w->host) != 0)
        snprintf(w->host, sizeof w->host, "unknown");
    w->host[sizeof w->host - 1] = 0;
    char *dot = strchr(w->host, '.');
    if (dot)
        *dot = 0;
    /* until the rank is known, messages say so */
    snprintf(rt->prefix, sizeof rt->prefix, "ddpc[rank ?/? %s]", w->host);
    int got = 0;
#ifdef DDPC_HAVE_PMIX
    got = from_pmix(rt, w);
#endif
    for (size_t i = 0; got == 0 && i < sizeof env_sources / sizeof *env_sources; i++)
        got = from_env(rt, &env_sources[i], w);
    if (got < 0)
        return DDPC_ERR_LAUNCH;

    /* hydra and mpirun started under Slurm inherit the step's SLURM_* of the
     * proxy, not of the rank: when a launcher's own variables disagree, the
     * launcher that started this process is right. */
    if (got == 1 && w->source == DDPC_SOURCE_SLURM) {
        ddpc_world_t l;
        memset(&l, 0, sizeof l);
        for (size_t i = 1; i < 3; i++) {
            int g = from_env(rt, &env_sources[i], &l);
            if (g < 0)
                return DDPC_ERR_LAUNCH;
            if (g == 1 && (l.rank != w->rank || l.size != w->size)) {
                snprintf(l.host, sizeof l.host, "%s", w->host);
                *w = l;
                break;
            }
        }
    }
    if (got == 0) {
        w->rank = 0;
        w->size = 1;
        w->local_rank = 0;
        w->local_size = 1;
        w->node_id = 0;
        w->num_nodes = 1;
        w->source = DDPC_SOURCE_SINGLE;
    }
    return DDPC_OK;
}

/* Node ids, node count and local sizes where the source lacked them. Ranks
 * are on the same node when their node ids agree (if the source gave ids),
 * else when their host names do; nodes are numbered by their lowest rank. */
static ddpc_status_t derive_locality(ddpc_t rt)
{
    ddpc_world_t *w = &rt->world;
    if (w->node_id >= 0 && w->local_size > 0 && w->num_nodes > 0)
        return DDPC_OK;
    enum { H = sizeof w->host };
    char key[H];
    if (w->node_id >= 0)
        snprintf(key, sizeof key, "node-id:%d", w->node_id);
    else
        memcpy(key, w->host, H);
    char *all = malloc((size_t)w->size * H);
    if (!all)
        return ddpc_err(rt, DDPC_ERR_NOMEM, MOD, "cannot allocate %d host names", w->size);
    int rc = MPI_Allgather(key, H, MPI_CHAR, all, H, MPI_CHAR, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) {
        free(all);
        return ddpc_mpi_err(rt, rc, MOD, "MPI_Allgather of host names");
    }
    int nodes = 0, my_node = -1, local = 0, local_size = 0;
    for (int r = 0; r < w->size; r++) {
        const char *kr = all + (size_t)r * H;
        int first = 1;
        for (int q = 0; q < r && first; q++)
            first = strncmp(all + (size_t)q * H, kr, H) != 0;
        nodes += first;
        if (strncmp(kr, key, H) == 0) {
            if (my_node < 0)
                my_node = nodes - 1;
            local += r < w->rank;
            local_size++;
        }
    }
    free(all);
    if (w->node_id < 0)
        w->node_id = my_node;
    if (w->num_nodes <= 0)
        w->num_nodes = nodes;
    if (w->local_size <= 0)
        w->local_size = local_size;
    if (w->source == DDPC_SOURCE_SINGLE || (w->source == DDPC_SOURCE_MPI_ENV && !getenv("PMI_RANK") &&
                                            !getenv("OMPI_COMM_WORLD_RANK")))
        w->local_rank = local;
    return DDPC_OK;
}

ddpc_status_t ddpc_discover_check_mpi(ddpc_t rt)
{
    ddpc_world_t *w = &rt->world;
    if (w->source == DDPC_SOURCE_SINGLE) {
        /* e.g. MPI's singleton init or a launcher ddpc does not know: MPI is the truth */
        w->rank = w->mpi_rank;
        w->size = w->mpi_size;
        w->local_size = w->node_id = w->num_nodes = -1;
        if (w->size > 1)
            w->source = DDPC_SOURCE_MPI_ENV; /* a launcher ddpc does not know wired MPI */
        ddpc_set_prefix(rt);
    }
    if (w->mpi_size != w->size || w->mpi_rank != w->rank) {
        const char *hint =
            w->mpi_size == 1
                ? (w->source == DDPC_SOURCE_PMIX
                       ? "this MPI has no PMIx client, so each process is its own 1-rank MPI job. "
                         "Launch with `srun --mpi=pmi2` (or mpiexec), or use an MPI built with PMIx"
                       : "each process is its own 1-rank MPI job: the launcher did not wire MPI. "
                         "Launch with `srun --mpi=pmi2` or mpiexec")
                : "the launcher's environment and MPI describe different jobs; check the launch "
                  "command and stale RANK/WORLD_SIZE variables";
        return ddpc_err(rt, DDPC_ERR_LAUNCH, MOD,
                        "%s says rank %d of %d but MPI_COMM_WORLD says rank %d of %d: %s",
                        ddpc_source_name(w->source), w->rank, w->size, w->mpi_rank, w->mpi_size,
                        hint);
    }
    return derive_locality(rt);
}

ddpc_status_t ddpc_discover_without_mpi(ddpc_t rt)
{
    ddpc_world_t *w = &rt->world;
    if (w->num_nodes > 0)
        return DDPC_OK;
    int32_t *ids = malloc((size_t)w->size * sizeof *ids);
    if (!ids)
        return ddpc_err(rt, DDPC_ERR_NOMEM, MOD, "cannot allocate %d node ids", w->size);
    int32_t mine = w->node_id;
    ddpc_status_t st = ddpc_kvs_allgather(rt, &mine, ids, sizeof mine);
    if (st == DDPC_OK) {
        int nodes = 0;
        for (int r = 0; r < w->size; r++) {
            int first = 1;
            for (int q = 0; q < r && first; q++)
                first = ids[q] != ids[r];
            nodes += first;
        }
        w->num_nodes = nodes;
    }
    free(ids);
    return st;
}

void ddpc_discover_finalize(ddpc_t rt)
{
#ifdef DDPC_HAVE_PMIX
    if (rt->pmix_active) {
        PMIx_Finalize(NULL, 0);
        rt->pmix_active = 0;
    }
#endif
}

void ddpc_discover_abort(ddpc_t rt, int code, const char *msg)
{
#ifdef DDPC_HAVE_PMIX
    if (rt->pmix_active) {
        pmix_proc_t wild;
        PMIX_PROC_CONSTRUCT(&wild);
        PMIX_LOAD_PROCID(&wild, pmix_me.nspace, PMIX_RANK_WILDCARD);
        PMIx_Abort(code ? code : 1, msg ? msg : "ddpc abort", &wild, 1);
    }
#endif
}

/* ------------------------------------------------------------------ key exchange */

/* PMIx when the world came from a PMIx server (the launcher's own channel,
 * usable before and without MPI), else MPI. */
static int use_mpi_for_kvs(ddpc_t rt)
{
    return !rt->pmix_active && rt->mpi_world != MPI_COMM_NULL;
}

#ifdef DDPC_HAVE_PMIX
/* Each rank in `who` (all when who < 0) puts len bytes under a fresh key;
 * fence; then get(peer) for the caller. */
static ddpc_status_t pmix_exchange(ddpc_t rt, const void *mine, size_t len, int who,
                                   char *key, size_t keylen)
{
    snprintf(key, keylen, "ddpc.kvs.%u", rt->kvs_round++);
    pmix_status_t rc = PMIX_SUCCESS;
    if (who < 0 || who == rt->world.rank) {
        pmix_value_t v;
        PMIX_VALUE_CONSTRUCT(&v);
        v.type = PMIX_BYTE_OBJECT;
        v.data.bo.bytes = (char *)mine;
        v.data.bo.size = len;
        if ((rc = PMIx_Put(PMIX_GLOBAL, key, &v)) == PMIX_SUCCESS)
            rc = PMIx_Commit();
    }
    if (rc == PMIX_SUCCESS) {
        pmix_proc_t wild;
        pmix_info_t info;
        bool collect = true;
        PMIX_PROC_CONSTRUCT(&wild);
        PMIX_LOAD_PROCID(&wild, pmix_me.nspace, PMIX_RANK_WILDCARD);
        PMIX_INFO_CONSTRUCT(&info);
        PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
        rc = PMIx_Fence(&wild, 1, &info, 1);
        PMIX_INFO_DESTRUCT(&info);
    }
    if (rc != PMIX_SUCCESS)
        return ddpc_err(rt, DDPC_ERR_PMIX, "kvs", "PMIx put/commit/fence of %s failed: %s", key,
                        PMIx_Error_string(rc));
    return DDPC_OK;
}

static ddpc_status_t pmix_fetch(ddpc_t rt, const char *key, int peer, void *dst, size_t len)
{
    pmix_proc_t p;
    pmix_value_t *v = NULL;
    PMIX_PROC_CONSTRUCT(&p);
    PMIX_LOAD_PROCID(&p, pmix_me.nspace, (pmix_rank_t)peer);
    pmix_status_t rc = PMIx_Get(&p, key, NULL, 0, &v);
    if (rc != PMIX_SUCCESS || !v || v->type != PMIX_BYTE_OBJECT || v->data.bo.size != len) {
        if (v)
            PMIX_VALUE_RELEASE(v);
        return ddpc_err(rt, DDPC_ERR_PMIX, "kvs", "PMIx_Get of %s from rank %d failed: %s", key,
                        peer, rc != PMIX_SUCCESS ? PMIx_Error_string(rc) : "wrong type or size");
    }
    memcpy(dst, v->data.bo.bytes, len);
    PMIX_VALUE_RELEASE(v);
    return DDPC_OK;
}
#endif

ddpc_status_t ddpc_kvs_bcast(ddpc_t rt, void *buf, size_t len, int root)
{
    if (!rt || (!buf && len) || root < 0 || root >= rt->world.size)
        return ddpc_err(rt, DDPC_ERR_INVALID, "kvs", "bad arguments to ddpc_kvs_bcast (root %d)", root);
    if (rt->world.size == 1)
        return DDPC_OK;
    if (use_mpi_for_kvs(rt)) {
        int rc = MPI_Bcast(buf, (int)len, MPI_BYTE, root, rt->mpi_world);
        return rc == MPI_SUCCESS ? DDPC_OK : ddpc_mpi_err(rt, rc, "kvs", "MPI_Bcast");
    }
#ifdef DDPC_HAVE_PMIX
    if (rt->pmix_active) {
        char key[64];
        ddpc_status_t st = pmix_exchange(rt, buf, len, root, key, sizeof key);
        if (st == DDPC_OK && rt->world.rank != root)
            st = pmix_fetch(rt, key, root, buf, len);
        return st;
    }
#endif
    return ddpc_err(rt, DDPC_ERR_STATE, "kvs", "no transport: neither MPI nor PMIx is usable");
}

ddpc_status_t ddpc_kvs_allgather(ddpc_t rt, const void *mine, void *all, size_t len)
{
    if (!rt || (!mine && len) || !all)
        return ddpc_err(rt, DDPC_ERR_INVALID, "kvs", "bad arguments to ddpc_kvs_allgather");
    if (rt->world.size == 1) {
        memmove(all, mine, len);
        return DDPC_OK;
    }
    if (use_mpi_for_kvs(rt)) {
        int rc = MPI_Allgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, rt->mpi_world);
        return rc == MPI_SUCCESS ? DDPC_OK : ddpc_mpi_err(rt, rc, "kvs", "MPI_Allgather");
    }
#ifdef DDPC_HAVE_PMIX
    if (rt->pmix_active) {
        char key[64];
        ddpc_status_t st = pmix_exchange(rt, mine, len, -1, key, sizeof key);
        for (int r = 0; st == DDPC_OK && r < rt->world.size; r++)
            st = pmix_fetch(rt, key, r, (char *)all + (size_t)r * len, len);
        return st;
    }
#endif
    return ddpc_err(rt, DDPC_ERR_STATE, "kvs", "no transport: neither MPI nor PMIx is usable");
}
