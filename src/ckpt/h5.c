/* SPDX-License-Identifier: BSD-3-Clause */
/* h5.c: small HDF5 helpers for the checkpoint module: one lock around every
 * HDF5 session of ddpc (Debian's serial HDF5 is not thread-safe), the error
 * stack turned into one line instead of printed, typed scalar attributes,
 * the file access properties, and the pieces a dataset is moved in. */
#include "config.h"
#include "ckpt_internal.h"

#include <stdio.h>
#include <string.h>

static pthread_mutex_t h5_mu = PTHREAD_MUTEX_INITIALIZER;
static H5E_auto2_t saved_fn;
static void *saved_data;
static char first_msg[512]; /* the first failure since the last ck_h5_msg */

/* The innermost description; of a failed system call only its message
 * ("... errno = 28, error message = 'No space left on device', ..."). */
static herr_t innermost(unsigned n, const H5E_error2_t *e, void *buf)
{
    const char *d = e->desc ? e->desc : "", *m = strstr(d, "error message = '");
    const char *fn = e->func_name ? e->func_name : "?";
    if (m)
        snprintf(buf, sizeof first_msg, "%.*s (in %s)", (int)strcspn(m + 17, "'"), m + 17, fn);
    else if (*d)
        snprintf(buf, sizeof first_msg, "%s (in %s)", d, fn);
    for (char *c = buf; *c; c++)
        if (*c == '\n')
            *c = ' ';
    return 0;
}

/* HDF5 calls this when an API call fails, with its error stack intact
 * (the next API call clears it, cleanup included). */
static herr_t on_error(hid_t stack, void *unused)
{
    if (!first_msg[0])
        H5Ewalk2(stack, H5E_WALK_DOWNWARD, innermost, first_msg);
    return 0;
}

void ck_h5_enter(void)
{
    pthread_mutex_lock(&h5_mu);
    H5Eget_auto2(H5E_DEFAULT, &saved_fn, &saved_data);
    H5Eset_auto2(H5E_DEFAULT, on_error, NULL);
    first_msg[0] = 0;
}

void ck_h5_leave(void)
{
    H5Eset_auto2(H5E_DEFAULT, saved_fn, saved_data);
    pthread_mutex_unlock(&h5_mu);
}

const char *ck_h5_msg(char *buf, size_t n)
{
    snprintf(buf, n, "%s", first_msg[0] ? first_msg : "HDF5 gave no reason");
    first_msg[0] = 0;
    return buf;
}

/* sec2 (plain POSIX I/O: the file descriptor is ours to fsync and advise);
 * the 1.8 file format: checksummed metadata, large attributes, readable by
 * HDF5 1.8 and later. */
hid_t ck_fapl(void)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_fapl_sec2(fapl) < 0 ||
        H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18) < 0) {
        if (fapl >= 0)
            H5Pclose(fapl);
        return -1;
    }
    return fapl;
}

int ck_attr_put(hid_t loc, const char *name, hid_t ftype, hid_t mtype, const void *v)
{
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = sp < 0 ? -1 : H5Acreate2(loc, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, mtype, v) < 0 ? -1 : 0;
    if (a >= 0)
        H5Aclose(a);
    if (sp >= 0)
        H5Sclose(sp);
    return rc;
}

int ck_attr_u64(hid_t loc, const char *name, uint64_t v)
{
    return ck_attr_put(loc, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v);
}

int ck_attr_i32(hid_t loc, const char *name, int v)
{
    return ck_attr_put(loc, name, H5T_STD_I32LE, H5T_NATIVE_INT, &v);
}

int ck_attr_f64(hid_t loc, const char *name, double v)
{
    return ck_attr_put(loc, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}

/* Fixed-length, NUL-terminated ASCII. */
int ck_attr_str(hid_t loc, const char *name, const char *s)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    int rc = t < 0 || H5Tset_size(t, strlen(s) + 1) < 0 || H5Tset_strpad(t, H5T_STR_NULLTERM) < 0
                 ? -1
                 : ck_attr_put(loc, name, t, t, s);
    if (t >= 0)
        H5Tclose(t);
    return rc;
}

/* The attribute holds exactly one value (scalar, or any shape of one
 * element): H5Aread writes every element it holds into the caller's buffer,
 * which has room for one. A file is untrusted: an array or a null dataspace
 * in place of a scalar is refused, and the reason kept for ck_h5_msg. */
