/* Readers for .npy and .safetensors files. A file is mapped read-only and trusted for nothing:
 * every length, shape and offset is checked against the mapping before a view into it is handed
 * out, so a truncated or lying file gives an error message, never a read outside the file. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tensorfile.h"
#include "tools-api.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the readers hand out views of little-endian data as is: a big-endian host needs byte swaps"
#endif

/* The safetensors reference implementation refuses larger headers; so do we, before allocating. */
#define ST_MAX_HEADER (100u * 1000 * 1000)
/* Deep enough for any real __metadata__, shallow enough that recursion cannot exhaust the stack. */
#define JSON_MAX_DEPTH 64

const char *dli_tf_dtype_name(enum dli_dtype dtype)
{
	return dli_dtype_cli_name(dtype);
}

static const struct {
	const char *name;
	size_t size;
} wide_kinds[DLI_TF_WIDE_COUNT] = {
	[DLI_TF_WIDE_F64] = {"f64", 8}, [DLI_TF_WIDE_I8] = {"i8", 1},   [DLI_TF_WIDE_I16] = {"i16", 2},
	[DLI_TF_WIDE_I32] = {"i32", 4}, [DLI_TF_WIDE_I64] = {"i64", 8}, [DLI_TF_WIDE_U8] = {"u8", 1},
	[DLI_TF_WIDE_U16] = {"u16", 2}, [DLI_TF_WIDE_U32] = {"u32", 4}, [DLI_TF_WIDE_U64] = {"u64", 8},
	[DLI_TF_WIDE_BOOL] = {"bool", 1},
};

size_t dli_tf_wide_size(enum dli_tf_wide wide)
{
	return (unsigned)wide < DLI_TF_WIDE_COUNT ? wide_kinds[wide].size : 0;
}

const char *dli_tf_wide_name(enum dli_tf_wide wide)
{
	return (unsigned)wide < DLI_TF_WIDE_COUNT ? wide_kinds[wide].name : NULL;
}

const char *dli_tf_tensor_dtype_name(const struct dli_tf_tensor *t)
{
	return t->wide ? dli_tf_wide_name(t->wide) : dli_tf_dtype_name(t->dtype);
}

/* The element size of a supported tensor. */
static size_t elem_size(const struct dli_tf_tensor *t)
{
	return t->wide ? dli_tf_wide_size(t->wide) : dli_dtype_size(t->dtype);
}

int dli_tf_dtype_from_name(const char *name)
{
	for (int i = 0; i < DLI_DTYPE_COUNT; i++)
		if (dli_dtype_cli_name(i) && !strcmp(name, dli_dtype_cli_name(i)))
			return i;
	return -1;
}

static uint64_t le64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* shape product and byte size, refusing anything that does not fit in int64 / uint64. */
static int shape_size(struct dli_tf_tensor *t, size_t elsize, struct dli_error *err)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; i++) {
		if (t->shape[i] < 0)
			return dli_error_set(err, -EINVAL, NULL, "negative dimension in the shape");
		if (t->shape[i] && n > INT64_MAX / t->shape[i])
			return dli_error_set(err, -EOVERFLOW, NULL,
					     "shape has more than 2^63 elements (overflow)");
		n *= t->shape[i];
	}
	t->numel = n;
	if (elsize && (uint64_t)n > UINT64_MAX / elsize)
		return dli_error_set(err, -EOVERFLOW, NULL,
				     "shape is larger than 2^64 bytes (overflow)");
	t->nbytes = (uint64_t)n * elsize;
	return 0;
}

/* Appends "[2, 3]" for the shape. */
static void shape_text(const struct dli_tf_tensor *t, char *buf, size_t size)
{
	size_t off = 0;
	buf[0] = '\0';
	for (int i = 0; i < t->ndim && off < size; i++)
		off += (size_t)snprintf(buf + off, size - off, "%s%lld", i ? ", " : "",
					(long long)t->shape[i]);
}

static size_t utf8_len(const unsigned char *s, size_t n);

/* ---- .npy ---- */

/* The header is a Python dict literal as numpy writes it: {'descr': '<f4', 'fortran_order':
 * False, 'shape': (2, 3), } padded with spaces and a newline. It is parsed as exactly that grammar
 * (quoted keys, a quoted descr, True/False, a tuple of non-negative integers), not evaluated. */
struct npy_parser {
	const char *s;
	size_t n, i;
	struct dli_error *err;
};

static int npy_fail(struct npy_parser *p, const char *what)
{
	return dli_error_set(p->err, -EINVAL, NULL, "bad .npy header at byte %zu of the header: %s",
			     p->i, what);
}

static void npy_ws(struct npy_parser *p)
{
	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
			       p->s[p->i] == '\r'))
		p->i++;
}

static bool npy_eat(struct npy_parser *p, char c)
{
	npy_ws(p);
	if (p->i < p->n && p->s[p->i] == c) {
		p->i++;
		return true;
	}
	return false;
}

/* A quoted string without escapes (nothing numpy writes needs one) into buf. */
static int npy_string(struct npy_parser *p, char *buf, size_t size)
{
	npy_ws(p);
	if (p->i >= p->n || (p->s[p->i] != '\'' && p->s[p->i] != '"'))
		return npy_fail(p, "expected a quoted string");
	char q = p->s[p->i++];
	size_t len = 0;
	while (p->i < p->n && p->s[p->i] != q) {
		unsigned char c = (unsigned char)p->s[p->i];
		if (c == '\\' || c < 0x20 || c >= 0x7f)
			return npy_fail(p, "unexpected character in a string");
		if (len + 1 >= size)
			return npy_fail(p, "string too long");
		buf[len++] = (char)c;
		p->i++;
	}
	if (p->i >= p->n)
		return npy_fail(p, "unterminated string");
	p->i++;
	buf[len] = '\0';
	return 0;
}

