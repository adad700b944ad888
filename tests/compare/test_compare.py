#!/usr/bin/env python3
"""`dlinspect compare` against a naive reference written here: statistics logs in the file logger's
layout (docs/logging.md) are written by this script, both runs are read whole into dicts, and per
tag the first divergence (math.isclose with the same rtol/atol, nan equal to nan), the largest
differences and the iterations of one run only are computed the obvious way; the command's --json
report must say the same, tag by tag, in the same order. Also: exit statuses, tolerance edges
(exactly at rtol and atol, nan, inf, -0), malformed lines (exit 2 with file:line:col and what was
expected), how a run's log is found in a dir, and --plot's PNG (signature, chunk CRCs, the size of
the inflated IDAT, pixels of both runs' colours).

With --trainer TRAINER, the same checks on real logs instead: dlinspect-train (its file logger)
writes an fp32 run twice and an FP8 run, and a copy of the fp32 log gets one tag changed from
iteration k on.

Standard library only. argv: the dlinspect binary, a scratch directory, optionally --trainer PATH.
"""
import json
import math
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

TOOL = os.path.abspath(sys.argv[1])
RUN_A_COLOR = (31, 119, 180)
RUN_B_COLOR = (255, 127, 14)

passed = 0


def check(cond, what):
    global passed
    if not cond:
        print("FAIL:", what)
        sys.exit(1)
    passed += 1


def fmt(v):
    """The file logger's spelling: %.9g, and nan/inf/-inf as Python prints them."""
    if isinstance(v, str):
        return v
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return "%.9g" % v


def line(tag, it, v):
    return "2026-11-23 22:00:00,123 - INFO - %s \t\t\t\t iteration=%06d \t\t\t\t value=%s\n" % (
        tag, it, fmt(v))


def write_log(path, rows):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for tag, it, v in rows:
            f.write(line(tag, it, v))


def run(*args):
    r = subprocess.run([TOOL, "compare"] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    err = r.stderr.decode("utf-8", "surrogateescape")
    # Under a sanitizer, a report must fail the test even where exit status 1 is expected.
    check("Sanitizer" not in err and "runtime error" not in err,
          "compare %s: sanitizer report:\n%s" % (" ".join(map(str, args)), err))
    return r.returncode, r.stdout.decode("utf-8", "surrogateescape"), err


# ---- the reference ----

def read_log(path):
    """{tag: {iteration: value}}, parsed naively: the tag is what lies between the second ' - ' and
    the first tab, less the one space before the tab."""
    runs = {}
    with open(path, encoding="utf-8") as f:
        for text in f:
            text = text.rstrip("\n")
            if not text:
                continue
            head, rest = text.split("\t", 1)
            tag = head.split(" - ", 2)[2]
            assert tag.endswith(" ")
            tag = tag[:-1]
            fields = dict(p.split("=", 1) for p in rest.split() if "=" in p)
            runs.setdefault(tag, {})[int(fields["iteration"])] = float(fields["value"])
    return runs


def agree(a, b, rtol, atol):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rtol, abs_tol=atol)


def diffs(a, b):
    if (math.isnan(a) and math.isnan(b)) or a == b:
        return 0.0, 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf, math.inf
    d, m = abs(a - b), max(abs(a), abs(b))
    # A difference past the double range (1e308 against -1e308): relative to the scaled values.
    return d, abs(a / m - b / m) if math.isinf(d) else d / m


def reference(pa, pb, rtol=1e-5, atol=1e-8, strict=False, tags=None):
    """The report as a list of dicts in the report's order, and whether any tag differs."""
    A, B = read_log(pa), read_log(pb)
    if tags is not None:
        A = {t: v for t, v in A.items() if re.search(tags, t)}
        B = {t: v for t, v in B.items() if re.search(tags, t)}
    out = []
    for tag in set(A) | set(B):
        a, b = A.get(tag, {}), B.get(tag, {})
        both = sorted(set(a) & set(b))
        r = {"tag": tag, "values_a": len(a), "values_b": len(b), "compared": len(both),
             "first": None, "max_abs": None, "max_rel": None}
        for it in both:
            x, y = a[it], b[it]
            if r["first"] is None and not agree(x, y, rtol, atol):
                r["first"] = (it, x, y)
            d, rel = diffs(x, y)
            if r["max_abs"] is None or d > r["max_abs"][0]:
                r["max_abs"] = (d, it)
            if r["max_rel"] is None or rel > r["max_rel"][0]:
                r["max_rel"] = (rel, it)
        only_a = sorted(set(a) - set(b))
        only_b = sorted(set(b) - set(a))
        r["only_a"] = (len(only_a), only_a[0] if only_a else None)
        r["only_b"] = (len(only_b), only_b[0] if only_b else None)
        if strict:
            firsts = [r["first"]] if r["first"] else []
            firsts += [(it, a[it], None) for it in only_a[:1]]
            firsts += [(it, None, b[it]) for it in only_b[:1]]
            r["first"] = min(firsts, key=lambda f: f[0]) if firsts else None
        r["status"] = ("differ" if r["first"] else "only_a" if not b else "only_b" if not a
                       else "agree")
        out.append(r)
    rank = {"differ": 0, "agree": 1, "only_a": 2, "only_b": 2}
    out.sort(key=lambda r: (rank[r["status"]], r["first"][0] if r["first"] else 0,
                            r["tag"].encode("utf-8")))
    return out, any(r["status"] == "differ" for r in out)


