/* SPDX-License-Identifier: MIT */
/*
 * shm transport (broker/pd_shmx*.c) against real segments made with
 * pd_layout_create() in this process: the connect checks (geometry,
 * epoch, name, state, a missing segment), copies landing byte for byte in
 * the right slot and nowhere else, bounds, disconnect with copies in
 * flight, a peer's segment replaced, and idle data threads asleep.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "pd_layout.h"
#include "pd_shmx.h"
#include "pd_test.h"
#include "pd_time.h"

#define KIB     1024u
#define MIB     (1024u * 1024u)
#define PEER    5u
#define EPOCH   42u
#define WAIT_MS 10000

struct fx {
	char name[64];
	struct pd_shm seg;            /* the receiver's segment, ours */
	int have_seg;
	struct pd_shmx *s;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	pd_test_name(f->name, sizeof(f->name), "shmx");
	*state = f;
	return 0;
}

static void seg_close(struct fx *f)
{
	if (f->have_seg)
		pd_layout_close(&f->seg); /* the creator: unlinks */
	f->have_seg = 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	pd_shmx_destroy(f->s);
	seg_close(f);
	free(f);
	return 0;
}

/* The receiver's segment: recv slots of slot_size (none: a sender's), published or not. */
static void seg_make(struct fx *f, uint32_t recv, uint64_t slot_size, uint64_t epoch, int publish)
{
	struct pd_layout_opts o = { .name = f->name, .send_slots = recv ? 0 : 4,
				    .recv_slots = recv, .slot_size = slot_size, .max_agents = 2,
				    .sq_entries = 64, .cq_entries = 64, .epoch = epoch,
				    .index_seed = 7 };
	char err[256] = "";

	if (pd_layout_create(&o, &f->seg, err, sizeof(err)) != 0)
		fail_msg("pd_layout_create: %s", err);
	f->have_seg = 1;
	if (recv)
		memset(f->seg.recv.arena, 0xa5, (size_t)recv * slot_size);
	if (publish)
		pd_segment_publish(&f->seg.seg);
}

static void shmx_make(struct fx *f, uint32_t threads, uint32_t depth)
{
	struct pd_shmx_opts o;

	pd_shmx_opts_init(&o);
	o.threads = threads;
	o.queue_depth = depth;
	assert_int_equal(pd_shmx_create(&o, &f->s), 0);
}

static struct pd_shmx_target target(const struct fx *f, uint32_t slots, uint64_t slot_size,
				    uint64_t epoch)
{
	return (struct pd_shmx_target){ .name = f->name, .slot_size = slot_size,
					.recv_slots = slots, .epoch = epoch };
}

static int connect_to(struct fx *f, const struct pd_shmx_target *t)
{
	char err[256] = "";
	int rc = pd_shmx_connect(f->s, PEER, t, err, sizeof(err));

	if (rc < 0 && !err[0])
		fail_msg("connect refused (%d) without saying why", rc);
	return rc;
}

/* Wait for n completions (eventfd, then poll). */
static uint32_t wait_cpl(struct pd_shmx *s, struct pd_cpl *c, uint32_t n)
{
	uint64_t deadline = pd_deadline_ms(WAIT_MS);
	uint32_t got = 0;

	while (got < n && pd_now_ns() < deadline) {
		struct pollfd pf = { .fd = pd_shmx_event_fd(s), .events = POLLIN };
		int rc;

		(void)poll(&pf, 1, 100);
		rc = pd_shmx_poll(s, c + got, n - got);
		assert_true(rc >= 0);
		got += (uint32_t)rc;
	}
	return got;
}

static int fd_readable(int fd)
{
	struct pollfd pf = { .fd = fd, .events = POLLIN };

	return poll(&pf, 1, 0) == 1;
}

static uint8_t pat(uint32_t i, uint32_t k)
{
	return (uint8_t)(i * 131u + k * 7u + (k >> 11));
}

/* ---- create and connect ---------------------------------------------------------- */

static void test_create_refuses_bad_opts(void **state)
{
	struct pd_shmx_opts o;
	struct pd_shmx *s = NULL;

	(void)state;
	pd_shmx_opts_init(&o);
	o.threads = 0;
	assert_int_equal(pd_shmx_create(&o, &s), -EINVAL);
	pd_shmx_opts_init(&o);
	o.queue_depth = PD_SHMX_MAX_DEPTH + 1;
	assert_int_equal(pd_shmx_create(&o, &s), -EINVAL);
	pd_shmx_opts_init(&o);
	o.flags = 1;
	assert_int_equal(pd_shmx_create(&o, &s), -EINVAL);
	assert_int_equal(pd_shmx_create(NULL, &s), -EINVAL);
	assert_null(s);
	pd_shmx_destroy(NULL);
}

