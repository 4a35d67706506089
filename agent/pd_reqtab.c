/* SPDX-License-Identifier: MIT */
/* libpdagent: the requests this agent declared, and the staging gate (pd_reqtab.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pd_reqtab.h"

static int ent_cmp(const struct pd_reqtab_ent *a, const struct pd_reqtab_ent *b)
{
	int c;

	if (a->id_len != b->id_len)
		return a->id_len < b->id_len ? -1 : 1;
	c = memcmp(a->id, b->id, a->id_len);
	return (c > 0) - (c < 0);
}

#define __unused __attribute__((unused)) /* libbsd's RB_GENERATE uses the BSD name */
RB_GENERATE_STATIC(pd_reqtab_tree, pd_reqtab_ent, node, ent_cmp)
#undef __unused

void pd_reqtab_init(struct pd_reqtab *t, uint32_t max)
{
	RB_INIT(&t->by_id);
	TAILQ_INIT(&t->ended);
	t->n = 0;
	t->nended = 0;
	t->max = max ? max : PD_REQTAB_MAX;
}

static void ent_free(struct pd_reqtab *t, struct pd_reqtab_ent *e)
{
	if (e->ranks && e->ended == e->ranks) {
		TAILQ_REMOVE(&t->ended, e, ended_link);
		t->nended--;
	}
	RB_REMOVE(pd_reqtab_tree, &t->by_id, e);
	t->n--;
	free(e);
}

void pd_reqtab_fini(struct pd_reqtab *t)
{
	struct pd_reqtab_ent *e;

	while ((e = RB_MIN(pd_reqtab_tree, &t->by_id)))
		ent_free(t, e);
}

static struct pd_reqtab_ent *find(const struct pd_reqtab *t, const uint8_t *id, uint32_t len)
{
	struct pd_reqtab_ent k;

	if (!id || len == 0 || len > PD_REQ_ID_MAX)
		return NULL;
	k.id_len = (uint8_t)len;
	memcpy(k.id, id, len);
	/* RB_FIND does not change the tree; its generated signature is not const. */
	return RB_FIND(pd_reqtab_tree, (struct pd_reqtab_tree *)(uintptr_t)&t->by_id, &k);
}

/* Every declared rank ended: the entry waits on t->ended to be evicted. */
static void note_ended(struct pd_reqtab *t, struct pd_reqtab_ent *e)
{
	if (e->ranks && e->ended == e->ranks) {
		TAILQ_INSERT_TAIL(&t->ended, e, ended_link);
		t->nended++;
	}
}

int pd_reqtab_declare(struct pd_reqtab *t, const uint8_t *id, uint32_t len, uint32_t rank)
{
	struct pd_reqtab_ent *e;
	uint64_t bit;

	if (rank >= PD_REQTAB_RANKS || !id || len == 0 || len > PD_REQ_ID_MAX)
		return -EINVAL;
	bit = 1ull << rank;
	e = find(t, id, len);
	if (e) {
		if (e->ranks & bit)
			return -EEXIST;
		if (e->ended == e->ranks) { /* a new rank reopens it */
			TAILQ_REMOVE(&t->ended, e, ended_link);
			t->nended--;
		}
		e->ranks |= bit;
		return 0;
	}
	if (t->n >= t->max) {
		if (!t->nended)
			return -EBUSY;
		ent_free(t, TAILQ_FIRST(&t->ended)); /* the oldest outcome makes room */
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->id_len = (uint8_t)len;
	memcpy(e->id, id, len);
	e->ranks = bit;
	RB_INSERT(pd_reqtab_tree, &t->by_id, e);
	t->n++;
	return 0;
}

void pd_reqtab_undeclare(struct pd_reqtab *t, const uint8_t *id, uint32_t len, uint32_t rank)
{
	struct pd_reqtab_ent *e = find(t, id, len);
	uint64_t bit = rank < PD_REQTAB_RANKS ? 1ull << rank : 0;

	if (!e || !(e->ranks & bit) || (e->ended & bit))
		return;
	e->ranks &= ~bit;
	e->admitted &= ~bit;
	if (!e->ranks) {
		ent_free(t, e);
		return;
	}
	note_ended(t, e); /* the ranks left may all have ended */
}

void pd_reqtab_admitted(struct pd_reqtab *t, const uint8_t *id, uint32_t len, uint32_t rank)
{
	struct pd_reqtab_ent *e = find(t, id, len);

	if (e && rank < PD_REQTAB_RANKS)
		e->admitted |= e->ranks & (1ull << rank);
}

void pd_reqtab_ended(struct pd_reqtab *t, const uint8_t *id, uint32_t len, uint32_t rank,
		     int32_t status)
{
	struct pd_reqtab_ent *e = find(t, id, len);
	uint64_t bit = rank < PD_REQTAB_RANKS ? 1ull << rank : 0;

	if (!e || !(e->ranks & bit) || (e->ended & bit))
		return;
	e->ended |= bit;
	if (status < 0 && !e->status)
		e->status = status;
	note_ended(t, e);
}

static int state_of(const struct pd_reqtab_ent *e)
{
	if (e->status)
		return PD_REQTAB_FAILED;
	if (e->ended == e->ranks)
		return PD_REQTAB_DONE;
	/* A rank that ended was admitted or failed; one that completed counts. */
	return (e->admitted | e->ended) == e->ranks ? PD_REQTAB_ADMITTED : PD_REQTAB_DECLARED;
}

int pd_reqtab_state(const struct pd_reqtab *t, const uint8_t *id, uint32_t len,
		    int32_t *status)
{
	const struct pd_reqtab_ent *e = find(t, id, len);

	if (!e)
		return -ENOENT;
	if (status)
		*status = e->status;
	return state_of(e);
}

int pd_reqtab_gate(const struct pd_reqtab *t, const uint8_t *id, uint32_t len)
{
	const struct pd_reqtab_ent *e = find(t, id, len);

	if (!e)
		return -ENOENT;
	switch (state_of(e)) {
	case PD_REQTAB_ADMITTED:
		return 0;
	case PD_REQTAB_DECLARED:
		return -EAGAIN;
	case PD_REQTAB_DONE:
		return -EALREADY;
	default: /* failed: as a pool wait the failure woke (tx wake_alloc) */
		return -ECANCELED;
	}
}
