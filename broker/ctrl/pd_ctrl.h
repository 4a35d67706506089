/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_CTRL_H
#define PD_BROKER_PD_CTRL_H

/*
 * Broker <-> broker control plane: ZeroMQ sockets
 * carrying pd_wire messages, plugged into the control thread's pd_loop.
 *
 *   ROUTER  bound to opts.bind: peers that dialled us (frames [rid, "", payload]).
 *   DEALER  one per peer we dialled (pd_ctrl_peer), lazily (frames ["", payload]).
 *   PUSH    to opts.proxy, ProxyNotif only (one frame, LMCache's shape).
 *
 * Threading: single-threaded. The thread that calls pd_ctrl_create() owns
 * every ZMQ socket and must make every pd_ctrl_* call and run the loop;
 * callbacks run on it, from inside the loop's dispatch or pd_ctrl_tick().
 * Nothing spins: each socket's ZMQ_FD is watched edge-triggered; on a wake
 * ZMQ_EVENTS is read until ZMQ_POLLIN clears (at most a budget per wake,
 * then an internal eventfd brings the loop back), and after every send, since
 * a send can consume the fd's edge.
 *
 * Peer identity: one id per remote broker, keyed by the broker's name
 * (Hello/HelloAck "name"). Ids start at 1 and are never reused.
 *  - pd_ctrl_peer(endpoint) returns the peer that was dialled at that
 *    endpoint, or whose Hello advertised it as its control address (the
 *    transport "ctrl" in Hello's xports/addrs), else a new id whose name is
 *    learnt from the HelloAck.
 *  - A Hello arriving on the ROUTER attaches its routing id to the peer of
 *    that name (or, before its HelloAck, to the peer dialled at the address
 *    it advertises), else creates a peer.
 *  - So a broker that both dials us and is dialled by us is one id; its
 *    DEALER path and ROUTER path are two routes of that id.
 *  - If a HelloAck reveals that a newly dialled id is a broker already known
 *    under another id (it was dialled at an address other than the one it
 *    advertises), the new id becomes an alias of the older one: it stays
 *    valid for pd_ctrl_send()/pd_ctrl_peer(), callbacks report the older id,
 *    and ops->on_peer_alias tells the broker once.
 * Routes: AllocRequest, PutDone, CancelNotif and Heartbeat go through our
 * DEALER when we have one, else through the ROUTER; AllocResponse and Error
 * go back the way the last request of that peer came.
 *
 * Liveness: pd_ctrl_tick() sends a Heartbeat to every live peer each
 * heartbeat_ns. A peer is declared down (on_peer_down, once) when it is
 * silent for 3 heartbeats, or its handshake stays unanswered that long
 * (-ETIMEDOUT), or a Hello/HelloAck/Heartbeat shows a new epoch, or it
 * says Hello again from a new DEALER (-ECONNRESET: a new session). Its
 * queued messages are dropped; our DEALER to it is replaced and says Hello
 * again every 3 heartbeats; the Hello or HelloAck that answers brings
 * on_peer_up. A peer that receives a message from a sender without a
 * session answers Error(-ENOTCONN); the sender then says Hello again.
 *
 * Malformed input (wrong frames, oversized, not msgpack, not a valid
 * message, no session, wrong direction) is counted by cause, logged rate
 * limited, answered with an Error when a reply path exists (never an Error
 * with an Error), and never stops the loop.
 *
 * Trust (docs/design.md, "Trust"):
 *  - Data secrets. Each Hello we answer gets a random 64-bit secret in its
 *    HelloAck ("data_secret"): the data connections of the broker that
 *    said Hello present it to us. One secret per session of a peer: a
 *    second handshake of the same session (its other route) hands out the
 *    one the session has. on_peer_up, and on_peer_secrets when they
 *    change later, report what to accept from the peer
 *    (our HelloAck's secret, else its HelloAck's) and what to present to it
 *    (its HelloAck's, else ours). A session that ends forgets both.
 *  - Authority. A Hello naming a broker whose session is up resets that
 *    session only if it proves to be that broker: with CURVE, the same key
 *    and an epoch not older; without, a newer epoch, or (same epoch, a new
 *    DEALER of the same process) the session's secret in "resume". A Hello
 *    on a route the session does not have yet (the peer dials us back)
 *    joins it. Anything else is refused (Error -EPERM or -ESTALE, counted
 *    in hellos_refused) and the live session is untouched.
 *  - CURVE (opts.keys): the ROUTER is a CURVE server whose ZAP handler (on
 *    this thread) admits only the keys of --curve-peers, each bound to one
 *    broker name; a Hello must use the name of its connection's key, and
 *    every later message on that route must come from the same key. A
 *    DEALER is a CURVE client: the server key of an endpoint is the one
 *    --curve-peers lists for it, else that of the authenticated peer that
 *    advertises the endpoint, else that of the broker last known there;
 *    none known: pd_ctrl_peer() is -ENOKEY. The HelloAck must name the
 *    broker that key is bound to.
 *  - Eviction. A peer down for opts.evict_ns (at once when the table is
 *    full), and for which ops->peer_busy says the broker holds nothing, is
 *    forgotten (ops->on_peer_evicted) and its id may be reused. A Hello
 *    refused for a full table gets Error -ENOBUFS "peer table full"; a
 *    dialling broker logs the refusal of its Hello, keeps its text for
 *    pd_ctrl_peer_info() and takes the peer down with its code.
 */
