/* runtime.c: the ddpc handle. Init (options, discovery, MPI, the world
 * communicator), finalize, abort, status strings, messages and logging.
 * It does not move data: that is src/comm. */
#include "config.h"
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#ifdef DDPC_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#ifdef DDPC_HAVE_NCCL
#include <nccl.h>
#endif

static char init_error[DDPC_ERRMSG_LEN];

const char *ddpc_strerror(ddpc_status_t st)
{
    switch (st) {
#define DDPC_X_STR(name, value, text)                                                          \
    case name:                                                                                 \
        return text;
        DDPC_STATUS_TABLE(DDPC_X_STR)
#undef DDPC_X_STR
    default:
        return "unknown status";
    }
}

const char *ddpc_source_name(ddpc_source_t src)
{
    static const char *const names[] = {"pmix", "slurm", "mpi-env", "torchrun", "single"};
    return (unsigned)src < sizeof names / sizeof *names ? names[src] : "unknown";
}

double ddpc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------ messages */

/* Drop every "ddpc[rank ...] " after the start of s: a message that chains
 * its causes ("ddp: bucket 0 ...: comm: allreduce #625 ...") keeps each
 * cause's module and text and one prefix, its own. A cause from another
 * rank says so in its text ("failed on rank 0: ckpt: ..."). */
static void drop_inner_prefixes(char *s)
{
    static const char tag[] = "ddpc[rank ";
    char *p = *s ? s + 1 : s;
    while ((p = strstr(p, tag)) != NULL) {
        char *q = strchr(p, ']');
        if (!q || q[1] != ' ') {
            p += sizeof tag - 1;
            continue;
        }
        memmove(p, q + 2, strlen(q + 2) + 1);
    }
}

void ddpc_format_msg(char *dst, size_t n, const char *prefix, const char *module,
                     const char *fmt, va_list ap)
{
    int k = snprintf(dst, n, "%s %s: ", prefix, module);
    if (k < 0 || (size_t)k >= n)
        return;
    vsnprintf(dst + k, n - (size_t)k, fmt, ap);
    drop_inner_prefixes(dst);
}

ddpc_status_t ddpc_set_error(char *dst, size_t n, const char *prefix, const char *module,
                             ddpc_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ddpc_format_msg(dst, n, prefix, module, fmt, ap);
    va_end(ap);
    return st;
}

void ddpc_set_prefix(ddpc_t rt)
{
    const ddpc_world_t *w = &rt->world;
    snprintf(rt->prefix, sizeof rt->prefix, "ddpc[rank %d/%d %s]", w->rank, w->size, w->host);
}

ddpc_status_t ddpc_verr(ddpc_t rt, ddpc_status_t st, const char *module, const char *fmt,
                        va_list ap)
{
    char *dst = rt ? rt->err : init_error;
    size_t n = rt ? sizeof rt->err : sizeof init_error;
    ddpc_format_msg(dst, n, rt ? rt->prefix : "ddpc[rank ?]", module, fmt, ap);
    if (rt && rt->cfg.log_level >= DDPC_LOG_DEBUG)
        fprintf(stderr, "%s (debug: recorded error %s)\n", dst, ddpc_strerror(st));
    return st;
}

ddpc_status_t ddpc_err(ddpc_t rt, ddpc_status_t st, const char *module, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ddpc_verr(rt, st, module, fmt, ap);
    va_end(ap);
    return st;
}

ddpc_status_t ddpc_mpi_err(ddpc_t rt, int mpirc, const char *module, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mpirc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "MPI error code %d", mpirc);
    return ddpc_err(rt, DDPC_ERR_MPI, module, "%s failed: %s", what, s);
}

const char *ddpc_last_error(ddpc_t rt) { return rt ? rt->err : init_error; }
const char *ddpc_init_error(void) { return init_error; }
const ddpc_world_t *ddpc_world(ddpc_t rt) { return rt ? &rt->world : NULL; }
const ddpc_config_t *ddpc_config(ddpc_t rt) { return rt ? &rt->cfg : NULL; }

