/* A communicator whose collectives are a Python object's methods (the protocol is in
 * docs/distributed.md, "torch.distributed"; dlinspect/distributed.py implements it over
 * torch.distributed). The core calls the table from dli_init, dli_step and dli_destroy, which the
 * extension runs with the GIL released so that a long pass does not hold other threads: every
 * call that touches Python takes the GIL here, and a Python exception becomes the core's error
 * code, message and missing members. */
#include "pycomm.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct dli_py_comm {
	PyObject *obj;
	int rank, size;
	char name[64];
};

/* A group handle: the object group() returned and its member count. */
struct dli_py_group {
	PyObject *obj;
	size_t n;
};

/* ---- Errors ---- */

static PyObject *fetch_exception(void)
{
#if PY_VERSION_HEX >= 0x030C0000
	return PyErr_GetRaisedException();
#else
	PyObject *type, *value, *tb;
	PyErr_Fetch(&type, &value, &tb);
	PyErr_NormalizeException(&type, &value, &tb);
	if (value && tb)
		PyException_SetTraceback(value, tb);
	Py_XDECREF(type);
	Py_XDECREF(tb);
	return value;
#endif
}

static bool attr_true(PyObject *o, const char *name)
{
	PyObject *v = PyObject_GetAttrString(o, name);
	if (!v) {
		PyErr_Clear();
		return false;
	}
	int t = PyObject_IsTrue(v);
	Py_DECREF(v);
	if (t < 0)
		PyErr_Clear();
	return t > 0;
}

/* The raised exception as the core's error: -ETIMEDOUT (`timed_out`), -EPIPE (`broken`: the
 * group failed earlier), else -EIO; `missing` (member indexes) fills missing[0..n). An exception
 * that is not the protocol's (a bug, or the backend's own error) keeps its type name in the text.
 * Clears the exception; a KeyboardInterrupt is raised again at the next chance. */
static int error_from_python(const char *what, bool *missing, size_t n, struct dli_error *err)
{
	PyObject *exc = fetch_exception();
	int rc = -EIO;
	if (!exc) {
		snprintf(err->message, sizeof err->message, "%s failed", what);
		return rc;
	}
	bool ours = PyObject_HasAttrString(exc, "timed_out");
	if (attr_true(exc, "timed_out"))
		rc = -ETIMEDOUT;
	else if (attr_true(exc, "broken"))
		rc = -EPIPE;
	PyObject *who = missing ? PyObject_GetAttrString(exc, "missing") : NULL;
	PyObject *it = who && who != Py_None ? PyObject_GetIter(who) : NULL;
	PyObject *item;
	while (it && (item = PyIter_Next(it))) {
		long i = PyLong_AsLong(item);
		if (i >= 0 && (size_t)i < n)
			missing[i] = true;
		Py_DECREF(item);
	}
	Py_XDECREF(it);
	Py_XDECREF(who);
	PyErr_Clear();
	PyObject *text = PyObject_Str(exc);
	const char *s = text ? PyUnicode_AsUTF8(text) : NULL;
	if (!s)
		PyErr_Clear();
	if (ours)
		snprintf(err->message, sizeof err->message, "%s", s && *s ? s : what);
	else
		snprintf(err->message, sizeof err->message, "%s: %s: %s", what,
			 Py_TYPE(exc)->tp_name, s ? s : "");
	Py_XDECREF(text);
	if (PyErr_GivenExceptionMatches(exc, PyExc_KeyboardInterrupt))
		PyErr_SetInterrupt();
	Py_DECREF(exc);
	err->code = rc;
	return rc;
}

/* ---- The table ---- */

static int py_rank(void *comm)
{
	return ((struct dli_py_comm *)comm)->rank;
}

static int py_size(void *comm)
{
	return ((struct dli_py_comm *)comm)->size;
}

static int py_group_create(void *comm, const int *ranks, size_t n, void **group,
			   struct dli_error *err)
{
	struct dli_py_comm *c = comm;
	PyGILState_STATE gil = PyGILState_Ensure();
	int rc = 0;
	PyObject *t = PyTuple_New((Py_ssize_t)n);
	for (size_t i = 0; t && i < n; i++) {
		PyObject *r = PyLong_FromLong(ranks[i]);
		if (!r) {
			Py_CLEAR(t);
			break;
		}
		PyTuple_SET_ITEM(t, (Py_ssize_t)i, r);
	}
	struct dli_py_group *g = calloc(1, sizeof *g);
	if (!g)
		PyErr_NoMemory();
	else if ((g->obj = t ? PyObject_CallMethod(c->obj, "group", "(O)", t) : NULL))
		g->n = n;
	Py_XDECREF(t);
	if (!g || !g->obj) {
		rc = error_from_python("group()", NULL, 0, err);
		free(g);
		g = NULL;
	}
	*group = g;
	PyGILState_Release(gil);
	return rc;
}

