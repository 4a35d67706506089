/* SPDX-License-Identifier: MIT */
/* The attach socket under load: connections that never say hello wait in a
 * table of their own, with a deadline each, and hold no agent up. */
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "it_fixture.h"

#define SILENT_CONNS 96u /* more than the broker lets wait for a hello (64) */
#define HELLO_MAX    64u

/* A connection to b's attach socket that says nothing, or -1. */
static int silent_connect(const struct pd_test_broker *b)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char path[256];
	int n = snprintf(path, sizeof(path), "%s/%s.sock", b->rundir, b->name), fd;

	assert_true(n > 0 && (size_t)n < sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, (size_t)n + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		(void)close(fd);
		fd = -1;
	}
	return fd;
}

/* Every fd reaches EOF (the broker closed it) by the deadline; 1 if so. */
static int all_closed(const int *fd, uint32_t n, uint64_t deadline)
{
	char b[64];

	for (uint32_t i = 0; i < n; i++) {
		struct pollfd p = { .fd = fd[i], .events = POLLIN };
		int closed = 0;

		while (!closed && pd_now_ns() < deadline)
			closed = poll(&p, 1, 50) > 0 && read(fd[i], b, sizeof(b)) <= 0;
		if (!closed)
			return 0;
	}
	return 1;
}

/* A transfer from the prefill to the decode broker, every byte verified. */
static void moves_data(struct it *t, const char *req)
{
	assert_int_equal(it_put(t, req, 0, 3, 3), 0);
	it_expect_event(t, req, PD_EV_PUT_DONE);
	it_verify(t, req, 3);
	assert_int_equal(pd_recv_release(t->da, req), 0);
}

/* 96 connections to the decode broker's attach socket that never send a
 * hello: 64 wait, the oldest 32 are evicted. An agent then attaches at once
 * (well within their 2 s deadline; its connection evicts one more) and
 * moves data; the silent ones are all closed within their deadline, each
 * counted once, evicted or timed out. */
static void test_silent_connections_hold_no_attach_up(void **state)
{
	struct it *t = calloc(1, sizeof(*t));
	struct it_opts o = { .send_slots = 8, .recv_slots = 16 };
	struct it_args pargs;
	int fd[SILENT_CONNS];
	uint64_t t0, ms, evicted, timeouts;

	(void)state;
	assert_non_null(t);
	assert_int_equal(pd_test_broker_start(&t->d, "itD", it_args(&t->dargs, 0, 16, &o, NULL, 0)),
			 0);
	assert_int_equal(pd_test_broker_start(&t->p, "itP", it_args(&pargs, 8, 0, &o, NULL, 1)), 0);
	for (uint32_t i = 0; i < SILENT_CONNS; i++)
		assert_true((fd[i] = silent_connect(&t->d)) >= 0);
	evicted = it_wait_stat(&t->d, "agents.pending_evicted", SILENT_CONNS - HELLO_MAX);
	assert_int_equal(evicted, SILENT_CONNS - HELLO_MAX);
	assert_int_equal(it_stat(&t->d, "agents.pending"), HELLO_MAX);
	t0 = pd_now_ns();
	assert_int_equal(pd_test_agent_attach(&t->d, PD_AGENT_RECV, &t->da), 0);
	ms = (pd_now_ns() - t0) / PD_NS_PER_MS;
	if (ms >= 500)
		fail_msg("the attach took %llu ms behind silent connections",
			 (unsigned long long)ms);
	t->pa = it_attach(&t->p, PD_AGENT_SEND);
	moves_data(t, "past-the-silent");
	assert_true(all_closed(fd, SILENT_CONNS, pd_deadline_ms(3500)));
	/* Each silent one counted once; the agent's connection evicted one more. */
	evicted = it_stat(&t->d, "agents.pending_evicted");
	timeouts = it_wait_stat(&t->d, "agents.hello_timeouts", SILENT_CONNS - evicted);
	assert_true(evicted >= SILENT_CONNS - HELLO_MAX + 1);
	assert_true(timeouts >= 1);
	assert_int_equal(evicted + timeouts, SILENT_CONNS);
	assert_int_equal(it_stat(&t->d, "agents.pending"), 0);
	for (uint32_t i = 0; i < SILENT_CONNS; i++)
		(void)close(fd[i]);
	moves_data(t, "after-the-silent");
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_silent_connections_hold_no_attach_up),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
