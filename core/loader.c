/* Module loading: finds `<name>.so` modules on the search path, opens them through libltdl, calls
 * their entry and checks the descriptor before any other part of the core touches it. */
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ltdl.h>

#include "error-private.h"
#include "loader-check-private.h"
#include "loader-files-private.h"
#include "loader-private.h"

#ifndef DLI_PLUGINDIR
#define DLI_PLUGINDIR "/usr/local/lib/dlinspect/plugins"
#endif

/* libltdl keeps process-wide state (its handle list, its last error), so every lt_* call in the
 * process goes through this one lock. lt_dlinit/lt_dlexit pair up through `ltdl_users`, so
 * several loaders (several contexts) can live at once. */
static pthread_mutex_t ltdl_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned ltdl_users;

struct dli_loader {
	const struct dli_host *host;
	bool allow_paths; /* an `extensions` entry may be a path (docs/security.md) */
	char **dirs;
	size_t n_dirs;
	struct dli_loaded *mods;
	size_t n_mods, cap_mods;
};

static int ltdl_acquire(struct dli_error *err)
{
	int rc = 0;

	pthread_mutex_lock(&ltdl_lock);
	if (ltdl_users == 0 && lt_dlinit() != 0) {
		const char *why = lt_dlerror();
		rc = dli_error_set(err, -EIO, NULL, "cannot initialise libltdl: %s",
				   why ? why : "unknown error");
	} else {
		ltdl_users++;
	}
	pthread_mutex_unlock(&ltdl_lock);
	return rc;
}

static void ltdl_release(void)
{
	pthread_mutex_lock(&ltdl_lock);
	if (ltdl_users > 0 && --ltdl_users == 0)
		lt_dlexit();
	pthread_mutex_unlock(&ltdl_lock);
}

static long loaded_find(const struct dli_loader *loader, const char *name, const char *real)
{
	for (size_t i = 0; i < loader->n_mods; i++) {
		const struct dli_loaded *m = &loader->mods[i];
		if ((name && strcmp(m->name, name) == 0) || (real && strcmp(m->real, real) == 0))
			return (long)i;
	}
	return -1;
}

static void loaded_close(struct dli_loaded *m)
{
	if (m->handle) {
		pthread_mutex_lock(&ltdl_lock);
		lt_dlclose(m->handle);
		pthread_mutex_unlock(&ltdl_lock);
	}
	for (size_t i = 0; i < m->n_copies; i++)
		free(m->copies[i]);
	free(m->copies);
	free(m->path);
	free(m->real);
	free(m->name);
	memset(m, 0, sizeof(*m));
}

/* Reports why the dynamic linker refused `path`, with a hint at the likely cause. */
static int open_error(struct dli_error *err, const char *path, const char *why)
{
	size_t len = strlen(path);
	const char *hint = "";

	/* dlerror() usually starts with the path; it is said once already. */
	if (strncmp(why, path, len) == 0 && why[len] == ':' && why[len + 1] == ' ')
		why += len + 2;
	if (strstr(why, "undefined symbol") || strstr(why, "version `"))
		hint = "; check its dependencies with ldd -r";
	else if (strstr(why, "cannot open shared object file"))
		hint = "; a library it needs is missing: check its dependencies with ldd";
	else if (strstr(why, "ELF") || strstr(why, "file too short"))
		hint = "; it is not a shared object built for this machine";
	return dli_error_set(err, -ENOEXEC, NULL, "cannot load module %s: %s%s", path, why, hint);
}


/* Opens `path`, calls its entry and checks what it returns. On success *m owns the handle and the
 * strings; on failure nothing stays open. */
