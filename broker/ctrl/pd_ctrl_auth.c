/* SPDX-License-Identifier: MIT */
/*
 * CURVE on the control sockets (nothing here runs without opts.keys).
 *
 *  - The ROUTER is a CURVE server (our secret key, ZAP domain "pdkv"). Its
 *    ZAP handler is a REP socket at inproc://zeromq.zap.01 in our context,
 *    watched by the loop like every other socket: libzmq's I/O thread asks
 *    it about each new connection's public key, and it answers 200 with
 *    the key (Z85) as the User-Id for a key of --curve-peers, 400 for any
 *    other. Messages then carry that User-Id (zmq_msg_gets), which is how
 *    pd_ctrl_rx.c binds a Hello's name, and a route's messages, to a key.
 *  - Each DEALER is a CURVE client, demanding the server key its endpoint
 *    is known by (server_key() below).
 *  - Handshakes that fail before ZAP (no CURVE at all, a wrong server key)
 *    or that ZAP refused are seen through socket monitors (a PAIR per
 *    monitored socket, in the loop too): the ROUTER's are counted, a
 *    DEALER's are told to the operator (log, pdctl peers) and take the
 *    peer down if it is not up, as a refused Hello does.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>

#include <bsd/string.h>

#include "pd_ctrl_int.h"
#include "pd_err.h"
#include "pd_log.h"
#include "pd_time.h"

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_DOMAIN   "pdkv"
#define ZAP_FRAMES   8u     /* version, id, domain, address, routing id, mechanism, key + 1 */
#define MON_EVENTS   (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | \
		      ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)

static int setopt(void *sock, int opt, const void *v, size_t len)
{
	return pd_zmq_rc(zmq_setsockopt(sock, opt, v, len));
}

/* ---- the ZAP handler ---------------------------------------------------------------- */

struct zap_req {
	zmq_msg_t f[ZAP_FRAMES];
	uint32_t n, total;
};

static int frame_is(zmq_msg_t *m, const char *s)
{
	size_t n = strlen(s);

	return zmq_msg_size(m) == n && memcmp(zmq_msg_data(m), s, n) == 0;
}

static int zap_recv(void *sock, struct zap_req *r)
{
	zmq_msg_t extra;
	int more = 1;

	r->n = r->total = 0;
	while (more) {
		zmq_msg_t *m = r->n < ZAP_FRAMES ? &r->f[r->n] : &extra;

		(void)zmq_msg_init(m);
		if (zmq_msg_recv(m, sock, ZMQ_DONTWAIT) < 0) {
			(void)zmq_msg_close(m);
			return r->total ? 0 : -EAGAIN;
		}
		more = zmq_msg_more(m);
		r->total++;
		if (m == &extra)
			(void)zmq_msg_close(m);
		else
			r->n++;
	}
	return 0;
}

static void zap_reply(struct pd_ctrl *c, struct zap_req *r, const char *code,
		      const char *text, const char *user)
{
	const char *const part[] = { "1.0", NULL, code, text, user, "" };
	int rc = 0;

	for (int i = 0; i < 6 && rc >= 0; i++) {
		const void *p = part[i];
		size_t n = p ? strlen(part[i]) : 0;

		if (i == 1) { /* the request id, echoed */
			p = zmq_msg_data(&r->f[1]);
			n = zmq_msg_size(&r->f[1]);
		}
		rc = zmq_send(c->zap, p, n, ZMQ_DONTWAIT | (i < 5 ? ZMQ_SNDMORE : 0));
	}
	if (rc < 0)
		PD_LOG_RL(ERR, ctl, "ZAP reply lost: %s", pd_strerror(pd_zmq_rc(rc)));
}

