/* SPDX-License-Identifier: MIT */
/*
 * Trust between brokers, on real brokers (the control plane):
 * the data-plane token anyone could derive is refused; a Hello under a
 * live broker's name does not take its session over (its requests go on);
 * a flood of Hellos under distinct names does not fill the peer table for
 * good, and the broker refused meanwhile is told why; with CURVE, a
 * legitimate pair moves every byte, authenticated, while a broker without
 * CURVE, one with a key not admitted, and one using an admitted key under
 * another name are refused and counted. And the operator's side: --keygen,
 * bad key files refused at start naming the flag, "control plane:
 * unauthenticated" said at start and by pdctl status.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "it_fixture.h"
#include "it_raw.h"
#include "pd_curve_fixture.h"
#include "pd_proto.h"
#include "pd_segment.h"
#include "pd_tcp.h"
#include "pd_wire.h"

/* ---- helpers --------------------------------------------------------------------------- */

/* Broker arguments: the pools, 64K slots, a heartbeat, info logs, then extra. */
struct targs {
	char send[16], recv[16];
	const char *v[32];
};

static const char *const *targs(struct targs *a, uint32_t send, uint32_t recv, const char *hb,
				const char *const *extra)
{
	uint32_t n = 0;

	(void)snprintf(a->send, sizeof(a->send), "%u", send);
	(void)snprintf(a->recv, sizeof(a->recv), "%u", recv);
	a->v[n++] = "--send-slots";
	a->v[n++] = a->send;
	a->v[n++] = "--recv-slots";
	a->v[n++] = a->recv;
	a->v[n++] = "--slot-size";
	a->v[n++] = "64K";
	a->v[n++] = "--heartbeat";
	a->v[n++] = hb;
	a->v[n++] = "--log-level";
	a->v[n++] = "info";
	for (; extra && *extra && n < 31; extra++)
		a->v[n++] = *extra;
	a->v[n] = NULL;
	return a->v;
}

/* Prepared D and P (names and endpoints chosen, not started). */
static struct it *pair_prepare(void)
{
	struct it *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	assert_int_equal(pd_test_broker_prepare(&t->d, "itD"), 0);
	assert_int_equal(pd_test_broker_prepare(&t->p, "itP"), 0);
	return t;
}

/* Start a prepared broker with these arguments. */
static void run_broker(struct pd_test_broker *b, const char *const *args)
{
	int rc = pd_test_broker_restart(b, args);

	if (rc < 0) {
		pd_test_broker_dump_log(b);
		fail_msg("%s did not start: %s", b->name, strerror(-rc));
	}
}

/* Start D (16 recv slots), then P (8 send slots), agents on both. */
static void pair_run(struct it *t, const char *hb, const char *const *dextra,
		     const char *const *pextra)
{
	struct targs da, pa;

	run_broker(&t->d, targs(&da, 0, 16, hb, dextra));
	run_broker(&t->p, targs(&pa, 8, 0, hb, pextra));
	t->pa = it_attach(&t->p, PD_AGENT_SEND);
	t->da = it_attach(&t->d, PD_AGENT_RECV);
}

/* A request of n chunks, every byte checked at the decode side, released. */
static void moves(struct it *t, const char *req, uint32_t n)
{
	assert_int_equal(it_put(t, req, 0, n, n), 0);
	it_expect_event(t, req, PD_EV_PUT_DONE);
	it_verify(t, req, n);
	assert_int_equal(pd_recv_release(t->da, req), 0);
}

/* Wait (bounded) for the log to have text. */
static void expect_log(const struct pd_test_broker *b, const char *text, uint32_t ms)
{
	if (!pd_test_broker_wait_log(b, text, ms))
		fail_msg("no \"%s\" in the log of %s", text, b->name);
}

/* pdctl [--json] CMD on b: its stdout (exit 0 asserted); pd_run_free() it. */
static void pdctl(const struct pd_test_broker *b, const char *cmd, int json,
		  struct pd_run_result *r)
{
	char bin[256];

