/* SPDX-License-Identifier: MIT */
/*
 * The rdma transport behind the data-plane interface (pd_xport.h).
 *
 * Setup: one pd_rdma instance on the device of the --data host (or
 * --rdma-dev) with this broker's payload arenas registered once (recv:
 * peers write there; send: the staging slots). With recv slots it listens
 * on the data host, an ephemeral rdma_cm port, and offers "ip:port" with
 * the recv arena's rkey and base. When it cannot be set up (no device, a
 * wildcard --data host, ...), create says why: the broker falls back, or
 * refuses to start under --require rdma.
 *
 * Sending: connect gives the peer pd_rdma_connect() with its rkey, base,
 * recv pool geometry and our data token (its accept_peer finds us by it).
 * Every connection has its own pd_rdma peer id, CONN(generation, peer), so
 * the completions of a connection already replaced (a peer's new session)
 * cannot fail the new one: poll maps them back to the peer, and drops a
 * PD_CPL_PEER of an old connection. A connection that fails before any of
 * its writes completed (rejected, unreachable, ...; not a disconnect) is not
 * tried again for that session of the peer (its epoch): its next connect
 * says why, and the broker picks the next transport; a restart (new epoch)
 * tries again.
 *
 * Receiving: writes land unseen; a connection we accept was vouched for by
 * up->accept_peer (which then lets the peer's PutDones commit).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bsd/string.h>

#include "pd_addr.h"
#include "pd_log.h"
#include "pd_rdma.h"
#include "pd_xport.h"

#define PEER_BITS     10u /* peer ids this transport tracks */
#define MAX_IDS       (1u << PEER_BITS)
#define CONN(gen, id) (((gen) << PEER_BITS) | (id))
#define CONN_PEER(c)  ((c) & (MAX_IDS - 1u))
#define MAX_PEERS     64u   /* receivers connected at once */
#define CONNECT_MS    3000u /* also bounds the drain of a disconnect (control thread) */

/* Per peer: the connection of its session. */
struct rpeer {
	uint32_t conn;                 /* pd_rdma peer id, 0: none */
	uint32_t wrote;                /* a write of it completed */
	uint64_t epoch;                /* the peer's epoch it was made for */
	uint64_t bad_epoch;            /* an epoch whose connection failed unused */
	int32_t bad_err;               /* with this (0: none) */
};

struct rdma_x {
	struct pd_xport base;
	struct pd_rdma *r;
	const struct pd_xport_up *up;
	void *ctx;
	uint32_t qps;
	uint32_t gen;                  /* generation of the last connection made */
	struct rpeer *p;               /* MAX_IDS */
	struct pd_xport_offer offer;
};

static struct rdma_x *of(struct pd_xport *x)
{
	return pd_container_of(x, struct rdma_x, base);
}

static const struct rdma_x *cof(const struct pd_xport *x)
{
	return pd_container_of_const(x, struct rdma_x, base);
}

/* ---- setup --------------------------------------------------------------------------- */

static int on_accept(void *ctx, uint64_t token, uint32_t *peer)
{
	struct rdma_x *x = ctx;

	return x->up->accept_peer(x->ctx, token, PD_XPORT_RDMA, peer);
}

static const struct pd_rdma_ops rdma_up = { .accept_peer = on_accept };

/* The --data host, when RDMA can use it: numeric and not a wildcard. */
static int data_host(const char *data, char *host, size_t hlen)
{
	struct in6_addr a6;
	struct in_addr a4;

	if (pd_addr_split(data, strlen(data), PD_ADDR_PORT_ANY, host, hlen, NULL) < 0)
		return -EINVAL;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return a4.s_addr == htonl(INADDR_ANY) ? -EDESTADDRREQ : 0;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_UNSPECIFIED(&a6) ? -EDESTADDRREQ : 0;
	return -EINVAL;
}

static void opts_of(const struct pd_xport_env *env, struct rdma_x *x, const char *host,
		    struct pd_rdma_opts *o)
{
	const struct pd_pool *rp = &env->shm->recv;

	pd_rdma_opts_init(o);
	o->dev = env->rdma_dev[0] ? env->rdma_dev : NULL;
	o->addr = host;
	if (env->shm->has_recv) {
		o->recv_base = rp->arena;
		o->recv_len = (uint64_t)rp->nslots * rp->slot_size;
	}
	if (env->shm->has_send) {
		o->send_base = env->shm->send_part[0].arena; /* every send pool's */
		o->send_len = pd_layout_send_arena_len(env->shm);
	}
	o->ops = &rdma_up;
	o->ctx = x;
	o->qps = env->rdma_qps;
	o->max_peers = MAX_PEERS;
	o->queue_depth = pd_xport_queue_depth(env, o->queue_depth, PD_RDMA_MAX_DEPTH);
	o->max_conns = PD_RDMA_MAX_CONNS;
	o->connect_timeout_ms = CONNECT_MS;
}

