/* SPDX-License-Identifier: MIT */
/*
 * pdctl metrics: a writer of pd_expo.h's families, in the Prometheus text
 * exposition format (version 0.0.4), or as JSON:
 *   {"broker": NAME, "families": [{"name", "type", "help",
 *     "samples": [{"name", "labels": {...}, "value": N}]}]}
 *
 * Format rules kept here (names, and each family once, are pd_expo.c's):
 * label values escape backslash, double quote and newline; HELP text
 * escapes backslash and newline; everything valid UTF-8; a final newline.
 */
#include <errno.h>
#include <string.h>

#include "pdctl.h"

/* JSON: rc < 0, a value that could not be built (or added), fails the
 * document at the end. */
static void expo_check(struct pdctl_expo *x, int rc)
{
	if (rc < 0)
		x->err = -ENOMEM;
}

/* Escaped text: label values (quote too) or HELP text; invalid UTF-8 -> U+FFFD. */
static void put_escaped(const char *s, int quote)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t len = strlen(s), i = 0;

	while (i < len) {
		size_t n = pdctl_utf8_len(p + i, len - i);

		if (n == 0)
			(void)fputs("\xef\xbf\xbd", stdout);
		else if (p[i] == '\\')
			(void)fputs("\\\\", stdout);
		else if (p[i] == '\n')
			(void)fputs("\\n", stdout);
		else if (quote && p[i] == '"')
			(void)fputs("\\\"", stdout);
		else
			(void)fwrite(p + i, 1, n, stdout);
		i += n ? n : 1;
	}
}

static void family_json(void *ctx, const char *name, const char *type, const char *help)
{
	struct pdctl_expo *x = ctx;
	json_t *fam = json_pack("{s:s, s:s, s:o, s:[]}", "name", name, "type", type,
				"help", pdctl_json_str(help), "samples");

	x->samples = json_object_get(fam, "samples"); /* NULL when fam is */
	expo_check(x, json_array_append_new(json_object_get(x->doc, "families"), fam));
}

static void family_text(void *ctx, const char *name, const char *type, const char *help)
{
	(void)ctx;
	printf("# HELP %s ", name);
	put_escaped(help, 0);
	printf("\n# TYPE %s %s\n", name, type);
}

static json_t *labels_json(const struct pd_expo_label *l, uint32_t nl)
{
	json_t *obj = json_object();
	int rc = obj ? 0 : -ENOMEM;

	for (uint32_t i = 0; rc == 0 && i < nl; i++)
		rc = pdctl_json_set(obj, l[i].k, pdctl_json_str(l[i].v));
	if (rc < 0) {
		json_decref(obj);
		obj = NULL;
	}
	return obj;
}

static void sample_json(void *ctx, const char *name, const struct pd_expo_label *l,
			uint32_t nl, const char *value)
{
	struct pdctl_expo *x = ctx;
	/* +Inf is no JSON number: it stays a string. */
	json_t *v = strcmp(value, "+Inf") == 0 ? json_string(value) : pdctl_json_num(value);

	expo_check(x, json_array_append_new(x->samples, json_pack("{s:s, s:o, s:o}", "name", name,
					    "labels", labels_json(l, nl), "value", v)));
}

static void sample_text(void *ctx, const char *name, const struct pd_expo_label *l,
			uint32_t nl, const char *value)
{
	(void)ctx;
	printf("%s{", name);
	for (uint32_t i = 0; i < nl; i++) {
		printf("%s%s=\"", i ? "," : "", l[i].k);
		put_escaped(l[i].v, 1);
		(void)fputc('"', stdout);
	}
	printf("} %s\n", value);
}

void pdctl_expo_init(struct pdctl_expo *x, int json, const char *broker,
		     struct pd_expo_writer *w)
{
	memset(x, 0, sizeof(*x));
	x->json = json;
	*w = (struct pd_expo_writer){ .ctx = x, .family = json ? family_json : family_text,
				      .sample = json ? sample_json : sample_text };
	if (!json)
		return;
	x->doc = json_pack("{s:o, s:[]}", "broker", pdctl_json_str(broker), "families");
	expo_check(x, x->doc ? 0 : -ENOMEM);
}

int pdctl_expo_end(struct pdctl_expo *x)
{
	if (!x->json)
		return 0;
	if (x->err) {
		json_decref(x->doc);
		x->doc = NULL; /* pdctl_json_print() reports it */
	}
	x->samples = NULL;
	return pdctl_json_print(x->doc, 1);
}
