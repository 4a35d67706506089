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
	TAILQ_INIT(&a->by_age);
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
	e->was_admitted = 1;
	e->used = 0;
	if (e->vstart > a->vtime)
		a->vtime = e->vstart;
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

/* Into the admission order by tag, after every entry of the same tag. */
static void enqueue(struct pd_admit *a, struct pd_adm_entry *e)
{
	struct pd_adm_entry *p = TAILQ_LAST(&a->waiting, pd_adm_queue);

	while (p && p->vstart > e->vstart)
		p = TAILQ_PREV(p, pd_adm_queue, link);
	if (p)
		TAILQ_INSERT_AFTER(&a->waiting, p, e, link);
	else
		TAILQ_INSERT_HEAD(&a->waiting, e, link);
	TAILQ_INSERT_TAIL(&a->by_age, e, age_link);
	a->nwaiting++;
}

static void dequeue(struct pd_admit *a, struct pd_adm_entry *e)
{
	TAILQ_REMOVE(&a->waiting, e, link);
	TAILQ_REMOVE(&a->by_age, e, age_link);
	a->nwaiting--;
}

/* A waiting request is before a new one of tag vstart. */
static int ahead_of(const struct pd_admit *a, uint64_t vstart)
{
	const struct pd_adm_entry *h = TAILQ_FIRST(&a->waiting);

	return h && h->vstart <= vstart;
}

int pd_admit_request(struct pd_admit *a, struct pd_adm_entry *e, uint32_t need,
		     uint64_t now_ns)
{
	return pd_admit_request_flow(a, e, need, a ? &a->finish : NULL, now_ns);
}

int pd_admit_request_flow(struct pd_admit *a, struct pd_adm_entry *e, uint32_t need,
			  uint64_t *finish, uint64_t now_ns)
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
	if (!finish)
		return -EINVAL;
	e->need = need;
	e->since_ns = now_ns;
	e->vstart = *finish > a->vtime ? *finish : a->vtime;
	*finish = e->vstart + need;
	if (!ahead_of(a, e->vstart) && fits(a, need)) {
		admit(a, e, now_ns);
		a->stats.admitted_at_once++;
		return 0;
	}
	e->state = PD_ADM_WAITING;
	enqueue(a, e);
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
		dequeue(a, e);
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
		dequeue(a, e);
		admit(a, e, now_ns);
		n++;
		if (fn)
			fn(ctx, e);
	}
	return n;
}

uint32_t pd_admit_expire(struct pd_admit *a, uint64_t now_ns, uint32_t max, pd_admit_fn *fn,
			 void *ctx)
{
	struct pd_adm_entry *e;
	uint32_t n = 0;

	/* One timeout: the oldest is always the first to expire. */
	while (n < max && (e = TAILQ_FIRST(&a->by_age)) && now_ns - e->since_ns >= a->timeout_ns &&
	       now_ns >= e->since_ns) {
		dequeue(a, e);
		e->state = PD_ADM_NONE;
		a->stats.timed_out++;
		n++;
		if (fn)
			fn(ctx, e);
	}
	return n;
}

const struct pd_adm_entry *pd_admit_oldest(const struct pd_admit *a)
{
	return TAILQ_FIRST(&a->by_age);
}

uint64_t pd_admit_next_deadline(const struct pd_admit *a)
{
	const struct pd_adm_entry *e = TAILQ_FIRST(&a->by_age);

	return e ? e->since_ns + a->timeout_ns : UINT64_MAX;
}
