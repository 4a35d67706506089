/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_ENGINE_MODEL_H
#define PD_TESTS_UNIT_ENGINE_MODEL_H

/*
 * The world of test_engine_model.c: prefill brokers (a real pd_tx engine
 * and a real send pool each) and decode brokers (a real pd_rx engine, recv
 * pool and recv index each) wired through a simulated network, on a
 * simulated clock, driven by one event heap. This header holds the world,
 * the event heap, the network and the checks run after every event;
 * engine_agents.h the prefill ranks and decode processes, engine_wire.h
 * the engines' callbacks and the delivery of messages and writes; the test
 * file the workload, how requests end, and the test cases. Static helpers
 * for one translation unit.
 *
 * Network: control messages between two brokers are delivered after a
 * random delay but IN ORDER per direction (prefill p -> decode d, and back),
 * because the real control plane is one ZeroMQ connection per peer (TCP,
 * ordered), and the engines rely on it: a CancelNotif overtaking its
 * request's Reserve would find nothing to cancel (pd_rx_cancel leaves no
 * tombstone for an unknown request) and the Reserve would then start a
 * request nobody ends. Writes are separate: each completes after its own
 * random delay (pd_tx_write_done), in any order, and its PutDone then goes
 * on the ordered control channel, as the broker sends it.
 *
 * Failures are recorded, not asserted (the engines may be mid-call): the
 * first is reported with its seed, the last trace lines and the state.
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
#include "pd_index.h"
#include "pd_proto.h"
#include "pd_reqtab.h"
#include "pd_rx.h"
#include "pd_slots.h"
#include "pd_sync.h"
#include "pd_tx.h"

#define US  1000ull
#define MS  1000000ull
#define SEC 1000000000ull

#define EM_MAXP      2u    /* prefill brokers */
#define EM_MAXD      2u    /* decode brokers */
#define EM_MAXWS     2u    /* ranks per request (TP) */
#define EM_MAXGROUPS 2u    /* TP groups per prefill broker */
#define EM_MAXRANKS  (EM_MAXWS * EM_MAXGROUPS)
#define EM_MAXREQ    96u
#define EM_MAXRUN    8u    /* running requests per rank engine */
#define EM_MAXBATCH  4u
#define EM_MAXSEND   128u  /* send slots per pool */
#define EM_MAXRECV   128u
#define EM_MAXSEQ    8192u /* seqs per sender engine in one seed */
#define EM_MAXCQ     (4u * EM_MAXREQ)
#define EM_NBUCKETS  1024u
#define EM_KEYLEN    24u
#define EM_TRACE     64u   /* trace lines kept for a failure report */
#define EM_OWNER_BROKER 0u /* pool owner of slots the broker holds (BROKER_OWNER) */
#define EM_RX_OWNER  7u
#define EM_SLOT_SIZE 4096u

/* Deadlines. The stall window is far below every engine deadline, so a
 * schedule that only moves again when a deadline breaks it is caught. */
#define EM_STALL_NS    (1 * SEC)   /* no progress this long with requests live: stuck */
#define EM_ALLOC_TMO   (5 * SEC)   /* sender: AllocResponse and default admission deadline */
#define EM_RX_ADMIT    (10 * SEC)
#define EM_RX_TTL      (20 * SEC)
#define EM_TOMB_NS     (60 * SEC)
#define EM_TICK_NS     (10 * MS)
#define EM_GRACE_NS    (50 * MS)   /* decode gives up on a request the receiver never saw */

/* Event types. */
#define E_MSG    1u
#define E_WRITE  2u
#define E_STEP   3u  /* a rank engine's step (a = broker, b = rank) */
#define E_DECODE 4u  /* a decode process's step (a = broker) */
#define E_TICK   5u
#define E_ARRIVE 6u  /* a = request */
#define E_CANCEL 7u  /* a = request */
#define E_DEATH  8u  /* a = broker, b = rank */

/* Messages. */
#define M_RESERVE 1u
#define M_ALLOC   2u
#define M_PUTDONE 3u
#define M_CANCEL  4u
#define M_REPLY   5u
#define M_WRITE   6u /* not a message: a write in flight */

/* Model slot states (send pool). */
#define S_FREE   0u
#define S_LOANED 1u
#define S_QUEUED 2u

/* Decode watch. */
#define W_NONE 0u
#define W_WAIT 1u
#define W_HOLD 2u
#define W_DONE 3u

