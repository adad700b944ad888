"""The NVFP4 recipe options of dlinspect's codec (kernels/cpu/nvfp4-recipe.c, through the public
dli_block_fake_quant) against a reference written here with numpy and ml_dtypes:

- the counter-based random bits (SplitMix64's output function, in numpy uint64 arithmetic), byte
  for byte, and the seeded sign vector;
- the stochastic E2M1 encode: t = |s| + u * gap (u = rbits / 256, gap the distance from the grid
  value below |s| to the one above), the value above when t reaches it, else the one below,
  ml_dtypes' float4_e2m1fn giving the code of the chosen value; every rbits value against scaled
  values at and around every grid point and random ones;
- the 16 x 16 Hadamard transform: the Sylvester matrix built by blocks here satisfies
  H H^T = 16 I, the transform of unit and constant vectors, bit for bit against numpy's
  sequential double sums, within 2^-22 of float64 matrix products, round trip;
- fake quantization with stochastic rounding and with the transform (1 x 16, 16 x 1 and 16 x 16
  blocks, f32 and bf16, odd shapes), values bit for bit.
The rules are docs/block-scaling.md's ("NVFP4 recipe options"). Run by interop.sh."""

import os
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np

tool = os.environ["NVFP4_RECIPE"]
F32 = np.float32
FLT_MAX = F32(np.finfo(np.float32).max)
M64 = np.uint64
failures = 0
checks = 0

# TransformerEngine's get_wgrad_sign_vector (reference_nvfp4.py).
TE_SIGNS = np.array([1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1], np.float64)


def fail(msg):
    global failures
    failures += 1
    if failures <= 30:
        print("FAIL:", msg)


def check(ok, msg):
    global checks
    checks += 1
    if not ok:
        fail(msg)


def run(args):
    p = subprocess.run([tool] + [str(a) for a in args], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{' '.join(map(str, args))}: exit {p.returncode}: {p.stderr.strip()}")
        return None
    return p.stdout


# ---- random bits ----

def mix64(z):
    with np.errstate(over="ignore"):
        z = (z + M64(0x9E3779B97F4A7C15)).astype(M64)
        z = ((z ^ (z >> M64(30))) * M64(0xBF58476D1CE4E5B9)).astype(M64)
        z = ((z ^ (z >> M64(27))) * M64(0x94D049BB133111EB)).astype(M64)
        return z ^ (z >> M64(31))


def rbits(seed, idx):
    with np.errstate(over="ignore"):
        k = mix64(np.array([seed], M64))[0]
        return (mix64((k + idx.astype(M64)).astype(M64)) >> M64(56)).astype(np.uint8)


def signs_of(seed):
    if seed == 0:
        return TE_SIGNS
    m = int(mix64(np.array([seed], M64))[0]) & 0xFFFF
    return np.array([-1.0 if (m >> i) & 1 else 1.0 for i in range(16)])


def mask_of(s):
    return sum(1 << i for i in range(16) if s[i] < 0)


# ---- stochastic E2M1 ----

GRID = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], F32)


def sr_values(s, rb):
    """The stochastically rounded E2M1 value of each float32 s (as float32, signed)."""
    a = np.abs(s)
    with np.errstate(invalid="ignore"):
        ac = np.where(np.isnan(a), F32(6), np.minimum(a, F32(6)))
    lo_i = np.searchsorted(GRID, ac, side="right") - 1  # the grid value <= |s|
    lo = GRID[lo_i]
    hi = GRID[np.minimum(lo_i + 1, 7)]
    gap = np.where(lo_i < 7, hi - lo, F32(2)).astype(F32)
    with np.errstate(invalid="ignore", over="ignore"):
        t = (ac + (rb.astype(F32) / F32(256)) * gap).astype(F32)  # one float rounding
    v = np.where((lo_i < 7) & (t >= hi), hi, lo)
    neg = (np.signbit(s)) & ~np.isnan(s)
    return np.where(neg, -v, v).astype(F32)


def e2m1_code(v):
    return (v.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF).astype(np.uint8)


def e2m1_value(codes):
    return codes.astype(np.uint8).view(ml_dtypes.float4_e2m1fn).astype(F32)


# ---- Hadamard ----

def sylvester(n):
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


H16 = sylvester(16)


def rht_groups(g, s, inverse):
    """g: (n, 16) float32 groups. Forward y_j = sum_i g_i s_i H_ij / 4, inverse
    x_i = s_i sum_j H_ij y_j / 4: sums in float64 in index order, rounded to float32 once."""
    g = g.astype(np.float64)
    out = np.empty(g.shape, np.float64)
    for o in range(16):
        acc = np.zeros(g.shape[0])
        for k in range(16):
            coef = (H16[o, k] * s[o]) if inverse else (s[k] * H16[k, o])
            acc = acc + (-g[:, k] if coef < 0 else g[:, k])
        out[:, o] = acc * 0.25
    return out.astype(F32)