static void test_connect_checks_the_segment(void **state)
{
	struct fx *f = *state;
	struct pd_shmx_target t;
	struct pd_shmx_stats st;

	shmx_make(f, 1, 64);
	t = target(f, 8, 64 * KIB, EPOCH);
	assert_int_equal(connect_to(f, &t), -ENOENT); /* no segment (yet) */
	seg_make(f, 8, 64 * KIB, EPOCH, 0);
	assert_int_equal(connect_to(f, &t), -ENOTCONN); /* still initialising */
	pd_segment_publish(&f->seg.seg);
	t = target(f, 8, 128 * KIB, EPOCH);
	assert_int_equal(connect_to(f, &t), -EPROTO); /* slot size differs */
	t = target(f, 9, 64 * KIB, EPOCH);
	assert_int_equal(connect_to(f, &t), -EPROTO); /* slot count differs */
	t = target(f, 4, 64 * KIB, EPOCH);
	assert_int_equal(connect_to(f, &t), -EPROTO); /* fewer: would fit, still refused */
	t = target(f, 8, 32 * KIB, EPOCH);
	assert_int_equal(connect_to(f, &t), -EPROTO); /* smaller slots: likewise */
	t = target(f, 8, 64 * KIB, EPOCH + 1);
	assert_int_equal(connect_to(f, &t), -ESTALE); /* another incarnation's */
	t = target(f, 8, 64 * KIB, EPOCH);
	assert_int_equal(connect_to(f, &t), 0);
	assert_int_equal(connect_to(f, &t), -EEXIST);
	assert_int_equal(pd_shmx_disconnect(f->s, PEER), 0);
	assert_int_equal(pd_shmx_disconnect(f->s, PEER), -ENOENT);
	pd_shmx_get_stats(f->s, &st);
	assert_int_equal(st.connects, 1);
	assert_int_equal(st.connects_refused, 7);
	t.name = "bad/name";
	assert_int_equal(pd_shmx_connect(f->s, PEER, &t, NULL, 0), -EINVAL);
	t = target(f, 0, 64 * KIB, EPOCH);
	assert_int_equal(pd_shmx_connect(f->s, PEER, &t, NULL, 0), -EINVAL);
}

/* A segment whose header names another broker (forged here through our
 * own mapping), and a broker without a recv pool, are refused. */
static void test_connect_refuses_impostor_and_no_recv_pool(void **state)
{
	struct fx *f = *state;
	struct pd_shmx_target t = target(f, 8, 64 * KIB, EPOCH);

	shmx_make(f, 1, 64);
	seg_make(f, 8, 64 * KIB, EPOCH, 1);
	(void)snprintf(f->seg.seg.hdr->name, sizeof(f->seg.seg.hdr->name), "someone-else");
	assert_int_equal(connect_to(f, &t), -EPROTO);
	seg_close(f);
	seg_make(f, 0, 64 * KIB, EPOCH, 1);
	assert_int_equal(connect_to(f, &t), -EPROTO);
}

/* ---- copies ---------------------------------------------------------------------- */

static void test_copies_land_byte_exact(void **state)
{
	struct fx *f = *state;
	const uint32_t n = 16, ss = 64 * KIB;
	struct pd_shmx_target t = target(f, n, ss, EPOCH);
	uint8_t *src = malloc((size_t)n * ss);
	struct pd_xfer x[16];
	struct pd_cpl c[17];
	struct pd_shmx_stats st;
	uint32_t seen = 0, bytes = 0;

	assert_non_null(src);
	shmx_make(f, 3, 64);
	seg_make(f, n, ss, EPOCH, 1);
	assert_int_equal(connect_to(f, &t), 0);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t len = i == 3 ? 0 : ss - i * 1000u; /* one empty, one full */

		for (uint32_t k = 0; k < len; k++)
			src[(size_t)i * ss + k] = pat(i, k);
		x[i] = (struct pd_xfer){ .cookie = 100 + i, .src = src + (size_t)i * ss,
					      .len = len, .slot = (i * 5u) % n };
		bytes += len;
	}
	assert_int_equal(pd_shmx_post(f->s, PEER, x, n), (int)n);
	assert_int_equal(wait_cpl(f->s, c, n), n);
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(c[i].status, 0);
		assert_int_equal(c[i].kind, PD_CPL_WRITE);
		assert_int_equal(c[i].peer, PEER);
		assert_true(c[i].cookie >= 100 && c[i].cookie < 100 + n);
		assert_false(seen & (1u << (c[i].cookie - 100))); /* each exactly once */
		seen |= 1u << (c[i].cookie - 100);
	}
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *d = f->seg.recv.arena + (size_t)x[i].slot * ss;

		assert_memory_equal(d, x[i].src, x[i].len);
		for (uint32_t k = x[i].len; k < ss; k++) /* nothing past len */
			if (d[k] != 0xa5)
				fail_msg("slot %u byte %u written past len %u", x[i].slot, k, x[i].len);
	}
	assert_false(fd_readable(pd_shmx_event_fd(f->s))); /* drained: not readable */
	assert_int_equal(pd_shmx_poll(f->s, c, 17), 0);
	pd_shmx_get_stats(f->s, &st);
	assert_int_equal(st.copies_ok, n);
	assert_int_equal(st.copies_failed, 0);
	assert_int_equal(st.bytes, bytes);
	free(src);
}

