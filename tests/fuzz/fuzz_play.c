/* SPDX-License-Identifier: MIT */
/* The agents and peers around the fuzz targets' broker (see fuzz_play.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_ctrl.h"
#include "fuzz_play.h"

#define MAX_KEYS 64u

/* ---- agents -------------------------------------------------------------------------- */

static uint8_t set_str(uint8_t *dst, size_t cap, const char *s)
{
	size_t n = strlen(s) < cap ? strlen(s) : cap;

	memcpy(dst, s, n);
	return (uint8_t)n;
}

void fzp_put(struct pd_sqe *e, uint32_t op, const char *req, uint32_t n, uint32_t total,
	     uint32_t last)
{
	struct pd_sqe_put *p = &e->u.put;

	memset(e, 0, sizeof(*e));
	e->op = op;
	e->arg = op == PD_SQ_DECLARE ? 60000 : 0;
	*p = (struct pd_sqe_put){ .n = n, .total_chunks = total, .world_size = 1, .last = last };
	p->req_id_len = set_str(p->req_id, PD_REQ_ID_MAX, req);
	p->endpoint_len = set_str(p->endpoint, PD_ENDPOINT_MAX, FZP_RECEIVER);
}

void fzp_chunk(struct pd_sqe *e, pd_slot_ref slot, const char *key)
{
	memset(e, 0, sizeof(*e));
	e->op = PD_SQ_CHUNK;
	e->u.chunk.slot = slot;
	e->u.chunk.len = FZP_CHUNK;
	e->u.chunk.klen = set_str(e->u.chunk.key, PD_KEY_MAX, key);
}

void fzp_req(struct pd_sqe *e, uint32_t op, const char *req, uint32_t arg)
{
	memset(e, 0, sizeof(*e));
	e->op = op;
	e->arg = arg;
	e->u.req.req_id_len = set_str(e->u.req.req_id, PD_REQ_ID_MAX, req);
}

int fzp_submit(struct fzb *f, struct fzb_agent *a, const struct pd_sqe *e, uint32_t n)
{
	int rc = fzb_alive(a) ? pd_ring_enqueue_bulk_sp(&a->sq, e, n) : -ENOTCONN;

	fzb_turns(f, 1);
	return rc < 0 ? rc : rc == 0 && n ? -ENOSPC : 0;
}

int fzp_loan(struct fzb *f, const struct fzb_agent *a, uint32_t n, pd_slot_ref *out)
{
	struct pd_pool_who who = { .owner = a->id, .pid = (int32_t)getpid(), .tag = 1,
				   .state = PD_SLOT_LOANED };

	return pd_pool_alloc(f->b->shm.send, &who, n, 0, out);
}

/* ---- the receiver the agents send to ---------------------------------------------------- */

void fzp_answer(struct fzb *f, uint32_t type, int32_t err)
{
	static int32_t idx[PD_WIRE_MAX_KEYS];
	struct pd_msg m = { .type = PD_MSG_ALLOC_RESP };
	uint32_t peer;
	const struct pd_msg *q = fzc_last(f->b->ctrl, type, &peer);

	if (!q || (type != PD_MSG_ALLOC_REQ && type != PD_MSG_RESERVE))
		return;
	m.u.alloc_resp.seq = type == PD_MSG_RESERVE ? q->u.reserve.seq : q->u.alloc_req.seq;
	m.u.alloc_resp.has_seq = 1;
	m.u.alloc_resp.err = err;
	if (!err && type == PD_MSG_ALLOC_REQ) {
		m.u.alloc_resp.n = q->u.alloc_req.nkeys;
		for (uint32_t i = 0; i < m.u.alloc_resp.n; i++)
			idx[i] = (int32_t)i;
		m.u.alloc_resp.remote_indexes = idx;
	}
	pd_broker_ctrl_ops.on_msg(f->b, peer, &m);
	pd_broker_fail_unreachable(f->b);
}

/* ---- peers that send to this broker ------------------------------------------------------ */

uint32_t fzp_sender(struct fzb *f, uint32_t i)
{
	char ep[64];
	uint32_t peer = 0;
	int rc;

	(void)snprintf(ep, sizeof(ep), "tcp://10.0.1.%u:17500", i + 1);
	rc = pd_ctrl_peer(f->b->ctrl, ep, &peer);
	if (rc < 0)
		fzb_die("a sender peer", rc);
	fzb_turns(f, 1); /* up */
	return peer;
}

