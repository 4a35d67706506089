/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_FUZZ_FUZZ_PLAY_H
#define PD_TESTS_FUZZ_FUZZ_PLAY_H

/*
 * Playing what surrounds the fuzz targets' broker (fuzz_broker.h): its
 * agents' submissions, as libpdagent writes them, and its peers'
 * messages, as the control plane delivers them (decoded, within the
 * codec's bounds), with their data landing as a tcp data thread lands it.
 */
#include <stdint.h>

#include "fuzz_broker.h"

#define FZP_RECEIVER "tcp://10.0.0.2:17500" /* where the agents' requests go */
#define FZP_CHUNK    100u                   /* bytes of every chunk played */

/* Entries: a PUT or DECLARE header to FZP_RECEIVER (world 1, rank 0), a
 * chunk, a request op (CANCEL, RECV_WAIT, RECV_RELEASE). */
void fzp_put(struct pd_sqe *e, uint32_t op, const char *req, uint32_t n, uint32_t total,
	     uint32_t last);
void fzp_chunk(struct pd_sqe *e, pd_slot_ref slot, const char *key);
void fzp_req(struct pd_sqe *e, uint32_t op, const char *req, uint32_t arg);

/* The agent's entries into its ring, one bulk, then one broker turn.
 * 0; -ENOSPC no room; -EPROTO the ring refused its producer. */
int fzp_submit(struct fzb *f, struct fzb_agent *a, const struct pd_sqe *e, uint32_t n);
/* n send slots loaned to the agent, as libpdagent allocates (no wait). */
int fzp_loan(struct fzb *f, const struct fzb_agent *a, uint32_t n, pd_slot_ref *out);

/* The receiver answers the last AllocRequest or Reserve (type) the broker
 * sent it: every chunk granted (err 0), or refused with err. */
void fzp_answer(struct fzb *f, uint32_t type, int32_t err);

/* Sender peer i's id (named once; up after the next turn). */
uint32_t fzp_sender(struct fzb *f, uint32_t i);
/* Its AllocRequest seq of n keys "<req>.<k>" (k from first), one rank of
 * total chunks: the slots the broker granted into slots[] and their
 * generations into gens[] (-1: none), from its AllocResponse. @return
 * keys answered (0: the request was held, or refused). */
uint32_t fzp_alloc(struct fzb *f, uint32_t peer, uint64_t seq, const char *req, uint32_t first,
		   uint32_t n, uint32_t total, int32_t *slots, uint32_t *gens);
/* Its data lands in those slots, then its PutDone for them. */
void fzp_put_done(struct fzb *f, uint32_t peer, uint64_t seq, const char *req,
		  const int32_t *slots, const uint32_t *gens, uint32_t n);
/* Its CancelNotif for req. */
void fzp_cancel(struct fzb *f, uint32_t peer, const char *req);

#endif
