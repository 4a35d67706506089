/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_FUZZ_FUZZ_BROKER_H
#define PD_TESTS_FUZZ_FUZZ_BROKER_H

/*
 * A broker for the fuzz targets, built from pdbroker's own parts as
 * pd_broker_create() wires them: a real segment, event loop, attach socket
 * and agent module (with the broker's agent ops), the sender and receiver
 * engines (with the broker's ops), and the fake control plane of
 * fuzz_ctrl.h in place of the real one; no data transport, no admin
 * socket. The loop runs in bounded turns: an eventfd that stays readable
 * keeps every turn from sleeping. Agents attach through the real socket
 * and handshake, as libpdagent does; this process then plays them.
 *
 * The fixture's own failures (it cannot make a segment, an agent cannot
 * attach) abort: they are not findings, but a target must not go on
 * without its broker. FUZZ_LOG=1 in the environment: the broker logs
 * (debug) to stderr, as pdbroker would.
 */
#include <stdint.h>

#include "pd_attach_proto.h"
#include "pd_broker_int.h"

#define FZB_MAX_AGENTS 4u
#define FZB_SLOT_SIZE  4096u
#define FZB_SQ_ENTRIES 256u
#define FZB_CQ_ENTRIES 64u

/* An agent of this process: its socket and its side of its rings. */
struct fzb_agent {
	int sock;                    /* closing it detaches the agent; -1 none */
	uint32_t id;                 /* 1-based */
	struct pd_ring_view sq, cq;
};

/* The regions agents map read-write and the broker reads (the control
 * region is absent; the send arena holds payload only). */
#define FZB_RW_REGIONS { PD_REGION_SEND_POOL, PD_REGION_AGENTS, PD_REGION_RECV_INDEX }
#define FZB_NRW        3u

struct fzb {
	struct pd_broker *b;
	char sock[160];              /* the attach socket */
	int kick;                    /* always readable: no turn of the loop blocks */
	uint32_t turns;              /* left in the current run */
	void *snap[FZB_NRW];         /* fzb_snapshot() */
};

/* A broker with send_slots and recv_slots slots (either may be 0). */
void fzb_create(struct fzb *f, uint32_t send_slots, uint32_t recv_slots);
void fzb_destroy(struct fzb *f);

/* n turns of the broker's loop: before_sleep (rings drained, completions
 * flushed), then whatever fds are ready (accepts, hellos, hang-ups). */
void fzb_turns(struct fzb *f, uint32_t n);
/* What pdbroker's periodic tick does with these parts. */
void fzb_tick(struct fzb *f);

/* Between two sessions: the peers go away (their requests fail) and are
 * forgotten once nothing refers to them (fzc_reset()), then time passes:
 * an engine that holds no live request sees its tombstones expire (its
 * deadlines never run backwards then). */
void fzb_idle(struct fzb *f);

/* Keep a copy of the regions agents may write (FZB_RW_REGIONS). */
void fzb_snapshot(struct fzb *f);
/* Once the broker holds nothing (no agent attached, no request live, no
 * slot in use, nothing waiting): put the copy back, as if those regions
 * had never been written since. 0; -EBUSY the broker still holds
 * something there (nothing is changed then: build it afresh). */
int fzb_restore(struct fzb *f);

/* Attach an agent with roles (PD_ROLE_*) at tp_rank. 0, or the broker's
 * refusal (-EBUSY: every agent slot taken). */
int fzb_attach(struct fzb *f, struct fzb_agent *a, uint32_t roles, uint32_t tp_rank);
/* 0 once the broker dropped the agent (its socket hung up: the socket is
 * then closed), as libpdagent notices; else 1. */
int fzb_alive(struct fzb_agent *a);
/* Close the agent's socket and let the broker see it go. */
void fzb_detach(struct fzb *f, struct fzb_agent *a);

/* A fixture failure: say what and abort. */
PD_NORETURN void fzb_die(const char *what, int rc);

#endif
