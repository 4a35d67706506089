/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_SLOTS_H
#define PD_SHM_PD_SLOTS_H

/*
 * Slot pool in shared memory: the send pool (prefill agents loan staging
 * slots) and the recv pool (the broker grants slots to peers) are both one.
 *
 * - All-or-nothing allocation of n slots, waiting until a deadline; waiters
 *   are served strictly FIFO (a ticket each), so a large request is never
 *   starved by a stream of small ones; a waiter can be cancelled by its
 *   request tag (-ECANCELED). A waiter that has not looked at the queue for
 *   PD_POOL_STALE_MS (a process stopped by a debugger or SIGSTOP) keeps its
 *   ticket but is passed over until it looks again: it cannot hold the
 *   head while it does not run. When every entry is taken, a new waiter
 *   takes such a one's entry; a waiter that finds its entry gone (or
 *   overwritten: shm) takes a new one, at the back of the queue.
 * - Every slot has a 64-byte descriptor in the pool's control region (never
 *   in the payload arena): state, owner, generation (bumped on each reuse),
 *   request tag. References carry the generation; stale ones are refused.
 * - One robust process-shared mutex guards the pool. A holder that dies is
 *   repaired by the next locker: the slots and waits of the dead process
 *   (by the pid recorded in each descriptor: the process now responsible
 *   for the slot) are dropped and the free stack is rebuilt from the
 *   descriptors, which are the single source of truth.
 * - The geometry (slot count and size, table offsets) is cached in a
 *   private handle when the pool is opened, so corrupt shm cannot redirect
 *   an access; every index read from shm is bounds-checked.
 */
#include <stddef.h>
#include <stdint.h>

#include <pdkv/types.h>

#include "pd_compiler.h"
#include "pd_sync.h"

#define PD_POOL_MAGIC       0x4c4f4f50u /* "POOL" */
#define PD_POOL_MAX_SLOTS   (1u << 24)
#define PD_POOL_MAX_WAITERS 128u
#define PD_POOL_LOCK_MS     5000u /* bound on lock waits of calls without a deadline */
#define PD_POOL_SLICE_MS    200u  /* a waiter re-checks the queue at least this often */
#define PD_POOL_STALE_MS    1000u /* one that did not for this long (stopped, or not
				   * scheduled) is passed over until it looks again */
#define PD_POOL_OWNER_NONE  UINT32_MAX /* lock holder not acting for an owner */

/* Slot states. Send pool: FREE -> LOANED -> QUEUED -> IN_FLIGHT -> FREE.
 * Recv pool: FREE -> GRANTED -> COMMITTED -> FREE. */
#define PD_SLOT_FREE      0u
#define PD_SLOT_LOANED    1u
#define PD_SLOT_QUEUED    2u
#define PD_SLOT_IN_FLIGHT 3u
#define PD_SLOT_GRANTED   4u
#define PD_SLOT_COMMITTED 5u
#define PD_SLOT_STATE_MAX 5u

struct pd_slot_desc {
	_Atomic uint32_t state; /* writer: pool mutex holder */
	uint32_t gen;           /* writer: pool mutex holder; bumped at allocation */
	uint32_t owner;         /* writer: pool mutex holder */
	int32_t  pid;           /* writer: pool mutex holder; owner's process */
	uint64_t tag;           /* writer: pool mutex holder; request tag */
	uint64_t payload_off;   /* immutable: offset in the arena */
	uint64_t seq;           /* writer: current owner */
	uint32_t len;           /* writer: current owner; payload bytes */
	uint32_t crc32c;        /* writer: current owner; optional */
	uint32_t flags;         /* writer: current owner */
	uint32_t pidns;         /* writer: pool mutex holder; pid's namespace */
	uint8_t  _rsvd[8];
};
_Static_assert(sizeof(struct pd_slot_desc) == 64, "slot descriptor is one cache line");

