/* Layer selection: which layer names a `layers:` block selects, layer numbers, range parsing, bad
 * regexes, and concurrent matching. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "select-private.h"

/* A `layers:` block as a config would give it; NULL means the key is absent. Lists end with NULL. */
struct spec {
	const char *regex;
	const char *const *exact;
	const char *const *numbers; /* "all", "7", "2-5" */
	const char *const *types;   /* "all" or substrings */
};

#define LIST(...) ((const char *const[]){__VA_ARGS__, NULL})

static const struct spec re_fc1 = {.regex = "fc1"};
static const struct spec re_fc1_anchored = {.regex = "fc1$"};
static const struct spec re_fc1_or_fc2 = {.regex = ".*(fc1|fc2)"};
static const struct spec exact_fc1 = {.exact = LIST("x.fc1")};
static const struct spec exact_and_regex = {.exact = LIST("proj"), .regex = "fc2$"};
static const struct spec num_7 = {.numbers = LIST("7")};
static const struct spec num_3 = {.numbers = LIST("3")};
static const struct spec num_2_5 = {.numbers = LIST("2-5")};
static const struct spec num_multi = {.numbers = LIST("0", "10 - 12")};
static const struct spec num_all = {.numbers = LIST("all")};
static const struct spec types_qkv = {.types = LIST("qkv")};
static const struct spec types_fc = {.types = LIST("fc")};
static const struct spec types_all = {.types = LIST("all")};
static const struct spec num_and_types = {.numbers = LIST("2-5"), .types = LIST("fc2", "qkv")};
static const struct spec all_and_all = {.numbers = LIST("all"), .types = LIST("all")};
static const struct spec regex_and_numbers = {.regex = "fc1", .numbers = LIST("3")};
static const struct spec empty = {0};

struct row {
	const struct spec *spec;
	const char *name;
	bool selected;
	int line;
};

#define ROW(spec, name, sel) {&(spec), (name), (sel), __LINE__}

static const struct row rows[] = {
	/* Search semantics, like Python's re.search. */
	ROW(re_fc1, "x.fc1", true),
	ROW(re_fc1, "x.fc10", true),
	ROW(re_fc1, "fc12", true),
	ROW(re_fc1, "model.layers.0.mlp.fc10", true),
	ROW(re_fc1, "x.fc2", false),
	ROW(re_fc1, "FC1", false),
	ROW(re_fc1_anchored, "x.fc1", true),
	ROW(re_fc1_anchored, "x.fc10", false),
	ROW(re_fc1_or_fc2, "model.layers.1.mlp.fc1", true),
	ROW(re_fc1_or_fc2, "model.layers.1.mlp.fc2", true),
	ROW(re_fc1_or_fc2, "model.layers.1.self_attn.qkv", false),
	/* Exact names are whole-string. */
	ROW(exact_fc1, "x.fc1", true),
	ROW(exact_fc1, "x.fc1.extra", false),
	ROW(exact_fc1, "y.x.fc1", false),
	ROW(exact_fc1, "x.fc", false),
	/* Exact names OR regex. */
	ROW(exact_and_regex, "proj", true),
	ROW(exact_and_regex, "a.proj", false),
	ROW(exact_and_regex, "a.fc2", true),
	/* Layer numbers. */
	ROW(num_7, "Layer_7", true),
	ROW(num_7, "Layer_8", false),
	ROW(num_7, "block7_fc2", true),
	ROW(num_7, "layers.7.fc7", true),
	ROW(num_7, "layers.07.fc1", true),
	ROW(num_7, "fc7", false),
	ROW(num_7, "x.fc17", true), /* nvdlfw_inspect finds 7 in it */
	ROW(num_3, "model.layers.3.mlp.fc2", true),
	ROW(num_3, "model.layers.2.mlp.fc3", false),
	ROW(num_3, "encoder3_block5", false),
	ROW(num_2_5, "layers.1.fc1", false),
	ROW(num_2_5, "layers.2.fc1", true),
	ROW(num_2_5, "layers.3.fc1", true),
	ROW(num_2_5, "layers.5.fc1", true),
	ROW(num_2_5, "layers.6.fc1", false),
	ROW(num_2_5, "fc1", false),
	ROW(num_2_5, "output_proj", false),
	ROW(num_multi, "layers.0.qkv", true),
	ROW(num_multi, "layers.9.qkv", false),
	ROW(num_multi, "layers.10.qkv", true),
	ROW(num_multi, "layers.12.qkv", true),
	ROW(num_multi, "layers.13.qkv", false),
	ROW(num_all, "layers.3.fc1", true),
	ROW(num_all, "output_proj", true),
	ROW(num_all, "encoder3_block5", true),
	/* Layer types are substrings of the whole name. */
	ROW(types_qkv, "model.layers.0.self_attn.qkv", true),
	ROW(types_qkv, "model.layers.0.self_attn.qkv_proj", true),
	ROW(types_qkv, "model.layers.0.mlp.fc1", false),
	ROW(types_fc, "model.layers.0.mlp.fc1", true),
	ROW(types_fc, "model.layers.0.mlp.fc2", true),
	ROW(types_fc, "model.layers.0.self_attn.qkv", false),
	ROW(types_all, "anything", true),
	/* Numbers AND types. */
	ROW(num_and_types, "layers.3.mlp.fc2", true),
	ROW(num_and_types, "layers.3.attn.qkv", true),
	ROW(num_and_types, "layers.3.mlp.fc1", false),
	ROW(num_and_types, "layers.6.mlp.fc2", false),
	ROW(num_and_types, "head.fc2", false),
	ROW(all_and_all, "head", true),
	/* The regex alone decides when present, even with layer_numbers. */
	ROW(regex_and_numbers, "layers.9.fc1", true),
	ROW(regex_and_numbers, "layers.3.fc2", false),
	/* No key at all selects nothing. */
	ROW(empty, "layers.3.fc1", false),
};

