/* SPDX-License-Identifier: MIT */
/*
 * Leases (--loan-timeout, --recv-ttl): a send slot loaned with the same
 * generation for longer than --loan-timeout, or a recv pin recorded in an
 * agent's journal for longer than --recv-ttl, breaks its lease. The agent
 * holding it is fenced (pd_agents_fence(): killed, its loans back once it
 * is gone); a loan whose descriptor names no attached agent (or another
 * process than the one attached under that id: the descriptor is shared
 * memory a worker can write) is freed at once. The clocks are the
 * broker's own (pd_lease.h); the descriptors and journals are only looked
 * at, never trusted for more than which lease to time.
 *
 * The send pool's mutex is a lease too: agents hold it for microseconds.
 * Unusable (its bytes overwritten, a refused repair), it is made new in
 * place at once and the free stack rebuilt from the descriptors
 * (pd_pool_lock_reset(), pool.send.lock_resets, logged); held for
 * LOCK_STUCK_NS, it is taken back from the attached agent the pool names
 * as holder by fencing it (the robust mutex then repairs itself at the
 * next lock), or made new when the holder is no agent.
 */
#include <stdio.h>
#include <stdlib.h>

#include "pd_broker_int.h"
#include "pd_lease.h"
#include "pd_log.h"
#include "pd_time.h"

#define CHECK_EVERY_NS (250 * PD_NS_PER_MS)
#define LOCK_TRY_MS    20u
#define LOCK_STUCK_NS  (3 * PD_NS_PER_S)

int pd_broker_leases_init(struct pd_broker *b)
{
	uint32_t pins = b->shm.has_recv ? b->shm.max_agents * b->shm.pins_per_agent : 0;
	uint32_t nsend = pd_layout_send_slots(&b->shm);

	b->loan_clock = pd_lease_create(nsend);
	b->pin_clock = pd_lease_create(pins);
	b->pins_armed = calloc(b->shm.max_agents ? b->shm.max_agents : 1, 1);
	if (!b->loan_clock || !b->pin_clock || !b->pins_armed)
		return -ENOMEM;
	return pd_broker_send_init(b);
}

void pd_broker_leases_fini(struct pd_broker *b)
{
	pd_lease_destroy(b->loan_clock);
	pd_lease_destroy(b->pin_clock);
	free(b->pins_armed);
	b->loan_clock = b->pin_clock = NULL;
	b->pins_armed = NULL;
	pd_broker_send_fini(b);
}

static void fence(struct pd_broker *b, uint32_t agent, int32_t pid, const char *what,
		  uint64_t age_ns)
{
	char why[96];

	(void)snprintf(why, sizeof(why), "%s held %.1f s, over its lease", what,
		       (double)age_ns / 1e9);
	(void)pd_agents_fence(b->agents, agent, pid, why);
}

/* A loan past its lease: fence its agent, or free it when nobody holds it. */
static void loan_expired(struct pd_broker *b, uint32_t i, const struct pd_slot_desc *d,
			 uint64_t age_ns)
{
	pd_slot_ref ref = PD_SLOT_REF(i, d->gen);
	struct pd_agent_proc proc;
	char what[48];

	/* The process as it records itself: in a container its pid is not the
	 * one the broker sees (and kills). And only an agent that loans from
	 * this very pool: a sender writes its own pool's descriptors, and one
	 * naming another pool's agent must not get that agent killed. */
	if (pd_agents_live(b->agents, d->owner) &&
	    pd_broker_send_pool_of(b, d->owner) == pd_layout_send_pool(&b->shm, ref) &&
	    pd_agents_proc(b->agents, d->owner, &proc) == 0 &&
	    pd_agent_proc_is(&proc, d->pid, d->pidns)) {
		(void)snprintf(what, sizeof(what), "send slot %u", i);
		fence(b, d->owner, pd_agents_pid(b->agents, d->owner), what, age_ns);
		return;
	}
	if (pd_pool_reclaim_slot(pd_layout_send_pool(&b->shm, ref), ref, PD_SLOT_LOANED) == 1) {
		b->loans_orphaned++;
		PD_LOG_RL(WARN, shm, "send slot %u: loaned %.1f s to agent %u (pid %d), which is "
			  "not attached as that process: freed", i, (double)age_ns / 1e9, d->owner,
			  d->pid);
	}
}

/* Send pool p's descriptors in one pass: each loan's lease, and a count
 * of descriptors in no state (garbage), scrubbed after it under the lock. */
static void look_send(struct pd_broker *b, struct pd_pool *p, uint64_t now)
{
	uint32_t bad = 0;
	int fixed;

	for (uint32_t i = p->base; i < p->base + p->nslots; i++) {
		struct pd_slot_desc d;
		uint64_t age;

		if (pd_pool_desc_get(p, i, &d) < 0)
			continue;
		if (d.state > PD_SLOT_STATE_MAX) {
			bad++;
			continue;
		}
		if (!b->cfg.loan_timeout_ns)
			continue;
		age = pd_lease_age(b->loan_clock, i, d.state == PD_SLOT_LOANED,
				   (uint64_t)d.gen << 32 | d.owner, now);
		if (age > b->cfg.loan_timeout_ns)
			loan_expired(b, i, &d, age);
	}
	fixed = bad ? pd_pool_scrub(p) : 0;
	if (pd_pool_heal_header(p)) { /* for attachers that read it (older agents) */
		b->headers_restored++;
		PD_LOG_RL(WARN, shm, "send pool of slots %u..%u: its header was written over; "
			  "restored", p->base, p->base + p->nslots - 1);
	}
	b->descs_scrubbed += fixed > 0 ? (uint64_t)fixed : 0;
}

