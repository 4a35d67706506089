/* SPDX-License-Identifier: MIT */
/*
 * pd_segment.c and pd_segment_attach.c: create, attach, probe, reclaim and
 * destroy the broker's shared-memory segment, and the arguments they refuse.
 *
 * The fixture (names, setup, teardown) is in segment_fixture.h; the header
 * corruption matrix and file-size tampering are in test_segment_validate.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "segment_fixture.h"
#include "pd_sync.h"
#include "pd_time.h"

#define WAIT_MS 5000u /* bound on every child */

/* A pid that no process has any more (a reaped child). */
static pid_t dead_pid(void)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(0);
	assert_true(pid > 0);
	assert_int_equal(pd_test_wait(pid, WAIT_MS), 0);
	return pid;
}

/* ---- negative tests -------------------------------------------------------- */

static void test_create_null_args(void **state)
{
	struct fx *f = *state;

	assert_int_equal(pd_segment_create(NULL, &f->seg, f->err, sizeof(f->err)), -EINVAL);
	assert_true(f->err[0] != '\0');
	assert_int_equal(pd_segment_create(&f->opts, NULL, NULL, 0), -EINVAL);
	f->opts.name = NULL;
	assert_int_equal(create(f, &f->seg), -EINVAL);
	assert_int_equal(pd_segment_probe(f->name, NULL), -ENOENT);
}

static void test_create_region_too_large(void **state)
{
	struct fx *f = *state;

	f->opts.region_len[PD_REGION_SEND_ARENA] = (UINT64_C(1) << 44) + 1;
	assert_int_equal(create(f, &f->seg), -EINVAL);
	assert_non_null(strstr(f->err, "too large"));
	assert_null(f->seg.base);
	assert_int_equal(pd_segment_probe(f->name, NULL), -ENOENT);
}

/* Every entry point refuses the name before touching /dev/shm. */
static void expect_bad_name(struct fx *f, const char *name)
{
	char path[128];

	f->opts.name = name;
	if (create(f, &f->seg) != -EINVAL || f->err[0] == '\0')
		fail_msg("create accepted bad name '%s'", name);
	assert_null(f->seg.base);
	assert_int_equal(pd_segment_attach(name, 0, 0, &f->att, NULL, 0), -EINVAL);
	assert_int_equal(pd_segment_probe(name, NULL), -EINVAL);
	assert_int_equal(pd_segment_unlink(name), -EINVAL);
	assert_int_equal(pd_segment_path(name, path, sizeof(path)), -EINVAL);
}

static void test_create_bad_names(void **state)
{
	static const char *const bad[] = { "", "a/b", "/abc", "a b", " ", "a\tb", "a*", "é" };
	char too_long[PD_SHM_NAME_MAX + 2];

	for (size_t i = 0; i < PD_ARRAY_SIZE(bad); i++)
		expect_bad_name(*state, bad[i]);
	memset(too_long, 'a', sizeof(too_long) - 1);
	too_long[sizeof(too_long) - 1] = '\0';
	assert_int_equal(strlen(too_long), 64);
	expect_bad_name(*state, too_long);
}

/* The longest legal name works, and the path needs room for its NUL. */
static void test_name_boundaries(void **state)
{
	struct fx *f = *state;
	char path[sizeof(PD_SHM_PREFIX) + PD_SHM_NAME_MAX];
	size_t need;

	memset(f->name + strlen(f->name), 'x', PD_SHM_NAME_MAX - strlen(f->name));
	f->name[PD_SHM_NAME_MAX] = '\0';
	need = strlen(PD_SHM_PREFIX) + PD_SHM_NAME_MAX + 1;
	assert_int_equal(pd_segment_path(f->name, path, need - 1), -EINVAL);
	assert_int_equal(pd_segment_path(f->name, path, need), 0);
	assert_string_equal(path + strlen(PD_SHM_PREFIX), f->name);
	assert_memory_equal(path, PD_SHM_PREFIX, strlen(PD_SHM_PREFIX));
	assert_int_equal(pd_segment_path(f->name, NULL, need), -EINVAL);
	assert_int_equal(create(f, &f->seg), 0);
	assert_string_equal(f->seg.hdr->name, f->name);
}

static void test_attach_missing(void **state)
{
	struct fx *f = *state;

	assert_int_equal(attach(f, &f->att, 0, 0), -ENOENT);
	assert_true(f->err[0] != '\0');
	assert_int_equal(attach(f, &f->att, PD_SEG_RDONLY, 0), -ENOENT);
	assert_null(f->att.base);
}

