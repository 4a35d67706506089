/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_RDMA_INT_H
#define PD_BROKER_PD_RDMA_INT_H

/*
 * Internals of the RDMA transport:
 *   pd_rdma.c        instance (device, PD, MRs, channels), write pool,
 *                    completion queue, stats
 *   pd_rdma_post.c   the data path: bounds, address translation, WR
 *                    chains, selective signalling, work completion -> cookies
 *   pd_rdma_cm.c     connections (rdma_cm, both sides), peer failure and
 *                    teardown, connect/disconnect/listen
 *   pd_rdma_thr.c    the data thread: CQ, CM and async events, deadlines
 *   pd_rdma_verbs.c  every verbs and rdma_cm call, behind struct
 *                    pd_rdma_verbs (the unit tests' fake replaces it)
 *
 * Locks, always taken in this order (never the reverse):
 *   r->lock     the cm side: rdma_cm ids, QP and CQ creation/destruction,
 *               the peers table (written by the owner under it), accepted
 *               connections, the listener. The data thread holds it while
 *               it handles events, and acks every event before releasing
 *               it; so whoever holds it may destroy ids, QPs and CQs
 *               (rdma_destroy_id, ibv_destroy_cq and ibv_destroy_qp wait
 *               for unacked events of their object: none can exist).
 *   p->lock     per peer: the data path. err/failed/closing, pending,
 *               each QP's in-flight FIFO, sequence and signal counters;
 *               every ibv_post_send of the peer happens under it.
 *   r->cq_lock  the write pool and the completion queue (and its eventfd).
 *
 * A write descriptor (struct pd_rdma_node) is always in exactly one place:
 * r->cq.free, a caller's local list, p->pending, one QP's in-flight FIFO, r->cq,
 * or a peer's reserved peer-completion pointer.
 */
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/socket.h>

#include "pd_compiler.h"
#include "pd_cplq.h"
#include "pd_log.h"
#include "pd_rdma.h"
#include "pd_sys.h"

/* ---- the verbs seam ------------------------------------------------------------ */

/*
 * Every verbs and rdma_cm call the transport makes, already normalised to
 * the house convention (>= 0 or -errno; NULL-returning calls take an out
 * pointer). pd_rdma_verbs_real (pd_rdma_verbs.c) is the only place that
 * calls libibverbs/librdmacm; tests pass a fake that injects faults the real
 * stack cannot produce on demand. The get_* calls are non-blocking (their
 * fds are O_NONBLOCK) and return -EAGAIN when nothing is pending.
 */
struct pd_rdma_verbs {
	int (*get_devices)(struct ibv_context ***list, int *n);
	void (*free_devices)(struct ibv_context **list);
	const char *(*dev_name)(struct ibv_context *ctx);
	int (*alloc_pd)(struct ibv_context *ctx, struct ibv_pd **out);
	void (*dealloc_pd)(struct ibv_pd *pd);
	int (*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access, struct ibv_mr **out);
	void (*dereg_mr)(struct ibv_mr *mr);
	int (*create_comp_channel)(struct ibv_context *ctx, struct ibv_comp_channel **out);
	void (*destroy_comp_channel)(struct ibv_comp_channel *ch);
	int (*create_cq)(struct ibv_context *ctx, int cqe, void *cq_ctx,
			 struct ibv_comp_channel *ch, struct ibv_cq **out);
	void (*destroy_cq)(struct ibv_cq *cq);
	int (*req_notify_cq)(struct ibv_cq *cq);
	int (*get_cq_event)(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_ctx);
	void (*ack_cq_events)(struct ibv_cq *cq, unsigned int n);
	int (*poll_cq)(struct ibv_cq *cq, int n, struct ibv_wc *wc);
	int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
	int (*get_async_event)(struct ibv_context *ctx, struct ibv_async_event *ev);
	void (*ack_async_event)(struct ibv_async_event *ev);
	int (*create_event_channel)(struct rdma_event_channel **out);
	void (*destroy_event_channel)(struct rdma_event_channel *ch);
	int (*create_id)(struct rdma_event_channel *ch, void *ctx, struct rdma_cm_id **out);
	void (*destroy_id)(struct rdma_cm_id *id);
	int (*bind_addr)(struct rdma_cm_id *id, struct sockaddr *a);
	int (*listen)(struct rdma_cm_id *id, int backlog);
	int (*resolve_addr)(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst,
			    int timeout_ms);
	int (*resolve_route)(struct rdma_cm_id *id, int timeout_ms);
	int (*set_ack_timeout)(struct rdma_cm_id *id, uint8_t timeout);
	int (*create_qp)(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *a);
	void (*destroy_qp)(struct rdma_cm_id *id);
	int (*connect)(struct rdma_cm_id *id, struct rdma_conn_param *p);
	int (*accept)(struct rdma_cm_id *id, struct rdma_conn_param *p);
	int (*reject)(struct rdma_cm_id *id, const void *priv, uint8_t len);
	int (*disconnect)(struct rdma_cm_id *id);
	int (*get_cm_event)(struct rdma_event_channel *ch, struct rdma_cm_event **ev);
	void (*ack_cm_event)(struct rdma_cm_event *ev);
};