def num(v):
    """A JSON number of the report, where nan and infinities are strings."""
    return float(v) if v is not None else None


def same(x, y):
    if x is None or y is None:
        return x is None and y is None
    return (math.isnan(x) and math.isnan(y)) or x == y


def check_against_reference(pa, pb, opts, name):
    rtol = float(opts[opts.index("--rtol") + 1]) if "--rtol" in opts else 1e-5
    atol = float(opts[opts.index("--atol") + 1]) if "--atol" in opts else 1e-8
    strict = "--strict" in opts
    tags = opts[opts.index("--tags") + 1] if "--tags" in opts else None
    want, any_diff = reference(pa, pb, rtol, atol, strict, tags)
    rc, out, err = run(pa, pb, "--json", *opts)
    # Nothing compared and nothing differing: a vacuous agreement, an input error (exit 2).
    rc_want = 1 if any_diff else 0 if any(r["compared"] for r in want) else 2
    check(rc == rc_want, "%s: exit status %d, expected %d (%s)" % (name, rc, rc_want, err))
    got = json.loads(out)
    check(got["differ"] == any_diff, "%s: differ" % name)
    check(got["a"]["values"] == sum(r["values_a"] for r in want), "%s: values of A" % name)
    check(got["b"]["tags"] == sum(1 for r in want if r["values_b"]), "%s: tags of B" % name)
    check([t["tag"] for t in got["tags"]] == [r["tag"] for r in want],
          "%s: tags or their order: %s, expected %s" % (
              name, [t["tag"] for t in got["tags"]][:8], [r["tag"] for r in want][:8]))
    for g, w in zip(got["tags"], want):
        tag = w["tag"]
        check(g["status"] == w["status"], "%s: %s status %s, expected %s" % (
            name, tag, g["status"], w["status"]))
        for k in ("values_a", "values_b", "compared"):
            check(g[k] == w[k], "%s: %s %s" % (name, tag, k))
        if w["first"] is None:
            check(g["first_divergence"] is None, "%s: %s has no divergence" % (name, tag))
        else:
            f = g["first_divergence"]
            check(f["iteration"] == w["first"][0] and same(num(f["a"]), w["first"][1]) and
                  same(num(f["b"]), w["first"][2]),
                  "%s: %s first divergence %s, expected %s" % (name, tag, f, w["first"]))
        for k in ("max_abs", "max_rel"):
            if w[k] is None:
                check(g[k] is None, "%s: %s %s is null" % (name, tag, k))
            else:
                check(same(num(g[k]["value"]), w[k][0]) and g[k]["iteration"] == w[k][1],
                      "%s: %s %s %s, expected %s" % (name, tag, k, g[k], w[k]))
        for s in ("a", "b"):
            o = g["only_" + s]
            check((o["count"], o["first"]) == w["only_" + s], "%s: %s only_%s %s, expected %s" % (
                name, tag, s, o, w["only_" + s]))
    return got


# ---- the cases ----

def test_identical(tmp):
    rows = [("model.l%d_activation_%s" % (l, s), it, random.uniform(-3, 3))
            for it in range(0, 200, 10) for l in range(3) for s in ("max", "min", "std")]
    write_log(tmp + "/same/a.log", rows)
    write_log(tmp + "/same/b.log", rows)
    rc, out, err = run(tmp + "/same/a.log", tmp + "/same/b.log")
    check(rc == 0, "identical runs: exit 0 (%d, %s)" % (rc, err))
    check("no tag differs beyond tolerance (9 tags)" in out, "identical runs: text says so:\n" + out)
    check_against_reference(tmp + "/same/a.log", tmp + "/same/b.log", [], "identical")


