/* SPDX-License-Identifier: MIT */
/*
 * pdctl against real pdbroker processes: every command with an attached
 * agent (text and --json), the Prometheus exposition checked line by line
 * (pd_prom.h), and the three ways a broker can be unreachable (exit 3, 4
 * and 5).
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "it_fixture.h"
#include "pd_json.h"
#include "pd_prom.h"
#include "pd_run.h"
#include "pd_test.h"

#define CTL_WAIT_MS 15000u
#define MAX_ARGS    24

static const char *const lone_args[] = { "--send-slots", "8", "--recv-slots", "24",
					 "--slot-size", "64K", "--log-level", "info", NULL };

/* pdctl --name B --rundir R ARGS... (ARGS NULL-terminated); r to free. */
static void ctl_argv(struct pd_run_result *r, const char *name, const char *rundir,
		     const char *const *args)
{
	static char bin[128];
	const char *argv[MAX_ARGS] = { bin, "--name", name, "--rundir", rundir };
	int n = 5;

	assert_int_equal(pd_run_bin("pdctl", bin, sizeof(bin)), 0);
	for (; *args && n < MAX_ARGS - 1; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	assert_int_equal(pd_run(argv, CTL_WAIT_MS, r), 0);
}

static void expect_exit(const struct pd_run_result *r, int code)
{
	if (r->exit_code != code)
		fail_msg("pdctl exited %d, expected %d\nstdout:\n%s\nstderr:\n%s", r->exit_code,
			 code, r->out, r->err);
}

/* Run pdctl on b and expect code; r keeps the output until the next run. */
static void run_expect(struct pd_run_result *r, const struct pd_test_broker *b, int code,
		       const char *const *args)
{
	pd_run_free(r);
	ctl_argv(r, b->name, b->rundir, args);
	expect_exit(r, code);
}

#define RUN(b, code, ...) run_expect(&r, (b), (code), (const char *const[]){ __VA_ARGS__, NULL })

static double jnum(const char *json, const char *path)
{
	double v = -1;

	if (pd_json_get_num(json, path, &v) != 0)
		fail_msg("no number at '%s' in:\n%s", path, json);
	return v;
}

static void expect_jstr(const char *json, const char *path, const char *want)
{
	char buf[256];

	if (pd_json_get_str(json, path, buf, sizeof(buf)) != 0)
		fail_msg("no string at '%s' in:\n%s", path, json);
	assert_string_equal(buf, want);
}

static void expect_has(const char *text, const char *piece)
{
	if (!strstr(text, piece))
		fail_msg("'%s' not in:\n%s", piece, text);
}

/* Wait (bounded) until status --json of b has at least min at path. */
static double wait_status_num(const struct pd_test_broker *b, const char *path, double min)
{
	uint64_t deadline = pd_deadline_ms(5000);
	struct pd_run_result r = { 0 };
	double v = -1;

	for (;;) {
		RUN(b, 0, "--json", "status");
		v = -1;
		(void)pd_json_get_num(r.out, path, &v);
		if (v >= min || pd_now_ns() >= deadline)
			break;
		(void)nanosleep(&(struct timespec){ 0, 50 * 1000 * 1000 }, NULL);
	}
	pd_run_free(&r);
	return v;
}

/* One 8-chunk request P -> D, left READY (not released) at D. */
static struct it *start_with_transfer(void)
{
	struct it *t = it_start(16, 24);
	struct pd_recv_info info;

	assert_int_equal(it_put(t, "req-a", 0, 8, 8), 0);
	it_expect_event(t, "req-a", PD_EV_PUT_DONE);
	assert_int_equal(pd_recv_wait(t->da, "req-a", IT_WAIT_MS, &info), 0);
	it_wait_admin(&t->p);
	it_wait_admin(&t->d);
	return t;
}

static void test_status_text_and_json(void **state)
{
	struct it *t = start_with_transfer();
	struct pd_run_result r = { 0 };
	char line[96];

	(void)state;
	RUN(&t->d, 0, "status");
	(void)snprintf(line, sizeof(line), "broker %s  pid %d", t->d.name, (int)t->d.pid);
	expect_has(r.out, line);
	expect_has(r.out, "pools");
	expect_has(r.out, "admission:");
	expect_has(r.out, "agents attached: 1");
	expect_has(r.out, "counters:");

	RUN(&t->d, 0, "status", "--json"); /* options after the command */
	assert_int_equal(pd_json_valid(r.out), 0);
	expect_jstr(r.out, "name", t->d.name);
	expect_jstr(r.out, "state", "ready");
	assert_int_equal((int)jnum(r.out, "pid"), (int)t->d.pid);
	assert_true(jnum(r.out, "uptime_s") > 0);
	assert_int_equal((int)jnum(r.out, "pools.recv.slots"), 24);
	assert_int_equal((int)jnum(r.out, "pools.send.slots"), 0);
	assert_int_equal(pd_json_get_bool(r.out, "pools.send.present"), 0);
	/* req-a is READY, not released: its 8 slots are in use. */
	assert_int_equal((int)jnum(r.out, "pools.recv.used"), 8);
	assert_int_equal((int)jnum(r.out, "pools.recv.free"), 16);
	assert_int_equal((int)jnum(r.out, "agents"), 1);
	assert_true(pd_json_count(r.out, "counters") > 0);
	assert_true(jnum(r.out, "stale_s") >= 0);
	pd_run_free(&r);

	/* Published statistics catch up within a few ticks. */
	assert_true(wait_status_num(&t->d, "counters.chunks_recv", 8) >= 8);
	assert_true(wait_status_num(&t->d, "pools.recv.hwm", 8) >= 8);
	assert_true(wait_status_num(&t->d, "peers[0].bytes_rx", 1) >= 1);
	assert_true(wait_status_num(&t->p, "counters.chunks_sent", 8) >= 8);
	assert_int_equal((int)wait_status_num(&t->p, "pools.send.slots", 16), 16);
	assert_true(wait_status_num(&t->d, "histograms.admit_wait.count", 1) >= 1);
	it_stop(t, 0);
}

static void test_agents_requests_peers(void **state)
{
	struct it *t = start_with_transfer();
	struct pd_run_result r = { 0 };
	char pid[16];

	(void)state;
	(void)snprintf(pid, sizeof(pid), "%d", (int)getpid());
	RUN(&t->d, 0, "--json", "agents");
	assert_int_equal(pd_json_count(r.out, "rows"), 1);
	assert_int_equal((int)jnum(r.out, "rows[0].pid"), (int)getpid());
	expect_jstr(r.out, "rows[0].roles", "recv");
	RUN(&t->d, 0, "agents");
	expect_has(r.out, "id");
	expect_has(r.out, "roles");
	expect_has(r.out, pid);

	RUN(&t->d, 0, "--json", "requests");
	assert_int_equal(pd_json_count(r.out, "rows"), 1);
	expect_jstr(r.out, "rows[0].req_id", "req-a");
	expect_jstr(r.out, "rows[0].side", "recv");
	expect_jstr(r.out, "rows[0].state", "ready");
	assert_int_equal((int)jnum(r.out, "rows[0].chunks"), 8);
	RUN(&t->d, 0, "requests", "--state", "ready");
	expect_has(r.out, "req_id");
	expect_has(r.out, "req-a");
	RUN(&t->d, 0, "--json", "requests", "--state=waiting");
	assert_int_equal(pd_json_count(r.out, "rows"), 0);

	RUN(&t->p, 0, "--json", "peers");
	assert_int_equal(pd_json_count(r.out, "rows"), 1);
	expect_jstr(r.out, "rows[0].name", t->d.name);
	expect_jstr(r.out, "rows[0].state", "up");
	RUN(&t->p, 0, "peers");
	expect_has(r.out, "transport");
	expect_has(r.out, t->d.name);
	pd_run_free(&r);
	it_stop(t, 0);
}

/* Admission as operators see it: on the sender, a request admitted with
 * nothing in flight is "admitted", one still waiting for admission is
 * "declared"; on the receiver the latter is "waiting". */
static void test_requests_show_admission(void **state)
{
	struct it *t = it_start(8, 8);
	struct pd_run_result r = { 0 };

	(void)state;
	assert_int_equal(it_put(t, "A", 0, 4, 8), 0);
	assert_int_equal(it_wait_free(&t->p, 0, 8), 8); /* A's batch is through */
	assert_int_equal(it_declare_on(t, t->pa, "B", 4), 0);
	assert_int_equal(it_wait_stat(&t->d, "rx.waiting_requests", 1), 1);
	RUN(&t->p, 0, "--json", "requests");
	assert_int_equal(pd_json_count(r.out, "rows"), 2);
	expect_jstr(r.out, "rows[0].req_id", "A");
	expect_jstr(r.out, "rows[0].state", "admitted");
	expect_jstr(r.out, "rows[1].req_id", "B");
	expect_jstr(r.out, "rows[1].state", "declared");
	RUN(&t->p, 0, "--json", "requests", "--state", "declared");
	assert_int_equal(pd_json_count(r.out, "rows"), 1);
	RUN(&t->d, 0, "--json", "requests", "--state", "waiting");
	assert_int_equal(pd_json_count(r.out, "rows"), 1);
	expect_jstr(r.out, "rows[0].req_id", "B");
	RUN(&t->p, 0, "requests");
	expect_has(r.out, "declared");
	assert_int_equal(pd_cancel(t->pa, "B"), 0);
	assert_int_equal(it_expect_event_from(t->pa, "B", PD_EV_PUT_FAILED), -ECANCELED);
	pd_run_free(&r);
	it_stop(t, 0);
}

static void test_cancel(void **state)
{
	struct it *t = start_with_transfer();
	struct pd_run_result r = { 0 };

	(void)state;
	RUN(&t->d, 1, "cancel", "no-such-request");
	assert_int_equal(r.out_len, 0);
	expect_has(r.err, "pdctl: cancel no-such-request: broker ");
	assert_non_null(strchr(r.err, '\n'));
	assert_int_equal(strchr(r.err, '\n')[1], '\0'); /* one line */

	RUN(&t->d, 0, "--json", "cancel", "req-a");
	assert_int_equal(pd_json_get_bool(r.out, "ok"), 1);
	assert_true(jnum(r.out, "cancelled") >= 1);
	RUN(&t->d, 0, "--json", "requests", "--state", "ready");
	assert_int_equal(pd_json_count(r.out, "rows"), 0);
	pd_run_free(&r);
	it_stop(t, 0);
}

static void test_metrics_well_formed(void **state)
{
	struct it *t = start_with_transfer();
	struct pd_prom *s = calloc(1, sizeof(*s));
	struct pd_run_result r = { 0 };
	char want[160];

	(void)state;
	assert_non_null(s);
	(void)wait_status_num(&t->d, "histograms.admit_wait.count", 1);
	RUN(&t->d, 0, "metrics");
	assert_true(r.out_len > 0);
	pd_prom_check(s, r.out, t->d.name);
	assert_true(s->nfam > 20);
	assert_true(s->histograms >= 1);
	assert_true(s->samples >= s->nfam);

	RUN(&t->d, 0, "metrics");
	(void)snprintf(want, sizeof(want),
		       "pdkv_pool_slots{broker=\"%s\",pool=\"recv\",state=\"free\"} 16\n",
		       t->d.name);
	expect_has(r.out, want);
	expect_has(r.out, "# TYPE pdkv_admit_wait_seconds histogram\n");
	expect_has(r.out, "le=\"+Inf\"}");

	RUN(&t->d, 0, "--json", "metrics");
	assert_int_equal(pd_json_valid(r.out), 0);
	expect_jstr(r.out, "broker", t->d.name);
	assert_true(pd_json_count(r.out, "families") > 20);
	pd_run_free(&r);
	free(s);
	it_stop(t, 0);
}

static void test_watch_count(void **state)
{
	struct pd_test_broker b;
	struct pd_run_result r = { 0 };
	char *nl;

	(void)state;
	assert_int_equal(pd_test_broker_start(&b, "itC", lone_args), 0);
	RUN(&b, 0, "watch", "--count", "2", "--interval", "100");
	nl = strstr(r.out, "broker ");
	assert_non_null(nl);
	assert_non_null(strstr(nl + 1, "\nbroker ")); /* two frames */
	RUN(&b, 0, "--json", "watch", "--count=2", "--interval=50");
	nl = strchr(r.out, '\n');
	assert_non_null(nl);
	*nl = '\0';
	assert_int_equal(pd_json_valid(r.out), 0);
	assert_int_equal(pd_json_valid(nl + 1), 0);
	assert_int_equal((int)jnum(nl + 1, "pools.recv.slots"), 24);
	pd_run_free(&r);
	(void)pd_test_broker_stop(&b);
}

static void test_usage_errors(void **state)
{
	static const char *const bad[][4] = {
		{ "bogus", NULL }, { "--bogus", "status", NULL }, { "cancel", NULL },
		{ "status", "extra", NULL }, { "--timeout", "soon", "agents" },
		{ "status", "--state", "ready" }, { "--json", NULL }, { "status", "--timeout", NULL },
	};
	struct pd_run_result r;

	(void)state;
	for (size_t i = 0; i < PD_ARRAY_SIZE(bad); i++) {
		ctl_argv(&r, "nobody", "/tmp", bad[i]);
		expect_exit(&r, 2);
		expect_has(r.err, "pdctl: ");
		pd_run_free(&r);
	}
	ctl_argv(&r, "nobody", "/tmp", (const char *const[]){ "--help", NULL });
	expect_exit(&r, 0);
	expect_has(r.out, "Exit status");
	pd_run_free(&r);
}

static void test_unknown_broker_exit_3(void **state)
{
	struct pd_test_broker b = { 0 };
	struct pd_run_result r = { 0 };

	(void)state;
	pd_test_name(b.name, sizeof(b.name), "none");
	(void)snprintf(b.rundir, sizeof(b.rundir), "/tmp/pdkv-it-%d", (int)getpid());
	RUN(&b, 3, "status");
	expect_has(r.err, "no broker named");
	RUN(&b, 3, "agents");
	RUN(&b, 3, "--json", "metrics");
	pd_run_free(&r);
}

static void test_killed_broker_exit_4(void **state)
{
	struct pd_test_broker b;
	struct pd_run_result r = { 0 };
	char want[320];

	(void)state;
	assert_int_equal(pd_test_broker_start(&b, "itC", lone_args), 0);
	assert_int_equal(kill(b.pid, SIGKILL), 0);
	assert_int_equal(pd_test_wait(b.pid, 5000), 128 + SIGKILL);
	(void)snprintf(want, sizeof(want), "broker %s (pid %d) is dead; its segment "
		       "/dev/shm/pdkv.%s is stale: start the broker again to reclaim it, or "
		       "remove the file", b.name, (int)b.pid, b.name);
	b.pid = 0;
	RUN(&b, 4, "status");
	expect_has(r.err, want);
	RUN(&b, 4, "agents");
	expect_has(r.err, want);
	pd_run_free(&r);
	assert_int_equal(pd_segment_unlink(b.name), 0); /* it was there, stale */
	(void)pd_test_broker_stop(&b);                    /* its socket files and log */
}

static void test_stopped_broker_exit_5_status_works(void **state)
{
	struct pd_test_broker b;
	struct pd_run_result r = { 0 }, r5, rs, rt;
	uint64_t t0, took;

	(void)state;
	assert_int_equal(pd_test_broker_start(&b, "itC", lone_args), 0);
	it_wait_admin(&b);
	RUN(&b, 0, "agents"); /* the admin socket is up */
	assert_int_equal(kill(b.pid, SIGSTOP), 0);
	/* Nothing asserts while it is stopped: a failure must not leave it so. */
	t0 = pd_now_ns();
	ctl_argv(&r5, b.name, b.rundir, (const char *const[]){ "agents", "--timeout", "500", NULL });
	took = pd_now_ns() - t0;
	ctl_argv(&rs, b.name, b.rundir, (const char *const[]){ "--json", "status", NULL });
	ctl_argv(&rt, b.name, b.rundir, (const char *const[]){ "status", NULL });
	(void)kill(b.pid, SIGCONT);
	expect_exit(&r5, 5);
	expect_has(r5.err, "did not answer");
	assert_true(took < 3 * PD_NS_PER_S);
	expect_exit(&rs, 0);
	assert_int_equal((int)jnum(rs.out, "pools.recv.slots"), 24);
	expect_exit(&rt, 0);
	expect_has(rt.out, "pools");
	RUN(&b, 0, "agents");
	pd_run_free(&r);
	pd_run_free(&r5);
	pd_run_free(&rs);
	pd_run_free(&rt);
	(void)pd_test_broker_stop(&b);
}

/* A pid nobody has (a child reaped at once). */
static pid_t reaped_pid(void)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(0);
	assert_true(pid > 0);
	assert_int_equal(pd_test_wait(pid, 5000), 0);
	return pid;
}