extern const struct pd_rdma_verbs pd_rdma_verbs_real;

/** pd_rdma_create() with another verbs table (tests). @v borrowed for the
 * instance's life. */
int pd_rdma_create_verbs(const struct pd_rdma_opts *o, const struct pd_rdma_verbs *v,
			 struct pd_rdma **out);

/* ---- objects ------------------------------------------------------------------------ */

/* What an rdma_cm id's context and a QP's qp_context point at. */
#define PD_RDMA_CTX_LISTEN 1u
#define PD_RDMA_CTX_QP     2u          /* a QP of one of our peers (sending side) */
#define PD_RDMA_CTX_CONN   3u          /* an accepted QP (receiving side) */

struct pd_rdma_ctx {
	uint32_t type;
};

struct pd_rdma_node {
	struct pd_cplq_node c;         /* first: the completion {cookie, peer, kind, status} */
	struct pd_xfer x;
	uint64_t seq;                  /* QP sequence number once posted */
};

static inline struct pd_rdma_node *pd_rdma_node_of(struct pd_cplq_node *n)
{
	return n ? pd_container_of(n, struct pd_rdma_node, c) : NULL;
}

static inline void pd_rdma_fifo_append(struct pd_cplq_fifo *f, struct pd_rdma_node *n)
{
	pd_cplq_fifo_append(f, &n->c);
}

static inline struct pd_rdma_node *pd_rdma_fifo_pop(struct pd_cplq_fifo *f)
{
	return pd_rdma_node_of(pd_cplq_fifo_pop(f));
}

struct pd_rdma_peer;

struct pd_rdma_qp {
	struct pd_rdma_ctx hdr;        /* PD_RDMA_CTX_QP; first member */
	struct pd_rdma_peer *p;
	uint32_t idx;
	/* r->lock */
	uint32_t connecting;           /* rdma_connect issued */
	struct rdma_cm_id *id;
	struct ibv_qp *qp;             /* NULL until created and after destroyed;
					* posted to under p->lock */
	/* p->lock */
	uint32_t up;                   /* ESTABLISHED */
	uint32_t inl;                  /* inline bytes the QP granted */
	uint32_t unsig;                /* WRs posted unsignalled since the last signalled one */
	uint64_t next_seq;
	struct pd_cplq_fifo inflight;  /* posted, not yet covered by a polled WC; oldest first */
	struct ibv_send_wr *wr;        /* chain scratch, sq_depth entries */
	struct ibv_sge *sge;
};

struct pd_rdma_peer {
	struct pd_rdma *r;
	uint32_t id;
	uint32_t nqps;
	struct pd_rdma_remote rem;
	struct sockaddr_storage dst;
	/* r->lock */
	struct ibv_cq *cq;             /* shared by the peer's QPs; cq_context = the peer */
	uint64_t deadline_ns;          /* connect deadline; 0 once every QP is up */
	uint32_t reaped;               /* QPs, CQ and ids destroyed */
	pthread_mutex_t lock;
	pthread_cond_t drained;        /* p->lock: inflight reached 0, or err set */
	/* p->lock */
	struct pd_rdma_node *peer_cpl; /* reserved at connect for the PEER completion */
	int err;                       /* 0 while usable, then the first error */
	uint32_t failed;               /* err came from the transport: PEER completion due */
	uint32_t closing;              /* pd_rdma_disconnect running: no new writes */
	uint32_t nup;                  /* QPs established */
	uint32_t outstanding;          /* writes accepted, not completed */
	uint32_t inflight;             /* of which posted */
	uint32_t rr;                   /* first QP tried by the next schedule */
	struct pd_cplq_fifo pending;   /* accepted, not posted yet */
	struct pd_rdma_qp qp[];
};

struct pd_rdma_conn {
	struct pd_rdma_ctx hdr;        /* PD_RDMA_CTX_CONN; first member */
	struct pd_rdma_conn *next;
	struct rdma_cm_id *id;
	struct ibv_qp *qp;             /* NULL once destroyed */
	uint32_t peer;
	uint32_t est;
};

struct pd_rdma_counters {
#define PD_RDMA_STAT_ATOMIC(n) _Atomic uint64_t n;
	PD_RDMA_STAT_FIELDS(PD_RDMA_STAT_ATOMIC)
#undef PD_RDMA_STAT_ATOMIC
};

