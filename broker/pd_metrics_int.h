/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_METRICS_INT_H
#define PD_BROKER_PD_METRICS_INT_H

/*
 * Internal to pd_metrics*.c: the text buffer answers are built in
 * (pd_metrics_buf.c), the request parser (pd_metrics_req.c) and the
 * exposition (pd_metrics_expo.c). The last two are pure functions of their
 * input: unit tests call them directly.
 */
#include <stddef.h>
#include <stdint.h>

#include "pd_compiler.h"

struct pd_stats;

/* A growing text buffer; it stops growing at PD_MBUF_MAX (err is set, and
 * stays set: the text is then incomplete). */
#define PD_MBUF_MAX (4u << 20)

struct pd_mbuf {
	char *p;                   /* NUL-terminated when len > 0 */
	size_t len, cap;
	int err;                   /* -ENOMEM: something was not added */
};

void pd_mbuf_printf(struct pd_mbuf *b, const char *fmt, ...) PD_PRINTF(2, 3);
void pd_mbuf_add(struct pd_mbuf *b, const char *s, size_t n);
void pd_mbuf_free(struct pd_mbuf *b);

/* A request head, as far as the server cares. */
struct pd_http_req {
	uint32_t head_only;        /* HEAD: the answer has no body (whatever its status) */
	uint32_t minor;            /* HTTP/1.<minor> */
	const char *why;           /* an error's reason, for its body (static text) */
};

/**
 * Parse the first len bytes received on a connection (a buffer of max
 * bytes: len == max and no end of head yet is too much).
 * @return 0 the head is not complete and nothing is wrong yet; else the
 *         HTTP status to answer: 200 (GET or HEAD /metrics), 404, 405,
 *         400, 414, 431, 505 (r->why says what was wrong). A bad line
 *         (request line or field) is answered as soon as it is complete;
 *         the path and method once the whole head is.
 */
int pd_metrics_parse(const char *in, size_t len, size_t max, struct pd_http_req *r);

/**
 * The families of pd_expo.h (those of `pdctl metrics`) from a consistent
 * or sanitised copy of the statistics region, as Prometheus text.
 * @param broker  every sample's broker label (escaped here).
 * @param state   pdkv_broker_info's state label ("ready", ...); NULL: none.
 * @param now_ns  CLOCK_REALTIME, to age the copy (pdkv_stats_age_seconds,
 *                the oldest admission wait).
 * @return 0; -ENOMEM (out->err: the text is incomplete).
 */
int pd_metrics_render(const struct pd_stats *s, const char *broker, const char *state,
		      uint64_t now_ns, struct pd_mbuf *out);

#endif
