/* SPDX-License-Identifier: MIT */
#ifndef PD_PYTHON_PDKV_H
#define PD_PYTHON_PDKV_H

/*
 * pdkv._pdkv: the CPython extension over libpdagent. One Agent object
 * owns one struct pd_agent; Loan (a loaned send slot) and Chunk (a pinned
 * received chunk) are buffers over the shared memory itself. A view of
 * either is refused once its loan or pin has ended, and a loan or pin is
 * never ended while a view of it is alive (BufferError, as mmap.close()),
 * so no Python object ever reaches memory the process no longer owns.
 *
 * Locking: the GIL guards every field below. A call that can block or
 * copy counts itself in Agent.calls and drops the GIL; close() waits for
 * the count to fall to 0 before it detaches.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include <pdkv/agent.h>

struct pdpy_buf;

typedef struct {
	PyObject_HEAD
	struct pd_agent *a;      /* NULL once closed */
	PyThread_type_lock put_lock; /* pd_put() is one thread at a time */
	uint64_t slot_size;
	int calls;               /* calls in flight without the GIL */
	int closing;
	struct pdpy_buf *bufs;   /* live Loan and Chunk objects */
	PyObject *tags;          /* req_id (bytes) -> the receiver's tag of it (recv_wait) */
	PyObject *weakrefs;
} pdpy_agent;

/* Loan and Chunk share one layout: a span of shared memory and its owner. */
struct pdpy_buf {
	PyObject_HEAD
	pdpy_agent *agent;       /* strong reference */
	struct pdpy_buf *prev, *next; /* in agent->bufs */
	void *data;
	Py_ssize_t len;
	uint64_t ref;            /* Loan: the slot ref; Chunk: its request's tag */
	Py_ssize_t exports;      /* views alive */
	int valid;               /* the loan or pin still holds */
	int busy;                /* in a put or release that has not returned */
};

extern PyTypeObject pdpy_agent_type;
extern PyTypeObject pdpy_loan_type;
extern PyTypeObject pdpy_chunk_type;

/* Errors: raise the pdkv exception of err (negative errno) as "what: message". */
PyObject *pdpy_raise(int err, const char *what, const char *arg);
int pdpy_errors_init(PyObject *m);

/* Events and receive results as struct sequences. */
int pdpy_types_init(PyObject *m);
PyObject *pdpy_event_new(const struct pd_event *ev);
PyObject *pdpy_recv_info_new(const struct pd_recv_info *info);

/* A Loan or Chunk on agent's list; NULL with an exception set. */
PyObject *pdpy_buf_new(PyTypeObject *type, pdpy_agent *ag, void *data, Py_ssize_t len,
		       uint64_t ref);
/* The loan or pin ended: views are refused from now on. */
void pdpy_buf_end(struct pdpy_buf *b);

/* Seconds (None, int or float) to milliseconds for a call: *ms; none_ms for None.
 * 0 or -1 with a ValueError/TypeError set. */
int pdpy_timeout_ms(PyObject *o, uint32_t none_ms, uint32_t *ms);

/* A request id or key argument as bytes (str is UTF-8); NULL with an
 * exception set. max: its longest length. */
PyObject *pdpy_bytes_arg(PyObject *o, const char *what, Py_ssize_t max);
/* The same for what libpdagent takes as a C string (a request id, an
 * endpoint): a NUL byte in it is a ValueError, never a shorter id. */
PyObject *pdpy_cstr_arg(PyObject *o, const char *what, Py_ssize_t max);

/* A call without the GIL: counted, so close() waits for it. */
#define NOGIL_BEGIN(self) \
	do { \
		(self)->calls++; \
		Py_BEGIN_ALLOW_THREADS
#define NOGIL_END(self) \
		Py_END_ALLOW_THREADS \
		(self)->calls--; \
	} while (0)

/* 0 while the agent is open; else -1 with PdkvNotConnected raised. */
int pdpy_open_or_raise(pdpy_agent *self);

/* The agent's methods, by side (Agent's method table is in _pdkv_agent.c). */
PyObject *pdpy_agent_put(PyObject *o, PyObject *args, PyObject *kw);
PyObject *pdpy_agent_release(PyObject *o, PyObject *loans);
PyObject *pdpy_agent_cancel(PyObject *o, PyObject *req);
PyObject *pdpy_agent_next_event(PyObject *o, PyObject *args, PyObject *kw);
PyObject *pdpy_agent_recv_wait(PyObject *o, PyObject *args, PyObject *kw);
PyObject *pdpy_agent_lookup(PyObject *o, PyObject *key);
PyObject *pdpy_agent_recv_release(PyObject *o, PyObject *req);

/* The benchmark's C loop (_pdkv_bench.c). */
PyObject *pdpy_c_loop(PyObject *mod, PyObject *args);

#endif
