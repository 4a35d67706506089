/* SPDX-License-Identifier: MIT */
/*
 * A small strict JSON reader (pd_json.h): recursive descent over the text,
 * no allocation. Every entry point first checks that the whole text is one
 * valid JSON value (RFC 8259, UTF-8, nesting at most JSON_MAX_DEPTH), then
 * walks the path over the (now known good) text.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pd_json.h"

#define JSON_MAX_DEPTH 64

struct jp {
	const char *p;   /* next unread byte */
	int depth;       /* containers open */
};

static int parse_value(struct jp *j);

static void skip_ws(struct jp *j)
{
	while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')
		j->p++;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Four hex digits at s; -1 when they are not. */
static int32_t hex4(const char *s)
{
	int32_t v = 0;

	for (int i = 0; i < 4; i++) {
		int h = hexval(s[i]);

		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

/* Length of the well-formed UTF-8 sequence at s (lead byte >= 0x80), or 0. */
static int utf8_len(const unsigned char *s)
{
	uint32_t cp, min;
	int n;

	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2, cp = s[0] & 0x1fu, min = 0x80;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3, cp = s[0] & 0x0fu, min = 0x800;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4, cp = s[0] & 0x07u, min = 0x10000;
	} else {
		return 0;
	}
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xc0u) != 0x80u)
			return 0; /* also stops at the NUL terminator */
		cp = (cp << 6) | (s[i] & 0x3fu);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

/* cp as UTF-8 into out; bytes written. */
static int utf8_put(int32_t cp, char out[4])
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* A \uXXXX escape at *s (on the backslash), with its low surrogate if one
 * follows; advances. A lone surrogate decodes to U+FFFD. */
static int str_unicode(const char **s, char out[4])
{
	int32_t cp = hex4(*s + 2);

	if (cp < 0)
		return -EINVAL;
	*s += 6;
	if (cp >= 0xd800 && cp <= 0xdbff && (*s)[0] == '\\' && (*s)[1] == 'u') {
		int32_t lo = hex4(*s + 2);

		if (lo >= 0xdc00 && lo <= 0xdfff) {
			cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			*s += 6;
		}
	}
	if (cp >= 0xd800 && cp <= 0xdfff)
		cp = 0xfffd; /* unpaired surrogate: valid JSON, not a character */
	return utf8_put(cp, out);
}

/* The character a one-letter escape stands for, or -1. */
static int str_escape(char c)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *p = c ? strchr(from, c) : NULL;

	return p ? to[p - from] : -1;
}

/*
 * Decode one character of the string body at *s into out (UTF-8, 1..4
 * bytes) and advance. @return bytes written; 0 at the closing quote;
 * -EINVAL malformed.
 */
static int str_next(const char **s, char out[4])
{
	const unsigned char *u = (const unsigned char *)*s;
	int n;

	if (*u == '"')
		return 0;
	if (*u < 0x20)
		return -EINVAL; /* control characters (and the terminator) */
	if (*u >= 0x80) {
		n = utf8_len(u);
		if (n == 0)
			return -EINVAL;
		memcpy(out, u, (size_t)n);
		*s += n;
		return n;
	}
	if (*u != '\\') {
		out[0] = (char)*u;
		*s += 1;
		return 1;
	}
	if (u[1] == 'u')
		return str_unicode(s, out);
	n = str_escape((char)u[1]);
	if (n < 0)
		return -EINVAL;
	out[0] = (char)n;
	*s += 2;
	return 1;
}

/* A string at j->p (on its opening quote). */
static int parse_string(struct jp *j)
{
	const char *s = j->p + 1;
	char tmp[4];
	int n;

	while ((n = str_next(&s, tmp)) > 0)
		;
	if (n < 0)
		return n;
	j->p = s + 1;
	return 0;
}

static int digits(struct jp *j)
{
	const char *start = j->p;

	while (*j->p >= '0' && *j->p <= '9')
		j->p++;
	return j->p > start ? 0 : -EINVAL;
}

