/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_ENGINE_WIRE_H
#define PD_TESTS_UNIT_ENGINE_WIRE_H

/*
 * The engines of test_engine_model.c wired together: the sender's and the
 * receiver's callbacks (which check the engines' promises as they are
 * called, and turn what the engines want sent into messages and writes),
 * and the delivery of those messages and write completions. Events for an
 * agent go to its rank's completion queue (engine_agents.h).
 */
#include "engine_agents.h"

/* ---- sender engine callbacks (ctx: the prefill broker) --------------------------------- */

static void note_seq(struct em_pb *pb, const struct pd_tx_batch_view *v, uint32_t reserve)
{
	struct em_req *q = req_of(v->req_id, v->req_id_len);

	EXPECT(q && v->seq < EM_MAXSEQ && v->rank < EM_MAXWS, "P%u: seq %llu of an unknown request",
	       pb_idx(pb), (unsigned long long)v->seq);
	if (q && v->seq < EM_MAXSEQ)
		pb->seq[v->seq] = (struct em_seq){ .req1 = (uint16_t)(qi(q) + 1),
						   .rank = (uint8_t)v->rank,
						   .reserve = (uint8_t)reserve };
}

static void tx_send_reserve(void *ctx, const struct pd_tx_batch_view *v)
{
	struct em_pb *pb = pb_of(ctx);
	struct em_msg *m;

	note_seq(pb, v, 1);
	tr("P%u reserve %.*s/%u seq %llu", pb_idx(pb), (int)v->req_id_len, v->req_id, v->rank,
	   (unsigned long long)v->seq);
	if (W->c.legacy) { /* the old sender asked nothing before staging: answered locally */
		pb->legacy_seq = v->seq;
		return;
	}
	m = msg_new(M_RESERVE, pb_idx(pb), v->peer);
	m->seq = v->seq;
	m->req = qi(req_of(v->req_id, v->req_id_len));
	m->rank = v->rank;
	m->ws = v->world_size;
	m->total = v->total_chunks;
	m->grants = v->grants;
	net_send(m, &pb->fifo[v->peer]);
}

/* The chunks' keys and lengths into m (an AllocRequest, a binding PutDone). */
static void msg_keys(struct em_msg *m, const struct pd_tx_batch_view *v)
{
	for (uint32_t i = 0; i < m->n; i++) {
		m->klen[i] = v->chunks[i].klen <= EM_KEYLEN ? v->chunks[i].klen : EM_KEYLEN;
		memcpy(m->key[i], v->chunks[i].key, m->klen[i]);
		m->lens[i] = v->chunks[i].len;
	}
}

static void tx_send_alloc(void *ctx, const struct pd_tx_batch_view *v)
{
	struct em_pb *pb = pb_of(ctx);
	struct em_msg *m = msg_new(M_ALLOC, pb_idx(pb), v->peer);

	note_seq(pb, v, 0);
	EXPECT(v->n >= 1 && v->n <= EM_MAXBATCH, "AllocRequest of %u chunks", v->n);
	m->seq = v->seq;
	m->req = qi(req_of(v->req_id, v->req_id_len));
	m->rank = v->rank;
	m->ws = v->world_size;
	m->total = v->total_chunks;
	m->is_last = v->is_last;
	m->n = v->n <= EM_MAXBATCH ? v->n : 0;
	msg_keys(m, v);
	tr("P%u alloc %.*s/%u seq %llu n %u%s", pb_idx(pb), (int)v->req_id_len, v->req_id, v->rank,
	   (unsigned long long)v->seq, v->n, v->is_last ? " last" : "");
	net_send(m, &pb->fifo[v->peer]);
}

static struct em_part *part_of(const uint8_t *id, uint32_t len, uint32_t rank)
{
	struct em_req *q = req_of(id, len);

	return q && rank < EM_MAXWS ? &q->part[rank] : NULL;
}

