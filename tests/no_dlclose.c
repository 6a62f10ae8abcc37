/* SPDX-License-Identifier: BSD-3-Clause */
/* no_dlclose.c: preloaded by tests/sanitize.sh. MPI, UCX, PMIx and hwloc load
 * plugins with dlopen and unload them at exit; LeakSanitizer then reports
 * what they allocated as leaks of "<unknown module>", which no suppression
 * can name. Keeping every library mapped lets LeakSanitizer see their
 * globals (what they still point to is not a leak) and name their frames. */
int dlclose(void *handle);
int dlclose(void *handle)
{
    (void)handle;
    return 0;
}
