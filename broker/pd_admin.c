/* SPDX-License-Identifier: MIT */
/* The admin socket's connections: framing, deadlines, non-blocking I/O. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "pd_admin.h"
#include "pd_admin_proto.h"
#include "pd_attach.h"
#include "pd_broker_int.h"
#include "pd_log.h"
#include "pd_time.h"
#include "pd_wire.h"

struct admin_conn {
	struct pd_admin *owner;
	int fd;                        /* -1: free */
	uint64_t since_ns;
	uint32_t got;                  /* request bytes read, frame header included */
	uint8_t in[4 + PD_ADMIN_REQ_MAX];
	msgpack_sbuffer out;           /* frame header + answer */
	size_t sent;
};

struct pd_admin {
	struct pd_broker *b;
	int lfd;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct admin_conn conn[PD_ADMIN_MAX_CONNS];
};

/* ---- framing ----------------------------------------------------------------------- */

uint32_t pd_admin_frame_len(const uint8_t hdr[4])
{
	uint32_t len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 |
		       hdr[3];

	return len <= PD_ADMIN_REQ_MAX ? len : 0;
}

int pd_admin_answer(struct pd_broker *b, const uint8_t *req, uint32_t len, msgpack_sbuffer *out,
		    char *err, size_t errlen)
{
	uint8_t hdr[4] = { 0 };
	uint32_t n;
	int rc = pd_wire_scan(req, len, err, errlen);

	if (rc < 0)
		return rc;
	msgpack_sbuffer_init(out);
	msgpack_sbuffer_write(out, (const char *)hdr, sizeof(hdr));
	rc = pd_admin_run(b, req, len, out);
	if (rc == 0 && out->size - 4 > PD_ADMIN_ANS_MAX)
		rc = -EMSGSIZE;
	if (rc < 0) {
		(void)snprintf(err, errlen, "answer too large or out of memory");
		return rc;
	}
	n = (uint32_t)(out->size - 4);
	out->data[0] = (char)(n >> 24);
	out->data[1] = (char)(n >> 16);
	out->data[2] = (char)(n >> 8);
	out->data[3] = (char)n;
	return 0;
}

/* ---- connections -------------------------------------------------------------------- */

static void conn_close(struct admin_conn *c)
{
	if (c->fd < 0)
		return;
	pd_loop_del(c->owner->b->loop, c->fd);
	(void)close(c->fd);
	c->fd = -1;
	msgpack_sbuffer_destroy(&c->out);
	memset(&c->out, 0, sizeof(c->out));
}

static void conn_bad(struct admin_conn *c, const char *why)
{
	c->owner->b->admin_bad++;
	PD_LOG(WARN, ctl, "admin: %s; connection closed", why);
	conn_close(c);
}

/* Write what is left of the answer; close when done. */
static void conn_flush(struct admin_conn *c)
{
	while (c->sent < c->out.size) {
		ssize_t w = send(c->fd, c->out.data + c->sent, c->out.size - c->sent,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
			(void)pd_loop_mod(c->owner->b->loop, c->fd, EPOLLOUT);
			return;
		}
		if (w <= 0) {
			conn_close(c);
			return;
		}
		c->sent += (size_t)w;
	}
	conn_close(c);
}

static void conn_answer(struct admin_conn *c, uint32_t len)
{
	char err[128];

	if (pd_admin_answer(c->owner->b, c->in + 4, len, &c->out, err, sizeof(err)) < 0) {
		conn_bad(c, err);
		return;
	}
	c->owner->b->admin_requests++;
	conn_flush(c);
}

static void conn_read(struct admin_conn *c)
{
	uint32_t want = 4, len = 0;

	for (;;) {
		ssize_t r;

		if (c->got >= 4) {
			len = pd_admin_frame_len(c->in);
			if (len == 0) {
				conn_bad(c, "request frame length out of bounds");
				return;
			}
			want = 4 + len;
		}
		if (c->got == want && want > 4) {
			conn_answer(c, len);
			return;
		}
		r = recv(c->fd, c->in + c->got, want - c->got, MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (r <= 0) { /* closed before a whole request */
			conn_close(c);
			return;
		}
		c->got += (uint32_t)r;
	}
}

static void on_conn(void *ctx, uint32_t events)
{
	struct admin_conn *c = ctx;

	if (c->out.data)
		conn_flush(c);
	else if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
		conn_read(c);
}

static void on_accept(void *ctx, uint32_t events)
{
	struct pd_admin *a = ctx;
	struct admin_conn *c = NULL;
	int fd;

	(void)events;
	while ((fd = accept4(a->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		for (uint32_t i = 0; i < PD_ADMIN_MAX_CONNS && !c; i++)
			if (a->conn[i].fd < 0)
				c = &a->conn[i];
		if (!c || pd_loop_add(a->b->loop, fd, EPOLLIN, on_conn, c) < 0) {
			a->b->admin_bad++;
			(void)close(fd); /* busy: the client sees the connection closed */
			continue;
		}
		c->fd = fd;
		c->got = 0;
		c->sent = 0;
		c->since_ns = pd_now_ns();
		c = NULL;
	}
}

int pd_admin_create(struct pd_broker *b, const char *path, struct pd_admin **out)
{
	struct pd_admin *a = calloc(1, sizeof(*a));
	char err[256];
	int rc;

	if (!a)
		return -ENOMEM;
	a->b = b;
	a->lfd = -1;
	for (uint32_t i = 0; i < PD_ADMIN_MAX_CONNS; i++) {
		a->conn[i].fd = -1;
		a->conn[i].owner = a;
	}
	(void)snprintf(a->path, sizeof(a->path), "%s", path);
	rc = pd_attach_listen(path, 0660, b->gid, &a->lfd, err, sizeof(err));
	if (rc == 0)
		rc = pd_loop_add(b->loop, a->lfd, EPOLLIN, on_accept, a);
	if (rc < 0) {
		pd_admin_destroy(a);
		return rc;
	}
	*out = a;
	return 0;
}

void pd_admin_tick(struct pd_admin *a, uint64_t now_ns)
{
	if (!a)
		return;
	for (uint32_t i = 0; i < PD_ADMIN_MAX_CONNS; i++) {
		struct admin_conn *c = &a->conn[i];

		if (c->fd >= 0 && now_ns - c->since_ns > PD_ADMIN_TIMEOUT_MS * PD_NS_PER_MS)
			conn_bad(c, "client too slow");
	}
}

uint32_t pd_admin_open(const struct pd_admin *a)
{
	uint32_t n = 0;

	for (uint32_t i = 0; a && i < PD_ADMIN_MAX_CONNS; i++)
		n += a->conn[i].fd >= 0;
	return n;
}

void pd_admin_destroy(struct pd_admin *a)
{
	if (!a)
		return;
	for (uint32_t i = 0; i < PD_ADMIN_MAX_CONNS; i++)
		conn_close(&a->conn[i]);
	if (a->lfd >= 0) {
		pd_loop_del(a->b->loop, a->lfd);
		pd_attach_unlisten(a->lfd, a->path);
	}
	free(a);
}
