/* SPDX-License-Identifier: MIT */
/*
 * Receiver engine (broker/pd_rx*.c over pd_admit.c, a real recv pool and a
 * real recv index) under seeded random interleavings: AllocRequests (held
 * for admission or not, some breaking the protocol, some malformed, some
 * late), PutDones in random order (some bogus), releases, cancels, peer
 * failures, decode-side pins of the index, and ticks after time jumps;
 * over many requests from 4 peers, world sizes 1-3, batches of 0-8 keys, a
 * pool of 8-32 slots, 12 keys shared between requests (dedup, pins) and
 * anonymous one-batch requests.
 *
 * A model of every request (what it sent, what each reply granted, what
 * it wrote, whether it waits, when it last moved) predicts each call's
 * result and which requests fail, and why. After every event: pd_rx_check(),
 * free >= outstanding, free <= capacity, the pool agreeing with the
 * admission count, the gauges; every (peer, seq) answered at most once, and
 * every batch of an admitted or ended request answered; FIFO admission and
 * no admissible head left waiting; READY at most once, never before every
 * chunk (pinned ones included) is written and never missing once it is;
 * released and failed never both. At the end everything is completed or
 * cancelled, released and expired, and the engine must hold nothing.
 * The model, the callbacks and the per-event checks are in rx_model.h.
 *
 * PD_RX_SEED=n replays one seed (PD_RX_TRACE=1 prints its events);
 * PD_RX_SEEDS=n runs seeds 1..n (default 5000).
 */
#include "rx_model.h"

#define SEEDS 5000u
#define STEPS 300u

static const char *prog = "test_rx_random";

/* ---- AllocRequests ---------------------------------------------------------------- */

/* A first batch: 1 the request is created, else the answer (start_req's order). */
static int32_t first_answer(const struct mreq *m, const struct send *s)
{
	if (m->idlen && s->total == 0)
		return -EINVAL;
	if (!m->idlen && s->n == 0)
		return 0;
	if (m->need > W->nslots)
		return -E2BIG;
	if (nexist() >= W->max_requests)
		return -EBUSY;
	return 1;
}

/* Admitted at once when it has room and no waiting request is before it
 * in fair order. @return 1 admitted at once. */
static int created(struct mreq *m, uint32_t peer, int room)
{
	int fits = room;

	m->vstart = W->finish[peer] > W->vtime ? W->finish[peer] : W->vtime;
	W->finish[peer] = m->vstart + m->need;
	for (uint32_t i = 0; i < W->nm; i++)
		if (W->m[i].st == M_LIVE && W->m[i].waiting && W->m[i].vstart <= m->vstart)
			fits = 0;
	if (fits && m->vstart > W->vtime)
		W->vtime = m->vstart;
	TRACE("    %s tag %llu need %u vtime %llu (engine %llu) fits %d\n", m->id,
	      (unsigned long long)m->vstart, m->need, (unsigned long long)W->vtime,
	      (unsigned long long)pd_rx_admit(W->rx)->vtime, fits);
	m->created = 1;
	m->st = M_LIVE;
	m->tag = W->next_tag++;
	W->tag2m[m->tag] = (uint8_t)(mi(m) + 1);
	m->since = m->last_ns = W->now;
	m->waiting = !fits;
	m->wait_order = fits ? 0 : ++W->worder;
	return fits;
}

static void held(struct mreq *m, const struct mbatch *b, uint64_t seq, int rc)
{
	m->may = -EBUSY; /* max_held_bytes */
	if (rc == 1) {
		EXPECT(!b->answered, "%s: held seq %llu answered at once", m->id,
		       (unsigned long long)seq);
		m->peers |= 1u << b->peer;
		return;
	}
	EXPECT(rc == 0 && b->answered && b->err == -EBUSY && m->st == M_ENDED,
	       "%s waits: seq %llu returned %d (err %d), expected it held", m->id,
	       (unsigned long long)seq, rc, b->err);
}