/*
 * Agent slot a's journal: its oldest record past the lease fences it.
 * Only an attached agent's journal is read; the clocks of a slot whose
 * agent went are reset once, so its next agent starts with fresh ones.
 */
static void check_pins_of(struct pd_broker *b, uint32_t a, uint64_t now)
{
	int32_t pid = pd_agents_pid(b->agents, a + 1);
	uint32_t n = b->shm.pins_per_agent;
	_Atomic uint64_t *cell = pd_agents_live(b->agents, a + 1) ? pd_layout_pins(&b->shm, a)
								  : NULL;
	uint64_t worst = 0;

	if (!cell) {
		if (b->pins_armed[a])
			pd_lease_forget(b->pin_clock, a * n, n);
		b->pins_armed[a] = 0;
		return;
	}
	b->pins_armed[a] = 1;
	for (uint32_t c = 0; c < n; c++) {
		uint64_t rec = atomic_load_explicit(&cell[c], memory_order_relaxed);
		uint64_t age = pd_lease_age(b->pin_clock, a * n + c, rec != 0, rec, now);

		worst = age > worst ? age : worst;
	}
	if (worst > b->cfg.recv_ttl_ns)
		fence(b, a + 1, pid, "a recv pin", worst);
}

int pd_broker_send_lock_reset(struct pd_broker *b, uint32_t k, int why, int32_t holder)
{
	int rc = pd_pool_lock_reset(&b->shm.send_part[k]);

	b->lock_bad_since[k] = 0;
	PD_LOG_RL(WARN, shm, "send pool %u lock %s (holder pid %d, not an agent): %s", k,
		  why == -ETIMEDOUT ? "held for 3 s" : pd_strerror(why), holder,
		  rc == 0 ? "made new, pool rebuilt" : pd_strerror(rc));
	return rc;
}

/* Does a thread of agent (whose process is holder) hold send pool k's lock? */
static int holds_lock(struct pd_broker *b, uint32_t k, uint32_t agent,
		      const struct pd_agent_proc *holder)
{
	const struct pd_mutex *mx = &b->shm.send_part[k].shm->lock;
	int32_t pid = pd_agents_pid(b->agents, agent);

	if (holder->pidns == pd_self_pidns())
		return pd_mutex_owner_alive(mx, holder->pid);
	return pid <= 0 || pd_mutex_owner_in(mx, pid);
}

/* Held for LOCK_STUCK_NS: fence the agent holding it, else make it new. */
static void lock_stuck(struct pd_broker *b, uint32_t k, const struct pd_agent_proc *holder,
		       uint64_t now)
{
	uint32_t agent = pd_agents_by_proc(b->agents, holder);
	char why[80];

	/* Fenced only if a thread of its really holds it: the recorded pid is
	 * whoever locked last, and the lock word may be garbage. The lock word
	 * names a thread of the holder's pid namespace: for an agent in another
	 * (a container) it is looked for among its threads' ids there, and for
	 * one this broker cannot see (pid 0) the record is taken as it is. */
	if (!agent || pd_broker_send_pool_of(b, agent) != &b->shm.send_part[k] ||
	    !holds_lock(b, k, agent, holder)) { /* not a sender of this pool: no fence */
		(void)pd_broker_send_lock_reset(b, k, -ETIMEDOUT, holder->pid);
		return;
	}
	(void)snprintf(why, sizeof(why), "held the send pool's lock %.1f s",
		       (double)(now - b->lock_bad_since[k]) / 1e9);
	b->lock_bad_since[k] = 0;
	(void)pd_agents_fence(b->agents, agent, pd_agents_pid(b->agents, agent), why);
}

/* Unusable (not held: its bytes are wrong): made new at once. Held: see
 * lock_stuck(). */
static void check_pool_lock(struct pd_broker *b, uint32_t k, uint64_t now)
{
	struct pd_agent_proc holder = { 0 };
	int rc = pd_pool_lock_check(&b->shm.send_part[k], LOCK_TRY_MS, &holder.pid,
				    &holder.pidns);

	if (rc == 0)
		b->lock_bad_since[k] = 0;
	else if (rc != -ETIMEDOUT)
		(void)pd_broker_send_lock_reset(b, k, rc, holder.pid);
	else if (!b->lock_bad_since[k])
		b->lock_bad_since[k] = now;
	else if (now - b->lock_bad_since[k] >= LOCK_STUCK_NS)
		lock_stuck(b, k, &holder, now);
}

void pd_broker_leases_check(struct pd_broker *b, uint64_t now)
{
	if (!b->loan_clock || now < b->lease_next_ns)
		return;
	b->lease_next_ns = now + CHECK_EVERY_NS;
	for (uint32_t k = 0; k < b->shm.send_parts; k++)
		check_pool_lock(b, k, now);
	pd_broker_send_tick(b);
	for (uint32_t k = 0; k < b->shm.send_parts; k++)
		look_send(b, &b->shm.send_part[k], now);
	for (uint32_t a = 0; b->shm.has_recv && a < b->shm.max_agents; a++)
		check_pins_of(b, a, now);
}
