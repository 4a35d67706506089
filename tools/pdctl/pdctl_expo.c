/* SPDX-License-Identifier: MIT */
/*
 * pdctl metrics: the writer of the Prometheus text exposition format
 * (version 0.0.4), or of the same families as JSON:
 *   {"broker": NAME, "families": [{"name", "type", "help",
 *     "samples": [{"name", "labels": {...}, "value": N}]}]}
 *
 * Format rules kept here: every family once (# HELP, # TYPE, then all its
 * samples together); metric names [a-zA-Z_:][a-zA-Z0-9_:]*; label values
 * escape backslash, double quote and newline; HELP text escapes backslash
 * and newline; everything valid UTF-8; a final newline.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "pdctl.h"

void pdctl_fmt_decimal(char *buf, size_t len, uint64_t v, unsigned int digits)
{
	uint64_t div = 1;
	size_t n;

	for (unsigned int i = 0; i < digits; i++)
		div *= 10;
	(void)snprintf(buf, len, "%" PRIu64 ".%0*" PRIu64, v / div, (int)digits, v % div);
	n = strlen(buf);
	while (n > 0 && buf[n - 1] == '0')
		buf[--n] = '\0';
	if (n > 0 && buf[n - 1] == '.')
		buf[--n] = '\0';
}

/* JSON: rc < 0, a value that could not be built (or added), fails the
 * document at the end. */
static void expo_check(struct pdctl_expo *x, int rc)
{
	if (rc < 0)
		x->err = -ENOMEM;
}

void pdctl_expo_init(struct pdctl_expo *x, int json, const char *broker)
{
	memset(x, 0, sizeof(*x));
	x->json = json;
	(void)snprintf(x->broker, sizeof(x->broker), "%s", broker);
	if (!json)
		return;
	x->doc = json_pack("{s:o, s:[]}", "broker", pdctl_json_str(broker), "families");
	expo_check(x, x->doc ? 0 : -ENOMEM);
}

static void sanitize(char *dst, size_t len, const char *src)
{
	size_t i = 0;

	for (; src[i] && i + 1 < len; i++) {
		char c = src[i];
		int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
			 c == ':' || (i > 0 && c >= '0' && c <= '9');

		dst[i] = ok ? c : '_';
	}
	dst[i] = '\0';
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

static void family_json(struct pdctl_expo *x, const char *name, const char *type,
			const char *help)
{
	json_t *fam = json_pack("{s:s, s:s, s:o, s:[]}", "name", name, "type", type,
				"help", pdctl_json_str(help), "samples");

	x->samples = json_object_get(fam, "samples"); /* NULL when fam is */
	expo_check(x, json_array_append_new(json_object_get(x->doc, "families"), fam));
}

void pdctl_expo_family(struct pdctl_expo *x, const char *name, const char *type,
		       const char *help)
{
	char *f;

	x->skip = 1;
	if (x->nfam >= PDCTL_MAX_FAMILIES)
		return;
	f = x->fam[x->nfam];
	sanitize(f, sizeof(x->fam[0]), name);
	for (uint32_t i = 0; i < x->nfam; i++)
		if (strcmp(x->fam[i], f) == 0)
			return; /* the same name twice would make the exposition invalid */
	x->nfam++;
	x->skip = 0;
	if (x->json) {
		family_json(x, f, type, help);
		return;
	}
	printf("# HELP %s ", f);
	put_escaped(help, 0);
	printf("\n# TYPE %s %s\n", f, type);
}

static json_t *labels_json(const struct pdctl_expo *x, const struct pdctl_label *l,
			   uint32_t nl)
{
	json_t *obj = json_object();
	int rc = obj ? pdctl_json_set(obj, "broker", pdctl_json_str(x->broker)) : -ENOMEM;

	for (uint32_t i = 0; rc == 0 && i < nl; i++)
		rc = pdctl_json_set(obj, l[i].k, pdctl_json_str(l[i].v));
	if (rc < 0) {
		json_decref(obj);
		obj = NULL;
	}
	return obj;
}

static void sample_json(struct pdctl_expo *x, const char *name, const struct pdctl_label *l,
			uint32_t nl, const char *value)
{
	/* +Inf is no JSON number: it stays a string. */
	json_t *v = strcmp(value, "+Inf") == 0 ? json_string(value) : pdctl_json_num(value);

	expo_check(x, json_array_append_new(x->samples, json_pack("{s:s, s:o, s:o}", "name", name,
					    "labels", labels_json(x, l, nl), "value", v)));
}

void pdctl_expo_sample(struct pdctl_expo *x, const char *suffix, const struct pdctl_label *l,
		       uint32_t nl, const char *value)
{
	char name[128];

	if (x->skip)
		return;
	(void)snprintf(name, sizeof(name), "%s%s", x->fam[x->nfam - 1], suffix ? suffix : "");
	if (x->json) {
		sample_json(x, name, l, nl, value);
		return;
	}
	printf("%s{broker=\"", name);
	put_escaped(x->broker, 1);
	(void)fputc('"', stdout);
	for (uint32_t i = 0; i < nl; i++) {
		printf(",%s=\"", l[i].k);
		put_escaped(l[i].v, 1);
		(void)fputc('"', stdout);
	}
	printf("} %s\n", value);
}

void pdctl_expo_u64(struct pdctl_expo *x, const struct pdctl_label *l, uint32_t nl, uint64_t v)
{
	char buf[32];

	(void)snprintf(buf, sizeof(buf), "%" PRIu64, v);
	pdctl_expo_sample(x, NULL, l, nl, buf);
}

void pdctl_expo_ns(struct pdctl_expo *x, const char *suffix, const struct pdctl_label *l,
		   uint32_t nl, uint64_t ns)
{
	char buf[48];

	pdctl_fmt_decimal(buf, sizeof(buf), ns, 9);
	pdctl_expo_sample(x, suffix, l, nl, buf);
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
