/* SPDX-License-Identifier: MIT */
#ifndef PD_TOOLS_PDBENCH_PDB_H
#define PD_TOOLS_PDBENCH_PDB_H

/*
 * pdbench internals, shared by the pdbench sources only.
 *
 * Processes: the parent is the coordinator (single-threaded, never attaches
 * an agent). In --local mode it starts the brokers (pdbroker children).
 * Then it forks one worker process per (broker, TP rank): prefill workers
 * send, decode workers receive and verify. Workers talk to the coordinator
 * over a SOCK_SEQPACKET socketpair, one struct pd_bench_msg per packet.
 * Decode workers run a thread per request in flight. Prefill workers run
 * one of two engines (--engine): "step" (pdb_engine.c), one thread running
 * scheduler steps over every request in flight, as an inference engine with
 * chunked prefill does; or "threads" (pdb_send.c), a thread per request in
 * flight blocking in pd_alloc().
 */
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include <pdkv/types.h>

struct pd_stats;

#define PD_BENCH_MAX_BROKERS 32u
#define PD_BENCH_MAX_TP      64u    /* PD_RX_MAX_RANKS */
#define PD_BENCH_MAX_REQS    1000000u
#define PD_BENCH_MAX_CONC    256u
#define PD_BENCH_NAME_MAX    63u
#define PD_BENCH_EP_MAX      127u   /* PD_ENDPOINT_MAX */
#define PD_BENCH_PATH_MAX    256u
#define PD_BENCH_SLICE_MS    250u   /* decode waits re-check their orders this often */
#define PD_BENCH_MAX_HOLD_MS 60000u
#define PD_BENCH_SWEEP_MAX   16u    /* values in one --sweep-* list */

/* Prefill engines (--engine). */
#define PD_BENCH_ENGINE_STEP    1u  /* one thread, scheduler steps (the default) */
#define PD_BENCH_ENGINE_THREADS 2u  /* a thread per request in flight */

/* ---- options (pdb_opts.c) --------------------------------------------------- */

struct pd_bench_opts {
	int local;
	uint32_t nprefill, ndecode, tp;
	char transport[64];
	uint32_t recv_slots, send_slots;
	uint32_t send_pools;             /* --send-pools of the prefill brokers (--local) */
	uint64_t slot_size;          /* chunk size (and, with --local, the slot size) */
	int slot_size_set;
	uint32_t requests, concurrency; /* requests: every request run, warm-up included */
	uint32_t warmup;             /* the first `warmup` requests: not in the figures */
	uint32_t chunks_min, chunks_max;
	uint32_t batch;
	double abort_rate;
	int partial;                 /* the last chunk of each rank is partial */
	int early_wait;              /* decode ranks wait from the start, in slices */
	uint32_t engine;             /* PD_BENCH_ENGINE_* */
	uint32_t decode_hold_ms;     /* a decode rank holds a verified request this long */
	uint32_t inject_every;       /* --inject-corruption N: one byte changed in every Nth
				      * request (0: none) */
	char proxy[PD_BENCH_EP_MAX + 1];
	char phost[64], dhost[64];   /* --local: the brokers' control and data address */
	uint64_t seed;
	const char *json;            /* NULL: no JSON file */
	int quiet;
	uint32_t timeout_s;          /* per request */
	const char *broker_bin;      /* NULL: beside this program */
	int keep_logs;
	const char *rundir;          /* attach mode: NULL = the brokers' default */
	int requests_set, warmup_set, recv_set, send_set; /* given on the command line */
	int sweep;                   /* --sweep: a run per (chunk, batch, concurrency) */
	uint64_t sweep_chunk[PD_BENCH_SWEEP_MAX];
	uint64_t sweep_batch[PD_BENCH_SWEEP_MAX], sweep_conc[PD_BENCH_SWEEP_MAX];
	uint32_t nsweep_chunk, nsweep_batch, nsweep_conc;
	uint64_t sweep_bytes;        /* a row's data, without --requests */
	char pname[PD_BENCH_MAX_BROKERS][PD_BENCH_NAME_MAX + 1];
	char dname[PD_BENCH_MAX_BROKERS][PD_BENCH_NAME_MAX + 1];
	char dctrl[PD_BENCH_MAX_BROKERS][PD_BENCH_EP_MAX + 1];
};

/* Parse argv into o. @return 0 run; 1 --help printed; 2 usage error (printed). */
int pd_bench_opts_parse(struct pd_bench_opts *o, int argc, char **argv);

