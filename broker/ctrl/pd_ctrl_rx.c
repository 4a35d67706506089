/* SPDX-License-Identifier: MIT */
/*
 * What a received message does. A message on the ROUTER needs a session
 * (a Hello from that routing id) unless it is a Hello; a message on a
 * DEALER needs that DEALER's HelloAck unless it is the HelloAck. Heartbeats
 * and the handshake stay here; AllocRequest, AllocResponse, PutDone,
 * CancelNotif, Reserve and Error go to ops->on_msg.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "pd_ctrl_int.h"
#include "pd_err.h"
#include "pd_log.h"
#include "pd_wire_int.h"

static uint64_t seq_of(const struct pd_msg *m)
{
	switch (m->type) {
	case PD_MSG_ALLOC_REQ:
		return m->u.alloc_req.seq;
	case PD_MSG_ALLOC_RESP:
		return m->u.alloc_resp.seq;
	case PD_MSG_PUT_DONE:
		return m->u.put_done.seq;
	case PD_MSG_RESERVE:
		return m->u.reserve.seq;
	default:
		return 0;
	}
}

void pd_ctrl_reply_error(struct pd_ctrl *c, const struct pd_ctrl_from *f, int code,
			 uint64_t seq, const char *text)
{
	struct pd_msg m = { .type = PD_MSG_ERROR };
	size_t n = strlen(text);
	int rc;

	m.u.error.seq = seq;
	m.u.error.code = code;
	m.u.error.text.p = (const uint8_t *)text;
	m.u.error.text.len = (uint32_t)(n < PD_WIRE_ADDR_MAX ? n : PD_WIRE_ADDR_MAX);
	rc = pd_ctrl_encode(c, &m);
	if (rc == 0 && f->d && f->d->sock)
		rc = pd_ctrl_send_dealer(c, f->d, c->enc.data, c->enc.len);
	else if (rc == 0 && f->rid_len)
		rc = pd_ctrl_send_router(c, f->rid, f->rid_len, c->enc.data, c->enc.len);
	else
		return;
	if (rc == 0)
		c->st.errors_sent++;
}

static const char *who(const struct pd_ctrl_from *f)
{
	return f->d ? f->d->endpoint : "the ROUTER";
}

/* Count a refused payload by cause: its size, its msgpack, or its schema. */
static void count_bad(struct pd_ctrl *c, int rc, const void *buf, size_t len)
{
	if (rc == -EMSGSIZE)
		c->st.bad_size++;
	else if (rc == -EPROTO && pd_wire_scan(buf, len, NULL, 0) < 0)
		c->st.bad_msgpack++;
	else if (rc == -EPROTO)
		c->st.bad_schema++;
}

static int decode(struct pd_ctrl *c, const struct pd_ctrl_from *f, const void *buf, size_t len,
		  struct pd_msg *m)
{
	char err[PD_WIRE_ADDR_MAX + 1] = "";
	int rc;

	if (len > PD_WIRE_MAX_MSG) {  /* not even copied into the decoder */
		(void)snprintf(err, sizeof(err), "message of %zu bytes exceeds %u", len,
			       PD_WIRE_MAX_MSG);
		rc = -EMSGSIZE;
	} else {
		rc = pd_wire_decode(&c->dec, buf, len, m, err, sizeof(err));
		if (rc == 0)
			return 0;
	}
	count_bad(c, rc, buf, len);
	PD_LOG_RL(WARN, ctl, "dropped a message from %s: %s", who(f), err);
	if (rc == -EPROTO || rc == -EMSGSIZE)
		pd_ctrl_reply_error(c, f, rc, 0, err);
	return rc;
}

static void unexpected(struct pd_ctrl *c, const struct pd_ctrl_from *f, const struct pd_msg *m)
{
	char text[96];

	c->st.bad_state++;
	(void)snprintf(text, sizeof(text), "unexpected %s on the %s", pd_wire_type_name(m->type),
		       f->d ? "DEALER" : "ROUTER");
	PD_LOG_RL(WARN, ctl, "dropped a message from %s: %s", who(f), text);
	pd_ctrl_reply_error(c, f, -EPROTO, seq_of(m), text);
}

