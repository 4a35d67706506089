/* SPDX-License-Identifier: MIT */
/*
 * pd_index.c: the recv index hash table in shared memory.
 *
 * Negative cases first (sizes, NULLs, alignment, corrupted headers, key
 * lengths, entry states), then the entry state machine, bounded probing
 * and full tables, tombstones, a 100k-operation churn checked against a
 * model, seeds, and two processes sharing one table (one killed while it
 * holds the mutex).
 *
 * White-box checks read the table directly: every live entry is reachable
 * from its home bucket (within max_probe, no free bucket on the way), the
 * counters match the entries, and no tombstone is followed by a free bucket.
 *
 * The file under test is #included (as STYLE.md's unit tests do) with its
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../support/pd_test.h"
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
#define KEY_BUF     64u    /* make_key() output */
#define CHURN_KEYS  1536u
#define CHURN_OPS   100000u
#define CHURN_CHECK 4096u  /* full model check every this many ops */

struct tbl {
	void *mem;
	size_t len;
	struct pd_index ix;
};

/* ---- fixtures and helpers (no cmocka asserts: children use them too) -------- */

static int tbl_setup(void **state)
{
	*state = calloc(1, sizeof(struct tbl));
	return *state ? 0 : -1;
}

static void tbl_release(struct tbl *t)
{
	pd_test_shared_free(t->mem, t->len);
	t->mem = NULL;
	t->len = 0;
}

static int tbl_teardown(void **state)
{
	struct tbl *t = *state;

	tbl_release(t);
	free(t);
	return 0;
}

static void *tbl_alloc(struct tbl *t, size_t len)
{
	tbl_release(t);
	t->mem = pd_test_shared_alloc(len);
	t->len = t->mem ? len : 0;
	return t->mem;
}

static uint32_t make_key(uint32_t i, char *buf)
{
	int n = snprintf(buf, KEY_BUF, "req-%u/layer-%u/chunk-%u", i % 97, i % 13, i);

	return (uint32_t)n;
}

static uint32_t state_of(uint32_t i)
{
	return i % 2 ? PD_INDEX_COMMITTED : PD_INDEX_PENDING;
}

static struct pd_index_val make_val(uint32_t i, uint32_t state)
{
	return (struct pd_index_val){ .req = 0xabc0000000000000ull | i, .slot = i * 3 + 1,
				      .gen = i ^ 0x5a5a5a5au, .len = i * 16 + 7,
				      .state = state };
}

static int key_insert(struct pd_index *ix, uint32_t i)
{
	struct pd_index_val v = make_val(i, state_of(i));
	char key[KEY_BUF];

	return pd_index_insert(ix, key, make_key(i, key), &v);
}

static int key_lookup(struct pd_index *ix, uint32_t i, struct pd_index_val *out)
{
	char key[KEY_BUF];

	return pd_index_lookup(ix, key, make_key(i, key), out);
}

static int key_pin(struct pd_index *ix, uint32_t i, struct pd_index_val *out)
{
	char key[KEY_BUF];

	return pd_index_pin(ix, key, make_key(i, key), out);
}

static int key_unpin(struct pd_index *ix, uint32_t i)
{
	char key[KEY_BUF];

	return pd_index_unpin(ix, key, make_key(i, key));
}

static int key_commit(struct pd_index *ix, uint32_t i, uint32_t len)
{
	char key[KEY_BUF];

	return pd_index_commit(ix, key, make_key(i, key), len);
}

static int key_remove(struct pd_index *ix, uint32_t i)
{
	char key[KEY_BUF];

	return pd_index_remove(ix, key, make_key(i, key));
}

static int is_live(uint32_t state)
{
	return state == PD_INDEX_PENDING || state == PD_INDEX_COMMITTED;
}

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545f4914f6cdd1dull;
}

/* ---- assertion helpers -------------------------------------------------------- */

static struct pd_index *tbl_make(struct tbl *t, uint32_t nbuckets, uint32_t max_probe,
				 uint64_t seed)
{
	int64_t need = pd_index_memsize(nbuckets);

	assert_true(need > 0);
	assert_non_null(tbl_alloc(t, (size_t)need));
	assert_int_equal(pd_index_init(t->mem, t->len, nbuckets, max_probe, seed), 0);
	assert_int_equal(pd_index_open(&t->ix, t->mem, t->len), 0);
	return &t->ix;
}

