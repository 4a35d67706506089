/* SPDX-License-Identifier: MIT */
/* pdbench: command line. Every mistake is a usage error (exit 2) naming the flag. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "pdb.h"

#define MAX_PUT_BATCH 2047u /* a PUT of n chunks takes n + 1 entries of a 2048-entry ring */

static void usage(FILE *f)
{
	(void)fprintf(f,
"Usage: pdbench --local [options]\n"
"       pdbench --prefill-name A[,B..] --decode-name C[,D..] --decode-ctrl EP[,..] [options]\n"
"       pdbench --local --sweep [--sweep-chunks LIST] [--sweep-batch LIST] [--sweep-conc LIST]\n"
"               [options]\n"
"\n"
"Load generator and verifier for pdkv. Drives --requests prefill->decode transfers,\n"
"--concurrency at a time; every byte of every chunk is checked at the decode side.\n"
"Each request goes to one prefill and one decode broker (round-robin); each of the\n"
"--tp prefill ranks declares it (pd_declare) and, once the receiver admitted it,\n"
"sends its chunks in batches of --batch; each decode rank checks the chunks of its\n"
"own rank, then all ranks release the request.\n"
"\n"
"Brokers:\n"
"  --local               start pdbroker processes (private rundir under /tmp, loopback)\n"
"  --prefill N           prefill brokers with --local (default 1)\n"
"  --decode N            decode brokers with --local (default 1)\n"
"  --transport LIST      data transports of the brokers (default tcp)\n"
"  --recv-slots N        receive slots of each decode broker (default 64)\n"
"  --send-slots N        send slots of each prefill broker (default 128)\n"
"  --send-pools N        send pools of each prefill broker, each rank loaning from its own\n"
"                        when N >= --tp (pdbroker --send-pools; default 1: one they share)\n"
"  --slot-size SIZE      slot size, K/M/G suffixes, a multiple of 4K (default 256K);\n"
"                        without --local: the chunk size (default: the brokers' slot size)\n"
"  --proxy ENDPOINT      passed to the prefill brokers (--local)\n"
"  --broker-bin PATH     pdbroker to run (default: beside pdbench)\n"
"  --prefill-host IP     --local: address the prefill brokers bind (default 127.0.0.1)\n"
"  --decode-host IP      --local: address the decode brokers bind (default 127.0.0.1;\n"
"                        RDMA needs two addresses of real or rxe devices)\n"
"  --keep-logs           keep the rundir with the broker logs and print its path\n"
"  --prefill-name LIST   without --local: running prefill brokers, comma-separated\n"
"  --decode-name LIST    without --local: running decode brokers\n"
"  --decode-ctrl LIST    without --local: their control endpoints (tcp://H:P), in order\n"
"  --rundir DIR          without --local: the brokers' rundir (default: theirs)\n"
"\n"
"Load:\n"
"  --tp N                agent processes (TP ranks) per broker, 1..64 (default 1)\n"
"  --requests R          requests to run, 1..1000000 (default 200)\n"
"  --warmup W            W more requests first (default 0), as the others but not in\n"
"                        the figures: the clock starts once they have all ended, so\n"
"                        the first touch of every slot's pages (slow, in a VM above\n"
"                        all) is not timed. They are verified and count in the\n"
"                        outcome (ok, corrupted...) all the same\n"
"  --concurrency C       requests in flight, 1..256 (default 8)\n"
"  --chunks K            chunks per rank per request, 1..65536 (default 16)\n"
"  --chunks-min A --chunks-max B\n"
"                        chunks per request uniform in [A,B] (from the seed)\n"
"  --batch N             chunks per pd_put, 1..2047 (default 4; the last may be short)\n"
"  --partial             the last chunk of each rank is partial (length from the seed);\n"
"                        by default every chunk fills its slot\n"
"  --abort-rate F        fraction of requests one rank cancels (pd_cancel), at a stage\n"
"                        drawn from the seed, always after its pd_declare: before the\n"
"                        first pd_alloc (declared, maybe not admitted yet), after a\n"
"                        pd_alloc before its pd_put, between batches, or after the\n"
"                        last pd_put (0..1, default 0). The other prefill ranks hold\n"
"                        their last batch until that rank has cancelled, then carry\n"
"                        on (the broker ends their part too: PUT_FAILED -ECANCELED);\n"
"                        if its declaration never reached the broker, they cancel too\n"
"  --seed N              seed of every random choice and of the data (default 1)\n"
"  --timeout SEC         longest a request may take before it counts as lost (default 30)\n"
"  --decode-wait late|early\n"
"                        late (default): a decode rank calls pd_recv_wait() once every\n"
"                        prefill rank of the request has PUT_DONE (and stops when one\n"
"                        has not); early: it waits from the start, in 250 ms slices,\n"
"                        until READY or told to stop\n"
"  --decode-hold MS      a decode rank holds each verified request MS ms before it\n"
"                        releases it, as if decoding (0..60000, default 0): its\n"
"                        receive slots stay taken meanwhile\n"
"\n"
"Prefill engine:\n"
"  --engine step|threads how each prefill rank (one agent process) drives requests.\n"
"                        step (default): one thread runs scheduler steps, as an\n"
"                        inference engine with chunked prefill does. A request is\n"
"                        declared when the rank is told to start it; each step\n"
"                        visits the running requests in arrival order and stages\n"
"                        the next batch of each admitted one (pd_alloc with timeout\n"
"                        0, fill, pd_put); one not admitted yet (-EAGAIN: it holds\n"
"                        nothing) or finding the send pool busy is skipped until the\n"
"                        next step. Events are read between steps; a step in which\n"
"                        nothing moved sleeps in poll() on pd_agent_fd() and the\n"
"                        orders, 2 ms at most (if only the send pool held requests\n"
"                        back, the next step's first pd_alloc of an admitted request\n"
"                        waits for slots instead, 10 ms at most).\n"
"                        threads: a thread per request in flight: pd_declare, then\n"
"                        per batch a pd_alloc that waits (up to --timeout) for the\n"
"                        admission, then for staging; fill, pd_put; one more thread\n"
"                        reads the events.\n"
"                        Either way staging holds only batches of admitted requests,\n"
"                        so --send-slots needs room for one batch per rank, not for\n"
"                        every request in flight.\n"
"\n"
"Sweep (the columns of Mooncake's transfer engine bench and nixlbench):\n"
"  --sweep               a run per row of chunk size x batch x concurrency, brokers\n"
"                        started anew for each with --local; prints a row per run:\n"
"                        block size (the chunk, B), batch size (chunks per pd_put),\n"
"                        concurrency (requests in flight), GB/s (bytes verified at the\n"
"                        decode side / time after the warm-up), and the average, p99\n"
"                        and p999 transfer latency (us) of the requests. A request is\n"
"                        one batch (--chunks = the batch), and its transfer is its\n"
"                        pd_put -> PUT_DONE at the prefill rank (the slowest of the\n"
"                        --tp ranks). Every byte is checked as in any run; a row that\n"
"                        loses, corrupts or leaks anything fails the sweep (exit 1).\n"
"                        Progress on stderr, one line per row\n"
"  --sweep-chunks LIST   chunk sizes, K/M/G suffixes (default 64K,256K,1M,4M)\n"
"  --sweep-batch LIST    batch sizes (default 1,16)\n"
"  --sweep-conc LIST     concurrencies (default 1,4)\n"
"  --sweep-bytes SIZE    data per row: --requests is that over chunk x batch x tp (at\n"
"                        least 4 x concurrency; default 256M); --requests sets it\n"
"                        instead. --warmup defaults to 2 x concurrency in a sweep;\n"
"                        with --local and no --recv-slots/--send-slots, each pool has\n"
"                        batch x tp x concurrency slots (a slot per chunk in flight)\n"
"                        The --sweep-* flags imply --sweep; --slot-size, --chunks,\n"
"                        --batch and --concurrency are the rows' to set\n"
"\n"
"Output:\n"
"  --json FILE           write the results as a JSON object (FILE -: to stdout, and\n"
"                        the summary or table to stderr)\n"
"  --inject-corruption N change one byte of one chunk of every Nth request (rank 0,\n"
"                        after the pattern is written, before pd_put): shows that the\n"
"                        decode side's check catches it (each such request counts as\n"
"                        corrupted, so the run fails; 0, the default: none)\n"
"  --quiet               no progress line, no warnings\n"
"  --help                this text\n"
"\n"
"Latency is per ok request, from its first pd_declare to the end of the decode\n"
"ranks' verification (so admission included); transfer, per ok request, from its\n"
"first pd_put to its PUT_DONE at the prefill ranks (the slowest). admit wait: the\n"
"decode brokers' admission wait histogram; sender admission: pd_declare ->\n"
"PD_EV_ADMITTED at the prefill ranks; deferred: pd_alloc calls answered -EAGAIN\n"
"(not admitted yet). Every byte of every chunk is compared with what its prefill\n"
"rank wrote (a pattern from the seed, the request, the rank and the chunk).\n"
"Outcomes: ok; cancelled; failed (a PUT_FAILED or decode failure not caused by a\n"
"cancel); corrupted (a chunk's length or bytes differ, or a chunk is missing once\n"
"READY); lost (no outcome within --timeout, or PUT_DONE everywhere without READY).\n"
"Leaked slots: slots not free in the brokers' pools once the agents detached\n"
"(polled for 3 s); admission left: slots the decode brokers still reserve for\n"
"requests, and requests still waiting there (polled for 3 s). Exit status: 0 when\n"
"no request was lost, corrupted or failed, every request ended ok or cancelled,\n"
"every process exited cleanly and (--local) no slot leaked and no admission was\n"
"left (--sweep: in every row); 1 otherwise; 2 usage error; 130/143 on\n"
"SIGINT/SIGTERM.\n");
}

