/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_ATTACH_FIXTURE_H
#define PD_TESTS_UNIT_ATTACH_FIXTURE_H

/*
 * The fixture of test_attach.c: a mkdtemp() directory per test for the
 * socket, a unique segment name, fd accounting, and the forked "broker"
 * child, which runs a script (struct bcfg) with the real broker-side API.
 * The child never asserts: it _exit()s with a code per step (10.. setup,
 * 20.. segment, 30.. conversation) that the parent checks with
 * pd_test_wait(). Teardown kills a child still running and removes the
 * directory and the segment, even when the test failed.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../agent/pd_attach_client.h"
#include "pd_attach.h"
#include "pd_err.h"
#include "pd_segment.h"
#include "pd_test.h"
#include "pd_time.h"

#define WAIT_MS    5000u /* bound on every child and every wait */
#define AGENT_ID   7u
#define EPOCH      42u
#define PATTERN    0x5au

/* What the broker child does once it has a valid hello from a permitted peer. */
#define B_SILENT 1 /* never answer */
#define B_API    2 /* pd_attach_send_ack(cfg.ack), with fds when status 0 */
#define B_RAW    3 /* raw sendmsg of cfg.ack with cfg.nfds fds */
#define B_FULL   4 /* segment + doorbells; ping-pong; wait for EOF */
#define B_HOLD   5 /* like B_FULL, then wait to be killed */

struct bcfg {
	int      mode;
	uint32_t nfds;               /* B_RAW */
	struct pd_attach_ack ack;    /* B_API, B_RAW */
	const char *path;
	const char *seg_name;
};

struct fx {
	char dir[64];
	char path[128];
	char seg_name[PD_SHM_NAME_MAX + 1];
	char err[256];
	struct bcfg cfg;
	pid_t child;
	int lfd;
	int sp[2];                   /* socketpair: [0] broker end, [1] agent end */
	int sock;                    /* agent's attached socket */
	int fds[PD_ATTACH_NFDS];
	struct pd_attach_ack ack;
	struct pd_attach_hello hello;
	int nfd_before;
	uintptr_t prestate;          /* cmocka prestate: a test case's index + 1 */
};

/* ---- fixture --------------------------------------------------------------- */

static inline int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -errno;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	(void)closedir(d);
	return n;
}

static inline int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	(void)snprintf(f->dir, sizeof(f->dir), "/tmp/pdkv-attach.XXXXXX");
	if (!mkdtemp(f->dir)) {
		free(f);
		return -1;
	}
	(void)snprintf(f->path, sizeof(f->path), "%s/b.sock", f->dir);
	pd_test_name(f->seg_name, sizeof(f->seg_name), "att");
	f->prestate = (uintptr_t)*state;
	f->lfd = f->sock = f->sp[0] = f->sp[1] = -1;
	for (unsigned i = 0; i < PD_ATTACH_NFDS; i++)
		f->fds[i] = -1;
	pd_attach_hello_init(&f->hello, PD_ROLE_ALL, 0, 1);
	f->nfd_before = count_fds();
	*state = f;
	return 0;
}

static inline void close_fd(int *fd)
{
	if (*fd >= 0)
		(void)close(*fd);
	*fd = -1;
}

static inline void close_all(struct fx *f)
{
	close_fd(&f->lfd);
	close_fd(&f->sock);
	close_fd(&f->sp[0]);
	close_fd(&f->sp[1]);
	for (unsigned i = 0; i < PD_ATTACH_NFDS; i++)
		close_fd(&f->fds[i]);
}

static inline void rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (d) {
		while ((e = readdir(d)))
			if (e->d_name[0] != '.')
				(void)unlinkat(dirfd(d), e->d_name, 0);
		(void)closedir(d);
	}
	(void)rmdir(dir);
}

static inline int teardown(void **state)
{
	struct fx *f = *state;

	if (!f)
		return 0;
	if (f->child > 0) {
		(void)kill(f->child, SIGKILL);
		(void)pd_test_wait(f->child, WAIT_MS);
	}
	close_all(f);
	rm_dir(f->dir);
	(void)pd_segment_unlink(f->seg_name);
	free(f);
	*state = NULL;
	return 0;
}

