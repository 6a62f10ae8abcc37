/* SPDX-License-Identifier: BSD-3-Clause */
/* fuzz_ckpt.c: structure-aware libFuzzer target for the checkpoint loader
 * (src/ckpt/load.c). The input is not a file but a recipe: its bytes choose,
 * slot by slot, how a checkpoint written with the HDF5 API differs from the
 * one src/ckpt/write.c writes (a byte 0, or the end of the input, is "as
 * written"): attributes missing, of another type, size or dataspace, strings
 * without a NUL, extreme values; datasets missing, of another dtype or shape
 * (huge, zero, "negative"), chunked, compressed, compact, with a wrong CRC,
 * replaced by a group or reached through a soft, external or hard link;
 * groups likewise; extra objects and attributes; stray directory entries. The
 * real ddpc_ckpt_load then runs on it in a world of one, with or without an
 * optimizer, in default or tiny windows, by path or from the directory, with
 * or without a valid older checkpoint (written by ddpc_ckpt_save) to fall
 * back to. Not a byte fuzzer of HDF5's parser (HDF5 says it is not designed
 * for crafted files): every file here is one the HDF5 library wrote.
 *
 * What must hold: the loader returns a status with a message and never
 * crashes, reads out of bounds, leaks memory or HDF5 identifiers; a recipe
 * with only harmless variations loads; one with a harmful variation is
 * refused, or falls back to the older checkpoint; whatever loads gives back
 * exactly the values that file holds; a failed load leaves the optimizer's
 * counters alone, and a mismatch leaves the tensors alone.
 *
 * The recipe, byte by byte: flags (handle, fallback, by path, value seed),
 * one byte per group, per attribute, the names list, the RNG state, per
 * dataset, then extras; a variation may take further bytes as parameters. */
#include "ddpc.h"

