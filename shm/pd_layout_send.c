/* SPDX-License-Identifier: MIT */
/*
 * The send side of a segment: one send pool every sender shares, or
 * send_parts pools of send_slots / send_parts slots each, one per sender
 * (pd_layout_opts.send_parts). Pool k sits at k x pool_stride in the send
 * pool region, its arena at k x arena_stride in the send arena, each on
 * pages of their own (2 MiB ones for the arena, whatever backs it), and
 * its slots are named from k x per on: a reference says which pool it is
 * of, and the broker moves every pool's slots from one arena.
 */
#include <errno.h>
#include <sys/mman.h>

#include "pd_attach_proto.h"
#include "pd_layout_int.h"
#include "pd_shm_layout.h"

int pd_layout_send_geo(uint32_t slots, uint32_t parts, uint64_t slot_size,
		       struct pd_send_geo *g)
{
	int64_t pm, am;

	g->parts = parts ? parts : 1;
	if (g->parts > PD_SEND_PARTS_MAX || slots % g->parts)
		return -EINVAL;
	g->per = slots / g->parts;
	pm = pd_pool_memsize(g->per);
	am = pd_pool_arena_size(g->per, slot_size);
	if (pm < 0 || am < 0)
		return -EINVAL;
	/* One pool keeps the layout it always had. */
	g->pool_stride = g->parts == 1 ? (uint64_t)pm : PD_ALIGN_UP((uint64_t)pm,
								   (uint64_t)PD_REGION_PAGE);
	g->arena_stride = g->parts == 1 ? (uint64_t)am : PD_ALIGN_UP((uint64_t)am,
								    (uint64_t)PD_ARENA_ALIGN);
	return 0;
}

int pd_layout_send_init(struct pd_segment *seg, const struct pd_layout_opts *o)
{
	struct pd_send_geo g;
	size_t len;
	uint8_t *mem = pd_segment_region(seg, PD_REGION_SEND_POOL, &len);
	int rc = pd_layout_send_geo(o->send_slots, o->send_parts, o->slot_size, &g);

	if (rc == 0 && (!mem || len < g.parts * g.pool_stride))
		rc = -ENOSPC;
	for (uint32_t k = 0; rc == 0 && k < g.parts; k++)
		rc = pd_pool_init_at(mem + k * g.pool_stride, (size_t)g.pool_stride, g.per,
				     o->slot_size, k * g.per);
	return rc;
}

/* Pool k of g: with the geometry of the agent table (trusted), or
 * checked against the one pool 0's header gave (an older broker's). */
static int open_part(struct pd_shm *s, uint32_t k, const struct pd_send_geo *g,
		     uint64_t slot_size, int trusted, uint8_t *pmem, uint8_t *amem)
{
	struct pd_pool *p = &s->send_part[k];
	void *mem = pmem + k * g->pool_stride, *arena = amem ? amem + k * g->arena_stride : NULL;
	int rc = trusted ? pd_pool_open_as(p, mem, (size_t)g->pool_stride, arena,
					   (size_t)g->arena_stride, g->per, slot_size, k * g->per) :
			   pd_pool_open(p, mem, (size_t)g->pool_stride, arena,
					(size_t)g->arena_stride);

	if (rc == 0 && (p->nslots != g->per || p->base != k * g->per || p->slot_size != slot_size))
		rc = -EPROTO;
	return rc < 0 ? -EPROTO : 0;
}

/* The pools' geometry: the agent table's, or (an older broker, whose
 * table has none) pool 0's header's. 1 trusted, 0 from the header, or
 * -EPROTO. */
static int geometry(const struct pd_agent_table *t, uint8_t *pmem, size_t plen,
		    struct pd_send_geo *g, uint64_t *slot_size)
{
	struct pd_pool first;
	uint32_t parts = t->send_parts, per = t->send_per;
	int trusted = per != 0;

	*slot_size = (uint64_t)t->send_slot_pages * PD_REGION_PAGE;
	if (!trusted) {
		if (pd_pool_open(&first, pmem, plen, NULL, 0) < 0)
			return -EPROTO;
		per = first.nslots;
		*slot_size = first.slot_size;
	}
	if ((uint64_t)per * (parts ? parts : 1) > UINT32_MAX ||
	    pd_layout_send_geo(per * (parts ? parts : 1), parts, *slot_size, g) < 0)
		return -EPROTO;
	return trusted;
}

