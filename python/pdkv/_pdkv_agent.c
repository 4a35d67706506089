/* SPDX-License-Identifier: MIT */
/* pdkv._pdkv.Agent: one attached agent; every call that can block or copy
 * runs without the GIL. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "_pdkv.h"
#include "pd_proto.h"

int pdpy_open_or_raise(pdpy_agent *self)
{
	if (self->a && !self->closing)
		return 0;
	(void)pdpy_raise(-ENOTCONN, "Agent", "closed");
	return -1;
}

/* ---- life --------------------------------------------------------------------------------- */

static int agent_init(PyObject *o, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "broker", "rundir", "roles", "tp_rank", "tp_size",
				  "attach_timeout", NULL };
	pdpy_agent *self = (pdpy_agent *)o;
	PyObject *broker = Py_None, *rundir = Py_None, *tmo = NULL, *bb = NULL, *rb = NULL;
	unsigned int roles = PD_AGENT_SEND | PD_AGENT_RECV, rank = 0, size = 1;
	struct pd_agent_opts opts;
	struct pd_agent *a = NULL;
	uint32_t ms;
	int rc;

	if (self->a) {
		PyErr_SetString(PyExc_RuntimeError, "Agent: attached already");
		return -1;
	}
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOIIIO:Agent", kwlist, &broker, &rundir,
					 &roles, &rank, &size, &tmo) ||
	    pdpy_timeout_ms(tmo, 5000, &ms) < 0)
		return -1;
	pd_agent_opts_init(&opts, sizeof(opts));
	if (broker != Py_None && !(bb = PyUnicode_EncodeFSDefault(broker)))
		return -1;
	if (rundir != Py_None && !(rb = PyOS_FSPath(rundir))) {
		Py_XDECREF(bb);
		return -1;
	}
	if (rb && PyUnicode_Check(rb))
		Py_SETREF(rb, PyUnicode_EncodeFSDefault(rb));
	if (rundir != Py_None && (!rb || !PyBytes_Check(rb))) {
		Py_XDECREF(bb);
		Py_XDECREF(rb);
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError, "rundir: a path");
		return -1;
	}
	opts.broker = bb ? PyBytes_AS_STRING(bb) : NULL;
	opts.rundir = rb ? PyBytes_AS_STRING(rb) : NULL;
	opts.roles = roles;
	opts.tp_rank = rank;
	opts.tp_size = size;
	opts.attach_timeout_ms = ms ? ms : 1; /* 0 here means "the default": keep it short */
	Py_BEGIN_ALLOW_THREADS
	rc = pd_agent_attach(&opts, &a);
	Py_END_ALLOW_THREADS
	if (rc < 0) {
		(void)pdpy_raise(rc, "Agent", opts.broker ? opts.broker : "default");
		Py_XDECREF(bb);
		Py_XDECREF(rb);
		return -1;
	}
	Py_XDECREF(bb);
	Py_XDECREF(rb);
	self->put_lock = PyThread_allocate_lock();
	self->tags = PyDict_New();
	if (!self->put_lock || !self->tags) {
		pd_agent_detach(a);
		PyErr_NoMemory();
		return -1;
	}
	self->a = a;
	self->slot_size = pd_slot_size(a);
	return 0;
}

/* Views alive on the agent's loans and chunks. */
static Py_ssize_t exports(const pdpy_agent *self)
{
	Py_ssize_t n = 0;

	for (const struct pdpy_buf *b = self->bufs; b; b = b->next)
		n += b->exports;
	return n;
}

static void detach(pdpy_agent *self)
{
	struct pd_agent *a = self->a;

	for (struct pdpy_buf *b = self->bufs; b; b = b->next)
		pdpy_buf_end(b);
	self->a = NULL;
	Py_BEGIN_ALLOW_THREADS
	pd_agent_detach(a);
	Py_END_ALLOW_THREADS
}