static void test_attach_bad_args(void **state)
{
	struct fx *f = *state;

	assert_int_equal(pd_segment_attach(f->name, 0, 0, NULL, NULL, 0), -EINVAL);
	assert_int_equal(attach(f, &f->att, PD_SEG_FLAGS_ALL + 1, 0), -EINVAL);
	assert_int_equal(attach(f, &f->att, ~0u, 0), -EINVAL);
	assert_int_equal(pd_segment_attach_fd(-1, 0, 0, &f->att, NULL, 0), -EINVAL);
	assert_int_equal(pd_segment_attach_fd(f->seg.fd, 0x80, 0, &f->att, NULL, 0), -EINVAL);
	assert_int_equal(pd_segment_attach_fd(f->seg.fd, 0, 0, NULL, NULL, 0), -EINVAL);
	assert_null(f->att.base);
	/* The segment itself is fine. */
	assert_int_equal(attach(f, &f->att, 0, 0), 0);
}

static void test_region_bad_args(void **state)
{
	struct fx *f = *state;
	size_t len = 1;

	assert_null(pd_segment_region(NULL, PD_REGION_CONTROL, &len));
	assert_null(pd_segment_region(&f->seg, PD_REGION_MAX, &len));
	assert_null(pd_segment_region(&f->seg, UINT32_MAX, NULL));
	/* Region 7 is absent. */
	assert_null(pd_segment_region(&f->seg, PD_REGION_MAX - 1, &len));
	assert_int_equal(len, 0);
}

/* A file at the name that is no pdkv segment is never removed. */
static void test_create_refuses_foreign_file(void **state)
{
	static const off_t sizes[] = { 0, 100, PAGE };
	struct fx *f = *state;
	int fd = open_file(f->name, O_RDWR | O_CREAT | O_EXCL);

	assert_true(fd >= 0);
	for (size_t i = 0; i < PD_ARRAY_SIZE(sizes); i++) {
		assert_int_equal(ftruncate(fd, sizes[i]), 0);
		assert_int_equal(create(f, &f->seg), -EEXIST);
		assert_non_null(strstr(f->err, "not a pdkv segment"));
		assert_null(f->seg.base);
		assert_int_equal(pd_segment_probe(f->name, NULL), -EPROTO);
	}
	assert_int_equal(attach(f, &f->att, 0, 0), -EPROTO);
	(void)close(fd);
	fd = open_file(f->name, O_RDONLY);
	assert_true(fd >= 0);
	(void)close(fd);
}

/* ---- positive tests -------------------------------------------------------- */

static uint64_t region_align(uint32_t id)
{
	return id == PD_REGION_SEND_ARENA || id == PD_REGION_RECV_ARENA ? PD_ARENA_ALIGN
									 : PD_REGION_ALIGN;
}

static void check_region_layout(const struct pd_segment *s, uint32_t id)
{
	const struct pd_shm_region *r = &s->hdr->regions[id];
	uint64_t want = fx_region_len()[id];
	size_t len = 1;
	void *p = pd_segment_region(s, id, &len);

	assert_int_equal(r->len, want);
	assert_int_equal(len, want);
	assert_memory_equal(&s->regions[id], r, sizeof(*r));
	if (!want) {
		assert_null(p);
		return;
	}
	assert_int_equal(r->off % region_align(id), 0);
	assert_true(r->off >= PD_SHM_HDR_SIZE);
	assert_true(r->off + r->len <= s->len);
	assert_ptr_equal(p, (uint8_t *)s->base + r->off);
}

static void check_hdr_ident(const struct fx *f, const struct pd_shm_hdr *h)
{
	uint64_t ticks = 0;

	assert_int_equal(h->magic, PD_SHM_MAGIC);
	assert_int_equal(h->abi_major, PD_SHM_ABI_MAJOR);
	assert_int_equal(h->abi_minor, PD_SHM_ABI_MINOR);
	assert_int_equal(h->hdr_size, PD_SHM_HDR_SIZE);
	assert_int_equal(h->compat_features, PD_SHM_COMPAT_KNOWN);
	/* No arena file here (none asked for, or no hugetlb pages): it_pages
	 * covers the segment with one. */
	assert_int_equal(h->incompat_features & ~PD_SHM_INCOMPAT_ARENA_FILE, 0);
	assert_int_equal(h->broker_pid, getpid());
	assert_int_equal(pd_pid_start_time(getpid(), &ticks), 0);
	assert_int_equal(h->broker_start_ticks, ticks);
	assert_int_equal(h->epoch, f->opts.epoch);
	assert_string_equal(h->name, f->name);
}

