/* `dlinspect stats FILE`: the statistics of tensors saved as .npy or .safetensors, computed by the
 * same kernels the library runs in training, optionally with the what-if current-scaling FP8 ones.
 *
 * --json prints one object per tensor per line, strict JSON (RFC 8259):
 *   {"tensor": "w", "dtype": "bf16", "shape": [2, 3], "stats": {"min": -1.5, "nan_count": 0}}
 * "dtype" is how the elements were read (f32, f16, bf16, e4m3, e5m2, f64, i8...i64, u8...u64,
 * bool); counts are integers; other values are printed with 17 significant digits (they round-trip
 * a double). JSON has no NaN or infinity: such a value is null in "stats", and a "nonfinite" object
 * after "stats" says which it was, "nan", "inf" or "-inf" (present only when there is one):
 *   {..., "stats": {"max": null, "min": -2}, "nonfinite": {"max": "inf"}}
 * An empty tensor has "stats": {}. docs/stats.md says the same for users.
 *
 * float64 and integer elements are not what the statistics kernels read (training dtypes): they
 * are widened to double here, in chunks, and summed in double; the FP8 what-if statistics compare
 * their values rounded to float32, as the kernels take them. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "tools-api.h"
#include "tensorfile.h"

static const char usage[] =
	"usage: dlinspect stats FILE [--tensor NAME]... [--stats a,b,...] [--fp8 e4m3|e5m2]\n"
	"                       [--margin N] [--dtype bf16|f16|e4m3|e5m2|int] [--json]\n";

/* Elements per chunk when the data has to be copied or decoded first (4 MiB of floats). */
#define CHUNK ((int64_t)1 << 20)

struct options {
	const char *path;
	const char **tensors;
	size_t n_tensors;
	enum dli_stat stats[DLI_STAT_COUNT];
	size_t n_stats;
	int fp8;      /* -1: no FP8 what-if, else the format */
	double margin;
	int as_dtype; /* -1 or the --dtype */
	bool json;
};

/* One line on stderr, "dlinspect stats: " first. Names and dtypes come from the file: control
 * characters in them are escaped, so that an error stays one line and a terminal stays sane. */
static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
	char text[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	fflush(stdout);
	fputs("dlinspect stats: ", stderr);
	for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
		if (*p < 0x20 || *p == 0x7f)
			fprintf(stderr, "\\x%02x", *p);
		else
			fputc(*p, stderr);
	}
	fputc('\n', stderr);
}

static bool is_fp8_stat(enum dli_stat s)
{
	return s >= DLI_STAT_UNDERFLOWS_PCT;
}

static bool is_count_stat(enum dli_stat s)
{
	return s == DLI_STAT_NAN_COUNT || s == DLI_STAT_INF_COUNT;
}

/* "min, max, ..." for error messages. */
static void stat_list(char *buf, size_t size)
{
	size_t off = 0;
	buf[0] = '\0';
	for (int s = 0; s < DLI_STAT_COUNT && off < size; s++) {
		const char *name = dli_stat_name((enum dli_stat)s);
		off += (size_t)snprintf(buf + off, size - off, "%s%s", s ? ", " : "",
					name ? name : "?");
	}
}

/* --stats a,b,c: known names, each once, in the order given. */
static int parse_stats(const char *list, struct options *o)
{
	char *copy = strdup(list);
	if (!copy) {
		report("out of memory");
		return 1;
	}
	int status = 0;
	char *save = NULL;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ')
			tok++;
		size_t len = strlen(tok);
		while (len && tok[len - 1] == ' ')
			tok[--len] = '\0';
		if (!len)
			continue;
		int s = dli_stat_from_name(tok);
		if (s < 0 || s >= DLI_STAT_COUNT) {
			const char *names[DLI_STAT_COUNT];
			for (int k = 0; k < DLI_STAT_COUNT; k++)
				names[k] = dli_stat_name((enum dli_stat)k);
			char hint[128], valid[512];
			dli_suggest_text(hint, sizeof hint, tok, names, DLI_STAT_COUNT);
			stat_list(valid, sizeof valid);
			report("unknown statistic '%s'%s; valid: %s", tok, hint, valid);
			status = 2;
			break;
		}
		bool dup = false;
		for (size_t k = 0; k < o->n_stats; k++)
			dup |= o->stats[k] == (enum dli_stat)s;
		if (!dup)
			o->stats[o->n_stats++] = (enum dli_stat)s;
	}
	if (!status && !o->n_stats) {
		report("--stats names no statistic");
		status = 2;
	}
	free(copy);
	return status;
}

