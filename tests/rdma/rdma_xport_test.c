/* SPDX-License-Identifier: MIT */
/*
 * The RDMA transport (broker/pd_rdma*.c) against real verbs: two instances
 * in one process, the receiver on one rxe device, the sender on the other,
 * across a veth pair (tests/rdma/run.sh sets it up in a qemu guest).
 *
 *   rdma_xport_test RECV_IP SEND_IP
 *
 * Prints one line per check ("PASS name" / "FAIL name: why") and
 * "N passed, N failed"; exits 1 when something failed. Every wait is
 * bounded: a hang is reported as a failure, never waited out.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pd_rdma.h"
#include "pd_rdma_int.h"
#include "pd_time.h"
#include "rdma_check.h"

static const char *recv_ip, *send_ip;
static uint8_t *recv_arena, *send_arena;

#define NSLOTS    64u
#define SLOT_SIZE (64u * 1024u)
#define ARENA     ((size_t)NSLOTS * SLOT_SIZE)
#define MAXCK     4096u
#define WAIT_MS   30000u

/* ---- completions -------------------------------------------------------------------- */

struct tally {
	int seen[MAXCK];               /* completions per cookie */
	int status[MAXCK];
	uint32_t writes, ok, failed, peers, dup, unknown;
	int peer_status;
};

static void tally_reset(struct tally *t)
{
	memset(t, 0, sizeof(*t));
}

static void tally_add(struct tally *t, const struct pd_cpl *c)
{
	if (c->kind == PD_CPL_PEER) {
		t->peers++;
		t->peer_status = c->status;
		return;
	}
	if (c->cookie >= MAXCK) {
		t->unknown++;
		return;
	}
	if (t->seen[c->cookie]++)
		t->dup++;
	t->status[c->cookie] = c->status;
	t->writes++;
	if (c->status == 0)
		t->ok++;
	else
		t->failed++;
}

/* Collect until @writes write completions and @peers peer completions
 * arrived, or @ms passed. @return 0, or -ETIMEDOUT. */
static int wait_for(struct pd_rdma *r, struct tally *t, uint32_t writes, uint32_t peers,
		    uint32_t ms)
{
	uint64_t end = pd_deadline_ms(ms);
	struct pollfd pfd = { .fd = pd_rdma_event_fd(r), .events = POLLIN };
	struct pd_cpl c[64];

	while (t->writes < writes || t->peers < peers) {
		uint64_t now = pd_now_ns();
		int n;

		if (now >= end)
			return -ETIMEDOUT;
		(void)poll(&pfd, 1, (int)((end - now) / PD_NS_PER_MS) + 1);
		while ((n = pd_rdma_poll(r, c, 64)) > 0) {
			for (int i = 0; i < n; i++)
				tally_add(t, &c[i]);
		}
	}
	return 0;
}

/* Nothing more arrives within @ms (catches duplicates and late ones). */
static uint32_t quiet_for(struct pd_rdma *r, struct tally *t, uint32_t ms)
{
	uint32_t before = t->writes + t->peers;

	(void)wait_for(r, t, UINT32_MAX, UINT32_MAX, ms);
	return t->writes + t->peers - before;
}

/* Disconnect and swallow the completions it produced. */
static int disconnect_quiet(struct pd_rdma *s, uint32_t peer)
{
	static struct tally t;
	int rc = pd_rdma_disconnect(s, peer);

	tally_reset(&t);
	(void)quiet_for(s, &t, 50);
	return rc;
}

/* ---- data -------------------------------------------------------------------------- */

static uint8_t pattern(uint32_t slot, uint32_t round, uint32_t i)
{
	return (uint8_t)(slot * 131u + round * 29u + i * 7u + (i >> 9));
}

static void fill_send(uint32_t slot, uint32_t round, uint32_t len)
{
	uint8_t *p = send_arena + (size_t)slot * SLOT_SIZE;

	for (uint32_t i = 0; i < len; i++)
		p[i] = pattern(slot, round, i);
}

/* Slot @slot holds the pattern for @len bytes, then the 0xEE fill. */
static int slot_ok(uint32_t slot, uint32_t round, uint32_t len, char *why, size_t whylen)
{
	const uint8_t *p = recv_arena + (size_t)slot * SLOT_SIZE;

	for (uint32_t i = 0; i < SLOT_SIZE; i++) {
		uint8_t want = i < len ? pattern(slot, round, i) : 0xEE;

		if (p[i] != want) {
			(void)snprintf(why, whylen, "slot %u byte %u: 0x%02x, want 0x%02x", slot, i,
				       p[i], want);
			return 0;
		}
	}
	return 1;
}

