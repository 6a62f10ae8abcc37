/* SPDX-License-Identifier: BSD-3-Clause */
/* group.c: communicators over some ranks of a parent (split by color and
 * key, a list of ranks, a 2-D grid), the world rank of a communicator's
 * rank, and the small host-memory control messages every communicator
 * carries (ddpc_comm_host_*). A split is three exchanges over the parent:
 * what each rank asks for (color, key, backend; checked so that every rank
 * reaches the same verdict), the NCCL bootstrap where one is needed, and
 * the result, so that every rank of the parent returns the same status.
 * The backends make the communicator itself (mpi.c, nccl.c). */
#include "config.h"
#include "comm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DDPC_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#define MOD "comm"

int ddpc_comm_world_rank(ddpc_comm_t c, int r)
{
    if (!c || r < 0 || r >= c->size)
        return -1;
    return c->members ? c->members[r] : r;
}

/* ------------------------------------------------------------------ control messages */

/* Whether c's control messages go through the runtime's key exchange: a
 * device communicator over the whole world (the key exchange is collective
 * over the world) in a launch whose MPI is wired. Without MPI the exchange
 * is PMIx, whose fences grow dearer with every exchange of the job (Slurm's
 * plugin, 4 ranks on the testbed: about 2 ms per exchange over the first
 * 100, 70-155 ms over the ninth hundred), so a communicator's own traffic
 * goes through its device. */
static int ctrl_by_kvs(const struct ddpc_comm *c)
{
    return c->members == NULL && c->size == c->rt->world.size &&
           c->rt->mpi_world != MPI_COMM_NULL;
}

#ifdef DDPC_HAVE_CUDA
/* Through the device: the bytes to c->ctrl, a collective of c, back. The
 * piece each rank sends is at most CTRL_BYTES / (size + 1) bytes. The copies
 * go on c's stream, in order with the collective (a synchronous cudaMemcpy
 * runs on the legacy stream, which a non-blocking c->stream does not wait
 * for). */
static ddpc_status_t ctrl_dev(struct ddpc_comm *c, const void *mine, void *all, size_t bytes,
                              int root)
{
    const size_t piece = CTRL_BYTES / ((size_t)c->size + 1);
    char *dev = c->ctrl, *send = dev + (size_t)c->size * piece;
    if (!dev || piece == 0)
        return ddpc_err(c->rt, DDPC_ERR_STATE, MOD, "control message on a device communicator "
                        "of %d ranks without its control buffer", c->size);
    cudaStream_t strm = (cudaStream_t)c->stream;
    cudaError_t e = cudaSetDevice(c->device);
    ddpc_status_t st = DDPC_OK;
    for (size_t off = 0; e == cudaSuccess && st == DDPC_OK && off < bytes; off += piece) {
        size_t n = bytes - off < piece ? bytes - off : piece;
        if (root < 0) { /* allgather: rank r's bytes at r * bytes + off of all */
            if ((e = cudaMemcpyAsync(send, (const char *)mine + off, n, cudaMemcpyHostToDevice,
                                     strm)))
                break;
            if ((st = ddpc_allgather(c, send, dev, n, DDPC_U8)))
                break;
            if ((e = cudaStreamSynchronize(strm)))
                break;
            if ((e = cudaMemcpy2DAsync((char *)all + off, bytes, dev, n, n, (size_t)c->size,
                                       cudaMemcpyDeviceToHost, strm)))
                break;
            e = cudaStreamSynchronize(strm);
        } else { /* broadcast of all[0..bytes) from root */
            if (c->rank == root &&
                (e = cudaMemcpyAsync(dev, (char *)all + off, n, cudaMemcpyHostToDevice, strm)))
                break;
            if ((st = ddpc_broadcast(c, dev, n, DDPC_U8, root)))
                break;
            if ((e = cudaStreamSynchronize(strm)))
                break;
            if ((e = cudaMemcpyAsync((char *)all + off, dev, n, cudaMemcpyDeviceToHost, strm)))
                break;
            e = cudaStreamSynchronize(strm);
        }
    }
    if (e != cudaSuccess)
        return ddpc_err(c->rt, DDPC_ERR_CUDA, MOD, "control message through GPU %d: %s",
                        c->device, cudaGetErrorString(e));
    return st;
}
#endif

