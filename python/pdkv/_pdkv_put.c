/* SPDX-License-Identifier: MIT */
/* pdkv._pdkv.Agent, the end of a loan: put(), release(), cancel(). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "_pdkv.h"
#include "pd_proto.h"

/* A batch being built: the chunks, and the objects that keep their keys alive. */
struct batch {
	struct pd_chunk *c;
	struct pdpy_buf **loans;
	PyObject **keys;
	Py_ssize_t n;   /* loans marked busy (and keys held) so far */
};

static void batch_free(struct batch *bt, int unmark)
{
	for (Py_ssize_t i = 0; i < bt->n; i++) {
		if (unmark)
			bt->loans[i]->busy = 0;
		Py_DECREF(bt->keys[i]);
	}
	free(bt->c);
	free(bt->loans);
	free(bt->keys);
}

/* A loan this agent may end now, or NULL with an exception set. */
static struct pdpy_buf *own_loan(pdpy_agent *self, PyObject *o, const char *what)
{
	struct pdpy_buf *b = (struct pdpy_buf *)o;

	if (!PyObject_TypeCheck(o, &pdpy_loan_type)) {
		PyErr_Format(PyExc_TypeError, "%s: a Loan, not %.80s", what, Py_TYPE(o)->tp_name);
		return NULL;
	}
	if (b->agent != self) {
		PyErr_Format(PyExc_ValueError, "%s: a loan of another agent", what);
		return NULL;
	}
	if (b->busy) {
		PyErr_Format(PyExc_ValueError, "%s: the same loan twice", what);
		return NULL;
	}
	if (!b->valid) {
		(void)pdpy_raise(-ESTALE, what, "the loan has ended");
		return NULL;
	}
	if (b->exports > 0) {
		PyErr_Format(PyExc_BufferError, "%s: %zd views of a loan are alive (delete them, "
			     "e.g. del the numpy array, before ending the loan)", what, b->exports);
		return NULL;
	}
	return b;
}

/* One (loan, key[, length]) item into bt. 0; -1 with an exception set. */
static int batch_add(pdpy_agent *self, struct batch *bt, PyObject *item)
{
	PyObject *loan, *key, *kb;
	struct pdpy_buf *b;
	Py_ssize_t len, i = bt->n;

	if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 2 || PyTuple_GET_SIZE(item) > 3) {
		PyErr_SetString(PyExc_TypeError, "put: each chunk is (loan, key) or (loan, key, length)");
		return -1;
	}
	loan = PyTuple_GET_ITEM(item, 0);
	key = PyTuple_GET_ITEM(item, 1);
	len = (Py_ssize_t)self->slot_size;
	if (PyTuple_GET_SIZE(item) == 3) {
		len = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 2));
		if (len == -1 && PyErr_Occurred())
			return -1;
		if (len < 0 || (uint64_t)len > self->slot_size) {
			PyErr_Format(PyExc_ValueError, "put: length %zd is not 0 to the slot's %llu",
				     len, (unsigned long long)self->slot_size);
			return -1;
		}
	}
	if (!(b = own_loan(self, loan, "put")) || !(kb = pdpy_bytes_arg(key, "put: key", PD_KEY_MAX)))
		return -1;
	b->busy = 1;
	bt->loans[i] = b;
	bt->keys[i] = kb;
	bt->c[i] = (struct pd_chunk){ .slot = b->ref, .len = (uint32_t)len,
				      .klen = (uint32_t)PyBytes_GET_SIZE(kb), .key = PyBytes_AS_STRING(kb) };
	bt->n++;
	return 0;
}

static int batch_build(pdpy_agent *self, struct batch *bt, PyObject *chunks)
{
	PyObject *seq = PySequence_Fast(chunks, "put: chunks must be a sequence");
	Py_ssize_t n;

	memset(bt, 0, sizeof(*bt));
	if (!seq)
		return -1;
	n = PySequence_Fast_GET_SIZE(seq);
	if (n > (Py_ssize_t)PD_PUT_MAX_CHUNKS) {
		Py_DECREF(seq);
		PyErr_Format(PyExc_ValueError, "put: at most %u chunks in a batch", PD_PUT_MAX_CHUNKS);
		return -1;
	}
	bt->c = calloc((size_t)n + 1, sizeof(*bt->c));
	bt->loans = calloc((size_t)n + 1, sizeof(*bt->loans));
	bt->keys = calloc((size_t)n + 1, sizeof(*bt->keys));
	if (!bt->c || !bt->loans || !bt->keys) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++)
		if (batch_add(self, bt, PySequence_Fast_GET_ITEM(seq, i)) < 0) {
			Py_DECREF(seq);
			return -1;
		}
	Py_DECREF(seq);
	return 0;
}

/* After pd_put(): which loans ended. Taken (0) or the broker gone: all;
 * refused with nothing taken: none, but a stale one (its slot is not ours
 * any more) ends so no view can reach the slot's next owner. */
