/* SPDX-License-Identifier: MIT */
/*
 * The staging arenas' pages. An agent's first copies take no page faults:
 * a prefill agent writes every page of its loans, a decode agent reads
 * every page of its chunks, with at most a handful of faults where one
 * per 4 KiB page would be taken if the arena were not mapped at attach.
 *
 * --hugepages, in a mount namespace of this test's own (root only) with a
 * tmpfs of its own on /dev/shm: "on" refuses to start on a mount without
 * huge pages, naming how many it needs and why there are none; on one
 * mounted huge=within_size the arenas are in 2 MiB pages (what pdctl
 * status says), a request moves byte for byte, and "off" keeps 4 KiB.
 */
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <unistd.h>

#include "it_fixture.h"
#include "pd_hugetlb.h"
#include "pd_pages.h"
#include "pd_run.h"
#include "pd_stats.h"

#define SLOTS 64u
#define PAGES_PER_SLOT (IT_SLOT / 4096u)
#ifdef __SANITIZE_ADDRESS__
#define FAULTS_MAX (SLOTS * PAGES_PER_SLOT / 4)  /* + ASan's shadow: a page per 8 */
#else
#define FAULTS_MAX (SLOTS * PAGES_PER_SLOT / 16)
#endif

static uint64_t minor_faults(void)
{
	struct rusage ru;

	assert_int_equal(getrusage(RUSAGE_THREAD, &ru), 0);
	return (uint64_t)ru.ru_minflt;
}

/* ---- no faults in the first copies ------------------------------------------- */

static void test_first_copies_take_no_faults(void **state)
{
	struct it *t = it_start(SLOTS, SLOTS);
	pd_slot_ref r[SLOTS];
	uint64_t f0, writes, reads;

	(void)state;
	assert_int_equal(it_declare_on(t, t->pa, "pf", SLOTS), 0);
	assert_int_equal(pd_alloc(t->pa, "pf", SLOTS, r, IT_WAIT_MS), 0);
	f0 = minor_faults();
	for (uint32_t i = 0; i < SLOTS; i++) /* every page of every loan */
		memset(pd_slot_data(t->pa, r[i]), 0x5a, IT_SLOT);
	writes = minor_faults() - f0;
	assert_int_equal(pd_slot_release(t->pa, r, SLOTS), 0);
	assert_int_equal(it_stage(t, t->pa, "pf", 0, SLOTS, SLOTS, IT_WAIT_MS), 0);
	it_expect_event(t, "pf", PD_EV_PUT_DONE);
	f0 = minor_faults();
	it_verify(t, "pf", SLOTS); /* reads every byte of every chunk */
	reads = minor_faults() - f0;
	assert_int_equal(pd_recv_release(t->da, "pf"), 0);
	(void)printf("  faults: %llu writing %u pages of loans, %llu reading about as many "
		     "of chunks\n", (unsigned long long)writes, SLOTS * PAGES_PER_SLOT,
		     (unsigned long long)reads);
	assert_true(writes < FAULTS_MAX);
	assert_true(reads < FAULTS_MAX);
	it_stop(t, 0);
}

/* ---- --hugepages on a /dev/shm of our own -------------------------------------- */

static int in_private_ns;

/* A fresh tmpfs with huge=mode on /dev/shm (over the last one). */
static void shm_mount(const char *mode)
{
	char opts[64];

	if (!in_private_ns)
		skip();
	(void)snprintf(opts, sizeof(opts), "mode=1777,size=256m,huge=%s", mode);
	if (mount("pdkv-it-pages", "/dev/shm", "tmpfs", 0, opts) < 0)
		fail_msg("mount tmpfs %s on /dev/shm: %s", opts, strerror(errno));
}

static void shm_umount(void)
{
	assert_int_equal(umount2("/dev/shm", MNT_DETACH), 0);
}

static int shm_empty(void)
{
	struct pd_run_result r;
	const char *argv[] = { "/bin/sh", "-c", "ls -A /dev/shm", NULL };
	int empty;

	assert_int_equal(pd_run(argv, 5000, &r), 0);
	empty = r.out_len == 0;
	if (!empty)
		(void)printf("  left in /dev/shm: %s\n", r.out);
	pd_run_free(&r);
	return empty;
}