static void assert_val(const struct pd_index_val *got, const struct pd_index_val *want,
		       uint32_t refcount)
{
	assert_int_equal(got->req, want->req);
	assert_int_equal(got->slot, want->slot);
	assert_int_equal(got->gen, want->gen);
	assert_int_equal(got->len, want->len);
	assert_int_equal(got->state, want->state);
	assert_int_equal(got->refcount, refcount);
}

static void expect_present(struct pd_index *ix, uint32_t i, uint32_t refcount)
{
	struct pd_index_val want = make_val(i, state_of(i)), got;

	memset(&got, 0xee, sizeof(got));
	assert_int_equal(key_lookup(ix, i, &got), 0);
	assert_val(&got, &want, refcount);
}

static void expect_absent(struct pd_index *ix, uint32_t i)
{
	assert_int_equal(key_lookup(ix, i, NULL), -ENOENT);
}

static void insert_range(struct pd_index *ix, uint32_t from, uint32_t to)
{
	for (uint32_t i = from; i < to; i++)
		assert_int_equal(key_insert(ix, i), 0);
}

static void expect_range(struct pd_index *ix, uint32_t from, uint32_t to)
{
	for (uint32_t i = from; i < to; i++)
		expect_present(ix, i, 0);
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

/* -ENOSPC is only right when every bucket of the key's window is live. */
static void assert_window_full(const struct pd_index *ix, uint32_t i)
{
	char key[KEY_BUF];
	uint64_t h = XXH3_64bits_withSeed(key, make_key(i, key), ix->seed);

	for (uint32_t d = 0; d < ix->max_probe; d++)
		assert_true(is_live(ix->entries[(uint32_t)(h + d) & ix->mask].state));
}

/* A live entry sits within max_probe of its home, with no free bucket between. */
static void check_reachable(const struct pd_index *ix, uint32_t b)
{
	const struct pd_index_entry *e = &ix->entries[b];
	uint32_t home = (uint32_t)e->hash & ix->mask;
	uint32_t dist = (b - home) & ix->mask;

	assert_true(e->klen >= 1 && e->klen <= PD_KEY_MAX);
	assert_int_equal(e->hash, XXH3_64bits_withSeed(e->key, e->klen, ix->seed));
	assert_true(dist < ix->max_probe);
	for (uint32_t d = 0; d < dist; d++)
		assert_int_not_equal(ix->entries[(home + d) & ix->mask].state, PD_INDEX_FREE);
}

static void check_invariants(const struct pd_index *ix)
{
	uint32_t nlive = 0, ndead = 0;

	for (uint32_t b = 0; b <= ix->mask; b++) {
		uint32_t state = ix->entries[b].state;
		uint32_t next = ix->entries[(b + 1) & ix->mask].state;

		assert_true(state <= PD_INDEX_DELETED);
		if (is_live(state)) {
			nlive++;
			check_reachable(ix, b);
		} else if (state == PD_INDEX_DELETED) {
			ndead++;
			assert_int_not_equal(next, PD_INDEX_FREE);
		}
	}
	assert_int_equal(nlive, ix->shm->count);
	assert_int_equal(ndead, ix->shm->tombstones);
	assert_int_equal(pd_index_count(ix), nlive);
}

/* ---- negative tests ------------------------------------------------------------- */

static void test_memsize_rejects(void **state)
{
	static const uint32_t bad[] = { 0, 3, 100, 65535, PD_INDEX_MAX_BUCKETS + 1,
					PD_INDEX_MAX_BUCKETS * 2, UINT32_MAX };
	const int64_t hdr = (int64_t)sizeof(struct pd_index_shm);

	(void)state;
	for (size_t i = 0; i < PD_ARRAY_SIZE(bad); i++)
		assert_int_equal(pd_index_memsize(bad[i]), -EINVAL);
	assert_int_equal(pd_index_memsize(1), hdr + 320);
	assert_int_equal(pd_index_memsize(64), hdr + 64 * 320);
	assert_int_equal(pd_index_memsize(PD_INDEX_MAX_BUCKETS),
			 hdr + (int64_t)PD_INDEX_MAX_BUCKETS * 320);
}

static int all_zero(const void *p, size_t len)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < len; i++)
		if (b[i])
			return 0;
	return 1;
}

