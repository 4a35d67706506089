/* SPDX-License-Identifier: MIT */
/*
 * TCP transport (broker/pd_tcp*.c) over real loopback sockets: the wire
 * codec, argument checks, and everything that must fail cleanly: refused
 * HELLOs, hostile raw clients (garbage, truncated frames, writes outside a
 * grant), unreachable or silent peers, disconnect and peer failure in the
 * middle of a transfer, shutdown with work in flight. The fixture is
 * tcp_fixture.h; the transfers that must succeed are in test_tcp_data.c.
 */
#include "tcp_fixture.h"

#define KIB 1024u

/* ---- wire codec --------------------------------------------------------------- */

static void test_hdr_golden(void **state)
{
	static const uint8_t want[PD_TCP_HDR_SIZE] = {
		0x50, 0x44, 0x4b, 0x54, 0x01, 0x00, 0x03, 0x00, /* "PDKT", v1, ACK */
		0x04, 0x03, 0x02, 0x01, 0x08, 0x07, 0x06, 0x05, /* slot, gen */
		0x00, 0x00, 0x00, 0x00, 0xfb, 0xff, 0xff, 0xff, /* len 0, status -5 */
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, /* cookie */
		0x00, 0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, /* tag */
	};
	struct pd_tcp_hdr h = { .magic = PD_TCP_MAGIC, .version = PD_TCP_WIRE_VERSION,
				.type = PD_TCP_T_ACK, .slot = 0x01020304, .gen = 0x05060708,
				.status = -5, .cookie = 0x1122334455667788ull,
				.tag = 0x99aabbccddeeff00ull };
	struct pd_tcp_hdr d;
	uint8_t b[PD_TCP_HDR_SIZE];

	(void)state;
	pd_tcp_hdr_encode(&h, b);
	assert_memory_equal(b, want, sizeof(want));
	assert_int_equal(pd_tcp_hdr_decode(b, 0, &d), 0);
	assert_memory_equal(&d, &h, sizeof(h));
}

static void test_hdr_decode_negative(void **state)
{
	struct pd_tcp_hdr ok = { .magic = PD_TCP_MAGIC, .version = PD_TCP_WIRE_VERSION,
				 .type = PD_TCP_T_DATA, .len = 100 };
	struct pd_tcp_hdr h, d;
	uint8_t b[PD_TCP_HDR_SIZE];

	(void)state;
#define BAD(field, val, max)                                                           \
	do {                                                                           \
		h = ok;                                                                \
		h.field = (val);                                                       \
		pd_tcp_hdr_encode(&h, b);                                              \
		assert_int_equal(pd_tcp_hdr_decode(b, (max), &d), -EPROTO);            \
	} while (0)
	BAD(magic, PD_TCP_MAGIC + 1, 100);
	BAD(version, PD_TCP_WIRE_VERSION + 1, 100);
	BAD(version, 0, 100);
	BAD(type, 0, 100);
	BAD(type, 4, 100);
	BAD(len, 101, 100);                /* DATA over max_len */
	BAD(status, -1, 100);              /* DATA carries no status */
	ok.type = PD_TCP_T_ACK;
	ok.len = 0;
	BAD(len, 1, 100);                  /* ACK and HELLO carry no payload */
	BAD(status, 1, 100);               /* status is 0 or -errno */
	BAD(status, -4096, 100);
	ok.type = PD_TCP_T_HELLO;
	BAD(len, 40, UINT32_MAX);
#undef BAD
	h = ok;
	h.status = -4095;
	pd_tcp_hdr_encode(&h, b);
	assert_int_equal(pd_tcp_hdr_decode(b, 0, &d), 0);
}

/* ---- arguments ---------------------------------------------------------------- */

