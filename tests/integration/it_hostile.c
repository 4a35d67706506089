/* SPDX-License-Identifier: MIT */
/* Hostile input against a running decode broker: it refuses, counts, and
 * keeps serving. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include "it_fixture.h"
#include "pd_admin_proto.h"
#include "it_raw.h"
#include "pd_sys.h"
#include "pd_tcp.h"

/* A transfer that must still work afterwards. */
static void still_serves(struct it *t, const char *req)
{
	assert_int_equal(it_put(t, req, 0, 3, 3), 0);
	it_expect_event(t, req, PD_EV_PUT_DONE);
	it_verify(t, req, 3);
	assert_int_equal(pd_recv_release(t->da, req), 0);
}

/* The control plane's refusal counters, in the order of want[] below. */
static const char *const ctrl_bad[] = { "ctrl.bad_frames", "ctrl.bad_size", "ctrl.bad_msgpack",
					"ctrl.bad_schema", "ctrl.bad_peer", "ctrl.bad_state" };
enum { BAD_FRAMES = 0, BAD_SIZE = 1, BAD_MSGPACK = 2, BAD_SCHEMA = 3, BAD_N = 6 };
_Static_assert(PD_ARRAY_SIZE(ctrl_bad) == BAD_N, "one want[] entry per counter");

/* Once counter `bumped` reached want[bumped], every counter is exactly
 * what want[] says: the input was counted once, under its own cause. */
static void expect_bad_counts(const struct pd_test_broker *b, const uint64_t *want, int bumped)
{
	uint64_t v = it_wait_stat(b, ctrl_bad[bumped], want[bumped]);

	if (v != want[bumped])
		fail_msg("%s is %llu, expected %llu", ctrl_bad[bumped], (unsigned long long)v,
			 (unsigned long long)want[bumped]);
	for (int i = 0; i < BAD_N; i++) {
		v = it_stat(b, ctrl_bad[i]);
		if (v != want[i])
			fail_msg("%s is %llu, expected %llu", ctrl_bad[i], (unsigned long long)v,
				 (unsigned long long)want[i]);
	}
}

/* The broker's answer to a refused message: ["", Error] whose text
 * gives the reason. */
static void expect_error_reply(void *s, const char *why)
{
	char buf[512];
	int n = zmq_recv(s, buf, sizeof(buf), 0);

	assert_int_equal(n, 0); /* the delimiter */
	n = zmq_recv(s, buf, sizeof(buf), 0);
	assert_true(n > 0 && (size_t)n <= sizeof(buf));
	if (memmem(buf, (size_t)n, why, strlen(why)))
		return;
	for (int i = 0; i < n; i++)
		buf[i] = buf[i] >= ' ' && buf[i] <= '~' ? buf[i] : '.';
	fail_msg("no \"%s\" in the Error reply (%d bytes: %.*s)", why, n, n, buf);
}

#define BYTES(lit) lit, sizeof(lit) - 1 /* a literal's bytes, NULs included */

/* Garbage, truncated msgpack, wrong types and a huge count from a raw
 * DEALER, then a message of one frame: each refused with an Error reply
 * that says why, and counted once under its cause; a valid request right
 * after is served. */
