/* SPDX-License-Identifier: MIT */
/*
 * Slot pool (shm/pd_slots.c, shm/pd_slots_alloc.c): geometry and corrupt
 * headers, argument checks, all-or-nothing allocation, stale references,
 * counters, reclaim; then several processes on one pool: no slot handed out
 * twice, a holder killed with the mutex held, wake-up, FIFO order, cancel,
 * a dead waiter. Children never assert: they _exit() with a code.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../support/pd_test.h"
#include "pd_slots.h"
#include "pd_time.h"

#define SLOT_SZ    4096u
#define MAX_BATCH  8u
#define CHILD_MS   10000u /* bound on any child's life */

/* Exit codes of children besides 0 and an errno (1..133). */
#define CHILD_DOUBLE  201 /* a slot handed to two holders at once */
#define CHILD_HOLDER  202 /* holder mark not ours when freeing */
#define CHILD_PATTERN 203 /* payload changed under its owner */
#define CHILD_IDLE    204 /* the hammer did (almost) nothing */
#define CHILD_ORDER   205 /* FIFO order broken */
#define CHILD_SLOW    206 /* a wake-up came far too late */
#define CHILD_BADREF  207 /* a fresh ref without payload */

/* Shared between the parent and its children. */
struct xshm {
	_Atomic uint32_t ready;
	_Atomic uint32_t seq;      /* completion order source */
	_Atomic uint32_t order[4]; /* completion rank per child (1-based) */
	_Atomic uint64_t wait_ns;
};

struct fx {
	void *mem;
	size_t len;
	void *arena;
	size_t arena_len;
	struct xshm *x;
	uint32_t nslots;
	struct pd_pool p;
	pid_t kids[8]; /* children not yet reaped: killed in teardown */
};

/* What a child does; arg of pd_test_fork(). */
struct job {
	struct fx *f;
	uint32_t id;     /* owner id, and holder mark in the hammer */
	uint32_t n;      /* slots to ask for */
	uint64_t tag;
	uint32_t timeout_ms;
	_Atomic uint32_t *holder; /* hammer only */
};

static uint32_t pool8 = 8;
static uint32_t pool64 = 64;

/* ---- helpers ---------------------------------------------------------------- */

static void sleep_ms(uint32_t ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static struct pd_pool_who who_of(uint32_t owner, uint64_t tag)
{
	return (struct pd_pool_who){ .owner = owner, .pid = (int32_t)getpid(), .tag = tag,
				     .state = PD_SLOT_LOANED };
}

#define STAT(f, name) pd_stat_get(&(f)->p.shm->stats.name)

static void fx_destroy(struct fx *f)
{
	if (!f)
		return;
	pd_test_shared_free(f->mem, f->len);
	pd_test_shared_free(f->arena, f->arena_len);
	pd_test_shared_free(f->x, sizeof(*f->x));
	free(f);
}

/* A fresh, opened pool of nslots in memory children inherit. */
static struct fx *fx_create(uint32_t nslots)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->nslots = nslots;
	f->len = (size_t)pd_pool_memsize(nslots);
	f->arena_len = (size_t)pd_pool_arena_size(nslots, SLOT_SZ);
	f->mem = pd_test_shared_alloc(f->len);
	f->arena = pd_test_shared_alloc(f->arena_len);
	f->x = pd_test_shared_alloc(sizeof(*f->x));
	if (!f->mem || !f->arena || !f->x ||
	    pd_pool_init(f->mem, f->len, nslots, SLOT_SZ) != 0 ||
	    pd_pool_open(&f->p, f->mem, f->len, f->arena, f->arena_len) != 0) {
		fx_destroy(f);
		return NULL;
	}
	return f;
}

/* prestate: a uint32_t slot count. */
static int fx_setup(void **state)
{
	struct fx *f = fx_create(*(uint32_t *)*state);

	*state = f;
	return f ? 0 : -1;
}

/* A failed assert skips the test's own waits: no child may outlive it. */
static int fx_teardown(void **state)
{
	struct fx *f = *state;

	for (uint32_t i = 0; i < PD_ARRAY_SIZE(f->kids); i++)
		if (f->kids[i] > 0)
			(void)pd_test_wait(f->kids[i], 0);
	fx_destroy(f);
	return 0;
}

