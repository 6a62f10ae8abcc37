/* SPDX-License-Identifier: BSD-3-Clause */
/* halfconv.c: the emulation's float <-> bfloat16 / IEEE half conversions,
 * round to nearest even with subnormals, as the GPU's __float2bfloat16_rn
 * and __float2half_rn (NaN -> the canonical 0x7fff); by hand, not _Float16
 * (clang < 15 lacks it on x86-64). One copy for the twins, cuBLASLt and NCCL
 * (emu_internal.h). */
#include "emu_internal.h"

#include <string.h>

float emu_bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint32_t emu_f_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* round to nearest even; NaN -> the canonical 0x7fff, as the GPU converts */
uint16_t emu_to_bf16(float x)
{
    uint32_t u = emu_f_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fffu;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* float -> IEEE half, round to nearest even, subnormals kept; NaN -> 0x7fff.
 * By hand, not _Float16 (clang < 15 lacks it on x86-64); checked against
 * gcc's _Float16 conversion for all 2^32 floats. */
uint16_t emu_to_f16(float x)
{
    const uint32_t u = emu_f_bits(x), a = u & 0x7fffffffu;
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (a > 0x7f800000u)
        return 0x7fffu;
    if (a >= 0x477ff000u) /* from 65520, half-way to 65536: infinity */
        return sign | 0x7c00u;
    if (a >= 0x38800000u) { /* a normal half: rebias, round off 13 bits */
        const uint32_t m = a - 0x38000000u;
        return sign | (uint16_t)((m + 0xfffu + ((m >> 13) & 1u)) >> 13);
    }
    if (a < 0x33000000u) /* below 2^-25, half the least subnormal: zero */
        return sign;
    /* a subnormal half: k * 2^-24 */
    const uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u, shift = 126u - e;
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    uint32_t k = mant >> shift;
    if (rem > half || (rem == half && (k & 1u)))
        k++;
    return sign | (uint16_t)k;
}

/* IEEE half -> float, exact; a NaN keeps its payload */
float emu_from_f16(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu)
        return emu_bits_f(sign | 0x7f800000u | m << 13);
    if (e)
        return emu_bits_f(sign | (e + 112u) << 23 | m << 13);
    const float v = (float)m * 0x1p-24f; /* subnormal or zero */
    return sign ? -v : v;
}

float emu_from_bf16(uint16_t h) { return emu_bits_f((uint32_t)h << 16); }
