/* The bad-input catalogue (issue 13): every entry of catalogue.txt is one input a careless user or
 * an attacker might give, with the exact error dlinspect must answer. The driver runs each through
 * the real dli_init path (as text and as a file, which must give the same message with the file's
 * name), and through dli_layer_get for entries that fail per layer; `dlinspect check`'s path
 * (dli_context_create without loggers) must refuse it with the same words; and counts them.
 *
 *   run_catalogue CATALOGUE          check every entry; prints "N entries: N as expected"
 *   run_catalogue --print CATALOGUE  print every entry with the error it gets now (to review one)
 *
 * Entry syntax (a line starting with '#' outside a body is a comment):
 *   === config NAME           the YAML body below must be refused by dli_init
 *   === layer NAME LAYER      the body must load, and dli_layer_get(LAYER) must fail
 *   === option NAME           the body must be refused with the option named by NAME set (see below)
 *   === module NAME           the body must be refused with the loader's bad fixture modules as the
 *                             only plugin dir (its path is written "$MODULES" in the error)
 *   <YAML body lines>
 *   --- error
 *   <the error as "FILE:LINE:COL: message", FILE "<string>", or just "message" without a place>
 * A body line "\t" at its start is kept; "\\n" is not interpreted: write real lines. */
#include <errno.h>
#include <stdbool.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>
#include <dlinspect/version.h>

#include "context-private.h"
#include "lifecycle-private.h"

enum kind { KIND_CONFIG, KIND_LAYER, KIND_OPTION, KIND_MODULE };

struct entry {
	enum kind kind;
	char name[128];
	char layer[512];
	char *body;
	char *error;
	int line; /* of the === line, for failures */
};

static char *append(char *s, const char *line)
{
	size_t n = s ? strlen(s) : 0, m = strlen(line);
	char *r = realloc(s, n + m + 1);
	if (!r) {
		perror("realloc");
		exit(2);
	}
	memcpy(r + n, line, m + 1);
	return r;
}

/* The error's message (which starts with the place when there is one), with the machine's paths
 * written as names: the bad fixture dir as "$MODULES", the build tree as "$BUILD", the install's
 * plugin dir as "$INSTALL", `file` (a temporary config) as "<string>", the list of plugin dirs as
 * "$PLUGIN_DIRS" and this dlinspect's ABI version as "$ABI". */
static void format_error(const struct dli_error *err, const char *file, char *out, size_t size)
{
	const char *const from[] = {file, CATALOGUE_MODULE_DIR, CATALOGUE_BUILD_ROOT,
				    CATALOGUE_INSTALL_DIR};
	const char *const to[] = {"<string>", "$MODULES", "$BUILD", "$INSTALL"};
	const char *m = err->message;
	size_t n = 0;
	while (*m && n + 1 < size) {
		size_t i, k = 0;
		for (i = 0; i < sizeof from / sizeof *from; i++)
			if (from[i] && (k = strlen(from[i])) && !strncmp(m, from[i], k))
				break;
		if (i < sizeof from / sizeof *from) {
			n += (size_t)snprintf(out + n, size - n, "%s", to[i]);
			m += k;
		} else {
			out[n++] = *m++;
		}
	}
	out[n < size ? n : size - 1] = '\0';
	/* The plugin dirs depend on the build (the CUDA backend's dir is one where nvcc is found). */
	char *dirs = strstr(out, " in the plugin dirs ");
	if (dirs)
		snprintf(dirs, size - (size_t)(dirs - out), " in the plugin dirs $PLUGIN_DIRS");
	/* This dlinspect's ABI version, which grows. */
	char abi[64], *at;
	snprintf(abi, sizeof abi, "this dlinspect has ABI %d.%d", DLI_ABI_MAJOR, DLI_ABI_MINOR);
	if ((at = strstr(out, abi)) && !at[strlen(abi)])
		snprintf(at, size - (size_t)(at - out), "this dlinspect has ABI $ABI");
}