void ddpc_log(ddpc_t rt, ddpc_log_level_t level, const char *fmt, ...)
{
    if (rt && level > rt->cfg.log_level)
        return;
    static const char *const tag[] = {"error: ", "warning: ", "", "debug: "};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(line, sizeof line, "%s %s", rt ? rt->prefix : "ddpc[rank ?]",
                     tag[level & 3]);
    vsnprintf(line + k, sizeof line - (size_t)k, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line); /* one write per line: ranks do not interleave mid-line */
}

/* ------------------------------------------------------------------ options */

ddpc_status_t ddpc_env_double(ddpc_t rt, const char *name, double lo, double hi, double *val)
{
    const char *s = getenv(name);
    if (!s)
        return DDPC_OK;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return ddpc_err(rt, DDPC_ERR_INVALID, "options", "%s=\"%s\": expected a number in [%g, %g]",
                        name, s, lo, hi);
    *val = v;
    return DDPC_OK;
}

ddpc_status_t ddpc_env_long(ddpc_t rt, const char *name, long lo, long hi, long *val)
{
    const char *s = getenv(name);
    if (!s)
        return DDPC_OK;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return ddpc_err(rt, DDPC_ERR_INVALID, "options",
                        "%s=\"%s\": expected an integer in [%ld, %ld]", name, s, lo, hi);
    *val = v;
    return DDPC_OK;
}

ddpc_status_t ddpc_env_choice(ddpc_t rt, const char *name, const char *const *choices, int *val)
{
    const char *s = getenv(name);
    if (!s)
        return DDPC_OK;
    char list[256] = "";
    for (int i = 0; choices[i]; i++) {
        if (strcasecmp(s, choices[i]) == 0) {
            *val = i;
            return DDPC_OK;
        }
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "|" : "",
                 choices[i]);
    }
    return ddpc_err(rt, DDPC_ERR_INVALID, "options", "%s=\"%s\": expected one of %s", name, s,
                    list);
}

static ddpc_status_t read_env_options(ddpc_t rt)
{
    static const char *const levels[] = {"error", "warn", "info", "debug", NULL};
    static const char *const backends[] = {"auto", "mpi", "nccl", NULL}; /* ddpc_backend_t order */
    int lv = (int)rt->cfg.log_level, be = (int)rt->cfg.backend;
    ddpc_status_t st;
    if ((st = ddpc_env_choice(rt, "DDPC_LOG_LEVEL", levels, &lv)) ||
        (st = ddpc_env_double(rt, "DDPC_TIMEOUT", 0.001, 1e7, &rt->cfg.timeout_s)) ||
        (st = ddpc_env_choice(rt, "DDPC_BACKEND", backends, &be)) ||
        (st = ddpc_env_long(rt, "DDPC_FLIGHT_RECORDER", 0, 1 << 20, &rt->flight_n)))
        return st;
    rt->flight_dir = getenv("DDPC_FLIGHT_RECORDER_DIR");
    if (!rt->flight_dir || !*rt->flight_dir)
        rt->flight_dir = ".";
    rt->cfg.log_level = (ddpc_log_level_t)lv;
    rt->cfg.backend = (ddpc_backend_t)be;
    return DDPC_OK;
}

/* ------------------------------------------------------------------ lifecycle */

/* One error, on every rank that saw it, before returning. */
static ddpc_status_t init_fail(ddpc_t rt, ddpc_status_t st)
{
    fprintf(stderr, "%s\n", rt->err);
    return st;
}

