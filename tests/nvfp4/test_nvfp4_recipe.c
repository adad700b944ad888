/* The NVFP4 recipe's options (docs/block-scaling.md, "NVFP4 recipe options"): stochastic
 * rounding rounds up with the probability its rule states (checked over many elements with
 * bounds that a correct implementation exceeds with probability below 1e-9) and its random
 * bits are uniform; dli_block_fake_quant reads a spec of 1.2's size as before and refuses what it
 * cannot do; FakeQuant's FP8BLOCKE4M3 / NVFP4 through the real core give, per GEMM, the copy and
 * the options the recipes define; its config errors. Bit-exactness against numpy / ml_dtypes is
 * interop-recipe.py's. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/dlinspect.h>
#include <dlinspect/stats.h>

#include "check.h"
#include "context-private.h"
#include "cpu/nvfp4-recipe-private.h"
#include "dli-test.h"
#include "kernels-private.h"

#define FC1 "model.layers.1.mlp.fc1"

/* z for a two-sided normal tail of 1e-10 per check (about 40 checks: below 1e-8 in all). */
#define Z_BOUND 6.5

static float random_value(uint64_t i)
{
	/* a deterministic spread over 2^-10 .. 2^10 with both signs */
	uint64_t h = dli_nvfp4_mix64(i * 7919 + 17);
	float m = 1.0f + (float)(h & 0xffff) / 65536.0f;
	return ldexpf(h & 0x10000 ? -m : m, (int)((h >> 20) % 21) - 10);
}

/* ---- stochastic rounding's statistics ---- */

static void test_sr_probability(void)
{
	/* Scaled values lo + f * gap in each region of the grid; with 8 random bits the rule rounds
	 * up with probability floor(256 f) / 256 (f a multiple of 2^-10: every sum exact). */
	static const float lo[] = { 0.0f, 0.5f, 1.5f, 2.0f, 3.0f, 4.0f };
	static const float gap[] = { 0.5f, 0.5f, 0.5f, 1.0f, 1.0f, 2.0f };
	static const int f1024[] = { 0, 1, 255, 256, 300, 512, 700, 1023 };
	const int64_t n = 1 << 18;
	int checks = 0;
	for (size_t g = 0; g < sizeof(lo) / sizeof(lo[0]); g++)
		for (size_t k = 0; k < sizeof(f1024) / sizeof(f1024[0]); k++) {
			double f = f1024[k] / 1024.0, p = floor(256 * f) / 256;
			float s = lo[g] + (float)f * gap[g];
			int sign = (k & 1) ? -1 : 1;
			uint64_t seed = 1000 * g + k;
			int64_t up = 0, other = 0;
			double sum = 0;
			for (int64_t i = 0; i < n; i++) {
				float v = dli_nvfp4_decode(dli_nvfp4_encode_sr(
				    sign * s, dli_nvfp4_rbits(seed, (uint64_t)i)));
				v *= sign;
				up += v == lo[g] + gap[g];
				other += v != lo[g] && v != lo[g] + gap[g];
				sum += v;
			}
			double mean = n * p, sd = sqrt(n * p * (1 - p));
			bool ok = fabs((double)up - mean) <= Z_BOUND * sd + 1e-9 && other == 0;
			if (!ok)
				fprintf(stderr,
					"s=%g: %lld of %lld rounded up, expected %g +- %g\n",
					(double)(sign * s), (long long)up, (long long)n, mean,
					Z_BOUND * sd);
			CHECK(ok);
			/* The mean lies within the rule's bias (below gap / 256) plus the same bound. */
			double bias = (sum / n) - s;
			CHECK(bias <= Z_BOUND * sd * gap[g] / n + 1e-12 &&
			      bias >= -gap[g] / 256.0 - Z_BOUND * sd * gap[g] / n - 1e-12);
			checks++;
		}
	printf("stochastic rounding: %d fractions x %lld elements within %.1f sd\n", checks,
	       (long long)n, Z_BOUND);
}

static void test_rbits_uniform(void)
{
	/* Pearson's chi-square of the 256 byte values over 2^20 indices, 255 degrees of freedom:
	 * above 415 with probability below 1e-9 (Wilson-Hilferty). Two seeds, and the low bits of
	 * the index must not show (every 256th index). */
	for (int seed = 0; seed < 3; seed++) {
		uint64_t count[256] = { 0 };
		const uint64_t n = 1 << 20;
		for (uint64_t i = 0; i < n; i++)
			count[dli_nvfp4_rbits((uint64_t)seed * 0x1234567ull,
					      seed == 2 ? i * 256 : i)]++;
		double chi = 0, e = n / 256.0;
		for (int b = 0; b < 256; b++)
			chi += (count[b] - e) * (count[b] - e) / e;
		if (!(chi < 415))
			fprintf(stderr, "random bits seed %d: chi-square %g\n", seed, chi);
		CHECK(chi < 415);
	}
	/* Different seeds give different streams. */
	int same = 0;
	for (uint64_t i = 0; i < 4096; i++)
		same += dli_nvfp4_rbits(1, i) == dli_nvfp4_rbits(2, i);
	CHECK(same < 64); /* expected 16 */
}