static PyObject *agent_close(PyObject *o, PyObject *noargs)
{
	pdpy_agent *self = (pdpy_agent *)o;
	Py_ssize_t n;

	(void)noargs;
	if (!self->a || self->closing)
		Py_RETURN_NONE;
	n = exports(self);
	if (n > 0)
		return PyErr_Format(PyExc_BufferError,
				    "Agent.close: %zd views of its loans or chunks are alive "
				    "(delete them first)", n);
	self->closing = 1;
	/* Calls in flight end within their timeouts; endless waits within a slice. */
	while (self->calls > 0) {
		Py_BEGIN_ALLOW_THREADS
		(void)nanosleep(&(struct timespec){ .tv_nsec = 1000000 }, NULL);
		Py_END_ALLOW_THREADS
	}
	detach(self);
	self->closing = 0;
	Py_RETURN_NONE;
}

static void agent_dealloc(PyObject *o)
{
	pdpy_agent *self = (pdpy_agent *)o;

	if (self->weakrefs)
		PyObject_ClearWeakRefs(o);
	if (self->a)
		detach(self); /* no loan or chunk is left: each holds a reference */
	if (self->put_lock)
		PyThread_free_lock(self->put_lock);
	Py_XDECREF(self->tags);
	Py_TYPE(o)->tp_free(o);
}

/* ---- send side ---------------------------------------------------------------------------- */

static PyObject *agent_declare(PyObject *o, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "req_id", "endpoint", "total_chunks", "world_size", "rank",
				  "timeout", NULL };
	pdpy_agent *self = (pdpy_agent *)o;
	PyObject *req, *ep, *tmo = NULL, *rb = NULL, *eb = NULL;
	unsigned int total, world = 1, rank = 0;
	struct pd_decl d;
	uint32_t ms;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOI|IIO:declare", kwlist, &req, &ep, &total,
					 &world, &rank, &tmo) ||
	    pdpy_timeout_ms(tmo, 0, &ms) < 0 || pdpy_open_or_raise(self) < 0)
		return NULL;
	if (!(rb = pdpy_cstr_arg(req, "req_id", PD_REQ_ID_MAX)) ||
	    !(eb = pdpy_cstr_arg(ep, "endpoint", PD_ENDPOINT_MAX)))
		goto out;
	memset(&d, 0, sizeof(d));
	d.req_id = PyBytes_AS_STRING(rb);
	d.endpoint = PyBytes_AS_STRING(eb);
	d.total_chunks = total;
	d.world_size = world;
	d.rank = rank;
	d.timeout_ms = ms;
	rc = pd_declare(self->a, &d); /* returns at once */
	if (rc < 0)
		(void)pdpy_raise(rc, "declare", d.req_id);
out:
	Py_XDECREF(rb);
	Py_XDECREF(eb);
	if (PyErr_Occurred())
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *agent_req_state(PyObject *o, PyObject *req)
{
	pdpy_agent *self = (pdpy_agent *)o;
	PyObject *rb;
	int32_t status = 0;
	int rc;

	if (pdpy_open_or_raise(self) < 0 || !(rb = pdpy_cstr_arg(req, "req_id", PD_REQ_ID_MAX)))
		return NULL;
	rc = pd_req_state(self->a, PyBytes_AS_STRING(rb), &status);
	if (rc < 0) {
		(void)pdpy_raise(rc, "req_state", PyBytes_AS_STRING(rb));
		Py_DECREF(rb);
		return NULL;
	}
	Py_DECREF(rb);
	return Py_BuildValue("(ii)", rc, (int)status);
}

static PyObject *loans_list(pdpy_agent *self, const pd_slot_ref *slots, uint32_t n)
{
	PyObject *l = PyList_New(n), *loan;
	uint32_t i;

	for (i = 0; l && i < n; i++) {
		loan = pdpy_buf_new(&pdpy_loan_type, self, pd_slot_data(self->a, slots[i]),
				    (Py_ssize_t)self->slot_size, slots[i]);
		if (!loan)
			break;
		PyList_SET_ITEM(l, i, loan);
	}
	if (l && i == n)
		return l;
	/* Out of memory part way: what has no Loan object goes back now. */
	(void)pd_slot_release(self->a, slots + i, n - i);
	Py_XDECREF(l);
	return NULL;
}

