/* SPDX-License-Identifier: MIT */
/*
 * pdbench, decode rank: wait for a request (never blindly: the coordinator
 * can stop a wait for a request that will never come), check
 * every byte of this rank's chunks, report, hold it --decode-hold ms (as
 * if decoding), then release the request once the coordinator says every
 * decode rank of this broker has checked it.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "pd_time.h"
#include "pdb_worker.h"

#define KEY_LEN        64
#define RELEASE_WAIT_S 10u /* beyond the deadline: release without the coordinator */

struct rcv {
	struct pd_bench_wk *w;
	struct pd_bench_wreq *q;
	uint32_t req;
	char id[PD_REQ_ID_MAX + 1];
	uint64_t deadline;
};

static void report(struct rcv *r, struct pd_bench_msg *m)
{
	m->req = r->req;
	pd_bench_wk_send(r->w, m);
}

/* 1 stop waiting (told to, or quitting), else 0. */
static int told_to_stop(struct rcv *r)
{
	int stop;

	(void)pthread_mutex_lock(&r->w->lock);
	stop = r->q->stop || r->w->quit;
	(void)pthread_mutex_unlock(&r->w->lock);
	return stop;
}

/* Late waits: until the coordinator says the prefill side is done (0), or
 * to stop (1), or the deadline (-ETIMEDOUT). */
static int wait_go(struct rcv *r)
{
	struct pd_bench_wk *w = r->w;
	int rc;

	(void)pthread_mutex_lock(&w->lock);
	while (!r->q->go && !r->q->stop && !w->quit && pd_now_ns() < r->deadline)
		pd_bench_wk_wait(w, r->deadline);
	rc = r->q->go ? 0 : r->q->stop || w->quit ? 1 : -ETIMEDOUT;
	(void)pthread_mutex_unlock(&w->lock);
	return rc;
}

/*
 * Wait until READY (*chunks: its chunk count) or an end. 0 READY; 1
 * stopped; -ETIMEDOUT; -EIO: the wait failed, or the request did (*status).
 * Early waits (--decode-wait early) start at once, in slices; late ones
 * make one pd_recv_wait() once the prefill side is done (see --help).
 */
static int wait_ready(struct rcv *r, int32_t *status, uint32_t *chunks)
{
	int early = r->w->env->o->early_wait;
	struct pd_recv_info info;
	uint64_t now, left;
	int rc = early ? 0 : wait_go(r);

	while (rc == 0) {
		if (early && told_to_stop(r))
			return 1;
		now = pd_now_ns();
		if (now >= r->deadline)
			return -ETIMEDOUT;
		left = (r->deadline - now + PD_NS_PER_MS - 1) / PD_NS_PER_MS;
		rc = pd_recv_wait(r->w->a, r->id, early && left > PD_BENCH_SLICE_MS ?
				  PD_BENCH_SLICE_MS : (uint32_t)left, &info);
		if (rc == -ETIMEDOUT) {
			rc = 0;
			continue;
		}
		*status = rc < 0 ? rc : info.status;
		*chunks = info.chunks;
		return *status ? -EIO : 0;
	}
	return rc;
}

/* Whose chunk the bytes at p are, among nearby requests: 0 found, -ENOENT. */
static int whose(const struct pd_bench_env *env, uint32_t req, const void *p, uint32_t len,
		 uint32_t *wr, uint32_t *wk, uint32_t *wc)
{
	uint32_t lo = req > 256 ? req - 256 : 0, hi = req + 256;

	for (uint32_t q = lo; len >= 8 && q < hi && q < env->o->requests; q++)
		for (uint32_t r = 0; r < env->o->tp; r++)
			for (uint32_t c = 0; c < env->o->chunks_max; c++)
				if (pd_bench_diff(p, 8, pd_bench_chunk_seed(env->o->seed, q, r, c)) == 8) {
					*wr = q;
					*wk = r;
					*wc = c;
					return 0;
				}
	return -ENOENT;
}

