/* SPDX-License-Identifier: MIT */
/*
 * The README's --group recipe end to end, as root: two root brokers with
 * their default rundir (/run/pdkv) and --group; a worker of another uid
 * (nobody, 65534) with that group among its supplementary groups attaches
 * to both with default settings (no rundir, no $PDKV_RUNDIR) and moves a
 * request, every byte verified; pdctl as that worker finds the brokers
 * too; a worker outside the group is refused.
 *
 * Nothing of the machine's is touched: the test runs in a mount namespace
 * of its own, with a fresh tmpfs on /run (so the brokers make /run/pdkv)
 * and an /etc/group bind-mounted from a copy that adds a group of its own.
 * Not root, or no mount namespace: it says SKIP (exit 77) and why.
 */
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "it_fixture.h"
#include "pd_rundir.h"

#define WORKER_UID 65534u
#define WORKER_GID 65534u
#define GROUP_NAME "pdkv-it"
#define RUNDIR PD_RUNDIR_SYSTEM

static gid_t group_gid;
static char skip_why[256];

/* ---- the private machine ------------------------------------------------------ */

/* A gid no group has, high up. */
static gid_t free_gid(void)
{
	for (gid_t g = 64999; g > 60000; g--)
		if (!getgrgid(g))
			return g;
	return (gid_t)-1;
}

/* /etc/group, plus "pdkv-it:x:<gid>:nobody", bind-mounted over the real one. */
static int private_group(const char *copy)
{
	char line[512];
	FILE *in = fopen("/etc/group", "re"), *out;

	group_gid = free_gid();
	if (!in || group_gid == (gid_t)-1)
		return -1;
	out = fopen(copy, "we");
	if (!out) {
		(void)fclose(in);
		return -1;
	}
	while (fgets(line, sizeof(line), in))
		(void)fputs(line, out);
	(void)fprintf(out, "%s:x:%u:nobody\n", GROUP_NAME, (unsigned int)group_gid);
	(void)fclose(in);
	if (fclose(out) != 0)
		return -1;
	return mount(copy, "/etc/group", NULL, MS_BIND, NULL);
}

/* 0, or a reason to skip in skip_why. */
static int private_machine(void)
{
	const struct group *g;

	if (geteuid() != 0) {
		(void)snprintf(skip_why, sizeof(skip_why), "needs root (a root broker, a worker "
			       "of another uid)");
		return -1;
	}
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("pdkv-it-run", "/run", "tmpfs", 0, "mode=0755") < 0) {
		(void)snprintf(skip_why, sizeof(skip_why), "no private mount namespace with a "
			       "tmpfs on /run: %s", strerror(errno));
		return -1;
	}
	if (private_group("/run/group") < 0) {
		(void)snprintf(skip_why, sizeof(skip_why), "cannot bind-mount a private "
			       "/etc/group: %s", strerror(errno));
		return -1;
	}
	g = getgrnam(GROUP_NAME);
	if (!g || g->gr_gid != group_gid) {
		(void)snprintf(skip_why, sizeof(skip_why), "the private group is not visible "
			       "through getgrnam (not resolved from /etc/group?)");
		return -1;
	}
	return 0;
}

/* ---- root brokers with their default rundir ------------------------------------ */

/* Start pdbroker NAME with no --rundir (its default: /run/pdkv, as root),
 * in a pid namespace of its own when pidns (as a container's broker). */
