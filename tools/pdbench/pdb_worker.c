/* SPDX-License-Identifier: MIT */
/*
 * pdbench: worker processes. Each is forked from the (still single-
 * threaded) coordinator, attaches one agent (one TP rank of one broker),
 * then runs requests as the coordinator orders: a thread per request in
 * flight (decode ranks, and prefill ranks of --engine threads), or one
 * engine thread (prefill ranks of --engine step, pdb_engine.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pd_time.h"
#include "pdb_worker.h"

#define READY_WAIT_MS 15000u
#define QUIT_WAIT_MS  10000u

int pd_bench_msg_send(int fd, const struct pd_bench_msg *m)
{
	ssize_t n;

	do {
		n = send(fd, m, sizeof(*m), MSG_NOSIGNAL);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return n == (ssize_t)sizeof(*m) ? 0 : -EPROTO;
}

int pd_bench_msg_recv(int fd, struct pd_bench_msg *m)
{
	ssize_t n;

	do {
		n = recv(fd, m, sizeof(*m), 0);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return 0;
	return n == (ssize_t)sizeof(*m) ? 1 : -EPROTO;
}

void pd_bench_wk_send(struct pd_bench_wk *w, const struct pd_bench_msg *m)
{
	(void)pd_bench_msg_send(w->fd, m); /* the coordinator is gone: we are killed soon */
}

void pd_bench_wk_wait(struct pd_bench_wk *w, uint64_t deadline_ns)
{
	struct timespec ts = pd_ns_to_ts(deadline_ns);

	(void)pthread_cond_timedwait(&w->cond, &w->lock, &ts);
}

/* ---- in the worker ------------------------------------------------------------ */

static void *pool_thread(void *arg)
{
	struct pd_bench_wk *w = arg;
	uint32_t req;

	(void)pthread_mutex_lock(&w->lock);
	for (;;) {
		while (!w->quit && w->q_count == 0)
			pd_bench_wk_wait(w, pd_deadline_ms(1000));
		if (w->q_count == 0)
			break;
		req = w->queue[w->q_head];
		w->q_head = (w->q_head + 1) % w->env->o->requests;
		w->q_count--;
		(void)pthread_mutex_unlock(&w->lock);
		if (w->decode)
			pd_bench_recv_run(w, req);
		else
			pd_bench_send_run(w, req);
		(void)pthread_mutex_lock(&w->lock);
		w->req[req].active = 0;
		w->nactive--;
		(void)pthread_cond_broadcast(&w->cond);
	}
	(void)pthread_mutex_unlock(&w->lock);
	return NULL;
}

static void on_start(struct pd_bench_wk *w, const struct pd_bench_msg *m)
{
	struct pd_bench_wreq *q = &w->req[m->req];

	(void)pthread_mutex_lock(&w->lock);
	if (!q->active && w->q_count < w->env->o->requests) {
		memset(q, 0, sizeof(*q));
		q->active = 1;
		w->nactive++;
		q->chunks = m->chunks;
		q->decode = m->decode;
		q->stage = m->stage;
		q->batch = m->batch;
		q->flags = m->flags;
		w->queue[(w->q_head + w->q_count) % w->env->o->requests] = m->req;
		w->q_count++;
		(void)pthread_cond_broadcast(&w->cond);
	}
	(void)pthread_mutex_unlock(&w->lock);
}

/* One order from the coordinator. 0 carry on, 1 quit. */
static int on_order(struct pd_bench_wk *w, const struct pd_bench_msg *m)
{
	if (m->type == PD_BENCH_M_QUIT)
		return 1;
	if (m->req >= w->env->o->requests)
		return 0;
	if (m->type == PD_BENCH_M_START || m->type == PD_BENCH_M_WAIT) {
		on_start(w, m);
		return 0;
	}
	if (m->type == PD_BENCH_M_GATE && !w->decode && !m->stage) {
		pd_bench_send_cancel(w, m->req); /* sets gate = 2 too */
		return 0;
	}
	(void)pthread_mutex_lock(&w->lock);
	if (m->type == PD_BENCH_M_GATE)
		w->req[m->req].gate = 1;
	else if (m->type == PD_BENCH_M_STOP)
		w->req[m->req].stop = 1;
	else if (m->type == PD_BENCH_M_GO)
		w->req[m->req].go = 1;
	else if (m->type == PD_BENCH_M_RELEASE)
		w->req[m->req].release = 1;
	(void)pthread_cond_broadcast(&w->cond);
	(void)pthread_mutex_unlock(&w->lock);
	return 0;
}

