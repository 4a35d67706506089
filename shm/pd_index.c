/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "pd_index.h"
#include "pd_log.h"
#include "pd_time.h"

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

/* ---- locking and repair ------------------------------------------------------ */

/* After a holder died: entries become live only by their state word, stored
 * last, so they are consistent; rebuild the counts from them. */
static int repair(void *ctx)
{
	struct pd_index *ix = ctx;
	uint32_t live = 0, dead = 0;

	for (uint32_t i = 0; i <= ix->mask; i++) {
		struct pd_index_entry *e = &ix->entries[i];

		if (e->state > PD_INDEX_DELETED)
			e->state = PD_INDEX_DELETED;
		live += e->state == PD_INDEX_PENDING || e->state == PD_INDEX_COMMITTED;
		dead += e->state == PD_INDEX_DELETED;
	}
	ix->shm->count = live;
	ix->shm->tombstones = dead;
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

static int key_eq(const struct pd_index_entry *e, uint64_t h, const void *key, uint32_t klen)
{
	return live(e) && e->hash == h && e->klen == klen && memcmp(e->key, key, klen) == 0;
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
		if (!live(e) && reuse < 0)
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
				      .len = e->len, .state = e->state,
				      .refcount = e->refcount };
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

/* ---- operations -------------------------------------------------------------- */

static void store_state(struct pd_index_entry *e, uint32_t state)
{
	/* Release: the entry's fields are in memory before it becomes live,
	 * so a holder killed half-way leaves no half-written live entry. */
	__atomic_store_n(&e->state, state, __ATOMIC_RELEASE);
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
	/* Field by field, never the state word: a tombstone stays one until
	 * store_state(), so a holder killed here does not end the probe run
	 * of the keys after it. */
	e->refcount = 0;
	e->hash = h;
	e->req = v->req;
	e->slot = v->slot;
	e->gen = v->gen;
	e->len = v->len;
	e->klen = (uint16_t)klen;
	memcpy(e->key, key, klen);
	store_state(e, v->state);
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

int pd_index_pin(struct pd_index *ix, const void *key, uint32_t klen,
		 struct pd_index_val *out)
{
	struct pd_index_entry *e;
	int rc = find_locked(ix, key, klen, &e);

	if (rc < 0)
		return rc;
	if (e->refcount >= INT32_MAX) {
		rc = -EOVERFLOW;
	} else {
		rc = (int)++e->refcount;
		fill_val(e, out);
	}
	unlock(ix);
	return rc;
}

int pd_index_unpin(struct pd_index *ix, const void *key, uint32_t klen)
{
	struct pd_index_entry *e;
	int rc = find_locked(ix, key, klen, &e);

	if (rc < 0)
		return rc;
	rc = e->refcount == 0 ? -EINVAL : (int)--e->refcount;
	unlock(ix);
	return rc;
}

int pd_index_pin_rec(struct pd_index *ix, const void *key, uint32_t klen,
		     struct pd_index_val *out, _Atomic uint32_t *cell)
{
	struct pd_index_entry *e;
	int rc;

	if (!cell)
		return -EINVAL;
	rc = find_locked(ix, key, klen, &e);
	if (rc < 0)
		return rc;
	if (atomic_load_explicit(cell, memory_order_relaxed) != 0) {
		rc = -EBUSY; /* would overwrite a record: that pin would leak */
	} else if (e->refcount >= INT32_MAX) {
		rc = -EOVERFLOW;
	} else {
		rc = (int)++e->refcount;
		fill_val(e, out);
		/* Pin first, then record (a death in between leaks one pin). */
		atomic_store_explicit(cell, (uint32_t)(e - ix->entries) + 1,
				      memory_order_release);
	}
	unlock(ix);
	return rc;
}

int pd_index_unpin_rec(struct pd_index *ix, const void *key, uint32_t klen,
		       _Atomic uint32_t *cell)
{
	struct pd_index_entry *e;
	uint32_t rec;
	int rc;

	if (!cell)
		return -EINVAL;
	rc = find_locked(ix, key, klen, &e);
	if (rc < 0)
		return rc;
	rec = (uint32_t)(e - ix->entries) + 1;
	/* Take the record first, then drop the pin (a death in between leaks
	 * it). The exchange pairs with the broker's in pd_layout_pins_reclaim():
	 * exactly one of us takes a given record, and only the taker unpins. */
	if (!atomic_compare_exchange_strong_explicit(cell, &rec, 0, memory_order_acq_rel,
						     memory_order_relaxed))
		rc = -ESTALE;
	else
		rc = e->refcount == 0 ? -EINVAL : (int)--e->refcount;
	unlock(ix);
	return rc;
}

int pd_index_unpin_bucket(struct pd_index *ix, uint32_t bucket)
{
	struct pd_index_entry *e;
	int rc;

	if (!ix || bucket > ix->mask)
		return -EINVAL;
	rc = lock(ix);
	if (rc < 0)
		return rc;
	e = &ix->entries[bucket];
	if (!live(e) || e->refcount == 0)
		rc = -ENOENT;
	else
		e->refcount--;
	unlock(ix);
	return rc;
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
		e->len = len;
		store_state(e, PD_INDEX_COMMITTED);
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
		e->state = PD_INDEX_FREE;
		ix->shm->tombstones--;
		b = (b - 1) & ix->mask;
	}
}

int pd_index_remove(struct pd_index *ix, const void *key, uint32_t klen)
{
	struct pd_index_entry *e;
	int rc = find_locked(ix, key, klen, &e);

	if (rc < 0)
		return rc;
	if (e->refcount) {
		rc = -EBUSY;
	} else {
		store_state(e, PD_INDEX_DELETED);
		ix->shm->count--;
		ix->shm->tombstones++;
		pd_stat_add1w(&ix->shm->stats.removes, 1);
		sweep(ix, (uint32_t)(e - ix->entries));
	}
	unlock(ix);
	return rc;
}
