/* torch.save's file format for a dict of tensors (see torch_file.h). The format, as PyTorch 2.x
 * writes and reads it: a zip archive of uncompressed records under one top directory
 * ("archive/"): data.pkl, a protocol-2 pickle of the object in which each tensor is a call of
 * torch._utils._rebuild_tensor_v2 (storage, offset, size, stride, requires_grad, hooks), its
 * storage a persistent id ('storage', torch.<Type>Storage, key, 'cpu', numel) whose bytes are the
 * record data/<key>; FP8 tensors, which have no typed storage class, go through
 * _rebuild_tensor_v3 with an UntypedStorage (numel in bytes) and the dtype last. Beside them:
 * byteorder ("little"), version ("3\n"), .format_version ("1") and .storage_alignment ("64").
 * torch.load's weights_only unpickler takes exactly these globals. */
#include "torch_file.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- CRC-32, eight bytes a step ---- */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
		crc_table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			crc_table[t][i] =
			    (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t dli_crc32(uint32_t crc, const void *data, size_t n)
{
	const unsigned char *p = data;

	pthread_once(&crc_once, crc_init);
	crc = ~crc;
	for (; n >= 8; n -= 8, p += 8) {
		uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
				     (uint32_t)p[3] << 24);
		crc = crc_table[7][lo & 0xff] ^ crc_table[6][lo >> 8 & 0xff] ^
		      crc_table[5][lo >> 16 & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^
		      crc_table[2][p[5]] ^ crc_table[1][p[6]] ^ crc_table[0][p[7]];
	}
	for (; n; n--, p++)
		crc = crc_table[0][(crc ^ *p) & 0xff] ^ (crc >> 8);
	return ~crc;
}

/* ---- A growing byte buffer, little-endian integers ---- */

struct buf {
	unsigned char *p;
	size_t n, cap;
	bool oom;
};

static void put(struct buf *b, const void *s, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n)
			cap *= 2;
		unsigned char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
}

static void put_le(struct buf *b, uint64_t v, int bytes)
{
	unsigned char c[8];
	for (int i = 0; i < bytes; i++)
		c[i] = (unsigned char)(v >> (8 * i));
	put(b, c, (size_t)bytes);
}

static void put_str(struct buf *b, const char *s)
{
	put(b, s, strlen(s));
}

/* ---- The pickle ---- */

/* The dtypes: safetensors name, typed storage class (NULL: untyped, through _rebuild_tensor_v3
 * with the dtype named), element size. */
static const struct {
	const char *name, *storage, *dtype;
	size_t size;
} dtypes[] = {
	{ "F32", "FloatStorage", NULL, 4 },      { "F16", "HalfStorage", NULL, 2 },
	{ "BF16", "BFloat16Storage", NULL, 2 },  { "F64", "DoubleStorage", NULL, 8 },
	{ "I8", "CharStorage", NULL, 1 },        { "U8", "ByteStorage", NULL, 1 },
	{ "I32", "IntStorage", NULL, 4 },        { "I64", "LongStorage", NULL, 8 },
	{ "F8_E4M3", NULL, "float8_e4m3fn", 1 }, { "F8_E5M2", NULL, "float8_e5m2", 1 },
};

static int dtype_index(const char *name)
{
	for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
		if (!strcmp(dtypes[i].name, name))
			return (int)i;
	return -1;
}

/* An int as the shortest of BININT1, BININT2, BININT and LONG1 (eight bytes). */
static void pk_int(struct buf *b, int64_t v)
{
	if (v >= 0 && v < 256) {
		put(b, "K", 1);
		put_le(b, (uint64_t)v, 1);
	} else if (v >= 0 && v < 65536) {
		put(b, "M", 1);
		put_le(b, (uint64_t)v, 2);
	} else if (v >= INT32_MIN && v <= INT32_MAX) {
		put(b, "J", 1);
		put_le(b, (uint64_t)v, 4);
	} else {
		put(b, "\x8a\x08", 2);
		put_le(b, (uint64_t)v, 8);
	}
}

/* BINUNICODE: the caller passes UTF-8 (the keys are the writer's own ASCII). */
static void pk_str(struct buf *b, const char *s)
{
	put(b, "X", 1);
	put_le(b, strlen(s), 4);
	put_str(b, s);
}

static void pk_global(struct buf *b, const char *module, const char *name)
{
	put(b, "c", 1);
	put_str(b, module);
	put(b, "\n", 1);
	put_str(b, name);
	put(b, "\n", 1);
}

static void pk_tuple(struct buf *b, const int64_t *v, int n)
{
	put(b, "(", 1);
	for (int i = 0; i < n; i++)
		pk_int(b, v[i]);
	put(b, "t", 1);
}

