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
	assert_int_equal(pd_index_open(&ix, t->mem, t->ilen), -EPROTO);
	*field = saved;
	assert_int_equal(pd_index_open(&ix, t->mem, t->ilen), 0);
}

static void test_open_rejects(void **state)
{
	struct tbl *t = *state;
	struct pd_index_shm *s;
	struct pd_index ix;
	int rc;

	tbl_make(t, 64, 4, 1);
	s = t->mem;
	assert_int_equal(pd_index_open(NULL, t->mem, t->ilen), -EINVAL);
	assert_int_equal(pd_index_open(&ix, NULL, t->ilen), -EINVAL);
	assert_int_equal(pd_index_open(&ix, t->mem, t->ilen - 1), -EPROTO);
	assert_int_equal(pd_index_open(&ix, t->mem, 16), -EPROTO);
	rc = pd_index_open(&ix, (char *)t->mem + 8, t->ilen - 8);
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
	assert_int_equal(pd_index_open(&ix, t->mem, t->ilen), 0);
	assert_int_equal(ix.mask, 63);
	assert_int_equal(ix.max_probe, 4);
	assert_int_equal(ix.seed, 1);
}

enum op { OP_INSERT, OP_LOOKUP, OP_PIN, OP_COMMIT, OP_REMOVE, OP_REMOVE_CHUNK, OP_N };

static int call_op(enum op op, struct pd_index *ix, const void *key, uint32_t klen)
{
	static _Atomic uint64_t cell; /* stays empty: every call here is refused */
	struct pd_index_val v = make_val(1, PD_INDEX_PENDING);

	switch (op) {
	case OP_INSERT:
		return pd_index_insert(ix, key, klen, &v);
	case OP_LOOKUP:
		return pd_index_lookup(ix, key, klen, &v);
	case OP_PIN:
		return pd_index_pin(ix, key, klen, &v, &cell);
	case OP_COMMIT:
		return pd_index_commit(ix, key, klen, 5);
	case OP_REMOVE:
		return pd_index_remove(ix, key, klen);
	case OP_REMOVE_CHUNK:
		return pd_index_remove_chunk(ix, key, klen, v.slot, v.gen);
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
	assert_val(&got, &v);
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
		assert_val(&got, &want);
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
	assert_val(&got, &v);
	assert_int_equal(pd_index_lookup(ix, key, PD_KEY_MAX - 1, NULL), -ENOENT);
	key[PD_KEY_MAX - 1] ^= 1;
	assert_int_equal(pd_index_lookup(ix, key, PD_KEY_MAX, NULL), -ENOENT);
	key[PD_KEY_MAX - 1] ^= 1;
	assert_int_equal(pd_index_remove(ix, key, PD_KEY_MAX), 0);
	assert_int_equal(pd_index_count(ix), 0);
}

/* ---- entry state machine -------------------------------------------------------- */

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
	assert_int_equal(key_pin(ix, 4, NULL, tbl_cell(t, 0, 0)), -ENOENT); /* pending */
	assert_int_equal(pd_index_insert(ix, key, klen, &other), -EEXIST);
	assert_int_equal(key_insert(ix, 4), -EEXIST);
	expect_present(ix, 4);
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
		assert_int_equal(key_pin(ix, i, NULL, tbl_cell(t, 0, 0)), -ENOENT);
		assert_int_equal(atomic_load(tbl_cell(t, 0, 0)), 0);
		assert_int_equal(key_commit(ix, i, 1), -ENOENT);
		assert_int_equal(key_remove(ix, i), -ENOENT);
	}
	assert_int_equal(pd_index_count(ix), 10);
	check_invariants(ix);
}

/* The bucket holding key i, live or retired (white box), asserting it is there. */
static uint32_t bucket_of(const struct pd_index *ix, uint32_t i)
{
	char key[KEY_BUF];
	uint32_t klen = make_key(i, key);

	for (uint32_t b = 0; b <= ix->mask; b++) {
		const struct pd_index_entry *e = &ix->entries[b];

		if ((is_live(e->state) || e->state == PD_INDEX_RETIRED) && e->klen == klen &&
		    memcmp(e->key, key, klen) == 0)
			return b;
	}
	fail_msg("key %u not in the table", i);
	return 0;
}

static uint32_t seq_at(const struct pd_index *ix, uint32_t b)
{
	return atomic_load(&ix->entries[b].seq);
}

/* A pin stores (bucket, seq) in its cell, returns the entry's values and
 * writes nothing in the table; unpin empties only a cell holding its value. */