static void batch_settle(pdpy_agent *self, struct batch *bt, int rc)
{
	for (Py_ssize_t i = 0; i < bt->n; i++) {
		struct pdpy_buf *b = bt->loans[i];

		b->busy = 0;
		if (rc == 0 || rc == -ENOTCONN || !pd_slot_data(self->a, b->ref))
			pdpy_buf_end(b);
	}
}

PyObject *pdpy_agent_put(PyObject *o, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "req_id", "endpoint", "chunks", "total_chunks", "world_size",
				  "rank", "last", NULL };
	pdpy_agent *self = (pdpy_agent *)o;
	PyObject *req, *ep, *chunks, *rb = NULL, *eb = NULL;
	unsigned int total, world = 1, rank = 0;
	int last = 0, rc;
	struct pd_batch pb;
	struct batch bt;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOI|IIp:put", kwlist, &req, &ep, &chunks,
					 &total, &world, &rank, &last) ||
	    pdpy_open_or_raise(self) < 0)
		return NULL;
	if (!(rb = pdpy_cstr_arg(req, "req_id", PD_REQ_ID_MAX)) ||
	    !(eb = pdpy_cstr_arg(ep, "endpoint", PD_ENDPOINT_MAX))) {
		Py_XDECREF(rb);
		return NULL;
	}
	if (batch_build(self, &bt, chunks) < 0) {
		batch_free(&bt, 1);
		Py_DECREF(rb);
		Py_DECREF(eb);
		return NULL;
	}
	pb = (struct pd_batch){ .req_id = PyBytes_AS_STRING(rb), .endpoint = PyBytes_AS_STRING(eb),
				.chunks = bt.c, .n = (uint32_t)bt.n, .total_chunks = total,
				.world_size = world, .rank = rank, .last = (uint32_t)last };
	NOGIL_BEGIN(self);
	(void)PyThread_acquire_lock(self->put_lock, WAIT_LOCK);
	rc = pd_put(self->a, &pb);
	PyThread_release_lock(self->put_lock);
	NOGIL_END(self);
	batch_settle(self, &bt, rc);
	batch_free(&bt, 0);
	if (rc < 0)
		(void)pdpy_raise(rc, "put", pb.req_id);
	Py_DECREF(rb);
	Py_DECREF(eb);
	if (rc < 0)
		return NULL;
	Py_RETURN_NONE;
}

PyObject *pdpy_agent_release(PyObject *o, PyObject *loans)
{
	pdpy_agent *self = (pdpy_agent *)o;
	PyObject *seq;
	struct pdpy_buf **bs;
	pd_slot_ref *refs;
	Py_ssize_t n, i;
	int rc = 0;

	if (pdpy_open_or_raise(self) < 0)
		return NULL;
	if (PyObject_TypeCheck(loans, &pdpy_loan_type)) {
		PyObject *t = PyTuple_Pack(1, loans);

		seq = t ? PySequence_Fast(t, "release: loans") : NULL;
		Py_XDECREF(t);
	} else {
		seq = PySequence_Fast(loans, "release: a Loan or a sequence of loans");
	}
	if (!seq)
		return NULL;
	n = PySequence_Fast_GET_SIZE(seq);
	bs = calloc((size_t)n + 1, sizeof(*bs));
	refs = calloc((size_t)n + 1, sizeof(*refs));
	for (i = 0; bs && refs && i < n; i++) {
		if (!(bs[i] = own_loan(self, PySequence_Fast_GET_ITEM(seq, i), "release")))
			break;
		bs[i]->busy = 1;
		refs[i] = bs[i]->ref;
	}
	if (!bs || !refs)
		PyErr_NoMemory();
	if (i == n && bs && refs) {
		NOGIL_BEGIN(self);
		rc = pd_slot_release(self->a, refs, (uint32_t)n);
		/* One stale ref refuses them all: release the others one by one. */
		for (Py_ssize_t j = 0; rc == -ESTALE && j < n; j++)
			(void)pd_slot_release(self->a, &refs[j], 1);
		NOGIL_END(self);
	}
	for (Py_ssize_t j = 0; bs && j < i; j++) {
		bs[j]->busy = 0;
		if (i == n && rc != -EINVAL) /* released, or stale: ended either way */
			pdpy_buf_end(bs[j]);
	}
	free(bs);
	free(refs);
	Py_DECREF(seq);
	if (PyErr_Occurred())
		return NULL;
	if (rc < 0 && rc != -ESTALE)
		return pdpy_raise(rc, "release", NULL);
	Py_RETURN_NONE;
}

PyObject *pdpy_agent_cancel(PyObject *o, PyObject *req)
{
	pdpy_agent *self = (pdpy_agent *)o;
	PyObject *rb;
	int rc;

	if (pdpy_open_or_raise(self) < 0 || !(rb = pdpy_cstr_arg(req, "req_id", PD_REQ_ID_MAX)))
		return NULL;
	NOGIL_BEGIN(self);
	rc = pd_cancel(self->a, PyBytes_AS_STRING(rb));
	NOGIL_END(self);
	if (rc < 0)
		(void)pdpy_raise(rc, "cancel", PyBytes_AS_STRING(rb));
	Py_DECREF(rb);
	if (rc < 0)
		return NULL;
	Py_RETURN_NONE;
}