def test_one_tag_from_k(tmp):
    k = 70
    tags = ["model.l%d_%s_%s" % (l, t, s) for l in range(2) for t in ("activation", "gradient")
            for s in ("max", "l2_norm")]
    rows_a = [(t, it, 1.0 + 0.01 * it + i) for it in range(0, 150, 10) for i, t in enumerate(tags)]
    victim = tags[2]
    rows_b = [(t, it, v * (1.001 if t == victim and it >= k else 1.0)) for t, it, v in rows_a]
    a, b = tmp + "/k/a.log", tmp + "/k/b.log"
    write_log(a, rows_a)
    write_log(b, rows_b)
    rc, out, err = run(a, b)
    check(rc == 1, "one tag from k: exit 1")
    rows = [l.split() for l in out.splitlines() if l.endswith(victim)]
    check(len(rows) == 1 and rows[0][0] == str(k), "one tag from k: text names %d and %s:\n%s" % (
        k, victim, out))
    check("1 of %d tags differs" % len(tags) in out, "one tag from k: one tag counted:\n" + out)
    got = check_against_reference(a, b, [], "one tag from k")
    differ = [t["tag"] for t in got["tags"] if t["status"] == "differ"]
    check(differ == [victim], "one tag from k: only %s differs (%s)" % (victim, differ))
    check(got["tags"][0]["first_divergence"]["iteration"] == k, "one tag from k: reports k")
    # Within a looser tolerance, nothing differs.
    rc, out, err = run(a, b, "--rtol", "0.002")
    check(rc == 0, "one tag from k: --rtol 0.002 accepts a 0.1% change")


def test_iteration_sets(tmp):
    a, b = tmp + "/iters/a.log", tmp + "/iters/b.log"
    rows_a = [(t, it, float(it)) for it in range(0, 100, 5) for t in ("x_max", "y_max")]
    rows_b = [(t, it, float(it)) for it in range(0, 120, 10) for t in ("x_max", "y_max")
              if not (t == "y_max" and it == 30)]
    rows_b += [("z_only_b", 50, 1.0)]
    rows_b.sort(key=lambda r: r[1])
    write_log(a, rows_a)
    write_log(b, rows_b)
    got = check_against_reference(a, b, [], "iteration sets")
    check(not got["differ"], "iteration sets: iterations of one run only do not count")
    x = [t for t in got["tags"] if t["tag"] == "x_max"][0]
    check(x["only_a"] == {"count": 10, "first": 5} and x["only_b"] == {"count": 2, "first": 100},
          "iteration sets: x_max's one-run iterations %s %s" % (x["only_a"], x["only_b"]))
    rc, out, err = run(a, b)
    check(rc == 0 and "x_max: 10 in A only (first 5), 2 in B only (first 100)" in out and
          "1 tag in B only" in out and "z_only_b (1 value)" in out,
          "iteration sets: text lists them:\n" + out)
    got = check_against_reference(a, b, ["--strict"], "iteration sets, --strict")
    check(got["differ"] and got["tags"][0]["first_divergence"]["iteration"] == 5,
          "iteration sets: --strict counts the first missing iteration")
    # A log with no values at all is a run that logged nothing, as a missing log: an input
    # error (exit 2), not a run whose every tag is of the other only (which would pass a gate).
    write_log(tmp + "/iters/empty.log", [])
    empty = tmp + "/iters/empty.log"
    rc, out, err = run(a, empty)
    check(rc == 2 and "B: %s holds no statistics (0 lines, no value)" % empty in err,
          "empty B: exit %d, %s" % (rc, err))
    rc, out, err = run(empty, empty)
    check(rc == 2 and "A: %s holds no statistics" % empty in err, "both empty: exit %d, %s" % (rc, err))
    # Not a log: a line past 64 KiB is refused when reached, not read whole; a FIFO is refused
    # before anything waits for a writer.
    with open(tmp + "/iters/long.log", "w") as f:
        f.write("x" * 70000)
    rc, out, err = run(tmp + "/iters/long.log", a)
    check(rc == 2 and "long.log:1: a line longer than 65536 bytes: not a statistics log" in err,
          "long line: exit %d, %s" % (rc, err))
    # Runs with no tag in common, or --tags matching none: nothing is compared, and saying
    # "no tag differs" would pass a gate whatever the runs did (exit 2); --strict counts the
    # one-run tags as differences (exit 1).
    write_log(tmp + "/iters/other.log", [("w_only", 0, 1.0)])
    rc, out, err = run(a, tmp + "/iters/other.log")
    check(rc == 2 and "nothing was compared: no tag has an iteration in both runs" in err,
          "no common tag: exit %d, %s" % (rc, err))
    rc, out, err = run(a, tmp + "/iters/other.log", "--strict")
    check(rc == 1, "no common tag, --strict: exit %d, %s" % (rc, err))
    rc, out, err = run(a, b, "--tags", "^nothing$")
    check(rc == 2 and "no tag that --tags matches has an iteration in both runs" in err,
          "--tags matching none: exit %d, %s" % (rc, err))
    # A backreference is no POSIX ERE (glibc's take exponential time on long tags): refused;
    # inside a bracket expression it is two characters.
    rc, out, err = run(a, b, "--tags", r"(x*)\1_max")
    check(rc == 2 and r"'\1' is a backreference" in err, "backreference: exit %d, %s" % (rc, err))
    rc, out, err = run(a, b, "--tags", r"[\1]|_max")
    check(rc == 0, "a bracket holding \\1: exit %d, %s" % (rc, err))
    # glibc compiles a copy of the pattern per repetition (a{1,32767} takes 8 GB): the
    # product of nested bounds is capped; a brace in a bracket or escaped is no bound.
    rc, out, err = run(a, b, "--tags", "x{1,255}{1,255}")
    check(rc == 2 and "--tags 'x{1,255}{1,255}': repetition counts multiply to 65025 at "
          "'{1,255}' (column 9)" in err, "nested bounds: exit %d, %s" % (rc, err))
    rc, out, err = run(a, b, "--tags", "(_(m{2}|x{,5000})a)x")
    check(rc == 2 and "repetition counts multiply to 5000 at '{,5000}' (column 10)" in err
          and "at most 1000" in err, "a large bound: exit %d, %s" % (rc, err))
    rc, out, err = run(a, b, "--tags", r"((x{0,10}){0,10}[{]?\{?){0,10}_max")
    check(rc == 0, "bounds multiplying to 1000: exit %d, %s" % (rc, err))
    # Bounds side by side add up: 300 of x{1,1000} took 2.4 GB and 2 s, each within the cap;
    # the copies of the whole pattern are capped too (11000 here).
    many = "x{1,1000}" * 11
    rc, out, err = run(a, b, "--tags", many)
    check(rc == 2 and "repetitions expand to 11000 copies of an expression in all, at most "
          "10000" in err, "bounds side by side: exit %d, %s" % (rc, err))
    rc, out, err = run(a, b, "--tags", "x{1,1000}" * 9 + "|_max")
    check(rc == 0, "bounds adding up to 9004: exit %d, %s" % (rc, err))
    # --plot naming a log it reads would overwrite it: refused, the log intact.
    with open(a, "rb") as f:
        before = f.read()
    rc, out, err = run(a, b, "--plot", a)
    with open(a, "rb") as f:
        check(rc == 2 and "--plot %s is the log of run A: it would be overwritten" % a in err
              and f.read() == before, "--plot onto A: exit %d, %s" % (rc, err))
    fifo = tmp + "/iters/fifo.log"
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    rc, out, err = run(fifo, a)
    check(rc == 2 and "fifo.log: a FIFO or a socket, not a file" in err, "FIFO: exit %d, %s" % (rc, err))


