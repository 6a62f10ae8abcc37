/* SPDX-License-Identifier: BSD-3-Clause */
/* linear_model.h: the model that the DDP equivalence tests train (mpi_ddp.c
 * on host arenas, gpu_ddp.c on device arenas): its shape, a deterministic
 * data set, the MSE gradient and the initial parameters, all on the host in
 * float32 and the same on every rank. A test fixture, not an example model. */
#ifndef DDPC_LINEAR_MODEL_H
#define DDPC_LINEAR_MODEL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

enum { D = 37, O = 24, K = 4 }; /* input, output, weight blocks */

/* deterministic sample s of step t: x (D,), target y (O,) */
static inline void sample(int t, int s, float *x, float *y)
{
    uint64_t z = 0x9e3779b97f4a7c15ull * (uint64_t)(t * 100003 + s + 1);
    for (int i = 0; i < D + O; i++) {
        z ^= z >> 31, z *= 0xbf58476d1ce4e5b9ull, z ^= z >> 27;
        float v = (float)((double)(z >> 11) * 0x1p-53 * 2.0 - 1.0);
        if (i < D)
            x[i] = v;
        else
            y[i - D] = v;
    }
}

/* Linear model y = W x + b, W as K row blocks "w.k" (O/K, D), then "b" (O).
 * MSE loss mean over n samples [s0, s0+n) of step t, times `scale`;
 * accumulates gradients into g (same layout as the arena). */
static inline void grad_linear(const float *p, float *g, int t, int s0, int n, float scale)
{
    float x[D], y[O], out[O];
    const float *W = p, *b = p + O * D;
    for (int s = s0; s < s0 + n; s++) {
        sample(t, s, x, y);
        for (int o = 0; o < O; o++) {
            float a = b[o];
            for (int i = 0; i < D; i++)
                a += W[o * D + i] * x[i];
            out[o] = a;
        }
        for (int o = 0; o < O; o++) {
            float e = 2.0f * (out[o] - y[o]) * scale / (float)n;
            for (int i = 0; i < D; i++)
                g[o * D + i] += e * x[i];
            g[O * D + o] += e;
        }
    }
}

/* n parameters of rank r: they differ per rank, so that a missing
 * broadcast of rank 0's shows. */
static inline void init_params(float *p, size_t n, int r)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)sin(0.37 * (double)i + r);
}

#endif
