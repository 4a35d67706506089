/* SPDX-License-Identifier: MIT */
/*
 * pdbroker, receiving side of the data transports: the length of every
 * chunk granted (from the AllocRequest, or kept while its batch is held
 * for admission), and the PutDone vetted against the per-slot grant words
 * (see pd_broker_int.h, GRANT_*): with an unseen transport (shm, rdma)
 * the receiver never sees the bytes arrive, so the PutDone is the signal,
 * and the trust.
 */
#include <stdlib.h>
#include <string.h>

#include "pd_broker_int.h"
#include "pd_time.h"

/* Granted: remember each chunk's length (the PutDone of an shm write is
 * the only time its bytes are counted). The lengths come from the
 * AllocRequest being handled, or from the one held for admission.
 * @return 1 when they were said, 0 when not (a Reserve's grants, LMCache). */
int pd_broker_lens_granted(struct pd_broker *b, uint32_t peer, uint64_t seq, const int32_t *remote,
			 uint32_t n)
{
	const struct pd_msg_alloc_req *q = b->cur_req;
	const uint32_t *lens = NULL;
	struct held_lens *h = NULL;
	uint32_t nl = 0;

	if (q && b->cur_peer == peer && q->has_seq && q->seq == seq) {
		lens = q->lens;
		nl = q->nkeys;
	} else {
		for (h = LIST_FIRST(&b->held); h && (h->peer != peer || h->seq != seq);)
			h = LIST_NEXT(h, link);
		if (h) {
			lens = h->lens;
			nl = h->n;
			LIST_REMOVE(h, link);
		}
	}
	for (uint32_t i = 0; lens && i < n && i < nl; i++)
		if (remote[i] >= 0 && (uint32_t)remote[i] < b->shm.recv.nslots)
			atomic_store_explicit(&b->slot_len[remote[i]], lens[i], memory_order_relaxed);
	free(h);
	return lens != NULL;
}

void pd_broker_lens_hold(struct pd_broker *b, uint32_t peer, const struct pd_msg_alloc_req *q)
{
	struct held_lens *h;

	if (!q->has_seq || !q->lens)
		return;
	h = malloc(sizeof(*h) + q->nkeys * sizeof(h->lens[0]));
	if (!h)
		return; /* its bytes go uncounted, nothing worse */
	*h = (struct held_lens){ .peer = peer, .seq = q->seq, .n = q->nkeys };
	memcpy(h->lens, q->lens, q->nkeys * sizeof(h->lens[0]));
	LIST_INSERT_HEAD(&b->held, h, link);
}

/* The transports this peer may have written our arena through unseen:
 * accepted connections of an unseen transport (rdma), or one it needs none
 * for (shm on this host). */
static uint32_t unseen_from(const struct pd_broker *b, uint32_t peer)
{
	if (peer >= MAX_TOKENS)
		return 0;
	return atomic_load(&b->unseen_in[peer]) | b->px[peer].admitted;
}

/* The id of the lowest bit of mask (mask != 0). */
static uint32_t first_of(uint32_t mask)
{
	return (uint32_t)__builtin_ctz(mask);
}

/*
 * A PutDone: its slots' data is in place. Only slots granted to this very
 * peer, in its current session, at the generation the PutDone names, are
 * released from their grant (a PutDone naming another peer's slot leaves
 * it alone; any mismatch is refused, and the receiver engine rolls the
 * request back). A slot no write we saw landed in was written through an unseen transport,
 * which only a peer that transport lets write us can do (see
 * unseen_from()): from any other peer that PutDone claims bytes that never
 * arrived, and is refused the same way. Unseen bytes are counted here
 * (seen ones were counted as they landed).
 */
/* Slot s's grant as PutDone entry i names it: this peer, its current
 * session, the generation the PutDone carries (when it carries one). */
static int put_done_grant(uint32_t peer, uint32_t sess, const struct pd_msg_put_done *d,
			  uint32_t i, uint64_t g)
{
	return (g & GRANT_PEER) == peer + 1u && GRANT_SESS(g) == sess &&
	       (!d->gens || GRANT_GEN(g) == d->gens[i]);
}

/* A PutDone that binds keys (slots granted with the admission) names each
 * chunk's length: within a slot, and the length its write landed with
 * (fixed by that write's claim) when we saw it land. */
static int bind_len_ok(const struct pd_broker *b, const struct pd_msg_put_done *d, uint32_t i,
		       int32_t s, uint64_t g)
{
	if (!d->keys)
		return 1;
	if (d->lens[i] > b->shm.recv.slot_size)
		return 0;
	return !(g & GRANT_LANDED) || atomic_load(&b->slot_len[s]) == d->lens[i];
}

/* Hand the vetted PutDone (idx: its slots, -1 where refused) to the engine. */
static int engine_put_done(struct pd_broker *b, uint32_t peer, const struct pd_msg_put_done *d,
			   const int32_t *idx, uint32_t n)
{
	struct pd_rx_key *keys = b->sc_rxkeys;

	if (!d->keys)
		return pd_rx_put_done(b->rx, peer, d->req_id.p, d->req_id.len, idx, n, pd_now_ns());
	for (uint32_t i = 0; i < n; i++)
		keys[i] = (struct pd_rx_key){ .p = d->keys[i].p, .len = d->keys[i].len };
	return pd_rx_bind(b->rx, peer, d->req_id.p, d->req_id.len, idx, keys, d->lens, n,
			  pd_now_ns());
}

void pd_broker_put_done(struct pd_broker *b, uint32_t peer, const struct pd_msg_put_done *d)
{
	uint32_t via = unseen_from(b, peer), sess = peer < MAX_TOKENS ? b->sess[peer] : 0;
	uint64_t bytes = 0, chunks = 0;
	int32_t *idx = b->sc_idx;

	for (uint32_t i = 0; i < d->n && i < PD_WIRE_MAX_KEYS; i++) {
		int32_t s = idx[i] = d->indexes[i];
		uint64_t g;

		if (!b->rx || s < 0 || (uint32_t)s >= b->shm.recv.nslots)
			continue;
		g = atomic_load(&b->grant[s]);
		if ((g & GRANT_PEER) != peer + 1)
			continue; /* another peer's: left alone (the engine refuses it) */
		if (!put_done_grant(peer, sess, d, i, g) || (!(g & GRANT_LANDED) && !via) ||
		    !bind_len_ok(b, d, i, s, g)) {
			idx[i] = -1; /* refused: not this grant, nothing landed, another length */
			pd_stat_add(&b->refused_writes, 1);
			continue;
		}
		if (!(g & GRANT_LANDED)) {
			chunks++;
			bytes += d->keys ? d->lens[i] :
					   atomic_load_explicit(&b->slot_len[s], memory_order_relaxed);
		}
		/* counted once; never a stale length for the next grant */
		atomic_store_explicit(&b->slot_len[s], 0, memory_order_relaxed);
		atomic_store(&b->grant[s], 0);
	}
	if (!b->rx || engine_put_done(b, peer, d, idx,
				      d->n < PD_WIRE_MAX_KEYS ? d->n : PD_WIRE_MAX_KEYS) < 0 ||
	    peer >= MAX_TOKENS)
		return;
	b->px[peer].recv = (chunks ? first_of(via) : PD_XPORT_TCP) + 1;
	pd_stat_add(&b->shm.seg.hdr->stats[PD_STAT_BYTES_RECV], bytes);
	pd_stat_add(&b->acct[peer].bytes_rx, bytes);
	pd_stat_add(&b->acct[peer].chunks_rx, chunks);
}
