/* ddpc-ckpt: ddpc's checkpoint files (doc/checkpoint.md) from the command line: ls, show,
 * verify (the CRCs), diff, export (the parameters as safetensors). Plain HDF5 + zlib, not an
 * MPI program; every file is untrusted input (no external links followed, sizes bounded). */
#include "config.h"
#include "ckpt_internal.h" /* CK_FORMAT, CK_FORMAT_VERSION, ck_crc32 (crc.c, compiled in) */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Exit status: 0 ok, 1 invalid / different / failed, 2 usage or I/O error. */
enum { RC_OK = 0, RC_BAD = 1, RC_IO = 2 };

/* Limits on what a file may make us do. */
#define MAX_RANK 8                     /* as the library's shapes */
#define MAX_EXTENT ((uint64_t)1 << 40) /* elements per dimension and per tensor (4 TiB) */
#define MAX_OBJECTS (1 << 20)          /* links visited: also bounds a cycle of hard links */
#define MAX_DEPTH 64
#define MAX_PATH 4096
#define MAX_ATTR_ELEMS (1 << 20)       /* elements of an attribute we read (/model names) */
#define MAX_ATTR_BYTES ((size_t)64 << 20)
#define MAX_SHOWN 4096                 /* elements of an attribute we print */
#define MAX_CHUNK_BYTES ((uint64_t)64 << 20)
#define PIECE ((uint64_t)1 << 20)      /* elements per read: 4 MiB of float32 */
#define ST_MAX_HEADER ((size_t)100 << 20) /* safetensors readers refuse more */

static const char *prog = "ddpc-ckpt";
static hid_t lapl = H5P_DEFAULT; /* link access: external links refused */

/* ------------------------------------------------------------------ small helpers */

static int err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int err(int code, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        err(RC_IO, "out of memory (%zu bytes)", n);
        exit(RC_IO);
    }
    return q;
}

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(xrealloc(NULL, n), s, n);
}

/* A growing string. */
typedef struct {
    char *s;
    size_t n, cap;
} sb_t;

static void sb_grow(sb_t *b, size_t more)
{
    if (b->n + more + 1 > b->cap) {
        b->cap = (b->n + more + 1) * 2;
        b->s = xrealloc(b->s, b->cap);
    }
}

static void sb_add(sb_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sb_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0)
        return;
    sb_grow(b, (size_t)k);
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

static const char *sb_str(sb_t *b)
{
    if (!b->s)
        sb_grow(b, 0), b->s[0] = 0;
    return b->s;
}

static void sb_trunc(sb_t *b, size_t n) { b->n = n, sb_grow(b, 0), b->s[n] = 0; }
static void sb_clear(sb_t *b) { sb_trunc(b, 0); }

/* Bytes of the file as printable text: anything outside printable ASCII,
 * and space (unless quoted), as \xNN; quoted: '"' and backslash as \" and \\. */
static void sb_esc(sb_t *b, const char *s, size_t len, int quoted)
{
    if (quoted)
        sb_add(b, "\"");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (quoted && (c == '"' || c == '\\'))
            sb_add(b, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f || c == '\\' || (c == ' ' && !quoted))
            sb_add(b, "\\x%02x", c);
        else
            sb_add(b, "%c", c);
    }
    if (quoted)
        sb_add(b, "\"");
}

/* s as sb_esc writes it, for a message; valid until four more calls. */
static const char *esc_q(const char *s, int quoted)
{
    static sb_t ring[4];
    static unsigned next;
    sb_t *b = &ring[next++ % 4];
    sb_clear(b);
    sb_esc(b, s, strlen(s), quoted);
    return sb_str(b);
}

static const char *esc(const char *s) { return esc_q(s, 0); }

/* Shortest %g that reads back as v. */
static void sb_double(sb_t *b, double v)
{
    char t[40];
    for (int p = 15; p <= 17; p++) {
        snprintf(t, sizeof t, "%.*g", p, v);
        if (strtod(t, NULL) == v || v != v)
            break;
    }
    sb_add(b, "%s", t);
}

static void sb_shape(sb_t *b, int ndim, const hsize_t *dims)
{
    sb_add(b, "[");
    for (int k = 0; k < ndim; k++)
        sb_add(b, "%s%llu", k ? "," : "", (unsigned long long)dims[k]);
    sb_add(b, "]");
}

/* The innermost HDF5 error message of the call that just failed, then cleared;
 * of a failed system call only its message. */
typedef struct {
    char *buf;
    size_t n;
} h5why_t;

static herr_t h5_walk(unsigned n, const H5E_error2_t *e, void *arg)
{
    h5why_t *w = arg;
    const char *d = e->desc ? e->desc : "", *m = strstr(d, "error message = '");
    if (m)
        snprintf(w->buf, w->n, "%.*s", (int)strcspn(m + 17, "'"), m + 17);
    else if (*d)
        snprintf(w->buf, w->n, "%s", d);
    return 0;
}

static const char *h5_reason(char *buf, size_t n)
{
    h5why_t w = {buf, n};
    buf[0] = 0;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, h5_walk, &w);
    H5Eclear2(H5E_DEFAULT);
    if (!buf[0])
        snprintf(buf, n, "HDF5 gave no reason");
    for (char *c = buf; *c; c++)
        if (*c == '\n')
            *c = ' ';
    return buf;
}

/* ------------------------------------------------------------------ attributes */

/* An attribute's values: integers, floats or strings; at most MAX_ATTR_ELEMS. */
typedef struct {
    H5T_class_t cls; /* H5T_INTEGER, H5T_FLOAT, H5T_STRING; else unsupported */
    int rank;        /* 0 scalar, 1 array; > 1 not read */
    size_t n;        /* elements */
    int is_unsigned, bytes1; /* integers: unsigned; 1-byte unsigned (shown as hex) */
    int64_t *i;
    uint64_t *u;
    double *d;
    char **s;
} aval_t;

static void aval_free(aval_t *v)
{
    for (size_t k = 0; v->s && k < v->n; k++)
        free(v->s[k]);
    free(v->i), free(v->u), free(v->d), free(v->s);
    memset(v, 0, sizeof *v);
}

/* Strings of a string attribute (fixed or variable length). */
static int read_strings(hid_t a, hid_t ft, size_t n, aval_t *v, char *why, size_t nw)
{
    char h5[256];
    v->s = xrealloc(NULL, n * sizeof *v->s);
    memset(v->s, 0, n * sizeof *v->s);
    hid_t mt = H5Tcopy(H5T_C_S1);
    int rc = -1;
    if (mt < 0 || H5Tset_cset(mt, H5Tget_cset(ft)) < 0)
        goto out;
    if (H5Tis_variable_str(ft) > 0) {
        char **p = xrealloc(NULL, n * sizeof *p);
        memset(p, 0, n * sizeof *p);
        if (H5Tset_size(mt, H5T_VARIABLE) < 0 || H5Aread(a, mt, p) < 0) {
            snprintf(why, nw, "cannot read: %s", h5_reason(h5, sizeof h5));
            free(p);
            goto out;
        }
        for (size_t k = 0; k < n; k++) {
            v->s[k] = xstrdup(p[k] ? p[k] : "");
            if (p[k])
                H5free_memory(p[k]);
        }
        free(p);
        rc = 0;
    } else {
        size_t sz = H5Tget_size(ft);
        if (sz == 0 || sz > MAX_ATTR_BYTES / n) {
            snprintf(why, nw, "%zu strings of %zu bytes: too large", n, sz);
            goto out;
        }
        char *buf = xrealloc(NULL, n * (sz + 1));
        if (H5Tset_size(mt, sz + 1) < 0 || H5Tset_strpad(mt, H5T_STR_NULLTERM) < 0 ||
            H5Aread(a, mt, buf) < 0) {
            snprintf(why, nw, "cannot read: %s", h5_reason(h5, sizeof h5));
            free(buf);
            goto out;
        }
        for (size_t k = 0; k < n; k++) {
            char *e = buf + k * (sz + 1);
            e[sz] = 0;
            v->s[k] = xstrdup(e);
        }
        free(buf);
        rc = 0;
    }
out:
    if (mt >= 0)
        H5Tclose(mt);
    return rc;
}

/* Read attribute `name` of loc. -1 with why if absent, unreadable, too large
 * or of a kind a checkpoint does not hold. */
