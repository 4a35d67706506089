/* SPDX-License-Identifier: MIT */
/*
 * Per-peer shares of the receiver: how many requests (live, waiting and
 * tombstoned) and how many slots of demand (need of live and waiting ones)
 * each peer holds, and the refusal of a new request past the peer's share.
 * A request is the peer's that sent its first message.
 */
#include <errno.h>
#include <stdlib.h>

#include "pd_rx_int.h"

#define DEFAULT_MAX_PEERS 1024u

int pd_rx_share_init(struct pd_rx *rx)
{
	if (!rx->o.max_peers)
		rx->o.max_peers = DEFAULT_MAX_PEERS;
	rx->peers = calloc((size_t)rx->o.max_peers + 1, sizeof(*rx->peers));
	return rx->peers ? 0 : -ENOMEM;
}

static struct rx_peer *peer_of(struct pd_rx *rx, uint32_t peer)
{
	return &rx->peers[peer < rx->o.max_peers ? peer : rx->o.max_peers];
}

static uint32_t requests_share(const struct pd_rx *rx, const struct rx_peer *p)
{
	uint32_t n = rx->npeers_req + (p->nreq == 0), cap = rx->o.peer_max_requests;

	if (cap == PD_RX_FAIR_SHARE)
		cap = rx->o.max_requests / (n + 1);
	return cap ? cap : 1;
}


int pd_rx_share_check(struct pd_rx *rx, uint32_t peer, uint32_t need)
{
	const struct rx_peer *p = peer_of(rx, peer);

	if (rx->o.peer_max_requests && p->nreq >= requests_share(rx, p)) {
		rx->st.rejected_peer_requests++;
		return -EBUSY;
	}
	if (rx->o.peer_max_slots && p->demand && (uint64_t)p->demand + need > rx->o.peer_max_slots) {
		rx->st.rejected_peer_slots++;
		return -EBUSY;
	}
	return 0;
}

void pd_rx_share_add(struct pd_rx *rx, struct rx_req *r, uint32_t peer)
{
	struct rx_peer *p = peer_of(rx, peer);

	r->owner = peer;
	r->has_demand = 1;
	rx->npeers_req += p->nreq++ == 0;
	rx->npeers_dem += p->demand == 0 && r->need;
	p->demand += r->need;
}

void pd_rx_share_end(struct pd_rx *rx, struct rx_req *r)
{
	struct rx_peer *p = peer_of(rx, r->owner);

	if (r->has_admitted) {
		r->has_admitted = 0;
		p->admitted -= r->need;
	}
	if (!r->has_demand)
		return;
	r->has_demand = 0;
	p->demand -= r->need;
	rx->npeers_dem -= p->demand == 0 && r->need;
}

void pd_rx_share_admitted(struct pd_rx *rx, struct rx_req *r)
{
	if (r->has_admitted || !r->has_demand)
		return;
	r->has_admitted = 1;
	peer_of(rx, r->owner)->admitted += r->need;
}

/* A peer's fair share of the pool while n peers have demand. */
static uint32_t pool_share(const struct pd_rx *rx)
{
	return rx->nslots / (rx->npeers_dem ? rx->npeers_dem : 1);
}

/* The request waiting first, when it waited past the preemption wait and
 * its peer holds less than its share; else NULL. */
static const struct rx_req *starving(const struct pd_rx *rx, uint64_t now_ns)
{
	const struct pd_adm_entry *e = TAILQ_FIRST(&rx->adm.waiting);
	const struct rx_req *w = e ? pd_container_of_const(e, struct rx_req, adm) : NULL;

	if (!w || now_ns < e->since_ns || now_ns - e->since_ns < PD_RX_PREEMPT_WAIT_NS)
		return NULL;
	return rx->peers[w->owner < rx->o.max_peers ? w->owner : rx->o.max_peers].admitted <
			       pool_share(rx) ? w : NULL;
}

uint32_t pd_rx_share_preempt(struct pd_rx *rx, uint64_t now_ns)
{
	const struct rx_req *w;
	struct rx_req *r, *next;
	uint64_t room;
	uint32_t n = 0, share;

	if (!rx->o.preempt_idle_ns || !(w = starving(rx, now_ns)))
		return 0;
	share = pool_share(rx);
	room = rx->adm.free - rx->adm.outstanding;
	for (r = TAILQ_FIRST(&rx->live); r && n < PD_RX_PREEMPT_MAX && room < w->need; r = next) {
		next = TAILQ_NEXT(r, order);
		if (now_ns < r->last_ns || now_ns - r->last_ns < rx->o.preempt_idle_ns)
			break; /* least recently active first: the rest moved since */
		if (r->state != RX_ACTIVE || r->in_work == WORK_DOOMED || r->owner == w->owner ||
		    peer_of(rx, r->owner)->admitted <= share)
			continue;
		rx->st.preempted++;
		room += r->need; /* its reservation comes back with its slots */
		pd_rx_doom(rx, r, -EBUSY);
		n++;
	}
	return n;
}

void pd_rx_share_free(struct pd_rx *rx, struct rx_req *r)
{
	struct rx_peer *p = peer_of(rx, r->owner);

	pd_rx_share_end(rx, r);
	rx->npeers_req -= --p->nreq == 0;
}

uint64_t *pd_rx_share_finish(struct pd_rx *rx, uint32_t peer)
{
	return &peer_of(rx, peer)->finish;
}

void pd_rx_share_get(const struct pd_rx *rx, uint32_t peer, uint32_t *nreq, uint32_t *demand)
{
	const struct rx_peer *p = &rx->peers[peer < rx->o.max_peers ? peer : rx->o.max_peers];

	*nreq = p->nreq;
	*demand = p->demand;
}
