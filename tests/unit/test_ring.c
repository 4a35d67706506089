/* SPDX-License-Identifier: MIT */
/*
 * shm/pd_ring.{c,h}: negative cases first (bad geometry, bad memory, corrupt
 * rings, corruption after the view was built), then single-process
 * semantics, then a producer child and a consumer parent over shared memory.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "pd_ring.h"
#include "pd_time.h"
#include "pd_ring_stream.h"
#include "pd_test.h"

#define GUARD_LEN  256          /* canary bytes after the ring's elems */
#define GUARD_BYTE 0xa5
#define CANARY     0x5a
#define CTL_LEN    PD_ALIGN_UP(sizeof(struct stream), PD_CACHE_LINE)
#define BUF_LEN    (2 * 16 * 64) /* two rings of 16 x 64 B: bursts larger than the ring */

#define XP_ENTRIES     10000000ull
#define XP_BATCH       32u
#define XP_TIMEOUT_MS  120000u
#define XP_REAP_MS     10000u   /* the child is done once the parent has it all */
#define DB_ENTRIES     200000ull
#define DB_BATCH       8u
#define DB_PACE        DB_BATCH /* producer waits for the drain: the consumer sleeps */
#define DB_TIMEOUT_MS  60000u
#define DB_POLL_MS     1000     /* a poll timeout is a lost wake-up */
#define RACE_MS        500u     /* bounds the header race; the old double fetch was
				 * usually hit well within it */

/* One mapping: stream control (fork tests), ring, guard. */
struct ring_fx {
	uint8_t *map;
	size_t map_len;
	struct stream *s;
	struct pd_ring *r;
	size_t len; /* ring region: pd_ring_memsize() */
	struct pd_ring_view v;
};

/* ---- fixture -------------------------------------------------------------- */

static void fx_close(struct ring_fx *f)
{
	pd_test_shared_free(f->map, f->map_len);
	f->map = NULL;
}

static int fx_open(struct ring_fx *f, uint32_t count, uint32_t esize)
{
	int64_t need = pd_ring_memsize(count, esize);
	int rc;

	if (need < 0)
		return (int)need;
	f->len = (size_t)need;
	f->map_len = CTL_LEN + f->len + GUARD_LEN;
	f->map = pd_test_shared_alloc(f->map_len);
	if (!f->map)
		return -ENOMEM;
	f->s = (struct stream *)f->map;
	f->r = (struct pd_ring *)(f->map + CTL_LEN);
	memset(f->map + CTL_LEN + f->len, GUARD_BYTE, GUARD_LEN);
	rc = pd_ring_init(f->r, f->len, count, esize);
	if (rc == 0)
		rc = pd_ring_view_init(&f->v, f->r, f->len);
	if (rc < 0)
		fx_close(f);
	return rc;
}

