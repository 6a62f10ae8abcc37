/* SPDX-License-Identifier: BSD-3-Clause */
/* export.c: `ddpc-ckpt export FILE OUT`: the /model tensors as float32
 * safetensors, written via OUT.tmp, their CRCs checked on the way. */
#include "config.h"
#include "ckpt_tool.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* JSON string of UTF-8 bytes; -1 if s is not valid UTF-8. */
static int sb_json(sb_t *b, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    sb_add(b, "\"");
    while (*p) {
        int len = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3
                              : (*p & 0xf8) == 0xf0 ? 4 : 0;
        if (!len || (len == 2 && *p < 0xc2))
            return -1;
        for (int k = 1; k < len; k++)
            if ((p[k] & 0xc0) != 0x80)
                return -1;
        if (*p == '"' || *p == '\\')
            sb_add(b, "\\%c", *p);
        else if (*p < 0x20)
            sb_add(b, "\\u%04x", *p);
        else
            sb_add(b, "%.*s", len, (const char *)p);
        p += len;
    }
    sb_add(b, "\"");
    return 0;
}

typedef struct {
    const entry_t *e;
    const char *name; /* under /model */
} xt_t;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const xt_t *)a)->name, ((const xt_t *)b)->name);
}

/* The safetensors header: tensors by name, offsets contiguous from 0, the
 * checkpoint's metadata as strings; padded with spaces to a multiple of 8. */
static int st_header(cfile_t *c, const xt_t *t, size_t n, sb_t *h, char *why, size_t nw)
{
    char w2[256], *s;
    uint64_t u, off = 0;
    sb_add(h, "{\"__metadata__\":{\"format\":\"ddpc\"");
    static const char *const ints[] = {"format_version", "step", "epoch", "world_size"};
    static const char *const strs[] = {"ddpc_version", "created"};
    for (int k = 0; k < 4; k++)
        if (get_u64(c->f, ints[k], &u, w2, sizeof w2) == 0)
            sb_add(h, ",\"%s\":\"%llu\"", ints[k], (unsigned long long)u);
    for (int k = 0; k < 2; k++)
        if (get_str(c->f, strs[k], &s, w2, sizeof w2) == 0) {
            sb_add(h, ",\"%s\":", strs[k]);
            int bad = sb_json(h, s);
            free(s);
            if (bad)
                return BAD("attribute %s is not UTF-8", strs[k]);
        }
    if (get_u64(c->f, "model_fingerprint", &u, w2, sizeof w2) == 0)
        sb_add(h, ",\"model_fingerprint\":\"%016llx\"", (unsigned long long)u);
    sb_add(h, "}");
    for (size_t k = 0; k < n; k++) {
        sb_add(h, ",");
        if (sb_json(h, t[k].name) < 0) {
            sb_t e = {0};
            sb_esc(&e, t[k].e->path, strlen(t[k].e->path), 0);
            snprintf(why, nw, "%s: the name is not UTF-8, which safetensors requires", sb_str(&e));
            free(e.s);
            return RC_BAD;
        }
        sb_add(h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t[k].e->t.ndim; d++)
            sb_add(h, "%s%llu", d ? "," : "", (unsigned long long)t[k].e->t.dims[d]);
        sb_add(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
               (unsigned long long)(off + t[k].e->t.numel * 4));
        off += t[k].e->t.numel * 4;
    }
    sb_add(h, "}");
    while ((h->n) % 8)
        sb_add(h, " ");
    if (h->n > ST_MAX_HEADER)
        return BAD("the safetensors header would have %zu bytes, more than readers accept (%zu)",
                   h->n, ST_MAX_HEADER);
    return RC_OK;
}

static int write_all(int fd, const void *p, size_t n)
{
    for (size_t done = 0; done < n;) {
        ssize_t k = write(fd, (const char *)p + done, n - done);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        done += (size_t)k;
    }
    return 0;
}