static char log_dir[] = "/tmp/dli-catalogue-XXXXXX";

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* Options an `option` entry sets, by name: the inputs that are not config text. */
static void set_option(const char *name, struct dli_options *o)
{
	static const char *const one_ext[] = {"../../x.so"};
	static const char *const tensor_names[] = {"act"};
	static const char *const null_ext[] = {"file", NULL};
	if (!strcmp(name, "extension-path"))
		o->extensions = one_ext, o->n_extensions = 1;
	else if (!strcmp(name, "extension-null"))
		o->extensions = null_ext, o->n_extensions = 2;
	else if (!strcmp(name, "declared-tensor-names"))
		o->tensor_names = tensor_names, o->n_tensor_names = 1;
	else if (!strcmp(name, "log-dir-is-a-file"))
		o->log_dir = "/etc/hostname";
	else if (!strcmp(name, "log-dir-under-a-file"))
		o->log_dir = "/etc/hostname/logs";
	else if (!strcmp(name, "negative-rank"))
		o->rank = -1;
	else if (!strcmp(name, "rank-not-below-world-size"))
		o->rank = 4, o->world_size = 4;
	else if (!strcmp(name, "log-level-out-of-range"))
		o->log_level = 99;
	else if (!strcmp(name, "negative-initial-iteration"))
		o->initial_iteration = -5;
}

/* What `dlinspect check` answers for the entry: dli_context_create without loggers, then the layer. */
static void run_check(const struct entry *e, const struct dli_options *run_options, char *got,
		      size_t size)
{
	struct dli_options o = *run_options;
	struct dli_error err;
	struct dli_context *ctx = NULL;
	o.config_yaml = e->body;
	o.config_path = NULL;
	memset(&err, 0, sizeof err);
	got[0] = '\0';
	int r = dli_context_create(&o, false, &ctx, &err);
	if (e->kind == KIND_LAYER && r == 0) {
		struct dli_layer *layer = NULL;
		memset(&err, 0, sizeof err);
		r = dli_layer_get(ctx, e->layer, &layer, &err);
	}
	if (r != 0)
		format_error(&err, NULL, got, size);
	dli_destroy(ctx);
}

/* Runs one entry; writes what it got into `got` ("" when the input was accepted). */
static void run(const struct entry *e, char *got, size_t size, char *got_file, size_t fsize,
		char *got_check, size_t csize)
{
	struct dli_options o;
	struct dli_error err;
	struct dli_context *ctx = NULL;
	dli_options_init(&o);
	o.log_dir = log_dir;
	static const char *const module_dirs[] = {CATALOGUE_MODULE_DIR};
	if (e->kind == KIND_OPTION)
		set_option(e->name, &o);
	if (e->kind == KIND_MODULE)
		o.plugin_dirs = module_dirs, o.n_plugin_dirs = 1;
	o.config_yaml = e->body;
	memset(&err, 0, sizeof err);
	got[0] = got_file[0] = '\0';
	int r = dli_init(&o, &ctx, &err);
	if (e->kind == KIND_LAYER && r == 0) {
		struct dli_layer *layer = NULL;
		memset(&err, 0, sizeof err);
		r = dli_layer_get(ctx, e->layer, &layer, &err);
	}
	if (r != 0)
		format_error(&err, NULL, got, size);
	dli_destroy(ctx);
	ctx = NULL;
	run_check(e, &o, got_check, csize);

	/* The same text from a file: the same message, with the file's name as the place. */
	char path[] = "/tmp/dli-catalogue-config-XXXXXX";
	int fd = mkstemp(path);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f || fputs(e->body, f) == EOF || fclose(f) != 0) {
		perror("writing the config file");
		exit(2);
	}
	o.config_yaml = NULL;
	o.config_path = path;
	memset(&err, 0, sizeof err);
	r = dli_init(&o, &ctx, &err);
	if (e->kind == KIND_LAYER && r == 0) {
		struct dli_layer *layer = NULL;
		memset(&err, 0, sizeof err);
		r = dli_layer_get(ctx, e->layer, &layer, &err);
	}
	if (r != 0)
		format_error(&err, path, got_file, fsize);
	dli_destroy(ctx);
	unlink(path);
}