static int bad(const char *flag, const char *what, const char *arg)
{
	(void)fprintf(stderr, "pdbench: %s: %s%s%s%s\n", flag, what, arg ? " (got '" : "",
		arg ? arg : "", arg ? "')" : "");
	(void)fprintf(stderr, "Try 'pdbench --help'.\n");
	return 2;
}

static int get_u64(const char *flag, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	char what[96];
	unsigned long long v;

	errno = 0;
	v = s[0] >= '0' && s[0] <= '9' ? strtoull(s, &end, 10) : 0;
	if (s[0] < '0' || s[0] > '9' || errno || *end || v < min || v > max) {
		(void)snprintf(what, sizeof(what), "expected an integer in %" PRIu64 "..%" PRIu64,
			       min, max);
		return bad(flag, what, s);
	}
	*out = v;
	return 0;
}

static int get_u32(const char *flag, const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	uint64_t v;
	int rc = get_u64(flag, s, min, max, &v);

	if (rc == 0)
		*out = (uint32_t)v;
	return rc;
}

static int get_size(const char *flag, const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	errno = 0;
	v = s[0] >= '0' && s[0] <= '9' ? strtoull(s, &end, 10) : 0;
	if (s[0] >= '0' && s[0] <= '9' && !errno && end[0] && !end[1]) {
		mul = (end[0] == 'K' || end[0] == 'k') ? 1ull << 10 :
		      (end[0] == 'M' || end[0] == 'm') ? 1ull << 20 :
		      (end[0] == 'G' || end[0] == 'g') ? 1ull << 30 : 0;
		end++;
	}
	if (s[0] < '0' || s[0] > '9' || errno || *end || mul == 0 || v > (1ull << 30) / mul ||
	    v * mul < 4096 || (v * mul) % 4096)
		return bad(flag, "expected a size, a multiple of 4K in 4K..1G", s);
	*out = v * mul;
	return 0;
}