static void py_group_destroy(void *comm, void *group)
{
	(void)comm;
	struct dli_py_group *g = group;
	if (!g)
		return;
	PyGILState_STATE gil = PyGILState_Ensure();
	Py_DECREF(g->obj);
	PyGILState_Release(gil);
	free(g);
}

static int py_allgather(void *comm, void *group, const void *send, size_t bytes, void *recv,
			double timeout_s, bool *missing, struct dli_error *err)
{
	struct dli_py_comm *c = comm;
	struct dli_py_group *g = group;
	PyGILState_STATE gil = PyGILState_Ensure();
	int rc = 0;
	PyObject *data = PyBytes_FromStringAndSize(send, (Py_ssize_t)bytes);
	PyObject *out = data ? PyObject_CallMethod(c->obj, "allgather", "OOd", g->obj, data,
						   timeout_s)
			     : NULL;
	Py_XDECREF(data);
	if (!out) {
		rc = error_from_python("allgather()", missing, g->n, err);
		goto done;
	}
	Py_buffer view;
	if (PyObject_GetBuffer(out, &view, PyBUF_SIMPLE) < 0) {
		rc = error_from_python("allgather() returned no bytes", NULL, 0, err);
		goto done;
	}
	if ((size_t)view.len != g->n * bytes) {
		snprintf(err->message, sizeof err->message,
			 "allgather() of %zu bytes a member returned %zd bytes, expected %zu members'",
			 bytes, view.len, g->n);
		rc = err->code = -EPROTO;
	} else {
		memcpy(recv, view.buf, (size_t)view.len);
	}
	PyBuffer_Release(&view);
done:
	Py_XDECREF(out);
	PyGILState_Release(gil);
	return rc;
}

static int py_barrier(void *comm, void *group, double timeout_s, bool *missing,
		      struct dli_error *err)
{
	struct dli_py_comm *c = comm;
	struct dli_py_group *g = group;
	PyGILState_STATE gil = PyGILState_Ensure();
	int rc = 0;
	PyObject *out = PyObject_CallMethod(c->obj, "barrier", "Od", g->obj, timeout_s);
	if (!out)
		rc = error_from_python("barrier()", missing, g->n, err);
	Py_XDECREF(out);
	PyGILState_Release(gil);
	return rc;
}

const struct dli_comm_ops dli_py_comm_ops = {
	.size = sizeof(struct dli_comm_ops),
	.rank = py_rank,
	.world_size = py_size,
	.group_create = py_group_create,
	.group_destroy = py_group_destroy,
	.allgather = py_allgather,
	.barrier = py_barrier,
};

/* ---- Making one ---- */

static int int_attr(PyObject *obj, const char *name, int *out)
{
	PyObject *v = PyObject_GetAttrString(obj, name);
	if (!v)
		return -1;
	long x = PyLong_AsLong(v);
	Py_DECREF(v);
	if (x == -1 && PyErr_Occurred())
		return -1;
	if (x < 0 || x > 1 << 24) {
		PyErr_Format(PyExc_ValueError, "communicator %R: %s is %ld", obj, name, x);
		return -1;
	}
	*out = (int)x;
	return 0;
}

int dli_py_comm_new(PyObject *obj, void **comm)
{
	static const char *const methods[] = {"group", "allgather", "barrier"};
	for (size_t i = 0; i < sizeof methods / sizeof *methods; i++)
		if (!PyObject_HasAttrString(obj, methods[i])) {
			PyErr_Format(PyExc_TypeError,
				     "communicator %R has no %s() method (docs/distributed.md)", obj,
				     methods[i]);
			return -1;
		}
	struct dli_py_comm *c = calloc(1, sizeof *c);
	if (!c) {
		PyErr_NoMemory();
		return -1;
	}
	if (int_attr(obj, "rank", &c->rank) || int_attr(obj, "size", &c->size)) {
		free(c);
		return -1;
	}
	snprintf(c->name, sizeof c->name, "python");
	PyObject *name = PyObject_GetAttrString(obj, "name");
	const char *s = name ? PyUnicode_AsUTF8(name) : NULL;
	if (s && *s)
		snprintf(c->name, sizeof c->name, "%s", s);
	Py_XDECREF(name);
	PyErr_Clear();
	Py_INCREF(obj);
	c->obj = obj;
	*comm = c;
	return 0;
}

void dli_py_comm_free(void *comm)
{
	struct dli_py_comm *c = comm;
	if (!c)
		return;
	Py_XDECREF(c->obj);
	free(c);
}

