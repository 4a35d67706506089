/* SPDX-License-Identifier: MIT */
/*
 * TCP transport (broker/pd_tcp*.c) over real loopback sockets: transfers
 * that must succeed, every byte verified and every cookie completed exactly
 * once; the completion eventfd; two peers at once; an idle instance using
 * no CPU. The fixture is tcp_fixture.h; failures are in test_tcp.c.
 */
#include "pd_test.h"
#include "tcp_fixture.h"

#define KIB 1024u
#define MIB (1024u * 1024u)

/* Post x[0..n) in batches of 1..max_batch, polling as it goes; then wait
 * for the rest. Returns the completions in c (n of them). */
static void post_all(struct pd_tcp *t, uint32_t peer, const struct pd_xfer *x, uint32_t n,
		     uint32_t max_batch, uint64_t seed, struct pd_cpl *c)
{
	uint32_t posted = 0, got = 0;

	while (posted < n) {
		uint32_t b = 1 + (uint32_t)(fx_mix(seed + posted) % max_batch);
		int rc;

		b = b < n - posted ? b : n - posted;
		rc = pd_tcp_post(t, peer, x + posted, b);
		if (rc == -EAGAIN) {
			got += fx_wait(t, c + got, 1, FX_WAIT_MS);
			continue;
		}
		assert_int_equal(rc, (int)b);
		posted += b;
		rc = pd_tcp_poll(t, c + got, n - got);
		assert_true(rc >= 0);
		got += (uint32_t)rc;
	}
	got += fx_wait(t, c + got, n - got, FX_WAIT_MS);
	assert_int_equal(got, n);
}

static void assert_all_ok(const struct pd_cpl *c, uint32_t n, uint32_t peer)
{
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(c[i].status, 0);
		assert_int_equal(c[i].kind, PD_CPL_WRITE);
		assert_int_equal(c[i].peer, peer);
	}
}

static void test_one_4k(void **state)
{
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	uint8_t src[4 * KIB];
	struct pd_xfer x[2];
	struct pd_cpl cpl[2];
	struct pd_tcp_stats tx, rx;

	fx_open(f, &c);
	fx_pattern(src, sizeof(src), 42);
	fx_grant(f, 5, 3, 0xabc);
	fx_grant(f, 6, 1, 0xabd);
	x[0] = fx_xfer(77, src, sizeof(src), 5, 3, 0xabc);
	x[1] = fx_xfer(78, NULL, 0, 6, 1, 0xabd);   /* an empty write is a write */
	fx_connect(f, FX_TOKEN);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, x, 1), 1);
	assert_int_equal(fx_wait(f->tx, cpl, 1, FX_WAIT_MS), 1);
	assert_int_equal(cpl[0].cookie, 77);
	assert_all_ok(cpl, 1, FX_PEER);
	assert_memory_equal(f->arena + 5 * c.slot_size, src, sizeof(src));
	assert_int_equal(f->arena[5 * c.slot_size + sizeof(src)], 0xa5);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, &x[1], 1), 1);
	assert_int_equal(fx_wait(f->tx, cpl, 1, FX_WAIT_MS), 1);
	assert_int_equal(cpl[0].cookie, 78);
	assert_all_ok(cpl, 1, FX_PEER);
	assert_int_equal(fx_get(f, &f->landed_ok), 2);
	tx = fx_stats(f->tx);
	rx = fx_stats(f->rx);
	assert_int_equal(tx.frames_tx, 2);
	assert_int_equal(tx.bytes_tx, sizeof(src));
	assert_int_equal(tx.acks_rx, 2);
	assert_int_equal(tx.writes_ok, 2);
	assert_int_equal(rx.frames_rx, 2);
	assert_int_equal(rx.bytes_rx, sizeof(src));
	FX_WAIT_STAT(f->rx, acks_tx, 2);  /* counted once sent: may trail the completion */
	FX_WAIT_STAT(f->rx, conns_accepted, c.lanes);      /* lanes connect on their own */
	assert_int_equal(tx.writes_failed + tx.conn_errors + tx.proto_errors, 0);
	assert_int_equal(rx.conn_errors + rx.proto_errors + rx.writes_rejected, 0);
}

