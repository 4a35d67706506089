/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_RING_H
#define PD_SHM_PD_RING_H

/*
 * Single-producer / single-consumer ring of fixed-size entries in shared
 * memory, between two processes (an agent and the broker).
 *
 * - The creator sizes it (pd_ring_memsize), initialises it in place
 *   (pd_ring_init); each side then checks it and builds a private view
 *   (pd_ring_view_init). The fast path uses only the view's cached,
 *   validated geometry, so a corrupted size or mask in shm cannot send a
 *   copy out of bounds; indices read from the other side are checked on
 *   every call (-EPROTO).
 * - Free-running 32-bit indices; tail written only by the producer, head
 *   only by the consumer, each on its own cache line with a guard line.
 * - NEED_WAKEUP: a consumer about to sleep raises its flag and re-checks;
 *   a producer rings the doorbell (eventfd, futex, ...) only when
 *   pd_ring_needs_wakeup() says so. Both sides issue a full fence between
 *   their store and their load, so at least one sees the other.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "pd_compiler.h"

#define PD_RING_MAGIC     0x474e4952u /* "RING" */
#define PD_RING_MAX_COUNT (1u << 24)
#define PD_RING_MAX_ESIZE 1024u

/*
 * The NEED_WAKEUP handshake is Dekker-style: each side stores, issues a full
 * fence, then loads. TSan neither models fences nor accepts them (gcc
 * -Wtsan), so under TSan the fences go and the four accesses become seq_cst
 * operations, which give the same guarantee in the C11 model.
 */
#ifdef __SANITIZE_THREAD__
#define PD_RING_FLAG_MO      memory_order_seq_cst
#define PD_RING_TAIL_LOAD_MO memory_order_seq_cst
#define PD_RING_TAIL_PUB_MO  memory_order_seq_cst
#define PD_RING_FULL_FENCE() do { } while (0)
#else
#define PD_RING_FLAG_MO      memory_order_relaxed
#define PD_RING_TAIL_LOAD_MO memory_order_acquire
#define PD_RING_TAIL_PUB_MO  memory_order_release
#define PD_RING_FULL_FENCE() atomic_thread_fence(memory_order_seq_cst)
#endif

struct pd_ring {
	/* Immutable after pd_ring_init(); writer: creator. */
	uint32_t magic;
	uint32_t size;
	uint32_t mask;
	uint32_t esize;
	uint8_t  _pad0[PD_CACHE_LINE - 16];

	alignas(PD_CACHE_LINE) _Atomic uint32_t tail; /* writer: producer only */
	uint32_t _pad1;
	_Atomic uint64_t enq_full;     /* writer: producer; enqueues refused, ring full */
	_Atomic uint64_t doorbells;    /* writer: producer; wake-ups requested */
	uint8_t  _guard0[PD_CACHE_LINE]; /* keeps the adjacent-line prefetcher off head */

	alignas(PD_CACHE_LINE) _Atomic uint32_t head;  /* writer: consumer only */
	_Atomic uint32_t need_wakeup;  /* writer: consumer; 1 while it sleeps */
	_Atomic uint64_t sleeps;       /* writer: consumer */
	uint8_t  _guard1[PD_CACHE_LINE];

	alignas(PD_CACHE_LINE) uint8_t elems[]; /* size * esize bytes */
};

_Static_assert(offsetof(struct pd_ring, tail) == 1 * PD_CACHE_LINE, "ring ABI");
_Static_assert(offsetof(struct pd_ring, head) == 3 * PD_CACHE_LINE, "ring ABI");
_Static_assert(offsetof(struct pd_ring, elems) == 5 * PD_CACHE_LINE, "ring ABI");
_Static_assert(sizeof(struct pd_ring) == 5 * PD_CACHE_LINE, "ring ABI");

/* A side's private, validated view of a ring. */
struct pd_ring_view {
	struct pd_ring *r;
	uint8_t *elems;
	uint32_t size;
	uint32_t mask;
	uint32_t esize;
};