/* Why a request ended. */
#define WHY_DONE     1u
#define WHY_CANCEL   2u  /* cancelled by the model */
#define WHY_AGENT    3u  /* a rank of its TP group died */
#define WHY_DEADLINE 4u  /* its own admission deadline passed */
#define WHY_WRITE    5u  /* a write failed (injected) */
#define WHY_OTHER    6u  /* none of these: a failure nobody asked for */

/* CQ entries of a rank (what libpdagent reads from the broker). */
#define CQ_ADMITTED 1u
#define CQ_END      2u

struct em_cfg {
	uint32_t np, nd, groups, ws;     /* brokers; TP groups per prefill broker; ranks per group */
	uint32_t max_run, batch, chunks_lo, chunks_hi, nreq;
	uint32_t send_slots, recv_slots;
	uint64_t step_ns, dec_ns, net_lo, net_hi, wr_lo, wr_hi, hold_lo, hold_hi, gap_ns;
	uint32_t cancel_pct, deadline_pct, wfail_permille, death;
	uint32_t stop_on_nobufs;         /* an exhausted pool ends the rank's step (a blocked thread) */
	uint32_t fill_later_pct;         /* a loan is filled and submitted at the next step */
	uint32_t legacy;                 /* the old sender: stage without admission (see the test) */
	uint32_t grants;                 /* the senders' admit_grants (0: none) */
};

struct em_msg {
	uint32_t type, p, d, req, rank, ws, total, is_last, n, nalready;
	uint32_t grants;                 /* Reserve: grants asked */
	uint32_t bind;                   /* PutDone: binds keys (grants of the admission) */
	uint64_t seq;
	int32_t err;
	int32_t idx[EM_MAXBATCH];        /* PutDone indexes, reply/write remote indexes */
	int32_t already[EM_MAXBATCH];
	uint32_t lens[EM_MAXBATCH];
	uint32_t slot[EM_MAXBATCH];      /* write: the staging slots written from */
	uint8_t klen[EM_MAXBATCH];
	char key[EM_MAXBATCH][EM_KEYLEN];
};

struct em_ev {
	uint64_t t, ord;
	uint32_t type, a, b;
	struct em_msg *m;
};

/* One rank's part of a request, as the model saw it. */
struct em_part {
	uint8_t declared, admitted, nadm, nend, gone, proxy;
	int32_t status;
	uint32_t staged, submitted;      /* chunks loaned; of them submitted */
};

struct em_req {
	char id[12];
	uint32_t idlen;
	uint64_t tag;
	uint32_t p, g, d, total;         /* total: chunks per rank */
	uint64_t arrive_ns, timeout_ns, cancel_ns, end_ns, tx_end_ns, hold_ns, hold_until;
	uint8_t arrived, ended, why, cancelled, killed, wfailed;
	uint8_t rx_admitted, rx_ready, rx_failed, released, watch;
	int32_t rx_err;
	uint32_t held;                   /* staging slots loaned or queued for it */
	uint32_t tx_live;                /* bit per rank: live in its sender engine */
	struct em_part part[EM_MAXWS];
};

struct em_cqe {
	uint16_t req;
	uint8_t type;
	int32_t status;
};

struct em_fill {
	uint16_t req;
	uint32_t n;
	pd_slot_ref refs[EM_MAXBATCH];
};

/* A prefill rank: one agent, one engine thread. */
struct em_rank {
	uint32_t p, idx, g, tp, agent, alive, stepping;
	struct pd_reqtab tab;
	uint16_t q[EM_MAXREQ];           /* arrived, not yet scheduled (arrival order) */
	uint32_t nq;
	uint16_t run[EM_MAXRUN];         /* declared, not ended (arrival order) */
	uint32_t nrun;
	struct em_cqe cq[EM_MAXCQ];
	uint32_t ncq;
	struct em_fill fill[EM_MAXRUN];  /* loaned, submitted at the next step */
	uint32_t nfill;
};

struct em_slot {
	pd_slot_ref ref;
	uint16_t req;
	uint8_t rank, st, busy;
	uint32_t agent;
};

struct em_seq {
	uint16_t req1;                   /* request index + 1 */
	uint8_t rank, reserve;
};

struct em_pb {
	struct pd_tx *tx;
	struct pd_pool pool;
	void *mem;
	size_t len;
	struct em_slot slot[EM_MAXSEND];
	struct em_seq seq[EM_MAXSEQ];
	struct em_rank rk[EM_MAXRANKS];
	uint32_t nrk;
	uint8_t gdead[EM_MAXGROUPS];
	uint64_t fifo[EM_MAXD];          /* last delivery time on p -> d */
	uint64_t legacy_seq;             /* the Reserve the legacy sender answers itself */
};