static void deliver(struct pd_ctrl *c, struct pd_ctrl_peer *p, const struct pd_ctrl_from *f,
		    const struct pd_msg *m)
{
	p->last_rx_ns = c->now_ns;
	switch (m->type) {
	case PD_MSG_HEARTBEAT:
		c->st.heartbeats_rcvd++;
		if (m->u.heartbeat.epoch != p->epoch)  /* restarted behind our back */
			pd_ctrl_peer_down(c, p, -ECONNRESET, 1);
		else if (m->u.heartbeat.has_bye && m->u.heartbeat.bye)
			pd_ctrl_peer_down(c, p, -ESHUTDOWN, 1);
		return;
	case PD_MSG_HELLO:
	case PD_MSG_HELLO_ACK:
	case PD_MSG_PROXY:
		unexpected(c, f, m);
		return;
	case PD_MSG_ALLOC_REQ:
	case PD_MSG_PUT_DONE:
	case PD_MSG_CANCEL:
	case PD_MSG_RESERVE:
		p->reply_path = f->d ? PD_CTRL_PATH_DEALER : PD_CTRL_PATH_ROUTER;
		break;
	default:
		break;
	}
	c->st.rx_msgs++;
	c->ops.on_msg(c->o.ctx, p->id, m);
}

static int same_name(const char *s, const struct pd_bytes *n)
{
	return strlen(s) == n->len && memcmp(s, n->p, n->len) == 0;
}

/* A Hello's peer: the one of that name, or the unnamed one dialled at the
 * control address it advertises. NULL: a new broker. */
static struct pd_ctrl_peer *hello_peer(struct pd_ctrl *c, const struct pd_msg_hello *h)
{
	struct pd_ctrl_peer *p = pd_ctrl_peer_by_name(c, &h->name);
	char ep[PD_WIRE_ADDR_MAX + 1];

	for (uint32_t i = 0; !p && i < h->nxports; i++) {
		if (!same_name(PD_CTRL_XPORT_CTRL, &h->xport[i]) || !h->addr[i].len)
			continue;
		memcpy(ep, h->addr[i].p, h->addr[i].len);
		ep[h->addr[i].len] = '\0';
		p = pd_ctrl_peer_by_dial(c, ep);
		if (p && p->has_hello)
			p = NULL;
	}
	return p;
}

/* Our HelloAck, with the session's data secret (only in it). */
static void send_ack(struct pd_ctrl *c, const struct pd_ctrl_from *f, uint64_t secret)
{
	c->hello.type = PD_MSG_HELLO_ACK;
	c->hello.u.hello.data_secret = secret;
	if (pd_ctrl_encode(c, &c->hello) == 0)
		(void)pd_ctrl_send_router(c, f->rid, f->rid_len, c->enc.data, c->enc.len);
	c->hello.u.hello.data_secret = 0;
}

/* A Hello we do not answer with a session: counted, logged, an Error. */
static void refuse_hello(struct pd_ctrl *c, const struct pd_ctrl_from *f,
			 const struct pd_msg_hello *h, int code, const char *text)
{
	c->st.hellos_refused++;
	PD_LOG_RL(WARN, ctl, "Hello from %.*s refused: %s", (int)h->name.len,
		  (const char *)h->name.p, text);
	pd_ctrl_reply_error(c, f, code, 0, text);
}

/* CURVE: the Hello's name must be the one its connection's key is bound to. */
static int name_of_key(struct pd_ctrl *c, const struct pd_ctrl_from *f,
		       const struct pd_msg_hello *h, uint8_t key[PD_CTRL_KEY_LEN])
{
	const char *bound = pd_ctrl_auth_name_of(c, f->user_id, key);
	char text[160];

	if (bound && same_name(bound, &h->name))
		return 0;
	c->st.auth_name++;
	(void)snprintf(text, sizeof(text), "Hello refused: the key of this connection is %s's",
		       bound ? bound : "no broker");
	refuse_hello(c, f, h, -EPERM, text);
	return -EPERM;
}

/* The table is full: make room by evicting a down peer, or refuse. */
static int new_peer(struct pd_ctrl *c, const struct pd_ctrl_from *f,
		    const struct pd_msg_hello *h, struct pd_ctrl_peer **p)
{
	int rc = pd_ctrl_peer_new(c, p);

	if (rc == -ENOBUFS && pd_ctrl_evict_one(c))
		rc = pd_ctrl_peer_new(c, p);
	if (rc < 0)
		refuse_hello(c, f, h, rc, rc == -ENOBUFS ? "Hello refused: peer table full" :
							  "Hello refused: out of memory");
	return rc;
}

static void set_route(struct pd_ctrl *c, struct pd_ctrl_peer *p, const struct pd_ctrl_from *f)
{
	struct pd_ctrl_peer *old = pd_ctrl_peer_by_rid(c, f->rid, f->rid_len);

	if (old && old != p)
		old->rid_len = 0;
	memcpy(p->rid, f->rid, f->rid_len);
	p->rid_len = f->rid_len;
	p->reply_path = PD_CTRL_PATH_ROUTER;
}

/*
 * Hello on the ROUTER: a session for this routing id. A Hello naming a
 * peer that is up must have the authority to (pd_ctrl_hello_authority):
 * then a new epoch, or a new DEALER of the peer, is a new session (down,
 * then up); without it the live session is untouched and the Hello
 * refused.
 */
