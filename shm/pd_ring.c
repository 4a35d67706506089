/* SPDX-License-Identifier: MIT */
#include <errno.h>

#include "pd_ring.h"

static int geometry_ok(uint32_t count, uint32_t esize)
{
	return PD_IS_POW2(count) && count <= PD_RING_MAX_COUNT && esize >= 8 &&
	       esize % 8 == 0 && esize <= PD_RING_MAX_ESIZE;
}

int64_t pd_ring_memsize(uint32_t count, uint32_t esize)
{
	if (!geometry_ok(count, esize))
		return -EINVAL;
	return (int64_t)sizeof(struct pd_ring) + (int64_t)count * esize;
}

int pd_ring_init(struct pd_ring *r, size_t len, uint32_t count, uint32_t esize)
{
	int64_t need = pd_ring_memsize(count, esize);

	if (!r || need < 0 || (uintptr_t)r % PD_CACHE_LINE)
		return -EINVAL;
	if ((uint64_t)need > len)
		return -ENOSPC;
	memset(r, 0, sizeof(*r));
	r->magic = PD_RING_MAGIC;
	r->size = count;
	r->mask = count - 1;
	r->esize = esize;
	return 0;
}

/* Geometry of a private snapshot of the header. */
static int header_ok(const struct pd_ring *h, size_t len)
{
	int64_t need = pd_ring_memsize(h->size, h->esize);

	return h->magic == PD_RING_MAGIC && need >= 0 && (uint64_t)need <= len &&
	       h->mask == h->size - 1;
}

/* Each header field read from shm exactly once (volatile: the compiler may
 * not re-read r instead of the copy). */
static void header_snapshot(const volatile struct pd_ring *r, struct pd_ring *h)
{
	h->magic = r->magic;
	h->size = r->size;
	h->mask = r->mask;
	h->esize = r->esize;
}

/* Copy the header out of shm once, validate that copy, then the indices.
 * The peer may rewrite shm at any time, so nothing is read twice. */
static int check_snapshot(const struct pd_ring *r, size_t len, struct pd_ring *h)
{
	uint32_t head, tail;

	if (!r || len < sizeof(*r) || (uintptr_t)r % PD_CACHE_LINE)
		return -EPROTO;
	header_snapshot(r, h);
	if (!header_ok(h, len))
		return -EPROTO;
	tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	head = atomic_load_explicit(&r->head, memory_order_acquire);
	return tail - head > h->size ? -EPROTO : 0;
}

int pd_ring_check(const struct pd_ring *r, size_t len)
{
	struct pd_ring h;

	return check_snapshot(r, len, &h);
}

int pd_ring_view_init(struct pd_ring_view *v, struct pd_ring *r, size_t len)
{
	struct pd_ring h;
	int rc;

	if (!v || !r)
		return -EINVAL;
	/* Cache exactly the snapshot that was checked. (Checking the live
	 * header, then re-reading it, let a peer flipping size in between
	 * get an unchecked size into the view.) */
	rc = check_snapshot(r, len, &h);
	if (rc < 0)
		return rc;
	v->r = r;
	v->elems = r->elems;
	v->size = h.size;
	v->mask = h.mask;
	v->esize = h.esize;
	return 0;
}

void pd_ring_reset(struct pd_ring_view *v)
{
	atomic_store_explicit(&v->r->head, 0, memory_order_relaxed);
	atomic_store_explicit(&v->r->need_wakeup, 0, memory_order_relaxed);
	atomic_store_explicit(&v->r->tail, 0, memory_order_release);
}
