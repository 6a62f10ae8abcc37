/* SPDX-License-Identifier: BSD-3-Clause */
/* ls.c: `ddpc-ckpt ls DIR`: one line per checkpoint file of DIR, newest step
 * first, each fully verified. */
#include "config.h"
#include "ckpt_tool.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t step;
    int tmp;
    char name[64];
} lsent_t;

static int newest_first(const void *a, const void *b)
{
    const lsent_t *x = a, *y = b;
    if (x->step != y->step)
        return x->step < y->step ? 1 : -1;
    return x->tmp - y->tmp;
}

/* "ckpt-<digits>.h5" (0) or a save's temporary "ckpt-<digits>.h5.tmp" or
 * "ckpt-<digits>.h5.tmp.<pid>.<host>" (1); -1 otherwise. */
static int ckpt_name(const char *name, uint64_t *step)
{
    const char *p = name + 5, *q = p;
    if (strncmp(name, "ckpt-", 5))
        return -1;
    while (*q >= '0' && *q <= '9')
        q++;
    if (q == p || q - p > 19)
        return -1;
    *step = strtoull(p, NULL, 10);
    return !strcmp(q, ".h5") ? 0 : !strncmp(q, ".h5.tmp", 7) && (!q[7] || q[7] == '.') ? 1 : -1;
}

static void ls_field_u(sb_t *b, cfile_t *c, const char *name)
{
    uint64_t v;
    char why[256];
    if (c->f >= 0 && get_u64(c->f, name, &v, why, sizeof why) == 0)
        sb_add(b, " %s=%llu", name, (unsigned long long)v);
    else
        sb_add(b, " %s=?", name);
}

int cmd_ls(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return err(RC_IO, "%s: cannot list the directory: %s", dir, strerror(errno));
    lsent_t *v = NULL;
    size_t n = 0;
    uint64_t step;
    for (struct dirent *de; (de = readdir(d));) {
        int kind = strlen(de->d_name) < sizeof v->name ? ckpt_name(de->d_name, &step) : -1;
        if (kind < 0)
            continue;
        v = xrealloc(v, (n + 1) * sizeof *v);
        v[n].step = step;
        v[n].tmp = kind;
        snprintf(v[n++].name, sizeof v->name, "%s", de->d_name);
    }
    closedir(d);
    if (!n) {
        free(v);
        return err(RC_BAD, "%s: no checkpoint (no file ckpt-<step>.h5)", dir);
    }
    qsort(v, n, sizeof *v, newest_first);
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/')
        dl--;
    int valid = 0;
    char path[MAX_PATH + 80], why[1024];
    sb_t line = {0};
    for (size_t k = 0; k < n; k++) {
        snprintf(path, sizeof path, "%.*s%s%s", (int)dl, dir, dir[dl - 1] == '/' ? "" : "/",
                 v[k].name);
        if (v[k].tmp) {
            printf("%s status=incomplete (leftover of an interrupted save)\n", path);
            continue;
        }
        cfile_t c;
        uint64_t nds, nb;
        int rc = cf_verify(&c, path, &nds, &nb, why, sizeof why);
        sb_clear(&line);
        sb_add(&line, "%s", path);
        ls_field_u(&line, &c, "step");
        ls_field_u(&line, &c, "epoch");
        ls_field_u(&line, &c, "world_size");
        char *created = NULL, w2[256];
        if (c.f >= 0 && get_str(c.f, "created", &created, w2, sizeof w2) == 0) {
            sb_add(&line, " created=");
            sb_esc(&line, created, strlen(created), 0);
            free(created);
        } else {
            sb_add(&line, " created=?");
        }
        if (rc == RC_OK)
            sb_add(&line, " status=valid");
        else
            sb_add(&line, " status=invalid: %s", why);
        printf("%s\n", sb_str(&line));
        valid += rc == RC_OK;
        cf_close(&c);
    }
    free(line.s);
    free(v);
    fflush(stdout);
    return valid ? RC_OK : RC_BAD;
}