	it_wait_admin(b);
	assert_int_equal(pd_run_bin("pdctl", bin, sizeof(bin)), 0);
	const char *argv[] = { bin, "--name", b->name, "--rundir", b->rundir,
			       json ? "--json" : cmd, json ? cmd : NULL, NULL };
	assert_int_equal(pd_run(argv, 15000, r), 0);
	if (r->exit_code != 0)
		fail_msg("pdctl %s: exit %d\n%s\n%s", cmd, r->exit_code, r->out, r->err);
}

/* rows[0].key of pdctl --json peers on b. */
static void peer_field(const struct pd_test_broker *b, const char *key, char *out, size_t len)
{
	struct pd_run_result r = { 0 };
	char path[64];

	pdctl(b, "peers", 1, &r);
	assert_int_equal(pd_json_count(r.out, "rows"), 1);
	(void)snprintf(path, sizeof(path), "rows[0].%s", key);
	assert_int_equal(pd_json_get_str(r.out, path, out, len), 0);
	pd_run_free(&r);
}

/* Wait (bounded, ms) until counter name of b reaches min. */
static uint64_t wait_stat_ms(const struct pd_test_broker *b, const char *name, uint64_t min,
			     uint32_t ms)
{
	uint64_t deadline = pd_deadline_ms(ms), v;

	while (((v = it_stat(b, name)) < min || v == UINT64_MAX) && pd_now_ns() < deadline)
		(void)nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
	return v;
}

/* Wait (bounded) until counters a + b of broker x reach min; the sum. */
static uint64_t wait_sum(const struct pd_test_broker *x, const char *a, const char *b,
			 uint64_t min)
{
	uint64_t deadline = pd_deadline_ms(3000), v;

	while ((v = it_stat(x, a) + it_stat(x, b)) < min && pd_now_ns() < deadline)
		(void)nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
	return v;
}

static uint64_t epoch_of(const struct pd_test_broker *b)
{
	struct pd_segment seg;
	uint64_t e;

	assert_int_equal(pd_segment_attach(b->name, PD_SEG_RDONLY, 1000, &seg, NULL, 0), 0);
	e = seg.hdr->epoch;
	pd_segment_destroy(&seg);
	return e;
}

/* The next request end on P's agent: its type, status in *st. */
static uint32_t next_end(struct it *t, const char *req, int32_t *st)
{
	struct pd_event ev;

	assert_int_equal(it_next_end(t->pa, &ev, IT_WAIT_MS), 0);
	assert_string_equal(ev.req_id, req);
	*st = ev.status;
	return ev.type;
}

/* A request P cannot deliver: declared, then failed (not admitted); its status. */
static int32_t fails(struct it *t, const char *req)
{
	int32_t st;

	assert_int_equal(it_declare_on(t, t->pa, req, 1), 0);
	assert_int_equal(next_end(t, req, &st), PD_EV_PUT_FAILED);
	return st;
}

/* Requests "<base>.N" (2 chunks) until one is done (a peer refused a
 * moment ago gets in on a later Hello); its name in req. Every event is
 * taken, so none is left for what comes next. */
static void until_done(struct it *t, const char *base, char *req, size_t len)
{
	struct pd_event ev;

	for (int i = 0; i < 20; i++) {
		(void)snprintf(req, len, "%s.%d", base, i);
		if (it_put(t, req, 0, 2, 2) == 0) {
			while (it_next_end(t->pa, &ev, IT_WAIT_MS) == 0 && strcmp(ev.req_id, req))
				;
			if (!strcmp(ev.req_id, req) && ev.type == PD_EV_PUT_DONE)
				return;
		}
		while (it_next_end(t->pa, &ev, 0) == 0) /* the failed ones' ends */
			;
		(void)nanosleep(&(struct timespec){ 0, 300 * 1000 * 1000 }, NULL);
	}
	fail_msg("no request of %s got through", base);
}

/* ---- raw control-plane and data-plane clients -------------------------------------------- */

struct raw {
	void *ctx, *sock;
};