static void test_garbage_on_the_control_plane(void **state)
{
	static const struct {
		const char *bytes;
		size_t len;
		int frames;      /* 2: ["", bytes]; 1: [bytes], no delimiter */
		int counter;     /* index in ctrl_bad[] */
		const char *why; /* in the Error reply's text */
	} bad[] = {
		/* -1 (a fixint), then bytes after the message */
		{ BYTES("\xff\xfe\xfd garbage"), 2, BAD_MSGPACK, "trailing bytes" },
		/* a 12-byte string cut after 9 */
		{ BYTES("\x82\xa4type\xac" "AllocRequ"), 2, BAD_MSGPACK, "runs past the end" },
		/* type not a string */
		{ BYTES("\x81\xa4type\x2a"), 2, BAD_SCHEMA, "'type' is not a string" },
		/* 4097 keys claimed (array 32 header), none there */
		{ BYTES("\x82\xa4type\xac" "AllocRequest\xa4keys\xdd\x00\x00\x10\x01"), 2,
		  BAD_MSGPACK, "more than PD_WIRE_MAX_KEYS" },
		/* req_id of the wrong type */
		{ BYTES("\x83\xa4type\xac" "AllocRequest\xa4keys\x91\xa1k\xa6" "req_id\x05"), 2,
		  BAD_SCHEMA, "'req_id' has the wrong type" },
		{ BYTES("only one frame"), 1, BAD_FRAMES, "got 1 frames" },
	};
	struct it *t = it_start(8, 16);
	void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
	int linger = 0, tmo = 3000;
	uint64_t want[BAD_N] = { 0 };

	(void)state;
	assert_int_equal(zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger)), 0);
	assert_int_equal(zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof(tmo)), 0);
	assert_int_equal(zmq_connect(s, t->d.ctrl), 0);
	expect_bad_counts(&t->d, want, BAD_FRAMES);
	for (size_t i = 0; i < PD_ARRAY_SIZE(bad); i++) {
		if (bad[i].frames == 2)
			assert_int_equal(zmq_send(s, "", 0, ZMQ_SNDMORE), 0);
		assert_int_equal(zmq_send(s, bad[i].bytes, bad[i].len, 0), (int)bad[i].len);
		expect_error_reply(s, bad[i].why);
		want[bad[i].counter]++;
		expect_bad_counts(&t->d, want, bad[i].counter);
	}
	(void)zmq_close(s);
	(void)zmq_ctx_term(ctx);
	still_serves(t, "after-garbage");
	it_stop(t, 0);
}

/* The data port the decode broker advertised (from its log). */
/* A raw TCP client writing into slots it was not granted: refused, and
 * not one byte of the receive arena changes. */
static void test_raw_writes_to_ungranted_slots(void **state)
{
	struct it *t = it_start(8, 16);
	int port = it_data_port(&t->d), fd;
	size_t n1, n2;
	void *before, *after;

	(void)state;
	assert_true(port > 0);
	before = it_arena_copy(&t->d, &n1);
	fd = it_raw_connect(port);                          /* DATA without HELLO */
	it_raw_frame(fd, PD_TCP_T_DATA, 0, 0, 0, 4096);
	it_expect_closed(fd);
	fd = it_raw_connect(port);                          /* a token nobody issued */
	it_raw_frame(fd, PD_TCP_T_HELLO, 0, 0, 0x5eed, 0);
	it_raw_frame(fd, PD_TCP_T_DATA, 1, 0, 0x5eed, 4096);
	it_expect_closed(fd);
	fd = it_raw_connect(port);                          /* not even a frame */
	(void)!send(fd, "GET / HTTP/1.0\r\nHost: pdkv\r\nUser-Agent: nobody-at-all\r\n\r\n", 58,
		    MSG_NOSIGNAL);
	it_expect_closed(fd);
	after = it_arena_copy(&t->d, &n2);
	assert_int_equal(n1, n2);
	assert_memory_equal(before, after, n1);
	free(before);
	free(after);
	still_serves(t, "after-raw-writes");
	it_stop(t, 0);
}

/* ---- the admin socket ----------------------------------------------------------------- */

static int admin_connect(const struct pd_test_broker *b)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	char path[256];

	assert_true(fd >= 0);
	(void)snprintf(path, sizeof(path), "%s/%s.admin", b->rundir, b->name);
	assert_true(strlen(path) < sizeof(a.sun_path));
	memcpy(a.sun_path, path, strlen(path) + 1);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* One frame out: a big-endian length, then len bytes of body. */
