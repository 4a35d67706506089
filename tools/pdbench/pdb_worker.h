/* SPDX-License-Identifier: MIT */
#ifndef PD_TOOLS_PDBENCH_PDB_WORKER_H
#define PD_TOOLS_PDBENCH_PDB_WORKER_H

/*
 * Inside one worker process (one agent: a prefill or decode TP rank).
 * Decode workers, and prefill workers of --engine threads: the main thread
 * reads the coordinator's orders; a pool of threads runs one request each;
 * a prefill worker has one more thread that reads the agent's events and
 * hands each to its request. Prefill workers of --engine step: the main
 * thread is the engine (pdb_engine.c), orders, events and steps in one
 * loop; the request table and locks below are not used.
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
	uint64_t t_admit;            /* prefill: when PD_EV_ADMITTED arrived, 0 not yet */
	uint64_t t_event;            /* prefill: when PUT_DONE / PUT_FAILED arrived */
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

/* What a prefill rank knows of a request as it ends (both engines). */
struct pd_bench_sout {
	uint32_t req;
	int declared;                /* its pd_declare reached the broker */
	int32_t err;                 /* a local failure that ended it (a timeout...), or 0 */
	int has_event;               /* its PUT_DONE / PUT_FAILED arrived */
	uint32_t ev_type;
	int32_t ev_status;
	int gone;                    /* the broker went away */
	uint64_t t_decl, t_admit;    /* MONOTONIC ns, 0: none */
	uint64_t t_put, t_event;     /* its first pd_put was called; its event arrived */
	uint32_t deferred;           /* pd_alloc answers -EAGAIN */
	uint32_t steps, sleeps, fd_wakes; /* --engine step: since its previous report */
};

/* A prefill rank's request, as both engines stage it. */
struct pd_bench_sreq {
	uint32_t req, chunks, decode;
	uint32_t nb;                 /* batches */
	char id[PD_REQ_ID_MAX + 1];
};

#define PD_BENCH_KEY_LEN 64u

/* Scratch for staging one batch (--batch entries each). */
struct pd_bench_stage {
	pd_slot_ref *refs;
	struct pd_chunk *ch;
	char (*keys)[PD_BENCH_KEY_LEN];
};

/* pdb_send.c */
void pd_bench_sreq_init(struct pd_bench_sreq *r, const struct pd_bench_wk *w, uint32_t req,
			uint32_t chunks, uint32_t decode);
/* The declaration of this rank's part of r, with an admission deadline. */
void pd_bench_sreq_decl(const struct pd_bench_sreq *r, const struct pd_bench_wk *w,
			uint32_t timeout_ms, struct pd_decl *d);
/* Chunks in batch b. */
uint32_t pd_bench_sreq_count(const struct pd_bench_sreq *r, const struct pd_bench_wk *w,
			     uint32_t b);
int pd_bench_stage_init(struct pd_bench_stage *st, uint32_t batch);
void pd_bench_stage_fini(struct pd_bench_stage *st);
/* Write batch b of r (n chunks) into the loaned st->refs; *pb describes it
 * for pd_put (valid while st and r are). */
void pd_bench_stage_fill(struct pd_bench_stage *st, const struct pd_bench_wk *w,
			 const struct pd_bench_sreq *r, uint32_t b, struct pd_batch *pb);
/* The rank's outcome (PRESULT) from what it knows. */
void pd_bench_send_report(struct pd_bench_wk *w, const struct pd_bench_sout *o);
void pd_bench_send_run(struct pd_bench_wk *w, uint32_t req);
void *pd_bench_send_events(void *arg);
/* A relayed cancel or a quit: mark req cancelled, then pd_cancel (main thread). */
void pd_bench_send_cancel(struct pd_bench_wk *w, uint32_t req);

/* pdb_engine.c: the prefill rank of --engine step, until QUIT. */
void pd_bench_engine_run(struct pd_bench_wk *w);

/* pdb_recv.c */
void pd_bench_recv_run(struct pd_bench_wk *w, uint32_t req);

#endif
