/* SPDX-License-Identifier: MIT */
/*
 * pd_segment_validate() and the attach paths that rely on it: a hand-built
 * header with every way it can be corrupt, the same corruptions in a live
 * segment, and a segment file whose size no longer matches its header.
 * Each must be refused with -EPROTO and a reason.
 *
 * The fixture (names, setup, teardown) is in segment_fixture.h;
 * test_segment.c covers arguments, create, attach, probe, reclaim, destroy.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include "pd_hugetlb.h"
#include "segment_fixture.h"

#define BUILT_LEN 16384u /* the hand-built header's "mapping" */

struct corruption {
	const char *what;
	void (*apply)(struct pd_shm_hdr *h);
};

/* Independent of the layout code: leaves slack after SEND_POOL, and
 * RECV_INDEX ends exactly at BUILT_LEN. */
static const struct pd_shm_region built_regions[PD_REGION_MAX] = {
	[PD_REGION_CONTROL]    = { 512, 448 },
	[PD_REGION_SEND_POOL]  = { 1024, 960 },
	[PD_REGION_RECV_POOL]  = { 2048, 2048 },
	[PD_REGION_AGENTS]     = { 4096, 4000 },
	[PD_REGION_RECV_INDEX] = { 8192, 8192 },
};

/* ---- helpers --------------------------------------------------------------- */

static void resize_file(const char *name, off_t len)
{
	int fd = open_file(name, O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, len), 0);
	(void)close(fd);
}

/* Both kinds of attach refuse the segment with -EPROTO and say why. */
static void expect_attach_eproto(struct fx *f)
{
	static const uint32_t flags[] = { 0, PD_SEG_RDONLY };

	for (size_t i = 0; i < PD_ARRAY_SIZE(flags); i++) {
		assert_int_equal(attach(f, &f->att2, flags[i], 100), -EPROTO);
		assert_true(f->err[0] != '\0');
		assert_null(f->att2.base);
	}
}

static void build_hdr(struct pd_shm_hdr *h, size_t len)
{
	memset(h, 0, len);
	h->magic = PD_SHM_MAGIC;
	h->abi_major = PD_SHM_ABI_MAJOR;
	h->abi_minor = PD_SHM_ABI_MINOR;
	h->hdr_size = PD_SHM_HDR_SIZE;
	h->total_size = len;
	h->broker_pid = (int32_t)getpid();
	h->nregions = PD_REGION_MAX;
	atomic_init(&h->state, PD_SHM_READY);
	(void)snprintf(h->name, sizeof(h->name), "built");
	memcpy(h->regions, built_regions, sizeof(h->regions));
}

static struct pd_shm_hdr *built_hdr(struct fx *f)
{
	f->buf = aligned_alloc(PAGE, BUILT_LEN);
	assert_non_null(f->buf);
	build_hdr(f->buf, BUILT_LEN);
	return f->buf;
}

/* ---- header corruptions: each must make validate and attach say -EPROTO --- */

static void corrupt_magic(struct pd_shm_hdr *h)
{
	h->magic ^= 1;
}

static void corrupt_abi_major(struct pd_shm_hdr *h)
{
	h->abi_major++;
}

static void corrupt_hdr_size(struct pd_shm_hdr *h)
{
	h->hdr_size += PD_REGION_ALIGN;
}

static void corrupt_total_size(struct pd_shm_hdr *h)
{
	h->total_size += PAGE;
}

static void corrupt_incompat(struct pd_shm_hdr *h)
{
	h->incompat_features |= lowest_unknown_bit(PD_SHM_INCOMPAT_KNOWN);
}

static void corrupt_nregions(struct pd_shm_hdr *h)
{
	h->nregions = PD_REGION_MAX + 1;
}

static void corrupt_state(struct pd_shm_hdr *h)
{
	atomic_store(&h->state, PD_SHM_DEAD + 1);
}

static void corrupt_name(struct pd_shm_hdr *h)
{
	memset(h->name, 'x', sizeof(h->name));
}

/* One byte past the end of the segment. */
static void corrupt_region_oob(struct pd_shm_hdr *h)
{
	struct pd_shm_region *r = &h->regions[PD_REGION_RECV_INDEX];

	r->len = h->total_size - r->off + 1;
}

/* off + len wraps around to 0. */
static void corrupt_region_wraps(struct pd_shm_hdr *h)
{
	struct pd_shm_region *r = &h->regions[PD_REGION_RECV_INDEX];

	r->len = UINT64_MAX - r->off + 1;
}

/* Half an alignment unit: still in bounds and clear of the next region. */
static void corrupt_region_misaligned(struct pd_shm_hdr *h)
{
	h->regions[PD_REGION_SEND_POOL].off += PD_REGION_ALIGN / 2;
}