static void test_create_header(void **state)
{
	struct fx *f = *state;
	struct pd_shm_hdr *h = f->seg.hdr;
	struct timespec now;
	struct stat st;

	assert_ptr_equal(f->seg.hdr, f->seg.base);
	assert_int_equal(f->seg.owner, 1);
	assert_string_equal(f->seg.name, f->name);
	check_hdr_ident(f, h);
	assert_int_equal(atomic_load(&h->state), PD_SHM_INITIALIZING);
	assert_int_equal(clock_gettime(CLOCK_REALTIME, &now), 0);
	assert_true(h->broker_start_ns <= (uint64_t)now.tv_sec * PD_NS_PER_S + now.tv_nsec);
	assert_true(h->broker_start_ns + 60 * PD_NS_PER_S > (uint64_t)now.tv_sec * PD_NS_PER_S);
	assert_int_equal(h->total_size, f->seg.len);
	assert_int_equal(h->total_size % PAGE, 0);
	assert_int_equal(fstat(f->seg.fd, &st), 0);
	assert_int_equal(st.st_size, h->total_size);
	for (uint32_t i = 0; i < PD_REGION_MAX; i++)
		check_region_layout(&f->seg, i);
	for (uint32_t i = 0; i < PD_STAT_MAX; i++)
		assert_int_equal(atomic_load(&h->stats[i]), 0);
	assert_int_equal(validate(f, h, f->seg.len), 0);
}

static void test_attach_initializing_times_out(void **state)
{
	struct fx *f = *state;
	uint64_t t0 = pd_now_ns();

	assert_int_equal(attach(f, &f->att, 0, 50), -ETIMEDOUT);
	assert_true(pd_now_ns() - t0 >= 50 * PD_NS_PER_MS);
	assert_true(f->err[0] != '\0');
	assert_int_equal(attach(f, &f->att, PD_SEG_RDONLY, 0), -ETIMEDOUT);
	assert_null(f->att.base);
	pd_segment_publish(&f->seg);
	assert_int_equal(attach(f, &f->att, PD_SEG_RDONLY, 0), 0);
}

/* a sees what b sees: same regions, same bytes. */
static void check_same_segment(const struct pd_segment *a, const struct pd_segment *b)
{
	assert_int_equal(a->len, b->len);
	assert_string_equal(a->name, b->name);
	for (uint32_t i = 0; i < PD_REGION_MAX; i++) {
		size_t la = 0, lb = 1;
		uint8_t *pa = pd_segment_region(a, i, &la);
		uint8_t *pb = pd_segment_region(b, i, &lb);

		assert_int_equal(la, lb);
		assert_true((pa == NULL) == (pb == NULL));
		if (pa)
			assert_int_equal(pa - (uint8_t *)a->base, pb - (uint8_t *)b->base);
	}
}

static void test_attach_rw_and_rdonly(void **state)
{
	struct fx *f = *state;
	uint8_t *ctl;

	assert_int_equal(attach(f, &f->att, 0, 100), 0);
	assert_int_equal(f->att.owner, 0);
	assert_int_equal(f->att.flags, 0);
	check_same_segment(&f->seg, &f->att);
	ctl = pd_segment_region(&f->att, PD_REGION_CONTROL, NULL);
	ctl[0] = 0xa5;
	assert_int_equal(*(uint8_t *)pd_segment_region(&f->seg, PD_REGION_CONTROL, NULL), 0xa5);

	assert_int_equal(attach(f, &f->att2, PD_SEG_RDONLY, 100), 0);
	assert_int_equal(f->att2.flags, PD_SEG_RDONLY);
	check_same_segment(&f->seg, &f->att2);
	assert_int_equal(*(uint8_t *)pd_segment_region(&f->att2, PD_REGION_CONTROL, NULL),
			 0xa5);
	assert_int_equal(atomic_load(&f->att2.hdr->state), PD_SHM_READY);
}

/* Child: store into the control region; the default SIGSEGV action must
 * kill it (ASan's handler would turn the fault into exit(1)). */
static int child_write_control(void *arg)
{
	volatile uint8_t *p = pd_segment_region(arg, PD_REGION_CONTROL, NULL);

	if (!p)
		return 2;
	(void)signal(SIGSEGV, SIG_DFL);
	*p = 0x5a;
	return 0;
}

