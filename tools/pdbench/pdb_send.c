/* SPDX-License-Identifier: MIT */
/*
 * pdbench, prefill rank, --engine threads: one thread per request. It
 * declares the request (pd_declare), then stages its chunks in batches
 * (pd_alloc with the request's deadline: it waits for the admission, then
 * for staging; fill the pattern; pd_put), then waits for the one PUT_DONE /
 * PUT_FAILED event the broker sends for this rank. Aborts: this rank may be
 * the one that cancels (at the stage the coordinator drew; always after its
 * declaration), or be told to cancel (relayed), or see its pd_alloc()
 * return -ECANCELED because a sibling rank's request on this broker ended.
 *
 * Also what both engines share: a request's declaration and batches, and
 * how a rank's outcome is reported.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pd_time.h"
#include "pdb_worker.h"

#define DRAIN_NS (2 * PD_NS_PER_S) /* a declared request's event after a cancel or failure */

/* ---- shared by both engines ------------------------------------------------------ */

void pd_bench_sreq_init(struct pd_bench_sreq *r, const struct pd_bench_wk *w, uint32_t req,
			uint32_t chunks, uint32_t decode)
{
	uint32_t batch = w->env->o->batch;

	r->req = req;
	r->chunks = chunks;
	r->decode = decode;
	r->nb = (chunks + batch - 1) / batch;
	pd_bench_req_id(r->id, sizeof(r->id), w->env->run_id, req);
}

static const char *endpoint(const struct pd_bench_sreq *r, const struct pd_bench_wk *w)
{
	return w->env->c->b[w->env->c->nprefill + r->decode].ctrl;
}

void pd_bench_sreq_decl(const struct pd_bench_sreq *r, const struct pd_bench_wk *w,
			uint32_t timeout_ms, struct pd_decl *d)
{
	*d = (struct pd_decl){ .req_id = r->id, .endpoint = endpoint(r, w),
			       .total_chunks = r->chunks, .world_size = w->env->o->tp,
			       .rank = w->rank, .timeout_ms = timeout_ms ? timeout_ms : 1 };
}

uint32_t pd_bench_sreq_count(const struct pd_bench_sreq *r, const struct pd_bench_wk *w,
			     uint32_t b)
{
	uint32_t batch = w->env->o->batch, n = r->chunks - b * batch;

	return n > batch ? batch : n;
}

int pd_bench_stage_init(struct pd_bench_stage *st, uint32_t batch)
{
	st->refs = calloc(batch, sizeof(*st->refs));
	st->ch = calloc(batch, sizeof(*st->ch));
	st->keys = calloc(batch, sizeof(*st->keys));
	if (st->refs && st->ch && st->keys)
		return 0;
	pd_bench_stage_fini(st);
	return -ENOMEM;
}

void pd_bench_stage_fini(struct pd_bench_stage *st)
{
	free(st->refs);
	free(st->ch);
	free(st->keys);
	memset(st, 0, sizeof(*st));
}

void pd_bench_stage_fill(struct pd_bench_stage *st, const struct pd_bench_wk *w,
			 const struct pd_bench_sreq *r, uint32_t b, struct pd_batch *pb)
{
	const struct pd_bench_env *env = w->env;
	uint32_t n = pd_bench_sreq_count(r, w, b);

	for (uint32_t i = 0; i < n; i++) {
		uint32_t c = b * env->o->batch + i;
		uint32_t len = pd_bench_chunk_len(env->o, r->req, w->rank, c, r->chunks);
		void *d = pd_slot_data(w->a, st->refs[i]);

		if (d) {
			pd_bench_fill(d, len, pd_bench_chunk_seed(env->o->seed, r->req, w->rank, c));
			(void)pd_bench_inject(env->o, d, len, r->req, w->rank, c, r->chunks);
		}
		st->ch[i] = (struct pd_chunk){ .slot = st->refs[i], .len = len, .key = st->keys[i] };
		st->ch[i].klen = pd_bench_key(st->keys[i], PD_BENCH_KEY_LEN, env->run_id, r->req,
					      w->rank, c);
	}
	*pb = (struct pd_batch){ .req_id = r->id, .endpoint = endpoint(r, w), .chunks = st->ch,
				 .n = n, .total_chunks = r->chunks, .world_size = env->o->tp,
				 .rank = w->rank, .last = b + 1 == r->nb };
}