static void test_create_negative(void **state)
{
	struct pd_tcp_ops half = { .accept_peer = fx_accept_peer, .claim = fx_claim };
	struct pd_tcp_opts o, d;
	struct pd_tcp *t = NULL;
	struct pd_tcp_stats st;

	(void)state;
	pd_tcp_opts_init(&d);
	assert_int_equal(pd_tcp_create(NULL, &t), -EINVAL);
	assert_int_equal(pd_tcp_create(&d, NULL), -EINVAL);
#define BAD(field, val)                                                                \
	do {                                                                           \
		o = d;                                                                 \
		o.field = (val);                                                       \
		assert_int_equal(pd_tcp_create(&o, &t), -EINVAL);                      \
	} while (0)
	BAD(lanes, 0);
	BAD(lanes, PD_TCP_MAX_LANES + 1);
	BAD(max_peers, 0);
	BAD(max_peers, PD_TCP_MAX_PEERS + 1);
	BAD(queue_depth, 0);
	BAD(queue_depth, PD_TCP_MAX_DEPTH + 1);
	BAD(window, 0);
	BAD(window, PD_TCP_MAX_WINDOW + 1);
	BAD(max_frame, 0);
	BAD(max_frame, PD_TCP_MAX_FRAME_LIMIT + 1);
	BAD(max_conns, 0);
	BAD(max_conns, PD_TCP_MAX_CONNS + 1);
	BAD(connect_timeout_ms, 0);
	BAD(io_timeout_ms, 0);
	BAD(flags, 1);
	BAD(ops, &half);
#undef BAD
	assert_null(t);
	pd_tcp_destroy(NULL);
	pd_tcp_stop(NULL);
	memset(&st, 0xff, sizeof(st));
	pd_tcp_get_stats(NULL, &st);
	assert_int_equal(st.frames_tx, 0);
	assert_int_equal(st.conn_errors, 0);
	pd_tcp_get_stats(NULL, NULL);
	assert_int_equal(pd_tcp_event_fd(NULL), -EINVAL);
	assert_int_equal(pd_tcp_port(NULL), -EINVAL);
	assert_int_equal(pd_tcp_poll(NULL, NULL, 0), -EINVAL);
}

static void test_api_negative(void **state)
{
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	uint8_t buf[64];
	struct pd_xfer x = fx_xfer(1, buf, sizeof(buf), 0, 1, 1);
	struct pd_xfer big = fx_xfer(2, buf, 0, 0, 1, 1);
	struct pd_cpl cpl;

	c.depth = 4;
	c.max_frame = 4 * KIB;
	fx_open(f, &c);
	/* send-only instance: no listener, no ops */
	assert_int_equal(pd_tcp_listen(f->tx, FX_HOST, 0), -EINVAL);
	assert_int_equal(pd_tcp_port(f->tx), -ENOTCONN);
	assert_int_equal(pd_tcp_listen(f->rx, FX_HOST, 0), -EBUSY);
	assert_int_equal(pd_tcp_listen(f->rx, NULL, 0), -EINVAL);
	assert_int_equal(pd_tcp_connect(NULL, FX_PEER, FX_HOST, f->port, 1), -EINVAL);
	assert_int_equal(pd_tcp_connect(f->tx, FX_PEER, NULL, f->port, 1), -EINVAL);
	assert_int_equal(pd_tcp_connect(f->tx, FX_PEER, "localhost", f->port, 1), -EINVAL);
	assert_int_equal(pd_tcp_connect(f->tx, FX_PEER, "127.0.0.1x", f->port, 1), -EINVAL);
	assert_int_equal(pd_tcp_connect(f->tx, FX_PEER, FX_HOST, 0, 1), -EINVAL);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, &x, 1), -ENOENT);
	assert_int_equal(pd_tcp_disconnect(f->tx, FX_PEER), -ENOENT);
	assert_int_equal(pd_tcp_disconnect(NULL, FX_PEER), -EINVAL);
	assert_int_equal(pd_tcp_poll(f->tx, NULL, 1), -EINVAL);
	assert_int_equal(pd_tcp_poll(f->tx, &cpl, 1), 0);
	assert_true(pd_tcp_event_fd(f->tx) >= 0);
	fx_connect(f, FX_TOKEN);
	assert_int_equal(pd_tcp_connect(f->tx, FX_PEER, FX_HOST, f->port, 1), -EEXIST);
	assert_int_equal(pd_tcp_post(NULL, FX_PEER, &x, 1), -EINVAL);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, NULL, 1), -EINVAL);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, NULL, 0), 0);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER + 1, &x, 0), -ENOENT);
	big.len = 4 * KIB + 1;
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, &big, 1), -EINVAL);
	big.len = 1;
	big.src = NULL;
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, &big, 1), -EINVAL);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, &x, 5), -EINVAL); /* > queue_depth */
	assert_int_equal(pd_tcp_disconnect(f->tx, FX_PEER), 0);
	assert_int_equal(pd_tcp_poll(f->tx, &cpl, 1), 0);         /* nothing was queued */
	pd_tcp_stop(f->tx);
	pd_tcp_stop(f->tx);
	assert_int_equal(pd_tcp_connect(f->tx, FX_PEER, FX_HOST, f->port, 1), -ESHUTDOWN);
	pd_tcp_stop(f->rx);
	assert_int_equal(pd_tcp_port(f->rx), -ENOTCONN);
	assert_int_equal(pd_tcp_listen(f->rx, FX_HOST, 0), -ESHUTDOWN);
}