static int npy_shape(struct npy_parser *p, struct dli_tf_tensor *t)
{
	if (!npy_eat(p, '('))
		return npy_fail(p, "shape is not a tuple");
	int64_t dims[DLI_TF_MAX_DIMS];
	int n = 0;
	bool comma = false;
	for (;;) {
		npy_ws(p);
		if (npy_eat(p, ')'))
			break;
		if (n && !comma)
			return npy_fail(p, "expected ',' or ')' in the shape");
		if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
			return npy_fail(p, "shape entries must be non-negative integers");
		int64_t v = 0;
		while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
			int d = p->s[p->i++] - '0';
			if (v > (INT64_MAX - d) / 10)
				return npy_fail(p, "shape entry larger than 2^63");
			v = v * 10 + d;
		}
		if (n == DLI_TF_MAX_DIMS)
			return npy_fail(p, "more than 64 dimensions");
		dims[n++] = v;
		comma = npy_eat(p, ',');
	}
	/* (5) is the integer 5 in Python, not a tuple: numpy itself refuses it. */
	if (n == 1 && !comma)
		return npy_fail(p, "a one-element shape needs a trailing comma: (n,)");
	t->ndim = n;
	if (n) {
		t->shape = malloc((size_t)n * sizeof *t->shape);
		if (!t->shape)
			return dli_error_set(p->err, -ENOMEM, NULL, "out of memory");
		memcpy(t->shape, dims, (size_t)n * sizeof *dims);
	}
	return 0;
}

/* Which dtype `descr` is read as, given --dtype. Raw 2- and 1-byte elements (how numpy stores
 * bfloat16 and FP8 without ml_dtypes, and how ml_dtypes' own types land in a .npy) need --dtype. */
static int npy_dtype(struct dli_tf_tensor *t, const char *descr, int as_dtype,
		     struct dli_error *err)
{
	static const char *const raw2[] = {"<u2", "=u2", "<i2", "=i2", "<V2", "|V2", "V2"};
	static const char *const raw1[] = {"|u1", "<u1", "=u1", "u1", "|i1", "i1", "|V1", "<V1",
					   "V1",  "<f1", "|f1"};
	/* Read as they are: float64 (numpy's default), 4- and 8-byte integers, bool. */
	static const struct {
		const char *descr;
		enum dli_tf_wide wide;
	} wide[] = {
		{"<f8", DLI_TF_WIDE_F64}, {"=f8", DLI_TF_WIDE_F64}, {"<i4", DLI_TF_WIDE_I32},
		{"=i4", DLI_TF_WIDE_I32}, {"<i8", DLI_TF_WIDE_I64}, {"=i8", DLI_TF_WIDE_I64},
		{"<u4", DLI_TF_WIDE_U32}, {"=u4", DLI_TF_WIDE_U32}, {"<u8", DLI_TF_WIDE_U64},
		{"=u8", DLI_TF_WIDE_U64}, {"|b1", DLI_TF_WIDE_BOOL}, {"b1", DLI_TF_WIDE_BOOL},
	};
	int natural = -1;
	size_t rawsize = 0;
	for (size_t i = 0; i < sizeof wide / sizeof *wide; i++) {
		if (!strcmp(descr, wide[i].descr)) {
			if (as_dtype >= 0 && as_dtype != DLI_TF_AS_INT)
				return dli_error_set(err, -EINVAL, NULL,
						     "--dtype %s does not apply to dtype '%s' (read as "
						     "%s)",
						     dli_tf_dtype_name((enum dli_dtype)as_dtype), descr,
						     dli_tf_wide_name(wide[i].wide));
			if (as_dtype == DLI_TF_AS_INT && wide[i].wide == DLI_TF_WIDE_F64)
				return dli_error_set(err, -EINVAL, NULL,
						     "--dtype int does not apply to dtype '%s' (float64)",
						     descr);
			t->wide = wide[i].wide;
			return 0;
		}
	}
	if (!strcmp(descr, "<f4") || !strcmp(descr, "=f4"))
		natural = DLI_DTYPE_F32;
	else if (!strcmp(descr, "<f2") || !strcmp(descr, "=f2"))
		natural = DLI_DTYPE_F16;
	for (size_t i = 0; i < sizeof raw2 / sizeof *raw2; i++)
		if (!strcmp(descr, raw2[i]))
			rawsize = 2;
	for (size_t i = 0; i < sizeof raw1 / sizeof *raw1; i++)
		if (!strcmp(descr, raw1[i]))
			rawsize = 1;
	if (natural < 0 && !rawsize) {
		if (descr[0] == '>' && descr[1] && strchr("fiuV", descr[1]))
			return dli_error_set(err, -ENOTSUP, NULL,
					     "dtype '%s' is big-endian, which is not supported", descr);
		return dli_error_set(err, -ENOTSUP, NULL,
				     "dtype '%s' is not supported (float64 '<f8', float32 '<f4', "
				     "float16 '<f2', integers, bool; bfloat16 as '<u2' or FP8 as '|u1' "
				     "with --dtype)",
				     descr);
	}
	/* 'i'/'u' after the byte-order character; void and 'f1' bytes are no integers. */
	char kind = descr[0] == '<' || descr[0] == '=' || descr[0] == '|' ? descr[1] : descr[0];
	bool integers = kind == 'i' || kind == 'u';
	if (as_dtype == DLI_TF_AS_INT) {
		if (natural >= 0 || !integers)
			return dli_error_set(err, -EINVAL, NULL,
					     "--dtype int does not apply to dtype '%s' (not integers)",
					     descr);
		t->wide = rawsize == 2 ? (kind == 'i' ? DLI_TF_WIDE_I16 : DLI_TF_WIDE_U16)
				       : (kind == 'i' ? DLI_TF_WIDE_I8 : DLI_TF_WIDE_U8);
		return 0;
	}
	if (as_dtype < 0) {
		if (natural >= 0) {
			t->dtype = (enum dli_dtype)natural;
			return 0;
		}
		if (rawsize == 2)
			return dli_error_set(err, -EINVAL, NULL,
					     "dtype '%s' holds raw 16-bit values: pass --dtype bf16 "
					     "to read them as bfloat16 (or --dtype f16%s)",
					     descr, integers ? ", or --dtype int for integers" : "");
		return dli_error_set(err, -EINVAL, NULL,
				     "dtype '%s' holds raw bytes: pass --dtype e4m3 or --dtype e5m2 to "
				     "read them as FP8%s",
				     descr, integers ? " (or --dtype int for integers)" : "");
	}
	size_t want = dli_dtype_size((enum dli_dtype)as_dtype);
	if ((natural >= 0 && natural != as_dtype) || (natural < 0 && want != rawsize))
		return dli_error_set(err, -EINVAL, NULL,
				     "--dtype %s does not apply to dtype '%s' (%zu-byte elements)",
				     dli_tf_dtype_name((enum dli_dtype)as_dtype), descr,
				     natural >= 0 ? dli_dtype_size((enum dli_dtype)natural) : rawsize);
	t->dtype = (enum dli_dtype)as_dtype;
	t->reinterpreted = natural < 0;
	return 0;
}