static int module_open(const struct dli_loader *loader, const char *path, const char *name,
		       const char *real, struct dli_loaded *m, struct dli_error *err)
{
	char why[512];
	int rc;

	memset(m, 0, sizeof(*m));
	m->path = strdup(path);
	m->name = strdup(name);
	m->real = strdup(real);
	if (!m->path || !m->name || !m->real) {
		loaded_close(m);
		return dli_error_set(err, -ENOMEM, NULL, "out of memory loading %s", path);
	}

	pthread_mutex_lock(&ltdl_lock);
	/* libltdl opens with RTLD_LAZY and says "file not found" for any failure. Opening with
	 * RTLD_NOW first makes a module with an unresolved function fail here, with dlerror()
	 * naming the symbol or the missing library, instead of loading and then killing the process
	 * at its first call, hours into training. The probe keeps the object mapped (and fully
	 * bound) until libltdl holds its own reference. */
	void *probe = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!probe) {
		const char *e = dlerror();
		snprintf(why, sizeof why, "%s", e ? e : "unknown dynamic linker error");
		pthread_mutex_unlock(&ltdl_lock);
		loaded_close(m);
		return open_error(err, path, why);
	}
	lt_dladvise advise;
	if (lt_dladvise_init(&advise) == 0) {
		/* Local: two modules may define the same internal names. */
		if (lt_dladvise_local(&advise) == 0)
			m->handle = lt_dlopenadvise(path, advise);
		lt_dladvise_destroy(&advise);
	}
	if (!m->handle) {
		const char *e = lt_dlerror();
		snprintf(why, sizeof why, "libltdl: %s", e ? e : "unknown error");
	}
	void *sym = m->handle ? lt_dlsym(m->handle, DLI_MODULE_ENTRY_NAME) : NULL;
	dlclose(probe);
	pthread_mutex_unlock(&ltdl_lock);

	if (!m->handle) {
		loaded_close(m);
		return open_error(err, path, why);
	}
	if (!sym) {
		rc = dli_error_set(err, -ENOEXEC, NULL,
				   "%s is not a dlinspect module: it does not export %s (define it with "
				   "DLI_EXPORT, see dlinspect/plugin.h)", path, DLI_MODULE_ENTRY_NAME);
		loaded_close(m);
		return rc;
	}

	/* ISO C has no object-to-function pointer cast; POSIX guarantees the representations
	 * match, so copy the bits. Called without the lock: it is the module's code. */
	dli_module_entry_fn entry;
	memcpy(&entry, &sym, sizeof(entry));
	m->module = entry(loader->host);
	if (!m->module) {
		rc = dli_error_set(err, -ECANCELED, NULL,
				   "module '%s' (%s): module refused to load (its %s returned NULL)", name,
				   path, DLI_MODULE_ENTRY_NAME);
		loaded_close(m);
		return rc;
	}
	rc = dli_module_check(m->module, name, path, err);
	if (rc == 0 && dli_module_copy(m) < 0)
		rc = dli_error_set(err, -ENOMEM, NULL, "out of memory loading %s", path);
	for (size_t i = 0; rc == 0 && i < m->module->n_features; i++)
		rc = dli_params_check(m->module->features[i]->params, m->module->features[i]->n_params,
				      m->module->features[i]->name, name, path, err);
	for (size_t i = 0; rc == 0 && i < m->module->n_loggers; i++)
		rc = dli_params_check(m->module->loggers[i]->params, m->module->loggers[i]->n_params,
				      m->module->loggers[i]->name, name, path, err);
	if (rc < 0)
		loaded_close(m);
	return rc;
}

static int loaded_append(struct dli_loader *loader, struct dli_loaded *m, struct dli_error *err)
{
	if (loader->n_mods == loader->cap_mods) {
		size_t cap = loader->cap_mods ? loader->cap_mods * 2 : 8;
		struct dli_loaded *v = realloc(loader->mods, cap * sizeof(*v));
		if (!v) {
			int rc = dli_error_set(err, -ENOMEM, NULL, "out of memory loading %s", m->path);
			loaded_close(m);
			return rc;
		}
		loader->mods = v;
		loader->cap_mods = cap;
	}
	loader->mods[loader->n_mods++] = *m;
	return 0;
}

/* The resolved path of `path` in *real (owned), or a copy of `path` when it cannot be resolved. */
static int real_path(const char *path, char **real)
{
	*real = realpath(path, NULL);
	if (!*real && errno != ENOMEM)
		*real = strdup(path);
	return *real ? 0 : -ENOMEM;
}

/* Loads the module file at `path` unless a module of that name or that file is already loaded.
 * With `out`, *out says where it is (either way). With `ns`, a module not declaring that namespace
 * is closed again and *out is -1; `ns_seen` (optional) collects every namespace met. */
