/* A communicator module whose open fails (tests/nccl/open_fails.c, err->code left at 0, as the
 * ABI allows): dli_init fails with the module's code and message, prefixed with its name, and
 * leaves no context (it once succeeded with no communicator at all).
 * argv: <dir of open_fails.so> */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/dlinspect.h>

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	setenv("DLINSPECT_PLUGIN_PATH", argv[1], 1);
	setenv("DLINSPECT_COMMUNICATOR", "open_fails", 1);
	struct dli_options o;
	dli_options_init(&o);
	/* A config with no section: a run with no config at all opens nothing. */
	o.config_yaml = "s: {enabled: false}\n";
	o.log_dir = "/nonexistent-dir-never-written";
	struct dli_context *ctx = (struct dli_context *)&o; /* must come back NULL */
	struct dli_error err;
	int r = dli_init(&o, &ctx, &err);
	const char *want = "communicator 'open_fails': the fabric is down";
	if (r != -ENETDOWN || err.code != -ENETDOWN || ctx || strcmp(err.message, want) != 0) {
		fprintf(stderr, "FAIL: dli_init gave %d (code %d), ctx %p, '%s'; expected %d and '%s'\n",
			r, err.code, (void *)ctx, err.message, -ENETDOWN, want);
		if (r == 0)
			dli_destroy(ctx);
		return 1;
	}
	printf("ok\n");
	return 0;
}