static int aread(hid_t loc, const char *name, aval_t *v, char *why, size_t nw)
{
    char h5[256];
    memset(v, 0, sizeof *v);
    if (H5Aexists(loc, name) <= 0) {
        snprintf(why, nw, "no attribute \"%s\"", name);
        return -1;
    }
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t sp = a < 0 ? -1 : H5Aget_space(a), ft = a < 0 ? -1 : H5Aget_type(a);
    int rc = -1;
    if (a < 0 || sp < 0 || ft < 0) {
        snprintf(why, nw, "cannot open attribute \"%s\": %s", name, h5_reason(h5, sizeof h5));
        goto out;
    }
    H5S_class_t sc = H5Sget_simple_extent_type(sp);
    v->rank = sc == H5S_SCALAR ? 0 : H5Sget_simple_extent_ndims(sp);
    hssize_t np = H5Sget_simple_extent_npoints(sp);
    v->cls = H5Tget_class(ft);
    if (sc != H5S_SCALAR && sc != H5S_SIMPLE) {
        snprintf(why, nw, "attribute \"%s\" has no value", name);
        goto out;
    }
    if (v->rank > 1 || np < 0 || np > MAX_ATTR_ELEMS) {
        snprintf(why, nw, "attribute \"%s\" is an array of rank %d with %lld elements (not read)",
                 name, v->rank, (long long)np);
        goto out;
    }
    v->n = (size_t)np;
    size_t n = v->n ? v->n : 1;
    if (!v->n && (v->cls == H5T_INTEGER || v->cls == H5T_FLOAT || v->cls == H5T_STRING)) {
        rc = 0; /* an empty array */
    } else if (v->cls == H5T_INTEGER && H5Tget_size(ft) <= 8) {
        v->is_unsigned = H5Tget_sign(ft) == H5T_SGN_NONE;
        v->bytes1 = v->is_unsigned && H5Tget_size(ft) == 1 && v->rank == 1;
        herr_t r;
        if (v->is_unsigned)
            r = H5Aread(a, H5T_NATIVE_UINT64, v->u = xrealloc(NULL, n * sizeof *v->u));
        else
            r = H5Aread(a, H5T_NATIVE_INT64, v->i = xrealloc(NULL, n * sizeof *v->i));
        rc = r < 0 ? -1 : 0;
    } else if (v->cls == H5T_FLOAT && H5Tget_size(ft) <= 8) {
        rc = H5Aread(a, H5T_NATIVE_DOUBLE, v->d = xrealloc(NULL, n * sizeof *v->d)) < 0 ? -1 : 0;
    } else if (v->cls == H5T_STRING) {
        rc = read_strings(a, ft, v->n, v, why, nw);
        if (rc < 0)
            goto out;
    } else {
        snprintf(why, nw, "attribute \"%s\" is of HDF5 type class %d, size %zu (not read)", name,
                 (int)v->cls, H5Tget_size(ft));
        goto out;
    }
    if (rc < 0)
        snprintf(why, nw, "cannot read attribute \"%s\": %s", name, h5_reason(h5, sizeof h5));
out:
    if (rc < 0)
        aval_free(v);
    if (ft >= 0)
        H5Tclose(ft);
    if (sp >= 0)
        H5Sclose(sp);
    if (a >= 0)
        H5Aclose(a);
    return rc;
}

/* The value as text: scalars bare, arrays in brackets, strings quoted, 1-byte
 * unsigned arrays as "N bytes HEX". */
static void sb_aval(sb_t *b, const aval_t *v)
{
    if (v->bytes1) {
        sb_add(b, "%zu bytes ", v->n);
        for (size_t k = 0; k < v->n && k < MAX_SHOWN; k++)
            sb_add(b, "%02x", (unsigned)v->u[k]);
        if (v->n > MAX_SHOWN)
            sb_add(b, "...");
        return;
    }
    if (v->rank)
        sb_add(b, "[");
    for (size_t k = 0; k < v->n && k < MAX_SHOWN; k++) {
        if (k)
            sb_add(b, ", ");
        if (v->s)
            sb_esc(b, v->s[k], strlen(v->s[k]), 1);
        else if (v->d)
            sb_double(b, v->d[k]);
        else if (v->u)
            sb_add(b, "%llu", (unsigned long long)v->u[k]);
        else if (v->i)
            sb_add(b, "%lld", (long long)v->i[k]);
    }
    if (v->n > MAX_SHOWN)
        sb_add(b, ", ... (%zu in all)", v->n);
    if (v->rank)
        sb_add(b, "]");
}

/* The value of attribute name as text (or why it cannot be read). */
static void sb_attr(sb_t *b, hid_t loc, const char *name)
{
    aval_t v;
    char why[512];
    if (aread(loc, name, &v, why, sizeof why) < 0) {
        sb_add(b, "(%s)", why);
        return;
    }
    sb_aval(b, &v);
    aval_free(&v);
}

/* A scalar integer attribute (an unsigned one read as such). */
static int get_u64(hid_t loc, const char *name, uint64_t *out, char *why, size_t nw)
{
    aval_t v;
    if (aread(loc, name, &v, why, nw) < 0)
        return -1;
    int rc = -1;
    if (v.cls != H5T_INTEGER || v.n != 1)
        snprintf(why, nw, "attribute \"%s\" is not one integer", name);
    else if (!v.is_unsigned && v.i[0] < 0)
        snprintf(why, nw, "attribute \"%s\" is negative (%lld)", name, (long long)v.i[0]);
    else
        *out = v.is_unsigned ? v.u[0] : (uint64_t)v.i[0], rc = 0;
    aval_free(&v);
    return rc;
}

static int get_i64(hid_t loc, const char *name, int64_t *out, char *why, size_t nw)
{
    uint64_t u;
    aval_t v;
    if (aread(loc, name, &v, why, nw) < 0)
        return -1;
    int rc = -1;
    if (v.cls != H5T_INTEGER || v.n != 1)
        snprintf(why, nw, "attribute \"%s\" is not one integer", name);
    else if (v.is_unsigned && (u = v.u[0]) > INT64_MAX)
        snprintf(why, nw, "attribute \"%s\" is too large (%llu)", name, (unsigned long long)u);
    else
        *out = v.is_unsigned ? (int64_t)v.u[0] : v.i[0], rc = 0;
    aval_free(&v);
    return rc;
}

static int get_f64(hid_t loc, const char *name, double *out, char *why, size_t nw)
{
    aval_t v;
    if (aread(loc, name, &v, why, nw) < 0)
        return -1;
    int rc = -1;
    if (v.n != 1 || (v.cls != H5T_FLOAT && v.cls != H5T_INTEGER))
        snprintf(why, nw, "attribute \"%s\" is not one number", name);
    else
        *out = v.d ? v.d[0] : v.u ? (double)v.u[0] : (double)v.i[0], rc = 0;
    aval_free(&v);
    return rc;
}

/* A scalar string attribute, malloc'ed into *out. */
static int get_str(hid_t loc, const char *name, char **out, char *why, size_t nw)
{
    aval_t v;
    if (aread(loc, name, &v, why, nw) < 0)
        return -1;
    int rc = -1;
    if (v.cls != H5T_STRING || v.n != 1)
        snprintf(why, nw, "attribute \"%s\" is not one string", name);
    else
        *out = v.s[0], v.s[0] = NULL, rc = 0;
    aval_free(&v);
    return rc;
}

/* Attribute names of loc in name order; *names malloc'ed. */
typedef struct {
    char **v;
    size_t n;
} names_t;

static herr_t collect_attr(hid_t loc, const char *name, const H5A_info_t *info, void *arg)
{
    names_t *l = arg;
    if (l->n >= 10000)
        return 1; /* enough */
    l->v = xrealloc(l->v, (l->n + 1) * sizeof *l->v);
    l->v[l->n++] = xstrdup(name);
    return 0;
}

static void attr_names(hid_t loc, names_t *l)
{
    hsize_t idx = 0;
    memset(l, 0, sizeof *l);
    if (H5Aiterate2(loc, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, l) < 0)
        H5Eclear2(H5E_DEFAULT);
}