static void do_alloc(struct mreq *m, const struct send *s)
{
	const struct pd_admit *ad = pd_rx_admit(W->rx);
	int fits = m->need <= ad->free - ad->outstanding;
	uint32_t st0 = m->st, waited = m->waiting;
	uint64_t seq = ++W->nseq;
	struct mbatch *b = &W->b[seq];
	struct pd_rx_key keys[MAXB];
	char kb[MAXB][24];
	int32_t first = 1, zombie = s->kind == K_VALID && zombie_in(s);
	int rc;

	*b = (struct mbatch){ .peer = s->peer, .req = mi(m), .nkeys = s->n, .kind = s->kind };
	for (uint32_t i = 0; i < s->n; i++) {
		b->code[i] = s->code[i];
		keys[i] = (struct pd_rx_key){ .p = (const uint8_t *)kb[i],
					      .len = key_str(m, s->code[i], kb[i]) };
	}
	if (s->empty)
		keys[0].len = 0;
	if (st0 == M_NEW && s->kind == K_VALID) {
		first = first_answer(m, s);
		if (first == 1)
			fits = created(m, s->peer, fits);
	}
	m->nout++;
	rc = pd_rx_alloc(W->rx,
			 &(struct pd_rx_alloc){ .peer = s->peer, .seq = seq,
						.req_id = (const uint8_t *)m->id,
						.req_id_len = m->idlen, .nkeys = s->n,
						.keys = keys, .total_chunks = s->total,
						.world_size = s->ws, .rank = s->rank,
						.is_last = s->last },
			 W->now);
	TRACE("%u: alloc %s seq %llu peer %u rank %u/%u total %u n %u last %u kind %u -> %d\n",
	      W->step, m->id, (unsigned long long)seq, s->peer, s->rank, s->ws, s->total, s->n,
	      s->last, s->kind, rc);
	if (s->kind == K_MALFORMED || s->kind == K_LATE || s->kind == K_FOREIGN || first != 1) {
		int32_t want = s->kind == K_MALFORMED ? -EINVAL : s->kind == K_LATE ? -ECANCELED
								 : s->kind == K_FOREIGN ? -EPERM
										       : first;

		EXPECT(rc == (s->kind == K_MALFORMED ? -EINVAL : 0) && b->answered &&
			       b->err == want,
		       "%s: seq %llu (kind %u) returned %d, err %d; expected err %d", m->id,
		       (unsigned long long)seq, s->kind, rc, b->err, want);
		if (first != 1 && s->kind != K_FOREIGN)
			m->st = M_REJECTED;
		return;
	}
	if (st0 == M_NEW ? !fits : (int)waited) {
		m->busy_ok |= m->shared != 0;
		held(m, b, seq, rc);
		return;
	}
	EXPECT(rc == 0 && b->answered, "%s: seq %llu returned %d, expected an answer", m->id,
	       (unsigned long long)seq, rc);
	m->may = zombie ? -EBUSY : 0;
	if (s->kind == K_VALID)
		EXPECT(b->err == m->may, "%s: valid seq %llu answered %d, expected %d", m->id,
		       (unsigned long long)seq, b->err, m->may);
	else
		EXPECT(b->err != 0 && m->st == M_ENDED,
		       "%s: protocol violation seq %llu not refused", m->id,
		       (unsigned long long)seq);
}

static uint16_t pick_code(struct mreq *m, uint32_t rank, uint32_t pos)
{
	uint32_t k = rnd(NSHARED);

	if (rnd(4) == 0 && !(m->shared >> k & 1)) {
		m->shared |= 1u << k;
		return (uint16_t)(SHARED | k);
	}
	return (uint16_t)(rank << 8 | pos);
}

/* The next batch of one of its ranks; full: as much as a batch holds. */
static void send_next(struct mreq *m, int full)
{
	struct send s = { .ws = m->ws, .total = m->total, .kind = K_VALID };
	uint32_t r, rem, max;

	do
		r = rnd(m->ws);
	while (m->sent[r] == m->total && m->last[r]);
	rem = m->total - m->sent[r];
	max = rem < MAXPOS ? rem : MAXPOS;
	s.rank = r;
	s.peer = m->peer[r];
	s.n = full ? max : rnd(max + 1);
	s.last = s.n == rem && (full || rnd(5));
	for (uint32_t i = 0; i < s.n; i++)
		s.code[i] = m->code[r][m->sent[r] + i] = pick_code(m, r, m->sent[r] + i);
	do_alloc(m, &s);
	m->sent[r] += s.n;
	m->last[r] |= s.last;
	m->ranks |= 1u << r;
}

