/* SPDX-License-Identifier: MIT */
/*
 * Wire codec, negative cases: everything a peer can get wrong must be
 * -EPROTO (or -EMSGSIZE) with a reason, never a crash or a huge
 * allocation; everything the encoder is handed out of bounds is -EINVAL.
 * Golden vectors and round trips are in test_wire_golden.c.
 */
#include "wire_fixture.h"

#define BUF 16384

static uint8_t *big;  /* scratch for built messages, BUF bytes */

static int setup(void **state)
{
	(void)state;
	big = malloc(BUF);
	return big ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	free(big);
	big = NULL;
	return 0;
}

static const struct fx_msg *msg_of(uint32_t id)
{
	size_t n;
	const struct fx_msg *m = fx_msgs(&n);

	for (size_t i = 0; i < n; i++) {
		if (m[i].id == id)
			return &m[i];
	}
	fail_msg("no fixture for type %u", id);
	return NULL;
}

static int field_of(const struct fx_msg *m, const char *name)
{
	for (size_t i = 0; i < m->n; i++) {
		if (strcmp(m->f[i].name, name) == 0)
			return (int)i;
	}
	fail_msg("%s has no field %s", m->type, name);
	return -1;
}

/* Message `id` with field `name` replaced by raw bytes; its length. */
static size_t build_swap(uint32_t id, const char *name, const void *raw, size_t n)
{
	const struct fx_msg *m = msg_of(id);
	struct fx_edit e = fx_edit_none();

	e.swap = field_of(m, name);
	e.with.p = raw;
	e.with.n = n;
	return fx_build(big, BUF, m, &e);
}

static void expect_ok(const void *p, size_t len)
{
	struct pd_wire_dec d;
	struct pd_msg m;
	char err[160] = "";
	int rc;

	pd_wire_dec_init(&d);
	rc = fx_decode(&d, p, len, &m, err, sizeof(err));
	if (rc != 0)
		fail_msg("decode: %d (%s)", rc, err);
	pd_wire_dec_fini(&d);
}

/* ---- arguments and framing --------------------------------------------- */

static void test_decode_null_args(void **state)
{
	static const uint8_t ok[] = "\x82\xa4" "type" "\xaa" "ProxyNotif" "\xa6" "req_id" "\xa0";
	struct pd_wire_dec d;
	struct pd_msg m;

	(void)state;
	pd_wire_dec_init(&d);
	assert_int_equal(pd_wire_decode(NULL, ok, sizeof(ok) - 1, &m, NULL, 0), -EINVAL);
	assert_int_equal(pd_wire_decode(&d, NULL, 4, &m, NULL, 0), -EINVAL);
	assert_int_equal(pd_wire_decode(&d, ok, sizeof(ok) - 1, NULL, NULL, 0), -EINVAL);
	/* err is optional. */
	assert_int_equal(pd_wire_decode(&d, ok, sizeof(ok) - 1, &m, NULL, 0), 0);
	assert_int_equal(pd_wire_decode(&d, ok, 3, &m, NULL, 0), -EPROTO);
	pd_wire_dec_fini(&d);
	pd_wire_dec_fini(&d);  /* twice is fine */
	pd_wire_dec_init(NULL);
	pd_wire_dec_fini(NULL);
	pd_wire_buf_init(NULL);
	pd_wire_buf_fini(NULL);
}

static void test_decode_empty(void **state)
{
	(void)state;
	fx_expect("", 0, -EPROTO, "empty");
}

static void test_decode_too_big(void **state)
{
	uint8_t *p = calloc(1, PD_WIRE_MAX_MSG + 1);

	(void)state;
	assert_non_null(p);
	p[0] = 0x80;
	fx_expect(p, PD_WIRE_MAX_MSG + 1, -EMSGSIZE, "exceeds");
	free(p);
}

/* Every proper prefix of every valid message is refused, and nothing crashes. */
static void test_decode_truncated(void **state)
{
	struct pd_wire_buf b;
	struct pd_msg m;
	size_t n;
	const struct fx_msg *fm = fx_msgs(&n);
	struct fx_edit e = fx_edit_none();

	(void)state;
	pd_wire_buf_init(&b);
	for (uint32_t t = 1; t <= PD_MSG_MAX; t++) {
		fx_fill(t, &m);
		assert_int_equal(pd_wire_encode(&m, &b), 0);
		expect_ok(b.data, b.len);
		for (size_t cut = 0; cut < b.len; cut++)
			fx_expect(b.data, cut, -EPROTO, NULL);
	}
	for (size_t i = 0; i < n; i++) {
		size_t len = fx_build(big, BUF, &fm[i], &e);

		expect_ok(big, len);
		for (size_t cut = 0; cut < len; cut++)
			fx_expect(big, cut, -EPROTO, cut ? "truncated" : "empty");
	}
	pd_wire_buf_fini(&b);
}

