/* A test communicator module whose open fails the way a module's may: a message and a negative
 * return, err->code left alone. dli_init must fail with that code and message (tests/nccl). */
#include <errno.h>
#include <stdio.h>

#include <dlinspect/plugin.h>

DLI_MODULE_NAMESPACE("communicators");

static int open_fails(void **comm, struct dli_error *err)
{
	(void)comm;
	snprintf(err->message, sizeof err->message, "the fabric is down");
	return -ENETDOWN;
}

static int no_rank(void *comm)
{
	(void)comm;
	return 0;
}

static int no_group(void *comm, const int *ranks, size_t n, void **group, struct dli_error *err)
{
	(void)comm, (void)ranks, (void)n, (void)group, (void)err;
	return -ENOSYS;
}

static int no_gather(void *comm, void *group, const void *send, size_t bytes, void *recv,
		     double timeout_s, bool *missing, struct dli_error *err)
{
	(void)comm, (void)group, (void)send, (void)bytes, (void)recv, (void)timeout_s, (void)missing,
		(void)err;
	return -ENOSYS;
}

static int no_barrier(void *comm, void *group, double timeout_s, bool *missing,
		      struct dli_error *err)
{
	(void)comm, (void)group, (void)timeout_s, (void)missing, (void)err;
	return -ENOSYS;
}

static const struct dli_comm_ops ops = {
	.size = sizeof(struct dli_comm_ops),
	.open = open_fails,
	.rank = no_rank,
	.world_size = no_rank,
	.group_create = no_group,
	.allgather = no_gather,
	.barrier = no_barrier,
};
static const struct dli_comm_desc desc = {
	.size = sizeof(struct dli_comm_desc),
	.name = "open_fails",
	.ops = &ops,
};
static const struct dli_comm_desc *const comms[] = {&desc};
static const struct dli_module module = {
	.size = sizeof(struct dli_module),
	.abi_major = DLI_ABI_MAJOR,
	.abi_minor = DLI_ABI_MINOR,
	.name = "open_fails",
	.ns = "communicators",
	.comms = comms,
	.n_comms = 1,
};

DLI_EXPORT const struct dli_module *DLI_MODULE_ENTRY(const struct dli_host *host)
{
	return host && host->abi_major == DLI_ABI_MAJOR ? &module : NULL;
}
