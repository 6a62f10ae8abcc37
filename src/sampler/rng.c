/* SPDX-License-Identifier: BSD-3-Clause */
/* rng.c: the portable generator of the sampler: splitmix64 to seed,
 * xoshiro256** to draw, Lemire's unbiased bounded draw, Fisher-Yates.
 * Plain 64-bit integer arithmetic only, so every platform gets the same
 * numbers; doc/sampler.md and tests/sampler_ref.py restate it exactly. */
#include "config.h"
#include "ddpc_sampler.h"

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void ddpc_rng_seed(ddpc_rng_t *r, uint64_t seed, uint64_t stream)
{
    /* Scramble the seed once, then offset by the stream, so that (seed, stream)
     * and (seed + 1, stream - 1) do not alias as seed + epoch would. The four
     * words are outputs of a bijection on distinct inputs: never all zero. */
    uint64_t x = seed;
    x = splitmix64(&x) + stream;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

uint64_t ddpc_rng_next(ddpc_rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* 64 x 64 -> 128-bit product as (hi, lo) from 32-bit halves: no __int128,
 * one code path on every compiler. */
static uint64_t mul_hi_lo(uint64_t a, uint64_t b, uint64_t *lo)
{
    uint64_t a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
    *lo = (mid << 32) | (p00 & 0xffffffffu);
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

uint64_t ddpc_rng_below(ddpc_rng_t *r, uint64_t bound)
{
    /* Lemire, "Fast random integer generation in an interval" (2019): the high
     * word of x * bound, rejecting the low words below 2^64 mod bound. */
    uint64_t lo, hi = mul_hi_lo(ddpc_rng_next(r), bound, &lo);
    if (lo < bound) {
        uint64_t threshold = (0 - bound) % bound; /* 2^64 mod bound */
        while (lo < threshold)
            hi = mul_hi_lo(ddpc_rng_next(r), bound, &lo);
    }
    return hi;
}

void ddpc_permutation(uint64_t seed, uint64_t epoch, size_t n, size_t *perm)
{
    ddpc_rng_t r;
    ddpc_rng_seed(&r, seed, epoch);
    for (size_t i = 0; i < n; i++)
        perm[i] = i;
    for (size_t i = n; i > 1; i--) { /* position i-1 takes a draw from [0, i) */
        size_t j = (size_t)ddpc_rng_below(&r, (uint64_t)i);
        size_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}
