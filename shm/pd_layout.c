/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <sys/mman.h>
#include <string.h>

#include "pd_err.h"
#include "pd_layout_int.h"

static uint64_t align64(uint64_t v)
{
	return PD_ALIGN_UP(v, (uint64_t)PD_CACHE_LINE);
}

static uint64_t align_page(uint64_t v)
{
	return PD_ALIGN_UP(v, (uint64_t)PD_REGION_PAGE);
}

static uint32_t auto_buckets(uint32_t recv_slots)
{
	uint32_t b = 64;

	while (b < 2ull * recv_slots && b < PD_INDEX_MAX_BUCKETS)
		b <<= 1;
	return b;
}

/* Geometry of the agents region (offsets from the table). */
struct agents_geo {
	uint64_t sq, cq;            /* one ring of each kind */
	uint64_t rings_off;
	uint64_t pins_off;
	uint32_t pins;              /* journal cells per agent slot */
};

/* Journal cells per agent for o: none without a recv pool; -EINVAL above the cap. */
static int64_t pins_for(const struct pd_layout_opts *o)
{
	uint64_t n = o->pins_per_agent;

	if (o->recv_slots == 0)
		return 0;
	if (n == 0) {
		n = 2ull * o->recv_slots;
		n = n < PD_PINS_MIN ? PD_PINS_MIN : n > PD_PINS_MAX ? PD_PINS_MAX : n;
	}
	n = PD_ALIGN_UP(n, (uint64_t)PD_PINS_ROUND); /* each journal on pages of its own */
	return n <= PD_PINS_MAX ? (int64_t)n : -EINVAL;
}

/* Region bytes for max_agents, the ring entries of o and pins cells per agent. */
static int64_t agents_len(const struct pd_layout_opts *o, int64_t pins, struct agents_geo *g)
{
	int64_t s = pd_ring_memsize(o->sq_entries, sizeof(struct pd_sqe));
	int64_t c = pd_ring_memsize(o->cq_entries, sizeof(struct pd_cqe));

	if (s < 0 || c < 0 || o->max_agents == 0 || o->max_agents > PD_MAX_AGENTS || pins < 0 ||
	    pins > PD_PINS_MAX)
		return -EINVAL;
	/* Each agent's ring pair and journal on pages of their own, so the agent
	 * maps them, and only them, writable (pd_layout_protect_agents()). */
	g->sq = align_page((uint64_t)s);
	g->cq = align_page((uint64_t)c);
	g->rings_off = align_page(sizeof(struct pd_agent_table) +
				  (uint64_t)o->max_agents * sizeof(struct pd_agent_slot));
	g->pins_off = g->rings_off + o->max_agents * (g->sq + g->cq); /* page aligned */
	g->pins = (uint32_t)pins;
	return (int64_t)align_page(g->pins_off +
				   (uint64_t)o->max_agents * g->pins * sizeof(_Atomic uint64_t));
}

/* Region lengths for o; -EINVAL with err set when o is unusable. */
static int plan(const struct pd_layout_opts *o, struct pd_segment_opts *so, char *err,
		size_t errlen)
{
	struct agents_geo g;
	int64_t v[PD_REGION_MAX] = { 0 };

	if (o->send_slots == 0 && o->recv_slots == 0) {
		pd_err_set(err, errlen, "neither send nor recv slots");
		return -EINVAL;
	}
	if (o->send_slots) {
		struct pd_send_geo sg;

		if (pd_layout_send_geo(o->send_slots, o->send_parts, o->slot_size, &sg) < 0) {
			pd_err_set(err, errlen, "%u send slots cannot make %u send pools of "
				   "equal size (at most %u pools)", o->send_slots, o->send_parts,
				   PD_SEND_PARTS_MAX);
			return -EINVAL;
		}
		v[PD_REGION_SEND_POOL] = (int64_t)(sg.parts * sg.pool_stride);
		v[PD_REGION_SEND_ARENA] = (int64_t)(sg.parts * sg.arena_stride);
	}
	if (o->recv_slots) {
		v[PD_REGION_RECV_POOL] = pd_pool_memsize(o->recv_slots);
		v[PD_REGION_RECV_ARENA] = pd_pool_arena_size(o->recv_slots, o->slot_size);
		v[PD_REGION_RECV_INDEX] = pd_index_memsize(o->index_buckets ?
							   o->index_buckets :
							   auto_buckets(o->recv_slots));
	}
	v[PD_REGION_AGENTS] = agents_len(o, pins_for(o), &g);
	v[PD_REGION_STATS] = (int64_t)align64(sizeof(struct pd_stats));
	for (uint32_t i = 0; i < PD_REGION_MAX; i++) {
		if (v[i] < 0) {
			pd_err_set(err, errlen, "bad geometry for region %u (slots, slot "
				   "size, index buckets, agents, ring entries or pins)", i);
			return -EINVAL;
		}
		so->region_len[i] = (uint64_t)v[i];
	}
	return 0;
}