/* Listen and fill our Hello entry. */
static int listen_on(struct rdma_x *x, const char *host)
{
	struct pd_rdma_local l;
	int rc = pd_rdma_listen(x->r, host, 0);

	if (rc == 0)
		rc = pd_rdma_port(x->r);
	if (rc < 0)
		return rc;
	(void)pd_addr_join(x->offer.addr, sizeof(x->offer.addr), host, (uint16_t)rc);
	if (pd_rdma_local_info(x->r, &l) == 0) {
		x->offer.rdma_rkey = l.rkey;
		x->offer.rdma_base = l.base;
	}
	return 0;
}

/* Why set-up failed, for people: the step, or the device of what. */
static void why_of(const struct pd_xport_env *env, const char *host, const char *what, int rc,
		   char *why, size_t wlen)
{
	if (rc == -EDESTADDRREQ || rc == -EINVAL)
		(void)snprintf(why, wlen, "--data %s: %s", env->data,
			       rc == -EDESTADDRREQ ? "a wildcard, RDMA needs the data address" :
						     "not a numeric address");
	else if (what)
		(void)snprintf(why, wlen, "%s: %s", what, pd_strerror(rc));
	else if (env->rdma_dev[0])
		(void)snprintf(why, wlen, "--rdma-dev %s: %s", env->rdma_dev, pd_strerror(rc));
	else
		(void)snprintf(why, wlen, "device of %s: %s", host, pd_strerror(rc));
}

static void rdma_destroy(struct pd_xport *base)
{
	struct rdma_x *x = base ? of(base) : NULL;

	if (!x)
		return;
	pd_rdma_destroy(x->r); /* QPs gone: the HCA touches neither arena after this */
	free(x->p);
	free(x);
}

static int rdma_create(const struct pd_xport_env *env, int recv_side, struct pd_xport **out,
		       char *why, size_t wlen)
{
	struct rdma_x *x = calloc(1, sizeof(*x));
	char host[PD_ADDR_HOST_MAX + 1] = "";
	const char *what = NULL;
	struct pd_rdma_opts o;
	int rc;

	if (!x || !(x->p = calloc(MAX_IDS, sizeof(*x->p)))) {
		free(x);
		return -ENOMEM;
	}
	x->base.ops = &pd_xport_rdma_ops;
	x->up = env->up;
	x->ctx = env->ctx;
	x->qps = env->rdma_qps;
	rc = data_host(env->data, host, sizeof(host));
	if (rc == 0) {
		opts_of(env, x, host, &o);
		rc = pd_rdma_create(&o, &x->r);
	}
	if (rc == 0 && recv_side) {
		what = "listen";
		rc = listen_on(x, host);
	}
	if (rc < 0) {
		why_of(env, host, what, rc, why, wlen);
		rdma_destroy(&x->base);
		return rc == -EDESTADDRREQ ? -EINVAL : rc;
	}
	PD_LOG(INFO, rdma, "rdma on the device of %s, %u QPs per peer%s%s", host, x->qps,
	       x->offer.addr[0] ? ", listening on " : " (send only)", x->offer.addr);
	*out = &x->base;
	return 0;
}

static void rdma_offer(const struct pd_xport *base, struct pd_xport_offer *o)
{
	*o = cof(base)->offer;
}

/* ---- sending ------------------------------------------------------------------------- */

static void rdma_fence(struct pd_xport *base, int (*stale)(void *ctx, uint32_t lane), void *ctx)
{
	(void)pd_rdma_fence(of(base)->r, stale, ctx);
}

static void rdma_disconnect(struct pd_xport *base, uint32_t peer)
{
	struct rdma_x *x = of(base);
	struct rpeer *p = peer < MAX_IDS ? &x->p[peer] : NULL;

	if (!p || !p->conn)
		return;
	(void)pd_rdma_disconnect(x->r, p->conn); /* posted writes may finish (bounded) */
	p->conn = 0;
}

static int rdma_start(struct rdma_x *x, uint32_t peer, const struct pd_xport_peer *p,
		      const char *host, uint16_t port)
{
	struct pd_rdma_remote rem = { .base = p->rdma_base, .slot_size = p->slot_size,
				      .rkey = p->rdma_rkey, .nslots = p->recv_slots,
				      .token = p->token };
	uint32_t gen = (x->gen + 1) & ((1u << (32 - PEER_BITS)) - 1);
	int rc;

	if (gen == 0)
		gen = 1;
	rc = pd_rdma_connect(x->r, CONN(gen, peer), host, port, &rem);
	if (rc < 0)
		return rc;
	x->gen = gen;
	x->p[peer] = (struct rpeer){ .conn = CONN(gen, peer), .epoch = p->epoch,
				     .bad_epoch = x->p[peer].bad_epoch,
				     .bad_err = x->p[peer].bad_err };
	PD_LOG(INFO, rdma, "peer %u: connecting %u QPs to %s:%u", peer, x->qps, host, port);
	return 0;
}

