/* SPDX-License-Identifier: MIT */
/*
 * End to end: a prefill and a decode pdbroker on loopback (TCP data plane),
 * agents in this process. Throughput of 1 MiB chunks with many requests in
 * flight, and the latency of a 1-chunk request (put -> PUT_DONE), each
 * beside a baseline measured in the same run: iperf3 -l 1M (one stream) and
 * ucx_perftest tcp tag_bw 1 MiB when installed, and a ZeroMQ REQ/REP round
 * trip over loopback TCP (p50 and p99 of each latency beside the round
 * trip's).
 *
 *   bench_e2e [--quick] [--latency] [--transport LIST] [--data-threads N]
 *             [--slots SEND,RECV]
 *     --latency: the latencies only; --transport: tcp (default), shm,tcp
 *     (same-host copies); --data-threads: both brokers' (their default
 *     when not given); --slots: the brokers' 1 MiB slots (default 64,256:
 *     arenas far larger than the last-level cache, where the baselines
 *     send from and receive into one buffer; 8,16 fits them in a 32 MiB
 *     one). PD_TEST_BIN_DIR names another pdbroker to run.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include <pdkv/agent.h>

#include "pd_bench_fixture.h"
#include "pd_proc.h"
#include "pd_time.h"
#include "pd_zmq_rtt.h"

#define MIB        (1u << 20)
#define CHUNKS     8u      /* per request */
#define SEND_SLOTS "64"  /* --slots */
#define RECV_SLOTS "256"

struct run {
	struct pd_bench_pair x;
	uint32_t first;              /* the first request of the pass the decoder takes */
	uint32_t requests;
	const char *xport;           /* --transport given to both brokers */
	const char *threads;         /* --data-threads given to both, or NULL */
	char send_slots[16], recv_slots[16];
	_Atomic uint32_t done;       /* released by the decode side */
	int failed;
};

static int start(struct run *r)
{
	const struct pd_bench_pair_opts o = { .tag = "bench", .send_slots = r->send_slots,
					      .recv_slots = r->recv_slots, .slot_size = "1M",
					      .transport = r->xport, .data_threads = r->threads };

	return pd_bench_pair_start(&r->x, &o);
}

/* Decode side: wait for each request in order, check a byte, release. */
static void *decoder(void *arg)
{
	struct run *r = arg;
	char req[32];

	for (uint32_t i = r->first; i < r->first + r->requests; i++) {
		struct pd_recv_info info;

		(void)snprintf(req, sizeof(req), "t%u", i);
		if (pd_recv_wait(r->x.da, req, 30000, &info) < 0 || info.status ||
		    pd_recv_release(r->x.da, req) < 0) {
			r->failed = 1;
			return NULL;
		}
		r->done++;
	}
	return NULL;
}

/* requests from first on, all in flight the pools allow: GB/s, or -1. */
static double pass(struct run *r, uint32_t first, uint32_t requests)
{
	pthread_t th;
	uint64_t t0 = pd_now_ns();

	r->done = 0;
	r->first = first;
	r->requests = requests;
	if (pthread_create(&th, NULL, decoder, r))
		return -1;
	pd_bench_put_all(&r->x, first, requests, CHUNKS, MIB, 0, &r->failed);
	(void)pthread_join(th, NULL);
	if (r->failed)
		return -1;
	return (double)requests * CHUNKS * MIB / ((double)(pd_now_ns() - t0) / 1e9) / 1e9;
}

/* First one pass over both arenas, not timed: every process's first write
 * to a page of fresh shared memory is slow in a virtual machine (the host
 * maps it then; bench_shmx times that "cold" pass on its own), and what
 * this measures is the transport's steady state, as iperf3's. */
static double throughput(struct run *r, uint32_t requests)
{
	uint32_t slots = (uint32_t)(atoi(r->send_slots) + atoi(r->recv_slots));
	uint32_t warm = (slots + CHUNKS - 1) / CHUNKS;

	if (pass(r, 0, warm) < 0)
		return -1;
	return pass(r, warm, requests);
}

/* One 1-chunk (4 KiB) request, declared first when declare_now, then
 * staged; *ns: from t0 (0: its pd_alloc) to its PUT_DONE. Consumed at the
 * decode side afterwards. 0, or -1 on any failure. */
