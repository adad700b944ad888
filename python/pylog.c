/* The Python package's host logger: every scalar the core emits (statistics, dli_log_scalar) is
 * queued as (name, iteration, value), and the extension hands the queue to Python with the GIL
 * held, after dli_step and the calls that log (dli_py_logger_deliver). A logger method runs
 * inside the core's calls, on whatever thread emits, with the GIL released; taking the GIL there
 * could wait on a thread that holds it and waits on the core, so nothing here touches Python. */
#include "pylog.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

struct dli_py_scalar {
	char *name;
	int64_t iteration;
	double value;
};

struct dli_py_queue {
	pthread_mutex_t lock;
	struct dli_py_scalar *items;
	size_t n, cap;
	atomic_bool wanted; /* some Python logger is registered: off, log_scalar drops at once */
};

static struct dli_py_queue g_queue = {.lock = PTHREAD_MUTEX_INITIALIZER};
void *const dli_py_logger = &g_queue;
static PyObject *g_sink; /* the callable the queue goes to (dlinspect.logging) */

int dli_py_logger_push(const char *name, int64_t iteration, double value)
{
	struct dli_py_queue *q = &g_queue;
	char *copy = strdup(name);
	if (!copy)
		return -ENOMEM;
	int rc = 0;
	pthread_mutex_lock(&q->lock);
	if (q->n == q->cap) {
		size_t cap = q->cap ? 2 * q->cap : 256;
		struct dli_py_scalar *items = realloc(q->items, cap * sizeof *items);
		if (items) {
			q->items = items;
			q->cap = cap;
		} else {
			rc = -ENOMEM;
		}
	}
	if (rc == 0)
		q->items[q->n++] = (struct dli_py_scalar){copy, iteration, value};
	pthread_mutex_unlock(&q->lock);
	if (rc)
		free(copy);
	return rc;
}

static int py_log_scalar(void *instance, const char *name, int64_t iteration, double value)
{
	struct dli_py_queue *q = instance;
	if (!atomic_load_explicit(&q->wanted, memory_order_relaxed))
		return 0;
	return dli_py_logger_push(name, iteration, value);
}

const struct dli_logger_ops dli_py_logger_ops = {
	.size = sizeof dli_py_logger_ops,
	.log_scalar = py_log_scalar,
};

/* Takes the queue out under the lock, so that a thread emitting meanwhile starts a new one. */
static struct dli_py_scalar *take(size_t *n)
{
	pthread_mutex_lock(&g_queue.lock);
	struct dli_py_scalar *items = g_queue.items;
	*n = g_queue.n;
	g_queue.items = NULL;
	g_queue.n = g_queue.cap = 0;
	pthread_mutex_unlock(&g_queue.lock);
	return items;
}

static void free_items(struct dli_py_scalar *items, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(items[i].name);
	free(items);
}

int dli_py_logger_deliver(void)
{
	size_t n;
	struct dli_py_scalar *items = take(&n);
	if (!n || !g_sink) {
		free_items(items, n);
		return 0;
	}
	PyObject *list = PyList_New((Py_ssize_t)n);
	for (size_t i = 0; list && i < n; i++) {
		/* A name that is not UTF-8 (a host's bytes) is still delivered, as Python's file names
		 * carry such bytes. */
		PyObject *name = PyUnicode_DecodeUTF8(items[i].name, (Py_ssize_t)strlen(items[i].name),
						      "surrogateescape");
		PyObject *t = name ? Py_BuildValue("(NdL)", name, items[i].value,
						   (long long)items[i].iteration)
				   : NULL;
		if (!t) {
			Py_CLEAR(list);
			break;
		}
		PyList_SET_ITEM(list, (Py_ssize_t)i, t);
	}
	free_items(items, n);
	if (!list)
		return -1;
	PyObject *r = PyObject_CallOneArg(g_sink, list);
	Py_DECREF(list);
	if (!r)
		return -1;
	Py_DECREF(r);
	return 0;
}

static PyObject *mod_scalars_sink(PyObject *m, PyObject *sink)
{
	if (sink != Py_None && !PyCallable_Check(sink)) {
		PyErr_SetString(PyExc_TypeError, "_scalars_sink: a callable or None");
		return NULL;
	}
	PyObject *old = g_sink;
	g_sink = NULL;
	if (sink != Py_None) {
		Py_INCREF(sink);
		g_sink = sink;
	}
	Py_XDECREF(old);
	Py_RETURN_NONE;
}

/* Off: what is queued is dropped, and nothing more is queued (no Python logger to take it). */
static PyObject *mod_scalars_wanted(PyObject *m, PyObject *arg)
{
	int on = PyObject_IsTrue(arg);
	if (on < 0)
		return NULL;
	atomic_store(&g_queue.wanted, on != 0);
	if (!on) {
		size_t n;
		struct dli_py_scalar *items = take(&n);
		free_items(items, n);
	}
	Py_RETURN_NONE;
}

PyMethodDef dli_py_logger_methods[] = {
	{"_scalars_sink", mod_scalars_sink, METH_O,
	 "_scalars_sink(callable or None): where the queued scalars go, as a list of (name, value, "
	 "iteration)"},
	{"_scalars_wanted", mod_scalars_wanted, METH_O,
	 "_scalars_wanted(bool): whether the host logger queues the scalars the core emits"},
	{NULL, NULL, 0, NULL},
};
