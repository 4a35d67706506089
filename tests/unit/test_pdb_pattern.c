/* SPDX-License-Identifier: MIT */
/*
 * pdbench's chunk pattern (tools/pdbench/pdb_pattern.c): what it fills is
 * what it checks, and the check finds every changed byte at its offset
 * (in the header or the tail of a block, on either side of the windows it
 * compares), another chunk's bytes, a block moved inside the chunk, and a
 * chunk made by another request, rank or chunk index.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pd_compiler.h"

#include "../../tools/pdbench/pdb_pattern.c"

#define BIG (3u * WINDOW + 100u) /* three windows and a partial one */

static unsigned char *filled(uint32_t len, uint64_t seed)
{
	unsigned char *p = malloc(len ? len : 1);

	assert_non_null(p);
	pd_bench_fill(p, len, seed);
	return p;
}

/* ---- negative: what is not the pattern is found ----------------------------------- */

static void test_other_bytes_differ_at_once(void **state)
{
	uint64_t seed = pd_bench_chunk_seed(1, 2, 0, 3);
	unsigned char *p = calloc(1, BIG);

	(void)state;
	assert_non_null(p);
	assert_int_equal(pd_bench_diff(p, BIG, seed), 0); /* zeros */
	memset(p, 0xff, BIG);
	assert_int_equal(pd_bench_diff(p, BIG, seed), 0);
	pd_bench_fill(p, BIG, seed);
	assert_int_equal(pd_bench_diff(p, BIG, seed ^ 1), 0); /* another seed */
	free(p);
}

/* A chunk of another request, rank or chunk index differs in its first byte. */
static void test_neighbours_differ(void **state)
{
	static const uint32_t other[][3] = { { 7, 1, 5 }, { 6, 0, 5 }, { 6, 1, 4 }, { 6, 1, 6 },
					     { 5, 1, 5 }, { 6, 2, 5 } };
	uint64_t mine = pd_bench_chunk_seed(42, 6, 1, 5);

	(void)state;
	for (size_t i = 0; i < PD_ARRAY_SIZE(other); i++) {
		uint64_t s = pd_bench_chunk_seed(42, other[i][0], other[i][1], other[i][2]);
		unsigned char *p = filled(BIG, s);

		assert_true(s != mine);
		assert_int_equal(pd_bench_diff(p, BIG, mine), 0);
		free(p);
	}
}

/* Every block names its chunk and place: block b of another chunk, or a
 * block of this chunk put at b, is found at b. */
static void test_misplaced_blocks_found(void **state)
{
	uint64_t seed = pd_bench_chunk_seed(1, 9, 0, 0);
	unsigned char *p = filled(BIG, seed), *q = filled(BIG, seed + 1);
	const uint32_t blocks[] = { 0, 1, WINDOW / BLOCK - 1, WINDOW / BLOCK, BIG / BLOCK - 2 };

	(void)state;
	for (size_t i = 0; i < PD_ARRAY_SIZE(blocks); i++) {
		uint32_t off = blocks[i] * BLOCK;

		pd_bench_fill(p, BIG, seed);
		memcpy(p + off, q + off, BLOCK); /* another chunk's block b */
		assert_int_equal(pd_bench_diff(p, BIG, seed), off);
		pd_bench_fill(p, BIG, seed);
		memcpy(p + off, p + off + BLOCK, BLOCK); /* the next block, one place early */
		assert_int_equal(pd_bench_diff(p, BIG, seed), off);
	}
	free(p);
	free(q);
}

/* Every changed byte of a small chunk, each bit, is found at its offset. */
static void test_every_byte_checked(void **state)
{
	const uint32_t len = 3 * BLOCK + 11;
	uint64_t seed = pd_bench_chunk_seed(3, 1, 0, 2);
	unsigned char *p = filled(len, seed);

	(void)state;
	for (uint32_t off = 0; off < len; off++) {
		for (uint32_t bit = 0; bit < 8; bit++) {
			p[off] ^= (unsigned char)(1u << bit);
			if (pd_bench_diff(p, len, seed) != off)
				fail_msg("bit %u of byte %u changed, not found there", bit, off);
			p[off] ^= (unsigned char)(1u << bit);
		}
	}
	assert_int_equal(pd_bench_diff(p, len, seed), len);
	free(p);
}

/* Around the windows the check compares at a time, and at the ends. */
static void test_changes_at_window_edges(void **state)
{
	const uint32_t offs[] = { 0, 7, 8, BLOCK - 1, BLOCK, WINDOW - 1, WINDOW, WINDOW + 1,
				  2 * WINDOW - 8, 3 * WINDOW, BIG - 9, BIG - 1 };
	uint64_t seed = pd_bench_chunk_seed(5, 0, 0, 1);
	unsigned char *p = filled(BIG, seed);

	(void)state;
	for (size_t i = 0; i < PD_ARRAY_SIZE(offs); i++) {
		p[offs[i]] ^= 0x40;
		assert_int_equal(pd_bench_diff(p, BIG, seed), offs[i]);
		p[BIG - 1] ^= 0x01; /* a later change too: the first one is named */
		assert_int_equal(pd_bench_diff(p, BIG, seed), offs[i]);
		p[BIG - 1] ^= 0x01;
		p[offs[i]] ^= 0x40;
	}
	free(p);
}

/* ---- positive: what is filled checks, at every length --------------------------------- */

static void test_fill_then_check(void **state)
{
	const uint32_t lens[] = { 0, 1, 7, 8, 9, BLOCK - 1, BLOCK, BLOCK + 1, WINDOW - 1, WINDOW,
				  WINDOW + 1, BIG, 1u << 20 };

	(void)state;
	for (size_t i = 0; i < PD_ARRAY_SIZE(lens); i++) {
		uint64_t seed = pd_bench_chunk_seed(11, (uint32_t)i, 0, 0);
		unsigned char *p = filled(lens[i], seed), *q = filled(lens[i] + 100, seed);

		assert_int_equal(pd_bench_diff(p, lens[i], seed), lens[i]);
		/* a partial chunk is the start of a whole one */
		if (lens[i])
			assert_memory_equal(p, q, lens[i]);
		free(p);
		free(q);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_other_bytes_differ_at_once),
		cmocka_unit_test(test_neighbours_differ),
		cmocka_unit_test(test_misplaced_blocks_found),
		cmocka_unit_test(test_every_byte_checked),
		cmocka_unit_test(test_changes_at_window_edges),
		cmocka_unit_test(test_fill_then_check),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
