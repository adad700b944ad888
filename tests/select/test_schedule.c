/* Scheduling: dli_schedule_active / dli_schedule_next against hand-written cases, against a step-by-step
 * reference over many random schedules, and at the INT64_MAX edge. */
#include <stdbool.h>
#include <stdint.h>

#include "check.h"
#include "schedule-private.h"

/* The definition, step by step: what dli_schedule_active must agree with. */
static bool ref_active(const struct dli_schedule *s, int64_t it)
{
	bool in = false;

	if (it < 0 || it % s->freq != 0)
		return false;
	if (!s->ranges)
		return s->start_step <= it && it <= s->end_step;
	for (size_t i = 0; i < s->n_ranges; i++)
		in = in || (s->ranges[i].first <= it && it <= s->ranges[i].second);
	return in;
}

/* The next selected step by trying every step after `it` up to `bound` (no step beyond `bound` is
 * selected, or the search is known to succeed before reaching it). */
static int64_t ref_next(const struct dli_schedule *s, int64_t it, int64_t bound)
{
	if (it >= bound)
		return DLI_NEVER;
	for (int64_t c = it + 1;; c++) {
		if (ref_active(s, c))
			return c;
		if (c == bound)
			return DLI_NEVER;
	}
}

static int64_t last_possible(const struct dli_schedule *s)
{
	int64_t last = INT64_MIN;

	if (!s->ranges)
		return s->end_step;
	for (size_t i = 0; i < s->n_ranges; i++)
		if (s->ranges[i].second > last)
			last = s->ranges[i].second;
	return last;
}

static struct dli_schedule plain(int64_t freq, int64_t start, int64_t end)
{
	return (struct dli_schedule){.freq = freq, .start_step = start, .end_step = end};
}

static void test_default(void)
{
	struct dli_schedule s;

	dli_schedule_default(&s);
	CHECK_INT(s.freq, 1);
	CHECK_INT(s.start_step, 0);
	CHECK_INT(s.end_step, DLI_NEVER);
	CHECK(s.ranges == NULL && s.n_ranges == 0);
	CHECK(dli_schedule_active(&s, 0));
	CHECK(dli_schedule_active(&s, 1));
	CHECK(dli_schedule_active(&s, 12345));
	CHECK(!dli_schedule_active(&s, -1));
	CHECK_INT(dli_schedule_next(&s, 0), 1);
	CHECK_INT(dli_schedule_next(&s, -1), 0);
	CHECK_INT(dli_schedule_next(&s, -100), 0);
	CHECK_INT(dli_schedule_next(&s, INT64_MIN), 0);
}

