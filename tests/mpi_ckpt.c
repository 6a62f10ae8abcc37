/* SPDX-License-Identifier: BSD-3-Clause */
/* mpi_ckpt.c: checkpoints under 1, 2 and 4 ranks, in one process group:
 * save and load into a fresh engine gives bitwise identical parameters,
 * optimizer state, counters and user data on every rank (sync and async,
 * whole and in tiny pieces); retention; none found; a corrupt or truncated
 * newest file is skipped; another model or optimizer is refused with its
 * first difference named; write errors reach every rank; a second writer on
 * the directory is refused naming the first; a sharded optimizer
 * (DDPC_SHARD=optim) saves the unsharded file and loads any file into its
 * slice, on another world size and number of shards too. */
#include "mpitest.h"

#include <dirent.h>
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ helpers */

/* A fresh directory, the same on every rank. */
static void make_dir(char dir[256])
{
    memset(dir, 0, 256);
    if (T_rank == 0) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, 256, "%s/ddpc-ckpt.XXXXXX", t && *t ? t : "/tmp");
        ck_assert_ptr_nonnull(mkdtemp(dir));
    }
    T_OK(ddpc_broadcast(T_comm, dir, 256, DDPC_U8, 0));
}

static void remove_dir(const char *dir)
{
    T_OK(ddpc_barrier(T_comm));
    if (T_rank != 0)
        return;
    remove_flat_dir(dir);
}

static int count_files(const char *dir, const char *must_contain)
{
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, must_contain) != NULL;
    if (d)
        closedir(d);
    return n;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void fill(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((int64_t)(rng_next(&seed) >> 11) - (1ll << 52)) * 0x1p-50f;
}

/* The test model; variants differ from it in one place. */
enum { SAME = 0, OTHER_SHAPE, EXTRA_PARAM, RENAMED, BUFFERS };

typedef struct {
    ddpc_ddp_t ddp;
    ddpc_optim_t opt;
    ddpc_ckpt_t ck;
    float user[10];
} model_t;

#define CK_OK(m, call)                                                                         \
    do {                                                                                       \
        ddpc_status_t st_ = (call);                                                            \
        ck_assert_msg(st_ == DDPC_OK, "rank %d: %s -> %s: %s", T_rank, #call,                  \
                      ddpc_strerror(st_), ddpc_ckpt_last_error((m)->ck));                      \
    } while (0)

/* build's communicator and sharding (the sharding tests change them) */
static ddpc_comm_t B_comm;
static int B_shard = DDPC_SHARD_NONE;

static void build(model_t *m, int variant, int optim, const char *dir, int async, size_t chunk)
{
    static const int64_t emb[] = {7, 5}, fc[] = {3, 7, 2}, fc2[] = {3, 7, 3}, bias[] = {3},
                         big[] = {1100, 2000}, none[] = {0, 4}, extra[] = {2};
    memset(m, 0, sizeof *m);
    ddpc_ddp_config_t dc = DDPC_DDP_CONFIG_INIT;
    dc.shard = B_shard;
    T_OK(ddpc_ddp_create(B_comm ? B_comm : T_comm, &dc, &m->ddp));
    T_OK(ddpc_ddp_add_param(m->ddp, "embed.weight", 2, emb, NULL));
    T_OK(ddpc_ddp_add_param(m->ddp, "fc.weight", 3, variant == OTHER_SHAPE ? fc2 : fc, NULL));
    T_OK(ddpc_ddp_add_param(m->ddp, variant == RENAMED ? "fc.b" : "fc.bias", 1, bias, NULL));
    T_OK(ddpc_ddp_add_param(m->ddp, "scale", 0, NULL, NULL));
    T_OK(ddpc_ddp_add_param(m->ddp, "empty", 2, none, NULL));
    if (!chunk || chunk >= 4096) /* > one 8 MiB write piece; too many tiny pieces */
        T_OK(ddpc_ddp_add_param(m->ddp, "big/table", 2, big, NULL));
    if (variant == EXTRA_PARAM)
        T_OK(ddpc_ddp_add_param(m->ddp, "extra", 1, extra, NULL));
    if (variant == BUFFERS) { /* BatchNorm's: saved as /model/<name> after the parameters */
        T_OK(ddpc_ddp_add_buffer(m->ddp, "bn.running_mean", 1, bias, NULL));
        T_OK(ddpc_ddp_add_buffer(m->ddp, "bn.num_batches_tracked", 0, NULL, NULL));
        T_OK(ddpc_ddp_add_buffer(m->ddp, "bn.running_var", 1, bias, NULL));
    }
    T_OK(ddpc_ddp_build(m->ddp));
    if (optim >= 0) {
        ddpc_optim_config_t oc = DDPC_OPTIM_CONFIG_INIT;
        oc.type = (ddpc_optim_type_t)optim;
        oc.lr = 0.05;
        oc.momentum = 0.9;
        oc.nesterov = 1;
        oc.weight_decay = 0.01;
        T_OK(ddpc_optim_create(m->ddp, &oc, &m->opt));
    }
    ddpc_ckpt_config_t cc = DDPC_CKPT_CONFIG_INIT;
    cc.dir = dir;
    cc.async = async;
    cc.keep = 0;
    if (chunk)
        cc.chunk_bytes = chunk;
    ddpc_status_t st = ddpc_ckpt_create(m->ddp, m->opt, &cc, &m->ck);
    ck_assert_msg(st == DDPC_OK, "ckpt_create: %s", ddpc_ckpt_last_error(m->ck));
    CK_OK(m, ddpc_ckpt_add_user_tensor(m->ck, "ema", m->user, 10));
}

