/* SPDX-License-Identifier: BSD-3-Clause */
/* mpi_sampler.c: the sampler and the loader under real MPI ranks. Each rank
 * draws its own shard; ddpc_allgather brings all shards to every rank, which
 * checks that they are disjoint (padding aside) and cover the dataset, that
 * all ranks saved the same state, and that a resume continues exactly.
 * With --fmnist DIR, each rank loads Fashion-MNIST and the ranks' label
 * histograms must add up to the dataset's (exit 77 when DIR lacks it). */
#include "ddpc_data.h"
#include "quiet_assert.h"
#include "mpitest.h"

#include <string.h>
#include <unistd.h>

static const char *fmnist_dir; /* --fmnist DIR */

/* Draw this rank's whole pass (or max_batches); returns the count. */
static size_t draw(ddpc_sampler_t s, size_t max_batches, int64_t *out)
{
    size_t idx[64], n, total = 0;
    for (size_t b = 0; b < max_batches; b++) {
        REQUIRE(ddpc_sampler_next_batch(s, idx, &n) == DDPC_OK, "rank %d: %s", T_rank,
                ddpc_sampler_last_error(s));
        if (!n)
            break;
        for (size_t i = 0; i < n; i++)
            out[total + i] = (int64_t)idx[i];
        total += n;
    }
    return total;
}

/* Every rank drew `mine` (count equal on all ranks, checked); gather them and
 * check: each index of [0, N) at most twice, the number of repeats (padding)
 * or of missing ones (drop_last) below the world size. */
static void check_union(const int64_t *mine, size_t count, size_t n, int drop)
{
    int64_t c = (int64_t)count, cmin, cmax;
    T_OK(ddpc_allreduce(T_comm, &c, &cmin, 1, DDPC_I64, DDPC_MIN));
    T_OK(ddpc_allreduce(T_comm, &c, &cmax, 1, DDPC_I64, DDPC_MAX));
    ck_assert_msg(cmin == cmax, "rank %d: ranks drew %lld to %lld samples", T_rank,
                  (long long)cmin, (long long)cmax);
    size_t total = count * (size_t)T_size;
    int64_t *all = malloc((total + 1) * sizeof *all);
    T_OK(ddpc_allgather(T_comm, mine, all, count, DDPC_I64));
    unsigned char *seen = calloc(n, 1);
    size_t distinct = 0;
    for (size_t i = 0; i < total; i++) {
        REQUIRE(all[i] >= 0 && (size_t)all[i] < n, "rank %d: index %lld out of range", T_rank,
                (long long)all[i]);
        REQUIRE(seen[all[i]] < 2, "rank %d: index %lld drawn 3 times", T_rank,
                (long long)all[i]);
        distinct += seen[all[i]]++ == 0;
    }
    if (drop) {
        ck_assert_uint_eq(distinct, total); /* disjoint */
        ck_assert_uint_lt(n - total, (size_t)T_size);
    } else {
        ck_assert_uint_eq(distinct, n); /* covers */
        ck_assert_uint_lt(total - n, (size_t)T_size);
    }
    free(seen);
    free(all);
}

START_TEST(shards_are_disjoint_and_cover)
{
    const size_t sizes[] = {(size_t)T_size, (size_t)T_size + 1, 97, 1000, 60000};
    for (size_t si = 0; si < 5; si++)
        for (int drop = 0; drop <= 1; drop++)
            for (int shuffle = 0; shuffle <= 1; shuffle++) {
                size_t n = sizes[si], b = si % 2 ? 1 : 32;
                ddpc_sampler_config_t cfg = {77, shuffle, drop};
                ddpc_sampler_t s;
                ck_assert_int_eq(ddpc_sampler_create(n, T_rank, T_size, b, &cfg, &s), DDPC_OK);
                int64_t *mine = malloc((n / (size_t)T_size + 1) * sizeof *mine);
                for (uint64_t e = 0; e < 2; e++) {
                    T_OK(ddpc_sampler_set_epoch(s, e));
                    size_t got = draw(s, SIZE_MAX, mine);
                    ck_assert_uint_eq(got, ddpc_sampler_num_samples(s));
                    check_union(mine, got, n, drop);
                }
                free(mine);
                ddpc_sampler_destroy(s);
            }
}
END_TEST