static void test_decode_trailing(void **state)
{
	const struct fx_msg *m = msg_of(PD_MSG_PROXY);
	struct fx_edit e = fx_edit_none();
	size_t len = fx_build(big, BUF, m, &e);

	(void)state;
	big[len] = 0x00;
	fx_expect(big, len + 1, -EPROTO, "trailing");
	memcpy(big + len, big, len);  /* two messages in one frame */
	fx_expect(big, 2 * len, -EPROTO, "trailing");
}

static void test_decode_not_map(void **state)
{
	static const struct fx_raw cases[] = {
		FX_RAW("\x92\xa4" "type" "\xaa" "ProxyNotif"),
		FX_RAW("\x01"),
		FX_RAW("\xc0"),
		FX_RAW("\xaa" "ProxyNotif"),
		FX_RAW("\xc4\x01\x80"),
	};

	(void)state;
	for (size_t i = 0; i < FX_N(cases); i++)
		fx_expect(cases[i].p, cases[i].n, -EPROTO, "not a map");
}

static void test_decode_type_field(void **state)
{
	static const struct {
		struct fx_raw raw;
		const char *why;
	} cases[] = {
		{ FX_RAW("\x80"), "no field 'type'" },
		{ FX_RAW("\x81\xa6" "req_id" "\xa2" "r1"), "no field 'type'" },
		{ FX_RAW("\x81\xa4" "TYPE" "\xa4" "Noop"), "no field 'type'" },
		{ FX_RAW("\x81\xa4" "type" "\xa5" "Bogus"), "unknown message type 'Bogus'" },
		{ FX_RAW("\x81\xa4" "type" "\xac" "allocrequest"), "unknown message type" },
		{ FX_RAW("\x81\xa4" "type" "\xa3" "\x01\x0a\xff"),
		  "unknown message type '?" "?" "?'" },  /* split: no trigraph */
		{ FX_RAW("\x81\xa4" "type" "\xa0"), "unknown message type" },
		{ FX_RAW("\x81\xa4" "type" "\x03"), "not a string" },
		{ FX_RAW("\x81\xa4" "type" "\xc0"), "not a string" },
		{ FX_RAW("\x81\xa4" "type" "\xc4\x0a" "ProxyNotif"), "not a string" },
		{ FX_RAW("\x82\xa4" "type" "\xaa" "ProxyNotif" "\xa4" "type" "\xaa" "ProxyNotif"),
		  "'type' is given twice" },
		/* A non-string key is an unknown field, not a crash. */
		{ FX_RAW("\x81\x01\xa4" "type"), "no field 'type'" },
	};

	(void)state;
	for (size_t i = 0; i < FX_N(cases); i++)
		fx_expect(cases[i].raw.p, cases[i].raw.n, -EPROTO, cases[i].why);
}

/* ---- fields, table-driven over every message type ----------------------- */

/* state: index of the fixture message. Each required field left out -> "missing";
 * each optional one left out -> still decodes. */
static void test_field_missing(void **state)
{
	size_t n;
	const struct fx_msg *m = &fx_msgs(&n)[(uintptr_t)*state];
	char why[64];

	for (size_t i = 0; i < m->n; i++) {
		struct fx_edit e = fx_edit_none();
		size_t len;

		e.omit = (int)i;
		len = fx_build(big, BUF, m, &e);
		if (!m->f[i].req) {
			expect_ok(big, len);
			continue;
		}
		snprintf(why, sizeof(why), "%s: field '%s' missing", m->type, m->f[i].name);
		fx_expect(big, len, -EPROTO, why);
	}
}

