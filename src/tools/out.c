/* SPDX-License-Identifier: BSD-3-Clause */
/* out.c: ddpc-ckpt's text output: messages to stderr, growing strings, the
 * escaping of a file's bytes for printing, numbers and shapes as text. */
#include "config.h"
#include "ckpt_tool.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *const prog = "ddpc-ckpt";

int err(int code, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        err(RC_IO, "out of memory (%zu bytes)", n);
        exit(RC_IO);
    }
    return q;
}

char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(xrealloc(NULL, n), s, n);
}

static void sb_grow(sb_t *b, size_t more)
{
    if (b->n + more + 1 > b->cap) {
        b->cap = (b->n + more + 1) * 2;
        b->s = xrealloc(b->s, b->cap);
    }
}

void sb_add(sb_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0)
        return;
    sb_grow(b, (size_t)k);
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

const char *sb_str(sb_t *b)
{
    if (!b->s)
        sb_grow(b, 0), b->s[0] = 0;
    return b->s;
}

void sb_trunc(sb_t *b, size_t n) { b->n = n, sb_grow(b, 0), b->s[n] = 0; }
void sb_clear(sb_t *b) { sb_trunc(b, 0); }

/* Bytes of the file as printable text: anything outside printable ASCII,
 * and space (unless quoted), as \xNN; quoted: '"' and backslash as \" and \\. */
void sb_esc(sb_t *b, const char *s, size_t len, int quoted)
{
    if (quoted)
        sb_add(b, "\"");
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (quoted && (c == '"' || c == '\\'))
            sb_add(b, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f || c == '\\' || (c == ' ' && !quoted))
            sb_add(b, "\\x%02x", c);
        else
            sb_add(b, "%c", c);
    }
    if (quoted)
        sb_add(b, "\"");
}

/* s as sb_esc writes it, for a message; valid until four more calls. */
const char *esc_q(const char *s, int quoted)
{
    static sb_t ring[4];
    static unsigned next;
    sb_t *b = &ring[next++ % 4];
    sb_clear(b);
    sb_esc(b, s, strlen(s), quoted);
    return sb_str(b);
}

const char *esc(const char *s) { return esc_q(s, 0); }

/* Shortest %g that reads back as v. */
void sb_double(sb_t *b, double v)
{
    char t[40];
    for (int p = 15; p <= 17; p++) {
        snprintf(t, sizeof t, "%.*g", p, v);
        if (strtod(t, NULL) == v || v != v)
            break;
    }
    sb_add(b, "%s", t);
}

void sb_shape(sb_t *b, int ndim, const hsize_t *dims)
{
    sb_add(b, "[");
    for (int k = 0; k < ndim; k++)
        sb_add(b, "%s%llu", k ? "," : "", (unsigned long long)dims[k]);
    sb_add(b, "]");
}