struct em_db {
	struct pd_rx *rx;
	struct pd_pool pool;
	struct pd_index index;
	void *pmem, *imem;
	size_t plen, ilen;
	uint64_t fifo[EM_MAXP];          /* last delivery time on d -> p */
	uint32_t stepping;
};

struct em_world {
	struct em_cfg c;
	uint32_t seed, trace, bad, stuck, finished, nm, nended, inflight, ntr;
	uint64_t rng, now, ord, last_progress, horizon, nevents;
	struct em_ev *heap;
	uint32_t nheap, cap;
	struct em_pb pb[EM_MAXP];
	struct em_db db[EM_MAXD];
	struct em_req m[EM_MAXREQ];
	char tr[EM_TRACE][144];
	const char *file;
	char msg[512];
	/* Across seeds. */
	uint64_t why[WHY_OTHER + 1], max_lat_ns, stuck_seeds, unadmitted_max;
	uint32_t unadmitted_now, nfail; /* nfail: seeds failed (only the first is detailed) */
};

static struct em_world *W;

static void bad(const char *file, int line, const char *fmt, ...) PD_PRINTF(3, 4);
static void bad(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	if (W->bad)
		return;
	W->file = file;
	W->bad = (uint32_t)line;
	va_start(ap, fmt);
	(void)vsnprintf(W->msg, sizeof(W->msg), fmt, ap);
	va_end(ap);
}

#define EXPECT(c, ...)                                        \
	do {                                                  \
		if (!(c))                                     \
			bad(__FILE__, __LINE__, __VA_ARGS__); \
	} while (0)

static void tr(const char *fmt, ...) PD_PRINTF(1, 2);
static void tr(const char *fmt, ...)
{
	char *line = W->tr[W->ntr++ % EM_TRACE];
	int n = snprintf(line, sizeof(W->tr[0]), "%8.3f ms  ", (double)W->now / MS);
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(line + n, sizeof(W->tr[0]) - (size_t)n, fmt, ap);
	va_end(ap);
	if (W->trace)
		fprintf(stderr, "%s\n", line);
}

