/* SPDX-License-Identifier: MIT */
/*
 * Slot pool under TSan: the multi-process tests of test_slots.c with threads
 * (TSan does not see synchronisation between processes). Hammer threads take
 * and give back random batches, proving through a holder table that no slot
 * is ever handed out twice; a big waiter asks for the whole pool with short
 * deadlines while a canceller cancels it. cmocka asserts run in the main
 * thread only, after the joins.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "pd_test.h"
#include "pd_slots.h"
#include "pd_time.h"

#define NSLOTS     32u
#define SLOT_SZ    4096u
#define NHAMMER    3u
#define MAX_BATCH  8u
#define MAX_HELD   4u
#define RUN_MS     1000u
#define BIG_TAG    (1ull << 63) /* the big waiter's tags; hammers use their id */

/* Thread exit states besides 0 and -errno. */
#define ERR_DOUBLE  1001 /* a slot handed to two holders */
#define ERR_HOLDER  1002 /* holder mark not ours at free */
#define ERR_PATTERN 1003 /* payload changed under its owner */
#define ERR_BADREF  1004 /* a live ref without payload */

struct world {
	struct pd_pool p;
	void *mem, *arena;
	size_t len, arena_len;
	_Atomic uint32_t holder[NSLOTS];
	_Atomic uint64_t big_tag; /* tag of the big waiter's current request */
	_Atomic int stop;
};

struct worker {
	struct world *w;
	uint32_t id;
	int err;
	uint64_t allocs, timeouts, cancels, cancelled; /* cancelled: cancel() total */
};

struct batch {
	pd_slot_ref r[MAX_BATCH];
	uint32_t n;
	uint64_t token;
};

static struct pd_pool_who who_of(uint32_t owner, uint64_t tag)
{
	return (struct pd_pool_who){ .owner = owner, .pid = (int32_t)getpid(), .tag = tag,
				     .state = PD_SLOT_LOANED };
}

static int stopped(struct world *w)
{
	return atomic_load_explicit(&w->stop, memory_order_relaxed);
}

/* Take a result of pd_pool_alloc: 1 = retry later, 0 = got them, < 0 error. */
static int tally(struct worker *k, int rc)
{
	if (rc == 0)
		k->allocs++;
	else if (rc == -ETIMEDOUT)
		k->timeouts++;
	else if (rc == -ECANCELED)
		k->cancels++;
	return rc == -ETIMEDOUT || rc == -ENOBUFS || rc == -ECANCELED ? 1 : rc;
}

/* Mark, stamp (alloc) or check, unmark (free) one batch. */
static int claim(struct worker *k, const struct batch *b)
{
	for (uint32_t i = 0; i < b->n; i++) {
		uint64_t *d = pd_pool_data(&k->w->p, b->r[i]);

		if (!d)
			return ERR_BADREF;
		if (atomic_exchange(&k->w->holder[PD_SLOT_REF_IDX(b->r[i])], k->id))
			return ERR_DOUBLE;
		d[0] = b->token + i;
		d[SLOT_SZ / sizeof(*d) - 1] = b->token + i;
	}
	return 0;
}

static int release(struct worker *k, const struct batch *b)
{
	for (uint32_t i = 0; i < b->n; i++) {
		const uint64_t *d = pd_pool_data(&k->w->p, b->r[i]);

		if (!d)
			return ERR_BADREF;
		if (d[0] != b->token + i || d[SLOT_SZ / sizeof(*d) - 1] != b->token + i)
			return ERR_PATTERN;
		if (atomic_exchange(&k->w->holder[PD_SLOT_REF_IDX(b->r[i])], 0) != k->id)
			return ERR_HOLDER;
	}
	return pd_pool_free(&k->w->p, b->r, b->n);
}

static int grab(struct worker *k, struct batch *b, unsigned *seed)
{
	struct pd_pool_who who = who_of(k->id, k->id);
	uint64_t deadline = rand_r(seed) % 2 ? pd_deadline_ms(2) : 0;
	int rc;

	b->n = 1 + (uint32_t)rand_r(seed) % MAX_BATCH;
	rc = tally(k, pd_pool_alloc(&k->w->p, &who, b->n, deadline, b->r));
	return rc == 0 ? claim(k, b) : rc;
}

static void *hammer(void *arg)
{
	struct worker *k = arg;
	struct batch held[MAX_HELD];
	uint32_t head = 0, n = 0;
	uint64_t token = (uint64_t)k->id << 48;
	unsigned seed = k->id * 7919u;
	int rc = 0;

	while (rc == 0 && !stopped(k->w)) {
		if (n < MAX_HELD && rand_r(&seed) % 3) {
			held[(head + n) % MAX_HELD].token = token;
			token += MAX_BATCH;
			rc = grab(k, &held[(head + n) % MAX_HELD], &seed);
			n += rc == 0;
			if (rc != 1)
				continue;
			rc = 0; /* none to be had: give one back */
		}
		if (n) {
			rc = release(k, &held[head]);
			head = (head + 1) % MAX_HELD;
			n--;
		}
	}
	for (; rc == 0 && n; n--, head = (head + 1) % MAX_HELD)
		rc = release(k, &held[head]);
	k->err = rc;
	return NULL;
}

