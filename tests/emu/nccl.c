/* SPDX-License-Identifier: BSD-3-Clause */
/* nccl.c: the NCCL calls ddpc uses, emulated over TCP sockets on the
 * emulated device memory (emu.h). Needs no MPI, as NCCL does not: the
 * processes may be an MPI job, MPI singletons, or forked by hand.
 * Bootstrap as NCCL's: ncclGetUniqueId opens a listening IPv4 socket in
 * its caller (every interface, an ephemeral port) and writes into the id a
 * marker and version, the creator's address (DDPC_EMU_NCCL_ADDR, else its
 * host name's as getaddrinfo resolves it, else 127.0.0.1), the port, its
 * pid, host name, a serial and a random nonce. At init each member opens a
 * listener of its own, connects to the creator and sends its rank, nranks,
 * host, device and that listener's address; the creator checks them
 * (nranks, a rank given twice, two ranks on one device of one host) and
 * answers the table; then rank i connects to every rank j < i (a hello
 * with the communicator's nonce and i) and accepts the others: a full mesh,
 * one connection per pair, of that communicator only. So the creator must
 * be a member (a member that hears nothing within
 * DDPC_EMU_NCCL_INIT_TIMEOUT, 60 s, fails saying so). ncclCommSplit
 * all-gathers (color, key, device, host, listener) over the parent's mesh
 * and builds a mesh per color by key, then parent rank (NOCOLOR: NULL); a
 * split while the parent has operations in flight is a violation.
 * Collectives, ncclReduce and sends/receives are operations on the stream
 * given, run in order by its thread, one operation of a communicator at a
 * time (its mutex), every transfer of one operation progressed at once
 * through non-blocking sockets and poll(), which also watches the abort
 * flag: an abort shuts the sockets down and ends what is in flight; a peer
 * that closes or resets a connection fails the operation asynchronously
 * (ncclRemoteError; another socket error ncclSystemError), never hangs it.
 * Every message carries a header (kind, bytes) that the receiver checks: a
 * mismatch (ranks issuing different operations or counts) fails with
 * ncclInvalidUsage. Reductions are deterministic and the same on every
 * rank: each rank reduces its chunk of the data (all-reduce,
 * reduce-scatter) or the root all of it (ncclReduce) in rank order 0..n-1,
 * rounding after each step in the data type (bf16 and f16 through float),
 * ncclAvg dividing the sum there; all-reduce then all-gathers the chunks.
 * Groups (ncclGroupStart nests) collect each thread's sends and receives
 * until the outermost ncclGroupEnd, which enqueues one operation per
 * (communicator, stream), in the order of their first call, that
 * progresses them all together (so a group on several communicators of one
 * stream must name them in the same order on every rank); a send to or
 * receive from self is allowed in a group (matched with one of the same
 * group in order) and refused alone (it could never complete); at most
 * P2P_MAX per communicator and stream in one group. A send completes alone
 * when it fits the connection's socket buffers (SOCK_BUF, MPI's eager
 * sends), a larger one once its receive takes it. Collectives in a group
 * are enqueued at once (ddpc does not group them). Matching is by order per
 * pair of ranks and communicator, as NCCL's. Non-blocking communicators
 * (config.blocking = 0) answer ncclInProgress for a random number of polls
 * after init, split (the parent too), finalize, each call and each group's
 * end, and a call before the previous one settled is a violation, so that
 * ddpc's polling is exercised. As NCCL: two ranks on one device of one
 * host are refused, device pointers only, Abort ends what is in flight.
 * Test hooks: DDPC_EMU_NCCL_HANG=RANK:N makes the N-th operation (from 1;
 * collectives, reduces and send/receive operations alike) of that
 * process's communicators never complete; DDPC_EMU_NCCL_FAIL=RANK:N makes
 * it fail asynchronously (ncclRemoteError). RANK is the launcher's
 * (PMI_RANK, PMIX_RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID), without one
 * the rank in each communicator. Not emulated: NCCL's algorithms and their
 * rounding, other NCCL calls (AllToAll, shrink, windows, user buffers). */
#define _GNU_SOURCE
#include "emu_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <nccl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define COMM_MAGIC 0x6e63636cu
#define HOST_MAX 64

/* A member of a communicator: its mesh listener (network order), and who
 * it is, for checks and messages. Sent as bytes: one machine's build. */
typedef struct {
    uint32_t ip;
    uint16_t port, pad;
    int32_t pid, device;
    char host[HOST_MAX];
} peer_t;

struct ncclComm {
    unsigned magic;
    int rank, nranks, device, launch_rank;
    int blocking;
    unsigned char id[16];    /* the same on every rank: every hello of its mesh carries it */
    int splits;              /* ncclCommSplit calls on it, the same count on every rank */
    int *fd;                 /* fd[r]: the connection to rank r; -1 for self, and once closed */
    peer_t *peer;            /* peer[r] */
    pthread_mutex_t mu;      /* one operation (or split) at a time on fd[] */
    int polls;               /* ncclInProgress answers left for the last call */
    int aborted, finalized;
    ncclResult_t async_err;
    char last[256];
    int inflight;            /* enqueued collectives not ended (atomic) */
    long executed;           /* collectives started on the stream */
    long hang_at, fail_at;   /* hooks: the n-th collective, 0 = none */
    struct ncclComm *next;
};

static pthread_mutex_t L = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm *comms; /* every live one, for the in-flight count */
static char global_last[256];

static void set_last(struct ncclComm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_last(struct ncclComm *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c ? c->last : global_last, sizeof global_last, fmt, ap);
    va_end(ap);
}

