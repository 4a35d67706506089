/* SPDX-License-Identifier: MIT */
/*
 * Decoder: pre-scan the raw bytes (pd_wire_scan.c), copy them into the
 * decoder, unpack with msgpack-c into a zone, then map the object tree onto
 * struct pd_msg by walking the message's field table. Strings point into
 * the copy; lists are allocated in the zone (at most PD_WIRE_MAX_KEYS
 * entries each, so never unbounded).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "pd_err.h"
#include "pd_wire_int.h"

/* What a decoder holds between decodes. */
struct dec_priv {
	msgpack_unpacked up;  /* owns the zone: object tree and decoded lists */
	uint8_t *raw;         /* copy of the message; strings point into it */
};

/* One decode. */
struct dctx {
	const struct pd_wire_spec *spec;
	struct pd_msg *m;
	msgpack_zone *zone;
	char *err;
	size_t errlen;
	uint32_t seen;                      /* bit i: fields[i] was present */
	uint32_t cnt[PD_WIRE_FIELDS_MAX];   /* entries of each list field */
};

/* Why a value does not fit its field. */
#define WHY_TYPE  "has the wrong type"
#define WHY_RANGE "is out of range"
#define WHY_LEN   "has a length out of range"
#define WHY_COUNT "has too few or too many entries"

static int field_fail(struct dctx *c, const struct pd_wire_field *f, const char *why)
{
	pd_err_set(c->err, c->errlen, "%s: field '%s' %s", c->spec->name, f->name, why);
	return -EPROTO;
}

static bool obj_is(const msgpack_object *o, const char *s)
{
	size_t n = strlen(s);

	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
	       memcmp(o->via.str.ptr, s, n) == 0;
}

/* Integer object within [min, max]; NULL or why not. */
static const char *get_int(const msgpack_object *o, int64_t min, int64_t max, int64_t *v)
{
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
		if (max < 0 || o->via.u64 > (uint64_t)max)
			return WHY_RANGE;
		*v = (int64_t)o->via.u64;
	} else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
		*v = o->via.i64;
	} else {
		return WHY_TYPE;
	}
	return *v < min ? WHY_RANGE : NULL;
}

static const char *get_u64(const msgpack_object *o, int64_t min, uint64_t *v)
{
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? WHY_RANGE : WHY_TYPE;
	*v = o->via.u64;
	return *v < (uint64_t)min ? WHY_RANGE : NULL;
}

static const char *get_bytes(const msgpack_object *o, int64_t min, int64_t max,
			     struct pd_bytes *b)
{
	if (o->type == MSGPACK_OBJECT_STR) {
		b->p = (const uint8_t *)o->via.str.ptr;
		b->len = o->via.str.size;
	} else if (o->type == MSGPACK_OBJECT_BIN) {
		b->p = (const uint8_t *)o->via.bin.ptr;
		b->len = o->via.bin.size;
	} else {
		return WHY_TYPE;
	}
	return b->len < min || b->len > max ? WHY_LEN : NULL;
}

/* Store one scalar or byte-string value of kind k at dst. */
static const char *get_value(const msgpack_object *o, uint8_t k, const struct pd_wire_field *f,
			     void *dst)
{
	const char *why = NULL;
	uint64_t u = 0;
	int64_t i = 0;
	uint32_t u32;
	int32_t i32;

	switch (k) {
	case PD_WF_BYTES:
		return get_bytes(o, f->min, f->max, dst);
	case PD_WF_U64:
		why = get_u64(o, f->min, &u);
		memcpy(dst, &u, sizeof(u));
		return why;
	case PD_WF_BOOL:
		if (o->type != MSGPACK_OBJECT_BOOLEAN)
			return WHY_TYPE;
		i = o->via.boolean ? 1 : 0;
		break;
	default:
		why = get_int(o, f->min, f->max, &i);
		break;
	}
	if (k == PD_WF_I32) {
		i32 = (int32_t)i;
		memcpy(dst, &i32, sizeof(i32));
	} else {
		u32 = (uint32_t)i;
		memcpy(dst, &u32, sizeof(u32));
	}
	return why;
}

