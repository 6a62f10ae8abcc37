/* SPDX-License-Identifier: BSD-3-Clause */
/* ckpt.c: the checkpoint handle: options, user attributes and tensors, the
 * list of tensors a checkpoint holds, and save/wait: rank 0 writes (now, or
 * from a snapshot in a background thread) and every rank gets rank 0's
 * status. The file writer is write.c, loading is load.c. */
#include "config.h"
#include "ckpt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef DDPC_HAVE_CUDA
#include <cuda_runtime.h>
#endif

const char *ddpc_ckpt_last_error(ddpc_ckpt_t ck) { return ck ? ck->err : "no checkpoint handle"; }

const char *ddpc_ckpt_dir(ddpc_ckpt_t ck) { return ck ? ck->dir : ""; }

const char *ck_body(ddpc_ckpt_t ck, const char *msg)
{
    size_t n = strlen(ck->prefix);
    return strncmp(msg, ck->prefix, n) || msg[n] != ' ' ? msg : msg + n + 1;
}

/* DDPC_CKPT_* overrides of the config. */
static ddpc_status_t read_env(ddpc_ckpt_t ck)
{
    ddpc_t rt = ck->rt;
    long keep = ck->cfg.keep, async = ck->cfg.async;
    double chunk = (double)ck->cfg.chunk_bytes / 1048576.0;
    ddpc_status_t st;
    if ((st = ddpc_env_long(rt, "DDPC_CKPT_KEEP", 0, 1000000, &keep)) ||
        (st = ddpc_env_long(rt, "DDPC_CKPT_ASYNC", 0, 1, &async)) ||
        (st = ddpc_env_double(rt, "DDPC_CKPT_CHUNK_MB", 1.0 / 1024, 1 << 20, &chunk)) ||
        (st = ddpc_env_double(rt, "DDPC_CKPT_TEST_STALL", 0, 3600, &ck->stall_s)) ||
        (st = ddpc_env_double(rt, "DDPC_CKPT_LOCK_WAIT", 0, 86400, &ck->lock_wait_s))) {
        snprintf(ck->err, sizeof ck->err, "%s", ddpc_last_error(rt));
        return st;
    }
    ck->cfg.keep = (int)keep;
    ck->cfg.async = (int)async;
    ck->cfg.chunk_bytes = (size_t)(chunk * 1048576.0);
    const char *dir = getenv("DDPC_CKPT_DIR");
    if (dir && *dir)
        ck->cfg.dir = dir;
    if (!ck->cfg.dir || !*ck->cfg.dir)
        return ck_err(ck, DDPC_ERR_INVALID, "no checkpoint directory: set dir in the config or "
                                            "DDPC_CKPT_DIR");
    if (strlen(ck->cfg.dir) >= CK_DIR_MAX)
        return ck_err(ck, DDPC_ERR_INVALID, "checkpoint directory name longer than %d bytes",
                      CK_DIR_MAX - 1);
    if (ck->cfg.keep < 0 || ck->cfg.chunk_bytes < sizeof(float))
        return ck_err(ck, DDPC_ERR_INVALID, "config: expected keep >= 0 and chunk_bytes >= 4");
    snprintf(ck->dir, sizeof ck->dir, "%s", ck->cfg.dir);
    ck->cfg.dir = ck->dir;
    return DDPC_OK;
}

/* ------------------------------------------------------------------ device engines */

/* The shadow and the bounce buffer, allocated with the handle (never in a
 * step: NCCL kernels may be spinning then). */
static ddpc_status_t device_buffers(ddpc_ckpt_t ck)
{
#ifdef DDPC_HAVE_CUDA
    size_t numel = 0;
    ddpc_ddp_params(ck->ddp, &numel);
    size_t nbuf = 0;
    ddpc_ddp_buffers(ck->ddp, &nbuf);
    ck->shadow_numel = (size_t)(1 + ddpc_optim_num_states(ck->opt)) * (numel ? numel : 1) + nbuf;
    ck->bounce_numel = ck->cfg.chunk_bytes / sizeof(float);
    if (ck->bounce_numel > ck->shadow_numel)
        ck->bounce_numel = ck->shadow_numel;
    CK_CU(cudaSetDevice(ck->device), "checkpoint buffers");
    CK_CU(cudaHostAlloc((void **)&ck->shadow, ck->shadow_numel * sizeof(float),
                        cudaHostAllocDefault), "checkpoint buffers");
    CK_CU(cudaMalloc((void **)&ck->bounce, ck->bounce_numel * sizeof(float)),
          "checkpoint buffers");
    ck_note_mem(ck);
    return DDPC_OK;
#else
    return ck_err(ck, DDPC_ERR_UNSUPPORTED, "device engine in a build without CUDA");
#endif
}