static void test_init_rejects(void **state)
{
	struct tbl *t = *state;
	size_t need = (size_t)pd_index_memsize(64), len = need + PD_CACHE_LINE;
	char *mem = tbl_alloc(t, len);

	assert_non_null(mem);
	assert_int_equal(pd_index_init(mem, len, 0, 1, 0), -EINVAL);
	assert_int_equal(pd_index_init(mem, len, 3, 1, 0), -EINVAL);
	assert_int_equal(pd_index_init(mem, len, 96, 1, 0), -EINVAL);
	assert_int_equal(pd_index_init(mem, len, PD_INDEX_MAX_BUCKETS * 2, 1, 0), -EINVAL);
	assert_int_equal(pd_index_init(mem, len, 64, 0, 0), -EINVAL);
	assert_int_equal(pd_index_init(mem, len, 64, 65, 0), -EINVAL);
	assert_int_equal(pd_index_init(NULL, len, 64, 4, 0), -EINVAL);
	assert_int_equal(pd_index_init(mem + 8, len - 8, 64, 4, 0), -EINVAL);
	assert_int_equal(pd_index_init(mem, need - 1, 64, 4, 0), -ENOSPC);
	assert_int_equal(pd_index_init(mem, 0, 64, 4, 0), -ENOSPC);
	assert_int_equal(pd_index_init(mem, len, PD_INDEX_MAX_BUCKETS, 1, 0), -ENOSPC);
	/* Nothing was written by the rejected calls. */
	assert_true(all_zero(mem, len));
	/* The boundaries that are allowed. */
	assert_int_equal(pd_index_init(mem + PD_CACHE_LINE, need, 64, 64, 0), 0);
	assert_int_equal(pd_index_init(mem, need, 64, 1, 0), 0);
	assert_int_equal(pd_index_init(mem, need, 1, 1, 0), 0);
}

/* Corrupt one header word: open must fail with -EPROTO; restored, it opens. */
static void expect_open_proto(struct tbl *t, uint32_t *field, uint32_t bad)
{
	struct pd_index ix;
	uint32_t saved = *field;

	*field = bad;
	assert_int_equal(pd_index_open(&ix, t->mem, t->len), -EPROTO);
	*field = saved;
	assert_int_equal(pd_index_open(&ix, t->mem, t->len), 0);
}

static void test_open_rejects(void **state)
{
	struct tbl *t = *state;
	struct pd_index_shm *s;
	struct pd_index ix;
	int rc;

	tbl_make(t, 64, 4, 1);
	s = t->mem;
	assert_int_equal(pd_index_open(NULL, t->mem, t->len), -EINVAL);
	assert_int_equal(pd_index_open(&ix, NULL, t->len), -EINVAL);
	assert_int_equal(pd_index_open(&ix, t->mem, t->len - 1), -EPROTO);
	assert_int_equal(pd_index_open(&ix, t->mem, 16), -EPROTO);
	rc = pd_index_open(&ix, (char *)t->mem + 8, t->len - 8);
	assert_true(rc == -EINVAL || rc == -EPROTO);
	expect_open_proto(t, &s->magic, PD_INDEX_MAGIC ^ 1);
	expect_open_proto(t, &s->magic, 0);
	expect_open_proto(t, &s->nbuckets, 128);
	expect_open_proto(t, &s->nbuckets, PD_INDEX_MAX_BUCKETS * 2);
	expect_open_proto(t, &s->nbuckets, 63);
	expect_open_proto(t, &s->nbuckets, 0);
	expect_open_proto(t, &s->max_probe, 0);
	expect_open_proto(t, &s->max_probe, 65);
	expect_open_proto(t, &s->max_probe, UINT32_MAX);
	/* Still the table it was. */
	assert_int_equal(pd_index_open(&ix, t->mem, t->len), 0);
	assert_int_equal(ix.mask, 63);
	assert_int_equal(ix.max_probe, 4);
	assert_int_equal(ix.seed, 1);
}

