/* SPDX-License-Identifier: BSD-3-Clause */
/* timeline.c (comm layer): starting the recorder of src/util/timeline.c on
 * every rank with the clock offsets between the ranks, and writing each
 * rank's Chrome Trace Event Format file (doc/timeline.md). The offsets
 * travel through the key exchange (MPI or PMIx), which every launch has,
 * so that a launch without MPI records too. */
#include "config.h"
#include "comm.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TL_ROUNDS 16
#define TL_DEFAULT_EVENTS ((uint64_t)1 << 17)

static struct {
    char dir[900];
    int rank, size;
    char host[64];
    double offset, bound; /* this rank's clock minus rank 0's; the error bound */
    double base;          /* rank 0's clock at the start: ts 0 */
} tl;

/* Rank r's clock minus rank 0's, theta: rank 0 sends at a (its clock), r
 * reads b (its clock) on arrival and answers in the allgather that reaches
 * rank 0 at c. Then a <= b - theta <= c: each round says theta lies in
 * [b - c, b - a], and so does the intersection of every round's interval
 * (the quickest way out and the quickest way back, which need not be the
 * same round's: on a loaded machine that is much tighter than the best
 * single round). The estimate is its middle, the bound its half width.
 * Collective. */
static ddpc_status_t estimate_offsets(ddpc_t rt, double *off, double *bound, double *base)
{
    int n = rt->world.size, me = rt->world.rank;
    /* rank 0: lo[r] in o[r], hi[r] in o[n + r], then the offsets and bounds there */
    double *all = calloc((size_t)n, sizeof *all), *o = calloc((size_t)(2 * n + 1), sizeof *o);
    ddpc_status_t st = all && o ? DDPC_OK : DDPC_ERR_NOMEM;
    for (int r = 0; r < n && o; r++) {
        o[r] = -1e30;
        o[n + r] = 1e30;
    }
    for (int k = 0; k < TL_ROUNDS && st == DDPC_OK; k++) {
        double a = ddpc_now(), b;
        if ((st = ddpc_kvs_bcast(rt, &a, sizeof a, 0)) != DDPC_OK)
            break;
        b = ddpc_now();
        if ((st = ddpc_kvs_allgather(rt, &b, all, sizeof b)) != DDPC_OK)
            break;
        double c = ddpc_now();
        if (k == 0)
            o[2 * n] = a;
        for (int r = 1; me == 0 && r < n; r++) {
            if (all[r] - c > o[r])
                o[r] = all[r] - c;
            if (all[r] - a < o[n + r])
                o[n + r] = all[r] - a;
        }
    }
    for (int r = 0; st == DDPC_OK && me == 0 && r < n; r++) {
        const double lo = r ? o[r] : 0, hi = r ? o[n + r] : 0;
        o[r] = (lo + hi) / 2;
        o[n + r] = (hi - lo) / 2; /* never negative: every interval holds theta */
    }
    if (st == DDPC_OK)
        st = ddpc_kvs_bcast(rt, o, (size_t)(2 * n + 1) * sizeof *o, 0);
    if (st == DDPC_OK) {
        *off = o[me];
        *bound = o[n + me];
        *base = o[2 * n];
    }
    free(all);
    free(o);
    return st;
}