static ddpc_status_t shadow_copy(ddpc_ckpt_t ck, int to_host)
{
    if (ck->device == DDPC_DEVICE_HOST)
        return DDPC_OK;
#ifdef DDPC_HAVE_CUDA
    cudaStream_t s = (cudaStream_t)ddpc_ddp_stream(ck->ddp);
    CK_CU(cudaSetDevice(ck->device), "checkpoint copy");
    size_t numel = 0;
    ddpc_ddp_params(ck->ddp, &numel);
    const int ns = ddpc_optim_num_states(ck->opt);
    const int sharded = ck_sharded(ck, NULL, NULL, NULL);
    for (int k = -1; k <= ns; k++) {
        /* arena k (-1: the parameters, ns: the buffers) on the device, and its place in the
           shadow; a sharded state goes through shard.c (gathered into rank 0's shadow, loaded
           window by window) */
        if (sharded && k >= 0 && k < ns)
            continue;
        size_t n = numel;
        float *dev = k < 0 ? ddpc_ddp_params(ck->ddp, NULL)
                     : k < ns ? ddpc_optim_state(ck->opt, k, NULL) : ddpc_ddp_buffers(ck->ddp, &n);
        float *host = ck->shadow + (size_t)(k + 1) * numel;
        if (!n)
            continue;
        if (to_host)
            CK_CU(cudaMemcpyAsync(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost, s),
                  "checkpoint snapshot");
        else
            CK_CU(cudaMemcpyAsync(dev, host, n * sizeof(float), cudaMemcpyHostToDevice, s),
                  "checkpoint restore");
    }
    CK_CU(cudaStreamSynchronize(s), to_host ? "checkpoint snapshot" : "checkpoint restore");
    return DDPC_OK;
#else
    return DDPC_ERR_UNSUPPORTED;
#endif
}

ddpc_status_t ck_shadow_pull(ddpc_ckpt_t ck) { return shadow_copy(ck, 1); }
ddpc_status_t ck_shadow_push(ddpc_ckpt_t ck) { return shadow_copy(ck, 0); }


ddpc_status_t ck_bcast_floats(ddpc_ckpt_t ck, float *host, size_t n)
{
#ifdef DDPC_HAVE_CUDA
    cudaStream_t s = (cudaStream_t)ddpc_ddp_stream(ck->ddp);
    ddpc_status_t st;
    for (size_t off = 0; off < n; off += ck->bounce_numel) {
        size_t k = n - off < ck->bounce_numel ? n - off : ck->bounce_numel;
        if (ck->rank == 0)
            CK_CU(cudaMemcpyAsync(ck->bounce, host + off, k * sizeof(float),
                                  cudaMemcpyHostToDevice, s), "checkpoint broadcast");
        if ((st = ddpc_broadcast(ck->comm, ck->bounce, k, DDPC_F32, 0)) != DDPC_OK)
            return st;
        if (ck->rank != 0)
            CK_CU(cudaMemcpyAsync(host + off, ck->bounce, k * sizeof(float),
                                  cudaMemcpyDeviceToHost, s), "checkpoint broadcast");
        CK_CU(cudaStreamSynchronize(s), "checkpoint broadcast");
    }
    return DDPC_OK;
#else
    return DDPC_ERR_UNSUPPORTED;
#endif
}

