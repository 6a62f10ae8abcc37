/* SPDX-License-Identifier: BSD-3-Clause */
/* load.c: restart. Rank 0 picks the newest checkpoint that validates, checks
 * it against the registered model, and reads it in pieces straight into its
 * own arenas, broadcasting them in windows as it goes. Every rank runs the
 * same sequence of broadcasts: rank 0 sends a head per candidate file and a
 * status before each window, so its failure reaches every rank, not a hang. */
#define _GNU_SOURCE /* posix_fadvise */
#include "config.h"
#include "reader.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Rank 0 -> every rank, once per candidate file. */
typedef struct {
    int32_t status;               /* DDPC_OK: its tensors follow */
    char msg[DDPC_ERRMSG_LEN];
    char path[CK_FILE_MAX];
    uint64_t chunk_elems;         /* window size, rank 0's */
    ddpc_ckpt_meta_t meta;
    int32_t has_optim;
    uint64_t osteps;
    double olr, oscale;
    int32_t ogood;
    int32_t nattrs;
    ck_attr_t attrs[CK_MAX_ATTRS];
} head_t;

/* Rank 0 -> every rank, before each window. */
typedef struct {
    int32_t status; /* DDPC_OK: the window's floats follow */
    int32_t retry;  /* the file is bad: everyone moves on to the previous one */
} ctl_t;

/* Rank 0's side of a load. */
typedef struct {
    const char *want;             /* the path asked for, or NULL: newest valid */
    char (*cands)[CK_FILE_MAX];
    int ncand, next;
    hid_t f;
    int fd;
    char first_bad[DDPC_ERRMSG_LEN]; /* why the newest candidate was skipped */
    int list_errno;               /* the directory could not be read */
} r0_t;

/* ------------------------------------------------------------------ checks (rank 0) */

static void type_str(hid_t t, char *s, size_t n)
{
    H5T_class_t c = H5Tget_class(t);
    size_t sz = H5Tget_size(t);
    if (c == H5T_FLOAT && sz == 4 && H5Tequal(t, H5T_IEEE_F32LE) <= 0 &&
        H5Tequal(t, H5T_IEEE_F32BE) <= 0) /* what HDF5 would convert, but not IEEE's float32 */
        snprintf(s, n, "float32 of a non-IEEE layout");
    else if (c == H5T_FLOAT)
        snprintf(s, n, "float%zu", 8 * sz);
    else if (c == H5T_INTEGER)
        snprintf(s, n, "%sint%zu", H5Tget_sign(t) == H5T_SGN_NONE ? "u" : "", 8 * sz);
    else
        snprintf(s, n, "(HDF5 class %d)", (int)c);
}

static void shape_str(const char *dtype, int ndim, const int64_t *shape, char *s, size_t n)
{
    int k = snprintf(s, n, "%s[", dtype);
    for (int i = 0; i < ndim && k > 0 && (size_t)k < n; i++)
        k += snprintf(s + k, n - (size_t)k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k > 0 && (size_t)k < n)
        snprintf(s + k, n - (size_t)k, "]");
}

/* The item's dataset exists in f as float32 of the item's shape. */
static ddpc_status_t check_item(ddpc_ckpt_t ck, hid_t f, const char *file, const ck_item_t *it)
{
    char h5[512], mine[300], theirs[300], dt[32];
    hid_t ds = H5Dopen2(f, it->path, H5P_DEFAULT);
    if (ds < 0)
        return ck_err(ck, DDPC_ERR_MISMATCH, "%s does not match: it has no dataset %s (%s)", file,
                      it->path, ck_h5_msg(h5, sizeof h5));
    hid_t sp = H5Dget_space(ds), t = H5Dget_type(ds);
    int ndim = sp < 0 || H5Sget_simple_extent_type(sp) == H5S_NULL ? -1 /* no elements at all */
                                                                   : H5Sget_simple_extent_ndims(sp);
    hsize_t dims[8] = {0};
    int64_t shape[8] = {0};
    if (ndim >= 0 && ndim <= 8)
        H5Sget_simple_extent_dims(sp, dims, NULL);
    for (int k = 0; k < 8; k++)
        shape[k] = (int64_t)dims[k];
    type_str(t, dt, sizeof dt);
    int same = ndim == it->ndim && !strcmp(dt, "float32") &&
               !memcmp(shape, it->shape, (size_t)it->ndim * sizeof *shape);
    H5Tclose(t);
    H5Sclose(sp);
    H5Dclose(ds);
    if (same)
        return DDPC_OK;
    shape_str("float32", it->ndim, it->shape, mine, sizeof mine);
    shape_str(dt, ndim < 0 || ndim > 8 ? 0 : ndim, shape, theirs, sizeof theirs);
    if (ndim < 0 || ndim > 8)
        snprintf(theirs + strlen(theirs) - 2, sizeof theirs - strlen(theirs) + 2,
                 ndim < 0 ? " with a null dataspace" : " of rank %d", ndim);
    return ck_err(ck, DDPC_ERR_MISMATCH, "%s does not match: %s is %s here but %s in the checkpoint",
                  file, it->path, mine, theirs);
}

