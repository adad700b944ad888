#!/usr/bin/env python3
"""`dlinspect stats` against numpy: every statistic of .npy and .safetensors files written here
with numpy (f32, f16, bf16, FP8; NaN, infinities, zeros, empty and scalar tensors) is compared with
numpy's own computation, the what-if FP8 ones with an ml_dtypes reference; bad files (truncated,
lying sizes, bad headers, at every truncation length and with flipped bytes) must give a one-line
error and exit status 1, never a crash or a sanitizer report.

argv: the dlinspect binary, tests/pyenv.sh (which provides numpy, safetensors and ml_dtypes from
PyPI), and optionally a scratch directory.
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

TOOL = os.path.abspath(sys.argv[1])
PYENV = sys.argv[2]
PACKAGES = ["numpy", "safetensors", "ml_dtypes"]


def ensure_venv():
    """Re-runs this script with the tests' shared virtual environment's python (tests/pyenv.sh
    makes sure it has the packages)."""
    if os.environ.get("DLI_STATS_CLI_IN_VENV"):
        return
    r = subprocess.run([PYENV] + PACKAGES, stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        print("FAIL: no Python environment with %s (see the message above)" % " ".join(PACKAGES))
        sys.exit(1)
    py = r.stdout.strip()
    env = dict(os.environ, DLI_STATS_CLI_IN_VENV="1")
    sys.stdout.flush()
    os.execve(py, [py] + sys.argv, env)


ensure_venv()

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
E5M2 = ml_dtypes.float8_e5m2
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
FP8_TYPE = {"e4m3": E4M3, "e5m2": E5M2}
FLT_MAX = float(np.finfo(np.float32).max)
FLT_MIN = float(np.finfo(np.float32).tiny)

BASE_STATS = ["min", "max", "mean", "std", "var", "l1_norm", "l2_norm", "cur_amax",
              "dynamic_range", "nan_count", "inf_count", "zero%"]
FP8_STATS = ["underflows%", "overflows%", "scale_inv_min", "scale_inv_max", "mse", "cos_sim",
             "sqnr_db"]

passed = 0
failed = 0


def check(cond, what):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)
    return cond


# Sanitizers exit 1 by default, like a clean error: give them their own codes, and look for
# their reports too, so that a fuzz case that trips one is never mistaken for a refusal.
ENV = dict(os.environ)
ENV["ASAN_OPTIONS"] = (ENV.get("ASAN_OPTIONS", "") + ":exitcode=66").lstrip(":")
ENV["UBSAN_OPTIONS"] = (ENV.get("UBSAN_OPTIONS", "") + ":exitcode=67").lstrip(":")


def run(*args, env_simd=""):
    env = dict(ENV, DLINSPECT_SIMD=env_simd) if env_simd else ENV
    r = subprocess.run([TOOL, "stats"] + [str(a) for a in args], capture_output=True,
                       text=True, errors="replace", env=env, timeout=120)
    return r.returncode, r.stdout, r.stderr


def sane(rc, err, what):
    """No signal, no sanitizer report, an exit status the tool documents."""
    return check(rc >= 0 and rc in (0, 1, 2) and "Sanitizer" not in err
                 and "runtime error" not in err, "%s: exit %d, stderr %r" % (what, rc, err[-3000:]))


def strict_json(line):
    """json.loads that refuses NaN and Infinity, as strict JSON (RFC 8259) does; then the
    non-finite values, null in "stats", are put back from "nonfinite" so they can be compared."""
    def refuse(name):
        raise ValueError("not strict JSON: %s" % name)
    obj = json.loads(line, parse_constant=refuse)
    stats, nonfinite = obj.get("stats", {}), obj.get("nonfinite", {})
    check("nonfinite" not in obj or nonfinite, "an empty \"nonfinite\" object: %r" % line)
    check(sorted(k for k, v in stats.items() if v is None) == sorted(nonfinite),
          "null statistics and \"nonfinite\" keys differ: %r" % line)
    for k, v in nonfinite.items():
        check(v in ("nan", "inf", "-inf"), "nonfinite %s = %r" % (k, v))
        stats[k] = float(v)
    return obj


def stats_json(path, *opts, env_simd=""):
    rc, out, err = run(path, "--json", *opts, env_simd=env_simd)
    sane(rc, err, "stats %s %s" % (path, opts))
    lines = []
    for line in out.splitlines():
        try:
            lines.append(strict_json(line))
        except ValueError as e:
            check(False, "stats %s %s: %s: %r" % (path, opts, e, line))
    return rc, lines, err


# ---- the reference ----

def ref_base(x):
    """numpy's statistics of the decoded values x (float32): NaN propagates as numpy does."""
    x64 = x.astype(np.float64).ravel()
    n = x64.size
    if n == 0:
        return {}
    with np.errstate(all="ignore"):
        absx = np.abs(x64)
        var = x64.var(ddof=1) if n > 1 else math.nan
        nz = absx[x64 != 0]  # NaN != 0: a NaN makes the dynamic range NaN
        amax = absx.max()
        return {
            "min": x64.min(), "max": x64.max(), "mean": x64.mean(), "var": var,
            "std": math.sqrt(var) if not math.isnan(var) else math.nan,
            "l1_norm": absx.sum(), "l2_norm": math.sqrt((x64 * x64).sum()), "cur_amax": amax,
            "dynamic_range": (math.log2(amax) - math.log2(nz.min())) if nz.size else math.inf,
            "nan_count": int(np.isnan(x64).sum()), "inf_count": int(np.isinf(x64).sum()),
            "zero%": 100.0 * int((x64 == 0).sum()) / n,
        }


