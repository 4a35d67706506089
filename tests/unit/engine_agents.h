/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_ENGINE_AGENTS_H
#define PD_TESTS_UNIT_ENGINE_AGENTS_H

/*
 * The processes around the brokers in test_engine_model.c: prefill ranks
 * (one agent and one engine thread each: its completion queue, its
 * pd_reqtab, its scheduling and staging) and decode processes (wait for
 * READY, hold, release). See the test file for what they model.
 */
#include "engine_model.h"

/* ---- rank engines ----------------------------------------------------------------------- */

static void rank_wake(struct em_rank *rk)
{
	if (rk->stepping || !rk->alive)
		return;
	rk->stepping = 1;
	push(W->now + rnd_in(W->c.step_ns / 4, W->c.step_ns), E_STEP, rk->p, rk->idx, NULL);
}

static void cq_push(struct em_rank *rk, uint32_t req, uint32_t type, int32_t status)
{
	if (rk->ncq >= EM_MAXCQ) {
		EXPECT(0, "P%u rank %u: CQ full", rk->p, rk->idx);
		return;
	}
	rk->cq[rk->ncq++] = (struct em_cqe){ .req = (uint16_t)req, .type = (uint8_t)type,
					     .status = status };
	rank_wake(rk);
}

static void run_remove(struct em_rank *rk, uint32_t req)
{
	for (uint32_t k = 0; k < rk->nrun; k++) {
		if (rk->run[k] == req) {
			memmove(&rk->run[k], &rk->run[k + 1], (rk->nrun - k - 1) * sizeof(rk->run[0]));
			rk->nrun--;
			return;
		}
	}
}

/* What libpdagent does when it reads the completion queue. */
static void rank_drain(struct em_rank *rk)
{
	for (uint32_t i = 0; i < rk->ncq; i++) {
		const struct em_cqe *e = &rk->cq[i];
		const struct em_req *q = &W->m[e->req];

		if (e->type == CQ_ADMITTED) {
			pd_reqtab_admitted(&rk->tab, (const uint8_t *)q->id, q->idlen, rk->tp);
			continue;
		}
		pd_reqtab_ended(&rk->tab, (const uint8_t *)q->id, q->idlen, rk->tp, e->status);
		run_remove(rk, e->req);
	}
	rk->ncq = 0;
}

/* The loaned batch is filled: hand it to the broker and submit it. */
static void rank_submit(struct em_rank *rk, const struct em_fill *f)
{
	struct em_pb *pb = &W->pb[rk->p];
	struct em_req *q = &W->m[f->req];
	struct em_part *pt = &q->part[rk->tp];
	struct pd_tx_chunk ch[EM_MAXBATCH];
	struct pd_tx_submit s = { .agent = rk->agent, .tag = q->tag, .peer = q->d,
				  .req_id = (const uint8_t *)q->id, .req_id_len = q->idlen,
				  .rank = rk->tp, .world_size = W->c.ws, .total_chunks = q->total,
				  .is_last = pt->submitted + f->n == q->total, .n = f->n,
				  .chunks = ch };
	int rc;

	for (uint32_t i = 0; i < f->n; i++) {
		ch[i] = (struct pd_tx_chunk){ .slot = f->refs[i], .len = EM_SLOT_SIZE };
		ch[i].klen = (uint8_t)snprintf((char *)ch[i].key, EM_KEYLEN, "%s.%u.%u", q->id,
					       rk->tp, pt->submitted + i);
	}
	rc = pd_pool_set_state(&pb->pool, f->refs, f->n, EM_OWNER_BROKER, PD_SLOT_QUEUED);
	EXPECT(rc == 0, "P%u: hand-over of %s/%u's loan: %d", rk->p, q->id, rk->tp, rc);
	for (uint32_t i = 0; i < f->n; i++)
		pb->slot[PD_SLOT_REF_IDX(f->refs[i])].st = S_QUEUED;
	rc = pd_tx_submit(pb->tx, &s, W->now);
	tr("P%u r%u submit %s n %u%s -> %d", rk->p, rk->idx, q->id, f->n, s.is_last ? " last" : "",
	   rc);
	if (rc == -EINVAL || rc == -ENOMEM) { /* the caller keeps the slots: free them */
		for (uint32_t i = 0; i < f->n; i++)
			pb->slot[PD_SLOT_REF_IDX(f->refs[i])].st = S_FREE;
		q->held -= f->n;
		(void)pd_pool_free(&pb->pool, f->refs, f->n);
	}
	/* -ECANCELED: it ended meanwhile (reported; the engine freed the staging). */
	EXPECT(rc == 0 || rc == -ECANCELED, "%s/%u: submit: %d", q->id, rk->tp, rc);
	if (rc == 0)
		pt->submitted += f->n;
}

