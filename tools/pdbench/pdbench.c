/* SPDX-License-Identifier: MIT */
/*
 * pdbench: load generator and verifier of pdkv (see --help). The parent
 * process starts (or finds) the brokers, forks the agent processes before
 * it could have any thread, coordinates the run, then checks the brokers'
 * pools for leaked slots and reports.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd_time.h"
#include "pdb.h"

#define LEAK_WAIT_MS 3000u

static volatile sig_atomic_t stop_sig;

static void on_signal(int sig)
{
	stop_sig = sig;
}

static void signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: waits return early */
	(void)sigemptyset(&sa.sa_mask);
	(void)sigaction(SIGINT, &sa, NULL);
	(void)sigaction(SIGTERM, &sa, NULL);
	(void)signal(SIGPIPE, SIG_IGN);
}

static void make_run_id(struct pd_bench_env *env)
{
	uint64_t x = pd_bench_mix(((uint64_t)getpid() << 32) ^ pd_now_ns());

	(void)snprintf(env->run_id, sizeof(env->run_id), "%016" PRIx64, x);
}

/* The brokers up, the agent processes attached, the requests run. */
static int run(struct pd_bench_opts *o, struct pd_bench_cluster *c, struct pd_bench_result *r,
	       const volatile sig_atomic_t *stop)
{
	struct pd_bench_env env = { .o = o, .c = c };
	uint32_t nw = (o->nprefill + o->ndecode) * o->tp;
	struct pd_bench_worker *w = calloc(nw, sizeof(*w));
	int rc = w ? pd_bench_cluster_up(c, o, stop) : -ENOMEM;

	if (rc == 0)
		rc = pd_bench_cluster_probe(c, o);
	make_run_id(&env);
	if (rc == 0) {
		rc = pd_bench_workers_start(w, nw, &env, stop);
		if (rc == 0)
			rc = pd_bench_coord_run(&env, w, nw, c, r, stop);
		r->bad_exits += pd_bench_workers_stop(w, nw, rc < 0 || *stop);
	}
	if (rc == 0 && !*stop) {
		r->leaked_slots = pd_bench_cluster_leaks(c, LEAK_WAIT_MS);
		pd_bench_cluster_admission_left(c, LEAK_WAIT_MS, &r->reserved_left,
						&r->waiting_left);
		r->leaks_checked = 1;
		r->leaks_counted = o->local;
		pd_bench_cluster_admit(c, &r->admit_p50_ns, &r->admit_p99_ns);
		pd_bench_cluster_moved(c, &r->moved);
	}
	free(w);
	return rc;
}

int pd_bench_run(struct pd_bench_opts *o, struct pd_bench_result *r,
		 const volatile sig_atomic_t *stop)
{
	struct pd_bench_cluster *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return -ENOMEM;
	rc = run(o, c, r, stop);
	r->bad_exits += pd_bench_cluster_down(c, o->keep_logs);
	free(c);
	return rc;
}

void pd_bench_result_free(struct pd_bench_result *r)
{
	free(r->lat_ns);
	free(r->sadmit_ns);
	free(r->xfer_ns);
	memset(r, 0, sizeof(*r));
}

/* One run, its summary (on stderr when the JSON goes to stdout) and its
 * JSON. The exit status. */
static int single(struct pd_bench_opts *o)
{
	struct pd_bench_result r = { 0 };
	FILE *out = o->json && !strcmp(o->json, "-") ? stderr : stdout;
	int rc = pd_bench_run(o, &r, &stop_sig);

	if (r.requests) { /* the run started: what it did, even if it ended early */
		pd_bench_report_print(out, o, &r);
		if (o->json && pd_bench_report_json(o, &r, o->json) < 0 && rc == 0)
			rc = -EIO;
	}
	if (stop_sig)
		rc = 128 + stop_sig;
	else
		rc = rc < 0 ? 1 : pd_bench_report_exit(&r);
	pd_bench_result_free(&r);
	return rc;
}

int main(int argc, char **argv)
{
	struct pd_bench_opts *o = calloc(1, sizeof(*o));
	int rc = o ? pd_bench_opts_parse(o, argc, argv) : -ENOMEM;

	if (rc != 0) {
		free(o);
		return rc == 1 ? 0 : rc == 2 ? 2 : 1; /* --help; usage error; no memory */
	}
	signals();
	rc = o->sweep ? pd_bench_sweep(o, &stop_sig) : single(o);
	free(o);
	return rc;
}
