/* SPDX-License-Identifier: MIT */
/*
 * Control plane sockets: options, frames, sending without blocking, and the
 * edge-triggered drain of ZMQ_FD.
 *
 * ZMQ_FD is not a data fd: it signals that the socket's state may have
 * changed, once. On a wake, ZMQ_EVENTS is read (which also runs pending
 * socket commands) and messages are received until ZMQ_POLLIN clears. A
 * send can consume that signal too, so after every send ZMQ_EVENTS is read
 * again; input found then (or left over by the per-wake budget) marks the
 * socket pending and writes the kick eventfd, whose handler drains it. No
 * path ever waits inside ZeroMQ: every send and receive is ZMQ_DONTWAIT.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <bsd/string.h>

#include "pd_ctrl_int.h"
#include "pd_log.h"
#include "pd_time.h"

#define FRAMES_MAX 3u  /* routing id, delimiter, payload */

/* The frames of one message: the first FRAMES_MAX kept, the rest counted. */
struct frames {
	zmq_msg_t f[FRAMES_MAX];
	uint32_t n;
	uint32_t total;
};

static int setopt_int(void *sock, int opt, int v)
{
	return pd_zmq_rc(zmq_setsockopt(sock, opt, &v, sizeof(v)));
}

int pd_ctrl_sock_setup(struct pd_ctrl *c, void *sock)
{
	int64_t maxmsg = 2 * (int64_t)PD_WIRE_MAX_MSG; /* beyond: ZeroMQ drops the peer */
	int hwm = (int)c->o.sndhwm;
	uint64_t ivl_ms = c->o.heartbeat_ns / 4 / PD_NS_PER_MS;
	int rc;

	ivl_ms = ivl_ms < 10 ? 10 : ivl_ms > 100 ? 100 : ivl_ms;
	rc = setopt_int(sock, ZMQ_LINGER, 0);
	if (rc == 0)
		rc = setopt_int(sock, ZMQ_SNDTIMEO, 0);
	if (rc == 0)
		rc = setopt_int(sock, ZMQ_RCVTIMEO, 0);
	if (rc == 0)
		rc = setopt_int(sock, ZMQ_SNDHWM, hwm);
	if (rc == 0)
		rc = setopt_int(sock, ZMQ_RCVHWM, hwm);
	if (rc == 0)
		rc = setopt_int(sock, ZMQ_RECONNECT_IVL, (int)ivl_ms);
	if (rc == 0)
		rc = pd_zmq_rc(zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof(maxmsg)));
	return rc;
}

int pd_ctrl_watch(struct pd_ctrl *c, void *sock, int *fd, pd_loop_fn *fn, void *ctx)
{
	size_t len = sizeof(*fd);
	int rc = pd_zmq_rc(zmq_getsockopt(sock, ZMQ_FD, fd, &len));

	if (rc < 0)
		return rc;
	return pd_loop_add(c->o.loop, *fd, EPOLLIN | EPOLLET, fn, ctx);
}

int pd_ctrl_has_input(void *sock)
{
	int ev = 0;
	size_t len = sizeof(ev);

	if (zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &len) < 0)
		return 0;
	return (ev & ZMQ_POLLIN) != 0;
}