/* A checkpoint is untrusted input (HDF5's security policy: the library is
 * not designed for crafted files). Before any data is read, every dataset
 * the load will read must be reached through hard links only and keep its
 * data in this file: an external or soft link, a virtual dataset or external
 * storage would make HDF5 open other files, which the loader refuses. NULL
 * when it is fine (or missing: check_item says that), else why (in buf). */
static const char *foreign(hid_t f, const char *path, char *buf, size_t n)
{
    char prefix[CK_DSET_MAX];
    H5L_type_t type;
    ck_path_t how = ck_reader_path(f, path, H5P_DEFAULT, prefix, sizeof prefix, &type);
    if (how == CK_PATH_LINK) {
        const char *kind = ck_reader_link_kind(type);
        snprintf(buf, n, "%s is %s %s link", prefix, kind[0] == 'e' ? "an" : "a", kind);
        return buf;
    }
    hid_t ds = how == CK_PATH_HARD ? H5Dopen2(f, path, H5P_DEFAULT) : -1;
    if (ds < 0)
        return NULL;
    hid_t dcpl = H5Dget_create_plist(ds);
    ck_store_t where = dcpl >= 0 ? ck_reader_storage(dcpl) : CK_STORE_LOCAL;
    if (dcpl >= 0)
        H5Pclose(dcpl);
    H5Dclose(ds);
    if (where == CK_STORE_LOCAL)
        return NULL;
    snprintf(buf, n, "%s is %s", path,
             where == CK_STORE_VIRTUAL ? "a virtual dataset" : "a dataset stored in external files");
    return buf;
}

/* Parameters in order: names (the /model "names" list) and shapes; the first
 * difference is named. *bad: the file itself is unreadable. */
static ddpc_status_t check_model(ddpc_ckpt_t ck, hid_t f, const char *file, const ck_item_t *items,
                                 int np, int *bad)
{
    char h5[512];
    hid_t a = H5Aopen_by_name(f, "/model", "names", H5P_DEFAULT, H5P_DEFAULT);
    hid_t sp = a < 0 ? -1 : H5Aget_space(a), ft = a < 0 ? -1 : H5Aget_type(a);
    hid_t t = H5Tcopy(H5T_C_S1);
    ddpc_status_t st = DDPC_OK;
    hssize_t nf = sp < 0 ? -1 : H5Sget_simple_extent_npoints(sp);
    size_t len = ft < 0 ? 0 : H5Tget_size(ft);
    /* sized by the file: a list no model has is refused before any allocation */
    if (nf > CK_NAMES_MAX || len > CK_NAME_BYTES_MAX ||
        (double)(nf + 1) * (double)(len + 1) > (double)CK_NAMES_MAX * 64) {
        *bad = 1;
        st = ck_err(ck, DDPC_ERR_FORMAT, "%s: its parameter names (/model attribute \"names\") "
                    "are %lld strings of %zu bytes: more than any model's", file, (long long)nf, len);
        nf = -1;
    }
    char *names = nf >= 0 && len ? calloc((size_t)nf + 1, len + 1) : NULL;
    if (st == DDPC_OK && (!names || H5Tset_size(t, len + 1) < 0 || H5Aread(a, t, names) < 0)) {
        *bad = 1;
        st = ck_err(ck, DDPC_ERR_FORMAT, "%s: cannot read the parameter names (/model attribute "
                    "\"names\"): %s", file, ck_h5_msg(h5, sizeof h5));
    }
    for (int i = 0; st == DDPC_OK && i < np && i < nf; i++) {
        const char *theirs = names + (size_t)i * (len + 1), *mine = items[i].path + 7;
        if (strcmp(mine, theirs))
            st = ck_err(ck, DDPC_ERR_MISMATCH, "%s is a checkpoint of another model: parameter %d "
                        "is \"%s\" here but \"%s\" in the checkpoint", file, i, mine, theirs);
        else
            st = check_item(ck, f, file, &items[i]);
    }
    if (st == DDPC_OK && nf != np)
        st = ck_err(ck, DDPC_ERR_MISMATCH, "%s is a checkpoint of another model: it has %lld "
                    "parameters, the model %d; parameter %d \"%s\" is only in the %s", file,
                    (long long)nf, np, nf < np ? (int)nf : np,
                    nf < np ? items[nf].path + 7 : names + (size_t)np * (len + 1),
                    nf < np ? "model" : "checkpoint");
    free(names);
    CK_CLOSE(t, ft, sp, a);
    return st;
}

