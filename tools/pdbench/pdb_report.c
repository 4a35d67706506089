/* SPDX-License-Identifier: MIT */
/* pdbench: the progress line, the summary table, the JSON file, the verdict. */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "pd_time.h"
#include "pdb.h"

static double gbps(uint64_t bytes, double seconds)
{
	return seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0;
}

void pd_bench_progress(const struct pd_bench_opts *o, const struct pd_bench_result *r,
		       uint32_t done, double seconds, int final)
{
	static double last;
	static int drawn;
	int tty = isatty(2);

	if (o->quiet)
		return;
	if (final) {
		if (drawn && tty)
			(void)fputc('\n', stderr);
		return;
	}
	if (seconds - last < (tty ? 0.2 : 2.0))
		return;
	last = seconds;
	drawn = 1;
	(void)fprintf(stderr, "%s%" PRIu32 "/%" PRIu32 " done, %" PRIu32 " ok, %" PRIu32 " failed, %"
		PRIu32 " cancelled, %.2f GB/s%s", tty ? "\r" : "", done, r->requests, r->ok,
		r->failed, r->cancelled, gbps(r->bytes, seconds), tty ? "   " : "\n");
}

double pd_bench_quantile_us(const uint64_t *v, uint32_t n, double q)
{
	uint32_t i;

	if (!n)
		return 0.0;
	i = (uint32_t)(q * n + 0.999999);
	i = i == 0 ? 0 : i - 1;
	if (i >= n)
		i = n - 1;
	return (double)v[i] / 1e3;
}

double pd_bench_mean_us(const uint64_t *v, uint32_t n)
{
	double sum = 0;

	for (uint32_t i = 0; i < n; i++)
		sum += (double)v[i];
	return n ? sum / n / 1e3 : 0.0;
}

/* Nearest-rank quantile of n samples (sorted by the coordinator), in ms. */
static double quantile_ms(const uint64_t *v, uint32_t n, double q)
{
	return pd_bench_quantile_us(v, n, q) / 1e3;
}

static double xfer_us(const struct pd_bench_result *r, double q)
{
	return pd_bench_quantile_us(r->xfer_ns, r->nxfer, q);
}

static double lat_ms(const struct pd_bench_result *r, double q)
{
	return quantile_ms(r->lat_ns, r->nlat, q);
}

static void size_str(char *buf, size_t len, uint64_t v)
{
	if (v % (1u << 20) == 0)
		(void)snprintf(buf, len, "%" PRIu64 "M", v >> 20);
	else if (v % 1024 == 0)
		(void)snprintf(buf, len, "%" PRIu64 "K", v >> 10);
	else
		(void)snprintf(buf, len, "%" PRIu64, v);
}

static const char *engine_name(const struct pd_bench_opts *o)
{
	return o->engine == PD_BENCH_ENGINE_THREADS ? "threads" : "step";
}

static double sadmit_ms(const struct pd_bench_result *r, double q)
{
	return quantile_ms(r->sadmit_ns, r->nsadmit, q);
}

static void print_engine(FILE *f, const struct pd_bench_opts *o, const struct pd_bench_result *r)
{
	if (o->engine == PD_BENCH_ENGINE_THREADS) {
		(void)fprintf(f, "  engine      threads: a thread per request in flight\n");
		return;
	}
	(void)fprintf(f, "  engine      step: one scheduler thread per prefill rank; %" PRIu64 " steps, %"
	       PRIu64 " idle sleeps (%" PRIu64 " ended by pd_agent_fd)\n", r->steps, r->sleeps,
	       r->fd_wakes);
}

static void print_admission(FILE *f, const struct pd_bench_result *r)
{
	(void)fprintf(f, "  admit wait  p50 <= %.2f ms, p99 <= %.2f ms (decode brokers' histogram)\n",
	       (double)r->admit_p50_ns / 1e6, (double)r->admit_p99_ns / 1e6);
	(void)fprintf(f, "  admission   p50 %.2f ms, p99 %.2f ms over %" PRIu32 " requests (pd_declare -> "
	       "ADMITTED, slowest rank); %" PRIu64 " pd_alloc deferred (-EAGAIN: not admitted "
	       "yet)\n", sadmit_ms(r, 0.50), sadmit_ms(r, 0.99), r->nsadmit, r->deferred);
}

