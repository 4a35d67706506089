/* SPDX-License-Identifier: MIT */
/*
 * --metrics-listen: a small HTTP/1.x server in the broker's loop, for one
 * job: GET /metrics, one request per connection, under three rules: a
 * connection's deadline runs from its accept, not from its last byte (a
 * client that sends one byte a second cannot keep its place, nor, at the
 * cap, everyone else out); every request it refuses gets an HTTP answer
 * saying why and is counted; and it never blocks or spins the loop it
 * shares with the control plane. The same shape as the admin socket
 * (pd_admin.c): non-blocking sockets, a deadline per connection, a cap.
 *
 * A connection goes READ (the head, at most PD_METRICS_HEAD_MAX bytes, by
 * PD_METRICS_HEAD_MS after the accept) -> WRITE (the whole answer, by
 * PD_METRICS_SEND_MS) -> LINGER (our side shut, what the client still
 * sends read and dropped for at most LINGER_MS, so that closing with
 * unread bytes never resets the connection under its answer) -> closed.
 */
#include <errno.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pd_addr.h"
#include "pd_err.h"
#include "pd_layout.h"
#include "pd_log.h"
#include "pd_loop.h"
#include "pd_metrics_http.h"
#include "pd_metrics_int.h"
#include "pd_stats.h"
#include "pd_sys.h"
#include "pd_time.h"

#define LISTEN_BACKLOG 64
#define ACCEPT_BURST   64        /* accepts per wakeup; the rest at the next turn */
#define LINGER_MS      1000u
#define LINGER_MAX     (64u << 10) /* bytes dropped while lingering, at most */
#define PEER_MAX       64u

_Static_assert(PD_METRICS_HEAD_MS == 2000u, "the 408 text says 2 s");

#define C_READ   1u
#define C_WRITE  2u
#define C_LINGER 3u

struct conn {
	struct pd_metrics *m;
	int fd;                       /* -1: free */
	uint32_t state;               /* C_* */
	uint64_t since_ns;            /* accepted (CLOCK_MONOTONIC) */
	uint64_t deadline_ns;         /* of the current state */
	uint32_t got;                 /* head bytes read */
	uint32_t dropped;             /* bytes read and dropped while lingering */
	struct pd_mbuf out;           /* the answer */
	size_t sent;
	char peer[PEER_MAX];          /* HOST:PORT, for the log */
	char in[PD_METRICS_HEAD_MAX];
};

struct pd_metrics {
	struct pd_loop *loop;
	const struct pd_shm *shm;     /* the statistics region and the segment's state */
	struct pd_stats *snap;        /* the copy a scrape renders */
	struct pd_mbuf body;          /* scratch: the exposition, before its headers */
	char broker[128];
	char addr[PD_ADDR_HOST_MAX + 16];
	int lfd;
	int paused;                   /* the listener is off (accept failed) until the next tick */
	struct pd_metrics_stats st;
	struct conn conn[PD_METRICS_MAX_CONNS];
};

static const char *reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 414: return "URI Too Long";
	case 431: return "Request Header Fields Too Large";
	case 503: return "Service Unavailable";
	case 505: return "HTTP Version Not Supported";
	default: return "Internal Server Error";
	}
}

/* ---- connections ---------------------------------------------------------------------- */

static void conn_close(struct conn *c)
{
	if (c->fd < 0)
		return;
	pd_loop_del(c->m->loop, c->fd);
	(void)close(c->fd);
	c->fd = -1;
	pd_mbuf_free(&c->out);
	c->m->st.conns--;
}

/* Read and drop what is there to read now, up to LINGER_MAX bytes. */
static void drop_input(int fd)
{
	char buf[4096];

	for (uint32_t n = 0; n < LINGER_MAX; n += sizeof(buf))
		if (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) <= 0)
			return;
}

/* Read and drop what the client still sends; closed at EOF, error, or enough. */
static void conn_drain(struct conn *c)
{
	char buf[4096];

	for (;;) {
		ssize_t r = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (r <= 0 || (c->dropped += (uint32_t)r) > LINGER_MAX) {
			conn_close(c);
			return;
		}
	}
}

