/* SPDX-License-Identifier: MIT */
/*
 * TCP transport, receive side: the listener thread and one thread per
 * accepted connection.
 *
 * Listener: poll(listen socket, stop eventfd, reap eventfd) with no
 * timeout. It accepts, starts a connection thread (or closes the socket at
 * once when max_conns are running) and joins the connection threads that
 * have finished (they signal the reap eventfd).
 *
 * Connection: HELLO within hello_timeout_ms -> accept_peer -> HELLO
 * reply; then per frame: header (waiting for its first byte without a
 * deadline, the rest with io_timeout_ms of no progress) -> claim -> payload
 * straight into the claimed memory -> landed -> ACK. Any error closes the
 * connection. The stop eventfd, written once by pd_tcp_stop and never
 * drained, interrupts every wait (-ECONNABORTED).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_tcp_int.h"
#include "pd_time.h"

#define LISTEN_BACKLOG 128
#define ACCEPT_BACKOFF_MS 100 /* after EMFILE and friends: do not spin */
#define STATUS_MIN (-4095)

/* The stop eventfd is never drained: once readable, every wait gives up. */
static int conn_check(void *arg)
{
	(void)arg;
	return -ECONNABORTED;
}

/* ---- connection: HELLO -------------------------------------------------------- */

static int conn_reply(struct pd_tcp_conn *c, const struct pd_tcp_hdr *req, int status,
		      uint64_t deadline, const struct pd_tcp_wait *w)
{
	struct pd_tcp_hdr h = {
		.magic = PD_TCP_MAGIC, .version = PD_TCP_WIRE_VERSION, .type = PD_TCP_T_HELLO,
		.slot = req->slot, .gen = req->gen, .status = status,
	};
	uint8_t buf[PD_TCP_HDR_SIZE];

	pd_tcp_hdr_encode(&h, buf);
	return pd_tcp_io_send_all(c->fd, buf, sizeof(buf), deadline, w);
}

/* A bad first frame. If it is our magic and a HELLO of another version,
 * say -EPROTO before closing, so the sender reports a version mismatch
 * rather than a reset; anything else is closed without a word. */
static int conn_hello_bad(struct pd_tcp_conn *c, const struct pd_tcp_hdr *h,
			  uint64_t deadline, const struct pd_tcp_wait *w)
{
	PD_TCP_STAT_INC(c->t, proto_errors, 1);
	if (h->magic == PD_TCP_MAGIC && h->type == PD_TCP_T_HELLO &&
	    h->version != PD_TCP_WIRE_VERSION)
		(void)conn_reply(c, h, -EPROTO, deadline, w);
	return -EPROTO;
}

static int conn_hello(struct pd_tcp_conn *c)
{
	struct pd_tcp *t = c->t;
	struct pd_tcp_wait w = { .wake_fd = t->stop_fd, .check = conn_check, .arg = c };
	uint64_t deadline = pd_deadline_ms(t->o.hello_timeout_ms);
	uint8_t buf[PD_TCP_HDR_SIZE];
	struct pd_tcp_hdr h;
	uint32_t lane = UINT32_MAX;
	int rc;

	rc = pd_tcp_sock_tune(c->fd);
	if (rc == 0)
		rc = pd_tcp_io_recv_all(c->fd, buf, sizeof(buf), deadline, &w);
	if (rc < 0)
		return rc;
	if (pd_tcp_hdr_decode(buf, 0, &h) < 0 || h.type != PD_TCP_T_HELLO)
		return conn_hello_bad(c, &h, deadline, &w);
	rc = t->o.ops->accept_peer(t->o.ctx, h.tag, &lane);
	if (rc == 0)
		rc = pd_tcp_conn_up(c, lane);
	if (rc != 0) {
		rc = rc < 0 && rc >= STATUS_MIN ? rc : -EACCES;
		PD_TCP_STAT_INC(t, hellos_rejected, 1);
		PD_TCP_LOG_RL(t, WARN, "HELLO refused: %s", pd_strerror(rc));
		(void)conn_reply(c, &h, rc, deadline, &w);
		return rc;
	}
	return conn_reply(c, &h, 0, deadline, &w);
}

/* ---- connection: frames ------------------------------------------------------- */

