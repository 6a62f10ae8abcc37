/* SPDX-License-Identifier: BSD-3-Clause */
/* loader_bench.c: how long a training loop waits for its data. Feeds batches
 * of the Fashion-MNIST train set through ddpc's loader to a loop that
 * "computes" for a fixed time per batch (a busy loop that reads the batch),
 * with prefetch off and on, and reports the median wait of repeated runs.
 *
 * Usage: loader_bench [-d dir] [-b list] [-c ms] [-n batches] [-r reps]
 *   -d dir    Fashion-MNIST directory (default $DDPC_FMNIST_DIR or
 *             /usr/share/datasets/fashion-mnist)
 *   -b list   comma-separated batch sizes (default 64,256,1024)
 *   -c ms     simulated compute per batch in milliseconds (default 3)
 *   -n count  batches per run (default 200; the sampler wraps to new epochs)
 *   -r reps   runs per configuration, median reported (default 7)
 * Output: '#' lines, then one 'R' line per batch size:
 *   R batch=B gather_us=<off: wait per batch> on_us=<on: wait per batch>
 *     ratio=<off/on> loop_off_s=<median loop time> loop_on_s=...
 */
#include "ddpc_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The load average: other processes on the machine skew every figure. */
static void print_load(const char *when)
{
    char line[128] = "?";
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (!fgets(line, sizeof line, f))
            snprintf(line, sizeof line, "?\n");
        fclose(f);
    }
    printf("# load average %s: %s", when, line);
}

static volatile float sink; /* keeps the simulated compute from being optimized out */

/* Busy for `seconds`, reading the batch over and over like a forward pass would. */
static void compute(const ddpc_batch_t *b, size_t dim, double seconds)
{
    double end = now() + seconds;
    float acc = 0;
    size_t k = 0, len = b->n * dim;
    while (now() < end)
        for (int i = 0; i < 4096 && len; i++, k = (k + 61) % len)
            acc += b->x[k];
    sink = acc;
}

/* One run: `batches` batches through a fresh loader; returns the seconds the
 * loop waited, and the loop's wall time in *wall. */
static double run(ddpc_idx_t ds, size_t batch, int prefetch, double compute_s, int batches,
                  double *wall)
{
    ddpc_sampler_t s;
    ddpc_loader_t ld;
    ddpc_loader_config_t lc = {prefetch};
    if (ddpc_sampler_create(ddpc_idx_count(ds), 0, 1, batch, NULL, &s) != DDPC_OK ||
        ddpc_loader_create(ds, s, &lc, &ld) != DDPC_OK) {
        fprintf(stderr, "loader_bench: cannot create the sampler or loader\n");
        exit(1);
    }
    usleep(20000); /* model setup before the first batch, as in training: with
                      prefetch the first batch is ready by then */
    double t0 = now();
    uint64_t epoch = 0;
    for (int k = 0; k < batches; k++) {
        ddpc_batch_t b;
        if (ddpc_loader_next(ld, &b) != DDPC_OK) {
            fprintf(stderr, "%s\n", ddpc_loader_last_error(ld));
            exit(1);
        }
        if (b.n == 0) { /* end of an epoch: the next one */
            ddpc_loader_set_epoch(ld, ++epoch);
            k--;
            continue;
        }
        compute(&b, ddpc_idx_dim(ds), compute_s);
    }
    *wall = now() - t0;
    double wait = ddpc_loader_wait_seconds(ld);
    ddpc_loader_destroy(ld);
    ddpc_sampler_destroy(s);
    return wait;
}

int main(int argc, char **argv)
{
    const char *dir = getenv("DDPC_FMNIST_DIR");
    char blist[256] = "64,256,1024";
    double compute_ms = 3;
    int batches = 200, reps = 7, opt;
    if (!dir || !*dir)
        dir = "/usr/share/datasets/fashion-mnist";
    while ((opt = getopt(argc, argv, "d:b:c:n:r:")) != -1) {
        switch (opt) {
        case 'd': dir = optarg; break;
        case 'b': snprintf(blist, sizeof blist, "%s", optarg); break;
        case 'c': compute_ms = atof(optarg); break;
        case 'n': batches = atoi(optarg); break;
        case 'r': reps = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-d dir] [-b list] [-c ms] [-n batches] [-r reps]\n",
                    argv[0]);
            return 2;
        }
    }
    if (reps < 1 || batches < 1 || compute_ms < 0) {
        fprintf(stderr, "loader_bench: -r, -n must be >= 1 and -c >= 0\n");
        return 2;
    }
    char im[1024], lb[1024];
    ddpc_idx_t ds;
    double t0 = now();
    if (ddpc_idx_default_paths(dir, "train", im, lb, sizeof im) != DDPC_OK ||
        ddpc_idx_open(im, lb, NULL, &ds) != DDPC_OK) {
        fprintf(stderr, "%s\n", ddpc_idx_last_error(ds));
        return 1;
    }
    printf("# %s: %zu samples of %zux%zu, opened in %.2f s\n", im, ddpc_idx_count(ds),
           ddpc_idx_rows(ds), ddpc_idx_cols(ds), now() - t0);
    printf("# %d batches per run, %.1f ms compute per batch, median of %d runs, %ld CPUs\n",
           batches, compute_ms, reps, sysconf(_SC_NPROCESSORS_ONLN));
    print_load("before");
    double *w[2], *t[2];
    for (int p = 0; p < 2; p++) {
        w[p] = malloc((size_t)reps * sizeof(double));
        t[p] = malloc((size_t)reps * sizeof(double));
    }
    for (char *tok = strtok(blist, ","); tok; tok = strtok(NULL, ",")) {
        size_t batch = (size_t)atol(tok);
        if (batch < 1)
            continue;
        for (int r = 0; r < reps; r++) /* interleaved, so drift hits both modes alike */
            for (int p = 0; p < 2; p++)
                w[p][r] = run(ds, batch, p, compute_ms * 1e-3, batches, &t[p][r]);
        double off = median(w[0], reps) / batches, on = median(w[1], reps) / batches;
        printf("R batch=%zu gather_us=%.1f on_us=%.2f ratio=%.0f loop_off_s=%.3f "
               "loop_on_s=%.3f\n",
               batch, off * 1e6, on * 1e6, on > 0 ? off / on : 0.0, median(t[0], reps),
               median(t[1], reps));
        fflush(stdout);
    }
    for (int p = 0; p < 2; p++) {
        free(w[p]);
        free(t[p]);
    }
    print_load("after");
    ddpc_idx_close(ds);
    return 0;
}