/* 1000 writes of random sizes (0..32 KiB) over 2 lanes, many in flight. */
static void test_random_1000(void **state)
{
	enum { N = 1000, SLOT = 32 * KIB };
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	uint8_t *src = malloc((size_t)N * SLOT);
	struct pd_xfer *x = calloc(N, sizeof(*x));
	struct pd_cpl *cpl = calloc(N + 1, sizeof(*cpl));
	uint64_t bytes = 0;

	assert_non_null(src);
	assert_non_null(x);
	assert_non_null(cpl);
	c.nslots = N;
	c.slot_size = SLOT;
	fx_open(f, &c);
	fx_pattern(src, (size_t)N * SLOT, 1000);
	for (uint32_t i = 0; i < N; i++) {
		uint32_t len = (uint32_t)(fx_mix(i) % (SLOT + 1));

		fx_grant(f, i, i + 1, i * 7);
		x[i] = fx_xfer(i, src + (size_t)i * SLOT, len, i, i + 1, i * 7);
		bytes += len;
	}
	fx_connect(f, FX_TOKEN);
	post_all(f->tx, FX_PEER, x, N, 64, 5, cpl);
	fx_assert_once(cpl, N, N);
	assert_all_ok(cpl, N, FX_PEER);
	assert_int_equal(pd_tcp_poll(f->tx, cpl, 1), 0);
	for (uint32_t i = 0; i < N; i++) {
		const uint8_t *slot = f->arena + (size_t)i * SLOT;

		assert_memory_equal(slot, x[i].src, x[i].len);
		if (x[i].len < SLOT)
			assert_int_equal(slot[x[i].len], 0xa5);  /* not one byte more */
	}
	assert_int_equal(fx_get(f, &f->landed_ok), N);
	assert_int_equal(fx_stats(f->rx).bytes_rx, bytes);
	assert_int_equal(fx_stats(f->tx).bytes_tx, bytes);
	assert_int_equal(fx_stats(f->tx).acks_rx, N);
	free(cpl);
	free(x);
	free(src);
}

/* 64 chunks of 4 MiB: 4 rounds over 16 slots, each verified. */
static void test_64x4mib(void **state)
{
	enum { SLOTS = 16, ROUNDS = 4, LEN = 4 * MIB };
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	uint8_t *src = malloc((size_t)SLOTS * LEN);
	struct pd_xfer x[SLOTS];
	struct pd_cpl cpl[SLOTS];

	assert_non_null(src);
	c.nslots = SLOTS;
	c.slot_size = LEN;
	fx_open(f, &c);
	fx_pattern(src, (size_t)SLOTS * LEN, 64);
	fx_connect(f, FX_TOKEN);
	for (uint32_t r = 0; r < ROUNDS; r++) {
		memset(f->arena, 0, f->arena_len);
		for (uint32_t i = 0; i < SLOTS; i++) {
			const uint8_t *chunk = src + (size_t)((i + r) % SLOTS) * LEN;

			fx_grant(f, i, r + 1, r);
			x[i] = fx_xfer(r * SLOTS + i, chunk, LEN, i, r + 1, r);
		}
		assert_int_equal(pd_tcp_post(f->tx, FX_PEER, x, SLOTS), SLOTS);
		assert_int_equal(fx_wait(f->tx, cpl, SLOTS, FX_WAIT_MS), SLOTS);
		assert_all_ok(cpl, SLOTS, FX_PEER);
		for (uint32_t i = 0; i < SLOTS; i++) {
			uint32_t k = (uint32_t)cpl[i].cookie - r * SLOTS;

			assert_true(k < SLOTS);
			assert_memory_equal(f->arena + (size_t)k * LEN, x[k].src, LEN);
		}
	}
	assert_int_equal(fx_stats(f->rx).bytes_rx, (uint64_t)ROUNDS * SLOTS * LEN);
	free(src);
}

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* Readable exactly while completions are pending. */
static void test_event_fd(void **state)
{
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	static uint8_t src[4][KIB];
	struct pd_xfer x[4];
	struct pd_cpl cpl[4];
	int efd;

	fx_open(f, &c);
	efd = pd_tcp_event_fd(f->tx);
	assert_true(efd >= 0);
	for (uint32_t i = 0; i < 4; i++) {
		fx_grant(f, i, 1, 1);
		x[i] = fx_xfer(i, src[i], KIB, i, 1, 1);
	}
	fx_connect(f, FX_TOKEN);
	assert_false(readable(efd, 0));
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, x, 1), 1);
	assert_true(readable(efd, FX_WAIT_MS));
	assert_true(readable(efd, 0));                 /* level: stays readable */
	assert_int_equal(pd_tcp_poll(f->tx, cpl, 4), 1);
	assert_false(readable(efd, 0));
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, x + 1, 3), 3);
	FX_WAIT_STAT(f->tx, writes_ok, 4);
	assert_true(readable(efd, 0));
	assert_int_equal(pd_tcp_poll(f->tx, cpl, 1), 1);
	assert_true(readable(efd, 0));                 /* two still pending */
	assert_int_equal(pd_tcp_poll(f->tx, cpl, 4), 2);
	assert_false(readable(efd, 0));
	assert_int_equal(pd_tcp_poll(f->tx, cpl, 4), 0);
	assert_false(readable(efd, 0));
}

