/* SPDX-License-Identifier: BSD-3-Clause */
/* show.c: `ddpc-ckpt show FILE`: the metadata, the groups' attributes, odd
 * objects and one line per tensor (CRCs are not checked). */
#include "config.h"
#include "ckpt_tool.h"

#include <stdlib.h>
#include <string.h>

static int in_list(const char *const *list, const char *name)
{
    for (size_t k = 0; list && list[k]; k++)
        if (!strcmp(list[k], name))
            return 1;
    return 0;
}

/* "PREFIXNAME: VALUE" */
static void show_attr(hid_t loc, const char *prefix, const char *name, sb_t *b)
{
    sb_clear(b);
    sb_add(b, "%s", prefix);
    sb_esc(b, name, strlen(name), 0);
    sb_add(b, ": ");
    sb_attr(b, loc, name);
    printf("%s\n", sb_str(b));
}

/* Each attribute of loc on its line: those of `order` first (when present),
 * then the others by name, but not `skip`. prefix: "" (root), "optim.", ... */
static void show_attrs(hid_t loc, const char *prefix, const char *const *order, const char *skip)
{
    sb_t b = {0};
    names_t all;
    attr_names(loc, &all);
    for (size_t k = 0; order && order[k]; k++)
        if (H5Aexists(loc, order[k]) > 0)
            show_attr(loc, prefix, order[k], &b);
    for (size_t k = 0; k < all.n; k++)
        if (!in_list(order, all.v[k]) && !(skip && !strcmp(all.v[k], skip)))
            show_attr(loc, prefix, all.v[k], &b);
    H5Eclear2(H5E_DEFAULT);
    names_free(&all);
    free(b.s);
}

int cmd_show(const char *file)
{
    static const char *const root[] = {"format", "format_version", "ddpc_version", "step", "epoch",
                                       "world_size", "created", NULL};
    static const char *const optim[] = {"type", "lr", "momentum", "dampening", "nesterov",
                                        "weight_decay", "beta1", "beta2", "eps", "clip_norm",
                                        "dynamic_loss_scale", "loss_scale", "scale_good_steps",
                                        "scale_growth_interval", "step", NULL};
    static const char *const sampler[] = {"seed", "epoch", "consumed", "dataset_size", "shuffle",
                                          "drop_last", NULL};
    char why[1024];
    cfile_t c;
    int rc = cf_open(&c, file, why, sizeof why);
    if (rc != RC_OK || !is_ddpc(&c, why, sizeof why)) {
        cf_close(&c);
        return rc != RC_OK ? err(rc, "%s: %s", file, why)
                           : err(RC_BAD, "%s: not a ddpc checkpoint: %s", file, why);
    }
    printf("file: %s\n", file);
    show_attrs(c.f, "", root, "model_fingerprint");
    uint64_t fp, fp2;
    aval_t names = {0};
    char w2[512];
    if (get_u64(c.f, "model_fingerprint", &fp, why, sizeof why) < 0)
        printf("model_fingerprint: (%s)\n", why);
    else if (param_names(&c, &names, why, sizeof why) < 0 ||
             fingerprint(&c, &names, &fp2, why, sizeof why) < 0)
        printf("model_fingerprint: %016llx (cannot recompute: %s)\n", (unsigned long long)fp, why);
    else
        printf("model_fingerprint: %016llx (%s)\n", (unsigned long long)fp,
               fp == fp2 ? "matches the parameters' names and shapes"
                         : "does not match the parameters' names and shapes");
    printf("parameters: %zu\n", names.n);
    aval_free(&names);
    /* the groups: known ones in the documented order, then any others */
    static const struct {
        const char *path, *prefix;
        const char *const *order;
        const char *absent;
    } groups[] = {{"/model", "model.", NULL, "model: none"},
                  {"/optim", "optim.", optim, "optim: none (parameters only)"},
                  {"/sampler", "sampler.", sampler, "sampler: none"},
                  {"/rng", "rng.", NULL, NULL},
                  {"/user", "user.", NULL, NULL}};
    sb_t b = {0};
    for (size_t k = 0; k < sizeof groups / sizeof *groups; k++) {
        hid_t g = open_group(&c, groups[k].path);
        if (g < 0) {
            if (groups[k].absent)
                printf("%s\n", groups[k].absent);
            continue;
        }
        if (!strcmp(groups[k].path, "/rng") && H5Aexists(g, "state") <= 0)
            printf("rng.state: none\n");
        show_attrs(g, groups[k].prefix, groups[k].order, NULL);
        H5Oclose(g);
    }
    for (size_t k = 1; k < c.n; k++) { /* attributes of other groups */
        const entry_t *e = &c.e[k];
        int known = 0;
        for (size_t j = 0; j < sizeof groups / sizeof *groups && !known; j++)
            known = !strcmp(e->path, groups[j].path);
        if (e->kind != E_GROUP || known)
            continue;
        hid_t g = open_path(c.f, e->path, w2, sizeof w2);
        if (g < 0)
            continue;
        sb_clear(&b);
        sb_esc(&b, e->path + 1, strlen(e->path + 1), 0);
        sb_add(&b, ".");
        show_attrs(g, sb_str(&b), NULL, NULL);
        H5Oclose(g);
    }
    /* what is not a group or a tensor */
    for (size_t k = 0; k < c.n; k++) {
        const entry_t *e = &c.e[k];
        const char *what = e->kind == E_SOFT       ? "soft link to "
                           : e->kind == E_EXTERNAL ? "external link to "
                           : e->kind == E_OTHER    ? ""
                           : e->kind == E_TYPE     ? "named datatype"
                           : e->kind == E_BAD      ? "unreadable: "
                                                   : NULL;
        if (!what)
            continue;
        sb_clear(&b);
        sb_add(&b, "object ");
        sb_esc(&b, e->path, strlen(e->path), 0);
        sb_add(&b, ": %s%s", what, e->note ? e->note : "");
        if (e->kind == E_SOFT || e->kind == E_EXTERNAL || e->kind == E_OTHER)
            sb_add(&b, " (not followed)");
        printf("%s\n", sb_str(&b));
    }
    if (c.walk_why[0])
        printf("objects: not all listed: %s\n", c.walk_why);
    /* the tensors */
    uint64_t nt = 0, elems = 0;
    for (size_t k = 0; k < c.n; k++)
        if (c.e[k].kind == E_DATASET)
            nt++, elems += c.e[k].t.numel;
    printf("tensors: %llu (%llu elements, %llu bytes)\n", (unsigned long long)nt,
           (unsigned long long)elems, (unsigned long long)elems * 4);
    for (size_t k = 0; k < c.n; k++) {
        const entry_t *e = &c.e[k];
        if (e->kind != E_DATASET)
            continue;
        sb_clear(&b);
        sb_add(&b, "tensor ");
        sb_esc(&b, e->path, strlen(e->path), 0);
        sb_add(&b, " dtype=%s shape=", e->t.dtype);
        sb_shape(&b, e->t.ndim, e->t.dims);
        sb_add(&b, " numel=%llu", (unsigned long long)e->t.numel);
        if (e->t.has_crc)
            sb_add(&b, " crc32=%08x", e->t.crc);
        else
            sb_add(&b, " crc32=none");
        if (!e->t.ok)
            sb_add(&b, " (problem: %s)", e->t.why);
        printf("%s\n", sb_str(&b));
    }
    free(b.s);
    cf_close(&c);
    fflush(stdout);
    return RC_OK;
}