static int fx_setup(void **state, uint32_t count, uint32_t esize)
{
	struct ring_fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	if (fx_open(f, count, esize) < 0) {
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int setup_16x8(void **state)
{
	return fx_setup(state, 16, 8);
}

static int setup_16x64(void **state)
{
	return fx_setup(state, 16, 64);
}

static int setup_1024x8(void **state)
{
	return fx_setup(state, 1024, 8);
}

static int teardown(void **state)
{
	fx_close(*state);
	free(*state);
	return 0;
}

static int guard_intact(const struct ring_fx *f)
{
	const uint8_t *g = f->map + CTL_LEN + f->len;

	for (size_t i = 0; i < GUARD_LEN; i++)
		if (g[i] != GUARD_BYTE)
			return 0;
	return 1;
}

static void set_indices(struct pd_ring *r, uint32_t head, uint32_t tail)
{
	atomic_store_explicit(&r->head, head, memory_order_relaxed);
	atomic_store_explicit(&r->tail, tail, memory_order_relaxed);
}

static uint32_t load_head(const struct pd_ring *r)
{
	return atomic_load_explicit(&r->head, memory_order_relaxed);
}

static uint32_t load_tail(const struct pd_ring *r)
{
	return atomic_load_explicit(&r->tail, memory_order_relaxed);
}

static void assert_case(int ok, const char *what)
{
	if (!ok)
		print_error("case: %s\n", what);
	assert_true(ok);
}

/* ---- entry patterns: word w of entry seq is seq << 8 | w ------------------ */

static void entries_fill(void *buf, uint32_t esize, uint64_t seq, uint32_t n)
{
	uint64_t *w = buf;

	for (uint32_t i = 0; i < n; i++, seq++)
		for (uint32_t j = 0; j < esize / 8; j++)
			*w++ = seq << 8 | j;
}

static int entries_check(const void *buf, uint32_t esize, uint64_t seq, uint32_t n)
{
	const uint64_t *w = buf;

	for (uint32_t i = 0; i < n; i++, seq++)
		for (uint32_t j = 0; j < esize / 8; j++)
			if (*w++ != (seq << 8 | j))
				return -1;
	return 0;
}

/* ---- negative: geometry and memory ---------------------------------------- */

static const struct {
	uint32_t count, esize;
} bad_geometry[] = {
	{ 0, 8 },
	{ 3, 8 },
	{ 24, 8 },
	{ PD_RING_MAX_COUNT + 1, 8 },
	{ PD_RING_MAX_COUNT << 1, 8 },
	{ 0x80000000u, 8 },
	{ 16, 0 },
	{ 16, 4 },
	{ 16, 12 },
	{ 16, PD_RING_MAX_ESIZE + 8 },
	{ 16, UINT32_MAX },
};

static void test_memsize_rejects(void **state)
{
	(void)state;
	for (size_t i = 0; i < PD_ARRAY_SIZE(bad_geometry); i++)
		assert_int_equal(pd_ring_memsize(bad_geometry[i].count, bad_geometry[i].esize),
				 -EINVAL);
	assert_int_equal(pd_ring_memsize(1, 8), sizeof(struct pd_ring) + 8);
	assert_int_equal(pd_ring_memsize(16, 64), sizeof(struct pd_ring) + 16 * 64);
	assert_true(pd_ring_memsize(PD_RING_MAX_COUNT, PD_RING_MAX_ESIZE) ==
		    (int64_t)sizeof(struct pd_ring) +
			    (int64_t)PD_RING_MAX_COUNT * PD_RING_MAX_ESIZE);
}

static void test_init_rejects(void **state)
{
	struct ring_fx *f = *state;
	struct pd_ring *odd = (struct pd_ring *)((uint8_t *)f->r + 8);

	assert_int_equal(pd_ring_init(NULL, f->len, 16, 8), -EINVAL);
	assert_int_equal(pd_ring_init(odd, f->len - 8, 1, 8), -EINVAL);
	assert_int_equal(pd_ring_init(f->r, f->len - 1, 16, 8), -ENOSPC);
	assert_int_equal(pd_ring_init(f->r, sizeof(struct pd_ring), 16, 8), -ENOSPC);
	assert_int_equal(pd_ring_init(f->r, 0, 16, 8), -ENOSPC);
	for (size_t i = 0; i < PD_ARRAY_SIZE(bad_geometry); i++)
		assert_int_equal(pd_ring_init(f->r, f->len, bad_geometry[i].count,
					      bad_geometry[i].esize),
				 -EINVAL);
	/* A refused init wrote nothing: the ring is still the valid 16 x 8. */
	assert_int_equal(pd_ring_check(f->r, f->len), 0);
	assert_int_equal(f->r->size, 16);
	assert_true(guard_intact(f));
}

/* ---- negative: a corrupt ring in shm --------------------------------------- */

struct corruption {
	const char *what;
	void (*apply)(struct pd_ring *r, size_t *len);
};

static void bad_magic(struct pd_ring *r, size_t *len)
{
	(void)len;
	r->magic ^= 1;
}

static void mask_not_size_minus_1(struct pd_ring *r, size_t *len)
{
	(void)len;
	r->mask = r->size;
}

static void size_not_pow2(struct pd_ring *r, size_t *len)
{
	(void)len;
	r->size = 12;
	r->mask = 11;
}

static void size_zero(struct pd_ring *r, size_t *len)
{
	(void)len;
	r->size = 0;
	r->mask = UINT32_MAX; /* == size - 1 in u32 */
}

static void size_beyond_region(struct pd_ring *r, size_t *len)
{
	(void)len;
	r->size *= 2;
	r->mask = r->size - 1;
}

static void esize_beyond_region(struct pd_ring *r, size_t *len)
{
	(void)len;
	r->esize *= 2;
}

static void esize_not_mult8(struct pd_ring *r, size_t *len)
{
	(void)len;
	r->esize = 12;
}

static void region_short(struct pd_ring *r, size_t *len)
{
	(void)r;
	*len -= 8;
}

static void region_header_only(struct pd_ring *r, size_t *len)
{
	(void)r;
	*len = sizeof(struct pd_ring) - 1;
}

static void tail_beyond_size(struct pd_ring *r, size_t *len)
{
	(void)len;
	atomic_store_explicit(&r->tail, load_head(r) + r->size + 1, memory_order_relaxed);
}

static void head_beyond_tail(struct pd_ring *r, size_t *len)
{
	(void)len;
	atomic_store_explicit(&r->head, load_tail(r) + 1, memory_order_relaxed);
}

static const struct corruption corruptions[] = {
	{ "bad magic", bad_magic },
	{ "mask != size - 1", mask_not_size_minus_1 },
	{ "size not a power of two", size_not_pow2 },
	{ "size 0", size_zero },
	{ "size * esize beyond the region (size)", size_beyond_region },
	{ "size * esize beyond the region (esize)", esize_beyond_region },
	{ "esize not a multiple of 8", esize_not_mult8 },
	{ "region shorter than size * esize", region_short },
	{ "region shorter than the header", region_header_only },
	{ "tail - head > size", tail_beyond_size },
	{ "head ahead of tail", head_beyond_tail },
};

static void expect_rejected(const struct corruption *c)
{
	struct ring_fx f;
	struct pd_ring_view v;
	size_t len;

	assert_int_equal(fx_open(&f, 16, 8), 0);
	len = f.len;
	c->apply(f.r, &len);
	assert_case(pd_ring_check(f.r, len) == -EPROTO, c->what);
	assert_case(pd_ring_view_init(&v, f.r, len) == -EPROTO, c->what);
	fx_close(&f);
}

static void test_check_rejects(void **state)
{
	struct ring_fx *f = *state;
	struct pd_ring_view v;

	assert_int_equal(pd_ring_check(NULL, f->len), -EPROTO);
	assert_int_equal(pd_ring_check((struct pd_ring *)(f->map + 8), f->len), -EPROTO);
	assert_int_equal(pd_ring_view_init(NULL, f->r, f->len), -EINVAL);
	assert_int_equal(pd_ring_view_init(&v, NULL, f->len), -EINVAL);
	for (size_t i = 0; i < PD_ARRAY_SIZE(corruptions); i++)
		expect_rejected(&corruptions[i]);
}

/* ---- negative: a peer rewriting the header while it is checked -------------- */

struct flipper {
	volatile struct pd_ring *r;
	_Atomic int stop;
};

/* A hostile peer: flips the geometry between the real 16 and 2^20 entries. */
static void *flip_geometry(void *arg)
{
	struct flipper *fl = arg;

	while (!atomic_load_explicit(&fl->stop, memory_order_relaxed)) {
		fl->r->size = 1u << 20;
		fl->r->mask = (1u << 20) - 1;
		fl->r->size = 16;
		fl->r->mask = 15;
	}
	return NULL;
}

/* Every view accepted must hold the geometry that fits the region. */
static void test_view_init_header_race(void **state)
{
	struct ring_fx *f = *state;
	struct flipper fl = { .r = f->r };
	uint64_t deadline = pd_deadline_ms(RACE_MS);
	uint32_t accepted = 0, bad = 0;
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, flip_geometry, &fl), 0);
	while (pd_now_ns() < deadline) {
		struct pd_ring_view v;

		if (pd_ring_view_init(&v, f->r, f->len) == 0) {
			accepted++;
			bad += v.size != 16 || v.mask != 15;
		}
	}
	atomic_store_explicit(&fl.stop, 1, memory_order_relaxed);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(bad, 0);
	assert_true(accepted > 0);
}

