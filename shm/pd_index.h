/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_INDEX_H
#define PD_SHM_PD_INDEX_H

/*
 * Recv index: a hash table in shared memory mapping a chunk key (1..255
 * bytes) to where the chunk lives in the recv pool, so decode agents find
 * chunks without a round trip to the broker.
 *
 * - Open addressing, linear probing bounded by max_probe buckets from the
 *   key's home bucket; a seeded 64-bit hash (xxHash3), the seed chosen by
 *   the broker, so peers cannot aim keys at one bucket run.
 * - Duplicate key: insert fails with -EEXIST and leaves the entry as it was
 *   (the caller pins it instead: dedup).
 * - Full: insert fails with -ENOSPC when no bucket within max_probe of the
 *   home bucket is free, even if the table has room elsewhere.
 * - Removal leaves a tombstone, turned back into a free bucket as soon as
 *   the bucket after it is free. A pinned entry cannot be removed (-EBUSY).
 * - One robust mutex guards the table; on holder death the counters are
 *   rebuilt from the entries (an entry becomes live only by its state word,
 *   written last).
 * - A pinned entry never moves or changes key: insert only fills buckets
 *   that are not live, remove refuses it, the sweep and the repair touch
 *   only tombstones. So a bucket number names the same entry for as long
 *   as a pin on it lasts, and a pin can be recorded by bucket (the agents'
 *   pin journal, pd_layout.h).
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <pdkv/types.h>

#include "pd_compiler.h"
#include "pd_sync.h"

#define PD_INDEX_MAGIC       0x58444e49u /* "INDX" */
#define PD_INDEX_MAX_BUCKETS (1u << 24)
#define PD_INDEX_LOCK_MS     5000u

/* Entry states. */
#define PD_INDEX_FREE      0u
#define PD_INDEX_PENDING   1u /* slot granted, bytes not yet written */
#define PD_INDEX_COMMITTED 2u /* bytes in place */
#define PD_INDEX_DELETED   3u /* tombstone */

struct pd_index_entry {
	uint32_t state;    /* writer: mutex holder; stored last on insert */
	uint32_t refcount; /* writer: mutex holder; pins */
	uint64_t hash;
	uint64_t req;      /* request tag that owns the chunk */
	uint32_t slot;     /* recv pool slot index */
	uint32_t gen;      /* its generation */
	uint32_t len;      /* payload bytes */
	uint16_t klen;
	uint16_t _rsvd;
	uint8_t  key[PD_KEY_MAX];
	uint8_t  _pad[25];
};
_Static_assert(sizeof(struct pd_index_entry) == 320, "index entry ABI");

struct pd_index_counters {
	_Atomic uint64_t inserts;
	_Atomic uint64_t removes;
	_Atomic uint64_t lookups;
	_Atomic uint64_t misses;
	_Atomic uint64_t dups;   /* -EEXIST */
	_Atomic uint64_t full;   /* -ENOSPC */
	_Atomic uint64_t repairs;
};

struct pd_index_shm {
	uint32_t magic;      /* immutable after init; writer: broker */
	uint32_t nbuckets;
	uint32_t max_probe;
	uint32_t _rsvd0;
	uint64_t seed;
	uint8_t  _pad0[PD_CACHE_LINE - 24];

	alignas(PD_CACHE_LINE) struct pd_mutex lock;

	alignas(PD_CACHE_LINE) uint32_t count; /* writer: mutex holder; live entries */
	uint32_t tombstones;                   /* writer: mutex holder */

	alignas(PD_CACHE_LINE) struct pd_index_counters stats;
	alignas(PD_CACHE_LINE) struct pd_index_entry entries[];
};
_Static_assert(offsetof(struct pd_index_shm, lock) == 64, "index ABI");

/* Private, validated handle. */
struct pd_index {
	struct pd_index_shm *shm;
	struct pd_index_entry *entries;
	uint64_t seed;
	uint32_t mask;
	uint32_t max_probe;
};