/* Bytes needed for count entries of esize bytes; -EINVAL unless count is a
 * power of two <= PD_RING_MAX_COUNT and esize a multiple of 8 in
 * [8, PD_RING_MAX_ESIZE]. */
int64_t pd_ring_memsize(uint32_t count, uint32_t esize);
/* Initialise in caller memory of len bytes. 0, -EINVAL, -ENOSPC (too small). */
int pd_ring_init(struct pd_ring *r, size_t len, uint32_t count, uint32_t esize);
/* Validate a ring read from shm: magic, geometry, fits in len, indices sane.
 * 0 or -EPROTO. */
int pd_ring_check(const struct pd_ring *r, size_t len);
/* pd_ring_check() then cache the geometry in v. 0, -EINVAL, -EPROTO. */
int pd_ring_view_init(struct pd_ring_view *v, struct pd_ring *r, size_t len);
/* Empty the ring; only while neither side uses it (e.g. before reuse). */
void pd_ring_reset(struct pd_ring_view *v);

static inline void pd_ring__copy_in(struct pd_ring_view *v, uint32_t pos, const void *src,
				    uint32_t n)
{
	uint32_t idx = pos & v->mask;
	uint32_t first = v->size - idx < n ? v->size - idx : n;

	memcpy(v->elems + (size_t)idx * v->esize, src, (size_t)first * v->esize);
	if (n > first)
		memcpy(v->elems, (const uint8_t *)src + (size_t)first * v->esize,
		       (size_t)(n - first) * v->esize);
}

static inline void pd_ring__copy_out(const struct pd_ring_view *v, uint32_t pos, void *dst,
				     uint32_t n)
{
	uint32_t idx = pos & v->mask;
	uint32_t first = v->size - idx < n ? v->size - idx : n;

	memcpy(dst, v->elems + (size_t)idx * v->esize, (size_t)first * v->esize);
	if (n > first)
		memcpy((uint8_t *)dst + (size_t)first * v->esize, v->elems,
		       (size_t)(n - first) * v->esize);
}

static inline int pd_ring__enqueue(struct pd_ring_view *v, const void *src, uint32_t n,
				   int bulk)
{
	struct pd_ring *r = v->r;
	uint32_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed); /* own field */
	/* A1: pairs with R2 in dequeue: the consumer is done reading the
	 * entries it released, so we may overwrite them. */
	uint32_t head = atomic_load_explicit(&r->head, memory_order_acquire);
	uint32_t used = tail - head;
	uint32_t room;

	if (n == 0)
		return 0;
	if (PD_UNLIKELY(used > v->size))
		return -EPROTO; /* the consumer's index is corrupt */
	room = v->size - used;
	if (n > room) {
		if (bulk || room == 0) {
			atomic_fetch_add_explicit(&r->enq_full, 1, memory_order_relaxed);
			return 0;
		}
		n = room;
	}
	pd_ring__copy_in(v, tail, src, n);
	/* R1: pairs with A2 in dequeue: entry bytes are visible before the tail. */
	atomic_store_explicit(&r->tail, tail + n, PD_RING_TAIL_PUB_MO);
	return (int)n;
}

static inline int pd_ring__dequeue(struct pd_ring_view *v, void *dst, uint32_t n, int bulk)
{
	struct pd_ring *r = v->r;
	uint32_t head = atomic_load_explicit(&r->head, memory_order_relaxed); /* own field */
	/* A2: pairs with R1 in enqueue: entries up to tail are fully written. */
	uint32_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	uint32_t avail = tail - head;

	if (PD_UNLIKELY(avail > v->size))
		return -EPROTO; /* the producer's index is corrupt */
	if (n > avail) {
		if (bulk)
			return 0;
		n = avail;
	}
	if (n == 0)
		return 0;
	pd_ring__copy_out(v, head, dst, n);
	/* R2: pairs with A1 in enqueue: our reads of the entries complete
	 * before the producer may reuse them. */
	atomic_store_explicit(&r->head, head + n, memory_order_release);
	return (int)n;
}