static void test_table(void)
{
	static const struct dli_int_pair two[] = {{0, 2}, {10, 12}};
	static const struct dli_int_pair overlap[] = {{20, 40}, {0, 25}, {50, 50}};
	static const struct dli_int_pair empty_and_one[] = {{9, 3}, {7, 7}};
	static const struct {
		struct dli_schedule s;
		int64_t it;
		bool active;
		int64_t next;
	} cases[] = {
		/* freq counts from 0. */
		{{5, 0, DLI_NEVER, NULL, 0}, 0, true, 5},
		{{5, 0, DLI_NEVER, NULL, 0}, 4, false, 5},
		{{5, 0, DLI_NEVER, NULL, 0}, 5, true, 10},
		{{5, 0, DLI_NEVER, NULL, 0}, 10, true, 15},
		{{5, 0, DLI_NEVER, NULL, 0}, 11, false, 15},
		/* start_step does not shift the multiples. */
		{{5, 3, DLI_NEVER, NULL, 0}, 0, false, 5},
		{{5, 3, DLI_NEVER, NULL, 0}, 3, false, 5},
		{{5, 3, DLI_NEVER, NULL, 0}, 5, true, 10},
		{{1, 3, DLI_NEVER, NULL, 0}, 2, false, 3},
		{{1, 3, DLI_NEVER, NULL, 0}, 3, true, 4},
		/* end_step is inclusive. */
		{{1, 0, 10, NULL, 0}, 9, true, 10},
		{{1, 0, 10, NULL, 0}, 10, true, DLI_NEVER},
		{{1, 0, 10, NULL, 0}, 11, false, DLI_NEVER},
		{{4, 0, 10, NULL, 0}, 8, true, DLI_NEVER},
		{{4, 2, 3, NULL, 0}, 0, false, DLI_NEVER},
		{{1, 5, 4, NULL, 0}, 4, false, DLI_NEVER},
		/* start_end_list replaces start/end; intervals inclusive. */
		{{1, 100, 200, two, 2}, 0, true, 1},
		{{1, 100, 200, two, 2}, 2, true, 10},
		{{1, 100, 200, two, 2}, 3, false, 10},
		{{1, 100, 200, two, 2}, 12, true, DLI_NEVER},
		{{1, 100, 200, two, 2}, 150, false, DLI_NEVER},
		{{3, 0, DLI_NEVER, two, 2}, 0, true, 12},
		{{3, 0, DLI_NEVER, two, 2}, 1, false, 12},
		{{1, 0, DLI_NEVER, overlap, 3}, 22, true, 23},
		{{1, 0, DLI_NEVER, overlap, 3}, 40, true, 50},
		{{7, 0, DLI_NEVER, overlap, 3}, 35, true, DLI_NEVER},
		{{1, 0, DLI_NEVER, empty_and_one, 2}, 0, false, 7},
		{{1, 0, DLI_NEVER, empty_and_one, 2}, 5, false, 7},
		{{1, 0, DLI_NEVER, empty_and_one, 2}, 7, true, DLI_NEVER},
		/* An empty list selects nothing (ranges set, n_ranges 0). */
		{{1, 0, DLI_NEVER, two, 0}, 0, false, DLI_NEVER},
		/* Negative iterations are never selected; a negative start does not select them either. */
		{{1, -10, DLI_NEVER, NULL, 0}, -4, false, 0},
		{{5, 3, DLI_NEVER, NULL, 0}, -100, false, 5},
		/* freq < 1 cannot come from a config; it selects nothing instead of dividing by zero. */
		{{0, 0, DLI_NEVER, NULL, 0}, 0, false, DLI_NEVER},
		{{-3, 0, DLI_NEVER, NULL, 0}, 3, false, DLI_NEVER},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool active = dli_schedule_active(&cases[i].s, cases[i].it);
		int64_t next = dli_schedule_next(&cases[i].s, cases[i].it);

		CHECK(active == cases[i].active);
		CHECK_INT(next, cases[i].next);
		if (active != cases[i].active || next != cases[i].next)
			fprintf(stderr, "  case %zu (it %" PRId64 ")\n", i, cases[i].it);
	}
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static int64_t rnd(int64_t lo, int64_t hi) /* inclusive */
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return lo + (int64_t)(rng_state % (uint64_t)(hi - lo + 1));
}

static int64_t add_sat(int64_t a, int64_t b) /* b >= 0 */
{
	return a > INT64_MAX - b ? INT64_MAX : a + b;
}

/* Random schedules placed at `base` (0, or close to INT64_MAX), each checked at every step around
 * them against the reference. */
static void random_schedules(int64_t base, int64_t span, int count)
{
	struct dli_int_pair ranges[4];
	int mismatches = 0;

	for (int k = 0; k < count; k++) {
		struct dli_schedule s = plain(rnd(1, 25), base + rnd(0, span), DLI_NEVER);
		int64_t bound, first_it;

		if (rnd(0, 2) != 0)
			s.end_step = base + rnd(0, span);
		if (rnd(0, 2) == 0) {
			s.n_ranges = (size_t)rnd(0, 4);
			for (size_t r = 0; r < s.n_ranges; r++) {
				ranges[r].first = base + rnd(0, span);
				/* Mostly ordered; some empty (first > second); some open-ended. */
				ranges[r].second = rnd(0, 9) == 0 ? DLI_NEVER
						   : rnd(0, 5) == 0 ? base + rnd(0, span)
								    : add_sat(ranges[r].first, rnd(0, span / 4));
				if (ranges[r].second < ranges[r].first && ranges[r].second != DLI_NEVER &&
				    rnd(0, 1))
					ranges[r].second = ranges[r].first;
			}
			s.ranges = ranges;
		}
		bound = last_possible(&s);
		first_it = base == 0 ? -3 : base - 3;
		for (int64_t it = first_it;; it++) {
			int64_t want = ref_next(&s, it, bound);
			int64_t got = dli_schedule_next(&s, it);

			if (dli_schedule_active(&s, it) != ref_active(&s, it) || got != want) {
				if (mismatches++ < 10)
					fprintf(stderr,
						"  schedule %d (freq %" PRId64 " start %" PRId64 " end %" PRId64
						" ranges %zu) at %" PRId64 ": next %" PRId64 ", expected %" PRId64
						"\n",
						k, s.freq, s.start_step, s.end_step, s.n_ranges, it, got, want);
			}
			if (it == INT64_MAX || it - base >= span + span / 4 + 30)
				break;
		}
	}
	CHECK_INT(mismatches, 0);
}