ddpc_status_t ddpc_comm_host_bcast(struct ddpc_comm *c, void *buf, size_t bytes, int root)
{
    if (c->device == DDPC_DEVICE_HOST)
        return ddpc_broadcast(c, buf, bytes, DDPC_U8, root);
    if (ctrl_by_kvs(c))
        return ddpc_kvs_bcast(c->rt, buf, bytes, root);
#ifdef DDPC_HAVE_CUDA
    return ctrl_dev(c, NULL, buf, bytes, root);
#else
    return DDPC_ERR_UNSUPPORTED;
#endif
}

ddpc_status_t ddpc_comm_host_allgather(struct ddpc_comm *c, const void *mine, void *all,
                                       size_t bytes)
{
    if (c->device == DDPC_DEVICE_HOST)
        return ddpc_allgather(c, mine, all, bytes, DDPC_U8);
    if (ctrl_by_kvs(c))
        return ddpc_kvs_allgather(c->rt, mine, all, bytes);
#ifdef DDPC_HAVE_CUDA
    return ctrl_dev(c, mine, all, bytes, -1);
#else
    return DDPC_ERR_UNSUPPORTED;
#endif
}

/* out[i] = in[0][i] op in[1][i] op ... in rank order (all holds size rows of
 * count elements), the same bits on every rank. */
static void reduce_rows(const void *all, void *out, size_t count, int size, ddpc_dtype_t dt,
                        ddpc_redop_t op)
{
    for (size_t i = 0; i < count; i++) {
        if (dt == DDPC_I32 || dt == DDPC_I64) {
            int64_t v = 0;
            for (int r = 0; r < size; r++) {
                int64_t x = dt == DDPC_I32 ? ((const int32_t *)all)[(size_t)r * count + i]
                                           : ((const int64_t *)all)[(size_t)r * count + i];
                v = r == 0 ? x : op == DDPC_SUM ? v + x : op == DDPC_MIN ? (x < v ? x : v)
                                                                         : (x > v ? x : v);
            }
            if (dt == DDPC_I32)
                ((int32_t *)out)[i] = (int32_t)v;
            else
                ((int64_t *)out)[i] = v;
        } else {
            double v = 0;
            for (int r = 0; r < size; r++) {
                double x = dt == DDPC_F32 ? (double)((const float *)all)[(size_t)r * count + i]
                                          : ((const double *)all)[(size_t)r * count + i];
                if (r == 0)
                    v = x;
                else if (op == DDPC_SUM || op == DDPC_AVG)
                    v = dt == DDPC_F32 ? (double)((float)v + (float)x) : v + x;
                else
                    v = op == DDPC_MIN ? (x < v ? x : v) : (x > v ? x : v);
            }
            if (op == DDPC_AVG)
                v = dt == DDPC_F32 ? (double)((float)v / (float)size) : v / size;
            if (dt == DDPC_F32)
                ((float *)out)[i] = (float)v;
            else
                ((double *)out)[i] = v;
        }
    }
}