static int load_file(struct dli_loader *loader, const char *path, const char *ns,
		     struct dli_strings *ns_seen, long *out, struct dli_error *err)
{
	const char *base = strrchr(path, '/');
	struct dli_loaded m;
	struct stat st;
	char *name = NULL, *real = NULL;
	long at = -1;
	int rc;

	if (out)
		*out = -1;
	base = base ? base + 1 : path;
	if (!dli_is_module_file(base))
		return dli_error_set(err, -EINVAL, NULL,
				     "%s is not a module file: a module is named <name>.so", path);
	if (stat(path, &st) != 0) {
		int e = errno;
		return dli_error_set(err, -e, NULL, "cannot load module %s: %s", path, strerror(e));
	}
	if ((rc = dli_file_policy(path, &st, err)) < 0)
		return rc;

	name = strndup(base, strlen(base) - 3);
	if (!name || real_path(path, &real) < 0)
		goto nomem;

	at = loaded_find(loader, name, real);
	if (at >= 0) {
		const struct dli_module *mod = loader->mods[at].module;
		if (ns_seen && dli_strings_add(ns_seen, mod->ns) < 0)
			goto nomem;
		if (ns && (!mod->ns || strcmp(mod->ns, ns) != 0))
			at = -1;
		rc = 0;
		goto out;
	}

	struct dli_elf_info elf;
	if ((rc = dli_elf_inspect(path, &elf)) < 0) {
		rc = dli_error_set(err, rc, NULL, "cannot load module %s: %s", path, strerror(-rc));
		goto out;
	}
	/* A file that is not an ELF object of ours goes to the dynamic linker, which refuses it
	 * with its own reason and runs nothing; one that is must show that it exports the entry. */
	if (elf.elf && !elf.sections) {
		rc = dli_error_set(err, -ENOEXEC, NULL,
				   "%s has no section headers, so its symbols cannot be read without "
				   "loading it; it was not loaded", path);
		goto out;
	}
	if (elf.elf && !elf.has_entry) {
		rc = dli_error_set(err, -ENOEXEC, NULL,
				   "%s is not a dlinspect module: it does not export %s (define it with "
				   "DLI_EXPORT, see dlinspect/plugin.h); it was not loaded", path,
				   DLI_MODULE_ENTRY_NAME);
		goto out;
	}
	rc = module_open(loader, path, name, real, &m, err);
	if (rc < 0)
		goto out;
	/* The note is how a namespace finds its modules: it must say what the descriptor says. */
	if (elf.has_ns && (!m.module->ns || strcmp(m.module->ns, elf.ns) != 0)) {
		rc = dli_error_set(err, -EINVAL, NULL,
				   "module '%s' (%s) declares namespace '%s' with DLI_MODULE_NAMESPACE but "
				   "'%s' in its descriptor", name, path, elf.ns,
				   m.module->ns ? m.module->ns : "(none)");
		loaded_close(&m);
		goto out;
	}
	if (ns_seen && dli_strings_add(ns_seen, m.module->ns) < 0) {
		loaded_close(&m);
		goto nomem;
	}
	if (ns && (!m.module->ns || strcmp(m.module->ns, ns) != 0)) {
		/* Opened only to read its namespace: not part of what was asked for. */
		loaded_close(&m);
		goto out;
	}
	rc = loaded_append(loader, &m, err);
	if (rc == 0)
		at = (long)loader->n_mods - 1;
out:
	if (out && rc == 0)
		*out = at;
	free(name);
	free(real);
	return rc;
nomem:
	free(name);
	free(real);
	return dli_error_set(err, -ENOMEM, NULL, "out of memory loading %s", path);
}

int dli_loader_create(const struct dli_host *host, const char *const *dirs, size_t n_dirs,
		      struct dli_loader **out, struct dli_error *err)
{
	struct dli_loader *loader;
	int rc;