/* Two peers on one sender, both into one receiver, interleaved. */
static void test_two_peers(void **state)
{
	enum { N = 100, LEN = 8 * KIB };
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	uint8_t *src = malloc((size_t)2 * N * LEN);
	struct pd_xfer x[2 * N];
	struct pd_cpl cpl[2 * N];
	uint32_t per[2] = { 0, 0 };

	assert_non_null(src);
	c.nslots = 2 * N;
	c.slot_size = LEN;
	fx_open(f, &c);
	fx_pattern(src, (size_t)2 * N * LEN, 2);
	for (uint32_t i = 0; i < 2 * N; i++) {
		fx_grant(f, i, 1, i);
		x[i] = fx_xfer(i, src + (size_t)i * LEN, LEN, i, 1, i);
	}
	assert_int_equal(pd_tcp_connect(f->tx, 10, FX_HOST, f->port, FX_TOKEN), 0);
	assert_int_equal(pd_tcp_connect(f->tx, 11, FX_HOST, f->port, FX_TOKEN), 0);
	for (uint32_t i = 0; i < N; i += 10) {
		assert_int_equal(pd_tcp_post(f->tx, 10, x + i, 10), 10);
		assert_int_equal(pd_tcp_post(f->tx, 11, x + N + i, 10), 10);
	}
	assert_int_equal(fx_wait(f->tx, cpl, 2 * N, FX_WAIT_MS), 2 * N);
	fx_assert_once(cpl, 2 * N, 2 * N);
	for (uint32_t i = 0; i < 2 * N; i++) {
		assert_int_equal(cpl[i].status, 0);
		assert_int_equal(cpl[i].peer, cpl[i].cookie < N ? 10 : 11);
		per[cpl[i].peer - 10]++;
	}
	assert_int_equal(per[0], N);
	assert_int_equal(per[1], N);
	assert_memory_equal(f->arena, src, (size_t)2 * N * LEN);
	FX_WAIT_STAT(f->rx, conns_accepted, 2 * c.lanes);
	free(src);
}

/* One write at a time until one goes the direct way (the lane thread idle
 * by then: it is, once its HELLO is done); its completion is the owner's. */
