/* SPDX-License-Identifier: MIT */
/*
 * bench_rx: cost of the receiver engine's hot path (broker/pd_rx*.c over a
 * real recv pool and recv index in private memory) as the number of live
 * requests grows.
 *
 * Each timed iteration is one request's whole life on the receiving
 * broker: a new req_id, its AllocRequest of one 4-key batch (admission,
 * a fresh slot and index entry per key), the PutDone of the 4 slots
 * (commit, READY) and the release (slots, index entries and reservation
 * given back, a tombstone). Meanwhile N other requests stay live in the
 * background, each admitted for 4 chunks, granted 2 and written 1, so the
 * request tree, the live list, the pool and the index all hold N requests'
 * worth. N = 1, 100 and 10,000; the pool (4 x 10,000 + 64 slots) and the
 * index (65,536 buckets) are sized for the largest N in every case, so that
 * only N changes. Every 256 iterations a tick drops the tombstones (as the
 * broker's timer does); deadlines are set so that nothing else expires.
 *
 * Figure: us per batch, the median of REPS repetitions after one warm-up.
 * The growth ratio (10,000 / 1) tells whether the path is flat: below 4x
 * is O(1) or O(log n) (the request tree, caches); one O(n) step over the
 * live requests would show hundreds of times. A missed target is
 * reported, never an error.
 *
 * The index's live entries and tombstones are printed beside each figure:
 * with 20,000 live entries, the churn of the timed loop leaves the table
 * full of tombstones (a tombstone is freed only when the bucket after it
 * is), so from then on every miss probes the whole max_probe window. That,
 * not the engine, is most of the growth at 10,000.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd_err.h"
#include "pd_rx.h"
#include "pd_time.h"

#define REPS      5
#define BATCH     4u
#define MAX_LIVE  10000u
#define NSLOTS    (BATCH * MAX_LIVE + 64u)
#define NBUCKETS  65536u
#define MAX_PROBE 64u
#define TICK_EVERY 256u
#define FLAT_RATIO 4.0
#define FOREVER   (UINT64_MAX / 4)

struct bench {
	struct pd_pool pool;
	struct pd_index index;
	void *pool_mem, *index_mem;
	size_t pool_len, index_len;
	struct pd_rx *rx;
	uint64_t now, seq, next_id;
	/* Last reply and events, from the callbacks. */
	int32_t err;
	uint32_t n;
	int32_t remote[BATCH];
	uint64_t ready, failed;
};

static uint64_t iters;
static int quick;

static void on_reply(void *ctx, uint32_t peer, uint64_t seq, int32_t err, const int32_t *remote,
		     uint32_t n, const int32_t *already, uint32_t nalready)
{
	struct bench *b = ctx;

	(void)peer, (void)seq, (void)already;
	b->err = err != 0 ? err : nalready != 0 ? -EEXIST : 0;
	b->n = n < BATCH ? n : BATCH;
	if (b->err == 0)
		memcpy(b->remote, remote, b->n * sizeof(*remote));
}

static void on_ready(void *ctx, const struct pd_rx_req_view *r)
{
	(void)r;
	((struct bench *)ctx)->ready++;
}

static void on_failed(void *ctx, const struct pd_rx_req_view *r, int32_t err)
{
	(void)r, (void)err;
	((struct bench *)ctx)->failed++;
}

static const struct pd_rx_ops ops = { .reply = on_reply, .ready = on_ready,
				      .failed = on_failed };

static void *mem(size_t len)
{
	void *p = aligned_alloc(64, (len + 63) & ~(size_t)63);

	if (p)
		memset(p, 0, len);
	return p;
}

static void bench_free(struct bench *b)
{
	pd_rx_destroy(b->rx);
	free(b->pool_mem);
	free(b->index_mem);
}

static int bench_init(struct bench *b, uint32_t max_requests)
{
	struct pd_rx_opts o = { .pool = &b->pool, .index = &b->index, .ops = &ops, .ctx = b,
				.owner = 7, .max_requests = max_requests,
				.admission_timeout_ns = FOREVER, .ttl_ns = FOREVER,
				.tombstone_ns = 1, .max_held_bytes = 1u << 20 };
	int64_t plen = pd_pool_memsize(NSLOTS), ilen = pd_index_memsize(NBUCKETS);
	int rc;

	*b = (struct bench){ .now = PD_NS_PER_S };
	if (plen < 0 || ilen < 0)
		return -EINVAL;
	b->pool_len = (size_t)plen;
	b->index_len = (size_t)ilen;
	b->pool_mem = mem(b->pool_len);
	b->index_mem = mem(b->index_len);
	if (!b->pool_mem || !b->index_mem)
		return -ENOMEM;
	rc = pd_pool_init(b->pool_mem, b->pool_len, NSLOTS, 4096);
	if (rc == 0)
		rc = pd_pool_open(&b->pool, b->pool_mem, b->pool_len, NULL, 0);
	if (rc == 0)
		rc = pd_index_init(b->index_mem, b->index_len, NBUCKETS, MAX_PROBE, 0x5eed);
	if (rc == 0)
		rc = pd_index_open(&b->index, b->index_mem, b->index_len);
	return rc < 0 ? rc : pd_rx_create(&o, &b->rx);
}

/* AllocRequest of keys "<id>-<first>.." for a request of total chunks;
 * 0 when granted at once, else -errno. */
