/* SPDX-License-Identifier: BSD-3-Clause */
/* gpu_boot.c: the NCCL bootstrap, end to end. ddpc_init with the nccl
 * backend (which accepts a PMIx launch whose MPI is not wired), then a device
 * communicator on this rank's GPU: the GPU check and rank 0's ncclUniqueId
 * travel through the key exchange (PMIx, else MPI), then one all-reduce.
 * Prints one line per rank: where the world came from, then "ok" with the
 * result, or the communicator's error (exit 2). Run by tests/gpu-boot.sh
 * (mpiexec), tests/slurm-nccl.sh (srun --mpi=pmix) and scripts/gpu-check.sh
 * (also its watchdog experiment: GPU_BOOT_SKIP_RANK, exit 3 on the expected
 * timeout). */
#include "ddpc.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    ddpc_config_t cfg = DDPC_CONFIG_INIT;
    cfg.backend = DDPC_BACKEND_NCCL;
    ddpc_t rt;
    if (ddpc_init(&cfg, &argc, &argv, &rt) != DDPC_OK) {
        ddpc_finalize(rt); /* ddpc_init printed its message */
        return 1;
    }
    const ddpc_world_t *w = ddpc_world(rt);
    printf("gpu_boot: rank %d of %d, local %d of %d, node %d of %d, world from %s, MPI %s\n",
           w->rank, w->size, w->local_rank, w->local_size, w->node_id, w->num_nodes,
           ddpc_source_name(w->source), ddpc_comm_world(rt) ? "wired" : "not wired");
    fflush(stdout);
    ddpc_comm_config_t cc = DDPC_COMM_CONFIG_INIT;
    cc.backend = DDPC_BACKEND_NCCL;
    cc.device = DDPC_DEVICE_AUTO;
    ddpc_comm_t c;
    if (ddpc_comm_create(rt, &cc, &c) != DDPC_OK) {
        fprintf(stderr, "%s\n", ddpc_last_error(rt));
        ddpc_finalize(rt);
        return 2;
    }
    /* GPU_BOOT_SKIP_RANK=r: rank r never joins the all-reduce; the others'
     * watchdog must end it after DDPC_TIMEOUT (exit 3 with the time taken) */
    const char *skip = getenv("GPU_BOOT_SKIP_RANK");
    if (skip && atoi(skip) == w->rank) {
        printf("gpu_boot: rank %d: not joining the all-reduce\n", w->rank);
        fflush(stdout);
        sleep((unsigned)ddpc_config(rt)->timeout_s + 5);
        _exit(0); /* its peers aborted their communicators: nothing to finalize with */
    }
    enum { N = 1 << 20 };
    float *d = NULL, *h = malloc(N * sizeof *h);
    int rc = 1;
    if (h && cudaMalloc((void **)&d, N * sizeof *d) == cudaSuccess) {
        for (int i = 0; i < N; i++)
            h[i] = (float)(w->rank + 1);
        cudaMemcpy(d, h, N * sizeof *d, cudaMemcpyHostToDevice);
        double t0 = now_s();
        ddpc_status_t st = ddpc_allreduce(c, d, d, N, DDPC_F32, DDPC_SUM);
        if (st == DDPC_OK)
            st = ddpc_comm_synchronize(c, -1);
        if (st == DDPC_ERR_TIMEOUT && skip) {
            printf("gpu_boot: rank %d: timed out as expected after %.1fs (DDPC_TIMEOUT %gs): %s\n",
                   w->rank, now_s() - t0, ddpc_config(rt)->timeout_s, ddpc_last_error(rt));
            fflush(stdout);
            _exit(3);
        }
        cudaMemcpy(h, d, N * sizeof *d, cudaMemcpyDeviceToHost);
        const float want = (float)w->size * (float)(w->size + 1) / 2.0f;
        int bad = 0;
        for (int i = 0; i < N; i++)
            bad += h[i] != want;
        if (st != DDPC_OK)
            fprintf(stderr, "%s\n", ddpc_last_error(rt));
        else if (bad)
            fprintf(stderr, "gpu_boot: rank %d: %d of %d sums wrong (%g, expected %g)\n", w->rank,
                    bad, N, h[0], want);
        else
            rc = 0;
        printf("gpu_boot: rank %d: backend %s on GPU %d: %s\n", w->rank,
               ddpc_backend_name(ddpc_comm_backend(c)), ddpc_comm_device(c), rc ? "FAILED" : "ok");
    } else {
        fprintf(stderr, "gpu_boot: rank %d: cannot allocate %d floats\n", w->rank, N);
    }
    cudaFree(d);
    free(h);
    ddpc_comm_destroy(c);
    ddpc_finalize(rt);
    return rc;
}
