"""dlinspect.torch.attach's hooks fire exactly at the iterations a config schedules (freq,
start_step, end_step, start_end_list), for every forward (microbatches merge into one record), and between them a layer asks dlinspect
nothing: its plan() is taken only at the iterations the documented rule gives (docs/config.md:
the next selected step while idle, the step right after while active)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import Checker, stats, tmpdir  # noqa: E402

import torch  # noqa: E402
import dlinspect  # noqa: E402
import dlinspect.torch as dt  # noqa: E402

STEPS = 30
CONFIG = """
first:
  enabled: true
  layers: {layer_name_regex_pattern: '^model\\.0$'}
  transformer_engine:
    LogTensorStats: {enabled: true, tensors: [activation, output, gradient, dgrad, wgrad, weight], stats: [max], freq: 3, start_step: 2, end_step: 20}
second:
  enabled: true
  layers: {layer_name_regex_pattern: '^model\\.2$'}
  transformer_engine:
    LogTensorStats: {enabled: true, tensors: [activation], stats: [min], freq: 2, start_end_list: [[5, 9], [24, 26]]}
"""


def naive(freq, ranges):
    return [i for i in range(STEPS) if i % freq == 0 and any(a <= i <= b for a, b in ranges)]


class Counting:
    """A layer handle that counts plan() calls, per iteration."""

    def __init__(self, inner, att, log):
        self.inner, self.att, self.log = inner, att, log

    def plan(self):
        self.log.append(self.att.iteration)
        return self.inner.plan()

    def __getattr__(self, k):
        return getattr(self.inner, k)


def run(c, fwd_per_step, fp8):
    d = tmpdir()
    dlinspect.initialize(config=CONFIG, log_dir=d)
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 4), torch.nn.Linear(4, 3))
    h = dt.attach(m, fp8=fp8)
    queries = {}
    for lay in h._layers:
        queries[lay.name] = []
        lay.layer = Counting(lay.layer, h, queries[lay.name])
    xmax = []
    for _ in range(STEPS):
        xs = []
        for _ in range(fwd_per_step):
            x = torch.randn(8, 6, requires_grad=True)
            xs.append(x.detach())
            m(x).square().sum().backward()
        xmax.append(max(float(x.max()) for x in xs))
        dt.step()
    h.detach()
    dlinspect.end_debug()
    got = {}
    for name, it, v in stats(d):
        got.setdefault(name, []).append(it)
        if name == "model.0_activation_max":  # every microbatch of the step was fed
            c.close(v, xmax[it], 1e-7, f"fp8={fp8}: model.0 activation max at {it} over {fwd_per_step} microbatch(es)")
    first = naive(3, [(2, 20)])
    second = naive(2, [(5, 9), (24, 26)])
    tag = f"fp8={fp8}, {fwd_per_step} forward(s) per step"
    for t in ("activation", "output", "gradient", "dgrad", "wgrad", "weight"):
        want = first  # microbatches' records merge: one line per step
        c.ok(got.get(f"model.0_{t}_max") == want, f"{tag}: model.0 {t} at {got.get(f'model.0_{t}_max')}, want {want}")
    want = second
    c.ok(got.get("model.2_activation_min") == want,
         f"{tag}: model.2 activation at {got.get('model.2_activation_min')}, want {want}")
    c.ok(set(got) == {f"model.0_{t}_max" for t in ("activation", "output", "gradient", "dgrad", "wgrad", "weight")}
         | {"model.2_activation_min"}, f"{tag}: logged tensors {sorted(got)}")

    def rule(sel):
        q = {0} | set(sel) | {s + 1 for s in sel}
        return sorted(i for i in q if i < STEPS)
    c.ok(queries["model.0"] == rule(first), f"{tag}: model.0 plan() at {queries['model.0']}, want {rule(first)}")
    c.ok(queries["model.2"] == rule(second), f"{tag}: model.2 plan() at {queries['model.2']}, want {rule(second)}")
    c.ok(queries["model.3"] == [0], f"{tag}: model.3 (never selected) plan() at {queries['model.3']}, want [0]")


def main():
    c = Checker()
    for fp8 in (None, "current"):
        for fwd in (1, 2):
            run(c, fwd, fp8)
    c.done()


if __name__ == "__main__":
    main()
