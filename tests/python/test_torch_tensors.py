"""Each tensor dlinspect.torch.attach logs (activation, weight, output, gradient, dgrad, wgrad)
equals torch's own computation of the statistic on the same tensor, captured here with hooks and
retain_grad() of the test's own; f32 and bf16 models, hook mode and FP8 emulation."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import STD, Checker, stats, tmpdir  # noqa: E402

import torch  # noqa: E402
import dlinspect  # noqa: E402
import dlinspect.torch as dt  # noqa: E402

STATS = ("min", "max", "mean", "std", "l1_norm", "l2_norm", "cur_amax")
CONFIG = """
all:
  enabled: true
  layers: {layer_name_regex_pattern: '.*'}
  transformer_engine:
    LogTensorStats: {enabled: true, tensors: [activation, gradient, weight, output, wgrad, dgrad], stats: [%s], freq: 2}
""" % ", ".join(STATS)


def reference(t):
    x = t.detach().double().flatten()
    return {"min": x.min().item(), "max": x.max().item(), "mean": x.mean().item(),
            "std": x.std().item(), "l1_norm": x.abs().sum().item(), "l2_norm": x.norm().item(),
            "cur_amax": x.abs().max().item()}


def run(c, dtype, fp8):
    d = tmpdir()
    dlinspect.initialize(config=CONFIG, log_dir=d)
    torch.manual_seed(1)
    m = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).to(dtype)
    h = dt.attach(m, fp8=fp8)
    names = {m[0]: "model.0", m[2]: "model.2"}
    captured = {}  # (iteration, layer, tensor) -> tensor

    def grab(mod, args, out):
        n = names[mod]
        captured[it, n, "activation"] = args[0].detach().clone()
        captured[it, n, "weight"] = mod.weight.detach().clone()
        captured[it, n, "output"] = out.detach().clone()
    for mod in names:
        mod.register_forward_hook(grab)
    for it in range(4):
        x = (torch.randn(6, 5) * (1 + it)).to(dtype).requires_grad_()
        y1 = m[0](x)
        y1.retain_grad()
        a2 = m[1](y1)
        a2.retain_grad()
        y2 = m[2](a2)
        y2.retain_grad()
        (y2.float() * torch.arange(3.0)).sum().backward()
        captured[it, "model.0", "gradient"] = y1.grad.clone()
        captured[it, "model.2", "gradient"] = y2.grad.clone()
        captured[it, "model.0", "dgrad"] = x.grad.clone()      # x's only consumer is model.0
        captured[it, "model.2", "dgrad"] = a2.grad.clone()     # a2's only consumer is model.2
        for mod, n in names.items():
            captured[it, n, "wgrad"] = mod.weight.grad.clone()
        m.zero_grad(set_to_none=True)
        dt.step()
    h.detach()
    dlinspect.end_debug()
    seen = set()
    tag = f"{dtype}, fp8={fp8}"
    for name, it, v in stats(d):
        layer, rest = name.split("_", 1)
        t = next(t for t in STD if rest.startswith(t + "_"))
        s = rest[len(t) + 1:]
        ref = reference(captured[it, layer, t])[s]
        c.close(v, ref, 2e-6, f"{tag}: {layer} {t} {s} at {it}")
        seen.add((it, layer, t, s))
    want = {(it, n, t, s) for it in (0, 2) for n in names.values() for t in STD for s in STATS}
    c.ok(seen == want, f"{tag}: logged {len(seen)} statistics, want {len(want)}: missing {sorted(want - seen)[:5]}")


class Shared(torch.nn.Module):
    """Two Linears reading one tensor, as Llama's q, k and v projections do."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(4, 3)
        self.k = torch.nn.Linear(4, 5)

    def forward(self, x):
        return self.q(x), self.k(x)


def shared_input(c):
    """dgrad is each layer's own share of the input's gradient (dy W), not their sum."""
    d = tmpdir()
    cfg = CONFIG.replace("tensors: [activation, gradient, weight, output, wgrad, dgrad]", "tensors: [dgrad]")
    dlinspect.initialize(config=cfg, log_dir=d)
    torch.manual_seed(2)
    m = Shared()
    h = dt.attach(m)
    x = torch.randn(6, 4, requires_grad=True)
    yq, yk = m(x)
    yq.retain_grad()
    yk.retain_grad()
    (yq.square().sum() + 3 * yk.sum()).backward()
    dt.step()
    h.detach()
    dlinspect.end_debug()
    want = {"model.q": yq.grad.mm(m.q.weight.detach()), "model.k": yk.grad.mm(m.k.weight.detach())}
    got = {(name.split("_")[0], name.split("_", 2)[2]): v for name, it, v in stats(d) if it == 0}
    for layer, ref in want.items():
        r = reference(ref)
        for s in STATS:
            c.close(got.get((layer, s), float("nan")), r[s], 2e-6, f"shared input: {layer} dgrad {s}")
    c.ok(not torch.allclose(want["model.q"], x.grad), "shared input: the sum differs from one share")


def main():
    c = Checker()
    shared_input(c)
    run(c, torch.float32, None)
    run(c, torch.bfloat16, None)
    run(c, torch.float32, "current")
    run(c, torch.float32, "delayed")
    run(c, torch.bfloat16, "current")
    c.done()


if __name__ == "__main__":
    main()
