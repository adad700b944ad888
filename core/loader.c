/* Module loading: finds `<name>.so` modules on the search path, opens them through libltdl, calls
 * their entry and checks the descriptor before any other part of the core touches it. */
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ltdl.h>

#include "cuda/backend.h"
#include "error-private.h"
#include "loader-private.h"

/* libltdl keeps process-wide state (its handle list, its last error), so every lt_* call in the
 * process goes through this one lock. lt_dlinit/lt_dlexit pair up through `dli_ltdl_users`, so
 * several loaders (several contexts) can live at once. */
static pthread_mutex_t dli_ltdl_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned dli_ltdl_users;

/* What any module fills, whatever its version: enough to read the ABI it was built for. The sizes
 * of ABI 1.0's tables are in dlinspect/plugin.h. */
#define DLI_MODULE_HEADER_SIZE (offsetof(struct dli_module, abi_minor) + sizeof(uint16_t))

struct dli_loaded {
	lt_dlhandle handle;
	char *path; /* as opened */
	char *real; /* resolved, so that one file reached twice is loaded once */
	char *name; /* file name without ".so" (equal to module->name) */
	/* The host's copy of the module's descriptors (see dli_module_copy): valid until closed. */
	const struct dli_module *module;
	void **copies; /* every block of that copy, owned */
	size_t n_copies;
};

struct dli_loader {
	const struct dli_host *host;
	bool allow_paths; /* an `extensions` entry may be a path (docs/security.md) */
	char **dirs;
	size_t n_dirs;
	struct dli_loaded *mods;
	size_t n_mods, cap_mods;
};

/* A `.so` file on the search path, after first-in-search-order dedupe. */
struct dli_candidate {
	char *name;
	char *path;
};

struct dli_candidates {
	struct dli_candidate *v;
	size_t n, cap;
};

/* Owned strings, for the did-you-mean over namespaces seen while scanning. */
struct dli_strings {
	char **v;
	size_t n, cap;
};

static int dli_ltdl_acquire(struct dli_error *err)
{
	int rc = 0;

	pthread_mutex_lock(&dli_ltdl_lock);
	if (dli_ltdl_users == 0 && lt_dlinit() != 0) {
		const char *why = lt_dlerror();
		rc = dli_error_set(err, -EIO, NULL, "cannot initialise libltdl: %s",
				   why ? why : "unknown error");
	} else {
		dli_ltdl_users++;
	}
	pthread_mutex_unlock(&dli_ltdl_lock);
	return rc;
}

static void dli_ltdl_release(void)
{
	pthread_mutex_lock(&dli_ltdl_lock);
	if (dli_ltdl_users > 0 && --dli_ltdl_users == 0)
		lt_dlexit();
	pthread_mutex_unlock(&dli_ltdl_lock);
}

static bool dli_is_module_file(const char *file)
{
	size_t len = strlen(file);

	return len > 3 && strcmp(file + len - 3, ".so") == 0;
}

/* Shared objects of dlinspect itself that live on the plugin path but are not modules (the CUDA
 * backend, opened with dli_loader_open_backend): a directory scan must not try them as modules. */
static bool dli_is_helper_file(const char *file)
{
	return strcmp(file, DLI_CUDA_BACKEND_FILE ".so") == 0;
}