static int get_rate(const char *flag, const char *s, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end || errno || !(v >= 0.0 && v <= 1.0))
		return bad(flag, "expected a fraction in 0..1", s);
	*out = v;
	return 0;
}

static int get_transport(const char *s, char *out, size_t len)
{
	char tmp[64], *save = NULL, *t;

	if (strlen(s) >= sizeof(tmp) || strlen(s) >= len || !s[0])
		return bad("--transport", "expected a list of rdma, tcp, shm", s);
	(void)strcpy(tmp, s);
	for (t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save))
		if (strcmp(t, "tcp") && strcmp(t, "rdma") && strcmp(t, "shm"))
			return bad("--transport", "expected a list of rdma, tcp, shm", s);
	(void)strcpy(out, s);
	return 0;
}

/* The next item of the comma-separated list at *p into tok (len bytes):
 * 1 an item; 0 the end (*p NULL); -1 an empty or too long item. */
static int next_item(const char **p, char *tok, size_t len)
{
	size_t l;

	if (!*p)
		return 0;
	l = strcspn(*p, ",");
	if (l == 0 || l >= len)
		return -1;
	memcpy(tok, *p, l);
	tok[l] = '\0';
	*p = (*p)[l] ? *p + l + 1 : NULL;
	return 1;
}

/* Split a comma-separated list into fixed-size entries; their count or -1. */
static int get_list(const char *flag, const char *s, char *out, size_t each, uint32_t max)
{
	const char *p = s;
	uint32_t n = 0;
	int rc;

	memset(out, 0, each * max); /* a flag given twice: the last one counts */
	while ((rc = n < max ? next_item(&p, out + n * each, each) : p ? -1 : 0) == 1)
		n++;
	if (rc < 0) {
		(void)bad(flag, "expected a comma-separated list of names", s);
		return -1;
	}
	return (int)n;
}

