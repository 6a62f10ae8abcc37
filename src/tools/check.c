/* SPDX-License-Identifier: BSD-3-Clause */
/* check.c: ddpc-ckpt's validation of a checkpoint (doc/checkpoint.md): format,
 * objects, parameters against /model's names and the fingerprint, optimizer
 * states, then the CRCs. Used by ls and verify. */
#include "config.h"
#include "ckpt_tool.h"

#include <stdlib.h>
#include <string.h>

/* /model's "names", the parameters in registration order. */
int param_names(cfile_t *c, aval_t *v, char *why, size_t nw)
{
    char w2[512];
    hid_t g = open_group(c, "/model");
    if (g < 0) {
        snprintf(why, nw, "no group /model");
        return -1;
    }
    int rc = aread(g, "names", v, w2, sizeof w2);
    H5Oclose(g);
    if (rc < 0) {
        snprintf(why, nw, "/model: %s", w2);
        return -1;
    }
    if (v->cls != H5T_STRING || (v->rank != 1 && v->n)) {
        snprintf(why, nw, "/model: attribute \"names\" is not an array of strings");
        aval_free(v);
        return -1;
    }
    return 0;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    unsigned char b[8];
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)(v >> (8 * k));
    return fnv(h, b, 8);
}

/* The model fingerprint of doc/checkpoint.md from the names and the /model
 * datasets' shapes. -1 (why) if a parameter is missing or unreadable. */
int fingerprint(cfile_t *c, const aval_t *names, uint64_t *fp, char *why, size_t nw)
{
    char path[MAX_PATH];
    uint64_t h = CK_FNV_BASIS;
    for (size_t k = 0; k < names->n; k++) {
        snprintf(path, sizeof path, "/model/%s", names->s[k]);
        entry_t *e = find(c, path);
        if (!e || e->kind != E_DATASET || !e->t.ok) {
            sb_t s = {0};
            sb_esc(&s, path, strlen(path), 0);
            snprintf(why, nw, "parameter %zu: %s: %s", k, sb_str(&s),
                     !e ? "missing" : e->t.why ? e->t.why : "not a dataset");
            free(s.s);
            return -1;
        }
        h = fnv(h, names->s[k], strlen(names->s[k]) + 1);
        h = fnv(h, "float32", 8);
        h = fnv_u64(h, (uint64_t)e->t.ndim);
        for (int d = 0; d < e->t.ndim; d++)
            h = fnv_u64(h, e->t.dims[d]);
    }
    *fp = h;
    return 0;
}

