/* SPDX-License-Identifier: MIT */
/*
 * Control plane trust (pd_ctrl.h, "Trust"): each session's random data
 * secret, handed over in the HelloAck and reported both ways (also when
 * both brokers dial each other at once); a Hello that would take over a
 * live session's name is refused unless it has the authority to (newer
 * epoch, or the session's secret from a new DEALER of the same broker);
 * the peer table does not fill for good (down peers evicted, at once when
 * full), and a refused Hello reaches the dialling side's operator; CURVE:
 * a legitimate pair is authenticated, a stranger, an unknown key, a key
 * used with another name and a wrong server key are refused and counted.
 */
#include <poll.h>
#include <sys/stat.h>

#include "ctrl_fixture.h"
#include "pd_log.h"

#define WAIT_MS 3000u

static const struct fx_match up_ev = { .kind = FX_EV_UP };
static const struct fx_match down_ev = { .kind = FX_EV_DOWN };
static const struct fx_match evict_ev = { .kind = FX_EV_EVICTED };

static struct fx_node *start_cfg(const struct fx_node_cfg *cfg)
{
	struct fx_node *n;
	int rc;

	n = fx_node_start(cfg, &rc);
	assert_int_equal(rc, 0);
	return n;
}

static struct fx_node *start(const char *name, uint64_t epoch)
{
	return start_cfg(&(struct fx_node_cfg){ .name = name, .epoch = epoch, .hb_ms = 50 });
}

/* a dials b; both up. a's id for b. */
static uint32_t connect_pair(struct fx_node *a, struct fx_node *b)
{
	uint32_t pa = fx_peer(a, b->endpoint);

	assert_int_equal(fx_wait(a, up_ev, 1, WAIT_MS), 1);
	assert_int_equal(fx_wait(b, up_ev, 1, WAIT_MS), 1);
	return pa;
}

/* The last secrets n was told for peer (its UP or SECRETS events). */
static struct fx_ev last_secrets(struct fx_node *n, uint32_t peer)
{
	struct fx_ev e = { 0 };

	pthread_mutex_lock(&n->mu);
	for (uint32_t i = 0; i < n->nev; i++)
		if ((n->ev[i].kind == FX_EV_UP || n->ev[i].kind == FX_EV_SECRETS) &&
		    n->ev[i].peer == peer)
			e = n->ev[i];
	pthread_mutex_unlock(&n->mu);
	assert_true(e.kind != 0);
	return e;
}

/* A Hello as pd_ctrl would send it, under any name, epoch and proof. */
static struct pd_msg raw_hello(const char *name, uint64_t epoch, uint64_t resume)
{
	static const struct pd_bytes tcp = { (const uint8_t *)"tcp", 3 };
	static const struct pd_bytes addr = { (const uint8_t *)"127.0.0.1:9", 11 };
	struct pd_msg m = { .type = PD_MSG_HELLO };

	m.u.hello = (struct pd_msg_hello){
		.proto = PD_WIRE_PROTO, .name = { (const uint8_t *)name, (uint32_t)strlen(name) },
		.epoch = epoch, .host_id = { (const uint8_t *)"h", 1 }, .slot_size = 4096,
		.nxports = 1, .resume = resume,
	};
	m.u.hello.xport[0] = tcp;
	m.u.hello.addr[0] = addr;
	return m;
}

/* The raw DEALER's next message is an Error of this code. */
static void expect_error(struct fx_raw *r, int code, const char *why)
{
	struct pd_wire_dec d;
	struct pd_msg m;

	pd_wire_dec_init(&d);
	fx_raw_recv(r, &d, &m, WAIT_MS);
	assert_int_equal(m.type, PD_MSG_ERROR);
	assert_int_equal(m.u.error.code, code);
	if (!memmem(m.u.error.text.p, m.u.error.text.len, why, strlen(why)))
		fail_msg("no '%s' in '%.*s'", why, (int)m.u.error.text.len, m.u.error.text.p);
	pd_wire_dec_fini(&d);
}

