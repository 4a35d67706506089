/* SPDX-License-Identifier: MIT */
/*
 * pdctl's JSON output: values built with jansson (which escapes, and keeps
 * the members in the order they were set), text from the segment or the
 * broker made valid UTF-8 first; and the terminal-safe text writer tables
 * use.
 */
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pdctl.h"

#define MP_DEPTH 16 /* msgpack nesting shown; deeper becomes null */

/* Length (1..4) of the valid UTF-8 sequence at s[0..len), 0 if invalid. */
size_t pdctl_utf8_len(const unsigned char *s, size_t len)
{
	uint32_t cp;
	size_t n;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2, cp = s[0] & 0x1fu;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, cp = s[0] & 0x0fu;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, cp = s[0] & 0x07u;
	else
		return 0;
	if (n > len)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3fu);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0; /* overlong, out of range, or a surrogate */
	return n;
}

static size_t text_walk(FILE *f, const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, cols = 0;

	while (i < len) {
		size_t n = pdctl_utf8_len(p + i, len - i);

		if (n == 0 || (n == 1 && (p[i] < 0x20 || p[i] == 0x7f)) ||
		    (n == 2 && p[i] == 0xc2 && p[i + 1] < 0xa0)) { /* C1 controls */
			if (f)
				(void)fputc('?', f);
			n = n ? n : 1;
		} else if (f) {
			(void)fwrite(p + i, 1, n, f);
		}
		i += n;
		cols++;
	}
	return cols;
}

size_t pdctl_text_write(FILE *f, const char *s, size_t len)
{
	return text_walk(f, s, len);
}

size_t pdctl_text_width(const char *s, size_t len)
{
	return text_walk(NULL, s, len);
}

/* s[0..len) with each byte of invalid UTF-8 replaced by U+FFFD (malloc'ed,
 * length in *n), so jansson takes it; NULL: out of memory. */
static char *utf8_clean(const char *s, size_t len, size_t *n)
{
	const unsigned char *p = (const unsigned char *)s;
	char *out = malloc(len * 3 + 1), *o = out;

	for (size_t i = 0; out && i < len;) {
		size_t k = pdctl_utf8_len(p + i, len - i);

		if (k == 0) {
			memcpy(o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		} else {
			memcpy(o, p + i, k);
			o += k;
			i += k;
		}
	}
	*n = out ? (size_t)(o - out) : 0;
	return out;
}

json_t *pdctl_json_strn(const char *s, size_t len)
{
	size_t n;
	char *clean = utf8_clean(s, len, &n);
	json_t *v = clean ? json_stringn_nocheck(clean, n) : NULL;

	free(clean);
	return v;
}

json_t *pdctl_json_str(const char *s)
{
	return pdctl_json_strn(s, strlen(s));
}

json_t *pdctl_json_u64(uint64_t v)
{
	/* jansson's integers are signed 64-bit: beyond, the nearest double. */
	return v <= INT64_MAX ? json_integer((json_int_t)v) : json_real((double)v);
}

json_t *pdctl_json_f64(double v)
{
	return isfinite(v) ? json_real(v) : json_null(); /* JSON has no NaN or infinities */
}

json_t *pdctl_json_num(const char *num)
{
	if (num[strspn(num, "0123456789")] == '\0')
		return pdctl_json_u64(strtoull(num, NULL, 10));
	return pdctl_json_f64(strtod(num, NULL));
}

int pdctl_json_setn(json_t *obj, const char *key, size_t klen, json_t *v)
{
	size_t n;
	char *clean = utf8_clean(key, klen, &n);
	int rc;

	if (!clean) {
		json_decref(v);
		return -ENOMEM;
	}
	/* Takes v, also when it fails; a NULL v (out of memory) fails. */
	rc = json_object_setn_new_nocheck(obj, clean, n, v) == 0 ? 0 : -ENOMEM;
	free(clean);
	return rc;
}

int pdctl_json_set(json_t *obj, const char *key, json_t *v)
{
	return pdctl_json_setn(obj, key, strlen(key), v);
}

static json_t *mp_value(const msgpack_object *o, int depth);

/* JSON keys are strings: a number key becomes its decimal, another its index. */
static int mp_member(json_t *obj, const msgpack_object_kv *kv, uint32_t i, int depth)
{
	const msgpack_object *k = &kv->key;
	char name[24];

	if (k->type == MSGPACK_OBJECT_STR)
		return pdctl_json_setn(obj, k->via.str.ptr, k->via.str.size,
				       mp_value(&kv->val, depth + 1));
	if (k->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
		(void)snprintf(name, sizeof(name), "%" PRIu64, k->via.u64);
	else
		(void)snprintf(name, sizeof(name), "?%" PRIu32, i);
	return pdctl_json_set(obj, name, mp_value(&kv->val, depth + 1));
}

static json_t *mp_map(const msgpack_object_map *m, int depth)
{
	json_t *obj = json_object();

	for (uint32_t i = 0; obj && i < m->size; i++) {
		if (mp_member(obj, &m->ptr[i], i, depth) < 0) {
			json_decref(obj);
			obj = NULL;
		}
	}
	return obj;
}

static json_t *mp_array(const msgpack_object_array *a, int depth)
{
	json_t *arr = json_array();

	for (uint32_t i = 0; arr && i < a->size; i++) {
		if (json_array_append_new(arr, mp_value(&a->ptr[i], depth + 1)) < 0) {
			json_decref(arr);
			arr = NULL;
		}
	}
	return arr;
}

static json_t *mp_value(const msgpack_object *o, int depth)
{
	if (depth >= MP_DEPTH)
		return json_null();
	switch (o->type) {
	case MSGPACK_OBJECT_BOOLEAN: return json_boolean(o->via.boolean);
	case MSGPACK_OBJECT_POSITIVE_INTEGER: return pdctl_json_u64(o->via.u64);
	case MSGPACK_OBJECT_NEGATIVE_INTEGER: return json_integer(o->via.i64);
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64: return pdctl_json_f64(o->via.f64);
	case MSGPACK_OBJECT_STR: return pdctl_json_strn(o->via.str.ptr, o->via.str.size);
	case MSGPACK_OBJECT_BIN: return pdctl_json_strn(o->via.bin.ptr, o->via.bin.size);
	case MSGPACK_OBJECT_ARRAY: return mp_array(&o->via.array, depth);
	case MSGPACK_OBJECT_MAP: return mp_map(&o->via.map, depth);
	default: return json_null(); /* nil, ext */
	}
}

json_t *pdctl_json_mp(const msgpack_object *o)
{
	return mp_value(o, 0);
}

int pdctl_json_print(json_t *doc, int pretty)
{
	/*
	 * jansson prints every real with one precision. 15 digits (DBL_DIG) print
	 * each decimal of up to 15 digits as itself, as the seconds (from
	 * nanoseconds) below 10^6 s are, where 17 would show the double's
	 * binary noise (0.0080023219999999992 for 0.008002322).
	 */
	size_t flags = (pretty ? JSON_INDENT(2) : JSON_COMPACT) | JSON_REAL_PRECISION(DBL_DIG);
	int rc = 0;

	if (!doc) {
		pdctl_err("out of memory");
		return -ENOMEM;
	}
	if (json_dumpf(doc, stdout, flags) < 0 || fputc('\n', stdout) == EOF)
		rc = -EIO; /* pdctl_flush() says why */
	json_decref(doc);
	return rc;
}