/* The optimizer's type must match; its counters come back in the head.
 * Different hyperparameters are allowed (this run's win) and reported.
 * *bad: its attributes are unreadable or out of range (skip the file). */
static ddpc_status_t check_optim(ddpc_ckpt_t ck, hid_t f, const char *file, head_t *h, int *bad)
{
    char h5[512], type[32] = "";
    const ddpc_optim_config_t *c = ddpc_optim_config(ck->opt);
    const char *mine = ddpc_optim_name(c->type);
    hid_t g = H5Lexists(f, "optim", H5P_DEFAULT) > 0 ? H5Gopen2(f, "/optim", H5P_DEFAULT) : -1;
    if (g < 0)
        return ck_err(ck, DDPC_ERR_MISMATCH, "%s holds no optimizer state, but a %s optimizer "
                      "was given (create the checkpoint handle without it to load the parameters "
                      "only)", file, mine);
    static const char *const names[] = {"momentum", "dampening", "weight_decay",
                                        "beta1",    "beta2",     "eps", "clip_norm"};
    const double here[] = {c->momentum, c->dampening, c->weight_decay, c->beta1,
                           c->beta2,    c->eps,       c->clip_norm};
    double v;
    ddpc_status_t st = DDPC_OK;
    if (ck_attr_get_str(g, "type", type, sizeof type) < 0 ||
        ck_attr_get(g, "step", H5T_NATIVE_UINT64, &h->osteps) < 0 ||
        ck_attr_get(g, "lr", H5T_NATIVE_DOUBLE, &h->olr) < 0 ||
        ck_attr_get(g, "loss_scale", H5T_NATIVE_DOUBLE, &h->oscale) < 0)
        *bad = 1, st = ck_err(ck, DDPC_ERR_FORMAT, "%s: cannot read the /optim attributes: %s",
                              file, ck_h5_msg(h5, sizeof h5));
    else if (H5Aexists(g, "scale_good_steps") > 0 &&
             ck_attr_get(g, "scale_good_steps", H5T_NATIVE_INT32, &h->ogood) < 0)
        *bad = 1, st = ck_err(ck, DDPC_ERR_FORMAT, "%s: cannot read /optim scale_good_steps: %s",
                              file, ck_h5_msg(h5, sizeof h5));
    else if (!(isfinite(h->olr) && h->olr >= 0) || !(isfinite(h->oscale) && h->oscale > 0) ||
             h->ogood < 0) /* installed as they are: never a NaN learning rate */
        *bad = 1, st = ck_err(ck, DDPC_ERR_FORMAT, "%s: /optim holds lr %g, loss_scale %g, "
                              "scale_good_steps %d: expected a finite lr >= 0, a finite "
                              "loss_scale > 0 and scale_good_steps >= 0", file, h->olr, h->oscale,
                              (int)h->ogood);
    else if (strcmp(type, mine))
        st = ck_err(ck, DDPC_ERR_MISMATCH, "%s holds %s optimizer state, but the optimizer is %s",
                    file, type, mine);
    for (int i = 0; st == DDPC_OK && i < (int)(sizeof names / sizeof names[0]); i++)
        if (ck_attr_get(g, names[i], H5T_NATIVE_DOUBLE, &v) == 0 && v != here[i])
            ddpc_log(ck->rt, DDPC_LOG_WARN, "ckpt: %s was saved with %s %g; continuing with %g",
                     file, names[i], v, here[i]);
    ck_h5_msg(h5, sizeof h5); /* forget why an optional one could not be read */
    H5Gclose(g);
    h->has_optim = 1;
    return st;
}

static herr_t read_user_attr(hid_t loc, const char *name, const H5A_info_t *info, void *arg)
{
    head_t *h = arg;
    if (h->nattrs == CK_MAX_ATTRS || strlen(name) >= CK_ATTR_NAME)
        return 0;
    ck_attr_t *a = &h->attrs[h->nattrs];
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    hid_t at = H5Aopen(loc, name, H5P_DEFAULT), t = at < 0 ? -1 : H5Aget_type(at);
    H5T_class_t c = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    if (t >= 0)
        H5Tclose(t);
    if (at >= 0)
        H5Aclose(at);
    a->is_string = c == H5T_STRING;
    if (a->is_string ? ck_attr_get_str(loc, name, a->str, sizeof a->str)
                     : ck_attr_get(loc, name, H5T_NATIVE_DOUBLE, &a->num))
        return -1;
    h->nattrs++;
    return 0;
}

