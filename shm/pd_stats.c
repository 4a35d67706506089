/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "pd_stats.h"

/* GCC's TSan has no thread fences; the sequence lock is checked across
 * processes (tests/unit/test_stats.c), where TSan does not look anyway. */
#ifdef __SANITIZE_THREAD__
#define SEQ_FENCE(order) __atomic_signal_fence(order)
#else
#define SEQ_FENCE(order) __atomic_thread_fence(order)
#endif

uint64_t pd_stats_bucket_le_us(uint32_t i)
{
	return i + 1 >= PD_STATS_BUCKETS ? UINT64_MAX : UINT64_C(1) << i;
}

uint32_t pd_stats_bucket_of(uint64_t ns)
{
	uint64_t us = (ns + 999) / 1000;
	uint32_t i = 0;

	while (i + 1 < PD_STATS_BUCKETS && us > (UINT64_C(1) << i))
		i++;
	return i;
}

void pd_stats_hist_add(struct pd_stat_hist *h, uint64_t ns)
{
	h->bucket[pd_stats_bucket_of(ns)]++;
	h->count++;
	h->sum_ns += ns;
}

uint64_t pd_stats_hist_quantile_ns(const struct pd_stat_hist *h, double q)
{
	uint64_t want, seen = 0;

	if (h->count == 0)
		return 0;
	if (q < 0)
		q = 0;
	want = (uint64_t)(q * (double)h->count + 0.999999);
	if (want == 0)
		want = 1;
	for (uint32_t i = 0; i < PD_STATS_BUCKETS; i++) {
		seen += h->bucket[i];
		if (seen >= want)
			return i + 1 < PD_STATS_BUCKETS ? pd_stats_bucket_le_us(i) * 1000 :
							   pd_stats_bucket_le_us(i - 1) * 2000;
	}
	return pd_stats_bucket_le_us(PD_STATS_BUCKETS - 2) * 2000;
}

void pd_stats_init(struct pd_stats *s)
{
	s->version = PD_STATS_VERSION;
	__atomic_store_n(&s->seq, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&s->magic, PD_STATS_MAGIC, __ATOMIC_RELEASE);
}

void pd_stats_write_begin(struct pd_stats *s)
{
	uint64_t q = __atomic_load_n(&s->seq, __ATOMIC_RELAXED);

	__atomic_store_n(&s->seq, q + 1, __ATOMIC_RELAXED);
	SEQ_FENCE(__ATOMIC_RELEASE); /* seq odd before any data store */
}

void pd_stats_write_end(struct pd_stats *s)
{
	uint64_t q = __atomic_load_n(&s->seq, __ATOMIC_RELAXED);

	__atomic_store_n(&s->seq, q + 1, __ATOMIC_RELEASE); /* data before seq even */
}

void pd_stats_set(struct pd_stats *s, uint32_t i, const char *name, uint32_t kind, uint64_t v)
{
	struct pd_stat_value *e;

	if (i >= PD_STATS_MAX_VALUES)
		return;
	e = &s->val[i];
	if (strncmp(e->name, name, sizeof(e->name)) != 0) {
		memset(e->name, 0, sizeof(e->name));
		strncpy(e->name, name, sizeof(e->name) - 1);
	}
	e->kind = kind;
	e->v = v;
	if (i >= s->nvalues)
		s->nvalues = i + 1;
}

static int sane(const struct pd_stats *c)
{
	if (c->magic != PD_STATS_MAGIC || c->version != PD_STATS_VERSION)
		return -EPROTO;
	if (c->nvalues > PD_STATS_MAX_VALUES || c->npeers > PD_STATS_MAX_PEERS ||
	    c->nhist > PD_STATS_MAX_HIST)
		return -EPROTO;
	return 0;
}

void pd_stats_sanitize(struct pd_stats *c)
{
	if (c->nvalues > PD_STATS_MAX_VALUES)
		c->nvalues = PD_STATS_MAX_VALUES;
	if (c->npeers > PD_STATS_MAX_PEERS)
		c->npeers = PD_STATS_MAX_PEERS;
	if (c->nhist > PD_STATS_MAX_HIST)
		c->nhist = PD_STATS_MAX_HIST;
	c->info.ctrl[sizeof(c->info.ctrl) - 1] = 0;
	c->info.data[sizeof(c->info.data) - 1] = 0;
	c->info.transport[sizeof(c->info.transport) - 1] = 0;
	c->info.ctrl_auth[sizeof(c->info.ctrl_auth) - 1] = 0;
	for (uint32_t i = 0; i < PD_STATS_MAX_HIST; i++)
		c->hist[i].name[PD_STATS_NAME_MAX] = 0;
	for (uint32_t i = 0; i < PD_STATS_MAX_VALUES; i++)
		c->val[i].name[PD_STATS_NAME_MAX] = 0;
	for (uint32_t i = 0; i < PD_STATS_MAX_PEERS; i++) {
		struct pd_stat_peer *p = &c->peer[i];

		p->name[sizeof(p->name) - 1] = 0;
		p->ctrl[sizeof(p->ctrl) - 1] = 0;
		p->transport[sizeof(p->transport) - 1] = 0;
		p->why[sizeof(p->why) - 1] = 0;
		p->auth[sizeof(p->auth) - 1] = 0;
		p->error[sizeof(p->error) - 1] = 0;
	}
}

int pd_stats_snapshot(const struct pd_stats *live, struct pd_stats *copy)
{
	const struct timespec pause = { 0, 10000 };

	if (__atomic_load_n(&live->magic, __ATOMIC_ACQUIRE) != PD_STATS_MAGIC)
		return -EPROTO;
	for (int tries = 0; tries < 100; tries++) {
		uint64_t q1 = __atomic_load_n(&live->seq, __ATOMIC_ACQUIRE);

		if (q1 & 1) {
			(void)nanosleep(&pause, NULL);
			continue;
		}
		memcpy(copy, live, sizeof(*copy));
		SEQ_FENCE(__ATOMIC_ACQUIRE); /* data loads before the re-check */
		if (__atomic_load_n(&live->seq, __ATOMIC_RELAXED) == q1) {
			int rc = sane(copy);

			if (rc == 0)
				pd_stats_sanitize(copy);
			return rc;
		}
	}
	return -EAGAIN;
}

int pd_stats_find(const struct pd_stats *s, const char *name, uint64_t *v)
{
	for (uint32_t i = 0; i < s->nvalues && i < PD_STATS_MAX_VALUES; i++) {
		if (strcmp(s->val[i].name, name) == 0) {
			*v = s->val[i].v;
			return 0;
		}
	}
	return -ENOENT;
}