int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int has_prefix(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

int same_shape(const tinfo_t *a, const tinfo_t *b)
{
    return a->ndim == b->ndim && !memcmp(a->dims, b->dims, (size_t)a->ndim * sizeof *a->dims);
}

/* The optimizer state groups a type implies. */
static int expected_states(hid_t g, const char *type, const char **out)
{
    double m = 0;
    char why[256];
    if (!strcmp(type, "adamw")) {
        out[0] = "exp_avg", out[1] = "exp_avg_sq";
        return 2;
    }
    if (!strcmp(type, "sgd") && get_f64(g, "momentum", &m, why, sizeof why) == 0 && m > 0) {
        out[0] = "momentum_buffer";
        return 1;
    }
    return 0;
}

/* The format and the root attributes. */
static int check_root(cfile_t *c, char *why, size_t nw)
{
    char w2[600], *str = NULL;
    int64_t ver;
    uint64_t u;
    if (get_str(c->f, "format", &str, w2, sizeof w2) < 0)
        return BAD("not a ddpc checkpoint: %s", w2);
    int bad = strcmp(str, CK_FORMAT);
    if (bad)
        snprintf(why, nw, "not a ddpc checkpoint: attribute format is %s, expected \"%s\"",
                 esc_q(str, 1), CK_FORMAT);
    free(str);
    if (bad)
        return RC_BAD;
    if (get_i64(c->f, "format_version", &ver, w2, sizeof w2) < 0)
        return BAD("%s", w2);
    if (ver > CK_FORMAT_VERSION)
        return BAD("format version %lld is newer than this ddpc-ckpt (%s) reads (%d)",
                   (long long)ver, PACKAGE_VERSION, CK_FORMAT_VERSION);
    if (ver < 1)
        return BAD("format version %lld is not a valid version", (long long)ver);
    static const char *const ints[] = {"step", "epoch", "world_size", "model_fingerprint"};
    for (int k = 0; k < 4; k++)
        if (get_u64(c->f, ints[k], &u, w2, sizeof w2) < 0)
            return BAD("%s", w2);
    static const char *const strs[] = {"ddpc_version", "created"};
    for (int k = 0; k < 2; k++) {
        if (get_str(c->f, strs[k], &str, w2, sizeof w2) < 0)
            return BAD("%s", w2);
        free(str);
    }
    return RC_OK;
}

/* Every object: hard links only, no named datatypes, readable float32
 * datasets within the limits, each with its crc32 attribute. */
static int check_objects(cfile_t *c, char *why, size_t nw)
{
    if (c->walk_why[0])
        return BAD("%s", c->walk_why);
    for (size_t k = 0; k < c->n; k++) {
        const entry_t *e = &c->e[k];
        if (e->kind == E_SOFT || e->kind == E_EXTERNAL || e->kind == E_OTHER)
            return BAD("%s is %s link to %s (a checkpoint has none; not followed)", esc(e->path),
                       e->kind == E_SOFT ? "a soft" : e->kind == E_EXTERNAL ? "an external"
                                                                            : "a user-defined",
                       e->note ? esc(e->note) : "?");
        if (e->kind == E_TYPE)
            return BAD("%s: a named datatype (a checkpoint has none)", esc(e->path));
        if (e->kind == E_BAD)
            return BAD("%s: %s", esc(e->path), e->note);
        if (e->kind == E_DATASET && !e->t.ok)
            return BAD("%s: %s", esc(e->path), e->t.why);
        if (e->kind == E_DATASET && !e->t.has_crc)
            return BAD("%s has no crc32 attribute", esc(e->path));
    }
    return RC_OK;
}

/* The parameters (each name of /model's list a dataset, each dataset under
 * /model in the list, the fingerprint) and the optimizer (every state its
 * type implies, each state a tensor of each parameter's shape). */
static int check_params(cfile_t *c, const aval_t *names, char *why, size_t nw)
{
    char w2[600], path[MAX_PATH];
    uint64_t fp, fp2;
    if (fingerprint(c, names, &fp, w2, sizeof w2) < 0)
        return BAD("/model: %s", w2);
    if (get_u64(c->f, "model_fingerprint", &fp2, w2, sizeof w2) == 0 && fp != fp2)
        return BAD("model_fingerprint %016llx does not match the parameters' names and shapes "
                   "(%016llx)", (unsigned long long)fp2, (unsigned long long)fp);
    int rc = RC_OK;
    char **sorted = xrealloc(NULL, names->n * sizeof *sorted);
    memcpy(sorted, names->s, names->n * sizeof *sorted);
    qsort(sorted, names->n, sizeof *sorted, cmp_str);
    for (size_t k = 1; rc == RC_OK && k < names->n; k++)
        if (!strcmp(sorted[k - 1], sorted[k]))
            rc = BAD("/model: the parameter name %s is listed twice", esc_q(sorted[k], 1));
    for (size_t k = 0; rc == RC_OK && k < c->n; k++) {
        const char *rel = c->e[k].path + 7;
        if (c->e[k].kind == E_DATASET && has_prefix(c->e[k].path, "/model/") &&
            (!names->n || !bsearch(&rel, sorted, names->n, sizeof *sorted, cmp_str)))
            rc = BAD("%s is not a parameter (not in /model's names)", esc(c->e[k].path));
    }
    free(sorted);
    hid_t g = rc == RC_OK ? open_group(c, "/optim") : -1;
    if (g < 0)
        return rc;
    const char *want[4];
    char *type = NULL;
    int nwant = 0;
    if (get_str(g, "type", &type, w2, sizeof w2) < 0)
        rc = BAD("/optim: %s", w2);
    else
        nwant = expected_states(g, type, want);
    for (int k = 0; rc == RC_OK && k < nwant; k++) {
        snprintf(path, sizeof path, "/optim/%s", want[k]);
        entry_t *e = find(c, path);
        if (!e || e->kind != E_GROUP)
            rc = BAD("missing %s (state of the %s optimizer)", esc(path), esc(type));
    }
    for (size_t k = 0; rc == RC_OK && k < c->n; k++) {
        const entry_t *st = &c->e[k];
        if (st->kind != E_GROUP || !has_prefix(st->path, "/optim/") || strchr(st->path + 7, '/'))
            continue;
        for (size_t j = 0; rc == RC_OK && j < names->n; j++) {
            snprintf(path, sizeof path, "/model/%s", names->s[j]);
            const entry_t *m = find(c, path);
            snprintf(path, sizeof path, "%s/%s", st->path, names->s[j]);
            const entry_t *e = find(c, path);
            if (!e || e->kind != E_DATASET) {
                rc = BAD("missing %s (optimizer state of parameter %zu)", esc(path), j);
            } else if (!same_shape(&e->t, &m->t)) {
                sb_t a = {0}, b = {0};
                sb_shape(&a, e->t.ndim, e->t.dims);
                sb_shape(&b, m->t.ndim, m->t.dims);
                rc = BAD("%s has shape %s, its parameter %s", esc(path), sb_str(&a), sb_str(&b));
                free(a.s), free(b.s);
            }
        }
    }
    free(type);
    H5Oclose(g);
    return rc;
}

/* Everything but the data. */
static int check_structure(cfile_t *c, char *why, size_t nw)
{
    aval_t names;
    int rc = check_root(c, why, nw);
    if (rc == RC_OK)
        rc = check_objects(c, why, nw);
    if (rc == RC_OK && param_names(c, &names, why, nw) < 0)
        rc = RC_BAD;
    else if (rc == RC_OK) {
        rc = check_params(c, &names, why, nw);
        aval_free(&names);
    }
    return rc;
}

/* check_structure, then (crcs) every dataset's CRC-32 in file order.
 * RC_OK: *nds datasets, *nbytes bytes verified. */
int validate(cfile_t *c, int crcs, uint64_t *nds, uint64_t *nbytes, char *why, size_t nw)
{
    int rc = check_structure(c, why, nw);
    *nds = *nbytes = 0;
    if (rc != RC_OK || !crcs)
        return rc;
    float *buf = xrealloc(NULL, PIECE * sizeof *buf);
    for (size_t k = 0; rc == RC_OK && k < c->n; k++) {
        const entry_t *e = &c->e[k];
        uint32_t crc;
        if (e->kind != E_DATASET)
            continue;
        if (tensor_crc(c, e, buf, -1, &crc, why, nw) < 0) {
            rc = RC_BAD;
            break;
        }
        if (crc != e->t.crc) {
            sb_t s = {0};
            sb_esc(&s, e->path, strlen(e->path), 0);
            rc = BAD("%s is corrupt: CRC-32 expected %08x (its crc32 attribute), found %08x",
                     sb_str(&s), e->t.crc, crc);
            free(s.s);
        }
        (*nds)++;
        *nbytes += e->t.numel * 4;
    }
    free(buf);
    return rc;
}

int cf_verify(cfile_t *c, const char *file, uint64_t *nds, uint64_t *nbytes, char *why, size_t nw)
{
    int rc = cf_open(c, file, why, nw);
    return rc == RC_OK ? validate(c, 1, nds, nbytes, why, nw) : rc;
}

int is_ddpc(cfile_t *c, char *why, size_t nw)
{
    char *fmt = NULL;
    int ok = get_str(c->f, "format", &fmt, why, nw) == 0 && !strcmp(fmt, CK_FORMAT);
    if (fmt && !ok)
        snprintf(why, nw, "attribute format is not \"%s\"", CK_FORMAT);
    free(fmt);
    return ok;
}
