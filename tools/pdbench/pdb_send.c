/* SPDX-License-Identifier: MIT */
/*
 * pdbench, prefill rank: one request = its chunks in batches (pd_alloc,
 * fill the pattern, pd_put), then the one PUT_DONE / PUT_FAILED event the
 * broker sends for this rank. Aborts: this rank may be the one that
 * cancels (at the stage the coordinator drew), or be told to cancel
 * (relayed), or see its pd_alloc() return -ECANCELED because a sibling
 * rank's request on this broker ended.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pd_time.h"
#include "pdb_worker.h"

#define KEY_LEN 64

/* What one request thread works with. */
struct snd {
	struct pd_bench_wk *w;
	struct pd_bench_wreq *q;
	uint32_t req, nb;
	char id[PD_REQ_ID_MAX + 1];
	uint64_t deadline;
	uint64_t t_first;
	uint32_t submitted;          /* batches handed over */
	int aborted;                 /* this rank called pd_cancel itself */
	pd_slot_ref *refs;
	struct pd_chunk *ch;
	char (*keys)[KEY_LEN];
};

static uint32_t ms_left(uint64_t deadline)
{
	uint64_t now = pd_now_ns();

	return now >= deadline ? 0 : (uint32_t)((deadline - now + PD_NS_PER_MS - 1) / PD_NS_PER_MS);
}

static void send_msg(struct snd *s, uint32_t type, uint32_t kind, int32_t status)
{
	struct pd_bench_msg m = { .type = type, .req = s->req, .kind = kind, .status = status,
				  .flags = s->submitted ? PD_BENCH_F_SUBMITTED : 0,
				  .t_ns = s->t_first };

	pd_bench_wk_send(s->w, &m);
}

/* This rank cancels the request (its drawn abort stage). */
static void abort_self(struct snd *s)
{
	(void)pd_cancel(s->w->a, s->id);
	s->aborted = 1;
	send_msg(s, PD_BENCH_M_ABORTED, 0, -ECANCELED);
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

static void fill(struct snd *s, uint32_t b, uint32_t n)
{
	const struct pd_bench_env *env = s->w->env;
	uint32_t rank = s->w->rank, k = s->q->chunks;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t c = b * env->o->batch + i;
		uint32_t len = pd_bench_chunk_len(env->o, s->req, rank, c, k);
		void *d = pd_slot_data(s->w->a, s->refs[i]);

		if (d)
			pd_bench_fill(d, len, pd_bench_chunk_seed(env->o->seed, s->req, rank, c));
		s->ch[i] = (struct pd_chunk){ .slot = s->refs[i], .len = len, .key = s->keys[i] };
		s->ch[i].klen = pd_bench_key(s->keys[i], KEY_LEN, env->run_id, s->req, rank, c);
	}
}

/* pd_put under put_lock. 0 handed over; 1 cancelled meanwhile (slots
 * released); -errno (slots released when they were not taken). */
static int put(struct snd *s, uint32_t b, uint32_t n)
{
	const struct pd_bench_env *env = s->w->env;
	struct pd_batch pb = { .req_id = s->id, .endpoint = env->c->b[env->c->nprefill +
								      s->q->decode].ctrl,
			       .chunks = s->ch, .n = n, .total_chunks = s->q->chunks,
			       .world_size = env->o->tp, .rank = s->w->rank,
			       .last = b + 1 == s->nb };
	int rc, cancelled;

	(void)pthread_mutex_lock(&s->w->put_lock);
	(void)pthread_mutex_lock(&s->w->lock);
	cancelled = s->q->cancelled;
	(void)pthread_mutex_unlock(&s->w->lock);
	if (cancelled) {
		rc = 1;
	} else {
		while ((rc = pd_put(s->w->a, &pb)) == -EAGAIN && pd_now_ns() < s->deadline) {
			struct timespec ts = { 0, 200 * 1000 };

			(void)nanosleep(&ts, NULL);
		}
	}
	(void)pthread_mutex_unlock(&s->w->put_lock);
	if (rc != 0 && rc != -ENOTCONN)
		(void)pd_slot_release(s->w->a, s->refs, n); /* not taken */
	return rc;
}