static void deliver(struct fzb *f, uint32_t peer, const struct pd_msg *m)
{
	pd_broker_ctrl_ops.on_msg(f->b, peer, m);
	pd_broker_fail_unreachable(f->b);
}

/* The slots and generations of the last AllocResponse of seq to peer. */
static uint32_t granted(struct fzb *f, uint32_t peer, uint64_t seq, int32_t *slots,
			uint32_t *gens)
{
	uint32_t to;
	const struct pd_msg *m = fzc_last(f->b->ctrl, PD_MSG_ALLOC_RESP, &to);
	const struct pd_msg_alloc_resp *r = m ? &m->u.alloc_resp : NULL;

	if (!r || to != peer || !r->has_seq || r->seq != seq || r->err)
		return 0;
	for (uint32_t i = 0; i < r->n; i++) {
		slots[i] = r->remote_indexes[i];
		gens[i] = r->remote_gens ? r->remote_gens[i] : 0;
	}
	return r->n;
}

uint32_t fzp_alloc(struct fzb *f, uint32_t peer, uint64_t seq, const char *req, uint32_t first,
		   uint32_t n, uint32_t total, int32_t *slots, uint32_t *gens)
{
	char name[MAX_KEYS][PD_REQ_ID_MAX + 8];
	struct pd_bytes keys[MAX_KEYS];
	uint32_t lens[MAX_KEYS];
	struct pd_msg m = { .type = PD_MSG_ALLOC_REQ };

	n = n < MAX_KEYS ? n : MAX_KEYS;
	for (uint32_t i = 0; i < n; i++) {
		int len = snprintf(name[i], sizeof(name[i]), "%s.%u", req, first + i);

		keys[i] = (struct pd_bytes){ (const uint8_t *)name[i], (uint32_t)len };
		lens[i] = FZP_CHUNK;
	}
	m.u.alloc_req = (struct pd_msg_alloc_req){
		.seq = seq, .has_seq = 1, .req_id = { (const uint8_t *)req, (uint32_t)strlen(req) },
		.nkeys = n, .keys = keys, .lens = lens, .total_chunks = total, .world_size = 1,
		.is_last_batch = first + n == total };
	deliver(f, peer, &m);
	return granted(f, peer, seq, slots, gens);
}

/* Bytes into a granted slot, as the tcp transport's data thread lands them. */
static void land(struct fzb *f, uint32_t peer, int32_t slot, uint32_t gen)
{
	uint32_t lane = LANE_ID(peer, f->b->sess[peer]);
	uint64_t cap;
	void *dst;

	if (slot < 0 || pd_broker_up_ops.claim(f->b, lane, (uint32_t)slot, gen, FZP_CHUNK, &dst,
					       &cap) < 0)
		return;
	memset(dst, 0x5a, FZP_CHUNK);
	pd_broker_up_ops.landed(f->b, lane, (uint32_t)slot, gen, FZP_CHUNK, 0);
}

void fzp_put_done(struct fzb *f, uint32_t peer, uint64_t seq, const char *req,
		  const int32_t *slots, const uint32_t *gens, uint32_t n)
{
	int32_t idx[MAX_KEYS];
	uint32_t g[MAX_KEYS], k = 0;
	struct pd_msg m = { .type = PD_MSG_PUT_DONE };

	for (uint32_t i = 0; i < n && k < MAX_KEYS; i++) {
		if (slots[i] < 0)
			continue;
		land(f, peer, slots[i], gens[i]);
		idx[k] = slots[i];
		g[k++] = gens[i];
	}
	m.u.put_done = (struct pd_msg_put_done){
		.seq = seq, .req_id = { (const uint8_t *)req, (uint32_t)strlen(req) }, .n = k,
		.indexes = idx, .gens = g };
	deliver(f, peer, &m);
}

void fzp_cancel(struct fzb *f, uint32_t peer, const char *req)
{
	struct pd_msg m = { .type = PD_MSG_CANCEL };

	m.u.cancel.req_id = (struct pd_bytes){ (const uint8_t *)req, (uint32_t)strlen(req) };
	deliver(f, peer, &m);
}
