/* local.h: what the files of src/sampler share and users never see. */
#ifndef DDPC_SAMPLER_LOCAL_H
#define DDPC_SAMPLER_LOCAL_H

#include "ddpc_sampler.h"

/* "ddpc[rank r/n]" of the sampler. */
const char *ddpc_sampler_prefix(ddpc_sampler_t s);

#endif
