/* dlinspect._dlinspect: the CPython binding over the core (docs/python.md). One global context, as
 * nvdlfw_inspect's debug_api has; layer handles that cost a pointer check and a C call on the
 * no-op path; tensors read in place through DLPack, the buffer protocol or numpy's array
 * interface, and never kept past the call. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/dlinspect.h>

#include "context-private.h"
#include "feature-keys-private.h"
#include "host-private.h"
#include "kernels-private.h"
#include "loader-private.h"
#include "registry-private.h"

#include "dlpack.h"
#include "pycomm.h"
#include "pylog.h"

/* ---- Module state ---- */

static struct dli_context *g_ctx;
/* Bumped by every initialize and end_debug: a Layer made under another generation looks its
 * handle up again (or answers defaults when no context is open). */
static uint64_t g_gen = 1;
/* Bumped whenever a plan taken before may no longer hold: at initialize and end_debug, at a step
 * back (initialize_training_step to an earlier iteration) and at a mode switch. dlinspect.torch's
 * attached layers compare it at each model call (_plan_state) and plan again when it moved. */
static uint64_t g_plans = 1;
static PyObject *g_layers;     /* dict: layer name -> Layer, for the current context */
static PyObject *g_tensor_ids; /* dict: tensor name -> id, for the current context */
static PyObject *g_error;        /* dlinspect.Error */
static PyObject *g_config_error; /* dlinspect.ConfigError(Error) */
static PyObject *g_stop_requested; /* dlinspect.StopRequested(Error) */
/* The Python communicator of the current context (pycomm.c), or NULL. */
static void *g_comm;

static const char *const gemm_names[DLI_GEMM_COUNT] = {"fprop", "dgrad", "wgrad"};
static const char *const std_tensor_names[DLI_TENSOR_STANDARD_COUNT] = {
	"activation", "gradient", "weight", "output", "wgrad", "dgrad"};
static PyObject *g_gemm_str[DLI_GEMM_COUNT];                /* interned */
static PyObject *g_tensor_str[DLI_TENSOR_STANDARD_COUNT]; /* interned */
static PyObject *g_str_dlpack, *g_str_dlpack_device, *g_str_array_interface, *g_str_dtype,
	*g_str_name, *g_kw_stream_version, *g_kw_stream, *g_max_version;

/* ---- Errors ---- */

/* Raises dlinspect.Error from `err`: ConfigError when a config file or text is involved,
 * StopRequested for -ECANCELED (a feature asked the host to stop). */
static PyObject *raise_dli_error(const struct dli_error *err, int rc)
{
	bool config = err->file[0] != '\0';
	PyObject *type = config ? g_config_error : rc == -ECANCELED ? g_stop_requested : g_error;
	const char *msg = err->message[0] ? err->message : strerror(-rc);
	PyObject *exc = PyObject_CallFunction(type, "s", msg);
	if (!exc)
		return NULL;
	PyObject *code = PyLong_FromLong(rc);
	int bad = !code || PyObject_SetAttrString(exc, "code", code);
	Py_XDECREF(code);
	if (!bad && config) {
		/* `message` without the "file:line:column: " prefix, which the three fields hold. */
		const char *bare = msg;
		char prefix[600];
		snprintf(prefix, sizeof prefix, "%s:%d:%d: ", err->file, err->line, err->column);
		if (!strncmp(bare, prefix, strlen(prefix)))
			bare += strlen(prefix);
		PyObject *file = PyUnicode_DecodeFSDefault(err->file);
		PyObject *line = PyLong_FromLong(err->line);
		PyObject *col = PyLong_FromLong(err->column);
		PyObject *m = PyUnicode_FromString(bare);
		bad = !file || !line || !col || !m || PyObject_SetAttrString(exc, "file", file) ||
		      PyObject_SetAttrString(exc, "line", line) ||
		      PyObject_SetAttrString(exc, "column", col) ||
		      PyObject_SetAttrString(exc, "message", m);
		Py_XDECREF(file);
		Py_XDECREF(line);
		Py_XDECREF(col);
		Py_XDECREF(m);
	} else if (!bad) {
		PyObject *m = PyUnicode_FromString(msg);
		bad = !m || PyObject_SetAttrString(exc, "message", m);
		Py_XDECREF(m);
	}
	if (!bad)
		PyErr_SetObject(type, exc);
	Py_DECREF(exc);
	return NULL;
}

/* A failed call that returns a code: the core's per-thread text names layer, tensor and why. */
static PyObject *raise_call_error(const char *what, int rc)
{
	struct dli_error err;
	memset(&err, 0, sizeof err);
	err.code = rc;
	const char *last = dli_last_error(g_ctx);
	if (last && *last)
		snprintf(err.message, sizeof err.message, "%s", last);
	else
		snprintf(err.message, sizeof err.message, "%s failed: %s", what, strerror(-rc));
	return raise_dli_error(&err, rc);
}

/* ---- Argument parsing (vectorcall) ---- */

/* Fills out[0..nmax) from positional and keyword arguments; missing optional ones are NULL.
 * The no-keyword case is a copy loop. */
static int parse_args(const char *fn, const char *const *names, Py_ssize_t nreq, Py_ssize_t nmax,
		      PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **out)
{
	if (nargs > nmax) {
		PyErr_Format(PyExc_TypeError, "%s() takes at most %zd positional arguments (%zd given)",
			     fn, nmax, nargs);
		return -1;
	}
	Py_ssize_t i;
	for (i = 0; i < nargs; i++)
		out[i] = args[i];
	for (; i < nmax; i++)
		out[i] = NULL;
	if (kwnames) {
		Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
		for (Py_ssize_t k = 0; k < nkw; k++) {
			PyObject *key = PyTuple_GET_ITEM(kwnames, k);
			Py_ssize_t j;
			for (j = 0; j < nmax; j++)
				if (PyUnicode_CompareWithASCIIString(key, names[j]) == 0)
					break;
			if (j == nmax) {
				PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'",
					     fn, key);
				return -1;
			}
			if (out[j]) {
				PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'",
					     fn, names[j]);
				return -1;
			}
			out[j] = args[nargs + k];
		}
	}
	for (i = 0; i < nreq; i++)
		if (!out[i]) {
			PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s'", fn, names[i]);
			return -1;
		}
	return 0;
}

static inline bool is_none(PyObject *o)
{
	return !o || o == Py_None;
}

/* ---- Names ---- */

/* A name's UTF-8 text for the core, which ends a name at its first NUL: a name holding one is
 * refused, or "a\0b" would be the layer "a". NULL with an exception set. */
static const char *name_utf8(PyObject *name, const char *what)
{
	Py_ssize_t n;
	const char *s = PyUnicode_AsUTF8AndSize(name, &n);
	if (s && strlen(s) != (size_t)n) {
		PyErr_Format(PyExc_ValueError, "%s %R holds a NUL character", what, name);
		return NULL;
	}
	return s;
}

static int gemm_of(PyObject *name)
{
	for (int g = 0; g < DLI_GEMM_COUNT; g++)
		if (name == g_gemm_str[g])
			return g;
	if (!PyUnicode_Check(name)) {
		PyErr_Format(PyExc_TypeError, "gemm must be a str ('fprop', 'dgrad' or 'wgrad'), not %.100s",
			     Py_TYPE(name)->tp_name);
		return -1;
	}
	for (int g = 0; g < DLI_GEMM_COUNT; g++)
		if (PyUnicode_CompareWithASCIIString(name, gemm_names[g]) == 0)
			return g;
	PyErr_Format(PyExc_ValueError, "unknown gemm '%U': expected 'fprop', 'dgrad' or 'wgrad'", name);
	return -1;
}

/* A tensor name's id (-1: a name nothing selects), or -2 with an exception set. Standard names
 * passed as literals are interned, so they match by pointer; others hit the per-context cache. */
static int tensor_of(PyObject *name)
{
	for (int t = 0; t < DLI_TENSOR_STANDARD_COUNT; t++)
		if (name == g_tensor_str[t])
			return t;
	if (!PyUnicode_Check(name)) {
		PyErr_Format(PyExc_TypeError, "tensor name must be a str, not %.100s",
			     Py_TYPE(name)->tp_name);
		return -2;
	}
	PyObject *v = PyDict_GetItemWithError(g_tensor_ids, name);
	if (v)
		return (int)PyLong_AsLong(v);
	if (PyErr_Occurred())
		return -2;
	const char *s = name_utf8(name, "tensor name");
	if (!s)
		return -2;
	int id = g_ctx ? dli_tensor_id(g_ctx, s) : dli_tensor_id(NULL, s);
	PyObject *idobj = PyLong_FromLong(id);
	if (!idobj || PyDict_SetItem(g_tensor_ids, name, idobj)) {
		Py_XDECREF(idobj);
		return -2;
	}
	Py_DECREF(idobj);
	return id;
}

/* ---- Layer ---- */

typedef struct {
	PyObject_HEAD
	struct dli_layer *layer; /* NULL: no context (answers defaults) */
	uint64_t gen;
	PyObject *name;
} LayerObject;

static PyTypeObject LayerType;

/* The handle for the current context: looked up again after initialize/end_debug. Returns 0 with
 * *out NULL when no context is open, -1 with an exception set when the core refuses the name. */
static int layer_refresh(LayerObject *self)
{
	self->layer = NULL;
	self->gen = g_gen;
	if (!g_ctx)
		return 0;
	const char *s = name_utf8(self->name, "layer name");
	if (!s)
		return -1;
	struct dli_error err;
	int rc = dli_layer_get(g_ctx, s, &self->layer, &err);
	if (rc) {
		self->gen = 0;
		raise_dli_error(&err, rc);
		return -1;
	}
	return 0;
}

static inline int layer_handle(LayerObject *self, struct dli_layer **out)
{
	if (self->gen != g_gen && layer_refresh(self))
		return -1;
	*out = self->layer;
	return 0;
}

/* The Layer object for `obj` (a Layer or a name), borrowed; NULL with an exception set. */
static LayerObject *layer_from(PyObject *obj)
{
	if (Py_TYPE(obj) == &LayerType)
		return (LayerObject *)obj;
	if (!PyUnicode_Check(obj)) {
		PyErr_Format(PyExc_TypeError, "layer_name must be a str or a dlinspect.Layer, not %.100s",
			     Py_TYPE(obj)->tp_name);
		return NULL;
	}
	PyObject *l = PyDict_GetItemWithError(g_layers, obj);
	if (l)
		return (LayerObject *)l;
	if (PyErr_Occurred() || !name_utf8(obj, "layer name"))
		return NULL;
	LayerObject *self = PyObject_New(LayerObject, &LayerType);
	if (!self)
		return NULL;
	Py_INCREF(obj);
	self->name = obj;
	self->gen = 0;
	self->layer = NULL;
	if (layer_refresh(self) || PyDict_SetItem(g_layers, obj, (PyObject *)self)) {
		Py_DECREF(self);
		return NULL;
	}
	Py_DECREF(self); /* the dict holds it */
	return self;
}

static void layer_dealloc(LayerObject *self)
{
	Py_XDECREF(self->name);
	PyObject_Free(self);
}

static PyObject *layer_repr(LayerObject *self)
{
	return PyUnicode_FromFormat("dlinspect.layer(%R)", self->name);
}

/* ---- Answers ---- */

static PyObject *answer(bool on, int64_t next, PyObject *want_next)
{
	if (is_none(want_next) || want_next == Py_False) {
		PyObject *r = on ? Py_True : Py_False;
		Py_INCREF(r);
		return r;
	}
	return Py_BuildValue("(OL)", on ? Py_True : Py_False, (long long)next);
}

/* An `iteration` argument (TransformerEngine passes its own count) must be the context's. */
static int check_iteration(PyObject *it)
{
	if (is_none(it) || !g_ctx)
		return 0;
	long long v = PyLong_AsLongLong(it);
	if (v == -1 && PyErr_Occurred())
		return -1;
	long long cur = (long long)dli_iteration_get(g_ctx);
	if (v != cur) {
		PyErr_Format(PyExc_ValueError,
			     "iteration=%lld, but dlinspect is at iteration %lld: dlinspect answers for its "
			     "own iteration (dlinspect.step() advances it, initialize_training_step() sets it)",
			     v, cur);
		return -1;
	}
	return 0;
}

/* initialize(init_training_step=), initialize_training_step() and log_tensor_stats(iteration=)
 * refuse the same steps. */
static int check_training_step(long long v)
{
	if (v < 0) {
		PyErr_Format(PyExc_ValueError, "the training step must be >= 0, not %lld", v);
		return -1;
	}
	return 0;
}

/* ---- Tensors ---- */

struct view {
	struct dli_tensor t;
	PyObject *capsule;  /* a consumed DLPack capsule (renamed), or NULL */
	void *managed;      /* its DLManagedTensor(Versioned) */
	bool versioned;
	Py_buffer buf;
	bool has_buf;
	void *copy;         /* the contiguous copy of a strided CPU tensor, or NULL */
	bool strided_ok;    /* the call takes strides (dli_inspect_tensor_strided): no copy */
	bool strided;       /* t is a strided view: `strides` holds its steps in elements */
	int64_t strides[DLI_TENSOR_MAX_DIMS];
	PyObject *keep;     /* an object to release with the view (the array interface dict) */
	PyObject *detached; /* obj.detach() of a torch tensor that requires grad */
};

static void view_release(struct view *v)
{
	PyMem_Free(v->copy);
	v->copy = NULL;
	if (v->has_buf)
		PyBuffer_Release(&v->buf);
	v->has_buf = false;
	if (v->managed) {
		/* The consumer owns a consumed capsule's tensor and calls its deleter. */
		if (v->versioned) {
			struct dli_dl_managed_versioned *m = v->managed;
			if (m->deleter)
				m->deleter(m);
		} else {
			struct dli_dl_managed *m = v->managed;
			if (m->deleter)
				m->deleter(m);
		}
		v->managed = NULL;
	}
	Py_CLEAR(v->capsule);
	Py_CLEAR(v->keep);
	Py_CLEAR(v->detached);
}

static const char *const dtype_names[DLI_DTYPE_COUNT] = {
	"float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
	"float64", "int8", "uint8", "int32", "int64"};

static PyObject *unsupported_dtype(const char *name, const char *what)
{
	PyErr_Format(PyExc_TypeError,
		     "dlinspect: %s has dtype %s, which dlinspect does not read (it reads float32, "
		     "float16, bfloat16, float8_e4m3fn, float8_e5m2, float64, int8, uint8, int32, int64)",
		     what, name);
	return NULL;
}