static void test_rht_signs(void)
{
	CHECK_INT((int)dli_nvfp4_rht_signs(0), 0xD7E8);
	CHECK((dli_nvfp4_rht_signs(5) & ~0xffffu) == 0);
	CHECK(dli_nvfp4_rht_signs(5) != dli_nvfp4_rht_signs(6));
}

/* ---- dli_block_fake_quant ---- */

/* The spec as a caller built against 1.2 sends it: the size ends at pow2_scales. */
static int fake(const float *x, int64_t rows, int64_t cols, struct dli_block_spec *spec, float *out)
{
	struct dli_tensor in = { .data = (void *)x,
				 .dtype = DLI_DTYPE_F32,
				 .ndim = 2,
				 .shape = { rows, cols },
				 .contiguous = true };
	struct dli_tensor o = in;
	o.data = out;
	return dli_block_fake_quant(&in, &o, spec);
}

static void test_block_fake_quant(void)
{
	enum { R = 48, C = 40 };
	static float x[R * C], a[R * C], b[R * C], ref[R * C];
	for (int i = 0; i < R * C; i++)
		x[i] = random_value((uint64_t)i);

	/* A 1.2 caller's spec (its size stops before the 1.3 members, whatever they hold) gets
	 * nearest-even, as the kernels' own fake-quantizer gives it. */
	struct dli_block_spec old = { .size = offsetof(struct dli_block_spec, stochastic_rounding),
				      .recipe = DLI_BLOCK_NVFP4,
				      .stochastic_rounding = 1,
				      .rht = 1 };
	CHECK_INT(fake(x, R, C, &old, a), 0);
	CHECK_INT(dli_cpu_nvfp4_fake_quantize(x, DLI_DTYPE_F32, R, C, 1, false, NULL, ref), 0);
	CHECK(memcmp(a, ref, sizeof a) == 0);
	old.size = offsetof(struct dli_block_spec, stochastic_rounding) - 1;
	CHECK_INT(fake(x, R, C, &old, a), -EINVAL);

	/* The same seed gives the same values, another seed others; both close to x. */
	struct dli_block_spec sr = {
		.size = sizeof sr, .recipe = DLI_BLOCK_NVFP4, .stochastic_rounding = 1, .seed = 42
	};
	CHECK_INT(fake(x, R, C, &sr, a), 0);
	CHECK_INT(fake(x, R, C, &sr, b), 0);
	CHECK(memcmp(a, b, sizeof a) == 0);
	sr.seed = 43;
	CHECK_INT(fake(x, R, C, &sr, b), 0);
	CHECK(memcmp(a, b, sizeof a) != 0);
	CHECK(memcmp(a, ref, sizeof a) != 0);
	/* Every stochastic value is one of x's two grid neighbours: the nearest-even value, or the
	 * one on the other side of x (up to the float rounding of the scaling). */
	int outside = 0;
	for (int i = 0; i < R * C; i++) {
		float lo = fminf(a[i], ref[i]), hi = fmaxf(a[i], ref[i]), tol = fabsf(x[i]) * 1e-6f;
		outside += a[i] != ref[i] && !(lo - tol <= x[i] && x[i] <= hi + tol);
	}
	CHECK_INT(outside, 0);

	/* The transform: refused with 16 x 16 tiles, with a length that is not a multiple of 16
	 * along the blocks; the values come back in x's basis, close to x. */
	struct dli_block_spec rht = { .size = sizeof rht, .recipe = DLI_BLOCK_NVFP4_2D, .rht = 1 };
	CHECK_INT(fake(x, R, C, &rht, a), -EINVAL);
	rht.recipe = DLI_BLOCK_NVFP4;
	CHECK_INT(fake(x, R, C, &rht, a), -EINVAL); /* 40 columns along the rows */
	rht.columnwise = 1;
	CHECK_INT(fake(x, R, C, &rht, a), 0); /* 48 rows down the columns */
	CHECK_INT(fake(x, 47, C, &rht, a), -EINVAL);
	double err = 0, x2 = 0;
	for (int i = 0; i < R * C; i++) {
		err += (double)(a[i] - x[i]) * (a[i] - x[i]);
		x2 += (double)x[i] * x[i];
	}
	/* E2M1 keeps ~1.5 bits: the relative error of a whole tensor stays well below 1/4. */
	CHECK(err < x2 / 16);
	struct dli_block_spec bad = { .size = sizeof bad, .recipe = DLI_BLOCK_NVFP4_2D + 1 };
	CHECK_INT(fake(x, R, C, &bad, a), -EINVAL);
}