/* One request: the key must be one of --curve-peers. */
static void zap_one(struct pd_ctrl *c, struct zap_req *r)
{
	const struct pd_ctrl_key_entry *e = NULL;
	char addr[64] = "?";

	if (r->total < 6 || r->n < 6 || !frame_is(&r->f[0], "1.0")) {
		if (r->n >= 2)
			zap_reply(c, r, "500", "malformed ZAP request", "");
		return;
	}
	(void)snprintf(addr, sizeof(addr), "%.*s", (int)zmq_msg_size(&r->f[3]),
		       (const char *)zmq_msg_data(&r->f[3]));
	if (frame_is(&r->f[5], "CURVE") && r->total == 7 && r->n == 7 &&
	    zmq_msg_size(&r->f[6]) == PD_CTRL_KEY_LEN)
		e = pd_ctrl_keys_find(c->keys, zmq_msg_data(&r->f[6]));
	if (!e) {
		char id[PD_CTRL_KEY_ID_LEN + 1] = "?";

		if (r->n == 7 && zmq_msg_size(&r->f[6]) == PD_CTRL_KEY_LEN)
			pd_ctrl_key_id(zmq_msg_data(&r->f[6]), id);
		c->st.auth_denied++;
		PD_LOG_RL(WARN, ctl, "control connection from %s refused: key %s... is not in "
			  "--curve-peers", addr, id);
		zap_reply(c, r, "400", "key not admitted", "");
		return;
	}
	c->st.auth_ok++;
	PD_LOG(INFO, ctl, "control connection from %s: key %.8s... of %s", addr, e->z85, e->name);
	zap_reply(c, r, "200", "OK", e->z85);
}

static void drain_zap(struct pd_ctrl *c)
{
	struct zap_req r;

	c->zap_pending = 0;
	for (uint32_t n = 0; pd_ctrl_has_input(c->zap); n++) {
		if (n == PD_CTRL_DRAIN_MAX) {
			c->zap_pending = 1;
			pd_ctrl_kick(c);
			return;
		}
		if (zap_recv(c->zap, &r) < 0)
			return;
		zap_one(c, &r);
		for (uint32_t i = 0; i < r.n; i++)
			(void)zmq_msg_close(&r.f[i]);
	}
}

static void on_zap(void *ctx, uint32_t events)
{
	struct pd_ctrl *c = ctx;

	(void)events;
	drain_zap(c);
}

/* ---- handshake monitors ------------------------------------------------------------------ */

/* A PAIR receiving sock's handshake failures, watched by the loop. */
static int mon_open(struct pd_ctrl *c, void *sock, void **mon, int *fd, pd_loop_fn *fn,
		    void *ctx)
{
	char ep[64];
	int rc;

	(void)snprintf(ep, sizeof(ep), "inproc://pd-ctrl-mon.%" PRIu64, ++c->mon_gen);
	rc = pd_zmq_rc(zmq_socket_monitor(sock, ep, MON_EVENTS));
	if (rc < 0)
		return rc;
	*mon = zmq_socket(c->zctx, ZMQ_PAIR);
	if (!*mon)
		return pd_zmq_rc(-1);
	rc = pd_ctrl_sock_setup(c, *mon);
	if (rc == 0)
		rc = pd_zmq_rc(zmq_connect(*mon, ep));
	if (rc == 0)
		rc = pd_ctrl_watch(c, *mon, fd, fn, ctx);
	if (rc < 0) {
		(void)zmq_close(*mon);
		*mon = NULL;
		*fd = -1;
	}
	return rc;
}

static void mon_close(struct pd_ctrl *c, void *sock, void **mon, int *fd)
{
	if (!*mon)
		return;
	if (sock)
		(void)zmq_socket_monitor(sock, NULL, 0);
	if (*fd >= 0)
		pd_loop_del(c->o.loop, *fd);
	(void)zmq_close(*mon);
	*mon = NULL;
	*fd = -1;
}

/* One event: [u16 event, u32 value][endpoint]. 0 and its fields, or -EAGAIN. */
static int mon_recv(void *mon, uint16_t *event, uint32_t *value)
{
	uint8_t b[6];
	char ep[256];
	int n = zmq_recv(mon, b, sizeof(b), ZMQ_DONTWAIT), more = 0;
	size_t len = sizeof(more);

	if (n < 0)
		return -EAGAIN;
	if (zmq_getsockopt(mon, ZMQ_RCVMORE, &more, &len) == 0 && more)
		(void)zmq_recv(mon, ep, sizeof(ep), ZMQ_DONTWAIT);
	*event = 0;
	if (n != (int)sizeof(b))
		return 0; /* not an event of this version: ignored */
	memcpy(event, b, 2);
	memcpy(value, b + 2, 4);
	return 0;
}

/* The ROUTER's, counted: a connection without CURVE, or a failed CURVE
 * handshake (a client demanding another server key, garbage; or one that
 * closed first, having found the mismatch itself: no detail then, errno).
 * A ZAP refusal was counted by ZAP. */