static void init_agents(struct pd_agent_table *t, const struct pd_layout_opts *o)
{
	struct agents_geo g;

	(void)agents_len(o, pins_for(o), &g); /* plan() checked it */
	t->max_agents = o->max_agents;
	t->sq_entries = o->sq_entries;
	t->cq_entries = o->cq_entries;
	t->sq_bytes = g.sq;
	t->cq_bytes = g.cq;
	t->rings_off = g.rings_off;
	t->pins_per_agent = g.pins;
	t->pins_off = g.pins_off;
	t->send_parts = o->send_slots && o->send_parts ? o->send_parts : 1;
	t->send_per = o->send_slots / t->send_parts;
	t->send_slot_pages = o->send_slots ? (uint32_t)(o->slot_size / PD_REGION_PAGE) : 0;
	memset((uint8_t *)t + g.pins_off, 0,
	       (size_t)o->max_agents * g.pins * sizeof(_Atomic uint64_t));
	t->magic = PD_AGENTS_MAGIC;
}

static int init_regions(struct pd_segment *seg, const struct pd_layout_opts *o)
{
	size_t len;
	void *mem;
	int rc = 0;

	if (o->send_slots)
		rc = pd_layout_send_init(seg, o);
	if (rc == 0 && o->recv_slots) {
		mem = pd_segment_region(seg, PD_REGION_RECV_POOL, &len);
		rc = pd_pool_init(mem, len, o->recv_slots, o->slot_size);
	}
	if (rc == 0 && o->recv_slots) {
		mem = pd_segment_region(seg, PD_REGION_RECV_INDEX, &len);
		rc = pd_index_init(mem, len, o->index_buckets ? o->index_buckets :
					     auto_buckets(o->recv_slots), 64, o->index_seed);
	}
	if (rc == 0) {
		init_agents(pd_segment_region(seg, PD_REGION_AGENTS, &len), o);
		pd_stats_init(pd_segment_region(seg, PD_REGION_STATS, &len));
	}
	return rc;
}

int pd_layout_create(const struct pd_layout_opts *o, struct pd_shm *out, char *err,
		     size_t errlen)
{
	struct pd_segment_opts so = { 0 };
	struct pd_segment seg;
	int rc;

	if (!o || !out)
		return -EINVAL;
	rc = plan(o, &so, err, errlen);
	if (rc < 0)
		return rc;
	so.name = o->name;
	so.epoch = o->epoch;
	so.mode = o->mode;
	so.hugepages = o->hugepages;
	rc = pd_segment_create(&so, &seg, err, errlen);
	if (rc < 0)
		return rc;
	rc = init_regions(&seg, o);
	if (rc == 0)
		rc = pd_layout_open(&seg, out, err, errlen);
	for (uint32_t id = 0; rc == 0 && id < out->max_agents; id++)
		rc = pd_layout_rings_reset(out, id);
	if (rc < 0) {
		pd_err_set(err, errlen, "cannot initialise the segment: %s", pd_strerror(rc));
		pd_segment_destroy(&seg);
	}
	return rc;
}

