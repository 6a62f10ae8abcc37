/* SPDX-License-Identifier: BSD-3-Clause */
/* env.c: DDPC_* options from the environment, parsed with a message that
 * names the variable and what was expected. Bottom layer. */
#include "config.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

ddpc_status_t ddpc_env_double(ddpc_t rt, const char *name, double lo, double hi, double *val)
{
    const char *s = getenv(name);
    if (!s)
        return DDPC_OK;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return ddpc_err(rt, DDPC_ERR_INVALID, "options", "%s=\"%s\": expected a number in [%g, %g]",
                        name, s, lo, hi);
    *val = v;
    return DDPC_OK;
}

ddpc_status_t ddpc_env_long(ddpc_t rt, const char *name, long lo, long hi, long *val)
{
    const char *s = getenv(name);
    if (!s)
        return DDPC_OK;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return ddpc_err(rt, DDPC_ERR_INVALID, "options",
                        "%s=\"%s\": expected an integer in [%ld, %ld]", name, s, lo, hi);
    *val = v;
    return DDPC_OK;
}

ddpc_status_t ddpc_env_choice(ddpc_t rt, const char *name, const char *const *choices, int *val)
{
    const char *s = getenv(name);
    if (!s)
        return DDPC_OK;
    char list[256] = "";
    for (int i = 0; choices[i]; i++) {
        if (strcasecmp(s, choices[i]) == 0) {
            *val = i;
            return DDPC_OK;
        }
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "|" : "",
                 choices[i]);
    }
    return ddpc_err(rt, DDPC_ERR_INVALID, "options", "%s=\"%s\": expected one of %s", name, s,
                    list);
}