/* The raw DEALER's next message is a HelloAck with a secret. */
static uint64_t expect_ack(struct fx_raw *r)
{
	struct pd_wire_dec d;
	struct pd_msg m;
	uint64_t s;

	pd_wire_dec_init(&d);
	fx_raw_recv(r, &d, &m, WAIT_MS);
	assert_int_equal(m.type, PD_MSG_HELLO_ACK);
	s = m.u.hello.data_secret;
	assert_true(s != 0);
	pd_wire_dec_fini(&d);
	return s;
}

static void expect_delivered(struct fx_node *from, uint32_t peer, struct fx_node *to, uint64_t seq)
{
	struct fx_match req = { .kind = FX_EV_MSG, .type = PD_MSG_ALLOC_REQ };
	uint32_t before = fx_count(to, req);
	struct pd_msg m = fx_alloc_req(seq, "still-works");

	assert_int_equal(fx_send(from, peer, &m), 0);
	assert_int_equal(fx_wait(to, req, before + 1, WAIT_MS), before + 1);
}

/* ---- data secrets ----------------------------------------------------------- */

/* The dialled side makes the secret; both learn what to accept and present. */
static void test_secret_one_way(void **state)
{
	struct fx_node *a = start("a", 1), *b = start("b", 1);
	struct fx_ev ea, eb;
	uint32_t pa = connect_pair(a, b);

	(void)state;
	ea = fx_nth(a, up_ev, 0);
	eb = fx_nth(b, up_ev, 0);
	assert_int_equal(ea.peer, pa);
	assert_true(eb.accept != 0);
	assert_true(ea.present == eb.accept);   /* a's lanes present what b accepts */
	assert_true(eb.present == ea.accept);   /* and back, on the same session */
	assert_int_equal(fx_count(a, (struct fx_match){ .kind = FX_EV_SECRETS }), 0);
	fx_node_stop(a);
	fx_node_stop(b);
}

/* A new session of the peer (a restart) gets a new secret. */
static void test_secret_new_per_session(void **state)
{
	struct fx_node *a = start("a", 1), *b = start("b", 7);
	char ep[PD_CTRL_ENDPOINT_MAX];
	uint64_t s1;

	(void)state;
	(void)connect_pair(a, b);
	s1 = fx_nth(a, up_ev, 0).present;
	snprintf(ep, sizeof(ep), "%s", b->endpoint);
	fx_node_stop(b);
	b = start_cfg(&(struct fx_node_cfg){ .name = "b", .bind = ep, .epoch = 8, .hb_ms = 50 });
	assert_int_equal(fx_wait(a, up_ev, 2, WAIT_MS), 2);
	assert_int_equal(fx_wait(b, up_ev, 1, WAIT_MS), 1);
	assert_true(fx_nth(a, up_ev, 1).present != s1);
	assert_true(fx_nth(a, up_ev, 1).present == fx_nth(b, up_ev, 0).accept);
	fx_node_stop(a);
	fx_node_stop(b);
}

static int cmd_dial(struct fx_node *n, void *arg)
{
	struct fx_peer_arg *a = arg;

	return pd_ctrl_peer(n->ctrl, a->ep, &a->id);
}

/* Both dial at once (each may answer the other's Hello before it has the
 * other's HelloAck): in the end each presents what the other accepts. */
static void test_secrets_crossing(void **state)
{
	struct fx_node *a = start("a", 1), *b = start("b", 1);
	struct fx_peer_arg da = { .ep = b->endpoint }, db = { .ep = a->endpoint };
	struct fx_ev fa, fb;

	(void)state;
	assert_int_equal(fx_call(a, cmd_dial, &da), 0);
	assert_int_equal(fx_call(b, cmd_dial, &db), 0);
	assert_int_equal(fx_wait(a, up_ev, 1, WAIT_MS), 1);
	assert_int_equal(fx_wait(b, up_ev, 1, WAIT_MS), 1);
	(void)nanosleep(&(struct timespec){ 0, 300 * 1000 * 1000 }, NULL); /* both acks in */
	fa = last_secrets(a, da.id);
	fb = last_secrets(b, db.id);
	assert_true(fa.accept && fa.present && fb.accept && fb.present);
	assert_true(fa.present == fb.accept);
	assert_true(fb.present == fa.accept);
	assert_int_equal(fx_count(a, down_ev), 0);
	fx_node_stop(a);
	fx_node_stop(b);
}

