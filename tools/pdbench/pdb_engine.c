/* SPDX-License-Identifier: MIT */
/*
 * pdbench, prefill rank, --engine step: one thread runs the rank as an
 * inference engine with chunked prefill runs its scheduler.
 *
 * A request the coordinator starts becomes "running" and is declared at
 * once (pd_declare at schedule time: admission overlaps the prefill). Each
 * step visits the running requests in arrival order and stages the next
 * batch of each one that may move: pd_alloc(timeout 0), fill, pd_put. A
 * request not admitted yet answers -EAGAIN and holds nothing: it is
 * skipped and comes back at the next step, as is one that finds the send
 * pool busy (-ETIMEDOUT). Between steps the thread reads the coordinator's
 * orders and the agent's events (pd_next_event, timeout 0); a step in which
 * nothing moved is followed by a sleep in poll() on pd_agent_fd() and the
 * coordinator's socket, IDLE_MS at most. A request whose last batch is put
 * waits for its PUT_DONE / PUT_FAILED.
 *
 * Except when staging is what held every request back: an admitted request
 * found the send pool busy and nothing moved. Then no other request could
 * stage either (one pool), and freed slots ring no fd, so the next step's
 * first admitted request waits in pd_alloc (POOL_WAIT_MS at most, woken as
 * slots are freed) instead of the engine sleeping in poll(). A request not
 * admitted (no PD_EV_ADMITTED seen) never gets a wait: it would wait for the
 * admission, holding up the step.
 *
 * Aborts as with --engine threads: this rank cancels at its drawn stage
 * (AB_BEFORE: declared, at its first step, before any pd_alloc), a gated
 * rank holds its last batch until GATE (proceed, or cancel: relayed), and a
 * declared request always gets its one event, which is waited for (DRAIN_NS
 * at least) before the outcome is reported.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "pd_time.h"
#include "pdb_worker.h"

#define IDLE_MS  2u                   /* longest sleep after a step that moved nothing */
#define POOL_WAIT_MS 10u              /* see above: the one wait a step may make */
#define DRAIN_NS (2 * PD_NS_PER_S)    /* a declared request's event after a cancel */

/* Where a running request stands. */
#define ER_DECLARE 1u                 /* its pd_declare found the ring full: retried */
#define ER_STAGE   2u                 /* declared: a batch per step once admitted */
#define ER_WAIT    3u                 /* all put, or cancelled / failed: waits for its event */
#define ER_END     4u                 /* reported: removed after the step */

struct ereq {
	struct pd_bench_sreq r;
	struct pd_bench_sout out;
	uint32_t state;               /* ER_* */
	uint32_t next;                /* the next batch to stage */
	uint32_t stage, abatch, flags; /* the START order's abort stage, its batch, F_GATED */
	uint32_t gate;                /* 0 none yet, 1 proceed, 2 cancel */
	uint64_t deadline;            /* --timeout */
	uint64_t until;               /* ER_WAIT: no event by then is a timeout */
};

struct eng {
	struct pd_bench_wk *w;
	struct ereq *run;             /* running requests, in arrival order */
	uint32_t nrun, cap;
	struct pd_bench_stage st;     /* the batch being staged */
	int quit;                     /* QUIT (or no coordinator): cancel, drain, return */
	int gone;                     /* the broker went away */
	int moved;                    /* something happened this round: do not sleep */
	int bell;                     /* the last sleep ended on pd_agent_fd() */
	int pool_busy;                /* this step: an admitted request found no staging */
	int pool_wait;                /* this step may wait in pd_alloc (see above) */
	uint64_t stray;               /* events of no running request */
	uint32_t steps, sleeps, fd_wakes; /* since the last report (sent with it) */
};

static uint32_t ms_left(uint64_t deadline)
{
	uint64_t now = pd_now_ns();

	return now >= deadline ? 0 : (uint32_t)((deadline - now + PD_NS_PER_MS - 1) / PD_NS_PER_MS);
}

static struct ereq *find(struct eng *e, uint32_t req)
{
	for (uint32_t i = 0; i < e->nrun; i++)
		if (e->run[i].r.req == req && e->run[i].state != ER_END)
			return &e->run[i];
	return NULL;
}

