/* SPDX-License-Identifier: MIT */
/*
 * The message table: every control message as a list of fields. Order in
 * a list is the order on the wire: LMCache's fields in LMCache's
 * declaration order first, pdkv's own after them (msgspec skips unknown
 * fields, so an LMCache peer or proxy decodes pdkv's messages).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pd_wire_int.h"

#define OFF(msg, fld) ((uint16_t)offsetof(struct pd_msg, u.msg.fld))

/* Scalar (U32, U64, I32, BOOL). */
#define F_VAL(n, k, fl, msg, fld, lo, hi, d) \
	{ .name = (n), .kind = (k), .flags = (fl), .off = OFF(msg, fld), \
	  .min = (lo), .max = (hi), .def = (d) }
/* Optional scalar present iff msg.pres != 0. */
#define F_PRES(n, k, msg, fld, pres, lo, hi, d) \
	{ .name = (n), .kind = (k), .flags = PD_WF_PRES, .off = OFF(msg, fld), \
	  .aux = OFF(msg, pres), .min = (lo), .max = (hi), .def = (d) }
/* Byte string of lo..hi bytes. */
#define F_BYTES(n, fl, msg, fld, lo, hi) \
	{ .name = (n), .kind = PD_WF_BYTES, .flags = (fl), .off = OFF(msg, fld), \
	  .min = (lo), .max = (hi) }
/* List of nlo..nhi entries counted by msg.cnt, each in lo..hi. */
#define F_LIST(n, k, fl, msg, fld, cnt, nlo, nhi, lo, hi) \
	{ .name = (n), .kind = (k), .flags = (fl), .off = OFF(msg, fld), \
	  .aux = OFF(msg, cnt), .nmin = (nlo), .nmax = (nhi), .min = (lo), .max = (hi) }
/* LMCache field pdkv does not model. */
#define F_LMC(n, what) { .name = (n), .kind = PD_WF_LMC, .min = (what) }