static int run_writer(struct pd_segment *s)
{
	pid_t pid = pd_test_fork(child_write_control, s);

	assert_true(pid > 0);
	return pd_test_wait(pid, WAIT_MS);
}

static void test_rdonly_mapping_faults(void **state)
{
	struct fx *f = *state;

	assert_int_equal(attach(f, &f->att, PD_SEG_RDONLY, 100), 0);
	assert_int_equal(attach(f, &f->att2, 0, 100), 0);
	/* The same store through a writable mapping works (and is shared). */
	assert_int_equal(run_writer(&f->att2), 0);
	assert_int_equal(*(uint8_t *)pd_segment_region(&f->seg, PD_REGION_CONTROL, NULL), 0x5a);
	assert_int_equal(run_writer(&f->att), 128 + SIGSEGV);
}

static void test_attach_fd(void **state)
{
	struct fx *f = *state;
	int fd;

	assert_int_equal(pd_segment_attach_fd(f->seg.fd, 0, 0, &f->att, f->err,
					      sizeof(f->err)), 0);
	assert_true(f->att.fd >= 0);
	assert_int_not_equal(f->att.fd, f->seg.fd);
	check_same_segment(&f->seg, &f->att);
	pd_segment_destroy(&f->att);
	assert_true(fcntl(f->seg.fd, F_GETFD) >= 0); /* the caller's fd stays open */

	/* The attachment keeps its own fd: closing ours does not matter. */
	fd = open_file(f->name, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pd_segment_attach_fd(fd, PD_SEG_RDONLY, 0, &f->att, NULL, 0), 0);
	(void)close(fd);
	assert_true(fcntl(f->att.fd, F_GETFD) >= 0);
	check_same_segment(&f->seg, &f->att);
}

/* Tolerated: unknown compat features, a newer minor, any known state. */
static void test_attach_accepts_compatible(void **state)
{
	struct fx *f = *state;
	struct pd_shm_hdr *h = f->seg.hdr;

	h->compat_features |= lowest_unknown_bit(PD_SHM_COMPAT_KNOWN);
	h->abi_minor++;
	pd_segment_set_state(&f->seg, PD_SHM_DRAINING);
	assert_int_equal(attach(f, &f->att, 0, 0), 0);
	assert_int_equal(atomic_load(&f->att.hdr->state), PD_SHM_DRAINING);
}

static void test_create_live_name(void **state)
{
	struct fx *f = *state;
	int32_t pid = 0;

	assert_int_equal(create(f, &f->next), -EEXIST);
	assert_non_null(strstr(f->err, "already running"));
	assert_null(f->next.base);
	/* The live segment is untouched. */
	assert_int_equal(pd_segment_probe(f->name, &pid), 1);
	assert_int_equal(pid, getpid());
	assert_int_equal(f->seg.hdr->magic, PD_SHM_MAGIC);
	pd_segment_publish(&f->seg);
	assert_int_equal(attach(f, &f->att, 0, 0), 0);
}

/* A new create reclaims the stale segment now at f->name. */
static void expect_reclaimed(struct fx *f, int32_t dead)
{
	int32_t pid = 0;

	assert_int_equal(pd_segment_probe(f->name, &pid), 0);
	assert_int_equal(pid, dead);
	assert_int_equal(create(f, &f->next), 0);
	check_hdr_ident(f, f->next.hdr);
	assert_int_equal(atomic_load(&f->next.hdr->state), PD_SHM_INITIALIZING);
	assert_int_equal(pd_segment_probe(f->name, &pid), 1);
	assert_int_equal(pid, getpid());
}

/* Child: create the segment and exit without destroying it. */
static int child_create_and_exit(void *arg)
{
	struct fx *f = arg;
	struct pd_segment s;

	return pd_segment_create(&f->opts, &s, NULL, 0) == 0 ? 0 : 1;
}

static void test_create_reclaims_dead_child(void **state)
{
	struct fx *f = *state;
	pid_t pid = pd_test_fork(child_create_and_exit, f);

	assert_true(pid > 0);
	assert_int_equal(pd_test_wait(pid, WAIT_MS), 0);
	expect_reclaimed(f, pid);
}

/* The broker "dies" while this process keeps its mapping: its lock goes. */
static void drop_lock(struct pd_segment *s)
{
	assert_true(s->lock_fd >= 0);
	(void)close(s->lock_fd);
	s->lock_fd = -1;
}