int cmd_export(const char *file, const char *out, int force)
{
    char why[1024], tmp[MAX_PATH + 8];
    const size_t nw = sizeof why; /* for BAD */
    struct stat sb;
    if (!force && lstat(out, &sb) == 0)
        return err(RC_IO, "%s: exists (use --force to replace it)", out);
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", out) >= sizeof tmp)
        return err(RC_IO, "%s: path too long", out);
    cfile_t c;
    int rc = cf_open(&c, file, why, sizeof why);
    if (rc != RC_OK || !is_ddpc(&c, why, sizeof why)) {
        cf_close(&c);
        return rc != RC_OK ? err(rc, "%s: %s", file, why)
                           : err(RC_BAD, "%s: not a ddpc checkpoint (attribute format)", file);
    }
    xt_t *t = NULL;
    size_t n = 0;
    sb_t h = {0};
    rc = RC_OK;
    if (!find(&c, "/model") || find(&c, "/model")->kind != E_GROUP)
        rc = BAD("no group /model");
    for (size_t k = 0; rc == RC_OK && k < c.n; k++) {
        const entry_t *e = &c.e[k];
        if (!has_prefix(e->path, "/model/") || e->kind == E_GROUP)
            continue;
        sb_t s = {0};
        sb_esc(&s, e->path, strlen(e->path), 0);
        if (e->kind != E_DATASET)
            rc = BAD("%s: not a dataset reachable by hard links (not exported)", sb_str(&s));
        else if (!e->t.ok)
            rc = BAD("%s: %s", sb_str(&s), e->t.why);
        else if (!e->t.has_crc)
            rc = BAD("%s has no crc32 attribute", sb_str(&s));
        free(s.s);
        t = xrealloc(t, (n + 1) * sizeof *t);
        t[n].e = e;
        t[n++].name = e->path + 7;
    }
    if (rc == RC_OK) {
        qsort(t, n, sizeof *t, by_name);
        rc = st_header(&c, t, n, &h, why, sizeof why);
    }
    if (rc != RC_OK) {
        free(t), free(h.s);
        cf_close(&c);
        return err(rc, "%s: %s", file, why);
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) {
        free(t), free(h.s);
        cf_close(&c);
        return err(RC_IO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    unsigned char len8[8];
    for (int k = 0; k < 8; k++)
        len8[k] = (unsigned char)((uint64_t)h.n >> (8 * k));
    float *buf = xrealloc(NULL, PIECE * sizeof *buf);
    const char *where = tmp;
    if (write_all(fd, len8, 8) < 0 || write_all(fd, h.s, h.n) < 0) {
        snprintf(why, sizeof why, "cannot write: %s", strerror(errno));
        rc = RC_IO;
    }
    uint64_t bytes = 0;
    for (size_t k = 0; rc == RC_OK && k < n; k++) {
        uint32_t crc;
        int r = tensor_crc(&c, t[k].e, buf, fd, &crc, why, sizeof why);
        if (r == -2)
            rc = RC_IO;
        else if (r < 0)
            rc = RC_BAD, where = file;
        else if (crc != t[k].e->t.crc) {
            sb_t s = {0};
            sb_esc(&s, t[k].e->path, strlen(t[k].e->path), 0);
            snprintf(why, sizeof why, "%s is corrupt: CRC-32 expected %08x (its crc32 attribute), "
                     "found %08x; nothing exported", sb_str(&s), t[k].e->t.crc, crc);
            free(s.s);
            rc = RC_BAD, where = file;
        }
        bytes += t[k].e->t.numel * 4;
    }
    if (rc == RC_OK && fsync(fd) != 0)
        snprintf(why, sizeof why, "cannot fsync: %s", strerror(errno)), rc = RC_IO;
    if (close(fd) != 0 && rc == RC_OK)
        snprintf(why, sizeof why, "cannot close: %s", strerror(errno)), rc = RC_IO;
    if (rc == RC_OK) {
        /* without --force, link(2) refuses an OUT created meanwhile */
        int r = force ? rename(tmp, out) : link(tmp, out);
        if (r == 0 && !force)
            unlink(tmp);
        if (r != 0 && !force && errno != EEXIST && errno != EPERM && errno != EXDEV) {
            snprintf(why, sizeof why, "cannot create: %s", strerror(errno));
            rc = RC_IO, where = out;
        } else if (r != 0 && !force && errno == EEXIST) {
            snprintf(why, sizeof why, "exists (use --force to replace it)");
            rc = RC_IO, where = out;
        } else if (r != 0 && !force) { /* no hard links here */
            if (lstat(out, &sb) == 0)
                snprintf(why, sizeof why, "exists (use --force to replace it)"), rc = RC_IO;
            else if (rename(tmp, out) != 0)
                snprintf(why, sizeof why, "cannot rename %.700s to it: %s", tmp, strerror(errno)),
                    rc = RC_IO;
            where = out;
        } else if (r != 0) {
            snprintf(why, sizeof why, "cannot rename %.700s to it: %s", tmp, strerror(errno));
            rc = RC_IO, where = out;
        }
    }
    if (rc != RC_OK)
        unlink(tmp);
    else
        printf("exported %s: %zu tensors, %llu bytes of float32 to %s\n", file, n,
               (unsigned long long)bytes, out);
    free(buf), free(t), free(h.s);
    cf_close(&c);
    if (rc != RC_OK)
        return err(rc, "%s: %s", where, why);
    return RC_OK;
}