static void hello_in(struct pd_ctrl *c, const struct pd_ctrl_from *f,
		     const struct pd_msg_hello *h)
{
	uint8_t key[PD_CTRL_KEY_LEN];
	struct pd_ctrl_peer *p;
	char text[160];
	int reset, rc;

	if (same_name(c->name, &h->name) || f->rid_len > PD_CTRL_RID_MAX) {
		c->st.bad_state++;
		pd_ctrl_reply_error(c, f, -EPROTO, 0, "Hello refused: our own name");
		return;
	}
	if (c->keys && name_of_key(c, f, h, key) < 0)
		return;
	p = hello_peer(c, h);
	if (p && p->state == PD_CTRL_PEER_UP) {
		rc = pd_ctrl_hello_authority(c, p, f, h, c->keys ? key : NULL, &reset, text,
					     sizeof(text));
		if (rc < 0) {
			refuse_hello(c, f, h, rc, text);
			return;
		}
		if (reset)
			pd_ctrl_peer_down(c, p, -ECONNRESET, 1);
	}
	if (!p && new_peer(c, f, h, &p) < 0)
		return;
	rc = pd_ctrl_secret_ours(c, p);
	if (rc < 0) {
		refuse_hello(c, f, h, rc, "Hello refused: no random secret");
		return;
	}
	set_route(c, p, f);
	pd_ctrl_peer_store_hello(p, h);
	p->last_rx_ns = c->now_ns;
	if (c->keys) {
		memcpy(p->key, key, sizeof(p->key));
		p->has_key = 1;
	}
	/* Up (on_peer_up: the data plane learns the peer and the secret its
	 * lanes present), before the ack, upon which it opens them to us; or,
	 * already up, the secrets of this second route, if they changed. */
	pd_ctrl_secrets_report(c, p);
	pd_ctrl_peer_up(c, p);
	send_ack(c, f, p->sec_ours);
}

/* CURVE: the HelloAck's name must be the one the server's key is bound to. */
static int ack_key_ok(struct pd_ctrl *c, const struct pd_ctrl_dealer *d,
		      const struct pd_msg_hello *h)
{
	const struct pd_ctrl_key_entry *e = d->has_skey ? pd_ctrl_keys_find(c->keys, d->skey) : NULL;

	if (e && same_name(e->name, &h->name))
		return 1;
	c->st.auth_name++;
	PD_LOG_RL(WARN, ctl, "HelloAck from %s refused: it says %.*s, its key is %s's",
		  d->endpoint, (int)h->name.len, (const char *)h->name.p, e ? e->name : "nobody");
	return 0;
}

/* HelloAck on our DEALER: the peer is up; what was held goes out. */
static void ack_in(struct pd_ctrl *c, struct pd_ctrl_dealer *d, const struct pd_msg_hello *h)
{
	struct pd_ctrl_peer *p = d->p, *q;

	if (same_name(c->name, &h->name) || (p->has_hello && !same_name(p->hello.name, &h->name))) {
		c->st.bad_state++;
		PD_LOG_RL(WARN, ctl, "peer %u at %s: HelloAck from another broker", p->id,
			  d->endpoint);
		return;
	}
	if (c->keys && !ack_key_ok(c, d, h))
		return;
	if (!h->data_secret) { /* pdkv before data secrets: its lanes could not get in */
		c->st.bad_state++;
		PD_LOG_RL(WARN, ctl, "peer %u at %s: HelloAck without a data secret (an older "
			  "pdkv?)", p->id, d->endpoint);
		return;
	}
	q = pd_ctrl_peer_by_name(c, &h->name);
	if (q && q != p) {
		pd_ctrl_peer_merge(c, p, q);
		if (!d->sock)  /* q kept its own DEALER */
			return;
		p = q;
	}
	if (p->state == PD_CTRL_PEER_UP && p->epoch != h->epoch)
		pd_ctrl_peer_down(c, p, -ECONNRESET, 0);
	pd_ctrl_peer_store_hello(p, h);
	d->acked = 1;
	p->last_rx_ns = c->now_ns;
	p->sec_theirs = h->data_secret;
	p->refusal[0] = '\0';
	if (c->keys) {
		memcpy(p->key, d->skey, sizeof(p->key));
		p->has_key = 1;
	}
	pd_ctrl_secrets_report(c, p);
	pd_ctrl_peer_up(c, p);
	pd_ctrl_peer_flush(c, p);
}

/* An Error for our Hello (before its HelloAck, no seq): the peer refused
 * it. The operator is told why (log, pdctl peers); a peer that is not up
 * goes down with that code, so what waits for it fails with the reason
 * instead of a timeout. The tick says Hello again later. */