/* The pool's waiter count, read under its lock. */
static uint32_t nwaiters(struct pd_pool *p)
{
	uint32_t n;

	if (pd_pool_lock(p, PD_POOL_OWNER_NONE, pd_deadline_ms(1000)) < 0)
		return UINT32_MAX;
	n = p->shm->nwaiters;
	pd_pool_unlock(p);
	return n;
}

static int wait_nwaiters(struct pd_pool *p, uint32_t n, uint32_t timeout_ms)
{
	uint64_t deadline = pd_deadline_ms(timeout_ms);

	while (nwaiters(p) != n) {
		if (pd_now_ns() >= deadline)
			return -ETIMEDOUT;
		sleep_ms(1);
	}
	return 0;
}

static int wait_flag(_Atomic uint32_t *flag, uint32_t timeout_ms)
{
	uint64_t deadline = pd_deadline_ms(timeout_ms);

	while (!atomic_load(flag)) {
		if (pd_now_ns() >= deadline)
			return -ETIMEDOUT;
		sleep_ms(1);
	}
	return 0;
}

static void alloc_ok(struct fx *f, uint32_t owner, uint32_t n, pd_slot_ref *out)
{
	struct pd_pool_who who = who_of(owner, owner);

	assert_int_equal(pd_pool_alloc(&f->p, &who, n, 0, out), 0);
}

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

static pid_t fork_job(int (*fn)(void *), struct job *j)
{
	pid_t pid = pd_test_fork(fn, j);
	uint32_t i = 0;

	assert_true(pid > 0);
	while (i < PD_ARRAY_SIZE(j->f->kids) && j->f->kids[i] > 0)
		i++;
	if (i < PD_ARRAY_SIZE(j->f->kids))
		j->f->kids[i] = pid;
	return pid;
}

/* pd_test_wait() for a child of fork_job(). */
static int reap(struct fx *f, pid_t pid, uint32_t timeout_ms)
{
	for (uint32_t i = 0; i < PD_ARRAY_SIZE(f->kids); i++)
		if (f->kids[i] == pid)
			f->kids[i] = 0;
	return pd_test_wait(pid, timeout_ms);
}

static int child_code(int rc)
{
	return rc < 0 ? -rc : rc;
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
	struct pd_pool_shm *s = f->p.shm;
	struct pd_pool_who who = who_of(1, 1);
	pd_slot_ref r;
	uint64_t t0;

	assert_true(pd_pool_lock(&f->p, 1, pd_deadline_ms(1000)) >= 0);
	for (uint32_t i = 0; i < PD_POOL_MAX_WAITERS; i++)
		s->waiters[i] = (struct pd_pool_waiter){ .ticket = s->next_ticket++, .owner = 99,
							 .pid = (int32_t)getpid(), .n = 1 };
	s->nwaiters = PD_POOL_MAX_WAITERS;
	pd_pool_unlock(&f->p);
	t0 = pd_now_ns();
	assert_int_equal(pd_pool_alloc(&f->p, &who, 1, pd_deadline_ms(5000), &r), -EAGAIN);
	assert_true(pd_now_ns() - t0 < PD_NS_PER_S);
	assert_int_equal(STAT(f, refused), 1);
	/* A reclaim drops the owner's waits. */
	assert_int_equal(pd_pool_reclaim(&f->p, 99), 0);
	assert_int_equal(nwaiters(&f->p), 0);
	assert_int_equal(pd_pool_alloc(&f->p, &who, 1, pd_deadline_ms(1000), &r), 0);
}

/* ---- functional ------------------------------------------------------------- */

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

/* ---- processes: no slot handed out twice -------------------------------------- */

#define HAMMER_HELD  6u
#define HAMMER_ITERS 20000u
#define HAMMER_MS    1500u

struct batch {
	pd_slot_ref r[MAX_BATCH];
	uint32_t n;
	uint64_t token;
};

