/* ClampOutliers, an example feature to copy: it hands a GEMM a copy of a tensor whose elements are
 * clamped to [-max_abs, max_abs]. At each step's end it logs how many elements it clamped, as
 * `{layer}_{tensor}_clamped`. Built out of tree against an installed dlinspect (docs/plugins.md). */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* The only header a plugin needs. It declares the module ABI and the host table. The plugin links
 * nothing from dlinspect: every service it uses (logging, emitting scalars, names) comes from the
 * `struct dli_host` that create() receives. */
#include <dlinspect/plugin.h>

/* One instance per feature block in the config (or per gemms_struct/tensors_struct entry). */
struct clamp {
	const struct dli_host *host;
	float max_abs;
};

/* Per (instance, layer) state: clamped elements and modify calls since the last step_end, by
 * tensor id. Atomic, because a host may call modify_tensor from several threads. */
#define CLAMP_TENSORS 64 /* the width of the core's tensor masks */
struct clamp_layer {
	atomic_llong clamped[CLAMP_TENSORS];
	atomic_llong calls[CLAMP_TENSORS];
};

/* The feature's own config keys. The core parses and type-checks them (did-you-mean included) and
 * passes the values to create() in this order. `dlinspect plugins --explain` prints the docs. */
enum { P_MAX_ABS, P_COUNT };
static const struct dli_param_desc clamp_params[P_COUNT] = {
	[P_MAX_ABS] = {.key = "max_abs", .type = DLI_PARAM_FLOAT, .required = true,
		       .doc = "elements with |x| > max_abs become +-max_abs (NaN is left as is)"},
};

static int clamp_create(const struct dli_feature_create_args *args, void **instance,
			struct dli_error *err)
{
	double max_abs = args->params[P_MAX_ABS].u.f;

	/* The core checks types. Checking the range is the plugin's job. The core puts the block's
	 * file:line:column and the feature's name in front of this message. */
	if (!(max_abs > 0) || !isfinite(max_abs)) {
		snprintf(err->message, sizeof err->message,
			 "max_abs must be a finite number > 0, got %g", max_abs);
		return -EINVAL;
	}
	struct clamp *self = calloc(1, sizeof(*self));
	if (!self)
		return -ENOMEM;
	/* `args` lives only during create: keep copies, not pointers into it. `host` is the
	 * exception, since it lives as long as the context. */
	self->host = args->host;
	self->max_abs = (float)max_abs;
	*instance = self;
	return 0;
}

static void clamp_destroy(void *instance)
{
	free(instance);
}

static int clamp_layer_attach(void *instance, const char *layer_name, void **layer_state)
{
	*layer_state = calloc(1, sizeof(struct clamp_layer));
	return *layer_state ? 0 : -ENOMEM;
}

static void clamp_layer_detach(void *instance, void *layer_state)
{
	free(layer_state);
}

/* The core asks this only for the gemms and tensors the config selected. The answer never
 * changes, so `next` is DLI_NEVER and the host can cache it for the rest of the run. */
static bool clamp_modify_tensor_enabled(const struct dli_feature_call *c, enum dli_gemm gemm,
					int tensor, int64_t iteration, int64_t *next)
{
	*next = DLI_NEVER;
	return true;
}

/* out = clamp(in). The host allocates `out`. This example reads f32 host memory only: it refuses
 * other dtypes and devices instead of misreading them. */
static int clamp_modify_tensor(const struct dli_feature_call *c, enum dli_gemm gemm, int tensor,
			       const struct dli_tensor *in, const struct dli_quantizer *quantizer,
			       struct dli_tensor *out)
{
	const struct clamp *self = c->instance;
	struct clamp_layer *state = c->layer_state;
	int64_t n = dli_tensor_numel(in);

	if (in->dtype != DLI_DTYPE_F32 || out->dtype != DLI_DTYPE_F32 ||
	    in->device.type != DLI_DEVICE_CPU || out->device.type != DLI_DEVICE_CPU)
		return -ENOTSUP;
	if (!in->contiguous || !out->contiguous || dli_tensor_numel(out) != n ||
	    tensor < 0 || tensor >= CLAMP_TENSORS)
		return -EINVAL;