/* build() with the engine sharded as shard (DDPC_SHARD_*). */
static void build_sharded(model_t *m, int shard, int variant, int optim, const char *dir,
                          int async, size_t chunk)
{
    B_shard = shard;
    build(m, variant, optim, dir, async, chunk);
    B_shard = DDPC_SHARD_NONE;
}

/* Parameters from a seed (the same on every rank), then a few optimizer
 * steps on made-up gradients so that the state is not zero. */
static void train_a_little(model_t *m, uint64_t seed)
{
    size_t n, goff, gn;
    float *p = ddpc_ddp_params(m->ddp, &n);
    /* the gradients this rank holds: the arena, or its slice (shard grads) */
    float *g = ddpc_ddp_grad_slice(m->ddp, &goff, &gn), *all = malloc(n * sizeof *all);
    ck_assert_ptr_nonnull(all);
    fill(p, n, seed);
    size_t nb;
    float *bufs = ddpc_ddp_buffers(m->ddp, &nb); /* nb set by the call: not in one expression */
    fill(bufs, nb, seed + 50);
    for (int s = 0; s < 3 && m->opt; s++) {
        fill(all, n, seed + 100 + (uint64_t)s);
        memcpy(g, all + goff, gn * sizeof *g);
        T_OK(ddpc_optim_step(m->opt, NULL));
    }
    free(all);
    if (m->opt) { /* a loss scaler part-way to its next growth */
        ddpc_optim_set_loss_scale(m->opt, 128.0);
        ddpc_optim_set_scale_good_steps(m->opt, 5 + (int)(seed % 7));
    }
    fill(m->user, 10, seed + 7);
}

/* Rank-dependent junk: a load must overwrite it everywhere. */
static void scramble(model_t *m)
{
    size_t n;
    float *p = ddpc_ddp_params(m->ddp, &n);
    fill(p, n, 999 + (uint64_t)T_rank);
    size_t len = n; /* a sharded optimizer's slice */
    if (m->opt)
        T_OK(ddpc_optim_state_range(m->opt, NULL, &len));
    size_t nb;
    float *bufs = ddpc_ddp_buffers(m->ddp, &nb);
    fill(bufs, nb, 333 + (uint64_t)T_rank);
    for (int k = 0; k < ddpc_optim_num_states(m->opt); k++)
        fill(ddpc_optim_state(m->opt, k, NULL), len, 555 + (uint64_t)T_rank);
    fill(m->user, 10, 77 + (uint64_t)T_rank);
    ddpc_optim_set_loss_scale(m->opt, 1.0 + T_rank);
    ddpc_optim_set_scale_good_steps(m->opt, 100 + T_rank);
}

static void assert_same_state(model_t *a, model_t *b)
{
    size_t n, nb;
    float *pa = ddpc_ddp_params(a->ddp, &n), *pb = ddpc_ddp_params(b->ddp, &nb);
    ck_assert_uint_eq(n, nb);
    ck_assert_msg(!memcmp(pa, pb, n * sizeof *pa), "rank %d: parameters differ", T_rank);
    pa = ddpc_ddp_buffers(a->ddp, &n);
    pb = ddpc_ddp_buffers(b->ddp, &nb);
    ck_assert_uint_eq(n, nb);
    ck_assert_msg(!memcmp(pa, pb, n * sizeof *pa), "rank %d: buffers differ", T_rank);
    ddpc_ddp_params(a->ddp, &n);
    ck_assert_int_eq(ddpc_optim_num_states(a->opt), ddpc_optim_num_states(b->opt));
    for (int k = 0; k < ddpc_optim_num_states(a->opt); k++) {
        const char *name;
        ck_assert_msg(!memcmp(ddpc_optim_state(a->opt, k, &name), ddpc_optim_state(b->opt, k, NULL),
                              n * sizeof(float)),
                      "rank %d: optimizer state %s differs", T_rank, name);
    }
    ck_assert_uint_eq(ddpc_optim_steps(a->opt), ddpc_optim_steps(b->opt));
    ck_assert_double_eq(ddpc_optim_loss_scale(a->opt), ddpc_optim_loss_scale(b->opt));
    ck_assert_int_eq(ddpc_optim_scale_good_steps(a->opt), ddpc_optim_scale_good_steps(b->opt));
    ck_assert_msg(!memcmp(a->user, b->user, sizeof a->user), "rank %d: user tensor differs", T_rank);
}

static void destroy(model_t *m)
{
    ddpc_ckpt_destroy(m->ck);
    ddpc_optim_destroy(m->opt);
    ddpc_ddp_destroy(m->ddp);
}

static ddpc_ckpt_meta_t some_meta(uint64_t step)
{
    ddpc_ckpt_meta_t mt;
    memset(&mt, 0, sizeof mt);
    mt.step = step;
    mt.epoch = 3;
    mt.has_sampler = 1;
    mt.sampler_seed = 42;
    mt.sampler_epoch = 3;
    mt.sampler_consumed = 1234;
    mt.sampler_dataset_size = 60000;
    mt.sampler_shuffle = 1;
    mt.sampler_drop_last = 1;
    mt.rng_bytes = 32;
    for (int i = 0; i < 32; i++)
        mt.rng[i] = (uint8_t)(i * 37 + 1);
    return mt;
}

