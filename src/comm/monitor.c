/* SPDX-License-Identifier: BSD-3-Clause */
/* monitor.c: the side channel that names the rank at fault. A TCP star to
 * rank 0, set up at ddpc_init through the key exchange, independent of MPI
 * and NCCL (which may be what is stuck). Every rank's monitor thread sends a
 * heartbeat each second with its progress on every communicator (the
 * collectives it entered and completed); rank 0's keeps the table, with the
 * time of each rank's last heartbeat and whether its connection closed.
 *
 * On a timeout, the rank that timed out asks rank 0 for the table and says
 * which ranks never entered the operation, their last entered and completed
 * operations, their host, and whether they look alive (heartbeat), stopped
 * (no heartbeat: SIGSTOP, a hung node) or gone (connection closed: exited,
 * killed). Rank 0's own timeout message is the job's summary; when rank 0 is
 * the one gone, the others say so.
 *
 * DDPC_DEBUG=detail: before each collective every rank sends (communicator,
 * sequence, operation, count, dtype, root) to rank 0, which compares them
 * and answers all at once: a mismatch fails every rank with both sides'
 * values instead of a deadlock or a silent wrong result.
 *
 * Messages are fixed-size structs in the host's byte order (the ranks of a
 * job share an architecture); a job token from rank 0 keeps strangers out.
 * DDPC_MONITOR=0 turns it off; a rank that cannot reach rank 0 warns and
 * trains on without it. */
#define _GNU_SOURCE
#include "config.h"
#include "comm_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MOD "monitor"
#define MON_MAGIC 0x4d504444u /* "DDPM" */
#define BEAT_S 1.0            /* heartbeat period */
#define STALE_S 2.0           /* no heartbeat for this long (two periods): not running */
#define ASK_S 3.0             /* how long a timed-out rank waits for rank 0's table */
#define ADDR_LEN 256

enum { M_HELLO = 1, M_BEAT, M_ASK, M_TABLE, M_CHECK, M_VERDICT };

typedef struct {
    uint64_t entered, completed; /* collectives issued, completed (sequence numbers below) */
} mon_prog_t;

typedef struct {
    uint32_t magic, type;
    int32_t rank, comm;
    uint64_t token;
    uint64_t seq;     /* ASK, CHECK, VERDICT: the operation */
    uint32_t op, dt;  /* CHECK */
    uint64_t count;
    int32_t root;
    int32_t verdict;  /* VERDICT: 0 the same everywhere, else a mismatch (text) */
    uint32_t nrows;   /* TABLE: rows that follow */
    uint32_t pad;
    mon_prog_t prog[MON_MAX_COMMS]; /* BEAT */
    char host[64];    /* HELLO */
    char text[512];   /* VERDICT */
} mon_msg_t;

typedef struct {
    int32_t state;    /* ROW_* */
    float age;        /* seconds since the last heartbeat, or since it closed */
    uint64_t entered, completed;
    char host[64];
} mon_row_t;

enum { ROW_ALIVE = 0, ROW_STALE, ROW_CLOSED, ROW_NEVER };

struct ddpc_monitor {
    ddpc_t rt;
    int rank, size;
    uint64_t token;
    pthread_t thread;
    int started;
    int wake[2];                  /* self-pipe: stop */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* rank 0 */
    int lfd;
    int *fd;                      /* (size,) the ranks' connections, -1 */
    double *beat, *closed_at;     /* (size,) rank 0's clock */
    int *closed;
    mon_prog_t (*prog)[MON_MAX_COMMS];
    char (*host)[64];
    struct {                      /* DDPC_DEBUG=detail: the collective being checked */
        uint64_t seq;
        int have;
        mon_msg_t *call;          /* (size,) */
        unsigned char *got;       /* (size,) */
        uint64_t decided;         /* verdicts given so far (for the local waiter) */
        int verdict;
        char text[512];
    } chk[MON_MAX_COMMS];
    /* ranks > 0 */
    int fd0;
    int gone0;
    double gone0_at;
    pthread_mutex_t send_mu;
    int have_reply;               /* TABLE or VERDICT arrived */
    mon_msg_t reply;
    mon_row_t *rows;              /* (size,) */
};

