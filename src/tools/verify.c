/* SPDX-License-Identifier: BSD-3-Clause */
/* verify.c: `ddpc-ckpt verify FILE`: validate the file, CRCs included. */
#include "config.h"
#include "ckpt_tool.h"

int cmd_verify(const char *file)
{
    char why[1024];
    cfile_t c;
    uint64_t nds, nb;
    int rc = cf_verify(&c, file, &nds, &nb, why, sizeof why);
    cf_close(&c);
    if (rc != RC_OK)
        return err(rc, "%s: %s", file, why);
    printf("ok: %s: %llu datasets, %llu bytes verified\n", file, (unsigned long long)nds,
           (unsigned long long)nb);
    return RC_OK;
}
