/* SPDX-License-Identifier: MIT */
/* Values of config entries: text -> typed field -> checked -> text. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "pd_addr.h"
#include "pd_config_int.h"

#define NS_PER_MS UINT64_C(1000000)
#define NS_PER_S  UINT64_C(1000000000)

struct unit {
	const char *sfx;     /* compared case-insensitively */
	uint64_t mul;
};

static const struct unit size_units[] = {
	{ "", 1 },           { "k", 1ull << 10 }, { "kib", 1ull << 10 }, { "m", 1ull << 20 },
	{ "mib", 1ull << 20 }, { "g", 1ull << 30 }, { "gib", 1ull << 30 },
};

static const struct unit time_units[] = {
	{ "", NS_PER_S }, { "s", NS_PER_S }, { "ms", NS_PER_MS },
};

static const struct unit no_units[] = { { "", 1 } };

static const char *const bool_names[] = { "false", "true", "no", "yes", "off", "on", "0", "1" };

int pd_cfg_fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		(void)vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

static void *field(const struct pd_cfg_def *d, struct pd_config *c)
{
	return (char *)c + d->off;
}

static const void *cfield(const struct pd_cfg_def *d, const struct pd_config *c)
{
	return (const char *)c + d->off;
}

/* The numeric value of d's field: u32 kinds widen, SIZE and SECONDS are u64. */
static uint64_t get_num(const struct pd_cfg_def *d, const struct pd_config *c)
{
	if (d->len == sizeof(uint64_t))
		return *(const uint64_t *)cfield(d, c);
	return *(const uint32_t *)cfield(d, c);
}

/* Decimal digits then one of units[]: -EINVAL junk, sign, dot; -ERANGE overflow. */
static int parse_scaled(const char *s, const struct unit *units, size_t nunits, uint64_t *out)
{
	uint64_t v = 0;
	const char *p = s;

	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		if (v > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	for (size_t i = 0; i < nunits; i++) {
		if (strcasecmp(p, units[i].sfx) != 0)
			continue;
		if (v > UINT64_MAX / units[i].mul)
			return -ERANGE;
		*out = v * units[i].mul;
		return 0;
	}
	return -EINVAL;
}

static void fmt_size(uint64_t v, char *buf, size_t len)
{
	static const char sfx[] = "GMK";

	for (int i = 0; i < 3; i++) {
		uint64_t mul = 1ull << (10 * (3 - i));

		if (v && v % mul == 0) {
			(void)snprintf(buf, len, "%" PRIu64 "%c", v / mul, sfx[i]);
			return;
		}
	}
	(void)snprintf(buf, len, "%" PRIu64, v);
}

static void fmt_ns(uint64_t v, char *buf, size_t len)
{
	if (v % NS_PER_S == 0)
		(void)snprintf(buf, len, "%" PRIu64 "s", v / NS_PER_S);
	else if (v % NS_PER_MS == 0)
		(void)snprintf(buf, len, "%" PRIu64 "ms", v / NS_PER_MS);
	else
		(void)snprintf(buf, len, "%" PRIu64 "ns", v);
}

static void fmt_num(const struct pd_cfg_def *d, uint64_t v, char *buf, size_t len)
{
	if (d->type == PD_CFG_T_SIZE)
		fmt_size(v, buf, len);
	else if (d->type == PD_CFG_T_SECONDS)
		fmt_ns(v, buf, len);
	else
		(void)snprintf(buf, len, "%" PRIu64, v);
}

void pd_cfg_format_bounds(const struct pd_cfg_def *d, char *buf, size_t len)
{
	char lo[32], hi[32];

	buf[0] = '\0';
	if (d->type != PD_CFG_T_U32 && d->type != PD_CFG_T_SIZE && d->type != PD_CFG_T_SECONDS)
		return;
	fmt_num(d, d->min, lo, sizeof(lo));
	fmt_num(d, d->max, hi, sizeof(hi));
	(void)snprintf(buf, len, "%s..%s", lo, hi);
}

static int range_fail(const struct pd_cfg_def *d, uint64_t v, char *err, size_t errlen)
{
	char val[32], range[80];

	fmt_num(d, v, val, sizeof(val));
	pd_cfg_format_bounds(d, range, sizeof(range));
	return pd_cfg_fail(err, errlen, "--%s: %s is out of range %s", d->name, val, range);
}

static void join_names(const struct pd_cfg_def *d, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; i < d->nnames && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? "|" : "",
					 d->names[i]);
}