/* A comma-separated list of sizes (size) or integers in min..max: its
 * count (1..PD_BENCH_SWEEP_MAX), or 0 (printed). */
static uint32_t get_nums(const char *flag, const char *s, int size, uint64_t min, uint64_t max,
			 uint64_t *out)
{
	char tok[32];
	const char *p = s;
	uint32_t n = 0;
	int rc;

	while ((rc = n < PD_BENCH_SWEEP_MAX ? next_item(&p, tok, sizeof(tok)) : p ? -1 : 0) == 1) {
		if (size ? get_size(flag, tok, &out[n]) : get_u64(flag, tok, min, max, &out[n]))
			return 0;
		n++;
	}
	if (rc < 0) {
		(void)bad(flag, "expected a comma-separated list of at most 16 values", s);
		return 0;
	}
	return n;
}

enum {
	O_LOCAL = 256, O_PREFILL, O_DECODE, O_TP, O_TRANSPORT, O_RECV, O_SEND, O_SLOT,
	O_REQUESTS, O_CONC, O_CHUNKS, O_CMIN, O_CMAX, O_BATCH, O_ABORT, O_PARTIAL, O_PROXY,
	O_SEED, O_JSON, O_QUIET, O_TIMEOUT, O_BIN, O_KEEP, O_PNAME, O_DNAME, O_DCTRL,
	O_RUNDIR, O_WAIT, O_PHOST, O_DHOST, O_ENGINE, O_HOLD, O_INJECT, O_WARMUP, O_SWEEP, O_SW_CHUNKS, O_SW_BATCH,
	O_SW_CONC, O_SW_BYTES, O_POOLS, O_HELP, O_END
};