static void conn_linger(struct conn *c)
{
	uint64_t until = pd_now_ns() + LINGER_MS * PD_NS_PER_MS;

	(void)shutdown(c->fd, SHUT_WR);
	pd_mbuf_free(&c->out);
	c->state = C_LINGER;
	c->dropped = 0;
	if (until < c->deadline_ns)
		c->deadline_ns = until;
	(void)pd_loop_mod(c->m->loop, c->fd, EPOLLIN);
	conn_drain(c);
}

/* Write what is left of the answer, then linger. */
static void conn_flush(struct conn *c)
{
	while (c->sent < c->out.len) {
		ssize_t w = send(c->fd, c->out.p + c->sent, c->out.len - c->sent,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
			(void)pd_loop_mod(c->m->loop, c->fd, EPOLLOUT);
			return;
		}
		if (w <= 0) { /* the client went away under its answer */
			c->m->st.aborted++;
			conn_close(c);
			return;
		}
		c->sent += (size_t)w;
	}
	conn_linger(c);
}

static void count(struct pd_metrics *m, const struct conn *c, int status, const char *why)
{
	if (status == 200) {
		m->st.scrapes++;
		return;
	}
	if (status == 404)
		m->st.not_found++;
	else if (status == 500 || status == 503) /* ours, not the client's */
		m->st.failed++;
	else if (status != 408) /* 408: counted as a timeout */
		m->st.bad_requests++;
	PD_LOG_RL(INFO, http, "metrics: %d %s to %s: %s", status, reason(status), c->peer, why);
}

/* The exposition of a fresh copy of the region into m->body; the status. */
static int render(struct pd_metrics *m, const char **why)
{
	uint32_t state = atomic_load_explicit(&m->shm->seg.hdr->state, memory_order_acquire);

	m->body.len = 0;
	m->body.err = 0;
	if (pd_stats_snapshot(m->shm->stats, m->snap) < 0) {
		*why = "statistics not available";
		return 503;
	}
	pd_stats_sanitize(m->snap);
	if (pd_metrics_render(m->snap, m->broker, pd_segment_state_name(state), pd_realtime_ns(),
			      &m->body) < 0) {
		*why = "out of memory";
		return 500;
	}
	return 200;
}

/* The answer: the exposition (200) or a line saying why; HEAD: no body. */
static void conn_answer(struct conn *c, int status, const struct pd_http_req *r)
{
	struct pd_metrics *m = c->m;
	const char *why = r->why ? r->why : "";
	const char *body;
	size_t blen;

	if (status == 200)
		status = render(m, &why);
	count(m, c, status, why);
	body = status == 200 ? m->body.p : why;
	blen = status == 200 ? m->body.len : strlen(why);
	pd_mbuf_printf(&c->out,
		       "HTTP/1.1 %d %s\r\nContent-Type: text/plain; %scharset=utf-8\r\n"
		       "Content-Length: %zu\r\n%sCache-Control: no-store\r\nConnection: close\r\n\r\n",
		       status, reason(status), status == 200 ? "version=0.0.4; " : "",
		       blen + (status != 200), status == 405 ? "Allow: GET, HEAD\r\n" : "");
	if (!r->head_only) {
		pd_mbuf_add(&c->out, body ? body : "", blen);
		if (status != 200)
			pd_mbuf_add(&c->out, "\n", 1);
	}
	if (c->out.err) {
		m->st.failed++;
		conn_close(c);
		return;
	}
	c->state = C_WRITE;
	c->sent = 0;
	c->deadline_ns = pd_now_ns() + PD_METRICS_SEND_MS * PD_NS_PER_MS;
	conn_flush(c);
}

