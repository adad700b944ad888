/* Scheduling shared by every feature: freq, start_step, end_step (inclusive), start_end_list. */
#ifndef DLI_SCHEDULE_PRIVATE_H
#define DLI_SCHEDULE_PRIVATE_H

#include <stdbool.h>
#include <stdint.h>

#include <dlinspect/plugin.h>

/* A step is selected when step % freq == 0 (counted from 0, not from start) and it lies in
 * [start_step, end_step], or, with start_end_list, in one of its inclusive ranges. */
bool dli_schedule_active(const struct dli_schedule *s, int64_t iteration);

/* The first selected iteration strictly after `iteration`, or DLI_NEVER. Overflow-safe for
 * iterations near INT64_MAX. */
int64_t dli_schedule_next(const struct dli_schedule *s, int64_t iteration);

/* Active at `iteration`, with *next the first iteration at which that may change (see plugin.h). */
bool dli_schedule_query(const struct dli_schedule *s, int64_t iteration, int64_t *next);

/* The schedule when no key is given: every step. */
void dli_schedule_default(struct dli_schedule *s);

#endif
