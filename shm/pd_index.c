/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <sched.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "pd_index.h"
#include "pd_log.h"
#include "pd_time.h"

/* GCC's TSan has no thread fences; the hazard protocol is checked across
 * processes (tests/unit/test_index_mp.c), where TSan does not look anyway. */
#ifdef __SANITIZE_THREAD__
#define IX_FENCE(order) __atomic_signal_fence(order)
#else
#define IX_FENCE(order) __atomic_thread_fence(order)
#endif

int64_t pd_index_memsize(uint32_t nbuckets)
{
	if (!PD_IS_POW2(nbuckets) || nbuckets > PD_INDEX_MAX_BUCKETS)
		return -EINVAL;
	return (int64_t)(sizeof(struct pd_index_shm) +
			 (uint64_t)nbuckets * sizeof(struct pd_index_entry));
}

int pd_index_init(void *mem, size_t len, uint32_t nbuckets, uint32_t max_probe, uint64_t seed)
{
	struct pd_index_shm *s = mem;
	int64_t need = pd_index_memsize(nbuckets);
	int rc;

	if (!mem || need < 0 || max_probe == 0 || max_probe > nbuckets ||
	    (uintptr_t)mem % PD_CACHE_LINE)
		return -EINVAL;
	if ((uint64_t)need > len)
		return -ENOSPC;
	memset(s, 0, (size_t)need);
	s->nbuckets = nbuckets;
	s->max_probe = max_probe;
	s->seed = seed;
	rc = pd_mutex_init(&s->lock);
	if (rc < 0)
		return rc;
	s->magic = PD_INDEX_MAGIC;
	return 0;
}

int pd_index_open(struct pd_index *ix, void *mem, size_t len)
{
	struct pd_index_shm *s = mem;
	uint32_t nbuckets, max_probe;
	int64_t need;

	if (!ix || !mem)
		return -EINVAL;
	if (len < sizeof(*s) || (uintptr_t)mem % PD_CACHE_LINE)
		return -EPROTO;
	nbuckets = s->nbuckets;
	max_probe = s->max_probe;
	need = pd_index_memsize(nbuckets);
	if (s->magic != PD_INDEX_MAGIC || need < 0 || (uint64_t)need > len || max_probe == 0 ||
	    max_probe > nbuckets)
		return -EPROTO;
	*ix = (struct pd_index){ .shm = s, .entries = s->entries, .seed = s->seed,
				 .mask = nbuckets - 1, .max_probe = max_probe };
	return 0;
}

uint32_t pd_index_count(const struct pd_index *ix)
{
	return ix ? ix->shm->count : 0;
}

void pd_index_set_journals(struct pd_index *ix, const struct pd_index_journals *j)
{
	if (ix)
		ix->hz = j ? *j : (struct pd_index_journals){ 0 };
}

/* ---- the sequence word ------------------------------------------------------- */

static uint32_t seq_of(const struct pd_index_entry *e)
{
	return atomic_load_explicit(&e->seq, memory_order_acquire);
}

/* Writer: seq odd before the entry's fields change. */
static void write_begin(struct pd_index_entry *e)
{
	uint32_t s = atomic_load_explicit(&e->seq, memory_order_relaxed);

	atomic_store_explicit(&e->seq, s | 1u, memory_order_seq_cst);
	IX_FENCE(memory_order_release);
}

/* Writer: seq even, past every value it had, once the fields are in place. */
static void write_end(struct pd_index_entry *e)
{
	uint32_t s = atomic_load_explicit(&e->seq, memory_order_relaxed);

	atomic_store_explicit(&e->seq, (s | 1u) + 1, memory_order_seq_cst);
}

/* ---- locking and repair ------------------------------------------------------ */

/* An entry a dead holder left mid-write (odd seq): a live one may be half
 * written, so it is retired (its last sound incarnation is seq - 2 once
 * even, as for every retired entry); seq then made even. */
static void repair_entry(struct pd_index_entry *e)
{
	uint32_t s = atomic_load_explicit(&e->seq, memory_order_relaxed);

	if (e->state > PD_INDEX_RETIRED)
		e->state = PD_INDEX_DELETED;
	if (!(s & 1u))
		return;
	if (e->state == PD_INDEX_PENDING || e->state == PD_INDEX_COMMITTED)
		e->state = PD_INDEX_RETIRED;
	write_end(e);
}

