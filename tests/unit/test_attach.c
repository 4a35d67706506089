/* SPDX-License-Identifier: MIT */
/*
 * The attach channel: broker/pd_attach.c (listen, hello state machine,
 * credentials, ack) and agent/pd_attach_client.c (connect, ack + fds).
 *
 * The hello state machine is driven over socketpairs; everything crossing
 * processes uses a real forked "broker" child listening under a mkdtemp()
 * directory. Children never assert: they _exit() with a code the parent
 * checks (each step has its own code). Every test checks that the open fds
 * of this process are the same after it as before.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Under test. agent/ objects go only into libpdagent.so, so the client is
 * included here (a unit test may include the file it tests). */
#include "../../agent/pd_attach_client.c"
#include "attach_fixture.h"

/* ---- negative: listen ------------------------------------------------------ */

static void test_listen_bad_args(void **state)
{
	struct fx *f = *state;
	char longp[200];

	memset(longp, 'a', sizeof(longp) - 1);
	longp[0] = '/';
	longp[sizeof(longp) - 1] = '\0';
	assert_int_equal(pd_attach_listen(longp, 0, PD_ATTACH_NO_GROUP, &f->lfd, f->err,
					  sizeof(f->err)), -ENAMETOOLONG);
	assert_non_null(strstr(f->err, "too long"));
	assert_int_equal(pd_attach_listen(NULL, 0, PD_ATTACH_NO_GROUP, &f->lfd, NULL, 0), -EINVAL);
	assert_int_equal(pd_attach_listen("", 0, PD_ATTACH_NO_GROUP, &f->lfd, NULL, 0), -EINVAL);
	assert_int_equal(pd_attach_listen(f->path, 04660, PD_ATTACH_NO_GROUP, &f->lfd, NULL, 0),
			 -EINVAL);
	assert_int_equal(pd_attach_listen(f->path, 0, PD_ATTACH_NO_GROUP, NULL, NULL, 0), -EINVAL);
	assert_int_equal(f->lfd, -1);
	assert_int_equal(access(f->path, F_OK), -1);
	assert_no_fd_leak(f);
}

static void test_listen_twice_in_use(void **state)
{
	struct fx *f = *state;
	int fd2 = -1, c;

	assert_int_equal(pd_attach_listen(f->path, 0, PD_ATTACH_NO_GROUP, &f->lfd, NULL, 0), 0);
	assert_int_equal(pd_attach_listen(f->path, 0, PD_ATTACH_NO_GROUP, &fd2, f->err,
					  sizeof(f->err)), -EADDRINUSE);
	assert_int_equal(fd2, -1);
	assert_non_null(strstr(f->err, "another broker listens on"));
	assert_non_null(strstr(f->err, f->path));
	/* The first listener is untouched: it still accepts. */
	c = dial(f->path);
	assert_true(c >= 0);
	fd2 = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(fd2 >= 0);
	(void)close(fd2);
	(void)close(c);
	pd_attach_unlisten(f->lfd, f->path);
	f->lfd = -1;
	assert_no_fd_leak(f);
}

