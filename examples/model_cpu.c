/* SPDX-License-Identifier: BSD-3-Clause */
/* model_cpu.c: the models on the CPU through a CBLAS (cblas_sgemm), float32.
 * Forward keeps each layer's output for backward; backward walks the layers
 * from the last to the first and reports each parameter the moment its
 * gradient is complete, so the DDP engine can start reducing it while the
 * earlier layers are still being computed.
 *
 * Shapes (B = batch, layer l maps in -> out):
 *   act[0] = x                  (B, inputs)     the caller's, kept until backward
 *   act[l+1] = relu(act[l] W^T + b)  (B, out)   W (out, in) row-major as PyTorch's
 *   logits = act[L]             (B, classes)    no ReLU on the last layer
 *   prob = softmax(logits)      (B, classes)
 * A pipeline stage (model_place_t's stage_first, stage_end) computes layers
 * [first, end) with the same calls, in the same order, on the same shapes
 * as the whole model does for them: act[first] is the previous stage's
 * output, a stage before the last ends at act[end] (after its ReLU) and its
 * backward starts from gout; a stage after the first ends its backward with
 * gin = dloss/dact[first] (the GEMM and the ReLU mask the whole model
 * applies at that layer), which the previous stage continues from.
 * BatchNorm1d (spec batchnorm) on a hidden layer sits between its GEMM and
 * its ReLU: act[l+1] = relu(gamma * xhat + beta), xhat = (z - mean) * invstd
 * (B, out) kept for backward; statistics in double over the batch (train),
 * or over every rank's batch through ddpc_batchnorm_stats (bn_comm: sync),
 * or the running ones (eval). Not with pipeline stages. */
#include "model.h"

#include "ddpc.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct model {
    model_spec_t spec;
    int nlayers, max_batch, B; /* B: samples of the last forward */
    int first, end;            /* the layers computed: [first, end) of nlayers */
    float *W[MODEL_MAX_LAYERS], *b[MODEL_MAX_LAYERS];   /* views into params */
    float *dW[MODEL_MAX_LAYERS], *db[MODEL_MAX_LAYERS]; /* views into grads */
    const float *act[MODEL_MAX_LAYERS + 1]; /* act[0] = x; act[l+1] in out[l] */
    float *out[MODEL_MAX_LAYERS];           /* (max_batch, out) each */
    float *prob;                            /* (max_batch, classes) */
    float *d0, *d1;                         /* (max_batch, widest) gradient ping-pong */
    float *gout;                            /* end < nlayers: (max_batch, out(end-1)) */
    const float *gin;                       /* first > 0: dloss/dx after backward */
    float *xin;                             /* first > 0: (max_batch, in(first)): input() */
    const float *x;                         /* the uploaded batch: the caller's x or xin */
    int *y;                                 /* (max_batch,) its labels as ints */
    int nb;                                 /* its size */
    /* batchnorm, per BN layer l: gamma, beta (params), dgamma, dbeta (grads),
       running mean/var/count (buffers), xhat (max_batch, out), the batch's
       mean, biased var and invstd (out,), and the count they came from */
    int train;
    float *gamma[MODEL_MAX_LAYERS], *beta[MODEL_MAX_LAYERS];
    float *dgamma[MODEL_MAX_LAYERS], *dbeta[MODEL_MAX_LAYERS];
    float *rmean[MODEL_MAX_LAYERS], *rvar[MODEL_MAX_LAYERS], *rcount[MODEL_MAX_LAYERS];
    float *xhat[MODEL_MAX_LAYERS], *bmean[MODEL_MAX_LAYERS], *bvar[MODEL_MAX_LAYERS];
    float *invstd[MODEL_MAX_LAYERS];
    double bn_n[MODEL_MAX_LAYERS];
    ddpc_comm_t bn_comm;                    /* sync: the data-parallel group */
    model_grad_ready_fn use;                /* model_place_t's param_use, and its ctx */
    void *use_ctx;
    float *(*grad_at)(void *ctx, int index); /* model_place_t's (its ctx: use_ctx) */
    float *bn_work;                         /* its ddpc_batchnorm_workspace; then 2 * widest */
    model_stats_t st;                       /* since the last stats call */
    char err[256];
};

