/* The CPU kernels' thread pool and the choice of thread count and SIMD path. The pool is created
 * lazily, sleeps on a condition variable between calls and lives until exit (or the library's
 * unload), so a large pass pays a wake-up, not a thread creation. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-private.h"

#ifdef DLI_HAVE_X86_SIMD
#include <cpuid.h>
#endif

/* ---- The pool ---- */

struct job {
	void (*fn)(void *arg, int64_t chunk, int worker);
	void *arg;
	int64_t n_chunks;
	atomic_int_fast64_t next; /* the next chunk to hand out */
	int helpers;              /* pool workers taking part: those with index < helpers */
	int running;              /* helpers that have not finished yet (under job_mu) */
};

/* pool_lock serializes whole calls (and growth); job_mu guards the job, its generation and the
 * shutdown flag, and is the one the workers sleep under. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t job_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t job_cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;
static struct job job;
static uint64_t job_gen;
static bool shutting_down;
static int pool_n;
static pthread_t pool_tid[DLI_MAX_THREADS];
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

struct worker_start {
	int index;    /* 0-based among pool workers; its worker number in calls is index + 1 */
	uint64_t gen; /* the generation at creation: only later jobs are this worker's business */
};

static void run_chunks(struct job *j, int worker)
{
	for (;;) {
		int64_t c = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
		if (c >= j->n_chunks)
			return;
		j->fn(j->arg, c, worker);
	}
}

static void *worker_main(void *p)
{
	struct worker_start start = *(struct worker_start *)p;
	free(p);
	uint64_t seen = start.gen;
	pthread_mutex_lock(&job_mu);
	for (;;) {
		while (job_gen == seen && !shutting_down)
			pthread_cond_wait(&job_cv, &job_mu);
		if (shutting_down)
			break;
		seen = job_gen;
		if (start.index >= job.helpers)
			continue;
		pthread_mutex_unlock(&job_mu);
		run_chunks(&job, start.index + 1);
		pthread_mutex_lock(&job_mu);
		if (--job.running == 0)
			pthread_cond_signal(&done_cv);
	}
	pthread_mutex_unlock(&job_mu);
	return NULL;
}

/* A forked child has none of the parent's workers: it starts over with an empty pool. Holding both
 * locks across fork() means no job is running and no worker is inside job_mu when it happens, so
 * the child's copies are consistent; its condition variables may name waiters that do not exist
 * there, hence fresh ones. */
static void atfork_prepare(void)
{
	pthread_mutex_lock(&pool_lock);
	pthread_mutex_lock(&job_mu);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&job_mu);
	pthread_mutex_unlock(&pool_lock);
}

static void atfork_child(void)
{
	pool_n = 0;
	shutting_down = false;
	pthread_cond_init(&job_cv, NULL);
	pthread_cond_init(&done_cv, NULL);
	pthread_mutex_unlock(&job_mu);
	pthread_mutex_unlock(&pool_lock);
}