struct pd_pool_waiter {
	uint64_t ticket; /* 0 = entry unused; writer: pool mutex holder */
	uint64_t tag;
	uint32_t owner;
	int32_t  pid;
	uint32_t n;
	uint32_t cancelled;
	uint64_t seen_ns; /* CLOCK_MONOTONIC: when it last looked at the queue */
	uint32_t pidns;   /* pid's namespace */
	uint32_t _rsvd;
};
_Static_assert(sizeof(struct pd_pool_waiter) == 48, "waiter ABI");

struct pd_pool_counters {
	_Atomic uint64_t in_use;      /* gauge */
	_Atomic uint64_t high_water;
	_Atomic uint64_t allocs;      /* successful allocations (calls) */
	_Atomic uint64_t frees;       /* slots freed */
	_Atomic uint64_t waits;       /* allocations that had to wait */
	_Atomic uint64_t wait_ns;     /* total time spent waiting */
	_Atomic uint64_t wait_max_ns;
	_Atomic uint64_t timeouts;
	_Atomic uint64_t cancels;
	_Atomic uint64_t reclaimed;   /* slots taken back from dead owners */
	_Atomic uint64_t repairs;     /* owner-death repairs */
	_Atomic uint64_t refused;     /* -E2BIG, -EAGAIN, -ENOBUFS */
};

/* The pool header at the start of its region; slot table and free stack follow. */
struct pd_pool_shm {
	uint32_t magic;          /* immutable after init; writer: broker */
	uint32_t nslots;
	uint32_t max_waiters;
	uint32_t base;           /* the index of its first slot: slot i is named i + base
				  * (one pool of several, pd_pool_init_at()) */
	uint64_t slot_size;
	uint64_t free_off;       /* from the header: uint32_t free stack[nslots] */
	uint64_t desc_off;       /* from the header: struct pd_slot_desc[nslots] */
	uint8_t  _pad0[PD_CACHE_LINE - 40];

	alignas(PD_CACHE_LINE) struct pd_mutex lock;
	alignas(PD_CACHE_LINE) struct pd_cond cond;

	/* Everything below is written only by the holder of lock. */
	alignas(PD_CACHE_LINE) uint32_t nfree;
	uint32_t nwaiters;
	uint32_t lock_owner;     /* owner id the holder acts for (diagnostics) */
	int32_t  lock_pid;       /* pid of the holder, 0 when unlocked: for repair */
	uint64_t next_ticket;
	uint32_t lock_pidns;     /* lock_pid's namespace */

	alignas(PD_CACHE_LINE) struct pd_pool_counters stats; /* readers: anyone */
	alignas(PD_CACHE_LINE) struct pd_pool_waiter waiters[PD_POOL_MAX_WAITERS];
};
_Static_assert(offsetof(struct pd_pool_shm, lock) == 64, "pool ABI");
_Static_assert(sizeof(struct pd_pool_shm) % PD_CACHE_LINE == 0, "pool ABI");

/* Private, validated handle on a pool. */
struct pd_pool {
	struct pd_pool_shm *shm;
	uint32_t *free_stack;
	struct pd_slot_desc *desc;
	uint8_t *arena;            /* NULL when opened without payload access */
	uint64_t slot_size;
	uint32_t nslots;
	uint32_t base;             /* references name slot i as i + base */
	uint32_t resetter;         /* 1: the broker's handle: it makes an unusable
				    * mutex new (pd_pool_lock_reset()); others wait */
	uint64_t lock_resets;      /* ... how many times (this handle) */
	uint32_t stuck;            /* the broker's handle: its last wait for the mutex
				    * timed out; until a lock succeeds it waits 1 ms,
				    * so a held mutex stalls its loop once, not per call */
};

/* Who allocates: the owner id the broker gave it, its pid, the request tag,
 * and the state the slots take (PD_SLOT_LOANED or PD_SLOT_GRANTED). */
