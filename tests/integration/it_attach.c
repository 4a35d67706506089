/* SPDX-License-Identifier: MIT */
/* The attach socket under load: --max-agents agents and no more (the next
 * one refused with -EUSERS, counted, logged once per burst); connections
 * that never say hello wait in a table of their own, with a deadline each,
 * and hold no agent up. */
#include <dirent.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "it_fixture.h"
#include "pd_run.h"

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

/* Lines of b's log that contain needle. */
static uint32_t log_count(const struct pd_test_broker *b, const char *needle)
{
	char line[1024];
	FILE *f = fopen(b->log, "r");
	uint32_t n = 0;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	(void)fclose(f);
	return n;
}

/* Wait (bounded by ms) until b's log has at least want lines with needle. */
static uint32_t log_wait(const struct pd_test_broker *b, const char *needle, uint32_t want,
			 uint32_t ms)
{
	uint64_t deadline = pd_deadline_ms(ms);
	uint32_t n;

	while ((n = log_count(b, needle)) < want && pd_now_ns() < deadline)
		(void)nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
	return n;
}

/* Wait (bounded) until b has want agents attached; how many it has. */
static uint64_t agents_wait(const struct pd_test_broker *b, uint64_t want)
{
	uint64_t deadline = pd_deadline_ms(3000), n;

	while ((n = it_stat(b, "agents")) != want && pd_now_ns() < deadline)
		(void)nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	return n;
}

/* An attach to b that must be refused with -EUSERS, at once. */
static void refused_full(const struct pd_test_broker *b)
{
	struct pd_agent *a = NULL;
	uint64_t t0 = pd_now_ns();

	assert_int_equal(pd_test_agent_attach(b, PD_AGENT_RECV, &a), -EUSERS);
	assert_null(a);
	assert_true(pd_now_ns() - t0 < 500 * PD_NS_PER_MS);
}

/* pdctl status of b says "agents attached: N of M". */
static void status_says(const struct pd_test_broker *b, const char *want)
{
	char bin[256];
	struct pd_run_result r = { 0 };

	assert_int_equal(pd_run_bin("pdctl", bin, sizeof(bin)), 0);
	const char *argv[] = { bin, "--name", b->name, "--rundir", b->rundir, "status", NULL };
	assert_int_equal(pd_run(argv, 15000, &r), 0);
	if (r.exit_code != 0 || !strstr(r.out, want))
		fail_msg("pdctl status: exit %d, no \"%s\"\n%s\n%s", r.exit_code, want, r.out,
			 r.err);
	pd_run_free(&r);
}

#define FULL_LINE    "all 2 agent slots taken (--max-agents)"
#define SUMMARY_LINE "4 more refused while all agent slots were taken"

/* A decode broker with --max-agents 2: its agent and one more attach; the
 * next five are refused with -EUSERS at once, counted five times, logged
 * once (then, after a quiet spell, how many more); the agents attached
 * still move data; one detaches and its slot takes a new agent; a full
 * table later is a new burst, logged again. */
static void test_max_agents_refuses_the_next_with_eusers(void **state)
{
	static const char *const extra[] = { "--max-agents", "2", NULL };
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 8, .recv_slots = 16,
							.d_extra = extra });
	struct pd_agent *second = it_attach(&t->d, PD_AGENT_RECV);

	(void)state;
	for (int i = 0; i < 5; i++)
		refused_full(&t->d);
	assert_int_equal(it_wait_stat(&t->d, "agents.refused_full", 5), 5);
	assert_int_equal(log_wait(&t->d, FULL_LINE, 1, 1000), 1);
	status_says(&t->d, "agents attached: 2 of 2");
	moves_data(t, "while-full");
	pd_agent_detach(second);
	second = NULL;
	assert_int_equal(agents_wait(&t->d, 1), 1);
	second = it_attach(&t->d, PD_AGENT_RECV);
	assert_int_equal(log_wait(&t->d, SUMMARY_LINE, 1, 8000), 1);
	assert_int_equal(log_count(&t->d, FULL_LINE), 1);
	refused_full(&t->d);
	assert_int_equal(log_wait(&t->d, FULL_LINE, 2, 1000), 2);
	assert_int_equal(it_wait_stat(&t->d, "agents.refused_full", 6), 6);
	pd_agent_detach(second);
	moves_data(t, "after-full");
	it_stop(t, 0);
}

/* Without the flag, 32 agents attach and the 33rd gets -EUSERS. */
static void test_default_is_32_agents(void **state)
{
	static const char *const args[] = { "--send-slots", "8", "--recv-slots", "8",
					     "--slot-size", "64K", NULL };
	struct pd_agent *a[32];
	struct pd_test_broker b;

	(void)state;
	assert_int_equal(pd_test_broker_start(&b, "itA", args), 0);
	for (int i = 0; i < 32; i++)
		assert_int_equal(pd_test_agent_attach(&b, 0, &a[i]), 0);
	refused_full(&b);
	assert_int_equal(it_wait_stat(&b, "agents.refused_full", 1), 1);
	status_says(&b, "agents attached: 32 of 32");
	for (int i = 0; i < 32; i++)
		pd_agent_detach(a[i]);
	assert_int_equal(pd_test_broker_stop(&b), 0);
}