ddpc_status_t ddpc_ckpt_create(ddpc_ddp_t ddp, ddpc_optim_t opt, const ddpc_ckpt_config_t *cfg,
                               ddpc_ckpt_t *out)
{
    static const ddpc_ckpt_config_t defaults = DDPC_CKPT_CONFIG_INIT;
    if (!ddp || !out)
        return DDPC_ERR_INVALID;
    *out = NULL;
    ddpc_ckpt_t ck = calloc(1, sizeof *ck);
    if (!ck)
        return DDPC_ERR_NOMEM;
    ck->ddp = ddp;
    ck->opt = opt;
    ck->comm = ddpc_ddp_comm(ddp);
    ck->rt = ddpc_comm_runtime(ck->comm);
    ck->rank = ddpc_comm_rank(ck->comm);
    ck->size = ddpc_comm_size(ck->comm);
    ck->cfg = cfg ? *cfg : defaults;
    ck->lock_fd = -1;
    snprintf(ck->prefix, sizeof ck->prefix, "ddpc[rank %d/%d %s]", ck->rank, ck->size,
             ddpc_world(ck->rt)->host);
    *out = ck;
    if (!ddpc_ddp_params(ddp, NULL))
        return ck_err(ck, DDPC_ERR_STATE, "checkpoint handle created before ddpc_ddp_build");
    ddpc_status_t st = read_env(ck);
    ck->device = ddpc_ddp_device(ddp);
    if (st == DDPC_OK && ck->device != DDPC_DEVICE_HOST)
        st = device_buffers(ck);
    return st;
}

void ddpc_ckpt_destroy(ddpc_ckpt_t ck)
{
    if (!ck)
        return;
    ck_join(ck);
    if (ck->async_st != DDPC_OK)
        ddpc_log(ck->rt, DDPC_LOG_ERROR, "%s (asynchronous save never waited for)",
                 ck_body(ck, ck->job.err));
    ck_lock_release(ck);
    free(ck->job.items);
    free(ck->snap);
    ck_shard_release(ck);
    free(ck->user);
#ifdef DDPC_HAVE_CUDA
    if (ck->shadow)
        cudaFreeHost(ck->shadow);
    if (ck->bounce)
        cudaFree(ck->bounce);
#endif
    free(ck);
}

/* ------------------------------------------------------------------ user data */

static ck_attr_t *attr_slot(ddpc_ckpt_t ck, const char *name, ddpc_status_t *st)
{
    *st = DDPC_OK;
    if (!name || !*name || strlen(name) >= CK_ATTR_NAME) {
        *st = ck_err(ck, DDPC_ERR_INVALID, "user attribute name must be 1..%d bytes",
                     CK_ATTR_NAME - 1);
        return NULL;
    }
    for (int i = 0; i < ck->nattrs; i++)
        if (!strcmp(ck->attrs[i].name, name))
            return &ck->attrs[i];
    if (ck->nattrs == CK_MAX_ATTRS) {
        *st = ck_err(ck, DDPC_ERR_INVALID, "more than %d user attributes (\"%s\")", CK_MAX_ATTRS,
                     name);
        return NULL;
    }
    ck_attr_t *a = &ck->attrs[ck->nattrs++];
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    return a;
}

ddpc_status_t ddpc_ckpt_set_user_attr_double(ddpc_ckpt_t ck, const char *name, double v)
{
    ddpc_status_t st;
    ck_attr_t *a = ck ? attr_slot(ck, name, &st) : NULL;
    if (!a)
        return ck ? st : DDPC_ERR_INVALID;
    a->is_string = 0;
    a->num = v;
    return DDPC_OK;
}

ddpc_status_t ddpc_ckpt_set_user_attr_string(ddpc_ckpt_t ck, const char *name, const char *v)
{
    if (!ck || !v)
        return ck ? ck_err(ck, DDPC_ERR_INVALID, "user attribute \"%s\": NULL string",
                           name ? name : "")
                  : DDPC_ERR_INVALID;
    if (strlen(v) >= CK_ATTR_STR)
        return ck_err(ck, DDPC_ERR_INVALID, "user attribute \"%s\": string of %zu bytes, at most %d",
                      name ? name : "", strlen(v), CK_ATTR_STR - 1);
    ddpc_status_t st;
    ck_attr_t *a = attr_slot(ck, name, &st);
    if (!a)
        return st;
    a->is_string = 1;
    snprintf(a->str, sizeof a->str, "%s", v);
    return DDPC_OK;
}

