/* SPDX-License-Identifier: MIT */
/*
 * The recv pool in shared memory is a copy; the receiver engine's chunk
 * records are the truth (it is the pool's only allocator). What shows the
 * copy damaged (a descriptor that disagrees, a waiter in a pool nobody
 * waits on, a slot handed out that the engine holds) is counted, logged
 * and repaired from the records: never an assertion, never a slot given
 * twice, never a pool that refuses grants for good.
 */
#include "pd_log.h"
#include "pd_rx_int.h"

#define SCRUB_EVERY 10u /* ticks (1 s) */

static uint32_t desc_state_of(const struct rx_chunk *c)
{
	switch (c->state) {
	case CHUNK_GRANTED:
		return PD_SLOT_GRANTED;
	case CHUNK_COMMITTED:
	case CHUNK_ZOMBIE:
		return PD_SLOT_COMMITTED;
	default:
		return PD_SLOT_FREE;
	}
}

static void truth(void *ctx, uint32_t idx, struct pd_slot_truth *t)
{
	const struct pd_rx *rx = ctx;
	const struct rx_chunk *c = &rx->chunks[idx];

	t->state = desc_state_of(c);
	t->gen = PD_SLOT_REF_GEN(c->ref);
}

/* 1 when the shared copy disagrees with the records. The broker is its
 * only writer, so reading it without the lock is no race. */
static int damaged(const struct pd_rx *rx)
{
	const struct pd_pool *p = rx->o.pool;

	if (p->shm->nwaiters)
		return 1;
	for (uint32_t i = 0; i < rx->nslots; i++) {
		const struct rx_chunk *c = &rx->chunks[i];
		struct pd_slot_desc d;
		uint32_t st = desc_state_of(c);

		(void)pd_pool_desc_get(p, i, &d);
		if (atomic_load_explicit(&d.state, memory_order_relaxed) != st ||
		    (st != PD_SLOT_FREE && (d.gen != PD_SLOT_REF_GEN(c->ref) ||
					    d.owner != rx->o.owner)))
			return 1;
	}
	return 0;
}

int pd_rx_scrub(struct pd_rx *rx, const char *why)
{
	int n = pd_pool_resync(rx->o.pool, rx->o.owner, truth, rx);

	if (n > 0) {
		rx->st.pool_repairs++;
		PD_LOG_RL(ERR, ctl, "recv pool damaged in shared memory (%s): %d entries "
			  "repaired from the broker's records", why, n);
	}
	return n;
}

void pd_rx_scrub_tick(struct pd_rx *rx)
{
	if (++rx->scrub_ticks < SCRUB_EVERY)
		return;
	rx->scrub_ticks = 0;
	if (damaged(rx))
		(void)pd_rx_scrub(rx, "found by the periodic check");
}
