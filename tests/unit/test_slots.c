/* SPDX-License-Identifier: MIT */
/*
 * Slot pool (shm/pd_slots.c, shm/pd_slots_alloc.c) in one process:
 * geometry and corrupt headers, argument checks, all-or-nothing allocation,
 * stale references, counters, reclaim. The cross-process tests are in
 * test_slots_mp.c; the fixture both use is slots_fixture.h.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "slots_fixture.h"

/* ---- helpers ---------------------------------------------------------------- */

/* A refused free or hand-over changes nothing. */
static void expect_stale(struct fx *f, const pd_slot_ref *refs, uint32_t n)
{
	uint32_t nfree = pd_pool_nfree(&f->p);
	uint64_t frees = STAT(f, frees);

	assert_int_equal(pd_pool_free(&f->p, refs, n), -ESTALE);
	assert_int_equal(pd_pool_set_state(&f->p, refs, n, 42, PD_SLOT_QUEUED), -ESTALE);
	assert_int_equal(pd_pool_nfree(&f->p), nfree);
	assert_int_equal(STAT(f, frees), frees);
}

/* Waiter entries 0..n-1 of owner 99 (this process) for k slots each, last
 * seen at seen_ns. */
static void put_waiters(struct fx *f, uint32_t n, uint32_t k, uint64_t seen_ns)
{
	struct pd_pool_shm *s = f->p.shm;

	assert_true(pd_pool_lock(&f->p, 1, pd_deadline_ms(1000)) >= 0);
	for (uint32_t i = 0; i < n; i++)
		s->waiters[i] = (struct pd_pool_waiter){ .ticket = s->next_ticket++, .owner = 99,
							 .pid = (int32_t)getpid(), .n = k,
							 .seen_ns = seen_ns };
	s->nwaiters = n;
	pd_pool_unlock(&f->p);
}

/* ---- negative --------------------------------------------------------------- */

static void test_sizes_negative(void **state)
{
	(void)state;
	assert_int_equal(pd_pool_memsize(0), -EINVAL);
	assert_int_equal(pd_pool_memsize(PD_POOL_MAX_SLOTS + 1), -EINVAL);
	assert_true(pd_pool_memsize(1) > (int64_t)sizeof(struct pd_pool_shm));
	assert_true(pd_pool_memsize(PD_POOL_MAX_SLOTS) >
		    (int64_t)PD_POOL_MAX_SLOTS * (int64_t)sizeof(struct pd_slot_desc));
	assert_int_equal(pd_pool_arena_size(0, SLOT_SZ), -EINVAL);
	assert_int_equal(pd_pool_arena_size(PD_POOL_MAX_SLOTS + 1, SLOT_SZ), -EINVAL);
	assert_int_equal(pd_pool_arena_size(8, 0), -EINVAL);
	assert_int_equal(pd_pool_arena_size(8, 100), -EINVAL);
	assert_int_equal(pd_pool_arena_size(8, SLOT_SZ + 512), -EINVAL);
	assert_int_equal(pd_pool_arena_size(8, SLOT_SZ), 8 * SLOT_SZ);
	assert_int_equal(pd_pool_arena_size(PD_POOL_MAX_SLOTS, 2 * SLOT_SZ),
			 (int64_t)PD_POOL_MAX_SLOTS * 2 * SLOT_SZ);
}

