/* SPDX-License-Identifier: MIT */
/*
 * The peer table: one entry per remote broker (by name), its routes (our
 * DEALER, its routing id at our ROUTER), its state, the messages held until
 * its HelloAck, and the heartbeat deadlines.
 *
 *   NEW  --HelloAck / Hello-->  UP  --silence, new epoch, new session-->  DOWN
 *   NEW  --handshake timeout-->  DOWN  --Hello / HelloAck-->  UP
 *   NEW  --HelloAck names a broker known as another id-->  ALIAS (of that id)
 *   DOWN (and its ALIASes)  --evicted (pd_ctrl_evict.c)-->  FREE  --new peer-->  NEW
 *
 * The table is small (max_peers) and scanned linearly: lookups happen per
 * Hello and per ROUTER message, which a control plane can afford.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <bsd/string.h>

#include "pd_ctrl_int.h"
#include "pd_log.h"

struct pd_ctrl_peer *pd_ctrl_peer_slot(const struct pd_ctrl *c, uint32_t id)
{
	return id >= 1 && id <= c->npeers ? c->peers[id - 1] : NULL;
}

struct pd_ctrl_peer *pd_ctrl_peer_get(const struct pd_ctrl *c, uint32_t id)
{
	struct pd_ctrl_peer *p = pd_ctrl_peer_slot(c, id);

	return p && p->state != PD_CTRL_PEER_FREE ? p : NULL;
}

/* The entry that speaks for id (itself, or the one it is an alias of). */
struct pd_ctrl_peer *pd_ctrl_peer_canon(const struct pd_ctrl *c, uint32_t id)
{
	struct pd_ctrl_peer *p = pd_ctrl_peer_get(c, id);

	return p && p->state == PD_CTRL_PEER_ALIAS ? pd_ctrl_peer_get(c, p->alias) : p;
}

static int name_is(const struct pd_ctrl_peer *p, const struct pd_bytes *n)
{
	return p->has_hello && strlen(p->hello.name) == n->len &&
	       memcmp(p->hello.name, n->p, n->len) == 0;
}

struct pd_ctrl_peer *pd_ctrl_peer_by_name(const struct pd_ctrl *c, const struct pd_bytes *n)
{
	for (uint32_t i = 0; i < c->npeers; i++) {
		struct pd_ctrl_peer *p = c->peers[i];

		if (p->state != PD_CTRL_PEER_ALIAS && name_is(p, n))
			return p;
	}
	return NULL;
}

struct pd_ctrl_peer *pd_ctrl_peer_by_rid(const struct pd_ctrl *c, const uint8_t *rid,
					 uint32_t len)
{
	for (uint32_t i = 0; i < c->npeers; i++) {
		struct pd_ctrl_peer *p = c->peers[i];

		if (p->state != PD_CTRL_PEER_FREE && p->rid_len == len && len &&
		    memcmp(p->rid, rid, len) == 0)
			return p;
	}
	return NULL;
}

/* The peer dialled at ep, or advertising ep as its control endpoint. */
struct pd_ctrl_peer *pd_ctrl_peer_by_dial(const struct pd_ctrl *c, const char *ep)
{
	for (uint32_t i = 0; i < c->npeers; i++) {
		struct pd_ctrl_peer *p = c->peers[i];

		if (p->state != PD_CTRL_PEER_FREE &&
		    (strcmp(p->dialled, ep) == 0 || strcmp(p->advertised, ep) == 0))
			return pd_ctrl_peer_canon(c, p->id);
	}
	return NULL;
}

/* The lowest free id's entry, made NEW. */
static struct pd_ctrl_peer *reuse(struct pd_ctrl *c)
{
	for (uint32_t i = 0; i < c->npeers; i++) {
		struct pd_ctrl_peer *p = c->peers[i];

		if (p->state != PD_CTRL_PEER_FREE)
			continue;
		*p = (struct pd_ctrl_peer){ .id = p->id, .state = PD_CTRL_PEER_NEW };
		STAILQ_INIT(&p->q);
		c->st.peers++;
		c->nfree--;
		return p;
	}
	return NULL;
}

