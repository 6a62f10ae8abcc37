/* SPDX-License-Identifier: BSD-3-Clause */
/* quiet_assert.h: assertions for loops over many elements. Check marks every
 * passing ck_assert with a write to its pipe (_mark_point), so a loop of 10^6
 * assertions spends seconds in write(); these fail the same way (message,
 * file and line) and cost a comparison when they pass. */
#ifndef DDPC_QUIET_ASSERT_H
#define DDPC_QUIET_ASSERT_H

#include <check.h>
#include <stdint.h>

/* REQUIRE(expr, "format", args...) */
#define REQUIRE(expr, ...)                                                                     \
    do {                                                                                       \
        if (!(expr))                                                                           \
            ck_abort_msg("Assertion '" #expr "' failed: " __VA_ARGS__);                        \
    } while (0)

/* REQUIRE_UINT(a, op, b): unsigned comparison printing both values */
#define REQUIRE_UINT(X, OP, Y)                                                                 \
    do {                                                                                       \
        uintmax_t x_ = (X), y_ = (Y);                                                          \
        if (!(x_ OP y_))                                                                       \
            ck_abort_msg("Assertion '%s' failed: %s == %ju, %s == %ju", #X " " #OP " " #Y, #X, \
                         x_, #Y, y_);                                                          \
    } while (0)

#endif