static void test_init_negative(void **state)
{
	size_t need = (size_t)pd_pool_memsize(8), len = need + PD_CACHE_LINE;
	uint8_t *mem = pd_test_shared_alloc(len);
	struct pd_pool p;

	(void)state;
	assert_non_null(mem);
	assert_int_equal(pd_pool_init(NULL, len, 8, SLOT_SZ), -EINVAL);
	assert_int_equal(pd_pool_init(mem, len, 0, SLOT_SZ), -EINVAL);
	assert_int_equal(pd_pool_init(mem, len, PD_POOL_MAX_SLOTS + 1, SLOT_SZ), -EINVAL);
	assert_int_equal(pd_pool_init(mem, len, 8, 1000), -EINVAL);
	assert_int_equal(pd_pool_init(mem, len, 8, 0), -EINVAL);
	assert_int_equal(pd_pool_init(mem + 8, len - 8, 8, SLOT_SZ), -EINVAL);
	assert_int_equal(pd_pool_init(mem, need - 1, 8, SLOT_SZ), -ENOSPC);
	assert_int_equal(pd_pool_init(mem, 0, 8, SLOT_SZ), -ENOSPC);
	/* No failed init left a pool behind. */
	assert_int_equal(pd_pool_open(&p, mem, len, NULL, 0), -EPROTO);
	assert_int_equal(pd_pool_init(mem, need, 8, SLOT_SZ), 0);
	assert_int_equal(pd_pool_open(&p, mem, need, NULL, 0), 0);
	assert_int_equal(p.nslots, 8);
	assert_int_equal(pd_pool_nfree(&p), 8);
	pd_test_shared_free(mem, len);
}

/* Write bad into a header field, expect open() to refuse, restore. */
static void corrupt32(struct fx *f, uint32_t *field, uint32_t bad)
{
	uint32_t good = *field;
	struct pd_pool q;

	*field = bad;
	assert_int_equal(pd_pool_open(&q, f->mem, f->len, f->arena, f->arena_len), -EPROTO);
	*field = good;
}

static void corrupt64(struct fx *f, uint64_t *field, uint64_t bad)
{
	uint64_t good = *field;
	struct pd_pool q;

	*field = bad;
	assert_int_equal(pd_pool_open(&q, f->mem, f->len, f->arena, f->arena_len), -EPROTO);
	*field = good;
}

static void test_open_negative(void **state)
{
	struct fx *f = *state;
	struct pd_pool_shm *s = f->p.shm;
	uint8_t *mem = f->mem;
	struct pd_pool q;

	assert_int_equal(pd_pool_open(NULL, mem, f->len, NULL, 0), -EINVAL);
	assert_int_equal(pd_pool_open(&q, NULL, f->len, NULL, 0), -EINVAL);
	assert_int_equal(pd_pool_open(&q, mem, sizeof(*s) - 1, NULL, 0), -EPROTO);
	assert_int_equal(pd_pool_open(&q, mem, f->len - 1, NULL, 0), -EPROTO);
	assert_int_equal(pd_pool_open(&q, mem + 8, f->len - 8, NULL, 0), -EPROTO);
	corrupt32(f, &s->magic, PD_POOL_MAGIC ^ 1u);
	corrupt32(f, &s->nslots, 1000);       /* the region holds 8 */
	corrupt32(f, &s->nslots, 0);
	corrupt32(f, &s->nslots, UINT32_MAX);
	corrupt64(f, &s->free_off, s->free_off + 8);
	corrupt64(f, &s->desc_off, s->desc_off + PD_CACHE_LINE);
	corrupt64(f, &s->desc_off, 0);
	corrupt64(f, &s->slot_size, 100);
	corrupt64(f, &s->slot_size, 0);
	assert_int_equal(pd_pool_open(&q, mem, f->len, f->arena, f->arena_len - 1), -EPROTO);
	assert_int_equal(pd_pool_open(&q, mem, f->len, f->arena, 0), -EPROTO);
	/* Restored: opens again; without an arena there is no payload access. */
	assert_int_equal(pd_pool_open(&q, mem, f->len, f->arena, f->arena_len), 0);
	assert_int_equal(pd_pool_open(&q, mem, f->len, NULL, 0), 0);
	assert_null(q.arena);
}