static void direct_one(struct fx *f, struct pd_xfer *x)
{
	struct pd_cpl cpl[1];
	uint64_t before = fx_stats(f->tx).direct_tx;

	for (uint32_t i = 0; i < 1000 && fx_stats(f->tx).direct_tx == before; i++) {
		assert_int_equal(pd_tcp_post(f->tx, FX_PEER, x, 1), 1);
		assert_int_equal(fx_wait(f->tx, cpl, 1, FX_WAIT_MS), 1);
		assert_all_ok(cpl, 1, FX_PEER);
		if (fx_stats(f->tx).direct_tx == before)
			fx_sleep_ms(1);
	}
	assert_int_equal(fx_stats(f->tx).direct_tx, before + 1);
}

/* Single small writes on an idle lane go direct and land; a batch behind
 * one still goes through the lanes, and everything completes once. */
static void test_direct(void **state)
{
	enum { N = 16, LEN = 4 * KIB };
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	static uint8_t src[N][LEN];
	struct pd_xfer x[N];
	struct pd_cpl cpl[N];
	uint32_t seen = 0;

	fx_open(f, &c);
	fx_pattern(&src[0][0], sizeof(src), 7);
	for (uint32_t i = 0; i < N; i++) {
		fx_grant(f, i, 1, i);
		x[i] = fx_xfer(i, src[i], LEN, i, 1, i);
	}
	fx_connect(f, FX_TOKEN);
	direct_one(f, &x[0]);
	assert_memory_equal(f->arena, src[0], LEN);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, &x[1], 1), 1);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, &x[2], N - 2), N - 2);
	assert_int_equal(fx_wait(f->tx, cpl, N - 1, FX_WAIT_MS), N - 1);
	for (uint32_t i = 0; i < N - 1; i++) {
		assert_int_equal(cpl[i].status, 0);
		assert_true(cpl[i].cookie >= 1 && cpl[i].cookie < N);
		assert_false(seen & (1u << cpl[i].cookie));
		seen |= 1u << cpl[i].cookie;
	}
	for (uint32_t i = 1; i < N; i++)
		assert_memory_equal(f->arena + (size_t)i * c.slot_size, src[i], LEN);
	direct_one(f, &x[N - 1]);
	assert_int_equal(fx_stats(f->tx).writes_ok, fx_stats(f->tx).acks_rx);
	assert_int_equal(fx_stats(f->tx).proto_errors + fx_stats(f->tx).conn_errors, 0);
}

/* Two 4 KiB writes granted: the first goes direct and lands, then the
 * receiver holds its claims (the gate shut) and the second goes direct
 * too, not acknowledged. */
static void direct_held(struct fx *f, uint32_t io_ms, uint8_t (*src)[4 * KIB], struct pd_xfer *x)
{
	struct fx_cfg c = fx_cfg_default();
	uint64_t d0;

	c.io_ms = io_ms;
	fx_open(f, &c);
	for (uint32_t i = 0; i < 2; i++) {
		fx_grant(f, i, 1, 1);
		x[i] = fx_xfer(i, src[i], 4 * KIB, i, 1, 1);
	}
	fx_connect(f, FX_TOKEN);
	direct_one(f, &x[0]);
	fx_gate_set(f, fx_get(f, &f->claims), 0);
	d0 = fx_stats(f->tx).direct_tx;
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, &x[1], 1), 1);
	assert_int_equal(fx_stats(f->tx).direct_tx, d0 + 1); /* the direct way, not a lane's */
}

/* A direct write the receiver never acknowledges still fails after
 * io_timeout_ms: the idle lane thread takes it back and times it out. */
static void test_direct_timeout(void **state)
{
	struct fx *f = *state;
	static uint8_t src[2][4 * KIB];
	struct pd_xfer x[2];
	struct pd_cpl cpl[3];

	direct_held(f, 300, src, x);
	assert_int_equal(fx_wait(f->tx, cpl, 2, FX_WAIT_MS), 2);
	assert_int_equal(cpl[0].cookie, 1);
	assert_int_equal(cpl[0].status, -ETIMEDOUT);
	assert_int_equal(cpl[1].kind, PD_CPL_PEER);
	assert_int_equal(cpl[1].status, -ETIMEDOUT);
	fx_gate_set(f, UINT32_MAX, 1);
	assert_int_equal(pd_tcp_disconnect(f->tx, FX_PEER), 0);
}