static void router_event(struct pd_ctrl *c, uint16_t ev, uint32_t value)
{
	PD_LOG(DEBUG, ctl, "ROUTER handshake event 0x%x (0x%x)", (unsigned)ev, (unsigned)value);
	if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
	    value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
		c->st.auth_plain++;
		PD_LOG_RL(WARN, ctl, "control connection refused: it does not speak CURVE");
		return;
	}
	if (ev != ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
	    ev != ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
		return;
	c->st.auth_failed++;
	PD_LOG_RL(WARN, ctl, "control connection refused: CURVE handshake failed (%s)",
		  ev == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ? "closed by the client: no CURVE "
							       "there, or another server key" :
		  value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC ? "not our key, or garbage" :
								   "protocol error");
}

static void on_rmon(void *ctx, uint32_t events);

static void drain_rmon(struct pd_ctrl *c)
{
	uint16_t ev;
	uint32_t v;

	c->rmon_pending = 0;
	for (uint32_t n = 0; pd_ctrl_has_input(c->rmon); n++) {
		if (n == PD_CTRL_DRAIN_MAX) {
			c->rmon_pending = 1;
			pd_ctrl_kick(c);
			return;
		}
		if (mon_recv(c->rmon, &ev, &v) < 0)
			return;
		router_event(c, ev, v);
	}
}

static void on_rmon(void *ctx, uint32_t events)
{
	(void)events;
	drain_rmon(ctx);
}

/* A DEALER's handshake failed: why, for the operator. */
static void dealer_event(struct pd_ctrl *c, struct pd_ctrl_dealer *d, uint16_t ev, uint32_t v)
{
	struct pd_ctrl_peer *p = d->p;
	char why[PD_CTRL_REFUSAL_MAX];

	if (!ev || !p)
		return;
	if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
		(void)snprintf(why, sizeof(why), "CURVE: it refused our key (not in its "
			       "--curve-peers)");
	else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL &&
		 v == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
		(void)snprintf(why, sizeof(why), "CURVE: it does not speak CURVE (no --curve-key)");
	else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)
		(void)snprintf(why, sizeof(why), "CURVE handshake failed (protocol error 0x%x)",
			       (unsigned)v);
	else /* it closed on us: it could not open what we sealed for the key we expect */
		(void)snprintf(why, sizeof(why), "CURVE handshake closed by the peer: its key is "
			       "not the one --curve-peers gives?");
	c->st.auth_failed++;
	if (strcmp(why, p->refusal) != 0)
		PD_LOG(WARN, ctl, "peer %u at %s: %s", p->id, d->endpoint, why);
	(void)strlcpy(p->refusal, why, sizeof(p->refusal));
	if (p->state != PD_CTRL_PEER_UP && p->state != PD_CTRL_PEER_DOWN)
		pd_ctrl_peer_down(c, p, -EACCES, 0);
}

static void drain_dmon(struct pd_ctrl *c, struct pd_ctrl_dealer *d)
{
	uint16_t ev;
	uint32_t v;

	d->mon_pending = 0;
	for (uint32_t n = 0; d->mon && pd_ctrl_has_input(d->mon); n++) {
		if (n == PD_CTRL_DRAIN_MAX) {
			d->mon_pending = 1;
			pd_ctrl_kick(c);
			return;
		}
		if (mon_recv(d->mon, &ev, &v) < 0)
			return;
		dealer_event(c, d, ev, v);
	}
}

static void on_dmon(void *ctx, uint32_t events)
{
	struct pd_ctrl_dealer *d = ctx;
	struct pd_ctrl *c = d->c;

	(void)events;
	c->depth++;  /* a peer going down may retire d: freed after the drain */
	c->now_ns = pd_now_ns();
	drain_dmon(c, d);
	c->depth--;
	pd_ctrl_bury(c);
}

void pd_ctrl_auth_drain_pending(struct pd_ctrl *c)
{
	if (c->zap_pending)
		drain_zap(c);
	if (c->rmon_pending)
		drain_rmon(c);
	for (uint32_t i = 0; c->keys && i < c->npeers; i++) {
		struct pd_ctrl_dealer *d = c->peers[i]->d;

		if (d && d->mon_pending)
			drain_dmon(c, d);
	}
}

/* ---- sockets ------------------------------------------------------------------------- */

int pd_ctrl_auth_open(struct pd_ctrl *c)
{
	int rc;

	c->zap_fd = c->rmon_fd = -1;
	if (!c->keys)
		return 0;
	c->zap = zmq_socket(c->zctx, ZMQ_REP);
	if (!c->zap)
		return pd_zmq_rc(-1);
	rc = pd_ctrl_sock_setup(c, c->zap);
	if (rc == 0)
		rc = pd_zmq_rc(zmq_bind(c->zap, ZAP_ENDPOINT));
	if (rc == 0)
		rc = pd_ctrl_watch(c, c->zap, &c->zap_fd, on_zap, c);
	return rc;
}