static void test_alloc_negative(void **state)
{
	struct fx *f = *state;
	struct pd_pool_who who = who_of(1, 1), bad = who;
	pd_slot_ref out[16];
	uint64_t t0;

	assert_int_equal(pd_pool_alloc(NULL, &who, 1, 0, out), -EINVAL);
	assert_int_equal(pd_pool_alloc(&f->p, NULL, 1, 0, out), -EINVAL);
	assert_int_equal(pd_pool_alloc(&f->p, &who, 1, 0, NULL), -EINVAL);
	assert_int_equal(pd_pool_alloc(&f->p, &who, 0, 0, out), -EINVAL);
	bad.state = PD_SLOT_FREE;
	assert_int_equal(pd_pool_alloc(&f->p, &bad, 1, 0, out), -EINVAL);
	bad.state = PD_SLOT_STATE_MAX + 1;
	assert_int_equal(pd_pool_alloc(&f->p, &bad, 1, 0, out), -EINVAL);
	assert_int_equal(STAT(f, refused), 0);
	/* More than the pool has: refused at once, however long the deadline. */
	t0 = pd_now_ns();
	assert_int_equal(pd_pool_alloc(&f->p, &who, f->nslots + 1, pd_deadline_ms(10000), out),
			 -E2BIG);
	assert_true(pd_now_ns() - t0 < 100 * PD_NS_PER_MS);
	assert_int_equal(pd_pool_alloc(&f->p, &who, UINT32_MAX, 0, out), -E2BIG);
	assert_int_equal(STAT(f, refused), 2);
	assert_int_equal(pd_pool_nfree(&f->p), f->nslots);
	assert_int_equal(STAT(f, allocs), 0);
	assert_int_equal(pd_pool_nfree(NULL), 0);
	assert_int_equal(pd_pool_cancel(NULL, 1), -EINVAL);
	assert_int_equal(pd_pool_reclaim(NULL, 1), -EINVAL);
	assert_int_equal(pd_pool_lock(NULL, 1, 0), -EINVAL);
	assert_int_equal(pd_pool_desc_get(&f->p, f->nslots, &(struct pd_slot_desc){ 0 }), -EINVAL);
	assert_int_equal(pd_pool_desc_get(&f->p, 0, NULL), -EINVAL);
	assert_null(pd_pool_data(NULL, PD_SLOT_REF(0, 1)));
}

static void test_alloc_exhaustion(void **state)
{
	struct fx *f = *state;
	struct pd_pool_who who = who_of(1, 1);
	pd_slot_ref out[8], one;
	uint64_t deadline;

	alloc_ok(f, 1, f->nslots, out);
	assert_int_equal(pd_pool_nfree(&f->p), 0);
	assert_int_equal(pd_pool_alloc(&f->p, &who, 1, 0, &one), -ENOBUFS);
	assert_int_equal(STAT(f, refused), 1);
	deadline = pd_deadline_ms(50);
	assert_int_equal(pd_pool_alloc(&f->p, &who, 1, deadline, &one), -ETIMEDOUT);
	assert_true(pd_now_ns() >= deadline);
	assert_true(pd_now_ns() < deadline + 2 * PD_NS_PER_S);
	assert_int_equal(STAT(f, waits), 1);
	assert_int_equal(STAT(f, timeouts), 1);
	assert_int_equal(STAT(f, refused), 1); /* a timeout is not a refusal */
	assert_true(STAT(f, wait_max_ns) >= 50 * PD_NS_PER_MS);
	assert_int_equal(nwaiters(&f->p), 0); /* the waiter left the queue */
	/* A free makes the pool usable again, non-blocking. */
	assert_int_equal(pd_pool_free(&f->p, out, 1), 0);
	assert_int_equal(pd_pool_alloc(&f->p, &who, 1, 0, &one), 0);
}

