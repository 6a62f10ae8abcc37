/* SPDX-License-Identifier: BSD-3-Clause */
/* check_ckpt_names.c: a save's temporary file names (src/ckpt/names.c):
 * which are a checkpoint's, and which a save may remove with and without
 * the directory's lock. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include "checkmain.h"

int ck_tmp_is_stale(const char *name, const char *host, int exclusive);

START_TEST(not_a_temporary)
{
    static const char *const names[] = {"notes.h5.tmp", "ckpt-.h5.tmp", "ckpt-00000001.h5",
                                        "ckpt-00000001.h5.tmpx", "ckpt-1x.h5.tmp",
                                        "ckpt-00000001.h5.tmp.", "ckpt-00000001.h5.tmp.12",
                                        "ckpt-00000001.h5.tmp.-3.h", "xckpt-1.h5.tmp", "ddpc.lock"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        ck_assert_msg(!ck_tmp_is_stale(names[i], "h", 1), "%s taken for a temporary", names[i]);
}
END_TEST

START_TEST(under_the_lock_every_temporary_goes)
{
    ck_assert(ck_tmp_is_stale("ckpt-00000001.h5.tmp", "h", 1)); /* older ddpc's name */
    ck_assert(ck_tmp_is_stale("ckpt-00000001.h5.tmp.77.other", "h", 1));
    ck_assert(ck_tmp_is_stale("ckpt-00000001.h5.tmp.77.h", "h", 1));
}
END_TEST

START_TEST(without_the_lock_only_a_dead_writer_of_this_host)
{
    char name[300];
    ck_assert(!ck_tmp_is_stale("ckpt-00000001.h5.tmp", "h", 0)); /* whose? unknown */
    ck_assert(!ck_tmp_is_stale("ckpt-00000001.h5.tmp.77.other", "h", 0));
    snprintf(name, sizeof name, "ckpt-00000001.h5.tmp.%ld.h", (long)getpid());
    ck_assert(!ck_tmp_is_stale(name, "h", 0)); /* alive */
    pid_t p = fork();
    ck_assert_int_ge(p, 0);
    if (p == 0)
        _exit(0);
    ck_assert_int_eq(waitpid(p, NULL, 0), p);
    snprintf(name, sizeof name, "ckpt-00000001.h5.tmp.%ld.h", (long)p);
    ck_assert(ck_tmp_is_stale(name, "h", 0));
    ck_assert(!ck_tmp_is_stale(name, "h2", 0)); /* the same pid on another host */
}
END_TEST

static Suite *names_suite(void)
{
    Suite *s = suite_create("ckpt names");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, not_a_temporary);
    tcase_add_test(tc, under_the_lock_every_temporary_goes);
    tcase_add_test(tc, without_the_lock_only_a_dead_writer_of_this_host);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(names_suite)
