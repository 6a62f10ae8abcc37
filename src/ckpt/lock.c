/* SPDX-License-Identifier: BSD-3-Clause */
/* lock.c: one writer per checkpoint directory. Rank 0 holds a write lock
 * (fcntl, open file description) on <dir>/ddpc.lock from the first
 * ddpc_ckpt_prepare or save to ddpc_ckpt_destroy; the file says who holds it
 * (host, pid, Slurm job, since when), so that a second job on the same
 * directory is refused with a message naming the first. The kernel (or the
 * file system's lock manager) drops the lock of a process that dies: a lock
 * file with contents but no lock is a job that ended without releasing it,
 * and is taken over. Not a reader's business: loads take no lock. */
#define _GNU_SOURCE /* F_OFD_SETLK */
#include "config.h"
#include "ckpt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A write lock on the whole of fd, without waiting: 0, or -1 with errno
 * (EAGAIN/EACCES: held by another). Open file description locks conflict
 * between two handles of one process too, and closing another descriptor of
 * the file does not drop them; kernels before 3.15 have only POSIX locks. */
static int try_lock(int fd)
{
    struct flock l = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
#ifdef F_OFD_SETLK
    if (fcntl(fd, F_OFD_SETLK, &l) == 0)
        return 0;
    if (errno != EINVAL)
        return -1;
#endif
    return fcntl(fd, F_SETLK, &l);
}

/* value of "key=" in the lock file's text, or "?" */
static void field(const char *text, const char *key, char *out, size_t n)
{
    size_t k = strlen(key);
    snprintf(out, n, "?");
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, key, k) && p[k] == '=') {
            const char *e = strchr(p + k + 1, '\n');
            snprintf(out, n, "%.*s", (int)(e ? e - (p + k + 1) : (long)strlen(p + k + 1)),
                     p + k + 1);
            return;
        }
}

/* "host=h pid=p (Slurm job j) since t": who the text says holds the lock */
static void holder(const char *text, char *out, size_t n)
{
    char host[256], pid[32], job[64], since[64];
    field(text, "host", host, sizeof host);
    field(text, "pid", pid, sizeof pid);
    field(text, "slurm_job", job, sizeof job);
    field(text, "since", since, sizeof since);
    snprintf(out, n, "host %s, pid %s%s%s%s, since %s", host, pid, strcmp(job, "-") ? " (Slurm job " : "",
             strcmp(job, "-") ? job : "", strcmp(job, "-") ? ")" : "", since);
}

static void read_text(int fd, char *buf, size_t n)
{
    ssize_t r = pread(fd, buf, n - 1, 0);
    buf[r > 0 ? r : 0] = 0;
}

/* This process's lines, written over the file's (pwrite + truncate). */
static int write_text(ddpc_ckpt_t ck, int fd)
{
    const char *job = getenv("SLURM_JOB_ID");
    char since[32], text[1024];
    time_t now = time(NULL);
    struct tm tm;
    strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
    int len = snprintf(text, sizeof text,
                       "# ddpc: the checkpoint writer of this directory (see doc/checkpoint.md)\n"
                       "host=%s\npid=%ld\nslurm_job=%s\nsince=%s\n",
                       ddpc_world(ck->rt)->host, (long)getpid(), job && *job ? job : "-", since);
    if (len < 0 || (size_t)len >= sizeof text)
        len = (int)strlen(text);
    return pwrite(fd, text, (size_t)len, 0) == len && ftruncate(fd, len) == 0 ? 0 : -1;
}

ddpc_status_t ck_lock_take(ddpc_ckpt_t ck)
{
    if (ck->lock_state != CK_LOCK_OFF) /* held, or the file system has no locks */
        return DDPC_OK;
    char path[CK_FILE_MAX], text[1024], who[512];
    snprintf(path, sizeof path, "%s/%s", ck->dir, CK_LOCK_FILE);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return ck_err(ck, DDPC_ERR_IO, "cannot open the lock file %s: %s", path, strerror(errno));
    double t0 = ddpc_now(), waited = 0;
    int rc;
    while ((rc = try_lock(fd)) != 0 && (errno == EAGAIN || errno == EACCES) &&
           (waited = ddpc_now() - t0) < ck->lock_wait_s)
        nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
    if (rc != 0 && errno != EAGAIN && errno != EACCES) {
        /* ENOLCK, ENOSYS, EOPNOTSUPP: a mount without locks (Lustre without
         * -o flock, NFS without lockd): say so once and go on unprotected */
        int e = errno;
        close(fd);
        ck->lock_state = CK_LOCK_NONE;
        ddpc_log(ck->rt, DDPC_LOG_WARN, "ckpt: cannot lock %s (%s): the file system gives no "
                 "locks, so a second job writing to %s would not be detected; saves go on "
                 "(mount with locks, e.g. Lustre's -o flock, to be protected)", path,
                 strerror(e), ck->dir);
        return DDPC_OK;
    }
    read_text(fd, text, sizeof text);
    holder(text, who, sizeof who);
    if (rc != 0) {
        char host[256], pid[32], note[160] = "";
        field(text, "host", host, sizeof host);
        field(text, "pid", pid, sizeof pid);
        long p = strtol(pid, NULL, 10);
        if (!strcmp(host, ddpc_world(ck->rt)->host) && p > 0 && kill((pid_t)p, 0) != 0 &&
            errno == ESRCH)
            snprintf(note, sizeof note, " (that process no longer runs on this host: a network "
                     "file system still holds its lock, until its lease expires)");
        char wait[96] = "";
        if (ck->lock_wait_s > 0)
            snprintf(wait, sizeof wait, " (waited %.1fs, DDPC_CKPT_LOCK_WAIT)", waited);
        close(fd);
        return ck_err(ck, DDPC_ERR_BUSY, "checkpoint directory \"%s\" is in use by another job: "
                      "%s%s (lock file %s)%s; two jobs saving to one directory would destroy "
                      "each other's checkpoints: end that job, or give this one another "
                      "directory (DDPC_CKPT_LOCK_WAIT=seconds waits for it)", ck->dir,
                      text[0] ? who : "a process that has not written its name yet", note, path,
                      wait);
    }
    if (strstr(text, "pid="))
        ddpc_log(ck->rt, DDPC_LOG_WARN, "ckpt: %s: the previous writer (%s) ended without "
                 "releasing the directory (it was killed, or its node failed); taking it over, "
                 "and its temporary files go at the first save", path, who);
    if (write_text(ck, fd) != 0) {
        int e = errno;
        close(fd);
        return ck_err(ck, DDPC_ERR_IO, "cannot write the lock file %s: %s", path, strerror(e));
    }
    ck->lock_fd = fd;
    ck->lock_state = CK_LOCK_HELD;
    return DDPC_OK;
}

void ck_lock_release(ddpc_ckpt_t ck)
{
    if (ck->lock_state != CK_LOCK_HELD)
        return;
    /* emptied, not removed: a process may hold the file open to lock it,
     * and removing it would let a third one lock a new file meanwhile */
    if (ftruncate(ck->lock_fd, 0) != 0)
        ddpc_log(ck->rt, DDPC_LOG_WARN, "ckpt: cannot empty the lock file of %s: %s", ck->dir,
                 strerror(errno));
    close(ck->lock_fd); /* drops the lock */
    ck->lock_fd = -1;
    ck->lock_state = CK_LOCK_OFF;
}