/* state: index of the fixture message. Each field given a wrong type -> -EPROTO. */
static void test_field_mistyped(void **state)
{
	size_t n;
	const struct fx_msg *m = &fx_msgs(&n)[(uintptr_t)*state];
	char why[64];

	for (size_t i = 0; i < m->n; i++) {
		struct fx_edit e = fx_edit_none();
		size_t len;

		if (!m->f[i].bad.p)
			continue;
		e.swap = (int)i;
		e.with = m->f[i].bad;
		len = fx_build(big, BUF, m, &e);
		snprintf(why, sizeof(why), "%s: field '%s' ", m->type, m->f[i].name);
		fx_expect(big, len, -EPROTO, why);
	}
}

static void test_field_twice(void **state)
{
	const struct fx_msg *m = msg_of(PD_MSG_ALLOC_REQ);
	struct fx_edit e = fx_edit_none();
	size_t len;

	(void)state;
	e.extra = (struct fx_raw)FX_RAW("\xa4" "keys" "\x90");
	e.nextra = 1;
	len = fx_build(big, BUF, m, &e);
	fx_expect(big, len, -EPROTO, "field 'keys' is given twice");
	/* An unknown field given twice is still just ignored. */
	e.extra = (struct fx_raw)FX_RAW("\xa1" "z" "\x01\xa1" "z" "\x02");
	e.nextra = 2;
	len = fx_build(big, BUF, m, &e);
	expect_ok(big, len);
}

/* A str8 (n < 256) or str16 header and n bytes of 'a' into out; its length. */
static size_t make_str(uint8_t *out, size_t n)
{
	size_t h = n < 256 ? 2 : 3;

	out[0] = n < 256 ? 0xd9 : 0xda;
	if (n < 256) {
		out[1] = (uint8_t)n;
	} else {
		out[1] = (uint8_t)(n >> 8);
		out[2] = (uint8_t)n;
	}
	memset(out + h, 'a', n);
	return h + n;
}

static void test_key_and_req_id_bounds(void **state)
{
	uint8_t raw[400];
	size_t n, len;

	(void)state;
	raw[0] = 0x92;  /* keys: [long key, "k"] (two, as lens has two) */
	n = 1 + make_str(raw + 1, PD_KEY_MAX);
	memcpy(raw + n, "\xa1" "k", 2);
	expect_ok(big, build_swap(PD_MSG_ALLOC_REQ, "keys", raw, n + 2));
	n = 1 + make_str(raw + 1, PD_KEY_MAX + 1);
	memcpy(raw + n, "\xa1" "k", 2);
	n += 2;
	len = build_swap(PD_MSG_ALLOC_REQ, "keys", raw, n);
	fx_expect(big, len, -EPROTO, "field 'keys' has a length");
	len = build_swap(PD_MSG_CANCEL, "keys", raw, n);
	fx_expect(big, len, -EPROTO, "CancelNotif: field 'keys'");
	len = build_swap(PD_MSG_ALLOC_REQ, "keys", "\x91\xa0", 2);  /* empty key */
	fx_expect(big, len, -EPROTO, "field 'keys' has a length");
	/* Keys may come as bin. */
	expect_ok(big, build_swap(PD_MSG_ALLOC_REQ, "keys", "\x92\xc4\x01\x00\xa1" "k", 6));

	n = make_str(raw, PD_REQ_ID_MAX);
	expect_ok(big, build_swap(PD_MSG_ALLOC_REQ, "req_id", raw, n));
	n = make_str(raw, PD_REQ_ID_MAX + 1);
	len = build_swap(PD_MSG_ALLOC_REQ, "req_id", raw, n);
	fx_expect(big, len, -EPROTO, "field 'req_id' has a length");
	len = build_swap(PD_MSG_PROXY, "req_id", raw, n);
	fx_expect(big, len, -EPROTO, "ProxyNotif: field 'req_id'");
	len = build_swap(PD_MSG_RESERVE, "req_id", raw, n);
	fx_expect(big, len, -EPROTO, "Reserve: field 'req_id' has a length");
	n = make_str(raw, PD_REQ_ID_MAX);
	expect_ok(big, build_swap(PD_MSG_RESERVE, "req_id", raw, n));
	/* A Reserve names its request: an empty id is not one. */
	len = build_swap(PD_MSG_RESERVE, "req_id", "\xa0", 1);
	fx_expect(big, len, -EPROTO, "Reserve: field 'req_id' has a length");
	n = make_str(raw, PD_WIRE_NAME_MAX + 1);
	len = build_swap(PD_MSG_HELLO, "name", raw, n);
	fx_expect(big, len, -EPROTO, "field 'name' has a length");
	n = make_str(raw, PD_WIRE_ADDR_MAX + 1);
	len = build_swap(PD_MSG_ERROR, "text", raw, n);
	fx_expect(big, len, -EPROTO, "field 'text' has a length");
}

