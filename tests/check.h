/* A minimal test harness: each CHECK counts, failures print where and why, main returns check_exit(). */
#ifndef DLI_TEST_CHECK_H
#define DLI_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int check_failures;
static int check_count;

#define CHECK(cond)                                                                              \
	do {                                                                                     \
		check_count++;                                                                   \
		if (!(cond)) {                                                                   \
			check_failures++;                                                        \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
		}                                                                                \
	} while (0)

#define CHECK_INT(a, b)                                                                         \
	do {                                                                                    \
		long long check_a_ = (long long)(a), check_b_ = (long long)(b);                 \
		check_count++;                                                                  \
		if (check_a_ != check_b_) {                                                     \
			check_failures++;                                                       \
			fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", __FILE__,   \
				__LINE__, #a, check_a_, #b, check_b_);                          \
		}                                                                               \
	} while (0)

#define CHECK_STR(a, b)                                                                         \
	do {                                                                                    \
		const char *check_a_ = (a), *check_b_ = (b);                                    \
		check_count++;                                                                  \
		if (!check_a_ || !check_b_ || strcmp(check_a_, check_b_) != 0) {                \
			check_failures++;                                                       \
			fprintf(stderr, "%s:%d: %s is \"%s\", expected \"%s\"\n", __FILE__,     \
				__LINE__, #a, check_a_ ? check_a_ : "(null)",                   \
				check_b_ ? check_b_ : "(null)");                                \
		}                                                                               \
	} while (0)

/* `hay` contains `needle`. */
#define CHECK_CONTAINS(hay, needle)                                                             \
	do {                                                                                    \
		const char *check_h_ = (hay), *check_n_ = (needle);                             \
		check_count++;                                                                  \
		if (!check_h_ || !strstr(check_h_, check_n_)) {                                 \
			check_failures++;                                                       \
			fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__,    \
				__LINE__, check_h_ ? check_h_ : "(null)", check_n_);            \
		}                                                                               \
	} while (0)

static inline int check_exit(void)
{
	printf("%d checks, %d failed\n", check_count, check_failures);
	return check_failures ? 1 : 0;
}

#endif
