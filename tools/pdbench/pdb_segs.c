/* SPDX-License-Identifier: MIT */
/*
 * pdbench: the brokers' segments, read-only: slot sizes and pool sizes
 * before the run, the admission-wait histogram, the bytes each transport
 * moved and the slots still in use (leaked) after it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pd_layout.h"
#include "pd_stats.h"
#include "pd_time.h"
#include "pdb.h"

static void nap_ms(uint32_t ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	(void)nanosleep(&ts, NULL);
}

static int seg_open(const struct pd_bench_broker *b, struct pd_shm *shm, int quiet)
{
	struct pd_segment seg;
	char err[256] = "";
	int rc = pd_segment_attach(b->name, PD_SEG_RDONLY, 2000, &seg, err, sizeof(err));

	if (rc == 0) {
		rc = pd_layout_open(&seg, shm, err, sizeof(err));
		if (rc < 0)
			pd_segment_destroy(&seg);
	}
	if (rc < 0 && !quiet)
		(void)fprintf(stderr, "pdbench: broker %s: cannot read its segment: %s%s%s\n", b->name,
			err, err[0] ? ": " : "", pd_strerror(rc));
	return rc;
}

/* One broker's pools against what the run needs. */
static int probe_one(struct pd_bench_broker *b, const struct pd_shm *s,
		     const struct pd_bench_opts *o, uint64_t *chunk, uint32_t *nrecv,
		     uint32_t *nsend)
{
	const struct pd_pool *p = b->decode ? &s->recv : s->send;

	if (!(b->decode ? s->has_recv : s->has_send)) {
		(void)fprintf(stderr, "pdbench: broker %s has no %s slots\n", b->name,
			b->decode ? "receive" : "send");
		return -EINVAL;
	}
	if (p->slot_size < *chunk)
		*chunk = p->slot_size;
	if (!o->local && b->decode && p->nslots < *nrecv)
		*nrecv = p->nslots; /* attached: report what the brokers have */
	if (!o->local && !b->decode && pd_layout_send_slots(s) < *nsend)
		*nsend = pd_layout_send_slots(s); /* every send pool's */
	if (b->decode && (uint64_t)o->chunks_max * o->tp > p->nslots) {
		(void)fprintf(stderr, "pdbench: --chunks: a request needs %" PRIu64 " receive slots; "
			"broker %s has %" PRIu32 "\n", (uint64_t)o->chunks_max * o->tp, b->name,
			p->nslots);
		return -EINVAL;
	}
	if (!b->decode && (o->batch < o->chunks_max ? o->batch : o->chunks_max) > p->nslots) {
		(void)fprintf(stderr, "pdbench: --batch: larger than the %" PRIu32
			" send slots of broker %s\n", p->nslots, b->name);
		return -EINVAL;
	}
	b->stats0 = calloc(1, sizeof(*b->stats0));
	if (!b->stats0 || pd_stats_snapshot(s->stats, b->stats0) < 0) {
		free(b->stats0); /* no statistics: admission waits and bytes moved read 0 */
		b->stats0 = NULL;
	}
	return 0;
}

int pd_bench_cluster_probe(struct pd_bench_cluster *c, struct pd_bench_opts *o)
{
	uint32_t nrecv = UINT32_MAX, nsend = UINT32_MAX;
	uint64_t chunk = UINT64_MAX;
	struct pd_shm s;
	int rc = 0;

	for (uint32_t i = 0; rc == 0 && i < c->nprefill + c->ndecode; i++) {
		rc = seg_open(&c->b[i], &s, 0);
		if (rc < 0)
			return rc;
		rc = probe_one(&c->b[i], &s, o, &chunk, &nrecv, &nsend);
		pd_layout_close(&s);
	}
	if (rc < 0)
		return rc;
	if (o->slot_size_set && o->slot_size > chunk) {
		(void)fprintf(stderr, "pdbench: --slot-size: larger than the brokers' slots (%" PRIu64
			")\n", chunk);
		return -EINVAL;
	}
	if (!o->slot_size_set)
		o->slot_size = chunk;
	if (!o->local) {
		o->recv_slots = nrecv;
		o->send_slots = nsend;
	}
	return 0;
}

static uint64_t in_use(const struct pd_shm *s)
{
	uint64_t n = 0;

	for (uint32_t k = 0; s->has_send && k < s->send_parts; k++)
		n += s->send_part[k].nslots - pd_pool_nfree(&s->send_part[k]);
	if (s->has_recv)
		n += s->recv.nslots - pd_pool_nfree(&s->recv);
	return n;
}

