/* SPDX-License-Identifier: BSD-3-Clause */
/* ckpt_tool.h: what the files of ddpc-ckpt share: exit codes, the limits a
 * file is held to, text output (out.c), attribute values (attr.c), a
 * checkpoint file's objects (cfile.c, over src/ckpt/reader.h), validation
 * (check.c) and the subcommands (ls.c, show.c, verify.c, diff.c, export.c;
 * main.c dispatches). A program, not library code: out of memory exits. */
#ifndef DDPC_CKPT_TOOL_H
#define DDPC_CKPT_TOOL_H

#include "reader.h" /* CK_FORMAT, ddpc_crc32, ck_piece_*, ck_reader_* (compiled in) */

#include <stdint.h>
#include <stdio.h>

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

/* ------------------------------------------------------------------ out.c */

extern const char *const prog; /* "ddpc-ckpt", the messages' prefix */
/* "ddpc-ckpt: MESSAGE" on stderr (after flushing stdout); returns code. */
int err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void *xrealloc(void *p, size_t n); /* exits (RC_IO) when out of memory */
char *xstrdup(const char *s);

/* A growing string. */
typedef struct {
    char *s;
    size_t n, cap;
} sb_t;
void sb_add(sb_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *sb_str(sb_t *b);
void sb_trunc(sb_t *b, size_t n);
void sb_clear(sb_t *b);
/* Bytes of the file as printable text: anything outside printable ASCII,
 * and space (unless quoted), as \xNN; quoted: '"' and backslash as \" and \\. */
void sb_esc(sb_t *b, const char *s, size_t len, int quoted);
/* s as sb_esc writes it, for a message; valid until four more calls. */
const char *esc_q(const char *s, int quoted);
const char *esc(const char *s);
void sb_double(sb_t *b, double v); /* shortest %g that reads back as v */
void sb_shape(sb_t *b, int ndim, const hsize_t *dims); /* "[2,3]" */

/* ------------------------------------------------------------------ attr.c */

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
void aval_free(aval_t *v);
/* Read attribute `name` of loc. -1 with why if absent, unreadable, too large
 * or of a kind a checkpoint does not hold. */
int aread(hid_t loc, const char *name, aval_t *v, char *why, size_t nw);
/* The value of attribute name as text (or why it cannot be read). */
void sb_attr(sb_t *b, hid_t loc, const char *name);
/* One value: an integer (an unsigned one read as such), a number, a string
 * (malloc'ed into *out). -1 with why otherwise. */
int get_u64(hid_t loc, const char *name, uint64_t *out, char *why, size_t nw);
int get_i64(hid_t loc, const char *name, int64_t *out, char *why, size_t nw);
int get_f64(hid_t loc, const char *name, double *out, char *why, size_t nw);
int get_str(hid_t loc, const char *name, char **out, char *why, size_t nw);

/* Attribute names of loc in name order (at most 10000). */
typedef struct {
    char **v;
    size_t n;
} names_t;
void attr_names(hid_t loc, names_t *l);
void names_free(names_t *l);

/* ------------------------------------------------------------------ cfile.c */

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

/* An open checkpoint file and every object in it (links walked, none followed). */
typedef struct {
    const char *file;
    hid_t f;
    uint64_t size; /* bytes on disk */
    entry_t *e;
    size_t n;
    size_t *sorted; /* indices of e by path */
    char walk_why[600]; /* the walk stopped: why */
} cfile_t;

extern hid_t cf_lapl; /* link access: external links refused (main sets it) */
/* Open file and list its objects. RC_OK; RC_IO (why) when it cannot be read at
 * all; RC_BAD (why) when it is not HDF5 or HDF5 cannot open it. */
int cf_open(cfile_t *c, const char *file, char *why, size_t nw);
void cf_close(cfile_t *c);
entry_t *find(cfile_t *c, const char *path);
/* Open path (absolute), each component a hard link; -1 (why) otherwise. */
hid_t open_path(hid_t f, const char *path, char *why, size_t nw);
/* The root, a group by path (hard links only), or -1. */
hid_t open_group(cfile_t *c, const char *path);
/* Piece p of the open dataset ds as mt, into buf; -1 (why) if HDF5 cannot. */
int cf_read(const ck_piece_t *p, hid_t ds, hid_t mt, void *buf, char *why, size_t nw);
/* The item of a tensor, for ck_piece_first (numel, ndim, shape). */
void cf_item(const tinfo_t *t, ck_item_t *it);
/* The CRC-32 of a tensor's little-endian bytes, piece by piece (buf: PIECE
 * floats); out (may be -1) also gets the bytes. -1: cannot read, -2: cannot write. */
int tensor_crc(cfile_t *c, const entry_t *e, float *buf, int out, uint32_t *crc, char *why,
               size_t nw);

/* ------------------------------------------------------------------ check.c */

#define BAD(...) (snprintf(why, nw, __VA_ARGS__), RC_BAD)
/* /model's "names", the parameters in registration order. */
int param_names(cfile_t *c, aval_t *v, char *why, size_t nw);
/* The model fingerprint of doc/checkpoint.md from the names and the /model
 * datasets' shapes. -1 (why) if a parameter is missing or unreadable. */
int fingerprint(cfile_t *c, const aval_t *names, uint64_t *fp, char *why, size_t nw);
int cmp_str(const void *a, const void *b); /* qsort of char * */
int has_prefix(const char *s, const char *p);
int same_shape(const tinfo_t *a, const tinfo_t *b);
/* The structure (format, objects, parameters, optimizer states), then (crcs)
 * every dataset's CRC-32 in file order. RC_OK: *nds datasets, *nbytes bytes
 * verified; else RC_BAD (why). */
int validate(cfile_t *c, int crcs, uint64_t *nds, uint64_t *nbytes, char *why, size_t nw);
/* cf_open, then validate with the CRCs (c is to be closed either way). */
int cf_verify(cfile_t *c, const char *file, uint64_t *nds, uint64_t *nbytes, char *why, size_t nw);
/* The root's format attribute names a ddpc checkpoint; else 0 (why). */
int is_ddpc(cfile_t *c, char *why, size_t nw);

/* ------------------------------------------------------------------ the subcommands */

int cmd_ls(const char *dir);
int cmd_show(const char *file);
int cmd_verify(const char *file);
int cmd_diff(const char *fa, const char *fb);
int cmd_export(const char *file, const char *out, int force);

#endif
