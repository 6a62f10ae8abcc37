/* SPDX-License-Identifier: BSD-3-Clause */
/* check_ckpt_crc.c: the checkpoint CRC (src/ckpt/crc.c, carry-less
 * multiplies where the CPU has them) equals zlib's crc32 for every length,
 * alignment and starting value tried, also when computed in pieces. */
#include "ckpt_internal.h"

#include <check.h>
#include <stdlib.h>
#include <zlib.h>
#include "checkmain.h"

static unsigned char *random_bytes(size_t n, uint64_t s)
{
    unsigned char *b = malloc(n);
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        b[i] = (unsigned char)s;
    }
    return b;
}

START_TEST(equals_zlib)
{
    enum { N = 1 << 20 };
    unsigned char *b = random_bytes(N + 64, 42);
    uint64_t s = 7;
    for (int t = 0; t < 50000; t++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        size_t off = s % 64, len = (s >> 8) % (t < 49000 ? 400 : N);
        uint32_t init = t % 2 ? (uint32_t)(s >> 32) : 0;
        ck_assert_msg(ddpc_crc32(init, b + off, len) == (uint32_t)crc32_z(init, b + off, len),
                      "offset %zu, length %zu, start %08x", off, len, init);
    }
    free(b);
}
END_TEST

START_TEST(in_pieces)
{
    enum { N = 10000019 };
    unsigned char *b = random_bytes(N, 99);
    uint32_t c = 0;
    for (size_t o = 0; o < N; o += 65537)
        c = ddpc_crc32(c, b + o, N - o < 65537 ? N - o : 65537);
    ck_assert_uint_eq(c, (uint32_t)crc32_z(0, b, N));
    ck_assert_uint_eq(ddpc_crc32(0, b, 0), 0);
    ck_assert_uint_eq(ddpc_crc32(0, "123456789", 9), 0xcbf43926u); /* the CRC-32 check value */
    free(b);
}
END_TEST

static Suite *crc_suite(void)
{
    Suite *s = suite_create("ckpt crc");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, equals_zlib);
    tcase_add_test(tc, in_pieces);
    suite_add_tcase(s, tc);
    return s;
}

CHECK_MAIN(crc_suite)