/* A DEALER to ep; CURVE with (pub, sec) demanding server key srv when given. */
static void raw_open(struct raw *r, const char *ep, const char *srv, const char *pub,
		     const char *sec)
{
	int zero = 0, tmo = 3000;

	r->ctx = zmq_ctx_new();
	r->sock = zmq_socket(r->ctx, ZMQ_DEALER);
	assert_non_null(r->sock);
	assert_int_equal(zmq_setsockopt(r->sock, ZMQ_LINGER, &zero, sizeof(zero)), 0);
	assert_int_equal(zmq_setsockopt(r->sock, ZMQ_RCVTIMEO, &tmo, sizeof(tmo)), 0);
	if (srv) {
		assert_int_equal(zmq_setsockopt(r->sock, ZMQ_CURVE_SERVERKEY, srv, 41), 0);
		assert_int_equal(zmq_setsockopt(r->sock, ZMQ_CURVE_PUBLICKEY, pub, 41), 0);
		assert_int_equal(zmq_setsockopt(r->sock, ZMQ_CURVE_SECRETKEY, sec, 41), 0);
	}
	assert_int_equal(zmq_connect(r->sock, ep), 0);
}

static void raw_close(struct raw *r)
{
	(void)zmq_close(r->sock);
	(void)zmq_ctx_term(r->ctx);
}

/* A Hello under name at epoch, as a broker would say it. */
static void raw_hello(struct raw *r, const char *name, uint64_t epoch)
{
	static const struct pd_bytes tcp = { (const uint8_t *)"tcp", 3 };
	static const struct pd_bytes addr = { (const uint8_t *)"127.0.0.1:9", 11 };
	struct pd_msg m = { .type = PD_MSG_HELLO };
	struct pd_wire_buf b;

	m.u.hello = (struct pd_msg_hello){
		.proto = PD_WIRE_PROTO, .name = { (const uint8_t *)name, (uint32_t)strlen(name) },
		.epoch = epoch, .host_id = { (const uint8_t *)"elsewhere", 9 },
		.slot_size = 65536, .nxports = 1,
	};
	m.u.hello.xport[0] = tcp;
	m.u.hello.addr[0] = addr;
	pd_wire_buf_init(&b);
	assert_int_equal(pd_wire_encode(&m, &b), 0);
	assert_int_equal(zmq_send(r->sock, "", 0, ZMQ_SNDMORE), 0);
	assert_int_equal(zmq_send(r->sock, b.data, b.len, 0), (int)b.len);
	pd_wire_buf_fini(&b);
}

/* The next reply: an Error whose text has why. */
static void raw_expect_error(struct raw *r, const char *why)
{
	static char buf[65536];
	struct pd_wire_dec d;
	struct pd_msg m;
	int n;

	do {
		assert_int_equal(zmq_recv(r->sock, buf, sizeof(buf), 0), 0);
		n = zmq_recv(r->sock, buf, sizeof(buf), 0);
		assert_true(n > 0 && n < (int)sizeof(buf));
		pd_wire_dec_init(&d);
		assert_int_equal(pd_wire_decode(&d, buf, (size_t)n, &m, NULL, 0), 0);
		if (m.type == PD_MSG_HEARTBEAT)
			pd_wire_dec_fini(&d);
	} while (m.type == PD_MSG_HEARTBEAT);
	assert_int_equal(m.type, PD_MSG_ERROR);
	if (!memmem(m.u.error.text.p, m.u.error.text.len, why, strlen(why)))
		fail_msg("no \"%s\" in \"%.*s\"", why, (int)m.u.error.text.len, m.u.error.text.p);
	pd_wire_dec_fini(&d);
}

/* A data connection presenting token: the receiver's HELLO status. */
static int32_t data_hello(int port, uint64_t token)
{
	int fd = it_raw_connect(port), st = it_raw_hello(fd, token);

	(void)close(fd);
	return st;
}

/* The token pdkv derived before data secrets: anyone could compute it. */
static uint64_t derived_token(const struct pd_test_broker *b)
{
	return pd_req_tag(b->name, (uint32_t)strlen(b->name)) ^
	       (epoch_of(b) * 0x9e3779b97f4a7c15ull) ^ 1;
}

/* ---- the operator's side ---------------------------------------------------------------- */