/* Whatever the header says, a broker holding its lock lives: a faked pid
 * (a dead one, or ours with another start time), state DEAD and another
 * epoch neither make it stale nor let a create remove its segment. */
static void test_faked_header_is_not_death(void **state)
{
	struct fx *f = *state;
	struct pd_shm_hdr *h = f->seg.hdr;
	char want[128];
	int32_t pid = 0;

	h->broker_pid = dead_pid();
	pd_segment_set_state(&f->seg, PD_SHM_DEAD);
	h->epoch++;
	assert_int_equal(pd_segment_probe(f->name, &pid), 1);
	assert_int_equal(pid, getpid()); /* the lock's holder, not the header's pid */
	assert_int_equal(create(f, &f->next), -EEXIST);
	(void)snprintf(want, sizeof(want), "already running (pid %d)", (int)getpid());
	if (!strstr(f->err, want))
		fail_msg("'%s' not in '%s'", want, f->err);
	h->broker_pid = (int32_t)getpid();
	h->broker_start_ticks++; /* a reused pid, as the old check saw it */
	assert_int_equal(pd_segment_probe(f->name, NULL), 1);
	assert_int_equal(create(f, &f->next), -EEXIST);
	/* The live segment is still the name's. */
	assert_int_equal(attach(f, &f->att, 0, 0), 0);
	check_same_segment(&f->seg, &f->att);
}

/* Without its lock the segment is stale, whatever its header says. */
static void test_create_reclaims_released_lock(void **state)
{
	struct fx *f = *state;

	drop_lock(&f->seg);
	expect_reclaimed(f, getpid()); /* the header's pid: ours, and alive */
}

/* A prober holds the lock for an instant: neither it nor a reclaimer
 * holding it meanwhile makes a dead segment look alive for long. */
static void test_create_waits_out_a_prober(void **state)
{
	struct fx *f = *state;
	int fd;

	drop_lock(&f->seg);
	fd = open_file(f->name, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_SH | LOCK_NB), 0);
	assert_int_equal(pd_segment_probe(f->name, NULL), 0);
	assert_int_equal(create(f, &f->next), -EEXIST); /* held as long as the create waits */
	assert_non_null(strstr(f->err, "already running"));
	assert_int_equal(flock(fd, LOCK_UN), 0);
	(void)close(fd);
	expect_reclaimed(f, getpid());
}

/* Child: create the segment, say so on the pipe, live until it closes. */
static int child_create_and_wait(void *arg)
{
	struct fx *f = arg;
	struct pd_segment s;
	char c = 0;
	int rc = pd_segment_create(&f->opts, &s, NULL, 0);

	(void)close(f->pipe[0]);
	(void)close(f->pipe[3]); /* else our own copy keeps the read below from seeing EOF */
	if (rc == 0)
		pd_segment_set_state(&s, PD_SHM_READY);
	if (rc == 0 && write(f->pipe[1], "1", 1) != 1)
		rc = -EIO;
	(void)!read(f->pipe[2], &c, 1);
	return rc == 0 ? 0 : 1;
}

/* The pid reported is the holder's, found by the kernel, even when the
 * header names this process. */
static void test_probe_names_the_holder(void **state)
{
	struct fx *f = *state;
	int32_t pid = 0;
	int up[2], down[2];
	pid_t child;
	char c;

	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	f->pipe[0] = up[0], f->pipe[1] = up[1], f->pipe[2] = down[0], f->pipe[3] = down[1];
	child = pd_test_fork(child_create_and_wait, f);
	assert_true(child > 0);
	(void)close(up[1]);
	(void)close(down[0]);
	assert_int_equal(read(up[0], &c, 1), 1);
	assert_int_equal(attach(f, &f->att, 0, 0), 0);
	f->att.hdr->broker_pid = (int32_t)getpid();
	assert_int_equal(pd_segment_probe(f->name, &pid), 1);
	assert_int_equal(pid, child);
	(void)close(down[1]); /* the child exits: its lock goes with it */
	assert_int_equal(pd_test_wait(child, WAIT_MS), 0);
	(void)close(up[0]);
	assert_int_equal(pd_segment_probe(f->name, &pid), 0);
	assert_int_equal(pid, getpid()); /* now the header's word */
}