/* An asynchronous error of c: the first one stays. */
static void set_async(struct ncclComm *c, ncclResult_t r)
{
    ncclResult_t none = ncclSuccess;
    __atomic_compare_exchange_n(&c->async_err, &none, r, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
}

static int is_aborted(const struct ncclComm *c)
{
    return __atomic_load_n(&c->aborted, __ATOMIC_SEQ_CST);
}

/* Collectives enqueued and not ended on communicators that are not aborted
 * (cudart.c refuses allocations while this is non-zero). */
int emu_nccl_in_flight(void)
{
    int n = 0;
    pthread_mutex_lock(&L);
    for (struct ncclComm *c = comms; c; c = c->next)
        if (!is_aborted(c))
            n += __atomic_load_n(&c->inflight, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&L);
    return n;
}

/* cudart.c calls these when an OP_COLLECTIVE operation (its argument
 * starts with the communicator) is enqueued (a graph replay too) and ends. */
void emu_nccl_op_begin(void *arg)
{
    struct ncclComm *c = *(struct ncclComm **)arg;
    __atomic_add_fetch(&c->inflight, 1, __ATOMIC_SEQ_CST);
}

void emu_nccl_op_end(void *arg)
{
    struct ncclComm *c = *(struct ncclComm **)arg;
    __atomic_sub_fetch(&c->inflight, 1, __ATOMIC_SEQ_CST);
}

/* The process's rank from its launcher, for the hooks; fallback without one. */
static int launch_rank(int fallback)
{
    static const char *const vars[] = {"PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK",
                                       "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        long r = v && *v ? strtol(v, &end, 10) : -1;
        if (v && *v && !*end && r >= 0 && r < 1 << 30)
            return (int)r;
    }
    return fallback;
}

static long hook(const char *var, int rank)
{
    const char *v = getenv(var);
    int r;
    long n;
    if (v && sscanf(v, "%d:%ld", &r, &n) == 2 && r == rank && n > 0)
        return n;
    return 0;
}

/* Seconds a member waits for the creator's answer, the creator for the
 * members, and a mesh for its connections (DDPC_EMU_NCCL_INIT_TIMEOUT,
 * default 60): a rank that never joins, or an id's creator that is not a
 * member, fails init clearly instead of hanging. */
static double init_timeout_s(void)
{
    const char *v = getenv("DDPC_EMU_NCCL_INIT_TIMEOUT");
    double t = v && *v ? atof(v) : 60;
    return t > 0 ? t : 60;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------ types */

static size_t type_size(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
    }
}

#define bf16_to_f emu_from_bf16
#define f_to_bf16 emu_to_bf16
#define f16_to_f emu_from_f16
#define f_to_f16 emu_to_f16

/* acc[i] = acc[i] op in[i] for len elements, rounded in the type; k: 0 sum
 * (ncclAvg too), 1 prod, 2 max, 3 min. Integers wrap (through U). */
#define COMBINE(T, U)                                                                        \
    do {                                                                                     \
        T *a = acc;                                                                          \
        const T *b = in;                                                                     \
        switch (k) {                                                                         \
        case 0: for (size_t i = 0; i < len; i++) a[i] = (T)((U)a[i] + (U)b[i]); break;       \
        case 1: for (size_t i = 0; i < len; i++) a[i] = (T)((U)a[i] * (U)b[i]); break;       \
        case 2: for (size_t i = 0; i < len; i++) a[i] = b[i] > a[i] ? b[i] : a[i]; break;    \
        default: for (size_t i = 0; i < len; i++) a[i] = b[i] < a[i] ? b[i] : a[i]; break;   \
        }                                                                                    \
    } while (0)
#define COMBINE_HALF(IN, OUT)                                                                \
    do {                                                                                     \
        uint16_t *a = acc;                                                                   \
        const uint16_t *b = in;                                                              \
        for (size_t i = 0; i < len; i++) {                                                   \
            float x = IN(b[i]), y = IN(a[i]);                                                \
            a[i] = OUT(k == 0 ? x + y : k == 1 ? x * y : k == 2 ? (x > y ? x : y)            \
                                                               : (x < y ? x : y));           \
        }                                                                                    \
    } while (0)

static void combine(void *acc, const void *in, size_t len, ncclDataType_t t, ncclRedOp_t op)
{
    int k = op == ncclProd ? 1 : op == ncclMax ? 2 : op == ncclMin ? 3 : 0;
    switch (t) {
    case ncclInt8: COMBINE(int8_t, uint8_t); break;
    case ncclUint8: COMBINE(uint8_t, unsigned); break;
    case ncclInt32: COMBINE(int32_t, uint32_t); break;
    case ncclUint32: COMBINE(uint32_t, uint32_t); break;
    case ncclInt64: COMBINE(int64_t, uint64_t); break;
    case ncclUint64: COMBINE(uint64_t, uint64_t); break;
    case ncclFloat32: COMBINE(float, float); break;
    case ncclFloat64: COMBINE(double, double); break;
    case ncclBfloat16: COMBINE_HALF(bf16_to_f, f_to_bf16); break;
    case ncclFloat16: COMBINE_HALF(f16_to_f, f_to_f16); break;
    default: break;
    }
}

static void divide(void *p, size_t n, ncclDataType_t t, int by)
{
    for (size_t i = 0; i < n; i++)
        switch (t) {
        case ncclFloat32: ((float *)p)[i] /= (float)by; break;
        case ncclFloat64: ((double *)p)[i] /= by; break;
        case ncclBfloat16: ((uint16_t *)p)[i] = f_to_bf16(bf16_to_f(((uint16_t *)p)[i]) / by); break;
        case ncclFloat16: ((uint16_t *)p)[i] = f_to_f16(f16_to_f(((uint16_t *)p)[i]) / by); break;
        case ncclInt8: ((int8_t *)p)[i] /= by; break;
        case ncclUint8: ((uint8_t *)p)[i] /= by; break;
        case ncclInt32: ((int32_t *)p)[i] /= by; break;
        case ncclUint32: ((uint32_t *)p)[i] /= by; break;
        case ncclInt64: ((int64_t *)p)[i] /= by; break;
        case ncclUint64: ((uint64_t *)p)[i] /= by; break;
        default: break;
        }
}

/* out = part[0] op part[1] op ... part[n-1] (len elements each, in rank
 * order), ncclAvg then divided by n; out may be one of the parts. */
static int reduce_parts(void *out, const char *const *part, int n, size_t len, ncclDataType_t t,
                        ncclRedOp_t op)
{
    size_t bytes = len * type_size(t);
    char *acc = malloc(bytes + 1);
    if (!acc)
        return -1;
    memcpy(acc, part[0], bytes);
    for (int i = 1; i < n; i++)
        combine(acc, part[i], len, t, op);
    if (op == ncclAvg)
        divide(acc, len, t, n);
    memcpy(out, acc, bytes);
    free(acc);
    return 0;
}

/* ------------------------------------------------------------------ sockets */

/* SO_SNDBUF and SO_RCVBUF of every connection (Linux doubles them): fixed,
 * so that a send larger than what they hold waits for its receive. */
#define SOCK_BUF (256 << 10)

static void sock_opts(int fd)
{
    int b = SOCK_BUF, one = 1;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* A listener on every interface, an ephemeral port (*port, network
 * order); its accepted connections inherit sock_opts. -1: errno. */
static int tcp_listen(uint16_t *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sock_opts(fd);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    socklen_t len = sizeof sa;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, SOMAXCONN) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    *port = sa.sin_port;
    return fd;
}

/* This host's address for others to connect to (network order):
 * DDPC_EMU_NCCL_ADDR, else the first IPv4 address of gethostname(), else
 * 127.0.0.1. Resolved once (a resolver may be slow). */
static uint32_t the_ip;
static pthread_once_t ip_once = PTHREAD_ONCE_INIT;
static void resolve_ip(void);

static uint32_t host_ip(void)
{
    pthread_once(&ip_once, resolve_ip);
    return the_ip;
}

static void resolve_ip(void)
{
    struct in_addr a;
    const char *v = getenv("DDPC_EMU_NCCL_ADDR");
    if (v && *v && inet_pton(AF_INET, v, &a) == 1) {
        the_ip = a.s_addr;
        return;
    }
    if (v && *v)
        fprintf(stderr, "ddpc-emu[%d]: DDPC_EMU_NCCL_ADDR=%s is not an IPv4 address; "
                "using this host name's\n", (int)getpid(), v);
    char host[256] = "";
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    uint32_t ip = htonl(INADDR_LOOPBACK);
    if (gethostname(host, sizeof host - 1) == 0 && getaddrinfo(host, NULL, &hints, &res) == 0 &&
        res) {
        ip = ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr;
        freeaddrinfo(res);
    }
    the_ip = ip;
}

static const char *addr_str(uint32_t ip, uint16_t port, char *buf, size_t size)
{
    char a[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &ip, a, sizeof a);
    snprintf(buf, size, "%s:%u", a, (unsigned)ntohs(port));
    return buf;
}

/* Wait for events on fd until the deadline, or *abort: 1 ready (or an
 * error for the next call to say), 0 the deadline passed, -1 aborted. */
static int wait_fd(int fd, short events, double deadline, const int *abort)
{
    for (;;) {
        if (abort && __atomic_load_n(abort, __ATOMIC_SEQ_CST))
            return -1;
        double left = deadline - mono_s();
        if (left <= 0)
            return 0;
        struct pollfd p = {fd, events, 0};
        int r = poll(&p, 1, left > 0.05 ? 50 : (int)(left * 1000) + 1);
        if (r > 0 || (r < 0 && errno != EINTR))
            return 1;
    }
}

enum { IO_OK, IO_EOF, IO_ERR, IO_TIMEOUT, IO_ABORT };

/* All len bytes sent (send_ 1) or received by the deadline: IO_*; errno
 * for IO_ERR. */
static int io_all(int fd, void *buf, size_t len, int send_, double deadline, const int *abort)
{
    char *p = buf;
    while (len > 0) {
        ssize_t k = send_ ? send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL)
                          : recv(fd, p, len, MSG_DONTWAIT);
        if (k > 0) {
            p += k;
            len -= (size_t)k;
            continue;
        }
        if (k == 0 && !send_)
            return IO_EOF;
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return IO_ERR;
        int w = wait_fd(fd, send_ ? POLLOUT : POLLIN, deadline, abort);
        if (w == 0)
            return IO_TIMEOUT;
        if (w < 0)
            return IO_ABORT;
    }
    return IO_OK;
}

/* A connection to ip:port (network order) by the deadline, retried while
 * refused (the listener's process may not be there yet). -1: errno. */
static int tcp_connect(uint32_t ip, uint16_t port, double deadline)
{
    for (;;) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        sock_opts(fd);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = ip, .sin_port = port};
        int e = 0;
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
            e = errno;
            if (e == EINPROGRESS || e == EINTR) {
                socklen_t l = sizeof e;
                if (!wait_fd(fd, POLLOUT, deadline, NULL))
                    e = ETIMEDOUT;
                else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) < 0)
                    e = errno;
            }
        }
        if (!e)
            return fd;
        close(fd);
        if ((e != ECONNREFUSED && e != ECONNRESET && e != EAGAIN) || mono_s() > deadline) {
            errno = e;
            return -1;
        }
        usleep(50000);
    }
}

/* A connection accepted on listener lfd by the deadline. -1: errno
 * (ETIMEDOUT). */
static int tcp_accept(int lfd, double deadline)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            return fd;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
            return -1;
        if (!wait_fd(lfd, POLLIN, deadline, NULL)) {
            errno = ETIMEDOUT;
            return -1;
        }
    }
}

/* ------------------------------------------------------------------ transfers */

/* Every message on a connection: this header, then bytes of payload. */
typedef struct {
    uint32_t magic, kind;
    uint64_t bytes;
} hdr_t;
#define HDR_MAGIC 0x656d754eu

enum kind { K_P2P = 1, K_ALLREDUCE, K_ALLREDUCE_GATHER, K_BCAST, K_ALLGATHER, K_REDUCE_SCATTER,
            K_REDUCE, K_SPLIT };

static const char *kind_name(uint32_t k)
{
    static const char *const n[] = {"?", "a send", "an all-reduce's chunk",
                                    "an all-reduce's result", "a broadcast", "an all-gather",
                                    "a reduce-scatter's chunk", "a reduce", "a split's exchange"};
    return k < sizeof n / sizeof *n ? n[k] : n[0];
}

/* One transfer of an operation: bytes of buf to or from peer. */
typedef struct {
    int peer, send;
    uint32_t kind;
    char *buf;
    size_t bytes;
    size_t done; /* of sizeof hdr + bytes */
    hdr_t hdr;   /* the one sent, or the one being received */
} xfer_t;

