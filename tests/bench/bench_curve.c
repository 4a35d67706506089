/* SPDX-License-Identifier: MIT */
/*
 * What CURVE costs: the same 1P1D pair of pdbrokers on this host, first
 * with an unauthenticated control plane, then with --curve-key and
 * --curve-peers (every control message encrypted and authenticated; the
 * data lanes are TCP either way), in one run, printed side by side:
 *
 *   - latency of a 1-chunk request (4 KiB), declare -> PUT_DONE, p50 and
 *     p99: a Reserve, an AllocRequest, its AllocResponse and a PutDone are
 *     in its path, so it shows the per-message cost;
 *   - throughput of 1 MiB chunks, many requests in flight (8 chunks each).
 *
 *   bench_curve [--quick] [--transport LIST]   (default tcp)
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pdkv/agent.h>

#include "pd_bench_fixture.h"
#include "pd_curve_fixture.h"
#include "pd_time.h"
#include "pd_zmq_rtt.h" /* pd_cmp_u64 */

#define MIB    (1u << 20)
#define CHUNKS 8u

struct run {
	struct pd_bench_pair x;
	struct pd_curve k;
	uint32_t requests;
	const char *xport;
	int curve;
	int failed;
};

struct result {
	double p50_us, p99_us, gbs;
};

/* Start D, then P; with curve, each admits the other's key. 0 or -1. */
static int start(struct run *r)
{
	const struct pd_bench_pair_opts o = { .tag = r->curve ? "curve" : "plain",
					      .send_slots = "64", .recv_slots = "256",
					      .slot_size = "1M", .transport = r->xport };
	const char *pargs[24], *dargs[24];
	char text[512];
	uint32_t np, nd;

	if (pd_test_broker_prepare(&r->x.d, r->curve ? "curveD" : "plainD") < 0 ||
	    pd_test_broker_prepare(&r->x.p, r->curve ? "curveP" : "plainP") < 0)
		return -1;
	pd_bench_args(pargs, o.send_slots, "0", &o);
	pd_bench_args(dargs, "0", o.recv_slots, &o);
	for (np = 0; pargs[np]; np++)
		;
	for (nd = 0; dargs[nd]; nd++)
		;
	if (r->curve) {
		if (pd_curve_make(&r->k, 2) < 0)
			return -1;
		(void)snprintf(text, sizeof(text), "%s %s\n", r->x.p.name, r->k.pub[1]);
		if (pd_curve_peers(&r->k, 0, text) < 0)
			return -1;
		(void)snprintf(text, sizeof(text), "%s %s %s\n", r->x.d.name, r->k.pub[0],
			       r->x.d.ctrl);
		if (pd_curve_peers(&r->k, 1, text) < 0)
			return -1;
		dargs[nd++] = "--curve-key", dargs[nd++] = r->k.key[0];
		dargs[nd++] = "--curve-peers", dargs[nd++] = r->k.peers[0];
		pargs[np++] = "--curve-key", pargs[np++] = r->k.key[1];
		pargs[np++] = "--curve-peers", pargs[np++] = r->k.peers[1];
	}
	dargs[nd] = pargs[np] = NULL;
	if (pd_test_broker_restart(&r->x.d, dargs) < 0 || pd_test_broker_restart(&r->x.p, pargs) < 0)
		return -1;
	if (pd_test_agent_attach(&r->x.p, PD_AGENT_SEND, &r->x.pa) < 0 ||
	    pd_test_agent_attach(&r->x.d, PD_AGENT_RECV, &r->x.da) < 0)
		return -1;
	return 0;
}

static void stop(struct run *r)
{
	pd_bench_pair_stop(&r->x);
	pd_curve_clean(&r->k);
}

/* Decode side of the throughput run: each request in order, released. */
static void *decoder(void *arg)
{
	struct run *r = arg;
	char req[32];

	for (uint32_t i = 0; i < r->requests && !r->failed; i++) {
		struct pd_recv_info info;

		(void)snprintf(req, sizeof(req), "t%u", i);
		if (pd_recv_wait(r->x.da, req, 30000, &info) < 0 || info.status ||
		    pd_recv_release(r->x.da, req) < 0)
			r->failed = 1;
	}
	return NULL;
}

