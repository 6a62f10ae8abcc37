/* SPDX-License-Identifier: BSD-3-Clause */
/* device.c: the device a rank trains on (see device.h); the one-GPU-per-rank
 * rule itself is the library's (ddpc_gpu_rule). */
#include "device.h"

#include "ddpc.h"

#include <stdio.h>
#include <string.h>

int gpu_count_visible(const char *v)
{
    if (!v)
        return -1;
    if (!*v || !strcmp(v, "NoDevFiles"))
        return 0;
    int n = 1;
    for (; *v; v++)
        n += *v == ',';
    return n;
}

int device_cuda_count(void)
{
#ifdef TRAINER_HAVE_CUDA_MODEL
    return model_cuda_device_count();
#else
    return -1;
#endif
}

int device_resolve(device_kind_t want, int local_rank, int local_size, int ndev,
                   const char *visible, device_kind_t *kind, int *gpu, char *note,
                   size_t notelen, char *err, size_t errlen)
{
    char why[256] = "";
    *kind = DEVICE_CPU;
    *gpu = -1;
    if (notelen)
        note[0] = 0;
    if (want == DEVICE_CPU)
        return 0;
    if (ndev < 0) {
        snprintf(why, sizeof why, "this trainer was built without the CUDA model");
    } else {
        int g = ddpc_gpu_rule(local_rank, local_size, ndev, visible, why, sizeof why);
        if (g >= 0) {
            *kind = DEVICE_CUDA;
            *gpu = g;
            return 0;
        }
    }
    if (want == DEVICE_CUDA) {
        snprintf(err, errlen, "--device cuda: %s", why);
        return -1;
    }
    snprintf(note, notelen, "--device auto: using the cpu (%s)", why);
    return 0;
}
