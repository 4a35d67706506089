/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_TCP_H
#define PD_BROKER_PD_TCP_H

/*
 * TCP data-plane transport.
 *
 * One struct pd_tcp is both ends of the data plane of one broker: it sends
 * writes to peers (lanes) and receives writes from peers (a listener). The
 * broker's control thread owns it; the module's own data threads move the
 * bytes and report back through a completion queue and an eventfd
 * (pd_cplq.h).
 *
 * ---- Wire ---------------------------------------------------------------
 * Every frame starts with struct pd_tcp_hdr: 40 bytes, every field
 * little-endian, layout pinned by _Static_assert, built and parsed only by
 * pd_tcp_hdr_encode()/pd_tcp_hdr_decode(). A DATA frame is followed by
 * exactly `len` payload bytes; HELLO and ACK frames have none (len == 0).
 *
 *   sender lane                          receiver connection thread
 *   connect() ------------------------>  accept()
 *   HELLO {tag = token, slot = lane} ->  ops->accept_peer(token) -> peer
 *                                  <--  HELLO {status = 0 | -errno}; on
 *                                        refusal the connection is closed
 *   DATA {slot, gen, len, tag, cookie}
 *        + len payload bytes -------->  ops->claim(peer, desc) -> dst
 *                                        recv payload straight into dst
 *                                        ops->landed(peer, desc, dst, 0)
 *                                  <--  ACK {same slot, gen, tag, cookie,
 *                                            status}
 *
 * The HELLO exchange is a round trip so that a refused token, a version
 * mismatch or a full receiver is reported to the sender as a clean error
 * (-EACCES, -EPROTO, -ECONNRESET) instead of surfacing as a reset on the
 * first write. It costs one round trip per lane per connect, never per write.
 *
 * ACKs come back in the order of the DATA frames on each connection (the
 * receiver serves a connection with one thread, frame after frame), so the
 * sender matches every ACK against the oldest unacknowledged frame of that
 * lane; any mismatch is a protocol error (-EPROTO) that fails the peer.
 *
 * Validation on receipt (never trust the network, STYLE ownership rule 6):
 * magic, version, type, len == 0 for HELLO/ACK, len <= max_frame for DATA,
 * status in [-4095, 0]. slot, gen and tag are handed to ops->claim untouched
 * and unchecked: the claim callback is the authority. The transport then
 * checks the claimed destination itself (len <= dst.cap, ptr != NULL).
 * Whatever goes wrong on a connection (bad frame, refused claim, EOF or a
 * short read at any point, a deadline passed) closes that connection and is
 * counted; it never crashes, asserts or hangs.
 *
 * ---- Sending --------------------------------------------------------------
 * pd_tcp_connect() opens `lanes` connections to a peer. Each lane is one
 * data thread that does the non-blocking connect and the HELLO exchange
 * (bounded by connect_timeout_ms), then runs a poll() loop on its socket and
 * its wake eventfd: it sends frames with sendmsg() from a header buffer and
 * the caller's src (no bounce copy), several frames per call, and reads
 * ACKs. At most `window` frames per lane are sent and not yet acknowledged.
 * pd_tcp_post() returns at once: writes may be posted before the lanes are
 * up and are sent once they are. Each write goes to the lane with the
 * fewest bytes queued and unacknowledged (so a big write does not queue
 * small ones behind it on every lane).
 *
 * The direct path (the latency of a lone small write): a post of one write
 * of at most 64 KiB, when a lane of the peer is idle (its thread has
 * nothing queued, sent or unacknowledged), is sent by pd_tcp_post() itself
 * with one non-blocking sendmsg(), and the lane's socket joins the event
 * fd until its ACK, which pd_tcp_poll() then reads. No thread hand-off on
 * either side of the round trip. Whatever else happens on that lane (more
 * writes posted, a partial send, a hang-up, a bad or missing ACK) wakes the
 * lane thread, which takes the frame back into its window and carries on
 * as for its own, deadlines and errors included; an idle lane thread wakes
 * every io_timeout_ms to check the deadline of a frame sent that way.
 *
 * Completions {peer, cookie, status} go to one queue drained by
 * pd_tcp_poll(). pd_tcp_event_fd() is an epoll descriptor that is readable
 * while that queue is not empty or the ACK of a direct write is readable
 * (level-triggered: epoll it, then poll until it returns less than asked;
 * a poll may find nothing when it was only part of an ACK).
 *
 * status 0 means the receiver has the bytes in place (it acknowledged after
 * ops->landed). A negative status means the write may or may not have
 * landed; the slot's content is unknown and the control plane must treat
 * the grant as spoiled.
 *
 * Peer failure: the first lane to fail (connect refused or timed out, HELLO
 * refused, reset, EOF, protocol error, no progress for io_timeout_ms while
 * work is outstanding) fails the whole peer: the other lanes are closed,
 * every write queued or in flight on any lane of the peer completes with
 * that first error (-ECONNREFUSED, -ETIMEDOUT, -EACCES, -ECONNRESET,
 * -EPIPE, -EPROTO, ...), and after the last of them one PD_CPL_PEER
 * completion {peer, cookie 0, same status} is queued: it is the last
 * completion of that peer, so when the control thread sees it, no write of
 * the peer is outstanding any more. A failed peer accepts no more writes
 * (-ENOTCONN); the control thread calls pd_tcp_disconnect() and may then
 * connect again (there is no automatic reconnect: that is a control-plane
 * decision, e.g. after a new token exchange).
 *
 * pd_tcp_disconnect() is the requested end: it closes the lanes, joins
 * their threads and completes every outstanding write of the peer with
 * -ECONNABORTED before it returns. No peer completion is queued for it
 * (unless the peer had failed before, in which case there already was one).
 *
 * Every write posted and accepted gets exactly one completion; every
 * pd_tcp_connect() that returned 0 gets at most one peer completion.
 *
 * ---- Receiving ------------------------------------------------------------
 * pd_tcp_listen() starts a listener thread. Each accepted connection gets a
 * data thread (at most max_conns at once; beyond that the connection is
 * closed at once and counted). A connection must send HELLO within
 * connect_timeout_ms; then each DATA frame is claimed, received straight
 * into the claimed memory, released with ops->landed and acknowledged.
 * An idle connection waits without a deadline (only the shutdown eventfd
 * wakes it); once a frame has started, the rest of it must arrive within
 * io_timeout_ms.
 *
 * The receive side tells the control plane nothing when a connection ends:
 * a claim always ends with landed(), and the counters say why connections
 * closed; the peer's failure reaches the control plane from the sender
 * side (its control-plane messages), which is where it is acted upon.
 *
 * ---- Threads, blocking, shutdown ------------------------------------------
 * Threads: lanes x connected peers on the send side, one listener plus one
 * per accepted connection (<= max_conns) on the receive side. Idle threads
 * block in poll() and wake only on an event (socket, their eventfd or the
 * shutdown eventfd), idle lanes also every io_timeout_ms (the deadline of
 * a direct write): no busy polling anywhere. Every wait on
 * the network while work is outstanding has a deadline. Threads are stopped
 * with an eventfd and joined, never cancelled.
 *
 * ---- Ownership and calling threads ----------------------------------------
 * All pd_tcp_* functions are called from one thread, the owner (the broker's
 * control thread), except pd_tcp_event_fd(), pd_tcp_port() and
 * pd_tcp_get_stats(), which any thread may call. The ops callbacks run on
 * the receive data threads, several at once: they must be thread-safe and
 * fast (they hold up their connection) and must not call pd_tcp_*.
 * Nothing allocates on the data path: write descriptors come from a pool
 * sized at create (max_peers * (queue_depth + 1)).
 *
 * ---- Flow control and ordering ---------------------------------------------
 * Per lane, at most `window` frames are sent and unacknowledged; per peer,
 * at most queue_depth writes are posted and not yet completed (pd_tcp_post
 * says -EAGAIN beyond). One ACK per DATA frame (40 bytes; negligible at the
 * chunk sizes the data plane moves). Writes of one lane are applied in
 * order; across lanes there is no order: the control plane must not depend
 * on it (it tracks each write by its cookie). The sockets use TCP_NODELAY
 * (ACKs and small frames must not wait for Nagle) and MSG_NOSIGNAL (a dead
 * peer is an -EPIPE, never a SIGPIPE). Data threads run with every signal
 * blocked.
 *
 * ---- Addresses --------------------------------------------------------------
 * host is a numeric IPv4 or IPv6 address ("127.0.0.1", "::1", "0.0.0.0").
 * Names are refused (-EINVAL) on purpose: a DNS lookup can block without
 * bound; the control plane resolves names before it calls in here.
 */