static void test_free_negative(void **state)
{
	struct fx *f = *state;
	pd_slot_ref a[4], fresh, bad[3];
	struct pd_slot_desc d;

	alloc_ok(f, 1, 4, a);
	assert_int_equal(pd_pool_free(NULL, a, 1), -EINVAL);
	assert_int_equal(pd_pool_free(&f->p, NULL, 1), -EINVAL);
	assert_int_equal(pd_pool_free(&f->p, a, f->nslots + 1), -EINVAL);
	assert_int_equal(pd_pool_set_state(&f->p, a, 1, 2, PD_SLOT_FREE), -EINVAL);
	assert_int_equal(pd_pool_set_state(&f->p, a, 1, 2, PD_SLOT_STATE_MAX + 1), -EINVAL);
	/* An older generation: a[0] freed and its slot handed out again. */
	assert_int_equal(pd_pool_free(&f->p, &a[0], 1), 0);
	alloc_ok(f, 1, 1, &fresh);
	assert_int_equal(PD_SLOT_REF_IDX(fresh), PD_SLOT_REF_IDX(a[0]));
	bad[0] = a[1];
	bad[1] = a[0];
	expect_stale(f, bad, 2);
	/* A free slot, at its current generation. */
	assert_int_equal(pd_pool_desc_get(&f->p, f->nslots - 1, &d), 0);
	assert_int_equal(d.state, PD_SLOT_FREE);
	bad[1] = PD_SLOT_REF(f->nslots - 1, d.gen);
	expect_stale(f, bad, 2);
	/* Out of range. */
	bad[1] = PD_SLOT_REF(f->nslots, 1);
	expect_stale(f, bad, 2);
	bad[1] = PD_SLOT_REF(UINT32_MAX, PD_SLOT_REF_GEN(a[1]));
	expect_stale(f, bad, 2);
	/* The same ref twice in one call. */
	bad[1] = a[2];
	bad[2] = a[1];
	expect_stale(f, bad, 3);
	/* Nothing was changed by the refusals: owner kept, the refs still free. */
	assert_int_equal(pd_pool_desc_get(&f->p, PD_SLOT_REF_IDX(a[1]), &d), 0);
	assert_int_equal(d.owner, 1);
	assert_int_equal(d.state, PD_SLOT_LOANED);
	assert_non_null(pd_pool_data(&f->p, a[1]));
	assert_int_equal(pd_pool_free(&f->p, &a[1], 2), 0);
	assert_int_equal(pd_pool_free(&f->p, &a[1], 1), -ESTALE); /* twice */
	assert_int_equal(pd_pool_free(&f->p, &a[3], 1), 0);
	assert_int_equal(pd_pool_free(&f->p, &fresh, 1), 0);
	assert_int_equal(pd_pool_nfree(&f->p), f->nslots);
}

/* The waiter table full: -EAGAIN at once, even with a deadline. */
static void test_waiters_full(void **state)
{
	struct fx *f = *state;
	struct pd_pool_who who = who_of(1, 1);
	pd_slot_ref r;
	uint64_t t0;

	put_waiters(f, PD_POOL_MAX_WAITERS, 1, pd_now_ns()); /* running */
	t0 = pd_now_ns();
	assert_int_equal(pd_pool_alloc(&f->p, &who, 1, pd_deadline_ms(5000), &r), -EAGAIN);
	assert_true(pd_now_ns() - t0 < PD_NS_PER_S);
	assert_int_equal(STAT(f, refused), 1);
	/* A reclaim drops the owner's waits. */
	assert_int_equal(pd_pool_reclaim(&f->p, 99), 0);
	assert_int_equal(nwaiters(&f->p), 0);
	assert_int_equal(pd_pool_alloc(&f->p, &who, 1, pd_deadline_ms(1000), &r), 0);
}

/* A waiter entry whose time is far ahead of the clock (written by a
 * process with a pool mapping, not by a waiter) does not hold the head:
 * an allocation behind it is served at once. */
static void test_waiter_from_the_future_passed_over(void **state)
{
	struct fx *f = *state;
	struct pd_pool_who who = who_of(1, 1);
	pd_slot_ref r;
	uint64_t t0;

	put_waiters(f, 1, f->nslots, pd_now_ns() + 3600 * PD_NS_PER_S);
	t0 = pd_now_ns();
	assert_int_equal(pd_pool_alloc(&f->p, &who, 1, pd_deadline_ms(5000), &r), 0);
	assert_true(pd_now_ns() - t0 < PD_NS_PER_S);
}

/* ---- functional ------------------------------------------------------------- */

static int gone_after_two(void *ctx)
{
	uint32_t *calls = ctx;

	return ++*calls >= 2 ? -ENOTCONN : 0;
}