#include <stdint.h>

#include "pd_loop.h"
#include "pd_wire.h"

struct pd_ctrl;

#define PD_CTRL_ENDPOINT_MAX 256u   /* incl. NUL */
#define PD_CTRL_MAX_XPORTS   (PD_WIRE_MAX_XPORTS - 1u) /* one is "ctrl" */
#define PD_CTRL_XPORT_CTRL   "ctrl" /* Hello transport naming the control endpoint */
#define PD_CTRL_KEY_ID_LEN   8u     /* Z85 characters of a public key shown as its id */
#define PD_CTRL_REFUSAL_MAX  96u    /* a peer's refusal of our Hello, NUL included */

struct pd_ctrl_keys;

/* A peer session's data-plane secrets (0: none yet). */
struct pd_ctrl_secrets {
	uint64_t accept;               /* its data connections present this to us */
	uint64_t present;              /* ours present this to it */
};

struct pd_ctrl_ops {
	/* A message for the broker: AllocRequest, AllocResponse, PutDone,
	 * CancelNotif or Error; m and its arrays are valid during the call. */
	void (*on_msg)(void *ctx, uint32_t peer, const struct pd_msg *m);
	/* The peer completed a handshake; h (its Hello) and s (its session's
	 * data secrets) are valid during the call. A receiver learns the peer
	 * (and what its connections present) here, before its HelloAck leaves. */
	void (*on_peer_up)(void *ctx, uint32_t peer, const struct pd_msg_hello *h,
			   const struct pd_ctrl_secrets *s);
	/* The peer is down: -ETIMEDOUT or -ECONNRESET. Also for a peer whose
	 * first handshake timed out (messages queued to it were dropped). */
	void (*on_peer_down)(void *ctx, uint32_t peer, int err);
	/* Optional (may be NULL): id alias now names the same broker as peer. */
	void (*on_peer_alias)(void *ctx, uint32_t alias, uint32_t peer);
	/* Optional: peer's session secrets changed while it is up (the
	 * handshake of its other route); s valid during the call. They end
	 * with the session (on_peer_down). */
	void (*on_peer_secrets)(void *ctx, uint32_t peer, const struct pd_ctrl_secrets *s);
	/* Optional: non-zero while the broker still refers to the down peer
	 * (requests, lanes, per-peer tables): it is not evicted. NULL: never. */
	int (*peer_busy)(void *ctx, uint32_t peer);
	/* Optional: peer's id was evicted (it and its aliases, one call each):
	 * from now on it may name another broker. */
	void (*on_peer_evicted)(void *ctx, uint32_t peer);
};