static int find_name(const char *const *names, uint32_t n, const char *s, size_t slen)
{
	for (uint32_t i = 0; i < n; i++)
		if (strlen(names[i]) == slen && strncasecmp(names[i], s, slen) == 0)
			return (int)i;
	return -1;
}

static int set_num(const struct pd_cfg_def *d, struct pd_config *c, const char *s, char *err,
		   size_t errlen)
{
	static const char *const what[] = { "a number", "a size (N, NK, NM or NG)",
					    "a duration (N seconds, Ns or Nms)" };
	uint32_t k = d->type == PD_CFG_T_U32 ? 0 : d->type == PD_CFG_T_SIZE ? 1 : 2;
	uint64_t v;
	int rc;

	if (k == 0)
		rc = parse_scaled(s, no_units, PD_ARRAY_SIZE(no_units), &v);
	else if (k == 1)
		rc = parse_scaled(s, size_units, PD_ARRAY_SIZE(size_units), &v);
	else
		rc = parse_scaled(s, time_units, PD_ARRAY_SIZE(time_units), &v);
	if (rc == -ERANGE)
		return pd_cfg_fail(err, errlen, "--%s: '%s' is too large", d->name, s);
	if (rc < 0)
		return pd_cfg_fail(err, errlen, "--%s: '%s' is not %s", d->name, s, what[k]);
	if (d->len == sizeof(uint64_t)) {
		*(uint64_t *)field(d, c) = v;
		return 0;
	}
	if (v > d->max)
		return range_fail(d, v, err, errlen);
	*(uint32_t *)field(d, c) = (uint32_t)v;
	return 0;
}

static int set_choice(const struct pd_cfg_def *d, struct pd_config *c, const char *s, char *err,
		      size_t errlen)
{
	char names[128];
	int i;

	if (d->type == PD_CFG_T_BOOL) {
		i = find_name(bool_names, PD_ARRAY_SIZE(bool_names), s, strlen(s));
		if (i < 0)
			return pd_cfg_fail(err, errlen, "--%s: '%s' is not true or false",
					   d->name, s);
		*(uint32_t *)field(d, c) = (uint32_t)i & 1u;
		return 0;
	}
	i = find_name(d->names, d->nnames, s, strlen(s));
	if (i < 0) {
		join_names(d, names, sizeof(names));
		return pd_cfg_fail(err, errlen, "--%s: '%s' is not one of %s", d->name, s, names);
	}
	*(uint32_t *)field(d, c) = (uint32_t)i;
	return 0;
}

static size_t trimmed(const char **s, size_t n)
{
	while (n && isspace((unsigned char)**s)) {
		(*s)++;
		n--;
	}
	while (n && isspace((unsigned char)(*s)[n - 1]))
		n--;
	return n;
}

/* "rdma, tcp": distinct names, in order. Empty text is an empty list. */
static int set_list(const struct pd_cfg_def *d, struct pd_config *c, const char *s, char *err,
		    size_t errlen)
{
	struct pd_cfg_xports l = { 0 };
	char names[128];

	for (const char *p = s; *s;) {
		size_t n = strcspn(p, ",");
		const char *item = p;
		size_t len = trimmed(&item, n);
		int i = find_name(d->names, d->nnames, item, len);

		if (len == 0)
			return pd_cfg_fail(err, errlen, "--%s: empty name in '%s'", d->name, s);
		if (i < 0) {
			join_names(d, names, sizeof(names));
			return pd_cfg_fail(err, errlen, "--%s: '%.*s' is not one of %s", d->name,
					   (int)len, item, names);
		}
		if (l.mask & (1u << i))
			return pd_cfg_fail(err, errlen, "--%s: %s given twice", d->name,
					   d->names[i]);
		l.mask |= 1u << i;
		l.order[l.n++] = (uint32_t)i;
		if (p[n] == '\0')
			break;
		p += n + 1;
	}
	*(struct pd_cfg_xports *)field(d, c) = l;
	return 0;
}

