/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_CTRL_INT_H
#define PD_BROKER_PD_CTRL_INT_H

/*
 * Control plane internals shared by pd_ctrl.c (create, identity, public
 * calls), pd_ctrl_io.c (sockets, frames, the edge-triggered drain),
 * pd_ctrl_peer.c (peer table, states, liveness), pd_ctrl_evict.c (down
 * peers forgotten), pd_ctrl_rx.c (what each received message does),
 * pd_ctrl_trust.c (secrets, the authority of a Hello), pd_ctrl_auth.c
 * (CURVE on the sockets, the ZAP handler, handshake monitors) and
 * pd_ctrl_keys.c (key files).
 */
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <zmq.h>

#include "pd_ctrl.h"

/* ZeroMQ returns -1 and leaves the cause in zmq_errno(). */
static inline int pd_zmq_rc(int rc)
{
	return rc < 0 ? -zmq_errno() : rc;
}

#define PD_CTRL_RID_MAX    255u   /* ZMQ routing id */
#define PD_CTRL_DRAIN_MAX  128u   /* messages per socket per wake, then yield */
#define PD_CTRL_DEAD_BEATS 3u

/* Which way a message goes to (or came from) a peer. */
#define PD_CTRL_PATH_DEALER 1u
#define PD_CTRL_PATH_ROUTER 2u

/* Peer states beyond the public PD_CTRL_PEER_*. */
#define PD_CTRL_PEER_ALIAS 4u
#define PD_CTRL_PEER_FREE  5u   /* evicted: the id may be taken again */

#define PD_CTRL_KEY_LEN   32u   /* a CURVE key, binary */
#define PD_CTRL_Z85_LEN   40u   /* the same in Z85 */
#define PD_CTRL_KEY_EPS   4u    /* endpoints one --curve-peers line may list */
#define PD_CTRL_EVICT_MAX 64u   /* peers evicted per tick at most */

/* One allowed key of --curve-peers. */
struct pd_ctrl_key_entry {
	char name[PD_WIRE_NAME_MAX + 1];   /* the broker name the key may use */
	uint8_t key[PD_CTRL_KEY_LEN];
	char z85[PD_CTRL_Z85_LEN + 1];
	uint32_t nep;
	char ep[PD_CTRL_KEY_EPS][PD_CTRL_ENDPOINT_MAX]; /* control endpoints it serves */
};

struct pd_ctrl_keys {
	uint8_t pub[PD_CTRL_KEY_LEN], sec[PD_CTRL_KEY_LEN];   /* ours */
	char pub_z85[PD_CTRL_Z85_LEN + 1];
	uint32_t n;
	struct pd_ctrl_key_entry *e;
};

/* pd_ctrl_keys.c: lookups (NULL: none). */
const struct pd_ctrl_key_entry *pd_ctrl_keys_find(const struct pd_ctrl_keys *k,
						  const uint8_t key[PD_CTRL_KEY_LEN]);
const struct pd_ctrl_key_entry *pd_ctrl_keys_find_z85(const struct pd_ctrl_keys *k,
						      const char *z85);
const struct pd_ctrl_key_entry *pd_ctrl_keys_at(const struct pd_ctrl_keys *k, const char *ep);
/* The name's key when it has exactly one. */
const struct pd_ctrl_key_entry *pd_ctrl_keys_only(const struct pd_ctrl_keys *k,
						  const char *name);

/* A message encoded before its peer's HelloAck. */
struct pd_ctrl_qmsg {
	STAILQ_ENTRY(pd_ctrl_qmsg) link;
	size_t len;
	uint8_t data[];
};

STAILQ_HEAD(pd_ctrl_queue, pd_ctrl_qmsg);

