/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_RDMA_H
#define PD_BROKER_PD_RDMA_H

/*
 * RDMA data-plane transport: RC queue pairs
 * set up with rdma_cm, RDMA WRITE from the sender's staging slots straight
 * into the receiver's granted recv slots. Same shape as pd_tcp.h, so the
 * broker can use either per peer: connect, post, poll completions (eventfd),
 * disconnect, stats.
 *
 * ---- Memory ---------------------------------------------------------------
 * pd_rdma_create() opens one device (opts.dev by name, else the device that
 * owns opts.addr), allocates one protection domain and registers two memory
 * regions, once, for the instance's life (never per transfer):
 *   recv arena  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE: peers
 *               write here. Its rkey and base go into our Hello.
 *   send arena  local access only: the staging slots writes are read from.
 * Nothing else of the segment (slot headers, rings, the index) is
 * registered, so a peer can never write metadata.
 *
 * ---- What the control plane exchanges (Hello) -------------------------------
 * rdma_cm does the QP rendezvous (GIDs, QPNs, PSNs) by address, so of the
 * Hello's RDMA fields only these are used (struct pd_msg_hello):
 *   xport[i] = "rdma", addr[i] = "<ip>:<port>" of pd_rdma_listen() (IPv6 as
 *                     "[addr]:port")
 *   rdma_rkey  = pd_rdma_local_info().rkey   (recv arena)
 *   rdma_base  = pd_rdma_local_info().base   (address of recv slot 0)
 *   recv_slots, slot_size: the recv pool geometry (already in Hello)
 *   rdma_gid   = empty (0 bytes), rdma_qpn = 0: reserved, not needed.
 * The sender passes them back as struct pd_rdma_remote in pd_rdma_connect().
 * The token (rem.token) travels in the rdma_cm connect request's private
 * data, so the receiver's ops->accept_peer can tell which peer a QP belongs
 * to and refuse strangers, as pd_tcp's HELLO token does.
 *
 * Connect request private data (PD_RDMA_CM_REQ_LEN = 24 bytes, every field
 * little-endian, within RC's 56-byte limit): u32 magic "PDKR", u16 version
 * (1), u16 QP index, u32 QPs of the peer, u32 reserved (0), u64 token.
 * Reject private data (12 bytes): u32 magic, u16 version, u16 reserved,
 * i32 status (-errno). Both are built and parsed by code, never cast.
 *
 * ---- Writes ------------------------------------------------------------------
 * pd_rdma_post() queues writes {cookie, src, len, slot, gen}. Each is checked
 * before anything is posted: slot < rem.nslots, len <= rem.slot_size, and
 * [src, src + len) inside the registered send arena; else -EINVAL and
 * nothing is queued (all or nothing). (slot, gen) become a remote address
 * only here: rem.base + slot * rem.slot_size. gen is not sent (an RDMA WRITE
 * carries no header); it is the caller's bookkeeping, and the receiver
 * checks the grant when the control plane's PutDone arrives.
 *
 * Writes are spread over the peer's QPs and posted as one chain of linked
 * work requests per QP per call (one ibv_post_send). Selective signalling:
 * a WR is signalled when signal_interval WRs have gone unsignalled on that
 * QP, and the last WR of every chain always is, so every posted WR is
 * followed by a signalled one and its completion is never left waiting. An
 * RC send queue completes in order, so the work completion of a signalled
 * WR completes every earlier WR of that QP too: completions map back to
 * cookies through a per-QP FIFO (wr_id = QP index and sequence number, not
 * a pointer). A send-queue slot is counted used from the post until the
 * completion that covers it is polled, unsignalled WRs included, so the
 * send queue (sq_depth) can never overflow; writes beyond what the QPs have
 * room for wait in the peer's queue and are posted by the data thread as
 * completions free room. Writes up to max_inline bytes go inline.
 *
 * Completions {peer, cookie, status} go to one queue drained by
 * pd_rdma_poll(); pd_rdma_event_fd() is readable exactly while that queue
 * is not empty (level-triggered, as pd_tcp's). status 0: the bytes are in
 * the peer's slot (RC: the responder acknowledged them). < 0: the write may
 * or may not have landed; the grant is spoiled.
 *
 * ---- Failure -----------------------------------------------------------------
 * A work completion with an error, a failed ibv_post_send, an asynchronous
 * QP or CQ error, or a connection event that ends a QP (rejected,
 * unreachable, disconnected by the peer, device removed, connect timeout)
 * fails the whole peer, as a failed lane fails a pd_tcp peer: the data
 * thread destroys all of its QPs (which stops the HCA reading our staging
 * slots), its CQ and cm ids; then every write of the peer not yet completed
 * completes with the first error (-EACCES for a remote access error such as
 * a bad rkey, -ETIMEDOUT when the peer stopped answering, -ECONNRESET when
 * it disconnected, -ECONNREFUSED, -EHOSTUNREACH, ...), and after the last
 * of them one PD_CPL_PEER completion {peer, cookie 0, same status} is
 * queued: when the control thread sees it, nothing of that peer is
 * outstanding. A failed peer accepts no more writes (-ENOTCONN): the control
 * thread calls pd_rdma_disconnect() and may connect again, which builds new
 * QPs (there is no automatic reconnect).
 *
 * pd_rdma_disconnect() is the requested end: no new writes; writes not yet
 * posted complete with -ECONNABORTED at once; writes posted are given up to
 * connect_timeout_ms to complete normally (drain), the rest complete with
 * -ECONNABORTED; then the QPs, CQ and ids are destroyed. No peer completion
 * is queued for it (unless the peer had failed before).
 *
 * Every write posted and accepted gets exactly one completion; every
 * pd_rdma_connect() that returned 0 gets at most one peer completion.
 *
 * ---- Receiving -----------------------------------------------------------------
 * pd_rdma_listen() binds an rdma_cm listener. Each connect request is
 * checked (private data magic and version, the device, max_conns, then
 * ops->accept_peer with the token), given an RC QP that never posts
 * anything and accepted, or rejected with a status the sender sees as its
 * peer error. RDMA WRITEs then land in the recv arena without involving this
 * side's CPU; the receiver learns of them from the control plane (PutDone).
 * A receive connection that ends is destroyed and counted; nothing is
 * reported (as in pd_tcp, the sender side reports failures).
 *
 * ---- Threads ---------------------------------------------------------------------
 * One data thread per instance. It sleeps in poll() on the completion
 * channel, the rdma_cm event channel, the device's async event fd and a wake
 * eventfd, with a timeout only while a connect deadline is pending: no busy
 * polling. CQ events: ibv_get_cq_event, ibv_ack_cq_events,
 * ibv_req_notify_cq, then ibv_poll_cq until empty (re-armed before the
 * drain, so no completion is missed). It runs with every signal blocked and
 * is stopped with the eventfd and joined, never cancelled.
 *
 * All pd_rdma_* functions are called from one thread, the owner (the
 * broker's control thread), except pd_rdma_event_fd(), pd_rdma_port(),
 * pd_rdma_local_info() and pd_rdma_get_stats(), which any thread may call.
 * ops->accept_peer runs on the data thread. Nothing allocates on the data
 * path: write descriptors come from a pool sized at create.
 *
 * The device's async event fd is the process's (librdmacm shares one
 * verbs context per device): run one pd_rdma instance per device per
 * process. The broker has one.
 *
 * ---- Addresses ---------------------------------------------------------------------
 * Numeric IPv4 or IPv6 only ("10.0.0.1", "fe80::1"): a name lookup could
 * block without bound; the control plane resolves names.
 */
