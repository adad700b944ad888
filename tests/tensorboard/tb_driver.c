/* A small dlinspect run for the TensorBoard tests: dli_init with a config that attaches the TbEmit
 * fixture feature to two layers and lists the given loggers, then STEPS steps.
 * Usage: tb_driver LOG_DIR STEPS LOGGERS [BUCKETS]
 *   LOGGERS: the YAML value of `loggers:` (e.g. "{file: {}, tensorboard: {}}"), or "-" for none. */
#include <stdio.h>
#include <stdlib.h>

#include <dlinspect/dlinspect.h>

static const char *const layers[] = {
	"model.layers.0.self_attention.proj",
	"model.layers.1.mlp.fc1",
};

int main(int argc, char **argv)
{
	struct dli_options o;
	struct dli_context *ctx;
	struct dli_error err;
	char yaml[4096], loggers[2048] = "";

	if (argc < 4) {
		fprintf(stderr, "usage: %s LOG_DIR STEPS LOGGERS [BUCKETS]\n", argv[0]);
		return 2;
	}
	if (argv[3][0] != '-')
		snprintf(loggers, sizeof(loggers), "loggers: %s\n", argv[3]);
	snprintf(yaml, sizeof(yaml),
		 "extensions: [tb_emit, file, tensorboard]\n"
		 "emit:\n"
		 "  enabled: true\n"
		 "  layers: {layer_name_regex_pattern: '.*'}\n"
		 "  TbEmit: {enabled: true, buckets: %s}\n"
		 "%s",
		 argc > 4 ? argv[4] : "4", loggers);
	dli_options_init(&o);
	o.config_yaml = yaml;
	o.log_dir = argv[1];
	if (dli_init(&o, &ctx, &err) != 0) {
		fprintf(stderr, "dli_init: %s\n", err.message);
		return 1;
	}
	for (size_t i = 0; i < sizeof(layers) / sizeof(layers[0]); i++) {
		struct dli_layer *l;
		if (dli_layer_get(ctx, layers[i], &l, &err) != 0) {
			fprintf(stderr, "dli_layer_get: %s\n", err.message);
			dli_destroy(ctx);
			return 1;
		}
	}
	for (long s = strtol(argv[2], NULL, 10); s > 0; s--)
		dli_step(ctx); /* write errors are the loggers' business: training goes on */
	dli_destroy(ctx);
	return 0;
}