ddpc_status_t ddpc_timeline_start(ddpc_t rt, const char *dir)
{
    if (!rt)
        return DDPC_ERR_INVALID;
    if (!dir || !*dir || strlen(dir) >= sizeof tl.dir)
        return ddpc_err(rt, DDPC_ERR_INVALID, "timeline",
                        "the timeline's directory must be 1..%zu bytes", sizeof tl.dir - 1);
    if (ddpc_tl_on())
        return ddpc_err(rt, DDPC_ERR_STATE, "timeline", "the timeline is already recording (to %s)",
                        tl.dir);
    long events = (long)TL_DEFAULT_EVENTS;
    ddpc_status_t st = ddpc_env_long(rt, "DDPC_TIMELINE_EVENTS", 16, 1L << 26, &events);
    if (st)
        return st;
    double off = 0, bound = 0, base = 0;
    if ((st = estimate_offsets(rt, &off, &bound, &base)) != DDPC_OK) {
        char why[DDPC_ERRMSG_LEN];
        snprintf(why, sizeof why, "%s", ddpc_last_error(rt));
        return ddpc_err(rt, st, "timeline", "clock offsets: %s", why);
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        ddpc_log(rt, DDPC_LOG_WARN, "timeline: cannot make the directory %s: %s", dir,
                 strerror(errno)); /* the write says it again, with the file */
    snprintf(tl.dir, sizeof tl.dir, "%s", dir);
    tl.rank = rt->world.rank;
    tl.size = rt->world.size;
    snprintf(tl.host, sizeof tl.host, "%s", rt->world.host);
    tl.offset = off;
    tl.bound = bound;
    tl.base = base;
    if ((st = ddpc_tl_alloc((uint64_t)events)) != DDPC_OK)
        return ddpc_err(rt, st, "timeline", "cannot allocate a ring of %ld events", events);
    ddpc_tl_name_thread("main");
    ddpc_log(rt, DDPC_LOG_INFO, "timeline: recording up to %ld events to %s; clock offset to "
             "rank 0 %.1f us (within %.1f us)", events, dir, off * 1e6, bound * 1e6);
    return DDPC_OK;
}

static int by_track_then_time(const void *x, const void *y)
{
    const tl_event_t *a = x, *b = y;
    if (a->track != b->track)
        return a->track < b->track ? -1 : 1;
    if (a->t0 != b->t0)
        return a->t0 < b->t0 ? -1 : 1;
    return a->t1 > b->t1 ? -1 : a->t1 < b->t1; /* the enclosing span first */
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* Microseconds of rank 0's clock, rounded to the nanosecond as printed: a
 * span's end is printed as the rounded end minus the rounded start, so that
 * spans that touch or nest still do in the file. */
static double us(double t) { return floor((t - tl.offset - tl.base) * 1e9 + 0.5) / 1e3; }

static int write_json(FILE *f, const tl_event_t *v, uint64_t n, uint64_t lost)
{
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"format\":\"ddpc-timeline\","
               "\"version\":1,\"rank\":%d,\"size\":%d,\"host\":", tl.rank, tl.size);
    json_str(f, tl.host);
    fprintf(f, ",\"clock_offset_us\":%.3f,\"offset_bound_us\":%.3f,\"events\":%llu,"
               "\"lost_events\":%llu},\n\"traceEvents\":[\n", tl.offset * 1e6, tl.bound * 1e6,
            (unsigned long long)n, (unsigned long long)lost);
    fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":"
               "\"rank %d (%s)\"}},\n", tl.rank, tl.rank, tl.host);
    fprintf(f, "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":%d,\"tid\":0,"
               "\"args\":{\"sort_index\":%d}}", tl.rank, tl.rank);
    for (int t = 0; t < ddpc_tl_num_tracks(); t++) {
        char name[40];
        snprintf(name, sizeof name, "%s", *ddpc_tl_track_name(t) ? ddpc_tl_track_name(t) : "thread");
        fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":"
                   "{\"name\":", tl.rank, t);
        json_str(f, name);
        fprintf(f, "}}");
    }
    for (uint64_t i = 0; i < n; i++) {
        const tl_event_t *e = &v[i];
        fprintf(f, ",\n{\"name\":");
        json_str(f, e->name ? e->name : e->copy);
        fprintf(f, ",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f", e->name ? "ddpc" : "user",
                tl.rank, e->track, us(e->t0));
        if (e->instant)
            fprintf(f, ",\"ph\":\"i\",\"s\":\"t\"");
        else
            fprintf(f, ",\"ph\":\"X\",\"dur\":%.3f", us(e->t1) - us(e->t0));
        if (e->arg >= 0 && e->cseq >= 0)
            fprintf(f, ",\"args\":{\"arg\":%lld,\"seq\":%lld}", (long long)e->arg,
                    (long long)e->cseq);
        else if (e->arg >= 0 || e->cseq >= 0)
            fprintf(f, ",\"args\":{\"%s\":%lld}", e->arg >= 0 ? "arg" : "seq",
                    (long long)(e->arg >= 0 ? e->arg : e->cseq));
        fputc('}', f);
    }
    fprintf(f, "\n]}\n");
    return ferror(f) ? -1 : 0;
}

ddpc_status_t ddpc_timeline_stop(ddpc_t rt)
{
    if (!rt)
        return DDPC_ERR_INVALID;
    if (!ddpc_tl_on())
        return DDPC_OK;
    tl_event_t *v = NULL;
    uint64_t lost = 0, n = ddpc_tl_snapshot(&v, &lost);
    ddpc_tl_free();
    if (!v)
        return ddpc_err(rt, DDPC_ERR_NOMEM, "timeline", "cannot copy the timeline's events");
    qsort(v, (size_t)n, sizeof *v, by_track_then_time);
    char path[1024], tmp[1100];
    snprintf(path, sizeof path, "%s/timeline-rank%d.json", tl.dir, tl.rank);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    int bad = !f || write_json(f, v, n, lost) != 0;
    if (f && fclose(f) != 0)
        bad = 1;
    free(v);
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return ddpc_err(rt, DDPC_ERR_IO, "timeline", "cannot write %s: %s", path, strerror(e));
    }
    ddpc_log(rt, DDPC_LOG_INFO, "timeline: %llu events in %s%s", (unsigned long long)n, path,
             lost ? " (the ring overwrote the oldest; DDPC_TIMELINE_EVENTS makes it larger)" : "");
    return DDPC_OK;
}
