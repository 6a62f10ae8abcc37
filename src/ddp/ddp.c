/* SPDX-License-Identifier: BSD-3-Clause */
/* ddp.c: the DDP engine's registry. Parameters are registered by name and
 * shape, checked across ranks, laid out in one parameter arena and one
 * gradient arena, and cut into buckets. The reducer (reducer.c) and the
 * optimizers (optim.c) work on what this file builds. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "config.h"
#include "ddp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#ifdef DDPC_HAVE_CUDA
#include <cuda_runtime.h>
#endif

const char *ddpc_ddp_last_error(ddpc_ddp_t d) { return d ? d->err : "no engine"; }
ddpc_comm_t ddpc_ddp_comm(ddpc_ddp_t d) { return d ? d->comm : NULL; }
int ddpc_ddp_device(ddpc_ddp_t d) { return d ? d->device : DDPC_DEVICE_HOST; }
void *ddpc_ddp_stream(ddpc_ddp_t d) { return d ? d->stream : NULL; }

/* ------------------------------------------------------------------ device memory */

ddpc_status_t ddp_cuda_check(ddpc_ddp_t d, int e, const char *call)
{
#ifdef DDPC_HAVE_CUDA
    if (e == cudaSuccess)
        return DDPC_OK;
    return ddp_err(d, DDPC_ERR_CUDA, "%s on GPU %d: %s", call, d->device,
                   cudaGetErrorString((cudaError_t)e));
#else
    return ddp_err(d, DDPC_ERR_UNSUPPORTED, "%s: this ddpc was built without CUDA", call);
#endif
}

ddpc_status_t ddp_dev_alloc(ddpc_ddp_t d, void **p, size_t bytes, const char *what)
{
    *p = NULL;
#ifdef DDPC_HAVE_CUDA
    cudaError_t e = cudaSetDevice(d->device);
    if (e == cudaSuccess)
        e = cudaMalloc(p, bytes ? bytes : 1);
    if (e == cudaSuccess)
        e = cudaMemset(*p, 0, bytes ? bytes : 1);
    if (e != cudaSuccess)
        return ddp_err(d, DDPC_ERR_CUDA, "cannot allocate %s (%zu bytes) on GPU %d: %s", what,
                       bytes, d->device, cudaGetErrorString(e));
    return DDPC_OK;
#else
    return ddp_err(d, DDPC_ERR_UNSUPPORTED, "%s on a GPU: this ddpc was built without CUDA", what);
#endif
}

void ddp_dev_free(void *p)
{
#ifdef DDPC_HAVE_CUDA
    if (p)
        cudaFree(p);
#endif
}

/* ddpc_shard_t's values as DDPC_SHARD spells them */
static const char *const shard_names[] = {"none", "optim", "grads", NULL};

/* DDPC_* overrides of the engine's config. */
static ddpc_status_t read_env(ddpc_ddp_t d)
{
    static const char *const comp[] = {"none", "bf16", "fp16", NULL};
    static const char *const ov[] = {"0", "1", "auto", NULL}; /* 2: DDPC_OVERLAP_AUTO */
    static const char *const fold[] = {"0", "1", "auto", NULL}; /* 2: DDPC_FOLD_AUTO */
    static const char *const gather[] = {"step", "forward", NULL}; /* ddpc_shard_gather_t */
    ddpc_t rt = d->rt;
    double first = (double)d->cfg.first_bucket_bytes / 1048576.0;
    double cap = (double)d->cfg.bucket_bytes / 1048576.0;
    long unused = d->cfg.find_unused, bcast = d->cfg.broadcast_buffers != 0;
    int overlap = d->cfg.overlap == DDPC_OVERLAP_AUTO ? 2 : d->cfg.overlap != 0;
    int c = d->cfg.compress == DDPC_BF16 ? 1 : d->cfg.compress == DDPC_F16 ? 2 : 0;
    int sh = d->cfg.shard;
    int fo = d->cfg.fold_average == DDPC_FOLD_AUTO ? 2 : d->cfg.fold_average != 0;
    int ga = d->cfg.shard_gather;
    long stages = d->cfg.grad_stages > 0 ? d->cfg.grad_stages : 2; /* 0: the default */
    ddpc_status_t st;
    if ((st = ddpc_env_double(rt, "DDPC_FIRST_BUCKET_MB", 0, 1 << 20, &first)) ||
        (st = ddpc_env_double(rt, "DDPC_BUCKET_MB", 1.0 / 1024, 1 << 20, &cap)) ||
        (st = ddpc_env_long(rt, "DDPC_FIND_UNUSED", 0, 1, &unused)) ||
        (st = ddpc_env_long(rt, "DDPC_BROADCAST_BUFFERS", 0, 1, &bcast)) ||
        (st = ddpc_env_choice(rt, "DDPC_OVERLAP", ov, &overlap)) ||
        (st = ddpc_env_long(rt, "DDPC_CHECK_PARAMS", 0, 1000000000L, &d->check_every)) ||
        (st = ddpc_env_choice(rt, "DDPC_COMPRESS", comp, &c)) ||
        (st = ddpc_env_choice(rt, "DDPC_SHARD", shard_names, &sh)) ||
        (st = ddpc_env_choice(rt, "DDPC_FOLD_AVERAGE", fold, &fo)) ||
        (st = ddpc_env_choice(rt, "DDPC_SHARD_GATHER", gather, &ga)) ||
        (st = ddpc_env_long(rt, "DDPC_GRAD_STAGES", 1, 1024, &stages))) {
        snprintf(d->err, sizeof d->err, "%s", ddpc_last_error(rt));
        return st;
    }
    d->cfg.first_bucket_bytes = (size_t)(first * 1048576.0);
    d->cfg.bucket_bytes = (size_t)(cap * 1048576.0);
    d->cfg.find_unused = (int)unused;
    d->cfg.broadcast_buffers = (int)bcast;
    d->cfg.overlap = overlap == 2 ? DDPC_OVERLAP_AUTO : overlap;
    d->cfg.compress = c == 1 ? DDPC_BF16 : c == 2 ? DDPC_F16 : DDPC_F32;
    d->cfg.shard = sh;
    d->cfg.fold_average = fo == 2 ? DDPC_FOLD_AUTO : fo;
    d->cfg.shard_gather = ga;
    d->cfg.grad_stages = (int)stages;
    return DDPC_OK;
}

