/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_METRICS_HTTP_H
#define PD_BROKER_PD_METRICS_HTTP_H

/*
 * --metrics-listen HOST:PORT: the statistics region (shm/pd_stats.h) in the
 * Prometheus text format (0.0.4) over HTTP, served by the broker's own loop.
 *
 * GET (or HEAD) /metrics answers 200 with the families of `pdctl metrics`
 * (pd_expo.h, through pd_metrics_render()); any other path is 404, any
 * other method on /metrics 405, and a request that is not HTTP/1.x as RFC
 * 9112 writes it gets 400 (or 414, 431, 505) with a line saying why. One
 * request per connection (Connection: close), no request bodies.
 *
 * Bounds: at most PD_METRICS_MAX_CONNS connections; one more evicts the
 * oldest (so connections that say nothing cannot keep a scrape out); the
 * request head is at most PD_METRICS_HEAD_MAX bytes and must be complete
 * PD_METRICS_HEAD_MS after the accept (else 408), the answer taken within
 * PD_METRICS_SEND_MS. Every socket is non-blocking; the loop never waits
 * on a client. The control thread owns everything here.
 */
#include <stddef.h>
#include <stdint.h>

struct pd_loop;
struct pd_shm;
struct pd_metrics;

#define PD_METRICS_MAX_CONNS 64u
#define PD_METRICS_HEAD_MAX  4096u
#define PD_METRICS_HEAD_MS   2000u
#define PD_METRICS_SEND_MS   10000u

/* What the server counted (published as "metrics.<field>"). */
struct pd_metrics_stats {
	uint64_t scrapes;       /* 200 answers */
	uint64_t not_found;     /* 404 answers */
	uint64_t bad_requests;  /* 400, 405, 414, 431, 505 answers */
	uint64_t failed;        /* 500, 503 answers: the statistics could not be copied or
				 * written out */
	uint64_t timeouts;      /* connections past their deadline (408 when nothing was answered) */
	uint64_t evicted;       /* connections closed to make room for a new one */
	uint64_t aborted;       /* connections the client closed or reset before its answer */
	uint64_t accept_errors; /* accept() failures other than "nothing to accept" */
	uint64_t conns;         /* gauge: connections open now */
};

struct pd_metrics_opts {
	struct pd_loop *loop;
	const char *listen;           /* HOST:PORT, the host a numeric address ("*": every
				       * IPv4 one); port 0: any free one */
	const char *broker;           /* the value of every sample's broker label */
	const struct pd_shm *shm;     /* the segment: its state, its statistics region
				       * (copied with pd_stats_snapshot()) */
};

/**
 * Listen at o->listen and serve from o->loop.
 * @param err  on failure, "--metrics-listen ADDR: why" (may be NULL).
 * @return 0; -EINVAL bad address or options; -errno of socket, bind or
 *         listen (-EADDRINUSE, -EADDRNOTAVAIL, ...); -ENOMEM.
 */
int pd_metrics_create(const struct pd_metrics_opts *o, struct pd_metrics **out, char *err,
		      size_t errlen);

/* Close every connection and the listener. NULL-safe. */
void pd_metrics_destroy(struct pd_metrics *m);

/* Deadlines (now: CLOCK_MONOTONIC); call it every tick. NULL-safe. */
void pd_metrics_tick(struct pd_metrics *m, uint64_t now_ns);

/* The counters so far. */
void pd_metrics_get_stats(const struct pd_metrics *m, struct pd_metrics_stats *out);

/* The listener as bound, HOST:PORT (the real port when 0 was asked). */
const char *pd_metrics_addr(const struct pd_metrics *m);

#endif