static void start_default(struct pd_test_broker *b, const char *tag, uint32_t send,
			  uint32_t recv, int pidns)
{
	char bin[256], sendv[16], recvv[16], path[256];
	uint64_t deadline = pd_deadline_ms(10000);
	int port = pd_test_free_port();

	assert_true(port > 0);
	assert_int_equal(pd_run_bin("pdbroker", bin, sizeof(bin)), 0);
	memset(b, 0, sizeof(*b));
	pd_test_name(b->name, sizeof(b->name), tag);
	(void)snprintf(b->rundir, sizeof(b->rundir), "%s", RUNDIR);
	(void)snprintf(b->ctrl, sizeof(b->ctrl), "tcp://127.0.0.1:%d", port);
	(void)snprintf(b->log, sizeof(b->log), "/run/%s.log", b->name); /* the private /run */
	(void)snprintf(sendv, sizeof(sendv), "%u", send);
	(void)snprintf(recvv, sizeof(recvv), "%u", recv);
	b->pid = pidns ? pd_test_fork_init() : fork();
	assert_true(b->pid >= 0);
	if (b->pid == 0) {
		const char *argv[] = { bin, "--name", b->name, "--ctrl", b->ctrl, "--data",
				       "127.0.0.1:0", "--send-slots", sendv, "--recv-slots", recvv,
				       "--slot-size", "64K", "--group", GROUP_NAME, NULL };
		int fd = open(b->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (fd >= 0)
			(void)dup2(fd, 2);
		(void)prctl(PR_SET_PDEATHSIG, SIGTERM);
		execv(bin, (char *const *)(uintptr_t)argv);
		_exit(127);
	}
	(void)snprintf(path, sizeof(path), "%s/%s.admin", b->rundir, b->name);
	while (pd_test_unix_listening(path) != 1) {
		if (pd_now_ns() >= deadline || kill(b->pid, 0) < 0) {
			pd_test_broker_dump_log(b);
			fail_msg("broker %s: no admin socket at %s", b->name, path);
		}
		(void)nanosleep(&(struct timespec){ 0, 2 * 1000 * 1000 }, NULL);
	}
}

/* ---- the worker ---------------------------------------------------------------- */

/* Become uid/gid 65534 with groups (n of them); default settings. 0 or -1. */
static int become_worker(const gid_t *groups, size_t n)
{
	if (setgroups(n, groups) < 0 || setgid(WORKER_GID) < 0 || setuid(WORKER_UID) < 0) {
		(void)fprintf(stderr, "worker: dropping to uid %u: %s\n", WORKER_UID,
			      strerror(errno));
		return -1;
	}
	if (getuid() != WORKER_UID || geteuid() != WORKER_UID || setuid(0) == 0) {
		(void)fprintf(stderr, "worker: still privileged\n");
		return -1;
	}
	(void)unsetenv("PDKV_RUNDIR");
	(void)unsetenv("PDKV_BROKER");
	return 0;
}

static int attach_default(const char *broker, uint32_t roles, struct pd_agent **a)
{
	struct pd_agent_opts o;

	pd_agent_opts_init(&o, sizeof(o));
	o.broker = broker;  /* o.rundir stays NULL */
	o.roles = roles;
	return pd_agent_attach(&o, a);
}

struct worker_arg {
	struct it *t;
	int member;         /* in the brokers' group */
};

#define CHECK(step, expr)                                                                 \
	do {                                                                              \
		int rc_ = (expr);                                                         \
		if (rc_ < 0) {                                                            \
			(void)fprintf(stderr, "worker: %s: %s\n", step, pd_strerror(rc_)); \
			return 1;                                                         \
		}                                                                         \
	} while (0)

/* The request's 4 chunks at the decode agent, byte for byte. */
static int worker_verify(struct pd_agent *da, const char *req)
{
	struct pd_recv_info info;

	CHECK("pd_recv_wait", pd_recv_wait(da, req, IT_WAIT_MS, &info));
	if (info.status != 0 || info.chunks != 4) {
		(void)fprintf(stderr, "worker: status %d, %u chunks\n", info.status, info.chunks);
		return 1;
	}
	for (uint32_t i = 0; i < 4; i++) {
		const uint8_t *d;
		uint32_t len;
		char key[48];

		it_key(key, sizeof(key), req, i);
		CHECK("pd_recv_lookup",
		      pd_recv_lookup(da, key, (uint32_t)strlen(key), (const void **)&d, &len));
		for (uint32_t k = 0; k < len; k++)
			if (len != it_len(i) || d[k] != it_byte(req, i, k)) {
				(void)fprintf(stderr, "worker: chunk %u differs\n", i);
				return 1;
			}
	}
	CHECK("pd_recv_release", pd_recv_release(da, req));
	return 0;
}

/* A member: attach to both brokers with default settings, move a request.
 * Not a member: both attaches are refused with -EACCES. */
static int worker(void *arg)
{
	struct worker_arg *w = arg;
	struct it *t = w->t;
	struct pd_agent *pa = NULL, *da = NULL;
	struct pd_event ev;
	int rc;

	if (become_worker(&group_gid, w->member ? 1 : 0) < 0)
		return 2;
	rc = attach_default(t->p.name, PD_AGENT_SEND, &pa);
	if (!w->member) {
		if (rc != -EACCES || attach_default(t->d.name, PD_AGENT_RECV, &da) != -EACCES) {
			(void)fprintf(stderr, "worker outside the group: attach %s\n",
				      pd_strerror(rc));
			return 1;
		}
		return 0;
	}
	CHECK("attach to the prefill broker", rc);
	CHECK("attach to the decode broker", attach_default(t->d.name, PD_AGENT_RECV, &da));
	CHECK("declare and put", it_put_from(t, pa, "grp-req", 0, 4, 4));
	CHECK("the request's end", it_next_end(pa, &ev, IT_WAIT_MS));
	if (ev.type != PD_EV_PUT_DONE || strcmp(ev.req_id, "grp-req") != 0) {
		(void)fprintf(stderr, "worker: event %u for %s, status %d\n", ev.type, ev.req_id,
			      ev.status);
		return 1;
	}
	rc = worker_verify(da, "grp-req");
	pd_agent_detach(pa);
	pd_agent_detach(da);
	return rc;
}

/* pdctl agents as the worker, default settings: its exit code. */
static int worker_pdctl(void *arg)
{
	const struct pd_test_broker *b = arg;
	char bin[256];

	if (pd_run_bin("pdctl", bin, sizeof(bin)) < 0 || become_worker(&group_gid, 1) < 0)
		return 100;
	if (access(bin, X_OK) < 0) {
		(void)fprintf(stderr, "worker: cannot run %s: %s\n", bin, strerror(errno));
		return 101;
	}
	if (!freopen("/dev/null", "w", stdout))
		return 103;
	execl(bin, bin, "--name", b->name, "agents", (char *)NULL); /* the admin socket */
	return 102;
}

/* ---- the tests --------------------------------------------------------------------- */

static int setup(void **state)
{
	struct it *t = calloc(1, sizeof(*t));

	if (!t)
		return -1;
	start_default(&t->d, "grpD", 0, 16, 0);
	start_default(&t->p, "grpP", 16, 0, 0);
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct it *t = *state;

	if (t) {
		(void)pd_test_broker_stop(&t->p);
		(void)pd_test_broker_stop(&t->d);
		free(t);
	}
	return 0;
}

/* What the root broker made: /run/pdkv of root and the group, mode 2750
 * (the group enters, cannot replace a socket), sockets and segment 0660. */
static void test_rundir_belongs_to_the_group(void **state)
{
	struct it *t = *state;
	char path[256];
	struct stat st;

	assert_int_equal(stat(RUNDIR, &st), 0);
	assert_int_equal(st.st_uid, 0);
	assert_int_equal(st.st_gid, group_gid);
	assert_int_equal(st.st_mode & 07777, 02750);
	(void)snprintf(path, sizeof(path), "%s/%s.sock", RUNDIR, t->d.name);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_gid, group_gid);
	assert_int_equal(st.st_mode & 0777, 0660);
	(void)snprintf(path, sizeof(path), "/dev/shm/pdkv.%s", t->d.name);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_gid, group_gid);
	assert_int_equal(st.st_mode & 0777, 0660);
}