#include <stddef.h>
#include <stdint.h>

#include "pd_cplq.h"

#define PD_RDMA_MAX_QPS      16u
#define PD_RDMA_MAX_PEERS    1024u
#define PD_RDMA_MAX_DEPTH    65536u
#define PD_RDMA_MAX_SQ       4096u
#define PD_RDMA_MAX_INLINE   1024u
#define PD_RDMA_MAX_CONNS    4096u

/* Private data of connect requests and rejects. */
#define PD_RDMA_CM_MAGIC   0x524b4450u /* "PDKR" as little-endian bytes */
#define PD_RDMA_CM_VERSION 1u
#define PD_RDMA_CM_REQ_LEN 24u
#define PD_RDMA_CM_REJ_LEN 12u

struct pd_rdma_ops {
	/* A connect request arrived with @token: 0 and *peer set to accept it
	 * as a QP of that peer, or -errno to refuse it (the sender's peer
	 * fails with that errno; -EACCES when it is not in [-4095, -1]).
	 * Runs on the data thread. */
	int (*accept_peer)(void *ctx, uint64_t token, uint32_t *peer);
};

struct pd_rdma_opts {
	const char *dev;               /* device name ("mlx5_0", "rxe0"); NULL: the one owning addr */
	const char *addr;              /* numeric local address of the data plane: picks the device
					* when dev is NULL, and is the source address of our
					* connections; may be NULL when dev is set */
	void *recv_base;               /* recv arena, peers write here; NULL: send only */
	uint64_t recv_len;
	const void *send_base;         /* send (staging) arena, writes read from here; NULL: receive only */
	uint64_t send_len;
	const struct pd_rdma_ops *ops; /* borrowed for the instance's life; NULL: accept any connection */
	void *ctx;                     /* passed to ops */
	uint32_t qps;                  /* QPs per peer, 1..PD_RDMA_MAX_QPS (2) (--rdma-qps) */
	uint32_t max_peers;            /* connected peers at once, 1..PD_RDMA_MAX_PEERS (16) */
	uint32_t queue_depth;          /* writes outstanding per peer, 1..PD_RDMA_MAX_DEPTH (1024) */
	uint32_t sq_depth;             /* send queue WRs per QP, 2..PD_RDMA_MAX_SQ (128) */
	uint32_t max_inline;           /* writes of at most this many bytes go inline,
					* 0..PD_RDMA_MAX_INLINE (64); the QP may grant less */
	uint32_t signal_interval;      /* signal at least every Nth WR per QP, 1..sq_depth (16) */
	uint32_t max_conns;            /* accepted QPs at once, 1..PD_RDMA_MAX_CONNS (256) */
	uint32_t connect_timeout_ms;   /* address + route + connect, and the drain of
					* pd_rdma_disconnect, >= 1 (5000) */
	uint32_t ack_timeout;          /* RC local ACK timeout exponent, 4.096 us * 2^n, 1..31
					* (14: 67 ms; with 7 retries a dead peer is found in ~0.5 s
					* to a few s) */
	uint32_t flags;                /* none defined: must be 0 */
};