/* The element-wise passes in blocks of BLOCK with fixed inner loops, which
 * gcc -O2 vectorizes (its cheap cost model leaves loops of unknown length
 * scalar, and a conditional store too); the ends one by one. */
#define BLOCK 16

/* o = max(o, 0), NaN to 0 */
static void relu(float *restrict o, size_t n)
{
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK)
        for (int k = 0; k < BLOCK; k++) {
            float v = o[i + k];
            o[i + k] = v > 0.0f ? v : 0.0f;
        }
    for (; i < n; i++)
        o[i] = o[i] > 0.0f ? o[i] : 0.0f;
}

/* d = 0 where a (a ReLU's output) is not positive */
static void relu_grad(float *restrict d, const float *restrict a, size_t n)
{
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK)
        for (int k = 0; k < BLOCK; k++) {
            float v = d[i + k];
            d[i + k] = a[i + k] > 0.0f ? v : 0.0f;
        }
    for (; i < n; i++)
        d[i] = a[i] > 0.0f ? d[i] : 0.0f;
}

/* db += the sum of the B rows of d (B, out), row by row */
static void add_rows(float *restrict db, const float *restrict d, int B, int out)
{
    for (int r = 0; r < B; r++) {
        const float *row = d + (size_t)r * out;
        int j = 0;
        for (; j + BLOCK <= out; j += BLOCK)
            for (int k = 0; k < BLOCK; k++)
                db[j + k] += row[j + k];
        for (; j < out; j++)
            db[j] += row[j];
    }
}

static void cpu_destroy(model_t *m)
{
    if (!m)
        return;
    for (int l = 0; l < m->nlayers; l++)
        free(m->out[l]);
    free(m->prob);
    free(m->d0);
    free(m->d1);
    free(m->gout);
    free(m->xin);
    free(m->y);
    for (int l = 0; l < m->nlayers; l++) {
        free(m->xhat[l]);
        free(m->bmean[l]);
    }
    free(m->bn_work);
    free(m);
}

