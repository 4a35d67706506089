/* SPDX-License-Identifier: MIT */
/*
 * pdbench: the coordinator. Single-threaded: it hands requests to the
 * workers (--concurrency at a time), collects each rank's outcome, runs the
 * two barriers a request needs (the gate of an aborted request, and the
 * release once every decode rank has checked its chunks) and decides what
 * became of each request.
 *
 * Aborts: the drawn rank cancels at its stage (always after its
 * pd_declare); the request's other prefill ranks stop before their last
 * batch (the gate) until that has happened. If the cancelling rank's
 * declaration never reached its broker, its cancel cannot reach the decode
 * broker, so the others cancel too (as a serving scheduler broadcasts an
 * abort to every TP rank); otherwise they carry on and see PUT_FAILED
 * -ECANCELED (the broker aborts every rank of the request) or PUT_DONE.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "pd_time.h"
#include "pdb.h"

#define GRACE_NS (5 * PD_NS_PER_S) /* beyond a request's deadline: workers must have answered */
#define TICK_MS  100

struct creq {
	uint8_t state;               /* 0 pending, 1 running, 2 finished */
	uint8_t aborted, abort_rank, gate_sent, stop_sent, release_sent, lost;
	uint8_t abort_stage;
	uint32_t abort_batch;
	uint32_t p, d, k;
	uint64_t pre, pre_done, pre_cancel, pre_fail, pre_timeout;   /* rank bitmasks */
	uint64_t dec, dec_done, dec_cancel, dec_fail, dec_timeout, dec_stop;
	uint64_t released, rel_bad;
	uint32_t corrupted, missing;
	int32_t first_err;           /* the first failure status a rank reported */
	uint64_t bytes, t_first, t_end, deadline;
	uint64_t admit_ns;           /* its slowest rank's pd_declare -> ADMITTED, 0 none */
	uint64_t xfer_ns;            /* its slowest rank's first pd_put -> PUT_DONE, 0 none */
};

struct coord {
	const struct pd_bench_env *env;
	const struct pd_bench_opts *o;
	struct pd_bench_worker *w;
	uint32_t nw;
	struct pd_bench_cluster *cl;
	struct pd_bench_result *r;
	struct creq *q;
	uint32_t *running;           /* indexes of running requests */
	uint32_t nrunning, next, done;
	uint64_t all;                /* the bitmask of every rank */
	uint64_t t0;
	uint32_t explained;
	int err;
};

/* ---- sending orders ------------------------------------------------------------ */

static void order(struct coord *c, uint32_t broker, uint32_t rank, struct pd_bench_msg *m)
{
	struct pd_bench_worker *w = &c->w[broker * c->o->tp + rank];
	int rc = pd_bench_msg_send(w->fd, m);

	if (rc < 0 && !c->err) {
		(void)fprintf(stderr, "\npdbench: agent process of broker %s rank %u: %s\n",
			c->cl->b[broker].name, rank, pd_strerror(rc));
		c->err = rc;
	}
}

/* Release the gated ranks: proceed, or cancel too. */
static void gate(struct coord *c, uint32_t i, int proceed)
{
	struct creq *q = &c->q[i];
	struct pd_bench_msg m = { .type = PD_BENCH_M_GATE, .req = i, .stage = proceed ? 1 : 0 };

	if (!q->aborted || q->gate_sent)
		return;
	q->gate_sent = 1;
	for (uint32_t r = 0; r < c->o->tp; r++)
		if (r != q->abort_rank)
			order(c, q->p, r, &m);
}

/* STOP to the decode ranks that have not ended (or that wait to release). */
static void stop_decode(struct coord *c, uint32_t i)
{
	struct creq *q = &c->q[i];
	struct pd_bench_msg m = { .type = PD_BENCH_M_STOP, .req = i };

	if (q->stop_sent)
		return;
	q->stop_sent = 1;
	for (uint32_t r = 0; r < c->o->tp; r++)
		if (!(q->dec & (1ull << r)) || (q->dec_done & ~q->released & (1ull << r)))
			order(c, c->cl->nprefill + q->d, r, &m);
}