/* DDPC_OVERLAP=auto. Launching a bucket during backward pays where the
 * transfer takes time but little CPU: a network, a GPU's own engines. Between
 * ranks of one node a host all-reduce is copies and sums on the cores
 * themselves; when the ranks fill the node (at most one CPU each), the
 * progress thread can only take that time from backward's core, and
 * measured it is a loss (doc/ddp.md). Each rank decides from what it sees;
 * ddpc_ddp_build makes it the same on every rank (agree_settings). */
static void resolve_overlap(ddpc_ddp_t d, const ddpc_world_t *w)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) < cpus)
        cpus = CPU_COUNT(&set); /* bound: these are its own */
    else if (w->local_size > 0)
        cpus /= w->local_size; /* unbound: the node's share */
    const int one_node = w->num_nodes <= 1 || d->size <= w->local_size;
    d->cfg.overlap = d->device != DDPC_DEVICE_HOST || d->size == 1 || !one_node || cpus >= 2;
    ddpc_log(d->rt, DDPC_LOG_INFO,
             "ddp: overlap %s (auto): %s; DDPC_OVERLAP=0|1 sets it", d->cfg.overlap ? "on" : "off",
             d->device != DDPC_DEVICE_HOST ? "a device engine"
             : d->size == 1                  ? "one rank"
             : !one_node                     ? "ranks on more than one node"
             : cpus >= 2                     ? "a CPU to spare per rank"
                                             : "every rank of one node has at most one CPU: the "
                                               "all-reduce is CPU work that would take backward's core");
}

int ddpc_ddp_overlap(ddpc_ddp_t d) { return d ? d->cfg.overlap != 0 : 0; }

/* Collective (build): overlap off if any rank has it off, so that every rank
 * launches its buckets at the same point (in the wait, without overlap) and
 * the communicator may issue them as MPI's blocking calls; and the same
 * sharding everywhere (the arenas' shared windows are allocated by it, and
 * the collectives of a step follow it), or an error on every rank. */
static ddpc_status_t agree_settings(ddpc_ddp_t d)
{
    int32_t mine[2] = {d->cfg.overlap != 0, (int32_t)d->cfg.shard};
    int32_t *all = malloc((size_t)d->size * sizeof mine);
    if (!all)
        return ddp_err(d, DDPC_ERR_NOMEM, "overlap and sharding: cannot allocate");
    ddpc_status_t st = ddpc_comm_host_allgather(d->comm, mine, all, sizeof mine);
    int off = -1, other = -1;
    for (int r = 0; st == DDPC_OK && r < d->size; r++) {
        if (!all[2 * r] && off < 0)
            off = r;
        if (all[2 * r + 1] != mine[1] && other < 0)
            other = r;
    }
    const int theirs = other >= 0 ? all[2 * other + 1] : 0;
    free(all);
    if (st)
        return ddp_err(d, st, "overlap and sharding: %s", ddpc_last_error(d->rt));
    if (other >= 0)
        return ddp_err(d, DDPC_ERR_MISMATCH, "the ranks shard differently: DDPC_SHARD=%s here, "
                       "%s on rank %d (set the same sharding on every rank)",
                       shard_names[mine[1]],
                       theirs >= DDPC_SHARD_NONE && theirs <= DDPC_SHARD_GRADS ? shard_names[theirs]
                                                                               : "?",
                       other);
    if (off >= 0 && mine[0])
        ddpc_log(d->rt, DDPC_LOG_INFO, "ddp: overlap off, as on rank %d", off);
    d->cfg.overlap = off < 0;
    return DDPC_OK;
}

