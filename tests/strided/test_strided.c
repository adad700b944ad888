/* Strided views (dli_inspect_tensor_strided, the strides of log_tensor_stats): a view of a fused
 * tensor gives the statistics of its contiguous copy, bit for bit (the pass over runs reads the
 * same blocks in the same order as the pass over a copy), on every SIMD path and thread count;
 * features that are not view-capable get a contiguous copy with the view's values, made once per
 * call; bad strides are refused with the layer, the tensor and the dimension named.
 * With --export DIR it writes a fused tensor and the statistics and dump of its Q view into DIR
 * for the numpy reference (numpy_ref.py, run by numpy-ref.sh). */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dli-test.h"
#include "kernels-private.h"
#include "stats-private.h"
#include "strided-private.h"

/* ---- Data ---- */

static uint32_t rng = 12345;
static uint32_t next_u32(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 17;
	rng ^= rng << 5;
	return rng;
}

/* n elements of dt: magnitudes over many binades, zeros, subnormals, and with `specials` a NaN
 * or an infinity now and then (the kernels' odd-block paths). */
static void *make_data(enum dli_dtype dt, int64_t n, bool specials)
{
	size_t es = dli_dtype_size(dt);
	unsigned char *p = malloc((size_t)n * es);
	for (int64_t i = 0; p && i < n; i++) {
		uint32_t u = next_u32();
		float f = ldexpf((float)(int32_t)u / 2147483648.0f, (int)(next_u32() % 24) - 12);
		if (u % 53 == 0)
			f = 0;
		if (u % 211 == 0)
			f = 1e-40f; /* subnormal in f32 */
		if (specials && i % 997 == 13)
			f = (i / 997) % 2 ? NAN : -INFINITY;
		uint32_t b;
		memcpy(&b, &f, 4);
		switch (dt) {
		case DLI_DTYPE_F32: memcpy(p + 4 * i, &f, 4); break;
		case DLI_DTYPE_BF16: {
			uint16_t h = (uint16_t)(b >> 16);
			memcpy(p + 2 * i, &h, 2);
			break;
		}
		case DLI_DTYPE_F16: {
			/* Any finite half (exponent 0..30), or inf/NaN for the specials. */
			uint16_t h = (uint16_t)((u & 0x83ffu) | ((u >> 16) % 31) << 10);
			if (specials && i % 997 == 13)
				h = (i / 997) % 2 ? 0x7e00 : 0xfc00;
			memcpy(p + 2 * i, &h, 2);
			break;
		}
		default: { /* e4m3: every code but NaN, unless specials */
			unsigned char c = (unsigned char)u;
			if ((c & 0x7f) == 0x7f && !(specials && i % 997 == 13))
				c &= 0xfe;
			p[i] = c;
			break;
		}
		}
	}
	return p;
}

/* The view's elements in row-major order, one index at a time: the reference copy, independent of
 * the runs the core makes. */
static void *naive_gather(const void *data, enum dli_dtype dt, int ndim, const int64_t *shape,
			  const int64_t *strides)
{
	size_t es = dli_dtype_size(dt);
	int64_t n = 1, idx[DLI_TENSOR_MAX_DIMS] = {0};
	for (int d = 0; d < ndim; d++)
		n *= shape[d];
	unsigned char *out = malloc(n ? (size_t)n * es : 1);
	for (int64_t k = 0; out && k < n; k++) {
		int64_t off = 0;
		for (int d = 0; d < ndim; d++)
			off += idx[d] * strides[d];
		memcpy(out + (size_t)k * es, (const unsigned char *)data + off * (int64_t)es, es);
		for (int d = ndim - 1; d >= 0; d--) {
			if (++idx[d] < shape[d])
				break;
			idx[d] = 0;
		}
	}
	return out;
}

/* ---- The pass over runs against the pass over a copy ---- */

static const size_t record_terms = offsetof(struct dli_stats_record, fp8_count);