static void xfer(xfer_t *x, int peer, int send, uint32_t kind, const void *buf, size_t bytes)
{
    *x = (xfer_t){peer, send, kind, (char *)buf, bytes, 0, {HDR_MAGIC, kind, bytes}};
}

/* A connection of c failed under an operation (err 0: closed by the
 * peer): its asynchronous error, unless c was aborted here. Returns -1. */
static int lost(struct ncclComm *c, const xfer_t *x, int err, const char *what, long seq)
{
    if (is_aborted(c))
        return -1;
    const peer_t *p = &c->peer[x->peer];
    set_last(c, "emulated NCCL %s #%ld: rank %d lost its connection to rank %d (pid %d on %s): "
                "%s: that process exited or aborted the communicator", what, seq, c->rank,
             x->peer, (int)p->pid, p->host, err ? strerror(err) : "closed by the peer");
    fprintf(stderr, "ddpc-emu[%d]: %s\n", (int)getpid(), c->last);
    set_async(c, !err || err == ECONNRESET || err == EPIPE ? ncclRemoteError : ncclSystemError);
    return -1;
}

/* Advance x as far as its socket takes now: 1 done, 0 would block, -1
 * failed (c's asynchronous error set). */
static int step(struct ncclComm *c, xfer_t *x, const char *what, long seq)
{
    int fd = c->fd[x->peer];
    const size_t hs = sizeof x->hdr, total = hs + x->bytes;
    while (x->done < total) {
        ssize_t k;
        if (x->send) {
            struct iovec iov[2];
            int niov = 0;
            size_t off = x->done > hs ? x->done - hs : 0;
            if (x->done < hs)
                iov[niov++] = (struct iovec){(char *)&x->hdr + x->done, hs - x->done};
            if (x->bytes > off)
                iov[niov++] = (struct iovec){x->buf + off, x->bytes - off};
            struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
            k = sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
        } else if (x->done < hs) {
            k = recv(fd, (char *)&x->hdr + x->done, hs - x->done, MSG_DONTWAIT);
        } else {
            k = recv(fd, x->buf + (x->done - hs), total - x->done, MSG_DONTWAIT);
        }
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return 0;
        if (k <= 0)
            return lost(c, x, k == 0 ? 0 : errno, what, seq);
        x->done += (size_t)k;
        if (!x->send && x->done == hs &&
            (x->hdr.magic != HDR_MAGIC || x->hdr.kind != x->kind || x->hdr.bytes != x->bytes)) {
            if (x->hdr.magic != HDR_MAGIC)
                set_last(c, "emulated NCCL %s #%ld: rank %d got a corrupt message from rank %d",
                         what, seq, c->rank, x->peer);
            else
                set_last(c, "emulated NCCL %s #%ld: rank %d expected %s of %zu bytes from rank "
                            "%d and got %s of %llu bytes: the ranks issued different operations "
                            "or counts", what, seq, c->rank, kind_name(x->kind), x->bytes, x->peer,
                         kind_name(x->hdr.kind), (unsigned long long)x->hdr.bytes);
            fprintf(stderr, "ddpc-emu[%d]: %s\n", (int)getpid(), c->last);
            set_async(c, ncclInvalidUsage);
            return -1;
        }
    }
    return 1;
}

/* Run the n transfers of one operation together, each connection's sends
 * and receives in their order, until all are done: 0; -1 failed (c's
 * asynchronous error set); 1 aborted. Self transfers are not here. */
static int xfer_all(struct ncclComm *c, xfer_t *x, int n, const char *what, long seq)
{
    struct pollfd *pf = calloc((size_t)n + 1, sizeof *pf);
    if (!pf) {
        set_last(c, "emulated NCCL %s #%ld: out of memory", what, seq);
        set_async(c, ncclSystemError);
        return -1;
    }
    int rc = 0;
    for (;;) {
        if (is_aborted(c)) {
            rc = 1;
            break;
        }
        int np = 0, left = 0, moved = 0;
        for (int i = 0; i < n && rc == 0; i++) {
            if (x[i].done == sizeof x[i].hdr + x[i].bytes)
                continue;
            left++;
            int head = 1; /* the first unfinished of its connection and direction */
            for (int j = 0; j < i && head; j++)
                head = !(x[j].peer == x[i].peer && x[j].send == x[i].send &&
                         x[j].done < sizeof x[j].hdr + x[j].bytes);
            if (!head)
                continue;
            size_t before = x[i].done;
            int s = step(c, &x[i], what, seq);
            if (s < 0)
                rc = is_aborted(c) ? 1 : -1;
            else if (s > 0 || x[i].done != before)
                moved = 1;
            else
                pf[np++] = (struct pollfd){c->fd[x[i].peer], x[i].send ? POLLOUT : POLLIN, 0};
        }
        if (rc || !left)
            break;
        if (!moved && poll(pf, (nfds_t)np, 50) < 0 && errno != EINTR) {
            set_last(c, "emulated NCCL %s #%ld: poll: %s", what, seq, strerror(errno));
            set_async(c, ncclSystemError);
            rc = -1;
            break;
        }
    }
    free(pf);
    return rc;
}

/* ------------------------------------------------------------------ collectives */

enum coll { C_ALLREDUCE, C_BCAST, C_ALLGATHER, C_REDUCE_SCATTER, C_REDUCE };

typedef struct {
    struct ncclComm *comm; /* first: cudart.c's begin/end hooks read it */
    int kind, root;
    const void *send;
    void *recv;
    size_t count; /* elements: per rank for allgather's send and reduce-scatter's recv */
    ncclDataType_t dt;
    ncclRedOp_t op;
} coll_t;

/* The start of every operation on its stream (a collective, a send/receive
 * batch), c's mutex held: its number in the communicator's `executed`
 * order, and the hooks. Returns the number, or 0 when the operation must do
 * nothing more (aborted, hung until aborted, failed by the hook). */
static long start_op(struct ncclComm *c, const char *what)
{
    if (is_aborted(c))
        return 0;
    long seq = __atomic_add_fetch(&c->executed, 1, __ATOMIC_SEQ_CST);
    if (c->hang_at == seq) {
        fprintf(stderr, "ddpc-emu[%d]: NCCL %s #%ld of rank %d never completes "
                "(DDPC_EMU_NCCL_HANG)\n", (int)getpid(), what, seq, c->rank);
        while (!is_aborted(c))
            usleep(1000);
        return 0;
    }
    if (c->fail_at == seq) {
        fprintf(stderr, "ddpc-emu[%d]: NCCL %s #%ld of rank %d fails asynchronously "
                "(DDPC_EMU_NCCL_FAIL)\n", (int)getpid(), what, seq, c->rank);
        set_last(c, "emulated remote failure in %s #%ld (DDPC_EMU_NCCL_FAIL)", what, seq);
        set_async(c, ncclRemoteError);
        return 0;
    }
    return seq;
}

/* The first element of chunk j of count among n ranks (all-reduce). */
static size_t chunk_lo(size_t count, int j, int n)
{
    return count * (size_t)j / (size_t)n;
}

/* The block of rank j's elements that a reduction gives to one rank: the
 * j-th chunk for all-reduce, the j-th count for reduce-scatter, all of it
 * for ncclReduce. */
static void block_of(const coll_t *a, int j, int n, size_t *lo, size_t *len)
{
    if (a->kind == C_ALLREDUCE)
        *lo = chunk_lo(a->count, j, n), *len = chunk_lo(a->count, j + 1, n) - *lo;
    else if (a->kind == C_REDUCE_SCATTER)
        *lo = a->count * (size_t)j, *len = a->count;
    else
        *lo = 0, *len = a->count;
}

/* Phase one of all-reduce and reduce-scatter, and ncclReduce: this rank
 * sends its block_of(j) to every other rank j (to_root: to the root only)
 * and receives every other rank's block_of(me) (to_root: the root only);
 * the reduction of the n blocks in rank order lands in out. */
static int reduce_phase(struct ncclComm *c, const coll_t *a, uint32_t kind, int to_root, void *out,
                        long seq)
{
    int n = c->nranks, me = c->rank;
    size_t es = type_size(a->dt), mylo, mylen;
    const char *snd = a->send;
    block_of(a, me, n, &mylo, &mylen);
    int receiving = !to_root || me == a->root;
    xfer_t *x = calloc(2 * (size_t)n, sizeof *x);
    char *tmp = receiving ? malloc((size_t)n * mylen * es + 1) : NULL;
    const char **part = calloc((size_t)n, sizeof *part);
    if (!x || (receiving && !tmp) || !part) {
        free(x), free(tmp), free(part);
        set_last(c, "emulated NCCL collective #%ld: out of memory", seq);
        set_async(c, ncclSystemError);
        return -1;
    }
    int nx = 0;
    for (int j = 0; j < n; j++) {
        if (j == me)
            continue;
        if (!to_root || j == a->root) {
            size_t jlo, jlen;
            block_of(a, j, n, &jlo, &jlen);
            xfer(&x[nx++], j, 1, kind, snd + jlo * es, jlen * es);
        }
        if (receiving) {
            part[j] = tmp + (size_t)j * mylen * es;
            xfer(&x[nx++], j, 0, kind, part[j], mylen * es);
        }
    }
    part[me] = snd + mylo * es;
    int rc = xfer_all(c, x, nx, "collective", seq);
    if (rc == 0 && receiving && reduce_parts(out, part, n, mylen, a->dt, a->op) < 0) {
        set_last(c, "emulated NCCL collective #%ld: out of memory", seq);
        set_async(c, ncclSystemError);
        rc = -1;
    }
    free(x), free(tmp), free(part);
    return rc;
}