/* keys: [n keys "k"]; n > 15 uses array16. */
static size_t make_keys(uint8_t *out, uint32_t n)
{
	out[0] = 0xdc;
	out[1] = (uint8_t)(n >> 8);
	out[2] = (uint8_t)n;
	for (uint32_t i = 0; i < n; i++) {
		out[3 + 2 * i] = 0xa1;
		out[4 + 2 * i] = 'k';
	}
	return 3 + 2 * (size_t)n;
}

static void test_too_many_keys(void **state)
{
	const struct fx_msg *m = msg_of(PD_MSG_ALLOC_REQ);
	uint8_t *raw = malloc(3 + 2 * (PD_WIRE_MAX_KEYS + 1));
	struct fx_edit e = fx_edit_none();
	struct pd_wire_dec d;
	struct pd_msg out;
	size_t len;

	(void)state;
	assert_non_null(raw);
	/* 4096 keys fit (lens left out: it would disagree). */
	e.omit = field_of(m, "lens");
	e.swap = field_of(m, "keys");
	e.with.p = (const char *)raw;
	e.with.n = make_keys(raw, PD_WIRE_MAX_KEYS);
	len = fx_build(big, BUF, m, &e);
	pd_wire_dec_init(&d);
	assert_int_equal(fx_decode(&d, big, len, &out, NULL, 0), 0);
	assert_int_equal(out.u.alloc_req.nkeys, PD_WIRE_MAX_KEYS);
	assert_int_equal(out.u.alloc_req.keys[PD_WIRE_MAX_KEYS - 1].len, 1);
	pd_wire_dec_fini(&d);
	/* 4097 do not, in any message. */
	e.with.n = make_keys(raw, PD_WIRE_MAX_KEYS + 1);
	len = fx_build(big, BUF, m, &e);
	fx_expect(big, len, -EPROTO, "PD_WIRE_MAX_KEYS");
	len = build_swap(PD_MSG_CANCEL, "keys", raw, e.with.n);
	fx_expect(big, len, -EPROTO, "PD_WIRE_MAX_KEYS");
	free(raw);
}

/* Container and string headers claiming far more than the message holds. */
static void test_huge_headers(void **state)
{
	static const struct fx_raw cases[] = {
		FX_RAW("\xdd\xff\xff\xff\xff"),          /* array32 of 2^32-1 */
		FX_RAW("\xdf\xff\xff\xff\xff"),          /* map32 of 2^32-1 */
		FX_RAW("\xdc\xff\xff"),                  /* array16 of 65535 */
		FX_RAW("\xdd\x00\x00\x10\x00"),          /* 4096 entries, 0 present */
		FX_RAW("\xdb\xff\xff\xff\xff" "ab"),     /* str32 of 4 GiB */
		FX_RAW("\xc6\x7f\xff\xff\xff"),          /* bin32 */
		FX_RAW("\xc9\xff\xff\xff\xff\x01"),      /* ext32 */
		FX_RAW("\xd9\x10" "short"),              /* str8 of 16, 5 present */
		FX_RAW("\xd8\x01" "abc"),                /* fixext16, 3 present */
		FX_RAW("\xcf\x00\x00"),                  /* uint64, 2 present */
		FX_RAW("\xc1"),                          /* reserved */
	};
	uint8_t msg[64];

	(void)state;
	for (size_t i = 0; i < FX_N(cases); i++) {
		/* Top level, then as the value of an unknown field. */
		fx_expect(cases[i].p, cases[i].n, -EPROTO, "malformed");
		memcpy(msg, "\x82\xa4" "type" "\xaa" "ProxyNotif" "\xa1" "x", 19);
		memcpy(msg + 19, cases[i].p, cases[i].n);
		fx_expect(msg, 19 + cases[i].n, -EPROTO, "malformed");
	}
	fx_expect("\x81\xa4" "type" "\xdd\xff\xff\xff\xff", 11, -EPROTO, "entries");
}

/*
 * ProxyNotif plus an unknown field "x" nesting `levels` containers inside
 * the top-level map: arrays [[..[0]..]], maps {"": {"": ..0}}, or arrays
 * whose innermost one is empty.
 */
