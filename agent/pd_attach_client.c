/* SPDX-License-Identifier: MIT */
/*
 * Agent side of the attach channel. See pd_attach_client.h. Nothing here
 * prints: the agent library is silent.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <pdkv/version.h>

#include "pd_attach_client.h"
#include "pd_sync.h"
#include "pd_err.h"
#include "pd_time.h"

#define CONNECT_NAP_MAX_MS 50u
#define ERRNO_MAX          4095 /* larger magnitudes are not errno values */

/* The ack as it arrives: bytes, and every fd that came with them. */
struct ack_rx {
	struct pd_attach_ack ack;
	uint32_t got;
	uint32_t nfds;
	int      fds[PD_ATTACH_NFDS];
	bool     bad_cmsg; /* truncated, extra fds or not SCM_RIGHTS */
};

void pd_attach_hello_init(struct pd_attach_hello *h, uint32_t roles, uint32_t tp_rank,
			  uint32_t tp_size)
{
	*h = (struct pd_attach_hello){
		.magic = PD_ATTACH_MAGIC, .version = PD_ATTACH_VERSION,
		.abi_major = PD_SHM_ABI_MAJOR, .abi_minor = PD_SHM_ABI_MINOR,
		.pid = pd_self_pid(), .roles = roles, .tp_rank = tp_rank,
		.tp_size = tp_size, .pidns = pd_self_pidns(),
	};
}

/* ---- waiting --------------------------------------------------------------- */

static int ms_left(uint64_t deadline)
{
	uint64_t now = pd_now_ns(), ms;

	if (now >= deadline)
		return 0;
	ms = (deadline - now + PD_NS_PER_MS - 1) / PD_NS_PER_MS;
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Until fd has one of events (or an error: the next call reports it). */
static int wait_fd(int fd, short events, uint64_t deadline)
{
	struct pollfd p = { .fd = fd, .events = events };
	int ms, rc;

	for (;;) {
		ms = ms_left(deadline);
		if (ms == 0)
			return -ETIMEDOUT;
		rc = pd_sys_rc(poll(&p, 1, ms));
		if (rc > 0)
			return 0;
		if (rc < 0 && rc != -EINTR)
			return rc;
	}
}

/* ---- connect --------------------------------------------------------------- */

static int connect_once(const struct sockaddr_un *sa)
{
	int fd, rc;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	rc = pd_sys_rc(connect(fd, (const struct sockaddr *)sa, sizeof(*sa)));
	if (rc == 0)
		return fd;
	(void)close(fd);
	return rc;
}

/* No socket yet, a stale one, or a full backlog: the broker may be starting
 * or busy, so try again until the deadline. */
static bool connect_retryable(int rc)
{
	return rc == -ENOENT || rc == -ECONNREFUSED || rc == -EAGAIN || rc == -EINTR;
}

/* Connected fd, or the last error once the deadline passed. */
static int connect_until(const struct sockaddr_un *sa, uint64_t deadline)
{
	uint32_t nap_ms = 1;
	int rc, left;

	for (;;) {
		rc = connect_once(sa);
		if (rc >= 0 || !connect_retryable(rc))
			return rc;
		left = ms_left(deadline);
		if (left == 0)
			return rc == -ENOENT || rc == -ECONNREFUSED ? rc : -ETIMEDOUT;
		(void)poll(NULL, 0, left < (int)nap_ms ? left : (int)nap_ms);
		nap_ms = nap_ms * 2 > CONNECT_NAP_MAX_MS ? CONNECT_NAP_MAX_MS : nap_ms * 2;
	}
}

/* ---- hello and ack --------------------------------------------------------- */

static int send_all(int fd, const void *buf, size_t len, uint64_t deadline)
{
	const uint8_t *p = buf;
	ssize_t n;
	int rc;

	while (len > 0) {
		n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		rc = n < 0 ? -errno : -EAGAIN;
		if (rc == -EAGAIN)
			rc = wait_fd(fd, POLLOUT, deadline);
		if (rc < 0 && rc != -EINTR)
			return rc;
	}
	return 0;
}

static void take_fds(struct ack_rx *rx, struct msghdr *m)
{
	const unsigned char *data;
	size_t n;
	int fd;

	if (m->msg_flags & MSG_CTRUNC)
		rx->bad_cmsg = true; /* the kernel closed what did not fit */
	for (struct cmsghdr *c = CMSG_FIRSTHDR(m); c; c = CMSG_NXTHDR(m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
			rx->bad_cmsg = true;
			continue;
		}
		data = CMSG_DATA(c);
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			memcpy(&fd, data + i * sizeof(int), sizeof(int));
			if (rx->nfds < PD_ATTACH_NFDS) {
				rx->fds[rx->nfds++] = fd;
			} else {
				(void)close(fd);
				rx->bad_cmsg = true;
			}
		}
	}
}

/* One recvmsg of what is missing of the ack; fds are taken first, so the
 * error paths can close them. */
