/* Configs and layer names as a careless user or an attacker writes them (issue 13): regexes PCRE2
 * gives up on, names that are not UTF-8, names listed twice, configs of 100k items and configs over
 * the documented limits. Through the real dli_init path with the "probe" fixture module. */
#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>

#include "check.h"
#include "context-private.h"

static char log_dir[] = "/tmp/dli-test-hardening-XXXXXX";

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int load(const char *yaml, struct dli_context **ctx, struct dli_error *err)
{
	struct dli_options o;
	dli_options_init(&o);
	o.config_yaml = yaml;
	o.log_dir = log_dir;
	memset(err, 0, sizeof *err);
	return dli_init(&o, ctx, err);
}

/* A growing text buffer for generated configs. */
struct text {
	char *s;
	size_t n, cap;
};

static void put(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct text *t, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (t->n + (size_t)n + 1 > t->cap) {
		t->cap = 2 * (t->n + (size_t)n + 1);
		t->s = realloc(t->s, t->cap);
		if (!t->s)
			abort();
	}
	va_start(ap, fmt);
	vsnprintf(t->s + t->n, (size_t)n + 1, fmt, ap);
	va_end(ap);
	t->n += (size_t)n;
}

/* ---- Selection: never a silent "not selected" ---- */

/* PCRE2 stops `(a|a)+b` at its match limit (2^24 ways to split 24 a's); Python's re.search goes
 * on and finds the 'c'. dli_layer_get says so instead of answering "selected by no section". */
static void test_regex_limit_is_an_error(void)
{
	struct dli_context *ctx = NULL;
	struct dli_error err;
	int r = load("other:\n"
		     "  enabled: true\n"
		     "  layers: {layer_types: fc}\n"
		     "  Probe: {enabled: true, tensors: [activation]}\n"
		     "bomb:\n"
		     "  enabled: true\n"
		     "  layers: {layer_name_regex_pattern: '(a|a)+b|c'}\n"
		     "  ProbeB: {enabled: true, tensors: [activation]}\n",
		     &ctx, &err);
	CHECK_INT(r, 0);
	if (r) {
		fprintf(stderr, "%s\n", err.message);
		return;
	}
	char name[32];
	memset(name, 'a', 24);
	strcpy(name + 24, "c");
	struct dli_layer *l = (struct dli_layer *)&l;
	r = dli_layer_get(ctx, name, &l, &err);
	CHECK_INT(r, -EINVAL);
	CHECK_INT(err.code, -EINVAL);
	CHECK(l == NULL);
	CHECK_STR(err.file, "<string>");
	CHECK_INT(err.line, 7); /* the pattern's place, not its section's */
	CHECK_INT(err.column, 38);
	CHECK_CONTAINS(err.message, "<string>:7:38: section 'bomb': layer_name_regex_pattern "
				    "'(a|a)+b|c' could not be matched against layer "
				    "'aaaaaaaaaaaaaaaaaaaaaaaac': match limit exceeded");
	/* Not cached as unselected: asking again fails again. */
	CHECK_INT(dli_layer_get(ctx, name, &l, &err), -EINVAL);
	/* The string-taking calls answer the default and do not crash. */
	CHECK(dli_fp8_gemm_enabled_by_name(ctx, name, "fprop", NULL));
	/* Names the pattern decides quickly are unaffected. */
	CHECK_INT(dli_layer_get(ctx, "xc", &l, &err), 0);
	CHECK_INT(l->n_bindings, 1);
	CHECK_INT(dli_layer_get(ctx, "x.fc1", &l, &err), 0); /* both: a 'c' and 'fc' */
	CHECK_INT(l->n_bindings, 2);
	dli_destroy(ctx);
}

/* A C host may pass bytes that are not UTF-8: the regex sees the valid parts of the name (an
 * invalid byte matches nothing, not even '.'), as exact_layer_names and layer_types (bytes) do. */
static void test_non_utf8_names_are_selected(void)
{
	struct dli_context *ctx = NULL;
	struct dli_error err;
	int r = load("re:\n"
		     "  enabled: true\n"
		     "  layers: {layer_name_regex_pattern: 'layers\\.\\d+\\.fc1$'}\n"
		     "  Probe: {enabled: true, tensors: [activation]}\n"
		     "types:\n"
		     "  enabled: true\n"
		     "  layers: {layer_types: [fc2]}\n"
		     "  ProbeB: {enabled: true, tensors: [activation]}\n",
		     &ctx, &err);
	CHECK_INT(r, 0);
	if (r) {
		fprintf(stderr, "%s\n", err.message);
		return;
	}
	struct dli_layer *l = NULL;
	CHECK_INT(dli_layer_get(ctx, "mod\xe8le.layers.3.fc1", &l, &err), 0); /* Latin-1 */
	CHECK(l && l->n_bindings == 1);
	CHECK_INT(dli_layer_get(ctx, "\xff\xfe.layers.3.fc1", &l, &err), 0);
	CHECK(l && l->n_bindings == 1);
	CHECK_INT(dli_layer_get(ctx, "\xc3.layers.3.fc2", &l, &err), 0); /* a cut sequence */
	CHECK(l && l->n_bindings == 1);
	CHECK_INT(dli_layer_get(ctx, "layers.\xff.fc1", &l, &err), 0); /* no number: no match */
	CHECK(l && l->n_bindings == 0);
	dli_destroy(ctx);
}

