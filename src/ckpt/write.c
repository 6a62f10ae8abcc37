/* SPDX-License-Identifier: BSD-3-Clause */
/* write.c: rank 0's writer. One save = one HDF5 file written as
 * <dir>/ckpt-<step>.h5.tmp.<pid>.<host>, closed, fsynced, renamed to ckpt-<step>.h5, the
 * directory fsynced; then older files beyond `keep` are removed. A failure
 * removes the .tmp and touches nothing else. Runs on the caller's thread
 * (sync save) or the background thread (async save); it only reads the job. */
#define _GNU_SOURCE /* sync_file_range, fallocate, memfd_create */
#include "config.h"
#include "ckpt_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static ddpc_status_t jerr(ck_job_t *j, ddpc_status_t st, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static ddpc_status_t jerr(ck_job_t *j, ddpc_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ddpc_format_msg(j->err, sizeof j->err, j->prefix, "ckpt", fmt, ap);
    va_end(ap);
    return j->st = st;
}

/* ------------------------------------------------------------------ the directory */

/* The step of "ckpt-<digits>.h5" (exactly), or -1. */
static long long file_step(const char *name)
{
    const char *p = name + 5;
    char *end;
    if (strncmp(name, "ckpt-", 5) || *p < '0' || *p > '9')
        return -1;
    long long s = strtoll(p, &end, 10);
    return strcmp(end, ".h5") ? -1 : s;
}

typedef struct {
    long long step;
    char name[32];
} entry_t;