/* Our DEALER to a peer we dialled. */
struct pd_ctrl_dealer {
	struct pd_ctrl *c;
	struct pd_ctrl_peer *p;        /* NULL once retired */
	void *sock;
	int fd;                        /* ZMQ_FD, in the loop */
	uint32_t acked;                /* HelloAck received on this socket */
	uint32_t pending;              /* input left unread: drain on the kick */
	uint64_t hello_ns;             /* last Hello sent */
	char endpoint[PD_CTRL_ENDPOINT_MAX];
	LIST_ENTRY(pd_ctrl_dealer) grave;
	/* CURVE: the server key we demand, and a monitor of the handshake */
	uint32_t has_skey;
	uint8_t skey[PD_CTRL_KEY_LEN];
	void *mon;
	int mon_fd;
	uint32_t mon_pending;
};

/* The remote's Hello, owned (the decoder's storage is reused). */
struct pd_ctrl_hello_copy {
	char name[PD_WIRE_NAME_MAX + 1];
	char host_id[PD_WIRE_NAME_MAX + 1];
	char xport[PD_WIRE_MAX_XPORTS][PD_WIRE_NAME_MAX + 1];
	char addr[PD_WIRE_MAX_XPORTS][PD_WIRE_ADDR_MAX + 1];
	uint8_t gid[16];
	struct pd_msg_hello view;      /* points into the arrays above */
};

struct pd_ctrl_peer {
	uint32_t id;
	uint32_t alias;                /* canonical id when state is ALIAS */
	uint32_t state;                /* PD_CTRL_PEER_* */
	uint32_t has_hello;
	uint64_t epoch;
	struct pd_ctrl_hello_copy hello;
	char dialled[PD_CTRL_ENDPOINT_MAX];  /* given to pd_ctrl_peer(), "" if none */
	char advertised[PD_CTRL_ENDPOINT_MAX]; /* its Hello's "ctrl" address */
	struct pd_ctrl_dealer *d;      /* NULL: we never dialled it */
	uint8_t rid[PD_CTRL_RID_MAX];  /* its DEALER's routing id at our ROUTER */
	uint32_t rid_len;              /* 0: no ROUTER route */
	uint32_t reply_path;           /* where its last request came from */
	uint64_t last_rx_ns, last_hb_ns;
	struct pd_ctrl_queue q;
	uint32_t qlen;
	/* Trust (pd_ctrl_trust.c). Secrets of this session (0: none). */
	uint64_t sec_ours;             /* in our HelloAck to it */
	uint64_t sec_theirs;           /* in its HelloAck to us */
	uint64_t rep_accept, rep_present; /* last told to ops->on_peer_secrets */
	uint64_t resume;               /* a past session's secret: a Hello's proof */
	uint32_t has_key;              /* CURVE: the session's key is known */
	uint8_t key[PD_CTRL_KEY_LEN];
	char refusal[PD_CTRL_REFUSAL_MAX]; /* its Error to our Hello, "" none */
	uint64_t down_ns;              /* when it went down (eviction) */
};

struct pd_ctrl {
	struct pd_ctrl_opts o;         /* strings point into the owned copies below */
	struct pd_ctrl_ops ops;
	void *zctx;
	void *router;
	int router_fd;
	uint32_t router_pending;
	void *push;
	int kick_fd;                   /* eventfd: drain what a send left pending */
	uint32_t kicked;
	uint32_t depth;                /* dispatch nesting; retired dealers freed at 0 */
	uint64_t dealer_gen;           /* makes each DEALER's routing id unique */
	char name[PD_WIRE_NAME_MAX + 1];
	char host_id[PD_WIRE_NAME_MAX + 1];
	char endpoint[PD_CTRL_ENDPOINT_MAX];
	char advertise[PD_CTRL_ENDPOINT_MAX];
	char xport[PD_WIRE_MAX_XPORTS][PD_WIRE_NAME_MAX + 1];
	char addr[PD_WIRE_MAX_XPORTS][PD_WIRE_ADDR_MAX + 1];
	uint8_t gid[16];
	struct pd_msg hello;           /* ours; type switched for HelloAck */
	struct pd_ctrl_peer **peers;   /* by id - 1 */
	uint32_t npeers, cap;
	uint32_t nfree;                /* entries FREE (evicted) */
	LIST_HEAD(, pd_ctrl_dealer) graveyard;
	struct pd_wire_buf enc;
	struct pd_wire_dec dec;
	uint64_t now_ns;               /* of the current dispatch */
	struct pd_ctrl_stats st;
	/* CURVE (pd_ctrl_auth.c); keys NULL: none of it */
	const struct pd_ctrl_keys *keys;
	void *zap;                     /* REP at inproc://zeromq.zap.01 */
	int zap_fd;
	uint32_t zap_pending;
	void *rmon;                    /* PAIR: the ROUTER's handshake events */
	int rmon_fd;
	uint32_t rmon_pending;
	uint64_t mon_gen;              /* makes each monitor endpoint unique */
};