static struct pd_xfer xfer(uint64_t cookie, uint32_t slot, uint32_t len)
{
	return (struct pd_xfer){ .cookie = cookie,
				      .src = send_arena + (size_t)slot * SLOT_SIZE,
				      .len = len, .slot = slot, .gen = 1 };
}

/* ---- setup ---------------------------------------------------------------------------- */

static int refuse_666(void *ctx, uint64_t token, uint32_t *peer)
{
	(void)ctx;
	if (token == 666)
		return -EACCES;
	*peer = (uint32_t)token;
	return 0;
}

static const struct pd_rdma_ops recv_ops = { .accept_peer = refuse_666 };

static int make_recv(struct pd_rdma **out, int *port)
{
	struct pd_rdma_opts o;
	int rc;

	pd_rdma_opts_init(&o);
	o.addr = recv_ip;
	o.recv_base = recv_arena;
	o.recv_len = ARENA;
	o.ops = &recv_ops;
	rc = pd_rdma_create(&o, out);
	if (rc == 0)
		rc = pd_rdma_listen(*out, recv_ip, 0);
	if (rc == 0)
		*port = pd_rdma_port(*out);
	return rc;
}

static int make_send(struct pd_rdma **out, uint32_t sq_depth, uint32_t interval)
{
	struct pd_rdma_opts o;

	pd_rdma_opts_init(&o);
	o.addr = send_ip;
	o.send_base = send_arena;
	o.send_len = ARENA;
	o.sq_depth = sq_depth;
	o.signal_interval = interval;
	o.ack_timeout = 12; /* 16.8 ms x 7 retries: a dead receiver is found fast */
	o.connect_timeout_ms = 10000;
	return pd_rdma_create(&o, out);
}

static struct pd_rdma_remote remote_of(struct pd_rdma *recv, uint64_t token)
{
	struct pd_rdma_local l;

	(void)pd_rdma_local_info(recv, &l);
	return (struct pd_rdma_remote){ .base = l.base, .slot_size = SLOT_SIZE, .rkey = l.rkey,
					.nslots = NSLOTS, .token = token };
}

/* Post @n writes (cookies base.., slots (i % NSLOTS)), retrying on -EAGAIN
 * while collecting completions. @return 0 or the post error. */
static int post_all(struct pd_rdma *s, uint32_t peer, const struct pd_xfer *x, uint32_t n,
		    uint32_t batch, struct tally *t)
{
	for (uint32_t i = 0; i < n;) {
		uint32_t k = n - i < batch ? n - i : batch;
		int rc = pd_rdma_post(s, peer, x + i, k);

		if (rc == -EAGAIN) {
			if (wait_for(s, t, t->writes + 1, 0, WAIT_MS) < 0)
				return -ETIMEDOUT;
			continue;
		}
		if (rc < 0)
			return rc;
		i += k;
	}
	return 0;
}

/* ---- checks ------------------------------------------------------------------------------ */

static void reset_recv(void)
{
	memset(recv_arena, 0xEE, ARENA);
}

static uint32_t len_for(uint32_t i)
{
	static const uint32_t lens[] = { SLOT_SIZE, 1, 64, 65, 4096, SLOT_SIZE - 1, 12345, 0 };

	return lens[i % PD_ARRAY_SIZE(lens)];
}

/* Every slot written once, every byte checked, every cookie once. */
static void check_round(struct pd_rdma *s, uint32_t peer, uint32_t round, const char *name)
{
	static struct pd_xfer x[NSLOTS];
	static struct tally t;
	char why[160] = "";
	int ok = 1, rc;

	reset_recv();
	tally_reset(&t);
	for (uint32_t i = 0; i < NSLOTS; i++) {
		fill_send(i, round, len_for(i + round));
		x[i] = xfer(100 + i, i, len_for(i + round));
	}
	rc = post_all(s, peer, x, NSLOTS, 8, &t);
	if (rc == 0)
		rc = wait_for(s, &t, NSLOTS, 0, WAIT_MS);
	for (uint32_t i = 0; i < NSLOTS && ok && rc == 0; i++) {
		ok = t.seen[100 + i] == 1 && t.status[100 + i] == 0;
		if (!ok)
			(void)snprintf(why, sizeof(why), "cookie %u seen %d status %d", 100 + i,
				       t.seen[100 + i], t.status[100 + i]);
	}
	for (uint32_t i = 0; i < NSLOTS && ok && rc == 0; i++)
		ok = slot_ok(i, round, len_for(i + round), why, sizeof(why));
	check(rc == 0 && ok && !t.peers && !t.dup && !t.unknown, name,
	      "rc %d, %u ok, %u failed, %u peer, %u dup: %s", rc, t.ok, t.failed, t.peers, t.dup,
	      why);
}