/* What a key maps to. */
struct pd_index_val {
	uint64_t req;
	uint32_t slot;
	uint32_t gen;
	uint32_t len;
	uint32_t state;    /* PD_INDEX_PENDING or PD_INDEX_COMMITTED */
	uint32_t refcount; /* out only */
};

/* Region bytes; -EINVAL unless nbuckets is a power of two <= the max. */
int64_t pd_index_memsize(uint32_t nbuckets);
/* Broker: initialise. max_probe in [1, nbuckets]. 0, -EINVAL, -ENOSPC. */
int pd_index_init(void *mem, size_t len, uint32_t nbuckets, uint32_t max_probe, uint64_t seed);
/* Check a table read from shm, build a handle. 0, -EINVAL, -EPROTO. */
int pd_index_open(struct pd_index *ix, void *mem, size_t len);

/**
 * Insert key -> *v (v->state PENDING or COMMITTED; refcount starts at 0).
 * @return 0; -EINVAL bad key length or state; -EEXIST key present (entry
 *         unchanged); -ENOSPC no free bucket within max_probe; -ETIMEDOUT.
 */
int pd_index_insert(struct pd_index *ix, const void *key, uint32_t klen,
		    const struct pd_index_val *v);
/* @return 0 and *out; -ENOENT; -EINVAL; -ETIMEDOUT. out may be NULL. */
int pd_index_lookup(struct pd_index *ix, const void *key, uint32_t klen,
		    struct pd_index_val *out);
/* Take a pin. @return the new refcount (>= 1); -ENOENT; -EOVERFLOW; -EINVAL. */
int pd_index_pin(struct pd_index *ix, const void *key, uint32_t klen,
		 struct pd_index_val *out);
/* Drop a pin. @return the remaining refcount; -ENOENT; -EINVAL not pinned. */
int pd_index_unpin(struct pd_index *ix, const void *key, uint32_t klen);
/**
 * Take a pin and record it in a journal cell: both happen under the index
 * mutex, pin first, so a holder killed between them leaks that one pin
 * (never records a pin it does not hold).
 * @param cell  borrowed; must be empty (0); gets the entry's bucket + 1
 * @return the new refcount (>= 1); -ENOENT; -EOVERFLOW; -EINVAL (bad key,
 *         cell NULL); -EBUSY cell not empty (no pin taken); -ETIMEDOUT.
 */
int pd_index_pin_rec(struct pd_index *ix, const void *key, uint32_t klen,
		     struct pd_index_val *out, _Atomic uint32_t *cell);
/**
 * Drop a pin recorded in cell: under the index mutex the cell is emptied
 * (compare-and-exchange from the key's bucket + 1), then the pin dropped,
 * so a holder killed between them leaks the pin rather than dropping it
 * twice.
 * @return the remaining refcount; -ENOENT key absent; -ESTALE cell does
 *         not record a pin on this key (e.g. the broker took it back):
 *         nothing dropped; -EINVAL (bad key, cell NULL, not pinned); -ETIMEDOUT.
 */
int pd_index_unpin_rec(struct pd_index *ix, const void *key, uint32_t klen,
		       _Atomic uint32_t *cell);
/**
 * Broker: drop one pin of the entry in bucket (taken from a dead agent's
 * journal). @return 0; -EINVAL bucket out of range; -ENOENT no live,
 * pinned entry there; -ETIMEDOUT.
 */
int pd_index_unpin_bucket(struct pd_index *ix, uint32_t bucket);
/* PENDING -> COMMITTED with the final length. 0; -ENOENT; -EINVAL not pending. */
int pd_index_commit(struct pd_index *ix, const void *key, uint32_t klen, uint32_t len);
/* @return 0; -ENOENT; -EBUSY pinned (entry kept); -EINVAL. */
int pd_index_remove(struct pd_index *ix, const void *key, uint32_t klen);
/* Live entries (racy snapshot). */
uint32_t pd_index_count(const struct pd_index *ix);

#endif
