/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the admin socket: the bytes a client writes (a
 * 4-byte big-endian length, then msgpack) through what the broker does
 * with them (broker/pd_admin.c: the frame's bounds, the pre-scan;
 * pd_admin_cmd.c: the parser and the commands), on a broker of pdbroker's
 * own parts (fuzz_broker.h) with something to show: two agents attached,
 * send-side requests declared, admitted and allocating, receive-side ones
 * granted and ready, a decode agent waiting. Every request is answered or
 * refused, never a crash, an assertion or a leak, and an answer is one
 * frame holding one msgpack map as shm/pd_admin_proto.h describes it. A
 * request that changed the broker (a cancel that cancelled) leaves the
 * next input a broker prepared afresh.
 *
 *   make fuzz-admin FUZZ_SECONDS=60
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "fuzz_broker.h"
#include "fuzz_play.h"
#include "pd_admin.h"
#include "pd_admin_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct admin_fx {
	struct fzb f;
	struct fzb_agent a[2];
};

PD_NORETURN static void fail(const char *why)
{
	fzb_die(why, -EPROTO);
}

/* ---- the broker, with something to show ------------------------------------------------ */

static void submit(struct admin_fx *x, uint32_t agent, const struct pd_sqe *e, uint32_t n)
{
	if (fzp_submit(&x->f, &x->a[agent], e, n) < 0)
		fail("a submission of the preparation");
}

/* Send side: one request admitted with a batch waiting for its slots, one
 * declared and not admitted yet. */
static void prepare_send(struct admin_fx *x)
{
	struct pd_sqe e[3];
	pd_slot_ref s[2];

	fzp_put(&e[0], PD_SQ_DECLARE, "tx-admitted", 0, 2, 0);
	submit(x, 0, e, 1);
	fzp_answer(&x->f, PD_MSG_RESERVE, 0);
	if (fzp_loan(&x->f, &x->a[0], 2, s) < 0)
		fail("a loan of the preparation");
	fzp_put(&e[0], PD_SQ_PUT, "tx-admitted", 2, 2, 1);
	fzp_chunk(&e[1], s[0], "tx-admitted.0");
	fzp_chunk(&e[2], s[1], "tx-admitted.1");
	submit(x, 0, e, 3);
	fzp_put(&e[0], PD_SQ_DECLARE, "tx-declared", 0, 1, 0);
	submit(x, 0, e, 1);
}

/* Receive side: one request ready, one with half its chunks granted and a
 * decode agent waiting for it. */
static void prepare_recv(struct admin_fx *x)
{
	uint32_t peer = fzp_sender(&x->f, 0), gens[2];
	struct pd_sqe e;
	int32_t slots[2];

	if (fzp_alloc(&x->f, peer, 1, "rx-ready", 0, 2, 2, slots, gens) != 2)
		fail("a grant of the preparation");
	fzp_put_done(&x->f, peer, 1, "rx-ready", slots, gens, 2);
	if (fzp_alloc(&x->f, peer, 2, "rx-granted", 0, 1, 2, slots, gens) != 1)
		fail("a grant of the preparation");
	fzp_req(&e, PD_SQ_RECV_WAIT, "rx-granted", 0);
	submit(x, 1, &e, 1);
}

static void teardown(struct admin_fx *x)
{
	fzb_detach(&x->f, &x->a[0]);
	fzb_detach(&x->f, &x->a[1]);
	fzb_destroy(&x->f);
}

static void prepare(struct admin_fx *x)
{
	fzb_create(&x->f, 16, 16);
	if (fzb_attach(&x->f, &x->a[0], PD_ROLE_SEND, 0) < 0 ||
	    fzb_attach(&x->f, &x->a[1], PD_ROLE_RECV, 0) < 0)
		fail("attach");
	prepare_send(x);
	prepare_recv(x);
}

/* ---- answers ------------------------------------------------------------------------ */

static int is(const msgpack_object *o, const char *s)
{
	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
	       memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

static const msgpack_object *get(const msgpack_object *map, const char *key)
{
	for (uint32_t i = 0; i < map->via.map.size; i++)
		if (is(&map->via.map.ptr[i].key, key))
			return &map->via.map.ptr[i].val;
	return NULL;
}

/* A row: string keys, string or integer values. */
static void check_row(const msgpack_object *row)
{
	if (row->type != MSGPACK_OBJECT_MAP || row->via.map.size == 0)
		fail("a row that is not a map");
	for (uint32_t i = 0; i < row->via.map.size; i++) {
		const msgpack_object_kv *kv = &row->via.map.ptr[i];

		if (kv->key.type != MSGPACK_OBJECT_STR ||
		    (kv->val.type != MSGPACK_OBJECT_STR &&
		     kv->val.type != MSGPACK_OBJECT_POSITIVE_INTEGER &&
		     kv->val.type != MSGPACK_OBJECT_NEGATIVE_INTEGER))
			fail("a row field of the wrong type");
	}
}

/* {"ok": false, "error": STR}, {"ok": true, "rows": [ROW...]} or
 * {"ok": true, "cancelled": INT >= 1}. @return 1 for a cancel that cancelled. */
static int check_map(const msgpack_object *o)
{
	const msgpack_object *ok, *v;

	if (o->type != MSGPACK_OBJECT_MAP || !(ok = get(o, "ok")) ||
	    ok->type != MSGPACK_OBJECT_BOOLEAN || o->via.map.size != 2)
		fail("an answer that is not {\"ok\": bool, ...}");
	if (!ok->via.boolean) {
		if (!(v = get(o, "error")) || v->type != MSGPACK_OBJECT_STR)
			fail("a refusal without its error");
		return 0;
	}
	if ((v = get(o, "cancelled"))) {
		if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 == 0)
			fail("a cancel that cancelled nothing");
		return 1;
	}
	if (!(v = get(o, "rows")) || v->type != MSGPACK_OBJECT_ARRAY)
		fail("a list without rows");
	for (uint32_t i = 0; i < v->via.array.size; i++)
		check_row(&v->via.array.ptr[i]);
	return 0;
}

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* One frame: its length, then one msgpack map and nothing after. */
static int check_answer(const msgpack_sbuffer *out)
{
	msgpack_unpacked u;
	size_t off = 0;
	int changed;

	if (out->size < 4 || be32((const uint8_t *)out->data) != out->size - 4 ||
	    out->size - 4 > PD_ADMIN_ANS_MAX)
		fail("an answer frame whose length is not its size");
	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, out->data + 4, out->size - 4, &off) !=
		    MSGPACK_UNPACK_SUCCESS || off != out->size - 4)
		fail("an answer that is not one msgpack object");
	changed = check_map(&u.data);
	msgpack_unpacked_destroy(&u);
	return changed;
}

/* ---- input ------------------------------------------------------------------------- */

/* The bytes a client writes on one connection: a frame, then whatever
 * follows (one exchange per connection: never read). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct admin_fx x;
	msgpack_sbuffer out = { 0 };
	char err[128];
	uint32_t len;

	if (!x.f.b)
		prepare(&x);
	len = size >= 4 ? pd_admin_frame_len(data) : 0;
	if (len == 0 || size - 4 < len)
		return 0; /* refused, or the broker waits for the rest until its deadline */
	if (pd_admin_answer(x.f.b, data + 4, len, &out, err, sizeof(err)) == 0 &&
	    check_answer(&out)) {
		teardown(&x);
		prepare(&x);
	}
	msgpack_sbuffer_destroy(&out);
	return 0;
}
