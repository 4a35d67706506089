/* SPDX-License-Identifier: MIT */
/*
 * pdbroker: the rdma transport (pd_rdma.h) wired in.
 *
 * Start: with "rdma" in --transport, one pd_rdma instance on the device of
 * the --data host (or --rdma-dev), with the payload arenas this broker has
 * registered once (recv: peers write there; send: the staging slots). A
 * broker with recv slots listens on the data host, an ephemeral rdma_cm
 * port, and offers "rdma" = "ip:port" in Hello with the recv arena's rkey
 * and base. If RDMA cannot be set up (no device, a wildcard --data host,
 * ...), the reason is logged and kept (b->rdma_why), rdma is not offered,
 * and a sender's choice for each peer reads "fallback: rdma: <why>"; with
 * --require rdma the broker does not start.
 *
 * Sending: a peer's Hello that offers rdma gets pd_rdma_connect() with its
 * rkey, base, recv pool geometry and our data token (the receiver's
 * accept_peer finds us by it, as pd_tcp's lanes are). Every connection has
 * its own pd_rdma peer id, RDMA_CONN(generation, peer id), so that the
 * completions of a connection already replaced (a peer's new session)
 * cannot fail the new one. Completions go through broker_cpls_handle(), as
 * TCP's and shm's do: PD_CPL_PEER resets the peer's control session and
 * fails its requests. A connection that fails before any write of it
 * completed (rejected, unreachable, ...; not a disconnect) is not tried
 * again for that session of the peer (its epoch): tcp instead, or, under
 * --require rdma, the peer's batches fail; a peer's restart tries again.
 *
 * Receiving: RDMA writes land unseen; an accepted connection marks the
 * peer's rdma_in (pd_broker_net.c), which lets its PutDones commit slots
 * no TCP write landed in (pd_shmx_recv.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>

#include <bsd/string.h>

#include "pd_broker_int.h"
#include "pd_err.h"
#include "pd_log.h"

#define PEER_BITS          10u /* MAX_TOKENS peer ids */
#define RDMA_CONN(gen, id) (((gen) << PEER_BITS) | (id))
#define CONN_PEER(c)       ((c) & (MAX_TOKENS - 1u))
#define MAX_PEERS          64u   /* receivers connected at once */
#define CONNECT_MS         3000u /* also bounds the drain of a disconnect (control thread) */

_Static_assert(MAX_TOKENS == 1u << PEER_BITS, "a connection id holds a peer id");

/* ---- setup --------------------------------------------------------------------------- */

static int rdma_accept_peer(void *ctx, uint64_t token, uint32_t *peer)
{
	return broker_accept_token(ctx, token, peer, 1);
}

static const struct pd_rdma_ops rdma_ops = { .accept_peer = rdma_accept_peer };

static void rdma_drain(void *ctx, uint32_t events);

/* The --data host, when RDMA can use it: numeric and not a wildcard. */
static int data_host(struct pd_broker *b, char *host, size_t hlen)
{
	const char *colon = strrchr(b->cfg.data, ':');
	struct in6_addr a6;
	struct in_addr a4;
	size_t n = colon ? (size_t)(colon - b->cfg.data) : 0;
	const char *p = b->cfg.data;

	if (n >= 2 && p[0] == '[' && p[n - 1] == ']') {
		p++;
		n -= 2;
	}
	if (!colon || n >= hlen)
		return -EINVAL;
	memcpy(host, p, n);
	host[n] = '\0';
	if (inet_pton(AF_INET, host, &a4) == 1)
		return a4.s_addr == htonl(INADDR_ANY) ? -EDESTADDRREQ : 0;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_UNSPECIFIED(&a6) ? -EDESTADDRREQ : 0;
	return -EINVAL;
}

static void rdma_opts(struct pd_broker *b, const char *host, struct pd_rdma_opts *o)
{
	const struct pd_pool *sp = &b->shm.send, *rp = &b->shm.recv;

	pd_rdma_opts_init(o);
	o->dev = b->cfg.rdma_dev[0] ? b->cfg.rdma_dev : NULL;
	o->addr = host;
	if (b->shm.has_recv) {
		o->recv_base = rp->arena;
		o->recv_len = (uint64_t)rp->nslots * rp->slot_size;
	}
	if (b->shm.has_send) {
		o->send_base = sp->arena;
		o->send_len = (uint64_t)sp->nslots * sp->slot_size;
	}
	o->ops = &rdma_ops;
	o->ctx = b;
	o->qps = b->cfg.rdma_qps;
	o->max_peers = MAX_PEERS;
	/* Every write is one staging slot: a peer never has more out than that. */
	o->queue_depth = b->cfg.send_slots > o->queue_depth ? b->cfg.send_slots : o->queue_depth;
	if (o->queue_depth > PD_RDMA_MAX_DEPTH)
		o->queue_depth = PD_RDMA_MAX_DEPTH;
	o->max_conns = PD_RDMA_MAX_CONNS;
	o->connect_timeout_ms = CONNECT_MS;
}