	*out = NULL;
	if (!host)
		return dli_error_set(err, -EINVAL, NULL, "module loader: no host table");
	loader = calloc(1, sizeof(*loader));
	if (!loader)
		return dli_error_set(err, -ENOMEM, NULL, "out of memory creating the module loader");
	rc = ltdl_acquire(err);
	if (rc < 0) {
		free(loader);
		return rc;
	}
	/* From here on dli_loader_destroy undoes everything, the libltdl reference included. */
	loader->host = host;
	if (n_dirs && !(loader->dirs = calloc(n_dirs, sizeof(char *))))
		goto nomem;
	for (size_t i = 0; i < n_dirs; i++) {
		/* An empty entry (as in "a::b") names no dir; skip it rather than search ".". */
		if (!dirs[i] || !*dirs[i])
			continue;
		loader->dirs[loader->n_dirs] = strdup(dirs[i]);
		if (!loader->dirs[loader->n_dirs])
			goto nomem;
		loader->n_dirs++;
	}
	*out = loader;
	return 0;
nomem:
	dli_loader_destroy(loader);
	return dli_error_set(err, -ENOMEM, NULL, "out of memory creating the module loader");
}

int dli_loader_load_all(struct dli_loader *loader, struct dli_error *err)
{
	return dli_loader_load_all_each(loader, NULL, NULL, err);
}

int dli_loader_load_all_each(struct dli_loader *loader,
			     void (*bad)(void *arg, const struct dli_error *e), void *arg,
			     struct dli_error *err)
{
	struct dli_candidates c = {0};
	int rc = dli_candidates_collect(loader->dirs, loader->n_dirs, &c), first = 0;

	if (rc < 0)
		rc = dli_error_set(err, rc, NULL, "out of memory listing the plugin dirs");
	for (size_t i = 0; rc == 0 && i < c.n; i++) {
		/* A communicator loads only when picked (DLINSPECT_COMMUNICATOR), a device backend on
		 * the first tensor in that device's memory: loading either would bring its library (MPI,
		 * the CUDA driver) into every run. Its namespace note says what it is. */
		struct dli_elf_info elf;
		if (dli_elf_inspect(c.v[i].path, &elf) == 0 && elf.has_ns &&
		    (strcmp(elf.ns, DLI_COMM_NAMESPACE) == 0 ||
		     strcmp(elf.ns, DLI_BACKEND_NAMESPACE) == 0))
			continue;
		rc = load_file(loader, c.v[i].path, NULL, NULL, NULL, err);
		if (rc && bad && rc != -ENOMEM) {
			bad(arg, err);
			first = first ? first : rc;
			rc = 0;
		}
	}
	dli_candidates_finish(&c);
	return rc ? rc : first;
}

/* The -ENOENT message: what was looked for, where, and the nearest name seen. */
static int not_found(const struct dli_loader *loader, const char *entry, const char *name,
		     const struct dli_candidates *c, const struct dli_strings *ns_seen,
		     const char *skipped, const char *skipped_kind, struct dli_error *err)
{
	char dirs[640] = "";
	size_t off = 0;
	for (size_t i = 0; i < loader->n_dirs && off < sizeof dirs; i++) {
		int n = snprintf(dirs + off, sizeof dirs - off, "%s%s", i ? ", " : "",
				 loader->dirs[i]);
		if (n < 0)
			break;
		off += (size_t)n;
	}

	size_t n_words = c->n + ns_seen->n;
	const char **words = n_words ? malloc(n_words * sizeof(*words)) : NULL;
	char mean[160] = "";
	if (words) {
		for (size_t i = 0; i < c->n; i++)
			words[i] = c->v[i].name;
		for (size_t i = 0; i < ns_seen->n; i++)
			words[c->n + i] = ns_seen->v[i];
		dli_suggest_text(mean, sizeof mean, name, words, n_words);
		free(words);
	}
	/* A file of the module's name that is no module file says why the name was not taken. */
	char note[320] = "", cskipped[DLI_CLIP_NAME + 4];
	if (skipped)
		snprintf(note, sizeof note, " (%s is %s, which is never loaded)",
			 dli_clip_name(cskipped, sizeof cskipped, skipped), skipped_kind);
	char centry[DLI_CLIP_NAME + 4], cname[DLI_CLIP_NAME + 4];
	dli_clip_name(centry, sizeof centry, entry);
	dli_clip_name(cname, sizeof cname, name);
	return dli_error_set(err, -ENOENT, NULL,
			     "extension '%s' not found: no module %s.so%s and no module of namespace "
			     "'%s' in %s%s%s", centry, cname, note, cname,
			     loader->n_dirs ? "the plugin dirs " : "an empty plugin path", dirs, mean);
}