/* max_peers: -ENOBUFS; queue_depth, then the write pool (completions not
 * polled yet hold their descriptors): -EAGAIN, nothing half-queued. */
static void test_limits(void **state)
{
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	struct pd_tcp_opts o = fx_opts(&c);
	static uint8_t src[3][KIB];
	struct pd_xfer x[3];
	struct pd_cpl cpl[3];
	struct pd_tcp *t = NULL;

	fx_open(f, &c);
	o.max_peers = 2;
	assert_int_equal(pd_tcp_create(&o, &t), 0);
	assert_int_equal(pd_tcp_connect(t, 1, FX_HOST, f->port, FX_TOKEN), 0);
	assert_int_equal(pd_tcp_connect(t, 2, FX_HOST, f->port, FX_TOKEN), 0);
	assert_int_equal(pd_tcp_connect(t, 3, FX_HOST, f->port, FX_TOKEN), -ENOBUFS);
	assert_int_equal(pd_tcp_disconnect(t, 2), 0);
	assert_int_equal(pd_tcp_connect(t, 3, FX_HOST, f->port, FX_TOKEN), 0);
	pd_tcp_destroy(t);

	o.max_peers = 1;
	o.queue_depth = 2;                 /* pool: 1 x (2 + 1) descriptors */
	assert_int_equal(pd_tcp_create(&o, &t), 0);
	for (uint32_t i = 0; i < 3; i++) {
		fx_grant(f, i, 1, 1);
		x[i] = fx_xfer(i, src[i], KIB, i, 1, 1);
	}
	fx_gate_set(f, 0, 0);
	assert_int_equal(pd_tcp_connect(t, 1, FX_HOST, f->port, FX_TOKEN), 0);
	assert_int_equal(pd_tcp_post(t, 1, x, 3), -EINVAL);
	assert_int_equal(pd_tcp_post(t, 1, x, 2), 2);
	assert_int_equal(pd_tcp_post(t, 1, &x[2], 1), -EAGAIN);  /* queue_depth */
	fx_gate_set(f, UINT32_MAX, 1);
	FX_WAIT_STAT(t, writes_ok, 2);
	assert_int_equal(pd_tcp_post(t, 1, &x[2], 1), -EAGAIN);  /* pool: not polled */
	assert_int_equal(fx_wait(t, cpl, 2, FX_WAIT_MS), 2);
	assert_int_equal(pd_tcp_post(t, 1, &x[2], 1), 1);
	assert_int_equal(fx_wait(t, cpl, 1, FX_WAIT_MS), 1);
	assert_int_equal(cpl[0].status, 0);
	assert_int_equal(cpl[0].cookie, 2);
	pd_tcp_destroy(t);
}

/* ---- HELLO -------------------------------------------------------------------- */

/* A wrong token: refused and counted; the writes posted meanwhile and then
 * the peer fail with -EACCES, the peer completion last; nothing lands. */
static void test_hello_wrong_token(void **state)
{
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	uint8_t src[4 * KIB];
	struct pd_xfer x[3];
	struct pd_cpl cpl[8];

	fx_open(f, &c);
	fx_pattern(src, sizeof(src), 1);
	for (uint32_t i = 0; i < 3; i++) {
		fx_grant(f, i, 1, 9);
		x[i] = fx_xfer(i, src, sizeof(src), i, 1, 9);
	}
	fx_snapshot(f);
	fx_hold_hellos(f, 1);              /* the writes are queued before the refusal */
	fx_connect(f, FX_TOKEN + 1);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, x, 3), 3);
	fx_hold_hellos(f, 0);
	assert_int_equal(fx_wait(f->tx, cpl, 4, FX_WAIT_MS), 4);
	fx_assert_once(cpl, 3, 3);
	for (uint32_t i = 0; i < 3; i++)
		assert_int_equal(cpl[i].status, -EACCES);
	assert_int_equal(cpl[3].kind, PD_CPL_PEER);
	assert_int_equal(cpl[3].peer, FX_PEER);
	assert_int_equal(cpl[3].status, -EACCES);
	assert_int_equal(fx_wait(f->tx, cpl, 1, 100), 0);          /* exactly once */
	/* The first refusal fails the peer; the other lane may be stopped
	 * before its HELLO got there. */
	assert_true(fx_stats(f->rx).hellos_rejected >= 1);
	assert_true(fx_stats(f->rx).hellos_rejected <= c.lanes);
	assert_int_equal(fx_stats(f->tx).peer_failures, 1);
	assert_int_equal(fx_stats(f->tx).writes_failed, 3);
	assert_int_equal(fx_get(f, &f->claims), 0);
	fx_assert_untouched(f);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, x, 1), -ENOTCONN);
	assert_int_equal(pd_tcp_disconnect(f->tx, FX_PEER), 0);
	assert_int_equal(fx_wait(f->tx, cpl, 1, 50), 0);
	/* The right token afterwards works. */
	fx_connect(f, FX_TOKEN);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, x, 1), 1);
	assert_int_equal(fx_wait(f->tx, cpl, 1, FX_WAIT_MS), 1);
	assert_int_equal(cpl[0].status, 0);
	assert_memory_equal(f->arena, src, sizeof(src));
}

