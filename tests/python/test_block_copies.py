"""inspect_tensor with a block-scaled host's own copies (ABI 1.4, dli_inspect_tensor_block;
docs/python.md, "Block-scaled copies"): MXFP8, FP8 block scaling (1-D and 2-D) and NVFP4 (1-D and
2-D) copies, row-wise and column-wise, built here in TransformerEngine's layout with scales and codes
its quantizer would not choose, passed as dicts and as objects with TransformerEngine's attribute
names; LogFp8TensorStats and LogNvfp4TensorStats read back from the loggers and compared with a
reference computed here from the copies' decoded values (docs/block-scaling.md). The formats are
decoded by ml_dtypes in the tests' shared venv, by torch's dtypes in the torch venv (where the
copies are torch tensors), never by dlinspect. Also the errors of wrong shapes, dtypes, recipes and
device memory."""
import ctypes
import math
import os
import re
import sys
import tempfile
import traceback
import warnings

import numpy as np

import dlinspect

try:
    import torch
except ImportError:
    torch = None

# ---- The formats' values, by an independent decoder ----

if torch is not None:
    def _decode_table(dtype):
        return torch.arange(256, dtype=torch.uint8).view(dtype).to(torch.float64).numpy()

    E4M3 = _decode_table(torch.float8_e4m3fn)
    E5M2 = _decode_table(torch.float8_e5m2)
    E8M0 = _decode_table(torch.float8_e8m0fnu)
    # torch has E2M1 only packed (float4_e2m1fn_x2), without a conversion: its 16 values from the
    # OCP MX specification.
    E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
else:
    import ml_dtypes

    def _decode_table(dtype, n=256):
        return np.arange(n, dtype=np.uint8).view(dtype).astype(np.float64)

    E4M3 = _decode_table(ml_dtypes.float8_e4m3fn)
    E5M2 = _decode_table(ml_dtypes.float8_e5m2)
    E8M0 = _decode_table(ml_dtypes.float8_e8m0fnu)
    E2M1 = _decode_table(ml_dtypes.float4_e2m1fn, 16)



def cast_rne(v, fmt):
    """v (float32) to FP8 codes by round-to-nearest-even with saturation, by the decoder's own
    cast."""
    v = np.clip(v, -FORMATS[fmt][1], FORMATS[fmt][1]).astype(np.float32)
    if torch is not None:
        dtype = torch.float8_e4m3fn if fmt == "float8_e4m3fn" else torch.float8_e5m2
        return torch.from_numpy(v).to(dtype).view(torch.uint8).numpy()
    return v.astype(getattr(ml_dtypes, fmt)).view(np.uint8)


FORMATS = {"float8_e4m3fn": (E4M3, 448.0), "float8_e5m2": (E5M2, 57344.0)}
BLOCK = {"mxfp8": (1, 32), "fp8_block_1d": (1, 128), "fp8_block_2d": (128, 128),
         "nvfp4": (1, 16), "nvfp4_2d": (16, 16)}
PREFIX = {"mxfp8": "mxfp8_", "fp8_block_1d": "fp8_block_scaling_",
          "fp8_block_2d": "fp8_block_scaling_"}
FP8_STATS = ["underflows%", "overflows%", "scale_inv_min", "scale_inv_max", "mse", "cos_sim",
             "sqnr_db"]
TENSOR_FP8_STATS = (FP8_STATS + [p + s for p in ("mxfp8_", "fp8_block_scaling_") for s in FP8_STATS]
                    + [p + s + "_columnwise" for p in ("mxfp8_", "fp8_block_scaling_")
                       for s in FP8_STATS])
HERE = os.path.dirname(os.path.abspath(dlinspect.__file__))
EXACT_DIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "mpi")
CONFIG = {
    "loggers": {"file": {}, "exact": {}},
    "block": {"enabled": True, "layers": {"layer_name_regex_pattern": ".*"},
              "transformer_engine": {
                  "LogFp8TensorStats": {"enabled": True, "tensors": ["activation"],
                                        "stats": TENSOR_FP8_STATS, "freq": 1},
                  "LogNvfp4TensorStats": {"enabled": True, "tensors": ["activation"],
                                          "stats": ["underflows%", "mse"], "freq": 1}}},
}
FILE_LINE = re.compile(r"^\S+ \S+ - INFO - (\S+) \t\t\t\t iteration=(\d+) \t\t\t\t value=(\S+)$")


