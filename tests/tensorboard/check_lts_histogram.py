"""Checks a tb_lts_driver run (LogTensorStats with `histogram`) with TensorBoard's own reader: every
{layer}_{tensor}_histogram that EventAccumulator's Histograms() returns has, spread back over
TensorFlow's default bucket limits, the counts numpy.histogram gives for the data the driver fed
(its data/*.f32 files), and the right num, min, max, sum and sum_squares; runs of empty buckets are
collapsed as TensorFlow does; the histograms are not scalars (not in TensorBoard's scalars, not in
the file logger).

Usage: check_lts_histogram.py RUN_DIR STEPS
"""
import math
import os
import re
import sys

import numpy as np

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)
    return cond


def tf_limits():
    """TensorFlow's InitDefaultBucketsInner: 1e-12 growing by 10% while below 1e20, DBL_MAX,
    mirrored, 0 in the middle."""
    pos, v = [], 1.0e-12
    while v < 1.0e20:
        pos.append(v)
        v *= 1.1
    pos.append(sys.float_info.max)
    return np.array([-p for p in reversed(pos)] + [0.0] + pos)


LIMITS = tf_limits()


def reference(x):
    """Counts per bucket (limit[k-1], limit[k]]: -inf in the first bucket, +inf in the last, NaN in
    none. numpy.histogram's bins are [a, b), so it bins -x over the negated limits, reversed."""
    finite = x[np.isfinite(x)]
    edges = -LIMITS[::-1]
    counts_np, _ = np.histogram(-finite, bins=edges)
    ref = np.zeros(len(LIMITS))
    ref[1:] = counts_np[::-1]
    ref[0] += np.count_nonzero(x == -np.inf)
    ref[-1] += np.count_nonzero(x == np.inf)
    # The same by a search over the limits, as a second opinion.
    idx = np.minimum(np.searchsorted(LIMITS, x[~np.isnan(x)], side="left"), len(LIMITS) - 1)
    check(np.array_equal(ref, np.bincount(idx, minlength=len(LIMITS)).astype(float)),
          "numpy.histogram and searchsorted agree")
    return ref


def expand(tag, step, limits, counts):
    """The compacted histogram spread back over all buckets; checks it is TensorFlow's encoding."""
    full = np.zeros(len(LIMITS))
    pos = np.searchsorted(LIMITS, limits)
    ok = check(len(limits) > 0 and all(p < len(LIMITS) and LIMITS[p] == l for p, l in zip(pos, limits)),
               "%s step %d: every bucket limit is one of TensorFlow's" % (tag, step))
    if not ok:
        return full
    check(limits[-1] == sys.float_info.max, "%s step %d: the last limit is DBL_MAX" % (tag, step))
    check(all(a < b for a, b in zip(limits, limits[1:])), "%s step %d: limits ascend" % (tag, step))
    check(not any(a == 0 and b == 0 for a, b in zip(counts, counts[1:])),
          "%s step %d: runs of empty buckets are collapsed" % (tag, step))
    full[pos] = counts
    return full


def close(a, b, tol):
    if math.isnan(b) or math.isinf(b):
        return (math.isnan(a) and math.isnan(b)) or a == b
    return abs(a - b) <= tol


def main():
    run_dir, steps = sys.argv[1], int(sys.argv[2])
    from tensorboard.backend.event_processing import event_accumulator as ea

    data = {}
    name_re = re.compile(r"^(.+)_(activation|gradient)_(\d{6})\.f32$")
    for f in sorted(os.listdir(os.path.join(run_dir, "data"))):
        m = name_re.match(f)
        if check(m, "data file name %s" % f):
            data[("%s_%s_histogram" % (m.group(1), m.group(2)), int(m.group(3)))] = np.fromfile(
                os.path.join(run_dir, "data", f), dtype="<f4").astype(np.float64)
    check(len(data) == 2 * 2 * steps, "%d data files for %d steps" % (len(data), steps))

    acc = ea.EventAccumulator(os.path.join(run_dir, "tensorboard"),
                              size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0})
    acc.Reload()
    tags = acc.Tags()
    want_tags = sorted({tag for tag, _ in data})
    check(sorted(tags["histograms"]) == want_tags, "histogram tags %s, expected %s" % (tags["histograms"], want_tags))
    check(not any(t.endswith("_histogram") for t in tags["scalars"]), "no histogram among the scalars")
    check(any(t.endswith("_activation_max") for t in tags["scalars"]), "the scalars are there too")

    seen = 0
    for tag in tags["histograms"]:
        for ev in acc.Histograms(tag):
            key = (tag, ev.step)
            seen += 1
            if not check(key in data, "histogram %s step %d matches data the driver fed" % key):
                continue
            x = data[key]
            h = ev.histogram_value
            got = expand(tag, ev.step, list(h.bucket_limit), list(h.bucket))
            want = reference(x)
            if not check(np.array_equal(got, want), "%s step %d: counts equal numpy's" % key):
                bad = np.nonzero(got != want)[0][:5]
                print("  buckets %s: got %s, numpy %s" % (bad, got[bad], want[bad]), file=sys.stderr)
            values = x[~np.isnan(x)]
            check(h.num == len(values) == got.sum(), "%s step %d: num %r, %d non-NaN values" % (tag, ev.step, h.num, len(values)))
            check(h.min == values.min() and h.max == values.max(),
                  "%s step %d: min %r max %r, expected %r %r" % (tag, ev.step, h.min, h.max, values.min(), values.max()))
            with np.errstate(invalid="ignore", over="ignore"):
                s, sq, sa = x.sum(), (x * x).sum(), np.abs(x).sum()
            check(close(h.sum, s, 1e-5 * sa), "%s step %d: sum %r, expected %r" % (tag, ev.step, h.sum, s))
            check(close(h.sum_squares, sq, 1e-5 * sq), "%s step %d: sum_squares %r, expected %r" % (tag, ev.step, h.sum_squares, sq))
            nonempty = np.count_nonzero(want)
            check(len(h.bucket) <= 2 * nonempty + 1,
                  "%s step %d: %d buckets sent for %d non-empty ones" % (tag, ev.step, len(h.bucket), nonempty))
    check(seen == len(data), "TensorBoard has %d histograms, the driver fed %d tensors" % (seen, len(data)))

    stats_log = os.path.join(run_dir, "nvdlfw_inspect_statistics_logs", "nvdlfw_inspect_globalrank-0.log")
    with open(stats_log) as fp:
        text = fp.read()
    check("_max " in text and "_histogram" not in text, "the file logger has the scalars and no histogram")

    if failures:
        print("%s: %d failures" % (run_dir, len(failures)), file=sys.stderr)
        return 1
    print("%s: %d LogTensorStats histograms checked against numpy" % (run_dir, seen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
