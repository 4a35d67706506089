/* SPDX-License-Identifier: MIT */
/*
 * pdctl agents | requests [--state S] | peers | cancel REQ_ID: ask the
 * admin socket, print the rows as an aligned table (columns: the row keys,
 * in order) or as {"rows": [...]}.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "pd_admin_proto.h"
#include "pdctl.h"

#define MAX_COLS 32

struct table {
	const msgpack_object *rows;
	uint32_t nrows;
	const char *col[MAX_COLS];   /* keys of the first row (in the answer buffer) */
	uint32_t collen[MAX_COLS];
	size_t width[MAX_COLS];
	int numeric[MAX_COLS];       /* every cell an integer: right-aligned */
	uint32_t ncols;
};

/* A cell as text: a pointer to its bytes (a string) or into buf. */
static const char *cell_text(const msgpack_object *v, char *buf, size_t len, size_t *n)
{
	if (!v) {
		(void)snprintf(buf, len, "-");
	} else if (v->type == MSGPACK_OBJECT_STR || v->type == MSGPACK_OBJECT_BIN) {
		*n = v->via.str.size; /* str and bin share their layout */
		return v->via.str.ptr;
	} else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
		(void)snprintf(buf, len, "%" PRIu64, v->via.u64);
	} else if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
		(void)snprintf(buf, len, "%" PRId64, v->via.i64);
	} else if (v->type == MSGPACK_OBJECT_BOOLEAN) {
		(void)snprintf(buf, len, "%s", v->via.boolean ? "true" : "false");
	} else if (v->type == MSGPACK_OBJECT_FLOAT32 || v->type == MSGPACK_OBJECT_FLOAT64) {
		(void)snprintf(buf, len, "%g", v->via.f64);
	} else {
		(void)snprintf(buf, len, v->type == MSGPACK_OBJECT_NIL ? "-" : "...");
	}
	*n = strlen(buf);
	return buf;
}

/* Row r's value for column c (rows are looked up by key, not position). */
static const msgpack_object *cell(const struct table *t, uint32_t r, uint32_t c)
{
	const msgpack_object_map *m = &t->rows[r].via.map;

	if (c < m->size && m->ptr[c].key.type == MSGPACK_OBJECT_STR &&
	    m->ptr[c].key.via.str.size == t->collen[c] &&
	    memcmp(m->ptr[c].key.via.str.ptr, t->col[c], t->collen[c]) == 0)
		return &m->ptr[c].val;
	for (uint32_t i = 0; i < m->size; i++)
		if (m->ptr[i].key.type == MSGPACK_OBJECT_STR &&
		    m->ptr[i].key.via.str.size == t->collen[c] &&
		    memcmp(m->ptr[i].key.via.str.ptr, t->col[c], t->collen[c]) == 0)
			return &m->ptr[i].val;
	return NULL;
}

static void measure(struct table *t)
{
	const msgpack_object_map *first = &t->rows[0].via.map;
	char buf[64];

	for (uint32_t i = 0; i < first->size && t->ncols < MAX_COLS; i++) {
		const msgpack_object *k = &first->ptr[i].key;
		uint32_t c = t->ncols;

		if (k->type != MSGPACK_OBJECT_STR)
			continue;
		t->col[c] = k->via.str.ptr;
		t->collen[c] = k->via.str.size;
		t->width[c] = pdctl_text_width(k->via.str.ptr, k->via.str.size);
		t->numeric[c] = 1;
		t->ncols++;
	}
	for (uint32_t r = 0; r < t->nrows; r++) {
		for (uint32_t c = 0; c < t->ncols; c++) {
			const msgpack_object *v = cell(t, r, c);
			size_t n = 0, w;
			const char *s = cell_text(v, buf, sizeof(buf), &n);

			w = pdctl_text_width(s, n);
			if (w > t->width[c])
				t->width[c] = w;
			if (!v || (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER &&
				   v->type != MSGPACK_OBJECT_NEGATIVE_INTEGER))
				t->numeric[c] = 0;
		}
	}
}

static void put_cell(const struct table *t, uint32_t c, const char *s, size_t n)
{
	size_t w = pdctl_text_width(s, n), pad = t->width[c] > w ? t->width[c] - w : 0;
	int last = c + 1 == t->ncols;

	if (c > 0)
		(void)fputs("  ", stdout);
	if (t->numeric[c])
		printf("%*s", (int)pad, "");
	(void)pdctl_text_write(stdout, s, n);
	if (!t->numeric[c] && !last)
		printf("%*s", (int)pad, "");
}

static void print_table(struct table *t)
{
	char buf[64];

	measure(t);
	for (uint32_t c = 0; c < t->ncols; c++)
		put_cell(t, c, t->col[c], t->collen[c]);
	(void)fputc('\n', stdout);
	for (uint32_t r = 0; r < t->nrows; r++) {
		for (uint32_t c = 0; c < t->ncols; c++) {
			size_t n = 0;
			const char *s = cell_text(cell(t, r, c), buf, sizeof(buf), &n);

			put_cell(t, c, s, n);
		}
		(void)fputc('\n', stdout);
	}
}

