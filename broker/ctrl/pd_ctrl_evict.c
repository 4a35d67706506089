/* SPDX-License-Identifier: MIT */
/*
 * Down peers forgotten, so that the table cannot fill for good (a stranger
 * saying Hello under a thousand names, brokers that come and go). A peer
 * down for opts.evict_ns, or at once when the table is full and a new one
 * needs its place, that the broker no longer refers to (ops->peer_busy,
 * asked for it and each of its aliases) is evicted: its DEALER closed, what
 * was held for it dropped, the broker told once per id
 * (ops->on_peer_evicted), and its entry FREE for the next new peer, which
 * takes the lowest free id. Ids stay below max_peers, so they keep fitting
 * the broker's per-peer tables.
 *
 * A tick evicts at most PD_CTRL_EVICT_MAX peers; the rest wait for the next
 * one, so expiry never stalls the loop.
 */
#include <errno.h>
#include <string.h>

#include "pd_ctrl_int.h"
#include "pd_log.h"

static int busy_one(struct pd_ctrl *c, uint32_t id)
{
	return c->ops.peer_busy && c->ops.peer_busy(c->o.ctx, id);
}

static int busy(struct pd_ctrl *c, const struct pd_ctrl_peer *p)
{
	if (busy_one(c, p->id))
		return 1;
	for (uint32_t i = 0; c->st.aliases && i < c->npeers; i++) {
		const struct pd_ctrl_peer *q = c->peers[i];

		if (q->state == PD_CTRL_PEER_ALIAS && q->alias == p->id && busy_one(c, q->id))
			return 1;
	}
	return 0;
}

static uint64_t down_for(const struct pd_ctrl *c, const struct pd_ctrl_peer *p)
{
	return c->now_ns > p->down_ns ? c->now_ns - p->down_ns : 0;
}

static void free_entry(struct pd_ctrl *c, struct pd_ctrl_peer *p)
{
	uint32_t id = p->id;

	pd_ctrl_dealer_retire(c, p->d);
	c->st.dropped += pd_ctrl_peer_drop_queue(p);
	if (p->state != PD_CTRL_PEER_ALIAS)
		c->st.peers--;
	*p = (struct pd_ctrl_peer){ .id = id, .state = PD_CTRL_PEER_FREE };
	STAILQ_INIT(&p->q);
	c->nfree++;
	if (c->ops.on_peer_evicted)
		c->ops.on_peer_evicted(c->o.ctx, id);
}

static void evict(struct pd_ctrl *c, struct pd_ctrl_peer *p)
{
	PD_LOG(INFO, ctl, "peer %u (%s) forgotten: down for %llu ms", p->id,
	       p->has_hello ? p->hello.name : p->dialled,
	       (unsigned long long)(down_for(c, p) / 1000000u));
	for (uint32_t i = 0; c->st.aliases && i < c->npeers; i++) {
		struct pd_ctrl_peer *q = c->peers[i];

		if (q->state == PD_CTRL_PEER_ALIAS && q->alias == p->id)
			free_entry(c, q);
	}
	free_entry(c, p);
	c->st.evicted++;
}

void pd_ctrl_evict_tick(struct pd_ctrl *c)
{
	uint32_t n = 0;

	if (!c->o.evict_ns)
		return;
	for (uint32_t i = 0; i < c->npeers && n < PD_CTRL_EVICT_MAX; i++) {
		struct pd_ctrl_peer *p = c->peers[i];

		if (p->state == PD_CTRL_PEER_DOWN && down_for(c, p) >= c->o.evict_ns &&
		    !busy(c, p)) {
			evict(c, p);
			n++;
		}
	}
}

int pd_ctrl_evict_one(struct pd_ctrl *c)
{
	struct pd_ctrl_peer *best = NULL;

	for (uint32_t i = 0; i < c->npeers; i++) {
		struct pd_ctrl_peer *p = c->peers[i];

		if (p->state == PD_CTRL_PEER_DOWN && (!best || p->down_ns < best->down_ns) &&
		    !busy(c, p))
			best = p;
	}
	if (!best)
		return 0;
	evict(c, best);
	return 1;
}