/* Quit: requests still running are cut short (cancelled / stopped). */
static void cut_short(struct pd_bench_wk *w)
{
	(void)pthread_mutex_lock(&w->lock);
	w->quit = 1;
	(void)pthread_cond_broadcast(&w->cond);
	(void)pthread_mutex_unlock(&w->lock);
	for (uint32_t i = 0; !w->decode && i < w->env->o->requests; i++) {
		uint32_t busy;

		(void)pthread_mutex_lock(&w->lock);
		busy = w->req[i].active;
		(void)pthread_mutex_unlock(&w->lock);
		if (busy)
			pd_bench_send_cancel(w, i);
	}
}

static int attach(struct pd_bench_wk *w)
{
	const struct pd_bench_broker *b = &w->env->c->b[w->broker];
	struct pd_agent_opts ao;

	pd_agent_opts_init(&ao, sizeof(ao));
	ao.broker = b->name;
	ao.rundir = w->env->c->rundir[0] ? w->env->c->rundir : NULL;
	ao.roles = w->decode ? PD_AGENT_RECV : PD_AGENT_SEND;
	ao.tp_rank = w->rank;
	ao.tp_size = w->env->o->tp;
	ao.attach_timeout_ms = 5000;
	return pd_agent_attach(&ao, &w->a);
}

