/* SPDX-License-Identifier: BSD-3-Clause */
/* check_trainer.c: the trainer's parts that need no MPI: option parsing and
 * its errors, the models' gradients against finite differences (linear and
 * MLP, small sizes), the order in which backward reports gradients, and the
 * GPU selection rule. */
#include "ddpc.h"
#include "device.h"
#include "model.h"
#include "options.h"

#include <check.h>
#include <stdarg.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "checkmain.h"

/* ------------------------------------------------------------------ options */
static int parse(options_t *o, char *err, size_t n, ...)
{
    char *argv[64] = {"trainer"};
    int argc = 1;
    va_list ap;
    va_start(ap, n);
    for (char *a; (a = va_arg(ap, char *)) && argc < 63;)
        argv[argc++] = a;
    va_end(ap);
    options_default(o);
    err[0] = 0;
    return options_parse(o, argc, argv, err, n);
}

#define PARSE_OK(o, ...)                                                                       \
    do {                                                                                       \
        char e_[256];                                                                          \
        ck_assert_msg(parse(o, e_, sizeof e_, __VA_ARGS__, NULL) == 0, "%s", e_);              \
    } while (0)

/* parse must fail and its message contain each of the strings given */
#define PARSE_BAD(want1, want2, ...)                                                           \
    do {                                                                                       \
        options_t o_;                                                                          \
        char e_[256];                                                                          \
        ck_assert_int_eq(parse(&o_, e_, sizeof e_, __VA_ARGS__, NULL), -1);                    \
        ck_assert_msg(strstr(e_, want1) && strstr(e_, want2),                                  \
                      "message \"%s\" lacks \"%s\"/\"%s\"", e_, want1, want2);                 \
    } while (0)

START_TEST(options_defaults)
{
    options_t o;
    PARSE_OK(&o, "--quiet");
    ck_assert_str_eq(o.data, TRAINER_DEFAULT_DATA);
    ck_assert_int_eq(o.model.kind, MODEL_MLP);
    ck_assert_int_eq(o.optimizer, DDPC_OPTIM_SGD);
    ck_assert(o.lr == 0.05 && o.weight_decay == 0 && o.momentum == 0.9);
    ck_assert_int_eq(o.resume, RESUME_AUTO);
    ck_assert_int_eq(o.device, DEVICE_AUTO);
    ck_assert_str_eq(o.ckpt_dir, "checkpoints");
    ck_assert_int_eq(o.grad_accum, 1);
    ck_assert(o.model.batchnorm == 0 && o.sync_bn == 0);
    PARSE_OK(&o, "--optimizer", "adamw");
    ck_assert(o.lr == 0.001 && o.weight_decay == 0.01);
    ck_assert_ptr_nonnull(strstr(options_usage(), "--resume auto|never|FILE"));
}
END_TEST