/* ------------------------------------------------------------------ round trips */

static void round_trip(int variant, int optim, int async, size_t chunk)
{
    char dir[256], path[600], want[600];
    make_dir(dir);
    model_t a, b;
    build(&a, variant, optim, dir, async, chunk);
    train_a_little(&a, 1);
    CK_OK(&a, ddpc_ckpt_set_user_attr_double(a.ck, "loss", 0.125));
    CK_OK(&a, ddpc_ckpt_set_user_attr_string(a.ck, "run", "round trip"));
    /* the application's values whatever they are: a diverged run's loss */
    CK_OK(&a, ddpc_ckpt_set_user_attr_double(a.ck, "diverged", NAN));
    CK_OK(&a, ddpc_ckpt_set_user_attr_double(a.ck, "peak", -INFINITY));
    ddpc_ckpt_meta_t mt = some_meta(1200);
    CK_OK(&a, ddpc_ckpt_save(a.ck, &mt));
    if (async) { /* the snapshot was taken: changes now must not reach the file */
        size_t n;
        float *p = ddpc_ddp_params(a.ddp, &n);
        float *keep = malloc(n * sizeof *p);
        memcpy(keep, p, n * sizeof *p);
        fill(p, n, 4242);
        CK_OK(&a, ddpc_ckpt_wait(a.ck));
        memcpy(p, keep, n * sizeof *p);
        free(keep);
    }
    build(&b, variant, optim, dir, 0, chunk);
    scramble(&b);
    ddpc_ckpt_meta_t got;
    memset(&got, 0xff, sizeof got);
    CK_OK(&b, ddpc_ckpt_load(b.ck, NULL, &got, path, sizeof path));
    snprintf(want, sizeof want, "%s/ckpt-00001200.h5", dir);
    ck_assert_str_eq(path, want);
    assert_same_state(&a, &b);
    ck_assert_uint_eq(got.step, 1200);
    ck_assert_uint_eq(got.epoch, 3);
    ck_assert_int_eq(got.has_sampler, 1);
    ck_assert_uint_eq(got.sampler_seed, 42);
    ck_assert_uint_eq(got.sampler_epoch, 3);
    ck_assert_uint_eq(got.sampler_consumed, 1234);
    ck_assert_uint_eq(got.sampler_dataset_size, 60000);
    ck_assert_int_eq(got.sampler_shuffle, 1);
    ck_assert_int_eq(got.sampler_drop_last, 1);
    ck_assert_uint_eq(got.rng_bytes, 32);
    ck_assert(!memcmp(got.rng, mt.rng, 32));
    ck_assert_int_eq(got.world_size, T_size);
    double loss = 0;
    char run[64];
    CK_OK(&b, ddpc_ckpt_get_user_attr_double(b.ck, "loss", &loss));
    ck_assert_double_eq(loss, 0.125);
    CK_OK(&b, ddpc_ckpt_get_user_attr_string(b.ck, "run", run, sizeof run));
    ck_assert_str_eq(run, "round trip");
    CK_OK(&b, ddpc_ckpt_get_user_attr_double(b.ck, "diverged", &loss));
    ck_assert(isnan(loss));
    CK_OK(&b, ddpc_ckpt_get_user_attr_double(b.ck, "peak", &loss));
    ck_assert(isinf(loss) && loss < 0);
    ck_assert_int_eq(ddpc_ckpt_get_user_attr_double(b.ck, "run", &loss), DDPC_ERR_NOT_FOUND);
    ck_assert_double_eq(ddpc_optim_config(b.opt)->lr, 0.05);
    destroy(&a);
    destroy(&b);
    remove_dir(dir);
}

START_TEST(round_trip_sgd_momentum)
{
    round_trip(SAME, DDPC_OPTIM_SGD, 0, 0);
}
END_TEST

START_TEST(round_trip_adamw_async)
{
    round_trip(SAME, DDPC_OPTIM_ADAMW, 1, 0);
    round_trip(BUFFERS, DDPC_OPTIM_SGD, 1, 0);
}
END_TEST

START_TEST(round_trip_in_tiny_pieces)
{
    /* 3 and 8 floats per piece: every split dimension of the piece walker */
    round_trip(BUFFERS, DDPC_OPTIM_ADAMW, 0, 12);
    round_trip(SAME, DDPC_OPTIM_SGD, 1, 32);
    round_trip(BUFFERS, DDPC_OPTIM_SGD, 0, 0);
}
END_TEST

START_TEST(parameters_only)
{
    char dir[256];
    make_dir(dir);
    model_t a, b;
    build(&a, SAME, DDPC_OPTIM_ADAMW, dir, 0, 0);
    train_a_little(&a, 5);
    CK_OK(&a, ddpc_ckpt_save(a.ck, NULL));
    build(&b, SAME, -1, dir, 0, 0); /* no optimizer: its state in the file is ignored */
    scramble(&b);
    CK_OK(&b, ddpc_ckpt_load(b.ck, NULL, NULL, NULL, 0));
    size_t n;
    const float *pa = ddpc_ddp_params(a.ddp, &n); /* sets n: not in memcmp's arguments */
    ck_assert(!memcmp(pa, ddpc_ddp_params(b.ddp, NULL), n * sizeof(float)));
    destroy(&a);
    destroy(&b);
    remove_dir(dir);
}
END_TEST