static int set_str(const struct pd_cfg_def *d, struct pd_config *c, const char *s, char *err,
		   size_t errlen)
{
	size_t n = strlen(s);

	if (n >= d->len)
		return pd_cfg_fail(err, errlen, "--%s: longer than %zu characters", d->name,
				   d->len - 1);
	memcpy(field(d, c), s, n + 1);
	return 0;
}

static int parse_into(const struct pd_cfg_def *d, struct pd_config *c, const char *s, char *err,
		      size_t errlen)
{
	switch (d->type) {
	case PD_CFG_T_STRING:
	case PD_CFG_T_PATH:
	case PD_CFG_T_ENDPOINT:
	case PD_CFG_T_HOSTPORT:
		return set_str(d, c, s, err, errlen);
	case PD_CFG_T_U32:
	case PD_CFG_T_SIZE:
	case PD_CFG_T_SECONDS:
		return set_num(d, c, s, err, errlen);
	case PD_CFG_T_BOOL:
	case PD_CFG_T_ENUM:
		return set_choice(d, c, s, err, errlen);
	case PD_CFG_T_LIST:
		return set_list(d, c, s, err, errlen);
	default:
		return pd_cfg_fail(err, errlen, "--%s: cannot be set here", d->name);
	}
}

int pd_cfg_set(const struct pd_cfg_def *d, struct pd_config *c, const char *text, char *err,
	       size_t errlen)
{
	struct pd_config tmp = *c;
	int rc;

	rc = parse_into(d, &tmp, text ? text : "", err, errlen);
	if (rc == 0)
		rc = pd_cfg_check(d, &tmp, err, errlen);
	if (rc == 0)
		*c = tmp;
	return rc;
}

static int has_ctrl(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 1;
	return 0;
}

static int ident_ok(const char *s)
{
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("._-", *s))
			return 0;
	return 1;
}

/* HOST:PORT as every part of pdkv reads it (pd_addr.h): IPv6 in brackets,
 * "*" = any host; port 1..65535, or what flags allow (an ephemeral port). */
static int hostport_ok(const char *s, uint32_t flags)
{
	return pd_addr_split(s, strlen(s), flags, NULL, 0, NULL) == 0;
}

static int endpoint_ok(const char *s, int any_port)
{
	size_t n;

	if (strncmp(s, "tcp://", 6) == 0)
		return hostport_ok(s + 6, any_port ? PD_ADDR_PORT_STAR : 0);
	if (strncmp(s, "ipc://", 6) != 0)
		return 0;
	n = strlen(s + 6);
	return n > 0 && n <= PD_CFG_IPC_PATH_MAX && !has_ctrl(s + 6);
}

static int check_str(const struct pd_cfg_def *d, const char *s, char *err, size_t errlen)
{
	size_t n = strnlen(s, d->len);
	int any = !!(d->flags & PD_CFG_F_PORT_ANY);

	if (n == d->len)
		return pd_cfg_fail(err, errlen, "--%s: not terminated", d->name);
	if (n == 0 && (d->min == 0 || (d->flags & PD_CFG_F_REQUIRED)))
		return 0;   /* unset; pd_config_validate() refuses a required one */
	if (d->type == PD_CFG_T_STRING && (n < d->min || n > d->max || !ident_ok(s)))
		return pd_cfg_fail(err, errlen, "--%s: '%s' is not %" PRIu64 "..%" PRIu64
				   " characters of [A-Za-z0-9._-]", d->name, s, d->min, d->max);
	if (d->type == PD_CFG_T_PATH && (n < d->min || has_ctrl(s) || isspace((unsigned char)*s) ||
					 isspace((unsigned char)s[n - 1])))
		return pd_cfg_fail(err, errlen, "--%s: '%s' is empty, has a control character "
				   "or starts or ends with a space", d->name, s);
	if (d->type == PD_CFG_T_ENDPOINT && !endpoint_ok(s, any))
		return pd_cfg_fail(err, errlen, "--%s: '%s' is not tcp://HOST:PORT (port 1..65535)"
				   " or ipc://PATH", d->name, s);
	if (d->type == PD_CFG_T_HOSTPORT && !hostport_ok(s, any ? PD_ADDR_PORT_ANY : 0))
		return pd_cfg_fail(err, errlen, "--%s: '%s' is not HOST:PORT (port 1..65535)",
				   d->name, s);
	return 0;
}

