/* SPDX-License-Identifier: BSD-3-Clause */
/* cfile.c: a checkpoint file as ddpc-ckpt sees it: every object listed (links
 * walked, never followed), every dataset checked against the limits, tensors
 * read in pieces. The link, storage and window checks are src/ckpt/reader.c's. */
#include "config.h"
#include "ckpt_tool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

hid_t cf_lapl = H5P_DEFAULT;

hid_t open_path(hid_t f, const char *path, char *why, size_t nw)
{
    char h5[256], prefix[MAX_PATH];
    H5L_type_t type;
    switch (ck_reader_path(f, path, cf_lapl, prefix, sizeof prefix, &type)) {
    case CK_PATH_LONG:
        snprintf(why, nw, "%s: path too long", path);
        return -1;
    case CK_PATH_MISSING:
        snprintf(why, nw, "%s: not found", path);
        H5Eclear2(H5E_DEFAULT);
        return -1;
    case CK_PATH_LINK:
        snprintf(why, nw, "%s: a %s link (not followed)", path, ck_reader_link_kind(type));
        return -1;
    case CK_PATH_HARD:
        break;
    }
    hid_t o = H5Oopen(f, path, cf_lapl);
    if (o < 0)
        snprintf(why, nw, "%s: cannot open: %s", path, ck_reader_h5why(h5, sizeof h5));
    return o;
}

static const cfile_t *sort_ctx; /* of by_path */
static int by_path(const void *a, const void *b)
{
    return strcmp(sort_ctx->e[*(const size_t *)a].path, sort_ctx->e[*(const size_t *)b].path);
}