/* Counters, sampler, RNG, user attributes: the head of an open file. */
static int read_meta(hid_t f, head_t *h)
{
    ddpc_ckpt_meta_t *m = &h->meta;
    int rc = ck_attr_get(f, "step", H5T_NATIVE_UINT64, &m->step) |
             ck_attr_get(f, "epoch", H5T_NATIVE_UINT64, &m->epoch) |
             ck_attr_get(f, "world_size", H5T_NATIVE_INT, &m->world_size);
    hid_t g;
    if (rc == 0 && H5Lexists(f, "sampler", H5P_DEFAULT) > 0 &&
        (g = H5Gopen2(f, "/sampler", H5P_DEFAULT)) >= 0) {
        m->has_sampler = 1;
        rc |= ck_attr_get(g, "seed", H5T_NATIVE_UINT64, &m->sampler_seed) |
              ck_attr_get(g, "epoch", H5T_NATIVE_UINT64, &m->sampler_epoch) |
              ck_attr_get(g, "consumed", H5T_NATIVE_UINT64, &m->sampler_consumed) |
              ck_attr_get(g, "dataset_size", H5T_NATIVE_UINT64, &m->sampler_dataset_size) |
              ck_attr_get(g, "shuffle", H5T_NATIVE_INT, &m->sampler_shuffle) |
              ck_attr_get(g, "drop_last", H5T_NATIVE_INT, &m->sampler_drop_last);
        H5Gclose(g);
    }
    if (rc == 0 && (g = H5Gopen2(f, "/rng", H5P_DEFAULT)) >= 0) {
        if (H5Aexists(g, "state") > 0) {
            hid_t a = H5Aopen(g, "state", H5P_DEFAULT), sp = a < 0 ? -1 : H5Aget_space(a);
            hssize_t n = sp < 0 ? -1 : H5Sget_simple_extent_npoints(sp);
            if (n < 0 || (size_t)n > sizeof m->rng || H5Aread(a, H5T_NATIVE_UINT8, m->rng) < 0)
                rc = -1;
            m->rng_bytes = n > 0 ? (size_t)n : 0;
            if (sp >= 0)
                H5Sclose(sp);
            if (a >= 0)
                H5Aclose(a);
        }
        H5Gclose(g);
    }
    if (rc == 0 && (g = H5Gopen2(f, "/user", H5P_DEFAULT)) >= 0) {
        hsize_t idx = 0;
        if (H5Aiterate2(g, H5_INDEX_NAME, H5_ITER_INC, &idx, read_user_attr, h) < 0)
            rc = -1;
        H5Gclose(g);
    }
    return rc;
}

/* Everything but the tensors' contents. *bad: the file is unreadable or not a
 * checkpoint (skip it); otherwise a failure is final (another model). */
static ddpc_status_t check_file(ddpc_ckpt_t ck, hid_t f, const char *file, const ck_item_t *items,
                                int nitems, int np, head_t *h, int *bad)
{
    char h5[512], fmt[64] = "";
    int ver = 0;
    uint64_t fp = 0;
    *bad = 1;
    if (ck_attr_get_str(f, "format", fmt, sizeof fmt) < 0)
        return ck_err(ck, DDPC_ERR_FORMAT, "%s is not a ddpc checkpoint: no attribute format = "
                      "\"%s\" (%s)", file, CK_FORMAT, ck_h5_msg(h5, sizeof h5));
    if (strcmp(fmt, CK_FORMAT))
        return ck_err(ck, DDPC_ERR_FORMAT, "%s is not a ddpc checkpoint (attribute format is \"%s\", "
                      "expected \"%s\")", file, fmt, CK_FORMAT);
    /* nothing else is opened before the groups and datasets are known to be local */
    static const char *const groups[] = {"/model", "/optim", "/sampler", "/rng", "/user"};
    char why[CK_DSET_MAX + 64];
    const char *no = NULL;
    for (size_t i = 0; !no && i < sizeof groups / sizeof *groups; i++)
        no = foreign(f, groups[i], why, sizeof why);
    for (int i = 0; !no && i < nitems; i++)
        no = foreign(f, items[i].path, why, sizeof why);
    if (no) /* unusable (*bad): the previous checkpoint is tried */
        return ck_err(ck, DDPC_ERR_FORMAT, "%s is refused: %s (a checkpoint keeps its data in "
                      "plain groups and datasets of its own file)", file, no);
    if (ck_attr_get(f, "format_version", H5T_NATIVE_INT, &ver) < 0 ||
        ck_attr_get(f, "model_fingerprint", H5T_NATIVE_UINT64, &fp) < 0 || read_meta(f, h) < 0)
        return ck_err(ck, DDPC_ERR_FORMAT, "%s: cannot read its attributes: %s", file,
                      ck_h5_msg(h5, sizeof h5));
    *bad = 0;
    if (ver > CK_FORMAT_VERSION)
        return ck_err(ck, DDPC_ERR_FORMAT, "%s has format version %d; this ddpc (%s) reads up to %d",
                      file, ver, ddpc_version(), CK_FORMAT_VERSION);
    ddpc_status_t st = check_model(ck, f, file, items, np, bad);
    if (st == DDPC_OK && ck->opt)
        st = check_optim(ck, f, file, h, bad);
    for (int i = np; st == DDPC_OK && i < nitems; i++)
        st = check_item(ck, f, file, &items[i]);
    if (st == DDPC_OK && fp != ck_model_fingerprint(ck->ddp))
        st = ck_err(ck, DDPC_ERR_MISMATCH, "%s: model fingerprint %016llx differs from the model's "
                    "%016llx although names and shapes agree", file, (unsigned long long)fp,
                    (unsigned long long)ck_model_fingerprint(ck->ddp));
    return st;
}

