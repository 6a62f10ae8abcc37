/* SPDX-License-Identifier: BSD-3-Clause */
/* marker.h: the trainer's stop marker, <ckpt-dir>/trainer.stop, for job
 * scripts whose launcher loses the trainer's exit code (mpiexec, some srun
 * MPI plugins): written by rank 0 after the checkpoint of a stop signal,
 * removed at the start of every run. Format: doc/trainer.md, "Exit codes". */
#ifndef TRAINER_MARKER_H
#define TRAINER_MARKER_H

#include <stddef.h>
#include <stdint.h>

#define MARKER_FILE "trainer.stop"

typedef struct {
    int exit_code;          /* 3 (preempted) or 130 (interrupted) */
    const char *reason;     /* "preempted" or "interrupted" */
    const char *signal;     /* "SIGTERM", "SIGUSR1", "SIGINT" */
    int64_t step;
    const char *checkpoint; /* the file that step was saved to */
    const char *host;
} marker_t;

/* Crash-atomically (a temporary, fsync, rename, the directory fsynced).
 * 0, or -1 with the reason in err. */
int marker_write(const char *dir, const marker_t *m, char *err, size_t n);
/* A previous run's marker gone (none is fine). 0, or -1 with err. */
int marker_remove(const char *dir, char *err, size_t n);

#endif
