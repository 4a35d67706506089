/* SPDX-License-Identifier: MIT */
/*
 * --metrics-listen's pure parts: the request-head parser (every refusal,
 * every prefix of a request left waiting, what is served, HEAD never given
 * a body), the bounded text buffer, and the exposition of a statistics
 * region: well formed line by line (pd_prom.h), names sanitised and never
 * twice, "# TYPE" as the region says, labels escaped, histograms
 * cumulative, peers' rows.
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

#include "pd_metrics_http.h"
#include "pd_metrics_int.h"
#include "pd_prom.h"
#include "pd_stats.h"

#define MAX PD_METRICS_HEAD_MAX

struct head_case {
	const char *in;
	int status;
};

static int parse(const char *in, size_t len, struct pd_http_req *r)
{
	return pd_metrics_parse(in, len, MAX, r);
}

static void check_cases(const struct head_case *c, size_t n)
{
	struct pd_http_req r;

	for (size_t i = 0; i < n; i++) {
		int got = parse(c[i].in, strlen(c[i].in), &r);

		if (got != c[i].status)
			fail_msg("'%s': %d, expected %d", c[i].in, got, c[i].status);
		if (got >= 400 && (!r.why || !r.why[0]))
			fail_msg("'%s': %d without a reason", c[i].in, got);
	}
}

static void test_refused(void **state)
{
	static const struct head_case c[] = {
		/* the request line: answered as soon as it is complete */
		{ "GARBAGE\r\n", 400 },
		{ "GET /metrics\r\n", 400 },                 /* HTTP/0.9 */
		{ "GET\r\n\r\n", 400 },
		{ " GET /metrics HTTP/1.1\r\n", 400 },
		{ "GET  /metrics HTTP/1.1\r\n", 400 },
		{ "GET /metrics  HTTP/1.1\r\n", 400 },
		{ "G(T /metrics HTTP/1.1\r\n", 400 },        /* not a token */
		{ "GETGETGETGETGETGET /metrics HTTP/1.1\r\n", 400 }, /* method too long */
		{ "GET /me\x01trics HTTP/1.1\r\n", 400 },
		{ "GET /m\xc3\xa9trics HTTP/1.1\r\n", 400 },  /* not visible ASCII */
		{ "GET /metrics HTTP/1.1x\r\n", 400 },
		{ "GET /metrics http/1.1\r\n", 400 },
		{ "GET /metrics HTTP/2.0\r\n", 505 },
		{ "GET /metrics HTTP/0.9\r\n", 505 },
		{ "\x16\x03\x01\x02\x01\x01\xfc\x03\x03\n", 400 }, /* a TLS hello */
		/* the fields: as soon as the bad line is complete */
		{ "GET /metrics HTTP/1.1\r\nHost x\r\n", 400 },
		{ "GET /metrics HTTP/1.1\r\n: x\r\n", 400 },
		{ "GET /metrics HTTP/1.1\r\nHo st: x\r\n", 400 },
		{ "GET /metrics HTTP/1.1\r\nHost: x\r\n folded\r\n", 400 },
		{ "GET /metrics HTTP/1.1\r\nX: a\x01" "b\r\n", 400 },
		{ "GET /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello", 400 },
		{ "GET /metrics HTTP/1.1\r\ncontent-length: 00\r\n", 400 },
		{ "GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n", 400 },
		/* routes: once the head is complete */
		{ "GET metrics HTTP/1.1\r\n\r\n", 400 },
		{ "GET * HTTP/1.1\r\n\r\n", 400 },
		{ "GET / HTTP/1.1\r\n\r\n", 404 },
		{ "GET /metricsx HTTP/1.1\r\n\r\n", 404 },
		{ "GET /metrics/ HTTP/1.1\r\n\r\n", 404 },
		{ "GET /Metrics HTTP/1.1\r\n\r\n", 404 },
		{ "POST / HTTP/1.1\r\n\r\n", 404 },
		{ "POST /metrics HTTP/1.1\r\n\r\n", 405 },
		{ "DELETE /metrics?x HTTP/1.0\r\n\r\n", 405 },
		{ "get /metrics HTTP/1.1\r\n\r\n", 405 },     /* methods are case-sensitive */
	};

	(void)state;
	check_cases(c, PD_ARRAY_SIZE(c));
}