/* Report the outcome (err: our own failure, or 0) and end r. */
static void end(struct eng *e, struct ereq *r, int32_t err)
{
	if (err && err != -ECANCELED && !r->out.err)
		r->out.err = err;
	r->out.gone = e->gone;
	r->out.steps = e->steps;
	r->out.sleeps = e->sleeps;
	r->out.fd_wakes = e->fd_wakes;
	e->steps = e->sleeps = e->fd_wakes = 0;
	pd_bench_send_report(e->w, &r->out);
	r->state = ER_END;
	e->moved = 1;
}

/* Wait for r's event, DRAIN_NS at least. */
static void to_wait(struct ereq *r)
{
	uint64_t drain = pd_now_ns() + DRAIN_NS;

	r->state = ER_WAIT;
	r->until = r->deadline > drain ? r->deadline : drain;
}

/* A failure of ours ends r: withdraw it at the broker, drain its event. */
static void fail(struct eng *e, struct ereq *r, int32_t err)
{
	(void)pd_cancel(e->w->a, r->r.id);
	r->out.err = err;
	to_wait(r);
}

/* This rank cancels r (its drawn abort stage). */
static void abort_self(struct eng *e, struct ereq *r)
{
	struct pd_bench_msg m = { .type = PD_BENCH_M_ABORTED, .req = r->r.req,
				  .status = -ECANCELED, .flags = PD_BENCH_F_DECLARED };

	(void)pd_cancel(e->w->a, r->r.id);
	pd_bench_wk_send(e->w, &m);
	to_wait(r);
	e->moved = 1;
}

static void declare(struct eng *e, struct ereq *r)
{
	struct pd_decl d;
	int rc;

	pd_bench_sreq_decl(&r->r, e->w, ms_left(r->deadline), &d);
	if (!r->out.t_decl)
		r->out.t_decl = pd_now_ns();
	rc = pd_declare(e->w->a, &d);
	if (rc == -EAGAIN && pd_now_ns() < r->deadline)
		return; /* the submission ring is full: next step */
	if (rc == -ENOTCONN)
		e->gone = 1;
	if (rc < 0) {
		end(e, r, rc == -EAGAIN ? -ETIMEDOUT : rc);
		return;
	}
	r->out.declared = 1;
	r->state = ER_STAGE;
	e->moved = 1;
}

/* pd_alloc failed otherwise than "not yet": the request ended at the broker
 * (its event says how), or the failure is ours. */
static void alloc_failed(struct eng *e, struct ereq *r, int rc)
{
	int st;

	if (rc == -ENOTCONN) {
		e->gone = 1;
		end(e, r, rc);
		return;
	}
	st = pd_req_state(e->w->a, r->r.id, NULL);
	if (st == PD_REQ_FAILED || st == PD_REQ_DONE)
		to_wait(r);
	else
		fail(e, r, rc);
}

/* The stages drawn for after a pd_put of batch b: 1 r was aborted. */
static int abort_after_put(struct eng *e, struct ereq *r, uint32_t b)
{
	if ((r->stage == PD_BENCH_AB_BETWEEN && r->abatch == b) ||
	    (r->stage == PD_BENCH_AB_AFTER && b + 1 == r->r.nb)) {
		abort_self(e, r);
		return 1;
	}
	return 0;
}

/* pd_alloc's timeout for r: 0, or once per step (see the top of this file). */
static uint32_t alloc_ms(struct eng *e, const struct ereq *r)
{
	if (!e->pool_wait || !r->out.t_admit)
		return 0;
	e->pool_wait = 0;
	return POOL_WAIT_MS;
}

