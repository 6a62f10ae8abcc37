/* SPDX-License-Identifier: BSD-3-Clause */
/* check_data.c: the idx reader and the prefetching loader on small files this
 * test writes in a temp dir, raw and gzip: contents and normalization, every
 * bad-file case with its message, the loader's batches against the sampler's
 * indices with prefetch on and off, its state, set_epoch and resume.
 * The real Fashion-MNIST files are read by check_fmnist.c. */
#include "ddpc_data.h"

#include "quiet_assert.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include "checkmain.h"

static char dir[256]; /* per test, made by the fixture */

static void make_dir(void)
{
    snprintf(dir, sizeof dir, "%s/ddpc-data.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

static const char *path(const char *name)
{
    static char p[4][400];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Write an idx file: magic, dims (ndims of them), then len data bytes;
 * gzip-compressed when the name ends in ".gz". */
static void write_idx(const char *name, uint32_t magic, int ndims, const uint32_t *dims,
                      const uint8_t *data, size_t len)
{
    unsigned char hdr[16];
    put_be32(hdr, magic);
    for (int d = 0; d < ndims; d++)
        put_be32(hdr + 4 + 4 * d, dims[d]);
    size_t hlen = 4 + 4 * (size_t)ndims;
    const char *p = path(name);
    if (strlen(name) > 3 && strcmp(name + strlen(name) - 3, ".gz") == 0) {
        gzFile f = gzopen(p, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(gzwrite(f, hdr, (unsigned)hlen), (int)hlen);
        if (len)
            ck_assert_int_eq(gzwrite(f, data, (unsigned)len), (int)len);
        ck_assert_int_eq(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(p, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(hdr, 1, hlen, f), hlen);
        ck_assert_uint_eq(fwrite(data, 1, len, f), len);
        fclose(f);
    }
}

/* A dataset of `count` images of 3x4 pixels: pixel k of sample i is
 * (7*i + 13*k) mod 256, label i mod 10. Files images<sfx>, labels<sfx>. */
enum { ROWS = 3, COLS = 4, DIM = ROWS * COLS };
static uint8_t pix(size_t i, size_t k) { return (uint8_t)((7 * i + 13 * k) % 256); }

static void write_dataset(uint32_t count, const char *sfx)
{
    uint8_t *img = malloc(count * DIM), *lab = malloc(count);
    for (size_t i = 0; i < count; i++) {
        for (size_t k = 0; k < DIM; k++)
            img[i * DIM + k] = pix(i, k);
        lab[i] = (uint8_t)(i % 10);
    }
    char name[64];
    uint32_t idims[3] = {count, ROWS, COLS};
    snprintf(name, sizeof name, "images%s", sfx);
    write_idx(name, 0x803, 3, idims, img, count * DIM);
    snprintf(name, sizeof name, "labels%s", sfx);
    write_idx(name, 0x801, 1, &count, lab, count);
    free(img);
    free(lab);
}

static ddpc_idx_t open_ok(const char *images, const char *labels, const ddpc_idx_config_t *cfg)
{
    ddpc_idx_t ds;
    ddpc_status_t st = ddpc_idx_open(path(images), path(labels), cfg, &ds);
    ck_assert_msg(st == DDPC_OK, "open: %s", ddpc_idx_last_error(ds));
    return ds;
}

/* Open must fail with want and a message holding the needles (NULL: none). */
static void open_fails(const char *images, const char *labels, ddpc_status_t want,
                       const char *n1, const char *n2, const char *n3)
{
    ddpc_idx_config_t cfg = DDPC_IDX_CONFIG_INIT;
    cfg.rank = 2;
    cfg.world = 4;
    ddpc_idx_t ds;
    ddpc_status_t st = ddpc_idx_open(path(images), path(labels), &cfg, &ds);
    const char *m = ddpc_idx_last_error(ds);
    ck_assert_msg(st == want, "open(%s, %s) -> %s, expected %s: %s", images, labels,
                  ddpc_strerror(st), ddpc_strerror(want), m);
    ck_assert_msg(strncmp(m, "ddpc[rank 2/4] data: ", 21) == 0, "prefix: %s", m);
    ck_assert_msg(strstr(m, n1) && (!n2 || strstr(m, n2)) && (!n3 || strstr(m, n3)),
                  "message lacks \"%s\" / \"%s\" / \"%s\": %s", n1, n2 ? n2 : "",
                  n3 ? n3 : "", m);
    ck_assert_uint_eq(ddpc_idx_count(ds), 0);
    if (getenv("DDPC_TEST_VERBOSE")) /* to read the messages as a user would */
        printf("%s\n", m);
    ddpc_idx_close(ds);
}

/* ------------------------------------------------------------------ idx */

START_TEST(reads_raw_and_gzip_alike)
{
    write_dataset(37, "");
    write_dataset(37, ".gz");
    ddpc_idx_t a = open_ok("images", "labels", NULL);
    ddpc_idx_t b = open_ok("images.gz", "labels.gz", NULL);
    ck_assert_uint_eq(ddpc_idx_count(a), 37);
    ck_assert_uint_eq(ddpc_idx_rows(a), ROWS);
    ck_assert_uint_eq(ddpc_idx_cols(a), COLS);
    ck_assert_uint_eq(ddpc_idx_dim(a), DIM);
    ck_assert_uint_eq(ddpc_idx_count(b), 37);
    ck_assert_mem_eq(ddpc_idx_pixels(a), ddpc_idx_pixels(b), 37 * DIM);
    ck_assert_mem_eq(ddpc_idx_labels(a), ddpc_idx_labels(b), 37);
    for (size_t i = 0; i < 37; i++) {
        REQUIRE_UINT(ddpc_idx_labels(a)[i], ==, i % 10);
        for (size_t k = 0; k < DIM; k++)
            REQUIRE_UINT(ddpc_idx_pixels(a)[i * DIM + k], ==, pix(i, k));
    }
    ck_assert_str_eq(ddpc_idx_last_error(a), "");
    ddpc_idx_close(a);
    ddpc_idx_close(b);
    ddpc_idx_close(NULL);
}
END_TEST

START_TEST(gather_normalizes)
{
    write_dataset(20, "");
    ddpc_idx_t ds = open_ok("images", "labels", NULL);
    size_t idx[3] = {19, 0, 19};
    float x[3 * DIM];
    uint8_t y[3];
    ck_assert_int_eq(ddpc_idx_gather(ds, idx, 3, x, y), DDPC_OK);
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(y[i], idx[i] % 10);
        for (size_t k = 0; k < DIM; k++)
            ck_assert_float_eq(x[i * DIM + k], (float)pix(idx[i], k) / 255.0f);
    }
    ddpc_idx_close(ds);
    /* mean/std: (p/255 - mean) / std */
    ddpc_idx_config_t cfg = DDPC_IDX_CONFIG_INIT;
    cfg.mean = 0.5f;
    cfg.std = 0.25f;
    ds = open_ok("images", "labels", &cfg);
    ck_assert_int_eq(ddpc_idx_gather(ds, idx, 3, x, NULL), DDPC_OK);
    for (size_t k = 0; k < DIM; k++)
        ck_assert_float_eq_tol(x[k], ((float)pix(19, k) / 255.0f - 0.5f) / 0.25f, 1e-6f);
    /* an index past the end */
    idx[1] = 20;
    ck_assert_int_eq(ddpc_idx_gather(ds, idx, 3, x, y), DDPC_ERR_INVALID);
    ck_assert_msg(strstr(ddpc_idx_last_error(ds), "index 20 (position 1 of 3)") &&
                      strstr(ddpc_idx_last_error(ds), "count 20"),
                  "%s", ddpc_idx_last_error(ds));
    ddpc_idx_close(ds);
}
END_TEST

START_TEST(default_paths_prefer_uncompressed)
{
    char im[512], lb[512];
    ck_assert_int_eq(ddpc_idx_default_paths(dir, "t10k", im, lb, sizeof im), DDPC_OK);
    ck_assert_str_eq(im, path("t10k-images-idx3-ubyte.gz"));
    ck_assert_str_eq(lb, path("t10k-labels-idx1-ubyte.gz"));
    uint32_t one = 1, d3[3] = {1, 1, 1};
    uint8_t zero = 0;
    write_idx("train-images-idx3-ubyte", 0x803, 3, d3, &zero, 1);
    write_idx("train-labels-idx1-ubyte", 0x801, 1, &one, &zero, 1);
    ck_assert_int_eq(ddpc_idx_default_paths(dir, "train", im, lb, sizeof im), DDPC_OK);
    ck_assert_str_eq(im, path("train-images-idx3-ubyte"));
    ck_assert_str_eq(lb, path("train-labels-idx1-ubyte"));
    ddpc_idx_t ds;
    ck_assert_int_eq(ddpc_idx_open(im, lb, NULL, &ds), DDPC_OK);
    ck_assert_uint_eq(ddpc_idx_count(ds), 1);
    ddpc_idx_close(ds);
    ck_assert_int_eq(ddpc_idx_default_paths(dir, "train", im, lb, 10), DDPC_ERR_INVALID);
    ck_assert_int_eq(ddpc_idx_default_paths(NULL, "train", im, lb, 10), DDPC_ERR_INVALID);
}
END_TEST

START_TEST(label_range_follows_num_classes)
{
    uint32_t n = 4, d3[3] = {4, 1, 2};
    uint8_t img[8] = {0}, lab[4] = {0, 3, 10, 1};
    write_idx("im", 0x803, 3, d3, img, 8);
    write_idx("lb", 0x801, 1, &n, lab, 4);
    open_fails("im", "lb", DDPC_ERR_FORMAT, "label 10 of sample 2 is out of range",
               "expected 0..9", "lb\"");
    ddpc_idx_config_t cfg = DDPC_IDX_CONFIG_INIT;
    cfg.num_classes = 11;
    ddpc_idx_close(open_ok("im", "lb", &cfg));
    cfg.num_classes = 0;
    ddpc_idx_t ds;
    ck_assert_int_eq(ddpc_idx_open(path("im"), path("lb"), &cfg, &ds), DDPC_ERR_INVALID);
    ck_assert_msg(strstr(ddpc_idx_last_error(ds), "num_classes 0"), "%s", ddpc_idx_last_error(ds));
    ddpc_idx_close(ds);
    cfg.num_classes = 10;
    cfg.std = 0.0f;
    ck_assert_int_eq(ddpc_idx_open(path("im"), path("lb"), &cfg, &ds), DDPC_ERR_INVALID);
    ddpc_idx_close(ds);
}
END_TEST

/* ------------------------------------------------------------------ idx: bad files */

START_TEST(missing_file)
{
    write_dataset(5, "");
    open_fails("nope-images", "labels", DDPC_ERR_IO, "cannot open idx3-ubyte images file",
               "nope-images\"", "No such file");
    open_fails("images", "nope-labels.gz", DDPC_ERR_IO, "idx1-ubyte labels", "nope-labels.gz",
               "No such file");
}
END_TEST

START_TEST(truncated_raw_and_gzip)
{
    uint32_t d3[3] = {5, ROWS, COLS}, n = 5;
    uint8_t data[5 * DIM] = {0};
    write_idx("short", 0x803, 3, d3, data, 4 * DIM + 3); /* one image and a bit missing */
    write_idx("short.gz", 0x803, 3, d3, data, 4 * DIM);
    write_idx("labels", 0x801, 1, &n, data, 5);
    write_idx("shortlabels", 0x801, 1, &n, data, 2);
    open_fails("short", "labels", DDPC_ERR_FORMAT, "short\" is truncated",
               "header says 5 images of 3x4 (60 bytes of data)", "file has 51");
    open_fails("short.gz", "labels", DDPC_ERR_FORMAT, "is truncated", "short.gz", "has 48");
    write_dataset(5, "");
    open_fails("images", "shortlabels", DDPC_ERR_FORMAT, "truncated", "5 labels", "has 2");
    /* a header that claims 2^31 - 1 images of 64x64 (8 TiB) over a few bytes
     * of data: refused as truncated, without allocating what it claims (the
     * fuzzer's first find: tests/fuzz/seeds/idx/regress-huge-header) */
    uint32_t huge[3] = {0x7fffffffu, 64, 64};
    write_idx("huge", 0x803, 3, huge, data, 40);
    open_fails("huge", "labels", DDPC_ERR_FORMAT, "huge\" is truncated",
               "header says 2147483647 images of 64x64", "the file has 40");
    /* a header cut short */
    write_idx("hdr", 0x803, 1, d3, data, 0);
    open_fails("hdr", "labels", DDPC_ERR_FORMAT, "hdr\" is truncated: 8 bytes",
               "16-byte header", NULL);
    /* a gzip stream cut in the middle: zlib's own error */
    write_dataset(500, ".gz");
    FILE *f = fopen(path("images.gz"), "rb");
    unsigned char buf[8192];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    f = fopen(path("cut.gz"), "wb");
    fwrite(buf, 1, len / 2, f);
    fclose(f);
    open_fails("cut.gz", "labels.gz", DDPC_ERR_FORMAT, "cut.gz", NULL, NULL);
    /* a gzip file whose CRC does not match */
    buf[len - 6] ^= 0xff;
    f = fopen(path("crc.gz"), "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    open_fails("crc.gz", "labels.gz", DDPC_ERR_FORMAT, "crc.gz", "incorrect data check", NULL);
}
END_TEST

START_TEST(wrong_magic_and_swapped)
{
    write_dataset(5, "");
    uint32_t d3[3] = {5, ROWS, COLS};
    uint8_t data[5 * DIM] = {0};
    write_idx("float", 0x00000d03, 3, d3, data, 5 * DIM);
    open_fails("float", "labels", DDPC_ERR_FORMAT, "magic number 0x00000d03",
               "expected 0x00000803 (idx3-ubyte images)", "not an idx file of this kind");
    open_fails("labels", "images", DDPC_ERR_FORMAT, "\"", "magic number 0x00000801",
               "swapped");
    /* a text file */
    FILE *f = fopen(path("text"), "w");
    fputs("hello, this is not an idx file at all\n", f);
    fclose(f);
    open_fails("images", "text", DDPC_ERR_FORMAT, "\"", "text\"", "expected 0x00000801");
}
END_TEST

START_TEST(count_mismatch_and_bad_dims)
{
    write_dataset(5, "");
    uint32_t four = 4, z3[3] = {5, 0, 4};
    uint8_t data[64] = {0};
    write_idx("labels4", 0x801, 1, &four, data, 4);
    open_fails("images", "labels4", DDPC_ERR_FORMAT, "has 5 images but", "labels4\" has 4 labels",
               "one label per image");
    write_idx("zero", 0x803, 3, z3, data, 0);
    open_fails("zero", "labels", DDPC_ERR_FORMAT, "header gives rows = 0", NULL, NULL);
    /* longer than the header says */
    uint32_t d3[3] = {5, ROWS, COLS};
    write_idx("long", 0x803, 3, d3, data, 5 * DIM + 1);
    open_fails("long", "labels", DDPC_ERR_FORMAT, "long\" is longer than its header says",
               NULL, NULL);
    ddpc_idx_t ds;
    ck_assert_int_eq(ddpc_idx_open(NULL, path("labels"), NULL, &ds), DDPC_ERR_INVALID);
    ck_assert_msg(strncmp(ddpc_idx_last_error(ds), "ddpc[rank ?] data: ", 19) == 0, "%s",
                  ddpc_idx_last_error(ds));
    size_t i = 0;
    ck_assert_int_eq(ddpc_idx_gather(ds, &i, 1, NULL, NULL), DDPC_ERR_STATE);
    ddpc_idx_close(ds);
}
END_TEST

/* ------------------------------------------------------------------ loader */

/* Run one epoch through a loader and a twin sampler: every batch must be the
 * twin's indices with their rows and labels. Returns the batch count. */
static size_t check_epoch(ddpc_loader_t ld, ddpc_sampler_t twin, ddpc_idx_t ds)
{
    size_t want[64], wn, batches = 0;
    float x[64 * DIM];
    ddpc_batch_t b;
    for (;;) {
        ck_assert_int_eq(ddpc_loader_next(ld, &b), DDPC_OK);
        ck_assert_int_eq(ddpc_sampler_next_batch(twin, want, &wn), DDPC_OK);
        ck_assert_uint_eq(b.n, wn);
        if (b.n == 0)
            break;
        batches++;
        ck_assert_mem_eq(b.idx, want, wn * sizeof *want);
        ck_assert_int_eq(ddpc_idx_gather(ds, want, wn, x, NULL), DDPC_OK);
        ck_assert_mem_eq(b.x, x, wn * DIM * sizeof *x);
        for (size_t i = 0; i < wn; i++)
            REQUIRE_UINT(b.y[i], ==, want[i] % 10);
        /* the state saved now counts this batch, not the one gathered ahead */
        ddpc_sampler_state_t a, t;
        ck_assert_int_eq(ddpc_loader_get_state(ld, &a), DDPC_OK);
        ck_assert_int_eq(ddpc_sampler_get_state(twin, &t), DDPC_OK);
        ck_assert_mem_eq(&a, &t, sizeof a);
    }
    ck_assert_int_eq(ddpc_loader_next(ld, &b), DDPC_OK); /* stays at the end */
    ck_assert_uint_eq(b.n, 0);
    return batches;
}

START_TEST(loader_matches_sampler)
{
    write_dataset(103, ".gz");
    ddpc_idx_t ds = open_ok("images.gz", "labels.gz", NULL);
    for (int prefetch = 0; prefetch <= 1; prefetch++)
        for (int rank = 0; rank < 3; rank++) {
            ddpc_sampler_config_t sc = {5, 1, 0};
            ddpc_sampler_t s, twin;
            ck_assert_int_eq(ddpc_sampler_create(103, rank, 3, 8, &sc, &s), DDPC_OK);
            ck_assert_int_eq(ddpc_sampler_create(103, rank, 3, 8, &sc, &twin), DDPC_OK);
            ddpc_loader_config_t lc = {prefetch};
            ddpc_loader_t ld;
            ck_assert_int_eq(ddpc_loader_create(ds, s, &lc, &ld), DDPC_OK);
            ck_assert_uint_eq(check_epoch(ld, twin, ds), 5); /* 35 per rank: 4 x 8 + 3 */
            for (uint64_t e = 1; e < 4; e++) {
                ck_assert_int_eq(ddpc_loader_set_epoch(ld, e), DDPC_OK);
                ddpc_sampler_set_epoch(twin, e);
                ck_assert_uint_eq(check_epoch(ld, twin, ds), 5);
            }
            /* set_epoch in the middle of an epoch drops the batch gathered ahead */
            ddpc_batch_t b;
            ck_assert_int_eq(ddpc_loader_next(ld, &b), DDPC_OK);
            ck_assert_int_eq(ddpc_loader_set_epoch(ld, 9), DDPC_OK);
            ddpc_sampler_set_epoch(twin, 9);
            check_epoch(ld, twin, ds);
            ck_assert(ddpc_loader_wait_seconds(ld) >= 0.0);
            ddpc_loader_destroy(ld);
            ddpc_sampler_destroy(s);
            ddpc_sampler_destroy(twin);
        }
    ddpc_loader_destroy(NULL);
    ddpc_idx_close(ds);
}
END_TEST

START_TEST(loader_resume)
{
    write_dataset(100, "");
    ddpc_idx_t ds = open_ok("images", "labels", NULL);
    ddpc_sampler_t s, twin;
    ck_assert_int_eq(ddpc_sampler_create(100, 1, 4, 3, NULL, &s), DDPC_OK);
    ck_assert_int_eq(ddpc_sampler_create(100, 1, 4, 3, NULL, &twin), DDPC_OK);
    ddpc_loader_t ld;
    ck_assert_int_eq(ddpc_loader_create(ds, s, NULL, &ld), DDPC_OK);
    ddpc_batch_t b;
    size_t want[3], wn;
    for (int k = 0; k < 4; k++) {
        ck_assert_int_eq(ddpc_loader_next(ld, &b), DDPC_OK);
        ddpc_sampler_next_batch(twin, want, &wn);
    }
    ddpc_sampler_state_t st;
    ck_assert_int_eq(ddpc_loader_get_state(ld, &st), DDPC_OK);
    ck_assert_uint_eq(st.consumed, 4 * 3 * 4);
    /* a refused state: the error, and the batch gathered ahead still comes next */
    ddpc_sampler_state_t bad = st;
    bad.dataset_size = 99;
    ck_assert_int_eq(ddpc_loader_resume(ld, &bad), DDPC_ERR_MISMATCH);
    ck_assert_msg(strstr(ddpc_loader_last_error(ld), "ddpc[rank 1/4] sampler: ") &&
                      strstr(ddpc_loader_last_error(ld), "99"),
                  "%s", ddpc_loader_last_error(ld));
    ck_assert_int_eq(ddpc_loader_next(ld, &b), DDPC_OK);
    ddpc_sampler_next_batch(twin, want, &wn);
    ck_assert_mem_eq(b.idx, want, 3 * sizeof *want);
    /* a fresh loader resumed from the state after 5 batches continues exactly */
    ck_assert_int_eq(ddpc_loader_get_state(ld, &st), DDPC_OK);
    ddpc_loader_destroy(ld);
    ddpc_sampler_destroy(s);
    ck_assert_int_eq(ddpc_sampler_create(100, 1, 4, 3, NULL, &s), DDPC_OK);
    ck_assert_int_eq(ddpc_loader_create(ds, s, NULL, &ld), DDPC_OK);
    ddpc_loader_next(ld, &b); /* whatever it had started on is dropped by resume */
    ck_assert_int_eq(ddpc_loader_resume(ld, &st), DDPC_OK);
    ck_assert_uint_eq(check_epoch(ld, twin, ds), 4); /* 25 per rank: 9 batches, 5 done */
    ddpc_loader_destroy(ld);
    ddpc_sampler_destroy(s);
    ddpc_sampler_destroy(twin);
    ddpc_idx_close(ds);
}
END_TEST

START_TEST(loader_bad_input)
{
    write_dataset(10, "");
    ddpc_idx_t ds = open_ok("images", "labels", NULL);
    ddpc_sampler_t s;
    ck_assert_int_eq(ddpc_sampler_create(11, 0, 2, 4, NULL, &s), DDPC_OK);
    ddpc_loader_t ld;
    ck_assert_int_eq(ddpc_loader_create(ds, s, NULL, &ld), DDPC_ERR_MISMATCH);
    const char *m = ddpc_loader_last_error(ld);
    ck_assert_msg(strncmp(m, "ddpc[rank 0/2] loader: ", 23) == 0 && strstr(m, "11 samples") &&
                      strstr(m, "has 10"),
                  "%s", m);
    ddpc_batch_t b;
    ck_assert_int_eq(ddpc_loader_next(ld, &b), DDPC_ERR_STATE);
    ddpc_loader_destroy(ld);
    ck_assert_int_eq(ddpc_loader_create(NULL, s, NULL, &ld), DDPC_ERR_INVALID);
    ddpc_loader_destroy(ld);
    ddpc_sampler_destroy(s);
    ddpc_idx_close(ds);
}
END_TEST

START_TEST(loader_many_small_epochs)
{
    /* the prefetch thread's handshake, hammered: 200 epochs of 1-sample batches */
    write_dataset(16, "");
    ddpc_idx_t ds = open_ok("images", "labels", NULL);
    ddpc_sampler_t s, twin;
    ck_assert_int_eq(ddpc_sampler_create(16, 0, 1, 1, NULL, &s), DDPC_OK);
    ck_assert_int_eq(ddpc_sampler_create(16, 0, 1, 1, NULL, &twin), DDPC_OK);
    ddpc_loader_t ld;
    ck_assert_int_eq(ddpc_loader_create(ds, s, NULL, &ld), DDPC_OK);
    for (uint64_t e = 0; e < 200; e++) {
        ck_assert_int_eq(ddpc_loader_set_epoch(ld, e), DDPC_OK);
        ddpc_sampler_set_epoch(twin, e);
        ck_assert_uint_eq(check_epoch(ld, twin, ds), 16);
    }
    ddpc_loader_destroy(ld);
    /* destroy right after create, while the first batch is being gathered: no hang */
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(ddpc_loader_create(ds, s, NULL, &ld), DDPC_OK);
        ddpc_loader_destroy(ld);
    }
    ddpc_sampler_destroy(s);
    ddpc_sampler_destroy(twin);
    ddpc_idx_close(ds);
}
END_TEST

static Suite *data_suite(void)
{
    Suite *s = suite_create("data");
    TCase *idx = tcase_create("idx");
    tcase_add_checked_fixture(idx, make_dir, remove_dir);
    tcase_add_test(idx, reads_raw_and_gzip_alike);
    tcase_add_test(idx, gather_normalizes);
    tcase_add_test(idx, default_paths_prefer_uncompressed);
    tcase_add_test(idx, label_range_follows_num_classes);
    suite_add_tcase(s, idx);
    TCase *bad = tcase_create("bad input");
    tcase_add_checked_fixture(bad, make_dir, remove_dir);
    tcase_add_test(bad, missing_file);
    tcase_add_test(bad, truncated_raw_and_gzip);
    tcase_add_test(bad, wrong_magic_and_swapped);
    tcase_add_test(bad, count_mismatch_and_bad_dims);
    suite_add_tcase(s, bad);
    TCase *ld = tcase_create("loader");
    tcase_add_checked_fixture(ld, make_dir, remove_dir);
    tcase_set_timeout(ld, 60);
    tcase_add_test(ld, loader_matches_sampler);
    tcase_add_test(ld, loader_resume);
    tcase_add_test(ld, loader_bad_input);
    tcase_add_test(ld, loader_many_small_epochs);
    suite_add_tcase(s, ld);
    return s;
}

CHECK_MAIN(data_suite)
