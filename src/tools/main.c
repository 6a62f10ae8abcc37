/* SPDX-License-Identifier: BSD-3-Clause */
/* main.c: ddpc-ckpt, ddpc's checkpoint files (doc/checkpoint.md) from the command
 * line: ls, show, verify (the CRCs), diff, export (the parameters as safetensors).
 * Plain HDF5 + zlib, not an MPI program; every file is untrusted input (no
 * external links followed, no filter plugins, sizes bounded). The arguments,
 * then the subcommand of its own file. */
#include "config.h"
#include "ckpt_tool.h"

#include <stdarg.h>
#include <string.h>

static void help(void)
{
    printf("usage: ddpc-ckpt COMMAND ARGS...\n"
           "Inspect, check, compare and export ddpc checkpoints (HDF5, doc/checkpoint.md).\n"
           "\n"
           "commands:\n"
           "  ls DIR            one line per checkpoint file of DIR, newest step first:\n"
           "                    PATH step=S epoch=E world_size=N created=T status=valid\n"
           "                    (or status=invalid: WHY; each file is fully verified);\n"
           "                    a ckpt-<step>.h5.tmp is listed as\n"
           "                    status=incomplete (leftover of an interrupted save)\n"
           "  show FILE         root metadata, model fingerprint, optimizer, sampler, RNG and\n"
           "                    user attributes, then one line per tensor: path, dtype,\n"
           "                    shape, elements, crc32 attribute (CRCs are not checked)\n"
           "  verify FILE       check the format, the parameters and optimizer states and\n"
           "                    recompute every tensor's CRC-32 against its crc32 attribute\n"
           "  diff A B          per tensor: identical, or how many elements differ and the\n"
           "                    largest |a-b|; tensors in one file only; other shapes; then\n"
           "                    attributes that differ (the creation time is not compared)\n"
           "  export FILE OUT [--force]\n"
           "                    write the /model tensors as float32 safetensors to OUT\n"
           "                    (via OUT.tmp; their CRCs are checked on the way)\n"
           "\n"
           "options:\n"
           "  --force           export: replace an existing OUT\n"
           "  -h, --help        this help\n"
           "  -V, --version     the version\n"
           "\n"
           "exit status:\n"
           "  0  ok: ls found at least one valid checkpoint; verify passed; diff found the\n"
           "     checkpoints identical; show and export succeeded\n"
           "  1  ls: no valid checkpoint; show, verify, export: the file is not a valid\n"
           "     checkpoint; diff: the checkpoints differ\n"
           "  2  usage error, or a file or directory that cannot be read or written (diff:\n"
           "     also a file that is not HDF5; export: OUT exists and no --force)\n");
}

static int usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: usage: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (ddpc-ckpt --help lists the commands)\n");
    return RC_IO;
}

int main(int argc, char **argv)
{
    const char *pos[4];
    int npos = 0, force = 0, dashdash = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!dashdash && (!strcmp(a, "--help") || !strcmp(a, "-h"))) {
            help();
            return RC_OK;
        }
        if (!dashdash && (!strcmp(a, "--version") || !strcmp(a, "-V"))) {
            printf("ddpc-ckpt (ddpc) %s\n", PACKAGE_VERSION);
            return RC_OK;
        }
        if (!dashdash && !strcmp(a, "--force"))
            force = 1;
        else if (!dashdash && !strcmp(a, "--"))
            dashdash = 1;
        else if (!dashdash && a[0] == '-' && a[1])
            return usage("unknown option \"%s\"", a);
        else if (npos == 4)
            return usage("too many arguments (from \"%s\")", a);
        else
            pos[npos++] = a;
    }
    if (!npos)
        return usage("no command given");
    const char *cmd = pos[0];
    static const struct {
        const char *name, *args;
        int nargs;
    } cmds[] = {{"ls", "DIR", 1}, {"show", "FILE", 1}, {"verify", "FILE", 1},
                {"diff", "A B", 2}, {"export", "FILE OUT.safetensors [--force]", 2}};
    int which = -1;
    for (int k = 0; k < 5; k++)
        if (!strcmp(cmd, cmds[k].name))
            which = k;
    if (which < 0)
        return usage("unknown command \"%s\" (ls, show, verify, diff, export)", cmd);
    if (npos - 1 != cmds[which].nargs)
        return usage("ddpc-ckpt %s %s", cmd, cmds[which].args);
    if (force && which != 4)
        return usage("--force is an option of export, not of %s", cmd);

    /* our own messages instead of HDF5's error stack; no filter plugins
     * loaded on behalf of a file; no external links followed */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    unsigned plugins;
    ck_reader_guard(&plugins);
    if ((cf_lapl = ck_reader_lapl()) < 0)
        return err(RC_IO, "cannot set up HDF5 (link access properties)");
    int rc;
    switch (which) {
    case 0: rc = cmd_ls(pos[1]); break;
    case 1: rc = cmd_show(pos[1]); break;
    case 2: rc = cmd_verify(pos[1]); break;
    case 3: rc = cmd_diff(pos[1], pos[2]); break;
    default: rc = cmd_export(pos[1], pos[2], force); break;
    }
    H5Pclose(cf_lapl);
    return rc;
}