static struct mreq *new_req(int anon)
{
	struct mreq *m = &W->m[W->nm];

	memset(m, 0, sizeof(*m));
	(void)snprintf(m->id, sizeof(m->id), "%c%u", anon ? 'a' : 'q', W->nm++);
	m->idlen = anon ? 0 : (uint32_t)strlen(m->id);
	m->ws = anon ? 1 : 1 + rnd(MAXRANK);
	m->total = rnd(40) == 0 ? 0 : 1 + rnd(m->ws == 1 ? MAXPOS : 5);
	m->need = m->total * m->ws;
	for (uint32_t r = 0; r < m->ws; r++)
		m->peer[r] = rnd(NPEERS);
	return m;
}

/* ---- events ------------------------------------------------------------------------- */

static void ev_batch(void)
{
	struct mreq *m = pick(can_send);
	uint32_t open = 0;

	W->what = "batch";
	for (uint32_t i = 0; i < W->nm; i++)
		open += can_send(&W->m[i]);
	if ((open < 3 || rnd(10) == 0) && W->nm < MAXREQ)
		m = new_req(0);
	if (m)
		send_next(m, 0);
}

static void ev_anon(void)
{
	struct mreq *m = new_req(1);
	struct send s = { .ws = rnd(4) ? 1 : 2, .last = 1, .kind = K_VALID };

	W->what = "anonymous batch";
	s.n = m->total = m->need = rnd(MAXPOS + 1);
	s.total = rnd(3); /* ignored for an anonymous request */
	s.peer = m->peer[0];
	for (uint32_t i = 0; i < s.n; i++)
		s.code[i] = pick_code(m, 0, i);
	do_alloc(m, &s);
	m->sent[0] = s.n;
	m->last[0] = 1;
}

/* peer sent a rank of m. */
static int sent_by(const struct mreq *m, uint32_t peer)
{
	for (uint32_t k = 0; k < m->ws; k++)
		if ((m->ranks >> k & 1) && m->peer[k] == peer)
			return 1;
	return 0;
}

/* A peer that sent no rank of m, for a rank taken or with other totals:
 * refused, m untouched. */
static int foreign(const struct mreq *m, const struct send *s)
{
	return !sent_by(m, s->peer) &&
	       (s->ws != m->ws || s->total != m->total || (m->ranks >> s->rank & 1));
}

/* A batch that must fail its request (or, from a stranger, be refused). */
static void ev_violation(struct mreq *m)
{
	uint32_t r = rnd(m->ws), rem = m->total - m->sent[r], v = rnd(8), p;
	struct send s = { .rank = r, .ws = m->ws, .total = m->total, .peer = m->peer[r],
			  .kind = K_VIOLATION };

	W->what = "protocol violation";
	if ((v == 3 && rem < 2) || (v == 4 && !(m->ranks >> r & 1)) || (v == 5 && !m->last[r]) ||
	    (v == 7 && rem < 2))
		v = 0;
	for (p = 0; v == 6 && p < m->sent[r] && (m->code[r][p] & SHARED); p++)
		;
	if (v == 6 && p == m->sent[r])
		v = 0;
	m->violated = 1;
	if (v == 0) { /* more chunks than declared */
		s.n = rem + 1 + rnd(2);
		for (uint32_t i = 0; i < s.n; i++)
			s.code[i] = (uint16_t)(r << 8 | (m->sent[r] + i));
	} else if (v == 1) { /* another total */
		s.total = m->total + 1 + rnd(2);
	} else if (v == 2) { /* another world size */
		s.ws = m->ws % MAXRANK + 1;
		s.rank = rnd(s.ws);
	} else if (v == 3) { /* a short last batch */
		s.n = rnd(rem - 1);
		s.last = 1;
		for (uint32_t i = 0; i < s.n; i++)
			s.code[i] = (uint16_t)(r << 8 | (m->sent[r] + i));
	} else if (v == 4) { /* the rank from another peer (a stranger's: refused) */
		s.peer = (m->peer[r] + 1 + rnd(NPEERS - 1)) % NPEERS;
	} else if (v == 6) { /* a key it already sent */
		s.n = 1;
		s.code[0] = m->code[r][p];
	} else if (v == 7) { /* one new key twice */
		s.n = 2;
		s.code[0] = s.code[1] = (uint16_t)(r << 8 | m->sent[r]);
	} /* v == 5: a batch after the rank's last one */
	if (foreign(m, &s)) {
		s.kind = K_FOREIGN;
		W->what = "foreign batch";
		m->violated = 0;
	}
	do_alloc(m, &s);
}