/* After a holder died: entries become live only by their state word, stored
 * last, so they are consistent; rebuild the counts from them. */
static int repair(void *ctx)
{
	struct pd_index *ix = ctx;
	uint32_t live = 0, dead = 0, retired = 0;

	for (uint32_t i = 0; i <= ix->mask; i++) {
		struct pd_index_entry *e = &ix->entries[i];

		repair_entry(e);
		live += e->state == PD_INDEX_PENDING || e->state == PD_INDEX_COMMITTED;
		dead += e->state == PD_INDEX_DELETED;
		retired += e->state == PD_INDEX_RETIRED;
	}
	ix->shm->count = live;
	ix->shm->tombstones = dead;
	ix->shm->retired = retired;
	pd_stat_add1w(&ix->shm->stats.repairs, 1);
	return 0;
}

static int lock(struct pd_index *ix)
{
	int rc = pd_mutex_lock_timeout(&ix->shm->lock, PD_INDEX_LOCK_MS, repair, ix);

	return rc < 0 ? rc : 0;
}

static void unlock(struct pd_index *ix)
{
	pd_mutex_unlock(&ix->shm->lock);
}

/* ---- probing ----------------------------------------------------------------- */

static int live(const struct pd_index_entry *e)
{
	return e->state == PD_INDEX_PENDING || e->state == PD_INDEX_COMMITTED;
}

static int reusable(const struct pd_index_entry *e)
{
	return e->state == PD_INDEX_FREE || e->state == PD_INDEX_DELETED;
}

static int key_match(const struct pd_index_entry *e, uint64_t h, const void *key,
		     uint32_t klen)
{
	return e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0;
}

static int key_eq(const struct pd_index_entry *e, uint64_t h, const void *key, uint32_t klen)
{
	return live(e) && key_match(e, h, key, klen);
}

/* Find key: its bucket, or -ENOENT; *slot_out gets the first reusable
 * bucket (free or tombstone) in the probe window, or -1. */
static int64_t probe(struct pd_index *ix, uint64_t h, const void *key, uint32_t klen,
		     int64_t *slot_out)
{
	int64_t reuse = -1;

	for (uint32_t i = 0; i < ix->max_probe; i++) {
		uint32_t b = (uint32_t)(h + i) & ix->mask;
		struct pd_index_entry *e = &ix->entries[b];

		if (key_eq(e, h, key, klen))
			return b;
		if (reusable(e) && reuse < 0)
			reuse = b;
		if (e->state == PD_INDEX_FREE)
			break; /* the key would have been placed here or before */
	}
	if (slot_out)
		*slot_out = reuse;
	return -ENOENT;
}

static int key_ok(const void *key, uint32_t klen)
{
	return key && klen > 0 && klen <= PD_KEY_MAX;
}

static void fill_val(const struct pd_index_entry *e, struct pd_index_val *out)
{
	if (!out)
		return;
	*out = (struct pd_index_val){ .req = e->req, .slot = e->slot, .gen = e->gen,
				      .len = e->len, .state = e->state };
}

/* Lock, find key; on success the lock is held and *e points at its entry. */
static int find_locked(struct pd_index *ix, const void *key, uint32_t klen,
		       struct pd_index_entry **e)
{
	uint64_t h;
	int64_t b;
	int rc;

	if (!ix || !key_ok(key, klen))
		return -EINVAL;
	h = XXH3_64bits_withSeed(key, klen, ix->seed);
	rc = lock(ix);
	if (rc < 0)
		return rc;
	pd_stat_add1w(&ix->shm->stats.lookups, 1);
	b = probe(ix, h, key, klen, NULL);
	if (b < 0) {
		pd_stat_add1w(&ix->shm->stats.misses, 1);
		unlock(ix);
		return -ENOENT;
	}
	*e = &ix->entries[b];
	return 0;
}

/* ---- broker operations ------------------------------------------------------- */