ddpc_status_t ddpc_init(const ddpc_config_t *cfg, int *argc, char ***argv, ddpc_t *out)
{
    static const ddpc_config_t defaults = DDPC_CONFIG_INIT;
    ddpc_status_t st;
    init_error[0] = 0;
    if (!out)
        return ddpc_err(NULL, DDPC_ERR_INVALID, "init", "out must not be NULL");
    *out = NULL;
    ddpc_t rt = calloc(1, sizeof *rt);
    if (!rt)
        return ddpc_err(NULL, DDPC_ERR_NOMEM, "init", "cannot allocate the runtime handle");
    rt->cfg = cfg ? *cfg : defaults;
    rt->mpi_world = MPI_COMM_NULL;
    *out = rt;

    /* Discovery first, so that every later message carries rank and host. */
    if ((st = ddpc_discover(rt)) != DDPC_OK) {
        ddpc_set_prefix(rt);
        return init_fail(rt, st);
    }
    ddpc_set_prefix(rt);
    if ((st = read_env_options(rt)) != DDPC_OK)
        return init_fail(rt, st);

    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &rt->mpi_thread_level);
        if (rc != MPI_SUCCESS)
            return init_fail(rt, ddpc_mpi_err(rt, rc, "init", "MPI_Init_thread"));
        rt->own_mpi = 1;
    } else {
        MPI_Query_thread(&rt->mpi_thread_level);
    }
    if (rt->mpi_thread_level < MPI_THREAD_SERIALIZED)
        return init_fail(rt, ddpc_err(rt, DDPC_ERR_UNSUPPORTED, "init",
                                      "MPI provides thread level %d; ddpc needs at least "
                                      "MPI_THREAD_SERIALIZED (its progress thread calls MPI)",
                                      rt->mpi_thread_level));
    MPI_Comm_rank(MPI_COMM_WORLD, &rt->world.mpi_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &rt->world.mpi_size);
    if ((st = ddpc_discover_check_mpi(rt)) != DDPC_OK) {
        /* srun --mpi=pmix with an MPI that has no PMIx client (Debian's
         * MPICH): every process is a 1-rank MPI job. The nccl backend needs
         * no MPI (its id goes through PMIx), so that launch is fine there. */
        if (rt->cfg.backend == DDPC_BACKEND_NCCL && rt->world.source == DDPC_SOURCE_PMIX &&
            rt->world.mpi_size == 1 && rt->world.size > 1) {
            if ((st = ddpc_discover_without_mpi(rt)) != DDPC_OK)
                return init_fail(rt, st);
            rt->err[0] = 0;
            ddpc_log(rt, DDPC_LOG_INFO,
                     "world from pmix: local rank %d/%d, node %d/%d; MPI is not wired (no PMIx "
                     "client in this MPI): backend nccl only, no world communicator; timeout %gs",
                     rt->world.local_rank, rt->world.local_size, rt->world.node_id,
                     rt->world.num_nodes, rt->cfg.timeout_s);
            if ((st = ddpc_monitor_start(rt)) != DDPC_OK)
                return init_fail(rt, st);
            return DDPC_OK;
        }
        if (!rt->cfg.allow_mpi_mismatch)
            return init_fail(rt, st);
        return DDPC_OK; /* ddpc-info: world from the launcher, no MPI communicator;
                           the disagreement stays in ddpc_last_error */
    }
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &rt->mpi_world);
    if (rc != MPI_SUCCESS)
        return init_fail(rt, ddpc_mpi_err(rt, rc, "init", "MPI_Comm_dup"));
    if ((st = ddpc_comm_create_world(rt, &rt->world_comm)) != DDPC_OK ||
        (st = ddpc_monitor_start(rt)) != DDPC_OK)
        return init_fail(rt, st);
    ddpc_log(rt, DDPC_LOG_INFO,
             "world from %s: local rank %d/%d, node %d/%d; MPI thread level %d; timeout %gs",
             ddpc_source_name(rt->world.source), rt->world.local_rank, rt->world.local_size,
             rt->world.node_id, rt->world.num_nodes, rt->mpi_thread_level, rt->cfg.timeout_s);
    return DDPC_OK;
}

ddpc_status_t ddpc_finalize(ddpc_t rt)
{
    if (!rt)
        return DDPC_OK;
    ddpc_monitor_stop(rt);
    ddpc_comm_destroy_internal(rt->world_comm);
    if (rt->stuck) {
        /* a collective never completed (a rank is missing): MPI_Finalize
         * would wait for it forever. MPI stays as it is, and so does rt
         * (a thread left in that collective holds it). */
        ddpc_log(rt, DDPC_LOG_ERROR,
                 "finalize: a collective never completed (another rank is missing), so MPI is "
                 "not finalized; exit with a non-zero status (or call ddpc_abort) so that the "
                 "launcher ends the job");
        return DDPC_ERR_TIMEOUT;
    }
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && rt->mpi_world != MPI_COMM_NULL)
        MPI_Comm_free(&rt->mpi_world);
    if (rt->own_mpi && !fin)
        MPI_Finalize();
    ddpc_discover_finalize(rt);
    free(rt);
    return DDPC_OK;
}