/* 1 and *h: a DATA header; 0: the sender closed between frames; -errno. */
static int conn_read_hdr(struct pd_tcp_conn *c, struct pd_tcp_hdr *h)
{
	struct pd_tcp *t = c->t;
	struct pd_tcp_wait idle = { .wake_fd = t->stop_fd, .check = conn_check, .arg = c };
	struct pd_tcp_wait io = idle;
	uint8_t buf[PD_TCP_HDR_SIZE];
	ssize_t r;
	int rc;

	io.idle_ns = t->o.io_timeout_ms * PD_NS_PER_MS;
	for (;;) {
		r = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (r >= 0)
			break;
		rc = -errno;
		if (rc == -EAGAIN)
			rc = pd_tcp_io_wait(c->fd, POLLIN, 0, &idle);
		if (rc < 0 && rc != -EINTR)
			return rc;
	}
	if (r == 0)
		return 0;
	rc = pd_tcp_io_recv_all(c->fd, buf + r, sizeof(buf) - (size_t)r, 0, &io);
	if (rc < 0)
		return rc;
	if (pd_tcp_hdr_decode(buf, t->o.max_frame, h) < 0 || h->type != PD_TCP_T_DATA) {
		PD_TCP_STAT_INC(t, proto_errors, 1);
		return -EPROTO;
	}
	return 1;
}

static int conn_ack(struct pd_tcp_conn *c, const struct pd_tcp_hdr *d)
{
	struct pd_tcp *t = c->t;
	struct pd_tcp_wait io = { .wake_fd = t->stop_fd, .check = conn_check, .arg = c,
				  .idle_ns = t->o.io_timeout_ms * PD_NS_PER_MS };
	struct pd_tcp_hdr h = *d;
	uint8_t buf[PD_TCP_HDR_SIZE];
	int rc;

	h.type = PD_TCP_T_ACK;
	h.len = 0;
	h.status = 0;
	pd_tcp_hdr_encode(&h, buf);
	rc = pd_tcp_io_send_all(c->fd, buf, sizeof(buf), 0, &io);
	if (rc == 0)
		PD_TCP_STAT_INC(t, acks_tx, 1);
	return rc;
}

/* claim -> payload into dst -> landed -> ACK. A refusal writes nothing. */
static int conn_data(struct pd_tcp_conn *c, const struct pd_tcp_hdr *h)
{
	struct pd_tcp *t = c->t;
	const struct pd_tcp_ops *ops = t->o.ops;
	struct pd_tcp_wait io = { .wake_fd = t->stop_fd, .check = conn_check, .arg = c,
				  .idle_ns = t->o.io_timeout_ms * PD_NS_PER_MS };
	struct pd_tcp_wdesc d = { .slot = h->slot, .gen = h->gen, .len = h->len,
				  .tag = h->tag, .cookie = h->cookie };
	struct pd_tcp_dst dst = { 0 };
	int rc;

	rc = ops->claim(t->o.ctx, c->peer, &d, &dst);
	if (rc != 0) {
		PD_TCP_STAT_INC(t, writes_rejected, 1);
		return rc < 0 ? rc : -EPERM;
	}
	if (d.len > dst.cap || (d.len && !dst.ptr)) {
		PD_TCP_STAT_INC(t, writes_rejected, 1);
		rc = -EMSGSIZE;
	} else {
		rc = pd_tcp_io_recv_all(c->fd, dst.ptr, d.len, 0, &io);
	}
	ops->landed(t->o.ctx, c->peer, &d, &dst, rc);
	if (rc < 0)
		return rc;
	PD_TCP_STAT_INC(t, frames_rx, 1);
	PD_TCP_STAT_INC(t, bytes_rx, d.len);
	return conn_ack(c, h);
}

static int conn_serve(struct pd_tcp_conn *c)
{
	struct pd_tcp_hdr h;
	int rc;

	for (;;) {
		rc = conn_read_hdr(c, &h);
		if (rc <= 0)
			return rc;
		rc = conn_data(c, &h);
		if (rc < 0)
			return rc;
	}
}

static void *conn_main(void *arg)
{
	struct pd_tcp_conn *c = arg;
	struct pd_tcp *t = c->t;
	int rc;

	rc = conn_hello(c);
	if (rc == 0)
		rc = conn_serve(c);
	if (rc < 0 && rc != -ECONNABORTED) {
		PD_TCP_STAT_INC(t, conn_errors, 1);
		PD_TCP_LOG_RL(t, WARN, "connection of peer %u closed: %s", c->peer, pd_strerror(rc));
	}
	pd_tcp_conn_close(c);
	/* Release: pairs with the acquire in pd_tcp_conns_reap; c may be freed from
	 * here on, so t was read before. */
	atomic_store_explicit(&c->done, 1, memory_order_release);
	pd_efd_signal(t->reap_fd);
	return NULL;
}

