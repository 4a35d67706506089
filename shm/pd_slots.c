/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_log.h"
#include "pd_slots.h"
#include "pd_time.h"

#define SLOT_ALIGN 4096u

static uint64_t free_off(void)
{
	return sizeof(struct pd_pool_shm);
}

static uint64_t desc_off(uint32_t nslots)
{
	return PD_ALIGN_UP(free_off() + (uint64_t)nslots * sizeof(uint32_t),
			   (uint64_t)PD_CACHE_LINE);
}

int64_t pd_pool_memsize(uint32_t nslots)
{
	if (nslots == 0 || nslots > PD_POOL_MAX_SLOTS)
		return -EINVAL;
	return (int64_t)(desc_off(nslots) + (uint64_t)nslots * sizeof(struct pd_slot_desc));
}

int64_t pd_pool_arena_size(uint32_t nslots, uint64_t slot_size)
{
	if (nslots == 0 || nslots > PD_POOL_MAX_SLOTS || slot_size == 0 ||
	    slot_size % SLOT_ALIGN || slot_size > (1ull << 32))
		return -EINVAL;
	return (int64_t)(nslots * slot_size);
}

int pd_pool_init(void *mem, size_t len, uint32_t nslots, uint64_t slot_size)
{
	return pd_pool_init_at(mem, len, nslots, slot_size, 0);
}

int pd_pool_init_at(void *mem, size_t len, uint32_t nslots, uint64_t slot_size, uint32_t base)
{
	struct pd_pool_shm *s = mem;
	struct pd_pool p;
	int64_t need = pd_pool_memsize(nslots);
	int rc;

	if (!mem || need < 0 || pd_pool_arena_size(nslots, slot_size) < 0 ||
	    (uintptr_t)mem % PD_CACHE_LINE || (uint64_t)base + nslots > UINT32_MAX)
		return -EINVAL;
	if ((uint64_t)need > len)
		return -ENOSPC;
	memset(s, 0, (size_t)need);
	s->nslots = nslots;
	s->max_waiters = PD_POOL_MAX_WAITERS;
	s->slot_size = slot_size;
	s->base = base;
	s->free_off = free_off();
	s->desc_off = desc_off(nslots);
	s->next_ticket = 1;
	rc = pd_mutex_init(&s->lock);
	if (rc == 0)
		rc = pd_cond_init(&s->cond);
	if (rc < 0)
		return rc;
	p.free_stack = (uint32_t *)((uint8_t *)s + s->free_off);
	p.desc = (struct pd_slot_desc *)((uint8_t *)s + s->desc_off);
	for (uint32_t i = 0; i < nslots; i++) {
		p.desc[i].payload_off = (uint64_t)i * slot_size;
		/* Pop order = ascending index (stack top is the last element). */
		p.free_stack[i] = nslots - 1 - i;
	}
	s->nfree = nslots;
	s->magic = PD_POOL_MAGIC; /* last: an unfinished pool fails open() */
	return 0;
}

int pd_pool_open(struct pd_pool *p, void *mem, size_t len, void *arena, size_t arena_len)
{
	struct pd_pool_shm *s = mem;
	uint32_t nslots, base;
	uint64_t slot_size;
	int rc;

	if (!p || !mem)
		return -EINVAL;
	if (len < sizeof(*s) || (uintptr_t)mem % PD_CACHE_LINE)
		return -EPROTO;
	/* Read the geometry once; everything after uses the checked copy. */
	nslots = s->nslots;
	slot_size = s->slot_size;
	base = s->base;
	if (s->magic != PD_POOL_MAGIC || pd_pool_memsize(nslots) < 0 ||
	    s->free_off != free_off() || s->desc_off != desc_off(nslots))
		return -EPROTO;
	rc = pd_pool_open_as(p, mem, len, arena, arena_len, nslots, slot_size, base);
	return rc == -EINVAL ? -EPROTO : rc; /* the header's geometry is bad */
}

int pd_pool_open_as(struct pd_pool *p, void *mem, size_t len, void *arena, size_t arena_len,
		    uint32_t nslots, uint64_t slot_size, uint32_t base)
{
	int64_t need = pd_pool_memsize(nslots);

	if (!p || !mem || need < 0 || pd_pool_arena_size(nslots, slot_size) < 0 ||
	    (uint64_t)base + nslots > UINT32_MAX || (uintptr_t)mem % PD_CACHE_LINE)
		return -EINVAL;
	if ((uint64_t)need > len || (arena && (uint64_t)arena_len < nslots * slot_size))
		return -EPROTO;
	*p = (struct pd_pool){
		.shm = mem,
		.free_stack = (uint32_t *)((uint8_t *)mem + free_off()),
		.desc = (struct pd_slot_desc *)((uint8_t *)mem + desc_off(nslots)),
		.arena = arena,
		.slot_size = slot_size,
		.nslots = nslots,
		.base = base,
	};
	return 0;
}

int pd_pool_heal_header(struct pd_pool *p)
{
	struct pd_pool_shm *s = p->shm;
	int off = s->magic != PD_POOL_MAGIC || s->nslots != p->nslots || s->base != p->base ||
		  s->max_waiters != PD_POOL_MAX_WAITERS || s->slot_size != p->slot_size ||
		  s->free_off != free_off() || s->desc_off != desc_off(p->nslots);

	if (off) {
		s->nslots = p->nslots;
		s->base = p->base;
		s->max_waiters = PD_POOL_MAX_WAITERS;
		s->slot_size = p->slot_size;
		s->free_off = free_off();
		s->desc_off = desc_off(p->nslots);
		atomic_thread_fence(memory_order_release);
		s->magic = PD_POOL_MAGIC;
	}
	return off;
}

void *pd_pool_data(const struct pd_pool *p, pd_slot_ref ref)
{
	uint32_t idx = p ? pd_pool_lidx(p, ref) : 0;
	const struct pd_slot_desc *d;

	if (!p || !p->arena || idx >= p->nslots)
		return NULL;
	d = &p->desc[idx];
	if (d->gen != PD_SLOT_REF_GEN(ref) ||
	    atomic_load_explicit(&d->state, memory_order_relaxed) == PD_SLOT_FREE)
		return NULL;
	/* Computed from the cached geometry, never from payload_off in shm. */
	return p->arena + (uint64_t)idx * p->slot_size;
}

int pd_pool_desc_get(const struct pd_pool *p, uint32_t idx, struct pd_slot_desc *out)
{
	if (!p || !out || idx - p->base >= p->nslots)
		return -EINVAL;
	memcpy(out, &p->desc[idx - p->base], sizeof(*out));
	return 0;
}

uint32_t pd_pool_nfree(const struct pd_pool *p)
{
	uint32_t n = p ? p->shm->nfree : 0;

	return p && n > p->nslots ? p->nslots : n;
}