const char *dli_py_comm_name(void *comm)
{
	return ((struct dli_py_comm *)comm)->name;
}

/* ---- The doctor's calls: the table, as the core calls it ---- */

static PyObject *raise_comm_error(PyObject *m, int rc, const struct dli_error *err,
				  const bool *missing, size_t n)
{
	PyObject *type = PyObject_GetAttrString(m, "Error");
	PyObject *who = PyList_New(0);
	PyObject *exc = type ? PyObject_CallFunction(type, "s",
						     err->message[0] ? err->message : strerror(-rc))
			     : NULL;
	for (size_t i = 0; who && missing && i < n; i++) {
		PyObject *x = missing[i] ? PyLong_FromSize_t(i) : NULL;
		if (x && PyList_Append(who, x) < 0)
			Py_CLEAR(who);
		Py_XDECREF(x);
	}
	PyObject *code = PyLong_FromLong(rc);
	PyObject *msg = PyUnicode_FromString(err->message);
	if (exc && who && code && msg && !PyObject_SetAttrString(exc, "code", code) &&
	    !PyObject_SetAttrString(exc, "message", msg) &&
	    !PyObject_SetAttrString(exc, "missing", who))
		PyErr_SetObject(type, exc);
	Py_XDECREF(msg);
	Py_XDECREF(code);
	Py_XDECREF(exc);
	Py_XDECREF(who);
	Py_XDECREF(type);
	return NULL;
}

/* Parses (obj, ranks, ...) and makes the communicator and the group; 0 or -1 (exception set). */
static int open_call(PyObject *obj, PyObject *ranks, void **comm, void **group, size_t *n,
		     int **rv)
{
	PyObject *seq = PySequence_Fast(ranks, "ranks must be a sequence of ints");
	if (!seq)
		return -1;
	*n = (size_t)PySequence_Fast_GET_SIZE(seq);
	*rv = calloc(*n ? *n : 1, sizeof **rv);
	*comm = NULL;
	*group = NULL;
	int r = *rv ? 0 : -1;
	if (r)
		PyErr_NoMemory();
	for (size_t i = 0; !r && i < *n; i++) {
		long x = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i));
		if (x == -1 && PyErr_Occurred())
			r = -1;
		(*rv)[i] = (int)x;
	}
	Py_DECREF(seq);
	if (!r)
		r = dli_py_comm_new(obj, comm);
	return r;
}

static PyObject *comm_call(PyObject *m, PyObject *args, bool gather)
{
	PyObject *obj, *ranks;
	Py_buffer data = {0};
	double timeout;
	if (gather ? !PyArg_ParseTuple(args, "OOy*d", &obj, &ranks, &data, &timeout)
		   : !PyArg_ParseTuple(args, "OOd", &obj, &ranks, &timeout))
		return NULL;
	void *comm = NULL, *group = NULL;
	int *rv = NULL;
	size_t n = 0;
	PyObject *ret = NULL;
	unsigned char *recv = NULL;
	bool *missing = NULL;
	if (open_call(obj, ranks, &comm, &group, &n, &rv))
		goto out;
	recv = malloc(n * (size_t)data.len + 1);
	missing = calloc(n + 1, sizeof *missing);
	if (!recv || !missing) {
		PyErr_NoMemory();
		goto out;
	}
	struct dli_error err;
	memset(&err, 0, sizeof err);
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = dli_py_comm_ops.group_create(comm, rv, n, &group, &err);
	if (!rc && gather)
		rc = dli_py_comm_ops.allgather(comm, group, data.buf, (size_t)data.len, recv, timeout,
					       missing, &err);
	else if (!rc)
		rc = dli_py_comm_ops.barrier(comm, group, timeout, missing, &err);
	Py_END_ALLOW_THREADS
	if (rc)
		raise_comm_error(m, rc, &err, missing, n);
	else if (gather)
		ret = PyBytes_FromStringAndSize((const char *)recv, (Py_ssize_t)(n * (size_t)data.len));
	else
		ret = Py_NewRef(Py_None);
out:
	if (group)
		dli_py_comm_ops.group_destroy(comm, group);
	dli_py_comm_free(comm);
	if (gather)
		PyBuffer_Release(&data);
	free(recv);
	free(missing);
	free(rv);
	return ret;
}

static PyObject *comm_allgather(PyObject *m, PyObject *args)
{
	return comm_call(m, args, true);
}

static PyObject *comm_barrier(PyObject *m, PyObject *args)
{
	return comm_call(m, args, false);
}

PyMethodDef dli_py_comm_methods[] = {
	{"_comm_allgather", comm_allgather, METH_VARARGS, NULL},
	{"_comm_barrier", comm_barrier, METH_VARARGS, NULL},
	{NULL, NULL, 0, NULL},
};
