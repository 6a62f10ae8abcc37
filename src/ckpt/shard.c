/* SPDX-License-Identifier: BSD-3-Clause */
/* shard.c: a sharded optimizer's state (DDPC_SHARD=optim|grads: rank r holds
 * the floats [r*len, (r+1)*len) of every state tensor) in the unsharded file,
 * in bounded memory. A save streams the slices to rank 0 window by window as
 * its writer asks for them (host engines; a device engine's slices reach
 * rank 0's host shadow through the device bounce buffer); a load keeps, of
 * each window rank 0 broadcasts, the part in this rank's slice. No rank
 * holds a whole state tensor in a buffer of its own (an asynchronous save's
 * snapshot excepted: it is a copy of everything by definition). */
#include "config.h"
#include "ckpt_internal.h"

#include <stdlib.h>
#include <string.h>

#ifdef DDPC_HAVE_CUDA
#include <cuda_runtime.h>
#endif

/* The host bytes ck holds now: its window, async snapshot and shadow. */
static size_t held(ddpc_ckpt_t ck)
{
    return (ck->win_cap + ck->snap_numel + ck->shadow_numel) * sizeof(float);
}

void ck_note_mem(ddpc_ckpt_t ck)
{
    if (held(ck) > ck->mem_peak)
        ck->mem_peak = held(ck);
}

size_t ddpc_ckpt_host_bytes(ddpc_ckpt_t ck, size_t *peak)
{
    if (peak)
        *peak = ck ? ck->mem_peak : 0;
    return ck ? held(ck) : 0;
}

/* The window: 2 x len floats (a save: the window and the write piece; a
 * load: two windows, one in flight). Kept until ck_shard_release. */
static ddpc_status_t win_alloc(ddpc_ckpt_t ck, size_t len)
{
    if (ck->win_cap < 2 * len) {
        ck_shard_release(ck);
        if (!(ck->win = malloc(2 * len * sizeof(float))))
            return ck_err(ck, DDPC_ERR_NOMEM, "cannot allocate the %zu-byte window of the sharded "
                          "optimizer state (DDPC_CKPT_CHUNK_MB sets it)", 2 * len * sizeof(float));
        ck->win_cap = 2 * len;
    }
    ck->win_len = len;
    ck_note_mem(ck);
    return DDPC_OK;
}

void ck_shard_release(ddpc_ckpt_t ck)
{
    free(ck->win);
    ck->win = NULL;
    ck->win_cap = 0;
}

/* Floats per window: the chunk, at most one write piece, at least one. */
static size_t window_len(size_t chunk_floats)
{
    size_t w = chunk_floats < CK_PIECE / sizeof(float) ? chunk_floats : CK_PIECE / sizeof(float);
    return w ? w : 1;
}

static size_t model_numel(ddpc_ckpt_t ck)
{
    size_t numel = 0;
    ddpc_ddp_params(ck->ddp, &numel);
    return numel;
}

/* ------------------------------------------------------------------ save */

/* The save's windows per state tensor of numel floats. */
static size_t per_state(ddpc_ckpt_t ck, size_t numel)
{
    return (numel + ck->win_len - 1) / ck->win_len;
}

/* Window t of the save's sequence: state t / per_state, floats [a, b) of it. */
typedef struct {
    int s;
    size_t a, b;
} win_t;

static win_t window(ddpc_ckpt_t ck, long t, size_t numel)
{
    const size_t nw = per_state(ck, numel);
    win_t w = {(int)((size_t)t / nw), ((size_t)t % nw) * ck->win_len, 0};
    w.b = w.a + ck->win_len < numel ? w.a + ck->win_len : numel;
    return w;
}

static long windows(ddpc_ckpt_t ck, size_t numel)
{
    return (long)per_state(ck, numel) * ddpc_optim_num_states(ck->opt);
}

/* Rank 0: window t into ck->win, each rank's part from that rank, in rank
 * order (rank 0's from its own slice). */