static int parse(const char *path, struct entry **out)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		perror(path);
		exit(2);
	}
	struct entry *es = NULL;
	int n = 0, lineno = 0;
	char line[8192];
	enum { NONE, BODY, ERROR } state = NONE;
	while (fgets(line, sizeof line, f)) {
		lineno++;
		if (!strncmp(line, "=== ", 4)) {
			char kind[32] = "", name[128] = "", layer[512] = "";
			if (sscanf(line + 4, "%31s %127s %511s", kind, name, layer) < 2) {
				fprintf(stderr, "%s:%d: expected '=== KIND NAME'\n", path, lineno);
				exit(2);
			}
			es = realloc(es, (size_t)(n + 1) * sizeof *es);
			struct entry *e = &es[n++];
			memset(e, 0, sizeof *e);
			e->line = lineno;
			snprintf(e->name, sizeof e->name, "%s", name);
			snprintf(e->layer, sizeof e->layer, "%s", layer);
			if (!strcmp(kind, "config"))
				e->kind = KIND_CONFIG;
			else if (!strcmp(kind, "layer") && layer[0])
				e->kind = KIND_LAYER;
			else if (!strcmp(kind, "option"))
				e->kind = KIND_OPTION;
			else if (!strcmp(kind, "module"))
				e->kind = KIND_MODULE;
			else {
				fprintf(stderr, "%s:%d: unknown entry kind '%s'\n", path, lineno, kind);
				exit(2);
			}
			e->body = append(NULL, "");
			state = BODY;
		} else if (!strncmp(line, "--- error", 9) && state == BODY) {
			state = ERROR;
			es[n - 1].error = append(NULL, "");
		} else if (state == BODY) {
			es[n - 1].body = append(es[n - 1].body, line);
		} else if (state == ERROR) {
			if (line[0] == '\n' || line[0] == '#') {
				state = NONE;
				continue;
			}
			line[strcspn(line, "\n")] = '\0';
			if (es[n - 1].error[0])
				es[n - 1].error = append(es[n - 1].error, "\n");
			es[n - 1].error = append(es[n - 1].error, line);
		} else if (line[0] != '#' && line[0] != '\n') {
			fprintf(stderr, "%s:%d: text outside an entry\n", path, lineno);
			exit(2);
		}
	}
	fclose(f);
	for (int i = 0; i < n; i++)
		if (!es[i].error) {
			fprintf(stderr, "%s:%d: entry '%s' has no '--- error' part\n", path, es[i].line,
				es[i].name);
			exit(2);
		}
	*out = es;
	return n;
}

int main(int argc, char **argv)
{
	int print = argc == 3 && !strcmp(argv[1], "--print");
	if (argc != 2 && !print) {
		fprintf(stderr, "usage: %s [--print] CATALOGUE\n", argv[0]);
		return 2;
	}
	if (!mkdtemp(log_dir)) {
		perror("mkdtemp");
		return 2;
	}
	struct entry *es;
	int n = parse(argv[argc - 1], &es), ok = 0;
	for (int i = 0; i < n; i++) {
		const struct entry *e = &es[i];
		char got[4096], got_file[4096], got_check[4096], want_check[4096];
		run(e, got, sizeof got, got_file, sizeof got_file, got_check, sizeof got_check);
		/* `dlinspect check` refuses what a run refuses, with the same words, except: loggers are
		 * validated, not created, and the log dir (a run's matter) is not looked at. */
		const char *create = strstr(got, ": could not create the logger: ");
		if (create)
			snprintf(want_check, sizeof want_check, "%.*s: invalid logger parameters: %s",
				 (int)(create - got), got, create + strlen(": could not create the logger: "));
		else
			snprintf(want_check, sizeof want_check, "%s", got);
		bool check_exempt = e->kind == KIND_OPTION || strstr(got, "log dir '");
		if (print) {
			static const char *const kinds[] = {"config", "layer", "option", "module"};
			printf("=== %s %s%s%s\n%s--- error\n%s\n", kinds[e->kind], e->name,
			       e->layer[0] ? " " : "", e->layer, e->body, got[0] ? got : "(accepted)");
			if (strcmp(got, got_file))
				printf("# from a file: %s\n", got_file);
			printf("\n");
			continue;
		}
		int good = 1;
		if (!got[0]) {
			fprintf(stderr, "%s (line %d): accepted, expected: %s\n", e->name, e->line, e->error);
			good = 0;
		} else if (strcmp(got, e->error)) {
			fprintf(stderr, "%s (line %d):\n  got:      %s\n  expected: %s\n", e->name, e->line,
				got, e->error);
			good = 0;
		} else if (!check_exempt && strcmp(got_check, want_check)) {
			fprintf(stderr, "%s (line %d): dlinspect check answers otherwise:\n  run:   %s\n  check: %s\n",
				e->name, e->line, got, got_check[0] ? got_check : "(accepted)");
			good = 0;
		} else if (strcmp(got, got_file)) {
			fprintf(stderr, "%s (line %d): from a file the error differs:\n  text: %s\n  file: %s\n",
				e->name, e->line, got, got_file);
			good = 0;
		}
		ok += good;
	}
	for (int i = 0; i < n; i++) {
		free(es[i].body);
		free(es[i].error);
	}
	free(es);
	nftw(log_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	if (!print)
		printf("%d entries: %d as expected, %d not\n", n, ok, n - ok);
	return print || ok == n ? 0 : 1;
}