static size_t make_nested(uint32_t levels, char shape)
{
	const struct fx_msg *m = msg_of(PD_MSG_PROXY);
	struct fx_edit e = fx_edit_none();
	static uint8_t x[512];
	size_t at = 2;

	x[0] = 0xa1;
	x[1] = 'x';
	for (uint32_t i = 0; i < levels; i++) {
		if (shape == 'm') {
			x[at++] = 0x81;
			x[at++] = 0xa0;
		} else {
			x[at++] = shape == 'e' && i == levels - 1 ? 0x90 : 0x91;
		}
	}
	if (shape != 'e')
		x[at++] = 0x00;
	e.extra.p = (const char *)x;
	e.extra.n = at;
	e.nextra = 1;
	return fx_build(big, BUF, m, &e);
}

static void test_depth(void **state)
{
	(void)state;
	/* The top-level map is depth 1: 7 more levels fit, 8 do not. */
	expect_ok(big, make_nested(PD_WIRE_MAX_DEPTH - 1, 'a'));
	fx_expect(big, make_nested(PD_WIRE_MAX_DEPTH, 'a'), -EPROTO, "too deep");
	expect_ok(big, make_nested(PD_WIRE_MAX_DEPTH - 1, 'm'));
	fx_expect(big, make_nested(PD_WIRE_MAX_DEPTH, 'm'), -EPROTO, "too deep");
	fx_expect(big, make_nested(200, 'a'), -EPROTO, "too deep");
	/* Empty containers count too. */
	expect_ok(big, make_nested(PD_WIRE_MAX_DEPTH - 1, 'e'));
	fx_expect(big, make_nested(PD_WIRE_MAX_DEPTH, 'e'), -EPROTO, "too deep");
}

/* 9 arrays of 4096 nils: each container is in bounds, the total is not. */
static void test_object_count(void **state)
{
	uint8_t *p = malloc(40000);
	size_t at = 0;

	(void)state;
	assert_non_null(p);
	at = fx_put(p, at, 40000, "\x82\xa4" "type" "\xaa" "ProxyNotif", 17);
	at = fx_put(p, at, 40000, "\xa1" "x" "\x99", 3);
	for (int a = 0; a < 9; a++) {
		at = fx_put(p, at, 40000, "\xdc\x10\x00", 3);
		memset(p + at, 0xc0, PD_WIRE_MAX_KEYS);
		at += PD_WIRE_MAX_KEYS;
	}
	fx_expect(p, at, -EPROTO, "PD_WIRE_MAX_OBJS");
	free(p);
}

