/* SPDX-License-Identifier: BSD-3-Clause */
/* emu_internal.h: what the emulation's files share and nothing outside
 * them sees: a stream operation, and submission with flags (nccl.c). */
#ifndef DDPC_EMU_INTERNAL_H
#define DDPC_EMU_INTERNAL_H

#include "emu.h"

enum op_kind { OP_FN, OP_WAIT, OP_EVENT };
enum { OP_COLLECTIVE = 1 }; /* an NCCL operation: counted in flight until it ends */

typedef struct op {
    struct op *next;
    int kind, flags;
    const char *call;
    uint64_t ticket;                 /* its stream's, when enqueued */
    emu_fn fn;                       /* OP_FN */
    void *heap;                      /* a staged copy source, owned */
    size_t heap_size;
    int heap_arg;                    /* fn's argument is heap (not arg) */
    struct CUstream_st *wait_stream; /* OP_WAIT: until wait_stream has completed */
    uint64_t wait_ticket;
    struct CUevent_st *event;        /* OP_EVENT: its time is set when it runs */
    _Alignas(16) unsigned char arg[EMU_ARG_MAX];
} op_t;

/* emu_launch with flags (OP_COLLECTIVE); no sticky-error check. */
cudaError_t emu_submit_fn(cudaStream_t s, const char *call, emu_fn fn, const void *arg,
                          size_t size, int flags);

/* halfconv.c: bit patterns, and the GPU's round-to-nearest-even
 * conversions (a NaN becomes 0x7fff; from_f16 keeps a NaN's payload). */
float emu_bits_f(uint32_t u);
uint32_t emu_f_bits(float f);
uint16_t emu_to_bf16(float x);
uint16_t emu_to_f16(float x);
float emu_from_f16(uint16_t h);
float emu_from_bf16(uint16_t h);

/* nccl.c: collectives enqueued and not ended on live communicators (no
 * allocation while non-zero), and the hooks around an OP_COLLECTIVE
 * operation, whose argument starts with its communicator. */
int emu_nccl_in_flight(void);
void emu_nccl_op_begin(void *arg);
void emu_nccl_op_end(void *arg);

#endif