/* The caller's check ends a wait early with its error (the broker died). */
static void test_wait_ends_when_check_fails(void **state)
{
	struct fx *f = *state;
	struct pd_pool_who who = who_of(2, 2);
	pd_slot_ref r[8];
	uint32_t calls = 0;
	uint64_t t0;

	alloc_ok(f, 1, f->nslots, r);
	who.check = gone_after_two;
	who.check_ctx = &calls;
	t0 = pd_now_ns();
	assert_int_equal(pd_pool_alloc(&f->p, &who, 1, pd_deadline_ms(10000), r), -ENOTCONN);
	assert_int_equal(calls, 2);
	assert_true(pd_now_ns() - t0 < 2 * PD_NS_PER_S);
	assert_int_equal(nwaiters(&f->p), 0);
	assert_int_equal(pd_pool_free(&f->p, r, f->nslots), 0);
}

static void test_alloc_descriptors(void **state)
{
	struct fx *f = *state;
	struct pd_pool_who who = { .owner = 7, .pid = (int32_t)getpid(), .tag = 0xabcdef,
				   .state = PD_SLOT_GRANTED };
	pd_slot_ref r[3];
	struct pd_slot_desc d;

	assert_int_equal(pd_pool_alloc(&f->p, &who, 3, 0, r), 0);
	for (uint32_t i = 0; i < 3; i++) {
		assert_int_equal(pd_pool_desc_get(&f->p, PD_SLOT_REF_IDX(r[i]), &d), 0);
		assert_int_equal(d.state, PD_SLOT_GRANTED);
		assert_int_equal(d.owner, 7);
		assert_int_equal(d.pid, getpid());
		assert_int_equal(d.tag, 0xabcdef);
		assert_int_equal(d.gen, PD_SLOT_REF_GEN(r[i]));
		assert_int_equal(d.gen, 1); /* first use */
		assert_int_equal(d.payload_off, (uint64_t)PD_SLOT_REF_IDX(r[i]) * SLOT_SZ);
		for (uint32_t j = 0; j < i; j++)
			assert_int_not_equal(PD_SLOT_REF_IDX(r[i]), PD_SLOT_REF_IDX(r[j]));
	}
	assert_int_equal(pd_pool_nfree(&f->p), f->nslots - 3);
}

static void test_gen_reuse(void **state)
{
	struct fx *f = *state;
	pd_slot_ref old, cur;
	uint32_t idx;

	alloc_ok(f, 1, 1, &old);
	idx = PD_SLOT_REF_IDX(old);
	for (uint32_t round = 0; round < 3; round++) {
		assert_int_equal(pd_pool_free(&f->p, &old, 1), 0);
		assert_null(pd_pool_data(&f->p, old)); /* free: no payload */
		alloc_ok(f, 1, 1, &cur);
		assert_int_equal(PD_SLOT_REF_IDX(cur), idx);
		assert_int_equal(PD_SLOT_REF_GEN(cur), PD_SLOT_REF_GEN(old) + 1);
		assert_null(pd_pool_data(&f->p, old));
		assert_non_null(pd_pool_data(&f->p, cur));
		assert_int_equal(pd_pool_free(&f->p, &old, 1), -ESTALE);
		old = cur;
	}
	/* The generation wraps: UINT32_MAX -> 0, and the old ref is stale. */
	assert_int_equal(pd_pool_free(&f->p, &old, 1), 0);
	f->p.desc[idx].gen = UINT32_MAX;
	old = PD_SLOT_REF(idx, UINT32_MAX);
	alloc_ok(f, 1, 1, &cur);
	assert_int_equal(PD_SLOT_REF_IDX(cur), idx);
	assert_int_equal(PD_SLOT_REF_GEN(cur), 0);
	assert_non_null(pd_pool_data(&f->p, cur));
	assert_null(pd_pool_data(&f->p, old));
	assert_int_equal(pd_pool_free(&f->p, &old, 1), -ESTALE);
	assert_int_equal(pd_pool_free(&f->p, &cur, 1), 0);
}

