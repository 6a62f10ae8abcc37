/* SPDX-License-Identifier: BSD-3-Clause */
/* testutil.h: small helpers the multi-rank test scaffolds share (mpitest.h
 * for the Check suites, gputest.h for the GPU tests): a hash to compare
 * buffers across ranks, and the removal of a test's scratch directory. */
#ifndef DDPC_TESTUTIL_H
#define DDPC_TESTUTIL_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* FNV-1a of n bytes: compares buffers across ranks with one allgather. */
static inline uint64_t fnv1a(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Remove dir and the files in it (one level: checkpoints and their .tmp). */
static inline void remove_flat_dir(const char *dir)
{
    DIR *d = opendir(dir);
    char p[600];
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    if (d)
        closedir(d);
    rmdir(dir);
}

#endif