static int npy_read(struct dli_tensorfile *tf, const char *path, int as_dtype,
		    struct dli_error *err)
{
	const unsigned char *b = tf->map;
	size_t size = tf->size;
	if (size < 10)
		return dli_error_set(err, -EINVAL, NULL, "truncated .npy file (%zu bytes)", size);
	unsigned major = b[6], minor = b[7];
	size_t hlen, pre;
	if (major == 1 && minor == 0) {
		hlen = (size_t)b[8] | (size_t)b[9] << 8;
		pre = 10;
	} else if ((major == 2 || major == 3) && minor == 0) {
		if (size < 12)
			return dli_error_set(err, -EINVAL, NULL, "truncated .npy file (%zu bytes)",
					     size);
		hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
		pre = 12;
	} else {
		return dli_error_set(err, -ENOTSUP, NULL,
				     "unsupported .npy format version %u.%u (1.0, 2.0 and 3.0 are read)",
				     major, minor);
	}
	if (hlen > size - pre)
		return dli_error_set(err, -EINVAL, NULL,
				     "truncated .npy file: the header is %zu bytes but only %zu follow",
				     hlen, size - pre);

	struct dli_tf_tensor *t = calloc(1, sizeof *t);
	if (!t)
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	tf->tensors = t;
	tf->n_tensors = 1;

	struct npy_parser p = {(const char *)b + pre, hlen, 0, err};
	char key[32], descr[32] = "";
	bool seen_descr = false, seen_fo = false, seen_shape = false;
	int r;
	if (!npy_eat(&p, '{'))
		return npy_fail(&p, "expected '{'");
	for (;;) {
		if (npy_eat(&p, '}'))
			break;
		if ((r = npy_string(&p, key, sizeof key)))
			return r;
		if (!npy_eat(&p, ':'))
			return npy_fail(&p, "expected ':'");
		bool *seen;
		if (!strcmp(key, "descr")) {
			seen = &seen_descr;
			if ((r = npy_string(&p, descr, sizeof descr)))
				return r;
		} else if (!strcmp(key, "fortran_order")) {
			seen = &seen_fo;
			npy_ws(&p);
			if (p.n - p.i >= 4 && !memcmp(p.s + p.i, "True", 4)) {
				t->fortran_order = true;
				p.i += 4;
			} else if (p.n - p.i >= 5 && !memcmp(p.s + p.i, "False", 5)) {
				p.i += 5;
			} else {
				return npy_fail(&p, "fortran_order must be True or False");
			}
		} else if (!strcmp(key, "shape")) {
			seen = &seen_shape;
			if (seen_shape)
				return npy_fail(&p, "duplicate key 'shape'");
			if ((r = npy_shape(&p, t)))
				return r;
		} else {
			return dli_error_set(err, -EINVAL, NULL,
					     "bad .npy header: unexpected key '%s' (a structured "
					     "array? only descr, fortran_order and shape are read)",
					     key);
		}
		if (*seen)
			return dli_error_set(err, -EINVAL, NULL, "bad .npy header: duplicate key '%s'",
					     key);
		*seen = true;
		if (!npy_eat(&p, ',')) {
			if (!npy_eat(&p, '}'))
				return npy_fail(&p, "expected ',' or '}'");
			break;
		}
	}
	npy_ws(&p);
	if (p.i != p.n)
		return npy_fail(&p, "unexpected text after the dict");
	if (!seen_descr || !seen_fo || !seen_shape)
		return dli_error_set(err, -EINVAL, NULL, "bad .npy header: no '%s' key",
				     !seen_descr ? "descr" : !seen_fo ? "fortran_order" : "shape");