/* -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)? */
static int parse_number(struct jp *j)
{
	if (*j->p == '-')
		j->p++;
	if (*j->p == '0')
		j->p++;
	else if (digits(j) < 0)
		return -EINVAL;
	if (*j->p == '.') {
		j->p++;
		if (digits(j) < 0)
			return -EINVAL;
	}
	if (*j->p == 'e' || *j->p == 'E') {
		j->p++;
		if (*j->p == '+' || *j->p == '-')
			j->p++;
		if (digits(j) < 0)
			return -EINVAL;
	}
	return 0;
}

static int parse_word(struct jp *j, const char *w)
{
	size_t n = strlen(w);

	if (strncmp(j->p, w, n) != 0)
		return -EINVAL;
	j->p += n;
	return 0;
}

/*
 * The members of an object or elements of an array at j->p (on '{' or '[').
 * Calls each(ctx, key_or_NULL, value_start) before every value when each
 * is not NULL; a non-zero return from each stops the walk and is returned
 * (with j->p on the value). @return 0 parsed to the end; -EINVAL.
 */
typedef int json_each_fn(void *ctx, const char *key, const char *value);

static int parse_container(struct jp *j, json_each_fn *each, void *ctx)
{
	char close = *j->p == '{' ? '}' : ']';
	int rc;

	if (++j->depth > JSON_MAX_DEPTH)
		return -EINVAL;
	j->p++;
	skip_ws(j);
	if (*j->p == close) {
		j->p++;
		j->depth--;
		return 0;
	}
	for (;;) {
		const char *key = NULL;

		if (close == '}') {
			if (*j->p != '"')
				return -EINVAL;
			key = j->p;
			rc = parse_string(j);
			if (rc < 0)
				return rc;
			skip_ws(j);
			if (*j->p++ != ':')
				return -EINVAL;
			skip_ws(j);
		}
		if (each && (rc = each(ctx, key, j->p)) != 0)
			return rc;
		rc = parse_value(j);
		if (rc < 0)
			return rc;
		skip_ws(j);
		if (*j->p == ',') {
			j->p++;
			skip_ws(j);
			continue;
		}
		if (*j->p++ != close)
			return -EINVAL;
		j->depth--;
		return 0;
	}
}

/* One value at j->p (no leading whitespace); j->p ends after it. */
static int parse_value(struct jp *j)
{
	switch (*j->p) {
	case '{':
	case '[':
		return parse_container(j, NULL, NULL);
	case '"':
		return parse_string(j);
	case 't':
		return parse_word(j, "true");
	case 'f':
		return parse_word(j, "false");
	case 'n':
		return parse_word(j, "null");
	default:
		if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9'))
			return parse_number(j);
		return -EINVAL;
	}
}

int pd_json_valid(const char *text)
{
	struct jp j = { .p = text, .depth = 0 };

	if (!text)
		return -EINVAL;
	skip_ws(&j);
	if (parse_value(&j) < 0)
		return -EINVAL;
	skip_ws(&j);
	return *j.p == '\0' ? 0 : -EINVAL;
}

/* ---- paths -------------------------------------------------------------------- */

/* Does the JSON string at s (on its quote) decode to exactly key[0..len)? */
static int key_equals(const char *s, const char *key, size_t len)
{
	size_t at = 0;
	char tmp[4];
	int n;

	s++;
	while ((n = str_next(&s, tmp)) > 0) {
		if (at + (size_t)n > len || memcmp(key + at, tmp, (size_t)n) != 0)
			return 0;
		at += (size_t)n;
	}
	return n == 0 && at == len;
}

/* What a walk of one container looks for: a key, or an index. */
struct seek {
	const char *key;  /* NULL: look for index */
	size_t klen;
	long index;       /* counts down to 0 */
	const char *found;
};

