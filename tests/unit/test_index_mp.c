/* SPDX-License-Identifier: MIT */
/*
 * pd_index.c under load and across processes: a 100k-operation churn
 * checked against a model, placement under different seeds, and two
 * processes sharing one table (a child inserting, a child killed while it
 * holds the mutex, a child killed in the middle of an insert), and
 * readers pinning by hazard in other processes while the broker removes
 * and reinserts keys in the same buckets.
 *
 * None of these is a negative-argument test; those, with the rest of the
 * single-process semantics, are in test_index.c. Both files share the
 * fixture and white-box checks of index_fixture.h.
 *
 * The file under test is #included (as the house style's unit tests do) with its
 * one memcpy() routed through crash_memcpy(): a child armed with a key
 * length kills itself there, between an insert's first store into the
 * bucket and the state store that publishes it.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "index_fixture.h"
#include "pd_index.h"
#include "pd_log.h"
#include "pd_sync.h"
#include "pd_time.h"

/* Nonzero in a child: SIGKILL itself when the index copies this many key bytes. */
static uint32_t crash_klen;

static void *crash_memcpy(void *dst, const void *src, size_t n)
{
	if (crash_klen && n == crash_klen)
		(void)raise(SIGKILL);
	return memcpy(dst, src, n);
}

#define memcpy(d, s, n) crash_memcpy(d, s, n)
#include "../../shm/pd_index.c"
#undef memcpy

#define WAIT_MS     10000u /* bound on every child */
#define CHURN_KEYS  1536u
#define CHURN_OPS   100000u
#define CHURN_CHECK 4096u  /* full model check every this many ops */

/* ---- helpers only these tests use ------------------------------------------------ */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

/* Bucket holding a live key, or -1 (reads the table directly). */
static int64_t key_bucket(const struct pd_index *ix, uint32_t i)
{
	char key[KEY_BUF];
	uint32_t klen = make_key(i, key);

	for (uint32_t b = 0; b <= ix->mask; b++) {
		const struct pd_index_entry *e = &ix->entries[b];

		if (is_live(e->state) && e->klen == klen && memcmp(e->key, key, klen) == 0)
			return b;
	}
	return -1;
}

/* ---- churn against a model -------------------------------------------------------- */

struct model {
	uint8_t present[CHURN_KEYS];
	uint32_t n;
	uint32_t full;
};

static void model_check_key(struct pd_index *ix, const struct model *m, uint32_t id)
{
	if (m->present[id])
		expect_present(ix, id);
	else
		expect_absent(ix, id);
}

static void model_check_all(struct pd_index *ix, const struct model *m)
{
	for (uint32_t id = 0; id < CHURN_KEYS; id++)
		model_check_key(ix, m, id);
	check_invariants(ix);
}

static void churn_insert(struct pd_index *ix, struct model *m, uint32_t id)
{
	int rc = key_insert(ix, id);

	if (m->present[id]) {
		assert_int_equal(rc, -EEXIST);
	} else if (rc == -ENOSPC) {
		assert_window_full(ix, id);
		m->full++;
	} else {
		assert_int_equal(rc, 0);
		m->present[id] = 1;
		m->n++;
	}
}

static void churn_remove(struct pd_index *ix, struct model *m, uint32_t id)
{
	int rc = key_remove(ix, id);

	if (!m->present[id]) {
		assert_int_equal(rc, -ENOENT);
		return;
	}
	assert_int_equal(rc, 0);
	m->present[id] = 0;
	m->n--;
}

static void test_churn_model(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 1024, 16, 0xc0ffee);
	struct model *m = calloc(1, sizeof(*m));
	uint64_t rng = 0x9e3779b97f4a7c15ull;

	assert_non_null(m);
	for (uint32_t op = 0; op < CHURN_OPS; op++) {
		uint64_t r = rng_next(&rng);
		uint32_t id = (uint32_t)(r % CHURN_KEYS);

		if (r >> 63)
			churn_insert(ix, m, id);
		else
			churn_remove(ix, m, id);
		model_check_key(ix, m, id);
		model_check_key(ix, m, (uint32_t)(rng_next(&rng) % CHURN_KEYS));
		assert_int_equal(pd_index_count(ix), m->n);
		if (op % CHURN_CHECK == 0)
			model_check_all(ix, m);
	}
	model_check_all(ix, m);
	print_message("churn: %u live, %u -ENOSPC, %u tombstones\n", m->n, m->full,
		      ix->shm->tombstones);
	free(m);
}

