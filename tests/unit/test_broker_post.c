/* SPDX-License-Identifier: MIT */
/*
 * The broker's staging slots on the way out. Posting a batch's writes
 * (pd_broker_xport_post) through a recording transport: every transfer
 * carries its staging bytes (the interface's promise, pd_xfer.h), and a
 * staging slot whose descriptor was rewritten in shared memory after the
 * broker took it (an agent may write the send pool) refuses the batch
 * before anything is posted. Freeing them when the batch is done (the
 * sender engine's free_slots): one freed behind the broker's back does not
 * keep the others.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pd_broker_int.h"

#define SLOTS 4u
#define SLOT  4096u

struct rec_x {
	struct pd_xport base;
	uint32_t n;
	struct pd_xfer got[8];
};

static int rec_ready(const struct pd_xport *x, uint32_t peer)
{
	(void)x;
	(void)peer;
	return 1;
}

static int rec_post(struct pd_xport *x, uint32_t peer, const struct pd_xfer *v, uint32_t n)
{
	struct rec_x *r = (struct rec_x *)x;

	(void)peer;
	for (uint32_t i = 0; i < n && r->n < PD_ARRAY_SIZE(r->got); i++)
		r->got[r->n++] = v[i];
	return (int)n;
}

static const struct pd_xport_ops rec_ops = {
	.name = "tcp", .id = PD_XPORT_TCP, .ready = rec_ready, .post = rec_post,
};

struct fx {
	struct pd_broker b;
	struct rec_x x;
	void *pool_mem, *arena;
	pd_slot_ref ref[2];
	struct pd_tx_chunk ch[2];
	int32_t remote[2];
};

static void *zalloc(size_t len)
{
	void *p = aligned_alloc(64, len);

	assert_non_null(p);
	memset(p, 0, len);
	return p;
}

/* Two staging slots the broker holds (QUEUED), a batch of them to peer 1. */
static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	size_t plen = (size_t)pd_pool_memsize(SLOTS), alen = (size_t)SLOTS * SLOT;
	struct pd_pool_who who = { .owner = 3, .pid = 1, .state = PD_SLOT_LOANED };

	assert_non_null(f);
	f->pool_mem = zalloc((plen + 63) & ~(size_t)63);
	f->arena = zalloc(alen);
	assert_int_equal(pd_pool_init(f->pool_mem, plen, SLOTS, SLOT), 0);
	f->b.shm.send = &f->b.shm.send_part[0]; /* one send pool */
	assert_int_equal(pd_pool_open(f->b.shm.send, f->pool_mem, plen, f->arena, alen), 0);
	f->b.shm.has_send = 1;
	f->b.shm.send_parts = 1;
	f->b.px = calloc(MAX_TOKENS, sizeof(*f->b.px));
	assert_non_null(f->b.px);
	f->x.base.ops = &rec_ops;
	f->b.xp[PD_XPORT_TCP] = &f->x.base;
	assert_int_equal(pd_pool_alloc(f->b.shm.send, &who, 2, 0, f->ref), 0);
	assert_int_equal(pd_pool_set_state(f->b.shm.send, f->ref, 2, BROKER_OWNER,
					   PD_SLOT_QUEUED), 0);
	for (uint32_t i = 0; i < 2; i++) {
		f->ch[i] = (struct pd_tx_chunk){ .slot = f->ref[i], .len = 100, .klen = 1 };
		f->remote[i] = (int32_t)i;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	free(f->b.px);
	free(f->arena);
	free(f->pool_mem);
	free(f);
	return 0;
}

static int post(struct fx *f, uint32_t *posted)
{
	struct pd_tx_batch_view v = { .seq = 9, .peer = 1, .n = 2, .chunks = f->ch,
				      .remote = f->remote };

	*posted = 0;
	return pd_broker_xport_post(&f->b, &v, posted);
}

static void test_post_carries_staging(void **state)
{
	struct fx *f = *state;
	uint32_t posted;

	assert_int_equal(post(f, &posted), 0);
	assert_int_equal(posted, 2);
	assert_int_equal(f->x.n, 2);
	for (uint32_t i = 0; i < 2; i++) {
		assert_ptr_equal(f->x.got[i].src,
				 (uint8_t *)f->arena + PD_SLOT_REF_IDX(f->ref[i]) * SLOT);
		assert_int_equal(f->x.got[i].len, 100);
	}
}

/* The second slot's generation rewritten: nothing posted, the batch refused. */
static void test_rewritten_descriptor_refuses_batch(void **state)
{
	struct fx *f = *state;
	uint32_t posted;

	f->b.shm.send->desc[PD_SLOT_REF_IDX(f->ref[1])].gen += 7;
	assert_int_equal(post(f, &posted), -ESTALE);
	assert_int_equal(posted, 0);
	assert_int_equal(f->x.n, 0);
}

/* The same with the descriptor marked FREE. */
static void test_freed_descriptor_refuses_batch(void **state)
{
	struct fx *f = *state;
	uint32_t posted;

	atomic_store(&f->b.shm.send->desc[PD_SLOT_REF_IDX(f->ref[0])].state, PD_SLOT_FREE);
	assert_int_equal(post(f, &posted), -ESTALE);
	assert_int_equal(posted, 0);
	assert_int_equal(f->x.n, 0);
}

/* An agent freed one of the slots it had put: the broker's free of the
 * batch still gives the other back. */
static void test_free_after_one_freed_behind(void **state)
{
	struct fx *f = *state;

	assert_int_equal(pd_pool_free(f->b.shm.send, &f->ref[1], 1), 0);
	pd_broker_tx_ops.free_slots(&f->b, f->ref, 2);
	assert_int_equal(pd_pool_nfree(f->b.shm.send), SLOTS);
}

/* One of them freed and handed out again: that one is left to its new
 * holder, the other goes back. */
static void test_free_after_one_reused(void **state)
{
	struct fx *f = *state;
	struct pd_pool_who who = { .owner = 2, .pid = 1, .state = PD_SLOT_LOANED };
	pd_slot_ref again[SLOTS - 1];
	struct pd_slot_desc d;

	assert_int_equal(pd_pool_free(f->b.shm.send, &f->ref[0], 1), 0);
	assert_int_equal(pd_pool_alloc(f->b.shm.send, &who, SLOTS - 1, 0, again), 0);
	pd_broker_tx_ops.free_slots(&f->b, f->ref, 2);
	assert_int_equal(pd_pool_nfree(f->b.shm.send), 1);
	assert_int_equal(pd_pool_desc_get(f->b.shm.send, PD_SLOT_REF_IDX(f->ref[0]), &d), 0);
	assert_int_equal(d.owner, 2);
	assert_int_equal(d.state, PD_SLOT_LOANED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_post_carries_staging, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rewritten_descriptor_refuses_batch, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_freed_descriptor_refuses_batch, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_free_after_one_freed_behind, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_after_one_reused, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