#include <stddef.h>
#include <stdint.h>

#include "pd_cplq.h"

/* ---- wire format ------------------------------------------------------------ */

#define PD_TCP_MAGIC        0x544b4450u /* "PDKT" as little-endian bytes */
#define PD_TCP_WIRE_VERSION 1u
#define PD_TCP_HDR_SIZE     40u

/* Frame types (u16 on the wire). */
#define PD_TCP_T_HELLO 1u
#define PD_TCP_T_DATA  2u
#define PD_TCP_T_ACK   3u

/* Largest max_frame accepted by pd_tcp_create (1 GiB). */
#define PD_TCP_MAX_FRAME_LIMIT (1u << 30)

/*
 * One frame header. On the wire every field is little-endian; in memory,
 * after pd_tcp_hdr_decode() (or before pd_tcp_hdr_encode()), host order.
 *
 *           HELLO (both ways)       DATA               ACK
 *   slot    lane index              recv slot index    echoed
 *   gen     lane count              slot generation    echoed
 *   len     0                       payload bytes      0
 *   status  reply: 0 or -errno      0                  0 or -errno
 *   cookie  0                       sender's cookie    echoed
 *   tag     token (request); 0      request tag        echoed
 *
 * The receiver sends ACK status 0 today (the field is there for receiver
 * verdicts such as a checksum; a negative one is passed to the completion).
 * Reserved fields of the in-memory structs (_rsvd) are never on the wire.
 */
