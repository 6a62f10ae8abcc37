/* SPDX-License-Identifier: BSD-3-Clause */
/* check_sampler.c: the sampler in one process, every rank simulated: golden
 * generator values, PyTorch's sharding written out by hand, properties over a
 * grid of sizes and world sizes, resume with the same and another world size,
 * and bad input. The idx reader and the loader are in check_data.c. */
#include "ddpc_sampler.h"

#include "quiet_assert.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>
#include "checkmain.h"

/* ------------------------------------------------------------------ helpers */

static ddpc_sampler_t make(size_t n, int rank, int world, size_t batch, uint64_t seed,
                           int shuffle, int drop_last)
{
    ddpc_sampler_config_t cfg = {seed, shuffle, drop_last};
    ddpc_sampler_t s;
    ddpc_status_t st = ddpc_sampler_create(n, rank, world, batch, &cfg, &s);
    ck_assert_msg(st == DDPC_OK, "create(n=%zu, rank %d/%d, batch %zu): %s", n, rank, world,
                  batch, ddpc_sampler_last_error(s));
    return s;
}

/* Draw up to max_batches batches (all if SIZE_MAX) into out, which has room;
 * returns the count of indices; checks that only the pass's last batch is short. */
static size_t draw(ddpc_sampler_t s, size_t max_batches, size_t *out)
{
    size_t total = 0, n, b = 0, batch = ddpc_sampler_batch_size(s);
    int short_seen = 0;
    while (b < max_batches) {
        REQUIRE(ddpc_sampler_next_batch(s, out + total, &n) == DDPC_OK, "%s",
                ddpc_sampler_last_error(s));
        if (n == 0)
            break;
        b++;
        REQUIRE(!short_seen, "a batch after a short one (batch size %zu)", batch);
        REQUIRE_UINT(n, <=, batch);
        short_seen = n < batch;
        total += n;
    }
    if (max_batches == SIZE_MAX) {
        ck_assert_int_eq(ddpc_sampler_next_batch(s, out, &n), DDPC_OK);
        ck_assert_uint_eq(n, 0); /* stays at the end */
    }
    return total;
}

static void expect_seq(const size_t *got, size_t n, const size_t *want, size_t wn,
                       const char *what)
{
    ck_assert_msg(n == wn, "%s: %zu indices, expected %zu", what, n, wn);
    for (size_t i = 0; i < n; i++)
        REQUIRE(got[i] == want[i], "%s: index %zu is %zu, expected %zu", what, i, got[i],
                want[i]);
}

/* The global order of a pass from all ranks' outputs: g[j*W + r] = rank r's j-th. */
static size_t *epoch_order(size_t n, int world, size_t batch, uint64_t seed, int shuffle,
                           int drop_last, uint64_t epoch, size_t *len)
{
    size_t per = drop_last ? n / (size_t)world : (n + (size_t)world - 1) / (size_t)world;
    size_t *g = malloc(per * (size_t)world * sizeof *g), *mine = malloc((per + 1) * sizeof *g);
    for (int r = 0; r < world; r++) {
        ddpc_sampler_t s = make(n, r, world, batch, seed, shuffle, drop_last);
        ck_assert_int_eq(ddpc_sampler_set_epoch(s, epoch), DDPC_OK);
        ck_assert_uint_eq(ddpc_sampler_num_samples(s), per);
        ck_assert_uint_eq(ddpc_sampler_num_batches(s), (per + batch - 1) / batch);
        ck_assert_uint_eq(draw(s, SIZE_MAX, mine), per);
        for (size_t j = 0; j < per; j++)
            g[j * (size_t)world + (size_t)r] = mine[j];
        ddpc_sampler_destroy(s);
    }
    free(mine);
    *len = per * (size_t)world;
    return g;
}

/* ------------------------------------------------------------------ generator */

