/* SPDX-License-Identifier: BSD-3-Clause */
/* reader.c: the checks that stand between an untrusted checkpoint file and
 * HDF5, for the loader (load.c) and the ddpc-ckpt tool alike (reader.h):
 * no filter plugins, hard links only, data in this file only, reads in the
 * bounded pieces of h5.c. Each caller words its own messages. */
#include "config.h"
#include "reader.h"

#include <stdio.h>
#include <string.h>

void ck_reader_guard(unsigned *saved)
{
    *saved = 0;
    H5PLget_loading_state(saved);
    H5PLset_loading_state(0);
}

void ck_reader_unguard(unsigned saved) { H5PLset_loading_state(saved); }

static herr_t deny_elink(const char *parent_file, const char *parent_group, const char *child_file,
                         const char *child_obj, unsigned *acc, hid_t fapl, void *arg)
{
    return -1;
}

hid_t ck_reader_lapl(void)
{
    hid_t lapl = H5Pcreate(H5P_LINK_ACCESS);
    if (lapl >= 0 && H5Pset_elink_cb(lapl, deny_elink, NULL) < 0) {
        H5Pclose(lapl);
        return -1;
    }
    return lapl;
}

hid_t ck_reader_open(const char *file, hid_t fapl) { return H5Fopen(file, H5F_ACC_RDONLY, fapl); }

/* Each prefix "/a", "/a/b", ... of path in turn (empty components skipped):
 * it exists, and its last link is a hard one. */
ck_path_t ck_reader_path(hid_t f, const char *path, hid_t lapl, char *prefix, size_t n,
                         H5L_type_t *type)
{
    size_t len = strlen(path);
    if (len >= n)
        return CK_PATH_LONG;
    for (size_t i = 1; i <= len; i++) {
        if ((path[i] != '/' && path[i] != 0) || path[i - 1] == '/')
            continue;
        memcpy(prefix, path, i);
        prefix[i] = 0;
        H5L_info_t li;
        if (H5Lexists(f, prefix, lapl) <= 0 || H5Lget_info(f, prefix, &li, lapl) < 0)
            return CK_PATH_MISSING;
        if (li.type != H5L_TYPE_HARD) {
            *type = li.type;
            return CK_PATH_LINK;
        }
    }
    return CK_PATH_HARD;
}

const char *ck_reader_link_kind(H5L_type_t type)
{
    return type == H5L_TYPE_SOFT ? "soft" : type == H5L_TYPE_EXTERNAL ? "external" : "user-defined";
}

ck_store_t ck_reader_storage(hid_t dcpl)
{
    if (H5Pget_external_count(dcpl) > 0)
        return CK_STORE_EXTERNAL;
    if (H5Pget_layout(dcpl) == H5D_VIRTUAL)
        return CK_STORE_VIRTUAL;
    return CK_STORE_LOCAL;
}

herr_t ck_reader_read_window(hid_t ds, const ck_piece_t *p, hid_t mtype, void *buf)
{
    hid_t fs = H5Dget_space(ds), ms = fs < 0 ? -1 : ck_piece_select(p, fs);
    herr_t rc = ms < 0 ? -1 : H5Dread(ds, mtype, ms, fs, H5P_DEFAULT, buf);
    if (ms >= 0)
        H5Sclose(ms);
    if (fs >= 0)
        H5Sclose(fs);
    return rc;
}

void ck_reader_close(const hid_t *ids, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        hid_t id = ids[k];
        if (id < 0)
            continue;
        switch (H5Iget_type(id)) {
        case H5I_FILE: H5Fclose(id); break;
        case H5I_GROUP: H5Gclose(id); break;
        case H5I_DATASET: H5Dclose(id); break;
        case H5I_ATTR: H5Aclose(id); break;
        case H5I_DATATYPE: H5Tclose(id); break;
        case H5I_DATASPACE: H5Sclose(id); break;
        case H5I_GENPROP_LST: H5Pclose(id); break;
        default: H5Idec_ref(id); break;
        }
    }
}

typedef struct {
    char *buf;
    size_t n;
} why_t;

static herr_t innermost(unsigned n, const H5E_error2_t *e, void *arg)
{
    why_t *w = arg;
    const char *d = e->desc ? e->desc : "", *m = strstr(d, "error message = '");
    if (m)
        snprintf(w->buf, w->n, "%.*s", (int)strcspn(m + 17, "'"), m + 17);
    else if (*d)
        snprintf(w->buf, w->n, "%s", d);
    return 0;
}

const char *ck_reader_h5why(char *buf, size_t n)
{
    why_t w = {buf, n};
    buf[0] = 0;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, innermost, &w);
    H5Eclear2(H5E_DEFAULT);
    if (!buf[0])
        snprintf(buf, n, "HDF5 gave no reason");
    for (char *c = buf; *c; c++)
        if (*c == '\n')
            *c = ' ';
    return buf;
}