static void ev_malformed(void)
{
	struct mreq *m = pick(named_any);
	struct send s = { .ws = 1, .total = 1, .n = 1, .kind = K_MALFORMED, .peer = rnd(NPEERS) };
	uint32_t v = rnd(3);

	W->what = "malformed batch";
	if (!m)
		return;
	s.code[0] = (uint16_t)(MAXRANK << 8);
	s.ws = v == 0 ? 0 : m->ws;
	s.rank = v == 1 ? s.ws : 0;
	s.empty = v == 2;
	do_alloc(m, &s);
}

static void ev_late(void)
{
	struct mreq *m = pick(is_tomb);
	struct send s = { .kind = K_LATE, .n = 1, .code = { 0 } };

	W->what = "late batch";
	if (!m || !m->idlen)
		return;
	s.ws = m->ws;
	s.total = m->total ? m->total : 1;
	s.peer = m->peer[0];
	do_alloc(m, &s);
}

static void put_done(struct mreq *m, int all)
{
	int32_t slots[MAXCH];
	uint32_t n = 0, peer = 0, k = rnd(m->npend);
	int rc;

	W->what = "PutDone";
	for (uint32_t i = 0; i < m->nch; i++)
		if (m->ch[i].pending && k-- == 0)
			peer = m->ch[i].peer;
	for (uint32_t i = 0; i < m->nch; i++) {
		struct mch *c = &m->ch[i];

		if (!c->pending || c->peer != peer || (!all && n && rnd(2)))
			continue;
		slots[n++] = c->slot;
		c->pending = 0;
		W->slot_owner[c->slot] = 0;
		m->npend--;
	}
	for (uint32_t i = n; i > 1; i--) {
		uint32_t j = rnd(i);
		int32_t t = slots[i - 1];

		slots[i - 1] = slots[j];
		slots[j] = t;
	}
	m->last_ns = W->now;
	rc = pd_rx_put_done(W->rx, peer, (const uint8_t *)m->id, m->idlen, slots, n, W->now);
	TRACE("%u: put_done %s peer %u n %u -> %d\n", W->step, m->id, peer, n, rc);
	EXPECT(rc == 0, "%s: PutDone of %u granted slots returned %d", m->id, n, rc);
}

/* A PutDone naming a slot it must not: the request fails (-EPROTO), or
 * nothing happens when no live request has that name (-ENOENT). A slot
 * twice in one PutDone may also be taken as one. */