START_TEST(generator_reference_vectors)
{
    /* Published vectors of the two primitives: xoshiro256** from the state
     * {1, 2, 3, 4}, and splitmix64 (seen through seeding: s[0] of seed x is
     * splitmix64's second output after mixing). */
    ddpc_rng_t r = {{1, 2, 3, 4}};
    ck_assert_uint_eq(ddpc_rng_next(&r), 11520u);
    ck_assert_uint_eq(ddpc_rng_next(&r), 0u);
    ck_assert_uint_eq(ddpc_rng_next(&r), 1509978240u);
    ck_assert_uint_eq(ddpc_rng_next(&r), 1215971899390074240u);
}
END_TEST

START_TEST(generator_golden)
{
    /* Computed once by tests/sampler_ref.py golden, an independent Python
     * implementation of doc/sampler.md: any change here breaks reproducibility
     * of every shuffled run. */
    static const uint64_t seed0[4] = {0xfb5405f7bd79c540u, 0x780c98e26cea5883u,
                                      0x2a146e0980febc66u, 0x4851477db8791fcau};
    static const uint64_t seed42[4] = {0x19e479e2aaa77bfbu, 0x5e3efe753be27527u,
                                       0xc3ed7125b780200au, 0x85b911e2152f876eu};
    static const uint64_t below42_3[8] = {0x1362b6c1e9849569u, 0x1a34c36f831fb5b3u,
                                          0x3fefafff59cf2a33u, 0x43ceaffd785098f0u,
                                          1u, 8u, 6u, 8u};
    static const size_t perm0[10] = {5, 3, 8, 2, 0, 6, 7, 1, 4, 9};
    static const size_t perm42[10] = {2, 5, 0, 9, 4, 7, 8, 6, 3, 1};
    static const size_t perm42e1[10] = {2, 7, 5, 4, 6, 3, 0, 9, 8, 1};
    ddpc_rng_t r;
    ddpc_rng_seed(&r, 0, 0);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(ddpc_rng_next(&r), seed0[i]);
    ddpc_rng_seed(&r, 42, 0);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(ddpc_rng_next(&r), seed42[i]);
    ddpc_rng_seed(&r, 42, 3);
    for (int i = 0; i < 4; i++)
        ck_assert_uint_eq(ddpc_rng_below(&r, (1ull << 63) + 1), below42_3[i]);
    for (int i = 4; i < 8; i++)
        ck_assert_uint_eq(ddpc_rng_below(&r, 10), below42_3[i]);
    size_t p[10];
    ddpc_permutation(0, 0, 10, p);
    expect_seq(p, 10, perm0, 10, "permutation(0, 0)");
    ddpc_permutation(42, 0, 10, p);
    expect_seq(p, 10, perm42, 10, "permutation(42, 0)");
    ddpc_permutation(42, 1, 10, p);
    expect_seq(p, 10, perm42e1, 10, "permutation(42, 1)");
}
END_TEST

START_TEST(generator_bounded_is_in_range_and_unbiased)
{
    ddpc_rng_t r;
    ddpc_rng_seed(&r, 7, 0);
    ck_assert_uint_eq(ddpc_rng_below(&r, 1), 0);
    /* bound 3 over 300000 draws: each value 100000 +- 5 sigma (sigma ~258) */
    long count[3] = {0, 0, 0};
    for (int i = 0; i < 300000; i++) {
        uint64_t v = ddpc_rng_below(&r, 3);
        REQUIRE_UINT(v, <, 3);
        count[v]++;
    }
    for (int v = 0; v < 3; v++)
        ck_assert_msg(labs(count[v] - 100000) < 1300, "value %d drawn %ld times", v, count[v]);
    /* a bound just above 2^63 rejects about half of the draws: still in range */
    for (int i = 0; i < 1000; i++)
        REQUIRE_UINT(ddpc_rng_below(&r, (1ull << 63) + 1), <, (1ull << 63) + 1);
    /* seed and stream do not alias the way seed + epoch would */
    ddpc_rng_t a, b;
    ddpc_rng_seed(&a, 1, 0);
    ddpc_rng_seed(&b, 0, 1);
    ck_assert_uint_ne(ddpc_rng_next(&a), ddpc_rng_next(&b));
}
END_TEST

/* ------------------------------------------------------------------ PyTorch semantics */