static int one_request(struct run *r, const char *req, int declare_now, uint64_t t0,
		       uint64_t *ns)
{
	struct pd_recv_info info;
	struct pd_event ev;

	if (declare_now && pd_bench_declare(&r->x, req, 1) < 0)
		return -1;
	t0 = t0 ? t0 : pd_now_ns();
	if (pd_bench_stage(&r->x, req, 1, 4096, 0) < 0 ||
	    pd_bench_next_end(&r->x, &ev, 10000) < 0 || ev.type != PD_EV_PUT_DONE ||
	    strcmp(ev.req_id, req))
		return -1;
	*ns = pd_now_ns() - t0;
	return pd_recv_wait(r->x.da, req, 10000, &info) < 0 ||
	       pd_recv_release(r->x.da, req) < 0 ? -1 : 0;
}

/* Until req's PD_EV_ADMITTED event (the engine computes meanwhile). */
static int admitted(struct run *r, const char *req)
{
	struct pd_event ev;

	if (pd_next_event(r->x.pa, &ev, 10000) < 0 || ev.type != PD_EV_ADMITTED ||
	    strcmp(ev.req_id, req))
		return -1;
	return 0;
}

/* p50 and p99 of a 1-chunk request, in µs: cold, declared -> PUT_DONE
 * (the declaration's round trip in the path); warm, first pd_alloc ->
 * PUT_DONE of a request declared while the engine computed, staged as soon
 * as its admission arrived (the declaration overlapped the prefill). */
struct lat {
	double cold, cold99, warm, warm99;
};

static int latency(struct run *r, uint32_t n, struct lat *out)
{
	uint64_t *lc = calloc(n, sizeof(*lc)), *lw = calloc(n, sizeof(*lw));
	int rc = lc && lw ? 0 : -1;
	char req[32];

	for (uint32_t i = 0; rc == 0 && i < n; i++) {
		(void)snprintf(req, sizeof(req), "c%u", i);
		rc = one_request(r, req, 1, pd_now_ns(), &lc[i]);
		(void)snprintf(req, sizeof(req), "w%u", i);
		if (rc == 0 && (rc = pd_bench_declare(&r->x, req, 1)) == 0 &&
		    (rc = admitted(r, req)) == 0)
			rc = one_request(r, req, 0, 0, &lw[i]);
	}
	if (rc == 0) {
		qsort(lc, n, sizeof(*lc), pd_cmp_u64);
		qsort(lw, n, sizeof(*lw), pd_cmp_u64);
		*out = (struct lat){ .cold = pd_pct_us(lc, n, 50), .cold99 = pd_pct_us(lc, n, 99),
				     .warm = pd_pct_us(lw, n, 50), .warm99 = pd_pct_us(lw, n, 99) };
	}
	free(lc);
	free(lw);
	return rc < 0 ? -1 : 0;
}

/* ---- baselines ------------------------------------------------------------------------ */

/* iperf3 -l 1M, one stream, over loopback: GB/s, or -1 when not installed. */
static double iperf3(int seconds)
{
	char cmd[256], line[512];
	int port = pd_test_free_port();
	double bps = -1;
	FILE *f;

	(void)snprintf(cmd, sizeof(cmd), "iperf3 -s -1 -p %d >/dev/null 2>&1 & sleep 0.5; "
		       "iperf3 -c 127.0.0.1 -p %d -l 1M -t %d -J 2>/dev/null", port, port, seconds);
	f = popen(cmd, "r");
	while (f && fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "\"bits_per_second\":");

		if (p)
			bps = atof(p + strlen("\"bits_per_second\":")); /* the last is the sum */
	}
	if (f)
		(void)pclose(f);
	return bps > 0 ? bps / 8 / 1e9 : -1;
}

/* UCX ucx_perftest tag_bw over tcp on loopback, 1 MiB messages: GB/s, or
 * -1 when ucx_perftest is not installed (Debian: ucx-utils). */
static double ucx_tag_bw(int iters)
{
	char cmd[512], line[512];
	int port = pd_test_free_port();
	double mibs = -1;
	FILE *f;

	(void)snprintf(cmd, sizeof(cmd),
		       "command -v ucx_perftest >/dev/null || exit 0; "
		       "export UCX_TLS=tcp UCX_NET_DEVICES=lo; "
		       "timeout 60 ucx_perftest -p %d >/dev/null 2>&1 & sleep 0.5; "
		       "timeout 60 ucx_perftest 127.0.0.1 -p %d -t tag_bw -s 1048576 -n %d "
		       "-w %d -f 2>/dev/null; wait",
		       port, port, iters, iters / 8 + 4);
	f = popen(cmd, "r");
	while (f && fgets(line, sizeof(line), f)) {
		double v[8];
		unsigned long it;

		/* final line: iters p50 avg overall bw_avg bw_overall(MiB/s) rate_avg rate_overall */
		if (sscanf(line, "%lu %lf %lf %lf %lf %lf %lf %lf", &it, &v[0], &v[1], &v[2],
			   &v[3], &v[4], &v[5], &v[6]) == 8)
			mibs = v[4];
	}
	if (f)
		(void)pclose(f);
	return mibs > 0 ? mibs * 1048576.0 / 1e9 : -1;
}