/* SEND_POOL grows one byte into RECV_POOL. */
static void corrupt_regions_overlap(struct pd_shm_hdr *h)
{
	struct pd_shm_region *a = &h->regions[PD_REGION_SEND_POOL];

	a->len = h->regions[PD_REGION_RECV_POOL].off - a->off + 1;
}

/* Aligned and in bounds, but starts inside the header. */
static void corrupt_region_over_hdr(struct pd_shm_hdr *h)
{
	h->regions[PD_REGION_CONTROL].off = PD_SHM_HDR_SIZE - PD_REGION_ALIGN;
}

#define CORRUPTIONS(X) \
	X(magic) X(abi_major) X(hdr_size) X(total_size) X(incompat) X(nregions) \
	X(state) X(name) X(region_oob) X(region_wraps) X(region_misaligned) \
	X(regions_overlap) X(region_over_hdr)

#define CORRUPTION_DEF(c) static struct corruption corr_##c = { #c, corrupt_##c };
CORRUPTIONS(CORRUPTION_DEF)

/* ---- a header whose arenas are in an arena file ----------------------------- */

#define MIB (UINT64_C(1) << 20)

/* The built header, its arenas in an 8 MiB arena file: offsets there start
 * at 0, so they lie over the header's own bytes, which is legal. */
static struct pd_shm_hdr *arena_hdr(struct fx *f)
{
	struct pd_shm_hdr *h = built_hdr(f);

	h->incompat_features |= PD_SHM_INCOMPAT_ARENA_FILE;
	h->arena_size = 8 * MIB;
	h->arena_fd = 3;
	h->arena_page = PD_HUGETLB_PAGE;
	h->regions[PD_REGION_SEND_ARENA] = (struct pd_shm_region){ 0, 2 * MIB };
	h->regions[PD_REGION_RECV_ARENA] = (struct pd_shm_region){ 2 * MIB, 5 * MIB + 4096 };
	return h;
}

static void arena_size_odd(struct pd_shm_hdr *h)
{
	h->arena_size += 4096;
}

static void arena_size_zero(struct pd_shm_hdr *h)
{
	h->arena_size = 0;
}

static void arena_page_4k(struct pd_shm_hdr *h)
{
	h->arena_page = 4096;
}

static void arena_fd_none(struct pd_shm_hdr *h)
{
	h->arena_fd = -1;
}

/* In bounds and clear of the other arena, but not on a huge page's start. */
static void arena_misaligned(struct pd_shm_hdr *h)
{
	h->regions[PD_REGION_SEND_ARENA] = (struct pd_shm_region){ 4096, 1 * MIB };
}

/* One byte past the end of the arena file. */
static void arena_oob(struct pd_shm_hdr *h)
{
	struct pd_shm_region *r = &h->regions[PD_REGION_RECV_ARENA];

	r->len = h->arena_size - r->off + 1;
}

static void arenas_overlap(struct pd_shm_hdr *h)
{
	h->regions[PD_REGION_SEND_ARENA].len = 2 * MIB + 1;
}

/* Without the feature bit the same offsets are in the segment: refused. */
static void arena_bit_cleared(struct pd_shm_hdr *h)
{
	h->incompat_features &= ~PD_SHM_INCOMPAT_ARENA_FILE;
}

static void test_validate_arena_file(void **state)
{
	static const struct corruption bad[] = {
		{ "arena_size_odd", arena_size_odd }, { "arena_size_zero", arena_size_zero },
		{ "arena_page_4k", arena_page_4k }, { "arena_fd_none", arena_fd_none },
		{ "arena_misaligned", arena_misaligned }, { "arena_oob", arena_oob },
		{ "arenas_overlap", arenas_overlap }, { "arena_bit_cleared", arena_bit_cleared },
	};
	struct fx *f = *state;

	assert_int_equal(validate(f, arena_hdr(f), BUILT_LEN), 0);
	for (size_t i = 0; i < PD_ARRAY_SIZE(bad); i++) {
		free(f->buf);
		bad[i].apply(arena_hdr(f));
		if (validate(f, f->buf, BUILT_LEN) != -EPROTO || f->err[0] == '\0')
			fail_msg("arena file corruption '%s' passed validation", bad[i].what);
	}
}