static int print_json_rows(const msgpack_object *rows)
{
	return pdctl_json_print(json_pack("{s:o}", "rows", pdctl_json_mp(rows)), 1);
}

/* ok true: 1; ok false: 0 (error message printed); malformed: -EPROTO. */
static int answer_ok(const struct pdctl_opts *o, const struct pdctl_answer *ans,
		     const char *what)
{
	const msgpack_object *ok = pdctl_mp_get(ans->root, "ok");
	const msgpack_object *err = pdctl_mp_get(ans->root, "error");

	if (!ok || ok->type != MSGPACK_OBJECT_BOOLEAN)
		return -EPROTO;
	if (ok->via.boolean)
		return 1;
	if (err && err->type == MSGPACK_OBJECT_STR)
		pdctl_err("%s: broker %s: %.*s", what, o->name, (int)err->via.str.size,
			  err->via.str.ptr);
	else
		pdctl_err("%s: broker %s refused (no reason given)", what, o->name);
	return 0;
}

static int rows_valid(const msgpack_object *rows)
{
	if (!rows || rows->type != MSGPACK_OBJECT_ARRAY ||
	    rows->via.array.size > PD_ADMIN_MAX_ROWS)
		return 0;
	for (uint32_t i = 0; i < rows->via.array.size; i++)
		if (rows->via.array.ptr[i].type != MSGPACK_OBJECT_MAP)
			return 0;
	return 1;
}

/* 0, or -errno (the JSON could not be written). */
static int print_rows(const struct pdctl_opts *o, const msgpack_object *rows)
{
	struct table t = { .rows = rows->via.array.ptr, .nrows = rows->via.array.size };

	if (o->json)
		return print_json_rows(rows);
	if (t.nrows == 0 && o->state) {
		printf("no %s in state %s\n", o->cmd, o->state);
	} else if (t.nrows == 0) {
		printf("no %s\n", o->cmd);
	} else {
		print_table(&t);
	}
	return 0;
}

int pdctl_cmd_list(const struct pdctl_opts *o)
{
	struct pdctl_answer ans;
	const msgpack_object *rows;
	int ok, rc = pdctl_admin_call(o, o->cmd, o->state ? "state" : NULL, o->state, &ans);

	if (rc < 0)
		return pdctl_explain_admin(o, rc);
	rc = answer_ok(o, &ans, o->cmd);
	rows = pdctl_mp_get(ans.root, "rows");
	if (rc > 0 && !rows_valid(rows))
		rc = -EPROTO;
	if (rc < 0)
		pdctl_err("%s: broker %s sent a malformed answer", o->cmd, o->name);
	ok = rc > 0 && print_rows(o, rows) == 0;
	pdctl_answer_free(&ans);
	return pdctl_flush(ok ? PDCTL_EXIT_OK : PDCTL_EXIT_FAIL);
}

/* 0, or -errno (the JSON could not be written). */
static int print_cancelled(const struct pdctl_opts *o, uint64_t n)
{
	if (o->json)
		return pdctl_json_print(json_pack("{s:b, s:o, s:o}", "ok", 1,
						  "req_id", pdctl_json_str(o->args[0]),
						  "cancelled", pdctl_json_u64(n)), 1);
	printf("cancelled %" PRIu64 " request%s with id ", n, n == 1 ? "" : "s");
	(void)pdctl_text_write(stdout, o->args[0], strlen(o->args[0]));
	(void)fputc('\n', stdout);
	return 0;
}

int pdctl_cmd_cancel(const struct pdctl_opts *o)
{
	struct pdctl_answer ans;
	const msgpack_object *n;
	char what[128];
	int ok, rc = pdctl_admin_call(o, "cancel", "req_id", o->args[0], &ans);

	if (rc == -E2BIG) {
		pdctl_err("cancel: request id too long");
		return PDCTL_EXIT_USAGE;
	}
	if (rc < 0)
		return pdctl_explain_admin(o, rc);
	(void)snprintf(what, sizeof(what), "cancel %.100s", o->args[0]);
	rc = answer_ok(o, &ans, what);
	n = pdctl_mp_get(ans.root, "cancelled");
	if (rc > 0 && (!n || n->type != MSGPACK_OBJECT_POSITIVE_INTEGER))
		rc = -EPROTO;
	if (rc < 0)
		pdctl_err("cancel: broker %s sent a malformed answer", o->name);
	ok = rc > 0 && print_cancelled(o, n->via.u64) == 0;
	pdctl_answer_free(&ans);
	return pdctl_flush(ok ? PDCTL_EXIT_OK : PDCTL_EXIT_FAIL);
}
