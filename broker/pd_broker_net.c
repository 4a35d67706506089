/* SPDX-License-Identifier: MIT */
/* pdbroker: the engines' callbacks, wired to the control and data planes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd_broker_int.h"
#include "pd_log.h"
#include "pd_time.h"

static int wb_cmp(const struct wbatch *a, const struct wbatch *b)
{
	return (a->seq > b->seq) - (a->seq < b->seq);
}

#define __unused __attribute__((unused)) /* see pd_tree.h */
RB_GENERATE_STATIC(wb_tree, wbatch, node, wb_cmp)
#undef __unused

int pd_broker_scratch_alloc(struct pd_broker *b)
{
	size_t n = (PD_PUT_MAX_CHUNKS > PD_WIRE_MAX_KEYS ? PD_PUT_MAX_CHUNKS : PD_WIRE_MAX_KEYS) + 1;

	b->sc_chunks = calloc(n, sizeof(*b->sc_chunks));
	b->sc_refs = calloc(n, sizeof(*b->sc_refs));
	b->sc_keys = calloc(n, sizeof(*b->sc_keys));
	b->sc_lens = calloc(n, sizeof(*b->sc_lens));
	b->sc_rxkeys = calloc(n, sizeof(*b->sc_rxkeys));
	b->sc_gens = calloc(n, sizeof(*b->sc_gens));
	b->sc_pgens = calloc(n, sizeof(*b->sc_pgens));
	return b->sc_chunks && b->sc_refs && b->sc_keys && b->sc_lens && b->sc_rxkeys &&
	       b->sc_gens && b->sc_pgens ? 0 : -ENOMEM;
}

void pd_broker_scratch_free(struct pd_broker *b)
{
	free(b->sc_chunks);
	free(b->sc_refs);
	free(b->sc_keys);
	free(b->sc_lens);
	free(b->sc_rxkeys);
	free(b->sc_gens);
	free(b->sc_pgens);
}

void pd_broker_wbatches_free(struct pd_broker *b)
{
	struct wbatch *w;

	while ((w = RB_MIN(wb_tree, &b->wbatches))) {
		RB_REMOVE(wb_tree, &b->wbatches, w);
		free(w);
	}
}

int pd_broker_peer_of(struct pd_broker *b, const uint8_t *ep, uint32_t len, uint32_t *peer)
{
	char buf[PD_ENDPOINT_MAX + 1];

	if (!b->ctrl || len == 0 || len > PD_ENDPOINT_MAX)
		return -EINVAL;
	memcpy(buf, ep, len);
	buf[len] = '\0';
	return pd_ctrl_peer(b->ctrl, buf, peer);
}

static void send_msg(struct pd_broker *b, uint32_t peer, const struct pd_msg *m)
{
	int rc = pd_ctrl_send(b->ctrl, peer, m);

	if (rc < 0)
		PD_LOG_RL(WARN, ctl, "send %s to peer %u: %s", pd_wire_type_name(m->type), peer,
			  pd_strerror(rc));
	/* Down: what was sent will never be answered; fail it now, not at a timeout. */
	if ((rc == -ENOTCONN || rc == -ENOENT) && b->nunreachable < PD_ARRAY_SIZE(b->unreachable))
		b->unreachable[b->nunreachable++] = peer;
}

void pd_broker_fail_unreachable(struct pd_broker *b)
{
	while (b->nunreachable) {
		uint32_t peer = b->unreachable[--b->nunreachable];

		if (b->tx)
			(void)pd_tx_peer_failed(b->tx, peer, -ENOTCONN, pd_now_ns());
	}
	pd_broker_fail_refused(b);
}

/* ---- sender engine callbacks ------------------------------------------------------- */

static void tx_send_alloc(void *ctx, const struct pd_tx_batch_view *v)
{
	struct pd_broker *b = ctx;
	struct pd_bytes *keys = b->sc_keys;
	uint32_t *lens = b->sc_lens;
	struct pd_msg m = { .type = PD_MSG_ALLOC_REQ };

	if (pd_broker_xport_refuse(b, v))
		return; /* failed in before_sleep, as if the receiver had refused it */
	for (uint32_t i = 0; i < v->n; i++) {
		keys[i] = (struct pd_bytes){ .p = v->chunks[i].key, .len = v->chunks[i].klen };
		lens[i] = v->chunks[i].len;
	}
	m.u.alloc_req = (struct pd_msg_alloc_req){
		.seq = v->seq, .has_seq = 1, .req_id = { v->req_id, v->req_id_len },
		.nkeys = v->n, .keys = keys, .lens = lens, .total_chunks = v->total_chunks,
		.world_size = v->world_size, .rank = v->rank, .is_last_batch = v->is_last };
	send_msg(b, v->peer, &m);
}

