/* SPDX-License-Identifier: BSD-3-Clause */
/* batchnorm.c: synchronized batch normalization's statistics
 * (ddpc_batchnorm_stats): every rank's (count, mean, biased variance) per
 * channel, all-gathered over a communicator and combined with Chan's
 * parallel formula in rank order, so the result is the same bit for bit on
 * every rank. Host memory on a host communicator; on a device communicator
 * a kernel packs and one combines (cuda_kernels.cu), on the communicator's
 * stream. Not here: the normalization itself, which is the model's. */
#include "config.h"
#include "ddpc_ddp.h"
#include "internal.h"

#include <string.h>

#ifdef DDPC_HAVE_CUDA
#include "cuda_kernels.h"
#endif

#define BN_MODULE "batchnorm"

/* A count travels as two floats, hi * 2^24 + lo, each exact (counts < 2^48). */
#define BN_COUNT_SPLIT 16777216.0

size_t ddpc_batchnorm_workspace(ddpc_comm_t comm, int channels)
{
    if (!comm || channels <= 0)
        return 0;
    return ((size_t)ddpc_comm_size(comm) + 1) * (2 * (size_t)channels + 2);
}

/* The combination, rank after rank: recv (size, 2C + 2) as packed by
 * bn_pack; the twin of the kernel in cuda_kernels.cu. */
static void bn_combine_host(const float *recv, int size, int C, float *mean, float *var,
                            double *total)
{
    const size_t row = 2 * (size_t)C + 2;
    double n = 0;
    for (int r = 0; r < size; r++)
        n += (double)recv[(size_t)r * row] * BN_COUNT_SPLIT + (double)recv[(size_t)r * row + 1];
    for (int c = 0; c < C; c++) {
        double na = 0, ma = 0, m2a = 0;
        for (int r = 0; r < size; r++) {
            const float *b = recv + (size_t)r * row;
            double nb = (double)b[0] * BN_COUNT_SPLIT + (double)b[1];
            if (nb <= 0)
                continue;
            double mb = b[2 + c], m2b = (double)b[2 + C + c] * nb;
            double nab = na + nb, delta = mb - ma;
            ma += delta * (nb / nab);
            m2a += m2b + delta * delta * (na * nb / nab);
            na = nab;
        }
        mean[c] = na > 0 ? (float)ma : 0.0f;
        var[c] = na > 0 ? (float)(m2a / na) : 0.0f;
    }
    if (total)
        *total = n;
}

ddpc_status_t ddpc_batchnorm_stats(ddpc_comm_t comm, int channels, int64_t count, float *mean,
                                   float *var, double *total, float *work)
{
    if (!comm)
        return ddpc_err(NULL, DDPC_ERR_INVALID, BN_MODULE,
                        "ddpc_batchnorm_stats: the communicator is NULL");
    ddpc_t rt = ddpc_comm_runtime(comm);
    if (channels <= 0)
        return ddpc_err(rt, DDPC_ERR_INVALID, BN_MODULE,
                        "ddpc_batchnorm_stats: channels is %d; expected at least 1", channels);
    if (count < 0 || (double)count >= BN_COUNT_SPLIT * BN_COUNT_SPLIT)
        return ddpc_err(rt, DDPC_ERR_INVALID, BN_MODULE,
                        "ddpc_batchnorm_stats: count is %lld; expected 0 to 2^48 - 1",
                        (long long)count);
    if (!mean || !var || !work)
        return ddpc_err(rt, DDPC_ERR_INVALID, BN_MODULE,
                        "ddpc_batchnorm_stats: %s is NULL; expected %s memory of %d floats",
                        !mean ? "mean" : !var ? "var" : "work",
                        ddpc_comm_device(comm) >= 0 ? "the communicator's device" : "host",
                        !work ? (int)ddpc_batchnorm_workspace(comm, channels) : channels);
    const int size = ddpc_comm_size(comm), C = channels;
    const size_t row = 2 * (size_t)C + 2;
    float *send = work, *recv = work + row; /* (row,) this rank's; (size, row) everyone's */
    const float hi = (float)(double)(count / (int64_t)BN_COUNT_SPLIT);
    const float lo = (float)(double)(count % (int64_t)BN_COUNT_SPLIT);
    const int device = ddpc_comm_device(comm);
    if (device < 0) {
        send[0] = hi;
        send[1] = lo;
        memcpy(send + 2, mean, (size_t)C * sizeof *mean);
        memcpy(send + 2 + C, var, (size_t)C * sizeof *var);
        ddpc_status_t st = ddpc_allgather(comm, send, recv, row, DDPC_F32);
        if (st != DDPC_OK)
            return st;
        bn_combine_host(recv, size, C, mean, var, total);
        return DDPC_OK;
    }
#ifdef DDPC_HAVE_CUDA
    cudaStream_t stream = (cudaStream_t)ddpc_comm_stream(comm);
    cudaError_t e = ddpc_cuda_bn_pack(hi, lo, mean, var, C, send, stream);
    if (e != cudaSuccess)
        return ddpc_err(rt, DDPC_ERR_CUDA, BN_MODULE,
                        "ddpc_batchnorm_stats: packing %d channels on GPU %d: %s", C, device,
                        cudaGetErrorString(e));
    ddpc_status_t st = ddpc_allgather(comm, send, recv, row, DDPC_F32);
    if (st != DDPC_OK)
        return st;
    e = ddpc_cuda_bn_combine(recv, size, C, mean, var, total, stream);
    if (e != cudaSuccess)
        return ddpc_err(rt, DDPC_ERR_CUDA, BN_MODULE,
                        "ddpc_batchnorm_stats: combining %d ranks' statistics on GPU %d: %s",
                        size, device, cudaGetErrorString(e));
    return DDPC_OK;
#else
    (void)hi, (void)lo, (void)send, (void)recv, (void)size, (void)total;
    return ddpc_err(rt, DDPC_ERR_UNSUPPORTED, BN_MODULE,
                    "ddpc_batchnorm_stats: a device communicator, but this ddpc was built "
                    "without CUDA");
#endif
}