/* The arguments of a control all-reduce: types, operations, at most 1 MiB. */
static ddpc_status_t ctl_args(ddpc_t rt, const char *fn, const void *in, const void *out,
                              size_t count, ddpc_dtype_t dt, ddpc_redop_t op)
{
    int ints = dt == DDPC_I32 || dt == DDPC_I64, floats = dt == DDPC_F32 || dt == DDPC_F64;
    if ((!ints && !floats) || (op != DDPC_SUM && op != DDPC_MIN && op != DDPC_MAX &&
                               !(op == DDPC_AVG && floats)))
        return ddpc_err(rt, DDPC_ERR_UNSUPPORTED, MOD, "%s: %s with %s: expected float32, "
                        "float64, int32 or int64 with sum, min or max (avg: floats)", fn,
                        ddpc_dtype_name(dt), op == DDPC_AVG ? "avg" : "this operation");
    if ((!in || !out) && count)
        return ddpc_err(rt, DDPC_ERR_INVALID, MOD, "%s: NULL buffer", fn);
    if (count * ddpc_dtype_size(dt) > ((size_t)1 << 20))
        return ddpc_err(rt, DDPC_ERR_INVALID, MOD, "%s: %zu bytes: control messages are at "
                        "most 1 MiB (use a communicator's collectives for data)", fn,
                        count * ddpc_dtype_size(dt));
    return DDPC_OK;
}

/* Every rank's row through c (NULL: the key exchange), then reduced here. */
static ddpc_status_t ctl_allreduce(ddpc_t rt, struct ddpc_comm *c, int size, const void *in,
                                   void *out, size_t count, ddpc_dtype_t dt, ddpc_redop_t op)
{
    const size_t row = count * ddpc_dtype_size(dt);
    void *all = malloc(row * (size_t)size + 1);
    if (!all)
        return ddpc_err(rt, DDPC_ERR_NOMEM, MOD, "control all-reduce: no memory for %d x %zu "
                        "bytes", size, row);
    ddpc_status_t st = c ? ddpc_comm_host_allgather(c, in, all, row)
                         : ddpc_kvs_allgather(rt, in, all, row);
    if (st == DDPC_OK)
        reduce_rows(all, out, count, size, dt, op);
    free(all);
    return st;
}

ddpc_status_t ddpc_comm_host_allreduce(ddpc_comm_t c, const void *in, void *out, size_t count,
                                       ddpc_dtype_t dt, ddpc_redop_t op)
{
    if (!c)
        return DDPC_ERR_INVALID;
    if (c->device == DDPC_DEVICE_HOST)
        return ddpc_allreduce(c, in, out, count, dt, op);
    ddpc_status_t st = ctl_args(c->rt, "ddpc_comm_host_allreduce", in, out, count, dt, op);
    return st ? st : ctl_allreduce(c->rt, c, c->size, in, out, count, dt, op);
}

ddpc_status_t ddpc_kvs_allreduce(ddpc_t rt, const void *in, void *out, size_t count,
                                 ddpc_dtype_t dt, ddpc_redop_t op)
{
    if (!rt)
        return DDPC_ERR_INVALID;
    ddpc_status_t st = ctl_args(rt, "ddpc_kvs_allreduce", in, out, count, dt, op);
    return st ? st : ctl_allreduce(rt, NULL, rt->world.size, in, out, count, dt, op);
}

/* ------------------------------------------------------------------ splits */

/* What each rank of the parent says first. */
typedef struct {
    int32_t color, key;
    int32_t backend;   /* resolved: mpi, mpi-staged or nccl; -1 after a local error */
    int32_t device;
    int32_t ncomms;    /* this rank's next communicator id */
    int32_t can_split; /* nccl: the parent is nccl and this NCCL has ncclCommSplit */
    uint32_t list;     /* ddpc_comm_group: CRC-32 of the list (0 otherwise) */
    char why[320];     /* the local error */
} hello_t;

/* Parent ranks of color, ordered by key, then parent rank, into out. */
static int members_of(const hello_t *all, int size, int color, int *out)
{
    int n = 0;
    for (int r = 0; r < size; r++) {
        if (all[r].color != color)
            continue;
        int i = n++;
        while (i > 0 && (all[out[i - 1]].key > all[r].key)) { /* stable insertion */
            out[i] = out[i - 1];
            i--;
        }
        out[i] = r;
    }
    return n;
}

