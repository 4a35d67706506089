/* SPDX-License-Identifier: MIT */
/*
 * TCP transport helpers: the frame header codec, address parsing,
 * eventfds and socket waits bounded by a deadline and a wake fd.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_tcp_int.h"
#include "pd_time.h"

/* ---- wire codec ------------------------------------------------------------- */

void pd_tcp_hdr_encode(const struct pd_tcp_hdr *h, uint8_t out[PD_TCP_HDR_SIZE])
{
	struct pd_tcp_hdr w = {
		.magic = htole32(h->magic),
		.version = htole16(h->version),
		.type = htole16(h->type),
		.slot = htole32(h->slot),
		.gen = htole32(h->gen),
		.len = htole32(h->len),
		.status = (int32_t)htole32((uint32_t)h->status),
		.cookie = htole64(h->cookie),
		.tag = htole64(h->tag),
	};

	memcpy(out, &w, PD_TCP_HDR_SIZE);
}

static int hdr_valid(const struct pd_tcp_hdr *h, uint32_t max_len)
{
	if (h->magic != PD_TCP_MAGIC || h->version != PD_TCP_WIRE_VERSION)
		return 0;
	if (h->status > 0 || h->status < -4095)
		return 0;
	switch (h->type) {
	case PD_TCP_T_DATA:
		return h->len <= max_len && h->status == 0;
	case PD_TCP_T_HELLO:
	case PD_TCP_T_ACK:
		return h->len == 0;
	default:
		return 0;
	}
}

int pd_tcp_hdr_decode(const uint8_t in[PD_TCP_HDR_SIZE], uint32_t max_len,
		      struct pd_tcp_hdr *h)
{
	struct pd_tcp_hdr w;

	memcpy(&w, in, PD_TCP_HDR_SIZE);
	h->magic = le32toh(w.magic);
	h->version = le16toh(w.version);
	h->type = le16toh(w.type);
	h->slot = le32toh(w.slot);
	h->gen = le32toh(w.gen);
	h->len = le32toh(w.len);
	h->status = (int32_t)le32toh((uint32_t)w.status);
	h->cookie = le64toh(w.cookie);
	h->tag = le64toh(w.tag);
	return hdr_valid(h, max_len) ? 0 : -EPROTO;
}

/* ---- eventfds, sockets ------------------------------------------- */

int pd_tcp_sock_tune(int fd)
{
	int one = 1;

	return pd_sys_rc(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)));
}

/* Rounded up to whole ms, so a wait never ends just before its deadline. */
int pd_tcp_wait_ms(uint64_t deadline_ns)
{
	uint64_t now, ms;

	if (deadline_ns == 0)
		return -1;
	now = pd_now_ns();
	if (now >= deadline_ns)
		return 0;
	ms = (deadline_ns - now + PD_NS_PER_MS - 1) / PD_NS_PER_MS;
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

int pd_tcp_io_wait(int fd, short events, uint64_t deadline_ns, const struct pd_tcp_wait *w)
{
	struct pollfd pfd[2] = {
		{ .fd = fd, .events = events },
		{ .fd = w ? w->wake_fd : -1, .events = POLLIN },
	};
	uint64_t idle_ns = w ? w->idle_ns : 0;
	int rc;

	if (idle_ns) {
		uint64_t d = pd_now_ns() + idle_ns;

		deadline_ns = deadline_ns && deadline_ns < d ? deadline_ns : d;
	}
	for (;;) {
		int ms = pd_tcp_wait_ms(deadline_ns);

		if (ms == 0)
			return -ETIMEDOUT;
		rc = pd_sys_rc(poll(pfd, 2, ms));
		if (rc == -EINTR)
			continue;
		if (rc < 0)
			return rc;
		if (pfd[1].revents) {
			rc = w->check(w->arg);
			if (rc < 0)
				return rc;
		}
		if (pfd[0].revents)
			return 0;
	}
}

int pd_tcp_io_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns,
		       const struct pd_tcp_wait *w)
{
	const uint8_t *p = buf;
	size_t off = 0;

	while (off < len) {
		ssize_t r = send(fd, p + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
		int rc = r < 0 ? -errno : 0;

		if (r > 0)
			off += (size_t)r;
		else if (rc == -EAGAIN)
			rc = pd_tcp_io_wait(fd, POLLOUT, deadline_ns, w);
		if (rc < 0 && rc != -EINTR)
			return rc;
	}
	return 0;
}

int pd_tcp_io_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns,
		       const struct pd_tcp_wait *w)
{
	uint8_t *p = buf;
	size_t off = 0;

	while (off < len) {
		ssize_t r = recv(fd, p + off, len - off, MSG_DONTWAIT);
		int rc = r < 0 ? -errno : 0;

		if (r == 0)
			return -ECONNRESET;
		if (r > 0)
			off += (size_t)r;
		else if (rc == -EAGAIN)
			rc = pd_tcp_io_wait(fd, POLLIN, deadline_ns, w);
		if (rc < 0 && rc != -EINTR)
			return rc;
	}
	return 0;
}

