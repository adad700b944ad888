/* Tests of core/loader.c: finding modules by path, name and namespace, search order, and the exact
 * reasons given when a module cannot be loaded. Fixture modules come from tests/loader/fixtures. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "loader-private.h"

static const char *const good_dir[] = {LOADER_GOOD_DIR};
static const char *const bad_dir[] = {LOADER_BAD_DIR};

static void stub_log(struct dli_context *ctx, enum dli_log_level level, const char *fmt, ...)
{
}

static int64_t stub_iteration(const struct dli_context *ctx)
{
	return 0;
}

static const struct dli_host host = {
	.size = sizeof(struct dli_host),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.log = stub_log,
	.iteration = stub_iteration,
};

/* A loader as dli_init makes it: paths in `extensions` refused. */
static struct dli_loader *loader_strict(const char *const *dirs, size_t n)
{
	struct dli_loader *loader = NULL;
	struct dli_error err = {0};

	CHECK_INT(dli_loader_create(&host, dirs, n, &loader, &err), 0);
	CHECK(loader != NULL);
	return loader;
}

/* Most tests below load fixtures by path too: a loader whose host allowed it. */
static struct dli_loader *loader_new(const char *const *dirs, size_t n)
{
	struct dli_loader *loader = loader_strict(dirs, n);

	if (loader)
		dli_loader_allow_paths(loader, true);
	return loader;
}

/* Loads `entry` expecting failure with `code`; returns the message for the caller to check. */
static const char *load_fails(const char *const *dirs, size_t n, const char *entry, int code)
{
	static struct dli_error err;
	struct dli_loader *loader = loader_new(dirs, n);

	memset(&err, 0, sizeof(err));
	CHECK_INT(dli_loader_load(loader, entry, &err), code);
	CHECK_INT(err.code, code);
	/* A failed load leaves nothing behind. */
	CHECK_INT(dli_loader_count(loader), 0);
	dli_loader_destroy(loader);
	return err.message;
}

static long find_module(const struct dli_loader *loader, const char *name)
{
	for (size_t i = 0; i < dli_loader_count(loader); i++)
		if (strcmp(dli_loader_module(loader, i)->name, name) == 0)
			return (long)i;
	return -1;
}

static void test_load_by_name_gives_a_usable_module(void)
{
	struct dli_loader *loader = loader_new(good_dir, 1);
	struct dli_error err = {0};

	CHECK_INT(dli_loader_load(loader, "good", &err), 0);
	CHECK_INT(dli_loader_count(loader), 1);
	const struct dli_module *m = dli_loader_module(loader, 0);
	CHECK_STR(m->name, "good");
	CHECK_STR(m->ns, "fixture_ns");
	CHECK_STR(m->doc, "good fixture, first dir");
	CHECK_STR(dli_loader_path(loader, 0), LOADER_GOOD_DIR "/good.so");
	CHECK_INT(m->n_features, 1);
	CHECK_STR(m->features[0]->name, "GoodFeature");
	CHECK_INT(m->n_loggers, 1);
	CHECK_STR(m->loggers[0]->name, "goodlog");

	/* The module's code runs: its create works through the ops table. */
	struct dli_feature_create_args args = {.size = sizeof(args), .host = &host};
	void *instance = NULL;
	CHECK_INT(m->features[0]->ops->create(&args, &instance, &err), 0);
	CHECK(instance != NULL);
	CHECK(dli_loader_module(loader, 1) == NULL);
	CHECK(dli_loader_path(loader, 1) == NULL);
	dli_loader_destroy(loader);
}

static void test_loading_twice_keeps_one_module(void)
{
	struct dli_loader *loader = loader_new(good_dir, 1);
	struct dli_error err = {0};

	CHECK_INT(dli_loader_load(loader, "good", &err), 0);
	CHECK_INT(dli_loader_load(loader, "good", &err), 0);
	CHECK_INT(dli_loader_load(loader, "good.so", &err), 0);
	CHECK_INT(dli_loader_load(loader, LOADER_GOOD_DIR "/good.so", &err), 0);
	/* Another spelling of the same file. */
	CHECK_INT(dli_loader_load(loader, LOADER_GOOD_DIR "/../fixtures/./good.so", &err), 0);
	CHECK_INT(dli_loader_count(loader), 1);
	/* Same name from another dir: the loaded one stays. */
	CHECK_INT(dli_loader_load(loader, LOADER_SECOND_DIR "/good.so", &err), 0);
	CHECK_INT(dli_loader_count(loader), 1);
	CHECK_STR(dli_loader_module(loader, 0)->doc, "good fixture, first dir");
	dli_loader_destroy(loader);
}

