/* SPDX-License-Identifier: MIT */
/* The broker's segment layout: built by the broker, opened by attachers. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pd_layout.h"
#include "pd_test.h"

struct fx {
	char name[64];
	struct pd_layout_opts o;
	struct pd_shm broker;
	struct pd_shm agent;
	int have_broker, have_agent;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	pd_test_name(f->name, sizeof(f->name), "layout");
	f->o = (struct pd_layout_opts){ .name = f->name, .send_slots = 8, .recv_slots = 16,
					.slot_size = 4096, .max_agents = 4, .sq_entries = 64,
					.cq_entries = 32, .epoch = 7, .index_seed = 42 };
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	if (f->have_agent)
		pd_layout_close(&f->agent);
	if (f->have_broker)
		pd_layout_close(&f->broker);
	(void)pd_segment_unlink(f->name);
	free(f);
	return 0;
}

static void create_ok(struct fx *f)
{
	char err[256] = "";

	assert_int_equal(pd_layout_create(&f->o, &f->broker, err, sizeof(err)), 0);
	f->have_broker = 1;
	pd_segment_publish(&f->broker.seg);
}

static int attach(struct fx *f)
{
	struct pd_segment seg;
	char err[256] = "";
	int rc = pd_segment_attach(f->name, 0, 1000, &seg, err, sizeof(err));

	if (rc < 0)
		return rc;
	rc = pd_layout_open(&seg, &f->agent, err, sizeof(err));
	if (rc < 0)
		pd_segment_destroy(&seg);
	else
		f->have_agent = 1;
	return rc;
}

static void expect_bad_opts(struct fx *f, struct pd_layout_opts o)
{
	char err[256] = "";

	assert_int_equal(pd_layout_create(&o, &f->broker, err, sizeof(err)), -EINVAL);
	assert_true(strlen(err) > 0);
	assert_int_equal(pd_segment_probe(f->name, NULL), -ENOENT); /* nothing left */
}

static void test_bad_opts_are_refused(void **state)
{
	struct fx *f = *state;
	struct pd_layout_opts o = f->o;

	assert_int_equal(pd_layout_create(NULL, &f->broker, NULL, 0), -EINVAL);
	o.send_slots = o.recv_slots = 0;
	expect_bad_opts(f, o);
	o = f->o, o.slot_size = 5000;
	expect_bad_opts(f, o);
	o = f->o, o.max_agents = 0;
	expect_bad_opts(f, o);
	o = f->o, o.max_agents = PD_MAX_AGENTS + 1;
	expect_bad_opts(f, o);
	o = f->o, o.sq_entries = 100;
	expect_bad_opts(f, o);
	o = f->o, o.index_buckets = 1000;
	expect_bad_opts(f, o);
	o = f->o, o.pins_per_agent = PD_PINS_MAX + 1;
	expect_bad_opts(f, o);
	o = f->o, o.send_parts = 3; /* does not divide 8 */
	expect_bad_opts(f, o);
	o = f->o, o.send_slots = 2 * PD_SEND_PARTS_MAX + 2, o.send_parts = PD_SEND_PARTS_MAX + 1;
	expect_bad_opts(f, o);
}

/* --send-pools: pools of their own, slots named from each one's base, each
 * arena on 2 MiB of its own; an attacher opens the same; a reference is
 * of one pool only. */