def rht_matrix(x, col, s, inverse):
    m = x.T if col else x
    r, c = m.shape
    y = rht_groups(np.ascontiguousarray(m).reshape(-1, 16), s, inverse).reshape(r, c)
    return np.ascontiguousarray(y.T) if col else y


# ---- the NVFP4 cast ----

def nvfp4_fake(x, kind, sr, seed):
    """x: float32 matrix. kind row | col | 2d. Returns the dequantized values (x's layout)."""
    rows, cols = x.shape
    amax = np.where(np.isnan(x), F32(0), np.abs(x)).max(initial=F32(0))
    with np.errstate(divide="ignore", over="ignore"):
        s_enc = F32(2688) / amax
    if not s_enc <= FLT_MAX:
        s_enc = FLT_MAX
    if amax == 0 or s_enc == 0:
        s_enc = F32(1)
    s_dec = F32(1.0 / np.float64(s_enc))
    m = x.T if kind == "col" else x
    mr, mc = m.shape
    nb = -(-mc // 16)
    pad = np.zeros((mr, nb * 16), F32)
    pad[:, :mc] = np.where(np.isnan(m), F32(0), np.abs(m))
    bmax = pad.reshape(mr, nb, 16).max(axis=2)
    if kind == "2d":
        ntr = -(-mr // 16)
        t = np.zeros((ntr * 16, nb), F32)
        t[:mr] = bmax
        bmax = np.repeat(t.reshape(ntr, 16, nb).max(axis=1), 16, axis=0)[:mr]
    with np.errstate(over="ignore"):
        v = bmax * (s_enc * F32(1.0 / 6.0))
    scf = np.minimum(v, F32(448)).astype(ml_dtypes.float8_e4m3fn).astype(F32)
    with np.errstate(divide="ignore", over="ignore"):
        enc = F32(1) / (scf * s_dec)
    enc = np.where(enc <= FLT_MAX, enc, FLT_MAX).astype(F32)
    with np.errstate(over="ignore", invalid="ignore"):
        s = (m * np.repeat(enc, 16, axis=1)[:, :mc]).astype(F32)
    if sr:
        # The element's index in its copy: m is that copy, row-major.
        idx = np.arange(mr * mc, dtype=np.uint64).reshape(mr, mc)
        q = sr_values(s, rbits(seed, idx))
    else:
        with np.errstate(invalid="ignore"):
            q = np.clip(s, F32(-6), F32(6)).astype(ml_dtypes.float4_e2m1fn).astype(F32)
        q = np.where(np.isnan(s), F32(6), q)
    codes = e2m1_code(q)
    with np.errstate(over="ignore", invalid="ignore"):
        factor = (scf * amax * F32(1.0 / 2688.0)).astype(F32)
        dq = (e2m1_value(codes) * np.repeat(factor, 16, axis=1)[:, :mc]).astype(F32)
    return np.ascontiguousarray(dq.T) if kind == "col" else dq


def reference_fake(x, kind, sr, seed, rht, rht_seed):
    if not rht:
        return nvfp4_fake(x, kind, sr, seed)
    s = signs_of(rht_seed)
    col = kind == "col"
    return rht_matrix(nvfp4_fake(rht_matrix(x, col, s, False), kind, sr, seed), col, s, True)


def same_bits(a, b):
    a = np.ascontiguousarray(a, F32).view(np.uint32)
    b = np.ascontiguousarray(b, F32).view(np.uint32)
    nan_a = (a & 0x7FFFFFFF) > 0x7F800000
    nan_b = (b & 0x7FFFFFFF) > 0x7F800000
    return (nan_a == nan_b) & (nan_a | (a == b))


def to_bf16(x):
    return x.astype(ml_dtypes.bfloat16)


# ---- the checks ----

def check_rbits(tmp):
    for seed in (0, 1, 12345, 2**63 + 5, 2**64 - 1):
        n = 100000
        out = run(["rbits", seed, n, f"{tmp}/rb"])
        if out is None:
            continue
        got = np.fromfile(f"{tmp}/rb", np.uint8)
        want = rbits(seed, np.arange(n, dtype=np.uint64))
        check(np.array_equal(got, want), f"rbits seed {seed}: {np.count_nonzero(got != want)} differ")
        mask = int(out.split()[1])
        check(mask == mask_of(signs_of(seed)), f"sign mask seed {seed}: {mask:#x}")
    check(mask_of(TE_SIGNS) == 0xD7E8, "TransformerEngine's sign vector as a mask")


def check_encode_sr(tmp, rng):
    # Every grid point, the midpoints, values a hair either side of both, beyond 6, tiny ones.
    base = np.concatenate([GRID, (GRID[1:] + GRID[:-1]) / 2, [5.0, 6.5, 7, 1e3, 1e-30, 2**-149]])
    near = np.concatenate([np.nextafter(base.astype(F32), F32(np.inf)),
                           np.nextafter(base.astype(F32), F32(0)), base.astype(F32)])
    vals = np.concatenate([near, -near, rng.uniform(-7, 7, 4000).astype(F32),
                           np.array([np.inf, -np.inf, np.nan, -0.0], F32)]).astype(F32)
    s = np.repeat(vals, 256)
    rb = np.tile(np.arange(256, dtype=np.uint8), vals.size)
    s.tofile(f"{tmp}/s")
    rb.tofile(f"{tmp}/rb")
    if run(["encode-sr", f"{tmp}/s", f"{tmp}/rb", f"{tmp}/c"]) is None:
        return
    got = np.fromfile(f"{tmp}/c", np.uint8)
    want = e2m1_code(sr_values(s, rb))
    want = np.where(np.isnan(s), np.uint8(7), want)
    bad = np.flatnonzero(got != want)
    check(bad.size == 0, f"encode-sr: {bad.size} of {s.size} codes differ, first s={s[bad[:1]]} "
          f"rbits={rb[bad[:1]]} got={got[bad[:1]]} want={want[bad[:1]]}")


def check_hadamard(tmp, rng):
    check(np.array_equal(H16 @ H16.T, 16 * np.eye(16)), "H H^T = 16 I")
    s = TE_SIGNS
    M = (np.diag(s) @ H16) / 4
    check(np.allclose(M @ M.T, np.eye(16), atol=0, rtol=0), "(S H / 4)(S H / 4)^T = I")
    # Known vectors: e_k goes to s_k H[k, :] / 4; the constant vector to H's column sums with signs.
    e = np.eye(16, dtype=F32)
    ones = np.ones((1, 16), F32)
    x = np.concatenate([e, ones, rng.standard_normal((64, 16)).astype(F32)])
    x.tofile(f"{tmp}/x")
    if run(["rht", "f32", "row", x.shape[0], 16, mask_of(s), "fwd", f"{tmp}/x", f"{tmp}/y"]) is None:
        return
    y = np.fromfile(f"{tmp}/y", F32).reshape(x.shape)
    for k in range(16):
        check(np.array_equal(y[k], (s[k] * H16[k] / 4).astype(F32)), f"transform of e_{k}")
    check(np.array_equal(y[16], ((s @ H16) / 4).astype(F32)), "transform of the ones vector")
    check(np.array_equal(y, rht_groups(x, s, False)), "transform bit for bit (sequential sums)")
    check(np.allclose(y, x.astype(np.float64) @ M, rtol=0, atol=2**-22 * np.abs(x).sum(1).max()),
          "transform against a float64 product")
    y.tofile(f"{tmp}/y")
    if run(["rht", "f32", "row", x.shape[0], 16, mask_of(s), "inv", f"{tmp}/y", f"{tmp}/z"]) is None:
        return
    z = np.fromfile(f"{tmp}/z", F32).reshape(x.shape)
    check(np.array_equal(z, rht_groups(y, s, True)), "inverse bit for bit")
    check(np.allclose(z, x, rtol=0, atol=1e-6 * np.abs(x).max()), "round trip")
    # Down the columns (the column-wise copy), random signs, and bf16 input.
    for dt, rows, cols in (("f32", 48, 5), ("bf16", 32, 33), ("f32", 16, 1)):
        seed = int(rng.integers(1, 2**62))
        sg = signs_of(seed)
        a = (rng.standard_normal((rows, cols)) * 10).astype(F32)
        if dt == "bf16":
            to_bf16(a).tofile(f"{tmp}/a")
            a = to_bf16(a).astype(F32)
        else:
            a.tofile(f"{tmp}/a")
        if run(["rht", dt, "col", rows, cols, mask_of(sg), "fwd", f"{tmp}/a", f"{tmp}/b"]) is None:
            continue
        b = np.fromfile(f"{tmp}/b", F32).reshape(rows, cols)
        check(np.array_equal(b, rht_matrix(a, True, sg, False)), f"column transform {dt} {rows}x{cols}")
    # A length that is not a multiple of 16 is refused.
    np.zeros((17, 3), F32).tofile(f"{tmp}/a")
    p = subprocess.run([tool, "rht", "f32", "col", "17", "3", "0", "fwd", f"{tmp}/a", f"{tmp}/b"],
                       capture_output=True)
    check(p.returncode != 0, "17 rows refused by the column transform")


def check_fake(tmp, rng):
    cases = []
    for rows, cols in ((1, 1), (15, 17), (17, 15), (33, 129), (129, 33), (64, 48), (16, 16)):
        for kind in ("row", "col", "2d"):
            cases.append((rows, cols, kind, 1, 0))
    for rows, cols in ((16, 16), (48, 33), (32, 129), (128, 64)):
        cases.append((rows, cols, "col", 0, 1))
        cases.append((rows, cols, "col", 1, 1))
    for rows, cols in ((5, 32), (33, 64)):
        cases.append((rows, cols, "row", 1, 1))
        cases.append((rows, cols, "row", 0, 1))
    n_vals = 0
    for rows, cols, kind, sr, rht in cases:
        for dt in ("f32", "bf16"):
            # Blocks over many binades, a few raw bit patterns (NaN, inf, subnormals) without the
            # transform (which spreads a NaN over its group).
            x = (rng.standard_normal((rows, cols)) *
                 np.exp2(rng.integers(-20, 20, (rows, cols)))).astype(F32)
            if not rht and rows * cols > 16:
                bad = rng.random((rows, cols)) < 0.02
                raw = rng.integers(0, 2**32, (rows, cols), dtype=np.uint64).astype(np.uint32)
                x = np.where(bad, raw.view(F32), x)
            if dt == "bf16":
                xb = to_bf16(x)
                xb.tofile(f"{tmp}/x")
                x = xb.astype(F32)
            else:
                x.tofile(f"{tmp}/x")
            seed = int(rng.integers(0, 2**63))
            rht_seed = 0 if rng.random() < 0.5 else int(rng.integers(1, 2**62))
            args = ["fake", dt, kind, rows, cols, sr, seed, rht, rht_seed, f"{tmp}/x", f"{tmp}/o"]
            if run(args) is None:
                continue
            got = np.fromfile(f"{tmp}/o", F32).reshape(rows, cols)
            want = reference_fake(x, kind, sr, seed, rht, rht_seed)
            ok = same_bits(got, want)
            n_vals += got.size
            i = np.flatnonzero(~ok.ravel())
            check(ok.all(), f"fake {dt} {kind} {rows}x{cols} sr={sr} rht={rht}: {i.size} differ, "
                  f"first x={x.ravel()[i[:1]]} got={got.ravel()[i[:1]]} want={want.ravel()[i[:1]]}")
    # A large stochastic case: a million values, row-wise and column-wise.
    x = (rng.standard_normal((1024, 1024)) * np.exp2(rng.integers(-8, 8, (1024, 1)))).astype(F32)
    x.tofile(f"{tmp}/x")
    for kind in ("row", "col"):
        if run(["fake", "f32", kind, 1024, 1024, 1, 7, 1 if kind == "col" else 0, 0,
                f"{tmp}/x", f"{tmp}/o"]) is None:
            continue
        got = np.fromfile(f"{tmp}/o", F32).reshape(1024, 1024)
        want = reference_fake(x, kind, 1, 7, kind == "col", 0)
        n_vals += got.size
        check(same_bits(got, want).all(), f"fake 1024x1024 {kind} stochastic: "
              f"{np.count_nonzero(~same_bits(got, want))} differ")
    # The transform with 16 x 16 tiles, or 17 rows down the columns, is refused.
    np.zeros((32, 32), F32).tofile(f"{tmp}/x")
    p = subprocess.run([tool, "fake", "f32", "2d", "32", "32", "0", "0", "1", "0", f"{tmp}/x",
                        f"{tmp}/o"], capture_output=True)
    check(p.returncode != 0, "rht with 16 x 16 tiles refused")
    np.zeros((17, 32), F32).tofile(f"{tmp}/x")
    p = subprocess.run([tool, "fake", "f32", "col", "17", "32", "0", "0", "1", "0", f"{tmp}/x",
                        f"{tmp}/o"], capture_output=True)
    check(p.returncode != 0, "rht down 17 rows refused")
    print(f"fake-quantized values compared: {n_vals}")


def main():
    rng = np.random.default_rng(17)
    with tempfile.TemporaryDirectory() as tmp:
        check_rbits(tmp)
        check_encode_sr(tmp, rng)
        check_hadamard(tmp, rng)
        check_fake(tmp, rng)
    print(f"{checks} checks, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
