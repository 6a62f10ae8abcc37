/* SPDX-License-Identifier: BSD-3-Clause */
/* half.c: float32 <-> bfloat16 / IEEE float16 conversions with round to
 * nearest even, NaN and infinity preserved. Used by the half-precision
 * reductions and by gradient compression. Scalar; the compiler vectorizes loops. */
#include "config.h"
#include "ddpc_comm.h"

#include <string.h>

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t ddpc_f32_to_bf16(float f)
{
    uint32_t u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)     /* NaN: keep it quiet and a NaN */
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);         /* round to nearest even */
    return (uint16_t)(u >> 16);
}

float ddpc_bf16_to_f32(uint16_t h) { return float_of((uint32_t)h << 16); }

uint16_t ddpc_f32_to_f16(float f)
{
    uint32_t u = bits_of(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)                      /* NaN */
        return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u)                     /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) {                    /* below the smallest normal 2^-14: subnormal */
        if (a < 0x33000000u)                  /* below half the smallest subnormal: zero */
            return (uint16_t)sign;
        /* value = mant * 2^(exp - 150); in units of 2^-24: mant >> (126 - exp) */
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23);     /* 14..24 here */
        uint32_t q = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u); /* round mantissa to 10 bits, nearest even */
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

float ddpc_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f)
        return float_of(sign | 0x7f800000u | (m << 13));
    if (e == 0) {                              /* zero or subnormal: m * 2^-24 */
        float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return float_of(sign | ((e + 112u) << 23) | (m << 13));
}