/* ---- seeds ---------------------------------------------------------------------- */

#define SEED_KEYS 32u

static void place_keys(struct tbl *t, uint64_t seed, int64_t *where)
{
	struct pd_index *ix = tbl_make(t, 1024, 32, seed);

	insert_range(ix, 0, SEED_KEYS);
	expect_range(ix, 0, SEED_KEYS);
	check_invariants(ix);
	for (uint32_t i = 0; i < SEED_KEYS; i++) {
		where[i] = key_bucket(ix, i);
		assert_true(where[i] >= 0);
	}
}

static void test_seeds(void **state)
{
	int64_t a[SEED_KEYS], b[SEED_KEYS], c[SEED_KEYS];
	uint64_t seed = pd_now_ns() ^ ((uint64_t)getpid() << 32);
	uint32_t moved = 0;

	place_keys(*state, 0, a);
	place_keys(*state, 0x9e3779b97f4a7c15ull, b);
	for (uint32_t i = 0; i < SEED_KEYS; i++)
		moved += a[i] != b[i];
	assert_true(moved > 0);
	print_message("random seed %#llx\n", (unsigned long long)seed);
	place_keys(*state, seed, c);
}

/* ---- two processes -------------------------------------------------------------- */

#define FORK_KEYS 1000u

/* Child: its own handle on the inherited mapping; exit codes name the step. */
static int child_insert(void *arg)
{
	struct tbl *t = arg;
	struct pd_index ix;

	if (pd_index_open(&ix, t->mem, t->len) != 0)
		return 10;
	for (uint32_t i = 0; i < FORK_KEYS; i++)
		if (key_insert(&ix, i) != 0)
			return 11;
	return 0;
}

static void test_fork_child_inserts(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 2048, 64, 42);
	struct pd_index_val got;
	pid_t pid = pd_test_fork(child_insert, t);

	assert_true(pid > 0);
	assert_int_equal(pd_test_wait(pid, WAIT_MS), 0);
	assert_int_equal(pd_index_count(ix), FORK_KEYS);
	for (uint32_t i = 0; i < FORK_KEYS; i++) {
		struct pd_index_val want = make_val(i, state_of(i));

		assert_int_equal(key_lookup(ix, i, &got), 0);
		assert_val(&got, &want);
	}
	check_invariants(ix);
}

struct holder {
	struct pd_index_shm *shm;
	int wfd;
};

/* Child: take the index mutex, scribble the counters as a half-done
 * operation would, tell the parent, and wait to be killed. */
static int child_hold_lock(void *arg)
{
	struct holder *h = arg;
	struct timespec nap = { WAIT_MS / 1000, 0 };

	if (pd_mutex_lock_until(&h->shm->lock, pd_deadline_ms(WAIT_MS), NULL, NULL) != 0)
		return 20;
	h->shm->count = 12345;
	h->shm->tombstones = 777;
	if (write(h->wfd, "L", 1) != 1)
		return 21;
	(void)nanosleep(&nap, NULL);
	return 22;
}

/* One byte from fd within timeout_ms: the byte, or -1. */
static int read_byte(int fd, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char c;

	if (poll(&p, 1, timeout_ms) != 1 || read(fd, &c, 1) != 1)
		return -1;
	return c;
}

/* Fork a child that dies holding the index mutex; returns its wait status. */
static int kill_lock_holder(struct pd_index *ix)
{
	struct holder h = { .shm = ix->shm };
	int fds[2], got, st;
	pid_t pid;

	assert_int_equal(pipe(fds), 0);
	h.wfd = fds[1];
	pid = pd_test_fork(child_hold_lock, &h);
	(void)close(fds[1]);
	assert_true(pid > 0);
	got = read_byte(fds[0], (int)WAIT_MS);
	(void)close(fds[0]);
	(void)kill(pid, SIGKILL);
	st = pd_test_wait(pid, WAIT_MS);
	assert_int_equal(got, 'L');
	return st;
}