int main(int argc, char **argv)
{
	struct run r = { .xport = "tcp", .send_slots = SEND_SLOTS, .recv_slots = RECV_SLOTS };
	unsigned ns, nr;
	struct lat l = { -1, -1, -1, -1 };
	double gbs, rtt, rtt99 = -1, ip, ucx;
	int lat, quick = 0, lat_only = 0;
	uint32_t nreq;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			quick = 1;
		} else if (!strcmp(argv[i], "--latency")) {
			lat_only = 1;
		} else if (!strcmp(argv[i], "--transport") && i + 1 < argc) {
			r.xport = argv[++i];
		} else if (!strcmp(argv[i], "--data-threads") && i + 1 < argc) {
			r.threads = argv[++i];
		} else if (!strcmp(argv[i], "--slots") && i + 1 < argc &&
			   sscanf(argv[++i], "%u,%u", &ns, &nr) == 2 && ns >= CHUNKS &&
			   nr >= CHUNKS && ns <= 4096 && nr <= 4096) {
			(void)snprintf(r.send_slots, sizeof(r.send_slots), "%u", ns);
			(void)snprintf(r.recv_slots, sizeof(r.recv_slots), "%u", nr);
		} else {
			printf("usage: bench_e2e [--quick] [--latency] [--transport LIST (tcp; "
			       "shm,tcp)] [--data-threads N] [--slots SEND,RECV (64,256; each "
			       "%u..4096)]\n", CHUNKS);
			return 2;
		}
	}
	nreq = quick ? 64 : 512;
	if (start(&r) < 0) {
		fprintf(stderr, "bench_e2e: cannot start the brokers\n");
		pd_bench_pair_stop(&r.x);
		return 1;
	}
	ip = lat_only ? -1 : iperf3(quick ? 1 : 3);
	ucx = lat_only ? -1 : ucx_tag_bw(quick ? 96 : 512);
	gbs = lat_only ? 0 : throughput(&r, nreq);
	lat = latency(&r, quick ? 200 : 2000, &l);
	rtt = pd_zmq_rtt_p99("127.0.0.1", quick ? 200 : 2000, &rtt99);
	pd_bench_pair_stop(&r.x);
	printf("bench_e2e: 1P1D on one host, --transport %s, --data-threads %s, "
	       "%u requests x %u x 1 MiB after a pass over both arenas, %s send and %s recv "
	       "slots\n", r.xport,
	       r.threads ? r.threads : "(default)", nreq, CHUNKS, r.send_slots,
	       r.recv_slots);
	printf("%-42s %10s %10s %8s\n", "measure", "pdkv", "baseline", "ratio");
	if (lat_only)
		goto latencies;
	printf("%-42s %10.2f %10.2f %7.2fx   (baseline: iperf3 -l 1M, 1 stream%s)\n",
	       "throughput, GB/s", gbs, ip, ip > 0 ? gbs / ip : 0, ip > 0 ? "" : ": not installed");
	printf("%-42s %10.2f %10.2f %7.2fx   (baseline: UCX ucx_perftest tcp tag_bw 1 MiB%s)\n",
	       "throughput, GB/s", gbs, ucx, ucx > 0 ? gbs / ucx : 0,
	       ucx > 0 ? "" : ": not installed");
latencies:
	printf("%-42s %10.1f %10.1f %7.2fx   (baseline: ZeroMQ REQ/REP round trip)\n",
	       "1-chunk request declare -> PUT_DONE, us", l.cold, rtt,
	       rtt > 0 ? l.cold / rtt : 0);
	printf("%-42s %10.1f %10.1f %7.2fx   (baseline: its p99)\n",
	       "  the same, p99, us", l.cold99, rtt99, rtt99 > 0 ? l.cold99 / rtt99 : 0);
	printf("%-42s %10.1f %10.1f %7.2fx   (declared before, staged at its admission)\n",
	       "1-chunk request pd_alloc -> PUT_DONE, us", l.warm, rtt,
	       rtt > 0 ? l.warm / rtt : 0);
	printf("%-42s %10.1f %10.1f %7.2fx   (baseline: its p99)\n",
	       "  the same, p99, us", l.warm99, rtt99, rtt99 > 0 ? l.warm99 / rtt99 : 0);
	return gbs < 0 || lat < 0 ? 1 : 0;
}