static void test_load_by_path_needs_no_search_dir(void)
{
	struct dli_loader *loader = loader_new(NULL, 0);
	struct dli_error err = {0};

	CHECK_INT(dli_loader_load(loader, LOADER_SECOND_DIR "/good.so", &err), 0);
	CHECK_INT(dli_loader_count(loader), 1);
	CHECK_STR(dli_loader_module(loader, 0)->doc, "good fixture, second dir");
	CHECK_STR(dli_loader_path(loader, 0), LOADER_SECOND_DIR "/good.so");
	dli_loader_destroy(loader);

	const char *msg = load_fails(NULL, 0, LOADER_GOOD_DIR "/missing.so", -ENOENT);
	CHECK_CONTAINS(msg, LOADER_GOOD_DIR "/missing.so");
	CHECK_CONTAINS(msg, "No such file");
	msg = load_fails(NULL, 0, LOADER_GOOD_DIR "/dir.so", -EINVAL);
	CHECK_CONTAINS(msg, "dir.so: not a regular file");
	msg = load_fails(NULL, 0, "./good.c", -EINVAL);
	CHECK_CONTAINS(msg, "./good.c is not a module file");
	msg = load_fails(good_dir, 1, "", -EINVAL);
	CHECK_CONTAINS(msg, "empty extension name");
}

static void test_namespace_loads_every_module_declaring_it(void)
{
	struct dli_loader *loader = loader_new(good_dir, 1);
	struct dli_error err = {0};

	CHECK_INT(dli_loader_load(loader, "fixture_ns", &err), 0);
	CHECK_INT(dli_loader_count(loader), 2);
	CHECK(find_module(loader, "good") >= 0);
	CHECK(find_module(loader, "good2") >= 0);
	/* Opened to read its namespace, then closed again. */
	CHECK(find_module(loader, "create_fails") < 0);
	/* Again: nothing new. */
	CHECK_INT(dli_loader_load(loader, "fixture_ns", &err), 0);
	CHECK_INT(dli_loader_count(loader), 2);
	dli_loader_destroy(loader);

	/* A module already loaded counts for its namespace. */
	loader = loader_new(NULL, 0);
	CHECK_INT(dli_loader_load(loader, LOADER_GOOD_DIR "/good.so", &err), 0);
	CHECK_INT(dli_loader_load(loader, "fixture_ns", &err), 0);
	CHECK_INT(dli_loader_count(loader), 1);
	dli_loader_destroy(loader);
}

/* A namespace's modules are the files whose note names it: bad/ holds a dozen broken files, and
 * only the one whose note says fixture_ns is opened, and its failure fails the entry. */
static void test_namespace_scan_stops_at_a_broken_module(void)
{
	const char *dirs[] = {LOADER_BAD_DIR, LOADER_GOOD_DIR};
	const char *msg = load_fails(dirs, 2, "fixture_ns", -ECANCELED);

	CHECK_CONTAINS(msg, "no module fixture_ns.so, so 'fixture_ns' was taken as a namespace; "
			    "while looking for it: ");
	CHECK_CONTAINS(msg, "module 'ns_returns_null' (" LOADER_BAD_DIR "/ns_returns_null.so)");
}