START_TEST(pytorch_by_hand)
{
    /* n=10, world=3, no shuffle. Padded: 0..9 then 0, 1; rank r takes [r::3]. */
    static const size_t pad[3][4] = {{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}};
    /* drop_last: truncated to 9 */
    static const size_t drop[3][3] = {{0, 3, 6}, {1, 4, 7}, {2, 5, 8}};
    /* seed 42, epoch 0: P = 2 5 0 9 4 7 8 6 3 1 (golden above), padded with 2 5 */
    static const size_t shuf[3][4] = {{2, 9, 8, 1}, {5, 4, 6, 2}, {0, 7, 3, 5}};
    size_t got[8];
    for (int r = 0; r < 3; r++) {
        ddpc_sampler_t s = make(10, r, 3, 3, 0, 0, 0);
        ck_assert_uint_eq(ddpc_sampler_num_samples(s), 4);
        ck_assert_uint_eq(ddpc_sampler_num_batches(s), 2); /* 3 + a short 1 */
        expect_seq(got, draw(s, SIZE_MAX, got), pad[r], 4, "n=10 W=3 padded");
        ddpc_sampler_destroy(s);
        s = make(10, r, 3, 3, 0, 0, 1);
        ck_assert_uint_eq(ddpc_sampler_num_samples(s), 3);
        expect_seq(got, draw(s, SIZE_MAX, got), drop[r], 3, "n=10 W=3 drop_last");
        ddpc_sampler_destroy(s);
        s = make(10, r, 3, 4, 42, 1, 0);
        expect_seq(got, draw(s, SIZE_MAX, got), shuf[r], 4, "n=10 W=3 seed 42");
        ddpc_sampler_destroy(s);
    }
    /* batches cut the rank's sequence: rank 0, batch 3 -> [0 3 6] [9] */
    ddpc_sampler_t s = make(10, 0, 3, 3, 0, 0, 0);
    size_t n;
    ck_assert_int_eq(ddpc_sampler_next_batch(s, got, &n), DDPC_OK);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(ddpc_sampler_next_batch(s, got, &n), DDPC_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(got[0], 9);
    ddpc_sampler_destroy(s);
}
END_TEST

/* ------------------------------------------------------------------ properties */

START_TEST(properties_over_a_grid)
{
    static const size_t sizes[] = {1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 13, 16, 17, 31, 32, 61, 97,
                                   100, 101, 257, 1009};
    static const uint64_t seeds[] = {0, 1, 42, 0xffffffffffffffffu};
    static const size_t batches[] = {1, 3, 7, 64};
    size_t cases = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t n = sizes[si];
        size_t *perm = malloc(n * sizeof *perm), *count = malloc(n * sizeof *count);
        for (int w = 1; w <= 8 && (size_t)w <= n; w++)
            for (int drop = 0; drop <= 1; drop++)
                for (int shuffle = 0; shuffle <= 1; shuffle++)
                    for (size_t ki = 0; ki < 4; ki++)
                        for (uint64_t e = 0; e < 3; e++) {
                            uint64_t seed = seeds[ki];
                            size_t b = batches[(ki + e) % 4], len;
                            size_t *g = epoch_order(n, w, b, seed, shuffle, drop, e, &len);
                            cases++;
                            /* agree across ranks: interleaving the ranks gives P (the
                             * permutation every rank computed), then P's start as padding */
                            if (shuffle)
                                ddpc_permutation(seed, e, n, perm);
                            else
                                for (size_t i = 0; i < n; i++)
                                    perm[i] = i;
                            size_t want = drop ? n / (size_t)w * (size_t)w
                                               : (n + (size_t)w - 1) / (size_t)w * (size_t)w;
                            ck_assert_uint_eq(len, want);
                            for (size_t q = 0; q < len; q++)
                                REQUIRE(g[q] == perm[q < n ? q : q - n],
                                              "n=%zu W=%d drop=%d seed=%llu epoch=%llu: global "
                                              "position %zu is %zu, expected %zu",
                                              n, w, drop, (unsigned long long)seed,
                                              (unsigned long long)e, q, g[q],
                                              perm[q < n ? q : q - n]);
                            /* cover and disjoint: each index once, the padding (< W) twice */
                            memset(count, 0, n * sizeof *count);
                            for (size_t q = 0; q < len; q++)
                                count[g[q]]++;
                            size_t once = 0, twice = 0;
                            for (size_t i = 0; i < n; i++) {
                                REQUIRE_UINT(count[i], <=, 2);
                                once += count[i] == 1;
                                twice += count[i] == 2;
                            }
                            if (drop) {
                                ck_assert_uint_eq(twice, 0);
                                ck_assert_uint_eq(once, len);
                                ck_assert_uint_lt(n - len, (size_t)w);
                            } else {
                                ck_assert_uint_eq(once + twice, n);
                                ck_assert_uint_eq(twice, len - n);
                                ck_assert_uint_lt(len - n, (size_t)w);
                            }
                            free(g);
                        }
        free(perm);
        free(count);
    }
    ck_assert_uint_gt(cases, 2000);
}
END_TEST