/* Returns 0, or the exit status of a usage error (already reported). */
static int parse_args(int argc, char **argv, struct options *o)
{
	bool stats_given = false;
	bool margin_set = false;
	o->fp8 = -1;
	o->as_dtype = -1;
	o->tensors = calloc((size_t)argc, sizeof *o->tensors);
	if (!o->tensors) {
		report("out of memory");
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		bool has_value = i + 1 < argc;
		if (!strcmp(a, "--json")) {
			o->json = true;
		} else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			fputs(usage, stdout);
			return -1;
		} else if (!strcmp(a, "--tensor") && has_value) {
			o->tensors[o->n_tensors++] = argv[++i];
		} else if (!strcmp(a, "--stats") && has_value) {
			/* each --stats adds its names to those before */
			int r = parse_stats(argv[++i], o);
			if (r)
				return r;
			stats_given = true;
		} else if ((!strcmp(a, "--fp8") || !strcmp(a, "--dtype")) && has_value) {
			const char *v = argv[++i];
			bool fp8 = !strcmp(a, "--fp8");
			int d = !fp8 && !strcmp(v, "int") ? DLI_TF_AS_INT : dli_tf_dtype_from_name(v);
			if (d < 0 || (fp8 && d != DLI_DTYPE_F8E4M3 && d != DLI_DTYPE_F8E5M2)) {
				report("%s '%s': expected %s", a, v,
					fp8 ? "e4m3 or e5m2" : "bf16, f16, f32, e4m3, e5m2 or int");
				return 2;
			}
			*(fp8 ? &o->fp8 : &o->as_dtype) = d;
		} else if (!strcmp(a, "--margin") && has_value) {
			const char *v = argv[++i];
			if (!dli_cmd_decimal(v, &o->margin)) {
				report("--margin '%s': expected a number", v);
				return 2;
			}
			/* The features' range (features/feature-util.h): beyond it every value would
			 * quantize to 0 or saturate. */
			if (o->margin < -126 || o->margin > 126) {
				report("--margin %s: expected a number in [-126, 126], as the features' "
				       "margin (beyond it the scale leaves float's normal range)", v);
				return 2;
			}
			margin_set = true;
		} else if (a[0] == '-' && a[1]) {
			bool valued = !strcmp(a, "--tensor") || !strcmp(a, "--stats") ||
				      !strcmp(a, "--fp8") || !strcmp(a, "--dtype") ||
				      !strcmp(a, "--margin");
			report("%s '%s'", valued ? "missing value for" : "unknown option", a);
			fputs(usage, stderr);
			return 2;
		} else if (o->path) {
			report("one FILE at a time ('%s' and '%s')", o->path, a);
			fputs(usage, stderr);
			return 2;
		} else {
			o->path = a;
		}
	}
	if (!o->path) {
		fputs(usage, stderr);
		return 2;
	}
	if (margin_set && o->fp8 < 0) {
		report("--margin needs --fp8 e4m3|e5m2");
		return 2;
	}
	if (stats_given) {
		for (size_t k = 0; k < o->n_stats; k++) {
			if (is_fp8_stat(o->stats[k]) && o->fp8 < 0) {
				report("'%s' is a what-if FP8 statistic: add --fp8 e4m3|e5m2",
				       dli_stat_name(o->stats[k]));
				return 2;
			}
		}
	} else {
		for (int s = 0; s < DLI_STAT_COUNT; s++)
			if (o->fp8 >= 0 || !is_fp8_stat((enum dli_stat)s))
				o->stats[o->n_stats++] = (enum dli_stat)s;
	}
	return 0;
}

/* ---- float64 and integer elements ---- */

