/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_TCP_INT_H
#define PD_BROKER_PD_TCP_INT_H

/*
 * Internals of the TCP transport (pd_tcp.c: instance, write pool,
 * completion queue; pd_tcp_io.c: wire codec and socket waits with
 * deadlines; pd_tcp_tx.c: peers and lane threads; pd_tcp_direct.c: the
 * owner's own sends on an idle lane; pd_tcp_rx.c: listener and connection
 * threads).
 *
 * Locks (never two held at once, so there is no lock order to keep):
 *   t->cq_lock   t->cq: the write pool (cq.free) and the completion queue
 *                (pd_cplq.h); the completion eventfd is written/read under
 *                it, so it is readable exactly while completions are pending.
 *   p->lock      per peer: err, failed, outstanding, live, each lane's
 *                pending list, load and direct state (idle, direct, armed;
 *                and the lane's socket and rbuf while direct is set).
 * A write descriptor (struct pd_tcp_node) is always in exactly one place:
 * t->cq.free, a lane's pending list (p->lock), a lane's window (that lane's
 * thread only), a lane's direct pointer (p->lock), a local list of the
 * thread moving it, t->cq.done, or a peer's reserved peer-completion
 * pointer.
 */
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

#include "pd_compiler.h"
#include "pd_cplq.h"
#include "pd_log.h"
#include "pd_sys.h"
#include "pd_tcp.h"

struct pd_tcp_node {
	struct pd_cplq_node c;         /* first: completion (c.cookie is x.cookie), list link */
	struct pd_xfer x;
	uint8_t hdr[PD_TCP_HDR_SIZE];  /* encoded DATA header */
};

/* Lists of write descriptors are struct pd_cplq_fifo of their c. */
static inline struct pd_tcp_node *pd_tcp_node_of(struct pd_cplq_node *c)
{
	return c ? pd_container_of(c, struct pd_tcp_node, c) : NULL;
}

/* The node after n in its list, or NULL. */
static inline struct pd_tcp_node *pd_tcp_node_next(const struct pd_tcp_node *n)
{
	return pd_tcp_node_of(n->c.next);
}

static inline void pd_tcp_fifo_append(struct pd_cplq_fifo *f, struct pd_tcp_node *n)
{
	pd_cplq_fifo_append(f, &n->c);
}

static inline struct pd_tcp_node *pd_tcp_fifo_pop(struct pd_cplq_fifo *f)
{
	return pd_tcp_node_of(pd_cplq_fifo_pop(f));
}

struct pd_tcp_peer;

struct pd_tcp_lane {
	struct pd_tcp_peer *p;
	uint32_t idx;
	int wake_fd;                   /* eventfd: post and disconnect -> lane */
	pthread_t thr;
	int started;                   /* owner thread */
	/* p->lock */
	struct pd_cplq_fifo pending;
	uint64_t load;                 /* bytes pending or in the window */
	int idle;                      /* the lane thread waits with nothing to send or read:
					* the owner may send one frame itself */
	int armed;                     /* fd is in t->ep: the owner reads direct's ACK */
	struct pd_tcp_node *direct;    /* the frame the owner sent itself, not acknowledged */
	uint32_t direct_off;           /* bytes of direct's frame sent */
	uint64_t direct_ns;            /* when direct was sent */
	/* lane thread only (rbuf, rlen and fd: the owner's too while direct is set) */
	int fd;
	struct pd_cplq_fifo win;       /* sent or being sent, oldest first */
	struct pd_tcp_node *next_send; /* first node of win with unsent bytes */
	uint32_t send_off;             /* bytes of next_send's frame already sent */
	uint32_t rlen;                 /* bytes in rbuf */
	uint64_t progress_ns;          /* last byte sent or ACK received */
	uint8_t rbuf[PD_TCP_HDR_SIZE * 64];
};

struct pd_tcp_peer {
	struct pd_tcp *t;
	uint32_t id;
	uint32_t nlanes;
	uint64_t token;
	struct sockaddr_storage addr;
	socklen_t addrlen;
	struct pd_tcp_node *peer_cpl;  /* reserved for the PD_CPL_PEER completion */
	pthread_mutex_t lock;
	/* p->lock */
	int err;                       /* 0 while usable; then the first error */
	int failed;                    /* err came from a lane: peer completion due */
	uint32_t outstanding;          /* writes posted, not yet completed */
	uint32_t live;                 /* lane threads not yet finished */
	struct pd_tcp_lane lane[];
};

#define PD_TCP_CONN_PENDING 0u   /* accepted, no HELLO yet */
#define PD_TCP_CONN_UP      1u   /* HELLO accepted: a lane of c->peer */
#define PD_TCP_CONN_CLOSING 2u   /* evicted, fenced or ending */

/* An accepted connection (pd_tcp_conns.c). */
struct pd_tcp_conn {
	struct pd_tcp *t;
	pthread_t thr;
	_Atomic int done;              /* set last by the connection thread */
	/* t->conns_lock */
	struct pd_tcp_conn *next;
	int fd;                        /* closed (-1) by its thread only */
	uint32_t peer;                 /* the lane accept_peer gave; set before UP */
	uint32_t state;                /* PD_TCP_CONN_* */
	uint64_t since_ns;             /* accepted at */
};

struct pd_tcp_counters {
#define PD_TCP_STAT_ATOMIC(n) _Atomic uint64_t n;
	PD_TCP_STAT_FIELDS(PD_TCP_STAT_ATOMIC)
#undef PD_TCP_STAT_ATOMIC
};

