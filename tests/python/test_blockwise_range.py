"""LogTensorStats' max_blockwise_dynamic_range (docs/statistics.md, "Blockwise dynamic range"),
configured as TransformerEngine's configs write it, read back from the file log and compared with
a reference written here with numpy after TransformerEngine's definition: the tensor flattened to
2-D, blocks made by reshapes (and a transpose for the column-wise orientation that the activation
and the weight add), log2(amax) - log2(min nonzero) per block, the largest over the blocks. For
shapes TransformerEngine refuses (blocks that do not divide the tensor), the reference pads with
zeros, which changes no block's amax or nonzero minimum: dlinspect's partial blocks. f32, f16,
bf16 and FP8 codes (ml_dtypes), strided views, NaN and infinities, microbatches, the weight counted
once, and a refused first weight call that leaves the step's weight to the next one."""
import math
import os
import re
import sys
import tempfile
import traceback

import ml_dtypes
import numpy as np

import dlinspect

FILE_LINE = re.compile(r"^\S+ \S+ - INFO - (\S+) \t\t\t\t iteration=(\d+) \t\t\t\t value=(\S+)$")
BLOCKS = [(4, 1), (4, 2), (1, 1), (32, 1), (32, 2), (128, 1), (7, 2)]
CONFIG = """
log:
  layers:
    layer_name_regex_pattern: .*
  enabled:
    True
  transformer_engine:
    LogTensorStats:
      enabled: True
      stats:
        - dynamic_range
%s
      tensors: [activation, gradient, weight]
      freq: 1
""" % "\n".join("        - max_blockwise_dynamic_range:\n            block_size: %d\n"
                "            dims: %d" % b for b in BLOCKS)


def one_orientation(x2, block_size, dims):
    """TransformerEngine's per-orientation computation on a 2-D float64 array, zero-padded where
    the blocks do not divide it."""
    a = np.abs(x2.astype(np.float64))
    if dims == 1:
        flat = a.reshape(-1)
        flat = np.concatenate([flat, np.zeros(-len(flat) % block_size)])
        blocks = flat.reshape(-1, block_size)
    else:
        rows, cols = a.shape
        a = np.pad(a, ((0, -rows % block_size), (0, -cols % block_size)))
        rows, cols = a.shape
        blocks = (a.reshape(rows // block_size, block_size, cols // block_size, block_size)
                  .transpose(0, 2, 1, 3).reshape(-1, block_size * block_size))
    with np.errstate(all="ignore"):
        amax = blocks.max(axis=1)
        amin = np.where(blocks == 0, np.inf, blocks).min(axis=1)
        dr = np.where(amax != 0, np.log2(amax) - np.log2(amin), 0.0)
    return dr.max()


def reference(x, tensor, block_size, dims):
    x2 = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, 1)
    v = one_orientation(x2, block_size, dims)
    if tensor in ("activation", "weight"):
        w = one_orientation(np.ascontiguousarray(x2.T), block_size, dims)
        v = math.nan if math.isnan(v) or math.isnan(w) else max(v, w)
    return v


def name(layer, tensor, block_size, dims):
    suffix = "_max_over_orientations" if tensor in ("activation", "weight") else ""
    return f"{layer}_{tensor}_max_blockwise_dynamic_range_block_size_{block_size}_dims_{dims}{suffix}"


def read_log(d):
    out = {}
    path = os.path.join(d, "nvdlfw_inspect_statistics_logs", "nvdlfw_inspect_globalrank-0.log")
    with open(path) as f:
        for line in f:
            m = FILE_LINE.match(line.rstrip("\n"))
            assert m, f"unparsed log line {line!r}"
            out[(m.group(1), int(m.group(2)))] = float(m.group(3))
    return out


def agree(got, want):
    if math.isnan(want) or math.isinf(want):
        return (math.isnan(got) and math.isnan(want)) or got == want
    # The value travels as a float32 (TransformerEngine computes it in float32 too).
    return abs(got - want) <= 1e-6 * max(1.0, abs(want))


def values(rng, shape, kind):
    x = (rng.standard_normal(shape) * np.exp(rng.uniform(-20, 20, shape))).astype(np.float32)
    x[rng.random(shape) < 0.2] = 0
    if kind == "zeros":
        x[...] = 0
    elif kind == "nan" and x.size:
        x.reshape(-1)[rng.integers(x.size)] = np.nan
    elif kind == "inf" and x.size:
        x.reshape(-1)[rng.integers(x.size)] = -np.inf
    elif kind == "allinf" and x.size:
        x[...] = np.inf
    elif kind == "sparse":
        x[rng.random(shape) < 0.9] = 0
    return x