int dli_loader_load(struct dli_loader *loader, const char *entry, struct dli_error *err)
{
	if (!entry || !*entry)
		return dli_error_set(err, -EINVAL, NULL, "empty extension name");
	if (strchr(entry, '/')) {
		if (!loader->allow_paths)
			return dli_error_set(err, -EPERM, NULL,
					     "'%s' is a path, and modules load by name from the plugin dirs "
					     "only; to load it, put its dir on DLINSPECT_PLUGIN_PATH and name "
					     "the module, or let the host allow module paths "
					     "(dli_options.allow_module_paths, dlinspect check "
					     "--allow-module-path)", entry);
		return load_file(loader, entry, NULL, NULL, NULL, err);
	}

	/* "x.so" means the module x: users write the file name too. */
	size_t len = strlen(entry);
	char *name = dli_is_module_file(entry) ? strndup(entry, len - 3) : strdup(entry);
	if (!name)
		return dli_error_set(err, -ENOMEM, NULL, "out of memory loading '%s'", entry);
	if (loaded_find(loader, name, NULL) >= 0) {
		free(name);
		return 0;
	}

	int rc = 0;
	char *skipped = NULL; /* the first x.so that is there but is no regular file */
	const char *skipped_kind = NULL;
	for (size_t d = 0; d < loader->n_dirs; d++) {
		char *path = dli_path_join(loader->dirs[d], name, ".so");
		if (!path) {
			free(skipped);
			free(name);
			return dli_error_set(err, -ENOMEM, NULL, "out of memory loading '%s'", entry);
		}
		bool found = dli_is_regular(path);
		if (found)
			rc = load_file(loader, path, NULL, NULL, NULL, err);
		else if (!skipped && (skipped_kind = dli_irregular_kind(path)))
			skipped = path, path = NULL;
		free(path);
		if (found) {
			free(skipped);
			free(name);
			return rc;
		}
	}

	/* Not a module name: a namespace. Its modules are the files whose DLI_MODULE_NAMESPACE note
	 * names it, read without loading anything; a module so named that fails to load fails the
	 * whole entry. */
	struct dli_candidates c = {0};
	struct dli_strings ns_seen = {0};
	size_t matched = 0;
	rc = dli_candidates_collect(loader->dirs, loader->n_dirs, &c);
	for (size_t i = 0; rc == 0 && i < loader->n_mods; i++) {
		const char *ns = loader->mods[i].module->ns;
		rc = dli_strings_add(&ns_seen, ns);
		if (ns && strcmp(ns, name) == 0)
			matched++;
	}
	if (rc < 0)
		rc = dli_error_set(err, rc, NULL, "out of memory loading '%s'", entry);
	for (size_t i = 0; rc == 0 && i < c.n; i++) {
		struct dli_elf_info elf;
		long at;
		if (dli_elf_inspect(c.v[i].path, &elf) < 0 || !elf.has_ns)
			continue;
		if ((rc = dli_strings_add(&ns_seen, elf.ns)) < 0) {
			rc = dli_error_set(err, rc, NULL, "out of memory loading '%s'", entry);
			break;
		}
		if (strcmp(elf.ns, name) != 0)
			continue;
		rc = load_file(loader, c.v[i].path, name, NULL, &at, err);
		if (rc < 0)
			dli_error_prefix(err, NULL,
					 "no module %s.so, so '%s' was taken as a namespace; while "
					 "looking for it: ", name, name);
		else if (at >= 0)
			matched++;
	}
	if (rc == 0 && matched == 0)
		rc = not_found(loader, entry, name, &c, &ns_seen, skipped, skipped_kind, err);
	dli_strings_finish(&ns_seen);
	dli_candidates_finish(&c);
	free(skipped);
	free(name);
	return rc;
}

void dli_loader_allow_paths(struct dli_loader *loader, bool allow)
{
	loader->allow_paths = allow;
}

size_t dli_loader_count(const struct dli_loader *loader)
{
	return loader ? loader->n_mods : 0;
}

const struct dli_module *dli_loader_module(const struct dli_loader *loader, size_t i)
{
	return loader && i < loader->n_mods ? loader->mods[i].module : NULL;
}

