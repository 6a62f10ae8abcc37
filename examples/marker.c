/* SPDX-License-Identifier: BSD-3-Clause */
/* marker.c: the stop marker (marker.h). Plain key=value lines that a shell
 * reads with sed; no MPI, no ddpc: the unit tests call it. */
#include "marker.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int fail(char *err, size_t n, const char *what, const char *path)
{
    snprintf(err, n, "cannot %s %s: %s", what, path, strerror(errno));
    return -1;
}

int marker_write(const char *dir, const marker_t *m, char *err, size_t n)
{
    char path[4200], tmp[4300], when[32];
    snprintf(path, sizeof path, "%s/%s", dir, MARKER_FILE);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    time_t now = time(NULL);
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    const char *job = getenv("SLURM_JOB_ID");
    FILE *f = fopen(tmp, "w");
    if (!f)
        return fail(err, n, "create", tmp);
    fprintf(f, "# trainer: stopped by a signal after a checkpoint; rerun or requeue to go on\n"
               "exit=%d\nreason=%s\nsignal=%s\nstep=%lld\ncheckpoint=%s\nhost=%s\npid=%ld\n"
               "slurm_job=%s\ntime=%s\n",
            m->exit_code, m->reason, m->signal, (long long)m->step, m->checkpoint, m->host,
            (long)getpid(), job && *job ? job : "-", when);
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    if (fclose(f) != 0 || bad) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return fail(err, n, "write", tmp);
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return fail(err, n, "rename to", path);
    }
    int d = open(dir, O_RDONLY | O_DIRECTORY);
    if (d >= 0) { /* the rename's durability; a failure here loses nothing */
        fsync(d);
        close(d);
    }
    return 0;
}

int marker_remove(const char *dir, char *err, size_t n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, MARKER_FILE);
    if (unlink(path) != 0 && errno != ENOENT)
        return fail(err, n, "remove", path);
    return 0;
}
