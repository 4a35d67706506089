/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_INTEGRATION_IT_FIXTURE_H
#define PD_TESTS_INTEGRATION_IT_FIXTURE_H

/*
 * Real pdbroker processes on loopback, agents in the test process. A
 * prefill broker (send slots only) and a decode broker (recv slots only).
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

#include <pdkv/agent.h>

#include "pd_layout.h"
#include "pd_proc.h"
#include "pd_time.h"

#define IT_SLOT (64u * 1024u)
#define IT_WAIT_MS 10000u

struct it {
	struct pd_test_broker p, d, p2;  /* p2: a second prefill broker (2P1D) */
	struct pd_agent *pa, *da, *pa2;
	char proxy[64];                  /* --proxy given to prefill brokers, or "" */
};

static inline struct pd_agent *it_attach(const struct pd_test_broker *b, uint32_t roles)
{
	struct pd_agent_opts o;
	struct pd_agent *a = NULL;

	pd_agent_opts_init(&o, sizeof(o));
	o.broker = b->name;
	o.rundir = b->rundir;
	o.roles = roles;
	assert_int_equal(pd_agent_attach(&o, &a), 0);
	return a;
}

static inline void it_prefill(struct it *t, struct pd_test_broker *b, uint32_t send_slots)
{
	char s[16];
	const char *args[] = { "--send-slots", s, "--recv-slots", "0", "--slot-size", "64K",
			       "--heartbeat", "200ms", "--log-level", "info",
			       t->proxy[0] ? "--proxy" : NULL, t->proxy, NULL };

	(void)snprintf(s, sizeof(s), "%u", send_slots);
	assert_int_equal(pd_test_broker_start(b, "itP", args), 0);
}

/* Start D (recv_slots) and nprefill P brokers (send_slots), one agent each. */
static inline struct it *it_start_n(uint32_t send_slots, uint32_t recv_slots, uint32_t nprefill,
				    const char *proxy)
{
	struct it *t = calloc(1, sizeof(*t));
	char r[16];
	const char *dargs[] = { "--send-slots", "0", "--recv-slots", r, "--slot-size", "64K",
				"--heartbeat", "200ms", "--log-level", "info", NULL };

	assert_non_null(t);
	(void)snprintf(t->proxy, sizeof(t->proxy), "%s", proxy ? proxy : "");
	(void)snprintf(r, sizeof(r), "%u", recv_slots);
	assert_int_equal(pd_test_broker_start(&t->d, "itD", dargs), 0);
	it_prefill(t, &t->p, send_slots);
	t->pa = it_attach(&t->p, PD_AGENT_SEND);
	t->da = it_attach(&t->d, PD_AGENT_RECV);
	if (nprefill > 1) {
		it_prefill(t, &t->p2, send_slots);
		t->pa2 = it_attach(&t->p2, PD_AGENT_SEND);
	}
	return t;
}

static inline struct it *it_start(uint32_t send_slots, uint32_t recv_slots)
{
	return it_start_n(send_slots, recv_slots, 1, NULL);
}

static inline void it_stop(struct it *t, int dump)
{
	pd_agent_detach(t->pa);
	pd_agent_detach(t->pa2);
	pd_agent_detach(t->da);
	if (dump) {
		pd_test_broker_dump_log(&t->p);
		pd_test_broker_dump_log(&t->d);
	}
	(void)pd_test_broker_stop(&t->p);
	(void)pd_test_broker_stop(&t->p2);
	(void)pd_test_broker_stop(&t->d);
	free(t);
}

static inline uint8_t it_byte(const char *req, uint32_t chunk, uint32_t k)
{
	return (uint8_t)(req[0] * 31u + chunk * 7u + k);
}

static inline uint32_t it_len(uint32_t chunk)
{
	return IT_SLOT - (chunk % 5) * 1000u; /* not all full */
}

static inline void it_key(char *buf, size_t len, const char *req, uint32_t chunk)
{
	(void)snprintf(buf, len, "%s/chunk-%u", req, chunk);
}