/* Everything this test opened is closed again. */
static inline void assert_no_fd_leak(struct fx *f)
{
	assert_int_equal(count_fds(), f->nfd_before);
}

static inline uint64_t ms_since(uint64_t t0)
{
	return (pd_now_ns() - t0) / PD_NS_PER_MS;
}

static inline int agent_connect(struct fx *f, uint32_t timeout_ms)
{
	f->err[0] = '\0';
	return pd_attach_connect(f->path, &f->hello, timeout_ms, &f->ack, f->fds, &f->sock,
				 f->err, sizeof(f->err));
}

/* A plain blocking connect to path: fd or -errno. */
static inline int dial(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, rc;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	rc = pd_sys_rc(connect(fd, (const struct sockaddr *)&sa, sizeof(sa)));
	if (rc == 0)
		return fd;
	(void)close(fd);
	return rc;
}

/* Until the child has bound the socket (it listens right after). */
static inline int wait_bound(const struct fx *f)
{
	uint64_t deadline = pd_deadline_ms(WAIT_MS);
	struct stat st;

	while (stat(f->path, &st) < 0 || !S_ISSOCK(st.st_mode)) {
		if (pd_now_ns() >= deadline)
			return -ETIMEDOUT;
		(void)poll(NULL, 0, 1);
	}
	return 0;
}

static inline void make_socketpair(struct fx *f)
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
				    f->sp), 0);
}

/* ---- the broker child (never asserts) -------------------------------------- */

static inline int child_accept(int lfd)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };

	if (poll(&p, 1, WAIT_MS) != 1)
		return -ETIMEDOUT;
	return pd_sys_rc(accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC));
}

/* The event loop's job, reduced to one connection. */
static inline int child_hello(int fd, struct pd_attach_hello *h)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct pd_attach_conn c;
	int rc;

	pd_attach_conn_init(&c, fd);
	for (;;) {
		rc = pd_attach_conn_read(&c, h);
		if (rc != -EAGAIN)
			return rc;
		if (pd_attach_conn_expired(&c, pd_now_ns(), WAIT_MS * PD_NS_PER_MS))
			return -ETIMEDOUT;
		(void)poll(&p, 1, 100);
	}
}

/* The peer is our parent, says so in its hello, and may attach. */
static inline int child_check_peer(int fd, const struct pd_attach_hello *h)
{
	struct ucred uc;

	if (pd_attach_peer_cred(fd, &uc) < 0)
		return -1;
	if (uc.pid != getppid() || uc.pid != h->pid)
		return -1;
	return pd_attach_cred_ok(fd, &uc, getuid(), PD_ATTACH_NO_GROUP) ? 0 : -EACCES;
}

/* 0 once the peer closed (read 0 or HUP), -ETIMEDOUT otherwise. */
static inline int child_wait_eof(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char b;

	if (poll(&p, 1, timeout_ms) != 1)
		return -ETIMEDOUT;
	return recv(fd, &b, 1, MSG_DONTWAIT) == 0 ? 0 : -EPROTO;
}

/* [0] a 4 KiB memfd, then eventfds; n fds, or -1. */
static inline int child_make_fds(int *fds, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		fds[i] = i == 0 ? memfd_create("seg", MFD_CLOEXEC) : eventfd(0, EFD_CLOEXEC);
		if (fds[i] < 0 || (i == 0 && ftruncate(fds[0], 4096) < 0))
			return -1;
	}
	return 0;
}

static inline int child_send_raw(int fd, const struct bcfg *c)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int) * 8)];
	} cm;
	struct pd_attach_ack a = c->ack;
	struct iovec iov = { &a, sizeof(a) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
	int fds[8];

	if (c->nfds > 8 || child_make_fds(fds, c->nfds) < 0)
		return -1;
	if (c->nfds) {
		memset(&cm, 0, sizeof(cm));
		m.msg_control = cm.buf;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * c->nfds);
		cm.h.cmsg_level = SOL_SOCKET;
		cm.h.cmsg_type = SCM_RIGHTS;
		cm.h.cmsg_len = CMSG_LEN(sizeof(int) * c->nfds);
		memcpy(CMSG_DATA(&cm.h), fds, sizeof(int) * c->nfds);
	}
	return sendmsg(fd, &m, MSG_NOSIGNAL) == (ssize_t)sizeof(a) ? 0 : -1;
}