static void test_fork_holder_killed(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 256, 16, 0xdead);

	insert_range(ix, 0, 100);
	for (uint32_t i = 0; i < 100; i += 10)
		assert_int_equal(key_remove(ix, i), 0);
	assert_int_equal(key_pin(ix, 1, NULL, tbl_cell(t, 0, 0)), 0);
	assert_int_equal(kill_lock_holder(ix), 128 + SIGKILL);
	assert_int_equal(pd_stat_get(&ix->shm->stats.repairs), 0);
	/* The next operation takes over the mutex and rebuilds the counters. */
	assert_int_equal(key_insert(ix, 100), 0);
	assert_int_equal(pd_stat_get(&ix->shm->stats.repairs), 1);
	assert_int_equal(pd_index_count(ix), 91);
	check_invariants(ix);
	for (uint32_t i = 0; i <= 100; i++) {
		if (i % 10 == 0 && i < 100)
			expect_absent(ix, i);
		else
			expect_present(ix, i);
	}
	assert_int_equal(pd_stat_get(&ix->shm->stats.repairs), 1);
}

#define CRASH_KLEN 77u /* no other memcpy() in pd_index.c copies this many bytes */

static uint32_t key_home(const struct pd_index *ix, const void *key, uint32_t klen)
{
	return (uint32_t)XXH3_64bits_withSeed(key, klen, ix->seed) & ix->mask;
}

/* First make_key() id >= from whose home bucket is home. */
static uint32_t id_with_home(const struct pd_index *ix, uint32_t from, uint32_t home)
{
	char key[KEY_BUF];

	for (uint32_t i = from; i < from + 100000; i++)
		if (key_home(ix, key, make_key(i, key)) == home)
			return i;
	fail_msg("no key with home bucket %u", home);
	return 0;
}

/* A CRASH_KLEN-byte key whose home bucket is home. */
static void crash_key(const struct pd_index *ix, uint32_t home, char *key)
{
	memset(key, 'x', CRASH_KLEN);
	for (uint32_t i = 0; i < 100000; i++) {
		memcpy(key, &i, sizeof(i));
		if (key_home(ix, key, CRASH_KLEN) == home)
			return;
	}
	fail_msg("no long key with home bucket %u", home);
}

struct crasher {
	struct tbl *t;
	const char *key;
};

/* Child: insert the long key, dying inside the insert (crash_memcpy). */
static int child_crash_insert(void *arg)
{
	struct crasher *c = arg;
	struct pd_index_val v = make_val(500, PD_INDEX_COMMITTED);
	struct pd_index ix;

	if (pd_index_open(&ix, c->t->mem, c->t->len) != 0)
		return 30;
	crash_klen = CRASH_KLEN;
	(void)pd_index_insert(&ix, c->key, CRASH_KLEN, &v);
	return 31; /* the hook did not fire */
}

/*
 * Keys a and b share home bucket h; a is removed, leaving a tombstone at h
 * that b's probe runs through. A child reusing that tombstone dies in the
 * middle of its insert: b must still be found.
 */
static void test_fork_killed_mid_insert(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 64, 0xabc);
	char key[KEY_BUF], lkey[CRASH_KLEN];
	uint32_t h = key_home(ix, key, make_key(0, key));
	uint32_t b = id_with_home(ix, 1, h);
	struct crasher c = { .t = t, .key = lkey };
	pid_t pid;

	insert_range(ix, 0, 1);
	assert_int_equal(key_insert(ix, b), 0);
	assert_int_equal(key_bucket(ix, b), (h + 1) & ix->mask);
	assert_int_equal(key_remove(ix, 0), 0);
	assert_int_equal(ix->entries[h].state, PD_INDEX_DELETED);
	crash_key(ix, h, lkey);
	pid = pd_test_fork(child_crash_insert, &c);
	assert_true(pid > 0);
	assert_int_equal(pd_test_wait(pid, WAIT_MS), 128 + SIGKILL);
	expect_present(ix, b);
	assert_int_equal(pd_stat_get(&ix->shm->stats.repairs), 1);
	assert_int_equal(pd_index_count(ix), 1);
	assert_int_equal(pd_index_lookup(ix, lkey, CRASH_KLEN, NULL), -ENOENT);
	check_invariants(ix);
	/* The half-written bucket is reusable. */
	assert_int_equal(key_insert(ix, 0), 0);
	expect_present(ix, 0);
	expect_present(ix, b);
	check_invariants(ix);
}