#define N_ROWS (sizeof(rows) / sizeof(rows[0]))

static char **copy_list(const char *const *list, size_t *n)
{
	size_t count = 0;
	char **out;

	while (list[count])
		count++;
	out = calloc(count ? count : 1, sizeof(*out));
	if (!out)
		abort();
	for (size_t i = 0; i < count; i++) {
		out[i] = strdup(list[i]);
		if (!out[i])
			abort();
	}
	*n = count;
	return out;
}

/* Fills a selector the way config.c does: owned copies, ranges through dli_range_parse. */
static void build(struct dli_selector *s, const struct spec *spec)
{
	char msg[256];
	size_t off;

	memset(s, 0, sizeof(*s));
	if (spec->regex)
		CHECK_INT(dli_selector_set_regex(s, spec->regex, msg, sizeof(msg), &off), 0);
	if (spec->exact) {
		s->has_exact = true;
		s->exact = copy_list(spec->exact, &s->n_exact);
	}
	if (spec->numbers) {
		size_t n = 0;

		s->has_numbers = true;
		while (spec->numbers[n])
			n++;
		s->numbers = calloc(n ? n : 1, sizeof(*s->numbers));
		if (!s->numbers)
			abort();
		for (size_t i = 0; i < n; i++) {
			if (strcmp(spec->numbers[i], "all") == 0) {
				s->numbers_all = true;
				continue;
			}
			CHECK_INT(dli_range_parse(spec->numbers[i], &s->numbers[s->n_numbers], msg,
						  sizeof(msg)),
				  0);
			s->n_numbers++;
		}
	}
	if (spec->types) {
		s->has_types = true;
		if (strcmp(spec->types[0], "all") == 0)
			s->types_all = true;
		else
			s->types = copy_list(spec->types, &s->n_types);
	}
}

static void test_selector_table(void)
{
	for (size_t i = 0; i < N_ROWS; i++) {
		struct dli_selector s;
		bool got;

		build(&s, rows[i].spec);
		got = dli_selector_match(&s, rows[i].name, NULL, 0);
		CHECK(got == rows[i].selected);
		if (got != rows[i].selected)
			fprintf(stderr, "  row at line %d: '%s' %s, expected %s\n", rows[i].line,
				rows[i].name, got ? "selected" : "not selected",
				rows[i].selected ? "selected" : "not selected");
		dli_selector_finish(&s);
		CHECK(s.regex == NULL && s.pattern == NULL && s.exact == NULL && s.numbers == NULL &&
		      s.types == NULL && !s.has_exact && !s.has_numbers && !s.has_types);
	}
}