/* Far more writes than the send queues hold: they wait for room, and the
 * cookies still come back exactly once each. */
static void check_many(struct pd_rdma *s, uint32_t peer)
{
	static struct pd_xfer x[1024];
	static struct tally t;
	struct pd_rdma_stats st0, st1;
	char why[160] = "";
	int rc, ok = 1;

	reset_recv();
	tally_reset(&t);
	pd_rdma_get_stats(s, &st0);
	for (uint32_t i = 0; i < NSLOTS; i++)
		fill_send(i, 7, 512);
	for (uint32_t i = 0; i < 1024; i++)
		x[i] = xfer(1000 + i, i % NSLOTS, 512);
	rc = post_all(s, peer, x, 1024, 256, &t);
	if (rc == 0)
		rc = wait_for(s, &t, 1024, 0, WAIT_MS);
	for (uint32_t i = 0; i < NSLOTS && ok && rc == 0; i++)
		ok = slot_ok(i, 7, 512, why, sizeof(why));
	pd_rdma_get_stats(s, &st1);
	check(rc == 0 && ok && t.ok == 1024 && !t.dup, "many-writes-sq-waits",
	      "rc %d, %u ok, %u failed, %u dup: %s", rc, t.ok, t.failed, t.dup, why);
	check(st1.sq_waits > st0.sq_waits &&
		      st1.wrs_signalled - st0.wrs_signalled < (st1.wrs_posted - st0.wrs_posted) / 2,
	      "selective-signalling",
	      "%" PRIu64 " WRs posted, %" PRIu64 " signalled, %" PRIu64 " waited for room",
	      st1.wrs_posted - st0.wrs_posted, st1.wrs_signalled - st0.wrs_signalled,
	      st1.sq_waits - st0.sq_waits);
	printf("  (%" PRIu64 " WRs in %" PRIu64 " chains, %" PRIu64 " signalled, %" PRIu64
	       " inline)\n", st1.wrs_posted - st0.wrs_posted, st1.post_calls - st0.post_calls,
	       st1.wrs_signalled - st0.wrs_signalled, st1.wrs_inline - st0.wrs_inline);
}

static void check_bounds(struct pd_rdma *s, uint32_t peer)
{
	struct pd_xfer bad[4] = { xfer(1, NSLOTS, 1), xfer(2, 0, SLOT_SIZE + 1),
				       xfer(3, 0, 16), xfer(4, 0, 16) };
	int rc[4];

	bad[2].src = recv_arena;                  /* not in the send arena */
	bad[3].src = send_arena + ARENA - 8;      /* runs past its end */
	for (int i = 0; i < 4; i++)
		rc[i] = pd_rdma_post(s, peer, &bad[i], 1);
	check(rc[0] == -EINVAL && rc[1] == -EINVAL && rc[2] == -EINVAL && rc[3] == -EINVAL,
	      "bounds-refused", "%d %d %d %d", rc[0], rc[1], rc[2], rc[3]);
}

/* One instance per rxe device: the writes cross the veth pair. */
static void check_devices(struct pd_rdma *rv, struct pd_rdma *s)
{
	struct pd_rdma_local a, b;

	(void)pd_rdma_local_info(rv, &a);
	(void)pd_rdma_local_info(s, &b);
	check(strcmp(a.dev, b.dev) != 0 && a.rkey != 0 && a.base == (uintptr_t)recv_arena,
	      "two-devices", "receiver on %s, sender on %s", a.dev, b.dev);
	printf("  (receiver %s %s rkey 0x%x, sender %s %s)\n", a.dev, recv_ip, a.rkey, b.dev,
	       send_ip);
}

static void check_connect(struct pd_rdma *s, struct pd_rdma *rv, int port)
{
	struct pd_rdma_remote rem = remote_of(rv, 1);
	static struct tally t;
	int rc;

	tally_reset(&t);
	rc = pd_rdma_connect(s, 1, recv_ip, (uint16_t)port, &rem);
	check(rc == 0, "connect", "pd_rdma_connect: %d", rc);
	check(pd_rdma_connect(s, 1, recv_ip, (uint16_t)port, &rem) == -EEXIST, "connect-twice",
	      "not -EEXIST");
}

