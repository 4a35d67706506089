/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_ADMIN_PROTO_H
#define PD_SHM_PD_ADMIN_PROTO_H

/*
 * The broker's admin socket: what pdctl asks for details the statistics
 * region does not hold (lists of agents, requests, peers) and for actions
 * (cancel).
 *
 * Transport: a Unix stream socket at <rundir>/<name>.admin (pd_rundir.h),
 * mode 0660 like the attach socket. One exchange per connection: the
 * client writes one frame, the broker answers one frame and closes.
 * Frame: a 4-byte big-endian length, then that many bytes of msgpack.
 *
 * Request: a map with "cmd" (str) and the command's arguments:
 *   {"cmd": "agents"}
 *   {"cmd": "requests"} or {"cmd": "requests", "state": STR}  (oldest first)
 *   {"cmd": "peers"}
 *   {"cmd": "cancel", "req_id": STR}
 * Answer: a map
 *   {"ok": true,  "rows": [ROW, ...]}           lists; ROW maps str -> str|int
 *   {"ok": true,  "cancelled": INT}             cancel: requests cancelled (>= 1)
 *   {"ok": false, "error": STR}                 unknown cmd, bad args, no such request
 *
 * Rows (every row of one list has the same keys, in this order):
 *   agents:   id, pid, roles ("send", "recv", "send+recv"), tp_rank,
 *             age_s, submitted, completed, bad
 *   requests: req_id, side ("send"|"recv"), state, peer, chunks, done,
 *             age_ms
 *             send states: "allocating", "writing", "draining", "ending"
 *             recv states: "waiting", "admitted", "ready", "failed"
 *   peers:    name, ctrl, state ("new"|"up"|"down"), transport, why,
 *             epoch, lanes, last_seen_ms, requests
 *
 * Limits: a request frame is at most PD_ADMIN_REQ_MAX bytes, an answer at
 * most PD_ADMIN_ANS_MAX; the broker closes a connection that has not sent
 * its request within PD_ADMIN_TIMEOUT_MS, and counts it.
 */
#define PD_ADMIN_SUFFIX     ".admin"
#define PD_ADMIN_REQ_MAX    4096u
#define PD_ADMIN_ANS_MAX    (16u << 20)
#define PD_ADMIN_TIMEOUT_MS 2000u
#define PD_ADMIN_MAX_ROWS   100000u

#endif