/* One tensor, its storage `key`. */
static void pk_tensor(struct buf *b, const struct dli_torch_entry *e, int d, size_t key)
{
	char k[32];
	int64_t stride[DLI_TENSOR_MAX_DIMS], numel = 1;

	/* torch's contiguous strides: an empty or size-1 dimension counts as 1 */
	for (int i = e->ndim - 1; i >= 0; i--) {
		stride[i] = numel;
		numel *= e->shape[i] > 1 ? e->shape[i] : 1;
	}
	pk_global(b, "torch._utils",
		  dtypes[d].storage ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3");
	put(b, "(", 1);
	put(b, "(", 1);
	pk_str(b, "storage");
	if (dtypes[d].storage)
		pk_global(b, "torch", dtypes[d].storage);
	else
		pk_global(b, "torch.storage", "UntypedStorage");
	snprintf(k, sizeof k, "%zu", key);
	pk_str(b, k);
	pk_str(b, "cpu");
	pk_int(b, (int64_t)(e->bytes / dtypes[d].size * (dtypes[d].storage ? 1 : dtypes[d].size)));
	put(b, "tQ", 2); /* the persistent id's tuple, BINPERSID */
	pk_int(b, 0);    /* storage offset */
	pk_tuple(b, e->shape, e->ndim);
	pk_tuple(b, stride, e->ndim);
	put(b, "\x89", 1); /* requires_grad: NEWFALSE */
	pk_global(b, "collections", "OrderedDict");
	put(b, ")R", 2); /* backward hooks: OrderedDict() */
	if (!dtypes[d].storage)
		pk_global(b, "torch", dtypes[d].dtype);
	put(b, "tR", 2);
}

/* ---- The zip archive ---- */

#define TOP   "archive/"
#define ALIGN 64

struct record {
	char name[48];
	uint32_t crc;
	uint64_t size, offset;
};

struct zip {
	int fd;
	uint64_t off;
	struct record *recs;
	size_t n;
};

int dli_dump_write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t r = write(fd, c, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO;
		c += r;
		n -= (size_t)r;
	}
	return 0;
}

static int zip_emit(struct zip *z, struct buf *b)
{
	if (b->oom)
		return -ENOMEM;
	int r = dli_dump_write_all(z->fd, b->p, b->n);
	z->off += b->n;
	b->n = 0;
	return r;
}

/* One stored record: its local header (zip64 sizes, then padding that puts the data on a multiple
 * of ALIGN), then the data. */
static int zip_record(struct zip *z, struct buf *b, const char *name, const void *data,
		      uint64_t size)
{
	struct record *rec = &z->recs[z->n++];
	size_t name_len = strlen(name);

	snprintf(rec->name, sizeof rec->name, "%s", name);
	rec->crc = 0;
	for (uint64_t done = 0; done < size;) {
		/* in pieces: size_t may be narrower than the record */
		size_t piece = size - done > (1u << 30) ? (1u << 30) : (size_t)(size - done);
		rec->crc = dli_crc32(rec->crc, (const char *)data + done, piece);
		done += piece;
	}
	rec->size = size;
	rec->offset = z->off;
	uint64_t end = z->off + 30 + name_len + 20;
	size_t pad = (size_t)((ALIGN - end % ALIGN) % ALIGN);
	if (pad && pad < 4)
		pad += ALIGN; /* an extra field takes at least its 4-byte header */
	put_le(b, 0x04034b50, 4);
	put_le(b, 45, 2);   /* version needed: zip64 */
	put_le(b, 0, 2);    /* flags */
	put_le(b, 0, 2);    /* stored */
	put_le(b, 0, 2);    /* time 00:00 */
	put_le(b, 0x21, 2); /* date 1980-01-01 */
	put_le(b, rec->crc, 4);
	put_le(b, 0xffffffffu, 4);
	put_le(b, 0xffffffffu, 4);
	put_le(b, name_len, 2);
	put_le(b, 20 + pad, 2);
	put_str(b, name);
	put_le(b, 1, 2); /* zip64 extra: the sizes */
	put_le(b, 16, 2);
	put_le(b, size, 8);
	put_le(b, size, 8);
	if (pad) {
		static const unsigned char zeros[ALIGN + 4];
		put_le(b, 0x4246, 2); /* a padding field of torch.save's own id ("FB") */
		put_le(b, pad - 4, 2);
		put(b, zeros, pad - 4);
	}
	int r = zip_emit(z, b);
	for (uint64_t done = 0; !r && done < size;) {
		size_t piece = size - done > (1u << 30) ? (1u << 30) : (size_t)(size - done);
		r = dli_dump_write_all(z->fd, (const char *)data + done, piece);
		done += piece;
	}
	z->off += size;
	return r;
}

