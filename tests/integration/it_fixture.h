/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_INTEGRATION_IT_FIXTURE_H
#define PD_TESTS_INTEGRATION_IT_FIXTURE_H

/*
 * Real pdbroker processes on loopback, agents in the test process. A
 * prefill broker (send slots only) and a decode broker (recv slots only).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cmocka.h>

#include <pdkv/agent.h>

#include "pd_compiler.h"
#include "pd_json.h"
#include "pd_layout.h"
#include "pd_proc.h"
#include "pd_run.h"
#include "pd_test.h"
#include "pd_test_agent.h"
#include "pd_time.h"

#define IT_SLOT (64u * 1024u)
#define IT_WAIT_MS 10000u

/* How it_start_opts() starts the brokers. Strings are borrowed for as long
 * as the brokers may be restarted (literals). */
struct it_opts {
	uint32_t send_slots, recv_slots;
	uint32_t nprefill;               /* prefill brokers: 1 (also for 0) or 2 */
	const char *proxy;               /* prefill brokers' --proxy; NULL or "": none */
	const char *transport;           /* prefill brokers' --transport; NULL: the default */
	const char *d_transport;         /* the decode broker's; NULL: transport */
	const char *require;             /* prefill brokers' --require; NULL: none */
	const char *heartbeat;           /* every broker's --heartbeat; NULL: 200ms */
	const char *d_admission;         /* the decode broker's --admission-timeout; NULL: its default */
	const char *d_data;              /* the decode broker's --data; NULL: 127.0.0.1:0 */
	const char *const *d_extra;      /* more of the decode broker's flags, NULL-ended */
	const char *const *p_extra;      /* more of the prefill brokers' flags, NULL-ended */
	uint8_t p_pidns, d_pidns;        /* 1: the prefill (decode) broker runs in a pid
					  * namespace of its own (pd_test_broker.pidns) */
};

/* A broker's command line, kept while it may be restarted. */
struct it_args {
	char send[16], recv[16];
	const char *v[34];
};

struct it {
	struct pd_test_broker p, d, p2;  /* p2: a second prefill broker (2P1D) */
	struct pd_agent *pa, *da, *pa2;
	struct it_args dargs;            /* the decode broker's, for it_restart_decode() */
	struct it_args pargs;            /* the prefill brokers', for it_restart_prefill() */
};

static inline struct pd_agent *it_attach(const struct pd_test_broker *b, uint32_t roles)
{
	struct pd_agent *a = NULL;

	assert_int_equal(pd_test_agent_attach(b, roles, &a), 0);
	return a;
}

/* The arguments of a broker with send and recv slots; a prefill broker's
 * also have o's --proxy and --require. */
static inline const char *const *it_args(struct it_args *a, uint32_t send, uint32_t recv,
					 const struct it_opts *o, const char *transport,
					 int prefill)
{
	const char *const flags[][2] = { { "--transport", transport },
					 { "--proxy", prefill ? o->proxy : NULL },
					 { "--require", prefill ? o->require : NULL },
					 { "--admission-timeout", prefill ? NULL : o->d_admission },
					 { "--data", prefill ? NULL : o->d_data } };
	const char *const base[] = { "--send-slots", a->send, "--recv-slots", a->recv,
				     "--slot-size", "64K", "--heartbeat",
				     o->heartbeat ? o->heartbeat : "200ms", "--log-level", "info" };
	uint32_t n = 0;

	(void)snprintf(a->send, sizeof(a->send), "%u", send);
	(void)snprintf(a->recv, sizeof(a->recv), "%u", recv);
	for (size_t i = 0; i < PD_ARRAY_SIZE(base); i++)
		a->v[n++] = base[i];
	for (size_t i = 0; i < PD_ARRAY_SIZE(flags); i++) {
		if (flags[i][1] && flags[i][1][0]) {
			a->v[n++] = flags[i][0];
			a->v[n++] = flags[i][1];
		}
	}
	for (const char *const *x = prefill ? o->p_extra : o->d_extra; x && *x && n < 33; x++)
		a->v[n++] = *x;
	a->v[n] = NULL;
	return a->v;
}