static void check_view(const char *what, const void *data, enum dli_dtype dt, int ndim,
		       const int64_t *shape, const int64_t *strides, bool direct)
{
	struct dli_tensor t = dli_tensor_make((void *)data, dt, ndim, shape);
	struct dli_view v;
	char why[256] = "";
	int r = dli_view_init(&v, &t, strides, why, sizeof why);
	int64_t n = dli_tensor_numel(&t);
	size_t es = dli_dtype_size(dt);
	if (r != DLI_VIEW_STRIDED || v.direct != direct)
		fprintf(stderr, "%s: init %d (%s), direct %d\n", what, r, why, v.direct);
	CHECK_INT(r, DLI_VIEW_STRIDED);
	CHECK_INT(v.direct, direct);
	CHECK_INT(v.t.contiguous, 0);
	void *ref = naive_gather(data, dt, ndim, shape, strides);
	unsigned long long gathers = dli_view_gathers;
	const struct dli_tensor *c = dli_view_contiguous(&v);
	CHECK(c && c->contiguous && c->ndim == ndim);
	CHECK(c && memcmp(c->data, ref, (size_t)n * es) == 0);
	CHECK(dli_view_contiguous(&v) == c); /* one copy per view */
	CHECK_INT(dli_view_gathers - gathers, 1);

	enum dli_simd paths[] = {DLI_SIMD_SCALAR, DLI_SIMD_AVX2, DLI_SIMD_AVX512};
	for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
		if (paths[p] > dli_simd_detect())
			continue;
		for (int threads = 1; threads <= 2; threads++) {
			struct dli_cpu_options o = {paths[p], threads};
			struct dli_stats_record a, b;
			CHECK_INT(dli_cpu_stats(ref, dt, n, &o, &a), 0);
			if (v.runs.inner == (int64_t)es) {
				CHECK_INT(dli_cpu_stats_runs(&v.runs, &o, &b), 0);
				bool same = memcmp(&a, &b, record_terms) == 0;
				if (!same)
					fprintf(stderr, "%s: %s, %d threads: runs give mean %.17g m2 %.17g "
						"min %g, the copy %.17g %.17g %g\n", what,
						dli_simd_name(paths[p]), threads, b.mean, b.m2, b.min,
						a.mean, a.m2, a.min);
				CHECK(same);
			} else {
				CHECK_INT(dli_cpu_stats_runs(&v.runs, &o, &b), -EINVAL);
			}
		}
	}
	/* What the core's host calls use (the default options). */
	struct dli_stats_record a, b;
	CHECK_INT(dli_cpu_stats(ref, dt, n, NULL, &a), 0);
	gathers = dli_view_gathers;
	CHECK_INT(dli_view_stats(&v, &b), 0);
	CHECK(memcmp(&a, &b, record_terms) == 0);
	CHECK_INT(dli_view_gathers - gathers, 0); /* the copy made above is reused */
	dli_view_finish(&v);
	free(ref);
}