static model_t *cpu_create(const model_spec_t *s, const model_place_t *where, int max_batch,
                           float *params, float *grads, char *err, size_t errlen)
{
    if (where && where->precision != PRECISION_FP32) {
        snprintf(err, errlen, "model: --precision %s: the cpu model computes in fp32 only",
                 model_precision_name(where->precision));
        return NULL;
    }
    if (max_batch < 1 || s->nhidden < 0 || s->nhidden > MODEL_MAX_HIDDEN) {
        snprintf(err, errlen, "model: batch %d or %d hidden layers out of range", max_batch,
                 s->nhidden);
        return NULL;
    }
    model_t *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "model: out of memory");
        return NULL;
    }
    m->spec = *s;
    m->nlayers = model_num_layers(s);
    m->max_batch = max_batch;
    m->first = where ? where->stage_first : 0;
    m->end = where && where->stage_end ? where->stage_end : m->nlayers;
    if (m->first < 0 || m->first >= m->end || m->end > m->nlayers) {
        snprintf(err, errlen, "model: stage of layers [%d, %d) out of range (%d layers)",
                 m->first, m->end, m->nlayers);
        free(m);
        return NULL;
    }
    if (s->batchnorm && (m->first > 0 || m->end < m->nlayers || !where || !where->buffers)) {
        snprintf(err, errlen, "model: batchnorm needs the whole model and its buffers "
                 "(not with pipeline stages)");
        free(m);
        return NULL;
    }
    m->train = 1;
    m->bn_comm = where ? (ddpc_comm_t)where->bn_comm : NULL;
    m->use = where ? where->param_use : NULL;
    m->use_ctx = where ? where->param_use_ctx : NULL;
    m->grad_at = where ? where->grad_at : NULL;
    size_t off = 0, widest = 0, boff = 0;
    int ok = 1;
    for (int l = m->first; l < m->end; l++) {
        size_t in = (size_t)model_layer_in(s, l), out = (size_t)model_layer_out(s, l);
        m->W[l] = params + off;
        m->dW[l] = grads ? grads + off : NULL; /* NULL: taken by grad_at */
        off += out * in;
        m->b[l] = params + off;
        m->db[l] = grads ? grads + off : NULL;
        off += out;
        if (model_layer_bn(s, l)) {
            m->gamma[l] = params + off, m->dgamma[l] = grads ? grads + off : NULL;
            m->beta[l] = params + off + out, m->dbeta[l] = grads ? grads + off + out : NULL;
            off += 2 * out;
            m->rmean[l] = where->buffers + boff;
            m->rvar[l] = where->buffers + boff + out;
            m->rcount[l] = where->buffers + boff + 2 * out;
            boff += 2 * out + 1;
            ok = ok && (m->xhat[l] = malloc((size_t)max_batch * out * sizeof(float)));
            ok = ok && (m->bmean[l] = malloc(3 * out * sizeof(float)));
            if (ok)
                m->bvar[l] = m->bmean[l] + out, m->invstd[l] = m->bmean[l] + 2 * out;
        }
        widest = in > widest ? in : widest;
        widest = out > widest ? out : widest;
        ok = ok && (m->out[l] = malloc((size_t)max_batch * out * sizeof(float)));
    }
    size_t classes = (size_t)s->classes;
    if (m->end == m->nlayers)
        ok = ok && (m->prob = malloc((size_t)max_batch * classes * sizeof(float)));
    else
        ok = ok && (m->gout = malloc((size_t)max_batch * (size_t)model_layer_out(s, m->end - 1) *
                                     sizeof(float)));
    if (m->first > 0)
        ok = ok && (m->xin = malloc((size_t)max_batch * (size_t)model_layer_in(s, m->first) *
                                    sizeof(float)));
    ok = ok && (m->d0 = malloc((size_t)max_batch * widest * sizeof(float)));
    ok = ok && (m->d1 = malloc((size_t)max_batch * widest * sizeof(float)));
    ok = ok && (m->y = malloc((size_t)max_batch * sizeof(int)));
    if (s->batchnorm) {
        size_t nw = m->bn_comm ? ddpc_batchnorm_workspace(m->bn_comm, (int)widest) : 0;
        nw = nw > 2 * widest ? nw : 2 * widest;
        ok = ok && (m->bn_work = malloc(nw * sizeof(float)));
    }
    if (!ok) {
        snprintf(err, errlen, "model: out of memory for activations of batch %d", max_batch);
        cpu_destroy(m);
        return NULL;
    }
    return m;
}

static int cpu_upload(model_t *m, const float *x, const uint8_t *y, int B)
{
    if (B < 1 || B > m->max_batch) {
        snprintf(m->err, sizeof m->err, "model: batch of %d samples, expected 1 to %d", B,
                 m->max_batch);
        return -1;
    }
    for (int i = 0; y && i < B; i++) {
        if (y[i] >= m->spec.classes) {
            snprintf(m->err, sizeof m->err, "model: label %d of sample %d is not in [0, %d)",
                     y[i], i, m->spec.classes);
            return -1;
        }
        m->y[i] = y[i];
    }
    if (!y && m->end == m->nlayers) {
        snprintf(m->err, sizeof m->err, "model: the last stage needs the labels");
        return -1;
    }
    if (!x && !m->xin) {
        snprintf(m->err, sizeof m->err, "model: the first stage needs the inputs");
        return -1;
    }
    m->x = x ? x : m->xin;
    m->nb = B;
    return 0;
}

/* BatchNorm1d of layer l over o (B, out), in place, before the ReLU. Train:
 * the batch's mean and biased variance per channel (two passes in double;
 * with bn_comm, combined over every rank's batch), the running statistics
 * updated as PyTorch does (momentum 0.1, the unbiased variance, the count
 * + 1), xhat kept; eval: the running statistics. */