/* Rank 0, after a load from the directory: the candidates skipped for the
 * one loaded (all newer than it) are moved aside as <file>.corrupt, so that
 * retention (--keep) counts valid checkpoints only and a later load does not
 * try them again. Never deleted: they are for a person to look at. Only once
 * a valid one was loaded: a directory where every file is bad stays as it is
 * (the load fails, and so does the next one, the same way). */
static void move_aside(ddpc_ckpt_t ck, const r0_t *r)
{
    if (r->want)
        return;
    for (int i = 0; i + 1 < r->next; i++) {
        char to[CK_FILE_MAX + 16];
        snprintf(to, sizeof to, "%s.corrupt", r->cands[i]);
        if (rename(r->cands[i], to) == 0)
            ddpc_log(ck->rt, DDPC_LOG_WARN, "ckpt: moved %s aside to %s (not a valid checkpoint: "
                     "not loaded, not counted for keep; remove it once looked at)", r->cands[i], to);
        else
            ddpc_log(ck->rt, DDPC_LOG_WARN, "ckpt: cannot move the invalid %s aside to %s: %s",
                     r->cands[i], to, strerror(errno));
    }
}

/* Rank 0: the candidate just tried is bad (ck->err says why): warn, go on. */
static void skip(ddpc_ckpt_t ck, r0_t *r)
{
    ddpc_log(ck->rt, DDPC_LOG_WARN, "%s; skipping it for the previous checkpoint",
             ck_body(ck, ck->err));
    if (!r->first_bad[0])
        snprintf(r->first_bad, sizeof r->first_bad, "%s", ck_body(ck, ck->err));
}

