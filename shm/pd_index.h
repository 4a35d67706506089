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
 *   the bucket after it is free.
 * - Only the broker writes the table, under one robust mutex; on holder
 *   death the counters are rebuilt from the entries. Agents map it
 *   read-only and never take the mutex.
 * - Each entry has a sequence word (seqlock): odd while the broker changes
 *   the entry, even otherwise, bumped by every insert, commit, removal and
 *   sweep, so (bucket, seq) names one incarnation of one entry.
 * - Pins are hazards: an agent reads an entry optimistically, stores
 *   (bucket, seq) in a cell of its own pin journal (pd_layout.h), fences,
 *   and re-reads seq; unchanged, the values it read are the pinned ones.
 *   Removal first retires the entry (no longer found, its bucket not
 *   reused), fences, then scans the journals: a cell naming that
 *   incarnation makes it -EBUSY, and the entry stays retired until a later
 *   removal finds no such cell. A cell can only ever keep the one
 *   incarnation it names from being freed.
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
#define PD_INDEX_RETIRED   4u /* removed while a hazard may name it: not found, bucket kept */

#define PD_INDEX_PIN_TRIES 64u /* optimistic reads a pin makes before -EAGAIN */

/* A journal cell's value for a pin of bucket b at sequence seq (even); 0: empty. */
#define PD_INDEX_HAZARD(b, seq) (((uint64_t)(b) + 1) | (uint64_t)(seq) << 32)

struct pd_index_entry {
	uint32_t state;    /* writer: mutex holder; stored last on insert */
	_Atomic uint32_t seq; /* writer: mutex holder; odd while the entry changes */
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
	_Atomic uint64_t lookups; /* the broker's (agents count their own) */
	_Atomic uint64_t misses;
	_Atomic uint64_t busy;   /* removals refused: a hazard named the entry */
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
	uint32_t retired;                      /* writer: mutex holder; removed, still named */

	alignas(PD_CACHE_LINE) struct pd_index_counters stats;
	alignas(PD_CACHE_LINE) struct pd_index_entry entries[];
};
_Static_assert(offsetof(struct pd_index_shm, lock) == 64, "index ABI");

/*
 * Where the agents' hazards are (the broker's view, pointers into its own
 * mapping): njournals journals of ncells cells, journal j at cells + j *
 * ncells, scanned only while the 32-bit word at (const char *)owner + j *
 * owner_stride is not 0 (the agent slot's state; owner NULL: always).
 */
struct pd_index_journals {
	const _Atomic uint64_t *cells;
	const _Atomic uint32_t *owner;
	uint32_t owner_stride;
	uint32_t njournals;
	uint32_t ncells;
};

/* Private, validated handle. */
struct pd_index {
	struct pd_index_shm *shm;
	struct pd_index_entry *entries;
	uint64_t seed;
	uint32_t mask;
	uint32_t max_probe;
	struct pd_index_journals hz; /* none by default: nothing can be pinned */
};

/* What a key maps to. */
struct pd_index_val {
	uint64_t req;
	uint32_t slot;
	uint32_t gen;
	uint32_t len;
	uint32_t state;    /* PD_INDEX_PENDING or PD_INDEX_COMMITTED */
	uint32_t _rsvd;
	uint64_t hazard;   /* out only, pd_index_pin(): the cell value recording the pin */
};

/* Region bytes; -EINVAL unless nbuckets is a power of two <= the max. */
int64_t pd_index_memsize(uint32_t nbuckets);
/* Broker: initialise. max_probe in [1, nbuckets]. 0, -EINVAL, -ENOSPC. */
int pd_index_init(void *mem, size_t len, uint32_t nbuckets, uint32_t max_probe, uint64_t seed);
/* Check a table read from shm, build a handle. 0, -EINVAL, -EPROTO. */
int pd_index_open(struct pd_index *ix, void *mem, size_t len);

/* Broker: the journals pd_index_remove() scans for hazards (copied). */
void pd_index_set_journals(struct pd_index *ix, const struct pd_index_journals *j);

/**
 * Broker: insert key -> *v (v->state PENDING or COMMITTED).
 * @return 0; -EINVAL bad key length or state; -EEXIST key present (entry
 *         unchanged); -ENOSPC no free bucket within max_probe; -ETIMEDOUT.
 */
int pd_index_insert(struct pd_index *ix, const void *key, uint32_t klen,
		    const struct pd_index_val *v);
/* Broker: @return 0 and *out; -ENOENT; -EINVAL; -ETIMEDOUT. out may be NULL. */
int pd_index_lookup(struct pd_index *ix, const void *key, uint32_t klen,
		    struct pd_index_val *out);
/**
 * Agent: pin key's committed entry with a hazard in cell (lock-free; no
 * write to the table). On success cell holds out->hazard.
 * @param cell  borrowed, one of the caller's journal cells; must be empty
 * @return 0 and *out; -ENOENT absent or not committed; -EAGAIN the entries
 *         kept changing under the reads (retry); -EBUSY cell not empty;
 *         -EINVAL bad key, cell or out NULL.
 */
int pd_index_pin(const struct pd_index *ix, const void *key, uint32_t klen,
		 struct pd_index_val *out, _Atomic uint64_t *cell);
/**
 * Agent: drop the pin cell records, if it still holds rec (compare and
 * exchange to 0: the broker may have emptied it after a detach).
 * @return 0; -ESTALE cell holds something else (left alone); -EINVAL.
 */
int pd_index_unpin(_Atomic uint64_t *cell, uint64_t rec);
/* Broker: PENDING -> COMMITTED with the final length. 0; -ENOENT; -EINVAL not pending. */
int pd_index_commit(struct pd_index *ix, const void *key, uint32_t klen, uint32_t len);
/**
 * Broker: remove key's entry: the one an earlier -EBUSY retired if there
 * is one, else the live one. Retires it, then frees it (tombstone) unless
 * a journal cell names that incarnation.
 * @return 0; -ENOENT; -EBUSY named by a hazard (entry retired: not found
 *         by lookups, bucket kept; call again later); -EINVAL; -ETIMEDOUT.
 */
int pd_index_remove(struct pd_index *ix, const void *key, uint32_t klen);
/* Broker: pd_index_remove() of key's entry mapping to exactly slot and gen. */
int pd_index_remove_chunk(struct pd_index *ix, const void *key, uint32_t klen, uint32_t slot,
			  uint32_t gen);
/* Live entries, retired ones not counted (racy snapshot). */
uint32_t pd_index_count(const struct pd_index *ix);

#endif