static inline int child_send_api(int fd, const struct bcfg *c)
{
	int fds[PD_ATTACH_NFDS];

	if (c->ack.status == 0 && child_make_fds(fds, PD_ATTACH_NFDS_MIN) < 0)
		return -1;
	return pd_attach_send_ack(fd, &c->ack, c->ack.status == 0 ? fds : NULL);
}

/* Agent rings the broker doorbell (5); the broker answers on the agent's (9). */
static inline int child_ping_pong(const int *fds)
{
	struct pollfd p = { .fd = fds[2], .events = POLLIN };
	uint64_t v = 0;

	if (poll(&p, 1, WAIT_MS) != 1 || read(fds[2], &v, sizeof(v)) != sizeof(v) || v != 5)
		return -1;
	v = 9;
	return write(fds[1], &v, sizeof(v)) == sizeof(v) ? 0 : -1;
}

static inline int child_serve_full(int fd, const struct bcfg *c)
{
	struct pd_segment_opts o = { .name = c->seg_name, .epoch = EPOCH,
				     .region_len = { [PD_REGION_CONTROL] = 4096 } };
	struct pd_attach_ack ack;
	struct pd_segment seg;
	size_t len;
	int fds[PD_ATTACH_NFDS], rc = 30;

	if (pd_segment_create(&o, &seg, NULL, 0) < 0)
		return 20;
	memset(pd_segment_region(&seg, PD_REGION_CONTROL, &len), PATTERN, 4096);
	pd_segment_publish(&seg);
	fds[0] = seg.fd;
	fds[1] = eventfd(0, EFD_CLOEXEC);
	fds[2] = eventfd(0, EFD_CLOEXEC);
	pd_attach_ack_init(&ack, 0);
	ack.agent_id = AGENT_ID;
	ack.epoch = EPOCH;
	ack.segment_size = seg.len;
	if (fds[1] < 0 || fds[2] < 0 || pd_attach_send_ack(fd, &ack, fds) < 0)
		goto out_destroy;
	if (c->mode == B_HOLD) {
		(void)child_wait_eof(fd, 2 * WAIT_MS); /* until SIGKILL */
		rc = 31;
	} else if (child_ping_pong(fds) < 0) {
		rc = 32;
	} else {
		rc = child_wait_eof(fd, WAIT_MS) < 0 ? 33 : 0; /* the agent's detach */
	}
out_destroy:
	pd_segment_destroy(&seg);
	return rc;
}

static inline int broker_child(void *arg)
{
	const struct bcfg *c = arg;
	struct pd_attach_hello h;
	int lfd, fd;

	if (pd_attach_listen(c->path, 0, PD_ATTACH_NO_GROUP, &lfd, NULL, 0) < 0)
		return 10;
	fd = child_accept(lfd);
	if (fd < 0)
		return 11;
	if (child_hello(fd, &h) < 0)
		return 12;
	if (child_check_peer(fd, &h) < 0)
		return 13;
	switch (c->mode) {
	case B_SILENT:
		return child_wait_eof(fd, WAIT_MS) < 0 ? 14 : 0;
	case B_API:
		return child_send_api(fd, c) < 0 ? 15 : child_wait_eof(fd, WAIT_MS) < 0 ? 16 : 0;
	case B_RAW:
		return child_send_raw(fd, c) < 0 ? 17 : child_wait_eof(fd, WAIT_MS) < 0 ? 18 : 0;
	default:
		return child_serve_full(fd, c);
	}
}

static inline void start_broker(struct fx *f)
{
	f->cfg.path = f->path;
	f->cfg.seg_name = f->seg_name;
	f->child = pd_test_fork(broker_child, &f->cfg);
	assert_true(f->child > 0);
}

static inline void wait_broker(struct fx *f, int want)
{
	int rc = pd_test_wait(f->child, WAIT_MS);

	f->child = 0;
	assert_int_equal(rc, want);
}

#endif