static void test_first_dir_in_search_order_wins(void)
{
	const char *second_first[] = {LOADER_SECOND_DIR, LOADER_GOOD_DIR};
	const char *good_first[] = {LOADER_GOOD_DIR, LOADER_SECOND_DIR};
	struct dli_error err = {0};

	struct dli_loader *loader = loader_new(second_first, 2);
	CHECK_INT(dli_loader_load(loader, "good", &err), 0);
	CHECK_INT(dli_loader_count(loader), 1);
	CHECK_STR(dli_loader_module(loader, 0)->doc, "good fixture, second dir");
	dli_loader_destroy(loader);

	loader = loader_new(second_first, 2);
	CHECK_INT(dli_loader_load(loader, "fixture_ns", &err), 0);
	CHECK_INT(dli_loader_count(loader), 2);
	CHECK_STR(dli_loader_module(loader, (size_t)find_module(loader, "good"))->doc,
		  "good fixture, second dir");
	dli_loader_destroy(loader);

	loader = loader_new(good_first, 2);
	CHECK_INT(dli_loader_load_all(loader, &err), 0);
	CHECK_INT(dli_loader_count(loader), 3);
	long good = find_module(loader, "good");
	CHECK(good >= 0);
	if (good >= 0)
		CHECK_STR(dli_loader_module(loader, (size_t)good)->doc, "good fixture, first dir");
	dli_loader_destroy(loader);
}

static void test_load_all_takes_every_module_of_a_dir(void)
{
	struct dli_loader *loader = loader_new(good_dir, 1);
	struct dli_error err = {0};

	CHECK_INT(dli_loader_load_all(loader, &err), 0);
	/* good, good2, create_fails; dir.so is a directory and is skipped. */
	CHECK_INT(dli_loader_count(loader), 3);
	CHECK(find_module(loader, "good") >= 0);
	CHECK(find_module(loader, "good2") >= 0);
	CHECK(find_module(loader, "create_fails") >= 0);
	CHECK(find_module(loader, "dir") < 0);
	/* In name order, whatever readdir returned. */
	CHECK_STR(dli_loader_module(loader, 0)->name, "create_fails");
	CHECK_STR(dli_loader_module(loader, 1)->name, "good");
	CHECK_STR(dli_loader_module(loader, 2)->name, "good2");
	/* Everything is loaded already. */
	CHECK_INT(dli_loader_load_all(loader, &err), 0);
	CHECK_INT(dli_loader_load(loader, "fixture_ns", &err), 0);
	CHECK_INT(dli_loader_count(loader), 3);
	dli_loader_destroy(loader);

	/* A missing dir is skipped, the others still searched. */
	const char *dirs[] = {LOADER_GOOD_DIR "/no-such-dir", "", LOADER_GOOD_DIR};
	loader = loader_new(dirs, 3);
	CHECK_INT(dli_loader_load_all(loader, &err), 0);
	CHECK_INT(dli_loader_count(loader), 3);
	dli_loader_destroy(loader);

	/* A broken module fails load_all: nothing is silently skipped. */
	loader = loader_new(bad_dir, 1);
	CHECK(dli_loader_load_all(loader, &err) < 0);
	CHECK_CONTAINS(err.message, LOADER_BAD_DIR "/");
	dli_loader_destroy(loader);
}

