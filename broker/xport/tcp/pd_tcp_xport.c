/* SPDX-License-Identifier: MIT */
/*
 * The tcp transport behind the data-plane interface (pd_xport.h): lanes to
 * each peer's advertised "tcp" address, a listener on --data with recv
 * slots. What lands is the broker's to allow (up->claim) and to count
 * (up->landed); a connection is the broker's to recognise (up->accept_peer).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd_addr.h"
#include "pd_tcp.h"
#include "pd_xport.h"

#define MAX_PEERS_TRACKED 1024u /* lanes() answers for peer ids below this */

struct tcp_x {
	struct pd_xport base;
	struct pd_tcp *t;
	const struct pd_xport_up *up;
	void *ctx;
	uint32_t lanes;                /* per connected peer */
	uint8_t *connected;            /* MAX_PEERS_TRACKED */
	struct pd_xport_offer offer;
};

static struct tcp_x *of(struct pd_xport *x)
{
	return pd_container_of(x, struct tcp_x, base);
}

static const struct tcp_x *cof(const struct pd_xport *x)
{
	return pd_container_of_const(x, struct tcp_x, base);
}

/* ---- receive side: the broker decides ------------------------------------------------- */

static int on_accept(void *ctx, uint64_t token, uint32_t *peer)
{
	struct tcp_x *x = ctx;

	return x->up->accept_peer(x->ctx, token, PD_XPORT_TCP, peer);
}

static int on_claim(void *ctx, uint32_t peer, const struct pd_tcp_wdesc *d, struct pd_tcp_dst *dst)
{
	struct tcp_x *x = ctx;

	return x->up->claim(x->ctx, peer, d->slot, d->gen, d->len, &dst->ptr, &dst->cap);
}

static void on_landed(void *ctx, uint32_t peer, const struct pd_tcp_wdesc *d,
		      const struct pd_tcp_dst *dst, int status)
{
	struct tcp_x *x = ctx;

	(void)dst;
	x->up->landed(x->ctx, peer, d->slot, d->gen, d->len, status);
}

static const struct pd_tcp_ops tcp_up = {
	.accept_peer = on_accept, .claim = on_claim, .landed = on_landed,
};

/* ---- setup ---------------------------------------------------------------------------------- */

/* Listen on --data; offer it ("0.0.0.0" and "*" bind every address and
 * advertise loopback: set a real address for peers on other hosts). */
static int listen_data(struct tcp_x *x, const char *data, char *why, size_t wlen)
{
	char host[PD_ADDR_HOST_MAX + 1];
	uint16_t port;
	int rc = pd_addr_split(data, strlen(data), PD_ADDR_PORT_ANY, host, sizeof(host), &port);
	int any = rc == 0 && (!strcmp(host, "*") || !strcmp(host, "0.0.0.0"));

	if (rc == 0)
		rc = pd_tcp_listen(x->t, any ? "0.0.0.0" : host, port);
	if (rc < 0) {
		(void)snprintf(why, wlen, "--data %s: %s", data, pd_strerror(rc));
		return rc;
	}
	(void)pd_addr_join(x->offer.addr, sizeof(x->offer.addr), any ? "127.0.0.1" : host,
			   (uint16_t)pd_tcp_port(x->t));
	return 0;
}

static void tcp_destroy(struct pd_xport *base)
{
	struct tcp_x *x = base ? of(base) : NULL;

	if (!x)
		return;
	pd_tcp_destroy(x->t); /* joins the data threads: no write lands after */
	free(x->connected);
	free(x);
}

static int tcp_create(const struct pd_xport_env *env, int recv_side, struct pd_xport **out,
		      char *why, size_t wlen)
{
	struct tcp_x *x = calloc(1, sizeof(*x));
	struct pd_tcp_opts o;
	int rc;

	if (!x || !(x->connected = calloc(MAX_PEERS_TRACKED, 1))) {
		free(x);
		return -ENOMEM;
	}
	x->base.ops = &pd_xport_tcp_ops;
	x->up = env->up;
	x->ctx = env->ctx;
	x->lanes = env->threads;
	pd_tcp_opts_init(&o);
	o.ops = &tcp_up;
	o.ctx = x;
	o.lanes = env->threads;
	o.queue_depth = pd_xport_queue_depth(env, o.queue_depth, PD_TCP_MAX_DEPTH);
	if (env->max_frame > o.max_frame)
		o.max_frame = (uint32_t)env->max_frame;
	rc = pd_tcp_create(&o, &x->t);
	if (rc < 0)
		(void)snprintf(why, wlen, "TCP transport (%u lanes, %u writes a peer): %s", o.lanes,
			       o.queue_depth, pd_strerror(rc));
	else if (recv_side)
		rc = listen_data(x, env->data, why, wlen);
	if (rc < 0) {
		tcp_destroy(&x->base);
		return rc;
	}
	*out = &x->base;
	return 0;
}