static int bn_forward(model_t *m, int l, float *o, int B, int out)
{
    float *mean = m->bmean[l], *var = m->bvar[l], *is = m->invstd[l];
    if (!m->train) {
        for (int c = 0; c < out; c++) {
            mean[c] = m->rmean[l][c];
            is[c] = (float)(1.0 / sqrt((double)m->rvar[l][c] + MODEL_BN_EPS));
        }
        for (int i = 0; i < B; i++) {
            float *z = o + (size_t)i * out;
            for (int c = 0; c < out; c++)
                z[c] = m->gamma[l][c] * ((z[c] - mean[c]) * is[c]) + m->beta[l][c];
        }
        return 0;
    }
    for (int c = 0; c < out; c++) {
        double s = 0, q = 0;
        for (int i = 0; i < B; i++)
            s += o[(size_t)i * out + c];
        double mu = s / B;
        for (int i = 0; i < B; i++) {
            double d = o[(size_t)i * out + c] - mu;
            q += d * d;
        }
        mean[c] = (float)mu;
        var[c] = (float)(q / B);
    }
    double n = B;
    if (m->bn_comm) {
        ddpc_status_t st = ddpc_batchnorm_stats(m->bn_comm, out, B, mean, var, &n, m->bn_work);
        if (st != DDPC_OK) {
            snprintf(m->err, sizeof m->err, "model: bn%d: %s", l + 1,
                     ddpc_last_error(ddpc_comm_runtime(m->bn_comm)));
            return -1;
        }
    }
    m->bn_n[l] = n;
    const float mom = (float)MODEL_BN_MOMENTUM;
    for (int c = 0; c < out; c++) {
        is[c] = (float)(1.0 / sqrt((double)var[c] + MODEL_BN_EPS));
        float unbiased = n > 1 ? (float)((double)var[c] * n / (n - 1)) : var[c];
        m->rmean[l][c] = (1.0f - mom) * m->rmean[l][c] + mom * mean[c];
        m->rvar[l][c] = (1.0f - mom) * m->rvar[l][c] + mom * unbiased;
    }
    m->rcount[l][0] += 1.0f;
    float *xh = m->xhat[l];
    for (int i = 0; i < B; i++) {
        float *z = o + (size_t)i * out, *x = xh + (size_t)i * out;
        for (int c = 0; c < out; c++) {
            x[c] = (z[c] - mean[c]) * is[c];
            z[c] = m->gamma[l][c] * x[c] + m->beta[l][c];
        }
    }
    return 0;
}

/* Backward of layer l's BatchNorm1d: d (B, out) holds dloss/dy (after the
 * ReLU's mask) and becomes dloss/dz in place; dgamma += sum(d * xhat),
 * dbeta += sum(d) (this rank's, as PyTorch's; DDP averages them). With
 * bn_comm the two sums of dz's formula are every rank's (one all-reduce of
 * 2 * out floats), as SyncBatchNorm's backward. */
static int bn_backward(model_t *m, int l, float *d, int B, int out)
{
    float *sdy = m->bn_work, *sdx = m->bn_work + out; /* (out,) each */
    const float *xh = m->xhat[l];
    for (int c = 0; c < out; c++) {
        double a = 0, b = 0;
        for (int i = 0; i < B; i++) {
            double g = d[(size_t)i * out + c];
            a += g;
            b += g * xh[(size_t)i * out + c];
        }
        sdy[c] = (float)a;
        sdx[c] = (float)b;
        m->dbeta[l][c] += sdy[c];
        m->dgamma[l][c] += sdx[c];
    }
    if (m->bn_comm &&
        ddpc_allreduce(m->bn_comm, m->bn_work, m->bn_work, 2 * (size_t)out, DDPC_F32, DDPC_SUM) !=
            DDPC_OK) {
        snprintf(m->err, sizeof m->err, "model: bn%d backward: %s", l + 1,
                 ddpc_last_error(ddpc_comm_runtime(m->bn_comm)));
        return -1;
    }
    const float inv_n = (float)(1.0 / m->bn_n[l]);
    for (int c = 0; c < out; c++)
        sdy[c] *= inv_n, sdx[c] *= inv_n;
    for (int i = 0; i < B; i++) {
        float *g = d + (size_t)i * out;
        const float *x = xh + (size_t)i * out;
        for (int c = 0; c < out; c++)
            g[c] = m->gamma[l][c] * m->invstd[l][c] * (g[c] - sdy[c] - x[c] * sdx[c]);
    }
    return 0;
}