/* Element i of a wide tensor, as a double (64-bit integers beyond 2^53 round). */
static double wide_elem(const unsigned char *p, enum dli_tf_wide w, int64_t i)
{
	switch (w) {
	case DLI_TF_WIDE_F64: { double v; memcpy(&v, p + 8 * i, 8); return v; }
	case DLI_TF_WIDE_I8: return (int8_t)p[i];
	case DLI_TF_WIDE_U8: return p[i];
	case DLI_TF_WIDE_BOOL: return p[i] != 0;
	case DLI_TF_WIDE_I16: { int16_t v; memcpy(&v, p + 2 * i, 2); return v; }
	case DLI_TF_WIDE_U16: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
	case DLI_TF_WIDE_I32: { int32_t v; memcpy(&v, p + 4 * i, 4); return v; }
	case DLI_TF_WIDE_U32: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
	case DLI_TF_WIDE_I64: { int64_t v; memcpy(&v, p + 8 * i, 8); return (double)v; }
	case DLI_TF_WIDE_U64: { uint64_t v; memcpy(&v, p + 8 * i, 8); return (double)v; }
	default: return NAN;
	}
}

/* The record of n doubles, with the definitions of include/dlinspect/stats.h and the kernels'
 * corrected two-pass variance (blocks of WIDE_BLOCK merged with Chan's formula). */
#define WIDE_BLOCK 4096
static void wide_block(const double *x, int64_t n, struct dli_stats_record *r)
{
	uint64_t nan = 0, inf = 0, zero = 0;
	double mn = INFINITY, mx = -INFINITY, mnz = INFINITY, s = 0, sa = 0, sq = 0;
	dli_stats_record_init(r);
	for (int64_t i = 0; i < n; i++) {
		double v = x[i], a = fabs(v);
		s += v;
		sa += a;
		sq += v * v;
		if (v != v) {
			nan++;
			continue;
		}
		inf += a == INFINITY;
		if (v == 0)
			zero++;
		else if (a < mnz)
			mnz = a;
		mn = v < mn ? v : mn;
		mx = v > mx ? v : mx;
	}
	double mean = s / (double)n, sd = 0, sdd = 0;
	for (int64_t i = 0; i < n; i++) {
		double d = x[i] - mean;
		sd += d;
		sdd += d * d;
	}
	/* Doubles may be large enough for d * d to overflow: then the spread is infinite (the
	 * correction, at most sdd, would turn it into NaN). */
	double m2 = isinf(sdd) ? sdd : sdd - sd * sd / (double)n;
	r->count = (uint64_t)n;
	r->nan_count = nan;
	r->inf_count = inf;
	r->zero_count = zero;
	r->min = mn;
	r->max = mx;
	r->amax = (uint64_t)n > nan ? fmax(mx, -mn) : 0;
	r->min_nonzero_abs = mnz;
	r->sum = s;
	r->sum_abs = sa;
	r->sum_sq = sq;
	r->mean = mean;
	r->m2 = m2 < 0 ? 0 : m2;
}

/* The statistics (or, compare, the FP8 terms of the values rounded to float32) of a wide tensor. */
static int wide_pass(const struct dli_tf_tensor *t, bool compare, enum dli_dtype fmt, float scale,
		     const struct dli_cpu_options *co,
		     struct dli_stats_record *out)
{
	double *buf = malloc((size_t)WIDE_BLOCK * sizeof *buf);
	float *fbuf = malloc((size_t)WIDE_BLOCK * sizeof *fbuf);
	int r = buf && fbuf ? 0 : -ENOMEM;
	dli_stats_record_init(out);
	for (int64_t i = 0; i < t->numel && !r; i += WIDE_BLOCK) {
		int64_t m = t->numel - i < WIDE_BLOCK ? t->numel - i : WIDE_BLOCK;
		struct dli_stats_record part;
		for (int64_t k = 0; k < m; k++)
			buf[k] = wide_elem(t->data, t->wide, i + k);
		if (compare) {
			uint64_t rounded_inf = 0;
			for (int64_t k = 0; k < m; k++) {
				fbuf[k] = (float)buf[k];
				rounded_inf += isinf(fbuf[k]) && isfinite(buf[k]);
			}
			r = dli_cpu_fp8_compare(fbuf, DLI_DTYPE_F32, m, fmt, scale, co, &part);
			/* The kernel leaves infinities out, and the record's inf_count (of
			 * this tensor, in double) puts back those of the data only: one that
			 * float32 rounding made is put back here, as finalizing puts back an
			 * infinity (kernels/record.c): an overflow, an infinite mse, a cos_sim
			 * and sqnr_db of NaN. */
			if (!r && rounded_inf) {
				part.fp8_count += rounded_inf;
				part.overflows += rounded_inf;
				part.err_sq = part.x_sq = INFINITY;
				part.dot = NAN;
			}
		} else {
			wide_block(buf, m, &part);
		}
		if (!r)
			dli_stats_merge(out, &part);
	}
	free(fbuf);
	free(buf);
	return r;
}