static const struct option longopts[] = {
	{ "local", no_argument, NULL, O_LOCAL },
	{ "prefill", required_argument, NULL, O_PREFILL },
	{ "decode", required_argument, NULL, O_DECODE },
	{ "tp", required_argument, NULL, O_TP },
	{ "transport", required_argument, NULL, O_TRANSPORT },
	{ "recv-slots", required_argument, NULL, O_RECV },
	{ "send-slots", required_argument, NULL, O_SEND },
	{ "send-pools", required_argument, NULL, O_POOLS },
	{ "slot-size", required_argument, NULL, O_SLOT },
	{ "requests", required_argument, NULL, O_REQUESTS },
	{ "concurrency", required_argument, NULL, O_CONC },
	{ "chunks", required_argument, NULL, O_CHUNKS },
	{ "chunks-min", required_argument, NULL, O_CMIN },
	{ "chunks-max", required_argument, NULL, O_CMAX },
	{ "batch", required_argument, NULL, O_BATCH },
	{ "abort-rate", required_argument, NULL, O_ABORT },
	{ "partial", no_argument, NULL, O_PARTIAL },
	{ "proxy", required_argument, NULL, O_PROXY },
	{ "seed", required_argument, NULL, O_SEED },
	{ "json", required_argument, NULL, O_JSON },
	{ "quiet", no_argument, NULL, O_QUIET },
	{ "timeout", required_argument, NULL, O_TIMEOUT },
	{ "broker-bin", required_argument, NULL, O_BIN },
	{ "keep-logs", no_argument, NULL, O_KEEP },
	{ "prefill-name", required_argument, NULL, O_PNAME },
	{ "decode-name", required_argument, NULL, O_DNAME },
	{ "decode-ctrl", required_argument, NULL, O_DCTRL },
	{ "rundir", required_argument, NULL, O_RUNDIR },
	{ "decode-wait", required_argument, NULL, O_WAIT },
	{ "prefill-host", required_argument, NULL, O_PHOST },
	{ "decode-host", required_argument, NULL, O_DHOST },
	{ "engine", required_argument, NULL, O_ENGINE },
	{ "decode-hold", required_argument, NULL, O_HOLD },
	{ "inject-corruption", required_argument, NULL, O_INJECT },
	{ "warmup", required_argument, NULL, O_WARMUP },
	{ "sweep", no_argument, NULL, O_SWEEP },
	{ "sweep-chunks", required_argument, NULL, O_SW_CHUNKS },
	{ "sweep-batch", required_argument, NULL, O_SW_BATCH },
	{ "sweep-conc", required_argument, NULL, O_SW_CONC },
	{ "sweep-bytes", required_argument, NULL, O_SW_BYTES },
	{ "help", no_argument, NULL, O_HELP },
	{ NULL, 0, NULL, 0 },
};

static void defaults(struct pd_bench_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->nprefill = 1;
	o->ndecode = 1;
	o->tp = 1;
	(void)strcpy(o->transport, "tcp");
	(void)strcpy(o->phost, "127.0.0.1");
	(void)strcpy(o->dhost, "127.0.0.1");
	o->recv_slots = 64;
	o->send_slots = 128;
	o->send_pools = 1;
	o->slot_size = 256u << 10;
	o->requests = 200;
	o->concurrency = 8;
	o->chunks_min = o->chunks_max = 16;
	o->batch = 4;
	o->seed = 1;
	o->timeout_s = 30;
	memcpy(o->sweep_chunk, (const uint64_t[]){ 64u << 10, 256u << 10, 1u << 20, 4u << 20 },
	       4 * sizeof(uint64_t));
	memcpy(o->sweep_batch, (const uint64_t[]){ 1, 16 }, 2 * sizeof(uint64_t));
	memcpy(o->sweep_conc, (const uint64_t[]){ 1, 4 }, 2 * sizeof(uint64_t));
	o->nsweep_chunk = 4;
	o->nsweep_batch = o->nsweep_conc = 2;
	o->sweep_bytes = 256u << 20;
	o->engine = PD_BENCH_ENGINE_STEP;
}

/* A numeric IPv4 address the brokers bind (e.g. an RDMA device's). */
static int get_host(const char *flag, const char *a, char *out, size_t len)
{
	struct in_addr ia;

	if (strlen(a) >= len || inet_pton(AF_INET, a, &ia) != 1)
		return bad(flag, "expected a numeric IPv4 address", a);
	(void)strcpy(out, a);
	return 0;
}

