/* SPDX-License-Identifier: MIT */
/* pdkv._pdkv.Agent, waiting and receiving: next_event(), recv_wait(), lookup(),
 * recv_release(). An endless wait is slices of SLICE_MS, with a look at
 * signals (Ctrl-C) and at close() between them. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "_pdkv.h"
#include "pd_agent_ext.h"
#include "pd_proto.h"

#define SLICE_MS 1000u

static uint64_t now_ms(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Between two slices: 0 to go on; -1 with an exception (a signal's, or closed). */
static int between_slices(pdpy_agent *self)
{
	if (PyErr_CheckSignals() < 0)
		return -1;
	return pdpy_open_or_raise(self);
}

/* The next slice of a wait until deadline (UINT64_MAX: none): its ms, 0 when over. */
static uint32_t slice(uint64_t deadline)
{
	uint64_t now = now_ms();

	if (deadline == UINT64_MAX)
		return SLICE_MS;
	if (now >= deadline)
		return 0;
	return deadline - now < SLICE_MS ? (uint32_t)(deadline - now) : SLICE_MS;
}

static int wait_args(PyObject *tmo, uint64_t *deadline, uint32_t *first)
{
	uint32_t ms;

	if (tmo == Py_None) {
		*deadline = UINT64_MAX;
		*first = SLICE_MS;
		return 0;
	}
	if (pdpy_timeout_ms(tmo, 0, &ms) < 0)
		return -1;
	*deadline = now_ms() + ms;
	*first = ms < SLICE_MS ? ms : SLICE_MS;
	return 0;
}

PyObject *pdpy_agent_next_event(PyObject *o, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "timeout", NULL };
	pdpy_agent *self = (pdpy_agent *)o;
	PyObject *tmo = NULL;
	struct pd_event ev;
	uint64_t deadline;
	uint32_t ms;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:next_event", kwlist, &tmo) ||
	    pdpy_open_or_raise(self) < 0)
		return NULL;
	if (!tmo) { /* the default, 0: do not wait */
		deadline = now_ms();
		ms = 0;
	} else if (wait_args(tmo, &deadline, &ms) < 0) {
		return NULL;
	}
	for (;;) {
		NOGIL_BEGIN(self);
		rc = pd_next_event(self->a, &ev, ms);
		NOGIL_END(self);
		if (rc != -ETIMEDOUT)
			break;
		ms = slice(deadline);
		if (ms == 0)
			Py_RETURN_NONE;
		if (between_slices(self) < 0)
			return NULL;
	}
	if (rc < 0)
		return pdpy_raise(rc, "next_event", NULL);
	return pdpy_event_new(&ev);
}

/* The receiver's tag of a request, learnt from recv_wait(). */
static int remember_tag(pdpy_agent *self, PyObject *req, uint64_t tag)
{
	PyObject *t = PyLong_FromUnsignedLongLong(tag);
	int rc = t ? PyDict_SetItem(self->tags, req, t) : -1;

	Py_XDECREF(t);
	return rc;
}

PyObject *pdpy_agent_recv_wait(PyObject *o, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "req_id", "timeout", NULL };
	pdpy_agent *self = (pdpy_agent *)o;
	PyObject *req, *tmo = Py_None, *rb, *res = NULL;
	struct pd_recv_info info;
	uint64_t deadline, tag = 0;
	uint32_t ms;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:recv_wait", kwlist, &req, &tmo) ||
	    pdpy_open_or_raise(self) < 0 || wait_args(tmo, &deadline, &ms) < 0 ||
	    !(rb = pdpy_cstr_arg(req, "req_id", PD_REQ_ID_MAX)))
		return NULL;
	for (;;) {
		NOGIL_BEGIN(self);
		rc = pd_ag_recv_wait_tag(self->a, PyBytes_AS_STRING(rb), ms, &info, &tag);
		NOGIL_END(self);
		if (rc != -ETIMEDOUT || (ms = slice(deadline)) == 0 || between_slices(self) < 0)
			break;
	}
	if (rc == 0 && tag && remember_tag(self, rb, tag) < 0)
		rc = -ENOMEM;
	if (rc == 0)
		res = pdpy_recv_info_new(&info);
	else if (!PyErr_Occurred())
		(void)pdpy_raise(rc, "recv_wait", PyBytes_AS_STRING(rb));
	Py_DECREF(rb);
	return res;
}