static int check_num(const struct pd_cfg_def *d, uint64_t v, char *err, size_t errlen)
{
	if (v < d->min || v > d->max)
		return range_fail(d, v, err, errlen);
	if (d->align && v % d->align)
		return pd_cfg_fail(err, errlen, "--%s: %" PRIu64 " is not a multiple of %" PRIu64,
				   d->name, v, d->align);
	if (d->type == PD_CFG_T_SECONDS && v % NS_PER_MS)
		return pd_cfg_fail(err, errlen, "--%s: %" PRIu64 "ns is not whole milliseconds",
				   d->name, v);
	return 0;
}

static int check_list(const struct pd_cfg_def *d, const struct pd_cfg_xports *l, char *err,
		      size_t errlen)
{
	char names[128];
	uint32_t seen = 0;

	join_names(d, names, sizeof(names));
	if (l->n < d->min || l->n > d->max || l->n > PD_XPORT_MAX)
		return pd_cfg_fail(err, errlen, "--%s: needs %" PRIu64 "..%" PRIu64 " of %s",
				   d->name, d->min, d->max, names);
	for (uint32_t i = 0; i < l->n; i++) {
		if (l->order[i] >= d->nnames || (seen & (1u << l->order[i])))
			return pd_cfg_fail(err, errlen, "--%s: bad or repeated member", d->name);
		seen |= 1u << l->order[i];
	}
	if (seen != l->mask)
		return pd_cfg_fail(err, errlen, "--%s: mask disagrees with order", d->name);
	return 0;
}

int pd_cfg_check(const struct pd_cfg_def *d, const struct pd_config *c, char *err, size_t errlen)
{
	switch (d->type) {
	case PD_CFG_T_STRING:
	case PD_CFG_T_PATH:
	case PD_CFG_T_ENDPOINT:
	case PD_CFG_T_HOSTPORT:
		return check_str(d, cfield(d, c), err, errlen);
	case PD_CFG_T_U32:
	case PD_CFG_T_SIZE:
	case PD_CFG_T_SECONDS:
		return check_num(d, get_num(d, c), err, errlen);
	case PD_CFG_T_BOOL:
		if (get_num(d, c) > 1)
			return pd_cfg_fail(err, errlen, "--%s: not 0 or 1", d->name);
		return 0;
	case PD_CFG_T_ENUM:
		if (get_num(d, c) >= d->nnames)
			return pd_cfg_fail(err, errlen, "--%s: no such value", d->name);
		return 0;
	case PD_CFG_T_LIST:
		return check_list(d, cfield(d, c), err, errlen);
	default:
		return 0;
	}
}

static void format_list(const struct pd_cfg_def *d, const struct pd_cfg_xports *l, char *buf,
			size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (uint32_t i = 0; i < l->n && i < PD_XPORT_MAX && used < len; i++)
		if (l->order[i] < d->nnames)
			used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? "," : "",
						 d->names[l->order[i]]);
}

void pd_cfg_format(const struct pd_cfg_def *d, const struct pd_config *c, char *buf, size_t len)
{
	uint64_t v;

	switch (d->type) {
	case PD_CFG_T_U32:
	case PD_CFG_T_SIZE:
	case PD_CFG_T_SECONDS:
		fmt_num(d, get_num(d, c), buf, len);
		return;
	case PD_CFG_T_BOOL:
		(void)snprintf(buf, len, "%s", get_num(d, c) ? "true" : "false");
		return;
	case PD_CFG_T_ENUM:
		v = get_num(d, c);
		(void)snprintf(buf, len, "%s", v < d->nnames ? d->names[v] : "?");
		return;
	case PD_CFG_T_LIST:
		format_list(d, cfield(d, c), buf, len);
		return;
	case PD_CFG_T_INCLUDE:
		buf[0] = '\0';
		return;
	default:
		(void)snprintf(buf, len, "%.*s", (int)strnlen(cfield(d, c), d->len),
			       (const char *)cfield(d, c));
		return;
	}
}
