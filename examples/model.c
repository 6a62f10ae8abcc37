/* SPDX-License-Identifier: BSD-3-Clause */
/* model.c: what every device's model shares: the layer list, the parameter
 * and buffer names, shapes and order, and the initialization (host memory,
 * rank 0). */
#include "model.h"

#include <math.h>
#include <stdio.h>

int model_num_layers(const model_spec_t *s) { return s->nhidden + 1; }

int model_layer_in(const model_spec_t *s, int l) { return l == 0 ? s->inputs : s->hidden[l - 1]; }

int model_layer_out(const model_spec_t *s, int l)
{
    return l == s->nhidden ? s->classes : s->hidden[l];
}

int model_layer_bn(const model_spec_t *s, int l)
{
    return s->kind == MODEL_MLP && s->batchnorm && l < s->nhidden;
}

/* parameters of layer l: 2, or 4 with its BatchNorm1d */
static int layer_nparams(const model_spec_t *s, int l) { return model_layer_bn(s, l) ? 4 : 2; }

/* floats of layer l's parameters */
static size_t layer_floats(const model_spec_t *s, int l)
{
    size_t out = (size_t)model_layer_out(s, l);
    return out * ((size_t)model_layer_in(s, l) + 1) + (model_layer_bn(s, l) ? 2 * out : 0);
}

int model_num_params(const model_spec_t *s)
{
    int n = 0;
    for (int l = 0; l < model_num_layers(s); l++)
        n += layer_nparams(s, l);
    return n;
}

int model_param_index(const model_spec_t *s, int l, int k)
{
    if (k >= layer_nparams(s, l))
        return -1;
    int i = 0;
    for (int j = 0; j < l; j++)
        i += layer_nparams(s, j);
    return i + k;
}

void model_param_desc(const model_spec_t *s, int i, char *name, int *ndim, int64_t shape[2])
{
    int l = 0;
    while (i >= layer_nparams(s, l))
        i -= layer_nparams(s, l++);
    const char *what = i % 2 ? "bias" : "weight";
    if (s->kind == MODEL_LINEAR)
        snprintf(name, 32, "fc.%s", what);
    else
        snprintf(name, 32, "%s%d.%s", i >= 2 ? "bn" : "fc", l + 1, what);
    shape[0] = model_layer_out(s, l);
    shape[1] = model_layer_in(s, l);
    *ndim = i == MODEL_P_WEIGHT ? 2 : 1;
}

size_t model_param_count(const model_spec_t *s)
{
    return model_layers_param_count(s, 0, model_num_layers(s));
}

int model_num_buffers(const model_spec_t *s)
{
    int n = 0;
    for (int l = 0; l < model_num_layers(s); l++)
        n += model_layer_bn(s, l) ? 3 : 0;
    return n;
}

void model_buffer_desc(const model_spec_t *s, int i, char *name, int *ndim, int64_t shape[1])
{
    static const char *const what[3] = {"running_mean", "running_var", "num_batches_tracked"};
    int l = i / 3; /* the BN layers are the hidden layers 0, 1, ... */
    snprintf(name, 32, "bn%d.%s", l + 1, what[i % 3]);
    shape[0] = i % 3 == 2 ? 1 : model_layer_out(s, l);
    *ndim = i % 3 == 2 ? 0 : 1;
}

size_t model_buffer_count(const model_spec_t *s)
{
    size_t n = 0;
    for (int l = 0; l < model_num_layers(s); l++)
        n += model_layer_bn(s, l) ? 2 * (size_t)model_layer_out(s, l) + 1 : 0;
    return n;
}

void model_init_buffers(const model_spec_t *s, float *buffers)
{
    float *b = buffers;
    for (int l = 0; l < model_num_layers(s); l++) {
        if (!model_layer_bn(s, l))
            continue;
        size_t out = (size_t)model_layer_out(s, l);
        for (size_t c = 0; c < out; c++)
            b[c] = 0.0f, b[out + c] = 1.0f;
        b[2 * out] = 0.0f;
        b += 2 * out + 1;
    }
}

size_t model_layers_param_offset(const model_spec_t *s, int first)
{
    return model_layers_param_count(s, 0, first);
}

size_t model_layers_param_count(const model_spec_t *s, int first, int end)
{
    size_t n = 0;
    for (int l = first; l < end; l++)
        n += layer_floats(s, l);
    return n;
}

double model_layer_flops(const model_spec_t *s, int l)
{
    return 2.0 * model_layer_in(s, l) * model_layer_out(s, l) * (l == 0 ? 2 : 3);
}

void model_partition(const model_spec_t *m, int S, int first[])
{
    const int L = model_num_layers(m);
    double pre[MODEL_MAX_LAYERS + 1] = {0}; /* pre[i]: FLOPs of layers [0, i) */
    for (int l = 0; l < L; l++)
        pre[l + 1] = pre[l] + model_layer_flops(m, l);
    /* best[s][i]: the smallest largest stage of layers [0, i) in s stages;
       cut[s][i]: where its last stage starts */
    double best[MODEL_MAX_LAYERS + 1][MODEL_MAX_LAYERS + 1];
    int cut[MODEL_MAX_LAYERS + 1][MODEL_MAX_LAYERS + 1];
    for (int i = 0; i <= L; i++)
        best[1][i] = pre[i], cut[1][i] = 0;
    for (int s = 2; s <= S; s++)
        for (int i = s; i <= L; i++) {
            best[s][i] = -1;
            for (int j = s - 1; j < i; j++) { /* the last stage is [j, i) */
                double last = pre[i] - pre[j];
                double v = best[s - 1][j] > last ? best[s - 1][j] : last;
                if (best[s][i] < 0 || v < best[s][i])
                    best[s][i] = v, cut[s][i] = j;
            }
        }
    first[S] = L;
    for (int s = S, i = L; s >= 1; s--) {
        first[s - 1] = s == 1 ? 0 : cut[s][i];
        i = first[s - 1];
    }
}

void model_describe(const model_spec_t *s, char *buf, size_t n)
{
    int k = snprintf(buf, n, "%s %d", s->kind == MODEL_LINEAR ? "linear" : "mlp", s->inputs);
    for (int l = 0; l < model_num_layers(s) && k > 0 && (size_t)k < n; l++)
        k += snprintf(buf + k, n - (size_t)k, "-%d", model_layer_out(s, l));
    if (k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, "%s (%zu params)", s->batchnorm ? " batchnorm" : "",
                 model_param_count(s));
}

/* splitmix64: a small, portable generator; initialization needs nothing more */
static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void model_init_params(const model_spec_t *s, uint64_t seed, float *params)
{
    uint64_t state = seed;
    float *p = params;
    for (int l = 0; l < model_num_layers(s); l++) {
        size_t in = (size_t)model_layer_in(s, l), out = (size_t)model_layer_out(s, l);
        float bound = (float)(1.0 / sqrt((double)in));
        for (size_t i = 0; i < out * in + out; i++) { /* weight (out, in), then bias (out,) */
            double u = (double)(splitmix64(&state) >> 11) * 0x1.0p-53; /* [0, 1) */
            p[i] = (float)((2.0 * u - 1.0) * bound);
        }
        p += out * in + out;
        if (model_layer_bn(s, l)) { /* BatchNorm1d: weight 1, bias 0 (no draw) */
            for (size_t i = 0; i < out; i++)
                p[i] = 1.0f, p[out + i] = 0.0f;
            p += 2 * out;
        }
    }
}

const char *model_precision_name(model_precision_t p)
{
    return p == PRECISION_BF16 ? "bf16" : p == PRECISION_FP16 ? "fp16" : "fp32";
}