/* One pass over the tensor: the statistics, or (compare) the FP8 quantize-and-compare terms. Data
 * that is not aligned in the file (safetensors does not promise alignment), and FP8 data to be
 * compared (the compare kernel takes f32/f16/bf16), go through a bounded buffer in chunks whose
 * records merge exactly. */
static int pass(const struct dli_tf_tensor *t, bool compare, enum dli_dtype fmt, float scale,
		const struct dli_cpu_options *co,
		struct dli_stats_record *out)
{
	if (t->wide)
		return wide_pass(t, compare, fmt, scale, co, out);
	size_t esz = dli_dtype_size(t->dtype);
	bool fp8_in = t->dtype == DLI_DTYPE_F8E4M3 || t->dtype == DLI_DTYPE_F8E5M2;
	bool decode = compare && fp8_in;
	if (!decode && (uintptr_t)t->data % esz == 0)
		return compare ? dli_cpu_fp8_compare(t->data, t->dtype, t->numel, fmt, scale, co,
						     out)
			       : dli_cpu_stats(t->data, t->dtype, t->numel, NULL, out);

	float *buf = malloc((size_t)CHUNK * sizeof *buf);
	if (!buf)
		return -ENOMEM;
	dli_stats_record_init(out);
	int r = 0;
	const unsigned char *src = t->data;
	for (int64_t i = 0; i < t->numel && !r; i += CHUNK) {
		int64_t m = t->numel - i < CHUNK ? t->numel - i : CHUNK;
		enum dli_dtype dt = t->dtype;
		if (decode) {
			for (int64_t k = 0; k < m; k++)
				buf[k] = dli_fp8_decode(src[i + k], t->dtype);
			dt = DLI_DTYPE_F32;
		} else {
			memcpy(buf, src + (size_t)i * esz, (size_t)m * esz);
		}
		struct dli_stats_record part;
		r = compare ? dli_cpu_fp8_compare(buf, dt, m, fmt, scale, co, &part)
			    : dli_cpu_stats(buf, dt, m, NULL, &part);
		if (!r)
			dli_stats_merge(out, &part);
	}
	free(buf);
	return r;
}

/* dli_cpu_stats promises the fields up to m2; the FP8 terms after them are set here to the empty
 * record's, so that merging the compare pass in sees nothing else. */
static void clear_fp8_terms(struct dli_stats_record *rec)
{
	struct dli_stats_record empty;
	dli_stats_record_init(&empty);
	size_t off = offsetof(struct dli_stats_record, fp8_count);
	memcpy((char *)rec + off, (const char *)&empty + off, sizeof *rec - off);
}

