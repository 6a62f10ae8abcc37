/* SPDX-License-Identifier: BSD-3-Clause */
/* msg.c: status strings, the messages and errors every module records (with
 * the "ddpc[rank r/n host] module: " prefix), logging, and the handle's
 * plain accessors. Bottom layer: it calls nothing of libddpc above it. */
#include "config.h"
#include "util.h"

#include <stdio.h>
#include <string.h>

static char init_error[DDPC_ERRMSG_LEN];

const char *ddpc_strerror(ddpc_status_t st)
{
    switch (st) {
#define DDPC_X_STR(name, value, text)                                                          \
    case name:                                                                                 \
        return text;
        DDPC_STATUS_TABLE(DDPC_X_STR)
#undef DDPC_X_STR
    default:
        return "unknown status";
    }
}

const char *ddpc_source_name(ddpc_source_t src)
{
    static const char *const names[] = {"pmix", "slurm", "mpi-env", "torchrun", "single"};
    return (unsigned)src < sizeof names / sizeof *names ? names[src] : "unknown";
}

/* ------------------------------------------------------------------ messages */

/* Drop every "ddpc[rank ...] " after the start of s: a message that chains
 * its causes ("ddp: bucket 0 ...: comm: allreduce #625 ...") keeps each
 * cause's module and text and one prefix, its own. A cause from another
 * rank says so in its text ("failed on rank 0: ckpt: ..."). */
void ddpc_drop_inner_prefixes(char *s)
{
    static const char tag[] = "ddpc[rank ";
    char *p = *s ? s + 1 : s;
    while ((p = strstr(p, tag)) != NULL) {
        char *q = strchr(p, ']');
        if (!q || q[1] != ' ') {
            p += sizeof tag - 1;
            continue;
        }
        memmove(p, q + 2, strlen(q + 2) + 1);
    }
}

void ddpc_format_msg(char *dst, size_t n, const char *prefix, const char *module,
                     const char *fmt, va_list ap)
{
    int k = snprintf(dst, n, "%s %s: ", prefix, module);
    if (k < 0 || (size_t)k >= n)
        return;
    vsnprintf(dst + k, n - (size_t)k, fmt, ap);
    ddpc_drop_inner_prefixes(dst);
}

ddpc_status_t ddpc_set_error(char *dst, size_t n, const char *prefix, const char *module,
                             ddpc_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ddpc_format_msg(dst, n, prefix, module, fmt, ap);
    va_end(ap);
    return st;
}

void ddpc_set_prefix(ddpc_t rt)
{
    const ddpc_world_t *w = &rt->world;
    snprintf(rt->prefix, sizeof rt->prefix, "ddpc[rank %d/%d %s]", w->rank, w->size, w->host);
}

ddpc_status_t ddpc_verr(ddpc_t rt, ddpc_status_t st, const char *module, const char *fmt,
                        va_list ap)
{
    char *dst = rt ? rt->err : init_error;
    size_t n = rt ? sizeof rt->err : sizeof init_error;
    ddpc_format_msg(dst, n, rt ? rt->prefix : "ddpc[rank ?]", module, fmt, ap);
    if (rt && rt->cfg.log_level >= DDPC_LOG_DEBUG)
        fprintf(stderr, "%s (debug: recorded error %s)\n", dst, ddpc_strerror(st));
    return st;
}

ddpc_status_t ddpc_err(ddpc_t rt, ddpc_status_t st, const char *module, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ddpc_verr(rt, st, module, fmt, ap);
    va_end(ap);
    return st;
}

ddpc_status_t ddpc_mpi_err(ddpc_t rt, int mpirc, const char *module, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mpirc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "MPI error code %d", mpirc);
    return ddpc_err(rt, DDPC_ERR_MPI, module, "%s failed: %s", what, s);
}

void ddpc_clear_init_error(void) { init_error[0] = 0; }
const char *ddpc_last_error(ddpc_t rt) { return rt ? rt->err : init_error; }
const char *ddpc_init_error(void) { return init_error; }
const ddpc_world_t *ddpc_world(ddpc_t rt) { return rt ? &rt->world : NULL; }
const ddpc_config_t *ddpc_config(ddpc_t rt) { return rt ? &rt->cfg : NULL; }

/* ------------------------------------------------------------------ logging */

void ddpc_log(ddpc_t rt, ddpc_log_level_t level, const char *fmt, ...)
{
    if (rt && level > rt->cfg.log_level)
        return;
    static const char *const tag[] = {"error: ", "warning: ", "", "debug: "};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(line, sizeof line, "%s %s", rt ? rt->prefix : "ddpc[rank ?]",
                     tag[level & 3]);
    vsnprintf(line + k, sizeof line - (size_t)k, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line); /* one write per line: ranks do not interleave mid-line */
}