static void ev_bogus_put(struct mreq *m)
{
	int32_t slots[2] = { rnd(2) ? -1 : (int32_t)(W->nslots + rnd(4)), 0 };
	uint32_t n = 1, peer = m->peer[0], v = rnd(5), c = m->nch ? rnd(m->nch) : 0;
	int dup = 0, rc;

	W->what = "bogus PutDone";
	if (!m->idlen && (v == 1 || v == 3))
		v = 0; /* an anonymous PutDone may name any anonymous request's slot */
	if (v == 1) { /* a slot granted to another request */
		for (uint32_t s = 0; s < W->nslots; s++)
			if (W->slot_owner[s] && W->slot_owner[s] != mi(m) + 1 && rnd(2))
				slots[0] = (int32_t)s;
	} else if (v >= 2 && m->nch) {
		slots[0] = m->ch[c].slot;
		peer = m->ch[c].peer;
		if (v == 2 && m->ch[c].pending) { /* twice */
			slots[1] = slots[0];
			n = dup = 2;
			m->ch[c].pending = 0;
			W->slot_owner[slots[0]] = 0;
			m->npend--;
		} else if (v == 3 && !m->ch[c].pending && !m->ch[c].dedup) {
			/* already written */
		} else if (v == 4 && m->ch[c].pending) {
			peer = (peer + 1) % NPEERS; /* from another peer */
		} else {
			slots[0] = -1;
		}
	}
	if (m->idlen && is_live(m) && !dup)
		m->exp = -EPROTO;
	if (dup)
		m->may = -EPROTO;
	rc = pd_rx_put_done(W->rx, peer, (const uint8_t *)m->id, m->idlen, slots, n, W->now);
	TRACE("%u: bogus put_done %s peer %u slots %d,%d n %u -> %d\n", W->step, m->id, peer,
	      slots[0], slots[1], n, rc);
	if (dup && rc == 0) {
		m->last_ns = W->now;
	} else if (dup && !m->idlen) {
		EXPECT(rc == -ENOENT, "%s: duplicate slot in PutDone returned %d", m->id, rc);
		m->ch[c].pending = 1; /* refused: still unwritten */
		W->slot_owner[slots[0]] = (uint8_t)(mi(m) + 1);
		m->npend++;
	} else {
		EXPECT(rc == (m->exp || dup ? -EPROTO : -ENOENT), "%s: bogus PutDone returned %d",
		       m->id, rc);
	}
}

static void ev_release(struct mreq *m)
{
	int want = m->st == M_READY ? 0 : is_live(m) ? -EBUSY : -ENOENT;
	int rc = pd_rx_release(W->rx, (const uint8_t *)m->id, m->idlen, 0, 1, W->now);

	W->what = "release";
	TRACE("%u: release %s -> %d\n", W->step, m->id, rc);
	EXPECT(rc == want, "%s: release returned %d, expected %d", m->id, rc, want);
	if (rc == 0 && want == 0) {
		m->released = 1;
		end_req(m);
	}
}

static void ev_cancel(struct mreq *m)
{
	int live = is_live(m), rc;

	W->what = "cancel";
	if (live)
		m->exp = -ECANCELED;
	rc = pd_rx_cancel(W->rx, (const uint8_t *)m->id, m->idlen, W->now);
	TRACE("%u: cancel %s -> %d\n", W->step, m->id, rc);
	EXPECT(rc == live, "%s: cancel returned %d, expected %d", m->id, rc, live);
}

static void ev_peer_failed(void)
{
	uint32_t p = rnd(NPEERS), n = 0;
	int rc;

	W->what = "peer failure";
	for (uint32_t i = 0; i < W->nm; i++) {
		struct mreq *m = &W->m[i];

		if (m->created && m->st == M_LIVE && (m->peers >> p & 1)) {
			m->exp = -ENOTCONN;
			n++;
		}
	}
	rc = pd_rx_peer_failed(W->rx, p, W->now);
	TRACE("%u: peer %u failed -> %d\n", W->step, p, rc);
	EXPECT(rc == (int)n, "peer %u failed: %d requests rolled back, expected %u", p, rc, n);
}

static void tick_by(uint64_t dt)
{
	uint32_t n = 0;
	int rc;

	W->what = "tick";
	W->now += dt;
	for (uint32_t i = 0; i < W->nm; i++) {
		struct mreq *m = &W->m[i];

		if (!is_live(m))
			continue;
		if (m->st == M_LIVE && m->waiting ? W->now - m->since >= W->adm_ns
						  : W->now - m->last_ns >= W->ttl_ns) {
			m->exp = -ETIMEDOUT;
			n++;
		}
	}
	rc = pd_rx_tick(W->rx, W->now);
	TRACE("%u: tick +%llu ms -> %d\n", W->step, (unsigned long long)(dt / MS), rc);
	EXPECT(rc == (int)n, "tick: %d requests expired, expected %u", rc, n);
	for (uint32_t i = 0; i < W->nm; i++)
		if (is_tomb(&W->m[i]) && W->now - W->m[i].end_ns >= W->tomb_ns)
			W->m[i].tomb = 0;
}

