/* SPDX-License-Identifier: BSD-3-Clause */
/* device.h: which device a rank trains on. The pure rule that binds one GPU
 * per rank from its local rank and what CUDA_VISIBLE_DEVICES leaves visible
 * is the library's ddpc_gpu_rule (ddpc_comm.h); device_resolve applies
 * --device to what this build and this node have. */
#ifndef TRAINER_DEVICE_H
#define TRAINER_DEVICE_H

#include "options.h"

#include <stddef.h>

/* Count the entries of a CUDA_VISIBLE_DEVICES value: -1 when unset (NULL),
 * 0 when empty or Slurm's "NoDevFiles", else the comma-separated count. */
int gpu_count_visible(const char *cuda_visible_devices);

/* CUDA devices this process sees: -1 when this build has no CUDA model. */
int device_cuda_count(void);

/* --device applied: DEVICE_CPU or DEVICE_CUDA in *kind and the GPU in *gpu
 * (-1 for cpu). auto falls back to cpu (with the reason in note, may be
 * empty); cuda without a usable GPU or without the CUDA model in this build
 * is an error (-1, message in err). ndev as device_cuda_count() returns. */
int device_resolve(device_kind_t want, int local_rank, int local_size, int ndev,
                   const char *visible, device_kind_t *kind, int *gpu, char *note,
                   size_t notelen, char *err, size_t errlen);

#endif /* TRAINER_DEVICE_H */
