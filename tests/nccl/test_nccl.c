/* The nccl communicator (docs/distributed.md, "The nccl module"), picked the way a user picks it
 * (DLINSPECT_COMMUNICATOR=nccl at dli_init):
 *   - without the launcher's rank, or without a way to share NCCL's unique id, dli_init fails
 *     with the message that says what to set (no CUDA call is made before these checks);
 *   - without a CUDA device it fails saying so, and the rest is skipped (77);
 *   - with one (a single rank: NCCL refuses two ranks on one GPU), dli_init announces it, a step
 *     logs its statistics, and the module's own all-gather and barrier go through its device
 *     buffers and give back what was sent.
 * argv: <dir of nccl.so> <dir of the exact logger> */
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlinspect/dlinspect.h>
#include <dlinspect/plugin.h>

static int failures;

#define CHECK(cond, ...)                                                                         \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			failures++;                                                              \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                     \
			fprintf(stderr, __VA_ARGS__);                                            \
			fputc('\n', stderr);                                                     \
		}                                                                                \
	} while (0)

static const char config[] = "loggers: {exact: {}}\n"
			     "s:\n"
			     "  enabled: true\n"
			     "  layers: {layer_name_regex_pattern: '^fc1$'}\n"
			     "  transformer_engine:\n"
			     "    LogTensorStats: {enabled: true, tensors: [activation], stats: [max]}\n";

static int init(const char *log_dir, struct dli_context **ctx, struct dli_error *err)
{
	struct dli_options o;
	dli_options_init(&o);
	o.config_yaml = config;
	o.log_dir = log_dir;
	return dli_init(&o, ctx, err);
}

/* dli_init must fail with -code and a message holding `text`. */
static void refused(const char *log_dir, int code, const char *text)
{
	struct dli_context *ctx = NULL;
	struct dli_error err;
	int r = init(log_dir, &ctx, &err);
	CHECK(r == code && strstr(err.message, text), "expected %d and '%s', got %d: %s", code, text,
	      r, r ? err.message : "(accepted)");
	dli_destroy(ctx);
}

static bool file_has(const char *path, const char *text)
{
	FILE *f = fopen(path, "r");
	char line[2048];
	bool found = false;
	while (f && !found && fgets(line, sizeof line, f))
		found = strstr(line, text) != NULL;
	if (f)
		fclose(f);
	return found;
}

