/* SPDX-License-Identifier: MIT */
/*
 * Sender request engine (broker/pd_tx.c, pd_tx_admit.c, pd_tx_end.c) under
 * seeded random interleavings: declarations (some with admission
 * deadlines of their own, some of requests already known), answers to
 * their Reserves (admitted, refused, answered with indexes, late, or never:
 * then the deadline), submits (some inconsistent, some of requests never
 * declared or not admitted yet), AllocResponses in random order (some
 * errors, failed indexes, dedup, mismatches, unknown seqs), write
 * completions (some failures), write posts refused, cancels, agent loss,
 * peer failures and ticks over 4 req_ids x 2 ranks, 3 agents, 2 peers,
 * with notify_failures on so that every request end shows as one
 * ProxyNotif.
 *
 * Checked after every event (by the fake in tx_fixture.h, by scan() and by
 * pd_tx_check()): a staging slot is freed at most once, never while its
 * batch is being written; no batch (AllocRequest) for a request not
 * admitted, and pd_tx_check() finds every batch on an admitted request;
 * ADMITTED at most once per request, only for one declared and waiting,
 * never to a gone agent, and at once when its Reserve is answered; a batch
 * of a request not declared is refused without an event, one of a request
 * declared but not admitted fails it (-EPROTO); after a tick no request
 * whose admission deadline passed is still waiting; PUT_DONE/PUT_FAILED at
 * most once per request (right after its ProxyNotif), never to a gone
 * agent; ProxyNotif at most once per request and, with status 0, only when
 * every chunk of it completed; CancelNotif only with no write of the
 * request (any rank) in flight, never after its peer failed. At the end,
 * after cancelling everything and draining the writes: every late answer
 * is stale, every slot freed exactly once, nothing live or waiting, no
 * tombstone.
 *
 * PD_TX_SEED=n replays one seed; PD_TX_SEEDS=n sets how many (2000).
 */
#include "tx_fixture.h"

#define NIDS    4u
#define NRANKS  2u
#define NKEYS   (NIDS * NRANKS)
#define NPEERS  2u
#define NAGENTS 3u
#define STEPS   200u
/* Short enough that tombstones expire and deadlines pass within a run. */
#define TIMEOUT   2000u
#define TOMBSTONE 2500u

struct key {
	uint32_t total, sent;
	uint8_t last, open, peer_dead;
	uint8_t admit;                 /* 1 declared, waiting; 2 admitted */
	uint8_t told;                  /* its Reserve went out: the peer knows it */
	uint64_t deadline;             /* of its admission */
	uint64_t first_seq;            /* seqs of its current request start here */
};

struct h {
	struct fx *f;
	uint64_t rng;
	struct key k[NKEYS];
	uint8_t seq_key[FX_SEQS];
	uint64_t pending[FX_SEQS], writing[FX_SEQS];
	uint32_t npending, nwriting;
	uint64_t reserves[FX_SEQS];    /* Reserves not answered yet */
	uint32_t nreserves;
	uint64_t answered[FX_SEQS];    /* Reserves answered, or never to be */
	uint32_t nanswered;
	uint8_t silent[FX_SEQS];       /* a Reserve never answered (until the end) */
	uint64_t max_seq;
	uint32_t agent[NAGENTS];       /* current id of agent slot i */
	uint32_t gone[64];
	uint32_t ngone;
	uint32_t submitting;           /* key + 1 during its declaration or submit */
	uint32_t admitted_now;         /* ADMITTED events in this step */
};

static const char *const ids[NIDS] = { "q0", "q1", "q2", "q3" };