/* ------------------------------------------------------------------ i/o */
static int write_full(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

static int read_full(int fd, void *p, size_t n)
{
    char *b = p;
    while (n) {
        ssize_t k = recv(fd, b, n, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

static void msg_init(struct ddpc_monitor *m, mon_msg_t *x, uint32_t type)
{
    memset(x, 0, sizeof *x);
    x->magic = MON_MAGIC;
    x->type = type;
    x->rank = m->rank;
    x->token = m->token;
}

/* With m->mu held (so that no communicator is freed meanwhile): this rank's
 * progress on every registered communicator */
static void my_progress(struct ddpc_monitor *m, mon_prog_t *p)
{
    ddpc_t rt = m->rt;
    for (int i = 0; i < MON_MAX_COMMS; i++) {
        struct ddpc_comm *c = __atomic_load_n(&rt->comms[i], __ATOMIC_ACQUIRE);
        p[i].entered = c ? __atomic_load_n(&c->seq, __ATOMIC_RELAXED) : 0;
        p[i].completed = c ? __atomic_load_n(&c->completed, __ATOMIC_RELAXED) : 0;
    }
}

/* ------------------------------------------------------------------ rank 0 */
/* With m->mu held: the table for communicator `comm` into rows. */
static void table_locked(struct ddpc_monitor *m, int comm, mon_row_t *rows)
{
    double now = ddpc_now();
    my_progress(m, m->prog[0]);
    m->beat[0] = now;
    for (int r = 0; r < m->size; r++) {
        mon_row_t *w = &rows[r];
        memset(w, 0, sizeof *w);
        snprintf(w->host, sizeof w->host, "%s", m->host[r]);
        w->entered = m->prog[r][comm].entered;
        w->completed = m->prog[r][comm].completed;
        if (m->closed[r]) {
            w->state = ROW_CLOSED;
            w->age = (float)(now - m->closed_at[r]);
        } else if (m->fd[r] < 0 && r != 0) {
            w->state = ROW_NEVER;
        } else {
            w->age = (float)(now - m->beat[r]);
            w->state = w->age > STALE_S ? ROW_STALE : ROW_ALIVE;
        }
    }
}

static const char *op_name(uint32_t op)
{
    return op <= OP_WATCH ? comm_op_names[op] : "?";
}

/* With m->mu held: every rank's CHECK of communicator k arrived: compare
 * them with rank 0's and answer everyone. */
static void decide_locked(struct ddpc_monitor *m, int k)
{
    const mon_msg_t *a = &m->chk[k].call[0];
    char text[512] = "";
    for (int r = 1; r < m->size && !text[0]; r++) {
        const mon_msg_t *b = &m->chk[k].call[r];
        if (b->op != a->op || b->count != a->count || b->dt != a->dt ||
            (a->op == OP_BCAST && b->root != a->root))
            snprintf(text, sizeof text,
                     "collective #%llu differs between the ranks: rank %d (%s) called %s of %llu "
                     "x %s, root %d, where rank 0 (%s) called %s of %llu x %s, root %d",
                     (unsigned long long)a->seq, r, m->host[r], op_name(b->op),
                     (unsigned long long)b->count, ddpc_dtype_name((ddpc_dtype_t)b->dt),
                     b->root, m->host[0], op_name(a->op), (unsigned long long)a->count,
                     ddpc_dtype_name((ddpc_dtype_t)a->dt), a->root);
    }
    mon_msg_t v;
    msg_init(m, &v, M_VERDICT);
    v.comm = k;
    v.seq = a->seq;
    v.verdict = text[0] != 0;
    snprintf(v.text, sizeof v.text, "%s", text);
    for (int r = 1; r < m->size; r++)
        if (m->fd[r] >= 0 && write_full(m->fd[r], &v, sizeof v)) {
            close(m->fd[r]);
            m->fd[r] = -1;
            m->closed[r] = 1;
            m->closed_at[r] = ddpc_now();
        }
    m->chk[k].verdict = v.verdict;
    snprintf(m->chk[k].text, sizeof m->chk[k].text, "%s", text);
    m->chk[k].have = 0;
    memset(m->chk[k].got, 0, (size_t)m->size);
    m->chk[k].decided++;
    pthread_cond_broadcast(&m->cv);
}

/* With m->mu held: rank r's (or rank 0's own) CHECK. */
static void check_in_locked(struct ddpc_monitor *m, const mon_msg_t *x)
{
    int k = x->comm;
    if (k < 0 || k >= MON_MAX_COMMS || x->rank < 0 || x->rank >= m->size)
        return;
    if (!m->chk[k].have) {
        m->chk[k].have = 1;
        m->chk[k].seq = x->seq;
    }
    m->chk[k].call[x->rank] = *x;
    m->chk[k].got[x->rank] = 1;
    int all = 1;
    for (int r = 0; r < m->size && all; r++)
        all = m->chk[k].got[r];
    if (all)
        decide_locked(m, k);
}

static void drop_rank_locked(struct ddpc_monitor *m, int r)
{
    close(m->fd[r]);
    m->fd[r] = -1;
    m->closed[r] = 1;
    m->closed_at[r] = ddpc_now();
}

/* One message from connection fd (rank r, or -1 before its HELLO). */
static void root_read(struct ddpc_monitor *m, int fd, int r, int *pending, int slot)
{
    mon_msg_t x;
    if (read_full(fd, &x, sizeof x) || x.magic != MON_MAGIC || x.token != m->token) {
        pthread_mutex_lock(&m->mu);
        if (r >= 0)
            drop_rank_locked(m, r);
        else {
            close(fd);
            pending[slot] = -1;
        }
        pthread_mutex_unlock(&m->mu);
        return;
    }
    pthread_mutex_lock(&m->mu);
    if (r < 0) { /* the first message of a new connection */
        if (x.type == M_HELLO && x.rank > 0 && x.rank < m->size && m->fd[x.rank] < 0) {
            m->fd[x.rank] = fd;
            snprintf(m->host[x.rank], sizeof m->host[x.rank], "%s", x.host);
            m->beat[x.rank] = ddpc_now();
            m->closed[x.rank] = 0;
        } else {
            close(fd);
        }
        pending[slot] = -1;
    } else if (x.type == M_BEAT) {
        memcpy(m->prog[r], x.prog, sizeof x.prog);
        m->beat[r] = ddpc_now();
    } else if (x.type == M_ASK && x.comm >= 0 && x.comm < MON_MAX_COMMS) {
        mon_msg_t t;
        msg_init(m, &t, M_TABLE);
        t.comm = x.comm;
        t.seq = x.seq;
        t.nrows = (uint32_t)m->size;
        mon_row_t *rows = calloc((size_t)m->size, sizeof *rows);
        if (rows) {
            table_locked(m, x.comm, rows);
            if (write_full(fd, &t, sizeof t) ||
                write_full(fd, rows, (size_t)m->size * sizeof *rows))
                drop_rank_locked(m, r);
            free(rows);
        }
    } else if (x.type == M_CHECK) {
        check_in_locked(m, &x);
    }
    pthread_mutex_unlock(&m->mu);
}

static void *root_main(void *arg)
{
    struct ddpc_monitor *m = arg;
    int npending = 64, pending[64];
    for (int i = 0; i < npending; i++)
        pending[i] = -1;
    struct pollfd *pf = calloc((size_t)m->size + (size_t)npending + 2, sizeof *pf);
    int *who = calloc((size_t)m->size + (size_t)npending + 2, sizeof *who);
    if (!pf || !who) {
        free(pf);
        free(who);
        return NULL;
    }
    for (;;) {
        int n = 0;
        pf[n].fd = m->wake[0], pf[n].events = POLLIN, who[n++] = -3;
        pf[n].fd = m->lfd, pf[n].events = POLLIN, who[n++] = -2;
        pthread_mutex_lock(&m->mu);
        for (int r = 1; r < m->size; r++)
            if (m->fd[r] >= 0)
                pf[n].fd = m->fd[r], pf[n].events = POLLIN, who[n++] = r;
        pthread_mutex_unlock(&m->mu);
        for (int i = 0; i < npending; i++)
            if (pending[i] >= 0)
                pf[n].fd = pending[i], pf[n].events = POLLIN, who[n++] = -10 - i;
        int k = poll(pf, (nfds_t)n, 1000);
        if (k < 0 && errno != EINTR)
            break;
        if (k <= 0)
            continue;
        if (pf[0].revents)
            break; /* stop */
        for (int i = 1; i < n; i++) {
            if (!pf[i].revents)
                continue;
            if (who[i] == -2) {
                int fd = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC);
                /* a peer that sends half a message, or stops reading, must not
                   hold this thread: its reads and writes give up after 2 s */
                struct timeval tv = {2, 0};
                if (fd >= 0) {
                    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
                    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
                }
                int slot = -1;
                for (int j = 0; j < npending && slot < 0; j++)
                    if (pending[j] < 0)
                        slot = j;
                if (fd >= 0 && slot >= 0)
                    pending[slot] = fd;
                else if (fd >= 0)
                    close(fd);
            } else if (who[i] <= -10) {
                root_read(m, pf[i].fd, -1, pending, -10 - who[i]);
            } else {
                root_read(m, pf[i].fd, who[i], pending, -1);
            }
        }
    }
    for (int i = 0; i < npending; i++)
        if (pending[i] >= 0)
            close(pending[i]);
    free(pf);
    free(who);
    return NULL;
}

/* ------------------------------------------------------------------ ranks > 0 */
static void *rank_main(void *arg)
{
    struct ddpc_monitor *m = arg;
    double next = 0;
    for (;;) {
        double now = ddpc_now();
        if (now >= next && !m->gone0) {
            mon_msg_t b;
            msg_init(m, &b, M_BEAT);
            pthread_mutex_lock(&m->mu);
            my_progress(m, b.prog);
            pthread_mutex_unlock(&m->mu);
            pthread_mutex_lock(&m->send_mu);
            int bad = write_full(m->fd0, &b, sizeof b);
            pthread_mutex_unlock(&m->send_mu);
            if (bad) {
                pthread_mutex_lock(&m->mu);
                if (!m->gone0)
                    m->gone0 = 1, m->gone0_at = ddpc_now();
                pthread_cond_broadcast(&m->cv);
                pthread_mutex_unlock(&m->mu);
            }
            next = now + BEAT_S;
        }
        struct pollfd pf[2] = {{m->wake[0], POLLIN, 0}, {m->gone0 ? -1 : m->fd0, POLLIN, 0}};
        int wait_ms = (int)((next - ddpc_now()) * 1000) + 1;
        int k = poll(pf, 2, wait_ms < 1 ? 1 : wait_ms);
        if (k < 0 && errno != EINTR)
            break;
        if (k <= 0)
            continue;
        if (pf[0].revents)
            break;
        if (pf[1].revents) {
            mon_msg_t x;
            int bad = read_full(m->fd0, &x, sizeof x) || x.magic != MON_MAGIC ||
                      x.token != m->token;
            mon_row_t *rows = NULL;
            if (!bad && x.type == M_TABLE) {
                rows = calloc((size_t)m->size, sizeof *rows);
                bad = !rows || x.nrows != (uint32_t)m->size ||
                      read_full(m->fd0, rows, (size_t)m->size * sizeof *rows);
            }
            pthread_mutex_lock(&m->mu);
            if (bad) {
                if (!m->gone0)
                    m->gone0 = 1, m->gone0_at = ddpc_now();
                free(rows);
            } else if (x.type == M_TABLE || x.type == M_VERDICT) {
                m->reply = x;
                free(m->rows);
                m->rows = rows;
                m->have_reply = 1;
            } else {
                free(rows);
            }
            pthread_cond_broadcast(&m->cv);
            pthread_mutex_unlock(&m->mu);
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------ setup */
/* "token port addr1,addr2,...": rank 0's non-loopback IPv4 addresses, then
 * the loopback (ranks on rank 0's node) */
static void root_address(int port, uint64_t token, char *buf, size_t n)
{
    int k = snprintf(buf, n, "%016llx %d ", (unsigned long long)token, port);
    struct ifaddrs *ifa = NULL, *i;
    if (getifaddrs(&ifa) == 0) {
        for (i = ifa; i; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK) ||
                !(i->ifa_flags & IFF_UP))
                continue;
            char a[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, a, sizeof a);
            if (k > 0 && (size_t)k + strlen(a) + 24 < n)
                k += snprintf(buf + k, n - (size_t)k, "%s,", a);
        }
        freeifaddrs(ifa);
    }
    if (k > 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, "127.0.0.1");
}

/* connect to addr:port within timeout_s; the socket or -1 */
static int dial(const char *addr, int port, double timeout_s)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    if (rc < 0 && errno == EINPROGRESS) {
        struct pollfd pf = {fd, POLLOUT, 0};
        int err = 0;
        socklen_t el = sizeof err;
        rc = poll(&pf, 1, (int)(timeout_s * 1000)) == 1 &&
                     getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0
                 ? 0
                 : -1;
    }
    if (rc < 0) {
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fl);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void monitor_free(struct ddpc_monitor *m)
{
    if (!m)
        return;
    if (m->lfd >= 0)
        close(m->lfd);
    if (m->fd0 >= 0)
        close(m->fd0);
    if (m->fd)
        for (int r = 0; r < m->size; r++)
            if (m->fd[r] >= 0)
                close(m->fd[r]);
    for (int k = 0; k < MON_MAX_COMMS; k++) {
        free(m->chk[k].call);
        free(m->chk[k].got);
    }
    if (m->wake[0] >= 0)
        close(m->wake[0]);
    if (m->wake[1] >= 0)
        close(m->wake[1]);
    free(m->fd);
    free(m->beat);
    free(m->closed_at);
    free(m->closed);
    free(m->prog);
    free(m->host);
    free(m->rows);
    pthread_mutex_destroy(&m->mu);
    pthread_mutex_destroy(&m->send_mu);
    pthread_cond_destroy(&m->cv);
    free(m);
}

void ddpc_monitor_forget(struct ddpc_comm *c)
{
    ddpc_t rt = c->rt;
    if (c->id < 0 || !rt)
        return;
    struct ddpc_monitor *m = rt->mon;
    if (m)
        pthread_mutex_lock(&m->mu);
    __atomic_store_n(&rt->comms[c->id], NULL, __ATOMIC_RELEASE);
    if (m)
        pthread_mutex_unlock(&m->mu);
}

ddpc_status_t ddpc_monitor_start(ddpc_t rt)
{
    long on = 1;
    ddpc_status_t st = ddpc_env_long(rt, "DDPC_MONITOR", 0, 1, &on);
    if (st)
        return st;
    const char *dbg = getenv("DDPC_DEBUG");
    if (dbg && *dbg && strcmp(dbg, "off") && strcmp(dbg, "detail"))
        return ddpc_err(rt, DDPC_ERR_INVALID, "init",
                        "DDPC_DEBUG=\"%s\": expected off or detail", dbg);
    const int size = rt->world.size, rank = rt->world.rank;
    if (!on || size < 2)
        return DDPC_OK;
    struct ddpc_monitor *m = calloc(1, sizeof *m);
    if (!m)
        return ddpc_err(rt, DDPC_ERR_NOMEM, MOD, "cannot allocate the side channel");
    m->rt = rt;
    m->rank = rank;
    m->size = size;
    m->lfd = m->fd0 = -1;
    m->wake[0] = m->wake[1] = -1;
    pthread_mutex_init(&m->mu, NULL);
    pthread_mutex_init(&m->send_mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    char mine[ADDR_LEN] = "", why[160] = "";
    int ok = pipe2(m->wake, O_CLOEXEC) == 0;
    if (ok && rank == 0) {
        struct sockaddr_in sa;
        memset(&sa, 0, sizeof sa);
        sa.sin_family = AF_INET;
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
        socklen_t sl = sizeof sa;
        m->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ok = m->lfd >= 0 && bind(m->lfd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
             listen(m->lfd, size < 4096 ? size : 4096) == 0 &&
             getsockname(m->lfd, (struct sockaddr *)&sa, &sl) == 0;
        uint64_t t = (uint64_t)getpid() << 32 ^ (uint64_t)(ddpc_now() * 1e9);
        m->token = t ? t : 1;
        if (ok)
            root_address(ntohs(sa.sin_port), m->token, mine, sizeof mine);
        else
            snprintf(why, sizeof why, "cannot listen on a TCP port: %s", strerror(errno));
        m->fd = malloc((size_t)size * sizeof *m->fd);
        m->beat = calloc((size_t)size, sizeof *m->beat);
        m->closed_at = calloc((size_t)size, sizeof *m->closed_at);
        m->closed = calloc((size_t)size, sizeof *m->closed);
        m->prog = calloc((size_t)size, sizeof *m->prog);
        m->host = calloc((size_t)size, sizeof *m->host);
        for (int k = 0; k < MON_MAX_COMMS; k++) {
            m->chk[k].call = calloc((size_t)size, sizeof *m->chk[k].call);
            m->chk[k].got = calloc((size_t)size, 1);
            ok = ok && m->chk[k].call && m->chk[k].got;
        }
        ok = ok && m->fd && m->beat && m->closed_at && m->closed && m->prog && m->host;
        if (m->fd)
            for (int r = 0; r < size; r++)
                m->fd[r] = -1;
        if (m->host)
            snprintf(m->host[0], sizeof m->host[0], "%s", rt->world.host);
    }
    if (!ok)
        mine[0] = 0; /* rank 0 says "none": every rank goes on without */
    /* rank 0's address to everyone (collective: every rank takes part) */
    char *all = malloc((size_t)size * ADDR_LEN);
    if (!all)
        st = ddpc_err(rt, DDPC_ERR_NOMEM, MOD, "cannot allocate the address exchange");
    else
        st = ddpc_kvs_allgather(rt, mine, all, ADDR_LEN);
    if (st) {
        free(all);
        monitor_free(m);
        return st;
    }
    char addr0[ADDR_LEN];
    memcpy(addr0, all, ADDR_LEN);
    addr0[ADDR_LEN - 1] = 0;
    free(all);
    if (rank != 0 && addr0[0]) {
        unsigned long long tok = 0;
        int port = 0, used = 0;
        ok = sscanf(addr0, "%llx %d %n", &tok, &port, &used) == 2;
        m->token = tok;
        m->rows = calloc((size_t)size, sizeof *m->rows);
        ok = ok && m->rows;
        char *list = addr0 + used, *save = NULL;
        for (char *a = strtok_r(list, ",", &save); ok && a && m->fd0 < 0;
             a = strtok_r(NULL, ",", &save))
            m->fd0 = dial(a, port, 2.0);
        if (ok && m->fd0 >= 0) {
            mon_msg_t h;
            msg_init(m, &h, M_HELLO);
            snprintf(h.host, sizeof h.host, "%s", rt->world.host);
            ok = write_full(m->fd0, &h, sizeof h) == 0;
        } else if (ok) {
            ok = 0;
            snprintf(why, sizeof why, "no address of rank 0 (%s) answered", addr0 + used);
        }
    } else if (rank != 0) {
        ok = 0;
        snprintf(why, sizeof why, "rank 0 has none");
    }
    if (ok)
        ok = pthread_create(&m->thread, NULL, rank == 0 ? root_main : rank_main, m) == 0;
    if (!ok) {
        ddpc_log(rt, DDPC_LOG_WARN,
                 "monitor: no side channel to rank 0 (%s): a timeout will not name the ranks "
                 "that are missing", why[0] ? why : "setup failed");
        monitor_free(m);
        return DDPC_OK;
    }
    m->started = 1;
    rt->mon = m;
    rt->check_collectives = dbg && !strcmp(dbg, "detail");
    return DDPC_OK;
}

void ddpc_monitor_stop(ddpc_t rt)
{
    struct ddpc_monitor *m = rt ? rt->mon : NULL;
    if (!m)
        return;
    if (m->started && m->rank != 0) { /* the last report: where it stopped */
        mon_msg_t b;
        msg_init(m, &b, M_BEAT);
        pthread_mutex_lock(&m->mu);
        int gone0 = m->gone0; /* the thread sets it under mu (tests/tsan.sh) */
        my_progress(m, b.prog);
        pthread_mutex_unlock(&m->mu);
        if (!gone0) {
            pthread_mutex_lock(&m->send_mu);
            write_full(m->fd0, &b, sizeof b);
            pthread_mutex_unlock(&m->send_mu);
        }
    }
    if (m->started) {
        char b = 1;
        if (write(m->wake[1], &b, 1) < 0) { /* the thread also stops on EOF */
        }
        pthread_join(m->thread, NULL);
    }
    rt->mon = NULL;
    monitor_free(m);
}

/* ------------------------------------------------------------------ queries */
/* The table of communicator c from rank 0 into rows ((size,)): 0, or -1 (no
 * side channel, rank 0 gone or not answering: why says which). */
static int ask_table(struct ddpc_monitor *m, int comm, mon_row_t *rows, char *why, size_t n)
{
    if (m->rank == 0) {
        pthread_mutex_lock(&m->mu);
        table_locked(m, comm, rows);
        pthread_mutex_unlock(&m->mu);
        return 0;
    }
    pthread_mutex_lock(&m->mu);
    if (m->gone0) {
        snprintf(why, n, "rank 0, which keeps the ranks' progress, is gone: its side channel "
                 "closed %.1fs ago (exited, killed, or its node is down)", ddpc_now() - m->gone0_at);
        pthread_mutex_unlock(&m->mu);
        return -1;
    }
    m->have_reply = 0;
    pthread_mutex_unlock(&m->mu);
    mon_msg_t q;
    msg_init(m, &q, M_ASK);
    q.comm = comm;
    pthread_mutex_lock(&m->send_mu);
    int bad = write_full(m->fd0, &q, sizeof q);
    pthread_mutex_unlock(&m->send_mu);
    struct timespec ts;
    comm_deadline(&ts, ASK_S);
    pthread_mutex_lock(&m->mu);
    while (!bad && !m->gone0 && !(m->have_reply && m->reply.type == M_TABLE))
        if (pthread_cond_timedwait(&m->cv, &m->mu, &ts) == ETIMEDOUT)
            break;
    int got = m->have_reply && m->reply.type == M_TABLE && m->rows;
    if (got)
        memcpy(rows, m->rows, (size_t)m->size * sizeof *rows);
    else if (m->gone0 || bad)
        snprintf(why, n, "rank 0, which keeps the ranks' progress, is gone: its side channel "
                 "closed (exited, killed, or its node is down)");
    else
        snprintf(why, n, "rank 0 did not answer within %gs (its process is stopped or "
                 "overloaded)", ASK_S);
    m->have_reply = 0;
    pthread_mutex_unlock(&m->mu);
    return got ? 0 : -1;
}

static int row_says(const mon_row_t *w, char *s, size_t n)
{
    switch (w->state) {
    case ROW_CLOSED:
        return snprintf(s, n, "its side channel closed %.1fs ago: exited or killed", w->age);
    case ROW_NEVER:
        return snprintf(s, n, "never reached the side channel");
    case ROW_STALE:
        return snprintf(s, n, "no heartbeat for %.1fs: stopped (SIGSTOP, a debugger), hung "
                        "hard, or its node is gone", w->age);
    default:
        return snprintf(s, n, "alive (heartbeat %.1fs ago): still computing, or blocked "
                        "elsewhere", w->age);
    }
}

/* The side channel's table of c into *rows (freed by the caller), its
 * monitor in *m: 1; 0 with the reason in buf (rank 0 unreachable); -1
 * without a side channel for c. */
static int table_of(struct ddpc_comm *c, struct ddpc_monitor **m, mon_row_t **rows, char *buf,
                    size_t n)
{
    *m = c && c->rt ? c->rt->mon : NULL;
    if (!*m || n == 0 || c->id < 0 || c->id >= MON_MAX_COMMS)
        return -1;
    if (!(*rows = calloc((size_t)(*m)->size, sizeof **rows)))
        return -1;
    char why[256];
    if (ask_table(*m, c->id, *rows, why, sizeof why)) {
        snprintf(buf, n, "%s", why);
        free(*rows);
        return 0;
    }
    return 1;
}

/* Transfer i of w is the first with its peer. */
static int first_of_peer(const struct ddpc_work *w, int i)
{
    for (int j = 0; j < i; j++)
        if (w->p2p[j].peer == w->p2p[i].peer)
            return 0;
    return 1;
}

/* "rank R on HOST: <row_says>; its last report: entered #E, completed #D" */
static int row_line(const mon_row_t *w, int r, char *buf, size_t n)
{
    char e[32] = "none", d[32] = "none", st[160];
    if (w->entered)
        snprintf(e, sizeof e, "#%llu", (unsigned long long)w->entered - 1);
    if (w->completed)
        snprintf(d, sizeof d, "#%llu", (unsigned long long)w->completed - 1);
    row_says(w, st, sizeof st);
    return snprintf(buf, n, "rank %d on %s: %s; its last report: entered %s, completed %s", r,
                    w->host[0] ? w->host : "?", st, e, d);
}

int ddpc_monitor_explain_peers(struct ddpc_comm *c, const struct ddpc_work *w, char *buf,
                               size_t n)
{
    if (w->kind != OP_P2P)
        return -1;
    struct ddpc_monitor *m;
    mon_row_t *rows;
    int got = table_of(c, &m, &rows, buf, n);
    if (got <= 0)
        return got;
    int npeers = 0, shown = 0;
    for (int i = 0; i < w->np; i++)
        npeers += first_of_peer(w, i);
    size_t k = (size_t)snprintf(buf, n, "the peer%s: ", npeers > 1 ? "s" : "");
    for (int i = 0; i < w->np && k < n; i++) {
        int p = w->p2p[i].peer;
        int r = c->members ? c->members[p] : p; /* the rows are by world rank */
        if (!first_of_peer(w, i) || r < 0 || r >= m->size)
            continue;
        k += (size_t)snprintf(buf + k, n - k, "%s", shown++ ? "; " : "");
        if (k < n)
            k += (size_t)row_line(&rows[r], r, buf + k, n - k);
    }
    free(rows);
    return 0;
}

int ddpc_monitor_explain(struct ddpc_comm *c, uint64_t seq, char *buf, size_t n)
{
    struct ddpc_monitor *m;
    mon_row_t *rows;
    int got = table_of(c, &m, &rows, buf, n);
    if (got <= 0)
        return got;
    /* the rows of c's ranks only (rows are by world rank) */
    for (int r = 0; c->members && r < m->size; r++) {
        int in = 0;
        for (int i = 0; i < c->size && !in; i++)
            in = c->members[i] == r;
        if (!in)
            rows[r].entered = rows[r].completed = UINT64_MAX, rows[r].state = ROW_ALIVE;
    }
    int missing = 0, late = 0, quiet = 0;
    for (int r = 0; r < m->size; r++) {
        if (rows[r].entered == UINT64_MAX)
            continue;
        missing += rows[r].entered <= seq;
        late += rows[r].entered > seq && rows[r].completed <= seq;
        quiet += rows[r].entered > seq && rows[r].state != ROW_ALIVE;
    }
    size_t k = 0;
    const int show = 8;
    /* the ranks that never entered it, then those that did but are not running */
    for (int pass = 0; pass < 2; pass++) {
        int count = pass ? quiet : missing, shown = 0;
        if (!count)
            continue;
        if (pass == 0)
            k += (size_t)snprintf(buf + k, n - k, "%d rank(s) never entered #%llu: ", count,
                                  (unsigned long long)seq);
        else
            k += (size_t)snprintf(buf + k, n - k, "%s%d rank(s) that entered #%llu are not "
                                  "running: ", k ? "; " : "", count, (unsigned long long)seq);
        for (int r = 0; r < m->size && k < n; r++) {
            const mon_row_t *w = &rows[r];
            if (w->entered == UINT64_MAX ||
                (pass == 0 ? w->entered > seq : w->entered <= seq || w->state == ROW_ALIVE))
                continue;
            if (shown++ == show) {
                k += (size_t)snprintf(buf + k, n - k, "; and %d more", count - show);
                break;
            }
            k += (size_t)snprintf(buf + k, n - k, "%s", shown > 1 ? "; " : "");
            if (k < n)
                k += (size_t)row_line(w, r, buf + k, n - k);
        }
    }
    if (!missing && !quiet && k < n)
        snprintf(buf + k, n - k, "every rank entered #%llu and is running; %d have not "
                 "completed it (a stalled transport, or a peer that failed inside it)",
                 (unsigned long long)seq, late);
    free(rows);
    return 0;
}

ddpc_status_t ddpc_monitor_check(struct ddpc_comm *c, uint64_t seq, int op, size_t count,
                                 ddpc_dtype_t dt, int root)
{
    ddpc_t rt = c->rt;
    struct ddpc_monitor *m = rt->mon;
    /* rank 0 waits for every rank of the world: communicators over some
       ranks are not checked (doc/debugging.md) */
    if (!m || !rt->check_collectives || c->id < 0 || c->id >= MON_MAX_COMMS || c->members)
        return DDPC_OK;
    mon_msg_t x;
    msg_init(m, &x, M_CHECK);
    x.comm = c->id;
    x.seq = seq;
    x.op = (uint32_t)op;
    x.count = count;
    x.dt = (uint32_t)dt;
    x.root = root;
    comm_clock_t k; /* a suspended job's stop does not count */
    comm_clock_start(&k);
    int verdict = -1, timed_out = 0;
    char text[512] = "";
    if (m->rank == 0) {
        pthread_mutex_lock(&m->mu);
        uint64_t before = m->chk[c->id].decided;
        check_in_locked(m, &x);
        while (m->chk[c->id].decided == before && !timed_out)
            timed_out = comm_clock_wait(&m->cv, &m->mu, &k, rt->cfg.timeout_s);
        if (m->chk[c->id].decided != before) {
            verdict = m->chk[c->id].verdict;
            snprintf(text, sizeof text, "%s", m->chk[c->id].text);
        }
        pthread_mutex_unlock(&m->mu);
    } else {
        pthread_mutex_lock(&m->mu);
        m->have_reply = 0;
        pthread_mutex_unlock(&m->mu);
        pthread_mutex_lock(&m->send_mu);
        int bad = write_full(m->fd0, &x, sizeof x);
        pthread_mutex_unlock(&m->send_mu);
        pthread_mutex_lock(&m->mu);
        while (!bad && !m->gone0 && !(m->have_reply && m->reply.type == M_VERDICT) && !timed_out)
            timed_out = comm_clock_wait(&m->cv, &m->mu, &k, rt->cfg.timeout_s);
        if (m->have_reply && m->reply.type == M_VERDICT) {
            verdict = m->reply.verdict;
            snprintf(text, sizeof text, "%s", m->reply.text);
        }
        m->have_reply = 0;
        pthread_mutex_unlock(&m->mu);
    }
    char what[160];
    struct ddpc_work w = {.kind = (op_kind_t)op, .count = count, .dt = dt, .root = root, .seq = seq};
    comm_describe(&w, what, sizeof what);
    if (verdict == 0)
        return DDPC_OK;
    if (verdict > 0)
        return ddpc_err(rt, DDPC_ERR_MISMATCH, "comm", "%s: DDPC_DEBUG=detail: %s", what, text);
    char ex[768] = "";
    ddpc_monitor_explain(c, seq, ex, sizeof ex);
    return ddpc_err(rt, DDPC_ERR_TIMEOUT, "comm",
                    "%s: DDPC_DEBUG=detail: the ranks did not all reach it within %gs%s%s", what,
                    rt->cfg.timeout_s, ex[0] ? ": " : "", ex);
}