enum op { OP_INSERT, OP_LOOKUP, OP_PIN, OP_UNPIN, OP_COMMIT, OP_REMOVE, OP_N };

static int call_op(enum op op, struct pd_index *ix, const void *key, uint32_t klen)
{
	struct pd_index_val v = make_val(1, PD_INDEX_PENDING);

	switch (op) {
	case OP_INSERT:
		return pd_index_insert(ix, key, klen, &v);
	case OP_LOOKUP:
		return pd_index_lookup(ix, key, klen, &v);
	case OP_PIN:
		return pd_index_pin(ix, key, klen, &v);
	case OP_UNPIN:
		return pd_index_unpin(ix, key, klen);
	case OP_COMMIT:
		return pd_index_commit(ix, key, klen, 5);
	case OP_REMOVE:
		return pd_index_remove(ix, key, klen);
	case OP_N:
		break;
	}
	return -ENOSYS;
}

static void test_ops_reject_bad_args(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 8, 2);
	struct pd_index_val v = make_val(1, PD_INDEX_PENDING), got;
	uint8_t key[PD_KEY_MAX + 1];

	/* A present 255-byte key: klen 256 over the same bytes must not match it. */
	memset(key, 'k', sizeof(key));
	assert_int_equal(pd_index_insert(ix, key, PD_KEY_MAX, &v), 0);
	for (int op = 0; op < OP_N; op++) {
		assert_int_equal(call_op((enum op)op, NULL, key, PD_KEY_MAX), -EINVAL);
		assert_int_equal(call_op((enum op)op, ix, NULL, PD_KEY_MAX), -EINVAL);
		assert_int_equal(call_op((enum op)op, ix, NULL, 0), -EINVAL);
		assert_int_equal(call_op((enum op)op, ix, key, 0), -EINVAL);
		assert_int_equal(call_op((enum op)op, ix, key, PD_KEY_MAX + 1), -EINVAL);
		assert_int_equal(call_op((enum op)op, ix, key, UINT32_MAX), -EINVAL);
	}
	assert_int_equal(pd_index_insert(ix, key, 4, NULL), -EINVAL);
	assert_int_equal(pd_index_count(NULL), 0);
	/* None of the rejected calls touched the entry. */
	assert_int_equal(pd_index_count(ix), 1);
	assert_int_equal(pd_index_lookup(ix, key, PD_KEY_MAX, &got), 0);
	assert_val(&got, &v, 0);
	check_invariants(ix);
}

static void test_insert_rejects_bad_state(void **state)
{
	static const uint32_t bad[] = { PD_INDEX_FREE, PD_INDEX_DELETED, 4, 0x80000002u,
					UINT32_MAX };
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 8, 3);
	char key[KEY_BUF];
	uint32_t klen = make_key(1, key);

	for (size_t i = 0; i < PD_ARRAY_SIZE(bad); i++) {
		struct pd_index_val v = make_val(1, bad[i]);

		assert_int_equal(pd_index_insert(ix, key, klen, &v), -EINVAL);
	}
	assert_int_equal(pd_index_count(ix), 0);
	expect_absent(ix, 1);
	check_invariants(ix);
}

struct raw_key {
	const char *p;
	uint32_t len;
};

static void test_key_bytes(void **state)
{
	/* Embedded NULs: each of these is its own key, none a prefix match. */
	static const struct raw_key keys[] = { { "a", 1 },    { "a\0", 2 },  { "a\0b", 3 },
					       { "a\0c", 3 }, { "\0", 1 },   { "\0\0", 2 },
					       { "ab", 2 } };
	const size_t n = PD_ARRAY_SIZE(keys);
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 64, 4);
	struct pd_index_val got;

	for (uint32_t i = 0; i < n; i++) {
		struct pd_index_val v = make_val(i, PD_INDEX_COMMITTED);

		assert_int_equal(pd_index_insert(ix, keys[i].p, keys[i].len, &v), 0);
	}
	assert_int_equal(pd_index_count(ix), n);
	for (uint32_t i = 0; i < n; i++) {
		struct pd_index_val want = make_val(i, PD_INDEX_COMMITTED);

		assert_int_equal(pd_index_lookup(ix, keys[i].p, keys[i].len, &got), 0);
		assert_val(&got, &want, 0);
	}
	assert_int_equal(pd_index_remove(ix, keys[1].p, keys[1].len), 0);
	assert_int_equal(pd_index_lookup(ix, keys[1].p, keys[1].len, NULL), -ENOENT);
	assert_int_equal(pd_index_lookup(ix, keys[0].p, keys[0].len, NULL), 0);
	assert_int_equal(pd_index_lookup(ix, keys[2].p, keys[2].len, NULL), 0);
	assert_int_equal(pd_index_count(ix), n - 1);
	check_invariants(ix);
}