/* ------------------------------------------------------------------ directory */

START_TEST(not_found_on_every_rank)
{
    char dir[256], sub[300];
    make_dir(dir);
    model_t m;
    build(&m, SAME, DDPC_OPTIM_SGD, dir, 0, 0);
    ck_assert_int_eq(ddpc_ckpt_load(m.ck, NULL, NULL, NULL, 0), DDPC_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(ddpc_ckpt_last_error(m.ck), "no checkpoint in"));
    ck_assert_int_eq(ddpc_ckpt_load(m.ck, "/nonexistent/ckpt-1.h5", NULL, NULL, 0),
                     DDPC_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(ddpc_ckpt_last_error(m.ck), "/nonexistent/ckpt-1.h5"));
    destroy(&m);
    snprintf(sub, sizeof sub, "%s/never-made", dir);
    build(&m, SAME, DDPC_OPTIM_SGD, sub, 0, 0);
    ck_assert_int_eq(ddpc_ckpt_load(m.ck, NULL, NULL, NULL, 0), DDPC_ERR_NOT_FOUND);
    destroy(&m);
    remove_dir(dir);
}
END_TEST

START_TEST(keeps_the_newest_n)
{
    char dir[256], p[600];
    make_dir(dir);
    setenv("DDPC_CKPT_KEEP", "2", 1);
    model_t m;
    build(&m, SAME, DDPC_OPTIM_SGD, dir, 1, 0);
    unsetenv("DDPC_CKPT_KEEP");
    for (uint64_t s = 1; s <= 5; s++) {
        ddpc_ckpt_meta_t mt = some_meta(s * 100);
        CK_OK(&m, ddpc_ckpt_save(m.ck, &mt));
    }
    CK_OK(&m, ddpc_ckpt_wait(m.ck));
    if (T_rank == 0) {
        ck_assert_int_eq(count_files(dir, "ckpt-"), 2);
        snprintf(p, sizeof p, "%s/ckpt-00000400.h5", dir);
        ck_assert_int_eq(access(p, F_OK), 0);
        snprintf(p, sizeof p, "%s/ckpt-00000500.h5", dir);
        ck_assert_int_eq(access(p, F_OK), 0);
    }
    ddpc_ckpt_meta_t got;
    CK_OK(&m, ddpc_ckpt_load(m.ck, NULL, &got, NULL, 0));
    ck_assert_uint_eq(got.step, 500);
    destroy(&m);
    remove_dir(dir);
}
END_TEST

/* ------------------------------------------------------------------ faults */

/* Rank 0: flip one bit in the middle of a dataset's bytes, or cut the file. */
static void flip_bit(const char *file, const char *dset)
{
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    haddr_t off = H5Dget_offset(d) + H5Dget_storage_size(d) / 2;
    H5Dclose(d);
    H5Fclose(f);
    FILE *fp = fopen(file, "r+b");
    ck_assert_ptr_nonnull(fp);
    fseek(fp, (long)off, SEEK_SET);
    int c = fgetc(fp);
    fseek(fp, (long)off, SEEK_SET);
    fputc(c ^ 0x10, fp);
    fclose(fp);
}

static void cut_in_half(const char *file)
{
    FILE *fp = fopen(file, "rb");
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fclose(fp);
    ck_assert_int_eq(truncate(file, n / 2), 0);
}

START_TEST(corrupt_newest_is_skipped)
{
    char dir[256], path[600], p20[600], p30[600];
    make_dir(dir);
    model_t a, b;
    build(&a, SAME, DDPC_OPTIM_ADAMW, dir, 0, 0);
    train_a_little(&a, 11);
    ddpc_ckpt_meta_t mt = some_meta(10);
    CK_OK(&a, ddpc_ckpt_save(a.ck, &mt));
    ddpc_ckpt_destroy(a.ck); /* releases the directory for b's saves */
    a.ck = NULL;
    build(&b, SAME, DDPC_OPTIM_ADAMW, dir, 0, (size_t)1 << 20);
    train_a_little(&b, 12); /* different values, saved as steps 20 and 30 */
    mt.step = 20;
    CK_OK(&b, ddpc_ckpt_save(b.ck, &mt));
    mt.step = 30;
    CK_OK(&b, ddpc_ckpt_save(b.ck, &mt));
    snprintf(p20, sizeof p20, "%s/ckpt-00000020.h5", dir);
    snprintf(p30, sizeof p30, "%s/ckpt-00000030.h5", dir);
    if (T_rank == 0) {
        flip_bit(p30, "/optim/exp_avg_sq/big/table"); /* found by the CRC, late in the stream */
        cut_in_half(p20);                             /* found at open */
    }
    T_OK(ddpc_barrier(T_comm));
    scramble(&b);
    ddpc_ckpt_meta_t got;
    CK_OK(&b, ddpc_ckpt_load(b.ck, NULL, &got, path, sizeof path));
    ck_assert_uint_eq(got.step, 10);
    ck_assert_str_eq(path + strlen(path) - 16, "ckpt-00000010.h5");
    assert_same_state(&a, &b);
    /* the skipped ones were moved aside, so that retention does not count them */
    if (T_rank == 0) {
        struct stat sb;
        ck_assert_int_ne(stat(p30, &sb), 0);
        ck_assert_int_ne(stat(p20, &sb), 0);
    }
    strcat(p30, ".corrupt");
    strcat(p20, ".corrupt");
    if (T_rank == 0) {
        struct stat sb;
        ck_assert_int_eq(stat(p30, &sb), 0);
        ck_assert_int_eq(stat(p20, &sb), 0);
    }
    /* asked for by name, a corrupt file is an error, not a fallback */
    ck_assert_int_eq(ddpc_ckpt_load(b.ck, p30, NULL, NULL, 0), DDPC_ERR_FORMAT);
    const char *e = ddpc_ckpt_last_error(b.ck);
    ck_assert_msg(strstr(e, "CRC-32") && strstr(e, "exp_avg_sq/big/table") && strstr(e, p30),
                  "%s", e);
    if (T_rank != 0)
        ck_assert_ptr_nonnull(strstr(e, "failed on rank 0"));
    /* nothing valid left: FORMAT on every rank, naming the newest problem */
    if (T_rank == 0) {
        snprintf(path, sizeof path, "%s/ckpt-00000010.h5", dir);
        cut_in_half(path);
    }
    T_OK(ddpc_barrier(T_comm));
    ck_assert_int_eq(ddpc_ckpt_load(b.ck, NULL, NULL, NULL, 0), DDPC_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(ddpc_ckpt_last_error(b.ck), "no valid checkpoint"));
    destroy(&a);
    destroy(&b);
    remove_dir(dir);
}
END_TEST

