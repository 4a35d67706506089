/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_SUPPORT_PD_PROM_H
#define PD_TESTS_SUPPORT_PD_PROM_H

/*
 * The tests' checker of the Prometheus text exposition format (0.0.4), line
 * by line, for `pdctl metrics` and pdbroker's --metrics-listen alike:
 * "# HELP f ..." then "# TYPE f counter|gauge|histogram" right after it,
 * each family once; every sample of the current family (histograms: only
 * _bucket with le, cumulative, "+Inf" last, _sum, _count equal to the +Inf
 * bucket), names [a-zA-Z_:][a-zA-Z0-9_:]*, labels k="v" with only \\, \"
 * and \n escaped, broker="<name>" among them, a number (or +Inf) after.
 * Failures are cmocka's. Header only (cmocka is the test programs').
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PD_PROM_MAX_FAMILIES 512u

struct pd_prom {
	char fam[PD_PROM_MAX_FAMILIES][128];
	char ftype[PD_PROM_MAX_FAMILIES][16];
	uint32_t nfam;
	char type[16];                /* the current family's */
	double bucket_prev, inf_count;
	int saw_inf;
	uint32_t samples, histograms;
};

/* The name at p into out ("" when there is none); what follows it. */
static inline const char *pd_prom_name(const char *p, char *out, size_t len)
{
	size_t n = 0;

	while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || *p == '_' || *p == ':' ||
	       (n > 0 && *p >= '0' && *p <= '9')) {
		if (n + 1 < len)
			out[n++] = *p;
		p++;
	}
	out[n] = '\0';
	return p;
}

/* {k="v",...}: every label well-formed; le (if any) into le; broker must be name. */
static inline const char *pd_prom_labels(const char *p, const char *broker, char *le,
					 size_t lelen)
{
	int saw_broker = 0;
	char k[64], v[256];

	le[0] = '\0';
	assert_int_equal(*p++, '{');
	while (*p != '}') {
		size_t n = 0;

		p = pd_prom_name(p, k, sizeof(k));
		assert_true(k[0] != '\0');
		assert_int_equal(*p++, '=');
		assert_int_equal(*p++, '"');
		for (; *p != '"'; p++) {
			assert_true(*p != '\n' && *p != '\0');
			if (*p == '\\') {
				p++;
				assert_true(*p == '\\' || *p == '"' || *p == 'n');
			}
			if (n + 1 < sizeof(v))
				v[n++] = *p;
		}
		v[n] = '\0';
		p++;
		if (strcmp(k, "broker") == 0)
			saw_broker = strcmp(v, broker) == 0;
		if (strcmp(k, "le") == 0)
			(void)snprintf(le, lelen, "%s", v);
		if (*p == ',')
			p++;
	}
	assert_true(saw_broker);
	return p + 1;
}

static inline double pd_prom_value(const char *p)
{
	char *end;
	double v = strtod(p, &end); /* also takes +Inf, -Inf and NaN */

	if (end == p || *end != '\0')
		fail_msg("bad sample value '%s'", p);
	return v;
}

static inline void pd_prom_sample(struct pd_prom *s, const char *line, const char *broker)
{
	const char *fam = s->fam[s->nfam - 1];
	char name[128], le[256], suffix[16];
	const char *p = pd_prom_name(line, name, sizeof(name));
	double v;

	assert_true(name[0] != '\0');
	p = pd_prom_labels(p, broker, le, sizeof(le));
	assert_int_equal(*p++, ' ');
	v = pd_prom_value(p);
	assert_true(strncmp(name, fam, strlen(fam)) == 0);
	assert_true(strlen(name + strlen(fam)) < sizeof(suffix));
	memcpy(suffix, name + strlen(fam), strlen(name + strlen(fam)) + 1);
	s->samples++;
	if (strcmp(s->type, "histogram") != 0) {
		assert_string_equal(suffix, "");
		return;
	}
	if (strcmp(suffix, "_bucket") == 0) {
		assert_true(le[0] != '\0' && !s->saw_inf);
		assert_true(v >= s->bucket_prev); /* cumulative */
		s->bucket_prev = v;
		s->saw_inf = strcmp(le, "+Inf") == 0;
		s->inf_count = v;
	} else if (strcmp(suffix, "_count") == 0) {
		assert_true(s->saw_inf);
		assert_true(v == s->inf_count);
	} else {
		assert_string_equal(suffix, "_sum");
	}
}

static inline void pd_prom_line(struct pd_prom *s, const char *line, const char *broker)
{
	char name[128];
	const char *p;

	if (strncmp(line, "# HELP ", 7) == 0) {
		p = pd_prom_name(line + 7, name, sizeof(name));
		assert_true(name[0] && *p == ' ');
		for (uint32_t i = 0; i < s->nfam; i++)
			if (strcmp(s->fam[i], name) == 0)
				fail_msg("family %s twice", name);
		assert_true(s->nfam < PD_PROM_MAX_FAMILIES);
		(void)snprintf(s->fam[s->nfam++], sizeof(s->fam[0]), "%s", name);
		s->type[0] = '\0';
		return;
	}
	if (strncmp(line, "# TYPE ", 7) == 0) {
		p = pd_prom_name(line + 7, name, sizeof(name));
		assert_true(name[0] && *p == ' ' && s->nfam > 0 && s->type[0] == '\0');
		assert_string_equal(name, s->fam[s->nfam - 1]);
		(void)snprintf(s->type, sizeof(s->type), "%s", p + 1);
		assert_true(strcmp(s->type, "counter") == 0 || strcmp(s->type, "gauge") == 0 ||
			    strcmp(s->type, "histogram") == 0);
		(void)snprintf(s->ftype[s->nfam - 1], sizeof(s->ftype[0]), "%s", s->type);
		s->histograms += strcmp(s->type, "histogram") == 0;
		s->bucket_prev = s->inf_count = 0;
		s->saw_inf = 0;
		return;
	}
	assert_true(line[0] != '#' && line[0] != '\0' && s->type[0] != '\0');
	pd_prom_sample(s, line, broker);
}

/* Check the whole of text (a final newline included) into s (zeroed here). */
static inline void pd_prom_check(struct pd_prom *s, const char *text, const char *broker)
{
	char *copy = strdup(text), *line, *nl;

	assert_non_null(copy);
	memset(s, 0, sizeof(*s));
	assert_true(text[0] != '\0' && text[strlen(text) - 1] == '\n');
	for (line = copy; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
		*nl = '\0';
		pd_prom_line(s, line, broker);
	}
	free(copy);
}

/* The type of family name in s, or NULL. */
static inline const char *pd_prom_type(const struct pd_prom *s, const char *name)
{
	for (uint32_t i = 0; i < s->nfam; i++)
		if (strcmp(s->fam[i], name) == 0)
			return s->ftype[i];
	return NULL;
}

/* The value of the sample line that starts with prefix (name{labels} ), or
 * -1 when there is none. */
static inline double pd_prom_find(const char *text, const char *prefix)
{
	size_t n = strlen(prefix);

	for (const char *p = text; (p = strstr(p, prefix)) != NULL; p++)
		if (p == text || p[-1] == '\n')
			return strtod(p + n, NULL);
	return -1;
}

#endif