static double throughput(struct run *r)
{
	pthread_t th;
	uint64_t t0 = pd_now_ns();

	if (pthread_create(&th, NULL, decoder, r))
		return -1;
	pd_bench_put_all(&r->x, 0, r->requests, CHUNKS, MIB, 0, &r->failed);
	(void)pthread_join(th, NULL);
	if (r->failed)
		return -1;
	return (double)r->requests * CHUNKS * MIB / ((double)(pd_now_ns() - t0) / 1e9) / 1e9;
}

/* n 1-chunk requests one after the other, declare -> PUT_DONE each. */
static int latency(struct run *r, uint32_t n, struct result *res)
{
	uint64_t *ns = calloc(n, sizeof(*ns));
	struct pd_recv_info info;
	struct pd_event ev;
	char req[32];
	int rc = ns ? 0 : -1;

	for (uint32_t i = 0; rc == 0 && i < n; i++) {
		uint64_t t0 = pd_now_ns();

		(void)snprintf(req, sizeof(req), "l%u", i);
		if (pd_bench_put(&r->x, req, 1, 4096, 0) < 0 ||
		    pd_bench_next_end(&r->x, &ev, 10000) < 0 || ev.type != PD_EV_PUT_DONE ||
		    strcmp(ev.req_id, req)) {
			rc = -1;
			break;
		}
		ns[i] = pd_now_ns() - t0;
		if (pd_recv_wait(r->x.da, req, 10000, &info) < 0 ||
		    pd_recv_release(r->x.da, req) < 0)
			rc = -1;
	}
	if (rc == 0) {
		qsort(ns, n, sizeof(*ns), pd_cmp_u64);
		res->p50_us = (double)ns[n / 2] / 1e3;
		res->p99_us = (double)ns[n * 99 / 100] / 1e3;
	}
	free(ns);
	return rc;
}

static int measure(struct run *r, uint32_t nlat, struct result *res)
{
	int rc = start(r);

	if (rc == 0)
		rc = latency(r, nlat, res);
	if (rc == 0 && (res->gbs = throughput(r)) < 0)
		rc = -1;
	if (rc < 0) {
		pd_test_broker_dump_log(&r->x.p);
		pd_test_broker_dump_log(&r->x.d);
	}
	stop(r);
	return rc;
}

static void row(const char *what, double plain, double curve)
{
	printf("%-40s %10.2f %10.2f %7.3fx\n", what, plain, curve, plain > 0 ? curve / plain : 0);
}

int main(int argc, char **argv)
{
	struct run plain = { .xport = "tcp" }, curve = { .xport = "tcp", .curve = 1 };
	struct result a = { 0 }, b = { 0 };
	int quick = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			quick = 1;
		} else if (!strcmp(argv[i], "--transport") && i + 1 < argc) {
			plain.xport = curve.xport = argv[++i];
		} else {
			printf("usage: bench_curve [--quick] [--transport LIST (tcp; shm,tcp)]\n");
			return 2;
		}
	}
	if (!pd_ctrl_curve_available()) {
		printf("bench_curve: this libzmq has no CURVE: skipped\n");
		return 0;
	}
	plain.requests = curve.requests = quick ? 64 : 512;
	if (measure(&plain, quick ? 200 : 2000, &a) < 0 ||
	    measure(&curve, quick ? 200 : 2000, &b) < 0) {
		fprintf(stderr, "bench_curve: a run failed\n");
		return 1;
	}
	printf("bench_curve: 1P1D on one host, --transport %s; %u requests x %u x 1 MiB\n",
	       plain.xport, plain.requests, CHUNKS);
	printf("%-40s %10s %10s %8s\n", "measure", "no CURVE", "CURVE", "ratio");
	row("1-chunk request declare -> PUT_DONE, p50 us", a.p50_us, b.p50_us);
	row("1-chunk request declare -> PUT_DONE, p99 us", a.p99_us, b.p99_us);
	row("throughput, 1 MiB chunks, GB/s", a.gbs, b.gbs);
	return 0;
}