/* One collective over c's mesh (c's mutex held). */
static void coll(struct ncclComm *c, const coll_t *a, long seq)
{
    int n = c->nranks, me = c->rank;
    size_t es = type_size(a->dt), cnt = a->count;
    char *rcv = a->recv;
    if (a->kind == C_ALLREDUCE || a->kind == C_REDUCE_SCATTER || a->kind == C_REDUCE) {
        size_t mylo = a->kind == C_ALLREDUCE ? chunk_lo(cnt, me, n) : 0;
        uint32_t k = a->kind == C_ALLREDUCE ? K_ALLREDUCE
                     : a->kind == C_REDUCE ? K_REDUCE : K_REDUCE_SCATTER;
        if (reduce_phase(c, a, k, a->kind == C_REDUCE, rcv + mylo * es, seq) != 0 ||
            a->kind != C_ALLREDUCE)
            return;
    }
    xfer_t *x = calloc(2 * (size_t)n, sizeof *x);
    if (!x) {
        set_last(c, "emulated NCCL collective #%ld: out of memory", seq);
        set_async(c, ncclSystemError);
        return;
    }
    int nx = 0;
    if (a->kind == C_ALLREDUCE) { /* every rank's reduced chunk to every rank */
        size_t mylo = chunk_lo(cnt, me, n), mylen = chunk_lo(cnt, me + 1, n) - mylo;
        for (int j = 0; j < n; j++)
            if (j != me) {
                size_t jlo = chunk_lo(cnt, j, n), jlen = chunk_lo(cnt, j + 1, n) - jlo;
                xfer(&x[nx++], j, 1, K_ALLREDUCE_GATHER, rcv + mylo * es, mylen * es);
                xfer(&x[nx++], j, 0, K_ALLREDUCE_GATHER, rcv + jlo * es, jlen * es);
            }
    } else if (a->kind == C_ALLGATHER) {
        char *mine = rcv + (size_t)me * cnt * es;
        if ((const char *)a->send != mine)
            memmove(mine, a->send, cnt * es);
        for (int j = 0; j < n; j++)
            if (j != me) {
                xfer(&x[nx++], j, 1, K_ALLGATHER, mine, cnt * es);
                xfer(&x[nx++], j, 0, K_ALLGATHER, rcv + (size_t)j * cnt * es, cnt * es);
            }
    } else if (a->kind == C_BCAST) {
        if (me == a->root) {
            if (a->send != a->recv)
                memmove(rcv, a->send, cnt * es);
            for (int j = 0; j < n; j++)
                if (j != me)
                    xfer(&x[nx++], j, 1, K_BCAST, rcv, cnt * es);
        } else {
            xfer(&x[nx++], a->root, 0, K_BCAST, rcv, cnt * es);
        }
    }
    xfer_all(c, x, nx, "collective", seq);
    free(x);
}

static void run_coll(void *arg)
{
    coll_t *a = arg;
    struct ncclComm *c = a->comm;
    pthread_mutex_lock(&c->mu);
    long seq = start_op(c, "collective");
    if (seq)
        coll(c, a, seq);
    pthread_mutex_unlock(&c->mu);
}

/* With a non-blocking communicator, the next polls answer ncclInProgress. */
static ncclResult_t in_progress(struct ncclComm *c)
{
    if (c->blocking)
        return ncclSuccess;
    int n = (int)emu_rand(4);
    __atomic_store_n(&c->polls, n, __ATOMIC_SEQ_CST);
    return n ? ncclInProgress : ncclSuccess;
}

static ncclResult_t check_comm(struct ncclComm *c, const char *call)
{
    if (!c || c->magic != COMM_MAGIC) {
        emu_violation("%s: %p is not a live NCCL communicator", call, (void *)c);
        return ncclInvalidArgument;
    }
    if (__atomic_load_n(&c->polls, __ATOMIC_SEQ_CST) > 0) {
        emu_violation("%s on a non-blocking communicator whose previous call still answers "
                      "ncclInProgress: poll ncclCommGetAsyncError until ncclSuccess first", call);
        return ncclInvalidUsage;
    }
    if (c->aborted) {
        set_last(c, "%s: the communicator was aborted", call);
        return ncclInvalidUsage;
    }
    ncclResult_t a = __atomic_load_n(&c->async_err, __ATOMIC_SEQ_CST);
    if (a != ncclSuccess)
        return a;
    return ncclSuccess;
}

static ncclResult_t in_group(struct ncclComm *c);

static ncclResult_t enqueue(const char *call, coll_t *a, size_t send_elems, size_t recv_elems,
                            cudaStream_t s)
{
    struct ncclComm *c = a->comm;
    ncclResult_t r = check_comm(c, call);
    if (r != ncclSuccess)
        return r;
    size_t es = type_size(a->dt);
    if (!es) {
        set_last(c, "%s: data type %d is not emulated", call, (int)a->dt);
        return ncclInvalidArgument;
    }
    if ((unsigned)a->op > (unsigned)ncclAvg) {
        set_last(c, "%s: reduction %d is not emulated", call, (int)a->op);
        return ncclInvalidArgument;
    }
    if (a->count > (size_t)0x7fffffff) {
        set_last(c, "%s: count %zu too large for the emulation", call, a->count);
        return ncclInvalidArgument;
    }
    if ((a->send || send_elems) && emu_check(a->send, send_elems * es, EMU_DEVICE, call, "sendbuff"))
        return ncclInvalidArgument;
    /* ncclReduce's recvbuff matters on the root only */
    if ((a->kind != C_REDUCE || recv_elems) &&
        emu_check(a->recv, recv_elems * es, EMU_DEVICE, call, "recvbuff"))
        return ncclInvalidArgument;
    cudaError_t e = emu_submit_fn(s, call, run_coll, a, sizeof *a, OP_COLLECTIVE);
    if (e != cudaSuccess) {
        set_last(c, "%s: enqueuing on the stream: %s", call, cudaGetErrorString(e));
        return ncclUnhandledCudaError;
    }
    return in_group(c);
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t dt,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s)
{
    coll_t a = {comm, C_ALLREDUCE, 0, send, recv, count, dt, op};
    return enqueue("ncclAllReduce", &a, count, count, s);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t dt, int root,
                           ncclComm_t comm, cudaStream_t s)
{
    if (comm && comm->magic == COMM_MAGIC && (root < 0 || root >= comm->nranks)) {
        set_last(comm, "ncclBroadcast: root %d of %d ranks", root, comm->nranks);
        return ncclInvalidArgument;
    }
    coll_t a = {comm, C_BCAST, root, send, recv, count, dt, ncclSum};
    int is_root = comm && comm->magic == COMM_MAGIC && comm->rank == root;
    return enqueue("ncclBroadcast", &a, is_root ? count : 0, count, s);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t dt,
                           ncclComm_t comm, cudaStream_t s)
{
    coll_t a = {comm, C_ALLGATHER, 0, send, recv, sendcount, dt, ncclSum};
    size_t n = comm && comm->magic == COMM_MAGIC ? (size_t)comm->nranks : 1;
    return enqueue("ncclAllGather", &a, sendcount, sendcount * n, s);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t dt,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t s)
{
    coll_t a = {comm, C_REDUCE_SCATTER, 0, send, recv, recvcount, dt, op};
    size_t n = comm && comm->magic == COMM_MAGIC ? (size_t)comm->nranks : 1;
    return enqueue("ncclReduceScatter", &a, recvcount * n, recvcount, s);
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t dt,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t s)
{
    if (comm && comm->magic == COMM_MAGIC && (root < 0 || root >= comm->nranks)) {
        set_last(comm, "ncclReduce: root %d of %d ranks", root, comm->nranks);
        return ncclInvalidArgument;
    }
    coll_t a = {comm, C_REDUCE, root, send, recv, count, dt, op};
    int is_root = comm && comm->magic == COMM_MAGIC && comm->rank == root;
    return enqueue("ncclReduce", &a, count, is_root ? count : 0, s);
}


/* ------------------------------------------------------------------ point-to-point, groups */

/* One send or receive: count elements of dt to or from peer (a rank of the
 * communicator). count is checked to fit an int at the call. */
typedef struct {
    void *buf;
    int count, dt, peer, send;
} p2p_item_t;

/* Sends and receives of one communicator on one stream, run as one
 * operation that progresses them all together. Held by value in the
 * operation's argument (EMU_ARG_MAX), so a graph replays it as is: at
 * most P2P_MAX per communicator and stream in one group. */