static void test_pin_unpin(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 8, 9);
	struct pd_index_val want = make_val(3, state_of(3)), got;
	_Atomic uint64_t *a = tbl_cell(t, 0, 0), *b = tbl_cell(t, 1, 5);
	void *before = malloc(t->ilen);
	uint32_t bk;

	assert_non_null(before);
	assert_int_equal(state_of(3), PD_INDEX_COMMITTED);
	assert_int_equal(key_insert(ix, 3), 0);
	bk = bucket_of(ix, 3);
	memcpy(before, t->mem, t->ilen);
	assert_int_equal(key_pin(ix, 3, &got, a), 0);
	assert_val(&got, &want);
	assert_int_equal(got.hazard, PD_INDEX_HAZARD(bk, seq_at(ix, bk)));
	assert_int_equal(atomic_load(a), got.hazard);
	assert_int_equal(key_pin(ix, 3, &got, b), 0); /* another journal: the same hazard */
	assert_int_equal(atomic_load(b), atomic_load(a));
	assert_int_equal(key_pin(ix, 3, &got, a), -EBUSY); /* a held cell is kept */
	assert_int_equal(key_pin(ix, 2, NULL, tbl_cell(t, 0, 1)), -ENOENT); /* pending */
	assert_int_equal(atomic_load(tbl_cell(t, 0, 1)), 0);
	assert_memory_equal(before, t->mem, t->ilen);
	free(before);
	assert_int_equal(pd_index_unpin(a, got.hazard + 1), -ESTALE);
	assert_int_equal(atomic_load(a), got.hazard);
	assert_int_equal(pd_index_unpin(a, got.hazard), 0);
	assert_int_equal(atomic_load(a), 0);
	assert_int_equal(pd_index_unpin(a, got.hazard), -ESTALE);
	assert_int_equal(pd_index_unpin(a, 0), -EINVAL);
	assert_int_equal(pd_index_unpin(NULL, got.hazard), -EINVAL);
	assert_int_equal(pd_index_pin(ix, "k", 1, NULL, a), -EINVAL);
	assert_int_equal(key_pin(ix, 3, &got, NULL), -EINVAL);
	assert_int_equal(pd_index_unpin(b, got.hazard), 0);
	expect_present(ix, 3);
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
	assert_val(&got, &want);
	/* Already committed: refused, length kept. */
	assert_int_equal(key_commit(ix, 2, 1), -EINVAL);
	assert_int_equal(key_lookup(ix, 2, &got), 0);
	assert_val(&got, &want);
	assert_int_equal(key_commit(ix, 1, 1), -EINVAL);
	expect_present(ix, 1);
}

static void test_count_tracks_live(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 256, 32, 12);

	for (uint32_t i = 0; i < 100; i++) {
		assert_int_equal(key_insert(ix, i), 0);
		assert_int_equal(pd_index_count(ix), i + 1);
	}
	assert_int_equal(key_pin(ix, 1, NULL, tbl_cell(t, 1, 3)), 0);
	assert_int_equal(key_insert(ix, 0), -EEXIST);
	assert_int_equal(key_remove(ix, 1), -EBUSY); /* retired: no longer counted */
	assert_int_equal(pd_index_count(ix), 99);
	atomic_store(tbl_cell(t, 1, 3), 0);
	assert_int_equal(key_remove(ix, 1), 0);
	assert_int_equal(key_insert(ix, 1), 0);
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
	expect_present(ix, n);
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
	expect_present(ix, nbuckets);
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

/* ---- hazards --------------------------------------------------------------------- */

/* An entry a cell names is retired, not freed: no longer found, its bucket
 * and values kept; freed by the first removal after the cell is emptied. */
