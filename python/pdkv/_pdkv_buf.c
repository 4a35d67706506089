/* SPDX-License-Identifier: MIT */
/* pdkv._pdkv: Loan (a loaned send slot, writable) and Chunk (a pinned received
 * chunk, read-only), buffers over the shared memory itself. */
#include <errno.h>
#include <string.h>

#include "_pdkv.h"

PyObject *pdpy_buf_new(PyTypeObject *type, pdpy_agent *ag, void *data, Py_ssize_t len,
		       uint64_t ref)
{
	struct pdpy_buf *b = PyObject_New(struct pdpy_buf, type);

	if (!b)
		return NULL;
	b->agent = (pdpy_agent *)Py_NewRef((PyObject *)ag);
	b->data = data;
	b->len = len;
	b->ref = ref;
	b->exports = 0;
	b->valid = 1;
	b->busy = 0;
	b->prev = NULL;
	b->next = ag->bufs;
	if (ag->bufs)
		ag->bufs->prev = b;
	ag->bufs = b;
	return (PyObject *)b;
}

void pdpy_buf_end(struct pdpy_buf *b)
{
	b->valid = 0;
	b->data = NULL;
}

static void buf_unlink(struct pdpy_buf *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else if (b->agent->bufs == b)
		b->agent->bufs = b->next;
	if (b->next)
		b->next->prev = b->prev;
	b->prev = b->next = NULL;
}

static void loan_dealloc(PyObject *self)
{
	struct pdpy_buf *b = (struct pdpy_buf *)self;
	pdpy_agent *ag = b->agent;
	int unended = b->valid && ag->a && !ag->closing;
	pd_slot_ref ref = b->ref;

	buf_unlink(b); /* off the agent's list before the GIL goes */
	/* A loan dropped without put() or release() goes back to the pool,
	 * as a file dropped unclosed is closed: held, it would outlive the
	 * broker's --loan-timeout and get this process fenced. The pool's
	 * mutex may be busy: not with the GIL held, and counted so a close()
	 * on another thread waits for it. */
	if (unended) {
		NOGIL_BEGIN(ag);
		(void)pd_slot_release(ag->a, &ref, 1);
		NOGIL_END(ag);
	}
	Py_DECREF(ag);
	PyObject_Free(self);
}

static void chunk_dealloc(PyObject *self)
{
	struct pdpy_buf *b = (struct pdpy_buf *)self;

	/* The pin stays with its request: recv_release() drops it. */
	buf_unlink(b);
	Py_DECREF(b->agent);
	PyObject_Free(self);
}

static int buf_get(struct pdpy_buf *b, Py_buffer *view, int flags, int readonly)
{
	if (!b->valid) {
		view->obj = NULL;
		(void)pdpy_raise(-ESTALE, readonly ? "Chunk: its request was released" :
						     "Loan: the loan has ended (put or release)",
				 NULL);
		return -1;
	}
	if (b->busy) {
		view->obj = NULL;
		PyErr_Format(PyExc_BufferError, "%s: being handed back", Py_TYPE(b)->tp_name);
		return -1;
	}
	if (PyBuffer_FillInfo(view, (PyObject *)b, b->data, b->len, readonly, flags) < 0)
		return -1;
	b->exports++;
	return 0;
}

static int loan_getbuf(PyObject *self, Py_buffer *view, int flags)
{
	return buf_get((struct pdpy_buf *)self, view, flags, 0);
}

static int chunk_getbuf(PyObject *self, Py_buffer *view, int flags)
{
	return buf_get((struct pdpy_buf *)self, view, flags, 1);
}

static void buf_release(PyObject *self, Py_buffer *view)
{
	(void)view;
	((struct pdpy_buf *)self)->exports--;
}

static Py_ssize_t buf_len(PyObject *self)
{
	struct pdpy_buf *b = (struct pdpy_buf *)self;

	if (!b->valid) {
		(void)pdpy_raise(-ESTALE, Py_TYPE(self)->tp_name, "ended");
		return -1;
	}
	return b->len;
}

/* Loan.write(data, offset=0): copy a buffer in, without the GIL. */
static PyObject *loan_write(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "data", "offset", NULL };
	struct pdpy_buf *b = (struct pdpy_buf *)self;
	Py_ssize_t off = 0;
	Py_buffer src;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "y*|n:write", kwlist, &src, &off))
		return NULL;
	if (!b->valid || b->busy) {
		PyBuffer_Release(&src);
		return pdpy_raise(-ESTALE, "Loan.write", "the loan has ended");
	}
	if (off < 0 || off > b->len || src.len > b->len - off) {
		PyBuffer_Release(&src);
		return PyErr_Format(PyExc_ValueError, "Loan.write: %zd bytes at offset %zd do not fit "
				    "the slot's %zd", src.len, off, b->len);
	}
	/* The loan cannot end while we copy: ending it needs no exports, and
	 * this copy counts as one. */
	b->exports++;
	Py_BEGIN_ALLOW_THREADS
	memcpy((char *)b->data + off, src.buf, (size_t)src.len);
	Py_END_ALLOW_THREADS
	b->exports--;
	PyBuffer_Release(&src);
	return PyLong_FromSsize_t(src.len);
}