static const ck_attr_t *attr_find(ddpc_ckpt_t ck, const char *name, int is_string)
{
    for (int i = 0; ck && name && i < ck->nattrs; i++)
        if (!strcmp(ck->attrs[i].name, name) && ck->attrs[i].is_string == is_string)
            return &ck->attrs[i];
    return NULL;
}

ddpc_status_t ddpc_ckpt_get_user_attr_double(ddpc_ckpt_t ck, const char *name, double *v)
{
    const ck_attr_t *a = attr_find(ck, name, 0);
    if (!a || !v)
        return ck ? ck_err(ck, DDPC_ERR_NOT_FOUND, "no user attribute \"%s\" of type double",
                           name ? name : "")
                  : DDPC_ERR_INVALID;
    *v = a->num;
    return DDPC_OK;
}

ddpc_status_t ddpc_ckpt_get_user_attr_string(ddpc_ckpt_t ck, const char *name, char *buf, size_t n)
{
    const ck_attr_t *a = attr_find(ck, name, 1);
    if (!a || !buf || !n)
        return ck ? ck_err(ck, DDPC_ERR_NOT_FOUND, "no user attribute \"%s\" of type string",
                           name ? name : "")
                  : DDPC_ERR_INVALID;
    snprintf(buf, n, "%s", a->str);
    return DDPC_OK;
}

ddpc_status_t ddpc_ckpt_add_user_tensor(ddpc_ckpt_t ck, const char *name, float *data, size_t numel)
{
    if (!ck)
        return DDPC_ERR_INVALID;
    if (!name || !*name || strlen(name) >= CK_NAME_MAX || (!data && numel))
        return ck_err(ck, DDPC_ERR_INVALID, "user tensor: name of 1..%d bytes and data expected",
                      CK_NAME_MAX - 1);
    for (int i = 0; i < ck->nuser; i++)
        if (!strcmp(ck->user[i].name, name))
            return ck_err(ck, DDPC_ERR_INVALID, "user tensor \"%s\" added twice", name);
    ck_user_t *u = realloc(ck->user, (size_t)(ck->nuser + 1) * sizeof *u);
    if (!u)
        return ck_err(ck, DDPC_ERR_NOMEM, "cannot add user tensor \"%s\"", name);
    ck->user = u;
    snprintf(u[ck->nuser].name, sizeof u->name, "%s", name);
    u[ck->nuser].data = data;
    u[ck->nuser++].numel = numel;
    return DDPC_OK;
}

/* ------------------------------------------------------------------ contents */

uint64_t ck_fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v) /* as 8 little-endian bytes */
{
    for (int k = 0; k < 8; k++)
        h = ck_fnv(h, &(unsigned char){(unsigned char)(v >> (8 * k))}, 1);
    return h;
}

uint64_t ck_model_fingerprint(ddpc_ddp_t ddp)
{
    uint64_t h = CK_FNV_BASIS;
    ddpc_param_info_t p;
    for (int i = 0; i < ddpc_ddp_num_params(ddp) && ddpc_ddp_param_info(ddp, i, &p) == DDPC_OK; i++) {
        const char *dt = ddpc_dtype_name(p.dtype);
        h = ck_fnv(h, p.name, strlen(p.name) + 1);
        h = ck_fnv(h, dt, strlen(dt) + 1);
        h = fnv_u64(h, (uint64_t)p.ndim);
        for (int k = 0; k < p.ndim; k++)
            h = fnv_u64(h, (uint64_t)p.shape[k]);
    }
    /* then the buffers, the same way: a model without any keeps its fingerprint */
    for (int i = 0; i < ddpc_ddp_num_buffers(ddp) && ddpc_ddp_buffer_info(ddp, i, &p) == DDPC_OK; i++) {
        h = ck_fnv(h, "buffer", 7);
        h = ck_fnv(h, p.name, strlen(p.name) + 1);
        h = fnv_u64(h, (uint64_t)p.ndim);
        for (int k = 0; k < p.ndim; k++)
            h = fnv_u64(h, (uint64_t)p.shape[k]);
    }
    return h;
}

