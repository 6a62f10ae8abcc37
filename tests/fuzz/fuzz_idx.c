/* SPDX-License-Identifier: BSD-3-Clause */
/* fuzz_idx.c: libFuzzer target for the idx reader (src/sampler/idx.c): the
 * input is split into an images file and a labels file (the first byte says
 * where: byte 0 * len / 256), both written to a private temporary directory;
 * ddpc_idx_open must accept them or refuse them with a message, never crash
 * or read out of bounds, and a dataset it accepts must gather. */
#include "ddpc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256], img[300], lab[300];

static int put(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int bad = n && fwrite(p, 1, n, f) != n;
    return fclose(f) || bad ? -1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/ddpc-fuzz-idx.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(dir))
            abort();
        snprintf(img, sizeof img, "%s/images", dir);
        snprintf(lab, sizeof lab, "%s/labels", dir);
    }
    if (size < 1)
        return 0;
    size_t cut = 1 + (size_t)data[0] * (size - 1) / 256;
    if (put(img, data + 1, cut - 1) || put(lab, data + cut, size - cut))
        abort();
    ddpc_idx_config_t c = DDPC_IDX_CONFIG_INIT;
    ddpc_idx_t ds = NULL;
    if (ddpc_idx_open(img, lab, &c, &ds) == DDPC_OK) {
        size_t n = ddpc_idx_count(ds), dim = ddpc_idx_dim(ds), idx[4];
        size_t k = n < 4 ? n : 4;
        float *x = malloc((k ? k : 1) * (dim ? dim : 1) * sizeof(float));
        uint8_t y[4];
        for (size_t i = 0; i < k; i++)
            idx[i] = n - 1 - i;
        if (x && k && ddpc_idx_gather(ds, idx, k, x, y) != DDPC_OK)
            abort(); /* an accepted dataset must gather */
        free(x);
    } else if (!ds || !*ddpc_idx_last_error(ds)) {
        if (ds) /* a refusal says why */
            abort();
    }
    ddpc_idx_close(ds);
    return 0;
}