/* Integer ranges and cross-field rules: {type, field, value, ok}. */
static void test_ranges(void **state)
{
	static const struct {
		uint32_t id;
		const char *field;
		struct fx_raw val;
		bool ok;
	} cases[] = {
		{ PD_MSG_ALLOC_REQ, "total_chunks", FX_RAW("\xff"), false },
		{ PD_MSG_ALLOC_REQ, "total_chunks", FX_RAW("\xcf\0\0\0\x01\0\0\0\0"), false },
		{ PD_MSG_ALLOC_REQ, "total_chunks", FX_RAW("\xce\xff\xff\xff\xff"), true },
		{ PD_MSG_ALLOC_REQ, "total_chunks", FX_RAW("\xd0\x05"), true }, /* int8 5 */
		{ PD_MSG_ALLOC_REQ, "seq", FX_RAW("\xff"), false },
		{ PD_MSG_ALLOC_REQ, "seq", FX_RAW("\xcf\xff\xff\xff\xff\xff\xff\xff\xff"), true },
		{ PD_MSG_ALLOC_REQ, "world_size", FX_RAW("\x00"), false },
		{ PD_MSG_ALLOC_REQ, "rank", FX_RAW("\x02"), false },      /* world_size 2 */
		{ PD_MSG_ALLOC_REQ, "lens", FX_RAW("\x93\x01\x02\x03"), false },
		{ PD_MSG_ALLOC_REQ, "lens", FX_RAW("\x92\x01\xff"), false },
		{ PD_MSG_ALLOC_REQ, "lens", FX_RAW("\x92\x01\xcf\0\0\0\x01\0\0\0\0"), false },
		{ PD_MSG_ALLOC_REQ, "is_last_batch", FX_RAW("\xc2"), true },
		{ PD_MSG_ALLOC_RESP, "remote_indexes", FX_RAW("\x91\xfe"), false },
		{ PD_MSG_ALLOC_RESP, "remote_indexes", FX_RAW("\x91\xce\x80\0\0\0"), false },
		{ PD_MSG_ALLOC_RESP, "remote_indexes", FX_RAW("\x91\xce\x7f\xff\xff\xff"), true },
		{ PD_MSG_ALLOC_RESP, "remote_indexes", FX_RAW("\x91\xd3\x80\0\0\0\0\0\0\0"),
		  false },
		{ PD_MSG_ALLOC_RESP, "already_sent_indexes", FX_RAW("\x91\xcd\x10\x00"), false },
		{ PD_MSG_ALLOC_RESP, "already_sent_indexes", FX_RAW("\x91\xcd\x0f\xff"), true },
		{ PD_MSG_ALLOC_RESP, "already_sent_indexes", FX_RAW("\x91\xff"), false },
		{ PD_MSG_ALLOC_RESP, "err", FX_RAW("\x01"), false },
		{ PD_MSG_ALLOC_RESP, "err", FX_RAW("\xd1\xf0\x00"), false },  /* -4096 */
		{ PD_MSG_ALLOC_RESP, "err", FX_RAW("\xd1\xf0\x01"), true },   /* -4095 */
		{ PD_MSG_PUT_DONE, "indexes", FX_RAW("\x91\xff"), false },
		{ PD_MSG_PUT_DONE, "rank", FX_RAW("\xcf\0\0\0\x01\0\0\0\0"), false },
		{ PD_MSG_ERROR, "code", FX_RAW("\x00"), false },
		{ PD_MSG_ERROR, "code", FX_RAW("\x01"), false },
		{ PD_MSG_PROXY, "rank", FX_RAW("\x02"), false },           /* world_size 2 */
		{ PD_MSG_PROXY, "world_size", FX_RAW("\x00"), false },
		{ PD_MSG_PROXY, "status", FX_RAW("\x01"), false },
		{ PD_MSG_HELLO, "proto", FX_RAW("\x00"), false },
		{ PD_MSG_HELLO, "slot_size", FX_RAW("\x00"), false },
		{ PD_MSG_HELLO, "rdma_qpn", FX_RAW("\xce\x01\0\0\0"), false },
		{ PD_MSG_HELLO, "rdma_qpn", FX_RAW("\xce\0\xff\xff\xff"), true },
		{ PD_MSG_HELLO, "rdma_gid", FX_RAW("\xc4\x0f" "0123456789abcde"), false },
		{ PD_MSG_HELLO, "xports", FX_RAW("\x90"), false },
		{ PD_MSG_HELLO, "xports", FX_RAW("\x95\xa1" "a" "\xa1" "b" "\xa1" "c" "\xa1" "d"
						  "\xa1" "e"), false },
		{ PD_MSG_HELLO, "xports", FX_RAW("\x92\xa3" "tcp" "\xa0"), false },
		{ PD_MSG_HELLO, "addrs", FX_RAW("\x91\xa0"), false },
		{ PD_MSG_HELLO, "name", FX_RAW("\xa0"), false },
		{ PD_MSG_RESERVE, "total_chunks", FX_RAW("\x00"), false },
		{ PD_MSG_RESERVE, "total_chunks", FX_RAW("\x01"), true },
		{ PD_MSG_RESERVE, "total_chunks", FX_RAW("\xce\xff\xff\xff\xff"), true },
		{ PD_MSG_RESERVE, "total_chunks", FX_RAW("\xcf\0\0\0\x01\0\0\0\0"), false },
		{ PD_MSG_RESERVE, "total_chunks", FX_RAW("\xff"), false },
		{ PD_MSG_RESERVE, "world_size", FX_RAW("\x00"), false },
		{ PD_MSG_RESERVE, "world_size", FX_RAW("\x01"), false },   /* rank 1 */
		{ PD_MSG_RESERVE, "world_size", FX_RAW("\xce\xff\xff\xff\xff"), true },
		{ PD_MSG_RESERVE, "rank", FX_RAW("\x02"), false },         /* world_size 2 */
		{ PD_MSG_RESERVE, "rank", FX_RAW("\x00"), true },
		{ PD_MSG_RESERVE, "rank", FX_RAW("\xff"), false },
		{ PD_MSG_RESERVE, "seq", FX_RAW("\xff"), false },
		{ PD_MSG_RESERVE, "seq", FX_RAW("\x00"), true },
		{ PD_MSG_RESERVE, "seq", FX_RAW("\xcf\xff\xff\xff\xff\xff\xff\xff\xff"), true },
	};

	(void)state;
	for (size_t i = 0; i < FX_N(cases); i++) {
		size_t len = build_swap(cases[i].id, cases[i].field, cases[i].val.p,
					cases[i].val.n);

		if (cases[i].ok)
			expect_ok(big, len);
		else
			fx_expect(big, len, -EPROTO, pd_wire_type_name(cases[i].id));
	}
}