def test_tolerance_edges(tmp):
    cases = [  # (a, b, rtol, atol, agree)
        (1.0, 2.0, "0.5", "0", True),                   # |a-b| == rtol * max: agrees
        (1.0, "2.00000001", "0.5", "0", False),         # just beyond (the log holds 9 digits)
        (0.0, 0.25, "0", "0.25", True),                 # |a-b| == atol
        (0.0, "0.250000001", "0", "0.25", False),
        (-0.0, 0.0, "0", "0", True),                    # -0 is 0
        ("nan", "nan", "0", "0", True),
        ("nan", 1.0, "1e9", "1e9", False),              # nan is never close to a number
        ("inf", "inf", "0", "0", True),
        ("-inf", "-inf", "0", "0", True),
        ("inf", "-inf", "1e9", "1e9", False),
        ("inf", 1e308, "1e9", "1e9", False),
        (1e308, -1e308, "1", "0", False),               # |a-b| = 2e308 > 1 * 1e308
        ("4.94065646e-324", 0.0, "0", "0", False),       # the smallest subnormal is not 0
    ]
    for i, (x, y, rtol, atol, want) in enumerate(cases):
        a, b = tmp + "/tol/%d/a.log" % i, tmp + "/tol/%d/b.log" % i
        write_log(a, [("t_max", 0, 1.0), ("t_max", 1, x), ("t_max", 2, 3.0)])
        write_log(b, [("t_max", 0, 1.0), ("t_max", 1, y), ("t_max", 2, 3.0)])
        name = "tolerance %r vs %r, rtol %s atol %s" % (x, y, rtol, atol)
        got = check_against_reference(a, b, ["--rtol", rtol, "--atol", atol], name)
        check(got["differ"] == (not want), name)
        if not want:
            check(got["tags"][0]["first_divergence"]["iteration"] == 1, name + ": at 1")
    # The largest difference of a nan against a number is inf, and the JSON says "inf".
    a, b = tmp + "/tol/nan/a.log", tmp + "/tol/nan/b.log"
    write_log(a, [("t_max", 0, 1.0), ("t_max", 1, "nan")])
    write_log(b, [("t_max", 0, 1.5), ("t_max", 1, 2.0)])
    got = check_against_reference(a, b, [], "nan against a number")
    check(got["tags"][0]["max_abs"] == {"value": "inf", "iteration": 1, "a": "nan", "b": 2},
          "nan against a number: max_abs %s" % got["tags"][0]["max_abs"])


