/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_BROKER_INT_H
#define PD_BROKER_PD_BROKER_INT_H

/* pdbroker internals, shared by the pd_broker*.c files only. */
#include <pthread.h>
#include <stdint.h>

#include "pd_agents.h"
#include "pd_broker.h"
#include "pd_ctrl.h"
#include "pd_layout.h"
#include "pd_loop.h"
#include "pd_rx.h"
#include "pd_tree.h"
#include "pd_tx.h"
#include "pd_xport.h"

#define BROKER_OWNER 0u       /* pool owner id of slots the broker holds */
#define MAX_TOKENS   1024u    /* peer ids with a data token (and per-peer tables) */
#define MAX_REFUSED  256u     /* batches refused by --require, failed in before_sleep */

/*
 * Grant word of a recv slot: 0 free, else who may write it and into which
 * grant: (peer + 1) in bits 0-11, LANDED (a write we saw landed: set by the
 * data thread after the bytes are in place, before the ACK, so before the
 * PutDone) in bit 12, the peer's session when granted in bits 13-31, the
 * slot's generation in bits 32-63. A write or a PutDone counts only for the
 * very peer, session and generation: a late byte of a dead connection, or
 * one aimed at a slot since granted again, never lands.
 */
#define GRANT_PEER       0xfffull
#define GRANT_LANDED     (1ull << 12)
#define GRANT_SESS_SHIFT 13
#define GRANT_SESS_MASK  0x7ffffu
#define GRANT_MAKE(peer, sess, gen)                                                  \
	((uint64_t)((peer) + 1) | ((uint64_t)((sess) & GRANT_SESS_MASK) << GRANT_SESS_SHIFT) | \
	 ((uint64_t)(gen) << 32))
#define GRANT_SESS(g)    ((uint32_t)((g) >> GRANT_SESS_SHIFT) & GRANT_SESS_MASK)
#define GRANT_GEN(g)     ((uint32_t)((g) >> 32))
/* The id a data connection of (peer, session) is known by (its upcalls). */
#define LANE_ID(peer, sess) ((peer) | (((sess) & GRANT_SESS_MASK) << 12))
#define LANE_PEER(l)        ((l) & 0xfffu)
#define LANE_SESS(l)        ((l) >> 12)

/* Recv waits one agent may have at once (more are answered -EUSERS), and
 * the longest: a wait without a deadline (the agent's arg 0) lasts the
 * --recv-ttl, as long as a request it waits for may. */
#define PD_RECV_WAITS_MAX 1024u

/* A decode agent waiting for a request (PD_SQ_RECV_WAIT). */
struct waiter {
	LIST_ENTRY(waiter) link;
	uint32_t agent;
	uint64_t user;
	uint64_t deadline;            /* CLOCK_MONOTONIC; the agent's own timeout */
	uint8_t req_len;
	uint8_t req[PD_REQ_ID_MAX];
};

/* Outstanding writes of one batch (any transport). */
struct wbatch {
	RB_ENTRY(wbatch) node;
	uint64_t seq;
	uint32_t left;
	int32_t err;
};
RB_HEAD(wb_tree, wbatch);

/* The data transport with one peer (control thread only). */
struct peer_xport {
	uint32_t send;                /* PD_XPORT_* + 1 we write to it with; 0: none chosen */
	int32_t refused;              /* < 0: --require not met, its batches fail with this */
	uint32_t recv;                /* PD_XPORT_* + 1 of its last PutDone to us; 0: none yet */
	uint32_t admitted;            /* bit per transport it may write our arena through
				       * unseen, without a connection (shm: same host) */
	uint32_t chosen;              /* send (or none) was chosen for this session */
	char why[96];                 /* why send (or the refusal); kept to log changes only */
};

/* A transport's completions, drained by the loop. */
struct xdrain {
	struct pd_broker *b;
	struct pd_xport *x;
};

/* Lengths of a batch held for admission, until the receiver answers it. */
struct held_lens {
	LIST_ENTRY(held_lens) link;
	uint32_t peer;
	uint64_t seq;
	uint32_t n;
	uint32_t lens[];
};

/* Bytes and chunks moved with one peer (data threads add: atomics). */
struct peer_acct {
	_Atomic uint64_t bytes_tx, chunks_tx, bytes_rx, chunks_rx;
};

struct pd_admin;
struct pd_metrics;