/* Say what differs (the first few per process). */
static void tell(const struct rcv *r, const char *key, uint32_t want, uint32_t len,
		 const void *p, uint32_t off)
{
	static _Atomic uint32_t told;
	uint32_t q, k, c;

	if (atomic_fetch_add(&told, 1) >= 5)
		return;
	(void)fprintf(stderr, "\npdbench: chunk %s: length %u (expected %u), first wrong byte at "
		"offset %u", key, len, want, off);
	if (off == 0 && whose(r->w->env, r->req, p, len, &q, &k, &c) == 0)
		(void)fprintf(stderr, "; it holds the bytes of request %u rank %u chunk %u", q, k, c);
	(void)fputc('\n', stderr);
}

/* Check every chunk of this rank. */
static void verify(struct rcv *r, struct pd_bench_msg *m)
{
	const struct pd_bench_env *env = r->w->env;
	uint32_t rank = r->w->rank, k = r->q->chunks;
	char key[KEY_LEN];

	for (uint32_t c = 0; c < k; c++) {
		uint32_t klen = pd_bench_key(key, sizeof(key), env->run_id, r->req, rank, c);
		uint32_t want = pd_bench_chunk_len(env->o, r->req, rank, c, k), len = 0;
		const void *p = NULL;
		uint32_t off;

		if (pd_recv_lookup(r->w->a, key, klen, &p, &len) < 0) {
			m->missing++;
			continue;
		}
		off = pd_bench_diff(p, len, pd_bench_chunk_seed(env->o->seed, r->req, rank, c));
		if (len != want || off != len) {
			m->corrupted++;
			tell(r, key, want, len, p, off);
		} else {
			m->bytes += len;
		}
	}
}

/* Until the coordinator's word (or `until`), and (--decode-hold, the
 * request being decoded) until hold_until. */
static void hold(struct rcv *r, uint64_t until, uint64_t hold_until)
{
	struct pd_bench_wk *w = r->w;

	(void)pthread_mutex_lock(&w->lock);
	while (!r->q->stop && !w->quit && pd_now_ns() < hold_until)
		pd_bench_wk_wait(w, hold_until);
	while (!r->q->release && !r->q->stop && !w->quit && pd_now_ns() < until)
		pd_bench_wk_wait(w, until);
	(void)pthread_mutex_unlock(&w->lock);
}

/* After a READY verified at t_ns: hold, wait for the coordinator's word,
 * then release. */
static void release(struct rcv *r, uint64_t t_ns)
{
	struct pd_bench_msg m = { .type = PD_BENCH_M_RELEASED };
	struct pd_bench_wk *w = r->w;

	hold(r, r->deadline + RELEASE_WAIT_S * PD_NS_PER_S,
	     t_ns + (uint64_t)w->env->o->decode_hold_ms * PD_NS_PER_MS);
	m.status = pd_recv_release(w->a, r->id);
	report(r, &m);
}

void pd_bench_recv_run(struct pd_bench_wk *w, uint32_t req)
{
	struct rcv r = { .w = w, .q = &w->req[req], .req = req,
			 .deadline = pd_deadline_ms((uint64_t)w->env->o->timeout_s * 1000) };
	struct pd_bench_msg m = { .type = PD_BENCH_M_DRESULT };
	uint32_t chunks = 0;
	int32_t status = 0;
	int rc;

	pd_bench_req_id(r.id, sizeof(r.id), w->env->run_id, req);
	rc = wait_ready(&r, &status, &chunks);
	if (rc == 1) {
		m.kind = PD_BENCH_R_STOPPED;
	} else if (rc == -ETIMEDOUT) {
		m.kind = PD_BENCH_R_TIMEOUT;
		m.status = rc;
	} else if (rc < 0) {
		m.kind = PD_BENCH_R_FAILED;
		m.status = status;
	} else {
		verify(&r, &m);
		if (chunks != r.q->chunks * w->env->o->tp)
			m.corrupted++; /* READY with another chunk count than declared */
		m.kind = PD_BENCH_R_DONE;
		m.t_ns = pd_now_ns();
	}
	report(&r, &m);
	if (rc == 0)
		release(&r, m.t_ns);
}
