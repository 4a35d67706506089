/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_TX_FIXTURE_H
#define PD_TESTS_UNIT_TX_FIXTURE_H

/*
 * Fixture for the sender request engine tests (test_tx*.c): a recording
 * fake of the ops. Every callback appends an event to a log the tests
 * inspect; the fake also keeps, per staging slot, how often it was freed
 * and whether a write from it is in flight, and flags a breach of the
 * engine's promises (a slot freed twice or while written, a callback for
 * an unknown batch, a Reserve with chunks, an AllocRequest or a write for a
 * Reserve's seq) in f->bad with a reason, checked by fx_ok() (which also
 * runs pd_tx_check()).
 *
 * Requests are declared before they are staged (pd_tx_declare). fx_put()
 * does that for a test on a request's first sight: it declares the request
 * and answers its Reserve at once (admitted), unless f->manual is set;
 * fx_declare(), fx_reserve_seq() and fx_admit() drive admission by hand.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pd_compiler.h"
#include "pd_tx.h"

#define FX_EV_MAX    (1u << 16)
#define FX_SLOTS     (1u << 14)
#define FX_SEQS      (1u << 13)
#define FX_REMOTE0   5000          /* remote index granted for chunk i: FX_REMOTE0 + slot */

/* Event types. */
#define EV_ALLOC   1u
#define EV_WRITE   2u
#define EV_FREE    3u
#define EV_PUT     4u
#define EV_CANCEL  5u
#define EV_PROXY   6u
#define EV_AGENT   7u
#define EV_WAKE    8u
#define EV_RESERVE 9u              /* send_reserve: seq, n 0, chunks = total */
#define EV_ADMITTED 10u            /* admitted: chunks = total */

struct fx_ev {
	uint32_t type;
	uint64_t seq;                  /* ALLOC, WRITE, PUT */
	uint32_t peer, rank, agent;
	uint32_t n;                    /* chunks (ALLOC, WRITE, RESERVE: 0), slots (FREE),
					* indexes (PUT) */
	uint32_t nwrite;               /* WRITE: remote >= 0 */
	int32_t status;                /* PROXY, AGENT, ADMITTED */
	uint32_t chunks;               /* PROXY, AGENT, ADMITTED; RESERVE: total */
	uint32_t world;                /* RESERVE */
	uint32_t grants;               /* RESERVE: grants asked */
	uint32_t bind;                 /* WRITE, PUT: on grants of the admission */
	int32_t remote0;               /* WRITE: the first chunk's remote index */
	uint64_t bytes, tag;
	uint32_t slot0;                /* FREE: first slot index */
	char req[PD_REQ_ID_MAX + 1];
};

/* What the fake knows of a batch, by seq. */
struct fx_batch {
	uint32_t n, slot0, peer;
	uint8_t writing;               /* writes posted, fx_done() not yet called */
	uint8_t wrote;                 /* the write op was called */
	uint8_t resp_ok;               /* answered with every chunk granted or already sent */
	uint8_t done_ok;               /* its writes completed, rc 0 */
	uint8_t reserve;               /* a Reserve's seq (no chunks) */
};

struct fx {
	struct pd_tx *tx;
	struct pd_tx_opts o;
	struct fx_ev *ev;
	uint32_t nev;
	int write_rc;                  /* what the write op returns */
	uint32_t next_slot;
	uint64_t now;
	uint8_t frees[FX_SLOTS];
	uint8_t busy[FX_SLOTS];        /* a write from this slot is in flight */
	uint8_t handed[FX_SLOTS];      /* the engine owns (or owned) it */
	struct fx_batch b[FX_SEQS];
	int manual;                    /* fx_put() does not declare */
	int bad;
	char why[160];
};

/* A request as the tests name it. */
struct fx_req {
	const char *id;
	uint32_t rank, world, total, peer, agent;
};

static inline void fx_breach(struct fx *f, const char *fmt, ...)
{
	va_list ap;

	if (f->bad++)
		return;
	va_start(ap, fmt);
	vsnprintf(f->why, sizeof(f->why), fmt, ap);
	va_end(ap);
}

static inline struct fx_ev *fx_push(struct fx *f, uint32_t type)
{
	struct fx_ev *e;

	if (f->nev >= FX_EV_MAX) {
		fx_breach(f, "event log full");
		f->nev = 0;
	}
	e = &f->ev[f->nev++];
	memset(e, 0, sizeof(*e));
	e->type = type;
	return e;
}

