/* ddpc_comm.h: the communicator ("process group"). Collectives over host
 * memory through MPI (the NCCL backend over device memory plugs in behind the
 * same calls), blocking and asynchronous with work handles.
 * Every collective must be called by every rank of the communicator, in the
 * same order, with the same count, dtype, op and root. */
#ifndef DDPC_COMM_H
#define DDPC_COMM_H

#include "ddpc_core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DDPC_F32 = 0,
    DDPC_F64,
    DDPC_I32,
    DDPC_I64,
    DDPC_BF16, /* bfloat16, stored as uint16_t */
    DDPC_F16,  /* IEEE half, stored as uint16_t */
    DDPC_U8,
    DDPC_DTYPE_COUNT
} ddpc_dtype_t;

DDPC_API size_t ddpc_dtype_size(ddpc_dtype_t dt);   /* bytes; 0 if invalid */
DDPC_API const char *ddpc_dtype_name(ddpc_dtype_t dt); /* "float32", ... */

typedef enum { DDPC_SUM = 0, DDPC_AVG, DDPC_MIN, DDPC_MAX, DDPC_REDOP_COUNT } ddpc_redop_t;

typedef struct ddpc_comm *ddpc_comm_t;
typedef struct ddpc_work *ddpc_work_t;

/* The communicator over all ranks that ddpc_init made (backend MPI, host
 * memory). Owned by the runtime; valid until ddpc_finalize. */
DDPC_API ddpc_comm_t ddpc_comm_world(ddpc_t rt);
DDPC_API int ddpc_comm_rank(ddpc_comm_t c);
DDPC_API int ddpc_comm_size(ddpc_comm_t c);
DDPC_API ddpc_backend_t ddpc_comm_backend(ddpc_comm_t c);
DDPC_API ddpc_t ddpc_comm_runtime(ddpc_comm_t c);

/* Collectives. Buffers are host memory for the MPI backend. send == recv is
 * in-place and allowed for allreduce and broadcast. Counts are elements.
 * AVG divides the sum by the size (integers: truncating division).
 * BF16 and F16 support SUM and AVG only (accumulated in their own type, as
 * NCCL does). The i* variants return a work handle at once; the operation
 * runs on the communicator's progress thread, in call order; the buffers
 * must not be touched until the work completes. */
DDPC_API ddpc_status_t ddpc_allreduce(ddpc_comm_t c, const void *send, void *recv, size_t count,
                                      ddpc_dtype_t dt, ddpc_redop_t op);
DDPC_API ddpc_status_t ddpc_iallreduce(ddpc_comm_t c, const void *send, void *recv, size_t count,
                                       ddpc_dtype_t dt, ddpc_redop_t op, ddpc_work_t *work);
DDPC_API ddpc_status_t ddpc_broadcast(ddpc_comm_t c, void *buf, size_t count, ddpc_dtype_t dt,
                                      int root);
DDPC_API ddpc_status_t ddpc_ibroadcast(ddpc_comm_t c, void *buf, size_t count, ddpc_dtype_t dt,
                                       int root, ddpc_work_t *work);
/* recv holds size * count elements, rank r's block at r * count. */
DDPC_API ddpc_status_t ddpc_allgather(ddpc_comm_t c, const void *send, void *recv, size_t count,
                                      ddpc_dtype_t dt);
/* send holds size * count elements; rank r receives the reduction of block r. */
DDPC_API ddpc_status_t ddpc_reduce_scatter(ddpc_comm_t c, const void *send, void *recv,
                                           size_t count, ddpc_dtype_t dt, ddpc_redop_t op);
DDPC_API ddpc_status_t ddpc_barrier(ddpc_comm_t c);

/* Work handles. test sets *done (1 when finished, successfully or not) and
 * returns the operation's status once done. wait blocks up to timeout_s
 * (< 0: the runtime's DDPC_TIMEOUT) and frees the handle unless it timed out;
 * on DDPC_ERR_TIMEOUT the message names the operation, its sequence number and
 * its size, and the job should be ended with ddpc_abort. */
DDPC_API ddpc_status_t ddpc_work_test(ddpc_work_t w, int *done);
DDPC_API ddpc_status_t ddpc_work_wait(ddpc_work_t w, double timeout_s);

/* Sequence number of the next collective on this communicator (all ranks agree). */
DDPC_API uint64_t ddpc_comm_seq(ddpc_comm_t c);

/* bf16/fp16 <-> float32 conversions (round to nearest even), for compression. */
DDPC_API uint16_t ddpc_f32_to_bf16(float f);
DDPC_API float ddpc_bf16_to_f32(uint16_t h);
DDPC_API uint16_t ddpc_f32_to_f16(float f);
DDPC_API float ddpc_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif

#endif /* DDPC_COMM_H */