/* ---- brokers (pdb_cluster.c) -------------------------------------------------- */

struct pd_bench_broker {
	char name[PD_BENCH_NAME_MAX + 1];
	char ctrl[PD_BENCH_EP_MAX + 1];   /* decode brokers: where prefill sends */
	char log[PD_BENCH_PATH_MAX + 80]; /* --local only: <rundir>/<name>.log */
	pid_t pid;                        /* --local only; 0 once reaped */
	int decode;                       /* 1 decode, 0 prefill */
	struct pd_stats *stats0;          /* statistics at the start */
};

struct pd_bench_cluster {
	char rundir[PD_BENCH_PATH_MAX];   /* "" with the brokers' default */
	int own_rundir;                   /* made by us: removed at the end */
	uint32_t nprefill, ndecode;
	struct pd_bench_broker b[2 * PD_BENCH_MAX_BROKERS]; /* prefill first, then decode */
};

/* Start (--local) or describe (attach mode) the brokers. 0 or -errno (printed). */
int pd_bench_cluster_up(struct pd_bench_cluster *c, const struct pd_bench_opts *o,
			const volatile sig_atomic_t *stop);
/* Snapshot the decode brokers' statistics and check the slot sizes against
 * the chunk size (o->slot_size is set from them in attach mode). 0 / -errno. */
int pd_bench_cluster_probe(struct pd_bench_cluster *c, struct pd_bench_opts *o);
/* A broker (--local) that exited: its index, or -1. Prints its log tail. */
int pd_bench_cluster_check(struct pd_bench_cluster *c);
/* Slots not free in every broker's pools, polled up to wait_ms. */
uint64_t pd_bench_cluster_leaks(const struct pd_bench_cluster *c, uint32_t wait_ms);
/* Payload bytes the prefill brokers' transports moved since the probe. */
struct pd_bench_moved {
	uint64_t tcp, shm, rdma;
};
void pd_bench_cluster_moved(const struct pd_bench_cluster *c, struct pd_bench_moved *m);
/* Slots reserved (admitted requests, not granted) and requests waiting
 * for admission at the decode brokers, polled up to wait_ms until 0. */
void pd_bench_cluster_admission_left(const struct pd_bench_cluster *c, uint32_t wait_ms,
				     uint64_t *reserved, uint64_t *waiting);
/* Admission wait quantiles (ns) over the decode brokers since the probe. */
void pd_bench_cluster_admit(const struct pd_bench_cluster *c, uint64_t *p50, uint64_t *p99);
/* Stop the brokers (--local), remove the rundir unless keep. Idempotent.
 * @return brokers that did not exit cleanly on SIGTERM (their log printed). */
uint32_t pd_bench_cluster_down(struct pd_bench_cluster *c, int keep);
/* Print the last lines of broker i's log to stderr. */
void pd_bench_cluster_tail(const struct pd_bench_cluster *c, uint32_t i);

/* ---- messages between the coordinator and the workers ------------------------ */

#define PD_BENCH_M_READY    1u  /* worker: attached (status 0) or not */
#define PD_BENCH_M_START    2u  /* -> prefill: send request req */
#define PD_BENCH_M_WAIT     3u  /* -> decode: wait for req, verify it */
#define PD_BENCH_M_GATE     4u  /* -> prefill: stage 1 proceed, 0 cancel */
#define PD_BENCH_M_STOP     5u  /* -> decode: stop waiting for req */
#define PD_BENCH_M_RELEASE  6u  /* -> decode: every rank verified req: release it */
#define PD_BENCH_M_QUIT     7u  /* -> worker: detach and exit */
#define PD_BENCH_M_ABORTED  8u  /* prefill: this rank cancelled req (flags DECLARED) */
#define PD_BENCH_M_PRESULT  9u  /* prefill: this rank's outcome for req */
#define PD_BENCH_M_DRESULT  10u /* decode: this rank's outcome for req */
#define PD_BENCH_M_RELEASED 11u /* decode: pd_recv_release() returned status */
#define PD_BENCH_M_GO       12u /* -> decode: every prefill rank has PUT_DONE: wait now */

/* Outcomes of one rank (kind). */
#define PD_BENCH_R_DONE      1u /* PUT_DONE / READY and verified */
#define PD_BENCH_R_FAILED    2u /* PUT_FAILED or a failed status (status says why) */
#define PD_BENCH_R_CANCELLED 3u /* cancelled before submitting anything: no event */
#define PD_BENCH_R_TIMEOUT   4u /* no outcome within --timeout */
#define PD_BENCH_R_STOPPED   5u /* decode: told to stop waiting */