/* The host table's stats_add_block: a module of 1.2's headers (its spec ends at pow2_scales)
 * still gets the NVFP4 compare; a 1.3 spec asking for the recipe options is refused (the
 * statistics do not do them). */
static void test_stats_add_block_sizes(void)
{
	struct dli_options o;
	struct dli_context *ctx = NULL;
	struct dli_error err = { 0 };
	static const char *const none[] = { "file" };
	char dir[] = "/tmp/dli-nvfp4r-XXXXXX";

	CHECK(mkdtemp(dir) != NULL);
	dli_options_init(&o);
	o.log_dir = dir;
	o.extensions = none;
	o.n_extensions = 1;
	CHECK_INT(dli_init(&o, &ctx, &err), 0);
	if (!ctx)
		return;
	const struct dli_host *host = &ctx->host;
	float x[64];
	for (int i = 0; i < 64; i++)
		x[i] = random_value((uint64_t)i + 1000);
	struct dli_tensor t = {
		.data = x, .dtype = DLI_DTYPE_F32, .ndim = 2, .shape = { 4, 16 }, .contiguous = true
	};
	struct dli_stats_acc *acc = host->stats_acc_create(ctx);
	struct dli_block_spec spec = { .size = offsetof(struct dli_block_spec, stochastic_rounding),
				       .recipe = DLI_BLOCK_NVFP4,
				       .stochastic_rounding = 1 };
	CHECK_INT(host->stats_add_block(acc, &t, &spec), 0);
	struct dli_stats_record rec, want;
	CHECK_INT(host->stats_acc_read(acc, &rec), 0);
	CHECK_INT(dli_cpu_nvfp4_compare(x, DLI_DTYPE_F32, 4, 16, 1, false, NULL, &want), 0);
	CHECK(rec.fp8_count == 64 && rec.err_sq == want.err_sq);
	spec.size = sizeof spec;
	CHECK_INT(host->stats_add_block(acc, &t, &spec), -EINVAL);
	spec.stochastic_rounding = 0;
	spec.rht = 1;
	CHECK_INT(host->stats_add_block(acc, &t, &spec), -EINVAL);
	spec.rht = 0;
	CHECK_INT(host->stats_add_block(acc, &t, &spec), 0);
	host->stats_acc_destroy(acc);
	dli_destroy(ctx);
	char cmd[64];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	CHECK_INT(system(cmd), 0);
}

/* ---- FakeQuant through the core ---- */

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

static void check_modified(struct dli_layer *l, enum dli_gemm g, int t, const float *x,
			   int64_t rows, int64_t cols, struct dli_block_spec *spec,
			   const char *what)
{
	static float got[64 * 48], want[64 * 48];
	struct dli_tensor in = { .data = (void *)x,
				 .dtype = DLI_DTYPE_F32,
				 .ndim = 2,
				 .shape = { rows, cols },
				 .contiguous = true };
	struct dli_tensor o = in;
	o.data = got;
	CHECK_INT(dli_modify_tensor(l, g, t, &in, NULL, &o), 0);
	CHECK_INT(fake(x, rows, cols, spec, want), 0);
	bool ok = memcmp(got, want, sizeof(float) * (size_t)(rows * cols)) == 0;
	if (!ok)
		fprintf(stderr, "FakeQuant %s: not the recipe's cast\n", what);
	CHECK(ok);
}

static const char fq_struct[] = "      gemms_struct:\n"
				"        - gemm: fprop\n"
				"          tensors: [activation, weight]\n"
				"        - gemm: dgrad\n"
				"          tensors: [gradient, weight]\n"
				"        - gemm: wgrad\n"
				"          tensors: [activation, gradient]\n";

static struct dli_context *open_fq(const char *format, const char *extra)
{
	char yaml[1024];
	snprintf(yaml, sizeof yaml,
		 "fq:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n"
		 "  transformer_engine:\n    FakeQuant:\n      enabled: True\n"
		 "      quant_format: %s\n%s%s",
		 format, extra, fq_struct);
	return open_yaml(yaml, NULL);
}

