/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_SUPPORT_PD_JSON_H
#define PD_TESTS_SUPPORT_PD_JSON_H

/*
 * A small strict JSON reader for tests (RFC 8259: objects, arrays, strings
 * with escapes, numbers, true/false/null; nesting at most 64): checks that
 * a tool's output is valid JSON and fetches values by path.
 *
 * Paths: dot-separated object keys and [i] array indices, e.g.
 * "requests_ok", "rows[0].pid", "pools.recv.free", "[2].name"; "" is the
 * top-level value.
 */
#include <stddef.h>

/* 0 when text is exactly one valid JSON value (surrounding whitespace
 * allowed); -EINVAL otherwise. */
int pd_json_valid(const char *text);

/* The number at path. 0; -ENOENT no such path; -EINVAL invalid JSON or not a number. */
int pd_json_get_num(const char *text, const char *path, double *out);

/* The string at path, unescaped into buf (NUL-terminated).
 * 0; -ENOENT; -EINVAL not a string; -ENOSPC buf too small. */
int pd_json_get_str(const char *text, const char *path, char *buf, size_t len);

/* true -> 1, false -> 0. -ENOENT; -EINVAL not a boolean. */
int pd_json_get_bool(const char *text, const char *path);

/* Elements of the array (or members of the object) at path, or -ENOENT / -EINVAL. */
int pd_json_count(const char *text, const char *path);

#endif