static void test_send_pools_of_their_own(void **state)
{
	struct fx *f = *state;
	struct pd_pool_who who = { .owner = 1, .pid = 1, .tag = 9, .state = PD_SLOT_LOANED };
	pd_slot_ref r[2];

	f->o.send_parts = 4;
	create_ok(f);
	assert_int_equal(attach(f), 0);
	assert_int_equal(f->agent.send_parts, 4);
	assert_int_equal(f->broker.agents->send_parts, 4);
	assert_int_equal(pd_layout_send_slots(&f->agent), 8);
	for (uint32_t k = 0; k < 4; k++) {
		const struct pd_pool *p = &f->agent.send_part[k];

		assert_int_equal(p->nslots, 2);
		assert_int_equal(p->base, 2 * k);
		assert_int_equal((uint8_t *)p->shm - (uint8_t *)f->agent.send_part[0].shm,
				 (long)(k * f->agent.send_pool_stride));
		assert_int_equal(p->arena - f->agent.send_part[0].arena, (long)k << 21);
		assert_int_equal(f->agent.send_pool_stride % PD_REGION_PAGE, 0);
	}
	assert_int_equal(pd_layout_send_arena_len(&f->agent), 3 * (2u << 20) + 2 * 4096);
	assert_int_equal(pd_pool_alloc(&f->broker.send_part[2], &who, 2, 0, r), 0);
	assert_int_equal(PD_SLOT_REF_IDX(r[0]) / 2, 2);
	assert_ptr_equal(pd_layout_send_pool(&f->agent, r[1]), &f->agent.send_part[2]);
	assert_int_equal(pd_layout_send_part(&f->agent, PD_SLOT_REF(8, 1)), -EINVAL);
	assert_non_null(pd_pool_data(&f->agent.send_part[2], r[0]));
	assert_null(pd_pool_data(&f->agent.send_part[1], r[0])); /* not its slot */
	{ /* what the broker's check of a submitted slot rests on */
		struct pd_slot_desc d;

		assert_int_equal(pd_pool_desc_get(&f->agent.send_part[1], PD_SLOT_REF_IDX(r[0]), &d),
				 -EINVAL);
		assert_int_equal(pd_pool_desc_get(&f->agent.send_part[2], PD_SLOT_REF_IDX(r[0]), &d),
				 0);
	}
	assert_int_equal(pd_pool_free(&f->broker.send_part[1], r, 2), -ESTALE);
	assert_int_equal(pd_pool_nfree(&f->agent.send_part[2]), 0);
	assert_int_equal(pd_pool_free(&f->broker.send_part[2], r, 2), 0);
	assert_int_equal(pd_pool_nfree(&f->agent.send_part[2]), 2);
	assert_int_equal(pd_layout_send_own(&f->agent, 4), -EINVAL);
	assert_int_equal(pd_layout_send_own(&f->agent, 1), 0);
	assert_int_equal(f->agent.send->base, 2);
}

static void test_corrupt_agent_table_is_refused(void **state)
{
	struct fx *f = *state;

	create_ok(f);
	f->broker.agents->magic = 0;
	assert_int_equal(attach(f), -EPROTO);
	f->broker.agents->magic = PD_AGENTS_MAGIC;
	f->broker.agents->rings_off += 64;
	assert_int_equal(attach(f), -EPROTO);
	f->broker.agents->rings_off -= 64;
	f->broker.agents->max_agents = 1000;
	assert_int_equal(attach(f), -EPROTO);
	f->broker.agents->max_agents = f->o.max_agents;
	f->broker.agents->pins_off += 64;
	assert_int_equal(attach(f), -EPROTO);
	f->broker.agents->pins_off -= 64;
	f->broker.agents->pins_per_agent = PD_PINS_MAX + 1;
	assert_int_equal(attach(f), -EPROTO);
	/* More cells than the region holds. */
	f->broker.agents->pins_per_agent = f->broker.pins_per_agent + 64;
	assert_int_equal(attach(f), -EPROTO);
	f->broker.agents->pins_per_agent = f->broker.pins_per_agent;
	assert_int_equal(attach(f), 0);
}

/* A table an older broker wrote (no journal: zero count and offset) opens. */
static void test_table_without_journal_opens(void **state)
{
	struct fx *f = *state;

	create_ok(f);
	f->broker.agents->pins_per_agent = 0;
	f->broker.agents->pins_off = 0;
	assert_int_equal(attach(f), 0);
	assert_int_equal(pd_layout_pins_count(&f->agent), 0);
	assert_null(pd_layout_pins(&f->agent, 0));
}

/* Journal cells: the default count, where the journals sit, and that both
 * sides see the same cells. */
static void expect_pins(struct fx *f, uint32_t recv_slots, uint32_t pins, uint32_t want)
{
	f->o.recv_slots = recv_slots;
	f->o.pins_per_agent = pins;
	create_ok(f);
	assert_int_equal(pd_layout_pins_count(&f->broker), want);
	assert_int_equal(f->broker.agents->pins_per_agent, want);
	pd_layout_close(&f->broker);
	f->have_broker = 0;
}

