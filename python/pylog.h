/* The core's host logger (dli_options.logger_ops) of the Python package: the scalars the core
 * emits, queued, for the Python loggers of dlinspect.logging (pylog.c, docs/python.md,
 * "Python loggers"). Private to the extension. */
#ifndef DLI_PYLOG_H
#define DLI_PYLOG_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlinspect/plugin.h>

/* The table and state dli_options.logger_ops and .logger point at. Its log_scalar never takes
 * the GIL: it queues, while the queue is wanted (_scalars_wanted). */
extern const struct dli_logger_ops dli_py_logger_ops;
extern void *const dli_py_logger;

/* Queues one scalar whether or not the queue is wanted (a Python logger's own, without a
 * context). 0 or -ENOMEM. */
int dli_py_logger_push(const char *name, int64_t iteration, double value);

/* With the GIL held: hands the queued scalars, in the order they came, to the sink set by
 * _scalars_sink (a callable taking a list of (name, value, iteration) tuples) and empties the
 * queue. 0, or -1 with the sink's exception set (every scalar was handed over all the same). */
int dli_py_logger_deliver(void);

/* Module functions: _scalars_sink(callable or None), _scalars_wanted(bool). */
extern PyMethodDef dli_py_logger_methods[];

#endif
