/* SPDX-License-Identifier: MIT */
/*
 * Broker side of the attach channel: the listening socket, the hello state
 * machine, peer credentials and the ack with its fds. See pd_attach.h.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <pdkv/version.h>

#include "pd_attach.h"
#include "pd_err.h"
#include "pd_log.h"
#include "pd_time.h"

#define SOCK_FLAGS (SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC)

/* ---- listening socket ------------------------------------------------------ */

static int fill_addr(const char *path, struct sockaddr_un *sa)
{
	size_t n = strlen(path);

	if (n >= sizeof(sa->sun_path))
		return -ENAMETOOLONG;
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path, path, n + 1);
	return 0;
}

/* Does anything accept on sa? 1 yes, 0 no (a dead broker's file), -errno. */
static int probe_live(const struct sockaddr_un *sa)
{
	int fd, rc;

	fd = socket(AF_UNIX, SOCK_FLAGS, 0);
	if (fd < 0)
		return -errno;
	rc = pd_sys_rc(connect(fd, (const struct sockaddr *)sa, sizeof(*sa)));
	(void)close(fd);
	if (rc == 0 || rc == -EAGAIN) /* EAGAIN: alive, its backlog is full */
		return 1;
	if (rc == -ECONNREFUSED || rc == -ENOENT)
		return 0;
	return rc;
}

/* path is taken: remove it if it is a socket nobody accepts on, else refuse.
 * (connect() to a regular file is refused too: hence the S_ISSOCK check.) */
static int clear_stale(const char *path, const struct sockaddr_un *sa, char *err,
		       size_t errlen)
{
	struct stat st;
	int rc;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode)) {
		pd_err_set(err, errlen, "%s exists and is not a socket", path);
		return -EEXIST;
	}
	rc = probe_live(sa);
	if (rc > 0) {
		pd_err_set(err, errlen, "another broker listens on %s", path);
		return -EADDRINUSE;
	}
	if (rc < 0) {
		pd_err_set(err, errlen, "cannot probe %s: %s", path, pd_strerror(rc));
		return rc;
	}
	PD_LOG(WARN, attach, "removing stale attach socket %s", path);
	return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
}

static int bind_path(int fd, const char *path, const struct sockaddr_un *sa, char *err,
		     size_t errlen)
{
	int rc = -EADDRINUSE;

	for (int attempt = 0; attempt < 2 && rc == -EADDRINUSE; attempt++) {
		rc = pd_sys_rc(bind(fd, (const struct sockaddr *)sa, sizeof(*sa)));
		if (rc != -EADDRINUSE)
			break;
		rc = clear_stale(path, sa, err, errlen);
		if (rc < 0)
			return rc;
		rc = -EADDRINUSE;
	}
	if (rc == -EADDRINUSE)
		pd_err_set(err, errlen, "%s keeps reappearing", path);
	else if (rc < 0)
		pd_err_set(err, errlen, "bind %s: %s", path, pd_strerror(rc));
	return rc;
}

static int set_perms(const char *path, uint32_t mode, gid_t group, char *err, size_t errlen)
{
	int rc = pd_sys_rc(chmod(path, (mode_t)mode));

	if (rc == 0 && group != PD_ATTACH_NO_GROUP)
		rc = pd_sys_rc(chown(path, (uid_t)-1, group));
	if (rc < 0)
		pd_err_set(err, errlen, "cannot set mode %04o, group %ld on %s: %s", mode,
			   group == PD_ATTACH_NO_GROUP ? -1L : (long)group, path,
			   pd_strerror(rc));
	return rc;
}

/*
 * Permissions are set before listen(): until then every connect() is
 * refused, so nobody connects through the umask's mode. Two brokers
 * starting at once on one path can still race (one may take the other's
 * just-bound socket for stale); the segment's O_EXCL create is what keeps
 * a name to one broker.
 */