void pd_ctrl_auth_close(struct pd_ctrl *c)
{
	mon_close(c, c->router, &c->rmon, &c->rmon_fd);
	if (!c->zap)
		return;
	if (c->zap_fd >= 0)
		pd_loop_del(c->o.loop, c->zap_fd);
	(void)zmq_close(c->zap);
	c->zap = NULL;
}

int pd_ctrl_auth_server(struct pd_ctrl *c, void *router)
{
	const int one = 1;
	int rc;

	if (!c->keys)
		return 0;
	rc = setopt(router, ZMQ_CURVE_SERVER, &one, sizeof(one));
	if (rc == 0)
		rc = setopt(router, ZMQ_CURVE_SECRETKEY, c->keys->sec, PD_CTRL_KEY_LEN);
	if (rc == 0)
		rc = setopt(router, ZMQ_ZAP_DOMAIN, ZAP_DOMAIN, strlen(ZAP_DOMAIN));
	if (rc == 0)
		rc = mon_open(c, router, &c->rmon, &c->rmon_fd, on_rmon, c);
	c->rmon_pending = 1; /* an edge may have come before the watch: look once */
	pd_ctrl_kick(c);
	return rc;
}

/*
 * The server key a DEALER to endpoint demands: the one --curve-peers lists
 * for the endpoint; else that of an authenticated peer that advertises the
 * endpoint as its control address (if it lies, whoever is there cannot
 * prove that key); else, redialling a peer we knew by name, that name's
 * key when it has just one.
 */
static int server_key(const struct pd_ctrl *c, const struct pd_ctrl_peer *p, const char *ep,
		      uint8_t key[PD_CTRL_KEY_LEN])
{
	const struct pd_ctrl_key_entry *e = pd_ctrl_keys_at(c->keys, ep);

	for (uint32_t i = 0; !e && i < c->npeers; i++) {
		const struct pd_ctrl_peer *q = c->peers[i];

		if (q->state == PD_CTRL_PEER_UP && q->has_key && strcmp(q->advertised, ep) == 0) {
			memcpy(key, q->key, PD_CTRL_KEY_LEN);
			return 0;
		}
	}
	if (!e && p && p->has_hello)
		e = pd_ctrl_keys_only(c->keys, p->hello.name);
	if (!e)
		return -ENOKEY;
	memcpy(key, e->key, PD_CTRL_KEY_LEN);
	return 0;
}

int pd_ctrl_auth_client(struct pd_ctrl *c, struct pd_ctrl_dealer *d, const struct pd_ctrl_peer *p)
{
	int rc;

	d->mon_fd = -1;
	if (!c->keys)
		return 0;
	rc = server_key(c, p, d->endpoint, d->skey);
	if (rc < 0) {
		PD_LOG_RL(WARN, ctl, "no CURVE key known for %s: list it in --curve-peers "
			  "(NAME KEY %s)", d->endpoint, d->endpoint);
		return rc;
	}
	d->has_skey = 1;
	rc = setopt(d->sock, ZMQ_CURVE_SERVERKEY, d->skey, PD_CTRL_KEY_LEN);
	if (rc == 0)
		rc = setopt(d->sock, ZMQ_CURVE_PUBLICKEY, c->keys->pub, PD_CTRL_KEY_LEN);
	if (rc == 0)
		rc = setopt(d->sock, ZMQ_CURVE_SECRETKEY, c->keys->sec, PD_CTRL_KEY_LEN);
	if (rc == 0)
		rc = mon_open(c, d->sock, &d->mon, &d->mon_fd, on_dmon, d);
	d->mon_pending = 1;
	pd_ctrl_kick(c);
	return rc;
}

void pd_ctrl_auth_dealer_close(struct pd_ctrl *c, struct pd_ctrl_dealer *d)
{
	mon_close(c, d->sock, &d->mon, &d->mon_fd);
}

const char *pd_ctrl_auth_name_of(const struct pd_ctrl *c, const char *user_id,
				 uint8_t key[PD_CTRL_KEY_LEN])
{
	const struct pd_ctrl_key_entry *e = pd_ctrl_keys_find_z85(c->keys, user_id);

	if (!e)
		return NULL;
	memcpy(key, e->key, PD_CTRL_KEY_LEN);
	return e->name;
}
