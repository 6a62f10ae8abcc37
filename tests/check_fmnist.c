/* SPDX-License-Identifier: BSD-3-Clause */
/* check_fmnist.c: the idx reader and the loader on the real Fashion-MNIST
 * files (DDPC_FMNIST_DIR, default /usr/share/datasets/fashion-mnist):
 * counts, shapes, label histograms, pixel range and mean, and one epoch of 4
 * simulated ranks covering the train set once. Skipped (exit 77, with the
 * reason) when the files are not there. */
#include "ddpc_data.h"

#include "quiet_assert.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "checkmain.h"

static const char *data_dir;
static ddpc_idx_t train, test; /* opened once, before the tests fork */

static ddpc_idx_t open_split(const char *split)
{
    char im[1024], lb[1024];
    ddpc_idx_t ds;
    if (ddpc_idx_default_paths(data_dir, split, im, lb, sizeof im) != DDPC_OK ||
        ddpc_idx_open(im, lb, NULL, &ds) != DDPC_OK) {
        fprintf(stderr, "%s\n", ddpc_idx_last_error(ds));
        ddpc_idx_close(ds);
        return NULL;
    }
    return ds;
}

static void check_split(ddpc_idx_t ds, size_t count, size_t per_class, uint8_t first_label,
                        double mean)
{
    ck_assert_ptr_nonnull(ds);
    ck_assert_uint_eq(ddpc_idx_count(ds), count);
    ck_assert_uint_eq(ddpc_idx_rows(ds), 28);
    ck_assert_uint_eq(ddpc_idx_cols(ds), 28);
    ck_assert_uint_eq(ddpc_idx_dim(ds), 784);
    size_t hist[10] = {0};
    const uint8_t *y = ddpc_idx_labels(ds);
    for (size_t i = 0; i < count; i++)
        hist[y[i]]++; /* labels < 10 was checked at open */
    for (int c = 0; c < 10; c++)
        ck_assert_msg(hist[c] == per_class, "class %d has %zu samples, expected %zu", c, hist[c],
                      per_class);
    ck_assert_uint_eq(y[0], first_label);
    /* features of every sample: in [0, 1], both ends reached, mean as published */
    enum { CHUNK = 500 };
    size_t idx[CHUNK];
    float *x = malloc(CHUNK * 784 * sizeof *x);
    float lo = 1e9f, hi = -1e9f;
    double sum = 0;
    for (size_t i0 = 0; i0 < count; i0 += CHUNK) {
        for (size_t i = 0; i < CHUNK; i++)
            idx[i] = i0 + i;
        REQUIRE(ddpc_idx_gather(ds, idx, CHUNK, x, NULL) == DDPC_OK, "%s",
                ddpc_idx_last_error(ds));
        for (size_t k = 0; k < CHUNK * 784; k++) {
            lo = x[k] < lo ? x[k] : lo;
            hi = x[k] > hi ? x[k] : hi;
            sum += x[k];
        }
    }
    free(x);
    ck_assert_float_eq(lo, 0.0f);
    ck_assert_float_eq(hi, 1.0f);
    ck_assert_double_eq_tol(sum / ((double)count * 784), mean, 1e-6);
}

START_TEST(train_split)
{
    check_split(train, 60000, 6000, 9, 0.2860406);
}
END_TEST

START_TEST(test_split)
{
    check_split(test, 10000, 1000, 9, 0.2868493);
}
END_TEST

START_TEST(four_ranks_cover_the_train_set_once)
{
    /* 60000 = 4 x 15000: no padding, so every sample once and 6000 per class */
    char *seen = calloc(60000, 1);
    size_t hist[10] = {0}, batches = 0;
    double wait = 0;
    for (int r = 0; r < 4; r++) {
        ddpc_sampler_config_t sc = {1234, 1, 0};
        ddpc_sampler_t s;
        ddpc_loader_t ld;
        ck_assert_int_eq(ddpc_sampler_create(60000, r, 4, 256, &sc, &s), DDPC_OK);
        ck_assert_int_eq(ddpc_sampler_set_epoch(s, 3), DDPC_OK);
        ck_assert_int_eq(ddpc_loader_create(train, s, NULL, &ld), DDPC_OK);
        ddpc_batch_t b;
        while (ddpc_loader_next(ld, &b) == DDPC_OK && b.n) {
            batches++;
            for (size_t i = 0; i < b.n; i++) {
                REQUIRE(!seen[b.idx[i]], "sample %zu twice", b.idx[i]);
                seen[b.idx[i]] = 1;
                hist[b.y[i]]++;
                REQUIRE(b.x[i * 784 + 400] == ddpc_idx_pixels(train)[b.idx[i] * 784 + 400] / 255.0f,
                        "sample %zu: feature 400 is not pixel 400 / 255", b.idx[i]);
            }
        }
        wait += ddpc_loader_wait_seconds(ld);
        ddpc_loader_destroy(ld);
        ddpc_sampler_destroy(s);
    }
    for (int c = 0; c < 10; c++)
        ck_assert_uint_eq(hist[c], 6000);
    ck_assert_uint_eq(batches, 4 * 59); /* 15000 = 58 x 256 + 152 */
    free(seen);
    printf("4 ranks x 59 batches of 256 from Fashion-MNIST train: %.3f s waiting in all\n", wait);
}
END_TEST

static Suite *fmnist_suite(void)
{
    Suite *s = suite_create("fashion-mnist");
    TCase *tc = tcase_create("real files");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, train_split);
    tcase_add_test(tc, test_split);
    tcase_add_test(tc, four_ranks_cover_the_train_set_once);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    data_dir = getenv("DDPC_FMNIST_DIR");
    if (!data_dir || !*data_dir)
        data_dir = "/usr/share/datasets/fashion-mnist";
    char im[1024], lb[1024];
    ddpc_idx_default_paths(data_dir, "train", im, lb, sizeof im);
    if (access(im, R_OK) != 0) {
        printf("SKIP: Fashion-MNIST not found (%s): set DDPC_FMNIST_DIR to the directory of "
               "train-images-idx3-ubyte.gz and the other three files\n", im);
        return 77;
    }
    train = open_split("train");
    test = open_split("t10k");
    int nf = run_suite(fmnist_suite(), CK_FORK_GETENV);
    ddpc_idx_close(train);
    ddpc_idx_close(test);
    return nf;
}