static void tx_send_reserve(void *ctx, const struct pd_tx_batch_view *v)
{
	struct pd_broker *b = ctx;
	struct pd_msg m = { .type = PD_MSG_RESERVE };

	if (pd_broker_xport_refuse(b, v))
		return; /* --require not met: failed in before_sleep */
	m.u.reserve = (struct pd_msg_reserve){ .seq = v->seq,
					       .req_id = { v->req_id, v->req_id_len },
					       .total_chunks = v->total_chunks,
					       .world_size = v->world_size, .rank = v->rank,
					       .grants = v->grants };
	send_msg(b, v->peer, &m);
}

static int tx_write(void *ctx, const struct pd_tx_batch_view *v)
{
	struct pd_broker *b = ctx;
	int rc = pd_broker_xport_of(b, v->peer);
	struct wbatch *w;

	if (rc < 0)
		return rc; /* --require not met, or no transport: the request fails with it */
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->seq = v->seq;
	RB_INSERT(wb_tree, &b->wbatches, w);
	rc = pd_broker_xport_post(b, v, &w->left);
	if (w->left == 0) { /* nothing posted (the engine sends no empty batch) */
		RB_REMOVE(wb_tree, &b->wbatches, w);
		free(w);
		return rc < 0 ? rc : -EIO;
	}
	if (rc < 0)
		w->err = rc; /* the ones posted still complete; then the batch fails */
	return 0;
}

static void tx_free_slots(void *ctx, const pd_slot_ref *refs, uint32_t n)
{
	pd_broker_free_slots(ctx, refs, n);
}

/* PutDone with the generation of each slot it names: idx lists the
 * batch's written remote indexes in chunk order, so do their generations
 * and, for slots granted with the admission (keyless at the receiver
 * until now), the keys and lengths of their chunks. */
static void tx_put_done(void *ctx, const struct pd_tx_batch_view *v, const int32_t *idx,
			uint32_t n)
{
	struct pd_broker *b = ctx;
	struct pd_msg m = { .type = PD_MSG_PUT_DONE };
	uint32_t k = 0;

	for (uint32_t i = 0; i < v->n && k < n; i++) {
		if (v->remote[i] < 0)
			continue;
		b->sc_keys[k] = (struct pd_bytes){ .p = v->chunks[i].key, .len = v->chunks[i].klen };
		b->sc_lens[k] = v->chunks[i].len;
		b->sc_pgens[k++] = v->gens ? v->gens[i] : 0;
	}
	m.u.put_done = (struct pd_msg_put_done){ .seq = v->seq,
						 .req_id = { v->req_id, v->req_id_len },
						 .rank = v->rank, .n = n, .indexes = idx,
						 .gens = k == n ? b->sc_pgens : NULL,
						 .keys = v->bind && k == n ? b->sc_keys : NULL,
						 .lens = v->bind && k == n ? b->sc_lens : NULL };
	send_msg(b, v->peer, &m);
}

static void tx_cancel_notif(void *ctx, uint32_t peer, const uint8_t *req, uint32_t len,
			    uint32_t rank)
{
	struct pd_msg m = { .type = PD_MSG_CANCEL };

	m.u.cancel = (struct pd_msg_cancel){ .req_id = { req, len }, .rank = rank };
	send_msg(ctx, peer, &m);
}

static void tx_proxy_notif(void *ctx, const struct pd_tx_result *r)
{
	struct pd_broker *b = ctx;
	struct pd_msg_proxy p = { .req_id = { r->req_id, r->req_id_len }, .has_ext = 1,
				  .status = r->status, .rank = r->rank,
				  .world_size = r->world_size, .chunks = r->chunks,
				  .bytes = r->bytes };

	if (b->cfg.proxy[0])
		(void)pd_ctrl_proxy_notif(b->ctrl, &p);
}