static void test_hazard_not_removed(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 8, 10);
	_Atomic uint64_t *c = tbl_cell(t, 2, 7);
	struct pd_index_val got;
	uint32_t b;

	insert_range(ix, 0, 12);
	b = bucket_of(ix, 5);
	assert_int_equal(key_pin(ix, 5, &got, c), 0);
	assert_int_equal(key_remove(ix, 5), -EBUSY);
	assert_int_equal(ix->entries[b].state, PD_INDEX_RETIRED);
	expect_absent(ix, 5);
	assert_int_equal(key_pin(ix, 5, NULL, tbl_cell(t, 0, 0)), -ENOENT);
	assert_int_equal(pd_index_count(ix), 11);
	assert_int_equal(ix->shm->retired, 1);
	check_invariants(ix);
	assert_int_equal(key_remove(ix, 5), -EBUSY); /* rescanned: still named */
	assert_int_equal(pd_stat_get(&ix->shm->stats.busy), 2);
	for (uint32_t i = 100; i < 200; i++)
		(void)key_insert(ix, i); /* fills the table: never bucket b */
	assert_int_equal(ix->entries[b].state, PD_INDEX_RETIRED);
	assert_int_equal(bucket_of(ix, 5), b);
	assert_int_equal(ix->entries[b].slot, got.slot);
	assert_int_equal(ix->entries[b].len, got.len);
	check_invariants(ix);
	assert_int_equal(pd_index_unpin(c, got.hazard), 0);
	assert_int_equal(key_remove(ix, 5), 0);
	assert_int_equal(ix->shm->retired, 0);
	assert_int_equal(key_remove(ix, 5), -ENOENT);
	check_invariants(ix);
}

/* A hazard names one incarnation: a stale one (the bucket's previous
 * entry) keeps nothing; the exact one, even written by hand, keeps that one. */
static void test_hazard_names_one_incarnation(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 8, 11);
	struct pd_index_val got;
	uint32_t b;

	insert_range(ix, 0, 10);
	assert_int_equal(key_pin(ix, 3, &got, tbl_cell(t, 0, 0)), 0);
	assert_int_equal(pd_index_unpin(tbl_cell(t, 0, 0), got.hazard), 0);
	assert_int_equal(key_remove(ix, 3), 0);
	assert_int_equal(key_insert(ix, 3), 0);
	b = bucket_of(ix, 3);
	atomic_store(tbl_cell(t, 1, 1), got.hazard); /* the old incarnation */
	atomic_store(tbl_cell(t, 1, 2), PD_INDEX_HAZARD(b, seq_at(ix, b) + 2)); /* a later one */
	assert_int_equal(key_remove(ix, 3), 0);
	assert_int_equal(key_insert(ix, 3), 0);
	b = bucket_of(ix, 3);
	atomic_store(tbl_cell(t, 3, 15), PD_INDEX_HAZARD(b, seq_at(ix, b)));
	assert_int_equal(key_remove(ix, 3), -EBUSY);
	atomic_store(tbl_cell(t, 3, 15), 0);
	assert_int_equal(key_remove(ix, 3), 0);
	check_invariants(ix);
}

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* A garbage cell value: random, a live bucket at a wrong seq, or no bucket. */
static uint64_t garbage(const struct pd_index *ix, uint64_t *rng)
{
	uint64_t r = xorshift(rng);
	uint32_t b = (uint32_t)(r >> 8) & ix->mask, s = seq_at(ix, b);

	switch (r % 6) {
	case 0:  return r;
	case 1:  return PD_INDEX_HAZARD(b, s + 2);
	case 2:  return PD_INDEX_HAZARD(b, s - 2);
	case 3:  return PD_INDEX_HAZARD(b, s + 1);
	case 4:  return PD_INDEX_HAZARD(ix->mask + 1 + (r >> 40), s);
	default: return r % 2 ? UINT64_MAX : PD_INDEX_HAZARD(UINT32_MAX - 1, s) - 1;
	}
}

/* Journals full of garbage, plus one exact hazard on key 21: removals of
 * every other key succeed, key 21's is refused until its cell goes. */
static void test_garbage_cells(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 16, 12);
	uint64_t rng = 0x9e3779b97f4a7c15ull;
	uint32_t b;

	insert_range(ix, 0, 40);
	for (uint32_t k = 0; k < TBL_JOURNALS * TBL_CELLS; k++)
		atomic_store(&t->cells[k], garbage(ix, &rng));
	b = bucket_of(ix, 21);
	atomic_store(tbl_cell(t, 2, 9), PD_INDEX_HAZARD(b, seq_at(ix, b)));
	for (uint32_t i = 0; i < 40; i++)
		assert_int_equal(key_remove(ix, i), i == 21 ? -EBUSY : 0);
	check_invariants(ix);
	assert_int_equal(pd_index_count(ix), 0);
	insert_range(ix, 100, 130); /* the buckets freed are reused */
	assert_int_equal(bucket_of(ix, 21), b);
	atomic_store(tbl_cell(t, 2, 9), 0);
	assert_int_equal(key_remove(ix, 21), 0);
	check_invariants(ix);
}

/* While a retired entry waits, its key can go in again (another bucket);
 * removal by chunk tells the two apart, and a plain one takes the retired. */
