/* SPDX-License-Identifier: MIT */
/*
 * pdctl's JSON writer (RFC 8259): objects and arrays with the commas and
 * (optionally) indentation tracked per level, strings escaped, invalid
 * UTF-8 replaced by U+FFFD so the output is always valid JSON; and the
 * terminal-safe text writer tables use.
 */
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

static void put_escape(FILE *f, unsigned char c)
{
	switch (c) {
	case '"': fputs("\\\"", f); break;
	case '\\': fputs("\\\\", f); break;
	case '\b': fputs("\\b", f); break;
	case '\f': fputs("\\f", f); break;
	case '\n': fputs("\\n", f); break;
	case '\r': fputs("\\r", f); break;
	case '\t': fputs("\\t", f); break;
	default: fprintf(f, "\\u%04x", c); break;
	}
}

void pdctl_json_write_str(FILE *f, const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;

	fputc('"', f);
	while (i < len) {
		size_t n = pdctl_utf8_len(p + i, len - i);

		if (n == 0) {
			fputs("\\ufffd", f);
			i++;
		} else if (n == 1 && (p[i] < 0x20 || p[i] == '"' || p[i] == '\\' || p[i] == 0x7f)) {
			put_escape(f, p[i]);
			i++;
		} else {
			(void)fwrite(p + i, 1, n, f);
			i += n;
		}
	}
	fputc('"', f);
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

void pdctl_json_init(struct pdctl_json *j, FILE *f, int pretty)
{
	memset(j, 0, sizeof(*j));
	j->f = f;
	j->pretty = pretty;
}

static void indent(struct pdctl_json *j)
{
	if (!j->pretty)
		return;
	fputc('\n', j->f);
	for (int i = 0; i < j->depth; i++)
		fputs("  ", j->f);
}

/* Comma, newline and indentation before a member, then its key. */
static void member(struct pdctl_json *j, const char *key)
{
	int d = j->depth < PDCTL_JSON_DEPTH ? j->depth : PDCTL_JSON_DEPTH - 1;

	if (j->depth > 0) {
		if (j->count[d]++)
			fputc(',', j->f);
		indent(j);
	}
	if (key) {
		pdctl_json_write_str(j->f, key, strlen(key));
		fputs(j->pretty ? ": " : ":", j->f);
	}
}

static void open_level(struct pdctl_json *j, const char *key, char c)
{
	member(j, key);
	fputc(c, j->f);
	j->depth++;
	if (j->depth < PDCTL_JSON_DEPTH)
		j->count[j->depth] = 0;
}

static void close_level(struct pdctl_json *j, char c)
{
	int had = j->depth < PDCTL_JSON_DEPTH ? j->count[j->depth] : 1;

	j->depth--;
	if (had)
		indent(j);
	fputc(c, j->f);
}

void pdctl_json_obj_begin(struct pdctl_json *j, const char *key)
{
	open_level(j, key, '{');
}

void pdctl_json_obj_end(struct pdctl_json *j)
{
	close_level(j, '}');
}

void pdctl_json_arr_begin(struct pdctl_json *j, const char *key)
{
	open_level(j, key, '[');
}

void pdctl_json_arr_end(struct pdctl_json *j)
{
	close_level(j, ']');
}

void pdctl_json_strn(struct pdctl_json *j, const char *key, const char *s, size_t len)
{
	member(j, key);
	pdctl_json_write_str(j->f, s, len);
}

void pdctl_json_str(struct pdctl_json *j, const char *key, const char *s)
{
	pdctl_json_strn(j, key, s, strlen(s));
}

void pdctl_json_u64(struct pdctl_json *j, const char *key, uint64_t v)
{
	member(j, key);
	fprintf(j->f, "%" PRIu64, v);
}

void pdctl_json_i64(struct pdctl_json *j, const char *key, int64_t v)
{
	member(j, key);
	fprintf(j->f, "%" PRId64, v);
}

void pdctl_json_f64(struct pdctl_json *j, const char *key, double v)
{
	char buf[32];

	member(j, key);
	if (isfinite(v)) {
		/* The shortest of 15 or 17 digits that reads back as v. */
		(void)snprintf(buf, sizeof(buf), "%.15g", v);
		if (strtod(buf, NULL) != v)
			(void)snprintf(buf, sizeof(buf), "%.17g", v);
		fputs(buf, j->f);
	} else
		fputs("null", j->f); /* JSON has no NaN or infinities */
}

void pdctl_json_num(struct pdctl_json *j, const char *key, const char *num)
{
	member(j, key);
	fputs(num, j->f);
}

void pdctl_json_bool(struct pdctl_json *j, const char *key, int v)
{
	member(j, key);
	fputs(v ? "true" : "false", j->f);
}

void pdctl_json_null(struct pdctl_json *j, const char *key)
{
	member(j, key);
	fputs("null", j->f);
}

static void mp_value(struct pdctl_json *j, const char *key, const msgpack_object *o, int depth);

static void mp_map(struct pdctl_json *j, const char *key, const msgpack_object_map *m, int depth)
{
	char name[256];

	pdctl_json_obj_begin(j, key);
	for (uint32_t i = 0; i < m->size; i++) {
		const msgpack_object *k = &m->ptr[i].key;

		/* JSON keys are strings: a non-string key is shown by its type. */
		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size < sizeof(name)) {
			memcpy(name, k->via.str.ptr, k->via.str.size);
			name[k->via.str.size] = '\0';
		} else if (k->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
			(void)snprintf(name, sizeof(name), "%" PRIu64, k->via.u64);
		} else {
			(void)snprintf(name, sizeof(name), "?%u", i);
		}
		mp_value(j, name, &m->ptr[i].val, depth + 1);
	}
	pdctl_json_obj_end(j);
}

static void mp_value(struct pdctl_json *j, const char *key, const msgpack_object *o, int depth)
{
	if (depth >= MP_DEPTH) {
		pdctl_json_null(j, key);
		return;
	}
	switch (o->type) {
	case MSGPACK_OBJECT_BOOLEAN: pdctl_json_bool(j, key, o->via.boolean); break;
	case MSGPACK_OBJECT_POSITIVE_INTEGER: pdctl_json_u64(j, key, o->via.u64); break;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER: pdctl_json_i64(j, key, o->via.i64); break;
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64: pdctl_json_f64(j, key, o->via.f64); break;
	case MSGPACK_OBJECT_STR: pdctl_json_strn(j, key, o->via.str.ptr, o->via.str.size); break;
	case MSGPACK_OBJECT_BIN: pdctl_json_strn(j, key, o->via.bin.ptr, o->via.bin.size); break;
	case MSGPACK_OBJECT_ARRAY:
		pdctl_json_arr_begin(j, key);
		for (uint32_t i = 0; i < o->via.array.size; i++)
			mp_value(j, NULL, &o->via.array.ptr[i], depth + 1);
		pdctl_json_arr_end(j);
		break;
	case MSGPACK_OBJECT_MAP: mp_map(j, key, &o->via.map, depth); break;
	default: pdctl_json_null(j, key); break; /* nil, ext */
	}
}

void pdctl_json_mp(struct pdctl_json *j, const char *key, const msgpack_object *o)
{
	mp_value(j, key, o, 0);
}

void pdctl_json_end(struct pdctl_json *j)
{
	fputc('\n', j->f);
}