#define ABORT_GRACE_S 5

static void *abort_grace(void *arg)
{
    struct timespec t = {ABORT_GRACE_S, 0};
    while (nanosleep(&t, &t) != 0) {
    }
    _Exit(*(const int *)arg);
    return NULL;
}

void ddpc_abort(ddpc_t rt, int code, const char *msg)
{
    ddpc_flight_dump(rt, msg, NULL, 0); /* DDPC_FLIGHT_RECORDER: what this rank did last */
    if (msg && *msg) {
        char line[2 * DDPC_ERRMSG_LEN];
        snprintf(line, sizeof line, "%s %s", rt ? rt->prefix : "ddpc[rank ?]", msg);
        drop_inner_prefixes(line); /* msg often chains a library message */
        fprintf(stderr, "%s\n", line);
    }
    fflush(NULL);
    /* the launcher forwards this rank's output through a pipe while the
     * abort tears the job down: give it a moment, or the message that says
     * why can be lost (seen with MPICH's hydra: no output, exit 1) */
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL);
    /* MPI_Abort can block: a rank cut off from its node's launcher daemon
     * (link down) waits in it as long as the link is down. The process
     * ends ABORT_GRACE_S later whatever MPI does. */
    static int grace_code;
    grace_code = code ? code : 1;
    pthread_t grace;
    if (pthread_create(&grace, NULL, abort_grace, &grace_code) == 0)
        pthread_detach(grace);
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (rt && rt->pmix_active && !(inited && !fin && rt->world.mpi_size == rt->world.size))
        ddpc_discover_abort(rt, code, msg);
    if (inited && !fin)
        MPI_Abort(MPI_COMM_WORLD, code);
    _Exit(code ? code : 1);
}

/* ------------------------------------------------------------------ version */

const char *ddpc_version(void) { return PACKAGE_VERSION; }

const char *ddpc_build_info(void)
{
    static char info[512];
    if (!info[0]) {
        char mpiv[MPI_MAX_LIBRARY_VERSION_STRING] = "";
        int len = 0;
        MPI_Get_library_version(mpiv, &len);
        char *nl = strchr(mpiv, '\n');
        if (nl)
            *nl = 0;
#ifdef DDPC_HAVE_CUDA
        const char *archs = " (compute capabilities " DDPC_CUDA_ARCHS ")";
#else
        const char *archs = "";
#endif
        snprintf(info, sizeof info, "MPI: %s; PMIx: %s; HDF5: %s; CUDA: %s%s; NCCL: %s; BLAS: %s",
                 mpiv, DDPC_PMIX_VERSION, DDPC_HDF5_VERSION, DDPC_CUDA_VERSION, archs,
                 DDPC_NCCL_VERSION, DDPC_BLAS_NAME);
    }
    return info;
}

const char *ddpc_runtime_info(void)
{
    static char info[256];
#ifdef DDPC_HAVE_CUDA
    int drv = 0, rtv = 0, n = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rtv);
    cudaError_t e = cudaGetDeviceCount(&n);
    char gpus[128];
    if (e == cudaSuccess)
        snprintf(gpus, sizeof gpus, "%d GPU(s) visible", n);
    else
        snprintf(gpus, sizeof gpus, "no usable GPU (%s)", cudaGetErrorString(e));
    char nccl[32] = "no";
#ifdef DDPC_HAVE_NCCL
    int v = 0;
    if (ncclGetVersion(&v) == ncclSuccess)
        snprintf(nccl, sizeof nccl, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
#endif
    char dv[16] = "none";
    if (drv > 0)
        snprintf(dv, sizeof dv, "%d.%d", drv / 1000, drv % 1000 / 10);
    snprintf(info, sizeof info, "CUDA driver: %s; CUDA runtime: %d.%d; NCCL: %s; %s", dv,
             rtv / 1000, rtv % 1000 / 10, nccl, gpus);
#else
    snprintf(info, sizeof info, "CUDA: not built in");
#endif
    return info;
}