ddpc_status_t ddpc_ddp_create(ddpc_comm_t comm, const ddpc_ddp_config_t *cfg, ddpc_ddp_t *out)
{
    static const ddpc_ddp_config_t defaults = DDPC_DDP_CONFIG_INIT;
    if (!comm || !out)
        return DDPC_ERR_INVALID;
    *out = NULL;
    ddpc_ddp_t d = calloc(1, sizeof *d);
    if (!d)
        return DDPC_ERR_NOMEM;
    d->comm = comm;
    d->rt = ddpc_comm_runtime(comm);
    d->cfg = cfg ? *cfg : defaults;
    d->rank = ddpc_comm_rank(comm);
    d->size = ddpc_comm_size(comm);
    d->sync = 1;
    d->device = ddpc_comm_device(comm);
    /* the buckets follow the compute stream: the engine's, or else the one
     * the communicator already follows */
    d->stream = d->cfg.stream ? d->cfg.stream : ddpc_comm_stream(comm);
    if (d->device != DDPC_DEVICE_HOST)
        ddpc_comm_set_stream(comm, d->stream);
    const ddpc_world_t *w = ddpc_world(d->rt);
    snprintf(d->prefix, sizeof d->prefix, "ddpc[rank %d/%d %s]", d->rank, d->size, w->host);
    *out = d; /* so that ddpc_ddp_last_error works on failure */
    ddpc_status_t st = read_env(d);
    if (st == DDPC_OK && d->cfg.compress != DDPC_F32 && d->cfg.compress != DDPC_BF16 &&
        d->cfg.compress != DDPC_F16)
        st = ddp_err(d, DDPC_ERR_INVALID, "compress must be float32 (none), bfloat16 or float16, not %s",
                     ddpc_dtype_name(d->cfg.compress));
    if (st == DDPC_OK && d->cfg.bucket_bytes < 4)
        st = ddp_err(d, DDPC_ERR_INVALID, "bucket size of %zu bytes holds no float32",
                     d->cfg.bucket_bytes);
    if (st == DDPC_OK && (d->cfg.shard < DDPC_SHARD_NONE || d->cfg.shard > DDPC_SHARD_GRADS))
        st = ddp_err(d, DDPC_ERR_INVALID, "shard must be DDPC_SHARD_NONE, _OPTIM or _GRADS, not %d",
                     d->cfg.shard);
    if (st == DDPC_OK && d->cfg.shard_gather != DDPC_GATHER_STEP &&
        d->cfg.shard_gather != DDPC_GATHER_FORWARD)
        st = ddp_err(d, DDPC_ERR_INVALID, "shard_gather must be DDPC_GATHER_STEP or _FORWARD, "
                     "not %d", d->cfg.shard_gather);
    if (st == DDPC_OK && d->cfg.grad_stages > 1024)
        st = ddp_err(d, DDPC_ERR_INVALID, "grad_stages must be 1..1024 (0: 2), not %d",
                     d->cfg.grad_stages);
    if (st == DDPC_OK && d->cfg.shard == DDPC_SHARD_GRADS && d->cfg.compress != DDPC_F32)
        st = ddp_err(d, DDPC_ERR_UNSUPPORTED, "DDPC_SHARD=grads (ZeRO-2) reduces the gradients "
                     "in float32 only: not with DDPC_COMPRESS=%s (use DDPC_SHARD=optim, which "
                     "all-reduces the compressed buckets as without sharding)",
                     d->cfg.compress == DDPC_BF16 ? "bf16" : "fp16");
    if (st == DDPC_OK && d->cfg.overlap == DDPC_OVERLAP_AUTO)
        resolve_overlap(d, w);
    return st;
}

void ddpc_ddp_destroy(ddpc_ddp_t d)
{
    if (!d)
        return;
    const int dev = d->device != DDPC_DEVICE_HOST;
    if (d->built)
        ddp_gather_wait(d, -1);
    for (int b = 0; b < d->nbuckets; b++) {
        free(d->buckets[b].ag_work);
        if (d->buckets[b].work)
            ddpc_work_wait(d->buckets[b].work, -1);
        for (int k = 0; k < d->buckets[b].rs_n; k++)
            ddpc_work_wait(d->buckets[b].rs_work[k], -1);
        free(d->buckets[b].rs_work);
        if (dev)
            ddp_dev_free(d->buckets[b].wire);
        else
            free(d->buckets[b].wire);
    }
    if (dev) {
        ddpc_comm_synchronize(d->comm, -1); /* nothing of ours still in flight */
#ifdef DDPC_HAVE_CUDA
        /* the last step's unready count, read at no later wait */
        if (d->unready_pending && cudaEventSynchronize((cudaEvent_t)d->ev_unready) == cudaSuccess &&
            d->h_unready[1] > 0)
            ddpc_log(d->rt, DDPC_LOG_ERROR,
                     "ddp: in the last step, %d parameter(s) had no gradient on some rank%s%s",
                     d->h_unready[1], d->prev_unready ? "; here: " : "",
                     d->prev_unready ? d->prev_names : "");
#endif
        ddp_dev_free(d->param_arena);
        ddp_dev_free(d->grad_arena);
        ddp_dev_free(d->buf_arena);
        ddp_dev_free(d->d_unready);
#ifdef DDPC_HAVE_CUDA
        if (d->h_unready)
            cudaFreeHost(d->h_unready);
        if (d->ev_unready)
            cudaEventDestroy((cudaEvent_t)d->ev_unready);
#endif
    } else {
        ddpc_comm_mem_free(d->comm, d->param_arena); /* a window, or its own memory */
        ddpc_comm_mem_free(d->comm, d->grad_arena);
        free(d->buf_arena);
    }
    free(d->buckets);
    free(d->stage_holder);
    free(d->params);
    free(d->bufs);
    free(d);
}

/* A parameter or a buffer (kind) appended to its list; names are unique
 * across both lists (they are a state_dict's keys). */
