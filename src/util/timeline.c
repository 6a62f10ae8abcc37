/* SPDX-License-Identifier: BSD-3-Clause */
/* timeline.c: the recorder behind DDPC_TIMELINE (doc/timeline.md). One
 * process-wide ring of spans and instants, allocated when the timeline
 * starts; recording is a relaxed load when off, and a clock read, one atomic
 * increment and a store into the ring when on: no allocation, lock or I/O in
 * a step. Each thread is a track (Chrome's tid), numbered on its first event
 * and named by ddpc_tl_name_thread. The comm layer starts it (clock offsets
 * need a communicator) and writes the file (src/comm/timeline.c). */
#include "config.h"
#include "util.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tl_event_t *ring;
static uint64_t ring_cap;
static _Atomic uint64_t ring_next;
static _Atomic int tracks = 1; /* 0: the thread that starts the timeline */
_Atomic int ddpc_tl_active;

static char track_names[TL_MAX_TRACKS][TL_NAME_MAX];

static _Thread_local int my_track = -1;
/* ddpc_timeline_begin / end: this thread's open spans */
static _Thread_local struct {
    char name[TL_NAME_MAX];
    double t0;
} stack[TL_STACK_MAX];
static _Thread_local int depth;

static int track(void)
{
    if (my_track < 0) {
        int t = atomic_fetch_add_explicit(&tracks, 1, memory_order_relaxed);
        my_track = t < TL_MAX_TRACKS ? t : TL_MAX_TRACKS - 1;
    }
    return my_track;
}

ddpc_status_t ddpc_tl_alloc(uint64_t events)
{
    if (ring)
        return DDPC_ERR_STATE;
    if (events < 16 || events > ((uint64_t)1 << 26))
        return DDPC_ERR_INVALID;
    ring = calloc((size_t)events, sizeof *ring);
    if (!ring)
        return DDPC_ERR_NOMEM;
    ring_cap = events;
    atomic_store(&ring_next, 0);
    my_track = 0; /* the starting thread; the others number themselves from 1 */
    atomic_store_explicit(&ddpc_tl_active, 1, memory_order_release);
    return DDPC_OK;
}

void ddpc_tl_free(void)
{
    atomic_store_explicit(&ddpc_tl_active, 0, memory_order_release);
    free(ring);
    ring = NULL;
    ring_cap = 0;
}

void ddpc_tl_name_thread(const char *name)
{
    int t = track();
    if (!track_names[t][0])
        snprintf(track_names[t], sizeof track_names[t], "%s", name);
}

const char *ddpc_tl_track_name(int t)
{
    return t >= 0 && t < TL_MAX_TRACKS ? track_names[t] : "";
}

int ddpc_tl_num_tracks(void)
{
    int n = atomic_load(&tracks);
    return n < TL_MAX_TRACKS ? n : TL_MAX_TRACKS;
}

static void put(const char *name, const char *copy, double t0, double t1, int64_t arg,
                int64_t seq, int instant)
{
    uint64_t i = atomic_fetch_add_explicit(&ring_next, 1, memory_order_relaxed);
    tl_event_t *e = &ring[i % ring_cap];
    atomic_store_explicit(&e->seq, 0, memory_order_relaxed); /* being written */
    e->t0 = t0;
    e->t1 = t1;
    e->arg = arg;
    e->cseq = seq;
    e->name = name;
    if (copy)
        snprintf(e->copy, sizeof e->copy, "%s", copy);
    else
        e->copy[0] = 0;
    e->track = (int16_t)track();
    e->instant = (int8_t)instant;
    atomic_store_explicit(&e->seq, i + 1, memory_order_release);
}

void ddpc_tl_span_(const char *name, double t0, int64_t arg, int64_t seq)
{
    put(name, NULL, t0, ddpc_now(), arg, seq, 0);
}

void ddpc_tl_instant_(const char *name, int64_t arg)
{
    double t = ddpc_now();
    put(name, NULL, t, t, arg, -1, 1);
}

uint64_t ddpc_tl_snapshot(tl_event_t **out, uint64_t *lost)
{
    *out = NULL;
    *lost = 0;
    if (!ring)
        return 0;
    uint64_t end = atomic_load(&ring_next), first = end > ring_cap ? end - ring_cap : 0, n = 0;
    tl_event_t *v = malloc((size_t)(end - first ? end - first : 1) * sizeof *v);
    if (!v)
        return 0;
    for (uint64_t i = first; i < end; i++) {
        const tl_event_t *e = &ring[i % ring_cap];
        if (atomic_load_explicit(&e->seq, memory_order_acquire) != i + 1)
            continue; /* overwritten or still being written */
        memcpy(&v[n], e, sizeof *e);
        n++;
    }
    *lost = first;
    *out = v;
    return n;
}

/* ------------------------------------------------------------------ the program's spans */

void ddpc_timeline_begin(const char *name)
{
    if (!ddpc_tl_on())
        return;
    if (depth < TL_STACK_MAX) {
        snprintf(stack[depth].name, sizeof stack[depth].name, "%s", name ? name : "");
        stack[depth].t0 = ddpc_now();
    }
    depth++;
}

void ddpc_timeline_end(void)
{
    if (depth <= 0)
        return; /* an end without its begin (or begun before the timeline) */
    depth--;
    if (depth < TL_STACK_MAX && ddpc_tl_on())
        put(NULL, stack[depth].name, stack[depth].t0, ddpc_now(), -1, -1, 0);
}