struct pd_broker {
	struct pd_config cfg;
	char sock_path[300];
	uint64_t epoch;
	struct pd_shm shm;
	int have_shm;
	struct pd_loop *loop;
	struct pd_agents *agents;
	struct pd_rx *rx;
	struct pd_tx *tx;
	struct pd_ctrl *ctrl;
	/* The data transports (pd_broker_xport.c), by id: NULL when not
	 * configured or not set up (then xwhy says why). */
	struct pd_xport *xp[PD_XPORT_MAX];
	struct pd_xport_offer offer[PD_XPORT_MAX]; /* our Hello entries */
	char xwhy[PD_XPORT_MAX][PD_XPORT_WHY_MAX];
	struct xdrain xdrain[PD_XPORT_MAX];
	LIST_HEAD(, waiter) waiters;
	uint32_t nwaits[PD_MAX_AGENTS + 1]; /* per agent id: its waiters */
	uint64_t recv_waits_refused;  /* over PD_RECV_WAITS_MAX: answered -EUSERS */
	struct wb_tree wbatches;
	/* Data threads read these (claim, accept_peer): atomics and a lock. */
	_Atomic uint64_t *grant;      /* per recv slot: GRANT_* */
	uint32_t sess[MAX_TOKENS];    /* per peer id: its session (a new one at each up
				       * and down); tok_lock */
	_Atomic uint64_t refused_writes; /* writes and PutDone slots not granted as they say */
	pthread_mutex_t tok_lock;
	uint64_t token[MAX_TOKENS];   /* per peer id: the secret its lanes present to us */
	uint64_t present[MAX_TOKENS]; /* per peer id: the secret ours present to it (control
				       * thread) */
	/* Per peer id: a bit per transport whose connection of it we accepted
	 * (token checked) this session and whose writes land unseen (rdma):
	 * its PutDones may commit slots no write we saw landed in. */
	_Atomic uint32_t unseen_in[MAX_TOKENS];
	gid_t gid;                    /* --group, (gid_t)-1: none */
	int stopping;                 /* SIGTERM/SIGINT seen: draining */
	uint64_t stop_deadline;
	/* Peers a send found down (-ENOTCONN): their requests are failed right
	 * after the engine call that tried (an engine callback must not call
	 * back into the engine). */
	uint32_t unreachable[16];
	uint32_t nunreachable;
	/* Scratch for one batch, made once (control thread only; each path
	 * uses its own arrays, so a callback may run while another is in use). */
	struct pd_tx_chunk *sc_chunks;  /* PD_PUT_MAX_CHUNKS + 1 each */
	pd_slot_ref *sc_refs;
	struct pd_bytes *sc_keys;
	uint32_t *sc_lens;
	struct pd_rx_key *sc_rxkeys;
	uint32_t *sc_gens;            /* an AllocResponse's generations */
	uint32_t *sc_pgens;           /* a PutDone's */
	/* Operators' view (pd_broker_stats.c, pd_admin.c). */
	struct peer_acct *acct;       /* MAX_TOKENS, by peer id */
	struct pd_admin *admin;
	uint64_t admin_requests, admin_bad;
	struct pd_lease *loan_clock;  /* pd_broker_lease.c: send slots' loans */
	struct pd_lease *pin_clock;   /* ... and the agents' recv pins */
	uint8_t *pins_armed;          /* per agent slot: its pin clocks may be running */
	uint64_t lease_next_ns;
	uint64_t loans_orphaned;      /* loans past their lease that no agent held: freed */
	uint64_t lock_bad_since[PD_SEND_PARTS_MAX]; /* a send pool's mutex unavailable
						      * since; 0: fine */
	uint64_t descs_scrubbed;      /* send descriptors in no state, made free (pd_pool_scrub()) */
	uint64_t headers_restored;    /* send pool headers written over, rewritten */
	pd_slot_ref *free_later;      /* staging frees that failed, tried again (send slots) */
	uint64_t *send_held;          /* pd_broker_send.c: per send slot, held by the broker */
	uint8_t send_resync[PD_SEND_PARTS_MAX]; /* a pool left by its senders, not resynced yet */
	uint32_t nfree_later;
	struct {
		uint32_t owner;
		struct pd_agent_proc proc;
		struct pd_pool *pool; /* the one it loaned from */
	} reclaim_later[PD_MAX_AGENTS];
	uint32_t nreclaim_later;      /* detached agents whose loans the pool's lock kept */
	uint32_t tick_slow;           /* 1: the loop ticks once a heartbeat (nothing to time) */
	uint32_t idle_ticks;          /* fast ticks in a row with nothing to time */
	struct pd_metrics *metrics;   /* --metrics-listen (pd_metrics_http.c); NULL: off */
	char data_addr[300];          /* the data listener as bound, "" when none */
	/* Transports per peer (pd_broker_xport.c; control thread only). */
	char host_id[PD_WIRE_NAME_MAX + 1]; /* our Hello's: same boot, same host */
	struct peer_xport *px;        /* MAX_TOKENS, by peer id */
	/* Per recv slot: length of the chunk granted there (0: not said); set
	 * before the grant word, read by data threads after it. */
	_Atomic uint32_t *slot_len;
	LIST_HEAD(, held_lens) held;  /* lengths of batches held for admission */
	const struct pd_msg_alloc_req *cur_req; /* the AllocRequest being handled */
	uint32_t cur_peer;
	int32_t *sc_idx;              /* PD_WIRE_MAX_KEYS: a PutDone's indexes, vetted */
	struct { uint32_t peer; int32_t err; uint64_t seq; } refused[MAX_REFUSED];
	uint32_t nrefused;
	/* Trust (pd_broker_trust.c; control thread) */
	struct pd_ctrl_keys *keys;    /* --curve-key, --curve-peers; NULL: unauthenticated */
	uint64_t busy_ns;             /* when busy[] was counted */
	uint8_t busy[MAX_TOKENS];     /* per peer id: requests still refer to it */
};

