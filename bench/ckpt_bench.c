/* SPDX-License-Identifier: BSD-3-Clause */
/* ckpt_bench.c: checkpoint throughput against raw I/O of the same bytes, in
 * the same run. A model of 32 parameters (16 x [4096, 1365] and 16 x [4096])
 * with AdamW: parameters plus 2 state tensors, about 1 GiB. Per repetition:
 *   raw write    rank 0: fwrite of the 3 arenas, fflush, fsync, fclose
 *   save         ddpc_ckpt_save, sync (rank 0 writes HDF5 with CRCs)
 *   raw read     rank 0: fread of the raw file into the arenas
 *   load         ddpc_ckpt_load: rank 0 reads, every rank receives
 *   stall        how long ddpc_ckpt_save blocks the training loop: sync vs
 *                async (snapshot), and the async write's total
 *   h5 plain / h5 fletcher32   rank 0: the same datasets with HDF5 alone,
 *                contiguous without checksum, and chunked (1 MiB) with the
 *                Fletcher32 filter, written (+fsync) and read back
 * The page cache is dropped (as root) before every timed step, so reads come
 * from disk and writes start from the same state; without permission reads
 * are from the cache on both sides, which the output says. Medians of --reps.
 *
 *   mpiexec -n 2 bench/ckpt_bench [--dir /tmp/ddpc-ckpt-bench] [--reps 5] [--cols 1365]
 *
 * Last line: key=value ratios (save_vs_raw >= 0.8 and load_vs_raw <= 1.5 are
 * the targets; save_vs_raw is raw time / save time, i.e. relative throughput). */
#include "ddpc.h"
#include "../tests/testutil.h" /* remove_flat_dir */

#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NPAR 16
#define ROWS 4096

static ddpc_t rt;
static ddpc_comm_t comm;
static int rank, size, dropped = 1;
static const char *dir = "/tmp/ddpc-ckpt-bench";

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what, const char *msg)
{
    fprintf(stderr, "ckpt_bench: %s: %s\n", what, msg);
    ddpc_abort(rt, 1, "ckpt_bench failed");
}

/* rank 0: write back and drop the page cache, so the next read is from disk */
static void drop_caches(void)
{
    if (rank == 0) {
        sync();
        FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
        if (!f || fputs("3\n", f) < 0 || fclose(f) != 0)
            dropped = 0;
    }
    ddpc_barrier(comm);
}

/* the slowest rank's time of a collective section */
static double tmax(double t)
{
    ddpc_allreduce(comm, &t, &t, 1, DDPC_F64, DDPC_MAX);
    return t;
}

typedef struct {
    float *arena[3];
    size_t n;
    const char *names[3];
    int64_t cols;
} model_t;

static void fill(model_t *m)
{
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < m->n; i++)
            m->arena[a][i] = (float)(i % 1000003) * 1e-3f + (float)a;
}

static size_t check(const model_t *m) /* mismatching elements */
{
    size_t bad = 0;
    for (int a = 0; a < 3; a++)
        for (size_t i = 0; i < m->n; i++)
            bad += m->arena[a][i] != (float)(i % 1000003) * 1e-3f + (float)a;
    return bad;
}

static void zero(model_t *m)
{
    for (int a = 0; a < 3; a++)
        memset(m->arena[a], 0, m->n * sizeof(float));
}

static double raw_write(const model_t *m, const char *path)
{
    unlink(path); /* a new file, as the checkpoint's .tmp */
    double t = now();
    FILE *f = fopen(path, "wb");
    if (!f)
        die("fopen", path);
    for (int a = 0; a < 3; a++)
        if (fwrite(m->arena[a], sizeof(float), m->n, f) != m->n)
            die("fwrite", path);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0 || fclose(f) != 0)
        die("fsync", path);
    return now() - t;
}

static double raw_read(model_t *m, const char *path)
{
    double t = now();
    FILE *f = fopen(path, "rb");
    if (!f)
        die("fopen", path);
    for (int a = 0; a < 3; a++)
        if (fread(m->arena[a], sizeof(float), m->n, f) != m->n)
            die("fread", path);
    fclose(f);
    return now() - t;
}