static void kernel_views(void)
{
	const enum dli_dtype dts[] = {DLI_DTYPE_F32, DLI_DTYPE_BF16, DLI_DTYPE_F16, DLI_DTYPE_F8E4M3};
	for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
		enum dli_dtype dt = dts[k];
		int64_t es = (int64_t)dli_dtype_size(dt);
		for (int specials = 0; specials < 2; specials++) {
			/* Q, K and V of a fused [T, 3h] output: h = 1000 (blocks span rows) and 2048
			 * (whole blocks in a row). */
			const int64_t hs[] = {1000, 2048};
			for (size_t j = 0; j < 2; j++) {
				int64_t T = 37, h = hs[j], sh[2] = {T, h}, st[2] = {3 * h, 1};
				unsigned char *fused = make_data(dt, T * 3 * h, specials);
				for (int part = 0; part < 3; part++)
					check_view("qkv column block", fused + part * h * es, dt, 2, sh,
						   st, true);
				/* Every second row of the fused output. */
				int64_t sh2[2] = {T / 2, 3 * h}, st2[2] = {6 * h, 1};
				check_view("every 2nd row", fused, dt, 2, sh2, st2, true);
				/* Rows in reverse (a negative outer stride). */
				int64_t st3[2] = {-3 * h, 1};
				check_view("reversed rows of Q", fused + (T - 1) * 3 * h * es, dt, 2, sh,
					   st3, true);
				/* The transpose of Q: inner stride 3h, gathered. */
				int64_t sh4[2] = {h, T}, st4[2] = {1, 3 * h};
				check_view("transposed Q", fused, dt, 2, sh4, st4, false);
				free(fused);
			}
			/* 3-D: [B, S, 3h] -> K as [B, S, h]: B and S collapse into one dim of runs.
			 * 4-D: heads, [B, S, H, D] of the V third, H and D collapse into a run. */
			int64_t B = 3, S = 5, h = 96 * 4, H = 4, D = 96;
			unsigned char *fused = make_data(dt, B * S * 3 * h, specials);
			int64_t sh3[3] = {B, S, h}, st3[3] = {S * 3 * h, 3 * h, 1};
			check_view("3-D K", fused + h * es, dt, 3, sh3, st3, h * es >= 256);
			int64_t sh4[4] = {B, S, H, D}, st4[4] = {S * 3 * h, 3 * h, D, 1};
			check_view("4-D V heads", fused + 2 * h * es, dt, 4, sh4, st4, h * es >= 256);
			/* Short runs ([T, 4] of a [T, 64] tensor): gathered. Size-1 dims anywhere. */
			int64_t sh5[4] = {1, 200, 1, 4}, st5[4] = {0, 64, 999, 1};
			check_view("short runs", fused, dt, 4, sh5, st5, false);
			free(fused);
		}
	}
	/* Strides near the limit are checked without overflowing (UBSan watches): accepted while
	 * the farthest byte fits in 63 bits, however the dims would merge (the view is not read). */
	{
		static unsigned char b[4];
		int64_t sh[2] = {2, 2}, st[2] = {1, (int64_t)1 << 62}, st_bad[2] = {1, INT64_MIN};
		struct dli_tensor t = dli_tensor_make(b, DLI_DTYPE_F8E4M3, 2, sh);
		struct dli_view v;
		char why[256] = "";
		CHECK_INT(dli_view_init(&v, &t, st, why, sizeof why), DLI_VIEW_STRIDED);
		CHECK_INT(v.direct, 0);
		dli_view_finish(&v);
		CHECK_INT(dli_view_init(&v, &t, st_bad, why, sizeof why), -EINVAL);
		CHECK_CONTAINS(why, "reaches beyond 2^63 bytes");
	}
	/* Large enough for the threaded pass (over 4 Mi elements): every second row of a bf16
	 * [2T, h] tensor, with NaN and infinities. */
	int64_t T = 1040, h = 4096, sh[2] = {T, h}, st[2] = {2 * h, 1};
	unsigned char *big = make_data(DLI_DTYPE_BF16, 2 * T * h, true);
	check_view("threaded rows", big, DLI_DTYPE_BF16, 2, sh, st, true);
	free(big);
	/* Whole bf16 blocks go in groups of 16 in the AVX2 pass, which a block holding NaN or an
	 * infinity ends early; in a view the pass then takes up the runs again where that block
	 * starts. A row of 4096 elements is a block: specials in view rows 0, 5, 15, 16, 33, 47. */
	{
		int64_t R = 64, sh6[2] = {R, h}, st6[2] = {2 * h, 1};
		unsigned char *d = make_data(DLI_DTYPE_BF16, 2 * R * h, false);
		const int64_t rows[] = {0, 5, 15, 16, 33, 47};
		const uint16_t bits[] = {0x7fc0, 0xff80, 0x7f80, 0xffc1, 0x7fc0, 0x7f80};
		for (size_t k = 0; k < 6; k++)
			memcpy(d + 2 * (2 * rows[k] * h + 100 * (int64_t)k), &bits[k], 2);
		check_view("sparse specials", d, DLI_DTYPE_BF16, 2, sh6, st6, true);
		free(d);
	}
	/* Chunks (2^18 elements) that start inside a run, runs shorter and longer than a block
	 * (blocks through scratch), two outer dims that do not merge: K of the first S of S + 1
	 * positions of a fused [B, S + 1, 3h] bf16 output. */
	const int64_t widths[] = {1000, 5120};
	for (size_t j = 0; j < 2; j++) {
		int64_t w = widths[j], B = 3, S = 300000 / (B * w) + 1;
		int64_t sh3[3] = {B, S, w}, st3[3] = {(S + 1) * 3 * w, 3 * w, 1};
		unsigned char *fused = make_data(DLI_DTYPE_BF16, B * (S + 1) * 3 * w, true);
		check_view("chunks inside runs", fused + 2 * w, DLI_DTYPE_BF16, 3, sh3, st3, true);
		free(fused);
	}
}