static void run_broker_cli(const char *const *extra, struct pd_run_result *r)
{
	char bin[256], name[64], ctrl[64];
	const char *argv[24] = { bin, "--name", name, "--rundir", "/tmp", "--ctrl", ctrl,
				 "--data", "127.0.0.1:0" };
	uint32_t n = 9;

	assert_int_equal(pd_run_bin("pdbroker", bin, sizeof(bin)), 0);
	(void)snprintf(name, sizeof(name), "ittrust%d", (int)getpid());
	(void)snprintf(ctrl, sizeof(ctrl), "tcp://127.0.0.1:%d", pd_test_free_port());
	for (; *extra && n < 23; extra++)
		argv[n++] = *extra;
	argv[n] = NULL;
	assert_int_equal(pd_run(argv, 10000, r), 0);
}

/* Started with a bad trust setting: refused (1 or 2), the text said. */
static void refused(const char *const *extra, const char *what)
{
	struct pd_run_result r;

	run_broker_cli(extra, &r);
	assert_true(r.exit_code == 1 || r.exit_code == 2);
	if (!strstr(r.err, what))
		fail_msg("stderr does not say \"%s\": %s", what, r.err);
	pd_run_free(&r);
}

/* --keygen writes a pair (mode 0600) and prints its public key; never
 * overwrites; bad files and half a configuration are refused at start. */
static void test_keygen_and_bad_files(void **state)
{
	struct pd_curve k;
	struct pd_run_result r;
	char bin[256], path[200], bad[200];
	struct stat st;
	FILE *f;

	(void)state;
	assert_int_equal(pd_curve_make(&k, 1), 0);
	(void)snprintf(path, sizeof(path), "%s/new.key", k.dir);
	assert_int_equal(pd_run_bin("pdbroker", bin, sizeof(bin)), 0);
	const char *gen[] = { bin, "--keygen", path, NULL };
	assert_int_equal(pd_run(gen, 10000, &r), 0);
	assert_int_equal(r.exit_code, 0);
	assert_int_equal(strlen(r.out), 41); /* 40 Z85 characters and a newline */
	pd_run_free(&r);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(pd_run(gen, 10000, &r), 0);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "File exists"));
	pd_run_free(&r);
	refused((const char *const[]){ "--curve-key", path, NULL }, "--curve-key: needs --curve-peers");
	(void)snprintf(bad, sizeof(bad), "%s/bad.peers", k.dir);
	f = fopen(bad, "w");
	assert_non_null(f);
	fprintf(f, "# a good line, then a bad one\nitX %s\nitY not-a-key\n", k.pub[0]);
	assert_int_equal(fclose(f), 0);
	refused((const char *const[]){ "--curve-key", path, "--curve-peers", bad, NULL },
		"--curve-peers");
	refused((const char *const[]){ "--curve-key", path, "--curve-peers", bad, NULL }, ":3: ");
	assert_int_equal(chmod(path, 0640), 0);
	f = fopen(bad, "w");
	fprintf(f, "itX %s\n", k.pub[0]);
	assert_int_equal(fclose(f), 0);
	refused((const char *const[]){ "--curve-key", path, "--curve-peers", bad, NULL },
		"--curve-key");
	(void)unlink(path);
	(void)unlink(bad);
	pd_curve_clean(&k);
}

/* ---- without keys ------------------------------------------------------------------------ */

/* The old token (name and epoch, both public) opens no data lane, nor
 * does the decode broker's own; each is refused and counted; the real
 * sender's lanes (the secret of its HelloAck) still work. */
static void test_derived_token_refused(void **state)
{
	struct it *t = it_start(8, 16);
	int port = it_data_port(&t->d);
	uint64_t before;
	struct pd_run_result r = { 0 };

	(void)state;
	assert_true(port > 0);
	moves(t, "before", 3); /* P's session is up, its lanes open */
	before = it_stat(&t->d, "tcp.hellos_rejected");
	assert_int_equal(data_hello(port, derived_token(&t->p)), -EACCES);
	assert_int_equal(data_hello(port, derived_token(&t->d)), -EACCES);
	assert_int_equal(it_wait_stat(&t->d, "tcp.hellos_rejected", before + 2), before + 2);
	moves(t, "after", 3);
	/* and the broker says it trusts the network */
	expect_log(&t->d, "control plane: unauthenticated", 1000);
	pdctl(&t->d, "status", 0, &r);
	assert_non_null(strstr(r.out, "control plane: unauthenticated"));
	pd_run_free(&r);
	it_stop(t, 0);
}