/* GO to the decode ranks: the prefill side is done, READY must come. */
static void go_decode(struct coord *c, uint32_t i)
{
	struct creq *q = &c->q[i];
	struct pd_bench_msg m = { .type = PD_BENCH_M_GO, .req = i };

	for (uint32_t r = 0; r < c->o->tp; r++)
		if (!(q->dec & (1ull << r)))
			order(c, c->cl->nprefill + q->d, r, &m);
}

/* ---- starting a request ---------------------------------------------------------- */

static uint64_t draw(const struct coord *c, uint32_t i, uint64_t what)
{
	return pd_bench_mix(pd_bench_mix(c->o->seed ^ (what << 56)) + i);
}

static void draw_abort(struct coord *c, uint32_t i, struct pd_bench_msg *m)
{
	struct creq *q = &c->q[i];
	uint32_t nb = (q->k + c->o->batch - 1) / c->o->batch;
	double u = (double)(draw(c, i, 2) >> 11) * (1.0 / 9007199254740992.0);

	q->aborted = u < c->o->abort_rate;
	if (!q->aborted)
		return;
	q->abort_rank = (uint8_t)(draw(c, i, 3) % c->o->tp);
	m->stage = PD_BENCH_AB_BEFORE + (uint32_t)(draw(c, i, 4) % 4);
	if (m->stage == PD_BENCH_AB_ALLOCATED)
		m->batch = (uint32_t)(draw(c, i, 5) % nb);
	if (m->stage == PD_BENCH_AB_BETWEEN && nb < 2)
		m->stage = PD_BENCH_AB_AFTER;
	else if (m->stage == PD_BENCH_AB_BETWEEN)
		m->batch = (uint32_t)(draw(c, i, 5) % (nb - 1));
}

static void dispatch(struct coord *c, uint32_t i)
{
	const struct pd_bench_opts *o = c->o;
	struct creq *q = &c->q[i];
	struct pd_bench_msg ab = { 0 };

	q->state = 1;
	q->p = i % o->nprefill;
	q->d = (i / o->nprefill) % o->ndecode;
	q->k = o->chunks_min + (uint32_t)(draw(c, i, 1) % (o->chunks_max - o->chunks_min + 1));
	q->deadline = pd_deadline_ms((uint64_t)o->timeout_s * 1000);
	draw_abort(c, i, &ab);
	q->abort_stage = (uint8_t)ab.stage;
	q->abort_batch = ab.batch;
	c->running[c->nrunning++] = i;
	for (uint32_t r = 0; r < o->tp; r++) {
		struct pd_bench_msg m = { .type = PD_BENCH_M_START, .req = i, .chunks = q->k,
					  .decode = q->d };

		if (q->aborted && r == q->abort_rank) {
			m.stage = ab.stage;
			m.batch = ab.batch;
		} else if (q->aborted) {
			m.flags = PD_BENCH_F_GATED;
		}
		order(c, q->p, r, &m);
	}
	for (uint32_t r = 0; r < o->tp; r++) {
		struct pd_bench_msg m = { .type = PD_BENCH_M_WAIT, .req = i, .chunks = q->k };

		order(c, c->cl->nprefill + q->d, r, &m);
	}
}

/* ---- ending a request ------------------------------------------------------------ */

static uint32_t classify(const struct coord *c, const struct creq *q)
{
	uint64_t all = c->all;

	if (q->corrupted || (q->missing && !q->aborted))
		return PD_BENCH_CORRUPTED;
	if (q->lost || q->pre_timeout || q->dec_timeout)
		return PD_BENCH_LOST;
	if (q->pre_fail || q->dec_fail || q->rel_bad)
		return PD_BENCH_FAILED;
	if (!q->aborted && (q->pre_cancel || q->dec_cancel || q->dec_stop))
		return q->pre_done == all ? PD_BENCH_LOST : PD_BENCH_FAILED;
	if (q->pre_done == all && q->dec_done != all)
		return PD_BENCH_LOST; /* every PUT_DONE, yet no READY */
	return q->aborted ? PD_BENCH_CANCELLED : PD_BENCH_OK;
}