static void test_bounds_refused_all_or_nothing(void **state)
{
	struct fx *f = *state;
	const uint32_t ss = 64 * KIB;
	struct pd_shmx_target t = target(f, 4, ss, EPOCH);
	static uint8_t src[64 * KIB + 1];
	struct pd_xfer x[2] = { { .cookie = 1, .src = src, .len = 16, .slot = 0 },
				     { .cookie = 2, .src = src, .len = 16, .slot = 4 } };
	struct pd_cpl c[2];

	memset(src, 0x3c, sizeof(src));
	shmx_make(f, 1, 8);
	seg_make(f, 4, ss, EPOCH, 1);
	assert_int_equal(pd_shmx_post(f->s, PEER, x, 1), -ENOENT); /* not connected */
	assert_int_equal(connect_to(f, &t), 0);
	assert_int_equal(pd_shmx_post(f->s, PEER, x, 2), -EINVAL); /* slot == nslots */
	x[1].slot = UINT32_MAX;
	assert_int_equal(pd_shmx_post(f->s, PEER, &x[1], 1), -EINVAL);
	x[1] = (struct pd_xfer){ .cookie = 2, .src = src, .len = ss + 1, .slot = 1 };
	assert_int_equal(pd_shmx_post(f->s, PEER, x, 2), -EINVAL); /* len > slot_size */
	x[1] = (struct pd_xfer){ .cookie = 2, .src = NULL, .len = 1, .slot = 1 };
	assert_int_equal(pd_shmx_post(f->s, PEER, x, 2), -EINVAL); /* no src */
	assert_int_equal(pd_shmx_post(f->s, PEER, NULL, 1), -EINVAL);
	assert_int_equal(pd_shmx_post(f->s, PEER, x, 9), -EINVAL);
	assert_int_equal(pd_shmx_poll(f->s, c, 2), 0);     /* nothing was posted */
	for (uint32_t k = 0; k < 4 * ss; k++)
		if (f->seg.recv.arena[k] != 0xa5)
			fail_msg("arena byte %u written by a refused post", k);
	x[1] = (struct pd_xfer){ .cookie = 2, .src = src, .len = ss, .slot = 3 };
	assert_int_equal(pd_shmx_post(f->s, PEER, x, 2), 2); /* a full slot is fine */
	assert_int_equal(wait_cpl(f->s, c, 2), 2);
	assert_int_equal(f->seg.recv.arena[3 * ss + ss - 1], 0x3c);
	assert_int_equal(pd_shmx_post(f->s, PEER, x, 0), 0);
}

/* Posted past the queue depth: -EAGAIN until copies complete. 4 x 16 MiB
 * into a fresh mapping keep one thread busy for tens of ms: the fifth post
 * comes microseconds after the fourth. */
static void test_queue_depth(void **state)
{
	struct fx *f = *state;
	struct pd_shmx_target t = target(f, 4, 16 * MIB, EPOCH);
	uint8_t *src = calloc(1, 16 * MIB);
	struct pd_xfer x = { .cookie = 9, .src = src, .len = 16 * MIB, .slot = 2 };
	struct pd_cpl c[4];

	assert_non_null(src);
	shmx_make(f, 1, 4);
	seg_make(f, 4, 16 * MIB, EPOCH, 1);
	assert_int_equal(connect_to(f, &t), 0);
	for (uint32_t i = 0; i < 4; i++) {
		x.slot = i;
		assert_int_equal(pd_shmx_post(f->s, PEER, &x, 1), 1);
	}
	assert_int_equal(pd_shmx_post(f->s, PEER, &x, 1), -EAGAIN);
	assert_int_equal(wait_cpl(f->s, c, 4), 4);
	assert_int_equal(pd_shmx_post(f->s, PEER, &x, 1), 1);
	assert_int_equal(wait_cpl(f->s, c, 1), 1);
	free(src);
}