/* The receiver's QPs vanish while writes are in flight: the writes fail,
 * one PEER completion, nothing hangs; then a new connection works. */
static void check_qp_killed(struct pd_rdma *s, struct pd_rdma *rv, int port)
{
	static struct pd_xfer x[256];
	static struct tally t;
	struct pd_rdma_remote rem = remote_of(rv, 1);
	uint64_t t0 = pd_now_ns();
	int rc, rc2, late;

	tally_reset(&t);
	for (uint32_t i = 0; i < 256; i++)
		x[i] = xfer(500 + i, i % NSLOTS, SLOT_SIZE);
	rc = pd_rdma_post(s, 1, x, 128);
	pd_rdma_debug_kill_conns(rv);
	rc2 = rc == 128 ? pd_rdma_post(s, 1, x + 128, 128) : rc;
	rc = wait_for(s, &t, rc2 == 128 ? 256 : 128, 1, WAIT_MS);
	late = (int)quiet_for(s, &t, 200);
	check(rc == 0 && t.peers == 1 && t.peer_status < 0 && t.failed > 0 && !t.dup && !late,
	      "qp-destroyed-mid-transfer",
	      "wait %d, %u ok, %u failed, %u peer (status %d), %u dup, %d late, post %d", rc, t.ok,
	      t.failed, t.peers, t.peer_status, t.dup, late, rc2);
	printf("  (peer failed with %d (%s) after %.2f s; %u writes landed, %u failed)\n",
	       t.peer_status, strerror(-t.peer_status), (double)(pd_now_ns() - t0) / 1e9, t.ok,
	       t.failed);
	rc = pd_rdma_post(s, 1, x, 1);
	check(rc == -ENOTCONN, "failed-peer-refuses-writes", "post %d", rc);
	rc = disconnect_quiet(s, 1);
	rc2 = rc == 0 ? pd_rdma_connect(s, 1, recv_ip, (uint16_t)port, &rem) : rc;
	check(rc == 0 && rc2 == 0, "reconnect", "disconnect %d, connect %d", rc, rc2);
	if (rc2 == 0)
		check_round(s, 1, 3, "reconnect-writes-land");
}

/* A wrong rkey: the receiver's device refuses the write, WC error, the
 * peer fails with -EACCES. */
static void check_bad_rkey(struct pd_rdma *s, struct pd_rdma *rv, int port)
{
	struct pd_rdma_remote rem = remote_of(rv, 2);
	static struct pd_xfer x[16];
	static struct tally t;
	int rc;

	tally_reset(&t);
	rem.rkey ^= 0x00ff0000u;
	rc = pd_rdma_connect(s, 2, recv_ip, (uint16_t)port, &rem);
	for (uint32_t i = 0; i < 16; i++)
		x[i] = xfer(700 + i, i, 4096);
	if (rc == 0)
		rc = pd_rdma_post(s, 2, x, 16);
	if (rc == 16)
		rc = wait_for(s, &t, 16, 1, WAIT_MS);
	check(rc == 0 && t.peers == 1 && t.peer_status == -EACCES && t.failed == 16,
	      "bad-rkey-fails-peer", "rc %d, %u ok, %u failed, %u peer (status %d)", rc, t.ok,
	      t.failed, t.peers, t.peer_status);
	check(disconnect_quiet(s, 2) == 0, "bad-rkey-disconnect", "disconnect failed");
}

/* Refused by accept_peer, and nobody listening. */
static void check_refused(struct pd_rdma *s, struct pd_rdma *rv, int port)
{
	struct pd_rdma_remote rem = remote_of(rv, 666);
	static struct tally t;
	int rc;

	tally_reset(&t);
	rc = pd_rdma_connect(s, 3, recv_ip, (uint16_t)port, &rem);
	if (rc == 0)
		rc = wait_for(s, &t, 0, 1, WAIT_MS);
	check(rc == 0 && t.peer_status == -EACCES, "token-refused", "rc %d, peer status %d", rc,
	      t.peer_status);
	(void)disconnect_quiet(s, 3);
	tally_reset(&t);
	rc = pd_rdma_connect(s, 4, recv_ip, (uint16_t)(port == 65535 ? 65534 : port + 1), &rem);
	if (rc == 0)
		rc = wait_for(s, &t, 0, 1, WAIT_MS);
	check(rc == 0 && t.peers == 1 && t.peer_status < 0, "no-listener", "rc %d, peer status %d",
	      rc, t.peer_status);
	(void)disconnect_quiet(s, 4);
}