static void refused_in(struct pd_ctrl *c, struct pd_ctrl_dealer *d, const struct pd_msg_error *e)
{
	struct pd_ctrl_peer *p = d->p;
	uint32_t n = e->text.len < PD_CTRL_REFUSAL_MAX - 1 ? e->text.len : PD_CTRL_REFUSAL_MAX - 1;
	int changed = strlen(p->refusal) != n || memcmp(p->refusal, e->text.p, n) != 0;

	c->st.refusals++;
	memcpy(p->refusal, e->text.p, n);
	p->refusal[n] = '\0';
	for (uint32_t i = 0; i < n; i++) /* a peer's text: printable only */
		if (p->refusal[i] < 0x20 || p->refusal[i] > 0x7e)
			p->refusal[i] = '?';
	if (changed)
		PD_LOG(WARN, ctl, "peer %u at %s refused our Hello: %s (%s)", p->id, d->endpoint,
		       p->refusal[0] ? p->refusal : "no reason given", pd_strerror(e->code));
	if (p->state != PD_CTRL_PEER_UP)
		pd_ctrl_peer_down(c, p, e->code, 0);
}

/* The remote has no session for our DEALER (it restarted, or declared us
 * dead): what we sent since is lost, so p is down; say Hello again. */
static void session_lost(struct pd_ctrl *c, struct pd_ctrl_dealer *d)
{
	struct pd_ctrl_peer *p = d->p;

	if (!d->acked)
		return;  /* a Hello is out already; the tick repeats it */
	d->acked = 0;
	if (p->state == PD_CTRL_PEER_UP)
		pd_ctrl_peer_down(c, p, -ECONNRESET, 0);
	(void)pd_ctrl_hello_send(c, d);
}

static void rx_dealer(struct pd_ctrl *c, const struct pd_ctrl_from *f, const struct pd_msg *m)
{
	struct pd_ctrl_dealer *d = f->d;

	if (m->type == PD_MSG_HELLO_ACK) {
		ack_in(c, d, &m->u.hello);
		return;
	}
	if (m->type == PD_MSG_ERROR && m->u.error.code == -ENOTCONN) {
		session_lost(c, d);
		return;
	}
	if (m->type == PD_MSG_ERROR && !d->acked && m->u.error.seq == 0) {
		refused_in(c, d, &m->u.error);
		return;
	}
	if (d->p->state != PD_CTRL_PEER_UP || !d->acked) {
		c->st.bad_state++;
		PD_LOG_RL(WARN, ctl, "dropped %s from %s before its HelloAck",
			  pd_wire_type_name(m->type), d->endpoint);
		return;
	}
	deliver(c, d->p, f, m);
}

/* CURVE: a route's messages come from its session's key (a connection of
 * another key that took the routing id over is not that peer). */
static int route_key_ok(struct pd_ctrl *c, const struct pd_ctrl_peer *p,
			const struct pd_ctrl_from *f, const struct pd_msg *m)
{
	uint8_t key[PD_CTRL_KEY_LEN];

	if (!p->has_key || (pd_ctrl_auth_name_of(c, f->user_id, key) &&
			    memcmp(key, p->key, sizeof(key)) == 0))
		return 1;
	c->st.auth_name++;
	PD_LOG_RL(WARN, ctl, "dropped %s on peer %u's route: another key", pd_wire_type_name(m->type),
		  p->id);
	return 0;
}

static void rx_router(struct pd_ctrl *c, const struct pd_ctrl_from *f, const struct pd_msg *m)
{
	struct pd_ctrl_peer *p;

	if (m->type == PD_MSG_HELLO) {
		hello_in(c, f, &m->u.hello);
		return;
	}
	p = pd_ctrl_peer_by_rid(c, f->rid, f->rid_len);
	if (p && c->keys && !route_key_ok(c, p, f, m))
		return;
	if (!p || p->state != PD_CTRL_PEER_UP) {
		c->st.bad_peer++;
		PD_LOG_RL(WARN, ctl, "dropped %s from a sender without a session",
			  pd_wire_type_name(m->type));
		if (m->type != PD_MSG_ERROR)
			pd_ctrl_reply_error(c, f, -ENOTCONN, seq_of(m), "no session: Hello first");
		return;
	}
	deliver(c, p, f, m);
}

void pd_ctrl_rx(struct pd_ctrl *c, const struct pd_ctrl_from *f, const void *buf, size_t len)
{
	struct pd_msg m;

	if (decode(c, f, buf, len, &m) < 0)
		return;
	if (f->d)
		rx_dealer(c, f, &m);
	else
		rx_router(c, f, &m);
}
