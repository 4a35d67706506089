/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_SUPPORT_PD_ZMQ_RTT_H
#define PD_TESTS_SUPPORT_PD_ZMQ_RTT_H

/* The baseline a request's fixed cost is measured against: a bare ZeroMQ
 * REQ/REP round trip over TCP, in this process (header-only: benches and
 * the RDMA guest programs link no test support objects). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <zmq.h>

#include "pd_time.h"

static inline int pd_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static inline void *pd_zmq_rep_main(void *arg)
{
	void *rep = arg;
	char b[8];

	while (zmq_recv(rep, b, sizeof(b), 0) >= 0 && b[0] != 'q')
		(void)zmq_send(rep, b, 1, 0);
	(void)zmq_send(rep, b, 1, 0);
	return NULL;
}

/* The p-th percentile (0..100) of n sorted samples, in µs: the nearest
 * rank, as pdbench's figures (pd_bench_quantile_us) are. */
static inline double pd_pct_us(const uint64_t *sorted, uint32_t n, uint32_t p)
{
	uint32_t i = (uint32_t)(((uint64_t)n * p + 99) / 100);

	if (n == 0)
		return 0.0;
	i = i ? i - 1 : 0;
	return (double)sorted[i < n ? i : n - 1] / 1e3;
}

/* Median of n round trips to a REP bound on host (numeric IPv4), in µs,
 * and their 99th percentile in *p99 (may be NULL); -1 when it could not
 * be set up. */
static inline double pd_zmq_rtt_p99(const char *host, uint32_t n, double *p99)
{
	void *ctx = zmq_ctx_new(), *rep = zmq_socket(ctx, ZMQ_REP), *req = zmq_socket(ctx, ZMQ_REQ);
	uint64_t *lat = calloc(n, sizeof(*lat));
	char ep[80], b[8];
	size_t len = sizeof(ep);
	pthread_t th;
	double med = -1;

	(void)snprintf(ep, sizeof(ep), "tcp://%s:*", host);
	if (!lat || zmq_bind(rep, ep) || zmq_getsockopt(rep, ZMQ_LAST_ENDPOINT, ep, &len) ||
	    zmq_connect(req, ep) || pthread_create(&th, NULL, pd_zmq_rep_main, rep))
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t t0 = pd_now_ns();

		(void)zmq_send(req, "x", 1, 0);
		(void)zmq_recv(req, b, sizeof(b), 0);
		lat[i] = pd_now_ns() - t0;
	}
	(void)zmq_send(req, "q", 1, 0);
	(void)zmq_recv(req, b, sizeof(b), 0);
	(void)pthread_join(th, NULL);
	qsort(lat, n, sizeof(*lat), pd_cmp_u64);
	med = pd_pct_us(lat, n, 50);
	if (p99)
		*p99 = pd_pct_us(lat, n, 99);
out:
	free(lat);
	(void)zmq_close(req);
	(void)zmq_close(rep);
	(void)zmq_ctx_term(ctx);
	return med;
}

static inline double pd_zmq_rtt(const char *host, uint32_t n)
{
	return pd_zmq_rtt_p99(host, n, NULL);
}

#endif