/* The central directory and its zip64 end records. */
static int zip_finish(struct zip *z, struct buf *b)
{
	uint64_t cd = z->off;
	for (size_t i = 0; i < z->n; i++) {
		const struct record *rec = &z->recs[i];
		put_le(b, 0x02014b50, 4);
		put_le(b, 45, 2); /* made by */
		put_le(b, 45, 2); /* needed */
		put_le(b, 0, 2);
		put_le(b, 0, 2);
		put_le(b, 0, 2);
		put_le(b, 0x21, 2);
		put_le(b, rec->crc, 4);
		put_le(b, 0xffffffffu, 4);
		put_le(b, 0xffffffffu, 4);
		put_le(b, strlen(rec->name), 2);
		put_le(b, 28, 2); /* extra */
		put_le(b, 0, 2);  /* comment */
		put_le(b, 0, 2);  /* disk */
		put_le(b, 0, 2);  /* internal attributes */
		put_le(b, 0, 4);  /* external attributes */
		put_le(b, 0xffffffffu, 4);
		put_str(b, rec->name);
		put_le(b, 1, 2);
		put_le(b, 24, 2);
		put_le(b, rec->size, 8);
		put_le(b, rec->size, 8);
		put_le(b, rec->offset, 8);
	}
	uint64_t cd_size = z->off + b->n - cd, end64 = cd + cd_size;
	put_le(b, 0x06064b50, 4); /* zip64 end of central directory */
	put_le(b, 44, 8);
	put_le(b, 45, 2);
	put_le(b, 45, 2);
	put_le(b, 0, 4);
	put_le(b, 0, 4);
	put_le(b, z->n, 8);
	put_le(b, z->n, 8);
	put_le(b, cd_size, 8);
	put_le(b, cd, 8);
	put_le(b, 0x07064b50, 4); /* its locator */
	put_le(b, 0, 4);
	put_le(b, end64, 8);
	put_le(b, 1, 4);
	put_le(b, 0x06054b50, 4); /* the classic end record, pointing at the zip64 one */
	put_le(b, 0, 2);
	put_le(b, 0, 2);
	put_le(b, 0xffff, 2);
	put_le(b, 0xffff, 2);
	put_le(b, 0xffffffffu, 4);
	put_le(b, 0xffffffffu, 4);
	put_le(b, 0, 2);
	return zip_emit(z, b);
}

int dli_torch_file_write(int fd, const struct dli_torch_entry *entries, size_t n)
{
	struct buf pk = { 0 }, b = { 0 };
	struct zip z = { .fd = fd };
	char name[48];
	int r = 0;

	for (size_t i = 0; i < n; i++) {
		const struct dli_torch_entry *e = &entries[i];
		int d = dtype_index(e->dtype);
		if (d < 0 || e->ndim < 0 || e->ndim > DLI_TENSOR_MAX_DIMS)
			return -EINVAL;
		uint64_t numel = 1;
		for (int k = 0; k < e->ndim; k++) {
			if (e->shape[k] < 0 ||
			    (e->shape[k] && numel > UINT64_MAX / 8 / (uint64_t)e->shape[k]))
				return -EINVAL;
			numel *= (uint64_t)e->shape[k];
		}
		if (numel * dtypes[d].size != e->bytes)
			return -EINVAL;
	}
	if (!(z.recs = calloc(n + 5, sizeof *z.recs)))
		return -ENOMEM;
	put(&pk, "\x80\x02}(", 4); /* PROTO 2, EMPTY_DICT, MARK */
	for (size_t i = 0; i < n; i++) {
		pk_str(&pk, entries[i].key);
		pk_tensor(&pk, &entries[i], dtype_index(entries[i].dtype), i);
	}
	put(&pk, "u.", 2); /* SETITEMS, STOP */
	if (pk.oom) {
		r = -ENOMEM;
		goto out;
	}
	if ((r = zip_record(&z, &b, TOP "data.pkl", pk.p, pk.n)) ||
	    (r = zip_record(&z, &b, TOP ".format_version", "1", 1)) ||
	    (r = zip_record(&z, &b, TOP ".storage_alignment", "64", 2)) ||
	    (r = zip_record(&z, &b, TOP "byteorder", "little", 6)))
		goto out;
	for (size_t i = 0; i < n; i++) {
		snprintf(name, sizeof name, TOP "data/%zu", i);
		if ((r = zip_record(&z, &b, name, entries[i].data, entries[i].bytes)))
			goto out;
	}
	if ((r = zip_record(&z, &b, TOP "version", "3\n", 2)))
		goto out;
	r = zip_finish(&z, &b);
out:
	free(pk.p);
	free(b.p);
	free(z.recs);
	return r;
}