/* ---- sending ------------------------------------------------------------------------------- */

static void tcp_offer(const struct pd_xport *base, struct pd_xport_offer *o)
{
	*o = cof(base)->offer;
}

static int tcp_connect(struct pd_xport *base, uint32_t peer, const struct pd_xport_peer *p,
		       char *why, size_t wlen)
{
	struct tcp_x *x = of(base);
	char host[PD_ADDR_HOST_MAX + 1];
	uint16_t port;
	int rc = p->addr ? pd_addr_split(p->addr, strlen(p->addr), 0, host, sizeof(host), &port) :
			   -ENOENT;

	if (rc < 0) {
		(void)snprintf(why, wlen, "%s", rc == -ENOENT ? "not offered by the peer" :
						 "the peer's address is unusable");
		return rc;
	}
	(void)pd_tcp_disconnect(x->t, peer); /* lanes left from its last session */
	rc = pd_tcp_connect(x->t, peer, host, port, p->token);
	if (rc < 0)
		(void)snprintf(why, wlen, "cannot open data lanes to %s: %s", p->addr,
			       pd_strerror(rc));
	else if (peer < MAX_PEERS_TRACKED)
		x->connected[peer] = 1;
	return rc;
}

static void tcp_fence(struct pd_xport *base, int (*stale)(void *ctx, uint32_t lane), void *ctx)
{
	(void)pd_tcp_fence(of(base)->t, stale, ctx);
}

static void tcp_disconnect(struct pd_xport *base, uint32_t peer)
{
	struct tcp_x *x = of(base);

	(void)pd_tcp_disconnect(x->t, peer);
	if (peer < MAX_PEERS_TRACKED)
		x->connected[peer] = 0;
}

static int tcp_ready(const struct pd_xport *base, uint32_t peer)
{
	(void)base;
	(void)peer;
	return 1; /* lanes come up behind the writes: pd_tcp queues them */
}

/* One at a time: pd_tcp takes what its queue holds, and the rest waits. */
static int tcp_post(struct pd_xport *base, uint32_t peer, const struct pd_xfer *v, uint32_t n)
{
	struct tcp_x *x = of(base);
	uint32_t i;

	for (i = 0; i < n; i++) {
		int rc = pd_tcp_post(x->t, peer, &v[i], 1);

		if (rc < 0)
			return i ? (int)i : rc;
		if (rc == 0)
			return i ? (int)i : -EAGAIN;
	}
	return (int)n;
}

static int tcp_poll(struct pd_xport *base, struct pd_cpl *c, uint32_t max)
{
	return pd_tcp_poll(of(base)->t, c, max);
}

static int tcp_event_fd(const struct pd_xport *base)
{
	return pd_tcp_event_fd(cof(base)->t);
}

static uint32_t tcp_lanes(const struct pd_xport *base, uint32_t peer)
{
	const struct tcp_x *x = cof(base);

	return peer < MAX_PEERS_TRACKED && x->connected[peer] ? x->lanes : 0;
}

static uint32_t tcp_counters(const struct pd_xport *base, const char **names, uint64_t *values,
			     uint32_t max)
{
	struct pd_tcp_stats st;
	uint32_t n = 0;

	pd_tcp_get_stats(cof(base)->t, &st);
	PD_TCP_STAT_FIELDS(PD_XPORT_COUNTER)
	return n;
}

const struct pd_xport_ops pd_xport_tcp_ops = {
	.name = "tcp", .id = PD_XPORT_TCP, .flags = 0,
	.create = tcp_create, .destroy = tcp_destroy, .offer = tcp_offer,
	.connect = tcp_connect, .disconnect = tcp_disconnect, .ready = tcp_ready,
	.fence = tcp_fence,
	.post = tcp_post, .poll = tcp_poll, .event_fd = tcp_event_fd, .lanes = tcp_lanes,
	.counters = tcp_counters,
};
