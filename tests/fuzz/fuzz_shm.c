/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the shared memory agents may write: between the
 * broker's steps, fuzzer-chosen bytes land in what an agent maps read-write
 * (pd_segment_protect(), AG_RW_REGIONS in agent/pd_agent.c): the send
 * pool (header, counters, waiters, free stack, descriptors, its mutex),
 * the agents region (table, slots, ring headers and entries, pin
 * journals) and the recv index (header, entries, its mutex). The broker
 * (fuzz_broker.h) keeps doing its work meanwhile: agents submit, pin and
 * release, a peer sends requests and data, the receiver answers, the tick
 * runs (the recv pool's periodic check included). Whatever the writes,
 * the broker never crashes, asserts, leaks or hangs (every lock wait is
 * bounded), its engines' own checks hold after every step (the recv pool
 * is the broker's alone), and it builds no message the codec refuses.
 *
 * A mutex is written as an agent leaves it: free, its holder dead
 * (FUTEX_OWNER_DIED), made unrecoverable (by glibc, or pd_mutex's flag).
 * One a live thread holds for good costs every broker call PD_POOL_LOCK_MS
 * (bounded, by design) and is left out, as are the mutex's other bytes:
 * glibc owns them (its type, its robust list).
 *
 *   make fuzz-shm FUZZ_SECONDS=60
 *
 * Input: records, until the input ends; the first byte of each, modulo 5,
 * picks:
 *   0 scribble [area][off u16][n][n bytes]  n % 32 + 1 bytes at off in one
 *              of the parts area() names (off modulo its length)
 *   1 mutex    [which][state]
 *   2 agent    [agent][what][arg]           (see agent_does())
 *   3 peer     [what][arg]                  (see peer_does())
 *   4 broker   [what]                       turns, a tick, ten ticks
 * (every other byte is taken modulo what it picks from).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fuzz_broker.h"
#include "fuzz_ctrl.h"
#include "fuzz_input.h"
#include "fuzz_play.h"

#define SEND_SLOTS 8u
#define RECV_SLOTS 8u
#define NAGENTS    2u
#define NREQS      4u  /* requests r0..r3 the peer sends */
#define REQ_CHUNKS 4u
#define MAX_PINS   8u
#define NAREAS     15u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct pin {
	char key[16];
	uint32_t cell;
	uint64_t rec;    /* the hazard the cell holds for it */
};

struct agent {
	struct fzb_agent a;
	pd_slot_ref loan[SEND_SLOTS];
	uint32_t nloans;
	struct pin pin[MAX_PINS];
	uint32_t npins;
	uint32_t declared;           /* bit k: request s<k> declared */
};

struct req {                     /* what the peer was granted for r<k> */
	int32_t slot[REQ_CHUNKS];
	uint32_t gen[REQ_CHUNKS];
	uint32_t n;
	uint64_t seq;
};

struct shm_fx {
	struct fzb f;
	struct agent ag[NAGENTS];
	struct req rq[NREQS];
	uint32_t peer;
	uint64_t seq;
};

PD_NORETURN static void fail(const char *why)
{
	fzb_die(why, -EPROTO);
}

/* ---- scribbles ------------------------------------------------------------------------ */

struct span {
	uint8_t *p;
	size_t len;
};

static struct span span_of(void *p, size_t len)
{
	return (struct span){ p, len };
}

/* The send pool: 0 its header (geometry, condvar, counts, holder,
 * tickets, counters, waiters), 1 its counts and holder alone, 2 its
 * waiters, 3 its free stack, 4 its descriptors. */
static struct span pool_area(const struct pd_pool *p, uint32_t i)
{
	struct pd_pool_shm *h = p->shm;

	switch (i) {
	case 0: return span_of(h, sizeof(*h));
	case 1: return span_of(&h->nfree, offsetof(struct pd_pool_shm, stats) -
					  offsetof(struct pd_pool_shm, nfree));
	case 2: return span_of(h->waiters, sizeof(h->waiters));
	case 3: return span_of(p->free_stack, p->nslots * sizeof(uint32_t));
	default: return span_of(p->desc, p->nslots * sizeof(*p->desc));
	}
}

/* The agents region, for agent a: 0 the table and its slots, 1 its
 * submission ring's header, 2 its tail's line, 3 its head's line, 4 its
 * entries, 5 the completion ring's header, 6 its pin journal. */
static struct span agent_area(struct shm_fx *x, uint32_t i, uint32_t a)
{
	struct pd_shm *shm = &x->f.b->shm;
	struct pd_ring_view *sq = &x->ag[a].a.sq;

	switch (i) {
	case 0: return span_of(shm->agents, sizeof(*shm->agents) +
					    shm->max_agents * sizeof(shm->agents->slot[0]));
	case 1: return span_of(sq->r, sizeof(*sq->r));
	case 2: return span_of(&sq->r->tail, PD_CACHE_LINE);
	case 3: return span_of(&sq->r->head, PD_CACHE_LINE);
	case 4: return span_of(sq->elems, (size_t)sq->size * sq->esize);
	case 5: return span_of(x->ag[a].a.cq.r, sizeof(*sq->r));
	default: return span_of(pd_layout_pins(shm, a),
				pd_layout_pins_count(shm) * sizeof(uint64_t));
	}
}

/* The recv index: 0 its header, 1 its counts alone, 2 its entries. */
static struct span index_area(const struct pd_index *ix, uint32_t i)
{
	switch (i) {
	case 0: return span_of(ix->shm, sizeof(*ix->shm));
	case 1: return span_of(&ix->shm->count, 2 * sizeof(uint32_t));
	default: return span_of(ix->entries, ((size_t)ix->mask + 1) * sizeof(*ix->entries));
	}
}

/* What agents map read-write, in NAREAS parts (which / NAREAS: the agent). */
static struct span area(struct shm_fx *x, uint32_t which)
{
	uint32_t i = which % NAREAS, a = which / NAREAS % NAGENTS;

	if (i < 5)
		return pool_area(x->f.b->shm.send, i);
	if (i < 12)
		return agent_area(x, i - 5, a);
	return index_area(&x->f.b->shm.index, i - 12);
}

/* Bytes of b's mutexes that glibc owns: never scribbled. */
static int is_mutex(struct shm_fx *x, const uint8_t *p)
{
	const uint8_t *a = (const uint8_t *)&x->f.b->shm.send->shm->lock.m;
	const uint8_t *b = (const uint8_t *)&x->f.b->shm.index.shm->lock.m;

	return (p >= a && p < a + sizeof(pthread_mutex_t)) ||
	       (p >= b && p < b + sizeof(pthread_mutex_t));
}

static void scribble(struct shm_fx *x, struct fzi *in)
{
	uint32_t which = fzi_u8(in);
	struct span s = area(x, which);
	uint32_t off = fzi_u16(in), n = fzi_u8(in) % 32 + 1;

	for (uint32_t i = 0; i < n; i++) {
		uint8_t v = fzi_u8(in);

		if (s.len && !is_mutex(x, s.p + (off + i) % s.len))
			s.p[(off + i) % s.len] = v;
	}
}

/* A mutex as an agent may leave it. */
static void mutex_state(struct shm_fx *x, uint32_t which, uint32_t state)
{
	struct pd_mutex *m = which & 1 ? &x->f.b->shm.index.shm->lock :
					 &x->f.b->shm.send->shm->lock;

	switch (state % 4) {
	case 0: /* free */
		m->m.__data.__lock = 0;
		m->m.__data.__owner = 0;
		m->m.__data.__count = 0;
		break;
	case 1: /* its holder died: as the kernel leaves the lock word */
		m->m.__data.__lock = (int)0x40000000u; /* FUTEX_OWNER_DIED */
		m->m.__data.__owner = 0x3ffffffe;
		break;
	case 2: /* unlocked without being made consistent */
		m->m.__data.__lock = 0;
		m->m.__data.__owner = 0x7fffffff; /* PTHREAD_MUTEX_NOTRECOVERABLE */
		break;
	default:
		atomic_store(&m->unrecoverable, (state >> 2) & 1);
	}
}

/* ---- agents ------------------------------------------------------------------------- */

static void attach(struct shm_fx *x, uint32_t k)
{
	struct agent *g = &x->ag[k];

	g->nloans = g->npins = g->declared = 0;
	if (fzb_attach(&x->f, &g->a, PD_ROLE_ALL, k) < 0)
		fail("attach");
}

static void loan(struct shm_fx *x, struct agent *g, uint32_t n)
{
	if (fzb_alive(&g->a) && n <= SEND_SLOTS - g->nloans &&
	    fzp_loan(&x->f, &g->a, n, g->loan + g->nloans) == 0)
		g->nloans += n;
}

/* Request s<k>: declared once, then a PUT of every slot the agent holds. */
static void put(struct shm_fx *x, struct agent *g, uint32_t k)
{
	struct pd_sqe e[1 + SEND_SLOTS];
	char req[8], key[16];

	(void)snprintf(req, sizeof(req), "s%u", k % NREQS);
	if (!(g->declared & (1u << (k % NREQS)))) {
		fzp_put(&e[0], PD_SQ_DECLARE, req, 0, SEND_SLOTS, 0);
		(void)fzp_submit(&x->f, &g->a, e, 1);
		g->declared |= 1u << (k % NREQS);
		return;
	}
	fzp_put(&e[0], PD_SQ_PUT, req, g->nloans, SEND_SLOTS, g->nloans == SEND_SLOTS);
	for (uint32_t i = 0; i < g->nloans; i++) {
		(void)snprintf(key, sizeof(key), "%s.%u", req, i);
		fzp_chunk(&e[1 + i], g->loan[i], key);
	}
	if (g->nloans && fzp_submit(&x->f, &g->a, e, 1 + g->nloans) == 0)
		g->nloans = 0; /* the broker's now */
}

static void req_op(struct shm_fx *x, struct agent *g, uint32_t op, uint32_t k)
{
	struct pd_sqe e;
	char req[8];

	(void)snprintf(req, sizeof(req), "r%u", k % NREQS);
	fzp_req(&e, op, req, 0);
	(void)fzp_submit(&x->f, &g->a, &e, 1);
}

/* Pin chunk arg / 4 of r<arg % 4>, recorded in a journal cell the agent
 * finds empty, as libpdagent does. */
static void pin(struct shm_fx *x, struct agent *g, uint32_t arg)
{
	_Atomic uint64_t *j = pd_layout_pins(&x->f.b->shm, g->a.id - 1);
	uint32_t n = pd_layout_pins_count(&x->f.b->shm), cell = 0;
	struct pd_index_val v;
	struct pin *p;

	if (!j || !fzb_alive(&g->a) || g->npins == MAX_PINS)
		return;
	while (cell < n && atomic_load(&j[cell]))
		cell++;
	if (cell == n)
		return;
	p = &g->pin[g->npins];
	(void)snprintf(p->key, sizeof(p->key), "r%u.%u", arg % NREQS, (arg / NREQS) % REQ_CHUNKS);
	p->cell = cell;
	if (pd_index_pin(&x->f.b->shm.index, p->key, (uint32_t)strlen(p->key), &v,
			 &j[cell]) == 0) {
		p->rec = v.hazard;
		g->npins++;
	}
}

/* Drop every pin, then tell the broker (PD_SQ_PINS_DROPPED). */
static void unpin_all(struct shm_fx *x, struct agent *g)
{
	_Atomic uint64_t *j = pd_layout_pins(&x->f.b->shm, g->a.id - 1);
	struct pd_sqe e = { .op = PD_SQ_PINS_DROPPED };

	for (uint32_t i = 0; j && i < g->npins; i++)
		(void)pd_index_unpin(&j[g->pin[i].cell], g->pin[i].rec);
	g->npins = 0;
	(void)fzp_submit(&x->f, &g->a, &e, 1);
}

/* Agent k: 0 loan, 1 declare or put, 2 the receiver answers, 3 wait for
 * r<arg>, 4 pin, 5 unpin all, 6 release r<arg>, 7 detach and attach again. */
static void agent_does(struct shm_fx *x, uint32_t k, uint32_t what, uint32_t arg)
{
	struct agent *g = &x->ag[k % NAGENTS];

	switch (what % 8) {
	case 0: loan(x, g, arg % 4 + 1); break;
	case 1: put(x, g, arg); break;
	case 2: fzp_answer(&x->f, arg & 1 ? PD_MSG_RESERVE : PD_MSG_ALLOC_REQ,
			   arg & 2 ? -ENOSPC : 0); break;
	case 3: req_op(x, g, PD_SQ_RECV_WAIT, arg); break;
	case 4: pin(x, g, arg); break;
	case 5: unpin_all(x, g); break;
	case 6: req_op(x, g, PD_SQ_RECV_RELEASE, arg); break;
	default:
		fzb_detach(&x->f, &g->a);
		attach(x, k % NAGENTS);
	}
}

/* ---- the peer that sends to this broker ------------------------------------------------ */

/* AllocRequest for n chunks of r<k> (total REQ_CHUNKS), from its next chunk on. */
static void peer_alloc(struct shm_fx *x, uint32_t k, uint32_t n)
{
	struct req *r = &x->rq[k];
	char req[8];

	if (r->n + n > REQ_CHUNKS)
		n = REQ_CHUNKS - r->n;
	(void)snprintf(req, sizeof(req), "r%u", k);
	r->seq = ++x->seq;
	if (n)
		r->n += fzp_alloc(&x->f, x->peer, r->seq, req, r->n, n, REQ_CHUNKS,
				  r->slot + r->n, r->gen + r->n);
}

/* Peer: 0 AllocRequest, 1 PutDone of what it was granted, 2 CancelNotif. */
static void peer_does(struct shm_fx *x, uint32_t what, uint32_t arg)
{
	struct req *r = &x->rq[arg % NREQS];
	char req[8];

	(void)snprintf(req, sizeof(req), "r%u", arg % NREQS);
	switch (what % 3) {
	case 0: peer_alloc(x, arg % NREQS, arg / NREQS % REQ_CHUNKS + 1); break;
	case 1: fzp_put_done(&x->f, x->peer, r->seq, req, r->slot, r->gen, r->n); break;
	default: fzp_cancel(&x->f, x->peer, req);
	}
}

/* ---- the run ---------------------------------------------------------------------------- */

static void broker_does(struct shm_fx *x, uint32_t what)
{
	switch (what % 3) {
	case 0: fzb_turns(&x->f, 2); break;
	case 1: fzb_tick(&x->f); break;
	default:
		for (int i = 0; i < 10; i++) /* the recv pool's periodic check */
			fzb_tick(&x->f);
	}
}

static void check(struct shm_fx *x)
{
	if (pd_rx_check(x->f.b->rx) < 0 || pd_tx_check(x->f.b->tx) < 0)
		fail("an engine's own check");
	if (fzc_refused(x->f.b->ctrl))
		fail("the broker built a message the codec refuses");
}

static void step(struct shm_fx *x, struct fzi *in)
{
	uint32_t op = fzi_u8(in), a, b;

	switch (op % 5) {
	case 0: scribble(x, in); return;
	case 1: a = fzi_u8(in); mutex_state(x, a, fzi_u8(in)); return;
	case 2: a = fzi_u8(in); b = fzi_u8(in); agent_does(x, a, b, fzi_u8(in)); break;
	case 3: a = fzi_u8(in); peer_does(x, a, fzi_u8(in)); break;
	default: broker_does(x, fzi_u8(in));
	}
	check(x);
}

/* One broker for the run: after each input, once it holds nothing, what
 * agents wrote is put back as it was made (fzb_restore()); when it still
 * holds something (a recv slot a scribbled pin count keeps, say), the
 * next input gets a broker built afresh. */
static void ready(struct shm_fx *x)
{
	if (x->f.b && fzb_restore(&x->f) == 0)
		return;
	if (x->f.b)
		fzb_destroy(&x->f);
	fzb_create(&x->f, SEND_SLOTS, RECV_SLOTS);
	fzb_snapshot(&x->f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct shm_fx x;
	struct fzi in = { data, size };

	memset(x.ag, 0, sizeof(x.ag));
	memset(x.rq, 0, sizeof(x.rq));
	x.seq = 0;
	ready(&x);
	for (uint32_t k = 0; k < NAGENTS; k++)
		attach(&x, k);
	x.peer = fzp_sender(&x.f, 0);
	while (fzi_more(&in))
		step(&x, &in);
	fzb_turns(&x.f, 2);
	fzb_tick(&x.f);
	check(&x);
	for (uint32_t k = 0; k < NAGENTS; k++)
		fzb_detach(&x.f, &x.ag[k].a);
	fzb_idle(&x.f);
	check(&x);
	return 0;
}
