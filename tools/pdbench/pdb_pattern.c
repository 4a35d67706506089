/* SPDX-License-Identifier: MIT */
/*
 * pdbench: the data every chunk carries, and the names of requests and
 * chunks. A chunk's bytes are derived from (seed, request, rank, chunk), so
 * any corruption, misplacement (another chunk's bytes) or truncation shows.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb.h"

#define GOLDEN UINT64_C(0x9e3779b97f4a7c15)

uint64_t pd_bench_mix(uint64_t x)
{
	x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
	return x ^ (x >> 31);
}

uint64_t pd_bench_chunk_seed(uint64_t seed, uint32_t req, uint32_t rank, uint32_t chunk)
{
	uint64_t x = pd_bench_mix(seed + GOLDEN);

	x = pd_bench_mix(x ^ ((uint64_t)req << 20) ^ rank);
	return pd_bench_mix(x + (uint64_t)chunk * GOLDEN);
}

/*
 * A chunk is 64-byte blocks: 8 bytes of splitmix64(seed, block) then 56
 * bytes of a fixed random table at an offset that header picks. Every
 * block names its chunk and place (misplaced or stale bytes show at once),
 * and any changed byte differs from the table.
 *
 * Filling writes the blocks in place: one mix per 64 bytes plus stores from
 * a table that stays in L1. Checking compares every byte with what filling
 * would have written: the expected bytes are made WINDOW at a time into a
 * buffer on the stack (in L1) and compared with memcmp(), whose library
 * version uses the widest vectors the CPU has; only a window that differs
 * is searched byte by byte. Both cost little more than one pass over the
 * chunk's memory, so the data path, not the pattern, dominates what
 * pdbench measures.
 */
#define BLOCK     64u
#define TAIL      (BLOCK - 8u)
#define TABLE     4096u
#define WINDOW    4096u     /* bytes made and compared at a time; a multiple of BLOCK */

static unsigned char table[TABLE + TAIL];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
	for (uint32_t i = 0; i < sizeof(table); i += 8) {
		uint64_t w = pd_bench_mix(GOLDEN * (i + 1));

		memcpy(table + i, &w, sizeof(table) - i < 8 ? sizeof(table) - i : 8);
	}
}

/* Block b of the chunk seeded seed into p (BLOCK bytes). */
static void block(unsigned char *p, uint64_t seed, uint32_t b)
{
	uint64_t w = pd_bench_mix(seed + (uint64_t)(b + 1) * GOLDEN);

	memcpy(p, &w, 8);
	memcpy(p + 8, table + (w & (TABLE - 8u)), TAIL);
}

/* Bytes [off, off + len) of the chunk seeded seed into d; off is a
 * multiple of BLOCK. */
static void make(unsigned char *d, uint32_t off, uint32_t len, uint64_t seed)
{
	uint32_t b = off / BLOCK, i = 0;

	for (; len - i >= BLOCK; i += BLOCK, b++)
		block(d + i, seed, b);
	if (i < len) { /* a partial last block */
		unsigned char blk[BLOCK];

		block(blk, seed, b);
		memcpy(d + i, blk, len - i);
	}
}

void pd_bench_fill(void *dst, uint32_t len, uint64_t seed)
{
	(void)pthread_once(&table_once, table_init);
	make(dst, 0, len, seed);
}

uint32_t pd_bench_diff(const void *src, uint32_t len, uint64_t seed)
{
	const unsigned char *s = src;
	unsigned char want[WINDOW];

	(void)pthread_once(&table_once, table_init);
	for (uint32_t off = 0; off < len; off += WINDOW) {
		uint32_t n = len - off < WINDOW ? len - off : WINDOW;

		make(want, off, n, seed);
		if (memcmp(s + off, want, n) == 0)
			continue;
		for (uint32_t i = 0; i < n; i++)
			if (s[off + i] != want[i])
				return off + i;
	}
	return len;
}

uint32_t pd_bench_chunk_len(const struct pd_bench_opts *o, uint32_t req, uint32_t rank,
			    uint32_t chunk, uint32_t k)
{
	uint64_t h;

	if (!o->partial || chunk + 1 != k)
		return (uint32_t)o->slot_size;
	h = pd_bench_mix(pd_bench_chunk_seed(o->seed, req, rank, chunk) ^ 0x5a5a);
	return (uint32_t)(1 + h % o->slot_size); /* 1..slot_size */
}

/* Request req % N == 0 of --inject-corruption N: rank 0, one of its chunks
 * (a different one from request to request), one byte at an offset drawn
 * from the seed. */
int pd_bench_inject(const struct pd_bench_opts *o, void *p, uint32_t len, uint32_t req,
		    uint32_t rank, uint32_t chunk, uint32_t k)
{
	uint32_t n = o->inject_every;
	unsigned char *b = p;

	if (!n || req % n || rank || chunk != (req / n) % k || !len)
		return 0;
	b[pd_bench_mix(pd_bench_chunk_seed(o->seed, req, rank, chunk) ^ 0xc0) % len] ^= 0x20;
	return 1;
}

void pd_bench_req_id(char *buf, size_t len, const char *run_id, uint32_t req)
{
	(void)snprintf(buf, len, "pdb-%s-%" PRIu32, run_id, req);
}

int64_t pd_bench_req_index(const char *req_id, const char *run_id)
{
	size_t n = strlen(run_id);
	unsigned long v;
	char *end;

	if (strncmp(req_id, "pdb-", 4) || strncmp(req_id + 4, run_id, n) || req_id[4 + n] != '-')
		return -EINVAL;
	req_id += 5 + n;
	if (*req_id < '0' || *req_id > '9')
		return -EINVAL;
	v = strtoul(req_id, &end, 10);
	return *end || v > UINT32_MAX ? -EINVAL : (int64_t)v;
}

uint32_t pd_bench_key(char *buf, size_t len, const char *run_id, uint32_t req, uint32_t rank,
		      uint32_t chunk)
{
	int n = snprintf(buf, len, "pdb/%s/%" PRIu32 "/%" PRIu32 "/%" PRIu32, run_id, req, rank,
			 chunk);

	return n < 0 ? 0 : (uint32_t)n < len ? (uint32_t)n : (uint32_t)len - 1;
}