static void test_only_regular_files_are_modules(void)
{
	char tmp[] = "/tmp/dli-loader-XXXXXX";
	char path[sizeof(tmp) + 32];
	struct dli_error err = {0};

	if (!mkdtemp(tmp)) {
		CHECK(!"mkdtemp");
		return;
	}
	snprintf(path, sizeof(path), "%s/dir.so", tmp);
	CHECK_INT(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/fifo.so", tmp);
	CHECK_INT(mkfifo(path, 0600), 0);
	/* A symlink to a module is a module (named after the link). */
	snprintf(path, sizeof(path), "%s/good.so", tmp);
	CHECK_INT(symlink(LOADER_GOOD_DIR "/good.so", path), 0);
	snprintf(path, sizeof(path), "%s/.so", tmp);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (f)
		fclose(f);

	const char *dirs[] = {tmp};
	struct dli_loader *loader = loader_new(dirs, 1);
	CHECK_INT(dli_loader_load_all(loader, &err), 0);
	CHECK_INT(dli_loader_count(loader), 1);
	CHECK(find_module(loader, "good") >= 0);
	/* Not found, and the message says which file of that name was passed over, and why. */
	char want[sizeof(tmp) + 128];
	CHECK_INT(dli_loader_load(loader, "fifo", &err), -ENOENT);
	snprintf(want, sizeof(want), "no module fifo.so (%s/fifo.so is a FIFO, which is never loaded)",
		 tmp);
	CHECK_CONTAINS(err.message, want);
	CHECK_INT(dli_loader_load(loader, "dir", &err), -ENOENT);
	snprintf(want, sizeof(want), "(%s/dir.so is a directory, which is never loaded)", tmp);
	CHECK_CONTAINS(err.message, want);
	snprintf(path, sizeof(path), "%s/gone.so", tmp);
	CHECK_INT(symlink("nothing-here.so", path), 0);
	CHECK_INT(dli_loader_load(loader, "gone", &err), -ENOENT);
	snprintf(want, sizeof(want), "(%s/gone.so is a dangling symbolic link or a loop of links, "
		 "which is never loaded)", tmp);
	CHECK_CONTAINS(err.message, want);
	CHECK_INT(dli_loader_count(loader), 1);
	dli_loader_destroy(loader);

	const char *names[] = {"dir.so", "fifo.so", "good.so", ".so", "gone.so"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", tmp, names[i]);
		CHECK_INT(i == 0 ? rmdir(path) : unlink(path), 0);
	}
	CHECK_INT(rmdir(tmp), 0);
}

static void test_unknown_name_says_where_and_suggests(void)
{
	const char *msg = load_fails(good_dir, 1, "goood", -ENOENT);
	CHECK_CONTAINS(msg, "extension 'goood' not found");
	CHECK_CONTAINS(msg, "no module goood.so");
	CHECK_CONTAINS(msg, LOADER_GOOD_DIR);
	CHECK_CONTAINS(msg, "(did you mean 'good'?)");

	msg = load_fails(good_dir, 1, "fixture_nss", -ENOENT);
	CHECK_CONTAINS(msg, "(did you mean 'fixture_ns'?)");

	const char *dirs[] = {LOADER_SECOND_DIR, LOADER_GOOD_DIR};
	msg = load_fails(dirs, 2, "zzzzzzzz", -ENOENT);
	CHECK_CONTAINS(msg, LOADER_SECOND_DIR ", " LOADER_GOOD_DIR);
	CHECK(strstr(msg, "did you mean") == NULL);

	msg = load_fails(NULL, 0, "good", -ENOENT);
	CHECK_CONTAINS(msg, "an empty plugin path");
}

/* ---- The loading policy (docs/security.md) ---- */

static char marker[64];

static void marker_reset(void)
{
	snprintf(marker, sizeof marker, "/tmp/dli-marker-%ld", (long)getpid());
	unlink(marker);
	setenv("DLI_TEST_MARKER", marker, 1);
}

static bool marker_written(void)
{
	return access(marker, F_OK) == 0;
}

static void test_a_path_is_refused_unless_allowed(void)
{
	static const char *const dirs[] = {LOADER_MARKER_DIR};
	struct dli_error err = {0};

	marker_reset();
	struct dli_loader *loader = loader_strict(dirs, 1);
	CHECK_INT(dli_loader_load(loader, LOADER_MARKER_DIR "/marker.so", &err), -EPERM);
	CHECK_CONTAINS(err.message, "'" LOADER_MARKER_DIR "/marker.so' is a path, and modules load "
				    "by name from the plugin dirs only");
	CHECK_CONTAINS(err.message, "dli_options.allow_module_paths, dlinspect check "
				    "--allow-module-path");
	/* Relative paths too, and a module that would load fine. */
	CHECK_INT(dli_loader_load(loader, "../../x.so", &err), -EPERM);
	CHECK_INT(dli_loader_load(loader, LOADER_GOOD_DIR "/good.so", &err), -EPERM);
	CHECK_INT(dli_loader_count(loader), 0);
	dli_loader_destroy(loader);
	CHECK(!marker_written());

	/* Allowed: a file that is not a module is still refused before it is loaded. */
	loader = loader_new(dirs, 1);
	CHECK_INT(dli_loader_load(loader, LOADER_MARKER_DIR "/marker.so", &err), -ENOEXEC);
	CHECK_CONTAINS(err.message, LOADER_MARKER_DIR "/marker.so is not a dlinspect module: it "
				    "does not export dli_module_entry");
	CHECK_CONTAINS(err.message, "it was not loaded");
	CHECK_INT(dli_loader_load(loader, LOADER_GOOD_DIR "/good.so", &err), 0);
	dli_loader_destroy(loader);
	CHECK(!marker_written());
}

static void test_finding_a_namespace_loads_nothing_else(void)
{
	static const char *const dirs[] = {LOADER_MARKER_DIR};
	struct dli_error err = {0};

	marker_reset();
	/* An unknown name: every file on the path is looked at, none loaded. */
	struct dli_loader *loader = loader_strict(dirs, 1);
	CHECK_INT(dli_loader_load(loader, "no_such_namespace", &err), -ENOENT);
	CHECK_CONTAINS(err.message, "extension 'no_such_namespace' not found");
	CHECK_INT(dli_loader_count(loader), 0);
	/* A known namespace: its module, and nothing beside it. */
	CHECK_INT(dli_loader_load(loader, "fixture_ns", &err), 0);
	CHECK_INT(dli_loader_count(loader), 1);
	CHECK_STR(dli_loader_module(loader, 0)->doc, "good fixture, marker dir");
	/* Named, it is refused unopened, like any file without the entry. */
	CHECK_INT(dli_loader_load(loader, "marker", &err), -ENOEXEC);
	CHECK_CONTAINS(err.message, "does not export dli_module_entry");
	/* And so is it when everything on the path is loaded (no `extensions`). */
	CHECK(dli_loader_load_all(loader, &err) < 0);
	CHECK_CONTAINS(err.message, LOADER_MARKER_DIR "/marker.so is not a dlinspect module");
	dli_loader_destroy(loader);
	CHECK(!marker_written());
	unsetenv("DLI_TEST_MARKER");
}

/* Copies `src` into a fresh dir as `name`, with `mode`; returns the dir (static). */
static const char *copy_file(const char *src, const char *name, mode_t mode)
{
	static char dir[64];
	char path[128], buf[65536];

	snprintf(dir, sizeof dir, "/tmp/dli-loader-perm-XXXXXX");
	if (!mkdtemp(dir))
		return NULL;
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *in = fopen(src, "rb"), *out = fopen(path, "wb");
	size_t n;
	while (in && out && (n = fread(buf, 1, sizeof buf, in)) > 0)
		fwrite(buf, 1, n, out);
	if (in)
		fclose(in);
	if (out)
		fclose(out);
	CHECK_INT(chmod(path, mode), 0);
	return dir;
}

static const char *copy_good(const char *name, mode_t mode)
{
	return copy_file(LOADER_GOOD_DIR "/good.so", name, mode);
}

static void remove_copy(const char *dir, const char *name)
{
	char path[128];

	snprintf(path, sizeof path, "%s/%s", dir, name);
	unlink(path);
	rmdir(dir);
}

static void test_a_writable_or_foreign_module_is_refused(void)
{
	struct dli_error err = {0};
	const char *dir = copy_good("good.so", 0666);
	if (!dir) {
		CHECK(!"mkdtemp");
		return;
	}
	const char *dirs[] = {dir};
	struct dli_loader *loader = loader_strict(dirs, 1);
	CHECK_INT(dli_loader_load(loader, "good", &err), -EPERM);
	CHECK_CONTAINS(err.message, "refusing to load module ");
	CHECK_CONTAINS(err.message, "/good.so: it is writable by everyone (mode 0666); a module may "
				    "be writable by its owner only (chmod go-w)");
	char path[128];
	snprintf(path, sizeof path, "%s/good.so", dir);
	CHECK_INT(chmod(path, 0664), 0);
	CHECK_INT(dli_loader_load(loader, "good", &err), -EPERM);
	CHECK_CONTAINS(err.message, "it is writable by its group (mode 0664)");
	/* Also when everything on the path is loaded, or found by its namespace. */
	CHECK_INT(dli_loader_load(loader, "fixture_ns", &err), -EPERM);
	CHECK_INT(dli_loader_load_all(loader, &err), -EPERM);
	CHECK_INT(dli_loader_count(loader), 0);
	CHECK_INT(chmod(path, 0755), 0);
	CHECK_INT(dli_loader_load(loader, "good", &err), 0);
	dli_loader_destroy(loader);

	/* Owned by someone else (needs root to arrange). */
	if (geteuid() == 0 && chown(path, 4242, 4242) == 0) {
		loader = loader_strict(dirs, 1);
		CHECK_INT(dli_loader_load(loader, "good", &err), -EPERM);
		CHECK_CONTAINS(err.message, "/good.so: it is owned by uid 4242, not by you (uid 0) or "
					    "root");
		dli_loader_destroy(loader);
	}
	remove_copy(dir, "good.so");

	/* A device backend (the CUDA backend's kind) found on the plugin path: the same policy. */
	dir = copy_file(LOADER_BACKEND_DIR "/backend_fixture.so", "backend_fixture.so", 0646);
	if (!dir) {
		CHECK(!"mkdtemp");
		return;
	}
	const char *hdirs[] = {dir};
	loader = loader_strict(hdirs, 1);
	CHECK_INT(dli_loader_load(loader, "backend_fixture", &err), -EPERM);
	CHECK_CONTAINS(err.message, "/backend_fixture.so: it is writable by everyone (mode 0646)");
	CHECK_INT(dli_loader_count(loader), 0);
	snprintf(path, sizeof path, "%s/backend_fixture.so", dir);
	CHECK_INT(chmod(path, 0644), 0);
	CHECK_INT(dli_loader_load(loader, "backend_fixture", &err), 0);
	CHECK_INT(dli_loader_count(loader), 1);
	dli_loader_destroy(loader);
	remove_copy(dir, "backend_fixture.so");
}

/* A device backend is a module like any other, but loaded only by its name (on the first tensor in
 * its device's memory): a scan of the plugin path skips it, as it skips communicators. */
static void test_a_backend_loads_by_name_only(void)
{
	struct dli_error err = {0};
	const char *dirs[] = {LOADER_BACKEND_DIR};
	struct dli_loader *loader = loader_strict(dirs, 1);
	CHECK_INT(dli_loader_load_all(loader, &err), 0);
	CHECK_INT(dli_loader_count(loader), 0);
	CHECK_INT(dli_loader_load(loader, "backend_fixture", &err), 0);
	CHECK_INT(dli_loader_count(loader), 1);
	const struct dli_module *m = dli_loader_module(loader, 0);
	CHECK(m != NULL);
	if (m) {
		CHECK_INT(m->n_backends, 1);
		CHECK_STR(m->backends[0]->name, "fixture");
		CHECK_INT(m->backends[0]->device, DLI_DEVICE_CUDA);
		CHECK(m->backends[0]->ops->reset != NULL);
		CHECK_INT(m->n_features + m->n_loggers + m->n_comms, 0);
	}
	/* A backend without one of its methods is refused when loaded, not when first called. */
	CHECK_INT(dli_loader_load(loader, "backend_incomplete", &err), -EINVAL);
	CHECK_CONTAINS(err.message, "module 'backend_incomplete' (");
	CHECK_CONTAINS(err.message, "backend 'fixture' lacks one of acc_create, acc_destroy, add, "
				    "add_quantized, read, reset");
	CHECK_INT(dli_loader_count(loader), 1);
	dli_loader_destroy(loader);
}

/* A shared object stripped of its section headers still loads in the dynamic linker (it reads
 * program headers), but its symbols cannot be read as data: refused unopened. */
static void test_an_object_without_sections_is_not_loaded(void)
{
	struct dli_error err = {0};
	const char *dir = copy_file(LOADER_MARKER_DIR "/marker.so", "marker.so", 0755);
	if (!dir) {
		CHECK(!"mkdtemp");
		return;
	}
	char path[128];
	snprintf(path, sizeof path, "%s/marker.so", dir);
	FILE *f = fopen(path, "r+b");
	CHECK(f != NULL);
	if (f) {
		/* e_shoff and e_shnum of an ELF64 header. */
		static const unsigned char zeros[8];
		fseek(f, 0x28, SEEK_SET);
		fwrite(zeros, 1, 8, f);
		fseek(f, 0x3c, SEEK_SET);
		fwrite(zeros, 1, 2, f);
		fclose(f);
	}
	marker_reset();
	const char *dirs[] = {dir};
	struct dli_loader *loader = loader_strict(dirs, 1);
	CHECK_INT(dli_loader_load(loader, "marker", &err), -ENOEXEC);
	CHECK_CONTAINS(err.message, "/marker.so has no section headers, so its symbols cannot be read "
				    "without loading it; it was not loaded");
	dli_loader_destroy(loader);
	CHECK(!marker_written());
	unsetenv("DLI_TEST_MARKER");
	remove_copy(dir, "marker.so");
}

static void test_missing_entry_names_the_symbol(void)
{
	const char *msg = load_fails(bad_dir, 1, "no_entry", -ENOEXEC);
	CHECK_CONTAINS(msg, LOADER_BAD_DIR "/no_entry.so");
	CHECK_CONTAINS(msg, "does not export dli_module_entry");
}

static void test_other_abi_major_is_refused(void)
{
	char expect[128];
	const char *msg = load_fails(bad_dir, 1, "abi_major", -ENOEXEC);

	CHECK_CONTAINS(msg, "module 'abi_major' (" LOADER_BAD_DIR "/abi_major.so)");
	snprintf(expect, sizeof(expect),
		 "built for dlinspect module ABI %d.0, this dlinspect has ABI %d.%d", DLI_ABI_MAJOR + 1,
		 DLI_ABI_MAJOR, DLI_ABI_MINOR);
	CHECK_CONTAINS(msg, expect);
}

static void test_entry_returning_null_is_refused(void)
{
	const char *msg = load_fails(bad_dir, 1, "returns_null", -ECANCELED);
	CHECK_CONTAINS(msg, LOADER_BAD_DIR "/returns_null.so");
	CHECK_CONTAINS(msg, "module refused to load");
}

static void test_unresolved_symbol_is_named(void)
{
	/* libltdl alone would say "file not found" (or, binding lazily, load it and crash later). */
	const char *msg = load_fails(bad_dir, 1, "unresolved", -ENOEXEC);
	CHECK_CONTAINS(msg, "cannot load module " LOADER_BAD_DIR "/unresolved.so");
	CHECK_CONTAINS(msg, "undefined symbol: dli_fixture_missing_symbol");
	CHECK_CONTAINS(msg, "check its dependencies with ldd");
	CHECK(strstr(msg, "file not found") == NULL);
}

static void test_not_a_shared_object_says_so(void)
{
	const char *msg = load_fails(bad_dir, 1, "not_elf", -ENOEXEC);
	CHECK_CONTAINS(msg, "cannot load module " LOADER_BAD_DIR "/not_elf.so");
	CHECK(strstr(msg, "invalid ELF header") || strstr(msg, "file too short"));
	CHECK_CONTAINS(msg, "not a shared object");
}

static void test_bad_descriptors_are_refused(void)
{
	const char *msg = load_fails(bad_dir, 1, "bad_name", -EINVAL);
	CHECK_CONTAINS(msg, LOADER_BAD_DIR "/bad_name.so calls itself 'someone_else'");
	CHECK_CONTAINS(msg, "(bad_name.so)");

	msg = load_fails(bad_dir, 1, "no_create", -EINVAL);
	CHECK_CONTAINS(msg, "module 'no_create' (" LOADER_BAD_DIR "/no_create.so)");
	CHECK_CONTAINS(msg, "feature 'BadFeature' has no create method");

	msg = load_fails(bad_dir, 1, "small_ops", -EINVAL);
	CHECK_CONTAINS(msg, "feature 'BadFeature' has an ops table of size 4, too small to hold create");

	msg = load_fails(bad_dir, 1, "no_feature_name", -EINVAL);
	CHECK_CONTAINS(msg, "feature #0 has no name");

	msg = load_fails(bad_dir, 1, "no_log_scalar", -EINVAL);
	CHECK_CONTAINS(msg, "logger 'badlog' lacks create or log_scalar");

	msg = load_fails(bad_dir, 1, "bad_range", -EINVAL);
	CHECK_CONTAINS(msg, "module 'bad_range' (" LOADER_BAD_DIR "/bad_range.so): BadFeature: param "
			    "'level' has the range [5, 1]");
}

static void test_failing_create_reports_its_message(void)
{
	struct dli_loader *loader = loader_new(good_dir, 1);
	struct dli_error err = {0};

	CHECK_INT(dli_loader_load(loader, "create_fails", &err), 0);
	CHECK_INT(dli_loader_count(loader), 1);
	const struct dli_module *m = dli_loader_module(loader, 0);
	CHECK(m->ns == NULL);
	CHECK_STR(m->features[0]->name, "FailCreate");
	CHECK(m->features[0]->flags & DLI_FEATURE_GENERIC);
	struct dli_feature_create_args args = {.size = sizeof(args), .host = &host};
	void *instance = NULL;
	CHECK_INT(m->features[0]->ops->create(&args, &instance, &err), -EINVAL);
	CHECK_STR(err.message, "fixture create failed on purpose");
	dli_loader_destroy(loader);
}

static void test_loaders_share_libltdl(void)
{
	struct dli_error err = {0};
	struct dli_loader *a = loader_new(good_dir, 1);
	struct dli_loader *b = loader_new(good_dir, 1);

	CHECK_INT(dli_loader_load(a, "good", &err), 0);
	CHECK_INT(dli_loader_load(b, "good", &err), 0);
	dli_loader_destroy(a);
	/* b's module is still mapped and libltdl still initialised. */
	const struct dli_module *m = dli_loader_module(b, 0);
	struct dli_feature_create_args args = {.size = sizeof(args), .host = &host};
	void *instance = NULL;
	CHECK_INT(m->features[0]->ops->create(&args, &instance, &err), 0);
	CHECK_INT(dli_loader_load(b, "good2", &err), 0);
	CHECK_INT(dli_loader_count(b), 2);
	dli_loader_destroy(b);
	dli_loader_destroy(NULL);

	CHECK_INT(dli_loader_create(NULL, NULL, 0, &a, &err), -EINVAL);
	CHECK(a == NULL);
}

static void *loader_thread(void *arg)
{
	const char *dirs[] = {LOADER_GOOD_DIR, LOADER_SECOND_DIR};
	long failures = 0;

	for (int i = 0; i < 20; i++) {
		struct dli_loader *loader = NULL;
		struct dli_error err = {0};
		if (dli_loader_create(&host, dirs, 2, &loader, &err) != 0 ||
		    dli_loader_load(loader, "fixture_ns", &err) != 0 ||
		    dli_loader_load(loader, "create_fails", &err) != 0 ||
		    dli_loader_count(loader) != 3 || dli_loader_load(loader, "nope", &err) != -ENOENT)
			failures++;
		dli_loader_destroy(loader);
	}
	return (void *)failures;
}

static void test_concurrent_loaders(void)
{
	pthread_t t[4];

	for (size_t i = 0; i < 4; i++)
		CHECK_INT(pthread_create(&t[i], NULL, loader_thread, NULL), 0);
	for (size_t i = 0; i < 4; i++) {
		void *failures = NULL;
		CHECK_INT(pthread_join(t[i], &failures), 0);
		CHECK_INT((long)failures, 0);
	}
}

int main(void)
{
	test_load_by_name_gives_a_usable_module();
	test_loading_twice_keeps_one_module();
	test_load_by_path_needs_no_search_dir();
	test_namespace_loads_every_module_declaring_it();
	test_namespace_scan_stops_at_a_broken_module();
	test_a_path_is_refused_unless_allowed();
	test_finding_a_namespace_loads_nothing_else();
	test_a_writable_or_foreign_module_is_refused();
	test_a_backend_loads_by_name_only();
	test_an_object_without_sections_is_not_loaded();
	test_first_dir_in_search_order_wins();
	test_load_all_takes_every_module_of_a_dir();
	test_only_regular_files_are_modules();
	test_unknown_name_says_where_and_suggests();
	test_missing_entry_names_the_symbol();
	test_other_abi_major_is_refused();
	test_entry_returning_null_is_refused();
	test_unresolved_symbol_is_named();
	test_not_a_shared_object_says_so();
	test_bad_descriptors_are_refused();
	test_failing_create_reports_its_message();
	test_loaders_share_libltdl();
	test_concurrent_loaders();
	return check_exit();
}