#define P2P_MAX 20
typedef struct {
    struct ncclComm *comm; /* first: cudart.c's begin/end hooks read it */
    int n;
    p2p_item_t it[P2P_MAX];
} p2p_t;
_Static_assert(sizeof(p2p_t) <= EMU_ARG_MAX, "p2p_t must fit an operation's argument");

/* A batch's sends to self matched with its receives from self, in order
 * (a copy each); the others over the mesh, by order per peer. */
static void p2p_batch(struct ncclComm *c, const p2p_t *a, long seq)
{
    xfer_t x[P2P_MAX];
    int nx = 0, ns = 0, nr = 0;
    const p2p_item_t *ss[P2P_MAX], *sr[P2P_MAX];
    for (int i = 0; i < a->n; i++) {
        const p2p_item_t *p = &a->it[i];
        size_t bytes = (size_t)p->count * type_size((ncclDataType_t)p->dt);
        if (p->peer != c->rank)
            xfer(&x[nx++], p->peer, p->send, K_P2P, p->buf, bytes);
        else if (p->send)
            ss[ns++] = p;
        else
            sr[nr++] = p;
    }
    for (int i = 0; i < ns || i < nr; i++) {
        size_t sb = i < ns ? (size_t)ss[i]->count * type_size((ncclDataType_t)ss[i]->dt) : 0;
        size_t rb = i < nr ? (size_t)sr[i]->count * type_size((ncclDataType_t)sr[i]->dt) : 0;
        if (i >= ns || i >= nr || sb != rb) {
            set_last(c, "emulated NCCL send/receive #%ld: rank %d's %s to itself (%zu bytes) "
                        "has no matching %s of the same size in its group", seq, c->rank,
                     i < ns ? "send" : "receive", i < ns ? sb : rb, i < ns ? "receive" : "send");
            set_async(c, ncclInvalidUsage);
            return;
        }
        memmove(sr[i]->buf, ss[i]->buf, sb);
    }
    xfer_all(c, x, nx, "send/receive", seq);
}

static void run_p2p(void *arg)
{
    p2p_t *a = arg;
    struct ncclComm *c = a->comm;
    pthread_mutex_lock(&c->mu);
    long seq = start_op(c, "send/receive");
    if (seq)
        p2p_batch(c, a, seq);
    pthread_mutex_unlock(&c->mu);
}

/* The calling thread's group (ncclGroupStart nests): its depth, the sends
 * and receives collected for the outermost ncclGroupEnd (entries with
 * it.count < 0 only name a communicator a collective in the group used,
 * for its ncclInProgress answers), and the first error of a call in it. */
typedef struct {
    struct ncclComm *comm;
    cudaStream_t s;
    p2p_item_t it;
} pending_t;
static __thread int group_depth;
static __thread pending_t *pend;
static __thread int npend, cap_pend;
static __thread ncclResult_t group_err;

static ncclResult_t pend_add(struct ncclComm *c, cudaStream_t s, const p2p_item_t *it)
{
    if (npend == cap_pend) {
        int cap = cap_pend ? 2 * cap_pend : 16;
        pending_t *p = realloc(pend, (size_t)cap * sizeof *p);
        if (!p)
            return ncclSystemError;
        pend = p;
        cap_pend = cap;
    }
    pend[npend++] = (pending_t){c, s, *it};
    return ncclSuccess;
}

/* After a call enqueued work on c: inside a group, ncclSuccess (the
 * group's end answers for c); outside, in_progress. */
static ncclResult_t in_group(struct ncclComm *c)
{
    if (group_depth == 0)
        return in_progress(c);
    p2p_item_t touch = {NULL, -1, 0, 0, 0};
    ncclResult_t r = pend_add(c, NULL, &touch);
    if (r != ncclSuccess && group_err == ncclSuccess)
        group_err = r;
    return r;
}

/* A call inside a group that fails makes the group's end fail (NCCL's). */
static ncclResult_t group_fail(ncclResult_t r)
{
    if (group_depth > 0 && group_err == ncclSuccess)
        group_err = r;
    return r;
}

static ncclResult_t p2p(const char *call, void *buf, size_t count, ncclDataType_t dt, int peer,
                        struct ncclComm *c, cudaStream_t s, int send)
{
    ncclResult_t r = check_comm(c, call);
    if (r != ncclSuccess)
        return group_fail(r);
    size_t es = type_size(dt);
    if (!es) {
        set_last(c, "%s: data type %d is not emulated", call, (int)dt);
        return group_fail(ncclInvalidArgument);
    }
    if (count > (size_t)0x7fffffff) {
        set_last(c, "%s: count %zu too large for the emulation", call, count);
        return group_fail(ncclInvalidArgument);
    }
    if (peer < 0 || peer >= c->nranks) {
        set_last(c, "%s: peer %d is not a rank of this communicator (%d ranks)", call, peer,
                 c->nranks);
        return group_fail(ncclInvalidArgument);
    }
    if (peer == c->rank && group_depth == 0) {
        set_last(c, "%s: to or from rank %d itself outside a group: it could never complete "
                    "(pair it with its receive or send in ncclGroupStart/End)", call, peer);
        return ncclInvalidUsage;
    }
    if (emu_check(buf, count * es, EMU_DEVICE, call, send ? "sendbuff" : "recvbuff"))
        return group_fail(ncclInvalidArgument);
    p2p_item_t it = {buf, (int)count, (int)dt, peer, send};
    if (group_depth > 0)
        return group_fail(pend_add(c, s, &it));
    p2p_t a = {c, 1, {it}};
    cudaError_t e = emu_submit_fn(s, call, run_p2p, &a, sizeof a, OP_COLLECTIVE);
    if (e != cudaSuccess) {
        set_last(c, "%s: enqueuing on the stream: %s", call, cudaGetErrorString(e));
        return ncclUnhandledCudaError;
    }
    return in_progress(c);
}

ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t s)
{
    return p2p("ncclSend", (void *)send, count, dt, peer, comm, s, 1);
}

ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                      cudaStream_t s)
{
    return p2p("ncclRecv", recv, count, dt, peer, comm, s, 0);
}

ncclResult_t ncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

/* The outermost end: the collected sends and receives as one operation per
 * (communicator, stream), enqueued in the order of their first call; then
 * ncclInProgress if a non-blocking communicator of the group answers so. */
ncclResult_t ncclGroupEnd(void)
{
    if (group_depth <= 0) {
        set_last(NULL, "ncclGroupEnd without ncclGroupStart");
        return ncclInvalidUsage;
    }
    if (--group_depth > 0)
        return ncclSuccess;
    ncclResult_t r = group_err;
    group_err = ncclSuccess;
    for (int i = 0; i < npend && r == ncclSuccess; i++) {
        if (pend[i].it.count < 0 || !pend[i].comm)
            continue;
        struct ncclComm *c = pend[i].comm;
        cudaStream_t s = pend[i].s;
        p2p_t a = {c, 0, {{0}}};
        for (int j = i; j < npend; j++)
            if (pend[j].comm == c && pend[j].s == s && pend[j].it.count >= 0) {
                if (a.n == P2P_MAX) {
                    set_last(c, "ncclGroupEnd: more than %d sends and receives on one "
                                "communicator and stream in one group (the emulation's limit)",
                             P2P_MAX);
                    r = ncclInvalidUsage;
                    break;
                }
                a.it[a.n++] = pend[j].it;
                if (j > i)
                    pend[j].it.count = -1; /* taken; the entry still names c */
            }
        pend[i].it.count = -1;
        if (r != ncclSuccess)
            break;
        cudaError_t e = emu_submit_fn(s, "ncclGroupEnd", run_p2p, &a, sizeof a, OP_COLLECTIVE);
        if (e != cudaSuccess) {
            set_last(c, "ncclGroupEnd: enqueuing on the stream: %s", cudaGetErrorString(e));
            r = ncclUnhandledCudaError;
        }
    }
    /* every non-blocking communicator of the group answers for it */
    for (int i = 0; i < npend && (r == ncclSuccess || r == ncclInProgress); i++) {
        struct ncclComm *c = pend[i].comm;
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = pend[j].comm == c;
        if (!seen && in_progress(c) == ncclInProgress)
            r = ncclInProgress;
    }
    npend = 0;
    return r;
}

/* ------------------------------------------------------------------ lifecycle */

ncclResult_t ncclGetVersion(int *v)
{
    if (!v)
        return ncclInvalidArgument;
    *v = NCCL_VERSION_CODE;
    return ncclSuccess;
}

/* The unique id (128 opaque bytes; host order but for the address and
 * port: one machine's build): the marker "ddpc-emu" and a version, the
 * creator's listener (IPv4 address and port, network order), its pid and
 * serial, a random nonce (the communicator's identity: its mesh's hellos
 * carry it), the creator's host name (for messages). */
#define ID_VERSION 1
enum { ID_MARK = 0, ID_VER = 8, ID_ADDR = 12, ID_PORT = 16, ID_PID = 20, ID_SERIAL = 24,
       ID_NONCE = 32, ID_HOST = 48 };
_Static_assert(ID_HOST + HOST_MAX <= NCCL_UNIQUE_ID_BYTES, "the unique id's layout");
static unsigned id_serial; /* ids this process made (atomic) */