START_TEST(options_values)
{
    options_t o;
    PARSE_OK(&o, "--data", "/d", "--model=mlp", "--hidden", "1024,512,3", "--epochs", "7",
             "--max-steps", "100", "--batch-size=32", "--optimizer", "adamw", "--lr", "3e-4",
             "--momentum", "0", "--weight-decay", "0", "--grad-accum", "4", "--clip", "1.5",
             "--seed", "9", "--ckpt-dir", "run", "--ckpt-every", "50", "--ckpt-keep", "2",
             "--resume", "run/ckpt-00000050.h5", "--metrics", "m.jsonl", "--device", "cpu",
             "--log-every", "5", "--print-crc-all", "--threads", "2", "--grad-dtype", "bf16",
             "--sync-bn", "--batchnorm");
    ck_assert_str_eq(o.data, "/d");
    ck_assert(o.model.batchnorm == 1 && o.sync_bn == 1);
    ck_assert_int_eq(o.model.nhidden, 3);
    ck_assert_int_eq(o.model.hidden[0], 1024);
    ck_assert_int_eq(o.model.hidden[2], 3);
    ck_assert_int_eq(o.epochs, 7);
    ck_assert_int_eq(o.max_steps, 100);
    ck_assert_int_eq(o.batch_size, 32);
    ck_assert(o.lr == 3e-4 && o.weight_decay == 0 && o.clip == 1.5);
    ck_assert_int_eq(o.grad_accum, 4);
    ck_assert_uint_eq(o.seed, 9);
    ck_assert_str_eq(o.ckpt_dir, "run");
    ck_assert_int_eq(o.ckpt_every, 50);
    ck_assert_int_eq(o.ckpt_keep, 2);
    ck_assert_int_eq(o.resume, RESUME_FILE);
    ck_assert_str_eq(o.resume_file, "run/ckpt-00000050.h5");
    ck_assert_str_eq(o.metrics, "m.jsonl");
    ck_assert_int_eq(o.device, DEVICE_CPU);
    ck_assert_int_eq(o.print_crc_all, 1);
    ck_assert_int_eq(o.threads, 2);
    ck_assert_int_eq(o.grad_dtype, DDPC_BF16);
    ck_assert_int_eq(o.precision, PRECISION_FP32);
    ck_assert_int_eq(o.cuda_graph, 0);
    PARSE_OK(&o, "--precision", "fp16", "--device", "cuda", "--cuda-graph", "on");
    ck_assert_int_eq(o.precision, PRECISION_FP16);
    ck_assert_int_eq(o.cuda_graph, 1);
    ck_assert_int_eq(o.device, DEVICE_CUDA);
    PARSE_OK(&o, "--model", "linear", "--ckpt-dir", "none", "--resume", "never");
    ck_assert_int_eq(o.model.kind, MODEL_LINEAR);
    ck_assert_int_eq(o.model.nhidden, 0);
    ck_assert_ptr_null(o.ckpt_dir);
    ck_assert_int_eq(o.resume, RESUME_NEVER);
    PARSE_OK(&o, "--help");
    ck_assert_int_eq(o.help, 1);
}
END_TEST

START_TEST(options_errors)
{
    PARSE_BAD("unknown option", "--epoch", "--epoch", "3");
    PARSE_BAD("--epochs \"three\"", "integer", "--epochs", "three");
    PARSE_BAD("--epochs \"0\"", "[1,", "--epochs", "0");
    PARSE_BAD("--batch-size \"-4\"", "integer", "--batch-size", "-4");
    PARSE_BAD("--batch-size \"12x\"", "integer", "--batch-size=12x");
    PARSE_BAD("--lr \"fast\"", "number", "--lr", "fast");
    PARSE_BAD("--lr \"0\"", "(0, 1e+06]", "--lr", "0");
    PARSE_BAD("--lr \"nan\"", "number", "--lr", "nan");
    PARSE_BAD("--momentum \"1\"", "[0, 1)", "--momentum", "1");
    PARSE_BAD("--model \"cnn\"", "linear or mlp", "--model", "cnn");
    PARSE_BAD("--batchnorm", "only for --model mlp", "--model", "linear", "--batchnorm");
    PARSE_BAD("--sync-bn", "needs --batchnorm", "--sync-bn");
    PARSE_BAD("--batchnorm", "not with --pipeline-stages", "--batchnorm", "--pipeline-stages",
              "2");
    PARSE_BAD("--batchnorm", "not with --pipeline-stages", "--batchnorm", "--micro-batches", "2");
    PARSE_BAD("--batchnorm", "takes no value", "--batchnorm=1");
    PARSE_BAD("--optimizer \"adam\"", "sgd or adamw", "--optimizer", "adam");
    PARSE_BAD("--device \"tpu\"", "cpu, cuda or auto", "--device", "tpu");
    PARSE_BAD("--precision \"fp8\"", "fp32, bf16 or fp16", "--precision", "fp8");
    PARSE_BAD("--precision bf16", "--device cuda", "--precision", "bf16", "--device", "cpu");
    PARSE_BAD("--grad-dtype \"int8\"", "fp32, bf16 or fp16", "--grad-dtype", "int8");
    PARSE_BAD("--cuda-graph \"yes\"", "on or off", "--cuda-graph", "yes");
    PARSE_BAD("--hidden \"1024,,8\"", "widths", "--hidden", "1024,,8");
    PARSE_BAD("--hidden \"0\"", "widths", "--hidden", "0");
    PARSE_BAD("--hidden", "at most 32", "--hidden",
              "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,"
              "31,32,33");
    PARSE_BAD("--hidden", "only for --model mlp", "--hidden", "8", "--model", "linear");
    PARSE_BAD("--grad-accum \"0\"", "integer", "--grad-accum", "0");
    PARSE_BAD("--clip \"-1\"", "number", "--clip", "-1");
    PARSE_BAD("--seed \"-1\"", "integer", "--seed", "-1");
    PARSE_BAD("--ckpt-keep \"0\"", "integer", "--ckpt-keep", "0");
    PARSE_BAD("--ckpt-every", "integer", "--ckpt-every", "often");
    PARSE_BAD("--data", "needs a value", "--data");
    PARSE_BAD("--data", "empty", "--data", "");
    PARSE_BAD("--help", "no value", "--help=yes");
    PARSE_BAD("unexpected argument \"train\"", "--", "train");
}
END_TEST