struct pd_tcp_hdr {
	uint32_t magic;                /* PD_TCP_MAGIC */
	uint16_t version;              /* PD_TCP_WIRE_VERSION */
	uint16_t type;                 /* PD_TCP_T_* */
	uint32_t slot;
	uint32_t gen;
	uint32_t len;
	int32_t status;
	uint64_t cookie;
	uint64_t tag;
};

_Static_assert(sizeof(struct pd_tcp_hdr) == PD_TCP_HDR_SIZE, "pd_tcp_hdr is 40 bytes");
_Static_assert(offsetof(struct pd_tcp_hdr, magic) == 0, "wire layout");
_Static_assert(offsetof(struct pd_tcp_hdr, version) == 4, "wire layout");
_Static_assert(offsetof(struct pd_tcp_hdr, type) == 6, "wire layout");
_Static_assert(offsetof(struct pd_tcp_hdr, slot) == 8, "wire layout");
_Static_assert(offsetof(struct pd_tcp_hdr, gen) == 12, "wire layout");
_Static_assert(offsetof(struct pd_tcp_hdr, len) == 16, "wire layout");
_Static_assert(offsetof(struct pd_tcp_hdr, status) == 20, "wire layout");
_Static_assert(offsetof(struct pd_tcp_hdr, cookie) == 24, "wire layout");
_Static_assert(offsetof(struct pd_tcp_hdr, tag) == 32, "wire layout");

/**
 * Encode a host-order header into its 40 wire bytes (magic and version are
 * taken from @h as given, so tests can forge bad ones).
 * @param h    borrowed, host order
 * @param out  PD_TCP_HDR_SIZE bytes
 * Thread-safe.
 */
void pd_tcp_hdr_encode(const struct pd_tcp_hdr *h, uint8_t out[PD_TCP_HDR_SIZE]);

/**
 * Decode and validate 40 wire bytes: magic, version, known type, len == 0
 * unless DATA, DATA len <= max_len, status in [-4095, 0]. slot, gen, tag and
 * cookie are not interpreted.
 * @return 0, or -EPROTO (then @h is unspecified). Thread-safe.
 */
int pd_tcp_hdr_decode(const uint8_t in[PD_TCP_HDR_SIZE], uint32_t max_len,
		      struct pd_tcp_hdr *h);

/* ---- receive-side callbacks ----------------------------------------------- */

/* A DATA frame as it arrived: untrusted values, for ops->claim to judge. */
struct pd_tcp_wdesc {
	uint32_t slot;
	uint32_t gen;
	uint32_t len;                  /* payload bytes, <= max_frame */
	uint32_t _rsvd;
	uint64_t tag;
	uint64_t cookie;               /* sender's, opaque */
};

/* Where a claimed write goes; filled by ops->claim. */
struct pd_tcp_dst {
	void *ptr;                     /* first byte; may be NULL only when len == 0 */
	uint64_t cap;                  /* bytes writable at ptr (the slot size) */
	uint64_t priv;                 /* the callback's own, handed back to landed */
};