/* The ids this process made and has not used yet: their listeners, under L. */
typedef struct made_id {
    unsigned char nonce[16];
    pid_t pid; /* a forked child inherits the list, not the ids */
    int fd;
    struct made_id *next;
} made_id_t;
static made_id_t *made;

/* The listener of an id this process made (taken: an id serves one
 * init), or -1. */
static int take_made(const unsigned char *nonce)
{
    int fd = -1;
    pthread_mutex_lock(&L);
    for (made_id_t **pp = &made; *pp; pp = &(*pp)->next)
        if ((*pp)->pid == getpid() && !memcmp((*pp)->nonce, nonce, 16)) {
            made_id_t *m = *pp;
            *pp = m->next;
            fd = m->fd;
            free(m);
            break;
        }
    pthread_mutex_unlock(&L);
    return fd;
}

static void my_host(char *host)
{
    memset(host, 0, HOST_MAX);
    gethostname(host, HOST_MAX - 1);
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    if (!id)
        return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    made_id_t *m = calloc(1, sizeof *m);
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f && m ? fread(m->nonce, 1, sizeof m->nonce, f) : 0;
    if (f)
        fclose(f);
    if (got != sizeof m->nonce) {
        free(m);
        set_last(NULL, "ncclGetUniqueId: cannot read /dev/urandom");
        return ncclSystemError;
    }
    uint16_t port = 0;
    m->fd = tcp_listen(&port);
    if (m->fd < 0) {
        set_last(NULL, "ncclGetUniqueId: cannot listen on a TCP port: %s", strerror(errno));
        free(m);
        return ncclSystemError;
    }
    m->pid = getpid();
    uint32_t ver = ID_VERSION, ip = host_ip();
    int32_t pid = (int32_t)m->pid, serial = (int32_t)__atomic_add_fetch(&id_serial, 1,
                                                                         __ATOMIC_SEQ_CST);
    memcpy(id->internal + ID_MARK, "ddpc-emu", 8);
    memcpy(id->internal + ID_VER, &ver, sizeof ver);
    memcpy(id->internal + ID_ADDR, &ip, sizeof ip);
    memcpy(id->internal + ID_PORT, &port, sizeof port);
    memcpy(id->internal + ID_PID, &pid, sizeof pid);
    memcpy(id->internal + ID_SERIAL, &serial, sizeof serial);
    memcpy(id->internal + ID_NONCE, m->nonce, sizeof m->nonce);
    my_host(id->internal + ID_HOST);
    pthread_mutex_lock(&L);
    m->next = made;
    made = m;
    pthread_mutex_unlock(&L);
    return ncclSuccess;
}

/* what each member tells the id's creator at init */
#define JOIN_MAGIC 0x6a6f696eu
typedef struct {
    uint32_t magic;
    unsigned char nonce[16];
    int32_t rank, nranks;
    peer_t me;
} join_t;

/* the creator's answer: a status and its message, then peer_t[nranks] */
typedef struct {
    int32_t status;
    char msg[256];
} verdict_t;

/* Two of n members (rank = index) on one device of one host: NCCL's
 * message in msg. */
static int dup_gpu(const peer_t *p, int n, char *msg, size_t size)
{
    for (int a = 0; a < n; a++)
        for (int b = 0; b < a; b++)
            if (p[a].device == p[b].device && !strcmp(p[a].host, p[b].host)) {
                snprintf(msg, size, "Duplicate GPU detected : rank %d and rank %d both on CUDA "
                                    "device %d (emulated)", b, a, p[a].device);
                return 1;
            }
    return 0;
}

/* The creator's side of init, on the id's listener lfd: accept nranks - 1
 * joins, check them, answer each. peers[nranks] gets the table; msg the
 * error, if any. */
static ncclResult_t collect(int lfd, const join_t *mine, peer_t *peers, char *msg, size_t size)
{
    int n = mine->nranks;
    join_t *all = calloc((size_t)n, sizeof *all);
    int *conn = calloc((size_t)n, sizeof *conn);
    size_t rbytes = sizeof(verdict_t) + (size_t)n * sizeof(peer_t);
    char *reply = calloc(1, rbytes);
    if (!all || !conn || !reply) {
        free(all), free(conn), free(reply);
        snprintf(msg, size, "ncclCommInitRankConfig: out of memory");
        return ncclSystemError;
    }
    ncclResult_t r = ncclSuccess;
    all[0] = *mine;
    conn[0] = -1;
    int got = 1;
    double deadline = mono_s() + init_timeout_s();
    while (got < n) {
        int fd = tcp_accept(lfd, deadline);
        if (fd < 0) {
            if (errno == ETIMEDOUT)
                snprintf(msg, size, "ncclCommInitRankConfig: %d of %d rank(s) joined within "
                                    "%.0fs (DDPC_EMU_NCCL_INIT_TIMEOUT)", got, n,
                         init_timeout_s());
            else
                snprintf(msg, size, "ncclCommInitRankConfig: accepting a rank's connection: %s",
                         strerror(errno));
            r = ncclSystemError;
            break;
        }
        if (io_all(fd, &all[got], sizeof *all, 0, deadline, NULL) != IO_OK ||
            all[got].magic != JOIN_MAGIC || memcmp(all[got].nonce, mine->nonce, 16)) {
            close(fd); /* not a member of this id's communicator */
            continue;
        }
        conn[got++] = fd;
    }
    for (int i = 0; r == ncclSuccess && i < got; i++) {
        const join_t *j = &all[i];
        if (j->nranks != n) {
            snprintf(msg, size, "ncclCommInitRankConfig: pid %d on %s gave nranks %d, pid %d on "
                                "%s (the id's creator) %d", (int)j->me.pid, j->me.host,
                     (int)j->nranks, (int)mine->me.pid, mine->me.host, n);
            r = ncclInvalidUsage;
        } else if (j->rank < 0 || j->rank >= n) {
            snprintf(msg, size, "ncclCommInitRankConfig: pid %d on %s gave rank %d of %d",
                     (int)j->me.pid, j->me.host, (int)j->rank, n);
            r = ncclInvalidUsage;
        } else if (peers[j->rank].pid) {
            snprintf(msg, size, "ncclCommInitRankConfig: pid %d on %s and pid %d on %s both gave "
                                "rank %d", (int)peers[j->rank].pid, peers[j->rank].host,
                     (int)j->me.pid, j->me.host, (int)j->rank);
            r = ncclInvalidUsage;
        } else {
            peers[j->rank] = j->me;
        }
    }
    if (r == ncclSuccess && dup_gpu(peers, n, msg, size))
        r = ncclInvalidUsage;
    verdict_t *v = (verdict_t *)reply;
    v->status = (int32_t)r;
    snprintf(v->msg, sizeof v->msg, "%s", r == ncclSuccess ? "" : msg);
    memcpy(reply + sizeof *v, peers, (size_t)n * sizeof *peers);
    for (int i = 1; i < got; i++) {
        io_all(conn[i], reply, rbytes, 1, deadline + 5, NULL); /* a member gone says so itself */
        close(conn[i]);
    }
    free(all), free(conn), free(reply);
    return r;
}

/* A member's side: tell the creator at ip:port, wait for its table. */
static ncclResult_t join(const join_t *mine, const ncclUniqueId *id, peer_t *peers, char *msg,
                         size_t size)
{
    int n = mine->nranks;
    uint32_t ip;
    uint16_t port;
    int32_t pid;
    char host[HOST_MAX], where[40];
    memcpy(&ip, id->internal + ID_ADDR, sizeof ip);
    memcpy(&port, id->internal + ID_PORT, sizeof port);
    memcpy(&pid, id->internal + ID_PID, sizeof pid);
    memcpy(host, id->internal + ID_HOST, HOST_MAX);
    host[HOST_MAX - 1] = 0;
    addr_str(ip, port, where, sizeof where);
    double deadline = mono_s() + init_timeout_s();
    int fd = tcp_connect(ip, port, deadline);
    if (fd < 0) {
        snprintf(msg, size, "ncclCommInitRankConfig: cannot reach pid %d on %s, which made the "
                            "unique id, at %s within %.0fs: %s (DDPC_EMU_NCCL_INIT_TIMEOUT; "
                            "DDPC_EMU_NCCL_ADDR sets the address ncclGetUniqueId writes)",
                 (int)pid, host, where, init_timeout_s(), strerror(errno));
        return ncclSystemError;
    }
    size_t bytes = sizeof(verdict_t) + (size_t)n * sizeof(peer_t);
    char *reply = calloc(1, bytes);
    if (!reply) {
        close(fd);
        snprintf(msg, size, "ncclCommInitRankConfig: out of memory");
        return ncclSystemError;
    }
    int io = io_all(fd, (void *)mine, sizeof *mine, 1, deadline, NULL);
    if (io == IO_OK)
        io = io_all(fd, reply, bytes, 0, deadline, NULL);
    close(fd);
    if (io != IO_OK) {
        free(reply);
        if (io == IO_TIMEOUT) {
            snprintf(msg, size, "ncclCommInitRankConfig: no answer within %.0fs from pid %d on "
                                "%s (%s), which made the unique id: the emulation gathers the "
                                "ranks at the id's creator, which must be a rank of the "
                                "communicator (DDPC_EMU_NCCL_INIT_TIMEOUT)", init_timeout_s(),
                     (int)pid, host, where);
            return ncclInvalidUsage;
        }
        snprintf(msg, size, "ncclCommInitRankConfig: the connection to pid %d on %s (%s), which "
                            "made the unique id, failed: %s", (int)pid, host, where,
                 io == IO_EOF ? "closed by it" : strerror(errno));
        return ncclSystemError;
    }
    verdict_t *v = (verdict_t *)reply;
    ncclResult_t r = (ncclResult_t)v->status;
    v->msg[sizeof v->msg - 1] = 0;
    if (r != ncclSuccess)
        snprintf(msg, size, "%s", v->msg);
    else
        memcpy(peers, reply + sizeof *v, (size_t)n * sizeof *peers);
    free(reply);
    return r;
}

