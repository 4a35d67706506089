/* SPDX-License-Identifier: MIT */
/* pdbroker's command line, as an operator meets it: --group shares the
 * sockets and the segment, and what cannot be honoured is refused at start
 * with a message naming the flag. */
#include <grp.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "pd_proc.h"
#include "pd_run.h"
#include "pd_test.h"

/* A group other than our egid, so that giving files to it is visible, and
 * one we may give files to: any named group as root, else one of ours
 * (getgroups). NULL when there is none. */
static const struct group *other_group(void)
{
	const struct group *g = NULL;
	gid_t mine[NGROUPS_MAX];
	int n;

	if (geteuid() == 0) {
		setgrent();
		while ((g = getgrent()) && g->gr_gid == getegid())
			;
		endgrent();
		return g;
	}
	n = getgroups(NGROUPS_MAX, mine);
	for (int i = 0; i < n && !g; i++)
		g = mine[i] != getegid() ? getgrgid(mine[i]) : NULL;
	return g;
}

static void assert_shared(const char *path, gid_t gid)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_gid, gid);
	assert_int_equal(st.st_mode & 0777, 0660);
}

static void test_group_owns_sockets_and_segment(void **state)
{
	const struct group *g = other_group();
	struct pd_test_broker b;
	char name[64], path[256];
	gid_t gid;

	(void)state;
	if (!g) {
		(void)printf("it_cli: no named group of ours but our egid: --group is not tried\n");
		skip();
	}
	gid = g->gr_gid;
	(void)snprintf(name, sizeof(name), "%s", g->gr_name);
	const char *args[] = { "--send-slots", "4", "--recv-slots", "4", "--slot-size", "64K",
			       "--group", name, NULL };
	assert_int_equal(pd_test_broker_start(&b, "itG", args), 0);
	(void)snprintf(path, sizeof(path), "%s/%s.sock", b.rundir, b.name);
	assert_shared(path, gid);
	(void)snprintf(path, sizeof(path), "%s/%s.admin", b.rundir, b.name);
	for (int i = 0; i < 2500 && pd_test_unix_listening(path) != 1; i++) /* it may come later */
		(void)nanosleep(&(struct timespec){ 0, 2 * 1000 * 1000 }, NULL);
	assert_shared(path, gid);
	(void)snprintf(path, sizeof(path), "/dev/shm/pdkv.%s", b.name);
	assert_shared(path, gid);
	assert_int_equal(pd_test_broker_stop(&b), 0);
}

/* Run pdbroker with one bad setting: exit code 1 or 2, the flag named. */
static void refused(const char *flag, const char *value)
{
	char bin[256], name[64], ctrl[64];
	struct pd_run_result r;

	assert_int_equal(pd_run_bin("pdbroker", bin, sizeof(bin)), 0);
	(void)snprintf(name, sizeof(name), "itcli%d", (int)getpid());
	(void)snprintf(ctrl, sizeof(ctrl), "tcp://127.0.0.1:%d", pd_test_free_port());
	const char *argv[] = { bin, "--name", name, "--rundir", "/tmp", "--ctrl",
			       ctrl, "--data", "127.0.0.1:0", flag, value, NULL };
	assert_int_equal(pd_run(argv, 10000, &r), 0);
	assert_true(r.exit_code == 1 || r.exit_code == 2);
	if (!strstr(r.err, flag))
		fail_msg("stderr does not name %s: %s", flag, r.err);
	pd_run_free(&r);
}

static void test_unknown_group_refused(void **state)
{
	(void)state;
	refused("--group", "no-such-group-pdkv");
}

/* The default 256 send slots do not make 3 pools of one size. */
static void test_send_pools_that_do_not_divide_refused(void **state)
{
	(void)state;
	refused("--send-pools", "3");
}

static void test_required_transport_missing_refused(void **state)
{
	(void)state;
	refused("--require", "rdma");
}

/* More agents than the segment's table of agent slots holds (256). */
static void test_too_many_agents_refused(void **state)
{
	(void)state;
	refused("--max-agents", "257");
}

/* A send pool of more slots than a transport takes writes a peer
 * (65536): the broker starts, with tcp and shm both offered. */
static void test_send_pool_deeper_than_a_transport_starts(void **state)
{
	struct pd_test_broker b;
	const char *args[] = { "--send-slots", "65540", "--recv-slots", "4", "--slot-size", "4K",
			       "--hugepages", "off", "--transport", "tcp,shm", NULL };

	(void)state;
	assert_int_equal(pd_test_broker_start(&b, "itD", args), 0);
	assert_int_equal(pd_test_broker_wait_log(&b, " ready: ", 10000), 1);
	assert_int_equal(pd_test_broker_log_has(&b, "not offered"), 0);
	assert_int_equal(pd_test_broker_stop(&b), 0);
}

/* --help names --max-agents, its bound and its default. */
static void test_help_lists_max_agents(void **state)
{
	char bin[256];
	struct pd_run_result r;

	(void)state;
	assert_int_equal(pd_run_bin("pdbroker", bin, sizeof(bin)), 0);
	const char *argv[] = { bin, "--help", NULL };
	assert_int_equal(pd_run(argv, 10000, &r), 0);
	assert_int_equal(r.exit_code, 0);
	assert_non_null(strstr(r.out, "--max-agents N"));
	assert_non_null(strstr(r.out, "table of agent slots"));
	assert_non_null(strstr(r.out, "[1..256] (default: 32)"));
	pd_run_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_group_owns_sockets_and_segment),
		cmocka_unit_test(test_send_pool_deeper_than_a_transport_starts),
		cmocka_unit_test(test_unknown_group_refused),
		cmocka_unit_test(test_required_transport_missing_refused),
		cmocka_unit_test(test_send_pools_that_do_not_divide_refused),
		cmocka_unit_test(test_too_many_agents_refused),
		cmocka_unit_test(test_help_lists_max_agents),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