static void tx_admitted(void *ctx, const struct pd_tx_result *r)
{
	struct em_pb *pb = pb_of(ctx);
	struct em_part *pt = part_of(r->req_id, r->req_id_len, r->rank);
	struct em_rank *rk = rank_of(pb, r->agent);

	tr("P%u admitted %.*s/%u", pb_idx(pb), (int)r->req_id_len, r->req_id, r->rank);
	if (!pt || !rk) {
		EXPECT(0, "P%u: admitted event for an unknown request or agent %u", pb_idx(pb),
		       r->agent);
		return;
	}
	EXPECT(pt->nadm == 0 && pt->nend == 0 && rk->alive,
	       "%.*s/%u: ADMITTED twice, after its end, or to a gone agent", (int)r->req_id_len,
	       r->req_id, r->rank);
	pt->nadm++;
	pt->admitted = 1;
	cq_push(rk, qi(req_of(r->req_id, r->req_id_len)), CQ_ADMITTED, 0);
	progress();
}

static int tx_write(void *ctx, const struct pd_tx_batch_view *v)
{
	struct em_pb *pb = pb_of(ctx);
	struct em_msg *m = msg_new(M_WRITE, pb_idx(pb), v->peer);

	m->seq = v->seq;
	m->req = qi(req_of(v->req_id, v->req_id_len));
	m->rank = v->rank;
	m->n = v->n <= EM_MAXBATCH ? v->n : 0;
	for (uint32_t i = 0; i < m->n; i++) {
		uint32_t s = PD_SLOT_REF_IDX(v->chunks[i].slot);

		m->idx[i] = v->remote[i];
		m->slot[i] = s;
		if (s < EM_MAXSEND)
			pb->slot[s].busy = 1;
	}
	tr("P%u write %.*s/%u seq %llu -> recv slots %s", pb_idx(pb), (int)v->req_id_len,
	   v->req_id, v->rank, (unsigned long long)v->seq, idx_str(m->idx, m->n, (char[64]){ 0 }, 64));
	W->inflight++;
	push(W->now + rnd_in(W->c.wr_lo, W->c.wr_hi), E_WRITE, 0, 0, m);
	return 0;
}

static void tx_free_slots(void *ctx, const pd_slot_ref *refs, uint32_t n)
{
	struct em_pb *pb = pb_of(ctx);

	for (uint32_t i = 0; i < n; i++) {
		uint32_t s = PD_SLOT_REF_IDX(refs[i]);
		struct em_slot *sl = s < EM_MAXSEND ? &pb->slot[s] : NULL;

		if (!sl || sl->st != S_QUEUED || sl->ref != refs[i] || sl->busy) {
			EXPECT(0, "P%u frees staging slot %u: not the broker's, stale, or being written",
			       pb_idx(pb), s);
			continue;
		}
		sl->st = S_FREE;
		W->m[sl->req].held--;
	}
	EXPECT(pd_pool_free(&pb->pool, refs, n) == 0, "P%u: pd_pool_free of %u slots failed",
	       pb_idx(pb), n);
}

static void tx_put_done(void *ctx, const struct pd_tx_batch_view *v, const int32_t *idx,
			uint32_t n)
{
	struct em_pb *pb = pb_of(ctx);
	struct em_msg *m = msg_new(M_PUTDONE, pb_idx(pb), v->peer);

	m->req = qi(req_of(v->req_id, v->req_id_len));
	m->rank = v->rank;
	m->n = n <= EM_MAXBATCH ? n : 0;
	if (m->n)
		memcpy(m->idx, idx, m->n * sizeof(*idx));
	m->bind = v->bind;
	EXPECT(!v->bind || n == v->n, "P%u: a binding PutDone of %u of %u chunks", pb_idx(pb), n,
	       v->n);
	if (v->bind)
		msg_keys(m, v);
	net_send(m, &pb->fifo[v->peer]);
}