static void test_pin_journal_geometry(void **state)
{
	struct fx *f = *state;
	uintptr_t base, end, rings_end, first;
	uint32_t n;

	expect_pins(f, 16, 0, PD_PINS_MIN);
	expect_pins(f, 600, 0, 1536); /* 2 x 600, in pages of 512 cells */
	expect_pins(f, 16, 5, PD_PINS_ROUND);
	expect_pins(f, 16, PD_PINS_MAX, PD_PINS_MAX);
	expect_pins(f, 0, 0, 0);
	expect_pins(f, 0, 100, 0);
	f->o.recv_slots = 16;
	f->o.pins_per_agent = 0;
	create_ok(f);
	assert_int_equal(attach(f), 0);
	n = pd_layout_pins_count(&f->agent);
	assert_int_equal(n, PD_PINS_MIN);
	base = (uintptr_t)f->agent.agents;
	end = base + f->agent.agents_len;
	rings_end = base + f->agent.rings_off +
		    f->o.max_agents * (f->agent.sq_bytes + f->agent.cq_bytes);
	first = (uintptr_t)pd_layout_pins(&f->agent, 0);
	for (uint32_t id = 0; id < f->o.max_agents; id++) {
		_Atomic uint64_t *j = pd_layout_pins(&f->agent, id);
		uintptr_t p = (uintptr_t)j;

		assert_non_null(j);
		assert_true(p >= rings_end && p + (size_t)n * 8 <= end);
		assert_int_equal(p % PD_REGION_PAGE, 0); /* pages of its own */
		assert_true(p == first + (size_t)id * n * 8); /* back to back: disjoint */
		assert_int_equal((base + f->agent.rings_off +
				  id * (f->agent.sq_bytes + f->agent.cq_bytes)) % PD_REGION_PAGE, 0);
		for (uint32_t i = 0; i < n; i++)
			assert_int_equal(atomic_load(&j[i]), 0);
	}
	assert_null(pd_layout_pins(&f->agent, f->o.max_agents));
	assert_null(pd_layout_pins(NULL, 0));
	assert_int_equal(pd_layout_pins_count(NULL), 0);
	atomic_store(&pd_layout_pins(&f->agent, 3)[n - 1], 42);
	assert_int_equal(atomic_load(&pd_layout_pins(&f->broker, 3)[n - 1]), 42);
	atomic_store(&pd_layout_pins(&f->agent, 3)[n - 1], 0);
}

static int pin_key(struct pd_shm *s, const char *key, uint32_t id, uint32_t cell)
{
	struct pd_index_val v;

	return pd_index_pin(&s->index, key, (uint32_t)strlen(key), &v,
			    &pd_layout_pins(s, id)[cell]);
}

static int remove_key(struct pd_shm *s, const char *key)
{
	return pd_index_remove(&s->index, key, (uint32_t)strlen(key));
}

/* The broker's removals see the agents' hazards through the layout; it
 * empties a gone agent's journal (garbage included, counted), which frees
 * what only that agent held and keeps what another agent holds. */