def ref_fp8(x, fmt, margin):
    """Current scaling and an FP8 round trip with ml_dtypes (saturating: inputs clamped to the
    finite max first, as docs/statistics.md prescribes), from float32 data without NaN."""
    x = x.astype(np.float32).ravel()
    fmax = FP8_MAX[fmt]
    amax = float(np.abs(x).max())
    if amax == 0 or math.isinf(amax):
        scale = np.float32(1)
    else:
        s = fmax / amax / 2.0 ** margin
        scale = np.float32(FLT_MAX if s >= FLT_MAX else FLT_MIN if s < FLT_MIN else s)
    xs = x * scale  # float32 products, as the kernel computes them
    q = np.clip(xs, -fmax, fmax).astype(FP8_TYPE[fmt]).astype(np.float32)
    dq = (q / scale).astype(np.float64)
    x64 = x.astype(np.float64)
    n = x.size
    err_sq = float(((x64 - dq) ** 2).sum())
    x_sq = float((x64 * x64).sum())
    dq_sq = float((dq * dq).sum())
    dot = float((x64 * dq).sum())
    with np.errstate(all="ignore"):
        cos = dot / math.sqrt(x_sq * dq_sq) if x_sq * dq_sq > 0 else math.nan
        # No error at all (all zeros included) is an infinite signal-to-noise ratio.
        sqnr = 10 * math.log10(x_sq / err_sq) if err_sq > 0 else math.inf
    return {
        "underflows%": 100.0 * int(((x != 0) & (q == 0)).sum()) / n,
        "overflows%": 100.0 * int((np.abs(xs) > fmax).sum()) / n,
        "scale_inv_min": float(np.float32(1) / scale),
        "scale_inv_max": float(np.float32(1) / scale),
        "mse": err_sq / n, "cos_sim": cos, "sqnr_db": sqnr, "x_sq_mean": x_sq / n,
    }


def close(stat, got, want, ref):
    """Tolerances: extrema, counts and percentages of counts are exact; sums accumulate float32
    lanes inside blocks (relative error ~ 1e-6 in practice), so 1e-5 of the sum's scale."""
    if want is None:
        return True
    if isinstance(want, float) and math.isnan(want) or isinstance(got, float) and math.isnan(got):
        return isinstance(got, float) and isinstance(want, float) and math.isnan(got) and \
            math.isnan(want)
    if (math.isinf(want) or math.isinf(got)) and stat != "sqnr_db":
        return got == want
    if stat in ("min", "max", "cur_amax", "nan_count", "inf_count", "underflows%",
                "overflows%", "scale_inv_min", "scale_inv_max"):
        return got == want
    if stat in ("zero%", "dynamic_range"):
        return abs(got - want) <= 1e-9 * max(1.0, abs(want))
    if stat == "mean":
        scale = ref["l1_norm"] / max(1, ref["n"])
        return abs(got - want) <= 1e-5 * scale + 1e-30
    if stat == "cos_sim":
        return abs(got - want) <= 1e-6
    # The error of each element is taken against s = x * scale rounded to float by the SIMD
    # paths and against x * scale exactly by the scalar one (tests/fp8/test_fp8.c allows the
    # same): each error moves by up to 2^-24 |x|, so an error the reference finds 0 may be
    # 2^-48 x^2 there, an sqnr above 10 log10(2^47) = 141.5 dB.
    if stat == "mse" and "x_sq_mean" in ref:
        slack = 2.0 ** -21 * math.sqrt(want * ref["x_sq_mean"]) + 2.0 ** -47 * ref["x_sq_mean"]
        return abs(got - want) <= 1e-5 * abs(want) + slack + 1e-30
    if stat == "sqnr_db":
        if math.isinf(want) and "x_sq_mean" in ref:
            return got == want or got >= 10 * math.log10(2.0 ** 47)
        return abs(got - want) <= 1e-4
    return abs(got - want) <= 1e-5 * abs(want) + 1e-30


def compare(line, name, x, fp8=None, margin=0.0, stats=None, what="", wide=False):
    """Checks one JSON line against numpy's statistics of x (the decoded values); `wide`: x is
    float64 or integers, read in double (the FP8 what-ifs of float32-rounded values)."""
    x = np.asarray(x, dtype=np.float64 if wide else np.float32)
    want = ref_base(x)
    want["n"] = x.size
    if fp8:
        want.update(ref_fp8(x, fp8, margin) if not np.isnan(x).any() else {})
    check(line.get("tensor") == name,
          "%s: tensor %r, expected %r" % (what, line.get("tensor"), name))
    check(line.get("shape") == list(x.shape), "%s: shape %r, expected %r" %
          (what, line.get("shape"), list(x.shape)))
    keys = stats or (BASE_STATS + (FP8_STATS if fp8 else []))
    got = line.get("stats", {})
    if x.size == 0:
        check(got == {}, "%s: an empty tensor has statistics %r" % (what, got))
        return
    check(list(got) == keys, "%s: stats keys %r, expected %r" % (what, list(got), keys))
    for k in keys:
        if k not in got:
            continue
        if k in ("nan_count", "inf_count"):
            check(isinstance(got[k], int), "%s: %s is %r, not an integer" % (what, k, got[k]))
        if k in want and not np.isnan(x).any() or k in BASE_STATS:
            check(close(k, float(got[k]), float(want[k]), want),
                  "%s: %s = %r, numpy says %r" % (what, k, got[k], want[k]))


# ---- writing files ----

def npy_bytes(descr, shape, data, fortran=False, version=(1, 0), raw_header=None):
    """A .npy file by hand, so that headers can lie."""
    header = raw_header if raw_header is not None else "{'descr': %r, 'fortran_order': %s, " \
        "'shape': %r, }" % (descr, fortran, tuple(shape))
    h = header.encode("latin1")
    pre = 10 if version[0] == 1 else 12
    pad = 64 - (pre + len(h) + 1) % 64
    h = h + b" " * pad + b"\n"
    lenfield = struct.pack("<H", len(h)) if version[0] == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes(version) + lenfield + h + data