static void test_fake_quant_nvfp4(void)
{
	enum { R = 64, C = 48 };
	static float x[R * C];
	for (int i = 0; i < R * C; i++)
		x[i] = random_value((uint64_t)i + 99);
	struct dli_context *ctx = open_fq("NVFP4", "");
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	struct dli_layer *l = layer(ctx, FC1);
	int64_t next;
	CHECK(!dli_fp8_gemm_enabled(l, DLI_GEMM_WGRAD, &next));
	struct dli_block_spec s = { .size = sizeof s, .recipe = DLI_BLOCK_NVFP4 };
	/* fprop: the row-wise copies, the weight in 16 x 16 tiles, nearest-even. */
	check_modified(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, x, R, C, &s, "fprop activation");
	s.recipe = DLI_BLOCK_NVFP4_2D;
	check_modified(l, DLI_GEMM_FPROP, DLI_TENSOR_WEIGHT, x, R, C, &s, "fprop weight");
	s.columnwise = 1; /* the same tiles: the same values */
	check_modified(l, DLI_GEMM_DGRAD, DLI_TENSOR_WEIGHT, x, R, C, &s, "dgrad weight");
	/* The gradient rounds stochastically, with the seed the docs give for iteration 0. */
	uint64_t base = fnv1a(FC1);
	s = (struct dli_block_spec){ .size = sizeof s,
				     .recipe = DLI_BLOCK_NVFP4,
				     .stochastic_rounding = 1,
				     .seed = base ^ ((uint64_t)DLI_GEMM_DGRAD << 56) ^
					     ((uint64_t)DLI_TENSOR_GRADIENT << 48) };
	check_modified(l, DLI_GEMM_DGRAD, DLI_TENSOR_GRADIENT, x, R, C, &s, "dgrad gradient");
	/* wgrad: the column-wise copies through the transform; the gradient also stochastic. */
	s = (struct dli_block_spec){
		.size = sizeof s, .recipe = DLI_BLOCK_NVFP4, .columnwise = 1, .rht = 1
	};
	check_modified(l, DLI_GEMM_WGRAD, DLI_TENSOR_ACTIVATION, x, R, C, &s, "wgrad activation");
	s.stochastic_rounding = 1;
	s.seed = base ^ ((uint64_t)DLI_GEMM_WGRAD << 56) ^ ((uint64_t)DLI_TENSOR_GRADIENT << 48);
	check_modified(l, DLI_GEMM_WGRAD, DLI_TENSOR_GRADIENT, x, R, C, &s, "wgrad gradient");
	/* The next iteration draws other bits. */
	CHECK_INT(dli_step(ctx), 0);
	s.seed ^= 1 * 0x9E3779B97F4A7C15ull;
	check_modified(l, DLI_GEMM_WGRAD, DLI_TENSOR_GRADIENT, x, R, C, &s,
		       "wgrad gradient, step 1");
	dli_destroy(ctx);

	/* The options override the recipe's defaults. */
	ctx = open_fq("NVFP4", "      stochastic_rounding: False\n"
			       "      random_hadamard_transform: False\n"
			       "      block_scaling_dim: 1\n");
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	l = layer(ctx, FC1);
	s = (struct dli_block_spec){ .size = sizeof s, .recipe = DLI_BLOCK_NVFP4, .columnwise = 1 };
	check_modified(l, DLI_GEMM_WGRAD, DLI_TENSOR_GRADIENT, x, R, C, &s, "options off");
	check_modified(l, DLI_GEMM_DGRAD, DLI_TENSOR_WEIGHT, x, R, C, &s, "weight 1 x 16");
	/* A row count the transform cannot take is an error, not a silent plain cast. */
	dli_destroy(ctx);
	ctx = open_fq("NVFP4", "      rht_seed: 9\n");
	CHECK(ctx != NULL);
	if (!ctx)
		return;
	l = layer(ctx, FC1);
	s = (struct dli_block_spec){ .size = sizeof s,
				     .recipe = DLI_BLOCK_NVFP4,
				     .columnwise = 1,
				     .rht = 1,
				     .rht_seed = 9 };
	check_modified(l, DLI_GEMM_WGRAD, DLI_TENSOR_ACTIVATION, x, R, C, &s, "rht_seed 9");
	static float out[R * C];
	struct dli_tensor in = { .data = x,
				 .dtype = DLI_DTYPE_F32,
				 .ndim = 2,
				 .shape = { R - 1, C },
				 .contiguous = true };
	struct dli_tensor o = in;
	o.data = out;
	CHECK_INT(dli_modify_tensor(l, DLI_GEMM_WGRAD, DLI_TENSOR_ACTIVATION, &in, NULL, &o),
		  -EINVAL);
	dli_destroy(ctx);
}