static void refused_from(int saved, int variant, int optim, const char *needle)
{
    char dir[256];
    make_dir(dir);
    model_t a, b;
    build(&a, saved, DDPC_OPTIM_SGD, dir, 0, 0);
    train_a_little(&a, 3);
    CK_OK(&a, ddpc_ckpt_save(a.ck, NULL));
    build(&b, variant, optim, dir, 0, 0);
    ck_assert_int_eq(ddpc_ckpt_load(b.ck, NULL, NULL, NULL, 0), DDPC_ERR_MISMATCH);
    ck_assert_msg(strstr(ddpc_ckpt_last_error(b.ck), needle), "rank %d: expected \"%s\" in: %s",
                  T_rank, needle, ddpc_ckpt_last_error(b.ck));
    destroy(&a);
    destroy(&b);
    remove_dir(dir);
}

static void refused(int variant, int optim, const char *needle)
{
    refused_from(SAME, variant, optim, needle);
}

START_TEST(other_model_refused_naming_the_parameter)
{
    refused(OTHER_SHAPE, DDPC_OPTIM_SGD,
            "/model/fc.weight is float32[3, 7, 3] here but float32[3, 7, 2]");
    refused(RENAMED, DDPC_OPTIM_SGD,
            "parameter 2 is \"fc.b\" here but \"fc.bias\" in the checkpoint");
    refused(EXTRA_PARAM, DDPC_OPTIM_SGD, "parameter 6 \"extra\" is only in the model");
    refused(SAME, DDPC_OPTIM_ADAMW, "holds sgd optimizer state, but the optimizer is adamw");
    /* buffers are part of the model: a checkpoint without them is another one */
    refused(BUFFERS, DDPC_OPTIM_SGD, "parameter 6 \"bn.running_mean\" is only in the model");
    refused_from(BUFFERS, SAME, DDPC_OPTIM_SGD,
                 "parameter 6 \"bn.running_mean\" is only in the checkpoint");
}
END_TEST

START_TEST(write_errors_reach_every_rank)
{
    char dir[256], bad[600];
    make_dir(dir);
    snprintf(bad, sizeof bad, "%s/a-file/ckpt", dir); /* a directory under a regular file */
    if (T_rank == 0) {
        snprintf(bad, sizeof bad, "%s/a-file", dir);
        fclose(fopen(bad, "w"));
        snprintf(bad, sizeof bad, "%s/a-file/ckpt", dir);
    }
    /* sharded too: rank 0 takes the windows it never wrote, no rank is left sending */
    for (int k = 0; k < 4; k++) {
        const int async = k & 1;
        model_t m;
        build_sharded(&m, k < 2 ? DDPC_SHARD_NONE : DDPC_SHARD_OPTIM, SAME, DDPC_OPTIM_SGD, bad,
                      async, 0);
        train_a_little(&m, 9);
        size_t n;
        const float *p = ddpc_ddp_params(m.ddp, &n);
        float *before = malloc(n * sizeof *p);
        memcpy(before, p, n * sizeof *p);
        uint64_t steps = ddpc_optim_steps(m.opt);
        /* async too: the first save makes and checks the directory before
           the snapshot (ddpc_ckpt_prepare), so its failure is the save's own */
        ddpc_status_t st = ddpc_ckpt_save(m.ck, NULL);
        ck_assert_int_eq(st, DDPC_ERR_IO);
        const char *e = ddpc_ckpt_last_error(m.ck);
        ck_assert_msg(strstr(e, "a-file/ckpt") && strstr(e, "Not a directory"), "%s", e);
        /* one message, one prefix: rank 0's cause is chained without its own */
        int prefixes = 0;
        for (const char *q = e; (q = strstr(q, "ddpc[rank ")) != NULL; q++)
            prefixes++;
        ck_assert_msg(prefixes == 1 && strncmp(e, "ddpc[rank ", 10) == 0,
                      "%d rank prefixes in: %s", prefixes, e);
        if (T_rank != 0)
            ck_assert_msg(strstr(e, "failed on rank 0: ckpt: "), "%s", e);
        ck_assert(!memcmp(before, p, n * sizeof *p)); /* the training state is untouched */
        ck_assert_uint_eq(ddpc_optim_steps(m.opt), steps);
        CK_OK(&m, ddpc_ckpt_wait(m.ck)); /* reported once */
        ck_assert_int_eq(ddpc_ckpt_load(m.ck, NULL, NULL, NULL, 0), DDPC_ERR_IO);
        ck_assert_ptr_nonnull(strstr(ddpc_ckpt_last_error(m.ck), "cannot list the checkpoint directory"));
        free(before);
        destroy(&m);
    }
    remove_dir(dir);
}
END_TEST