static void tx_cancel_notif(void *ctx, uint32_t peer, const uint8_t *id, uint32_t len,
			    uint32_t rank)
{
	struct em_pb *pb = pb_of(ctx);
	struct em_msg *m = msg_new(M_CANCEL, pb_idx(pb), peer);

	tr("P%u CancelNotif %.*s/%u", pb_idx(pb), (int)len, id, rank);
	m->req = qi(req_of(id, len));
	m->rank = rank;
	net_send(m, &pb->fifo[peer]);
}

static void tx_proxy_notif(void *ctx, const struct pd_tx_result *r)
{
	struct em_req *q = req_of(r->req_id, r->req_id_len);
	struct em_part *pt = part_of(r->req_id, r->req_id_len, r->rank);

	(void)ctx;
	if (!pt)
		return;
	pt->proxy++;
	EXPECT(pt->proxy == 1, "%s/%u: ProxyNotif twice", q->id, r->rank);
	EXPECT(r->status || r->chunks == q->total, "%s/%u: ProxyNotif ok with %u of %u chunks",
	       q->id, r->rank, r->chunks, q->total);
}

static void tx_agent_event(void *ctx, const struct pd_tx_result *r)
{
	struct em_pb *pb = pb_of(ctx);
	struct em_req *q = req_of(r->req_id, r->req_id_len);
	struct em_part *pt = part_of(r->req_id, r->req_id_len, r->rank);
	struct em_rank *rk = rank_of(pb, r->agent);

	tr("P%u %s %.*s/%u (%d)", pb_idx(pb), r->status ? "PUT_FAILED" : "PUT_DONE",
	   (int)r->req_id_len, r->req_id, r->rank, r->status);
	if (!pt || !rk) {
		EXPECT(0, "P%u: event for an unknown request or agent %u", pb_idx(pb), r->agent);
		return;
	}
	EXPECT(rk->alive, "%s/%u: event to gone agent %u", q->id, r->rank, r->agent);
	EXPECT(pt->nend == 0, "%s/%u: second end event (%d after %d)", q->id, r->rank, r->status,
	       pt->status);
	EXPECT(r->status || r->chunks == q->total, "%s/%u: PUT_DONE with %u of %u chunks", q->id,
	       r->rank, r->chunks, q->total);
	pt->nend++;
	pt->status = r->status;
	cq_push(rk, qi(q), CQ_END, r->status);
	progress();
}

static void tx_wake_alloc(void *ctx, uint64_t tag)
{
	(void)pd_pool_cancel(&pb_of(ctx)->pool, tag);
}

static const struct pd_tx_ops em_tx_ops = {
	.send_alloc = tx_send_alloc, .send_reserve = tx_send_reserve, .admitted = tx_admitted,
	.write = tx_write, .free_slots = tx_free_slots, .put_done = tx_put_done,
	.cancel_notif = tx_cancel_notif, .proxy_notif = tx_proxy_notif,
	.agent_event = tx_agent_event, .wake_alloc = tx_wake_alloc,
};

/* ---- receiver engine callbacks (ctx: the decode broker) -------------------------------- */

static uint32_t db_idx(const void *ctx)
{
	return (uint32_t)((const struct em_db *)ctx - W->db);
}