static void test_key_max_len(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 8, 5);
	struct pd_index_val v = make_val(9, PD_INDEX_PENDING), got;
	uint8_t key[PD_KEY_MAX];

	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)(i * 7); /* includes NUL bytes */
	assert_int_equal(pd_index_insert(ix, key, PD_KEY_MAX, &v), 0);
	assert_int_equal(pd_index_lookup(ix, key, PD_KEY_MAX, &got), 0);
	assert_val(&got, &v, 0);
	assert_int_equal(pd_index_lookup(ix, key, PD_KEY_MAX - 1, NULL), -ENOENT);
	key[PD_KEY_MAX - 1] ^= 1;
	assert_int_equal(pd_index_lookup(ix, key, PD_KEY_MAX, NULL), -ENOENT);
	key[PD_KEY_MAX - 1] ^= 1;
	assert_int_equal(pd_index_remove(ix, key, PD_KEY_MAX), 0);
	assert_int_equal(pd_index_count(ix), 0);
}

/* ---- entry state machine -------------------------------------------------------- */

static void test_round_trip(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 128, 16, 6);

	insert_range(ix, 0, 50);
	expect_range(ix, 0, 50);
	assert_int_equal(key_lookup(ix, 7, NULL), 0);
	assert_int_equal(pd_index_count(ix), 50);
	assert_int_equal(pd_stat_get(&ix->shm->stats.inserts), 50);
	check_invariants(ix);
}

static void test_duplicate_insert(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 8, 7);
	struct pd_index_val other = make_val(99, PD_INDEX_COMMITTED);
	char key[KEY_BUF];
	uint32_t klen = make_key(4, key);

	assert_int_equal(key_insert(ix, 4), 0);
	assert_int_equal(key_pin(ix, 4, NULL), 1);
	assert_int_equal(pd_index_insert(ix, key, klen, &other), -EEXIST);
	assert_int_equal(key_insert(ix, 4), -EEXIST);
	expect_present(ix, 4, 1);
	assert_int_equal(pd_index_count(ix), 1);
	assert_int_equal(pd_stat_get(&ix->shm->stats.dups), 2);
	check_invariants(ix);
}

static void test_missing_key(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 8, 8);

	expect_absent(ix, 0);
	insert_range(ix, 0, 10);
	for (uint32_t i = 10; i < 20; i++) {
		expect_absent(ix, i);
		assert_int_equal(key_pin(ix, i, NULL), -ENOENT);
		assert_int_equal(key_unpin(ix, i), -ENOENT);
		assert_int_equal(key_commit(ix, i, 1), -ENOENT);
		assert_int_equal(key_remove(ix, i), -ENOENT);
	}
	assert_int_equal(pd_index_count(ix), 10);
	check_invariants(ix);
}

static void test_pin_unpin(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 8, 9);
	struct pd_index_val want = make_val(3, state_of(3)), got;

	assert_int_equal(key_insert(ix, 3), 0);
	for (uint32_t r = 1; r <= 3; r++) {
		assert_int_equal(key_pin(ix, 3, &got), r);
		assert_val(&got, &want, r);
	}
	assert_int_equal(key_pin(ix, 3, NULL), 4);
	expect_present(ix, 3, 4);
	for (int r = 3; r >= 0; r--)
		assert_int_equal(key_unpin(ix, 3), r);
	assert_int_equal(key_unpin(ix, 3), -EINVAL);
	expect_present(ix, 3, 0);
}