/* ---- One rule for lists of names: twice is an error, naming both places ---- */

struct dup_case {
	const char *yaml;
	int line, column;
	const char *text;
};

#define HDR "sec:\n  enabled: true\n  layers: {layer_types: fc}\n"

static const struct dup_case dup_cases[] = {
	{HDR "  probe_ns:\n    ProbeGemm: {enabled: true, gemms: [fprop, fprop]}\n", 5, 47,
	 "sec.probe_ns.ProbeGemm.gemms: 'fprop' is listed twice (first at line 5, column 40)"},
	{HDR "  Probe:\n    enabled: true\n    tensors: [activation, weight, activation]\n", 6, 35,
	 "sec.Probe.tensors: 'activation' is listed twice (first at line 6, column 15)"},
	{HDR "  Probe:\n    enabled: true\n    tensors: [my_t, my_t]\n", 6, 21,
	 "sec.Probe.tensors: 'my_t' is listed twice (first at line 6, column 15)"},
	{HDR "  Probe:\n    enabled: true\n    tensors: [activation]\n    stats: [min, max, min]\n", 7,
	 23, "sec.Probe.stats: 'min' is listed twice (first at line 7, column 13)"},
	{"sec:\n  enabled: true\n  layers: {exact_layer_names: [a.fc1, b, a.fc1]}\n", 3, 42,
	 "sec.layers.exact_layer_names: 'a.fc1' is listed twice (first at line 3, column 32)"},
	{"sec:\n  enabled: true\n  layers: {layer_types: [fc1, fc1]}\n", 3, 31,
	 "sec.layers.layer_types: 'fc1' is listed twice (first at line 3, column 26)"},
	{"extensions: [probe, file, probe]\n", 1, 27,
	 "extensions: 'probe' is listed twice (first at line 1, column 14)"},
};

static void test_duplicates_in_lists(void)
{
	for (size_t i = 0; i < sizeof dup_cases / sizeof dup_cases[0]; i++) {
		const struct dup_case *c = &dup_cases[i];
		struct dli_context *ctx = (struct dli_context *)&ctx;
		struct dli_error err;
		int before = check_failures;
		CHECK_INT(load(c->yaml, &ctx, &err), -EINVAL);
		CHECK(ctx == NULL);
		CHECK_INT(err.line, c->line);
		CHECK_INT(err.column, c->column);
		CHECK_CONTAINS(err.message, c->text);
		if (check_failures != before)
			fprintf(stderr, "  in dup case %zu: %s\n", i, err.message);
		if (!ctx)
			continue;
		if (ctx != (struct dli_context *)&ctx)
			dli_destroy(ctx);
	}
}

/* ---- Size: linear in what is given, limited where a limit is the better answer ---- */

/* 100k sections (a mapping of 100k keys, the duplicate-key check), a 100k-item list (exact layer
 * names and a parameter list), 50k extensions: each read in linear time (issue 13 measured 49 s,
 * 27 s and 6 s before); here the results are checked, not the time. */