/* One batch: 0 carry on; 1 stop (aborted or cancelled); -errno. */
static int one_batch(struct snd *s, uint32_t b)
{
	const struct pd_bench_opts *o = s->w->env->o;
	uint32_t n = s->q->chunks - b * o->batch;
	int rc;

	if (n > o->batch)
		n = o->batch;
	if ((s->q->flags & PD_BENCH_F_GATED) && b + 1 == s->nb && (rc = wait_gate(s)) != 0)
		return rc;
	if ((rc = over(s)) != 0)
		return rc;
	if (!s->t_first)
		s->t_first = pd_now_ns();
	rc = pd_alloc(s->w->a, s->id, n, s->refs, ms_left(s->deadline));
	if (rc < 0)
		return rc;
	fill(s, b, n);
	if (s->q->stage == PD_BENCH_AB_ALLOCATED && s->q->batch == b) {
		(void)pd_slot_release(s->w->a, s->refs, n);
		abort_self(s);
		return 1;
	}
	rc = put(s, b, n);
	if (rc != 0)
		return rc;
	s->submitted++;
	if ((s->q->stage == PD_BENCH_AB_BETWEEN && s->q->batch == b) ||
	    (s->q->stage == PD_BENCH_AB_AFTER && b + 1 == s->nb)) {
		abort_self(s);
		return 1;
	}
	return 0;
}

/* The event for this rank, until the deadline: 1 got it, 0 not. */
static int wait_event(struct snd *s)
{
	struct pd_bench_wk *w = s->w;
	int got;

	(void)pthread_mutex_lock(&w->lock);
	while (!s->q->has_event && !w->gone && pd_now_ns() < s->deadline)
		pd_bench_wk_wait(w, s->deadline);
	got = s->q->has_event;
	(void)pthread_mutex_unlock(&w->lock);
	return got;
}

static void finish(struct snd *s, int rc)
{
	/* Stopped half-way: tear down what the broker holds (idempotent). */
	if (s->submitted && s->submitted < s->nb && !s->aborted)
		(void)pd_cancel(s->w->a, s->id);
	if (rc < 0 && rc != -ECANCELED) {
		if (s->submitted)
			(void)wait_event(s); /* drain its event */
		send_msg(s, PD_BENCH_M_PRESULT, rc == -ETIMEDOUT ? PD_BENCH_R_TIMEOUT :
			 PD_BENCH_R_FAILED, rc);
		return;
	}
	if (!s->submitted) {
		send_msg(s, PD_BENCH_M_PRESULT, PD_BENCH_R_CANCELLED, -ECANCELED);
		return;
	}
	if (!wait_event(s)) {
		send_msg(s, PD_BENCH_M_PRESULT, s->w->gone ? PD_BENCH_R_FAILED : PD_BENCH_R_TIMEOUT,
			 s->w->gone ? -ENOTCONN : -ETIMEDOUT);
		return;
	}
	send_msg(s, PD_BENCH_M_PRESULT, s->q->ev_type == PD_EV_PUT_DONE ? PD_BENCH_R_DONE :
		 PD_BENCH_R_FAILED, s->q->ev_status);
}

void pd_bench_send_run(struct pd_bench_wk *w, uint32_t req)
{
	const struct pd_bench_opts *o = w->env->o;
	struct snd s = { .w = w, .q = &w->req[req], .req = req,
			 .deadline = pd_deadline_ms((uint64_t)o->timeout_s * 1000) };
	int rc = 0;

	s.nb = (s.q->chunks + o->batch - 1) / o->batch;
	s.refs = calloc(o->batch, sizeof(*s.refs));
	s.ch = calloc(o->batch, sizeof(*s.ch));
	s.keys = calloc(o->batch, sizeof(*s.keys));
	pd_bench_req_id(s.id, sizeof(s.id), w->env->run_id, req);
	if (!s.refs || !s.ch || !s.keys)
		rc = -ENOMEM;
	if (rc == 0 && s.q->stage == PD_BENCH_AB_BEFORE)
		abort_self(&s);
	for (uint32_t b = 0; rc == 0 && !s.aborted && b < s.nb; b++)
		rc = one_batch(&s, b);
	finish(&s, rc < 0 ? rc : 0);
	free(s.refs);
	free(s.ch);
	free(s.keys);
}

void *pd_bench_send_events(void *arg)
{
	struct pd_bench_wk *w = arg;
	struct pd_event ev;
	int quit = 0;

	while (!quit) {
		int rc = pd_next_event(w->a, &ev, 200);
		int64_t i = rc == 0 ? pd_bench_req_index(ev.req_id, w->env->run_id) : -1;

		(void)pthread_mutex_lock(&w->lock);
		if (rc == -ENOTCONN)
			w->gone = 1;
		if (rc == 0 && (i < 0 || i >= w->env->o->requests || !w->req[i].active ||
				w->req[i].has_event)) {
			w->stray_events++;
		} else if (rc == 0) {
			w->req[i].has_event = 1;
			w->req[i].ev_type = ev.type;
			w->req[i].ev_status = ev.status;
		}
		(void)pthread_cond_broadcast(&w->cond);
		quit = (w->quit && !w->nactive) || w->gone;
		(void)pthread_mutex_unlock(&w->lock);
	}
	return NULL;
}
