/* `dlinspect stats FILE`: the statistics of tensors saved as .npy or .safetensors, computed by the
 * same kernels the library runs in training, optionally with the what-if current-scaling FP8 ones.
 *
 * --json prints one object per tensor per line:
 *   {"tensor": "w", "dtype": "bf16", "shape": [2, 3], "stats": {"min": -1.5, "nan_count": 0}}
 * "dtype" is how the elements were read (f32, f16, bf16, e4m3, e5m2); counts are integers; other
 * values are printed with 17 significant digits (they round-trip a double). NaN and infinities
 * are written as NaN, Infinity and -Infinity, the literals Python's json module reads and writes
 * (strict JSON has none); an empty tensor has "stats": {}. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "error-private.h"
#include "kernels-private.h"
#include "tensorfile.h"

static const char usage[] =
	"usage: dlinspect stats FILE [--tensor NAME]... [--stats a,b,...] [--fp8 e4m3|e5m2]\n"
	"                       [--margin N] [--dtype bf16|f16|e4m3|e5m2] [--json]\n";

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
	const char *stats = NULL;
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
			stats = argv[++i];
		} else if ((!strcmp(a, "--fp8") || !strcmp(a, "--dtype")) && has_value) {
			const char *v = argv[++i];
			int d = dli_tf_dtype_from_name(v);
			bool fp8 = !strcmp(a, "--fp8");
			if (d < 0 || (fp8 && d != DLI_DTYPE_F8E4M3 && d != DLI_DTYPE_F8E5M2)) {
				report("%s '%s': expected %s", a, v,
					fp8 ? "e4m3 or e5m2" : "bf16, f16, f32, e4m3 or e5m2");
				return 2;
			}
			*(fp8 ? &o->fp8 : &o->as_dtype) = d;
		} else if (!strcmp(a, "--margin") && has_value) {
			const char *v = argv[++i];
			char *end;
			errno = 0;
			o->margin = strtod(v, &end);
			if (!*v || *end || errno || !isfinite(o->margin)) {
				report("--margin '%s': expected a number", v);
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
	if (stats) {
		int r = parse_stats(stats, o);
		if (r)
			return r;
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

/* One pass over the tensor: the statistics, or (compare) the FP8 quantize-and-compare terms. Data
 * that is not aligned in the file (safetensors does not promise alignment), and FP8 data to be
 * compared (the compare kernel takes f32/f16/bf16), go through a bounded buffer in chunks whose
 * records merge exactly. */
static int pass(const struct dli_tf_tensor *t, bool compare, enum dli_dtype fmt, float scale,
		struct dli_stats_record *out)
{
	size_t esz = dli_dtype_size(t->dtype);
	bool fp8_in = t->dtype == DLI_DTYPE_F8E4M3 || t->dtype == DLI_DTYPE_F8E5M2;
	bool decode = compare && fp8_in;
	if (!decode && (uintptr_t)t->data % esz == 0)
		return compare ? dli_cpu_fp8_compare(t->data, t->dtype, t->numel, fmt, scale, NULL,
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
		r = compare ? dli_cpu_fp8_compare(buf, dt, m, fmt, scale, NULL, &part)
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
	int r = pass(t, false, DLI_DTYPE_F32, 1.0f, rec);
	if (r)
		return r;
	clear_fp8_terms(rec);
	if (o->fp8 < 0)
		return 0;
	/* Current scaling from the tensor's own amax, as a per-tensor FP8 recipe would pick it; a
	 * NaN amax (a NaN element) gives scale 1 per DESIGN.md section 7. */
	enum dli_dtype fmt = (enum dli_dtype)o->fp8;
	float amax = (float)dli_stats_value(rec, DLI_STAT_CUR_AMAX);
	float scale = dli_fp8_scale(amax, fmt, o->margin);
	struct dli_stats_record q;
	if ((r = pass(t, true, fmt, scale, &q)))
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

static void print_json_number(double v, bool count)
{
	if (isnan(v))
		fputs("NaN", stdout);
	else if (isinf(v))
		fputs(v > 0 ? "Infinity" : "-Infinity", stdout);
	else if (count)
		printf("%.0f", v);
	else
		printf("%.17g", v);
}

static void print_tensor(const struct dli_tf_tensor *t, const struct options *o,
			 const struct dli_stats_record *rec)
{
	const char *dtype = dli_tf_dtype_name(t->dtype);
	if (o->json) {
		fputs("{\"tensor\": ", stdout);
		print_json_string(t->name);
		printf(", \"dtype\": \"%s\", \"shape\": [", dtype);
		for (int i = 0; i < t->ndim; i++)
			printf("%s%lld", i ? ", " : "", (long long)t->shape[i]);
		fputs("], \"stats\": {", stdout);
		for (size_t k = 0; rec && k < o->n_stats; k++) {
			printf("%s\"%s\": ", k ? ", " : "", dli_stat_name(o->stats[k]));
			enum dli_stat s = o->stats[k];
			print_json_number(dli_stats_value(rec, s), is_count_stat(s));
		}
		fputs("}}\n", stdout);
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
		if (is_count_stat(o->stats[k]) && isfinite(v))
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
	static const char readable[] = "F32, F16, BF16, F8_E4M3, F8_E5M2";
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
		/* Empty tensors are valid and have no statistics (DESIGN.md section 5). */
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