def test_random_against_reference(tmp):
    rng = random.Random(16)
    for case in range(12):
        tags = ["model.layers.%d.mlp.fc%d_%s_%s" % (rng.randrange(3), rng.randrange(1, 3),
                                                   rng.choice(["activation", "gradient"]),
                                                   rng.choice(["max", "min", "std", "zero%"]))
                for _ in range(rng.randrange(1, 12))]
        tags = sorted(set(tags))
        rows_a, rows_b = [], []
        for it in range(0, rng.randrange(5, 60)):
            for t in tags:
                v = rng.choice([rng.uniform(-10, 10), rng.uniform(0, 1e-7), 0.0, -0.0, 1e5])
                if rng.random() < 0.03:
                    v = rng.choice([math.nan, math.inf, -math.inf])
                w = v
                r = rng.random()
                if r < 0.05:
                    w = v * (1 + rng.choice([1e-6, 1e-5, 1e-4, 1e-2]))
                elif r < 0.07:
                    w = rng.choice([math.nan, math.inf, v + 1e-9])
                if rng.random() > 0.05:
                    rows_a.append((t, it, v))
                if rng.random() > 0.05:
                    rows_b.append((t, it, w))
        # Tags of one run only, now and then.
        if rng.random() < 0.5:
            rows_b.append(("b_only_tag_max", 3, 1.0))
        # Lines of one step in any order: the logger writes a step at once, not sorted by tag.
        for rows in (rows_a, rows_b):
            rows.sort(key=lambda r: (r[1], rng.random()))
        a, b = tmp + "/rand/%d/a.log" % case, tmp + "/rand/%d/b.log" % case
        write_log(a, rows_a)
        write_log(b, rows_b)
        for opts in ([], ["--strict"], ["--rtol", "1e-3", "--atol", "1e-6"],
                     ["--tags", "fc1_.*(max|min)$"], ["--tags", "^nothing matches$"]):
            check_against_reference(a, b, opts, "random case %d %s" % (case, opts))


def test_odd_tags(tmp):
    # Tags holding ' - ', '=', escaped control characters, UTF-8, and a trailing space.
    tags = ["a - b_activation_max", "w=1_weight_min", "x\\ty\\n_gradient_std",
            "couche_é_activation_max", "space _activation_max ", "m\\\\n_x_max"]
    rows_a = [(t, it, float(i + it)) for it in range(4) for i, t in enumerate(tags)]
    rows_b = [(t, it, v + (1 if t == "space _activation_max " and it == 2 else 0))
              for t, it, v in rows_a]
    a, b = tmp + "/odd/a.log", tmp + "/odd/b.log"
    write_log(a, rows_a)
    write_log(b, rows_b)
    got = check_against_reference(a, b, [], "odd tags")
    check(got["tags"][0]["tag"] == "space _activation_max ", "odd tags: the trailing space kept")
    # Bytes that are not UTF-8 (a host's layer name): the JSON stays valid, each byte a \u00NN.
    head = b"2026-11-23 22:00:00,123 - INFO - "
    for name, path in ((b"bad\xff\xc3(\xed\xa0\x80_x_max", a), (b"bad\xff\xc3(\xed\xa0\x80_x_max", b)):
        with open(path, "wb") as f:
            f.write(head + name + b" \t\t\t\t iteration=000001 \t\t\t\t value=1\n")
            f.write(head + "é_x_max".encode() + b" \t\t\t\t iteration=000001 \t\t\t\t value=2\n")
    r = subprocess.run([TOOL, "compare", a, b, "--json"], stdout=subprocess.PIPE)
    got = json.loads(r.stdout.decode("utf-8"))
    check(r.returncode == 0 and sorted(t["tag"] for t in got["tags"]) ==
          ["bad\u00ff\u00c3(\u00ed\u00a0\u0080_x_max", "é_x_max"],
          "odd tags: bytes not UTF-8 in JSON: %s" % [t["tag"] for t in got["tags"]])


def expect_error(args, needles, name):
    rc, out, err = run(*args)
    check(rc == 2, "%s: exit 2, got %d (%s%s)" % (name, rc, out, err))
    for n in needles:
        check(n in err, "%s: '%s' in the error: %s" % (name, n, err))
    check(err.count("\n") >= 1 and err.startswith("dlinspect compare: "), name + ": one line")


