/* SPDX-License-Identifier: MIT */
/* Slot pool: locking, owner-death repair, allocation, free, cancel, reclaim. */
#include <errno.h>
#include <stdbool.h>
#include <time.h>
#include <string.h>

#include "pd_log.h"
#include "pd_slots.h"
#include "pd_time.h"

/* Transient mark in the state word (written only under the mutex) while a
 * free or hand-over checks its refs: finds a ref repeated in one call. */
#define STATE_MARK 0x80000000u

static uint32_t slot_state(const struct pd_slot_desc *d)
{
	return atomic_load_explicit(&d->state, memory_order_relaxed);
}

static void slot_set_state(struct pd_slot_desc *d, uint32_t st)
{
	atomic_store_explicit(&d->state, st, memory_order_relaxed);
}

/* ---- repair ---------------------------------------------------------------- */

/* The descriptors are the truth: rebuild the free stack and gauges from them. */
static void rebuild(struct pd_pool *p)
{
	struct pd_pool_shm *s = p->shm;
	uint32_t nfree = 0, nwaiters = 0;

	for (uint32_t i = 0; i < p->nslots; i++) {
		struct pd_slot_desc *d = &p->desc[i];

		slot_set_state(d, slot_state(d) & ~STATE_MARK); /* a holder died mid-check */
		if (slot_state(d) > PD_SLOT_STATE_MAX) {
			slot_set_state(d, PD_SLOT_FREE);
			d->gen++;
		}
		if (slot_state(d) == PD_SLOT_FREE)
			p->free_stack[nfree++] = i;
	}
	for (uint32_t i = 0; i < PD_POOL_MAX_WAITERS; i++)
		nwaiters += s->waiters[i].ticket != 0;
	s->nfree = nfree;
	s->nwaiters = nwaiters;
	pd_stat_set(&s->stats.in_use, p->nslots - nfree);
}

static void waiter_del(struct pd_pool_shm *s, struct pd_pool_waiter *w)
{
	w->ticket = 0;
	s->nwaiters--;
}

/* Is a record (rpid, rns) of the process pid of namespace ns? pid 0: of any. */
static bool same_proc(int32_t rpid, uint32_t rns, int32_t pid, uint32_t ns)
{
	return !pid || pd_proc_is(rpid, rns, pid, ns);
}

/* Free every slot (and drop every wait) of an owner id, or of a process. */
static uint32_t free_owned(struct pd_pool *p, uint32_t owner, int32_t pid, uint32_t ns)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < p->nslots; i++) {
		struct pd_slot_desc *d = &p->desc[i];

		if (slot_state(d) != PD_SLOT_FREE && same_proc(d->pid, d->pidns, pid, ns) &&
		    (!owner || d->owner == owner)) {
			slot_set_state(d, PD_SLOT_FREE);
			n++;
		}
	}
	for (uint32_t i = 0; i < PD_POOL_MAX_WAITERS; i++) {
		struct pd_pool_waiter *w = &p->shm->waiters[i];

		if (w->ticket && same_proc(w->pid, w->pidns, pid, ns) &&
		    (!owner || w->owner == owner))
			waiter_del(p->shm, w);
	}
	return n;
}

/* Runs with the mutex held after its holder died, before it is made
 * consistent: drop what the dead process held, then rebuild. */
static int repair(void *ctx)
{
	struct pd_pool *p = ctx;
	struct pd_pool_shm *s = p->shm;
	uint32_t freed = 0;

	if (s->lock_pid > 0 && !pd_proc_alive(s->lock_pid, s->lock_pidns))
		freed = free_owned(p, 0, s->lock_pid, s->lock_pidns);
	for (uint32_t i = 0; i < PD_POOL_MAX_WAITERS; i++) {
		struct pd_pool_waiter *w = &s->waiters[i];

		if (w->ticket && !pd_proc_alive(w->pid, w->pidns))
			w->ticket = 0;
	}
	rebuild(p);
	pd_stat_add1w(&s->stats.reclaimed, freed);
	pd_stat_add1w(&s->stats.repairs, 1);
	PD_LOG(WARN, slot, "pool repaired after holder pid %d died: %u slots reclaimed",
	       s->lock_pid, freed);
	pd_cond_broadcast(&s->cond);
	return 0;
}