/* ---- negative: corruption after the view was built ------------------------- */

typedef int ring_op_fn(struct pd_ring_view *v, void *buf, uint32_t n);

static int op_enq_bulk(struct pd_ring_view *v, void *buf, uint32_t n)
{
	return pd_ring_enqueue_bulk_sp(v, buf, n);
}

static int op_enq_burst(struct pd_ring_view *v, void *buf, uint32_t n)
{
	return pd_ring_enqueue_burst_sp(v, buf, n);
}

static int op_deq_bulk(struct pd_ring_view *v, void *buf, uint32_t n)
{
	return pd_ring_dequeue_bulk_sc(v, buf, n);
}

static int op_deq_burst(struct pd_ring_view *v, void *buf, uint32_t n)
{
	return pd_ring_dequeue_burst_sc(v, buf, n);
}

static ring_op_fn *const ring_ops[] = { op_enq_bulk, op_enq_burst, op_deq_bulk, op_deq_burst };

static int all_bytes(const uint8_t *p, size_t n, uint8_t b)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != b)
			return 0;
	return 1;
}

/* A live 16 x 8 ring holding 5 entries gets a corrupt index; op must return
 * -EPROTO and leave the whole mapping and its own buffer untouched. */
static void expect_op_refused(ring_op_fn *op, const struct corruption *c)
{
	uint8_t buf[BUF_LEN], *snap;
	struct ring_fx f;
	size_t len;

	assert_int_equal(fx_open(&f, 16, 8), 0);
	entries_fill(buf, 8, 0, 5);
	assert_int_equal(pd_ring_enqueue_bulk_sp(&f.v, buf, 5), 5);
	len = f.len;
	c->apply(f.r, &len);
	snap = malloc(f.map_len);
	assert_non_null(snap);
	memcpy(snap, f.map, f.map_len);
	memset(buf, CANARY, sizeof(buf));
	assert_case(op(&f.v, buf, 4) == -EPROTO, c->what);
	assert_case(all_bytes(buf, sizeof(buf), CANARY), c->what);
	assert_case(memcmp(snap, f.map, f.map_len) == 0, c->what);
	assert_int_equal(pd_ring_count(&f.v), 17);
	free(snap);
	fx_close(&f);
}