static ddpc_status_t add_entry(ddpc_ddp_t d, int buffer, const char *name, int ndim,
                               const int64_t *shape, int *index)
{
    const char *kind = buffer ? "buffer" : "parameter";
    if (!d)
        return DDPC_ERR_INVALID;
    if (d->built)
        return ddp_err(d, DDPC_ERR_STATE, "add_%s(\"%s\") after ddpc_ddp_build", buffer ? "buffer" : "param",
                       name ? name : "");
    if (!name || !*name || strlen(name) >= DDP_NAME_MAX)
        return ddp_err(d, DDPC_ERR_INVALID, "%s name must be 1..%d bytes", kind, DDP_NAME_MAX - 1);
    if (ndim < 0 || ndim > DDP_MAX_DIMS || (ndim && !shape))
        return ddp_err(d, DDPC_ERR_INVALID, "%s \"%s\": ndim %d, expected 0..%d with a shape",
                       kind, name, ndim, DDP_MAX_DIMS);
    for (int i = 0; i < d->nparams; i++)
        if (!strcmp(d->params[i].name, name))
            return ddp_err(d, DDPC_ERR_INVALID, "%s \"%s\": a parameter has that name (index %d)",
                           kind, name, i);
    for (int i = 0; i < d->nbufs; i++)
        if (!strcmp(d->bufs[i].name, name))
            return ddp_err(d, DDPC_ERR_INVALID, "%s \"%s\": a buffer has that name (index %d)",
                           kind, name, i);
    size_t numel = 1;
    for (int k = 0; k < ndim; k++) {
        if (shape[k] < 0 || (shape[k] && numel > SIZE_MAX / 8 / (size_t)shape[k]))
            return ddp_err(d, DDPC_ERR_INVALID, "%s \"%s\": extent %d is %lld", kind, name, k,
                           (long long)shape[k]);
        numel *= (size_t)shape[k];
    }
    ddp_param_t **list = buffer ? &d->bufs : &d->params;
    int *n = buffer ? &d->nbufs : &d->nparams, *cap = buffer ? &d->bufcap : &d->cap;
    size_t *total = buffer ? &d->buf_numel : &d->numel;
    if (*n == *cap) {
        int c = *cap ? 2 * *cap : 16;
        ddp_param_t *p = realloc(*list, (size_t)c * sizeof *p);
        if (!p)
            return ddp_err(d, DDPC_ERR_NOMEM, "cannot register %d %ss", c, kind);
        *list = p;
        *cap = c;
    }
    ddp_param_t *p = &(*list)[*n];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    for (int k = 0; k < ndim; k++)
        p->shape[k] = shape[k];
    p->numel = numel;
    p->offset = *total;
    p->bucket = -1;
    *total += numel;
    if (index)
        *index = *n;
    (*n)++;
    return DDPC_OK;
}

ddpc_status_t ddpc_ddp_add_param(ddpc_ddp_t d, const char *name, int ndim, const int64_t *shape,
                                 int *index)
{
    return add_entry(d, 0, name, ndim, shape, index);
}

ddpc_status_t ddpc_ddp_add_buffer(ddpc_ddp_t d, const char *name, int ndim, const int64_t *shape,
                                  int *index)
{
    return add_entry(d, 1, name, ndim, shape, index);
}

/* What ranks compare at build: name, dtype, shape of each parameter. */
typedef struct {
    char name[DDP_NAME_MAX];
    int64_t ndim, dtype, shape[DDP_MAX_DIMS];
} ddp_desc_t;

static void describe(const ddp_param_t *p, ddp_desc_t *o)
{
    memset(o, 0, sizeof *o);
    memcpy(o->name, p->name, sizeof o->name);
    o->ndim = p->ndim;
    o->dtype = DDPC_F32;
    memcpy(o->shape, p->shape, sizeof o->shape);
}

static void shape_str(const ddp_desc_t *d, char *s, size_t n)
{
    int k = snprintf(s, n, "%s[", ddpc_dtype_name((ddpc_dtype_t)d->dtype));
    for (int i = 0; i < d->ndim && k > 0 && (size_t)k < n; i++)
        k += snprintf(s + k, n - (size_t)k, "%s%lld", i ? ", " : "", (long long)d->shape[i]);
    if (k > 0 && (size_t)k < n)
        snprintf(s + k, n - (size_t)k, "]");
}

/* Collective: every rank compares its list (the parameters, then the
 * buffers: kind) with rank 0's; the first difference on any rank fails
 * every rank with the same story. */
static ddpc_status_t verify_list(ddpc_ddp_t d, const ddp_param_t *list, int count, const char *kind)
{
    int64_t n0 = count;
    ddpc_status_t st = ddpc_comm_host_bcast(d->comm, &n0, sizeof n0, 0);
    if (st)
        return ddp_err(d, st, "model check: %s", ddpc_last_error(d->rt));
    size_t n = (size_t)(n0 < count ? n0 : count);
    /* rank 0's descriptors of the common prefix (a count mismatch is still
     * named by its first extra parameter) */
    size_t nb = (size_t)(n0 > 0 ? n0 : 1);
    ddp_desc_t *ref = calloc(nb, sizeof *ref);
    if (!ref)
        return ddp_err(d, DDPC_ERR_NOMEM, "model check: cannot allocate %zu descriptors", nb);
    if (d->rank == 0)
        for (int i = 0; i < count; i++)
            describe(&list[i], &ref[i]);
    st = ddpc_comm_host_bcast(d->comm, ref, (size_t)n0 * sizeof *ref, 0);
    if (st) {
        free(ref);
        return ddp_err(d, st, "model check: %s", ddpc_last_error(d->rt));
    }
    /* first index where this rank differs; INT64_MAX if none */
    int64_t mine = INT64_MAX;
    for (size_t i = 0; i < n && mine == INT64_MAX; i++) {
        ddp_desc_t me;
        describe(&list[i], &me);
        if (memcmp(&me, &ref[i], sizeof me))
            mine = (int64_t)i;
    }
    if (mine == INT64_MAX && n0 != count)
        mine = (int64_t)n;
    int64_t *firsts = malloc((size_t)d->size * sizeof *firsts);
    if (!firsts) {
        free(ref);
        return ddp_err(d, DDPC_ERR_NOMEM, "model check: cannot allocate");
    }
    st = ddpc_comm_host_allgather(d->comm, &mine, firsts, sizeof mine);
    if (st) {
        free(ref);
        free(firsts);
        return ddp_err(d, st, "model check: %s", ddpc_last_error(d->rt));
    }
    int bad = -1;
    for (int r = 0; r < d->size; r++)
        if (firsts[r] != INT64_MAX && (bad < 0 || firsts[r] < firsts[bad]))
            bad = r;
    if (bad < 0) {
        free(ref);
        free(firsts);
        return DDPC_OK;
    }
    int64_t i = firsts[bad];
    char theirs[160] = "", ours[160] = "";
    if (i < n0)
        shape_str(&ref[i], theirs, sizeof theirs);
    if (bad == d->rank) {
        ddp_desc_t me;
        if (i < count) {
            describe(&list[i], &me);
            shape_str(&me, ours, sizeof ours);
        }
        st = ddp_err(d, DDPC_ERR_MISMATCH,
                     "ranks registered different models: %s %lld is \"%s\" %s on this rank "
                     "(%d) but \"%s\" %s on rank 0 (%d %ss here, %lld on rank 0)",
                     kind, (long long)i, i < count ? list[i].name : "(none)", ours, d->rank,
                     i < n0 ? ref[i].name : "(none)", theirs, count, kind, (long long)n0);
    } else {
        st = ddp_err(d, DDPC_ERR_MISMATCH,
                     "ranks registered different models: rank %d differs from rank 0 first at "
                     "%s %lld (\"%s\" %s on rank 0); see rank %d's message",
                     bad, kind, (long long)i, i < n0 ? ref[i].name : "(none)", theirs, bad);
    }
    free(ref);
    free(firsts);
    return st;
}