/* ---- locking --------------------------------------------------------------- */

static void set_holder(struct pd_pool_shm *s, uint32_t owner)
{
	s->lock_owner = owner;
	s->lock_pid = pd_self_pid();
	s->lock_pidns = pd_self_pidns();
}

/* A mutex found unusable (its bytes overwritten, a refused repair) is made
 * new by the broker (pd_pool_lock_reset()): callers with a deadline wait
 * for that rather than fail. */
static int unusable(int rc)
{
	return rc == -ENOTRECOVERABLE || rc == -EINVAL;
}

int pd_pool_lock(struct pd_pool *p, uint32_t owner, uint64_t deadline_ns)
{
	int rc;

	if (!p)
		return -EINVAL;
	while (unusable(rc = pd_mutex_lock_until(&p->shm->lock, deadline_ns, repair, p)) &&
	       pd_now_ns() < deadline_ns)
		(void)nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	if (unusable(rc))
		rc = -ETIMEDOUT; /* busy being made new, as far as the caller knows */
	if (rc >= 0)
		set_holder(p->shm, owner);
	return rc;
}

static int reset_locked(struct pd_pool *p);

/* Calls without a deadline: PD_POOL_LOCK_MS on a busy mutex, the broker's
 * handle BROKER_LOCK_MS (its loop serves every agent), and 1 ms while its
 * last wait timed out (a holder stopped: fenced after 3 s by the broker's
 * lease look; meanwhile the callers defer). An unusable one, or
 * one "held" by no live thread, is made new by the broker's handle; others
 * wait up to a second for the broker to do so. */
#define BROKER_LOCK_MS 200u

static int lock_short(struct pd_pool *p, uint32_t owner)
{
	uint32_t ms = !p->resetter ? PD_POOL_LOCK_MS : p->stuck ? 1 : BROKER_LOCK_MS;
	int rc = pd_mutex_lock_timeout(&p->shm->lock, ms, repair, p);

	if (p->resetter)
		p->stuck = rc == -ETIMEDOUT;
	/* "Held" by no thread at all: its bytes are wrong. The lock word names a
	 * thread of the holder's pid namespace: of another, that cannot be told
	 * here (the broker's lease look fences or resets it after a while). */
	if (rc == -ETIMEDOUT && p->resetter && p->shm->lock_pidns == pd_self_pidns() &&
	    !pd_mutex_owner_alive(&p->shm->lock, 0))
		rc = -ENOTRECOVERABLE;
	for (int tries = 0; unusable(rc) && p->resetter && tries < 3; tries++)
		rc = reset_locked(p); /* again if it is being written over meanwhile */
	if (unusable(rc) && !p->resetter)
		return pd_pool_lock(p, owner, pd_deadline_ms(1000));
	if (rc >= 0)
		set_holder(p->shm, owner);
	return rc;
}

void pd_pool_unlock(struct pd_pool *p)
{
	p->shm->lock_pid = 0;
	pd_mutex_unlock(&p->shm->lock);
}

static void wake_waiters(struct pd_pool_shm *s)
{
	if (s->nwaiters)
		pd_cond_broadcast(&s->cond);
}

/* ---- allocation ------------------------------------------------------------ */

/* Undo the first n grants of take_pass(): those slots were free. */
static void take_undo(struct pd_pool *p, const pd_slot_ref *out, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		slot_set_state(&p->desc[pd_pool_lidx(p, out[i])], PD_SLOT_FREE);
}

/* Grant the top n entries of the free stack, checking each as it goes.
 * 0, or -EPROTO with nothing granted. */
