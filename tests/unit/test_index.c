/* SPDX-License-Identifier: MIT */
/*
 * pd_index.c in one process: negative cases first (sizes, NULLs, alignment,
 * corrupted headers, key lengths, entry states), then the entry state
 * machine, bounded probing and full tables, and tombstones.
 *
 * The table is the one libpdcore.a ships; white-box checks
 * (check_invariants() in index_fixture.h) read its entries directly.
 * The 100k-operation churn against a model, seeds and the cross-process
 * tests are in test_index_mp.c. The journalled pins (pd_index_pin_rec and
 * friends, the agents' pin journal) close the file.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "index_fixture.h"
#include "pd_compiler.h"
#include "pd_index.h"

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

enum op { OP_INSERT, OP_LOOKUP, OP_PIN, OP_UNPIN, OP_COMMIT, OP_REMOVE, OP_PIN_REC,
	  OP_UNPIN_REC, OP_N };

static int call_op(enum op op, struct pd_index *ix, const void *key, uint32_t klen)
{
	static _Atomic uint32_t cell; /* stays empty: every call here is refused */
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
	case OP_PIN_REC:
		return pd_index_pin_rec(ix, key, klen, &v, &cell);
	case OP_UNPIN_REC:
		return pd_index_unpin_rec(ix, key, klen, &cell);
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

/* ---- journalled pins ------------------------------------------------------------ */

static int key_pin_rec(struct pd_index *ix, uint32_t i, _Atomic uint32_t *cell)
{
	char key[KEY_BUF];

	return pd_index_pin_rec(ix, key, make_key(i, key), NULL, cell);
}

static int key_unpin_rec(struct pd_index *ix, uint32_t i, _Atomic uint32_t *cell)
{
	char key[KEY_BUF];

	return pd_index_unpin_rec(ix, key, make_key(i, key), cell);
}

static uint32_t cell_of(_Atomic uint32_t *cell)
{
	return atomic_load(cell);
}

/* The bucket holding key i (white box), asserting it is there. */
static uint32_t bucket_of(const struct pd_index *ix, uint32_t i)
{
	char key[KEY_BUF];
	uint32_t klen = make_key(i, key);

	for (uint32_t b = 0; b <= ix->mask; b++) {
		const struct pd_index_entry *e = &ix->entries[b];

		if (is_live(e->state) && e->klen == klen && memcmp(e->key, key, klen) == 0)
			return b;
	}
	fail_msg("key %u not in the table", i);
	return 0;
}

static void test_rec_rejects(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 8, 21);
	_Atomic uint32_t cell = 0, used = 7;

	assert_int_equal(key_insert(ix, 4), 0);
	assert_int_equal(key_pin_rec(ix, 4, NULL), -EINVAL);
	assert_int_equal(key_unpin_rec(ix, 4, NULL), -EINVAL);
	/* A missing key: no pin, the cell untouched. */
	assert_int_equal(key_pin_rec(ix, 5, &cell), -ENOENT);
	assert_int_equal(cell_of(&cell), 0);
	/* A cell already holding a record is never overwritten (its pin would leak). */
	assert_int_equal(key_pin_rec(ix, 4, &used), -EBUSY);
	assert_int_equal(cell_of(&used), 7);
	expect_present(ix, 4, 0);
	/* An empty cell records no pin: unpin_rec drops nothing. */
	assert_int_equal(key_pin(ix, 4, NULL), 1);
	assert_int_equal(key_unpin_rec(ix, 4, &cell), -ESTALE);
	expect_present(ix, 4, 1);
	assert_int_equal(key_unpin_rec(ix, 5, &cell), -ENOENT);
	/* unpin_bucket: range, free, tombstone, unpinned. */
	assert_int_equal(pd_index_unpin_bucket(NULL, 0), -EINVAL);
	assert_int_equal(pd_index_unpin_bucket(ix, 64), -EINVAL);
	assert_int_equal(pd_index_unpin_bucket(ix, UINT32_MAX), -EINVAL);
	assert_int_equal(pd_index_unpin_bucket(ix, (bucket_of(ix, 4) + 1) & ix->mask), -ENOENT);
	assert_int_equal(key_unpin(ix, 4), 0);
	assert_int_equal(pd_index_unpin_bucket(ix, bucket_of(ix, 4)), -ENOENT);
	expect_present(ix, 4, 0);
	check_invariants(ix);
}