/* The same verdict on every rank from the same table: DDPC_OK or the first
 * problem, with its message in why. */
static ddpc_status_t judge(const hello_t *all, int size, char *why, size_t n)
{
    for (int r = 0; r < size; r++)
        if (all[r].backend < 0) {
            snprintf(why, n, "rank %d of the parent: %s", r, all[r].why);
            return DDPC_ERR_INVALID;
        }
    for (int r = 0; r < size; r++)
        if (all[r].list != all[0].list) {
            snprintf(why, n, "ranks 0 and %d of the parent passed different lists of ranks "
                     "(every rank must pass the same)", r);
            return DDPC_ERR_INVALID;
        }
    for (int r = 0; r < size; r++)
        for (int q = 0; q < r; q++)
            if (all[q].color == all[r].color && all[q].color != DDPC_COLOR_NONE &&
                all[q].backend != all[r].backend) {
                snprintf(why, n, "ranks %d and %d of the parent join one communicator (color %d) "
                         "with different backends (%s and %s)", q, r, all[r].color,
                         ddpc_backend_name((ddpc_backend_t)all[q].backend),
                         ddpc_backend_name((ddpc_backend_t)all[r].backend));
                return DDPC_ERR_INVALID;
            }
    return DDPC_OK;
}

static ddpc_status_t split(struct ddpc_comm *p, int color, int key, const ddpc_comm_config_t *cfg,
                           uint32_t list, const char *local_err, struct ddpc_comm **out)
{
    ddpc_t rt = p->rt;
    *out = NULL;
    ddpc_comm_config_t k = {p->backend, p->device, p->stream};
    if (cfg)
        k = *cfg;
    if (k.backend == DDPC_BACKEND_MPI_STAGED)
        k.backend = DDPC_BACKEND_MPI;
    hello_t me = {.color = color, .key = key, .ncomms = rt->ncomms, .list = list};
    ddpc_backend_t be = DDPC_BACKEND_MPI;
    if (local_err)
        snprintf(me.why, sizeof me.why, "%s", local_err);
    else if (color < DDPC_COLOR_NONE)
        snprintf(me.why, sizeof me.why, "color %d: expected >= 0, or DDPC_COLOR_NONE (-1) for "
                 "no communicator", color);
    else if (color != DDPC_COLOR_NONE && comm_resolve(rt, &k, &be) != DDPC_OK)
        snprintf(me.why, sizeof me.why, "%s", ddpc_last_error(rt));
    else if (color != DDPC_COLOR_NONE && k.device == DDPC_DEVICE_AUTO &&
             be != DDPC_BACKEND_NCCL && ddpc_device_select(rt, &k.device) != DDPC_OK)
        snprintf(me.why, sizeof me.why, "%s", ddpc_last_error(rt));
    if (be == DDPC_BACKEND_MPI && k.device != DDPC_DEVICE_HOST)
        be = DDPC_BACKEND_MPI_STAGED;
    me.backend = me.why[0] ? -1 : color == DDPC_COLOR_NONE ? 0 : (int32_t)be;
    me.device = k.device;
#ifdef DDPC_HAVE_NCCL
    me.can_split = p->backend == DDPC_BACKEND_NCCL && comm_nccl_can_split() &&
                   (color == DDPC_COLOR_NONE ||
                    (be == DDPC_BACKEND_NCCL &&
                     (k.device == DDPC_DEVICE_AUTO || k.device == p->device)));
#endif
    /* the parent's work first: the exchanges below are its collectives */
    ddpc_status_t st = ddpc_comm_synchronize(p, -1);
    if (st)
        return st;
    hello_t *all = malloc((size_t)p->size * sizeof *all);
    int *mem = malloc((size_t)p->size * sizeof *mem);
    if (!all || !mem) {
        free(all);
        free(mem);
        return ddpc_err(rt, DDPC_ERR_NOMEM, MOD, "split: no memory for %d ranks", p->size);
    }
    st = ddpc_comm_host_allgather(p, &me, all, sizeof me);
    if (st) {
        free(all);
        free(mem);
        return ddpc_err(rt, st, MOD, "split: the exchange of colors failed: %s",
                        ddpc_last_error(rt));
    }
    char why[640];
    if ((st = judge(all, p->size, why, sizeof why)) != DDPC_OK) {
        free(all);
        free(mem);
        return ddpc_err(rt, st, MOD, "split: %s", why);
    }
    int next_id = 0, nccl_split = 1, any_nccl = 0;
    for (int r = 0; r < p->size; r++) {
        next_id = all[r].ncomms > next_id ? all[r].ncomms : next_id;
        nccl_split &= all[r].can_split;
        any_nccl |= all[r].color != DDPC_COLOR_NONE && all[r].backend == DDPC_BACKEND_NCCL;
    }
    int n = color == DDPC_COLOR_NONE ? 0 : members_of(all, p->size, color, mem);
    struct ddpc_comm *c = NULL;
    if (n > 0) {
        c = comm_alloc(rt, k.device, k.stream);
        if (c) {
            c->backend = be;
            c->size = n;
            c->members = malloc((size_t)n * sizeof *c->members);
            for (int i = 0; i < n && c->members; i++) {
                c->members[i] = ddpc_comm_world_rank(p, mem[i]);
                if (mem[i] == p->rank)
                    c->rank = i;
            }
        }
        if (!c || !c->members)
            st = ddpc_err(rt, DDPC_ERR_NOMEM, MOD, "split: cannot allocate a communicator");
    }
    /* make it: the NCCL paths are collective over the parent, the MPI one
     * over the new communicator only */
#ifdef DDPC_HAVE_NCCL
    if (any_nccl && nccl_split) {
        ddpc_status_t s2 = comm_nccl_split(p, st == DDPC_OK ? c : NULL, color, key);
        st = st ? st : s2;
    } else if (any_nccl) {
        comm_nccl_boot_t *boot = calloc((size_t)p->size, sizeof *boot), mine;
        memset(&mine, 0, sizeof mine);
        if (c && st == DDPC_OK && be == DDPC_BACKEND_NCCL)
            comm_nccl_boot_local(c, c->rank == 0, &mine);
        ddpc_status_t s2 = boot ? ddpc_comm_host_allgather(p, &mine, boot, sizeof mine)
                                : DDPC_ERR_NOMEM;
        if (s2 == DDPC_OK && c && st == DDPC_OK && be == DDPC_BACKEND_NCCL) {
            comm_nccl_boot_t *tab = calloc((size_t)n, sizeof *tab);
            for (int i = 0; tab && i < n; i++)
                tab[i] = boot[mem[i]];
            s2 = tab ? comm_nccl_create_from(c, tab) : DDPC_ERR_NOMEM;
            free(tab);
        }
        free(boot);
        st = st ? st : s2;
    }
#endif
    if (st == DDPC_OK && c && be != DDPC_BACKEND_NCCL)
        st = comm_mpi_create(c, be == DDPC_BACKEND_MPI_STAGED);
    if (st == DDPC_OK && c)
        st = comm_ctrl_alloc(c);
    free(mem);
    free(all);
    /* the result, from every rank of the parent */
    struct {
        int32_t st;
        char why[480];
    } res = {(int32_t)st, ""}, *got = calloc((size_t)p->size, sizeof res);
    if (st)
        snprintf(res.why, sizeof res.why, "%s", ddpc_last_error(rt));
    ddpc_status_t xs = got ? ddpc_comm_host_allgather(p, &res, got, sizeof res) : DDPC_ERR_NOMEM;
    int bad = -1;
    for (int r = 0; xs == DDPC_OK && r < p->size && bad < 0; r++)
        if (got[r].st != DDPC_OK)
            bad = r;
    if (xs != DDPC_OK || bad >= 0) {
        if (c)
            ddpc_comm_destroy_internal(c);
        ddpc_status_t fs = xs ? xs : (ddpc_status_t)got[bad].st;
        if (xs)
            ddpc_err(rt, xs, MOD, "split: the exchange of results failed: %s",
                     ddpc_last_error(rt));
        else if (bad != p->rank)
            ddpc_err(rt, fs, MOD, "split: failed on rank %d of the parent: %s", bad,
                     got[bad].why);
        free(got);
        return fs;
    }
    free(got);
    rt->ncomms = next_id; /* the same id on every rank of it */
    if (c) {
        comm_announce(c);
        comm_register(c);
    } else {
        rt->ncomms++;
    }
    *out = c;
    return DDPC_OK;
}

