/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_ADMIN_H
#define PD_BROKER_PD_ADMIN_H

/*
 * The broker's admin socket (shm/pd_admin_proto.h): a Unix stream listener
 * in the broker's loop, one request and one answer per connection, every
 * connection non-blocking with a deadline, at most PD_ADMIN_MAX_CONNS at
 * once. The control thread owns it; commands run there (pd_admin_cmd.c).
 */
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

struct pd_broker;
struct pd_admin;

#define PD_ADMIN_MAX_CONNS 16u

/**
 * Listen at path (a stale socket file of a dead broker is replaced) and
 * watch it in b's loop.
 * @return 0; -errno from the listener or the loop; -ENOMEM.
 */
int pd_admin_create(struct pd_broker *b, const char *path, struct pd_admin **out);

/* Close every connection and the listener, unlink the path. NULL-safe. */
void pd_admin_destroy(struct pd_admin *a);

/* Close connections past their deadline (now: CLOCK_MONOTONIC). NULL-safe. */
void pd_admin_tick(struct pd_admin *a, uint64_t now_ns);
/* Connections open now (each has a deadline the tick checks). */
uint32_t pd_admin_open(const struct pd_admin *a);

/* The body length a request frame's 4-byte big-endian header gives; 0 when
 * out of bounds (empty, or over PD_ADMIN_REQ_MAX): the connection is bad. */
uint32_t pd_admin_frame_len(const uint8_t hdr[4]);

/**
 * One request frame's body (len bytes): pre-scanned (pd_wire_scan), run
 * (pd_admin_run) and its answer framed into out (a 4-byte big-endian
 * length, then the msgpack), as the connection sends it. out is
 * initialised here on every path but a refused scan; the caller destroys it.
 * @return 0; -EPROTO/-EMSGSIZE the request is not msgpack within the wire
 *         bounds; -ENOMEM/-EMSGSIZE the answer (err says why, every time).
 */
int pd_admin_answer(struct pd_broker *b, const uint8_t *req, uint32_t len, msgpack_sbuffer *out,
		    char *err, size_t errlen);

/**
 * Run one request (raw msgpack, already pre-scanned) and pack the answer.
 * Always answers (errors as {"ok": false, "error": ...}).
 * @return 0; -ENOMEM; -EMSGSIZE the answer would exceed PD_ADMIN_ANS_MAX.
 */
int pd_admin_run(struct pd_broker *b, const uint8_t *req, size_t len, msgpack_sbuffer *ans);

#endif
