/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_RX_FIXTURE_H
#define PD_TESTS_UNIT_RX_FIXTURE_H

/*
 * A receiver engine over a real recv pool and recv index (in private
 * memory), with recording callbacks. Static inline helpers only.
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

#include "pd_rx.h"

#define RX_SLOT_SIZE 4096u
#define RX_MAX_LOG   4096u
#define RX_KEYS_MAX  64u

struct rx_reply {
	uint32_t peer;
	uint64_t seq;
	int32_t err;
	uint32_t n, nalready;
	int32_t remote[RX_KEYS_MAX];
	int32_t already[RX_KEYS_MAX];
};

struct rx_fx {
	struct pd_pool pool;
	struct pd_index index;
	void *pool_mem, *index_mem;
	struct pd_rx *rx;
	uint32_t nslots;
	struct rx_reply replies[RX_MAX_LOG];
	uint32_t nreplies;
	uint64_t ready[RX_MAX_LOG];
	uint32_t nready;
	uint64_t failed[RX_MAX_LOG];
	int32_t failed_err[RX_MAX_LOG];
	uint32_t nfailed;
	uint64_t now;
	char keybuf[RX_KEYS_MAX][32];
};

static inline void rxf_reply(void *ctx, uint32_t peer, uint64_t seq, int32_t err,
			     const int32_t *remote, uint32_t n, const int32_t *already,
			     uint32_t nalready)
{
	struct rx_fx *f = ctx;
	struct rx_reply *r = &f->replies[f->nreplies++ % RX_MAX_LOG];

	*r = (struct rx_reply){ .peer = peer, .seq = seq, .err = err, .n = n,
				.nalready = nalready };
	if (n && n <= RX_KEYS_MAX)
		memcpy(r->remote, remote, n * sizeof(*remote));
	if (nalready && nalready <= RX_KEYS_MAX)
		memcpy(r->already, already, nalready * sizeof(*already));
}

static inline void rxf_ready(void *ctx, const struct pd_rx_req_view *v)
{
	struct rx_fx *f = ctx;

	f->ready[f->nready++ % RX_MAX_LOG] = v->tag;
}

static inline void rxf_failed(void *ctx, const struct pd_rx_req_view *v, int32_t err)
{
	struct rx_fx *f = ctx;

	f->failed_err[f->nfailed % RX_MAX_LOG] = err;
	f->failed[f->nfailed++ % RX_MAX_LOG] = v->tag;
}

static const struct pd_rx_ops rxf_ops = {
	.reply = rxf_reply, .ready = rxf_ready, .failed = rxf_failed,
};

#define RXF_ADMIT_NS (30ull * 1000000000ull)
#define RXF_TTL_NS   (120ull * 1000000000ull)
#define RXF_TOMB_NS  (60ull * 1000000000ull)

static inline void *rxf_mem(int64_t len)
{
	void *p = aligned_alloc(64, (size_t)((len + 63) & ~63));

	assert_non_null(p);
	memset(p, 0, (size_t)len);
	return p;
}

/* With per-peer caps (pd_rx_opts: peer_max_requests, peer_max_slots) and
 * preemption after preempt_idle_ns (0: none). */
static inline struct rx_fx *rxf_create_share(uint32_t nslots, uint32_t max_requests,
					     uint32_t peer_max_requests, uint32_t peer_max_slots,
					     uint64_t preempt_idle_ns)
{
	struct rx_fx *f = calloc(1, sizeof(*f));
	int64_t plen = pd_pool_memsize(nslots), ilen = pd_index_memsize(1024);
	struct pd_rx_opts o = { .ops = &rxf_ops, .owner = 7, .max_requests = max_requests,
				.admission_timeout_ns = RXF_ADMIT_NS, .ttl_ns = RXF_TTL_NS,
				.tombstone_ns = RXF_TOMB_NS, .max_held_bytes = 1u << 20,
				.peer_max_requests = peer_max_requests,
				.peer_max_slots = peer_max_slots, .preempt_idle_ns = preempt_idle_ns };

	assert_non_null(f);
	f->nslots = nslots;
	f->pool_mem = rxf_mem(plen);
	f->index_mem = rxf_mem(ilen);
	assert_int_equal(pd_pool_init(f->pool_mem, (size_t)plen, nslots, RX_SLOT_SIZE), 0);
	assert_int_equal(pd_pool_open(&f->pool, f->pool_mem, (size_t)plen, NULL, 0), 0);
	assert_int_equal(pd_index_init(f->index_mem, (size_t)ilen, 1024, 64, 0x5eed), 0);
	assert_int_equal(pd_index_open(&f->index, f->index_mem, (size_t)ilen), 0);
	o.pool = &f->pool;
	o.index = &f->index;
	o.ctx = f;
	assert_int_equal(pd_rx_create(&o, &f->rx), 0);
	f->now = 1000;
	return f;
}

static inline struct rx_fx *rxf_create_caps(uint32_t nslots, uint32_t max_requests,
					    uint32_t peer_max_requests, uint32_t peer_max_slots)
{
	return rxf_create_share(nslots, max_requests, peer_max_requests, peer_max_slots, 0);
}

static inline struct rx_fx *rxf_create(uint32_t nslots, uint32_t max_requests)
{
	return rxf_create_caps(nslots, max_requests, 0, 0);
}