/* ---- the authority of a Hello ------------------------------------------------------- */

/* Another connection saying Hello as a, at a's epoch and without its
 * secret (or with a wrong one, or an older epoch), is refused; a's session
 * lives on. */
static void test_impostor_hello_refused(void **state)
{
	struct fx_node *a = start("a", 5), *b = start("b", 1);
	uint32_t pa = connect_pair(a, b);
	struct pd_msg h;
	struct fx_raw r;

	(void)state;
	fx_raw_open(&r, b->endpoint);
	h = raw_hello("a", 5, 0);
	fx_raw_send_msg(&r, &h);
	expect_error(&r, -EPERM, "a is up");
	h = raw_hello("a", 5, 0x1234);
	fx_raw_send_msg(&r, &h);
	expect_error(&r, -EPERM, "a is up");
	h = raw_hello("a", 4, 0);
	fx_raw_send_msg(&r, &h);
	expect_error(&r, -ESTALE, "newer epoch");
	fx_raw_close(&r);
	assert_int_equal(fx_stats(b).hellos_refused, 3);
	assert_int_equal(fx_count(b, down_ev), 0);
	assert_int_equal(fx_count(a, down_ev), 0);
	expect_delivered(a, pa, b, 11);
	fx_node_stop(a);
	fx_node_stop(b);
}

/* Without keys a newer epoch is a restart (it is all a stranger cannot
 * be stopped from claiming there: with CURVE it needs the key). */
static void test_newer_epoch_resets(void **state)
{
	struct fx_node *a = start("a", 5), *b = start("b", 1);
	struct fx_match reset = { .kind = FX_EV_DOWN, .err = -ECONNRESET };
	struct pd_msg h = raw_hello("a", 6, 0);
	struct fx_raw r;

	(void)state;
	(void)connect_pair(a, b);
	fx_raw_open(&r, b->endpoint);
	fx_raw_send_msg(&r, &h);
	(void)expect_ack(&r);
	assert_int_equal(fx_wait(b, reset, 1, WAIT_MS), 1);
	assert_int_equal(fx_nth(b, up_ev, 1).epoch, 6);
	fx_raw_close(&r);
	fx_node_stop(a);
	fx_node_stop(b);
}

struct reset_arg {
	uint32_t peer;
};

static int cmd_reset(struct fx_node *n, void *arg)
{
	return pd_ctrl_peer_reset(n->ctrl, ((struct reset_arg *)arg)->peer, -EPIPE);
}

/* A's data lanes failed: it resets its session, and its new DEALER's
 * Hello (same epoch) proves the session's secret: a new session at once. */
static void test_reset_with_resume(void **state)
{
	struct fx_node *a = start("a", 5), *b = start("b", 1);
	struct fx_match reset = { .kind = FX_EV_DOWN, .err = -ECONNRESET };
	struct reset_arg ra;
	uint32_t pa = connect_pair(a, b);

	(void)state;
	ra.peer = pa;
	assert_int_equal(fx_call(a, cmd_reset, &ra), 1);
	assert_int_equal(fx_wait(b, reset, 1, WAIT_MS), 1);
	assert_int_equal(fx_wait(b, up_ev, 2, WAIT_MS), 2);
	assert_int_equal(fx_wait(a, up_ev, 2, WAIT_MS), 2);
	assert_int_equal(fx_stats(b).hellos_refused, 0);
	assert_true(fx_nth(a, up_ev, 1).present == fx_nth(b, up_ev, 1).accept);
	assert_true(fx_nth(b, up_ev, 1).accept != fx_nth(b, up_ev, 0).accept);
	expect_delivered(a, pa, b, 12);
	fx_node_stop(a);
	fx_node_stop(b);
}

/* ---- the peer table ----------------------------------------------------------------- */

static int cmd_info(struct fx_node *n, void *arg)
{
	struct fx_info_arg *a = arg;
	int rc = pd_ctrl_peer_info(n->ctrl, a->peer, &a->info);

	if (rc == 0)
		snprintf(a->name, sizeof(a->name), "%s", a->info.refusal ? a->info.refusal : "");
	a->info.hello = NULL;
	a->info.refusal = NULL;
	return rc;
}