static void test_pins_reclaim(void **state)
{
	struct fx *f = *state;
	struct pd_index_val v = { .slot = 1, .state = PD_INDEX_COMMITTED };
	_Atomic uint64_t *j1;
	uint32_t n = 99;

	create_ok(f);
	assert_int_equal(attach(f), 0);
	assert_int_equal(pd_index_insert(&f->broker.index, "a", 1, &v), 0);
	assert_int_equal(pd_index_insert(&f->broker.index, "b", 1, &v), 0);
	f->broker.agents->slot[1].state = PD_AGENT_ATTACHED;
	f->broker.agents->slot[2].state = PD_AGENT_ATTACHED;
	assert_int_equal(pin_key(&f->agent, "a", 1, 0), 0);
	assert_int_equal(pin_key(&f->agent, "b", 1, 7), 0);
	assert_int_equal(pin_key(&f->agent, "a", 2, 0), 0); /* another agent */
	j1 = pd_layout_pins(&f->agent, 1);
	atomic_store(&j1[8], PD_INDEX_HAZARD(f->broker.index.mask + 2, 0)); /* out of range */
	atomic_store(&j1[9], atomic_load(&j1[0]) ^ (1ull << 33));          /* a wrong seq */
	assert_int_equal(remove_key(&f->broker, "a"), -EBUSY);
	assert_int_equal(remove_key(&f->broker, "b"), -EBUSY);
	assert_int_equal(pd_layout_pins_reclaim(&f->broker, 1, &n), 0);
	assert_int_equal(n, 4);
	for (uint32_t i = 0; i < pd_layout_pins_count(&f->agent); i++)
		assert_int_equal(atomic_load(&j1[i]), 0);
	assert_int_equal(remove_key(&f->broker, "b"), 0);
	assert_int_equal(remove_key(&f->broker, "a"), -EBUSY); /* agent 2 holds it */
	assert_int_equal(pd_layout_pins_reclaim(&f->broker, 1, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(pd_layout_pins_reclaim(&f->broker, f->o.max_agents, &n), -EINVAL);
	assert_int_equal(pd_layout_pins_reclaim(NULL, 0, NULL), -EINVAL);
	/* A free agent slot's journal is not scanned. */
	f->broker.agents->slot[2].state = PD_AGENT_FREE;
	assert_int_equal(remove_key(&f->broker, "a"), 0);
}

static void test_rings_out_of_range(void **state)
{
	struct fx *f = *state;
	struct pd_ring_view sq, cq;

	create_ok(f);
	assert_int_equal(pd_layout_rings(&f->broker, f->o.max_agents, &sq, &cq), -EINVAL);
	assert_int_equal(pd_layout_rings(NULL, 0, &sq, &cq), -EINVAL);
	assert_int_equal(pd_layout_rings_reset(&f->broker, f->o.max_agents), -EINVAL);
}

/* What the broker allocates and publishes, an attacher sees, and back. */
static void test_attacher_shares_pools_index_and_rings(void **state)
{
	struct fx *f = *state;
	struct pd_pool_who who = { .owner = 3, .pid = 1, .tag = 9, .state = PD_SLOT_LOANED };
	struct pd_index_val v = { .req = 1, .slot = 2, .gen = 3, .len = 4,
				  .state = PD_INDEX_COMMITTED };
	struct pd_ring_view asq, acq, bsq, bcq;
	struct pd_sqe in = { .op = PD_SQ_CANCEL, .user = 77 }, out;
	pd_slot_ref r[2];

	create_ok(f);
	assert_int_equal(attach(f), 0);
	assert_true(f->agent.has_send && f->agent.has_recv);
	assert_int_equal(pd_pool_alloc(f->agent.send, &who, 2, 0, r), 0);
	memset(pd_pool_data(f->agent.send, r[1]), 0xab, 4096);
	assert_int_equal(((uint8_t *)pd_pool_data(f->broker.send, r[1]))[4095], 0xab);
	assert_int_equal(pd_pool_nfree(f->broker.send), 6);
	assert_int_equal(pd_index_insert(&f->broker.index, "key", 3, &v), 0);
	assert_int_equal(pd_index_pin(&f->agent.index, "key", 3, &v, pd_layout_pins(&f->agent, 1)),
			 0);
	assert_int_equal(v.slot, 2);
	assert_int_equal(pd_index_unpin(pd_layout_pins(&f->agent, 1), v.hazard), 0);
	assert_int_equal(pd_layout_rings(&f->agent, 1, &asq, &acq), 0);
	assert_int_equal(pd_layout_rings(&f->broker, 1, &bsq, &bcq), 0);
	assert_int_equal(pd_ring_enqueue_bulk_sp(&asq, &in, 1), 1);
	assert_int_equal(pd_ring_dequeue_bulk_sc(&bsq, &out, 1), 1);
	assert_int_equal(out.user, 77);
	assert_int_equal(pd_ring_count(&acq), 0);
}

static void test_send_only_broker_has_no_recv_side(void **state)
{
	struct fx *f = *state;

	f->o.recv_slots = 0;
	create_ok(f);
	assert_int_equal(attach(f), 0);
	assert_true(f->agent.has_send);
	assert_false(f->agent.has_recv);
	assert_null(pd_segment_region(&f->agent.seg, PD_REGION_RECV_INDEX, NULL));
	assert_int_equal(pd_layout_pins_count(&f->agent), 0);
	assert_null(pd_layout_pins(&f->agent, 0));
	assert_int_equal(pd_layout_pins_reclaim(&f->broker, 0, NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_bad_opts_are_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_agent_table_is_refused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_rings_out_of_range, setup, teardown),
		cmocka_unit_test_setup_teardown(test_send_pools_of_their_own, setup, teardown),
		cmocka_unit_test_setup_teardown(test_attacher_shares_pools_index_and_rings,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_send_only_broker_has_no_recv_side, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_table_without_journal_opens, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_pin_journal_geometry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pins_reclaim, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