void pd_bench_send_report(struct pd_bench_wk *w, const struct pd_bench_sout *o)
{
	struct pd_bench_msg m = { .type = PD_BENCH_M_PRESULT, .req = o->req,
				  .flags = o->declared ? PD_BENCH_F_DECLARED : 0,
				  .t_ns = o->t_decl, .deferred = o->deferred, .steps = o->steps,
				  .sleeps = o->sleeps, .fd_wakes = o->fd_wakes };

	if (o->t_admit)
		m.admit_ns = o->t_admit > o->t_decl ? o->t_admit - o->t_decl : 1;
	if (o->t_put && o->t_event)
		m.xfer_ns = o->t_event > o->t_put ? o->t_event - o->t_put : 1;
	if (o->err) { /* our own failure, whatever the broker said after it */
		m.kind = o->err == -ETIMEDOUT ? PD_BENCH_R_TIMEOUT : PD_BENCH_R_FAILED;
		m.status = o->err;
	} else if (!o->declared) { /* cancelled before it was declared: no event */
		m.kind = PD_BENCH_R_CANCELLED;
		m.status = -ECANCELED;
	} else if (!o->has_event) {
		m.kind = o->gone ? PD_BENCH_R_FAILED : PD_BENCH_R_TIMEOUT;
		m.status = o->gone ? -ENOTCONN : -ETIMEDOUT;
	} else {
		m.kind = o->ev_type == PD_EV_PUT_DONE ? PD_BENCH_R_DONE : PD_BENCH_R_FAILED;
		m.status = o->ev_type == PD_EV_PUT_DONE ? 0 : o->ev_status;
	}
	pd_bench_wk_send(w, &m);
}

/* ---- --engine threads ------------------------------------------------------------- */

/* What one request thread works with. */
struct snd {
	struct pd_bench_wk *w;
	struct pd_bench_wreq *q;
	struct pd_bench_sreq r;
	struct pd_bench_stage st;
	uint64_t deadline;
	uint64_t t_decl;
	uint64_t t_put;              /* the first pd_put was called */
	int declared;                /* pd_declare reached the broker */
	uint32_t submitted;          /* batches handed over */
	int aborted;                 /* this rank called pd_cancel itself */
};

static uint32_t ms_left(uint64_t deadline)
{
	uint64_t now = pd_now_ns();

	return now >= deadline ? 0 : (uint32_t)((deadline - now + PD_NS_PER_MS - 1) / PD_NS_PER_MS);
}

static void nap_us(long us)
{
	struct timespec ts = { 0, us * 1000 };

	(void)nanosleep(&ts, NULL);
}

/* This rank cancels the request (its drawn abort stage). */
static void abort_self(struct snd *s)
{
	struct pd_bench_msg m = { .type = PD_BENCH_M_ABORTED, .req = s->r.req,
				  .status = -ECANCELED,
				  .flags = s->declared ? PD_BENCH_F_DECLARED : 0 };

	(void)pd_cancel(s->w->a, s->r.id);
	s->aborted = 1;
	pd_bench_wk_send(s->w, &m);
}

void pd_bench_send_cancel(struct pd_bench_wk *w, uint32_t req)
{
	char id[PD_REQ_ID_MAX + 1];

	/* Under put_lock: a pd_put() either went before (and the cancel follows it
	 * on the ring) or sees the flag and is not made. */
	(void)pthread_mutex_lock(&w->put_lock);
	(void)pthread_mutex_lock(&w->lock);
	w->req[req].cancelled = 1;
	w->req[req].gate = 2;
	(void)pthread_cond_broadcast(&w->cond);
	(void)pthread_mutex_unlock(&w->lock);
	(void)pthread_mutex_unlock(&w->put_lock);
	pd_bench_req_id(id, sizeof(id), w->env->run_id, req);
	(void)pd_cancel(w->a, id);
}