static int compute(const struct dli_tf_tensor *t, const struct options *o,
		   struct dli_stats_record *rec)
{
	int r = pass(t, false, DLI_DTYPE_F32, 1.0f, NULL, rec);
	if (r)
		return r;
	clear_fp8_terms(rec);
	if (o->fp8 < 0)
		return 0;
	/* Current scaling from the tensor's own amax, as a per-tensor FP8 recipe would pick it; a
	 * NaN amax (a NaN element) gives scale 1 per docs/statistics.md. */
	enum dli_dtype fmt = (enum dli_dtype)o->fp8;
	float amax = (float)dli_stats_value(rec, DLI_STAT_CUR_AMAX);
	float scale = dli_fp8_scale(amax, fmt, o->margin);
	struct dli_stats_record q;
	struct dli_cpu_options scalar; /* a range the SIMD lanes cannot hold: in double */
	if ((r = pass(t, true, fmt, scale, dli_fp8_compare_opts(rec->min_nonzero_abs, scale, NULL,
								 &scalar),
		      &q)))
		return r;
	dli_stats_merge(rec, &q);
	return 0;
}

/* A JSON string: quotes, backslashes and control characters escaped; the name is valid UTF-8
 * already (the readers check it). */
static void print_json_string(const char *s)
{
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	}
	putchar('"');
}

/* Names as they are, except control characters, which could garble a terminal. */
static void print_name(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p < 0x20 || *p == 0x7f)
			printf("\\x%02x", *p);
		else
			putchar(*p);
	}
}

/* "nan", "inf", "-inf" (Python's spelling), or NULL for a finite value. */
static const char *nonfinite_name(double v)
{
	return isnan(v) ? "nan" : isinf(v) ? (v > 0 ? "inf" : "-inf") : NULL;
}

static void print_json_number(double v, bool count)
{
	if (!isfinite(v))
		fputs("null", stdout); /* strict JSON: "nonfinite" says which */
	else if (count)
		printf("%.0f", v);
	else
		printf("%.17g", v);
}

static void print_tensor(const struct dli_tf_tensor *t, const struct options *o,
			 const struct dli_stats_record *rec)
{
	const char *dtype = dli_tf_tensor_dtype_name(t);
	if (o->json) {
		fputs("{\"tensor\": ", stdout);
		print_json_string(t->name);
		printf(", \"dtype\": \"%s\", \"shape\": [", dtype);
		for (int i = 0; i < t->ndim; i++)
			printf("%s%lld", i ? ", " : "", (long long)t->shape[i]);
		fputs("], \"stats\": {", stdout);
		size_t n_nonfinite = 0;
		for (size_t k = 0; rec && k < o->n_stats; k++) {
			printf("%s\"%s\": ", k ? ", " : "", dli_stat_name(o->stats[k]));
			enum dli_stat s = o->stats[k];
			double v = dli_stats_value(rec, s);
			print_json_number(v, is_count_stat(s));
			n_nonfinite += !isfinite(v);
		}
		fputs("}", stdout);
		if (n_nonfinite) {
			fputs(", \"nonfinite\": {", stdout);
			for (size_t k = 0, shown = 0; k < o->n_stats; k++) {
				const char *what = nonfinite_name(dli_stats_value(rec, o->stats[k]));
				if (what)
					printf("%s\"%s\": \"%s\"", shown++ ? ", " : "",
					       dli_stat_name(o->stats[k]), what);
			}
			fputs("}", stdout);
		}
		fputs("}\n", stdout);
		return;
	}
	print_name(t->name);
	printf("  %s", dtype);
	if (t->reinterpreted)
		printf(" (stored as '%s')", t->file_dtype);
	printf("  [");
	for (int i = 0; i < t->ndim; i++)
		printf("%s%lld", i ? ", " : "", (long long)t->shape[i]);
	printf("]%s\n", t->fortran_order ? "  (Fortran order)" : "");
	if (!rec) {
		printf("  (empty: no statistics)\n");
		return;
	}
	for (size_t k = 0; k < o->n_stats; k++) {
		double v = dli_stats_value(rec, o->stats[k]);
		printf("  %-14s ", dli_stat_name(o->stats[k]));
		if (!isfinite(v))
			printf("%s\n", nonfinite_name(v)); /* never "-nan" */
		else if (is_count_stat(o->stats[k]))
			printf("%.0f\n", v);
		else
			printf("%.9g\n", v);
	}
}

