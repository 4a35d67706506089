/* SPDX-License-Identifier: MIT */
/*
 * pdbench: the data every chunk carries, and the names of requests and
 * chunks. A chunk's bytes are a splitmix64 stream seeded from (seed,
 * request, rank, chunk), so any corruption, misplacement (another chunk's
 * bytes) or truncation shows.
 */
#include <errno.h>
#include <inttypes.h>
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

void pd_bench_fill(void *dst, uint32_t len, uint64_t seed)
{
	unsigned char *d = dst;
	uint64_t x = seed, w;
	uint32_t i = 0;

	for (; i + 8 <= len; i += 8) {
		x += GOLDEN;
		w = pd_bench_mix(x);
		memcpy(d + i, &w, 8);
	}
	if (i < len) {
		x += GOLDEN;
		w = pd_bench_mix(x);
		memcpy(d + i, &w, len - i);
	}
}

uint32_t pd_bench_diff(const void *src, uint32_t len, uint64_t seed)
{
	const unsigned char *s = src;
	uint64_t x = seed, w, v;
	uint32_t i = 0;

	for (; i + 8 <= len; i += 8) {
		x += GOLDEN;
		w = pd_bench_mix(x);
		memcpy(&v, s + i, 8);
		if (v != w)
			break;
	}
	if (i < len) {
		unsigned char b[8];

		x += GOLDEN;
		w = pd_bench_mix(x);
		memcpy(b, &w, 8);
		while (i < len && s[i] == b[i % 8])
			i++;
	}
	return i;
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