/* Raw clients: another version gets a -EPROTO reply; garbage, or silence,
 * instead of HELLO gets the connection closed. */
static void test_hello_raw(void **state)
{
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	struct pd_tcp_hdr h = { .magic = PD_TCP_MAGIC, .version = 2, .type = PD_TCP_T_HELLO,
				.tag = FX_TOKEN };
	uint8_t b[PD_TCP_HDR_SIZE];
	uint64_t t0;
	int fd;

	c.connect_ms = 300;
	fx_open(f, &c);
	fd = fx_raw_connect(f->port);
	pd_tcp_hdr_encode(&h, b);
	fx_raw_send(fd, b, sizeof(b));
	assert_int_equal(recv(fd, b, sizeof(b), MSG_WAITALL), (ssize_t)sizeof(b));
	assert_int_equal(pd_tcp_hdr_decode(b, 0, &h), 0);
	assert_int_equal(h.status, -EPROTO);
	assert_true(fx_raw_closed(fd));
	close(fd);
	FX_WAIT_STAT(f->rx, proto_errors, 1);

	fd = fx_raw_connect(f->port);
	memset(b, 0x5a, sizeof(b));
	fx_raw_send(fd, b, sizeof(b));
	assert_true(fx_raw_closed(fd));
	close(fd);
	FX_WAIT_STAT(f->rx, proto_errors, 2);

	t0 = pd_now_ns();
	fd = fx_raw_connect(f->port);                /* says nothing */
	assert_true(fx_raw_closed(fd));
	assert_true(pd_now_ns() - t0 >= 250 * PD_NS_PER_MS);
	close(fd);
	FX_WAIT_STAT(f->rx, conn_errors, 3);
	assert_int_equal(fx_stats(f->rx).hellos_rejected, 0);

	fd = fx_raw_connect(f->port);
	assert_int_equal(fx_raw_hello(fd, FX_TOKEN + 1), -EACCES);
	assert_true(fx_raw_closed(fd));
	close(fd);
	FX_WAIT_STAT(f->rx, hellos_rejected, 1);
	assert_int_equal(fx_get(f, &f->accepts), 0);
}

/* ---- hostile frames after a good HELLO ----------------------------------------- */

enum bad_kind {
	BAD_GARBAGE = 1,      /* 40 random bytes */
	BAD_TRUNC_EOF,        /* half a header, then EOF */
	BAD_TRUNC_STALL,      /* half a header, then silence (io timeout) */
	BAD_NOT_GRANTED,      /* DATA for a slot never granted */
	BAD_WRONG_GEN,        /* a granted slot, another generation */
	BAD_WRONG_TAG,        /* a granted slot, another request tag */
	BAD_OVER_SLOT,        /* a granted slot, len = slot size + 1 */
	BAD_OVER_MAX,         /* len > max_frame */
	BAD_HELLO_AGAIN,      /* a second HELLO */
	BAD_ACK,              /* an ACK from the sender */
};

static void bad_send(struct fx *f, int fd, enum bad_kind k)
{
	uint8_t b[PD_TCP_HDR_SIZE];
	struct pd_tcp_hdr h = { .magic = PD_TCP_MAGIC, .version = PD_TCP_WIRE_VERSION,
				.type = PD_TCP_T_DATA, .slot = 1, .gen = 1, .len = 64,
				.tag = 5 };

	switch (k) {
	case BAD_GARBAGE:
		fx_pattern(b, sizeof(b), 77);
		fx_raw_send(fd, b, sizeof(b));
		return;
	case BAD_TRUNC_EOF:
	case BAD_TRUNC_STALL:
		pd_tcp_hdr_encode(&h, b);
		fx_raw_send(fd, b, PD_TCP_HDR_SIZE / 2);
		if (k == BAD_TRUNC_EOF)
			assert_int_equal(shutdown(fd, SHUT_WR), 0);
		return;
	case BAD_NOT_GRANTED: h.slot = 2; break;
	case BAD_WRONG_GEN: h.gen = 2; break;
	case BAD_WRONG_TAG: h.tag = 6; break;
	case BAD_OVER_SLOT: h.len = f->cfg.slot_size + 1; break;
	case BAD_OVER_MAX: h.len = f->cfg.max_frame + 1; break;
	case BAD_HELLO_AGAIN: h.type = PD_TCP_T_HELLO; h.len = 0; break;
	case BAD_ACK: h.type = PD_TCP_T_ACK; h.len = 0; break;
	}
	pd_tcp_hdr_encode(&h, b);
	fx_raw_send(fd, b, sizeof(b));
	memset(b, 0xee, sizeof(b));
	(void)send(fd, b, sizeof(b), MSG_NOSIGNAL); /* some payload; may hit a closed socket */
}