static void cpu_set_train(model_t *m, int train) { m->train = train; }

static int cpu_forward(model_t *m)
{
    const int C = m->spec.classes, B = m->nb;
    const int *y = m->y;
    if (!m->x) {
        snprintf(m->err, sizeof m->err, "model: forward before any upload");
        return -1;
    }
    m->B = B;
    m->act[m->first] = m->x;
    const int p0 = model_param_index(&m->spec, m->first, MODEL_P_WEIGHT);
    for (int l = m->first; l < m->end; l++) {
        const int in = model_layer_in(&m->spec, l), out = model_layer_out(&m->spec, l);
        for (int k = MODEL_P_WEIGHT; m->use && k <= MODEL_P_BN_BIAS; k++) {
            const int pi = model_param_index(&m->spec, l, k);
            if (pi >= 0 && m->use(m->use_ctx, pi - p0)) {
                snprintf(m->err, sizeof m->err, "model: layer %d: waiting for parameter %d's "
                         "gather failed", l, pi - p0);
                return -1;
            }
        }
        float *o = m->out[l];
        for (int i = 0; i < B; i++) /* o = b, then o += act W^T */
            memcpy(o + (size_t)i * out, m->b[l], (size_t)out * sizeof(float));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, out, in, 1.0f, m->act[l], in,
                    m->W[l], in, 1.0f, o, out);
        if (model_layer_bn(&m->spec, l) && bn_forward(m, l, o, B, out))
            return -1;
        if (l < m->nlayers - 1)
            relu(o, (size_t)B * out);
        m->act[l + 1] = o;
    }
    if (m->end < m->nlayers) /* a stage before the last: its output goes on */
        return 0;
    /* softmax and cross-entropy, row by row */
    const float *logits = m->act[m->nlayers];
    double loss = 0;
    int hits = 0;
    for (int i = 0; i < B; i++) {
        const float *z = logits + (size_t)i * C;
        float *p = m->prob + (size_t)i * C;
        int arg = 0;
        for (int c = 1; c < C; c++)
            arg = z[c] > z[arg] ? c : arg;
        double sum = 0;
        for (int c = 0; c < C; c++) {
            p[c] = expf(z[c] - z[arg]);
            sum += p[c];
        }
        for (int c = 0; c < C; c++)
            p[c] = (float)(p[c] / sum);
        loss += log(sum) - (double)(z[y[i]] - z[arg]); /* -log softmax(z)[y] */
        hits += arg == y[i];
    }
    m->st.loss_sum += loss / B;
    m->st.loss_samples += loss;
    m->st.correct += hits;
    m->st.forwards += 1;
    return 0;
}

static int cpu_stats(model_t *m, model_stats_t *st)
{
    *st = m->st;
    memset(&m->st, 0, sizeof m->st);
    return 0;
}

static int cpu_params_io(model_t *m, float *host, int to_model)
{
    size_t n = model_layers_param_count(&m->spec, m->first, m->end);
    if (to_model)
        memcpy(m->W[m->first], host, n * sizeof(float));
    else
        memcpy(host, m->W[m->first], n * sizeof(float));
    return 0;
}

static const char *cpu_error(model_t *m) { return m->err; }

/* Before the backward writes layer l's parameter `kind`'s gradient: where
 * the engine wants it in this micro-step (grad_at), or the view as it is.
 * Nonzero when the engine gave no pointer (its message says why). */