/* ---- Through the host calls ---- */

#define HEAD "s:\n  enabled: true\n  layers: {layer_name_regex_pattern: '.*'}\n"
#define TE "  transformer_engine:\n"
#define LTS "    LogTensorStats:\n      enabled: true\n      tensors: [activation]\n" \
	    "      stats: [min, max, mean, std, l1_norm, l2_norm, cur_amax, dynamic_range, " \
	    "nan_count, inf_count, zero%]\n"
#define FP8 "    LogFp8TensorStats:\n      enabled: true\n      tensors: [activation]\n" \
	    "      stats: [fp8_current_scaling_underflows%, fp8_current_scaling_overflows%, " \
	    "fp8_current_scaling_mse, fp8_current_scaling_cos_sim, mxfp8_underflows%, " \
	    "mxfp8_mse]\n"
#define DNF "  DetectNonFinite: {enabled: true, tensors: [activation], on_detect: continue}\n"
#define BASE "  LogTensorStats: {enabled: true, tensors: [attn_q], " \
	     "stats: [min, max, mean, std, l1_norm, l2_norm]}\n"
#define PROBE "  ViewProbe: {enabled: true, tensors: [activation, attn_q]}\n"

/* A file under the last context's log dir, whole, with the statistics log's timestamps cut. */
static char *slurp(const char *file, bool cut_time, size_t *size)
{
	FILE *f = open_log(file);
	size_t cap = 1 << 16, len = 0;
	char *s = malloc(cap), line[4096];
	if (!s)
		return NULL;
	s[0] = 0;
	if (!f) {
		*size = 0;
		return s;
	}
	if (cut_time) {
		while (fgets(line, sizeof line, f)) {
			const char *p = strstr(line, " - INFO - ");
			size_t k = strlen(p ? p : line);
			if (len + k + 1 > cap && !(s = realloc(s, cap = 2 * (len + k + 1))))
				break;
			memcpy(s + len, p ? p : line, k + 1);
			len += k;
		}
	} else {
		size_t k;
		while ((k = fread(line, 1, sizeof line, f)) > 0) {
			if (len + k + 1 > cap && !(s = realloc(s, cap = 2 * (len + k + 1))))
				break;
			memcpy(s + len, line, k);
			len += k;
		}
		if (s)
			s[len] = 0;
	}
	fclose(f);
	*size = len;
	return s;
}

struct run_out {
	char *stats, *probe;
	size_t probe_size;
	unsigned long long gathers, passes;
};

/* Two steps: the activation inspected and attn_q logged through log_tensor_stats, as the view
 * (strides) or as its contiguous copy (strides NULL). */
static void run(const char *yaml, const struct dli_tensor *view, const int64_t *strides,
		const struct dli_tensor *copy, struct run_out *out)
{
	memset(out, 0, sizeof *out);
	struct dli_context *ctx = open_yaml(yaml, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "enc.0.fc1");
	unsigned long long gathers = dli_view_gathers, passes = dli_stats_host_passes;
	for (int it = 0; it < 2; it++) {
		const struct dli_tensor *t = strides ? view : copy;
		CHECK_INT(dli_inspect_tensor_strided(l, DLI_TENSOR_ACTIVATION, t, strides, NULL, NULL),
			  0);
		struct dli_log_tensor_stats_args a = {.size = sizeof a, .tensor_name = "attn_q",
						      .tensor = t, .iteration = -1,
						      .strides = strides};
		CHECK_INT(dli_call(l, DLI_CALL_LOG_TENSOR_STATS, &a), 0);
		CHECK_INT(dli_step(ctx), 0);
	}
	out->gathers = dli_view_gathers - gathers;
	out->passes = dli_stats_host_passes - passes;
	dli_destroy(ctx);
	size_t n;
	out->stats = slurp(STATS_LOG, true, &n);
	out->probe = slurp("view_probe.bin", false, &out->probe_size);
}