static void admin_send(int fd, uint32_t len, const void *body, size_t blen)
{
	uint8_t h[4] = { (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
			 (uint8_t)len };

	assert_int_equal(write(fd, h, 4), 4);
	if (blen)
		assert_int_equal(write(fd, body, blen), (ssize_t)blen);
}

/* The whole answer (until the broker closes), or 0 bytes when it closed. */
static size_t admin_answer(int fd, uint8_t *buf, size_t cap)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint64_t deadline = pd_deadline_ms(3000);
	size_t got = 0;
	ssize_t r = 1;

	while (r > 0 && got < cap && pd_now_ns() < deadline)
		if (poll(&p, 1, 100) > 0 && (r = read(fd, buf + got, cap - got)) > 0)
			got += (size_t)r;
	assert_true(pd_now_ns() < deadline);
	(void)close(fd);
	return got;
}

/* A frame too long, garbage, a non-map, an unknown command and a frame cut
 * short: each refused (closed or answered {"ok": false}) and counted; the
 * broker still answers a good request after them. */
static void test_garbage_on_the_admin_socket(void **state)
{
	static const uint8_t bad_mp[] = { 0xc1 }, not_map[] = { 0x93, 1, 2, 3 },
			     unknown[] = { 0x81, 0xa3, 'c', 'm', 'd', 0xa3, 'f', 'o', 'o' },
			     agents[] = { 0x81, 0xa3, 'c', 'm', 'd', 0xa6, 'a', 'g', 'e', 'n', 't',
					  's' };
	const uint8_t *refused[] = { not_map, unknown };
	const size_t rlen[] = { sizeof(not_map), sizeof(unknown) };
	struct it *t = it_start(8, 8);
	uint8_t ans[256];
	size_t n;
	int fd;

	(void)state;
	it_wait_admin(&t->d);
	fd = admin_connect(&t->d);
	admin_send(fd, UINT32_MAX, NULL, 0);                 /* too long: closed */
	assert_int_equal(admin_answer(fd, ans, sizeof(ans)), 0);
	fd = admin_connect(&t->d);
	admin_send(fd, sizeof(bad_mp), bad_mp, sizeof(bad_mp)); /* not msgpack: closed */
	assert_int_equal(admin_answer(fd, ans, sizeof(ans)), 0);
	fd = admin_connect(&t->d);
	admin_send(fd, 100, not_map, sizeof(not_map));       /* cut short, then gone */
	(void)close(fd);
	for (int i = 0; i < 2; i++) { /* answered, not ok */
		fd = admin_connect(&t->d);
		admin_send(fd, (uint32_t)rlen[i], refused[i], rlen[i]);
		n = admin_answer(fd, ans, sizeof(ans));
		assert_true(n > 4 && memmem(ans, n, "\xa2ok\xc2", 4) != NULL);
	}
	assert_true(it_wait_stat(&t->d, "admin.bad", 4) >= 4);
	fd = admin_connect(&t->d);
	admin_send(fd, sizeof(agents), agents, sizeof(agents));
	n = admin_answer(fd, ans, sizeof(ans));
	assert_true(n > 4 && memmem(ans, n, "\xa2ok\xc3", 4) != NULL);
	still_serves(t, "after-admin-garbage");
	it_stop(t, 0);
}

/* Clients that send half a frame header and stop are cut at their
 * deadline, PD_ADMIN_TIMEOUT_MS after the accept, on the 100 ms tick even
 * though the broker was idle (on its slow tick of a second) when they came;
 * counted. Three of them, a third of a second apart: on the slow tick one
 * of them would be cut at least 600 ms late. */