static void tx_agent_event(void *ctx, const struct pd_tx_result *r)
{
	struct pd_broker *b = ctx;
	struct pd_cqe c = { .type = r->status ? PD_CQ_PUT_FAILED : PD_CQ_PUT_DONE,
			    .status = r->status, .chunks = r->chunks, .bytes = r->bytes,
			    .req_id_len = (uint8_t)r->req_id_len, .rank = r->rank };

	memcpy(c.req_id, r->req_id, r->req_id_len);
	(void)pd_agents_complete(b->agents, r->agent, &c);
	pd_stat_add(&b->shm.seg.hdr->stats[r->status ? PD_STAT_REQ_FAILED : PD_STAT_REQ_DONE],
		    1);
	if (!r->status && r->peer < MAX_TOKENS) {
		pd_stat_add1w(&b->acct[r->peer].bytes_tx, r->bytes);
		pd_stat_add1w(&b->acct[r->peer].chunks_tx, r->chunks);
	}
	if (!r->status) {
		pd_stat_add(&b->shm.seg.hdr->stats[PD_STAT_CHUNKS_SENT], r->chunks);
		pd_stat_add(&b->shm.seg.hdr->stats[PD_STAT_BYTES_SENT], r->bytes);
	}
}

static void tx_admitted(void *ctx, const struct pd_tx_result *r)
{
	struct pd_broker *b = ctx;
	struct pd_cqe c = { .type = PD_CQ_ADMITTED, .chunks = r->chunks,
			    .req_id_len = (uint8_t)r->req_id_len, .rank = r->rank };

	memcpy(c.req_id, r->req_id, r->req_id_len);
	if (pd_agents_complete(b->agents, r->agent, &c) < 0)
		PD_LOG_RL(WARN, ctl, "agent %u: admission event lost", r->agent);
}

static void tx_wake_alloc(void *ctx, uint64_t tag)
{
	struct pd_broker *b = ctx;

	pd_broker_send_cancel(b, tag);
}

const struct pd_tx_ops pd_broker_tx_ops = {
	.send_alloc = tx_send_alloc, .send_reserve = tx_send_reserve, .admitted = tx_admitted,
	.write = tx_write, .free_slots = tx_free_slots,
	.put_done = tx_put_done, .cancel_notif = tx_cancel_notif,
	.proxy_notif = tx_proxy_notif, .agent_event = tx_agent_event,
	.wake_alloc = tx_wake_alloc,
};

/* ---- receiver engine callbacks ----------------------------------------------------- */

/* The grant word of each slot granted now, and the generations the answer
 * carries (its writes and PutDone must bring them back). A grant whose
 * length was not said (a Reserve's, LMCache's) starts with none: its
 * first write fixes it (up_claim()). */
static void grants_open(struct pd_broker *b, uint32_t peer, const int32_t *remote, uint32_t n,
			const int32_t *already, uint32_t nalready, int lens_said)
{
	uint32_t sess = peer < MAX_TOKENS ? b->sess[peer] : 0, k = 0, *gens = b->sc_gens;

	for (uint32_t i = 0; i < n; i++) {
		int fresh = !(k < nalready && already[k] == (int32_t)i);

		k += !fresh;
		gens[i] = remote[i] >= 0 ? pd_rx_slot_gen(b->rx, (uint32_t)remote[i]) : 0;
		if (!fresh || remote[i] < 0 || (uint32_t)remote[i] >= b->shm.recv.nslots)
			continue;
		if (!lens_said)
			atomic_store_explicit(&b->slot_len[remote[i]], 0, memory_order_relaxed);
		atomic_store(&b->grant[remote[i]], GRANT_MAKE(peer, sess, gens[i]));
	}
}

