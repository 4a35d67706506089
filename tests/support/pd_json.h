/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_SUPPORT_PD_JSON_H
#define PD_TESTS_SUPPORT_PD_JSON_H

/*
 * The tests' JSON reader, a thin layer over jansson: checks that a tool's
 * output is valid JSON and fetches values by path. The text is parsed
 * strictly (RFC 8259; any value at the top, nothing after it; a
 * duplicated object key, a lone surrogate or invalid UTF-8 make it
 * invalid) on every call.
 *
 * Paths: dot-separated object keys and [i] array indices, e.g.
 * "requests_ok", "rows[0].pid", "pools.recv.free", "[2].name"; "" is the
 * top-level value. A key holding '.' or '[' cannot be named.
 *
 * Header only, so that only the programs that read JSON link jansson (the
 * benches and the RDMA guest programs link the support objects, not the
 * test libraries).
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include <jansson.h>

/* Any value at the top; integers beyond 64 bits read as numbers (a double,
 * as every getter returns); "\u0000" is valid JSON. */
#define PD_JSON_LOAD_FLAGS \
	(JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL)

static inline json_t *pd_json_load(const char *text)
{
	json_error_t e;

	return text ? json_loads(text, PD_JSON_LOAD_FLAGS, &e) : NULL;
}

/* "[N]" at *path into *out, advancing; -EINVAL for anything else. */
static inline int pd_json_path_index(const char **path, size_t *out)
{
	const char *s = *path + 1;
	size_t v = 0;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	while (*s >= '0' && *s <= '9') {
		if (v > 100000000u)
			return -EINVAL;
		v = v * 10 + (size_t)(*s++ - '0');
	}
	if (*s != ']')
		return -EINVAL;
	*path = s + 1;
	*out = v;
	return 0;
}

/* From *v by one segment of the path at *path: "[N]", or a key (after a
 * '.' unless it opens the path). */
static inline int pd_json_path_step(json_t **v, const char **path, int first)
{
	const char *p = *path;
	size_t i, klen;

	if (*p == '[') {
		if (pd_json_path_index(&p, &i) < 0)
			return -EINVAL;
		*v = json_array_get(*v, i); /* NULL: not an array, or too short */
	} else {
		if (!first && *p++ != '.')
			return -EINVAL;
		klen = strcspn(p, ".[");
		if (klen == 0)
			return -EINVAL;
		*v = json_object_getn(*v, p, klen); /* NULL: not an object, or no such key */
		p += klen;
	}
	*path = p;
	return *v ? 0 : -ENOENT;
}

/* The value at path in the parsed *root (which the caller json_decref()s). */
static inline int pd_json_find(const char *text, const char *path, json_t **root,
			       json_t **out)
{
	json_t *v;
	int rc = 0;

	*root = NULL;
	if (!path)
		return -EINVAL;
	v = *root = pd_json_load(text);
	if (!v)
		return -EINVAL;
	for (int first = 1; *path && rc == 0; first = 0)
		rc = pd_json_path_step(&v, &path, first);
	*out = v;
	return rc;
}

/* 0 when text is exactly one valid JSON value (surrounding whitespace
 * allowed); -EINVAL otherwise. */
static inline int pd_json_valid(const char *text)
{
	json_t *root = pd_json_load(text);

	json_decref(root);
	return root ? 0 : -EINVAL;
}

/* The number at path. 0; -ENOENT no such path; -EINVAL invalid JSON or path,
 * or not a number. */
static inline int pd_json_get_num(const char *text, const char *path, double *out)
{
	json_t *root, *v;
	int rc = pd_json_find(text, path, &root, &v);

	if (rc == 0 && !json_is_number(v))
		rc = -EINVAL;
	if (rc == 0 && out)
		*out = json_number_value(v);
	json_decref(root);
	return rc;
}

/* The string at path, unescaped into buf (NUL-terminated).
 * 0; -ENOENT; -EINVAL not a string; -ENOSPC buf too small. */
static inline int pd_json_get_str(const char *text, const char *path, char *buf, size_t len)
{
	json_t *root, *v;
	int rc = pd_json_find(text, path, &root, &v);

	if (rc == 0 && !json_is_string(v))
		rc = -EINVAL;
	if (rc == 0 && (!buf || json_string_length(v) >= len))
		rc = -ENOSPC;
	if (rc == 0) /* a "\u0000" inside ends the C string early */
		memcpy(buf, json_string_value(v), json_string_length(v) + 1);
	json_decref(root);
	return rc;
}

/* true -> 1, false -> 0. -ENOENT; -EINVAL not a boolean. */
static inline int pd_json_get_bool(const char *text, const char *path)
{
	json_t *root, *v;
	int rc = pd_json_find(text, path, &root, &v);

	if (rc == 0)
		rc = json_is_boolean(v) ? json_is_true(v) : -EINVAL;
	json_decref(root);
	return rc;
}

/* Elements of the array (or members of the object) at path, or -ENOENT / -EINVAL. */
static inline int pd_json_count(const char *text, const char *path)
{
	json_t *root, *v;
	int rc = pd_json_find(text, path, &root, &v);

	if (rc == 0 && json_is_array(v))
		rc = (int)json_array_size(v);
	else if (rc == 0 && json_is_object(v))
		rc = (int)json_object_size(v);
	else if (rc == 0)
		rc = -EINVAL;
	json_decref(root);
	return rc;
}

#endif
