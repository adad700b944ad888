"""torch tensors straight into the C path through DLPack: each statistic equals torch's own
computation (f32, bf16, and FP8 where torch exports it), tensors that require grad, non-contiguous
tensors, wrong dtypes, no reference kept after the call, modify_tensor returning a torch tensor,
and CUDA tensors (skipped without a GPU)."""
import gc
import math
import os
import sys
import tempfile
import traceback
import weakref

import torch

import dlinspect

STATS = ["min", "max", "mean", "std", "var", "l1_norm", "l2_norm", "cur_amax", "dynamic_range",
         "zero%"]


def config(tensors=("activation",)):
    return {"s": {"enabled": True, "layers": {"layer_name_regex_pattern": ".*"},
                  "transformer_engine": {"LogTensorStats": {
                      "enabled": True, "tensors": list(tensors), "stats": STATS, "freq": 1}}}}


def read_stats(log_dir):
    path = os.path.join(log_dir, "nvdlfw_inspect_statistics_logs", "nvdlfw_inspect_globalrank-0.log")
    out = {}
    with open(path) as f:
        for line in f:
            name = line.split(" - INFO - ", 1)[1].split()[0]
            it = int(line.split("iteration=", 1)[1].split()[0])
            out[(name, it)] = float(line.rsplit("value=", 1)[1])
    return out


def torch_reference(t):
    """The statistics as torch computes them, in float64."""
    x = t.detach().to("cpu", torch.float64).flatten()
    a = x.abs()
    nz = a[a != 0]
    return {"min": x.min().item(), "max": x.max().item(), "mean": x.mean().item(),
            "std": x.std().item(), "var": x.var().item(), "l1_norm": a.sum().item(),
            "l2_norm": torch.linalg.vector_norm(x).item(), "cur_amax": a.max().item(),
            "dynamic_range": (torch.log2(a.max()) - torch.log2(nz.min())).item(),
            "zero%": 100.0 * (x == 0).sum().item() / x.numel()}


def check(got, layer, tensor, t, it=0):
    ref = torch_reference(t)
    for s in STATS:
        g, r = got[(f"{layer}_{tensor}_{s}", it)], ref[s]
        assert math.isclose(g, r, rel_tol=2e-6, abs_tol=1e-6), f"{layer} {tensor} {s}: dlinspect {g}, torch {r}"


