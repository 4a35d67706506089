/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_FUZZ_FUZZ_CTRL_H
#define PD_TESTS_FUZZ_FUZZ_CTRL_H

/*
 * A fake of the control plane (broker/ctrl/pd_ctrl.h) for the fuzz
 * targets that build a broker: it links in place of pd_ctrl*.c, opens no
 * socket and dials nothing. Peers are endpoints named by pd_ctrl_peer()
 * (up to FZC_PEERS, ids from 1); each comes up (on_peer_up, with a Hello
 * offering tcp) at the next fzc_step(), as a HelloAck would bring it, and
 * goes down only at fzc_reset(). Every message the broker sends
 * is encoded with the real codec, which must accept it: a refusal is
 * counted (fzc_refused()), since pdkv must never build a message its own
 * peers would refuse. The last message of each type is kept, decoded, so
 * a target can answer it as the peer would.
 */
#include <stdint.h>

#include "pd_ctrl.h"
#include "pd_wire.h"

#define FZC_PEERS 4u

/* What the real one does in the loop's dispatch: peers named since come up. */
void fzc_step(struct pd_ctrl *c);
/* Between two inputs: every peer goes down (the broker's on_peer_down),
 * then all are forgotten (on_peer_evicted) and the kept messages dropped,
 * unless the broker still refers to one (peer_busy): then they stay, down,
 * and come up again at the next fzc_step(). */
void fzc_reset(struct pd_ctrl *c);
/* Messages the codec refused since the ctrl was made. */
uint64_t fzc_refused(const struct pd_ctrl *c);
/* Messages of type sent since the last fzc_reset() (any peer). */
uint64_t fzc_sent(const struct pd_ctrl *c, uint32_t type);
/* The last message of type sent, and to whom; NULL when none. Valid until
 * the next send of that type. */
const struct pd_msg *fzc_last(struct pd_ctrl *c, uint32_t type, uint32_t *peer);

#endif