/* The receiving peer, as its Hello describes it (see above). */
struct pd_rdma_remote {
	uint64_t base;                 /* Hello rdma_base: address of its recv slot 0 */
	uint64_t slot_size;            /* Hello slot_size, >= 1 */
	uint32_t rkey;                 /* Hello rdma_rkey */
	uint32_t nslots;               /* Hello recv_slots, >= 1 */
	uint64_t token;                /* sent in the connect request, for its accept_peer */
};

/* What our Hello advertises (any thread). */
struct pd_rdma_local {
	uint64_t base;                 /* recv arena base (rdma_base); 0 when send only */
	uint64_t len;                  /* recv arena length */
	uint32_t rkey;                 /* recv arena rkey (rdma_rkey); 0 when send only */
	uint32_t _rsvd;
	char dev[64];                  /* device name */
};

/* Completions are struct pd_cpl (pd_cplq.h), as pd_tcp's: PD_CPL_WRITE,
 * one posted write ended; PD_CPL_PEER, the peer failed (see above). */

/* Counters (monotonic, relaxed atomics; a snapshot is not one instant). */
#define PD_RDMA_STAT_FIELDS(X)                                                          \
	X(writes_ok)        /* writes completed with status 0 */                       \
	X(writes_failed)    /* writes completed with an error */                       \
	X(bytes_ok)         /* payload bytes of the writes completed with 0 */         \
	X(wrs_posted)       /* work requests posted */                                 \
	X(wrs_inline)       /* of which inline */                                      \
	X(wrs_signalled)    /* of which signalled */                                   \
	X(post_calls)       /* ibv_post_send calls (chains) */                         \
	X(post_errors)      /* ibv_post_send failures */                               \
	X(sq_waits)         /* schedules leaving writes waiting for send-queue room */ \
	X(cq_events)        /* completion channel events */                            \
	X(wcs)              /* work completions polled */                              \
	X(wc_errors)        /* of which with an error status */                        \
	X(async_events)     /* device async events */                                  \
	X(peer_failures)    /* PD_CPL_PEER completions queued */                       \
	X(connects)         /* peers whose QPs all became established */               \
	X(accepts)          /* receive QPs accepted */                                 \
	X(rejects)          /* connect requests refused */                             \
	X(conns_closed)     /* receive QPs ended */                                    \
	X(conns_fenced)     /* receive QPs destroyed by pd_rdma_fence() */

struct pd_rdma_stats {
#define PD_RDMA_STAT_U64(n) uint64_t n;
	PD_RDMA_STAT_FIELDS(PD_RDMA_STAT_U64)
#undef PD_RDMA_STAT_U64
};

struct pd_rdma;

/** Fill @o with the defaults given above (no device, no arenas, no ops).
 * @o may not be NULL. */
void pd_rdma_opts_init(struct pd_rdma_opts *o);

/**
 * Create an instance: open the device, allocate the PD, register the
 * arenas, create the completion and rdma_cm channels, the completion
 * eventfd and the write pool, start the data thread.
 * @param o    borrowed (copied; dev and addr are used during the call only)
 * @param out  set only on success
 * @return 0; -EINVAL (NULL, a field out of range, unknown flags, neither dev
 *         nor addr, a non-numeric addr, neither arena); -ENODEV (no such
 *         device, or no RDMA device owns addr); -ENOMEM; verbs errors of
 *         ibv_alloc_pd / ibv_reg_mr (-EPERM, -EFAULT, ...); -EMFILE; -EAGAIN
 *         (thread).
 */
