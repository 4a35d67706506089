/* SPDX-License-Identifier: MIT */
/*
 * pdctl: the admin socket client (shm/pd_admin_proto.h). One exchange per
 * connection: a 4-byte big-endian length and a msgpack map each way. The
 * socket is non-blocking and every step polls against one deadline, so a
 * stuck broker costs at most --timeout.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "pd_admin_proto.h"
#include "pd_err.h"
#include "pd_time.h"
#include "pdctl.h"

/* Wait for events on fd until deadline. 0, -ETIMEDOUT, -errno. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = events };
		uint64_t now = pd_now_ns();
		int ms, rc;

		if (now >= deadline)
			return -ETIMEDOUT;
		ms = (int)((deadline - now + PD_NS_PER_MS - 1) / PD_NS_PER_MS);
		rc = poll(&p, 1, ms);
		if (rc > 0)
			return 0;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

static int connect_done(int fd, uint64_t deadline)
{
	socklen_t len = sizeof(int);
	int rc = wait_fd(fd, POLLOUT, deadline), soerr = 0;

	if (rc < 0)
		return rc;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
		return -errno;
	return -soerr;
}

/* Connect; a full backlog (EAGAIN on a Unix socket) is retried until the deadline. */
static int dial(const char *path, uint64_t deadline)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	const struct timespec nap = { 0, 5 * 1000 * 1000 };
	int fd, rc;

	if (strlen(path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	memcpy(a.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	for (;;) {
		rc = pd_sys_rc(connect(fd, (const struct sockaddr *)&a, sizeof(a)));
		if (rc == -EINPROGRESS)
			rc = connect_done(fd, deadline);
		if (rc != -EAGAIN && rc != -EINTR)
			break;
		if (pd_now_ns() >= deadline) {
			rc = -ETIMEDOUT;
			break;
		}
		(void)nanosleep(&nap, NULL);
	}
	if (rc < 0) {
		(void)close(fd);
		return rc;
	}
	return fd;
}

static int send_all(int fd, const char *p, size_t len, uint64_t deadline)
{
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		if (n < 0 && errno == EAGAIN) {
			int rc = wait_fd(fd, POLLOUT, deadline);

			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

/* Exactly len bytes; -ECONNRESET when the broker closes first. */
static int recv_all(int fd, char *p, size_t len, uint64_t deadline)
{
	while (len > 0) {
		ssize_t n = recv(fd, p, len, 0);

		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		if (errno == EAGAIN) {
			int rc = wait_fd(fd, POLLIN, deadline);

			if (rc < 0)
				return rc;
		}
	}
	return 0;
}

static void pack_str(msgpack_packer *pk, const char *s)
{
	size_t len = strlen(s);

	(void)msgpack_pack_str(pk, len);
	(void)msgpack_pack_str_body(pk, s, len);
}

/* The request frame: length prefix, then {"cmd": cmd[, key: val]}. */
static int build_request(msgpack_sbuffer *sb, const char *cmd, const char *key, const char *val)
{
	static const char zero[4];
	msgpack_packer pk;
	uint32_t be;

	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	if (msgpack_sbuffer_write(sb, zero, sizeof(zero)) < 0)
		return -ENOMEM;
	(void)msgpack_pack_map(&pk, key ? 2 : 1);
	pack_str(&pk, "cmd");
	pack_str(&pk, cmd);
	if (key) {
		pack_str(&pk, key);
		pack_str(&pk, val);
	}
	if (!sb->data || sb->size < 5)
		return -ENOMEM;
	if (sb->size - 4 > PD_ADMIN_REQ_MAX)
		return -E2BIG;
	be = htonl((uint32_t)(sb->size - 4));
	memcpy(sb->data, &be, sizeof(be));
	return 0;
}

static int read_answer(int fd, uint64_t deadline, struct pdctl_answer *ans)
{
	size_t len, off = 0;
	uint32_t be;
	int rc = recv_all(fd, (char *)&be, sizeof(be), deadline);

	if (rc < 0)
		return rc;
	len = ntohl(be);
	if (len == 0 || len > PD_ADMIN_ANS_MAX)
		return -EPROTO;
	ans->buf = malloc(len);
	if (!ans->buf)
		return -ENOMEM;
	rc = recv_all(fd, ans->buf, len, deadline);
	if (rc < 0)
		return rc;
	if (msgpack_unpack_next(&ans->msg, ans->buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
	    off != len || ans->msg.data.type != MSGPACK_OBJECT_MAP)
		return -EPROTO;
	ans->root = &ans->msg.data;
	return 0;
}

int pdctl_admin_call(const struct pdctl_opts *o, const char *cmd, const char *key,
		     const char *val, struct pdctl_answer *ans)
{
	uint64_t deadline = pd_deadline_ms(o->timeout_ms);
	msgpack_sbuffer sb;
	int fd, rc;

	memset(ans, 0, sizeof(*ans));
	msgpack_unpacked_init(&ans->msg);
	rc = build_request(&sb, cmd, key, val);
	if (rc < 0)
		goto out_free_req;
	fd = dial(o->admin_path, deadline);
	if (fd < 0) {
		rc = fd;
		goto out_free_req;
	}
	rc = send_all(fd, sb.data, sb.size, deadline);
	if (rc == 0)
		rc = read_answer(fd, deadline, ans);
	(void)close(fd);
out_free_req:
	msgpack_sbuffer_destroy(&sb);
	if (rc < 0)
		pdctl_answer_free(ans);
	return rc;
}

void pdctl_answer_free(struct pdctl_answer *ans)
{
	if (!ans)
		return;
	msgpack_unpacked_destroy(&ans->msg);
	msgpack_unpacked_init(&ans->msg);
	free(ans->buf);
	ans->buf = NULL;
	ans->root = NULL;
}

const msgpack_object *pdctl_mp_get(const msgpack_object *m, const char *key)
{
	size_t klen = strlen(key);

	if (!m || m->type != MSGPACK_OBJECT_MAP)
		return NULL;
	for (uint32_t i = 0; i < m->via.map.size; i++) {
		const msgpack_object *k = &m->via.map.ptr[i].key;

		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == klen &&
		    memcmp(k->via.str.ptr, key, klen) == 0)
			return &m->via.map.ptr[i].val;
	}
	return NULL;
}