/* Our listener, as Hello advertises it. */
static int rdma_listen(struct pd_broker *b, const char *host)
{
	int rc = pd_rdma_listen(b->rdma, host, 0);

	if (rc < 0)
		return rc;
	rc = pd_rdma_port(b->rdma);
	if (rc < 0)
		return rc;
	(void)snprintf(b->rdma_addr, sizeof(b->rdma_addr), strchr(host, ':') ? "[%s]:%d" : "%s:%d",
		       host, rc);
	return 0;
}

/* Create, listen (with recv slots), join the loop. what: the step that failed. */
static int rdma_start(struct pd_broker *b, const char *host, const char **what)
{
	struct pd_rdma_opts o;
	int rc;

	rdma_opts(b, host, &o);
	rc = pd_rdma_create(&o, &b->rdma);
	if (rc == 0 && b->shm.has_recv) {
		*what = "listen";
		rc = rdma_listen(b, host);
	}
	if (rc == 0) {
		*what = "event loop";
		rc = pd_loop_add(b->loop, pd_rdma_event_fd(b->rdma), EPOLLIN, rdma_drain, b);
	}
	return rc;
}

/* why = a b c d, cut to fit (a reason for people: a cut one still reads). */
static void why_set(struct pd_broker *b, const char *w0, const char *w1, const char *w2,
		    const char *w3)
{
	(void)strlcpy(b->rdma_why, w0, sizeof(b->rdma_why));
	(void)strlcat(b->rdma_why, w1, sizeof(b->rdma_why));
	(void)strlcat(b->rdma_why, w2, sizeof(b->rdma_why));
	(void)strlcat(b->rdma_why, w3, sizeof(b->rdma_why));
}

/* rdma_start() on the --data host; on failure, the reason in rdma_why. */
static int rdma_make(struct pd_broker *b)
{
	char host[PD_CFG_ENDPOINT_MAX];
	const char *what = NULL;
	int rc = data_host(b, host, sizeof(host));

	if (rc < 0) {
		why_set(b, "--data ", b->cfg.data, ": ",
			rc == -EDESTADDRREQ ? "a wildcard, RDMA needs the data address" :
					      "not a numeric address");
		return rc;
	}
	rc = rdma_start(b, host, &what);
	if (rc == 0)
		return 0;
	if (what)
		why_set(b, what, ": ", pd_strerror(rc), "");
	else if (b->cfg.rdma_dev[0])
		why_set(b, "--rdma-dev ", b->cfg.rdma_dev, ": ", pd_strerror(rc));
	else
		why_set(b, "device of ", host, ": ", pd_strerror(rc));
	if (b->rdma)
		pd_loop_del(b->loop, pd_rdma_event_fd(b->rdma)); /* (when added) */
	pd_rdma_destroy(b->rdma);
	b->rdma = NULL;
	b->rdma_addr[0] = '\0';
	return rc;
}

int broker_rdma_init(struct pd_broker *b, char *err, size_t errlen)
{
	struct pd_rdma_local l;
	int rc;

	if (!(b->cfg.transport.mask & (1u << PD_XPORT_RDMA)))
		return 0;
	rc = rdma_make(b);
	if (rc < 0 && (b->cfg.require.mask & (1u << PD_XPORT_RDMA))) {
		size_t n = strlen(b->rdma_why), e = strlen(pd_strerror(rc)) + 2;

		if (rc == -EDESTADDRREQ)
			rc = -EINVAL;
		else if (n > e) /* the caller adds the error's text */
			n -= e;
		pd_err_set(err, errlen, "--require rdma: RDMA cannot be set up: %.*s", (int)n,
			   b->rdma_why);
		return rc;
	}
	if (rc < 0) {
		PD_LOG(WARN, rdma, "rdma not offered, peers get the next transport: %s",
		       b->rdma_why);
		return 0;
	}
	(void)pd_rdma_local_info(b->rdma, &l);
	PD_LOG(INFO, rdma, "rdma on %s, %u QPs per peer%s%s", l.dev, b->cfg.rdma_qps,
	       b->rdma_addr[0] ? ", listening on " : " (send only)", b->rdma_addr);
	return 0;
}

void broker_rdma_fini(struct pd_broker *b)
{
	if (!b->rdma)
		return;
	pd_loop_del(b->loop, pd_rdma_event_fd(b->rdma));
	pd_rdma_destroy(b->rdma); /* QPs gone: the HCA touches neither arena after this */
	b->rdma = NULL;
}

/* ---- sending ------------------------------------------------------------------------- */

static int rdma_connect(struct pd_broker *b, uint32_t peer, const struct pd_msg_hello *h,
			const char *host, uint16_t port)
{
	struct peer_xport *x = &b->px[peer];
	struct pd_rdma_remote rem = { .base = h->rdma_base, .slot_size = h->slot_size,
				      .rkey = h->rdma_rkey, .nslots = h->recv_slots,
				      .token = broker_data_token(b) };
	uint32_t gen = (b->rdma_gen + 1) & ((1u << (32 - PEER_BITS)) - 1);
	int rc;

	broker_rdma_down(b, peer); /* QPs left from its last session */
	if (gen == 0)
		gen = 1;
	rc = pd_rdma_connect(b->rdma, RDMA_CONN(gen, peer), host, port, &rem);
	if (rc < 0)
		return rc;
	b->rdma_gen = gen;
	x->rdma_conn = RDMA_CONN(gen, peer);
	x->rdma_wrote = 0;
	x->rdma_epoch = h->epoch;
	PD_LOG(INFO, rdma, "peer %u: connecting %u QPs to %s:%u", peer, b->cfg.rdma_qps, host,
	       port);
	return 0;
}

