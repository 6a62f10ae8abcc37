/* SPDX-License-Identifier: BSD-3-Clause */
/* internal.h: what the engines of libddpc (src/ddp, src/ckpt, src/sampler)
 * share and users never see: the layers below them (doc/layers.md) in one
 * include: src/util (handle, errors, logging, options, clock), src/pmix
 * (discovery, key exchange) and src/comm (control messages, flight
 * recorder; the CRC of util/crc.h with util). The
 * layers below the engines do not include it (tests/layers.sh checks). */
#ifndef DDPC_INTERNAL_H
#define DDPC_INTERNAL_H

#include "../util/util.h"
#include "../pmix/discover.h"
#include "../comm/comm.h"

#endif /* DDPC_INTERNAL_H */