/* A direct write the receiver refuses: it closes the connection, the lane
 * thread finds the EOF and fails the peer as for any write. */
static void test_direct_refused(void **state)
{
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	static uint8_t src[2][4 * KIB];
	struct pd_xfer x[2];
	struct pd_cpl cpl[3];
	uint64_t d0;

	fx_open(f, &c);
	for (uint32_t i = 0; i < 2; i++) {
		fx_grant(f, i, 1, 1);
		x[i] = fx_xfer(i, src[i], sizeof(src[i]), i, 1, 1);
	}
	x[1].gen = 2; /* not the granted generation: claim refuses it */
	fx_connect(f, FX_TOKEN);
	direct_one(f, &x[0]);
	d0 = fx_stats(f->tx).direct_tx;
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, &x[1], 1), 1);
	assert_int_equal(fx_stats(f->tx).direct_tx, d0 + 1); /* the direct way, not a lane's */
	assert_int_equal(fx_wait(f->tx, cpl, 2, FX_WAIT_MS), 2);
	assert_int_equal(cpl[0].cookie, 1);
	assert_true(cpl[0].status == -ECONNRESET || cpl[0].status == -EPIPE);
	assert_int_equal(cpl[1].kind, PD_CPL_PEER);
	assert_int_equal(fx_stats(f->rx).writes_rejected, 1);
	assert_int_equal(pd_tcp_disconnect(f->tx, FX_PEER), 0);
}

/* The peer disconnected while a direct write waits for its ACK (the
 * receiver holds it): the frame completes once, as failed, with the
 * peer's completion, and the transport's event fd is not left readable
 * (the lane's socket went from it, so nothing spins on it). */
static void test_direct_disconnect_armed(void **state)
{
	struct fx *f = *state;
	static uint8_t src[2][4 * KIB];
	struct pd_xfer x[2];
	struct pd_cpl cpl[3];
	struct pollfd pfd;
	int n;

	direct_held(f, 10000, src, x);
	assert_int_equal(pd_tcp_disconnect(f->tx, FX_PEER), 0);
	n = fx_wait(f->tx, cpl, 3, 500);
	assert_true(n >= 1);
	assert_int_equal(cpl[0].cookie, 1);
	assert_true(cpl[0].status < 0);
	for (int i = 1; i < n; i++)
		assert_int_equal(cpl[i].kind, PD_CPL_PEER);
	pfd = (struct pollfd){ .fd = pd_tcp_event_fd(f->tx), .events = POLLIN };
	assert_int_equal(poll(&pfd, 1, 200), 0);
	fx_gate_set(f, UINT32_MAX, 1);
}

/* A listener of our own standing in for the receiver: accept the n lanes
 * and answer their HELLOs; the accepted sockets go to fds. */
static uint16_t raw_listener(int *lfd)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);

	*lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(*lfd >= 0);
	assert_int_equal(inet_pton(AF_INET, FX_HOST, &a.sin_addr), 1);
	assert_int_equal(bind(*lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(*lfd, 8), 0);
	assert_int_equal(getsockname(*lfd, (struct sockaddr *)&a, &len), 0);
	return ntohs(a.sin_port);
}