/* disconnect with writes in flight: each completes once (0 or
 * -ECONNABORTED), before disconnect returns; no peer completion. */
static void check_disconnect_drains(struct pd_rdma *s)
{
	static struct pd_xfer x[64];
	static struct tally t;
	int rc, rc2, n;

	tally_reset(&t);
	for (uint32_t i = 0; i < 64; i++)
		x[i] = xfer(800 + i, i, SLOT_SIZE);
	rc = pd_rdma_post(s, 1, x, 64);
	rc2 = pd_rdma_disconnect(s, 1);
	n = (int)quiet_for(s, &t, 100);
	check(rc == 64 && rc2 == 0 && t.writes == 64 && !t.peers && !t.dup &&
		      t.ok + t.failed == 64,
	      "disconnect-drains", "post %d, disconnect %d, %d completions (%u ok, %u aborted, %u peer)",
	      rc, rc2, n, t.ok, t.failed, t.peers);
}

/* The receiver goes away entirely: DREQ, the sender's peer fails. */
static void check_receiver_gone(struct pd_rdma *s, struct pd_rdma **rv, int port)
{
	struct pd_rdma_remote rem = remote_of(*rv, 5);
	static struct tally t;
	int rc;

	tally_reset(&t);
	rc = pd_rdma_connect(s, 5, recv_ip, (uint16_t)port, &rem);
	if (rc == 0) {
		check_round(s, 5, 9, "receiver-gone-before");
		pd_rdma_destroy(*rv);
		*rv = NULL;
		rc = wait_for(s, &t, 0, 1, WAIT_MS);
	}
	check(rc == 0 && t.peers == 1 && t.peer_status < 0, "receiver-destroyed-fails-peer",
	      "rc %d, peer status %d", rc, t.peer_status);
	(void)disconnect_quiet(s, 5);
}

int main(int argc, char **argv)
{
	struct pd_rdma *rv = NULL, *s = NULL;
	uint64_t t0 = pd_now_ns();
	int port = 0, rc;

	if (argc != 3) {
		fprintf(stderr, "usage: %s RECV_IP SEND_IP\n", argv[0]);
		return 2;
	}
	recv_ip = argv[1];
	send_ip = argv[2];
	pd_log_set_level(getenv("PD_RDMA_TEST_VERBOSE") ? PD_LOG_DEBUG : PD_LOG_WARN);
	recv_arena = aligned_alloc(4096, ARENA);
	send_arena = aligned_alloc(4096, ARENA);
	if (!recv_arena || !send_arena)
		return 2;
	reset_recv();
	rc = make_recv(&rv, &port);
	check(rc == 0 && port > 0, "receiver-create-listen", "rc %d port %d", rc, port);
	rc = rc ? rc : make_send(&s, 32, 8);
	check(rc == 0, "sender-create", "rc %d", rc);
	if (rc == 0)
		check_devices(rv, s);
	if (rc == 0) {
		check_connect(s, rv, port);
		check_round(s, 1, 1, "writes-land-every-byte");
		check_round(s, 1, 2, "writes-land-second-round");
		check_bounds(s, 1);
		check_many(s, 1);
		check_qp_killed(s, rv, port);
		check_disconnect_drains(s);
		check_bad_rkey(s, rv, port);
		check_refused(s, rv, port);
		check_receiver_gone(s, &rv, port);
	}
	if (s) {
		struct pd_rdma_stats st;

		pd_rdma_get_stats(s, &st);
		printf("  (sender totals: %" PRIu64 " writes ok, %" PRIu64 " failed, %" PRIu64
		       " bytes, %" PRIu64 " WRs in %" PRIu64 " chains, %" PRIu64 " signalled, %"
		       PRIu64 " inline, %" PRIu64 " CQ events, %" PRIu64 " peer failures)\n",
		       st.writes_ok, st.writes_failed, st.bytes_ok, st.wrs_posted, st.post_calls,
		       st.wrs_signalled, st.wrs_inline, st.cq_events, st.peer_failures);
		check(st.wrs_inline > 0, "inline-writes", "no inline WR posted");
	}
	pd_rdma_destroy(s);
	pd_rdma_destroy(rv);
	free(recv_arena);
	free(send_arena);
	printf("rdma_xport_test: %.1f s\n", (double)(pd_now_ns() - t0) / 1e9);
	printf("%d passed, %d failed\n", npass, nfail);
	return nfail ? 1 : 0;
}