uint64_t pd_bench_cluster_leaks(const struct pd_bench_cluster *c, uint32_t wait_ms)
{
	uint64_t deadline = pd_deadline_ms(wait_ms), total = 0;

	for (uint32_t i = 0; i < c->nprefill + c->ndecode; i++) {
		struct pd_shm s;
		uint64_t n;

		if (seg_open(&c->b[i], &s, 0) < 0)
			continue;
		while ((n = in_use(&s)) != 0 && pd_now_ns() < deadline)
			nap_ms(20);
		if (n)
			(void)fprintf(stderr, "pdbench: broker %s: %" PRIu64 " slots still in use\n",
				c->b[i].name, n);
		total += n;
		pd_layout_close(&s);
	}
	return total;
}

void pd_bench_cluster_admit(const struct pd_bench_cluster *c, uint64_t *p50, uint64_t *p99)
{
	struct pd_stat_hist sum = { .count = 0 };
	struct pd_stats *now = calloc(1, sizeof(*now));

	for (uint32_t i = c->nprefill; now && i < c->nprefill + c->ndecode; i++) {
		const struct pd_stat_hist *h0, *h1;
		struct pd_shm s;
		int rc;

		if (!c->b[i].stats0 || seg_open(&c->b[i], &s, 1) < 0)
			continue;
		rc = pd_stats_snapshot(s.stats, now);
		pd_layout_close(&s);
		if (rc < 0 || now->nhist <= PD_HIST_ADMIT_WAIT)
			continue;
		h1 = &now->hist[PD_HIST_ADMIT_WAIT];
		h0 = &c->b[i].stats0->hist[PD_HIST_ADMIT_WAIT]; /* zero if not published then */
		for (uint32_t k = 0; k < PD_STATS_BUCKETS; k++) {
			uint64_t d = h1->bucket[k] >= h0->bucket[k] ? h1->bucket[k] - h0->bucket[k] : 0;

			sum.bucket[k] += d;
			sum.count += d;
		}
	}
	free(now);
	*p50 = pd_stats_hist_quantile_ns(&sum, 0.50);
	*p99 = pd_stats_hist_quantile_ns(&sum, 0.99);
}

/* A snapshot of b's statistics published after after_ns (REALTIME): the
 * broker publishes every 100 ms. 0 or -errno. */
static int fresh_snapshot(const struct pd_bench_broker *b, uint64_t after_ns,
			  struct pd_stats *out)
{
	uint64_t deadline = pd_deadline_ms(1000);
	struct pd_shm s;
	int rc = seg_open(b, &s, 1);

	if (rc < 0)
		return rc;
	for (;;) {
		rc = pd_stats_snapshot(s.stats, out);
		if (rc < 0 || out->publish_ns > after_ns || pd_now_ns() >= deadline)
			break;
		nap_ms(20);
	}
	pd_layout_close(&s);
	return rc;
}

void pd_bench_cluster_moved(const struct pd_bench_cluster *c, struct pd_bench_moved *m)
{
	static const char *const name[] = { "tcp.bytes_tx", "shm.bytes", "rdma.bytes_ok" };
	uint64_t *out[] = { &m->tcp, &m->shm, &m->rdma };
	struct pd_stats *now = calloc(1, sizeof(*now));
	uint64_t after = pd_realtime_ns();

	memset(m, 0, sizeof(*m));
	for (uint32_t i = 0; now && i < c->nprefill; i++) {
		if (!c->b[i].stats0 || fresh_snapshot(&c->b[i], after, now) < 0)
			continue;
		for (uint32_t k = 0; k < 3; k++) {
			uint64_t v0 = 0, v1 = 0;

			(void)pd_stats_find(c->b[i].stats0, name[k], &v0); /* absent: 0 */
			(void)pd_stats_find(now, name[k], &v1);
			*out[k] += v1 > v0 ? v1 - v0 : 0;
		}
	}
	free(now);
}

/* Admission still held at the decode brokers once the run ended: slots
 * reserved for requests (admitted, not granted) and requests waiting,
 * polled up to wait_ms until both are 0 (a withdrawal may be in flight). */
void pd_bench_cluster_admission_left(const struct pd_bench_cluster *c, uint32_t wait_ms,
				     uint64_t *reserved, uint64_t *waiting)
{
	uint64_t deadline = pd_deadline_ms(wait_ms);
	struct pd_stats *now = calloc(1, sizeof(*now));

	*reserved = *waiting = 0;
	for (uint32_t i = c->nprefill; now && i < c->nprefill + c->ndecode; i++) {
		while (fresh_snapshot(&c->b[i], pd_realtime_ns(), now) == 0 &&
		       (now->info.reserved || now->info.waiting) && pd_now_ns() < deadline)
			nap_ms(20);
		*reserved += now->info.reserved;
		*waiting += now->info.waiting;
		memset(&now->info, 0, sizeof(now->info)); /* a broker not read counts 0 */
	}
	free(now);
}