/* Stage r's next batch if it may move (see the top of this file). */
static void stage(struct eng *e, struct ereq *r)
{
	uint32_t b = r->next, n = pd_bench_sreq_count(&r->r, e->w, b);
	struct pd_batch pb;
	int rc;

	if (r->stage == PD_BENCH_AB_BEFORE && b == 0) {
		abort_self(e, r); /* declared, nothing staged */
		return;
	}
	if ((r->flags & PD_BENCH_F_GATED) && b + 1 == r->r.nb && r->gate != 1)
		return; /* the last batch waits for the coordinator's word */
	rc = pd_alloc(e->w->a, r->r.id, n, e->st.refs, alloc_ms(e, r));
	if (rc == -EAGAIN || rc == -ETIMEDOUT) {
		r->out.deferred += rc == -EAGAIN; /* not admitted yet / the pool busy */
		e->pool_busy |= rc == -ETIMEDOUT;
		return;
	}
	if (rc < 0) {
		alloc_failed(e, r, rc);
		return;
	}
	pd_bench_stage_fill(&e->st, e->w, &r->r, b, &pb);
	if (r->stage == PD_BENCH_AB_ALLOCATED && r->abatch == b) {
		(void)pd_slot_release(e->w->a, e->st.refs, n);
		abort_self(e, r);
		return;
	}
	if (!r->out.t_put) /* the first try: a full ring's later steps are in it */
		r->out.t_put = pd_now_ns();
	rc = pd_put(e->w->a, &pb);
	if (rc < 0 && rc != -ENOTCONN)
		(void)pd_slot_release(e->w->a, e->st.refs, n); /* not taken */
	if (rc == -EAGAIN) /* the submission ring is full: next step */
		return;
	e->moved = 1;
	if (rc < 0) {
		e->gone |= rc == -ENOTCONN;
		fail(e, r, rc);
		return;
	}
	r->next++;
	if (!abort_after_put(e, r, b) && r->next == r->r.nb)
		to_wait(r);
}

/* What one visit of a running request does in a step. */
static void visit_one(struct eng *e, struct ereq *r)
{
	if (e->gone && r->state != ER_END) {
		end(e, r, r->out.has_event ? 0 : -ENOTCONN);
		return;
	}
	if (r->state == ER_DECLARE) {
		declare(e, r);
	} else if (r->state == ER_STAGE && r->out.has_event) {
		end(e, r, 0); /* it ended at the broker (a sibling's cancel, a failure) */
	} else if (r->state == ER_STAGE && pd_now_ns() >= r->deadline) {
		fail(e, r, -ETIMEDOUT);
	} else if (r->state == ER_STAGE) {
		stage(e, r);
	} else if (r->state == ER_WAIT && r->out.has_event) {
		end(e, r, 0);
	} else if (r->state == ER_WAIT && pd_now_ns() >= r->until) {
		(void)pd_cancel(e->w->a, r->r.id); /* no event in time: withdraw what is left */
		end(e, r, 0);                       /* reported as a timeout (no event) */
	}
}

/* One visit of a running request in a step. */
static void visit(struct eng *e, struct ereq *r)
{
	uint32_t state = r->state, next = r->next;

	visit_one(e, r);
	if (r->state != state || r->next != next)
		e->moved = 1;
}

/* The step, then the requests that ended leave (arrival order kept). */
static void step(struct eng *e)
{
	uint32_t k = 0;

	e->steps++;
	for (uint32_t i = 0; i < e->nrun; i++)
		visit(e, &e->run[i]);
	for (uint32_t i = 0; i < e->nrun; i++)
		if (e->run[i].state != ER_END)
			e->run[k++] = e->run[i];
	e->nrun = k;
}

/* ---- orders and events ------------------------------------------------------------ */

static void start(struct eng *e, const struct pd_bench_msg *m)
{
	const struct pd_bench_opts *o = e->w->env->o;
	struct ereq *r;

	if (e->quit || find(e, m->req))
		return;
	if (e->nrun == e->cap) { /* more than --concurrency: the coordinator never does this */
		struct pd_bench_sout out = { .req = m->req, .err = -EBUSY };

		pd_bench_send_report(e->w, &out);
		return;
	}
	r = &e->run[e->nrun++];
	memset(r, 0, sizeof(*r));
	pd_bench_sreq_init(&r->r, e->w, m->req, m->chunks, m->decode);
	r->out.req = m->req;
	r->stage = m->stage;
	r->abatch = m->batch;
	r->flags = m->flags;
	r->deadline = pd_deadline_ms((uint64_t)o->timeout_s * 1000);
	r->state = ER_DECLARE;
	declare(e, r); /* at schedule time */
}

/* A relayed cancel (GATE 0) or a quit. */
static void cancel(struct eng *e, struct ereq *r)
{
	r->gate = 2;
	if (r->state == ER_DECLARE) {
		end(e, r, 0); /* never declared: nothing to withdraw */
		return;
	}
	if (!r->out.has_event)
		(void)pd_cancel(e->w->a, r->r.id);
	if (r->state == ER_STAGE)
		to_wait(r);
}

static void quit_all(struct eng *e)
{
	uint64_t drain = pd_now_ns() + DRAIN_NS;

	e->quit = 1;
	for (uint32_t i = 0; i < e->nrun; i++) {
		if (e->run[i].state == ER_END)
			continue;
		cancel(e, &e->run[i]);
		if (e->run[i].until > drain)
			e->run[i].until = drain; /* quitting: do not wait for the deadline */
	}
}