static void register_atfork(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* Grows the pool to `want` workers (under pool_lock); returns how many exist. Workers block every
 * signal: the host's handlers run on the host's threads, as it expects. */
static int pool_grow(int want)
{
	if (want > DLI_MAX_THREADS)
		want = DLI_MAX_THREADS;
	if (pool_n >= want)
		return pool_n;
	pthread_once(&atfork_once, register_atfork);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	while (pool_n < want) {
		struct worker_start *s = malloc(sizeof(*s));
		if (!s)
			break;
		s->index = pool_n;
		pthread_mutex_lock(&job_mu);
		s->gen = job_gen;
		pthread_mutex_unlock(&job_mu);
		if (pthread_create(&pool_tid[pool_n], NULL, worker_main, s)) {
			free(s);
			break;
		}
		pool_n++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return pool_n;
}

int dli_parallel_for(int64_t n_chunks, int threads, void (*fn)(void *arg, int64_t chunk, int worker),
		     void *arg)
{
	if (n_chunks <= 0)
		return 0;
	int helpers = threads - 1;
	if ((int64_t)helpers > n_chunks - 1)
		helpers = (int)(n_chunks - 1);
	/* Busy (another thread's call, or a nested one from inside fn): do the work here rather than
	 * wait, which could deadlock a nested call and gains nothing for a concurrent one. */
	if (helpers < 1 || pthread_mutex_trylock(&pool_lock)) {
		for (int64_t c = 0; c < n_chunks; c++)
			fn(arg, c, 0);
		return 0;
	}
	int have = pool_grow(helpers);
	if (helpers > have)
		helpers = have;

	pthread_mutex_lock(&job_mu);
	job.fn = fn;
	job.arg = arg;
	job.n_chunks = n_chunks;
	atomic_store_explicit(&job.next, 0, memory_order_relaxed);
	job.helpers = helpers;
	job.running = helpers;
	job_gen++;
	pthread_cond_broadcast(&job_cv);
	pthread_mutex_unlock(&job_mu);

	run_chunks(&job, 0);

	pthread_mutex_lock(&job_mu);
	while (job.running > 0)
		pthread_cond_wait(&done_cv, &job_mu);
	pthread_mutex_unlock(&job_mu);
	pthread_mutex_unlock(&pool_lock);
	return 0;
}

/* At exit or dlclose, the workers must not outlive the code they run. An idle pool stops and is
 * joined; a pool still busy (exit called while another thread is inside a pass) is left alone,
 * since the process is going away anyway. */
__attribute__((destructor)) static void pool_destroy(void)
{
	if (pthread_mutex_trylock(&pool_lock))
		return;
	pthread_mutex_lock(&job_mu);
	shutting_down = true;
	pthread_cond_broadcast(&job_cv);
	pthread_mutex_unlock(&job_mu);
	for (int i = 0; i < pool_n; i++)
		pthread_join(pool_tid[i], NULL);
	pool_n = 0;
	pthread_mutex_lock(&job_mu);
	shutting_down = false;
	pthread_mutex_unlock(&job_mu);
	pthread_mutex_unlock(&pool_lock);
}

/* ---- Thread count and SIMD path ---- */

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static int env_threads;            /* 0: unset or not a positive number */
static enum dli_simd env_simd;     /* AUTO: unset or unknown */
static enum dli_simd detected;

#ifdef DLI_HAVE_X86_SIMD
/* CPUID.1:ECX bit 29. Asked directly: clang 14's __builtin_cpu_supports does not know "f16c". F16C
 * uses the AVX register state, which the avx2 test above already requires the OS to save. */
static bool cpu_has_f16c(void)
{
	unsigned a, b, c, d;
	return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

static void read_env(void)
{
	const char *s = getenv("DLINSPECT_THREADS");
	if (s && *s) {
		char *end;
		long v = strtol(s, &end, 10);
		if (!*end && v > 0)
			env_threads = v > DLI_MAX_THREADS ? DLI_MAX_THREADS : (int)v;
	}
	s = getenv("DLINSPECT_SIMD");
	if (s) {
		if (!strcmp(s, "scalar"))
			env_simd = DLI_SIMD_SCALAR;
		else if (!strcmp(s, "avx2"))
			env_simd = DLI_SIMD_AVX2;
		else if (!strcmp(s, "avx512"))
			env_simd = DLI_SIMD_AVX512;
	}
	detected = DLI_SIMD_SCALAR;
#ifdef DLI_HAVE_X86_SIMD
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c())
		detected = DLI_SIMD_AVX2;
	if (detected == DLI_SIMD_AVX2 && __builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
	    __builtin_cpu_supports("avx512vl"))
		detected = DLI_SIMD_AVX512;
#ifdef DLI_AVX512_EMULATED
	if (detected == DLI_SIMD_AVX2) /* the AVX-512 kernels run on AVX2 (avx512-emulation.h) */
		detected = DLI_SIMD_AVX512;
#endif
#endif
}

enum dli_simd dli_simd_detect(void)
{
	pthread_once(&env_once, read_env);
	return detected;
}

const char *dli_simd_name(enum dli_simd simd)
{
	switch (simd) {
	case DLI_SIMD_AUTO: return "auto";
	case DLI_SIMD_SCALAR: return "scalar";
	case DLI_SIMD_AVX2: return "avx2";
	case DLI_SIMD_AVX512: return "avx512";
	}
	return NULL;
}

enum dli_simd dli_cpu_simd(const struct dli_cpu_options *o)
{
	pthread_once(&env_once, read_env);
	enum dli_simd want = o && o->simd != DLI_SIMD_AUTO ? o->simd : env_simd;
	if (want == DLI_SIMD_AUTO)
		return detected;
	/* The paths are ordered: a CPU with a path has every lesser one. */
	if ((unsigned)want > (unsigned)DLI_SIMD_AVX512 || want > detected)
		return DLI_SIMD_AUTO;
	return want;
}

int dli_cpu_threads(const struct dli_cpu_options *o)
{
	pthread_once(&env_once, read_env);
	int n = 0;
	if (o && o->threads > 0)
		n = o->threads;
	else if (env_threads > 0)
		n = env_threads;
	else {
		cpu_set_t set;
		n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
	}
	if (n < 1)
		n = 1;
	return n > DLI_MAX_THREADS ? DLI_MAX_THREADS : n;
}