/* What the broker's statistics say the arenas' pages are. */
static uint32_t page_size_of(const struct pd_test_broker *b)
{
	struct pd_stats *copy = malloc(sizeof(*copy));
	struct pd_segment seg;
	struct pd_shm s;
	uint32_t page = 0;

	assert_non_null(copy);
	assert_int_equal(pd_segment_attach(b->name, PD_SEG_RDONLY, 1000, &seg, NULL, 0), 0);
	assert_int_equal(pd_layout_open(&seg, &s, NULL, 0), 0);
	for (int i = 0; i < 200 && page == 0; i++) { /* the first publish */
		if (pd_stats_snapshot(s.stats, copy) == 0)
			page = copy->info.page_size;
		if (page == 0)
			(void)nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	}
	pd_layout_close(&s);
	free(copy);
	return page;
}

static void test_on_refused_without_huge_pages(void **state)
{
	struct pd_run_result r;
	char bin[256], ctrl[64], dir[] = "/tmp/pdkv-it-pages-XXXXXX";
	const char *argv[] = { bin, "--name", "pdkv-it-nohuge", "--rundir", dir,
			       "--ctrl", ctrl, "--data", "127.0.0.1:0",
			       "--slot-size", "64K", "--send-slots", "64", "--recv-slots", "64",
			       "--hugepages", "on", NULL };

	(void)state;
	if (pd_hugetlb_free_pages() >= 4) { /* "on" would take them (it_hugetlb) */
		(void)printf("  hugetlb pages are free here: nothing to refuse\n");
		skip();
	}
	shm_mount("never");
	assert_non_null(mkdtemp(dir));
	(void)snprintf(ctrl, sizeof(ctrl), "tcp://127.0.0.1:%d", pd_test_free_port());
	assert_int_equal(pd_run_bin("pdbroker", bin, sizeof(bin)), 0);
	assert_int_equal(pd_run(argv, 10000, &r), 0);
	(void)printf("  pdbroker said: %s", r.err);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "--hugepages on"));
	assert_non_null(strstr(r.err, "need 4 huge pages of 2 MiB")); /* 2 x 64 x 64 KiB */
	assert_non_null(strstr(r.err, "huge=never"));
	pd_run_free(&r);
	assert_true(shm_empty());
	assert_int_equal(rmdir(dir), 0); /* nothing left in it either */
	shm_umount();
}

static void run_with(const char *mode, uint32_t want_page)
{
	const char *const extra[] = { "--hugepages", mode, NULL };
	struct it *t;
	struct pd_run_result r;
	char bin[256], want[64];

	t = it_start_opts(&(struct it_opts){ .send_slots = SLOTS, .recv_slots = SLOTS,
					     .p_extra = extra, .d_extra = extra });
	assert_int_equal(page_size_of(&t->p), want_page);
	assert_int_equal(page_size_of(&t->d), want_page);
	assert_int_equal(it_put(t, "hp", 0, SLOTS, SLOTS), 0);
	it_expect_event(t, "hp", PD_EV_PUT_DONE);
	it_verify(t, "hp", SLOTS);
	assert_int_equal(pd_recv_release(t->da, "hp"), 0);
	assert_int_equal(pd_run_bin("pdctl", bin, sizeof(bin)), 0);
	{
		const char *argv[] = { bin, "--rundir", t->d.rundir, "--name", t->d.name, "status",
				       NULL };

		assert_int_equal(pd_run(argv, 10000, &r), 0);
	}
	(void)snprintf(want, sizeof(want), "pages %s", want_page == PD_HUGE_PAGE ? "2.0 MiB" :
										"4.0 KiB");
	if (!strstr(r.out, want))
		fail_msg("pdctl status does not say '%s':\n%s", want, r.out);
	pd_run_free(&r);
	it_stop(t, 0);
	assert_true(shm_empty());
}

static void test_on_given_huge_pages(void **state)
{
	(void)state;
	shm_mount("within_size");
	run_with("on", PD_HUGE_PAGE);
	shm_umount();
}

static void test_off_keeps_small_pages(void **state)
{
	(void)state;
	shm_mount("within_size");
	run_with("off", 4096);
	shm_umount();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_first_copies_take_no_faults),
		cmocka_unit_test(test_on_refused_without_huge_pages),
		cmocka_unit_test(test_on_given_huge_pages),
		cmocka_unit_test(test_off_keeps_small_pages),
	};

	/* A mount namespace of our own, so the tmpfs mounts are nobody else's;
	 * the rundirs stay in /tmp. Without it the --hugepages tests skip. */
	if (geteuid() == 0 && access("/sys/kernel/mm/transparent_hugepage", F_OK) == 0 &&
	    unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0)
		in_private_ns = 1;
	else
		(void)printf("it_pages: the --hugepages tests skip: they need root, transparent "
			     "huge pages and a mount namespace\n");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