START_TEST(bad_config)
{
    model_t m;
    memset(&m, 0, sizeof m);
    T_OK(ddpc_ddp_create(T_comm, NULL, &m.ddp));
    T_OK(ddpc_ddp_build(m.ddp));
    ddpc_ckpt_config_t cc = DDPC_CKPT_CONFIG_INIT;
    unsetenv("DDPC_CKPT_DIR");
    ck_assert_int_eq(ddpc_ckpt_create(m.ddp, NULL, &cc, &m.ck), DDPC_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(ddpc_ckpt_last_error(m.ck), "DDPC_CKPT_DIR"));
    ddpc_ckpt_destroy(m.ck);
    cc.dir = "/tmp";
    setenv("DDPC_CKPT_KEEP", "-1", 1);
    ck_assert_int_eq(ddpc_ckpt_create(m.ddp, NULL, &cc, &m.ck), DDPC_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(ddpc_ckpt_last_error(m.ck), "DDPC_CKPT_KEEP"));
    unsetenv("DDPC_CKPT_KEEP");
    ddpc_ckpt_destroy(m.ck);
    ddpc_ddp_destroy(m.ddp);
}
END_TEST

/* Two writers on one directory: the second is refused on every rank with a
 * message naming the holder (rank 0's host and pid), writes nothing, and
 * gets the directory once the first handle is gone. */
START_TEST(second_writer_is_refused)
{
    char dir[256], text[4096] = "", want[64];
    make_dir(dir);
    model_t a, b;
    build(&a, SAME, DDPC_OPTIM_SGD, dir, 0, 0);
    build(&b, SAME, DDPC_OPTIM_SGD, dir, 0, 0);
    CK_OK(&a, ddpc_ckpt_prepare(a.ck));
    long pid0 = (long)getpid();
    T_OK(ddpc_broadcast(T_comm, &pid0, sizeof pid0, DDPC_U8, 0));
    snprintf(want, sizeof want, "pid %ld,", pid0);
    if (T_rank == 0) {
        char lock[512];
        snprintf(lock, sizeof lock, "%s/ddpc.lock", dir);
        FILE *f = fopen(lock, "r");
        ck_assert_ptr_nonnull(f);
        text[fread(text, 1, sizeof text - 1, f)] = 0;
        fclose(f);
        char line[64];
        snprintf(line, sizeof line, "\npid=%ld\n", pid0);
        ck_assert_msg(strstr(text, line), "the lock file does not name pid %ld: %s", pid0, text);
    }
    ck_assert_int_eq(ddpc_ckpt_prepare(b.ck), DDPC_ERR_BUSY);
    const char *msg = ddpc_ckpt_last_error(b.ck);
    ck_assert_msg(strstr(msg, "is in use by another job") && strstr(msg, want) &&
                      strstr(msg, ddpc_world(T_rt)->host) && strstr(msg, dir),
                  "rank %d: %s", T_rank, msg);
    ddpc_ckpt_meta_t mt = some_meta(5);
    ck_assert_int_eq(ddpc_ckpt_save(b.ck, &mt), DDPC_ERR_BUSY);
    ck_assert_int_eq(ddpc_ckpt_load(b.ck, NULL, NULL, NULL, 0), DDPC_ERR_NOT_FOUND);
    /* waiting: refused after about the wait, and saying it waited */
    setenv("DDPC_CKPT_LOCK_WAIT", "0.5", 1);
    model_t c;
    build(&c, SAME, DDPC_OPTIM_SGD, dir, 0, 0);
    unsetenv("DDPC_CKPT_LOCK_WAIT");
    struct timespec ts0, ts1;
    clock_gettime(CLOCK_MONOTONIC, &ts0);
    ck_assert_int_eq(ddpc_ckpt_prepare(c.ck), DDPC_ERR_BUSY);
    if (T_rank == 0) {
        clock_gettime(CLOCK_MONOTONIC, &ts1);
        ck_assert_double_ge((double)(ts1.tv_sec - ts0.tv_sec) + 1e-9 * (double)(ts1.tv_nsec - ts0.tv_nsec), 0.45);
        ck_assert_ptr_nonnull(strstr(ddpc_ckpt_last_error(c.ck), "waited"));
    }
    ddpc_ckpt_destroy(a.ck); /* the lock is released: b may write */
    a.ck = NULL;
    CK_OK(&b, ddpc_ckpt_save(b.ck, &mt));
    ck_assert_int_eq(ddpc_ckpt_prepare(c.ck), DDPC_ERR_BUSY);
    destroy(&a);
    destroy(&b);
    destroy(&c);
    remove_dir(dir);
}
END_TEST