	t->file_dtype = strdup(descr);
	/* The tensor is named after the file: "dir/w.npy" -> "w". */
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	size_t blen = strlen(base);
	if (blen > 4 && !strcmp(base + blen - 4, ".npy"))
		blen -= 4;
	t->name = strndup(base, blen);
	if (!t->file_dtype || !t->name)
		return dli_error_set(err, -ENOMEM, NULL, "out of memory");
	/* File names are bytes; the name goes into JSON output, which must be UTF-8. */
	for (size_t i = 0; i < blen;) {
		size_t l = utf8_len((const unsigned char *)t->name + i, blen - i);
		if (!l)
			t->name[i] = '?', l = 1;
		i += l;
	}
	if ((r = npy_dtype(t, descr, as_dtype, err)))
		return r;
	t->supported = true;
	if ((r = shape_size(t, elem_size(t), err)))
		return r;
	size_t avail = size - pre - hlen;
	if (t->nbytes != avail) {
		char shape[256];
		shape_text(t, shape, sizeof shape);
		return dli_error_set(err, -EINVAL, NULL,
				     "%s: shape (%s%s) of '%s' needs %llu bytes of data, the file has "
				     "%zu",
				     t->nbytes > avail ? "truncated data" : "size mismatch", shape,
				     t->ndim == 1 ? "," : "", descr, (unsigned long long)t->nbytes,
				     avail);
	}
	t->data = b + pre + hlen;
	return 0;
}

/* ---- JSON (the safetensors header) ---- */

/* A strict RFC 8259 parser over the header bytes: no comments, no trailing commas, no NaN;
 * strings must be valid UTF-8 (raw bytes, or \u escapes with paired surrogates). It parses in
 * place and keeps nothing but what the caller asks for, so a 100 MB header costs no extra memory. */
struct json {
	const unsigned char *s;
	size_t n, i;
	int depth;
	struct dli_error *err;
};

