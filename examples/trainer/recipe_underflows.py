#!/usr/bin/env python3
"""How many values of a dumped activation each FP8 recipe's casts turn into 0 (README, "Which
recipes the corrupted batch hurts"): for a tensor that DumpTensors wrote (high precision), the
underflows% of per-tensor current scaling, of MXFP8's row-wise (1 x 32) and column-wise (32 x 1)
copies and of FP8 block scaling's 1 x 128, 128 x 1 and 128 x 128 copies, E4M3 elements; and of
NVFP4's 1 x 16 and 16 x 1 copies (E2M1 elements; the wgrad copy without the Hadamard transform,
after which a zero no longer stands for one value of the tensor).

Written with numpy and ml_dtypes from the recipes' rules (docs/block-scaling.md), apart from
dlinspect's codec, so its MXFP8 and 128 x 128 figures also cross-check LogFp8TensorStats's
mxfp8_underflows% and fp8_block_scaling_underflows% on the same tensor.

usage: recipe_underflows.py FILE.safetensors [TENSOR]   (TENSOR default: activation.high_precision)
"""
import sys

import ml_dtypes
import numpy as np
from safetensors.numpy import load_file

FP8_MAX = np.float32(448.0)


def cast_e4m3(v):
    """Round to nearest even with saturation to +-448, as the recipes cast."""
    return np.clip(v, -FP8_MAX, FP8_MAX).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)


def pow2_floor(v):
    m, e = np.frexp(v)  # v = m * 2^e, m in [0.5, 1)
    return np.ldexp(np.float32(1.0), e - 1).astype(np.float32)


def scale_of(block, recipe):
    """The factor that multiplies a block's elements."""
    amax = np.float32(np.max(np.abs(block))) if block.size else np.float32(0)
    if recipe == "mxfp8":
        # E8M0: the power of two at or above amax * float(1 / 448).
        v = np.float32(amax * np.float32(1.0 / 448.0))
        if v == 0:
            return np.float32(2.0**127)
        m, e = np.frexp(v)
        e = e - 1 if m == 0.5 else e
        return np.float32(2.0 ** (-int(e)))
    if amax == 0 or not np.isfinite(amax):
        return np.float32(1.0)
    s = np.float32(FP8_MAX / amax)
    return pow2_floor(s) if recipe == "block" else s


def nvfp4_underflows(x, br, bc):
    """NVFP4 (docs/block-scaling.md, rules 1-5): an fp32 tensor scale 2688 / amax, E4M3 block
    scales, E2M1 elements rounded to nearest even with saturation to +-6."""
    f32 = np.float32
    amax = f32(np.max(np.where(np.isnan(x), 0, np.abs(x))))
    with np.errstate(divide="ignore"):
        s_enc = f32(2688.0) / amax
    s_enc = min(s_enc, f32(np.finfo(f32).max))
    if amax == 0 or s_enc == 0:
        s_enc = f32(1.0)
    s_dec = f32(1.0 / np.float64(s_enc))
    rows, cols = x.shape
    zero = 0
    for r0 in range(0, rows, br):
        for c0 in range(0, cols, bc):
            b = x[r0:r0 + br, c0:c0 + bc]
            bmax = f32(np.max(np.where(np.isnan(b), 0, np.abs(b))))
            sc = np.minimum(f32(bmax * f32(s_enc * f32(1.0 / 6.0))), f32(448))
            sc = f32(sc.astype(ml_dtypes.float8_e4m3fn).astype(f32))
            with np.errstate(divide="ignore"):
                enc = f32(1.0) / f32(sc * s_dec)
            enc = min(enc, f32(np.finfo(f32).max))
            q = np.clip((b * enc).astype(f32), -6, 6).astype(ml_dtypes.float4_e2m1fn)
            q = q.astype(f32)
            zero += int(np.count_nonzero((q == 0) & (b != 0) & np.isfinite(b)))
    return 100.0 * zero / x.size


def underflows(x, br, bc, recipe):
    rows, cols = x.shape
    zero = 0
    for r0 in range(0, rows, br):
        for c0 in range(0, cols, bc):
            b = x[r0:r0 + br, c0:c0 + bc]
            q = cast_e4m3((b * scale_of(b, recipe)).astype(np.float32))
            zero += int(np.count_nonzero((q == 0) & (b != 0) & np.isfinite(b)))
    return 100.0 * zero / x.size


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    name = sys.argv[2] if len(sys.argv) == 3 else "activation.high_precision"
    x = load_file(sys.argv[1])[name].astype(np.float32)
    x = x.reshape(-1, x.shape[-1])
    rows, cols = x.shape
    print(f"{name}: {rows} x {cols}, amax {np.max(np.abs(x)):g}")
    for label, br, bc, recipe in [
        ("current scaling (one scale per tensor)", rows, cols, "current"),
        ("mxfp8, row-wise 1 x 32 (fprop)", 1, 32, "mxfp8"),
        ("mxfp8, column-wise 32 x 1 (wgrad)", 32, 1, "mxfp8"),
        ("block, row-wise 1 x 128 (fprop)", 1, 128, "block"),
        ("block, column-wise 128 x 1 (wgrad)", 128, 1, "block"),
        ("block, 128 x 128 (weights; the stats' what-if)", 128, 128, "block"),
    ]:
        print(f"  {label:48s} underflows% {underflows(x, br, bc, recipe):.6g}")
    for label, br, bc in [
        ("nvfp4, row-wise 1 x 16 (fprop)", 1, 16),
        ("nvfp4, column-wise 16 x 1 (wgrad, no transform)", 16, 1),
    ]:
        print(f"  {label:48s} underflows% {nvfp4_underflows(x, br, bc):.6g}")


if __name__ == "__main__":
    main()