static int dtype_from_dl(struct dli_dl_dtype d, const char *what)
{
	char name[48];
	if (d.lanes == 1) {
		switch (d.code) {
		case DLI_DL_FLOAT:
			if (d.bits == 32) return DLI_DTYPE_F32;
			if (d.bits == 16) return DLI_DTYPE_F16;
			if (d.bits == 64) return DLI_DTYPE_F64;
			break;
		case DLI_DL_BFLOAT:
			if (d.bits == 16) return DLI_DTYPE_BF16;
			break;
		case DLI_DL_FLOAT8_E4M3FN:
			if (d.bits == 8) return DLI_DTYPE_F8E4M3;
			break;
		case DLI_DL_FLOAT8_E5M2:
			if (d.bits == 8) return DLI_DTYPE_F8E5M2;
			break;
		case DLI_DL_INT:
			if (d.bits == 8) return DLI_DTYPE_I8;
			if (d.bits == 32) return DLI_DTYPE_I32;
			if (d.bits == 64) return DLI_DTYPE_I64;
			break;
		case DLI_DL_UINT:
			if (d.bits == 8) return DLI_DTYPE_U8;
			break;
		}
	}
	static const char *const codes[] = {"int", "uint", "float", "opaque", "bfloat", "complex",
					    "bool", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz",
					    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
					    "float8_e5m2fnuz"};
	if (d.code == DLI_DL_BOOL)
		snprintf(name, sizeof name, "bool");
	else if (d.code >= DLI_DL_FLOAT8_E3M4 && d.code < sizeof codes / sizeof *codes)
		snprintf(name, sizeof name, "%s", codes[d.code]);
	else if (d.code < sizeof codes / sizeof *codes)
		snprintf(name, sizeof name, "%s%u", codes[d.code], (unsigned)d.bits);
	else
		snprintf(name, sizeof name, "DLPack code %u (%u bits)", (unsigned)d.code,
			 (unsigned)d.bits);
	if (d.lanes != 1) {
		size_t n = strlen(name);
		snprintf(name + n, sizeof name - n, "x%u", (unsigned)d.lanes);
	}
	unsupported_dtype(name, what);
	return -1;
}

/* struct format codes (native or little-endian, single element) to dtypes. */
static int dtype_from_format(const char *fmt, Py_ssize_t itemsize, const char *what)
{
	const char *f = fmt ? fmt : "B";
	if (*f == '@' || *f == '=' || *f == '<')
		f++;
	if (f[0] && !f[1]) {
		switch (f[0]) {
		case 'f': return DLI_DTYPE_F32;
		case 'd': return DLI_DTYPE_F64;
		case 'e': return DLI_DTYPE_F16;
		case 'b': return DLI_DTYPE_I8;
		case 'B': return DLI_DTYPE_U8;
		case 'i': case 'l': case 'q': case 'n':
			if (itemsize == 4) return DLI_DTYPE_I32;
			if (itemsize == 8) return DLI_DTYPE_I64;
			break;
		}
	}
	char name[64];
	snprintf(name, sizeof name, "'%s' (buffer format, %zd bytes)", fmt ? fmt : "B", itemsize);
	unsupported_dtype(name, what);
	return -1;
}

/* numpy dtypes the buffer protocol cannot describe (ml_dtypes' bfloat16 and float8 types), by
 * their numpy name. */
static int dtype_from_numpy_name(const char *name)
{
	for (int d = 0; d < DLI_DTYPE_COUNT; d++)
		if (!strcmp(name, dtype_names[d]))
			return d;
	return -1;
}

/* Fills v->t's shape from `shape`/`strides` (strides in bytes when `byte_strides`, else elements;
 * NULL = contiguous) and makes a contiguous copy of a strided CPU tensor when allowed. */
static int view_layout(struct view *v, int ndim, const int64_t *shape, const Py_ssize_t *bstrides,
		       const int64_t *estrides, bool copy_ok, const char *what)
{
	if (ndim > DLI_TENSOR_MAX_DIMS) {
		PyErr_Format(PyExc_ValueError, "dlinspect: %s has %d dimensions; dlinspect reads at most %d",
			     what, ndim, DLI_TENSOR_MAX_DIMS);
		return -1;
	}
	size_t es = dli_dtype_size(v->t.dtype);
	int64_t st[DLI_TENSOR_MAX_DIMS]; /* byte strides */
	v->t.ndim = ndim;
	bool contiguous = true, empty = false;
	int64_t expect = (int64_t)es;
	for (int i = ndim - 1; i >= 0; i--) {
		v->t.shape[i] = shape[i];
		st[i] = bstrides ? (int64_t)bstrides[i] : estrides ? estrides[i] * (int64_t)es : expect;
		if (shape[i] == 0)
			empty = true;
		if (shape[i] != 1 && st[i] != expect)
			contiguous = false;
		expect *= shape[i];
	}
	v->t.contiguous = true;
	if (contiguous || empty)
		return 0;
	if (v->t.device.type != DLI_DEVICE_CPU) {
		PyErr_Format(PyExc_ValueError,
			     "dlinspect: %s is not contiguous and is in device memory: pass a contiguous "
			     "tensor (e.g. t.contiguous())", what);
		return -1;
	}
	if (!copy_ok) {
		PyErr_Format(PyExc_ValueError,
			     "dlinspect: %s is not contiguous: an output tensor must be contiguous", what);
		return -1;
	}
	/* A view whose innermost dimension is contiguous (a column block, every k-th row) goes to
	 * the core as it is: its statistics pass reads the rows in place (docs/statistics.md,
	 * "Strided views"). Others are copied here, as before. A broadcast (stride 0) is copied
	 * too, whichever its dimension: the statistics are those of the tensor as it reads, as for
	 * any layout (docs/python.md), where the core would refuse it. */
	int inner = ndim - 1;
	while (inner > 0 && shape[inner] == 1)
		inner--;
	bool whole = true, broadcast = false;
	for (int i = 0; i < ndim; i++) {
		whole = whole && st[i] % (int64_t)es == 0;
		broadcast = broadcast || (st[i] == 0 && shape[i] > 1);
	}
	if (v->strided_ok && whole && !broadcast && st[inner] == (int64_t)es) {
		for (int i = 0; i < ndim; i++)
			v->strides[i] = st[i] / (int64_t)es;
		v->strided = true;
		v->t.contiguous = false;
		return 0;
	}
	/* A contiguous copy, freed when the call returns (docs/python.md, "Tensors"). */
	int64_t n = dli_tensor_numel(&v->t);
	char *dst = PyMem_Malloc(n ? (size_t)n * es : 1);
	if (!dst) {
		PyErr_NoMemory();
		return -1;
	}
	int64_t idx[DLI_TENSOR_MAX_DIMS] = {0};
	const char *base = v->t.data;
	for (int64_t k = 0; k < n; k++) {
		int64_t off = 0;
		for (int i = 0; i < ndim; i++)
			off += idx[i] * st[i];
		memcpy(dst + k * (int64_t)es, base + off, es);
		for (int i = ndim - 1; i >= 0; i--) {
			if (++idx[i] < shape[i])
				break;
			idx[i] = 0;
		}
	}
	v->copy = dst;
	v->t.data = dst;
	return 0;
}

/* The stream a CUDA producer is asked to order its work on: the caller's `stream`, else torch's
 * current stream when torch is loaded, else the legacy default stream (1, per the protocol). */
static PyObject *consumer_stream(PyObject *stream, int device_id)
{
	if (!is_none(stream)) {
		Py_INCREF(stream);
		return stream;
	}
	PyObject *modules = PyImport_GetModuleDict();
	PyObject *torch = PyDict_GetItemString(modules, "torch");
	PyObject *cuda = torch ? PyObject_GetAttrString(torch, "cuda") : NULL;
	PyObject *s = cuda ? PyObject_CallMethod(cuda, "current_stream", "i", device_id) : NULL;
	Py_XDECREF(cuda);
	PyObject *ptr = s ? PyObject_GetAttrString(s, "cuda_stream") : NULL;
	Py_XDECREF(s);
	PyErr_Clear();
	if (ptr && PyLong_Check(ptr)) {
		/* 0 is the legacy default stream, which the protocol spells 1. */
		if (PyLong_AsLongLong(ptr) != 0)
			return ptr;
		PyErr_Clear();
	}
	Py_XDECREF(ptr);
	return PyLong_FromLong(1);
}

/* Reads `obj` in place: DLPack first, then the buffer protocol, then numpy's array interface
 * (for ml_dtypes arrays, which neither export). `writable`: the caller writes it. `strided_ok`:
 * the caller passes v->strides on (dli_inspect_tensor_strided), so a host view whose innermost
 * dimension is contiguous is not copied. */
static int view_get_ex(PyObject *obj, struct view *v, bool writable, bool strided_ok,
		       PyObject *stream, const char *what)
{
	memset(v, 0, sizeof *v);
	v->strided_ok = strided_ok;
	v->t.device.type = DLI_DEVICE_CPU;
	/* Why __dlpack__ refused obj, when the other ways are tried after it: said if they fail too
	 * (a torch sparse tensor has no buffer either, and "must support DLPack" alone would be
	 * wrong about it). */
	PyObject *dl_refused = NULL;
	PyObject *dl = PyObject_GetAttr(obj, g_str_dlpack);
	if (dl) {
		Py_DECREF(dl);
		int dev_type = DLI_DL_CPU, dev_id = 0;
		PyObject *dev = PyObject_CallMethodNoArgs(obj, g_str_dlpack_device);
		if (!dev)
			return -1;
		if (!PyTuple_Check(dev) || PyTuple_GET_SIZE(dev) != 2) {
			PyErr_Format(PyExc_TypeError,
				     "dlinspect: %s, a %.100s, has a __dlpack_device__() that returned %R, "
				     "not a tuple (device_type, device_id)",
				     what, Py_TYPE(obj)->tp_name, dev);
			Py_DECREF(dev);
			return -1;
		}
		if (!PyArg_ParseTuple(dev, "ii", &dev_type, &dev_id)) {
			Py_DECREF(dev);
			return -1;
		}
		Py_DECREF(dev);
		PyObject *cap = NULL;
		PyObject *s = NULL;
		bool cuda = dev_type == DLI_DL_CUDA || dev_type == DLI_DL_CUDA_MANAGED;
		unsigned long long stream_ptr = 1;
		if (cuda) {
			if (!(s = consumer_stream(stream, dev_id)))
				return -1;
			stream_ptr = PyLong_AsUnsignedLongLong(s);
			if (PyErr_Occurred()) {
				Py_DECREF(s);
				return -1;
			}
		}
		/* obj.__dlpack__(stream=s, max_version=(1, 1)); a producer older than DLPack 1.0
		 * refuses max_version with a TypeError: ask again without it. */
		PyObject *callargs[3] = {obj, s ? s : Py_None, g_max_version};
		cap = PyObject_VectorcallMethod(g_str_dlpack, callargs, 1, g_kw_stream_version);
		if (!cap && PyErr_ExceptionMatches(PyExc_TypeError)) {
			PyErr_Clear();
			if (s)
				cap = PyObject_VectorcallMethod(g_str_dlpack, callargs, 1, g_kw_stream);
			else
				cap = PyObject_CallMethodNoArgs(obj, g_str_dlpack);
		}
		Py_XDECREF(s);
		if (!cap && (PyErr_ExceptionMatches(PyExc_RuntimeError) ||
			     PyErr_ExceptionMatches(PyExc_BufferError))) {
			/* torch exports no tensor that requires grad: read its detached view (the same
			 * memory, no copy), which does not, so this does not recurse further. */
			PyObject *et, *ev, *etb;
			PyErr_Fetch(&et, &ev, &etb);
			PyObject *rg = PyObject_GetAttrString(obj, "requires_grad");
			int needs = rg ? PyObject_IsTrue(rg) : 0;
			Py_XDECREF(rg);
			PyErr_Clear();
			PyObject *d = needs == 1 ? PyObject_CallMethod(obj, "detach", NULL) : NULL;
			if (d) {
				Py_XDECREF(et);
				Py_XDECREF(ev);
				Py_XDECREF(etb);
				int rc = view_get_ex(d, v, writable, strided_ok, stream, what);
				v->detached = d;
				return rc;
			}
			PyErr_Clear();
			PyErr_Restore(et, ev, etb);
		}
		if (!cap) {
			/* numpy refuses dtypes DLPack lacks (ml_dtypes' bfloat16, float8) with a
			 * BufferError: the array interface below still reads them. */
			if (!PyErr_ExceptionMatches(PyExc_BufferError))
				return -1;
			PyObject *et, *ev, *etb;
			PyErr_Fetch(&et, &ev, &etb);
			dl_refused = ev ? PyObject_Str(ev) : NULL;
			Py_XDECREF(et);
			Py_XDECREF(ev);
			Py_XDECREF(etb);
			PyErr_Clear();
			goto no_dlpack;
		}
		struct dli_dl_tensor *t;
		if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
			struct dli_dl_managed_versioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
			if (m->version.major != 1) {
				PyErr_Format(PyExc_BufferError,
					     "dlinspect: %s comes as DLPack %u.%u; dlinspect reads 1.x",
					     what, m->version.major, m->version.minor);
				Py_DECREF(cap);
				return -1;
			}
			PyCapsule_SetName(cap, "used_dltensor_versioned");
			v->managed = m;
			v->versioned = true;
			t = &m->dl_tensor;
			if (writable && (m->flags & DLI_DL_FLAG_READ_ONLY)) {
				v->capsule = cap;
				PyErr_Format(PyExc_ValueError, "dlinspect: %s is read-only", what);
				return -1;
			}
		} else if (PyCapsule_IsValid(cap, "dltensor")) {
			struct dli_dl_managed *m = PyCapsule_GetPointer(cap, "dltensor");
			PyCapsule_SetName(cap, "used_dltensor");
			v->managed = m;
			t = &m->dl_tensor;
		} else {
			PyErr_Format(PyExc_TypeError,
				     "dlinspect: %s's __dlpack__() returned no unused DLPack capsule", what);
			Py_DECREF(cap);
			return -1;
		}
		v->capsule = cap;
		int dt = dtype_from_dl(t->dtype, what);
		if (dt < 0)
			return -1;
		v->t.dtype = dt;
		switch (t->device.device_type) {
		case DLI_DL_CPU:
		case DLI_DL_CUDA_HOST:
			v->t.device.type = DLI_DEVICE_CPU;
			break;
		case DLI_DL_CUDA:
		case DLI_DL_CUDA_MANAGED:
			v->t.device.type = DLI_DEVICE_CUDA;
			v->t.device.index = t->device.device_id;
			break;
		default:
			PyErr_Format(PyExc_TypeError,
				     "dlinspect: %s is on DLPack device type %d; dlinspect reads CPU and "
				     "CUDA memory", what, (int)t->device.device_type);
			return -1;
		}
		if (v->t.device.type == DLI_DEVICE_CUDA) {
			/* The producer ordered its work before the stream we named; the core orders its
			 * own work on that same stream. */
			v->t.device.stream = stream_ptr == 1 ? NULL : (void *)(uintptr_t)stream_ptr;
		}
		v->t.data = (char *)t->data + t->byte_offset;
		return view_layout(v, t->ndim, t->shape, NULL, t->strides, !writable, what);
	}
	if (!PyErr_ExceptionMatches(PyExc_AttributeError))
		return -1;
	PyErr_Clear();