/* ---- hazards against removal and reuse, across processes ----------------------- */

#define RACE_KEYS    6u    /* sharing one home bucket */
#define RACE_SLOTS   8u    /* "recv pool" slots the keys' chunks live in */
#define RACE_READERS 2u
#define RACE_MS      1500u
#define RACE_HOLD    64u   /* payload re-reads while a pin is held */
#define RACE_DEAD    0xdeadu

struct race {
	struct {
		_Atomic uint32_t key, gen; /* the chunk a slot holds; RACE_DEAD: freed */
	} payload[RACE_SLOTS];
	_Atomic uint32_t stop;
	_Atomic uint64_t pins, bad;
	uint32_t ids[RACE_KEYS];
};

struct race_arg {
	struct tbl *t;
	struct race *r;
	uint32_t reader;
};

/* One pin held and checked: its values and its slot's bytes are key id's. */
static void race_check(struct race *r, uint32_t id, const struct pd_index_val *v)
{
	uint32_t bad = v->req != id || v->len != id * 7 + 1 || v->slot >= RACE_SLOTS;

	for (uint32_t n = 0; !bad && n < RACE_HOLD; n++)
		bad = atomic_load(&r->payload[v->slot].key) != id ||
		      atomic_load(&r->payload[v->slot].gen) != v->gen;
	atomic_fetch_add(&r->bad, bad);
	atomic_fetch_add(&r->pins, 1);
}

/* Child: pin, check and unpin random keys with one cell of its journal. */
static int child_race_reader(void *arg)
{
	struct race_arg *a = arg;
	_Atomic uint64_t *cell = tbl_cell(a->t, a->reader, 0);
	uint64_t rng = 0x51ed2701u + a->reader;
	struct pd_index_val v;

	while (!atomic_load(&a->r->stop)) {
		uint32_t id = a->r->ids[rng_next(&rng) % RACE_KEYS];
		char key[KEY_BUF];

		if (pd_index_pin(&a->t->ix, key, make_key(id, key), &v, cell) != 0)
			continue;
		race_check(a->r, id, &v);
		if (pd_index_unpin(cell, v.hazard) != 0)
			return 40;
	}
	return 0;
}

/* The broker's side: each key's chunk (slot, gen), or slot RACE_SLOTS. */
struct race_broker {
	struct pd_index_val cur[RACE_KEYS];
	struct pd_index_val zombie[RACE_SLOTS];
	uint32_t zkey[RACE_SLOTS], nzombies;
	uint32_t free_slots[RACE_SLOTS], nfree, gen;
};

static void race_free_slot(struct race *r, struct race_broker *b, uint32_t slot)
{
	atomic_store(&r->payload[slot].key, RACE_DEAD); /* the slot is reused: its bytes change */
	atomic_store(&r->payload[slot].gen, 0);
	b->free_slots[b->nfree++] = slot;
}

/* Remove chunk v of key k: freed, or kept as a zombie while a hazard names it. */
static void race_remove(struct pd_index *ix, struct race *r, struct race_broker *b, uint32_t k,
			const struct pd_index_val *v)
{
	int rc = key_remove_chunk(ix, r->ids[k], v);

	if (rc == 0) {
		race_free_slot(r, b, v->slot);
	} else {
		assert_int_equal(rc, -EBUSY);
		b->zkey[b->nzombies] = k;
		b->zombie[b->nzombies++] = *v;
	}
}

static void race_reap(struct pd_index *ix, struct race *r, struct race_broker *b)
{
	for (uint32_t z = 0; z < b->nzombies;) {
		int rc = key_remove_chunk(ix, r->ids[b->zkey[z]], &b->zombie[z]);

		if (rc == -EBUSY) {
			z++;
			continue;
		}
		assert_int_equal(rc, 0);
		race_free_slot(r, b, b->zombie[z].slot);
		b->zombie[z] = b->zombie[--b->nzombies];
		b->zkey[z] = b->zkey[b->nzombies];
	}
}

