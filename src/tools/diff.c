/* SPDX-License-Identifier: BSD-3-Clause */
/* diff.c: `ddpc-ckpt diff A B`: tensor by tensor, then the attributes of the
 * groups (the root's "created" is not compared). */
#include "config.h"
#include "ckpt_tool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Paths of c's entries of one kind, sorted. */
static char **paths_of(cfile_t *c, ekind_t kind, size_t *n)
{
    char **v = NULL;
    *n = 0;
    for (size_t k = 0; k < c->n; k++)
        if (c->e[k].kind == kind) {
            v = xrealloc(v, (*n + 1) * sizeof *v);
            v[(*n)++] = c->e[k].path;
        }
    if (*n)
        qsort(v, *n, sizeof *v, cmp_str);
    return v;
}

/* Two sorted lists of names walked together. */
typedef struct {
    char **a, **b;
    size_t na, nb, i, j;
} merge_t;

/* The next name of either list: *x its entry in a (or NULL), *y in b. */
static int merge_next(merge_t *m, const char **x, const char **y)
{
    if (m->i == m->na && m->j == m->nb)
        return 0;
    int r = m->i == m->na ? 1 : m->j == m->nb ? -1 : strcmp(m->a[m->i], m->b[m->j]);
    *x = r <= 0 ? m->a[m->i++] : NULL;
    *y = r >= 0 ? m->b[m->j++] : NULL;
    return 1;
}

typedef struct {
    uint64_t same, differ, only_a, only_b, shapes, attrs;
} dstat_t;

/* Compare two float32 tensors of one shape. RC_OK, or RC_IO (why). */
static int diff_tensor(cfile_t *ca, const entry_t *ea, cfile_t *cb, const entry_t *eb, float *ba,
                       float *bb, uint64_t *ndiff, double *maxd, int *nan, char *why, size_t nw)
{
    char w2[512];
    hid_t da = open_path(ca->f, ea->path, why, nw), db = da < 0 ? -1 : open_path(cb->f, eb->path, why, nw);
    int rc = da < 0 || db < 0 ? RC_IO : RC_OK;
    ck_item_t it;
    ck_piece_t p;
    *ndiff = 0, *maxd = 0, *nan = 0;
    cf_item(&ea->t, &it);
    for (int more = rc == RC_OK && ck_piece_first(&p, &it, PIECE); more; more = ck_piece_next(&p)) {
        if (cf_read(&p, da, H5T_NATIVE_FLOAT, ba, w2, sizeof w2) < 0 ||
            cf_read(&p, db, H5T_NATIVE_FLOAT, bb, w2, sizeof w2) < 0) {
            snprintf(why, nw, "%s: %s", ea->path, w2);
            rc = RC_IO;
            break;
        }
        for (uint64_t k = 0; k < p.n; k++) {
            if (!memcmp(&ba[k], &bb[k], sizeof *ba))
                continue;
            (*ndiff)++;
            double d = fabs((double)ba[k] - (double)bb[k]);
            if (d != d)
                *nan = 1;
            else if (d > *maxd)
                *maxd = d;
        }
    }
    if (db >= 0)
        H5Dclose(db);
    if (da >= 0)
        H5Dclose(da);
    return rc;
}

/* Attributes of the groups of both files; the root's "created" is not compared. */
static void diff_attrs(cfile_t *ca, cfile_t *cb, dstat_t *st)
{
    size_t na, nb;
    char **ga = paths_of(ca, E_GROUP, &na), **gb = paths_of(cb, E_GROUP, &nb), w2[256];
    sb_t key = {0}, va = {0}, vb = {0};
    merge_t mg = {ga, gb, na, nb, 0, 0};
    for (const char *a, *b; merge_next(&mg, &a, &b);) {
        const char *g = a ? a : b;
        sb_clear(&key);
        if (strcmp(g, "/"))
            sb_esc(&key, g + 1, strlen(g + 1), 0);
        if (!a || !b) {
            printf("group /%s: only in %s\n", sb_str(&key), a ? "A" : "B");
            st->attrs++;
            continue;
        }
        hid_t la = open_path(ca->f, g, w2, sizeof w2), lb = open_path(cb->f, g, w2, sizeof w2);
        names_t xa = {0}, xb = {0};
        if (la >= 0)
            attr_names(la, &xa);
        if (lb >= 0)
            attr_names(lb, &xb);
        size_t keylen = key.n;
        merge_t mx = {xa.v, xb.v, xa.n, xb.n, 0, 0};
        for (const char *x, *y; merge_next(&mx, &x, &y);) {
            const char *name = x ? x : y;
            if (!strcmp(g, "/") && !strcmp(name, "created"))
                continue;
            sb_trunc(&key, keylen);
            if (keylen)
                sb_add(&key, ".");
            sb_esc(&key, name, strlen(name), 0);
            if (!x || !y) {
                printf("attr %s: only in %s\n", sb_str(&key), x ? "A" : "B");
                st->attrs++;
                continue;
            }
            sb_clear(&va), sb_clear(&vb);
            sb_attr(&va, la, name);
            sb_attr(&vb, lb, name);
            if (strcmp(sb_str(&va), sb_str(&vb))) {
                printf("attr %s: %s in A, %s in B\n", sb_str(&key), sb_str(&va), sb_str(&vb));
                st->attrs++;
            }
        }
        names_free(&xa), names_free(&xb);
        if (la >= 0)
            H5Oclose(la);
        if (lb >= 0)
            H5Oclose(lb);
    }
    H5Eclear2(H5E_DEFAULT);
    free(key.s), free(va.s), free(vb.s);
    free(ga), free(gb);
}