/* ---- disconnect, peer failure ---------------------------------------------------------- */

/* 1000 copies of 1 MiB (a second or so of memcpy for one thread), then a
 * disconnect at once: it returns with every copy completed, those not done
 * with -ECONNABORTED, and no peer completion. */
static void test_disconnect_aborts_copies_in_flight(void **state)
{
	struct fx *f = *state;
	const uint32_t n = 1000, slots = 8;
	struct pd_shmx_target t = target(f, slots, MIB, EPOCH);
	struct pd_xfer *x = calloc(n, sizeof(*x));
	struct pd_cpl *c = calloc(n + 1, sizeof(*c));
	uint8_t *seen = calloc(n, 1), *src = malloc(MIB);
	uint32_t ok = 0, aborted = 0;
	int got;

	assert_true(x && c && seen && src);
	memset(src, 0x11, MIB);
	shmx_make(f, 1, 2048);
	seg_make(f, slots, MIB, EPOCH, 1);
	assert_int_equal(connect_to(f, &t), 0);
	for (uint32_t i = 0; i < n; i++)
		x[i] = (struct pd_xfer){ .cookie = i, .src = src, .len = MIB, .slot = i % slots };
	assert_int_equal(pd_shmx_post(f->s, PEER, x, n), (int)n);
	assert_int_equal(pd_shmx_disconnect(f->s, PEER), 0);
	got = pd_shmx_poll(f->s, c, n + 1); /* all there already: no waiting */
	assert_int_equal(got, (int)n);
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(c[i].kind, PD_CPL_WRITE);
		assert_true(c[i].cookie < n && !seen[c[i].cookie]);
		seen[c[i].cookie] = 1;
		ok += c[i].status == 0;
		aborted += c[i].status == -ECONNABORTED;
	}
	assert_int_equal(ok + aborted, n);
	assert_true(aborted >= 1);
	assert_int_equal(pd_shmx_post(f->s, PEER, x, 1), -ENOENT);
	free(x);
	free(c);
	free(seen);
	free(src);
}

static void copy_one(struct fx *f, const void *src, uint32_t len, uint32_t slot, int32_t want)
{
	struct pd_xfer x = { .cookie = 77, .src = src, .len = len, .slot = slot };
	struct pd_cpl c;

	assert_int_equal(pd_shmx_post(f->s, PEER, &x, 1), 1);
	assert_int_equal(wait_cpl(f->s, &c, 1), 1);
	assert_int_equal(c.kind, PD_CPL_WRITE);
	assert_int_equal(c.status, want);
}

/* The peer's segment unlinked while mapped (writes there are harmless),
 * then made again by a new incarnation: check fails the peer once (one
 * peer completion), and a new connect maps the new segment. */
static void test_replaced_segment_fails_the_peer(void **state)
{
	struct fx *f = *state;
	struct pd_shmx_target t = target(f, 4, 64 * KIB, EPOCH);
	static const char hi[] = "hello";
	struct pd_xfer x = { .cookie = 1, .src = hi, .len = 5, .slot = 1 };
	struct pd_cpl c;

	shmx_make(f, 2, 64);
	seg_make(f, 4, 64 * KIB, EPOCH, 1);
	assert_int_equal(connect_to(f, &t), 0);
	assert_int_equal(pd_shmx_check(f->s), 0);
	copy_one(f, hi, 5, 1, 0);
	assert_memory_equal(f->seg.recv.arena + 64 * KIB, hi, 5);
	seg_close(f);                     /* unlinked; still mapped by the transport */
	copy_one(f, hi, 5, 2, 0);         /* lands in the orphan: harmless */
	seg_make(f, 4, 64 * KIB, EPOCH + 1, 1);
	assert_int_equal(pd_shmx_check(f->s), 1);
	assert_int_equal(pd_shmx_check(f->s), 0); /* once */
	assert_int_equal(pd_shmx_post(f->s, PEER, &x, 1), -ENOTCONN);
	assert_int_equal(wait_cpl(f->s, &c, 1), 1);
	assert_int_equal(c.kind, PD_CPL_PEER);
	assert_int_equal(c.status, -ECONNRESET);
	assert_int_equal(c.peer, PEER);
	assert_int_equal(pd_shmx_disconnect(f->s, PEER), 0);
	assert_int_equal(pd_shmx_poll(f->s, &c, 1), 0); /* nothing more */
	assert_int_equal(connect_to(f, &t), -ESTALE);    /* the old Hello's epoch */
	t.epoch = EPOCH + 1;
	assert_int_equal(connect_to(f, &t), 0);
	copy_one(f, hi, 5, 3, 0);
	assert_memory_equal(f->seg.recv.arena + 3 * 64 * KIB, hi, 5);
	assert_int_equal(f->seg.recv.arena[2 * 64 * KIB], 0xa5); /* the orphan's copy is not here */
}