entry_t *find(cfile_t *c, const char *path)
{
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int r = strcmp(c->e[c->sorted[mid]].path, path);
        if (!r)
            return &c->e[c->sorted[mid]];
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static size_t add_entry(cfile_t *c, const char *path, ekind_t kind, const char *note)
{
    c->e = xrealloc(c->e, (c->n + 1) * sizeof *c->e);
    entry_t *e = &c->e[c->n];
    memset(e, 0, sizeof *e);
    e->path = xstrdup(path);
    e->kind = kind;
    e->note = note ? xstrdup(note) : NULL;
    return c->n++;
}

typedef struct {
    cfile_t *c;
    const char *prefix;
    int depth;
} walk_t;

static herr_t walk_cb(hid_t g, const char *name, const H5L_info_t *li, void *arg)
{
    walk_t *w = arg;
    cfile_t *c = w->c;
    char path[MAX_PATH], h5[256], note[MAX_PATH + 64];
    if (c->n >= MAX_OBJECTS) {
        snprintf(c->walk_why, sizeof c->walk_why, "more than %d objects (a cycle of hard links?)",
                 MAX_OBJECTS);
        return -1;
    }
    if ((size_t)snprintf(path, sizeof path, "%s/%s", w->prefix, name) >= sizeof path) {
        snprintf(c->walk_why, sizeof c->walk_why, "an object path longer than %d bytes under %.200s",
                 MAX_PATH, w->prefix);
        return -1;
    }
    if (li->type == H5L_TYPE_HARD) {
        hid_t o = H5Oopen(g, name, cf_lapl);
        if (o < 0) {
            add_entry(c, path, E_BAD, ck_reader_h5why(h5, sizeof h5));
            return 0;
        }
        H5I_type_t t = H5Iget_type(o);
        add_entry(c, path, t == H5I_GROUP ? E_GROUP : t == H5I_DATASET ? E_DATASET : E_TYPE, NULL);
        if (t == H5I_GROUP) {
            if (w->depth + 1 > MAX_DEPTH) {
                snprintf(c->walk_why, sizeof c->walk_why, "groups nested deeper than %d at %.200s",
                         MAX_DEPTH, path);
                H5Oclose(o);
                return -1;
            }
            walk_t sub = {c, path, w->depth + 1};
            hsize_t idx = 0;
            if (H5Literate(o, H5_INDEX_NAME, H5_ITER_INC, &idx, walk_cb, &sub) < 0 &&
                !c->walk_why[0])
                snprintf(c->walk_why, sizeof c->walk_why, "cannot list group %.200s: %s", path,
                         ck_reader_h5why(h5, sizeof h5));
        }
        H5Oclose(o);
        return c->walk_why[0] ? -1 : 0;
    }
    if (li->type == H5L_TYPE_SOFT || li->type == H5L_TYPE_EXTERNAL) {
        size_t sz = li->u.val_size;
        char *val = sz && sz <= MAX_PATH * 2 ? xrealloc(NULL, sz + 1) : NULL;
        const char *file = NULL, *obj = NULL;
        unsigned flags;
        snprintf(note, sizeof note, "?");
        if (val && H5Lget_val(g, name, val, sz, cf_lapl) >= 0) {
            val[sz] = 0;
            if (li->type == H5L_TYPE_SOFT)
                snprintf(note, sizeof note, "%s", val);
            else if (H5Lunpack_elink_val(val, sz, &flags, &file, &obj) >= 0)
                snprintf(note, sizeof note, "%s:%s", file, obj);
        }
        H5Eclear2(H5E_DEFAULT);
        free(val);
        add_entry(c, path, li->type == H5L_TYPE_SOFT ? E_SOFT : E_EXTERNAL, note);
        return 0;
    }
    snprintf(note, sizeof note, "user-defined link of type %d", (int)li->type);
    add_entry(c, path, E_OTHER, note);
    return 0;
}

/* The dataset at e->path: type, extent, storage and crc32 attribute, checked. */
static void inspect(cfile_t *c, entry_t *e)
{
    char why[MAX_PATH + 256], h5[256];
    tinfo_t *t = &e->t;
    hid_t ds = open_path(c->f, e->path, why, sizeof why);
    hid_t ft = ds < 0 ? -1 : H5Dget_type(ds), sp = ds < 0 ? -1 : H5Dget_space(ds);
    hid_t dcpl = ds < 0 ? -1 : H5Dget_create_plist(ds);
    snprintf(t->dtype, sizeof t->dtype, "?");
    if (ds < 0)
        goto bad;
    if (ft < 0 || sp < 0 || dcpl < 0) {
        snprintf(why, sizeof why, "cannot read its type or extent: %s", ck_reader_h5why(h5, sizeof h5));
        goto bad;
    }
    H5T_class_t cls = H5Tget_class(ft);
    size_t sz = H5Tget_size(ft);
    int f32 = cls == H5T_FLOAT && sz == 4 &&
              (H5Tequal(ft, H5T_IEEE_F32LE) > 0 || H5Tequal(ft, H5T_IEEE_F32BE) > 0);
    if (f32)
        snprintf(t->dtype, sizeof t->dtype, "float32");
    else if (cls == H5T_FLOAT)
        snprintf(t->dtype, sizeof t->dtype, "float%zu", 8 * sz);
    else if (cls == H5T_INTEGER)
        snprintf(t->dtype, sizeof t->dtype, "%sint%zu", H5Tget_sign(ft) == H5T_SGN_NONE ? "u" : "",
                 8 * sz);
    else if (cls == H5T_STRING)
        snprintf(t->dtype, sizeof t->dtype, "string");
    else
        snprintf(t->dtype, sizeof t->dtype, "hdf5-class-%d", (int)cls);
    H5S_class_t sc = H5Sget_simple_extent_type(sp);
    int nd = sc == H5S_SCALAR ? 0 : H5Sget_simple_extent_ndims(sp);
    if (sc != H5S_SCALAR && sc != H5S_SIMPLE) {
        snprintf(why, sizeof why, "it has no dataspace extent (a null dataspace)");
        goto bad;
    }
    if (nd < 0 || nd > MAX_RANK) {
        snprintf(why, sizeof why, "rank %d (at most %d)", nd, MAX_RANK);
        goto bad;
    }
    hsize_t dims[H5S_MAX_RANK];
    if (nd && H5Sget_simple_extent_dims(sp, dims, NULL) < 0) {
        snprintf(why, sizeof why, "cannot read its extent: %s", ck_reader_h5why(h5, sizeof h5));
        goto bad;
    }
    t->ndim = nd;
    t->numel = 1;
    for (int k = 0; k < nd; k++) {
        t->dims[k] = dims[k];
        if (dims[k] > MAX_EXTENT || (dims[k] && t->numel > MAX_EXTENT / dims[k])) {
            sb_t s = {0};
            sb_shape(&s, nd, dims);
            snprintf(why, sizeof why, "shape %s is beyond the limit of 2^40 elements", sb_str(&s));
            free(s.s);
            goto bad;
        }
        t->numel *= dims[k];
    }
    /* where the data is: no external raw data files, no virtual datasets,
     * contiguous data inside the file, chunks of bounded size */
    H5D_layout_t lay = H5Pget_layout(dcpl);
    ck_store_t where = ck_reader_storage(dcpl);
    if (where == CK_STORE_EXTERNAL) {
        snprintf(why, sizeof why, "its data is stored in external files (not read)");
        goto bad;
    }
    if (where == CK_STORE_VIRTUAL) {
        snprintf(why, sizeof why, "a virtual dataset (data from other datasets or files; not read)");
        goto bad;
    }
    if (lay == H5D_CHUNKED) {
        hsize_t cd[H5S_MAX_RANK];
        int cn = H5Pget_chunk(dcpl, H5S_MAX_RANK, cd);
        uint64_t cb = sz;
        for (int k = 0; k < cn; k++)
            cb = cd[k] && cb > MAX_CHUNK_BYTES / cd[k] ? MAX_CHUNK_BYTES + 1 : cb * cd[k];
        if (cn < 0 || cb > MAX_CHUNK_BYTES) {
            snprintf(why, sizeof why, "chunks larger than %llu bytes",
                     (unsigned long long)MAX_CHUNK_BYTES);
            goto bad;
        }
    }
    if (lay == H5D_CONTIGUOUS && f32 && t->numel) {
        haddr_t off = H5Dget_offset(ds);
        hsize_t st = H5Dget_storage_size(ds);
        if (off == HADDR_UNDEF || st != t->numel * 4) {
            snprintf(why, sizeof why, "its data is not stored (%llu bytes allocated, %llu expected)",
                     (unsigned long long)(off == HADDR_UNDEF ? 0 : st),
                     (unsigned long long)(t->numel * 4));
            goto bad;
        }
        if (off > c->size || st > c->size - off) {
            snprintf(why, sizeof why, "its data [%llu, %llu) lies past the end of the file (%llu bytes)",
                     (unsigned long long)off, (unsigned long long)(off + st),
                     (unsigned long long)c->size);
            goto bad;
        }
    }
    uint64_t crc = 0;
    if (H5Aexists(ds, "crc32") > 0) {
        if (get_u64(ds, "crc32", &crc, why, sizeof why) < 0)
            goto bad;
        if (crc > UINT32_MAX) {
            snprintf(why, sizeof why, "its crc32 attribute %llu is not a 32-bit value",
                     (unsigned long long)crc);
            goto bad;
        }
        t->has_crc = 1;
        t->crc = (uint32_t)crc;
    }
    H5Eclear2(H5E_DEFAULT);
    if (!f32) {
        snprintf(why, sizeof why, "a dataset of type %s (a checkpoint holds float32 only)",
                 t->dtype);
        goto bad;
    }
    t->ok = 1;
    goto out;
bad:
    t->why = xstrdup(why);
out:
    CK_CLOSE(dcpl, sp, ft, ds);
}

void cf_close(cfile_t *c)
{
    for (size_t k = 0; k < c->n; k++) {
        free(c->e[k].path);
        free(c->e[k].note);
        free(c->e[k].t.why);
    }
    free(c->e);
    free(c->sorted);
    if (c->f >= 0)
        H5Fclose(c->f);
    memset(c, 0, sizeof *c);
    c->f = -1;
}

/* HDF5's signature at 0, 512, 1024, ... (a user block may precede it). */
static int has_signature(int fd, uint64_t size)
{
    static const char sig[8] = {'\211', 'H', 'D', 'F', '\r', '\n', '\032', '\n'};
    char b[8];
    for (uint64_t off = 0; off + 8 <= size; off = off ? 2 * off : 512)
        if (pread(fd, b, 8, (off_t)off) == 8 && !memcmp(b, sig, 8))
            return 1;
    return 0;
}

/* Open file and list its objects. RC_OK; RC_IO (why) when it cannot be read at
 * all; RC_BAD (why) when it is not HDF5 or HDF5 cannot open it. */
int cf_open(cfile_t *c, const char *file, char *why, size_t nw)
{
    char h5[512];
    memset(c, 0, sizeof *c);
    c->f = -1;
    c->file = file;
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        snprintf(why, nw, "cannot open: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return RC_IO;
    }
    if (!S_ISREG(sb.st_mode)) {
        snprintf(why, nw, "not a regular file");
        close(fd);
        return RC_IO;
    }
    c->size = (uint64_t)sb.st_size;
    int sig = has_signature(fd, c->size);
    close(fd);
    if (!sig) {
        snprintf(why, nw, "not an HDF5 file (no HDF5 signature in its %llu bytes)",
                 (unsigned long long)c->size);
        return RC_BAD;
    }
    c->f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (c->f < 0) {
        const char *r = ck_reader_h5why(h5, sizeof h5);
        const char *e = strstr(r, " eof = "), *s = strstr(r, "stored_eof = ");
        unsigned long long eof, stored;
        if (!strncmp(r, "truncated file", 14) && e && s && sscanf(e, " eof = %llu", &eof) == 1 &&
            sscanf(s, "stored_eof = %llu", &stored) == 1)
            snprintf(why, nw, "truncated: the file has %llu bytes, its superblock records %llu",
                     eof, stored);
        else
            snprintf(why, nw, "HDF5 cannot open it: %s", r);
        return RC_BAD;
    }
    add_entry(c, "/", E_GROUP, NULL);
    walk_t w = {c, "", 0};
    hsize_t idx = 0;
    if (H5Literate(c->f, H5_INDEX_NAME, H5_ITER_INC, &idx, walk_cb, &w) < 0 && !c->walk_why[0])
        snprintf(c->walk_why, sizeof c->walk_why, "cannot list the root group: %s",
                 ck_reader_h5why(h5, sizeof h5));
    c->sorted = xrealloc(NULL, c->n * sizeof *c->sorted);
    for (size_t k = 0; k < c->n; k++)
        c->sorted[k] = k;
    sort_ctx = c;
    qsort(c->sorted, c->n, sizeof *c->sorted, by_path);
    for (size_t k = 0; k < c->n; k++)
        if (c->e[k].kind == E_DATASET)
            inspect(c, &c->e[k]);
    return RC_OK;
}

/* The root, a group by path (hard links only), or -1. */
hid_t open_group(cfile_t *c, const char *path)
{
    char why[64];
    entry_t *e = find(c, path);
    return e && e->kind == E_GROUP ? open_path(c->f, path, why, sizeof why) : -1;
}

void cf_item(const tinfo_t *t, ck_item_t *it)
{
    memset(it, 0, sizeof *it);
    it->ndim = t->ndim;
    it->numel = (size_t)t->numel;
    for (int k = 0; k < t->ndim; k++)
        it->shape[k] = (int64_t)t->dims[k];
}

int cf_read(const ck_piece_t *p, hid_t ds, hid_t mt, void *buf, char *why, size_t nw)
{
    char h5[256];
    if (ck_reader_read_window(ds, p, mt, buf) >= 0)
        return 0;
    snprintf(why, nw, "cannot read elements %llu.. of it: %s",
             (unsigned long long)(p->d < 0 ? 0 : p->start[p->d]), ck_reader_h5why(h5, sizeof h5));
    return -1;
}

/* The CRC-32 of a tensor's little-endian bytes, piece by piece; out (may be
 * -1) also gets the bytes. */
int tensor_crc(cfile_t *c, const entry_t *e, float *buf, int out, uint32_t *crc, char *why,
                      size_t nw)
{
    char w2[512];
    hid_t ds = open_path(c->f, e->path, why, nw);
    if (ds < 0)
        return -1;
    ck_item_t it;
    ck_piece_t p;
    int rc = 0;
    *crc = 0;
    cf_item(&e->t, &it);
    for (int more = ck_piece_first(&p, &it, PIECE); more && !rc; more = ck_piece_next(&p)) {
        if (cf_read(&p, ds, H5T_IEEE_F32LE, buf, w2, sizeof w2) < 0) {
            snprintf(why, nw, "%s: %s", e->path, w2);
            rc = -1;
            break;
        }
        *crc = ddpc_crc32(*crc, buf, p.n * 4);
        for (size_t done = 0, len = p.n * 4; out >= 0 && done < len;) {
            ssize_t k = write(out, (const char *)buf + done, len - done);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                snprintf(why, nw, "cannot write: %s", k < 0 ? strerror(errno) : "no progress");
                rc = -2;
                break;
            }
            done += (size_t)k;
        }
    }
    H5Dclose(ds);
    return rc;
}