static void test_int64_max(void)
{
	struct dli_schedule s;
	int64_t top5 = INT64_MAX - INT64_MAX % 5; /* the largest multiple of 5 */
	int64_t top3 = INT64_MAX - INT64_MAX % 3;
	struct dli_int_pair high[] = {{INT64_MAX - 2, INT64_MAX}}; /* holds one multiple of 3 */

	dli_schedule_default(&s);
	CHECK(dli_schedule_active(&s, INT64_MAX));
	CHECK_INT(dli_schedule_next(&s, INT64_MAX - 1), INT64_MAX);
	CHECK_INT(dli_schedule_next(&s, INT64_MAX), DLI_NEVER);

	s = plain(5, 0, DLI_NEVER);
	CHECK(dli_schedule_active(&s, top5));
	CHECK(!dli_schedule_active(&s, INT64_MAX));
	CHECK_INT(dli_schedule_next(&s, top5 - 1), top5);
	CHECK_INT(dli_schedule_next(&s, top5), DLI_NEVER);
	CHECK_INT(dli_schedule_next(&s, INT64_MAX - 1), DLI_NEVER);
	CHECK_INT(dli_schedule_next(&s, INT64_MAX), DLI_NEVER);

	/* Rounding up past INT64_MAX must not wrap around. */
	s = plain(INT64_C(1) << 62, 0, DLI_NEVER);
	CHECK_INT(dli_schedule_next(&s, 0), INT64_C(1) << 62);
	CHECK_INT(dli_schedule_next(&s, INT64_C(1) << 62), DLI_NEVER);
	CHECK_INT(dli_schedule_next(&s, INT64_MAX - 1), DLI_NEVER);

	s = plain(INT64_MAX, 0, DLI_NEVER);
	CHECK(dli_schedule_active(&s, 0));
	CHECK(dli_schedule_active(&s, INT64_MAX));
	CHECK(!dli_schedule_active(&s, 1));
	CHECK_INT(dli_schedule_next(&s, 0), INT64_MAX);
	CHECK_INT(dli_schedule_next(&s, -1), 0);

	s = plain(1, INT64_MAX, DLI_NEVER);
	CHECK_INT(dli_schedule_next(&s, 0), INT64_MAX);
	CHECK(!dli_schedule_active(&s, INT64_MAX - 1));

	s = plain(3, 0, DLI_NEVER);
	s.ranges = high;
	s.n_ranges = 1;
	CHECK_INT(dli_schedule_next(&s, 0), top3);
	CHECK_INT(dli_schedule_next(&s, top3), DLI_NEVER);
	CHECK(dli_schedule_active(&s, top3));
	CHECK(!dli_schedule_active(&s, top3 - 3));

	s = plain(1, 0, INT64_MAX - 1);
	CHECK_INT(dli_schedule_next(&s, INT64_MAX - 2), INT64_MAX - 1);
	CHECK_INT(dli_schedule_next(&s, INT64_MAX - 1), DLI_NEVER);
	CHECK(!dli_schedule_active(&s, INT64_MAX));

	CHECK_INT(dli_schedule_next(&s, INT64_MIN), 0);
	CHECK(!dli_schedule_active(&s, INT64_MIN));
}

int main(void)
{
	test_default();
	test_table();
	random_schedules(0, 200, 2000);
	random_schedules(INT64_MAX - 300, 300, 300);
	test_int64_max();
	return check_exit();
}