int ck_sharded(ddpc_ckpt_t ck, size_t *off, size_t *len, size_t *pad)
{
    size_t numel = 0, o = 0, l = 0;
    ddpc_ddp_params(ck->ddp, &numel);
    if (!ck->opt || !ddpc_optim_num_states(ck->opt) ||
        ddpc_optim_state_range(ck->opt, &o, &l) != DDPC_OK || (o == 0 && l == numel))
        return 0;
    if (off)
        *off = o;
    if (len)
        *len = l;
    if (pad)
        *pad = l * (size_t)ck->size;
    return 1;
}

/* Item k: tensor `info` of an arena (its host copy for a device engine). */
static void set_item(ck_item_t *it, const char *group, const char *sub, const ddpc_param_info_t *p,
                     float *arena, int run) /* arena NULL: streamed (shard.c) */
{
    snprintf(it->path, sizeof it->path, "/%s/%s%s%s", group, sub, *sub ? "/" : "", p->name);
    it->ndim = p->ndim;
    memcpy(it->shape, p->shape, sizeof it->shape);
    it->numel = p->numel;
    it->data = arena ? arena + p->offset : NULL;
    it->run = run;
    it->pos = p->offset;
}

ddpc_status_t ck_items(ddpc_ckpt_t ck, ck_item_t **items, int *nitems, int *nparams)
{
    int np = ddpc_ddp_num_params(ck->ddp), ns = ddpc_optim_num_states(ck->opt);
    int nb = ddpc_ddp_num_buffers(ck->ddp);
    int n = np * (1 + ns) + nb + ck->nuser;
    ck_item_t *it = calloc(n ? (size_t)n : 1, sizeof *it);
    if (!it)
        return ck_err(ck, DDPC_ERR_NOMEM, "cannot allocate %d checkpoint entries", n);
    int k = 0;
    size_t numel = 0; /* of every arena but the buffers': the parameters' layout */
    ddpc_ddp_params(ck->ddp, &numel);
    ddpc_param_info_t p;
    for (int s = -1; s < ns; s++) { /* s = -1: the parameters, then the buffers */
        const char *sname = "";
        float *arena = s < 0 ? ddpc_ddp_params(ck->ddp, NULL) : ddpc_optim_state(ck->opt, s, &sname);
        if (ck->device != DDPC_DEVICE_HOST) /* its host copy, arena s + 1 of the shadow */
            arena = ck->shadow + (size_t)(s + 1) * numel;
        if (s >= 0 && ck->device == DDPC_DEVICE_HOST && ck_sharded(ck, NULL, NULL, NULL))
            arena = NULL; /* streamed: shard.c */
        for (int i = 0; i < np && ddpc_ddp_param_info(ck->ddp, i, &p) == DDPC_OK; i++)
            set_item(&it[k++], s < 0 ? "model" : "optim", sname, &p, arena, s + 1);
        if (s >= 0)
            continue;
        float *bufs = ck->device != DDPC_DEVICE_HOST ? ck->shadow + (size_t)(1 + ns) * numel
                                                     : ddpc_ddp_buffers(ck->ddp, NULL);
        for (int i = 0; i < nb && ddpc_ddp_buffer_info(ck->ddp, i, &p) == DDPC_OK; i++)
            set_item(&it[k++], "model", "", &p, bufs, -1);
    }
    for (int u = 0; u < ck->nuser; u++, k++) {
        snprintf(it[k].path, sizeof it->path, "/user/%s", ck->user[u].name);
        it[k].ndim = 1;
        it[k].shape[0] = (int64_t)ck->user[u].numel;
        it[k].numel = ck->user[u].numel;
        it[k].data = ck->user[u].data;
        it[k].run = ns + 1 + u;
    }
    *items = it;
    *nitems = n;
    *nparams = np + nb; /* the /model tensors */
    return DDPC_OK;
}

/* ------------------------------------------------------------------ save */

static void *writer_main(void *arg)
{
    ddpc_tl_name_thread("checkpoint writer");
    ck_write(arg);
    return NULL;
}

void ck_join(ddpc_ckpt_t ck)
{
    if (!ck->inflight)
        return;
    pthread_join(ck->thread, NULL);
    ck->inflight = 0;
    ck->async_st = ck->job.st;
}