no_dlpack:
	if (PyObject_GetBuffer(obj, &v->buf,
			       writable ? PyBUF_RECORDS : PyBUF_RECORDS_RO) == 0) {
		Py_XDECREF(dl_refused);
		v->has_buf = true;
		int dt = dtype_from_format(v->buf.format, v->buf.itemsize, what);
		if (dt < 0)
			return -1;
		v->t.dtype = dt;
		v->t.data = v->buf.buf;
		int64_t shape[DLI_TENSOR_MAX_DIMS];
		if (v->buf.ndim > DLI_TENSOR_MAX_DIMS)
			return view_layout(v, v->buf.ndim, NULL, NULL, NULL, false, what);
		for (int i = 0; i < v->buf.ndim; i++)
			shape[i] = v->buf.shape[i];
		return view_layout(v, v->buf.ndim, shape, v->buf.strides, NULL, !writable, what);
	}
	PyObject *buf_err_type, *buf_err, *buf_tb;
	PyErr_Fetch(&buf_err_type, &buf_err, &buf_tb);
	/* numpy arrays of ml_dtypes types: the array interface gives pointer, shape and strides,
	 * the dtype's name says what the bytes are. */
	PyObject *ai = PyObject_GetAttr(obj, g_str_array_interface);
	if (!ai || !PyDict_Check(ai)) {
		Py_XDECREF(ai);
		PyErr_Clear();
		if (buf_err_type && !PyErr_GivenExceptionMatches(buf_err_type, PyExc_TypeError)) {
			Py_XDECREF(dl_refused);
			PyErr_Restore(buf_err_type, buf_err, buf_tb);
			return -1;
		}
		Py_XDECREF(buf_err_type);
		Py_XDECREF(buf_err);
		Py_XDECREF(buf_tb);
		if (dl_refused)
			PyErr_Format(PyExc_TypeError,
				     "dlinspect: %s, a %.100s, cannot be read: its __dlpack__() refused "
				     "it (%.200S), and it has no buffer protocol",
				     what, Py_TYPE(obj)->tp_name, dl_refused);
		else
			PyErr_Format(PyExc_TypeError,
				     "dlinspect: %s must support DLPack (__dlpack__) or the buffer "
				     "protocol, not %.100s", what, Py_TYPE(obj)->tp_name);
		Py_XDECREF(dl_refused);
		return -1;
	}
	Py_XDECREF(dl_refused);
	Py_XDECREF(buf_err_type);
	Py_XDECREF(buf_err);
	Py_XDECREF(buf_tb);
	v->keep = ai;
	PyObject *dtype = PyObject_GetAttr(obj, g_str_dtype);
	PyObject *dname = dtype ? PyObject_GetAttr(dtype, g_str_name) : NULL;
	Py_XDECREF(dtype);
	const char *dn = dname ? PyUnicode_AsUTF8(dname) : NULL;
	if (!dn) {
		Py_XDECREF(dname);
		return -1;
	}
	int dt = dtype_from_numpy_name(dn);
	if (dt < 0) {
		unsupported_dtype(dn, what);
		Py_DECREF(dname);
		return -1;
	}
	Py_DECREF(dname);
	v->t.dtype = dt;
	PyObject *data = PyDict_GetItemString(ai, "data");
	PyObject *shp = PyDict_GetItemString(ai, "shape");
	PyObject *strides = PyDict_GetItemString(ai, "strides");
	if (!data || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2 || !shp ||
	    !PyTuple_Check(shp)) {
		PyErr_Format(PyExc_TypeError, "dlinspect: %s has an unreadable __array_interface__",
			     what);
		return -1;
	}
	if (writable && PyObject_IsTrue(PyTuple_GET_ITEM(data, 1))) {
		PyErr_Format(PyExc_ValueError, "dlinspect: %s is read-only", what);
		return -1;
	}
	v->t.data = PyLong_AsVoidPtr(PyTuple_GET_ITEM(data, 0));
	if (PyErr_Occurred())
		return -1;
	Py_ssize_t nd = PyTuple_GET_SIZE(shp);
	if (nd > DLI_TENSOR_MAX_DIMS)
		return view_layout(v, (int)nd, NULL, NULL, NULL, false, what);
	int64_t shape[DLI_TENSOR_MAX_DIMS];
	Py_ssize_t bst[DLI_TENSOR_MAX_DIMS];
	bool has_strides = strides && strides != Py_None;
	for (Py_ssize_t i = 0; i < nd; i++) {
		shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shp, i));
		if (has_strides)
			bst[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(strides, i));
	}
	if (PyErr_Occurred())
		return -1;
	return view_layout(v, (int)nd, shape, has_strides ? bst : NULL, NULL, !writable, what);
}

/* A quantized tensor argument: (data, scale_inv) or (data, scale_inv, format), data an FP8 tensor
 * (or uint8 codes with `format` 'float8_e4m3fn' / 'float8_e5m2'), scale_inv a float or a float32
 * tensor. */
struct qview {
	struct view data, scale;
	float scale_value;
	struct dli_quantized_tensor q;
};

static void qview_release(struct qview *q)
{
	view_release(&q->data);
	view_release(&q->scale);
}

/* TransformerEngine's FP8 tensors (Float8Tensor: _data codes, _scale_inv, _fp8_dtype) as the
 * tuple (codes, scale_inv, format); NULL without an exception when obj is not one. */
static PyObject *te_fp8_tuple(PyObject *obj)
{
	PyObject *data = PyObject_GetAttrString(obj, "_data");
	PyObject *si = data ? PyObject_GetAttrString(obj, "_scale_inv") : NULL;
	PyObject *dt = si ? PyObject_GetAttrString(obj, "_fp8_dtype") : NULL;
	PyObject *dts = dt ? PyObject_Str(dt) : NULL;
	const char *d = dts ? PyUnicode_AsUTF8(dts) : NULL;
	PyObject *t = NULL;
	if (d && (strstr(d, "E4M3") || strstr(d, "e4m3")))
		t = Py_BuildValue("(OOs)", data, si, "float8_e4m3fn");
	else if (d && (strstr(d, "E5M2") || strstr(d, "e5m2")))
		t = Py_BuildValue("(OOs)", data, si, "float8_e5m2");
	Py_XDECREF(data);
	Py_XDECREF(si);
	Py_XDECREF(dt);
	Py_XDECREF(dts);
	if (!t)
		PyErr_Clear();
	return t;
}

/* view_get_ex for a call that takes no strides: a strided tensor is copied. */
static int view_get(PyObject *obj, struct view *v, bool writable, PyObject *stream,
		    const char *what)
{
	return view_get_ex(obj, v, writable, false, stream, what);
}

static int qview_get(PyObject *obj, struct qview *q, PyObject *stream, const char *what)
{
	memset(q, 0, sizeof *q);
	if (!PyTuple_Check(obj)) {
		PyObject *t = te_fp8_tuple(obj);
		if (t) {
			int rc = qview_get(t, q, stream, what);
			/* The tuple's items stay alive through obj's own attributes. */
			Py_DECREF(t);
			return rc;
		}
	}
	if (!PyTuple_Check(obj)) {
		PyErr_Format(PyExc_TypeError,
			     "dlinspect: %s must be a tuple (data, scale_inv[, format]), not %.100s", what,
			     Py_TYPE(obj)->tp_name);
		return -1;
	}
	if (PyTuple_GET_SIZE(obj) < 2 || PyTuple_GET_SIZE(obj) > 3) {
		PyErr_Format(PyExc_TypeError,
			     "dlinspect: %s must be a tuple (data, scale_inv[, format]) of 2 or 3 "
			     "items, not %zd", what, PyTuple_GET_SIZE(obj));
		return -1;
	}
	if (view_get(PyTuple_GET_ITEM(obj, 0), &q->data, false, stream, what))
		return -1;
	if (PyTuple_GET_SIZE(obj) == 3) {
		const char *f = PyUnicode_Check(PyTuple_GET_ITEM(obj, 2))
					? PyUnicode_AsUTF8(PyTuple_GET_ITEM(obj, 2))
					: NULL;
		int d = f ? dtype_from_numpy_name(f) : -1;
		if (d != DLI_DTYPE_F8E4M3 && d != DLI_DTYPE_F8E5M2) {
			PyErr_Format(PyExc_ValueError,
				     "dlinspect: %s's format must be 'float8_e4m3fn' or 'float8_e5m2'", what);
			return -1;
		}
		if (q->data.t.dtype != DLI_DTYPE_U8 && q->data.t.dtype != (enum dli_dtype)d) {
			PyErr_Format(PyExc_TypeError, "dlinspect: %s's data has dtype %s, not uint8 or %s",
				     what, dtype_names[q->data.t.dtype], f);
			return -1;
		}
		q->data.t.dtype = d;
	} else if (q->data.t.dtype != DLI_DTYPE_F8E4M3 && q->data.t.dtype != DLI_DTYPE_F8E5M2) {
		PyErr_Format(PyExc_TypeError,
			     "dlinspect: %s's data has dtype %s: pass FP8 data, or uint8 codes with a "
			     "format as (data, scale_inv, 'float8_e4m3fn')",
			     what, dtype_names[q->data.t.dtype]);
		return -1;
	}
	PyObject *si = PyTuple_GET_ITEM(obj, 1);
	if (PyFloat_Check(si) || PyLong_Check(si)) {
		q->scale_value = (float)PyFloat_AsDouble(si);
		if (PyErr_Occurred())
			return -1;
		if (q->data.t.device.type != DLI_DEVICE_CPU) {
			PyErr_Format(PyExc_ValueError,
				     "dlinspect: %s is in device memory: pass its scale_inv as a tensor "
				     "on the same device", what);
			return -1;
		}
		q->q.scale_inv = &q->scale_value;
		q->q.scale_inv_count = 1;
	} else {
		if (view_get(si, &q->scale, false, stream, what))
			return -1;
		if (q->scale.t.dtype != DLI_DTYPE_F32) {
			PyErr_Format(PyExc_TypeError, "dlinspect: %s's scale_inv has dtype %s, not float32",
				     what, dtype_names[q->scale.t.dtype]);
			return -1;
		}
		q->q.scale_inv = q->scale.t.data;
		q->q.scale_inv_count = dli_tensor_numel(&q->scale.t);
	}
	q->q.data = q->data.t;
	return 0;
}

/* Releasing the GIL costs about 50 ns: worth it only for a pass that takes much longer. */
#define GIL_RELEASE_BYTES (1 << 20)

static bool big(const struct dli_tensor *t)
{
	return (size_t)dli_tensor_numel(t) * dli_dtype_size(t->dtype) >= GIL_RELEASE_BYTES;
}

/* ---- Block-scaled copies (ABI 1.4, dli_inspect_tensor_block; docs/python.md) ----
 * A copy is a dict {"recipe", "data", "scale_inv", "columnwise", "format", "amax"} in
 * TransformerEngine's layout, or one of TransformerEngine's MXFP8Tensor, Float8BlockwiseQTensor
 * and NVFP4Tensor, which is turned into that dict. */

static const char *const block_recipe_names[] = {
	[DLI_BLOCK_MXFP8] = "mxfp8",       [DLI_BLOCK_FP8_1D] = "fp8_block_1d",
	[DLI_BLOCK_FP8_2D] = "fp8_block_2d", [DLI_BLOCK_NVFP4] = "nvfp4",
	[DLI_BLOCK_NVFP4_2D] = "nvfp4_2d",
};
#define BLOCK_RECIPE_LIST "'mxfp8', 'fp8_block_1d', 'fp8_block_2d', 'nvfp4' or 'nvfp4_2d'"

struct bview {
	struct view data, scale, amax;
	float amax_value; /* an amax passed as a Python number */
	struct dli_block_quantized_tensor q;
};

static void bview_release(struct bview *b)
{
	view_release(&b->data);
	view_release(&b->scale);
	view_release(&b->amax);
}

static bool is_nvfp4(int recipe)
{
	return recipe == DLI_BLOCK_NVFP4 || recipe == DLI_BLOCK_NVFP4_2D;
}

/* TransformerEngine's block-scaled tensors carry _rowwise_data; its Float8Tensor carries _data. */
static bool is_te_block(PyObject *obj)
{
	return PyObject_HasAttrString(obj, "_rowwise_data");
}

/* A copy in the block form: a dict or a TransformerEngine block-scaled tensor. Tuples (the
 * per-tensor form) are answered without an attribute lookup. */
static bool is_block_copy(PyObject *obj)
{
	return PyDict_Check(obj) || (!PyTuple_Check(obj) && is_te_block(obj));
}

/* obj's attribute `name` is truthy: 1, 0 when false or absent, -1 on an error. */
static int attr_true(PyObject *obj, const char *name)
{
	PyObject *a = PyObject_GetAttrString(obj, name);
	if (!a) {
		if (!PyErr_ExceptionMatches(PyExc_AttributeError))
			return -1;
		PyErr_Clear();
		return 0;
	}
	int on = PyObject_IsTrue(a);
	Py_DECREF(a);
	return on;
}

/* d[key] = obj.<name>: 0, or -1 with an exception set. */
static int dict_set_attr(PyObject *d, const char *key, PyObject *obj, const char *name)
{
	PyObject *a = PyObject_GetAttrString(obj, name);
	int rc = a ? PyDict_SetItemString(d, key, a) : -1;
	Py_XDECREF(a);
	return rc;
}

/* A TransformerEngine tensor whose layout struct dli_block_quantized_tensor cannot describe:
 * said once per kind with a RuntimeWarning, and handed over as no copy, so that the statistics
 * of the host's own copy are not logged (LogFp8TensorStats says so) while everything else, the
 * what-ifs from hp included, goes on. New reference to None, or NULL when the warning raised. */
static PyObject *te_block_unreadable(int kind, const char *what, const char *why)
{
	static bool warned[3];
	if (!warned[kind]) {
		warned[kind] = true;
		if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
				     "dlinspect: %s %s, which dlinspect does not read: its copies are "
				     "not handed to the features (said once)", what, why) < 0)
			return NULL;
	}
	Py_RETURN_NONE;
}

/* The dict form of one copy of TransformerEngine's block-scaled tensor `obj` (its row-wise copy,
 * or its column-wise one when `columnwise`), or a new reference to None when obj holds no such
 * copy (a tensor quantized for one usage only) or none that can be read
 * (te_block_unreadable). */
