/* The ABI promise: a module built against the frozen 1.0 header loads into a dlinspect whose
 * descriptors, ops tables and param descriptions have all grown since. This test compiles
 * core/loader.c itself with DLI_TEST_ABI_GROWTH, which adds a member at the end of every one of
 * them, as the next minor version would. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "loader-private.h"

#ifndef DLI_TEST_ABI_GROWTH
#error "build with -DDLI_TEST_ABI_GROWTH"
#endif

static const char *const abi10_dir[] = {LOADER_ABI10_DIR};

static const struct dli_host host = {
	.size = sizeof(struct dli_host),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
};

static void test_a_1_0_module_loads_after_every_table_grew(void)
{
	struct dli_loader *loader = NULL;
	struct dli_error err = {0};

	/* The grown sizes really are larger than what the module fills. */
	CHECK(sizeof(struct dli_feature_desc) > DLI_FEATURE_DESC_SIZE_1_0);
	CHECK(sizeof(struct dli_logger_desc) > DLI_LOGGER_DESC_SIZE_1_0);
	CHECK(sizeof(struct dli_param_desc) > DLI_PARAM_DESC_SIZE_1_1);

	CHECK_INT(dli_loader_create(&host, abi10_dir, 1, &loader, &err), 0);
	CHECK_INT(dli_loader_load(loader, "old_abi", &err), 0);
	if (err.code)
		fprintf(stderr, "load: %s\n", err.message);
	CHECK_INT(dli_loader_count(loader), 1);
	const struct dli_module *m = dli_loader_module(loader, 0);
	if (!m) {
		dli_loader_destroy(loader);
		return;
	}
	CHECK_STR(m->name, "old_abi");
	CHECK_INT(m->abi_minor, 0);
	CHECK_INT(m->n_features, 1);
	CHECK_INT(m->n_loggers, 1);

	/* Every 1.0 member reads as the module wrote it, every later one as 0 / NULL. */
	const struct dli_feature_desc *f = m->features[0];
	CHECK_STR(f->name, "OldFeature");
	CHECK_INT(f->size, DLI_FEATURE_DESC_SIZE_1_0);
	CHECK_INT(f->test_growth, 0);
	CHECK_INT(f->param_size, sizeof(struct dli_param_desc));
	CHECK_INT(f->n_params, 3);
	/* The params array was read with the 1.0 stride, not the grown one. */
	CHECK_STR(f->params[0].key, "count");
	CHECK_STR(f->params[1].key, "margin");
	CHECK_STR(f->params[2].key, "mode");
	CHECK_INT(f->params[2].type, DLI_PARAM_STRING);
	CHECK_STR(f->params[2].default_value, "fast");
	CHECK(f->params[2].required);
	for (size_t i = 0; i < f->n_params; i++) {
		CHECK(!f->params[i].bounded);
		CHECK_INT(f->params[i].test_growth, 0);
	}
	CHECK(f->ops->create != NULL);
	CHECK(f->ops->test_growth == NULL);
	CHECK(!DLI_HAS_MEMBER(f->ops, struct dli_feature_ops, test_growth));
	CHECK(DLI_HAS_MEMBER(f->ops, struct dli_feature_ops, call));

	/* Its code runs through the copies. */
	struct dli_feature_create_args args = {.size = sizeof args, .host = &host};
	void *instance = NULL;
	CHECK_INT(f->ops->create(&args, &instance, &err), 0);
	struct dli_feature_call call = {.instance = instance};
	int ten = 0;
	CHECK_INT(f->ops->call(&call, "ten", &ten), 0);
	CHECK_INT(ten, 10);

	const struct dli_logger_desc *l = m->loggers[0];
	CHECK_STR(l->name, "oldlog");
	CHECK_INT(l->test_growth, 0);
	CHECK_INT(l->n_params, 2);
	CHECK_STR(l->params[1].key, "flush_secs");
	CHECK_STR(l->params[1].default_value, "10");
	CHECK(l->ops->test_growth == NULL);
	CHECK(l->ops->log_histogram == NULL);
	CHECK_INT(l->ops->log_scalar(NULL, "x", 0, 1.0), 7);
	dli_loader_destroy(loader);
}

int main(void)
{
	test_a_1_0_module_loads_after_every_table_grew();
	return check_exit();
}