static void raw_accept_lanes(int lfd, int *fds, uint32_t n)
{
	struct timeval tv = { 3, 0 };

	for (uint32_t i = 0; i < n; i++) {
		struct pd_tcp_hdr h;

		fds[i] = accept(lfd, NULL, NULL);
		assert_true(fds[i] >= 0);
		assert_int_equal(setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
		assert_int_equal(fx_raw_recv_hdr(fds[i], &h), 0);
		assert_int_equal(h.type, PD_TCP_T_HELLO);
		fx_raw_hdr(fds[i], PD_TCP_T_HELLO, h.slot, h.gen, 0, 0, 0);
	}
}

/* The sender f->tx with lanes lanes, connected to a listener of our own
 * (receive buffer rcvbuf when not 0) whose accepted sockets go to fds;
 * the listener's port. */
static uint16_t raw_connect(struct fx *f, uint32_t lanes, int rcvbuf, int *lfd, int *fds)
{
	struct fx_cfg c = fx_cfg_default();
	uint16_t port;

	c.lanes = lanes;
	fx_open(f, &c);
	port = raw_listener(lfd);
	if (rcvbuf)
		assert_int_equal(setsockopt(*lfd, SOL_SOCKET, SO_RCVBUF, &rcvbuf,
					    sizeof(rcvbuf)), 0);
	assert_int_equal(pd_tcp_connect(f->tx, FX_PEER, FX_HOST, port, FX_TOKEN), 0);
	raw_accept_lanes(*lfd, fds, lanes);
	return port;
}

/* A direct write answered with an ACK that is not its own (another
 * cookie): a protocol error, counted; the write and the peer fail, once,
 * and nothing lands as done. */
static void test_direct_bad_ack(void **state)
{
	enum { LEN = 4 * KIB };
	struct fx *f = *state;
	static uint8_t src[LEN], got[LEN];
	struct pd_xfer x = fx_xfer(5, src, LEN, 3, 1, 9);
	struct pd_cpl cpl[3];
	struct pollfd pfd[2];
	struct pd_tcp_hdr h;
	int lfd, fds[2], n, in = -1;

	(void)raw_connect(f, 2, 0, &lfd, fds);
	fx_sleep_ms(50); /* both lane threads idle after their HELLO */
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, &x, 1), 1);
	assert_int_equal(fx_stats(f->tx).direct_tx, 1);
	for (int i = 0; i < 2; i++)
		pfd[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
	assert_true(poll(pfd, 2, 3000) >= 1);
	in = pfd[0].revents & POLLIN ? fds[0] : fds[1];
	assert_int_equal(fx_raw_recv_hdr(in, &h), 0);
	assert_int_equal(h.type, PD_TCP_T_DATA);
	assert_int_equal(recv(in, got, LEN, MSG_WAITALL), LEN);
	fx_raw_hdr(in, PD_TCP_T_ACK, h.slot, h.gen, 0, h.cookie + 1, h.tag);
	n = fx_wait(f->tx, cpl, 3, FX_WAIT_MS);
	assert_true(n >= 1);
	assert_int_equal(cpl[0].kind, PD_CPL_WRITE);
	assert_int_equal(cpl[0].cookie, 5);
	assert_true(cpl[0].status < 0);
	if (n == 1)
		n += fx_wait(f->tx, cpl + 1, 1, FX_WAIT_MS);
	assert_int_equal(n, 2);
	assert_int_equal(cpl[1].kind, PD_CPL_PEER);
	assert_int_equal(fx_wait(f->tx, cpl, 1, 100), 0); /* once */
	assert_true(fx_stats(f->tx).proto_errors >= 1);
	assert_int_equal(fx_stats(f->tx).writes_ok, 0);
	assert_int_equal(pd_tcp_disconnect(f->tx, FX_PEER), 0);
	for (int i = 0; i < 2; i++)
		(void)close(fds[i]);
	(void)close(lfd);
}

/* The sender's end of a connection to port, found among this process's
 * fds by its peer's port (the transport runs in this process): -1 if none. */
static int socket_to(uint16_t port)
{
	for (int fd = 3; fd < 4096; fd++) {
		struct sockaddr_in a;
		socklen_t len = sizeof(a);

		if (getpeername(fd, (struct sockaddr *)&a, &len) == 0 &&
		    a.sin_family == AF_INET && ntohs(a.sin_port) == port)
			return fd;
	}
	return -1;
}