/* All n entries or none. @return n, 0 (not enough room), -EPROTO. */
static inline int pd_ring_enqueue_bulk_sp(struct pd_ring_view *v, const void *src, uint32_t n)
{
	return pd_ring__enqueue(v, src, n, 1);
}

/* As many as fit, 0..n. @return count, -EPROTO. */
static inline int pd_ring_enqueue_burst_sp(struct pd_ring_view *v, const void *src, uint32_t n)
{
	return pd_ring__enqueue(v, src, n, 0);
}

/* All n entries or none. @return n, 0, -EPROTO. */
static inline int pd_ring_dequeue_bulk_sc(struct pd_ring_view *v, void *dst, uint32_t n)
{
	return pd_ring__dequeue(v, dst, n, 1);
}

/* Up to n entries. @return count, -EPROTO. */
static inline int pd_ring_dequeue_burst_sc(struct pd_ring_view *v, void *dst, uint32_t n)
{
	return pd_ring__dequeue(v, dst, n, 0);
}

/* Entries waiting, as seen now (either side); size+1 when corrupt. */
static inline uint32_t pd_ring_count(const struct pd_ring_view *v)
{
	uint32_t tail = atomic_load_explicit(&v->r->tail, memory_order_acquire);
	uint32_t head = atomic_load_explicit(&v->r->head, memory_order_acquire);

	return tail - head > v->size ? v->size + 1 : tail - head;
}

/* Producer, after an enqueue: 1 when the consumer sleeps and must be woken. */
static inline int pd_ring_needs_wakeup(struct pd_ring_view *v)
{
	/* F2: pairs with F1: our tail store is ordered before the flag load. */
	PD_RING_FULL_FENCE();
	if (!atomic_load_explicit(&v->r->need_wakeup, PD_RING_FLAG_MO))
		return 0;
	atomic_fetch_add_explicit(&v->r->doorbells, 1, memory_order_relaxed);
	return 1;
}

/* Consumer, before sleeping: raise the flag and re-check.
 * @return 1 the ring is empty: sleep (with a timeout), then call
 *         pd_ring_sleep_done(); 0 entries arrived: flag lowered, don't sleep. */
static inline int pd_ring_sleep_prepare(struct pd_ring_view *v)
{
	struct pd_ring *r = v->r;

	atomic_store_explicit(&r->need_wakeup, 1, PD_RING_FLAG_MO);
	/* F1: pairs with F2: the flag store is ordered before the tail load. */
	PD_RING_FULL_FENCE();
	if (atomic_load_explicit(&r->tail, PD_RING_TAIL_LOAD_MO) !=
	    atomic_load_explicit(&r->head, memory_order_relaxed)) {
		atomic_store_explicit(&r->need_wakeup, 0, memory_order_relaxed);
		return 0;
	}
	atomic_fetch_add_explicit(&r->sleeps, 1, memory_order_relaxed);
	return 1;
}

static inline void pd_ring_sleep_done(struct pd_ring_view *v)
{
	atomic_store_explicit(&v->r->need_wakeup, 0, memory_order_relaxed);
}

/* Consumer that others wait on through its doorbell (a file descriptor an
 * application polls): keep the flag up for good, so the producer rings at
 * every enqueue. The consumer then clears its doorbell before it reads the
 * ring, never after: a ring it could miss always leaves the bell rung. */
static inline void pd_ring_arm(struct pd_ring_view *v)
{
	atomic_store_explicit(&v->r->need_wakeup, 1, PD_RING_FLAG_MO);
	/* F1: pairs with F2: every enqueue after this fence sees the flag. */
	PD_RING_FULL_FENCE();
}

#endif