static uint32_t rnd(uint32_t n)
{
	uint64_t z = (W->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return n ? (uint32_t)((z ^ (z >> 31)) % n) : 0;
}

static uint64_t rnd_in(uint64_t lo, uint64_t hi)
{
	return hi > lo ? lo + rnd((uint32_t)(hi - lo + 1)) : lo;
}

/* "[a b c]" of n indexes, for the trace. */
static const char *idx_str(const int32_t *v, uint32_t n, char *buf, size_t len)
{
	size_t k = 0;

	buf[k++] = '[';
	for (uint32_t i = 0; i < n && k + 12 < len; i++)
		k += (size_t)snprintf(buf + k, len - k, i ? " %d" : "%d", v[i]);
	buf[k++] = ']';
	buf[k] = 0;
	return buf;
}

static void progress(void)
{
	W->last_progress = W->now;
}

/* ---- the event heap (time, then insertion order: deterministic) ------------------------ */

static int ev_less(const struct em_ev *a, const struct em_ev *b)
{
	return a->t != b->t ? a->t < b->t : a->ord < b->ord;
}

static void push(uint64_t t, uint32_t type, uint32_t a, uint32_t b, struct em_msg *m)
{
	uint32_t i;

	if (W->nheap == W->cap) {
		W->cap = W->cap ? 2 * W->cap : 1024;
		W->heap = realloc(W->heap, W->cap * sizeof(*W->heap));
		assert_non_null(W->heap);
	}
	i = W->nheap++;
	W->heap[i] = (struct em_ev){ .t = t, .ord = W->ord++, .type = type, .a = a, .b = b, .m = m };
	while (i && ev_less(&W->heap[i], &W->heap[(i - 1) / 2])) {
		struct em_ev x = W->heap[i];

		W->heap[i] = W->heap[(i - 1) / 2];
		W->heap[(i - 1) / 2] = x;
		i = (i - 1) / 2;
	}
}

static struct em_ev pop(void)
{
	struct em_ev top = W->heap[0];
	uint32_t i = 0;

	W->heap[0] = W->heap[--W->nheap];
	for (;;) {
		uint32_t l = 2 * i + 1, r = l + 1, s = i;

		if (l < W->nheap && ev_less(&W->heap[l], &W->heap[s]))
			s = l;
		if (r < W->nheap && ev_less(&W->heap[r], &W->heap[s]))
			s = r;
		if (s == i)
			return top;
		struct em_ev x = W->heap[i];

		W->heap[i] = W->heap[s];
		W->heap[s] = x;
		i = s;
	}
}

/* ---- lookups ------------------------------------------------------------------------ */

/* Request ids are "q<index>". */
static struct em_req *req_of(const uint8_t *id, uint32_t len)
{
	uint32_t i = 0;

	if (len < 2 || len > 6 || id[0] != 'q')
		return NULL;
	for (uint32_t k = 1; k < len; k++)
		i = i * 10 + (uint32_t)(id[k] - '0');
	return i < W->nm ? &W->m[i] : NULL;
}

static uint32_t qi(const struct em_req *q)
{
	return (uint32_t)(q - W->m);
}

static struct em_rank *rank_of(struct em_pb *pb, uint32_t agent)
{
	for (uint32_t i = 0; i < pb->nrk; i++)
		if (pb->rk[i].agent == agent)
			return &pb->rk[i];
	return NULL;
}

static struct em_msg *msg_new(uint32_t type, uint32_t p, uint32_t d)
{
	struct em_msg *m = calloc(1, sizeof(*m));

	assert_non_null(m);
	m->type = type;
	m->p = p;
	m->d = d;
	return m;
}

/* Deliver after a random delay, never before an earlier message of the
 * same direction (equal times keep their order through the heap). */
static void net_send(struct em_msg *m, uint64_t *fifo)
{
	uint64_t t = W->now + rnd_in(W->c.net_lo, W->c.net_hi);

	if (t < *fifo)
		t = *fifo;
	*fifo = t;
	W->inflight++;
	push(t, E_MSG, 0, 0, m);
}

static struct em_pb *pb_of(void *ctx)
{
	return ctx;
}

static uint32_t pb_idx(const struct em_pb *pb)
{
	return (uint32_t)(pb - W->pb);
}

/* ---- checks after every event -------------------------------------------------------- */

static void mark_live(void *ctx, const struct pd_tx_info *i)
{
	struct em_req *q = req_of(i->req_id, i->req_id_len);

	(void)ctx;
	if (q && i->rank < EM_MAXWS)
		q->tx_live |= 1u << i->rank;
}

/* The send pool agrees with the model slot by slot, and nothing staged
 * belongs to a request not admitted (by its sender and its receiver). */
static void check_pool(struct em_pb *pb)
{
	uint32_t nfree = 0, p = pb_idx(pb);

	for (uint32_t s = 0; s < W->c.send_slots; s++) {
		const struct em_slot *sl = &pb->slot[s];
		static const uint32_t want[] = { PD_SLOT_FREE, PD_SLOT_LOANED, PD_SLOT_QUEUED };
		struct pd_slot_desc d;
		const struct em_req *q = &W->m[sl->req];

		(void)pd_pool_desc_get(&pb->pool, s, &d);
		EXPECT(d.state == want[sl->st] &&
			       (sl->st == S_FREE || d.gen == PD_SLOT_REF_GEN(sl->ref)) &&
			       (sl->st != S_LOANED || d.owner == sl->agent),
		       "P%u send slot %u: pool says state %u owner %u, model %u", p, s,
		       (unsigned)d.state, d.owner, sl->st);
		if (sl->st == S_FREE) {
			nfree++;
			continue;
		}
		if (W->c.legacy) {
			W->unadmitted_now += !q->rx_admitted;
			continue;
		}
		EXPECT(q->part[sl->rank].admitted && q->rx_admitted,
		       "P%u send slot %u (%s) holds %s/%u, not admitted (sender %u, receiver %u)",
		       p, s, sl->st == S_LOANED ? "loaned" : "queued", q->id, sl->rank,
		       q->part[sl->rank].admitted, q->rx_admitted);
	}
	EXPECT(nfree == pd_pool_nfree(&pb->pool), "P%u: %u slots free, the pool says %u", p, nfree,
	       pd_pool_nfree(&pb->pool));
}

static void check_engines(void)
{
	W->unadmitted_now = 0;
	for (uint32_t i = 0; i < W->nm; i++)
		W->m[i].tx_live = 0;
	for (uint32_t p = 0; p < W->c.np; p++) {
		EXPECT(pd_tx_check(W->pb[p].tx) == 0, "P%u: pd_tx_check failed", p);
		pd_tx_foreach(W->pb[p].tx, mark_live, NULL);
		check_pool(&W->pb[p]);
	}
	for (uint32_t d = 0; d < W->c.nd; d++)
		EXPECT(pd_rx_check(W->db[d].rx) == 0, "D%u: pd_rx_check failed", d);
	if (W->unadmitted_now > W->unadmitted_max)
		W->unadmitted_max = W->unadmitted_now;
}

#endif
