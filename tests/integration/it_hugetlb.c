/* SPDX-License-Identifier: MIT */
/*
 * The staging arenas in hugetlb pages (pd_hugetlb.h), with the kernel's
 * pool raised for the test and put back after it (root only: otherwise
 * SKIP, exit 77, and why).
 *
 * With enough free pages, --hugepages auto takes them: while the brokers
 * run, the pool has exactly their arenas' pages fewer free, pdctl status
 * says "pages 2.0 MiB", and a request moves byte for byte over TCP and
 * over shm (where the sender maps the receiver's arena file through
 * /proc/<pid>/fd); once they stop, every page is back in the pool.
 * With too few, auto falls back and says why, taking none. A receiver in a
 * pid namespace of its own cannot be mapped so: shm falls back to tcp.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "it_scenarios.h"
#include "pd_hugetlb.h"
#include "pd_run.h"

#define NR_PATH "/proc/sys/vm/nr_hugepages"
#define EXTRA   16 /* pages added to the pool */

static int64_t nr_orig = -1;

static int64_t read_nr(void)
{
	return pd_test_read_num(NR_PATH, -1);
}

static int write_nr(int64_t n)
{
	return pd_test_write_num(NR_PATH, n);
}

static void restore_pool(void)
{
	if (nr_orig >= 0)
		(void)write_nr(nr_orig);
	nr_orig = -1;
}

/* A child that puts the pool back once this process is gone however it
 * ends (SIGKILL by a runner's timeout too, which atexit does not see):
 * the pipe's write end closes with the last of us (close-on-exec, so
 * the brokers do not hold it). */
static void guard_pool(void)
{
	int fds[2];
	pid_t pid;
	char c;

	if (pipe2(fds, O_CLOEXEC) < 0)
		return;
	pid = fork();
	if (pid == 0) {
		(void)close(fds[1]);
		while (read(fds[0], &c, 1) > 0)
			;
		(void)write_nr(nr_orig);
		_exit(0);
	}
	(void)close(fds[0]); /* fds[1] stays open as long as this process */
}

/* The pool's free pages settle within a moment of a broker's exit. */
static int64_t wait_free(int64_t want)
{
	int64_t n = pd_hugetlb_free_pages();

	for (int i = 0; i < 100 && n != want; i++) {
		(void)nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
		n = pd_hugetlb_free_pages();
	}
	return n;
}

static void expect_pdctl_pages(const struct pd_test_broker *b, const char *want)
{
	char bin[256];
	struct pd_run_result r;
	const char *argv[] = { bin, "--rundir", b->rundir, "--name", b->name, "status", NULL };

	assert_int_equal(pd_run_bin("pdctl", bin, sizeof(bin)), 0);
	assert_int_equal(pd_run(argv, 10000, &r), 0);
	if (!strstr(r.out, want))
		fail_msg("pdctl status does not say '%s':\n%s", want, r.out);
	pd_run_free(&r);
}

/* 2P1D, 16 send slots of 64 KiB (one huge page) per prefill broker and 20
 * recv slots (one page): three pages in all. */
static void move_in_hugetlb(const struct it_xport *x)
{
	int64_t free0 = pd_hugetlb_free_pages();
	struct it *t = it_xstart(x, 16, 20, 2, NULL);

	assert_int_equal(pd_hugetlb_free_pages(), free0 - 3);
	assert_true(pd_test_broker_log_has(&t->d, "staging arenas in 2 MiB hugetlb pages"));
	expect_pdctl_pages(&t->d, "pages 2.0 MiB");
	expect_pdctl_pages(&t->p, "pages 2.0 MiB");
	it_scn_2p1d_on(t, x);
	it_stop(t, 0);
	assert_int_equal(wait_free(free0), free0); /* nothing kept */
}

static void test_tcp_in_hugetlb_pages(void **state)
{
	static const struct it_xport tcp = IT_XPORT_TCP;

	(void)state;
	move_in_hugetlb(&tcp);
}

static void test_shm_maps_the_peers_hugetlb_arena(void **state)
{
	static const struct it_xport shm = IT_XPORT_SHM;

	(void)state;
	move_in_hugetlb(&shm);
}

/* 256 recv slots of 64 KiB need 8 pages: with 4 free, auto takes none,
 * logs why, and still moves a request. */
static void test_auto_falls_back_when_the_pool_is_short(void **state)
{
	int64_t free0;
	struct it *t;

	(void)state;
	assert_int_equal(write_nr(read_nr() - pd_hugetlb_free_pages() + 4), 0);
	free0 = wait_free(4);
	assert_int_equal(free0, 4);
	t = it_start(16, 256);
	assert_int_equal(pd_hugetlb_free_pages(), 4 - 1); /* the prefill broker's one page */
	assert_true(pd_test_broker_log_has(&t->d, "4 free hugetlb pages of 2 MiB, 8 needed"));
	assert_int_equal(it_put(t, "fb", 0, 8, 8), 0);
	it_expect_event(t, "fb", PD_EV_PUT_DONE);
	it_verify(t, "fb", 8);
	assert_int_equal(pd_recv_release(t->da, "fb"), 0);
	it_stop(t, 0);
	assert_int_equal(wait_free(4), 4);
	assert_int_equal(write_nr(nr_orig + EXTRA), 0);
}

/* The decode broker in a pid namespace of its own (a container): its
 * hugetlb arena has no name, and its fd cannot be opened through /proc from
 * the prefill broker's namespace, so the pair falls back to tcp and says
 * why, and the request moves all the same. */
static void test_shm_falls_back_to_tcp_across_pid_namespaces(void **state)
{
	struct it *t;
	char x[256], why[256];

	(void)state;
	t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 20,
					      .transport = "shm,tcp", .d_pidns = 1 });
	assert_true(pd_test_broker_log_has(&t->d, "staging arenas in 2 MiB hugetlb pages"));
	it_move(t, "ns", 1, 4);
	it_peer_xport(&t->p, x, why, sizeof(x));
	assert_string_equal(x, "tcp");
	if (!strstr(why, "not visible in this pid namespace"))
		fail_msg("why: %s", why);
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tcp_in_hugetlb_pages),
		cmocka_unit_test(test_shm_maps_the_peers_hugetlb_arena),
		cmocka_unit_test(test_shm_falls_back_to_tcp_across_pid_namespaces),
		cmocka_unit_test(test_auto_falls_back_when_the_pool_is_short),
	};
	int rc;

	nr_orig = geteuid() == 0 ? read_nr() : -1;
	(void)atexit(restore_pool); /* also after a failed assertion's exit */
	if (nr_orig < 0 || write_nr(nr_orig + EXTRA) < 0 ||
	    pd_hugetlb_free_pages() < EXTRA) {
		restore_pool();
		(void)printf("it_hugetlb: skipped: needs root and a kernel that gives %d more 2 MiB "
			     "hugetlb pages to %s\n", EXTRA, NR_PATH);
		return 77;
	}
	guard_pool();
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	restore_pool();
	return rc;
}