static void names_free(names_t *l)
{
    for (size_t k = 0; k < l->n; k++)
        free(l->v[k]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* ------------------------------------------------------------------ the file's objects */

typedef enum { E_GROUP, E_DATASET, E_TYPE, E_SOFT, E_EXTERNAL, E_OTHER, E_BAD } ekind_t;

/* A dataset's type and extent, checked against the limits. */
typedef struct {
    int ok;            /* a float32 tensor within the limits, readable */
    char dtype[40];    /* "float32", "int32", "string", ... */
    int ndim;
    hsize_t dims[MAX_RANK];
    uint64_t numel;
    int has_crc;
    uint32_t crc;      /* its crc32 attribute */
    char *why;         /* !ok: what is wrong */
} tinfo_t;

typedef struct {
    char *path;
    ekind_t kind;
    char *note; /* links: the target; E_BAD: why */
    tinfo_t t;  /* datasets */
} entry_t;

typedef struct {
    const char *file;
    hid_t f;
    uint64_t size; /* bytes on disk */
    entry_t *e;
    size_t n;
    size_t *sorted; /* indices of e by path */
    char walk_why[600]; /* the walk stopped: why */
} ck_t;

static herr_t deny_elink(const char *parent_file, const char *parent_group, const char *child_file,
                         const char *child_obj, unsigned *acc, hid_t fapl, void *arg)
{
    return -1;
}

/* Open path (absolute) one component at a time, each a hard link. */
static hid_t open_path(hid_t f, const char *path, char *why, size_t nw)
{
    char h5[256], comp[MAX_PATH];
    hid_t cur = H5Oopen(f, "/", lapl);
    const char *p = path;
    while (cur >= 0 && *p) {
        while (*p == '/')
            p++;
        size_t len = strcspn(p, "/");
        if (!len)
            break;
        if (len >= sizeof comp) {
            snprintf(why, nw, "%s: path too long", path);
            H5Oclose(cur);
            return -1;
        }
        memcpy(comp, p, len);
        comp[len] = 0;
        p += len;
        H5L_info_t li;
        htri_t ex = H5Lexists(cur, comp, lapl);
        if (ex <= 0 || H5Lget_info(cur, comp, &li, lapl) < 0) {
            snprintf(why, nw, "%s: not found", path);
            H5Eclear2(H5E_DEFAULT);
            H5Oclose(cur);
            return -1;
        }
        if (li.type != H5L_TYPE_HARD) {
            snprintf(why, nw, "%s: a %s link (not followed)", path,
                     li.type == H5L_TYPE_SOFT ? "soft" : li.type == H5L_TYPE_EXTERNAL ? "external"
                                                                                     : "user-defined");
            H5Oclose(cur);
            return -1;
        }
        hid_t next = H5Oopen(cur, comp, lapl);
        if (next < 0)
            snprintf(why, nw, "%s: cannot open: %s", path, h5_reason(h5, sizeof h5));
        H5Oclose(cur);
        cur = next;
    }
    return cur;
}

static const ck_t *sort_ctx; /* of by_path */
static int by_path(const void *a, const void *b)
{
    return strcmp(sort_ctx->e[*(const size_t *)a].path, sort_ctx->e[*(const size_t *)b].path);
}

static entry_t *find(ck_t *c, const char *path)
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

static size_t add_entry(ck_t *c, const char *path, ekind_t kind, const char *note)
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
    ck_t *c;
    const char *prefix;
    int depth;
} walk_t;

static herr_t walk_cb(hid_t g, const char *name, const H5L_info_t *li, void *arg)
{
    walk_t *w = arg;
    ck_t *c = w->c;
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
        hid_t o = H5Oopen(g, name, lapl);
        if (o < 0) {
            add_entry(c, path, E_BAD, h5_reason(h5, sizeof h5));
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
                         h5_reason(h5, sizeof h5));
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
        if (val && H5Lget_val(g, name, val, sz, lapl) >= 0) {
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
static void inspect(ck_t *c, entry_t *e)
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
        snprintf(why, sizeof why, "cannot read its type or extent: %s", h5_reason(h5, sizeof h5));
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
        snprintf(why, sizeof why, "cannot read its extent: %s", h5_reason(h5, sizeof h5));
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
    if (H5Pget_external_count(dcpl) > 0) {
        snprintf(why, sizeof why, "its data is stored in external files (not read)");
        goto bad;
    }
    if (lay == H5D_VIRTUAL) {
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
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (sp >= 0)
        H5Sclose(sp);
    if (ft >= 0)
        H5Tclose(ft);
    if (ds >= 0)
        H5Dclose(ds);
}

static void ck_close(ck_t *c)
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
static int ck_open(ck_t *c, const char *file, char *why, size_t nw)
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
        const char *r = h5_reason(h5, sizeof h5);
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
                 h5_reason(h5, sizeof h5));
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
static hid_t open_group(ck_t *c, const char *path)
{
    char why[64];
    entry_t *e = find(c, path);
    return e && e->kind == E_GROUP ? open_path(c->f, path, why, sizeof why) : -1;
}

/* ------------------------------------------------------------------ reading tensors */

/* Pieces of a tensor in row-major order: a run of indices along dimension d,
 * the dimensions before it fixed, of at most max elements (at least a row). */
typedef struct {
    const tinfo_t *t;
    int d; /* -1: scalar */
    hsize_t rows, start[MAX_RANK], count[MAX_RANK];
    uint64_t n;
} piece_t;

static uint64_t inner(const tinfo_t *t, int d)
{
    uint64_t n = 1;
    for (int k = d + 1; k < t->ndim; k++)
        n *= t->dims[k];
    return n;
}

static void pc_count(piece_t *p)
{
    hsize_t left = p->t->dims[p->d] - p->start[p->d];
    p->count[p->d] = p->rows < left ? p->rows : left;
    p->n = p->count[p->d] * inner(p->t, p->d);
}

static int pc_first(piece_t *p, const tinfo_t *t, uint64_t max)
{
    memset(p, 0, sizeof *p);
    p->t = t;
    if (!t->numel)
        return 0;
    if (!t->ndim) {
        p->d = -1;
        p->n = 1;
        return 1;
    }
    while (inner(t, p->d) > max)
        p->d++;
    p->rows = max / inner(t, p->d);
    for (int k = 0; k < t->ndim; k++)
        p->count[k] = k < p->d ? 1 : t->dims[k];
    pc_count(p);
    return 1;
}

static int pc_next(piece_t *p)
{
    if (p->d < 0)
        return 0;
    p->start[p->d] += p->count[p->d];
    if (p->start[p->d] == p->t->dims[p->d]) {
        p->start[p->d] = 0;
        int k = p->d - 1;
        while (k >= 0 && ++p->start[k] == p->t->dims[k])
            p->start[k--] = 0;
        if (k < 0)
            return 0;
    }
    pc_count(p);
    return 1;
}

/* Read the piece as mt (H5T_IEEE_F32LE: the bytes the CRC covers). */
static int pc_read(const piece_t *p, hid_t ds, hid_t mt, void *buf, char *why, size_t nw)
{
    char h5[256];
    hsize_t n = p->n;
    hid_t fs = H5Dget_space(ds), ms = H5Screate_simple(1, &n, NULL);
    herr_t rc = fs < 0 || ms < 0 ? -1
                : p->d < 0       ? H5Sselect_all(fs)
                                 : H5Sselect_hyperslab(fs, H5S_SELECT_SET, p->start, NULL, p->count,
                                                       NULL);
    if (rc >= 0)
        rc = H5Dread(ds, mt, ms, fs, H5P_DEFAULT, buf);
    if (rc < 0)
        snprintf(why, nw, "cannot read elements %llu.. of it: %s",
                 (unsigned long long)(p->d < 0 ? 0 : p->start[p->d]), h5_reason(h5, sizeof h5));
    if (ms >= 0)
        H5Sclose(ms);
    if (fs >= 0)
        H5Sclose(fs);
    return rc < 0 ? -1 : 0;
}

/* The CRC-32 of a tensor's little-endian bytes, piece by piece; out (may be
 * -1) also gets the bytes. */
static int tensor_crc(ck_t *c, const entry_t *e, float *buf, int out, uint32_t *crc, char *why,
                      size_t nw)
{
    char w2[512];
    hid_t ds = open_path(c->f, e->path, why, nw);
    if (ds < 0)
        return -1;
    piece_t p;
    int rc = 0;
    *crc = 0;
    for (int more = pc_first(&p, &e->t, PIECE); more && !rc; more = pc_next(&p)) {
        if (pc_read(&p, ds, H5T_IEEE_F32LE, buf, w2, sizeof w2) < 0) {
            snprintf(why, nw, "%s: %s", e->path, w2);
            rc = -1;
            break;
        }
        *crc = ck_crc32(*crc, buf, p.n * 4);
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

/* ------------------------------------------------------------------ validation */

/* /model's "names", the parameters in registration order. */
static int param_names(ck_t *c, aval_t *v, char *why, size_t nw)
{
    char w2[512];
    hid_t g = open_group(c, "/model");
    if (g < 0) {
        snprintf(why, nw, "no group /model");
        return -1;
    }
    int rc = aread(g, "names", v, w2, sizeof w2);
    H5Oclose(g);
    if (rc < 0) {
        snprintf(why, nw, "/model: %s", w2);
        return -1;
    }
    if (v->cls != H5T_STRING || (v->rank != 1 && v->n)) {
        snprintf(why, nw, "/model: attribute \"names\" is not an array of strings");
        aval_free(v);
        return -1;
    }
    return 0;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    unsigned char b[8];
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)(v >> (8 * k));
    return fnv(h, b, 8);
}

/* The model fingerprint of doc/checkpoint.md from the names and the /model
 * datasets' shapes. -1 (why) if a parameter is missing or unreadable. */
static int fingerprint(ck_t *c, const aval_t *names, uint64_t *fp, char *why, size_t nw)
{
    char path[MAX_PATH];
    uint64_t h = CK_FNV_BASIS;
    for (size_t k = 0; k < names->n; k++) {
        snprintf(path, sizeof path, "/model/%s", names->s[k]);
        entry_t *e = find(c, path);
        if (!e || e->kind != E_DATASET || !e->t.ok) {
            sb_t s = {0};
            sb_esc(&s, path, strlen(path), 0);
            snprintf(why, nw, "parameter %zu: %s: %s", k, sb_str(&s),
                     !e ? "missing" : e->t.why ? e->t.why : "not a dataset");
            free(s.s);
            return -1;
        }
        h = fnv(h, names->s[k], strlen(names->s[k]) + 1);
        h = fnv(h, "float32", 8);
        h = fnv_u64(h, (uint64_t)e->t.ndim);
        for (int d = 0; d < e->t.ndim; d++)
            h = fnv_u64(h, e->t.dims[d]);
    }
    *fp = h;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int has_prefix(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

static int same_shape(const tinfo_t *a, const tinfo_t *b)
{
    return a->ndim == b->ndim && !memcmp(a->dims, b->dims, (size_t)a->ndim * sizeof *a->dims);
}

/* The optimizer state groups a type implies. */
static int expected_states(hid_t g, const char *type, const char **out)
{
    double m = 0;
    char why[256];
    if (!strcmp(type, "adamw")) {
        out[0] = "exp_avg", out[1] = "exp_avg_sq";
        return 2;
    }
    if (!strcmp(type, "sgd") && get_f64(g, "momentum", &m, why, sizeof why) == 0 && m > 0) {
        out[0] = "momentum_buffer";
        return 1;
    }
    return 0;
}

#define BAD(...) (snprintf(why, nw, __VA_ARGS__), RC_BAD)

/* The format and the root attributes. */
static int check_root(ck_t *c, char *why, size_t nw)
{
    char w2[600], *str = NULL;
    int64_t ver;
    uint64_t u;
    if (get_str(c->f, "format", &str, w2, sizeof w2) < 0)
        return BAD("not a ddpc checkpoint: %s", w2);
    int bad = strcmp(str, CK_FORMAT);
    if (bad)
        snprintf(why, nw, "not a ddpc checkpoint: attribute format is %s, expected \"%s\"",
                 esc_q(str, 1), CK_FORMAT);
    free(str);
    if (bad)
        return RC_BAD;
    if (get_i64(c->f, "format_version", &ver, w2, sizeof w2) < 0)
        return BAD("%s", w2);
    if (ver > CK_FORMAT_VERSION)
        return BAD("format version %lld is newer than this ddpc-ckpt (%s) reads (%d)",
                   (long long)ver, PACKAGE_VERSION, CK_FORMAT_VERSION);
    if (ver < 1)
        return BAD("format version %lld is not a valid version", (long long)ver);
    static const char *const ints[] = {"step", "epoch", "world_size", "model_fingerprint"};
    for (int k = 0; k < 4; k++)
        if (get_u64(c->f, ints[k], &u, w2, sizeof w2) < 0)
            return BAD("%s", w2);
    static const char *const strs[] = {"ddpc_version", "created"};
    for (int k = 0; k < 2; k++) {
        if (get_str(c->f, strs[k], &str, w2, sizeof w2) < 0)
            return BAD("%s", w2);
        free(str);
    }
    return RC_OK;
}

/* Every object: hard links only, no named datatypes, readable float32
 * datasets within the limits, each with its crc32 attribute. */
static int check_objects(ck_t *c, char *why, size_t nw)
{
    if (c->walk_why[0])
        return BAD("%s", c->walk_why);
    for (size_t k = 0; k < c->n; k++) {
        const entry_t *e = &c->e[k];
        if (e->kind == E_SOFT || e->kind == E_EXTERNAL || e->kind == E_OTHER)
            return BAD("%s is %s link to %s (a checkpoint has none; not followed)", esc(e->path),
                       e->kind == E_SOFT ? "a soft" : e->kind == E_EXTERNAL ? "an external"
                                                                            : "a user-defined",
                       e->note ? esc(e->note) : "?");
        if (e->kind == E_TYPE)
            return BAD("%s: a named datatype (a checkpoint has none)", esc(e->path));
        if (e->kind == E_BAD)
            return BAD("%s: %s", esc(e->path), e->note);
        if (e->kind == E_DATASET && !e->t.ok)
            return BAD("%s: %s", esc(e->path), e->t.why);
        if (e->kind == E_DATASET && !e->t.has_crc)
            return BAD("%s has no crc32 attribute", esc(e->path));
    }
    return RC_OK;
}

/* The parameters (each name of /model's list a dataset, each dataset under
 * /model in the list, the fingerprint) and the optimizer (every state its
 * type implies, each state a tensor of each parameter's shape). */
static int check_params(ck_t *c, const aval_t *names, char *why, size_t nw)
{
    char w2[600], path[MAX_PATH];
    uint64_t fp, fp2;
    if (fingerprint(c, names, &fp, w2, sizeof w2) < 0)
        return BAD("/model: %s", w2);
    if (get_u64(c->f, "model_fingerprint", &fp2, w2, sizeof w2) == 0 && fp != fp2)
        return BAD("model_fingerprint %016llx does not match the parameters' names and shapes "
                   "(%016llx)", (unsigned long long)fp2, (unsigned long long)fp);
    int rc = RC_OK;
    char **sorted = xrealloc(NULL, names->n * sizeof *sorted);
    memcpy(sorted, names->s, names->n * sizeof *sorted);
    qsort(sorted, names->n, sizeof *sorted, cmp_str);
    for (size_t k = 1; rc == RC_OK && k < names->n; k++)
        if (!strcmp(sorted[k - 1], sorted[k]))
            rc = BAD("/model: the parameter name %s is listed twice", esc_q(sorted[k], 1));
    for (size_t k = 0; rc == RC_OK && k < c->n; k++) {
        const char *rel = c->e[k].path + 7;
        if (c->e[k].kind == E_DATASET && has_prefix(c->e[k].path, "/model/") &&
            (!names->n || !bsearch(&rel, sorted, names->n, sizeof *sorted, cmp_str)))
            rc = BAD("%s is not a parameter (not in /model's names)", esc(c->e[k].path));
    }
    free(sorted);
    hid_t g = rc == RC_OK ? open_group(c, "/optim") : -1;
    if (g < 0)
        return rc;
    const char *want[4];
    char *type = NULL;
    int nwant = 0;
    if (get_str(g, "type", &type, w2, sizeof w2) < 0)
        rc = BAD("/optim: %s", w2);
    else
        nwant = expected_states(g, type, want);
    for (int k = 0; rc == RC_OK && k < nwant; k++) {
        snprintf(path, sizeof path, "/optim/%s", want[k]);
        entry_t *e = find(c, path);
        if (!e || e->kind != E_GROUP)
            rc = BAD("missing %s (state of the %s optimizer)", esc(path), esc(type));
    }
    for (size_t k = 0; rc == RC_OK && k < c->n; k++) {
        const entry_t *st = &c->e[k];
        if (st->kind != E_GROUP || !has_prefix(st->path, "/optim/") || strchr(st->path + 7, '/'))
            continue;
        for (size_t j = 0; rc == RC_OK && j < names->n; j++) {
            snprintf(path, sizeof path, "/model/%s", names->s[j]);
            const entry_t *m = find(c, path);
            snprintf(path, sizeof path, "%s/%s", st->path, names->s[j]);
            const entry_t *e = find(c, path);
            if (!e || e->kind != E_DATASET) {
                rc = BAD("missing %s (optimizer state of parameter %zu)", esc(path), j);
            } else if (!same_shape(&e->t, &m->t)) {
                sb_t a = {0}, b = {0};
                sb_shape(&a, e->t.ndim, e->t.dims);
                sb_shape(&b, m->t.ndim, m->t.dims);
                rc = BAD("%s has shape %s, its parameter %s", esc(path), sb_str(&a), sb_str(&b));
                free(a.s), free(b.s);
            }
        }
    }
    free(type);
    H5Oclose(g);
    return rc;
}

/* Everything but the data. */
static int check_structure(ck_t *c, char *why, size_t nw)
{
    aval_t names;
    int rc = check_root(c, why, nw);
    if (rc == RC_OK)
        rc = check_objects(c, why, nw);
    if (rc == RC_OK && param_names(c, &names, why, nw) < 0)
        rc = RC_BAD;
    else if (rc == RC_OK) {
        rc = check_params(c, &names, why, nw);
        aval_free(&names);
    }
    return rc;
}

/* check_structure, then (crcs) every dataset's CRC-32 in file order.
 * RC_OK: *nds datasets, *nbytes bytes verified. */
static int validate(ck_t *c, int crcs, uint64_t *nds, uint64_t *nbytes, char *why, size_t nw)
{
    int rc = check_structure(c, why, nw);
    *nds = *nbytes = 0;
    if (rc != RC_OK || !crcs)
        return rc;
    float *buf = xrealloc(NULL, PIECE * sizeof *buf);
    for (size_t k = 0; rc == RC_OK && k < c->n; k++) {
        const entry_t *e = &c->e[k];
        uint32_t crc;
        if (e->kind != E_DATASET)
            continue;
        if (tensor_crc(c, e, buf, -1, &crc, why, nw) < 0) {
            rc = RC_BAD;
            break;
        }
        if (crc != e->t.crc) {
            sb_t s = {0};
            sb_esc(&s, e->path, strlen(e->path), 0);
            rc = BAD("%s is corrupt: CRC-32 expected %08x (its crc32 attribute), found %08x",
                     sb_str(&s), e->t.crc, crc);
            free(s.s);
        }
        (*nds)++;
        *nbytes += e->t.numel * 4;
    }
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------ ls */

typedef struct {
    uint64_t step;
    int tmp;
    char name[64];
} lsent_t;

static int newest_first(const void *a, const void *b)
{
    const lsent_t *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? 1 : -1;
    return x->tmp - y->tmp;
}

/* "ckpt-<digits>.h5" (0) or a save's temporary "ckpt-<digits>.h5.tmp" or
 * "ckpt-<digits>.h5.tmp.<pid>.<host>" (1); -1 otherwise. */
static int ckpt_name(const char *name, uint64_t *step)
{
    const char *p = name + 5, *q = p;
    if (strncmp(name, "ckpt-", 5))
        return -1;
    while (*q >= '0' && *q <= '9')
        q++;
    if (q == p || q - p > 19)
        return -1;
    *step = strtoull(p, NULL, 10);
    return !strcmp(q, ".h5") ? 0 : !strncmp(q, ".h5.tmp", 7) && (!q[7] || q[7] == '.') ? 1 : -1;
}

static void ls_field_u(sb_t *b, ck_t *c, const char *name)
{
    uint64_t v;
    char why[256];
    if (c->f >= 0 && get_u64(c->f, name, &v, why, sizeof why) == 0)
        sb_add(b, " %s=%llu", name, (unsigned long long)v);
    else
        sb_add(b, " %s=?", name);
}

static int cmd_ls(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return err(RC_IO, "%s: cannot list the directory: %s", dir, strerror(errno));
    lsent_t *v = NULL;
    size_t n = 0;
    uint64_t step;
    for (struct dirent *de; (de = readdir(d));) {
        int kind = strlen(de->d_name) < sizeof v->name ? ckpt_name(de->d_name, &step) : -1;
        if (kind < 0)
            continue;
        v = xrealloc(v, (n + 1) * sizeof *v);
        v[n].step = step;
        v[n].tmp = kind;
        snprintf(v[n++].name, sizeof v->name, "%s", de->d_name);
    }
    closedir(d);
    if (!n) {
        free(v);
        return err(RC_BAD, "%s: no checkpoint (no file ckpt-<step>.h5)", dir);
    }
    qsort(v, n, sizeof *v, newest_first);
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    int valid = 0;
    char path[MAX_PATH + 80], why[1024];
    sb_t line = {0};
    for (size_t k = 0; k < n; k++) {
        snprintf(path, sizeof path, "%.*s%s%s", (int)dl, dir, dir[dl - 1] == '/' ? "" : "/",
                 v[k].name);
        if (v[k].tmp) {
            printf("%s status=incomplete (leftover of an interrupted save)\n", path);
            continue;
        }
        ck_t c;
        uint64_t nds, nb;
        int rc = ck_open(&c, path, why, sizeof why);
        if (rc == RC_OK)
            rc = validate(&c, 1, &nds, &nb, why, sizeof why);
        sb_clear(&line);
        sb_add(&line, "%s", path);
        ls_field_u(&line, &c, "step");
        ls_field_u(&line, &c, "epoch");
        ls_field_u(&line, &c, "world_size");
        char *created = NULL, w2[256];
        if (c.f >= 0 && get_str(c.f, "created", &created, w2, sizeof w2) == 0) {
            sb_add(&line, " created=");
            sb_esc(&line, created, strlen(created), 0);
            free(created);
        } else {
            sb_add(&line, " created=?");
        }
        if (rc == RC_OK)
            sb_add(&line, " status=valid");
        else
            sb_add(&line, " status=invalid: %s", why);
        printf("%s\n", sb_str(&line));
        valid += rc == RC_OK;
        ck_close(&c);
    }
    free(line.s);
    free(v);
    fflush(stdout);
    return valid ? RC_OK : RC_BAD;
}

/* ------------------------------------------------------------------ show */

static int in_list(const char *const *list, const char *name)
{
    for (size_t k = 0; list && list[k]; k++)
        if (!strcmp(list[k], name))
            return 1;
    return 0;
}

/* "PREFIXNAME: VALUE" */
static void show_attr(hid_t loc, const char *prefix, const char *name, sb_t *b)
{
    sb_clear(b);
    sb_add(b, "%s", prefix);
    sb_esc(b, name, strlen(name), 0);
    sb_add(b, ": ");
    sb_attr(b, loc, name);
    printf("%s\n", sb_str(b));
}

/* Each attribute of loc on its line: those of `order` first (when present),
 * then the others by name, but not `skip`. prefix: "" (root), "optim.", ... */
static void show_attrs(hid_t loc, const char *prefix, const char *const *order, const char *skip)
{
    sb_t b = {0};
    names_t all;
    attr_names(loc, &all);
    for (size_t k = 0; order && order[k]; k++)
        if (H5Aexists(loc, order[k]) > 0)
            show_attr(loc, prefix, order[k], &b);
    for (size_t k = 0; k < all.n; k++)
        if (!in_list(order, all.v[k]) && !(skip && !strcmp(all.v[k], skip)))
            show_attr(loc, prefix, all.v[k], &b);
    H5Eclear2(H5E_DEFAULT);
    names_free(&all);
    free(b.s);
}

static int cmd_show(const char *file)
{
    static const char *const root[] = {"format", "format_version", "ddpc_version", "step", "epoch",
                                       "world_size", "created", NULL};
    static const char *const optim[] = {"type", "lr", "momentum", "dampening", "nesterov",
                                        "weight_decay", "beta1", "beta2", "eps", "clip_norm",
                                        "dynamic_loss_scale", "loss_scale", "scale_good_steps",
                                        "scale_growth_interval", "step", NULL};
    static const char *const sampler[] = {"seed", "epoch", "consumed", "dataset_size", "shuffle",
                                          "drop_last", NULL};
    char why[1024], *fmt = NULL;
    ck_t c;
    int rc = ck_open(&c, file, why, sizeof why);
    if (rc != RC_OK) {
        ck_close(&c);
        return err(rc, "%s: %s", file, why);
    }
    if (get_str(c.f, "format", &fmt, why, sizeof why) < 0 || strcmp(fmt, CK_FORMAT)) {
        if (fmt)
            snprintf(why, sizeof why, "attribute format is not \"%s\"", CK_FORMAT);
        free(fmt);
        ck_close(&c);
        return err(RC_BAD, "%s: not a ddpc checkpoint: %s", file, why);
    }
    free(fmt);
    printf("file: %s\n", file);
    show_attrs(c.f, "", root, "model_fingerprint");
    uint64_t fp, fp2;
    aval_t names = {0};
    char w2[512];
    if (get_u64(c.f, "model_fingerprint", &fp, why, sizeof why) < 0)
        printf("model_fingerprint: (%s)\n", why);
    else if (param_names(&c, &names, why, sizeof why) < 0 ||
             fingerprint(&c, &names, &fp2, why, sizeof why) < 0)
        printf("model_fingerprint: %016llx (cannot recompute: %s)\n", (unsigned long long)fp, why);
    else
        printf("model_fingerprint: %016llx (%s)\n", (unsigned long long)fp,
               fp == fp2 ? "matches the parameters' names and shapes"
                         : "does not match the parameters' names and shapes");
    printf("parameters: %zu\n", names.n);
    aval_free(&names);
    /* the groups: known ones in the documented order, then any others */
    static const struct {
        const char *path, *prefix;
        const char *const *order;
        const char *absent;
    } groups[] = {{"/model", "model.", NULL, "model: none"},
                  {"/optim", "optim.", optim, "optim: none (parameters only)"},
                  {"/sampler", "sampler.", sampler, "sampler: none"},
                  {"/rng", "rng.", NULL, NULL},
                  {"/user", "user.", NULL, NULL}};
    sb_t b = {0};
    for (size_t k = 0; k < sizeof groups / sizeof *groups; k++) {
        hid_t g = open_group(&c, groups[k].path);
        if (g < 0) {
            if (groups[k].absent)
                printf("%s\n", groups[k].absent);
            continue;
        }
        if (!strcmp(groups[k].path, "/rng") && H5Aexists(g, "state") <= 0)
            printf("rng.state: none\n");
        show_attrs(g, groups[k].prefix, groups[k].order, NULL);
        H5Oclose(g);
    }
    for (size_t k = 1; k < c.n; k++) { /* attributes of other groups */
        const entry_t *e = &c.e[k];
        int known = 0;
        for (size_t j = 0; j < sizeof groups / sizeof *groups && !known; j++)
            known = !strcmp(e->path, groups[j].path);
        if (e->kind != E_GROUP || known)
            continue;
        hid_t g = open_path(c.f, e->path, w2, sizeof w2);
        if (g < 0)
            continue;
        sb_clear(&b);
        sb_esc(&b, e->path + 1, strlen(e->path + 1), 0);
        sb_add(&b, ".");
        show_attrs(g, sb_str(&b), NULL, NULL);
        H5Oclose(g);
    }
    /* what is not a group or a tensor */
    for (size_t k = 0; k < c.n; k++) {
        const entry_t *e = &c.e[k];
        const char *what = e->kind == E_SOFT       ? "soft link to "
                           : e->kind == E_EXTERNAL ? "external link to "
                           : e->kind == E_OTHER    ? ""
                           : e->kind == E_TYPE     ? "named datatype"
                           : e->kind == E_BAD      ? "unreadable: "
                                                   : NULL;
        if (!what)
            continue;
        sb_clear(&b);
        sb_add(&b, "object ");
        sb_esc(&b, e->path, strlen(e->path), 0);
        sb_add(&b, ": %s%s", what, e->note ? e->note : "");
        if (e->kind == E_SOFT || e->kind == E_EXTERNAL || e->kind == E_OTHER)
            sb_add(&b, " (not followed)");
        printf("%s\n", sb_str(&b));
    }
    if (c.walk_why[0])
        printf("objects: not all listed: %s\n", c.walk_why);
    /* the tensors */
    uint64_t nt = 0, elems = 0;
    for (size_t k = 0; k < c.n; k++)
        if (c.e[k].kind == E_DATASET)
            nt++, elems += c.e[k].t.numel;
    printf("tensors: %llu (%llu elements, %llu bytes)\n", (unsigned long long)nt,
           (unsigned long long)elems, (unsigned long long)elems * 4);
    for (size_t k = 0; k < c.n; k++) {
        const entry_t *e = &c.e[k];
        if (e->kind != E_DATASET)
            continue;
        sb_clear(&b);
        sb_add(&b, "tensor ");
        sb_esc(&b, e->path, strlen(e->path), 0);
        sb_add(&b, " dtype=%s shape=", e->t.dtype);
        sb_shape(&b, e->t.ndim, e->t.dims);
        sb_add(&b, " numel=%llu", (unsigned long long)e->t.numel);
        if (e->t.has_crc)
            sb_add(&b, " crc32=%08x", e->t.crc);
        else
            sb_add(&b, " crc32=none");
        if (!e->t.ok)
            sb_add(&b, " (problem: %s)", e->t.why);
        printf("%s\n", sb_str(&b));
    }
    free(b.s);
    ck_close(&c);
    fflush(stdout);
    return RC_OK;
}

/* ------------------------------------------------------------------ verify */

static int cmd_verify(const char *file)
{
    char why[1024];
    ck_t c;
    uint64_t nds, nb;
    int rc = ck_open(&c, file, why, sizeof why);
    if (rc == RC_OK)
        rc = validate(&c, 1, &nds, &nb, why, sizeof why);
    ck_close(&c);
    if (rc != RC_OK)
        return err(rc, "%s: %s", file, why);
    printf("ok: %s: %llu datasets, %llu bytes verified\n", file, (unsigned long long)nds,
           (unsigned long long)nb);
    return RC_OK;
}

/* ------------------------------------------------------------------ diff */

/* Paths of c's entries of one kind, sorted. */
static char **paths_of(ck_t *c, ekind_t kind, size_t *n)
{
    char **v = NULL;
    *n = 0;
    for (size_t k = 0; k < c->n; k++)
        if (c->e[k].kind == kind) {
            v = xrealloc(v, (*n + 1) * sizeof *v);
            v[(*n)++] = c->e[k].path;
        }
    if (*n)
        qsort(v, *n, sizeof *v, cmp_str);
    return v;
}

/* Two sorted lists of names walked together. */
typedef struct {
    char **a, **b;
    size_t na, nb, i, j;
} merge_t;

/* The next name of either list: *x its entry in a (or NULL), *y in b. */
static int merge_next(merge_t *m, const char **x, const char **y)
{
    if (m->i == m->na && m->j == m->nb)
        return 0;
    int r = m->i == m->na ? 1 : m->j == m->nb ? -1 : strcmp(m->a[m->i], m->b[m->j]);
    *x = r <= 0 ? m->a[m->i++] : NULL;
    *y = r >= 0 ? m->b[m->j++] : NULL;
    return 1;
}

typedef struct {
    uint64_t same, differ, only_a, only_b, shapes, attrs;
} dstat_t;

/* Compare two float32 tensors of one shape. RC_OK, or RC_IO (why). */
static int diff_tensor(ck_t *ca, const entry_t *ea, ck_t *cb, const entry_t *eb, float *ba,
                       float *bb, uint64_t *ndiff, double *maxd, int *nan, char *why, size_t nw)
{
    char w2[512];
    hid_t da = open_path(ca->f, ea->path, why, nw), db = da < 0 ? -1 : open_path(cb->f, eb->path, why, nw);
    int rc = da < 0 || db < 0 ? RC_IO : RC_OK;
    piece_t p;
    *ndiff = 0, *maxd = 0, *nan = 0;
    for (int more = rc == RC_OK && pc_first(&p, &ea->t, PIECE); more; more = pc_next(&p)) {
        if (pc_read(&p, da, H5T_NATIVE_FLOAT, ba, w2, sizeof w2) < 0 ||
            pc_read(&p, db, H5T_NATIVE_FLOAT, bb, w2, sizeof w2) < 0) {
            snprintf(why, nw, "%s: %s", ea->path, w2);
            rc = RC_IO;
            break;
        }
        for (uint64_t k = 0; k < p.n; k++) {
            if (!memcmp(&ba[k], &bb[k], sizeof *ba))
                continue;
            (*ndiff)++;
            double d = fabs((double)ba[k] - (double)bb[k]);
            if (d != d)
                *nan = 1;
            else if (d > *maxd)
                *maxd = d;
        }
    }
    if (db >= 0)
        H5Dclose(db);
    if (da >= 0)
        H5Dclose(da);
    return rc;
}

/* Attributes of the groups of both files; the root's "created" is not compared. */
static void diff_attrs(ck_t *ca, ck_t *cb, dstat_t *st)
{
    size_t na, nb;
    char **ga = paths_of(ca, E_GROUP, &na), **gb = paths_of(cb, E_GROUP, &nb), w2[256];
    sb_t key = {0}, va = {0}, vb = {0};
    merge_t mg = {ga, gb, na, nb, 0, 0};
    for (const char *a, *b; merge_next(&mg, &a, &b);) {
        const char *g = a ? a : b;
        sb_clear(&key);
        if (strcmp(g, "/"))
            sb_esc(&key, g + 1, strlen(g + 1), 0);
        if (!a || !b) {
            printf("group /%s: only in %s\n", sb_str(&key), a ? "A" : "B");
            st->attrs++;
            continue;
        }
        hid_t la = open_path(ca->f, g, w2, sizeof w2), lb = open_path(cb->f, g, w2, sizeof w2);
        names_t xa = {0}, xb = {0};
        if (la >= 0)
            attr_names(la, &xa);
        if (lb >= 0)
            attr_names(lb, &xb);
        size_t keylen = key.n;
        merge_t mx = {xa.v, xb.v, xa.n, xb.n, 0, 0};
        for (const char *x, *y; merge_next(&mx, &x, &y);) {
            const char *name = x ? x : y;
            if (!strcmp(g, "/") && !strcmp(name, "created"))
                continue;
            sb_trunc(&key, keylen);
            if (keylen)
                sb_add(&key, ".");
            sb_esc(&key, name, strlen(name), 0);
            if (!x || !y) {
                printf("attr %s: only in %s\n", sb_str(&key), x ? "A" : "B");
                st->attrs++;
                continue;
            }
            sb_clear(&va), sb_clear(&vb);
            sb_attr(&va, la, name);
            sb_attr(&vb, lb, name);
            if (strcmp(sb_str(&va), sb_str(&vb))) {
                printf("attr %s: %s in A, %s in B\n", sb_str(&key), sb_str(&va), sb_str(&vb));
                st->attrs++;
            }
        }
        names_free(&xa), names_free(&xb);
        if (la >= 0)
            H5Oclose(la);
        if (lb >= 0)
            H5Oclose(lb);
    }
    H5Eclear2(H5E_DEFAULT);
    free(key.s), free(va.s), free(vb.s);
    free(ga), free(gb);
}

static int cmd_diff(const char *fa, const char *fb)
{
    char why[1024];
    ck_t ca, cb;
    int rc = ck_open(&ca, fa, why, sizeof why);
    if (rc != RC_OK) {
        ck_close(&ca);
        return err(RC_IO, "%s: %s", fa, why);
    }
    if ((rc = ck_open(&cb, fb, why, sizeof why)) != RC_OK) {
        ck_close(&ca), ck_close(&cb);
        return err(RC_IO, "%s: %s", fb, why);
    }
    printf("A: %s\nB: %s\n", fa, fb);
    size_t na, nb;
    char **ta = paths_of(&ca, E_DATASET, &na), **tb = paths_of(&cb, E_DATASET, &nb);
    float *ba = xrealloc(NULL, PIECE * sizeof *ba), *bb = xrealloc(NULL, PIECE * sizeof *bb);
    dstat_t st = {0};
    sb_t line = {0}, sa = {0}, sbb = {0};
    rc = RC_OK;
    merge_t mt = {ta, tb, na, nb, 0, 0};
    for (const char *a, *b; rc == RC_OK && merge_next(&mt, &a, &b);) {
        const char *path = a ? a : b;
        const entry_t *ea = a ? find(&ca, a) : NULL, *eb = b ? find(&cb, b) : NULL;
        sb_clear(&line);
        sb_add(&line, "tensor ");
        sb_esc(&line, path, strlen(path), 0);
        if (!a || !b) {
            sb_add(&line, ": only in %s", a ? "A" : "B");
            (*(a ? &st.only_a : &st.only_b))++;
        } else if (!ea->t.ok || !eb->t.ok || !same_shape(&ea->t, &eb->t)) {
            sb_clear(&sa), sb_clear(&sbb);
            sb_add(&sa, "%s", ea->t.dtype);
            sb_shape(&sa, ea->t.ndim, ea->t.dims);
            sb_add(&sbb, "%s", eb->t.dtype);
            sb_shape(&sbb, eb->t.ndim, eb->t.dims);
            if (!strcmp(sb_str(&sa), sb_str(&sbb)))
                sb_add(&line, ": cannot compare: %s", !ea->t.ok ? ea->t.why : eb->t.why);
            else
                sb_add(&line, ": %s in A, %s in B", sb_str(&sa), sb_str(&sbb));
            st.shapes++;
        } else {
            uint64_t nd;
            double maxd;
            int nan;
            if ((rc = diff_tensor(&ca, ea, &cb, eb, ba, bb, &nd, &maxd, &nan, why, sizeof why)) !=
                RC_OK)
                break;
            if (!nd) {
                sb_add(&line, ": identical (%llu element%s)", (unsigned long long)ea->t.numel,
                       ea->t.numel == 1 ? "" : "s");
                st.same++;
            } else {
                sb_add(&line, ": %llu of %llu element%s differ, max |a-b| = ", (unsigned long long)nd,
                       (unsigned long long)ea->t.numel, ea->t.numel == 1 ? "" : "s");
                if (nan)
                    sb_add(&line, "nan");
                else
                    sb_add(&line, "%.6g", maxd);
                st.differ++;
            }
        }
        printf("%s\n", sb_str(&line));
    }
    if (rc == RC_OK) {
        diff_attrs(&ca, &cb, &st);
        uint64_t bad = st.differ + st.only_a + st.only_b + st.shapes + st.attrs;
        printf("summary: %llu tensors: %llu identical, %llu differ, %llu only in A, %llu only in "
               "B, %llu of another shape or type; %llu attributes or groups differ (created not "
               "compared): "
               "%s\n",
               (unsigned long long)(st.same + st.differ + st.only_a + st.only_b + st.shapes),
               (unsigned long long)st.same, (unsigned long long)st.differ,
               (unsigned long long)st.only_a, (unsigned long long)st.only_b,
               (unsigned long long)st.shapes, (unsigned long long)st.attrs,
               bad ? "different" : "identical");
        rc = bad ? RC_BAD : RC_OK;
    } else {
        err(RC_IO, "%s", why);
    }
    free(line.s), free(sa.s), free(sbb.s);
    free(ba), free(bb), free(ta), free(tb);
    ck_close(&ca), ck_close(&cb);
    fflush(stdout);
    return rc;
}

/* ------------------------------------------------------------------ export */

/* JSON string of UTF-8 bytes; -1 if s is not valid UTF-8. */
static int sb_json(sb_t *b, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    sb_add(b, "\"");
    while (*p) {
        int len = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3
                              : (*p & 0xf8) == 0xf0 ? 4 : 0;
        if (!len || (len == 2 && *p < 0xc2))
            return -1;
        for (int k = 1; k < len; k++)
            if ((p[k] & 0xc0) != 0x80)
                return -1;
        if (*p == '"' || *p == '\\')
            sb_add(b, "\\%c", *p);
        else if (*p < 0x20)
            sb_add(b, "\\u%04x", *p);
        else
            sb_add(b, "%.*s", len, (const char *)p);
        p += len;
    }
    sb_add(b, "\"");
    return 0;
}

typedef struct {
    const entry_t *e;
    const char *name; /* under /model */
} xt_t;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const xt_t *)a)->name, ((const xt_t *)b)->name);
}

/* The safetensors header: tensors by name, offsets contiguous from 0, the
 * checkpoint's metadata as strings; padded with spaces to a multiple of 8. */
static int st_header(ck_t *c, const xt_t *t, size_t n, sb_t *h, char *why, size_t nw)
{
    char w2[256], *s;
    uint64_t u, off = 0;
    sb_add(h, "{\"__metadata__\":{\"format\":\"ddpc\"");
    static const char *const ints[] = {"format_version", "step", "epoch", "world_size"};
    static const char *const strs[] = {"ddpc_version", "created"};
    for (int k = 0; k < 4; k++)
        if (get_u64(c->f, ints[k], &u, w2, sizeof w2) == 0)
            sb_add(h, ",\"%s\":\"%llu\"", ints[k], (unsigned long long)u);
    for (int k = 0; k < 2; k++)
        if (get_str(c->f, strs[k], &s, w2, sizeof w2) == 0) {
            sb_add(h, ",\"%s\":", strs[k]);
            int bad = sb_json(h, s);
            free(s);
            if (bad)
                return BAD("attribute %s is not UTF-8", strs[k]);
        }
    if (get_u64(c->f, "model_fingerprint", &u, w2, sizeof w2) == 0)
        sb_add(h, ",\"model_fingerprint\":\"%016llx\"", (unsigned long long)u);
    sb_add(h, "}");
    for (size_t k = 0; k < n; k++) {
        sb_add(h, ",");
        if (sb_json(h, t[k].name) < 0) {
            sb_t e = {0};
            sb_esc(&e, t[k].e->path, strlen(t[k].e->path), 0);
            snprintf(why, nw, "%s: the name is not UTF-8, which safetensors requires", sb_str(&e));
            free(e.s);
            return RC_BAD;
        }
        sb_add(h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t[k].e->t.ndim; d++)
            sb_add(h, "%s%llu", d ? "," : "", (unsigned long long)t[k].e->t.dims[d]);
        sb_add(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
               (unsigned long long)(off + t[k].e->t.numel * 4));
        off += t[k].e->t.numel * 4;
    }
    sb_add(h, "}");
    while ((h->n) % 8)
        sb_add(h, " ");
    if (h->n > ST_MAX_HEADER)
        return BAD("the safetensors header would have %zu bytes, more than readers accept (%zu)",
                   h->n, ST_MAX_HEADER);
    return RC_OK;
}

static int write_all(int fd, const void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t k = write(fd, (const char *)p + done, n - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        done += (size_t)k;
    }
    return 0;
}

static int cmd_export(const char *file, const char *out, int force)
{
    char why[1024], *fmt = NULL, tmp[MAX_PATH + 8];
    const size_t nw = sizeof why; /* for BAD */
    struct stat sb;
    if (!force && lstat(out, &sb) == 0)
        return err(RC_IO, "%s: exists (use --force to replace it)", out);
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", out) >= sizeof tmp)
        return err(RC_IO, "%s: path too long", out);
    ck_t c;
    int rc = ck_open(&c, file, why, sizeof why);
    if (rc != RC_OK) {
        ck_close(&c);
        return err(rc, "%s: %s", file, why);
    }
    if (get_str(c.f, "format", &fmt, why, sizeof why) < 0 || strcmp(fmt, CK_FORMAT)) {
        free(fmt);
        ck_close(&c);
        return err(RC_BAD, "%s: not a ddpc checkpoint (attribute format)", file);
    }
    free(fmt);
    xt_t *t = NULL;
    size_t n = 0;
    sb_t h = {0};
    rc = RC_OK;
    if (!find(&c, "/model") || find(&c, "/model")->kind != E_GROUP)
        rc = BAD("no group /model");
    for (size_t k = 0; rc == RC_OK && k < c.n; k++) {
        const entry_t *e = &c.e[k];
        if (!has_prefix(e->path, "/model/") || e->kind == E_GROUP)
            continue;
        sb_t s = {0};
        sb_esc(&s, e->path, strlen(e->path), 0);
        if (e->kind != E_DATASET)
            rc = BAD("%s: not a dataset reachable by hard links (not exported)", sb_str(&s));
        else if (!e->t.ok)
            rc = BAD("%s: %s", sb_str(&s), e->t.why);
        else if (!e->t.has_crc)
            rc = BAD("%s has no crc32 attribute", sb_str(&s));
        free(s.s);
        t = xrealloc(t, (n + 1) * sizeof *t);
        t[n].e = e;
        t[n++].name = e->path + 7;
    }
    if (rc == RC_OK) {
        qsort(t, n, sizeof *t, by_name);
        rc = st_header(&c, t, n, &h, why, sizeof why);
    }
    if (rc != RC_OK) {
        free(t), free(h.s);
        ck_close(&c);
        return err(rc, "%s: %s", file, why);
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) {
        free(t), free(h.s);
        ck_close(&c);
        return err(RC_IO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    unsigned char len8[8];
    for (int k = 0; k < 8; k++)
        len8[k] = (unsigned char)((uint64_t)h.n >> (8 * k));
    float *buf = xrealloc(NULL, PIECE * sizeof *buf);
    const char *where = tmp;
    if (write_all(fd, len8, 8) < 0 || write_all(fd, h.s, h.n) < 0) {
        snprintf(why, sizeof why, "cannot write: %s", strerror(errno));
        rc = RC_IO;
    }
    uint64_t bytes = 0;
    for (size_t k = 0; rc == RC_OK && k < n; k++) {
        uint32_t crc;
        int r = tensor_crc(&c, t[k].e, buf, fd, &crc, why, sizeof why);
        if (r == -2)
            rc = RC_IO;
        else if (r < 0)
            rc = RC_BAD, where = file;
        else if (crc != t[k].e->t.crc) {
            sb_t s = {0};
            sb_esc(&s, t[k].e->path, strlen(t[k].e->path), 0);
            snprintf(why, sizeof why, "%s is corrupt: CRC-32 expected %08x (its crc32 attribute), "
                     "found %08x; nothing exported", sb_str(&s), t[k].e->t.crc, crc);
            free(s.s);
            rc = RC_BAD, where = file;
        }
        bytes += t[k].e->t.numel * 4;
    }
    if (rc == RC_OK && fsync(fd) != 0)
        snprintf(why, sizeof why, "cannot fsync: %s", strerror(errno)), rc = RC_IO;
    if (close(fd) != 0 && rc == RC_OK)
        snprintf(why, sizeof why, "cannot close: %s", strerror(errno)), rc = RC_IO;
    if (rc == RC_OK) {
        /* without --force, link(2) refuses an OUT created meanwhile */
        int r = force ? rename(tmp, out) : link(tmp, out);
        if (r == 0 && !force)
            unlink(tmp);
        if (r != 0 && !force && errno != EEXIST && errno != EPERM && errno != EXDEV) {
            snprintf(why, sizeof why, "cannot create: %s", strerror(errno));
            rc = RC_IO, where = out;
        } else if (r != 0 && !force && errno == EEXIST) {
            snprintf(why, sizeof why, "exists (use --force to replace it)");
            rc = RC_IO, where = out;
        } else if (r != 0 && !force) { /* no hard links here */
            if (lstat(out, &sb) == 0)
                snprintf(why, sizeof why, "exists (use --force to replace it)"), rc = RC_IO;
            else if (rename(tmp, out) != 0)
                snprintf(why, sizeof why, "cannot rename %.700s to it: %s", tmp, strerror(errno)),
                    rc = RC_IO;
            where = out;
        } else if (r != 0) {
            snprintf(why, sizeof why, "cannot rename %.700s to it: %s", tmp, strerror(errno));
            rc = RC_IO, where = out;
        }
    }
    if (rc != RC_OK)
        unlink(tmp);
    else
        printf("exported %s: %zu tensors, %llu bytes of float32 to %s\n", file, n,
               (unsigned long long)bytes, out);
    free(buf), free(t), free(h.s);
    ck_close(&c);
    if (rc != RC_OK)
        return err(rc, "%s: %s", where, why);
    return RC_OK;
}

/* ------------------------------------------------------------------ main */

static void help(void)
{
    printf("usage: ddpc-ckpt COMMAND ARGS...\n"
           "Inspect, check, compare and export ddpc checkpoints (HDF5, doc/checkpoint.md).\n"
           "\n"
           "commands:\n"
           "  ls DIR            one line per checkpoint file of DIR, newest step first:\n"
           "                    PATH step=S epoch=E world_size=N created=T status=valid\n"
           "                    (or status=invalid: WHY; each file is fully verified);\n"
           "                    a ckpt-<step>.h5.tmp is listed as\n"
           "                    status=incomplete (leftover of an interrupted save)\n"
           "  show FILE         root metadata, model fingerprint, optimizer, sampler, RNG and\n"
           "                    user attributes, then one line per tensor: path, dtype,\n"
           "                    shape, elements, crc32 attribute (CRCs are not checked)\n"
           "  verify FILE       check the format, the parameters and optimizer states and\n"
           "                    recompute every tensor's CRC-32 against its crc32 attribute\n"
           "  diff A B          per tensor: identical, or how many elements differ and the\n"
           "                    largest |a-b|; tensors in one file only; other shapes; then\n"
           "                    attributes that differ (the creation time is not compared)\n"
           "  export FILE OUT [--force]\n"
           "                    write the /model tensors as float32 safetensors to OUT\n"
           "                    (via OUT.tmp; their CRCs are checked on the way)\n"
           "\n"
           "options:\n"
           "  --force           export: replace an existing OUT\n"
           "  -h, --help        this help\n"
           "  -V, --version     the version\n"
           "\n"
           "exit status:\n"
           "  0  ok: ls found at least one valid checkpoint; verify passed; diff found the\n"
           "     checkpoints identical; show and export succeeded\n"
           "  1  ls: no valid checkpoint; show, verify, export: the file is not a valid\n"
           "     checkpoint; diff: the checkpoints differ\n"
           "  2  usage error, or a file or directory that cannot be read or written (diff:\n"
           "     also a file that is not HDF5; export: OUT exists and no --force)\n");
}

static int usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: usage: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (ddpc-ckpt --help lists the commands)\n");
    return RC_IO;
}

int main(int argc, char **argv)
{
    const char *pos[4];
    int npos = 0, force = 0, dashdash = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!dashdash && (!strcmp(a, "--help") || !strcmp(a, "-h"))) {
            help();
            return RC_OK;
        }
        if (!dashdash && (!strcmp(a, "--version") || !strcmp(a, "-V"))) {
            printf("ddpc-ckpt (ddpc) %s\n", PACKAGE_VERSION);
            return RC_OK;
        }
        if (!dashdash && !strcmp(a, "--force"))
            force = 1;
        else if (!dashdash && !strcmp(a, "--"))
            dashdash = 1;
        else if (!dashdash && a[0] == '-' && a[1])
            return usage("unknown option \"%s\"", a);
        else if (npos == 4)
            return usage("too many arguments (from \"%s\")", a);
        else
            pos[npos++] = a;
    }
    if (!npos)
        return usage("no command given");
    const char *cmd = pos[0];
    static const struct {
        const char *name, *args;
        int nargs;
    } cmds[] = {{"ls", "DIR", 1}, {"show", "FILE", 1}, {"verify", "FILE", 1},
                {"diff", "A B", 2}, {"export", "FILE OUT.safetensors [--force]", 2}};
    int which = -1;
    for (int k = 0; k < 5; k++)
        if (!strcmp(cmd, cmds[k].name))
            which = k;
    if (which < 0)
        return usage("unknown command \"%s\" (ls, show, verify, diff, export)", cmd);
    if (npos - 1 != cmds[which].nargs)
        return usage("ddpc-ckpt %s %s", cmd, cmds[which].args);
    if (force && which != 4)
        return usage("--force is an option of export, not of %s", cmd);

    /* our own messages instead of HDF5's error stack; no filter plugins
     * loaded on behalf of a file; no external links followed */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    H5PLset_loading_state(0);
    if ((lapl = H5Pcreate(H5P_LINK_ACCESS)) < 0 || H5Pset_elink_cb(lapl, deny_elink, NULL) < 0)
        return err(RC_IO, "cannot set up HDF5 (link access properties)");
    int rc;
    switch (which) {
    case 0: rc = cmd_ls(pos[1]); break;
    case 1: rc = cmd_show(pos[1]); break;
    case 2: rc = cmd_verify(pos[1]); break;
    case 3: rc = cmd_diff(pos[1], pos[2]); break;
    default: rc = cmd_export(pos[1], pos[2], force); break;
    }
    H5Pclose(lapl);
    return rc;
}
