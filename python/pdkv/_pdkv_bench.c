/* SPDX-License-Identifier: MIT */
/* pdkv._pdkv._c_loop: the C side of the binding's per-call benchmark. The
 * same calls the Python loop makes, in a C loop in the same process, so
 * the binding's overhead is the difference, measured in one run. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "_pdkv.h"

static double seconds(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* n calls of what on req_id, without the GIL: elapsed seconds. */
static int loop(struct pd_agent *a, const char *what, const char *req, unsigned long n,
		double *elapsed)
{
	double t0 = seconds();
	pd_slot_ref s;
	int32_t st;
	int rc = 0;

	if (strcmp(what, "req_state") == 0) {
		for (unsigned long i = 0; i < n && rc >= 0; i++)
			rc = pd_req_state(a, req, &st);
	} else if (strcmp(what, "alloc_release") == 0) {
		for (unsigned long i = 0; i < n && rc >= 0; i++) {
			rc = pd_alloc(a, req, 1, &s, 0);
			if (rc == 0)
				rc = pd_slot_release(a, &s, 1);
		}
	} else {
		return -EINVAL;
	}
	*elapsed = seconds() - t0;
	return rc < 0 ? rc : 0;
}

PyObject *pdpy_c_loop(PyObject *mod, PyObject *args)
{
	const char *what, *req;
	unsigned long n;
	PyObject *ag;
	double el = 0;
	int rc;

	(void)mod;
	if (!PyArg_ParseTuple(args, "O!ssk:_c_loop", &pdpy_agent_type, &ag, &what, &req, &n) ||
	    pdpy_open_or_raise((pdpy_agent *)ag) < 0)
		return NULL;
	NOGIL_BEGIN((pdpy_agent *)ag);
	rc = loop(((pdpy_agent *)ag)->a, what, req, n, &el);
	NOGIL_END((pdpy_agent *)ag);
	if (rc == -EINVAL)
		return PyErr_Format(PyExc_ValueError, "_c_loop: req_state or alloc_release");
	if (rc < 0)
		return pdpy_raise(rc, "_c_loop", what);
	return PyFloat_FromDouble(el);
}