/* Two strangers fill b's table (2 peers): a's Hello is refused with a
 * clear reason that a keeps (its peer goes down with -ENOBUFS); once the
 * strangers fall silent they are evicted for a, which gets in. */
static void test_table_full_then_room(void **state)
{
	struct fx_node *b = start_cfg(&(struct fx_node_cfg){ .name = "b", .hb_ms = 50,
							     .max_peers = 2 });
	struct fx_node *a = start("a", 1);
	struct fx_match full = { .kind = FX_EV_DOWN, .err = -ENOBUFS };
	struct fx_info_arg ia = { 0 };
	struct fx_raw x1, x2;
	struct pd_msg h;

	(void)state;
	fx_raw_open(&x1, b->endpoint);
	fx_raw_open(&x2, b->endpoint);
	h = raw_hello("x1", 1, 0);
	fx_raw_send_msg(&x1, &h);
	(void)expect_ack(&x1);
	h = raw_hello("x2", 1, 0);
	fx_raw_send_msg(&x2, &h);
	(void)expect_ack(&x2);
	ia.peer = fx_peer(a, b->endpoint);
	assert_int_equal(fx_wait(a, full, 1, WAIT_MS), 1);
	assert_int_equal(fx_call(a, cmd_info, &ia), 0);
	assert_string_equal(ia.name, "Hello refused: peer table full");
	assert_true(fx_stats(a).refusals >= 1);
	assert_true(fx_stats(b).hellos_refused >= 1);
	fx_raw_close(&x1); /* silent from now on: down after 3 heartbeats */
	fx_raw_close(&x2);
	assert_int_equal(fx_wait(a, up_ev, 1, WAIT_MS), 1);
	assert_true(fx_count(b, evict_ev) >= 1);
	assert_int_equal(fx_call(a, cmd_info, &ia), 0);
	assert_string_equal(ia.name, "");   /* the HelloAck cleared the refusal */
	fx_node_stop(a);
	fx_node_stop(b);
}

/* A peer down longer than the grace period is forgotten, and its id is
 * the next new peer's. */
static void test_evicted_after_grace(void **state)
{
	struct fx_node *b = start_cfg(&(struct fx_node_cfg){ .name = "b", .hb_ms = 50,
							     .evict_ms = 200 });
	struct fx_node *a = start("a", 1);
	struct pd_msg h = raw_hello("x", 1, 0);
	struct fx_raw x;
	uint64_t t_down;

	(void)state;
	fx_raw_open(&x, b->endpoint);
	fx_raw_send_msg(&x, &h);
	(void)expect_ack(&x);
	fx_raw_close(&x);
	assert_int_equal(fx_wait(b, down_ev, 1, WAIT_MS), 1);
	t_down = fx_nth(b, down_ev, 0).t_ns;
	assert_int_equal(fx_wait(b, evict_ev, 1, WAIT_MS), 1);
	assert_int_equal(fx_nth(b, evict_ev, 0).peer, 1);
	/* not at once: after the grace (200 ms; the events' own clocks may lag) */
	if (fx_nth(b, evict_ev, 0).t_ns - t_down < 100 * PD_NS_PER_MS)
		fail_msg("evicted %llu ms after it went down",
			 (unsigned long long)((fx_nth(b, evict_ev, 0).t_ns - t_down) / PD_NS_PER_MS));
	assert_int_equal(fx_stats(b).peers, 0);
	assert_int_equal(fx_stats(b).evicted, 1);
	(void)fx_peer(a, b->endpoint);
	assert_int_equal(fx_wait(b, up_ev, 2, WAIT_MS), 2);
	assert_int_equal(fx_nth(b, up_ev, 1).peer, 1);   /* the freed id, taken again */
	assert_string_equal(fx_nth(b, up_ev, 1).name, "a");
	fx_node_stop(a);
	fx_node_stop(b);
}

static _Atomic int busy_flag;

static int fx_busy(void *ctx, uint32_t peer)
{
	(void)ctx;
	(void)peer;
	return busy_flag;
}

/* While the broker still refers to a down peer (peer_busy), it stays,
 * grace or no grace, and a full table stays full; once released, it goes. */