static int rdma_connect(struct pd_xport *base, uint32_t peer, const struct pd_xport_peer *p,
			char *why, size_t wlen)
{
	struct rdma_x *x = of(base);
	char host[PD_ADDR_HOST_MAX + 1];
	uint16_t port;
	int rc;

	if (peer >= MAX_IDS || !p->addr) {
		(void)strlcpy(why, "not offered by the peer", wlen);
		return -ENOENT;
	}
	rc = pd_addr_split(p->addr, strlen(p->addr), 0, host, sizeof(host), &port);
	if (rc < 0 || !p->rdma_base || !p->recv_slots) {
		(void)strlcpy(why, "the peer's address or memory key is unusable", wlen);
		return -EPROTO;
	}
	if (x->p[peer].bad_err && x->p[peer].bad_epoch == p->epoch) {
		(void)snprintf(why, wlen, "connection failed: %s", pd_strerror(x->p[peer].bad_err));
		return x->p[peer].bad_err;
	}
	rdma_disconnect(base, peer); /* QPs left from its last session */
	rc = rdma_start(x, peer, p, host, port);
	if (rc < 0)
		(void)snprintf(why, wlen, "connect: %s", pd_strerror(rc));
	return rc;
}

static int rdma_ready(const struct pd_xport *base, uint32_t peer)
{
	return peer < MAX_IDS && cof(base)->p[peer].conn;
}

static int rdma_post(struct pd_xport *base, uint32_t peer, const struct pd_xfer *v, uint32_t n)
{
	struct rdma_x *x = of(base);

	if (!rdma_ready(base, peer))
		return -ENOTCONN;
	return pd_rdma_post(x->r, x->p[peer].conn, v, n); /* all n, or none */
}

/* A completion of connection c->peer: to the peer's id, or dropped (a
 * PD_CPL_PEER of a connection already replaced). 1 to keep it. */
static int cpl_note(struct rdma_x *x, struct pd_cpl *c)
{
	struct rpeer *p = &x->p[CONN_PEER(c->peer)];
	int current = p->conn == c->peer;

	c->peer = CONN_PEER(c->peer);
	if (c->kind == PD_CPL_WRITE) {
		p->wrote |= current && c->status == 0;
		return 1; /* its batch ends either way */
	}
	if (!current)
		return 0;
	if (!p->wrote && c->status != -ECONNRESET) {
		p->bad_epoch = p->epoch;
		p->bad_err = c->status;
	}
	PD_LOG(WARN, rdma, "peer %u: RDMA connection failed: %s%s", c->peer,
	       pd_strerror(c->status),
	       p->bad_err && p->bad_epoch == p->epoch ?
		       " (before any write: not tried again with this session of the peer)" : "");
	return 1;
}

static int rdma_poll(struct pd_xport *base, struct pd_cpl *c, uint32_t max)
{
	struct rdma_x *x = of(base);
	int n = pd_rdma_poll(x->r, c, max), k = 0;

	for (int i = 0; i < n; i++)
		if (cpl_note(x, &c[i]))
			c[k++] = c[i];
	return n < 0 ? n : k;
}

static int rdma_event_fd(const struct pd_xport *base)
{
	return pd_rdma_event_fd(cof(base)->r);
}

static uint32_t rdma_lanes(const struct pd_xport *base, uint32_t peer)
{
	const struct rdma_x *x = cof(base);

	return rdma_ready(base, peer) ? x->qps : 0;
}

static uint32_t rdma_counters(const struct pd_xport *base, const char **names, uint64_t *values,
			      uint32_t max)
{
	struct pd_rdma_stats st;
	uint32_t n = 0;

	pd_rdma_get_stats(cof(base)->r, &st);
	PD_RDMA_STAT_FIELDS(PD_XPORT_COUNTER)
	return n;
}

const struct pd_xport_ops pd_xport_rdma_ops = {
	.name = "rdma", .id = PD_XPORT_RDMA, .flags = PD_XPORT_F_UNSEEN,
	.create = rdma_create, .destroy = rdma_destroy, .offer = rdma_offer,
	.connect = rdma_connect, .disconnect = rdma_disconnect, .ready = rdma_ready,
	.fence = rdma_fence,
	.post = rdma_post, .poll = rdma_poll, .event_fd = rdma_event_fd, .lanes = rdma_lanes,
	.counters = rdma_counters,
};