void pd_bench_report_print(FILE *f, const struct pd_bench_opts *o, struct pd_bench_result *r)
{
	char slot[32], warm[64] = "";

	size_str(slot, sizeof(slot), o->slot_size);
	(void)fprintf(f, "pdbench: %" PRIu32 " prefill x %" PRIu32 " decode brokers, tp %" PRIu32
	       ", %s, slot %s, recv-slots %" PRIu32 ", send-slots %" PRIu32 "\n",
	       o->nprefill, o->ndecode, o->tp, o->local ? o->transport : "(attached)", slot,
	       o->recv_slots, o->send_slots);
	print_engine(f, o, r);
	if (o->warmup)
		(void)snprintf(warm, sizeof(warm), " (the first %" PRIu32 " a warm-up, not timed)",
			       o->warmup);
	(void)fprintf(f, "  load        %" PRIu32 " requests%s, concurrency %" PRIu32 ", chunks %" PRIu32
	       "..%" PRIu32 " per rank, batch %" PRIu32 ", abort-rate %.2f, decode-hold %" PRIu32
	       " ms, seed %" PRIu64 "\n", o->requests, warm, o->concurrency, o->chunks_min,
	       o->chunks_max, o->batch, o->abort_rate, o->decode_hold_ms, o->seed);
	(void)fprintf(f, "  requests    %" PRIu32 " ok, %" PRIu32 " failed, %" PRIu32 " cancelled%s\n",
	       r->ok, r->failed, r->cancelled, r->interrupted ? " (interrupted)" : "");
	(void)fprintf(f, "  data        %.3f GB verified in %.2f s = %.2f GB/s\n", (double)r->bytes / 1e9,
	       r->seconds, gbps(r->bytes, r->seconds));
	(void)fprintf(f, "  latency     p50 %.2f ms, p99 %.2f ms (first pd_declare -> decode verified)\n",
	       lat_ms(r, 0.50), lat_ms(r, 0.99));
	(void)fprintf(f, "  transfer    avg %.1f us, p50 %.1f us, p99 %.1f us, p999 %.1f us (first pd_put "
		"-> PUT_DONE, slowest prefill rank)\n", pd_bench_mean_us(r->xfer_ns, r->nxfer),
		xfer_us(r, 0.50), xfer_us(r, 0.99), xfer_us(r, 0.999));
	print_admission(f, r);
	if (r->leaks_checked) /* the brokers were read at the end */
		(void)fprintf(f, "  moved       tcp %.3f GB, shm %.3f GB, rdma %.3f GB (the prefill brokers' "
		       "transports)\n", (double)r->moved.tcp / 1e9, (double)r->moved.shm / 1e9,
		       (double)r->moved.rdma / 1e9);
	if (r->bad_exits)
		(void)fprintf(f, "  processes   %" PRIu32 " agent processes or brokers did not exit cleanly\n",
		       r->bad_exits);
	if (r->reserved_left || r->waiting_left)
		(void)fprintf(f, "  admission   left at the end: %" PRIu64 " slots reserved, %" PRIu64
		       " requests waiting (leaked)\n", r->reserved_left, r->waiting_left);
	(void)fprintf(f, "%" PRIu32 " lost, %" PRIu32 " corrupted, %" PRIu64 " leaked slots%s\n", r->lost,
	       r->corrupted, r->leaked_slots, !r->leaks_checked ? " (not checked)" :
	       r->leaks_counted ? "" : " (brokers not ours: slots in use, not counted)");
	(void)fflush(f);
}

/* jansson's integers are signed 64-bit: beyond INT64_MAX (a --seed can be),
 * the nearest double. */
static json_t *json_u64(uint64_t v)
{
	return v <= INT64_MAX ? json_integer((json_int_t)v) : json_real((double)v);
}

/* The members keep the order the file has always had. */
static json_t *json_results(const struct pd_bench_result *r)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:o, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f,"
			 " s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
			 "requests", (json_int_t)r->requests, "requests_ok", (json_int_t)r->ok,
			 "requests_failed", (json_int_t)r->failed,
			 "requests_cancelled", (json_int_t)r->cancelled,
			 "bytes", json_u64(r->bytes), "seconds", r->seconds,
			 "gb_per_s", gbps(r->bytes, r->seconds), "lat_p50_ms", lat_ms(r, 0.50),
			 "lat_p99_ms", lat_ms(r, 0.99),
			 "admit_wait_p50_ms", (double)r->admit_p50_ns / 1e6,
			 "admit_wait_p99_ms", (double)r->admit_p99_ns / 1e6,
			 "sender_admit_p50_ms", sadmit_ms(r, 0.50),
			 "sender_admit_p99_ms", sadmit_ms(r, 0.99),
			 "sender_admit_samples", (json_int_t)r->nsadmit,
			 "alloc_deferred", json_u64(r->deferred),
			 "engine_steps", json_u64(r->steps), "engine_sleeps", json_u64(r->sleeps),
			 "engine_fd_wakeups", json_u64(r->fd_wakes),
			 "reserved_left", json_u64(r->reserved_left),
			 "waiting_left", json_u64(r->waiting_left),
			 "moved_tcp_bytes", json_u64(r->moved.tcp),
			 "moved_shm_bytes", json_u64(r->moved.shm),
			 "moved_rdma_bytes", json_u64(r->moved.rdma));
}