/* Ten Hellos under the prefill broker's name (its own epoch, or an older
 * one) while its requests go on: each refused and counted, its session
 * never reset, every request complete and every byte right. */
static void test_impersonating_hello_refused(void **state)
{
	struct it *t = it_start(8, 16);
	uint64_t epoch;
	struct raw r;
	char req[32];

	(void)state;
	moves(t, "first", 2);
	epoch = epoch_of(&t->p);
	raw_open(&r, t->d.ctrl, NULL, NULL, NULL);
	for (int i = 0; i < 10; i++) {
		raw_hello(&r, t->p.name, i % 2 ? epoch - 1 : epoch);
		raw_expect_error(&r, "Hello refused");
		(void)snprintf(req, sizeof(req), "during-%d", i);
		moves(t, req, 3);
	}
	raw_close(&r);
	assert_int_equal(it_wait_stat(&t->d, "ctrl.hellos_refused", 10), 10);
	assert_int_equal(it_stat(&t->d, "ctrl.peers_down"), 0);
	assert_int_equal(it_stat(&t->p, "ctrl.peers_down"), 0);
	assert_int_equal(it_stat(&t->p, "tx.requests_failed"), 0);
	it_stop(t, 0);
}

/* 1,100 Hellos under distinct names fill the decode broker's table (1,023
 * peers): a new prefill broker is refused meanwhile and its log and pdctl
 * say "peer table full"; once the strangers fall silent it gets in at
 * once (a down peer makes room for it, well before the 3 s grace), and in
 * the end every stranger is forgotten. */
static void test_hello_flood_distinct_names(void **state)
{
	const char *const dx[] = { "--peer-grace", "3s", NULL };
	struct it *t = pair_prepare();
	char name[32], req[32], err[128];
	struct raw r;
	uint64_t t0;
	int32_t st;

	(void)state;
	pair_run(t, "200ms", dx, NULL);
	raw_open(&r, t->d.ctrl, NULL, NULL, NULL);
	for (int i = 0; i < 1100; i++) {
		(void)snprintf(name, sizeof(name), "flood-%d", i);
		raw_hello(&r, name, 1);
	}
	assert_true(wait_stat_ms(&t->d, "ctrl.hellos_refused", 77, 5000) >= 77);
	/* the strangers are up for 3 heartbeats (600 ms): P is refused */
	st = fails(t, "refused");
	assert_int_equal(st, -ENOBUFS);
	expect_log(&t->p, "refused our Hello: Hello refused: peer table full", 1000);
	expect_log(&t->d, "refused: Hello refused: peer table full", 1000);
	peer_field(&t->p, "error", err, sizeof(err));
	assert_true(!strcmp(err, "Hello refused: peer table full") || !err[0]); /* "" once in */
	raw_close(&r);
	t0 = pd_now_ns();
	until_done(t, "after", req, sizeof(req));
	assert_true(pd_now_ns() - t0 < 2500 * PD_NS_PER_MS); /* before any grace ran out */
	it_verify(t, req, 2);
	peer_field(&t->p, "error", err, sizeof(err));
	assert_string_equal(err, "");
	/* not for good: every stranger forgotten after the grace period */
	assert_true(wait_stat_ms(&t->d, "ctrl.evicted", 1022, 15000) >= 1022);
	moves(t, "last", 2);
	it_stop(t, 0);
}

/* ---- with CURVE -------------------------------------------------------------------------- */

/* Keys 0 (D), 1 (P) and more; D admits P's key under P's name (plus
 * extra lines), P admits D's at D's endpoint. */