static void test_busy_peer_not_evicted(void **state)
{
	static struct pd_ctrl_ops ops;
	struct fx_node *b;
	struct pd_msg h = raw_hello("x", 1, 0);
	struct fx_raw x, y;

	(void)state;
	ops = fx_ops;
	ops.peer_busy = fx_busy;
	busy_flag = 1;
	b = start_cfg(&(struct fx_node_cfg){ .name = "b", .hb_ms = 50, .evict_ms = 100,
					     .max_peers = 1, .ops = &ops });
	fx_raw_open(&x, b->endpoint);
	fx_raw_send_msg(&x, &h);
	(void)expect_ack(&x);
	fx_raw_close(&x);
	assert_int_equal(fx_wait(b, down_ev, 1, WAIT_MS), 1);
	fx_raw_open(&y, b->endpoint);  /* the table is full, and x may not go */
	h = raw_hello("y", 1, 0);
	fx_raw_send_msg(&y, &h);
	expect_error(&y, -ENOBUFS, "peer table full");
	assert_int_equal(fx_wait(b, evict_ev, 1, 400), 0);
	busy_flag = 0;
	assert_int_equal(fx_wait(b, evict_ev, 1, WAIT_MS), 1);
	fx_raw_send_msg(&y, &h);
	(void)expect_ack(&y);
	fx_raw_close(&y);
	fx_node_stop(b);
}

/* ---- CURVE -------------------------------------------------------------------------- */

struct keyset {
	char dir[64];
	char key[3][96];       /* a, b, c key files */
	char pub[3][41];
};

static void keys_make(struct keyset *k)
{
	char err[256];

	static int n;

	snprintf(k->dir, sizeof(k->dir), "/tmp/pd-ctrl-trust.%d.%d", (int)getpid(), n++);
	assert_int_equal(mkdir(k->dir, 0700), 0);
	for (int i = 0; i < 3; i++) {
		char dir[sizeof(k->dir)];

		memcpy(dir, k->dir, sizeof(dir));
		snprintf(k->key[i], sizeof(k->key[i]), "%s/%c.key", dir, 'a' + i);
		assert_int_equal(pd_ctrl_keygen(k->key[i], k->pub[i], err, sizeof(err)), 0);
	}
	assert_int_equal(pd_ctrl_keygen(k->key[0], k->pub[0], err, sizeof(err)), -EEXIST);
}

static void keys_clean(const struct keyset *k)
{
	static const char *const files[] = { "a.key", "b.key", "c.key", "peers", "peers.a",
					     "peers.b", "peers.c" };
	char path[128];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", k->dir, files[i]);
		(void)unlink(path);
	}
	assert_int_equal(rmdir(k->dir), 0);
}

/* A peers file of lines, loaded with key file i. */
static struct pd_ctrl_keys *keys_load(const struct keyset *k, int i, const char *lines)
{
	char path[128], err[256] = "";
	struct pd_ctrl_keys *out = NULL;
	FILE *f;

	snprintf(path, sizeof(path), "%s/peers.%c", k->dir, 'a' + i);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(lines, f);
	assert_int_equal(fclose(f), 0);
	if (pd_ctrl_keys_load(k->key[i], path, &out, err, sizeof(err)) < 0)
		fail_msg("keys: %s", err);
	return out;
}

static struct fx_node *start_keys(const char *name, const struct pd_ctrl_keys *keys)
{
	return start_cfg(&(struct fx_node_cfg){ .name = name, .hb_ms = 50, .keys = keys });
}

/* Bad files are refused with the flag, the file and the line. */
static void test_curve_bad_files(void **state)
{
	struct keyset k;
	struct pd_ctrl_keys *out = NULL;
	char path[128], err[256];
	FILE *f;

	(void)state;
	keys_make(&k);
	snprintf(path, sizeof(path), "%s/peers", k.dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "# ok\nb %s tcp://127.0.0.1:1\nc not-a-key\n", k.pub[1]);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(pd_ctrl_keys_load(k.key[0], path, &out, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "--curve-peers"));
	assert_non_null(strstr(err, ":3: "));
	f = fopen(path, "w");
	fprintf(f, "b %s\nc %s\n", k.pub[1], k.pub[1]);  /* one key, two names */
	assert_int_equal(fclose(f), 0);
	assert_int_equal(pd_ctrl_keys_load(k.key[0], path, &out, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "bound to b"));
	assert_int_equal(chmod(k.key[0], 0644), 0);
	assert_int_equal(pd_ctrl_keys_load(k.key[0], path, &out, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "--curve-key"));
	assert_non_null(strstr(err, "chmod 600"));
	assert_null(out);
	keys_clean(&k);
}

