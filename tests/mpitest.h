/* SPDX-License-Identifier: BSD-3-Clause */
/* mpitest.h: a Check runner for multi-rank tests. One ddpc runtime for the
 * whole program (Check runs without fork: CK_FORK=no), assertions that name
 * the rank, and an exit status that is non-zero on every rank when any rank
 * failed a test. */
#ifndef DDPC_MPITEST_H
#define DDPC_MPITEST_H

#include "ddpc.h"
#include "testutil.h"

#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static ddpc_t T_rt;       /* the runtime of this test program */
static ddpc_comm_t T_comm; /* its world communicator */
static int T_rank, T_size;

/* st must be DDPC_OK; otherwise fail with the runtime's message. */
#define T_OK(call)                                                                             \
    do {                                                                                       \
        ddpc_status_t st_ = (call);                                                            \
        ck_assert_msg(st_ == DDPC_OK, "rank %d: %s -> %s: %s", T_rank, #call,                  \
                      ddpc_strerror(st_), ddpc_last_error(T_rt));                              \
    } while (0)

/* main() for a multi-rank Check program: suite_fn builds the suite. */
#define MPI_TEST_MAIN(suite_fn)                                                                \
    int main(int argc, char **argv)                                                            \
    {                                                                                          \
        if (ddpc_init(NULL, &argc, &argv, &T_rt) != DDPC_OK) {                                 \
            fprintf(stderr, "%s\n", ddpc_last_error(T_rt));                                    \
            return 99;                                                                         \
        }                                                                                      \
        T_comm = ddpc_comm_world(T_rt);                                                        \
        T_rank = ddpc_world(T_rt)->rank;                                                       \
        T_size = ddpc_world(T_rt)->size;                                                       \
        SRunner *sr = srunner_create(suite_fn());                                              \
        srunner_set_fork_status(sr, CK_NOFORK);                                                \
        srunner_run_all(sr, T_rank == 0 ? CK_NORMAL : CK_SILENT);                              \
        int32_t nf = srunner_ntests_failed(sr);                                                \
        if (nf)                                                                                \
            srunner_print(sr, CK_NORMAL);                                                      \
        srunner_free(sr);                                                                      \
        int32_t any = nf;                                                                      \
        if (ddpc_allreduce(T_comm, &nf, &any, 1, DDPC_I32, DDPC_MAX) != DDPC_OK)               \
            any = 1;                                                                           \
        ddpc_finalize(T_rt);                                                                   \
        return any ? 1 : 0;                                                                    \
    }

#endif
