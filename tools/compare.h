/* `dlinspect compare --plot`: the picture of the diverging tags, written by tools/compare-plot.c
 * as a PNG without any library (stored deflate blocks, a built-in bitmap font). */
#ifndef DLI_TOOLS_COMPARE_H
#define DLI_TOOLS_COMPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One run's values of one tag, in increasing iteration order. Borrowed. */
struct dli_cmp_series {
	const int64_t *iteration;
	const double *value;
	size_t n;
};

/* One panel of the grid: a tag, its series in run A and run B, and where they first diverge. */
struct dli_cmp_panel {
	const char *tag;
	struct dli_cmp_series run[2];
	bool has_divergence;
	int64_t divergence;
};

/* The largest number of panels one picture holds; the caller passes the first ones. */
#define DLI_CMP_PLOT_MAX 12

/* Writes the panels (n <= DLI_CMP_PLOT_MAX; n == 0 writes a picture that says no tag differs) as
 * an RGB PNG at `path`. Returns 0, or -errno with a sentence in err. */
int dli_cmp_plot_png(const char *path, const struct dli_cmp_panel *panels, size_t n, char *err,
		     size_t err_size);

#endif