START_TEST(epochs_differ_seeds_repeat_shuffle_off_is_natural)
{
    size_t len, len2;
    /* the same seed gives the same result in a fresh sampler */
    size_t *a = epoch_order(1000, 4, 32, 5, 1, 0, 3, &len);
    size_t *b = epoch_order(1000, 4, 32, 5, 1, 0, 3, &len2);
    ck_assert_mem_eq(a, b, len * sizeof *a);
    /* another epoch, another seed: another order */
    size_t *c = epoch_order(1000, 4, 32, 5, 1, 0, 4, &len2);
    size_t *d = epoch_order(1000, 4, 32, 6, 1, 0, 3, &len2);
    size_t same_c = 0, same_d = 0;
    for (size_t i = 0; i < len; i++) {
        same_c += a[i] == c[i];
        same_d += a[i] == d[i];
    }
    ck_assert_uint_lt(same_c, 20); /* about 1 expected by chance */
    ck_assert_uint_lt(same_d, 20);
    /* shuffle off: the natural order, every epoch, whatever the seed */
    size_t *e = epoch_order(1000, 4, 32, 9, 0, 0, 7, &len2);
    for (size_t i = 0; i < len2; i++)
        ck_assert_uint_eq(e[i], i);
    /* set_epoch restarts an epoch: the same again */
    ddpc_sampler_t s = make(100, 1, 3, 5, 3, 1, 0);
    size_t x[40], y[40];
    ck_assert_int_eq(ddpc_sampler_set_epoch(s, 2), DDPC_OK);
    size_t nx = draw(s, 3, x);
    ck_assert_int_eq(ddpc_sampler_set_epoch(s, 2), DDPC_OK);
    ck_assert_uint_eq(ddpc_sampler_epoch(s), 2);
    expect_seq(y, draw(s, 3, y), x, nx, "set_epoch(2) twice");
    ddpc_sampler_destroy(s);
    free(a);
    free(b);
    free(c);
    free(d);
    free(e);
}
END_TEST

/* ------------------------------------------------------------------ resume */

/* Run world w for k batches on every rank, then continue from the state with
 * world w2 and batch b2 to the end of the epoch; check what the two parts
 * consumed against P, then that the next epoch is a normal one. */