static inline void rxf_destroy(struct rx_fx *f)
{
	pd_rx_destroy(f->rx);
	free(f->pool_mem);
	free(f->index_mem);
	free(f);
}

static inline int rxf_setup10(void **state)
{
	*state = rxf_create(10, 64);
	return 0;
}

static inline int rxf_setup20(void **state)
{
	*state = rxf_create(20, 64);
	return 0;
}

static inline int rxf_teardown(void **state)
{
	rxf_destroy(*state);
	return 0;
}

static inline struct pd_rx_stats rxf_stats(struct rx_fx *f)
{
	struct pd_rx_stats st;

	pd_rx_get_stats(f->rx, &st);
	return st;
}

/* The engine is consistent and, when idle, holds nothing. */
static inline void rxf_check(struct rx_fx *f)
{
	assert_int_equal(pd_rx_check(f->rx), 0);
}

static inline void rxf_assert_empty(struct rx_fx *f)
{
	const struct pd_admit *a = pd_rx_admit(f->rx);

	rxf_check(f);
	assert_int_equal(pd_pool_nfree(&f->pool), f->nslots);
	assert_int_equal(a->free, f->nslots);
	assert_int_equal(a->outstanding, 0);
	assert_int_equal(pd_index_count(&f->index), 0);
}

/* An AllocRequest of n keys "<req>-<rank>-<first+i>". */
struct rxf_batch {
	const char *req;
	const char *keys;   /* key prefix; NULL: the req_id */
	uint32_t peer, rank, world_size, total, first, n, is_last;
	uint64_t seq;
};

static inline int rxf_alloc(struct rx_fx *f, const struct rxf_batch *b)
{
	struct pd_rx_key keys[RX_KEYS_MAX];
	struct pd_rx_alloc a = {
		.peer = b->peer, .seq = b->seq, .req_id = (const uint8_t *)b->req,
		.req_id_len = (uint32_t)strlen(b->req), .nkeys = b->n, .keys = keys,
		.total_chunks = b->total, .world_size = b->world_size ? b->world_size : 1,
		.rank = b->rank, .is_last = b->is_last,
	};

	assert_true(b->n <= RX_KEYS_MAX);
	for (uint32_t i = 0; i < b->n; i++) {
		int len = snprintf(f->keybuf[i], sizeof(f->keybuf[i]), "%s-%u-%u",
				   b->keys ? b->keys : b->req, b->rank, b->first + i);
		keys[i] = (struct pd_rx_key){ .p = (const uint8_t *)f->keybuf[i],
					      .len = (uint32_t)len };
	}
	return pd_rx_alloc(f->rx, &a, f->now);
}

static inline const struct rx_reply *rxf_last(struct rx_fx *f)
{
	assert_true(f->nreplies > 0);
	return &f->replies[(f->nreplies - 1) % RX_MAX_LOG];
}

/* Reply for (peer, seq), the latest one; NULL when none. */
static inline const struct rx_reply *rxf_reply_for(struct rx_fx *f, uint32_t peer, uint64_t seq)
{
	for (uint32_t i = f->nreplies; i-- > 0;) {
		const struct rx_reply *r = &f->replies[i % RX_MAX_LOG];

		if (r->peer == peer && r->seq == seq)
			return r;
	}
	return NULL;
}

/* The reply for (peer, seq), which must exist. */
static inline const struct rx_reply *rxf_got(struct rx_fx *f, uint32_t peer, uint64_t seq)
{
	const struct rx_reply *r = rxf_reply_for(f, peer, seq);

	if (!r) {
		fail_msg("no reply for peer %u seq %llu", peer, (unsigned long long)seq);
		abort(); /* not reached */
	}
	return r;
}

/* PutDone for every remote index of a successful reply (skipping dedups). */
static inline int rxf_put_done(struct rx_fx *f, const char *req, const struct rx_reply *r)
{
	int32_t idx[RX_KEYS_MAX];
	uint32_t n = 0;

	for (uint32_t i = 0; i < r->n; i++) {
		int dedup = 0;

		for (uint32_t k = 0; k < r->nalready; k++)
			dedup |= r->already[k] == (int32_t)i;
		if (!dedup)
			idx[n++] = r->remote[i];
	}
	return pd_rx_put_done(f->rx, r->peer, (const uint8_t *)req, (uint32_t)strlen(req), idx,
			      n, f->now);
}

static inline int rxf_release(struct rx_fx *f, const char *req)
{
	return pd_rx_release(f->rx, (const uint8_t *)req, (uint32_t)strlen(req), 0, 1, f->now);
}

static inline int rxf_cancel(struct rx_fx *f, const char *req)
{
	return pd_rx_cancel(f->rx, (const uint8_t *)req, (uint32_t)strlen(req), f->now);
}

/* Send a batch and write it at once; asserts it was granted. */
static inline void rxf_batch_ok(struct rx_fx *f, const struct rxf_batch *b)
{
	const struct rx_reply *r;

	assert_int_equal(rxf_alloc(f, b), 0);
	r = rxf_got(f, b->peer, b->seq);
	assert_int_equal(r->err, 0);
	assert_int_equal(r->n, b->n);
	assert_int_equal(rxf_put_done(f, b->req, r), 0);
	rxf_check(f);
}

#endif