/* Abort stages (pd_cancel by one rank). Every stage comes after the rank's
 * pd_declare: the cancel of a declared request (admitted or not) always
 * reaches the decode broker, which withdraws its reservation. */
#define PD_BENCH_AB_NONE       0u
#define PD_BENCH_AB_BEFORE     1u /* declared, before the first pd_alloc */
#define PD_BENCH_AB_ALLOCATED  2u /* after pd_alloc of batch b, before its pd_put */
#define PD_BENCH_AB_BETWEEN    3u /* after pd_put of batch b, before the next pd_alloc */
#define PD_BENCH_AB_AFTER      4u /* after the last pd_put */

#define PD_BENCH_F_GATED     0x1u /* START: wait for GATE before the last batch */
#define PD_BENCH_F_DECLARED  0x2u /* ABORTED/PRESULT: this rank's pd_declare reached the
				   * broker (so its cancel reaches the decode broker) */

struct pd_bench_msg {
	uint32_t type;               /* PD_BENCH_M_* */
	uint32_t req;                /* request index */
	uint32_t chunks;             /* START/WAIT: chunks per rank */
	uint32_t decode;             /* START: decode broker index (0-based) */
	uint32_t stage;              /* START: PD_BENCH_AB_*; GATE: 1 proceed, 0 cancel */
	uint32_t batch;              /* START: the batch the abort stage refers to */
	uint32_t flags;              /* PD_BENCH_F_* */
	uint32_t kind;               /* results: PD_BENCH_R_* */
	int32_t status;              /* 0 or a negative errno */
	uint32_t corrupted;          /* DRESULT: chunks whose length or bytes differ */
	uint32_t missing;            /* DRESULT: chunks not found although READY */
	uint32_t deferred;           /* PRESULT: pd_alloc answers -EAGAIN (not admitted yet) */
	uint64_t bytes;              /* DRESULT: bytes verified */
	uint64_t t_ns;               /* PRESULT: pd_declare; DRESULT: verified (MONOTONIC) */
	uint64_t admit_ns;           /* PRESULT: pd_declare -> PD_EV_ADMITTED; 0 not admitted */
	uint32_t steps, sleeps;      /* PRESULT, --engine step: the engine's steps and idle
				      * sleeps since its previous PRESULT */
	uint32_t fd_wakes;           /* of those sleeps, the ones pd_agent_fd() ended */
	uint32_t _pad;
	uint64_t xfer_ns;            /* PRESULT: first pd_put -> PUT_DONE arrived; 0 none */
};

int pd_bench_msg_send(int fd, const struct pd_bench_msg *m);
/* 1 a message, 0 EOF, -errno. */
int pd_bench_msg_recv(int fd, struct pd_bench_msg *m);

/* ---- workers (pdb_worker.c, pdb_send.c, pdb_recv.c) --------------------------- */

struct pd_bench_worker {
	pid_t pid;
	int fd;                      /* coordinator's end; -1 once closed */
	uint32_t broker;             /* index in the cluster */
	uint32_t rank;
	int decode;
	int ready;
};

/* What a worker process knows (inherited across fork). */
struct pd_bench_env {
	const struct pd_bench_opts *o;
	const struct pd_bench_cluster *c;
	char run_id[24];             /* unique per run: keys never collide */
};

/* Fork every worker and wait until each one is attached. 0 or -errno (printed). */
int pd_bench_workers_start(struct pd_bench_worker *w, uint32_t n,
			   const struct pd_bench_env *env, const volatile sig_atomic_t *stop);
/* QUIT, wait (bounded), SIGKILL stragglers. kill_now: SIGKILL at once.
 * @return agent processes that did not exit with status 0 (e.g. a sanitizer
 * report), printed. */
uint32_t pd_bench_workers_stop(struct pd_bench_worker *w, uint32_t n, int kill_now);

/* ---- patterns, names (pdb_pattern.c) ------------------------------------------ */

uint64_t pd_bench_mix(uint64_t x);
/* Seed of one chunk's bytes. */
uint64_t pd_bench_chunk_seed(uint64_t seed, uint32_t req, uint32_t rank, uint32_t chunk);
void pd_bench_fill(void *dst, uint32_t len, uint64_t seed);
/* Offset of the first byte of src that differs from the pattern; len if none. */
uint32_t pd_bench_diff(const void *src, uint32_t len, uint64_t seed);
/* Length of chunk `chunk` of (req, rank) with k chunks. */
uint32_t pd_bench_chunk_len(const struct pd_bench_opts *o, uint32_t req, uint32_t rank,
			    uint32_t chunk, uint32_t k);
