/* SPDX-License-Identifier: MIT */
/*
 * The shm transport end to end: a prefill and a decode pdbroker on this
 * host (--transport shm,tcp), agents in this process, moving TOTAL bytes
 * (2 GiB) of 1 MiB and of 4 MiB chunks, many requests in flight; each
 * beside a single-thread memcpy of the same chunks measured in the same
 * run (source cycling through a buffer the size of the send pool,
 * destination through one the size of the recv arena, both pre-faulted:
 * what one data thread would do with nothing else to do).
 *
 * The pdkv figure includes everything: the agent's staging, AllocRequest
 * and AllocResponse over ZeroMQ, the copies by the data threads, the
 * PutDone, the decode agent's wait and release. The first request (which
 * also dials the peer and maps its arena) is timed on its own, then a
 * first pass over the rest of the arena (the "cold" pass: the copiers'
 * page tables were filled when they mapped it, so it should run as fast
 * as the measured pass that follows).
 *
 *   bench_shmx [--quick] [--data-threads N]
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <pdkv/agent.h>

#include "pd_bench_fixture.h"
#include "pd_layout.h"
#include "pd_proc.h"
#include "pd_time.h"

#define MIB    (1ull << 20)
#define CHUNKS 8u          /* per request */
#define TOTAL  (2048 * MIB)

struct run {
	struct pd_bench_pair x;
	uint64_t chunk;
	uint32_t send_slots, recv_slots;
	uint32_t requests;
	uint32_t first;              /* request number of the first of this pass */
	int failed;
};

static int start(struct run *r, const char *threads)
{
	char ss[32], send[16], recv[16];
	const struct pd_bench_pair_opts o = { .tag = "bshm", .send_slots = send,
					      .recv_slots = recv, .slot_size = ss,
					      .transport = "shm,tcp", .data_threads = threads };

	(void)snprintf(ss, sizeof(ss), "%lluM", (unsigned long long)(r->chunk / MIB));
	(void)snprintf(send, sizeof(send), "%u", r->send_slots);
	(void)snprintf(recv, sizeof(recv), "%u", r->recv_slots);
	return pd_bench_pair_start(&r->x, &o);
}

/* Decode side: wait for each request in order, check a byte, release. */
static void *decoder(void *arg)
{
	struct run *r = arg;
	char req[32], key[48];

	for (uint32_t i = r->first; i < r->first + r->requests && !r->failed; i++) {
		struct pd_recv_info info;
		const uint8_t *d;
		uint32_t len;

		(void)snprintf(req, sizeof(req), "t%u", i);
		(void)snprintf(key, sizeof(key), "%s/%u", req, CHUNKS - 1);
		if (pd_recv_wait(r->x.da, req, 30000, &info) < 0 || info.status ||
		    pd_recv_lookup(r->x.da, key, (uint32_t)strlen(key), (const void **)&d,
				   &len) < 0 ||
		    len != r->chunk || d[0] != CHUNKS || pd_recv_release(r->x.da, req) < 0) {
			r->failed = 1;
			return NULL;
		}
	}
	return NULL;
}

/* Move requests x CHUNKS chunks; GB/s, or -1. */
static double pass(struct run *r, uint32_t requests)
{
	pthread_t th;
	uint64_t t0 = pd_now_ns();

	r->requests = requests;
	if (pthread_create(&th, NULL, decoder, r))
		return -1;
	pd_bench_put_all(&r->x, r->first, requests, CHUNKS, (uint32_t)r->chunk, 1, &r->failed);
	(void)pthread_join(th, NULL);
	r->first += requests;
	if (r->failed)
		return -1;
	return (double)requests * CHUNKS * (double)r->chunk / ((double)(pd_now_ns() - t0) / 1e9) /
	       1e9;
}

/* A counter of a broker's statistics region, or UINT64_MAX. */
static uint64_t stat_of(const struct pd_test_broker *b, const char *name)
{
	struct pd_stats *copy = malloc(sizeof(*copy));
	struct pd_segment seg;
	struct pd_shm s;
	uint64_t v = UINT64_MAX;

	if (!copy || pd_segment_attach(b->name, PD_SEG_RDONLY, 1000, &seg, NULL, 0) < 0) {
		free(copy);
		return v;
	}
	if (pd_layout_open(&seg, &s, NULL, 0) == 0) {
		if (pd_stats_snapshot(s.stats, copy) < 0 || pd_stats_find(copy, name, &v) < 0)
			v = UINT64_MAX;
		pd_layout_close(&s);
	} else {
		pd_segment_destroy(&seg);
	}
	free(copy);
	return v;
}

