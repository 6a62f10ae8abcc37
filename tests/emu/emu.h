/* SPDX-License-Identifier: BSD-3-Clause */
/* emu.h: the inside of libddpc-emu, the strict host emulation of the CUDA
 * runtime, NCCL and cuBLASLt that `configure --with-cuda=emulate` links
 * instead of libcudart, libnccl and libcublasLt (doc/gpu.md "Emulation").
 * A test instrument, not a GPU: device memory is host memory from tracked,
 * poisoned allocations; each stream is a thread that runs its queue in order
 * after seeded random delays; kernels are host twins enqueued on their
 * stream; graphs record operations by value and replay them. Every misuse
 * it can see (a pointer outside a live allocation of the right kind, a call
 * illegal during capture, an allocation while a collective is in flight) is
 * a "violation": printed with the call's name, kept as the sticky error, and
 * the process's exit status becomes EMU_VIOLATION_EXIT whatever main
 * returns. Not for src/: the library sees only the real headers. */
#ifndef DDPC_EMU_H
#define DDPC_EMU_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EMU_API __attribute__((visibility("default")))

/* the exit status of a process that saw a violation */
#define EMU_VIOLATION_EXIT 86

/* Kinds of memory the emulation hands out. */
enum emu_kind { EMU_DEVICE = 1, EMU_PINNED = 2 };

/* Report a violation (printf-style, the call first): "ddpc-emu[pid]: <msg>"
 * on stderr; the process will exit EMU_VIOLATION_EXIT. Returns
 * cudaErrorIllegalAddress, the sticky error it also sets, so that callers
 * can `return emu_violation(...)`. */
EMU_API cudaError_t emu_violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* [p, p + bytes) must lie inside one live allocation of kind (EMU_DEVICE or
 * EMU_PINNED; 0: device or pinned). bytes == 0 checks p only when non-NULL.
 * On failure: a violation naming call and what ("A", "bias", ...), and the
 * allocation p is nearest to. Returns cudaSuccess or the violation's error. */
EMU_API cudaError_t emu_check(const void *p, size_t bytes, int kind, const char *call,
                              const char *what);

/* The kind of memory p points into: EMU_DEVICE, EMU_PINNED, or 0 (a host
 * pointer the emulation did not allocate). */
EMU_API int emu_kind_of(const void *p);

/* Enqueue fn(arg) on stream s (0: the legacy default stream). arg (size
 * bytes, at most EMU_ARG_MAX) is copied now: a twin sees the arguments of
 * its launch, as a kernel does, and a graph replays them by value. During a
 * capture of s the operation is recorded instead. Returns cudaSuccess, or
 * the error a launch would (an invalid stream, a stream being destroyed). */
typedef void (*emu_fn)(void *arg);
#define EMU_ARG_MAX 512
EMU_API cudaError_t emu_launch(cudaStream_t s, const char *call, emu_fn fn, const void *arg,
                               size_t size);

/* For a kernel's launcher: the error the launcher returns after launching,
 * as cudaGetLastError() would (consumes it). */
EMU_API cudaError_t emu_last_error(void);
/* Set the error cudaGetLastError() returns next (a launcher refusing its
 * arguments). */
EMU_API void emu_set_error(cudaError_t e);

/* Seeded randomness of the emulation (DDPC_EMU_SEED, default fixed), thread
 * safe: uniform in [0, n). */
EMU_API uint32_t emu_rand(uint32_t n);

/* The device the calling thread has set (cudaSetDevice), 0 by default. */
EMU_API int emu_current_device(void);

#ifdef __cplusplus
}
#endif

#endif