/* Before the last batch of a gated request: 0 proceed; 1 cancelled (or
 * quit); -ETIMEDOUT. */
static int wait_gate(struct snd *s)
{
	struct pd_bench_wk *w = s->w;
	int rc;

	(void)pthread_mutex_lock(&w->lock);
	while (!s->q->gate && !w->quit && pd_now_ns() < s->deadline)
		pd_bench_wk_wait(w, s->deadline);
	rc = s->q->gate == 1 ? 0 : s->q->gate || w->quit ? 1 : -ETIMEDOUT;
	(void)pthread_mutex_unlock(&w->lock);
	return rc;
}

/* 1 the request ended at the broker already, or we were told to stop;
 * -ENOTCONN the broker is gone; 0 carry on. */
static int over(struct snd *s)
{
	int rc;

	(void)pthread_mutex_lock(&s->w->lock);
	rc = s->w->gone ? -ENOTCONN : s->q->has_event || s->q->cancelled || s->w->quit;
	(void)pthread_mutex_unlock(&s->w->lock);
	return rc;
}

/* pd_declare, retried while the submission ring is full. 0; 1 told to stop
 * first; -errno. */
static int declare(struct snd *s)
{
	struct pd_decl d;
	int rc = over(s);

	if (rc != 0)
		return rc;
	pd_bench_sreq_decl(&s->r, s->w, ms_left(s->deadline), &d);
	s->t_decl = pd_now_ns();
	while ((rc = pd_declare(s->w->a, &d)) == -EAGAIN && pd_now_ns() < s->deadline)
		nap_us(200);
	s->declared = rc == 0;
	return rc == -EAGAIN ? -ETIMEDOUT : rc;
}

/* pd_put under put_lock. 0 handed over; 1 cancelled meanwhile (slots
 * released); -errno (slots released when they were not taken). */
static int put(struct snd *s, const struct pd_batch *pb)
{
	int rc, cancelled;

	(void)pthread_mutex_lock(&s->w->put_lock);
	(void)pthread_mutex_lock(&s->w->lock);
	cancelled = s->q->cancelled;
	(void)pthread_mutex_unlock(&s->w->lock);
	if (cancelled) {
		rc = 1;
	} else {
		while ((rc = pd_put(s->w->a, pb)) == -EAGAIN && pd_now_ns() < s->deadline)
			nap_us(200);
	}
	(void)pthread_mutex_unlock(&s->w->put_lock);
	if (rc != 0 && rc != -ENOTCONN)
		(void)pd_slot_release(s->w->a, s->st.refs, pb->n); /* not taken */
	return rc;
}

/* One batch: 0 carry on; 1 stop (aborted or cancelled); -errno. */
static int one_batch(struct snd *s, uint32_t b)
{
	uint32_t n = pd_bench_sreq_count(&s->r, s->w, b);
	struct pd_batch pb;
	int rc;

	if ((s->q->flags & PD_BENCH_F_GATED) && b + 1 == s->r.nb && (rc = wait_gate(s)) != 0)
		return rc;
	if ((rc = over(s)) != 0)
		return rc;
	/* Waits for the admission (holding nothing), then for staging. */
	rc = pd_alloc(s->w->a, s->r.id, n, s->st.refs, ms_left(s->deadline));
	if (rc < 0)
		return rc == -EAGAIN ? -ETIMEDOUT : rc; /* -EAGAIN: not admitted in time */
	pd_bench_stage_fill(&s->st, s->w, &s->r, b, &pb);
	if (s->q->stage == PD_BENCH_AB_ALLOCATED && s->q->batch == b) {
		(void)pd_slot_release(s->w->a, s->st.refs, n);
		abort_self(s);
		return 1;
	}
	if (!s->t_put) /* the call, not its return: a full ring's retries are in it */
		s->t_put = pd_now_ns();
	rc = put(s, &pb);
	if (rc != 0)
		return rc;
	s->submitted++;
	if ((s->q->stage == PD_BENCH_AB_BETWEEN && s->q->batch == b) ||
	    (s->q->stage == PD_BENCH_AB_AFTER && b + 1 == s->r.nb)) {
		abort_self(s);
		return 1;
	}
	return 0;
}