static void test_big_configs(void)
{
	struct text t = {0};
	enum { N = 100000 };
	for (int i = 0; i < N; i++)
		put(&t, "s%d: {enabled: false}\n", i);
	put(&t, "on:\n  enabled: true\n  layers:\n    exact_layer_names: [");
	for (int i = 0; i < N; i++)
		put(&t, "%sl%d", i ? ", " : "", i);
	put(&t, "]\n  Probe:\n    enabled: true\n    tensors: [activation]\n    stats: [");
	/* The fixture's stats are choices; a long list of distinct ones is the param's own limit. */
	put(&t, "min, max]\n");
	struct dli_context *ctx = NULL;
	struct dli_error err;
	int r = load(t.s, &ctx, &err);
	CHECK_INT(r, 0);
	if (!r) {
		CHECK_INT(ctx->config->n_sections, N + 1);
		CHECK_INT(ctx->config->n_targets, 1);
		struct dli_layer *l = NULL;
		CHECK_INT(dli_layer_get(ctx, "l99999", &l, &err), 0);
		CHECK(l && l->n_bindings == 1);
		CHECK_INT(dli_layer_get(ctx, "l100000", &l, &err), 0);
		CHECK(l && l->n_bindings == 0);
		dli_destroy(ctx);
	} else {
		fprintf(stderr, "big config: %s\n", err.message);
	}

	/* A parameter list of 100k items (TensorBoard's ranks), checked for duplicates. */
	t.n = 0;
	put(&t, "loggers:\n  tensorboard:\n    ranks: [");
	for (int i = 0; i < N; i++)
		put(&t, "%s%d", i ? ", " : "", N - 1 - i);
	put(&t, "]\n");
	r = load(t.s, &ctx, &err);
	CHECK_INT(r, 0);
	if (!r) {
		CHECK_INT(ctx->config->n_loggers, 1);
		CHECK_STR(ctx->config->loggers[0].name, "tensorboard");
		dli_destroy(ctx);
	} else {
		fprintf(stderr, "ranks: %s\n", err.message);
	}
	t.n -= 2; /* "]\n" */
	put(&t, ", 17]\n");
	CHECK_INT(load(t.s, &ctx, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "loggers.tensorboard.ranks: '17' is listed twice (first at line 3");

	/* A duplicate key at the end of 100k keys, and one at the end of 100k list items. */
	t.n = 0;
	for (int i = 0; i < N; i++)
		put(&t, "s%d: {enabled: false}\n", i);
	put(&t, "s17: {enabled: true}\n");
	CHECK_INT(load(t.s, &ctx, &err), -EINVAL);
	CHECK_INT(err.line, N + 1);
	CHECK_CONTAINS(err.message, "duplicate key 's17' (first given at line 18, column 1)");

	t.n = 0;
	put(&t, "extensions: [");
	for (int i = 0; i < N / 2; i++)
		put(&t, "m%d, ", i);
	put(&t, "m7]\n");
	CHECK_INT(load(t.s, &ctx, &err), -EINVAL);
	CHECK_CONTAINS(err.message, "extensions: 'm7' is listed twice (first at line 1, column 42)");

	/* 100k aliases of 100k anchors: each alias found in constant time. */
	t.n = 0;
	put(&t, "anchors: {enabled: false, layers: {exact_layer_names: [");
	for (int i = 0; i < N; i++)
		put(&t, "%s&a%d x%d", i ? ", " : "", i, i);
	put(&t, "]}}\nuses:\n  enabled: true\n  layers:\n    exact_layer_names: [");
	for (int i = 0; i < N; i++)
		put(&t, "%s*a%d", i ? ", " : "", i);
	put(&t, "]\n  Probe: {enabled: true, tensors: [activation]}\n");
	r = load(t.s, &ctx, &err);
	CHECK_INT(r, 0);
	if (!r) {
		struct dli_layer *l = NULL;
		CHECK_INT(dli_layer_get(ctx, "x54321", &l, &err), 0);
		CHECK(l && l->n_bindings == 1);
		dli_destroy(ctx);
	}
	free(t.s);
}

static void test_limits(void)
{
	struct text t = {0};
	struct dli_context *ctx = (struct dli_context *)&ctx;
	struct dli_error err;

	/* More than a million nodes in 2 MB of text. */
	put(&t, "sec:\n  enabled: false\n  junk: [");
	for (int i = 0; i < 1000000; i++)
		put(&t, "0,");
	put(&t, "0]\n");
	CHECK_INT(load(t.s, &ctx, &err), -EINVAL);
	CHECK(ctx == NULL);
	CHECK_INT(err.line, 3);
	CHECK_CONTAINS(err.message, "<string>:3:");
	CHECK_CONTAINS(err.message, "more than 1000000 values, lists and mappings: a config is "
				    "limited to 1000000 YAML nodes");

	/* More than 16 MiB, as text and as a file (a comment: no node is needed to get there). */
	t.n = 0;
	put(&t, "sec: {enabled: false}\n");
	while (t.n <= (16u << 20))
		put(&t, "# %0500d\n", 0);
	ctx = (struct dli_context *)&ctx;
	CHECK_INT(load(t.s, &ctx, &err), -EFBIG);
	CHECK(ctx == NULL);
	CHECK_STR(err.message, "config '<string>' is larger than 16 MiB, the limit");

	char path[] = "/tmp/dli-big-config-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	if (fd >= 0) {
		CHECK_INT(write(fd, t.s, t.n), (long long)t.n);
		close(fd);
		struct dli_options o;
		dli_options_init(&o);
		o.config_path = path;
		o.log_dir = log_dir;
		ctx = (struct dli_context *)&ctx;
		CHECK_INT(dli_init(&o, &ctx, &err), -EFBIG);
		CHECK(ctx == NULL);
		char want[128];
		snprintf(want, sizeof want, "config '%s' is larger than 16 MiB, the limit", path);
		CHECK_STR(err.message, want);
		/* Just under the limit reads (the comment lines are cut to fit). */
		CHECK_INT(truncate(path, 16u << 20), 0);
		ctx = NULL;
		CHECK_INT(dli_init(&o, &ctx, &err), 0);
		dli_destroy(ctx);
		unlink(path);
	}
	free(t.s);
}