static PyObject *te_block_dict(PyObject *obj, bool columnwise, const char *what)
{
	const char *side = columnwise ? "columnwise" : "rowwise";
	int swizzled = attr_true(obj, "_with_gemm_swizzled_scales");
	if (swizzled < 0)
		return NULL;
	if (swizzled)
		return te_block_unreadable(0, what, "holds its scales in the GEMM's swizzled layout "
					      "(optimize_for_gemm)");
	int recipe;
	bool nvfp4 = PyObject_HasAttrString(obj, "_amax_rowwise");
	if (nvfp4) {
		int row_scaled = attr_true(obj, "_row_scaled_nvfp4");
		if (row_scaled < 0)
			return NULL;
		PyObject *e4m3_max = PyObject_GetAttrString(obj, "_nvfp4_e4m3_max");
		long emax = 448;
		if (e4m3_max) {
			emax = PyLong_AsLong(e4m3_max);
			Py_DECREF(e4m3_max);
			if (emax == -1 && PyErr_Occurred())
				return NULL;
		} else {
			PyErr_Clear();
		}
		if (row_scaled)
			return te_block_unreadable(1, what, "is an NVFP4 tensor with a row-scaled amax");
		if (emax != 448)
			return te_block_unreadable(2, what, "is an NVFP4 tensor with a 4over6 scale "
						      "bound (an element is e2m1 * scale * amax / "
						      "(6 * 448) with one amax)");
		PyObject *quantizer = PyObject_GetAttrString(obj, "_quantizer");
		int two_d = 0;
		if (quantizer) {
			two_d = quantizer == Py_None ? 0 : attr_true(quantizer, "with_2d_quantization");
			Py_DECREF(quantizer);
		} else {
			PyErr_Clear();
		}
		if (two_d < 0)
			return NULL;
		recipe = two_d ? DLI_BLOCK_NVFP4_2D : DLI_BLOCK_NVFP4;
	} else {
		PyObject *is_2d = PyObject_GetAttrString(obj, "_is_2D_scaled");
		if (is_2d) {
			int on = PyObject_IsTrue(is_2d);
			Py_DECREF(is_2d);
			if (on < 0)
				return NULL;
			recipe = on ? DLI_BLOCK_FP8_2D : DLI_BLOCK_FP8_1D;
		} else {
			PyErr_Clear();
			recipe = DLI_BLOCK_MXFP8;
		}
	}
	char name[32];
	snprintf(name, sizeof name, "_%s_data", side);
	PyObject *data = PyObject_GetAttrString(obj, name);
	if (!data || data == Py_None)
		return data;
	PyObject *d = PyDict_New();
	PyObject *fields[2] = {NULL, NULL}; /* the recipe's name, the format */
	if (!d || !(fields[0] = PyUnicode_FromString(block_recipe_names[recipe])) ||
	    PyDict_SetItemString(d, "recipe", fields[0]) || PyDict_SetItemString(d, "data", data) ||
	    PyDict_SetItemString(d, "columnwise", columnwise ? Py_True : Py_False))
		goto fail;
	snprintf(name, sizeof name, "_%s_scale_inv", side);
	if (dict_set_attr(d, "scale_inv", obj, name))
		goto fail;
	if (nvfp4) {
		snprintf(name, sizeof name, "_amax_%s", side);
		if (dict_set_attr(d, "amax", obj, name))
			goto fail;
	} else {
		/* TransformerEngine's DType prints as DType.kFloat8E4M3 / DType.kFloat8E5M2. */
		PyObject *dt = PyObject_GetAttrString(obj, "_fp8_dtype");
		PyObject *dts = dt ? PyObject_Str(dt) : NULL;
		Py_XDECREF(dt);
		const char *ds = dts ? PyUnicode_AsUTF8(dts) : NULL;
		if (ds && (strstr(ds, "E4M3") || strstr(ds, "e4m3")))
			fields[1] = PyUnicode_FromString("float8_e4m3fn");
		else if (ds && (strstr(ds, "E5M2") || strstr(ds, "e5m2")))
			fields[1] = PyUnicode_FromString("float8_e5m2");
		else if (ds)
			PyErr_Format(PyExc_ValueError,
				     "dlinspect: %s has _fp8_dtype %s: dlinspect reads E4M3 and E5M2 codes",
				     what, ds);
		Py_XDECREF(dts);
		if (!fields[1] || PyDict_SetItemString(d, "format", fields[1]))
			goto fail;
	}
	Py_DECREF(data);
	Py_DECREF(fields[0]);
	Py_XDECREF(fields[1]);
	return d;
fail:
	Py_DECREF(data);
	Py_XDECREF(d);
	Py_XDECREF(fields[0]);
	Py_XDECREF(fields[1]);
	return NULL;
}

/* Appends "(d0, d1, ...)" of a view's shape to buf. */
static void shape_text(const struct dli_tensor *t, char *buf, size_t size)
{
	size_t n = (size_t)snprintf(buf, size, "(");
	for (int i = 0; i < t->ndim && n < size; i++)
		n += (size_t)snprintf(buf + n, size - n, i ? ", %lld" : "%lld", (long long)t->shape[i]);
	if (n < size)
		snprintf(buf + n, size - n, t->ndim == 1 ? ",)" : ")");
}

/* Reads one entry of a copy's dict as a view; `key` must be present unless `present` is given
 * (then *present says whether it was). A view in device memory is taken: the core says whether
 * any feature needed to read it. */
static int block_entry(PyObject *d, const char *key, struct view *v, PyObject *stream,
		       const char *what, bool *present)
{
	PyObject *o = PyDict_GetItemString(d, key);
	if (present)
		*present = o && o != Py_None;
	if (!o || o == Py_None) {
		if (present)
			return 0;
		PyErr_Format(PyExc_ValueError, "dlinspect: %s has no '%s'", what, key);
		return -1;
	}
	char label[96];
	snprintf(label, sizeof label, "%s's %s", what, key);
	return view_get(o, v, false, stream, label);
}

#define RUP(a, m) (((a) + (m) - 1) / (m) * (m))
#define CEIL_DIV(a, m) (((a) + (m) - 1) / (m))

/* One block-scaled copy (dict or TransformerEngine tensor) for the high-precision tensor `hp`:
 * checks its recipe, dtypes and shapes against TransformerEngine's layout for hp's rows x cols,
 * then describes it with dli_block_quantized_te. *present is false when a TransformerEngine tensor
 * holds no copy of that side. */
static int bview_get(PyObject *obj, bool columnwise_arg, struct bview *b, const struct dli_tensor *hp,
		     PyObject *stream, const char *what, bool *present)
{
	memset(b, 0, sizeof *b);
	*present = true;
	PyObject *d = obj;
	Py_INCREF(d);
	if (!PyDict_Check(obj)) {
		Py_DECREF(d);
		if (!(d = te_block_dict(obj, columnwise_arg, what)))
			return -1;
		if (d == Py_None) {
			Py_DECREF(d);
			*present = false;
			return 0;
		}
	}
	int rc = -1;
	PyObject *r = PyDict_GetItemString(d, "recipe");
	const char *rn = r && PyUnicode_Check(r) ? PyUnicode_AsUTF8(r) : NULL;
	int recipe = 0;
	for (int i = DLI_BLOCK_MXFP8; rn && i <= DLI_BLOCK_NVFP4_2D; i++)
		if (!strcmp(rn, block_recipe_names[i]))
			recipe = i;
	if (!recipe) {
		PyErr_Format(PyExc_ValueError, "dlinspect: %s's recipe must be " BLOCK_RECIPE_LIST
			     ", not %R", what, r ? r : Py_None);
		goto out;
	}
	PyObject *cw = PyDict_GetItemString(d, "columnwise");
	int columnwise = cw ? PyObject_IsTrue(cw) : 0;
	if (columnwise < 0)
		goto out;
	bool nvfp4 = is_nvfp4(recipe);
	/* The element format: FP8 codes name theirs by dtype or by `format`. */
	PyObject *f = PyDict_GetItemString(d, "format");
	int format = DLI_DTYPE_U8;
	if (f && f != Py_None) {
		const char *fs = PyUnicode_Check(f) ? PyUnicode_AsUTF8(f) : NULL;
		format = fs ? dtype_from_numpy_name(fs) : -1;
		if (nvfp4 || (format != DLI_DTYPE_F8E4M3 && format != DLI_DTYPE_F8E5M2)) {
			PyErr_Format(PyExc_ValueError,
				     nvfp4 ? "dlinspect: %s's format is not read for %s (its codes are "
					     "E2M1): leave it out, not %R"
					   : "dlinspect: %s's format must be 'float8_e4m3fn' or "
					     "'float8_e5m2' for %s, not %R",
				     what, rn, f);
			goto out;
		}
	}
	if (block_entry(d, "data", &b->data, stream, what, NULL))
		goto out;
	int dt = b->data.t.dtype;
	if (nvfp4 ? dt != DLI_DTYPE_U8
		  : !(dt == DLI_DTYPE_U8 && format != DLI_DTYPE_U8) &&
			    !((dt == DLI_DTYPE_F8E4M3 || dt == DLI_DTYPE_F8E5M2) &&
			      (format == DLI_DTYPE_U8 || format == dt))) {
		if (nvfp4)
			PyErr_Format(PyExc_TypeError,
				     "dlinspect: %s's data has dtype %s: %s data is uint8, two E2M1 "
				     "codes a byte", what, dtype_names[dt], rn);
		else if (format == DLI_DTYPE_U8)
			PyErr_Format(PyExc_TypeError,
				     "dlinspect: %s's data has dtype %s: pass float8_e4m3fn or "
				     "float8_e5m2 data, or uint8 codes with 'format'", what, dtype_names[dt]);
		else
			PyErr_Format(PyExc_TypeError,
				     "dlinspect: %s's data has dtype %s, not uint8 or its format %s", what,
				     dtype_names[dt], dtype_names[format]);
		goto out;
	}
	if (!nvfp4 && format == DLI_DTYPE_U8)
		format = dt;

	/* hp as TransformerEngine flattens it: cols its last dimension, rows the product of the
	 * others. */
	int64_t cols = hp->ndim ? hp->shape[hp->ndim - 1] : 1, rows = 1;
	for (int i = 0; i + 1 < hp->ndim; i++)
		rows *= hp->shape[i];
	/* The codes: rows x cols, transposed (cols first) in FP8 block scaling's and NVFP4's
	 * column-wise copies, NVFP4's two a byte along their inner dimension. */
	bool transposed = columnwise && recipe != DLI_BLOCK_MXFP8;
	int64_t outer = transposed ? cols : rows, inner = transposed ? rows : cols;
	if (nvfp4)
		inner = CEIL_DIV(inner, 2);
	const struct dli_tensor *codes = &b->data.t;
	int64_t n = dli_tensor_numel(codes);
	bool shape_ok = n == outer * inner && codes->ndim >= 1 &&
			(transposed ? codes->shape[0] == outer : codes->shape[codes->ndim - 1] == inner);
	char got[96];
	if (!shape_ok) {
		shape_text(codes, got, sizeof got);
		PyErr_Format(PyExc_ValueError,
			     "dlinspect: %s's data has shape %s: a %s %s copy of a %lld x %lld tensor "
			     "(rows x cols) holds %lld x %lld %s%s", what, got, rn,
			     columnwise ? "column-wise" : "row-wise", (long long)rows, (long long)cols,
			     (long long)outer, (long long)inner, nvfp4 ? "bytes" : "codes",
			     transposed ? " (transposed: cols first)" : "");
		goto out;
	}

	/* The scales, in the shape of TransformerEngine's get_scale_shape. */
	int64_t srows, scols;
	switch (recipe) {
	case DLI_BLOCK_MXFP8:
		srows = columnwise ? RUP(CEIL_DIV(rows, 32), 4) : RUP(rows, 128);
		scols = columnwise ? RUP(cols, 128) : RUP(CEIL_DIV(cols, 32), 4);
		break;
	case DLI_BLOCK_FP8_1D:
		srows = columnwise ? CEIL_DIV(rows, 128) : CEIL_DIV(cols, 128);
		scols = columnwise ? RUP(cols, 4) : RUP(rows, 4);
		break;
	case DLI_BLOCK_FP8_2D:
		srows = CEIL_DIV(columnwise ? cols : rows, 128);
		scols = RUP(CEIL_DIV(columnwise ? rows : cols, 128), 4);
		break;
	default: /* NVFP4, 1-D and 2-D alike: a 2-D tile repeats its scale on its 16 rows */
		srows = RUP(columnwise ? cols : rows, 128);
		scols = RUP(CEIL_DIV(columnwise ? rows : cols, 16), 4);
		break;
	}
	if (block_entry(d, "scale_inv", &b->scale, stream, what, NULL))
		goto out;
	int sdt = b->scale.t.dtype;
	bool scodesok = recipe == DLI_BLOCK_FP8_1D || recipe == DLI_BLOCK_FP8_2D
			      ? sdt == DLI_DTYPE_F32
			      : sdt == DLI_DTYPE_U8 || (nvfp4 && sdt == DLI_DTYPE_F8E4M3);
	if (!scodesok) {
		PyErr_Format(PyExc_TypeError, "dlinspect: %s's scale_inv has dtype %s, not %s", what,
			     dtype_names[sdt],
			     recipe == DLI_BLOCK_MXFP8 ? "uint8 (E8M0 exponents)"
			     : nvfp4 ? "uint8 or float8_e4m3fn (E4M3 block scales)"
				     : "float32");
		goto out;
	}
	const struct dli_tensor *st = &b->scale.t;
	if (st->ndim != 2 || st->shape[0] != srows || st->shape[1] != scols) {
		shape_text(st, got, sizeof got);
		PyErr_Format(PyExc_ValueError,
			     "dlinspect: %s's scale_inv has shape %s: TransformerEngine's layout of %s "
			     "%s scales for a %lld x %lld tensor (rows x cols) is (%lld, %lld)",
			     what, got, rn, columnwise ? "column-wise" : "row-wise", (long long)rows,
			     (long long)cols, (long long)srows, (long long)scols);
		goto out;
	}

	/* NVFP4's global amax: one float32, as a tensor or a number. */
	const float *amax = NULL;
	PyObject *a = PyDict_GetItemString(d, "amax");
	if (a && a != Py_None && !nvfp4) {
		PyErr_Format(PyExc_ValueError, "dlinspect: %s's amax is read for NVFP4 only, not %s",
			     what, rn);
		goto out;
	}
	if (nvfp4 && a && (PyFloat_Check(a) || PyLong_Check(a))) {
		b->amax_value = (float)PyFloat_AsDouble(a);
		if (PyErr_Occurred())
			goto out;
		amax = &b->amax_value;
	} else if (nvfp4) {
		if (block_entry(d, "amax", &b->amax, stream, what, NULL))
			goto out;
		if (b->amax.t.dtype != DLI_DTYPE_F32 || dli_tensor_numel(&b->amax.t) != 1) {
			shape_text(&b->amax.t, got, sizeof got);
			PyErr_Format(PyExc_ValueError,
				     "dlinspect: %s's amax is %s of shape %s: it must be one float32 (the "
				     "copy's global amax; a row-scaled amax is not read)", what,
				     dtype_names[b->amax.t.dtype], got);
			goto out;
		}
		amax = b->amax.t.data;
	}
	b->q = dli_block_quantized_te(recipe, (enum dli_dtype)format, columnwise, rows, cols,
				      b->data.t.data, b->scale.t.data, amax);
	/* One memory space for the copy; the core reads host memory only for now, and says so
	 * when a feature needs a copy that is elsewhere. */
	const struct dli_device *dd = &b->data.t.device;
	if (b->scale.t.device.type != dd->type || b->scale.t.device.index != dd->index ||
	    (b->amax.t.data && (b->amax.t.device.type != dd->type ||
				b->amax.t.device.index != dd->index))) {
		PyErr_Format(PyExc_ValueError,
			     "dlinspect: %s's data, scale_inv and amax must be in one memory space "
			     "(one device)", what);
		goto out;
	}
	b->q.device = *dd;
	rc = 0;
out:
	Py_DECREF(d);
	return rc;
}
#undef RUP
#undef CEIL_DIV