static PyObject *agent_alloc(PyObject *o, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "req_id", "n", "timeout", NULL };
	pdpy_agent *self = (pdpy_agent *)o;
	PyObject *req, *tmo = NULL, *rb, *l = NULL;
	pd_slot_ref *slots;
	unsigned int n;
	uint32_t ms;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OI|O:alloc", kwlist, &req, &n, &tmo) ||
	    pdpy_timeout_ms(tmo, 0, &ms) < 0 || pdpy_open_or_raise(self) < 0 ||
	    !(rb = pdpy_cstr_arg(req, "req_id", PD_REQ_ID_MAX)))
		return NULL;
	if (n == 0 || n > PD_PUT_MAX_CHUNKS) {
		Py_DECREF(rb);
		return PyErr_Format(PyExc_ValueError, "alloc: n is 1 to %u", PD_PUT_MAX_CHUNKS);
	}
	slots = malloc(n * sizeof(*slots));
	if (!slots) {
		Py_DECREF(rb);
		return PyErr_NoMemory();
	}
	NOGIL_BEGIN(self);
	rc = pd_alloc(self->a, PyBytes_AS_STRING(rb), n, slots, ms);
	NOGIL_END(self);
	if (rc < 0)
		(void)pdpy_raise(rc, "alloc", PyBytes_AS_STRING(rb));
	else
		l = loans_list(self, slots, n);
	free(slots);
	Py_DECREF(rb);
	return l;
}

/* ---- attributes and the type ------------------------------------------------------------ */

static PyObject *agent_fileno(PyObject *o, PyObject *noargs)
{
	pdpy_agent *self = (pdpy_agent *)o;

	(void)noargs;
	if (pdpy_open_or_raise(self) < 0)
		return NULL;
	return PyLong_FromLong(pd_agent_fd(self->a));
}

static PyObject *agent_enter(PyObject *o, PyObject *noargs)
{
	(void)noargs;
	if (pdpy_open_or_raise((pdpy_agent *)o) < 0)
		return NULL;
	return Py_NewRef(o);
}

static PyObject *agent_exit(PyObject *o, PyObject *args)
{
	(void)args;
	return agent_close(o, NULL);
}

static PyObject *get_slot_size(PyObject *o, void *closure)
{
	(void)closure;
	return PyLong_FromUnsignedLongLong(((pdpy_agent *)o)->slot_size);
}

static PyObject *get_closed(PyObject *o, void *closure)
{
	(void)closure;
	return PyBool_FromLong(((pdpy_agent *)o)->a == NULL);
}

#define KW (METH_VARARGS | METH_KEYWORDS)
#define FN(f) ((PyCFunction)(void (*)(void))(f))