/* One flag; seen[] records which were given. 0, or 2 for a usage error. */
static int one(struct pd_bench_opts *o, int c, const char *a)
{
	uint64_t v;
	int n;

	switch (c) {
	case O_LOCAL: o->local = 1; return 0;
	case O_PHOST: return get_host("--prefill-host", a, o->phost, sizeof(o->phost));
	case O_DHOST: return get_host("--decode-host", a, o->dhost, sizeof(o->dhost));
	case O_PREFILL: return get_u32("--prefill", a, 1, PD_BENCH_MAX_BROKERS, &o->nprefill);
	case O_DECODE: return get_u32("--decode", a, 1, PD_BENCH_MAX_BROKERS, &o->ndecode);
	case O_TP: return get_u32("--tp", a, 1, PD_BENCH_MAX_TP, &o->tp);
	case O_TRANSPORT: return get_transport(a, o->transport, sizeof(o->transport));
	case O_RECV: return get_u32("--recv-slots", a, 1, 1u << 24, &o->recv_slots);
	case O_SEND: return get_u32("--send-slots", a, 1, 1u << 24, &o->send_slots);
	case O_POOLS: return get_u32("--send-pools", a, 1, 64, &o->send_pools);
	case O_SLOT: o->slot_size_set = 1; return get_size("--slot-size", a, &o->slot_size);
	case O_REQUESTS: return get_u32("--requests", a, 1, PD_BENCH_MAX_REQS, &o->requests);
	case O_CONC: return get_u32("--concurrency", a, 1, PD_BENCH_MAX_CONC, &o->concurrency);
	case O_CHUNKS:
		if (get_u32("--chunks", a, 1, 65536, &o->chunks_min))
			return 2;
		o->chunks_max = o->chunks_min;
		return 0;
	case O_CMIN: return get_u32("--chunks-min", a, 1, 65536, &o->chunks_min);
	case O_CMAX: return get_u32("--chunks-max", a, 1, 65536, &o->chunks_max);
	case O_BATCH: return get_u32("--batch", a, 1, MAX_PUT_BATCH, &o->batch);
	case O_ABORT: return get_rate("--abort-rate", a, &o->abort_rate);
	case O_PARTIAL: o->partial = 1; return 0;
	case O_PROXY:
		if (!a[0] || strlen(a) > PD_BENCH_EP_MAX)
			return bad("--proxy", "expected an endpoint of 1..127 characters", a);
		(void)strcpy(o->proxy, a);
		return 0;
	case O_SEED:
		if (get_u64("--seed", a, 0, UINT64_MAX, &v))
			return 2;
		o->seed = v;
		return 0;
	case O_JSON: o->json = a; return 0;
	case O_QUIET: o->quiet = 1; return 0;
	case O_TIMEOUT: return get_u32("--timeout", a, 1, 86400, &o->timeout_s);
	case O_BIN: o->broker_bin = a; return 0;
	case O_KEEP: o->keep_logs = 1; return 0;
	case O_PNAME:
		n = get_list("--prefill-name", a, o->pname[0], sizeof(o->pname[0]),
			     PD_BENCH_MAX_BROKERS);
		o->nprefill = n > 0 ? (uint32_t)n : 0;
		return n > 0 ? 0 : 2;
	case O_DNAME:
		n = get_list("--decode-name", a, o->dname[0], sizeof(o->dname[0]),
			     PD_BENCH_MAX_BROKERS);
		o->ndecode = n > 0 ? (uint32_t)n : 0;
		return n > 0 ? 0 : 2;
	case O_DCTRL:
		n = get_list("--decode-ctrl", a, o->dctrl[0], sizeof(o->dctrl[0]),
			     PD_BENCH_MAX_BROKERS);
		return n > 0 ? 0 : 2;
	case O_RUNDIR: o->rundir = a; return 0;
	case O_WAIT:
		if (strcmp(a, "late") && strcmp(a, "early"))
			return bad("--decode-wait", "expected late or early", a);
		o->early_wait = !strcmp(a, "early");
		return 0;
	case O_ENGINE:
		if (strcmp(a, "step") && strcmp(a, "threads"))
			return bad("--engine", "expected step or threads", a);
		o->engine = strcmp(a, "step") ? PD_BENCH_ENGINE_THREADS : PD_BENCH_ENGINE_STEP;
		return 0;
	case O_HOLD:
		return get_u32("--decode-hold", a, 0, PD_BENCH_MAX_HOLD_MS, &o->decode_hold_ms);
	case O_INJECT:
		return get_u32("--inject-corruption", a, 0, PD_BENCH_MAX_REQS, &o->inject_every);
	case O_WARMUP: return get_u32("--warmup", a, 0, PD_BENCH_MAX_REQS, &o->warmup);
	case O_SWEEP: o->sweep = 1; return 0;
	case O_SW_CHUNKS:
		o->sweep = 1;
		o->nsweep_chunk = get_nums("--sweep-chunks", a, 1, 0, 0, o->sweep_chunk);
		return o->nsweep_chunk ? 0 : 2;
	case O_SW_BATCH:
		o->sweep = 1;
		o->nsweep_batch = get_nums("--sweep-batch", a, 0, 1, MAX_PUT_BATCH, o->sweep_batch);
		return o->nsweep_batch ? 0 : 2;
	case O_SW_CONC:
		o->sweep = 1;
		o->nsweep_conc = get_nums("--sweep-conc", a, 0, 1, PD_BENCH_MAX_CONC, o->sweep_conc);
		return o->nsweep_conc ? 0 : 2;
	case O_SW_BYTES: o->sweep = 1; return get_size("--sweep-bytes", a, &o->sweep_bytes);
	default: return 2;
	}
}