struct pd_pool_who {
	uint32_t owner;
	int32_t  pid;
	uint64_t tag;
	uint32_t state;
	/* Optional: called (without the pool lock) at least every
	 * PD_POOL_SLICE_MS while waiting; a negative return (e.g. -ENOTCONN:
	 * the broker is gone) ends the wait with that error. */
	int (*check)(void *ctx);
	void *check_ctx;
};

/* Region bytes for nslots; -EINVAL for 0 or more than PD_POOL_MAX_SLOTS. */
int64_t pd_pool_memsize(uint32_t nslots);
/* Arena bytes for nslots of slot_size; -EINVAL unless slot_size is a
 * non-zero multiple of 4 KiB. */
int64_t pd_pool_arena_size(uint32_t nslots, uint64_t slot_size);
/* Broker: initialise in 64-aligned memory of len bytes. 0, -EINVAL, -ENOSPC. */
int pd_pool_init(void *mem, size_t len, uint32_t nslots, uint64_t slot_size);
/* The same for one pool of several whose slots are named from base on
 * (references, pd_pool_desc_get()): base + nslots must fit 32 bits. */
int pd_pool_init_at(void *mem, size_t len, uint32_t nslots, uint64_t slot_size, uint32_t base);
/**
 * Check a pool read from shm and build a handle. arena (may be NULL) must
 * hold nslots * slot_size bytes.
 * @return 0; -EINVAL NULL p/mem; -EPROTO corrupt header, bad geometry, or
 *         an arena too small.
 */
int pd_pool_open(struct pd_pool *p, void *mem, size_t len, void *arena, size_t arena_len);
/* The same with the geometry given (from memory its users cannot write),
 * not read from the pool's header: a header written over opens as it was
 * made. -EINVAL bad geometry; -EPROTO len or arena_len too short. */
int pd_pool_open_as(struct pd_pool *p, void *mem, size_t len, void *arena, size_t arena_len,
		    uint32_t nslots, uint64_t slot_size, uint32_t base);
/* Broker: write the pool's geometry (magic, sizes, offsets, base) back into
 * its header from the handle where the header says otherwise (a user
 * wrote over it), for whoever opens it from the header. 1 rewritten, 0 not. */
int pd_pool_heal_header(struct pd_pool *p);

/**
 * Allocate exactly n slots (all or nothing), waiting until deadline_ns
 * (CLOCK_MONOTONIC) behind earlier waiters. deadline_ns = 0: do not wait.
 * Refs go to out[0..n-1].
 * @return 0; -EINVAL bad args or state; -E2BIG n > pool size (at once);
 *         -ENOBUFS not available and deadline 0; -ETIMEDOUT; -ECANCELED
 *         (pd_pool_cancel on who->tag); -EAGAIN waiter table full;
 *         -EPROTO corrupt pool; -ENOTRECOVERABLE.
 * Thread-safety: any thread of any attached process.
 */
int pd_pool_alloc(struct pd_pool *p, const struct pd_pool_who *who, uint32_t n,
		  uint64_t deadline_ns, pd_slot_ref *out);
/**
 * Free n slots (all or nothing: every ref is checked first). Wakes waiters.
 * @return 0; -EINVAL; -ESTALE a ref is free already or of an older
 *         generation (nothing freed); -ETIMEDOUT lock not had in time.
 */
int pd_pool_free(struct pd_pool *p, const pd_slot_ref *refs, uint32_t n);
/* Hand n live slots to owner in state (e.g. LOANED -> QUEUED, broker); the
 * calling process becomes responsible for them. 0, -EINVAL, -ESTALE. */
int pd_pool_set_state(struct pd_pool *p, const pd_slot_ref *refs, uint32_t n, uint32_t owner,
		      uint32_t state);
/* Cancel every waiter with this tag (they return -ECANCELED). @return how many. */
int pd_pool_cancel(struct pd_pool *p, uint64_t tag);
/* Free every slot of owner and drop its waits (it died). @return slots freed. */
int pd_pool_reclaim(struct pd_pool *p, uint32_t owner);
/* The same for owner's process only, pid of pid namespace pidns as it
 * records itself (a retry after the owner id may have been given to another
 * process). @return slots freed. */
