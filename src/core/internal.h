/* internal.h: what the engines of libddpc (src/ddp, src/ckpt, src/sampler)
 * share and users never see: the layers below them (doc/layers.md) in one
 * include: src/util (handle, errors, logging, options, clock), src/pmix
 * (discovery, key exchange) and src/comm (control messages, flight
 * recorder); and the CRC both the DDP engine and the checkpoints use. The
 * layers below the engines do not include it (tests/layers.sh checks). */
#ifndef DDPC_INTERNAL_H
#define DDPC_INTERNAL_H

#include "../util/util.h"
#include "../pmix/discover.h"
#include "../comm/comm.h"

/* zlib's CRC-32 (src/ckpt/crc.c): checkpoints, and the replica check of the DDP engine. */
uint32_t ck_crc32(uint32_t crc, const void *buf, size_t len);

#endif /* DDPC_INTERNAL_H */