int cmd_diff(const char *fa, const char *fb)
{
    char why[1024];
    cfile_t ca, cb;
    int rc = cf_open(&ca, fa, why, sizeof why);
    if (rc != RC_OK) {
        cf_close(&ca);
        return err(RC_IO, "%s: %s", fa, why);
    }
    if ((rc = cf_open(&cb, fb, why, sizeof why)) != RC_OK) {
        cf_close(&ca), cf_close(&cb);
        return err(RC_IO, "%s: %s", fb, why);
    }
    printf("A: %s\nB: %s\n", fa, fb);
    size_t na, nb;
    char **ta = paths_of(&ca, E_DATASET, &na), **tb = paths_of(&cb, E_DATASET, &nb);
    float *ba = xrealloc(NULL, PIECE * sizeof *ba), *bb = xrealloc(NULL, PIECE * sizeof *bb);
    dstat_t st = {0};
    sb_t line = {0}, sa = {0}, sbb = {0};
    rc = RC_OK;
    merge_t mt = {ta, tb, na, nb, 0, 0};
    for (const char *a, *b; rc == RC_OK && merge_next(&mt, &a, &b);) {
        const char *path = a ? a : b;
        const entry_t *ea = a ? find(&ca, a) : NULL, *eb = b ? find(&cb, b) : NULL;
        sb_clear(&line);
        sb_add(&line, "tensor ");
        sb_esc(&line, path, strlen(path), 0);
        if (!a || !b) {
            sb_add(&line, ": only in %s", a ? "A" : "B");
            (*(a ? &st.only_a : &st.only_b))++;
        } else if (!ea->t.ok || !eb->t.ok || !same_shape(&ea->t, &eb->t)) {
            sb_clear(&sa), sb_clear(&sbb);
            sb_add(&sa, "%s", ea->t.dtype);
            sb_shape(&sa, ea->t.ndim, ea->t.dims);
            sb_add(&sbb, "%s", eb->t.dtype);
            sb_shape(&sbb, eb->t.ndim, eb->t.dims);
            if (!strcmp(sb_str(&sa), sb_str(&sbb)))
                sb_add(&line, ": cannot compare: %s", !ea->t.ok ? ea->t.why : eb->t.why);
            else
                sb_add(&line, ": %s in A, %s in B", sb_str(&sa), sb_str(&sbb));
            st.shapes++;
        } else {
            uint64_t nd;
            double maxd;
            int nan;
            if ((rc = diff_tensor(&ca, ea, &cb, eb, ba, bb, &nd, &maxd, &nan, why, sizeof why)) !=
                RC_OK)
                break;
            if (!nd) {
                sb_add(&line, ": identical (%llu element%s)", (unsigned long long)ea->t.numel,
                       ea->t.numel == 1 ? "" : "s");
                st.same++;
            } else {
                sb_add(&line, ": %llu of %llu element%s differ, max |a-b| = ", (unsigned long long)nd,
                       (unsigned long long)ea->t.numel, ea->t.numel == 1 ? "" : "s");
                if (nan)
                    sb_add(&line, "nan");
                else
                    sb_add(&line, "%.6g", maxd);
                st.differ++;
            }
        }
        printf("%s\n", sb_str(&line));
    }
    if (rc == RC_OK) {
        diff_attrs(&ca, &cb, &st);
        uint64_t bad = st.differ + st.only_a + st.only_b + st.shapes + st.attrs;
        printf("summary: %llu tensors: %llu identical, %llu differ, %llu only in A, %llu only in "
               "B, %llu of another shape or type; %llu attributes or groups differ (created not "
               "compared): "
               "%s\n",
               (unsigned long long)(st.same + st.differ + st.only_a + st.only_b + st.shapes),
               (unsigned long long)st.same, (unsigned long long)st.differ,
               (unsigned long long)st.only_a, (unsigned long long)st.only_b,
               (unsigned long long)st.shapes, (unsigned long long)st.attrs,
               bad ? "different" : "identical");
        rc = bad ? RC_BAD : RC_OK;
    } else {
        err(RC_IO, "%s", why);
    }
    free(line.s), free(sa.s), free(sbb.s);
    free(ba), free(bb), free(ta), free(tb);
    cf_close(&ca), cf_close(&cb);
    fflush(stdout);
    return rc;
}