/* Give key k a chunk in a free slot: bytes first, then the index entry. */
static void race_insert(struct pd_index *ix, struct race *r, struct race_broker *b, uint32_t k)
{
	uint32_t id = r->ids[k], slot;
	struct pd_index_val v;
	char key[KEY_BUF];

	if (b->nfree == 0)
		return;
	slot = b->free_slots[--b->nfree];
	v = (struct pd_index_val){ .req = id, .slot = slot, .gen = ++b->gen, .len = id * 7 + 1,
				   .state = PD_INDEX_COMMITTED };
	atomic_store(&r->payload[slot].key, id);
	atomic_store(&r->payload[slot].gen, v.gen);
	assert_int_equal(pd_index_insert(ix, key, make_key(id, key), &v), 0);
	b->cur[k] = v;
}

static void race_step(struct pd_index *ix, struct race *r, struct race_broker *b, uint32_t k)
{
	if (b->cur[k].slot < RACE_SLOTS) {
		race_remove(ix, r, b, k, &b->cur[k]);
		b->cur[k].slot = RACE_SLOTS;
	} else {
		race_insert(ix, r, b, k);
	}
	race_reap(ix, r, b);
}

/*
 * Readers in other processes pin, check and unpin keys sharing one home
 * bucket while the broker removes them and puts them back in the same
 * buckets, reusing the freed slots (new bytes) at once. No reader may ever
 * see values or bytes that are not its key's chunk: a slot is reused only
 * once no hazard names its entry.
 */
static void test_fork_hazards_race_removal(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 16, 0x4a2d);
	struct race *r = pd_test_shared_alloc(sizeof(*r));
	struct race_broker b = { .nfree = 0 };
	struct race_arg args[RACE_READERS];
	pid_t pid[RACE_READERS];
	uint64_t end = pd_now_ns() + (uint64_t)RACE_MS * 1000000u, steps = 0;
	char key[KEY_BUF];

	assert_non_null(r);
	r->ids[0] = 0;
	for (uint32_t k = 1; k < RACE_KEYS; k++)
		r->ids[k] = id_with_home(ix, r->ids[k - 1] + 1, key_home(ix, key, make_key(0, key)));
	for (uint32_t s = 0; s < RACE_SLOTS; s++)
		race_free_slot(r, &b, s);
	for (uint32_t k = 0; k < RACE_KEYS; k++)
		b.cur[k].slot = RACE_SLOTS;
	for (uint32_t i = 0; i < RACE_READERS; i++) {
		args[i] = (struct race_arg){ .t = t, .r = r, .reader = i };
		pid[i] = pd_test_fork(child_race_reader, &args[i]);
		assert_true(pid[i] > 0);
	}
	for (uint64_t rng = 7; pd_now_ns() < end; steps++)
		race_step(ix, r, &b, (uint32_t)(rng_next(&rng) % RACE_KEYS));
	atomic_store(&r->stop, 1);
	for (uint32_t i = 0; i < RACE_READERS; i++)
		assert_int_equal(pd_test_wait(pid[i], WAIT_MS), 0);
	print_message("race: %llu broker steps, %llu pins, %llu refused removals\n",
		      (unsigned long long)steps, (unsigned long long)atomic_load(&r->pins),
		      (unsigned long long)pd_stat_get(&ix->shm->stats.busy));
	assert_int_equal(atomic_load(&r->bad), 0);
	assert_true(atomic_load(&r->pins) > 1000);
	assert_true(pd_stat_get(&ix->shm->stats.busy) > 0); /* hazards did hold removals */
	race_reap(ix, r, &b);
	assert_int_equal(b.nzombies, 0);
	check_invariants(ix);
	pd_test_shared_free(r, sizeof(*r));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TBL_TEST(test_churn_model),
		TBL_TEST(test_seeds),
		TBL_TEST(test_fork_child_inserts),
		TBL_TEST(test_fork_holder_killed),
		TBL_TEST(test_fork_killed_mid_insert),
		TBL_TEST(test_fork_hazards_race_removal),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