static void check_world_change(size_t n, int w, size_t b, size_t k, int w2, size_t b2,
                               int drop, uint64_t seed)
{
    uint64_t epoch = 5;
    size_t *perm = malloc(n * sizeof *perm), *buf = malloc((n + 16) * sizeof *buf);
    size_t *count = calloc(n, sizeof *count);
    ddpc_permutation(seed, epoch, n, perm);
    ddpc_sampler_state_t st0 = {0}, st;
    size_t first = 0, nb = 0;
    for (int r = 0; r < w; r++) {
        ddpc_sampler_t s = make(n, r, w, b, seed, 1, drop);
        ddpc_sampler_set_epoch(s, epoch);
        nb = ddpc_sampler_num_batches(s);
        size_t got = draw(s, k, buf);
        for (size_t i = 0; i < got; i++)
            count[buf[i]]++;
        first += got;
        ck_assert_int_eq(ddpc_sampler_get_state(s, &st), DDPC_OK);
        if (r == 0)
            st0 = st;
        ck_assert_mem_eq(&st, &st0, sizeof st); /* every rank saves the same state */
        ddpc_sampler_destroy(s);
    }
    /* consumed: what all ranks drew, or the whole epoch after its last batch */
    ck_assert_uint_eq(st0.epoch, epoch);
    ck_assert_uint_eq(st0.consumed, k >= nb ? n : first);
    size_t c = (size_t)st0.consumed;
    /* the second part: P[c, N) each exactly once, then at most W2-1 padding */
    size_t second = 0, per = 0;
    for (int r = 0; r < w2; r++) {
        ddpc_sampler_t s = make(n, r, w2, b2, seed, 1, drop);
        ck_assert_int_eq(ddpc_sampler_resume(s, &st0), DDPC_OK);
        ck_assert_uint_eq(ddpc_sampler_epoch(s), epoch);
        if (r == 0)
            per = ddpc_sampler_num_samples(s);
        ck_assert_uint_eq(ddpc_sampler_num_samples(s), per);
        size_t got = draw(s, SIZE_MAX, buf);
        ck_assert_uint_eq(got, per);
        for (size_t i = 0; i < got; i++)
            count[buf[i]]++;
        second += got;
        ck_assert_int_eq(ddpc_sampler_get_state(s, &st), DDPC_OK);
        ck_assert_uint_eq(st.consumed, n); /* the epoch is over */
        /* the next epoch is a normal one of world w2 */
        ck_assert_int_eq(ddpc_sampler_set_epoch(s, epoch + 1), DDPC_OK);
        ddpc_sampler_t fresh = make(n, r, w2, b2, seed, 1, drop);
        ddpc_sampler_set_epoch(fresh, epoch + 1);
        size_t *x = malloc((n + 16) * sizeof *x);
        size_t nx = draw(fresh, SIZE_MAX, x);
        expect_seq(buf, draw(s, SIZE_MAX, buf), x, nx, "the epoch after a resume");
        free(x);
        ddpc_sampler_destroy(fresh);
        ddpc_sampler_destroy(s);
    }
    /* Both parts together: P in order, each position once, then either the
     * dropped tail (fewer than a world) unused or the padding P[0, extra) twice. */
    size_t tail = n - c, used = first + second;
    if (drop) {
        ck_assert_uint_eq(second, tail / (size_t)w2 * (size_t)w2);
        ck_assert_uint_le(used, n);
        for (size_t i = 0; i < n; i++)
            REQUIRE(count[perm[i]] == (i < used), "n=%zu %d->%d k=%zu drop: P[%zu] = %zu "
                    "used %zu times", n, w, w2, k, i, perm[i], count[perm[i]]);
    } else {
        ck_assert_uint_eq(second, (tail + (size_t)w2 - 1) / (size_t)w2 * (size_t)w2);
        ck_assert_uint_ge(used, n);
        size_t extra = used - n;
        ck_assert_uint_lt(extra, (size_t)(w > w2 ? w : w2));
        for (size_t i = 0; i < n; i++)
            REQUIRE(count[perm[i]] == 1 + (i < extra), "n=%zu %d->%d k=%zu: P[%zu] = %zu "
                    "used %zu times", n, w, w2, k, i, perm[i], count[perm[i]]);
    }
    free(perm);
    free(buf);
    free(count);
}

