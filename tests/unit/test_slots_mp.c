/* SPDX-License-Identifier: MIT */
/*
 * Slot pool (shm/pd_slots.c, shm/pd_slots_alloc.c) shared by several
 * processes: no slot handed out twice, a holder killed with the mutex held,
 * wake-up, FIFO order, cancel, a dead waiter (reclaimed by the broker, or
 * dropped by the waiter behind it). Children never assert: they _exit()
 * with a code. The fixture is slots_fixture.h; one-process tests are in
 * test_slots.c.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "slots_fixture.h"

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

/* What a child does; arg of pd_test_fork(). */
struct job {
	struct fx *f;
	uint32_t id;     /* owner id, and holder mark in the hammer */
	uint32_t n;      /* slots to ask for */
	uint64_t tag;
	uint32_t timeout_ms;
	_Atomic uint32_t *holder; /* hammer only */
};

/* ---- helpers ---------------------------------------------------------------- */

static void sleep_ms(uint32_t ms)
{
	struct timespec ts = { (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
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

/* Fork a child running fn(j); teardown kills it if the test fails first. */
static pid_t fork_job(int (*fn)(void *), struct job *j)
{
	pid_t pid = pd_test_fork(fn, j);

	assert_true(pid > 0);
	fx_track(j->f, pid);
	return pid;
}

static int child_code(int rc)
{
	return rc < 0 ? -rc : rc;
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

/* A waiter that does not run (SIGSTOP) cannot hold the head: one behind it
 * that fits is served once the stopped one has not looked at the queue for
 * PD_POOL_STALE_MS; the stopped one, continued, keeps its ticket and is
 * served next. */
static void test_mp_stopped_head_passed_over(void **state)
{
	struct fx *f = *state;
	struct job a = { .f = f, .id = 1, .n = 8, .tag = 1, .timeout_ms = 20000 };
	struct job b = { .f = f, .id = 2, .n = 2, .tag = 2, .timeout_ms = 5000 };
	pd_slot_ref r[16];
	uint64_t waited;
	pid_t pa, pb;

	alloc_ok(f, 9, f->nslots, r);
	assert_int_equal(pd_pool_free(&f->p, r, 4), 0);        /* 4 free: A wants 8 */
	pa = spawn_waiter(f, &a, 1);
	assert_int_equal(kill(pa, SIGSTOP), 0);
	pb = spawn_waiter(f, &b, 2);
	assert_int_equal(reap(f, pb, 4000), 0);               /* served past A */
	waited = atomic_load(&f->x->wait_ns);
	assert_true(waited >= (PD_POOL_STALE_MS - 300) * PD_NS_PER_MS);
	assert_true(waited < 3 * PD_NS_PER_S);
	assert_int_equal(atomic_load(&f->x->order[2]), 1);
	assert_int_equal(kill(pa, SIGCONT), 0);
	assert_int_equal(pd_pool_free(&f->p, r + 4, f->nslots - 4), 0);
	assert_int_equal(reap(f, pa, CHILD_MS), 0);           /* its turn kept */
	assert_int_equal(atomic_load(&f->x->order[1]), 2);
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

/* No reclaim: the waiter behind notices by itself, at its next look at the
 * queue (every PD_POOL_SLICE_MS), that the head's process is gone. */
/* A dead waiter, the only one, must not refuse a non-blocking caller. */
static void test_mp_dead_waiter_nonblocking(void **state)
{
	struct fx *f = *state;
	struct job dead = { .f = f, .id = 1, .n = 2, .tag = 1, .timeout_ms = 10000 };
	pd_slot_ref r[8];
	pid_t pd;

	alloc_ok(f, 9, f->nslots, r);
	pd = spawn_waiter(f, &dead, 1);
	assert_int_equal(kill(pd, SIGKILL), 0);
	assert_int_equal(reap(f, pd, CHILD_MS), 128 + SIGKILL);
	assert_int_equal(nwaiters(&f->p), 1);
	assert_int_equal(pd_pool_free(&f->p, r, f->nslots), 0);
	alloc_ok(f, 9, f->nslots, r); /* deadline 0: must not see the dead waiter */
	assert_int_equal(nwaiters(&f->p), 0);
	assert_int_equal(pd_pool_free(&f->p, r, f->nslots), 0);
}

static void test_mp_dead_waiter_dropped(void **state)
{
	struct fx *f = *state;
	struct job dead = { .f = f, .id = 1, .n = 2, .tag = 1, .timeout_ms = 10000 };
	struct job live = { .f = f, .id = 2, .n = 1, .tag = 2, .timeout_ms = 5000 };
	pd_slot_ref r[8];
	uint64_t t0;
	pid_t pd, pl;

	alloc_ok(f, 9, f->nslots, r);
	pd = spawn_waiter(f, &dead, 1);
	pl = spawn_waiter(f, &live, 2);
	/* One slot free: enough for the live waiter, but the other is the
	 * head, and while alive it keeps its place across re-checks. */
	assert_int_equal(pd_pool_free(&f->p, r, 1), 0);
	sleep_ms(2 * PD_POOL_SLICE_MS + 50);
	assert_int_equal(atomic_load(&f->x->order[2]), 0);
	assert_int_equal(pd_pool_nfree(&f->p), 1);
	assert_int_equal(nwaiters(&f->p), 2);
	/* Killed while blocked, and left a zombie until the live one is done:
	 * nothing frees, signals or reclaims after this. */
	t0 = pd_now_ns();
	assert_int_equal(kill(pd, SIGKILL), 0);
	assert_int_equal(reap(f, pl, 3000), 0);
	assert_true(pd_now_ns() - t0 < PD_NS_PER_S);
	assert_int_equal(reap(f, pd, CHILD_MS), 128 + SIGKILL);
	assert_int_equal(atomic_load(&f->x->order[2]), 1);
	assert_int_equal(atomic_load(&f->x->order[1]), 0);
	assert_int_equal(nwaiters(&f->p), 0);
	assert_int_equal(STAT(f, waits), 2);
	assert_int_equal(STAT(f, reclaimed), 0);
	assert_int_equal(STAT(f, cancels), 0);
	assert_int_equal(STAT(f, timeouts), 0);
	assert_int_equal(pd_pool_free(&f->p, r + 1, f->nslots - 1), 0);
	assert_int_equal(pd_pool_nfree(&f->p), f->nslots);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		POOL_TEST(test_mp_no_double_handout, 64),
		POOL_TEST(test_mp_holder_killed, 8),
		POOL_TEST(test_mp_waiter_woken, 8),
		POOL_TEST(test_mp_fifo, 8),
		POOL_TEST(test_mp_cancel, 8),
		POOL_TEST(test_mp_stopped_head_passed_over, 8),
		POOL_TEST(test_mp_dead_waiter, 8),
		POOL_TEST(test_mp_dead_waiter_dropped, 8),
		POOL_TEST(test_mp_dead_waiter_nonblocking, 8),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
