/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_RX_MODEL_H
#define PD_TESTS_UNIT_RX_MODEL_H

/*
 * The model that test_rx_random.c keeps of the receiver engine: every
 * request (what it sent, what each reply granted, what it wrote, whether
 * it waits, when it last moved), every batch by seq, who holds each slot
 * granted and not written yet. The engine's callbacks check themselves
 * against it; check() runs after every event. Failures are recorded, not
 * asserted (the engine may be mid-call): the first one is reported by the
 * test with its seed and event. Static helpers for one translation unit.
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
#include "pd_rx.h"

#define MAXREQ   128u
#define MAXRANK  3u
#define MAXPOS   8u              /* chunks per rank */
#define MAXCH    (MAXRANK * MAXPOS)
#define MAXB     12u             /* keys in one batch, violations included */
#define MAXSEQ   2048u
#define MAXSLOTS 32u
#define NPEERS   4u
#define NSHARED  12u
#define NPINS    8u
#define NBUCKETS 1024u
#define MS       1000000ull
#define SEC      1000000000ull
#define SHARED   0x8000u         /* key code: shared key k, else rank << 8 | position */

/* Model request states. */
#define M_NEW      0u /* nothing sent yet */
#define M_LIVE     1u /* the engine has it: waiting or admitted */
#define M_READY    2u
#define M_ENDED    3u /* failed or released */
#define M_REJECTED 4u /* its first batch was refused: the engine never had it */

/* Batch kinds. */
#define K_VALID     0u
#define K_VIOLATION 1u /* must fail its request */
#define K_MALFORMED 2u /* -EINVAL, changes nothing */
#define K_LATE      3u /* to a tombstone: -ECANCELED */
#define K_FOREIGN   4u /* a peer not part of the request: -EPERM, changes nothing */

struct mch {
	uint16_t code;
	uint8_t pending; /* granted, PutDone not sent yet */
	uint8_t dedup;
	uint32_t peer;
	int32_t slot;
};

struct mreq {
	char id[12];           /* also the prefix of its private keys */
	uint32_t idlen;        /* 0: anonymous */
	uint32_t ws, total, need;
	uint32_t peer[MAXRANK], sent[MAXRANK], last[MAXRANK], ranks;
	uint16_t code[MAXRANK][MAXPOS];
	uint32_t st, created, waiting, violated, released, nready, nfailed, tomb;
	uint32_t busy_ok;      /* a held batch may meet a zombie key: -EBUSY */
	uint32_t nout;         /* its batches not answered yet */
	uint32_t peers;        /* peers the engine knows it by (peer failure) */
	uint32_t shared;       /* shared keys it used */
	uint32_t nch, npend, ndedup;
	int32_t err;           /* why it failed */
	int32_t exp, may;      /* this event: it must / may fail with */
	uint32_t failed_now;
	uint64_t tag, since, wait_order, last_ns, end_ns;
	uint64_t vstart;       /* its fair-queueing tag */
	struct mch ch[MAXCH];
};

struct mbatch {
	uint32_t peer, req, nkeys, kind, answered;
	int32_t err;
	uint16_t code[MAXB];
};

struct send {
	uint32_t rank, ws, total, last, peer, n, kind, empty;
	uint16_t code[MAXB];
};

struct world {
	struct pd_pool pool;
	struct pd_index index;
	void *pool_mem, *index_mem;
	size_t pool_len, index_len;
	struct pd_rx *rx;
	uint32_t seed, step, nslots, max_requests, trace, bad, told;
	const char *file;        /* of the first failed check */
	uint64_t rng, now, adm_ns, ttl_ns, tomb_ns, next_tag, worder, timeouts;
	uint64_t vtime, finish[NPEERS]; /* fair admission: tags as pd_admit.h defines */
	const char *what;
	char msg[512];
	uint32_t nm, nevans, npins;
	uint64_t nseq, evans[256];     /* seqs refused in this event */
	uint8_t tag2m[MAXREQ + 2];    /* request index + 1 by tag */
	uint8_t slot_owner[MAXSLOTS]; /* request index + 1 of a granted, unwritten slot */
	char pins[NPINS][24];
	_Atomic uint64_t cells[NPINS]; /* the decode agent's journal: cell i holds pin i */
	struct mreq m[MAXREQ];
	struct mbatch b[MAXSEQ];
	struct pd_rx_stats sum;
};

static struct world *W;

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

#define EXPECT(c, ...)                             \
	do {                                       \
		if (!(c))                          \
			bad(__FILE__, __LINE__, __VA_ARGS__); \
	} while (0)
#define TRACE(...)                                 \
	do {                                       \
		if (W->trace)                      \
			fprintf(stderr, __VA_ARGS__); \
	} while (0)

