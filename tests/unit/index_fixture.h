/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_INDEX_FIXTURE_H
#define PD_TESTS_UNIT_INDEX_FIXTURE_H

/*
 * Fixture and checks shared by the recv index tests: test_index.c (single
 * process semantics) and test_index_mp.c (churn, seeds, several processes).
 *
 * - struct tbl: a table in MAP_SHARED memory (inherited across fork()),
 *   built per test by tbl_make(); TBL_TEST() wraps a test in its setup and
 *   teardown.
 * - tbl_make() also gives the table TBL_JOURNALS hazard journals of
 *   TBL_CELLS cells (shared memory too), scanned by its removals;
 *   tbl_cell(t, j, c) is cell c of journal j.
 * - Key i is make_key(i) -> make_val(i, state_of(i)); the key_* wrappers
 *   and the fixture helpers call no cmocka assert, so children use them too.
 * - White-box checks read the table directly: every live entry is reachable
 *   from its home bucket (within max_probe, no free bucket on the way), the
 *   counters match the entries, and no tombstone is followed by a free
 *   bucket.
 *
 * Header-only (static inline) so each test binary takes what it uses.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "pd_test.h"
#include "pd_compiler.h"
#include "pd_index.h"

#define KEY_BUF 64u /* make_key() output */

#define TBL_JOURNALS 4u  /* hazard journals tbl_make() gives the table */
#define TBL_CELLS    16u /* cells per journal */

struct tbl {
	void *mem;
	size_t len;
	size_t ilen;             /* the table's bytes (the journals follow) */
	struct pd_index ix;
	_Atomic uint64_t *cells; /* TBL_JOURNALS x TBL_CELLS, after the table in mem */
};

#define TBL_TEST(fn) cmocka_unit_test_setup_teardown(fn, tbl_setup, tbl_teardown)

/* ---- fixtures and helpers (no cmocka asserts: children use them too) -------- */

static inline int tbl_setup(void **state)
{
	*state = calloc(1, sizeof(struct tbl));
	return *state ? 0 : -1;
}

static inline void tbl_release(struct tbl *t)
{
	pd_test_shared_free(t->mem, t->len);
	t->mem = NULL;
	t->len = 0;
}

static inline int tbl_teardown(void **state)
{
	struct tbl *t = *state;

	tbl_release(t);
	free(t);
	return 0;
}

static inline void *tbl_alloc(struct tbl *t, size_t len)
{
	tbl_release(t);
	t->mem = pd_test_shared_alloc(len);
	t->len = t->mem ? len : 0;
	return t->mem;
}

static inline uint32_t make_key(uint32_t i, char *buf)
{
	int n = snprintf(buf, KEY_BUF, "req-%u/layer-%u/chunk-%u", i % 97, i % 13, i);

	return (uint32_t)n;
}

static inline uint32_t state_of(uint32_t i)
{
	return i % 2 ? PD_INDEX_COMMITTED : PD_INDEX_PENDING;
}

static inline struct pd_index_val make_val(uint32_t i, uint32_t state)
{
	return (struct pd_index_val){ .req = 0xabc0000000000000ull | i, .slot = i * 3 + 1,
				      .gen = i ^ 0x5a5a5a5au, .len = i * 16 + 7,
				      .state = state };
}

static inline int key_insert(struct pd_index *ix, uint32_t i)
{
	struct pd_index_val v = make_val(i, state_of(i));
	char key[KEY_BUF];

	return pd_index_insert(ix, key, make_key(i, key), &v);
}

static inline int key_lookup(struct pd_index *ix, uint32_t i, struct pd_index_val *out)
{
	char key[KEY_BUF];

	return pd_index_lookup(ix, key, make_key(i, key), out);
}

static inline int key_pin(struct pd_index *ix, uint32_t i, struct pd_index_val *out,
			  _Atomic uint64_t *cell)
{
	struct pd_index_val v;
	char key[KEY_BUF];

	return pd_index_pin(ix, key, make_key(i, key), out ? out : &v, cell);
}

static inline _Atomic uint64_t *tbl_cell(struct tbl *t, uint32_t j, uint32_t c)
{
	return &t->cells[j * TBL_CELLS + c];
}

static inline int key_remove(struct pd_index *ix, uint32_t i)
{
	char key[KEY_BUF];

	return pd_index_remove(ix, key, make_key(i, key));
}