static inline void fx_name(struct fx_ev *e, const uint8_t *id, uint32_t len)
{
	memcpy(e->req, id, len);
	e->req[len] = 0;
}

static inline struct fx_ev *fx_push_view(struct fx *f, uint32_t type,
					 const struct pd_tx_batch_view *v)
{
	struct fx_ev *e = fx_push(f, type);

	e->seq = v->seq;
	e->peer = v->peer;
	e->rank = v->rank;
	e->n = v->n;
	fx_name(e, v->req_id, v->req_id_len);
	if (v->seq >= FX_SEQS)
		fx_breach(f, "seq %llu beyond the fake", (unsigned long long)v->seq);
	return e;
}

/* ---- the fake ops ------------------------------------------------------------- */

static inline void fx_send_alloc(void *ctx, const struct pd_tx_batch_view *v)
{
	struct fx *f = ctx;
	struct fx_batch *b;

	fx_push_view(f, EV_ALLOC, v);
	if (v->seq >= FX_SEQS)
		return;
	b = &f->b[v->seq];
	if (b->reserve || !v->n)
		fx_breach(f, "AllocRequest seq %llu of %u chunks (a Reserve's seq?)",
			  (unsigned long long)v->seq, v->n);
	b->n = v->n;
	b->peer = v->peer;
	b->slot0 = PD_SLOT_REF_IDX(v->chunks[0].slot);
}

static inline int fx_write(void *ctx, const struct pd_tx_batch_view *v)
{
	struct fx *f = ctx;
	struct fx_ev *e = fx_push_view(f, EV_WRITE, v);
	uint32_t i;

	for (i = 0; i < v->n; i++)
		e->nwrite += v->remote[i] >= 0;
	e->bind = v->bind;
	e->remote0 = v->n ? v->remote[0] : -1;
	if (v->seq < FX_SEQS && f->b[v->seq].reserve)
		fx_breach(f, "write for Reserve seq %llu", (unsigned long long)v->seq);
	if (f->write_rc || v->seq >= FX_SEQS)
		return f->write_rc;
	if (v->bind) /* no AllocRequest told the fake of it */
		f->b[v->seq] = (struct fx_batch){ .n = v->n, .peer = v->peer,
						  .slot0 = PD_SLOT_REF_IDX(v->chunks[0].slot) };
	f->b[v->seq].wrote = 1;
	if (f->b[v->seq].writing)
		fx_breach(f, "second write of seq %llu", (unsigned long long)v->seq);
	f->b[v->seq].writing = 1;
	for (i = 0; i < v->n; i++)
		f->busy[PD_SLOT_REF_IDX(v->chunks[i].slot)] = 1;
	return 0;
}

static inline void fx_free_slots(void *ctx, const pd_slot_ref *refs, uint32_t n)
{
	struct fx *f = ctx;
	struct fx_ev *e = fx_push(f, EV_FREE);
	uint32_t i, s;

	e->n = n;
	e->slot0 = n ? PD_SLOT_REF_IDX(refs[0]) : 0;
	for (i = 0; i < n; i++) {
		s = PD_SLOT_REF_IDX(refs[i]);
		if (s >= FX_SLOTS || !f->handed[s])
			fx_breach(f, "freed slot %u never handed over", s);
		else if (f->frees[s]++)
			fx_breach(f, "slot %u freed twice", s);
		else if (f->busy[s])
			fx_breach(f, "slot %u freed while written", s);
	}
}

static inline void fx_put_done(void *ctx, const struct pd_tx_batch_view *v, const int32_t *idx,
			       uint32_t n)
{
	struct fx *f = ctx;
	struct fx_ev *e = fx_push_view(f, EV_PUT, v);
	uint32_t i;

	e->n = n;
	e->bind = v->bind;
	for (i = 0; i < n; i++)
		if (idx[i] < 0)
			fx_breach(f, "PutDone with index %d", idx[i]);
}

static inline void fx_cancel_notif(void *ctx, uint32_t peer, const uint8_t *id, uint32_t len,
				   uint32_t rank)
{
	struct fx_ev *e = fx_push(ctx, EV_CANCEL);

	e->peer = peer;
	e->rank = rank;
	fx_name(e, id, len);
}

