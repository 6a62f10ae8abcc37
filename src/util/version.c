/* SPDX-License-Identifier: BSD-3-Clause */
/* version.c: what this libddpc is and what it was built and runs with
 * (ddpc_version, ddpc_build_info, ddpc_runtime_info; ddpc-info prints them).
 * Bottom layer: it asks MPI, CUDA and NCCL, nothing of libddpc. */
#include "config.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

#ifdef DDPC_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#ifdef DDPC_HAVE_NCCL
#include <nccl.h>
#endif

const char *ddpc_version(void) { return PACKAGE_VERSION; }

const char *ddpc_build_info(void)
{
    static char info[512];
    if (!info[0]) {
        char mpiv[MPI_MAX_LIBRARY_VERSION_STRING] = "";
        int len = 0;
        MPI_Get_library_version(mpiv, &len);
        char *nl = strchr(mpiv, '\n');
        if (nl)
            *nl = 0;
#ifdef DDPC_HAVE_CUDA
        const char *archs = " (compute capabilities " DDPC_CUDA_ARCHS ")";
#else
        const char *archs = "";
#endif
        snprintf(info, sizeof info, "MPI: %s; PMIx: %s; HDF5: %s; CUDA: %s%s; NCCL: %s; BLAS: %s",
                 mpiv, DDPC_PMIX_VERSION, DDPC_HDF5_VERSION, DDPC_CUDA_VERSION, archs,
                 DDPC_NCCL_VERSION, DDPC_BLAS_NAME);
    }
    return info;
}

const char *ddpc_runtime_info(void)
{
    static char info[256];
#ifdef DDPC_HAVE_CUDA
    int drv = 0, rtv = 0, n = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rtv);
    cudaError_t e = cudaGetDeviceCount(&n);
    char gpus[128];
    if (e == cudaSuccess)
        snprintf(gpus, sizeof gpus, "%d GPU(s) visible", n);
    else
        snprintf(gpus, sizeof gpus, "no usable GPU (%s)", cudaGetErrorString(e));
    char nccl[32] = "no";
#ifdef DDPC_HAVE_NCCL
    int v = 0;
    if (ncclGetVersion(&v) == ncclSuccess)
        snprintf(nccl, sizeof nccl, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
#endif
    char dv[16] = "none";
    if (drv > 0)
        snprintf(dv, sizeof dv, "%d.%d", drv / 1000, drv % 1000 / 10);
    snprintf(info, sizeof info, "CUDA driver: %s; CUDA runtime: %d.%d; NCCL: %s; %s", dv,
             rtv / 1000, rtv % 1000 / 10, nccl, gpus);
#else
    snprintf(info, sizeof info, "CUDA: not built in");
#endif
    return info;
}
