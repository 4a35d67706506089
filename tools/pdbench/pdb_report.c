/* SPDX-License-Identifier: MIT */
/* pdbench: the progress line, the summary table, the JSON file, the verdict. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* Nearest-rank quantile of n samples (sorted by the coordinator), in ms. */
static double quantile_ms(const uint64_t *v, uint32_t n, double q)
{
	uint32_t i;

	if (!n)
		return 0.0;
	i = (uint32_t)(q * n + 0.999999);
	i = i == 0 ? 0 : i - 1;
	if (i >= n)
		i = n - 1;
	return (double)v[i] / 1e6;
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

static void print_engine(const struct pd_bench_opts *o, const struct pd_bench_result *r)
{
	if (o->engine == PD_BENCH_ENGINE_THREADS) {
		printf("  engine      threads: a thread per request in flight\n");
		return;
	}
	printf("  engine      step: one scheduler thread per prefill rank; %" PRIu64 " steps, %"
	       PRIu64 " idle sleeps (%" PRIu64 " ended by pd_agent_fd)\n", r->steps, r->sleeps,
	       r->fd_wakes);
}

static void print_admission(const struct pd_bench_result *r)
{
	printf("  admit wait  p50 <= %.2f ms, p99 <= %.2f ms (decode brokers' histogram)\n",
	       (double)r->admit_p50_ns / 1e6, (double)r->admit_p99_ns / 1e6);
	printf("  admission   p50 %.2f ms, p99 %.2f ms over %" PRIu32 " requests (pd_declare -> "
	       "ADMITTED, slowest rank); %" PRIu64 " pd_alloc deferred (-EAGAIN: not admitted "
	       "yet)\n", sadmit_ms(r, 0.50), sadmit_ms(r, 0.99), r->nsadmit, r->deferred);
}

void pd_bench_report_print(const struct pd_bench_opts *o, struct pd_bench_result *r)
{
	char slot[32];

	size_str(slot, sizeof(slot), o->slot_size);
	printf("pdbench: %" PRIu32 " prefill x %" PRIu32 " decode brokers, tp %" PRIu32
	       ", %s, slot %s, recv-slots %" PRIu32 ", send-slots %" PRIu32 "\n",
	       o->nprefill, o->ndecode, o->tp, o->local ? o->transport : "(attached)", slot,
	       o->recv_slots, o->send_slots);
	print_engine(o, r);
	printf("  load        %" PRIu32 " requests, concurrency %" PRIu32 ", chunks %" PRIu32
	       "..%" PRIu32 " per rank, batch %" PRIu32 ", abort-rate %.2f, decode-hold %" PRIu32
	       " ms, seed %" PRIu64 "\n", o->requests, o->concurrency, o->chunks_min,
	       o->chunks_max, o->batch, o->abort_rate, o->decode_hold_ms, o->seed);
	printf("  requests    %" PRIu32 " ok, %" PRIu32 " failed, %" PRIu32 " cancelled%s\n",
	       r->ok, r->failed, r->cancelled, r->interrupted ? " (interrupted)" : "");
	printf("  data        %.3f GB verified in %.2f s = %.2f GB/s\n", (double)r->bytes / 1e9,
	       r->seconds, gbps(r->bytes, r->seconds));
	printf("  latency     p50 %.2f ms, p99 %.2f ms (first pd_declare -> decode verified)\n",
	       lat_ms(r, 0.50), lat_ms(r, 0.99));
	print_admission(r);
	if (r->leaks_checked) /* the brokers were read at the end */
		printf("  moved       tcp %.3f GB, shm %.3f GB, rdma %.3f GB (the prefill brokers' "
		       "transports)\n", (double)r->moved.tcp / 1e9, (double)r->moved.shm / 1e9,
		       (double)r->moved.rdma / 1e9);
	if (r->bad_exits)
		printf("  processes   %" PRIu32 " agent processes or brokers did not exit cleanly\n",
		       r->bad_exits);
	if (r->reserved_left || r->waiting_left)
		printf("  admission   left at the end: %" PRIu64 " slots reserved, %" PRIu64
		       " requests waiting (leaked)\n", r->reserved_left, r->waiting_left);
	printf("%" PRIu32 " lost, %" PRIu32 " corrupted, %" PRIu64 " leaked slots%s\n", r->lost,
	       r->corrupted, r->leaked_slots, !r->leaks_checked ? " (not checked)" :
	       r->leaks_counted ? "" : " (brokers not ours: slots in use, not counted)");
	(void)fflush(stdout);
}

static void json_str(FILE *f, const char *s)
{
	(void)fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			(void)fprintf(f, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			(void)fprintf(f, "\\u%04x", (unsigned)*s);
		else
			(void)fputc(*s, f);
	}
	(void)fputc('"', f);
}

/* A failed write leaves f's error indicator set: pd_bench_report_json checks it. */
static void json_body(FILE *f, const struct pd_bench_opts *o, const struct pd_bench_result *r)
{
	(void)fprintf(f, "{\n  \"requests\": %" PRIu32 ",\n  \"requests_ok\": %" PRIu32
		",\n  \"requests_failed\": %" PRIu32 ",\n  \"requests_cancelled\": %" PRIu32
		",\n  \"bytes\": %" PRIu64 ",\n  \"seconds\": %.6f,\n  \"gb_per_s\": %.6f,\n",
		r->requests, r->ok, r->failed, r->cancelled, r->bytes, r->seconds,
		gbps(r->bytes, r->seconds));
	(void)fprintf(f, "  \"lat_p50_ms\": %.6f,\n  \"lat_p99_ms\": %.6f,\n  \"admit_wait_p50_ms\": %.6f,"
		"\n  \"admit_wait_p99_ms\": %.6f,\n", lat_ms(r, 0.50), lat_ms(r, 0.99),
		(double)r->admit_p50_ns / 1e6, (double)r->admit_p99_ns / 1e6);
	(void)fprintf(f, "  \"sender_admit_p50_ms\": %.6f,\n  \"sender_admit_p99_ms\": %.6f,\n"
		"  \"sender_admit_samples\": %" PRIu32 ",\n  \"alloc_deferred\": %" PRIu64 ",\n",
		sadmit_ms(r, 0.50), sadmit_ms(r, 0.99), r->nsadmit, r->deferred);
	(void)fprintf(f, "  \"engine_steps\": %" PRIu64 ",\n  \"engine_sleeps\": %" PRIu64
		",\n  \"engine_fd_wakeups\": %" PRIu64 ",\n", r->steps, r->sleeps, r->fd_wakes);
	(void)fprintf(f, "  \"reserved_left\": %" PRIu64 ",\n  \"waiting_left\": %" PRIu64 ",\n",
		r->reserved_left, r->waiting_left);
	(void)fprintf(f, "  \"moved_tcp_bytes\": %" PRIu64 ",\n  \"moved_shm_bytes\": %" PRIu64
		",\n  \"moved_rdma_bytes\": %" PRIu64 ",\n", r->moved.tcp, r->moved.shm,
		r->moved.rdma);
	(void)fprintf(f, "  \"lost\": %" PRIu32 ",\n  \"corrupted\": %" PRIu32
		",\n  \"corrupted_chunks\": %" PRIu64 ",\n  \"leaked_slots\": %" PRIu64
		",\n  \"leaks_checked\": %s,\n  \"leaks_counted\": %s,\n"
		"  \"interrupted\": %s,\n  \"bad_exits\": %" PRIu32 ",\n", r->lost, r->corrupted,
		r->corrupted_chunks, r->leaked_slots, r->leaks_checked ? "true" : "false",
		r->leaks_counted ? "true" : "false", r->interrupted ? "true" : "false", r->bad_exits);
	(void)fprintf(f, "  \"engine\": \"%s\",\n  \"decode_hold_ms\": %" PRIu32 ",\n",
		engine_name(o), o->decode_hold_ms);
	(void)fprintf(f, "  \"local\": %s,\n  \"prefill\": %" PRIu32 ",\n  \"decode\": %" PRIu32
		",\n  \"tp\": %" PRIu32 ",\n  \"transport\": ", o->local ? "true" : "false",
		o->nprefill, o->ndecode, o->tp);
	json_str(f, o->local ? o->transport : "");
	(void)fprintf(f, ",\n  \"chunks\": %" PRIu32 ",\n  \"chunks_min\": %" PRIu32
		",\n  \"chunks_max\": %" PRIu32 ",\n  \"batch\": %" PRIu32 ",\n  \"slot_size\": %" PRIu64
		",\n  \"recv_slots\": %" PRIu32 ",\n  \"send_slots\": %" PRIu32, o->chunks_max,
		o->chunks_min, o->chunks_max, o->batch, o->slot_size, o->recv_slots, o->send_slots);
	(void)fprintf(f, ",\n  \"concurrency\": %" PRIu32 ",\n  \"abort_rate\": %.6f,\n  \"partial\": %s,"
		"\n  \"seed\": %" PRIu64 ",\n  \"timeout_s\": %" PRIu32 "\n}\n", o->concurrency,
		o->abort_rate, o->partial ? "true" : "false", o->seed, o->timeout_s);
}

int pd_bench_report_json(const struct pd_bench_opts *o, struct pd_bench_result *r,
			 const char *path)
{
	FILE *f = fopen(path, "w");
	int rc;

	if (!f) {
		rc = -errno;
		(void)fprintf(stderr, "pdbench: --json %s: %s\n", path, strerror(-rc));
		return rc;
	}
	json_body(f, o, r);
	rc = ferror(f) ? -EIO : 0;
	if (fclose(f) != 0 && rc == 0)
		rc = -errno;
	if (rc < 0)
		(void)fprintf(stderr, "pdbench: --json %s: %s\n", path, strerror(-rc));
	return rc;
}

int pd_bench_report_exit(const struct pd_bench_result *r)
{
	if (r->lost || r->corrupted || r->failed || r->bad_exits ||
	    (r->leaks_counted && (r->leaked_slots || r->reserved_left || r->waiting_left)))
		return 1;
	return r->ok + r->cancelled == r->requests ? 0 : 1;
}
