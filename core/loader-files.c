/* What the loader reads before it loads anything: which files on the plugin path are
 * modules (regular files, owned safely, ELF objects defining the entry), and the namespace notes
 * read from them as data. */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error-private.h"
#include "loader-files-private.h"

bool dli_is_module_file(const char *file)
{
	size_t len = strlen(file);

	return len > 3 && strcmp(file + len - 3, ".so") == 0;
}

/* stat, not lstat: a symlink to a module is a module, a directory or fifo called x.so is not. */
bool dli_is_regular(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

const char *dli_irregular_kind(const char *path)
{
	struct stat st;

	if (lstat(path, &st) != 0)
		return NULL;
	if (stat(path, &st) != 0)
		return "a dangling symbolic link or a loop of links";
	if (S_ISREG(st.st_mode))
		return NULL;
	return S_ISDIR(st.st_mode)   ? "a directory"
	       : S_ISFIFO(st.st_mode) ? "a FIFO"
	       : S_ISCHR(st.st_mode)  ? "a character device"
	       : S_ISBLK(st.st_mode)  ? "a block device"
	       : S_ISSOCK(st.st_mode) ? "a socket"
				      : "not a regular file";
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


/* Whether the defined dynamic symbols of section `sh` (SHT_DYNSYM) include `want`. */
static bool elf_defines(const unsigned char *b, size_t len, const dli_elf_ehdr *eh,
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
static bool elf_note_ns(const unsigned char *b, size_t len, const dli_elf_shdr *sh, char *ns,
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
int dli_elf_inspect(const char *path, struct dli_elf_info *info)
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
				info->has_entry =
				    elf_defines(b, len, &eh, &sh, DLI_MODULE_ENTRY_NAME);
			else if (sh.sh_type == SHT_NOTE && !info->has_ns)
				info->has_ns = elf_note_ns(b, len, &sh, info->ns, sizeof info->ns);
		}
	}
	munmap((void *)b, len);
	return 0;
}

/* What makes a file on the plugin path loadable at all (docs/security.md): a regular file that
 * only its owner, this user or root, can change. */
int dli_file_policy(const char *path, const struct stat *st, struct dli_error *err)
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

char *dli_path_join(const char *dir, const char *file, const char *suffix)
{
	size_t n = strlen(dir) + strlen(file) + strlen(suffix) + 2;
	char *path = malloc(n);

	if (path)
		snprintf(path, n, "%s/%s%s", dir, file, suffix);
	return path;
}

int dli_strings_add(struct dli_strings *list, const char *s)
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

void dli_strings_finish(struct dli_strings *list)
{
	for (size_t i = 0; i < list->n; i++)
		free(list->v[i]);
	free(list->v);
}

void dli_candidates_finish(struct dli_candidates *c)
{
	for (size_t i = 0; i < c->n; i++) {
		free(c->v[i].name);
		free(c->v[i].path);
	}
	free(c->v);
}

static int candidate_cmp(const void *a, const void *b)
{
	return strcmp(((const struct dli_candidate *)a)->name, ((const struct dli_candidate *)b)->name);
}

static int candidates_push(struct dli_candidates *c, const char *dir, const char *file)
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
int dli_candidates_collect(char *const *dirs, size_t n_dirs, struct dli_candidates *c)
{
	for (size_t d = 0; d < n_dirs; d++) {
		DIR *dir = opendir(dirs[d]);
		if (!dir)
			continue;
		size_t first = c->n;
		struct dirent *ent;
		int rc = 0;
		while (rc == 0 && (ent = readdir(dir)) != NULL)
			if (dli_is_module_file(ent->d_name))
				rc = candidates_push(c, dirs[d], ent->d_name);
		closedir(dir);
		if (rc < 0)
			return rc;
		if (c->n > first) /* c->v is still NULL after a first dir without modules */
			qsort(c->v + first, c->n - first, sizeof(*c->v), candidate_cmp);
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