/* The old sender (legacy mode) took no answer before staging: its Reserve
 * is answered here, at once, so the engine holds the request admitted. */
static void legacy_admit(struct em_pb *pb, const struct em_req *q)
{
	struct pd_tx_resp t = { .peer = q->d, .seq = pb->legacy_seq };

	EXPECT(pb->legacy_seq && pd_tx_alloc_resp(pb->tx, &t, W->now) == 0,
	       "legacy: %s not admitted at once", q->id);
}

/* Schedule time: declare this rank's part (pd_declare). */
static void rank_declare(struct em_rank *rk, uint32_t req)
{
	struct em_pb *pb = &W->pb[rk->p];
	struct em_req *q = &W->m[req];
	struct em_part *pt = &q->part[rk->tp];
	struct pd_tx_declare d = { .agent = rk->agent, .tag = q->tag, .peer = q->d,
				   .req_id = (const uint8_t *)q->id, .req_id_len = q->idlen,
				   .rank = rk->tp, .world_size = W->c.ws,
				   .total_chunks = q->total, .timeout_ns = q->timeout_ns };
	int rc = pd_reqtab_declare(&rk->tab, (const uint8_t *)q->id, q->idlen, rk->tp);

	EXPECT(rc == 0, "%s/%u: reqtab declare: %d", q->id, rk->tp, rc);
	pt->declared = 1;
	pb->legacy_seq = 0;
	rc = pd_tx_declare(pb->tx, &d, W->now);
	tr("P%u r%u declare %s -> %d", rk->p, rk->idx, q->id, rc);
	if (rc == 0) {
		rk->run[rk->nrun++] = (uint16_t)req;
		if (W->c.legacy)
			legacy_admit(pb, q);
		return;
	}
	if (rc == -ECANCELED)
		return; /* cancelled before: the engine reported PUT_FAILED */
	EXPECT(0, "%s/%u: declare: %d", q->id, rk->tp, rc);
	pt->nend++; /* the broker fails the agent's request itself */
	pt->status = rc;
	cq_push(rk, req, CQ_END, rc);
}

static int fill_pending(const struct em_rank *rk, uint32_t req)
{
	for (uint32_t k = 0; k < rk->nfill; k++)
		if (rk->fill[k].req == req)
			return 1;
	return 0;
}

/* The next batch of req: 1 staged, 0 nothing now, -ENOBUFS the pool is out. */
static int rank_stage(struct em_rank *rk, uint32_t req)
{
	struct em_pb *pb = &W->pb[rk->p];
	struct em_req *q = &W->m[req];
	struct em_part *pt = &q->part[rk->tp];
	struct pd_pool_who who = { .owner = rk->agent, .pid = pd_self_pid(), .tag = q->tag,
				   .state = PD_SLOT_LOANED };
	struct em_fill f = { .req = (uint16_t)req };
	int gate, rc;

	if (pt->staged == q->total || fill_pending(rk, req))
		return 0;
	gate = pd_reqtab_gate(&rk->tab, (const uint8_t *)q->id, q->idlen);
	/* Not admitted: keep it on the GPU, go on. (Legacy: the old pd_alloc never asked.) */
	if (gate != 0 && !(W->c.legacy && gate == -EAGAIN))
		return 0;
	f.n = q->total - pt->staged < W->c.batch ? q->total - pt->staged : W->c.batch;
	rc = pd_pool_alloc(&pb->pool, &who, f.n, 0, f.refs);
	if (rc == -ENOBUFS)
		return rc;
	EXPECT(rc == 0, "P%u: pd_pool_alloc(%u): %d", rk->p, f.n, rc);
	if (rc)
		return 0;
	for (uint32_t i = 0; i < f.n; i++)
		pb->slot[PD_SLOT_REF_IDX(f.refs[i])] = (struct em_slot){
			.ref = f.refs[i], .req = (uint16_t)req, .rank = (uint8_t)rk->tp,
			.st = S_LOANED, .agent = rk->agent };
	q->held += f.n;
	pt->staged += f.n;
	tr("P%u r%u loan %s n %u (%u free)", rk->p, rk->idx, q->id, f.n, pd_pool_nfree(&pb->pool));
	if (rnd(100) < W->c.fill_later_pct)
		rk->fill[rk->nfill++] = f;
	else
		rank_submit(rk, &f);
	return 1;
}