static void stamp(uint8_t *d, uint64_t token)
{
	memcpy(d, &token, sizeof(token));
	memcpy(d + SLOT_SZ / 2, &token, sizeof(token));
	memcpy(d + SLOT_SZ - sizeof(token), &token, sizeof(token));
}

static int stamp_ok(const uint8_t *d, uint64_t token)
{
	return !memcmp(d, &token, sizeof(token)) &&
	       !memcmp(d + SLOT_SZ / 2, &token, sizeof(token)) &&
	       !memcmp(d + SLOT_SZ - sizeof(token), &token, sizeof(token));
}

/* Mark the batch's slots as ours and stamp them; 0 or a child code. */
static int claim(struct pd_pool *p, const struct job *j, const struct batch *b)
{
	for (uint32_t i = 0; i < b->n; i++) {
		uint32_t idx = PD_SLOT_REF_IDX(b->r[i]);
		uint8_t *d = pd_pool_data(p, b->r[i]);

		if (!d)
			return CHILD_BADREF;
		if (atomic_exchange(&j->holder[idx], j->id) != 0)
			return CHILD_DOUBLE;
		stamp(d, b->token + i);
	}
	return 0;
}

/* Check the stamps and marks, unmark, free; 0 or a child code. */
static int release(struct pd_pool *p, const struct job *j, const struct batch *b)
{
	for (uint32_t i = 0; i < b->n; i++) {
		const uint8_t *d = pd_pool_data(p, b->r[i]);

		if (!d)
			return CHILD_BADREF;
		if (!stamp_ok(d, b->token + i))
			return CHILD_PATTERN;
		if (atomic_exchange(&j->holder[PD_SLOT_REF_IDX(b->r[i])], 0) != j->id)
			return CHILD_HOLDER;
	}
	return child_code(pd_pool_free(p, b->r, b->n));
}

/* Allocate one batch: deadline 0 or a few ms. 1 = none to be had now. */
static int grab(struct pd_pool *p, const struct job *j, struct batch *b, unsigned *seed)
{
	struct pd_pool_who who = who_of(j->id, j->id);
	uint64_t deadline = rand_r(seed) % 2 ? pd_deadline_ms(2) : 0;
	int rc;

	b->n = 1 + (uint32_t)rand_r(seed) % MAX_BATCH;
	rc = pd_pool_alloc(p, &who, b->n, deadline, b->r);
	if (rc == -ENOBUFS || rc == -ETIMEDOUT)
		return 1;
	return rc < 0 ? child_code(rc) : claim(p, j, b);
}

struct hammer {
	struct batch held[HAMMER_HELD]; /* a FIFO of batches: head, n */
	uint32_t head, n, done;
	uint64_t token;
	unsigned seed;
};

static int take_more(struct pd_pool *p, const struct job *j, struct hammer *h)
{
	struct batch *b = &h->held[(h->head + h->n) % HAMMER_HELD];
	int rc;

	b->token = h->token;
	h->token += MAX_BATCH;
	rc = grab(p, j, b, &h->seed);
	if (rc == 0) {
		h->n++;
		h->done++;
	}
	return rc;
}

static int give_back(struct pd_pool *p, const struct job *j, struct hammer *h)
{
	int rc = release(p, j, &h->held[h->head]);

	h->head = (h->head + 1) % HAMMER_HELD;
	h->n--;
	return rc;
}

/* Random batches, up to HAMMER_HELD held at once (more than the pool). */
static int hammer_loop(struct pd_pool *p, const struct job *j, struct hammer *h)
{
	uint64_t end = pd_deadline_ms(HAMMER_MS);
	int rc = 0;

	for (uint32_t it = 0; rc == 0 && it < HAMMER_ITERS && pd_now_ns() < end; it++) {
		if (h->n < HAMMER_HELD && rand_r(&h->seed) % 3) {
			rc = take_more(p, j, h);
			if (rc != 1)
				continue;
			rc = 0; /* none to be had now: give one back */
		}
		if (h->n)
			rc = give_back(p, j, h);
	}
	while (rc == 0 && h->n)
		rc = give_back(p, j, h);
	return rc ? rc : h->done < 100 ? CHILD_IDLE : 0;
}