/* After each attack: closed, counted, the arena untouched; then a real
 * sender still gets a write into slot 0 through. */
static void test_raw_bad_frames(void **state)
{
	static const struct { enum bad_kind k; size_t stat; } cases[] = {
		{ BAD_GARBAGE, offsetof(struct pd_tcp_stats, proto_errors) },
		{ BAD_TRUNC_EOF, offsetof(struct pd_tcp_stats, conn_errors) },
		{ BAD_TRUNC_STALL, offsetof(struct pd_tcp_stats, conn_errors) },
		{ BAD_NOT_GRANTED, offsetof(struct pd_tcp_stats, writes_rejected) },
		{ BAD_WRONG_GEN, offsetof(struct pd_tcp_stats, writes_rejected) },
		{ BAD_WRONG_TAG, offsetof(struct pd_tcp_stats, writes_rejected) },
		{ BAD_OVER_SLOT, offsetof(struct pd_tcp_stats, writes_rejected) },
		{ BAD_OVER_MAX, offsetof(struct pd_tcp_stats, proto_errors) },
		{ BAD_HELLO_AGAIN, offsetof(struct pd_tcp_stats, proto_errors) },
		{ BAD_ACK, offsetof(struct pd_tcp_stats, proto_errors) },
	};
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	uint8_t src[4 * KIB];
	struct pd_xfer x;
	struct pd_cpl cpl;

	c.io_ms = 300;
	c.slot_size = 4 * KIB;
	c.max_frame = 64 * KIB;
	fx_open(f, &c);
	fx_grant(f, 0, 1, 5);
	fx_grant(f, 1, 1, 5);
	fx_connect(f, FX_TOKEN);
	for (uint32_t i = 0; i < PD_ARRAY_SIZE(cases); i++) {
		struct pd_tcp_stats before = fx_stats(f->rx);
		uint64_t was, conn_was = before.conn_errors;
		int fd;

		memcpy(&was, (const uint8_t *)&before + cases[i].stat, sizeof(was));
		fx_snapshot(f);
		fd = fx_raw_connect(f->port);
		assert_int_equal(fx_raw_hello(fd, FX_TOKEN), 0);
		bad_send(f, fd, cases[i].k);
		assert_true(fx_raw_closed(fd));
		close(fd);
		assert_true(fx_wait_stat(f->rx, cases[i].stat, was + 1, FX_WAIT_MS));
		FX_WAIT_STAT(f->rx, conn_errors, conn_was + 1);
		fx_assert_untouched(f);
		fx_pattern(src, sizeof(src), 100 + i);
		x = fx_xfer(i, src, sizeof(src), 0, 1, 5);
		assert_int_equal(pd_tcp_post(f->tx, FX_PEER, &x, 1), 1);
		assert_int_equal(fx_wait(f->tx, &cpl, 1, FX_WAIT_MS), 1);
		assert_int_equal(cpl.status, 0);
		assert_int_equal(cpl.cookie, i);
		assert_memory_equal(f->arena, src, sizeof(src));
	}
	/* Only BAD_OVER_SLOT got past claim; landed saw it refused. */
	assert_int_equal(fx_get(f, &f->landed_err), 1);
	assert_int_equal(fx_get(f, &f->refused), 3);
	assert_int_equal(fx_get(f, &f->double_claims), 0);
	assert_int_equal(fx_stats(f->tx).conn_errors, 0);
}

