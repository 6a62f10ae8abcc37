/* SPDX-License-Identifier: BSD-3-Clause */
/* check_core.c: the runtime core in one process: status strings, dtypes,
 * half-precision conversions, discovery from each environment source and its
 * errors, DDPC_* options. Each test runs in its own forked process (MPI is
 * initialized at most once per process). */
#include "ddpc.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "checkmain.h"

static const char *const launcher_vars[] = {
    "PMIX_NAMESPACE", "PMIX_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
    "SLURM_NODEID", "SLURM_STEP_ID", "SLURM_STEP_NUM_NODES", "PMI_RANK", "PMI_SIZE",
    "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "RANK", "WORLD_SIZE",
    "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "DDPC_TIMEOUT", "DDPC_LOG_LEVEL",
    "DDPC_BACKEND", NULL};

static void clean_env(void)
{
    for (int i = 0; launcher_vars[i]; i++)
        unsetenv(launcher_vars[i]);
}

START_TEST(status_strings)
{
    for (int s = 0; s < DDPC_STATUS_COUNT; s++) {
        ck_assert_ptr_nonnull(ddpc_strerror((ddpc_status_t)s));
        ck_assert_str_ne(ddpc_strerror((ddpc_status_t)s), "unknown status");
        for (int t = 0; t < s; t++)
            ck_assert_str_ne(ddpc_strerror((ddpc_status_t)s), ddpc_strerror((ddpc_status_t)t));
    }
    ck_assert_str_eq(ddpc_strerror(DDPC_OK), "success");
    ck_assert_str_eq(ddpc_strerror((ddpc_status_t)9999), "unknown status");
    ck_assert_str_eq(ddpc_source_name(DDPC_SOURCE_PMIX), "pmix");
}
END_TEST

START_TEST(dtypes)
{
    ck_assert_uint_eq(ddpc_dtype_size(DDPC_F32), 4);
    ck_assert_uint_eq(ddpc_dtype_size(DDPC_BF16), 2);
    ck_assert_uint_eq(ddpc_dtype_size(DDPC_I64), 8);
    ck_assert_uint_eq(ddpc_dtype_size((ddpc_dtype_t)99), 0);
    ck_assert_str_eq(ddpc_dtype_name(DDPC_F16), "float16");
}
END_TEST

START_TEST(half_round_trip_exhaustive)
{
    for (uint32_t h = 0; h < 65536; h++) {
        int f16_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        float f = ddpc_f16_to_f32((uint16_t)h);
        if (f16_nan)
            ck_assert(isnan(f));
        else
            ck_assert_uint_eq(ddpc_f32_to_f16(f), h);
        float g = ddpc_bf16_to_f32((uint16_t)h);
        if (isnan(g))
            ck_assert(isnan(ddpc_bf16_to_f32(ddpc_f32_to_bf16(g))));
        else
            ck_assert_uint_eq(ddpc_f32_to_bf16(g), h);
    }
}
END_TEST