static void ev_tick(void)
{
	uint32_t x = rnd(20);
	uint64_t max = x < 14 ? SEC / 2 : x < 19 ? W->adm_ns : 2 * W->ttl_ns;

	tick_by(rnd((uint32_t)(max / MS)) * MS);
}

/* A decode agent pins a committed chunk's index entry (its slot then
 * outlives the requests, as a zombie), or lets one go. */
static void ev_pin(void)
{
	struct mreq *m = pick(has_written);
	struct pd_index_val v;
	uint32_t c = m ? rnd(m->nch) : 0, len;
	char k[24];

	W->what = "decode pin";
	if (!m || W->npins == NPINS || m->ch[c].pending)
		return;
	len = key_str(m, m->ch[c].code, k);
	if (pd_index_lookup(&W->index, k, len, &v) == 0 && v.state == PD_INDEX_COMMITTED) {
		EXPECT(pd_index_pin(&W->index, k, len, &v, &W->cells[W->npins]) == 0, "pin %s", k);
		memcpy(W->pins[W->npins++], k, sizeof(k));
		TRACE("%u: decode pin %s\n", W->step, k);
	}
}

static void unpin(uint32_t i)
{
	W->what = "decode unpin";
	TRACE("%u: decode unpin %s\n", W->step, W->pins[i]);
	EXPECT(pd_index_unpin(&W->cells[i], atomic_load(&W->cells[i])) == 0, "unpin %s",
	       W->pins[i]);
	memcpy(W->pins[i], W->pins[--W->npins], sizeof(W->pins[i]));
	atomic_store(&W->cells[i], atomic_exchange(&W->cells[W->npins], 0));
}

/* ---- driving ------------------------------------------------------------------------ */

static int event_end(void)
{
	if (!W->bad)
		check();
	W->step++;
	if (W->bad && !W->told++)
		print_message("rx random: seed %u, event %u (%s): %s [%s:%u]\n"
			      "  replay: PD_RX_SEED=%u PD_RX_TRACE=1 %s\n",
			      W->seed, W->step - 1, W->what, W->msg, W->file, W->bad, W->seed,
			      prog);
	return !W->bad;
}

/* ---- one seed ---------------------------------------------------------------------- */

static void step(void)
{
	uint32_t x = rnd(100);
	struct mreq *m = NULL;

	W->now += rnd(20) * MS;
	if (x >= 40 && x < 62 && (m = pick(has_pend)))
		put_done(m, 0);
	else if (x >= 62 && x < 69 && (m = rnd(4) ? pick(is_ready) : pick(named_any)))
		ev_release(m);
	else if (x >= 69 && x < 72 && (m = pick(named_any)))
		ev_cancel(m);
	else if (x == 72)
		ev_peer_failed();
	else if (x >= 73 && x < 80)
		ev_tick();
	else if (x >= 80 && x < 83 && (m = pick(named_live)))
		ev_violation(m);
	else if (x >= 83 && x < 86 && (m = pick(not_new)))
		ev_bogus_put(m);
	else if (x >= 86 && x < 88)
		ev_malformed();
	else if (x >= 88 && x < 90)
		ev_late();
	else if (x >= 90 && x < 93 && W->nm < MAXREQ)
		ev_anon();
	else if (x >= 93 && x < 97)
		ev_pin();
	else if (x >= 97 && W->npins)
		unpin(rnd(W->npins));
	else
		ev_batch();
}

/* Complete what can complete, release it; cancel the rest; let every
 * deadline and tombstone pass. Then nothing may be left. */