/* The same datasets with HDF5 alone: contiguous, or chunked with Fletcher32. */
static double h5_write(const model_t *m, const char *path, int fletcher)
{
    double t = now();
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (f < 0)
        die("H5Fcreate", path);
    for (int a = 0; a < 3; a++) {
        hid_t g = H5Gcreate2(f, m->names[a], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        const float *p = m->arena[a];
        for (int i = 0; i < 2 * NPAR; i++) {
            hsize_t dims[2] = {ROWS, (hsize_t)m->cols}, chunk[2] = {1, dims[1]};
            int nd = i % 2 ? 1 : 2;
            chunk[0] = nd == 2 ? (hsize_t)((1 << 20) / 4 / m->cols) : ROWS;
            if (nd == 1)
                chunk[0] = dims[0];
            hid_t sp = H5Screate_simple(nd, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
            H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
            if (fletcher) {
                H5Pset_chunk(dcpl, nd, chunk);
                H5Pset_fletcher32(dcpl);
            }
            char name[32];
            snprintf(name, sizeof name, "p%02d", i);
            hid_t d = H5Dcreate2(g, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
            if (d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, p) < 0)
                die("H5Dwrite", path);
            p += nd == 2 ? ROWS * (size_t)m->cols : ROWS;
            H5Dclose(d);
            H5Pclose(dcpl);
            H5Sclose(sp);
        }
        H5Gclose(g);
    }
    H5Fclose(f);
    H5Pclose(fapl);
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fsync(fd) != 0)
        die("fsync", path);
    close(fd);
    return now() - t;
}

static double h5_read(model_t *m, const char *path)
{
    double t = now();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        die("H5Fopen", path);
    for (int a = 0; a < 3; a++) {
        float *p = m->arena[a];
        for (int i = 0; i < 2 * NPAR; i++) {
            char name[64];
            snprintf(name, sizeof name, "/%s/p%02d", m->names[a], i);
            hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
            if (d < 0 || H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, p) < 0)
                die("H5Dread", name);
            p += i % 2 ? ROWS : ROWS * (size_t)m->cols;
            H5Dclose(d);
        }
    }
    H5Fclose(f);
    return now() - t;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

enum {
    RAW_W, SAVE, RAW_R, LOAD, STALL_SYNC, STALL_ASYNC, ASYNC_TOTAL, H5_W, H5_R, FL_W, FL_R, NMEAS
};
static const char *const meas_names[] = {"raw_write", "save", "raw_read", "load", "stall_sync",
                                         "stall_async", "async_total", "h5_plain_write",
                                         "h5_plain_read", "h5_fletcher_write", "h5_fletcher_read"};

int main(int argc, char **argv)
{
    int reps = 5;
    long cols = 1365;
    if (ddpc_init(NULL, &argc, &argv, &rt) != DDPC_OK) {
        fprintf(stderr, "%s\n", ddpc_last_error(rt));
        return 1;
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--cols")) cols = atol(argv[i + 1]);
        else die("usage", "[--dir D] [--reps N] [--cols C]");
    }
    comm = ddpc_comm_world(rt);
    rank = ddpc_world(rt)->rank;
    size = ddpc_world(rt)->size;

    ddpc_ddp_t ddp;
    ddpc_optim_t opt;
    ddpc_ckpt_t ck_sync, ck_async;
    if (ddpc_ddp_create(comm, NULL, &ddp))
        die("ddp", ddpc_last_error(rt));
    for (int i = 0; i < NPAR; i++) {
        char name[64];
        int64_t w[2] = {ROWS, cols}, b[1] = {ROWS};
        snprintf(name, sizeof name, "layer%02d.weight", i);
        ddpc_ddp_add_param(ddp, name, 2, w, NULL);
        snprintf(name, sizeof name, "layer%02d.bias", i);
        ddpc_ddp_add_param(ddp, name, 1, b, NULL);
    }
    if (ddpc_ddp_build(ddp))
        die("build", ddpc_ddp_last_error(ddp));
    ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
    oc.type = DDPC_OPTIM_ADAMW;
    if (ddpc_optim_create(ddp, &oc, &opt))
        die("optim", ddpc_ddp_last_error(ddp));
    char ckdir[512], ckdir_async[512], raw[512], plain[512], fl[512];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", dir);
    snprintf(ckdir_async, sizeof ckdir_async, "%s/ckpt-async", dir);
    snprintf(raw, sizeof raw, "%s/raw.bin", dir);
    snprintf(plain, sizeof plain, "%s/plain.h5", dir);
    snprintf(fl, sizeof fl, "%s/fletcher32.h5", dir);
    ddpc_ckpt_config_t cc = DDPC_CKPT_CONFIG_INIT;
    cc.dir = ckdir;
    cc.keep = 1;
    if (ddpc_ckpt_create(ddp, opt, &cc, &ck_sync))
        die("ckpt", ddpc_ckpt_last_error(ck_sync));
    cc.async = 1;
    cc.dir = ckdir_async; /* a directory has one writer (its lock) */
    if (ddpc_ckpt_create(ddp, opt, &cc, &ck_async))
        die("ckpt", ddpc_ckpt_last_error(ck_async));
    if (rank == 0)
        mkdir(dir, 0777);

    model_t m = {.names = {"params", "exp_avg", "exp_avg_sq"}, .cols = cols};
    m.arena[0] = ddpc_ddp_params(ddp, &m.n);
    m.arena[1] = ddpc_optim_state(opt, 0, NULL);
    m.arena[2] = ddpc_optim_state(opt, 1, NULL);
    double bytes = 3.0 * (double)m.n * sizeof(float);
    if (rank == 0)
        printf("# %d ranks, %d reps, %.3f GiB (params + AdamW exp_avg, exp_avg_sq: 3 x %zu "
               "floats) in %s\n", size, reps, bytes / 1073741824.0, m.n, dir);
    double *t[NMEAS];
    for (int k = 0; k < NMEAS; k++)
        t[k] = calloc((size_t)reps, sizeof(double));

    ddpc_ckpt_meta_t meta;
    memset(&meta, 0, sizeof meta);
    for (int r = 0; r < reps; r++) {
        fill(&m);
        drop_caches();
        t[RAW_W][r] = tmax(rank == 0 ? raw_write(&m, raw) : 0);
        drop_caches();
        meta.step = (uint64_t)(2 * r + 1);
        double t0 = now();
        if (ddpc_ckpt_save(ck_sync, &meta))
            die("save", ddpc_ckpt_last_error(ck_sync));
        t[SAVE][r] = t[STALL_SYNC][r] = tmax(now() - t0);
        drop_caches();
        zero(&m);
        ddpc_barrier(comm);
        t[RAW_R][r] = tmax(rank == 0 ? raw_read(&m, raw) : 0);
        drop_caches();
        zero(&m);
        ddpc_barrier(comm);
        t0 = now();
        if (ddpc_ckpt_load(ck_sync, NULL, NULL, NULL, 0))
            die("load", ddpc_ckpt_last_error(ck_sync));
        t[LOAD][r] = tmax(now() - t0);
        size_t bad = check(&m);
        if (bad)
            die("load", "the loaded arenas differ from what was saved");
        meta.step++;
        drop_caches();
        t0 = now();
        if (ddpc_ckpt_save(ck_async, &meta))
            die("async save", ddpc_ckpt_last_error(ck_async));
        t[STALL_ASYNC][r] = tmax(now() - t0);
        if (ddpc_ckpt_wait(ck_async))
            die("async wait", ddpc_ckpt_last_error(ck_async));
        t[ASYNC_TOTAL][r] = tmax(now() - t0);
        drop_caches();
        t[H5_W][r] = tmax(rank == 0 ? h5_write(&m, plain, 0) : 0);
        drop_caches();
        t[H5_R][r] = tmax(rank == 0 ? h5_read(&m, plain) : 0);
        drop_caches();
        t[FL_W][r] = tmax(rank == 0 ? h5_write(&m, fl, 1) : 0);
        drop_caches();
        t[FL_R][r] = tmax(rank == 0 ? h5_read(&m, fl) : 0);
        if (rank == 0) {
            printf("rep %d:", r);
            for (int k = 0; k < NMEAS; k++)
                printf(" %s=%.3f", meas_names[k], t[k][r]);
            printf("\n");
            fflush(stdout);
            unlink(plain);
            unlink(fl);
        }
    }
    ddpc_ckpt_destroy(ck_async);
    ddpc_ckpt_destroy(ck_sync);
    double med[NMEAS], lo[NMEAS], hi[NMEAS];
    for (int k = 0; k < NMEAS; k++) {
        med[k] = median(t[k], reps); /* sorts */
        lo[k] = t[k][0];
        hi[k] = t[k][reps - 1];
    }
    if (rank == 0) {
        printf("# page cache %s\n", dropped ? "dropped before every step (reads are from disk)"
                                             : "NOT dropped (no permission): reads are from "
                                               "cache for both sides");
        for (int k = 0; k < NMEAS; k++)
            printf("median %-18s %7.3f s  %6.2f GiB/s  (min %.3f, max %.3f)\n", meas_names[k],
                   med[k], k == STALL_ASYNC || k == STALL_SYNC ? 0.0 : bytes / 1073741824.0 / med[k],
                   lo[k], hi[k]);
        printf("save_vs_raw=%.2f load_vs_raw=%.2f async_stall_vs_sync=%.3f crc_save_vs_h5_plain=%.2f "
               "fletcher_write_vs_h5_plain=%.2f fletcher_read_vs_h5_plain=%.2f\n",
               med[RAW_W] / med[SAVE], med[LOAD] / med[RAW_R], med[STALL_ASYNC] / med[STALL_SYNC],
               med[SAVE] / med[H5_W], med[FL_W] / med[H5_W], med[FL_R] / med[H5_R]);
        unlink(raw);
        remove_flat_dir(ckdir); /* checkpoints and ddpc.lock */
        remove_flat_dir(ckdir_async);
        rmdir(dir);
    }
    ddpc_optim_destroy(opt);
    ddpc_ddp_destroy(ddp);
    ddpc_finalize(rt);
    return 0;
}