static void store_state(struct pd_index_entry *e, uint32_t state)
{
	/* Release: the entry's fields are in memory before it becomes live,
	 * so a holder killed half-way leaves no half-written live entry. */
	__atomic_store_n(&e->state, state, __ATOMIC_RELEASE);
}

/* Fill a reusable bucket (never its state word before the rest: a
 * tombstone stays one until store_state(), so a holder killed here does
 * not end the probe run of the keys after it). */
static void fill_entry(struct pd_index_entry *e, uint64_t h, const void *key, uint32_t klen,
		       const struct pd_index_val *v)
{
	write_begin(e);
	e->hash = h;
	e->req = v->req;
	e->slot = v->slot;
	e->gen = v->gen;
	e->len = v->len;
	e->klen = (uint16_t)klen;
	memcpy(e->key, key, klen);
	store_state(e, v->state);
	write_end(e);
}

int pd_index_insert(struct pd_index *ix, const void *key, uint32_t klen,
		    const struct pd_index_val *v)
{
	struct pd_index_entry *e;
	int64_t b, reuse = -1;
	uint64_t h;
	int rc;

	if (!ix || !v || !key_ok(key, klen) ||
	    (v->state != PD_INDEX_PENDING && v->state != PD_INDEX_COMMITTED))
		return -EINVAL;
	h = XXH3_64bits_withSeed(key, klen, ix->seed);
	rc = lock(ix);
	if (rc < 0)
		return rc;
	b = probe(ix, h, key, klen, &reuse);
	if (b >= 0 || reuse < 0) {
		rc = b >= 0 ? -EEXIST : -ENOSPC;
		pd_stat_add1w(b >= 0 ? &ix->shm->stats.dups : &ix->shm->stats.full, 1);
		unlock(ix);
		return rc;
	}
	e = &ix->entries[reuse];
	if (e->state == PD_INDEX_DELETED)
		ix->shm->tombstones--;
	fill_entry(e, h, key, klen, v);
	ix->shm->count++;
	pd_stat_add1w(&ix->shm->stats.inserts, 1);
	unlock(ix);
	return 0;
}

int pd_index_lookup(struct pd_index *ix, const void *key, uint32_t klen,
		    struct pd_index_val *out)
{
	struct pd_index_entry *e;
	int rc = find_locked(ix, key, klen, &e);

	if (rc < 0)
		return rc;
	fill_val(e, out);
	unlock(ix);
	return 0;
}

int pd_index_commit(struct pd_index *ix, const void *key, uint32_t klen, uint32_t len)
{
	struct pd_index_entry *e;
	int rc = find_locked(ix, key, klen, &e);

	if (rc < 0)
		return rc;
	if (e->state != PD_INDEX_PENDING) {
		rc = -EINVAL;
	} else {
		write_begin(e);
		e->len = len;
		store_state(e, PD_INDEX_COMMITTED);
		write_end(e);
	}
	unlock(ix);
	return rc;
}

/* A tombstone followed by a free bucket ends no probe run: free it, and
 * the tombstones before it in turn. */
static void sweep(struct pd_index *ix, uint32_t b)
{
	for (uint32_t n = 0; n <= ix->mask; n++) {
		struct pd_index_entry *e = &ix->entries[b];

		if (e->state != PD_INDEX_DELETED ||
		    ix->entries[(b + 1) & ix->mask].state != PD_INDEX_FREE)
			return;
		write_begin(e);
		store_state(e, PD_INDEX_FREE);
		write_end(e);
		ix->shm->tombstones--;
		b = (b - 1) & ix->mask;
	}
}

/* ---- removal and the hazard scan --------------------------------------------- */

static int journal_owned(const struct pd_index_journals *j, uint32_t n)
{
	const _Atomic uint32_t *w;

	if (!j->owner)
		return 1;
	w = (const _Atomic uint32_t *)((uintptr_t)j->owner + (uintptr_t)n * j->owner_stride);
	return atomic_load_explicit(w, memory_order_relaxed) != 0;
}

