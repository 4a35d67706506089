/* SPDX-License-Identifier: MIT */
/*
 * pdbroker: its side of the send pools (--send-pools; one by default).
 *
 * Which pool a slot is of, and a sender's own (the agent table says, and
 * only the broker writes it). Freeing the staging of a batch once it is
 * done, and again later when a pool's lock was not to be had. Taking back
 * a detached agent's loans in its own pool. And the broker's own record of
 * the send slots it holds (taken from a submission, not freed yet): a pool
 * no sender uses any more (its last one detached) is made to say exactly
 * that (pd_pool_resync()): whatever a sender wrote there, live-looking
 * descriptors, waiter entries, counts, is forgotten, and every slot the
 * broker does not hold is free again at once (not at the loan lease, and
 * not never, for a descriptor that names the broker or another agent).
 */
#include <stdlib.h>

#include "pd_attach_proto.h"
#include "pd_broker_int.h"
#include "pd_log.h"

#define HELD (UINT64_C(1) << 32) /* send_held[i]: HELD | generation, 0 not held */

int pd_broker_send_init(struct pd_broker *b)
{
	uint32_t n = pd_layout_send_slots(&b->shm);

	b->free_later = calloc(n ? n : 1, sizeof(*b->free_later));
	b->send_held = calloc(n ? n : 1, sizeof(*b->send_held));
	return b->free_later && b->send_held ? 0 : -ENOMEM;
}

void pd_broker_send_fini(struct pd_broker *b)
{
	free(b->free_later);
	free(b->send_held);
	b->free_later = NULL;
	b->send_held = NULL;
}

/* The broker holds (1) or let go of (0) slot ref: letting go of a ref of
 * another generation than the one it holds (a stale free of a slot that
 * was loaned and put again meanwhile) changes nothing. */
static void held(struct pd_broker *b, pd_slot_ref ref, int on)
{
	uint32_t i = PD_SLOT_REF_IDX(ref);

	if (!b->send_held || i >= pd_layout_send_slots(&b->shm))
		return;
	if (on)
		b->send_held[i] = HELD | PD_SLOT_REF_GEN(ref);
	else if (b->send_held[i] == (HELD | PD_SLOT_REF_GEN(ref)))
		b->send_held[i] = 0;
}

void pd_broker_send_took(struct pd_broker *b, const pd_slot_ref *refs, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		held(b, refs[i], 1);
}

/* The send pool of every ref, or NULL when they are of several (or none). */
static struct pd_pool *pool_of_all(struct pd_broker *b, const pd_slot_ref *refs, uint32_t n)
{
	struct pd_pool *p = n ? pd_layout_send_pool(&b->shm, refs[0]) : NULL;

	for (uint32_t i = 1; p && i < n; i++)
		if (pd_layout_send_pool(&b->shm, refs[i]) != p)
			return NULL;
	return p;
}

/* Free one send slot in its own pool: pd_pool_free()'s result. */
static int free_one(struct pd_broker *b, pd_slot_ref ref)
{
	struct pd_pool *p = pd_layout_send_pool(&b->shm, ref);

	return p ? pd_pool_free(p, &ref, 1) : -EINVAL;
}

/*
 * A free is all or nothing. When one ref is not the broker's any more (an
 * agent freed a slot it had put, and it may be someone else's now), the
 * others still go back, one by one (each ref's generation keeps the free
 * off a slot handed out again). When the pool's lock is not to be had now
 * (held, or being made new), each is tried again at the next look.
 */
void pd_broker_free_slots(struct pd_broker *b, const pd_slot_ref *refs, uint32_t n)
{
	struct pd_pool *p = pool_of_all(b, refs, n);
	uint32_t behind = 0, later = 0;
	int rc = n == 0 ? 0 : p ? pd_pool_free(p, refs, n) : -ESTALE;

	for (uint32_t i = 0; rc < 0 && i < n; i++) {
		int one = rc == -ESTALE ? free_one(b, refs[i]) : rc;

		behind += one == -ESTALE || one == -EINVAL;
		if (one < 0 && one != -ESTALE && one != -EINVAL &&
		    b->nfree_later < pd_layout_send_slots(&b->shm)) {
			b->free_later[b->nfree_later++] = refs[i];
			later++;
			continue;
		}
		held(b, refs[i], 0);
	}
	for (uint32_t i = 0; rc == 0 && i < n; i++)
		held(b, refs[i], 0);
	if (behind)
		PD_LOG_RL(WARN, slot, "%u staging slots were freed behind the broker's back", behind);
	if (later)
		PD_LOG_RL(WARN, slot, "%u staging slots not freed yet (%s): tried again shortly",
			  later, pd_strerror(rc));
}