static int alloc(struct bench *b, const char *id, uint32_t first, uint32_t n, uint32_t total)
{
	char kb[BATCH][32];
	struct pd_rx_key keys[BATCH];
	struct pd_rx_alloc a = { .peer = 1, .seq = ++b->seq, .req_id = (const uint8_t *)id,
				 .req_id_len = (uint32_t)strlen(id), .nkeys = n, .keys = keys,
				 .total_chunks = total, .world_size = 1,
				 .is_last = first + n == total };
	int rc;

	for (uint32_t i = 0; i < n; i++) {
		int len = snprintf(kb[i], sizeof(kb[i]), "%s-%u", id, first + i);

		keys[i] = (struct pd_rx_key){ .p = (const uint8_t *)kb[i], .len = (uint32_t)len };
	}
	b->err = -EINPROGRESS;
	rc = pd_rx_alloc(b->rx, &a, b->now);
	if (rc < 0)
		return rc;
	return rc == 1 ? -EBUSY : b->err;
}

static int put_done(struct bench *b, const char *id, uint32_t n)
{
	return pd_rx_put_done(b->rx, 1, (const uint8_t *)id, (uint32_t)strlen(id), b->remote, n,
			      b->now);
}

/* N requests admitted for BATCH chunks, 2 granted, 1 of them written. */
static int add_background(struct bench *b, uint32_t nlive)
{
	char id[32];
	int rc = 0;

	for (uint32_t i = 0; rc == 0 && i < nlive; i++) {
		(void)snprintf(id, sizeof(id), "bg%u", i);
		rc = alloc(b, id, 0, 2, BATCH);
		if (rc == 0)
			rc = put_done(b, id, 1);
	}
	return rc;
}

/* One request's life: AllocRequest, PutDone, release. */
static int one_request(struct bench *b)
{
	char id[32];
	uint64_t ready = b->ready;
	int rc;

	(void)snprintf(id, sizeof(id), "t%llu", (unsigned long long)b->next_id++);
	rc = alloc(b, id, 0, BATCH, BATCH);
	if (rc == 0)
		rc = put_done(b, id, BATCH);
	if (rc == 0 && b->ready != ready + 1)
		rc = -EPROTO;
	if (rc == 0)
		rc = pd_rx_release(b->rx, (const uint8_t *)id, (uint32_t)strlen(id), 0, 1, b->now);
	return rc;
}

/* One repetition: us per request. */
static int rep(struct bench *b, double *us)
{
	uint64_t t0 = pd_now_ns();
	int rc = 0;

	for (uint64_t i = 0; rc == 0 && i < iters; i++) {
		b->now += 1000;
		rc = one_request(b);
		if (rc == 0 && (i + 1) % TICK_EVERY == 0)
			rc = pd_rx_tick(b->rx, b->now) == 0 ? 0 : -EPROTO;
	}
	*us = (double)(pd_now_ns() - t0) / 1e3 / (double)iters;
	return rc;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, c = *(const double *)y;

	return (a > c) - (a < c);
}

struct figure {
	double med, lo, hi;
	uint32_t entries, tombstones; /* the index's, after the last rep */
};

/* Median of REPS repetitions after one warm-up, with nlive in the background. */
static int measure(uint32_t nlive, struct figure *f)
{
	struct bench b;
	double v[REPS], w;
	int rc = bench_init(&b, MAX_LIVE + 2 * TICK_EVERY);

	if (rc == 0)
		rc = add_background(&b, nlive);
	if (rc == 0)
		rc = rep(&b, &w);
	for (int i = 0; rc == 0 && i < REPS; i++)
		rc = rep(&b, &v[i]);
	if (rc == 0 && (pd_rx_check(b.rx) != 0 || b.failed != 0))
		rc = -EPROTO;
	f->entries = b.index.shm->count;
	f->tombstones = b.index.shm->tombstones;
	bench_free(&b);
	if (rc < 0) {
		fprintf(stderr, "bench_rx: %u live requests: %s\n", nlive, pd_strerror(rc));
		return rc;
	}
	qsort(v, REPS, sizeof(*v), cmp_double);
	f->med = v[REPS / 2];
	f->lo = v[0];
	f->hi = v[REPS - 1];
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: bench_rx [--quick] [--help]\n"
		   "  --quick  fewer iterations (< 5 s)\n"
		   "Prints the receiver engine's cost per batch (AllocRequest + PutDone +\n"
		   "release of a new 4-key request) with 1, 100 and 10,000 live requests.\n"
		   "Exits non-zero only on errors, never on a missed target.\n");
}

/* 0 run, 1 exit 0 (help), -1 usage error. */
static int parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "quick", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int o;

	while ((o = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
		if (o == 'q')
			quick = 1;
		else
			return o == 'h' ? 1 : -1;
	}
	return optind < argc ? -1 : 0;
}

int main(int argc, char **argv)
{
	static const uint32_t live[] = { 1, 100, MAX_LIVE };
	struct figure f[3];
	double growth;
	int rc = parse_args(argc, argv);

	if (rc != 0) {
		usage(rc > 0 ? stdout : stderr);
		return rc > 0 ? 0 : 2;
	}
	iters = quick ? 20000 : 200000;
	for (int i = 0; i < 3; i++)
		if (measure(live[i], &f[i]) < 0)
			return 1;
	growth = f[2].med / f[0].med;
	printf("bench_rx: AllocRequest (4 keys) + PutDone + release of a new request, us per "
	       "batch;\n          median of %d reps x %llu batches after 1 warm-up (%s run)\n",
	       REPS, (unsigned long long)iters, quick ? "quick" : "full");
	printf("%14s %10s %10s %10s %16s\n", "live requests", "us/batch", "min", "max",
	       "index live/tomb");
	for (int i = 0; i < 3; i++)
		printf("%14u %10.3f %10.3f %10.3f %9u/%-6u\n", live[i], f[i].med, f[i].lo, f[i].hi,
		       f[i].entries, f[i].tombstones);
	printf("growth 10000/1: %.2fx -> %s\n", growth,
	       growth < FLAT_RATIO ? "flat (O(1) / O(log n))"
				   : "NOT flat: some step grows with the live requests");
	return 0;
}