/* Does any journal cell hold rec? Free agent slots are skipped. */
static int hazard_named(const struct pd_index *ix, uint64_t rec)
{
	const struct pd_index_journals *j = &ix->hz;

	for (uint32_t n = 0; j->cells && n < j->njournals; n++) {
		const _Atomic uint64_t *c = j->cells + (size_t)n * j->ncells;

		if (!journal_owned(j, n))
			continue;
		for (uint32_t i = 0; i < j->ncells; i++)
			if (atomic_load_explicit(&c[i], memory_order_relaxed) == rec)
				return 1;
	}
	return 0;
}

/* Live -> retired: no longer found, bucket kept. The store of the new seq
 * and the fence after it pair with the pin's hazard store and fence: either
 * the scan that follows sees the hazard, or the pin sees seq changed. */
static void retire(struct pd_index *ix, struct pd_index_entry *e)
{
	write_begin(e);
	store_state(e, PD_INDEX_RETIRED);
	write_end(e);
	IX_FENCE(memory_order_seq_cst);
	ix->shm->count--;
	ix->shm->retired++;
}

/* Retired -> tombstone, unless a hazard still names its last live
 * incarnation (seq - 2: retiring bumped seq once). 0 or -EBUSY. */
static int try_free(struct pd_index *ix, struct pd_index_entry *e)
{
	uint32_t b = (uint32_t)(e - ix->entries);
	uint32_t s = atomic_load_explicit(&e->seq, memory_order_relaxed);

	if (hazard_named(ix, PD_INDEX_HAZARD(b, s - 2))) {
		pd_stat_add1w(&ix->shm->stats.busy, 1);
		return -EBUSY;
	}
	write_begin(e);
	store_state(e, PD_INDEX_DELETED);
	write_end(e);
	ix->shm->retired--;
	ix->shm->tombstones++;
	pd_stat_add1w(&ix->shm->stats.removes, 1);
	sweep(ix, b);
	return 0;
}

struct rm_want {
	int any;       /* else only the entry of slot and gen */
	uint32_t slot, gen;
};

static int rm_match(const struct pd_index_entry *e, uint64_t h, const void *key,
		    uint32_t klen, const struct rm_want *w)
{
	if (!live(e) && e->state != PD_INDEX_RETIRED)
		return 0;
	return key_match(e, h, key, klen) && (w->any || (e->slot == w->slot && e->gen == w->gen));
}

/* The entry to remove: a retired match first, else a live one; or NULL. */
static struct pd_index_entry *rm_find(struct pd_index *ix, uint64_t h, const void *key,
				      uint32_t klen, const struct rm_want *w)
{
	struct pd_index_entry *found = NULL;

	for (uint32_t i = 0; i < ix->max_probe; i++) {
		struct pd_index_entry *e = &ix->entries[(uint32_t)(h + i) & ix->mask];

		if (rm_match(e, h, key, klen, w)) {
			if (e->state == PD_INDEX_RETIRED)
				return e;
			found = found ? found : e;
		}
		if (e->state == PD_INDEX_FREE)
			break;
	}
	return found;
}

static int remove_where(struct pd_index *ix, const void *key, uint32_t klen,
			const struct rm_want *w)
{
	struct pd_index_entry *e;
	uint64_t h;
	int rc;

	if (!ix || !key_ok(key, klen))
		return -EINVAL;
	h = XXH3_64bits_withSeed(key, klen, ix->seed);
	rc = lock(ix);
	if (rc < 0)
		return rc;
	e = rm_find(ix, h, key, klen, w);
	if (!e) {
		rc = -ENOENT;
	} else {
		if (live(e))
			retire(ix, e);
		rc = try_free(ix, e);
	}
	unlock(ix);
	return rc;
}

int pd_index_remove(struct pd_index *ix, const void *key, uint32_t klen)
{
	const struct rm_want w = { .any = 1 };

	return remove_where(ix, key, klen, &w);
}

int pd_index_remove_chunk(struct pd_index *ix, const void *key, uint32_t klen, uint32_t slot,
			  uint32_t gen)
{
	const struct rm_want w = { .slot = slot, .gen = gen };

	return remove_where(ix, key, klen, &w);
}

/* ---- agent pins (lock-free, read-only) --------------------------------------- */

/* What an optimistic read of one bucket saw. */
enum peek { PEEK_RETRY, PEEK_END, PEEK_NEXT, PEEK_HIT, PEEK_NOT_COMMITTED };