static void drain(void)
{
	uint64_t far = W->adm_ns + W->ttl_ns + W->tomb_ns + SEC;
	int moved = 1;

	while (W->npins && event_end())
		unpin(0);
	for (uint32_t round = 0; moved && round < 64 && event_end(); round++) {
		moved = 0;
		tick_by(MS); /* reaps zombies, may admit */
		for (uint32_t i = 0; i < W->nm && !W->bad; i++) {
			struct mreq *m = &W->m[i];

			while (can_send(m) && W->nseq + 4 < MAXSEQ && event_end())
				send_next(m, 1), moved = 1;
			while (m->npend && event_end())
				put_done(m, 1), moved = 1;
			if (is_ready(m) && event_end())
				ev_release(m), moved = 1;
		}
	}
	for (uint32_t i = 0; i < W->nm; i++)
		EXPECT(!(W->m[i].st == M_LIVE && !W->m[i].waiting && W->m[i].idlen),
		       "%s: all sent and written, never READY", W->m[i].id);
	for (uint32_t i = 0; i < W->nm && event_end(); i++)
		if (named_any(&W->m[i]))
			ev_cancel(&W->m[i]);
	for (uint32_t i = 0; i < W->nm && !W->bad; i++)
		while (W->m[i].npend && event_end())
			put_done(&W->m[i], 1);
	for (uint32_t i = 0; i < 16 && (nexist() || !i) && event_end(); i++)
		tick_by(far);
}

static void final_check(void)
{
	const struct pd_admit *a = pd_rx_admit(W->rx);
	struct pd_rx_stats st;
	uint64_t nforeign = 0;

	W->what = "end";
	pd_rx_get_stats(W->rx, &st);
	EXPECT(pd_pool_nfree(&W->pool) == W->nslots && a->free == a->capacity &&
		       a->outstanding == 0 && a->nwaiting == 0 && a->nadmitted == 0,
	       "at the end: pool %u free of %u, admission free %u outstanding %llu admitted %u",
	       pd_pool_nfree(&W->pool), W->nslots, a->free, (unsigned long long)a->outstanding,
	       a->nadmitted);
	EXPECT(pd_index_count(&W->index) == 0, "at the end: %u index entries",
	       pd_index_count(&W->index));
	EXPECT(st.live_requests == 0 && st.waiting_requests == 0 && nexist() == 0,
	       "at the end: %llu live requests", (unsigned long long)st.live_requests);
	for (uint64_t s = 1; s <= W->nseq; s++) {
		EXPECT(W->b[s].answered, "seq %llu never answered", (unsigned long long)s);
		nforeign += W->b[s].kind == K_FOREIGN;
	}
	EXPECT(st.rejected_foreign == nforeign, "%llu foreign batches refused, %llu sent",
	       (unsigned long long)st.rejected_foreign, (unsigned long long)nforeign);
	W->sum.rejected_foreign += st.rejected_foreign;
	W->sum.ready += st.ready, W->sum.released += st.released, W->sum.failed += st.failed;
	W->sum.deduped += st.deduped, W->sum.proto_errors += st.proto_errors;
	W->sum.ttl_reclaimed += st.ttl_reclaimed, W->sum.rejected_busy += st.rejected_busy;
	W->timeouts += pd_rx_admit(W->rx)->stats.timed_out;
	W->sum.batches += st.batches, W->sum.late_putdone += st.late_putdone;
}

