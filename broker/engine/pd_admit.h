/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_ADMIT_H
#define PD_BROKER_PD_ADMIT_H

/*
 * Admission control of the receiving broker: owns the
 * recv pool's capacity accounting. Pure logic; the caller passes "now".
 *
 *   free         slots not held by any chunk
 *   outstanding  sum over admitted requests of (need - used)
 *   invariant    free >= outstanding
 *
 * so a grant drawn from an admitted request's reservation never waits.
 * Requests are admitted whole, in one order, and never overtake: a request
 * is not admitted before one ahead of it, however small. The order is fair
 * between flows (the receiver's flows are its peers): start-time fair
 * queueing by slots, a request's tag max(virtual time, its flow's last
 * finish) and its flow's finish then tag + need, the virtual time that of
 * the last request admitted. Within a flow it is FIFO; one flow's backlog
 * does not delay another flow's next request more than one request of each
 * flow ahead of it would. A request's reservation is drawn as
 * chunks are granted (a new slot each) or deduplicated (no slot: the key is
 * already held); what it never draws is given back by pd_admit_finish().
 */
#include <stdint.h>
#include <sys/queue.h>

#include "pd_stats.h"

#define PD_ADM_NONE     0u
#define PD_ADM_WAITING  1u
#define PD_ADM_ADMITTED 2u

/* Embedded in the caller's request. Zero it before first use. */
struct pd_adm_entry {
	TAILQ_ENTRY(pd_adm_entry) link;     /* waiting, in admission order */
	TAILQ_ENTRY(pd_adm_entry) age_link; /* by_age, in arrival order */
	uint64_t vstart;     /* fair-queueing tag */
	uint64_t since_ns;   /* when it asked */
	uint64_t admitted_ns; /* when it was admitted */
	uint32_t need;       /* slots reserved */
	uint32_t used;       /* drawn: granted or deduplicated */
	uint32_t state;      /* PD_ADM_* */
	uint32_t was_admitted; /* 1 once admitted, whatever came after */
};

struct pd_admit_stats {
	uint64_t admitted;
	uint64_t admitted_at_once;   /* without waiting */
	uint64_t rejected_zero;      /* need 0 */
	uint64_t rejected_big;       /* need > capacity */
	uint64_t timed_out;
	uint64_t wait_ns;            /* total wait of admitted requests */
	uint64_t wait_max_ns;
};

struct pd_admit {
	uint32_t capacity;
	uint32_t free;
	uint64_t outstanding;
	uint64_t timeout_ns;
	uint32_t nwaiting;
	uint32_t nadmitted;
	uint64_t vtime;      /* tag of the last request admitted */
	uint64_t finish;     /* the one flow of pd_admit_request() */
	TAILQ_HEAD(pd_adm_queue, pd_adm_entry) waiting; /* admission order */
	struct pd_adm_queue by_age;                     /* arrival order (expiry) */
	struct pd_admit_stats stats;
	struct pd_stat_hist wait_hist; /* admission waits (admitted requests) */
};

typedef void pd_admit_fn(void *ctx, struct pd_adm_entry *e);

/* capacity = recv pool slots (all free); timeout_ns: how long one may wait. */
int pd_admit_init(struct pd_admit *a, uint32_t capacity, uint64_t timeout_ns);

/**
 * Ask for need slots. Admitted at once only when no waiting request is
 * before it and it fits.
 * @return 0 admitted; 1 waiting (pd_admit_pump() admits it later);
 *         -EINVAL need 0 or e not idle; -E2BIG need > capacity.
 */
int pd_admit_request(struct pd_admit *a, struct pd_adm_entry *e, uint32_t need,
		     uint64_t now_ns);

/* As pd_admit_request(), for a request of the flow whose finish tag the
 * caller keeps in *finish (zero for a new flow). */
int pd_admit_request_flow(struct pd_admit *a, struct pd_adm_entry *e, uint32_t need,
			  uint64_t *finish, uint64_t now_ns);

/**
 * Draw from e's reservation: nslots newly granted slots, ndedup chunks that
 * need no slot. @return 0; -EINVAL not admitted; -EOVERFLOW more than
 * reserved (nothing drawn).
 */
int pd_admit_use(struct pd_admit *a, struct pd_adm_entry *e, uint32_t nslots, uint32_t ndedup);

/* n slots held by chunks became free. */
void pd_admit_slots_freed(struct pd_admit *a, uint32_t n);

/* e is done (complete, failed or cancelled): leave the queue, or give back
 * what the reservation did not draw. Idempotent. */
void pd_admit_finish(struct pd_admit *a, struct pd_adm_entry *e);

/* Admit waiting requests, in order, while the head fits; fn for each.
 * @return how many. */
uint32_t pd_admit_pump(struct pd_admit *a, uint64_t now_ns, pd_admit_fn *fn, void *ctx);

/* Remove waiting requests whose wait reached timeout_ns, at most max of
 * them (the rest at the next call); fn for each (their state is NONE).
 * @return how many. */
uint32_t pd_admit_expire(struct pd_admit *a, uint64_t now_ns, uint32_t max, pd_admit_fn *fn,
			 void *ctx);

/* 1 when the accounting is consistent (free <= capacity, free >= outstanding). */
int pd_admit_ok(const struct pd_admit *a);

/* The request waiting longest, or NULL. */
const struct pd_adm_entry *pd_admit_oldest(const struct pd_admit *a);

/* When the oldest waiter expires, or UINT64_MAX when none waits. */
uint64_t pd_admit_next_deadline(const struct pd_admit *a);

#endif