static void rx_reply(void *ctx, uint32_t peer, uint64_t seq, int32_t err, const int32_t *remote,
		     uint32_t n, const int32_t *already, uint32_t nalready)
{
	struct pd_broker *b = ctx;
	struct pd_msg m = { .type = PD_MSG_ALLOC_RESP };
	int said;

	/* The lengths first (data threads read them once the grant is seen),
	 * then open the granted slots to this peer's writes (not the
	 * deduplicated ones). An error reply forgets what was held. */
	said = pd_broker_lens_granted(b, peer, seq, remote, err ? 0 : n);
	if (err == 0)
		grants_open(b, peer, remote, n, already, nalready, said);
	m.u.alloc_resp = (struct pd_msg_alloc_resp){ .seq = seq, .has_seq = 1, .n = err ? 0 : n,
						     .remote_indexes = remote,
						     .remote_gens = err ? NULL : b->sc_gens,
						     .nalready = err ? 0 : nalready,
						     .already_sent_indexes = already, .err = err };
	send_msg(b, peer, &m);
}

static void rx_ready(void *ctx, const struct pd_rx_req_view *v)
{
	struct pd_broker *b = ctx;

	pd_stat_add(&b->shm.seg.hdr->stats[PD_STAT_CHUNKS_RECV], v->need);
	pd_broker_recv_answer(b, v->req_id, v->req_id_len, 0, v->need, v->tag);
}

static void rx_failed(void *ctx, const struct pd_rx_req_view *v, int32_t err)
{
	pd_broker_recv_answer(ctx, v->req_id, v->req_id_len, err, v->need, v->tag);
}

const struct pd_rx_ops pd_broker_rx_ops = {
	.reply = rx_reply, .ready = rx_ready, .failed = rx_failed,
};

/* ---- control plane callbacks ---------------------------------------------------------- */

static void on_alloc_req(struct pd_broker *b, uint32_t peer, const struct pd_msg_alloc_req *q)
{
	struct pd_rx_key *keys = b->sc_rxkeys;
	struct pd_rx_alloc a = { .peer = peer, .seq = q->seq, .req_id = q->req_id.p,
				 .req_id_len = q->req_id.len, .nkeys = q->nkeys, .keys = keys,
				 .lens = q->lens, .total_chunks = q->total_chunks,
				 .world_size = q->world_size, .rank = q->rank,
				 .is_last = q->is_last_batch };

	if (!b->rx || q->nkeys > PD_WIRE_MAX_KEYS) {
		rx_reply(b, peer, q->seq, -EINVAL, NULL, 0, NULL, 0);
		return;
	}
	for (uint32_t i = 0; i < q->nkeys; i++)
		keys[i] = (struct pd_rx_key){ .p = q->keys[i].p, .len = q->keys[i].len };
	b->cur_req = q; /* its lengths, for the grants answered now */
	b->cur_peer = peer;
	if (pd_rx_alloc(b->rx, &a, pd_now_ns()) == 1)
		pd_broker_lens_hold(b, peer, q); /* held for admission: answered later */
	b->cur_req = NULL;
}

static void on_reserve(struct pd_broker *b, uint32_t peer, const struct pd_msg_reserve *q)
{
	struct pd_rx_reserve r = { .peer = peer, .seq = q->seq, .req_id = q->req_id.p,
				   .req_id_len = q->req_id.len, .total_chunks = q->total_chunks,
				   .world_size = q->world_size, .rank = q->rank,
				   .grants = q->grants };

	if (!b->rx) {
		rx_reply(b, peer, q->seq, -EINVAL, NULL, 0, NULL, 0);
		return;
	}
	(void)pd_rx_reserve(b->rx, &r, pd_now_ns()); /* answered now, or on admission */
}

static void on_alloc_resp(struct pd_broker *b, uint32_t peer, const struct pd_msg_alloc_resp *r)
{
	struct pd_tx_resp t = { .peer = peer, .seq = r->seq, .err = r->err, .n = r->n,
				.remote = r->remote_indexes, .gens = r->remote_gens,
				.nalready = r->nalready, .already_sent = r->already_sent_indexes };

	if (b->tx && r->has_seq)
		(void)pd_tx_alloc_resp(b->tx, &t, pd_now_ns());
}

/* A CancelNotif: only the request's own peers may cancel it. Always answered
 * with an empty AllocResponse (no seq), the acknowledgement the wire contract
 * promises (docs/design.md); pdkv senders drop an AllocResponse without seq. */