/* inspect_tensor with block-scaled copies: dli_inspect_tensor_block over hp's view `v`. */
static int inspect_block(struct dli_layer *h, int t, struct view *v, PyObject *rowwise,
			 PyObject *colwise, PyObject *stream)
{
	struct bview rb, cb;
	bool has_r = !is_none(rowwise), has_c = !is_none(colwise);
	memset(&rb, 0, sizeof rb);
	memset(&cb, 0, sizeof cb);
	int rc = -1;
	if (has_r && bview_get(rowwise, false, &rb, &v->t, stream, "rowwise_quantized_tensor", &has_r))
		goto out;
	if (has_c &&
	    bview_get(colwise, true, &cb, &v->t, stream, "columnwise_quantized_tensor", &has_c))
		goto out;
	const int64_t *strides = v->strided ? v->strides : NULL;
	if (big(&v->t)) {
		Py_BEGIN_ALLOW_THREADS
		rc = dli_inspect_tensor_block(h, t, &v->t, strides, has_r ? &rb.q : NULL,
					      has_c ? &cb.q : NULL);
		Py_END_ALLOW_THREADS
	} else {
		rc = dli_inspect_tensor_block(h, t, &v->t, strides, has_r ? &rb.q : NULL,
					      has_c ? &cb.q : NULL);
	}
	if (rc) {
		raise_call_error("inspect_tensor", rc);
		rc = -1;
	}
out:
	bview_release(&rb);
	bview_release(&cb);
	return rc;
}

/* ---- The call set, shared by Layer methods and module functions ---- */

/* The *_enabled queries' answers, with one signature for their table (enabled_queries): `subject`
 * holds the query's gemm and/or tensor name, in argument order. */

static PyObject *do_fp8_gemm_enabled(LayerObject *l, PyObject *const *subject, PyObject *it,
				     PyObject *nx)
{
	struct dli_layer *h;
	int g = gemm_of(subject[0]);
	if (g < 0 || layer_handle(l, &h) || check_iteration(it))
		return NULL;
	int64_t next = DLI_NEVER;
	bool on = h ? dli_fp8_gemm_enabled(h, g, &next) : true;
	return answer(on, next, nx);
}

static PyObject *do_inspect_tensor_enabled(LayerObject *l, PyObject *const *subject, PyObject *it,
					   PyObject *nx)
{
	struct dli_layer *h;
	int t = tensor_of(subject[0]);
	if (t == -2 || layer_handle(l, &h) || check_iteration(it))
		return NULL;
	int64_t next = DLI_NEVER;
	bool on = h ? dli_inspect_tensor_enabled(h, t, &next) : false;
	return answer(on, next, nx);
}

/* The answer of a (gemm, tensor) query: dli_modify_tensor_enabled or
 * dli_inspect_tensor_postquantize_enabled. */
static PyObject *gemm_tensor_enabled(LayerObject *l, PyObject *gemm, PyObject *tensor, PyObject *it,
				     PyObject *nx,
				     bool (*query)(struct dli_layer *, enum dli_gemm, int, int64_t *))
{
	struct dli_layer *h;
	int g = gemm_of(gemm);
	if (g < 0)
		return NULL;
	int t = tensor_of(tensor);
	if (t == -2 || layer_handle(l, &h) || check_iteration(it))
		return NULL;
	int64_t next = DLI_NEVER;
	bool on = h ? query(h, g, t, &next) : false;
	return answer(on, next, nx);
}

static PyObject *do_modify_tensor_enabled(LayerObject *l, PyObject *const *subject, PyObject *it,
					  PyObject *nx)
{
	return gemm_tensor_enabled(l, subject[0], subject[1], it, nx, dli_modify_tensor_enabled);
}

static PyObject *do_postquantize_enabled(LayerObject *l, PyObject *const *subject, PyObject *it,
					 PyObject *nx)
{
	return gemm_tensor_enabled(l, subject[0], subject[1], it, nx,
				   dli_inspect_tensor_postquantize_enabled);
}

static PyObject *do_inspect_tensor(LayerObject *l, PyObject *tensor, PyObject *obj,
				   PyObject *rowwise, PyObject *colwise, PyObject *it,
				   PyObject *stream)
{
	struct dli_layer *h;
	int t = tensor_of(tensor);
	if (t == -2 || layer_handle(l, &h) || check_iteration(it))
		return NULL;
	/* Nothing inspects it now: no tensor work at all. */
	if (!h || !dli_inspect_tensor_enabled(h, t, NULL))
		Py_RETURN_NONE;
	struct view v;
	struct qview rq, cq;
	bool has_r = !is_none(rowwise), has_c = !is_none(colwise);
	memset(&rq, 0, sizeof rq);
	memset(&cq, 0, sizeof cq);
	PyObject *ret = NULL;
	if (view_get_ex(obj, &v, false, true, stream, "the tensor"))
		goto out;
	bool block_r = has_r && is_block_copy(rowwise), block_c = has_c && is_block_copy(colwise);
	if (block_r || block_c) {
		if ((has_r && !block_r) || (has_c && !block_c)) {
			PyErr_SetString(PyExc_TypeError,
					"dlinspect: rowwise_quantized_tensor and columnwise_quantized_tensor "
					"must both be block-scaled copies (a dict or a TransformerEngine "
					"block-scaled tensor) or both per-tensor ones");
			goto out;
		}
		if (inspect_block(h, t, &v, rowwise, colwise, stream) == 0) {
			ret = Py_None;
			Py_INCREF(ret);
		}
		goto out;
	}
	if ((has_r && qview_get(rowwise, &rq, stream, "rowwise_quantized_tensor")) ||
	    (has_c && qview_get(colwise, &cq, stream, "columnwise_quantized_tensor")))
		goto out;
	int rc;
	if (big(&v.t)) {
		Py_BEGIN_ALLOW_THREADS
		rc = dli_inspect_tensor_strided(h, t, &v.t, v.strided ? v.strides : NULL,
						has_r ? &rq.q : NULL, has_c ? &cq.q : NULL);
		Py_END_ALLOW_THREADS
	} else {
		rc = dli_inspect_tensor_strided(h, t, &v.t, v.strided ? v.strides : NULL,
						has_r ? &rq.q : NULL, has_c ? &cq.q : NULL);
	}
	if (rc) {
		raise_call_error("inspect_tensor", rc);
		goto out;
	}
	ret = Py_None;
	Py_INCREF(ret);
out:
	view_release(&v);
	qview_release(&rq);
	qview_release(&cq);
	return ret;
}

static PyObject *do_postquantize(LayerObject *l, PyObject *gemm, PyObject *tensor, PyObject *q,
				 PyObject *it, PyObject *stream)
{
	struct dli_layer *h;
	int g = gemm_of(gemm);
	if (g < 0)
		return NULL;
	int t = tensor_of(tensor);
	if (t == -2 || layer_handle(l, &h) || check_iteration(it))
		return NULL;
	if (!h || !dli_inspect_tensor_postquantize_enabled(h, g, t, NULL))
		Py_RETURN_NONE;
	struct qview qv;
	PyObject *ret = NULL;
	if (qview_get(q, &qv, stream, "the quantized tensor"))
		goto out;
	int rc = dli_inspect_tensor_postquantize(h, g, t, &qv.q);
	if (rc) {
		raise_call_error("inspect_tensor_postquantize", rc);
		goto out;
	}
	ret = Py_None;
	Py_INCREF(ret);
out:
	qview_release(&qv);
	return ret;
}

/* _modify(layer, gemm, tensor, in, out, quantizer_format, scale, amax, stream) -> bool: writes
 * `out` (allocated by the caller: dlinspect/__init__.py) and answers whether a feature did. */
static PyObject *do_modify_tensor(LayerObject *l, PyObject *gemm, PyObject *tensor, PyObject *in,
				  PyObject *out, PyObject *qfmt, PyObject *qscale, PyObject *qamax,
				  PyObject *stream)
{
	struct dli_layer *h;
	int g = gemm_of(gemm);
	if (g < 0)
		return NULL;
	int t = tensor_of(tensor);
	if (t == -2 || layer_handle(l, &h))
		return NULL;
	if (!h || !dli_modify_tensor_enabled(h, g, t, NULL))
		Py_RETURN_FALSE;
	struct dli_quantizer qz;
	float scale = 0, amax = 0;
	memset(&qz, 0, sizeof qz);
	qz.size = sizeof qz;
	bool has_q = !is_none(qfmt);
	if (has_q) {
		const char *f = PyUnicode_Check(qfmt) ? PyUnicode_AsUTF8(qfmt) : NULL;
		int d = f ? dtype_from_numpy_name(f) : -1;
		if (d != DLI_DTYPE_F8E4M3 && d != DLI_DTYPE_F8E5M2) {
			PyErr_SetString(PyExc_ValueError,
					"dlinspect: a quantizer's format must be 'float8_e4m3fn' or 'float8_e5m2'");
			return NULL;
		}
		qz.format = d;
		if (!is_none(qscale)) {
			scale = (float)PyFloat_AsDouble(qscale);
			qz.scale = &scale;
		}
		if (!is_none(qamax)) {
			amax = (float)PyFloat_AsDouble(qamax);
			qz.amax = &amax;
		}
		if (PyErr_Occurred())
			return NULL;
	}
	struct view vi, vo;
	memset(&vo, 0, sizeof vo);
	PyObject *ret = NULL;
	if (view_get(in, &vi, false, stream, "the tensor") ||
	    view_get(out, &vo, true, stream, "out"))
		goto done;
	bool same = vi.t.ndim == vo.t.ndim;
	for (int i = 0; same && i < vi.t.ndim; i++)
		same = vi.t.shape[i] == vo.t.shape[i];
	if (!same) {
		char a[160], b[160];
		shape_text(&vo.t, a, sizeof a);
		shape_text(&vi.t, b, sizeof b);
		PyErr_Format(PyExc_ValueError,
			     "dlinspect: out has shape %s and the tensor %s: out must have the tensor's "
			     "shape", a, b);
		goto done;
	}
	int rc;
	if (big(&vi.t)) {
		Py_BEGIN_ALLOW_THREADS
		rc = dli_modify_tensor(h, g, t, &vi.t, has_q ? &qz : NULL, &vo.t);
		Py_END_ALLOW_THREADS
	} else {
		rc = dli_modify_tensor(h, g, t, &vi.t, has_q ? &qz : NULL, &vo.t);
	}
	if (rc == -ENOENT) {
		ret = Py_False;
	} else if (rc) {
		raise_call_error("modify_tensor", rc);
		goto done;
	} else {
		ret = Py_True;
	}
	Py_INCREF(ret);
done:
	view_release(&vi);
	view_release(&vo);
	return ret;
}

/* nvdlfw_inspect's log_tensor_stats takes any torch tensor: it computes in the tensor's dtype and
 * logs float32 (`.float()`). The statistics passes read the training dtypes only, so a float64
 * or integer tensor in host memory is read here as the float32 copy torch's `.float()` makes
 * (round to nearest), from which the double sums give what the peer logs to float32 accuracy,
 * instead of being refused. v's copy (if any) is replaced; v becomes contiguous float32. */
static int view_as_f32(struct view *v)
{
	enum dli_dtype dt = v->t.dtype;
	if (v->t.device.type != DLI_DEVICE_CPU ||
	    (dt != DLI_DTYPE_F64 && dt != DLI_DTYPE_I8 && dt != DLI_DTYPE_U8 &&
	     dt != DLI_DTYPE_I32 && dt != DLI_DTYPE_I64))
		return 0;
	int64_t n = dli_tensor_numel(&v->t);
	float *dst = PyMem_Malloc(n ? (size_t)n * sizeof(float) : 1);
	if (!dst) {
		PyErr_NoMemory();
		return -1;
	}
	int ndim = v->t.ndim;
	int64_t idx[DLI_TENSOR_MAX_DIMS] = {0};
	const char *base = v->t.data;
	size_t es = dli_dtype_size(dt);
	for (int64_t k = 0; k < n; k++) {
		/* Element offset: the view's own strides, or row-major for a contiguous one. */
		int64_t off = 0;
		if (v->strided) {
			for (int i = 0; i < ndim; i++)
				off += idx[i] * v->strides[i];
			for (int i = ndim - 1; i >= 0; i--) {
				if (++idx[i] < v->t.shape[i])
					break;
				idx[i] = 0;
			}
		} else {
			off = k;
		}
		const char *src = base + off * (int64_t)es;
		double d;
		int64_t i64;
		int32_t i32;
		switch (dt) {
		case DLI_DTYPE_F64:
			memcpy(&d, src, sizeof d);
			dst[k] = (float)d;
			break;
		case DLI_DTYPE_I8:
			dst[k] = (float)*(const int8_t *)src;
			break;
		case DLI_DTYPE_U8:
			dst[k] = (float)*(const uint8_t *)src;
			break;
		case DLI_DTYPE_I32:
			memcpy(&i32, src, sizeof i32);
			dst[k] = (float)i32;
			break;
		default:
			memcpy(&i64, src, sizeof i64);
			dst[k] = (float)i64;
			break;
		}
	}
	PyMem_Free(v->copy);
	v->copy = dst;
	v->t.data = dst;
	v->t.dtype = DLI_DTYPE_F32;
	v->t.contiguous = true;
	v->strided = false;
	return 0;
}