PyObject *pdpy_agent_lookup(PyObject *o, PyObject *key)
{
	pdpy_agent *self = (pdpy_agent *)o;
	const void *ptr = NULL;
	uint32_t len = 0;
	PyObject *kb, *c = NULL;
	uint64_t tag = 0;
	int rc;

	if (pdpy_open_or_raise(self) < 0 || !(kb = pdpy_bytes_arg(key, "key", PD_KEY_MAX)))
		return NULL;
	rc = pd_ag_recv_lookup_tag(self->a, PyBytes_AS_STRING(kb), (uint32_t)PyBytes_GET_SIZE(kb),
				   &ptr, &len, &tag);
	if (rc < 0)
		(void)pdpy_raise(rc, "lookup", PyBytes_AS_STRING(kb));
	else
		c = pdpy_buf_new(&pdpy_chunk_type, self, (void *)(uintptr_t)ptr, (Py_ssize_t)len,
				 tag);
	Py_DECREF(kb);
	return c;
}

/* Is b a chunk that recv_release() of the request with tag may end? known:
 * the tag is the request's (recv_wait told); else the request is any whose
 * tag this agent has not learnt. */
static int may_end(pdpy_agent *self, const struct pdpy_buf *b, uint64_t tag, int known)
{
	PyObject *v;
	Py_ssize_t pos = 0;

	if (b->ob_base.ob_type != &pdpy_chunk_type || !b->valid)
		return 0;
	if (known)
		return b->ref == tag;
	while (PyDict_Next(self->tags, &pos, NULL, &v))
		if (PyLong_AsUnsignedLongLong(v) == b->ref)
			return 0;
	return 1;
}

/* The tag of req (0, known 0: not learnt). */
static uint64_t known_tag(pdpy_agent *self, PyObject *req, int *known)
{
	PyObject *v = PyDict_GetItemWithError(self->tags, req);

	*known = v != NULL;
	return v ? PyLong_AsUnsignedLongLong(v) : 0;
}

/* Not recv_wait()ed: ask the broker once (a round trip: a request that can
 * be released is complete, so it answers at once) for the request's tag.
 * 0 learnt; -1 not (no exception set). */
static int learn_tag(pdpy_agent *self, PyObject *req)
{
	struct pd_recv_info info;
	uint64_t tag = 0;
	int rc;

	NOGIL_BEGIN(self);
	rc = pd_ag_recv_wait_tag(self->a, PyBytes_AS_STRING(req), 0, &info, &tag);
	NOGIL_END(self);
	if (rc == 0 && tag && remember_tag(self, req, tag) == 0)
		return 0;
	PyErr_Clear();
	return -1;
}

PyObject *pdpy_agent_recv_release(PyObject *o, PyObject *req)
{
	pdpy_agent *self = (pdpy_agent *)o;
	Py_ssize_t views = 0;
	uint64_t tag, got = 0;
	PyObject *rb;
	int rc, known;

	if (pdpy_open_or_raise(self) < 0 || !(rb = pdpy_cstr_arg(req, "req_id", PD_REQ_ID_MAX)))
		return NULL;
	tag = known_tag(self, rb, &known);
	if (!known && learn_tag(self, rb) == 0)
		tag = known_tag(self, rb, &known);
	for (struct pdpy_buf *b = self->bufs; b; b = b->next)
		if (may_end(self, b, tag, known))
			views += b->exports;
	if (views > 0) {
		Py_DECREF(rb);
		return PyErr_Format(PyExc_BufferError, "recv_release: %zd views of %s chunks are "
				    "alive (delete them first)", views,
				    known ? "the request's" : "this agent's");
	}
	/* No view can be taken while the pins go. */
	for (struct pdpy_buf *b = self->bufs; b; b = b->next)
		if (may_end(self, b, tag, known))
			b->busy = 1;
	NOGIL_BEGIN(self);
	rc = pd_ag_recv_release_tag(self->a, PyBytes_AS_STRING(rb), &got);
	NOGIL_END(self);
	for (struct pdpy_buf *b = self->bufs; b; b = b->next) {
		if (!b->busy || !Py_IS_TYPE((PyObject *)b, &pdpy_chunk_type))
			continue;
		b->busy = 0;
		if (got && b->ref == got) /* its pin went */
			pdpy_buf_end(b);
	}
	if (known && PyDict_DelItem(self->tags, rb) < 0)
		PyErr_Clear();
	if (rc < 0)
		(void)pdpy_raise(rc, "recv_release", PyBytes_AS_STRING(rb));
	Py_DECREF(rb);
	if (rc < 0)
		return NULL;
	Py_RETURN_NONE;
}