int broker_rdma_try(struct pd_broker *b, uint32_t peer, const struct pd_msg_hello *h, char *r,
		    size_t rlen)
{
	const struct peer_xport *x = &b->px[peer];
	char host[PD_WIRE_ADDR_MAX + 1];
	uint16_t port;
	int rc;

	if (!b->rdma) {
		(void)strlcpy(r, b->rdma_why[0] ? b->rdma_why : "not set up", rlen);
		return -ENODEV;
	}
	rc = broker_offered_hostport(h, "rdma", host, sizeof(host), &port);
	if (rc == -ENOENT) {
		(void)strlcpy(r, "not offered by the peer", rlen);
		return rc;
	}
	if (rc < 0 || !h->rdma_base || !h->recv_slots) {
		(void)strlcpy(r, "the peer's address or memory key is unusable", rlen);
		return -EPROTO;
	}
	if (x->rdma_bad_err && x->rdma_bad_epoch == h->epoch) {
		(void)snprintf(r, rlen, "connection failed: %s", pd_strerror(x->rdma_bad_err));
		return x->rdma_bad_err;
	}
	rc = rdma_connect(b, peer, h, host, port);
	if (rc < 0)
		(void)snprintf(r, rlen, "connect: %s", pd_strerror(rc));
	return rc;
}

void broker_rdma_down(struct pd_broker *b, uint32_t peer)
{
	struct peer_xport *x = peer < MAX_TOKENS ? &b->px[peer] : NULL;

	if (!x || !x->rdma_conn)
		return;
	if (b->rdma) /* writes posted may finish (bounded); the rest: -ECONNABORTED */
		(void)pd_rdma_disconnect(b->rdma, x->rdma_conn);
	x->rdma_conn = 0;
}

int broker_rdma_ready(const struct pd_broker *b, uint32_t peer)
{
	return b->rdma && peer < MAX_TOKENS && b->px[peer].rdma_conn;
}

int broker_rdma_post(struct pd_broker *b, const struct pd_tx_batch_view *v, uint32_t *posted)
{
	uint32_t conn = b->px[v->peer].rdma_conn, k = 0; /* ready: v->peer < MAX_TOKENS */
	struct pd_rdma_xfer x[64];
	int rc = 0;

	for (uint32_t i = 0; i <= v->n && rc >= 0; i++) {
		if (k && (i == v->n || k == PD_ARRAY_SIZE(x))) {
			rc = pd_rdma_post(b->rdma, conn, x, k); /* all k, or none */
			*posted += rc > 0 ? (uint32_t)rc : 0;
			k = 0;
		}
		if (i == v->n || v->remote[i] < 0)
			continue;
		x[k++] = (struct pd_rdma_xfer){ .cookie = v->seq, .len = v->chunks[i].len,
						.src = pd_pool_data(&b->shm.send, v->chunks[i].slot),
						.slot = (uint32_t)v->remote[i] };
	}
	return rc < 0 ? rc : 0;
}

/* ---- completions ----------------------------------------------------------------------- */

/* A completion of connection c->peer: to the peer's id, or dropped (a
 * PD_CPL_PEER of a connection already replaced). 1 to keep it. */
static int cpl_note(struct pd_broker *b, struct pd_cpl *c)
{
	struct peer_xport *x = &b->px[CONN_PEER(c->peer)];
	int current = x->rdma_conn == c->peer;

	c->peer = CONN_PEER(c->peer);
	if (c->kind == PD_CPL_WRITE) {
		x->rdma_wrote |= current && c->status == 0;
		return 1; /* its batch ends either way */
	}
	if (!current)
		return 0;
	if (!x->rdma_wrote && c->status != -ECONNRESET) {
		x->rdma_bad_epoch = x->rdma_epoch;
		x->rdma_bad_err = c->status;
	}
	PD_LOG(WARN, rdma, "peer %u: RDMA connection failed: %s%s", c->peer,
	       pd_strerror(c->status),
	       x->rdma_bad_err && x->rdma_bad_epoch == x->rdma_epoch ?
		       " (before any write: not tried again with this session of the peer)" : "");
	return 1;
}

static void rdma_drain(void *ctx, uint32_t events)
{
	struct pd_broker *b = ctx;
	struct pd_cpl c[64];
	int n;

	(void)events;
	while ((n = pd_rdma_poll(b->rdma, c, 64)) > 0) {
		int k = 0;

		for (int i = 0; i < n; i++)
			if (cpl_note(b, &c[i]))
				c[k++] = c[i];
		broker_cpls_handle(b, c, k);
	}
}