/* nvdlfw_inspect's log_tensor_stats, the generic call that feeds the base namespace's
 * LogTensorStats (docs/config.md, "Namespaces"): the statistics are logged at once, at
 * `iteration` (None: the current one). There is no query to ask first: the feature itself says
 * whether it selects the tensor. */
static PyObject *do_log_tensor_stats(LayerObject *l, PyObject *tensor_name, PyObject *obj,
				     PyObject *it, PyObject *stream)
{
	struct dli_layer *h;
	if (!PyUnicode_Check(tensor_name)) {
		PyErr_Format(PyExc_TypeError, "tensor_name must be a str, not %.100s",
			     Py_TYPE(tensor_name)->tp_name);
		return NULL;
	}
	const char *name = name_utf8(tensor_name, "tensor name");
	if (!name || layer_handle(l, &h))
		return NULL;
	long long iteration = -1;
	if (!is_none(it)) {
		iteration = PyLong_AsLongLong(it);
		if ((iteration == -1 && PyErr_Occurred()) || check_training_step(iteration))
			return NULL;
	}
	if (!h)
		Py_RETURN_NONE;
	struct view v;
	PyObject *ret = NULL;
	if (view_get_ex(obj, &v, false, true, stream, "the tensor") || view_as_f32(&v))
		goto out;
	struct dli_log_tensor_stats_args a;
	memset(&a, 0, sizeof a);
	a.size = sizeof a;
	a.tensor_name = name;
	a.tensor = &v.t;
	a.iteration = iteration;
	a.strides = v.strided ? v.strides : NULL;
	int rc;
	if (big(&v.t)) {
		Py_BEGIN_ALLOW_THREADS
		rc = dli_call(h, DLI_CALL_LOG_TENSOR_STATS, &a);
		Py_END_ALLOW_THREADS
	} else {
		rc = dli_call(h, DLI_CALL_LOG_TENSOR_STATS, &a);
	}
	if (rc) {
		raise_call_error("log_tensor_stats", rc);
		goto out;
	}
	/* nvdlfw_inspect's loggers get these at the call, not at the step. */
	if (dli_py_logger_deliver())
		goto out;
	ret = Py_None;
	Py_INCREF(ret);
out:
	view_release(&v);
	return ret;
}

/* ---- The *_enabled queries: Layer methods and module functions ---- */

#define FASTCALL_ARGS PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames

/* The *_enabled queries, each a Layer method and a module function taking the same arguments after
 * the module function's first, the layer (a name or a handle). Only the names differ: the module
 * functions say `tensor_name` for the Layer methods' `tensor`, as TransformerEngine's do. */
enum enabled_query_id {
	QUERY_FP8_GEMM,
	QUERY_INSPECT_TENSOR,
	QUERY_MODIFY_TENSOR,
	QUERY_POSTQUANTIZE,
};

static const struct enabled_query {
	const char *name;
	Py_ssize_t subjects; /* the required arguments after the layer: gemm and/or tensor */
	const char *layer_args[4], *module_args[5];
	PyObject *(*answer)(LayerObject *l, PyObject *const *subject, PyObject *it, PyObject *nx);
} enabled_queries[] = {
	[QUERY_FP8_GEMM] = {"fp8_gemm_enabled", 1, {"gemm", "iteration", "next"},
			    {"layer_name", "gemm", "iteration", "next"}, do_fp8_gemm_enabled},
	[QUERY_INSPECT_TENSOR] = {"inspect_tensor_enabled", 1, {"tensor", "iteration", "next"},
				  {"layer_name", "tensor_name", "iteration", "next"},
				  do_inspect_tensor_enabled},
	[QUERY_MODIFY_TENSOR] = {"modify_tensor_enabled", 2, {"gemm", "tensor", "iteration", "next"},
				 {"layer_name", "gemm", "tensor_name", "iteration", "next"},
				 do_modify_tensor_enabled},
	[QUERY_POSTQUANTIZE] = {"inspect_tensor_postquantize_enabled", 2,
				{"gemm", "tensor", "iteration", "next"},
				{"layer_name", "gemm", "tensor_name", "iteration", "next"},
				do_postquantize_enabled},
};

/* A query from a Layer method (`self` its layer) or from a module function (the layer its first
 * argument, a name or a handle). The hot call, the required arguments alone and positional, goes
 * straight to the answer: arguments are parsed only when a keyword or an optional one is passed.
 * Inlined into each entry point, where the row and module_function are constants: the answer is
 * then a direct (tail) call and the counts are immediates, as in a wrapper written out by hand. */
static inline __attribute__((always_inline)) PyObject *
enabled_call(const struct enabled_query *q, bool module_function, LayerObject *self, FASTCALL_ARGS)
{
	Py_ssize_t first = module_function ? 1 : 0;
	Py_ssize_t required = first + q->subjects;
	if (!kwnames && nargs == required) {
		if (module_function && !(self = layer_from(args[0])))
			return NULL;
		return q->answer(self, args + first, NULL, NULL);
	}
	PyObject *a[5];
	if (parse_args(q->name, module_function ? q->module_args : q->layer_args, required,
		       required + 2, args, nargs, kwnames, a))
		return NULL;
	if (module_function && !(self = layer_from(a[0])))
		return NULL;
	return q->answer(self, a + first, a[required], a[required + 1]);
}

/* The Python entry points of a query: a method table holds one function per name. */
#define ENABLED_QUERY_FUNCTIONS(function_name, query)                                            \
	static PyObject *layer_##function_name(LayerObject *self, FASTCALL_ARGS)                 \
	{                                                                                        \
		return enabled_call(&enabled_queries[query], false, self, args, nargs, kwnames); \
	}                                                                                        \
	static PyObject *mod_##function_name(PyObject *m, FASTCALL_ARGS)                         \
	{                                                                                        \
		return enabled_call(&enabled_queries[query], true, NULL, args, nargs, kwnames);  \
	}

ENABLED_QUERY_FUNCTIONS(fp8_gemm_enabled, QUERY_FP8_GEMM)
ENABLED_QUERY_FUNCTIONS(inspect_tensor_enabled, QUERY_INSPECT_TENSOR)
ENABLED_QUERY_FUNCTIONS(modify_tensor_enabled, QUERY_MODIFY_TENSOR)
ENABLED_QUERY_FUNCTIONS(postquantize_enabled, QUERY_POSTQUANTIZE)

/* ---- Layer methods ---- */

static PyObject *layer_inspect_tensor(LayerObject *self, FASTCALL_ARGS)
{
	static const char *const names[] = {"tensor", "obj", "rowwise", "columnwise", "iteration",
					    "stream"};
	PyObject *a[6];
	if (!kwnames && nargs == 2)
		return do_inspect_tensor(self, args[0], args[1], NULL, NULL, NULL, NULL);
	if (parse_args("inspect_tensor", names, 2, 6, args, nargs, kwnames, a))
		return NULL;
	return do_inspect_tensor(self, a[0], a[1], a[2], a[3], a[4], a[5]);
}

static PyObject *layer_postquantize(LayerObject *self, FASTCALL_ARGS)
{
	static const char *const names[] = {"gemm", "tensor", "quantized", "iteration", "stream"};
	PyObject *a[5];
	if (parse_args("inspect_tensor_postquantize", names, 3, 5, args, nargs, kwnames, a))
		return NULL;
	return do_postquantize(self, a[0], a[1], a[2], a[3], a[4]);
}

static PyObject *layer_modify_raw(LayerObject *self, FASTCALL_ARGS)
{
	static const char *const names[] = {"gemm", "tensor", "obj", "out", "format", "scale",
					    "amax", "stream"};
	PyObject *a[8];
	if (parse_args("_modify", names, 4, 8, args, nargs, kwnames, a))
		return NULL;
	return do_modify_tensor(self, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
}

/* nvdlfw_inspect's keywords; skip_reduction and reduction_group are taken and not used: each rank
 * logs its own tensor (docs/python.md). */
static PyObject *layer_log_tensor_stats(LayerObject *self, FASTCALL_ARGS)
{
	static const char *const names[] = {"tensor_name", "tensor", "iteration", "skip_reduction",
					    "reduction_group", "stream"};
	PyObject *a[6];
	if (parse_args("log_tensor_stats", names, 2, 6, args, nargs, kwnames, a))
		return NULL;
	return do_log_tensor_stats(self, a[0], a[1], a[2], a[5]);
}

/* _plan() -> (iteration, next, any, (fp8 x3), inspect mask, (modify masks x3), (postq x3)) */
static PyObject *layer_plan_raw(LayerObject *self, PyObject *unused)
{
	struct dli_layer *h;
	if (layer_handle(self, &h))
		return NULL;
	struct dli_layer_plan p;
	memset(&p, 0, sizeof p);
	p.size = sizeof p;
	if (!h) {
		p.iteration = 0;
		p.next = DLI_NEVER;
		for (int g = 0; g < DLI_GEMM_COUNT; g++)
			p.fp8[g] = true;
	} else {
		int rc = dli_layer_plan(h, &p);
		if (rc)
			return raise_call_error("plan", rc);
	}
	return Py_BuildValue("(LLO(OOO)K(KKK)(KKK))", (long long)p.iteration, (long long)p.next,
			     p.any ? Py_True : Py_False, p.fp8[0] ? Py_True : Py_False,
			     p.fp8[1] ? Py_True : Py_False, p.fp8[2] ? Py_True : Py_False,
			     (unsigned long long)p.inspect, (unsigned long long)p.modify[0],
			     (unsigned long long)p.modify[1], (unsigned long long)p.modify[2],
			     (unsigned long long)p.postquantize[0],
			     (unsigned long long)p.postquantize[1],
			     (unsigned long long)p.postquantize[2]);
}

static PyObject *layer_get_name(LayerObject *self, void *closure)
{
	Py_INCREF(self->name);
	return self->name;
}

static PyMethodDef layer_methods[] = {
	{"fp8_gemm_enabled", (PyCFunction)(void (*)(void))layer_fp8_gemm_enabled,
	 METH_FASTCALL | METH_KEYWORDS, "fp8_gemm_enabled(gemm, iteration=None, next=False)"},
	{"inspect_tensor_enabled", (PyCFunction)(void (*)(void))layer_inspect_tensor_enabled,
	 METH_FASTCALL | METH_KEYWORDS, "inspect_tensor_enabled(tensor, iteration=None, next=False)"},
	{"modify_tensor_enabled", (PyCFunction)(void (*)(void))layer_modify_tensor_enabled,
	 METH_FASTCALL | METH_KEYWORDS,
	 "modify_tensor_enabled(gemm, tensor, iteration=None, next=False)"},
	{"inspect_tensor_postquantize_enabled",
	 (PyCFunction)(void (*)(void))layer_postquantize_enabled, METH_FASTCALL | METH_KEYWORDS,
	 "inspect_tensor_postquantize_enabled(gemm, tensor, iteration=None, next=False)"},
	{"inspect_tensor", (PyCFunction)(void (*)(void))layer_inspect_tensor,
	 METH_FASTCALL | METH_KEYWORDS,
	 "inspect_tensor(tensor, obj, rowwise=None, columnwise=None, iteration=None, stream=None)"},
	{"inspect_tensor_postquantize", (PyCFunction)(void (*)(void))layer_postquantize,
	 METH_FASTCALL | METH_KEYWORDS,
	 "inspect_tensor_postquantize(gemm, tensor, quantized, iteration=None, stream=None)"},
	{"log_tensor_stats", (PyCFunction)(void (*)(void))layer_log_tensor_stats,
	 METH_FASTCALL | METH_KEYWORDS,
	 "log_tensor_stats(tensor_name, tensor, iteration=None, skip_reduction=False, "
	 "reduction_group=None, stream=None)"},
	{"_modify", (PyCFunction)(void (*)(void))layer_modify_raw, METH_FASTCALL | METH_KEYWORDS,
	 NULL},
	{"_plan", (PyCFunction)layer_plan_raw, METH_NOARGS, NULL},
	{NULL},
};

static PyGetSetDef layer_getset[] = {
	{"name", (getter)layer_get_name, NULL, "the layer's name", NULL},
	{NULL},
};

static PyTypeObject LayerType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "dlinspect.Layer",
	.tp_basicsize = sizeof(LayerObject),
	.tp_dealloc = (destructor)layer_dealloc,
	.tp_repr = (reprfunc)layer_repr,
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "A layer handle (dlinspect.layer(name)): the fast path of every call.",
	.tp_methods = layer_methods,
	.tp_getset = layer_getset,
};

/* ---- Module functions ---- */

static PyObject *mod_layer(PyObject *m, PyObject *name)
{
	LayerObject *l = layer_from(name);
	if (!l)
		return NULL;
	Py_INCREF(l);
	return (PyObject *)l;
}

/* Module-level forms: the first argument is a layer name or handle (keyword `layer_name`). */
static PyObject *mod_inspect_tensor(PyObject *m, FASTCALL_ARGS)
{
	static const char *const names[] = {"layer_name", "tensor_name", "tensor", "iteration",
					    "rowwise_quantized_tensor", "columnwise_quantized_tensor",
					    "stream", "tp_group", "quantizer", "tp_size"};
	PyObject *a[10];
	if (parse_args("inspect_tensor", names, 3, 10, args, nargs, kwnames, a))
		return NULL;
	LayerObject *l = layer_from(a[0]);
	return l ? do_inspect_tensor(l, a[1], a[2], a[4], a[5], a[3], a[6]) : NULL;
}

/* TransformerEngine calls it with keywords and no gemm: the tensor's rowwise or columnwise use
 * names it (docs/python.md). */
static PyObject *mod_postquantize(PyObject *m, FASTCALL_ARGS)
{
	static const char *const names[] = {"layer_name", "gemm", "tensor_name", "tensor",
					    "iteration", "stream", "tp_group", "rowwise", "tp_size"};
	PyObject *a[9];
	if (parse_args("inspect_tensor_postquantize", names, 1, 9, args, nargs, kwnames, a))
		return NULL;
	if (!a[2] || !a[3]) {
		PyErr_Format(PyExc_TypeError, "inspect_tensor_postquantize() missing required argument '%s'",
			     a[2] ? "tensor" : "tensor_name");
		return NULL;
	}
	PyObject *gemm = a[1];
	if (is_none(gemm)) {
		/* rowwise / columnwise use of each input (TransformerEngine's Linear) */
		static const int use[3][2] = {
			[DLI_TENSOR_ACTIVATION] = {DLI_GEMM_FPROP, DLI_GEMM_WGRAD},
			[DLI_TENSOR_GRADIENT] = {DLI_GEMM_DGRAD, DLI_GEMM_WGRAD},
			[DLI_TENSOR_WEIGHT] = {DLI_GEMM_FPROP, DLI_GEMM_DGRAD},
		};
		int t = tensor_of(a[2]);
		if (t == -2)
			return NULL;
		int row = is_none(a[7]) ? 1 : PyObject_IsTrue(a[7]);
		if (row < 0)
			return NULL;
		if (t < 0 || t > DLI_TENSOR_WEIGHT) {
			PyErr_Format(PyExc_ValueError,
				     "inspect_tensor_postquantize(): pass gemm= for tensor '%U' (only "
				     "activation, gradient and weight imply theirs)", a[2]);
			return NULL;
		}
		gemm = g_gemm_str[use[t][row ? 0 : 1]];
	}
	LayerObject *l = layer_from(a[0]);
	return l ? do_postquantize(l, gemm, a[2], a[3], a[4], a[5]) : NULL;
}

