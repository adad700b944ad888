"""Checks a tb_driver run with TensorBoard's own readers (interop): every value the TbEmit fixture
sent (its expected.txt) is in the event files with its tag and step, float32-exact, and equals the
file logger's line for the same statistic; histograms read back with their buckets.

Usage: check_run.py RUN_DIR --file yes|no --tensorboard yes|no [--histograms yes|no]
"""
import argparse
import math
import os
import re
import struct
import sys
import time

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)
    return cond


def f32(x):
    """x as TensorBoard stores a simple_value: rounded to float32."""
    return struct.unpack("<f", struct.pack("<f", x))[0] if math.isfinite(x) else x


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def read_expected(run_dir):
    scalars, histograms = {}, {}
    with open(os.path.join(run_dir, "expected.txt")) as fp:
        for line in fp:
            f = line.rstrip("\n").split("\t")
            if f[0] == "S":
                scalars[(f[1], int(f[2]))] = float(f[3])
            else:
                n = int(f[8])
                nums = [float(x) for x in f[3:8]]
                limits = [float(x) for x in f[9 : 9 + n]]
                counts = [float(x) for x in f[9 + n : 9 + 2 * n]]
                histograms[(f[1], int(f[2]))] = (nums, limits, counts)
    return scalars, histograms


STATS_LOG = "nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"
LINE_RE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - INFO - (.+) \t\t\t\t iteration=(\d{6,}) \t\t\t\t value=(\S+)$"
)


def read_file_logger(run_dir):
    values = {}
    with open(os.path.join(run_dir, STATS_LOG)) as fp:
        for line in fp:
            m = LINE_RE.match(line.rstrip("\n"))
            if check(m, "statistics line in the file logger's layout: %r" % line):
                key = (m.group(1), int(m.group(2)))
                check(key not in values, "one file logger line for %s" % (key,))
                values[key] = float(m.group(3))
    return values


def check_records(path):
    """Every record of the file passes TensorBoard's own CRC checks and decodes as an Event: the
    file version first, then summaries; wall times are real times, never NaN."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow

    reader = pywrap_tensorflow.PyRecordReader_New(path)
    events = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            break
        except errors.DataLossError as e:
            check(False, "TensorBoard's record reader: %s" % e)
            break
        events.append(event_pb2.Event.FromString(reader.record()))
    if check(events, "records in %s" % path):
        check(events[0].file_version == "brain.Event:2", "first record is the file version")
    now = time.time()
    for e in events:
        check(math.isfinite(e.wall_time) and abs(e.wall_time - now) < 3600, "wall time %r" % e.wall_time)
    for e in events[1:]:
        check(e.WhichOneof("what") == "summary", "a summary event")
    return len(events)


def check_tensorboard(run_dir, scalars, histograms, with_histograms, file_values):
    from tensorboard.backend.event_processing import event_accumulator as ea

    tb_dir = os.path.join(run_dir, "tensorboard")
    files = [f for f in os.listdir(tb_dir) if f.startswith("events.out.tfevents.")]
    if not check(len(files) == 1, "one event file in %s, found %s" % (tb_dir, files)):
        return
    check(re.match(r"^events\.out\.tfevents\.\d{10}\..+\.\d+\.\d+$", files[0]), "event file name %s" % files[0])
    n_records = check_records(os.path.join(tb_dir, files[0]))
    check(n_records == 1 + len(scalars) + (len(histograms) if with_histograms else 0),
          "record count %d" % n_records)

    acc = ea.EventAccumulator(tb_dir, size_guidance={ea.SCALARS: 0, ea.HISTOGRAMS: 0})
    acc.Reload()
    tags = acc.Tags()
    want_tags = sorted({tag for tag, _ in scalars})
    check(sorted(tags["scalars"]) == want_tags, "scalar tags %s, expected %s" % (tags["scalars"], want_tags))
    seen = 0
    for tag in tags["scalars"]:
        check(acc.SummaryMetadata(tag).plugin_data.plugin_name == "scalars", "%s: scalars plugin" % tag)
        for ev in acc.Scalars(tag):
            key = (tag, ev.step)
            seen += 1
            if not check(key in scalars, "%s step %d was sent" % key):
                continue
            check(same(ev.value, f32(scalars[key])),
                  "%s step %d: TensorBoard has %r, sent %r (float32 %r)" % (tag, ev.step, ev.value, scalars[key], f32(scalars[key])))
            if file_values is not None and key in file_values:
                check(same(ev.value, f32(file_values[key])),
                      "%s step %d: TensorBoard %r, file logger %r" % (tag, ev.step, ev.value, file_values[key]))
    check(seen == len(scalars), "TensorBoard has %d scalars, %d were sent" % (seen, len(scalars)))

    if not with_histograms:
        check(not tags["histograms"], "no histograms with histograms: false")
        return
    want_tags = sorted({tag for tag, _ in histograms})
    check(sorted(tags["histograms"]) == want_tags, "histogram tags %s" % tags["histograms"])
    seen = 0
    for tag in tags["histograms"]:
        for ev in acc.Histograms(tag):
            key = (tag, ev.step)
            seen += 1
            if not check(key in histograms, "histogram %s step %d was sent" % key):
                continue
            nums, limits, counts = histograms[key]
            h = ev.histogram_value
            check([h.min, h.max, h.num, h.sum, h.sum_squares] == nums, "%s step %d: min..sum_squares" % key)
            check(list(h.bucket_limit) == limits, "%s step %d: bucket limits" % key)
            check(list(h.bucket) == counts, "%s step %d: buckets" % key)
    check(seen == len(histograms), "TensorBoard has %d histograms, %d were sent" % (seen, len(histograms)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--file", choices=["yes", "no"], required=True)
    ap.add_argument("--tensorboard", choices=["yes", "no"], required=True)
    ap.add_argument("--histograms", choices=["yes", "no"], default="yes")
    a = ap.parse_args()

    scalars, histograms = read_expected(a.run_dir)
    check(scalars and histograms, "the fixture sent values")
    file_values = None
    stats_dir = os.path.join(a.run_dir, os.path.dirname(STATS_LOG))
    if a.file == "yes":
        file_values = read_file_logger(a.run_dir)
        check(set(file_values) == set(scalars), "the file logger has every scalar sent, and no other")
        for key, value in scalars.items():
            if key in file_values:
                check(same(f32(file_values[key]), f32(value)),
                      "file logger %s step %d: %r, sent %r" % (key[0], key[1], file_values[key], value))
    else:
        check(not os.path.exists(stats_dir), "no statistics log without the file logger")
    if a.tensorboard == "yes":
        check_tensorboard(a.run_dir, scalars, histograms, a.histograms == "yes", file_values)
    else:
        check(not os.path.exists(os.path.join(a.run_dir, "tensorboard")), "no tensorboard dir without the tensorboard logger")

    if failures:
        print("%s: %d failures" % (a.run_dir, len(failures)), file=sys.stderr)
        return 1
    print("%s: %d scalars, %d histograms checked (file logger: %s, tensorboard: %s)"
          % (a.run_dir, len(scalars), len(histograms), a.file, a.tensorboard))
    return 0


if __name__ == "__main__":
    sys.exit(main())