def sample(shape=(96, 40), dtype=torch.float32, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 2 + 0.25
    x.view(-1)[::5] = 0
    return x.to(device=device, dtype=dtype)


class Run:
    def __init__(self, cfg, **kw):
        self.dir = tempfile.mkdtemp(prefix="dli-torch-")
        self.cfg, self.kw = cfg, kw

    def __enter__(self):
        dlinspect.initialize(config=self.cfg, log_dir=self.dir, **self.kw)
        return self

    def __exit__(self, *e):
        dlinspect.end_debug()


def test_f32_bf16_f16_stats_equal_torch():
    x32, x16, xbf = sample(seed=1), sample(dtype=torch.float16, seed=2), sample(dtype=torch.bfloat16, seed=3)
    with Run(config(("activation", "gradient", "output"))) as r:
        L = dlinspect.layer("model.fc1")
        L.inspect_tensor("activation", x32)
        L.inspect_tensor("gradient", xbf)
        dlinspect.inspect_tensor("model.fc1", "output", x16)
        dlinspect.step()
    got = read_stats(r.dir)
    check(got, "model.fc1", "activation", x32)
    check(got, "model.fc1", "gradient", xbf)
    check(got, "model.fc1", "output", x16)


def test_requires_grad_and_non_contiguous():
    w = torch.nn.Parameter(sample(seed=4))
    x = sample(seed=5)
    with Run(config(("weight", "activation", "gradient"))) as r:
        L = dlinspect.layer("l")
        L.inspect_tensor("weight", w)          # requires grad: read through its detached view
        L.inspect_tensor("activation", x.t())  # transposed: copied to contiguous for the pass
        L.inspect_tensor("gradient", x[:, ::3])
        dlinspect.step()
    got = read_stats(r.dir)
    check(got, "l", "weight", w)
    check(got, "l", "activation", x.t())
    check(got, "l", "gradient", x[:, ::3])


def test_fp8_dtypes_if_torch_exports_them():
    for dt, name in ((torch.float8_e4m3fn, "float8_e4m3fn"), (torch.float8_e5m2, "float8_e5m2")):
        x = sample(seed=6).clamp(-400, 400).to(dt)
        try:
            x.__dlpack__()
        except Exception as e:  # older torch: no DLPack for float8
            print(f"  (torch {torch.__version__} does not export {name} through DLPack: {e})")
            continue
        with Run(config()) as r:
            dlinspect.layer("l").inspect_tensor("activation", x)
            dlinspect.step()
        check(read_stats(r.dir), "l", "activation", x.float())


def test_wrong_dtype_and_no_reference_kept():
    with Run(config()) as r:
        L = dlinspect.layer("l")
        for t, name in ((torch.zeros(3, dtype=torch.complex64), "complex64"),
                        (torch.zeros(3, dtype=torch.bool), "bool"),
                        (torch.zeros(3, dtype=torch.int16), "int16")):
            try:
                L.inspect_tensor("activation", t)
            except TypeError as e:
                assert name in str(e), str(e)
            else:
                raise AssertionError(f"{t.dtype} accepted")
        x = sample(seed=7)
        ref = torch_reference(x)
        alive = weakref.ref(x)
        before = sys.getrefcount(x)
        L.inspect_tensor("activation", x)
        assert sys.getrefcount(x) == before
        del x
        gc.collect()
        assert alive() is None, "the tensor outlived the call"
        dlinspect.step()
    got = read_stats(r.dir)
    assert math.isclose(got[("l_activation_std", 0)], ref["std"], rel_tol=2e-6)


def test_modify_tensor_returns_torch():
    cfg = {"fq": {"enabled": True, "layers": {"layer_name_regex_pattern": ".*"},
                  "transformer_engine": {"FakeQuant": {"enabled": True, "gemms": ["fprop"],
                                                       "tensors": ["activation"],
                                                       "quant_format": "FP8E4M3"}}}}
    x = sample(seed=8)
    with Run(cfg):
        y = dlinspect.layer("l").modify_tensor("fprop", "activation", x)
    assert isinstance(y, torch.Tensor) and y.dtype == x.dtype and y.shape == x.shape
    scale = 448.0 / x.abs().max()
    ref = (x * scale).to(torch.float8_e4m3fn).float() * (1.0 / scale)
    assert torch.equal(y, ref), (y - ref).abs().max()
    # TransformerEngine's call, with the dtype its GEMM wants: the result comes in that dtype.
    with Run(cfg):
        z = dlinspect.transformer_engine.modify_tensor(
            layer_name="l", gemm="fprop", tensor_name="activation", tensor=x,
            default_quantizer=None, iteration=0, dtype=torch.bfloat16)
        assert z.dtype == torch.bfloat16 and torch.equal(z, ref.to(torch.bfloat16)), z.dtype


def test_cuda():
    if not torch.cuda.is_available():
        print("  (no CUDA device: the CUDA case is skipped)")
        return
    x = sample(seed=9, device="cuda")
    s = torch.cuda.Stream()
    with Run(config()) as r:
        with torch.cuda.stream(s):
            y = x * 1  # produced on s: dlinspect orders its pass after it on s
            dlinspect.layer("l").inspect_tensor("activation", y)
        torch.cuda.synchronize()
        dlinspect.step()
    check(read_stats(r.dir), "l", "activation", y)


def main():
    tests = [(k, v) for k, v in globals().items() if k.startswith("test_")]
    failed = 0
    for name, fn in tests:
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