static void test_slow_admin_clients_cut_at_deadline(void **state)
{
	struct it *t = it_start(8, 8);
	uint64_t t0[3], late, bad;
	uint8_t ans[16];
	int fd[3];

	(void)state;
	it_wait_admin(&t->d);
	(void)usleep(1000 * 1000); /* idle: the slow tick */
	bad = it_stat(&t->d, "admin.bad");
	for (int i = 0; i < 3; i++) {
		if (i)
			(void)usleep(333 * 1000);
		fd[i] = admin_connect(&t->d);
		t0[i] = pd_now_ns();
		assert_int_equal(write(fd[i], "\0\0", 2), 2);
	}
	for (int i = 0; i < 3; i++) {
		assert_int_equal(admin_answer(fd[i], ans, sizeof(ans)), 0);
		late = (pd_now_ns() - t0[i]) / PD_NS_PER_MS;
		(void)fprintf(stderr, "slow admin client %d cut after %llu ms\n", i,
			      (unsigned long long)late);
		if (late + 50 < PD_ADMIN_TIMEOUT_MS || late > PD_ADMIN_TIMEOUT_MS + 400)
			fail_msg("cut after %llu ms, its deadline is %u ms",
				 (unsigned long long)late, PD_ADMIN_TIMEOUT_MS);
	}
	assert_true(it_wait_stat(&t->d, "admin.bad", bad + 3) >= bad + 3);
	still_serves(t, "after-slow-admin");
	it_stop(t, 0);
}

/* ---- a flood of idle data connections ------------------------------------------------ */

#define FLOOD_CONNS 300

/* A stranger that keeps FLOOD_CONNS connections to a data port open and
 * never says HELLO: each one the broker closes is opened again. */
struct flood {
	int port, fd[FLOOD_CONNS];
	_Atomic int stop;
	pthread_t thr;
};

static void *flood_main(void *arg)
{
	struct flood *f = arg;
	char b[64];

	while (!atomic_load(&f->stop)) {
		for (int i = 0; i < FLOOD_CONNS; i++) {
			struct pollfd p = { .fd = f->fd[i], .events = POLLIN };

			if (f->fd[i] >= 0 && poll(&p, 1, 0) > 0 && read(f->fd[i], b, sizeof(b)) <= 0) {
				(void)close(f->fd[i]);
				f->fd[i] = -1;
			}
			if (f->fd[i] < 0)
				f->fd[i] = it_raw_try_connect(f->port);
		}
		(void)nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
	}
	return NULL;
}

/* With a stranger keeping 300 connections open on the decode broker's data
 * port (more than it runs at once), a prefill broker started meanwhile
 * still opens its lanes and moves every byte: connections that never say
 * HELLO are evicted, oldest first, and counted. */
static void test_idle_connection_flood(void **state)
{
	struct it *t = calloc(1, sizeof(*t));
	struct it_opts o = { .send_slots = 8, .recv_slots = 16 };
	struct flood *f = calloc(1, sizeof(*f));
	struct it_args pargs;

	(void)state;
	assert_non_null(t);
	assert_non_null(f);
	assert_int_equal(pd_test_broker_start(&t->d, "itD", it_args(&t->dargs, 0, 16, &o, NULL, 0)),
			 0);
	f->port = it_data_port(&t->d);
	assert_true(f->port > 0);
	for (int i = 0; i < FLOOD_CONNS; i++)
		f->fd[i] = it_raw_try_connect(f->port);
	assert_int_equal(pd_thread_start(&f->thr, flood_main, f), 0);
	assert_true(it_wait_stat(&t->d, "tcp.conns_evicted", FLOOD_CONNS - 64) >= FLOOD_CONNS - 64);
	assert_int_equal(pd_test_broker_start(&t->p, "itP", it_args(&pargs, 8, 0, &o, NULL, 1)), 0);
	t->pa = it_attach(&t->p, PD_AGENT_SEND);
	t->da = it_attach(&t->d, PD_AGENT_RECV);
	still_serves(t, "through");
	still_serves(t, "again");
	atomic_store(&f->stop, 1);
	pd_thread_join(f->thr);
	for (int i = 0; i < FLOOD_CONNS; i++)
		if (f->fd[i] >= 0)
			(void)close(f->fd[i]);
	free(f);
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_garbage_on_the_control_plane),
		cmocka_unit_test(test_raw_writes_to_ungranted_slots),
		cmocka_unit_test(test_garbage_on_the_admin_socket),
		cmocka_unit_test(test_slow_admin_clients_cut_at_deadline),
		cmocka_unit_test(test_idle_connection_flood),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