static uint32_t rnd(struct h *h, uint32_t n)
{
	uint64_t z = (h->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (uint32_t)((z ^ (z >> 31)) % n);
}

static uint32_t key_peer(uint32_t k)
{
	return 1 + (k / NRANKS) % NPEERS;
}

static struct fx_req key_req(const struct h *h, uint32_t k)
{
	return (struct fx_req){ ids[k / NRANKS], k % NRANKS, NRANKS, h->k[k].total,
				key_peer(k), h->agent[(k / NRANKS) % NAGENTS] };
}

static uint32_t key_of(const char *req, uint32_t rank)
{
	return (uint32_t)(req[1] - '0') * NRANKS + rank;
}

/* ---- per-event checks ------------------------------------------------------------ */

/* Every chunk of k's current request completed, and they add up to total. */
static void check_complete(struct h *h, uint32_t k, const struct fx_ev *e)
{
	struct fx *f = h->f;
	uint32_t sum = 0;
	uint64_t s;

	for (s = h->k[k].first_seq; s <= h->max_seq; s++) {
		const struct fx_batch *b = &f->b[s];

		if (h->seq_key[s] != k || b->reserve)
			continue;
		if (!b->resp_ok || (b->wrote && !b->done_ok))
			fx_breach(f, "ProxyNotif %s/%u with seq %llu not complete", e->req,
				  e->rank, (unsigned long long)s);
		sum += b->n;
	}
	if (sum != e->chunks || e->chunks != h->k[k].total)
		fx_breach(f, "ProxyNotif %s/%u: %u chunks, %u done, total %u", e->req, e->rank,
			  e->chunks, sum, h->k[k].total);
}

static void on_cancel(struct h *h, const struct fx_ev *e)
{
	uint32_t k = key_of(e->req, e->rank);
	uint64_t s;

	if (h->k[k].peer_dead)
		fx_breach(h->f, "CancelNotif %s/%u after its peer failed", e->req, e->rank);
	/* The receiver rolls back every rank of the request: none may be writing. */
	for (s = 1; s <= h->max_seq; s++)
		if (h->seq_key[s] / NRANKS == k / NRANKS && h->f->b[s].writing)
			fx_breach(h->f, "CancelNotif %s/%u with seq %llu of rank %u being written",
				  e->req, e->rank, (unsigned long long)s, h->seq_key[s] % NRANKS);
}

static void on_proxy(struct h *h, uint32_t i)
{
	const struct fx_ev *e = &h->f->ev[i], *p = i ? &h->f->ev[i - 1] : NULL;
	uint32_t k = key_of(e->req, e->rank);
	struct key *kk = &h->k[k];

	/* A rank declared after a cancel of its request is refused and
	 * reported at once (it never became a request). */
	if (!kk->open && !(h->submitting == k + 1 && e->status == -ECANCELED))
		fx_breach(h->f, "ProxyNotif %s/%u for no request", e->req, e->rank);
	if (!e->status)
		check_complete(h, k, e);
	if (!e->status && kk->admit != 2)
		fx_breach(h->f, "ProxyNotif %s/%u done, never admitted", e->req, e->rank);
	/* A failed request the peer knows of is withdrawn there (CancelNotif,
	 * right before), unless the peer failed. */
	if (e->status && kk->open && kk->told && !kk->peer_dead &&
	    (!p || p->type != EV_CANCEL || strcmp(p->req, e->req) || p->rank != e->rank))
		fx_breach(h->f, "ProxyNotif %s/%u failed (%d) without its CancelNotif", e->req,
			  e->rank, e->status);
	memset(kk, 0, sizeof(*kk));
	kk->first_seq = h->max_seq + 1;
}

static int gone(const struct h *h, uint32_t agent)
{
	for (uint32_t g = 0; g < h->ngone; g++)
		if (h->gone[g] == agent)
			return 1;
	return 0;
}

static void on_agent(struct h *h, uint32_t i)
{
	const struct fx_ev *e = &h->f->ev[i], *p = i ? &h->f->ev[i - 1] : NULL;

	if (!p || p->type != EV_PROXY || strcmp(p->req, e->req) || p->rank != e->rank ||
	    p->status != e->status)
		fx_breach(h->f, "agent event %s/%u not right after its ProxyNotif", e->req,
			  e->rank);
	if (gone(h, e->agent))
		fx_breach(h->f, "agent event to gone agent %u", e->agent);
}

/* Only a request declared and waiting is admitted, once, to a live agent. */
static void on_admitted(struct h *h, const struct fx_ev *e)
{
	uint32_t k = key_of(e->req, e->rank);
	struct key *kk = &h->k[k];

	if (!kk->open || kk->admit != 1)
		fx_breach(h->f, "ADMITTED %s/%u: open %u, admit %u", e->req, e->rank, kk->open,
			  kk->admit);
	if (gone(h, e->agent))
		fx_breach(h->f, "ADMITTED to gone agent %u", e->agent);
	if (e->chunks != kk->total)
		fx_breach(h->f, "ADMITTED %s/%u with %u chunks, total %u", e->req, e->rank,
			  e->chunks, kk->total);
	kk->admit = 2;
	h->admitted_now++;
}

/* A Reserve only at a declaration, for the request being declared. */
static void on_reserve(struct h *h, const struct fx_ev *e)
{
	uint32_t k = key_of(e->req, e->rank);

	if (h->submitting != k + 1 || e->chunks != h->k[k].total)
		fx_breach(h->f, "Reserve %s/%u outside its declaration", e->req, e->rank);
	h->seq_key[e->seq] = (uint8_t)k;
	h->max_seq = e->seq;
	h->reserves[h->nreserves++] = e->seq;
	h->k[k].told = 1;
}

/* Walk the events of the last step, then forget them. */
static void scan(struct h *h)
{
	struct fx *f = h->f;
	uint32_t i;

	for (i = 0; i < f->nev; i++) {
		const struct fx_ev *e = &f->ev[i];

		if (e->type == EV_ALLOC) {
			uint32_t k = key_of(e->req, e->rank);

			if (!h->k[k].open || h->k[k].admit != 2)
				fx_breach(f, "AllocRequest %s/%u of a request not admitted", e->req,
					  e->rank);
			h->seq_key[e->seq] = (uint8_t)k;
			h->max_seq = e->seq;
			h->pending[h->npending++] = e->seq;
		} else if (e->type == EV_RESERVE) {
			on_reserve(h, e);
		} else if (e->type == EV_ADMITTED) {
			on_admitted(h, e);
		} else if (e->type == EV_WRITE && f->b[e->seq].writing) {
			h->writing[h->nwriting++] = e->seq;
		} else if (e->type == EV_CANCEL) {
			on_cancel(h, e);
		} else if (e->type == EV_PROXY) {
			on_proxy(h, i);
		} else if (e->type == EV_AGENT) {
			on_agent(h, i);
		}
	}
	if (!f->bad && pd_tx_check(f->tx) < 0)
		fx_breach(f, "pd_tx_check failed");
	f->nev = 0;
}

/* ---- random events -------------------------------------------------------------------- */

static uint64_t take(struct h *h, uint64_t *list, uint32_t *n)
{
	uint32_t i = rnd(h, *n);
	uint64_t seq = list[i];

	list[i] = list[--*n];
	return seq;
}

/* A declaration: usually of a key with no request, now and then of an open
 * one (-EEXIST); some with an admission deadline of their own. */
static void ev_declare(struct h *h, uint32_t k)
{
	struct key *kk = &h->k[k];
	uint64_t timeout = rnd(h, 3) ? 0 : 1 + rnd(h, 2 * TIMEOUT);
	uint32_t was_open = kk->open, total = kk->open ? kk->total : rnd(h, 10);
	struct fx_req q;
	int rc;

	q = key_req(h, k);
	q.total = total;
	h->submitting = k + 1;
	if (!was_open)
		kk->total = total;            /* what its Reserve must carry */
	rc = fx_declare(h->f, &q, timeout);
	if (was_open && rc != -EEXIST)
		fx_breach(h->f, "declare of open %s/%u: %d", q.id, q.rank, rc);
	if (rc && rc != -EEXIST && rc != -ECANCELED && rc != -EBUSY)
		fx_breach(h->f, "declare: %d", rc);
	if (!rc) {
		memset(kk, 0, sizeof(*kk));
		kk->open = 1;
		kk->admit = 1;
		kk->total = total;
		kk->first_seq = h->max_seq + 1;
		kk->deadline = h->f->now + (timeout ? timeout : TIMEOUT);
	} else if (!was_open) {
		kk->total = 0;
	}
	scan(h);
	h->submitting = 0;
}

/* A batch of a key with no request: refused (never declared, or ended and
 * still tombstoned), its staging freed, no event. */
static void submit_closed(struct h *h, uint32_t k)
{
	struct fx_req q = key_req(h, k);
	struct pd_tx_submit s;
	uint32_t i;
	int rc;

	q.total = 1 + rnd(h, 4);
	s = fx_sub(&q, 1, q.total == 1, NULL);
	rc = fx_submit(h->f, &s);
	if (rc != -ENOENT && rc != -ECANCELED && rc != -EPROTO)
		fx_breach(h->f, "batch of closed %s/%u: %d", q.id, q.rank, rc);
	for (i = 0; i < h->f->nev; i++)
		if (h->f->ev[i].type != EV_FREE)
			fx_breach(h->f, "batch of closed %s/%u: event %u", q.id, q.rank,
				  h->f->ev[i].type);
	scan(h);
}

static void ev_submit(struct h *h)
{
	uint32_t k = rnd(h, NKEYS), left, n, last;
	struct key *kk = &h->k[k];
	struct fx_req q;
	struct pd_tx_submit s;
	int rc;

	if (!kk->open) {
		if (rnd(h, 8))
			ev_declare(h, k);
		else
			submit_closed(h, k);
		return;
	}
	if (!rnd(h, 30)) {
		ev_declare(h, k);                  /* known: -EEXIST */
		return;
	}
	if (kk->admit != 2 && rnd(h, 10))
		return;                            /* the agent waits for admission */
	if (kk->last && rnd(h, 20))
		return;                            /* now and then, a batch after the last */
	left = kk->total - kk->sent;
	n = left ? 1 + rnd(h, left < 4 ? left : 4) : 0;
	last = n == left && (!n || rnd(h, 4));
	q = key_req(h, k);
	s = fx_sub(&q, n, last, NULL);
	if (!rnd(h, 40))
		s.total_chunks++;                  /* inconsistent */
	h->submitting = k + 1;
	rc = fx_submit(h->f, &s);
	if (kk->admit != 2 && rc != -EPROTO && rc != -ECANCELED)
		fx_breach(h->f, "batch before admission of %s/%u: %d", q.id, q.rank, rc);
	if (rc && rc != -EPROTO && rc != -ECANCELED)
		fx_breach(h->f, "submit: %d", rc);
	if (!rc) {
		kk->sent += n;
		kk->last = (uint8_t)last;
	}
	scan(h);
	h->submitting = 0;
}

/* Some positions of an n-chunk batch, distinct, in random order. */
static uint32_t some_positions(struct h *h, int32_t *pos, uint32_t n)
{
	uint32_t i, m = 0;

	for (i = 0; i < n; i++)
		if (!rnd(h, 3))
			pos[m++] = (int32_t)i;
	for (i = m; i > 1; i--) {
		uint32_t j = rnd(h, i);
		int32_t t = pos[i - 1];

		pos[i - 1] = pos[j];
		pos[j] = t;
	}
	return m;
}

/* The answer to a Reserve: admitted mostly; refused; with indexes (a
 * corrupt answer); or never (its deadline then fails it). A second
 * answer to one answered before is stale. */
static void ev_answer(struct h *h)
{
	struct fx *f = h->f;
	uint32_t kind = rnd(h, 100);
	int32_t one[1] = { 7 };
	struct pd_tx_resp m = { .remote = one };
	int rc;

	if (!h->nreserves || kind < 5) {
		if (!h->nanswered)
			return;
		m.seq = h->answered[rnd(h, h->nanswered)];
		m.peer = f->b[m.seq].peer;
		if (h->silent[m.seq])             /* never answered: may still wait */
			return;
		if (pd_tx_alloc_resp(f->tx, &m, f->now) != -ENOENT)
			fx_breach(f, "second answer to Reserve %llu", (unsigned long long)m.seq);
		scan(h);
		return;
	}
	m.seq = take(h, h->reserves, &h->nreserves);
	m.peer = f->b[m.seq].peer;
	h->answered[h->nanswered++] = m.seq;
	if (kind < 15) {
		h->silent[m.seq] = 1;             /* its deadline answers */
		return;
	}
	if (kind < 25)
		m.err = kind < 20 ? -EBUSY : -ETIMEDOUT;
	else if (kind < 30)
		m.n = 1;
	h->admitted_now = 0;
	rc = pd_tx_alloc_resp(f->tx, &m, f->now);
	if (rc && rc != -ENOENT && !(rc == -EPROTO && m.n))
		fx_breach(f, "answer to Reserve %llu: %d", (unsigned long long)m.seq, rc);
	if (!rc && m.n)
		fx_breach(f, "Reserve %llu answered with indexes: 0", (unsigned long long)m.seq);
	scan(h);
	/* A Reserve still waiting belongs to a waiting request: the answer (rc
	 * 0) admits it at once, unless it is a refusal. */
	if (h->admitted_now != (!rc && !m.err && !m.n))
		fx_breach(f, "Reserve %llu (err %d, n %u): rc %d, %u admitted",
			  (unsigned long long)m.seq, m.err, m.n, rc, h->admitted_now);
}

static void ev_respond(struct h *h)
{
	struct fx *f = h->f;
	int32_t remote[64], already[64];
	uint32_t i, n, nal = 0, kind = rnd(h, 100);
	uint64_t seq;
	int rc, bad = 0;

	if (!h->npending || kind < 3) {
		seq = h->max_seq + 1 + rnd(h, 5);     /* unknown */
		if (fx_grant(f, seq) != -ENOENT)
			fx_breach(f, "response to unknown seq %llu", (unsigned long long)seq);
		return;
	}
	seq = take(h, h->pending, &h->npending);
	n = f->b[seq].n;
	for (i = 0; i < n; i++)
		remote[i] = (int32_t)(FX_REMOTE0 + f->b[seq].slot0 + i);
	if (kind < 30)
		nal = some_positions(h, already, n);
	if (kind >= 30 && kind < 32)
		remote[rnd(h, n)] = -1, bad = 1;
	if (kind >= 32 && kind < 34)
		n++, bad = 1;                      /* wrong n */
	f->write_rc = kind >= 34 && kind < 36 ? -ENOTCONN : 0;
	if (kind >= 36 && kind < 39)
		rc = fx_resp_full(f, seq, -EBUSY, NULL, 0), bad = 1;
	else
		rc = fx_resp_raw(f, seq, remote, n, already, nal);
	f->write_rc = 0;
	if (rc && rc != -ENOENT && !(rc == -EPROTO && n != f->b[seq].n))
		fx_breach(f, "response to seq %llu: %d", (unsigned long long)seq, rc);
	f->b[seq].resp_ok = !rc && !bad;
	scan(h);
}

static void ev_write_done(struct h *h)
{
	uint64_t seq;
	int rc;

	if (!h->nwriting)
		return;
	seq = take(h, h->writing, &h->nwriting);
	rc = fx_done(h->f, seq, rnd(h, 20) ? 0 : -EIO);
	if (rc)
		fx_breach(h->f, "write_done of seq %llu: %d", (unsigned long long)seq, rc);
	scan(h);
}

static void ev_cancel(struct h *h)
{
	uint32_t k = rnd(h, NKEYS);

	if (fx_cancel(h->f, ids[k / NRANKS], rnd(h, 3) ? k % NRANKS : PD_TX_ANY_RANK) < 0)
		fx_breach(h->f, "cancel failed");
	scan(h);
}

/* Agent slot a dies; it comes back under a new id. */
static void ev_agent_gone(struct h *h)
{
	uint32_t a = rnd(h, NAGENTS);

	if (pd_tx_agent_gone(h->f->tx, h->agent[a], h->f->now) < 0)
		fx_breach(h->f, "agent_gone failed");
	if (h->ngone < PD_ARRAY_SIZE(h->gone))
		h->gone[h->ngone++] = h->agent[a];
	h->agent[a] += 100;
	scan(h);
}

static void ev_peer_failed(struct h *h)
{
	uint32_t p = 1 + rnd(h, NPEERS), k;

	for (k = 0; k < NKEYS; k++)
		if (key_peer(k) == p && h->k[k].open)
			h->k[k].peer_dead = 1;
	if (pd_tx_peer_failed(h->f->tx, p, -EHOSTDOWN, h->f->now) < 0)
		fx_breach(h->f, "peer_failed failed");
	scan(h);
}

/* No request whose admission deadline passed is still waiting. */
static void on_info(void *ctx, const struct pd_tx_info *i)
{
	struct h *h = ctx;
	uint32_t k = (uint32_t)(i->req_id[1] - '0') * NRANKS + i->rank;

	if (i->state == PD_TX_INFO_DECLARED && h->k[k].deadline <= h->f->now)
		fx_breach(h->f, "q%u/%u still declared at %llu, deadline %llu", k / NRANKS,
			  i->rank, (unsigned long long)h->f->now,
			  (unsigned long long)h->k[k].deadline);
}

static void ev_tick(struct h *h)
{
	h->f->now += rnd(h, 2 * TOMBSTONE / 10);
	if (pd_tx_tick(h->f->tx, h->f->now) < 0)
		fx_breach(h->f, "tick failed");
	scan(h);
	pd_tx_foreach(h->f->tx, on_info, h);
}

static void step(struct h *h)
{
	uint32_t r = rnd(h, 100);

	if (r < 35)
		ev_submit(h);
	else if (r < 47)
		ev_answer(h);
	else if (r < 62)
		ev_respond(h);
	else if (r < 84)
		ev_write_done(h);
	else if (r < 87)
		ev_cancel(h);
	else if (r < 88)
		ev_agent_gone(h);
	else if (r < 89)
		ev_peer_failed(h);
	else
		ev_tick(h);
}

/* Cancel everything, drain the writes, expire the tombstones. */
static void finish(struct h *h)
{
	struct pd_tx_stats st;
	uint32_t i, k;

	for (i = 0; i < NIDS; i++)
		fx_cancel(h->f, ids[i], PD_TX_ANY_RANK);
	scan(h);
	while (h->nwriting)
		ev_write_done(h);
	while (h->npending)
		if (fx_grant(h->f, take(h, h->pending, &h->npending)) != -ENOENT)
			fx_breach(h->f, "a batch outlived its request");
	while (h->nreserves)
		if (fx_admit(h->f, take(h, h->reserves, &h->nreserves), 0) != -ENOENT)
			fx_breach(h->f, "a Reserve outlived its request");
	h->f->now += 1000000;
	pd_tx_tick(h->f->tx, h->f->now);
	scan(h);
	for (i = 0; i < h->nanswered; i++)       /* the never-answered ones too */
		if (fx_admit(h->f, h->answered[i], 0) != -ENOENT)
			fx_breach(h->f, "late answer to Reserve %llu not stale",
				  (unsigned long long)h->answered[i]);
	scan(h);
	for (k = 0; k < NKEYS; k++)
		if (h->k[k].open)
			fx_breach(h->f, "request %u never ended", k);
	pd_tx_get_stats(h->f->tx, &st);
	if (st.live_requests || st.live_batches || st.writes_in_flight || st.tombstones ||
	    st.admitting)
		fx_breach(h->f, "gauges not 0 at the end");
	if (st.admitted > st.declared)
		fx_breach(h->f, "declared %llu, admitted %llu", (unsigned long long)st.declared,
			  (unsigned long long)st.admitted);
}

static int run_seed(uint32_t seed, uint32_t steps)
{
	struct h *h = calloc(1, sizeof(*h));
	uint32_t i, n = 0;
	int bad;

	assert_non_null(h);
	h->f = fx_new(7, 1);
	pd_tx_destroy(h->f->tx);
	h->f->o.alloc_timeout_ns = TIMEOUT;
	h->f->o.tombstone_ns = TOMBSTONE;
	assert_int_equal(pd_tx_create(&h->f->o, &h->f->tx), 0);
	h->rng = seed;
	for (i = 0; i < NAGENTS; i++)
		h->agent[i] = 10 + i;
	for (i = 0; i < NKEYS; i++)
		h->k[i].first_seq = 1;
	while (n < steps && !h->f->bad) {
		n++;
		step(h);
	}
	if (!h->f->bad)
		finish(h);
	for (i = 1; !h->f->bad && i < h->f->next_slot; i++)
		if (h->f->frees[i] != h->f->handed[i])
			fx_breach(h->f, "slot %u freed %u times, handed %u", i, h->f->frees[i],
				  h->f->handed[i]);
	bad = h->f->bad;
	if (bad)
		print_message("seed %u (replay: PD_TX_SEED=%u), step %u of %u: %s\n", seed, seed,
			      n, steps, h->f->why);
	fx_free(h->f);
	free(h);
	return bad;
}

static void test_random_interleavings_keep_invariants(void **state)
{
	const char *one = getenv("PD_TX_SEED"), *many = getenv("PD_TX_SEEDS");
	uint32_t seeds = many ? (uint32_t)strtoul(many, NULL, 0) : 2000, s, failed = 0;

	(void)state;
	if (one) {
		assert_int_equal(run_seed((uint32_t)strtoul(one, NULL, 0), STEPS), 0);
		return;
	}
	for (s = 1; s <= seeds; s++)
		failed += run_seed(s, STEPS) != 0;
	assert_int_equal(failed, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_interleavings_keep_invariants),
	};

	return cmocka_run_group_tests_name("tx_random", tests, NULL, NULL);
}