/* stat, not lstat: a symlink to a module is a module, a directory or fifo called x.so is not. */
static bool dli_is_regular(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

#if UINTPTR_MAX > 0xffffffffu
#define DLI_ELFCLASS ELFCLASS64
typedef Elf64_Ehdr dli_elf_ehdr;
typedef Elf64_Shdr dli_elf_shdr;
typedef Elf64_Sym dli_elf_sym;
#else
#define DLI_ELFCLASS ELFCLASS32
typedef Elf32_Ehdr dli_elf_ehdr;
typedef Elf32_Shdr dli_elf_shdr;
typedef Elf32_Sym dli_elf_sym;
#endif

/* What a module file says about itself before anything loads it. */
struct dli_elf_info {
	bool elf;       /* an ELF object of this machine's class */
	bool sections;  /* with section headers this reader could walk */
	bool has_entry; /* its dynamic symbols define DLI_MODULE_ENTRY_NAME */
	bool has_ns;    /* it has a DLI_MODULE_NAMESPACE note, whose text is in ns */
	char ns[DLI_NAMESPACE_MAX];
};

/* Whether the defined dynamic symbols of section `sh` (SHT_DYNSYM) include `want`. */
static bool dli_elf_defines(const unsigned char *b, size_t len, const dli_elf_ehdr *eh,
			    const dli_elf_shdr *sh, const char *want)
{
	dli_elf_shdr str;
	if (sh->sh_link >= eh->e_shnum || sh->sh_entsize != sizeof(dli_elf_sym) ||
	    sh->sh_offset > len || sh->sh_size > len - sh->sh_offset)
		return false;
	memcpy(&str, b + eh->e_shoff + sh->sh_link * sizeof str, sizeof str);
	if (str.sh_offset > len || str.sh_size > len - str.sh_offset)
		return false;
	size_t want_len = strlen(want) + 1;
	for (size_t i = 0; i < sh->sh_size / sizeof(dli_elf_sym); i++) {
		dli_elf_sym sym;
		memcpy(&sym, b + sh->sh_offset + i * sizeof sym, sizeof sym);
		if (sym.st_shndx == SHN_UNDEF || sym.st_name >= str.sh_size ||
		    str.sh_size - sym.st_name < want_len)
			continue;
		if (memcmp(b + str.sh_offset + sym.st_name, want, want_len) == 0)
			return true;
	}
	return false;
}

/* The namespace note of note section `sh`, if it holds one. */
static bool dli_elf_note_ns(const unsigned char *b, size_t len, const dli_elf_shdr *sh, char *ns,
			    size_t size)
{
	static const char owner[] = DLI_NOTE_NAME;
	if (sh->sh_offset > len || sh->sh_size > len - sh->sh_offset)
		return false;
	size_t off = sh->sh_offset, end = sh->sh_offset + sh->sh_size;
	while (end - off >= 12) {
		uint32_t nh[3]; /* namesz, descsz, type */
		memcpy(nh, b + off, sizeof nh);
		size_t name_len = ((size_t)nh[0] + 3) & ~(size_t)3;
		size_t desc_len = ((size_t)nh[1] + 3) & ~(size_t)3;
		off += 12;
		if (name_len > end - off || desc_len > end - off - name_len)
			return false;
		const char *name = (const char *)b + off, *desc = name + name_len;
		if (nh[2] == DLI_NOTE_NAMESPACE && nh[0] == sizeof owner &&
		    memcmp(name, owner, sizeof owner) == 0 && nh[1] > 1 && nh[1] <= size &&
		    memchr(desc, '\0', nh[1]) == desc + nh[1] - 1) {
			memcpy(ns, desc, nh[1]);
			return true;
		}
		off += name_len + desc_len;
	}
	return false;
}

/* Reads `path` as data, never loading it, so that deciding what to load runs no library's code
 * (a constructor runs as soon as the dynamic linker maps a file). Every offset is checked against
 * the file's size: the file is untrusted. 0 (info filled; info->elf false for anything that is
 * not an ELF object of this machine's class), or a negative errno when it cannot be read. */
static int dli_elf_inspect(const char *path, struct dli_elf_info *info)
{
	struct stat st;

	memset(info, 0, sizeof(*info));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(dli_elf_ehdr)) {
		close(fd);
		return 0;
	}
	size_t len = (size_t)st.st_size;
	const unsigned char *b = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (b == MAP_FAILED)
		return -errno;

	dli_elf_ehdr eh;
	memcpy(&eh, b, sizeof eh);
	info->elf = memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 && eh.e_ident[EI_CLASS] == DLI_ELFCLASS;
	if (info->elf && eh.e_shentsize == sizeof(dli_elf_shdr) && eh.e_shnum > 0 &&
	    eh.e_shoff <= len && (len - eh.e_shoff) / sizeof(dli_elf_shdr) >= eh.e_shnum) {
		info->sections = true;
		for (size_t i = 0; i < eh.e_shnum; i++) {
			dli_elf_shdr sh;
			memcpy(&sh, b + eh.e_shoff + i * sizeof sh, sizeof sh);
			if (sh.sh_type == SHT_DYNSYM && !info->has_entry)
				info->has_entry = dli_elf_defines(b, len, &eh, &sh, DLI_MODULE_ENTRY_NAME);
			else if (sh.sh_type == SHT_NOTE && !info->has_ns)
				info->has_ns = dli_elf_note_ns(b, len, &sh, info->ns, sizeof info->ns);
		}
	}
	munmap((void *)b, len);
	return 0;
}

/* What makes a file on the plugin path loadable at all (docs/security.md): a regular file that
 * only its owner, this user or root, can change. */
static int dli_file_policy(const char *path, const struct stat *st, struct dli_error *err)
{
	uid_t me = geteuid();

	if (!S_ISREG(st->st_mode))
		return dli_error_set(err, -EINVAL, NULL,
				     "cannot load module %s: not a regular file", path);
	if (st->st_uid != me && st->st_uid != 0)
		return dli_error_set(err, -EPERM, NULL,
				     "refusing to load module %s: it is owned by uid %u, not by you "
				     "(uid %u) or root", path, (unsigned)st->st_uid, (unsigned)me);
	if (st->st_mode & (S_IWGRP | S_IWOTH))
		return dli_error_set(err, -EPERM, NULL,
				     "refusing to load module %s: it is writable by %s (mode %04o); "
				     "a module may be writable by its owner only (chmod go-w)", path,
				     (st->st_mode & S_IWOTH) ? "everyone" : "its group",
				     (unsigned)(st->st_mode & 07777));
	return 0;
}

