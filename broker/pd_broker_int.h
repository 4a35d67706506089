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
#include "pd_tcp.h"
#include "pd_tree.h"
#include "pd_tx.h"

#define BROKER_OWNER 0u       /* pool owner id of slots the broker holds */
#define MAX_TOKENS   1024u

/* A decode agent waiting for a request (PD_SQ_RECV_WAIT). */
struct waiter {
	LIST_ENTRY(waiter) link;
	uint32_t agent;
	uint64_t user;
	uint64_t deadline;            /* CLOCK_MONOTONIC; the agent's own timeout */
	uint8_t req_len;
	uint8_t req[PD_REQ_ID_MAX];
};

/* Outstanding TCP writes of one batch. */
struct wbatch {
	RB_ENTRY(wbatch) node;
	uint64_t seq;
	uint32_t left;
	int32_t err;
};
RB_HEAD(wb_tree, wbatch);

/* Bytes and chunks moved with one peer (data threads add: atomics). */
struct peer_acct {
	_Atomic uint64_t bytes_tx, chunks_tx, bytes_rx, chunks_rx;
};

struct pd_admin;

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
	struct pd_tcp *tcp;
	LIST_HEAD(, waiter) waiters;
	struct wb_tree wbatches;
	/* Data threads read these (claim, accept_peer): atomics and a lock. */
	_Atomic uint32_t *grant;      /* per recv slot: peer + 1 while granted, unwritten */
	pthread_mutex_t tok_lock;
	uint64_t token[MAX_TOKENS];   /* per peer id: the token its lanes present */
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
	/* Operators' view (pd_broker_stats.c, pd_admin.c). */
	struct peer_acct *acct;       /* MAX_TOKENS, by peer id */
	_Atomic uint32_t lanes[MAX_TOKENS]; /* data lanes opened to each peer */
	struct pd_admin *admin;
	uint64_t admin_requests, admin_bad;
	char data_addr[300];          /* the data listener as bound, "" when none */
	char xport_why[96];           /* why the data transport in use was chosen */
};

/* pd_broker_agents.c */
extern const struct pd_agents_ops pd_broker_agent_ops;
void broker_recv_answer(struct pd_broker *b, const uint8_t *req, uint32_t len, int32_t status,
			uint32_t chunks, uint64_t tag);
void broker_waiters_expire(struct pd_broker *b, uint64_t now);

/* pd_broker_net.c */
extern const struct pd_tx_ops pd_broker_tx_ops;
extern const struct pd_rx_ops pd_broker_rx_ops;
extern const struct pd_ctrl_ops pd_broker_ctrl_ops;
extern const struct pd_tcp_ops pd_broker_tcp_ops;
int broker_peer_of(struct pd_broker *b, const uint8_t *ep, uint32_t len, uint32_t *peer);
void broker_tcp_drain(void *ctx, uint32_t events);
void broker_wbatches_free(struct pd_broker *b);
void broker_fail_unreachable(struct pd_broker *b);
int broker_scratch_alloc(struct pd_broker *b);
void broker_scratch_free(struct pd_broker *b);

/* pd_broker_stats.c */
void broker_stats_publish(struct pd_broker *b);
/* Up to max peers (canonical ids, with ids[i] when ids is not NULL). */
uint32_t broker_peers_describe(const struct pd_broker *b, struct pd_stat_peer *out,
			       uint32_t *ids, uint32_t max);

#endif