static void test_data_layout(void **state)
{
	struct fx *f = *state;
	pd_slot_ref r[8];
	uint8_t *arena = f->arena;
	struct pd_pool q;

	alloc_ok(f, 1, f->nslots, r);
	for (uint32_t i = 0; i < f->nslots; i++) {
		uint32_t idx = PD_SLOT_REF_IDX(r[i]);
		uint8_t *d = pd_pool_data(&f->p, r[i]);

		assert_ptr_equal(d, arena + (size_t)idx * SLOT_SZ);
		memset(d, (int)(0xa0 + idx), SLOT_SZ);
	}
	for (uint32_t i = 0; i < f->nslots; i++) {
		const uint8_t *d = pd_pool_data(&f->p, r[i]);
		uint8_t want = (uint8_t)(0xa0 + PD_SLOT_REF_IDX(r[i]));

		assert_int_equal(d[0], want);
		assert_int_equal(d[SLOT_SZ - 1], want);
	}
	/* A handle without an arena gives no payload. */
	assert_int_equal(pd_pool_open(&q, f->mem, f->len, NULL, 0), 0);
	assert_null(pd_pool_data(&q, r[0]));
}

static void test_set_state_handover(void **state)
{
	struct fx *f = *state;
	pd_slot_ref r[2];
	struct pd_slot_desc d;

	alloc_ok(f, 1, 2, r);
	assert_int_equal(pd_pool_set_state(&f->p, r, 2, 5, PD_SLOT_QUEUED), 0);
	for (uint32_t i = 0; i < 2; i++) {
		assert_int_equal(pd_pool_desc_get(&f->p, PD_SLOT_REF_IDX(r[i]), &d), 0);
		assert_int_equal(d.owner, 5);
		assert_int_equal(d.state, PD_SLOT_QUEUED);
		assert_int_equal(d.gen, PD_SLOT_REF_GEN(r[i])); /* same loan, same ref */
		assert_non_null(pd_pool_data(&f->p, r[i]));
	}
	assert_int_equal(pd_pool_set_state(&f->p, r, 1, 5, PD_SLOT_IN_FLIGHT), 0);
	assert_int_equal(pd_pool_desc_get(&f->p, PD_SLOT_REF_IDX(r[0]), &d), 0);
	assert_int_equal(d.state, PD_SLOT_IN_FLIGHT);
	/* The old owner has nothing left; the new one has both. */
	assert_int_equal(pd_pool_reclaim(&f->p, 1), 0);
	assert_int_equal(pd_pool_reclaim(&f->p, 5), 2);
	assert_null(pd_pool_data(&f->p, r[0]));
	assert_int_equal(pd_pool_set_state(&f->p, r, 2, 6, PD_SLOT_QUEUED), -ESTALE);
	assert_int_equal(pd_pool_nfree(&f->p), f->nslots);
}

static void test_counters(void **state)
{
	struct fx *f = *state;
	struct pd_pool_who who = who_of(1, 1);
	pd_slot_ref a[3], b[2], c[8];

	assert_int_equal(STAT(f, in_use), 0);
	alloc_ok(f, 1, 3, a);
	alloc_ok(f, 1, 2, b);
	assert_int_equal(STAT(f, in_use), 5);
	assert_int_equal(STAT(f, high_water), 5);
	assert_int_equal(STAT(f, allocs), 2);
	assert_int_equal(pd_pool_free(&f->p, a, 3), 0);
	assert_int_equal(STAT(f, in_use), 2);
	assert_int_equal(STAT(f, high_water), 5);
	assert_int_equal(STAT(f, frees), 3);
	assert_int_equal(pd_pool_alloc(&f->p, &who, 9, 0, c), -E2BIG);
	assert_int_equal(pd_pool_alloc(&f->p, &who, 7, 0, c), -ENOBUFS);
	assert_int_equal(STAT(f, refused), 2);
	assert_int_equal(pd_pool_alloc(&f->p, &who, 7, pd_deadline_ms(20), c), -ETIMEDOUT);
	assert_int_equal(STAT(f, waits), 1);
	assert_int_equal(STAT(f, timeouts), 1);
	assert_true(STAT(f, wait_ns) >= 20 * PD_NS_PER_MS);
	assert_int_equal(STAT(f, allocs), 2); /* failures are not allocations */
	alloc_ok(f, 1, 6, c);
	assert_int_equal(STAT(f, in_use), 8);
	assert_int_equal(STAT(f, high_water), 8);
	assert_int_equal(pd_pool_free(&f->p, b, 2), 0);
	assert_int_equal(pd_pool_free(&f->p, c, 6), 0);
	assert_int_equal(STAT(f, frees), 11);
	assert_int_equal(STAT(f, in_use), 0);
	assert_int_equal(STAT(f, cancels), 0);
	assert_int_equal(STAT(f, reclaimed), 0);
	assert_int_equal(STAT(f, repairs), 0);
}