/* The module's table, straight from its entry (the loader's checks are tested elsewhere). */
static void direct(const char *module_dir)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/nccl.so", module_dir);
	void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	CHECK(so, "dlopen %s: %s", path, dlerror());
	if (!so)
		return;
	const struct dli_module *(*entry)(const struct dli_host *);
	*(void **)&entry = dlsym(so, DLI_MODULE_ENTRY_NAME);
	struct dli_host host;
	memset(&host, 0, sizeof host);
	host.size = sizeof host;
	host.abi_major = DLI_ABI_MAJOR;
	host.abi_minor = DLI_ABI_MINOR;
	const struct dli_module *m = entry ? entry(&host) : NULL;
	CHECK(m && m->n_comms == 1 && !strcmp(m->comms[0]->name, "nccl"), "the module's descriptor");
	if (!m || m->n_comms != 1) {
		dlclose(so);
		return;
	}
	const struct dli_comm_ops *ops = m->comms[0]->ops;
	struct dli_error err = {0};
	void *comm = NULL, *group = NULL;
	int r = ops->open(&comm, &err);
	CHECK(r == 0, "open: %s", err.message);
	if (r == 0) {
		int me = 0, other = 1;
		CHECK(ops->rank(comm) == 0 && ops->world_size(comm) == 1, "rank 0 of 1");
		CHECK(ops->group_create(comm, &other, 1, &group, &err) == -EINVAL &&
			      strstr(err.message, "rank 0 is not in the group"),
		      "a group without this rank is refused: %s", err.message);
		r = ops->group_create(comm, &me, 1, &group, &err);
		CHECK(r == 0, "group_create: %s", err.message);
		unsigned char send[1000], recv[1000];
		bool missing[1] = {false};
		for (size_t i = 0; i < sizeof send; i++)
			send[i] = (unsigned char)(i * 7 + 3);
		memset(recv, 0, sizeof recv);
		r = r ? r : ops->allgather(comm, group, send, sizeof send, recv, 10, missing, &err);
		CHECK(r == 0 && !memcmp(send, recv, sizeof send),
		      "allgather through the device buffers: %d %s", r, err.message);
		r = ops->barrier(comm, group, 10, missing, &err);
		CHECK(r == 0, "barrier: %s", err.message);
		ops->group_destroy(comm, group);
		ops->close(comm);
	}
	dlclose(so);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: test_nccl <dir of nccl.so> <dir of the exact logger>\n");
		return 2;
	}
	char plugin_path[4096], dir[] = "/tmp/dli-nccl-XXXXXX", id_file[600];
	const char *old = getenv("DLINSPECT_PLUGIN_PATH");
	snprintf(plugin_path, sizeof plugin_path, "%s:%s%s%s", argv[1], argv[2], old ? ":" : "",
		 old ? old : "");
	setenv("DLINSPECT_PLUGIN_PATH", plugin_path, 1);
	setenv("DLINSPECT_COMMUNICATOR", "nccl", 1);
	setenv("DLINSPECT_LOG_LEVEL", "debug", 1);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(id_file, sizeof id_file, "%s/nccl-id", dir);
	static const char *const launcher_vars[] = {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
						    "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
						    "SLURM_PROCID", "SLURM_NTASKS", "NCCL_COMM_ID",
						    "DLINSPECT_NCCL_ID_FILE"};
	for (size_t i = 0; i < sizeof launcher_vars / sizeof *launcher_vars; i++)
		unsetenv(launcher_vars[i]);

	refused(dir, -EINVAL,
		"communicator 'nccl': no rank in the environment: expected RANK and WORLD_SIZE "
		"(torchrun)");
	setenv("RANK", "0", 1);
	setenv("WORLD_SIZE", "1", 1);
	refused(dir, -EINVAL,
		"communicator 'nccl': no way to share NCCL's unique id: set NCCL_COMM_ID=<host:port "
		"of rank 0> or DLINSPECT_NCCL_ID_FILE=");
	setenv("DLINSPECT_NCCL_ID_FILE", id_file, 1);

	struct dli_context *ctx = NULL;
	struct dli_error err;
	int r = init(dir, &ctx, &err), status = 0;
	if (r == -ENODEV) {
		CHECK(strstr(err.message, "communicator 'nccl': no CUDA device (cudaGetDeviceCount: "),
		      "the reason is named: %s", err.message);
		if (!failures) {
			printf("SKIP: %s\n", err.message);
			status = 77;
		}
		goto out;
	}
	CHECK(r == 0, "dli_init with a device: %d %s", r, err.message);
	if (r == 0) {
		float x[5] = {1, -2, 7.5f, 0, 3};
		struct dli_tensor t = {.data = x, .dtype = DLI_DTYPE_F32, .ndim = 1, .shape = {5},
				       .contiguous = true};
		struct dli_layer *l = NULL;
		CHECK(dli_layer_get(ctx, "fc1", &l, &err) == 0 &&
			      dli_inspect_tensor(l, DLI_TENSOR_ACTIVATION, &t, NULL, NULL) == 0,
		      "inspect_tensor");
		CHECK(dli_step(ctx) == 0, "step");
		dli_destroy(ctx);
		char log[700];
		snprintf(log, sizeof log, "%s/exact-rank0.txt", dir);
		CHECK(file_has(log, "through communicator 'nccl' (rank 0 of 1"), "announced in %s", log);
		CHECK(file_has(log, "S fc1_activation_max 0 0x1.ep+2"), "max 7.5 logged in %s", log);
		direct(argv[1]);
	}
	status = failures ? 1 : 0;
out:
	{
		char cmd[700];
		snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", dir);
	}
	if (failures)
		return 1;
	if (status == 0)
		printf("ok\n");
	return status;
}