static int take_pass(struct pd_pool *p, const struct pd_pool_who *who, uint32_t n,
		     pd_slot_ref *out)
{
	/* Locals: stores through desc may alias p and who, so the compiler
	 * would otherwise reload them for every slot. */
	const struct pd_pool_who w = *who;
	struct pd_slot_desc *desc = p->desc;
	const uint32_t *top = p->free_stack + p->shm->nfree;
	uint32_t nslots = p->nslots, nfree = p->shm->nfree;

	if (nfree > nslots || n > nfree)
		return -EPROTO;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t idx = top[-1 - (int64_t)i], gen;
		struct pd_slot_desc *d;

		if (idx >= nslots || slot_state(&desc[idx]) != PD_SLOT_FREE) {
			take_undo(p, out, i);
			return -EPROTO;
		}
		d = &desc[idx];
		gen = d->gen + 1;
		d->gen = gen;
		d->owner = w.owner;
		d->pid = w.pid;
		d->pidns = pd_self_pidns();
		d->tag = w.tag;
		d->len = 0;
		d->flags = 0;
		slot_set_state(d, w.state);
		out[i] = PD_SLOT_REF(idx + p->base, gen);
	}
	return 0;
}

static int take(struct pd_pool *p, const struct pd_pool_who *who, uint32_t n, pd_slot_ref *out)
{
	struct pd_pool_shm *s = p->shm;
	uint32_t in_use;

	/* The stack and counts are shm a process may be writing this moment:
	 * rebuilt from the descriptors, tried again a few times. */
	for (int tries = 0; take_pass(p, who, n, out) < 0; tries++) {
		if (tries == 4)
			return -EPROTO;
		PD_LOG_RL(ERR, slot, "pool free stack corrupt; rebuilding");
		rebuild(p);
	}
	s->nfree -= n;
	in_use = p->nslots - s->nfree;
	pd_stat_set(&s->stats.in_use, in_use);
	pd_stat_max(&s->stats.high_water, in_use);
	pd_stat_add1w(&s->stats.allocs, 1);
	return 0;
}

static int is_stale(const struct pd_pool_waiter *w, uint64_t now_ns);

/* A free entry, else that of a waiter not running (stale): it gets a new
 * entry when it looks again (wait_and_take()). NULL when every entry is a
 * running waiter's. */
static struct pd_pool_waiter *waiter_slot(struct pd_pool_shm *s)
{
	struct pd_pool_waiter *stale = NULL;
	uint64_t now = pd_now_ns();

	for (uint32_t i = 0; i < PD_POOL_MAX_WAITERS; i++) {
		struct pd_pool_waiter *w = &s->waiters[i];

		if (!w->ticket)
			return w;
		if (!stale && is_stale(w, now))
			stale = w;
	}
	if (stale)
		waiter_del(s, stale);
	return stale;
}

static struct pd_pool_waiter *waiter_add(struct pd_pool_shm *s, const struct pd_pool_who *who,
					 uint32_t n)
{
	struct pd_pool_waiter *w = waiter_slot(s);

	if (!w)
		return NULL;
	*w = (struct pd_pool_waiter){ .ticket = s->next_ticket++, .tag = who->tag,
				      .owner = who->owner, .pid = who->pid, .n = n,
				      .seen_ns = pd_now_ns(), .pidns = pd_self_pidns() };
	s->nwaiters++;
	return w;
}

/* A waiter that did not look at the queue for PD_POOL_STALE_MS, or whose
 * time is that far ahead of ours (not a time any waiter wrote: shm). */
static int is_stale(const struct pd_pool_waiter *w, uint64_t now_ns)
{
	uint64_t seen = w->seen_ns, d = now_ns > seen ? now_ns - seen : seen - now_ns;

	return d > PD_POOL_STALE_MS * PD_NS_PER_MS;
}

/* FIFO: only the oldest waiter that still runs may take slots. */
static int is_head(const struct pd_pool_shm *s, uint64_t ticket)
{
	uint64_t now = pd_now_ns();

	for (uint32_t i = 0; i < PD_POOL_MAX_WAITERS; i++) {
		uint64_t t = s->waiters[i].ticket;

		if (t && t < ticket && !is_stale(&s->waiters[i], now))
			return 0;
	}
	return 1;
}