/* Ask for the whole pool, a fresh tag each time, 1..8 ms deadlines. */
static void *big_waiter(void *arg)
{
	struct worker *k = arg;
	pd_slot_ref r[NSLOTS];
	int rc = 0;

	for (uint64_t i = 1; rc >= 0 && !stopped(k->w); i++) {
		struct pd_pool_who who = who_of(k->id, BIG_TAG | i);

		atomic_store(&k->w->big_tag, BIG_TAG | i);
		rc = tally(k, pd_pool_alloc(&k->w->p, &who, NSLOTS, pd_deadline_ms(1 + i % 8), r));
		if (rc == 0)
			rc = pd_pool_free(&k->w->p, r, NSLOTS);
	}
	k->err = rc > 0 ? 0 : rc;
	return NULL;
}

static void *canceller(void *arg)
{
	struct worker *k = arg;
	struct timespec nap = { 0, 3 * 1000000L };

	while (!stopped(k->w)) {
		int n = pd_pool_cancel(&k->w->p, atomic_load(&k->w->big_tag));

		if (n < 0) {
			k->err = n;
			break;
		}
		k->cancelled += (uint64_t)n;
		(void)nanosleep(&nap, NULL);
	}
	return NULL;
}

static int world_setup(void **state)
{
	struct world *w = calloc(1, sizeof(*w));

	if (!w)
		return -1;
	*state = w;
	w->len = (size_t)pd_pool_memsize(NSLOTS);
	w->arena_len = (size_t)pd_pool_arena_size(NSLOTS, SLOT_SZ);
	w->mem = pd_test_shared_alloc(w->len);
	w->arena = pd_test_shared_alloc(w->arena_len);
	if (!w->mem || !w->arena || pd_pool_init(w->mem, w->len, NSLOTS, SLOT_SZ) != 0)
		return -1;
	return pd_pool_open(&w->p, w->mem, w->len, w->arena, w->arena_len) ? -1 : 0;
}

static int world_teardown(void **state)
{
	struct world *w = *state;

	if (w) {
		pd_test_shared_free(w->mem, w->len);
		pd_test_shared_free(w->arena, w->arena_len);
		free(w);
	}
	return 0;
}

static void run_for(struct world *w, uint32_t ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
	atomic_store(&w->stop, 1);
}

static void check_totals(struct world *w, const struct worker *k, uint32_t nk)
{
	uint64_t allocs = 0, timeouts = 0, cancels = 0, cancelled = 0;
	const struct pd_pool_counters *c = &w->p.shm->stats;

	for (uint32_t i = 0; i < nk; i++) {
		assert_int_equal(k[i].err, 0);
		allocs += k[i].allocs;
		timeouts += k[i].timeouts;
		cancels += k[i].cancels;
		cancelled += k[i].cancelled;
	}
	for (uint32_t i = 0; i < NSLOTS; i++)
		assert_int_equal(atomic_load(&w->holder[i]), 0);
	assert_int_equal(pd_pool_nfree(&w->p), NSLOTS);
	assert_int_equal(w->p.shm->nwaiters, 0);
	assert_int_equal(pd_stat_get(&c->in_use), 0);
	assert_int_equal(pd_stat_get(&c->allocs), allocs);
	assert_int_equal(pd_stat_get(&c->timeouts), timeouts);
	assert_int_equal(pd_stat_get(&c->cancels), cancels);
	/* A cancel may hit a waiter that got its slots or timed out first. */
	print_message("allocs %llu, timeouts %llu, cancels %llu (cancel() hit %llu)\n",
		      (unsigned long long)allocs, (unsigned long long)timeouts,
		      (unsigned long long)cancels, (unsigned long long)cancelled);
	assert_true(cancels <= cancelled);
	assert_true(allocs > 100);
}

static void test_threads_hammer_cancel(void **state)
{
	struct world *w = *state;
	void *(*fn[NHAMMER + 2])(void *);
	struct worker k[NHAMMER + 2];
	pthread_t t[NHAMMER + 2];
	uint32_t n = 0;

	for (; n < NHAMMER + 2; n++) {
		k[n] = (struct worker){ .w = w, .id = n + 1 };
		fn[n] = n < NHAMMER ? hammer : n == NHAMMER ? big_waiter : canceller;
		if (pthread_create(&t[n], NULL, fn[n], &k[n]) != 0)
			break;
	}
	run_for(w, n == NHAMMER + 2 ? RUN_MS : 0);
	for (uint32_t i = 0; i < n; i++) /* joined before any assert */
		(void)pthread_join(t[i], NULL);
	assert_int_equal(n, NHAMMER + 2);
	check_totals(w, k, n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_threads_hammer_cancel, world_setup,
						world_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
