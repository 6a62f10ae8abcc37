/* SPDX-License-Identifier: BSD-3-Clause */
/* reader.h: the checkpoint module's reading side for untrusted files, shared
 * by the loader (load.c, rank 0) and the ddpc-ckpt tool (src/tools, which
 * compiles reader.c, h5.c and crc.c in: it does not link libddpc). What a
 * hostile file must not make either of them do lives here: load filter
 * plugins, follow soft or external links, read a virtual dataset or external
 * raw data, read a tensor in other pieces than the bounded windows of h5.c.
 * Not here: what a checkpoint must hold (each caller's own policy and
 * messages). No function here prints, mallocs or exits. */
#ifndef DDPC_CKPT_READER_H
#define DDPC_CKPT_READER_H

#include "ckpt_internal.h"

/* HDF5 without filter plugins (a file's pipeline may name any filter, and
 * HDF5 would load shared libraries from its plugin path to decode it; a
 * checkpoint needs none, the built-in filters stay). *saved: the state to
 * put back with ck_reader_unguard. */
void ck_reader_guard(unsigned *saved);
void ck_reader_unguard(unsigned saved);

/* Link access properties that refuse to traverse any external link (the
 * tool's, for every open); -1 if HDF5 cannot make them. */
hid_t ck_reader_lapl(void);

/* Open file read-only with fapl (H5P_DEFAULT, or ck_fapl()); -1 if HDF5
 * cannot (its reason: ck_h5_msg or ck_reader_h5why). */
hid_t ck_reader_open(const char *file, hid_t fapl);

/* How path (absolute, "/a/b/c") is reached from the root of f: one link per
 * component, each looked up in turn with lapl. */
typedef enum {
    CK_PATH_HARD = 0, /* hard links all the way */
    CK_PATH_MISSING,  /* a component does not exist (or cannot be looked up) */
    CK_PATH_LINK,     /* a component is a soft, external or user-defined link */
    CK_PATH_LONG      /* a prefix of path has more than n - 1 bytes */
} ck_path_t;
/* prefix (n bytes): the path up to the component that is not a hard link
 * (CK_PATH_LINK, CK_PATH_MISSING); *type: that link's type (CK_PATH_LINK). */
ck_path_t ck_reader_path(hid_t f, const char *path, hid_t lapl, char *prefix, size_t n,
                         H5L_type_t *type);
/* "soft", "external" or "user-defined". */
const char *ck_reader_link_kind(H5L_type_t type);

/* Where a dataset's data is (from its creation properties). */
typedef enum {
    CK_STORE_LOCAL = 0, /* in this file */
    CK_STORE_EXTERNAL,  /* external raw data files */
    CK_STORE_VIRTUAL    /* a virtual dataset: data of other datasets or files */
} ck_store_t;
ck_store_t ck_reader_storage(hid_t dcpl);

/* Read piece p (h5.c) of the open dataset ds as mtype into buf (p->n
 * elements of mtype); < 0 if HDF5 cannot. */
herr_t ck_reader_read_window(hid_t ds, const ck_piece_t *p, hid_t mtype, void *buf);

/* Close each identifier of ids[0, n) that is valid (>= 0), in order, by its
 * kind (file, group, dataset, attribute, datatype, dataspace, property list);
 * CK_CLOSE(a, b, ...) for a list of them. */
void ck_reader_close(const hid_t *ids, size_t n);
#define CK_CLOSE(...)                                                                          \
    ck_reader_close((const hid_t[]){__VA_ARGS__}, sizeof((hid_t[]){__VA_ARGS__}) / sizeof(hid_t))

/* The innermost HDF5 error message of the call that just failed (of a failed
 * system call only its message), then the error stack cleared: for a program
 * that turned HDF5's printing off (the tool). */
const char *ck_reader_h5why(char *buf, size_t n);

#endif