/* ---- encoder bounds ------------------------------------------------------ */

static void expect_einval(const struct pd_msg *m)
{
	struct pd_wire_buf b;

	pd_wire_buf_init(&b);
	assert_int_equal(pd_wire_encode(m, &b), -EINVAL);
	assert_int_equal(b.len, 0);
	pd_wire_buf_fini(&b);
}

static void test_encode_args(void **state)
{
	struct pd_wire_buf b;
	struct pd_msg m;

	(void)state;
	pd_wire_buf_init(&b);
	fx_fill(PD_MSG_HEARTBEAT, &m);
	assert_int_equal(pd_wire_encode(NULL, &b), -EINVAL);
	assert_int_equal(pd_wire_encode(&m, NULL), -EINVAL);
	m.type = 0;
	assert_int_equal(pd_wire_encode(&m, &b), -EINVAL);
	m.type = PD_MSG_MAX + 1;
	assert_int_equal(pd_wire_encode(&m, &b), -EINVAL);
	assert_null(pd_wire_type_name(0));
	assert_null(pd_wire_type_name(PD_MSG_MAX + 1));
	pd_wire_buf_fini(&b);
}

/* A Reserve out of bounds is not encoded: every field, and rank < world. */
static void reserve_bounds(void)
{
	static const uint8_t id[PD_REQ_ID_MAX + 1];
	struct pd_wire_buf b;
	struct pd_msg m;

	fx_fill(PD_MSG_RESERVE, &m);
	m.u.reserve.req_id.len = 0;
	expect_einval(&m);                           /* empty req_id */
	m.u.reserve.req_id = (struct pd_bytes){ id, PD_REQ_ID_MAX + 1 };
	expect_einval(&m);                           /* 128 bytes */
	m.u.reserve.req_id.p = NULL;
	m.u.reserve.req_id.len = 3;
	expect_einval(&m);
	m.u.reserve.req_id = (struct pd_bytes){ id, PD_REQ_ID_MAX };
	pd_wire_buf_init(&b);
	assert_int_equal(pd_wire_encode(&m, &b), 0); /* 127 is fine */
	pd_wire_buf_fini(&b);
	m.u.reserve.total_chunks = 0;
	expect_einval(&m);
	fx_fill(PD_MSG_RESERVE, &m);
	m.u.reserve.world_size = 0;
	m.u.reserve.rank = 0;
	expect_einval(&m);
	fx_fill(PD_MSG_RESERVE, &m);
	m.u.reserve.rank = m.u.reserve.world_size;
	expect_einval(&m);
	m.u.reserve.rank = UINT32_MAX;
	expect_einval(&m);
	fx_fill(PD_MSG_RESERVE, &m);
	m.u.reserve.total_chunks = 3;
	m.u.reserve.grants = 4;                      /* more grants than chunks */
	expect_einval(&m);
	fx_fill(PD_MSG_PUT_DONE, &m);
	m.u.put_done.lens = NULL;                    /* keys without their lengths */
	expect_einval(&m);
	fx_fill(PD_MSG_PUT_DONE, &m);
	m.u.put_done.keys = NULL;                    /* lengths without keys */
	expect_einval(&m);
}