static inline void fx_result(struct fx *f, uint32_t type, const struct pd_tx_result *r)
{
	struct fx_ev *e = fx_push(f, type);

	e->agent = r->agent;
	e->peer = r->peer;
	e->rank = r->rank;
	e->status = r->status;
	e->chunks = r->chunks;
	e->bytes = r->bytes;
	fx_name(e, r->req_id, r->req_id_len);
}

static inline void fx_proxy_notif(void *ctx, const struct pd_tx_result *r)
{
	fx_result(ctx, EV_PROXY, r);
}

static inline void fx_agent_event(void *ctx, const struct pd_tx_result *r)
{
	fx_result(ctx, EV_AGENT, r);
}

static inline void fx_wake_alloc(void *ctx, uint64_t tag)
{
	fx_push(ctx, EV_WAKE)->tag = tag;
}

static inline void fx_send_reserve(void *ctx, const struct pd_tx_batch_view *v)
{
	struct fx *f = ctx;
	struct fx_ev *e = fx_push_view(f, EV_RESERVE, v);

	e->chunks = v->total_chunks;
	e->world = v->world_size;
	e->grants = v->grants;
	if (v->n || !v->total_chunks || v->rank >= v->world_size)
		fx_breach(f, "Reserve seq %llu: n %u, total %u, rank %u of %u",
			  (unsigned long long)v->seq, v->n, v->total_chunks, v->rank,
			  v->world_size);
	if (v->seq >= FX_SEQS)
		return;
	f->b[v->seq] = (struct fx_batch){ .peer = v->peer, .reserve = 1 };
}

static inline void fx_admitted(void *ctx, const struct pd_tx_result *r)
{
	struct fx *f = ctx;

	fx_result(f, EV_ADMITTED, r);
	if (r->status)
		fx_breach(f, "admitted %.*s/%u with status %d", (int)r->req_id_len,
			  (const char *)r->req_id, r->rank, r->status);
}

static const struct pd_tx_ops fx_ops = {
	.send_alloc = fx_send_alloc, .send_reserve = fx_send_reserve, .admitted = fx_admitted,
	.write = fx_write, .free_slots = fx_free_slots,
	.put_done = fx_put_done, .cancel_notif = fx_cancel_notif,
	.proxy_notif = fx_proxy_notif, .agent_event = fx_agent_event,
	.wake_alloc = fx_wake_alloc,
};

/* ---- setup ----------------------------------------------------------------- */

#define FX_ALLOC_TIMEOUT 1000u
#define FX_TOMBSTONE     5000u

static inline struct fx *fx_new(uint32_t max_requests, uint32_t notify_failures)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->ev = calloc(FX_EV_MAX, sizeof(*f->ev));
	assert_non_null(f->ev);
	f->next_slot = 1;
	f->o = (struct pd_tx_opts){
		.ops = &fx_ops, .ctx = f, .max_requests = max_requests,
		.alloc_timeout_ns = FX_ALLOC_TIMEOUT, .tombstone_ns = FX_TOMBSTONE,
		.notify_failures = notify_failures,
	};
	assert_int_equal(pd_tx_create(&f->o, &f->tx), 0);
	return f;
}

static inline void fx_free(struct fx *f)
{
	pd_tx_destroy(f->tx);
	free(f->ev);
	free(f);
}

static inline int fx_setup(void **state)
{
	*state = fx_new(64, 0);
	return 0;
}

static inline int fx_setup_notify(void **state)
{
	*state = fx_new(64, 1);
	return 0;
}

static inline int fx_teardown(void **state)
{
	fx_free(*state);
	return 0;
}

/* ---- driving the engine ------------------------------------------------------- */

/* Position of the first event of type at or after from; f->nev when none. */
static inline uint32_t fx_index(const struct fx *f, uint32_t type, uint32_t from)
{
	for (; from < f->nev; from++)
		if (f->ev[from].type == type)
			break;
	return from;
}

static inline struct pd_tx_stats fx_stats(const struct fx *f)
{
	struct pd_tx_stats st;

	pd_tx_get_stats(f->tx, &st);
	return st;
}

