/* SPDX-License-Identifier: MIT */
/*
 * pdbench --sweep: one run per row of chunk size x batch x concurrency
 * (with --local, brokers started anew for each row, their pools sized to
 * the row), reported in the columns the anchors' benches print (Mooncake's
 * transfer engine bench, nixlbench): block size, batch size, concurrency,
 * GB/s, average / p99 / p999 transfer latency. A row's request is one
 * batch, so its transfer (first pd_put -> PUT_DONE, as every run times it)
 * is one batch's. Each run checks every byte as any run does.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdb.h"

#define MIN_REQS_PER_CONC 4u   /* a row runs at least this many requests per one in flight */

struct row {
	uint64_t chunk;
	uint32_t batch, conc;
	struct pd_bench_opts o;      /* the run's options */
	struct pd_bench_result r;
	int rc;                      /* pd_bench_run(): 0 or -errno */
	int passed;
};

/* The run of one row: the sweep's options with the row's chunk, batch and
 * concurrency, its requests and pools. */
static void plan(struct row *w, const struct pd_bench_opts *base)
{
	struct pd_bench_opts *o = &w->o;
	uint64_t per_req = w->chunk * w->batch * base->tp, n;

	*o = *base;
	o->sweep = 0;
	o->json = NULL;
	o->quiet = 1; /* the sweep says how far it is */
	o->slot_size = w->chunk;
	o->slot_size_set = 1;
	o->batch = w->batch;
	o->chunks_min = o->chunks_max = w->batch;
	o->concurrency = w->conc;
	if (!base->recv_set)
		o->recv_slots = w->batch * base->tp * w->conc;
	if (!base->send_set) /* each send pool room for a rank's batches in flight */
		o->send_slots = w->batch * w->conc * (base->tp > base->send_pools ? base->tp :
								  base->send_pools);
	o->send_slots += (base->send_pools - o->send_slots % base->send_pools) % base->send_pools;
	o->warmup = base->warmup_set ? base->warmup : 2 * w->conc;
	n = (base->sweep_bytes + per_req - 1) / per_req;
	if (n < MIN_REQS_PER_CONC * w->conc)
		n = MIN_REQS_PER_CONC * w->conc;
	if (base->requests_set)
		n = base->requests - base->warmup; /* as given: parsing added the warm-up */
	if (n + o->warmup > PD_BENCH_MAX_REQS)
		n = PD_BENCH_MAX_REQS - o->warmup;
	o->requests = (uint32_t)n + o->warmup;
}

static double row_gbps(const struct row *w)
{
	return w->r.seconds > 0 ? (double)w->r.bytes / w->r.seconds / 1e9 : 0.0;
}

static const char *verdict(const struct row *w)
{
	if (w->rc < 0)
		return "error";
	return w->passed ? "ok" : w->r.corrupted ? "corrupted" : w->r.lost ? "lost" : "failed";
}

static void print_head(FILE *f)
{
	(void)fprintf(f, "%-16s %-11s %-12s %-13s %-14s %-14s %-15s %-10s %s\n", "Block Size (B)",
		"Batch Size", "Concurrency", "B/W (GB/Sec)", "Avg Lat. (us)", "P99 Lat. (us)",
		"P999 Lat. (us)", "Timed Reqs", "Verified");
	(void)fflush(f);
}

static void print_row(FILE *f, const struct row *w)
{
	const struct pd_bench_result *r = &w->r;

	(void)fprintf(f, "%-16" PRIu64 " %-11" PRIu32 " %-12" PRIu32 " %-13.3f %-14.1f %-14.1f "
		"%-15.1f %-10" PRIu32 " %s\n", w->chunk, w->batch, w->conc, row_gbps(w),
		pd_bench_mean_us(r->xfer_ns, r->nxfer), pd_bench_quantile_us(r->xfer_ns, r->nxfer,
		0.99), pd_bench_quantile_us(r->xfer_ns, r->nxfer, 0.999),
		w->o.requests - w->o.warmup, verdict(w));
	(void)fflush(f);
}

static void print_foot(FILE *f, const struct pd_bench_opts *o)
{
	(void)fprintf(f, "B/W: bytes verified at the decode side over the time after the warm-up "
		"(2 x concurrency requests unless --warmup); latency: per request of one batch, "
		"its pd_put -> PUT_DONE at the prefill rank (the slowest of %" PRIu32 "); %s, "
		"%" PRIu32 " prefill x %" PRIu32 " decode brokers\n", o->tp,
		o->local ? o->transport : "attached brokers", o->nprefill, o->ndecode);
}

