/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_SEGMENT_FIXTURE_H
#define PD_TESTS_UNIT_SEGMENT_FIXTURE_H

/*
 * The fixture shared by test_segment.c and test_segment_validate.c.
 *
 * Every test gets a unique name (pd_test_name) and the teardown destroys
 * whatever the test created or attached and unlinks the name, even when the
 * test failed. Static inline functions only: each binary uses a subset.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "pd_test.h"
#include "pd_compiler.h"
#include "pd_err.h"
#include "pd_segment.h"

#define PAGE 4096u

/* A header corruption; defined by test_segment_validate.c. */
struct corruption;

struct fx {
	char name[PD_SHM_NAME_MAX + 1];
	struct pd_segment_opts opts;
	struct pd_segment seg;  /* created by this process */
	struct pd_segment next; /* a later create of the same name */
	struct pd_segment att;  /* attached */
	struct pd_segment att2; /* attached again */
	struct pd_shm_hdr *buf; /* hand-built header for pd_segment_validate() */
	const struct corruption *corr;
	int pipe[4];            /* a child broker's: up (read, write), down (read, write) */
	char err[256];
};

/* The region sizes every test creates with. Odd lengths on purpose: the
 * layout must align every region itself. */
static inline const uint64_t *fx_region_len(void)
{
	static const uint64_t len[PD_REGION_MAX] = {
		[PD_REGION_CONTROL]    = 4096,
		[PD_REGION_SEND_POOL]  = 10000,
		[PD_REGION_RECV_POOL]  = 100,
		[PD_REGION_AGENTS]     = 8192,
		[PD_REGION_RECV_INDEX] = 4096,
		[PD_REGION_SEND_ARENA] = 65536,
		[PD_REGION_RECV_ARENA] = 65537,
	};

	return len;
}

static inline int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	f->corr = *state; /* prestate of the corruption tests, else NULL */
	pd_test_name(f->name, sizeof(f->name), "seg");
	f->opts.name = f->name;
	f->opts.epoch = 42;
	memcpy(f->opts.region_len, fx_region_len(), sizeof(f->opts.region_len));
	f->seg.fd = f->next.fd = f->att.fd = f->att2.fd = -1;
	*state = f;
	return 0;
}

/*
 * Any order works: a creator's destroy unlinks the name only while it still
 * refers to its own segment (never a successor's), and the final unlink
 * removes whatever is left there (a dead child's segment, a foreign file).
 */
static inline int teardown(void **state)
{
	struct fx *f = *state;

	if (!f)
		return 0;
	pd_segment_destroy(&f->att2);
	pd_segment_destroy(&f->att);
	pd_segment_destroy(&f->seg);
	pd_segment_destroy(&f->next);
	(void)pd_segment_unlink(f->name);
	free(f->buf);
	free(f);
	*state = NULL;
	return 0;
}

static inline int create(struct fx *f, struct pd_segment *s)
{
	f->err[0] = '\0';
	return pd_segment_create(&f->opts, s, f->err, sizeof(f->err));
}

static inline int attach(struct fx *f, struct pd_segment *s, uint32_t flags,
			 uint32_t timeout_ms)
{
	f->err[0] = '\0';
	return pd_segment_attach(f->name, flags, timeout_ms, s, f->err, sizeof(f->err));
}

/* cmocka skips the teardown when a setup fails: release the fixture here. */
static inline int setup_created(void **state)
{
	struct fx *f;

	if (setup(state) < 0)
		return -1;
	f = *state;
	if (create(f, &f->seg) == 0)
		return 0;
	print_error("setup: create '%s': %s\n", f->name, f->err);
	(void)teardown(state);
	return -1;
}

static inline int setup_published(void **state)
{
	if (setup_created(state) < 0)
		return -1;
	pd_segment_publish(&((struct fx *)*state)->seg);
	return 0;
}

static inline int validate(struct fx *f, const struct pd_shm_hdr *h, size_t len)
{
	f->err[0] = '\0';
	return pd_segment_validate(h, len, f->err, sizeof(f->err));
}

/* The segment's file, opened behind the API's back; fd or -errno. */
static inline int open_file(const char *name, int oflag)
{
	char path[128];

	(void)snprintf(path, sizeof(path), "%s%s", PD_SHM_PREFIX, name);
	return pd_sys_rc(shm_open(path, oflag | O_CLOEXEC, 0600));
}

static inline uint64_t lowest_unknown_bit(uint64_t known)
{
	uint64_t unknown = ~known;

	return unknown & (~unknown + 1);
}

#endif