struct pd_ctrl_opts {
	struct pd_loop *loop;          /* borrowed; outlives the ctrl */
	const struct pd_ctrl_ops *ops; /* copied; on_msg, on_peer_up, on_peer_down required */
	void *ctx;
	const char *bind;              /* ROUTER endpoint, e.g. "tcp://0.0.0.0:17500" */
	const char *advertise;         /* control endpoint peers dial; NULL: the bound one
					* (a wildcard host replaced by the host name) */
	const char *proxy;             /* PUSH endpoint for ProxyNotif; NULL or "": none */
	const char *name;              /* 1..PD_WIRE_NAME_MAX bytes, unique per cluster */
	const char *host_id;           /* NULL: /etc/machine-id, else the host name */
	uint64_t epoch;                /* bumped at each broker start */
	uint64_t slot_size;            /* >= 1 */
	uint32_t recv_slots;
	uint32_t nxports;              /* 0..PD_CTRL_MAX_XPORTS */
	const char *xport[PD_CTRL_MAX_XPORTS]; /* "rdma", "tcp", "shm", by preference */
	const char *addr[PD_CTRL_MAX_XPORTS];  /* address of each (may be "") */
	const uint8_t *rdma_gid;       /* NULL (none sent: rdma_cm needs none), or 16 bytes */
	uint32_t rdma_qpn, rdma_rkey;  /* sent when not 0 (pdkv's rdma: rkey only) */
	uint64_t rdma_base;            /* sent when not 0: the recv arena's address */
	uint64_t heartbeat_ns;         /* > 0; silent for 3 of them = dead */
	uint32_t max_peers;            /* 0: 1024 */
	uint32_t queue_max;            /* messages held per peer before its HelloAck; 0: 1024 */
	uint32_t sndhwm;               /* ZMQ_SNDHWM/RCVHWM per socket; 0: 1000 */
	uint64_t evict_ns;             /* a down peer is forgotten after this; 0: never
					* (when the table is full: at once) */
	const struct pd_ctrl_keys *keys; /* CURVE (pd_ctrl_keys_load()); NULL: none, the
					  * control plane is unauthenticated. Borrowed:
					  * outlives the ctrl */
};

struct pd_ctrl_stats {
	uint64_t rx_msgs;              /* delivered to on_msg */
	uint64_t tx_msgs;              /* messages sent, control ones included */
	uint64_t tx_again;             /* refused: would block (HWM) or queue full */
	uint64_t tx_fail;              /* other send failures */
	uint64_t queued;               /* held until a HelloAck */
	uint64_t dropped;              /* held messages dropped with a dead peer */
	uint64_t bad_frames;           /* wrong frame count or delimiter */
	uint64_t bad_size;             /* payload larger than PD_WIRE_MAX_MSG */
	uint64_t bad_msgpack;          /* not msgpack, truncated, bounds (depth, counts) */
	uint64_t bad_schema;           /* msgpack, but no valid message (type, fields) */
	uint64_t bad_peer;             /* from a sender without a session (no Hello) */
	uint64_t bad_state;            /* valid message in the wrong place or direction */
	uint64_t errors_sent;          /* Error replies to bad input */
	uint64_t hellos_sent, heartbeats_sent, heartbeats_rcvd;
	uint64_t peers_up, peers_down; /* transitions */
	uint64_t aliases;              /* ids merged into an older one */
	uint64_t hellos_refused;       /* Hellos we refused (table full, name held by a
					* live session, older epoch, key of another name) */
	uint64_t refusals;             /* our Hellos a peer refused with an Error */
	uint64_t evicted;              /* down peers forgotten (ids free again) */
	uint64_t auth_ok;              /* CURVE: connections whose key ZAP admitted */
	uint64_t auth_denied;          /* CURVE: a key not in --curve-peers (ZAP) */
	uint64_t auth_plain;           /* CURVE: a connection without CURVE */
	uint64_t auth_failed;          /* CURVE: other failed handshakes (wrong server key,
					* a peer refused our key, garbage) */
	uint64_t auth_name;            /* CURVE: an allowed key used with another name,
					* or a message from a route's other key */
	uint32_t peers;                /* gauge: ids that are not aliases */
	uint32_t peers_live;           /* gauge: peers up */
};