/* pd_ctrl_io.c */
int pd_ctrl_sock_setup(struct pd_ctrl *c, void *sock);
int pd_ctrl_has_input(void *sock);   /* ZMQ_EVENTS has POLLIN (also runs its commands) */
void pd_ctrl_kick(struct pd_ctrl *c); /* drain what is pending on the next turn */
int pd_ctrl_watch(struct pd_ctrl *c, void *sock, int *fd, pd_loop_fn *fn, void *ctx);
int pd_ctrl_dealer_open(struct pd_ctrl *c, struct pd_ctrl_peer *p, const char *endpoint);
void pd_ctrl_dealer_retire(struct pd_ctrl *c, struct pd_ctrl_dealer *d);
void pd_ctrl_bury(struct pd_ctrl *c);
int pd_ctrl_send_dealer(struct pd_ctrl *c, struct pd_ctrl_dealer *d, const void *buf,
			size_t len);
int pd_ctrl_send_router(struct pd_ctrl *c, const uint8_t *rid, uint32_t rid_len,
			const void *buf, size_t len);
void pd_ctrl_on_router(void *ctx, uint32_t events);
void pd_ctrl_on_dealer(void *ctx, uint32_t events);
void pd_ctrl_on_kick(void *ctx, uint32_t events);

/* pd_ctrl_peer.c */
/* The entry of id, also a FREE one (NULL beyond the table). */
struct pd_ctrl_peer *pd_ctrl_peer_slot(const struct pd_ctrl *c, uint32_t id);
/* The entry of id; NULL beyond the table or FREE. */
struct pd_ctrl_peer *pd_ctrl_peer_get(const struct pd_ctrl *c, uint32_t id);
struct pd_ctrl_peer *pd_ctrl_peer_canon(const struct pd_ctrl *c, uint32_t id);
struct pd_ctrl_peer *pd_ctrl_peer_by_name(const struct pd_ctrl *c, const struct pd_bytes *n);
struct pd_ctrl_peer *pd_ctrl_peer_by_rid(const struct pd_ctrl *c, const uint8_t *rid,
					 uint32_t len);
struct pd_ctrl_peer *pd_ctrl_peer_by_dial(const struct pd_ctrl *c, const char *ep);
int pd_ctrl_peer_new(struct pd_ctrl *c, struct pd_ctrl_peer **out);
/* Take back an entry pd_ctrl_peer_new() just gave (nobody saw its id). */
void pd_ctrl_peer_unnew(struct pd_ctrl *c, struct pd_ctrl_peer *p);
void pd_ctrl_peer_free(struct pd_ctrl_peer *p);
uint32_t pd_ctrl_peer_drop_queue(struct pd_ctrl_peer *p);
void pd_ctrl_peer_store_hello(struct pd_ctrl_peer *p, const struct pd_msg_hello *h);
void pd_ctrl_peer_up(struct pd_ctrl *c, struct pd_ctrl_peer *p);
void pd_ctrl_peer_down(struct pd_ctrl *c, struct pd_ctrl_peer *p, int err, int redial);
void pd_ctrl_peer_merge(struct pd_ctrl *c, struct pd_ctrl_peer *from, struct pd_ctrl_peer *to);
int pd_ctrl_peer_transmit(struct pd_ctrl *c, struct pd_ctrl_peer *p, uint32_t type,
			  const void *buf, size_t len);
