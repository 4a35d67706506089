/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_SUPPORT_PD_FAKE_PEER_H
#define PD_TESTS_SUPPORT_PD_FAKE_PEER_H

/*
 * A peer broker played by the test over a real ZMQ DEALER and the real
 * wire codec: what a stranger on the network, or a peer that breaks the
 * rules, can send. Header-only, for cmocka tests (it asserts).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include <cmocka.h>

#include "pd_wire.h"

struct pd_fake_peer {
	void *ctx, *s;
	char name[64];
	struct pd_wire_buf wb;
	struct pd_wire_dec dec;
	char buf[1 << 16];
};

static inline struct pd_bytes pd_fake_str(const char *s)
{
	return (struct pd_bytes){ (const uint8_t *)s, (uint32_t)strlen(s) };
}

static inline void pd_fake_send(struct pd_fake_peer *f, const struct pd_msg *m)
{
	assert_int_equal(pd_wire_encode(m, &f->wb), 0);
	assert_int_equal(zmq_send(f->s, "", 0, ZMQ_SNDMORE), 0);
	assert_int_equal(zmq_send(f->s, f->wb.data, f->wb.len, 0), (int)f->wb.len);
}

/* The next message of type want within ms (others skipped): 0, or
 * -ETIMEDOUT. m's byte fields point into f until the next receive. */
static inline int pd_fake_try_recv(struct pd_fake_peer *f, uint32_t want, struct pd_msg *m,
				   int ms)
{
	assert_int_equal(zmq_setsockopt(f->s, ZMQ_RCVTIMEO, &ms, sizeof(ms)), 0);
	for (int i = 0; i < 1000; i++) {
		int n;

		if (zmq_recv(f->s, f->buf, sizeof(f->buf), 0) < 0) /* the empty delimiter */
			return -ETIMEDOUT;
		n = zmq_recv(f->s, f->buf, sizeof(f->buf), 0);
		assert_true(n > 0);
		assert_int_equal(pd_wire_decode(&f->dec, f->buf, (size_t)n, m, NULL, 0), 0);
		if (m->type == want)
			return 0;
	}
	return -ETIMEDOUT;
}

static inline void pd_fake_recv(struct pd_fake_peer *f, uint32_t want, struct pd_msg *m)
{
	if (pd_fake_try_recv(f, want, m, 5000) < 0)
		fail_msg("%s: no %s", f->name, pd_wire_type_name(want));
}

/* Say Hello to the broker at ctrl as name (NULL: a fresh one) from host_id,
 * offering TCP, and take its HelloAck (left in *ack when not NULL). */
static inline void pd_fake_open(struct pd_fake_peer *f, const char *ctrl, const char *name,
				const char *host_id, uint64_t slot_size, struct pd_msg *ack)
{
	struct pd_msg m = { .type = PD_MSG_HELLO };
	int linger = 0;

	if (name)
		(void)snprintf(f->name, sizeof(f->name), "%s", name);
	else
		(void)snprintf(f->name, sizeof(f->name), "fake-%d-%.8s", (int)getpid(), host_id);
	f->ctx = zmq_ctx_new();
	f->s = zmq_socket(f->ctx, ZMQ_DEALER);
	assert_int_equal(zmq_setsockopt(f->s, ZMQ_LINGER, &linger, sizeof(linger)), 0);
	assert_int_equal(zmq_connect(f->s, ctrl), 0);
	pd_wire_buf_init(&f->wb);
	pd_wire_dec_init(&f->dec);
	m.u.hello = (struct pd_msg_hello){ .proto = PD_WIRE_PROTO, .name = pd_fake_str(f->name),
					   .epoch = 12345, .host_id = pd_fake_str(host_id),
					   .slot_size = slot_size, .nxports = 1 };
	m.u.hello.xport[0] = pd_fake_str("tcp");
	m.u.hello.addr[0] = pd_fake_str("");
	pd_fake_send(f, &m);
	pd_fake_recv(f, PD_MSG_HELLO_ACK, ack ? ack : &m);
}

static inline void pd_fake_close(struct pd_fake_peer *f)
{
	pd_wire_dec_fini(&f->dec);
	pd_wire_buf_fini(&f->wb);
	(void)zmq_close(f->s);
	(void)zmq_ctx_term(f->ctx);
}

#endif