/* What pd_ctrl_peer_info() reports. */
#define PD_CTRL_PEER_NEW  1u  /* dialled, never up: messages are held */
#define PD_CTRL_PEER_UP   2u
#define PD_CTRL_PEER_DOWN 3u

struct pd_ctrl_peer_info {
	uint32_t id;                   /* canonical id (differs for an alias) */
	uint32_t state;                /* PD_CTRL_PEER_* */
	uint64_t epoch;
	const struct pd_msg_hello *hello; /* its last Hello; NULL before any */
	const char *endpoint;          /* as dialled, else as it advertised, else "" */
	uint64_t last_rx_ns;           /* CLOCK_MONOTONIC of its last message, 0: none */
	uint32_t authenticated;        /* 1: its session's key is proven (CURVE) */
	char key_id[PD_CTRL_KEY_ID_LEN + 1]; /* that key's first Z85 characters, "" none */
	const char *refusal;           /* why it refused our last Hello ("" none, or
					* since its HelloAck) */
};

/**
 * Create the control plane: a ZMQ context, the ROUTER bound to o->bind,
 * the PUSH to o->proxy, and their fds in o->loop.
 * @return 0 (*out set); -EINVAL NULL, missing op, empty or too long name,
 *         endpoint or host id, heartbeat_ns 0, slot_size 0, too many
 *         xports, an xport or address out of bounds; -ENOMEM; a negative
 *         errno from ZeroMQ (bind: -EADDRINUSE, -EPROTONOSUPPORT, ...)
 *         or from the loop.
 */
int pd_ctrl_create(const struct pd_ctrl_opts *o, struct pd_ctrl **out);

/* Close every socket (LINGER 0: nothing waits), remove the fds from the
 * loop, free everything. No callbacks; not to be called from one. NULL-safe. */
void pd_ctrl_destroy(struct pd_ctrl *c);

/* A host id into out (len >= 1, NUL-terminated): the first line of the file
 * at path (/etc/machine-id, a boot id), else the host name, else "unknown".
 * Equal host ids mean one host. */
void pd_ctrl_host_id_read(const char *path, char *out, size_t len);

/* The ROUTER's actual endpoint (ZMQ_LAST_ENDPOINT, e.g. the port chosen for
 * "tcp://127.0.0.1:0"); valid until destroy. */
const char *pd_ctrl_endpoint(const struct pd_ctrl *c);

/**
 * The peer id for a receiver's control endpoint, dialling it (DEALER +
 * Hello) when no peer is known there. Messages sent before its HelloAck are
 * held (up to queue_max) and flushed in order on it.
 * @return 0 (*peer set, canonical when known); -EINVAL NULL, empty or too
 *         long endpoint, or our own endpoint; -ENOBUFS max_peers reached
 *         and no down peer to evict; -ENOKEY CURVE and no server key known
 *         for the endpoint; -ENOMEM; a negative errno from zmq_connect (bad
 *         endpoint).
 */
int pd_ctrl_peer(struct pd_ctrl *c, const char *endpoint, uint32_t *peer);

/**
 * Encode m and send it to peer without blocking. m borrowed.
 * @return 0 sent or held for the HelloAck; -EINVAL NULL, a type the ctrl
 *         owns (Hello, HelloAck, Heartbeat, ProxyNotif) or a message the
 *         codec refuses; -ENOENT unknown peer id; -ENOTCONN peer down, or
 *         its route is gone; -EAGAIN would block (HWM) or hold queue
 *         full (counted); -EMSGSIZE; -ENOMEM.
 */
int pd_ctrl_send(struct pd_ctrl *c, uint32_t peer, const struct pd_msg *m);

/**
 * ProxyNotif to the proxy's PULL (one frame: {"type": "ProxyNotif",
 * "req_id": ..., extensions}).
 * @return 0; -EINVAL NULL or refused by the codec; -ENOTCONN no proxy
 *         configured; -EAGAIN would block (counted); -ENOMEM.
 */