static json_t *json_verdict(const struct pd_bench_result *r)
{
	return json_pack("{s:I, s:I, s:o, s:o, s:b, s:b, s:b, s:I}", "lost", (json_int_t)r->lost,
			 "corrupted", (json_int_t)r->corrupted,
			 "corrupted_chunks", json_u64(r->corrupted_chunks),
			 "leaked_slots", json_u64(r->leaked_slots),
			 "leaks_checked", r->leaks_checked, "leaks_counted", r->leaks_counted,
			 "interrupted", r->interrupted, "bad_exits", (json_int_t)r->bad_exits);
}

static json_t *json_options(const struct pd_bench_opts *o)
{
	return json_pack("{s:s, s:I, s:b, s:I, s:I, s:I, s:s, s:I, s:I, s:I, s:I, s:o, s:I,"
			 " s:I, s:I, s:f, s:b, s:o, s:I}",
			 "engine", engine_name(o), "decode_hold_ms", (json_int_t)o->decode_hold_ms,
			 "local", o->local, "prefill", (json_int_t)o->nprefill,
			 "decode", (json_int_t)o->ndecode, "tp", (json_int_t)o->tp,
			 "transport", o->local ? o->transport : "",
			 "chunks", (json_int_t)o->chunks_max, "chunks_min", (json_int_t)o->chunks_min,
			 "chunks_max", (json_int_t)o->chunks_max, "batch", (json_int_t)o->batch,
			 "slot_size", json_u64(o->slot_size),
			 "recv_slots", (json_int_t)o->recv_slots,
			 "send_slots", (json_int_t)o->send_slots,
			 "concurrency", (json_int_t)o->concurrency, "abort_rate", o->abort_rate,
			 "partial", o->partial, "seed", json_u64(o->seed),
			 "timeout_s", (json_int_t)o->timeout_s);
}

/* First pd_put -> PUT_DONE per ok request (its slowest prefill rank). */
static json_t *json_xfer(const struct pd_bench_result *r)
{
	return json_pack("{s:f, s:f, s:f, s:f, s:I}", "xfer_avg_us",
			 pd_bench_mean_us(r->xfer_ns, r->nxfer), "xfer_p50_us", xfer_us(r, 0.50),
			 "xfer_p99_us", xfer_us(r, 0.99), "xfer_p999_us", xfer_us(r, 0.999),
			 "xfer_samples", (json_int_t)r->nxfer);
}

/* One object: the results, the verdict's counts, the options, then what
 * came later (inject_corruption, warmup, the xfer_* figures). */
static json_t *json_doc(const struct pd_bench_opts *o, const struct pd_bench_result *r)
{
	json_t *doc = json_results(r);

	if (json_object_update_new(doc, json_verdict(r)) < 0 ||
	    json_object_update_new(doc, json_options(o)) < 0 ||
	    json_object_set_new(doc, "inject_corruption", json_integer(o->inject_every)) < 0 ||
	    json_object_set_new(doc, "warmup", json_integer(o->warmup)) < 0 ||
	    json_object_update_new(doc, json_xfer(r)) < 0) {
		json_decref(doc);
		return NULL;
	}
	return doc;
}

/* doc into f: indented, a member a line (tools/compare-peers.sh reads
 * "gb_per_s" with sed); reals with 15 digits (DBL_DIG, as pdctl), which
 * print a decimal such as --abort-rate 0.2 as itself. */
static int json_write(FILE *f, json_t *doc)
{
	if (!doc)
		return -ENOMEM;
	if (json_dumpf(doc, f, JSON_INDENT(2) | JSON_REAL_PRECISION(DBL_DIG)) < 0 ||
	    fputc('\n', f) == EOF || ferror(f))
		return -EIO;
	return 0;
}

int pd_bench_json_write(json_t *doc, const char *path)
{
	int out = !strcmp(path, "-");
	FILE *f = out ? stdout : fopen(path, "w");
	int rc;

	if (!f) {
		rc = -errno;
		(void)fprintf(stderr, "pdbench: --json %s: %s\n", path, strerror(-rc));
		return rc;
	}
	rc = json_write(f, doc);
	if (out ? fflush(f) != 0 : fclose(f) != 0)
		rc = rc ? rc : -errno;
	if (rc < 0)
		(void)fprintf(stderr, "pdbench: --json %s: %s\n", path, strerror(-rc));
	return rc;
}

int pd_bench_report_json(const struct pd_bench_opts *o, struct pd_bench_result *r,
			 const char *path)
{
	json_t *doc = json_doc(o, r);
	int rc = pd_bench_json_write(doc, path);

	json_decref(doc);
	return rc;
}

int pd_bench_report_exit(const struct pd_bench_result *r)
{
	if (r->lost || r->corrupted || r->failed || r->bad_exits ||
	    (r->leaks_counted && (r->leaked_slots || r->reserved_left || r->waiting_left)))
		return 1;
	return r->ok + r->cancelled == r->requests ? 0 : 1;
}