/* One batch of n chunks [first, first+n) of request req (total chunks), from agent a. */
static inline int it_put_from(struct it *t, struct pd_agent *a, const char *req, uint32_t first,
			      uint32_t n, uint32_t total)
{
	pd_slot_ref r[64];
	struct pd_chunk c[64];
	char keys[64][48];
	struct pd_batch b = { .req_id = req, .endpoint = t->d.ctrl, .chunks = c, .n = n,
			      .total_chunks = total, .world_size = 1,
			      .last = first + n == total };
	int rc = n ? pd_alloc(a, req, n, r, IT_WAIT_MS) : 0;

	if (rc < 0)
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *d = pd_slot_data(a, r[i]);

		it_key(keys[i], sizeof(keys[i]), req, first + i);
		c[i] = (struct pd_chunk){ .slot = r[i], .len = it_len(first + i),
					  .klen = (uint32_t)strlen(keys[i]), .key = keys[i] };
		for (uint32_t k = 0; k < c[i].len; k++)
			d[k] = it_byte(req, first + i, k);
	}
	return pd_put(a, &b);
}

static inline int it_put(struct it *t, const char *req, uint32_t first, uint32_t n,
			 uint32_t total)
{
	return it_put_from(t, t->pa, req, first, n, total);
}

/* Every chunk of req, byte for byte, at the decode agent. */
static inline void it_verify(struct it *t, const char *req, uint32_t total)
{
	struct pd_recv_info info;

	assert_int_equal(pd_recv_wait(t->da, req, IT_WAIT_MS, &info), 0);
	assert_int_equal(info.status, 0);
	assert_int_equal(info.chunks, total);
	for (uint32_t i = 0; i < total; i++) {
		const uint8_t *d;
		uint32_t len;
		char key[48];

		it_key(key, sizeof(key), req, i);
		assert_int_equal(pd_recv_lookup(t->da, key, (uint32_t)strlen(key),
						(const void **)&d, &len), 0);
		assert_int_equal(len, it_len(i));
		for (uint32_t k = 0; k < len; k++)
			if (d[k] != it_byte(req, i, k))
				fail_msg("%s chunk %u byte %u differs", req, i, k);
	}
}

static inline int32_t it_expect_event_from(struct pd_agent *a, const char *req, uint32_t type)
{
	struct pd_event ev;

	assert_int_equal(pd_next_event(a, &ev, IT_WAIT_MS), 0);
	assert_string_equal(ev.req_id, req);
	assert_int_equal(ev.type, type);
	return ev.status;
}

static inline void it_expect_event(struct it *t, const char *req, uint32_t type)
{
	struct pd_event ev;

	assert_int_equal(pd_next_event(t->pa, &ev, IT_WAIT_MS), 0);
	assert_string_equal(ev.req_id, req);
	assert_int_equal(ev.type, type);
}

/* Wait (bounded) until a broker's pool has want free slots; the count. */
static inline uint32_t it_wait_free(const struct pd_test_broker *b, int recv, uint32_t want);

/* Free slots of a broker's pool, read from its segment (read-only). */
static inline uint32_t it_free_slots(const struct pd_test_broker *b, int recv)
{
	struct pd_segment seg;
	struct pd_shm s;
	uint32_t n;

	assert_int_equal(pd_segment_attach(b->name, PD_SEG_RDONLY, 1000, &seg, NULL, 0), 0);
	assert_int_equal(pd_layout_open(&seg, &s, NULL, 0), 0);
	n = pd_pool_nfree(recv ? &s.recv : &s.send);
	pd_layout_close(&s);
	return n;
}

static inline uint32_t it_wait_free(const struct pd_test_broker *b, int recv, uint32_t want)
{
	uint64_t deadline = pd_deadline_ms(3000);
	uint32_t n;

	while ((n = it_free_slots(b, recv)) != want && pd_now_ns() < deadline) {
		struct timespec nap = { 0, 10 * 1000 * 1000 };

		(void)nanosleep(&nap, NULL);
	}
	return n;
}

#endif