/* Open the next candidate that validates; h->status says what happened. */
static void next_candidate(ddpc_ckpt_t ck, r0_t *r, const ck_item_t *items, int nitems, int np,
                           head_t *h)
{
    char h5[512];
    while (r->next < r->ncand) {
        const char *file = r->cands[r->next++];
        memset(h, 0, sizeof *h);
        int bad = 1;
        ddpc_status_t st;
        hid_t fapl = ck_fapl();
        r->f = fapl < 0 ? -1 : ck_reader_open(file, fapl);
        if (fapl >= 0)
            H5Pclose(fapl);
        if (r->f < 0)
            st = ck_err(ck, DDPC_ERR_FORMAT, "cannot open %s: %s", file, ck_h5_msg(h5, sizeof h5));
        else
            st = check_file(ck, r->f, file, items, nitems, np, h, &bad);
        if (st == DDPC_OK) {
            int *fdp = NULL;
            r->fd = H5Fget_vfd_handle(r->f, H5P_DEFAULT, (void **)&fdp) >= 0 && fdp ? *fdp : -1;
            if (r->fd >= 0)
                posix_fadvise(r->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
            snprintf(h->path, sizeof h->path, "%s", file);
            h->chunk_elems = ck->cfg.chunk_bytes / sizeof(float);
            h->status = DDPC_OK;
            return;
        }
        if (r->f >= 0)
            H5Fclose(r->f);
        r->f = -1;
        if (!bad || r->want) {
            h->status = st;
            memcpy(h->msg, ck->err, sizeof h->msg);
            return;
        }
        skip(ck, r);
    }
    memset(h, 0, sizeof *h);
    if (r->first_bad[0])
        h->status = ck_err(ck, DDPC_ERR_FORMAT, "no valid checkpoint in %s: all %d are corrupt; "
                           "the newest: %.700s", ck->dir, r->ncand, r->first_bad);
    else if (r->list_errno && r->list_errno != ENOENT)
        h->status = ck_err(ck, DDPC_ERR_IO, "cannot list the checkpoint directory %s: %s", ck->dir,
                           strerror(r->list_errno));
    else if (r->want)
        h->status = ck_err(ck, DDPC_ERR_NOT_FOUND, "no checkpoint %s", r->want);
    else
        h->status = ck_err(ck, DDPC_ERR_NOT_FOUND, "no checkpoint in %s", ck->dir);
    memcpy(h->msg, ck->err, sizeof h->msg);
}

/* ------------------------------------------------------------------ tensors (all ranks) */

/* Rank 0: read piece p of the open dataset into dst (the item's memory, or
 * a sharded state's window), check the CRC after the last piece. */
static ddpc_status_t read_piece(ddpc_ckpt_t ck, r0_t *r, hid_t ds, const ck_piece_t *p, int last,
                                uint32_t *crc, uint32_t want, haddr_t addr, size_t chunk,
                                float *dst)
{
    char h5[512];
    const ck_item_t *it = p->it;
    if (p->n) {
        if (r->fd >= 0 && addr != HADDR_UNDEF) /* the next piece: read ahead while we work */
            posix_fadvise(r->fd, (off_t)(addr + (p->off + p->n) * sizeof(float)),
                          (off_t)(chunk * sizeof(float)), POSIX_FADV_WILLNEED);
        if (ck_reader_read_window(ds, p, H5T_NATIVE_FLOAT, dst) < 0)
            return ck_err(ck, DDPC_ERR_FORMAT, "cannot read %s from %s: %s", it->path,
                          r->cands[r->next - 1], ck_h5_msg(h5, sizeof h5));
        *crc = ddpc_crc32(*crc, dst, p->n * sizeof(float));
    }
    if (last && *crc != want)
        return ck_err(ck, DDPC_ERR_FORMAT, "%s in %s is corrupt: its CRC-32 is %08x, the file "
                      "recorded %08x", it->path, r->cands[r->next - 1], *crc, want);
    return DDPC_OK;
}

/* Rank 0's message reaches the others, as theirs. */
static ddpc_status_t share_error(ddpc_ckpt_t ck, ddpc_status_t st)
{
    char msg[DDPC_ERRMSG_LEN];
    memcpy(msg, ck->err, sizeof msg);
    ddpc_status_t cst = ddpc_comm_host_bcast(ck->comm, msg, sizeof msg, 0);
    if (cst == DDPC_OK && ck->rank != 0)
        ck_err(ck, st, "failed on rank 0: %s", msg);
    return cst;
}

/* Consecutive pieces of one arena, at most chunk floats, broadcast at once
 * (a ctl_t, then the floats): few broadcasts, each large. Rank 0 sends a
 * window asynchronously and reads the next one meanwhile. A sharded
 * optimizer state's window (staged) lands in one of the two stage buffers
 * (shard.c), at most a stage long; each rank keeps its slice's part. */
typedef struct {
    float *data;               /* its start in this rank's memory */
    size_t n;                  /* floats */
    int run;                   /* the arena (ck_item_t.run) */
    size_t start, end;         /* position in the arena of its first float, and just past it */
    int staged, stage;         /* staged: which stage buffer */
    ctl_t ctl, sent;           /* rank 0: status so far; what was sent */
    ddpc_work_t w_ctl, w_data; /* rank 0: broadcasts in flight */
} window_t;

/* Rank 0: wait for the previous window's broadcasts. */
static ddpc_status_t settle(window_t *w)
{
    ddpc_status_t a = w->w_ctl ? ddpc_work_wait(w->w_ctl, -1) : DDPC_OK;
    ddpc_status_t b = w->w_data ? ddpc_work_wait(w->w_data, -1) : DDPC_OK;
    w->w_ctl = w->w_data = NULL;
    return a ? a : b;
}

/* Send (rank 0) or receive the window; rank 0's status on every rank. */
static ddpc_status_t flush(ddpc_ckpt_t ck, const r0_t *r, window_t *w)
{
    ddpc_status_t st = settle(w);
    if (ck->device != DDPC_DEVICE_HOST) {
        /* device engines: control by the key exchange, data through the
         * communicator's device bounce buffer, both blocking */
        if (ck->rank == 0) {
            w->ctl.retry = w->ctl.status == DDPC_ERR_FORMAT && !r->want;
            w->sent = w->ctl;
        }
        if (!st)
            st = ddpc_comm_host_bcast(ck->comm, &w->sent, sizeof w->sent, 0);
        if (!st && w->sent.status == DDPC_OK && w->n)
            st = ck_bcast_floats(ck, w->data, w->n);
    } else if (ck->rank == 0) {
        w->ctl.retry = w->ctl.status == DDPC_ERR_FORMAT && !r->want;
        w->sent = w->ctl;
        if (!st)
            st = ddpc_ibroadcast(ck->comm, &w->sent, sizeof w->sent, DDPC_U8, 0, &w->w_ctl);
        if (!st && w->sent.status == DDPC_OK && w->n)
            st = ddpc_ibroadcast(ck->comm, w->data, w->n, DDPC_F32, 0, &w->w_data);
    } else {
        st = ddpc_broadcast(ck->comm, &w->sent, sizeof w->sent, DDPC_U8, 0);
        if (!st && w->sent.status == DDPC_OK && w->n)
            st = ddpc_broadcast(ck->comm, w->data, w->n, DDPC_F32, 0);
    }
    if (!st && w->sent.status != DDPC_OK && !(st = share_error(ck, (ddpc_status_t)w->sent.status)))
        return (ddpc_status_t)w->sent.status;
    if (!st && w->staged && w->n) { /* rank 0: read already; the others: received */
        ddpc_status_t k = ck_shard_keep(ck, w->run - 1, w->start, w->data, w->n);
        if (k != DDPC_OK)
            return k;
    }
    w->n = 0;
    return st ? ck_err(ck, st, "broadcasting the checkpoint: %s", ddpc_last_error(ck->rt)) : DDPC_OK;
}

/* Rank 0 reads, everyone receives, window by window. *retry: rank 0 found
 * the file bad and moves on to the previous one. */
static ddpc_status_t stream(ddpc_ckpt_t ck, r0_t *r, const ck_item_t *items, int nitems,
                            size_t chunk, int *retry)
{
    char h5[512];
    window_t w = {0};
    ddpc_status_t st = DDPC_OK;
    for (int i = 0; st == DDPC_OK && i < nitems; i++) {
        const ck_item_t *it = &items[i];
        hid_t ds = -1;
        uint32_t want = 0;
        uint32_t crc = 0;
        haddr_t addr = HADDR_UNDEF;
        if (ck->rank == 0 && w.ctl.status == DDPC_OK) {
            ds = H5Dopen2(r->f, it->path, H5P_DEFAULT);
            if (ds < 0 || ck_attr_get(ds, "crc32", H5T_NATIVE_UINT32, &want) < 0)
                w.ctl.status = ck_err(ck, DDPC_ERR_FORMAT, "cannot read %s (or its crc32) from "
                                      "%s: %s", it->path, r->cands[r->next - 1],
                                      ck_h5_msg(h5, sizeof h5));
            else
                addr = H5Dget_offset(ds);
        }
        ck_piece_t p, nx;
        const int staged = ck_shard_staged(ck, it->run);
        const size_t stage = staged ? ck_shard_stage_len(ck) : 0;
        size_t piece = chunk < CK_PIECE / sizeof(float) ? chunk : CK_PIECE / sizeof(float);
        if (staged && piece > stage)
            piece = stage;
        int more = ck_piece_first(&p, it, piece); /* 0: empty; still one (empty) piece */
        for (int last = 0; st == DDPC_OK && !last; p = nx) {
            nx = p;
            last = !more || !ck_piece_next(&nx);
            if (w.n && (it->run != w.run || it->pos + p.off != w.end || w.n + p.n > chunk ||
                        (staged && w.n + p.n > stage)) &&
                (st = flush(ck, r, &w)) != DDPC_OK)
                break;
            if (!w.n) {
                w.run = it->run;
                w.start = it->pos + p.off;
                /* two stage buffers: rank 0's previous window may still be in flight */
                if ((w.staged = staged))
                    w.data = ck_shard_stage(ck, w.stage ^= 1);
                else
                    w.data = it->data + p.off;
            }
            if (ck->rank == 0 && w.ctl.status == DDPC_OK)
                w.ctl.status = read_piece(ck, r, ds, &p, last, &crc, want, addr, chunk,
                                          w.data + (it->pos + p.off - w.start));
            w.n += p.n;
            w.end = it->pos + p.off + p.n;
        }
        if (ds >= 0)
            H5Dclose(ds);
    }
    if (st == DDPC_OK)
        st = flush(ck, r, &w); /* the last window, or only the final status */
    ddpc_status_t s2 = settle(&w);
    *retry = w.sent.retry;
    return st ? st : s2 ? ck_err(ck, s2, "broadcasting the checkpoint: %s", ddpc_last_error(ck->rt))
                        : DDPC_OK;
}

/* ------------------------------------------------------------------ load */

/* Every rank must hold the same tensors (the engine checked the parameters;
 * this covers the optimizer's presence and the user tensors). */
static ddpc_status_t agree_items(ddpc_ckpt_t ck, const ck_item_t *items, int n, ddpc_status_t st)
{
    uint64_t h = CK_FNV_BASIS ^ (uint64_t)st, *all = calloc((size_t)ck->size, sizeof *all);
    for (int i = 0; i < n; i++) {
        h = ck_fnv(h, items[i].path, strlen(items[i].path) + 1);
        h = ck_fnv(h, &items[i].numel, sizeof items[i].numel);
    }
    if (!all)
        return ck_err(ck, DDPC_ERR_NOMEM, "cannot allocate");
    ddpc_status_t cst = ddpc_comm_host_allgather(ck->comm, &h, all, sizeof h);
    int bad = -1;
    for (int r = 1; cst == DDPC_OK && r < ck->size && bad < 0; r++)
        if (all[r] != all[0])
            bad = r;
    free(all);
    if (cst != DDPC_OK)
        return ck_err(ck, cst, "load: %s", ddpc_last_error(ck->rt));
    if (st != DDPC_OK)
        return st;
    if (bad >= 0)
        return ck_err(ck, DDPC_ERR_MISMATCH, "load: rank %d holds other tensors than rank 0 (an "
                      "optimizer on some ranks only, or different user tensors)", bad);
    return DDPC_OK;
}

static void apply(ddpc_ckpt_t ck, const head_t *h, ddpc_ckpt_meta_t *meta, char *loaded, size_t n)
{
    if (meta)
        *meta = h->meta;
    if (loaded && n)
        snprintf(loaded, n, "%s", h->path);
    if (ck->opt && h->has_optim) {
        ddpc_optim_set_steps(ck->opt, h->osteps);
        ddpc_optim_set_lr(ck->opt, h->olr);
        ddpc_optim_set_loss_scale(ck->opt, h->oscale);
        ddpc_optim_set_scale_good_steps(ck->opt, h->ogood);
    }
    memcpy(ck->attrs, h->attrs, sizeof ck->attrs);
    ck->nattrs = h->nattrs;
    ck->err[0] = 0;
    if (ck->rank == 0)
        ddpc_log(ck->rt, DDPC_LOG_INFO, "ckpt: resumed from %s: step %llu, saved by %d ranks, now %d",
                 h->path, (unsigned long long)h->meta.step, h->meta.world_size, ck->size);
}

ddpc_status_t ddpc_ckpt_load(ddpc_ckpt_t ck, const char *path, ddpc_ckpt_meta_t *meta,
                             char *loaded, size_t n)
{
    if (!ck)
        return DDPC_ERR_INVALID;
    ck_item_t *items = NULL;
    int nitems = 0, np = 0;
    head_t *h = calloc(1, sizeof *h);
    r0_t r = {.want = path, .f = -1, .fd = -1};
    unsigned plugins = 0;
    /* no broadcast of a gather in the forward may land on the loaded values
       (only when pending: a call would mark the model as one that waits) */
    ddpc_status_t st =
        ddpc_ddp_param_pending(ck->ddp) ? ddpc_ddp_param_wait(ck->ddp, -1) : DDPC_OK;
    if (st != DDPC_OK) {
        free(h);
        return ck_err(ck, st, "load: %s", ddpc_ddp_last_error(ck->ddp));
    }
    st = h ? ck_items(ck, &items, &nitems, &np) : ck_err(ck, DDPC_ERR_NOMEM, "load");
    if ((st = agree_items(ck, items, nitems, st)) != DDPC_OK) {
        free(items);
        free(h);
        return st;
    }
    if (ck->rank == 0) {
        ck_join(ck); /* the writer is done with HDF5 and with its file */
        struct stat sb;
        if (path && stat(path, &sb) == 0 && (r.cands = malloc(sizeof *r.cands))) {
            snprintf(r.cands[0], CK_FILE_MAX, "%s", path);
            r.ncand = 1;
        } else if (!path && (r.ncand = ck_list(ck->dir, &r.cands)) < 0) {
            r.list_errno = errno;
            r.ncand = 0;
        }
        ck_h5_enter();
        ck_reader_guard(&plugins); /* no filter plugins loaded for a file */
    }
    for (;;) {
        if (ck->rank == 0)
            next_candidate(ck, &r, items, nitems, np, h);
        if ((st = ddpc_comm_host_bcast(ck->comm, h, sizeof *h, 0)) != DDPC_OK) {
            st = ck_err(ck, st, "load: %s", ddpc_last_error(ck->rt));
            break;
        }
        if ((st = (ddpc_status_t)h->status) != DDPC_OK) {
            if (ck->rank != 0)
                ck_err(ck, st, "failed on rank 0: %s", h->msg);
            break;
        }
        int retry = 0;
        /* sharded: each window of the state passes through a stage buffer,
           each rank keeps its slice's part */
        if ((st = ck_shard_load_begin(ck, h->chunk_elems)) != DDPC_OK) {
            if (ck->rank == 0) {
                H5Fclose(r.f);
                r.f = -1;
            }
            break;
        }
        st = stream(ck, &r, items, nitems, h->chunk_elems, &retry);
        if (ck->rank == 0) {
            H5Fclose(r.f);
            r.f = -1;
        }
        if (st == DDPC_OK && (st = ck_shadow_push(ck)) == DDPC_OK) { /* device: to the arenas */
            apply(ck, h, meta, loaded, n);
            if (ck->rank == 0)
                move_aside(ck, &r);
            break;
        }
        if (!retry)
            break;
        if (ck->rank == 0)
            skip(ck, &r);
    }
    if (ck->rank == 0) {
        ck_reader_unguard(plugins);
        ck_h5_leave();
    }
    free(r.cands);
    free(items);
    free(h);
    ck_shard_release(ck);
    return st;
}