static uint32_t count_ctrl(const struct pd_bench_opts *o)
{
	uint32_t n = 0;

	while (n < PD_BENCH_MAX_BROKERS && o->dctrl[n][0])
		n++;
	return n;
}

/* Flags that belong to one mode only. */
static int check_mode(const struct pd_bench_opts *o, const int *seen)
{
	static const struct { int id; const char *name; int local; } only[] = {
		{ O_PREFILL, "--prefill", 1 }, { O_DECODE, "--decode", 1 },
		{ O_TRANSPORT, "--transport", 1 }, { O_RECV, "--recv-slots", 1 },
		{ O_SEND, "--send-slots", 1 }, { O_POOLS, "--send-pools", 1 },
		{ O_PROXY, "--proxy", 1 },
		{ O_BIN, "--broker-bin", 1 }, { O_KEEP, "--keep-logs", 1 },
		{ O_PHOST, "--prefill-host", 1 }, { O_DHOST, "--decode-host", 1 },
		{ O_PNAME, "--prefill-name", 0 }, { O_DNAME, "--decode-name", 0 },
		{ O_DCTRL, "--decode-ctrl", 0 }, { O_RUNDIR, "--rundir", 0 },
	};

	for (size_t i = 0; i < sizeof(only) / sizeof(only[0]); i++)
		if (seen[only[i].id - O_LOCAL] && only[i].local != o->local)
			return bad(only[i].name, only[i].local ? "needs --local" :
				   "attaches to running brokers: not with --local", NULL);
	if (!o->local && (!seen[O_PNAME - O_LOCAL] || !seen[O_DNAME - O_LOCAL] ||
			  !seen[O_DCTRL - O_LOCAL]))
		return bad("--local", "give --local, or --prefill-name, --decode-name and "
			   "--decode-ctrl", NULL);
	if (!o->local && count_ctrl(o) != o->ndecode)
		return bad("--decode-ctrl", "expected one endpoint per --decode-name", NULL);
	return 0;
}