static void rank_step(struct em_rank *rk)
{
	if (!rk->alive)
		return;
	rk->stepping = 1; /* events raised meanwhile do not schedule another step */
	rank_drain(rk);
	for (uint32_t k = 0; k < rk->nfill; k++)
		rank_submit(rk, &rk->fill[k]);
	rk->nfill = 0;
	while (rk->nrun < W->c.max_run && rk->nq) {
		uint32_t req = rk->q[0];

		memmove(&rk->q[0], &rk->q[1], --rk->nq * sizeof(rk->q[0]));
		rank_declare(rk, req);
	}
	for (uint32_t k = 0; k < rk->nrun; k++)
		if (rank_stage(rk, rk->run[k]) == -ENOBUFS && W->c.stop_on_nobufs)
			break;
	if (rk->nrun || rk->nq || rk->nfill || rk->ncq) {
		uint64_t s = W->c.step_ns;

		push(W->now + rnd_in(s - s / 4, s + s / 4), E_STEP, rk->p, rk->idx, NULL);
		return;
	}
	rk->stepping = 0;
}

/* ---- decode processes --------------------------------------------------------------- */

static void decode_wake(struct em_db *db)
{
	if (db->stepping)
		return;
	db->stepping = 1;
	push(W->now + rnd_in(0, W->c.dec_ns), E_DECODE, (uint32_t)(db - W->db), 0, NULL);
}

static void decode_one(struct em_db *db, struct em_req *q)
{
	int32_t status = 0;
	uint32_t st = pd_rx_state(db->rx, (const uint8_t *)q->id, q->idlen, NULL, &status);

	if (st == PD_RX_READY && q->watch == W_WAIT) {
		q->watch = W_HOLD;
		q->hold_until = W->now + q->hold_ns;
	} else if (st == PD_RX_READY && W->now >= q->hold_until) {
		int rc = pd_rx_release(db->rx, (const uint8_t *)q->id, q->idlen, 0, 1, W->now);

		EXPECT(rc == 0, "D: release of %s: %d", q->id, rc);
		tr("D%u released %s", q->d, q->id);
		q->released = 1;
		q->watch = W_DONE;
		progress();
	} else if (st == PD_RX_ENDED) {
		EXPECT(status < 0 || q->released, "%s ended at the receiver unreleased, status 0",
		       q->id);
		q->watch = W_DONE;
	} else if (st == PD_RX_UNKNOWN && q->tx_end_ns && W->now >= q->tx_end_ns + EM_GRACE_NS) {
		q->watch = W_DONE; /* failed at the sender before the receiver ever saw it */
	}
}

static void decode_step(struct em_db *db)
{
	uint32_t d = (uint32_t)(db - W->db), watching = 0;

	for (uint32_t i = 0; i < W->nm; i++) {
		struct em_req *q = &W->m[i];

		if (q->d != d || (q->watch != W_WAIT && q->watch != W_HOLD))
			continue;
		decode_one(db, q);
		watching += q->watch != W_DONE;
	}
	db->stepping = 0;
	if (watching) {
		db->stepping = 1;
		push(W->now + W->c.dec_ns, E_DECODE, d, 0, NULL);
	}
}

#endif