	const float *x = in->data;
	float *y = out->data;
	const float m = self->max_abs;
	long long clamped = 0;
	for (int64_t i = 0; i < n; i++) {
		/* A NaN fails both tests and is copied unchanged: clamping would hide it. */
		float v = x[i];
		if (v > m || v < -m) {
			v = v > 0 ? m : -m;
			clamped++;
		}
		y[i] = v;
	}
	atomic_fetch_add(&state->clamped[tensor], clamped);
	atomic_fetch_add(&state->calls[tensor], 1);
	return 0;
}

/* Runs at dli_step for every layer this instance is attached to. `iteration` is the step that just
 * ended. A tensor the host never passed in this step logs nothing (which differs from 0 clamped). */
static void clamp_step_end(const struct dli_feature_call *c, int64_t iteration)
{
	const struct clamp *self = c->instance;
	struct clamp_layer *state = c->layer_state;

	for (int t = 0; t < CLAMP_TENSORS; t++) {
		if (atomic_exchange(&state->calls[t], 0) == 0)
			continue;
		long long clamped = atomic_exchange(&state->clamped[t], 0);
		const char *tensor = self->host->tensor_name(c->ctx, t);
		char name[512];
		snprintf(name, sizeof name, "%s_%s_clamped", c->layer_name, tensor ? tensor : "?");
		/* Reaches every configured logger: file, jsonl, tensorboard, ... */
		self->host->emit_scalar(c->ctx, name, iteration, (double)clamped);
	}
}

/* Every table starts with its size: the core reads only the members this build knows about. */
static const struct dli_feature_ops clamp_ops = {
	.size = sizeof(struct dli_feature_ops),
	.create = clamp_create,
	.destroy = clamp_destroy,
	.layer_attach = clamp_layer_attach,
	.layer_detach = clamp_layer_detach,
	.modify_tensor_enabled = clamp_modify_tensor_enabled,
	.modify_tensor = clamp_modify_tensor,
	.step_end = clamp_step_end,
};

static const struct dli_feature_desc clamp_feature = {
	.size = sizeof(struct dli_feature_desc),
	.name = "ClampOutliers", /* the key used in configs */
	.doc = "Hands the selected GEMMs a copy of the tensor clamped to +-max_abs; logs "
	       "{layer}_{tensor}_clamped.",
	/* GENERIC: allowed directly in a section as well as under `my_plugins:`. GEMMS, TENSORS: the
	 * core requires and parses `gemms` and `tensors`. MODIFIES: the core refuses a config where
	 * two modifying features claim the same (layer, gemm, tensor). */
	.flags = DLI_FEATURE_GENERIC | DLI_FEATURE_GEMMS | DLI_FEATURE_TENSORS | DLI_FEATURE_MODIFIES,
	.params = clamp_params,
	.n_params = P_COUNT,
	.param_size = DLI_PARAM_SIZE,
	.ops = &clamp_ops,
};
static const struct dli_feature_desc *const clamp_features[] = {&clamp_feature};

/* How `extensions: [my_plugins]` finds this module without loading it. */
DLI_MODULE_NAMESPACE("my_plugins");

static const struct dli_module clamp_module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR, /* the headers this was built with: the core checks the major */
	.abi_minor = DLI_ABI_MINOR,
	.name = "clamp_outliers", /* must match the file name, clamp_outliers.so */
	.ns = "my_plugins",       /* `extensions: [my_plugins]` loads every module of this namespace */
	.doc = "Example plugin: clamps outliers before a GEMM and counts them.",
	.features = clamp_features,
	.n_features = 1,
};

/* The one exported symbol. Return static data, and call no host function here: tools such as
 * `dlinspect plugins` call the entry with a table that holds only the ABI numbers. */
DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	if (!host || host->abi_major != DLI_ABI_MAJOR)
		return NULL;
	return &clamp_module;
}