/* The tensors to print, in header order or in --tensor order; NULL entries were not found. */
static int select_tensors(const struct dli_tensorfile *tf, const struct options *o,
			  const struct dli_tf_tensor ***out, size_t *n_out)
{
	if (!o->n_tensors) {
		const struct dli_tf_tensor **sel = calloc(tf->n_tensors + 1, sizeof *sel);
		if (!sel)
			goto oom;
		for (size_t i = 0; i < tf->n_tensors; i++)
			sel[i] = &tf->tensors[i];
		*out = sel;
		*n_out = tf->n_tensors;
		return 0;
	}
	if (tf->format == DLI_TF_NPY) {
		report("%s: --tensor applies to .safetensors files; a .npy file holds one array",
		       o->path);
		return 1;
	}
	const struct dli_tf_tensor **sel = calloc(o->n_tensors, sizeof *sel);
	const char **names = calloc(tf->n_tensors + 1, sizeof *names);
	if (!sel || !names) {
		free(sel);
		free(names);
		goto oom;
	}
	for (size_t i = 0; i < tf->n_tensors; i++)
		names[i] = tf->tensors[i].name;
	for (size_t k = 0; k < o->n_tensors; k++) {
		for (size_t i = 0; i < tf->n_tensors && !sel[k]; i++)
			if (!strcmp(o->tensors[k], tf->tensors[i].name))
				sel[k] = &tf->tensors[i];
		if (!sel[k]) {
			char hint[256];
			dli_suggest_text(hint, sizeof hint, o->tensors[k], names, tf->n_tensors);
			report("%s: no tensor '%s'%s (the file has %zu)",
				o->path, o->tensors[k], hint, tf->n_tensors);
			free(sel);
			free(names);
			return 1;
		}
	}
	free(names);
	*out = sel;
	*n_out = o->n_tensors;
	return 0;
oom:
	report("out of memory");
	return 1;
}

int dli_cmd_stats(int argc, char **argv)
{
	static const char readable[] = "F32, F16, BF16, F8_E4M3, F8_E5M2, F64, I8-I64, U8-U64, BOOL";
	struct options o = {0};
	struct dli_tensorfile tf = {0};
	const struct dli_tf_tensor **sel = NULL;
	size_t n_sel = 0;
	int status = parse_args(argc, argv, &o);
	if (status) {
		free(o.tensors);
		return status < 0 ? 0 : status;
	}
	struct dli_error err;
	if (dli_tensorfile_open(&tf, o.path, o.as_dtype, &err)) {
		report("%s: %s", o.path, err.message);
		status = 1;
		goto out;
	}
	if (!tf.n_tensors) { /* a header of metadata only: nothing to print is not a success */
		report("%s: the file holds no tensor", o.path);
		status = 1;
		goto out;
	}
	if ((status = select_tensors(&tf, &o, &sel, &n_sel)))
		goto out;
	/* A tensor asked for by name must be readable before anything is printed; in a whole-file
	 * listing an unreadable dtype is reported in its place and the others still print. */
	for (size_t k = 0; o.n_tensors && k < n_sel; k++) {
		if (!sel[k]->supported) {
			report("%s: tensor '%s': dtype %.40s is not supported (%s are)", o.path,
			       sel[k]->name, sel[k]->file_dtype, readable);
			status = 1;
			goto out;
		}
	}
	for (size_t k = 0; k < n_sel; k++) {
		const struct dli_tf_tensor *t = sel[k];
		if (!t->supported) {
			report("%s: tensor '%s': dtype %.40s is not supported (%s are); skipped",
			       o.path, t->name, t->file_dtype, readable);
			status = 1;
			continue;
		}
		/* Empty tensors are valid and have no statistics (docs/statistics.md, Tensors). */
		struct dli_stats_record rec;
		if (t->numel) {
			int r = compute(t, &o, &rec);
			if (r) {
				report("%s: tensor '%s': %s", o.path,
					t->name, strerror(-r));
				status = 1;
				continue;
			}
		}
		print_tensor(t, &o, t->numel ? &rec : NULL);
	}
	if (fflush(stdout) || ferror(stdout)) {
		report("writing the output: %s", strerror(errno));
		status = 1;
	}
out:
	free(sel);
	free(o.tensors);
	dli_tensorfile_close(&tf);
	return status;
}