static char *dli_path_join(const char *dir, const char *file, const char *suffix)
{
	size_t n = strlen(dir) + strlen(file) + strlen(suffix) + 2;
	char *path = malloc(n);

	if (path)
		snprintf(path, n, "%s/%s%s", dir, file, suffix);
	return path;
}

static int dli_strings_add(struct dli_strings *list, const char *s)
{
	if (!s || !*s)
		return 0;
	for (size_t i = 0; i < list->n; i++)
		if (strcmp(list->v[i], s) == 0)
			return 0;
	if (list->n == list->cap) {
		size_t cap = list->cap ? list->cap * 2 : 8;
		char **v = realloc(list->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		list->v = v;
		list->cap = cap;
	}
	list->v[list->n] = strdup(s);
	if (!list->v[list->n])
		return -ENOMEM;
	list->n++;
	return 0;
}

static void dli_strings_finish(struct dli_strings *list)
{
	for (size_t i = 0; i < list->n; i++)
		free(list->v[i]);
	free(list->v);
}

static void dli_candidates_finish(struct dli_candidates *c)
{
	for (size_t i = 0; i < c->n; i++) {
		free(c->v[i].name);
		free(c->v[i].path);
	}
	free(c->v);
}

static int dli_candidate_cmp(const void *a, const void *b)
{
	return strcmp(((const struct dli_candidate *)a)->name, ((const struct dli_candidate *)b)->name);
}

static int dli_candidates_push(struct dli_candidates *c, const char *dir, const char *file)
{
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		struct dli_candidate *v = realloc(c->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		c->v = v;
		c->cap = cap;
	}
	struct dli_candidate *e = &c->v[c->n];
	e->path = dli_path_join(dir, file, "");
	e->name = strndup(file, strlen(file) - 3);
	if (!e->path || !e->name) {
		free(e->path);
		free(e->name);
		return -ENOMEM;
	}
	if (!dli_is_regular(e->path)) {
		free(e->path);
		free(e->name);
		return 0;
	}
	c->n++;
	return 0;
}

/* Every module file on the search path, each dir's in name order (readdir order would make the
 * load order, and so registration order, differ between file systems). A name already found in an
 * earlier dir is dropped: the first in search order wins, like PATH. Dirs that cannot be read are
 * skipped: the installed plugin dir need not exist in a build-tree run. */
static int dli_candidates_collect(const struct dli_loader *loader, struct dli_candidates *c)
{
	for (size_t d = 0; d < loader->n_dirs; d++) {
		DIR *dir = opendir(loader->dirs[d]);
		if (!dir)
			continue;
		size_t first = c->n;
		struct dirent *ent;
		int rc = 0;
		while (rc == 0 && (ent = readdir(dir)) != NULL)
			if (dli_is_module_file(ent->d_name) && !dli_is_helper_file(ent->d_name))
				rc = dli_candidates_push(c, loader->dirs[d], ent->d_name);
		closedir(dir);
		if (rc < 0)
			return rc;
		if (c->n > first) /* c->v is still NULL after a first dir without modules */
			qsort(c->v + first, c->n - first, sizeof(*c->v), dli_candidate_cmp);
		size_t kept = first;
		for (size_t i = first; i < c->n; i++) {
			bool seen = false;
			for (size_t j = 0; j < first && !seen; j++)
				seen = strcmp(c->v[j].name, c->v[i].name) == 0;
			if (seen) {
				free(c->v[i].name);
				free(c->v[i].path);
			} else {
				c->v[kept++] = c->v[i];
			}
		}
		c->n = kept;
	}
	return 0;
}

static long dli_loaded_find(const struct dli_loader *loader, const char *name, const char *real)
{
	for (size_t i = 0; i < loader->n_mods; i++) {
		const struct dli_loaded *m = &loader->mods[i];
		if ((name && strcmp(m->name, name) == 0) || (real && strcmp(m->real, real) == 0))
			return (long)i;
	}
	return -1;
}

static void dli_loaded_close(struct dli_loaded *m)
{
	if (m->handle) {
		pthread_mutex_lock(&dli_ltdl_lock);
		lt_dlclose(m->handle);
		pthread_mutex_unlock(&dli_ltdl_lock);
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
static int dli_open_error(struct dli_error *err, const char *path, const char *why)
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

/* The stride of a descriptor's params array. struct dli_param_desc carries no size: the
 * descriptor's param_size gives it (1.1); without it, the size of the minor the module was built
 * for, which this host knows unless the module is newer. */
static int param_stride(const struct dli_module *mod, size_t param_size, size_t n_params,
			size_t *stride)
{
	*stride = mod->abi_minor == 0 ? DLI_PARAM_DESC_SIZE_1_0 : DLI_PARAM_DESC_SIZE_1_1;
	if (param_size) {
		if (param_size < DLI_PARAM_DESC_SIZE_1_0)
			return -ENOEXEC;
		*stride = param_size;
	} else if (mod->abi_minor > DLI_ABI_MINOR && n_params) {
		return -EINVAL;
	}
	return 0;
}

static const char *param_stride_why(int r)
{
	return r == -ENOEXEC ? "param_size is smaller than ABI 1.0's struct dli_param_desc"
			     : "built for a newer minor ABI than this dlinspect's without param_size "
			       "(= DLI_PARAM_SIZE): its params cannot be read";
}

/* A zero-filled block of `want` bytes holding the first min(have, want) bytes of `src`, owned by
 * `m`; NULL when out of memory. */
static void *copy_block(struct dli_loaded *m, const void *src, size_t have, size_t want)
{
	void **v = realloc(m->copies, (m->n_copies + 1) * sizeof(*v));
	if (!v)
		return NULL;
	m->copies = v;
	void *p = calloc(1, want ? want : 1);
	if (!p)
		return NULL;
	memcpy(p, src, have < want ? have : want);
	m->copies[m->n_copies++] = p;
	return p;
}

/* A table whose first member is its uint32_t size: copied at the host's size, its size member
 * clamped to what the copy holds, so DLI_HAS_MEMBER on the copy stays true to the module. */
static void *copy_table(struct dli_loaded *m, const void *src, size_t want)
{
	uint32_t have;
	memcpy(&have, src, sizeof have);
	uint32_t *p = copy_block(m, src, have, want);
	if (p && have > want)
		*p = (uint32_t)want;
	return p;
}

static const struct dli_param_desc *copy_params(struct dli_loaded *m, const struct dli_param_desc *src,
						size_t n, size_t stride)
{
	struct dli_param_desc *v = copy_block(m, "", 0, n * sizeof(*v));
	for (size_t i = 0; v && i < n; i++)
		memcpy(&v[i], (const char *)src + i * stride, stride < sizeof(*v) ? stride : sizeof(*v));
	return v;
}

/* The host's view of a checked module: every descriptor, ops table and param array copied into
 * zero-filled blocks of this dlinspect's sizes, so the rest of the core reads every member it
 * knows, and members a module's older headers lacked read as NULL / 0 (absent, optional). The
 * module's own data is read only as far as its sizes say. */
static int dli_module_copy(struct dli_loaded *m)
{
	const struct dli_module *src = m->module;
	struct dli_module *mod = copy_table(m, src, sizeof(*mod));
	if (!mod)
		return -ENOMEM;
	const struct dli_feature_desc **fv = NULL;
	const struct dli_logger_desc **lv = NULL;
	if (src->n_features && !(fv = copy_block(m, "", 0, src->n_features * sizeof(*fv))))
		return -ENOMEM;
	if (src->n_loggers && !(lv = copy_block(m, "", 0, src->n_loggers * sizeof(*lv))))
		return -ENOMEM;
	for (size_t i = 0; i < src->n_features; i++) {
		struct dli_feature_desc *f = copy_table(m, src->features[i], sizeof(*f));
		if (!f || !(f->ops = copy_table(m, src->features[i]->ops, sizeof(*f->ops))))
			return -ENOMEM;
		size_t stride;
		param_stride(src, f->param_size, f->n_params, &stride);
		if (f->n_params && !(f->params = copy_params(m, f->params, f->n_params, stride)))
			return -ENOMEM;
		f->param_size = sizeof(struct dli_param_desc);
		fv[i] = f;
	}
	for (size_t i = 0; i < src->n_loggers; i++) {
		struct dli_logger_desc *l = copy_table(m, src->loggers[i], sizeof(*l));
		if (!l || !(l->ops = copy_table(m, src->loggers[i]->ops, sizeof(*l->ops))))
			return -ENOMEM;
		size_t stride;
		param_stride(src, l->param_size, l->n_params, &stride);
		if (l->n_params && !(l->params = copy_params(m, l->params, l->n_params, stride)))
			return -ENOMEM;
		l->param_size = sizeof(struct dli_param_desc);
		lv[i] = l;
	}
	mod->features = fv;
	mod->loggers = lv;
	/* Communicators (1.2): a module whose table ends before them has none. */
	if (!DLI_HAS_MEMBER(mod, struct dli_module, n_comms)) {
		mod->comms = NULL;
		mod->n_comms = 0;
	}
	if (mod->n_comms) {
		const struct dli_comm_desc **cv = copy_block(m, "", 0, mod->n_comms * sizeof(*cv));
		if (!cv)
			return -ENOMEM;
		for (size_t i = 0; i < mod->n_comms; i++) {
			struct dli_comm_desc *d = copy_table(m, mod->comms[i], sizeof(*d));
			if (!d || !(d->ops = copy_table(m, mod->comms[i]->ops, sizeof(*d->ops))))
				return -ENOMEM;
			cv[i] = d;
		}
		mod->comms = cv;
	}
	m->module = mod;
	return 0;
}

/* A range the core could never satisfy is the module's bug: say so at load, not at every config. */
static int dli_params_check(const struct dli_param_desc *p, size_t n, const char *owner,
			    const char *name, const char *path, struct dli_error *err)
{
	for (size_t i = 0; i < n; i++) {
		if (!p[i].bounded)
			continue;
		if ((p[i].type != DLI_PARAM_INT && p[i].type != DLI_PARAM_FLOAT) ||
		    !(p[i].min <= p[i].max))
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): %s: param '%s' has the range [%g, %g]%s",
					     name, path, owner, p[i].key ? p[i].key : "(null)", p[i].min,
					     p[i].max, p[i].min <= p[i].max ? " but is not a number" : "");
	}
	return 0;
}

static int dli_module_check(const struct dli_module *mod, const char *name, const char *path,
			    struct dli_error *err)
{
	if (mod->size < DLI_MODULE_HEADER_SIZE)
		return dli_error_set(err, -ENOEXEC, NULL,
				     "module '%s' (%s): descriptor size %u is too small to be a dlinspect "
				     "module", name, path, (unsigned)mod->size);
	if (mod->abi_major != DLI_ABI_MAJOR)
		return dli_error_set(err, -ENOEXEC, NULL,
				     "module '%s' (%s) was built for dlinspect module ABI %u.%u, this "
				     "dlinspect has ABI %d.%d", name, path, (unsigned)mod->abi_major,
				     (unsigned)mod->abi_minor, DLI_ABI_MAJOR, DLI_ABI_MINOR);
	if (mod->size < DLI_MODULE_SIZE_1_0)
		return dli_error_set(err, -ENOEXEC, NULL,
				     "module '%s' (%s): descriptor size %u, ABI %d needs at least %zu", name,
				     path, (unsigned)mod->size, DLI_ABI_MAJOR, DLI_MODULE_SIZE_1_0);
	if (!mod->name)
		return dli_error_set(err, -EINVAL, NULL, "module %s has no name", path);
	if (strcmp(mod->name, name) != 0)
		return dli_error_set(err, -EINVAL, NULL,
				     "module %s calls itself '%s': a module's name must match its file "
				     "name (%s.so)", path, mod->name, name);
	if ((mod->n_features && !mod->features) || (mod->n_loggers && !mod->loggers))
		return dli_error_set(err, -EINVAL, NULL,
				     "module '%s' (%s): %zu features and %zu loggers declared but no array",
				     name, path, mod->n_features, mod->n_loggers);

	for (size_t i = 0; i < mod->n_features; i++) {
		const struct dli_feature_desc *f = mod->features[i];
		if (!f)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): feature #%zu is NULL", name, path, i);
		/* Every member of ABI 1.0 must be there; later ones read as 0 when absent. */
		if (f->size < DLI_FEATURE_DESC_SIZE_1_0)
			return dli_error_set(err, -ENOEXEC, NULL,
					     "module '%s' (%s): feature #%zu has descriptor size %u, ABI %d "
					     "needs at least %zu", name, path, i, (unsigned)f->size,
					     DLI_ABI_MAJOR, (size_t)DLI_FEATURE_DESC_SIZE_1_0);
		if (!f->name || !*f->name)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): feature #%zu has no name", name, path, i);
		if (!f->ops)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): feature '%s' has no ops table", name, path,
					     f->name);
		if (!DLI_HAS_MEMBER(f->ops, struct dli_feature_ops, create))
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): feature '%s' has an ops table of size %u, "
					     "too small to hold create", name, path, f->name,
					     (unsigned)f->ops->size);
		if (!f->ops->create)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): feature '%s' has no create method", name,
					     path, f->name);
		if (f->n_params && !f->params)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): feature '%s' declares %zu params but no "
					     "array", name, path, f->name, f->n_params);
		size_t stride;
		int r = param_stride(mod, DLI_HAS_MEMBER(f, struct dli_feature_desc, param_size)
						       ? f->param_size : 0, f->n_params, &stride);
		if (r < 0)
			return dli_error_set(err, r, NULL,
					     "module '%s' (%s): feature '%s': %s", name, path, f->name,
					     param_stride_why(r));
	}

	size_t n_comms = DLI_HAS_MEMBER(mod, struct dli_module, n_comms) ? mod->n_comms : 0;
	if (n_comms && !mod->comms)
		return dli_error_set(err, -EINVAL, NULL,
				     "module '%s' (%s): %zu communicators declared but no array", name,
				     path, n_comms);
	for (size_t i = 0; i < n_comms; i++) {
		const struct dli_comm_desc *c = mod->comms[i];
		if (!c || c->size < offsetof(struct dli_comm_desc, ops) + sizeof(void *) || !c->name ||
		    !*c->name || !c->ops)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): communicator #%zu is NULL, too small, "
					     "or has no name or ops table", name, path, i);
		const struct dli_comm_ops *o = c->ops;
		if (!DLI_HAS_MEMBER(o, struct dli_comm_ops, barrier) || !o->open || !o->rank ||
		    !o->world_size || !o->group_create || !o->allgather || !o->barrier)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): communicator '%s' lacks one of open, "
					     "rank, size, group_create, allgather, barrier", name, path,
					     c->name);
	}

	for (size_t i = 0; i < mod->n_loggers; i++) {
		const struct dli_logger_desc *l = mod->loggers[i];
		if (!l)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): logger #%zu is NULL", name, path, i);
		if (l->size < DLI_LOGGER_DESC_SIZE_1_0)
			return dli_error_set(err, -ENOEXEC, NULL,
					     "module '%s' (%s): logger #%zu has descriptor size %u, ABI %d "
					     "needs at least %zu", name, path, i, (unsigned)l->size,
					     DLI_ABI_MAJOR, (size_t)DLI_LOGGER_DESC_SIZE_1_0);
		if (!l->name || !*l->name)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): logger #%zu has no name", name, path, i);
		if (!l->ops)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): logger '%s' has no ops table", name, path,
					     l->name);
		if (!DLI_HAS_MEMBER(l->ops, struct dli_logger_ops, log_scalar))
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): logger '%s' has an ops table of size %u, "
					     "too small to hold create and log_scalar", name, path,
					     l->name, (unsigned)l->ops->size);
		if (!l->ops->create || !l->ops->log_scalar)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): logger '%s' lacks create or log_scalar", name,
					     path, l->name);
		if (l->n_params && !l->params)
			return dli_error_set(err, -EINVAL, NULL,
					     "module '%s' (%s): logger '%s' declares %zu params but no array",
					     name, path, l->name, l->n_params);
		size_t stride;
		int r = param_stride(mod, DLI_HAS_MEMBER(l, struct dli_logger_desc, param_size)
						       ? l->param_size : 0, l->n_params, &stride);
		if (r < 0)
			return dli_error_set(err, r, NULL,
					     "module '%s' (%s): logger '%s': %s", name, path, l->name,
					     param_stride_why(r));
	}
	return 0;
}

