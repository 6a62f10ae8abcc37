/* SPDX-License-Identifier: BSD-3-Clause */
/* crc.c: zlib's CRC-32 (the value of crc32() and Python's zlib.crc32), fast.
 * On x86 with PCLMULQDQ it folds 64 bytes per step with carry-less
 * multiplies (Intel, "Fast CRC Computation for Generic Polynomials Using
 * PCLMULQDQ Instruction", 2009): about 3x zlib's tables, so the checksum
 * stays well below the disk's time. Elsewhere, and for the tail, zlib. */
#include "config.h"
#include "crc.h"

#include <zlib.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CK_HAVE_FOLD 1

/* crc: the inverted running value; n >= 64 and a multiple of 16. The
 * constants are x^k mod P for the bit-reflected polynomial 0x04C11DB7:
 * k1, k2 fold 512 bits, k3, k4 fold 128, k5 folds 64 to 32, then Barrett
 * (P' = x^64 / P, and P itself). */
__attribute__((target("pclmul,sse4.1"))) static uint32_t fold(const unsigned char *p, size_t n,
                                                              uint32_t crc)
{
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
    const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124);
    const __m128i barrett = _mm_set_epi64x(0x01f7011641, 0x01db710641);
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x[4], t;
    for (int i = 0; i < 4; i++)
        x[i] = _mm_loadu_si128((const __m128i *)(p + 16 * i));
    x[0] = _mm_xor_si128(x[0], _mm_cvtsi32_si128((int)crc));
    for (p += 64, n -= 64; n >= 64; p += 64, n -= 64) /* 4 lanes of 128 bits */
        for (int i = 0; i < 4; i++) {
            t = _mm_clmulepi64_si128(x[i], k1k2, 0x00);
            x[i] = _mm_xor_si128(_mm_clmulepi64_si128(x[i], k1k2, 0x11), t);
            x[i] = _mm_xor_si128(x[i], _mm_loadu_si128((const __m128i *)(p + 16 * i)));
        }
    __m128i a = x[0];
    for (int i = 1; i < 4; i++) { /* the lanes into one */
        t = _mm_clmulepi64_si128(a, k3k4, 0x00);
        a = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(a, k3k4, 0x11), t), x[i]);
    }
    for (; n >= 16; p += 16, n -= 16) {
        t = _mm_clmulepi64_si128(a, k3k4, 0x00);
        a = _mm_xor_si128(_mm_clmulepi64_si128(a, k3k4, 0x11), t);
        a = _mm_xor_si128(a, _mm_loadu_si128((const __m128i *)p));
    }
    t = _mm_clmulepi64_si128(a, k3k4, 0x10); /* 128 -> 64 bits */
    a = _mm_xor_si128(_mm_srli_si128(a, 8), t);
    t = _mm_srli_si128(a, 4);
    a = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(a, low32), k5, 0x00), t);
    t = _mm_clmulepi64_si128(_mm_and_si128(a, low32), barrett, 0x10); /* -> 32 bits */
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), barrett, 0x00);
    return (uint32_t)_mm_extract_epi32(_mm_xor_si128(a, t), 1);
}

static int can_fold(void)
{
    static int known, yes;
    if (!known) {
        __builtin_cpu_init();
        yes = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
        known = 1;
    }
    return yes;
}
#endif

uint32_t ddpc_crc32(uint32_t crc, const void *buf, size_t len)
{
    const unsigned char *p = buf;
#ifdef CK_HAVE_FOLD
    if (len >= 64 && can_fold()) {
        size_t n = len & ~(size_t)15;
        crc = ~fold(p, n, ~crc);
        p += n;
        len -= n;
    }
#endif
    return (uint32_t)crc32_z(crc, p, len);
}