struct pd_tcp_ops {
	/* HELLO arrived with @token: 0 and *peer set to accept the connection
	 * as coming from that peer, or -errno to refuse it (the sender gets
	 * that errno, -EACCES when it is not in [-4095, -1]). */
	int (*accept_peer)(void *ctx, uint64_t token, uint32_t *peer);
	/* May @peer write d->len bytes into (d->slot, d->gen, d->tag)? 0 and
	 * *dst filled, or -errno: the connection is closed, nothing is
	 * written, landed is not called. After 0, landed is called exactly
	 * once, also when the transport itself refuses (d->len > dst->cap or
	 * a NULL ptr: status -EMSGSIZE, nothing written). */
	int (*claim)(void *ctx, uint32_t peer, const struct pd_tcp_wdesc *d,
		     struct pd_tcp_dst *dst);
	/* Ends the claim. status 0: all d->len bytes are at dst->ptr (the ACK
	 * follows). < 0: the payload did not fully arrive (-ECONNRESET,
	 * -ETIMEDOUT, -ECONNABORTED at shutdown, ...) or was refused
	 * (-EMSGSIZE); the first bytes of dst may have been overwritten, except
	 * for -EMSGSIZE. */
	void (*landed)(void *ctx, uint32_t peer, const struct pd_tcp_wdesc *d,
		       const struct pd_tcp_dst *dst, int status);
};

/* ---- instance --------------------------------------------------------------- */

#define PD_TCP_MAX_LANES 16u
#define PD_TCP_MAX_PEERS 1024u
#define PD_TCP_MAX_DEPTH 65536u
#define PD_TCP_MAX_WINDOW 4096u
#define PD_TCP_MAX_CONNS 4096u

struct pd_tcp_opts {
	const struct pd_tcp_ops *ops;  /* borrowed for the instance's life; NULL: send only */
	void *ctx;                     /* passed to ops */
	uint32_t lanes;                /* connections per peer, 1..PD_TCP_MAX_LANES (2) */
	uint32_t max_peers;            /* connected peers at once, 1..PD_TCP_MAX_PEERS (16) */
	uint32_t queue_depth;          /* writes outstanding per peer, 1..PD_TCP_MAX_DEPTH (1024) */
	uint32_t window;               /* frames unacknowledged per lane, 1..PD_TCP_MAX_WINDOW (32) */
	uint32_t max_frame;            /* payload bytes per write, 1..PD_TCP_MAX_FRAME_LIMIT (64 MiB) */
	uint32_t max_conns;            /* accepted connections at once, 1..PD_TCP_MAX_CONNS (256) */
	uint32_t connect_timeout_ms;   /* connect + HELLO round trip, >= 1 (5000) */
	uint32_t hello_timeout_ms;     /* receiver: accept to HELLO, 0: 2000 */
	uint32_t max_pending;          /* receiver: accepted without HELLO yet, 0: 64
					* (one more evicts the oldest) */
	uint32_t io_timeout_ms;        /* no progress with work outstanding, >= 1 (10000):
					* sender: frames unacknowledged and no byte sent nor
					* ACK received for this long; receiver: a frame begun
					* (or its ACK) and no byte moved for this long */
	uint32_t flags;                /* none defined: must be 0 */
};

/* Completions are struct pd_cpl (pd_cplq.h): PD_CPL_WRITE, one posted write
 * ended; PD_CPL_PEER, the peer failed (see above). */

/* Counters (monotonic, relaxed atomics; a snapshot is not one instant). */
#define PD_TCP_STAT_FIELDS(X)                                                          \
	X(frames_tx)        /* DATA frames fully sent */                              \
	X(direct_tx)        /* of them, sent by the owner itself (an idle lane) */    \
	X(direct_partial)   /* owner's sends the socket took only part of (or none): \
			     * the lane thread sent the rest */                       \
	X(bytes_tx)         /* their payload bytes */                                 \
	X(acks_rx)          /* ACKs matched to a frame */                             \
	X(writes_ok)        /* writes completed with status 0 */                      \
	X(writes_failed)    /* writes completed with an error */                      \
	X(peer_failures)    /* PD_CPL_PEER completions queued */                      \
	X(frames_rx)        /* DATA frames received and landed */                     \
	X(bytes_rx)         /* their payload bytes */                                 \
	X(acks_tx)          /* ACKs sent */                                           \
	X(conns_accepted)   /* connections given a data thread */                     \
	X(conns_refused)    /* accepted then closed at once: max_conns reached */     \
	X(conns_evicted)    /* closed without HELLO: max_pending newer ones came */   \
	X(conns_fenced)     /* closed by pd_tcp_fence(): their session ended */       \
	X(hellos_rejected)  /* HELLO refused by accept_peer */                        \
	X(writes_rejected)  /* DATA refused by claim, or len over dst.cap */          \
	X(proto_errors)     /* malformed frames (either side) */                      \
	X(conn_errors)      /* connections that ended in error (either side) */

struct pd_tcp_stats {
#define PD_TCP_STAT_U64(n) uint64_t n;
	PD_TCP_STAT_FIELDS(PD_TCP_STAT_U64)
#undef PD_TCP_STAT_U64
};

