/* SPDX-License-Identifier: BSD-3-Clause */
/* idx.c: the idx reader (MNIST, Fashion-MNIST), raw or gzip through zlib's
 * gzread, which reads both. Validates everything the header claims; keeps
 * pixels as bytes and normalizes to float only when gathering a batch. */
#include "config.h"
#include "ddpc_data.h"
#include "internal.h"
#include "local.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define IDX_MAGIC_IMAGES 0x00000803u /* ubyte (0x08), 3 dimensions */
#define IDX_MAGIC_LABELS 0x00000801u /* ubyte (0x08), 1 dimension */

struct ddpc_idx {
    size_t count, rows, cols; /* samples of rows x cols pixels */
    uint8_t *pixels;          /* (count, rows*cols) */
    uint8_t *labels;          /* (count,) */
    float lut[256];           /* pixel byte -> normalized feature */
    int broken;               /* open failed: only last_error and close */
    char prefix[48];
    char err[DDPC_ERRMSG_LEN];
};

#define fail(h, st, ...) DDPC_HANDLE_ERR(h, "data", st, __VA_ARGS__)

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Read up to len bytes; returns the count, or -1 when zlib reports an error. */
static long long gz_read_all(gzFile f, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        size_t want = len - got > (1u << 30) ? (1u << 30) : len - got;
        int k = gzread(f, (char *)buf + got, (unsigned)want);
        if (k < 0)
            return -1;
        if (k == 0)
            break;
        got += (size_t)k;
    }
    int zerr = Z_OK;
    gzerror(f, &zerr); /* a cut gzip stream ends in a short read and an error */
    return got < len && zerr != Z_OK ? -1 : (long long)got;
}

/* The failure of a read gz_read_all reported: an I/O error, or corrupt gzip. */
static ddpc_status_t read_failed(ddpc_idx_t ds, gzFile f, const char *path)
{
    int zerr = Z_OK;
    const char *m = gzerror(f, &zerr);
    if (zerr == Z_ERRNO)
        return fail(ds, DDPC_ERR_IO, "cannot read \"%s\": %s", path, strerror(errno));
    size_t plen = strlen(path); /* zlib's message starts with "<path>: " */
    if (strncmp(m, path, plen) == 0 && strncmp(m + plen, ": ", 2) == 0)
        m += plen + 2;
    return fail(ds, DDPC_ERR_FORMAT, "cannot read \"%s\": %s: a corrupt or cut gzip file",
                path, m);
}

/* Read one idx file of the given magic: ndims big-endian dimensions after the
 * magic, then prod(dims) bytes, and nothing more. what[] names the dims. */
