/* SPDX-License-Identifier: BSD-3-Clause */
/* local.h: what the files of src/sampler share and users never see.
 * The data loader reuses the sampler's message prefix and the dataset's
 * unchecked row gather. */
#ifndef DDPC_SAMPLER_LOCAL_H
#define DDPC_SAMPLER_LOCAL_H

#include "ddpc_data.h"
#include "ddpc_sampler.h"

/* "ddpc[rank r/n]" of the sampler. */
const char *ddpc_sampler_prefix(ddpc_sampler_t s);

/* ddpc_idx_gather without the checks: every idx[i] < count. Read-only on ds,
 * so it may run on the loader's thread while other threads gather too. */
void ddpc_idx_gather_rows(ddpc_idx_t ds, const size_t *idx, size_t n, float *x, uint8_t *y);

#endif
