/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_ATTACH_H
#define PD_BROKER_PD_ATTACH_H

/*
 * Broker side of the attach channel (wire
 * structs in shm/pd_attach_proto.h). Building blocks for the broker's
 * single control thread, which owns the listening socket and every
 * connection: no threads, no locks, nothing blocks for long. The event
 * loop drives each accepted connection:
 *
 *   fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
 *   pd_attach_conn_init(&c, fd);
 *   on POLLIN:   rc = pd_attach_conn_read(&c, &hello);   -EAGAIN: wait more
 *   on a tick:   pd_attach_conn_expired(&c, now, timeout) -> close it
 *   complete:    pd_attach_peer_cred(fd, &uc); pd_attach_cred_ok(fd, &uc, ...)
 *                pd_attach_ack_init(&ack, status); ... pd_attach_send_ack()
 *
 * After a successful ack the connection stays open for the agent's whole
 * life; its EOF (POLLIN + read 0, or POLLHUP) is the agent's death notice.
 * On a refusal the broker sends an ack with a negative status (no fds)
 * and closes the connection.
 *
 * All functions return 0 (or a documented value) or -errno; none keeps a
 * pointer to its arguments. Messages go to the optional caller buffer err.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "pd_attach_proto.h"

#define PD_ATTACH_MODE_DEFAULT  0660u
#define PD_ATTACH_NO_GROUP      ((gid_t)-1)
/* Bound on sending one ack to a slow (or stuck) peer. */
#define PD_ATTACH_SEND_TIMEOUT_MS 1000u

/**
 * Create the listening Unix stream socket at path (SOCK_NONBLOCK,
 * SOCK_CLOEXEC). A socket file left by a dead broker (connect refused) is
 * removed first; one that accepts connections is not touched. The file is
 * then chmod'ed to mode and, when group is given, chown'ed to it.
 *
 * Mode and group are set before listen(), so no agent can connect
 * through the umask's mode of the fresh file. The directory (the rundir)
 * should still admit only the broker's users: it is the outer fence.
 *
 * @param path    borrowed; socket path, < sizeof(sun_path) bytes.
 * @param mode    file mode; 0 = PD_ATTACH_MODE_DEFAULT.
 * @param group   group to give the file, or PD_ATTACH_NO_GROUP.
 * @param fd_out  set to the listening fd on success only.
 * @param err     optional message buffer (may be NULL).
 * @return 0; -EINVAL bad arguments; -ENAMETOOLONG path too long;
 *         -EADDRINUSE another broker listens on path; -EEXIST path exists
 *         and is not a socket; -errno from socket/bind/listen/chmod/chown.
 */
int pd_attach_listen(const char *path, uint32_t mode, gid_t group, int *fd_out,
		     char *err, size_t errlen);

/* Close the listening fd (if >= 0) and unlink path (if not NULL). */
void pd_attach_unlisten(int fd, const char *path);

/* One connection in the hello phase. Caller memory; the fd is borrowed
 * (the caller closes it). */
struct pd_attach_conn {
	int      fd;
	uint32_t got;        /* hello bytes received so far */
	uint64_t start_ns;   /* pd_now_ns() at init: the hello deadline's origin */
	uint8_t  buf[sizeof(struct pd_attach_hello)];
};

/* Start the hello phase on an accepted, non-blocking socket. */
void pd_attach_conn_init(struct pd_attach_conn *c, int fd);

/**
 * Read what has arrived of the 64-byte hello, without blocking. When it is
 * complete, validate it: magic, version, ABI major, roles (known bits, at
 * least one), tp_rank < tp_size, and no bytes after it (the agent waits
 * for the ack, so anything more is a larger or corrupt message).
 *
 * @param out  filled only when 0 is returned.
 * @return 0 hello complete and valid; -EAGAIN incomplete (poll again);
 *         -EPROTO invalid hello; -ECONNRESET the peer closed (EOF);
 *         -EINVAL bad arguments; -errno from recv.
 */
int pd_attach_conn_read(struct pd_attach_conn *c, struct pd_attach_hello *out);

/* True once timeout_ns has passed since pd_attach_conn_init(). now_ns is
 * CLOCK_MONOTONIC (pd_now_ns()). */
bool pd_attach_conn_expired(const struct pd_attach_conn *c, uint64_t now_ns,
			    uint64_t timeout_ns);

/**
 * The peer's credentials as of connect() (SO_PEERCRED).
 * @return 0; -EINVAL; -EPROTO unexpected option length; -errno.
 */
int pd_attach_peer_cred(int fd, struct ucred *out);

/**
 * May the peer of fd, of credentials cred, attach? Yes if its uid is
 * broker_uid or root, or, when a group is given, if that group is its
 * primary group or one of the supplementary groups it had at connect()
 * (SO_PEERGROUPS, as the kernel recorded them: also for a peer in another
 * pid namespace, a container, whose pid reads 0 here). fd < 0: no
 * supplementary groups.
 *
 * A predicate (like pd_admit_ok()), not an -errno function: true means
 * allowed. Anything that cannot be decided is false: refuse with -EACCES.
 */
bool pd_attach_cred_ok(int fd, const struct ucred *cred, uid_t broker_uid, gid_t group);

/* Zero ack and set magic, version and status (0 or -errno). */
void pd_attach_ack_init(struct pd_attach_ack *ack, int32_t status);

/**
 * Send the ack; with status 0 it carries fds (SCM_RIGHTS, which the kernel
 * dups: the caller keeps its own). A partial write is completed by polling
 * for at most PD_ATTACH_SEND_TIMEOUT_MS; SIGPIPE is never raised.
 *
 * @param fds  PD_ATTACH_NFDS fds: segment, agent doorbell, broker
 *             doorbell. Required when ack->status == 0, ignored otherwise.
 * @return 0; -EINVAL bad arguments (status > 0, status 0 without valid
 *         fds); -ETIMEDOUT the peer did not drain its socket; -EPIPE or
 *         -ECONNRESET the peer is gone; -errno from sendmsg/poll.
 */
int pd_attach_send_ack(int fd, const struct pd_attach_ack *ack,
		       const int fds[PD_ATTACH_NFDS]);

#endif