int pd_attach_listen(const char *path, uint32_t mode, gid_t group, int *fd_out,
		     char *err, size_t errlen)
{
	struct sockaddr_un sa;
	int fd, rc;

	if (!path || !path[0] || !fd_out || (mode & ~0777u)) {
		pd_err_set(err, errlen, "bad arguments (path, fd_out, mode %04o)", mode);
		return -EINVAL;
	}
	rc = fill_addr(path, &sa);
	if (rc < 0) {
		pd_err_set(err, errlen, "socket path too long (%zu bytes, at most %zu)",
			   strlen(path), sizeof(sa.sun_path) - 1);
		return rc;
	}
	fd = socket(AF_UNIX, SOCK_FLAGS, 0);
	if (fd < 0) {
		rc = -errno;
		pd_err_set(err, errlen, "socket: %s", pd_strerror(rc));
		return rc;
	}
	rc = bind_path(fd, path, &sa, err, errlen);
	if (rc < 0)
		goto out_close;
	rc = set_perms(path, mode ? mode : PD_ATTACH_MODE_DEFAULT, group, err, errlen);
	if (rc < 0)
		goto out_unlink;
	rc = pd_sys_rc(listen(fd, SOMAXCONN));
	if (rc < 0) {
		pd_err_set(err, errlen, "listen %s: %s", path, pd_strerror(rc));
		goto out_unlink;
	}
	*fd_out = fd;
	return 0;

out_unlink:
	(void)unlink(path);
out_close:
	(void)close(fd);
	return rc;
}

void pd_attach_unlisten(int fd, const char *path)
{
	if (path)
		(void)unlink(path);
	if (fd >= 0)
		(void)close(fd);
}

/* ---- hello ----------------------------------------------------------------- */

void pd_attach_conn_init(struct pd_attach_conn *c, int fd)
{
	*c = (struct pd_attach_conn){ .fd = fd, .start_ns = pd_now_ns() };
}

bool pd_attach_conn_expired(const struct pd_attach_conn *c, uint64_t now_ns,
			    uint64_t timeout_ns)
{
	return now_ns >= c->start_ns && now_ns - c->start_ns >= timeout_ns;
}

static int hello_check(const struct pd_attach_hello *h)
{
	if (h->magic != PD_ATTACH_MAGIC || h->version != PD_ATTACH_VERSION)
		return -EPROTO;
	if (h->abi_major != PD_SHM_ABI_MAJOR)
		return -EPROTO;
	if (h->roles == 0 || (h->roles & ~PD_ROLE_ALL))
		return -EPROTO;
	if (h->tp_size == 0 || h->tp_rank >= h->tp_size)
		return -EPROTO;
	return 0;
}

/* The agent sends nothing after its hello until it has the ack. */
static bool has_trailing_bytes(int fd)
{
	char b;

	return recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

int pd_attach_conn_read(struct pd_attach_conn *c, struct pd_attach_hello *out)
{
	struct pd_attach_hello h;
	ssize_t n;
	int rc;

	if (!c || !out || c->fd < 0 || c->got > sizeof(c->buf))
		return -EINVAL;
	while (c->got < sizeof(c->buf)) {
		n = recv(c->fd, c->buf + c->got, sizeof(c->buf) - c->got, MSG_DONTWAIT);
		if (n == 0)
			return -ECONNRESET;
		if (n > 0) {
			c->got += (uint32_t)n;
			continue;
		}
		rc = -errno;
		if (rc != -EINTR)
			return rc; /* -EAGAIN included */
	}
	memcpy(&h, c->buf, sizeof(h));
	rc = hello_check(&h);
	if (rc == 0 && has_trailing_bytes(c->fd))
		rc = -EPROTO;
	if (rc == 0)
		*out = h;
	return rc;
}

/* ---- credentials ----------------------------------------------------------- */

int pd_attach_peer_cred(int fd, struct ucred *out)
{
	struct ucred uc;
	socklen_t len = sizeof(uc);

	if (fd < 0 || !out)
		return -EINVAL;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0)
		return -errno;
	if (len != sizeof(uc))
		return -EPROTO;
	*out = uc;
	return 0;
}

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59 /* Linux 4.13 */
#endif

/* 1 when gid is among the supplementary groups the peer of fd had at
 * connect() (SO_PEERGROUPS: the kernel's record, whatever pid namespace it
 * runs in and whatever became of its pid), 0 when not, -errno. */