/* Only a hugetlb file of the header's size is taken as the arena file. */
static void test_map_arenas_refuses_other_files(void **state)
{
	struct fx *f = *state;
	struct pd_segment s = { .base = built_hdr(f), .arena_size = 4 * MIB, .arena_fd = -1 };
	int fd = memfd_create("not-hugetlb", MFD_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)s.arena_size), 0);
	assert_int_equal(pd_hugetlb_check(fd, s.arena_size), -EPROTO);
	assert_int_equal(pd_segment_map_arenas(&s, fd, 0), -EPROTO);
	assert_null(s.arena_base);
	assert_int_equal(pd_segment_map_arenas(&s, -1, 0), -EINVAL);
	s.arena_size = 0; /* no arena file */
	assert_int_equal(pd_segment_map_arenas(&s, fd, 0), -EINVAL);
	(void)close(fd);
}

/* ---- negative tests -------------------------------------------------------- */

static void test_validate_null(void **state)
{
	struct fx *f = *state;

	assert_int_equal(validate(f, NULL, BUILT_LEN), -EINVAL);
}

/* The hand-built header passes; edge cases that are still legal pass too. */
static void test_validate_built_ok(void **state)
{
	struct fx *f = *state;
	struct pd_shm_hdr *h = built_hdr(f);
	struct pd_shm_region *a = &h->regions[PD_REGION_SEND_POOL];

	assert_int_equal(validate(f, h, BUILT_LEN), 0);
	/* Regions that touch do not overlap. */
	a->len = h->regions[PD_REGION_RECV_POOL].off - a->off;
	assert_int_equal(validate(f, h, BUILT_LEN), 0);
	atomic_store(&h->state, PD_SHM_INITIALIZING);
	h->compat_features = lowest_unknown_bit(PD_SHM_COMPAT_KNOWN);
	h->abi_minor++;
	assert_int_equal(validate(f, h, BUILT_LEN), 0);
}

static void test_validate_bad_maplen(void **state)
{
	struct fx *f = *state;
	struct pd_shm_hdr *h = built_hdr(f);
	static const size_t lens[] = { 0, 100, PD_SHM_HDR_SIZE - 1, PD_SHM_HDR_SIZE,
				       BUILT_LEN - PD_REGION_ALIGN, BUILT_LEN + PAGE };

	for (size_t i = 0; i < PD_ARRAY_SIZE(lens); i++) {
		if (validate(f, h, lens[i]) != -EPROTO || f->err[0] == '\0')
			fail_msg("maplen %zu accepted", lens[i]);
	}
}

static void test_validate_rejects(void **state)
{
	struct fx *f = *state;
	struct pd_shm_hdr *h = built_hdr(f);

	assert_int_equal(validate(f, h, BUILT_LEN), 0);
	f->corr->apply(h);
	if (validate(f, h, BUILT_LEN) != -EPROTO || f->err[0] == '\0')
		fail_msg("corruption '%s' passed validation", f->corr->what);
}

/* The live segment, corrupted through a read-write attachment. */
static void test_attach_rejects(void **state)
{
	struct fx *f = *state;

	assert_int_equal(attach(f, &f->att, 0, 0), 0);
	f->corr->apply(f->att.hdr);
	expect_attach_eproto(f);
	assert_int_equal(pd_segment_attach_fd(f->seg.fd, 0, 0, &f->att2, f->err,
					      sizeof(f->err)), -EPROTO);
}

static void test_attach_rejects_file_bigger(void **state)
{
	struct fx *f = *state;

	resize_file(f->name, (off_t)(f->seg.len + PAGE));
	expect_attach_eproto(f);
}

static void test_attach_rejects_file_smaller(void **state)
{
	struct fx *f = *state;

	resize_file(f->name, (off_t)(f->seg.len - PAGE));
	expect_attach_eproto(f);
}

/* Smaller than the header (not 0: the creator's page 0 must stay). */
static void test_attach_rejects_file_truncated(void **state)
{
	struct fx *f = *state;

	resize_file(f->name, 100);
	expect_attach_eproto(f);
	assert_int_equal(pd_segment_probe(f->name, NULL), -EPROTO);
}

/* ---- main ------------------------------------------------------------------ */

#define T(fn, set) cmocka_unit_test_setup_teardown(fn, set, teardown)
#define VALIDATE_TEST(c) \
	{ "validate_rejects_" #c, test_validate_rejects, setup, teardown, &corr_##c },
#define ATTACH_TEST(c) \
	{ "attach_rejects_" #c, test_attach_rejects, setup_published, teardown, &corr_##c },

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_validate_null, setup),
		T(test_validate_built_ok, setup),
		T(test_validate_bad_maplen, setup),
		T(test_validate_arena_file, setup),
		T(test_map_arenas_refuses_other_files, setup),
		CORRUPTIONS(VALIDATE_TEST)
		CORRUPTIONS(ATTACH_TEST)
		T(test_attach_rejects_file_bigger, setup_published),
		T(test_attach_rejects_file_smaller, setup_published),
		T(test_attach_rejects_file_truncated, setup_published),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
