/* SPDX-License-Identifier: MIT */
/*
 * Encoder: check the message against its field table (the decoder's
 * bounds), then pack "type" and every field that is sent, in table order,
 * with msgpack-c's packer writing into a struct pd_wire_buf.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "pd_wire_int.h"

struct wctx {
	struct pd_wire_buf *b;
	int rc;  /* why the write callback failed */
};

static int buf_grow(struct pd_wire_buf *b, size_t need)
{
	size_t cap = b->cap ? b->cap : 256;
	uint8_t *p;

	while (cap < need)
		cap *= 2;
	if (cap > PD_WIRE_MAX_MSG)
		cap = PD_WIRE_MAX_MSG;
	p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

/* msgpack_packer_write: 0 or non-zero, the reason kept in w->rc. */
static int buf_write(void *data, const char *p, size_t n)
{
	struct wctx *w = data;
	struct pd_wire_buf *b = w->b;

	if (n == 0)
		return 0;
	if (n > PD_WIRE_MAX_MSG - b->len) {
		w->rc = -EMSGSIZE;
		return -1;
	}
	if (b->len + n > b->cap) {
		w->rc = buf_grow(b, b->len + n);
		if (w->rc < 0)
			return -1;
	}
	memcpy(b->data + b->len, p, n);
	b->len += n;
	return 0;
}

/* A U32, I32 or BOOL value at v, widened. */
static int64_t ival(const void *v, uint8_t kind)
{
	uint32_t u;
	int32_t i;

	if (kind == PD_WF_I32) {
		memcpy(&i, v, sizeof(i));
		return i;
	}
	memcpy(&u, v, sizeof(u));
	return u;
}

static uint64_t u64val(const void *v)
{
	uint64_t u;

	memcpy(&u, v, sizeof(u));
	return u;
}

static const void *ptrval(const struct pd_msg *m, uint16_t off)
{
	const void *p;

	memcpy(&p, pd_wire_cat(m, off), sizeof(p));
	return p;
}

/* Entries of a list field: inline, or behind its pointer. */
static const uint8_t *list_base(const struct pd_msg *m, const struct pd_wire_field *f)
{
	return f->kind == PD_WF_NAMES ? pd_wire_cat(m, f->off) : ptrval(m, f->off);
}

/* Is f on the wire for m? Optional fields are left out at their default. */
static bool sent(const struct pd_msg *m, const struct pd_wire_field *f)
{
	const struct pd_bytes *b;

	if ((f->flags & PD_WF_REQ) || f->kind == PD_WF_LMC)
		return true;
	if (f->flags & PD_WF_PRES)
		return pd_wire_u32(m, f->aux) != 0;
	switch (f->kind) {
	case PD_WF_BYTES:
		b = pd_wire_cat(m, f->off);
		return b->len != 0;
	case PD_WF_U64:
		return u64val(pd_wire_cat(m, f->off)) != (uint64_t)f->def;
	default:
		if (pd_wire_is_list(f->kind))
			return list_base(m, f) != NULL;
		return ival(pd_wire_cat(m, f->off), f->kind) != f->def;
	}
}

/* One scalar or byte string of kind k at v within the field's bounds? */
static bool value_ok(const void *v, uint8_t k, const struct pd_wire_field *f)
{
	const struct pd_bytes *b = v;
	int64_t i;

	switch (k) {
	case PD_WF_BYTES:
		return b->len >= f->min && b->len <= f->max && (b->p || b->len == 0);
	case PD_WF_U64:
		return u64val(v) >= (uint64_t)f->min;
	default:
		i = ival(v, k);
		return i >= f->min && i <= f->max;
	}
}

static bool list_ok(const struct pd_msg *m, const struct pd_wire_field *f)
{
	uint32_t n = pd_wire_u32(m, f->aux);
	const uint8_t *base = list_base(m, f);
	size_t es = pd_wire_esize(f->kind);

	if (n < f->nmin || n > f->nmax || (!base && n > 0))
		return false;
	for (uint32_t i = 0; i < n; i++) {
		if (!value_ok(base + i * es, pd_wire_ekind(f->kind), f))
			return false;
	}
	return true;
}

static bool msg_ok(const struct pd_wire_spec *s, const struct pd_msg *m)
{
	for (uint32_t i = 0; i < s->nfields; i++) {
		const struct pd_wire_field *f = &s->fields[i];

		if (f->kind == PD_WF_LMC || !sent(m, f))
			continue;
		/* Fields left out hold their default, which is in bounds. */
		if (pd_wire_is_list(f->kind) ? !list_ok(m, f) :
					       !value_ok(pd_wire_cat(m, f->off), f->kind, f))
			return false;
	}
	return !s->check || !s->check(m);
}

static int pack_bytes(msgpack_packer *pk, const struct pd_bytes *b, bool bin)
{
	if (bin)
		return msgpack_pack_bin_with_body(pk, b->p, b->len);
	return msgpack_pack_str_with_body(pk, b->p, b->len);
}

static int pack_value(msgpack_packer *pk, const void *v, uint8_t k,
		      const struct pd_wire_field *f)
{
	switch (k) {
	case PD_WF_BYTES:
		return pack_bytes(pk, v, f->flags & PD_WF_BIN);
	case PD_WF_U64:
		return msgpack_pack_uint64(pk, u64val(v));
	case PD_WF_BOOL:
		return ival(v, k) ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
	default:
		return msgpack_pack_int64(pk, ival(v, k));
	}
}

static int pack_list(msgpack_packer *pk, const struct pd_msg *m, const struct pd_wire_field *f)
{
	uint32_t n = pd_wire_u32(m, f->aux);
	const uint8_t *base = list_base(m, f);
	size_t es = pd_wire_esize(f->kind);
	int rc;

	rc = msgpack_pack_array(pk, n);
	for (uint32_t i = 0; i < n && rc == 0; i++)
		rc = pack_value(pk, base + i * es, pd_wire_ekind(f->kind), f);
	return rc;
}

static int pack_lmc(msgpack_packer *pk, int64_t what)
{
	if (what == PD_LMC_LIST)
		return msgpack_pack_array(pk, 0);
	if (what == PD_LMC_STR)
		return msgpack_pack_str(pk, 0);
	return msgpack_pack_uint32(pk, 0);
}

static int pack_field(msgpack_packer *pk, const struct pd_msg *m, const struct pd_wire_field *f)
{
	size_t n = strlen(f->name);
	int rc;

	rc = msgpack_pack_str_with_body(pk, f->name, n);
	if (rc)
		return rc;
	if (f->kind == PD_WF_LMC)
		return pack_lmc(pk, f->min);
	if (pd_wire_is_list(f->kind))
		return pack_list(pk, m, f);
	return pack_value(pk, pd_wire_cat(m, f->off), f->kind, f);
}

static int pack_msg(msgpack_packer *pk, const struct pd_wire_spec *s, const struct pd_msg *m)
{
	uint32_t n = 1;
	int rc;

	for (uint32_t i = 0; i < s->nfields; i++)
		n += sent(m, &s->fields[i]);
	rc = msgpack_pack_map(pk, n);
	if (!rc)
		rc = msgpack_pack_str_with_body(pk, "type", 4);
	if (!rc)
		rc = msgpack_pack_str_with_body(pk, s->name, strlen(s->name));
	for (uint32_t i = 0; i < s->nfields && !rc; i++) {
		if (sent(m, &s->fields[i]))
			rc = pack_field(pk, m, &s->fields[i]);
	}
	return rc;
}

int pd_wire_encode(const struct pd_msg *m, struct pd_wire_buf *b)
{
	const struct pd_wire_spec *s;
	struct wctx w = { .b = b, .rc = 0 };
	msgpack_packer pk;

	if (!m || !b)
		return -EINVAL;
	b->len = 0;
	s = pd_wire_spec_of(m->type);
	if (!s || !msg_ok(s, m))
		return -EINVAL;
	msgpack_packer_init(&pk, &w, buf_write);
	if (pack_msg(&pk, s, m) == 0)
		return 0;
	b->len = 0;
	return w.rc < 0 ? w.rc : -ENOMEM;
}
