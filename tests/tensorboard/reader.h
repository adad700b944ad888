/* A minimal TFRecord reader for the tests, written from the format rather than from the logger: it
 * checks both masked CRCs of every record and stops cleanly at a record cut short (as a file being
 * written, or cut by a full disk, ends). Events are decoded with the generated protobuf-c code. */
#ifndef DLI_TEST_TB_READER_H
#define DLI_TEST_TB_READER_H

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "event.pb-c.h"

struct tb_file {
	DliTb__Event **events; /* free with tb_file_free */
	size_t n;
	bool cut;     /* the file ends inside a record */
	bool corrupt; /* a CRC or an Event did not check: reading stopped there */
	size_t size;
};

static inline uint32_t tb_le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads every whole record of `path`; false when the file cannot be read at all. */
static inline bool tb_file_read(const char *path, struct tb_file *f)
{
	FILE *fp = fopen(path, "rb");
	unsigned char *data = NULL;
	size_t size = 0, cap = 0, got;

	memset(f, 0, sizeof *f);
	if (!fp)
		return false;
	do {
		if (size + 65536 > cap) {
			unsigned char *more = realloc(data, cap = size + 65536 * 4);
			if (!more) {
				free(data);
				fclose(fp);
				return false;
			}
			data = more;
		}
		got = fread(data + size, 1, cap - size, fp);
		size += got;
	} while (got > 0);
	fclose(fp);
	f->size = size;
	for (size_t off = 0; off < size;) {
		if (size - off < 12) {
			f->cut = true;
			break;
		}
		uint64_t len = tb_le32(data + off) | (uint64_t)tb_le32(data + off + 4) << 32;
		if (dli_crc32c_mask(dli_crc32c_extend_table(0, data + off, 8)) !=
		    tb_le32(data + off + 8)) {
			f->corrupt = true;
			break;
		}
		if (len > size - off - 12 || size - off - 12 - len < 4) {
			f->cut = true;
			break;
		}
		const unsigned char *body = data + off + 12;
		if (dli_crc32c_mask(dli_crc32c_extend_table(0, body, len)) != tb_le32(body + len)) {
			f->corrupt = true;
			break;
		}
		DliTb__Event *ev = dli_tb__event__unpack(NULL, len, body);
		if (!ev) {
			f->corrupt = true;
			break;
		}
		DliTb__Event **events = realloc(f->events, (f->n + 1) * sizeof *events);
		if (!events) {
			dli_tb__event__free_unpacked(ev, NULL);
			break;
		}
		f->events = events;
		f->events[f->n++] = ev;
		off += 12 + len + 4;
	}
	free(data);
	return true;
}

static inline void tb_file_free(struct tb_file *f)
{
	for (size_t i = 0; i < f->n; i++)
		dli_tb__event__free_unpacked(f->events[i], NULL);
	free(f->events);
	memset(f, 0, sizeof *f);
}

/* The names of the event files in `dir`, sorted; returns how many (at most `max`). Free each. */
static inline size_t tb_event_files(const char *dir, char **paths, size_t max)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)) && n < max) {
		if (strncmp(e->d_name, "events.out.tfevents.", 20) != 0)
			continue;
		size_t len = strlen(dir) + strlen(e->d_name) + 2;
		paths[n] = malloc(len);
		if (paths[n])
			snprintf(paths[n++], len, "%s/%s", dir, e->d_name);
	}
	closedir(d);
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && strcmp(paths[j - 1], paths[j]) > 0; j--) {
			char *t = paths[j];
			paths[j] = paths[j - 1];
			paths[j - 1] = t;
		}
	return n;
}

#endif