static int json_fail(struct json *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int json_fail(struct json *j, const char *fmt, ...)
{
	char text[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	return dli_error_set(j->err, -EINVAL, NULL,
			     "bad safetensors header at byte %zu of the JSON: %s", j->i, text);
}

static void json_ws(struct json *j)
{
	while (j->i < j->n && (j->s[j->i] == ' ' || j->s[j->i] == '\t' || j->s[j->i] == '\n' ||
			       j->s[j->i] == '\r'))
		j->i++;
}

static bool json_eat(struct json *j, char c)
{
	json_ws(j);
	if (j->i < j->n && j->s[j->i] == (unsigned char)c) {
		j->i++;
		return true;
	}
	return false;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 (overlong forms, surrogates and code points
 * above U+10FFFF are invalid). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t len;
	unsigned cp, min;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2, cp = c & 0x1f, min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3, cp = c & 0x0f, min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4, cp = c & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (len > n)
		return 0;
	for (size_t k = 1; k < len; k++) {
		if ((s[k] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[k] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

static int hex4(const unsigned char *s, unsigned *out)
{
	unsigned v = 0;
	for (int k = 0; k < 4; k++) {
		unsigned c = s[k], d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return -1;
		v = v << 4 | d;
	}
	*out = v;
	return 0;
}

/* A string; with out != NULL its decoded text (NUL-terminated, owned by the caller; *len excludes
 * the NUL, and a decoded \u0000 shows as *len != strlen). */
static int json_string(struct json *j, char **out, size_t *len)
{
	json_ws(j);
	if (j->i >= j->n || j->s[j->i] != '"')
		return json_fail(j, "expected a string");
	j->i++;
	size_t start = j->i;
	/* The decoded text is never longer than the source: a first pass finds the end. */
	size_t end = start;
	while (end < j->n && j->s[end] != '"') {
		if (j->s[end] == '\\')
			end++;
		end++;
	}
	if (end >= j->n) {
		j->i = j->n;
		return json_fail(j, "unterminated string");
	}
	char *buf = NULL;
	size_t o = 0;
	if (out) {
		buf = malloc(end - start + 1);
		if (!buf)
			return dli_error_set(j->err, -ENOMEM, NULL, "out of memory");
	}
	while (j->s[j->i] != '"') {
		unsigned char c = j->s[j->i];
		if (c < 0x20) {
			free(buf);
			return json_fail(j, "control character in a string");
		}
		if (c != '\\') {
			size_t l = utf8_len(j->s + j->i, end - j->i);
			if (!l) {
				free(buf);
				return json_fail(j, "string is not valid UTF-8");
			}
			if (buf)
				memcpy(buf + o, j->s + j->i, l);
			o += l;
			j->i += l;
			continue;
		}
		j->i++;
		c = j->s[j->i++];
		static const char esc[] = "\"\\/bfnrt", map[] = "\"\\/\b\f\n\r\t";
		const char *simple = c ? strchr(esc, c) : NULL;
		if (simple) {
			if (buf)
				buf[o] = map[simple - esc];
			o++;
			continue;
		}
		unsigned cp, lo;
		if (c != 'u' || end - j->i < 4 || hex4(j->s + j->i, &cp)) {
			j->i--;
			free(buf);
			return json_fail(j, "bad escape in a string");
		}
		j->i += 4;
		if (cp >= 0xdc00 && cp <= 0xdfff) {
			free(buf);
			return json_fail(j, "unpaired UTF-16 surrogate in a string");
		}
		if (cp >= 0xd800 && cp <= 0xdbff) {
			if (end - j->i < 6 || j->s[j->i] != '\\' || j->s[j->i + 1] != 'u' ||
			    hex4(j->s + j->i + 2, &lo) || lo < 0xdc00 || lo > 0xdfff) {
				free(buf);
				return json_fail(j, "unpaired UTF-16 surrogate in a string");
			}
			j->i += 6;
			cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
		}
		/* Encoded as UTF-8: never longer than the 6 (or 12) escape bytes it came from. */
		unsigned char u[4];
		size_t ul;
		if (cp < 0x80) {
			u[0] = (unsigned char)cp, ul = 1;
		} else if (cp < 0x800) {
			u[0] = (unsigned char)(0xc0 | cp >> 6);
			u[1] = (unsigned char)(0x80 | (cp & 0x3f));
			ul = 2;
		} else if (cp < 0x10000) {
			u[0] = (unsigned char)(0xe0 | cp >> 12);
			u[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
			u[2] = (unsigned char)(0x80 | (cp & 0x3f));
			ul = 3;
		} else {
			u[0] = (unsigned char)(0xf0 | cp >> 18);
			u[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
			u[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
			u[3] = (unsigned char)(0x80 | (cp & 0x3f));
			ul = 4;
		}
		if (buf)
			memcpy(buf + o, u, ul);
		o += ul;
	}
	j->i++;
	if (buf) {
		buf[o] = '\0';
		*out = buf;
	}
	if (len)
		*len = o;
	return 0;
}

/* A number; *is_uint and *u are set when it is a non-negative integer without fraction or exponent
 * that fits in 63 bits (the only numbers a safetensors header uses). */
static int json_number(struct json *j, bool *is_uint, uint64_t *u)
{
	json_ws(j);
	size_t i = j->i;
	bool neg = false, frac = false, big = false;
	uint64_t v = 0;
	if (i < j->n && j->s[i] == '-')
		neg = true, i++;
	if (i >= j->n || j->s[i] < '0' || j->s[i] > '9')
		return json_fail(j, "expected a value");
	if (j->s[i] == '0' && i + 1 < j->n && j->s[i + 1] >= '0' && j->s[i + 1] <= '9')
		return json_fail(j, "number with a leading zero");
	while (i < j->n && j->s[i] >= '0' && j->s[i] <= '9') {
		unsigned d = j->s[i++] - '0';
		if (v > ((uint64_t)INT64_MAX - d) / 10)
			big = true;
		else
			v = v * 10 + d;
	}
	if (i < j->n && j->s[i] == '.') {
		frac = true;
		if (++i >= j->n || j->s[i] < '0' || j->s[i] > '9') {
			j->i = i;
			return json_fail(j, "digit expected after '.'");
		}
		while (i < j->n && j->s[i] >= '0' && j->s[i] <= '9')
			i++;
	}
	if (i < j->n && (j->s[i] == 'e' || j->s[i] == 'E')) {
		frac = true;
		i++;
		if (i < j->n && (j->s[i] == '+' || j->s[i] == '-'))
			i++;
		if (i >= j->n || j->s[i] < '0' || j->s[i] > '9') {
			j->i = i;
			return json_fail(j, "digit expected in the exponent");
		}
		while (i < j->n && j->s[i] >= '0' && j->s[i] <= '9')
			i++;
	}
	j->i = i;
	if (is_uint)
		*is_uint = !neg && !frac && !big;
	if (u)
		*u = v;
	return 0;
}

static int json_skip(struct json *j);

static int json_skip_container(struct json *j, char close, bool object)
{
	if (++j->depth > JSON_MAX_DEPTH)
		return json_fail(j, "nested deeper than %d levels", JSON_MAX_DEPTH);
	int r;
	if (!json_eat(j, close)) {
		do {
			if (object) {
				if ((r = json_string(j, NULL, NULL)))
					return r;
				if (!json_eat(j, ':'))
					return json_fail(j, "expected ':'");
			}
			if ((r = json_skip(j)))
				return r;
		} while (json_eat(j, ','));
		if (!json_eat(j, close))
			return json_fail(j, "expected ',' or '%c'", close);
	}
	j->depth--;
	return 0;
}

/* Validates and skips any value. */
static int json_skip(struct json *j)
{
	json_ws(j);
	if (j->i >= j->n)
		return json_fail(j, "unexpected end of the header");
	switch (j->s[j->i]) {
	case '{':
		j->i++;
		return json_skip_container(j, '}', true);
	case '[':
		j->i++;
		return json_skip_container(j, ']', false);
	case '"':
		return json_string(j, NULL, NULL);
	case 't':
	case 'f':
	case 'n': {
		static const char *const words[] = {"true", "false", "null"};
		for (int k = 0; k < 3; k++) {
			size_t l = strlen(words[k]);
			if (j->n - j->i >= l && !memcmp(j->s + j->i, words[k], l)) {
				j->i += l;
				return 0;
			}
		}
		return json_fail(j, "expected a value");
	}
	default:
		return json_number(j, NULL, NULL);
	}
}

/* An object's key and the ':' after it; *out as json_string gives it, NULL on failure. */
static int json_key(struct json *j, char **out, size_t *len)
{
	int r = json_string(j, out, len);
	if (r)
		return r;
	if (!json_eat(j, ':')) {
		free(*out);
		*out = NULL;
		return json_fail(j, "expected ':'");
	}
	return 0;
}

/* [u, u, ...] of non-negative integers into out[0..max); *count is how many. */
static int json_uint_array(struct json *j, const char *what, uint64_t *out, int max, int *count)
{
	if (!json_eat(j, '['))
		return json_fail(j, "%s must be an array", what);
	int n = 0, r;
	if (!json_eat(j, ']')) {
		do {
			bool ok;
			uint64_t v;
			if ((r = json_number(j, &ok, &v)))
				return r;
			if (!ok)
				return json_fail(j, "%s entries must be integers in [0, 2^63)", what);
			if (n == max)
				return json_fail(j, "%s has more than %d entries", what, max);
			out[n++] = v;
		} while (json_eat(j, ','));
		if (!json_eat(j, ']'))
			return json_fail(j, "expected ',' or ']' in %s", what);
	}
	*count = n;
	return 0;
}

/* ---- .safetensors ---- */

struct st_dtype {
	const char *name;
	size_t size;
	int dtype; /* -1: known size, but not read by the statistics (unless `wide`) */
	enum dli_tf_wide wide;
};

/* Every dtype the safetensors format defines with a whole-byte size: those not read still have
 * their offsets checked, so a file is validated as a whole. */
static const struct st_dtype st_dtypes[] = {
	{"F32", 4, DLI_DTYPE_F32, DLI_TF_WIDE_NONE},
	{"F16", 2, DLI_DTYPE_F16, DLI_TF_WIDE_NONE},
	{"BF16", 2, DLI_DTYPE_BF16, DLI_TF_WIDE_NONE},
	{"F8_E4M3", 1, DLI_DTYPE_F8E4M3, DLI_TF_WIDE_NONE},
	{"F8_E5M2", 1, DLI_DTYPE_F8E5M2, DLI_TF_WIDE_NONE},
	{"F64", 8, -1, DLI_TF_WIDE_F64}, {"I64", 8, -1, DLI_TF_WIDE_I64},
	{"U64", 8, -1, DLI_TF_WIDE_U64}, {"C64", 8, -1, DLI_TF_WIDE_NONE},
	{"I32", 4, -1, DLI_TF_WIDE_I32}, {"U32", 4, -1, DLI_TF_WIDE_U32},
	{"I16", 2, -1, DLI_TF_WIDE_I16}, {"U16", 2, -1, DLI_TF_WIDE_U16},
	{"I8", 1, -1, DLI_TF_WIDE_I8},   {"U8", 1, -1, DLI_TF_WIDE_U8},
	{"BOOL", 1, -1, DLI_TF_WIDE_BOOL}, {"F8_E8M0", 1, -1, DLI_TF_WIDE_NONE},
};

/* Offsets of one tensor, relative to the data buffer, for the overlap check. */
struct st_range {
	uint64_t begin, end;
	size_t index;
};

static int range_cmp(const void *a, const void *b)
{
	const struct st_range *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

static int name_cmp(const void *a, const void *b)
{
	const struct dli_tf_tensor *const *x = a, *const *y = b;
	return strcmp((*x)->name, (*y)->name);
}

/* One {"dtype": ..., "shape": [...], "data_offsets": [b, e]} object into *t (name already set). */
static int st_info(struct json *j, struct dli_tf_tensor *t, uint64_t *offsets)
{
	if (!json_eat(j, '{'))
		return json_fail(j, "tensor '%s': expected an object", t->name);
	bool seen_dtype = false, seen_shape = false, seen_off = false;
	int r;
	if (!json_eat(j, '}')) {
		do {
			char *key;
			if ((r = json_key(j, &key, NULL)))
				return r;
			bool *seen = NULL;
			if (!strcmp(key, "dtype"))
				seen = &seen_dtype;
			else if (!strcmp(key, "shape"))
				seen = &seen_shape;
			else if (!strcmp(key, "data_offsets"))
				seen = &seen_off;
			if (seen && *seen) {
				r = json_fail(j, "tensor '%s': duplicate key '%s'", t->name, key);
				goto fail;
			}
			if (seen)
				*seen = true;
			if (seen == &seen_dtype) {
				if ((r = json_string(j, &t->file_dtype, NULL)))
					goto fail;
			} else if (seen == &seen_shape) {
				uint64_t dims[DLI_TF_MAX_DIMS];
				int n;
				if ((r = json_uint_array(j, "shape", dims, DLI_TF_MAX_DIMS, &n)))
					goto fail;
				if (n) {
					t->shape = malloc((size_t)n * sizeof *t->shape);
					if (!t->shape) {
						r = dli_error_set(j->err, -ENOMEM, NULL, "out of memory");
						goto fail;
					}
					for (int k = 0; k < n; k++)
						t->shape[k] = (int64_t)dims[k];
				}
				t->ndim = n;
			} else if (seen == &seen_off) {
				int n;
				if ((r = json_uint_array(j, "data_offsets", offsets, 2, &n)))
					goto fail;
				if (n != 2) {
					r = json_fail(j, "tensor '%s': data_offsets must be [begin, end]",
						      t->name);
					goto fail;
				}
			} else if ((r = json_skip(j))) {
				/* Other keys are ignored, as the reference implementation does. */
				goto fail;
			}
			free(key);
			continue;
		fail:
			free(key);
			return r;
		} while (json_eat(j, ','));
		if (!json_eat(j, '}'))
			return json_fail(j, "expected ',' or '}'");
	}
	if (!seen_dtype || !seen_shape || !seen_off)
		return json_fail(j, "tensor '%s' has no %s", t->name,
				 !seen_dtype ? "dtype" : !seen_shape ? "shape" : "data_offsets");
	return 0;
}

/* __metadata__: null, or an object whose values are strings, as the reference implementation
 * reads it (a map of string to string); a number or a nested object there is a malformed file. */
static int st_metadata(struct json *j)
{
	json_ws(j);
	if (j->n - j->i >= 4 && !memcmp(j->s + j->i, "null", 4)) {
		j->i += 4;
		return 0;
	}
	if (!json_eat(j, '{'))
		return json_fail(j, "__metadata__ must be an object (or null)");
	if (json_eat(j, '}'))
		return 0;
	int r;
	do {
		char *key;
		if ((r = json_key(j, &key, NULL)))
			return r;
		json_ws(j);
		if (j->i >= j->n || j->s[j->i] != '"') {
			/* The key is UTF-8 (json_string checked it); cut so the message stays short. */
			r = json_fail(j, "__metadata__ value of '%.64s' must be a string", key);
			free(key);
			return r;
		}
		free(key);
		if ((r = json_string(j, NULL, NULL)))
			return r;
	} while (json_eat(j, ','));
	return json_eat(j, '}') ? 0 : json_fail(j, "expected ',' or '}'");
}

static int st_read(struct dli_tensorfile *tf, int as_dtype, struct dli_error *err)
{
	const unsigned char *b = tf->map;
	size_t size = tf->size;
	if (as_dtype >= 0)
		return dli_error_set(err, -EINVAL, NULL,
				     "--dtype applies to .npy files; a safetensors file names its "
				     "dtypes");
	if (size < 8)
		return dli_error_set(err, -EINVAL, NULL,
				     "truncated safetensors file (%zu bytes; the header length alone "
				     "is 8)",
				     size);
	uint64_t hlen = le64(b);
	if (hlen > ST_MAX_HEADER)
		return dli_error_set(err, -EINVAL, NULL,
				     "header length %llu is larger than the 100 MB safetensors allows "
				     "(not a safetensors file?)",
				     (unsigned long long)hlen);
	if (hlen > size - 8)
		return dli_error_set(err, -EINVAL, NULL,
				     "truncated safetensors file: the header is %llu bytes but only %zu "
				     "follow",
				     (unsigned long long)hlen, size - 8);
	if (hlen < 2 || b[8] != '{')
		return dli_error_set(err, -EINVAL, NULL,
				     "the safetensors header does not start with '{' (not a "
				     "safetensors file?)");
	const unsigned char *data = b + 8 + hlen;
	uint64_t data_size = size - 8 - hlen;

	struct json j = {b + 8, (size_t)hlen, 0, 0, err};
	size_t cap = 0;
	struct st_range *ranges = NULL;
	struct dli_tf_tensor **sorted = NULL;
	bool seen_meta = false;
	int r = 0;
	j.i = 1;
	j.depth = 1;
	if (!json_eat(&j, '}')) {
		do {
			char *name;
			size_t len;
			if ((r = json_key(&j, &name, &len)))
				goto out;
			if (!strcmp(name, "__metadata__")) {
				free(name);
				if (seen_meta) {
					r = json_fail(&j, "duplicate __metadata__");
					goto out;
				}
				seen_meta = true;
				if ((r = st_metadata(&j)))
					goto out;
				continue;
			}
			if (len != strlen(name)) {
				free(name);
				r = json_fail(&j, "tensor name contains a NUL character");
				goto out;
			}
			if (tf->n_tensors == cap) {
				size_t ncap = cap ? 2 * cap : 16;
				void *nt = realloc(tf->tensors, ncap * sizeof *tf->tensors);
				if (nt)
					tf->tensors = nt;
				void *nr = nt ? realloc(ranges, ncap * sizeof *ranges) : NULL;
				if (!nr) {
					free(name);
					r = dli_error_set(err, -ENOMEM, NULL, "out of memory");
					goto out;
				}
				ranges = nr;
				cap = ncap;
			}
			struct dli_tf_tensor *t = &tf->tensors[tf->n_tensors++];
			memset(t, 0, sizeof *t);
			t->name = name;
			uint64_t off[2];
			if ((r = st_info(&j, t, off)))
				goto out;
			ranges[tf->n_tensors - 1] =
				(struct st_range){off[0], off[1], tf->n_tensors - 1};
		} while (json_eat(&j, ','));
		if (!json_eat(&j, '}')) {
			r = json_fail(&j, "expected ',' or '}'");
			goto out;
		}
	}
	/* The reference writer pads the header with spaces to an 8-byte boundary. */
	json_ws(&j);
	if (j.i != j.n) {
		r = json_fail(&j, "unexpected data after the header object");
		goto out;
	}

	for (size_t k = 0; k < tf->n_tensors; k++) {
		struct dli_tf_tensor *t = &tf->tensors[k];
		const struct st_dtype *d = NULL;
		for (size_t m = 0; m < sizeof st_dtypes / sizeof *st_dtypes; m++)
			if (!strcmp(t->file_dtype, st_dtypes[m].name))
				d = &st_dtypes[m];
		if ((r = shape_size(t, d ? d->size : 0, err))) {
			r = dli_error_prefix(err, NULL, "tensor '%s': ", t->name);
			goto out;
		}
		uint64_t begin = ranges[k].begin, end = ranges[k].end;
		if (begin > end) {
			r = dli_error_set(err, -EINVAL, NULL,
					  "tensor '%s': data_offsets [%llu, %llu] are reversed (begin "
					  "after end)",
					  t->name, (unsigned long long)begin, (unsigned long long)end);
			goto out;
		}
		if (end > data_size) {
			r = dli_error_set(err, -EINVAL, NULL,
					  "tensor '%s': data_offsets [%llu, %llu] are outside the "
					  "%llu-byte data section",
					  t->name, (unsigned long long)begin,
					  (unsigned long long)end, (unsigned long long)data_size);
			goto out;
		}
		if (d && end - begin != t->nbytes) {
			char shape[256];
			shape_text(t, shape, sizeof shape);
			r = dli_error_set(err, -EINVAL, NULL,
					  "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, "
					  "but %s [%s] needs %llu",
					  t->name, (unsigned long long)begin,
					  (unsigned long long)end, (unsigned long long)(end - begin),
					  t->file_dtype, shape, (unsigned long long)t->nbytes);
			goto out;
		}
		t->nbytes = end - begin;
		t->data = data + begin;
		t->supported = d && (d->dtype >= 0 || d->wide);
		if (d && d->dtype >= 0)
			t->dtype = (enum dli_dtype)d->dtype;
		if (d)
			t->wide = d->wide;
	}
	if (tf->n_tensors) {
		/* Names first: a name given twice is that, whatever its offsets. */
		sorted = malloc(tf->n_tensors * sizeof *sorted);
		if (!sorted) {
			r = dli_error_set(err, -ENOMEM, NULL, "out of memory");
			goto out;
		}
		for (size_t k = 0; k < tf->n_tensors; k++)
			sorted[k] = &tf->tensors[k];
		qsort(sorted, tf->n_tensors, sizeof *sorted, name_cmp);
		for (size_t k = 1; k < tf->n_tensors; k++) {
			if (!strcmp(sorted[k - 1]->name, sorted[k]->name)) {
				r = dli_error_set(err, -EINVAL, NULL, "tensor name '%s' appears twice",
						  sorted[k]->name);
				goto out;
			}
		}
		qsort(ranges, tf->n_tensors, sizeof *ranges, range_cmp);
		uint64_t prev_end = 0;
		size_t prev = 0;
		bool any = false;
		for (size_t k = 0; k < tf->n_tensors; k++) {
			if (ranges[k].begin == ranges[k].end)
				continue; /* empty tensors occupy nothing */
			if (any && ranges[k].begin < prev_end) {
				r = dli_error_set(err, -EINVAL, NULL,
						  "tensors '%s' and '%s' overlap in the data section",
						  tf->tensors[prev].name,
						  tf->tensors[ranges[k].index].name);
				goto out;
			}
			/* Packed back to back from byte 0, as the format and its library require:
			 * bytes no tensor describes are a damaged or hand-made file. */
			if (ranges[k].begin > prev_end) {
				r = dli_error_set(err, -EINVAL, NULL,
						  "tensor '%s' starts at byte %llu of the data section, "
						  "after %llu bytes that no tensor describes (safetensors "
						  "packs tensors back to back from byte 0)",
						  tf->tensors[ranges[k].index].name,
						  (unsigned long long)ranges[k].begin,
						  (unsigned long long)(ranges[k].begin - prev_end));
				goto out;
			}
			prev_end = ranges[k].end;
			prev = ranges[k].index;
			any = true;
		}
		if (prev_end != data_size) {
			r = dli_error_set(err, -EINVAL, NULL,
					  "the data section holds %llu bytes after its last tensor that "
					  "no tensor describes (%llu of %llu bytes described)",
					  (unsigned long long)(data_size - prev_end),
					  (unsigned long long)prev_end, (unsigned long long)data_size);
			goto out;
		}
	}
out:
	free(sorted);
	free(ranges);
	return r;
}

/* ---- open / close ---- */

int dli_tensorfile_open(struct dli_tensorfile *tf, const char *path, int as_dtype,
			struct dli_error *err)
{
	memset(tf, 0, sizeof *tf);
	/* O_NONBLOCK: a FIFO's open would wait for a writer; it is refused below (not regular) */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return dli_error_set(err, -errno, NULL, "%s", strerror(errno));
	struct stat st;
	if (fstat(fd, &st)) {
		int e = errno;
		close(fd);
		return dli_error_set(err, -e, NULL, "%s", strerror(e));
	}
	if (S_ISDIR(st.st_mode)) {
		close(fd);
		return dli_error_set(err, -EISDIR, NULL, "is a directory, not a tensor file");
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return dli_error_set(err, -EINVAL, NULL, "not a regular file");
	}
	if (st.st_size == 0) {
		close(fd);
		return dli_error_set(err, -EINVAL, NULL, "empty file");
	}
	if ((uint64_t)st.st_size > SIZE_MAX) {
		close(fd);
		return dli_error_set(err, -EFBIG, NULL, "file too large to map");
	}
	size_t size = (size_t)st.st_size;
	void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
	int e = errno;
	close(fd);
	if (map == MAP_FAILED)
		return dli_error_set(err, -e, NULL, "cannot map the file: %s", strerror(e));
	int r = dli_tensorfile_read(tf, map, size, path, as_dtype, err);
	if (r)
		munmap(map, size);
	else
		tf->mapped = true;
	return r;
}

int dli_tensorfile_read(struct dli_tensorfile *tf, const void *data, size_t size, const char *path,
			int as_dtype, struct dli_error *err)
{
	memset(tf, 0, sizeof *tf);
	if (size == 0)
		return dli_error_set(err, -EINVAL, NULL, "empty file");
	tf->map = (void *)data;
	tf->size = size;
	const unsigned char *b = tf->map;
	size_t plen = strlen(path);
	bool npy_name = plen >= 4 && !strcmp(path + plen - 4, ".npy");
	bool st_name = plen >= 12 && !strcmp(path + plen - 12, ".safetensors");
	int r;
	if (tf->size >= 6 && !memcmp(b, "\x93NUMPY", 6)) {
		tf->format = DLI_TF_NPY;
		r = npy_read(tf, path, as_dtype, err);
	} else if (npy_name) {
		r = dli_error_set(err, -EINVAL, NULL, "not a .npy file (no \\x93NUMPY magic)");
	} else if (st_name || (tf->size >= 9 && b[8] == '{')) {
		tf->format = DLI_TF_SAFETENSORS;
		r = st_read(tf, as_dtype, err);
	} else {
		r = dli_error_set(err, -EINVAL, NULL,
				  "unknown format: neither a .npy (\\x93NUMPY magic) nor a "
				  ".safetensors file");
	}
	if (r)
		dli_tensorfile_close(tf);
	return r;
}

void dli_tensorfile_close(struct dli_tensorfile *tf)
{
	for (size_t i = 0; i < tf->n_tensors; i++) {
		free(tf->tensors[i].name);
		free(tf->tensors[i].file_dtype);
		free(tf->tensors[i].shape);
	}
	free(tf->tensors);
	if (tf->map && tf->mapped)
		munmap(tf->map, tf->size);
	memset(tf, 0, sizeof *tf);
}
