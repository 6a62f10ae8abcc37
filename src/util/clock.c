/* SPDX-License-Identifier: BSD-3-Clause */
/* clock.c: the monotonic clock every timeout and heartbeat reads. Bottom layer. */
#include "config.h"
#include "util.h"

#include <time.h>

double ddpc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