/* A payload cut short: landed gets the error, no ACK, connection closed. */
static void test_raw_truncated_payload(void **state)
{
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	uint8_t b[100];
	int fd;

	fx_open(f, &c);
	fx_grant(f, 3, 2, 8);
	fd = fx_raw_connect(f->port);
	assert_int_equal(fx_raw_hello(fd, FX_TOKEN), 0);
	fx_raw_hdr(fd, PD_TCP_T_DATA, 3, 2, 4 * KIB, 1, 8);
	memset(b, 0x11, sizeof(b));
	fx_raw_send(fd, b, sizeof(b));
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	assert_true(fx_raw_closed(fd));
	close(fd);
	fx_wait_model(f, &f->landed_err, 1);
	assert_int_equal(fx_get(f, &f->landed_ok), 0);
	FX_WAIT_STAT(f->rx, conn_errors, 1);
	assert_int_equal(fx_stats(f->rx).frames_rx, 0);
	assert_int_equal(fx_stats(f->rx).acks_tx, 0);
}

/* More connections than max_conns: the extra one is closed at once. */
static void test_max_conns(void **state)
{
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	struct pd_tcp_opts o = fx_opts(&c);
	struct pd_tcp *rx;
	int port, fd1, fd2;

	(void)state;
	fx_open(f, &c);
	o.ops = &fx_ops;
	o.ctx = f;
	o.max_conns = 1;
	assert_int_equal(pd_tcp_create(&o, &rx), 0);
	assert_int_equal(pd_tcp_listen(rx, FX_HOST, 0), 0);
	port = pd_tcp_port(rx);
	fd1 = fx_raw_connect((uint16_t)port);
	assert_int_equal(fx_raw_hello(fd1, FX_TOKEN), 0);
	fd2 = fx_raw_connect((uint16_t)port);
	assert_true(fx_raw_closed(fd2));
	FX_WAIT_STAT(rx, conns_refused, 1);
	close(fd2);
	close(fd1);
	/* fd1's thread ends on the EOF; then a new connection gets a thread. */
	for (int tries = 0;; tries++) {
		int st;

		fd2 = fx_raw_connect((uint16_t)port);
		st = fx_raw_hello(fd2, FX_TOKEN);
		close(fd2);
		if (st == 0)
			break;
		assert_true(tries < 200);
		fx_sleep_ms(10);
	}
	FX_WAIT_STAT(rx, conns_accepted, 2); /* counted by the listener, maybe after the HELLO */
	assert_int_equal(fx_stats(rx).conns_accepted, 2);
	assert_true(fx_stats(rx).conns_refused >= 1);
	pd_tcp_destroy(rx);
}

/* ---- the sender's failures -------------------------------------------------------- */

static void free_port(uint16_t *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port = ntohs(a.sin_port);
	close(fd);
}

/* Nobody listening, and a listener that never answers HELLO. */
static void test_connect_fail(void **state)
{
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	uint8_t src[64];
	struct pd_xfer x = fx_xfer(5, src, sizeof(src), 0, 1, 1);
	struct pd_cpl cpl[4];
	uint16_t port;
	uint64_t t0;
	uint32_t n;
	int lfd, rc;

	c.connect_ms = 300;
	fx_open(f, &c);
	free_port(&port);
	assert_int_equal(pd_tcp_connect(f->tx, 1, FX_HOST, port, FX_TOKEN), 0);
	/* The refusal may beat the post: then the write is not taken. */
	rc = pd_tcp_post(f->tx, 1, &x, 1);
	assert_true(rc == 1 || rc == -ENOTCONN);
	n = rc == 1 ? 2 : 1;
	assert_int_equal(fx_wait(f->tx, cpl, n, FX_WAIT_MS), n);
	if (n == 2) {
		assert_int_equal(cpl[0].kind, PD_CPL_WRITE);
		assert_int_equal(cpl[0].status, -ECONNREFUSED);
	}
	assert_int_equal(cpl[n - 1].kind, PD_CPL_PEER);
	assert_int_equal(cpl[n - 1].status, -ECONNREFUSED);
	assert_int_equal(pd_tcp_post(f->tx, 1, &x, 1), -ENOTCONN);

	lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(lfd, 8), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&a, &len), 0);
	t0 = pd_now_ns();
	assert_int_equal(pd_tcp_connect(f->tx, 2, FX_HOST, ntohs(a.sin_port), FX_TOKEN), 0);
	assert_int_equal(fx_wait(f->tx, cpl, 1, FX_WAIT_MS), 1);
	assert_int_equal(cpl[0].kind, PD_CPL_PEER);
	assert_int_equal(cpl[0].peer, 2);
	assert_int_equal(cpl[0].status, -ETIMEDOUT);
	assert_true(pd_now_ns() - t0 >= 250 * PD_NS_PER_MS);
	assert_int_equal(fx_stats(f->tx).peer_failures, 2);
	assert_int_equal(pd_tcp_disconnect(f->tx, 1), 0);
	assert_int_equal(pd_tcp_disconnect(f->tx, 2), 0);
	assert_int_equal(fx_wait(f->tx, cpl, 1, 50), 0);
	close(lfd);
}