/* The final event for this rank, until `until`: 1 got it, 0 not. */
static int wait_event(struct snd *s, uint64_t until)
{
	struct pd_bench_wk *w = s->w;
	int got;

	(void)pthread_mutex_lock(&w->lock);
	while (!s->q->has_event && !w->gone && pd_now_ns() < until)
		pd_bench_wk_wait(w, until);
	got = s->q->has_event;
	(void)pthread_mutex_unlock(&w->lock);
	return got;
}

static void finish(struct snd *s, int rc)
{
	struct pd_bench_sout o = { .req = s->r.req, .declared = s->declared,
				   .err = rc < 0 && rc != -ECANCELED ? rc : 0, .t_decl = s->t_decl };
	uint64_t drain = pd_now_ns() + DRAIN_NS;

	/* Stopped before the end: withdraw what the broker holds (idempotent).
	 * A declared rank always gets its one event: wait for it. */
	if (s->declared && !s->aborted && (rc != 0 || s->submitted < s->r.nb))
		(void)pd_cancel(s->w->a, s->r.id);
	if (s->declared)
		(void)wait_event(s, s->deadline > drain ? s->deadline : drain);
	(void)pthread_mutex_lock(&s->w->lock);
	o.has_event = (int)s->q->has_event;
	o.ev_type = s->q->ev_type;
	o.ev_status = s->q->ev_status;
	o.gone = s->w->gone;
	o.t_admit = s->q->t_admit;
	o.t_event = s->q->t_event;
	o.t_put = s->t_put;
	(void)pthread_mutex_unlock(&s->w->lock);
	pd_bench_send_report(s->w, &o);
}

void pd_bench_send_run(struct pd_bench_wk *w, uint32_t req)
{
	const struct pd_bench_opts *o = w->env->o;
	struct snd s = { .w = w, .q = &w->req[req],
			 .deadline = pd_deadline_ms((uint64_t)o->timeout_s * 1000) };
	int rc = pd_bench_stage_init(&s.st, o->batch);

	pd_bench_sreq_init(&s.r, w, req, s.q->chunks, s.q->decode);
	if (rc == 0)
		rc = declare(&s);
	if (rc == 0 && s.q->stage == PD_BENCH_AB_BEFORE)
		abort_self(&s); /* declared, nothing staged */
	for (uint32_t b = 0; rc == 0 && !s.aborted && b < s.r.nb; b++)
		rc = one_batch(&s, b);
	finish(&s, rc < 0 ? rc : 0);
	pd_bench_stage_fini(&s.st);
}

/* One event, under w->lock: the request's admission or its end. */
static void on_event(struct pd_bench_wk *w, const struct pd_event *ev)
{
	int64_t i = pd_bench_req_index(ev->req_id, w->env->run_id);
	struct pd_bench_wreq *q = i >= 0 && i < w->env->o->requests ? &w->req[i] : NULL;

	if (!q || !q->active || q->has_event || (ev->type == PD_EV_ADMITTED && q->t_admit)) {
		w->stray_events++;
	} else if (ev->type == PD_EV_ADMITTED) {
		q->t_admit = pd_now_ns(); /* not the end: staging may start */
	} else {
		q->has_event = 1;
		q->t_event = pd_now_ns();
		q->ev_type = ev->type;
		q->ev_status = ev->status;
	}
}

void *pd_bench_send_events(void *arg)
{
	struct pd_bench_wk *w = arg;
	struct pd_event ev;
	int quit = 0;

	while (!quit) {
		int rc = pd_next_event(w->a, &ev, 200);

		(void)pthread_mutex_lock(&w->lock);
		if (rc == -ENOTCONN)
			w->gone = 1;
		if (rc == 0)
			on_event(w, &ev);
		(void)pthread_cond_broadcast(&w->cond);
		quit = (w->quit && !w->nactive) || w->gone;
		(void)pthread_mutex_unlock(&w->lock);
	}
	return NULL;
}