static int child_hammer(void *arg)
{
	const struct job *j = arg;
	struct hammer h = { .token = (uint64_t)j->id << 48, .seed = j->id * 7919u };
	struct pd_pool p;
	int rc = pd_pool_open(&p, j->f->mem, j->f->len, j->f->arena, j->f->arena_len);

	return rc ? child_code(rc) : hammer_loop(&p, j, &h);
}

static void test_mp_no_double_handout(void **state)
{
	struct fx *f = *state;
	size_t hlen = f->nslots * sizeof(_Atomic uint32_t);
	_Atomic uint32_t *holder = pd_test_shared_alloc(hlen);
	struct job j[2];
	pid_t pid[2];

	assert_non_null(holder);
	for (uint32_t i = 0; i < 2; i++) {
		j[i] = (struct job){ .f = f, .id = i + 1, .holder = holder };
		pid[i] = fork_job(child_hammer, &j[i]);
	}
	for (uint32_t i = 0; i < 2; i++)
		assert_int_equal(reap(f, pid[i], CHILD_MS), 0);
	for (uint32_t i = 0; i < f->nslots; i++)
		assert_int_equal(atomic_load(&holder[i]), 0);
	assert_int_equal(pd_pool_nfree(&f->p), f->nslots);
	assert_int_equal(STAT(f, in_use), 0);
	assert_true(STAT(f, allocs) >= 200);
	assert_true(STAT(f, high_water) <= f->nslots);
	assert_int_equal(STAT(f, reclaimed), 0);
	assert_int_equal(nwaiters(&f->p), 0);
	pd_test_shared_free(holder, hlen);
}

/* ---- processes: a holder dies with the mutex held ----------------------------- */

static int child_die_locked(void *arg)
{
	const struct job *j = arg;
	struct pd_pool_who who = who_of(j->id, j->id);
	pd_slot_ref r[8];
	struct pd_pool p;
	int rc = pd_pool_open(&p, j->f->mem, j->f->len, j->f->arena, j->f->arena_len);

	if (rc == 0)
		rc = pd_pool_alloc(&p, &who, j->n, 0, r);
	if (rc == 0)
		rc = pd_pool_lock(&p, j->id, pd_deadline_ms(1000));
	if (rc != 0)
		return child_code(rc);
	atomic_store(&j->f->x->ready, 1);
	(void)raise(SIGKILL);
	return CHILD_SLOW; /* not reached */
}

static void test_mp_holder_killed(void **state)
{
	struct fx *f = *state;
	struct job j = { .f = f, .id = 2, .n = 3 };
	pd_slot_ref mine[2], rest[8];
	struct pd_pool_who who = who_of(1, 1);
	pid_t pid;

	alloc_ok(f, 1, 2, mine);
	pid = fork_job(child_die_locked, &j);
	assert_int_equal(wait_flag(&f->x->ready, CHILD_MS), 0);
	assert_int_equal(reap(f, pid, CHILD_MS), 128 + SIGKILL);
	/* The next locker repairs: the dead holder's 3 slots come back. */
	assert_int_equal(pd_pool_alloc(&f->p, &who, f->nslots - 2, pd_deadline_ms(2000), rest), 0);
	assert_int_equal(STAT(f, repairs), 1);
	assert_int_equal(STAT(f, reclaimed), 3);
	assert_int_equal(pd_pool_nfree(&f->p), 0);
	assert_non_null(pd_pool_data(&f->p, mine[0]));
	assert_non_null(pd_pool_data(&f->p, mine[1]));
	assert_int_equal(f->p.shm->lock_pid, 0);
	assert_int_equal(pd_pool_free(&f->p, rest, f->nslots - 2), 0);
	assert_int_equal(pd_pool_free(&f->p, mine, 2), 0);
	assert_int_equal(pd_pool_nfree(&f->p), f->nslots);
	assert_int_equal(STAT(f, in_use), 0);
}

/* ---- processes: waiting, FIFO, cancel ----------------------------------------- */

/* Allocate j->n slots within j->timeout_ms, record the wait and the
 * completion order, hold them 20 ms, free. Exit code: errno or 0. */
