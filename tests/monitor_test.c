/* SPDX-License-Identifier: BSD-3-Clause */
/* monitor_test.c: collectives that go wrong on purpose, for tests/monitor.sh
 * (the side channel: src/comm/monitor.c). Every rank prints what its call
 * returned, one line each.
 *   mismatch  rank 1 all-reduces 32 floats where the others reduce 16
 *             (run with DDPC_DEBUG=detail: every rank fails at once)
 *   late      rank LATE (argv[2], default size - 1) sleeps S s (argv[3],
 *             default 8) before the second all-reduce: with DDPC_TIMEOUT=2
 *             the others time out and name it; each rank says when it
 *             enters that all-reduce
 *   finalize  as late, but the ranks that time out call ddpc_finalize
 *             instead of ddpc_abort and say what it returned and how long
 *             it took (it must return at once, not wait for the collective)
 *   early     rank LATE finalizes and exits 0 after the first all-reduce:
 *             the others time out and name it as gone
 *   ok        three matching all-reduces (DDPC_DEBUG=detail must pass them)
 * Exit: 0 when every call succeeded, 3 on DDPC_ERR_MISMATCH, 4 on
 * DDPC_ERR_TIMEOUT (after ddpc_abort), 1 otherwise. */
#include "ddpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    ddpc_t rt;
    ddpc_config_t cfg = DDPC_CONFIG_INIT;
    if (ddpc_init(&cfg, &argc, &argv, &rt) != DDPC_OK) {
        fprintf(stderr, "monitor_test: %s\n", ddpc_init_error());
        return 1;
    }
    const char *mode = argc > 1 ? argv[1] : "ok";
    ddpc_comm_t c = ddpc_comm_world(rt);
    int rank = ddpc_comm_rank(c), size = ddpc_comm_size(c);
    int late = argc > 2 ? atoi(argv[2]) : size - 1;
    unsigned nap = argc > 3 ? (unsigned)atoi(argv[3]) : 8;
    printf("monitor_test: rank %d pid %d\n", rank, (int)getpid()); /* for the script's kill */
    fflush(stdout);
    float buf[64];
    for (int i = 0; i < 64; i++)
        buf[i] = (float)(rank + i);
    ddpc_status_t st = DDPC_OK;
    for (int k = 0; k < 3 && st == DDPC_OK; k++) {
        size_t n = 16;
        if (!strcmp(mode, "mismatch") && k == 1 && rank == 1)
            n = 32;
        if ((!strcmp(mode, "late") || !strcmp(mode, "finalize")) && k == 1 && rank == late)
            sleep(nap);
        if (k == 1) {
            printf("monitor_test: rank %d: entering #1\n", rank);
            fflush(stdout);
        }
        if (!strcmp(mode, "early") && k == 1 && rank == late) {
            printf("monitor_test: rank %d: leaving early\n", rank);
            fflush(stdout);
            ddpc_finalize(rt);
            return 0;
        }
        st = ddpc_allreduce(c, buf, buf, n, DDPC_F32, DDPC_SUM);
    }
    printf("monitor_test: rank %d: %s%s%s\n", rank, ddpc_strerror(st), st ? ": " : "",
           st ? ddpc_last_error(rt) : "");
    fflush(stdout);
    if (st == DDPC_ERR_TIMEOUT && !strcmp(mode, "finalize")) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        ddpc_status_t fs = ddpc_finalize(rt);
        clock_gettime(CLOCK_MONOTONIC, &b);
        printf("monitor_test: rank %d: finalize after the timeout: %s in %.1fs\n", rank,
               ddpc_strerror(fs), (double)(b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec));
        fflush(stdout);
        return 4;
    }
    if (st == DDPC_ERR_TIMEOUT)
        ddpc_abort(rt, 4, "monitor_test: ending the job after the timeout");
    ddpc_finalize(rt);
    return st == DDPC_OK ? 0 : st == DDPC_ERR_MISMATCH ? 3 : 1;
}