/* Sizes that can never work. */
static int check_sizes(const struct pd_bench_opts *o, const int *seen)
{
	char what[160];

	if (seen[O_CHUNKS - O_LOCAL] && (seen[O_CMIN - O_LOCAL] || seen[O_CMAX - O_LOCAL]))
		return bad("--chunks", "not with --chunks-min/--chunks-max", NULL);
	if (seen[O_CMIN - O_LOCAL] != seen[O_CMAX - O_LOCAL])
		return bad(seen[O_CMIN - O_LOCAL] ? "--chunks-max" : "--chunks-min",
			   "--chunks-min and --chunks-max go together", NULL);
	if (o->chunks_min > o->chunks_max)
		return bad("--chunks-min", "greater than --chunks-max", NULL);
	if (o->local && !o->sweep && (uint64_t)o->chunks_max * o->tp > o->recv_slots) {
		(void)snprintf(what, sizeof(what), "too small: a request needs chunks x tp = %"
			       PRIu64 " receive slots", (uint64_t)o->chunks_max * o->tp);
		return bad("--recv-slots", what, NULL);
	}
	if (o->send_slots % o->send_pools)
		return bad("--send-pools", "must divide --send-slots", NULL);
	if (o->local && !o->sweep &&
	    (o->batch < o->chunks_max ? o->batch : o->chunks_max) > o->send_slots / o->send_pools)
		return bad("--batch", "larger than --send-slots (of one send pool)", NULL);
	if (o->json && !o->json[0])
		return bad("--json", "expected a file name", "");
	if ((uint64_t)o->requests + o->warmup > PD_BENCH_MAX_REQS)
		return bad("--warmup", "--requests plus --warmup is more than 1000000", NULL);
	return 0;
}

/* --sweep: the rows set chunk, batch and concurrency; each row must fit
 * the pools given, and the pools a row sizes itself must be possible. */
static int check_sweep(const struct pd_bench_opts *o, const int *seen)
{
	static const struct { int id; const char *name; } rows[] = {
		{ O_SLOT, "--slot-size" }, { O_CHUNKS, "--chunks" }, { O_CMIN, "--chunks-min" },
		{ O_CMAX, "--chunks-max" }, { O_BATCH, "--batch" }, { O_CONC, "--concurrency" },
	};

	if (!o->sweep)
		return 0;
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		if (seen[rows[i].id - O_LOCAL])
			return bad(rows[i].name, "not with --sweep: the rows set it (--sweep-chunks, "
				   "--sweep-batch, --sweep-conc)", NULL);
	for (uint32_t i = 0; o->local && i < o->nsweep_batch; i++) {
		uint64_t b = o->sweep_batch[i];

		if (o->recv_set && b * o->tp > o->recv_slots)
			return bad("--recv-slots", "too small for a row: its request needs batch x tp "
				   "receive slots", NULL);
		if (o->send_set && b > o->send_slots)
			return bad("--send-slots", "smaller than a row's batch", NULL);
		for (uint32_t k = 0; k < o->nsweep_conc; k++)
			if (b * o->tp * o->sweep_conc[k] > 1u << 24)
				return bad("--sweep-conc", "a row would need more than 16M slots", NULL);
	}
	return 0;
}

int pd_bench_opts_parse(struct pd_bench_opts *o, int argc, char **argv)
{
	int seen[O_END - O_LOCAL] = { 0 };
	int c, rc;

	defaults(o);
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (c == O_HELP) {
			usage(stdout);
			return 1;
		}
		if (c == '?' || c == ':') {
			const char *arg = argv[optind - 1];

			return bad(arg, optopt ? "expects a value" : "unknown option", NULL);
		}
		seen[c - O_LOCAL] = 1;
		rc = one(o, c, optarg);
		if (rc)
			return rc;
	}
	if (optind < argc)
		return bad(argv[optind], "unexpected argument", NULL);
	o->requests_set = seen[O_REQUESTS - O_LOCAL];
	o->warmup_set = seen[O_WARMUP - O_LOCAL];
	o->recv_set = seen[O_RECV - O_LOCAL];
	o->send_set = seen[O_SEND - O_LOCAL];
	rc = check_mode(o, seen);
	if (rc == 0)
		rc = check_sizes(o, seen);
	if (rc == 0)
		rc = check_sweep(o, seen);
	o->requests += o->warmup; /* from here on: every request run */
	return rc;
}