static ddpc_status_t load_window(ddpc_ckpt_t ck, long t, size_t numel, size_t len)
{
    const win_t w = window(ck, t, numel);
    const float *mine = ddpc_optim_state(ck->opt, w.s, NULL);
    for (int r = 0; r < ck->size; r++) {
        size_t lo = w.a > (size_t)r * len ? w.a : (size_t)r * len;
        size_t hi = w.b < (size_t)(r + 1) * len ? w.b : (size_t)(r + 1) * len;
        if (lo >= hi)
            continue;
        if (r == 0) {
            memcpy(ck->win + (lo - w.a), mine + lo, (hi - lo) * sizeof(float));
            continue;
        }
        ddpc_comm_tag_next(ck->comm, "ckpt optimizer shards");
        ddpc_status_t st = ddpc_recv(ck->comm, ck->win + (lo - w.a), hi - lo, DDPC_F32, r);
        if (st != DDPC_OK)
            return ck->win_st = ck_err(ck, st, "gathering the optimizer's shards (window %ld, "
                                       "from rank %d): %s", t, r, ddpc_last_error(ck->rt));
    }
    return DDPC_OK;
}

static ddpc_status_t gather_device(ddpc_ckpt_t ck, size_t len);

/* Collective over every rank: rank 0's window, then this rank's slices'
 * parts, window by window (ck_shard_save_end); a device engine gathers the
 * whole state into rank 0's shadow here. */
ddpc_status_t ck_shard_save_begin(ddpc_ckpt_t ck)
{
    size_t len = 0;
    if (!ck_sharded(ck, NULL, &len, NULL))
        return DDPC_OK;
    if (ck->device != DDPC_DEVICE_HOST)
        return gather_device(ck, len);
    int64_t msg[2] = {DDPC_OK, 0};
    if (ck->rank == 0) {
        msg[1] = (int64_t)window_len(ck->cfg.chunk_bytes / sizeof(float));
        msg[0] = win_alloc(ck, (size_t)msg[1]);
    }
    ddpc_status_t cst = ddpc_comm_host_bcast(ck->comm, msg, sizeof msg, 0);
    if (cst != DDPC_OK)
        return ck_err(ck, cst, "gathering the optimizer's shards: %s", ddpc_last_error(ck->rt));
    if (msg[0] != DDPC_OK)
        return ck->rank == 0 ? (ddpc_status_t)msg[0]
                             : ck_err(ck, (ddpc_status_t)msg[0], "rank 0 cannot hold a window of "
                                      "the optimizer's shards (see its message)");
    ck->win_len = (size_t)msg[1];
    ck->win_t = -1;
    ck->win_st = DDPC_OK;
    return DDPC_OK;
}

ddpc_status_t ck_shard_read(ddpc_ckpt_t ck, int s, size_t pos, float *dst, size_t n)
{
    size_t len = 0;
    const size_t numel = model_numel(ck);
    ck_sharded(ck, NULL, &len, NULL);
    while (n && ck->win_st == DDPC_OK) {
        const long t = (long)((size_t)s * per_state(ck, numel) + pos / ck->win_len);
        if (pos >= numel || t < ck->win_t) /* the writer goes forward, inside the model */
            return ck->win_st = ck_err(ck, DDPC_ERR_INTERNAL, "sharded state %d: float %zu "
                                       "asked for out of order (window %ld loaded)", s, pos,
                                       ck->win_t);
        while (ck->win_t < t && load_window(ck, ++ck->win_t, numel, len) == DDPC_OK)
            ;
        if (ck->win_st != DDPC_OK)
            break;
        const win_t w = window(ck, t, numel);
        const size_t m = w.b - pos < n ? w.b - pos : n;
        memcpy(dst, ck->win + (pos - w.a), m * sizeof(float));
        dst += m, pos += m, n -= m;
    }
    return ck->win_st;
}

float *ck_shard_piece(ddpc_ckpt_t ck) { return ck->win + ck->win_len; }

