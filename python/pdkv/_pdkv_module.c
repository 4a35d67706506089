/* SPDX-License-Identifier: MIT */
/* pdkv._pdkv: module init, the exception classes, events and argument helpers. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include <pdkv/version.h>

#include "_pdkv.h"

/* ---- exceptions ------------------------------------------------------------------------- */

struct pdpy_err {
	int err;               /* positive errno */
	const char *name;      /* "pdkv.NAME" */
	PyObject **extra_base; /* a builtin OSError subclass it also is, or NULL */
	const char *doc;
	PyObject *cls;
};

static PyObject *pdpy_error; /* pdkv.PdkvError */

static struct pdpy_err errs[] = {
	{ ETIMEDOUT, "PdkvTimeout", &PyExc_TimeoutError, "A deadline passed (ETIMEDOUT).", NULL },
	{ EAGAIN, "PdkvAgain", &PyExc_BlockingIOError,
	  "Would block: not admitted yet, or the submission ring is full (EAGAIN); come back later.",
	  NULL },
	{ ECANCELED, "PdkvCancelled", NULL, "The request was cancelled or failed (ECANCELED).", NULL },
	{ ENOTCONN, "PdkvNotConnected", &PyExc_ConnectionError,
	  "The broker is gone, or the agent is closed (ENOTCONN).", NULL },
	{ ENOENT, "PdkvNotFound", &PyExc_FileNotFoundError,
	  "No such broker, request or chunk (ENOENT).", NULL },
	{ ESTALE, "PdkvStale", NULL, "A loan or pin that has ended (ESTALE).", NULL },
	{ EEXIST, "PdkvExists", &PyExc_FileExistsError, "Declared already (EEXIST).", NULL },
	{ EBUSY, "PdkvBusy", NULL, "Refused for now: a table is full (EBUSY).", NULL },
	{ E2BIG, "PdkvTooBig", NULL, "More than the pool can ever hold (E2BIG).", NULL },
	{ EALREADY, "PdkvAlready", NULL, "The request completed already (EALREADY).", NULL },
	{ ENOSPC, "PdkvNoSpace", NULL, "This agent's pin journal is full (ENOSPC).", NULL },
	{ EACCES, "PdkvAccess", &PyExc_PermissionError,
	  "Refused: not the broker's user or group (EACCES).", NULL },
	{ EUSERS, "PdkvFull", NULL, "The broker has as many agents as --max-agents (EUSERS).", NULL },
	{ EPROTO, "PdkvProtocol", NULL, "Incompatible broker or corrupt data (EPROTO).", NULL },
};

#define NERRS (sizeof(errs) / sizeof(errs[0]))

static PyObject *class_of(int e)
{
	for (size_t i = 0; i < NERRS; i++)
		if (errs[i].err == e)
			return errs[i].cls;
	return pdpy_error;
}

PyObject *pdpy_raise(int err, const char *what, const char *arg)
{
	int e = err < 0 ? -err : err;
	PyObject *cls = class_of(e), *args;

	if (e == ENOMEM)
		return PyErr_NoMemory();
	if (arg)
		args = Py_BuildValue("(iN)", e, PyUnicode_FromFormat("%s(%s): %s", what, arg,
								     pd_strerror(-e)));
	else
		args = Py_BuildValue("(iN)", e, PyUnicode_FromFormat("%s: %s", what,
								     pd_strerror(-e)));
	if (args) {
		PyErr_SetObject(cls, args);
		Py_DECREF(args);
	}
	return NULL;
}

static int add_class(PyObject *m, const char *name, PyObject *bases, const char *doc,
		     PyObject **out)
{
	char full[64];

	(void)PyOS_snprintf(full, sizeof(full), "pdkv.%s", name);
	*out = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
	if (!*out)
		return -1;
	Py_INCREF(*out);
	return PyModule_AddObject(m, name, *out);
}