/* Fill n chunks with fresh slots; @return the first slot index. */
static inline uint32_t fx_chunks(struct fx *f, struct pd_tx_chunk *c, uint32_t n)
{
	uint32_t i, s0 = f->next_slot;

	for (i = 0; i < n; i++) {
		uint32_t s = f->next_slot++;

		memset(&c[i], 0, sizeof(c[i]));
		c[i].slot = PD_SLOT_REF(s, 1);
		c[i].len = 100 + s % 7;
		c[i].klen = (uint8_t)snprintf((char *)c[i].key, sizeof(c[i].key), "k%u", s);
	}
	return s0;
}

static inline struct pd_tx_submit fx_sub(const struct fx_req *q, uint32_t n, uint32_t last,
					 const struct pd_tx_chunk *c)
{
	return (struct pd_tx_submit){
		.agent = q->agent, .tag = 77, .peer = q->peer,
		.req_id = (const uint8_t *)q->id, .req_id_len = (uint32_t)strlen(q->id),
		.rank = q->rank, .world_size = q->world, .total_chunks = q->total,
		.is_last = last, .n = n, .chunks = c,
	};
}

/* Submit s with fresh slots; the engine owns them unless -EINVAL/-ENOMEM. */
static inline int fx_submit(struct fx *f, struct pd_tx_submit *s)
{
	struct pd_tx_chunk c[64];
	uint32_t i, s0;
	int rc;

	assert_true(s->n <= 64);
	s0 = fx_chunks(f, c, s->n);
	s->chunks = s->n ? c : s->chunks;
	for (i = 0; i < s->n; i++)
		f->handed[s0 + i] = 1;
	rc = pd_tx_submit(f->tx, s, f->now);
	if (rc == -EINVAL || rc == -ENOMEM)
		for (i = 0; i < s->n; i++)
			f->handed[s0 + i] = 0;
	return rc;
}

static inline struct pd_tx_declare fx_decl(const struct fx_req *q, uint64_t timeout_ns)
{
	return (struct pd_tx_declare){
		.agent = q->agent, .tag = 77, .peer = q->peer,
		.req_id = (const uint8_t *)q->id, .req_id_len = (uint32_t)strlen(q->id),
		.rank = q->rank, .world_size = q->world, .total_chunks = q->total,
		.timeout_ns = timeout_ns,
	};
}

/* Declare q (admission deadline timeout_ns from now, 0: alloc_timeout_ns). */
static inline int fx_declare(struct fx *f, const struct fx_req *q, uint64_t timeout_ns)
{
	struct pd_tx_declare d = fx_decl(q, timeout_ns);

	return pd_tx_declare(f->tx, &d, f->now);
}

static inline uint64_t fx_last_of(const struct fx *f, uint32_t type, const char *what)
{
	uint32_t i = f->nev;

	while (i--)
		if (f->ev[i].type == type)
			return f->ev[i].seq;
	fail_msg("no %s", what);
	return 0;
}

/* The seq of the latest AllocRequest. */
static inline uint64_t fx_last_seq(const struct fx *f)
{
	return fx_last_of(f, EV_ALLOC, "AllocRequest");
}

/* The seq of the latest Reserve. */
static inline uint64_t fx_reserve_seq(const struct fx *f)
{
	return fx_last_of(f, EV_RESERVE, "Reserve");
}

/* The answer to Reserve seq: err 0 (admitted) or a refusal. */
static inline int fx_admit(struct fx *f, uint64_t seq, int32_t err)
{
	struct pd_tx_resp m = { .peer = f->b[seq % FX_SEQS].peer, .seq = seq, .err = err };

	return pd_tx_alloc_resp(f->tx, &m, f->now);
}

/* Declare q and, when it sent a Reserve, admit it at once. @return the
 * declaration's result (-EEXIST: q was known already), or the answer's. */
static inline int fx_open(struct fx *f, const struct fx_req *q)
{
	uint32_t nev = f->nev;
	int rc = fx_declare(f, q, 0);

	if (rc || fx_index(f, EV_RESERVE, nev) == f->nev)
		return rc;
	return fx_admit(f, fx_reserve_seq(f), 0);
}

/* A batch of n chunks of request q (is_last = last), declared and admitted
 * first when q is new (unless f->manual). A declaration refused (other than
 * -EEXIST) is returned without staging anything, as an agent would. */