/* ------------------------------------------------------------------ models */
typedef struct {
    int order[64];
    int n;
} ready_log_t;

static int log_ready(void *ctx, int p)
{
    ready_log_t *r = ctx;
    if (r->n < 64)
        r->order[r->n] = p;
    r->n++;
    return 0;
}

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) / 16777216.0) * 2.0f - 1.0f;
}

/* The mean loss of one forward of (x, y) through the model's interface. */
static double loss_of(model_t *m, const float *x, const uint8_t *y, int B, double *correct)
{
    model_stats_t st;
    ck_assert_int_eq(model_cpu_ops.upload(m, x, y, B), 0);
    ck_assert_int_eq(model_cpu_ops.forward(m), 0);
    ck_assert_int_eq(model_cpu_ops.stats(m, &st), 0);
    ck_assert(st.forwards == 1);
    ck_assert_double_eq_tol(st.loss_sum * B, st.loss_samples, 1e-9 * (1 + st.loss_samples));
    if (correct)
        *correct = st.correct;
    return st.loss_sum;
}

/* d loss / d theta by backward, then by central differences in float64 of
 * the forward loss, for every parameter of a small model. */
static void gradcheck(const model_spec_t *s, int B)
{
    size_t P = model_param_count(s);
    float *params = malloc(P * sizeof(float)), *grads = calloc(P, sizeof(float));
    float *x = malloc((size_t)B * s->inputs * sizeof(float));
    uint8_t *y = malloc((size_t)B);
    uint64_t r = 7;
    model_init_params(s, 3, params);
    for (size_t i = 0; i < P; i++) /* larger weights than init: gradients well above noise */
        params[i] *= 3.0f;
    for (int i = 0; i < B * s->inputs; i++)
        x[i] = frand(&r);
    for (int i = 0; i < B; i++)
        y[i] = (uint8_t)(i % s->classes);
    char err[128];
    float *bufs = malloc((model_buffer_count(s) + 1) * sizeof(float));
    model_init_buffers(s, bufs);
    model_place_t cpu = {-1, NULL, PRECISION_FP32, NULL, 0, 0, bufs, NULL};
    model_t *m = model_cpu_ops.create(s, &cpu, B, params, grads, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    ready_log_t rl = {{0}, 0};
    loss_of(m, x, y, B, NULL);
    ck_assert_int_eq(model_cpu_ops.backward(m, 0.5, log_ready, &rl), 0);
    /* every parameter once, last layer first, bias before weight */
    int np = model_num_params(s);
    ck_assert_int_eq(rl.n, np);
    for (int k = 0; k < np; k++)
        ck_assert_int_eq(rl.order[k], np - 1 - k);
    /* scale 0.5 was asked: compare with half the finite difference */
    const float h = 1e-2f;
    double worst = 0;
    for (size_t i = 0; i < P; i++) {
        float keep = params[i];
        params[i] = keep + h;
        double lp = loss_of(m, x, y, B, NULL);
        params[i] = keep - h;
        double lm = loss_of(m, x, y, B, NULL);
        params[i] = keep;
        double fd = 0.5 * (lp - lm) / (2.0 * (double)h);
        double e = fabs(fd - grads[i]) / (1e-3 + fabs(fd) + fabs(grads[i]));
        worst = e > worst ? e : worst;
        ck_assert_msg(e < 2e-2, "param %zu: backward %g, finite difference %g", i,
                      (double)grads[i], fd);
    }
    /* backward accumulates: a second one doubles the gradient */
    float g0 = grads[0];
    loss_of(m, x, y, B, NULL);
    model_cpu_ops.backward(m, 0.5, NULL, NULL);
    ck_assert_float_eq_tol(grads[0], 2 * g0, 1e-6f + 1e-5f * fabsf(g0));
    model_cpu_ops.destroy(m);
    free(params);
    free(grads);
    free(bufs);
    free(x);
    free(y);
}

START_TEST(grad_linear)
{
    model_spec_t s = {MODEL_LINEAR, 6, 4, 0, {0}, 0};
    gradcheck(&s, 5);
}
END_TEST

START_TEST(grad_mlp)
{
    model_spec_t s = {MODEL_MLP, 5, 3, 2, {7, 4}, 0};
    gradcheck(&s, 4);
}
END_TEST

/* BatchNorm1d in training mode: the batch's statistics are functions of the
 * parameters too, and backward must follow them (dz's two mean terms). */
START_TEST(grad_mlp_batchnorm)
{
    model_spec_t s = {MODEL_MLP, 5, 3, 2, {7, 4}, 1};
    gradcheck(&s, 6);
}
END_TEST

/* BatchNorm1d's names, order and buffers; the running statistics move in
 * train mode only (momentum 0.1, the unbiased variance, count + 1), and
 * eval mode normalizes with them. */
START_TEST(model_batchnorm)
{
    model_spec_t s = {MODEL_MLP, 3, 2, 1, {4}, 1};
    static const char *const want[] = {"fc1.weight", "bn1.weight", "fc2.weight"};
    char name[32], d[96];
    int ndim;
    int64_t shape[2];
    ck_assert_int_eq(model_num_params(&s), 6);
    ck_assert_int_eq(model_param_index(&s, 0, MODEL_P_BN_WEIGHT), 2);
    ck_assert_int_eq(model_param_index(&s, 1, MODEL_P_WEIGHT), 4);
    ck_assert_int_eq(model_param_index(&s, 1, MODEL_P_BN_WEIGHT), -1);
    for (int i = 0; i < 6; i += 2) {
        model_param_desc(&s, i, name, &ndim, shape);
        ck_assert_str_eq(name, want[i / 2]);
    }
    model_param_desc(&s, 3, name, &ndim, shape);
    ck_assert_str_eq(name, "bn1.bias");
    ck_assert(ndim == 1 && shape[0] == 4);
    ck_assert_uint_eq(model_param_count(&s), 3 * 4 + 4 + 8 + 4 * 2 + 2);
    model_describe(&s, d, sizeof d);
    ck_assert_str_eq(d, "mlp 3-4-2 batchnorm (34 params)");
    ck_assert_int_eq(model_num_buffers(&s), 3);
    ck_assert_uint_eq(model_buffer_count(&s), 9);
    model_buffer_desc(&s, 1, name, &ndim, shape);
    ck_assert_str_eq(name, "bn1.running_var");
    ck_assert(ndim == 1 && shape[0] == 4);
    model_buffer_desc(&s, 2, name, &ndim, shape);
    ck_assert_str_eq(name, "bn1.num_batches_tracked");
    ck_assert(ndim == 0);
    float p[34], g[34] = {0}, b[9], x[2 * 3] = {1, 2, 3, -1, 0, 5};
    uint8_t y[2] = {0, 1};
    model_init_params(&s, 1, p);
    model_init_buffers(&s, b);
    ck_assert(p[16] == 1.0f && p[20] == 0.0f && b[0] == 0.0f && b[4] == 1.0f && b[8] == 0.0f);
    model_place_t cpu = {-1, NULL, PRECISION_FP32, NULL, 0, 0, NULL, NULL};
    ck_assert_ptr_null(model_cpu_ops.create(&s, &cpu, 2, p, g, d, sizeof d));
    ck_assert_ptr_nonnull(strstr(d, "buffers"));
    cpu.buffers = b;
    model_t *m = model_cpu_ops.create(&s, &cpu, 2, p, g, d, sizeof d);
    ck_assert_msg(m != NULL, "%s", d);
    loss_of(m, x, y, 2, NULL);
    /* the batch's z = x W^T + b, per channel: mean and unbiased variance of 2 samples */
    for (int c = 0; c < 4; c++) {
        double z0 = p[12 + c], z1 = p[12 + c];
        for (int k = 0; k < 3; k++)
            z0 += (double)p[c * 3 + k] * x[k], z1 += (double)p[c * 3 + k] * x[3 + k];
        double mu = (z0 + z1) / 2, var = (z0 - mu) * (z0 - mu) + (z1 - mu) * (z1 - mu);
        ck_assert_double_eq_tol(b[c], 0.1 * mu, 1e-5 * (1 + fabs(mu)));
        ck_assert_double_eq_tol(b[4 + c], 0.9 + 0.1 * var, 1e-5 * (1 + var));
    }
    ck_assert(b[8] == 1.0f);
    float keep[9];
    memcpy(keep, b, sizeof keep);
    model_cpu_ops.set_train(m, 0);
    double l_eval = loss_of(m, x, y, 2, NULL);
    ck_assert_msg(memcmp(keep, b, sizeof keep) == 0, "eval changed the running statistics");
    model_cpu_ops.set_train(m, 1);
    ck_assert(loss_of(m, x, y, 2, NULL) != l_eval);
    ck_assert(b[8] == 2.0f);
    model_cpu_ops.destroy(m);
}
END_TEST

/* Pipeline stages: the whole model's forward and backward computed stage
 * by stage, each stage's output handed on and its input gradient handed
 * back, give bitwise the whole model's loss and gradients. */
static void stages_exact(const model_spec_t *s, int S, const int *first, int B)
{
    size_t P = model_param_count(s);
    float *params = malloc(P * sizeof(float)), *grads = calloc(P, sizeof(float));
    float *sgrads = calloc(P, sizeof(float)); /* the stages' arenas, side by side */
    float *x = malloc((size_t)B * s->inputs * sizeof(float));
    uint8_t *y = malloc((size_t)B);
    uint64_t r = 5;
    model_init_params(s, 9, params);
    for (int i = 0; i < B * s->inputs; i++)
        x[i] = frand(&r);
    for (int i = 0; i < B; i++)
        y[i] = (uint8_t)(i * 7 % s->classes);
    char err[128];
    model_place_t cpu = {-1, NULL, PRECISION_FP32, NULL, 0, 0, NULL, NULL};
    model_t *whole = model_cpu_ops.create(s, &cpu, B, params, grads, err, sizeof err);
    ck_assert_msg(whole != NULL, "%s", err);
    double correct, loss = loss_of(whole, x, y, B, &correct);
    ck_assert_int_eq(model_cpu_ops.backward(whole, 0.25, NULL, NULL), 0);
    model_t *st[MODEL_MAX_LAYERS];
    for (int k = 0; k < S; k++) {
        model_place_t w = cpu;
        w.stage_first = first[k];
        w.stage_end = first[k + 1];
        size_t off = model_layers_param_offset(s, first[k]);
        st[k] = model_cpu_ops.create(s, &w, B, params + off, sgrads + off, err, sizeof err);
        ck_assert_msg(st[k] != NULL, "%s", err);
    }
    const float *a = x;
    for (int k = 0; k < S; k++) {
        ck_assert_int_eq(model_cpu_ops.upload(st[k], a, k == S - 1 ? y : NULL, B), 0);
        ck_assert_int_eq(model_cpu_ops.forward(st[k]), 0);
        if (k < S - 1)
            a = model_cpu_ops.output(st[k]);
    }
    model_stats_t ms;
    ck_assert_int_eq(model_cpu_ops.stats(st[S - 1], &ms), 0);
    ck_assert(ms.loss_sum == loss && ms.correct == correct);
    for (int k = S - 1; k >= 0; k--) {
        if (k < S - 1)
            memcpy(model_cpu_ops.output_grad(st[k]), model_cpu_ops.input_grad(st[k + 1]),
                   (size_t)B * model_layer_out(s, first[k + 1] - 1) * sizeof(float));
        ready_log_t rl = {{0}, 0};
        ck_assert_int_eq(model_cpu_ops.backward(st[k], 0.25, log_ready, &rl), 0);
        int np = 2 * (first[k + 1] - first[k]); /* the stage's own indices */
        ck_assert_int_eq(rl.n, np);
        for (int i = 0; i < np; i++)
            ck_assert_int_eq(rl.order[i], np - 1 - i);
    }
    ck_assert_msg(memcmp(grads, sgrads, P * sizeof(float)) == 0,
                  "the stages' gradients differ from the whole model's");
    for (int k = 0; k < S; k++)
        model_cpu_ops.destroy(st[k]);
    model_cpu_ops.destroy(whole);
    free(params);
    free(grads);
    free(sgrads);
    free(x);
    free(y);
}

START_TEST(pipeline_stages)
{
    model_spec_t s = {MODEL_MLP, 12, 4, 3, {9, 7, 5}, 0};
    const int two[] = {0, 2, 4}, three[] = {0, 1, 3, 4}, four[] = {0, 1, 2, 3, 4};
    stages_exact(&s, 2, two, 6);
    stages_exact(&s, 3, three, 5);
    stages_exact(&s, 4, four, 3);
}
END_TEST

START_TEST(pipeline_partition)
{
    int f[MODEL_MAX_LAYERS + 1];
    model_spec_t a = {MODEL_MLP, 784, 10, 2, {256, 128}, 0};
    model_partition(&a, 2, f); /* layer 0 outweighs the others together */
    ck_assert(f[0] == 0 && f[1] == 1 && f[2] == 3);
    model_partition(&a, 3, f);
    ck_assert(f[0] == 0 && f[1] == 1 && f[2] == 2 && f[3] == 3);
    model_partition(&a, 1, f);
    ck_assert(f[0] == 0 && f[1] == 3);
    /* equal widths: layer 0 has no input gradient (2/3 of the others) */
    model_spec_t b = {MODEL_MLP, 100, 100, 3, {100, 100, 100}, 0};
    model_partition(&b, 2, f); /* {0,1} {2,3}: 100k, 120k */
    ck_assert(f[0] == 0 && f[1] == 2 && f[2] == 4);
    options_t o;
    PARSE_OK(&o, "--pipeline-stages", "2", "--micro-batches", "4", "--batch-size", "32");
    ck_assert(o.batch_size == 8 && o.grad_accum == 4 && o.pipe_batch == 32 && o.ckpt_dir);
    ck_assert(o.schedule == SCHEDULE_1F1B);
    PARSE_OK(&o, "--micro-batches", "2", "--batch-size", "32", "--schedule", "gpipe");
    ck_assert(o.batch_size == 16 && o.grad_accum == 2 && o.ckpt_dir && o.schedule == SCHEDULE_GPIPE);
}
END_TEST

START_TEST(model_layout)
{
    model_spec_t s = {MODEL_MLP, 784, 10, 2, {1024, 1024}, 0};
    char name[32], d[96];
    int ndim;
    int64_t shape[2];
    ck_assert_int_eq(model_num_params(&s), 6);
    model_param_desc(&s, 0, name, &ndim, shape);
    ck_assert_str_eq(name, "fc1.weight");
    ck_assert(ndim == 2 && shape[0] == 1024 && shape[1] == 784);
    model_param_desc(&s, 5, name, &ndim, shape);
    ck_assert_str_eq(name, "fc3.bias");
    ck_assert(ndim == 1 && shape[0] == 10);
    ck_assert_uint_eq(model_param_count(&s), 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 10250);
    model_describe(&s, d, sizeof d);
    ck_assert_str_eq(d, "mlp 784-1024-1024-10 (1863690 params)");
    model_spec_t l = {MODEL_LINEAR, 784, 10, 0, {0}, 0};
    model_param_desc(&l, 1, name, &ndim, shape);
    ck_assert_str_eq(name, "fc.bias");
    /* loss of uniform logits is log(classes), the argmax of ties is class 0 */
    float *p = calloc(model_param_count(&l), sizeof(float)), *g = calloc(7850, sizeof(float));
    float x[784] = {0};
    uint8_t y = 3, bad = 10;
    double correct = -1;
    model_place_t cpu = {-1, NULL, PRECISION_FP32, NULL, 0, 0, NULL, NULL},
                  half = {-1, NULL, PRECISION_BF16, NULL, 0, 0, NULL, NULL};
    ck_assert_ptr_null(model_cpu_ops.create(&l, &half, 1, p, g, d, sizeof d));
    ck_assert_ptr_nonnull(strstr(d, "fp32 only"));
    model_t *m = model_cpu_ops.create(&l, &cpu, 1, p, g, d, sizeof d);
    ck_assert_double_eq_tol(loss_of(m, x, &y, 1, &correct), log(10.0), 1e-6);
    ck_assert(correct == 0);
    /* a label outside the classes and a batch larger than the workspace are refused */
    ck_assert_int_eq(model_cpu_ops.upload(m, x, &bad, 1), -1);
    ck_assert_ptr_nonnull(strstr(model_cpu_ops.error(m), "label 10 of sample 0"));
    ck_assert_int_eq(model_cpu_ops.upload(m, x, &y, 2), -1);
    ck_assert_ptr_nonnull(strstr(model_cpu_ops.error(m), "expected 1 to 1"));
    model_cpu_ops.destroy(m);
    free(p);
    free(g);
}
END_TEST

/* ------------------------------------------------------------------ devices */
START_TEST(gpu_selection)
{
    char e[256];
    /* --gpus-per-node=4, 4 ranks on the node: all four visible, device = local rank */
    for (int lr = 0; lr < 4; lr++)
        ck_assert_int_eq(ddpc_gpu_rule(lr, 4, 4, "0,1,2,3", e, sizeof e), lr);
    /* --gpus-per-task=1: each rank sees one GPU, always device 0 */
    ck_assert_int_eq(ddpc_gpu_rule(3, 4, 1, "3", e, sizeof e), 0);
    ck_assert_int_eq(ddpc_gpu_rule(1, 2, 1, "0", e, sizeof e), 0);
    /* no launcher variable, a 2-GPU workstation, 2 ranks */
    ck_assert_int_eq(ddpc_gpu_rule(1, 2, 2, NULL, e, sizeof e), 1);
    /* more GPUs than ranks: still by local rank */
    ck_assert_int_eq(ddpc_gpu_rule(1, 2, 8, NULL, e, sizeof e), 1);
    /* none */
    ck_assert_int_eq(ddpc_gpu_rule(0, 1, 0, "", e, sizeof e), -1);
    ck_assert_ptr_nonnull(strstr(e, "no CUDA device visible"));
    /* 4 ranks, 2 GPUs */
    ck_assert_int_eq(ddpc_gpu_rule(2, 4, 2, "0,1", e, sizeof e), -1);
    ck_assert_ptr_nonnull(strstr(e, "4 ranks on this node but 2 GPUs visible"));
    ck_assert_ptr_nonnull(strstr(e, "--gpus-per-node=4"));
    ck_assert_int_eq(ddpc_gpu_rule(4, 4, 4, NULL, e, sizeof e), -1);
    ck_assert_int_eq(gpu_count_visible(NULL), -1);
    ck_assert_int_eq(gpu_count_visible(""), 0);
    ck_assert_int_eq(gpu_count_visible("NoDevFiles"), 0);
    ck_assert_int_eq(gpu_count_visible("0,1,2,3"), 4);
    ck_assert_int_eq(gpu_count_visible("GPU-8e1f"), 1);
}
END_TEST

START_TEST(device_choice)
{
    char note[256], e[256];
    device_kind_t k;
    int g;
    /* built without the CUDA model (ndev = -1) */
    ck_assert_int_eq(device_resolve(DEVICE_CUDA, 0, 1, -1, NULL, &k, &g, note, sizeof note, e,
                                    sizeof e), -1);
    ck_assert_ptr_nonnull(strstr(e, "--device cuda: this trainer was built without the CUDA"));
    ck_assert_int_eq(device_resolve(DEVICE_AUTO, 0, 1, -1, NULL, &k, &g, note, sizeof note, e,
                                    sizeof e), 0);
    ck_assert(k == DEVICE_CPU && g == -1);
    ck_assert_ptr_nonnull(strstr(note, "using the cpu"));
    /* CUDA model, no GPU */
    ck_assert_int_eq(device_resolve(DEVICE_CUDA, 0, 1, 0, NULL, &k, &g, note, sizeof note, e,
                                    sizeof e), -1);
    ck_assert_ptr_nonnull(strstr(e, "no CUDA device visible"));
    ck_assert_int_eq(device_resolve(DEVICE_AUTO, 0, 1, 0, NULL, &k, &g, note, sizeof note, e,
                                    sizeof e), 0);
    ck_assert_int_eq(k, DEVICE_CPU);
    /* CUDA model, GPUs */
    ck_assert_int_eq(device_resolve(DEVICE_AUTO, 1, 2, 2, "0,1", &k, &g, note, sizeof note, e,
                                    sizeof e), 0);
    ck_assert(k == DEVICE_CUDA && g == 1);
    ck_assert_int_eq(device_resolve(DEVICE_CPU, 1, 2, 2, "0,1", &k, &g, note, sizeof note, e,
                                    sizeof e), 0);
    ck_assert(k == DEVICE_CPU && g == -1);
}
END_TEST

static Suite *trainer_suite(void)
{
    Suite *s = suite_create("trainer");
    TCase *t = tcase_create("options");
    tcase_add_test(t, options_defaults);
    tcase_add_test(t, options_values);
    tcase_add_test(t, options_errors);
    suite_add_tcase(s, t);
    t = tcase_create("models");
    tcase_add_test(t, grad_linear);
    tcase_add_test(t, grad_mlp);
    tcase_add_test(t, grad_mlp_batchnorm);
    tcase_add_test(t, model_batchnorm);
    tcase_add_test(t, model_layout);
    tcase_add_test(t, pipeline_stages);
    tcase_add_test(t, pipeline_partition);
    suite_add_tcase(s, t);
    t = tcase_create("devices");
    tcase_add_test(t, gpu_selection);
    tcase_add_test(t, device_choice);
    suite_add_tcase(s, t);
    return s;
}

CHECK_MAIN(trainer_suite)