ddpc_status_t ddpc_comm_split(ddpc_comm_t parent, int color, int key,
                              const ddpc_comm_config_t *cfg, ddpc_comm_t *out)
{
    if (!parent || !out)
        return parent ? ddpc_err(parent->rt, DDPC_ERR_INVALID, MOD,
                                 "ddpc_comm_split: NULL out")
                      : DDPC_ERR_INVALID;
    return split(parent, color, key, cfg, 0, NULL, out);
}

ddpc_status_t ddpc_comm_group(ddpc_comm_t parent, const int *ranks, int n,
                              const ddpc_comm_config_t *cfg, ddpc_comm_t *out)
{
    if (!parent || !out)
        return parent ? ddpc_err(parent->rt, DDPC_ERR_INVALID, MOD, "ddpc_comm_group: NULL out")
                      : DDPC_ERR_INVALID;
    char err[200] = "";
    int color = DDPC_COLOR_NONE, key = 0;
    if (n < 1 || !ranks)
        snprintf(err, sizeof err, "a group of %d rank(s)", n);
    for (int i = 0; !err[0] && i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= parent->size)
            snprintf(err, sizeof err, "ranks[%d] = %d is not a rank of 0..%d", i, ranks[i],
                     parent->size - 1);
        for (int j = 0; !err[0] && j < i; j++)
            if (ranks[j] == ranks[i])
                snprintf(err, sizeof err, "rank %d is listed twice (ranks[%d] and ranks[%d])",
                         ranks[i], j, i);
        if (ranks[i] == parent->rank)
            color = 0, key = i;
    }
    uint32_t crc = err[0] ? 0 : ddpc_crc32(0, ranks, (size_t)n * sizeof *ranks) | 1u;
    return split(parent, err[0] ? DDPC_COLOR_NONE : color, key, cfg, crc, err[0] ? err : NULL,
                 out);
}