static int take_grad(model_t *m, float **view, int l, int kind, int p0)
{
    if (m->grad_at)
        *view = m->grad_at(m->use_ctx, model_param_index(&m->spec, l, kind) - p0);
    return *view == NULL;
}

static int cpu_backward(model_t *m, double scale, model_grad_ready_fn cb, void *ctx)
{
    const int B = m->B, C = m->spec.classes;
    /* d = dloss/dlogits = (prob - onehot(y)) * scale / B; a stage before the
       last starts from the gradient of its output, which the next stage sent */
    float *d = m->d0, *dprev = m->d1;
    if (m->end < m->nlayers) {
        d = m->gout;
        dprev = m->d0;
    } else {
        const float k = (float)(scale / B);
        for (int i = 0; i < B; i++) {
            for (int c = 0; c < C; c++)
                d[(size_t)i * C + c] = m->prob[(size_t)i * C + c] * k;
            d[(size_t)i * C + m->y[i]] -= k;
        }
    }
    const model_spec_t *s = &m->spec;
    /* grad_ready's indices are the stage's */
    const int p0 = model_param_index(s, m->first, MODEL_P_WEIGHT);
    for (int l = m->end - 1; l >= m->first; l--) {
        const int in = model_layer_in(s, l), out = model_layer_out(s, l);
        int rc;
        if (model_layer_bn(s, l)) { /* d: dloss/dy -> dloss/dz */
            if (take_grad(m, &m->dbeta[l], l, MODEL_P_BN_BIAS, p0) ||
                take_grad(m, &m->dgamma[l], l, MODEL_P_BN_WEIGHT, p0))
                return 1;
            if (bn_backward(m, l, d, B, out))
                return -1;
            rc = cb ? cb(ctx, model_param_index(s, l, MODEL_P_BN_BIAS) - p0) : 0;
            rc = rc ? rc : cb ? cb(ctx, model_param_index(s, l, MODEL_P_BN_WEIGHT) - p0) : 0;
            if (rc)
                return rc;
        }
        /* db += sum over the batch of d */
        if (take_grad(m, &m->db[l], l, MODEL_P_BIAS, p0))
            return 1;
        add_rows(m->db[l], d, B, out);
        rc = cb ? cb(ctx, model_param_index(s, l, MODEL_P_BIAS) - p0) : 0;
        if (rc)
            return rc;
        /* dW += d^T act[l]: (out, B) x (B, in) */
        if (take_grad(m, &m->dW[l], l, MODEL_P_WEIGHT, p0))
            return 1;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, B, 1.0f, d, out, m->act[l],
                    in, 1.0f, m->dW[l], in);
        rc = cb ? cb(ctx, model_param_index(s, l, MODEL_P_WEIGHT) - p0) : 0;
        if (rc)
            return rc;
        if (l == 0)
            break;
        /* dprev = d W, through the ReLU of layer l-1: zero where its output was 0 */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, in, out, 1.0f, d, out, m->W[l],
                    in, 0.0f, dprev, in);
        relu_grad(dprev, m->act[l], (size_t)B * in);
        if (l == m->first) { /* a later stage's first layer: the previous stage goes on */
            m->gin = dprev;
            break;
        }
        float *t = d;
        d = dprev;
        /* from gout (not a ping-pong buffer) the next one is the other buffer */
        dprev = t == m->gout ? m->d1 : t;
    }
    return 0;
}

static const void *cpu_output(model_t *m) { return m->act[m->end]; }
static void *cpu_output_grad(model_t *m) { return m->gout; }
static const void *cpu_input_grad(model_t *m) { return m->gin; }
static void *cpu_input(model_t *m) { return m->xin; }

const model_ops_t model_cpu_ops = {"cpu",         cpu_create,   cpu_destroy,
                                   cpu_upload,    cpu_forward,  cpu_backward,
                                   cpu_stats,     cpu_params_io, cpu_error,
                                   cpu_output,    cpu_output_grad, cpu_input_grad,
                                   cpu_input,     cpu_set_train};