void pd_broker_reclaim_later(struct pd_broker *b, uint32_t owner)
{
	struct pd_agent_proc proc = { 0 };
	struct pd_pool *p = pd_broker_send_pool_of(b, owner);

	(void)pd_agents_proc(b->agents, owner, &proc);
	if (p && b->nreclaim_later < PD_ARRAY_SIZE(b->reclaim_later) && proc.pid > 0) {
		b->reclaim_later[b->nreclaim_later].owner = owner;
		b->reclaim_later[b->nreclaim_later].pool = p;
		b->reclaim_later[b->nreclaim_later++].proc = proc;
		PD_LOG_RL(WARN, slot, "agent %u (pid %d) detached; its loans come back once the "
			  "send pool's lock is free", owner, proc.pid);
	} else {
		PD_LOG_RL(WARN, slot, "agent %u (pid %d) detached; its loans not reclaimed (%u "
			  "detaches wait already): the loan lease frees them", owner, proc.pid,
			  b->nreclaim_later);
	}
}

int pd_broker_send_reclaim(struct pd_broker *b, uint32_t owner, const struct pd_agent_proc *proc)
{
	struct pd_pool *p = pd_broker_send_pool_of(b, owner); /* the only one it loans from */

	return p ? pd_pool_reclaim_proc(p, owner, proc ? proc->pid : 0, proc ? proc->pidns : 0) : 0;
}

struct pd_pool *pd_broker_send_pool_of(struct pd_broker *b, uint32_t agent)
{
	uint32_t k;

	if (!b->shm.has_send || agent == 0 || agent > b->shm.max_agents)
		return NULL;
	k = b->shm.agents->slot[agent - 1].send_part; /* the broker's word: read-only to agents */
	return k < b->shm.send_parts ? &b->shm.send_part[k] : NULL;
}

void pd_broker_send_cancel(struct pd_broker *b, uint64_t tag)
{
	for (uint32_t k = 0; k < b->shm.send_parts; k++)
		(void)pd_pool_cancel(&b->shm.send_part[k], tag);
}

static void reclaim_later(struct pd_broker *b)
{
	uint32_t kept = 0;

	for (uint32_t i = 0; i < b->nreclaim_later; i++)
		if (pd_pool_reclaim_proc(b->reclaim_later[i].pool, b->reclaim_later[i].owner,
					 b->reclaim_later[i].proc.pid,
					 b->reclaim_later[i].proc.pidns) < 0)
			b->reclaim_later[kept++] = b->reclaim_later[i];
	b->nreclaim_later = kept;
}

/* The frees that failed, again; a stale ref (freed meanwhile) is dropped. */
static void free_later(struct pd_broker *b)
{
	uint32_t kept = 0;

	for (uint32_t i = 0; i < b->nfree_later; i++) {
		int rc = free_one(b, b->free_later[i]);

		if (rc < 0 && rc != -ESTALE && rc != -EINVAL)
			b->free_later[kept++] = b->free_later[i];
		else
			held(b, b->free_later[i], 0);
	}
	b->nfree_later = kept;
}


/* What the broker knows of send slot idx: QUEUED at its generation when
 * it holds it, else FREE. */
static void truth(void *ctx, uint32_t idx, struct pd_slot_truth *t)
{
	const struct pd_broker *b = ctx;
	uint64_t h = idx < pd_layout_send_slots(&b->shm) ? b->send_held[idx] : 0;

	*t = h ? (struct pd_slot_truth){ .state = PD_SLOT_QUEUED, .gen = (uint32_t)h } :
		 (struct pd_slot_truth){ .state = PD_SLOT_FREE };
}

/* Pool k, when no sender uses it: as the broker's record says. */
static void resync(struct pd_broker *b, uint32_t k)
{
	uint32_t users[PD_SEND_PARTS_MAX];
	int rc;

	if (!b->send_held) /* no record kept (pd_broker_send_init() not run): no truth */
		return;
	pd_layout_send_users(&b->shm, 0, users);
	if (users[k]) {
		b->send_resync[k] = 0; /* a new sender's now: its leases and scrubs watch it */
		return;
	}
	rc = pd_pool_resync(&b->shm.send_part[k], BROKER_OWNER, truth, b);
	b->send_resync[k] = rc < 0;
	if (rc > 0)
		PD_LOG_RL(WARN, shm, "send pool %u: %d entries its senders left differed from the "
			  "broker's record; made as it says", k, rc);
}

void pd_broker_send_detached(struct pd_broker *b, uint32_t agent)
{
	const struct pd_pool *p = pd_broker_send_pool_of(b, agent);

	if (p && (b->shm.agents->slot[agent - 1].roles & PD_ROLE_SEND))
		resync(b, (uint32_t)(p - b->shm.send_part));
}

void pd_broker_send_tick(struct pd_broker *b)
{
	if (!b->shm.has_send)
		return;
	free_later(b);
	reclaim_later(b);
	for (uint32_t k = 0; k < b->shm.send_parts; k++)
		if (b->send_resync[k])
			resync(b, k);
}
