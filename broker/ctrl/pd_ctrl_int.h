/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_CTRL_INT_H
#define PD_BROKER_PD_CTRL_INT_H

/*
 * Control plane internals shared by pd_ctrl.c (create, identity, public
 * calls), pd_ctrl_io.c (sockets, frames, the edge-triggered drain),
 * pd_ctrl_peer.c (peer table, states, liveness) and pd_ctrl_rx.c (what
 * each received message does).
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
	LIST_HEAD(, pd_ctrl_dealer) graveyard;
	struct pd_wire_buf enc;
	struct pd_wire_dec dec;
	uint64_t now_ns;               /* of the current dispatch */
	struct pd_ctrl_stats st;
};

/* pd_ctrl_io.c */
int pd_ctrl_sock_setup(struct pd_ctrl *c, void *sock);
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
struct pd_ctrl_peer *pd_ctrl_peer_get(const struct pd_ctrl *c, uint32_t id);
struct pd_ctrl_peer *pd_ctrl_peer_canon(const struct pd_ctrl *c, uint32_t id);
struct pd_ctrl_peer *pd_ctrl_peer_by_name(const struct pd_ctrl *c, const struct pd_bytes *n);
struct pd_ctrl_peer *pd_ctrl_peer_by_rid(const struct pd_ctrl *c, const uint8_t *rid,
					 uint32_t len);
struct pd_ctrl_peer *pd_ctrl_peer_by_dial(const struct pd_ctrl *c, const char *ep);
int pd_ctrl_peer_new(struct pd_ctrl *c, struct pd_ctrl_peer **out);
void pd_ctrl_peer_free(struct pd_ctrl_peer *p);
void pd_ctrl_peer_store_hello(struct pd_ctrl_peer *p, const struct pd_msg_hello *h);
void pd_ctrl_peer_up(struct pd_ctrl *c, struct pd_ctrl_peer *p);
void pd_ctrl_peer_down(struct pd_ctrl *c, struct pd_ctrl_peer *p, int err, int redial);
void pd_ctrl_peer_merge(struct pd_ctrl *c, struct pd_ctrl_peer *from, struct pd_ctrl_peer *to);
int pd_ctrl_peer_transmit(struct pd_ctrl *c, struct pd_ctrl_peer *p, uint32_t type,
			  const void *buf, size_t len);
void pd_ctrl_peer_flush(struct pd_ctrl *c, struct pd_ctrl_peer *p);
int pd_ctrl_hello_send(struct pd_ctrl *c, struct pd_ctrl_dealer *d);

/* pd_ctrl_rx.c */
/* Where a message came from: our DEALER d, or the ROUTER from routing id rid. */
struct pd_ctrl_from {
	struct pd_ctrl_dealer *d;
	const uint8_t *rid;
	uint32_t rid_len;
};

void pd_ctrl_rx(struct pd_ctrl *c, const struct pd_ctrl_from *f, const void *buf, size_t len);
void pd_ctrl_reply_error(struct pd_ctrl *c, const struct pd_ctrl_from *f, int code,
			 uint64_t seq, const char *text);

/* pd_ctrl.c */
int pd_ctrl_encode(struct pd_ctrl *c, const struct pd_msg *m);

#endif