static void on_cancel(struct pd_broker *b, uint32_t peer, const struct pd_msg_cancel *c)
{
	struct pd_msg m = { .type = PD_MSG_ALLOC_RESP };

	if (b->rx && pd_rx_cancel_from(b->rx, peer, c->req_id.p, c->req_id.len, pd_now_ns()) < 0)
		PD_LOG_RL(WARN, ctl, "peer %u: CancelNotif of %.*s refused: not its request", peer,
			  (int)c->req_id.len, (const char *)c->req_id.p);
	send_msg(b, peer, &m);
}

static void on_msg(void *ctx, uint32_t peer, const struct pd_msg *m)
{
	struct pd_broker *b = ctx;

	switch (m->type) {
	case PD_MSG_ALLOC_REQ:
		on_alloc_req(b, peer, &m->u.alloc_req);
		break;
	case PD_MSG_ALLOC_RESP:
		on_alloc_resp(b, peer, &m->u.alloc_resp);
		break;
	case PD_MSG_RESERVE:
		on_reserve(b, peer, &m->u.reserve);
		break;
	case PD_MSG_PUT_DONE:
		pd_broker_put_done(b, peer, &m->u.put_done);
		break;
	case PD_MSG_CANCEL:
		on_cancel(b, peer, &m->u.cancel);
		break;
	case PD_MSG_ERROR:
		if (b->tx && m->u.error.seq) {
			struct pd_tx_resp t = { .peer = peer, .seq = m->u.error.seq,
						.err = m->u.error.code };

			(void)pd_tx_alloc_resp(b->tx, &t, pd_now_ns());
		}
		break;
	default:
		PD_LOG_RL(INFO, ctl, "peer %u: %s ignored", peer, pd_wire_type_name(m->type));
	}
}

/* The session's data secrets (random, from the HelloAcks: pd_broker_trust.c):
 * what its lanes present to us, what ours present to it. */
static void on_peer_up(void *ctx, uint32_t peer, const struct pd_msg_hello *h,
		       const struct pd_ctrl_secrets *s)
{
	struct pd_broker *b = ctx;

	if (peer < MAX_TOKENS) {
		(void)pthread_mutex_lock(&b->tok_lock);
		b->token[peer] = s->accept;
		b->present[peer] = s->present;
		b->sess[peer]++; /* connections of an older session stop counting */
		atomic_store(&b->unseen_in[peer], 0); /* a new session: its QPs are yet to come */
		(void)pthread_mutex_unlock(&b->tok_lock);
	}
	PD_LOG(INFO, ctl, "peer %u (%.*s) up", peer, (int)h->name.len, (const char *)h->name.p);
	pd_broker_xport_up(b, peer, h);
}

static void on_peer_down(void *ctx, uint32_t peer, int err)
{
	struct pd_broker *b = ctx;
	uint64_t now = pd_now_ns();

	PD_LOG(WARN, ctl, "peer %u down: %s", peer, pd_strerror(err));
	if (peer < MAX_TOKENS) {
		(void)pthread_mutex_lock(&b->tok_lock);
		b->token[peer] = 0;
		b->sess[peer]++; /* its connections' writes never land from now on */
		atomic_store(&b->unseen_in[peer], 0);
		(void)pthread_mutex_unlock(&b->tok_lock);
	}
	pd_broker_xport_down(b, peer); /* its writes complete (shm unmapped once they did) */
	if (b->tx)
		(void)pd_tx_peer_failed(b->tx, peer, err, now);
	if (b->rx)
		(void)pd_rx_peer_failed(b->rx, peer, now);
}

const struct pd_ctrl_ops pd_broker_ctrl_ops = {
	.on_msg = on_msg, .on_peer_up = on_peer_up, .on_peer_down = on_peer_down,
	.on_peer_secrets = pd_broker_on_secrets, .peer_busy = pd_broker_peer_busy,
	.on_peer_evicted = pd_broker_peer_evicted,
};

/* ---- data plane callbacks (data threads) ------------------------------------------------- */

/* A connection presenting token, of transport id: its peer, or -EACCES (no
 * live peer has it). An unseen transport's connection lets the peer's
 * PutDones commit slots no write we saw landed in (this session only). */