/* Start D (recv_slots) and nprefill P brokers (send_slots), one agent each. */
static inline struct it *it_start_opts(const struct it_opts *o)
{
	struct it *t = calloc(1, sizeof(*t));
	const char *dx = o->d_transport ? o->d_transport : o->transport;

	assert_non_null(t);
	assert_int_equal(pd_test_broker_start_ns(&t->d, "itD",
						 it_args(&t->dargs, 0, o->recv_slots, o, dx, 0),
						 o->d_pidns),
			 0);
	assert_int_equal(pd_test_broker_start_ns(&t->p, "itP",
						 it_args(&t->pargs, o->send_slots, 0, o,
							 o->transport, 1),
						 o->p_pidns),
			 0);
	t->pa = it_attach(&t->p, PD_AGENT_SEND);
	t->da = it_attach(&t->d, PD_AGENT_RECV);
	if (o->nprefill > 1) {
		assert_int_equal(pd_test_broker_start_ns(&t->p2, "itP", t->pargs.v, o->p_pidns), 0);
		t->pa2 = it_attach(&t->p2, PD_AGENT_SEND);
	}
	return t;
}

static inline struct it *it_start_n(uint32_t send_slots, uint32_t recv_slots, uint32_t nprefill,
				    const char *proxy)
{
	return it_start_opts(&(struct it_opts){ .send_slots = send_slots,
						.recv_slots = recv_slots,
						.nprefill = nprefill, .proxy = proxy });
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

/* Declare request req (total chunks, one rank) on agent a, to the decode broker. */
static inline int it_declare_on(struct it *t, struct pd_agent *a, const char *req,
				uint32_t total)
{
	struct pd_decl d = { .req_id = req, .endpoint = t->d.ctrl, .total_chunks = total,
			     .world_size = 1 };

	return pd_declare(a, &d);
}

/* Stage one batch of n chunks [first, first+n) of declared request req
 * (total chunks) from agent a: pd_alloc (waiting at most timeout_ms),
 * fill, pd_put. pd_alloc's error when it loaned nothing. */
static inline int it_stage(struct it *t, struct pd_agent *a, const char *req, uint32_t first,
			   uint32_t n, uint32_t total, uint32_t timeout_ms)
{
	pd_slot_ref r[64];
	struct pd_chunk c[64];
	char keys[64][48];
	struct pd_batch b = { .req_id = req, .endpoint = t->d.ctrl, .chunks = c, .n = n,
			      .total_chunks = total, .world_size = 1,
			      .last = first + n == total };
	int rc = n ? pd_alloc(a, req, n, r, timeout_ms) : 0;

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

/* One batch of n chunks [first, first+n) of request req (total chunks),
 * from agent a; the first batch (first == 0) declares the request, and
 * every batch waits (bounded) for its admission and staging. */
static inline int it_put_from(struct it *t, struct pd_agent *a, const char *req, uint32_t first,
			      uint32_t n, uint32_t total)
{
	int rc = first == 0 ? it_declare_on(t, a, req, total) : 0;

	if (rc < 0 && rc != -EEXIST)
		return rc;
	return it_stage(t, a, req, first, n, total, IT_WAIT_MS);
}

static inline int it_put(struct it *t, const char *req, uint32_t first, uint32_t n,
			 uint32_t total)
{
	return it_put_from(t, t->pa, req, first, n, total);
}

/* Wait (bounded) until req, declared on a, is no longer waiting for
 * admission: its PD_REQ_* state. */
static inline int it_wait_admission(struct pd_agent *a, const char *req)
{
	uint64_t deadline = pd_deadline_ms(IT_WAIT_MS);
	int st;

	while ((st = pd_req_state(a, req, NULL)) == PD_REQ_DECLARED && pd_now_ns() < deadline)
		(void)nanosleep(&(struct timespec){ 0, 5 * 1000 * 1000 }, NULL);
	return st;
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

/* The next event that ends a request (PD_EV_ADMITTED events are skipped). */
static inline int it_next_end(struct pd_agent *a, struct pd_event *ev, uint32_t timeout_ms)
{
	int rc;

	while ((rc = pd_next_event(a, ev, timeout_ms)) == 0 && ev->type == PD_EV_ADMITTED)
		;
	return rc;
}

static inline int32_t it_expect_event_from(struct pd_agent *a, const char *req, uint32_t type)
{
	struct pd_event ev;

	assert_int_equal(it_next_end(a, &ev, IT_WAIT_MS), 0);
	assert_string_equal(ev.req_id, req);
	assert_int_equal(ev.type, type);
	return ev.status;
}

static inline void it_expect_event(struct it *t, const char *req, uint32_t type)
{
	(void)it_expect_event_from(t->pa, req, type);
}

/* Wait (bounded) until a broker's pool has want free slots; the count. */
static inline uint32_t it_wait_free(const struct pd_test_broker *b, int recv, uint32_t want);

/* n requests "<prefix><i>" of chunks chunks, each in one batch: PUT_DONE,
 * every byte verified at the decode agent, released. */
static inline void it_move(struct it *t, const char *prefix, uint32_t n, uint32_t chunks)
{
	char req[32];

	for (uint32_t i = 0; i < n; i++) {
		(void)snprintf(req, sizeof(req), "%s%u", prefix, i);
		assert_int_equal(it_put(t, req, 0, chunks, chunks), 0);
		it_expect_event(t, req, PD_EV_PUT_DONE);
		it_verify(t, req, chunks);
		assert_int_equal(pd_recv_release(t->da, req), 0);
	}
}

/* Free slots of a broker's pool, read from its segment (read-only). */
static inline uint32_t it_free_slots(const struct pd_test_broker *b, int recv)
{
	struct pd_segment seg;
	struct pd_shm s;
	uint32_t n;

	assert_int_equal(pd_segment_attach(b->name, PD_SEG_RDONLY, 1000, &seg, NULL, 0), 0);
	assert_int_equal(pd_layout_open(&seg, &s, NULL, 0), 0);
	n = recv ? pd_pool_nfree(&s.recv) : 0;
	for (uint32_t k = 0; !recv && k < s.send_parts; k++) /* every send pool */
		n += pd_pool_nfree(&s.send_part[k]);
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

/* A counter from a broker's statistics region (published every tick), or
 * UINT64_MAX when it has none of that name. */
static inline uint64_t it_stat(const struct pd_test_broker *b, const char *name)
{
	struct pd_stats *copy = malloc(sizeof(*copy));
	struct pd_segment seg;
	struct pd_shm s;
	uint64_t v = UINT64_MAX;

	assert_non_null(copy);
	assert_int_equal(pd_segment_attach(b->name, PD_SEG_RDONLY, 1000, &seg, NULL, 0), 0);
	assert_int_equal(pd_layout_open(&seg, &s, NULL, 0), 0);
	if (pd_stats_snapshot(s.stats, copy) < 0 || pd_stats_find(copy, name, &v) < 0)
		v = UINT64_MAX;
	pd_layout_close(&s);
	free(copy);
	return v;
}

/* Wait (bounded) until the counter is at least min; its value. */
static inline uint64_t it_wait_stat(const struct pd_test_broker *b, const char *name,
				    uint64_t min)
{
	uint64_t deadline = pd_deadline_ms(3000), v;

	while (((v = it_stat(b, name)) < min || v == UINT64_MAX) && pd_now_ns() < deadline)
		(void)nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	return v;
}

/* The first half of a 4-chunk request from the prefill broker: once its
 * slots are granted it is live at the decode broker, half written. */
static inline void it_half_put(struct it *t, const char *req)
{
	assert_int_equal(it_put(t, req, 0, 2, 4), 0);
	assert_true(it_wait_stat(&t->d, "rx.granted", 2) >= 2);
}

/* Its second half; PUT_DONE, every byte verified at the decode side, released. */
static inline void it_half_finish(struct it *t, const char *req)
{
	assert_int_equal(it_put(t, req, 2, 2, 4), 0);
	it_expect_event(t, req, PD_EV_PUT_DONE);
	it_verify(t, req, 4);
	assert_int_equal(pd_recv_release(t->da, req), 0);
}

/* pd_test_broker_start() waits for the attach socket; the admin socket
 * may come a moment later: wait until it listens (its mode and group are
 * set before that). */
static inline void it_wait_admin(const struct pd_test_broker *b)
{
	uint64_t deadline = pd_deadline_ms(5000);
	char path[200];

	(void)snprintf(path, sizeof(path), "%s/%s.admin", b->rundir, b->name);
	while (pd_test_unix_listening(path) != 1) {
		if (pd_now_ns() >= deadline)
			fail_msg("no admin socket listening at %s", path);
		(void)nanosleep(&(struct timespec){ 0, 2 * 1000 * 1000 }, NULL);
	}
}

/* pdctl --json peers of b: rows[0]'s transport and why. */
static inline void it_peer_xport(const struct pd_test_broker *b, char *xport, char *why,
				 size_t len)
{
	char bin[256];
	struct pd_run_result r = { 0 };

	it_wait_admin(b);
	assert_int_equal(pd_run_bin("pdctl", bin, sizeof(bin)), 0);
	const char *argv[] = { bin, "--name", b->name, "--rundir", b->rundir, "--json", "peers",
			       NULL };
	assert_int_equal(pd_run(argv, 15000, &r), 0);
	if (r.exit_code != 0 || pd_json_count(r.out, "rows") != 1)
		fail_msg("pdctl peers: exit %d\n%s\n%s", r.exit_code, r.out, r.err);
	assert_int_equal(pd_json_get_str(r.out, "rows[0].transport", xport, len), 0);
	assert_int_equal(pd_json_get_str(r.out, "rows[0].why", why, len), 0);
	pd_run_free(&r);
}

/* SIGKILL b and reap it. */
static inline void it_kill(const struct pd_test_broker *b)
{
	assert_int_equal(kill(b->pid, SIGKILL), 0);
	assert_int_equal(pd_test_wait(b->pid, 5000), 128 + SIGKILL);
}

/* The decode broker, killed, started again with its arguments; a new
 * decode agent (the old one detached first, if any). */
static inline void it_restart_decode(struct it *t)
{
	pd_agent_detach(t->da);
	t->da = NULL;
	assert_int_equal(pd_test_broker_restart(&t->d, t->dargs.v), 0);
	t->da = it_attach(&t->d, PD_AGENT_RECV);
}

/* The (first) prefill broker, killed, started again with its arguments;
 * a new prefill agent (the old one detached first, if any). */
static inline void it_restart_prefill(struct it *t)
{
	pd_agent_detach(t->pa);
	t->pa = NULL;
	assert_int_equal(pd_test_broker_restart(&t->p, t->pargs.v), 0);
	t->pa = it_attach(&t->p, PD_AGENT_SEND);
}

/* A request sent before the sender noticed a restart may fail (its
 * session was the dead broker's); once noticed, requests succeed. Puts
 * "<base>.N" (2 chunks) for N = 0, 1, ... until one is done; its name goes
 * to req. N, or -1. */
static inline int it_put_until_done(struct it *t, const char *base, char *req, size_t len)
{
	struct timespec nap = { 0, 300 * 1000 * 1000 };
	struct pd_event ev;

	for (int i = 0; i < 10; i++) {
		(void)snprintf(req, len, "%s.%d", base, i);
		if (it_put(t, req, 0, 2, 2) == 0 && it_next_end(t->pa, &ev, IT_WAIT_MS) == 0 &&
		    ev.type == PD_EV_PUT_DONE)
			return i;
		(void)nanosleep(&nap, NULL);
	}
	return -1;
}

#endif