def test_malformed(tmp):
    good = [("t_max", it, float(it)) for it in range(3)]
    b = tmp + "/bad/good.log"
    write_log(b, good)
    head = "2026-11-23 22:00:00,123 - INFO - "
    cases = [
        ("not a log line at all", "expected '{time} - {LEVEL} - '", 1),
        (head + "dlinspect: a message, not a statistic", "expected a tag, then a tab", 34),
        (head + "t_max \t\t\t\t iter=000003 \t\t\t\t value=1", "expected 'iteration='", len(head) + 12),
        (head + "t_max \t\t\t\t iteration=abc \t\t\t\t value=1", "an integer iteration", len(head) + 22),
        (head + "t_max \t\t\t\t iteration=000003 \t\t\t\t value=", "a number after 'value='",
         None),
        (head + "t_max \t\t\t\t iteration=000003 \t\t\t\t value=1.5x", "the end of the line",
         None),
        # Only the logger's number forms: not strtod's hex floats, "infinity", "nan(...)", nor
        # numbers past double's range (read as an infinity, they would pass for one).
        (head + "t_max \t\t\t\t iteration=000003 \t\t\t\t value=0x1p3", "a number after 'value='",
         None),
        (head + "t_max \t\t\t\t iteration=000003 \t\t\t\t value=infinity",
         "a number after 'value='", None),
        (head + "t_max \t\t\t\t iteration=000003 \t\t\t\t value=nan(0x12)",
         "a number after 'value='", None),
        (head + "t_max \t\t\t\t iteration=000003 \t\t\t\t value=-1e999",
         "expected a number within double's range after 'value=', found '-1e999'", None),
        # ... nor past it at the small end (read as 0, 1e-400 would agree with a logged 0).
        (head + "t_max \t\t\t\t iteration=000003 \t\t\t\t value=1e-400",
         "expected a number within double's range after 'value=', found '1e-400'", None),
        (head + "t_max \t\t\t\t iteration=000003 \t\t\t\t", "'value=' after the iteration", None),
        (head + "t_max \t\t\t\t iteration=000003", "a tab after the iteration", None),
        (head + " \t\t\t\t iteration=000003 \t\t\t\t value=1", "a tag (layer_tensor_stat)", None),
        (head + "t_max \t\t\t\t iteration=000001 \t\t\t\t value=1",
         "iteration 1 of 't_max' comes after iteration 2 (line 3)", None),
    ]
    for i, (text, needle, col) in enumerate(cases):
        a = tmp + "/bad/%d.log" % i
        with open(a, "w") as f:
            for r in good:
                f.write(line(*r))
            f.write(text + "\n")
            f.write(line("t_max", 9, 1.0))
        where = "%s:4:%s" % (a, col) if col else "%s:4:" % a
        # Either side: the error names the file it is in.
        expect_error([a, b], [where, needle], "malformed line %d" % i)
        expect_error([b, a], [where, needle], "malformed line %d as B" % i)
    # Every prefix of a line, and lines with one byte changed: a report or a precise error, never
    # a crash (the sanitizer build runs this too).
    full = line("model.l_activation_max", 12, 0.5).rstrip("\n")
    rng = random.Random(3)
    variants = [full[:n] for n in range(len(full))]
    for _ in range(60):
        k = rng.randrange(len(full))
        variants.append(full[:k] + rng.choice("\t -=x9.e\\\x7f\u00e9") + full[k + 1:])
    for i, text in enumerate(variants):
        a = tmp + "/bad/v%d.log" % i
        with open(a, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        rc, out, err = run(a, b)
        # A changed tag shares nothing with B: nothing compared, exit 2 (not a pass).
        check(rc in (0, 1) or (rc == 2 and err.startswith("dlinspect compare: %s:1:" % a)) or
              (rc == 2 and text.strip() == "" and "holds no statistics (1 lines" in err) or
              (rc == 2 and "nothing was compared: no tag has an iteration in both runs" in err),
              "variant %r: exit %d, %s" % (text, rc, err))
    a = tmp + "/bad/nul.log"
    with open(a, "wb") as f:
        f.write(b"\x00\x01binary\n")
    expect_error([a, b], [a + ":1:1: expected text, found a NUL byte"], "binary file")


def test_usage(tmp):
    a = tmp + "/usage/a.log"
    write_log(a, [("t_max", 0, 1.0)])
    expect_error([a], ["expected two runs"], "one run")
    expect_error([a, a, a], ["two runs at a time"], "three runs")
    expect_error([a, a, "--rtol", "-1"], ["--rtol '-1': expected a finite number >= 0"], "negative rtol")
    expect_error([a, a, "--rtol", "1e999"], ["--rtol '1e999': expected a finite number >= 0"], "huge rtol")
    for v in ("0x10", " 1", "1 ", "inf", "nan", "1e", "."):
        expect_error([a, a, "--atol", v], ["--atol '%s': expected a finite number >= 0" % v],
                     "--atol %r: decimal only" % v)
    expect_error([a, a, "--rank", "99999999999"], ["--rank '99999999999': expected an integer from 0 to 999999999"], "huge rank")
    expect_error([a, a, "--atol", "x"], ["--atol 'x'"], "bad atol")
    expect_error([a, a, "--rank"], ["missing value for '--rank'"], "rank without value")
    expect_error([a, a, "--frobnicate"], ["unknown option '--frobnicate'"], "unknown option")
    expect_error([a, a, "--tags", "fc1_(max"], ["--tags 'fc1_(max': "], "bad --tags regex")
    expect_error([a, tmp + "/usage/missing"], [tmp + "/usage/missing: No such file"], "no file")
    rc, out, err = run("--help")
    check(rc == 0 and "usage: dlinspect compare" in out, "--help")


def test_dirs(tmp):
    stats = tmp + "/dirs/run/nvdlfw_inspect_statistics_logs"
    write_log(stats + "/nvdlfw_inspect_globalrank-0.log", [("t_max", 0, 1.0)])
    write_log(stats + "/nvdlfw_inspect_globalrank-1.log", [("t_max", 0, 2.0)])
    write_log(stats + "/nvdlfw_inspect_globalrank-10.log", [("t_max", 0, 3.0)])
    other = tmp + "/dirs/other.log"
    write_log(other, [("t_max", 0, 2.0)])
    for run_arg in (tmp + "/dirs/run", stats):
        for rank, path, value in ((None, "0", 1.0), ("1", "1", 2.0), ("10", "10", 3.0)):
            args = [run_arg, other, "--json"] + (["--rank", rank] if rank else [])
            rc, out, err = run(*args)
            got = json.loads(out)
            check(got["a"]["path"] == stats + "/nvdlfw_inspect_globalrank-%s.log" % path,
                  "dirs: %s rank %s reads %s" % (run_arg, rank, got["a"]["path"]))
            check(rc == (0 if value == 2.0 else 1), "dirs: rank %s compared" % rank)
    expect_error([tmp + "/dirs/run", other, "--rank", "2"],
                 ["no statistics log of rank 2"], "dirs: missing rank")
    os.makedirs(tmp + "/dirs/nolog/nvdlfw_inspect_logs")
    expect_error([tmp + "/dirs/nolog", other], ["no statistics log", "did the run log"],
                 "dirs: a run without statistics")
    write_log(tmp + "/dirs/ts/nvdlfw_inspect_20261123_220000_globalrank-0.log", [("t_max", 0, 1.0)])
    write_log(tmp + "/dirs/ts/nvdlfw_inspect_20261123_230000_globalrank-0.log", [("t_max", 0, 1.0)])
    expect_error([tmp + "/dirs/ts", other], ["two statistics logs of rank 0", "name the file"],
                 "dirs: two timestamped runs")


def read_png(path):
    """(width, height, rows of (r, g, b) bytes), checking what a PNG reader checks."""
    data = open(path, "rb").read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", "png: signature")
    pos, chunks = 8, []
    while pos < len(data):
        n, = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        crc, = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        check(crc == zlib.crc32(kind + body) & 0xffffffff, "png: CRC of %s" % kind)
        chunks.append((kind, body))
        pos += 12 + n
    check(pos == len(data), "png: nothing after the last chunk")
    check(chunks[0][0] == b"IHDR" and chunks[-1] == (b"IEND", b""), "png: IHDR first, IEND last")
    w, h, depth, ctype, comp, filt, inter = struct.unpack(">IIBBBBB", chunks[0][1])
    check((depth, ctype, comp, filt, inter) == (8, 2, 0, 0, 0), "png: 8-bit RGB")
    raw = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    check(len(raw) == h * (w * 3 + 1), "png: inflated IDAT is height * (width * 3 + 1) bytes")
    rows = []
    for y in range(h):
        row = raw[y * (w * 3 + 1):(y + 1) * (w * 3 + 1)]
        check(row[0] == 0, "png: filter type 0")
        rows.append(row[1:])
    return w, h, rows


def count_color(rows, rgb):
    c = bytes(rgb)
    return sum(sum(1 for x in range(0, len(r), 3) if r[x:x + 3] == c) for r in rows)


def test_plot(tmp):
    a, b = tmp + "/plot/a.log", tmp + "/plot/b.log"
    tags = ["model.layers.%d.mlp.fc1_activation_cur_amax" % i for i in range(14)]
    write_log(a, [(t, it, math.sin(it / 7) + i) for it in range(0, 200, 5)
                  for i, t in enumerate(tags)])
    write_log(b, [(t, it, math.sin(it / 7) + i + (0.5 if it >= 100 + i else 0))
                  for it in range(0, 200, 5) for i, t in enumerate(tags)])
    png = tmp + "/plot/out.png"
    rc, out, err = run(a, b, "--plot", png)
    check(rc == 1, "plot: exit 1 (%s)" % err)
    check("out.png: the first 12 of 14 diverging tags" in out, "plot: says it drew 12:\n" + out)
    w, h, rows = read_png(png)
    check(w > 600 and h > 400, "plot: a grid (%dx%d)" % (w, h))
    # A plot of no difference has only the legend in the two colours: the diverging one has far more.
    none = tmp + "/plot/none.png"
    rc, out, err = run(a, a, "--plot", none)
    check(rc == 0, "plot of identical runs: exit 0")
    _, _, rows0 = read_png(none)
    for rgb, name in ((RUN_A_COLOR, "A"), (RUN_B_COLOR, "B")):
        legend = count_color(rows0, rgb)
        drawn = count_color(rows, rgb)
        check(legend > 0 and drawn > legend + 500,
              "plot: run %s's colour drawn (%d pixels, legend %d)" % (name, drawn, legend))
    # A file that cannot be written: exit 2, the path named.
    expect_error([a, b, "--plot", tmp + "/plot/no/such/dir/x.png"],
                 ["--plot " + tmp + "/plot/no/such/dir/x.png: No such file"], "plot: bad path")
    # nan and infinities in a series, and a single point, still draw.
    write_log(a, [("t_max", 0, "nan"), ("t_max", 1, "inf"), ("u_max", 3, 1.0)])
    write_log(b, [("t_max", 0, 1.0), ("t_max", 1, 2.0), ("u_max", 3, 2.0)])
    rc, out, err = run(a, b, "--plot", png)
    check(rc == 1, "plot with non-finite values: exit 1 (%s)" % err)
    read_png(png)


TRAINER_CONFIG = """\
every_linear:
  enabled: true
  layers:
    layer_name_regex_pattern: '^model\\.'
  transformer_engine:
    LogTensorStats:
      enabled: true
      tensors: [activation, gradient, weight]
      stats: [min, max, std, cur_amax]
      freq: 1
"""


def trainer_run(trainer, tmp, name, precision):
    log_dir = tmp + "/" + name
    r = subprocess.run([trainer, "--precision", precision, "--width", "16", "--layers", "2",
                        "--batch", "8", "--steps", "12", "--quiet", "--config",
                        tmp + "/config.yaml", "--log-dir", log_dir],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    check(r.returncode == 0, "trainer %s: %s" % (name, r.stdout.decode()))
    return log_dir


def test_trainer(tmp, trainer):
    with open(tmp + "/config.yaml", "w") as f:
        f.write(TRAINER_CONFIG)
    fp32 = trainer_run(trainer, tmp, "fp32", "fp32")
    again = trainer_run(trainer, tmp, "fp32_again", "fp32")
    fp8 = trainer_run(trainer, tmp, "fp8", "fp8")
    log = lambda d: d + "/nvdlfw_inspect_statistics_logs/nvdlfw_inspect_globalrank-0.log"
    got = check_against_reference(log(fp32), log(again), [], "trainer: fp32 twice")
    check(not got["differ"] and len(got["tags"]) >= 50 and
          all(t["compared"] == 12 for t in got["tags"]),
          "trainer: two fp32 runs agree, every tag at 12 iterations")
    rc, out, err = run(fp32, again)
    check(rc == 0, "trainer: the log dirs compare equal (%s)" % err)
    got = check_against_reference(log(fp32), log(fp8), [], "trainer: fp32 against fp8")
    check(got["differ"], "trainer: fp8 differs from fp32")
    check_against_reference(log(fp32), log(fp8), ["--rtol", "0.05", "--atol", "1e-4"],
                            "trainer: fp32 against fp8, looser")
    # One line of the real log edited per iteration from k on: that tag only, from k.
    k, victim = 5, "model.layers.1.mlp.fc2_weight_std"
    edited = tmp + "/edited.log"
    with open(log(fp32)) as f, open(edited, "w") as out_f:
        for text in f:
            if (" - " + victim + " \t") in text:
                head, value = text.rstrip("\n").rsplit("value=", 1)
                it = int(text.split("iteration=")[1].split()[0])
                if it >= k:
                    text = "%svalue=%.9g\n" % (head, float(value) * 1.001)
            out_f.write(text)
    got = check_against_reference(log(fp32), edited, [], "trainer: edited copy")
    differ = [(t["tag"], t["first_divergence"]["iteration"]) for t in got["tags"]
              if t["status"] == "differ"]
    check(differ == [(victim, k)], "trainer: edited copy differs at %s only: %s" % (victim, differ))
    png = tmp + "/fp32_fp8.png"
    rc, out, err = run(fp32, fp8, "--plot", png)
    check(rc == 1, "trainer: --plot exit 1 (%s)" % err)
    _, _, rows = read_png(png)
    check(count_color(rows, RUN_A_COLOR) > 1000 and count_color(rows, RUN_B_COLOR) > 1000,
          "trainer: both runs drawn")


def main():
    tmp = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="dli-compare-")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    random.seed(1)
    tests = (test_identical, test_one_tag_from_k, test_iteration_sets, test_tolerance_edges,
             test_random_against_reference, test_odd_tags, test_malformed, test_usage, test_dirs,
             test_plot)
    if len(sys.argv) > 4 and sys.argv[3] == "--trainer":
        trainer = os.path.abspath(sys.argv[4])
        tests = (lambda t: test_trainer(t, trainer),)
    for test in tests:
        test(tmp)
        print("ok", test.__name__ if len(tests) > 1 else "test_trainer")
    shutil.rmtree(tmp, ignore_errors=True)
    print("PASS: %d checks" % passed)


main()