def run():
    rng = np.random.default_rng(20261125)
    d = tempfile.mkdtemp(prefix="dli-bdr-")
    dlinspect.initialize(config=CONFIG, log_dir=d)
    expected = {}  # (log name, iteration) -> value
    checked_specials = set()
    try:
        # TransformerEngine's own numbers: a 1024 x 1024 tensor of 1e-10 with one row of 1000 and
        # three rows of 50 (its test_log_stats_numerics): rows are uniform, columns and tiles
        # mix 1000 and 50 in blocks of 4.
        te = np.full((1024, 1024), 1e-10, np.float32)
        te[0, :] = 1000
        te[1:4, :] = 50
        for tensor in ("activation", "weight", "gradient"):
            dlinspect.inspect_tensor("te", tensor, te)
        dlinspect.step()
        got = read_log(d)
        mixed = math.log2(1000) - math.log2(50)
        for tensor in ("activation", "weight", "gradient"):
            both = tensor != "gradient"
            for (b, dims), want in (((4, 1), mixed if both else 0.0), ((4, 2), mixed)):
                v = got[(name("te", tensor, b, dims), 0)]
                assert abs(v - want) < 1e-4, (tensor, b, dims, v, want)
            v = got[(f"te_{tensor}_dynamic_range", 0)]
            assert abs(v - (math.log2(1000) - math.log2(np.float32(1e-10)))) < 1e-4, v

        shapes = [(1,), (7,), (3, 5), (8, 12), (31, 33), (64, 96), (2, 3, 40), (129, 127),
                  (256, 4), (5, 1)]
        kinds = ["plain", "plain", "sparse", "zeros", "nan", "inf", "allinf"]
        dtypes = [np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                  ml_dtypes.float8_e5m2]
        k = 0
        for it in range(1, 6):
            for shape in shapes:
                k += 1
                layer = f"l{k}"
                kind = kinds[k % len(kinds)]
                dtype = dtypes[k % len(dtypes)]
                # Two microbatches; the weight's second is the same tensor, so not added again.
                xs = [values(rng, shape, kind if j == 0 else "plain") for j in range(2)]
                if dtype in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
                    xs = [np.clip(x, -400, 400) for x in xs]  # E4M3 has no infinity
                with np.errstate(over="ignore"):  # f16 overflows to infinities: more to compare
                    xs = [x.astype(dtype) for x in xs]
                if k % 4 == 0 and len(shape) >= 2:  # a column block of a wider tensor
                    wide = np.zeros(shape[:-1] + (shape[-1] + 5,), dtype)
                    wide[..., 2:2 + shape[-1]] = xs[0]
                    xs[0] = wide[..., 2:2 + shape[-1]]
                    assert not xs[0].flags.c_contiguous
                for tensor in ("activation", "weight", "gradient"):
                    for x in xs:
                        dlinspect.inspect_tensor(layer, tensor, x)
                    for b, dims in BLOCKS:
                        refs = [reference(x.astype(np.float32).astype(np.float64), tensor, b, dims)
                                for x in (xs[:1] if tensor == "weight" else xs)]
                        want = math.nan if any(math.isnan(r) for r in refs) else max(refs)
                        expected[(name(layer, tensor, b, dims), it)] = want
                        if math.isnan(want) or math.isinf(want):
                            checked_specials.add("nan" if math.isnan(want) else "inf")
            dlinspect.step()
        # A weight call the statistics refuse (f64) feeds nothing, so the step's next weight call
        # is the one counted.
        good = np.array([[1, 4], [2, 64]], np.float32)
        try:
            dlinspect.inspect_tensor("retry", "weight", good.astype(np.float64))
        except dlinspect.Error as e:
            assert "f64" in str(e) or "dtype" in str(e), str(e)
        else:
            raise AssertionError("an f64 weight was accepted")
        dlinspect.inspect_tensor("retry", "weight", good)
        expected[(name("retry", "weight", 4, 1), 6)] = 6.0
        expected[(name("retry", "weight", 4, 2), 6)] = 6.0
        dlinspect.step()
        # An empty tensor has no blocks: nothing is logged for it.
        dlinspect.inspect_tensor("empty", "activation", np.zeros((0, 32), np.float32))
        dlinspect.step()
    finally:
        dlinspect.end_debug()
    got = read_log(d)
    bad = [(n, it, got.get((n, it)), want) for (n, it), want in expected.items()
           if (n, it) not in got or not agree(got[(n, it)], want)]
    assert not bad, f"{len(bad)} of {len(expected)} differ, e.g. {bad[:5]}"
    assert not any(n.startswith("empty_") for n, _ in got), "an empty tensor logged statistics"
    assert checked_specials == {"nan", "inf"}, checked_specials
    print(f"max_blockwise_dynamic_range: {len(expected)} values agree with the numpy reference")


def refusals():
    """Configs that get a precise error."""
    cases = [
        ("{block_size: 0}", "stats.max_blockwise_dynamic_range.block_size: expected a positive "
         "integer, got 0"),
        ("{dims: 3}", "dims must be 1 or 2, got 3"),
        ("{block_size: 4, dim: 1}", "unknown parameter 'dim' of 'max_blockwise_dynamic_range'"),
        ("{block_size: 4.5}", "expected an integer, got '4.5'"),
        ("[4]", "takes a mapping of parameters"),
    ]
    for given, message in cases:
        config = CONFIG.replace("        - dynamic_range\n",
                                f"        - max_blockwise_dynamic_range: {given}\n")
        try:
            dlinspect.initialize(config=config, log_dir=tempfile.mkdtemp(prefix="dli-bdr-"))
        except dlinspect.ConfigError as e:
            assert message in str(e), (given, str(e))
        else:
            dlinspect.end_debug()
            raise AssertionError(f"{given} was accepted")
    print(f"max_blockwise_dynamic_range: {len(cases)} bad configs refused with their reasons")


if __name__ == "__main__":
    try:
        run()
        refusals()
    except Exception:
        traceback.print_exc()
        sys.exit(1)
