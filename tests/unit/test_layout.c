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
	assert_int_equal(attach(f), 0);
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
	assert_int_equal(pd_pool_alloc(&f->agent.send, &who, 2, 0, r), 0);
	memset(pd_pool_data(&f->agent.send, r[1]), 0xab, 4096);
	assert_int_equal(((uint8_t *)pd_pool_data(&f->broker.send, r[1]))[4095], 0xab);
	assert_int_equal(pd_pool_nfree(&f->broker.send), 6);
	assert_int_equal(pd_index_insert(&f->broker.index, "key", 3, &v), 0);
	assert_int_equal(pd_index_lookup(&f->agent.index, "key", 3, &v), 0);
	assert_int_equal(v.slot, 2);
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
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_bad_opts_are_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_corrupt_agent_table_is_refused, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_rings_out_of_range, setup, teardown),
		cmocka_unit_test_setup_teardown(test_attacher_shares_pools_index_and_rings,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_send_only_broker_has_no_recv_side, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