/* the first message on each connection of a mesh: from rank to a lower one */
#define HELLO_MAGIC 0x68656c6fu
typedef struct {
    uint32_t magic;
    int32_t rank;
    unsigned char id[16];
} hello_t;

/* The mesh of rank me of n (peers[]: their listeners; lfd: mine): connect
 * to every lower rank, accept every higher one, by the init timeout.
 * fd[n] gets the connections (fd[me] = -1). */
static ncclResult_t mesh(int me, int n, const peer_t *peers, const unsigned char *id, int lfd,
                         int *fd, char *msg, size_t size)
{
    for (int j = 0; j < n; j++)
        fd[j] = -1;
    double deadline = mono_s() + init_timeout_s();
    hello_t h = {HELLO_MAGIC, me, {0}};
    memcpy(h.id, id, sizeof h.id);
    ncclResult_t r = ncclSuccess;
    for (int j = 0; j < me && r == ncclSuccess; j++) {
        char where[40];
        fd[j] = tcp_connect(peers[j].ip, peers[j].port, deadline);
        if (fd[j] < 0 || io_all(fd[j], &h, sizeof h, 1, deadline, NULL) != IO_OK) {
            snprintf(msg, size, "ncclCommInitRankConfig: rank %d cannot connect to rank %d (pid "
                                "%d on %s) at %s: %s (DDPC_EMU_NCCL_INIT_TIMEOUT)", me, j,
                     (int)peers[j].pid, peers[j].host,
                     addr_str(peers[j].ip, peers[j].port, where, sizeof where), strerror(errno));
            r = ncclSystemError;
        }
    }
    for (int got = me + 1; got < n && r == ncclSuccess;) {
        int s = tcp_accept(lfd, deadline);
        if (s < 0) {
            snprintf(msg, size, "ncclCommInitRankConfig: rank %d: %d of the %d higher rank(s) "
                                "connected within %.0fs: %s (DDPC_EMU_NCCL_INIT_TIMEOUT)", me,
                     got - me - 1, n - me - 1, init_timeout_s(), strerror(errno));
            r = ncclSystemError;
            break;
        }
        hello_t g;
        if (io_all(s, &g, sizeof g, 0, deadline, NULL) != IO_OK || g.magic != HELLO_MAGIC ||
            memcmp(g.id, id, sizeof g.id) || g.rank <= me || g.rank >= n || fd[g.rank] >= 0) {
            close(s); /* not one of this mesh */
            continue;
        }
        fd[g.rank] = s;
        got++;
    }
    if (r != ncclSuccess)
        for (int j = 0; j < n; j++)
            if (fd[j] >= 0)
                close(fd[j]), fd[j] = -1;
    return r;
}

static int check_config(const ncclConfig_t *cfg, const char *call)
{
    if (cfg && (cfg->magic != 0xcafebeef || cfg->size != sizeof(ncclConfig_t))) {
        emu_violation("%s: the config was not initialized with NCCL_CONFIG_INITIALIZER", call);
        return 0;
    }
    return 1;
}

/* A new communicator: rank of n, its connections fd[] and peers[] (both
 * taken), identity id. */
static struct ncclComm *comm_new(int rank, int n, int *fd, peer_t *peers,
                                 const unsigned char *id, int blocking)
{
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->magic = COMM_MAGIC;
    c->rank = rank;
    c->nranks = n;
    c->fd = fd;
    c->peer = peers;
    memcpy(c->id, id, sizeof c->id);
    pthread_mutex_init(&c->mu, NULL);
    c->device = emu_current_device();
    c->blocking = blocking;
    c->launch_rank = launch_rank(rank);
    c->hang_at = hook("DDPC_EMU_NCCL_HANG", c->launch_rank);
    c->fail_at = hook("DDPC_EMU_NCCL_FAIL", c->launch_rank);
    pthread_mutex_lock(&L);
    c->next = comms;
    comms = c;
    pthread_mutex_unlock(&L);
    return c;
}

static void close_all(int *fd, int n)
{
    for (int j = 0; j < n; j++)
        if (fd[j] >= 0)
            close(fd[j]), fd[j] = -1;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *cfg)
{
    if (!out)
        return ncclInvalidArgument;
    *out = NULL;
    if (!check_config(cfg, "ncclCommInitRankConfig"))
        return ncclInvalidArgument;
    uint32_t ver = 0;
    memcpy(&ver, id.internal + ID_VER, sizeof ver);
    if (memcmp(id.internal + ID_MARK, "ddpc-emu", 8) != 0 || ver != ID_VERSION) {
        set_last(NULL, "ncclCommInitRankConfig: the unique id is not one ncclGetUniqueId made");
        return ncclInvalidArgument;
    }
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        set_last(NULL, "ncclCommInitRankConfig: rank %d of %d", rank, nranks);
        return ncclInvalidArgument;
    }
    join_t mine = {JOIN_MAGIC, {0}, rank, nranks, {0}};
    memcpy(mine.nonce, id.internal + ID_NONCE, sizeof mine.nonce);
    int idfd = take_made(mine.nonce);
    if (nranks == 1 && idfd < 0) {
        int32_t pid;
        memcpy(&pid, id.internal + ID_PID, sizeof pid);
        set_last(NULL, "ncclCommInitRankConfig: a communicator of 1 rank from pid %d's unique "
                       "id: the emulation gathers the ranks at the id's creator, which must be "
                       "a rank of the communicator", (int)pid);
        return ncclInvalidUsage;
    }
    int *fd = calloc((size_t)nranks, sizeof *fd);
    peer_t *peers = calloc((size_t)nranks, sizeof *peers);
    int lfd = nranks > 1 ? tcp_listen(&mine.me.port) : -1;
    if (!fd || !peers || (nranks > 1 && lfd < 0)) {
        set_last(NULL, "ncclCommInitRankConfig: %s", !fd || !peers ? "out of memory"
                       : "cannot listen on a TCP port");
        if (lfd >= 0)
            close(lfd);
        if (idfd >= 0)
            close(idfd);
        free(fd), free(peers);
        return ncclSystemError;
    }
    mine.me.ip = host_ip();
    mine.me.pid = (int32_t)getpid();
    mine.me.device = emu_current_device();
    my_host(mine.me.host);
    ncclResult_t r = idfd >= 0 ? collect(idfd, &mine, peers, global_last, sizeof global_last)
                               : join(&mine, &id, peers, global_last, sizeof global_last);
    if (idfd >= 0)
        close(idfd);
    if (r == ncclSuccess)
        r = mesh(rank, nranks, peers, mine.nonce, lfd, fd, global_last, sizeof global_last);
    if (lfd >= 0)
        close(lfd);
    struct ncclComm *c = NULL;
    if (r == ncclSuccess) {
        fd[rank] = -1;
        c = comm_new(rank, nranks, fd, peers, mine.nonce,
                     !cfg || cfg->blocking == NCCL_CONFIG_UNDEF_INT || cfg->blocking != 0);
        if (!c) {
            close_all(fd, nranks);
            r = ncclSystemError;
        }
    }
    if (r != ncclSuccess) {
        free(fd), free(peers);
        return r;
    }
    *out = c;
    return in_progress(c);
}

/* what each rank of the parent says at a split */
typedef struct {
    int32_t color, key; /* color -1: none */
    peer_t me;          /* me.port: its listener for the new mesh */
} split_t;

/* The identity of the communicator of color that the split-th split of
 * parent id makes: the same on each of its ranks (FNV-1a). */
