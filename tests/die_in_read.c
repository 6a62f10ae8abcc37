/* SPDX-License-Identifier: BSD-3-Clause */
/* die_in_read.c: preloaded by tests/ckpt-bcast-die.sh into the ranks of a
 * restart. Rank 0 (PMI_RANK, PMIX_RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID
 * = 0) kills itself with SIGKILL at its DDPC_TEST_DIE_AT_READ-th H5Dread:
 * the loader reads the checkpoint in pieces while it broadcasts the windows
 * already read, so the other ranks are then waiting in the broadcast of the
 * next one. A fault injected at a point in the program, not at a time: no
 * test hook in the library. */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef int64_t hid_t; /* HDF5 1.10's */
typedef int herr_t;
herr_t H5Dread(hid_t ds, hid_t mt, hid_t ms, hid_t fs, hid_t pl, void *buf);

static int rank0(void)
{
    static const char *const vars[] = {"PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK",
                                       "SLURM_PROCID"};
    for (int i = 0; i < 4; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return atoi(v) == 0;
    }
    return 0;
}

herr_t H5Dread(hid_t ds, hid_t mt, hid_t ms, hid_t fs, hid_t pl, void *buf)
{
    static herr_t (*real)(hid_t, hid_t, hid_t, hid_t, hid_t, void *);
    static long calls;
    const char *at = getenv("DDPC_TEST_DIE_AT_READ");
    if (at && ++calls == atol(at) && rank0()) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        fprintf(stderr, "die_in_read: rank 0 (pid %d) SIGKILLs itself at H5Dread #%ld at %lld.%09ld\n",
                (int)getpid(), calls, (long long)t.tv_sec, t.tv_nsec);
        fflush(stderr);
        raise(SIGKILL);
    }
    if (!real)
        *(void **)&real = dlsym(RTLD_NEXT, "H5Dread");
    return real(ds, mt, ms, fs, pl, buf);
}