static int one_value(hid_t a, const char *name)
{
    hid_t sp = H5Aget_space(a);
    hssize_t n = sp < 0 ? -1 : H5Sget_simple_extent_npoints(sp);
    int simple = sp >= 0 && H5Sget_simple_extent_type(sp) != H5S_NULL;
    if (sp >= 0)
        H5Sclose(sp);
    if (simple && n == 1)
        return 1;
    if (!first_msg[0] && n >= 0)
        snprintf(first_msg, sizeof first_msg, "attribute \"%s\" holds %lld values, expected one",
                 name, simple ? (long long)n : 0ll);
    return 0;
}

int ck_attr_get(hid_t loc, const char *name, hid_t mtype, void *v)
{
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    int rc = a < 0 || !one_value(a, name) || H5Aread(a, mtype, v) < 0 ? -1 : 0;
    if (a >= 0)
        H5Aclose(a);
    return rc;
}

int ck_attr_get_str(hid_t loc, const char *name, char *buf, size_t n)
{
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t ft = a < 0 ? -1 : H5Aget_type(a);
    hid_t t = H5Tcopy(H5T_C_S1);
    int rc = -1;
    if (ft >= 0 && t >= 0 && H5Tget_class(ft) == H5T_STRING && !H5Tis_variable_str(ft) &&
        one_value(a, name) && H5Tset_size(t, n) >= 0 && H5Tset_strpad(t, H5T_STR_NULLTERM) >= 0)
        rc = H5Aread(a, t, buf) < 0 ? -1 : 0;
    else if (ft >= 0 && !first_msg[0] && (H5Tget_class(ft) != H5T_STRING || H5Tis_variable_str(ft)))
        snprintf(first_msg, sizeof first_msg, "attribute \"%s\" is not a fixed-length string",
                 name);
    buf[n - 1] = 0;
    if (t >= 0)
        H5Tclose(t);
    if (ft >= 0)
        H5Tclose(ft);
    if (a >= 0)
        H5Aclose(a);
    return rc;
}

/* ------------------------------------------------------------------ pieces */

static size_t inner(const ck_item_t *it, int d) /* elements in one index of dim d */
{
    size_t n = 1;
    for (int k = d + 1; k < it->ndim; k++)
        n *= (size_t)it->shape[k];
    return n;
}

static void locate(ck_piece_t *p)
{
    const ck_item_t *it = p->it;
    p->count[p->d] = (hsize_t)(p->rows < (size_t)it->shape[p->d] - p->start[p->d]
                                   ? p->rows
                                   : (size_t)it->shape[p->d] - p->start[p->d]);
    p->off = 0;
    for (int k = 0; k <= p->d; k++)
        p->off += (size_t)p->start[k] * inner(it, k);
    p->n = (size_t)p->count[p->d] * inner(it, p->d);
}

/* Split at the outermost dimension whose index spans at most max_elems; a
 * piece is a run of indices along it, the dimensions before it fixed. */
int ck_piece_first(ck_piece_t *p, const ck_item_t *it, size_t max_elems)
{
    memset(p, 0, sizeof *p);
    p->it = it;
    if (it->numel == 0)
        return 0;
    if (it->ndim == 0) {
        p->d = -1;
        p->n = 1;
        return 1;
    }
    int d = 0;
    while (inner(it, d) > max_elems)
        d++;
    p->d = d;
    p->rows = max_elems / inner(it, d) ? max_elems / inner(it, d) : 1;
    for (int k = 0; k < it->ndim; k++)
        p->count[k] = k < d ? 1 : (hsize_t)it->shape[k];
    locate(p);
    return 1;
}

int ck_piece_next(ck_piece_t *p)
{
    if (p->d < 0)
        return 0;
    const ck_item_t *it = p->it;
    p->start[p->d] += p->count[p->d];
    if (p->start[p->d] == (hsize_t)it->shape[p->d]) {
        p->start[p->d] = 0;
        int k = p->d - 1;
        while (k >= 0 && ++p->start[k] == (hsize_t)it->shape[k])
            p->start[k--] = 0;
        if (k < 0)
            return 0;
    }
    locate(p);
    return 1;
}

hid_t ck_piece_select(const ck_piece_t *p, hid_t filespace)
{
    hsize_t n = p->n;
    herr_t rc = p->d < 0 ? H5Sselect_all(filespace)
                         : H5Sselect_hyperslab(filespace, H5S_SELECT_SET, p->start, NULL,
                                               p->count, NULL);
    return rc < 0 ? -1 : H5Screate_simple(1, &n, NULL);
}