static inline int fx_put(struct fx *f, const struct fx_req *q, uint32_t n, uint32_t last)
{
	struct pd_tx_submit s = fx_sub(q, n, last, NULL);

	if (!f->manual) {
		int rc = fx_open(f, q);

		if (rc && rc != -EEXIST)
			return rc;
	}
	return fx_submit(f, &s);
}

/* AllocResponse for seq: grants every chunk but those in already[]. */
static inline int fx_resp_full(struct fx *f, uint64_t seq, int32_t err, const int32_t *already,
			       uint32_t nalready)
{
	const struct fx_batch *b = &f->b[seq % FX_SEQS];
	int32_t remote[64];
	uint32_t i;
	struct pd_tx_resp m = {
		.peer = b->peer, .seq = seq, .err = err, .n = b->n, .remote = remote,
		.nalready = nalready, .already_sent = already,
	};

	for (i = 0; i < b->n && i < 64; i++)
		remote[i] = (int32_t)(FX_REMOTE0 + b->slot0 + i);
	return pd_tx_alloc_resp(f->tx, &m, f->now);
}

/* Like fx_resp_full(), with the remote indexes given. */
static inline int fx_resp_raw(struct fx *f, uint64_t seq, const int32_t *remote, uint32_t n,
			      const int32_t *already, uint32_t nalready)
{
	struct pd_tx_resp m = {
		.peer = f->b[seq % FX_SEQS].peer, .seq = seq, .n = n, .remote = remote,
		.nalready = nalready, .already_sent = already,
	};

	return pd_tx_alloc_resp(f->tx, &m, f->now);
}

static inline int fx_grant(struct fx *f, uint64_t seq)
{
	return fx_resp_full(f, seq, 0, NULL, 0);
}

/* The writes of seq finished with rc. */
static inline int fx_done(struct fx *f, uint64_t seq, int rc)
{
	struct fx_batch *b = &f->b[seq % FX_SEQS];
	uint32_t i;
	int ret;

	if (b->writing) {
		b->writing = 0;
		for (i = 0; i < b->n; i++)
			f->busy[b->slot0 + i] = 0;
	}
	ret = pd_tx_write_done(f->tx, seq, rc, f->now);
	if (!ret && !rc)
		b->done_ok = 1;
	return ret;
}

static inline int fx_cancel(struct fx *f, const char *id, uint32_t rank)
{
	return pd_tx_cancel(f->tx, (const uint8_t *)id, (uint32_t)strlen(id), rank, f->now);
}

/* ---- inspecting the log ------------------------------------------------------------ */

static inline uint32_t fx_count(const struct fx *f, uint32_t type)
{
	uint32_t i, n = 0;

	for (i = 0; i < f->nev; i++)
		n += f->ev[i].type == type;
	return n;
}

/* The latest event of type; the test fails when there is none. */
static inline const struct fx_ev *fx_last(const struct fx *f, uint32_t type)
{
	static const struct fx_ev none;
	uint32_t i = f->nev;

	while (i--)
		if (f->ev[i].type == type)
			return &f->ev[i];
	fail_msg("no event of type %u", type);
	return &none;
}


/* Slots in [s0, s0 + n) each freed exactly `times` times. */
static inline void fx_freed(const struct fx *f, uint32_t s0, uint32_t n, uint32_t times)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		if (f->frees[s0 + i] != times)
			fail_msg("slot %u freed %u times, expected %u", s0 + i, f->frees[s0 + i],
				 times);
}

/* Every slot handed to the engine freed exactly once, and no breach. */
static inline void fx_all_freed(const struct fx *f)
{
	uint32_t s;

	for (s = 1; s < f->next_slot; s++)
		if (f->frees[s] != f->handed[s])
			fail_msg("slot %u freed %u times, handed %u", s, f->frees[s], f->handed[s]);
}

static inline void fx_ok(const struct fx *f)
{
	if (f->bad)
		fail_msg("fake: %s", f->why);
	assert_int_equal(pd_tx_check(f->tx), 0);
}

/* The live gauges are zero. */
static inline void fx_idle(const struct fx *f)
{
	struct pd_tx_stats st = fx_stats(f);

	assert_int_equal(st.live_requests, 0);
	assert_int_equal(st.live_batches, 0);
	assert_int_equal(st.writes_in_flight, 0);
	assert_int_equal(st.admitting, 0);
	assert_int_equal(pd_tx_check(f->tx), 0);
}

#endif