/* rank 0: the result of the last async save, once. */
static ddpc_status_t take_async(ddpc_ckpt_t ck)
{
    ck_join(ck);
    ddpc_status_t st = ck->async_st;
    if (st != DDPC_OK)
        snprintf(ck->err, sizeof ck->err, "%.900s (asynchronous save of step %llu)", ck->job.err,
                 (unsigned long long)ck->job.meta.step);
    ck->async_st = DDPC_OK;
    return st;
}

/* Copy the tensors to the host snapshot and point the items at it. */
static ddpc_status_t snapshot(ddpc_ckpt_t ck, ck_job_t *j)
{
    size_t total = 0;
    for (int i = 0; i < j->nitems; i++)
        total += j->items[i].numel;
    if (total > ck->snap_numel) {
        free(ck->snap);
        ck->snap_numel = 0;
        if (!(ck->snap = malloc(total * sizeof(float))))
            return ck_err(ck, DDPC_ERR_NOMEM, "cannot allocate a %zu-byte snapshot for an "
                          "asynchronous save (set DDPC_CKPT_ASYNC=0)", total * sizeof(float));
        ck->snap_numel = total;
        ck_note_mem(ck);
    }
    if (ck->device != DDPC_DEVICE_HOST && !ck->nuser)
        return DDPC_OK; /* the shadow is the snapshot: the next save joins this one first */
    float *p = ck->snap;
    for (int i = 0; i < j->nitems; i++) {
        ck_item_t *it = &j->items[i];
        ddpc_status_t st = DDPC_OK;
        if (it->data)
            memcpy(p, it->data, it->numel * sizeof(float));
        else /* a sharded state, gathered in file order */
            st = ck_shard_read(ck, it->run - 1, it->pos, p, it->numel);
        if (st != DDPC_OK)
            return st;
        it->data = p;
        p += j->items[i].numel;
    }
    return DDPC_OK;
}

/* rank 0: fill the job, then write it or hand it to the background thread. */
static ddpc_status_t start_save(ddpc_ckpt_t ck, const ddpc_ckpt_meta_t *meta)
{
    ck_job_t *j = &ck->job;
    free(j->items);
    memset(j, 0, sizeof *j);
    ddpc_status_t st = ck_items(ck, &j->items, &j->nitems, &j->nparams);
    if (st)
        return st;
    snprintf(j->prefix, sizeof j->prefix, "%s", ck->prefix);
    snprintf(j->dir, sizeof j->dir, "%s", ck->dir);
    if ((st = ck_shadow_pull(ck)) != DDPC_OK) /* device arenas: to the host copy */
        return st;
    if (meta)
        j->meta = *meta;
    if (j->meta.rng_bytes > sizeof j->meta.rng)
        return ck_err(ck, DDPC_ERR_INVALID, "meta.rng_bytes is %zu, at most %zu",
                      j->meta.rng_bytes, sizeof j->meta.rng);
    snprintf(j->path, sizeof j->path, "%s/ckpt-%08llu.h5", ck->dir, (unsigned long long)j->meta.step);
    /* a name of this writer's own: another job's cleanup cannot take it */
    snprintf(j->tmp, sizeof j->tmp, "%s.tmp.%ld.%s", j->path, (long)getpid(),
             ddpc_world(ck->rt)->host);
    j->exclusive = ck->lock_state == CK_LOCK_HELD;
    j->world_size = ck->size;
    j->keep = ck->cfg.keep;
    j->fingerprint = ck_model_fingerprint(ck->ddp);
    if ((j->has_optim = ck->opt != NULL)) {
        j->ocfg = *ddpc_optim_config(ck->opt);
        j->osteps = ddpc_optim_steps(ck->opt);
        j->oscale = ddpc_optim_loss_scale(ck->opt);
        j->ogood = ddpc_optim_scale_good_steps(ck->opt);
    }
    memcpy(j->attrs, ck->attrs, sizeof j->attrs);
    j->nattrs = ck->nattrs;
    j->stall_s = ck->stall_s;
    j->rt = ck->rt;
    j->src = ck;
    if (!ck->cfg.async) {
        if ((st = ck_write(j)) != DDPC_OK)
            snprintf(ck->err, sizeof ck->err, "%s", j->err);
        return st;
    }
    const double t_snap = ddpc_tl_t0();
    st = snapshot(ck, j);
    ddpc_tl_span("checkpoint snapshot", t_snap, (int64_t)j->meta.step);
    if (st != DDPC_OK)
        return st;
    j->src = NULL; /* the snapshot holds every item */
    if (pthread_create(&ck->thread, NULL, writer_main, j) != 0)
        return ck_err(ck, DDPC_ERR_INTERNAL, "cannot start the checkpoint writer thread");
    ck->inflight = 1;
    return DDPC_OK;
}