static int open_pool(struct pd_segment *seg, uint32_t pool_id, uint32_t arena_id,
		     struct pd_pool *p, uint32_t *has)
{
	size_t plen, alen;
	void *pmem = pd_segment_region(seg, pool_id, &plen);
	void *amem = pd_segment_region(seg, arena_id, &alen);

	*has = 0;
	if (!pmem && !alen)
		return 0;
	/* amem is NULL only for an arena file not mapped here (pdctl): the
	 * pool, without its payload. */
	if (!pmem || !alen || pd_pool_open(p, pmem, plen, amem, alen) < 0)
		return -EPROTO;
	*has = 1;
	return 0;
}

/* Copy the agent table's geometry once, then check that copy. A table
 * with no journal (pins_per_agent 0, as older brokers wrote it) is valid:
 * its pins_off is then never used. */
static int open_agents(struct pd_segment *seg, struct pd_shm *s)
{
	const volatile struct pd_agent_table *t;
	struct pd_layout_opts o = { 0 };
	struct agents_geo g;
	uint64_t sq, cq, roff, poff;
	uint32_t pins;
	int64_t need;

	s->agents = pd_segment_region(seg, PD_REGION_AGENTS, &s->agents_len);
	t = s->agents;
	if (!t || s->agents_len < sizeof(*t) || t->magic != PD_AGENTS_MAGIC)
		return -EPROTO;
	o.max_agents = t->max_agents;
	o.sq_entries = t->sq_entries;
	o.cq_entries = t->cq_entries;
	pins = t->pins_per_agent;
	sq = t->sq_bytes;
	cq = t->cq_bytes;
	roff = t->rings_off;
	poff = t->pins_off;
	need = agents_len(&o, pins, &g);
	if (need < 0 || (uint64_t)need > s->agents_len || sq != g.sq || cq != g.cq ||
	    roff != g.rings_off || (pins && poff != g.pins_off))
		return -EPROTO;
	s->max_agents = o.max_agents;
	s->sq_entries = o.sq_entries;
	s->cq_entries = o.cq_entries;
	s->sq_bytes = g.sq;
	s->cq_bytes = g.cq;
	s->rings_off = g.rings_off;
	s->pins_per_agent = g.pins;
	s->pins_off = g.pins_off;
	return 0;
}

/* The index scans the journals of attached agent slots for hazards. */
static void set_journals(struct pd_shm *s)
{
	struct pd_index_journals j = { .owner = &s->agents->slot[0].state,
				       .owner_stride = sizeof(struct pd_agent_slot),
				       .njournals = s->max_agents,
				       .ncells = s->pins_per_agent };

	if (s->pins_per_agent == 0)
		return;
	j.cells = pd_layout_pins(s, 0);
	pd_index_set_journals(&s->index, &j);
}

int pd_layout_open(struct pd_segment *seg, struct pd_shm *out, char *err, size_t errlen)
{
	struct pd_shm s = { 0 };
	size_t len;
	void *mem;
	int rc;

	if (!seg || !out)
		return -EINVAL;
	rc = open_agents(seg, &s);
	if (rc == 0)
		rc = pd_layout_send_open(seg, s.agents, &s);
	if (rc == 0)
		rc = open_pool(seg, PD_REGION_RECV_POOL, PD_REGION_RECV_ARENA, &s.recv,
			       &s.has_recv);
	if (rc == 0 && s.has_recv) {
		mem = pd_segment_region(seg, PD_REGION_RECV_INDEX, &len);
		rc = mem ? pd_index_open(&s.index, mem, len) : -EPROTO;
	}
	if (rc == 0 && s.has_recv)
		set_journals(&s);
	if (rc == 0) {
		s.stats = pd_segment_region(seg, PD_REGION_STATS, &len);
		if (!s.stats || len < sizeof(*s.stats))
			rc = -EPROTO;
	}
	if (rc < 0) {
		pd_err_set(err, errlen, "segment regions missing or corrupt");
		return -EPROTO;
	}
	s.seg = *seg;
	*out = s;
	out->send = out->has_send ? &out->send_part[0] : NULL; /* into the copy */
	return 0;
}