static void run_free(struct run_out *o)
{
	free(o->stats);
	free(o->probe);
}

static void host_calls(enum dli_dtype dt)
{
	int64_t T = 64, h = 768, es = (int64_t)dli_dtype_size(dt);
	unsigned char *fused = make_data(dt, T * 3 * h, true);
	int64_t shape[2] = {T, h}, strides[2];
	/* The K third: data at the fused tensor's column h, strides {3h, 1}. */
	struct dli_tensor view = dli_tensor_column_block(fused, dt, T, 3 * h, h, h, strides);
	CHECK(view.data == fused + h * es && view.ndim == 2 && view.shape[0] == T &&
	      view.shape[1] == h && strides[0] == 3 * h && strides[1] == 1);
	view.contiguous = false; /* what a host building it by hand may leave: ignored */
	void *k = naive_gather(fused + h * es, dt, 2, shape, strides);
	struct dli_tensor copy = dli_tensor_make(k, dt, 2, shape);
	struct run_out a, b;

	/* The statistics features: the same lines, bit for bit; one pass per call shared by
	 * LogTensorStats and DetectNonFinite, one for the base LogTensorStats' call, nothing
	 * copied. */
	run(HEAD TE LTS DNF BASE, &view, strides, &copy, &a);
	run(HEAD TE LTS DNF BASE, &view, NULL, &copy, &b);
	CHECK(a.stats && a.stats[0]);
	CHECK(count_lines(STATS_LOG, "enc.0.fc1_activation_std") == 2);
	CHECK(count_lines(STATS_LOG, "enc.0.fc1_attn_q_l2_norm") == 2);
	CHECK_STR(a.stats, b.stats);
	CHECK_INT(a.gathers, 0);
	CHECK_INT(a.passes, 4);
	run_free(&a);
	run_free(&b);

	/* With the FP8 what-ifs and a feature that reads data: one copy per call (inspect and
	 * log_tensor_stats each), shared by the what-if passes and the probe; the probe sees a
	 * contiguous tensor holding the view's values, as it does given the copy. */
	run(HEAD TE LTS FP8 DNF BASE PROBE, &view, strides, &copy, &a);
	run(HEAD TE LTS FP8 DNF BASE PROBE, &view, NULL, &copy, &b);
	CHECK_STR(a.stats, b.stats);
	CHECK(count_lines(STATS_LOG, "enc.0.fc1_activation_mxfp8_mse") == 2);
	CHECK_INT(a.gathers, 4);
	size_t rec = 4 + 4 + 2 * 8 + 8 + (size_t)(T * h * es);
	CHECK_INT(a.probe_size, 4 * rec);
	CHECK_INT(a.probe_size, b.probe_size);
	CHECK(a.probe && b.probe && memcmp(a.probe, b.probe, a.probe_size) == 0);
	int32_t contiguous = 0;
	if (a.probe && a.probe_size >= rec) {
		memcpy(&contiguous, a.probe, 4);
		CHECK(memcmp(a.probe + rec - (size_t)(T * h * es), k, (size_t)(T * h * es)) == 0);
	}
	CHECK_INT(contiguous, 1);
	run_free(&a);
	run_free(&b);

	/* Strides of the dense layout are a plain call; so is a view of nothing. */
	int64_t dense[2] = {h, 1};
	run(HEAD TE LTS PROBE, &copy, dense, &copy, &a);
	run(HEAD TE LTS PROBE, &copy, NULL, &copy, &b);
	CHECK_STR(a.stats, b.stats);
	CHECK_INT(a.gathers, 0);
	CHECK(a.probe && b.probe && a.probe_size == b.probe_size &&
	      memcmp(a.probe, b.probe, a.probe_size) == 0);
	run_free(&a);
	run_free(&b);
	int64_t empty_shape[2] = {0, h};
	struct dli_tensor empty = dli_tensor_make(NULL, dt, 2, empty_shape);
	run(HEAD TE LTS DNF PROBE, &empty, strides, &empty, &a);
	CHECK_INT(count_lines(STATS_LOG, "enc.0.fc1_activation"), 0);
	CHECK_INT(a.gathers, 0);
	CHECK_INT(a.probe_size, 4 * (4 + 4 + 2 * 8 + 8)); /* seen, with no bytes */
	run_free(&a);
	free(k);
	free(fused);
}