/* pd_broker_agents.c */
extern const struct pd_agents_ops pd_broker_agent_ops;
void pd_broker_recv_answer(struct pd_broker *b, const uint8_t *req, uint32_t len, int32_t status,
			uint32_t chunks, uint64_t tag);
void pd_broker_waiters_expire(struct pd_broker *b, uint64_t now);
/* A detached agent's loans, not reclaimed (the pool's lock was not to be
 * had): taken back at the lease look, by its process only. */
void pd_broker_reclaim_later(struct pd_broker *b, uint32_t owner);

/* pd_broker_lease.c: loans and pins are leases (see there). */
/* The segment of layout o (the send pool's handle the one that makes an
 * unusable mutex new) and the receiver's grant words; the request
 * engines as b->cfg sets them. Parts of pd_broker_create() that the fuzz
 * targets build their broker from too. 0 or -errno. */
int pd_broker_shm_create(struct pd_broker *b, const struct pd_layout_opts *o, char *err,
			 size_t errlen);
int pd_broker_engines_create(struct pd_broker *b);

int pd_broker_leases_init(struct pd_broker *b);
void pd_broker_leases_fini(struct pd_broker *b);
void pd_broker_leases_check(struct pd_broker *b, uint64_t now);
/* Send pool k's mutex found unusable (why: the error) or stuck: make it
 * new and rebuild the pool. 0 or -errno. */
int pd_broker_send_lock_reset(struct pd_broker *b, uint32_t k, int why, int32_t holder);
/* Free every send slot of owner (of process proc, or any when NULL) and
 * drop its waits, in the send pool it loans from (the agent table's word).
 * Slots freed, or the pool's lock error. */
int pd_broker_send_reclaim(struct pd_broker *b, uint32_t owner, const struct pd_agent_proc *proc);
/* pd_broker_send.c: the send pools, the broker's side. */
int pd_broker_send_init(struct pd_broker *b);
void pd_broker_send_fini(struct pd_broker *b);
/* The broker took these slots from a submission (QUEUED, its own). */
void pd_broker_send_took(struct pd_broker *b, const pd_slot_ref *refs, uint32_t n);
/* Agent (1-based id) is gone: its pool, if no sender uses it now, is made
 * as the broker's record says (else at a later tick). */
void pd_broker_send_detached(struct pd_broker *b, uint32_t agent);
/* The lease look's turn: frees and reclaims that waited for a lock, pools
 * waiting to be resynced. */
void pd_broker_send_tick(struct pd_broker *b);
/* The send pool agent (1-based id) loans from, as the agent table says:
 * its own, or NULL (no send pool). */
struct pd_pool *pd_broker_send_pool_of(struct pd_broker *b, uint32_t agent);
/* Cancel the waits for send slots of tag in every send pool. */
void pd_broker_send_cancel(struct pd_broker *b, uint64_t tag);
/* Free staging slots; what cannot be freed now is tried again at the next
 * look (the pool's lock held or being made new). */
void pd_broker_free_slots(struct pd_broker *b, const pd_slot_ref *refs, uint32_t n);