struct pd_rdma {
	struct pd_rdma_opts o;
	const struct pd_rdma_verbs *v;
	struct pd_rdma_counters st;
	/* immutable between create and destroy */
	struct ibv_context **devs;     /* held: pins librdmacm's device contexts */
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *recv_mr;        /* NULL: send only */
	struct ibv_mr *send_mr;        /* NULL: receive only */
	struct ibv_comp_channel *comp;
	struct rdma_event_channel *cm;
	struct sockaddr_storage src;   /* opts.addr, source of our connections */
	int has_src;
	char dev[64];
	int wake_fd;                   /* eventfd: wakes the data thread */
	pthread_t thr;
	int started;                   /* owner */
	int stopped;                   /* owner */
	_Atomic int need_reap;         /* a peer failed: the data thread reaps it */
	_Atomic int port;
	int backoff;                   /* data thread only: a channel failed, pause */
	/* r->lock */
	pthread_mutex_t lock;
	int stopping;
	struct pd_rdma_peer **peers;   /* max_peers entries; NULL = free; written by the owner */
	struct pd_rdma_ctx listen_ctx;
	struct rdma_cm_id *listen_id;
	struct ibv_cq *rx_cq;          /* for accepted QPs, which never post */
	struct pd_rdma_conn *conns;
	uint32_t nconns;
	/* r->cq_lock */
	pthread_mutex_t cq_lock;
	struct pd_cplq cq;             /* completions, the descriptor pool, the eventfd */
	struct pd_rdma_node *nodes;    /* the pool's storage */
	uint32_t nnodes;
};

#define PD_RDMA_STAT_INC(r, n, v) pd_stat_add(&(r)->st.n, (v))

/* wr_id of a WR: QP index in the top 8 bits, the QP's sequence number below. */
#define PD_RDMA_WRID_SEQ_BITS 56
#define PD_RDMA_WRID_SEQ_MASK ((UINT64_C(1) << PD_RDMA_WRID_SEQ_BITS) - 1)

static inline uint64_t pd_rdma_wr_id(uint32_t qp, uint64_t seq)
{
	return (uint64_t)qp << PD_RDMA_WRID_SEQ_BITS | (seq & PD_RDMA_WRID_SEQ_MASK);
}

/* The only place a (slot) becomes a remote address. No bounds check: the
 * caller (pd_rdma_xfer_check) has done it. */
static inline uint64_t pd_rdma_slot_addr(const struct pd_rdma_remote *rem, uint32_t slot)
{
	return rem->base + (uint64_t)slot * rem->slot_size;
}

/* Our mutexes are default ones used by the book: a failure is a bug. */

/* pd_rdma.c */
int pd_rdma_pool_get(struct pd_rdma *r, uint32_t n, struct pd_cplq_fifo *out);
void pd_rdma_pool_put(struct pd_rdma *r, struct pd_cplq_fifo *f);
void pd_rdma_cq_push(struct pd_rdma *r, struct pd_cplq_fifo *f);
void pd_rdma_wake(struct pd_rdma *r);
int pd_rdma_addr_parse(const char *host, uint16_t port, struct sockaddr_storage *ss);
struct pd_rdma_peer *pd_rdma_peer_find(const struct pd_rdma *r, uint32_t id, uint32_t *slot);

/* pd_rdma_post.c (p->lock held unless said otherwise) */
/* Bounds of one write against the peer and the send arena; no lock. */
int pd_rdma_xfer_check(const struct pd_rdma *r, const struct pd_rdma_remote *rem,
		       const struct pd_xfer *x);
/* Post pending writes while the QPs have room; < 0: a post failed (the
 * caller fails the peer with it). */
int pd_rdma_sched(struct pd_rdma_peer *p);
/* Move the writes covered by @wc to @done. @return 0, or the error the
 * peer must fail with (already recorded in p->err). */
int pd_rdma_wc_apply(struct pd_rdma_peer *p, const struct ibv_wc *wc, struct pd_cplq_fifo *done);
int pd_rdma_wc_errno(enum ibv_wc_status s);
/* Record @err as the peer's failure (first one wins). @return 1 when it is
 * new (the caller makes sure the data thread reaps the peer). */
int pd_rdma_peer_fail_locked(struct pd_rdma_peer *p, int err);
/* Every pending and in-flight write of the peer, with status p->err, into
 * @done; the peer completion too when failed. */
void pd_rdma_peer_collect(struct pd_rdma_peer *p, struct pd_cplq_fifo *done);

/* pd_rdma_cm.c (r->lock held) */
/* Handle one rdma_cm event. @return an id to destroy once the event is
 * acked, or NULL. */
struct rdma_cm_id *pd_rdma_cm_event(struct pd_rdma *r, struct rdma_cm_event *ev);
/* Fail the peer (if not yet) and make sure it gets reaped. */
void pd_rdma_peer_fail(struct pd_rdma *r, struct pd_rdma_peer *p, int err);
/* Destroy the peer's QPs, CQ and ids, then complete everything it had.
 * Idempotent. */
void pd_rdma_peer_reap(struct pd_rdma *r, struct pd_rdma_peer *p);
void pd_rdma_conns_close(struct pd_rdma *r);
/* Owner: remove every peer without draining (writes -> -ECONNABORTED). */
void pd_rdma_peers_abort(struct pd_rdma *r);

/* pd_rdma_thr.c */
int pd_rdma_thread_start(struct pd_rdma *r);
void pd_rdma_thread_stop(struct pd_rdma *r);

/* Test hook (tests/rdma): destroy every accepted QP without disconnecting,
 * as a crashed receiver would leave them. Owner thread. */
void pd_rdma_debug_kill_conns(struct pd_rdma *r);

#endif