int pdpy_errors_init(PyObject *m)
{
	PyObject *bases;
	int rc;

	if (add_class(m, "PdkvError", PyExc_OSError,
		      "Base of pdkv's errors: an OSError whose errno is the pdkv code.",
		      &pdpy_error) < 0)
		return -1;
	for (size_t i = 0; i < NERRS; i++) {
		bases = errs[i].extra_base ? PyTuple_Pack(2, pdpy_error, *errs[i].extra_base) :
					     PyTuple_Pack(1, pdpy_error);
		if (!bases)
			return -1;
		rc = add_class(m, errs[i].name, bases, errs[i].doc, &errs[i].cls);
		Py_DECREF(bases);
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* ---- struct sequences ------------------------------------------------------------------- */

static PyTypeObject event_type, recv_info_type;

static PyStructSequence_Field event_fields[] = {
	{ "type", "EV_ADMITTED, EV_PUT_DONE or EV_PUT_FAILED" },
	{ "status", "0, or the failure as a negative errno" },
	{ "chunks", "PUT_DONE: chunks sent; ADMITTED: the rank's total" },
	{ "bytes", "PUT_DONE: bytes sent" },
	{ "req_id", "the request (str)" },
	{ NULL, NULL },
};

static PyStructSequence_Desc event_desc = {
	"pdkv.Event", "One event of a sending agent (Agent.next_event()).", event_fields, 5
};

static PyStructSequence_Field recv_info_fields[] = {
	{ "chunks", "chunks of the request, all sender ranks" },
	{ "status", "0: every chunk is here; else why the request failed (negative errno)" },
	{ NULL, NULL },
};

static PyStructSequence_Desc recv_info_desc = {
	"pdkv.RecvInfo", "A received request's state (Agent.recv_wait()).", recv_info_fields, 2
};

int pdpy_types_init(PyObject *m)
{
	if (PyStructSequence_InitType2(&event_type, &event_desc) < 0 ||
	    PyStructSequence_InitType2(&recv_info_type, &recv_info_desc) < 0)
		return -1;
	Py_INCREF(&event_type);
	Py_INCREF(&recv_info_type);
	if (PyModule_AddObject(m, "Event", (PyObject *)&event_type) < 0 ||
	    PyModule_AddObject(m, "RecvInfo", (PyObject *)&recv_info_type) < 0)
		return -1;
	return 0;
}

PyObject *pdpy_event_new(const struct pd_event *ev)
{
	PyObject *o = PyStructSequence_New(&event_type);

	if (!o)
		return NULL;
	PyStructSequence_SET_ITEM(o, 0, PyLong_FromUnsignedLong(ev->type));
	PyStructSequence_SET_ITEM(o, 1, PyLong_FromLong(ev->status));
	PyStructSequence_SET_ITEM(o, 2, PyLong_FromUnsignedLong(ev->chunks));
	PyStructSequence_SET_ITEM(o, 3, PyLong_FromUnsignedLongLong(ev->bytes));
	PyStructSequence_SET_ITEM(o, 4, PyUnicode_DecodeUTF8(ev->req_id, (Py_ssize_t)strnlen(
		ev->req_id, sizeof(ev->req_id)), "surrogateescape"));
	if (PyErr_Occurred()) {
		Py_DECREF(o);
		return NULL;
	}
	return o;
}

PyObject *pdpy_recv_info_new(const struct pd_recv_info *info)
{
	PyObject *o = PyStructSequence_New(&recv_info_type);

	if (!o)
		return NULL;
	PyStructSequence_SET_ITEM(o, 0, PyLong_FromUnsignedLong(info->chunks));
	PyStructSequence_SET_ITEM(o, 1, PyLong_FromLong(info->status));
	if (PyErr_Occurred()) {
		Py_DECREF(o);
		return NULL;
	}
	return o;
}

/* ---- arguments -------------------------------------------------------------------------- */

int pdpy_timeout_ms(PyObject *o, uint32_t none_ms, uint32_t *ms)
{
	double s;

	if (!o || o == Py_None) {
		*ms = none_ms;
		return 0;
	}
	s = PyFloat_AsDouble(o);
	if (s == -1.0 && PyErr_Occurred())
		return -1;
	if (!(s >= 0.0) || s > 4294967.0) {
		PyErr_SetString(PyExc_ValueError, "timeout: seconds, 0 to 4294967 (or None)");
		return -1;
	}
	*ms = (uint32_t)ceil(s * 1000.0);
	return 0;
}

PyObject *pdpy_bytes_arg(PyObject *o, const char *what, Py_ssize_t max)
{
	PyObject *b;

	if (PyUnicode_Check(o)) {
		b = PyUnicode_AsUTF8String(o);
	} else if (PyBytes_Check(o)) {
		b = Py_NewRef(o);
	} else {
		return PyErr_Format(PyExc_TypeError, "%s: str or bytes, not %.80s", what,
				    Py_TYPE(o)->tp_name);
	}
	if (b && (PyBytes_GET_SIZE(b) == 0 || PyBytes_GET_SIZE(b) > max)) {
		Py_DECREF(b);
		return PyErr_Format(PyExc_ValueError, "%s: 1 to %zd bytes", what, max);
	}
	return b;
}

PyObject *pdpy_cstr_arg(PyObject *o, const char *what, Py_ssize_t max)
{
	PyObject *b = pdpy_bytes_arg(o, what, max);

	if (b && memchr(PyBytes_AS_STRING(b), 0, (size_t)PyBytes_GET_SIZE(b))) {
		Py_DECREF(b);
		return PyErr_Format(PyExc_ValueError, "%s: no NUL byte", what);
	}
	return b;
}

/* ---- the module ------------------------------------------------------------------------- */

static PyObject *py_version(PyObject *self, PyObject *noargs)
{
	(void)self;
	(void)noargs;
	return PyUnicode_FromString(pd_version());
}

static PyObject *py_strerror(PyObject *self, PyObject *arg)
{
	long e = PyLong_AsLong(arg);

	(void)self;
	if (e == -1 && PyErr_Occurred())
		return NULL;
	return PyUnicode_FromString(pd_strerror((int)e));
}

static PyObject *py_error_of(PyObject *self, PyObject *arg)
{
	long e = PyLong_AsLong(arg);

	(void)self;
	if (e == -1 && PyErr_Occurred())
		return NULL;
	if (e == 0)
		Py_RETURN_NONE;
	e = e < 0 ? -e : e;
	return PyObject_CallFunction(class_of((int)e), "(is)", (int)e, pd_strerror((int)-e));
}

static PyMethodDef methods[] = {
	{ "_c_loop", pdpy_c_loop, METH_VARARGS,
	  "_c_loop(agent, what, req_id, n) -> seconds: n calls of req_state or alloc_release "
	  "in C (the baseline of the binding's per-call benchmark)." },
	{ "error_of", py_error_of, METH_O,
	  "error_of(status) -> PdkvError | None: the exception (not raised) of a failure status "
	  "such as Event.status or RecvInfo.status (a negative errno); None for 0." },
	{ "version", py_version, METH_NOARGS, "version() -> str: libpdagent's version." },
	{ "strerror", py_strerror, METH_O,
	  "strerror(err) -> str: the message of a pdkv error code (negative or positive errno)." },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "pdkv._pdkv",
	"libpdagent for Python: see the pdkv package.", -1, methods, NULL, NULL, NULL, NULL
};

static int add_consts(PyObject *m)
{
	static const struct {
		const char *name;
		long v;
	} c[] = {
		{ "SEND", PD_AGENT_SEND },
		{ "RECV", PD_AGENT_RECV },
		{ "REQ_DECLARED", PD_REQ_DECLARED },
		{ "REQ_ADMITTED", PD_REQ_ADMITTED },
		{ "REQ_DONE", PD_REQ_DONE },
		{ "REQ_FAILED", PD_REQ_FAILED },
		{ "EV_PUT_DONE", PD_EV_PUT_DONE },
		{ "EV_PUT_FAILED", PD_EV_PUT_FAILED },
		{ "EV_ADMITTED", PD_EV_ADMITTED },
		{ "KEY_MAX", PD_KEY_MAX },
		{ "REQ_ID_MAX", PD_REQ_ID_MAX },
		{ "WORLD_MAX", PD_WORLD_MAX },
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		if (PyModule_AddIntConstant(m, c[i].name, c[i].v) < 0)
			return -1;
	return 0;
}

static int add_type(PyObject *m, const char *name, PyTypeObject *t)
{
	if (PyType_Ready(t) < 0)
		return -1;
	Py_INCREF(t);
	return PyModule_AddObject(m, name, (PyObject *)t);
}

PyMODINIT_FUNC PyInit__pdkv(void);

PyMODINIT_FUNC PyInit__pdkv(void)
{
	PyObject *m = PyModule_Create(&module);

	if (!m)
		return NULL;
	if (pdpy_errors_init(m) < 0 || pdpy_types_init(m) < 0 || add_consts(m) < 0 ||
	    add_type(m, "Agent", &pdpy_agent_type) < 0 ||
	    add_type(m, "Loan", &pdpy_loan_type) < 0 ||
	    add_type(m, "Chunk", &pdpy_chunk_type) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
