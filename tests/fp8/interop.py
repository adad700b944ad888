"""Our FP8 cast against an independent implementation, ml_dtypes: every bfloat16 bit pattern, one
million random float32 values and every midpoint between adjacent FP8 values (+-1 ulp), for E4M3
(fn) and E5M2, through dli_fp8_encode and each SIMD path of the quantize pass. The reference is
ml_dtypes' round-to-nearest-even cast of the input clamped to the finite max (a saturating cast, as
TransformerEngine's); every NaN code counts as the same NaN. Run by interop.sh."""

import os
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np

FORMATS = {
    "e4m3": (ml_dtypes.float8_e4m3fn, 448.0),
    "e5m2": (ml_dtypes.float8_e5m2, 57344.0),
}
PATHS = ["encode", "scalar", "avx2", "avx512"]
codes_bin = os.environ["FP8_CODES"]


def inputs():
    """(name, dtype name, raw array) triples."""
    bf16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    rng = np.random.default_rng(20240521)
    n = 1_000_000
    # Most values spread over 2^-40 .. 2^25 (beyond both formats' ends), the rest any bit pattern
    # at all: NaN payloads, infinities, float subnormals, huge values.
    wide = (rng.uniform(1.0, 2.0, n - n // 4) * np.exp2(rng.integers(-40, 26, n - n // 4))).astype(np.float32)
    wide *= rng.choice(np.array([-1.0, 1.0], dtype=np.float32), wide.size)
    bits = rng.integers(0, 1 << 32, n // 4, dtype=np.uint64).astype(np.uint32).view(np.float32)
    f32 = np.concatenate([wide, bits])
    # The ties, where a wrong rounding rule shows: midpoints of adjacent codes and their neighbours.
    ties = []
    for fmt, fmax in FORMATS.values():
        v = np.arange(256, dtype=np.uint8).view(fmt).astype(np.float64)
        v = np.unique(v[np.isfinite(v) & (np.abs(v) <= fmax)])
        mid = ((v[1:] + v[:-1]) / 2).astype(np.float32)
        ties += [mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))]
        ties += [np.float32(fmax) * np.float32(k) for k in (1.0, 1.03125, 1.0625, 1.125, 1.2)]
    mids = np.concatenate([np.atleast_1d(t) for t in ties]).astype(np.float32)
    return [("bf16-all", "bf16", bf16), ("f32-random", "f32", f32), ("f32-ties", "f32", mids)]


def reference(values_f32, fmt, fmax):
    clamped = np.clip(values_f32, np.float32(-fmax), np.float32(fmax))  # NaN stays NaN
    with np.errstate(invalid="ignore"):  # NaN casts to NaN, which is the point
        return clamped.astype(fmt).view(np.uint8)


def main():
    failures = 0
    checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, dt, raw in inputs():
            src = os.path.join(tmp, name + ".bin")
            raw.tofile(src)
            values = raw.view(ml_dtypes.bfloat16).astype(np.float32) if dt == "bf16" else raw
            for fname, (fmt, fmax) in FORMATS.items():
                want = reference(values, fmt, fmax)
                want_nan = np.isnan(want.view(fmt))
                for path in PATHS:
                    out = os.path.join(tmp, "out.bin")
                    r = subprocess.run([codes_bin, dt, fname, path, src, out])
                    if r.returncode == 77:
                        print(f"skip {name} {fname} {path}: not on this CPU")
                        continue
                    if r.returncode != 0:
                        print(f"FAIL {name} {fname} {path}: fp8-codes exited {r.returncode}")
                        failures += 1
                        continue
                    got = np.fromfile(out, dtype=np.uint8)
                    got_nan = np.isnan(got.view(fmt))
                    bad = np.nonzero((got != want) & ~(got_nan & want_nan))[0]
                    checked += 1
                    if bad.size:
                        failures += 1
                        print(f"FAIL {name} {fname} {path}: {bad.size} of {want.size} codes differ")
                        for i in bad[:10]:
                            print(f"  x = {values[i]!r} (0x{values[i:i+1].view(np.uint32)[0]:08x}): "
                                  f"ours 0x{got[i]:02x}, ml_dtypes 0x{want[i]:02x}")
                    else:
                        print(f"ok   {name} {fname} {path}: {want.size} codes identical "
                              f"({int(want_nan.sum())} NaN)")
    print(f"ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}")
    print(f"{checked - failures} passed, {failures} failed")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