static void test_layer_number(void)
{
	static const struct {
		const char *name;
		int rc;
		int64_t number;
	} cases[] = {
		{"model.decoder.layers.4.mlp.fc1", 0, 4},
		{"layers.12.fc2", 0, 12},
		{"model.layers.3.mlp.fc2", 0, 3},
		{"layers.04.fc1", 0, 4},
		{"7", 0, 7},
		{"0.fc1", 0, 0},
		{"a.3b.5.c", 0, 5},
		{"Layer_7", 0, 7},
		{"block7_fc2", 0, 7},
		{"Layer_007", 0, 7},
		{"FC3", 0, 3},
		{"fc1", -ENOENT, 0},
		/* nvdlfw_inspect's (?<!fc)\d+ skips only the first digit after "fc". */
		{"x.fc10", 0, 0},
		{"model.fc12", 0, 2},
		{"fc123", 0, 23},
		{"block7_fc12", -ENOENT, 0},
		{"encoder3_block5", -ENOENT, 0},
		{"output_proj", -ENOENT, 0},
		{"", -ENOENT, 0},
		{"..", -ENOENT, 0},
		{"layers.99999999999999999999.fc1", -ENOENT, 0},
		{"Layer_99999999999999999999", -ENOENT, 0},
		{"layers.9223372036854775807", 0, INT64_MAX},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t n = -1;
		int rc = dli_layer_number(cases[i].name, &n);

		CHECK_INT(rc, cases[i].rc);
		if (rc != cases[i].rc)
			fprintf(stderr, "  name '%s'\n", cases[i].name);
		if (cases[i].rc == 0)
			CHECK_INT(n, cases[i].number);
		else
			CHECK_INT(n, -1);
	}
	CHECK_INT(dli_layer_number(NULL, &(int64_t){0}), -ENOENT);
}

static void test_range_parse(void)
{
	static const struct {
		const char *text;
		int64_t first, second;
	} good[] = {
		{"7", 7, 7}, {"0", 0, 0}, {"2-5", 2, 5}, {"2 - 5", 2, 5}, {" 3-3 ", 3, 3},
		{"\t10-\t12", 10, 12}, {"007", 7, 7}, {"9223372036854775807", INT64_MAX, INT64_MAX},
	};
	static const struct {
		const char *text;
		const char *why; /* key part of the message besides the "expected" text */
	} bad[] = {
		{"", "got ''"},
		{"   ", "got '   '"},
		{"-1", "got '-1'"},
		{"5-2", "got '5-2' (start after end)"},
		{"a-b", "got 'a-b'"},
		{"1-2-3", "got '1-2-3'"},
		{"1-", "got '1-'"},
		{"-", "got '-'"},
		{"1 2", "got '1 2'"},
		{"+3", "got '+3'"},
		{"all", "got 'all'"},
		{"9223372036854775808", "(number too large)"},
		{"1-99999999999999999999", "(number too large)"},
	};

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct dli_int_pair p = {-1, -1};
		char msg[256] = "";

		CHECK_INT(dli_range_parse(good[i].text, &p, msg, sizeof(msg)), 0);
		CHECK_INT(p.first, good[i].first);
		CHECK_INT(p.second, good[i].second);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct dli_int_pair p = {-1, -1};
		char msg[256] = "";

		CHECK_INT(dli_range_parse(bad[i].text, &p, msg, sizeof(msg)), -EINVAL);
		CHECK_CONTAINS(msg, "expected a layer number or an inclusive range 'a-b' (a <= b)");
		CHECK_CONTAINS(msg, bad[i].why);
		CHECK(p.first == -1 && p.second == -1);
	}
	{
		char msg[256];

		dli_range_parse("5-2", &(struct dli_int_pair){0}, msg, sizeof(msg));
		CHECK_STR(msg, "expected a layer number or an inclusive range 'a-b' (a <= b), got '5-2' "
			       "(start after end)");
	}
	/* A short message buffer is truncated, never overrun; no buffer at all is allowed. */
	{
		char small[8];

		memset(small, 'x', sizeof(small));
		CHECK_INT(dli_range_parse("x", &(struct dli_int_pair){0}, small, sizeof(small)), -EINVAL);
		CHECK_INT(strlen(small), sizeof(small) - 1);
		CHECK_INT(dli_range_parse("x", &(struct dli_int_pair){0}, NULL, 0), -EINVAL);
	}
}

