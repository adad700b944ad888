"""dlinspect.torch's FP8 emulation (attach(..., fp8=...)) against a reference written here with
torch's own float8 casts: the three GEMMs with current and delayed scaling, DisableFP8GEMM and
DisableFP8Layer keeping GEMMs in fp32 (the outputs of torch's fp32 Linear, bit for bit),
PerTensorScaling and FakeQuant replacing one operand, and LogFp8TensorStats reading the run's own
FP8 codes and scale (underflows%, scale_inv_max)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import Checker, stats, tmpdir  # noqa: E402

import torch  # noqa: E402
import dlinspect  # noqa: E402
import dlinspect.torch as dt  # noqa: E402

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2
F = torch.nn.functional


def scale_of(amax, fmt):
    """fp8_max / amax rounded once to float32; 1 for a zero amax."""
    if amax == 0:
        return 1.0
    return torch.tensor(torch.finfo(fmt).max / amax, dtype=torch.float64).float().item()


def qdq(x, s, fmt):
    fmax = torch.finfo(fmt).max
    codes = torch.clamp(x.float() * s, -fmax, fmax).to(fmt)
    return codes, codes.float() * torch.tensor(s, dtype=torch.float32).reciprocal()


def amax(x):
    return x.abs().max().item()


def section(name, body):
    return f"""
{name}:
  enabled: true
  layers: {{layer_name_regex_pattern: '^model$'}}
  transformer_engine:
{body}"""


NOTHING = section("none", "    LogTensorStats: {enabled: true, tensors: [activation], stats: [max], freq: 1000000, start_step: 999999}")


def steps_data(n):
    g = torch.Generator().manual_seed(3)
    out = []
    for k in range(n):
        mag = [1.0, 1e4, 0.02, 3.0, 3.0][k % 5]  # a spike, then small values under its history
        x = torch.randn(6, 5, generator=g) * mag
        dy = torch.randn(6, 4, generator=g) * [1e-3, 2.0, 1e-5, 1.0, 1.0][k % 5]
        out.append((x, dy))
    return out


def run(config, fp8, n, d=None):
    """n steps of one Linear(5, 4) under attach(fp8=...): [(x, dy, y, dx, dW, db)], the initial
    weight and bias."""
    d = d or tmpdir()
    dlinspect.initialize(config=config, log_dir=d)
    torch.manual_seed(5)
    lin = torch.nn.Linear(5, 4)
    w0, b0 = lin.weight.detach().clone(), lin.bias.detach().clone()
    h = dt.attach(lin, fp8=fp8)
    res = []
    for x, dy in steps_data(n):
        xx = x.clone().requires_grad_()
        y = lin(xx)
        y.backward(dy)
        res.append((x, dy, y.detach(), xx.grad, lin.weight.grad.clone(), lin.bias.grad.clone()))
        lin.zero_grad(set_to_none=True)
        dt.step()
    h.detach()
    dlinspect.end_debug()
    return res, w0, b0, d


def check_gemms(c, tag, res, w, b, scales, hp=(), modified=None):
    """scales[k] = (sx, sw, sg) of step k; hp: GEMMs in fp32; modified: {(gemm, tensor): fn(x)}."""
    modified = modified or {}
    for k, (x, dy, y, dx, dw, db) in enumerate(res):
        sx, sw, sg = scales[k]
        xq = qdq(x, sx, E4)[1]
        wq = qdq(w, sw, E4)[1]
        gq = qdq(dy, sg, E5)[1]
        a_f = modified.get(("fprop", "activation"), lambda t: t if "fprop" in hp else xq)(x)
        w_f = w if "fprop" in hp else wq
        g_d, w_d = (dy, w) if "dgrad" in hp else (gq, wq)
        g_w = dy if "wgrad" in hp else gq
        a_w = modified.get(("wgrad", "activation"), lambda t: t if "wgrad" in hp else xq)(x)
        c.ok(torch.equal(y, F.linear(a_f, w_f, b)), f"{tag}: step {k}: output")
        c.ok(torch.equal(dx, g_d.matmul(w_d)), f"{tag}: step {k}: dgrad")
        c.ok(torch.equal(dw, g_w.t().mm(a_w)), f"{tag}: step {k}: wgrad")
        c.ok(torch.equal(db, dy.sum(0)), f"{tag}: step {k}: bias grad")


def current_scales(res, w):
    return [(scale_of(amax(x), E4), scale_of(amax(w), E4), scale_of(amax(dy), E5)) for x, dy, *_ in res]


def delayed_scales(res, w):
    out, hx, hg = [], 0.0, 0.0
    for x, dy, *_ in res:
        out.append((scale_of(hx, E4) if hx else 1.0, scale_of(amax(w), E4) if out else 1.0,
                    scale_of(hg, E5) if hg else 1.0))
        hx, hg = max(hx, amax(x)), max(hg, amax(dy))
    return out


def main():
    c = Checker()
    n = 5
    # No config acts: every GEMM in FP8, current scaling, then delayed (the weight does not
    # change: no optimizer step).
    res, w, b, _ = run(NOTHING, "current", n)
    check_gemms(c, "current", res, w, b, current_scales(res, w))
    res, w, b, _ = run(NOTHING, "delayed", n)
    check_gemms(c, "delayed", res, w, b, delayed_scales(res, w))
    # A scale that differs from the delayed one (the test would pass a wrong recipe otherwise).
    c.ok(delayed_scales(res, w)[3][0] != current_scales(res, w)[3][0], "delayed and current scales differ at step 3")

    # DisableFP8GEMM on each GEMM alone, and DisableFP8Layer.
    for g in ("fprop", "dgrad", "wgrad"):
        cfg = section("hp", f"    DisableFP8GEMM: {{enabled: true, gemms: [{g}]}}")
        res, w, b, _ = run(cfg, "delayed", n)
        check_gemms(c, f"DisableFP8GEMM {g}", res, w, b, delayed_scales(res, w), hp=(g,))
    cfg = section("hp", "    DisableFP8Layer: {enabled: true}")
    res, w, b, _ = run(cfg, "delayed", n)
    check_gemms(c, "DisableFP8Layer", res, w, b, delayed_scales(res, w), hp=("fprop", "dgrad", "wgrad"))
    # ... and the same outputs as torch's own fp32 Linear with autograd.
    ref = torch.nn.Linear(5, 4)
    with torch.no_grad():
        ref.weight.copy_(w)
        ref.bias.copy_(b)
    for k, (x, dy, y, dx, dw, db) in enumerate(res):
        xx = x.clone().requires_grad_()
        yr = ref(xx)
        yr.backward(dy)
        c.ok(torch.equal(y, yr.detach()), f"DisableFP8Layer: step {k}: output equals torch's fp32 Linear")
        c.ok(torch.allclose(dx, xx.grad, rtol=1e-6, atol=0), f"DisableFP8Layer: step {k}: dgrad equals autograd's")
        c.ok(torch.allclose(dw, ref.weight.grad, rtol=1e-6, atol=0), f"DisableFP8Layer: step {k}: wgrad equals autograd's")
        ref.zero_grad(set_to_none=True)

    # PerTensorScaling on the activation's fprop: that operand with current scaling; the wgrad
    # operand keeps the delayed cast.
    cfg = cfg_pts = section("pts", "    PerTensorScaling: {enabled: true, gemms: [fprop], tensors: [activation]}")
    res, w, b, _ = run(cfg, "delayed", n)
    check_gemms(c, "PerTensorScaling fprop activation", res, w, b, delayed_scales(res, w),
                modified={("fprop", "activation"): lambda x: qdq(x, scale_of(amax(x), E4), E4)[1]})
    # FakeQuant E5M2 on the activation's wgrad: that GEMM in high precision (fp8_gemm_enabled
    # answers false for it) on x rounded to E5M2.
    cfg = section("fq", "    FakeQuant: {enabled: true, gemms: [wgrad], tensors: [activation], quant_format: FP8E5M2}")
    res, w, b, _ = run(cfg, "delayed", n)
    check_gemms(c, "FakeQuant wgrad activation", res, w, b, delayed_scales(res, w), hp=("wgrad",),
                modified={("wgrad", "activation"): lambda x: qdq(x, scale_of(amax(x), E5), E5)[1]})

    # A bf16 model: PerTensorScaling's copy of the activation comes in bf16 (the dtype
    # TransformerEngine's dequantize writes: the float32 values rounded), and the GEMM runs in
    # float32 on it as on the others.
    dlinspect.initialize(config=cfg_pts, log_dir=tmpdir())
    torch.manual_seed(5)
    lin = torch.nn.Linear(5, 4).to(torch.bfloat16)
    h = dt.attach(lin, fp8="current")
    x = steps_data(1)[0][0].to(torch.bfloat16).requires_grad_()
    y = lin(x)
    y.float().sum().backward()
    h.detach()
    dlinspect.end_debug()
    w, b = lin.weight.detach(), lin.bias.detach()
    xq = qdq(x.detach(), scale_of(amax(x), E4), E4)[1].to(torch.bfloat16).float()
    ref = F.linear(xq, qdq(w, scale_of(amax(w), E4), E4)[1], b.float())
    c.ok(y.dtype == torch.bfloat16 and torch.equal(y.detach(), ref.to(torch.bfloat16)),
         "bf16 model: PerTensorScaling's bf16 copy in the float32 GEMM")
    c.ok(x.grad is not None and x.grad.dtype == torch.bfloat16, "bf16 model: backward runs")

    # An evaluation pass (dlinspect.torch.set_mode): PerTensorScaling does not act without
    # in_eval, even within an iteration whose plan the layer already holds.
    dlinspect.initialize(config=cfg_pts, log_dir=tmpdir())
    torch.manual_seed(5)
    lin = torch.nn.Linear(5, 4)
    h = dt.attach(lin, fp8="delayed")  # iteration 0: the delayed scale is 1
    x = steps_data(2)[1][0]
    y_train = lin(x).detach()
    dt.set_mode("eval")
    with torch.no_grad():
        y_eval = lin(x)
    dt.set_mode("train")
    y_again = lin(x).detach()
    h.detach()
    dlinspect.end_debug()
    w, b = lin.weight.detach(), lin.bias.detach()
    pts = F.linear(qdq(x, scale_of(amax(x), E4), E4)[1], qdq(w, 1.0, E4)[1], b)
    plain = F.linear(qdq(x, 1.0, E4)[1], qdq(w, 1.0, E4)[1], b)
    c.ok(not torch.equal(pts, plain), "eval: the two references differ")
    c.ok(torch.equal(y_train, pts), "train: PerTensorScaling's operand")
    c.ok(torch.equal(y_eval, plain), "eval (set_mode in the same iteration): PerTensorScaling does not act")
    c.ok(torch.equal(y_again, pts), "train again: PerTensorScaling acts")

    # LogFp8TensorStats sees the run's own casts: scale_inv and underflows of the delayed codes.
    cfg = section("log", "    LogFp8TensorStats: {enabled: true, tensors: [activation, gradient], stats: [underflows%, scale_inv_max]}")
    res, w, b, d = run(cfg, "delayed", n)
    sc = delayed_scales(res, w)
    logged = {(name, it): v for name, it, v in stats(d)}
    for k, (x, dy, *_) in enumerate(res):
        for t, hp_t, s, fmt in (("activation", x, sc[k][0], E4), ("gradient", dy, sc[k][2], E5)):
            codes = qdq(hp_t, s, fmt)[0]
            under = 100.0 * ((hp_t != 0) & (codes.float() == 0)).sum().item() / hp_t.numel()
            sinv = torch.tensor(1.0 / s, dtype=torch.float64).float().item()
            c.close(logged.get((f"model_{t}_underflows%", k), float("nan")), under, 1e-6, f"LogFp8TensorStats: {t} underflows% at {k}")
            c.close(logged.get((f"model_{t}_scale_inv_max", k), float("nan")), sinv, 1e-7, f"LogFp8TensorStats: {t} scale_inv_max at {k}")
    c.ok(any(logged.get((f"model_activation_underflows%", k), 0) > 10 for k in range(n)),
         "LogFp8TensorStats: the spike's stale scale shows as activation underflows")
    c.done()


if __name__ == "__main__":
    main()