START_TEST(same_state_on_every_rank_and_exact_resume)
{
    size_t n = 1009, b = 16;
    ddpc_sampler_config_t cfg = {5, 1, 0};
    ddpc_sampler_t s, r;
    ck_assert_int_eq(ddpc_sampler_create(n, T_rank, T_size, b, &cfg, &s), DDPC_OK);
    T_OK(ddpc_sampler_set_epoch(s, 4));
    int64_t *mine = malloc((n + 64) * sizeof *mine);
    size_t first = draw(s, 3, mine);
    ddpc_sampler_state_t st;
    T_OK(ddpc_sampler_get_state(s, &st));
    /* the state is equal on every rank: compare against rank 0's */
    int64_t v[4] = {(int64_t)st.seed, (int64_t)st.epoch, (int64_t)st.consumed,
                    (int64_t)st.dataset_size}, v0[4];
    memcpy(v0, v, sizeof v);
    T_OK(ddpc_broadcast(T_comm, v0, 4, DDPC_I64, 0));
    ck_assert_mem_eq(v, v0, sizeof v);
    ck_assert_uint_eq(st.consumed, 3 * b * (size_t)T_size);
    /* a fresh sampler (a restarted job) resumes: both parts make one epoch */
    ck_assert_int_eq(ddpc_sampler_create(n, T_rank, T_size, b, &cfg, &r), DDPC_OK);
    T_OK(ddpc_sampler_resume(r, &st));
    size_t rest = draw(r, SIZE_MAX, mine + first);
    int64_t *check = malloc((n + 64) * sizeof *check);
    size_t rest_orig = draw(s, SIZE_MAX, check);
    ck_assert_uint_eq(rest, rest_orig);
    ck_assert_mem_eq(mine + first, check, rest * sizeof *check);
    check_union(mine, first + rest, n, 0);
    free(check);
    free(mine);
    ddpc_sampler_destroy(s);
    ddpc_sampler_destroy(r);
}
END_TEST

START_TEST(fmnist_loader_on_every_rank)
{
    char im[1024], lb[1024];
    T_OK(ddpc_idx_default_paths(fmnist_dir, "train", im, lb, sizeof im));
    ddpc_idx_config_t ic = DDPC_IDX_CONFIG_INIT;
    ic.rank = T_rank;
    ic.world = T_size;
    ddpc_idx_t ds;
    ddpc_status_t st = ddpc_idx_open(im, lb, &ic, &ds);
    ck_assert_msg(st == DDPC_OK, "%s", ddpc_idx_last_error(ds));
    ddpc_sampler_t s;
    ck_assert_int_eq(ddpc_sampler_create(ddpc_idx_count(ds), T_rank, T_size, 128, NULL, &s),
                     DDPC_OK);
    ddpc_loader_t ld;
    ck_assert_int_eq(ddpc_loader_create(ds, s, NULL, &ld), DDPC_OK);
    int64_t hist[10] = {0}, sum[10];
    ddpc_batch_t b;
    while (ddpc_loader_next(ld, &b) == DDPC_OK && b.n)
        for (size_t i = 0; i < b.n; i++)
            hist[b.y[i]]++;
    T_OK(ddpc_allreduce(T_comm, hist, sum, 10, DDPC_I64, DDPC_SUM));
    for (int c = 0; c < 10; c++) /* 60000 divides by 1, 2, 3, 4, 5, 6, 8: no padding */
        ck_assert_int_eq(sum[c], 6000);
    ddpc_loader_destroy(ld);
    ddpc_sampler_destroy(s);
    ddpc_idx_close(ds);
}
END_TEST

static Suite *sampler_mpi_suite(void)
{
    Suite *s = suite_create("sampler-mpi");
    TCase *tc = tcase_create("sampler");
    tcase_set_timeout(tc, 120);
    if (fmnist_dir) {
        tcase_add_test(tc, fmnist_loader_on_every_rank);
    } else {
        tcase_add_test(tc, shards_are_disjoint_and_cover);
        tcase_add_test(tc, same_state_on_every_rank_and_exact_resume);
    }
    suite_add_tcase(s, tc);
    return s;
}

/* MPI_TEST_MAIN's main, after the --fmnist argument and its skip. */
#define main mpi_test_main
MPI_TEST_MAIN(sampler_mpi_suite)
#undef main

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--fmnist") == 0) {
        fmnist_dir = argv[2];
        char im[1024], lb[1024];
        ddpc_idx_default_paths(fmnist_dir, "train", im, lb, sizeof im);
        if (access(im, R_OK) != 0) {
            printf("SKIP: Fashion-MNIST not found (%s)\n", im);
            return 77;
        }
    }
    return mpi_test_main(argc, argv);
}