static int child_wait_alloc(void *arg)
{
	const struct job *j = arg;
	struct pd_pool_who who = who_of(j->id, j->tag);
	pd_slot_ref r[8];
	struct pd_pool p;
	uint64_t t0;
	int rc = pd_pool_open(&p, j->f->mem, j->f->len, j->f->arena, j->f->arena_len);

	if (rc)
		return child_code(rc);
	t0 = pd_now_ns();
	rc = pd_pool_alloc(&p, &who, j->n, pd_deadline_ms(j->timeout_ms), r);
	atomic_store(&j->f->x->wait_ns, pd_now_ns() - t0);
	if (rc)
		return child_code(rc);
	atomic_store(&j->f->x->order[j->id % 4], atomic_fetch_add(&j->f->x->seq, 1) + 1);
	sleep_ms(20); /* hold a while: a later waiter must not overtake */
	return child_code(pd_pool_free(&p, r, j->n));
}

static pid_t spawn_waiter(struct fx *f, struct job *j, uint32_t queued)
{
	pid_t pid = fork_job(child_wait_alloc, j);

	assert_int_equal(wait_nwaiters(&f->p, queued, CHILD_MS), 0);
	return pid;
}

static void test_mp_waiter_woken(void **state)
{
	struct fx *f = *state;
	struct job j = { .f = f, .id = 2, .n = 2, .tag = 2, .timeout_ms = 10000 };
	pd_slot_ref r[8];
	uint64_t waited;
	pid_t pid;

	alloc_ok(f, 1, f->nslots, r);
	pid = spawn_waiter(f, &j, 1);
	sleep_ms(100);
	assert_int_equal(pd_pool_free(&f->p, r, 2), 0);
	assert_int_equal(reap(f, pid, 3000), 0);
	waited = atomic_load(&f->x->wait_ns);
	assert_true(waited >= 50 * PD_NS_PER_MS);
	assert_true(waited < 2 * PD_NS_PER_S);
	assert_int_equal(STAT(f, waits), 1);
	assert_int_equal(STAT(f, timeouts), 0);
	assert_int_equal(pd_pool_free(&f->p, r + 2, f->nslots - 2), 0);
	assert_int_equal(pd_pool_nfree(&f->p), f->nslots);
}

static void test_mp_fifo(void **state)
{
	struct fx *f = *state;
	struct job a = { .f = f, .id = 1, .n = 8, .tag = 1, .timeout_ms = 10000 };
	struct job b = { .f = f, .id = 2, .n = 1, .tag = 2, .timeout_ms = 10000 };
	pd_slot_ref r[8];
	pid_t pa, pb;

	alloc_ok(f, 9, f->nslots, r);
	pa = spawn_waiter(f, &a, 1);
	pb = spawn_waiter(f, &b, 2);
	/* One slot free: B could use it, but A is the head. */
	assert_int_equal(pd_pool_free(&f->p, r, 1), 0);
	sleep_ms(100);
	assert_int_equal(pd_pool_nfree(&f->p), 1);
	assert_int_equal(atomic_load(&f->x->order[2]), 0);
	assert_int_equal(nwaiters(&f->p), 2);
	assert_int_equal(pd_pool_free(&f->p, r + 1, f->nslots - 1), 0);
	assert_int_equal(reap(f, pa, CHILD_MS), 0);
	assert_int_equal(reap(f, pb, CHILD_MS), 0);
	assert_int_equal(atomic_load(&f->x->order[1]), 1);
	assert_int_equal(atomic_load(&f->x->order[2]), 2);
	assert_int_equal(STAT(f, waits), 2);
	assert_int_equal(pd_pool_nfree(&f->p), f->nslots);
}

