/* SPDX-License-Identifier: BSD-3-Clause */
/* checkmain.h: the main of a single-process Check suite. The exit status is
 * 1 when a test failed (never a count: 77 would read as "skipped" to
 * automake), 0 otherwise. Multi-rank suites use mpitest.h's MPI_TEST_MAIN. */
#ifndef DDPC_CHECKMAIN_H
#define DDPC_CHECKMAIN_H

#include <check.h>

/* Run s (fork: CK_FORK, CK_NOFORK, or CK_FORK_GETENV for CK_FORK's
 * environment variable, Check's default) and free it. */
static inline int run_suite(Suite *s, enum fork_status fork)
{
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, fork);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}

#define CHECK_MAIN(suite_fn)                                                                   \
    int main(void) { return run_suite(suite_fn(), CK_FORK_GETENV); }

#endif