/* Liveness is the kernel's word: a header whose broker_pid names a dead
 * process (what a writer of the segment could do) makes pdctl call the
 * broker neither dead nor by that pid, and starting the broker again is
 * refused without removing the live broker's segment, which pdctl and
 * agents still find. */
static void test_faked_header_pid_is_not_death(void **state)
{
	struct pd_test_broker b;
	struct pd_run_result r = { 0 };
	struct stat before, after;
	char path[128], want[96], bin[128];
	struct pd_shm_hdr *h;
	int fd;

	(void)state;
	assert_int_equal(pd_test_broker_start(&b, "itC", lone_args), 0);
	it_wait_admin(&b);
	(void)snprintf(path, sizeof(path), "/pdkv.%s", b.name);
	fd = shm_open(path, O_RDWR, 0);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &before), 0);
	h = mmap(NULL, sizeof(*h), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(h != MAP_FAILED);
	h->broker_pid = reaped_pid();
	RUN(&b, 0, "--json", "status");
	assert_int_equal((int)jnum(r.out, "pid"), (int)b.pid);
	/* Started again under its name: refused, nothing removed. */
	assert_int_equal(pd_run_bin("pdbroker", bin, sizeof(bin)), 0);
	{
		char ctrl[64];
		const char *argv[] = { bin, "--name", b.name, "--rundir", b.rundir, "--ctrl",
				       ctrl, "--data", "127.0.0.1:0",
				       "--send-slots", "8", "--recv-slots", "8", NULL };

		(void)snprintf(ctrl, sizeof(ctrl), "tcp://127.0.0.1:%d", pd_test_free_port());
		pd_run_free(&r);
		assert_int_equal(pd_run(argv, CTL_WAIT_MS, &r), 0);
	}
	assert_true(r.exit_code != 0);
	(void)snprintf(want, sizeof(want), "already running (pid %d)", (int)b.pid);
	expect_has(r.err, want);
	(void)snprintf(path, sizeof(path), "/dev/shm/pdkv.%s", b.name);
	assert_int_equal(stat(path, &after), 0);
	assert_true(after.st_ino == before.st_ino); /* the live broker's segment, still */
	RUN(&b, 0, "status");
	RUN(&b, 0, "agents");
	(void)munmap(h, sizeof(*h));
	(void)close(fd);
	pd_run_free(&r);
	(void)pd_test_broker_stop(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_status_text_and_json),
		cmocka_unit_test(test_agents_requests_peers),
		cmocka_unit_test(test_requests_show_admission),
		cmocka_unit_test(test_cancel),
		cmocka_unit_test(test_metrics_well_formed),
		cmocka_unit_test(test_watch_count),
		cmocka_unit_test(test_usage_errors),
		cmocka_unit_test(test_unknown_broker_exit_3),
		cmocka_unit_test(test_killed_broker_exit_4),
		cmocka_unit_test(test_faked_header_pid_is_not_death),
		cmocka_unit_test(test_stopped_broker_exit_5_status_works),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
