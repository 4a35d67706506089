/* SPDX-License-Identifier: MIT */
#ifndef PD_AGENT_PD_ATTACH_CLIENT_H
#define PD_AGENT_PD_ATTACH_CLIENT_H

/*
 * Agent side of the attach channel (wire structs in
 * shm/pd_attach_proto.h). Internal to libpdagent.so: never installed,
 * never exported. Silent: messages go only to the optional caller buffer.
 */
#include <stddef.h>
#include <stdint.h>

#include "pd_attach_proto.h"

/* Zero h, then set magic, version, this build's shm ABI, getpid(), the
 * roles (PD_ROLE_*) and the tensor-parallel position. */
void pd_attach_hello_init(struct pd_attach_hello *h, uint32_t roles, uint32_t tp_rank,
			  uint32_t tp_size);

/**
 * Attach to the broker listening on path: connect (retrying while the
 * socket is missing or refuses: the broker may be starting), send hello,
 * receive the ack and, when it accepts, its fds. Everything
 * together takes at most timeout_ms (0: one try of each step, no waiting).
 *
 * The ack is validated (magic, version, status, agent id, exactly
 * PD_ATTACH_NFDS_MIN fds on success, one more with an arena file, and
 * none on a refusal, segment_size equal
 * to the size of fds[0]); every fd received is closed on any failure.
 * The fds arrive close-on-exec.
 *
 * @param path      borrowed; the broker's socket path.
 * @param hello     borrowed; sent as is (see pd_attach_hello_init()).
 * @param ack       filled on success, and on a refusal (status < 0).
 * @param fds       on success only: [0] segment, [1] agent doorbell
 *                  (broker -> agent), [2] broker doorbell (agent ->
 *                  broker). Taken by the caller, who closes them.
 * @param sock_out  on success only: the connected socket (non-blocking,
 *                  close-on-exec), owned by the caller. Keep it open for
 *                  the agent's whole life: its closing detaches the agent,
 *                  and its POLLHUP means the broker died.
 * @param err       optional message buffer (may be NULL).
 * @return 0; the broker's refusal status (e.g. -EACCES, -EUSERS, -EPROTO);
 *         -ENOENT no socket at path / -ECONNREFUSED nothing listens there
 *         (when the timeout ran out while retrying); -ETIMEDOUT the broker
 *         did not answer in time; -EPROTO malformed ack; -ECONNRESET the
 *         broker closed without an ack; -EINVAL bad arguments;
 *         -ENAMETOOLONG path too long; -errno from socket calls.
 * Thread-safety: no shared state; safe from any thread.
 */
int pd_attach_connect(const char *path, const struct pd_attach_hello *hello,
		      uint32_t timeout_ms, struct pd_attach_ack *ack, int fds[PD_ATTACH_NFDS],
		      int *sock_out, char *err, size_t errlen);

#endif