ddpc_status_t ddpc_comm_grid(ddpc_comm_t parent, int nrows, int ncols,
                             const ddpc_comm_config_t *cfg, ddpc_comm_t *row, ddpc_comm_t *col)
{
    if (row)
        *row = NULL;
    if (col)
        *col = NULL;
    if (!parent)
        return DDPC_ERR_INVALID;
    char err[160] = "";
    if (nrows < 1 || ncols < 1 || (long)nrows * ncols != parent->size)
        snprintf(err, sizeof err, "a grid of %d x %d ranks for a communicator of %d", nrows,
                 ncols, parent->size);
    const int p = parent->rank, r = ncols > 0 ? p / ncols : 0, q = ncols > 0 ? p % ncols : 0;
    ddpc_comm_t a = NULL, b = NULL;
    ddpc_status_t st = split(parent, err[0] ? DDPC_COLOR_NONE : r, q, cfg, 0, err[0] ? err : NULL,
                             &a);
    if (st == DDPC_OK)
        st = split(parent, q, r, cfg, 0, NULL, &b);
    if (st == DDPC_OK && row)
        *row = a;
    else
        ddpc_comm_destroy(a);
    if (st == DDPC_OK && col)
        *col = b;
    else
        ddpc_comm_destroy(b);
    return st;
}
