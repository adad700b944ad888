/* dlinspect.h's thread contract, exercised: 8 threads on shared and on their own layers at once,
 * handles from dli_layer_get and lookups through the *_by_name calls that grow the layer table while
 * the others read it, inspect calls feeding one statistic from every thread, messages from every
 * thread; dli_step only between rounds, as the contract asks. Built plainly in the suite and, with
 * -Db_sanitize=thread, as the TSan check (docs/plugins.md, "Threads"). */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlinspect/dlinspect.h>

#include "check.h"
#include "dli-test.h"

enum { N_THREADS = 8, N_SHARED = 16, N_OWN = 300, N_ROUNDS = 3 };

struct worker {
	struct dli_context *ctx;
	int id;
	int wrong;
	struct dli_layer *shared[N_SHARED];
};

/* fc1 layers run fprop in high precision (DisableFP8GEMM); every layer's activation is inspected. */
static const char yaml[] =
	"s:\n  enabled: true\n  layers: {layer_name_regex_pattern: '.*'}\n"
	"  transformer_engine:\n"
	"    LogTensorStats: {enabled: true, tensors: [activation], stats: [max]}\n"
	"fc1:\n  enabled: true\n  layers: {layer_name_regex_pattern: 'fc1$'}\n"
	"  transformer_engine:\n    DisableFP8GEMM: {enabled: true, gemms: [fprop]}\n";

static void *work(void *p)
{
	struct worker *w = p;
	char name[64];
	float x[4] = {1, 2, 3, (float)w->id};
	struct dli_tensor t = tensor(x, DLI_DTYPE_F32, 4);

	for (int i = 0; i < N_OWN; i++) {
		/* A shared layer by handle, then one of this thread's own by name (a new entry in the
		 * table most of the time in round 0: the table grows while others read it). */
		int k = (i * 7 + w->id * 5) % N_SHARED;
		snprintf(name, sizeof name, "shared.%d.fc%d", k, 1 + k % 2);
		struct dli_layer *l = NULL;
		if (dli_layer_get(w->ctx, name, &l, NULL) || !l ||
		    (w->shared[k] && w->shared[k] != l) || strcmp(dli_layer_name(l), name))
			w->wrong++;
		w->shared[k] = l;
		bool fc1 = k % 2 == 0;
		int64_t next = 0;
		if (dli_fp8_gemm_enabled(l, DLI_GEMM_FPROP, &next) == fc1 || next <= 0)
			w->wrong++;
		if (!dli_inspect_tensor_enabled(l, DLI_TENSOR_ACTIVATION, NULL) ||
		    dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL) != 0)
			w->wrong++;

		snprintf(name, sizeof name, "t%d.layers.%d.fc%d", w->id, i, 1 + i % 2);
		if (dli_fp8_gemm_enabled_by_name(w->ctx, name, "fprop", NULL) == (i % 2 == 0))
			w->wrong++;
		if (dli_modify_tensor_enabled_by_name(w->ctx, name, "fprop", "activation", NULL))
			w->wrong++;
		if (dli_inspect_tensor_by_name(w->ctx, name, "activation", &t) != 0)
			w->wrong++;
		if (dli_tensor_id(w->ctx, "activation") != DLI_TENSOR_ACTIVATION)
			w->wrong++;
		if (i % 100 == 0)
			dli_log(w->ctx, DLI_LOG_INFO, "thread %d at layer %d", w->id, i);
	}
	return NULL;
}

static void test_threads_on_shared_and_own_layers(void)
{
	struct dli_context *ctx = open_yaml(yaml, NULL);
	struct worker w[N_THREADS];
	pthread_t th[N_THREADS];

	CHECK(ctx != NULL);
	if (!ctx)
		return;
	memset(w, 0, sizeof w);
	for (int round = 0; round < N_ROUNDS; round++) {
		for (int i = 0; i < N_THREADS; i++) {
			w[i].ctx = ctx;
			w[i].id = i;
			CHECK_INT(pthread_create(&th[i], NULL, work, &w[i]), 0);
		}
		for (int i = 0; i < N_THREADS; i++)
			CHECK_INT(pthread_join(th[i], NULL), 0);
		CHECK_INT(dli_step(ctx), 0); /* never beside the calls */
	}
	for (int i = 0; i < N_THREADS; i++) {
		CHECK_INT(w[i].wrong, 0);
		for (int k = 0; k < N_SHARED; k++)
			CHECK(w[i].shared[k] == w[0].shared[k]);
	}
	CHECK_INT(dli_iteration_get(ctx), N_ROUNDS);
	dli_destroy(ctx);

	/* Every thread fed the shared layers: the max is the largest thread id. */
	char want[128];
	for (int round = 0; round < N_ROUNDS; round++) {
		snprintf(want, sizeof want,
			 "shared.0.fc1_activation_max \t\t\t\t iteration=%06d \t\t\t\t value=%d\n",
			 round, N_THREADS - 1);
		CHECK_INT(count_lines(STATS_LOG, want), 1);
	}
	/* Each own layer once per round, each shared one once per round. */
	CHECK_INT(count_lines(STATS_LOG, "_activation_max"), N_ROUNDS * (N_THREADS * N_OWN + N_SHARED));
	CHECK_INT(count_lines(MESSAGE_LOG, " at layer "), N_ROUNDS * N_THREADS * 3);
}

int main(void)
{
	test_threads_on_shared_and_own_layers();
	remove_log_dir();
	return check_exit();
}