static uint32_t rnd(uint32_t n)
{
	uint64_t z = (W->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (uint32_t)((z ^ (z >> 31)) % n);
}

static uint32_t mi(const struct mreq *m)
{
	return (uint32_t)(m - W->m);
}

static uint32_t key_str(const struct mreq *m, uint16_t code, char *buf)
{
	int n = code & SHARED ? snprintf(buf, 24, "s%u", code & 0xffu)
			      : snprintf(buf, 24, "%s.%u.%u", m->id, code >> 8, code & 0xffu);

	return (uint32_t)n;
}

static int lookup(const struct mreq *m, uint16_t code, struct pd_index_val *v)
{
	char k[24];
	uint32_t len = key_str(m, code, k);

	return pd_index_lookup(&W->index, k, len, v);
}

static struct mreq *by_tag(uint64_t tag)
{
	return tag < MAXREQ + 2 && W->tag2m[tag] ? &W->m[W->tag2m[tag] - 1] : NULL;
}

static int is_live(const struct mreq *m)
{
	return m->created && (m->st == M_LIVE || m->st == M_READY);
}

static int view_ok(const struct mreq *m, const struct pd_rx_req_view *v)
{
	return v->req_id_len == m->idlen && memcmp(v->req_id, m->id, m->idlen) == 0 &&
	       v->need == m->need && v->committed <= v->need;
}

/* Every chunk the request holds is written: its own and those it pinned. */
static int all_written(const struct mreq *m)
{
	struct pd_index_val v;

	for (uint32_t i = 0; i < m->nch; i++)
		if (m->ch[i].pending || lookup(m, m->ch[i].code, &v) < 0 ||
		    v.slot != (uint32_t)m->ch[i].slot || v.state != PD_INDEX_COMMITTED)
			return 0;
	return 1;
}

static void end_req(struct mreq *m)
{
	m->st = M_ENDED;
	m->end_ns = W->now;
	m->tomb = m->idlen != 0;
	m->waiting = 0;
	for (uint32_t i = 0; i < m->nch; i++) {
		if (m->ch[i].pending)
			W->slot_owner[m->ch[i].slot] = 0;
		m->ch[i].pending = 0;
	}
	m->npend = 0;
}

/* ---- callbacks ------------------------------------------------------------------ */

/* o comes before m in admission order: by tag, then by arrival. */
static int ahead(const struct mreq *o, const struct mreq *m)
{
	return o->vstart < m->vstart || (o->vstart == m->vstart && o->wait_order < m->wait_order);
}

static void admitted(struct mreq *m)
{
	for (uint32_t i = 0; i < W->nm; i++) {
		const struct mreq *o = &W->m[i];

		EXPECT(!(o->st == M_LIVE && o->waiting && ahead(o, m)),
		       "%s admitted ahead of %s, which is before it in fair order", m->id, o->id);
	}
	if (m->vstart > W->vtime)
		W->vtime = m->vstart;
	m->waiting = 0;
}

static void granted(struct mreq *m, const struct mbatch *b, const int32_t *remote, uint32_t n,
		    const int32_t *already, uint32_t nal)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < n && m->nch < MAXCH; i++) {
		struct mch *c = &m->ch[m->nch++];
		struct pd_index_val v = { 0 };
		int dedup = k < nal && already[k] == (int32_t)i;

		k += (uint32_t)dedup;
		*c = (struct mch){ .code = b->code[i], .slot = remote[i], .peer = b->peer,
				   .dedup = (uint8_t)dedup, .pending = (uint8_t)!dedup };
		if (remote[i] < 0 || remote[i] >= (int32_t)W->nslots) {
			EXPECT(0, "%s granted slot %d of %u", m->id, remote[i], W->nslots);
			return;
		}
		EXPECT(lookup(m, c->code, &v) == 0 && v.slot == (uint32_t)c->slot,
		       "%s: key %u of its batch not in the index at its slot %d", m->id, i,
		       c->slot);
		if (dedup) {
			EXPECT(c->code & SHARED, "%s: a private key deduplicated", m->id);
			m->ndedup++;
			continue;
		}
		EXPECT(v.req == m->tag && v.state == PD_INDEX_PENDING,
		       "%s: fresh key %u not pending under its tag", m->id, i);
		EXPECT(W->slot_owner[c->slot] == 0, "slot %d granted to %s, unwritten by %s",
		       c->slot, m->id, W->m[W->slot_owner[c->slot] - 1].id);
		W->slot_owner[c->slot] = (uint8_t)(mi(m) + 1);
		m->npend++;
	}
	EXPECT(k == nal, "%s: already[] not ascending positions of the batch", m->id);
}

