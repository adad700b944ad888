/* Scheduling shared by every feature: whether a step is selected by freq / start_step / end_step /
 * start_end_list, and which step is selected next (so hosts can skip asking until then). */
#include "schedule-private.h"

void dli_schedule_default(struct dli_schedule *s)
{
	s->freq = 1;
	s->start_step = 0;
	s->end_step = DLI_NEVER;
	s->ranges = NULL;
	s->n_ranges = 0;
}

bool dli_schedule_active(const struct dli_schedule *s, int64_t iteration)
{
	/* freq < 1 cannot come from a config (the core rejects it); treat it as selecting nothing rather
	 * than dividing by zero. */
	if (!s || s->freq < 1 || iteration < 0 || iteration % s->freq != 0)
		return false;
	if (!s->ranges)
		return s->start_step <= iteration && iteration <= s->end_step;
	for (size_t i = 0; i < s->n_ranges; i++)
		if (s->ranges[i].first <= iteration && iteration <= s->ranges[i].second)
			return true;
	return false;
}

/* The first multiple of freq in [max(lo, 0), hi], or DLI_NEVER. Constant time and overflow-safe:
 * the round-up is checked against the room left below INT64_MAX before it is added. */
static int64_t first_multiple(int64_t freq, int64_t lo, int64_t hi)
{
	int64_t rem, c;

	if (lo < 0)
		lo = 0;
	if (lo > hi)
		return DLI_NEVER;
	rem = lo % freq;
	if (rem == 0) {
		c = lo;
	} else {
		if (lo > INT64_MAX - (freq - rem))
			return DLI_NEVER;
		c = lo + (freq - rem);
	}
	return c <= hi ? c : DLI_NEVER;
}

int64_t dli_schedule_next(const struct dli_schedule *s, int64_t iteration)
{
	int64_t lo, best;

	if (!s || s->freq < 1 || iteration == INT64_MAX)
		return DLI_NEVER;
	lo = iteration + 1;
	if (!s->ranges)
		return first_multiple(s->freq, lo > s->start_step ? lo : s->start_step, s->end_step);
	best = DLI_NEVER;
	for (size_t i = 0; i < s->n_ranges; i++) {
		int64_t first = s->ranges[i].first;
		int64_t c = first_multiple(s->freq, lo > first ? lo : first, s->ranges[i].second);

		if (c < best)
			best = c;
	}
	return best;
}

bool dli_schedule_query(const struct dli_schedule *s, int64_t iteration, int64_t *next)
{
	bool active = dli_schedule_active(s, iteration);
	/* A selected step's answer may change right after it; an idle step's at the next selected. */
	*next = active ? (iteration < INT64_MAX ? iteration + 1 : DLI_NEVER)
		       : dli_schedule_next(s, iteration);
	return active;
}