static inline int key_remove_chunk(struct pd_index *ix, uint32_t i, const struct pd_index_val *v)
{
	char key[KEY_BUF];

	return pd_index_remove_chunk(ix, key, make_key(i, key), v->slot, v->gen);
}

static inline int is_live(uint32_t state)
{
	return state == PD_INDEX_PENDING || state == PD_INDEX_COMMITTED;
}

/* ---- assertion helpers -------------------------------------------------------- */

static inline struct pd_index *tbl_make(struct tbl *t, uint32_t nbuckets, uint32_t max_probe,
					uint64_t seed)
{
	int64_t need = pd_index_memsize(nbuckets);
	size_t cells = TBL_JOURNALS * TBL_CELLS * sizeof(_Atomic uint64_t);
	struct pd_index_journals j = { .njournals = TBL_JOURNALS, .ncells = TBL_CELLS };

	assert_true(need > 0);
	assert_non_null(tbl_alloc(t, (size_t)need + cells));
	assert_int_equal(pd_index_init(t->mem, (size_t)need, nbuckets, max_probe, seed), 0);
	assert_int_equal(pd_index_open(&t->ix, t->mem, (size_t)need), 0);
	t->ilen = (size_t)need;
	t->cells = (_Atomic uint64_t *)((char *)t->mem + need);
	j.cells = t->cells;
	pd_index_set_journals(&t->ix, &j);
	return &t->ix;
}

static inline void assert_val(const struct pd_index_val *got, const struct pd_index_val *want)
{
	assert_int_equal(got->req, want->req);
	assert_int_equal(got->slot, want->slot);
	assert_int_equal(got->gen, want->gen);
	assert_int_equal(got->len, want->len);
	assert_int_equal(got->state, want->state);
}

static inline void expect_present(struct pd_index *ix, uint32_t i)
{
	struct pd_index_val want = make_val(i, state_of(i)), got;

	memset(&got, 0xee, sizeof(got));
	assert_int_equal(key_lookup(ix, i, &got), 0);
	assert_val(&got, &want);
}

static inline void expect_absent(struct pd_index *ix, uint32_t i)
{
	assert_int_equal(key_lookup(ix, i, NULL), -ENOENT);
}

static inline void insert_range(struct pd_index *ix, uint32_t from, uint32_t to)
{
	for (uint32_t i = from; i < to; i++)
		assert_int_equal(key_insert(ix, i), 0);
}

static inline void expect_range(struct pd_index *ix, uint32_t from, uint32_t to)
{
	for (uint32_t i = from; i < to; i++)
		expect_present(ix, i);
}

/* -ENOSPC is only right when every bucket of the key's window is live. */
static inline void assert_window_full(const struct pd_index *ix, uint32_t i)
{
	char key[KEY_BUF];
	uint64_t h = XXH3_64bits_withSeed(key, make_key(i, key), ix->seed);

	for (uint32_t d = 0; d < ix->max_probe; d++)
		assert_true(is_live(ix->entries[(uint32_t)(h + d) & ix->mask].state));
}

/* A live entry sits within max_probe of its home, with no free bucket between. */
static inline void check_reachable(const struct pd_index *ix, uint32_t b)
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

static inline void check_invariants(const struct pd_index *ix)
{
	uint32_t nlive = 0, ndead = 0, nretired = 0;

	for (uint32_t b = 0; b <= ix->mask; b++) {
		uint32_t state = ix->entries[b].state;
		uint32_t next = ix->entries[(b + 1) & ix->mask].state;

		assert_true(state <= PD_INDEX_RETIRED);
		assert_int_equal(atomic_load(&ix->entries[b].seq) & 1u, 0);
		if (is_live(state) || state == PD_INDEX_RETIRED) {
			nlive += state != PD_INDEX_RETIRED;
			nretired += state == PD_INDEX_RETIRED;
			check_reachable(ix, b);
		} else if (state == PD_INDEX_DELETED) {
			ndead++;
			assert_int_not_equal(next, PD_INDEX_FREE);
		}
	}
	assert_int_equal(nlive, ix->shm->count);
	assert_int_equal(ndead, ix->shm->tombstones);
	assert_int_equal(nretired, ix->shm->retired);
	assert_int_equal(pd_index_count(ix), nlive);
}

#endif