/* n sections: s0, a Probe on 50 tensors (164 nodes), and s1 ... as aliases of it. */
static void aliased_sections(struct text *t, int n)
{
	t->n = 0;
	put(t, "s0: &s\n  enabled: true\n  layers: {layer_types: [fc]}\n"
	       "  Probe:\n    enabled: true\n    tensors_struct:\n");
	for (int i = 0; i < 50; i++)
		put(t, "      - {tensor: t%d}\n", i);
	for (int i = 1; i < n; i++)
		put(t, "s%d: *s\n", i);
}

/* What aliases and '<<' merges stand for counts against the node limit: a few hundred KB of them
 * made millions of sections or copied pairs (minutes, gigabytes, then out of memory). Below the
 * limit they work as before (test_config.c has merges; test_big_configs 100k aliases). */
static void test_expansion_limits(void)
{
	struct text t = {0};
	struct dli_context *ctx = (struct dli_context *)&ctx;
	struct dli_error err;

	/* A chain of mappings, each merging the one before: quadratically many copied pairs. The
	 * 1414th holds 1415 pairs, the copies so far 1414 * 1413 / 2 = 998,991 and the nodes read
	 * 4 * 1414 + 2: over 1,000,000 in it. */
	put(&t, "a0: &a0 {k0: 0}\n");
	for (int i = 1; i < 5000; i++)
		put(&t, "a%d: &a%d {<<: *a%d, k%d: %d}\n", i, i, i - 1, i, i);
	CHECK_INT(load(t.s, &ctx, &err), -EINVAL);
	CHECK(ctx == NULL);
	CHECK_CONTAINS(err.message, "'<<' merge keys copy more than 1000000 pairs with the nodes "
				    "read: a config is limited to 1000000 YAML nodes");
	CHECK(err.line > 1000 && err.line < 1500);

	/* One mapping of 20k keys merged into 100 others: 2M copies. */
	t.n = 0;
	put(&t, "base: &b {");
	for (int i = 0; i < 20000; i++)
		put(&t, "%sk%d: 0", i ? ", " : "", i);
	put(&t, "}\nx:\n");
	for (int j = 0; j < 100; j++)
		put(&t, "  m%d: {<<: *b}\n", j);
	ctx = (struct dli_context *)&ctx;
	CHECK_INT(load(t.s, &ctx, &err), -EINVAL);
	CHECK(ctx == NULL);
	CHECK_CONTAINS(err.message, "'<<' merge keys copy more than 1000000 pairs");
	/* m47 (line 50), the 48th: 40,002 nodes of base, 47 * 20,000 copies before it and 4 nodes
	 * a mapping, 980,194; its own copies cross 1,000,000 */
	CHECK_INT(err.line, 50);

	/* 20k sections, each an alias of one of 50 tensors: a million feature instances. */
	aliased_sections(&t, 20000);
	ctx = (struct dli_context *)&ctx;
	CHECK_INT(load(t.s, &ctx, &err), -EINVAL);
	CHECK(ctx == NULL);
	CHECK_CONTAINS(err.message, "<string>:1:1: this mapping stands for more than 1000000 nodes "
				    "with the aliases and '<<' merges in it expanded (20000 entries; "
				    "the largest, 's0', stands for 164: the one read at line 1)");
	CHECK_INT(err.line, 1);

	/* The same with 5k sections (825k nodes) loads. */
	aliased_sections(&t, 5000);
	ctx = NULL;
	int r = load(t.s, &ctx, &err);
	CHECK_INT(r, 0);
	if (r)
		fprintf(stderr, "5k aliased sections: %s\n", err.message);
	dli_destroy(ctx);
	free(t.s);
}

int main(void)
{
	if (!mkdtemp(log_dir)) {
		perror("mkdtemp");
		return 1;
	}
	unsetenv("DLINSPECT_CONFIG");
	unsetenv("DLINSPECT_LOG_LEVEL");
	test_regex_limit_is_an_error();
	test_non_utf8_names_are_selected();
	test_duplicates_in_lists();
	test_big_configs();
	test_limits();
	test_expansion_limits();
	nftw(log_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	return check_exit();
}