static int recv_some(int fd, struct ack_rx *rx)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * (PD_ATTACH_NFDS + 1))];
	} cm;
	struct iovec iov = { (uint8_t *)&rx->ack + rx->got, sizeof(rx->ack) - rx->got };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
			    .msg_controllen = sizeof(cm.buf) };
	ssize_t n;

	n = recvmsg(fd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n < 0)
		return -errno;
	take_fds(rx, &m);
	if (n == 0)
		return -ECONNRESET;
	rx->got += (uint32_t)n;
	return 0;
}

static int recv_ack(int fd, struct ack_rx *rx, uint64_t deadline)
{
	int rc;

	while (rx->got < sizeof(rx->ack)) {
		rc = recv_some(fd, rx);
		if (rc == -EAGAIN)
			rc = wait_fd(fd, POLLIN, deadline);
		if (rc < 0 && rc != -EINTR)
			return rc;
	}
	return 0;
}

static int check_segment_fd(int fd, uint64_t size, char *err, size_t errlen)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || size == 0 || (uint64_t)st.st_size != size) {
		pd_err_set(err, errlen, "segment fd: %lld bytes, ack says %llu",
			   (long long)st.st_size, (unsigned long long)size);
		return -EPROTO;
	}
	return 0;
}

/* 0 a well-formed ack (an acceptance or a refusal); -EPROTO malformed. */
static int check_ack(const struct ack_rx *rx, char *err, size_t errlen)
{
	const struct pd_attach_ack *a = &rx->ack;

	if (rx->bad_cmsg || a->magic != PD_ATTACH_MAGIC || a->version != PD_ATTACH_VERSION ||
	    a->status > 0 || a->status < -ERRNO_MAX) {
		pd_err_set(err, errlen, "malformed ack (magic %#x, version %u, status %d%s)",
			   a->magic, a->version, a->status,
			   rx->bad_cmsg ? ", bad control data" : "");
		return -EPROTO;
	}
	if (a->status < 0 && rx->nfds == 0) {
		pd_err_set(err, errlen, "broker refused: %s", pd_strerror(a->status));
		return 0;
	}
	if (rx->nfds != pd_attach_ack_nfds(a) || a->agent_id == 0) {
		pd_err_set(err, errlen, "malformed ack (status %d with %u fds, agent id %u)",
			   a->status, rx->nfds, a->agent_id);
		return -EPROTO;
	}
	return check_segment_fd(rx->fds[0], a->segment_size, err, errlen);
}

static void close_fds(struct ack_rx *rx)
{
	while (rx->nfds > 0)
		(void)close(rx->fds[--rx->nfds]);
}

static int check_args(const char *path, const struct pd_attach_hello *hello,
		      const struct pd_attach_ack *ack, const int *fds, const int *sock_out,
		      struct sockaddr_un *sa)
{
	if (!path || !path[0] || !hello || !ack || !fds || !sock_out)
		return -EINVAL;
	if (strlen(path) >= sizeof(sa->sun_path))
		return -ENAMETOOLONG;
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path, path, strlen(path) + 1);
	return 0;
}

int pd_attach_connect(const char *path, const struct pd_attach_hello *hello,
		      uint32_t timeout_ms, struct pd_attach_ack *ack, int fds[PD_ATTACH_NFDS],
		      int *sock_out, char *err, size_t errlen)
{
	struct ack_rx rx = { .nfds = 0 };
	struct sockaddr_un sa;
	uint64_t deadline;
	int fd, rc;

	rc = check_args(path, hello, ack, fds, sock_out, &sa);
	if (rc < 0) {
		pd_err_set(err, errlen, "%s", rc == -EINVAL ? "bad arguments" : "path too long");
		return rc;
	}
	deadline = pd_deadline_ms(timeout_ms);
	fd = connect_until(&sa, deadline);
	if (fd < 0) {
		pd_err_set(err, errlen, "connect %s: %s", path, pd_strerror(fd));
		return fd;
	}
	rc = send_all(fd, hello, sizeof(*hello), deadline);
	if (rc < 0) {
		pd_err_set(err, errlen, "send hello: %s", pd_strerror(rc));
		goto out_close_sock;
	}
	rc = recv_ack(fd, &rx, deadline);
	if (rc < 0) {
		pd_err_set(err, errlen, "receive ack: %s", pd_strerror(rc));
		goto out_close_fds;
	}
	rc = check_ack(&rx, err, errlen);
	if (rc < 0)
		goto out_close_fds;
	*ack = rx.ack;
	rc = rx.ack.status;
	if (rc < 0)
		goto out_close_sock; /* refused: no fds came */
	for (uint32_t i = 0; i < PD_ATTACH_NFDS; i++)
		fds[i] = i < rx.nfds ? rx.fds[i] : -1;
	*sock_out = fd;
	return 0;

out_close_fds:
	close_fds(&rx);
out_close_sock:
	(void)close(fd);
	return rc;
}