static ddpc_status_t read_idx(ddpc_idx_t ds, const char *path, uint32_t magic, int ndims,
                              const char *const *what, size_t *dims, uint8_t **data)
{
    const char *kind = magic == IDX_MAGIC_IMAGES ? "idx3-ubyte images" : "idx1-ubyte labels";
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (!f)
        return fail(ds, DDPC_ERR_IO, "cannot open %s file \"%s\": %s", kind, path,
                    errno ? strerror(errno) : "out of memory");
    gzbuffer(f, 1u << 17);
    ddpc_status_t st = DDPC_OK;
    /* The magic first, so that a file of the other kind is named as such even
     * when it is shorter than this kind's header. */
    unsigned char hdr[16];
    size_t hlen = 4 + 4 * (size_t)ndims;
    long long k = gz_read_all(f, hdr, 4), k2 = 0;
    if (k == 4)
        k2 = gz_read_all(f, hdr + 4, hlen - 4);
    if (k < 0 || k2 < 0) {
        st = read_failed(ds, f, path);
        goto out;
    }
    if (k < 4) {
        st = fail(ds, DDPC_ERR_FORMAT,
                  "\"%s\" is truncated: %lld bytes, shorter than the %zu-byte header of %s",
                  path, k, hlen, kind);
        goto out;
    }
    uint32_t m = be32(hdr);
    if (m != magic) {
        uint32_t other = magic == IDX_MAGIC_IMAGES ? IDX_MAGIC_LABELS : IDX_MAGIC_IMAGES;
        st = fail(ds, DDPC_ERR_FORMAT, "\"%s\" has magic number 0x%08x, expected 0x%08x (%s)%s",
                  path, (unsigned)m, (unsigned)magic, kind,
                  m == other ? "; it is the other file of the pair: are the images and labels "
                               "paths swapped?"
                             : ": not an idx file of this kind");
        goto out;
    }
    if ((size_t)k2 < hlen - 4) {
        st = fail(ds, DDPC_ERR_FORMAT,
                  "\"%s\" is truncated: %lld bytes, shorter than the %zu-byte header of %s",
                  path, 4 + k2, hlen, kind);
        goto out;
    }
    size_t total = 1;
    for (int d = 0; d < ndims; d++) {
        uint32_t v = be32(hdr + 4 + 4 * d);
        if (v == 0 || v > INT32_MAX || total > SIZE_MAX / v) {
            st = fail(ds, DDPC_ERR_FORMAT, "\"%s\": header gives %s = %u, expected 1..%d", path,
                      what[d], (unsigned)v, INT32_MAX);
            goto out;
        }
        dims[d] = v;
        total *= v;
    }
    /* The header is not trusted with the allocation: the buffer grows with
     * what the file holds (doubling, up to the header's size), so that a
     * short file claiming terabytes is refused as truncated, not by malloc. */
    size_t cap = total < ((size_t)1 << 20) ? total : ((size_t)1 << 20), got = 0;
    *data = malloc(cap);
    k = 0;
    while (*data) {
        long long r = gz_read_all(f, *data + got, cap - got);
        if (r < 0) {
            k = -1;
            break;
        }
        got += (size_t)r;
        k = (long long)got;
        if (got < cap || cap == total)
            break; /* the file ended, or the data is complete */
        size_t grow = cap > total / 2 ? total : 2 * cap;
        unsigned char *bigger = realloc(*data, grow);
        if (!bigger) {
            free(*data);
            *data = NULL;
            break;
        }
        *data = bigger;
        cap = grow;
    }
    if (!*data) {
        st = fail(ds, DDPC_ERR_NOMEM, "cannot allocate %zu bytes for \"%s\"", cap, path);
        goto out;
    }
    if (k < 0) {
        st = read_failed(ds, f, path);
        goto out;
    }
    if ((size_t)k < total) {
        char shape[64];
        if (ndims == 3)
            snprintf(shape, sizeof shape, "%zu images of %zux%zu", dims[0], dims[1], dims[2]);
        else
            snprintf(shape, sizeof shape, "%zu labels", dims[0]);
        st = fail(ds, DDPC_ERR_FORMAT,
                  "\"%s\" is truncated: its header says %s (%zu bytes of data), the file has "
                  "%lld",
                  path, shape, total, k);
        goto out;
    }
    unsigned char extra; /* also makes zlib check the gzip trailer (CRC, length) */
    k = gz_read_all(f, &extra, 1);
    if (k < 0) {
        st = read_failed(ds, f, path);
        goto out;
    }
    if (k > 0) {
        st = fail(ds, DDPC_ERR_FORMAT,
                  "\"%s\" is longer than its header says (%zu bytes of data): not an idx file "
                  "or a corrupt one",
                  path, total);
        goto out;
    }
out:
    gzclose(f);
    return st;
}

ddpc_status_t ddpc_idx_open(const char *images_path, const char *labels_path,
                            const ddpc_idx_config_t *cfg, ddpc_idx_t *out)
{
    static const ddpc_idx_config_t defaults = DDPC_IDX_CONFIG_INIT;
    static const char *const img_dims[] = {"the image count", "rows", "columns"};
    static const char *const lab_dims[] = {"the label count"};
    if (!out)
        return DDPC_ERR_INVALID;
    *out = NULL;
    ddpc_idx_t ds = calloc(1, sizeof *ds);
    if (!ds)
        return DDPC_ERR_NOMEM;
    *out = ds;
    ds->broken = 1;
    const ddpc_idx_config_t *c = cfg ? cfg : &defaults;
    if (c->rank >= 0)
        snprintf(ds->prefix, sizeof ds->prefix, "ddpc[rank %d/%d]", c->rank, c->world);
    else
        snprintf(ds->prefix, sizeof ds->prefix, "ddpc[rank ?]");
    if (!images_path || !labels_path)
        return fail(ds, DDPC_ERR_INVALID, "open: images and labels paths must not be NULL");
    if (c->num_classes < 1 || c->num_classes > 256)
        return fail(ds, DDPC_ERR_INVALID, "num_classes %d: expected 1..256 (labels are bytes)",
                    c->num_classes);
    if (!(c->std > 0.0f))
        return fail(ds, DDPC_ERR_INVALID, "std %g: expected a positive number", (double)c->std);

    size_t idims[3], ldims[1];
    ddpc_status_t st;
    if ((st = read_idx(ds, images_path, IDX_MAGIC_IMAGES, 3, img_dims, idims, &ds->pixels)) ||
        (st = read_idx(ds, labels_path, IDX_MAGIC_LABELS, 1, lab_dims, ldims, &ds->labels)))
        return st;
    if (idims[0] != ldims[0])
        return fail(ds, DDPC_ERR_FORMAT,
                    "\"%s\" has %zu images but \"%s\" has %zu labels: expected one label per "
                    "image (files of different datasets or splits?)",
                    images_path, idims[0], labels_path, ldims[0]);
    for (size_t i = 0; i < ldims[0]; i++)
        if (ds->labels[i] >= c->num_classes)
            return fail(ds, DDPC_ERR_FORMAT,
                        "\"%s\": label %u of sample %zu is out of range, expected 0..%d "
                        "(num_classes %d)",
                        labels_path, ds->labels[i], i, c->num_classes - 1, c->num_classes);
    ds->count = idims[0];
    ds->rows = idims[1];
    ds->cols = idims[2];
    for (int v = 0; v < 256; v++)
        ds->lut[v] = ((float)v / 255.0f - c->mean) / c->std;
    ds->broken = 0;
    return DDPC_OK;
}

