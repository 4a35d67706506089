/* SPDX-License-Identifier: MIT */
/*
 * --metrics-listen: the request head, checked as RFC 9112 writes it.
 *
 *   request-line = method SP request-target SP HTTP-version CRLF
 *   field-line   = field-name ":" OWS field-value OWS CRLF
 *   head         = request-line *( field-line ) CRLF
 *
 * A bare LF is taken for CRLF (RFC 9112 2.2 allows it); anything else
 * unusual is refused: a method that is not a token, a target with bytes
 * outside visible ASCII or not "/..." (or "http://host/..."), a version
 * that is not HTTP/1.x (505 for another HTTP/n.m), a field line without a
 * token before ':' or with control bytes, obsolete line folding, and any
 * request body (Content-Length other than 0, Transfer-Encoding): the server
 * answers one GET and closes.
 */
#include <string.h>
#include <strings.h>

#include "pd_metrics_int.h"

#define METHOD_MAX 16u

static int is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int is_vchar(unsigned char c)
{
	return c > 0x20 && c < 0x7f;
}

static int fail(struct pd_http_req *r, int status, const char *why)
{
	r->why = why;
	return status;
}

/* The end of the line starting at p (its '\n'), or NULL. */
static const char *line_end(const char *p, const char *end)
{
	return memchr(p, '\n', (size_t)(end - p));
}

/* [p, e) without its trailing '\r'. */
static size_t line_len(const char *p, const char *e)
{
	return e > p && e[-1] == '\r' ? (size_t)(e - p - 1) : (size_t)(e - p);
}

static int parse_version(const char *v, size_t n, struct pd_http_req *r)
{
	if (n != 8 || memcmp(v, "HTTP/", 5) != 0 || v[6] != '.' || v[5] < '0' || v[5] > '9' ||
	    v[7] < '0' || v[7] > '9')
		return fail(r, 400, "malformed request line: no HTTP version");
	if (v[5] != '1')
		return fail(r, 505, "HTTP version not supported: use HTTP/1.0 or HTTP/1.1");
	r->minor = (uint32_t)(v[7] - '0');
	return 0;
}

/* "METHOD SP TARGET SP VERSION"; the method and target kept for routing. */
static int parse_request_line(const char *p, size_t n, struct pd_http_req *r, char *method,
			      const char **target, size_t *tlen)
{
	const char *sp1 = memchr(p, ' ', n), *sp2;
	size_t mlen;

	if (!sp1)
		return fail(r, 400, "malformed request line: expected 'METHOD /path HTTP/1.1'");
	mlen = (size_t)(sp1 - p);
	sp2 = memchr(sp1 + 1, ' ', n - mlen - 1);
	if (!sp2 || mlen == 0 || mlen > METHOD_MAX || sp2 == sp1 + 1)
		return fail(r, 400, "malformed request line: expected 'METHOD /path HTTP/1.1'");
	for (size_t i = 0; i < mlen; i++)
		if (!is_tchar((unsigned char)p[i]))
			return fail(r, 400, "malformed request line: the method is not a token");
	memcpy(method, p, mlen);
	method[mlen] = '\0';
	r->head_only = strcmp(method, "HEAD") == 0; /* no body, whatever the answer */
	*target = sp1 + 1;
	*tlen = (size_t)(sp2 - sp1 - 1);
	for (size_t i = 0; i < *tlen; i++)
		if (!is_vchar((unsigned char)(*target)[i]))
			return fail(r, 400, "malformed request line: bad byte in the target");
	return parse_version(sp2 + 1, n - (size_t)(sp2 + 1 - p), r);
}

/* "Name: value"; a body announced is refused. */
static int parse_field(const char *p, size_t n, struct pd_http_req *r)
{
	const char *colon = memchr(p, ':', n), *v;
	size_t klen, vlen;

	if (p[0] == ' ' || p[0] == '\t')
		return fail(r, 400, "bad header: obsolete line folding");
	if (!colon || colon == p)
		return fail(r, 400, "bad header: expected 'Name: value'");
	klen = (size_t)(colon - p);
	for (size_t i = 0; i < klen; i++)
		if (!is_tchar((unsigned char)p[i]))
			return fail(r, 400, "bad header: the name is not a token");
	v = colon + 1;
	vlen = n - klen - 1;
	for (size_t i = 0; i < vlen; i++)
		if (((unsigned char)v[i] < 0x20 && v[i] != '\t') || v[i] == 0x7f)
			return fail(r, 400, "bad header: control byte in a value");
	while (vlen && (*v == ' ' || *v == '\t')) {
		v++;
		vlen--;
	}
	while (vlen && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
		vlen--;
	if (klen == 17 && strncasecmp(p, "transfer-encoding", klen) == 0)
		return fail(r, 400, "request bodies are not accepted");
	if (klen == 14 && strncasecmp(p, "content-length", klen) == 0 &&
	    !(vlen == 1 && v[0] == '0'))
		return fail(r, 400, "request bodies are not accepted");
	return 0;
}

/* The path of an origin-form ("/p?q") or absolute-form ("http://h/p?q")
 * target, up to the query. */
static int route(const char *method, const char *t, size_t n, struct pd_http_req *r)
{
	const char *q;

	if (n >= 7 && strncasecmp(t, "http://", 7) == 0) {
		const char *slash = memchr(t + 7, '/', n - 7);

		if (slash) {
			n -= (size_t)(slash - t);
			t = slash;
		} else {
			t = "/";
			n = 1;
		}
	}
	if (t[0] != '/')
		return fail(r, 400, "malformed request line: the target is not a /path");
	q = memchr(t, '?', n);
	if (q)
		n = (size_t)(q - t);
	if (n != 8 || memcmp(t, "/metrics", 8) != 0)
		return fail(r, 404, "not found: this server serves GET /metrics only");
	if (strcmp(method, "GET") != 0 && !r->head_only)
		return fail(r, 405, "method not allowed: /metrics takes GET or HEAD");
	return 200;
}

int pd_metrics_parse(const char *in, size_t len, size_t max, struct pd_http_req *r)
{
	const char *end = in + len, *e = line_end(in, end), *p, *target;
	char method[METHOD_MAX + 1];
	size_t tlen;
	int rc;

	*r = (struct pd_http_req){ 0 };
	if (memchr(in, '\0', len))
		return fail(r, 400, "NUL byte in the request");
	if (!e)
		return len >= max ? fail(r, 414, "request line too long") : 0;
	rc = parse_request_line(in, line_len(in, e), r, method, &target, &tlen);
	if (rc)
		return rc;
	for (p = e + 1; (e = line_end(p, end)) != NULL; p = e + 1) {
		size_t n = line_len(p, e);

		if (n == 0) /* the empty line: the head is complete */
			return route(method, target, tlen, r);
		rc = parse_field(p, n, r);
		if (rc)
			return rc;
	}
	return len >= max ? fail(r, 431, "request header fields too large") : 0;
}