const char *dli_loader_path(const struct dli_loader *loader, size_t i)
{
	return loader && i < loader->n_mods ? loader->mods[i].path : NULL;
}

const char *const *dli_loader_dirs(const struct dli_loader *loader, size_t *n)
{
	*n = loader ? loader->n_dirs : 0;
	return loader ? (const char *const *)loader->dirs : NULL;
}

void dli_loader_destroy(struct dli_loader *loader)
{
	if (!loader)
		return;
	/* Reverse order of loading, like any unwinding. */
	for (size_t i = loader->n_mods; i-- > 0;)
		loaded_close(&loader->mods[i]);
	free(loader->mods);
	for (size_t i = 0; i < loader->n_dirs; i++)
		free(loader->dirs[i]);
	free(loader->dirs);
	free(loader);
	ltdl_release();
}

/* ---- The search path ---- */

void dli_search_dirs_free(char **dirs, size_t n)
{
	for (size_t i = 0; dirs && i < n; i++)
		free(dirs[i]);
	free(dirs);
}

#ifdef DLI_BUILD_PLUGIN_PATH /* and DLI_BUILD_ROOT: the core's own build (core/meson.build) */
/* Whether `path` lies in the build tree this core was compiled in. */
static bool under_build_root(const char *path)
{
	char real[PATH_MAX], root[PATH_MAX];
	size_t len;
	if (!realpath(path, real) || !realpath(DLI_BUILD_ROOT, root))
		return false;
	len = strlen(root);
	return !strncmp(real, root, len) && real[len] == '/';
}

/* Whether this code runs from its build tree, not installed: the program is a file of the tree
 * (the dlinspect tool, the trainer, the tests), or the libdlinspect it runs is (a host program
 * built against the uninstalled pkg-config file). */
static const char here; /* an address in the object that holds this code, for dladdr */

static bool in_build_tree(void)
{
	Dl_info info;
	if (dladdr(&here, &info) && info.dli_fname &&
	    strchr(info.dli_fname, '/') && under_build_root(info.dli_fname))
		return true;
	return under_build_root("/proc/self/exe");
}
#endif

int dli_search_dirs(const char *const *extra, size_t n_extra, char ***out, size_t *n,
		    struct dli_error *err)
{
	if (!extra)
		n_extra = 0; /* as for the options' other lists: NULL is none, whatever the count */
	/* An entry that names no dir is the caller's mistake, refused as a NULL or empty tensor
	 * name is, not skipped without a word (and "" is not taken for the working directory). */
	for (size_t i = 0; i < n_extra; i++)
		if (!extra[i] || !extra[i][0])
			return dli_error_set(err, -EINVAL, NULL,
					     "plugin dir %zu of %zu is %s: name a directory ('.' for "
					     "the working directory)",
					     i + 1, n_extra, extra[i] ? "empty" : "NULL");
	const char *env = getenv("DLINSPECT_PLUGIN_PATH");
	/* Run from the build tree with no DLINSPECT_PLUGIN_PATH, as `meson devenv` would set it:
	 * the tree's own modules, before the install dir (which may hold another version's). */
	const char *list = env ? env : "";
#ifdef DLI_BUILD_PLUGIN_PATH
	if (!env && in_build_tree())
		list = DLI_BUILD_PLUGIN_PATH;
#endif
	size_t cap = n_extra + 2;
	for (const char *p = list; *p; p++)
		cap += *p == ':';
	char **dirs = calloc(cap, sizeof *dirs);
	if (!dirs)
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	size_t c = 0;
	for (size_t i = 0; i < n_extra; i++)
		dirs[c++] = strdup(extra[i]);
	for (const char *p = list; *p;) {
		const char *end = strchr(p, ':');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len)
			dirs[c++] = strndup(p, len);
		if (!end)
			break;
		p = end + 1;
	}
	dirs[c++] = strdup(DLI_PLUGINDIR);
	for (size_t i = 0; i < c; i++) {
		if (!dirs[i]) {
			dli_search_dirs_free(dirs, c);
			return dli_error_set(err, -ENOMEM, NULL, "out of memory");
		}
	}
	*out = dirs;
	*n = c;
	return 0;
}