START_TEST(resume_same_world_is_exact)
{
    static const size_t sizes[] = {8, 10, 97, 1000};
    for (size_t si = 0; si < 4; si++)
        for (int w = 1; w <= 5; w++)
            for (int drop = 0; drop <= 1; drop++)
                for (size_t b = 1; b <= 9; b += 4) {
                    size_t n = sizes[si];
                    for (int r = 0; r < w; r++) {
                        ddpc_sampler_t a = make(n, r, w, b, 11, 1, drop);
                        ddpc_sampler_set_epoch(a, 2);
                        size_t nb = ddpc_sampler_num_batches(a), k = nb / 2;
                        size_t *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
                        draw(a, k, x);
                        ddpc_sampler_state_t st;
                        ddpc_sampler_get_state(a, &st);
                        /* a restarted process: a fresh sampler, resumed */
                        ddpc_sampler_t c = make(n, r, w, b, 11, 1, drop);
                        ck_assert_int_eq(ddpc_sampler_resume(c, &st), DDPC_OK);
                        ck_assert_uint_eq(ddpc_sampler_num_batches(c), nb - k);
                        size_t ny = draw(c, SIZE_MAX, y);
                        expect_seq(y, ny, x, draw(a, SIZE_MAX, x), "resume, same world");
                        ddpc_sampler_destroy(a);
                        ddpc_sampler_destroy(c);
                        free(x);
                        free(y);
                    }
                }
}
END_TEST

START_TEST(resume_by_hand)
{
    /* n=10, no shuffle, W=2, B=2: rank0 0 2 | 4 6 | 8, rank1 1 3 | 5 7 | 9.
     * After one batch each, consumed = 4. Resume the tail 4..9 with W=3:
     * rank0 4 7, rank1 5 8, rank2 6 9; with W=4 (padded by 0 1): 4 8, 5 9, 6 0, 7 1. */
    static const size_t w3[3][2] = {{4, 7}, {5, 8}, {6, 9}};
    static const size_t w4[4][2] = {{4, 8}, {5, 9}, {6, 0}, {7, 1}};
    ddpc_sampler_t s = make(10, 1, 2, 2, 0, 0, 0);
    size_t got[4], n;
    ck_assert_int_eq(ddpc_sampler_next_batch(s, got, &n), DDPC_OK);
    ddpc_sampler_state_t st;
    ck_assert_int_eq(ddpc_sampler_get_state(s, &st), DDPC_OK);
    ck_assert_uint_eq(st.consumed, 4);
    ck_assert_uint_eq(st.dataset_size, 10);
    ddpc_sampler_destroy(s);
    for (int r = 0; r < 3; r++) {
        s = make(10, r, 3, 2, 0, 0, 0);
        ck_assert_int_eq(ddpc_sampler_resume(s, &st), DDPC_OK);
        expect_seq(got, draw(s, SIZE_MAX, got), w3[r], 2, "tail over 3 ranks");
        ddpc_sampler_destroy(s);
    }
    for (int r = 0; r < 4; r++) {
        s = make(10, r, 4, 2, 0, 0, 0);
        ck_assert_int_eq(ddpc_sampler_resume(s, &st), DDPC_OK);
        expect_seq(got, draw(s, SIZE_MAX, got), w4[r], 2, "tail over 4 ranks");
        ddpc_sampler_destroy(s);
    }
}
END_TEST

START_TEST(resume_other_world)
{
    static const int worlds[][2] = {{4, 2}, {2, 3}, {3, 8}, {8, 1}, {5, 7}, {1, 4}, {6, 6}};
    static const size_t sizes[] = {8, 61, 100, 1009};
    for (size_t wi = 0; wi < sizeof worlds / sizeof *worlds; wi++)
        for (size_t si = 0; si < 4; si++)
            for (int drop = 0; drop <= 1; drop++)
                for (size_t k = 0; k <= 3; k++) {
                    if (sizes[si] < (size_t)worlds[wi][0] || sizes[si] < (size_t)worlds[wi][1])
                        continue;
                    check_world_change(sizes[si], worlds[wi][0], 4, k, worlds[wi][1], 3, drop,
                                       17 + k);
                }
}
END_TEST