#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECK(c)                                                                               \
    do {                                                                                       \
        if (!(c)) {                                                                            \
            fprintf(stderr, "fuzz_ckpt.c:%d: check failed: %s\n", __LINE__, #c);              \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

/* ------------------------------------------------------------------ the model */

enum { NP = 5, NI = 2 * NP + 1, MAXN = 12, UNUMEL = 5 }; /* parameters, items, floats */
static const char *const pname[NP] = {"fc.weight", "fc.bias", "scale", "empty", "blk/w"};
static const int pndim[NP] = {2, 1, 0, 2, 3};
static const int64_t pshape[NP][3] = {{3, 4}, {3}, {0}, {0, 2}, {2, 1, 3}};

static ddpc_t rt;
static ddpc_ddp_t ddp;
static ddpc_optim_t opt;
static ddpc_ckpt_t handles[4]; /* 0, 1: with the optimizer; 2, 3: without; 1, 3: tiny windows */
static float user_t[UNUMEL];
static char dir[200], fuzzed[300], fallback[300], master[300], other[300], raw[300], stray[300];
static uint64_t fingerprint;
static hid_t fapl_build;

static size_t item_numel(int i)
{
    if (i == 2 * NP)
        return UNUMEL;
    size_t n = 1;
    for (int k = 0; k < pndim[i % NP]; k++)
        n *= (size_t)pshape[i % NP][k];
    return n;
}
static int item_ndim(int i) { return i == 2 * NP ? 1 : pndim[i % NP]; }
static void item_dims(int i, hsize_t *d)
{
    for (int k = 0; k < item_ndim(i); k++)
        d[k] = i == 2 * NP ? UNUMEL : (hsize_t)pshape[i % NP][k];
}

static float *item_mem(int i)
{
    if (i == 2 * NP)
        return user_t;
    ddpc_param_info_t info;
    CHECK(ddpc_ddp_param_info(ddp, i % NP, &info) == DDPC_OK);
    float *arena = i < NP ? ddpc_ddp_params(ddp, NULL) : ddpc_optim_state(opt, 0, NULL);
    return arena + info.offset;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* doc/checkpoint.md's definition, computed independently of the library */
static uint64_t doc_fingerprint(void)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int p = 0; p < NP; p++) {
        uint64_t v[4] = {(uint64_t)pndim[p]};
        for (int k = 0; k < pndim[p]; k++)
            v[k + 1] = (uint64_t)pshape[p][k];
        h = fnv(h, pname[p], strlen(pname[p]) + 1);
        h = fnv(h, "float32", 8);
        for (int k = 0; k <= pndim[p]; k++)
            for (int b = 0; b < 8; b++)
                h = fnv(h, &(unsigned char){(unsigned char)(v[k] >> (8 * b))}, 1);
    }
    return h;
}

/* zlib's CRC-32, bitwise (the tensors are tiny) */
static uint32_t crc32_of(const void *buf, size_t n)
{
    const unsigned char *p = buf;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c >> 1 ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

/* ------------------------------------------------------------------ the recipe */

static const uint8_t *rp;
static size_t rn, ri;
static unsigned u8(void) { return ri < rn ? rp[ri++] : 0; }

/* What the variations add up to: a harmful one (the file must not load), one
 * whose effect this target does not predict, or only harmless ones (it must
 * load). A variation of something the load does not look at is harmless. */
enum { FINE, BAD, UNSURE };
static int bad, unsure, verbose;
static char slot[96]; /* the variation being made, for DDPC_FUZZ_VERBOSE */
static void note(int relevant, int cls)
{
    if (verbose && cls != FINE)
        fprintf(stderr, "fuzz_ckpt: %s: %s%s\n", slot, cls == BAD ? "harmful" : "unforeseen",
                relevant ? "" : " (not looked at)");
    if (relevant && cls == BAD)
        bad = 1;
    else if (relevant && cls == UNSURE)
        unsure = 1;
}

/* What the file holds, for the comparison after a load. */
enum { A_FORMAT, A_VERSION, A_DDPCV, A_STEP, A_EPOCH, A_WORLD, A_CREATED, A_FP, A_TYPE, A_LR,
       A_MOM, A_DAMP, A_NEST, A_WD, A_B1, A_B2, A_EPS, A_CLIP, A_DYN, A_SCALE, A_GOOD, A_GROW,
       A_OSTEP, A_SSEED, A_SEPOCH, A_SCONS, A_SSIZE, A_SSHUF, A_SDROP, A_LOSS, A_RUN, NA };
typedef struct {
    float data[NI][MAXN];
    int dknown[NI];      /* data[i] is what a load must give */
    double v[NA];        /* numeric attributes as read (uint64 ones in u) */
    uint64_t u[NA];
    int present[NA];     /* readable with that value */
    int known[NA];       /* what the load gives for it is predicted */
    int has_sampler, sampler_known;
    uint8_t rng[256];
    size_t rng_n;
    int rng_known;
} expect_t;
static expect_t ex, ex_master;

/* ------------------------------------------------------------------ attributes */

enum { K_STR, K_U64, K_I32, K_F64 };
/* how the loader treats one: must read it; reads it, ignores a failure; must
 * read it if present; never reads it; a user attribute */
enum { REQ, OPT, STRICT, NONE, USER };
typedef struct {
    int loc; /* 0 /, 1 /optim, 2 /sampler, 3 /user */
    const char *name;
    int kind, req;
    const char *s;
    double v;
} aspec_t;

static const aspec_t aspec[NA] = {
    {0, "format", K_STR, REQ, "ddpc-checkpoint", 0}, {0, "format_version", K_I32, REQ, 0, 1},
    {0, "ddpc_version", K_STR, NONE, "0.1.0", 0},    {0, "step", K_U64, REQ, 0, 2},
    {0, "epoch", K_U64, REQ, 0, 7},                  {0, "world_size", K_I32, REQ, 0, 1},
    {0, "created", K_STR, NONE, "2025-01-31T12:00:00Z", 0},
    {0, "model_fingerprint", K_U64, REQ, 0, 0},      {1, "type", K_STR, REQ, "sgd", 0},
    {1, "lr", K_F64, REQ, 0, 0.05},                  {1, "momentum", K_F64, OPT, 0, 0.9},
    {1, "dampening", K_F64, OPT, 0, 0},              {1, "nesterov", K_I32, NONE, 0, 0},
    {1, "weight_decay", K_F64, OPT, 0, 0},           {1, "beta1", K_F64, OPT, 0, 0.9},
    {1, "beta2", K_F64, OPT, 0, 0.999},              {1, "eps", K_F64, OPT, 0, 1e-8},
    {1, "clip_norm", K_F64, NONE, 0, 0},             {1, "dynamic_loss_scale", K_I32, NONE, 0, 0},
    {1, "loss_scale", K_F64, REQ, 0, 256},           {1, "scale_good_steps", K_I32, STRICT, 0, 3},
    {1, "scale_growth_interval", K_I32, NONE, 0, 2000}, {1, "step", K_U64, REQ, 0, 42},
    {2, "seed", K_U64, REQ, 0, 5},                   {2, "epoch", K_U64, REQ, 0, 7},
    {2, "consumed", K_U64, REQ, 0, 100},             {2, "dataset_size", K_U64, REQ, 0, 1000},
    {2, "shuffle", K_I32, REQ, 0, 1},                {2, "drop_last", K_I32, REQ, 0, 0},
    {3, "loss", K_F64, USER, 0, 0.125},              {3, "run", K_STR, USER, "fuzz", 0},
};

static hid_t str_type(size_t n, H5T_str_t pad)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, n);
    H5Tset_strpad(t, pad);
    return t;
}

static hid_t space_1d(hsize_t n) { return H5Screate_simple(1, &n, NULL); }

/* An attribute of file type ft over space sp, written from v (memory type
 * mt) unless v is NULL; closes ft, mt and sp (copies, never predefined). */
static void put(hid_t loc, const char *name, hid_t ft, hid_t mt, hid_t sp, const void *v)
{
    hid_t a = H5Acreate2(loc, name, ft, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) {
        if (v)
            H5Awrite(a, mt, v);
        H5Aclose(a);
    }
    if (mt != ft)
        H5Tclose(mt);
    H5Tclose(ft);
    H5Sclose(sp);
}

/* An unwritten 1-D dataset of n elements of type at path. */
static void empty_ds(hid_t f, const char *path, hid_t type, hsize_t n)
{
    hid_t sp = space_1d(n);
    hid_t ds = H5Dcreate2(f, path, type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (ds >= 0)
        H5Dclose(ds);
    H5Sclose(sp);
}

static hid_t ftype_of(int kind)
{
    return H5Tcopy(kind == K_U64 ? H5T_STD_U64LE : kind == K_I32 ? H5T_STD_I32LE : H5T_IEEE_F64LE);
}
static hid_t mtype_of(int kind)
{
    return H5Tcopy(kind == K_U64   ? H5T_NATIVE_UINT64
                   : kind == K_I32 ? H5T_NATIVE_INT32
                                   : H5T_NATIVE_DOUBLE);
}
static size_t ksize(int kind) { return kind == K_I32 ? 4 : 8; }

typedef union {
    uint64_t u;
    int32_t i;
    double d;
    unsigned char b[8];
} num_t;

static num_t num_of(int kind, uint64_t u, double d)
{
    num_t n;
    memset(&n, 0, sizeof n);
    if (kind == K_U64)
        n.u = u;
    else if (kind == K_I32)
        n.i = (int32_t)d;
    else
        n.d = d;
    return n;
}

/* Is a value the loader reads acceptable? (the sane limits of load.c) */
static int value_class(int a, num_t n, const char *s)
{
    switch (a) {
    case A_FORMAT:
        return strcmp(s, "ddpc-checkpoint") ? BAD : FINE;
    case A_TYPE:
        return strcmp(s, "sgd") ? BAD : FINE;
    case A_VERSION:
        return n.i > 1 ? BAD : FINE;
    case A_FP:
        return n.u != fingerprint ? BAD : FINE;
    case A_LR:
        return isfinite(n.d) && n.d >= 0 ? FINE : BAD;
    case A_SCALE:
        return isfinite(n.d) && n.d > 0 ? FINE : BAD;
    case A_GOOD:
        return n.i < 0 ? BAD : FINE;
    default:
        return FINE;
    }
}

/* The class of an attribute the loader cannot read as its type. */
static int unreadable(int a)
{
    int r = aspec[a].req;
    return r == REQ || r == STRICT || r == USER ? BAD : FINE;
}

/* One attribute slot: normal, or a variation chosen by the recipe. */
static void attr_slot(hid_t loc, int a, int relevant)
{
    const aspec_t *s = &aspec[a];
    unsigned op = u8(), m = op % 16;
    static const char *const where[] = {"", "/optim", "/sampler", "/user"};
    snprintf(slot, sizeof slot, "attribute %s/%s, variation %u", where[s->loc], s->name, m);
    num_t n = num_of(s->kind, a == A_FP ? fingerprint : (uint64_t)s->v, s->v);
    const char *str = s->s;
    char buf[6000];
    int cls = FINE, present = 1, known = 1, isstr = s->kind == K_STR;
    switch (m) {
    case 0:
    case 14: /* normal; 14: with a look-alike next to it */
        if (m == 14) {
            hid_t t = str_type(4, H5T_STR_NULLTERM);
            snprintf(buf, sizeof buf, "%s_", s->name);
            put(loc, buf, t, H5Tcopy(t), H5Screate(H5S_SCALAR), "abc");
        }
        if (isstr) {
            hid_t t = str_type(strlen(str) + 1, H5T_STR_NULLTERM);
            put(loc, s->name, t, H5Tcopy(t), H5Screate(H5S_SCALAR), str);
        } else {
            put(loc, s->name, ftype_of(s->kind), mtype_of(s->kind), H5Screate(H5S_SCALAR), &n);
        }
        break;
    case 1: /* missing */
        present = 0;
        cls = s->req == REQ ? BAD : FINE;
        break;
    case 2: /* a string for a number, a number for a string */
        present = 0;
        cls = unreadable(a);
        if (isstr) {
            int32_t v = 7;
            put(loc, s->name, H5Tcopy(H5T_STD_I32LE), H5Tcopy(H5T_NATIVE_INT32),
                H5Screate(H5S_SCALAR), &v);
            if (s->req == USER) /* read as a double attribute of that name */
                cls = UNSURE;
        } else {
            hid_t t = str_type(3, H5T_STR_NULLTERM);
            put(loc, s->name, t, H5Tcopy(t), H5Screate(H5S_SCALAR), "12");
        }
        break;
    case 3: /* another type that holds the value exactly */
        if (isstr) {
            hid_t t = str_type(strlen(str), H5T_STR_NULLPAD); /* no NUL */
            put(loc, s->name, t, H5Tcopy(t), H5Screate(H5S_SCALAR), str);
        } else {
            float f32 = (float)n.d;
            hid_t ft = H5Tcopy(s->kind == K_U64   ? n.u >> 63 ? H5T_STD_U64BE : H5T_STD_I64BE
                               : s->kind == K_I32 ? H5T_STD_I16BE
                               : (double)f32 == n.d ? H5T_IEEE_F32LE
                                                    : H5T_IEEE_F64BE);
            put(loc, s->name, ft, mtype_of(s->kind), H5Screate(H5S_SCALAR), &n);
        }
        break;
    case 4:
    case 10: { /* an array of k, or [1, 1] */
        unsigned p = m == 10 ? 0 : u8();
        size_t k = p < 200 ? 1 + p % 4 : (size_t)1000 * (p - 199); /* up to 56000 */
        size_t w = isstr ? strlen(str) + 1 : ksize(s->kind);
        unsigned char *v = calloc(k, w);
        CHECK(v);
        for (size_t j = 0; j < k; j++)
            memcpy(v + j * w, isstr ? (const void *)str : (const void *)&n, w);
        hsize_t d2[2] = {1, 1};
        hid_t sp = m == 10 ? H5Screate_simple(2, d2, NULL) : space_1d(k);
        if (isstr) {
            hid_t t = str_type(w, H5T_STR_NULLTERM);
            put(loc, s->name, t, H5Tcopy(t), sp, v);
        } else {
            put(loc, s->name, ftype_of(s->kind), mtype_of(s->kind), sp, v);
        }
        free(v);
        if (k > 1)
            present = 0, cls = unreadable(a);
        break;
    }
    case 5: /* a null dataspace: no value at all */
        present = 0;
        cls = unreadable(a);
        put(loc, s->name, isstr ? str_type(8, H5T_STR_NULLTERM) : ftype_of(s->kind),
            isstr ? str_type(8, H5T_STR_NULLTERM) : mtype_of(s->kind), H5Screate(H5S_NULL),
            NULL);
        break;
    case 6: { /* a compound holding the value */
        present = 0;
        cls = unreadable(a);
        hid_t ct = H5Tcreate(H5T_COMPOUND, 8), mt = H5Tcreate(H5T_COMPOUND, 8);
        H5Tinsert(ct, "v", 0, H5T_STD_U64LE);
        H5Tinsert(mt, "v", 0, H5T_NATIVE_UINT64);
        put(loc, s->name, ct, mt, H5Screate(H5S_SCALAR), &n);
        break;
    }
    case 7: /* an enum (HDF5 converts it to a number); a variable-length string */
        if (isstr) {
            present = 0;
            cls = unreadable(a);
            hid_t t = H5Tcopy(H5T_C_S1);
            H5Tset_size(t, H5T_VARIABLE);
            put(loc, s->name, t, H5Tcopy(t), H5Screate(H5S_SCALAR), &str);
        } else {
            hid_t t = H5Tenum_create(H5T_NATIVE_INT32);
            int32_t one = 1, zero = 0;
            H5Tenum_insert(t, "zero", &zero);
            H5Tenum_insert(t, "one", &one);
            put(loc, s->name, t, H5Tcopy(t), H5Screate(H5S_SCALAR), &one);
            n = num_of(s->kind, 1, 1);
            cls = value_class(a, n, NULL);
        }
        break;
    case 8: { /* opaque bytes */
        present = 0;
        cls = unreadable(a);
        hid_t t = H5Tcreate(H5T_OPAQUE, 8);
        H5Tset_tag(t, "ddpc fuzz");
        put(loc, s->name, t, H5Tcopy(t), H5Screate(H5S_SCALAR), &n);
        break;
    }
    case 9:
    case 15: /* an extreme value, a long string; 15: the next value, a NUL inside */
        if (isstr && m == 9) {
            size_t len = 64 + (size_t)u8() * 20; /* up to 5164 */
            memset(buf, 'x', len);
            memcpy(buf, str, strlen(str));
            buf[len] = 0;
            hid_t t = str_type(len + 1, H5T_STR_NULLTERM);
            put(loc, s->name, t, H5Tcopy(t), H5Screate(H5S_SCALAR), buf);
            cls = value_class(a, n, buf);
            if (s->req == USER)
                cls = UNSURE; /* truncated to what ddpc keeps */
            known = 0;
        } else if (isstr) {
            size_t len = strlen(str);
            memcpy(buf, str, len + 1);
            memcpy(buf + len + 1, "zz", 3);
            hid_t t = str_type(len + 4, H5T_STR_NULLTERM);
            put(loc, s->name, t, H5Tcopy(t), H5Screate(H5S_SCALAR), buf);
            cls = UNSURE;
        } else {
            static const uint64_t xu[] = {0, 1, UINT64_MAX, 1ull << 63, 123456789};
            static const int32_t xi[] = {0, -1, INT32_MIN, INT32_MAX, 2};
            static const double xd[] = {0, -1, NAN, INFINITY, -INFINITY, 1e308, 5e-324, -0.0};
            unsigned p = u8();
            if (m == 15)
                n.u += s->kind == K_U64, n.i += s->kind == K_I32, n.d += s->kind == K_F64;
            else if (s->kind == K_U64)
                n.u = xu[p % 5];
            else if (s->kind == K_I32)
                n.i = xi[p % 5];
            else
                n.d = xd[p % 8];
            put(loc, s->name, ftype_of(s->kind), mtype_of(s->kind), H5Screate(H5S_SCALAR), &n);
            cls = value_class(a, n, NULL);
        }
        break;
    case 11: /* a bitfield; a string padded with NULs */
        if (isstr) {
            memset(buf, 0, strlen(str) + 6);
            memcpy(buf, str, strlen(str));
            hid_t t = str_type(strlen(str) + 6, H5T_STR_NULLTERM);
            put(loc, s->name, t, H5Tcopy(t), H5Screate(H5S_SCALAR), buf);
        } else {
            present = 0;
            cls = unreadable(a);
            put(loc, s->name, H5Tcopy(H5T_STD_B64LE), H5Tcopy(H5T_NATIVE_B64),
                H5Screate(H5S_SCALAR), &n);
        }
        break;
    case 12: /* space padded; the same number big-endian */
        if (isstr) {
            size_t len = strlen(str);
            memcpy(buf, str, len);
            memset(buf + len, ' ', 4);
            hid_t t = str_type(len + 4, H5T_STR_SPACEPAD);
            put(loc, s->name, t, H5Tcopy(t), H5Screate(H5S_SCALAR), buf);
            cls = UNSURE;
        } else {
            hid_t ft = H5Tcopy(s->kind == K_U64   ? H5T_STD_U64BE
                               : s->kind == K_I32 ? H5T_STD_I32BE
                                                  : H5T_IEEE_F64BE);
            put(loc, s->name, ft, mtype_of(s->kind), H5Screate(H5S_SCALAR), &n);
        }
        break;
    case 13: /* UTF-8; the number as a string */
        if (isstr) {
            hid_t t = str_type(strlen(str) + 1, H5T_STR_NULLTERM);
            H5Tset_cset(t, H5T_CSET_UTF8);
            put(loc, s->name, t, H5Tcopy(t), H5Screate(H5S_SCALAR), str);
            cls = UNSURE;
        } else {
            present = 0;
            cls = unreadable(a);
            hid_t t = str_type(2, H5T_STR_NULLTERM);
            put(loc, s->name, t, H5Tcopy(t), H5Screate(H5S_SCALAR), "1");
        }
        break;
    }
    if (s->req == USER && cls == BAD && m != 4 && m != 5)
        cls = UNSURE; /* read as the other kind, or refused */
    note(relevant, cls);
    if (cls == UNSURE)
        known = 0;
    ex.present[a] = present;
    ex.known[a] = known && relevant;
    ex.u[a] = n.u;
    ex.v[a] = s->kind == K_I32 ? n.i : s->kind == K_F64 ? n.d : 0;
}

/* ------------------------------------------------------------------ groups */

enum { G_MODEL, G_BLK, G_OPTIM, G_MOM, G_SAMPLER, G_RNG, G_USER, NG };
static const char *const gnorm[NG] = {"model", "blk", "optim", "momentum_buffer",
                                      "sampler", "rng", "user"};
static const int gparent[NG] = {-1, G_MODEL, -1, G_OPTIM, -1, -1, -1};
static int gmode[NG];
static char greal[NG][64]; /* where its contents are */
static int has_opt;

/* 0 normal, 1 missing, 2 soft link, 3 external link, 4 hard link, 5 a
 * dataset in its place, 6 extra members, 7 extra attributes */
static int reachable(int g)
{
    int m = gmode[g];
    return (m == 0 || m == 4 || m == 6 || m == 7) && (gparent[g] < 0 || reachable(gparent[g]));
}

static void link_path(int g, char *s, size_t n)
{
    if (gparent[g] < 0)
        snprintf(s, n, "/%s", gnorm[g]);
    else
        snprintf(s, n, "%s/%s", greal[gparent[g]], gnorm[g]);
}

static int group_class(int g)
{
    int m = gmode[g], o = has_opt;
    if (m == 0 || m == 4 || m == 6 || m == 7)
        return FINE;
    switch (g) {
    case G_MODEL:
    case G_BLK:
    case G_USER:
        return BAD;
    case G_OPTIM:
        return o || m == 2 || m == 3 ? BAD : FINE; /* a link at /optim is refused anyway */
    case G_MOM:
        return o ? BAD : FINE;
    default: /* sampler, rng: absent is fine, a link is refused, a dataset unforeseen */
        return m == 1 ? FINE : m == 5 ? UNSURE : BAD;
    }
}

static void make_groups(hid_t f)
{
    for (int g = 0; g < NG; g++) {
        gmode[g] = (int)(u8() % 8);
        snprintf(slot, sizeof slot, "group %s, variation %d", gnorm[g], gmode[g]);
        int hidden = gmode[g] >= 1 && gmode[g] <= 5;
        if (hidden)
            snprintf(greal[g], sizeof greal[g], "/hidden_g%d", g);
        else
            link_path(g, greal[g], sizeof greal[g]);
        hid_t h = H5Gcreate2(f, greal[g], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        CHECK(h >= 0);
        H5Gclose(h);
        note(1, group_class(g));
    }
}

static void link_groups(hid_t f)
{
    char lp[128];
    for (int g = 0; g < NG; g++) {
        link_path(g, lp, sizeof lp);
        switch (gmode[g]) {
        case 2:
            H5Lcreate_soft(greal[g], f, lp, H5P_DEFAULT, H5P_DEFAULT);
            break;
        case 3:
            H5Lcreate_external(other, "/grp", f, lp, H5P_DEFAULT, H5P_DEFAULT);
            break;
        case 4:
            H5Lcreate_hard(f, greal[g], f, lp, H5P_DEFAULT, H5P_DEFAULT);
            break;
        case 5:
            empty_ds(f, lp, H5T_IEEE_F32LE, 2);
            break;
        case 6: {
            char p[160];
            snprintf(p, sizeof p, "%s/zz_group", greal[g]);
            hid_t h = H5Gcreate2(f, p, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            if (h >= 0)
                H5Gclose(h);
            snprintf(p, sizeof p, "%s/zz_data", greal[g]);
            empty_ds(f, p, H5T_STD_I8LE, 3);
            break;
        }
        case 7: {
            hid_t h = H5Gopen2(f, greal[g], H5P_DEFAULT);
            for (int k = 0; k < 5; k++) {
                char an[16];
                snprintf(an, sizeof an, "zz_%d", k);
                put(h, an, H5Tcopy(H5T_STD_I32LE), H5Tcopy(H5T_NATIVE_INT32), H5Screate(H5S_SCALAR), &k);
            }
            H5Gclose(h);
            break;
        }
        }
    }
}

/* ------------------------------------------------------------------ /model names, /rng */

static void names_slot(hid_t loc, int relevant)
{
    unsigned m = u8() % 12;
    snprintf(slot, sizeof slot, "/model names, variation %u", m);
    const char *nm[NP + 2];
    int n = NP, cls = BAD;
    size_t len = 0;
    char longname[300];
    for (int p = 0; p < NP; p++)
        nm[p] = pname[p];
    switch (m) {
    case 0: /* normal */
    case 6: /* NUL-padded, no NUL */
        cls = FINE;
        break;
    case 1: /* missing */
        return note(relevant, BAD);
    case 2: /* one renamed */
        nm[u8() % NP] = "fc.other";
        break;
    case 3: { /* two swapped */
        unsigned a = u8() % NP, b = (a + 1 + u8() % (NP - 1)) % NP;
        const char *t = nm[a];
        nm[a] = nm[b], nm[b] = t;
        break;
    }
    case 4: /* one more */
        nm[n++] = "extra";
        break;
    case 5: /* one fewer */
        n--;
        break;
    case 7: { /* variable-length strings */
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, H5T_VARIABLE);
        put(loc, "names", t, H5Tcopy(t), space_1d(NP), nm);
        return note(relevant, BAD);
    }
    case 8: { /* integers */
        int32_t v[NP] = {1, 2, 3, 4, 5};
        put(loc, "names", H5Tcopy(H5T_STD_I32LE), H5Tcopy(H5T_NATIVE_INT32), space_1d(NP), v);
        return note(relevant, BAD);
    }
    case 9: /* a name longer than any parameter's can be */
        memset(longname, 'n', sizeof longname - 1);
        longname[sizeof longname - 1] = 0;
        nm[n++] = longname;
        break;
    case 10: /* none: [0] */
        n = 0;
        break;
    case 11: { /* many: 20000 names */
        hid_t t = str_type(2, H5T_STR_NULLTERM);
        char *v = calloc(20000, 2);
        CHECK(v);
        memset(v, 'x', 1);
        put(loc, "names", t, H5Tcopy(t), space_1d(20000), v);
        free(v);
        return note(relevant, BAD);
    }
    }
    for (int p = 0; p < n; p++)
        if (strlen(nm[p]) > len)
            len = strlen(nm[p]);
    len += m != 6;
    char *v = calloc((size_t)(n ? n : 1), len ? len : 1);
    CHECK(v);
    for (int p = 0; p < n; p++)
        memcpy(v + (size_t)p * len, nm[p], strlen(nm[p]));
    hid_t t = str_type(len ? len : 1, m == 6 ? H5T_STR_NULLPAD : H5T_STR_NULLTERM);
    put(loc, "names", t, H5Tcopy(t), space_1d((hsize_t)n), v);
    free(v);
    note(relevant, cls);
}

static void rng_slot(hid_t loc, int relevant, unsigned seed)
{
    unsigned m = u8() % 8;
    snprintf(slot, sizeof slot, "/rng state, variation %u", m);
    size_t n = 16;
    uint8_t v[300];
    for (size_t k = 0; k < sizeof v; k++)
        v[k] = (uint8_t)(seed * 7 + k * 13);
    int cls = FINE;
    ex.rng_known = relevant;
    switch (m) {
    case 0: /* 16 bytes */
    case 2: /* 256 */
    case 3: /* more than ddpc keeps */
        n = m == 0 ? 16 : m == 2 ? 256 : 257 + u8() % 40;
        put(loc, "state", H5Tcopy(H5T_STD_U8LE), H5Tcopy(H5T_NATIVE_UINT8), space_1d(n), v);
        cls = n > 256 ? BAD : FINE;
        break;
    case 1: /* none */
        n = 0;
        break;
    case 4: { /* as int64, values that fit */
        int64_t w[16];
        for (int k = 0; k < 16; k++)
            w[k] = v[k];
        put(loc, "state", H5Tcopy(H5T_STD_I64BE), H5Tcopy(H5T_NATIVE_INT64), space_1d(16), w);
        break;
    }
    case 5: { /* a string */
        hid_t t = str_type(16, H5T_STR_NULLPAD);
        put(loc, "state", t, H5Tcopy(t), H5Screate(H5S_SCALAR), v);
        cls = BAD;
        break;
    }
    case 6: { /* 4 x 4 */
        hsize_t d[2] = {4, 4};
        put(loc, "state", H5Tcopy(H5T_STD_U8LE), H5Tcopy(H5T_NATIVE_UINT8),
            H5Screate_simple(2, d, NULL), v);
        break;
    }
    case 7: /* a null dataspace, or [0] */
        put(loc, "state", H5Tcopy(H5T_STD_U8LE), H5Tcopy(H5T_NATIVE_UINT8),
            u8() & 1 ? H5Screate(H5S_NULL) : space_1d(0), NULL);
        n = 0;
        cls = UNSURE;
        break;
    }
    note(relevant, cls);
    if (cls != FINE)
        ex.rng_known = 0;
    ex.rng_n = n;
    memcpy(ex.rng, v, n <= 256 ? n : 256);
}

/* ------------------------------------------------------------------ datasets */

/* A pass-through filter that only the writer registers: the loader must find
 * it missing (and must not look for it among HDF5's plugins). */
#define WRITER_FILTER ((H5Z_filter_t)39999)
static size_t pass_through(unsigned flags, size_t cd_nelmts, const unsigned cd_values[],
                           size_t nbytes, size_t *buf_size, void **buf)
{
    (void)flags, (void)cd_nelmts, (void)cd_values, (void)buf_size, (void)buf;
    return nbytes;
}
static const H5Z_class2_t writer_filter = {H5Z_CLASS_T_VERS, WRITER_FILTER, 1, 1,
                                           "ddpc fuzz: the writer's only", NULL, NULL,
                                           pass_through};

static void crc_attr(hid_t ds, uint32_t crc)
{
    put(ds, "crc32", H5Tcopy(H5T_STD_U32LE), H5Tcopy(H5T_NATIVE_UINT32), H5Screate(H5S_SCALAR), &crc);
}

/* A float32 dataset at path from data (native floats); NULL data: unwritten. */
static hid_t make_ds(hid_t f, const char *path, hid_t ftype, hid_t sp, hid_t dcpl, const float *data)
{
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t ds = H5Dcreate2(f, path, ftype, sp, lcpl, dcpl, H5P_DEFAULT);
    H5Pclose(lcpl);
    if (ds >= 0 && data && H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0) {
        H5Dclose(ds);
        H5Ldelete(f, path, H5P_DEFAULT);
        return -1;
    }
    return ds;
}

/* Dataset slot i at path (its parent's real place). */
static void dataset_slot(hid_t f, int i, const char *path, int relevant, unsigned seed)
{
    size_t n = item_numel(i);
    int nd = item_ndim(i);
    hsize_t dims[32];
    item_dims(i, dims);
    float *v = ex.data[i];
    for (size_t j = 0; j < n; j++)
        v[j] = (float)((int)((seed * 37 + (unsigned)i * 11 + (unsigned)j * 5) % 41) - 20) * 0.25f;
    ex.dknown[i] = relevant;
    unsigned m = u8() % 24;
    snprintf(slot, sizeof slot, "dataset %s, variation %u", path, m);
    int cls = FINE;
    uint32_t crc = crc32_of(v, n * sizeof(float));
    hid_t sp = nd ? H5Screate_simple(nd, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), ds = -1, ftype = H5Tcopy(H5T_IEEE_F32LE);
    int made = 0;
    char hid_path[64];
    snprintf(hid_path, sizeof hid_path, "/hidden_d%d", i);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    switch (m) {
    case 0: /* as written */
    case 19: /* with many more attributes */
        ds = make_ds(f, path, ftype, sp, dcpl, v);
        for (unsigned k = 0, extra = m == 19 ? 1 + u8() * 4 : 0; ds >= 0 && k < extra; k++) {
            char an[32];
            snprintf(an, sizeof an, "extra_%u", k);
            put(ds, an, H5Tcopy(H5T_STD_U8LE), H5Tcopy(H5T_NATIVE_UINT8), H5Screate(H5S_SCALAR), &k);
        }
        break;
    case 1: /* missing */
        cls = BAD;
        break;
    case 2: /* a wrong CRC */
        crc ^= 1u << (u8() % 32);
        cls = BAD;
        ds = make_ds(f, path, ftype, sp, dcpl, v);
        break;
    case 3: /* no CRC */
        cls = BAD;
        ds = make_ds(f, path, ftype, sp, dcpl, v);
        if (ds >= 0)
            made = 1, H5Dclose(ds), ds = -1;
        break;
    case 4: { /* the CRC as an array of k */
        size_t k = 1 + u8() % 3;
        uint32_t c[3] = {crc, crc, crc};
        ds = make_ds(f, path, ftype, sp, dcpl, v);
        if (ds >= 0) {
            put(ds, "crc32", H5Tcopy(H5T_STD_U32LE), H5Tcopy(H5T_NATIVE_UINT32), space_1d(k), c);
            made = 1, H5Dclose(ds), ds = -1;
        }
        cls = k > 1 ? BAD : FINE;
        break;
    }
    case 5: { /* the CRC as a string, uint64, float64 or int8 */
        unsigned k = u8() % 4;
        ds = make_ds(f, path, ftype, sp, dcpl, v);
        if (ds >= 0) {
            if (k == 0) {
                hid_t t = str_type(9, H5T_STR_NULLTERM);
                char s[9];
                snprintf(s, sizeof s, "%08x", crc);
                put(ds, "crc32", t, H5Tcopy(t), H5Screate(H5S_SCALAR), s);
            } else if (k == 1) {
                uint64_t c = crc;
                put(ds, "crc32", H5Tcopy(H5T_STD_U64LE), H5Tcopy(H5T_NATIVE_UINT64),
                    H5Screate(H5S_SCALAR), &c);
            } else if (k == 2) {
                double c = crc;
                put(ds, "crc32", H5Tcopy(H5T_IEEE_F64LE), H5Tcopy(H5T_NATIVE_DOUBLE),
                    H5Screate(H5S_SCALAR), &c);
            } else {
                int8_t c = (int8_t)crc;
                put(ds, "crc32", H5Tcopy(H5T_STD_I8LE), H5Tcopy(H5T_NATIVE_INT8),
                    H5Screate(H5S_SCALAR), &c);
            }
            made = 1, H5Dclose(ds), ds = -1;
        }
        cls = k == 0 ? BAD : k == 3 ? UNSURE : FINE;
        break;
    }
    case 6: { /* another dtype: float64, int32, string, compound, a 32-bit float not IEEE's */
        unsigned k = u8() % 5;
        hid_t t;
        if (k == 0)
            t = H5Tcopy(H5T_IEEE_F64LE);
        else if (k == 1)
            t = H5Tcopy(H5T_STD_I32LE);
        else if (k == 2)
            t = str_type(4, H5T_STR_NULLPAD);
        else if (k == 3) {
            t = H5Tcreate(H5T_COMPOUND, 4);
            H5Tinsert(t, "f", 0, H5T_IEEE_F32LE);
        } else {
            t = H5Tcopy(H5T_IEEE_F32LE);
            H5Tset_ebias(t, 120);
        }
        ds = make_ds(f, path, t, sp, dcpl, k == 0 || k == 1 || k == 4 ? v : NULL);
        H5Tclose(t);
        cls = BAD;
        break;
    }
    case 7: { /* another shape */
        unsigned k = u8() % 6;
        hsize_t d[32];
        int r = nd;
        memcpy(d, dims, sizeof d);
        if (k == 0 || (k == 1 && !nd)) /* one more along the first dimension, or [1] */
            d[0] = nd ? d[0] + 1 : 1, r = nd ? nd : 1;
        else if (k == 1) /* the last one 0 (or 1 if it is 0) */
            d[nd - 1] = d[nd - 1] ? 0 : 1;
        else if (k == 2 || k == 3) /* huge: 2^40, 2^63 + 5 ("negative") */
            d[0] = k == 2 ? 1ull << 40 : (1ull << 63) + 5, r = nd ? nd : 1;
        else if (k == 4) /* one more dimension */
            d[nd] = 1, r = nd + 1;
        else { /* rank 9 or 32 */
            r = u8() & 1 ? 32 : 9;
            for (int q = 0; q < r; q++)
                d[q] = 1;
        }
        hid_t s2 = H5Screate_simple(r, d, NULL);
        if (s2 >= 0) {
            ds = make_ds(f, path, ftype, s2, dcpl, NULL);
            if (ds < 0) { /* too large to be contiguous: chunked */
                hid_t c = H5Pcreate(H5P_DATASET_CREATE);
                hsize_t one[32];
                for (int q = 0; q < 32; q++)
                    one[q] = 1;
                H5Pset_chunk(c, r, one);
                ds = make_ds(f, path, ftype, s2, c, NULL);
                H5Pclose(c);
            }
            H5Sclose(s2);
        }
        cls = BAD;
        break;
    }
    case 8: { /* chunked, maybe extendible, compressed, shuffled, Fletcher32 */
        unsigned k = u8();
        if (nd) {
            hsize_t c[8], mx[8];
            for (int q = 0; q < nd; q++) {
                c[q] = dims[q] ? 1 + u8() % dims[q] : 1;
                mx[q] = k & 8 ? H5S_UNLIMITED : dims[q];
            }
            H5Pset_chunk(dcpl, nd, c);
            if (k & 1)
                H5Pset_shuffle(dcpl);
            if (k & 2)
                H5Pset_deflate(dcpl, k >> 4 & 7);
            if (k & 4)
                H5Pset_fletcher32(dcpl);
            H5Sset_extent_simple(sp, nd, dims, mx);
        }
        ds = make_ds(f, path, ftype, sp, dcpl, v);
        break;
    }
    case 9: /* compact */
        H5Pset_layout(dcpl, H5D_COMPACT);
        ds = make_ds(f, path, ftype, sp, dcpl, v);
        break;
    case 10: { /* a group in its place */
        hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
        H5Pset_create_intermediate_group(lcpl, 1);
        hid_t g = H5Gcreate2(f, path, lcpl, H5P_DEFAULT, H5P_DEFAULT);
        if (g >= 0)
            H5Gclose(g);
        H5Pclose(lcpl);
        cls = BAD;
        break;
    }
    case 11: /* a soft link to the real one */
    case 12: /* an external link */
    case 15: { /* a second hard link */
        ds = make_ds(f, hid_path, ftype, sp, dcpl, v);
        hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
        H5Pset_create_intermediate_group(lcpl, 1);
        if (m == 11)
            H5Lcreate_soft(hid_path, f, path, lcpl, H5P_DEFAULT);
        else if (m == 12)
            H5Lcreate_external(other, "/src", f, path, lcpl, H5P_DEFAULT);
        else if (H5Lcreate_hard(f, hid_path, f, path, lcpl, H5P_DEFAULT) < 0)
            cls = BAD;
        H5Pclose(lcpl);
        if (m != 15)
            cls = BAD;
        break;
    }
    case 13: /* stored in an external raw file */
        cls = BAD;
        if (n && H5Pset_external(dcpl, raw, 0, (hsize_t)(n * sizeof(float))) >= 0)
            ds = make_ds(f, path, ftype, sp, dcpl, v);
        break;
    case 14: { /* a virtual dataset over another file */
        cls = BAD;
        if (nd) {
            hid_t src = H5Screate_simple(nd, dims, NULL);
            if (H5Pset_virtual(dcpl, sp, other, "/src", src) >= 0)
                ds = make_ds(f, path, ftype, sp, dcpl, NULL);
            H5Sclose(src);
        }
        break;
    }
    case 16: { /* a committed (named) float32 datatype */
        char tn[64];
        snprintf(tn, sizeof tn, "/types/f%d", i);
        hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
        H5Pset_create_intermediate_group(lcpl, 1);
        if (H5Tcommit2(f, tn, ftype, lcpl, H5P_DEFAULT, H5P_DEFAULT) < 0)
            cls = UNSURE;
        H5Pclose(lcpl);
        ds = make_ds(f, path, ftype, sp, dcpl, v);
        break;
    }
    case 17: /* NaN, infinities, -0, denormals: bitwise back */
        for (size_t j = 0; j < n; j++) {
            static const uint32_t bits[] = {0x7fc00001, 0xff800000, 0x7f800000, 0x80000000,
                                            0x00000001, 0xffffffff, 0x7f7fffff};
            memcpy(&v[j], &bits[(j + seed) % 7], 4);
        }
        crc = crc32_of(v, n * sizeof(float));
        ds = make_ds(f, path, ftype, sp, dcpl, v);
        break;
    case 18: { /* never written: its fill value */
        float fill = 1.5f;
        H5Pset_fill_value(dcpl, H5T_NATIVE_FLOAT, &fill);
        H5Pset_fill_time(dcpl, H5D_FILL_TIME_IFSET);
        for (size_t j = 0; j < n; j++)
            v[j] = fill;
        crc = crc32_of(v, n * sizeof(float));
        ds = make_ds(f, path, ftype, sp, dcpl, NULL);
        break;
    }
    case 20: /* a null dataspace */
        H5Sclose(sp);
        sp = H5Screate(H5S_NULL);
        ds = make_ds(f, path, ftype, sp, dcpl, NULL);
        cls = BAD;
        break;
    case 21: /* one value changed after its CRC */
        if (n) {
            float w[MAXN];
            memcpy(w, v, n * sizeof(float));
            w[u8() % n] += 1.0f;
            ds = make_ds(f, path, ftype, sp, dcpl, w);
            cls = BAD;
        } else {
            ds = make_ds(f, path, ftype, sp, dcpl, v);
        }
        break;
    case 22: /* big-endian float32 */
        H5Tclose(ftype);
        ftype = H5Tcopy(H5T_IEEE_F32BE);
        ds = make_ds(f, path, ftype, sp, dcpl, v);
        break;
    case 23: { /* chunked through a filter nobody has, or that only the writer had */
        unsigned k = u8();
        if (nd) {
            hsize_t c[8];
            for (int q = 0; q < nd; q++)
                c[q] = dims[q] ? dims[q] : 1;
            H5Pset_chunk(dcpl, nd, c);
            if (k & 2)
                H5Zregister(&writer_filter); /* unregistered after the file is closed */
            H5Pset_filter(dcpl, k & 2 ? WRITER_FILTER : (H5Z_filter_t)(40000 + (k >> 2)),
                          k & 1 ? H5Z_FLAG_OPTIONAL : H5Z_FLAG_MANDATORY, 0, NULL);
        }
        ds = make_ds(f, path, ftype, sp, dcpl, v);
        /* the writer's filter is gone at the load, and plugins are off: it must fail */
        cls = nd && (k & 2) && n ? BAD : UNSURE;
        break;
    }
    }
    if (ds < 0 && !made && cls == FINE) { /* HDF5 would not make this variation: as written */
        H5Sclose(sp);
        H5Pclose(dcpl);
        sp = nd ? H5Screate_simple(nd, dims, NULL) : H5Screate(H5S_SCALAR);
        dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Ldelete(f, path, H5P_DEFAULT);
        ds = make_ds(f, path, ftype, sp, dcpl, v);
        CHECK(ds >= 0);
    }
    if (ds >= 0) {
        crc_attr(ds, crc);
        H5Dclose(ds);
    }
    H5Tclose(ftype);
    H5Pclose(dcpl);
    H5Sclose(sp);
    note(relevant, cls);
    if (cls != FINE)
        ex.dknown[i] = 0;
}

/* ------------------------------------------------------------------ extras */

static void extras(hid_t f)
{
    for (unsigned k = 0, nx = u8() % 5; k < nx; k++) {
        unsigned kind = u8() % 5, p = u8();
        char path[128];
        if (kind == 0 || kind == 4) { /* a dataset nobody reads */
            snprintf(path, sizeof path, "%s/zz_extra%u",
                     kind == 0 ? greal[G_MODEL] : "/optim_extra/exp_avg", k);
            hsize_t d = p % 5;
            hid_t sp = H5Screate_simple(1, &d, NULL), lcpl = H5Pcreate(H5P_LINK_CREATE);
            H5Pset_create_intermediate_group(lcpl, 1);
            hid_t ds = H5Dcreate2(f, path, H5T_IEEE_F32LE, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
            if (ds >= 0)
                H5Dclose(ds);
            H5Pclose(lcpl);
            H5Sclose(sp);
        } else if (kind == 1 || kind == 2) { /* many attributes: at the root, in /user */
            hid_t g = H5Gopen2(f, kind == 1 ? "/" : greal[G_USER], H5P_DEFAULT);
            for (unsigned a = 0; g >= 0 && a < p * 8; a++) {
                char an[128];
                if (a % 50 == 49) /* a name longer than ddpc keeps */
                    snprintf(an, sizeof an, "x%04u_%0100u", a, a);
                else
                    snprintf(an, sizeof an, "x%04u", a);
                double d = a;
                put(g, an, H5Tcopy(H5T_IEEE_F64LE), H5Tcopy(H5T_NATIVE_DOUBLE),
                    H5Screate(H5S_SCALAR), &d);
            }
            if (g >= 0)
                H5Gclose(g);
        } else { /* a stray entry newer than the checkpoint: empty, text, directory */
            unlink(stray);
            rmdir(stray);
            if (p % 3 == 2) {
                mkdir(stray, 0700);
            } else {
                FILE *s = fopen(stray, "w");
                CHECK(s);
                if (p % 3 == 1)
                    fputs("not a checkpoint\n", s);
                fclose(s);
            }
        }
    }
}

/* ------------------------------------------------------------------ the file */

/* Build the fuzzed file from the recipe; returns the handle to load with. */
static int build(int *with_fallback, int *by_path)
{
    unsigned flags = u8(), seed = flags >> 4;
    int h = (int)(flags & 3);
    has_opt = h < 2;
    *with_fallback = flags >> 2 & 1;
    *by_path = flags >> 3 & 1;
    memset(&ex, 0, sizeof ex);
    bad = unsure = 0;
    hid_t f = H5Fcreate(fuzzed, H5F_ACC_TRUNC, H5P_DEFAULT, fapl_build);
    CHECK(f >= 0);
    make_groups(f);
    hid_t loc[4] = {H5Gopen2(f, "/", H5P_DEFAULT), H5Gopen2(f, greal[G_OPTIM], H5P_DEFAULT),
                    H5Gopen2(f, greal[G_SAMPLER], H5P_DEFAULT), H5Gopen2(f, greal[G_USER], H5P_DEFAULT)};
    int rel[4] = {1, has_opt && reachable(G_OPTIM), reachable(G_SAMPLER), reachable(G_USER)};
    for (int a = 0; a < NA; a++)
        attr_slot(loc[aspec[a].loc], a, rel[aspec[a].loc]);
    ex.has_sampler = reachable(G_SAMPLER);
    ex.sampler_known = gmode[G_SAMPLER] != 5;
    hid_t g = H5Gopen2(f, greal[G_MODEL], H5P_DEFAULT);
    names_slot(g, reachable(G_MODEL));
    H5Gclose(g);
    g = H5Gopen2(f, greal[G_RNG], H5P_DEFAULT);
    rng_slot(g, reachable(G_RNG), seed);
    H5Gclose(g);
    if (!reachable(G_RNG)) {
        ex.rng_n = 0;
        ex.rng_known = gmode[G_RNG] == 1;
    }
    for (int i = 0; i < NI; i++) {
        char path[160];
        int grp = i == 2 * NP ? G_USER : i < NP ? (i == 4 ? G_BLK : G_MODEL) : G_MOM;
        const char *leaf = i == 2 * NP ? "ema" : i == 4 ? "w" : pname[i % NP];
        int relevant = reachable(grp) && (i < NP || i == 2 * NP || has_opt);
        snprintf(path, sizeof path, "%s/%s", greal[grp], leaf);
        dataset_slot(f, i, path, relevant, seed);
    }
    link_groups(f);
    extras(f);
    for (int k = 0; k < 4; k++)
        H5Gclose(loc[k]);
    CHECK(H5Fclose(f) >= 0);
    if (H5Zfilter_avail(WRITER_FILTER) > 0)
        CHECK(H5Zunregister(WRITER_FILTER) >= 0);
    return h;
}

/* ------------------------------------------------------------------ checks */

static void poison(void)
{
    for (int i = 0; i < NI; i++)
        memset(item_mem(i), 0xa5, item_numel(i) * sizeof(float));
    ddpc_optim_set_steps(opt, 999);
    ddpc_optim_set_lr(opt, 9.5);
    ddpc_optim_set_loss_scale(opt, 3.0);
    ddpc_optim_set_scale_good_steps(opt, 77);
}

static int poisoned(int i)
{
    const unsigned char *p = (const unsigned char *)item_mem(i);
    for (size_t j = 0; j < item_numel(i) * sizeof(float); j++)
        if (p[j] != 0xa5)
            return 0;
    return 1;
}

static int optim_untouched(void)
{
    return ddpc_optim_steps(opt) == 999 && ddpc_optim_config(opt)->lr == 9.5 &&
           ddpc_optim_loss_scale(opt) == 3.0 && ddpc_optim_scale_good_steps(opt) == 77;
}

#define KNOWN(a) (e->known[a] && e->present[a])

/* After a load of the file e describes: its values, exactly. */
static void compare(ddpc_ckpt_t ck, const expect_t *e, const ddpc_ckpt_meta_t *m, int with_opt)
{
    for (int i = 0; i < NI; i++) {
        if (i >= NP && i < 2 * NP && !with_opt)
            CHECK(poisoned(i)); /* a load without an optimizer leaves its state alone */
        else if (e->dknown[i])
            CHECK(!memcmp(item_mem(i), e->data[i], item_numel(i) * sizeof(float)));
    }
    if (KNOWN(A_STEP))
        CHECK(m->step == e->u[A_STEP]);
    if (KNOWN(A_EPOCH))
        CHECK(m->epoch == e->u[A_EPOCH]);
    if (KNOWN(A_WORLD))
        CHECK(m->world_size == (int)e->v[A_WORLD]);
    if (e->sampler_known) {
        CHECK(m->has_sampler == e->has_sampler);
        if (e->has_sampler) {
            if (KNOWN(A_SSEED))
                CHECK(m->sampler_seed == e->u[A_SSEED]);
            if (KNOWN(A_SEPOCH))
                CHECK(m->sampler_epoch == e->u[A_SEPOCH]);
            if (KNOWN(A_SCONS))
                CHECK(m->sampler_consumed == e->u[A_SCONS]);
            if (KNOWN(A_SSIZE))
                CHECK(m->sampler_dataset_size == e->u[A_SSIZE]);
            if (KNOWN(A_SSHUF))
                CHECK(m->sampler_shuffle == (int)e->v[A_SSHUF]);
            if (KNOWN(A_SDROP))
                CHECK(m->sampler_drop_last == (int)e->v[A_SDROP]);
        }
    }
    if (e->rng_known) {
        CHECK(m->rng_bytes == e->rng_n);
        CHECK(!memcmp(m->rng, e->rng, e->rng_n));
    }
    if (with_opt) {
        if (KNOWN(A_OSTEP))
            CHECK(ddpc_optim_steps(opt) == e->u[A_OSTEP]);
        if (KNOWN(A_LR))
            CHECK(ddpc_optim_config(opt)->lr == e->v[A_LR]);
        if (KNOWN(A_SCALE))
            CHECK(ddpc_optim_loss_scale(opt) == e->v[A_SCALE]);
        if (e->known[A_GOOD])
            CHECK(ddpc_optim_scale_good_steps(opt) == (e->present[A_GOOD] ? (int)e->v[A_GOOD] : 0));
        /* whatever the file said, nothing insane is installed */
        double lr = ddpc_optim_config(opt)->lr;
        CHECK(isfinite(lr) && lr >= 0);
        CHECK(ddpc_optim_scale_good_steps(opt) >= 0);
    } else {
        CHECK(optim_untouched());
    }
    double d;
    char s[64];
    if (e->known[A_LOSS]) {
        /* a user attribute is the application's value, whatever it is: save
         * writes a NaN or an infinity (the loss of a run that diverged) and a
         * load gives it back, it is not the loader's to refuse. So the value
         * is compared by its bits, not with ==, which a NaN never satisfies
         * (and which would let -0.0 pass for 0.0) */
        ddpc_status_t st = ddpc_ckpt_get_user_attr_double(ck, "loss", &d);
        CHECK(e->present[A_LOSS] ? st == DDPC_OK && !memcmp(&d, &e->v[A_LOSS], sizeof d)
                                 : st == DDPC_ERR_NOT_FOUND);
    }
    if (e->known[A_RUN]) {
        ddpc_status_t st = ddpc_ckpt_get_user_attr_string(ck, "run", s, sizeof s);
        CHECK(e->present[A_RUN] ? st == DDPC_OK && !strcmp(s, "fuzz") : st == DDPC_ERR_NOT_FOUND);
    }
}

/* HDF5 identifiers in use: the same before and after an input */
static void id_counts(hsize_t c[7])
{
    static const H5I_type_t t[7] = {H5I_FILE, H5I_GROUP, H5I_DATATYPE, H5I_DATASPACE,
                                    H5I_DATASET, H5I_ATTR, H5I_GENPROP_LST};
    for (int k = 0; k < 7; k++) {
        c[k] = 0;
        H5Inmembers(t[k], &c[k]);
    }
}

/* ------------------------------------------------------------------ setup */

static void cleanup(void)
{
    const char *files[] = {fuzzed, fallback, master, other, raw, stray};
    for (size_t k = 0; k < sizeof files / sizeof *files; k++)
        if (unlink(files[k]) != 0 && errno == EISDIR)
            rmdir(files[k]);
    rmdir(stray);
    rmdir(dir);
}

static void setup(void)
{
    ddpc_config_t cfg = DDPC_CONFIG_INIT;
    cfg.log_level = DDPC_LOG_ERROR; /* the loader's warnings about every bad file: not here */
    CHECK(ddpc_init(&cfg, NULL, NULL, &rt) == DDPC_OK);
    CHECK(ddpc_world(rt)->size == 1);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* HDF5 would print its stack for every refusal */
    const char *t = getenv("TMPDIR");
    struct stat sb;
    if (!t || !*t)
        t = stat("/dev/shm", &sb) == 0 && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/ddpc-fuzz-ckpt.XXXXXX", t);
    CHECK(mkdtemp(dir));
    atexit(cleanup);
    snprintf(fuzzed, sizeof fuzzed, "%s/ckpt-00000002.h5", dir);
    snprintf(fallback, sizeof fallback, "%s/ckpt-00000001.h5", dir);
    snprintf(master, sizeof master, "%s/master.h5", dir);
    snprintf(other, sizeof other, "%s/other.h5", dir);
    snprintf(raw, sizeof raw, "%s/raw.bin", dir);
    snprintf(stray, sizeof stray, "%s/ckpt-00000003.h5", dir);

    CHECK(ddpc_ddp_create(ddpc_comm_world(rt), NULL, &ddp) == DDPC_OK);
    for (int p = 0; p < NP; p++)
        CHECK(ddpc_ddp_add_param(ddp, pname[p], pndim[p], pshape[p], NULL) == DDPC_OK);
    CHECK(ddpc_ddp_build(ddp) == DDPC_OK);
    ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
    oc.lr = 0.05;
    oc.momentum = 0.9;
    CHECK(ddpc_optim_create(ddp, &oc, &opt) == DDPC_OK);
    for (int k = 0; k < 4; k++) {
        ddpc_ckpt_config_t cc = DDPC_CKPT_CONFIG_INIT;
        cc.dir = dir;
        cc.keep = 0;
        if (k & 1)
            cc.chunk_bytes = k == 1 ? 8 : 12; /* windows of 2 and 3 floats */
        CHECK(ddpc_ckpt_create(ddp, k < 2 ? opt : NULL, &cc, &handles[k]) == DDPC_OK);
        CHECK(ddpc_ckpt_add_user_tensor(handles[k], "ema", user_t, UNUMEL) == DDPC_OK);
    }
    fingerprint = doc_fingerprint();

    /* the fallback: what ddpc_ckpt_save writes, step 1 */
    memset(&ex_master, 0, sizeof ex_master);
    for (int i = 0; i < NI; i++) {
        for (size_t j = 0; j < item_numel(i); j++)
            ex_master.data[i][j] = (float)(i * 100 + (int)j) + 0.5f;
        memcpy(item_mem(i), ex_master.data[i], item_numel(i) * sizeof(float));
        ex_master.dknown[i] = 1;
    }
    ddpc_optim_set_steps(opt, 41);
    ddpc_optim_set_loss_scale(opt, 512);
    ddpc_optim_set_scale_good_steps(opt, 9);
    CHECK(ddpc_ckpt_set_user_attr_double(handles[0], "loss", 0.25) == DDPC_OK);
    CHECK(ddpc_ckpt_set_user_attr_string(handles[0], "run", "fuzz") == DDPC_OK);
    ddpc_ckpt_meta_t m = {0};
    m.step = 1;
    m.epoch = 3;
    m.rng_bytes = 4;
    memcpy(m.rng, "\1\2\3\4", 4);
    CHECK(ddpc_ckpt_save(handles[0], &m) == DDPC_OK);
    CHECK(rename(fallback, master) == 0);
    static const int ma[] = {A_STEP, A_EPOCH, A_WORLD, A_OSTEP, A_LR, A_SCALE, A_GOOD, A_LOSS, A_RUN};
    static const double mv[] = {1, 3, 1, 41, 0.05, 512, 9, 0.25, 0};
    for (size_t k = 0; k < sizeof ma / sizeof *ma; k++) {
        ex_master.known[ma[k]] = ex_master.present[ma[k]] = 1;
        ex_master.u[ma[k]] = (uint64_t)mv[k];
        ex_master.v[ma[k]] = mv[k];
    }
    ex_master.sampler_known = 1;
    ex_master.rng_known = 1;
    ex_master.rng_n = 4;
    memcpy(ex_master.rng, "\1\2\3\4", 4);
    /* its fingerprint is the documented one */
    hid_t f = H5Fopen(master, H5F_ACC_RDONLY, H5P_DEFAULT);
    uint64_t fp = 0;
    hid_t a = H5Aopen(f, "model_fingerprint", H5P_DEFAULT);
    CHECK(a >= 0 && H5Aread(a, H5T_NATIVE_UINT64, &fp) >= 0 && fp == fingerprint);
    H5Aclose(a);
    H5Fclose(f);

    /* what external links and virtual datasets point to, and external storage */
    f = H5Fcreate(other, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t d = MAXN;
    hid_t sp = H5Screate_simple(1, &d, NULL);
    hid_t ds = H5Dcreate2(f, "/src", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t g = H5Gcreate2(f, "/grp", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
    H5Dclose(ds);
    H5Sclose(sp);
    H5Fclose(f);
    FILE *r = fopen(raw, "wb");
    CHECK(r);
    fwrite(ex_master.data[0], sizeof(float), MAXN, r);
    fclose(r);

    fapl_build = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl_build, H5F_LIBVER_V18, H5F_LIBVER_LATEST); /* LATEST: virtual datasets */
    H5Pset_fclose_degree(fapl_build, H5F_CLOSE_STRONG);
}

/* LeakSanitizer: what MPI and its transport allocate at init and never free
 * (the fuzzer exits without MPI_Finalize); never a ddpc or HDF5 frame */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libmpich\nleak:libucp\nleak:libucs\nleak:libuct\nleak:libhwloc\n";
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!rt) {
        setup();
        verbose = getenv("DDPC_FUZZ_VERBOSE") != NULL;
    }
    hsize_t before[7], after[7];
    id_counts(before);
    rp = data, rn = size, ri = 0;
    unlink(stray);
    rmdir(stray);
    int with_fallback, by_path;
    int h = build(&with_fallback, &by_path);
    unlink(fallback);
    if (with_fallback)
        CHECK(link(master, fallback) == 0);
    ddpc_ckpt_t ck = handles[h];
    int with_opt = h < 2;
    poison();
    ddpc_ckpt_meta_t m;
    memset(&m, 0x5a, sizeof m);
    char loaded[1024] = "";
    ddpc_status_t st = ddpc_ckpt_load(ck, by_path ? fuzzed : NULL, &m, loaded, sizeof loaded);
    CHECK(st == DDPC_OK || st == DDPC_ERR_FORMAT || st == DDPC_ERR_MISMATCH);
    int ok_fuzzed = st == DDPC_OK && !strcmp(loaded, fuzzed);
    if (st != DDPC_OK) {
        const char *msg = ddpc_ckpt_last_error(ck);
        CHECK(!strncmp(msg, "ddpc[rank 0/1 ", 14) && strstr(msg, "ckpt: "));
        CHECK(optim_untouched()); /* the counters change only with a load */
        if (st == DDPC_ERR_MISMATCH)
            for (int i = 0; i < NI; i++)
                CHECK(poisoned(i)); /* another model: nothing was read */
    } else {
        CHECK(ok_fuzzed || (!strcmp(loaded, fallback) && with_fallback && !by_path));
        compare(ck, ok_fuzzed ? &ex : &ex_master, &m, with_opt);
    }
    if (verbose) /* what each input did (for reading a seed) */
        fprintf(stderr, "fuzz_ckpt: handle %d%s%s: %s%s -> %s %s: %s\n", h,
                with_fallback ? ", fallback" : "", by_path ? ", by path" : "",
                bad ? "harmful" : unsure ? "unforeseen" : "harmless", "",
                ddpc_strerror(st), st ? "" : loaded, st ? ddpc_ckpt_last_error(ck) : "");
    if (bad)
        CHECK(!ok_fuzzed);
    else if (!unsure && !ok_fuzzed) {
        fprintf(stderr, "fuzz_ckpt: a file with harmless variations only was not loaded: %s\n",
                ddpc_ckpt_last_error(ck));
        abort();
    }
    CHECK(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) == 0);
    id_counts(after);
    for (int k = 0; k < 7; k++)
        CHECK(after[k] == before[k]);
    return 0;
}