/* A list: entries into zone memory (or the struct's inline array). */
static int get_list(struct dctx *c, const struct pd_wire_field *f, const msgpack_object *o,
		    uint32_t idx)
{
	size_t es = pd_wire_esize(f->kind);
	uint8_t *dst;
	const char *why;
	uint32_t n;

	if (o->type != MSGPACK_OBJECT_ARRAY)
		return field_fail(c, f, WHY_TYPE);
	n = o->via.array.size;
	if (n < f->nmin || n > f->nmax)
		return field_fail(c, f, WHY_COUNT);
	if (f->kind == PD_WF_NAMES) {
		dst = pd_wire_at(c->m, f->off);
	} else {
		/* At least one entry, so a present list is never NULL. */
		dst = msgpack_zone_malloc(c->zone, es * (n ? n : 1));
		if (!dst)
			return -ENOMEM;
		memcpy(pd_wire_at(c->m, f->off), &dst, sizeof(dst));
	}
	for (uint32_t i = 0; i < n; i++) {
		why = get_value(&o->via.array.ptr[i], pd_wire_ekind(f->kind), f, dst + i * es);
		if (why)
			return field_fail(c, f, why);
	}
	c->cnt[idx] = n;
	if (!(f->flags & PD_WF_SHARED))
		memcpy(pd_wire_at(c->m, f->aux), &n, sizeof(n));
	return 0;
}

static int get_field(struct dctx *c, uint32_t idx, const msgpack_object *o)
{
	const struct pd_wire_field *f = &c->spec->fields[idx];
	const uint32_t one = 1;
	const char *why;

	if (c->seen & (1u << idx))
		return field_fail(c, f, "is given twice");
	c->seen |= 1u << idx;
	if (f->kind == PD_WF_LMC)
		return 0;
	if (pd_wire_is_list(f->kind))
		return get_list(c, f, o, idx);
	why = get_value(o, f->kind, f, pd_wire_at(c->m, f->off));
	if (why)
		return field_fail(c, f, why);
	if (f->flags & PD_WF_PRES)
		memcpy(pd_wire_at(c->m, f->aux), &one, sizeof(one));
	return 0;
}

/* Match a map key to a field of the spec; -1 if unknown. */
static int find_field(const struct pd_wire_spec *s, const msgpack_object *key)
{
	for (uint32_t i = 0; i < s->nfields; i++) {
		if (obj_is(key, s->fields[i].name))
			return (int)i;
	}
	return -1;
}

static void set_defaults(const struct pd_wire_spec *s, struct pd_msg *m)
{
	for (uint32_t i = 0; i < s->nfields; i++) {
		const struct pd_wire_field *f = &s->fields[i];
		uint32_t v = (uint32_t)f->def;

		if (f->def != 0 && f->kind == PD_WF_U32)
			memcpy(pd_wire_at(m, f->off), &v, sizeof(v));
	}
}

/* After the fields: required ones present, shared counts agree, cross rules. */
static int finish(struct dctx *c)
{
	const struct pd_wire_spec *s = c->spec;
	const char *why;

	for (uint32_t i = 0; i < s->nfields; i++) {
		const struct pd_wire_field *f = &s->fields[i];
		bool seen = c->seen & (1u << i);

		if ((f->flags & PD_WF_REQ) && !seen)
			return field_fail(c, f, "missing");
		if ((f->flags & PD_WF_SHARED) && seen && c->cnt[i] != pd_wire_u32(c->m, f->aux))
			return field_fail(c, f, "has a different length than its sibling list");
	}
	why = s->check ? s->check(c->m) : NULL;
	if (why) {
		pd_err_set(c->err, c->errlen, "%s: %s", s->name, why);
		return -EPROTO;
	}
	return 0;
}

static int map_fields(struct dctx *c, const msgpack_object_map *map)
{
	int rc, idx;

	for (uint32_t i = 0; i < map->size; i++) {
		const msgpack_object_kv *kv = &map->ptr[i];

		if (obj_is(&kv->key, "type"))
			continue;
		idx = find_field(c->spec, &kv->key);
		if (idx < 0)
			continue;  /* unknown field: ignored */
		rc = get_field(c, (uint32_t)idx, &kv->val);
		if (rc < 0)
			return rc;
	}
	return finish(c);
}

