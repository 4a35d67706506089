/* SPDX-License-Identifier: MIT */
#include <errno.h>

#include "pd_admit.h"
#include "pd_log.h"

#ifdef PD_DEBUG
#define ADM_CHECK(a) PD_ASSERT(pd_admit_ok(a))
#else
#define ADM_CHECK(a) do { } while (0)
#endif

int pd_admit_init(struct pd_admit *a, uint32_t capacity, uint64_t timeout_ns)
{
	if (!a || capacity == 0)
		return -EINVAL;
	*a = (struct pd_admit){ .capacity = capacity, .free = capacity,
				.timeout_ns = timeout_ns };
	TAILQ_INIT(&a->waiting);
	return 0;
}

int pd_admit_ok(const struct pd_admit *a)
{
	return a->free <= a->capacity && a->free >= a->outstanding;
}

static int fits(const struct pd_admit *a, uint32_t need)
{
	return (uint64_t)need <= a->free - a->outstanding;
}

static void admit(struct pd_admit *a, struct pd_adm_entry *e, uint64_t now_ns)
{
	uint64_t waited = now_ns > e->since_ns ? now_ns - e->since_ns : 0;

	e->state = PD_ADM_ADMITTED;
	e->used = 0;
	e->admitted_ns = now_ns;
	pd_stats_hist_add(&a->wait_hist, waited);
	a->outstanding += e->need;
	a->nadmitted++;
	a->stats.admitted++;
	a->stats.wait_ns += waited;
	if (waited > a->stats.wait_max_ns)
		a->stats.wait_max_ns = waited;
	ADM_CHECK(a);
}

int pd_admit_request(struct pd_admit *a, struct pd_adm_entry *e, uint32_t need,
		     uint64_t now_ns)
{
	if (!a || !e || e->state != PD_ADM_NONE)
		return -EINVAL;
	if (need == 0) {
		a->stats.rejected_zero++;
		return -EINVAL;
	}
	if (need > a->capacity) {
		a->stats.rejected_big++;
		return -E2BIG;
	}
	e->need = need;
	e->since_ns = now_ns;
	if (TAILQ_EMPTY(&a->waiting) && fits(a, need)) {
		admit(a, e, now_ns);
		a->stats.admitted_at_once++;
		return 0;
	}
	e->state = PD_ADM_WAITING;
	TAILQ_INSERT_TAIL(&a->waiting, e, link);
	a->nwaiting++;
	return 1;
}

int pd_admit_use(struct pd_admit *a, struct pd_adm_entry *e, uint32_t nslots, uint32_t ndedup)
{
	uint64_t n = (uint64_t)nslots + ndedup;

	if (!a || !e || e->state != PD_ADM_ADMITTED)
		return -EINVAL;
	if (n > e->need - e->used)
		return -EOVERFLOW;
	/* Drawn from our own part of outstanding, which free covers. */
	PD_ASSERT(a->free >= nslots);
	e->used += (uint32_t)n;
	a->outstanding -= n;
	a->free -= nslots;
	ADM_CHECK(a);
	return 0;
}

void pd_admit_slots_freed(struct pd_admit *a, uint32_t n)
{
	PD_ASSERT((uint64_t)a->free + n <= a->capacity);
	a->free += n;
}

void pd_admit_finish(struct pd_admit *a, struct pd_adm_entry *e)
{
	if (e->state == PD_ADM_WAITING) {
		TAILQ_REMOVE(&a->waiting, e, link);
		a->nwaiting--;
	} else if (e->state == PD_ADM_ADMITTED) {
		a->outstanding -= e->need - e->used;
		a->nadmitted--;
	}
	e->state = PD_ADM_NONE;
	ADM_CHECK(a);
}

uint32_t pd_admit_pump(struct pd_admit *a, uint64_t now_ns, pd_admit_fn *fn, void *ctx)
{
	struct pd_adm_entry *e;
	uint32_t n = 0;

	while ((e = TAILQ_FIRST(&a->waiting)) && fits(a, e->need)) {
		TAILQ_REMOVE(&a->waiting, e, link);
		a->nwaiting--;
		admit(a, e, now_ns);
		n++;
		if (fn)
			fn(ctx, e);
	}
	return n;
}

uint32_t pd_admit_expire(struct pd_admit *a, uint64_t now_ns, pd_admit_fn *fn, void *ctx)
{
	struct pd_adm_entry *e;
	uint32_t n = 0;

	/* FIFO with one timeout: the head is always the first to expire. */
	while ((e = TAILQ_FIRST(&a->waiting)) && now_ns - e->since_ns >= a->timeout_ns &&
	       now_ns >= e->since_ns) {
		TAILQ_REMOVE(&a->waiting, e, link);
		a->nwaiting--;
		e->state = PD_ADM_NONE;
		a->stats.timed_out++;
		n++;
		if (fn)
			fn(ctx, e);
	}
	return n;
}

uint64_t pd_admit_next_deadline(const struct pd_admit *a)
{
	const struct pd_adm_entry *e = TAILQ_FIRST(&a->waiting);

	return e ? e->since_ns + a->timeout_ns : UINT64_MAX;
}