static PyMethodDef agent_methods[] = {
	{ "close", agent_close, METH_NOARGS,
	  "close(): detach (loans go back, pins are dropped). Waits for calls in flight on other "
	  "threads; BufferError while a view of a loan or chunk is alive. Idempotent." },
	{ "__enter__", agent_enter, METH_NOARGS, NULL },
	{ "__exit__", agent_exit, METH_VARARGS, NULL },
	{ "fileno", agent_fileno, METH_NOARGS,
	  "fileno() -> int: readable when an event may be waiting (for selectors and asyncio); "
	  "do not read or close it." },
	{ "declare", FN(agent_declare), KW,
	  "declare(req_id, endpoint, total_chunks, world_size=1, rank=0, timeout=None): declare "
	  "this rank's part of a request when it is scheduled; returns at once. The receiver's "
	  "admission comes as an EV_ADMITTED event (or the request's EV_PUT_FAILED). timeout: "
	  "seconds to wait for admission, None for the broker's default." },
	{ "req_state", agent_req_state, METH_O,
	  "req_state(req_id) -> (state, status): REQ_DECLARED, REQ_ADMITTED, REQ_DONE or "
	  "REQ_FAILED (status: why); never blocks." },
	{ "alloc", FN(agent_alloc), KW,
	  "alloc(req_id, n, timeout=0.0) -> list[Loan]: loan n staging slots for an admitted "
	  "request, all or nothing. PdkvAgain: not admitted yet (nothing taken: come back "
	  "next step); PdkvTimeout: admitted, no slots in time; PdkvCancelled; PdkvNotFound: "
	  "never declared. The GIL is released while it waits." },
	{ "put", FN(pdpy_agent_put), KW,
	  "put(req_id, endpoint, chunks, total_chunks, world_size=1, rank=0, last=False): hand "
	  "a batch to the broker; chunks is a sequence of (loan, key) or (loan, key, length); "
	  "the loans end here. Returns at once; the outcome is one EV_PUT_DONE or EV_PUT_FAILED "
	  "event after the last batch. BufferError while a view of one of the loans is alive; "
	  "PdkvAgain: the ring is full (nothing taken, retry)." },
	{ "release", pdpy_agent_release, METH_O,
	  "release(loans): end the loans of unsent slots." },
	{ "cancel", pdpy_agent_cancel, METH_O,
	  "cancel(req_id): abort a request, every rank of it on this broker. Idempotent." },
	{ "next_event", FN(pdpy_agent_next_event), KW,
	  "next_event(timeout=0.0) -> Event | None: the next event, waiting at most timeout "
	  "seconds (None: until one comes; Ctrl-C interrupts), None when none came." },
	{ "recv_wait", FN(pdpy_agent_recv_wait), KW,
	  "recv_wait(req_id, timeout=None) -> RecvInfo: wait until every chunk of the request "
	  "is here or it failed (see status). timeout 0: ask once; None: no limit (Ctrl-C "
	  "interrupts). PdkvTimeout when it is not complete in time. The GIL is released." },
	{ "lookup", pdpy_agent_lookup, METH_O,
	  "lookup(key) -> Chunk: a chunk that is here, pinned until recv_release() of its "
	  "request. PdkvNotFound: not (yet) here; PdkvNoSpace: the pin journal is full." },
	{ "recv_release", pdpy_agent_recv_release, METH_O,
	  "recv_release(req_id): the request is consumed: its chunks' pins go and the broker "
	  "frees its slots (in a decode group, once every rank released it). BufferError "
	  "while a view of one of its chunks is alive; PdkvBusy before every chunk is here "
	  "(recv_wait first); PdkvNotFound for a request that failed or ended (its pins "
	  "go all the same)." },
	{ NULL, NULL, 0, NULL },
};

static PyGetSetDef agent_getset[] = {
	{ "slot_size", get_slot_size, NULL, "Bytes per slot (a Loan's length).", NULL },
	{ "closed", get_closed, NULL, "True once closed.", NULL },
	{ NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject pdpy_agent_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "pdkv._pdkv.Agent",
	.tp_basicsize = sizeof(pdpy_agent),
	.tp_dealloc = agent_dealloc,
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = "Agent(broker=None, rundir=None, roles=SEND|RECV, tp_rank=0, tp_size=1, "
		  "attach_timeout=5.0): attach to the node's broker (None: $PDKV_BROKER, else "
		  "\"default\"; rundir None: $PDKV_RUNDIR, else the user's default, then "
		  "/run/pdkv). A context manager; close() detaches.",
	.tp_weaklistoffset = offsetof(pdpy_agent, weakrefs),
	.tp_methods = agent_methods,
	.tp_getset = agent_getset,
	.tp_init = agent_init,
	.tp_new = PyType_GenericNew,
};