static void curve_files(struct pd_curve *k, const struct it *t, uint32_t nkeys,
			const char *dextra)
{
	char text[1024];

	assert_int_equal(pd_curve_make(k, nkeys), 0);
	(void)snprintf(text, sizeof(text), "# P\n%s %s\n%s", t->p.name, k->pub[1],
		       dextra ? dextra : "");
	assert_int_equal(pd_curve_peers(k, 0, text), 0);
	(void)snprintf(text, sizeof(text), "%s %s %s\n", t->d.name, k->pub[0], t->d.ctrl);
	assert_int_equal(pd_curve_peers(k, 1, text), 0);
}

/* A key file's public and secret key. */
static void read_pair(const char *path, char pub[41], char sec[41])
{
	char line[160];
	FILE *f = fopen(path, "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		(void)sscanf(line, "public-key = %40s", pub);
		(void)sscanf(line, "secret-key = %40s", sec);
	}
	(void)fclose(f);
}

/* D and P admit each other: every byte moves, both are authenticated
 * (pdctl peers: "curve <key id>"), pdctl status names the key. */
static void test_curve_pair_every_byte(void **state)
{
	struct it *t = pair_prepare();
	struct pd_curve k;
	struct pd_run_result r = { 0 };
	char want[64], got[64], req[32];

	(void)state;
	curve_files(&k, t, 2, NULL);
	const char *const dx[] = { "--curve-key", k.key[0], "--curve-peers", k.peers[0], NULL };
	const char *const px[] = { "--curve-key", k.key[1], "--curve-peers", k.peers[1], NULL };
	pair_run(t, "200ms", dx, px);
	for (int i = 0; i < 20; i++) {
		(void)snprintf(req, sizeof(req), "curve-%d", i);
		moves(t, req, 1 + i % 4);
	}
	(void)snprintf(want, sizeof(want), "curve %.8s", k.pub[1]);
	peer_field(&t->d, "auth", got, sizeof(got));
	assert_string_equal(got, want);
	(void)snprintf(want, sizeof(want), "curve %.8s", k.pub[0]);
	peer_field(&t->p, "auth", got, sizeof(got));
	assert_string_equal(got, want);
	pdctl(&t->d, "status", 0, &r);
	(void)snprintf(want, sizeof(want), "control plane: curve, key %.8s, 1 peer key", k.pub[0]);
	if (!strstr(r.out, want))
		fail_msg("no \"%s\" in pdctl status:\n%s", want, r.out);
	pd_run_free(&r);
	assert_false(pd_test_broker_log_has(&t->d, "control plane: unauthenticated"));
	/* the statistics are published every 100 ms: this pair may be faster */
	assert_true(it_wait_stat(&t->d, "ctrl.auth_ok", 1) >= 1);
	assert_int_equal(it_stat(&t->d, "ctrl.auth_denied"), 0);
	it_stop(t, 0);
	pd_curve_clean(&k);
}

/* A prefill broker without keys cannot talk to a CURVE one: counted
 * there, its request fails. */
static void test_curve_unauthenticated_peer_refused(void **state)
{
	struct it *t = pair_prepare();
	struct pd_curve k;
	int32_t st;

	(void)state;
	curve_files(&k, t, 2, NULL);
	const char *const dx[] = { "--curve-key", k.key[0], "--curve-peers", k.peers[0], NULL };
	pair_run(t, "100ms", dx, NULL);
	st = fails(t, "plain");
	assert_true(st < 0);
	/* the mismatch found by D (plain), or by P first, which closes (failed) */
	assert_true(wait_sum(&t->d, "ctrl.auth_plain", "ctrl.auth_failed", 1) >= 1);
	assert_int_equal(it_stat(&t->d, "ctrl.peers_up"), 0);
	assert_int_equal(it_stat(&t->d, "rx.batches"), 0);
	it_stop(t, 0);
	pd_curve_clean(&k);
}

/* A prefill broker whose key D does not admit: refused by ZAP and
 * counted; it says why (log, pdctl peers) and its request fails. */