static void test_reclaim(void **state)
{
	struct fx *f = *state;
	pd_slot_ref a[2], b[3], c[1], rest[8];

	alloc_ok(f, 1, 2, a);
	alloc_ok(f, 2, 3, b);
	alloc_ok(f, 1, 1, c);
	assert_int_equal(pd_pool_reclaim(&f->p, 1), 3);
	assert_int_equal(pd_pool_nfree(&f->p), f->nslots - 3);
	assert_int_equal(STAT(f, reclaimed), 3);
	assert_int_equal(STAT(f, in_use), 3);
	assert_null(pd_pool_data(&f->p, a[0]));
	assert_null(pd_pool_data(&f->p, c[0]));
	assert_int_equal(pd_pool_free(&f->p, a, 2), -ESTALE);
	for (uint32_t i = 0; i < 3; i++)
		assert_non_null(pd_pool_data(&f->p, b[i]));
	assert_int_equal(pd_pool_reclaim(&f->p, 1), 0);
	assert_int_equal(pd_pool_reclaim(&f->p, 77), 0);
	/* The freed slots are usable: all the rest at once. */
	alloc_ok(f, 3, f->nslots - 3, rest);
	assert_int_equal(pd_pool_reclaim(&f->p, 3), (int)f->nslots - 3);
	assert_int_equal(pd_pool_free(&f->p, b, 3), 0);
	assert_int_equal(pd_pool_nfree(&f->p), f->nslots);
}

/* The free count lives in shared memory, where any attached process may
 * write it: one that leaves no room for the slots being freed (or points
 * far past the stack) is not trusted. The free succeeds, the stack is
 * rebuilt from the descriptors, and every slot is usable again. */
static void test_free_count_corrupt(void **state)
{
	static const uint32_t bad[] = { 7, 8, 0x40000000u, UINT32_MAX };
	struct fx *f = *state;
	pd_slot_ref a[2], all[8];

	for (uint32_t i = 0; i < PD_ARRAY_SIZE(bad); i++) {
		alloc_ok(f, 1, 2, a);
		f->p.shm->nfree = bad[i];
		assert_int_equal(pd_pool_free(&f->p, a, 2), 0);
		assert_int_equal(f->p.shm->nfree, f->nslots);
		alloc_ok(f, 1, f->nslots, all);
		assert_int_equal(pd_pool_free(&f->p, all, f->nslots), 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes_negative),
		cmocka_unit_test(test_init_negative),
		POOL_TEST(test_open_negative, 8),
		POOL_TEST(test_alloc_negative, 8),
		POOL_TEST(test_alloc_exhaustion, 8),
		POOL_TEST(test_free_negative, 8),
		POOL_TEST(test_waiters_full, 8),
		POOL_TEST(test_waiter_from_the_future_passed_over, 8),
		POOL_TEST(test_wait_ends_when_check_fails, 8),
		POOL_TEST(test_alloc_descriptors, 8),
		POOL_TEST(test_gen_reuse, 8),
		POOL_TEST(test_data_layout, 8),
		POOL_TEST(test_set_state_handover, 8),
		POOL_TEST(test_counters, 8),
		POOL_TEST(test_reclaim, 8),
		POOL_TEST(test_free_count_corrupt, 8),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