/* nvdlfw_inspect's debug_api.log_tensor_stats(layer_name, tensor_name=..., tensor=..., ...). */
static PyObject *mod_log_tensor_stats(PyObject *m, FASTCALL_ARGS)
{
	static const char *const names[] = {"layer_name", "tensor_name", "tensor", "iteration",
					    "skip_reduction", "reduction_group", "stream"};
	PyObject *a[7];
	if (parse_args("log_tensor_stats", names, 3, 7, args, nargs, kwnames, a))
		return NULL;
	LayerObject *l = layer_from(a[0]);
	return l ? do_log_tensor_stats(l, a[1], a[2], a[3], a[6]) : NULL;
}

/* A path argument, str or bytes, as os.fsencode encodes it (a str of any bytes the file system
 * holds): *bytes is new, or NULL for None. */
static int fs_path(PyObject *obj, PyObject **bytes)
{
	*bytes = NULL;
	return obj == Py_None || PyUnicode_FSConverter(obj, bytes) ? 0 : -1;
}

/* _init(config_path, config_yaml, log_dir, plugin_dirs, initial_iteration, tensor_names,
 *       log_level[, comm, rank, world_size, messages_only, config_origin]); comm: a Python communicator
 *       (dlinspect/distributed.py) or None */
static PyObject *mod_init(PyObject *m, PyObject *args)
{
	const char *yaml, *origin = NULL;
	PyObject *path_obj, *log_dir_obj, *dirs, *tnames, *comm_obj = Py_None;
	long long initial;
	int level, rank = 0, world_size = 0;
	/* rank, world_size: the host's (torch.distributed's) when no communicator object gives
	 * them (dlinspect/__init__.py); 0, 0: not said. origin: what config_yaml was made from
	 * ("Python dictionary"), or None. */
	int messages_only = 0; /* the default file logger without statistics (Python loggers) */
	if (!PyArg_ParseTuple(args, "OzOO!LOi|Oiipz", &path_obj, &yaml, &log_dir_obj, &PyList_Type,
			      &dirs, &initial, &tnames, &level, &comm_obj, &rank, &world_size,
			      &messages_only, &origin))
		return NULL;
	if (g_ctx) {
		PyErr_SetString(g_error, "dlinspect is already initialized: call dlinspect.end_debug() "
					 "first");
		return NULL;
	}
	if (check_training_step(initial))
		return NULL;
	Py_ssize_t nd = PyList_GET_SIZE(dirs);
	Py_ssize_t nt = tnames == Py_None ? 0 : PyList_Size(tnames);
	if (nt < 0)
		return NULL;
	PyObject *path = NULL, *log_dir = NULL;
	const char **dv = PyMem_Calloc((size_t)nd + 1, sizeof(char *));
	const char **tv = PyMem_Calloc((size_t)nt + 1, sizeof(char *));
	PyObject *ret = NULL;
	void *comm = NULL;
	if (fs_path(path_obj, &path) || fs_path(log_dir_obj, &log_dir))
		goto out;
	if (!dv || !tv) {
		PyErr_NoMemory();
		goto out;
	}
	if (comm_obj != Py_None && dli_py_comm_new(comm_obj, &comm))
		goto out;
	for (Py_ssize_t i = 0; i < nd; i++)
		if (!(dv[i] = name_utf8(PyList_GET_ITEM(dirs, i), "plugin dir")))
			goto out;
	for (Py_ssize_t i = 0; i < nt; i++)
		if (!(tv[i] = name_utf8(PyList_GET_ITEM(tnames, i), "tensor name")))
			goto out;
	struct dli_options o;
	dli_options_init(&o);
	o.config_path = path ? PyBytes_AS_STRING(path) : NULL;
	o.config_yaml = yaml;
	o.config_origin = origin;
	o.log_dir = log_dir ? PyBytes_AS_STRING(log_dir) : NULL;
	o.plugin_dirs = dv;
	o.n_plugin_dirs = (size_t)nd;
	o.initial_iteration = initial;
	o.log_level = level;
	o.rank = rank;
	o.world_size = world_size;
	if (tnames != Py_None) {
		o.tensor_names = tv;
		o.n_tensor_names = (size_t)nt;
	}
	o.logger_ops = &dli_py_logger_ops;
	o.logger = dli_py_logger;
	o.logger_name = "python";
	o.default_logger_messages_only = messages_only;
	if (comm) {
		o.comm_ops = &dli_py_comm_ops;
		o.comm = comm;
		o.comm_name = dli_py_comm_name(comm);
	}
	struct dli_error err;
	struct dli_context *ctx = NULL;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = dli_init(&o, &ctx, &err);
	Py_END_ALLOW_THREADS
	if (rc) {
		raise_dli_error(&err, rc);
		goto out;
	}
	g_ctx = ctx;
	g_comm = comm;
	comm = NULL;
	g_gen++;
	g_plans++;
	PyDict_Clear(g_layers);
	PyDict_Clear(g_tensor_ids);
	ret = Py_None;
	Py_INCREF(ret);
out:
	dli_py_comm_free(comm);
	PyMem_Free(dv);
	PyMem_Free(tv);
	Py_XDECREF(path);
	Py_XDECREF(log_dir);
	return ret;
}

static PyObject *mod_destroy(PyObject *m, PyObject *unused)
{
	if (g_ctx) {
		struct dli_context *ctx = g_ctx;
		g_ctx = NULL;
		g_gen++;
		g_plans++;
		PyDict_Clear(g_layers);
		PyDict_Clear(g_tensor_ids);
		Py_BEGIN_ALLOW_THREADS
		dli_destroy(ctx);
		Py_END_ALLOW_THREADS
		dli_py_comm_free(g_comm);
		g_comm = NULL;
		if (dli_py_logger_deliver())
			return NULL;
	}
	Py_RETURN_NONE;
}

static PyObject *mod_generation(PyObject *m, PyObject *unused)
{
	return PyLong_FromUnsignedLongLong(g_gen);
}

/* _plan_state() -> (plans, iteration): g_plans, and the iteration (None when not initialized), in
 * one call for dlinspect.torch's root hook. */
static PyObject *mod_plan_state(PyObject *m, PyObject *unused)
{
	if (!g_ctx)
		return Py_BuildValue("(KO)", (unsigned long long)g_plans, Py_None);
	return Py_BuildValue("(KL)", (unsigned long long)g_plans,
			     (long long)dli_iteration_get(g_ctx));
}

static PyObject *mod_initialized(PyObject *m, PyObject *unused)
{
	return PyBool_FromLong(g_ctx != NULL);
}

static PyObject *no_context(void)
{
	PyErr_SetString(g_error, "dlinspect is not initialized: call dlinspect.initialize() first");
	return NULL;
}

/* step() and initialize_training_step() do nothing without a context, as nvdlfw_inspect's. */
static PyObject *mod_step(PyObject *m, PyObject *unused)
{
	if (!g_ctx)
		Py_RETURN_NONE;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = dli_step(g_ctx);
	Py_END_ALLOW_THREADS
	/* The step is taken: its statistics go to the Python loggers before any error is raised. */
	if (dli_py_logger_deliver()) {
		if (rc != -EOVERFLOW && rc != -ECANCELED)
			return NULL;
		/* A stop outranks a logger's error, which rides along as its __context__. */
		PyObject *type, *value, *tb;
		PyErr_Fetch(&type, &value, &tb);
		PyErr_NormalizeException(&type, &value, &tb);
		if (tb)
			PyException_SetTraceback(value, tb);
		raise_call_error("step", rc);
		PyObject *t2, *stop, *tb2;
		PyErr_Fetch(&t2, &stop, &tb2);
		PyErr_NormalizeException(&t2, &stop, &tb2);
		PyException_SetContext(stop, value); /* steals value */
		Py_XDECREF(type);
		Py_XDECREF(tb);
		PyErr_Restore(t2, stop, tb2);
		return NULL;
	}
	if (rc) {
		/* -ECANCELED, a stop a feature asked for (DetectNonFinite's on_detect: stop), must
		 * stop a Python loop as it stops a C one (a warning is shown once and then never
		 * again); the step was taken all the same. -EOVERFLOW: the iteration is at its last,
		 * no step was taken. */
		if (rc == -EOVERFLOW || rc == -ECANCELED)
			return raise_call_error("step", rc);
		/* Training goes on: a logger that could not write said so in the message log and on
		 * stderr already; the step is still taken (docs/logging.md). */
		if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "dlinspect.step(): %s",
				     *dli_last_error(g_ctx) ? dli_last_error(g_ctx) : strerror(-rc)))
			return NULL;
	}
	Py_RETURN_NONE;
}

/* _log_scalar(name, value, iteration): dli_log_scalar, then the Python loggers get it at once.
 * Without a context, the Python loggers alone (dlinspect.logging.MetricLogger.log_scalar). */
static PyObject *mod_log_scalar(PyObject *m, PyObject *args)
{
	const char *name;
	double value;
	long long iteration;
	if (!PyArg_ParseTuple(args, "sdL", &name, &value, &iteration))
		return NULL;
	if (!name[0] || iteration < 0) {
		PyErr_Format(PyExc_ValueError, "log_scalar: %s", !name[0] ? "the name is empty"
									  : "iteration must be >= 0");
		return NULL;
	}
	int rc = 0;
	if (g_ctx) {
		Py_BEGIN_ALLOW_THREADS
		rc = dli_log_scalar(g_ctx, name, iteration, value);
		Py_END_ALLOW_THREADS
	} else if (dli_py_logger_push(name, iteration, value)) {
		return PyErr_NoMemory();
	}
	/* The Python loggers first: a warning made an error (-W error) must not keep it queued. */
	if (dli_py_logger_deliver())
		return NULL;
	if (rc && PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "dlinspect log_scalar('%s'): %s", name,
				   strerror(-rc)))
		return NULL;
	Py_RETURN_NONE;
}

/* _reduction_group_set(ranks) -> None: ranks, a sequence of dlinspect's world ranks, or None for
 * the whole world (dlinspect.set_tensor_reduction_group maps a ProcessGroup to them). */
static PyObject *mod_reduction_group_set(PyObject *m, PyObject *arg)
{
	if (!g_ctx)
		return no_context();
	int *ranks = NULL;
	Py_ssize_t n = 0;
	if (arg != Py_None) {
		PyObject *seq = PySequence_Fast(arg, "dlinspect: the group's ranks must be a sequence");
		if (!seq)
			return NULL;
		n = PySequence_Fast_GET_SIZE(seq);
		if (!(ranks = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *ranks))) {
			Py_DECREF(seq);
			return PyErr_NoMemory();
		}
		for (Py_ssize_t i = 0; i < n; i++) {
			long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
			if (v == -1 && PyErr_Occurred()) {
				Py_DECREF(seq);
				PyMem_Free(ranks);
				return NULL;
			}
			ranks[i] = v < INT_MIN ? INT_MIN : v > INT_MAX ? INT_MAX : (int)v;
		}
		Py_DECREF(seq);
	}
	struct dli_error err;
	memset(&err, 0, sizeof err);
	int rc = dli_reduction_group_set(g_ctx, ranks, (size_t)n, &err);
	PyMem_Free(ranks);
	if (rc)
		return raise_dli_error(&err, rc);
	Py_RETURN_NONE;
}

static PyObject *mod_iteration(PyObject *m, PyObject *unused)
{
	if (!g_ctx)
		return no_context();
	return PyLong_FromLongLong((long long)dli_iteration_get(g_ctx));
}

static PyObject *mod_set_iteration(PyObject *m, PyObject *arg)
{
	long long v = PyLong_AsLongLong(arg);
	if (v == -1 && PyErr_Occurred())
		return NULL;
	if (check_training_step(v))
		return NULL;
	if (g_ctx) {
		if (v < (long long)dli_iteration_get(g_ctx))
			g_plans++; /* a plan's `next` may now lie beyond iterations to come again */
		dli_iteration_set(g_ctx, v);
	}
	Py_RETURN_NONE;
}

static PyObject *mod_set_mode(PyObject *m, PyObject *arg)
{
	if (!g_ctx)
		return no_context();
	int mode;
	if (PyUnicode_Check(arg) && PyUnicode_CompareWithASCIIString(arg, "train") == 0)
		mode = DLI_MODE_TRAIN;
	else if (PyUnicode_Check(arg) && PyUnicode_CompareWithASCIIString(arg, "eval") == 0)
		mode = DLI_MODE_EVAL;
	else {
		PyErr_Format(PyExc_ValueError, "mode must be 'train' or 'eval', not %R", arg);
		return NULL;
	}
	if (mode != (int)dli_mode_get(g_ctx))
		g_plans++;
	dli_mode_set(g_ctx, mode);
	Py_RETURN_NONE;
}

static PyObject *mod_get_mode(PyObject *m, PyObject *unused)
{
	return PyUnicode_FromString(dli_mode_get(g_ctx) == DLI_MODE_EVAL ? "eval" : "train");
}

static PyObject *mod_log(PyObject *m, PyObject *args)
{
	int level;
	const char *text;
	if (!PyArg_ParseTuple(args, "is", &level, &text))
		return NULL;
	if (!g_ctx)
		return no_context();
	dli_log(g_ctx, level, "%s", text);
	Py_RETURN_NONE;
}

static PyObject *mod_tensor_id(PyObject *m, PyObject *name)
{
	int id = tensor_of(name);
	return id == -2 ? NULL : PyLong_FromLong(id);
}

/* A new list of the strings of the NULL-terminated array `v` (borrowed); empty for NULL. */
static PyObject *str_list(const char *const *v)
{
	PyObject *l = PyList_New(0);
	for (size_t i = 0; l && v && v[i]; i++) {
		PyObject *s = PyUnicode_FromString(v[i]);
		if (!s || PyList_Append(l, s))
			Py_CLEAR(l);
		Py_XDECREF(s);
	}
	return l;
}

/* _modules(extra_dirs) -> the modules on the search path, as dicts (dlinspect.list_features and
 * explain_features format them). */

/* The keys the core reads for a feature with these flags (enabled, tensors, the schedule, ...),
 * as `dlinspect plugins --explain` lists them before the feature's own. */