void ddpc_idx_close(ddpc_idx_t ds)
{
    if (!ds)
        return;
    free(ds->pixels);
    free(ds->labels);
    free(ds);
}

ddpc_status_t ddpc_idx_default_paths(const char *dir, const char *split, char *images,
                                     char *labels, size_t len)
{
    if (!dir || !split || !images || !labels)
        return DDPC_ERR_INVALID;
    char *out[2] = {images, labels};
    const char *kind[2] = {"images-idx3", "labels-idx1"};
    for (int i = 0; i < 2; i++) {
        int k = snprintf(out[i], len, "%s/%s-%s-ubyte", dir, split, kind[i]);
        if (k < 0 || (size_t)k + 3 >= len)
            return DDPC_ERR_INVALID;
        struct stat sb; /* one that exists but cannot be read is opened, to say why */
        if (stat(out[i], &sb) != 0)
            strcat(out[i], ".gz");
    }
    return DDPC_OK;
}

#define LIVE(ds) ((ds) && !(ds)->broken)
size_t ddpc_idx_count(ddpc_idx_t ds) { return LIVE(ds) ? ds->count : 0; }
size_t ddpc_idx_rows(ddpc_idx_t ds) { return LIVE(ds) ? ds->rows : 0; }
size_t ddpc_idx_cols(ddpc_idx_t ds) { return LIVE(ds) ? ds->cols : 0; }
size_t ddpc_idx_dim(ddpc_idx_t ds) { return LIVE(ds) ? ds->rows * ds->cols : 0; }
const uint8_t *ddpc_idx_pixels(ddpc_idx_t ds) { return LIVE(ds) ? ds->pixels : NULL; }
const uint8_t *ddpc_idx_labels(ddpc_idx_t ds) { return LIVE(ds) ? ds->labels : NULL; }

/* Rows are scattered over the whole set (tens of MB): each sample's first
 * touch misses the caches. The rows AHEAD samples on are prefetched while
 * this one is converted, so the misses overlap the work. */
#define AHEAD 2

void ddpc_idx_gather_rows(ddpc_idx_t ds, const size_t *idx, size_t n, float *x, uint8_t *y)
{
    size_t dim = ds->rows * ds->cols;
    for (size_t i = 0; x && i < AHEAD && i < n; i++)
        for (size_t k = 0; k < dim; k += 64)
            __builtin_prefetch(ds->pixels + idx[i] * dim + k);
    for (size_t i = 0; i < n; i++) {
        if (x) {
            if (i + AHEAD < n)
                for (size_t k = 0; k < dim; k += 64)
                    __builtin_prefetch(ds->pixels + idx[i + AHEAD] * dim + k);
            const uint8_t *src = ds->pixels + idx[i] * dim;
            float *dst = x + i * dim;
            for (size_t k = 0; k < dim; k++)
                dst[k] = ds->lut[src[k]];
        }
        if (y)
            y[i] = ds->labels[idx[i]];
    }
}

ddpc_status_t ddpc_idx_gather(ddpc_idx_t ds, const size_t *idx, size_t n, float *x, uint8_t *y)
{
    if (!ds)
        return DDPC_ERR_INVALID;
    if (ds->broken)
        return DDPC_ERR_STATE;
    if (n && !idx)
        return fail(ds, DDPC_ERR_INVALID, "gather: idx must not be NULL");
    for (size_t i = 0; i < n; i++)
        if (idx[i] >= ds->count)
            return fail(ds, DDPC_ERR_INVALID,
                        "gather: index %zu (position %zu of %zu) is not below the count %zu",
                        idx[i], i, n, ds->count);
    ddpc_idx_gather_rows(ds, idx, n, x, y);
    return DDPC_OK;
}

const char *ddpc_idx_last_error(ddpc_idx_t ds)
{
    return ds ? ds->err : "ddpc[rank ?] data: no dataset (out of memory or out == NULL)";
}