static void cb_reply(void *ctx, uint32_t peer, uint64_t seq, int32_t err, const int32_t *remote,
		     uint32_t n, const int32_t *already, uint32_t nal)
{
	struct mbatch *b = &W->b[seq < MAXSEQ ? seq : 0];
	struct mreq *m = &W->m[b->req];

	(void)ctx;
	if (seq == 0 || seq > W->nseq || b->peer != peer || b->answered) {
		EXPECT(0, "reply for peer %u seq %llu: unknown, or answered twice", peer,
		       (unsigned long long)seq);
		return;
	}
	b->answered = 1;
	b->err = err;
	m->nout--;
	TRACE("    reply seq %llu (%s) err %d n %u already %u\n", (unsigned long long)seq,
	      m->id, err, n, nal);
	if (err) {
		if (W->nevans < 256)
			W->evans[W->nevans++] = seq;
		return;
	}
	if (!m->created || b->kind != K_VALID) {
		EXPECT(!m->created && n == 0, "%s: batch seq %llu of kind %u granted", m->id,
		       (unsigned long long)seq, b->kind);
		return;
	}
	EXPECT(m->st == M_LIVE || m->st == M_READY, "%s granted in state %u", m->id, m->st);
	EXPECT(n == b->nkeys && nal <= n, "%s: reply of %u for %u keys", m->id, n, b->nkeys);
	if (m->waiting)
		admitted(m);
	m->last_ns = W->now;
	m->peers |= 1u << peer;
	granted(m, b, remote, n < b->nkeys ? n : b->nkeys, already, nal);
}

static void cb_ready(void *ctx, const struct pd_rx_req_view *v)
{
	struct mreq *m = by_tag(v->tag);

	(void)ctx;
	if (!m || !view_ok(m, v)) {
		EXPECT(0, "READY for tag %llu: no such request", (unsigned long long)v->tag);
		return;
	}
	TRACE("    ready %s\n", m->id);
	EXPECT(m->nready == 0 && m->st == M_LIVE && !m->waiting, "%s READY twice or in state %u",
	       m->id, m->st);
	EXPECT(m->nch == m->need && v->committed == v->need && all_written(m),
	       "%s READY early: %u of %u chunks granted, %u unwritten, engine says %u committed",
	       m->id, m->nch, m->need, m->npend, v->committed);
	m->nready++;
	m->st = M_READY;
	m->last_ns = W->now;
}

static void cb_failed(void *ctx, const struct pd_rx_req_view *v, int32_t err)
{
	struct mreq *m = by_tag(v->tag);

	(void)ctx;
	if (!m || !view_ok(m, v)) {
		EXPECT(0, "failed for tag %llu: no such request", (unsigned long long)v->tag);
		return;
	}
	TRACE("    failed %s err %d\n", m->id, err);
	EXPECT(m->nfailed == 0 && !m->released && m->st != M_ENDED,
	       "%s failed (%d) twice or after its release", m->id, err);
	m->nfailed++;
	m->failed_now = 1;
	m->err = err;
	/* Admitted, then its held batches failed it (a zombie key, a broken
	 * protocol): it was admitted in fair order all the same. */
	if (m->waiting && v->admitted)
		admitted(m);
	end_req(m);
}

static const struct pd_rx_ops rxm_ops = {
	.reply = cb_reply, .ready = cb_ready, .failed = cb_failed,
};

/* ---- the model's view -------------------------------------------------------------- */

/* Requests the engine keeps: live ones and tombstones. */
static uint32_t nexist(void)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < W->nm; i++)
		n += W->m[i].created && (W->m[i].st == M_LIVE || W->m[i].st == M_READY ||
					 (W->m[i].st == M_ENDED && W->m[i].tomb));
	return n;
}

/* A shared key of the batch whose index entry no live request holds: an
 * old copy decode agents still read (a zombie), refused with -EBUSY. */
static int zombie_in(const struct send *s)
{
	for (uint32_t i = 0; i < s->n; i++) {
		struct pd_index_val v;
		uint32_t k = s->code[i] & 0xffu, kept = 0;

		if (!(s->code[i] & SHARED) || lookup(W->m, s->code[i], &v) < 0)
			continue;
		for (uint32_t j = 0; j < W->nm && !kept; j++) {
			const struct mreq *o = &W->m[j];

			for (uint32_t c = 0; (o->shared >> k & 1) && is_live(o) && c < o->nch; c++)
				kept |= o->ch[c].code == s->code[i] &&
					o->ch[c].slot == (int32_t)v.slot;
		}
		if (!kept)
			return 1;
	}
	return 0;
}

static int unfinished(const struct mreq *m)
{
	for (uint32_t r = 0; r < m->ws; r++)
		if (m->sent[r] < m->total || !m->last[r])
			return 1;
	return 0;
}

typedef int pred_fn(const struct mreq *m);