static void test_member_with_defaults_moves_a_request(void **state)
{
	struct it *t = *state;
	struct worker_arg w = { .t = t, .member = 1 };
	pid_t pid = pd_test_fork(worker, &w);
	int rc;

	assert_true(pid > 0);
	rc = pd_test_wait(pid, 30000);
	if (rc != 0) {
		pd_test_broker_dump_log(&t->p);
		pd_test_broker_dump_log(&t->d);
		fail_msg("the worker in the group failed (exit %d)", rc);
	}
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
}

/* Brokers in pid namespaces of their own (containers) see the worker's pid
 * as 0: its supplementary group counts all the same (the kernel's record of
 * it at connect, not /proc). */
static void test_member_attaches_to_brokers_that_cannot_see_it(void **state)
{
	struct it b = { 0 };
	struct worker_arg w = { .t = &b, .member = 1 };
	pid_t pid;
	int rc;

	(void)state;
	start_default(&b.d, "grpnsD", 0, 16, 1);
	start_default(&b.p, "grpnsP", 16, 0, 1);
	pid = pd_test_fork(worker, &w);
	assert_true(pid > 0);
	rc = pd_test_wait(pid, 30000);
	if (rc != 0) {
		pd_test_broker_dump_log(&b.p);
		pd_test_broker_dump_log(&b.d);
	}
	(void)pd_test_broker_stop(&b.p);
	(void)pd_test_broker_stop(&b.d);
	assert_int_equal(rc, 0);
}

static void test_member_pdctl_with_defaults(void **state)
{
	struct it *t = *state;
	pid_t pid = pd_test_fork(worker_pdctl, &t->d);
	int rc;

	assert_true(pid > 0);
	rc = pd_test_wait(pid, 15000);
	if (rc == 101)
		skip(); /* this build's pdctl is not reachable by uid 65534 */
	assert_int_equal(rc, 0);
}

static void test_outsider_refused(void **state)
{
	struct worker_arg w = { .t = *state, .member = 0 };
	pid_t pid = pd_test_fork(worker, &w);

	assert_true(pid > 0);
	assert_int_equal(pd_test_wait(pid, 15000), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rundir_belongs_to_the_group),
		cmocka_unit_test(test_member_with_defaults_moves_a_request),
		cmocka_unit_test(test_member_attaches_to_brokers_that_cannot_see_it),
		cmocka_unit_test(test_member_pdctl_with_defaults),
		cmocka_unit_test(test_outsider_refused),
	};

	if (private_machine() < 0) {
		(void)printf("it_group: SKIP: %s\n", skip_why);
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