static void rx_reply(void *ctx, uint32_t peer, uint64_t seq, int32_t err, const int32_t *remote,
		     uint32_t n, const int32_t *already, uint32_t nal)
{
	struct em_msg *m = msg_new(M_REPLY, peer, db_idx(ctx));
	const struct em_seq *s = peer < W->c.np && seq < EM_MAXSEQ ? &W->pb[peer].seq[seq] : NULL;

	EXPECT(s && s->req1, "D%u answers unknown seq %llu of P%u", db_idx(ctx),
	       (unsigned long long)seq, peer);
	EXPECT(n <= EM_MAXBATCH && nal <= n, "D%u: reply of %u indexes", db_idx(ctx), n);
	if (s && s->req1 && !err)
		W->m[s->req1 - 1].rx_admitted = 1; /* answered without error: admitted */
	tr("D%u reply P%u seq %llu (%s/%u) err %d slots %s", db_idx(ctx), peer,
	   (unsigned long long)seq, s && s->req1 ? W->m[s->req1 - 1].id : "?", s ? s->rank : 0,
	   err, idx_str(remote, n <= EM_MAXBATCH ? n : 0, (char[64]){ 0 }, 64));
	m->seq = seq;
	m->err = err;
	m->n = n <= EM_MAXBATCH ? n : 0;
	m->nalready = nal <= m->n ? nal : 0;
	if (m->n) /* an error reply has no indexes (NULL) */
		memcpy(m->idx, remote, m->n * sizeof(*remote));
	if (m->nalready)
		memcpy(m->already, already, m->nalready * sizeof(*already));
	net_send(m, &W->db[db_idx(ctx)].fifo[peer]);
}

static void rx_ready(void *ctx, const struct pd_rx_req_view *v)
{
	struct em_req *q = req_of(v->req_id, v->req_id_len);

	tr("D%u READY %.*s", db_idx(ctx), (int)v->req_id_len, v->req_id);
	if (!q) {
		EXPECT(0, "D%u: READY of an unknown request", db_idx(ctx));
		return;
	}
	EXPECT(!q->rx_ready && !q->rx_failed, "%s READY twice or after failing", q->id);
	EXPECT(v->need == q->total * W->c.ws && v->committed == v->need,
	       "%s READY with %u of %u committed", q->id, v->committed, v->need);
	q->rx_ready = 1;
	progress();
}

static void rx_failed(void *ctx, const struct pd_rx_req_view *v, int32_t err)
{
	struct em_req *q = req_of(v->req_id, v->req_id_len);

	tr("D%u failed %.*s (%d)", db_idx(ctx), (int)v->req_id_len, v->req_id, err);
	if (!q) {
		EXPECT(0, "D%u: failure of an unknown request", db_idx(ctx));
		return;
	}
	EXPECT(!q->rx_failed && !q->released, "%s failed twice or after its release", q->id);
	q->rx_failed = 1;
	q->rx_err = err;
	progress();
}

static const struct pd_rx_ops em_rx_ops = {
	.reply = rx_reply, .ready = rx_ready, .failed = rx_failed,
};

/* ---- delivery ---------------------------------------------------------------------------- */

static void deliver_to_rx(struct em_msg *m)
{
	struct em_db *db = &W->db[m->d];
	struct em_req *q = &W->m[m->req];
	struct pd_rx_key keys[EM_MAXBATCH];
	int rc;

	if (m->type == M_RESERVE) {
		struct pd_rx_reserve r = { .peer = m->p, .seq = m->seq, .req_id = (uint8_t *)q->id,
					   .req_id_len = q->idlen, .total_chunks = m->total,
					   .world_size = m->ws, .rank = m->rank,
					   .grants = m->grants };

		rc = pd_rx_reserve(db->rx, &r, W->now);
		EXPECT(rc >= 0, "D%u: Reserve %s/%u: %d", m->d, q->id, m->rank, rc);
	} else if (m->type == M_ALLOC) {
		struct pd_rx_alloc a = { .peer = m->p, .seq = m->seq, .req_id = (uint8_t *)q->id,
					 .req_id_len = q->idlen, .nkeys = m->n, .keys = keys,
					 .lens = m->lens, .total_chunks = m->total,
					 .world_size = m->ws, .rank = m->rank,
					 .is_last = m->is_last };

		for (uint32_t i = 0; i < m->n; i++)
			keys[i] = (struct pd_rx_key){ .p = (uint8_t *)m->key[i], .len = m->klen[i] };
		rc = pd_rx_alloc(db->rx, &a, W->now);
		EXPECT(rc >= 0, "D%u: AllocRequest %s/%u: %d", m->d, q->id, m->rank, rc);
	} else if (m->type == M_PUTDONE && m->bind) {
		for (uint32_t i = 0; i < m->n; i++)
			keys[i] = (struct pd_rx_key){ .p = (uint8_t *)m->key[i], .len = m->klen[i] };
		rc = pd_rx_bind(db->rx, m->p, (uint8_t *)q->id, q->idlen, m->idx, keys, m->lens,
				m->n, W->now);
		EXPECT(rc == 0 || rc == -ENOENT, "D%u: binding PutDone %s/%u: %d", m->d, q->id,
		       m->rank, rc);
	} else if (m->type == M_PUTDONE) {
		rc = pd_rx_put_done(db->rx, m->p, (uint8_t *)q->id, q->idlen, m->idx, m->n, W->now);
		EXPECT(rc == 0 || rc == -ENOENT, "D%u: PutDone %s/%u: %d", m->d, q->id, m->rank, rc);
	} else {
		tr("D%u CancelNotif %s/%u -> %d", m->d, q->id, m->rank,
		   pd_rx_cancel(db->rx, (uint8_t *)q->id, q->idlen, W->now));
	}
}