static void test_corrupt_index_after_view(void **state)
{
	static const struct corruption *const idx[] = { &corruptions[9], &corruptions[10] };

	(void)state;
	assert_ptr_equal(corruptions[9].apply, tail_beyond_size);
	assert_ptr_equal(corruptions[10].apply, head_beyond_tail);
	for (size_t i = 0; i < PD_ARRAY_SIZE(ring_ops); i++)
		for (size_t j = 0; j < PD_ARRAY_SIZE(idx); j++)
			expect_op_refused(ring_ops[i], idx[j]);
}

/* ---- single-process transfer helper ---------------------------------------- */

/* Running totals of a transfer through one ring, one side after the other. */
struct xfer {
	uint64_t sent, recvd;
	uint32_t splits; /* enqueues that wrapped across the end of elems */
};

static uint32_t min_u32(uint64_t a, uint64_t b)
{
	return (uint32_t)(a < b ? a : b);
}

/* Burst-enqueue k_in patterned entries, burst-dequeue k_out and check them. */
static void xfer_round(struct ring_fx *f, struct xfer *x, uint32_t k_in, uint32_t k_out)
{
	uint32_t room = f->v.size - pd_ring_count(&f->v);
	uint32_t idx = load_tail(f->r) & f->v.mask;
	uint8_t buf[BUF_LEN];
	int rc;

	assert_true(k_in * f->v.esize <= sizeof(buf) && k_out * f->v.esize <= sizeof(buf));
	entries_fill(buf, f->v.esize, x->sent, k_in);
	rc = pd_ring_enqueue_burst_sp(&f->v, buf, k_in);
	assert_int_equal(rc, min_u32(k_in, room));
	x->splits += idx + (uint32_t)rc > f->v.size;
	x->sent += (uint32_t)rc;
	rc = pd_ring_dequeue_burst_sc(&f->v, buf, k_out);
	assert_int_equal(rc, min_u32(k_out, x->sent - x->recvd));
	assert_int_equal(entries_check(buf, f->v.esize, x->recvd, (uint32_t)rc), 0);
	x->recvd += (uint32_t)rc;
	assert_int_equal(pd_ring_count(&f->v), x->sent - x->recvd);
}

