/* SPDX-License-Identifier: BSD-3-Clause */
/* ddpc.h: everything a training program needs from ddpc: the runtime core,
 * the communicator, the DDP engine and optimizers, the sampler and the data
 * loader, checkpoints. Include only this. */
#ifndef DDPC_H
#define DDPC_H

#include "ddpc_core.h"
#include "ddpc_comm.h"
#include "ddpc_ddp.h"
#include "ddpc_sampler.h"
#include "ddpc_data.h"
#include "ddpc_ckpt.h"

#endif /* DDPC_H */