static void test_remove_pinned(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 8, 10);

	assert_int_equal(key_insert(ix, 5), 0);
	assert_int_equal(key_pin(ix, 5, NULL), 1);
	assert_int_equal(key_remove(ix, 5), -EBUSY);
	expect_present(ix, 5, 1);
	assert_int_equal(pd_index_count(ix), 1);
	assert_int_equal(key_unpin(ix, 5), 0);
	assert_int_equal(key_remove(ix, 5), 0);
	expect_absent(ix, 5);
	assert_int_equal(key_remove(ix, 5), -ENOENT);
	assert_int_equal(key_pin(ix, 5, NULL), -ENOENT);
	assert_int_equal(pd_index_count(ix), 0);
	check_invariants(ix);
}

static void test_commit(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 8, 11);
	struct pd_index_val want = make_val(2, PD_INDEX_PENDING), got;

	assert_int_equal(state_of(2), PD_INDEX_PENDING);
	assert_int_equal(state_of(1), PD_INDEX_COMMITTED);
	insert_range(ix, 1, 3);
	assert_int_equal(key_commit(ix, 2, 4096), 0);
	want.state = PD_INDEX_COMMITTED;
	want.len = 4096;
	assert_int_equal(key_lookup(ix, 2, &got), 0);
	assert_val(&got, &want, 0);
	/* Already committed: refused, length kept. */
	assert_int_equal(key_commit(ix, 2, 1), -EINVAL);
	assert_int_equal(key_lookup(ix, 2, &got), 0);
	assert_val(&got, &want, 0);
	assert_int_equal(key_commit(ix, 1, 1), -EINVAL);
	expect_present(ix, 1, 0);
}

static void test_count_tracks_live(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 256, 32, 12);

	for (uint32_t i = 0; i < 100; i++) {
		assert_int_equal(key_insert(ix, i), 0);
		assert_int_equal(pd_index_count(ix), i + 1);
	}
	assert_int_equal(key_pin(ix, 1, NULL), 1);
	assert_int_equal(key_insert(ix, 0), -EEXIST);
	assert_int_equal(key_remove(ix, 1), -EBUSY);
	assert_int_equal(key_remove(ix, 100), -ENOENT);
	assert_int_equal(pd_index_count(ix), 100);
	for (uint32_t i = 0; i < 100; i += 2) {
		assert_int_equal(key_remove(ix, i), 0);
		assert_int_equal(pd_index_count(ix), 99 - i / 2);
	}
	assert_int_equal(pd_index_count(ix), 50);
	check_invariants(ix);
}

/* ---- bounded probing and full tables --------------------------------------------- */

/* Insert distinct keys from 0 until -ENOSPC; returns how many went in. */
static uint32_t fill_until_full(struct pd_index *ix, uint32_t limit)
{
	uint32_t i;
	int rc = 0;

	for (i = 0; i < limit; i++) {
		rc = key_insert(ix, i);
		if (rc == -ENOSPC)
			break;
		assert_int_equal(rc, 0);
	}
	assert_int_equal(rc, -ENOSPC);
	assert_window_full(ix, i);
	return i;
}

static void test_bounded_probe_full(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 4, 0x1234);
	uint32_t n = fill_until_full(ix, 1000);

	assert_true(n >= 4 && n <= 64);
	assert_int_equal(pd_index_count(ix), n);
	assert_int_equal(pd_stat_get(&ix->shm->stats.full), 1);
	expect_range(ix, 0, n);
	check_invariants(ix);
	/* Removed keys go back in: their old bucket is within their window. */
	for (uint32_t i = 0; i < n; i += 2)
		assert_int_equal(key_remove(ix, i), 0);
	check_invariants(ix);
	for (uint32_t i = 0; i < n; i += 2)
		assert_int_equal(key_insert(ix, i), 0);
	expect_range(ix, 0, n);
	assert_int_equal(key_insert(ix, n), -ENOSPC);
	/* Emptied, the key that did not fit goes in. */
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(key_remove(ix, i), 0);
	assert_int_equal(key_insert(ix, n), 0);
	expect_present(ix, n, 0);
	check_invariants(ix);
}