/* A broker in a child process: makes its segment, says so, waits for a
 * byte, then dies without cleaning up (as a SIGKILLed broker does). */
struct child_seg {
	const char *name;
	int up[2], go[2];
};

static int child_broker(void *arg)
{
	struct child_seg *c = arg;
	struct pd_layout_opts o = { .name = c->name, .recv_slots = 4, .slot_size = 64 * KIB,
				    .max_agents = 2, .sq_entries = 64, .cq_entries = 64,
				    .epoch = EPOCH };
	struct pd_shm seg;
	char b;

	if (pd_layout_create(&o, &seg, NULL, 0) < 0)
		return 1;
	pd_segment_publish(&seg.seg);
	if (write(c->up[1], "u", 1) != 1 || read(c->go[0], &b, 1) != 1)
		return 2;
	return 0; /* _exit: the segment stays, as a killed broker leaves it */
}

/* The broker behind a mapped segment dies (its segment stays): the next
 * check fails the peer, once. */
static void test_dead_broker_fails_the_peer(void **state)
{
	struct fx *f = *state;
	struct child_seg c = { .name = f->name };
	struct pd_shmx_target t = target(f, 4, 64 * KIB, EPOCH);
	struct pd_cpl cpl;
	pid_t pid;
	char b;

	shmx_make(f, 1, 16);
	assert_int_equal(pipe(c.up), 0);
	assert_int_equal(pipe(c.go), 0);
	pid = pd_test_fork(child_broker, &c);
	assert_true(pid > 0);
	assert_int_equal(read(c.up[0], &b, 1), 1);
	assert_int_equal(connect_to(f, &t), 0);
	assert_int_equal(pd_shmx_check(f->s), 0); /* alive */
	assert_int_equal(write(c.go[1], "g", 1), 1);
	assert_int_equal(pd_test_wait(pid, 5000), 0);
	assert_int_equal(pd_shmx_check(f->s), 1);
	assert_int_equal(wait_cpl(f->s, &cpl, 1), 1);
	assert_int_equal(cpl.kind, PD_CPL_PEER);
	assert_int_equal(cpl.status, -ECONNRESET);
	assert_int_equal(pd_shmx_disconnect(f->s, PEER), 0);
	assert_int_equal(pd_segment_unlink(f->name), 0);
	for (int i = 0; i < 2; i++) {
		(void)close(c.up[i]);
		(void)close(c.go[i]);
	}
}

/* ---- idle ------------------------------------------------------------------------- */

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * PD_NS_PER_S + (uint64_t)ts.tv_nsec;
}

static void test_idle_threads_sleep(void **state)
{
	struct fx *f = *state;
	struct pd_shmx_target t = target(f, 4, 64 * KIB, EPOCH);
	struct timespec half = { 0, 500 * 1000 * 1000 };
	static uint8_t src[4096];
	struct pd_shmx_stats a, b;
	uint64_t cpu;

	shmx_make(f, 4, 64);
	seg_make(f, 4, 64 * KIB, EPOCH, 1);
	assert_int_equal(connect_to(f, &t), 0);
	copy_one(f, src, sizeof(src), 0, 0);
	(void)nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL); /* all back asleep */
	pd_shmx_get_stats(f->s, &a);
	cpu = cpu_ns();
	(void)nanosleep(&half, NULL);
	cpu = cpu_ns() - cpu;
	pd_shmx_get_stats(f->s, &b);
	assert_int_equal(b.wakeups, a.wakeups);    /* nobody woke up */
	assert_true(cpu < 20 * PD_NS_PER_MS);      /* 4 threads, 0.5 s: ~0 */
	copy_one(f, src, sizeof(src), 1, 0);       /* and they still work */
	pd_shmx_get_stats(f->s, &b);
	assert_true(b.wakeups > a.wakeups);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_refuses_bad_opts),
		cmocka_unit_test_setup_teardown(test_connect_checks_the_segment, setup, teardown),
		cmocka_unit_test_setup_teardown(test_connect_refuses_impostor_and_no_recv_pool,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_copies_land_byte_exact, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bounds_refused_all_or_nothing, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_queue_depth, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disconnect_aborts_copies_in_flight, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_replaced_segment_fails_the_peer, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dead_broker_fails_the_peer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_idle_threads_sleep, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