static void test_curve_wrong_key_refused(void **state)
{
	struct it *t = pair_prepare();
	struct pd_curve k;
	char err[128];
	int32_t st;

	(void)state;
	curve_files(&k, t, 3, NULL);
	const char *const dx[] = { "--curve-key", k.key[0], "--curve-peers", k.peers[0], NULL };
	const char *const px[] = { "--curve-key", k.key[2], "--curve-peers", k.peers[1], NULL };
	pair_run(t, "100ms", dx, px);
	st = fails(t, "wrong-key");
	assert_int_equal(st, -EACCES);
	assert_true(it_wait_stat(&t->d, "ctrl.auth_denied", 1) >= 1);
	assert_int_equal(it_stat(&t->d, "ctrl.peers_up"), 0);
	expect_log(&t->p, "CURVE: it refused our key (not in its --curve-peers)", 1000);
	peer_field(&t->p, "error", err, sizeof(err));
	assert_string_equal(err, "CURVE: it refused our key (not in its --curve-peers)");
	it_stop(t, 0);
	pd_curve_clean(&k);
}

/* Key 2 is admitted as "itOther": a broker using it under another name is
 * refused and counted, and so is a raw Hello with it under P's name and a
 * newer epoch; the real P, beside them, moves every byte and its session
 * is never reset. */
static void test_curve_right_key_wrong_name_refused(void **state)
{
	struct it *t = pair_prepare();
	struct pd_test_broker x;
	struct pd_curve k;
	char line[200], pub[41] = "", sec[41] = "", req[32];
	struct targs xa;
	struct raw r;
	int32_t st;

	(void)state;
	assert_int_equal(pd_test_broker_prepare(&x, "itX"), 0);
	curve_files(&k, t, 3, NULL);
	(void)snprintf(line, sizeof(line), "# P\n%s %s\nitOther %s\n", t->p.name, k.pub[1],
		       k.pub[2]);
	assert_int_equal(pd_curve_peers(&k, 0, line), 0);
	const char *const dx[] = { "--curve-key", k.key[0], "--curve-peers", k.peers[0], NULL };
	const char *const px[] = { "--curve-key", k.key[1], "--curve-peers", k.peers[1], NULL };
	const char *const xx[] = { "--curve-key", k.key[2], "--curve-peers", k.peers[1], NULL };
	pair_run(t, "200ms", dx, px);
	moves(t, "real-first", 2);
	/* a whole broker with itOther's key, under its own name */
	run_broker(&x, targs(&xa, 8, 0, "200ms", xx));
	{
		struct it tx = { .p = x, .d = t->d, .da = t->da };

		tx.pa = it_attach(&x, PD_AGENT_SEND);
		st = fails(&tx, "wrong-name");
		assert_int_equal(st, -EPERM);
		pd_agent_detach(tx.pa);
	}
	expect_log(&x, "refused our Hello: Hello refused: the key of this connection is "
		       "itOther's", 1000);
	assert_true(it_wait_stat(&t->d, "ctrl.auth_name", 1) >= 1);
	/* a raw connection with that key, saying Hello as P with a newer epoch */
	read_pair(k.key[2], pub, sec);
	raw_open(&r, t->d.ctrl, k.pub[0], pub, sec);
	raw_hello(&r, t->p.name, epoch_of(&t->p) + 1);
	raw_expect_error(&r, "the key of this connection is itOther's");
	raw_close(&r);
	for (int i = 0; i < 5; i++) {
		(void)snprintf(req, sizeof(req), "real-%d", i);
		moves(t, req, 3);
	}
	assert_true(it_wait_stat(&t->d, "ctrl.auth_name", 2) >= 2);
	assert_int_equal(it_stat(&t->d, "ctrl.peers_down"), 0);
	(void)pd_test_broker_stop(&x);
	it_stop(t, 0);
	pd_curve_clean(&k);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_keygen_and_bad_files),
		cmocka_unit_test(test_derived_token_refused),
		cmocka_unit_test(test_impersonating_hello_refused),
		cmocka_unit_test(test_hello_flood_distinct_names),
		cmocka_unit_test(test_curve_pair_every_byte),
		cmocka_unit_test(test_curve_unauthenticated_peer_refused),
		cmocka_unit_test(test_curve_wrong_key_refused),
		cmocka_unit_test(test_curve_right_key_wrong_name_refused),
	};

	if (!pd_ctrl_curve_available()) {
		printf("it_trust: this libzmq has no CURVE: skipped\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