START_TEST(resume_twice_changes_world_twice)
{
    /* 4 ranks for 3 batches, 3 ranks for 2, then 2 ranks to the end:
     * P used exactly once, padding aside. */
    size_t n = 211, perm[211], count[211] = {0}, buf[300];
    ddpc_permutation(9, 0, n, perm);
    ddpc_sampler_state_t st = {9, 0, 0, 211, 1, 0}, next = st;
    const int worlds[3] = {4, 3, 2};
    const size_t steps[3] = {3, 2, SIZE_MAX};
    size_t used = 0;
    for (int phase = 0; phase < 3; phase++) {
        for (int r = 0; r < worlds[phase]; r++) {
            ddpc_sampler_t s = make(n, r, worlds[phase], 5, 9, 1, 0);
            ck_assert_int_eq(ddpc_sampler_resume(s, &st), DDPC_OK);
            size_t got = draw(s, steps[phase], buf);
            used += got;
            for (size_t i = 0; i < got; i++)
                count[buf[i]]++;
            ddpc_sampler_get_state(s, &next);
            ddpc_sampler_destroy(s);
        }
        st = next;
    }
    ck_assert_uint_eq(st.consumed, n);
    size_t extra = used - n;
    ck_assert_uint_lt(extra, 2);
    for (size_t i = 0; i < n; i++)
        REQUIRE_UINT(count[perm[i]], ==, 1 + (i < extra));
}
END_TEST

START_TEST(resume_at_the_end_and_the_start)
{
    ddpc_sampler_t s = make(50, 0, 4, 8, 1, 1, 1);
    ddpc_sampler_state_t st = {1, 3, 50, 50, 1, 1};
    ck_assert_int_eq(ddpc_sampler_resume(s, &st), DDPC_OK);
    ck_assert_uint_eq(ddpc_sampler_num_batches(s), 0);
    size_t idx[8], n = 99;
    ck_assert_int_eq(ddpc_sampler_next_batch(s, idx, &n), DDPC_OK);
    ck_assert_uint_eq(n, 0);
    /* drop_last with fewer than W left: nothing, and the epoch counts as done */
    st.consumed = 47;
    ck_assert_int_eq(ddpc_sampler_resume(s, &st), DDPC_OK);
    ck_assert_uint_eq(ddpc_sampler_num_batches(s), 0);
    ddpc_sampler_state_t now;
    ddpc_sampler_get_state(s, &now);
    ck_assert_uint_eq(now.consumed, 50);
    /* consumed 0 is set_epoch */
    st.consumed = 0;
    ck_assert_int_eq(ddpc_sampler_resume(s, &st), DDPC_OK);
    ck_assert_uint_eq(ddpc_sampler_num_samples(s), 12);
    ddpc_sampler_destroy(s);
}
END_TEST

/* ------------------------------------------------------------------ bad input */

START_TEST(bad_create)
{
    ddpc_sampler_t s;
    ck_assert_int_eq(ddpc_sampler_create(3, 1, 4, 8, NULL, &s), DDPC_ERR_INVALID);
    const char *m = ddpc_sampler_last_error(s);
    ck_assert_msg(strstr(m, "ddpc[rank 1/4] sampler: ") == m, "prefix: %s", m);
    ck_assert_msg(strstr(m, "3 samples") && strstr(m, "world size 4"), "message: %s", m);
    size_t idx[8], n;
    ck_assert_int_eq(ddpc_sampler_next_batch(s, idx, &n), DDPC_ERR_STATE);
    ck_assert_int_eq(ddpc_sampler_set_epoch(s, 1), DDPC_ERR_STATE);
    ddpc_sampler_destroy(s);
    ck_assert_int_eq(ddpc_sampler_create(10, 4, 4, 8, NULL, &s), DDPC_ERR_INVALID);
    ck_assert_msg(strstr(ddpc_sampler_last_error(s), "rank 4 of world size 4"), "%s",
                  ddpc_sampler_last_error(s));
    ddpc_sampler_destroy(s);
    ck_assert_int_eq(ddpc_sampler_create(10, 0, 1, 0, NULL, &s), DDPC_ERR_INVALID);
    ck_assert_msg(strstr(ddpc_sampler_last_error(s), "batch size 0"), "%s",
                  ddpc_sampler_last_error(s));
    ddpc_sampler_destroy(s);
    ck_assert_int_eq(ddpc_sampler_create(0, 0, 1, 1, NULL, &s), DDPC_ERR_INVALID);
    ddpc_sampler_destroy(s);
    ck_assert_int_eq(ddpc_sampler_create(SIZE_MAX / 4, 0, 1, 1, NULL, &s), DDPC_ERR_NOMEM);
    ck_assert_msg(strstr(ddpc_sampler_last_error(s), "cannot allocate the permutation"), "%s",
                  ddpc_sampler_last_error(s));
    ddpc_sampler_destroy(s);
    ck_assert_int_eq(ddpc_sampler_create(10, 0, 1, 1, NULL, NULL), DDPC_ERR_INVALID);
    ddpc_sampler_destroy(NULL);
}
END_TEST