static ddpc_status_t verify_across_ranks(ddpc_ddp_t d)
{
    ddpc_status_t st = verify_list(d, d->params, d->nparams, "parameter");
    return st ? st : verify_list(d, d->bufs, d->nbufs, "buffer");
}

ddpc_status_t ddp_plan_buckets(ddpc_ddp_t d)
{
    free(d->buckets);
    d->buckets = NULL;
    d->nbuckets = 0;
    if (d->nparams == 0)
        return DDPC_OK;
    d->buckets = calloc((size_t)d->nparams, sizeof *d->buckets); /* at most one per param */
    if (!d->buckets)
        return ddp_err(d, DDPC_ERR_NOMEM, "cannot allocate the bucket plan");
    /* Walk backwards (the order backward produces gradients); close a bucket
     * once it reaches its limit: the first bucket's is small so the first
     * all-reduce starts early. */
    size_t limit = d->cfg.first_bucket_bytes, bytes = 0;
    ddp_bucket_t *b = NULL;
    for (int i = d->nparams - 1; i >= 0; i--) {
        if (!b) {
            b = &d->buckets[d->nbuckets++];
            b->last_param = i;
            bytes = 0;
        }
        b->first_param = i;
        d->params[i].bucket = (int)(b - d->buckets);
        bytes += d->params[i].numel * sizeof(float);
        if (bytes >= limit) {
            b = NULL;
            limit = d->cfg.bucket_bytes;
        }
    }
    for (int k = 0; k < d->nbuckets; k++) {
        ddp_bucket_t *bk = &d->buckets[k];
        const ddp_param_t *lo = &d->params[bk->first_param], *hi = &d->params[bk->last_param];
        bk->offset = lo->offset;
        bk->numel = hi->offset + hi->numel - lo->offset;
    }
    return DDPC_OK;
}