/* ------------------------------------------------------------------ sharding */

/* s (a sharded optimizer) holds a's (unsharded) parameters, counters and
 * user tensor bitwise, and its slice of a's state (zero past the arena). */
static void assert_slice_of(model_t *a, model_t *s)
{
    size_t n, ns, off, len;
    float *pa = ddpc_ddp_params(a->ddp, &n), *ps = ddpc_ddp_params(s->ddp, &ns);
    ck_assert_uint_eq(n, ns);
    ck_assert_msg(!memcmp(pa, ps, n * sizeof *pa), "rank %d: parameters differ", T_rank);
    T_OK(ddpc_optim_state_range(s->opt, &off, &len));
    ck_assert_int_eq(ddpc_optim_num_states(a->opt), ddpc_optim_num_states(s->opt));
    for (int k = 0; k < ddpc_optim_num_states(a->opt); k++) {
        const char *name;
        const float *full = ddpc_optim_state(a->opt, k, &name), *mine = ddpc_optim_state(s->opt, k, NULL);
        /* one assertion per state (Check records each one's location
         * through a pipe: one per float was a million writes) */
        size_t i = 0;
        float w = 0.0f;
        for (; i < len; i++) {
            w = off + i < n ? full[off + i] : 0.0f;
            if (memcmp(&w, &mine[i], sizeof w))
                break;
        }
        ck_assert_msg(i == len, "rank %d: %s float %zu is %g, expected %g", T_rank, name, off + i,
                      i < len ? mine[i] : 0.0, w);
    }
    ck_assert_uint_eq(ddpc_optim_steps(a->opt), ddpc_optim_steps(s->opt));
    ck_assert_double_eq(ddpc_optim_loss_scale(a->opt), ddpc_optim_loss_scale(s->opt));
    ck_assert_int_eq(ddpc_optim_scale_good_steps(a->opt), ddpc_optim_scale_good_steps(s->opt));
    ck_assert_msg(!memcmp(a->user, s->user, sizeof a->user), "rank %d: user tensor differs", T_rank);
}

/* A sharded run (DDPC_SHARD=optim) trained like an unsharded one saves the
 * file the unsharded one saves (loaded unsharded: bitwise its state); the
 * unsharded file loads sharded into each rank's slice; and a sharded file
 * loads sharded on fewer ranks (another N, another world size). */
static void sharded_checkpoints(int optim, int async, int shard)
{
    char da[256], ds[256];
    make_dir(da);
    make_dir(ds);
    model_t a, s, u, t;
    build(&a, SAME, optim, da, 0, 0);
    build_sharded(&s, shard, SAME, optim, ds, async, 0);
    size_t len, n;
    ddpc_ddp_params(a.ddp, &n);
    T_OK(ddpc_optim_state_range(s.opt, NULL, &len));
    ck_assert_uint_eq(len, ((n + (size_t)T_size - 1) / (size_t)T_size + 15) / 16 * 16);
    train_a_little(&a, 3);
    train_a_little(&s, 3);
    assert_slice_of(&a, &s); /* the sharded steps are the unsharded ones */
    ddpc_ckpt_meta_t mt = some_meta(700);
    CK_OK(&a, ddpc_ckpt_save(a.ck, &mt));
    CK_OK(&s, ddpc_ckpt_save(s.ck, &mt));
    CK_OK(&s, ddpc_ckpt_wait(s.ck));
    /* sharded save -> unsharded load */
    build(&u, SAME, optim, ds, 0, 0);
    scramble(&u);
    CK_OK(&u, ddpc_ckpt_load(u.ck, NULL, NULL, NULL, 0));
    assert_same_state(&a, &u);
    destroy(&u);
    destroy(&s); /* its handle holds the directory's lock */
    /* unsharded save -> sharded load, then saved again sharded */
    build_sharded(&t, shard, SAME, optim, da, 0, 0);
    scramble(&t);
    CK_OK(&t, ddpc_ckpt_load(t.ck, NULL, NULL, NULL, 0));
    assert_slice_of(&a, &t);
    destroy(&t);
    /* sharded on N -> sharded on the first (N+1)/2 ranks only */
    const int half = (T_size + 1) / 2;
    int ranks[4] = {0, 1, 2, 3};
    ddpc_comm_t sub = NULL;
    T_OK(ddpc_comm_group(T_comm, ranks, half, NULL, &sub));
    if (sub) {
        B_comm = sub;
        build_sharded(&t, shard, SAME, optim, ds, 0, 0);
        scramble(&t);
        CK_OK(&t, ddpc_ckpt_load(t.ck, NULL, NULL, NULL, 0));
        assert_slice_of(&a, &t);
        /* and its own save ((N+1)/2 shards) loads unsharded on the whole world */
        ddpc_ckpt_meta_t m2 = some_meta(800);
        CK_OK(&t, ddpc_ckpt_save(t.ck, &m2));
        destroy(&t);
        B_comm = NULL;
        ddpc_comm_destroy(sub);
    }
    build(&u, SAME, optim, ds, 0, 0);
    scramble(&u);
    ddpc_ckpt_meta_t got;
    CK_OK(&u, ddpc_ckpt_load(u.ck, NULL, &got, NULL, 0));
    ck_assert_uint_eq(got.step, 800);
    ck_assert_int_eq(got.world_size, half);
    assert_same_state(&a, &u);
    destroy(&u);
    destroy(&a);
    remove_dir(da);
    remove_dir(ds);
}