static void *ring_mem(struct pd_shm *s, uint32_t id, int cq)
{
	uint64_t off = s->rings_off + (uint64_t)id * (s->sq_bytes + s->cq_bytes);

	return (uint8_t *)s->agents + off + (cq ? s->sq_bytes : 0);
}

int pd_layout_rings(struct pd_shm *s, uint32_t id, struct pd_ring_view *sq,
		    struct pd_ring_view *cq)
{
	int rc;

	if (!s || !sq || !cq || id >= s->max_agents)
		return -EINVAL;
	rc = pd_ring_view_init(sq, ring_mem(s, id, 0), s->sq_bytes);
	if (rc == 0)
		rc = pd_ring_view_init(cq, ring_mem(s, id, 1), s->cq_bytes);
	return rc;
}

int pd_layout_rings_reset(struct pd_shm *s, uint32_t id)
{
	int rc;

	if (!s || id >= s->max_agents)
		return -EINVAL;
	rc = pd_ring_init(ring_mem(s, id, 0), s->sq_bytes, s->sq_entries, sizeof(struct pd_sqe));
	if (rc == 0)
		rc = pd_ring_init(ring_mem(s, id, 1), s->cq_bytes, s->cq_entries,
				  sizeof(struct pd_cqe));
	return rc;
}

_Atomic uint64_t *pd_layout_pins(struct pd_shm *s, uint32_t id)
{
	if (!s || !s->agents || id >= s->max_agents || s->pins_per_agent == 0)
		return NULL;
	return (_Atomic uint64_t *)((uint8_t *)s->agents + s->pins_off) +
	       (uint64_t)id * s->pins_per_agent;
}

/* mprotect the pages of [p, p + len) (page aligned) to prot. */
static int protect(void *p, uint64_t len, int prot)
{
	if ((uintptr_t)p % PD_REGION_PAGE || len % PD_REGION_PAGE)
		return -ENOTSUP;
	return len && mprotect(p, (size_t)len, prot) ? -errno : 0;
}

int pd_layout_protect_agents(struct pd_shm *s, uint32_t id)
{
	uint64_t jlen;
	int rc;

	if (!s || !s->agents || id >= s->max_agents)
		return -EINVAL;
	jlen = (uint64_t)s->pins_per_agent * sizeof(_Atomic uint64_t);
	if (s->agents_len % PD_REGION_PAGE || s->rings_off % PD_REGION_PAGE ||
	    (s->sq_bytes + s->cq_bytes) % PD_REGION_PAGE || jlen % PD_REGION_PAGE ||
	    (jlen && s->pins_off % PD_REGION_PAGE))
		return -ENOTSUP; /* laid out before journals and rings had pages of their own */
	rc = protect((void *)(uintptr_t)s->agents, s->agents_len, PROT_READ);
	if (rc == 0)
		rc = protect(ring_mem(s, id, 0), s->sq_bytes + s->cq_bytes, PROT_READ | PROT_WRITE);
	if (rc == 0 && jlen)
		rc = protect(pd_layout_pins(s, id), jlen, PROT_READ | PROT_WRITE);
	return rc;
}

uint32_t pd_layout_pins_count(const struct pd_shm *s)
{
	return s ? s->pins_per_agent : 0;
}

int pd_layout_pins_reclaim(struct pd_shm *s, uint32_t id, uint32_t *dropped)
{
	_Atomic uint64_t *cell = pd_layout_pins(s, id);
	uint32_t n = 0;

	if (!s || id >= s->max_agents)
		return -EINVAL;
	for (uint32_t i = 0; cell && i < s->pins_per_agent; i++)
		n += atomic_exchange_explicit(&cell[i], 0, memory_order_acq_rel) != 0;
	if (dropped)
		*dropped = n;
	return 0;
}

void pd_layout_close(struct pd_shm *s)
{
	if (!s)
		return;
	pd_segment_destroy(&s->seg);
	s->agents = NULL;
}