int pd_rdma_create(const struct pd_rdma_opts *o, struct pd_rdma **out);

/**
 * Disconnect every peer (their writes complete with -ECONNABORTED into the
 * queue, which pd_rdma_poll() still drains), close the listener and every
 * accepted QP, stop and join the data thread. Idempotent. NULL-safe.
 * Afterwards connect, listen and post return -ESHUTDOWN.
 */
void pd_rdma_stop(struct pd_rdma *r);

/** pd_rdma_stop(), then free everything (MRs deregistered, PD freed);
 * completions not polled are dropped. NULL-safe. */
void pd_rdma_destroy(struct pd_rdma *r);

/**
 * Listen on host:port (port 0: ephemeral, see pd_rdma_port) for peers' QPs.
 * @return 0; -EINVAL (NULL or non-numeric host, no recv arena); -EBUSY
 *         (already listening); -EXDEV (host is on another device);
 *         -ESHUTDOWN; rdma_cm errors (-EADDRINUSE, -EADDRNOTAVAIL, ...).
 */
int pd_rdma_listen(struct pd_rdma *r, const char *host, uint16_t port);

/** The listener's port (1..65535), -ENOTCONN when not listening, -EINVAL
 * for NULL. Any thread. */
int pd_rdma_port(const struct pd_rdma *r);

/** What Hello advertises. @return 0 or -EINVAL (NULL). Any thread. */
int pd_rdma_local_info(const struct pd_rdma *r, struct pd_rdma_local *out);

/**
 * Start connecting opts.qps QPs to a peer; returns before they are up
 * (writes may be posted at once and go out when they are; failures arrive
 * as a PD_CPL_PEER completion).
 * @param peer  the caller's id for the peer (unique per instance)
 * @param host  numeric address of the peer's listener, borrowed
 * @param port  1..65535
 * @param rem   borrowed (copied)
 * @return 0; -EINVAL (NULL, bad host or port, nslots or slot_size 0,
 *         base + nslots * slot_size overflows, no send arena); -EEXIST (peer
 *         id in use: disconnect it first); -ENOBUFS (max_peers connected);
 *         -ESHUTDOWN; -ENOMEM; rdma_cm errors of rdma_create_id /
 *         rdma_resolve_addr.
 */
int pd_rdma_connect(struct pd_rdma *r, uint32_t peer, const char *host, uint16_t port,
		    const struct pd_rdma_remote *rem);

/**
 * Stop the peer's writes, drain them (see above), destroy its QPs.
 * Every write of the peer not yet completed has completed before this
 * returns.
 * @return 0; -EINVAL (NULL); -ENOENT (no such peer).
 */
int pd_rdma_disconnect(struct pd_rdma *r, uint32_t peer);

/**
 * Destroy the QP of every accepted connection whose peer (what accept_peer
 * gave it) stale() says is stale: from then on the NIC refuses its writes
 * into our memory. The connection itself goes with its DISCONNECTED event.
 * stale() runs on the calling thread under the instance's lock.
 * @return QPs destroyed; -EINVAL.
 */
int pd_rdma_fence(struct pd_rdma *r, int (*stale)(void *arg, uint32_t peer), void *arg);

/**
 * Queue @n writes to @peer, all or nothing (_bulk). Each gets exactly one
 * completion; src stays loaned to the transport until then.
 * @return n (also 0 for n == 0); -EINVAL (NULL, a write out of bounds: slot
 *         >= nslots, len > slot_size, src outside the send arena, NULL src
 *         with len > 0; n > queue_depth); -ENOENT (no such peer); -ENOTCONN
 *         (the peer failed or is being disconnected); -ESHUTDOWN; -EAGAIN
 *         (queue_depth writes outstanding or the pool empty: poll, retry).
 */
int pd_rdma_post(struct pd_rdma *r, uint32_t peer, const struct pd_xfer *x, uint32_t n);

/**
 * Move up to @max completions into @c, oldest first.
 * @return the number moved (0..max); -EINVAL for NULL arguments.
 */
int pd_rdma_poll(struct pd_rdma *r, struct pd_cpl *c, uint32_t max);

/** The completion eventfd (readable while completions are pending; owned
 * by the instance), or -EINVAL for NULL. Any thread. */
int pd_rdma_event_fd(const struct pd_rdma *r);

/** Snapshot of the counters; zeros for a NULL @r; @out may be NULL (no-op).
 * Any thread. */
void pd_rdma_get_stats(const struct pd_rdma *r, struct pd_rdma_stats *out);

#endif