static void test_encode_bounds(void **state)
{
	static const uint8_t long_key[PD_KEY_MAX + 1];
	struct pd_bytes keys[2] = { { long_key, PD_KEY_MAX + 1 }, { long_key, 1 } };
	const int32_t bad_idx[1] = { -2 };
	struct pd_wire_buf b;
	struct pd_msg m;

	(void)state;
	fx_fill(PD_MSG_ALLOC_REQ, &m);
	m.u.alloc_req.keys = keys;
	m.u.alloc_req.nkeys = 2;
	m.u.alloc_req.lens = NULL;
	expect_einval(&m);                           /* key of 256 bytes */
	keys[0].len = 0;
	expect_einval(&m);                           /* empty key */
	keys[0].len = PD_KEY_MAX;
	m.u.alloc_req.keys = NULL;
	expect_einval(&m);                           /* NULL keys, nkeys 2 */
	m.u.alloc_req.keys = keys;
	m.u.alloc_req.nkeys = PD_WIRE_MAX_KEYS + 1;
	expect_einval(&m);
	m.u.alloc_req.nkeys = 2;
	m.u.alloc_req.req_id.len = PD_REQ_ID_MAX + 1;
	m.u.alloc_req.req_id.p = long_key;
	expect_einval(&m);
	m.u.alloc_req.req_id.len = 0;
	m.u.alloc_req.world_size = 0;
	expect_einval(&m);
	m.u.alloc_req.world_size = 3;
	m.u.alloc_req.rank = 3;
	expect_einval(&m);
	m.u.alloc_req.rank = 0;
	m.u.alloc_req.is_last_batch = 2;
	expect_einval(&m);

	fx_fill(PD_MSG_ALLOC_RESP, &m);
	m.u.alloc_resp.remote_indexes = bad_idx;
	m.u.alloc_resp.n = 1;
	expect_einval(&m);
	fx_fill(PD_MSG_ALLOC_RESP, &m);
	m.u.alloc_resp.err = 5;
	expect_einval(&m);
	fx_fill(PD_MSG_HELLO, &m);
	m.u.hello.nxports = PD_WIRE_MAX_XPORTS + 1;
	expect_einval(&m);
	m.u.hello.nxports = 0;
	expect_einval(&m);
	fx_fill(PD_MSG_HELLO, &m);
	m.u.hello.rdma_gid.len = 8;
	expect_einval(&m);
	fx_fill(PD_MSG_PROXY, &m);
	m.u.proxy.rank = 2;
	expect_einval(&m);
	m.u.proxy.has_ext = 0;                       /* extensions not sent: not checked */
	pd_wire_buf_init(&b);
	assert_int_equal(pd_wire_encode(&m, &b), 0);
	pd_wire_buf_fini(&b);
	fx_fill(PD_MSG_ERROR, &m);
	m.u.error.code = 0;
	expect_einval(&m);
	reserve_bounds();
}

/* Prestate: the index of the fixture message. */
#define PER_TYPE(fn, i) cmocka_unit_test_prestate(fn, (void *)(uintptr_t)(i))

int main(void)
{
	size_t n;
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decode_null_args),
		cmocka_unit_test(test_decode_empty),
		cmocka_unit_test(test_decode_too_big),
		cmocka_unit_test(test_decode_truncated),
		cmocka_unit_test(test_decode_trailing),
		cmocka_unit_test(test_decode_not_map),
		cmocka_unit_test(test_decode_type_field),
		PER_TYPE(test_field_missing, 0), PER_TYPE(test_field_missing, 1),
		PER_TYPE(test_field_missing, 2), PER_TYPE(test_field_missing, 3),
		PER_TYPE(test_field_missing, 4), PER_TYPE(test_field_missing, 5),
		PER_TYPE(test_field_missing, 6), PER_TYPE(test_field_missing, 7),
		PER_TYPE(test_field_missing, 8), PER_TYPE(test_field_missing, 9),
		PER_TYPE(test_field_mistyped, 0), PER_TYPE(test_field_mistyped, 1),
		PER_TYPE(test_field_mistyped, 2), PER_TYPE(test_field_mistyped, 3),
		PER_TYPE(test_field_mistyped, 4), PER_TYPE(test_field_mistyped, 5),
		PER_TYPE(test_field_mistyped, 6), PER_TYPE(test_field_mistyped, 7),
		PER_TYPE(test_field_mistyped, 8), PER_TYPE(test_field_mistyped, 9),
		cmocka_unit_test(test_field_twice),
		cmocka_unit_test(test_key_and_req_id_bounds),
		cmocka_unit_test(test_too_many_keys),
		cmocka_unit_test(test_huge_headers),
		cmocka_unit_test(test_depth),
		cmocka_unit_test(test_object_count),
		cmocka_unit_test(test_ranges),
		cmocka_unit_test(test_encode_args),
		cmocka_unit_test(test_encode_bounds),
	};

	if (fx_msgs(&n) == NULL || n != PD_MSG_MAX)
		return 1;
	return cmocka_run_group_tests_name("wire (negative)", tests, setup, teardown);
}