/* What went wrong with a request (the first few). */
static void explain(struct coord *c, uint32_t i, uint32_t what)
{
	static const char *const names[] = { "?", "ok", "failed", "cancelled", "corrupted",
					     "lost" };
	const struct creq *q = &c->q[i];

	if (what == PD_BENCH_OK || what == PD_BENCH_CANCELLED || ++c->explained > 20)
		return;
	(void)fprintf(stderr, "\npdbench: request %u %s: %s -> %s, %u chunks per rank; "
		"prefill ranks done %#llx cancelled %#llx failed %#llx timeout %#llx; decode "
		"ranks ready %#llx cancelled %#llx failed %#llx stopped %#llx timeout %#llx, "
		"release failed %#llx; %u chunks differ, %u missing", i, names[what],
		c->cl->b[q->p].name, c->cl->b[c->cl->nprefill + q->d].name, q->k,
		(unsigned long long)q->pre_done, (unsigned long long)q->pre_cancel,
		(unsigned long long)q->pre_fail, (unsigned long long)q->pre_timeout,
		(unsigned long long)q->dec_done, (unsigned long long)q->dec_cancel,
		(unsigned long long)q->dec_fail, (unsigned long long)q->dec_stop,
		(unsigned long long)q->dec_timeout, (unsigned long long)q->rel_bad, q->corrupted,
		q->missing);
	if (q->aborted)
		(void)fprintf(stderr, "; aborted by rank %u %s %u", q->abort_rank,
			q->abort_stage == PD_BENCH_AB_BEFORE ? "declared, before pd_alloc of batch" :
			q->abort_stage == PD_BENCH_AB_ALLOCATED ? "after pd_alloc of batch" :
			"after pd_put of batch", q->abort_stage == PD_BENCH_AB_AFTER ?
			(q->k + c->o->batch - 1) / c->o->batch - 1 : q->abort_batch);
	if (q->first_err)
		(void)fprintf(stderr, "; first error %s", pd_strerror(q->first_err));
	(void)fputc('\n', stderr);
}

static void finish(struct coord *c, uint32_t i)
{
	struct creq *q = &c->q[i];
	struct pd_bench_result *r = c->r;
	uint32_t what = classify(c, q);

	q->state = 2;
	explain(c, i, what);
	if (q->admit_ns && i >= c->o->warmup)
		r->sadmit_ns[r->nsadmit++] = q->admit_ns;
	switch (what) {
	case PD_BENCH_OK:
		r->ok++;
		if (i < c->o->warmup)
			break; /* verified, not timed */
		r->bytes += q->bytes;
		if (q->t_first && q->t_end > q->t_first)
			r->lat_ns[r->nlat++] = q->t_end - q->t_first;
		if (q->xfer_ns)
			r->xfer_ns[r->nxfer++] = q->xfer_ns;
		break;
	case PD_BENCH_CANCELLED: r->cancelled++; break;
	case PD_BENCH_CORRUPTED: r->corrupted++; break;
	case PD_BENCH_LOST: r->lost++; break;
	default: r->failed++; break;
	}
	r->corrupted_chunks += q->corrupted + (q->aborted ? 0 : q->missing);
	for (uint32_t k = 0; k < c->nrunning; k++) {
		if (c->running[k] == i) {
			c->running[k] = c->running[--c->nrunning];
			break;
		}
	}
	c->done++;
	if (c->done == c->o->warmup)
		c->t0 = pd_now_ns(); /* the warm-up is over: the clock starts */
}

static void maybe_finish(struct coord *c, uint32_t i)
{
	struct creq *q = &c->q[i];

	if (q->pre == c->all && q->dec == c->all && (q->released & q->dec_done) == q->dec_done)
		finish(c, i);
}

/* ---- what the workers report ------------------------------------------------------ */