int pd_layout_send_open(struct pd_segment *seg, const struct pd_agent_table *t,
			struct pd_shm *s)
{
	size_t plen, alen;
	uint8_t *pmem = pd_segment_region(seg, PD_REGION_SEND_POOL, &plen);
	uint8_t *amem = pd_segment_region(seg, PD_REGION_SEND_ARENA, &alen);
	struct pd_send_geo g;
	uint64_t slot_size;
	int trusted;

	s->has_send = 0;
	s->send_parts = 0;
	if (!pmem && !alen)
		return 0;
	/* amem is NULL only for an arena file not mapped here (pdctl): the
	 * pools, without their payload. */
	if (!pmem || !alen)
		return -EPROTO;
	trusted = geometry(t, pmem, plen, &g, &slot_size);
	if (trusted < 0 || plen < g.parts * g.pool_stride || alen < g.parts * g.arena_stride)
		return -EPROTO;
	for (uint32_t k = 0; k < g.parts; k++)
		if (open_part(s, k, &g, slot_size, trusted, pmem, amem) < 0)
			return -EPROTO;
	s->send_parts = g.parts;
	s->send_pool_stride = g.pool_stride;
	s->send_arena_stride = g.arena_stride;
	s->has_send = 1;
	return 0;
}

int pd_layout_send_part(const struct pd_shm *s, pd_slot_ref ref)
{
	uint32_t k;

	if (!s || !s->has_send || !s->send_part[0].nslots)
		return -EINVAL;
	k = PD_SLOT_REF_IDX(ref) / s->send_part[0].nslots;
	return k < s->send_parts ? (int)k : -EINVAL;
}

struct pd_pool *pd_layout_send_pool(struct pd_shm *s, pd_slot_ref ref)
{
	int k = pd_layout_send_part(s, ref);

	return k < 0 ? NULL : &s->send_part[k];
}

void pd_layout_send_users(const struct pd_shm *s, uint32_t skip, uint32_t *n)
{
	for (uint32_t k = 0; k < s->send_parts; k++)
		n[k] = 0;
	for (uint32_t i = 0; i < s->max_agents; i++) {
		const struct pd_agent_slot *o = &s->agents->slot[i];

		if (i + 1 != skip && (o->roles & PD_ROLE_SEND) && o->send_part < s->send_parts &&
		    atomic_load_explicit(&o->state, memory_order_relaxed) != PD_AGENT_FREE)
			n[o->send_part]++;
	}
}

uint32_t pd_layout_send_slots(const struct pd_shm *s)
{
	return s && s->has_send ? s->send_parts * s->send_part[0].nslots : 0;
}

uint64_t pd_layout_send_arena_len(const struct pd_shm *s)
{
	const struct pd_pool *p = s && s->has_send ? &s->send_part[0] : NULL;

	return p ? (s->send_parts - 1) * s->send_arena_stride + p->nslots * p->slot_size : 0;
}

/* mprotect [p, p + len) of a region, each end on a page of size page. */
static int protect(void *p, uint64_t len, uint64_t page, int prot)
{
	if ((uintptr_t)p % page || len % page)
		return -ENOTSUP;
	return len && mprotect(p, (size_t)len, prot) ? -errno : 0;
}

int pd_layout_send_own(struct pd_shm *s, uint32_t part)
{
	int rc = 0;

	if (!s || !s->has_send || part >= s->send_parts)
		return -EINVAL;
	s->send = &s->send_part[part];
	for (uint32_t k = 0; rc == 0 && s->send_parts > 1 && k < s->send_parts; k++) {
		if (k == part)
			continue;
		rc = protect(s->send_part[k].shm, s->send_pool_stride, PD_REGION_PAGE, PROT_READ);
		if (rc == 0 && s->send_part[k].arena)
			rc = protect(s->send_part[k].arena, s->send_arena_stride, PD_REGION_PAGE,
				     PROT_NONE); /* 2 MiB multiples: whole hugetlb pages */
	}
	return rc;
}