static json_t *row_json(const struct row *w)
{
	const struct pd_bench_result *r = &w->r;

	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f,"
			 " s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:s}",
			 "block_size", (json_int_t)w->chunk, "batch_size", (json_int_t)w->batch,
			 "concurrency", (json_int_t)w->conc, "requests", (json_int_t)w->o.requests,
			 "timed_requests", (json_int_t)(w->o.requests - w->o.warmup),
			 "warmup", (json_int_t)w->o.warmup, "bytes", (json_int_t)r->bytes,
			 "seconds", r->seconds, "gb_per_s", row_gbps(w),
			 "lat_avg_us", pd_bench_mean_us(r->xfer_ns, r->nxfer),
			 "lat_p50_us", pd_bench_quantile_us(r->xfer_ns, r->nxfer, 0.50),
			 "lat_p99_us", pd_bench_quantile_us(r->xfer_ns, r->nxfer, 0.99),
			 "lat_p999_us", pd_bench_quantile_us(r->xfer_ns, r->nxfer, 0.999),
			 "requests_ok", (json_int_t)r->ok, "requests_failed", (json_int_t)r->failed,
			 "requests_cancelled", (json_int_t)r->cancelled,
			 "corrupted", (json_int_t)r->corrupted, "lost", (json_int_t)r->lost,
			 "leaked_slots", (json_int_t)r->leaked_slots,
			 "bad_exits", (json_int_t)r->bad_exits, "passed", w->passed,
			 "verified", verdict(w));
}

/* {"latency": ..., "transport": ..., "tp": ..., "rows": [...]} */
static int write_json(const struct pd_bench_opts *o, const struct row *rows, uint32_t n)
{
	json_t *doc = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:b, s:[]}",
				"throughput", "bytes verified at the decode side / seconds after "
				"the warm-up", "latency", "per request of one batch: pd_put -> "
				"PUT_DONE at the prefill rank (the slowest rank)",
				"transport", o->local ? o->transport : "", "tp", (json_int_t)o->tp,
				"prefill", (json_int_t)o->nprefill, "decode", (json_int_t)o->ndecode,
				"local", o->local, "rows");
	json_t *arr = doc ? json_object_get(doc, "rows") : NULL;
	int rc = 0;

	for (uint32_t i = 0; arr && rc == 0 && i < n; i++)
		rc = json_array_append_new(arr, row_json(&rows[i])) < 0 ? -ENOMEM : 0;
	rc = rc ? rc : pd_bench_json_write(arr ? doc : NULL, o->json);
	json_decref(doc);
	return rc;
}

static void say_row(const struct pd_bench_opts *o, const struct row *w, uint32_t i, uint32_t n)
{
	if (o->quiet)
		return;
	(void)fprintf(stderr, "pdbench: sweep %" PRIu32 "/%" PRIu32 ": block %" PRIu64 " B, batch %"
		PRIu32 ", concurrency %" PRIu32 ", %" PRIu32 " requests after %" PRIu32
		" warm-up\n", i + 1, n, w->chunk, w->batch, w->conc, w->o.requests - w->o.warmup,
		w->o.warmup);
}

/* Run rows [0, n) in order, printing each as it ends. The rows run. */
static uint32_t run_rows(const struct pd_bench_opts *o, struct row *rows, uint32_t n, FILE *out,
			 const volatile sig_atomic_t *stop)
{
	uint32_t i;

	print_head(out);
	for (i = 0; i < n && !*stop; i++) {
		struct row *w = &rows[i];

		plan(w, o);
		say_row(o, w, i, n);
		w->rc = pd_bench_run(&w->o, &w->r, stop);
		if (*stop)
			break;
		w->passed = w->rc == 0 && w->r.requests && pd_bench_report_exit(&w->r) == 0;
		print_row(out, w);
	}
	print_foot(out, o);
	return i;
}

int pd_bench_sweep(const struct pd_bench_opts *o, const volatile sig_atomic_t *stop)
{
	uint32_t n = o->nsweep_chunk * o->nsweep_batch * o->nsweep_conc, done, k = 0;
	struct row *rows = calloc(n, sizeof(*rows));
	FILE *out = o->json && !strcmp(o->json, "-") ? stderr : stdout;
	int rc = 0;

	if (!rows) {
		(void)fprintf(stderr, "pdbench: no memory for the sweep\n");
		return 1;
	}
	for (uint32_t c = 0; c < o->nsweep_chunk; c++)
		for (uint32_t b = 0; b < o->nsweep_batch; b++)
			for (uint32_t q = 0; q < o->nsweep_conc; q++, k++) {
				rows[k].chunk = o->sweep_chunk[c];
				rows[k].batch = (uint32_t)o->sweep_batch[b];
				rows[k].conc = (uint32_t)o->sweep_conc[q];
			}
	done = run_rows(o, rows, n, out, stop);
	if (o->json && write_json(o, rows, done) < 0)
		rc = 1;
	for (uint32_t i = 0; i < n; i++) {
		rc |= i < done && !rows[i].passed;
		pd_bench_result_free(&rows[i].r);
	}
	free(rows);
	return *stop ? 128 + *stop : rc;
}
