/* SPDX-License-Identifier: MIT */
/* A data transport that moves nothing, for the fuzz targets (see fuzz_xport.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_xport.h"

#define MAX_POSTED 512u

struct fzx {
	struct pd_xport base;
	struct pd_shm *shm;
	int32_t status;
	uint32_t n;
	struct pd_cpl posted[MAX_POSTED];
};

static void die(const char *why)
{
	(void)fprintf(stderr, "fuzz transport: %s\n", why);
	abort();
}

static void fzx_destroy(struct pd_xport *x)
{
	free(x);
}

static void fzx_offer(const struct pd_xport *x, struct pd_xport_offer *o)
{
	(void)x;
	*o = (struct pd_xport_offer){ .addr = "127.0.0.1:9" };
}

static int fzx_connect(struct pd_xport *x, uint32_t peer, const struct pd_xport_peer *p,
		       char *why, size_t wlen)
{
	(void)x;
	(void)peer;
	(void)p;
	(void)why;
	(void)wlen;
	return 0;
}

/* Transfers posted to peer end now, aborted. */
static void fzx_disconnect(struct pd_xport *x, uint32_t peer)
{
	struct fzx *f = (struct fzx *)x;

	for (uint32_t i = 0; i < f->n; i++)
		if (f->posted[i].peer == peer && f->posted[i].status == 0)
			f->posted[i].status = -ECONNABORTED;
}

static int fzx_ready(const struct pd_xport *x, uint32_t peer)
{
	(void)x;
	(void)peer;
	return 1;
}

/* The bytes of one transfer are all in one staging slot: read them. */
static void check(const struct fzx *f, const struct pd_xfer *t)
{
	const struct pd_pool *p = f->shm->send;
	const uint8_t *src = t->src;
	volatile uint8_t sum = 0;
	uint64_t off;

	if (t->len == 0)
		return;
	if (!src || src < p->arena || src >= p->arena + (uint64_t)p->nslots * p->slot_size)
		die("a transfer from outside the staging arena");
	off = (uint64_t)(src - p->arena);
	if (off % p->slot_size || t->len > p->slot_size)
		die("a transfer that is not within one staging slot");
	for (uint32_t i = 0; i < t->len; i++)
		sum = (uint8_t)(sum + src[i]);
	(void)sum;
}

static int fzx_post(struct pd_xport *x, uint32_t peer, const struct pd_xfer *v, uint32_t n)
{
	struct fzx *f = (struct fzx *)x;

	if (n > MAX_POSTED - f->n)
		return -EAGAIN;
	for (uint32_t i = 0; i < n; i++) {
		check(f, &v[i]);
		f->posted[f->n++] = (struct pd_cpl){ .cookie = v[i].cookie, .peer = peer,
						     .status = f->status, .kind = PD_CPL_WRITE };
	}
	return (int)n;
}

static int fzx_poll(struct pd_xport *x, struct pd_cpl *c, uint32_t max)
{
	struct fzx *f = (struct fzx *)x;
	uint32_t n = f->n < max ? f->n : max;

	memcpy(c, f->posted, n * sizeof(*c));
	memmove(f->posted, f->posted + n, (f->n - n) * sizeof(*c));
	f->n -= n;
	return (int)n;
}

static int fzx_event_fd(const struct pd_xport *x)
{
	(void)x;
	return -1; /* drained by the fixture every turn */
}

static uint32_t fzx_lanes(const struct pd_xport *x, uint32_t peer)
{
	(void)x;
	(void)peer;
	return 1;
}

static const struct pd_xport_ops fzx_ops = {
	.name = "tcp", .id = PD_XPORT_TCP, .destroy = fzx_destroy, .offer = fzx_offer,
	.connect = fzx_connect, .disconnect = fzx_disconnect, .ready = fzx_ready,
	.post = fzx_post, .poll = fzx_poll, .event_fd = fzx_event_fd, .lanes = fzx_lanes,
};

struct pd_xport *fzx_create(struct pd_shm *shm)
{
	struct fzx *f = calloc(1, sizeof(*f));

	if (!f)
		die("out of memory");
	f->base.ops = &fzx_ops;
	f->shm = shm;
	return &f->base;
}

void fzx_drain(struct pd_xport *x, void (*handle)(void *ctx, const struct pd_cpl *c, int n),
	       void *ctx)
{
	struct pd_cpl c[64];
	int n;

	while ((n = fzx_poll(x, c, 64)) > 0)
		handle(ctx, c, n);
}

void fzx_fail(struct pd_xport *x, int32_t status)
{
	((struct fzx *)x)->status = status;
}