static void on_order(struct eng *e, const struct pd_bench_msg *m)
{
	struct ereq *r = m->type == PD_BENCH_M_GATE ? find(e, m->req) : NULL;

	if (m->type == PD_BENCH_M_QUIT)
		quit_all(e);
	else if (m->type == PD_BENCH_M_START && m->req < e->w->env->o->requests)
		start(e, m);
	else if (r && m->stage)
		r->gate = r->gate ? r->gate : 1;
	else if (r)
		cancel(e, r);
}

/* Every order that has arrived; the coordinator gone is a quit. */
static void orders(struct eng *e)
{
	struct pd_bench_msg m;
	ssize_t n;

	while ((n = recv(e->w->fd, &m, sizeof(m), MSG_DONTWAIT)) == (ssize_t)sizeof(m)) {
		e->moved = 1;
		on_order(e, &m);
	}
	if (!e->quit && (n >= 0 || (errno != EAGAIN && errno != EINTR)))
		quit_all(e); /* EOF, an error or a short message */
}

static void on_event(struct eng *e, const struct pd_event *ev)
{
	int64_t i = pd_bench_req_index(ev->req_id, e->w->env->run_id);
	struct ereq *r = i >= 0 && i < e->w->env->o->requests ? find(e, (uint32_t)i) : NULL;

	if (!r || r->out.has_event || (ev->type == PD_EV_ADMITTED && r->out.t_admit)) {
		e->stray++;
	} else if (ev->type == PD_EV_ADMITTED) {
		r->out.t_admit = pd_now_ns(); /* not the end: it may stage from now on */
	} else {
		r->out.has_event = 1;
		r->out.t_event = pd_now_ns();
		r->out.ev_type = ev->type;
		r->out.ev_status = ev->status;
	}
}

static void events(struct eng *e)
{
	struct pd_event ev;
	int rc = 0;

	while (!e->gone && (rc = pd_next_event(e->w->a, &ev, 0)) == 0) {
		e->moved = 1;
		on_event(e, &ev);
	}
	if (!e->gone && rc == -ENOTCONN)
		e->gone = 1;
}

/* Nothing moved: sleep until an event may be waiting, an order comes, or
 * IDLE_MS. */
static void idle(struct eng *e)
{
	struct pollfd p[2] = { { .fd = e->quit ? -1 : e->w->fd, .events = POLLIN },
			       { .fd = pd_agent_fd(e->w->a), .events = POLLIN } };
	struct pd_event ev;
	int n = poll(p, e->gone ? 1 : 2, (int)IDLE_MS);
	int bell = n > 0 && (p[1].revents & POLLIN);

	e->sleeps++;
	e->fd_wakes += bell;

	/* The library reads its doorbell only while it waits itself: a bell
	 * still readable after a round that found nothing would end every
	 * poll() at once. Then let the library wait (and read it) once. */
	if (bell && e->bell && pd_next_event(e->w->a, &ev, IDLE_MS) == 0) {
		e->moved = 1;
		on_event(e, &ev);
	}
	e->bell = bell;
}

void pd_bench_engine_run(struct pd_bench_wk *w)
{
	struct eng e = { .w = w, .cap = w->env->o->concurrency };

	e.run = calloc(e.cap, sizeof(*e.run));
	if (!e.run || pd_bench_stage_init(&e.st, w->env->o->batch) < 0) {
		(void)fprintf(stderr, "pdbench: %s rank %" PRIu32 ": no memory for the engine\n",
			w->env->c->b[w->broker].name, w->rank);
		free(e.run);
		return;
	}
	while (!e.quit || e.nrun) {
		e.moved = 0;
		e.pool_busy = 0;
		orders(&e);
		events(&e);
		step(&e);
		e.pool_wait = !e.moved && e.pool_busy; /* the next step waits in pd_alloc */
		if (e.moved)
			e.bell = 0;
		else if (!e.pool_wait)
			idle(&e);
	}
	if (e.stray)
		(void)fprintf(stderr, "pdbench: %s rank %" PRIu32 ": %" PRIu64 " events of no request\n",
			w->env->c->b[w->broker].name, w->rank, e.stray);
	pd_bench_stage_fini(&e.st);
	free(e.run);
}