/* Collective: rank 0's status (and message) on every rank. */
static ddpc_status_t agree(ddpc_ckpt_t ck, ddpc_status_t st)
{
    int32_t s = (int32_t)st;
    ddpc_status_t cst = ddpc_comm_host_bcast(ck->comm, &s, sizeof s, 0);
    if (cst == DDPC_OK && s != DDPC_OK) {
        char msg[DDPC_ERRMSG_LEN];
        if (ck->rank == 0)
            memcpy(msg, ck->err, sizeof msg);
        cst = ddpc_comm_host_bcast(ck->comm, msg, sizeof msg, 0);
        if (cst == DDPC_OK && ck->rank != 0)
            ck_err(ck, (ddpc_status_t)s, "failed on rank 0: %s", msg);
    }
    if (cst != DDPC_OK)
        return ck_err(ck, cst, "cannot agree on the checkpoint's status: %s",
                      ddpc_last_error(ck->rt));
    return (ddpc_status_t)s;
}

/* rank 0: ck_prepare_dir once per handle */
static ddpc_status_t prepare(ddpc_ckpt_t ck)
{
    if (ck->prepared)
        return DDPC_OK;
    ddpc_status_t st = ck_prepare_dir(ck);
    ck->prepared = st == DDPC_OK;
    return st;
}

ddpc_status_t ddpc_ckpt_prepare(ddpc_ckpt_t ck)
{
    if (!ck)
        return DDPC_ERR_INVALID;
    return agree(ck, ck->rank == 0 ? prepare(ck) : DDPC_OK);
}

ddpc_status_t ddpc_ckpt_save(ddpc_ckpt_t ck, const ddpc_ckpt_meta_t *meta)
{
    if (!ck)
        return DDPC_ERR_INVALID;
    /* sharded, gathered in the forward: the last step's parameters first
       (only when pending: a call would mark the model as one that waits) */
    ddpc_status_t st =
        ddpc_ddp_param_pending(ck->ddp) ? ddpc_ddp_param_wait(ck->ddp, -1) : DDPC_OK;
    if (st != DDPC_OK)
        return ck_err(ck, st, "save: %s", ddpc_ddp_last_error(ck->ddp));
    /* sharded: the slices stream to rank 0 as its writer (or snapshot) reads
       them, window by window, between begin and end */
    if ((st = ck_shard_save_begin(ck)) != DDPC_OK)
        return st;
    if (ck->rank == 0) {
        double t0 = ddpc_now();
        if ((st = take_async(ck)) == DDPC_OK && (st = prepare(ck)) == DDPC_OK)
            st = start_save(ck, meta);
        if (st == DDPC_OK && ck->cfg.async) /* the writer logs the write */
            ddpc_log(ck->rt, DDPC_LOG_INFO, "ckpt: snapshot for %s in %.3fs", ck->job.path,
                     ddpc_now() - t0);
    }
    ddpc_status_t sst = ck_shard_save_end(ck);
    if (sst != DDPC_OK && ck->rank != 0)
        return sst; /* the communicator failed: rank 0 hears of it by its own receive */
    return agree(ck, st != DDPC_OK ? st : sst);
}

ddpc_status_t ddpc_ckpt_wait(ddpc_ckpt_t ck)
{
    if (!ck)
        return DDPC_ERR_INVALID;
    return agree(ck, ck->rank == 0 ? take_async(ck) : DDPC_OK);
}