/* Opens `path`, calls its entry and checks what it returns. On success *m owns the handle and the
 * strings; on failure nothing stays open. */
static int dli_module_open(const struct dli_loader *loader, const char *path, const char *name,
			   const char *real, struct dli_loaded *m, struct dli_error *err)
{
	char why[512];
	int rc;

	memset(m, 0, sizeof(*m));
	m->path = strdup(path);
	m->name = strdup(name);
	m->real = strdup(real);
	if (!m->path || !m->name || !m->real) {
		dli_loaded_close(m);
		return dli_error_set(err, -ENOMEM, NULL, "out of memory loading %s", path);
	}

	pthread_mutex_lock(&dli_ltdl_lock);
	/* libltdl opens with RTLD_LAZY and says "file not found" for any failure. Opening with
	 * RTLD_NOW first makes a module with an unresolved function fail here, with dlerror()
	 * naming the symbol or the missing library, instead of loading and then killing the process
	 * at its first call, hours into training. The probe keeps the object mapped (and fully
	 * bound) until libltdl holds its own reference. */
	void *probe = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!probe) {
		const char *e = dlerror();
		snprintf(why, sizeof why, "%s", e ? e : "unknown dynamic linker error");
		pthread_mutex_unlock(&dli_ltdl_lock);
		dli_loaded_close(m);
		return dli_open_error(err, path, why);
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
	pthread_mutex_unlock(&dli_ltdl_lock);

	if (!m->handle) {
		dli_loaded_close(m);
		return dli_open_error(err, path, why);
	}
	if (!sym) {
		rc = dli_error_set(err, -ENOEXEC, NULL,
				   "%s is not a dlinspect module: it does not export %s (define it with "
				   "DLI_EXPORT, see dlinspect/plugin.h)", path, DLI_MODULE_ENTRY_NAME);
		dli_loaded_close(m);
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
		dli_loaded_close(m);
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
		dli_loaded_close(m);
	return rc;
}

static int dli_loaded_append(struct dli_loader *loader, struct dli_loaded *m, struct dli_error *err)
{
	if (loader->n_mods == loader->cap_mods) {
		size_t cap = loader->cap_mods ? loader->cap_mods * 2 : 8;
		struct dli_loaded *v = realloc(loader->mods, cap * sizeof(*v));
		if (!v) {
			int rc = dli_error_set(err, -ENOMEM, NULL, "out of memory loading %s", m->path);
			dli_loaded_close(m);
			return rc;
		}
		loader->mods = v;
		loader->cap_mods = cap;
	}
	loader->mods[loader->n_mods++] = *m;
	return 0;
}

/* The resolved path of `path` in *real (owned), or a copy of `path` when it cannot be resolved. */
static int dli_realpath(const char *path, char **real)
{
	*real = realpath(path, NULL);
	if (!*real && errno != ENOMEM)
		*real = strdup(path);
	return *real ? 0 : -ENOMEM;
}

/* Loads the module file at `path` unless a module of that name or that file is already loaded.
 * With `out`, *out says where it is (either way). With `ns`, a module not declaring that namespace
 * is closed again and *out is -1; `ns_seen` (optional) collects every namespace met. */
static int dli_load_file(struct dli_loader *loader, const char *path, const char *ns,
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
	if (!name || dli_realpath(path, &real) < 0)
		goto nomem;

	at = dli_loaded_find(loader, name, real);
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
	rc = dli_module_open(loader, path, name, real, &m, err);
	if (rc < 0)
		goto out;
	/* The note is how a namespace finds its modules: it must say what the descriptor says. */
	if (elf.has_ns && (!m.module->ns || strcmp(m.module->ns, elf.ns) != 0)) {
		rc = dli_error_set(err, -EINVAL, NULL,
				   "module '%s' (%s) declares namespace '%s' with DLI_MODULE_NAMESPACE but "
				   "'%s' in its descriptor", name, path, elf.ns,
				   m.module->ns ? m.module->ns : "(none)");
		dli_loaded_close(&m);
		goto out;
	}
	if (ns_seen && dli_strings_add(ns_seen, m.module->ns) < 0) {
		dli_loaded_close(&m);
		goto nomem;
	}
	if (ns && (!m.module->ns || strcmp(m.module->ns, ns) != 0)) {
		/* Opened only to read its namespace: not part of what was asked for. */
		dli_loaded_close(&m);
		goto out;
	}
	rc = dli_loaded_append(loader, &m, err);
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
	rc = dli_ltdl_acquire(err);
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
	struct dli_candidates c = {0};
	int rc = dli_candidates_collect(loader, &c);

	if (rc < 0)
		rc = dli_error_set(err, rc, NULL, "out of memory listing the plugin dirs");
	for (size_t i = 0; rc == 0 && i < c.n; i++) {
		/* A communicator loads only when picked (DLINSPECT_COMMUNICATOR): loading it would
		 * bring its library (MPI) into every run. Its namespace note says what it is. */
		struct dli_elf_info elf;
		if (dli_elf_inspect(c.v[i].path, &elf) == 0 && elf.has_ns &&
		    strcmp(elf.ns, DLI_COMM_NAMESPACE) == 0)
			continue;
		rc = dli_load_file(loader, c.v[i].path, NULL, NULL, NULL, err);
	}
	dli_candidates_finish(&c);
	return rc;
}

/* The -ENOENT message: what was looked for, where, and the nearest name seen. */
static int dli_not_found(const struct dli_loader *loader, const char *entry, const char *name,
			 const struct dli_candidates *c, const struct dli_strings *ns_seen,
			 struct dli_error *err)
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
	return dli_error_set(err, -ENOENT, NULL,
			     "extension '%s' not found: no module %s.so and no module of namespace "
			     "'%s' in %s%s%s", entry, name, name,
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
		return dli_load_file(loader, entry, NULL, NULL, NULL, err);
	}

	/* "x.so" means the module x: users write the file name too. */
	size_t len = strlen(entry);
	char *name = dli_is_module_file(entry) ? strndup(entry, len - 3) : strdup(entry);
	if (!name)
		return dli_error_set(err, -ENOMEM, NULL, "out of memory loading '%s'", entry);
	if (dli_loaded_find(loader, name, NULL) >= 0) {
		free(name);
		return 0;
	}

	int rc = 0;
	for (size_t d = 0; d < loader->n_dirs; d++) {
		char *path = dli_path_join(loader->dirs[d], name, ".so");
		if (!path) {
			free(name);
			return dli_error_set(err, -ENOMEM, NULL, "out of memory loading '%s'", entry);
		}
		bool found = dli_is_regular(path);
		if (found)
			rc = dli_load_file(loader, path, NULL, NULL, NULL, err);
		free(path);
		if (found) {
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
	rc = dli_candidates_collect(loader, &c);
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
		rc = dli_load_file(loader, c.v[i].path, name, NULL, &at, err);
		if (rc < 0)
			dli_error_prefix(err, NULL,
					 "no module %s.so, so '%s' was taken as a namespace; while "
					 "looking for it: ", name, name);
		else if (at >= 0)
			matched++;
	}
	if (rc == 0 && matched == 0)
		rc = dli_not_found(loader, entry, name, &c, &ns_seen, err);
	dli_strings_finish(&ns_seen);
	dli_candidates_finish(&c);
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

int dli_loader_open_backend(const char *const *dirs, size_t n_dirs, const char *file,
			    const char *symbol, void **handle, void **sym, struct dli_error *err)
{
	char *path = NULL, why[512];
	lt_dlhandle h = NULL;
	void *s = NULL;
	int rc;

	*handle = NULL;
	*sym = NULL;
	for (size_t d = 0; d < n_dirs && !path; d++) {
		if (!dirs[d] || !*dirs[d])
			continue;
		if (!(path = dli_path_join(dirs[d], file, "")))
			return dli_error_set(err, -ENOMEM, NULL, "out of memory loading %s", file);
		if (!dli_is_regular(path)) {
			free(path);
			path = NULL;
		}
	}
	if (!path) {
		char list[640] = "";
		for (size_t d = 0, off = 0; d < n_dirs && off < sizeof list; d++)
			off += (size_t)snprintf(list + off, sizeof list - off, "%s%s", d ? ", " : "",
						dirs[d] ? dirs[d] : "");
		return dli_error_set(err, -ENOENT, NULL, "no %s in %s%s", file,
				     n_dirs ? "the plugin dirs " : "an empty plugin path", list);
	}
	/* The same file policy as for modules: the backend is code from the plugin path too. */
	struct stat st;
	rc = 0;
	if (stat(path, &st) != 0 || (rc = dli_file_policy(path, &st, err)) < 0) {
		if (rc == 0)
			rc = dli_error_set(err, -errno, NULL, "cannot load %s: %s", path,
					   strerror(errno));
		free(path);
		return rc;
	}
	if ((rc = dli_ltdl_acquire(err)) < 0) {
		free(path);
		return rc;
	}
	pthread_mutex_lock(&dli_ltdl_lock);
	/* The same RTLD_NOW probe as for modules: a backend whose runtime library (libcudart) is
	 * missing must fail here with the linker's reason, not at its first call. */
	void *probe = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!probe) {
		const char *e = dlerror();
		snprintf(why, sizeof why, "%s", e ? e : "unknown dynamic linker error");
	} else {
		lt_dladvise advise;
		if (lt_dladvise_init(&advise) == 0) {
			if (lt_dladvise_local(&advise) == 0)
				h = lt_dlopenadvise(path, advise);
			lt_dladvise_destroy(&advise);
		}
		if (!h) {
			const char *e = lt_dlerror();
			snprintf(why, sizeof why, "libltdl: %s", e ? e : "unknown error");
		}
		s = h ? lt_dlsym(h, symbol) : NULL;
		if (h && !s)
			lt_dlclose(h);
		dlclose(probe);
	}
	pthread_mutex_unlock(&dli_ltdl_lock);

	if (!h)
		rc = dli_open_error(err, path, why);
	else if (!s)
		rc = dli_error_set(err, -ENOEXEC, NULL, "%s does not export %s", path, symbol);
	free(path);
	if (rc < 0) {
		dli_ltdl_release();
		return rc;
	}
	*handle = h;
	*sym = s;
	return 0;
}

void dli_loader_close_backend(void *handle)
{
	if (!handle)
		return;
	pthread_mutex_lock(&dli_ltdl_lock);
	lt_dlclose((lt_dlhandle)handle);
	pthread_mutex_unlock(&dli_ltdl_lock);
	dli_ltdl_release();
}

void dli_loader_destroy(struct dli_loader *loader)
{
	if (!loader)
		return;
	/* Reverse order of loading, like any unwinding. */
	for (size_t i = loader->n_mods; i-- > 0;)
		dli_loaded_close(&loader->mods[i]);
	free(loader->mods);
	for (size_t i = 0; i < loader->n_dirs; i++)
		free(loader->dirs[i]);
	free(loader->dirs);
	free(loader);
	dli_ltdl_release();
}