static struct mreq *pick(pred_fn *ok)
{
	uint32_t start = W->nm ? rnd(W->nm) : 0;

	for (uint32_t i = 0; i < W->nm; i++) {
		struct mreq *m = &W->m[(start + i) % W->nm];

		if (ok(m))
			return m;
	}
	return NULL;
}

static int can_send(const struct mreq *m)
{
	return is_live(m) && m->idlen && !m->violated && unfinished(m);
}

static int has_pend(const struct mreq *m)
{
	return m->npend > 0;
}

static int named_live(const struct mreq *m)
{
	return m->idlen && is_live(m) && !m->violated;
}

static int named_any(const struct mreq *m)
{
	return m->idlen && m->st != M_NEW;
}

static int is_ready(const struct mreq *m)
{
	return m->idlen && m->st == M_READY;
}

static int is_tomb(const struct mreq *m)
{
	return m->st == M_ENDED && m->tomb;
}

static int not_new(const struct mreq *m)
{
	return m->st != M_NEW;
}

static int has_written(const struct mreq *m)
{
	return m->nch > m->npend;
}

/* ---- checks after every event ----------------------------------------------------- */

static void check_replies(void)
{
	for (uint32_t i = 0; i < W->nevans; i++) {
		const struct mbatch *b = &W->b[W->evans[i]];
		const struct mreq *m = &W->m[b->req];

		if (b->kind == K_MALFORMED || b->kind == K_LATE || b->kind == K_FOREIGN ||
		    !m->created)
			continue;
		EXPECT(m->st == M_ENDED, "%s: seq %llu refused (%d) but the request lives on",
		       m->id, (unsigned long long)W->evans[i], b->err);
		EXPECT(b->kind != K_VALID || m->violated || b->err == m->err,
		       "%s: seq %llu refused with %d, the request failed with %d", m->id,
		       (unsigned long long)W->evans[i], b->err, m->err);
	}
	W->nevans = 0;
}

static void check_req(struct mreq *m)
{
	if (m->failed_now)
		EXPECT(m->violated || m->err == m->exp || m->err == m->may ||
			       (m->err == -EPIPE && m->ndedup) || (m->err == -EBUSY && m->busy_ok),
		       "%s failed with %d; expected %d", m->id, m->err, m->exp);
	else
		EXPECT(m->exp == 0, "%s did not fail (expected %d)", m->id, m->exp);
	m->failed_now = 0;
	m->exp = m->may = 0;
	if (m->st == M_ENDED || (m->created && !m->waiting))
		EXPECT(m->nout == 0, "%s (state %u) has %u batches unanswered", m->id, m->st,
		       m->nout);
	if (m->st == M_LIVE && !m->waiting && m->nch == m->need && !m->npend && !m->nout)
		EXPECT(!all_written(m), "%s: every chunk written, not READY", m->id);
}

static void check(void)
{
	const struct pd_admit *a = pd_rx_admit(W->rx);
	uint32_t nfree = pd_pool_nfree(&W->pool), nlive = 0, nwait = 0, npend = 0;
	const struct mreq *head = NULL;
	struct pd_rx_stats st;

	EXPECT(pd_rx_check(W->rx) == 0, "pd_rx_check() failed");
	EXPECT(a->free >= a->outstanding && a->free <= a->capacity && a->capacity == W->nslots,
	       "admission: free %u, outstanding %llu, capacity %u", a->free,
	       (unsigned long long)a->outstanding, a->capacity);
	EXPECT(nfree == a->free, "pool has %u free slots, admission counts %u", nfree, a->free);
	EXPECT(W->vtime == a->vtime, "admission virtual time %llu, expected %llu",
	       (unsigned long long)a->vtime, (unsigned long long)W->vtime);
	check_replies();
	for (uint32_t i = 0; i < W->nm; i++) {
		struct mreq *m = &W->m[i];

		check_req(m);
		nlive += is_live(m);
		npend += m->npend;
		if (m->st == M_LIVE && m->waiting) {
			nwait++;
			if (!head || ahead(m, head))
				head = m;
		}
	}
	EXPECT(npend <= W->nslots - nfree, "%u slots granted unwritten, %u in use", npend,
	       W->nslots - nfree);
	EXPECT(!head || head->need > a->free - a->outstanding,
	       "%s waits first for %u slots, %llu are unreserved", head ? head->id : "",
	       head ? head->need : 0, (unsigned long long)(a->free - a->outstanding));
	pd_rx_get_stats(W->rx, &st);
	EXPECT(st.live_requests == nlive && st.waiting_requests == nwait && a->nwaiting == nwait,
	       "gauges: %llu live, %llu waiting; expected %u, %u",
	       (unsigned long long)st.live_requests, (unsigned long long)st.waiting_requests, nlive,
	       nwait);
}

#endif
