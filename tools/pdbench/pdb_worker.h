/* SPDX-License-Identifier: MIT */
#ifndef PD_TOOLS_PDBENCH_PDB_WORKER_H
#define PD_TOOLS_PDBENCH_PDB_WORKER_H

/*
 * Inside one worker process (one agent: a prefill or decode TP rank): the
 * main thread reads the coordinator's orders; a pool of threads runs one
 * request each; a prefill worker has one more thread that reads the
 * agent's events and hands each to its request.
 *
 * Locking: wk.lock guards the request table, the queue and the flags;
 * wk.cond is broadcast on every change. wk.put_lock serialises pd_put()
 * (one producer per agent) and orders it with a relayed cancel.
 */
#include <pthread.h>
#include <stdint.h>

#include <pdkv/agent.h>

#include "pdb.h"

struct pd_bench_wreq {
	uint32_t active;             /* started, not finished */
	uint32_t chunks, decode, stage, batch, flags;
	uint32_t gate;               /* prefill: 0 none yet, 1 proceed, 2 cancel */
	uint32_t cancelled;          /* prefill: relayed cancel (under put_lock too) */
	uint32_t has_event;          /* prefill: PUT_DONE / PUT_FAILED arrived */
	uint32_t ev_type;
	int32_t ev_status;
	uint32_t go;                 /* decode: the prefill side is done: wait now */
	uint32_t stop;               /* decode: stop waiting (or release now) */
	uint32_t release;            /* decode: every rank verified: release */
};

struct pd_bench_wk {
	const struct pd_bench_env *env;
	struct pd_agent *a;
	int fd;                      /* to the coordinator */
	uint32_t broker, rank;
	int decode;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_mutex_t put_lock;
	struct pd_bench_wreq *req;   /* [requests] */
	uint32_t *queue;             /* ring of request indexes, [requests] */
	uint32_t q_head, q_count;
	uint32_t nactive;            /* requests started, not finished */
	int quit;
	int gone;                    /* the broker went away */
	uint64_t stray_events;
};

/* Report to the coordinator (any thread). */
void pd_bench_wk_send(struct pd_bench_wk *w, const struct pd_bench_msg *m);
/* Wait on wk.cond until deadline_ns (lock held). */
void pd_bench_wk_wait(struct pd_bench_wk *w, uint64_t deadline_ns);

/* pdb_send.c */
void pd_bench_send_run(struct pd_bench_wk *w, uint32_t req);
void *pd_bench_send_events(void *arg);
/* A relayed cancel or a quit: mark req cancelled, then pd_cancel (main thread). */
void pd_bench_send_cancel(struct pd_bench_wk *w, uint32_t req);

/* pdb_recv.c */
void pd_bench_recv_run(struct pd_bench_wk *w, uint32_t req);

#endif