/* Read bucket b as of seq *s1 (even), checked against a re-read of seq. */
static enum peek peek(const struct pd_index_entry *e, uint64_t h, const void *key,
		      uint32_t klen, uint32_t *s1, struct pd_index_val *out)
{
	uint32_t state, eklen;
	int hit;

	*s1 = seq_of(e);
	if (*s1 & 1u)
		return PEEK_RETRY;
	state = __atomic_load_n(&e->state, __ATOMIC_RELAXED);
	eklen = e->klen;
	hit = (state == PD_INDEX_PENDING || state == PD_INDEX_COMMITTED) && e->hash == h &&
	      eklen == klen && memcmp(e->key, key, klen) == 0;
	if (hit)
		*out = (struct pd_index_val){ .req = e->req, .slot = e->slot, .gen = e->gen,
					      .len = e->len, .state = state };
	IX_FENCE(memory_order_acquire);
	if (atomic_load_explicit(&e->seq, memory_order_relaxed) != *s1)
		return PEEK_RETRY;
	if (hit)
		return state == PD_INDEX_COMMITTED ? PEEK_HIT : PEEK_NOT_COMMITTED;
	return state == PD_INDEX_FREE ? PEEK_END : PEEK_NEXT;
}

/* One optimistic probe: the key's bucket with *s1 and *out; -ENOENT;
 * -EAGAIN a bucket changed under the read. */
static int64_t peek_probe(const struct pd_index *ix, uint64_t h, const void *key,
			  uint32_t klen, uint32_t *s1, struct pd_index_val *out)
{
	for (uint32_t i = 0; i < ix->max_probe; i++) {
		uint32_t b = (uint32_t)(h + i) & ix->mask;

		switch (peek(&ix->entries[b], h, key, klen, s1, out)) {
		case PEEK_RETRY:
			return -EAGAIN;
		case PEEK_HIT:
			return b;
		case PEEK_END:
		case PEEK_NOT_COMMITTED:
			return -ENOENT;
		case PEEK_NEXT:
			break;
		}
	}
	return -ENOENT;
}

/* Publish the hazard, then check the entry is still the one read: the
 * seq_cst store and fence pair with retire()'s. 0, or -EAGAIN (cell emptied). */
static int publish(const struct pd_index_entry *e, _Atomic uint64_t *cell, uint64_t rec,
		   uint32_t s1)
{
	atomic_store_explicit(cell, rec, memory_order_seq_cst);
	IX_FENCE(memory_order_seq_cst);
	if (atomic_load_explicit(&e->seq, memory_order_seq_cst) == s1)
		return 0;
	atomic_store_explicit(cell, 0, memory_order_release);
	return -EAGAIN;
}

int pd_index_pin(const struct pd_index *ix, const void *key, uint32_t klen,
		 struct pd_index_val *out, _Atomic uint64_t *cell)
{
	uint64_t h;

	if (!ix || !key_ok(key, klen) || !out || !cell)
		return -EINVAL;
	if (atomic_load_explicit(cell, memory_order_relaxed) != 0)
		return -EBUSY;
	h = XXH3_64bits_withSeed(key, klen, ix->seed);
	for (uint32_t t = 0; t < PD_INDEX_PIN_TRIES; t++) {
		uint32_t s1 = 0;
		int64_t b = peek_probe(ix, h, key, klen, &s1, out);

		if (b == -EAGAIN && t >= PD_INDEX_PIN_TRIES / 8)
			(void)sched_yield(); /* the broker may be off its CPU mid-write */
		if (b == -ENOENT)
			return -ENOENT;
		if (b < 0)
			continue;
		out->hazard = PD_INDEX_HAZARD(b, s1);
		if (publish(&ix->entries[b], cell, out->hazard, s1) == 0)
			return 0;
	}
	return -EAGAIN;
}

int pd_index_unpin(_Atomic uint64_t *cell, uint64_t rec)
{
	if (!cell || rec == 0)
		return -EINVAL;
	return atomic_compare_exchange_strong_explicit(cell, &rec, 0, memory_order_acq_rel,
						       memory_order_relaxed) ? 0 : -ESTALE;
}