ddpc_status_t ddpc_ddp_build(ddpc_ddp_t d)
{
    if (!d)
        return DDPC_ERR_INVALID;
    if (d->built)
        return ddp_err(d, DDPC_ERR_STATE, "ddpc_ddp_build called twice");
    ddpc_status_t st = verify_across_ranks(d);
    if (st == DDPC_OK)
        st = agree_settings(d);
    if (st)
        return st;
    /* shards: equal, aligned slices of an arena padded to size * shard_len */
    size_t total = d->numel;
    d->shard_len = d->numel;
    d->shard_off = 0;
    if (d->cfg.shard != DDPC_SHARD_NONE) {
        size_t per = (d->numel + (size_t)d->size - 1) / (size_t)d->size;
        d->shard_len = (per + DDP_SHARD_ALIGN - 1) / DDP_SHARD_ALIGN * DDP_SHARD_ALIGN;
        d->shard_off = (size_t)d->rank * d->shard_len;
        total = d->shard_len * (size_t)d->size;
    }
    size_t bytes = (total ? total : 1) * sizeof(float);
    bytes = (bytes + 63) / 64 * 64;
    /* the buckets first: shard grads sizes its stages by the largest */
    if ((st = ddp_plan_buckets(d)) != DDPC_OK)
        return st;
    size_t gbytes = bytes; /* the gradient arena */
    const int staged = d->cfg.shard == DDPC_SHARD_GRADS;
    if (staged) {
        d->stage_len = DDP_SHARD_ALIGN;
        for (int b = 0; b < d->nbuckets; b++)
            if (d->buckets[b].numel > d->stage_len)
                d->stage_len = d->buckets[b].numel;
        d->stage_len = (d->stage_len + DDP_SHARD_ALIGN - 1) / DDP_SHARD_ALIGN * DDP_SHARD_ALIGN;
        d->nstages = d->nbuckets < d->cfg.grad_stages ? d->nbuckets : d->cfg.grad_stages;
        if (d->nstages < 1)
            d->nstages = 1;
        gbytes = (d->shard_len + ((size_t)d->nstages + (d->cfg.find_unused != 0)) * d->stage_len) *
                 sizeof(float);
        if (!(d->stage_holder = malloc((size_t)d->nstages * sizeof(int))))
            return ddp_err(d, DDPC_ERR_NOMEM, "cannot allocate the stage table");
        for (int k = 0; k < d->nstages; k++)
            d->stage_holder[k] = -1;
        d->acc_fresh = 1;
    }
    size_t bbytes = ((d->buf_numel ? d->buf_numel : 1) * sizeof(float) + 63) / 64 * 64;
    const int dev = d->device != DDPC_DEVICE_HOST;
    if (dev) {
        /* everything a step touches, now: NCCL kernels spin while waiting
         * for peers, and a cudaMalloc inside a step could deadlock them */
        if ((st = ddp_dev_alloc(d, (void **)&d->param_arena, bytes, "the parameter arena")) ||
            (st = ddp_dev_alloc(d, (void **)&d->grad_arena, gbytes, "the gradient arena")) ||
            (st = ddp_dev_alloc(d, (void **)&d->buf_arena, bbytes, "the buffer arena")) ||
            (st = ddp_dev_alloc(d, (void **)&d->d_unready, sizeof(int32_t), "a counter")))
            return st;
#ifdef DDPC_HAVE_CUDA
        cudaEvent_t ev;
        if ((st = ddp_cuda_check(d, cudaHostAlloc((void **)&d->h_unready, 2 * sizeof(int32_t),
                                                  cudaHostAllocDefault), "cudaHostAlloc")) ||
            (st = ddp_cuda_check(d, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming),
                                 "cudaEventCreate")))
            return st;
        d->ev_unready = ev;
#endif
    } else {
        /* the gradients from the communicator: where its ranks share a node,
           a shared window that the buckets are all-reduced in (mpi.c) */
        if ((st = ddpc_comm_mem_alloc(d->comm, gbytes, (void **)&d->grad_arena)))
            return ddp_err(d, st, "the gradient arena: %s", ddpc_last_error(d->rt));
        /* sharded: the parameters too, which the step's all-gather then
           copies from the other ranks' windows (mpi.c, shm_allgather) */
        if (d->cfg.shard != DDPC_SHARD_NONE && d->size > 1) {
            if ((st = ddpc_comm_mem_alloc(d->comm, bytes, (void **)&d->param_arena)))
                return ddp_err(d, st, "the parameter arena: %s", ddpc_last_error(d->rt));
        } else {
            d->param_arena = aligned_alloc(64, bytes);
        }
        d->buf_arena = aligned_alloc(64, bbytes);
        if (!d->param_arena || !d->buf_arena)
            return ddp_err(d, DDPC_ERR_NOMEM, "cannot allocate an arena of %zu bytes and one of %zu",
                           bytes, bbytes);
        memset(d->param_arena, 0, bytes);
        memset(d->buf_arena, 0, bbytes);
    }
    d->grad_shard = staged ? d->grad_arena : d->grad_arena + d->shard_off;
    if (staged) {
        d->stages = d->grad_arena + d->shard_len;
        if (d->cfg.find_unused)
            d->zero_stage = d->stages + (size_t)d->nstages * d->stage_len;
    }
    if (d->cfg.compress != DDPC_F32)
        for (int b = 0; b < d->nbuckets; b++) {
            size_t wb = (d->buckets[b].numel ? d->buckets[b].numel : 1) * 2;
            if (dev) {
                if ((st = ddp_dev_alloc(d, (void **)&d->buckets[b].wire, wb,
                                        "a compression buffer")))
                    return st;
            } else if (!(d->buckets[b].wire = malloc(wb))) {
                return ddp_err(d, DDPC_ERR_NOMEM, "cannot allocate the compression buffers");
            }
        }
    if (d->cfg.shard == DDPC_SHARD_GRADS)
        for (int b = 0; b < d->nbuckets; b++)
            if (!(d->buckets[b].rs_work = calloc((size_t)d->size, sizeof(ddpc_work_t))))
                return ddp_err(d, DDPC_ERR_NOMEM, "cannot allocate the reduce handles");
    /* a device engine's broadcasts are stream-ordered (the compute stream waits
       for a bucket's at its param_wait): no core is needed to spare */
    d->gather_forward = d->cfg.shard != DDPC_SHARD_NONE && d->size > 1 &&
                        d->cfg.shard_gather == DDPC_GATHER_FORWARD && (dev || d->cfg.overlap == 1);
    if (d->gather_forward)
        for (int b = 0; b < d->nbuckets; b++)
            if (!(d->buckets[b].ag_work = calloc((size_t)d->size, sizeof(ddpc_work_t))))
                return ddp_err(d, DDPC_ERR_NOMEM, "cannot allocate the gather handles");
    for (int b = 0; b < d->nbuckets; b++)
        d->buckets[b].pending = d->buckets[b].last_param - d->buckets[b].first_param + 1;
    d->built = 1;
    char where[32] = "the host";
    if (dev)
        snprintf(where, sizeof where, "GPU %d", d->device);
    char sh[224] = "", stg[64] = "", bufs[64] = "";
    if (staged)
        snprintf(stg, sizeof stg, "; gradients through %d stage%s of %zu floats", d->nstages,
                 d->nstages > 1 ? "s" : "", d->stage_len);
    if (d->cfg.shard != DDPC_SHARD_NONE)
        snprintf(sh, sizeof sh, ", %s sharded (floats [%zu, %zu) here, gathered %s%s)",
                 d->cfg.shard == DDPC_SHARD_GRADS ? "gradients and optimizer state"
                                                   : "optimizer state",
                 d->shard_off, d->shard_off + d->shard_len,
                 d->gather_forward ? "by bucket in the forward" : "at the step's end", stg);
    if (d->nbufs)
        snprintf(bufs, sizeof bufs, ", %d buffers (%zu elements)", d->nbufs, d->buf_numel);
    ddpc_log(d->rt, DDPC_LOG_INFO, "ddp: %d parameters, %zu elements, %d buckets (first %zu B, cap %zu B)%s%s%s, arenas on %s",
             d->nparams, d->numel, d->nbuckets, d->cfg.first_bucket_bytes, d->cfg.bucket_bytes,
             d->cfg.compress != DDPC_F32 ? ", compressed" : "", sh, bufs, where);
    return DDPC_OK;
}