/* Ids are handed out lowest first: an evicted one before a new one. */
int pd_ctrl_peer_new(struct pd_ctrl *c, struct pd_ctrl_peer **out)
{
	struct pd_ctrl_peer *p = c->nfree ? reuse(c) : NULL;

	if (p) {
		*out = p;
		return 0;
	}
	if (c->npeers >= c->o.max_peers)
		return -ENOBUFS;
	if (c->npeers == c->cap) {
		uint32_t cap = c->cap ? 2 * c->cap : 16;
		struct pd_ctrl_peer **t = reallocarray(c->peers, cap, sizeof(*t));

		if (!t)
			return -ENOMEM;
		c->peers = t;
		c->cap = cap;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->id = ++c->npeers;
	p->state = PD_CTRL_PEER_NEW;
	STAILQ_INIT(&p->q);
	c->peers[p->id - 1] = p;
	c->st.peers++;
	*out = p;
	return 0;
}

void pd_ctrl_peer_unnew(struct pd_ctrl *c, struct pd_ctrl_peer *p)
{
	if (p->id == c->npeers) { /* the newest: the table shrinks back */
		c->peers[--c->npeers] = NULL;
		pd_ctrl_peer_free(p);
	} else {
		p->state = PD_CTRL_PEER_FREE;
		p->dialled[0] = '\0';
		c->nfree++;
	}
	c->st.peers--;
}

uint32_t pd_ctrl_peer_drop_queue(struct pd_ctrl_peer *p)
{
	struct pd_ctrl_qmsg *m;
	uint32_t n = p->qlen;

	while ((m = STAILQ_FIRST(&p->q))) {
		STAILQ_REMOVE_HEAD(&p->q, link);
		free(m);
	}
	p->qlen = 0;
	return n;
}

void pd_ctrl_peer_free(struct pd_ctrl_peer *p)
{
	if (!p)
		return;
	(void)pd_ctrl_peer_drop_queue(p);
	free(p);
}

static void copy_bytes(char *dst, size_t cap, const struct pd_bytes *b)
{
	size_t n = b->len < cap - 1 ? b->len : cap - 1;

	if (n)
		memcpy(dst, b->p, n);
	dst[n] = '\0';
}

static struct pd_bytes str_bytes(const char *s)
{
	struct pd_bytes b = { (const uint8_t *)s, (uint32_t)strlen(s) };

	return b;
}

/* Keep the peer's Hello (the decoder's storage is reused by the next message). */
void pd_ctrl_peer_store_hello(struct pd_ctrl_peer *p, const struct pd_msg_hello *h)
{
	struct pd_ctrl_hello_copy *k = &p->hello;

	copy_bytes(k->name, sizeof(k->name), &h->name);
	copy_bytes(k->host_id, sizeof(k->host_id), &h->host_id);
	k->view = *h;
	k->view.name = str_bytes(k->name);
	k->view.host_id = str_bytes(k->host_id);
	p->advertised[0] = '\0';
	for (uint32_t i = 0; i < h->nxports && i < PD_WIRE_MAX_XPORTS; i++) {
		copy_bytes(k->xport[i], sizeof(k->xport[i]), &h->xport[i]);
		copy_bytes(k->addr[i], sizeof(k->addr[i]), &h->addr[i]);
		k->view.xport[i] = str_bytes(k->xport[i]);
		k->view.addr[i] = str_bytes(k->addr[i]);
		if (strcmp(k->xport[i], PD_CTRL_XPORT_CTRL) == 0)
			(void)strlcpy(p->advertised, k->addr[i], sizeof(p->advertised));
	}
	k->view.rdma_gid.len = h->rdma_gid.len <= sizeof(k->gid) ? h->rdma_gid.len : 0;
	if (k->view.rdma_gid.len)
		memcpy(k->gid, h->rdma_gid.p, k->view.rdma_gid.len);
	k->view.rdma_gid.p = k->gid;
	p->epoch = h->epoch;
	p->has_hello = 1;
}

void pd_ctrl_peer_up(struct pd_ctrl *c, struct pd_ctrl_peer *p)
{
	struct pd_ctrl_secrets s = { .accept = p->sec_ours ? p->sec_ours : p->sec_theirs,
				     .present = p->sec_theirs ? p->sec_theirs : p->sec_ours };

	if (p->state == PD_CTRL_PEER_UP)
		return;
	p->rep_accept = s.accept;
	p->rep_present = s.present;
	p->state = PD_CTRL_PEER_UP;
	p->last_rx_ns = p->last_hb_ns = c->now_ns;
	c->st.peers_up++;
	c->st.peers_live++;
	PD_LOG(INFO, ctl, "peer %u (%s, epoch %llu) is up", p->id, p->hello.name,
	       (unsigned long long)p->epoch);
	c->ops.on_peer_up(c->o.ctx, p->id, &p->hello.view, &s);
}

/* Replace our DEALER to p (drops what ZeroMQ still holds for it) and say
 * Hello again on the new one; without a DEALER, dial p's endpoint if known. */
static void redial(struct pd_ctrl *c, struct pd_ctrl_peer *p)
{
	char ep[PD_CTRL_ENDPOINT_MAX];
	int rc;

	(void)strlcpy(ep, p->d ? p->d->endpoint : p->dialled, sizeof(ep));
	if (!ep[0])
		return;
	pd_ctrl_dealer_retire(c, p->d);
	rc = pd_ctrl_dealer_open(c, p, ep);
	if (rc < 0)  /* the tick tries again */
		PD_LOG_RL(WARN, ctl, "peer %u: cannot dial %s: %s", p->id, ep, pd_strerror(rc));
}

/*
 * p is down: held messages dropped, its ROUTER route forgotten, our DEALER
 * replaced when redial (the remote lost its session). on_peer_down runs
 * once per fall (also for a handshake that never completed).
 */
void pd_ctrl_peer_down(struct pd_ctrl *c, struct pd_ctrl_peer *p, int err, int redial_it)
{
	uint32_t was = p->state;

	c->st.dropped += pd_ctrl_peer_drop_queue(p);
	p->state = PD_CTRL_PEER_DOWN;
	p->rid_len = 0;
	pd_ctrl_secrets_end(p);
	if (was != PD_CTRL_PEER_DOWN)
		p->down_ns = c->now_ns;
	if (redial_it)
		redial(c, p);
	if (was == PD_CTRL_PEER_DOWN)
		return;
	if (was == PD_CTRL_PEER_UP)
		c->st.peers_live--;
	c->st.peers_down++;
	PD_LOG(WARN, ctl, "peer %u (%s) is down: %s", p->id,
	       p->has_hello ? p->hello.name : p->dialled, pd_strerror(err));
	c->ops.on_peer_down(c->o.ctx, p->id, err);
}

static int hold(struct pd_ctrl *c, struct pd_ctrl_peer *p, const void *buf, size_t len)
{
	struct pd_ctrl_qmsg *m;

	if (p->qlen >= c->o.queue_max) {
		c->st.tx_again++;
		return -EAGAIN;
	}
	m = malloc(sizeof(*m) + len);
	if (!m)
		return -ENOMEM;
	m->len = len;
	memcpy(m->data, buf, len);
	STAILQ_INSERT_TAIL(&p->q, m, link);
	p->qlen++;
	c->st.queued++;
	return 0;
}

static int is_reply(uint32_t type)
{
	return type == PD_MSG_ALLOC_RESP || type == PD_MSG_ERROR;
}

/*
 * Send an encoded message of this type to p. Replies go back the way p's
 * last request came; requests through our DEALER when we have one (held
 * until its HelloAck, and behind what is already held, so order is kept),
 * else through the ROUTER.
 */
int pd_ctrl_peer_transmit(struct pd_ctrl *c, struct pd_ctrl_peer *p, uint32_t type,
			  const void *buf, size_t len)
{
	if (p->state == PD_CTRL_PEER_DOWN)
		return -ENOTCONN;
	if (is_reply(type) && p->rid_len && (p->reply_path == PD_CTRL_PATH_ROUTER || !p->d))
		return pd_ctrl_send_router(c, p->rid, p->rid_len, buf, len);
	if (p->d) {
		if (!p->d->acked || p->qlen)
			return hold(c, p, buf, len);
		return pd_ctrl_send_dealer(c, p->d, buf, len);
	}
	if (p->rid_len)
		return pd_ctrl_send_router(c, p->rid, p->rid_len, buf, len);
	return -ENOTCONN;
}

/* Send what was held for p's HelloAck, in order; stop (keeping the rest
 * for the next tick) when ZeroMQ would block. */
void pd_ctrl_peer_flush(struct pd_ctrl *c, struct pd_ctrl_peer *p)
{
	struct pd_ctrl_qmsg *m;

	while (p->d && p->d->acked && (m = STAILQ_FIRST(&p->q))) {
		int rc = pd_ctrl_send_dealer(c, p->d, m->data, m->len);

		if (rc == -EAGAIN)
			return;
		STAILQ_REMOVE_HEAD(&p->q, link);
		p->qlen--;
		free(m);
		if (rc < 0)
			c->st.dropped++;
	}
}

/* from (dialled, just named by its HelloAck) is the broker to already is:
 * to takes over its DEALER and held messages, from becomes an alias. */
void pd_ctrl_peer_merge(struct pd_ctrl *c, struct pd_ctrl_peer *from, struct pd_ctrl_peer *to)
{
	struct pd_ctrl_dealer *d = from->d;
	struct pd_ctrl_qmsg *m;

	from->d = NULL;
	if (!to->d) {
		to->d = d;
		d->p = to;
		STAILQ_CONCAT(&to->q, &from->q);
		to->qlen += from->qlen;
		from->qlen = 0;
		if (!to->dialled[0])
			(void)strlcpy(to->dialled, from->dialled, sizeof(to->dialled));
	} else {
		while ((m = STAILQ_FIRST(&from->q))) {
			STAILQ_REMOVE_HEAD(&from->q, link);
			from->qlen--;
			/* held messages are requests: they take to's request route */
			if (pd_ctrl_peer_transmit(c, to, PD_MSG_ALLOC_REQ, m->data, m->len) < 0)
				c->st.dropped++;
			free(m);
		}
		pd_ctrl_dealer_retire(c, d);
	}
	if (from->state == PD_CTRL_PEER_UP)
		c->st.peers_live--;
	from->state = PD_CTRL_PEER_ALIAS;
	from->alias = to->id;
	c->st.aliases++;
	c->st.peers--;
	PD_LOG(INFO, ctl, "peer %u (%s) is peer %u: %s advertises %s", from->id, to->hello.name,
	       to->id, from->dialled, to->advertised[0] ? to->advertised : "no address");
	if (c->ops.on_peer_alias)
		c->ops.on_peer_alias(c->o.ctx, from->id, to->id);
}

int pd_ctrl_hello_send(struct pd_ctrl *c, struct pd_ctrl_dealer *d)
{
	int rc;

	c->hello.type = PD_MSG_HELLO;
	c->hello.u.hello.resume = d->p ? d->p->resume : 0; /* proof of our last session */
	d->hello_ns = c->now_ns;
	rc = pd_ctrl_encode(c, &c->hello);
	c->hello.u.hello.resume = 0;
	if (rc == 0)
		rc = pd_ctrl_send_dealer(c, d, c->enc.data, c->enc.len);
	if (rc == 0)
		c->st.hellos_sent++;
	return rc;
}

static void heartbeat(struct pd_ctrl *c, struct pd_ctrl_peer *p, uint32_t bye)
{
	struct pd_msg m = { .type = PD_MSG_HEARTBEAT };
	int rc;

	p->last_hb_ns = c->now_ns;
	m.u.heartbeat.epoch = c->o.epoch;
	m.u.heartbeat.time_ns = c->now_ns;
	m.u.heartbeat.bye = bye;
	m.u.heartbeat.has_bye = bye;
	rc = pd_ctrl_encode(c, &m);
	if (rc == 0 && p->d && p->d->acked)
		rc = pd_ctrl_send_dealer(c, p->d, c->enc.data, c->enc.len);
	else if (rc == 0 && p->rid_len)
		rc = pd_ctrl_send_router(c, p->rid, p->rid_len, c->enc.data, c->enc.len);
	else
		return;
	if (rc == 0)
		c->st.heartbeats_sent++;
}

/* Time since t; 0 when the caller's clock reading is older than t. */
static uint64_t since(const struct pd_ctrl *c, uint64_t t)
{
	return c->now_ns > t ? c->now_ns - t : 0;
}

static void tick_up(struct pd_ctrl *c, struct pd_ctrl_peer *p, uint64_t dead)
{
	if (since(c, p->last_rx_ns) >= dead ||
	    (p->d && !p->d->acked && since(c, p->d->hello_ns) >= dead)) {
		pd_ctrl_peer_down(c, p, -ETIMEDOUT, 1);
		return;
	}
	if (p->qlen)
		pd_ctrl_peer_flush(c, p);
	/* Due from three quarters of the interval: an idle broker ticks once a
	 * heartbeat, and a tick a little early must not skip a beat. */
	if (since(c, p->last_hb_ns) + c->o.heartbeat_ns / 4 >= c->o.heartbeat_ns)
		heartbeat(c, p, 0);
}

static void tick_one(struct pd_ctrl *c, struct pd_ctrl_peer *p)
{
	uint64_t dead = PD_CTRL_DEAD_BEATS * c->o.heartbeat_ns;
	int late = p->d && since(c, p->d->hello_ns) >= dead;

	switch (p->state) {
	case PD_CTRL_PEER_UP:
		tick_up(c, p, dead);
		break;
	case PD_CTRL_PEER_NEW:
		if (late || (!p->d && p->dialled[0]))
			pd_ctrl_peer_down(c, p, -ETIMEDOUT, 1);
		break;
	case PD_CTRL_PEER_DOWN:
		if (late || (!p->d && p->dialled[0]))
			redial(c, p);
		break;
	default:
		break;
	}
}

void pd_ctrl_tick(struct pd_ctrl *c, uint64_t now_ns)
{
	if (!c)
		return;
	c->depth++;
	c->now_ns = now_ns;
	for (uint32_t i = 0; i < c->npeers; i++)
		tick_one(c, c->peers[i]);
	pd_ctrl_evict_tick(c);
	c->depth--;
	pd_ctrl_bury(c);
}

int pd_ctrl_timed(const struct pd_ctrl *c)
{
	for (uint32_t i = 0; c && i < c->npeers; i++) {
		const struct pd_ctrl_peer *p = c->peers[i];

		if (p->state == PD_CTRL_PEER_NEW || (p->state == PD_CTRL_PEER_UP &&
						     (p->qlen || (p->d && !p->d->acked))))
			return 1;
	}
	return 0;
}

void pd_ctrl_goodbye(struct pd_ctrl *c)
{
	const int linger = PD_CTRL_BYE_LINGER_MS;

	if (!c)
		return;
	for (uint32_t i = 0; i < c->npeers; i++) {
		struct pd_ctrl_peer *p = c->peers[i];

		if (p->state != PD_CTRL_PEER_UP)
			continue;
		heartbeat(c, p, 1);
		if (p->d)
			(void)zmq_setsockopt(p->d->sock, ZMQ_LINGER, &linger, sizeof(linger));
	}
	(void)zmq_setsockopt(c->router, ZMQ_LINGER, &linger, sizeof(linger));
}

int pd_ctrl_peer_reset(struct pd_ctrl *c, uint32_t peer, int err)
{
	struct pd_ctrl_peer *p;

	if (!c)
		return -EINVAL;
	p = pd_ctrl_peer_canon(c, peer);
	if (!p)
		return -ENOENT;
	if (p->state != PD_CTRL_PEER_UP || !p->d)
		return 0;
	pd_ctrl_peer_down(c, p, err, 1); /* a new DEALER says Hello */
	if (p->state == PD_CTRL_PEER_DOWN && p->d)
		p->state = PD_CTRL_PEER_NEW; /* hold messages until its HelloAck */
	return 1;
}