/* A sharded state (AdamW: two of 2.2 million floats, 8.8 MB each) saved
 * and loaded through 64 KiB windows: no rank's handle ever holds more than
 * two windows (rank 0 a window and a write piece; a load two windows), and
 * the file and the slices are those of the unsharded run. */
START_TEST(sharded_checkpoint_memory_is_bounded)
{
    const size_t chunk = (size_t)64 << 10;
    char da[256], ds[256];
    make_dir(da);
    make_dir(ds);
    model_t a, s, u, t;
    build(&a, SAME, DDPC_OPTIM_ADAMW, da, 0, 0);
    build_sharded(&s, DDPC_SHARD_OPTIM, SAME, DDPC_OPTIM_ADAMW, ds, 0, chunk);
    train_a_little(&a, 5);
    train_a_little(&s, 5);
    size_t n, peak = 1;
    ddpc_ddp_params(a.ddp, &n);
    const size_t state_bytes = 2 * n * sizeof(float); /* a whole copy, as rank 0 held it */
    ck_assert_uint_eq(ddpc_ckpt_host_bytes(s.ck, &peak), 0);
    ck_assert_uint_eq(peak, 0);
    ddpc_ckpt_meta_t mt = some_meta(900);
    CK_OK(&s, ddpc_ckpt_save(s.ck, &mt));
    ck_assert_uint_eq(ddpc_ckpt_host_bytes(s.ck, &peak), 0); /* the window is given back */
    ck_assert_msg(peak <= 2 * chunk, "rank %d: the save held %zu bytes, more than two %zu-byte "
                  "windows (the state is %zu bytes)", T_rank, peak, chunk, state_bytes);
    ck_assert_msg(T_rank != 0 || peak == 2 * chunk, "rank 0 held %zu bytes, not its window and "
                  "piece", peak);
    ck_assert_msg(T_rank == 0 || T_size == 1 || peak == 0, "rank %d held %zu bytes", T_rank, peak);
    destroy(&s);
    /* the file is the unsharded one: loaded unsharded, bitwise a's state */
    build(&u, SAME, DDPC_OPTIM_ADAMW, ds, 0, 0);
    scramble(&u);
    CK_OK(&u, ddpc_ckpt_load(u.ck, NULL, NULL, NULL, 0));
    assert_same_state(&a, &u);
    destroy(&u);
    /* and loaded sharded through 64 KiB windows: each rank's slice */
    build_sharded(&t, DDPC_SHARD_OPTIM, SAME, DDPC_OPTIM_ADAMW, ds, 0, chunk);
    scramble(&t);
    CK_OK(&t, ddpc_ckpt_load(t.ck, NULL, NULL, NULL, 0));
    assert_slice_of(&a, &t);
    ck_assert_uint_eq(ddpc_ckpt_host_bytes(t.ck, &peak), 0);
    ck_assert_msg(peak == 2 * chunk, "rank %d: the load held %zu bytes, expected two %zu-byte "
                  "windows", T_rank, peak, chunk);
    destroy(&t);
    destroy(&a);
    remove_dir(da);
    remove_dir(ds);
}
END_TEST

START_TEST(sharded_sgd_checkpoints)
{
    sharded_checkpoints(DDPC_OPTIM_SGD, 0, DDPC_SHARD_OPTIM);
}
END_TEST

START_TEST(zero2_sgd_checkpoints)
{
    sharded_checkpoints(DDPC_OPTIM_SGD, 0, DDPC_SHARD_GRADS);
}
END_TEST

START_TEST(sharded_adamw_checkpoints_async)
{
    sharded_checkpoints(DDPC_OPTIM_ADAMW, 1, DDPC_SHARD_OPTIM);
}
END_TEST

static Suite *ckpt_suite(void)
{
    Suite *s = suite_create("ckpt");
    TCase *core = tcase_create("core");
    tcase_set_timeout(core, 120);
    tcase_add_test(core, round_trip_sgd_momentum);
    tcase_add_test(core, round_trip_adamw_async);
    tcase_add_test(core, round_trip_in_tiny_pieces);
    tcase_add_test(core, parameters_only);
    tcase_add_test(core, not_found_on_every_rank);
    tcase_add_test(core, keeps_the_newest_n);
    tcase_add_test(core, sharded_sgd_checkpoints);
    tcase_add_test(core, sharded_adamw_checkpoints_async);
    tcase_add_test(core, zero2_sgd_checkpoints);
    tcase_add_test(core, sharded_checkpoint_memory_is_bounded);
    suite_add_tcase(s, core);
    TCase *bad = tcase_create("bad input");
    tcase_set_timeout(bad, 120);
    tcase_add_test(bad, corrupt_newest_is_skipped);
    tcase_add_test(bad, other_model_refused_naming_the_parameter);
    tcase_add_test(bad, write_errors_reach_every_rank);
    tcase_add_test(bad, bad_config);
    tcase_add_test(bad, second_writer_is_refused);
    suite_add_tcase(s, bad);
    return s;
}

MPI_TEST_MAIN(ckpt_suite)