struct pd_tcp;

/** Fill @o with the defaults given above (ops NULL). @o may not be NULL. */
void pd_tcp_opts_init(struct pd_tcp_opts *o);

/**
 * Create an instance: the completion eventfd, the write pool; no thread yet.
 * @param o    borrowed (copied); ops, if set, must have all three callbacks
 * @param out  set only on success
 * @return 0; -EINVAL (NULL, a field out of range, unknown flags, incomplete
 *         ops); -ENOMEM; or an eventfd error (-EMFILE, ...).
 */
int pd_tcp_create(const struct pd_tcp_opts *o, struct pd_tcp **out);

/**
 * Stop every thread: disconnect every peer (their writes complete with
 * -ECONNABORTED into the queue, which pd_tcp_poll() still drains), close the
 * listener and every accepted connection (a claim in progress gets landed
 * with -ECONNABORTED), join all threads. Idempotent. NULL-safe.
 * Afterwards connect and listen return -ESHUTDOWN.
 */
void pd_tcp_stop(struct pd_tcp *t);

/** pd_tcp_stop(), then free everything; completions not polled are
 * dropped. NULL-safe. */
void pd_tcp_destroy(struct pd_tcp *t);

/**
 * Listen on host:port (port 0: ephemeral, see pd_tcp_port) and start the
 * listener thread.
 * @return 0; -EINVAL (NULL host, non-numeric host, no ops); -EBUSY (already
 *         listening); -ESHUTDOWN; socket/bind/listen errors (-EADDRINUSE,
 *         -EACCES, ...); -EAGAIN or -ENOMEM (thread).
 */
int pd_tcp_listen(struct pd_tcp *t, const char *host, uint16_t port);

/** The bound port (1..65535), or -ENOTCONN when not listening, -EINVAL for
 * NULL. Any thread. */
int pd_tcp_port(const struct pd_tcp *t);

/**
 * Start @o.lanes lanes to a peer; returns before they connect (failures
 * arrive as a PD_CPL_PEER completion).
 * @param peer   the caller's id for the peer (any value, unique per instance)
 * @param host   numeric address, borrowed
 * @param port   1..65535
 * @param token  sent in HELLO; the receiver's accept_peer judges it
 * @return 0; -EINVAL; -EEXIST (peer id in use: disconnect it first);
 *         -ENOBUFS (max_peers connected); -EAGAIN (write pool empty: poll
 *         completions first); -ESHUTDOWN; -ENOMEM; -EMFILE (eventfds).
 */
int pd_tcp_connect(struct pd_tcp *t, uint32_t peer, const char *host, uint16_t port,
		   uint64_t token);

/**
 * Close the peer's lanes and join their threads; every write of the peer
 * not yet completed completes with -ECONNABORTED before this returns.
 * @return 0; -EINVAL (NULL); -ENOENT (no such peer).
 */
int pd_tcp_disconnect(struct pd_tcp *t, uint32_t peer);

/**
 * Queue @n writes to @peer, all or nothing (_bulk semantics). Each gets one
 * completion. src stays loaned to the transport until then.
 * @return n (also 0 for n == 0); -EINVAL (NULL, len > max_frame, NULL src
 *         with len > 0, n > queue_depth); -ENOENT (no such peer);
 *         -ENOTCONN (the peer failed: disconnect it); -EAGAIN (the peer's
 *         queue_depth or the write pool is full: poll completions, retry).
 */
int pd_tcp_post(struct pd_tcp *t, uint32_t peer, const struct pd_xfer *x, uint32_t n);

/**
 * Move up to @max completions into @c, oldest first.
 * @return the number moved (0..max); -EINVAL for NULL arguments.
 */
int pd_tcp_poll(struct pd_tcp *t, struct pd_cpl *c, uint32_t max);

/**
 * Close every accepted connection whose lane (what accept_peer gave it)
 * stale() says is stale: their threads end, nothing more of them lands.
 * stale() runs on the calling thread with the connection table locked.
 * @return connections closed; -EINVAL.
 */
int pd_tcp_fence(struct pd_tcp *t, int (*stale)(void *arg, uint32_t lane), void *arg);

/** The event fd, an epoll descriptor (readable while completions are
 * pending or a direct write's ACK is there to read; owned by the instance,
 * do not read or close it), or -EINVAL for NULL. Any thread. */
int pd_tcp_event_fd(const struct pd_tcp *t);

/** Snapshot of the counters; zeros for a NULL @t; @out may be NULL (no-op).
 * Any thread. */
void pd_tcp_get_stats(const struct pd_tcp *t, struct pd_tcp_stats *out);

#endif