ddpc_status_t ck_shard_save_end(ddpc_ckpt_t ck)
{
    size_t off = 0, len = 0;
    if (!ck_sharded(ck, &off, &len, NULL) || ck->device != DDPC_DEVICE_HOST)
        return DDPC_OK;
    const size_t numel = model_numel(ck);
    const long total = windows(ck, numel);
    ddpc_status_t st = DDPC_OK;
    if (ck->rank == 0) { /* the windows the writer did not ask for (it failed, or padding) */
        while (ck->win_st == DDPC_OK && ck->win_t + 1 < total)
            load_window(ck, ++ck->win_t, numel, len);
        st = ck->win_st;
        ck_shard_release(ck);
        return st;
    }
    for (long t = 0; t < total && st == DDPC_OK; t++) {
        const win_t w = window(ck, t, numel);
        size_t lo = w.a > off ? w.a : off, hi = w.b < off + len ? w.b : off + len;
        if (lo >= hi)
            continue;
        ddpc_comm_tag_next(ck->comm, "ckpt optimizer shards");
        st = ddpc_send(ck->comm, ddpc_optim_state(ck->opt, w.s, NULL) + (lo - off), hi - lo,
                       DDPC_F32, 0);
        if (st != DDPC_OK)
            st = ck_err(ck, st, "sending the optimizer's shard to rank 0 (window %ld): %s", t,
                        ddpc_last_error(ck->rt));
    }
    return st;
}

/* A device engine's slices into rank 0's shadow (state k at (k + 1) x
 * numel, as the unsharded arenas), m <= bounce / size floats of every
 * rank's slice at a time through the bounce buffer: device memory is never
 * spent on the whole state, and the host's is the shadow every device
 * engine has. */
static ddpc_status_t gather_device(ddpc_ckpt_t ck, size_t len)
{
#ifdef DDPC_HAVE_CUDA
    if (ck->rank == 0)
        ck_join(ck); /* an async writer reads the shadow itself (no snapshot copy) */
    cudaStream_t s = (cudaStream_t)ddpc_ddp_stream(ck->ddp);
    const size_t c = ck->bounce_numel / (size_t)ck->size, numel = model_numel(ck);
    if (c == 0)
        return ck_err(ck, DDPC_ERR_INVALID, "gathering the optimizer's shards: the bounce buffer "
                      "of %zu floats (DDPC_CKPT_CHUNK_MB) holds less than one float per rank "
                      "(%d ranks)", ck->bounce_numel, ck->size);
    ddpc_status_t st;
    for (int k = 0; k < ddpc_optim_num_states(ck->opt); k++) {
        const float *mine = ddpc_optim_state(ck->opt, k, NULL);
        float *host = ck->shadow + (size_t)(k + 1) * numel;
        for (size_t off = 0; off < len; off += c) {
            const size_t m = len - off < c ? len - off : c;
            ddpc_comm_tag_next(ck->comm, "ckpt optimizer shards");
            if ((st = ddpc_gather(ck->comm, mine + off, ck->rank == 0 ? ck->bounce : NULL, m,
                                  DDPC_F32, 0)) != DDPC_OK)
                return ck_err(ck, st, "gathering the optimizer's shards: %s",
                              ddpc_last_error(ck->rt));
            for (int r = 0; r < ck->size && ck->rank == 0; r++) {
                const size_t at = (size_t)r * len + off; /* the padding past numel stays */
                if (at < numel)
                    CK_CU(cudaMemcpyAsync(host + at, ck->bounce + (size_t)r * m,
                                          (numel - at < m ? numel - at : m) * sizeof(float),
                                          cudaMemcpyDeviceToHost, s),
                          "gathering the optimizer's shards");
            }
            CK_CU(cudaStreamSynchronize(s), "gathering the optimizer's shards");
        }
    }
    return DDPC_OK;
#else
    (void)len;
    return ck_err(ck, DDPC_ERR_UNSUPPORTED, "device engine in a build without CUDA");
#endif
}