static PyObject *shared_key_list(uint32_t flags)
{
	PyObject *l = PyList_New(0);
	for (size_t i = 0; l && i < DLI_KEY_COUNT; i++) {
		const struct dli_shared_key *k = &dli_shared_keys[i];
		if (!k->type || (k->flag && !(flags & k->flag)))
			continue;
		PyObject *d = Py_BuildValue("{s:s,s:s,s:s,s:s}", "key", k->key, "type", k->type,
					    "default", k->default_text, "doc", k->doc);
		if (!d || PyList_Append(l, d))
			Py_CLEAR(l);
		Py_XDECREF(d);
	}
	return l;
}

static PyObject *param_list(const struct dli_param_desc *p, size_t n)
{
	static const char *const types[] = {"bool", "int", "float", "string", "list of strings",
					    "list of [start, end]"};
	PyObject *l = PyList_New(0);
	for (size_t i = 0; l && i < n; i++) {
		unsigned t = (unsigned)p[i].type;
		/* choices: the values a string takes, or None; range: how `dlinspect plugins
		 * --explain` words a number's bounds ("in [1, 100000]", ">= -1"), or None. */
		PyObject *choices = p[i].choices ? str_list(p[i].choices) : Py_None;
		if (choices == Py_None)
			Py_INCREF(choices);
		char range[96] = "";
		if (p[i].type == DLI_PARAM_INT || p[i].type == DLI_PARAM_FLOAT)
			dli_param_range_text(&p[i], range, sizeof range);
		PyObject *d = choices ? Py_BuildValue("{s:s,s:z,s:s,s:z,s:z,s:O,s:O,s:z}", "key",
						      p[i].key, "alias", p[i].alias, "type",
						      t < sizeof types / sizeof *types ? types[t] : "?",
						      "default", p[i].default_value, "doc", p[i].doc,
						      "required", p[i].required ? Py_True : Py_False,
						      "choices", choices, "range", range[0] ? range : NULL)
				      : NULL;
		Py_XDECREF(choices);
		if (!d || PyList_Append(l, d)) {
			Py_XDECREF(d);
			Py_CLEAR(l);
		}
		Py_XDECREF(d);
	}
	return l;
}

static PyObject *mod_modules(PyObject *m, PyObject *dirs)
{
	if (!PyList_Check(dirs)) {
		PyErr_SetString(PyExc_TypeError, "_modules() takes a list of dirs");
		return NULL;
	}
	Py_ssize_t nd = PyList_GET_SIZE(dirs);
	const char **dv = PyMem_Calloc((size_t)nd + 1, sizeof(char *));
	if (!dv)
		return PyErr_NoMemory();
	for (Py_ssize_t i = 0; i < nd; i++)
		if (!(dv[i] = name_utf8(PyList_GET_ITEM(dirs, i), "plugin dir"))) {
			PyMem_Free(dv);
			return NULL;
		}
	struct dli_error err;
	char **sd = NULL;
	size_t nsd = 0;
	struct dli_loader *loader = NULL;
	PyObject *ret = NULL;
	int rc = dli_search_dirs(dv, (size_t)nd, &sd, &nsd, &err);
	if (!rc)
		rc = dli_loader_create(&dli_host_template, (const char *const *)sd, nsd, &loader, &err);
	if (!rc)
		rc = dli_loader_load_all(loader, &err);
	if (rc) {
		raise_dli_error(&err, rc);
		goto out;
	}
	ret = PyList_New(0);
	for (size_t i = 0; ret && i < dli_loader_count(loader); i++) {
		const struct dli_module *mod = dli_loader_module(loader, i);
		PyObject *feats = PyList_New(0), *logs = PyList_New(0);
		for (size_t k = 0; feats && k < mod->n_features; k++) {
			const struct dli_feature_desc *d = mod->features[k];
			PyObject *aliases = str_list(d->aliases);
			PyObject *params = param_list(d->params, d->n_params);
			PyObject *shared = shared_key_list(d->flags);
			PyObject *f = aliases && params && shared
					      ? Py_BuildValue("{s:s,s:z,s:O,s:O,s:O,s:O}", "name",
							      d->name, "doc", d->doc, "aliases",
							      aliases, "params", params, "shared",
							      shared, "generic",
							      (d->flags & DLI_FEATURE_GENERIC) || !mod->ns
								      ? Py_True
								      : Py_False)
					      : NULL;
			Py_XDECREF(aliases);
			Py_XDECREF(params);
			Py_XDECREF(shared);
			if (!f || PyList_Append(feats, f))
				Py_CLEAR(feats);
			Py_XDECREF(f);
		}
		for (size_t k = 0; logs && k < mod->n_loggers; k++) {
			const struct dli_logger_desc *d = mod->loggers[k];
			PyObject *params = param_list(d->params, d->n_params);
			PyObject *f = params ? Py_BuildValue("{s:s,s:z,s:O}", "name", d->name, "doc",
							     d->doc, "params", params)
					     : NULL;
			Py_XDECREF(params);
			if (!f || PyList_Append(logs, f))
				Py_CLEAR(logs);
			Py_XDECREF(f);
		}
		PyObject *md = feats && logs
				       ? Py_BuildValue("{s:s,s:z,s:z,s:s,s:O,s:O}", "name", mod->name,
						       "namespace", mod->ns, "doc", mod->doc, "path",
						       dli_loader_path(loader, i), "features", feats,
						       "loggers", logs)
				       : NULL;
		Py_XDECREF(feats);
		Py_XDECREF(logs);
		if (!md || PyList_Append(ret, md))
			Py_CLEAR(ret);
		Py_XDECREF(md);
	}
out:
	dli_loader_destroy(loader);
	dli_search_dirs_free(sd, nsd);
	PyMem_Free(dv);
	return ret;
}

/* _layer_attach(name, function): adds a method written in Python (Layer.plan, modify_tensor) to
 * the static Layer type. */
static PyObject *mod_layer_attach(PyObject *m, PyObject *args)
{
	PyObject *name, *fn;
	if (!PyArg_ParseTuple(args, "UO", &name, &fn))
		return NULL;
	if (PyDict_SetItem(LayerType.tp_dict, name, fn))
		return NULL;
	PyType_Modified(&LayerType);
	Py_RETURN_NONE;
}

/* ---- Benchmark helpers (python -m dlinspect.bench) ---- */

/* The floor of a Python call into C: METH_FASTCALL, no work. */
static PyObject *mod_noop(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
	Py_RETURN_NONE;
}

/* _bench_c_stats(obj, reps) -> seconds per pass: the statistics pass the features run, called
 * from C on the same memory, with nothing of the binding in between. */
static PyObject *mod_bench_c_stats(PyObject *m, PyObject *args)
{
	PyObject *obj;
	int reps;
	if (!PyArg_ParseTuple(args, "Oi", &obj, &reps))
		return NULL;
	struct view v;
	if (view_get(obj, &v, false, NULL, "the tensor")) {
		view_release(&v);
		return NULL;
	}
	if (v.t.device.type != DLI_DEVICE_CPU) {
		view_release(&v);
		PyErr_SetString(PyExc_ValueError, "_bench_c_stats reads host memory only");
		return NULL;
	}
	struct dli_stats_record r;
	struct timespec a, b;
	int rc = 0;
	Py_BEGIN_ALLOW_THREADS
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < reps && !rc; i++)
		rc = dli_cpu_stats(v.t.data, v.t.dtype, dli_tensor_numel(&v.t), NULL, &r);
	clock_gettime(CLOCK_MONOTONIC, &b);
	Py_END_ALLOW_THREADS
	view_release(&v);
	if (rc) {
		PyErr_Format(g_error, "dli_cpu_stats failed: %s", strerror(-rc));
		return NULL;
	}
	double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
	return PyFloat_FromDouble(s / (reps > 0 ? reps : 1));
}

static PyMethodDef module_methods[] = {
	{"layer", mod_layer, METH_O, "layer(name) -> Layer: the cached handle for a layer name"},
	{"fp8_gemm_enabled", (PyCFunction)(void (*)(void))mod_fp8_gemm_enabled,
	 METH_FASTCALL | METH_KEYWORDS,
	 "fp8_gemm_enabled(layer_name, gemm, iteration=None, next=False) -> bool"},
	{"inspect_tensor_enabled", (PyCFunction)(void (*)(void))mod_inspect_tensor_enabled,
	 METH_FASTCALL | METH_KEYWORDS,
	 "inspect_tensor_enabled(layer_name, tensor_name, iteration=None, next=False) -> bool"},
	{"modify_tensor_enabled", (PyCFunction)(void (*)(void))mod_modify_tensor_enabled,
	 METH_FASTCALL | METH_KEYWORDS,
	 "modify_tensor_enabled(layer_name, gemm, tensor_name, iteration=None, next=False) -> bool"},
	{"inspect_tensor_postquantize_enabled",
	 (PyCFunction)(void (*)(void))mod_postquantize_enabled, METH_FASTCALL | METH_KEYWORDS,
	 "inspect_tensor_postquantize_enabled(layer_name, gemm, tensor_name, iteration=None, "
	 "next=False) -> bool"},
	{"inspect_tensor", (PyCFunction)(void (*)(void))mod_inspect_tensor,
	 METH_FASTCALL | METH_KEYWORDS,
	 "inspect_tensor(layer_name, tensor_name, tensor, iteration=None, "
	 "rowwise_quantized_tensor=None, columnwise_quantized_tensor=None, stream=None)"},
	{"inspect_tensor_postquantize", (PyCFunction)(void (*)(void))mod_postquantize,
	 METH_FASTCALL | METH_KEYWORDS,
	 "inspect_tensor_postquantize(layer_name, gemm, tensor_name, tensor, iteration=None, "
	 "stream=None)"},
	{"log_tensor_stats", (PyCFunction)(void (*)(void))mod_log_tensor_stats,
	 METH_FASTCALL | METH_KEYWORDS,
	 "log_tensor_stats(layer_name, tensor_name, tensor, iteration=None, skip_reduction=False, "
	 "reduction_group=None, stream=None)"},
	{"_init", mod_init, METH_VARARGS, NULL},
	{"_destroy", mod_destroy, METH_NOARGS, NULL},
	{"_initialized", mod_initialized, METH_NOARGS, NULL},
	{"_generation", mod_generation, METH_NOARGS, NULL},
	{"_reduction_group_set", mod_reduction_group_set, METH_O, NULL},
	{"_log_scalar", mod_log_scalar, METH_VARARGS, NULL},
	{"_plan_state", mod_plan_state, METH_NOARGS, NULL},
	{"step", mod_step, METH_NOARGS, "step(): ends the iteration (statistics are logged)"},
	{"iteration", mod_iteration, METH_NOARGS, "iteration() -> int: the current iteration"},
	{"initialize_training_step", mod_set_iteration, METH_O,
	 "initialize_training_step(n): jumps to iteration n (e.g. resuming from a checkpoint)"},
	{"set_mode", mod_set_mode, METH_O, "set_mode('train' | 'eval')"},
	{"get_mode", mod_get_mode, METH_NOARGS, "get_mode() -> 'train' | 'eval'"},
	{"_log", mod_log, METH_VARARGS, NULL},
	{"_tensor_id", mod_tensor_id, METH_O, NULL},
	{"_modules", mod_modules, METH_O, NULL},
	{"_layer_attach", mod_layer_attach, METH_VARARGS, NULL},
	{"_noop", (PyCFunction)(void (*)(void))mod_noop, METH_FASTCALL, NULL},
	{"_bench_c_stats", mod_bench_c_stats, METH_VARARGS, NULL},
	{NULL},
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT,
	.m_name = "dlinspect._dlinspect",
	.m_doc = "The C core of the dlinspect package (docs/python.md).",
	.m_size = -1,
	.m_methods = module_methods,
};

static PyObject *intern(const char *s)
{
	return PyUnicode_InternFromString(s);
}

PyMODINIT_FUNC PyInit__dlinspect(void);
PyMODINIT_FUNC PyInit__dlinspect(void)
{
	if (PyType_Ready(&LayerType) < 0)
		return NULL;
	PyObject *m = PyModule_Create(&module_def);
	if (!m)
		return NULL;
	for (int g = 0; g < DLI_GEMM_COUNT; g++)
		if (!(g_gemm_str[g] = intern(gemm_names[g])))
			goto fail;
	for (int t = 0; t < DLI_TENSOR_STANDARD_COUNT; t++)
		if (!(g_tensor_str[t] = intern(std_tensor_names[t])))
			goto fail;
	if (!(g_str_dlpack = intern("__dlpack__")) ||
	    !(g_str_dlpack_device = intern("__dlpack_device__")) ||
	    !(g_str_array_interface = intern("__array_interface__")) ||
	    !(g_str_dtype = intern("dtype")) || !(g_str_name = intern("name")) ||
	    !(g_kw_stream_version = Py_BuildValue("(ss)", "stream", "max_version")) ||
	    !(g_kw_stream = Py_BuildValue("(s)", "stream")) ||
	    !(g_max_version = Py_BuildValue("(ii)", 1, 1)) || !(g_layers = PyDict_New()) ||
	    !(g_tensor_ids = PyDict_New()))
		goto fail;
	g_error = PyErr_NewExceptionWithDoc("dlinspect.Error",
					    "A dlinspect call failed; .message says why, .code is "
					    "the core's negative errno.",
					    PyExc_RuntimeError, NULL);
	if (!g_error)
		goto fail;
	g_config_error = PyErr_NewExceptionWithDoc(
		"dlinspect.ConfigError",
		"A config was refused; .file, .line, .column and .message say where and why "
		"(str(e) is 'file:line:column: message').",
		g_error, NULL);
	if (!g_config_error)
		goto fail;
	g_stop_requested = PyErr_NewExceptionWithDoc(
		"dlinspect.StopRequested",
		"step() after a feature asked the training to stop (DetectNonFinite's on_detect: stop "
		"or abort_after_batch_num); .message names the reason. The step was taken: a loop "
		"that catches it may go on, and every later step() raises it again.",
		g_error, NULL);
	if (!g_stop_requested)
		goto fail;
	Py_INCREF(g_error);
	Py_INCREF(g_config_error);
	Py_INCREF(g_stop_requested);
	Py_INCREF(&LayerType);
	if (PyModule_AddObject(m, "Error", g_error) || PyModule_AddObject(m, "ConfigError", g_config_error) ||
	    PyModule_AddObject(m, "StopRequested", g_stop_requested) ||
	    PyModule_AddObject(m, "Layer", (PyObject *)&LayerType) ||
	    PyModule_AddObject(m, "NEVER", PyLong_FromLongLong(DLI_NEVER)) ||
	    PyModule_AddFunctions(m, dli_py_comm_methods) ||
	    PyModule_AddFunctions(m, dli_py_logger_methods))
		goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
