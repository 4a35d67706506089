/* SPDX-License-Identifier: MIT */
/*
 * --transport rdma on a host without an RDMA device (this one: real verbs
 * run in `make test-rdma`, tests/rdma/rdma_broker_test.c): the brokers
 * start, say why rdma is out, and move requests over tcp; pdctl peers
 * shows the fallback and its reason. --require rdma refuses to start,
 * naming the flag.
 */
#include <unistd.h>

#include "it_fixture.h"

/* The brokers could set rdma up after all (a host with a device). */
static int rdma_works(const struct pd_test_broker *b)
{
	return it_stat(b, "rdma.connects") != UINT64_MAX;
}

/* pdctl --json status of b: info.transport. */
static void status_transport(const struct pd_test_broker *b, char *out, size_t len)
{
	char bin[256];
	struct pd_run_result r = { 0 };

	assert_int_equal(pd_run_bin("pdctl", bin, sizeof(bin)), 0);
	const char *argv[] = { bin, "--name", b->name, "--rundir", b->rundir, "--json", "status",
			       NULL };
	assert_int_equal(pd_run(argv, 15000, &r), 0);
	if (r.exit_code != 0 || pd_json_get_str(r.out, "info.transport", out, len) != 0)
		fail_msg("pdctl status: exit %d\n%s\n%s", r.exit_code, r.out, r.err);
	pd_run_free(&r);
}

/* Both brokers --transport rdma,tcp without a device: tcp, "fallback:
 * rdma: <why>", every byte there; no rdma counters, none offered. */
static void test_no_device_falls_back_to_tcp(void **state)
{
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 16,
							.transport = "rdma,tcp" });
	char x[128], why[128];

	(void)state;
	if (rdma_works(&t->p) || rdma_works(&t->d)) {
		it_stop(t, 0);
		skip(); /* this host has RDMA: the fallback cannot be seen here */
	}
	assert_int_equal(it_put(t, "A", 0, 3, 3), 0);
	it_expect_event(t, "A", PD_EV_PUT_DONE);
	it_verify(t, "A", 3);
	assert_int_equal(pd_recv_release(t->da, "A"), 0);
	it_peer_xport(&t->p, x, why, sizeof(x));
	assert_string_equal(x, "tcp");
	if (strncmp(why, "fallback: rdma: ", 16) != 0 || strlen(why) <= 16)
		fail_msg("why: %s", why);
	print_message("pdctl peers: tcp, %s\n", why);
	assert_true(it_wait_stat(&t->p, "tcp.frames_tx", 3) >= 3);
	it_peer_xport(&t->d, x, why, sizeof(x));
	assert_string_equal(x, "tcp");
	status_transport(&t->p, x, sizeof(x));
	assert_string_equal(x, "tcp"); /* rdma left out: it is not served */
	status_transport(&t->d, x, sizeof(x));
	assert_string_equal(x, "tcp");
	it_stop(t, 0);
}

/* --require rdma without a device: no start, and the message says so. */
static void test_require_rdma_without_device_refused(void **state)
{
	char bin[256], name[64], ctrl[64];
	struct pd_run_result r;

	(void)state;
	assert_int_equal(pd_run_bin("pdbroker", bin, sizeof(bin)), 0);
	(void)snprintf(name, sizeof(name), "itrdma%d", (int)getpid());
	(void)snprintf(ctrl, sizeof(ctrl), "tcp://127.0.0.1:%d", pd_test_free_port());
	const char *argv[] = { bin, "--name", name, "--rundir", "/tmp", "--ctrl", ctrl,
			       "--data", "127.0.0.1:0", "--recv-slots", "4", "--send-slots", "4",
			       "--slot-size", "64K", "--transport", "rdma,tcp", "--require", "rdma",
			       NULL };
	assert_int_equal(pd_run(argv, 5000, &r), 0);
	if (r.exit_code == 128 + 9 && strstr(r.err, "rdma on ")) { /* RDMA here: it started */
		pd_run_free(&r);
		skip();
	}
	assert_int_equal(r.exit_code, 1);
	if (!strstr(r.err, "--require rdma") || !strstr(r.err, "cannot be set up"))
		fail_msg("stderr: %s", r.err);
	pd_run_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_device_falls_back_to_tcp),
		cmocka_unit_test(test_require_rdma_without_device_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
