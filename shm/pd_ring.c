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

int pd_ring_check(const struct pd_ring *r, size_t len)
{
	uint32_t size, head, tail;
	int64_t need;

	if (!r || len < sizeof(*r) || (uintptr_t)r % PD_CACHE_LINE)
		return -EPROTO;
	size = r->size;
	need = pd_ring_memsize(size, r->esize);
	if (r->magic != PD_RING_MAGIC || need < 0 || (uint64_t)need > len || r->mask != size - 1)
		return -EPROTO;
	tail = atomic_load_explicit(&r->tail, memory_order_acquire);
	head = atomic_load_explicit(&r->head, memory_order_acquire);
	return tail - head > size ? -EPROTO : 0;
}

int pd_ring_view_init(struct pd_ring_view *v, struct pd_ring *r, size_t len)
{
	struct pd_ring copy;
	int rc;

	if (!v || !r)
		return -EINVAL;
	/* Check, then cache exactly the geometry that was checked. */
	memcpy(&copy, r, offsetof(struct pd_ring, tail));
	rc = pd_ring_check(r, len);
	if (rc < 0 || copy.size != r->size || copy.esize != r->esize)
		return -EPROTO;
	v->r = r;
	v->elems = r->elems;
	v->size = copy.size;
	v->mask = copy.size - 1;
	v->esize = copy.esize;
	return 0;
}

void pd_ring_reset(struct pd_ring_view *v)
{
	atomic_store_explicit(&v->r->head, 0, memory_order_relaxed);
	atomic_store_explicit(&v->r->need_wakeup, 0, memory_order_relaxed);
	atomic_store_explicit(&v->r->tail, 0, memory_order_release);
}