/* One thread copying total bytes in chunks: source cycling through a
 * send-pool-sized buffer, destination through a recv-arena-sized one.
 * *cold: the first pass over the destination, mapped (MAP_POPULATE) but
 * never written: what a first write to each page costs on this machine. */
static double memcpy_gbs(uint64_t chunk, uint32_t send_slots, uint32_t recv_slots, uint64_t total,
			 double *cold)
{
	size_t slen = send_slots * chunk, dlen = recv_slots * chunk;
	uint8_t *src = mmap(NULL, slen, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	uint8_t *dst = mmap(NULL, dlen, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	uint64_t t0, n = total / chunk;
	double gbs = -1;

	if (src != MAP_FAILED && dst != MAP_FAILED) {
		memset(src, 1, slen);
		t0 = pd_now_ns();
		for (uint32_t i = 0; i < recv_slots; i++)
			memcpy(dst + i * chunk, src + (i % send_slots) * chunk, chunk);
		*cold = (double)dlen / ((double)(pd_now_ns() - t0) / 1e9) / 1e9;
		t0 = pd_now_ns();
		for (uint64_t i = 0; i < n; i++)
			memcpy(dst + (i % recv_slots) * chunk, src + (i % send_slots) * chunk, chunk);
		gbs = (double)(n * chunk) / ((double)(pd_now_ns() - t0) / 1e9) / 1e9;
		if (dst[(n - 1) % recv_slots * chunk] != 1) /* keep the copies */
			gbs = -1;
	}
	if (src != MAP_FAILED)
		(void)munmap(src, slen);
	if (dst != MAP_FAILED)
		(void)munmap(dst, dlen);
	return gbs;
}

static int one_size(uint64_t chunk, uint32_t send_slots, uint32_t recv_slots, uint64_t total,
		    const char *threads)
{
	struct run r = { .chunk = chunk, .send_slots = send_slots, .recv_slots = recv_slots };
	double gbs = -1, cold = -1, first = -1, mc, mc_cold = 0;
	uint64_t copies = 0, frames = 0, t0 = pd_now_ns(), first_ns = 0;

	/* The first request also dials the peer and maps its arena: timed on
	 * its own. Then a first pass over the rest of the arena (cold, in the
	 * sense that no chunk went through those slots yet). */
	if (start(&r, threads) == 0) {
		t0 = pd_now_ns();
		first = pass(&r, 1);
		first_ns = pd_now_ns() - t0;
	}
	if (first >= 0)
		cold = pass(&r, recv_slots / CHUNKS - 1);
	if (cold >= 0)
		gbs = pass(&r, (uint32_t)(total / chunk / CHUNKS));
	if (gbs >= 0) {
		(void)nanosleep(&(struct timespec){ 0, 250 * 1000 * 1000 }, NULL); /* republished */
		copies = stat_of(&r.x.p, "shm.copies_ok");
		frames = stat_of(&r.x.p, "tcp.frames_tx");
	}
	pd_bench_pair_stop(&r.x);
	mc = memcpy_gbs(chunk, send_slots, recv_slots, total, &mc_cold);
	printf("%4llu MiB chunks, %5.2f GiB   %10.2f %10.2f %7.2fx   (first request %.1f ms, "
	       "then cold first pass %.2f = %.2fx warm, memcpy's cold pass %.2f; shm copies "
	       "%llu, tcp frames %llu; pools %u send / %u recv)\n",
	       (unsigned long long)(chunk / MIB), (double)total / (double)(1ull << 30), gbs, mc,
	       mc > 0 ? gbs / mc : 0, (double)first_ns / 1e6, cold, gbs > 0 ? cold / gbs : 0,
	       mc_cold,
	       (unsigned long long)copies,
	       (unsigned long long)frames, send_slots, recv_slots);
	return gbs < 0 ? -1 : 0;
}

int main(int argc, char **argv)
{
	const char *threads = "2";
	uint64_t total = TOTAL;
	int rc = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			total = 256 * MIB;
		} else if (!strcmp(argv[i], "--data-threads") && i + 1 < argc) {
			threads = argv[++i];
		} else {
			printf("usage: bench_shmx [--quick] [--data-threads N]\n");
			return 2;
		}
	}
	printf("bench_shmx: 1P1D on one host, shm data plane, --data-threads %s, %u chunks "
	       "per request\n", threads, CHUNKS);
	printf("%-31s %10s %10s %8s\n", "measure (GB/s)", "pdkv", "memcpy", "ratio");
	rc |= one_size(MIB, 64, 256, total, threads);
	rc |= one_size(4 * MIB, 16, 64, total, threads);
	return rc ? 1 : 0;
}