static void test_bad_regex(void)
{
	struct dli_selector s = {0};
	char msg[256] = "";
	size_t off = 999;

	CHECK_INT(dli_selector_set_regex(&s, "fc(1", msg, sizeof(msg), &off), -EINVAL);
	CHECK_CONTAINS(msg, "missing closing parenthesis");
	CHECK_INT(off, 4);
	CHECK(s.regex == NULL && s.pattern == NULL);

	off = 999;
	CHECK_INT(dli_selector_set_regex(&s, "a[b", msg, sizeof(msg), &off), -EINVAL);
	CHECK_CONTAINS(msg, "missing terminating ]");
	CHECK_INT(off, 3);

	/* Invalid UTF-8 in the pattern is reported, not matched bytewise. */
	CHECK_INT(dli_selector_set_regex(&s, "fc\xff", msg, sizeof(msg), &off), -EINVAL);
	CHECK_CONTAINS(msg, "UTF-8");

	/* A failed set keeps the pattern that was there; a good one replaces it. */
	CHECK_INT(dli_selector_set_regex(&s, "fc1", msg, sizeof(msg), &off), 0);
	CHECK_INT(dli_selector_set_regex(&s, "(", msg, sizeof(msg), &off), -EINVAL);
	CHECK_STR(s.pattern, "fc1");
	CHECK(dli_selector_match(&s, "x.fc1", NULL, 0));
	CHECK_INT(dli_selector_set_regex(&s, "qkv", msg, sizeof(msg), &off), 0);
	CHECK_STR(s.pattern, "qkv");
	CHECK(!dli_selector_match(&s, "x.fc1", NULL, 0));
	CHECK(dli_selector_match(&s, "x.qkv", NULL, 0));

	/* UTF: '.' is one character, not one byte. */
	CHECK_INT(dli_selector_set_regex(&s, "^l\\.\\d\\.é$", msg, sizeof(msg), &off), 0);
	CHECK(dli_selector_match(&s, "l.1.é", NULL, 0));
	CHECK_INT(dli_selector_set_regex(&s, "^x.$", msg, sizeof(msg), &off), 0);
	CHECK(dli_selector_match(&s, "xé", NULL, 0));
	CHECK_INT(dli_selector_match(&s, "x\xff", NULL, 0), 0); /* an invalid byte matches no '.' */

	dli_selector_finish(&s);
	dli_selector_finish(&s); /* a zeroed selector is accepted */
	CHECK(s.regex == NULL && s.pattern == NULL);
}

/* Patterns mean what they mean to Python's re: `{,n}` is `{0,n}` (PCRE2 10.42 reads it as text),
 * and \w, \d, \s, \b are Unicode-aware as in a str pattern. */
static void test_python_dialect(void)
{
	static const struct {
		const char *regex, *name;
		int selected;
	} cases[] = {
		{"layers\\.{,1}1", "model.layers.1", 1},
		{"layers\\.{,1}1", "model.layers1", 1},
		{"layers\\.{,1}1", "model.layers..1", 0},
		{"^a{,}b$", "aaab", 1},
		{"^a{,2}$", "aaa", 0},
		{"^a\\{,2}$", "a{,2}", 1}, /* escaped: text */
		{"^[{,]2}$", ",2}", 1},      /* in a class: text */
		{"^[]{,]2}$", "{2}", 1},     /* a ']' first in a class is a member */
		{"^a{,x}$", "a{,x}", 1},     /* not a quantifier in Python either */
		{"^\\w+\\.fc1$", "módulo.fc1", 1},
		{"^layer_\\d$", "layer_\u0663", 1}, /* ARABIC-INDIC DIGIT THREE */
		{"\\bfc1$", "x.ñfc1", 0},
		{"^\\w+\\.fc1$", "m\xf3" "dulo.fc1", 0}, /* not UTF-8: the byte is no \w, and no error */
		{"fc1$", "m\xf3" "dulo.fc1", 1},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		struct dli_selector s = {0};
		char msg[256] = "";
		size_t off = 0;
		CHECK_INT(dli_selector_set_regex(&s, cases[i].regex, msg, sizeof msg, &off), 0);
		int got = dli_selector_match(&s, cases[i].name, msg, sizeof msg);
		CHECK_INT(got, cases[i].selected);
		if (got != cases[i].selected)
			fprintf(stderr, "  regex '%s', name '%s'\n", cases[i].regex, cases[i].name);
		dli_selector_finish(&s);
	}
	/* An error's offset is in the pattern as written, before the 0s put in. */
	struct dli_selector s = {0};
	char msg[256] = "";
	size_t off = 999;
	CHECK_INT(dli_selector_set_regex(&s, "a{,2}b{,3}(", msg, sizeof msg, &off), -EINVAL);
	CHECK_CONTAINS(msg, "missing closing parenthesis");
	CHECK_INT(off, 11);
	CHECK_INT(dli_selector_set_regex(&s, "{,1}x", msg, sizeof msg, &off), -EINVAL);
	CHECK_CONTAINS(msg, "quantifier does not follow a repeatable item");
	CHECK_INT(off, 3);
	dli_selector_finish(&s);
}