static void account_wait(struct pd_pool_shm *s, uint64_t t0, int rc)
{
	uint64_t dt = pd_now_ns() - t0;

	pd_stat_add1w(&s->stats.wait_ns, dt);
	pd_stat_max(&s->stats.wait_max_ns, dt);
	/* Locked adds: timeouts are also counted outside the mutex. */
	if (rc == -ETIMEDOUT)
		pd_stat_add(&s->stats.timeouts, 1);
	else if (rc == -ECANCELED)
		pd_stat_add(&s->stats.cancels, 1);
}

/* Waiters ahead of ticket whose process is gone would block the queue
 * until the broker reclaims them: drop them now. */
static void drop_dead_ahead(struct pd_pool_shm *s, uint64_t ticket)
{
	for (uint32_t i = 0; i < PD_POOL_MAX_WAITERS; i++) {
		struct pd_pool_waiter *w = &s->waiters[i];

		if (w->ticket && w->ticket < ticket && !pd_proc_alive(w->pid, w->pidns)) {
			PD_LOG(WARN, slot, "dropping wait of dead pid %d", w->pid);
			waiter_del(s, w);
		}
	}
}

/* 1 when this waiter may take its n slots now. */
static int my_turn(struct pd_pool_shm *s, uint64_t ticket, uint32_t n)
{
	if (s->nfree < n)
		return 0;
	if (!is_head(s, ticket))
		drop_dead_ahead(s, ticket);
	return is_head(s, ticket);
}

/* Sleep in slices, so that a dead waiter ahead is noticed without help. */
static int wait_slice(struct pd_pool *p, uint64_t deadline_ns)
{
	uint64_t slice = pd_now_ns() + PD_POOL_SLICE_MS * PD_NS_PER_MS;
	int rc = pd_cond_wait_until(&p->shm->cond, &p->shm->lock,
				    slice < deadline_ns ? slice : deadline_ns, repair, p);

	if (rc == -ENOTRECOVERABLE) /* lost to an unusable mutex: wait for its reset */
		rc = pd_pool_lock(p, PD_POOL_OWNER_NONE, deadline_ns) < 0 ? -ENOLCK : 0;
	if (rc == -ETIMEDOUT && slice < deadline_ns)
		return 0;
	return rc > 0 ? 0 : rc;
}

/* The caller's check, run without the pool lock (it may make a syscall). */
static int still_wanted(struct pd_pool *p, const struct pd_pool_who *who)
{
	int rc, lrc;

	if (!who->check)
		return 0;
	pd_mutex_unlock(&p->shm->lock);
	rc = who->check(who->check_ctx);
	lrc = pd_pool_lock(p, who->owner, pd_deadline_ms(PD_POOL_LOCK_MS));
	if (lrc < 0)
		return lrc == -ENOTRECOVERABLE ? lrc : -ENOLCK; /* lock lost */
	return rc < 0 ? rc : 0;
}

static int wait_and_take(struct pd_pool *p, const struct pd_pool_who *who, uint32_t n,
			 uint64_t deadline_ns, pd_slot_ref *out)
{
	struct pd_pool_shm *s = p->shm;
	struct pd_pool_waiter *w = waiter_add(s, who, n);
	uint64_t t0 = pd_now_ns(), ticket;
	int rc = 0;

	if (!w) {
		pd_stat_add(&s->stats.refused, 1);
		return -EAGAIN;
	}
	ticket = w->ticket;
	pd_stat_add1w(&s->stats.waits, 1);
	for (;;) {
		if (w->ticket != ticket) { /* dropped (not running), or overwritten: again */
			w = waiter_add(s, who, n);
			if (!w) {
				rc = -EAGAIN;
				break;
			}
			ticket = w->ticket;
		}
		if (w->cancelled) {
			rc = -ECANCELED;
			break;
		}
		if (my_turn(s, ticket, n)) {
			rc = take(p, who, n, out);
			break;
		}
		if (rc == -ETIMEDOUT)
			break;
		rc = wait_slice(p, deadline_ns);
		if (pd_sync_lost(rc))
			return rc; /* mutex not held: leave the entry to repair */
		set_holder(s, who->owner);
		if (w->ticket == ticket)
			w->seen_ns = pd_now_ns(); /* running: not to be passed over */
		if (rc == 0)
			rc = still_wanted(p, who);
		if (pd_sync_lost(rc))
			return rc;
		if (rc < 0 && rc != -ETIMEDOUT)
			break;
	}
	if (w && w->ticket == ticket)
		waiter_del(s, w);
	account_wait(s, t0, rc);
	wake_waiters(s); /* the next head may now proceed */
	return rc;
}