/* Uneven burst sizes, some larger than the ring, then drain. */
static void xfer_run(struct ring_fx *f, struct xfer *x, uint32_t rounds)
{
	uint32_t size = f->v.size;

	for (uint32_t i = 0; i < rounds; i++)
		xfer_round(f, x, 1 + i % (size + 1), 1 + i % size);
	xfer_round(f, x, 0, size);
	assert_int_equal(x->sent, x->recvd);
	assert_true(guard_intact(f));
}

/* ---- negative: geometry corrupted after the view was built ----------------- */

static void test_corrupt_geometry_after_view(void **state)
{
	struct ring_fx *f = *state;
	struct xfer x = { 0 };

	f->r->size = PD_RING_MAX_COUNT;
	f->r->mask = UINT32_MAX;
	f->r->esize = PD_RING_MAX_ESIZE;
	/* The view keeps the 16 x 8 it checked: bursts clamp at 16 entries. */
	xfer_round(f, &x, 2 * 16, 0);
	assert_int_equal(x.sent, 16);
	assert_int_equal(pd_ring_count(&f->v), 16);
	xfer_round(f, &x, 1, 2 * 16);
	xfer_run(f, &x, 200);
	assert_true(x.splits > 0);
	assert_int_equal(pd_ring_check(f->r, f->len), -EPROTO);
}

/* ---- functional ------------------------------------------------------------ */

static void test_bulk_vs_burst(void **state)
{
	struct ring_fx *f = *state;
	uint64_t in[20], out[20];

	entries_fill(in, 8, 0, 20);
	assert_int_equal(pd_ring_count(&f->v), 0);
	assert_int_equal(pd_ring_enqueue_bulk_sp(&f->v, in, 10), 10);
	assert_int_equal(pd_ring_enqueue_bulk_sp(&f->v, in + 10, 10), 0); /* 6 free: none */
	assert_int_equal(pd_ring_count(&f->v), 10);
	assert_int_equal(pd_ring_enqueue_burst_sp(&f->v, in + 10, 10), 6); /* 6 of 10 */
	assert_int_equal(pd_ring_count(&f->v), 16);
	assert_int_equal(pd_ring_dequeue_bulk_sc(&f->v, out, 17), 0);
	assert_int_equal(pd_ring_count(&f->v), 16);
	assert_int_equal(pd_ring_dequeue_bulk_sc(&f->v, out, 4), 4);
	assert_int_equal(entries_check(out, 8, 0, 4), 0);
	assert_int_equal(pd_ring_count(&f->v), 12);
	assert_int_equal(pd_ring_dequeue_burst_sc(&f->v, out, 20), 12);
	assert_int_equal(entries_check(out, 8, 4, 12), 0);
	assert_int_equal(pd_ring_dequeue_burst_sc(&f->v, out, 20), 0);
	assert_int_equal(pd_ring_dequeue_bulk_sc(&f->v, out, 1), 0);
	assert_int_equal(pd_ring_count(&f->v), 0);
}

static uint64_t enq_full(const struct ring_fx *f)
{
	return pd_stat_get(&f->r->enq_full);
}

static void test_enq_full_counter(void **state)
{
	struct ring_fx *f = *state;
	uint64_t in[32], out[32];

	entries_fill(in, 8, 0, 32);
	assert_int_equal(pd_ring_enqueue_bulk_sp(&f->v, in, 17), 0); /* > size, even empty */
	assert_int_equal(enq_full(f), 1);
	assert_int_equal(pd_ring_enqueue_bulk_sp(&f->v, in, 16), 16);
	assert_int_equal(enq_full(f), 1);
	assert_int_equal(pd_ring_enqueue_bulk_sp(&f->v, in, 1), 0);
	assert_int_equal(pd_ring_enqueue_burst_sp(&f->v, in, 3), 0);
	assert_int_equal(enq_full(f), 3);
	assert_int_equal(pd_ring_dequeue_bulk_sc(&f->v, out, 2), 2);
	assert_int_equal(pd_ring_enqueue_burst_sp(&f->v, in, 3), 2); /* partial: not refused */
	assert_int_equal(enq_full(f), 3);
	assert_int_equal(pd_ring_enqueue_bulk_sp(&f->v, in, 1), 0);
	assert_int_equal(enq_full(f), 4);
}