void pd_ctrl_peer_flush(struct pd_ctrl *c, struct pd_ctrl_peer *p);
int pd_ctrl_hello_send(struct pd_ctrl *c, struct pd_ctrl_dealer *d);

/* pd_ctrl_evict.c */
/* Evict down peers past the grace period (at most PD_CTRL_EVICT_MAX). */
void pd_ctrl_evict_tick(struct pd_ctrl *c);
/* The table is full: evict the longest-down evictable peer now. 1 done, 0 none. */
int pd_ctrl_evict_one(struct pd_ctrl *c);

/* pd_ctrl_rx.c */
/* Where a message came from: our DEALER d, or the ROUTER from routing id rid
 * (user_id: the Z85 key ZAP admitted the connection with; NULL without CURVE). */
struct pd_ctrl_from {
	struct pd_ctrl_dealer *d;
	const uint8_t *rid;
	uint32_t rid_len;
	const char *user_id;
};

void pd_ctrl_rx(struct pd_ctrl *c, const struct pd_ctrl_from *f, const void *buf, size_t len);
void pd_ctrl_reply_error(struct pd_ctrl *c, const struct pd_ctrl_from *f, int code,
			 uint64_t seq, const char *text);

/* pd_ctrl_trust.c */
/* A Hello for p, whose session is up, from f: 0 and *reset (it ends the
 * session first), or < 0 refused (text says why). */
int pd_ctrl_hello_authority(const struct pd_ctrl *c, const struct pd_ctrl_peer *p,
			    const struct pd_ctrl_from *f, const struct pd_msg_hello *h,
			    const uint8_t *key, int *reset, char *text, size_t tlen);
/* Our HelloAck's secret for p's session (made when it has none): 0 or -errno. */
int pd_ctrl_secret_ours(struct pd_ctrl *c, struct pd_ctrl_peer *p);
/* Tell the broker p's secrets when they changed. */
void pd_ctrl_secrets_report(struct pd_ctrl *c, struct pd_ctrl_peer *p);
/* p's session ended: its secrets go (the last one kept as the proof). */
void pd_ctrl_secrets_end(struct pd_ctrl_peer *p);
/* Key ids for people: the first PD_CTRL_KEY_ID_LEN Z85 characters. */
void pd_ctrl_key_id(const uint8_t key[PD_CTRL_KEY_LEN], char out[PD_CTRL_KEY_ID_LEN + 1]);

/* pd_ctrl_auth.c (all no-ops without keys) */
int pd_ctrl_auth_open(struct pd_ctrl *c);          /* ZAP handler, ROUTER monitor */
void pd_ctrl_auth_close(struct pd_ctrl *c);
int pd_ctrl_auth_server(struct pd_ctrl *c, void *router); /* before bind */
/* CURVE client for d, a DEALER of p (before its connect): 0, or -ENOKEY. */
int pd_ctrl_auth_client(struct pd_ctrl *c, struct pd_ctrl_dealer *d, const struct pd_ctrl_peer *p);
void pd_ctrl_auth_dealer_close(struct pd_ctrl *c, struct pd_ctrl_dealer *d);
/* Kick: what the budget left for later. */
void pd_ctrl_auth_drain_pending(struct pd_ctrl *c);
/* The name a key is bound to (CURVE), NULL when it is not allowed. */
const char *pd_ctrl_auth_name_of(const struct pd_ctrl *c, const char *user_id,
				 uint8_t key[PD_CTRL_KEY_LEN]);

/* pd_ctrl.c */
int pd_ctrl_encode(struct pd_ctrl *c, const struct pd_msg *m);

#endif