struct pd_tcp {
	struct pd_tcp_opts o;
	struct pd_tcp_counters st;
	_Atomic uint64_t log_last_ns;  /* rate limit of per-connection logs */
	/* owner thread */
	struct pd_tcp_peer **peers;    /* o.max_peers entries, NULL = free */
	int stopped;
	/* t->cq_lock */
	pthread_mutex_t cq_lock;
	struct pd_cplq cq;             /* completions and the write pool */
	struct pd_tcp_node *nodes;     /* the pool's storage */
	uint32_t nnodes;
	int ep;                        /* epoll: cq.fd and the armed lanes' sockets (the event fd) */
	_Atomic uint32_t narmed;       /* lanes in ep */
	/* receive side; set up by the owner before the listener starts */
	int lfd;
	int stop_fd;                   /* eventfd, written once at stop, never read */
	int reap_fd;                   /* eventfd: a connection thread finished */
	_Atomic int port;
	pthread_t lthr;
	int lstarted;
	/* t->conns_lock (pd_tcp_conns.c) */
	pthread_mutex_t conns_lock;
	struct pd_tcp_conn *conns;
	uint32_t nconns;
	uint32_t npending;             /* of them, PENDING */
};

/* What interrupts a wait besides the socket: wake_fd readable -> check(arg)
 * says whether to carry on (0) or give up (-errno). */
struct pd_tcp_wait {
	int wake_fd;
	uint64_t idle_ns;              /* != 0: also give up after this long without progress */
	int (*check)(void *arg);
	void *arg;
};

#define PD_TCP_STAT_INC(t, n, v) pd_stat_add(&(t)->st.n, (v))

/* pd_tcp.c */
int pd_tcp_pool_get(struct pd_tcp *t, uint32_t n, struct pd_cplq_fifo *out);
void pd_tcp_pool_put(struct pd_tcp *t, struct pd_cplq_fifo *f);
void pd_tcp_cq_push(struct pd_tcp *t, struct pd_cplq_fifo *f);
int pd_tcp_log_ok(struct pd_tcp *t);
void pd_tcp_rx_stop(struct pd_tcp *t);

/* pd_tcp_conns.c */
/* Listener: a data thread main_fn(c) for fd: 0; -EBUSY max_conns running
 * (fd is the caller's to close), or a thread error. */
int pd_tcp_conns_add(struct pd_tcp *t, int fd, void *(*main_fn)(void *));
/* Join finished connection threads (all of them with all = 1). */
void pd_tcp_conns_reap(struct pd_tcp *t, int all);
/* c's HELLO was accepted as lane: 0, or -ECONNABORTED (evicted meanwhile). */
int pd_tcp_conn_up(struct pd_tcp_conn *c, uint32_t lane);
/* c's thread is done with its socket: closed. */
void pd_tcp_conn_close(struct pd_tcp_conn *c);

/* pd_tcp_tx.c */
void pd_tcp_peers_stop(struct pd_tcp *t);
/* The lane is done with its acknowledged writes done (p->lock not held):
 * counted, then queued as completions. */
void pd_tcp_lane_done(struct pd_tcp_lane *l, struct pd_cplq_fifo *done);

/* pd_tcp_direct.c: a frame posted to an idle lane is sent by the owner
 * itself, and its ACK read by the owner when t->ep says it is there: no
 * hand-off to the lane thread and no wake-up of it either way. */
/* An idle lane that may take n directly, or NULL (p->lock held). */
struct pd_tcp_lane *pd_tcp_direct_lane(struct pd_tcp_peer *p, const struct pd_tcp_node *n);
/* Send n on l (p->lock held): 1 when the lane thread must carry on
 * (a partial send, EAGAIN, an error), 0 when n is sent and armed. */
int pd_tcp_direct_send_locked(struct pd_tcp_lane *l, struct pd_tcp_node *n);
/* Lane thread (p->lock held): the owner's frame, back in the window. */
void pd_tcp_direct_take_locked(struct pd_tcp_lane *l);
/* Owner: read the ACKs t->ep has ready; completions go to t->cq. */
void pd_tcp_direct_poll(struct pd_tcp *t);
/* The ACK in buf answers n: 0 and *status, or -EPROTO. */
int pd_tcp_ack_match(const uint8_t *buf, const struct pd_tcp_node *n, int32_t *status);

/* pd_tcp_io.c */
int pd_tcp_sock_tune(int fd);
/* poll() timeout for a deadline: -1 for none (0), 0 once passed. */
int pd_tcp_wait_ms(uint64_t deadline_ns);
/* deadline_ns 0: none. 0 when fd is ready; -ETIMEDOUT; -errno from check or poll. */
int pd_tcp_io_wait(int fd, short events, uint64_t deadline_ns, const struct pd_tcp_wait *w);
int pd_tcp_io_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns,
		       const struct pd_tcp_wait *w);
/* EOF before len bytes: -ECONNRESET. */
int pd_tcp_io_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns,
		       const struct pd_tcp_wait *w);

/* Per-connection logs: rate limited per instance, safe from data threads. */
#define PD_TCP_LOG_RL(t, lvl, ...)                                                     \
	do {                                                                           \
		if (PD_LOG_##lvl <= pd_log_level && pd_tcp_log_ok(t))                  \
			pd_log_emit(PD_LOG_##lvl, "tcp", __FILE__, __LINE__, __VA_ARGS__); \
	} while (0)

#endif