static void on_presult(struct coord *c, uint32_t i, uint32_t rank, const struct pd_bench_msg *m)
{
	struct creq *q = &c->q[i];
	uint64_t bit = 1ull << rank;

	q->pre |= bit;
	if (m->t_ns && (!q->t_first || m->t_ns < q->t_first))
		q->t_first = m->t_ns;
	if (m->admit_ns > q->admit_ns)
		q->admit_ns = m->admit_ns;
	if (m->xfer_ns > q->xfer_ns)
		q->xfer_ns = m->xfer_ns;
	c->r->deferred += m->deferred;
	c->r->steps += m->steps;
	c->r->sleeps += m->sleeps;
	c->r->fd_wakes += m->fd_wakes;
	if (m->kind == PD_BENCH_R_DONE)
		q->pre_done |= bit;
	else if (m->kind == PD_BENCH_R_TIMEOUT)
		q->pre_timeout |= bit;
	else if (m->kind == PD_BENCH_R_CANCELLED || m->status == -ECANCELED)
		q->pre_cancel |= bit;
	else
		q->pre_fail |= bit;
	if (m->status && m->status != -ECANCELED && !q->first_err)
		q->first_err = m->status;
	if (rank == q->abort_rank)
		gate(c, i, (m->flags & PD_BENCH_F_DECLARED) != 0);
	/* A rank without PUT_DONE: READY can never come (or is undone by the
	 * broker): decode ranks still waiting stop. Else READY must come. */
	if (q->pre == c->all && q->pre_done != c->all)
		stop_decode(c, i);
	else if (q->pre == c->all)
		go_decode(c, i);
}

static void on_dresult(struct coord *c, uint32_t i, uint32_t rank, const struct pd_bench_msg *m)
{
	struct creq *q = &c->q[i];
	struct pd_bench_msg rel = { .type = PD_BENCH_M_RELEASE, .req = i };
	uint64_t bit = 1ull << rank;

	q->dec |= bit;
	if (m->kind == PD_BENCH_R_DONE) {
		q->dec_done |= bit;
		q->corrupted += m->corrupted;
		q->missing += m->missing;
		q->bytes += m->bytes;
		if (m->t_ns > q->t_end)
			q->t_end = m->t_ns;
	} else if (m->kind == PD_BENCH_R_TIMEOUT) {
		q->dec_timeout |= bit;
	} else if (m->kind == PD_BENCH_R_STOPPED) {
		q->dec_stop |= bit;
	} else if (m->status == -ECANCELED) {
		q->dec_cancel |= bit;
	} else {
		q->dec_fail |= bit;
	}
	if (m->status && m->status != -ECANCELED && !q->first_err)
		q->first_err = m->status;
	if (q->dec != c->all || q->release_sent)
		return;
	q->release_sent = 1; /* the barrier: every decode rank has checked */
	for (uint32_t r = 0; r < c->o->tp; r++)
		if (q->dec_done & (1ull << r))
			order(c, c->cl->nprefill + q->d, r, &rel);
}

static void on_msg(struct coord *c, const struct pd_bench_worker *w, const struct pd_bench_msg *m)
{
	struct creq *q = m->req < c->o->requests ? &c->q[m->req] : NULL;
	uint64_t bit = 1ull << w->rank;

	if (!q || q->state != 1)
		return; /* finished (lost) already */
	if (m->type == PD_BENCH_M_ABORTED && !w->decode && w->rank == q->abort_rank)
		gate(c, m->req, (m->flags & PD_BENCH_F_DECLARED) != 0);
	else if (m->type == PD_BENCH_M_PRESULT && !w->decode && !(q->pre & bit))
		on_presult(c, m->req, w->rank, m);
	else if (m->type == PD_BENCH_M_DRESULT && w->decode && !(q->dec & bit))
		on_dresult(c, m->req, w->rank, m);
	else if (m->type == PD_BENCH_M_RELEASED && w->decode) {
		q->released |= bit;
		if (m->status != 0 && m->status != -ENOENT)
			q->rel_bad |= bit;
	}
	maybe_finish(c, m->req);
}

/* Read everything a worker sent. 0, or -errno when it is gone. */
static int drain(struct coord *c, struct pd_bench_worker *w)
{
	struct pd_bench_msg m;

	for (;;) {
		ssize_t n = recv(w->fd, &m, sizeof(m), MSG_DONTWAIT);

		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (n != (ssize_t)sizeof(m)) {
			(void)fprintf(stderr, "\npdbench: agent process of broker %s rank %u %s\n",
				c->cl->b[w->broker].name, w->rank, n == 0 ? "exited" :
				"sent a bad message");
			return -ECHILD;
		}
		on_msg(c, w, &m);
	}
}