def rup(a, m):
    return -(-a // m) * m


def cdiv(a, m):
    return -(-a // m)


# ---- Copies: logical codes and block scales, then TransformerEngine's layout ----

class Copy:
    """One copy as the statistics see it: codes[i, j] (FP8 bytes or E2M1 nibbles) of the rows x
    cols matrix, scales[bi, bj] (E8M0 bytes, fp32 values or E4M3 bytes), NVFP4's amax."""

    def __init__(self, recipe, columnwise, fmt, codes, scales, amax=None):
        self.recipe, self.columnwise, self.fmt = recipe, columnwise, fmt
        self.codes, self.scales, self.amax = codes, scales, amax

    def block(self):
        bh, bw = BLOCK[self.recipe]
        return (bw, bh) if self.columnwise and self.recipe in ("mxfp8", "fp8_block_1d", "nvfp4") \
            else (bh, bw)

    def factors(self):
        """Each block's dequantization factor, in float64 (exact: a float32 or a power of two)."""
        if self.recipe == "mxfp8":
            return E8M0[self.scales]
        if self.recipe.startswith("fp8_block"):
            return self.scales.astype(np.float64)
        f32 = np.float32
        s = E4M3[self.scales].astype(f32)
        return ((s * f32(self.amax)).astype(f32) * f32(1.0 / 2688.0)).astype(f32).astype(np.float64)

    def elementwise(self, a):
        bh, bw = self.block()
        rows, cols = self.codes.shape
        return a[np.arange(rows)[:, None] // bh, np.arange(cols)[None, :] // bw]

    def layout(self, lead_shape):
        """data, scale_inv in TransformerEngine's layout (get_scale_shape, get_columnwise_shape),
        with the scales' padding full of values the statistics must not read."""
        rows, cols = self.codes.shape
        r, cw, q, s = self.recipe, self.columnwise, self.codes, self.scales
        rng = np.random.default_rng(rows * 1000 + cols)
        nvfp4 = r.startswith("nvfp4")
        if nvfp4:
            m = q.T if cw else q
            if m.shape[1] % 2:
                m = np.concatenate([m, np.zeros((m.shape[0], 1), np.uint8)], axis=1)
            data = (m[:, 0::2] | (m[:, 1::2] << 4)).astype(np.uint8)
            if not cw:
                data = data.reshape(tuple(lead_shape) + (data.shape[1],))
        elif cw and r.startswith("fp8_block"):
            data = np.ascontiguousarray(q.T).reshape((cols,) + tuple(lead_shape))
        else:
            data = q.reshape(tuple(lead_shape) + (cols,))
        nbr, nbc = s.shape
        if r == "mxfp8":
            shape = (rup(nbr, 4), rup(cols, 128)) if cw else (rup(rows, 128), rup(nbc, 4))
            place = s
        elif r == "fp8_block_1d":
            shape = (nbr, rup(cols, 4)) if cw else (nbc, rup(rows, 4))
            place = s if cw else s.T
        elif r == "fp8_block_2d":
            shape = (nbc, rup(nbr, 4)) if cw else (nbr, rup(nbc, 4))
            place = s.T if cw else s
        else:
            outer, n_inner = (cols, nbr) if cw else (rows, nbc)
            shape = (rup(outer, 128), rup(n_inner, 4))
            if r == "nvfp4":
                place = s.T if cw else s
            else:  # a 16 x 16 tile's scale on each of its 16 rows
                place = s.T[np.arange(cols) // 16] if cw else s[np.arange(rows) // 16]
        if r.startswith("fp8_block"):
            scale = rng.uniform(1e-30, 1e30, shape).astype(np.float32)
            scale.ravel()[::5] = np.nan
        else:
            scale = rng.integers(0, 256, shape, dtype=np.uint8)
        scale[:place.shape[0], :place.shape[1]] = place
        return data, scale


def encode(v, table, toward_zero):
    """The code of each value v (float64) in a format given by its decode table (sign bit on top):
    the nearest, or the largest magnitude not above |v| (another rounding than TransformerEngine's),
    saturating at the largest finite value."""
    sign = len(table) // 2
    positive = table[:sign]
    codes = np.nonzero(np.isfinite(positive))[0]  # increasing values
    vals = positive[codes]
    mag = np.abs(v).reshape(-1)
    below = np.clip(np.searchsorted(vals, mag, side="right") - 1, 0, len(vals) - 1)
    if toward_zero:
        idx = below
    else:  # the nearer neighbour, ties to the smaller magnitude
        above = np.minimum(below + 1, len(vals) - 1)
        idx = np.where(np.abs(vals[above] - mag) < np.abs(mag - vals[below]), above, below)
    c = codes[idx].reshape(v.shape)
    return np.where(np.signbit(v), c | sign, c).astype(np.uint8)


def hp_values(rng, shape, nonfinite):
    """Magnitudes from 1e-7 to 1e4 within each row, zeros, and NaN / inf when asked."""
    x = rng.standard_normal(shape) * 10.0 ** rng.uniform(-7, 4, shape)
    x[rng.random(shape) < 0.1] = 0
    x = x.astype(np.float32)
    flat = x.reshape(-1)
    if nonfinite and flat.size > 4:
        idx = rng.choice(flat.size, 3, replace=False)
        flat[idx[0]] = np.nan
        if nonfinite == "inf":
            flat[idx[1]] = np.inf
            flat[idx[2]] = -np.inf
    return x


def zero_blocks(rng, n):
    """About 5% of the blocks get a zero scale (left out of scale_inv_min and _max), never the
    first, so that every copy has a scale to report."""
    mask = rng.random(n) < 0.05
    mask[0] = False
    return mask


def make_copy(rng, recipe, columnwise, fmt, x2):
    """A copy of x2 (rows x cols) whose scales are near, but not, what a quantizer would pick
    (random offsets, a zero or a tiny scale here and there) and whose codes come from two
    roundings, with some blocks' codes plain random."""
    tmp = Copy(recipe, columnwise, fmt, np.zeros(x2.shape, np.uint8), None)
    bh, bw = tmp.block()
    rows, cols = x2.shape
    nbr, nbc = cdiv(rows, bh), cdiv(cols, bw)
    xf = np.where(np.isfinite(x2), x2, 0).astype(np.float64)
    bmax = np.zeros((nbr, nbc))
    np.maximum.at(bmax, (np.arange(rows)[:, None] // bh, np.arange(cols)[None, :] // bw), np.abs(xf))
    amax = None
    if recipe == "mxfp8":
        fmax = FORMATS[fmt][1]
        e = np.floor(np.log2(np.maximum(bmax, 1e-30) / fmax)) + 127
        scales = np.clip(e + rng.integers(-2, 3, e.shape), 1, 254).astype(np.uint8)
        scales.ravel()[zero_blocks(rng, scales.size)] = 0
    elif recipe.startswith("fp8_block"):
        fmax = FORMATS[fmt][1]
        scales = (bmax / fmax * rng.uniform(0.3, 3.0, bmax.shape)).astype(np.float32)
        scales.ravel()[zero_blocks(rng, scales.size)] = 0
    else:
        amax = np.float32(np.abs(xf).max() * rng.uniform(0.5, 2.0))
        ideal = bmax / 6.0 / (float(amax) / 2688.0)
        scales = encode(ideal * rng.uniform(0.5, 2.0, ideal.shape), E4M3, False)
        scales = np.where((scales & 0x7f) == 0x7f, 0x7e, scales & 0x7f).astype(np.uint8)
        scales.ravel()[zero_blocks(rng, scales.size)] = 0
    c = Copy(recipe, columnwise, fmt, tmp.codes, scales, amax)
    f = c.elementwise(c.factors())
    table = E2M1 if recipe.startswith("nvfp4") else FORMATS[fmt][0]
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.where(f > 0, xf / f, 0.0)
    codes = np.where(rng.random(x2.shape) < 0.5, encode(scaled, table, False),
                     encode(scaled, table, True))
    random_blocks = c.elementwise(rng.random((nbr, nbc)) < 0.1)
    finite_codes = np.nonzero(np.isfinite(table))[0]
    codes = np.where(random_blocks, rng.choice(finite_codes, x2.shape), codes)
    c.codes = codes.astype(np.uint8)
    return c


# ---- The reference (docs/block-scaling.md, "The host's own tensor"; docs/features.md) ----

def reference(x2, c):
    x = x2.astype(np.float64)
    n = x.size
    finite = np.isfinite(x)
    n_nan, n_inf = int(np.isnan(x).sum()), int(np.isinf(x).sum())
    f = c.factors()
    fe = c.elementwise(f)
    nvfp4 = c.recipe.startswith("nvfp4")
    if nvfp4:
        dq = (E2M1[c.codes] * fe).astype(np.float32).astype(np.float64)
        zero_code = (c.codes & 7) == 0
        limit = 6.0 * fe
    else:
        table, fmax = FORMATS[c.fmt]
        dq = (table[c.codes] * fe).astype(np.float32).astype(np.float64)
        zero_code = (c.codes & 0x7f) == 0
        limit = fmax * fe
    xf, dqf = x[finite], dq[finite]
    under = int(((xf != 0) & zero_code[finite]).sum())
    over = int((np.abs(xf) > limit[finite]).sum())
    err_sq = float(((xf - dqf) ** 2).sum())
    dot, x_sq, dq_sq = float((xf * dqf).sum()), float((xf * xf).sum()), float((dqf * dqf).sum())
    if c.recipe == "mxfp8":
        keep = (c.scales != 0) & (c.scales != 255)
    elif nvfp4:
        keep = (c.scales & 0x7f) != 0
    else:
        keep = ~np.isnan(f)
    kept = f[keep]
    nonzero = kept[kept != 0] if not nvfp4 and c.recipe != "mxfp8" else kept
    return {
        "underflows%": 100.0 * under / n,
        "overflows%": 100.0 * (over + n_inf) / n,
        "scale_inv_min": float(nonzero.min()),
        "scale_inv_max": float(kept.max()),
        "mse": math.inf if n_inf else err_sq / (n - n_nan),
        "cos_sim": math.nan if n_inf else dot / math.sqrt(x_sq * dq_sq),
        "sqnr_db": math.nan if n_inf else 10.0 * math.log10(x_sq / err_sq),
        "_counts": (under, over, n),
    }


# ---- The host's forms ----

def holder(a):
    """The copies' arrays as the host holds them: torch tensors where torch is, numpy otherwise."""
    return torch.from_numpy(np.ascontiguousarray(a)) if torch is not None else a


class TEMXFP8Tensor:
    """The attributes of TransformerEngine's MXFP8Tensor that dlinspect reads."""

    def __init__(self, row, col, fp8_dtype):
        self._rowwise_data, self._rowwise_scale_inv = row if row else (None, None)
        self._columnwise_data, self._columnwise_scale_inv = col if col else (None, None)
        self._fp8_dtype = fp8_dtype
        self._with_gemm_swizzled_scales = False


class TEFloat8BlockwiseQTensor(TEMXFP8Tensor):
    """Float8BlockwiseQTensor: MXFP8Tensor's names, _is_2D_scaled, no swizzle flag."""

    def __init__(self, row, col, fp8_dtype, is_2d):
        super().__init__(row, col, fp8_dtype)
        del self._with_gemm_swizzled_scales
        self._is_2D_scaled = is_2d


class NVFP4Quantizer:
    def __init__(self, with_2d_quantization):
        self.with_2d_quantization = with_2d_quantization


class TENVFP4Tensor:
    """NVFP4Tensor's attributes; 2-D tiles are its quantizer's with_2d_quantization."""

    def __init__(self, row, col, two_d):
        self._rowwise_data, self._rowwise_scale_inv, self._amax_rowwise = row if row else (None,) * 3
        self._columnwise_data, self._columnwise_scale_inv, self._amax_columnwise = \
            col if col else (None,) * 3
        self._fp4_dtype = "DType.kFloat4E2M1"
        self._quantizer = NVFP4Quantizer(two_d)
        self._with_gemm_swizzled_scales = False
        self._row_scaled_nvfp4 = False
        self._nvfp4_use_4over6 = False
        self._nvfp4_e4m3_max = 448


def as_dict(c, lead_shape):
    data, scale = c.layout(lead_shape)
    d = {"recipe": c.recipe, "data": holder(data), "scale_inv": holder(scale),
         "columnwise": c.columnwise}
    if c.recipe.startswith("nvfp4"):
        d["amax"] = holder(np.array([c.amax], np.float32))
    else:
        d["format"] = c.fmt
    return d


def as_te(row, col, lead_shape):
    """One TransformerEngine-like object holding both copies (either may be None)."""
    c = row or col
    parts = [None, None]
    for k, cp in enumerate((row, col)):
        if cp is None:
            continue
        data, scale = cp.layout(lead_shape)
        parts[k] = (holder(data), holder(scale))
        if c.recipe.startswith("nvfp4"):
            parts[k] += (holder(np.array([cp.amax], np.float32)),)
    if c.recipe.startswith("nvfp4"):
        return TENVFP4Tensor(parts[0], parts[1], c.recipe == "nvfp4_2d")
    dtype = "DType.kFloat8E4M3" if c.fmt == "float8_e4m3fn" else "DType.kFloat8E5M2"
    if c.recipe == "mxfp8":
        return TEMXFP8Tensor(parts[0], parts[1], dtype)
    return TEFloat8BlockwiseQTensor(parts[0], parts[1], dtype, c.recipe == "fp8_block_2d")


# ---- Reading the logs ----

def read_exact(d):
    out = {}
    with open(os.path.join(d, "exact-rank0.txt")) as f:
        for line in f:
            if line.startswith("S "):
                _, name, it, v = line.rstrip("\n").split(" ")
                out[(name, int(it))] = float.fromhex(v)
    return out


def read_messages(d):
    with open(os.path.join(d, "exact-rank0.txt")) as f:
        return [line[2:] for line in f if line.startswith("M ")]


def read_file_log(d):
    out = {}
    with open(os.path.join(d, "nvdlfw_inspect_statistics_logs",
                           "nvdlfw_inspect_globalrank-0.log")) as f:
        for line in f:
            m = FILE_LINE.match(line.rstrip("\n"))
            assert m, f"unexpected statistics line {line!r}"
            out[(m.group(1), int(m.group(2)))] = float(m.group(3))
    return out


def close(got, want, rel):
    if math.isnan(want):
        return math.isnan(got)
    if math.isinf(want):
        return got == want
    return math.isclose(got, want, rel_tol=rel, abs_tol=1e-300)


class Checker:
    def __init__(self):
        self.failures = []
        self.checked = 0

    def absent(self, exact, name, what):
        self.checked += 1
        if (name, 0) in exact:
            self.failures.append(f"{what}: {name} = {exact[(name, 0)]!r} logged")

    def stat(self, exact, file_log, name, want, what, sums_rel=1e-9):
        self.checked += 1
        key = (name, 0)
        if key not in exact:
            self.failures.append(f"{what}: {name} not logged")
            return
        # Counts are exact in the percentages (one division); sums to 1e-9 relative; the file log
        # prints 9 significant digits.
        rel = sums_rel if any(t in name for t in ("_mse", "_cos_sim", "_sqnr_db")) else 1e-9
        if not close(exact[key], want, rel):
            self.failures.append(f"{what}: {name} = {exact[key]!r}, reference {want!r}")
        if key not in file_log or not close(file_log[key], want, max(rel, 1e-8)):
            self.failures.append(f"{what}: {name} in the file log = {file_log.get(key)!r}, "
                                 f"reference {want!r}")


# The last is over 1 MiB: inspect_tensor releases the GIL for it.
SHAPES = [(1, 129), (31, 33), (33, 127), (129, 31), (127, 1), (130, 257), (3, 11, 40), (520, 600)]
RECIPES = ["mxfp8", "fp8_block_1d", "fp8_block_2d", "nvfp4", "nvfp4_2d"]


def test_stats_from_the_hosts_copies():
    """Every recipe, both copies, shapes that are and are not multiples of the blocks, as dicts
    and as TransformerEngine-like objects: the logged statistics are the copies' own."""
    rng = np.random.default_rng(20261124)
    d = tempfile.mkdtemp(prefix="dli-block-")
    dlinspect.initialize(config=CONFIG, log_dir=d, feature_dirs=[EXACT_DIR])
    expected = []  # (layer, {stat name: (copy, which)})
    k = 0
    try:
        for recipe in RECIPES:
            for shape in SHAPES:
                for form in ("dict", "te"):
                    k += 1
                    fmt = "float8_e4m3fn" if k % 3 else "float8_e5m2"
                    nonfinite = (None, "nan", "inf")[k % 3 if k % 4 == 0 else 0]
                    x = hp_values(rng, shape, nonfinite)
                    if k % 5 == 0:  # a strided hp: a column block of a wider tensor
                        wide = np.zeros(shape[:-1] + (shape[-1] + 7,), np.float32)
                        wide[..., 3:3 + shape[-1]] = x
                        x = wide[..., 3:3 + shape[-1]]
                    x2 = x.reshape(-1, shape[-1])
                    lead = shape[:-1]
                    row = make_copy(rng, recipe, False, fmt, x2)
                    col = make_copy(rng, recipe, True, fmt, x2)
                    hp = torch.from_numpy(x) if torch is not None and k % 2 else x
                    # Both copies; then the column-wise copy alone, which the statistics without
                    # a prefix read when no row-wise copy is passed.
                    for layer, r, c in ((f"b{k}", row, col), (f"c{k}", None, col)):
                        if form == "dict":
                            rq = as_dict(r, lead) if r else None
                            cq = as_dict(c, lead)
                            dlinspect.inspect_tensor(layer, "activation", hp,
                                                     rowwise_quantized_tensor=rq,
                                                     columnwise_quantized_tensor=cq)
                        else:  # TransformerEngine passes the same object twice
                            te = as_te(r, c, lead)
                            dlinspect.transformer_engine.inspect_tensor(
                                layer_name=layer, tensor_name="activation", tensor=hp,
                                iteration=0, rowwise_quantized_tensor=te,
                                columnwise_quantized_tensor=te, tp_group=None, tp_size=1)
                        want = {}
                        first = r or c
                        if recipe in PREFIX:
                            for s in FP8_STATS:
                                want[s] = (first, s)
                        else:
                            # An NVFP4 copy's statistics are LogNvfp4TensorStats'; LogFp8TensorStats
                            # logs none without a prefix and says why once per tensor.
                            for s in FP8_STATS:
                                want[s] = (None, s)
                        if recipe in PREFIX:
                            for s in FP8_STATS:
                                if r:
                                    want[PREFIX[recipe] + s] = (r, s)
                                want[PREFIX[recipe] + s + "_columnwise"] = (c, s)
                        elif r:
                            want["nvfp4_underflows%"] = (r, "underflows%")
                            want["nvfp4_mse"] = (r, "mse")
                        expected.append((layer, x2, want, f"{recipe} {shape} {form} {fmt} "
                                                          f"{nonfinite} {layer}"))
        dlinspect.step()
    finally:
        dlinspect.end_debug()
    exact, file_log = read_exact(d), read_file_log(d)
    warned = [m for m in read_messages(d) if "the host's copy is NVFP4" in m]
    assert len(warned) == 2 * len(SHAPES) * 2 * 2, len(warned)  # once per nvfp4 layer
    ck = Checker()
    refs = {}
    for layer, x2, want, what in expected:
        for name, (cp, s) in want.items():
            if cp is None:
                ck.absent(exact, f"{layer}_activation_{name}", what)
                continue
            if id(cp) not in refs:
                refs[id(cp)] = reference(x2, cp)
            ck.stat(exact, file_log, f"{layer}_activation_{name}", refs[id(cp)][s], what)
    # The references are not degenerate: the copies make underflows and overflows.
    counts = [r["_counts"] for r in refs.values()]
    assert sum(u for u, _, _ in counts) > 100 and sum(o for _, o, _ in counts) > 100, counts
    for f in ck.failures[:40]:
        print("  ", f)
    assert not ck.failures, f"{len(ck.failures)} of {ck.checked} statistics differ"
    print(f"     {ck.checked} statistics of {len(refs)} copies match the reference")


def test_microbatches_with_non_finite_values():
    """Two microbatches of one step, one holding NaN and infinities and one clean, in both orders,
    with the host's copies: the step's statistics are those of all the elements (an infinity is
    an overflow and makes mse inf wherever it came; NaN counts in n), combined here from each
    microbatch's reference counts and sums."""
    rng = np.random.default_rng(20261125)
    d = tempfile.mkdtemp(prefix="dli-block-")
    dlinspect.initialize(config=CONFIG, log_dir=d, feature_dirs=[EXACT_DIR])
    expected = []
    try:
        for recipe in ("mxfp8", "fp8_block_1d", "nvfp4"):
            for order in (("inf", None), (None, "inf"), ("nan", None)):
                layer = f"{recipe}_{order[0] or 'clean'}_{order[1] or 'clean'}"
                parts = []
                for nonfinite in order:
                    x2 = hp_values(rng, (33, 127), nonfinite)
                    c = make_copy(rng, recipe, False, "float8_e4m3fn", x2)
                    dlinspect.inspect_tensor(layer, "activation", x2,
                                             rowwise_quantized_tensor=as_dict(c, (33,)))
                    parts.append((x2, reference(x2, c)))
                n = sum(x.size for x, _ in parts)
                n_inf = sum(int(np.isinf(x).sum()) for x, _ in parts)
                finite_n = sum(x.size - int(np.isnan(x).sum()) for x, _ in parts)
                under = sum(r["_counts"][0] for _, r in parts)
                over = sum(r["_counts"][1] for _, r in parts) + n_inf
                err = sum(r["mse"] * (x.size - int(np.isnan(x).sum())) for x, r in parts
                          if not np.isinf(x).any())
                want = {"underflows%": 100.0 * under / n,
                        "mse": math.inf if n_inf else err / finite_n}
                if recipe != "nvfp4":
                    want["overflows%"] = 100.0 * over / n
                prefix = "nvfp4_" if recipe == "nvfp4" else ""
                expected.append((layer, {prefix + s: w for s, w in want.items()}))
        dlinspect.step()
    finally:
        dlinspect.end_debug()
    exact, file_log = read_exact(d), read_file_log(d)
    ck = Checker()
    for layer, want in expected:
        for s, w in want.items():
            ck.stat(exact, file_log, f"{layer}_activation_{s}", w, layer, sums_rel=1e-9)
    assert not ck.failures, "\n".join(ck.failures)


def test_the_copy_not_a_requantization():
    """Two copies of one tensor that differ only in one block's scale give different statistics:
    the pass reads the scales it is given."""
    rng = np.random.default_rng(3)
    x = hp_values(rng, (4, 64), None)
    a = make_copy(rng, "mxfp8", False, "float8_e4m3fn", x)
    b = Copy("mxfp8", False, "float8_e4m3fn", a.codes, a.scales.copy())
    b.scales[0, 0] = min(254, int(b.scales[0, 0]) + 3) if b.scales[0, 0] else 120
    d = tempfile.mkdtemp(prefix="dli-block-")
    dlinspect.initialize(config=CONFIG, log_dir=d, feature_dirs=[EXACT_DIR])
    try:
        for layer, c in (("a", a), ("b", b)):
            dlinspect.inspect_tensor(layer, "activation", x,
                                     rowwise_quantized_tensor=as_dict(c, (4,)))
        dlinspect.step()
    finally:
        dlinspect.end_debug()
    got = read_exact(d)
    for layer, c in (("a", a), ("b", b)):
        assert close(got[(f"{layer}_activation_mse", 0)], reference(x, c)["mse"], 1e-9), layer
    assert got[("a_activation_mse", 0)] != got[("b_activation_mse", 0)]


def mxfp8_as_transformer_engine_makes_it(x2, columnwise, fmt):
    """The MXFP8 copy TransformerEngine's quantizer makes (docs/block-scaling.md, "The scale of a
    block", "Elements"): E8M0 scales rounded up from float32(amax * float32(1 / fp8_max)), codes
    cast to nearest-even from float32(x * 2^(127 - e))."""
    fmax = FORMATS[fmt][1]
    c = Copy("mxfp8", columnwise, fmt, np.zeros(x2.shape, np.uint8), None)
    bh, bw = c.block()
    rows, cols = x2.shape
    bmax = np.zeros((cdiv(rows, bh), cdiv(cols, bw)), np.float32)
    # NaN left out of the amax, as TransformerEngine's fmaxf does.
    np.fmax.at(bmax, (np.arange(rows)[:, None] // bh, np.arange(cols)[None, :] // bw), np.abs(x2))
    v = (bmax * np.float32(1.0 / fmax)).astype(np.float32)
    bits = v.view(np.uint32)
    e = (bits >> 23) + ((bits & 0x7fffff) != 0)
    c.scales = np.where(v == 0, 0, np.minimum(e, 254)).astype(np.uint8)
    down = c.elementwise(2.0 ** (127.0 - c.scales.astype(np.float64)))
    c.codes = cast_rne((x2.astype(np.float64) * down).astype(np.float32), fmt)
    return c


def test_reference_agrees_with_the_mxfp8_what_if():
    """The reference's formulas on TransformerEngine's own MXFP8 copies equal dlinspect's mxfp8_
    what-ifs, which quantize hp here as TransformerEngine does (tests/block checks them against
    TransformerEngine's rules): the reference reads copies the way the statistics are defined."""
    rng = np.random.default_rng(11)
    d = tempfile.mkdtemp(prefix="dli-block-")
    dlinspect.initialize(config=CONFIG, log_dir=d, feature_dirs=[EXACT_DIR])
    cases = []
    try:
        for k, shape in enumerate([(31, 33), (129, 127), (64, 256), (2, 3, 100)]):
            x = hp_values(rng, shape, "nan" if k == 1 else None)
            x2 = x.reshape(-1, shape[-1])
            # Another recipe's copy, so that the mxfp8_ statistics stay what-ifs.
            other = make_copy(rng, "fp8_block_2d", False, "float8_e4m3fn", x2)
            dlinspect.inspect_tensor(f"w{k}", "activation", x,
                                     rowwise_quantized_tensor=as_dict(other, shape[:-1]))
            cases.append((f"w{k}", x2))
        dlinspect.step()
    finally:
        dlinspect.end_debug()
    got = read_exact(d)
    ck = Checker()
    file_log = read_file_log(d)
    for layer, x2 in cases:
        for columnwise in (False, True):
            ref = reference(x2, mxfp8_as_transformer_engine_makes_it(x2, columnwise,
                                                                     "float8_e4m3fn"))
            for s in FP8_STATS:
                name = f"{layer}_activation_mxfp8_{s}" + ("_columnwise" if columnwise else "")
                # The what-if sums in float lanes within a batch of blocks: within 1e-5 of
                # double sums (docs/block-scaling.md, "Sums").
                ck.stat(got, file_log, name, ref[s], layer, sums_rel=2e-5)
    for f in ck.failures[:20]:
        print("  ", f)
    assert not ck.failures, f"{len(ck.failures)} of {ck.checked} statistics differ"


# ---- Errors ----

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class FakeCudaArray:
    """A uint8 array that says it is in CUDA memory (DLPack device 2), for the device check on a
    machine without CUDA: its memory is never read, since the check refuses it first."""

    def __init__(self, shape):
        self.keep = np.zeros(shape, np.uint8)
        self.shape = (ctypes.c_int64 * len(shape))(*shape)

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None, max_version=None):
        if max_version is not None:
            raise TypeError("a DLPack 0.x producer")
        m = _DLManaged()
        m.dl_tensor.data = self.keep.ctypes.data
        m.dl_tensor.device = _DLDevice(2, 0)
        m.dl_tensor.ndim = len(self.keep.shape)
        m.dl_tensor.code, m.dl_tensor.bits, m.dl_tensor.lanes = 1, 8, 1
        m.dl_tensor.shape = self.shape
        self.managed = m  # alive while the capsule is; no deleter
        new = ctypes.pythonapi.PyCapsule_New
        new.restype = ctypes.py_object
        new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(m), b"dltensor", None)


def expect_error(exc, parts, call):
    try:
        call()
    except exc as e:
        text = str(e)
        missing = [p for p in parts if p not in text]
        assert not missing, f"{text!r} lacks {missing}"
        return
    raise AssertionError(f"no {exc.__name__} for {parts}")


def expect_warning(parts, call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    texts = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert any(all(p in t for p in parts) for t in texts), f"no warning with {parts}: {texts}"


def test_errors_name_what_is_wrong():
    rng = np.random.default_rng(9)
    x = hp_values(rng, (40, 96), None)
    c = make_copy(rng, "mxfp8", False, "float8_e4m3fn", x)
    good = as_dict(c, (40,))
    d = tempfile.mkdtemp(prefix="dli-block-")
    dlinspect.initialize(config=CONFIG, log_dir=d, feature_dirs=[EXACT_DIR])
    try:
        L = dlinspect.layer("l")

        def call(row, col=None):
            return lambda: L.inspect_tensor("activation", x, rowwise=row, columnwise=col)

        expect_error(ValueError, ["rowwise_quantized_tensor's scale_inv has shape (40, 3)",
                                  "mxfp8 row-wise scales for a 40 x 96 tensor", "is (128, 4)"],
                     call(dict(good, scale_inv=holder(np.zeros((40, 3), np.uint8)))))
        expect_error(ValueError, ["columnwise_quantized_tensor's scale_inv has shape (128, 4)",
                                  "column-wise", "is (4, 128)"],
                     call(None, dict(good, columnwise=True)))
        expect_error(ValueError, ["data has shape (40, 95)", "holds 40 x 96 codes"],
                     call(dict(good, data=holder(np.zeros((40, 95), np.uint8)))))
        expect_error(TypeError, ["scale_inv has dtype float32, not uint8 (E8M0"],
                     call(dict(good, scale_inv=holder(np.zeros((128, 4), np.float32)))))
        expect_error(TypeError, ["data has dtype uint8: pass float8_e4m3fn"],
                     call({k: v for k, v in good.items() if k != "format"}))
        expect_error(ValueError, ["recipe must be 'mxfp8', 'fp8_block_1d'", "'mxfp4'"],
                     call(dict(good, recipe="mxfp4")))
        expect_error(ValueError, ["format must be 'float8_e4m3fn' or 'float8_e5m2'"],
                     call(dict(good, format="float16")))
        expect_error(ValueError, ["amax is read for NVFP4 only"], call(dict(good, amax=1.0)))
        expect_error(ValueError, ["data, scale_inv and amax must be in one memory space"],
                     call(dict(good, data=FakeCudaArray((40, 96)))))
        # A copy in device memory reaches the core, which refuses it where a statistic needs it.
        expect_error(dlinspect.Error, ["is in CUDA memory", "host memory only for now"],
                     call(dict(good, data=FakeCudaArray((40, 96)),
                               scale_inv=FakeCudaArray((128, 4)))))
        if torch is not None and torch.cuda.is_available():
            expect_error(dlinspect.Error, ["is in CUDA memory"],
                         call(dict(good, data=good["data"].cuda(),
                                   scale_inv=good["scale_inv"].cuda())))
        expect_error(TypeError, ["both be block-scaled copies"], call(good, (x, 1.0)))
        # Layouts the descriptor cannot describe: a warning, no copy handed over, no error.
        nv = make_copy(rng, "nvfp4", False, None, x)
        te = as_te(nv, None, (40,))
        te._row_scaled_nvfp4 = True
        expect_warning(["row-scaled amax", "not handed to the features"], call(te, te))
        te = as_te(c, None, (40,))
        te._with_gemm_swizzled_scales = True
        expect_warning(["swizzled layout"], call(te, te))
        nvd = as_dict(nv, (40,))
        expect_error(ValueError, ["amax is", "of shape (2,)", "must be one float32"],
                     call(dict(nvd, amax=holder(np.ones(2, np.float32)))))
        expect_error(ValueError, ["format is not read for nvfp4"],
                     call(dict(nvd, format="float8_e4m3fn")))
        # A TransformerEngine tensor without its column-wise copy gives the row-wise one alone.
        L.inspect_tensor("activation", x, rowwise=as_te(c, None, (40,)),
                         columnwise=as_te(c, None, (40,)))
        dlinspect.step()
    finally:
        dlinspect.end_debug()
    got = read_exact(d)
    assert close(got[("l_activation_mse", 0)], reference(x, c)["mse"], 1e-9)
    assert ("l_activation_mxfp8_mse_columnwise", 0) in got  # a what-if from hp


def main():
    tests = [(k, v) for k, v in globals().items() if k.startswith("test_") and callable(v)]
    only = sys.argv[1:]
    failed = 0
    print(f"decoder: {'torch ' + torch.__version__ if torch is not None else 'ml_dtypes'}")
    for name, fn in tests:
        if only and name not in only:
            continue
        try:
            fn()
            print(f"ok   {name}")
        except Exception:
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc()
            dlinspect.end_debug()
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
