"""Our NVFP4 codec (kernels/cpu/nvfp4.c) against an independent reference written here with numpy
and ml_dtypes (float4_e2m1fn casts the elements, float8_e4m3fn the block scales), for 1 x 16
blocks (row-wise), 16 x 1 blocks (the column-wise copy) and 16 x 16 tiles: E2M1 codes, padded
E4M3 scales, the tensor amax, fake-quantized values bit for bit, and the compare pass's terms (to
1e-12 relative: their summation order differs; 1e-5 on the AVX2 path, which sums in float lanes).
Inputs: every bfloat16 bit pattern, in tensors grouped by exponent so that their global scales
differ, placed in blocks where it is the largest magnitude and beside larger values; a million
random float32 values whose blocks span the E4M3 scale range (and raw bit patterns: NaN, inf,
subnormals); every shape with 1, 15, 17, 31, 33, 127, 129 rows and columns. The rules are
docs/block-scaling.md's ("NVFP4"). Run by interop.sh."""

import os
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np

codes_bin = os.environ["NVFP4_CODES"]
F32 = np.float32
FLT_MAX = F32(np.finfo(np.float32).max)
failures = 0


def fail(msg):
    global failures
    failures += 1
    if failures <= 30:
        print("FAIL:", msg)


def nanamax(a, axis=None):
    """max |a|, NaN left out, 0 for nothing left (fmaxf over the block from 0)."""
    m = np.where(np.isnan(a), F32(0), np.abs(a))
    return m.max(axis=axis, initial=F32(0)) if axis is None else m.max(axis=axis)


def e2m1_codes(s):
    """E2M1 codes of float32 values: clamp to +-6 (saturation), ml_dtypes' nearest-even cast;
    NaN gives 0x7 (dlinspect's documented choice)."""
    with np.errstate(invalid="ignore"):
        c = np.clip(s, F32(-6), F32(6)).astype(ml_dtypes.float4_e2m1fn)
    codes = c.view(np.uint8) & 0xF
    return np.where(np.isnan(s), np.uint8(7), codes).astype(np.uint8)


def e2m1_values(codes):
    return codes.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(F32)


