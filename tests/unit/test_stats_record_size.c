/* The host table's statistics record reads never overrun a module's record: a module built with
 * an older, smaller struct dli_stats_record gets only its bytes (stats_acc_read_sized), and the
 * 1.0 call writes exactly DLI_STATS_RECORD_SIZE_1_0 bytes whatever the record grows to. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/plugin.h>

#include "check.h"
#include "context-private.h"

/* Bytes past the record a module gave: they must come back untouched. */
#define GUARD 64

static void test_sized_reads_stay_inside_the_callers_record(void)
{
	struct dli_options o;
	struct dli_context *ctx = NULL;
	struct dli_error err = {0};
	static const char *const none[] = {"file"};
	char dir[] = "/tmp/dli-record-XXXXXX";

	CHECK(mkdtemp(dir) != NULL);
	dli_options_init(&o);
	o.log_dir = dir;
	o.extensions = none;
	o.n_extensions = 1;
	CHECK_INT(dli_init(&o, &ctx, &err), 0);
	if (!ctx)
		return;
	const struct dli_host *host = &ctx->host;
	CHECK(DLI_HAS_MEMBER(host, struct dli_host, stats_acc_read_sized));
	CHECK(DLI_HAS_MEMBER(host, struct dli_host, stats_value_sized));

	float x[4] = {1, -2, 3, 0};
	struct dli_tensor t = {.data = x, .dtype = DLI_DTYPE_F32, .ndim = 1, .shape = {4},
			       .contiguous = true};
	struct dli_stats_acc *acc = host->stats_acc_create(ctx);
	CHECK_INT(host->stats_add(acc, &t, NULL), 0);

	/* A module of today: the whole record. */
	struct dli_stats_record rec;
	CHECK_INT(host->stats_acc_read_sized(acc, &rec, sizeof rec), 0);
	CHECK_INT(rec.count, 4);
	CHECK(host->stats_value_sized(&rec, sizeof rec, DLI_STAT_MAX) == 3);

	/* The 1.0 call and a 1.0-sized read write DLI_STATS_RECORD_SIZE_1_0 bytes, not one more. */
	unsigned char buf[sizeof(struct dli_stats_record) + GUARD];
	memset(buf, 0xa5, sizeof buf);
	CHECK_INT(host->stats_acc_read(acc, (struct dli_stats_record *)buf), 0);
	for (size_t i = DLI_STATS_RECORD_SIZE_1_0; i < sizeof buf; i++)
		if (buf[i] != 0xa5) {
			CHECK(buf[i] == 0xa5);
			break;
		}
	CHECK_INT(((struct dli_stats_record *)buf)->count, 4);

	/* A smaller record than the host's (a module of older headers, once the record grows):
	 * simulated by a size short of the host's; the bytes past it stay untouched. */
	size_t older = DLI_STATS_RECORD_SIZE_1_0;
	memset(buf, 0xa5, sizeof buf);
	CHECK_INT(host->stats_acc_read_sized(acc, (struct dli_stats_record *)buf, older), 0);
	CHECK(buf[older] == 0xa5);

	/* A larger record (a newer module): the host's bytes, then zeros. */
	memset(buf, 0xa5, sizeof buf);
	CHECK_INT(host->stats_acc_read_sized(acc, (struct dli_stats_record *)buf,
					     sizeof(struct dli_stats_record) + 16), 0);
	for (size_t i = sizeof(struct dli_stats_record); i < sizeof(struct dli_stats_record) + 16; i++)
		CHECK_INT(buf[i], 0);
	CHECK(buf[sizeof(struct dli_stats_record) + 16] == 0xa5);

	/* Too small to be any record. */
	CHECK_INT(host->stats_acc_read_sized(acc, &rec, DLI_STATS_RECORD_SIZE_1_0 - 8), -EINVAL);
	CHECK(isnan(host->stats_value_sized(&rec, 8, DLI_STAT_MAX)));

	host->stats_acc_destroy(acc);
	dli_destroy(ctx);
}

int main(void)
{
	test_sized_reads_stay_inside_the_callers_record();
	return check_exit();
}
