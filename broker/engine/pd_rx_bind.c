/* SPDX-License-Identifier: MIT */
/*
 * Receiver engine: the PutDone of slots granted with the admission. A
 * Reserve's admitting answer may carry slots for the rank's first chunks
 * (pd_rx_batch.c), granted before their keys are known, so the sender
 * writes them without an AllocRequest. Its PutDone then names each slot's
 * key and length: the key is published and committed at once (the bytes
 * are in place), or, when another request already holds that key, pinned
 * as an AllocRequest would have deduplicated it, and the slot given back.
 */
#include <errno.h>
#include <string.h>

#include "pd_log.h"
#include "pd_rx_int.h"

/* Where slot sits in r's chunks (it does: r granted it). */
static uint32_t chunk_pos(const struct rx_req *r, uint32_t slot)
{
	uint32_t i = r->nchunks;

	while (i-- > 0)
		if (r->chunks[i] == slot)
			return i;
	PD_ASSERT(0);
	return 0;
}

/* The key is already another request's chunk (of slot other): r pins that
 * one instead, and its own slot, written for nothing, goes back. r drew
 * on its reservation for the slot; the pin takes that draw over, so the
 * accounting stays as it was (and the slot freed makes room). */
static int dedup(struct pd_rx *rx, struct rx_req *r, struct rx_chunk *c, uint32_t other)
{
	uint32_t slot = (uint32_t)(c - rx->chunks);

	r->chunks[chunk_pos(r, slot)] = r->chunks[--r->nchunks];
	c->refs = 0;
	pd_rx_free_slot(rx, c);
	rx->st.deduped++;
	return pd_rx_pin_chunk(rx, r, other, 0);
}

static int bind_one(struct pd_rx *rx, struct rx_req *r, struct rx_chunk *c,
		    const struct pd_rx_key *k, uint32_t len, uint64_t now_ns)
{
	uint32_t slot = (uint32_t)(c - rx->chunks);
	struct pd_index_val v;
	int rc;

	/* Named twice in this PutDone: bound already, or given back by a
	 * dedup of its first naming (checked granted before the loop, but
	 * that no longer holds for it). */
	if (c->klen || c->state != CHUNK_GRANTED || c->writer != r)
		return -EPROTO;
	if (pd_index_lookup(rx->o.index, k->p, k->len, &v) == 0) {
		const struct rx_chunk *o = v.slot < rx->nslots ? &rx->chunks[v.slot] : NULL;

		if (v.req == r->tag)
			return -EPROTO; /* a key twice in one request */
		if (!o || o->state == CHUNK_FREE || o->state == CHUNK_ZOMBIE)
			return -EBUSY; /* an old copy decode agents still read */
		return dedup(rx, r, c, v.slot);
	}
	c->len = len;
	c->klen = (uint8_t)k->len;
	memcpy(c->key, k->p, k->len);
	v = (struct pd_index_val){ .req = r->tag, .slot = slot, .gen = PD_SLOT_REF_GEN(c->ref),
				   .len = len, .state = PD_INDEX_PENDING };
	rc = pd_index_insert(rx->o.index, c->key, c->klen, &v);
	if (rc < 0)
		return rc;
	rx->st.bound++;
	pd_rx_touch(rx, r, now_ns);
	pd_rx_commit(rx, c, now_ns);
	return 0;
}

int pd_rx_bind(struct pd_rx *rx, uint32_t peer, const uint8_t *req_id, uint32_t len,
	       const int32_t *slots, const struct pd_rx_key *keys, const uint32_t *lens,
	       uint32_t n, uint64_t now_ns)
{
	struct rx_req *r;
	int rc = 0;

	if (!rx || (n && (!slots || !keys || !lens)) || (len && !req_id) || len > PD_REQ_ID_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if (!pd_rx_slot_granted(rx, peer, req_id, len, slots[i], 0) || !keys[i].p ||
		    !keys[i].len || keys[i].len > PD_KEY_MAX)
			return pd_rx_put_done_refused(rx, req_id, len, now_ns);
	if (!n)
		return 0;
	r = rx->chunks[slots[0]].writer; /* the one request of that id */
	for (uint32_t i = 0; i < n && rc == 0; i++)
		rc = bind_one(rx, r, &rx->chunks[slots[i]], &keys[i], lens[i], now_ns);
	if (rc < 0) {
		rx->st.proto_errors += rc == -EPROTO;
		pd_rx_doom(rx, r, rc);
	}
	pd_rx_check_ready(rx, r, now_ns); /* a pin of a committed chunk may complete it */
	pd_rx_settle(rx, now_ns);
	return rc;
}