static int cmd_dial_rc(struct fx_node *n, void *arg)
{
	struct fx_peer_arg *a = arg;

	return pd_ctrl_peer(n->ctrl, a->ep, &a->id);
}

/* a and b admit each other: up, authenticated, with each other's key id;
 * an endpoint with no key known is -ENOKEY. */
static void test_curve_pair(void **state)
{
	struct keyset k;
	struct pd_ctrl_keys *kb, *ka;
	struct fx_node *a, *b;
	struct fx_info_arg ia = { 0 };
	struct fx_peer_arg nokey = { .ep = "tcp://127.0.0.1:9" };
	char lines[512];
	uint32_t pa;

	(void)state;
	keys_make(&k);
	snprintf(lines, sizeof(lines), "a %s\n", k.pub[0]);
	kb = keys_load(&k, 1, lines);
	b = start_keys("b", kb);
	snprintf(lines, sizeof(lines), "b %s %s\n", k.pub[1], b->endpoint);
	ka = keys_load(&k, 0, lines);
	a = start_keys("a", ka);
	pa = connect_pair(a, b);
	ia.peer = pa;
	assert_int_equal(fx_call(a, fx_cmd_info, &ia), 0);
	assert_int_equal(ia.info.authenticated, 1);
	assert_memory_equal(ia.info.key_id, k.pub[1], PD_CTRL_KEY_ID_LEN);
	ia.peer = fx_nth(b, up_ev, 0).peer;
	assert_int_equal(fx_call(b, fx_cmd_info, &ia), 0);
	assert_int_equal(ia.info.authenticated, 1);
	assert_memory_equal(ia.info.key_id, k.pub[0], PD_CTRL_KEY_ID_LEN);
	assert_int_equal(fx_stats(b).auth_ok, 1);
	assert_true(fx_nth(a, up_ev, 0).present == fx_nth(b, up_ev, 0).accept);
	expect_delivered(a, pa, b, 21);
	assert_int_equal(fx_call(a, cmd_dial_rc, &nokey), -ENOKEY);
	fx_node_stop(a);
	fx_node_stop(b);
	pd_ctrl_keys_free(ka);
	pd_ctrl_keys_free(kb);
	keys_clean(&k);
}

/* A raw CURVE DEALER with key i of k (b's server key given). */
static void raw_curve(struct fx_raw *r, const struct keyset *k, int i, const char *srv,
		      const char *ep)
{
	char pub[41], sec[41], line[160];
	FILE *f = fopen(k->key[i], "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "public-key = %40s", pub) == 1)
			continue;
		(void)sscanf(line, "secret-key = %40s", sec);
	}
	fclose(f);
	r->ctx = zmq_ctx_new();
	r->sock = zmq_socket(r->ctx, ZMQ_DEALER);
	assert_int_equal(zmq_setsockopt(r->sock, ZMQ_LINGER, &(int){ 0 }, sizeof(int)), 0);
	assert_int_equal(zmq_setsockopt(r->sock, ZMQ_CURVE_SERVERKEY, srv, 41), 0);
	assert_int_equal(zmq_setsockopt(r->sock, ZMQ_CURVE_PUBLICKEY, pub, 41), 0);
	assert_int_equal(zmq_setsockopt(r->sock, ZMQ_CURVE_SECRETKEY, sec, 41), 0);
	assert_int_equal(zmq_connect(r->sock, ep), 0);
}

/* Nothing comes back within ms. */
static void expect_silence(struct fx_raw *r, int ms)
{
	zmq_pollitem_t it = { .socket = r->sock, .events = ZMQ_POLLIN };

	assert_int_equal(zmq_poll(&it, 1, ms), 0);
}

/* With CURVE on: a plain DEALER, an unknown key, and an admitted key
 * saying Hello under another name are refused and counted; none is up;
 * the legitimate a is unharmed. */