static void grant_n(struct fx *f, uint32_t n, const uint8_t *src, uint32_t len,
		    struct pd_xfer *x)
{
	for (uint32_t i = 0; i < n; i++) {
		fx_grant(f, i, 1, 1000 + i);
		x[i] = fx_xfer(i, src + (size_t)i * len, len, i, 1, 1000 + i);
	}
}

static void check_landed(struct fx *f, const struct pd_cpl *c, uint32_t nc,
			 const uint8_t *src, uint32_t len)
{
	for (uint32_t i = 0; i < nc; i++)
		if (c[i].kind == PD_CPL_WRITE && c[i].status == 0)
			assert_memory_equal(f->arena + c[i].cookie * f->cfg.slot_size,
					    src + c[i].cookie * len, len);
}

/* Disconnect while the receiver holds a claim: every write completes
 * exactly once before disconnect returns, the unacknowledged ones with
 * -ECONNABORTED; no peer completion; the receiver serves again after. */
static void test_disconnect_mid_transfer(void **state)
{
	enum { N = 200, LEN = 16 * KIB };
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	uint8_t *src = malloc((size_t)N * LEN);
	struct pd_xfer x[N];
	struct pd_cpl cpl[N + 1];
	uint32_t ok = 0;

	assert_non_null(src);
	c.nslots = N;
	c.slot_size = LEN;
	c.window = 8;
	fx_open(f, &c);
	fx_pattern(src, (size_t)N * LEN, 3);
	grant_n(f, N, src, LEN, x);
	fx_gate_set(f, 10, 0);
	fx_connect(f, FX_TOKEN);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, x, N), N);
	fx_wait_model(f, &f->claims, 11);
	assert_int_equal(pd_tcp_disconnect(f->tx, FX_PEER), 0);
	assert_int_equal(pd_tcp_poll(f->tx, cpl, N + 1), N);  /* all there, at once */
	fx_assert_once(cpl, N, N);
	for (uint32_t i = 0; i < N; i++) {
		assert_true(cpl[i].status == 0 || cpl[i].status == -ECONNABORTED);
		ok += cpl[i].status == 0;
	}
	assert_true(ok <= 10);
	check_landed(f, cpl, N, src, LEN);
	assert_int_equal(fx_stats(f->tx).peer_failures, 0);
	assert_int_equal(fx_stats(f->tx).writes_ok + fx_stats(f->tx).writes_failed, N);
	fx_gate_set(f, UINT32_MAX, 1);
	fx_connect(f, FX_TOKEN);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, &x[N - 1], 1), 1);
	assert_int_equal(fx_wait(f->tx, cpl, 1, FX_WAIT_MS), 1);
	assert_int_equal(cpl[0].status, 0);
	check_landed(f, cpl, 1, src, LEN);
	free(src);
}

/* One write refused by the receiver kills its connection: the peer fails,
 * every write completes once (acknowledged ones 0, the rest with the
 * peer's error), then one peer completion; nothing more after disconnect. */
static void test_peer_failure(void **state)
{
	enum { N = 100, LEN = 16 * KIB, BAD = 50 };
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	uint8_t *src = malloc((size_t)N * LEN);
	struct pd_xfer x[N];
	struct pd_cpl cpl[N + 2];
	uint32_t ok = 0;
	int err;

	assert_non_null(src);
	c.nslots = N;
	c.slot_size = LEN;
	c.window = 4;
	fx_open(f, &c);
	fx_pattern(src, (size_t)N * LEN, 4);
	grant_n(f, N, src, LEN, x);
	x[BAD].gen = 2;
	fx_connect(f, FX_TOKEN);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, x, N), N);
	assert_int_equal(fx_wait(f->tx, cpl, N + 1, FX_WAIT_MS), N + 1);
	fx_assert_once(cpl, N, N);
	assert_int_equal(cpl[N].kind, PD_CPL_PEER);
	err = cpl[N].status;
	assert_true(err == -ECONNRESET || err == -EPIPE);
	for (uint32_t i = 0; i < N; i++) {
		assert_true(cpl[i].status == 0 || cpl[i].status == err);
		ok += cpl[i].status == 0;
		if (cpl[i].cookie == BAD)
			assert_int_equal(cpl[i].status, err);
	}
	assert_true(ok < N);
	assert_true(ok <= fx_get(f, &f->landed_ok)); /* landed comes before the ACK */
	check_landed(f, cpl, N, src, LEN);
	assert_int_equal(fx_stats(f->rx).writes_rejected, 1);
	assert_true(fx_stats(f->tx).conn_errors >= 1);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, x, 1), -ENOTCONN);
	assert_int_equal(pd_tcp_disconnect(f->tx, FX_PEER), 0);
	assert_int_equal(fx_wait(f->tx, cpl, 1, 100), 0);
	free(src);
}