static int peer_in_group(int fd, gid_t gid)
{
	gid_t small[64], *g = small;
	socklen_t len = sizeof(small);
	int rc = 0;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len) < 0) {
		if (errno != ERANGE)
			return -errno;
		g = malloc(len);
		if (!g)
			return -ENOMEM;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, g, &len) < 0)
			rc = -errno;
	}
	for (size_t i = 0; rc == 0 && i < len / sizeof(gid_t); i++)
		rc = g[i] == gid;
	if (g != small)
		free(g);
	return rc;
}

bool pd_attach_cred_ok(int fd, const struct ucred *cred, uid_t broker_uid, gid_t group)
{
	if (!cred)
		return false;
	if (cred->uid == broker_uid || cred->uid == 0)
		return true;
	if (group == PD_ATTACH_NO_GROUP)
		return false;
	if (cred->gid == group)
		return true;
	return fd >= 0 && peer_in_group(fd, group) == 1;
}

/* ---- ack ------------------------------------------------------------------- */

void pd_attach_ack_init(struct pd_attach_ack *ack, int32_t status)
{
	*ack = (struct pd_attach_ack){ .magic = PD_ATTACH_MAGIC,
				       .version = PD_ATTACH_VERSION, .status = status };
}

static bool fds_valid(const int *fds, unsigned n)
{
	if (!fds)
		return false;
	for (unsigned i = 0; i < n; i++)
		if (fds[i] < 0)
			return false;
	return true;
}

static int ms_ceil(uint64_t ns)
{
	uint64_t ms = (ns + PD_NS_PER_MS - 1) / PD_NS_PER_MS;

	return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Wait until fd is writable (or in error: the next send says which). */
static int wait_writable(int fd, uint64_t deadline)
{
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	uint64_t now;
	int rc;

	for (;;) {
		now = pd_now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		rc = pd_sys_rc(poll(&p, 1, ms_ceil(deadline - now)));
		if (rc > 0)
			return 0;
		if (rc < 0 && rc != -EINTR)
			return rc;
	}
}

/* One sendmsg of the unsent tail; the fds ride with the first byte.
 * Bytes sent, or -errno. */
static ssize_t send_some(int fd, struct pd_attach_ack *a, size_t sent, const int *fds)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * PD_ATTACH_NFDS)];
	} cm;
	struct iovec iov = { (uint8_t *)a + sent, sizeof(*a) - sent };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	size_t fdlen = sizeof(int) * pd_attach_ack_nfds(a);
	ssize_t n;

	if (sent == 0 && fds) {
		memset(&cm, 0, sizeof(cm));
		m.msg_control = cm.buf;
		m.msg_controllen = CMSG_SPACE(fdlen);
		cm.h.cmsg_level = SOL_SOCKET;
		cm.h.cmsg_type = SCM_RIGHTS;
		cm.h.cmsg_len = CMSG_LEN(fdlen);
		memcpy(CMSG_DATA(&cm.h), fds, fdlen);
	}
	n = sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
	return n < 0 ? -errno : n;
}

int pd_attach_send_ack(int fd, const struct pd_attach_ack *ack,
		       const int fds[PD_ATTACH_NFDS])
{
	struct pd_attach_ack a;
	uint64_t deadline;
	size_t sent = 0;
	ssize_t n;
	int rc;

	if (fd < 0 || !ack || ack->status > 0 ||
	    (ack->status == 0 && !fds_valid(fds, pd_attach_ack_nfds(ack))))
		return -EINVAL;
	a = *ack;
	deadline = pd_deadline_ms(PD_ATTACH_SEND_TIMEOUT_MS);
	while (sent < sizeof(a)) {
		n = send_some(fd, &a, sent, a.status == 0 ? fds : NULL);
		if (n >= 0) {
			sent += (size_t)n;
			continue;
		}
		rc = (int)n;
		if (rc == -EAGAIN)
			rc = wait_writable(fd, deadline);
		if (rc < 0 && rc != -EINTR)
			return rc;
	}
	return 0;
}