/* ------------------------------------------------------------------ load */

int ck_shard_staged(ddpc_ckpt_t ck, int run)
{
    return run >= 1 && run <= ddpc_optim_num_states(ck->opt) && ck_sharded(ck, NULL, NULL, NULL);
}

/* Zero this slice's floats past the model (the padding of the last ranks):
 * the optimizer's invariant, which no window of the file covers. */
static ddpc_status_t zero_padding(ddpc_ckpt_t ck, size_t off, size_t len, size_t numel)
{
    if (off + len <= numel)
        return DDPC_OK;
    const size_t from = off > numel ? 0 : numel - off;
    for (int k = 0; k < ddpc_optim_num_states(ck->opt); k++) {
        float *mine = ddpc_optim_state(ck->opt, k, NULL) + from;
        if (ck->device == DDPC_DEVICE_HOST) {
            memset(mine, 0, (len - from) * sizeof(float));
            continue;
        }
#ifdef DDPC_HAVE_CUDA
        CK_CU(cudaMemsetAsync(mine, 0, (len - from) * sizeof(float),
                              (cudaStream_t)ddpc_ddp_stream(ck->ddp)), "loading the optimizer's shard");
#endif
    }
#ifdef DDPC_HAVE_CUDA
    if (ck->device != DDPC_DEVICE_HOST)
        CK_CU(cudaStreamSynchronize((cudaStream_t)ddpc_ddp_stream(ck->ddp)),
              "loading the optimizer's shard");
#endif
    return DDPC_OK;
}

ddpc_status_t ck_shard_load_begin(ddpc_ckpt_t ck, size_t chunk)
{
    size_t off = 0, len = 0;
    if (!ck_sharded(ck, &off, &len, NULL))
        return DDPC_OK;
    ddpc_status_t st = win_alloc(ck, window_len(chunk));
    if (st == DDPC_OK)
        st = zero_padding(ck, off, len, model_numel(ck));
    int32_t bad = st != DDPC_OK, any = 0;
    ddpc_status_t cst = ddpc_comm_host_allreduce(ck->comm, &bad, &any, 1, DDPC_I32, DDPC_MAX);
    if (cst != DDPC_OK)
        return ck_err(ck, cst, "load: %s", ddpc_last_error(ck->rt));
    if (st != DDPC_OK)
        return st;
    return any ? ck_err(ck, DDPC_ERR_NOMEM, "load: another rank cannot hold its window of the "
                        "sharded optimizer state (see its message)") : DDPC_OK;
}

size_t ck_shard_stage_len(ddpc_ckpt_t ck) { return ck->win_len; }

float *ck_shard_stage(ddpc_ckpt_t ck, int which) { return ck->win + (size_t)which * ck->win_len; }

ddpc_status_t ck_shard_keep(ddpc_ckpt_t ck, int s, size_t start, const float *data, size_t n)
{
    size_t off = 0, len = 0;
    ck_sharded(ck, &off, &len, NULL);
    const size_t lo = start > off ? start : off;
    const size_t hi = start + n < off + len ? start + n : off + len;
    if (lo >= hi)
        return DDPC_OK;
    float *mine = ddpc_optim_state(ck->opt, s, NULL) + (lo - off);
    if (ck->device == DDPC_DEVICE_HOST) {
        memcpy(mine, data + (lo - start), (hi - lo) * sizeof(float));
        return DDPC_OK;
    }
#ifdef DDPC_HAVE_CUDA
    cudaStream_t st = (cudaStream_t)ddpc_ddp_stream(ck->ddp);
    CK_CU(cudaMemcpyAsync(mine, data + (lo - start), (hi - lo) * sizeof(float),
                          cudaMemcpyHostToDevice, st), "loading the optimizer's shard");
    CK_CU(cudaStreamSynchronize(st), "loading the optimizer's shard");
    return DDPC_OK;
#else
    return DDPC_ERR_UNSUPPORTED;
#endif
}