static void test_retired_key_reinserted(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 8, 13);
	struct pd_index_val old = make_val(7, PD_INDEX_COMMITTED), nu = old, got;
	_Atomic uint64_t *c = tbl_cell(t, 0, 4);
	char key[KEY_BUF];
	uint32_t klen = make_key(7, key);

	nu.slot += 1000;
	nu.gen += 1;
	assert_int_equal(pd_index_insert(ix, key, klen, &old), 0);
	assert_int_equal(key_pin(ix, 7, &got, c), 0);
	assert_int_equal(key_remove_chunk(ix, 7, &old), -EBUSY);
	assert_int_equal(pd_index_insert(ix, key, klen, &nu), 0);
	assert_int_equal(pd_index_lookup(ix, key, klen, &got), 0);
	assert_val(&got, &nu);
	assert_int_equal(key_remove_chunk(ix, 7, &old), -EBUSY);
	assert_int_equal(key_remove(ix, 7), -EBUSY); /* the retired one first */
	expect_absent(ix, 9);
	assert_int_equal(pd_index_lookup(ix, key, klen, &got), 0);
	assert_val(&got, &nu);
	assert_int_equal(key_remove_chunk(ix, 7, &nu), 0);
	assert_int_equal(pd_index_lookup(ix, key, klen, NULL), -ENOENT);
	assert_int_equal(key_remove_chunk(ix, 7, &nu), -ENOENT);
	assert_int_equal(atomic_exchange(c, 0) != 0, 1); /* as a detach empties it */
	assert_int_equal(key_remove_chunk(ix, 7, &old), 0);
	assert_int_equal(key_remove(ix, 7), -ENOENT);
	check_invariants(ix);
}

/* Only journals whose owner word is set are scanned (free agent slots). */
static void test_free_agent_slots_skipped(void **state)
{
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 8, 14);
	_Atomic uint32_t owner[TBL_JOURNALS][2] = { { 1 }, { 0 }, { 1 }, { 0 } };
	struct pd_index_journals j = { .cells = t->cells, .owner = &owner[0][0],
				       .owner_stride = sizeof(owner[0]),
				       .njournals = TBL_JOURNALS, .ncells = TBL_CELLS };

	pd_index_set_journals(ix, &j);
	insert_range(ix, 0, 10);
	assert_int_equal(key_pin(ix, 1, NULL, tbl_cell(t, 1, 0)), 0);
	assert_int_equal(key_pin(ix, 3, NULL, tbl_cell(t, 2, TBL_CELLS - 1)), 0);
	assert_int_equal(key_remove(ix, 1), 0);
	assert_int_equal(key_remove(ix, 3), -EBUSY);
	pd_index_set_journals(ix, NULL); /* no journals: nothing holds */
	assert_int_equal(key_remove(ix, 3), 0);
	check_invariants(ix);
}

/* A pinned entry keeps its bucket through removals, sweeps and inserts
 * around it, so its hazard goes on naming it. */
static void test_pinned_entry_keeps_its_bucket(void **state)
{
	const uint32_t n = 48;
	struct tbl *t = *state;
	struct pd_index *ix = tbl_make(t, 64, 64, 24);
	_Atomic uint64_t *cell = tbl_cell(t, 0, 0);
	struct pd_index_val got;
	uint32_t b;

	insert_range(ix, 0, n);
	assert_int_equal(key_pin(ix, 17, &got, cell), 0);
	b = bucket_of(ix, 17);
	for (uint32_t k = 0; k < n; k++)
		assert_int_equal(key_remove(ix, k), k == 17 ? -EBUSY : 0);
	insert_range(ix, n, 2 * n - 4);
	assert_int_equal(bucket_of(ix, 17), b);
	assert_int_equal(got.hazard, PD_INDEX_HAZARD(b, seq_at(ix, b) - 2));
	check_invariants(ix);
	assert_int_equal(pd_index_unpin(cell, got.hazard), 0);
	assert_int_equal(key_remove(ix, 17), 0);
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
		TBL_TEST(test_commit),
		TBL_TEST(test_count_tracks_live),
		TBL_TEST(test_bounded_probe_full),
		TBL_TEST(test_full_table),
		TBL_TEST(test_tombstones_swept),
		TBL_TEST(test_hazard_not_removed),
		TBL_TEST(test_hazard_names_one_incarnation),
		TBL_TEST(test_garbage_cells),
		TBL_TEST(test_retired_key_reinserted),
		TBL_TEST(test_free_agent_slots_skipped),
		TBL_TEST(test_pinned_entry_keeps_its_bucket),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
