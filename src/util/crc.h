/* SPDX-License-Identifier: BSD-3-Clause */
/* crc.h: zlib's CRC-32 (crc.c), for the checkpoints' per-dataset checksums
 * and the DDP engine's replica check. No dependencies: tests and ddpc-ckpt
 * compile crc.c in. */
#ifndef DDPC_UTIL_CRC_H
#define DDPC_UTIL_CRC_H

#include <stddef.h>
#include <stdint.h>

/* zlib's crc32(crc, buf, len) (start with 0), with carry-less multiplies
 * where the CPU has them. */
uint32_t ddpc_crc32(uint32_t crc, const void *buf, size_t len);

#endif
