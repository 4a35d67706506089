/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_SUPPORT_PD_BENCH_FIXTURE_H
#define PD_TESTS_SUPPORT_PD_BENCH_FIXTURE_H

/*
 * End-to-end benchmarks: a prefill and a decode pdbroker on this host, an
 * agent of this process on each, and requests "t<N>" moved between them.
 * Header only, as pd_test_agent.h.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <pdkv/agent.h>

#include "pd_proc.h"
#include "pd_test_agent.h"

#define PD_BENCH_MAX_CHUNKS 8u   /* per request */
#define PD_BENCH_WAIT_MS    30000u

struct pd_bench_pair {
	struct pd_test_broker p, d;
	struct pd_agent *pa, *da;
};

/* Broker arguments, as text; NULL: not given (the broker's default). */
struct pd_bench_pair_opts {
	const char *tag;              /* broker names: "<tag>P", "<tag>D" */
	const char *send_slots;       /* the prefill broker's (the decode broker has none) */
	const char *recv_slots;       /* the decode broker's (the prefill broker has none) */
	const char *slot_size;
	const char *transport;
	const char *data_threads;
};

/* Both brokers' arguments but the pools; v has room for 16. */
static inline void pd_bench_args(const char **v, const char *send, const char *recv,
				 const struct pd_bench_pair_opts *o)
{
	const char *const flags[][2] = {
		{ "--send-slots", send },        { "--recv-slots", recv },
		{ "--slot-size", o->slot_size }, { "--transport", o->transport },
		{ "--data-threads", o->data_threads }, { "--log-level", "warn" },
	};
	uint32_t n = 0;

	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
		if (flags[i][1]) {
			v[n++] = flags[i][0];
			v[n++] = flags[i][1];
		}
	}
	v[n] = NULL;
}

/* Start D, then P, and attach an agent to each. 0, or -1 (stop it all the same). */
static inline int pd_bench_pair_start(struct pd_bench_pair *x, const struct pd_bench_pair_opts *o)
{
	const char *pargs[16], *dargs[16];
	char ptag[32], dtag[32];
	int prc, drc;

	pd_bench_args(pargs, o->send_slots, "0", o);
	pd_bench_args(dargs, "0", o->recv_slots, o);
	(void)snprintf(ptag, sizeof(ptag), "%sP", o->tag);
	(void)snprintf(dtag, sizeof(dtag), "%sD", o->tag);
	if (pd_test_broker_start(&x->d, dtag, dargs) < 0 ||
	    pd_test_broker_start(&x->p, ptag, pargs) < 0)
		return -1;
	prc = pd_test_agent_attach(&x->p, PD_AGENT_SEND, &x->pa);
	drc = pd_test_agent_attach(&x->d, PD_AGENT_RECV, &x->da);
	return prc < 0 || drc < 0 ? -1 : 0;
}

static inline void pd_bench_pair_stop(struct pd_bench_pair *x)
{
	pd_agent_detach(x->pa);
	pd_agent_detach(x->da);
	(void)pd_test_broker_stop(&x->p);
	(void)pd_test_broker_stop(&x->d);
}

/* Declare request req of n chunks (one rank) to the decode broker. */
static inline int pd_bench_declare(struct pd_bench_pair *x, const char *req, uint32_t n)
{
	struct pd_decl d = { .req_id = req, .endpoint = x->d.ctrl, .total_chunks = n,
			     .world_size = 1 };

	return pd_declare(x->pa, &d);
}

/* Stage declared request req: n chunks (<= PD_BENCH_MAX_CHUNKS) of len
 * bytes in one batch, keys "<req>/<i>", chunk i's first byte first + i,
 * written in place (pd_alloc waits for the admission, then the slots). */
static inline int pd_bench_stage(struct pd_bench_pair *x, const char *req, uint32_t n,
				 uint32_t len, uint8_t first)
{
	pd_slot_ref s[PD_BENCH_MAX_CHUNKS];
	struct pd_chunk c[PD_BENCH_MAX_CHUNKS];
	char keys[PD_BENCH_MAX_CHUNKS][48];
	struct pd_batch b = { .req_id = req, .endpoint = x->d.ctrl, .chunks = c, .n = n,
			      .total_chunks = n, .world_size = 1, .last = 1 };
	int rc = n <= PD_BENCH_MAX_CHUNKS ? pd_alloc(x->pa, req, n, s, PD_BENCH_WAIT_MS) : -EINVAL;

	for (uint32_t i = 0; rc == 0 && i < n; i++) {
		(void)snprintf(keys[i], sizeof(keys[i]), "%s/%u", req, i);
		c[i] = (struct pd_chunk){ .slot = s[i], .len = len,
					  .klen = (uint32_t)strlen(keys[i]), .key = keys[i] };
		((uint8_t *)pd_slot_data(x->pa, s[i]))[0] = (uint8_t)(first + i);
	}
	return rc == 0 ? pd_put(x->pa, &b) : rc;
}

/* One request: declared, then staged at once (pd_bench_stage). */
static inline int pd_bench_put(struct pd_bench_pair *x, const char *req, uint32_t n, uint32_t len,
			       uint8_t first)
{
	int rc = pd_bench_declare(x, req, n);

	return rc < 0 ? rc : pd_bench_stage(x, req, n, len, first);
}

/* The next event that ends a request (admissions are skipped). */
static inline int pd_bench_next_end(struct pd_bench_pair *x, struct pd_event *ev,
				    uint32_t timeout_ms)
{
	int rc;

	while ((rc = pd_next_event(x->pa, ev, timeout_ms)) == 0 && ev->type == PD_EV_ADMITTED)
		;
	return rc;
}

/* Put requests "t<first>" .. "t<first + requests - 1>" (pd_bench_put),
 * taking their PUT_DONE events as they come, then waiting for the rest.
 * *failed (shared with a decode thread) is set on any failure, and stops
 * both. */
static inline void pd_bench_put_all(struct pd_bench_pair *x, uint32_t first, uint32_t requests,
				    uint32_t chunks, uint32_t len, uint8_t byte0, int *failed)
{
	uint32_t events = 0;
	struct pd_event ev;
	char req[32];

	for (uint32_t i = first; i < first + requests && !*failed; i++) {
		(void)snprintf(req, sizeof(req), "t%u", i);
		if (pd_bench_put(x, req, chunks, len, byte0) < 0)
			*failed = 1;
		while (pd_bench_next_end(x, &ev, 0) == 0 && ++events)
			*failed |= ev.type != PD_EV_PUT_DONE;
	}
	while (!*failed && events < requests &&
	       pd_bench_next_end(x, &ev, PD_BENCH_WAIT_MS) == 0) {
		events++;
		*failed |= ev.type != PD_EV_PUT_DONE;
	}
}

#endif