int pd_pool_alloc(struct pd_pool *p, const struct pd_pool_who *who, uint32_t n,
		  uint64_t deadline_ns, pd_slot_ref *out)
{
	struct pd_pool_shm *s;
	int rc;

	if (!p || !who || !out || n == 0 || who->state == PD_SLOT_FREE ||
	    who->state > PD_SLOT_STATE_MAX)
		return -EINVAL;
	s = p->shm;
	if (n > p->nslots) {
		pd_stat_add(&s->stats.refused, 1);
		return -E2BIG;
	}
	rc = deadline_ns ? pd_pool_lock(p, who->owner, deadline_ns) : lock_short(p, who->owner);
	if (rc < 0) {
		if (rc == -ETIMEDOUT)
			pd_stat_add(&s->stats.timeouts, 1);
		return rc;
	}
	if (s->nwaiters && s->nfree >= n)
		drop_dead_ahead(s, UINT64_MAX); /* a queue of dead waiters blocks no one */
	if (s->nfree >= n && (s->nwaiters == 0 || is_head(s, UINT64_MAX))) {
		rc = take(p, who, n, out); /* nobody waits, or only waiters not running */
	} else if (deadline_ns == 0) {
		pd_stat_add(&s->stats.refused, 1);
		rc = -ENOBUFS;
	} else {
		rc = wait_and_take(p, who, n, deadline_ns, out);
		if (pd_sync_lost(rc)) /* not had back by the deadline: it is one */
			return pd_now_ns() >= deadline_ns ? -ETIMEDOUT : rc;
	}
	pd_pool_unlock(p);
	return rc;
}

/* ---- free, hand-over, cancel, reclaim ---------------------------------------- */

static void unmark(struct pd_pool *p, const pd_slot_ref *refs, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct pd_slot_desc *d = &p->desc[pd_pool_lidx(p, refs[i])];

		slot_set_state(d, slot_state(d) & ~STATE_MARK);
	}
}

/* Every ref live and none twice: each is marked as it is checked. On
 * success the caller's pass overwrites the marked states; on failure the
 * marks are removed here and nothing changed. */
static int check_refs(struct pd_pool *p, const pd_slot_ref *refs, uint32_t n)
{
	struct pd_slot_desc *desc = p->desc;
	uint32_t nslots = p->nslots;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t idx = pd_pool_lidx(p, refs[i]), st;

		if (idx >= nslots || desc[idx].gen != PD_SLOT_REF_GEN(refs[i]) ||
		    (st = slot_state(&desc[idx])) == PD_SLOT_FREE || (st & STATE_MARK)) {
			unmark(p, refs, i);
			return -ESTALE;
		}
		slot_set_state(&desc[idx], st | STATE_MARK);
	}
	return 0;
}

/* Free checked refs (n <= nslots): state FREE, onto the stack. The free
 * count is read from shm: one that leaves no room for them is corrupt, and
 * the stack is rebuilt from the descriptors instead of written past. */