/* pd_broker_net.c */
extern const struct pd_tx_ops pd_broker_tx_ops;
extern const struct pd_rx_ops pd_broker_rx_ops;
extern const struct pd_ctrl_ops pd_broker_ctrl_ops;
extern const struct pd_xport_up pd_broker_up_ops;
int pd_broker_peer_of(struct pd_broker *b, const uint8_t *ep, uint32_t len, uint32_t *peer);

/* pd_broker_trust.c: the control plane's trust, as the broker sees it: the
 * sessions' data secrets, peers forgotten, CURVE keys. */
void pd_broker_on_secrets(void *ctx, uint32_t peer, const struct pd_ctrl_secrets *s);
int pd_broker_peer_busy(void *ctx, uint32_t peer);
void pd_broker_peer_evicted(void *ctx, uint32_t peer);
/* The secret our data connections present to peer (its HelloAck's). */
uint64_t pd_broker_present_token(const struct pd_broker *b, uint32_t peer);
/* --curve-key/--curve-peers loaded into b->keys (none given: NULL). */
int pd_broker_keys_load(struct pd_broker *b, char *err, size_t errlen);
void pd_broker_wbatches_free(struct pd_broker *b);
void pd_broker_fail_unreachable(struct pd_broker *b);
int pd_broker_scratch_alloc(struct pd_broker *b);
void pd_broker_scratch_free(struct pd_broker *b);
/* A write of batch seq ended (any transport). */
void pd_broker_write_ended(struct pd_broker *b, uint64_t seq, int status);
/* n completions polled from a data transport: writes ended, peers failed. */
void pd_broker_cpls_handle(struct pd_broker *b, const struct pd_cpl *c, int n);

/* pd_broker_xport.c: the data transports, set up, chosen per peer and driven
 * through the interface only */
int pd_broker_xport_init(struct pd_broker *b, char *err, size_t errlen);
void pd_broker_xport_fini(struct pd_broker *b);
/* The transports of our Hello, by preference; returns how many. */
uint32_t pd_broker_hello_xports(const struct pd_broker *b, const char **xport, const char **addr);
void pd_broker_xport_up(struct pd_broker *b, uint32_t peer, const struct pd_msg_hello *h);
void pd_broker_xport_down(struct pd_broker *b, uint32_t peer);
void pd_broker_xport_tick(struct pd_broker *b);
/* The transport name and why, for pdctl; and its connections to peer. */
void pd_broker_xport_describe(const struct pd_broker *b, uint32_t peer, char *name, size_t nlen,
			   char *why, size_t wlen);
uint32_t pd_broker_xport_lanes(const struct pd_broker *b, uint32_t peer);
/* tx ops: 1 when the batch must not be sent (--require not met: failed in
 * before_sleep). */
int pd_broker_xport_refuse(struct pd_broker *b, const struct pd_tx_batch_view *v);
/* The transport id to write to peer with, or why not (< 0: the refusal of
 * --require, -ENOTCONN without that transport). */
int pd_broker_xport_of(const struct pd_broker *b, uint32_t peer);
/* Post the writes of a batch (remote set) with the peer's transport; each
 * one posted counts in *posted. 0, or the first error (see tx ops);
 * -ESTALE, with nothing posted, when a chunk's staging slot is no longer
 * the broker's by its descriptor (rewritten in shm). */
int pd_broker_xport_post(struct pd_broker *b, const struct pd_tx_batch_view *v, uint32_t *posted);
void pd_broker_fail_refused(struct pd_broker *b);
/* The transports as this broker serves them, "rdma,tcp" (for status). */
void pd_broker_xport_list(const struct pd_broker *b, char *out, size_t len);
/* "name.counter" values of every transport set up, at most max. */
uint32_t pd_broker_xport_counters(const struct pd_broker *b, char (*names)[PD_STATS_NAME_MAX + 1],
			       uint64_t *values, uint32_t max);

/* pd_broker_recv.c: lengths of granted chunks, and a PutDone vetted against the grants. */
int pd_broker_lens_granted(struct pd_broker *b, uint32_t peer, uint64_t seq, const int32_t *remote,
			 uint32_t n);
void pd_broker_lens_hold(struct pd_broker *b, uint32_t peer, const struct pd_msg_alloc_req *q);
void pd_broker_put_done(struct pd_broker *b, uint32_t peer, const struct pd_msg_put_done *d);

/* pd_broker_stats.c */
void pd_broker_stats_publish(struct pd_broker *b);
/* Up to max peers (canonical ids, with ids[i] when ids is not NULL). */
uint32_t pd_broker_peers_describe(const struct pd_broker *b, struct pd_stat_peer *out,
			       uint32_t *ids, uint32_t max);

#endif