int pd_ctrl_proxy_notif(struct pd_ctrl *c, const struct pd_msg_proxy *p);

/* Heartbeats, silence and handshake deadlines, Hello retries. The broker
 * calls it from its tick (at least every heartbeat_ns / 2); now_ns is on
 * CLOCK_MONOTONIC (pd_now_ns()). NULL-safe. */
void pd_ctrl_tick(struct pd_ctrl *c, uint64_t now_ns);

/* @return 0; -EINVAL NULL; -ENOENT unknown id; -ESRCH an id evicted (free).
 * info->hello and info->refusal are valid until the next call into the ctrl. */
int pd_ctrl_peer_info(const struct pd_ctrl *c, uint32_t peer, struct pd_ctrl_peer_info *info);

/*
 * Does the control plane need pd_ctrl_tick() more often than once a
 * heartbeat? 1 while a Hello is unanswered or messages wait to be sent;
 * 0 with every session settled (up and quiet, or down), whose heartbeats,
 * silence deadlines, redials and evictions a tick per heartbeat serves.
 */
int pd_ctrl_timed(const struct pd_ctrl *c);

void pd_ctrl_stats(const struct pd_ctrl *c, struct pd_ctrl_stats *st);

/**
 * The data path to peer failed (e.g. its lanes closed: a restart): end the
 * session (on_peer_down runs: its requests fail) and say Hello again at
 * once. Unlike a peer found dead, messages sent meanwhile are held for the
 * new HelloAck, so requests made right after a restart do not fail; if no
 * HelloAck comes within the silence deadline the peer goes down.
 * @return 1 reset; 0 nothing to do (not up, or never dialled); -EINVAL;
 *         -ENOENT unknown id.
 */
int pd_ctrl_peer_reset(struct pd_ctrl *c, uint32_t peer, int err);

/* Shutting down: tell every peer that is up (a Heartbeat with "bye", upon
 * which it fails our requests at once instead of after the silence
 * deadline) and let pd_ctrl_destroy() wait up to PD_CTRL_BYE_LINGER_MS
 * for those messages to leave. NULL-safe. */
#define PD_CTRL_BYE_LINGER_MS 200
void pd_ctrl_goodbye(struct pd_ctrl *c);

/* ---- CURVE keys (pd_ctrl_keys.c) ------------------------------------------------ */

/* 1 when this libzmq can do CURVE (built with libsodium, as Debian's is). */
int pd_ctrl_curve_available(void);

/**
 * Write a new CURVE key pair to path (created, never overwritten, mode
 * 0600): "public-key = Z85" and "secret-key = Z85" lines. pub gets the
 * public key (41 bytes: 40 Z85 characters and a NUL).
 * @return 0; -EEXIST path exists; -ENOTSUP no CURVE in libzmq; -errno
 *         from open/write (err says which, naming the file).
 */
int pd_ctrl_keygen(const char *path, char pub[41], char *err, size_t errlen);

/**
 * Load this broker's key pair (key_path: as pd_ctrl_keygen() writes it,
 * readable by its owner only) and the peers it admits (peers_path: one
 * "NAME PUBLIC-KEY [ENDPOINT...]" per line, '#' comments; a key is bound
 * to one name, an endpoint to one key; a name may have several keys).
 * Every message names the flag and the file ("--curve-peers FILE:3: ...").
 * @return 0 (*out set; pd_ctrl_keys_free() it); -EINVAL a bad line, a bad
 *         or mismatched key, a key file others may read; -ENOTSUP no CURVE
 *         in libzmq; -ENOMEM; -errno from reading.
 */
int pd_ctrl_keys_load(const char *key_path, const char *peers_path,
		      struct pd_ctrl_keys **out, char *err, size_t errlen);
void pd_ctrl_keys_free(struct pd_ctrl_keys *k);   /* NULL-safe */

/* "curve, key <id>, <n> peer keys" or "unauthenticated" (keys NULL), for
 * the log and pdctl status. */
void pd_ctrl_keys_describe(const struct pd_ctrl_keys *k, char *out, size_t len);

#endif