static void test_wrap_esize64(void **state)
{
	struct ring_fx *f = *state;
	struct xfer x = { 0 };

	xfer_run(f, &x, 500);
	assert_true(x.splits > 10);
	assert_true(x.sent > 100 * f->v.size);
}

static void test_index_u32_wrap(void **state)
{
	struct ring_fx *f = *state;
	struct xfer x = { 0 };

	set_indices(f->r, 0xfffffff0u, 0xfffffff0u);
	assert_int_equal(pd_ring_view_init(&f->v, f->r, f->len), 0);
	xfer_round(f, &x, 16, 0);  /* full: tail wrapped to 0, head still 0xfffffff0 */
	assert_int_equal(load_tail(f->r), 0);
	xfer_round(f, &x, 1, 8);   /* full: refused; then head 0xfffffff8 */
	xfer_round(f, &x, 8, 16);  /* tail 8 < head: still 16 entries; drain */
	assert_int_equal(load_head(f->r), 8);
	assert_int_equal(load_tail(f->r), 8);
	set_indices(f->r, 0xffffff00u, 0xffffff00u);
	xfer_run(f, &x, 400);
	assert_true(load_head(f->r) < 0xffffff00u); /* crossed 2^32 again */
	assert_int_equal(load_head(f->r), (uint32_t)(0xffffff00u + (x.recvd - 24)));
}

static void test_wakeup_handshake(void **state)
{
	struct ring_fx *f = *state;
	struct pd_ring *r = f->r;
	uint64_t e = stream_entry(0);

	assert_int_equal(pd_ring_needs_wakeup(&f->v), 0); /* awake: no doorbell */
	assert_int_equal(pd_stat_get(&r->doorbells), 0);
	assert_int_equal(pd_ring_sleep_prepare(&f->v), 1); /* empty: sleep */
	assert_int_equal(atomic_load(&r->need_wakeup), 1);
	assert_int_equal(pd_stat_get(&r->sleeps), 1);
	assert_int_equal(pd_ring_needs_wakeup(&f->v), 1);
	assert_int_equal(pd_stat_get(&r->doorbells), 1);
	assert_int_equal(pd_ring_needs_wakeup(&f->v), 1); /* until it wakes */
	assert_int_equal(pd_stat_get(&r->doorbells), 2);
	pd_ring_sleep_done(&f->v);
	assert_int_equal(atomic_load(&r->need_wakeup), 0);
	assert_int_equal(pd_ring_needs_wakeup(&f->v), 0);
	assert_int_equal(pd_stat_get(&r->doorbells), 2);
	assert_int_equal(pd_ring_enqueue_bulk_sp(&f->v, &e, 1), 1);
	assert_int_equal(pd_ring_sleep_prepare(&f->v), 0); /* an entry: don't sleep */
	assert_int_equal(atomic_load(&r->need_wakeup), 0);
	assert_int_equal(pd_stat_get(&r->sleeps), 1);
	assert_int_equal(pd_ring_needs_wakeup(&f->v), 0);
}

/* ---- cross-process ---------------------------------------------------------- */

/* Producer hook: ring the doorbell only when the consumer sleeps. */
static int db_ring(struct stream_side *d, struct pd_ring_view *v)
{
	uint64_t one = 1;

	if (!pd_ring_needs_wakeup(v))
		return 0;
	return write(d->s->efd, &one, sizeof(one)) == (ssize_t)sizeof(one) ? 0 : -EIO;
}