def reference(x, kind):
    """x: float32 matrix (the input, bf16 already widened). Returns codes (x's layout), the
    padded scale matrix, amax, dequantized values."""
    rows, cols = x.shape
    amax = nanamax(x)
    with np.errstate(divide="ignore", over="ignore"):
        s_enc = F32(2688) / amax
    if not s_enc <= FLT_MAX:
        s_enc = FLT_MAX
    if amax == 0 or s_enc == 0:
        s_enc = F32(1)
    s_dec = F32(1.0 / np.float64(s_enc))
    mult = s_enc * F32(1.0 / 6.0)
    # The copy being quantized, as a matrix whose rows hold the blocks: the transpose for col.
    m = x.T if kind == "col" else x
    mr, mc = m.shape
    nb = -(-mc // 16)
    pad = np.zeros((mr, nb * 16), F32)  # zeros change no amax
    pad[:, :mc] = np.where(np.isnan(m), F32(0), np.abs(m))
    bmax = pad.reshape(mr, nb, 16).max(axis=2)
    if kind == "2d":
        ntr = -(-mr // 16)
        t = np.zeros((ntr * 16, nb), F32)
        t[:mr] = bmax
        tile = t.reshape(ntr, 16, nb).max(axis=1)
        bmax = np.repeat(tile, 16, axis=0)[:mr]
    with np.errstate(over="ignore"):
        v = bmax * mult
    sc = np.minimum(v, F32(448)).astype(ml_dtypes.float8_e4m3fn)
    scf = sc.astype(F32)
    with np.errstate(divide="ignore", over="ignore"):
        enc = F32(1) / (scf * s_dec)
    enc = np.where(enc <= FLT_MAX, enc, FLT_MAX).astype(F32)
    encx = np.repeat(enc, 16, axis=1)[:, :mc]
    with np.errstate(over="ignore", invalid="ignore"):
        s = (m * encx).astype(F32)
    codes = e2m1_codes(s)
    with np.errstate(over="ignore", invalid="ignore"):
        factor = (scf * amax * F32(1.0 / 2688.0)).astype(F32)
        dq = (e2m1_values(codes) * np.repeat(factor, 16, axis=1)[:, :mc]).astype(F32)
    srows = -(-mr // 128) * 128
    scols = -(-nb // 4) * 4
    scales = np.zeros((srows, scols), np.uint8)
    scales[:mr, :nb] = sc.view(np.uint8)
    if kind == "col":
        codes, dq, s = codes.T, dq.T, s.T
    return codes, scales, amax, dq, s


def terms(x, codes, dq, s):
    f = np.isfinite(x)
    xd = x[f].astype(np.float64)
    d = dq[f].astype(np.float64)
    under = int(np.count_nonzero((xd != 0) & ((codes[f] & 7) == 0)))
    over = int(np.count_nonzero(np.abs(s[f]) > 6))
    e = xd - d
    return [int(f.sum()), under, over, float(e @ e), float(xd @ d), float(d @ d), float(xd @ xd)]


def run(args, simd=None):
    env = dict(os.environ)
    if simd:
        env["DLINSPECT_SIMD"] = simd
    p = subprocess.run([codes_bin] + args, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        fail(f"{' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}")
        return None
    return p.stdout


def close(a, b, tol):
    if a == b or (np.isnan(a) and np.isnan(b)):
        return True
    return abs(a - b) <= tol * max(abs(a), abs(b))


def same_float(a, b):
    """bit for bit, NaN matching any NaN"""
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def check(name, raw, dt, rows, cols, tmp, kinds=("row", "col", "2d"), threads=None):
    path = os.path.join(tmp, "in.bin")
    raw.tofile(path)
    if dt == "bf16":
        x = (raw.astype(np.uint32) << 16).view(F32).reshape(rows, cols)
    else:
        x = raw.reshape(rows, cols)
    for kind in kinds:
        codes, scales, amax, dq, s = reference(x, kind)
        tag = f"{name} {dt} {kind} {rows}x{cols}"
        q_p, s_p, a_p, f_p = (os.path.join(tmp, n) for n in ("q", "s", "a", "f"))
        if run([dt, kind, str(rows), str(cols), "quantize", path, q_p, s_p, a_p]) is not None:
            q = np.fromfile(q_p, np.uint8).reshape(rows, cols)
            sc = np.fromfile(s_p, np.uint8)
            a = np.fromfile(a_p, F32)[0]
            bad = np.flatnonzero(q != codes)
            if bad.size:
                i = bad[0]
                fail(f"{tag}: {bad.size} codes differ; first at {i}: x={x.flat[i]!r} "
                     f"ours {q.flat[i]:#x} ref {codes.flat[i]:#x}")
            if sc.size != scales.size or np.any(sc != scales.ravel()):
                fail(f"{tag}: scales differ (ours {sc.size}, ref {scales.size} bytes)")
            if not (a == amax):
                fail(f"{tag}: amax ours {a!r} ref {amax!r}")
        if run([dt, kind, str(rows), str(cols), "fake", path, f_p]) is not None:
            f = np.fromfile(f_p, F32).reshape(rows, cols)
            bad = np.flatnonzero(~same_float(f, dq))
            if bad.size:
                i = bad[0]
                fail(f"{tag}: {bad.size} fake-quantized values differ; first at {i}: "
                     f"x={x.flat[i]!r} ours {f.flat[i]!r} ref {dq.flat[i]!r}")
        want = terms(x, codes, dq, s)
        # the dispatcher's path (AVX2 where the CPU has it) and the scalar reference
        for simd in (None, "scalar"):
            for th in threads or [None]:
                out = run([dt, kind, str(rows), str(cols), "compare", path]
                          + ([str(th)] if th else []), simd)
                if out is None:
                    continue
                got = [float(v) for v in out.split()]
                # the AVX2 path sums in float lanes per group of blocks, as MXFP8's does: to
                # the MXFP8 tests' 1e-5
                tol = 1e-12 if simd == "scalar" else 1e-5
                if not all(close(g, w, tol) for g, w in zip(got, want)):
                    fail(f"{tag} threads {th} simd {simd or 'auto'}: compare terms ours {got} "
                         f"ref {want}")


def bf16_groups(rng):
    """Every bf16 pattern (NaN and inf in a tensor of their own), 8 exponents to a tensor: as
    each block's largest magnitude (blocks sorted by magnitude), and shuffled (beside larger)."""
    pats = np.arange(65536, dtype=np.uint32)
    exp = (pats >> 7) & 0xFF
    for e0 in range(0, 256, 8):
        group = pats[(exp >= e0) & (exp < e0 + 8)].astype(np.uint16)
        mags = group & 0x7FFF
        sorted_ = group[np.argsort(mags, kind="stable")]
        # largest last in each block of 16: reversed order within blocks of the sorted list
        yield f"bf16 exp {e0}..{e0 + 7} sorted", sorted_.copy()
        shuffled = sorted_.copy()
        rng.shuffle(shuffled)
        yield f"bf16 exp {e0}..{e0 + 7} shuffled", shuffled


def f32_random(rng, n, bad=0.0):
    """Blocks of 16 with their own magnitude (2^e, e spread over 40 binades below the tensor's
    largest), values spread over 12 binades inside each block."""
    nb = -(-n // 16)
    base = rng.integers(-40, 1, nb).repeat(16)[:n]
    within = rng.uniform(-12, 0, n)
    x = (rng.choice([-1.0, 1.0], n) * np.exp2(base + within) * 1000.0).astype(F32)
    if bad:
        k = int(n * bad)
        idx = rng.choice(n, k, replace=False)
        x[idx] = rng.integers(0, 2**32, k, dtype=np.uint64).astype(np.uint32).view(F32)
    return x


def main():
    rng = np.random.default_rng(20261123)
    with tempfile.TemporaryDirectory() as tmp:
        for name, pats in bf16_groups(rng):
            n = pats.size
            cols = 256 if n % 256 == 0 else 16
            check(name, pats, "bf16", n // cols, cols, tmp)
            # the same patterns as f32 (exactly representable)
            check(name, (pats.astype(np.uint32) << 16).view(F32), "f32", n // cols, cols, tmp,
                  kinds=("row",))
        # a million random f32, in one tensor (threads 1 and 4 must agree) and 4 with raw bits
        x = f32_random(rng, 1 << 20)
        check("random 1M", x, "f32", 1 << 10, 1 << 10, tmp, threads=[1, 4])
        for k in range(4):
            x = f32_random(rng, 1 << 16, bad=0.05)
            check(f"random+raw {k}", x, "f32", 256, 256, tmp)
            check(f"random+raw {k} bf16", (x.view(np.uint32) >> 16).astype(np.uint16), "bf16",
                  256, 256, tmp)
        # all-zero, one value, tiny amax (S_enc clamped), inf amax
        specials = {
            "zeros": np.zeros(64, F32),
            "tiny": np.full(64, 1e-40, F32),
            "subnormal amax": np.array([1e-45] * 32 + [-1e-45] * 32, F32),
            "inf": np.array([np.inf] + [1.0] * 63, F32),
            "huge": np.array([3e38] + [1.0] * 63, F32),
            "negzero": np.array([-0.0] * 16 + [1.0] * 48, F32),
        }
        for name, v in specials.items():
            check(name, v, "f32", 4, 16, tmp)
        # every shape with 1, 15, 17, 31, 33, 127, 129 rows and columns
        sizes = (1, 15, 17, 31, 33, 127, 129)
        for r in sizes:
            for c in sizes:
                x = f32_random(rng, r * c + 16)[: r * c]
                check("shape", x, "f32", r, c, tmp)
                check("shape", (x.view(np.uint32) >> 16).astype(np.uint16), "bf16", r, c, tmp)
    if failures:
        print(f"nvfp4-interop: {failures} failures")
        return 1
    print("nvfp4-interop: codes, scales, fake-quantized values and terms match the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
