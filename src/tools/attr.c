/* SPDX-License-Identifier: BSD-3-Clause */
/* attr.c: ddpc-ckpt reads attributes of any kind a file may hold (bounded:
 * MAX_ATTR_ELEMS values, MAX_ATTR_BYTES of strings), as values or as text. */
#include "config.h"
#include "ckpt_tool.h"

#include <stdlib.h>
#include <string.h>

void aval_free(aval_t *v)
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
            snprintf(why, nw, "cannot read: %s", ck_reader_h5why(h5, sizeof h5));
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
            snprintf(why, nw, "cannot read: %s", ck_reader_h5why(h5, sizeof h5));
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
int aread(hid_t loc, const char *name, aval_t *v, char *why, size_t nw)
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
        snprintf(why, nw, "cannot open attribute \"%s\": %s", name, ck_reader_h5why(h5, sizeof h5));
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
        snprintf(why, nw, "cannot read attribute \"%s\": %s", name, ck_reader_h5why(h5, sizeof h5));
out:
    if (rc < 0)
        aval_free(v);
    CK_CLOSE(ft, sp, a);
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
void sb_attr(sb_t *b, hid_t loc, const char *name)
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

/* The one value of an attribute, copied out. */
typedef struct {
    int is_unsigned;
    int64_t i;
    uint64_t u;
    double d;
    char *s; /* malloc'ed */
} one_t;

/* Attribute name holds exactly one value of the class asked for (H5T_FLOAT:
 * a number, integers included); else -1 (why). */
static int one(hid_t loc, const char *name, H5T_class_t cls, one_t *x, char *why, size_t nw)
{
    aval_t v;
    memset(x, 0, sizeof *x);
    if (aread(loc, name, &v, why, nw) < 0)
        return -1;
    int fits = v.n == 1 && (v.cls == cls || (cls == H5T_FLOAT && v.cls == H5T_INTEGER));
    if (!fits)
        snprintf(why, nw, "attribute \"%s\" is not one %s", name,
                 cls == H5T_INTEGER ? "integer" : cls == H5T_STRING ? "string" : "number");
    else if (v.s)
        x->s = v.s[0], v.s[0] = NULL;
    else if (v.d)
        x->d = v.d[0];
    else
        x->is_unsigned = v.is_unsigned, x->u = v.u ? v.u[0] : 0, x->i = v.i ? v.i[0] : 0,
        x->d = v.u ? (double)v.u[0] : (double)v.i[0];
    aval_free(&v);
    return fits ? 0 : -1;
}

int get_u64(hid_t loc, const char *name, uint64_t *out, char *why, size_t nw)
{
    one_t x;
    if (one(loc, name, H5T_INTEGER, &x, why, nw) < 0)
        return -1;
    if (!x.is_unsigned && x.i < 0)
        return snprintf(why, nw, "attribute \"%s\" is negative (%lld)", name, (long long)x.i), -1;
    *out = x.is_unsigned ? x.u : (uint64_t)x.i;
    return 0;
}

int get_i64(hid_t loc, const char *name, int64_t *out, char *why, size_t nw)
{
    one_t x;
    if (one(loc, name, H5T_INTEGER, &x, why, nw) < 0)
        return -1;
    if (x.is_unsigned && x.u > INT64_MAX)
        return snprintf(why, nw, "attribute \"%s\" is too large (%llu)", name,
                        (unsigned long long)x.u), -1;
    *out = x.is_unsigned ? (int64_t)x.u : x.i;
    return 0;
}

int get_f64(hid_t loc, const char *name, double *out, char *why, size_t nw)
{
    one_t x;
    if (one(loc, name, H5T_FLOAT, &x, why, nw) < 0)
        return -1;
    *out = x.d;
    return 0;
}

int get_str(hid_t loc, const char *name, char **out, char *why, size_t nw)
{
    one_t x;
    if (one(loc, name, H5T_STRING, &x, why, nw) < 0)
        return -1;
    *out = x.s;
    return 0;
}

static herr_t collect_attr(hid_t loc, const char *name, const H5A_info_t *info, void *arg)
{
    names_t *l = arg;
    if (l->n >= 10000)
        return 1; /* enough */
    l->v = xrealloc(l->v, (l->n + 1) * sizeof *l->v);
    l->v[l->n++] = xstrdup(name);
    return 0;
}

void attr_names(hid_t loc, names_t *l)
{
    hsize_t idx = 0;
    memset(l, 0, sizeof *l);
    if (H5Aiterate2(loc, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_attr, l) < 0)
        H5Eclear2(H5E_DEFAULT);
}

void names_free(names_t *l)
{
    for (size_t k = 0; k < l->n; k++)
        free(l->v[k]);
    free(l->v);
    memset(l, 0, sizeof *l);
}