/* The soft RLIMIT_NOFILE of process pid (from /proc). */
static uint64_t soft_nofile(pid_t pid)
{
	struct rlimit rl;

	assert_int_equal(prlimit(pid, RLIMIT_NOFILE, NULL, &rl), 0);
	return rl.rlim_cur;
}

/* With a soft limit of 1024 fds inherited, --max-agents 256 raises it to
 * what 256 agents need (2 fds each, 64 waiting for a hello, 512 for the
 * rest), or says why not when the hard limit is lower. */
static void test_max_agents_raises_the_fd_limit(void **state)
{
	static const char *const args[] = { "--send-slots", "8", "--recv-slots", "8",
					     "--slot-size", "64K", "--max-agents", "256", NULL };
	struct pd_test_broker b;
	struct rlimit mine, low;
	uint64_t want = 256 * 2 + HELLO_MAX + 512;

	(void)state;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &mine), 0);
	if (mine.rlim_cur < 1024)
		skip(); /* the test needs 1024 itself */
	low = (struct rlimit){ .rlim_cur = 1024, .rlim_max = mine.rlim_max };
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	assert_int_equal(pd_test_broker_start(&b, "itA", args), 0);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &mine), 0);
	if (mine.rlim_max != RLIM_INFINITY && mine.rlim_max < want) {
		assert_int_equal(soft_nofile(b.pid), mine.rlim_max);
		assert_int_equal(log_wait(&b, "file descriptors allowed", 1, 3000), 1);
	} else {
		assert_int_equal(soft_nofile(b.pid), want);
	}
	assert_int_equal(pd_test_broker_stop(&b), 0);
}

/* The fd limit that leaves process pid exactly room new fds (the lowest
 * free numbers, below it), from its open fds in /proc. */
static rlim_t fd_limit_for_room(pid_t pid, int room)
{
	static uint8_t open_fd[65536];
	char path[64];
	struct dirent *d;
	DIR *dir;
	int n = 0;

	memset(open_fd, 0, sizeof(open_fd));
	(void)snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	assert_non_null(dir);
	while ((d = readdir(dir)))
		if (d->d_name[0] != '.' && atoi(d->d_name) < (int)sizeof(open_fd))
			open_fd[atoi(d->d_name)] = 1;
	(void)closedir(dir);
	for (; room > 0 && n < (int)sizeof(open_fd); n++)
		room -= !open_fd[n];
	return (rlim_t)n;
}

#define FD_ROOM     8  /* fds the broker may still open */
#define FD_CROWD    32 /* silent connections: more than that room */

/* Out of file descriptors, the broker stops accepting until its next tick
 * instead of spinning on the readable socket (it uses next to no CPU while
 * connections wait in the backlog), counts it, and accepts again once fds
 * are free: an agent then attaches. */
static void test_out_of_fds_pauses_accepting(void **state)
{
	static const char *const args[] = { "--send-slots", "8", "--recv-slots", "8",
					     "--slot-size", "64K", NULL };
	struct pd_test_broker b;
	struct pd_agent *a = NULL;
	struct rlimit rl;
	int fd[FD_CROWD];
	uint64_t t0;

	(void)state;
	assert_int_equal(pd_test_broker_start(&b, "itA", args), 0);
	it_wait_admin(&b);
	assert_int_equal(prlimit(b.pid, RLIMIT_NOFILE, NULL, &rl), 0);
	rl.rlim_cur = fd_limit_for_room(b.pid, FD_ROOM);
	assert_int_equal(prlimit(b.pid, RLIMIT_NOFILE, &rl, NULL), 0);
	for (int i = 0; i < FD_CROWD; i++)
		assert_true((fd[i] = silent_connect(&b)) >= 0);
	assert_true(it_wait_stat(&b, "agents.accept_failed", 1) >= 1);
	t0 = pd_test_cpu_ticks(b.pid);
	(void)nanosleep(&(struct timespec){ 1, 0 }, NULL);
	if (pd_test_cpu_ticks(b.pid) - t0 > 20) /* spinning takes most of a second's 100 */
		fail_msg("the broker used %llu ticks of CPU in 1 s, out of fds",
			 (unsigned long long)(pd_test_cpu_ticks(b.pid) - t0));
	for (int i = 0; i < FD_CROWD; i++)
		(void)close(fd[i]);
	assert_int_equal(pd_test_agent_attach(&b, 0, &a), 0);
	pd_agent_detach(a);
	assert_int_equal(pd_test_broker_stop(&b), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_max_agents_refuses_the_next_with_eusers),
		cmocka_unit_test(test_default_is_32_agents),
		cmocka_unit_test(test_silent_connections_hold_no_attach_up),
		cmocka_unit_test(test_max_agents_raises_the_fd_limit),
		cmocka_unit_test(test_out_of_fds_pauses_accepting),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
