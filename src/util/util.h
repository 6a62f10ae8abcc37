/* SPDX-License-Identifier: BSD-3-Clause */
/* util.h: the bottom layer of libddpc (doc/layers.md): the runtime handle's
 * struct, status strings, messages and errors with the rank prefix, logging,
 * DDPC_* option parsing, the monotonic clock. Every module may use it; it
 * includes and calls nothing of libddpc above it (tests/layers.sh checks). */
#ifndef DDPC_UTIL_H
#define DDPC_UTIL_H

#include "crc.h"
#include "ddpc.h"

#include <mpi.h>
#include <stdarg.h>

#define DDPC_ERRMSG_LEN 1024

/* VECTOR_CLONES: a function compiled three times, for AVX-512, AVX2 and the
 * baseline, the loader picking one by the CPU (gcc's target_clones). Only
 * for loops whose result cannot depend on the width: the build turns
 * floating-point contraction off (-ffp-contract=off, configure.ac), so no
 * clone fuses a multiply and an add that the baseline rounds twice. Not
 * under ThreadSanitizer: gcc 12 instruments the clones' resolver, which the
 * dynamic loader runs before the TSan runtime is set up (SIGSEGV at load).
 * Clones are static, each behind a plain function where other files call it:
 * clang 14 emits no symbol for the extern name of a target_clones function
 * in a static link (the fuzz build). */
#if defined(__x86_64__) && defined(__ELF__) && defined(__has_attribute) && !defined(__SANITIZE_THREAD__)
#if __has_attribute(target_clones)
#define VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef VECTOR_CLONES
#define VECTOR_CLONES
#endif

/* The runtime handle. Its fields are grouped by the layer that owns them:
 * a layer reads those of the layers below and writes its own. The pointers
 * of the upper layers' state are incomplete types here. */
struct ddpc {
    /* util (and ddpc_init, which fills cfg) */
    ddpc_config_t cfg;
    ddpc_world_t world;           /* filled by discovery (src/pmix) */
    char prefix[112];             /* "ddpc[rank r/n host]" */
    char err[DDPC_ERRMSG_LEN];    /* last error on this handle */
    /* ddpc_init (src/core/init.c) */
    int own_mpi;                  /* ddpc called MPI_Init */
    int mpi_thread_level;
    MPI_Comm mpi_world;           /* dup of MPI_COMM_WORLD for runtime traffic */
    /* discovery and the key exchange (src/pmix) */
    int pmix_active;              /* PMIx_Init succeeded and owns discovery */
    unsigned kvs_round;           /* fresh PMIx key per exchange */
    /* communicators (src/comm) */
    int stuck;                    /* a communicator was left with a collective in flight */
    struct ddpc_comm *world_comm; /* ddpc_comm_world */
    /* the side channel (src/comm/monitor.c): NULL when off or one rank */
    struct ddpc_monitor *mon;
    struct ddpc_comm *comms[8];   /* by id, in creation order (the same on every rank) */
    int ncomms;                   /* ids handed out */
    int check_collectives;        /* DDPC_DEBUG=detail */
    long flight_n;                /* DDPC_FLIGHT_RECORDER: collectives kept per communicator */
    const char *flight_dir;       /* DDPC_FLIGHT_RECORDER_DIR */
    int flight_dumped;            /* once per process */
};

/* ------------------------------------------------------------ msg.c */

/* Record an error on rt (may be NULL: then only the init-error buffer) with
 * the "ddpc[rank r/n host] module: " prefix; returns st for `return ddpc_err(...)`. */
ddpc_status_t ddpc_err(ddpc_t rt, ddpc_status_t st, const char *module, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 4, 5)))
#endif
    ;
ddpc_status_t ddpc_verr(ddpc_t rt, ddpc_status_t st, const char *module, const char *fmt,
                        va_list ap);

/* Same, into a caller's buffer (for handles other than the runtime). */
void ddpc_format_msg(char *dst, size_t n, const char *prefix, const char *module,
                     const char *fmt, va_list ap);
ddpc_status_t ddpc_set_error(char *dst, size_t n, const char *prefix, const char *module,
                             ddpc_status_t st, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 6, 7)))
#endif
    ;
/* Record an error in handle h (fields err[] and prefix[]); returns st. Each
 * module wraps it: #define fail(s, st, ...) DDPC_HANDLE_ERR(s, "sampler", st, __VA_ARGS__) */