static void split_id(const unsigned char *parent, int split, int color, unsigned char *id)
{
    uint64_t h[2] = {1469598103934665603ull, 1099511628211ull * 31};
    for (int w = 0; w < 2; w++) {
        const unsigned char *p = parent;
        for (int i = 0; i < 16; i++)
            h[w] = (h[w] ^ p[i]) * 1099511628211ull;
        int32_t v[2] = {split, color};
        const unsigned char *q = (const unsigned char *)v;
        for (size_t i = 0; i < sizeof v; i++)
            h[w] = (h[w] ^ q[i]) * 1099511628211ull;
    }
    memcpy(id, h, 16);
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *cfg)
{
    if (newcomm)
        *newcomm = NULL;
    ncclResult_t r = check_comm(comm, "ncclCommSplit");
    if (r != ncclSuccess)
        return r;
    if (!newcomm) {
        set_last(comm, "ncclCommSplit: newcomm is NULL");
        return ncclInvalidArgument;
    }
    if (!check_config(cfg, "ncclCommSplit"))
        return ncclInvalidArgument;
    int inflight = __atomic_load_n(&comm->inflight, __ATOMIC_SEQ_CST);
    if (inflight > 0) {
        emu_violation("ncclCommSplit of a communicator with %d operation(s) in flight: its "
                      "connections are busy on a stream's thread; synchronize the streams first",
                      inflight);
        return ncclInvalidUsage;
    }
    /* a negative color other than NOCOLOR is refused here, after taking
       part as NOCOLOR, so that the other ranks' split still completes */
    int mcolor = color;
    if (color == NCCL_SPLIT_NOCOLOR || color < 0) {
        if (color != NCCL_SPLIT_NOCOLOR) {
            set_last(comm, "ncclCommSplit: color %d (a color is >= 0, or NCCL_SPLIT_NOCOLOR)",
                     color);
            r = ncclInvalidArgument;
        }
        mcolor = -1;
    }
    int n = comm->nranks, me = comm->rank;
    split_t mine = {mcolor, key, {0}};
    int lfd = mcolor >= 0 ? tcp_listen(&mine.me.port) : -1;
    if (mcolor >= 0 && lfd < 0) { /* take part as none: the color's others fail their mesh */
        set_last(comm, "ncclCommSplit: cannot listen on a TCP port: %s", strerror(errno));
        r = ncclSystemError;
        mine.color = -1;
    }
    mine.me.ip = host_ip();
    mine.me.pid = (int32_t)getpid();
    mine.me.device = emu_current_device();
    my_host(mine.me.host);
    /* every parent rank's split_t to every parent rank, over the parent's mesh */
    split_t *all = calloc((size_t)n, sizeof *all);
    xfer_t *x = calloc(2 * (size_t)n, sizeof *x);
    int rc = -1, nx = 0;
    if (all && x) {
        all[me] = mine;
        for (int j = 0; j < n; j++)
            if (j != me) {
                xfer(&x[nx++], j, 1, K_SPLIT, &all[me], sizeof *all);
                xfer(&x[nx++], j, 0, K_SPLIT, &all[j], sizeof *all);
            }
        pthread_mutex_lock(&comm->mu);
        int split = ++comm->splits;
        rc = xfer_all(comm, x, nx, "ncclCommSplit", split);
        pthread_mutex_unlock(&comm->mu);
    } else {
        set_last(comm, "ncclCommSplit: out of memory");
    }
    free(x);
    if (rc != 0 || r != ncclSuccess || mine.color < 0) {
        free(all);
        if (lfd >= 0)
            close(lfd);
        if (rc > 0) {
            set_last(comm, "ncclCommSplit: the communicator was aborted");
            return ncclInvalidUsage;
        }
        if (rc < 0) {
            ncclResult_t a = __atomic_load_n(&comm->async_err, __ATOMIC_SEQ_CST);
            return a != ncclSuccess ? a : ncclSystemError;
        }
        return r != ncclSuccess ? r : in_progress(comm);
    }
    /* the new communicator's ranks: by key, then parent rank */
    int *order = calloc((size_t)n, sizeof *order), size = 0, newrank = -1;
    for (int j = 0; order && j < n; j++) {
        if (all[j].color != mcolor)
            continue;
        int at = size++;
        while (at > 0 && all[order[at - 1]].key > all[j].key) {
            order[at] = order[at - 1];
            at--;
        }
        order[at] = j;
    }
    int *fd = calloc((size_t)size + 1, sizeof *fd);
    peer_t *peers = calloc((size_t)size + 1, sizeof *peers);
    if (!order || !fd || !peers) {
        free(order), free(fd), free(peers), free(all);
        close(lfd);
        set_last(comm, "ncclCommSplit: out of memory");
        return ncclSystemError;
    }
    for (int k = 0; k < size; k++) {
        peers[k] = all[order[k]].me;
        if (order[k] == me)
            newrank = k;
    }
    free(order), free(all);
    unsigned char id[16];
    split_id(comm->id, comm->splits, mcolor, id);
    if (dup_gpu(peers, size, comm->last, sizeof comm->last)) {
        snprintf(global_last, sizeof global_last, "%s", comm->last);
        r = ncclInvalidUsage;
    } else {
        r = mesh(newrank, size, peers, id, lfd, fd, comm->last, sizeof comm->last);
        if (r != ncclSuccess)
            snprintf(global_last, sizeof global_last, "%s", comm->last);
    }
    close(lfd);
    struct ncclComm *c = NULL;
    if (r == ncclSuccess) {
        int blocking = !cfg ? comm->blocking
                            : cfg->blocking == NCCL_CONFIG_UNDEF_INT || cfg->blocking != 0;
        c = comm_new(newrank, size, fd, peers, id, blocking);
        if (!c) {
            close_all(fd, size);
            r = ncclSystemError;
        }
    }
    if (r != ncclSuccess) {
        free(fd), free(peers);
        return r;
    }
    *newcomm = c;
    /* both answer ncclInProgress for some polls where non-blocking */
    ncclResult_t pr = in_progress(comm), cr = in_progress(c);
    return pr == ncclInProgress || cr == ncclInProgress ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank)
{
    return ncclCommInitRankConfig(out, nranks, id, rank, NULL);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err)
{
    if (!c || c->magic != COMM_MAGIC || !err)
        return ncclInvalidArgument;
    ncclResult_t a = __atomic_load_n(&c->async_err, __ATOMIC_SEQ_CST);
    if (a != ncclSuccess) {
        *err = a;
        return ncclSuccess;
    }
    int left = __atomic_load_n(&c->polls, __ATOMIC_SEQ_CST); /* the watchdog polls too */
    while (left > 0 && !__atomic_compare_exchange_n(&c->polls, &left, left - 1, 0,
                                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        ;
    if (left > 0) {
        *err = ncclInProgress;
        return ncclSuccess;
    }
    /* finalize is in progress until what was enqueued has ended */
    if (c->finalized && __atomic_load_n(&c->inflight, __ATOMIC_SEQ_CST) > 0) {
        *err = ncclInProgress;
        return ncclSuccess;
    }
    *err = ncclSuccess;
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c)
{
    ncclResult_t r = check_comm(c, "ncclCommFinalize");
    if (r != ncclSuccess)
        return r;
    c->finalized = 1;
    if (c->blocking) {
        while (__atomic_load_n(&c->inflight, __ATOMIC_SEQ_CST) > 0 &&
               !__atomic_load_n(&c->async_err, __ATOMIC_SEQ_CST))
            usleep(100);
        return __atomic_load_n(&c->async_err, __ATOMIC_SEQ_CST);
    }
    in_progress(c);
    return ncclInProgress;
}

static void unlink_comm(struct ncclComm *c)
{
    pthread_mutex_lock(&L);
    for (struct ncclComm **pp = &comms; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    pthread_mutex_unlock(&L);
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    if (!c)
        return ncclSuccess;
    if (c->magic != COMM_MAGIC) {
        emu_violation("ncclCommDestroy: %p is not a live NCCL communicator", (void *)c);
        return ncclInvalidArgument;
    }
    if (!c->aborted && __atomic_load_n(&c->inflight, __ATOMIC_SEQ_CST) > 0) {
        emu_violation("ncclCommDestroy with %d collective(s) in flight: finalize first, or abort",
                      c->inflight);
        return ncclInvalidUsage;
    }
    unlink_comm(c);
    c->magic = 0; /* the memory stays: a stream op of an aborted comm may still read it */
    pthread_mutex_lock(&c->mu);
    close_all(c->fd, c->nranks);
    pthread_mutex_unlock(&c->mu);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
    if (!c)
        return ncclSuccess;
    if (c->magic != COMM_MAGIC) {
        emu_violation("ncclCommAbort: %p is not a live NCCL communicator", (void *)c);
        return ncclInvalidArgument;
    }
    /* what is in flight sees the flag, or its sockets end, within a poll
       (50 ms); the peers see their connections close */
    __atomic_store_n(&c->aborted, 1, __ATOMIC_SEQ_CST);
    for (int j = 0; j < c->nranks; j++)
        if (c->fd[j] >= 0)
            shutdown(c->fd[j], SHUT_RDWR);
    unlink_comm(c);
    c->magic = 0;
    pthread_mutex_lock(&c->mu);
    close_all(c->fd, c->nranks);
    pthread_mutex_unlock(&c->mu);
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t c, int *n)
{
    if (!c || c->magic != COMM_MAGIC || !n)
        return ncclInvalidArgument;
    *n = c->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t c, int *r)
{
    if (!c || c->magic != COMM_MAGIC || !r)
        return ncclInvalidArgument;
    *r = c->rank;
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t c, int *d)
{
    if (!c || c->magic != COMM_MAGIC || !d)
        return ncclInvalidArgument;
    *d = c->device;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t c)
{
    if (c && c->magic == COMM_MAGIC && c->last[0])
        return c->last;
    return global_last;
}