static int seek_each(void *ctx, const char *key, const char *value)
{
	struct seek *k = ctx;

	if (k->key ? (key && key_equals(key, k->key, k->klen)) : (!key && k->index-- == 0)) {
		k->found = value;
		return 1;
	}
	return 0;
}

/* Parse "[N]" at *path; -EINVAL for anything else. */
static int path_index(const char **path, long *out)
{
	const char *s = *path + 1;
	long v = 0;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	while (*s >= '0' && *s <= '9') {
		if (v > 100000000L)
			return -EINVAL;
		v = v * 10 + (*s++ - '0');
	}
	if (*s != ']')
		return -EINVAL;
	*path = s + 1;
	*out = v;
	return 0;
}

/* Step from the value at *v by one path segment at *path. */
static int path_step(const char **v, const char **path)
{
	struct seek k = { .key = NULL };
	struct jp j = { .p = *v, .depth = 0 };
	const char *p = *path;

	if (*p == '[') {
		if (path_index(&p, &k.index) < 0)
			return -EINVAL;
		if (**v != '[')
			return -ENOENT;
	} else {
		if (*p == '.')
			p++;
		k.key = p;
		k.klen = strcspn(p, ".[");
		if (k.klen == 0)
			return -EINVAL;
		p += k.klen;
		if (**v != '{')
			return -ENOENT;
	}
	if (parse_container(&j, seek_each, &k) != 1)
		return -ENOENT;
	*v = k.found;
	*path = p;
	return 0;
}

/* The start of the value at path in a valid text. */
static int json_find(const char *text, const char *path, const char **out)
{
	struct jp j = { .p = text };
	int rc;

	if (!path || pd_json_valid(text) < 0)
		return -EINVAL;
	skip_ws(&j);
	if (*path == '.')
		return -EINVAL; /* a path starts with a key or an index */
	while (*path) {
		if (*path == '.' && (path[1] == '\0' || path[1] == '.' || path[1] == '['))
			return -EINVAL;
		rc = path_step(&j.p, &path);
		if (rc < 0)
			return rc;
	}
	*out = j.p;
	return 0;
}

int pd_json_get_num(const char *text, const char *path, double *out)
{
	const char *v;
	int rc = json_find(text, path, &v);

	if (rc < 0)
		return rc;
	if (*v != '-' && (*v < '0' || *v > '9'))
		return -EINVAL;
	if (out)
		*out = strtod(v, NULL); /* the number's syntax is checked: a subset of strtod's */
	return 0;
}

int pd_json_get_str(const char *text, const char *path, char *buf, size_t len)
{
	const char *v;
	size_t at = 0;
	char tmp[4];
	int n, rc = json_find(text, path, &v);

	if (rc < 0)
		return rc;
	if (*v != '"')
		return -EINVAL;
	v++;
	while ((n = str_next(&v, tmp)) > 0) {
		if (!buf || at + (size_t)n >= len)
			return -ENOSPC;
		memcpy(buf + at, tmp, (size_t)n);
		at += (size_t)n;
	}
	if (!buf || len == 0)
		return -ENOSPC;
	buf[at] = '\0';
	return 0;
}

int pd_json_get_bool(const char *text, const char *path)
{
	const char *v;
	int rc = json_find(text, path, &v);

	if (rc < 0)
		return rc;
	if (strncmp(v, "true", 4) == 0)
		return 1;
	if (strncmp(v, "false", 5) == 0)
		return 0;
	return -EINVAL;
}

static int count_each(void *ctx, const char *key, const char *value)
{
	(void)key;
	(void)value;
	(*(int *)ctx)++;
	return 0;
}

int pd_json_count(const char *text, const char *path)
{
	struct jp j = { .depth = 0 };
	int n = 0, rc = json_find(text, path, &j.p);

	if (rc < 0)
		return rc;
	if (*j.p != '{' && *j.p != '[')
		return -EINVAL;
	rc = parse_container(&j, count_each, &n);
	return rc < 0 ? rc : n;
}