/* ---- Refusals ---- */

static void refusals(void)
{
	static float x[64 * 24];
	struct dli_context *ctx = open_yaml(HEAD TE LTS BASE, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "enc.0.fc1");
	int64_t shape[2] = {8, 8}, st0[2] = {24, 0}, huge[2] = {INT64_MAX / 2, 1};
	struct dli_tensor t = dli_tensor_make(x, DLI_DTYPE_F32, 2, shape);
	CHECK(stderr_capture_begin("stderr.txt"));
	CHECK_INT(dli_inspect_tensor_strided(l, DLI_TENSOR_ACTIVATION, &t, st0, NULL, NULL), -EINVAL);
	const char *e = dli_last_error(ctx);
	CHECK_CONTAINS(e, "dli_inspect_tensor_strided refused a view on layer 'enc.0.fc1', tensor "
			  "'activation', iteration 0: dim 1 has 8 elements and stride 0");
	CHECK_INT(dli_inspect_tensor_strided(l, DLI_TENSOR_ACTIVATION, &t, huge, NULL, NULL), -EINVAL);
	CHECK_CONTAINS(dli_last_error(ctx), "stride 4611686018427387903 of dim 0 (8 elements) reaches "
					    "beyond 2^63 bytes");
	struct dli_tensor cuda = t;
	cuda.device.type = DLI_DEVICE_CUDA;
	int64_t st[2] = {24, 1};
	CHECK_INT(dli_inspect_tensor_strided(l, DLI_TENSOR_ACTIVATION, &cuda, st, NULL, NULL), -EINVAL);
	CHECK_CONTAINS(dli_last_error(ctx), "strides of a CUDA tensor are not supported");
	struct dli_tensor nodata = t;
	nodata.data = NULL;
	CHECK_INT(dli_inspect_tensor_strided(l, DLI_TENSOR_ACTIVATION, &nodata, st, NULL, NULL),
		  -EINVAL);
	CHECK_CONTAINS(dli_last_error(ctx), "a non-empty view has no data");
	struct dli_log_tensor_stats_args a = {.size = sizeof a, .tensor_name = "attn_q", .tensor = &t,
					      .iteration = -1, .strides = st0};
	CHECK_INT(dli_call(l, DLI_CALL_LOG_TENSOR_STATS, &a), -EINVAL);
	CHECK_CONTAINS(dli_last_error(ctx), "dli_call(log_tensor_stats) refused a view on layer "
					    "'enc.0.fc1', tensor 'attn_q'");
	/* A layer nothing inspects never looks at the strides. */
	CHECK_INT(dli_inspect_tensor_strided(l, DLI_TENSOR_WEIGHT, &t, st0, NULL, NULL), 0);
	stderr_capture_end();
	/* The first refusal on the terminal, every one in the message log. */
	CHECK_INT(count_lines("stderr.txt", "refused a view"), 1);
	dli_destroy(ctx);
	CHECK_INT(count_lines(MESSAGE_LOG, "refused a view"), 5);
	/* A 1.2 host's args (no strides member) still feed the base LogTensorStats. */
	ctx = open_yaml(HEAD BASE, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	l = layer(ctx, "enc.0.fc1");
	t = dli_tensor_make(x, DLI_DTYPE_F32, 2, shape);
	struct dli_log_tensor_stats_args old = {.size = offsetof(struct dli_log_tensor_stats_args,
								 strides),
						.tensor_name = "attn_q", .tensor = &t, .iteration = -1,
						.strides = st0 /* beyond size: never read */};
	CHECK_INT(dli_call(l, DLI_CALL_LOG_TENSOR_STATS, &old), 0);
	dli_destroy(ctx);
	CHECK_INT(count_lines(STATS_LOG, "enc.0.fc1_attn_q_min"), 1);
}

/* ---- For the numpy reference ---- */

/* NULL strides read the tensor as dense whatever its contiguous flag says (the header's promise);
 * an empty tensor is valid whatever its other dimensions; a shape whose element count overflows
 * says so. */
static void null_strides_and_empty(void)
{
	static float x[64];
	struct dli_context *ctx = open_yaml(HEAD TE LTS BASE, NULL);
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, "enc.0.fc1");
	int64_t shape[2] = {8, 8};
	struct dli_tensor t = dli_tensor_make(x, DLI_DTYPE_F32, 2, shape);
	t.contiguous = false;
	CHECK_INT(dli_inspect_tensor_strided(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL, NULL), 0);
	int64_t big[3] = {INT64_C(1) << 32, INT64_C(1) << 32, 0}, st[3] = {1, 1, 1};
	struct dli_tensor e = dli_tensor_make(NULL, DLI_DTYPE_F32, 3, big);
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &e, NULL, NULL), 0);
	CHECK_INT(dli_inspect_tensor_strided(l, DLI_TENSOR_ACTIVATION, &e, st, NULL, NULL), 0);
	struct dli_tensor o = dli_tensor_make(x, DLI_DTYPE_F32, 2, big);
	CHECK(stderr_capture_begin("stderr-overflow.txt"));
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &o, NULL, NULL), -EINVAL);
	CHECK_CONTAINS(dli_last_error(ctx), "element count overflows 64 bits (at dim 1, "
					    "4294967296)");
	CHECK_INT(dli_inspect_tensor_strided(l, DLI_TENSOR_ACTIVATION, &o, st, NULL, NULL), -EINVAL);
	CHECK_CONTAINS(dli_last_error(ctx), "size in bytes overflows 64 bits (at dim 1, "
					    "4294967296)");
	/* No tensor at all: the feature's refusal says so. */
	CHECK_INT(dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, NULL, NULL, NULL), -EINVAL);
	CHECK_CONTAINS(dli_last_error(ctx), "Invalid argument (-22): the tensor (hp) is NULL");
	stderr_capture_end();
	dli_destroy(ctx);
}