/* Requests past their deadline (and the workers' grace): lost. */
static void reap_late(struct coord *c)
{
	uint64_t now = pd_now_ns();

	for (uint32_t k = 0; k < c->nrunning;) {
		uint32_t i = c->running[k];
		struct creq *q = &c->q[i];

		if (now < q->deadline + GRACE_NS) {
			k++;
			continue;
		}
		q->lost = 1;
		gate(c, i, 0);
		stop_decode(c, i);
		finish(c, i); /* swaps another request into position k */
	}
}

/* ---- the loop -------------------------------------------------------------------- */

static int turn(struct coord *c, struct pollfd *pfd)
{
	int n = poll(pfd, c->nw, TICK_MS);

	if (n < 0 && errno != EINTR)
		return -errno;
	for (uint32_t k = 0; n > 0 && k < c->nw; k++) {
		if (!pfd[k].revents)
			continue;
		if (drain(c, &c->w[k]) < 0)
			return -ECHILD;
	}
	return 0;
}

static int loop(struct coord *c, const volatile sig_atomic_t *stop)
{
	struct pollfd *pfd = calloc(c->nw, sizeof(*pfd));
	uint64_t next_tick = 0;
	int rc = 0;

	if (!pfd)
		return -ENOMEM;
	for (uint32_t k = 0; k < c->nw; k++)
		pfd[k] = (struct pollfd){ .fd = c->w[k].fd, .events = POLLIN };
	while (rc == 0 && !c->err && c->done < c->o->requests) {
		if (*stop) {
			c->r->interrupted = 1;
			break;
		}
		while (c->nrunning < c->o->concurrency && c->next < c->o->requests && !c->err &&
		       (c->next < c->o->warmup || c->done >= c->o->warmup))
			dispatch(c, c->next++); /* the measured requests after the whole warm-up */
		rc = turn(c, pfd);
		if (rc == 0 && pd_now_ns() >= next_tick) {
			next_tick = pd_now_ns() + TICK_MS * PD_NS_PER_MS;
			if (pd_bench_cluster_check(c->cl) >= 0)
				rc = -ECHILD;
			reap_late(c);
			pd_bench_progress(c->o, c->r, c->done,
					  (double)(pd_now_ns() - c->t0) / 1e9, 0);
		}
	}
	free(pfd);
	return rc ? rc : c->err;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int pd_bench_coord_run(const struct pd_bench_env *env, struct pd_bench_worker *w, uint32_t nw,
		       struct pd_bench_cluster *cl, struct pd_bench_result *r,
		       const volatile sig_atomic_t *stop)
{
	struct coord c = { .env = env, .o = env->o, .w = w, .nw = nw, .cl = cl, .r = r,
			   .all = env->o->tp == 64 ? UINT64_MAX : (1ull << env->o->tp) - 1 };
	int rc;

	c.q = calloc(env->o->requests, sizeof(*c.q));
	c.running = calloc(env->o->concurrency, sizeof(*c.running));
	r->lat_ns = calloc(env->o->requests, sizeof(*r->lat_ns));
	r->sadmit_ns = calloc(env->o->requests, sizeof(*r->sadmit_ns));
	r->xfer_ns = calloc(env->o->requests, sizeof(*r->xfer_ns));
	r->requests = env->o->requests;
	if (!c.q || !c.running || !r->lat_ns || !r->sadmit_ns || !r->xfer_ns) {
		free(c.q);
		free(c.running);
		return -ENOMEM;
	}
	c.t0 = pd_now_ns();
	rc = loop(&c, stop);
	r->seconds = (double)(pd_now_ns() - c.t0) / 1e9;
	pd_bench_progress(c.o, r, c.done, r->seconds, 1);
	if (r->nlat)
		qsort(r->lat_ns, r->nlat, sizeof(*r->lat_ns), cmp_u64);
	if (r->nsadmit)
		qsort(r->sadmit_ns, r->nsadmit, sizeof(*r->sadmit_ns), cmp_u64);
	if (r->nxfer)
		qsort(r->xfer_ns, r->nxfer, sizeof(*r->xfer_ns), cmp_u64);
	free(c.q);
	free(c.running);
	return rc;
}