#define FIELDS(arr, ...) \
	static const struct pd_wire_field arr[] = { __VA_ARGS__ }; \
	_Static_assert(sizeof(arr) / sizeof(arr[0]) <= PD_WIRE_FIELDS_MAX, #arr " too long")

#define REQ    PD_WF_REQ
#define ERRMIN (-4095)
#define KEYS   ((uint16_t)PD_WIRE_MAX_KEYS)

/* Hello and HelloAck share these; each adds one field of its own. */
#define HELLO_COMMON \
	F_VAL("proto", PD_WF_U32, REQ, hello, proto, 1, UINT32_MAX, 0), \
	F_BYTES("name", REQ, hello, name, 1, PD_WIRE_NAME_MAX), \
	F_VAL("epoch", PD_WF_U64, REQ, hello, epoch, 0, 0, 0), \
	F_BYTES("host_id", REQ, hello, host_id, 1, PD_WIRE_NAME_MAX), \
	F_VAL("slot_size", PD_WF_U64, REQ, hello, slot_size, 1, 0, 0), \
	F_VAL("recv_slots", PD_WF_U32, REQ, hello, recv_slots, 0, UINT32_MAX, 0), \
	F_LIST("xports", PD_WF_NAMES, REQ, hello, xport, nxports, 1, PD_WIRE_MAX_XPORTS, \
	       1, PD_WIRE_NAME_MAX), \
	F_LIST("addrs", PD_WF_NAMES, REQ | PD_WF_SHARED, hello, addr, nxports, 1, \
	       PD_WIRE_MAX_XPORTS, 0, PD_WIRE_ADDR_MAX), \
	F_BYTES("rdma_gid", PD_WF_BIN, hello, rdma_gid, 0, 16), \
	F_VAL("rdma_qpn", PD_WF_U32, 0, hello, rdma_qpn, 0, 0xffffff, 0), \
	F_VAL("rdma_rkey", PD_WF_U32, 0, hello, rdma_rkey, 0, UINT32_MAX, 0), \
	F_VAL("rdma_base", PD_WF_U64, 0, hello, rdma_base, 0, 0, 0)

FIELDS(hello_fields, HELLO_COMMON,
	F_VAL("resume", PD_WF_U64, 0, hello, resume, 0, 0, 0));

FIELDS(hello_ack_fields, HELLO_COMMON,
	F_VAL("data_secret", PD_WF_U64, 0, hello, data_secret, 0, 0, 0));

FIELDS(alloc_req_fields,
	F_LIST("keys", PD_WF_KEYS, REQ, alloc_req, keys, nkeys, 0, KEYS, 1, PD_KEY_MAX),
	F_LMC("fmt", PD_LMC_INT),
	F_LMC("shape", PD_LMC_LIST),
	F_LMC("dtype", PD_LMC_STR),
	F_LMC("last_chunk_toks", PD_LMC_INT),
	F_BYTES("req_id", REQ, alloc_req, req_id, 0, PD_REQ_ID_MAX),
	F_VAL("is_last_batch", PD_WF_BOOL, REQ, alloc_req, is_last_batch, 0, 1, 0),
	F_VAL("total_chunks", PD_WF_U32, REQ, alloc_req, total_chunks, 0, UINT32_MAX, 0),
	F_PRES("seq", PD_WF_U64, alloc_req, seq, has_seq, 0, 0, 0),
	F_LIST("lens", PD_WF_U32S, PD_WF_SHARED, alloc_req, lens, nkeys, 0, KEYS, 0,
	       UINT32_MAX),
	F_VAL("world_size", PD_WF_U32, 0, alloc_req, world_size, 1, UINT32_MAX, 1),
	F_VAL("rank", PD_WF_U32, 0, alloc_req, rank, 0, UINT32_MAX, 0));

FIELDS(alloc_resp_fields,
	F_LIST("remote_indexes", PD_WF_I32S, REQ, alloc_resp, remote_indexes, n, 0, KEYS, -1,
	       INT32_MAX),
	F_LIST("already_sent_indexes", PD_WF_I32S, REQ, alloc_resp, already_sent_indexes,
	       nalready, 0, KEYS, 0, PD_WIRE_MAX_KEYS - 1),
	F_PRES("seq", PD_WF_U64, alloc_resp, seq, has_seq, 0, 0, 0),
	F_VAL("err", PD_WF_I32, 0, alloc_resp, err, ERRMIN, 0, 0),
	F_BYTES("errmsg", 0, alloc_resp, errmsg, 0, PD_WIRE_ADDR_MAX),
	F_LIST("remote_gens", PD_WF_U32S, PD_WF_SHARED, alloc_resp, remote_gens, n, 0, KEYS, 0,
	       UINT32_MAX));

FIELDS(put_done_fields,
	F_VAL("seq", PD_WF_U64, REQ, put_done, seq, 0, 0, 0),
	F_BYTES("req_id", REQ, put_done, req_id, 0, PD_REQ_ID_MAX),
	F_VAL("rank", PD_WF_U32, REQ, put_done, rank, 0, UINT32_MAX, 0),
	F_LIST("indexes", PD_WF_I32S, REQ, put_done, indexes, n, 0, KEYS, 0, INT32_MAX),
	F_LIST("gens", PD_WF_U32S, PD_WF_SHARED, put_done, gens, n, 0, KEYS, 0, UINT32_MAX),
	F_LIST("keys", PD_WF_KEYS, PD_WF_SHARED, put_done, keys, n, 0, KEYS, 1, PD_KEY_MAX),
	F_LIST("lens", PD_WF_U32S, PD_WF_SHARED, put_done, lens, n, 0, KEYS, 0, UINT32_MAX));

FIELDS(cancel_fields,
	F_BYTES("req_id", REQ, cancel, req_id, 0, PD_REQ_ID_MAX),
	F_LIST("keys", PD_WF_KEYS, REQ, cancel, keys, nkeys, 0, KEYS, 1, PD_KEY_MAX),
	F_VAL("rank", PD_WF_U32, 0, cancel, rank, 0, UINT32_MAX, 0));

FIELDS(proxy_fields,
	F_BYTES("req_id", REQ, proxy, req_id, 0, PD_REQ_ID_MAX),
	F_PRES("status", PD_WF_I32, proxy, status, has_ext, ERRMIN, 0, 0),
	F_PRES("rank", PD_WF_U32, proxy, rank, has_ext, 0, UINT32_MAX, 0),
	F_PRES("world_size", PD_WF_U32, proxy, world_size, has_ext, 1, UINT32_MAX, 1),
	F_PRES("chunks", PD_WF_U32, proxy, chunks, has_ext, 0, UINT32_MAX, 0),
	F_PRES("bytes", PD_WF_U64, proxy, bytes, has_ext, 0, 0, 0));

FIELDS(heartbeat_fields,
	F_VAL("epoch", PD_WF_U64, REQ, heartbeat, epoch, 0, 0, 0),
	F_VAL("time_ns", PD_WF_U64, REQ, heartbeat, time_ns, 0, 0, 0),
	F_PRES("bye", PD_WF_BOOL, heartbeat, bye, has_bye, 0, 1, 0));

FIELDS(error_fields,
	F_VAL("seq", PD_WF_U64, 0, error, seq, 0, 0, 0),
	F_VAL("code", PD_WF_I32, REQ, error, code, ERRMIN, -1, 0),
	F_BYTES("text", 0, error, text, 0, PD_WIRE_ADDR_MAX));

FIELDS(reserve_fields,
	F_VAL("seq", PD_WF_U64, REQ, reserve, seq, 0, 0, 0),
	F_BYTES("req_id", REQ, reserve, req_id, 1, PD_REQ_ID_MAX),
	F_VAL("total_chunks", PD_WF_U32, REQ, reserve, total_chunks, 1, UINT32_MAX, 0),
	F_VAL("world_size", PD_WF_U32, REQ, reserve, world_size, 1, UINT32_MAX, 0),
	F_VAL("rank", PD_WF_U32, REQ, reserve, rank, 0, UINT32_MAX, 0),
	F_VAL("grants", PD_WF_U32, 0, reserve, grants, 0, KEYS, 0));

static const char *check_hello(const struct pd_msg *m)
{
	uint32_t n = m->u.hello.rdma_gid.len;

	return n == 0 || n == 16 ? NULL : "rdma_gid must be 16 bytes";
}

static const char *check_alloc_req(const struct pd_msg *m)
{
	const struct pd_msg_alloc_req *r = &m->u.alloc_req;

	return r->rank < r->world_size ? NULL : "rank must be below world_size";
}

static const char *check_put_done(const struct pd_msg *m)
{
	const struct pd_msg_put_done *d = &m->u.put_done;

	return !d->keys == !d->lens ? NULL : "keys and lens come together";
}

static const char *check_reserve(const struct pd_msg *m)
{
	const struct pd_msg_reserve *r = &m->u.reserve;

	if (r->grants > r->total_chunks)
		return "grants must not exceed total_chunks";
	return r->rank < r->world_size ? NULL : "rank must be below world_size";
}

static const char *check_proxy(const struct pd_msg *m)
{
	const struct pd_msg_proxy *p = &m->u.proxy;

	if (!p->has_ext || p->rank < p->world_size)
		return NULL;
	return "rank must be below world_size";
}

#define SPEC(n, t, f, c) \
	{ .name = (n), .type = (t), .nfields = sizeof(f) / sizeof(f[0]), .fields = (f), \
	  .check = (c) }

/* Indexed by PD_MSG_* - 1. */
static const struct pd_wire_spec specs[] = {
	SPEC("Hello", PD_MSG_HELLO, hello_fields, check_hello),
	SPEC("HelloAck", PD_MSG_HELLO_ACK, hello_ack_fields, check_hello),
	SPEC("AllocRequest", PD_MSG_ALLOC_REQ, alloc_req_fields, check_alloc_req),
	SPEC("AllocResponse", PD_MSG_ALLOC_RESP, alloc_resp_fields, NULL),
	SPEC("PutDone", PD_MSG_PUT_DONE, put_done_fields, check_put_done),
	SPEC("CancelNotif", PD_MSG_CANCEL, cancel_fields, NULL),
	SPEC("ProxyNotif", PD_MSG_PROXY, proxy_fields, check_proxy),
	SPEC("Heartbeat", PD_MSG_HEARTBEAT, heartbeat_fields, NULL),
	SPEC("Error", PD_MSG_ERROR, error_fields, NULL),
	SPEC("Reserve", PD_MSG_RESERVE, reserve_fields, check_reserve),
};
_Static_assert(sizeof(specs) / sizeof(specs[0]) == PD_MSG_MAX, "one spec per message type");

const struct pd_wire_spec *pd_wire_spec_of(uint32_t type)
{
	if (type < 1 || type > PD_MSG_MAX)
		return NULL;
	return &specs[type - 1];
}

const struct pd_wire_spec *pd_wire_spec_named(const void *name, size_t len)
{
	for (size_t i = 0; i < PD_MSG_MAX; i++) {
		if (strlen(specs[i].name) == len && memcmp(specs[i].name, name, len) == 0)
			return &specs[i];
	}
	return NULL;
}

const char *pd_wire_type_name(uint32_t type)
{
	const struct pd_wire_spec *s = pd_wire_spec_of(type);

	return s ? s->name : NULL;
}

void pd_wire_buf_init(struct pd_wire_buf *b)
{
	if (!b)
		return;
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

void pd_wire_buf_fini(struct pd_wire_buf *b)
{
	if (!b)
		return;
	free(b->data);
	pd_wire_buf_init(b);
}