START_TEST(half_rounding)
{
    /* ties go to even, overflow to infinity, tiny values to subnormals */
    ck_assert_float_eq(ddpc_f16_to_f32(ddpc_f32_to_f16(1.0f + 0x1p-11f)), 1.0f);
    ck_assert_float_eq(ddpc_f16_to_f32(ddpc_f32_to_f16(1.0f + 3 * 0x1p-11f)), 1.0f + 0x1p-9f);
    ck_assert_float_eq(ddpc_f16_to_f32(ddpc_f32_to_f16(65519.0f)), 65504.0f);
    ck_assert(isinf(ddpc_f16_to_f32(ddpc_f32_to_f16(65520.0f))));
    ck_assert_float_eq(ddpc_f16_to_f32(ddpc_f32_to_f16(0x1p-24f)), 0x1p-24f);
    ck_assert_float_eq(ddpc_f16_to_f32(ddpc_f32_to_f16(0x1p-25f)), 0.0f);
    ck_assert_float_eq(ddpc_f16_to_f32(ddpc_f32_to_f16(0x1.8p-25f)), 0x1p-24f);
    ck_assert_float_eq(ddpc_f16_to_f32(ddpc_f32_to_f16(-3 * 0x1p-24f)), -3 * 0x1p-24f);
    ck_assert_float_eq(ddpc_bf16_to_f32(ddpc_f32_to_bf16(1.0f + 0x1p-8f)), 1.0f);
    ck_assert_float_eq(ddpc_bf16_to_f32(ddpc_f32_to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
    ck_assert(isnan(ddpc_bf16_to_f32(ddpc_f32_to_bf16(NAN))));
}
END_TEST

START_TEST(single_process)
{
    clean_env();
    ddpc_t rt;
    ck_assert_int_eq(ddpc_init(NULL, NULL, NULL, &rt), DDPC_OK);
    const ddpc_world_t *w = ddpc_world(rt);
    ck_assert_int_eq(w->rank, 0);
    ck_assert_int_eq(w->size, 1);
    ck_assert_int_eq(w->local_size, 1);
    ck_assert_int_eq(w->num_nodes, 1);
    ck_assert_int_eq(w->source, DDPC_SOURCE_SINGLE);
    ck_assert_str_eq(ddpc_last_error(rt), "");
    ck_assert_int_eq(ddpc_finalize(rt), DDPC_OK);
    ck_assert_int_eq(ddpc_finalize(NULL), DDPC_OK);
}
END_TEST

START_TEST(torchrun_env)
{
    clean_env();
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("LOCAL_RANK", "0", 1);
    setenv("LOCAL_WORLD_SIZE", "1", 1);
    ddpc_t rt;
    ck_assert_int_eq(ddpc_init(NULL, NULL, NULL, &rt), DDPC_OK);
    ck_assert_int_eq(ddpc_world(rt)->source, DDPC_SOURCE_TORCHRUN);
    ddpc_finalize(rt);
}
END_TEST

/* init must fail with `want` and a message containing every needle. */
static void expect_init_error(ddpc_status_t want, const char *n1, const char *n2)
{
    ddpc_t rt;
    ddpc_status_t st = ddpc_init(NULL, NULL, NULL, &rt);
    ck_assert_int_eq(st, want);
    const char *m = ddpc_last_error(rt);
    ck_assert_msg(strstr(m, n1) && (!n2 || strstr(m, n2)), "message: %s", m);
    ck_assert_msg(strncmp(m, "ddpc[rank ", 10) == 0, "message lacks the rank prefix: %s", m);
    ddpc_finalize(rt);
}

START_TEST(rank_not_below_world_size)
{
    clean_env();
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "2", 1);
    expect_init_error(DDPC_ERR_LAUNCH, "RANK=3", "WORLD_SIZE=2");
}
END_TEST

START_TEST(malformed_launcher_values)
{
    clean_env();
    setenv("SLURM_STEP_ID", "0", 1);
    setenv("SLURM_PROCID", "x1", 1);
    setenv("SLURM_NTASKS", "2", 1);
    expect_init_error(DDPC_ERR_LAUNCH, "SLURM_PROCID=\"x1\"", "non-negative integer");
}
END_TEST

START_TEST(size_without_rank_partner)
{
    clean_env();
    setenv("PMI_RANK", "0", 1);
    expect_init_error(DDPC_ERR_LAUNCH, "PMI_RANK is set but PMI_SIZE is not", NULL);
}
END_TEST

START_TEST(launcher_and_mpi_disagree)
{
    /* the environment claims 4 ranks, MPI (a singleton here) says 1 */
    clean_env();
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "4", 1);
    expect_init_error(DDPC_ERR_LAUNCH, "torchrun says rank 1 of 4", "MPI_COMM_WORLD says rank 0 of 1");
}
END_TEST

START_TEST(bad_options)
{
    clean_env();
    setenv("DDPC_TIMEOUT", "soon", 1);
    expect_init_error(DDPC_ERR_INVALID, "DDPC_TIMEOUT=\"soon\"", "expected a number");
    setenv("DDPC_TIMEOUT", "30", 1);
    setenv("DDPC_LOG_LEVEL", "loud", 1);
    expect_init_error(DDPC_ERR_INVALID, "DDPC_LOG_LEVEL=\"loud\"", "error|warn|info|debug");
}
END_TEST

START_TEST(options_from_env_override_config)
{
    clean_env();
    setenv("DDPC_TIMEOUT", "2.5", 1);
    setenv("DDPC_LOG_LEVEL", "error", 1);
    ddpc_config_t cfg = DDPC_CONFIG_INIT;
    cfg.timeout_s = 99;
    ddpc_t rt;
    ck_assert_int_eq(ddpc_init(&cfg, NULL, NULL, &rt), DDPC_OK);
    ck_assert_double_eq(ddpc_config(rt)->timeout_s, 2.5);
    ck_assert_int_eq(ddpc_config(rt)->log_level, DDPC_LOG_ERROR);
    ddpc_finalize(rt);
}
END_TEST

static Suite *core_suite(void)
{
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, status_strings);
    tcase_add_test(tc, dtypes);
    tcase_add_test(tc, half_round_trip_exhaustive);
    tcase_add_test(tc, half_rounding);
    tcase_add_test(tc, single_process);
    tcase_add_test(tc, torchrun_env);
    tcase_add_test(tc, options_from_env_override_config);
    suite_add_tcase(s, tc);
    TCase *bad = tcase_create("bad input");
    tcase_add_test(bad, rank_not_below_world_size);
    tcase_add_test(bad, malformed_launcher_values);
    tcase_add_test(bad, size_without_rank_partner);
    tcase_add_test(bad, launcher_and_mpi_disagree);
    tcase_add_test(bad, bad_options);
    suite_add_tcase(s, bad);
    return s;
}

int main(void) { return run_suite(core_suite(), CK_FORK); /* one MPI_Init per test process */ }