int pd_pool_reclaim_proc(struct pd_pool *p, uint32_t owner, int32_t pid, uint32_t pidns);
/* Free one slot if it is still in state with ref's generation (a loan
 * nobody holds), rebuilding the free stack from the descriptors (the shared
 * stack may list it already). @return 1 freed, 0 it changed meanwhile;
 * -EINVAL; -ETIMEDOUT. */
int pd_pool_reclaim_slot(struct pd_pool *p, pd_slot_ref ref, uint32_t state);
/**
 * Broker: is the pool's mutex usable? Takes and releases it, waiting at
 * most timeout_ms (a dead holder's state is repaired on the way).
 * @return 0 usable; -ETIMEDOUT held (*holder: the pid the pool records as
 *         holder, unverified, 0 none; *holder_ns: that pid's namespace);
 *         -ENOTRECOVERABLE, -EINVAL and other errors: unusable as it is.
 */
int pd_pool_lock_check(struct pd_pool *p, uint32_t timeout_ms, int32_t *holder,
		       uint32_t *holder_ns);
/**
 * Broker: make the pool's mutex and condvar new in place and rebuild the
 * free stack and counts from the descriptors, for a mutex found stuck or
 * unusable by pd_pool_lock_check() for long (its bytes overwritten, or a
 * holder that cannot be stopped). Waiters blocked on the old one time out
 * into the new one. A process that still held it loses it.
 * @return 0; -EINVAL; errors of pthread_mutex_init.
 */
int pd_pool_lock_reset(struct pd_pool *p);
/* Broker: descriptors in no state at all (written over in shm) become
 * free, at a new generation, and the free stack is rebuilt. It takes the
 * lock: call it when a look without the lock (pd_pool_desc_get()) saw a
 * state above PD_SLOT_STATE_MAX.
 * @return how many (0: none under the lock); -ETIMEDOUT (lock); -EINVAL. */
int pd_pool_scrub(struct pd_pool *p);

/* A slot as the pool's only allocator knows it: PD_SLOT_FREE, or its state
 * and generation. */
struct pd_slot_truth {
	uint32_t state;
	uint32_t gen;
};

/**
 * For a pool with one allocator that keeps its own record of every slot
 * (the recv pool: the broker): make the descriptors say what truth() says
 * (in-use slots get owner and this process), clear the waiter table (such
 * a pool has no waiters; entries are writes of someone else) and rebuild
 * the free stack. A generation is set only for a slot in use.
 * @return descriptors that disagreed (0: none), or a lock error.
 */
int pd_pool_resync(struct pd_pool *p, uint32_t owner,
		   void (*truth)(void *ctx, uint32_t idx, struct pd_slot_truth *t), void *ctx);

/* Lock with the pool's repair; 0 or 1 (repaired) on success. The holder
 * is recorded so that its death can be repaired. For tests and batch ops. */
int pd_pool_lock(struct pd_pool *p, uint32_t owner, uint64_t deadline_ns);
void pd_pool_unlock(struct pd_pool *p);

/* Payload of a live slot, or NULL for a bad or stale ref. */
void *pd_pool_data(const struct pd_pool *p, pd_slot_ref ref);
/* Copy of slot idx's descriptor (idx as references name it: from the
 * pool's base on); -EINVAL out of range. */
int pd_pool_desc_get(const struct pd_pool *p, uint32_t idx, struct pd_slot_desc *out);
/* Free slots now (racy snapshot). */
uint32_t pd_pool_nfree(const struct pd_pool *p);

/* The pool's own index of a reference's slot; nslots or more when the
 * reference names no slot of this pool. */
static inline uint32_t pd_pool_lidx(const struct pd_pool *p, pd_slot_ref ref)
{
	return PD_SLOT_REF_IDX(ref) - p->base;
}

#endif