static int up_accept(void *ctx, uint64_t token, uint32_t id, uint32_t *lane)
{
	const struct pd_xport_ops *ops = pd_xport_ops_of(id);
	struct pd_broker *b = ctx;
	int rc = -EACCES;

	(void)pthread_mutex_lock(&b->tok_lock);
	for (uint32_t i = 0; token && i < MAX_TOKENS; i++) {
		if (b->token[i] == token) {
			*lane = LANE_ID(i, b->sess[i]);
			if (ops && (ops->flags & PD_XPORT_F_UNSEEN)) /* under the lock: a new
								      * session's reset cannot pass it */
				atomic_fetch_or(&b->unseen_in[i], 1u << id);
			rc = 0;
			break;
		}
	}
	(void)pthread_mutex_unlock(&b->tok_lock);
	return rc;
}

/* The grant word g names this connection's peer and session and the
 * frame's generation, and nothing landed in it yet. */
static int grant_is(uint64_t g, uint32_t lane, uint32_t gen)
{
	return (g & GRANT_PEER) == LANE_PEER(lane) + 1u && GRANT_SESS(g) == LANE_SESS(lane) &&
	       GRANT_GEN(g) == gen && !(g & GRANT_LANDED);
}

static int refused(struct pd_broker *b)
{
	pd_stat_add(&b->refused_writes, 1);
	return -EPERM;
}

/* Only into a slot granted to this very peer, in this connection's
 * session, at this generation, not yet written, and exactly as long as the
 * chunk granted there: as the AllocRequest said, else as its first write
 * says (a PutDone naming another length is refused). */
static int up_claim(void *ctx, uint32_t lane, uint32_t slot, uint32_t gen, uint32_t len,
		    void **dst, uint64_t *cap)
{
	struct pd_broker *b = ctx;
	uint32_t want;

	if (!b->shm.has_recv || slot >= b->shm.recv.nslots || len > b->shm.recv.slot_size ||
	    !grant_is(atomic_load(&b->grant[slot]), lane, gen))
		return refused(b);
	want = atomic_load(&b->slot_len[slot]);
	if (!want && atomic_compare_exchange_strong(&b->slot_len[slot], &want, len))
		want = len;
	if (len != want)
		return refused(b);
	*dst = b->shm.recv.arena + (uint64_t)slot * b->shm.recv.slot_size;
	*cap = b->shm.recv.slot_size;
	return 0;
}

static void up_landed(void *ctx, uint32_t lane, uint32_t slot, uint32_t gen, uint32_t len,
		      int status)
{
	struct pd_broker *b = ctx;
	uint32_t peer = LANE_PEER(lane);
	uint64_t g;

	if (status != 0 || slot >= b->shm.recv.nslots)
		return;
	/* Landed: the PutDone that follows may commit it, unless the grant
	 * was withdrawn (or granted again) meanwhile: then it stays so. */
	g = atomic_load(&b->grant[slot]);
	if (!grant_is(g, lane, gen) ||
	    !atomic_compare_exchange_strong(&b->grant[slot], &g, g | GRANT_LANDED))
		return;
	pd_stat_add(&b->shm.seg.hdr->stats[PD_STAT_BYTES_RECV], len);
	if (peer < MAX_TOKENS) {
		pd_stat_add(&b->acct[peer].bytes_rx, len);
		pd_stat_add(&b->acct[peer].chunks_rx, 1);
	}
}

const struct pd_xport_up pd_broker_up_ops = {
	.accept_peer = up_accept, .claim = up_claim, .landed = up_landed,
};

void pd_broker_write_ended(struct pd_broker *b, uint64_t seq, int status)
{
	struct wbatch key = { .seq = seq }, *w = RB_FIND(wb_tree, &b->wbatches, &key);

	if (!w)
		return;
	if (status < 0 && !w->err)
		w->err = status;
	if (--w->left)
		return;
	RB_REMOVE(wb_tree, &b->wbatches, w);
	(void)pd_tx_write_done(b->tx, seq, w->err, pd_now_ns());
	free(w);
}

void pd_broker_cpls_handle(struct pd_broker *b, const struct pd_cpl *c, int n)
{
	for (int i = 0; i < n; i++) {
		if (c[i].kind == PD_CPL_WRITE)
			pd_broker_write_ended(b, c[i].cookie, c[i].status);
		else if (pd_ctrl_peer_reset(b->ctrl, c[i].peer, c[i].status) <= 0 && b->tx)
			(void)pd_tx_peer_failed(b->tx, c[i].peer, c[i].status, pd_now_ns());
	}
}