static void fill_whole_table(struct tbl *t, uint32_t nbuckets)
{
	struct pd_index *ix = tbl_make(t, nbuckets, nbuckets, 0x77);

	insert_range(ix, 0, nbuckets);
	for (uint32_t i = nbuckets; i < nbuckets + 16; i++) {
		assert_int_equal(key_insert(ix, i), -ENOSPC);
		expect_absent(ix, i); /* a probe of a full table ends */
	}
	assert_int_equal(pd_index_count(ix), nbuckets);
	expect_range(ix, 0, nbuckets);
	check_invariants(ix);
	assert_int_equal(key_remove(ix, nbuckets / 2), 0);
	assert_int_equal(key_insert(ix, nbuckets), 0);
	assert_int_equal(key_insert(ix, nbuckets + 1), -ENOSPC);
	expect_present(ix, nbuckets, 0);
	check_invariants(ix);
}

static void test_full_table(void **state)
{
	fill_whole_table(*state, 1);
	fill_whole_table(*state, 2);
	fill_whole_table(*state, 64);
}

/* ---- tombstones ---------------------------------------------------------------- */

static uint32_t count_state(const struct pd_index *ix, uint32_t state)
{
	uint32_t n = 0;

	for (uint32_t b = 0; b <= ix->mask; b++)
		n += ix->entries[b].state == state;
	return n;
}

static void test_tombstones_swept(void **state)
{
	const uint32_t n = 256;
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 512, 32, 0xfeed);
	uint32_t most = 0;

	insert_range(ix, 0, n);
	/* 37 is coprime with 256: every key once, in scattered order. */
	for (uint32_t k = 0; k < n; k++) {
		assert_int_equal(key_remove(ix, k * 37 % n), 0);
		if (ix->shm->tombstones > most)
			most = ix->shm->tombstones;
		if (k == n / 2)
			check_invariants(ix);
	}
	assert_true(most > 0); /* removal did leave tombstones on the way */
	assert_int_equal(pd_index_count(ix), 0);
	/* With free buckets left, every tombstone is followed by one in the end. */
	assert_int_equal(ix->shm->tombstones, 0);
	assert_int_equal(count_state(ix, PD_INDEX_FREE), 512);
	insert_range(ix, n, 2 * n);
	expect_range(ix, n, 2 * n);
	check_invariants(ix);
}

struct model {
	uint8_t present[CHURN_KEYS];
	uint32_t n;
	uint32_t full;
};

static void model_check_key(struct pd_index *ix, const struct model *m, uint32_t id)
{
	if (m->present[id])
		expect_present(ix, id, 0);
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

		assert_int_equal(key_pin(ix, i, &got), 1);
		assert_val(&got, &want, 1);
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
	assert_int_equal(key_pin(ix, 1, NULL), 1);
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
			expect_present(ix, i, i == 1);
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
	expect_present(ix, b, 0);
	assert_int_equal(pd_stat_get(&ix->shm->stats.repairs), 1);
	assert_int_equal(pd_index_count(ix), 1);
	assert_int_equal(pd_index_lookup(ix, lkey, CRASH_KLEN, NULL), -ENOENT);
	check_invariants(ix);
	/* The half-written bucket is reusable. */
	assert_int_equal(key_insert(ix, 0), 0);
	expect_present(ix, 0, 0);
	expect_present(ix, b, 0);
	check_invariants(ix);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, tbl_setup, tbl_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_memsize_rejects),
		T(test_init_rejects),
		T(test_open_rejects),
		T(test_ops_reject_bad_args),
		T(test_insert_rejects_bad_state),
		T(test_key_bytes),
		T(test_key_max_len),
		T(test_round_trip),
		T(test_duplicate_insert),
		T(test_missing_key),
		T(test_pin_unpin),
		T(test_remove_pinned),
		T(test_commit),
		T(test_count_tracks_live),
		T(test_bounded_probe_full),
		T(test_full_table),
		T(test_tombstones_swept),
		T(test_churn_model),
		T(test_seeds),
		T(test_fork_child_inserts),
		T(test_fork_holder_killed),
		T(test_fork_killed_mid_insert),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