/* Read the head; answer once it is complete or wrong. */
static void conn_read(struct conn *c)
{
	struct pd_http_req r;
	int eof = 0, status;

	while (c->got < sizeof(c->in)) {
		ssize_t n = recv(c->fd, c->in + c->got, sizeof(c->in) - c->got, MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			break;
		if (n < 0) {
			c->m->st.aborted++;
			conn_close(c);
			return;
		}
		if (n == 0) {
			eof = 1; /* half-closed: what came may still be a whole request */
			break;
		}
		c->got += (uint32_t)n;
	}
	status = pd_metrics_parse(c->in, c->got, sizeof(c->in), &r);
	if (status)
		conn_answer(c, status, &r);
	else if (eof) { /* gone before a whole head: nothing to answer */
		c->m->st.aborted++;
		conn_close(c);
	}
}

static void on_conn(void *ctx, uint32_t events)
{
	struct conn *c = ctx;

	(void)events;
	if (c->state == C_READ)
		conn_read(c);
	else if (c->state == C_WRITE)
		conn_flush(c);
	else
		conn_drain(c);
}

/* Room for one more: a free slot, else the oldest connection goes (one
 * already lingering first: it has had its answer). */
static struct conn *conn_slot(struct pd_metrics *m)
{
	struct conn *old = NULL;

	for (uint32_t i = 0; i < PD_METRICS_MAX_CONNS; i++) {
		struct conn *c = &m->conn[i];

		if (c->fd < 0)
			return c;
		if (!old || (c->state == C_LINGER) > (old->state == C_LINGER) ||
		    ((c->state == C_LINGER) == (old->state == C_LINGER) &&
		     c->since_ns < old->since_ns))
			old = c;
	}
	if (old->state != C_LINGER) {
		static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 21\r\n"
					   "Connection: close\r\n\r\ntoo many connections\n";

		m->st.evicted++;
		if (old->state == C_READ) { /* best effort: it has said nothing useful yet */
			(void)send(old->fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
			(void)shutdown(old->fd, SHUT_WR);
			drop_input(old->fd); /* a FIN after the answer, not a reset under it */
		}
		PD_LOG_RL(INFO, http, "metrics: %u connections open; the oldest (%s) closed",
			  PD_METRICS_MAX_CONNS, old->peer);
	}
	conn_close(old);
	return old;
}

static void peer_name(const struct sockaddr_storage *ss, socklen_t len, char *buf, size_t n)
{
	char host[NI_MAXHOST], serv[NI_MAXSERV];

	if (getnameinfo((const struct sockaddr *)ss, len, host, sizeof(host), serv, sizeof(serv),
			NI_NUMERICHOST | NI_NUMERICSERV) != 0)
		(void)snprintf(buf, n, "?");
	else
		(void)pd_addr_join(buf, n, host, (uint16_t)atoi(serv));
}

static void conn_open(struct pd_metrics *m, int fd, const struct sockaddr_storage *ss,
		      socklen_t len)
{
	struct conn *c = conn_slot(m);
	uint64_t now = pd_now_ns();

	if (pd_loop_add(m->loop, fd, EPOLLIN, on_conn, c) < 0) {
		m->st.accept_errors++;
		(void)close(fd);
		return;
	}
	c->fd = fd;
	c->state = C_READ;
	c->since_ns = now;
	c->deadline_ns = now + PD_METRICS_HEAD_MS * PD_NS_PER_MS;
	c->got = 0;
	c->sent = 0;
	peer_name(ss, len, c->peer, sizeof(c->peer));
	m->st.conns++;
}

/* Accept errors that say nothing about the next connection: go on. */
static int accept_transient(int e)
{
	return e == EINTR || e == ECONNABORTED || e == EPROTO || e == ENETDOWN ||
	       e == ENETUNREACH || e == EHOSTDOWN || e == EHOSTUNREACH || e == ENONET ||
	       e == ENOPROTOOPT || e == EOPNOTSUPP;
}

static void on_accept(void *ctx, uint32_t events)
{
	struct pd_metrics *m = ctx;

	(void)events;
	for (int i = 0; i < ACCEPT_BURST; i++) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		int fd = accept4(m->lfd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
		int e = errno;

		if (fd >= 0) {
			conn_open(m, fd, &ss, len);
			continue;
		}
		if (e == EAGAIN || e == EWOULDBLOCK)
			return;
		if (e != EINTR)
			m->st.accept_errors++;
		if (accept_transient(e))
			continue;
		/* Out of descriptors or memory: the listener stays readable, so
		 * waiting on it would spin. Off until the next tick. */
		PD_LOG_RL(WARN, http, "metrics: accept: %s; not accepting until the next tick",
			  pd_strerror(-e));
		(void)pd_loop_mod(m->loop, m->lfd, 0);
		m->paused = 1;
		return;
	}
}

/* ---- the listener --------------------------------------------------------------------- */

/* m->lfd listening at addr: a numeric IPv4 or IPv6 host ("*" or "0.0.0.0":
 * every IPv4 address) as --data takes it; m->addr as bound. */
static int listen_at(struct pd_metrics *m, const char *addr, char *err, size_t errlen)
{
	char host[PD_ADDR_HOST_MAX + 1];
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	uint16_t port;
	int rc = pd_addr_split(addr, strlen(addr), PD_ADDR_PORT_ANY, host, sizeof(host), &port);

	if (rc == 0 && (!strcmp(host, "*") || !strcmp(host, "0.0.0.0")))
		(void)snprintf(host, sizeof(host), "0.0.0.0");
	if (rc == 0)
		rc = pd_sock_addr(host, port, &ss, &len);
	if (rc < 0) {
		pd_err_set(err, errlen, "--metrics-listen %s: not a numeric HOST:PORT", addr);
		return -EINVAL;
	}
	rc = pd_sock_listen(&ss, len, LISTEN_BACKLOG);
	if (rc < 0) {
		pd_err_set(err, errlen, "--metrics-listen %s: cannot listen", addr);
		return rc;
	}
	m->lfd = rc;
	len = sizeof(ss);
	if (getsockname(m->lfd, (struct sockaddr *)&ss, &len) == 0)
		peer_name(&ss, len, m->addr, sizeof(m->addr));
	return 0;
}

int pd_metrics_create(const struct pd_metrics_opts *o, struct pd_metrics **out, char *err,
		      size_t errlen)
{
	struct pd_metrics *m;
	int rc;

	if (!o || !o->loop || !o->listen || !o->shm || !o->shm->stats || !out)
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->loop = o->loop;
	m->shm = o->shm;
	m->lfd = -1;
	(void)snprintf(m->broker, sizeof(m->broker), "%s", o->broker ? o->broker : "");
	for (uint32_t i = 0; i < PD_METRICS_MAX_CONNS; i++) {
		m->conn[i].fd = -1;
		m->conn[i].m = m;
	}
	m->snap = malloc(sizeof(*m->snap));
	rc = m->snap ? listen_at(m, o->listen, err, errlen) : -ENOMEM;
	if (rc == 0)
		rc = pd_loop_add(m->loop, m->lfd, EPOLLIN, on_accept, m);
	if (rc < 0) {
		pd_metrics_destroy(m);
		return rc;
	}
	PD_LOG(INFO, http, "metrics: serving http://%s/metrics", m->addr);
	*out = m;
	return 0;
}

void pd_metrics_destroy(struct pd_metrics *m)
{
	if (!m)
		return;
	for (uint32_t i = 0; i < PD_METRICS_MAX_CONNS; i++)
		conn_close(&m->conn[i]);
	if (m->lfd >= 0) {
		pd_loop_del(m->loop, m->lfd);
		(void)close(m->lfd);
	}
	pd_mbuf_free(&m->body);
	free(m->snap);
	free(m);
}

void pd_metrics_tick(struct pd_metrics *m, uint64_t now_ns)
{
	static const struct pd_http_req late = {
		.why = "request timeout: the request head must arrive within 2 s" };

	if (!m)
		return;
	if (m->paused && pd_loop_mod(m->loop, m->lfd, EPOLLIN) == 0)
		m->paused = 0;
	for (uint32_t i = 0; i < PD_METRICS_MAX_CONNS; i++) {
		struct conn *c = &m->conn[i];

		if (c->fd < 0 || now_ns < c->deadline_ns)
			continue;
		if (c->state != C_LINGER)
			m->st.timeouts++;
		if (c->state == C_READ)
			conn_answer(c, 408, &late); /* then its own (short) deadlines */
		else
			conn_close(c);
	}
}

void pd_metrics_get_stats(const struct pd_metrics *m, struct pd_metrics_stats *out)
{
	*out = m->st;
}

const char *pd_metrics_addr(const struct pd_metrics *m)
{
	return m->addr;
}