ddpc_status_t ddpc_ddp_broadcast_params(ddpc_ddp_t d)
{
    if (!d || !d->built)
        return d ? ddp_err(d, DDPC_ERR_STATE, "broadcast_params before build") : DDPC_ERR_INVALID;
    ddpc_status_t st = ddp_gather_wait(d, -1);
    if (st)
        return st;
    st = ddpc_broadcast(d->comm, d->param_arena, d->numel, DDPC_F32, 0);
    if (st)
        return ddp_err(d, st, "initial broadcast: %s", ddpc_last_error(d->rt));
    return d->nbufs ? ddpc_ddp_broadcast_buffers(d) : DDPC_OK;
}

ddpc_status_t ddpc_ddp_broadcast_buffers(ddpc_ddp_t d)
{
    if (!d || !d->built)
        return d ? ddp_err(d, DDPC_ERR_STATE, "broadcast_buffers before build") : DDPC_ERR_INVALID;
    if (!d->buf_numel || d->size == 1)
        return DDPC_OK;
    ddpc_comm_tag_next(d->comm, "ddp buffers");
    ddpc_status_t st = ddpc_broadcast(d->comm, d->buf_arena, d->buf_numel, DDPC_F32, 0);
    return st ? ddp_err(d, st, "broadcast of the %d buffers (%zu floats): %s", d->nbufs,
                        d->buf_numel, ddpc_last_error(d->rt))
              : DDPC_OK;
}

static void info_of(const ddp_param_t *p, int bucket, ddpc_param_info_t *info)
{
    memset(info, 0, sizeof *info);
    info->name = p->name;
    info->ndim = p->ndim;
    memcpy(info->shape, p->shape, sizeof info->shape);
    info->numel = p->numel;
    info->offset = p->offset;
    info->dtype = DDPC_F32;
    info->bucket = bucket;
}

int ddpc_ddp_num_params(ddpc_ddp_t d) { return d ? d->nparams : 0; }

ddpc_status_t ddpc_ddp_param_info(ddpc_ddp_t d, int i, ddpc_param_info_t *info)
{
    if (!d || !info || i < 0 || i >= d->nparams)
        return d ? ddp_err(d, DDPC_ERR_INVALID, "no parameter %d (have %d)", i, d->nparams)
                 : DDPC_ERR_INVALID;
    info_of(&d->params[i], d->built ? d->params[i].bucket : -1, info);
    return DDPC_OK;
}

int ddpc_ddp_find_param(ddpc_ddp_t d, const char *name)
{
    for (int i = 0; d && name && i < d->nparams; i++)
        if (!strcmp(d->params[i].name, name))
            return i;
    return -1;
}

float *ddpc_ddp_param(ddpc_ddp_t d, int i)
{
    return d && d->built && i >= 0 && i < d->nparams ? d->param_arena + d->params[i].offset : NULL;
}

float *ddpc_ddp_grad(ddpc_ddp_t d, int i)
{
    if (!d || !d->built || i < 0 || i >= d->nparams)
        return NULL;
    const ddp_param_t *p = &d->params[i];
    if (d->stages) { /* shard grads: the bucket's stage, taken for this micro-step */
        float *s = ddp_stage_take(d, p->bucket);
        return s ? s + (p->offset - d->buckets[p->bucket].offset) : NULL;
    }
    ddp_settle_average(d);
    return d->grad_arena + p->offset;
}

float *ddpc_ddp_params(ddpc_ddp_t d, size_t *numel)
{
    if (numel)
        *numel = d ? d->numel : 0;
    return d && d->built ? d->param_arena : NULL;
}

float *ddpc_ddp_grads(ddpc_ddp_t d, size_t *numel)
{
    if (numel)
        *numel = d && !d->stages ? d->numel : 0;
    if (!d || !d->built)
        return NULL;
    if (d->stages) {
        ddp_err(d, DDPC_ERR_STATE, "DDPC_SHARD=grads keeps no whole gradient arena: write "
                "through ddpc_ddp_grad(p) in each micro-step, read the averaged slice with "
                "ddpc_ddp_grad_slice");
        return NULL;
    }
    ddp_settle_average(d);
    return d->grad_arena;
}

size_t ddpc_ddp_grad_bytes(ddpc_ddp_t d)
{
    if (!d || !d->built)
        return 0;
    if (d->stages)
        return (d->shard_len + ((size_t)d->nstages + (d->zero_stage != NULL)) * d->stage_len) *
               sizeof(float);
    return (d->cfg.shard == DDPC_SHARD_NONE ? d->numel : d->shard_len * (size_t)d->size) *
           sizeof(float);
}

float *ddpc_ddp_grad_slice(ddpc_ddp_t d, size_t *offset, size_t *numel)
{
    size_t off = 0, n = d ? d->numel : 0;
    if (d && d->stages) {
        off = d->shard_off < d->numel ? d->shard_off : d->numel;
        n = d->numel - off < d->shard_len ? d->numel - off : d->shard_len;
    }
    if (offset)
        *offset = off;
    if (numel)
        *numel = n;
    if (!d || !d->built)
        return NULL;
    ddp_settle_average(d);
    return d->stages ? d->grad_shard : d->grad_arena;
}

int ddpc_ddp_num_buffers(ddpc_ddp_t d) { return d ? d->nbufs : 0; }

ddpc_status_t ddpc_ddp_buffer_info(ddpc_ddp_t d, int i, ddpc_param_info_t *info)
{
    if (!d || !info || i < 0 || i >= d->nbufs)
        return d ? ddp_err(d, DDPC_ERR_INVALID, "no buffer %d (have %d)", i, d->nbufs)
                 : DDPC_ERR_INVALID;
    info_of(&d->bufs[i], -1, info);
    return DDPC_OK;
}

