/* SPDX-License-Identifier: BSD-3-Clause */
/* names.c: which directory entries are a save's temporary files, and which
 * of them can go. No dependencies: tests/check_ckpt_names compiles it in. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

int ck_tmp_is_stale(const char *name, const char *host, int exclusive);

int ck_tmp_is_stale(const char *name, const char *host, int exclusive)
{
    /* "ckpt-<digits>.h5.tmp" (older ddpc wrote these) or
     * "ckpt-<digits>.h5.tmp.<pid>.<host>" */
    const char *t = strstr(name, ".h5.tmp");
    if (strncmp(name, "ckpt-", 5) || !t || strspn(name + 5, "0123456789") != (size_t)(t - name - 5) ||
        t == name + 5)
        return 0;
    t += 7;
    if (!*t)
        return exclusive;
    char *end;
    long pid = *t == '.' ? strtol(t + 1, &end, 10) : 0;
    if (pid <= 0 || *end != '.')
        return 0;
    if (exclusive)
        return 1;
    /* no lock: only a dead writer of this host's */
    return !strcmp(end + 1, host) && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}
