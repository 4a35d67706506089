/* SPDX-License-Identifier: MIT */
/* Aborts, deaths and notifications between real pdbroker processes. */
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "it_scenarios.h"
#include "pd_wire.h"

static const struct it_xport tcp = IT_XPORT_TCP;

/* Cancel between batches: PUT_FAILED(-ECANCELED), the receiver frees
 * everything, a later batch of the request is refused. */
static void test_cancel_between_batches(void **state)
{
	(void)state;
	it_scn_cancel_between_batches(&tcp);
}

/* An agent SIGKILLed holding loans and with a batch in flight: the broker
 * reclaims everything and the receiver's side is rolled back. */
static void test_killed_agent_is_reclaimed(void **state)
{
	(void)state;
	it_scn_killed_prefill_agent(&tcp);
}

/* A decode agent in another process: pins every chunk of req, says so on
 * fd, then sleeps until it is killed. */
struct pinner {
	const struct pd_test_broker *d;
	const char *req;
	uint32_t chunks;
	int fd;
};

static int decode_agent_pins_then_sleeps(void *arg)
{
	const struct pinner *p = arg;
	struct pd_recv_info info;
	struct pd_agent *a;

	if (pd_test_agent_attach(p->d, PD_AGENT_RECV, &a) < 0)
		return 1;
	if (pd_recv_wait(a, p->req, IT_WAIT_MS, &info) < 0 || info.status != 0 ||
	    info.chunks != p->chunks)
		return 2;
	for (uint32_t i = 0; i < p->chunks; i++) {
		const void *d;
		uint32_t len;
		char key[48];

		it_key(key, sizeof(key), p->req, i);
		if (pd_recv_lookup(a, key, (uint32_t)strlen(key), &d, &len) < 0)
			return 3;
	}
	if (write(p->fd, "p", 1) != 1)
		return 4;
	for (int i = 0; i < 300; i++) /* holding the pins until SIGKILL (bounded: */
		(void)poll(NULL, 0, 100); /* a parent that failed early does not kill) */
	return 5;
}

/* One byte from fd within timeout_ms: 1, or 0 (timeout, EOF). */
static int read_byte(int fd, uint32_t timeout_ms)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };
	char c;

	return poll(&pf, 1, (int)timeout_ms) == 1 && read(fd, &c, 1) == 1;
}

/* A decode agent SIGKILLed while it pins chunks of a released request:
 * the chunks wait as zombies until the broker drops the dead agent's pins
 * (from its pin journal), then the recv pool is whole again. */
static void test_killed_decode_agent_pins_are_reclaimed(void **state)
{
	struct it *t = it_start(16, 16);
	struct pinner p = { .d = &t->d, .req = "Q", .chunks = 4 };
	struct timespec ticks = { 0, 300 * 1000 * 1000 };
	int fds[2];
	pid_t child;

	(void)state;
	assert_int_equal(pipe(fds), 0);
	p.fd = fds[1];
	child = pd_test_fork(decode_agent_pins_then_sleeps, &p);
	assert_true(child > 0);
	(void)close(fds[1]);
	assert_int_equal(it_put(t, "Q", 0, 4, 4), 0);
	it_expect_event(t, "Q", PD_EV_PUT_DONE);
	assert_int_equal(read_byte(fds[0], IT_WAIT_MS), 1);
	(void)close(fds[0]);
	it_verify(t, "Q", 4); /* our own pins, dropped by the release */
	assert_int_equal(pd_recv_release(t->da, "Q"), 0);
	/* Released, but the child still pins all 4: they stay taken, tick after tick. */
	(void)nanosleep(&ticks, NULL);
	assert_int_equal(it_free_slots(&t->d, 1), 12);
	assert_int_equal(kill(child, SIGKILL), 0);
	assert_int_equal(pd_test_wait(child, 5000), 128 + SIGKILL);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	assert_int_equal(it_wait_stat(&t->d, "agents.pins_reclaimed", 4), 4);
	/* The broker still serves, with the whole pool. */
	assert_int_equal(it_put(t, "R", 0, 16, 16), 0);
	it_expect_event(t, "R", PD_EV_PUT_DONE);
	it_verify(t, "R", 16);
	assert_int_equal(pd_recv_release(t->da, "R"), 0);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	it_stop(t, 0);
}

/* A prompt shorter than one chunk: a zero-chunk last batch still yields
 * exactly one ProxyNotif, which decodes as LMCache's. */
static void test_zero_chunk_request_notifies_the_proxy_once(void **state)
{
	void *ctx = zmq_ctx_new(), *pull = zmq_socket(ctx, ZMQ_PULL);
	char ep[64], buf[4096];
	size_t eplen = sizeof(ep);
	struct pd_wire_dec dec;
	struct pd_msg m;
	struct it *t;
	int timeout = 5000, n;

	(void)state;
	assert_int_equal(zmq_bind(pull, "tcp://127.0.0.1:*"), 0);
	assert_int_equal(zmq_getsockopt(pull, ZMQ_LAST_ENDPOINT, ep, &eplen), 0);
	assert_int_equal(zmq_setsockopt(pull, ZMQ_RCVTIMEO, &timeout, sizeof(timeout)), 0);
	t = it_start_n(16, 16, 1, ep);
	assert_int_equal(it_put(t, "Z", 0, 0, 0), 0);
	it_expect_event(t, "Z", PD_EV_PUT_DONE);
	n = zmq_recv(pull, buf, sizeof(buf), 0);
	assert_true(n > 0);
	pd_wire_dec_init(&dec);
	assert_int_equal(pd_wire_decode(&dec, buf, (size_t)n, &m, NULL, 0), 0);
	assert_int_equal(m.type, PD_MSG_PROXY);
	assert_int_equal(m.u.proxy.req_id.len, 1);
	assert_memory_equal(m.u.proxy.req_id.p, "Z", 1);
	/* LMCache's shape leads: {"type": "ProxyNotif", "req_id": ...}. */
	assert_memory_equal(buf + 1, "\xa4typeProxyNotif", 5);
	pd_wire_dec_fini(&dec);
	timeout = 300;
	assert_int_equal(zmq_setsockopt(pull, ZMQ_RCVTIMEO, &timeout, sizeof(timeout)), 0);
	assert_int_equal(zmq_recv(pull, buf, sizeof(buf), 0), -1); /* exactly one */
	it_stop(t, 0);
	(void)zmq_close(pull);
	(void)zmq_ctx_term(ctx);
}

/* An idle broker (an agent attached, nothing to do) sleeps. */
static void test_idle_broker_uses_no_cpu(void **state)
{
	struct it *t = it_start(16, 16);
	uint64_t before = pd_test_cpu_ticks(t->d.pid) + pd_test_cpu_ticks(t->p.pid), after;
	struct timespec two = { 2, 0 };

	(void)state;
	(void)nanosleep(&two, NULL);
	after = pd_test_cpu_ticks(t->d.pid) + pd_test_cpu_ticks(t->p.pid);
	/* 2 % of one core over 2 s, for two brokers: 2 x 4 ticks at 100 Hz. */
	assert_true(after - before <= (uint64_t)(8 * sysconf(_SC_CLK_TCK) / 100));
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cancel_between_batches),
		cmocka_unit_test(test_killed_agent_is_reclaimed),
		cmocka_unit_test(test_killed_decode_agent_pins_are_reclaimed),
		cmocka_unit_test(test_zero_chunk_request_notifies_the_proxy_once),
		cmocka_unit_test(test_idle_broker_uses_no_cpu),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