static void test_rec_records_the_bucket(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 8, 22);
	struct pd_index_val want = make_val(9, state_of(9)), got;
	_Atomic uint32_t a = 0, b = 0;
	char key[KEY_BUF];
	uint32_t klen = make_key(9, key);

	insert_range(ix, 0, 20);
	assert_int_equal(pd_index_pin_rec(ix, key, klen, &got, &a), 1);
	assert_val(&got, &want, 1);
	assert_int_equal(cell_of(&a), bucket_of(ix, 9) + 1);
	assert_int_equal(key_pin_rec(ix, 9, &b), 2);
	assert_int_equal(cell_of(&b), cell_of(&a));
	/* Each record drops its own pin, once; the cell is emptied. */
	assert_int_equal(key_unpin_rec(ix, 9, &a), 1);
	assert_int_equal(cell_of(&a), 0);
	assert_int_equal(key_unpin_rec(ix, 9, &a), -ESTALE);
	expect_present(ix, 9, 1);
	/* A record of another key's bucket is not this pin: left alone. */
	assert_int_equal(key_unpin_rec(ix, 8, &b), -ESTALE);
	assert_int_equal(cell_of(&b), bucket_of(ix, 9) + 1);
	assert_int_equal(key_unpin_rec(ix, 9, &b), 0);
	assert_int_equal(cell_of(&b), 0);
	expect_present(ix, 9, 0);
	check_invariants(ix);
}

/* The broker takes a dead agent's record (atomic exchange, then unpin by
 * bucket); the agent, if it still runs, then finds its record gone and
 * drops nothing. A double drop would take the other agent's pin too and let
 * the broker free a chunk that agent still reads. */
static void test_rec_never_drops_a_pin_twice(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 8, 23);
	_Atomic uint32_t dead = 0, other = 0;
	uint32_t rec;

	insert_range(ix, 0, 10);
	assert_int_equal(key_pin_rec(ix, 3, &dead), 1);
	assert_int_equal(key_pin_rec(ix, 3, &other), 2);
	rec = atomic_exchange(&dead, 0);
	assert_int_equal(rec, bucket_of(ix, 3) + 1);
	assert_int_equal(pd_index_unpin_bucket(ix, rec - 1), 0);
	expect_present(ix, 3, 1);
	/* The late unpin of the taken record, and a second taking: no effect. */
	assert_int_equal(key_unpin_rec(ix, 3, &dead), -ESTALE);
	assert_int_equal(atomic_exchange(&dead, 0), 0);
	expect_present(ix, 3, 1);
	assert_int_equal(key_remove(ix, 3), -EBUSY); /* the other pin holds it */
	assert_int_equal(key_unpin_rec(ix, 3, &other), 0);
	assert_int_equal(pd_index_unpin_bucket(ix, rec - 1), -ENOENT); /* no underflow */
	expect_present(ix, 3, 0);
	assert_int_equal(key_remove(ix, 3), 0);
	check_invariants(ix);
}

/* A pinned entry keeps its bucket through removals, sweeps and inserts
 * around it, so its journal record stays valid as long as the pin. */
static void test_pinned_entry_keeps_its_bucket(void **state)
{
	const uint32_t n = 48;
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 64, 24);
	_Atomic uint32_t cell = 0;
	uint32_t b;

	insert_range(ix, 0, n);
	assert_int_equal(key_pin_rec(ix, 17, &cell), 1);
	b = cell_of(&cell) - 1;
	for (uint32_t k = 0; k < n; k++)
		assert_int_equal(key_remove(ix, k), k == 17 ? -EBUSY : 0);
	insert_range(ix, n, 2 * n - 4);
	assert_int_equal(bucket_of(ix, 17), b);
	expect_present(ix, 17, 1);
	check_invariants(ix);
	assert_int_equal(pd_index_unpin_bucket(ix, b), 0);
	assert_int_equal(key_remove(ix, 17), 0);
	/* The bucket may now hold another key: an old record must not be used. */
	assert_int_equal(key_unpin_rec(ix, 17, &cell), -ENOENT);
	check_invariants(ix);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TBL_TEST(test_memsize_rejects),
		TBL_TEST(test_init_rejects),
		TBL_TEST(test_open_rejects),
		TBL_TEST(test_ops_reject_bad_args),
		TBL_TEST(test_insert_rejects_bad_state),
		TBL_TEST(test_key_bytes),
		TBL_TEST(test_key_max_len),
		TBL_TEST(test_round_trip),
		TBL_TEST(test_duplicate_insert),
		TBL_TEST(test_missing_key),
		TBL_TEST(test_pin_unpin),
		TBL_TEST(test_remove_pinned),
		TBL_TEST(test_commit),
		TBL_TEST(test_count_tracks_live),
		TBL_TEST(test_bounded_probe_full),
		TBL_TEST(test_full_table),
		TBL_TEST(test_tombstones_swept),
		TBL_TEST(test_rec_rejects),
		TBL_TEST(test_rec_records_the_bucket),
		TBL_TEST(test_rec_never_drops_a_pin_twice),
		TBL_TEST(test_pinned_entry_keeps_its_bucket),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