static void test_listen_not_a_socket(void **state)
{
	struct fx *f = *state;
	int fd = open(f->path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	(void)close(fd);
	assert_int_equal(pd_attach_listen(f->path, 0, PD_ATTACH_NO_GROUP, &f->lfd, f->err,
					  sizeof(f->err)), -EEXIST);
	assert_non_null(strstr(f->err, "not a socket"));
	assert_int_equal(access(f->path, F_OK), 0); /* left alone */
	assert_no_fd_leak(f);
}

static void test_listen_stale_replaced(void **state)
{
	struct fx *f = *state;
	struct stat st;

	assert_int_equal(pd_attach_listen(f->path, 0, PD_ATTACH_NO_GROUP, &f->lfd, NULL, 0), 0);
	close_fd(&f->lfd); /* a broker that died: the file stays */
	assert_int_equal(stat(f->path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	/* An agent meanwhile hears "refused", even after retrying. */
	assert_int_equal(agent_connect(f, 50), -ECONNREFUSED);
	assert_int_equal(pd_attach_listen(f->path, 0, PD_ATTACH_NO_GROUP, &f->lfd, f->err,
					  sizeof(f->err)), 0);
	assert_int_equal(stat(f->path, &st), 0);
	assert_int_equal(st.st_mode & 0777, PD_ATTACH_MODE_DEFAULT);
	pd_attach_unlisten(f->lfd, f->path);
	f->lfd = -1;
	assert_int_equal(access(f->path, F_OK), -1);
	assert_no_fd_leak(f);
}

/* ---- negative: hello ------------------------------------------------------- */

#define BAD_MAGIC    0
#define BAD_VERSION  1
#define BAD_ABI      2
#define BAD_ROLES    3
#define BAD_NO_ROLE  4
#define BAD_TP       5
#define BAD_TRAILING 6
#define BAD_MAX      7

static void spoil_hello(struct pd_attach_hello *h, int how)
{
	switch (how) {
	case BAD_MAGIC:   h->magic ^= 1; break;
	case BAD_VERSION: h->version = PD_ATTACH_VERSION + 1; break;
	case BAD_ABI:     h->abi_major = PD_SHM_ABI_MAJOR + 1; break;
	case BAD_ROLES:   h->roles = PD_ROLE_ALL + 1; break;
	case BAD_NO_ROLE: h->roles = 0; break;
	case BAD_TP:      h->tp_rank = h->tp_size; break;
	default:          break;
	}
}

static void test_hello_invalid(void **state)
{
	struct fx *f = *state;
	struct pd_attach_hello h, out;
	struct pd_attach_conn c;

	for (int how = 0; how < BAD_MAX; how++) {
		make_socketpair(f);
		h = f->hello;
		spoil_hello(&h, how);
		assert_int_equal(write(f->sp[1], &h, sizeof(h)), sizeof(h));
		if (how == BAD_TRAILING)
			assert_int_equal(write(f->sp[1], "x", 1), 1);
		pd_attach_conn_init(&c, f->sp[0]);
		if (pd_attach_conn_read(&c, &out) != -EPROTO)
			fail_msg("spoiled hello %d accepted", how);
		close_all(f);
	}
	assert_int_equal(pd_attach_conn_read(NULL, &out), -EINVAL);
	assert_no_fd_leak(f);
}

/* Half a hello, then a stall: -EAGAIN until the deadline the caller
 * enforces; the rest still completes it. */
static void test_hello_stall_expires(void **state)
{
	struct fx *f = *state;
	struct pd_attach_hello out;
	struct pd_attach_conn c;

	make_socketpair(f);
	pd_attach_conn_init(&c, f->sp[0]);
	assert_int_equal(pd_attach_conn_read(&c, &out), -EAGAIN);
	assert_int_equal(write(f->sp[1], &f->hello, 32), 32);
	assert_int_equal(pd_attach_conn_read(&c, &out), -EAGAIN);
	assert_int_equal(pd_attach_conn_read(&c, &out), -EAGAIN);
	assert_int_equal(c.got, 32);
	assert_false(pd_attach_conn_expired(&c, c.start_ns + PD_NS_PER_MS, 2 * PD_NS_PER_MS));
	assert_true(pd_attach_conn_expired(&c, c.start_ns + 2 * PD_NS_PER_MS, 2 * PD_NS_PER_MS));
	assert_false(pd_attach_conn_expired(&c, pd_now_ns(), PD_NS_PER_S));
	assert_true(pd_attach_conn_expired(&c, pd_now_ns(), 0));
	assert_int_equal(write(f->sp[1], (const char *)&f->hello + 32, 32), 32);
	assert_int_equal(pd_attach_conn_read(&c, &out), 0);
	assert_memory_equal(&out, &f->hello, sizeof(out));
	close_all(f);
	assert_no_fd_leak(f);
}

static void test_hello_eof(void **state)
{
	struct fx *f = *state;
	struct pd_attach_hello out;
	struct pd_attach_conn c;

	make_socketpair(f);
	pd_attach_conn_init(&c, f->sp[0]);
	assert_int_equal(write(f->sp[1], &f->hello, 10), 10);
	close_fd(&f->sp[1]);
	assert_int_equal(pd_attach_conn_read(&c, &out), -ECONNRESET);
	close_all(f);
	assert_no_fd_leak(f);
}

/* ---- negative: ack (broker side) ------------------------------------------- */

static void test_send_ack_bad_args(void **state)
{
	struct fx *f = *state;
	struct pd_attach_ack ack;
	int bad_fds[PD_ATTACH_NFDS] = { 0, -1, 0 };

	make_socketpair(f);
	pd_attach_ack_init(&ack, 0);
	assert_int_equal(pd_attach_send_ack(f->sp[0], &ack, NULL), -EINVAL);
	assert_int_equal(pd_attach_send_ack(f->sp[0], &ack, bad_fds), -EINVAL);
	assert_int_equal(pd_attach_send_ack(f->sp[0], NULL, NULL), -EINVAL);
	assert_int_equal(pd_attach_send_ack(-1, &ack, NULL), -EINVAL);
	pd_attach_ack_init(&ack, EACCES); /* a positive status */
	assert_int_equal(pd_attach_send_ack(f->sp[0], &ack, NULL), -EINVAL);
	/* A peer that is gone: -EPIPE, and no SIGPIPE kills us. */
	close_fd(&f->sp[1]);
	pd_attach_ack_init(&ack, -EUSERS);
	assert_int_equal(pd_attach_send_ack(f->sp[0], &ack, NULL), -EPIPE);
	close_all(f);
	assert_no_fd_leak(f);
}

/* A peer that never reads: the ack gives up after the bound, not never. */
static void test_send_ack_stuck_peer(void **state)
{
	struct fx *f = *state;
	struct pd_attach_ack ack;
	char junk[4096] = { 0 };
	uint64_t t0;

	make_socketpair(f);
	while (send(f->sp[0], junk, sizeof(junk), MSG_DONTWAIT) > 0)
		;
	pd_attach_ack_init(&ack, -EACCES);
	t0 = pd_now_ns();
	assert_int_equal(pd_attach_send_ack(f->sp[0], &ack, NULL), -ETIMEDOUT);
	assert_in_range(ms_since(t0), PD_ATTACH_SEND_TIMEOUT_MS - 10,
			PD_ATTACH_SEND_TIMEOUT_MS + 1000);
	close_all(f);
	assert_no_fd_leak(f);
}

/* ---- negative: the agent's connect ----------------------------------------- */

static void test_connect_bad_args(void **state)
{
	struct fx *f = *state;
	char longp[200];

	memset(longp, 'a', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = '\0';
	assert_int_equal(pd_attach_connect(longp, &f->hello, 0, &f->ack, f->fds, &f->sock,
					   f->err, sizeof(f->err)), -ENAMETOOLONG);
	assert_int_equal(pd_attach_connect(NULL, &f->hello, 0, &f->ack, f->fds, &f->sock,
					   NULL, 0), -EINVAL);
	assert_int_equal(pd_attach_connect(f->path, NULL, 0, &f->ack, f->fds, &f->sock,
					   NULL, 0), -EINVAL);
	assert_int_equal(pd_attach_connect(f->path, &f->hello, 0, &f->ack, f->fds, NULL,
					   NULL, 0), -EINVAL);
	assert_int_equal(f->sock, -1);
	assert_no_fd_leak(f);
}

/* No broker: retried until the timeout, then -ENOENT, promptly. */
static void test_connect_missing(void **state)
{
	struct fx *f = *state;
	uint64_t t0 = pd_now_ns();

	assert_int_equal(agent_connect(f, 0), -ENOENT);
	assert_true(ms_since(t0) < 50);
	t0 = pd_now_ns();
	assert_int_equal(agent_connect(f, 150), -ENOENT);
	assert_in_range(ms_since(t0), 140, 1000);
	assert_non_null(strstr(f->err, f->path));
	assert_int_equal(f->sock, -1);
	assert_no_fd_leak(f);
}

/* A broker that accepts and reads the hello but never answers. */
static void test_connect_no_ack(void **state)
{
	struct fx *f = *state;
	uint64_t t0;

	f->cfg.mode = B_SILENT;
	start_broker(f);
	assert_int_equal(wait_bound(f), 0); /* so the 500 ms go to the ack alone */
	t0 = pd_now_ns();
	assert_int_equal(agent_connect(f, 500), -ETIMEDOUT);
	assert_in_range(ms_since(t0), 490, 2000);
	assert_int_equal(f->sock, -1);
	wait_broker(f, 0); /* and it saw our EOF */
	assert_no_fd_leak(f);
}

static void test_connect_refused(void **state)
{
	struct fx *f = *state;

	f->cfg.mode = B_API;
	pd_attach_ack_init(&f->cfg.ack, -EACCES);
	start_broker(f);
	assert_int_equal(agent_connect(f, WAIT_MS), -EACCES);
	assert_int_equal(f->ack.status, -EACCES);
	assert_non_null(strstr(f->err, "refused"));
	assert_int_equal(f->sock, -1);
	for (unsigned i = 0; i < PD_ATTACH_NFDS; i++)
		assert_int_equal(f->fds[i], -1);
	wait_broker(f, 0);
	assert_no_fd_leak(f);
}

/* Malformed acks: the broker child's script per case (prestate: index + 1). */
#define RAW(n, mg, ver, st, id, sz) { .mode = B_RAW, .nfds = (n), .ack = { .magic = (mg), \
	.version = (ver), .status = (st), .agent_id = (id), .segment_size = (sz) } }
#define M PD_ATTACH_MAGIC
static const struct bcfg bad_acks[] = {
	RAW(3, 0x12345678, 1, 0, AGENT_ID, 4096),  /* magic */
	RAW(3, M, 9, 0, AGENT_ID, 4096),           /* version */
	RAW(0, M, 1, 0, AGENT_ID, 4096),           /* accepted, without fds */
	RAW(2, M, 1, 0, AGENT_ID, 4096),           /* one fd short */
	RAW(4, M, 1, 0, AGENT_ID, 4096),           /* one fd too many */
	RAW(3, M, 1, 0, AGENT_ID, 8192),           /* segment_size != fd size */
	RAW(3, M, 1, 0, 0, 4096),                  /* agent id 0 */
	RAW(3, M, 1, -EACCES, 0, 0),               /* a refusal carrying fds */
	RAW(0, M, 1, 5, 0, 0),                     /* positive status */
	/* an arena file announced, its fd missing; one fd too many past it */
	{ .mode = B_RAW, .nfds = 3, .ack = { .magic = M, .version = 1, .agent_id = AGENT_ID,
					     .segment_size = 4096, .arena_size = 2u << 20 } },
	{ .mode = B_RAW, .nfds = 5, .ack = { .magic = M, .version = 1, .agent_id = AGENT_ID,
					     .segment_size = 4096, .arena_size = 2u << 20 } },
};
#undef M

static void test_connect_malformed_ack(void **state)
{
	struct fx *f = *state;

	assert_in_range(f->prestate, 1, PD_ARRAY_SIZE(bad_acks));
	f->cfg = bad_acks[f->prestate - 1];
	start_broker(f);
	assert_int_equal(agent_connect(f, WAIT_MS), -EPROTO);
	assert_non_null(strstr(f->err, "ack"));
	assert_int_equal(f->sock, -1);
	for (unsigned i = 0; i < PD_ATTACH_NFDS; i++)
		assert_int_equal(f->fds[i], -1);
	wait_broker(f, 0);
	assert_no_fd_leak(f); /* every received fd was closed */
}

/* ---- credentials ----------------------------------------------------------- */

static void test_peer_cred(void **state)
{
	struct fx *f = *state;
	struct ucred uc;

	assert_int_equal(pd_attach_peer_cred(-1, &uc), -EINVAL);
	assert_int_equal(pd_attach_peer_cred(0, NULL), -EINVAL);
	make_socketpair(f);
	assert_int_equal(pd_attach_peer_cred(f->sp[0], &uc), 0);
	assert_int_equal(uc.pid, getpid());
	assert_int_equal(uc.uid, geteuid());
	assert_int_equal(uc.gid, getegid());
	close_all(f);
	assert_no_fd_leak(f);
}

#define BROKER_UID 1234u
#define OTHER_UID  4321u
#define OTHER_GID  4322u
#define SHARE_GID  4242u

static void test_cred_ok_synthetic(void **state)
{
	struct ucred uc = { .pid = getpid(), .uid = BROKER_UID, .gid = OTHER_GID };

	(void)state;
	assert_false(pd_attach_cred_ok(-1, NULL, BROKER_UID, PD_ATTACH_NO_GROUP));
	assert_true(pd_attach_cred_ok(-1, &uc, BROKER_UID, PD_ATTACH_NO_GROUP));
	uc.uid = 0;
	assert_true(pd_attach_cred_ok(-1, &uc, BROKER_UID, PD_ATTACH_NO_GROUP));
	uc.uid = OTHER_UID;
	assert_false(pd_attach_cred_ok(-1, &uc, BROKER_UID, PD_ATTACH_NO_GROUP));
	assert_false(pd_attach_cred_ok(-1, &uc, BROKER_UID, 0x7ffffff0u));
	uc.gid = SHARE_GID; /* primary group */
	assert_true(pd_attach_cred_ok(-1, &uc, BROKER_UID, SHARE_GID));
	uc.gid = OTHER_GID; /* no socket: no supplementary groups */
	assert_false(pd_attach_cred_ok(-1, &uc, BROKER_UID, SHARE_GID));
}

/* In a child (setgroups must not touch the test process): a supplementary
 * group the peer had at connect counts, also when its pid is not visible
 * (0, as from another pid namespace); one it lacks does not; none count
 * without its socket. */
static int child_groups(void *arg)
{
	gid_t g[64], mine = SHARE_GID;
	struct ucred uc = { .pid = getpid(), .uid = OTHER_UID, .gid = OTHER_GID };
	int n = getgroups(64, g), sp[2], rc = 0;

	(void)arg;
	if (n == 0 && geteuid() == 0 && setgroups(1, &mine) == 0)
		n = getgroups(64, g);
	if (n <= 0)
		return 77; /* no supplementary group to test with */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		return 5;
	if (!pd_attach_cred_ok(sp[0], &uc, BROKER_UID, g[n - 1]))
		rc = 1;
	else if (pd_attach_cred_ok(sp[0], &uc, BROKER_UID, 0x7ffffff0u))
		rc = 2;
	uc.pid = 0;
	if (!rc && !pd_attach_cred_ok(sp[0], &uc, BROKER_UID, g[0]))
		rc = 3;
	if (!rc && pd_attach_cred_ok(-1, &uc, BROKER_UID, g[0]))
		rc = 4;
	(void)close(sp[0]);
	(void)close(sp[1]);
	return rc;
}

static void test_cred_ok_groups(void **state)
{
	pid_t pid = pd_test_fork(child_groups, NULL);
	int rc;

	(void)state;
	assert_true(pid > 0);
	rc = pd_test_wait(pid, WAIT_MS);
	if (rc == 77)
		skip();
	assert_int_equal(rc, 0);
}

/* ---- positive: real processes ---------------------------------------------- */

static void agent_check_segment(struct fx *f)
{
	struct pd_segment seg = { .fd = -1 };
	const uint8_t *p;
	size_t len = 0;

	assert_int_equal(pd_segment_attach_fd(f->fds[0], 0, WAIT_MS, &seg, f->err,
					      sizeof(f->err)), 0);
	assert_int_equal(seg.hdr->epoch, EPOCH);
	assert_int_equal(seg.len, f->ack.segment_size);
	p = pd_segment_region(&seg, PD_REGION_CONTROL, &len);
	assert_non_null(p);
	assert_true(len >= 4096);
	for (size_t i = 0; i < 4096; i++)
		if (p[i] != PATTERN)
			fail_msg("byte %zu: %#x", i, p[i]);
	pd_segment_destroy(&seg);
}

static void agent_ping_pong(struct fx *f)
{
	struct pollfd p = { .fd = f->fds[1], .events = POLLIN };
	uint64_t v = 5;

	assert_int_equal(write(f->fds[2], &v, sizeof(v)), sizeof(v));
	assert_int_equal(poll(&p, 1, WAIT_MS), 1);
	assert_int_equal(read(f->fds[1], &v, sizeof(v)), sizeof(v));
	assert_int_equal(v, 9);
}

static void test_attach_end_to_end(void **state)
{
	struct fx *f = *state;
	int fl;

	f->cfg.mode = B_FULL;
	start_broker(f); /* the agent may come first: connect retries */
	assert_int_equal(agent_connect(f, WAIT_MS), 0);
	assert_int_equal(f->ack.status, 0);
	assert_int_equal(f->ack.agent_id, AGENT_ID);
	assert_int_equal(f->ack.epoch, EPOCH);
	assert_int_equal(f->fds[3], -1); /* no arena file */
	for (unsigned i = 0; i < PD_ATTACH_NFDS_MIN; i++) {
		fl = fcntl(f->fds[i], F_GETFD);
		assert_true(fl >= 0 && (fl & FD_CLOEXEC));
	}
	agent_check_segment(f);
	agent_ping_pong(f);
	close_fd(&f->sock); /* detach: the broker sees EOF, exits 0 */
	wait_broker(f, 0);
	close_all(f);
	assert_no_fd_leak(f);
}

/* The broker dies: the agent's socket reports HUP at once. */
static void test_attach_broker_killed(void **state)
{
	struct fx *f = *state;
	struct pollfd p;
	uint64_t t0;

	f->cfg.mode = B_HOLD;
	start_broker(f);
	assert_int_equal(agent_connect(f, WAIT_MS), 0);
	p = (struct pollfd){ .fd = f->sock, .events = POLLIN };
	assert_int_equal(poll(&p, 1, 0), 0); /* alive: quiet */
	t0 = pd_now_ns();
	assert_int_equal(kill(f->child, SIGKILL), 0);
	assert_int_equal(poll(&p, 1, WAIT_MS), 1);
	assert_true(p.revents & POLLHUP);
	assert_true(ms_since(t0) < 1000);
	wait_broker(f, 128 + SIGKILL);
	close_all(f);
	assert_no_fd_leak(f);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
#define T_ACK(i, what) { "test_connect_malformed_ack_" what, test_connect_malformed_ack, \
			setup, teardown, (void *)(uintptr_t)((i) + 1) }

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_listen_bad_args),
		T(test_listen_twice_in_use),
		T(test_listen_not_a_socket),
		T(test_listen_stale_replaced),
		T(test_hello_invalid),
		T(test_hello_stall_expires),
		T(test_hello_eof),
		T(test_send_ack_bad_args),
		T(test_send_ack_stuck_peer),
		T(test_connect_bad_args),
		T(test_connect_missing),
		T(test_connect_no_ack),
		T(test_connect_refused),
		T_ACK(0, "magic"),
		T_ACK(1, "version"),
		T_ACK(2, "no_fds"),
		T_ACK(3, "two_fds"),
		T_ACK(4, "four_fds"),
		T_ACK(5, "segment_size"),
		T_ACK(6, "agent_id"),
		T_ACK(7, "refusal_fds"),
		T_ACK(8, "status"),
		T_ACK(9, "arena_fd_missing"),
		T_ACK(10, "arena_five_fds"),
		T(test_peer_cred),
		T(test_cred_ok_synthetic),
		T(test_cred_ok_groups),
		T(test_attach_end_to_end),
		T(test_attach_broker_killed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