void pd_ctrl_kick(struct pd_ctrl *c)
{
	uint64_t one = 1;

	if (c->kicked)
		return;
	c->kicked = 1;
	if (write(c->kick_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
		PD_LOG_RL(ERR, ctl, "kick eventfd write failed: %s", strerror(errno));
}

/* After a send on sock: input it hid from the edge is drained on the kick. */
static int sent(struct pd_ctrl *c, void *sock, uint32_t *pending, int rc)
{
	if (pd_ctrl_has_input(sock)) {
		*pending = 1;
		pd_ctrl_kick(c);
	}
	if (rc >= 0) {
		c->st.tx_msgs++;
		return 0;
	}
	if (rc == -EAGAIN) {
		c->st.tx_again++;
		return rc;
	}
	c->st.tx_fail++;
	return rc == -EHOSTUNREACH ? -ENOTCONN : rc;
}

static int send_frame(void *sock, const void *buf, size_t len, int more)
{
	return pd_zmq_rc(zmq_send(sock, buf, len, ZMQ_DONTWAIT | (more ? ZMQ_SNDMORE : 0)));
}

/* Multipart messages are atomic in ZeroMQ: when the first frame is
 * accepted, the rest are too; so a refusal never leaves half a message. */
int pd_ctrl_send_dealer(struct pd_ctrl *c, struct pd_ctrl_dealer *d, const void *buf,
			size_t len)
{
	int rc = send_frame(d->sock, "", 0, 1);

	if (rc >= 0)
		rc = send_frame(d->sock, buf, len, 0);
	return sent(c, d->sock, &d->pending, rc);
}

int pd_ctrl_send_router(struct pd_ctrl *c, const uint8_t *rid, uint32_t rid_len,
			const void *buf, size_t len)
{
	int rc = send_frame(c->router, rid, rid_len, 1);

	if (rc >= 0)
		rc = send_frame(c->router, "", 0, 1);
	if (rc >= 0)
		rc = send_frame(c->router, buf, len, 0);
	return sent(c, c->router, &c->router_pending, rc);
}

/* Each DEALER's routing id is unique per (name, epoch, socket), so a TCP
 * reconnect of the same socket keeps its session at the remote ROUTER,
 * and a new socket is a new session there. */
static int set_routing_id(struct pd_ctrl *c, void *sock)
{
	char rid[PD_CTRL_RID_MAX + 1];
	int n = snprintf(rid, sizeof(rid), "%s.%" PRIu64 ".%" PRIu64, c->name, c->o.epoch,
			 ++c->dealer_gen);

	return pd_zmq_rc(zmq_setsockopt(sock, ZMQ_ROUTING_ID, rid, (size_t)n));
}

int pd_ctrl_dealer_open(struct pd_ctrl *c, struct pd_ctrl_peer *p, const char *endpoint)
{
	struct pd_ctrl_dealer *d = calloc(1, sizeof(*d));
	int rc;

	if (!d)
		return -ENOMEM;
	*d = (struct pd_ctrl_dealer){ .c = c, .fd = -1, .mon_fd = -1 };
	(void)strlcpy(d->endpoint, endpoint, sizeof(d->endpoint));
	d->sock = zmq_socket(c->zctx, ZMQ_DEALER);
	if (!d->sock) {
		rc = pd_zmq_rc(-1);
		goto out_free;
	}
	rc = pd_ctrl_sock_setup(c, d->sock);
	if (rc == 0)
		rc = set_routing_id(c, d->sock);
	if (rc == 0)
		rc = pd_ctrl_auth_client(c, d, p); /* CURVE: before the connect */
	if (rc == 0)
		rc = pd_zmq_rc(zmq_connect(d->sock, endpoint));
	if (rc == 0)
		rc = pd_ctrl_watch(c, d->sock, &d->fd, pd_ctrl_on_dealer, d);
	if (rc < 0)
		goto out_close;
	d->p = p;
	p->d = d;
	(void)pd_ctrl_hello_send(c, d);  /* refused: the tick says Hello again */
	return 0;

out_close:
	pd_ctrl_auth_dealer_close(c, d);
	(void)zmq_close(d->sock);
out_free:
	free(d);
	return rc;
}

/* Close d now; its memory waits for the end of the dispatch (a drain loop
 * may still hold it). */
void pd_ctrl_dealer_retire(struct pd_ctrl *c, struct pd_ctrl_dealer *d)
{
	if (!d || !d->sock)
		return;
	pd_ctrl_auth_dealer_close(c, d);
	pd_loop_del(c->o.loop, d->fd);
	(void)zmq_close(d->sock);
	d->sock = NULL;
	if (d->p && d->p->d == d)
		d->p->d = NULL;
	d->p = NULL;
	LIST_INSERT_HEAD(&c->graveyard, d, grave);
}

void pd_ctrl_bury(struct pd_ctrl *c)
{
	struct pd_ctrl_dealer *d;

	if (c->depth)
		return;
	while ((d = LIST_FIRST(&c->graveyard))) {
		LIST_REMOVE(d, grave);
		free(d);
	}
}

static void frames_close(struct frames *fr)
{
	for (uint32_t i = 0; i < fr->n; i++)
		(void)zmq_msg_close(&fr->f[i]);
	fr->n = 0;
}

/* Receive one whole message. @return 0, or -EAGAIN when there is none. */
static int frames_recv(void *sock, struct frames *fr)
{
	zmq_msg_t extra;
	int more = 1;

	fr->n = fr->total = 0;
	while (more) {
		zmq_msg_t *m = fr->n < FRAMES_MAX ? &fr->f[fr->n] : &extra;
		int rc;

		(void)zmq_msg_init(m);
		rc = pd_zmq_rc(zmq_msg_recv(m, sock, ZMQ_DONTWAIT));
		if (rc < 0) {
			(void)zmq_msg_close(m);
			return fr->total ? 0 : rc;  /* a message is delivered whole */
		}
		more = zmq_msg_more(m);
		fr->total++;
		if (m == &extra)
			(void)zmq_msg_close(m);
		else
			fr->n++;
	}
	return 0;
}

static void bad_frames(struct pd_ctrl *c, const struct pd_ctrl_from *f, uint32_t total)
{
	char text[96];

	c->st.bad_frames++;
	(void)snprintf(text, sizeof(text), "expected [\"\", payload], got %u frames%s", total,
		       total == 2 ? " or a non-empty delimiter" : "");
	PD_LOG_RL(WARN, ctl, "dropped a message: %s", text);
	pd_ctrl_reply_error(c, f, -EPROTO, 0, text);
}

/* One message from the ROUTER: [rid, "", payload]. */
static int router_one(struct pd_ctrl *c)
{
	struct pd_ctrl_from f = { 0 };
	struct frames fr;
	int rc = frames_recv(c->router, &fr);

	if (rc < 0)
		return rc;
	f.rid = zmq_msg_data(&fr.f[0]);
	f.rid_len = (uint32_t)zmq_msg_size(&fr.f[0]);
	if (c->keys && fr.n > 1) /* CURVE: the key ZAP admitted the connection with (on
				 * the frames it sent, not on the routing id) */
		f.user_id = zmq_msg_gets(&fr.f[fr.n - 1], "User-Id");
	if (fr.total != 3 || zmq_msg_size(&fr.f[1]) != 0)
		bad_frames(c, &f, fr.total - 1);
	else
		pd_ctrl_rx(c, &f, zmq_msg_data(&fr.f[2]), zmq_msg_size(&fr.f[2]));
	frames_close(&fr);
	return 0;
}

/* One message from a DEALER: ["", payload]. */
static int dealer_one(struct pd_ctrl *c, struct pd_ctrl_dealer *d)
{
	struct pd_ctrl_from f = { .d = d };
	struct frames fr;
	int rc = frames_recv(d->sock, &fr);

	if (rc < 0)
		return rc;
	if (fr.total != 2 || zmq_msg_size(&fr.f[0]) != 0)
		bad_frames(c, &f, fr.total);
	else
		pd_ctrl_rx(c, &f, zmq_msg_data(&fr.f[1]), zmq_msg_size(&fr.f[1]));
	frames_close(&fr);
	return 0;
}

static void drain_router(struct pd_ctrl *c)
{
	c->router_pending = 0;
	for (uint32_t n = 0; pd_ctrl_has_input(c->router); n++) {
		if (n == PD_CTRL_DRAIN_MAX) {  /* let the other fds have a turn */
			c->router_pending = 1;
			pd_ctrl_kick(c);
			return;
		}
		if (router_one(c) < 0)
			return;
	}
}

/* Handling a message may retire d (peer down, merge): then d->sock is NULL. */
static void drain_dealer(struct pd_ctrl *c, struct pd_ctrl_dealer *d)
{
	d->pending = 0;
	for (uint32_t n = 0; d->sock && pd_ctrl_has_input(d->sock); n++) {
		if (n == PD_CTRL_DRAIN_MAX) {
			d->pending = 1;
			pd_ctrl_kick(c);
			return;
		}
		if (dealer_one(c, d) < 0)
			return;
	}
}

static void enter(struct pd_ctrl *c)
{
	c->depth++;
	c->now_ns = pd_now_ns();
}

static void leave(struct pd_ctrl *c)
{
	c->depth--;
	pd_ctrl_bury(c);
}

void pd_ctrl_on_router(void *ctx, uint32_t events)
{
	struct pd_ctrl *c = ctx;

	(void)events;
	enter(c);
	drain_router(c);
	leave(c);
}

void pd_ctrl_on_dealer(void *ctx, uint32_t events)
{
	struct pd_ctrl_dealer *d = ctx;
	struct pd_ctrl *c = d->c;

	(void)events;
	enter(c);
	drain_dealer(c, d);
	leave(c);
}

void pd_ctrl_on_kick(void *ctx, uint32_t events)
{
	struct pd_ctrl *c = ctx;
	uint64_t v;

	(void)events;
	if (read(c->kick_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		PD_LOG_RL(ERR, ctl, "kick eventfd read failed: %s", strerror(errno));
	c->kicked = 0;
	enter(c);
	if (c->router_pending)
		drain_router(c);
	pd_ctrl_auth_drain_pending(c);
	for (uint32_t i = 0; i < c->npeers; i++) {
		struct pd_ctrl_dealer *d = c->peers[i]->d;

		if (d && d->pending)
			drain_dealer(c, d);
	}
	leave(c);
}
