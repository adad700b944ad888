"""Our MXFP8 codec (kernels/cpu/mx.c) against an independent reference written here with numpy
and ml_dtypes (float8_e8m0fnu, float8_e4m3fn, float8_e5m2), for E4M3 and E5M2 elements, row-wise
and column-wise blocks: codes, padded E8M0 scales, fake-quantized values and the compare pass's
terms, bit for bit (the sums to 1e-12 relative: their order differs). Inputs: every bfloat16 bit
pattern placed in blocks where it is the block's largest magnitude and in blocks where it is not;
a million random float32 values of widely spread magnitudes (and raw bit patterns: NaN, inf,
subnormals); block maxima at and around the power-of-two boundaries of the scale; and every shape
with 1, 31, 33, 127, 129 rows and columns. The rules are docs/block-scaling.md's. Run by
interop.sh."""

import itertools
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
codes_bin = os.environ["MX_CODES"]
HAVE_AVX2 = "avx2" in open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else False
failures = 0


def fail(msg):
    global failures
    failures += 1
    if failures <= 30:
        print("FAIL:", msg)


def e8m0_ceil(v):
    """The E8M0 code of 2^ceil(log2 v) for float32 v >= 0, from frexp (not from the bits)."""
    m, ex = np.frexp(v.astype(np.float64))
    up = np.where(m == 0.5, ex - 1, ex)  # an exact power of two keeps its exponent
    e = np.clip(up + 127, 0, 254)
    e = np.where(v == 0, 0, e)
    e = np.where(np.isinf(v), 254, e)
    return e.astype(np.uint8)


