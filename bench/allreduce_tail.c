/* SPDX-License-Identifier: BSD-3-Clause */
/* allreduce_tail: the tail latency of many small and medium MPI_Allreduce
 * calls (the UCX stalls of the Slurm testbed, doc/guide.md "MPI transport
 * settings"). Plain MPI, no ddpc: it measures the MPI and its transport, not
 * the library. Run by hand (bench/ucx_tail.sh), never by make check.
 *
 *   allreduce_tail [CALLS [MAX_FLOATS [INFLIGHT]]]   (defaults: 20000, 65536, 1)
 *
 * Call i all-reduces sizes[i % k] floats, sizes 1, 16, 256, ... up to
 * MAX_FLOATS (x16 each). INFLIGHT > 1: a call is INFLIGHT MPI_Iallreduce of
 * MAX_FLOATS floats each, then MPI_Waitall (tests/mpi_comm.c's
 * async_in_order_and_seq: 8 x 100000). A call's latency is the slowest rank's. Rank 0
 * prints each call over 1 s as it happens ("stall: call 1234 (256 floats)
 * 12.3 s at t=45.6 s"), then one summary line:
 *   calls=N median_us=M p99_us=P max_s=X over_100ms=A over_1s=B wall_s=W
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const long calls = argc > 1 ? atol(argv[1]) : 20000;
    const long max_floats = argc > 2 ? atol(argv[2]) : 65536;
    const int inflight = argc > 3 ? atoi(argv[3]) : 1;
    if (calls < 1 || max_floats < 1 || inflight < 1 || inflight > 64) {
        if (rank == 0)
            fprintf(stderr, "usage: allreduce_tail [CALLS >= 1 [MAX_FLOATS >= 1 [INFLIGHT 1..64]]]\n");
        MPI_Finalize();
        return 2;
    }
    long sizes[16];
    int k = 0;
    for (long n = 1; n <= max_floats && k < 16; n *= 16)
        sizes[k++] = n;
    float *send = malloc((size_t)max_floats * sizeof *send);
    float *recv = malloc((size_t)max_floats * inflight * sizeof *recv); /* (inflight, max_floats) */
    MPI_Request req[64];
    MPI_Status st[64]; /* not MPI_STATUSES_IGNORE: gcc 12 warns on it (-Wstringop-overflow) */
    double *lat = malloc((size_t)calls * sizeof *lat); /* (calls,) seconds, this rank */
    double *worst = malloc((size_t)calls * sizeof *worst);
    if (!send || !recv || !lat || !worst) {
        fprintf(stderr, "allreduce_tail[rank %d]: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (long j = 0; j < max_floats; j++)
        send[j] = (float)(rank + j % 7);

    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    for (long i = 0; i < calls; i++) {
        const long n = inflight > 1 ? max_floats : sizes[i % k];
        const double a = MPI_Wtime();
        if (inflight == 1) {
            MPI_Allreduce(send, recv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        } else {
            for (int q = 0; q < inflight; q++)
                MPI_Iallreduce(send, recv + q * max_floats, (int)n, MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD, &req[q]);
            MPI_Waitall(inflight, req, st);
        }
        lat[i] = MPI_Wtime() - a;
        if (rank == 0 && lat[i] > 1.0) {
            printf("stall: call %ld (%ld floats) %.1f s at t=%.1f s\n", i, n, lat[i], a - t0);
            fflush(stdout);
        }
        /* a wrong sum would mean a broken transport, not a slow one */
        const float want = (float)(size * (size - 1) / 2 + size * (int)((n - 1) % 7));
        if (recv[n - 1] != want) {
            fprintf(stderr, "allreduce_tail[rank %d]: call %ld: got %g, expected %g\n", rank, i,
                    recv[n - 1], want);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    const double wall = MPI_Wtime() - t0;
    MPI_Reduce(lat, worst, (int)calls, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        long over_100ms = 0, over_1s = 0;
        for (long i = 0; i < calls; i++) {
            over_100ms += worst[i] > 0.1;
            over_1s += worst[i] > 1.0;
        }
        qsort(worst, (size_t)calls, sizeof *worst, cmp_double);
        printf("calls=%ld median_us=%.0f p99_us=%.0f max_s=%.3f over_100ms=%ld over_1s=%ld "
               "wall_s=%.1f\n",
               calls, worst[calls / 2] * 1e6, worst[(long)(calls * 0.99)] * 1e6,
               worst[calls - 1], over_100ms, over_1s, wall);
    }
    free(send);
    free(recv);
    free(lat);
    free(worst);
    MPI_Finalize();
    return 0;
}