static int wk_init(struct pd_bench_wk *w)
{
	uint32_t r = w->env->o->requests;
	pthread_condattr_t ca;

	w->req = calloc(r, sizeof(*w->req));
	w->queue = calloc(r, sizeof(*w->queue));
	if (!w->req || !w->queue)
		return -ENOMEM;
	(void)pthread_mutex_init(&w->lock, NULL);
	(void)pthread_mutex_init(&w->put_lock, NULL);
	(void)pthread_condattr_init(&ca);
	(void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* deadlines are MONOTONIC */
	(void)pthread_cond_init(&w->cond, &ca);
	(void)pthread_condattr_destroy(&ca);
	return 0;
}

/* Threads up, orders in, threads down. */
static void wk_serve(struct pd_bench_wk *w)
{
	uint32_t n = w->env->o->concurrency + 2, started = 0;
	pthread_t *t = calloc(n + 1, sizeof(*t));
	struct pd_bench_msg m;
	int rc;

	for (uint32_t i = 0; t && i < n; i++)
		started += pthread_create(&t[started], NULL, pool_thread, w) == 0;
	if (t && !w->decode && pthread_create(&t[started], NULL, pd_bench_send_events, w) == 0)
		started++;
	while ((rc = pd_bench_msg_recv(w->fd, &m)) == 1 && started)
		if (on_order(w, &m))
			break;
	cut_short(w);
	for (uint32_t i = 0; i < started; i++)
		(void)pthread_join(t[i], NULL);
	free(t);
	if (w->stray_events)
		(void)fprintf(stderr, "pdbench: %s rank %" PRIu32 ": %" PRIu64 " events of no request\n",
			w->env->c->b[w->broker].name, w->rank, w->stray_events);
}

static void worker_main(const struct pd_bench_env *env, uint32_t broker, uint32_t rank,
			int fd)
{
	struct pd_bench_wk w = { .env = env, .fd = fd, .broker = broker, .rank = rank,
				 .decode = env->c->b[broker].decode };
	struct pd_bench_msg m = { .type = PD_BENCH_M_READY };
	int rc = wk_init(&w);

	if (rc == 0)
		rc = attach(&w);
	m.status = rc;
	pd_bench_wk_send(&w, &m);
	if (rc == 0 && !w.decode && env->o->engine == PD_BENCH_ENGINE_STEP)
		pd_bench_engine_run(&w); /* this thread is the engine */
	else if (rc == 0)
		wk_serve(&w);
	pd_agent_detach(w.a);
	free(w.req);
	free(w.queue);
	exit(rc == 0 ? 0 : 1);
}

/* ---- in the coordinator --------------------------------------------------------- */

static pid_t worker_fork(const struct pd_bench_env *env, struct pd_bench_worker *w, uint32_t i)
{
	pid_t parent = getpid(), pid;
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	(void)fflush(NULL);
	pid = fork();
	if (pid < 0) {
		pid = -errno;
		(void)close(sv[0]);
		(void)close(sv[1]);
		return pid;
	}
	if (pid == 0) {
		(void)setpgid(0, 0);
		(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		(void)signal(SIGINT, SIG_DFL);
		(void)signal(SIGTERM, SIG_DFL);
		for (uint32_t j = 0; j < i; j++)
			(void)close(w[j].fd);
		(void)close(sv[0]);
		worker_main(env, w[i].broker, w[i].rank, sv[1]);
	}
	(void)close(sv[1]);
	w[i].fd = sv[0];
	return pid;
}

static int wait_ready(struct pd_bench_worker *w, uint32_t n, const volatile sig_atomic_t *stop)
{
	uint64_t deadline = pd_deadline_ms(READY_WAIT_MS);
	struct pd_bench_msg m;

	for (uint32_t i = 0; i < n; i++) {
		struct pollfd p = { .fd = w[i].fd, .events = POLLIN };
		int rc = 0;

		while (!*stop && pd_now_ns() < deadline && (rc = poll(&p, 1, 100)) == 0)
			;
		if (*stop)
			return -EINTR;
		rc = rc > 0 ? pd_bench_msg_recv(w[i].fd, &m) : -ETIMEDOUT;
		if (rc == 1 && m.type == PD_BENCH_M_READY && m.status == 0) {
			w[i].ready = 1;
			continue;
		}
		rc = rc == 1 ? m.status : rc == 0 ? -ECHILD : rc;
		(void)fprintf(stderr, "pdbench: agent process (broker index %" PRIu32 ", rank %" PRIu32
			") could not attach: %s\n", w[i].broker, w[i].rank, pd_strerror(rc));
		return rc < 0 ? rc : -EPROTO;
	}
	return 0;
}

int pd_bench_workers_start(struct pd_bench_worker *w, uint32_t n,
			   const struct pd_bench_env *env, const volatile sig_atomic_t *stop)
{
	for (uint32_t i = 0; i < n; i++) {
		w[i].broker = i / env->o->tp;
		w[i].rank = i % env->o->tp;
		w[i].decode = env->c->b[w[i].broker].decode;
		w[i].fd = -1;
	}
	for (uint32_t i = 0; i < n; i++) {
		pid_t pid = worker_fork(env, w, i);

		if (pid < 0) {
			(void)fprintf(stderr, "pdbench: fork: %s\n", strerror((int)-pid));
			return (int)pid;
		}
		w[i].pid = pid;
	}
	return wait_ready(w, n, stop);
}

/* Reap worker i if it has exited; count an unclean exit. */
static void reap(struct pd_bench_worker *w, int status, uint32_t *bad, int killed)
{
	if (!killed && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
		(void)fprintf(stderr, "pdbench: agent process %d (broker index %" PRIu32 ", rank %" PRIu32
			") %s %d\n", (int)w->pid, w->broker, w->rank,
			WIFSIGNALED(status) ? "was killed by signal" : "exited with status",
			WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
		(*bad)++;
	}
	w->pid = 0;
}

uint32_t pd_bench_workers_stop(struct pd_bench_worker *w, uint32_t n, int kill_now)
{
	uint64_t deadline = pd_deadline_ms(QUIT_WAIT_MS);
	struct pd_bench_msg m = { .type = PD_BENCH_M_QUIT };
	uint32_t left, bad = 0;
	int status;

	for (uint32_t i = 0; i < n; i++) {
		if (w[i].pid > 0 && kill_now)
			(void)kill(w[i].pid, SIGKILL);
		else if (w[i].fd >= 0)
			(void)pd_bench_msg_send(w[i].fd, &m);
	}
	do {
		left = 0;
		for (uint32_t i = 0; i < n; i++) {
			if (w[i].pid > 0 && waitpid(w[i].pid, &status, WNOHANG) == w[i].pid)
				reap(&w[i], status, &bad, kill_now);
			left += w[i].pid > 0;
		}
		if (left) {
			struct timespec ts = { 0, 10 * 1000 * 1000 };

			(void)nanosleep(&ts, NULL);
		}
	} while (left && pd_now_ns() < deadline);
	for (uint32_t i = 0; i < n; i++) {
		if (w[i].pid > 0) {
			(void)fprintf(stderr, "pdbench: agent process %d did not quit: killed\n",
				(int)w[i].pid);
			(void)kill(w[i].pid, SIGKILL);
			(void)waitpid(w[i].pid, &status, 0);
			w[i].pid = 0;
			bad++;
		}
		if (w[i].fd >= 0)
			(void)close(w[i].fd);
		w[i].fd = -1;
	}
	return bad;
}