/* --inject-corruption: change one byte of chunk `chunk` of (req, rank) as
 * filled (len bytes at p) if it is the one chosen. 1 changed, 0 not. */
int pd_bench_inject(const struct pd_bench_opts *o, void *p, uint32_t len, uint32_t req,
		    uint32_t rank, uint32_t chunk, uint32_t k);
void pd_bench_req_id(char *buf, size_t len, const char *run_id, uint32_t req);
/* The request index in a request id of this run, or -EINVAL. */
int64_t pd_bench_req_index(const char *req_id, const char *run_id);
/* Key of one chunk; its length. */
uint32_t pd_bench_key(char *buf, size_t len, const char *run_id, uint32_t req, uint32_t rank,
		      uint32_t chunk);

/* ---- coordinator and results (pdb_coord.c, pdb_report.c) ---------------------- */

#define PD_BENCH_OK        1u
#define PD_BENCH_FAILED    2u
#define PD_BENCH_CANCELLED 3u
#define PD_BENCH_CORRUPTED 4u
#define PD_BENCH_LOST      5u

struct pd_bench_result {
	uint32_t requests, ok, failed, cancelled, corrupted, lost;
	uint64_t corrupted_chunks;
	uint64_t bytes;
	double seconds;
	uint64_t *lat_ns;            /* one sample per ok request */
	uint32_t nlat;
	uint64_t *xfer_ns;           /* per ok request: first pd_put -> PUT_DONE, its slowest
				      * prefill rank, sorted at the end */
	uint32_t nxfer;
	uint64_t admit_p50_ns, admit_p99_ns;   /* decode brokers' histogram */
	uint64_t *sadmit_ns;         /* per admitted request: pd_declare -> PD_EV_ADMITTED
				      * (its slowest rank), sorted at the end */
	uint32_t nsadmit;
	uint64_t deferred;           /* pd_alloc answers -EAGAIN (not admitted yet) */
	uint64_t steps, sleeps, fd_wakes; /* --engine step, summed over the prefill ranks */
	struct pd_bench_moved moved;
	uint64_t leaked_slots;
	uint64_t reserved_left;      /* decode brokers' reservations left at the end */
	uint64_t waiting_left;       /* requests still waiting for admission at the end */
	uint32_t bad_exits;          /* agent processes or brokers that did not exit cleanly */
	int leaks_checked;           /* the pools were read at the end */
	int leaks_counted;           /* --local: leaks fail the run */
	int interrupted;
};

/* Drive every request. 0 (see r) or -errno (printed: a worker or broker died). */
int pd_bench_coord_run(const struct pd_bench_env *env, struct pd_bench_worker *w, uint32_t nw,
		       struct pd_bench_cluster *c, struct pd_bench_result *r,
		       const volatile sig_atomic_t *stop);

/* The progress line on stderr; final: end it. */
void pd_bench_progress(const struct pd_bench_opts *o, const struct pd_bench_result *r,
		       uint32_t done, double seconds, int final);
/* Nearest-rank quantile q of n sorted samples (ns), and their mean, in us. */
double pd_bench_quantile_us(const uint64_t *v, uint32_t n, double q);
double pd_bench_mean_us(const uint64_t *v, uint32_t n);
void pd_bench_report_print(FILE *f, const struct pd_bench_opts *o, struct pd_bench_result *r);
int pd_bench_report_json(const struct pd_bench_opts *o, struct pd_bench_result *r,
			 const char *path);
/* 0 when the run passed, else 1. */
int pd_bench_report_exit(const struct pd_bench_result *r);
/* A JSON document into path ("-": stdout). 0 or -errno (printed). */
int pd_bench_json_write(json_t *doc, const char *path);

/* ---- one run, a sweep of runs (pdbench.c, pdb_sweep.c) ------------------------- */

/* The brokers up (--local), the workers, the requests, the brokers down:
 * r filled (pd_bench_result_free() it). 0 or -errno (printed). */
int pd_bench_run(struct pd_bench_opts *o, struct pd_bench_result *r,
		 const volatile sig_atomic_t *stop);
void pd_bench_result_free(struct pd_bench_result *r);
/* --sweep: a run per row; the table, the JSON. The exit status. */
int pd_bench_sweep(const struct pd_bench_opts *o, const volatile sig_atomic_t *stop);

#endif