static int export_npy(const char *path, const float *x, int64_t rows, int64_t cols)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	char hdr[128];
	int n = snprintf(hdr, sizeof hdr, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld, %lld), }",
			 (long long)rows, (long long)cols);
	int pad = 64 - (10 + n + 1) % 64;
	fwrite("\x93NUMPY\x01\x00", 1, 8, f);
	uint16_t len = (uint16_t)(n + pad + 1);
	fwrite(&len, 2, 1, f);
	fwrite(hdr, 1, (size_t)n, f);
	for (int i = 0; i < pad; i++)
		fputc(' ', f);
	fputc('\n', f);
	fwrite(x, sizeof *x, (size_t)(rows * cols), f);
	return fclose(f);
}

static int export_case(const char *dir)
{
	int64_t T = 96, h = 1000;
	float *fused = make_data(DLI_DTYPE_F32, T * 3 * h, false);
	char path[4096];
	snprintf(path, sizeof path, "%s/fused.npy", dir);
	if (!fused || export_npy(path, fused, T, 3 * h)) {
		free(fused);
		return 1;
	}
	struct dli_options o;
	dli_options_init(&o);
	o.config_yaml = HEAD TE LTS "    DumpTensors:\n      enabled: true\n      format: safetensors\n"
			"      tensors: [activation]\n      high_precision_tensor: true\n";
	o.log_dir = dir;
	struct dli_context *ctx = NULL;
	struct dli_error err;
	if (dli_init(&o, &ctx, &err)) {
		fprintf(stderr, "dli_init: %s\n", err.message);
		free(fused);
		return 1;
	}
	struct dli_layer *l = layer(ctx, "enc.0.fc1");
	int64_t shape[2] = {T, h}, strides[2] = {3 * h, 1};
	struct dli_tensor q = dli_tensor_make(fused, DLI_DTYPE_F32, 2, shape);
	int r = dli_inspect_tensor_strided(l, DLI_TENSOR_ACTIVATION, &q, strides, NULL, NULL);
	r = r ? r : dli_step(ctx);
	dli_destroy(ctx);
	free(fused);
	return r != 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--export"))
		return export_case(argv[2]);
	kernel_views();
	host_calls(DLI_DTYPE_F32);
	host_calls(DLI_DTYPE_BF16);
	host_calls(DLI_DTYPE_F16);
	refusals();
	null_strides_and_empty();
	remove_log_dir();
	return check_exit();
}
