/* dli_options_init and the ABI promise: a host built against the 1.0 header passes its 1.0-sized
 * struct dli_options to a library whose struct has grown since. This file includes no dlinspect
 * header: it declares what a 1.0 host saw (include/dlinspect/dlinspect.h at commit a630f8a, the
 * ABI 1.0 freeze), so the library's init and dli_init are called exactly as such a host calls them,
 * and every byte past the host's struct is checked to be untouched. */
#include <errno.h>
#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

/* ---- FROZEN: the 1.0 declarations (never edit) ---- */
struct dli_context;

struct dli_error {
	int code;
	char file[512];
	int line;
	int column;
	char message[1024];
};

struct dli_options {
	uint32_t size;
	const char *config_path;
	const char *config_yaml;
	const char *log_dir;
	const char *const *plugin_dirs;
	size_t n_plugin_dirs;
	const char *const *extensions;
	size_t n_extensions;
	int rank;
	int world_size;
	int64_t initial_iteration;
	int log_level;
};

void dli_options_init(struct dli_options *options);
int dli_init(const struct dli_options *options, struct dli_context **out, struct dli_error *err);
void dli_destroy(struct dli_context *ctx);
int64_t dli_iteration_get(const struct dli_context *ctx);
/* ---- end of the frozen declarations ---- */

/* ABI 1.3: the call the dli_options_init macro of the current header makes. */
void dli_options_init_sized(struct dli_options *options, size_t size);

#define GUARD 0xA5
#define BUF_SIZE 4096

static alignas(max_align_t) unsigned char buf[BUF_SIZE];

/* The first index in [from, to) of buf whose byte is not the guard, or `to`. */
static size_t first_touched(size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		if (buf[i] != GUARD)
			return i;
	return to;
}

/* What a 1.0 host's struct holds after init: the 1.0 defaults. */
static void expect_1_0_defaults(const struct dli_options *o)
{
	struct dli_options want;
	memset(&want, 0, sizeof want);
	want.size = o->size;
	want.world_size = 1;
	want.log_level = -1;
	CHECK(memcmp(o, &want, sizeof want) == 0);
}

static void test_the_1_0_init_writes_only_a_1_0_struct(void)
{
	memset(buf, GUARD, sizeof buf);
	struct dli_options *o = (struct dli_options *)buf;
	dli_options_init(o);
	CHECK_INT(first_touched(sizeof *o, BUF_SIZE), BUF_SIZE);
	/* The size says what was written: every 1.0 member and nothing past the host's struct. */
	CHECK(o->size >= offsetof(struct dli_options, log_level) + sizeof o->log_level);
	CHECK(o->size <= sizeof *o);
	expect_1_0_defaults(o);
}

static void test_dli_init_takes_a_1_0_struct(void)
{
	memset(buf, GUARD, sizeof buf);
	struct dli_options *o = (struct dli_options *)buf;
	dli_options_init(o);
	o->initial_iteration = 7;
	o->log_level = 0;
	struct dli_context *ctx = NULL;
	struct dli_error err;
	memset(&err, 0, sizeof err);
	/* No config: the default run. The library reads the 1.0 members where a 1.0 host put them,
	 * and none past them (they hold the guard bytes, which would be refused as garbage). */
	CHECK_INT(dli_init(o, &ctx, &err), 0);
	CHECK(ctx != NULL);
	CHECK_INT(dli_iteration_get(ctx), 7);
	dli_destroy(ctx);

	/* A value the library refuses, read at its 1.0 offset. */
	o->log_level = 9;
	ctx = NULL;
	CHECK_INT(dli_init(o, &ctx, &err), -EINVAL);
	CHECK(ctx == NULL);
	CHECK_CONTAINS(err.message, "options.log_level is 9");
}

static void test_the_sized_init_writes_exactly_the_size_given(void)
{
	/* Smaller than 1.0 (no world_size, no log_level): nothing past it. */
	memset(buf, GUARD, sizeof buf);
	struct dli_options *o = (struct dli_options *)buf;
	size_t small = offsetof(struct dli_options, rank);
	dli_options_init_sized(o, small);
	CHECK_INT(first_touched(small, BUF_SIZE), BUF_SIZE);
	CHECK_INT(o->size, small);
	CHECK(o->config_path == NULL && o->n_extensions == 0);

	/* The 1.0 size through the sized call: the same as the 1.0 function. */
	memset(buf, GUARD, sizeof buf);
	dli_options_init_sized(o, sizeof *o);
	CHECK_INT(first_touched(sizeof *o, BUF_SIZE), BUF_SIZE);
	expect_1_0_defaults(o);

	/* A host newer than the library: its whole struct is zeroed (none of it left as garbage),
	 * and the size says how much of it this library reads. */
	size_t big = 1024;
	memset(buf, GUARD, sizeof buf);
	dli_options_init_sized(o, big);
	CHECK_INT(first_touched(big, BUF_SIZE), BUF_SIZE);
	CHECK(o->size > sizeof *o && o->size < big);
	for (size_t i = o->size; i < big; i++)
		if (buf[i] != 0) {
			CHECK_INT(buf[i], 0);
			break;
		}
	CHECK_INT(o->world_size, 1);
	CHECK_INT(o->log_level, -1);

	/* Too small to hold even the size, and NULL: nothing written, nothing read. */
	memset(buf, GUARD, sizeof buf);
	dli_options_init_sized(o, 2);
	CHECK_INT(first_touched(0, BUF_SIZE), BUF_SIZE);
	dli_options_init_sized(NULL, sizeof *o);
	dli_options_init(NULL);
}

/* The way a 1.0 host writes it: its struct on its stack (a sanitizer build catches a write past it). */
static void test_a_1_0_struct_on_the_stack(void)
{
	struct dli_options o;
	dli_options_init(&o);
	expect_1_0_defaults(&o);
	struct dli_context *ctx = NULL;
	o.log_level = 0;
	CHECK_INT(dli_init(&o, &ctx, NULL), 0);
	dli_destroy(ctx);
}

int main(void)
{
	test_the_1_0_init_writes_only_a_1_0_struct();
	test_dli_init_takes_a_1_0_struct();
	test_the_sized_init_writes_exactly_the_size_given();
	test_a_1_0_struct_on_the_stack();
	return check_exit();
}
