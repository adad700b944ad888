/* The core's communicator table (struct dli_comm_ops) over a Python object, so that a Python
 * host reduces statistics through its own collectives, e.g. torch.distributed (pycomm.c,
 * docs/distributed.md, "torch.distributed"). Private to the extension. */
#ifndef DLI_PYCOMM_H
#define DLI_PYCOMM_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlinspect/plugin.h>

/* The table dli_options.comm_ops points at; its calls take the GIL themselves. */
extern const struct dli_comm_ops dli_py_comm_ops;

/* With the GIL held: reads obj's `rank`, `size` and `name` and makes *comm, which holds a
 * reference to obj. 0, or -1 with a Python exception set. Free with dli_py_comm_free. */
int dli_py_comm_new(PyObject *obj, void **comm);
/* With the GIL held; NULL is accepted. Only after the context that used it is destroyed. */
void dli_py_comm_free(void *comm);
/* The name the core shows ("torch"); borrowed from comm. */
const char *dli_py_comm_name(void *comm);

/* Module functions: _comm_allgather(obj, ranks, data, timeout) -> bytes and
 * _comm_barrier(obj, ranks, timeout), each through the same table the core calls, with the GIL
 * released (dlinspect doctor). A failure raises dlinspect.Error with .code, .message and
 * .missing (the members, as indexes into ranks, whose part did not come). */
extern PyMethodDef dli_py_comm_methods[];

#endif