static void test_mp_cancel(void **state)
{
	struct fx *f = *state;
	struct job a = { .f = f, .id = 1, .n = 1, .tag = 0xc0ffee, .timeout_ms = 10000 };
	struct job b = { .f = f, .id = 2, .n = 1, .tag = 0xbeef, .timeout_ms = 10000 };
	pd_slot_ref r[8];
	pid_t pa, pb;

	alloc_ok(f, 9, f->nslots, r);
	pa = spawn_waiter(f, &a, 1);
	pb = spawn_waiter(f, &b, 2);
	assert_int_equal(pd_pool_cancel(&f->p, 0x1234), 0);
	assert_int_equal(pd_pool_cancel(&f->p, a.tag), 1);
	assert_int_equal(reap(f, pa, 2000), ECANCELED);
	assert_true(atomic_load(&f->x->wait_ns) < 2 * PD_NS_PER_S);
	assert_int_equal(STAT(f, cancels), 1);
	/* B is untouched: still queued, served by the next free. */
	assert_int_equal(nwaiters(&f->p), 1);
	assert_int_equal(pd_pool_free(&f->p, r, 1), 0);
	assert_int_equal(reap(f, pb, 2000), 0);
	assert_int_equal(atomic_load(&f->x->order[2]), 1);
	assert_int_equal(STAT(f, cancels), 1);
	assert_int_equal(pd_pool_free(&f->p, r + 1, f->nslots - 1), 0);
	assert_int_equal(pd_pool_nfree(&f->p), f->nslots);
}

/* ---- processes: a waiter killed while blocked --------------------------------- */

static int child_reclaim(void *arg)
{
	const struct job *j = arg;
	struct pd_pool p;
	int rc = pd_pool_open(&p, j->f->mem, j->f->len, NULL, 0);

	if (rc == 0)
		rc = pd_pool_reclaim(&p, j->id);
	return rc < 0 ? child_code(rc) : rc == 0 ? 0 : CHILD_HOLDER;
}

static void test_mp_dead_waiter(void **state)
{
	struct fx *f = *state;
	struct job dead = { .f = f, .id = 1, .n = 1, .tag = 1, .timeout_ms = 10000 };
	struct job live = { .f = f, .id = 2, .n = 1, .tag = 2, .timeout_ms = 10000 };
	pd_slot_ref r[8];
	pid_t pd, pl, broker;

	alloc_ok(f, 9, f->nslots, r);
	pd = spawn_waiter(f, &dead, 1);
	sleep_ms(20); /* let it block in the kernel */
	assert_int_equal(kill(pd, SIGKILL), 0);
	assert_int_equal(reap(f, pd, CHILD_MS), 128 + SIGKILL);
	pl = spawn_waiter(f, &live, 2);
	assert_int_equal(pd_pool_free(&f->p, r, 1), 0);
	/* The broker reclaims the dead owner (in a child: every wait bounded). */
	broker = fork_job(child_reclaim, &dead);
	assert_int_equal(reap(f, broker, 3000), 0);
	assert_int_equal(reap(f, pl, 3000), 0);
	assert_int_equal(atomic_load(&f->x->order[2]), 1);
	assert_int_equal(nwaiters(&f->p), 0);
	assert_int_equal(pd_pool_free(&f->p, r + 1, f->nslots - 1), 0);
	assert_int_equal(pd_pool_nfree(&f->p), f->nslots);
}

#define POOL_TEST(fn, n) cmocka_unit_test_prestate_setup_teardown(fn, fx_setup, fx_teardown, &(n))

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes_negative),
		cmocka_unit_test(test_init_negative),
		POOL_TEST(test_open_negative, pool8),
		POOL_TEST(test_alloc_negative, pool8),
		POOL_TEST(test_alloc_exhaustion, pool8),
		POOL_TEST(test_free_negative, pool8),
		POOL_TEST(test_waiters_full, pool8),
		POOL_TEST(test_alloc_descriptors, pool8),
		POOL_TEST(test_gen_reuse, pool8),
		POOL_TEST(test_data_layout, pool8),
		POOL_TEST(test_set_state_handover, pool8),
		POOL_TEST(test_counters, pool8),
		POOL_TEST(test_reclaim, pool8),
		POOL_TEST(test_mp_no_double_handout, pool64),
		POOL_TEST(test_mp_holder_killed, pool8),
		POOL_TEST(test_mp_waiter_woken, pool8),
		POOL_TEST(test_mp_fifo, pool8),
		POOL_TEST(test_mp_cancel, pool8),
		POOL_TEST(test_mp_dead_waiter, pool8),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