#define DDPC_HANDLE_ERR(h, module, st, ...)                                                    \
    ddpc_set_error((h)->err, sizeof (h)->err, (h)->prefix, module, st, __VA_ARGS__)

/* Drop every "ddpc[rank ...] " after the start of s (a message that chains
 * its causes keeps one prefix, its own). */
void ddpc_drop_inner_prefixes(char *s);

/* Empty the message of a failed ddpc_init (ddpc_init_error), at its start. */
void ddpc_clear_init_error(void);

/* Build rt->prefix from the world facts. */
void ddpc_set_prefix(ddpc_t rt);

/* MPI failure -> status with MPI's own error string. */
ddpc_status_t ddpc_mpi_err(ddpc_t rt, int mpirc, const char *module, const char *what);

/* ------------------------------------------------------------ env.c */

/* Options: parse a DDPC_* variable if set. Return DDPC_ERR_INVALID with a
 * message naming the variable and what was expected. */
ddpc_status_t ddpc_env_double(ddpc_t rt, const char *name, double lo, double hi, double *val);
ddpc_status_t ddpc_env_long(ddpc_t rt, const char *name, long lo, long hi, long *val);
ddpc_status_t ddpc_env_choice(ddpc_t rt, const char *name, const char *const *choices, int *val);

/* ------------------------------------------------------------ clock.c */

/* Monotonic seconds. */
double ddpc_now(void);

/* ------------------------------------------------------------ timeline.c */

/* The recorder of DDPC_TIMELINE. Spans and instants go into one ring;
 * names are static strings (copy holds the program's own span names). */
#define TL_MAX_TRACKS 64
#define TL_NAME_MAX 32
#define TL_STACK_MAX 16
typedef struct {
    _Atomic uint64_t seq; /* its index + 1 once complete; 0 while written */
    double t0, t1;        /* ddpc_now(); t0 == t1 for an instant */
    int64_t arg;          /* a bucket, a parameter, a step; -1: none */
    int64_t cseq;         /* the collective's sequence number on its communicator; -1: none */
    const char *name;     /* NULL: copy */
    char copy[TL_NAME_MAX];
    int16_t track;        /* the recording thread's */
    int8_t instant;
} tl_event_t;

extern _Atomic int ddpc_tl_active;
static inline int ddpc_tl_on(void)
{
    return __atomic_load_n((int *)&ddpc_tl_active, __ATOMIC_RELAXED);
}
/* the start of a span: the clock only while recording */
static inline double ddpc_tl_t0(void) { return ddpc_tl_on() ? ddpc_now() : 0.0; }
void ddpc_tl_span_(const char *name, double t0, int64_t arg, int64_t seq);
void ddpc_tl_instant_(const char *name, int64_t arg);
/* A span from t0 (ddpc_tl_t0) to now; an instant now. No-ops when off. */
#define ddpc_tl_span(name, t0, arg)                                                            \
    do {                                                                                       \
        if (ddpc_tl_on())                                                                      \
            ddpc_tl_span_(name, t0, arg, -1);                                                  \
    } while (0)
/* the same for a collective: seq is its sequence number */
#define ddpc_tl_span_seq(name, t0, arg, seq)                                                   \
    do {                                                                                       \
        if (ddpc_tl_on())                                                                      \
            ddpc_tl_span_(name, t0, arg, seq);                                                 \
    } while (0)
#define ddpc_tl_instant(name, arg)                                                             \
    do {                                                                                       \
        if (ddpc_tl_on())                                                                      \
            ddpc_tl_instant_(name, arg);                                                       \
    } while (0)
/* A track that is not a thread (a GPU stream), named; and a span on it
 * with times of its own (ddpc_now's clock). */
int ddpc_tl_new_track(const char *name);
void ddpc_tl_span_at(int track, const char *name, double t0, double t1, int64_t arg, int64_t seq);
/* Name this thread's track (the first name sticks). */
void ddpc_tl_name_thread(const char *name);
const char *ddpc_tl_track_name(int track);
int ddpc_tl_num_tracks(void);
/* Allocate the ring (events slots) and start; DDPC_ERR_STATE when running. */
ddpc_status_t ddpc_tl_alloc(uint64_t events);
/* Stop and free. */
void ddpc_tl_free(void);
/* A malloc'ed copy of the complete events, oldest first; *lost: events the
 * ring overwrote. */
uint64_t ddpc_tl_snapshot(tl_event_t **out, uint64_t *lost);

#endif /* DDPC_UTIL_H */