/* ---- listener ----------------------------------------------------------------- */

static void *conn_main(void *arg);

static void conn_start(struct pd_tcp *t, int fd)
{
	int rc = pd_tcp_conns_add(t, fd, conn_main);

	if (rc == 0) {
		PD_TCP_STAT_INC(t, conns_accepted, 1);
		return;
	}
	PD_TCP_STAT_INC(t, conns_refused, 1);
	PD_TCP_LOG_RL(t, WARN, "connection refused: %s", rc == -EBUSY ?
		      "max connections running" : pd_strerror(rc));
	(void)close(fd);
}

/* 0 to carry on, -ECONNABORTED when stopping. */
static int accept_all(struct pd_tcp *t)
{
	struct pollfd stop = { .fd = t->stop_fd, .events = POLLIN };

	for (;;) {
		int fd = pd_sys_rc(accept4(t->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC));

		if (fd >= 0) {
			conn_start(t, fd);
			continue;
		}
		if (fd == -EINTR || fd == -ECONNABORTED)
			continue;
		if (fd == -EAGAIN)
			return 0;
		/* EMFILE, ENFILE, ENOBUFS, ENOMEM: the backlog stays readable,
		 * so back off instead of spinning; the stop fd still wakes us. */
		PD_TCP_LOG_RL(t, ERR, "accept: %s", pd_strerror(fd));
		return poll(&stop, 1, ACCEPT_BACKOFF_MS) > 0 ? -ECONNABORTED : 0;
	}
}

static void *listener_main(void *arg)
{
	struct pd_tcp *t = arg;
	struct pollfd pfd[3] = {
		{ .fd = t->lfd, .events = POLLIN },
		{ .fd = t->stop_fd, .events = POLLIN },
		{ .fd = t->reap_fd, .events = POLLIN },
	};

	for (;;) {
		int rc = pd_sys_rc(poll(pfd, 3, -1));

		if (rc == -EINTR)
			continue;
		if (rc < 0) { /* ENOMEM: back off as accept_all does */
			PD_TCP_LOG_RL(t, ERR, "poll: %s", pd_strerror(rc));
			if (poll(&pfd[1], 1, ACCEPT_BACKOFF_MS) > 0)
				break;
			continue;
		}
		if (pfd[1].revents)
			break;
		if (pfd[2].revents) {
			pd_efd_drain(t->reap_fd);
			pd_tcp_conns_reap(t, 0);
		}
		if (pfd[0].revents && accept_all(t) < 0)
			break;
	}
	return NULL;
}

static int bound_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int rc = pd_sys_rc(getsockname(fd, (struct sockaddr *)&ss, &len));

	if (rc < 0)
		return rc;
	if (ss.ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)&ss)->sin_port);
	return ntohs(((const struct sockaddr_in6 *)&ss)->sin6_port);
}

int pd_tcp_listen(struct pd_tcp *t, const char *host, uint16_t port)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int rc, fd;

	if (!t || !t->o.ops || pd_sock_addr(host, port, &ss, &len) < 0)
		return -EINVAL;
	if (t->stopped)
		return -ESHUTDOWN;
	if (t->lfd >= 0)
		return -EBUSY;
	fd = pd_sock_listen(&ss, len, LISTEN_BACKLOG);
	if (fd < 0)
		return fd;
	rc = bound_port(fd);
	if (rc < 0)
		goto out_close;
	t->lfd = fd;
	atomic_store_explicit(&t->port, rc, memory_order_relaxed);
	rc = pd_thread_start(&t->lthr, listener_main, t);
	if (rc < 0)
		goto out_unlisten;
	t->lstarted = 1;
	return 0;

out_unlisten:
	t->lfd = -1;
	atomic_store_explicit(&t->port, 0, memory_order_relaxed);
out_close:
	(void)close(fd);
	return rc;
}

void pd_tcp_rx_stop(struct pd_tcp *t)
{
	pd_efd_signal(t->stop_fd);
	if (t->lstarted)
		pd_thread_join(t->lthr);
	t->lstarted = 0;
	pd_tcp_conns_reap(t, 1);
	if (t->lfd >= 0)
		(void)close(t->lfd);
	t->lfd = -1;
	atomic_store_explicit(&t->port, 0, memory_order_relaxed);
}