static void test_probe(void **state)
{
	struct fx *f = *state;
	int32_t pid = 0;

	assert_int_equal(pd_segment_probe(f->name, &pid), -ENOENT);
	assert_int_equal(create(f, &f->seg), 0);
	assert_int_equal(pd_segment_probe(f->name, &pid), 1);
	assert_int_equal(pid, getpid());
	assert_int_equal(pd_segment_probe(f->name, NULL), 1);
	f->seg.hdr->broker_pid = dead_pid();
	assert_int_equal(pd_segment_probe(f->name, &pid), 1);
	assert_int_equal(pid, getpid());
	drop_lock(&f->seg);
	assert_int_equal(pd_segment_probe(f->name, &pid), 0);
	assert_int_equal(pid, f->seg.hdr->broker_pid);
	pd_segment_destroy(&f->seg);
	assert_int_equal(pd_segment_probe(f->name, &pid), -ENOENT);
}

static void test_destroy_unlinks(void **state)
{
	struct fx *f = *state;

	assert_int_equal(attach(f, &f->att, 0, 0), 0);
	assert_int_equal(attach(f, &f->att2, 0, 0), 0);
	pd_segment_destroy(&f->att2); /* an attacher does not unlink */
	assert_null(f->att2.base);
	assert_int_equal(pd_segment_probe(f->name, NULL), 1);

	pd_segment_destroy(&f->seg);
	assert_null(f->seg.base);
	assert_null(f->seg.hdr);
	assert_int_equal(f->seg.fd, -1);
	assert_int_equal(atomic_load(&f->att.hdr->state), PD_SHM_DEAD);
	assert_int_equal(attach(f, &f->att2, 0, 0), -ENOENT);
	assert_int_equal(pd_segment_unlink(f->name), -ENOENT);
	pd_segment_destroy(&f->seg); /* twice */
	pd_segment_destroy(NULL);
}

/* Field 22 of /proc/self/stat, parsed after the last ')'. */
static uint64_t proc_self_starttime(void)
{
	char buf[2048], *tok, *save = NULL;
	FILE *fp = fopen("/proc/self/stat", "r");
	size_t n;

	assert_non_null(fp);
	n = fread(buf, 1, sizeof(buf) - 1, fp);
	(void)fclose(fp);
	buf[n] = '\0';
	tok = strrchr(buf, ')');
	assert_non_null(tok);
	tok = strtok_r(tok + 1, " ", &save); /* field 3 */
	for (int field = 3; tok && field < 22; field++)
		tok = strtok_r(NULL, " ", &save);
	assert_non_null(tok);
	return strtoull(tok, NULL, 10);
}

static void test_pid_start_time(void **state)
{
	char old[17] = "", odd[] = "a) b (c) d";
	uint64_t ticks = 0;

	(void)state;
	assert_int_equal(prctl(PR_GET_NAME, old), 0);
	/* A command name with spaces and parentheses must not confuse it. */
	assert_int_equal(prctl(PR_SET_NAME, odd), 0);
	assert_int_equal(pd_pid_start_time(getpid(), &ticks), 0);
	assert_int_equal(prctl(PR_SET_NAME, old), 0);
	assert_true(ticks > 0);
	assert_int_equal(ticks, proc_self_starttime());
	assert_true(pd_pid_start_time(dead_pid(), &ticks) < 0);
	assert_int_equal(pd_pid_start_time(0, &ticks), -EINVAL);
	assert_int_equal(pd_pid_start_time(getpid(), NULL), -EINVAL);
}

/* ---- main ------------------------------------------------------------------ */

#define T(fn, set) cmocka_unit_test_setup_teardown(fn, set, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		/* negative */
		T(test_create_null_args, setup),
		T(test_create_bad_names, setup),
		T(test_create_region_too_large, setup),
		T(test_name_boundaries, setup),
		T(test_attach_missing, setup),
		T(test_attach_bad_args, setup_published),
		T(test_region_bad_args, setup_created),
		T(test_create_refuses_foreign_file, setup),
		/* positive */
		T(test_create_header, setup_created),
		T(test_attach_initializing_times_out, setup_created),
		T(test_attach_rw_and_rdonly, setup_published),
		T(test_rdonly_mapping_faults, setup_published),
		T(test_attach_fd, setup_published),
		T(test_attach_accepts_compatible, setup_published),
		T(test_create_live_name, setup_created),
		T(test_create_reclaims_dead_child, setup),
		T(test_faked_header_is_not_death, setup_published),
		T(test_create_reclaims_released_lock, setup_created),
		T(test_create_waits_out_a_prober, setup_created),
		T(test_probe_names_the_holder, setup),
		T(test_probe, setup),
		T(test_destroy_unlinks, setup_published),
		cmocka_unit_test(test_pid_start_time),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