/* Chunk.read_into(buffer, offset=0): copy the chunk out, without the GIL. */
static PyObject *chunk_read_into(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "buffer", "offset", NULL };
	struct pdpy_buf *b = (struct pdpy_buf *)self;
	Py_ssize_t off = 0, n;
	Py_buffer dst;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "w*|n:read_into", kwlist, &dst, &off))
		return NULL;
	if (!b->valid) {
		PyBuffer_Release(&dst);
		return pdpy_raise(-ESTALE, "Chunk.read_into", "its request was released");
	}
	if (off < 0 || off > b->len) {
		PyBuffer_Release(&dst);
		return PyErr_Format(PyExc_ValueError, "Chunk.read_into: offset %zd past the chunk's "
				    "%zd bytes", off, b->len);
	}
	n = b->len - off < dst.len ? b->len - off : dst.len;
	b->exports++;
	Py_BEGIN_ALLOW_THREADS
	memcpy(dst.buf, (const char *)b->data + off, (size_t)n);
	Py_END_ALLOW_THREADS
	b->exports--;
	PyBuffer_Release(&dst);
	return PyLong_FromSsize_t(n);
}

static PyObject *buf_valid(PyObject *self, void *closure)
{
	(void)closure;
	return PyBool_FromLong(((struct pdpy_buf *)self)->valid);
}

static PyObject *loan_slot(PyObject *self, void *closure)
{
	(void)closure;
	return PyLong_FromUnsignedLongLong(((struct pdpy_buf *)self)->ref);
}

static PyObject *buf_repr(PyObject *self)
{
	struct pdpy_buf *b = (struct pdpy_buf *)self;

	return PyUnicode_FromFormat("<%s %zd bytes%s>", Py_TYPE(self)->tp_name, b->len,
				    b->valid ? "" : ", ended");
}

static PyBufferProcs loan_as_buffer = { loan_getbuf, buf_release };
static PyBufferProcs chunk_as_buffer = { chunk_getbuf, buf_release };
static PySequenceMethods buf_as_seq = { .sq_length = buf_len };

static PyMethodDef loan_methods[] = {
	{ "write", (PyCFunction)(void (*)(void))loan_write, METH_VARARGS | METH_KEYWORDS,
	  "write(data, offset=0) -> int: copy a bytes-like object into the slot (the GIL "
	  "released while it copies); returns the bytes copied." },
	{ NULL, NULL, 0, NULL },
};

static PyMethodDef chunk_methods[] = {
	{ "read_into", (PyCFunction)(void (*)(void))chunk_read_into, METH_VARARGS | METH_KEYWORDS,
	  "read_into(buffer, offset=0) -> int: copy the chunk from offset into a writable "
	  "buffer (the GIL released while it copies); returns the bytes copied." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef loan_getset[] = {
	{ "valid", buf_valid, NULL, "True until the loan ends (put, release, close).", NULL },
	{ "slot", loan_slot, NULL, "The slot reference (index and generation).", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

static PyGetSetDef chunk_getset[] = {
	{ "valid", buf_valid, NULL, "True until its request is released (or the agent closed).",
	  NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject pdpy_loan_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "pdkv.Loan",
	.tp_basicsize = sizeof(struct pdpy_buf),
	.tp_dealloc = loan_dealloc,
	.tp_repr = buf_repr,
	.tp_as_sequence = &buf_as_seq,
	.tp_as_buffer = &loan_as_buffer,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A loaned send slot: a writable buffer of Agent.slot_size bytes of the "
		  "broker's staging memory (numpy.frombuffer(loan, dtype) is a view of it). "
		  "Agent.put() or Agent.release() ends the loan; neither runs while a view is "
		  "alive (BufferError), and no view can be taken after it (PdkvStale). A loan "
		  "dropped unended goes back to the pool.",
	.tp_methods = loan_methods,
	.tp_getset = loan_getset,
};

PyTypeObject pdpy_chunk_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "pdkv.Chunk",
	.tp_basicsize = sizeof(struct pdpy_buf),
	.tp_dealloc = chunk_dealloc,
	.tp_repr = buf_repr,
	.tp_as_sequence = &buf_as_seq,
	.tp_as_buffer = &chunk_as_buffer,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A received chunk, pinned: a read-only buffer over the broker's receive "
		  "memory (numpy.frombuffer(chunk, dtype) is a view of it). "
		  "Agent.recv_release() of its request ends the pin; it does not run while a "
		  "view is alive (BufferError), and no view can be taken after it (PdkvStale).",
	.tp_methods = chunk_methods,
	.tp_getset = chunk_getset,
};