static void push_free(struct pd_pool *p, const pd_slot_ref *refs, uint32_t n)
{
	struct pd_slot_desc *desc = p->desc;
	uint32_t *stack = p->free_stack, nfree = p->shm->nfree;

	for (uint32_t i = 0; i < n; i++)
		slot_set_state(&desc[pd_pool_lidx(p, refs[i])], PD_SLOT_FREE);
	if (nfree > p->nslots - n) {
		PD_LOG_RL(ERR, slot, "pool free count corrupt; rebuilding");
		rebuild(p);
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		stack[nfree++] = pd_pool_lidx(p, refs[i]);
	p->shm->nfree = nfree;
}

int pd_pool_free(struct pd_pool *p, const pd_slot_ref *refs, uint32_t n)
{
	struct pd_pool_shm *s;
	int rc;

	if (!p || !refs || n > p->nslots)
		return -EINVAL;
	s = p->shm;
	rc = lock_short(p, PD_POOL_OWNER_NONE);
	if (rc < 0)
		return rc;
	rc = check_refs(p, refs, n);
	if (rc == 0) {
		push_free(p, refs, n);
		pd_stat_set(&s->stats.in_use, p->nslots - s->nfree);
		pd_stat_add1w(&s->stats.frees, n);
		wake_waiters(s);
	}
	pd_pool_unlock(p);
	return rc;
}

int pd_pool_set_state(struct pd_pool *p, const pd_slot_ref *refs, uint32_t n, uint32_t owner,
		      uint32_t state)
{
	int rc;

	if (!p || !refs || n > p->nslots || state == PD_SLOT_FREE || state > PD_SLOT_STATE_MAX)
		return -EINVAL;
	rc = lock_short(p, owner);
	if (rc < 0)
		return rc;
	rc = check_refs(p, refs, n);
	for (uint32_t i = 0; rc == 0 && i < n; i++) {
		struct pd_slot_desc *d = &p->desc[pd_pool_lidx(p, refs[i])];

		d->owner = owner;
		d->pid = pd_self_pid();
		d->pidns = pd_self_pidns();
		slot_set_state(d, state);
	}
	pd_pool_unlock(p);
	return rc;
}

int pd_pool_cancel(struct pd_pool *p, uint64_t tag)
{
	int rc, n = 0;

	if (!p)
		return -EINVAL;
	rc = lock_short(p, PD_POOL_OWNER_NONE);
	if (rc < 0)
		return rc;
	for (uint32_t i = 0; i < PD_POOL_MAX_WAITERS; i++) {
		struct pd_pool_waiter *w = &p->shm->waiters[i];

		if (w->ticket && w->tag == tag && !w->cancelled) {
			w->cancelled = 1;
			n++;
		}
	}
	wake_waiters(p->shm);
	pd_pool_unlock(p);
	return n;
}

int pd_pool_reclaim(struct pd_pool *p, uint32_t owner)
{
	return pd_pool_reclaim_proc(p, owner, 0, 0);
}

int pd_pool_reclaim_proc(struct pd_pool *p, uint32_t owner, int32_t pid, uint32_t pidns)
{
	uint32_t n;
	int rc;

	if (!p || owner == 0)
		return -EINVAL;
	rc = lock_short(p, PD_POOL_OWNER_NONE);
	if (rc < 0)
		return rc;
	n = free_owned(p, owner, pid, pidns);
	rebuild(p);
	pd_stat_add1w(&p->shm->stats.reclaimed, n);
	pd_cond_broadcast(&p->shm->cond);
	pd_pool_unlock(p);
	return (int)n;
}

int pd_pool_reclaim_slot(struct pd_pool *p, pd_slot_ref ref, uint32_t state)
{
	struct pd_slot_desc *d;
	int rc;

	if (!p || pd_pool_lidx(p, ref) >= p->nslots || state == PD_SLOT_FREE)
		return -EINVAL;
	rc = lock_short(p, PD_POOL_OWNER_NONE);
	if (rc < 0)
		return rc;
	d = &p->desc[pd_pool_lidx(p, ref)];
	rc = slot_state(d) == state && d->gen == PD_SLOT_REF_GEN(ref);
	if (rc) {
		slot_set_state(d, PD_SLOT_FREE);
		rebuild(p);
		pd_stat_add1w(&p->shm->stats.reclaimed, 1);
		pd_cond_broadcast(&p->shm->cond);
	}
	pd_pool_unlock(p);
	return rc;
}

int pd_pool_lock_check(struct pd_pool *p, uint32_t timeout_ms, int32_t *holder,
		       uint32_t *holder_ns)
{
	int rc;

	if (!p || !holder || !holder_ns)
		return -EINVAL;
	*holder = 0;
	*holder_ns = 0;
	rc = pd_mutex_lock_timeout(&p->shm->lock, timeout_ms, repair, p);
	if (rc >= 0) {
		pd_pool_unlock(p);
		return 0;
	}
	if (rc == -ETIMEDOUT) {
		*holder = p->shm->lock_pid;
		*holder_ns = p->shm->lock_pidns;
	}
	return rc;
}

/* Make the mutex and condvar new, take the mutex, rebuild the pool from
 * the descriptors; the mutex stays held. */
static int reset_locked(struct pd_pool *p)
{
	struct pd_pool_shm *s = p->shm;
	int rc = pd_mutex_init(&s->lock);

	if (rc == 0) {
		pd_mutex_wake_all(&s->lock); /* those asleep on the old word try the new one */
		rc = pd_cond_init(&s->cond);
	}
	if (rc == 0)
		rc = pd_mutex_lock_timeout(&s->lock, PD_POOL_LOCK_MS, repair, p);
	if (rc < 0)
		return rc;
	rebuild(p);
	p->lock_resets++;
	pd_stat_add1w(&s->stats.repairs, 1);
	PD_LOG_RL(WARN, slot, "pool mutex unusable: made new, pool rebuilt");
	pd_cond_broadcast(&s->cond);
	return 0;
}

int pd_pool_scrub(struct pd_pool *p)
{
	uint32_t bad = 0;
	int rc;

	if (!p)
		return -EINVAL;
	rc = lock_short(p, PD_POOL_OWNER_NONE);
	if (rc < 0)
		return rc;
	/* Counted under the lock: a free in flight marks its states for a
	 * moment (STATE_MARK), which a look without the lock would take for
	 * garbage. */
	for (uint32_t i = 0; i < p->nslots; i++)
		bad += slot_state(&p->desc[i]) > PD_SLOT_STATE_MAX;
	if (bad) {
		rebuild(p); /* a descriptor in no state is free, at a new generation */
		pd_stat_add1w(&p->shm->stats.repairs, 1);
		pd_cond_broadcast(&p->shm->cond);
	}
	pd_pool_unlock(p);
	return (int)bad;
}

int pd_pool_lock_reset(struct pd_pool *p)
{
	int rc;

	if (!p)
		return -EINVAL;
	rc = reset_locked(p);
	if (rc >= 0)
		pd_pool_unlock(p);
	return rc < 0 ? rc : 0;
}

/* Under the lock: make descriptor i say t. @return 1 when it did not. */
static int resync_one(struct pd_pool *p, uint32_t i, uint32_t owner, const struct pd_slot_truth *t)
{
	struct pd_slot_desc *d = &p->desc[i];
	int off = slot_state(d) != t->state;

	if (t->state != PD_SLOT_FREE) {
		off |= d->gen != t->gen || d->owner != owner;
		d->gen = t->gen;
		d->owner = owner;
		d->pid = pd_self_pid();
		d->pidns = pd_self_pidns();
	}
	slot_set_state(d, t->state);
	return off;
}

int pd_pool_resync(struct pd_pool *p, uint32_t owner,
		   void (*truth)(void *ctx, uint32_t idx, struct pd_slot_truth *t), void *ctx)
{
	struct pd_pool_shm *s;
	int rc, n = 0;

	if (!p || !truth)
		return -EINVAL;
	s = p->shm;
	rc = lock_short(p, owner);
	if (rc < 0)
		return rc;
	for (uint32_t i = 0; i < p->nslots; i++) {
		struct pd_slot_truth t = { .state = PD_SLOT_FREE };

		truth(ctx, i + p->base, &t);
		n += resync_one(p, i, owner, &t);
	}
	for (uint32_t i = 0; i < PD_POOL_MAX_WAITERS; i++) {
		n += s->waiters[i].ticket != 0;
		s->waiters[i] = (struct pd_pool_waiter){ 0 };
	}
	n += s->nwaiters != 0;
	rebuild(p);
	pd_pool_unlock(p);
	return n;
}