static void setup_seed(uint32_t seed)
{
	struct pd_rx_opts o = { .pool = &W->pool, .index = &W->index, .ops = &rxm_ops, .owner = 7 };

	memset(W->m, 0, sizeof(W->m));
	memset(W->tag2m, 0, sizeof(W->tag2m));
	memset(W->slot_owner, 0, sizeof(W->slot_owner));
	W->seed = seed;
	W->what = "start";
	W->rng = seed * 0x2545f4914f6cdd1dull;
	W->step = W->nm = W->npins = W->nevans = 0;
	W->nseq = W->worder = W->vtime = 0;
	memset(W->finish, 0, sizeof(W->finish));
	W->next_tag = 1;
	W->now = 1000;
	W->nslots = 8 + rnd(MAXSLOTS - 7);
	W->max_requests = 8 + rnd(56);
	W->adm_ns = (1 + rnd(8)) * SEC;
	W->ttl_ns = (2 + rnd(10)) * SEC;
	W->tomb_ns = (1 + rnd(5)) * SEC;
	assert_int_equal(pd_pool_init(W->pool_mem, W->pool_len, W->nslots, 4096), 0);
	assert_int_equal(pd_pool_open(&W->pool, W->pool_mem, W->pool_len, NULL, 0), 0);
	assert_int_equal(pd_index_init(W->index_mem, W->index_len, NBUCKETS, 64, seed), 0);
	assert_int_equal(pd_index_open(&W->index, W->index_mem, W->index_len), 0);
	pd_index_set_journals(&W->index, &(struct pd_index_journals){ .cells = W->cells,
								       .njournals = 1,
								       .ncells = NPINS });
	o.max_requests = W->max_requests;
	o.admission_timeout_ns = W->adm_ns;
	o.ttl_ns = W->ttl_ns;
	o.tombstone_ns = W->tomb_ns;
	o.max_held_bytes = rnd(4) ? 1u << 20 : 1024 + rnd(3072);
	assert_int_equal(pd_rx_create(&o, &W->rx), 0);
	TRACE("seed %u: %u slots, %u requests max, admission %llu s, ttl %llu s, tomb %llu s, "
	      "held bytes %llu\n", seed, W->nslots, W->max_requests,
	      (unsigned long long)(W->adm_ns / SEC), (unsigned long long)(W->ttl_ns / SEC),
	      (unsigned long long)(W->tomb_ns / SEC), (unsigned long long)o.max_held_bytes);
}

static void run_seed(uint32_t seed)
{
	setup_seed(seed);
	for (uint32_t i = 0; i < STEPS && event_end(); i++) {
		if (W->nseq + 16 >= MAXSEQ)
			break;
		step();
	}
	if (event_end())
		drain();
	if (event_end())
		final_check();
	(void)event_end();
	pd_rx_destroy(W->rx);
	W->rx = NULL;
}

static int setup(void **state)
{
	int64_t plen = pd_pool_memsize(MAXSLOTS), ilen = pd_index_memsize(NBUCKETS);

	(void)state;
	W = calloc(1, sizeof(*W));
	if (!W || plen < 0 || ilen < 0)
		return -1;
	W->pool_len = (size_t)plen;
	W->index_len = (size_t)ilen;
	W->pool_mem = aligned_alloc(64, (W->pool_len + 63) & ~(size_t)63);
	W->index_mem = aligned_alloc(64, (W->index_len + 63) & ~(size_t)63);
	W->trace = getenv("PD_RX_TRACE") != NULL;
	return W->pool_mem && W->index_mem ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	pd_rx_destroy(W->rx);
	free(W->pool_mem);
	free(W->index_mem);
	free(W);
	W = NULL;
	return 0;
}

static void test_rx_random_interleavings(void **state)
{
	const char *one = getenv("PD_RX_SEED"), *many = getenv("PD_RX_SEEDS");
	uint32_t first = one ? (uint32_t)strtoul(one, NULL, 0) : 1;
	uint32_t n = one ? 1 : many ? (uint32_t)strtoul(many, NULL, 0) : SEEDS;
	uint64_t events = 0;

	(void)state;
	for (uint32_t s = first; s < first + n && !W->bad; s++) {
		run_seed(s);
		events += W->step;
	}
	if (W->bad)
		fail();
	print_message("rx random: %u seeds, %llu events; %llu batches, %llu ready, %llu released, "
		      "%llu failed, %llu deduped, %llu protocol errors, %llu ttl, %llu admission "
		      "timeouts, %llu busy, %llu late PutDones, %llu foreign refused\n",
		      n, (unsigned long long)events, (unsigned long long)W->sum.batches,
		      (unsigned long long)W->sum.ready, (unsigned long long)W->sum.released,
		      (unsigned long long)W->sum.failed, (unsigned long long)W->sum.deduped,
		      (unsigned long long)W->sum.proto_errors,
		      (unsigned long long)W->sum.ttl_reclaimed,
		      (unsigned long long)W->timeouts,
		      (unsigned long long)W->sum.rejected_busy,
		      (unsigned long long)W->sum.late_putdone,
		      (unsigned long long)W->sum.rejected_foreign);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rx_random_interleavings),
	};

	if (argc > 0)
		prog = argv[0];
	return cmocka_run_group_tests(tests, setup, teardown);
}