def reference(x, fmt, fmax, colwise):
    """(codes, scales matrix padded as TransformerEngine shapes it, dequantized float64,
    per-block scale_inv) of the float32 matrix x."""
    X = np.ascontiguousarray(x.T) if colwise else x
    R, C = X.shape
    nb = -(-C // 32)
    pad = np.zeros((R, nb * 32), np.float32)
    pad[:, :C] = X
    blocks = pad.reshape(R, nb, 32)
    amax = np.fmax.reduce(np.abs(blocks), axis=2, initial=np.float32(0))  # NaN left out
    v = (amax.astype(np.float32) * np.float32(1.0 / fmax)).astype(np.float32)
    e = e8m0_ceil(v)
    scale_inv = e.view(ml_dtypes.float8_e8m0fnu).astype(np.float64)  # 2^(e - 127)
    rcp = (1.0 / scale_inv).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        s = (blocks * rcp[:, :, None]).astype(np.float32)
        q = np.clip(s, np.float32(-fmax), np.float32(fmax)).astype(fmt)
    dq = q.astype(np.float64) * scale_inv[:, :, None]
    q = q.view(np.uint8).reshape(R, nb * 32)[:, :C]
    dq = dq.reshape(R, nb * 32)[:, :C]
    s = s.reshape(R, nb * 32)[:, :C]
    # Scales: row-wise [roundup(rows, 128), roundup(blocks, 4)]; column-wise the transpose's
    # blocks laid out [roundup(blocks, 4), roundup(cols, 128)].
    if colwise:
        S = np.zeros((-(-nb // 4) * 4, -(-R // 128) * 128), np.uint8)
        S[:nb, :R] = e.T
        q, dq, s = q.T, dq.T, s.T
    else:
        S = np.zeros((-(-R // 128) * 128, -(-nb // 4) * 4), np.uint8)
        S[:R, :nb] = e
    return np.ascontiguousarray(q), S, np.ascontiguousarray(dq), s, scale_inv, e


def same_codes(a, b, fmt):
    na = np.isnan(a.view(fmt).astype(np.float32))
    nb = np.isnan(b.view(fmt).astype(np.float32))
    return (na == nb) & (na | (a == b))


def run(args, tmp, simd=None):
    env = dict(os.environ)
    if simd:
        env["DLINSPECT_SIMD"] = simd
    p = subprocess.run([codes_bin] + args, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        fail(f"{' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
        return None
    return p.stdout


def check(name, raw, dt, rows, cols, tmp, modes=("quantize", "fake", "compare"),
          formats=FORMATS):
    src = os.path.join(tmp, "in.bin")
    raw.tofile(src)
    x = (raw.view(ml_dtypes.bfloat16).astype(np.float32) if dt == "bf16" else raw).reshape(rows, cols)
    n = 0
    for fname, (fmt, fmax) in formats.items():
        for direction in ("row", "col"):
            colwise = direction == "col"
            q_ref, S_ref, dq_ref, s_ref, si_blocks, e_blocks = reference(x, fmt, fmax, colwise)
            tag = f"{name} {fname} {direction}"
            base = [dt, fname, direction, str(rows), str(cols)]
            if "quantize" in modes:
                qp, sp = os.path.join(tmp, "q.bin"), os.path.join(tmp, "s.bin")
                if run(base + ["quantize", src, qp, sp], tmp) is not None:
                    q = np.fromfile(qp, np.uint8)
                    S = np.fromfile(sp, np.uint8)
                    if q.size != q_ref.size:
                        fail(f"{tag}: {q.size} codes, expected {q_ref.size}")
                    else:
                        ok = same_codes(q, q_ref.ravel(), fmt)
                        bad = np.flatnonzero(~ok)
                        if bad.size:
                            i = bad[0]
                            fail(f"{tag}: {bad.size} codes differ; first at {i}: x={x.ravel()[i]!r} "
                                 f"got 0x{q[i]:02x} expected 0x{q_ref.ravel()[i]:02x}")
                    if S.size != S_ref.size:
                        fail(f"{tag}: scale matrix of {S.size} bytes, expected {S_ref.shape}")
                    elif not np.array_equal(S, S_ref.ravel()):
                        i = np.flatnonzero(S != S_ref.ravel())[0]
                        fail(f"{tag}: {np.count_nonzero(S != S_ref.ravel())} scales differ; first "
                             f"at {np.unravel_index(i, S_ref.shape)}: got {S[i]} expected {S_ref.ravel()[i]}")
                    n += q_ref.size
            if "fake" in modes:
                fp = os.path.join(tmp, "f.bin")
                if run(base + ["fake", src, fp], tmp) is not None:
                    f = np.fromfile(fp, np.float32)
                    with np.errstate(over="ignore"):
                        ref = dq_ref.ravel().astype(np.float32)
                    ok = (f == ref) | (np.isnan(f) & np.isnan(ref))
                    if f.size != ref.size or not ok.all():
                        i = np.flatnonzero(~ok)[0] if f.size == ref.size else 0
                        fail(f"{tag}: fake quantization differs at {i}: got {f[i]!r} expected {ref[i]!r}")
            # The compare pass on each path: the scalar reference sums in double (to 1e-12 of
            # numpy's sums), the AVX2 path in float lanes widened every 16 blocks (to 1e-5);
            # the counts and the scale range are exact on both. compare-sq: given the
            # statistics pass's sum of x^2, as the statistics feature calls it.
            for (simd, tol), mode in itertools.product((("scalar", 1e-12), ("avx2", 1e-5)),
                                                       ("compare", "compare-sq")):
                if "compare" not in modes or (simd == "avx2" and not HAVE_AVX2):
                    continue
                out = run(base + [mode, src], tmp, simd)
                if out is not None:
                    got = out.split()
                    with np.errstate(invalid="ignore"):  # NaN payloads
                        xf = x.astype(np.float64)
                    fin = np.isfinite(xf)
                    xs, dqs, ss = xf[fin], dq_ref[fin], s_ref[fin].astype(np.float64)
                    qq = q_ref[fin]
                    si_used = si_blocks[e_blocks != 0]
                    exp = [int(fin.sum()), int(np.count_nonzero((xs != 0) & ((qq & 0x7F) == 0))),
                           int(np.count_nonzero(np.abs(ss) > fmax)),
                           float(np.sum((xs - dqs) ** 2)), float(np.sum(xs * dqs)),
                           float(np.sum(dqs * dqs)), float(np.sum(xs * xs)),
                           float(si_used.min()) if si_used.size else np.inf,
                           float(si_used.max()) if si_used.size else 0.0]
                    for k, (g, w) in enumerate(zip(got, exp)):
                        g = float(g)
                        good = g == w if k < 3 or k >= 7 else (
                            abs(g - w) <= tol * max(abs(w), 1e-300) or (np.isinf(w) and g == w))
                        if not good:
                            fail(f"{tag} {simd} {mode}: compare term {k} is {g!r}, expected {w!r}")
    return n


def fb_reference(x, fmt, fmax, kind, dt):
    """FP8 block scaling with power-of-two scales (TransformerEngine's Float8BlockScaling): the
    dequantized float64 values, the scaled float32 values and every block's scale_inv."""
    R, C = x.shape
    br, bc = {"row": (1, 128), "col": (128, 1), "2d": (128, 128)}[kind]
    Rp, Cp = -(-R // br) * br, -(-C // bc) * bc
    pad = np.zeros((Rp, Cp), np.float32)
    pad[:R, :C] = x
    blocks = pad.reshape(Rp // br, br, Cp // bc, bc)
    amax = np.fmax.reduce(np.fmax.reduce(np.abs(blocks), axis=3, initial=np.float32(0)),
                          axis=1, initial=np.float32(0)).astype(np.float32)
    ok = (amax > 0) & np.isfinite(amax)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        s = np.where(ok, np.float32(fmax) / np.where(ok, amax, np.float32(1)), np.float32(1)).astype(np.float32)
    in_max = np.float32(ml_dtypes.finfo(ml_dtypes.bfloat16).max) if dt == "bf16" else np.finfo(np.float32).max
    s = np.where(np.isinf(s), in_max, s).astype(np.float32)
    m, e = np.frexp(s.astype(np.float64))
    s = np.ldexp(1.0, e - 1).astype(np.float32)  # down to a power of two
    si = (np.float32(1) / s).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        sx = (blocks * s[:, None, :, None]).astype(np.float32)
        q = np.clip(sx, np.float32(-fmax), np.float32(fmax)).astype(fmt)
    dq = q.astype(np.float64) * si[:, None, :, None].astype(np.float64)
    dq = dq.reshape(Rp, Cp)[:R, :C]
    sx = sx.reshape(Rp, Cp)[:R, :C]
    q = q.view(np.uint8).reshape(Rp, Cp)[:R, :C]
    return dq, sx, q, si.ravel().astype(np.float64)


def check_fb(name, raw, dt, rows, cols, tmp):
    """FP8 block scaling's fake quantization bit for bit, its compare terms on each path."""
    src = os.path.join(tmp, "in.bin")
    raw.tofile(src)
    x = (raw.view(ml_dtypes.bfloat16).astype(np.float32) if dt == "bf16" else raw).reshape(rows, cols)
    n = 0
    for fname, (fmt, fmax) in FORMATS.items():
        for kind in ("row", "col", "2d"):
            dq_ref, s_ref, q_ref, si = fb_reference(x, fmt, fmax, kind, dt)
            tag = f"{name} fp8-block {fname} {kind}"
            base = [dt, fname, kind, str(rows), str(cols)]
            fp = os.path.join(tmp, "f.bin")
            if run(base + ["fb-fake", src, fp], tmp) is not None:
                f = np.fromfile(fp, np.float32)
                with np.errstate(over="ignore"):
                    ref = dq_ref.ravel().astype(np.float32)
                good = (f == ref) | (np.isnan(f) & np.isnan(ref))
                if f.size != ref.size or not good.all():
                    i = np.flatnonzero(~good)[0] if f.size == ref.size else 0
                    fail(f"{tag}: fake quantization differs at {i}: x={x.ravel()[i]!r} got {f[i]!r} expected {ref[i]!r}")
                n += f.size
            with np.errstate(invalid="ignore"):
                xf = x.astype(np.float64)
            fin = np.isfinite(xf)
            xs, dqs, ss, qq = xf[fin], dq_ref[fin], s_ref[fin].astype(np.float64), q_ref[fin]
            exp = [int(fin.sum()), int(np.count_nonzero((xs != 0) & ((qq & 0x7F) == 0))),
                   int(np.count_nonzero(np.abs(ss) > fmax)),
                   float(np.sum((xs - dqs) ** 2)), float(np.sum(xs * dqs)),
                   float(np.sum(dqs * dqs)), float(np.sum(xs * xs)), float(si.min()), float(si.max())]
            # the scalar pass to 1e-12, the AVX2 one (128 x 128 tiles) to 1e-5, as for MXFP8,
            # each also given the statistics pass's sum of x^2 (fb-compare-sq)
            for (simd, tol), mode in itertools.product((("scalar", 1e-12), ("avx2", 1e-5)),
                                                       ("fb-compare", "fb-compare-sq")):
                if simd == "avx2" and not HAVE_AVX2:
                    continue
                out = run(base + [mode, src], tmp, simd)
                if out is None:
                    continue
                for k, (g, w) in enumerate(zip(out.split(), exp)):
                    g = float(g)
                    good = g == w if k < 3 or k >= 7 else (
                        abs(g - w) <= tol * max(abs(w), 1e-300) or (np.isinf(w) and g == w))
                    if not good:
                        fail(f"{tag} {simd} {mode}: compare term {k} is {g!r}, expected {w!r}")
    return n


def bf16_blocks():
    """Every bfloat16 pattern twice: once as its block's largest magnitude (the other 31 elements
    are its bits shifted right: smaller), once beside a larger one (its exponent raised by 1 to 12,
    capped at the largest finite value; infinity beside infinity)."""
    p = np.arange(1 << 16, dtype=np.uint32)
    mag = p & 0x7FFF
    sign = p & 0x8000
    j = np.arange(32, dtype=np.uint32)
    others = (mag[:, None] >> (1 + j[None, :] % 15)) | ((j[None, :] & 1) << 15)
    a = others.copy()
    pos = (p % 32).astype(np.int64)
    a[np.arange(p.size), pos] = p
    b = (mag[:, None] >> (3 + j[None, :] % 11)) | ((j[None, :] & 2) << 14)
    bigger = np.where(mag >= 0x7F80, 0x7F80, np.minimum(0x7F7F, mag + 0x80 * (1 + p % 12)))
    b[np.arange(p.size), (pos + 7) % 32] = bigger | (sign ^ 0x8000)
    b[np.arange(p.size), pos] = p
    return np.concatenate([a, b]).astype(np.uint16).ravel()


def f32_random(rng, n, bad=0.05):
    per_block = rng.integers(-40, 26, n // 32 + 1)
    spread = rng.integers(-24, 1, n)  # magnitudes within a block span 2^24: some underflow
    wide = rng.uniform(1.0, 2.0, n) * np.exp2(np.repeat(per_block, 32)[:n] + spread)
    wide *= rng.choice([-1.0, 1.0], n)
    wide = wide.astype(np.float32)
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    pick = rng.random(n) < bad
    wide[pick] = bits[pick]
    wide[rng.random(n) < 0.02] = 0.0
    return wide


def bf16_narrow(rng, rows, cols):
    """bfloat16 values within 2^6 of each other in a row, each row scaled by its own power of
    two."""
    m = rng.uniform(1.0, 2.0, (rows, cols)) * np.exp2(rng.integers(-6, 0, (rows, cols)))
    m *= np.exp2(rng.integers(-30, 30, (rows, 1))) * rng.choice([-1.0, 1.0], (rows, cols))
    return (m.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).ravel()


def f32_edges():
    """Blocks whose largest magnitude sits at and next to fp8_max * 2^k (where the scale's
    exponent steps) for every k, and in the float subnormal range; the rest of each block spread
    below it."""
    rng = np.random.default_rng(7)
    maxima = []
    for fmax in (448.0, 57344.0):
        for k in range(-150, 128):
            v = fmax * 2.0**k
            v = np.float32(v) if v < 3.4e38 else np.float32(3e38)
            maxima += [v, np.nextafter(v, np.float32(0)), np.nextafter(v, np.float32(np.inf))]
    maxima += list(np.arange(1, 200, dtype=np.uint32).view(np.float32))  # float subnormals
    maxima = np.array(maxima, np.float32)
    maxima = maxima[np.isfinite(maxima)]
    blocks = (maxima[:, None] * rng.uniform(0, 1, (maxima.size, 32)).astype(np.float32)).astype(np.float32)
    blocks[:, 5] = maxima
    blocks[::2] *= -1
    cols = 32 * 16
    rows = -(-blocks.size // cols)
    out = np.zeros(rows * cols, np.float32)
    out[: blocks.size] = blocks.ravel()
    return out, rows, cols


def main():
    n = 0
    with tempfile.TemporaryDirectory() as tmp:
        raw = bf16_blocks()
        n += check("bf16-all", raw, "bf16", raw.size // 2048, 2048, tmp)
        rng = np.random.default_rng(20261123)
        f = f32_random(rng, 1_000_000)
        n += check("f32-random", f, "f32", 1000, 1000, tmp)
        # All finite, magnitudes the AVX2 path takes (its float lanes; the above is mostly
        # blocks it hands to the scalar path because they hold NaN or inf).
        f = f32_random(rng, 1_000_000, bad=0.0)
        n += check("f32-finite", f, "f32", 1000, 1000, tmp)
        b = (f.view(np.uint32) >> 16).astype(np.uint16)
        n += check("bf16-finite", b, "bf16", 500, 2000, tmp)
        # Values within 2^6 of each other in a row, each row its own magnitude: the batches and
        # tile rows that the AVX2 path's bf16 fast steps take whole (all on the format's
        # normals), where compare-sq leaves the sum of x^2 out of them.
        narrow = bf16_narrow(rng, 256, 2048)
        n += check("bf16-narrow", narrow, "bf16", 256, 2048, tmp)
        n += check_fb("bf16-narrow", narrow, "bf16", 256, 2048, tmp)
        # FP8 block scaling (1 x 128, 128 x 1, 128 x 128 blocks, power-of-two scales).
        n += check_fb("bf16-all", raw, "bf16", raw.size // 2048, 2048, tmp)
        n += check_fb("f32-finite", f, "f32", 1000, 1000, tmp)
        n += check_fb("f32-random", f32_random(rng, 1_000_000), "f32", 1000, 1000, tmp)
        for rows, cols in ((1, 1), (31, 129), (129, 31), (127, 33), (33, 127), (200, 300)):
            n += check_fb(f"f32-{rows}x{cols}", f32_random(rng, rows * cols), "f32", rows, cols, tmp)
        e, rows, cols = f32_edges()
        n += check("f32-edges", e, "f32", rows, cols, tmp)
        # Shapes that are not whole blocks: the partial block holds what there is; the scales
        # are padded (zeros) to TransformerEngine's multiples.
        for rows in (1, 31, 33, 127, 129):
            for cols in (1, 31, 33, 127, 129):
                v = f32_random(rng, rows * cols)
                n += check(f"f32-{rows}x{cols}", v, "f32", rows, cols, tmp)
    print(f"mx-interop: {n} codes checked against ml_dtypes (MXFP8 and FP8 block scaling), {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
