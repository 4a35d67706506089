/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_INTEGRATION_IT_STRANGER_H
#define PD_TESTS_INTEGRATION_IT_STRANGER_H

/*
 * A stranger beside the legitimate prefill broker: a fake peer that said
 * Hello to the decode broker (from another host, so it may not write the
 * arena unseen) and holds the data secret of its HelloAck, so it can open
 * real data lanes and write raw frames.
 */
#include "it_raw.h"
#include "pd_fake_peer.h"
#include "pd_wire.h"

struct it_stranger {
	struct pd_fake_peer f;
	uint64_t secret;
	int port;
};

static inline void it_stranger_open(struct it_stranger *p, const struct it *t)
{
	struct pd_msg ack;

	memset(p, 0, sizeof(*p));
	pd_fake_open(&p->f, t->d.ctrl, NULL, "another-host", IT_SLOT, &ack);
	p->secret = ack.u.hello.data_secret;
	assert_true(p->secret != 0);
	p->port = it_data_port(&t->d);
	assert_true(p->port > 0);
}

/* A data lane of p: connected, HELLO accepted. */
static inline int it_stranger_lane(const struct it_stranger *p)
{
	int fd = it_raw_connect(p->port);

	assert_int_equal(it_raw_hello(fd, p->secret), 0);
	return fd;
}

/* A write of 4 KiB (bytes 0xee) to (slot, gen) on a fresh lane: 0
 * acknowledged, or -1 refused (the broker closes the lane). */
static inline int it_stranger_write(const struct it_stranger *p, int32_t slot, uint32_t gen)
{
	struct pd_tcp_hdr h;
	int fd = it_stranger_lane(p), rc;

	it_raw_frame(fd, PD_TCP_T_DATA, (uint32_t)slot, gen, 0, 4096);
	rc = it_raw_read(fd, &h) == 0 && h.type == PD_TCP_T_ACK ? 0 : -1;
	(void)close(fd);
	return rc;
}

#endif