/* ---- Concurrent matching ---- */

#define N_THREADS 4
#define THREAD_ROUNDS 300

static struct dli_selector shared[N_ROWS];

/* PCRE2's match limit (10 million backtracks by default) stops `(a|a)+b` after 2^24 ways to
 * split 24 a's; Python's re.search goes on and finds the 'c'. "Could not tell" must be an error,
 * never "not selected". */
static void test_match_limit_is_an_error(void)
{
	struct dli_selector s = {0};
	char msg[128] = "", off_msg[128];
	size_t off;
	char name[32];

	memset(name, 'a', 24);
	strcpy(name + 24, "c");
	CHECK_INT(dli_selector_set_regex(&s, "(a|a)+b|c", off_msg, sizeof off_msg, &off), 0);
	CHECK_INT(dli_selector_match(&s, name, msg, sizeof msg), -EINVAL);
	CHECK_CONTAINS(msg, "limit");
	/* Short names stay well under the limit and give the answer re.search gives. */
	CHECK_INT(dli_selector_match(&s, "aaac", msg, sizeof msg), 1);
	CHECK_INT(dli_selector_match(&s, "aaa", msg, sizeof msg), 0);
	/* exact_layer_names still decide first: no regex runs for a listed name. */
	s.exact = calloc(1, sizeof *s.exact);
	s.exact[0] = strdup(name);
	s.n_exact = 1;
	s.has_exact = true;
	CHECK_INT(dli_selector_match(&s, name, msg, sizeof msg), 1);
	dli_selector_finish(&s);
}

/* A C host may pass names that are not UTF-8: the regex still sees their valid parts (an invalid
 * byte matches nothing), as exact names and layer types (bytes) do. */
static void test_invalid_utf8_names_are_matched(void)
{
	struct dli_selector s = {0};
	char msg[128];
	size_t off;

	CHECK_INT(dli_selector_set_regex(&s, "fc1", msg, sizeof msg, &off), 0);
	CHECK_INT(dli_selector_match(&s, "model.\xff\xfe.fc1", msg, sizeof msg), 1);
	CHECK_INT(dli_selector_match(&s, "\xc3(.fc2", msg, sizeof msg), 0);
	CHECK_INT(dli_selector_set_regex(&s, "^layers\\.\\d+\\.", msg, sizeof msg, &off), 0);
	CHECK_INT(dli_selector_match(&s, "layers.3.\xe9t\xe9", msg, sizeof msg), 1); /* Latin-1 */
	CHECK_INT(dli_selector_set_regex(&s, ".*", msg, sizeof msg, &off), 0);
	CHECK_INT(dli_selector_match(&s, "\x80", msg, sizeof msg), 1);
	dli_selector_finish(&s);
}

static void *match_thread(void *arg)
{
	size_t start = (size_t)(uintptr_t)arg;
	size_t wrong = 0;

	for (int round = 0; round < THREAD_ROUNDS; round++)
		for (size_t k = 0; k < N_ROWS; k++) {
			/* Each thread walks the table from a different place so they collide on selectors. */
			size_t i = (k + start * 7) % N_ROWS;

			if (dli_selector_match(&shared[i], rows[i].name, NULL, 0) != rows[i].selected)
				wrong++;
		}
	return (void *)(uintptr_t)wrong;
}

static void test_threads(void)
{
	pthread_t th[N_THREADS];

	for (size_t i = 0; i < N_ROWS; i++)
		build(&shared[i], rows[i].spec);
	for (size_t t = 0; t < N_THREADS; t++)
		CHECK_INT(pthread_create(&th[t], NULL, match_thread, (void *)(uintptr_t)t), 0);
	for (size_t t = 0; t < N_THREADS; t++) {
		void *wrong = NULL;

		CHECK_INT(pthread_join(th[t], &wrong), 0);
		CHECK_INT((uintptr_t)wrong, 0);
	}
	for (size_t i = 0; i < N_ROWS; i++)
		dli_selector_finish(&shared[i]);
}

int main(void)
{
	test_selector_table();
	test_layer_number();
	test_range_parse();
	test_bad_regex();
	test_python_dialect();
	test_match_limit_is_an_error();
	test_invalid_utf8_names_are_matched();
	test_threads();
	return check_exit();
}
