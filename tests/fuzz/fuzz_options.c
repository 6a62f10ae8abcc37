/* SPDX-License-Identifier: BSD-3-Clause */
/* fuzz_options.c: libFuzzer target for the trainer's command line
 * (examples/options.c): the input is split at NUL bytes into argv[1..];
 * options_parse must accept it or refuse it with a message naming what was
 * wrong, never crash, and what it accepts must be in range. */
#include "options.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1);
    char *argv[65] = {"trainer"};
    int argc = 1;
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    for (char *p = buf; p <= buf + size && argc < 64; p += strlen(p) + 1)
        argv[argc++] = p;
    options_t o;
    options_default(&o);
    char err[512];
    err[0] = 0;
    if (options_parse(&o, argc, argv, err, sizeof err) == 0) {
        if (o.epochs < 1 || o.batch_size < 1 || o.grad_accum < 1 || !(o.lr > 0) ||
            o.model.nhidden < 0 || o.model.nhidden > MODEL_MAX_HIDDEN || o.ckpt_keep < 1)
            abort();
    } else if (!err[0]) {
        abort(); /* a refusal says why */
    }
    free(buf);
    return 0;
}