START_TEST(bad_resume)
{
    ddpc_sampler_t s = make(100, 2, 3, 4, 7, 1, 0);
    size_t idx[4], n;
    ddpc_sampler_next_batch(s, idx, &n);
    ddpc_sampler_state_t before, st = {7, 1, 10, 60000, 1, 0};
    ddpc_sampler_get_state(s, &before);
    ck_assert_int_eq(ddpc_sampler_resume(s, &st), DDPC_ERR_MISMATCH);
    const char *m = ddpc_sampler_last_error(s);
    ck_assert_msg(strstr(m, "ddpc[rank 2/3] sampler: ") == m && strstr(m, "60000") &&
                      strstr(m, "100"), "message: %s", m);
    st.dataset_size = 100;
    st.seed = 8;
    ck_assert_int_eq(ddpc_sampler_resume(s, &st), DDPC_ERR_MISMATCH);
    ck_assert_msg(strstr(ddpc_sampler_last_error(s), "seed 8"), "%s", ddpc_sampler_last_error(s));
    st.seed = 7;
    st.drop_last = 1;
    ck_assert_int_eq(ddpc_sampler_resume(s, &st), DDPC_ERR_MISMATCH);
    st.drop_last = 0;
    st.consumed = 101;
    ck_assert_int_eq(ddpc_sampler_resume(s, &st), DDPC_ERR_INVALID);
    ck_assert_msg(strstr(ddpc_sampler_last_error(s), "consumed 101"), "%s",
                  ddpc_sampler_last_error(s));
    /* a refused state leaves the position alone */
    ddpc_sampler_state_t after;
    ddpc_sampler_get_state(s, &after);
    ck_assert_mem_eq(&before, &after, sizeof before);
    /* without shuffle the seed does not matter */
    ddpc_sampler_t t = make(100, 0, 3, 4, 1, 0, 0);
    ddpc_sampler_state_t ns = {2, 0, 30, 100, 0, 0};
    ck_assert_int_eq(ddpc_sampler_resume(t, &ns), DDPC_OK);
    ck_assert_int_eq(ddpc_sampler_next_batch(t, NULL, &n), DDPC_ERR_INVALID);
    ddpc_sampler_destroy(t);
    ddpc_sampler_destroy(s);
}
END_TEST

static Suite *sampler_suite(void)
{
    Suite *s = suite_create("sampler");
    TCase *gen = tcase_create("generator");
    tcase_add_test(gen, generator_reference_vectors);
    tcase_add_test(gen, generator_golden);
    tcase_add_test(gen, generator_bounded_is_in_range_and_unbiased);
    suite_add_tcase(s, gen);
    TCase *core = tcase_create("core");
    tcase_set_timeout(core, 60);
    tcase_add_test(core, pytorch_by_hand);
    tcase_add_test(core, properties_over_a_grid);
    tcase_add_test(core, epochs_differ_seeds_repeat_shuffle_off_is_natural);
    suite_add_tcase(s, core);
    TCase *res = tcase_create("resume");
    tcase_set_timeout(res, 60);
    tcase_add_test(res, resume_same_world_is_exact);
    tcase_add_test(res, resume_by_hand);
    tcase_add_test(res, resume_other_world);
    tcase_add_test(res, resume_twice_changes_world_twice);
    tcase_add_test(res, resume_at_the_end_and_the_start);
    suite_add_tcase(s, res);
    TCase *bad = tcase_create("bad input");
    tcase_add_test(bad, bad_create);
    tcase_add_test(bad, bad_resume);
    suite_add_tcase(s, bad);
    return s;
}

CHECK_MAIN(sampler_suite)