static void test_curve_strangers_refused(void **state)
{
	struct keyset k;
	struct pd_ctrl_keys *kb, *ka;
	struct fx_node *a, *b;
	struct pd_msg h;
	struct fx_raw r;
	char lines[512];
	uint32_t pa;

	(void)state;
	keys_make(&k);
	snprintf(lines, sizeof(lines), "a %s\nc %s\n", k.pub[0], k.pub[2]);
	kb = keys_load(&k, 1, lines);
	b = start_keys("b", kb);
	snprintf(lines, sizeof(lines), "b %s %s\n", k.pub[1], b->endpoint);
	ka = keys_load(&k, 0, lines);
	a = start_keys("a", ka);
	pa = connect_pair(a, b);
	/* no CURVE at all */
	fx_raw_open(&r, b->endpoint);
	h = raw_hello("a", 99, 0);
	fx_raw_send_msg(&r, &h);
	expect_silence(&r, 300);
	fx_raw_close(&r);
	/* mismatch found by b (plain), or by the client first (it closes: failed) */
	assert_true(fx_stats(b).auth_plain + fx_stats(b).auth_failed >= 1);
	/* a key b does not admit (b's own) */
	raw_curve(&r, &k, 1, k.pub[1], b->endpoint);
	fx_raw_send_msg(&r, &h);
	expect_silence(&r, 300);
	fx_raw_close(&r);
	assert_true(fx_stats(b).auth_denied >= 1);
	/* c's key, admitted as c, saying Hello as a */
	raw_curve(&r, &k, 2, k.pub[1], b->endpoint);
	fx_raw_send_msg(&r, &h);
	expect_error(&r, -EPERM, "the key of this connection is c's");
	fx_raw_close(&r);
	assert_int_equal(fx_stats(b).auth_name, 1);
	assert_int_equal(fx_count(b, up_ev), 1);
	assert_int_equal(fx_count(b, down_ev), 0);
	expect_delivered(a, pa, b, 31);
	fx_node_stop(a);
	fx_node_stop(b);
	pd_ctrl_keys_free(ka);
	pd_ctrl_keys_free(kb);
	keys_clean(&k);
}

/* a expects c's key at b's endpoint: no session; a says why. */
static void test_curve_wrong_server_key(void **state)
{
	struct keyset k;
	struct pd_ctrl_keys *kb, *ka;
	struct fx_node *a, *b;
	struct fx_info_arg ia = { 0 };
	char lines[512];

	(void)state;
	keys_make(&k);
	snprintf(lines, sizeof(lines), "a %s\n", k.pub[0]);
	kb = keys_load(&k, 1, lines);
	b = start_keys("b", kb);
	snprintf(lines, sizeof(lines), "b %s %s\n", k.pub[2], b->endpoint);
	ka = keys_load(&k, 0, lines);
	a = start_keys("a", ka);
	ia.peer = fx_peer(a, b->endpoint);
	assert_int_equal(fx_wait(a, down_ev, 1, WAIT_MS), 1);
	assert_int_equal(fx_count(a, up_ev), 0);
	assert_int_equal(fx_count(b, up_ev), 0);
	assert_true(fx_stats(b).auth_failed >= 1);
	assert_int_equal(fx_call(a, cmd_info, &ia), 0);
	fx_node_stop(a);
	fx_node_stop(b);
	pd_ctrl_keys_free(ka);
	pd_ctrl_keys_free(kb);
	keys_clean(&k);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_curve_bad_files),
		cmocka_unit_test(test_secret_one_way),
		cmocka_unit_test(test_secret_new_per_session),
		cmocka_unit_test(test_secrets_crossing),
		cmocka_unit_test(test_impostor_hello_refused),
		cmocka_unit_test(test_newer_epoch_resets),
		cmocka_unit_test(test_reset_with_resume),
		cmocka_unit_test(test_table_full_then_room),
		cmocka_unit_test(test_evicted_after_grace),
		cmocka_unit_test(test_busy_peer_not_evicted),
		cmocka_unit_test(test_curve_pair),
		cmocka_unit_test(test_curve_strangers_refused),
		cmocka_unit_test(test_curve_wrong_server_key),
	};

	pd_log_init_env(); /* PD_LOG_LEVEL=info shows the control plane's lines */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
