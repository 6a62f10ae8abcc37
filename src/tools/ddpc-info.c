/* SPDX-License-Identifier: BSD-3-Clause */
/* ddpc-info: check a launch. Initializes ddpc and prints one line per rank, in
 * rank order, from rank 0:
 *   rank=R size=N local_rank=L local_size=M node=K host=H source=S backend=B gpu=G
 * (G: the GPU the library's rule gives this rank, or none)
 * Lines are gathered through PMIx when MPI disagrees with the launcher (then
 * the disagreement is reported and backend=none), so a wrong launch still shows
 * what the launcher said. `ddpc-info --version` prints what was compiled in
 * and what this process finds at run time (CUDA driver, NCCL, GPUs). */
#include "ddpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE 384

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "-V")) {
            printf("ddpc-info (ddpc) %s\n%s\n%s\n", ddpc_version(), ddpc_build_info(),
                   ddpc_runtime_info());
            return 0;
        }
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: ddpc-info [--version]\n"
                   "Run under the launcher to check (srun, mpiexec, torchrun-style env);\n"
                   "rank 0 prints one line per rank.\n");
            return 0;
        }
        fprintf(stderr, "ddpc-info: unknown option \"%s\" (expected --version or --help)\n", argv[i]);
        return 2;
    }
    ddpc_config_t cfg = DDPC_CONFIG_INIT;
    cfg.allow_mpi_mismatch = 1;
    ddpc_t rt;
    ddpc_status_t st = ddpc_init(&cfg, &argc, &argv, &rt);
    if (st != DDPC_OK) {
        /* ddpc_init already printed its message on this rank */
        ddpc_finalize(rt);
        return 1;
    }
    const ddpc_world_t *w = ddpc_world(rt);
    int mpi_ok = w->mpi_size == w->size && w->mpi_rank == w->rank;
    /* the GPU this rank would train on, by the library's rule */
    char gpu[192] = "none";
    int dev;
    if (ddpc_device_count() > 0) {
        if (ddpc_device_select(rt, &dev) == DDPC_OK)
            ddpc_device_describe(dev, gpu, sizeof gpu);
        else
            snprintf(gpu, sizeof gpu, "unusable");
        for (char *p = gpu; *p; p++) /* one field: no spaces */
            if (*p == ' ')
                *p = '_';
    }
    char mine[LINE];
    snprintf(mine, sizeof mine,
             "rank=%d size=%d local_rank=%d local_size=%d node=%d host=%s source=%s backend=%s "
             "gpu=%.120s",
             w->rank, w->size, w->local_rank, w->local_size, w->node_id, w->host,
             ddpc_source_name(w->source), mpi_ok ? "mpi" : "none", gpu);
    char *all = malloc((size_t)w->size * LINE);
    if (!all) {
        fprintf(stderr, "ddpc-info: out of memory\n");
        ddpc_abort(rt, 1, "ddpc-info: out of memory");
    }
    st = ddpc_kvs_allgather(rt, mine, all, LINE);
    int rc = 0;
    if (st != DDPC_OK) {
        fprintf(stderr, "%s\n", ddpc_last_error(rt));
        rc = 1;
    } else if (w->rank == 0) {
        for (int r = 0; r < w->size; r++)
            printf("%s\n", all + (size_t)r * LINE);
        if (!mpi_ok)
            printf("warning: MPI_COMM_WORLD is %d rank(s) here, not %d: training would fail. "
                   "Launch with `srun --mpi=pmi2` (or mpiexec), or use an MPI built with PMIx.\n",
                   w->mpi_size, w->size);
        fflush(stdout);
    }
    free(all);
    ddpc_finalize(rt);
    return rc;
}