static int newest_first(const void *a, const void *b)
{
    long long x = ((const entry_t *)a)->step, y = ((const entry_t *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The checkpoints of dir, newest first; -1 if dir cannot be read. */
static int scan(const char *dir, entry_t **out)
{
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        long long s = file_step(e->d_name);
        if (s < 0 || strlen(e->d_name) >= sizeof(*out)->name)
            continue;
        if (n == cap) {
            entry_t *m = realloc(*out, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *m);
            if (!m)
                break;
            *out = m;
        }
        (*out)[n].step = s;
        snprintf((*out)[n++].name, sizeof(*out)->name, "%s", e->d_name);
    }
    closedir(d);
    if (n)
        qsort(*out, (size_t)n, sizeof **out, newest_first);
    return n;
}

int ck_list(const char *dir, char (**paths)[CK_FILE_MAX])
{
    entry_t *e;
    int n = scan(dir, &e);
    *paths = NULL;
    if (n < 0)
        return -1; /* errno from opendir */
    if (n > 0 && !(*paths = malloc((size_t)n * sizeof **paths)))
        n = 0;
    for (int i = 0; i < n; i++)
        snprintf((*paths)[i], CK_FILE_MAX, "%s/%s", dir, e[i].name);
    free(e);
    return n;
}

/* Remove the temporary files of writers that died (ck_tmp_is_stale). */
static void remove_stale_tmp(ck_job_t *j)
{
    DIR *d = opendir(j->dir);
    if (!d)
        return;
    char p[CK_FILE_MAX + 256];
    const char *host = ddpc_world(j->rt)->host;
    for (struct dirent *e; (e = readdir(d));) {
        if (!ck_tmp_is_stale(e->d_name, host, j->exclusive))
            continue;
        snprintf(p, sizeof p, "%s/%s", j->dir, e->d_name);
        if (unlink(p) != 0 && errno != ENOENT)
            ddpc_log(j->rt, DDPC_LOG_WARN, "ckpt: cannot remove the stale %s: %s", p,
                     strerror(errno));
        else
            ddpc_log(j->rt, DDPC_LOG_INFO, "ckpt: removed %s, left by a writer that died", p);
    }
    closedir(d);
}

/* Keep the newest `keep` (and always the one just written). */
static void retain(ck_job_t *j)
{
    entry_t *e;
    int n = scan(j->dir, &e);
    char p[CK_FILE_MAX + 32];
    for (int i = j->keep; j->keep > 0 && i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", j->dir, e[i].name);
        if (strcmp(p, j->path) && unlink(p) != 0)
            ddpc_log(j->rt, DDPC_LOG_WARN, "ckpt: cannot remove old checkpoint %s: %s", p,
                     strerror(errno));
    }
    free(e);
}

/* mkdir -p */
static int make_dirs(const char *dir)
{
    char p[CK_DIR_MAX];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1;; s++)
        if (*s == '/' || !*s) {
            char c = *s;
            *s = 0;
            struct stat sb;
            int e = mkdir(p, 0777) == 0 ? 0 : errno; /* EEXIST, or EROFS for an existing one */
            if (e && stat(p, &sb) != 0)
                return errno = e, -1;
            if (e && !S_ISDIR(sb.st_mode))
                return errno = ENOTDIR, -1;
            if (!(*s = c))
                return 0;
        }
}

ddpc_status_t ck_prepare_dir(ddpc_ckpt_t ck)
{
    struct stat sb;
    if (lstat(ck->dir, &sb) == 0 && S_ISLNK(sb.st_mode) && stat(ck->dir, &sb) != 0) {
        int e = errno;
        char to[CK_FILE_MAX];
        ssize_t n = readlink(ck->dir, to, sizeof to - 1);
        to[n > 0 ? n : 0] = 0;
        return ck_err(ck, DDPC_ERR_IO, "checkpoint directory \"%s\" is a dangling symbolic link "
                      "(to \"%s\": %s): create its target, or give another directory", ck->dir,
                      to, strerror(e));
    }
    if (make_dirs(ck->dir) != 0)
        return ck_err(ck, DDPC_ERR_IO, "cannot create the checkpoint directory \"%s\": %s",
                      ck->dir, strerror(errno));
    /* a file made and removed: what a save does first (access(W_OK) would
       answer for the permission bits, not for a read-only mount or an ACL) */
    char probe[CK_FILE_MAX + 32];
    snprintf(probe, sizeof probe, "%s/.ddpc-probe-%ld", ck->dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return ck_err(ck, DDPC_ERR_IO, "checkpoint directory \"%s\" is not writable: cannot "
                      "create a file in it: %s", ck->dir, strerror(errno));
    close(fd);
    unlink(probe);
    return ck_lock_take(ck);
}

static int fsync_path(const char *path, int flags)
{
    int fd = open(path, flags);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* ------------------------------------------------------------------ the file */

/* One float32 dataset, written piece by piece with its CRC-32 (zlib's, over
 * the little-endian bytes) as attribute "crc32". fd: start writeback of each
 * piece at once, so the disk works while the CPU computes the next CRC. A
 * streamed item (data NULL: a sharded optimizer state) is read piece by
 * piece from the other ranks (ck_shard_read); -2: that failed (its message
 * is j->src's). */
static int write_item(hid_t f, const ck_item_t *it, int fd, ck_job_t *j)
{
    hsize_t dims[8];
    for (int k = 0; k < it->ndim; k++)
        dims[k] = (hsize_t)it->shape[k];
    hid_t sp = it->ndim ? H5Screate_simple(it->ndim, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t ds = -1;
    int rc = -1;
    if (sp < 0 || lcpl < 0 || dcpl < 0 || H5Pset_create_intermediate_group(lcpl, 1) < 0 ||
        H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) < 0 ||
        (ds = H5Dcreate2(f, it->path, H5T_IEEE_F32LE, sp, lcpl, dcpl, H5P_DEFAULT)) < 0)
        goto out;
    uint32_t crc = 0;
    ck_piece_t p;
    const size_t piece = it->data ? CK_PIECE / sizeof(float) : j->src->win_len;
    for (int more = ck_piece_first(&p, it, piece); more; more = ck_piece_next(&p)) {
        const float *data = it->data ? it->data + p.off : NULL;
        if (!it->data) {
            float *buf = ck_shard_piece(j->src);
            if (ck_shard_read(j->src, it->run - 1, it->pos + p.off, buf, p.n) != DDPC_OK) {
                rc = -2;
                goto out;
            }
            data = buf;
        }
        crc = ddpc_crc32(crc, data, p.n * sizeof(float));
        hid_t ms = ck_piece_select(&p, sp);
        herr_t w = ms < 0 ? -1 : H5Dwrite(ds, H5T_NATIVE_FLOAT, ms, sp, H5P_DEFAULT, data);
        if (ms >= 0)
            H5Sclose(ms);
        if (w < 0)
            goto out;
#ifdef SYNC_FILE_RANGE_WRITE
        if (fd >= 0)
            sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#endif
    }
    rc = ck_attr_put(ds, "crc32", H5T_STD_U32LE, H5T_NATIVE_UINT32, &crc);
out:
    if (ds >= 0)
        H5Dclose(ds);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    H5Sclose(sp);
    return rc;
}

/* /model's "names": the parameters in registration order (fixed-length strings). */
static int write_names(hid_t g, const ck_job_t *j)
{
    size_t len = 1;
    for (int i = 0; i < j->nparams; i++)
        if (strlen(j->items[i].path + 7) + 1 > len)
            len = strlen(j->items[i].path + 7) + 1;
    char *buf = calloc(j->nparams ? (size_t)j->nparams : 1, len);
    hid_t t = H5Tcopy(H5T_C_S1);
    hsize_t n = (hsize_t)j->nparams;
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t a = -1;
    int rc = -1;
    if (buf && t >= 0 && sp >= 0 && H5Tset_size(t, len) >= 0 &&
        H5Tset_strpad(t, H5T_STR_NULLTERM) >= 0 &&
        (a = H5Acreate2(g, "names", t, sp, H5P_DEFAULT, H5P_DEFAULT)) >= 0) {
        for (int i = 0; i < j->nparams; i++)
            memcpy(buf + (size_t)i * len, j->items[i].path + 7, strlen(j->items[i].path + 7));
        rc = H5Awrite(a, t, buf) < 0 ? -1 : 0;
    }
    if (a >= 0)
        H5Aclose(a);
    if (sp >= 0)
        H5Sclose(sp);
    if (t >= 0)
        H5Tclose(t);
    free(buf);
    return rc;
}

static int write_optim(hid_t g, const ck_job_t *j)
{
    const ddpc_optim_config_t *c = &j->ocfg;
    return ck_attr_str(g, "type", ddpc_optim_name(c->type)) | ck_attr_f64(g, "lr", c->lr) |
           ck_attr_f64(g, "momentum", c->momentum) | ck_attr_f64(g, "dampening", c->dampening) |
           ck_attr_i32(g, "nesterov", c->nesterov) |
           ck_attr_f64(g, "weight_decay", c->weight_decay) | ck_attr_f64(g, "beta1", c->beta1) |
           ck_attr_f64(g, "beta2", c->beta2) | ck_attr_f64(g, "eps", c->eps) |
           ck_attr_f64(g, "clip_norm", c->clip_norm) |
           ck_attr_i32(g, "dynamic_loss_scale", c->dynamic_loss_scale) |
           ck_attr_f64(g, "loss_scale", j->oscale) |
           ck_attr_i32(g, "scale_good_steps", j->ogood) |
           ck_attr_i32(g, "scale_growth_interval", c->scale_growth_interval) |
           ck_attr_u64(g, "step", j->osteps);
}

static int write_meta(hid_t f, const ck_job_t *j)
{
    const ddpc_ckpt_meta_t *m = &j->meta;
    char created[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    int rc = ck_attr_str(f, "format", CK_FORMAT) |
             ck_attr_i32(f, "format_version", CK_FORMAT_VERSION) |
             ck_attr_str(f, "ddpc_version", ddpc_version()) | ck_attr_u64(f, "step", m->step) |
             ck_attr_u64(f, "epoch", m->epoch) | ck_attr_i32(f, "world_size", j->world_size) |
             ck_attr_str(f, "created", created) |
             ck_attr_u64(f, "model_fingerprint", j->fingerprint);
    hid_t g;
    if (m->has_sampler) {
        if ((g = H5Gcreate2(f, "/sampler", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0)
            return -1;
        rc |= ck_attr_u64(g, "seed", m->sampler_seed) | ck_attr_u64(g, "epoch", m->sampler_epoch) |
              ck_attr_u64(g, "consumed", m->sampler_consumed) |
              ck_attr_u64(g, "dataset_size", m->sampler_dataset_size) |
              ck_attr_i32(g, "shuffle", m->sampler_shuffle) |
              ck_attr_i32(g, "drop_last", m->sampler_drop_last);
        H5Gclose(g);
    }
    if ((g = H5Gcreate2(f, "/rng", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0)
        return -1;
    if (m->rng_bytes) { /* an attribute: covered by HDF5's metadata checksums */
        hsize_t n = m->rng_bytes;
        hid_t sp = H5Screate_simple(1, &n, NULL);
        hid_t a = sp < 0 ? -1 : H5Acreate2(g, "state", H5T_STD_U8LE, sp, H5P_DEFAULT, H5P_DEFAULT);
        rc |= a < 0 || H5Awrite(a, H5T_NATIVE_UINT8, m->rng) < 0 ? -1 : 0;
        if (a >= 0)
            H5Aclose(a);
        if (sp >= 0)
            H5Sclose(sp);
    }
    H5Gclose(g);
    if ((g = H5Gcreate2(f, "/user", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0)
        return -1;
    for (int i = 0; i < j->nattrs; i++)
        rc |= j->attrs[i].is_string ? ck_attr_str(g, j->attrs[i].name, j->attrs[i].str)
                                    : ck_attr_f64(g, j->attrs[i].name, j->attrs[i].num);
    H5Gclose(g);
    if ((g = H5Gcreate2(f, "/model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0)
        return -1;
    rc |= write_names(g, j);
    H5Gclose(g);
    if (j->has_optim) {
        if ((g = H5Gcreate2(f, "/optim", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0)
            return -1;
        rc |= write_optim(g, j);
        H5Gclose(g);
    }
    return rc;
}

/* Close f after a failure (j->st, j->err set); the caller removes the .tmp.
 * H5Fclose writes the metadata HDF5 still holds; on a full disk that write
 * fails too, and HDF5 1.10 (H5F__dest; CVE-2020-10812, changed upstream by
 * HDFGroup/hdf5 pull request 2291) then frees the file's structure but keeps
 * its identifier, which HDF5's atexit handler closes again: SIGSEGV at the
 * process's exit (so would H5Idec_ref or a second H5Fclose: tried). H5Fclose
 * cannot be undone or retried, so the sec2 driver's descriptor (fd,
 * from H5Fget_vfd_handle) is first pointed at an anonymous memory file: the
 * abandoned file's last writes land there and cannot fail for want of
 * space, the close succeeds and the identifier is gone. */
static ddpc_status_t discard_h5(ck_job_t *j, hid_t f, int fd)
{
    char h5[512];
#ifdef MFD_CLOEXEC
    int m = fd >= 0 ? memfd_create("ddpc-ckpt-discard", MFD_CLOEXEC) : -1;
    if (m >= 0) {
        if (dup2(m, fd) < 0)
            ddpc_log(j->rt, DDPC_LOG_WARN, "ckpt: cannot redirect the abandoned %s: %s", j->tmp,
                     strerror(errno));
        close(m);
    }
#endif
    ck_h5_msg(h5, sizeof h5); /* the failure is reported already */
    if (H5Fclose(f) < 0)
        ddpc_log(j->rt, DDPC_LOG_ERROR, "ckpt: HDF5 cannot close the abandoned %s either: %s "
                 "(HDF5 1.10 may then crash when the process exits)", j->tmp,
                 ck_h5_msg(h5, sizeof h5));
    return j->st;
}

/* Before the close: the disk blocks of the whole file as HDF5 has laid it
 * out (H5Fget_filesize: its end of allocation), holes included, where the
 * metadata HDF5 still holds will be written; then the close cannot fail for
 * want of space. It must not fail: a failed metadata flush leaves HDF5
 * 1.10's cache unable to flush again ("slist already enabled?"), so even
 * discard_h5's close would fail and leave the identifier behind. Where the
 * file system cannot reserve (EOPNOTSUPP), nothing is reserved. */
static ddpc_status_t reserve(ck_job_t *j, hid_t f, int fd)
{
#ifdef FALLOC_FL_KEEP_SIZE
    char h5[512];
    hsize_t size = 0;
    if (fd < 0)
        return DDPC_OK;
    if (H5Fget_filesize(f, &size) < 0)
        return jerr(j, DDPC_ERR_HDF5, "cannot get the size of %s: %s", j->tmp,
                    ck_h5_msg(h5, sizeof h5));
    if (fallocate(fd, 0, 0, (off_t)size) != 0 && errno != EOPNOTSUPP && errno != ENOSYS &&
        errno != EINVAL)
        return jerr(j, DDPC_ERR_IO, "cannot reserve the %llu bytes of %s for its metadata: %s",
                    (unsigned long long)size, j->tmp, strerror(errno));
#else
    (void)j, (void)f, (void)fd;
#endif
    return DDPC_OK;
}

/* Under the HDF5 lock: the whole file at j->tmp, closed. */
static ddpc_status_t write_h5(ck_job_t *j)
{
    char h5[512];
    hid_t fapl = ck_fapl();
    /* strong: H5Fclose closes whatever of the file is still open, so that no
     * object left open on an error path keeps the file open to the exit */
    if (fapl >= 0 && H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0) {
        H5Pclose(fapl);
        fapl = -1;
    }
    hid_t f = fapl < 0 ? -1 : H5Fcreate(j->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (fapl >= 0)
        H5Pclose(fapl);
    if (f < 0)
        return jerr(j, DDPC_ERR_IO, "cannot create %s: %s", j->tmp, ck_h5_msg(h5, sizeof h5));
    int *fdp = NULL, fd = -1;
    if (H5Fget_vfd_handle(f, H5P_DEFAULT, (void **)&fdp) >= 0 && fdp)
        fd = *fdp;
    if (write_meta(f, j) < 0) {
        jerr(j, DDPC_ERR_HDF5, "cannot write the attributes of %s: %s", j->tmp,
             ck_h5_msg(h5, sizeof h5));
        return discard_h5(j, f, fd);
    }
    for (int i = 0; i < j->nitems; i++) {
        if (j->stall_s > 0 && i == j->nitems / 2) {
            ddpc_log(j->rt, DDPC_LOG_WARN, "ckpt: DDPC_CKPT_TEST_STALL: stalling %gs in the middle "
                     "of writing %s", j->stall_s, j->tmp);
            nanosleep(&(struct timespec){(time_t)j->stall_s,
                                         (long)((j->stall_s - (double)(time_t)j->stall_s) * 1e9)},
                      NULL);
        }
        int w = write_item(f, &j->items[i], fd, j);
        if (w == -2)
            jerr(j, j->src->win_st, "cannot write %s to %s: %s", j->items[i].path, j->tmp,
                 ck_body(j->src, j->src->err));
        else if (w < 0)
            jerr(j, DDPC_ERR_IO, "cannot write %s (%zu floats) to %s: %s", j->items[i].path,
                 j->items[i].numel, j->tmp, ck_h5_msg(h5, sizeof h5));
        if (w < 0)
            return discard_h5(j, f, fd);
    }
    if (reserve(j, f, fd) != DDPC_OK)
        return discard_h5(j, f, fd);
    if (H5Fclose(f) < 0)
        return jerr(j, DDPC_ERR_IO, "cannot close %s: %s", j->tmp, ck_h5_msg(h5, sizeof h5));
    return DDPC_OK;
}

ddpc_status_t ck_write(ck_job_t *j)
{
    j->st = DDPC_OK;
    j->err[0] = 0;
    const double t_write = ddpc_tl_t0();
    if (make_dirs(j->dir) != 0)
        return jerr(j, DDPC_ERR_IO, "cannot create the checkpoint directory %s: %s", j->dir,
                    strerror(errno));
    remove_stale_tmp(j);
    double t0 = ddpc_now(), t1;
    ck_h5_enter();
    ddpc_status_t st = write_h5(j);
    ck_h5_leave();
    t1 = ddpc_now();
    if (st == DDPC_OK && fsync_path(j->tmp, O_RDONLY) != 0)
        st = jerr(j, DDPC_ERR_IO, "cannot fsync %s: %s", j->tmp, strerror(errno));
    if (st == DDPC_OK && rename(j->tmp, j->path) != 0)
        st = jerr(j, DDPC_ERR_IO, "cannot rename %s to %s: %s", j->tmp, j->path, strerror(errno));
    if (st != DDPC_OK) {
        unlink(j->tmp);
        return st;
    }
    /* renamed: the checkpoint exists; a failed directory fsync only weakens
     * its durability against a power loss, so it is reported, not undone */
    if (fsync_path(j->dir, O_RDONLY | O_DIRECTORY) != 0)
        return jerr(j, DDPC_ERR_IO, "wrote %s but cannot fsync its directory: %s", j->path,
                    strerror(errno));
    double t2 = ddpc_now(), bytes = 0;
    retain(j);
    for (int i = 0; i < j->nitems; i++)
        bytes += (double)j->items[i].numel * sizeof(float);
    ddpc_log(j->rt, DDPC_LOG_INFO, "ckpt: wrote %s: %.3f GB in %.3fs (%.2f GB/s): HDF5 %.3fs, "
             "fsync and rename %.3fs, retention %.3fs", j->path, bytes / 1e9, ddpc_now() - t0,
             bytes / 1e9 / (ddpc_now() - t0), t1 - t0, t2 - t1, ddpc_now() - t2);
    ddpc_tl_span("checkpoint write", t_write, (int64_t)j->meta.step);
    return DDPC_OK;
}