def st_bytes(header, data, pad_to=8):
    """A .safetensors file by hand: header is a dict (dumped as JSON) or raw bytes."""
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    if pad_to:
        h += b" " * (-len(h) % pad_to)
    return struct.pack("<Q", len(h)) + h + data


def write(path, b):
    with open(path, "wb") as f:
        f.write(b)
    return path


def main():
    tmp = sys.argv[3] if len(sys.argv) > 3 else tempfile.mkdtemp(prefix="dli-stats-cli-")
    os.makedirs(tmp, exist_ok=True)
    try:
        run_all(tmp)
    finally:
        if len(sys.argv) <= 3:
            shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def run_all(tmp):
    rng = np.random.default_rng(20240607)
    P = lambda name: os.path.join(tmp, name)  # noqa: E731

    # Data: a smooth random tensor with zeros and tiny values (FP8 underflows), a large one that
    # spans several kernel chunks, special values, and the degenerate shapes.
    normal = (rng.standard_normal((64, 33)) * 3 + 0.5).astype(np.float32)
    normal.ravel()[::17] = 0
    normal.ravel()[5::29] *= 1e-6
    large = (rng.standard_normal(300_001) * 0.02).astype(np.float32)
    special = rng.standard_normal(1000).astype(np.float32)
    special[[3, 500]] = np.nan
    special[[7]] = np.inf
    special[[8]] = -np.inf
    special[10:20] = 0
    special[21] = -0.0
    infs = rng.standard_normal(100).astype(np.float32)
    infs[50] = np.inf
    zeros = np.zeros((4, 5), np.float32)
    single = np.array([2.5], np.float32)
    scalar = np.array(-3.0, np.float32)
    empty = np.zeros((0, 3), np.float32)
    f16 = (rng.standard_normal((10, 10)) * 100).astype(np.float16)
    f16[0, 0] = np.inf
    bf = (rng.standard_normal(5000) * 10).astype(BF16)
    e4 = (rng.standard_normal(777) * 50).astype(np.float32).clip(-448, 448).astype(E4M3)
    e5 = (rng.standard_normal(777) * 1000).astype(np.float32).astype(E5M2)
    f32_cases = {"normal": normal, "large": large, "special": special, "infs": infs,
                 "zeros": zeros, "single": single, "scalar": scalar, "empty": empty}

    # ---- .npy: f4 (every format version, C and Fortran order), f2, bf16 as <u2, FP8 as |u1 ----
    for name, x in f32_cases.items():
        np.save(P(name + ".npy"), x)
        rc, lines, err = stats_json(P(name + ".npy"))
        if check(rc == 0 and len(lines) == 1, "npy %s: exit %d, %d lines, %s" %
                 (name, rc, len(lines), err)):
            compare(lines[0], name, x, what="npy " + name)
            check(lines[0]["dtype"] == "f32", "npy %s: dtype %r" % (name, lines[0]["dtype"]))
    for version in [(1, 0), (2, 0), (3, 0)]:
        path = P("v%d.npy" % version[0])
        with open(path, "wb") as f:
            np.lib.format.write_array(f, normal, version=version)
        rc, lines, err = stats_json(path)
        if check(rc == 0 and len(lines) == 1, "npy version %s: %s" % (version, err)):
            compare(lines[0], "v%d" % version[0], normal, what="npy version %s" % (version,))
    np.save(P("fortran.npy"), np.asfortranarray(normal))
    rc, lines, err = stats_json(P("fortran.npy"))
    if check(rc == 0 and len(lines) == 1, "npy Fortran order: %s" % err):
        compare(lines[0], "fortran", normal, what="npy Fortran order")
    np.save(P("half.npy"), f16)
    rc, lines, err = stats_json(P("half.npy"))
    if check(rc == 0 and len(lines) == 1, "npy f2: %s" % err):
        compare(lines[0], "half", f16.astype(np.float32), what="npy f2")
        check(lines[0]["dtype"] == "f16", "npy f2 dtype %r" % lines[0]["dtype"])
    np.save(P("bf.npy"), bf.view(np.uint16))
    rc, lines, err = stats_json(P("bf.npy"), "--dtype", "bf16")
    if check(rc == 0 and len(lines) == 1, "npy <u2 --dtype bf16: %s" % err):
        compare(lines[0], "bf", bf.astype(np.float32), what="npy bf16")
        check(lines[0]["dtype"] == "bf16", "npy bf16 dtype %r" % lines[0]["dtype"])
    np.save(P("bfml.npy"), bf)  # ml_dtypes' own bfloat16 lands as '<V2'
    rc, lines, err = stats_json(P("bfml.npy"), "--dtype", "bf16")
    if check(rc == 0 and len(lines) == 1, "npy <V2 --dtype bf16: %s" % err):
        compare(lines[0], "bfml", bf.astype(np.float32), what="npy ml_dtypes bf16")
    np.save(P("e4.npy"), e4.view(np.uint8))
    rc, lines, err = stats_json(P("e4.npy"), "--dtype", "e4m3", "--fp8", "e5m2")
    if check(rc == 0 and len(lines) == 1, "npy |u1 --dtype e4m3: %s" % err):
        compare(lines[0], "e4", e4.astype(np.float32), fp8="e5m2", what="npy e4m3 --fp8 e5m2")

    # FP8 what-if on f32, with margins that make underflows and overflows (margin -1 doubles
    # the scale: the upper half of the range saturates).
    for fmt in ("e4m3", "e5m2"):
        for margin in (0, 1, -1):
            for name in ("normal", "large", "zeros", "single"):
                x = f32_cases[name]
                rc, lines, err = stats_json(P(name + ".npy"), "--fp8", fmt, "--margin", margin)
                if check(rc == 0 and len(lines) == 1, "npy %s --fp8 %s: %s" % (name, fmt, err)):
                    compare(lines[0], name, x, fp8=fmt, margin=margin,
                            what="npy %s --fp8 %s --margin %s" % (name, fmt, margin))
    # An outlier 2^100 above the rest: the scaled small values (below 2^-63) underflow FP8, and
    # the SIMD lanes' float squares lost their error (mse 0 and sqnr_db inf, a perfect cast,
    # where the scalar path in double had the error): such a tensor is compared in double on
    # every path, so each gives the scalar path's numbers.
    outlier = np.tile(np.array([1e30, 1, -2, 0.5], np.float32), 2500)
    np.save(P("outlier.npy"), outlier)
    got = {}
    for simd in ("", "scalar"):
        rc, lines, err = stats_json(P("outlier.npy"), "--fp8", "e4m3", env_simd=simd)
        if check(rc == 0 and len(lines) == 1, "outlier --fp8 e4m3 (%s): %s" % (simd, err)):
            st = lines[0]["stats"]
            got[simd] = (st["mse"], st["sqnr_db"], st["underflows%"])
            check(st["mse"] > 0 and st["sqnr_db"] is not None and st["underflows%"] == 75,
                  "outlier (SIMD %s): %r" % (simd or "default", st))
    check(len(got) == 2 and got[""] == got["scalar"],
          "outlier: the default SIMD path and the scalar one differ: %r" % got)
    rc, lines, err = stats_json(P("normal.npy"), "--fp8", "e4m3", "--margin", "-1")
    check(rc == 0 and lines and lines[0]["stats"]["overflows%"] > 0,
          "margin -1 makes no overflows: %r" % (lines and lines[0]["stats"]))
    check(rc == 0 and lines and lines[0]["stats"]["underflows%"] > 0,
          "tiny values make no underflows: %r" % (lines and lines[0]["stats"]))
    rc, lines, err = stats_json(P("special.npy"), "--fp8", "e4m3")
    check(rc == 0 and lines and list(lines[0]["stats"]) == BASE_STATS + FP8_STATS,
          "--fp8 on NaN data: %r %s" % (lines, err))

    # --stats filters and orders; JSON NaN/Infinity literals.
    rc, lines, err = stats_json(P("special.npy"), "--stats", "nan_count,max, min,zero%,max")
    if check(rc == 0 and len(lines) == 1, "--stats: %s" % err):
        compare(lines[0], "special", special, stats=["nan_count", "max", "min", "zero%"],
                what="--stats subset")
    # Strict JSON: a non-finite value is null, and "nonfinite" says which (docs/stats.md).
    rc, out, err = run(P("infs.npy"), "--json", "--stats", "max,var,inf_count")
    check('"max": null' in out and '"inf_count": 1' in out and
          '"nonfinite": {"max": "inf", "var": "nan"}' in out,
          "JSON null + nonfinite for Infinity / integer count: %r" % out)
    rc, out, err = run(P("special.npy"), "--json", "--stats", "mean,min")
    check('"stats": {"mean": null, "min": null}, "nonfinite": {"mean": "nan", "min": "nan"}}' in out,
          "JSON null + nonfinite for NaN: %r" % out)
    rc, out, err = run(P("normal.npy"), "--json", "--stats", "max")
    check(rc == 0 and "nonfinite" not in out, "\"nonfinite\" without a non-finite value: %r" % out)
    rc, out, err = run(P("special.npy"), "--stats", "mean,min")
    check(out.splitlines()[1:] == ["  mean           nan", "  min            nan"],
          "human output spells NaN as nan: %r" % out)

    # ---- float64 (numpy's default dtype) and integers: read in double, against numpy ----
    f64 = rng.standard_normal((40, 25)) * 1e-3
    f64.ravel()[::7] = 0
    f64.ravel()[3] = 1e-300  # below float32: a double path keeps it
    f64.ravel()[4] = -1e300  # above float32
    f64_special = rng.standard_normal(500)
    f64_special[[1, 2]] = [np.nan, -np.inf]
    ints = {
        "i8": rng.integers(-128, 128, 3000).astype(np.int8),
        "i16": rng.integers(-2**15, 2**15, 3000).astype(np.int16),
        "i32": rng.integers(-2**31, 2**31, 3000).astype(np.int32),
        "i64": rng.integers(-2**40, 2**40, 9000).astype(np.int64),
        "u8": rng.integers(0, 256, 3000).astype(np.uint8),
        "bool": rng.integers(0, 2, 3000).astype(bool),
    }
    for name, x in [("f64", f64), ("f64_special", f64_special)]:
        np.save(P(name + ".npy"), x)  # '<f8'
        rc, lines, err = stats_json(P(name + ".npy"))
        if check(rc == 0 and len(lines) == 1, "npy %s: %s" % (name, err)):
            compare(lines[0], name, x, wide=True, what="npy " + name)
            check(lines[0]["dtype"] == "f64", "npy %s dtype %r" % (name, lines[0]["dtype"]))
    rc, lines, err = stats_json(P("f64.npy"), "--stats", "min,dynamic_range")
    check(rc == 0 and lines and lines[0]["stats"]["min"] == -1e300,
          "f64 min read in double: %r" % (lines and lines[0]["stats"]))
    for name, x in ints.items():
        np.save(P(name + ".npy"), x)
        one_or_two = x.dtype.itemsize <= 2 and x.dtype != bool
        opts = ("--dtype", "int") if one_or_two else ()
        rc, lines, err = stats_json(P(name + ".npy"), *opts)
        if check(rc == 0 and len(lines) == 1, "npy %s %s: %s" % (name, opts, err)):
            compare(lines[0], name, x.astype(np.float64), wide=True, what="npy " + name)
            check(lines[0]["dtype"] == name, "npy %s dtype %r" % (name, lines[0]["dtype"]))
    # The FP8 what-if of integers: their values rounded to float32, as for any other tensor.
    rc, lines, err = stats_json(P("i16.npy"), "--dtype", "int", "--fp8", "e4m3")
    if check(rc == 0 and len(lines) == 1, "npy i16 --fp8: %s" % err):
        compare(lines[0], "i16", ints["i16"].astype(np.float64), fp8="e4m3", wide=True,
                what="npy i16 --fp8 e4m3")
    # Beyond float32's range a double rounds to an infinity: the FP8 what-if of a float64
    # tensor is that of its float32 rounding, an overflow and an infinite mse each.
    big = np.array([1000.0, -1000.0, 1.0, 1e-9, 1e300, -1e308, 3.5])
    np.save(P("f64_big.npy"), big)
    with np.errstate(over="ignore"):
        np.save(P("f32_big.npy"), big.astype(np.float32))
    rc, lines, err = stats_json(P("f64_big.npy"), "--fp8", "e4m3")
    rc32, lines32, err32 = stats_json(P("f32_big.npy"), "--fp8", "e4m3")
    if check(rc == 0 and rc32 == 0 and len(lines) == 1 and len(lines32) == 1,
             "f64 beyond float32 --fp8: %s %s" % (err, err32)):
        got = {k: lines[0]["stats"].get(k, lines[0].get("nonfinite", {}).get(k)) for k in FP8_STATS}
        want = {k: lines32[0]["stats"].get(k, lines32[0].get("nonfinite", {}).get(k))
                for k in FP8_STATS}
        check(repr(got) == repr(want) and want["overflows%"] == 100.0 * 4 / 7
              and want["mse"] == float("inf"),
              "f64 beyond float32 --fp8 as its float32 rounding: %r, expected %r" % (got, want))
    st_ints = {"model." + k: v for k, v in ints.items()}
    st_ints["model.f64"] = f64
    save_file(st_ints, P("ints.safetensors"))
    rc, lines, err = stats_json(P("ints.safetensors"))
    if check(rc == 0 and len(lines) == len(st_ints), "safetensors ints: %s" % err):
        for line in lines:
            compare(line, line["tensor"], st_ints[line["tensor"]].astype(np.float64), wide=True,
                    what="st " + line["tensor"])
            want = line["tensor"].split(".")[1]
            check(line["dtype"] == want, "st %s dtype %r" % (line["tensor"], line["dtype"]))

    # Human output: header line, then `  name  value` with %.9g.
    rc, out, err = run(P("normal.npy"), "--fp8", "e4m3")
    lines = out.splitlines()
    check(rc == 0 and lines and lines[0] == "normal  f32  [64, 33]", "human header %r" % lines[:1])
    rc2, jl, _ = stats_json(P("normal.npy"), "--fp8", "e4m3")
    human = {}
    for line in lines[1:]:
        parts = line.split()
        if len(parts) == 2:
            human[parts[0]] = float(parts[1])
    check(list(human) == BASE_STATS + FP8_STATS, "human stat names %r" % list(human))
    for k, v in human.items():
        j = jl[0]["stats"][k] if jl else math.nan
        check(v == float("%.9g" % j), "human %s = %r, JSON %r" % (k, v, j))
    rc, out, err = run(P("bf.npy"), "--dtype", "bf16")
    check(out.startswith("bf  bf16 (stored as '<u2')  [5000]"), "human reinterpreted %r" % out[:60])
    rc, out, err = run(P("empty.npy"))
    check(rc == 0 and "(empty: no statistics)" in out, "human empty %r" % out)

    # ---- .safetensors: every read dtype, header order, --tensor, metadata ----
    tensors = {"model.w": normal, "model.h": f16, "model.bf": bf, "model.e4": e4,
               "model.e5": e5, "model.empty": empty, "model.scalar": scalar,
               "model.special": special}
    decoded = {k: v.astype(np.float32) for k, v in tensors.items()}
    save_file(tensors, P("all.safetensors"), metadata={"format": "np"})
    with open(P("all.safetensors"), "rb") as f:
        hlen = struct.unpack("<Q", f.read(8))[0]
        order = [k for k in json.loads(f.read(hlen)) if k != "__metadata__"]
    rc, lines, err = stats_json(P("all.safetensors"))
    if check(rc == 0 and [l["tensor"] for l in lines] == order,
             "safetensors: exit %d, order %r, expected %r: %s" %
             (rc, [l["tensor"] for l in lines], order, err)):
        for line in lines:
            compare(line, line["tensor"], decoded[line["tensor"]], what="st " + line["tensor"])
        dtypes = {l["tensor"]: l["dtype"] for l in lines}
        check(dtypes["model.bf"] == "bf16" and dtypes["model.e4"] == "e4m3" and
              dtypes["model.e5"] == "e5m2" and dtypes["model.h"] == "f16", "st dtypes %r" % dtypes)
    for fmt in ("e4m3", "e5m2"):
        rc, lines, err = stats_json(P("all.safetensors"), "--fp8", fmt, "--tensor", "model.w",
                                    "--tensor", "model.e5", "--tensor", "model.bf")
        if check(rc == 0 and [l["tensor"] for l in lines] == ["model.w", "model.e5", "model.bf"],
                 "--tensor order: %r %s" % ([l["tensor"] for l in lines], err)):
            for line in lines:
                compare(line, line["tensor"], decoded[line["tensor"]], fp8=fmt,
                        what="st %s --fp8 %s" % (line["tensor"], fmt))

    # Data that is not aligned in the file, and FP8 input to be compared, go through chunks.
    big_bf = (rng.standard_normal(1_100_003) * 3).astype(BF16)
    big_e4 = (rng.standard_normal(1_100_003) * 3).astype(np.float32).astype(E4M3)
    big_f32 = (rng.standard_normal(1_100_001)).astype(np.float32)
    hdr = {"a": {"dtype": "BF16", "shape": [big_bf.size], "data_offsets": [0, 2 * big_bf.size]},
           "b": {"dtype": "F8_E4M3", "shape": [big_e4.size],
                 "data_offsets": [2 * big_bf.size, 3 * big_bf.size]},
           "c": {"dtype": "F32", "shape": [big_f32.size],
                 "data_offsets": [3 * big_bf.size, 3 * big_bf.size + 4 * big_f32.size]}}
    h = json.dumps(hdr).encode()
    h += b" " * ((-len(h) % 8) + 3)  # 8 + len(h) is odd: every tensor starts misaligned
    write(P("misaligned.safetensors"), st_bytes(h, big_bf.tobytes() + big_e4.tobytes()
                                                + big_f32.tobytes(), pad_to=0))
    rc, lines, err = stats_json(P("misaligned.safetensors"), "--fp8", "e4m3")
    if check(rc == 0 and len(lines) == 3, "misaligned: %s" % err):
        for line, x in zip(lines, [big_bf, big_e4, big_f32]):
            compare(line, line["tensor"], x.astype(np.float32), fp8="e4m3",
                    what="misaligned " + line["tensor"])

    # ---- errors: one line `dlinspect stats: FILE: ...`, exit 1 (2 for usage) ----
    def expect_error(path, words, *opts, rc_want=1, prefix=True):
        rc, out, err = run(path, *opts)
        what = "%s %s" % (os.path.basename(str(path)), " ".join(map(str, opts)))
        sane(rc, err, what)
        lines = err.splitlines()
        check(rc == rc_want, "%s: exit %d, expected %d (stderr %r)" % (what, rc, rc_want, err))
        if prefix:
            check(len(lines) == 1 and lines[0].startswith("dlinspect stats: %s: " % path),
                  "%s: not one 'dlinspect stats: FILE: ' line: %r" % (what, err))
        for w in words:
            check(w in err, "%s: stderr %r lacks %r" % (what, err, w))
        return out

    good_f4 = (np.arange(6, dtype=np.float32) - 2).tobytes()
    os.makedirs(P("adir"), exist_ok=True)
    expect_error(write(P("empty_file.npy"), b""), ["empty file"])
    expect_error(P("adir"), ["is a directory"])
    expect_error(P("missing.npy"), ["No such file or directory"])
    expect_error(write(P("garbage.npy"), b"hello world, not numpy"), ["not a .npy file"])
    expect_error(write(P("garbage.bin"), b"\x01\x02\x03 something"), ["unknown format"])
    valid_npy = npy_bytes("<f4", (2, 3), good_f4)
    write(P("valid.npy"), valid_npy)
    expect_error(write(P("trunc_header.npy"), valid_npy[:40]), ["truncated .npy file"])
    expect_error(write(P("trunc_data.npy"), valid_npy[:-1]), ["truncated data", "(2, 3)",
                                                              "24 bytes"])
    expect_error(write(P("trailing.npy"), valid_npy + b"xx"), ["size mismatch"])
    expect_error(write(P("nokey.npy"), npy_bytes(None, None, good_f4, raw_header=
                 "{'descr': '<f4', 'shape': (6,), }")), ["no 'fortran_order' key"])
    expect_error(write(P("extrakey.npy"), npy_bytes(None, None, good_f4, raw_header=
                 "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}")),
                 ["unexpected key 'x'"])
    expect_error(write(P("dupkey.npy"), npy_bytes(None, None, good_f4, raw_header=
                 "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'shape': (6,)}")),
                 ["duplicate key 'shape'"])
    expect_error(write(P("listshape.npy"), npy_bytes(None, None, good_f4, raw_header=
                 "{'descr': '<f4', 'fortran_order': False, 'shape': [6], }")),
                 ["shape is not a tuple"])
    expect_error(write(P("notuple.npy"), npy_bytes(None, None, good_f4, raw_header=
                 "{'descr': '<f4', 'fortran_order': False, 'shape': (6), }")),
                 ["trailing comma"])
    expect_error(write(P("overflow.npy"), npy_bytes("<f4", (2**40, 2**40), good_f4)),
                 ["overflow"])
    expect_error(write(P("bytes_overflow.npy"), npy_bytes("<f4", (2**62,), good_f4)),
                 ["overflow"])
    expect_error(write(P("hugedim.npy"), npy_bytes(None, None, good_f4, raw_header=
                 "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }")),
                 ["larger than 2^63"])
    expect_error(write(P("manydims.npy"), npy_bytes("<f4", (1,) * 65, good_f4)),
                 ["more than 64 dimensions"])
    expect_error(write(P("c8.npy"), npy_bytes("<c8", (3,), good_f4)),
                 ["dtype '<c8' is not supported"])
    expect_error(write(P("be.npy"), npy_bytes(">f4", (6,), good_f4)), ["big-endian"])
    expect_error(write(P("structured.npy"), npy_bytes([("a", "<f4")], (6,), good_f4)),
                 ["bad .npy header", "expected a quoted string"])
    expect_error(P("bf.npy"), ["'<u2'", "--dtype bf16"])
    expect_error(P("e4.npy"), ["'|u1'", "--dtype e4m3"])
    # 1- and 2-byte integers may be raw bf16/FP8 bytes: refused without --dtype, with a way out.
    expect_error(P("i16.npy"), ["'<i2' holds raw 16-bit values", "--dtype int for integers"])
    expect_error(P("u8.npy"), ["'|u1' holds raw bytes", "--dtype int for integers"])
    expect_error(P("f64.npy"), ["--dtype int does not apply to dtype '<f8'"], "--dtype", "int")
    expect_error(P("bfml.npy"), ["--dtype int does not apply to dtype '<V2'"], "--dtype", "int")
    expect_error(P("valid.npy"), ["--dtype bf16 does not apply to dtype '<f4'"], "--dtype", "bf16")
    expect_error(write(P("v4.npy"), npy_bytes("<f4", (6,), good_f4, version=(4, 0))),
                 ["unsupported .npy format version 4.0"])
    expect_error(P("valid.npy"), ["--tensor applies to .safetensors"], "--tensor", "x")

    def st_case(name, header, data=good_f4, words=(), *opts, **kw):
        return expect_error(write(P(name + ".safetensors"), st_bytes(header, data, **kw)),
                            list(words), *opts)

    ok_hdr = {"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}
    write(P("valid.safetensors"), st_bytes(ok_hdr, good_f4))
    expect_error(write(P("short.safetensors"), b"\x10\x00\x00"), ["truncated safetensors file"])
    expect_error(write(P("hugelen.safetensors"), struct.pack("<Q", 2**62) + b"{}"),
                 ["header length 4611686018427387904", "100 MB"])
    expect_error(write(P("lenpast.safetensors"), struct.pack("<Q", 1000) + b"{}   "),
                 ["truncated safetensors file: the header is 1000 bytes but only 5 follow"])
    st_case("notobj", b'["w"]', good_f4, ["does not start with '{'"])
    # A header with no tensor (metadata only): nothing to print is an error, not a silent 0.
    st_case("notensor", b'{"__metadata__": {"a": "b"}}', b"", ["the file holds no tensor"])
    st_case("badjson", b'{"w": }', good_f4,
            ["bad safetensors header at byte 6", "expected an object"])
    st_case("trailing_comma", b'{"w": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]},}',
            good_f4, ["expected a string"])
    st_case("after", json.dumps(ok_hdr).encode() + b" x", good_f4, ["unexpected data after"])
    st_case("outside", {"w": {"dtype": "F32", "shape": [8], "data_offsets": [0, 32]}}, good_f4,
            ["data_offsets [0, 32] are outside the 24-byte data section"])
    st_case("backwards", {"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}}, good_f4,
            ["data_offsets [8, 4] are reversed (begin after end)"])
    st_case("lying", {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}, good_f4,
            ["hold 12 bytes, but F32 [4] needs 16"])
    st_case("overlap", {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                        "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, good_f4,
            ["tensors 'a' and 'b' overlap"])
    st_case("gap", {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                    "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}}, good_f4,
            ["tensor 'b' starts at byte 16 of the data section, after 8 bytes that no tensor "
             "describes"])
    st_case("lead", {"w": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, good_f4,
            ["tensor 'w' starts at byte 8 of the data section, after 8 bytes"])
    st_case("trailing", {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, good_f4,
            ["the data section holds 8 bytes after its last tensor that no tensor describes "
             "(16 of 24 bytes described)"])
    st_case("only_empty", {"e": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}, good_f4,
            ["holds 24 bytes after its last tensor"])
    st_case("nonutf8", b'{"w\xff": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}}',
            good_f4, ["not valid UTF-8"])
    st_case("overlong", b'{"\xc0\xaf": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}}',
            good_f4, ["not valid UTF-8"])
    st_case("surrogate", b'{"\\ud800": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}}',
            good_f4, ["unpaired UTF-16 surrogate"])
    st_case("nul", b'{"a\\u0000b": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}}',
            good_f4, ["NUL"])
    st_case("deep", b'{"w": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24], "x": '
            + b"[" * 100 + b"]" * 100 + b"}}", good_f4, ["nested deeper than 64 levels"])
    st_case("dupname", b'{"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}, '
            b'"w": {"dtype": "F32", "shape": [3], "data_offsets": [12, 24]}}', good_f4,
            ["tensor name 'w' appears twice"])
    st_case("dupsame", b'{"w": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}, '
            b'"w": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}}', good_f4,
            ["tensor name 'w' appears twice"])
    st_case("dupfield", b'{"w": {"dtype": "F32", "dtype": "F16", "shape": [6], '
            b'"data_offsets": [0, 24]}}', good_f4, ["duplicate key 'dtype'"])
    st_case("nooffsets", {"w": {"dtype": "F32", "shape": [6]}}, good_f4,
            ["tensor 'w' has no data_offsets"])
    st_case("negshape", b'{"w": {"dtype": "F32", "shape": [-6], "data_offsets": [0, 24]}}',
            good_f4, ["integers in [0, 2^63)"])
    st_case("floatshape", b'{"w": {"dtype": "F32", "shape": [6.0], "data_offsets": [0, 24]}}',
            good_f4, ["integers in [0, 2^63)"])
    st_case("bigoffset", b'{"w": {"dtype": "F32", "shape": [6], "data_offsets": [0, '
            b'18446744073709551616]}}', good_f4, ["integers in [0, 2^63)"])
    st_case("shape_overflow", {"w": {"dtype": "F32", "shape": [2**40, 2**40, 2**40],
                                     "data_offsets": [0, 24]}}, good_f4, ["overflow"])
    st_case("badmeta", {"__metadata__": [1], **ok_hdr}, good_f4, ["__metadata__ must be an object"])
    # The reference reads __metadata__ as a map of string to string (or null): a number or an
    # object as a value is a malformed file there, and here.
    st_case("meta_int", {"__metadata__": {"a": "x", "n": 1}, **ok_hdr}, good_f4,
            ["__metadata__ value of 'n' must be a string"])
    st_case("meta_nested", {"__metadata__": {"a": {"b": "c"}}, **ok_hdr}, good_f4,
            ["__metadata__ value of 'a' must be a string"])
    write(P("meta_null.safetensors"), st_bytes({"__metadata__": None, **ok_hdr}, good_f4))
    rc, lines, err = stats_json(P("meta_null.safetensors"))
    check(rc == 0 and len(lines) == 1, "__metadata__ null (the reference reads it): %s" % err)
    st_case("ctrl", b'{"a\nb": {"dtype": "F32", "shape": [6], "data_offsets": [0, 24]}}',
            good_f4, ["control character"])
    st_case("c64", {"w": {"dtype": "C64", "shape": [3], "data_offsets": [0, 24]}}, good_f4,
            ["tensor 'w': dtype C64 is not supported"], "--tensor", "w")
    st_case("unknown_dtype", {"w": {"dtype": "Q7", "shape": [3], "data_offsets": [0, 24]}},
            good_f4, ["dtype Q7 is not supported"])
    # A whole-file listing still prints the readable tensors, and exits 1 for the other.
    write(P("mixed.safetensors"), st_bytes({"i": {"dtype": "C64", "shape": [2],
                                                  "data_offsets": [0, 16]},
                                            "w": {"dtype": "F32", "shape": [2],
                                                  "data_offsets": [16, 24]}}, good_f4))
    rc, out, err = run(P("mixed.safetensors"), "--json")
    check(rc == 1 and '"tensor": "w"' in out and "dtype C64 is not supported" in err,
          "mixed listing: exit %d, out %r, err %r" % (rc, out, err))
    expect_error(P("valid.safetensors"), ["--dtype applies to .npy files"], "--dtype", "bf16")
    expect_error(P("all.safetensors"), ["no tensor 'model.bff'", "did you mean 'model.bf'?"],
                 "--tensor", "model.bff")
    # Usage errors: exit 2, no file named.
    expect_error(P("valid.npy"), ["unknown statistic 'foo'", "valid: min, max, mean"], "--stats",
                 "min,foo", rc_want=2, prefix=False)
    expect_error(P("valid.npy"), ["'mse' is a what-if FP8 statistic", "--fp8"], "--stats", "mse",
                 rc_want=2, prefix=False)
    expect_error(P("valid.npy"), ["--fp8 'e4m4'"], "--fp8", "e4m4", rc_want=2, prefix=False)
    expect_error(P("valid.npy"), ["--margin needs --fp8"], "--margin", "1", rc_want=2,
                 prefix=False)
    expect_error(P("valid.npy"), ["--margin 'x'"], "--fp8", "e4m3", "--margin", "x", rc_want=2,
                 prefix=False)
    for m in ("127", "-1e6"):
        expect_error(P("valid.npy"), ["--margin %s: expected a number in [-126, 126]" % m],
                     "--fp8", "e4m3", "--margin", m, rc_want=2, prefix=False)
    for m in ("0x1", " 1", "1 ", "nan"):
        expect_error(P("valid.npy"), ["--margin '%s': expected a number" % m], "--fp8", "e4m3",
                     "--margin", m, rc_want=2, prefix=False)
    rc, lines, err = stats_json(P("normal.npy"), "--fp8", "e4m3", "--margin", "126")
    # --stats given twice: both lists, in their order (each name once)
    rc, lines, err = stats_json(P("normal.npy"), "--stats", "min,max", "--stats", "mean,min")
    check(rc == 0 and len(lines) == 1 and
          list(lines[0]["stats"]) == ["min", "max", "mean"],
          "--stats twice: exit %d, %r, %s" % (rc, lines, err))
    check(rc == 0 and len(lines) == 1, "--margin 126 (the range's end): exit %d, %s" % (rc, err))

    # ---- fuzz: every truncation and flipped bytes of small valid files ----
    small_st = st_bytes({"__metadata__": {"k": "v"},
                         "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "b\u00e9": {"dtype": "BF16", "shape": [1, 2], "data_offsets": [8, 12]},
                         "c": {"dtype": "F8_E5M2", "shape": [4], "data_offsets": [12, 16]}},
                        good_f4[:16])
    small_npy = npy_bytes("<f2", (3,), np.array([1, -2, 0], np.float16).tobytes())
    jobs = []
    for base, ext in ((small_st, ".safetensors"), (small_npy, ".npy")):
        for n in range(len(base)):
            jobs.append(("trunc%d%s" % (n, ext), base[:n], True))
        for i in range(len(base)):
            for x in (0xff, 0x01, 0x80):
                b = bytearray(base)
                b[i] ^= x
                jobs.append(("flip%d_%d%s" % (i, x, ext), bytes(b), False))
    fuzz_dir = P("fuzz")
    os.makedirs(fuzz_dir, exist_ok=True)

    def fuzz_one(job):
        name, data, must_fail = job
        path = write(os.path.join(fuzz_dir, name), data)
        r = subprocess.run([TOOL, "stats", path, "--json", "--fp8", "e4m3"], capture_output=True,
                           text=True, errors="replace", env=ENV, timeout=60)
        os.unlink(path)
        return name, must_fail, r.returncode, r.stderr

    with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as ex:
        for name, must_fail, rc, err in ex.map(fuzz_one, jobs):
            ok = rc in (0, 1) and "Sanitizer" not in err and "runtime error" not in err
            if rc == 1:
                ok = ok and len(err.splitlines()) == 1 and err.startswith("dlinspect stats: ")
            if must_fail:
                ok = ok and rc == 1
            check(ok, "fuzz %s: exit %d, stderr %r" % (name, rc, err[-2000:]))


if __name__ == "__main__":
    sys.exit(main())