/* A receiver that stops reading: no progress for io_timeout_ms fails the peer. */
static void test_io_timeout(void **state)
{
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	static uint8_t src[4][16 * KIB];
	struct pd_xfer x[4];
	struct pd_cpl cpl[5];

	c.io_ms = 300;
	fx_open(f, &c);
	for (uint32_t i = 0; i < 4; i++) {
		fx_grant(f, i, 1, 1);
		x[i] = fx_xfer(i, src[i], sizeof(src[i]), i, 1, 1);
	}
	fx_gate_set(f, 0, 0);
	fx_connect(f, FX_TOKEN);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, x, 4), 4);
	assert_int_equal(fx_wait(f->tx, cpl, 5, FX_WAIT_MS), 5);
	fx_assert_once(cpl, 4, 4);
	for (uint32_t i = 0; i < 5; i++)
		assert_int_equal(cpl[i].status, -ETIMEDOUT);
	assert_int_equal(cpl[4].kind, PD_CPL_PEER);
	fx_gate_set(f, UINT32_MAX, 1);
	assert_int_equal(pd_tcp_disconnect(f->tx, FX_PEER), 0);
}

/* pd_tcp_stop with writes in flight: they complete with -ECONNABORTED into
 * the queue, which pd_tcp_poll still drains after the stop. */
static void test_stop_tx_in_flight(void **state)
{
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	static uint8_t src[8][4 * KIB];
	struct pd_xfer x[8];
	struct pd_cpl cpl[9];

	fx_open(f, &c);
	for (uint32_t i = 0; i < 8; i++) {
		fx_grant(f, i, 1, 1);
		x[i] = fx_xfer(i, src[i], sizeof(src[i]), i, 1, 1);
	}
	fx_gate_set(f, 0, 0);
	fx_connect(f, FX_TOKEN);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, x, 8), 8);
	fx_wait_model(f, &f->claims, 1);
	pd_tcp_stop(f->tx);
	assert_int_equal(pd_tcp_poll(f->tx, cpl, 9), 8);
	fx_assert_once(cpl, 8, 8);
	for (uint32_t i = 0; i < 8; i++)
		assert_int_equal(cpl[i].status, -ECONNABORTED);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, x, 1), -ENOENT);
}

/* pd_tcp_stop of a receiver in the middle of a payload: the claim is
 * landed with -ECONNABORTED at once (no deadline waited for), and the
 * stop is not counted as a connection error. */
static void test_stop_rx_in_flight(void **state)
{
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	uint8_t b[100];
	uint64_t t0;
	int fd;

	c.io_ms = 10000;
	fx_open(f, &c);
	fx_grant(f, 9, 1, 1);
	fd = fx_raw_connect(f->port);
	assert_int_equal(fx_raw_hello(fd, FX_TOKEN), 0);
	fx_raw_hdr(fd, PD_TCP_T_DATA, 9, 1, 4 * KIB, 1, 1);
	memset(b, 0x22, sizeof(b));
	fx_raw_send(fd, b, sizeof(b));
	fx_wait_model(f, &f->claims, 1);
	t0 = pd_now_ns();
	pd_tcp_stop(f->rx);
	assert_true(pd_now_ns() - t0 < 2 * PD_NS_PER_S);
	assert_true(fx_raw_closed(fd));
	close(fd);
	assert_int_equal(fx_get(f, &f->landed_err), 1);
	assert_int_equal(fx_get(f, &f->landed_ok), 0);
	assert_int_equal(fx_stats(f->rx).conn_errors, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hdr_golden),
		cmocka_unit_test(test_hdr_decode_negative),
		cmocka_unit_test(test_create_negative),
		cmocka_unit_test_setup_teardown(test_api_negative, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_limits, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_hello_wrong_token, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_hello_raw, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_raw_bad_frames, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_raw_truncated_payload, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_max_conns, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_connect_fail, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_disconnect_mid_transfer, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_peer_failure, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_io_timeout, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_stop_tx_in_flight, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_stop_rx_in_flight, fx_setup, fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