/* A direct write the lane's socket takes only part of (its send buffer
 * made small, the receiver's window too, and nothing read yet): the lane
 * thread sends the rest after it, the frame arrives whole and in order,
 * nothing completes before its ACK, and the ACK completes it once. */
static void test_direct_partial(void **state)
{
	enum { LEN = 64 * KIB };
	struct fx *f = *state;
	static uint8_t src[LEN], got[LEN];
	struct pd_xfer x = fx_xfer(7, src, LEN, 2, 1, 4);
	struct pd_cpl cpl[2];
	struct pd_tcp_hdr h;
	int lfd, fd, lane, small = 4096;

	fx_pattern(src, LEN, 11);
	lane = socket_to(raw_connect(f, 1, small, &lfd, &fd));
	assert_true(lane >= 0);
	assert_int_equal(setsockopt(lane, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	fx_sleep_ms(50); /* the lane thread idle after its HELLO */
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, &x, 1), 1);
	assert_int_equal(fx_stats(f->tx).direct_partial, 1);
	assert_int_equal(fx_wait(f->tx, cpl, 1, 100), 0);
	assert_int_equal(fx_raw_recv_hdr(fd, &h), 0);
	assert_int_equal(h.type, PD_TCP_T_DATA);
	assert_int_equal(h.len, LEN);
	assert_int_equal(recv(fd, got, LEN, MSG_WAITALL), LEN);
	assert_memory_equal(got, src, LEN);
	assert_int_equal(fx_wait(f->tx, cpl, 1, 100), 0); /* sent, not acknowledged */
	fx_raw_hdr(fd, PD_TCP_T_ACK, h.slot, h.gen, 0, h.cookie, h.tag);
	assert_int_equal(fx_wait(f->tx, cpl, 1, FX_WAIT_MS), 1);
	assert_all_ok(cpl, 1, FX_PEER);
	assert_int_equal(cpl[0].cookie, 7);
	assert_int_equal(fx_wait(f->tx, cpl, 1, 100), 0); /* once */
	assert_int_equal(fx_stats(f->tx).writes_ok, 1);
	assert_int_equal(fx_stats(f->tx).frames_tx, 1);
	assert_int_equal(fx_stats(f->tx).direct_tx, 0);
	assert_int_equal(fx_stats(f->tx).proto_errors + fx_stats(f->tx).conn_errors, 0);
	assert_int_equal(pd_tcp_disconnect(f->tx, FX_PEER), 0);
	(void)close(fd);
	(void)close(lfd);
}

static void test_idle_cpu(void **state)
{
	struct fx *f = *state;
	struct fx_cfg c = fx_cfg_default();
	uint8_t src[KIB] = { 0 };
	struct pd_xfer x = fx_xfer(1, src, sizeof(src), 0, 1, 1);
	struct pd_cpl cpl;
	long hz = sysconf(_SC_CLK_TCK);
	uint64_t t0, used_ms;

	fx_open(f, &c);
	fx_grant(f, 0, 1, 1);
	fx_connect(f, FX_TOKEN);
	assert_int_equal(pd_tcp_post(f->tx, FX_PEER, &x, 1), 1);   /* lanes up */
	assert_int_equal(fx_wait(f->tx, &cpl, 1, FX_WAIT_MS), 1);
	assert_int_equal(cpl.status, 0);
	fx_sleep_ms(50);
	t0 = pd_test_cpu_ticks(getpid());
	fx_sleep_ms(1000);
	used_ms = (pd_test_cpu_ticks(getpid()) - t0) * 1000 / (uint64_t)hz;
	print_message("idle: %" PRIu64 " ms of CPU in 1000 ms\n", used_ms);
	assert_true(used_ms <= 50);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_one_4k, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_random_1000, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_64x4mib, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_event_fd, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_two_peers, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_direct, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_direct_timeout, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_direct_refused, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_direct_disconnect_armed, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_direct_bad_ack, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_direct_partial, fx_setup, fx_teardown),
		cmocka_unit_test_setup_teardown(test_idle_cpu, fx_setup, fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