int ddpc_ddp_find_buffer(ddpc_ddp_t d, const char *name)
{
    for (int i = 0; d && name && i < d->nbufs; i++)
        if (!strcmp(d->bufs[i].name, name))
            return i;
    return -1;
}

float *ddpc_ddp_buffer(ddpc_ddp_t d, int i)
{
    return d && d->built && i >= 0 && i < d->nbufs ? d->buf_arena + d->bufs[i].offset : NULL;
}

float *ddpc_ddp_buffers(ddpc_ddp_t d, size_t *numel)
{
    if (numel)
        *numel = d ? d->buf_numel : 0;
    return d && d->built ? d->buf_arena : NULL;
}

int ddpc_ddp_num_buckets(ddpc_ddp_t d) { return d && d->built ? d->nbuckets : 0; }

ddpc_status_t ddpc_ddp_bucket(ddpc_ddp_t d, int b, size_t *offset, size_t *numel)
{
    if (!d || !d->built || b < 0 || b >= d->nbuckets)
        return d ? ddp_err(d, DDPC_ERR_INVALID, "no bucket %d", b) : DDPC_ERR_INVALID;
    if (offset)
        *offset = d->buckets[b].offset;
    if (numel)
        *numel = d->buckets[b].numel;
    return DDPC_OK;
}

/* ------------------------------------------------------------------ replica check */

/* CRC-32 of this rank's parameter arena; a device arena in pieces through a
 * host buffer, after the engine's stream. */
static ddpc_status_t params_crc(ddpc_ddp_t d, uint32_t *crc)
{
    const size_t bytes = d->numel * sizeof(float);
    *crc = 0;
    if (d->device == DDPC_DEVICE_HOST) {
        *crc = ddpc_crc32(0, d->param_arena, bytes);
        return DDPC_OK;
    }
#ifdef DDPC_HAVE_CUDA
    const size_t piece = (size_t)4 << 20;
    char *h = malloc(piece);
    if (!h)
        return ddp_err(d, DDPC_ERR_NOMEM, "check_params: no memory for a %zu-byte buffer", piece);
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)d->stream);
    for (size_t off = 0; e == cudaSuccess && off < bytes; off += piece) {
        size_t n = bytes - off < piece ? bytes - off : piece;
        e = cudaMemcpy(h, (const char *)d->param_arena + off, n, cudaMemcpyDeviceToHost);
        if (e == cudaSuccess)
            *crc = ddpc_crc32(*crc, h, n);
    }
    free(h);
    return e == cudaSuccess ? DDPC_OK : ddp_cuda_check(d, e, "check_params: reading the parameters");
#else
    return ddp_err(d, DDPC_ERR_UNSUPPORTED, "check_params: device arena in a build without CUDA");
#endif
}

ddpc_status_t ddpc_ddp_check_params(ddpc_ddp_t d)
{
    if (!d)
        return DDPC_ERR_INVALID;
    if (!d->built)
        return ddp_err(d, DDPC_ERR_STATE, "check_params before ddpc_ddp_build");
    if (ddp_capturing(d))
        return ddp_err(d, DDPC_ERR_STATE, "check_params while the engine's stream is being "
                       "captured into a CUDA graph: it reads the parameters on the host; call it "
                       "between replays");
    ddpc_status_t gst = ddp_gather_wait(d, -1);
    if (gst)
        return gst;
    uint32_t mine = 0;
    ddpc_status_t st = params_crc(d, &mine);
    /* a rank that cannot hash still joins the exchange, with a value that
     * says so, so that no rank waits for it */
    uint64_t v = st == DDPC_OK ? mine : UINT64_MAX;
    uint64_t *all = calloc((size_t)d->size, sizeof *all);
    if (!all)
        return ddp_err(d, DDPC_ERR_NOMEM, "check_params: no memory for %d hashes", d->size);
    ddpc_status_t xs = ddpc_comm_host_allgather(d->comm, &v, all, sizeof v);
    if (xs != DDPC_OK) {
        free(all);
        return ddp_err(d, xs, "check_params: the exchange of the hashes failed: %s",
                       ddpc_last_error(d->rt));
    }
    if (st != DDPC_OK) {
        free(all);
        return st; /* its message is set */
    }
    const uint64_t h0 = all[0];
    char list[512] = "";
    int ndiff = 0, broken = -1;
    for (int r = 0; r < d->size; r++) {
        if (all[r] == UINT64_MAX && broken < 0)
            broken = r;
        size_t k = strlen(list);
        if (r > 0 && all[r] != h0 && ndiff++ < 8 && k < sizeof list - 32)
            snprintf(list + k, sizeof list - k, "%s rank %d %08llx", ndiff > 1 ? "," : "", r,
                     (unsigned long long)all[r]);
    }
    free(all);
    if (broken >= 0)
        return ddp_err(d, DDPC_ERR_STATE, "check_params: rank %d could not hash its parameters",
                       broken);
    if (ndiff == 0)
        return DDPC_OK;
    return ddp_err(d, DDPC_ERR_MISMATCH,
                   "check_params: the parameters differ across ranks: CRC-32 of the %zu "
                   "parameters on rank 0 %08llx;%s%s (%d of %d ranks differ from rank 0). The "
                   "replicas diverged: a rank-dependent or nondeterministic update, parameters "
                   "changed outside the engine, or memory corruption; DDPC_CHECK_PARAMS=1 "
                   "finds the first step",
                   d->numel, (unsigned long long)h0, list, ndiff > 8 ? ", ..." : "", ndiff,
                   d->size);
}