static void test_fake_quant_fp8_block(void)
{
	enum { R = 64, C = 48 };
	static float x[R * C];
	for (int i = 0; i < R * C; i++)
		x[i] = random_value((uint64_t)i + 5);
	for (int fmt = 0; fmt < 2; fmt++) {
		struct dli_context *ctx = open_fq(fmt ? "FP8BLOCKE5M2" : "FP8BLOCKE4M3", "");
		CHECK(ctx != NULL);
		if (!ctx)
			return;
		struct dli_layer *l = layer(ctx, FC1);
		enum dli_dtype f = fmt ? DLI_DTYPE_F8E5M2 : DLI_DTYPE_F8E4M3;
		struct dli_block_spec s = {
			.size = sizeof s, .recipe = DLI_BLOCK_FP8_1D, .format = f, .pow2_scales = 1
		};
		check_modified(l, DLI_GEMM_FPROP, DLI_TENSOR_ACTIVATION, x, R, C, &s,
			       "fp8 fprop act");
		check_modified(l, DLI_GEMM_DGRAD, DLI_TENSOR_GRADIENT, x, R, C, &s,
			       "fp8 dgrad grad");
		s.columnwise = 1;
		check_modified(l, DLI_GEMM_WGRAD, DLI_TENSOR_ACTIVATION, x, R, C, &s,
			       "fp8 wgrad act");
		s.recipe = DLI_BLOCK_FP8_2D;
		check_modified(l, DLI_GEMM_DGRAD, DLI_TENSOR_WEIGHT, x, R, C, &s,
			       "fp8 dgrad weight");
		s.columnwise = 0;
		check_modified(l, DLI_GEMM_FPROP, DLI_TENSOR_WEIGHT, x, R, C, &s,
			       "fp8 fprop weight");
		dli_destroy(ctx);
	}
}

static void check_error(const char *format, const char *extra, const char *const *parts)
{
	char yaml[1024];
	struct dli_error err;
	snprintf(yaml, sizeof yaml,
		 "s:\n  enabled: True\n  layers: {layer_name_regex_pattern: fc1}\n"
		 "  transformer_engine:\n    FakeQuant:\n      enabled: True\n"
		 "      quant_format: %s\n%s%s",
		 format, extra, fq_struct);
	struct dli_context *ctx = open_yaml(yaml, &err);
	CHECK(ctx == NULL);
	dli_destroy(ctx);
	if (ctx)
		return;
	for (size_t i = 0; parts[i]; i++) {
		if (!strstr(err.message, parts[i]))
			fprintf(stderr, "error \"%s\" lacks \"%s\"\n", err.message, parts[i]);
		CHECK(strstr(err.message, parts[i]) != NULL);
	}
}

static void test_errors(void)
{
	check_error("FP8E4M3", "      seed: 3\n",
		    (const char *const[]){ "<string>:10:11:", "seed: applies to NVFP4 only",
					   "FP8E4M3", NULL });
	check_error("MXFP8E4M3", "      stochastic_rounding: True\n",
		    (const char *const[]){ "stochastic_rounding: applies to NVFP4 only", NULL });
	check_error("MXFP8E5M2", "      block_scaling_dim: 2\n",
		    (const char *const[]){ "block_scaling_dim: applies to FP8BLOCKE4M3", NULL });
	check_error("NVFP4", "      random_hadamard_transform: True\n",
		    (const char *const[]){ "random_hadamard_transform: needs 1 x 16 blocks",
					   "weights get 16 x 16 tiles", NULL });
	check_error("NVFP4", "      random_hadamard_transform: True\n      block_scaling_dim: 2\n",
		    (const char *const[]){ "block_scaling_dim is 2", NULL });
	check_error(
	    "NVFP4", "      margin: 1\n",
	    (const char *const[]){ "margin: applies to the per-tensor formats", "NVFP4", NULL });
	check_error("FP8BLOCKE4M3", "      block_scaling_dim: 3\n",
		    (const char *const[]){ "<string>:", "block_scaling_dim", NULL });
	check_error("NVFP5", "", (const char *const[]){ "<string>:", "NVFP5", NULL });
}

int main(void)
{
	test_sr_probability();
	test_rbits_uniform();
	test_rht_signs();
	test_block_fake_quant();
	test_stats_add_block_sizes();
	test_fake_quant_nvfp4();
	test_fake_quant_fp8_block();
	test_errors();
	remove_log_dir();
	return check_exit();
}