static void deliver(struct em_msg *m)
{
	if (m->type == M_REPLY) {
		struct pd_tx_resp t = { .peer = m->d, .seq = m->seq, .err = m->err, .n = m->n,
					.remote = m->idx, .nalready = m->nalready,
					.already_sent = m->already };
		int rc;

		tr("P%u <- AllocResponse seq %llu err %d", m->p, (unsigned long long)m->seq, m->err);
		rc = pd_tx_alloc_resp(W->pb[m->p].tx, &t, W->now);
		EXPECT(rc == 0 || rc == -ENOENT, "P%u: AllocResponse seq %llu: %d", m->p,
		       (unsigned long long)m->seq, rc);
	} else {
		deliver_to_rx(m);
	}
	W->inflight--;
	free(m);
}

/* The data of a write lands now: each slot written must still be granted
 * to this request at the receiver (a write landing after its request's
 * rollback could land in a slot granted to another request since). */
static void land_check(const struct em_msg *m)
{
	struct em_db *db = &W->db[m->d];
	struct em_req *q = &W->m[m->req];
	struct pd_rx_req_view v;
	uint32_t st = pd_rx_state(db->rx, (uint8_t *)q->id, q->idlen, &v, NULL);

	for (uint32_t i = 0; i < m->n; i++) {
		struct pd_slot_desc d;

		if (m->idx[i] < 0)
			continue;
		EXPECT(pd_pool_desc_get(&db->pool, (uint32_t)m->idx[i], &d) == 0 &&
			       st == PD_RX_ACTIVE && d.state == PD_SLOT_GRANTED && d.tag == v.tag,
		       "write of %s/%u seq %llu lands in recv slot %d of D%u, no longer granted "
		       "to it (request state %u, slot state %u)",
		       q->id, m->rank, (unsigned long long)m->seq, m->idx[i], m->d, st,
		       (unsigned)d.state);
	}
}

static void write_done(struct em_msg *m)
{
	struct em_pb *pb = &W->pb[m->p];
	int rc = 0;

	land_check(m);
	for (uint32_t i = 0; i < m->n; i++)
		if (m->slot[i] < EM_MAXSEND)
			pb->slot[m->slot[i]].busy = 0;
	if (W->c.wfail_permille && rnd(1000) < W->c.wfail_permille) {
		rc = -EIO;
		W->m[m->req].wfailed = 1;
	}
	tr("P%u write done %s/%u seq %llu (%d)", m->p, W->m[m->req].id, m->rank,
	   (unsigned long long)m->seq, rc);
	EXPECT(pd_tx_write_done(pb->tx, m->seq, rc, W->now) == 0, "P%u: write_done seq %llu",
	       m->p, (unsigned long long)m->seq);
	if (!rc)
		progress();
	W->inflight--;
	free(m);
}

#endif