static void test_refused_nul_and_size(void **state)
{
	static const char nul[] = "GET /metrics HTTP/1.1\r\nX: a\0b\r\n\r\n";
	char *big = malloc(MAX);
	struct pd_http_req r;
	int n;

	(void)state;
	assert_non_null(big);
	assert_int_equal(parse(nul, sizeof(nul) - 1, &r), 400);
	assert_int_equal(parse("\0", 1, &r), 400);
	/* no end of line within MAX bytes: 414; of the head: 431 */
	memset(big, 'a', MAX);
	assert_int_equal(parse(big, MAX, &r), 414);
	assert_int_equal(parse(big, MAX - 1, &r), 0);
	n = snprintf(big, MAX, "GET /metrics HTTP/1.1\r\nX: ");
	memset(big + n, 'b', MAX - (size_t)n);
	assert_int_equal(parse(big, MAX, &r), 431);
	assert_int_equal(parse(big, MAX - 1, &r), 0);
	free(big);
}

/* Every proper prefix of a request waits for more (0); the whole is answered. */
static void test_incomplete(void **state)
{
	static const struct head_case whole[] = {
		{ "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n", 200 },
		{ "HEAD /metrics HTTP/1.0\n\n", 200 },
		{ "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 404 },  /* 404 once the head is whole */
		{ "PUT /metrics HTTP/1.1\r\n\r\n", 405 },
	};
	struct pd_http_req r;

	(void)state;
	for (size_t i = 0; i < PD_ARRAY_SIZE(whole); i++) {
		size_t n = strlen(whole[i].in);

		for (size_t k = 0; k < n; k++)
			if (parse(whole[i].in, k, &r) != 0)
				fail_msg("'%.*s' (%zu of %zu bytes) answered before its head is whole",
					 (int)k, whole[i].in, k, n);
		assert_int_equal(parse(whole[i].in, n, &r), whole[i].status);
	}
}

static void test_served(void **state)
{
	static const struct head_case c[] = {
		{ "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 200 },
		{ "GET /metrics HTTP/1.0\r\n\r\n", 200 },
		{ "GET /metrics HTTP/1.1\nHost: x\n\n", 200 },   /* bare LF */
		{ "GET /metrics?name[]=up HTTP/1.1\r\n\r\n", 200 },
		{ "GET http://node:9100/metrics HTTP/1.1\r\n\r\n", 200 },
		{ "GET /metrics HTTP/1.1\r\nContent-Length: 0\r\nAccept: */*\r\n\r\n", 200 },
		{ "GET /metrics HTTP/1.1\r\nX-Empty:\r\nX-Tab: a\tb \r\n\r\n", 200 },
		{ "GET /metrics HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n", 200 }, /* the rest ignored */
	};
	struct pd_http_req r;

	(void)state;
	check_cases(c, PD_ARRAY_SIZE(c));
	assert_int_equal(parse("HEAD /metrics HTTP/1.1\r\n\r\n", 26, &r), 200);
	assert_int_equal(r.head_only, 1);
	assert_int_equal(r.minor, 1);
	assert_int_equal(parse("GET /metrics HTTP/1.0\r\n\r\n", 25, &r), 200);
	assert_int_equal(r.head_only, 0);
	assert_int_equal(r.minor, 0);
}

/* HEAD gets no body whatever the answer: the parser says so for errors too. */
static void test_head_errors(void **state)
{
	static const struct head_case c[] = {
		{ "HEAD / HTTP/1.1\r\n\r\n", 404 },
		{ "HEAD /metrics HTTP/2.0\r\n", 505 },
		{ "HEAD /m\x01 HTTP/1.1\r\n", 400 },
		{ "HEAD /metrics HTTP/1.1\r\nContent-Length: 1\r\n", 400 },
	};
	struct pd_http_req r;

	(void)state;
	for (size_t i = 0; i < PD_ARRAY_SIZE(c); i++) {
		assert_int_equal(parse(c[i].in, strlen(c[i].in), &r), c[i].status);
		assert_int_equal(r.head_only, 1);
	}
	assert_int_equal(parse("GET / HTTP/1.1\r\n\r\n", 18, &r), 404);
	assert_int_equal(r.head_only, 0);
}

/* ---- the buffer ---------------------------------------------------------------------- */

static void test_mbuf_bounded(void **state)
{
	struct pd_mbuf b = { 0 };
	char chunk[65536];

	(void)state;
	pd_mbuf_printf(&b, "%s=%d", "x", 42);
	assert_int_equal(b.err, 0);
	assert_string_equal(b.p, "x=42");
	memset(chunk, 'c', sizeof(chunk));
	while (!b.err && b.len < 2 * PD_MBUF_MAX)
		pd_mbuf_add(&b, chunk, sizeof(chunk));
	assert_int_equal(b.err, -ENOMEM);
	assert_true(b.len <= PD_MBUF_MAX);
	pd_mbuf_printf(&b, "more"); /* stays failed */
	assert_int_equal(b.err, -ENOMEM);
	pd_mbuf_free(&b);
	assert_null(b.p);
}

/* ---- the exposition ------------------------------------------------------------------ */

static struct pd_stats *region(void)
{
	struct pd_stats *s = calloc(1, sizeof(*s));
	struct pd_stat_peer *p;
	uint32_t n = 0;

	assert_non_null(s);
	pd_stats_init(s);
	pd_stats_write_begin(s);
	pd_stats_set(s, n++, "rx.ready", PD_STAT_KIND_COUNTER, 5);
	pd_stats_set(s, n++, "rx.live_requests", PD_STAT_KIND_GAUGE, 2);
	pd_stats_set(s, n++, "agents", PD_STAT_KIND_GAUGE, 3);
	pd_stats_set(s, n++, "pool.recv.in_use", PD_STAT_KIND_GAUGE, 6);
	pd_stats_set(s, n++, "a.b", PD_STAT_KIND_COUNTER, 1);
	pd_stats_set(s, n++, "a_b", PD_STAT_KIND_COUNTER, 2); /* the same name: dropped */
	pd_stats_set(s, n++, "9-x", PD_STAT_KIND_COUNTER, 7);
	pd_stats_set(s, n++, "rx.x-y:Z", PD_STAT_KIND_GAUGE, 8);
	s->info.recv_slots = 8;
	s->info.recv_used_hwm = 7;
	s->info.reserved = 4;
	s->info.waiting = 1;
	s->info.oldest_wait_ns = 1000;
	s->info.now_mono_ns = 1000 + 1500000000ull;
	s->info.start_ns = 1500000000ull;
	s->info.pid = 42;
	s->publish_ns = 2000000000ull;
	s->npeers = 1;
	p = &s->peer[0];
	(void)snprintf(p->name, sizeof(p->name), "pre\"fill\\0\n\xff");
	(void)snprintf(p->ctrl, sizeof(p->ctrl), "tcp://127.0.0.1:1");
	p->state = PD_PEER_UP;
	p->lanes = 2;
	p->bytes_rx = 4096;
	p->chunks_rx = 4;
	(void)snprintf(s->hist[PD_HIST_ADMIT_WAIT].name, PD_STATS_NAME_MAX, "admit_wait");
	pd_stats_hist_add(&s->hist[PD_HIST_ADMIT_WAIT], 3000);
	pd_stats_hist_add(&s->hist[PD_HIST_ADMIT_WAIT], 3000000);
	s->nhist = 1;
	pd_stats_write_end(s);
	return s;
}

static void expect_has(const char *text, const char *piece)
{
	if (!strstr(text, piece))
		fail_msg("'%s' not in:\n%s", piece, text);
}

static size_t occurrences(const char *text, const char *piece)
{
	size_t n = 0;

	for (const char *p = text; (p = strstr(p, piece)) != NULL; p++)
		n++;
	return n;
}

static void test_render(void **state)
{
	struct pd_stats *s = region();
	struct pd_prom *prom = calloc(1, sizeof(*prom));
	struct pd_mbuf b = { 0 };

	(void)state;
	assert_non_null(prom);
	assert_int_equal(pd_metrics_render(s, "dec\"ode0", "ready", 2500000000ull, &b), 0);
	/* line by line: HELP, TYPE, samples of that family, broker label, a number */
	pd_prom_check(prom, b.p, "dec\"ode0");
	assert_string_equal(pd_prom_type(prom, "pdkv_rx_ready"), "counter");
	assert_string_equal(pd_prom_type(prom, "pdkv_rx_live_requests"), "gauge");
	assert_string_equal(pd_prom_type(prom, "pdkv_peer_bytes"), "counter");
	assert_string_equal(pd_prom_type(prom, "pdkv_peer_up"), "gauge");
	assert_string_equal(pd_prom_type(prom, "pdkv_admit_wait_seconds"), "histogram");
	assert_string_equal(pd_prom_type(prom, "pdkv_rx_x_y:Z"), "gauge"); /* ':' is allowed */
	assert_string_equal(pd_prom_type(prom, "pdkv_9_x"), "counter");
	assert_null(pd_prom_type(prom, "pdkv_9-x"));
	expect_has(b.p, "pdkv_broker_info{broker=\"dec\\\"ode0\",pid=\"42\",epoch=\"0\","
			"state=\"ready\"} 1\n");
	expect_has(b.p, "# HELP pdkv_rx_ready Broker counter rx.ready.\n"
			"# TYPE pdkv_rx_ready counter\npdkv_rx_ready{broker=\"dec\\\"ode0\"} 5\n");
	expect_has(b.p, "# TYPE pdkv_rx_live_requests gauge\n"
			"pdkv_rx_live_requests{broker=\"dec\\\"ode0\"} 2\n");
	assert_int_equal(occurrences(b.p, "# TYPE pdkv_a_b counter\n"), 1);
	expect_has(b.p, "pdkv_a_b{broker=\"dec\\\"ode0\"} 1\n");
	expect_has(b.p, "pdkv_9_x{");                       /* '-' sanitised */
	expect_has(b.p, "pdkv_agents_attached{broker=\"dec\\\"ode0\"} 3\n");
	expect_has(b.p, "pdkv_pool_slots{broker=\"dec\\\"ode0\",pool=\"recv\",state=\"free\"} 2\n");
	expect_has(b.p, "pdkv_pool_slots{broker=\"dec\\\"ode0\",pool=\"recv\",state=\"used\"} 6\n");
	expect_has(b.p, "pdkv_pool_high_water_slots{broker=\"dec\\\"ode0\",pool=\"recv\"} 7\n");
	assert_null(strstr(b.p, "pool=\"send\""));          /* no send pool */
	expect_has(b.p, "pdkv_admission_reserved_slots{broker=\"dec\\\"ode0\"} 4\n");
	/* waited 1.5 s when published, published 0.5 s ago */
	expect_has(b.p, "pdkv_admission_oldest_wait_seconds{broker=\"dec\\\"ode0\"} 2\n");
	expect_has(b.p, "pdkv_stats_age_seconds{broker=\"dec\\\"ode0\"} 0.5\n");
	expect_has(b.p, "pdkv_broker_start_time_seconds{broker=\"dec\\\"ode0\"} 1.5\n");
	/* the peer's name: quote, backslash and newline escaped, a non-ASCII byte as '?' */
	expect_has(b.p, "# TYPE pdkv_peer_bytes counter\n");
	expect_has(b.p, "pdkv_peer_bytes{broker=\"dec\\\"ode0\",peer=\"pre\\\"fill\\\\0\\n?\","
			"ctrl=\"tcp://127.0.0.1:1\",dir=\"rx\"} 4096\n");
	expect_has(b.p, "pdkv_peer_up{broker=\"dec\\\"ode0\",peer=\"pre\\\"fill\\\\0\\n?\","
			"ctrl=\"tcp://127.0.0.1:1\"} 1\n");
	expect_has(b.p, "pdkv_peer_lanes{");
	/* histogram: 3 us in le 4 us, 3 ms in le 4.096 ms, cumulative */
	expect_has(b.p, "# TYPE pdkv_admit_wait_seconds histogram\n");
	expect_has(b.p, "pdkv_admit_wait_seconds_bucket{broker=\"dec\\\"ode0\",le=\"0.000002\"} 0\n");
	expect_has(b.p, "pdkv_admit_wait_seconds_bucket{broker=\"dec\\\"ode0\",le=\"0.000004\"} 1\n");
	expect_has(b.p, "pdkv_admit_wait_seconds_bucket{broker=\"dec\\\"ode0\",le=\"0.004096\"} 2\n");
	expect_has(b.p, "pdkv_admit_wait_seconds_bucket{broker=\"dec\\\"ode0\",le=\"+Inf\"} 2\n");
	expect_has(b.p, "pdkv_admit_wait_seconds_sum{broker=\"dec\\\"ode0\"} 0.003003\n");
	expect_has(b.p, "pdkv_admit_wait_seconds_count{broker=\"dec\\\"ode0\"} 2\n");
	assert_int_equal(b.p[b.len - 1], '\n');
	for (size_t i = 0; i < b.len; i++) /* ASCII only: valid UTF-8 whatever the peers said */
		if ((unsigned char)b.p[i] >= 0x80 || ((unsigned char)b.p[i] < 0x20 && b.p[i] != '\n'))
			fail_msg("byte 0x%02x at %zu", (unsigned char)b.p[i], i);
	/* no state known: no state label */
	b.len = 0;
	assert_int_equal(pd_metrics_render(s, "d", NULL, 2500000000ull, &b), 0);
	expect_has(b.p, "pdkv_broker_info{broker=\"d\",pid=\"42\",epoch=\"0\"} 1\n");
	pd_mbuf_free(&b);
	free(prom);
	free(s);
}

/* A full region: every value, every peer, every histogram, names at their longest. */
static void test_render_full(void **state)
{
	struct pd_stats *s = calloc(1, sizeof(*s));
	struct pd_prom *prom = calloc(1, sizeof(*prom));
	struct pd_mbuf b = { 0 };
	char name[PD_STATS_NAME_MAX + 1];

	(void)state;
	assert_non_null(s);
	assert_non_null(prom);
	pd_stats_init(s);
	for (uint32_t i = 0; i < PD_STATS_MAX_VALUES; i++) {
		memset(name, 'x', sizeof(name) - 1); /* the longest name */
		name[sizeof(name) - 1] = '\0';
		memcpy(name, "v000.", 5);
		name[1] = (char)('0' + i / 100);
		name[2] = (char)('0' + i / 10 % 10);
		name[3] = (char)('0' + i % 10);
		pd_stats_set(s, i, name, PD_STAT_KIND_COUNTER, UINT64_MAX);
	}
	s->npeers = PD_STATS_MAX_PEERS;
	for (uint32_t i = 0; i < PD_STATS_MAX_PEERS; i++) {
		memset(s->peer[i].name, '"', sizeof(s->peer[i].name) - 1);
		memset(s->peer[i].ctrl, '\\', sizeof(s->peer[i].ctrl) - 1);
	}
	s->nhist = PD_STATS_MAX_HIST;
	for (uint32_t i = 0; i < PD_STATS_MAX_HIST; i++)
		memset(s->hist[i].name, 'h', PD_STATS_NAME_MAX);
	pd_stats_sanitize(s);
	assert_int_equal(pd_metrics_render(s, "b", "ready", 0, &b), 0);
	pd_prom_check(prom, b.p, "b");
	assert_int_equal(occurrences(b.p, "# TYPE pdkv_v"), PD_STATS_MAX_VALUES);
	assert_int_equal(occurrences(b.p, "pdkv_peer_bytes{"), 2 * PD_STATS_MAX_PEERS);
	expect_has(b.p, "18446744073709551615\n");
	assert_true(b.len < PD_MBUF_MAX);
	pd_mbuf_free(&b);
	free(prom);
	free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_refused_nul_and_size),
		cmocka_unit_test(test_incomplete),
		cmocka_unit_test(test_served),
		cmocka_unit_test(test_head_errors),
		cmocka_unit_test(test_mbuf_bounded),
		cmocka_unit_test(test_render),
		cmocka_unit_test(test_render_full),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