/* Up to 32 bytes of a peer's string, non-printable ones as '?'. */
static const char *printable(const msgpack_object_str *s, char out[static 33])
{
	uint32_t n = s->size < 32 ? s->size : 32;

	for (uint32_t i = 0; i < n; i++)
		out[i] = s->ptr[i] >= 0x20 && s->ptr[i] < 0x7f ? s->ptr[i] : '?';
	out[n] = '\0';
	return out;
}

/* The spec the "type" entry names. */
static int find_type(const msgpack_object_map *map, const struct pd_wire_spec **spec, char *err,
		     size_t errlen)
{
	const msgpack_object *t = NULL;
	char name[33];

	for (uint32_t i = 0; i < map->size; i++) {
		if (!obj_is(&map->ptr[i].key, "type"))
			continue;
		if (t) {
			pd_err_set(err, errlen, "field 'type' is given twice");
			return -EPROTO;
		}
		t = &map->ptr[i].val;
	}
	if (!t || t->type != MSGPACK_OBJECT_STR) {
		pd_err_set(err, errlen, t ? "field 'type' is not a string" : "no field 'type'");
		return -EPROTO;
	}
	*spec = pd_wire_spec_named(t->via.str.ptr, t->via.str.size);
	if (!*spec) {
		pd_err_set(err, errlen, "unknown message type '%s'", printable(&t->via.str, name));
		return -EPROTO;
	}
	return 0;
}

static int to_msg(const msgpack_object *root, msgpack_zone *zone, struct pd_msg *out,
		  char *err, size_t errlen)
{
	struct dctx c = { .m = out, .zone = zone, .err = err, .errlen = errlen };
	int rc;

	if (root->type != MSGPACK_OBJECT_MAP) {
		pd_err_set(err, errlen, "top level is not a map");
		return -EPROTO;
	}
	rc = find_type(&root->via.map, &c.spec, err, errlen);
	if (rc < 0)
		return rc;
	out->type = c.spec->type;
	set_defaults(c.spec, out);
	return map_fields(&c, &root->via.map);
}

static void release(struct dec_priv *p)
{
	msgpack_unpacked_destroy(&p->up);
	free(p->raw);
	p->raw = NULL;
}

static int unpack(struct dec_priv *p, const void *buf, size_t len, char *err, size_t errlen)
{
	size_t off = 0;
	msgpack_unpack_return r;

	p->raw = malloc(len);
	if (!p->raw)
		return -ENOMEM;
	memcpy(p->raw, buf, len);
	r = msgpack_unpack_next(&p->up, (const char *)p->raw, len, &off);
	if (r == MSGPACK_UNPACK_NOMEM_ERROR)
		return -ENOMEM;
	if (r != MSGPACK_UNPACK_SUCCESS || off != len) {
		/* The pre-scan accepted it: msgpack-c and we disagree. */
		pd_err_set(err, errlen, "msgpack-c refused the message (%d)", (int)r);
		return -EPROTO;
	}
	/* msgpack-c creates the zone lazily: none for an empty map. */
	if (!p->up.zone)
		p->up.zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
	return p->up.zone ? 0 : -ENOMEM;
}

void pd_wire_dec_init(struct pd_wire_dec *d)
{
	if (d)
		d->priv = NULL;
}

void pd_wire_dec_fini(struct pd_wire_dec *d)
{
	if (!d || !d->priv)
		return;
	release(d->priv);
	free(d->priv);
	d->priv = NULL;
}

static struct dec_priv *priv_get(struct pd_wire_dec *d)
{
	struct dec_priv *p = d->priv;

	if (p) {
		release(p);
		return p;
	}
	p = calloc(1, sizeof(*p));
	if (p)
		msgpack_unpacked_init(&p->up);
	d->priv = p;
	return p;
}

int pd_wire_decode(struct pd_wire_dec *d, const void *buf, size_t len, struct pd_msg *out,
		   char *err, size_t errlen)
{
	struct dec_priv *p;
	int rc;

	if (!d || !buf || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	p = priv_get(d);
	if (!p)
		return -ENOMEM;
	rc = pd_wire_scan(buf, len, err, errlen);
	if (rc == 0)
		rc = unpack(p, buf, len, err, errlen);
	if (rc == 0)
		rc = to_msg(&p->up.data, p->up.zone, out, err, errlen);
	if (rc < 0) {
		release(p);
		memset(out, 0, sizeof(*out));
	}
	return rc;
}