static int db_wait(int efd, struct stream_stats *st)
{
	struct pollfd p = { .fd = efd, .events = POLLIN };
	uint64_t cnt;
	int rc = poll(&p, 1, DB_POLL_MS);

	st->sleeps++;
	if (rc == 0) {
		st->timeouts++;
		return 0;
	}
	if (rc < 0)
		return errno == EINTR ? 0 : -errno;
	if (read(efd, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN)
		return -errno;
	return 0;
}

/* Consumer hook, ring empty: sleep only if the handshake says so. */
static int db_sleep(struct stream_side *d, struct pd_ring_view *v)
{
	int rc;

	if (!pd_ring_sleep_prepare(v))
		return 0;
	rc = db_wait(d->s->efd, &d->st);
	pd_ring_sleep_done(v);
	return rc;
}

static int xp_child(void *arg)
{
	return -stream_side_run(arg);
}

/* A child produces f->s into the ring, this process consumes it; all bounded
 * by the stream's deadline. Returns the consumer's stats. */
static struct stream_stats xp_run(struct ring_fx *f, stream_fn *prod_hook, stream_fn *cons_hook,
				  uint32_t timeout_ms)
{
	struct stream_side prod = { .run = stream_produce, .hook = prod_hook, .s = f->s,
				    .r = f->r, .len = f->len };
	struct stream_side cons = { .run = stream_consume, .hook = cons_hook, .s = f->s,
				    .r = f->r, .len = f->len };
	pid_t pid = pd_test_fork(xp_child, &prod);
	int wrc;

	assert_true(pid > 0);
	(void)stream_side_run(&cons);
	wrc = pd_test_wait(pid, cons.rc == 0 ? XP_REAP_MS : timeout_ms);
	if (cons.rc == -EILSEQ)
		print_error("entry %llu: got %#llx\n", (unsigned long long)cons.st.done,
			    (unsigned long long)cons.st.bad);
	assert_int_equal(cons.rc, 0);
	assert_int_equal(wrc, 0);
	assert_int_equal(cons.st.done, f->s->n);
	return cons.st;
}

static void test_xproc_order_10m(void **state)
{
	struct ring_fx *f = *state;
	uint64_t t0 = pd_now_ns();

	stream_init(f->s, XP_ENTRIES, XP_BATCH, 0, -1, XP_TIMEOUT_MS);
	(void)xp_run(f, NULL, NULL, XP_TIMEOUT_MS);
	print_message("    %llu entries across processes in %.2f s\n",
		      (unsigned long long)XP_ENTRIES, (double)(pd_now_ns() - t0) / 1e9);
	assert_int_equal(pd_ring_count(&f->v), 0);
}

static void test_xproc_doorbell(void **state)
{
	struct ring_fx *f = *state;
	int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	struct stream_stats st;

	assert_true(efd >= 0);
	stream_init(f->s, DB_ENTRIES, DB_BATCH, DB_PACE, efd, DB_TIMEOUT_MS);
	st = xp_run(f, db_ring, db_sleep, DB_TIMEOUT_MS);
	(void)close(efd);
	print_message("    %llu sleeps, %llu doorbells, %llu lost wake-ups\n",
		      (unsigned long long)st.sleeps,
		      (unsigned long long)pd_stat_get(&f->r->doorbells),
		      (unsigned long long)st.timeouts);
	assert_int_equal(st.timeouts, 0);
	assert_true(st.sleeps > 0);
	assert_int_equal(pd_stat_get(&f->r->sleeps), st.sleeps);
	assert_true(pd_stat_get(&f->r->doorbells) > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_memsize_rejects),
		cmocka_unit_test_setup_teardown(test_init_rejects, setup_16x8, teardown),
		cmocka_unit_test_setup_teardown(test_check_rejects, setup_16x8, teardown),
		cmocka_unit_test_setup_teardown(test_view_init_header_race, setup_16x8, teardown),
		cmocka_unit_test(test_corrupt_index_after_view),
		cmocka_unit_test_setup_teardown(test_corrupt_geometry_after_view, setup_16x8,
						teardown),
		cmocka_unit_test_setup_teardown(test_bulk_vs_burst, setup_16x8, teardown),
		cmocka_unit_test_setup_teardown(test_enq_full_counter, setup_16x8, teardown),
		cmocka_unit_test_setup_teardown(test_wrap_esize64, setup_16x64, teardown),
		cmocka_unit_test_setup_teardown(test_index_u32_wrap, setup_16x8, teardown),
		cmocka_unit_test_setup_teardown(test_wakeup_handshake, setup_16x8, teardown),
		cmocka_unit_test_setup_teardown(test_xproc_order_10m, setup_1024x8, teardown),
		cmocka_unit_test_setup_teardown(test_xproc_doorbell, setup_1024x8, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
