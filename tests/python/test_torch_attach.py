"""attach/detach leave a model's outputs and gradients bit for bit as without dlinspect when no
config selects anything (hook mode; with no config and with one that selects other layers), remove
every hook, and name layers as nvdlfw_inspect's infer_and_assign_layer_names does."""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import Checker, tmpdir  # noqa: E402

import torch  # noqa: E402
import dlinspect  # noqa: E402
import dlinspect.torch as dt  # noqa: E402

OTHER = """
elsewhere:
  enabled: true
  layers: {layer_name_regex_pattern: '^nothing_here$'}
  transformer_engine:
    LogTensorStats: {enabled: true, tensors: [activation, output, gradient, dgrad, wgrad], stats: [max]}
    DisableFP8GEMM: {enabled: true, gemms: [fprop]}
"""


class Block(torch.nn.Module):
    def __init__(self, n, number=None):
        super().__init__()
        self.fc1 = torch.nn.Linear(n, 2 * n)
        self.fc2 = torch.nn.Linear(2 * n, n)
        if number is not None:
            self.layer_number = number

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(x)))


class Net(torch.nn.Module):
    def __init__(self, numbered=False):
        super().__init__()
        self.inp = torch.nn.Linear(3, 8)
        self.layers = torch.nn.ModuleList(Block(8, i + 1 if numbered else None) for i in range(2))
        self.out = torch.nn.Linear(8, 2)

    def forward(self, x):
        x = self.inp(x)
        for b in self.layers:
            x = b(x)
        return self.out(x)


def train(m, steps, hook=None):
    torch.manual_seed(7)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    outs = []
    for _ in range(steps):
        x = torch.randn(4, 3, requires_grad=True)
        y = m(x)
        y.square().mean().backward()
        outs.append((y.detach().clone(), x.grad.clone(), [p.grad.clone() for p in m.parameters()]))
        opt.step()
        opt.zero_grad()
        if hook:
            hook()
    return outs


def same(a, b):
    return all(torch.equal(ya, yb) and torch.equal(ga, gb) and all(torch.equal(p, q) for p, q in zip(pa, pb))
               for (ya, ga, pa), (yb, gb, pb) in zip(a, b))


def hooks_of(m):
    return sum(len(x._forward_hooks) + len(x._forward_pre_hooks) + len(x._backward_hooks) for x in m.modules())


def stats_cfg(tensors=("activation",), regex=".*", **more):
    return {"s": {"enabled": True, "layers": {"layer_name_regex_pattern": regex},
                  "transformer_engine": {"LogTensorStats": {
                      "enabled": True, "tensors": list(tensors), "stats": ["max"], **more}}}}


def logged(d):
    from torch_common import stats
    return [(n, it) for n, it, _ in stats(d)]


def broadcast_gradient(c):
    """(y.sum(0) * w).sum().backward() hands the gradient hook w.expand(y.shape), stride 0 on its
    outer dimension: its statistics are those of the tensor as it reads."""
    lin = torch.nn.Linear(4, 3)
    w = torch.tensor([1.0, -2.0, 0.5])
    d = tmpdir()
    dlinspect.initialize(config=stats_cfg(("gradient",)), log_dir=d)
    h = dt.attach(lin)
    try:
        (lin(torch.randn(5, 4)).sum(0) * w).sum().backward()
        dt.step()
    except Exception as e:
        c.ok(False, f"a broadcast gradient: {e!r}")
    h.detach()
    dlinspect.end_debug()
    from torch_common import stats
    c.ok([(n, v) for n, _, v in stats(d)] == [("model_gradient_max", 1.0)],
         f"a broadcast gradient: {stats(d)}")


def float64_layer(c):
    """A float64 layer beside a float32 one: the statistics refuse float64 tensors (the core says so
    on stderr and counts it), and training goes on, as for a C host: the forward and backward
    passes run and give what they give without dlinspect, the float32 layer is logged."""
    torch.manual_seed(3)
    m = torch.nn.Sequential(torch.nn.Linear(4, 4).double(), torch.nn.Linear(4, 2))
    d = tmpdir()
    dlinspect.initialize(config=stats_cfg(("activation", "output", "gradient")), log_dir=d)
    h = dt.attach(m, names={m[0]: "f64", m[1]: "f32"})
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    try:
        y = m[1](m[0](x).float())
        y.sum().backward()
        dt.step()
        ref = torch.nn.functional.linear(torch.nn.functional.linear(x, m[0].weight, m[0].bias).float(),
                                         m[1].weight, m[1].bias)
        c.ok(torch.equal(y, ref), "a float64 layer: the output as without dlinspect")
    except Exception as e:
        c.ok(False, f"a float64 layer stopped training: {e!r}")
    h.detach()
    dlinspect.end_debug()
    names = sorted({n for n, _ in logged(d)})
    c.ok(names == ["f32_activation_max", "f32_gradient_max", "f32_output_max"],
         f"a float64 layer: logged {names}")


def across_end_debug(c):
    """Attached hooks across end_debug() and a new initialize(): with no context they do nothing
    and dlinspect.torch.step() is a no-op, as dlinspect.step(); after a new initialize() every
    layer plans again. The model's root is the attached Linear itself, so its root hook must run
    first."""
    x = torch.randn(2, 4)
    for first in (".*", "^nothing$"):
        lin = torch.nn.Linear(4, 4)
        dlinspect.initialize(config=stats_cfg(regex=first), log_dir=tmpdir())
        h = dt.attach(lin)
        lin(x)
        dt.step()
        dlinspect.end_debug()
        try:
            y = lin(x)
            dt.step()
            h.step()
            c.ok(torch.equal(y, torch.nn.functional.linear(x, lin.weight, lin.bias)),
                 "after end_debug: the output as without dlinspect")
        except Exception as e:
            c.ok(False, f"after end_debug, a forward and dlinspect.torch.step(): {e!r}")
        d = tmpdir()
        dlinspect.initialize(config=stats_cfg(), log_dir=d)
        for _ in range(3):
            lin(x)
            dt.step()
        h.detach()
        dlinspect.end_debug()
        want = [("model_activation_max", i) for i in range(3)]
        c.ok(logged(d) == want, f"first config {first}: after a new initialize, logged {logged(d)}")


def step_back(c):
    """initialize_training_step() to an earlier iteration: every attached layer plans again."""
    x = torch.randn(2, 4)
    d = tmpdir()
    lin = torch.nn.Linear(4, 4)
    dlinspect.initialize(config=stats_cfg(start_step=0, end_step=1), log_dir=d)
    h = dt.attach(lin)
    for _ in range(4):
        lin(x)
        dt.step()
    dlinspect.initialize_training_step(0)  # a restored checkpoint, an epoch run again
    for _ in range(2):
        lin(x)
        dt.step()
    h.detach()
    dlinspect.end_debug()
    c.ok([it for _, it in logged(d)] == [0, 1, 0, 1], f"a step back: logged {logged(d)}")


def keyword_input(c):
    """lin(input=x): hook mode reads the input by its name; the FP8 emulation takes it too."""
    torch.manual_seed(3)
    lin = torch.nn.Linear(8, 4)
    for fp8 in (None, "current"):
        d = tmpdir()
        dlinspect.initialize(config=stats_cfg(("activation", "weight", "output", "dgrad")),
                             log_dir=d)
        h = dt.attach(lin, fp8=fp8)
        x = torch.randn(3, 8, requires_grad=True)
        lin(input=x).sum().backward()
        dt.step()
        h.detach()
        dlinspect.end_debug()
        names = sorted(n for n, _ in logged(d))
        c.ok(names == ["model_activation_max", "model_dgrad_max", "model_output_max",
                       "model_weight_max"], f"fp8={fp8}: lin(input=x) logged {names}")
        from torch_common import stats
        got = {n: v for n, _, v in stats(d)}
        c.close(got.get("model_activation_max", math.nan), x.max().item(), 1e-7,
                f"fp8={fp8}: lin(input=x)'s activation max")


def main():
    c = Checker()
    torch.manual_seed(0)
    base = Net()
    state = {k: v.clone() for k, v in base.state_dict().items()}
    ref = train(base, 6)
    for cfg in (None, OTHER):
        d = tmpdir()
        dlinspect.initialize(config=cfg, log_dir=d)
        m = Net()
        m.load_state_dict(state)
        h = dt.attach(m)
        c.ok(hooks_of(m) > 0, f"config {cfg is not None}: attach registered hooks")
        try:
            dt.attach(m)
            c.ok(False, "attaching an attached model again is refused")
        except RuntimeError as e:
            c.ok("already attached" in str(e), f"attaching twice: {e}")
        got = train(m, 6, dt.step)
        c.ok(same(ref, got), f"config {cfg is not None}: outputs and gradients bit for bit as without dlinspect")
        h.detach()
        c.ok(hooks_of(m) == 0, f"config {cfg is not None}: detach removed every hook")
        c.ok(all("forward" not in x.__dict__ for x in m.modules()), "no forward left replaced")
        dlinspect.end_debug()
    # FP8 emulation attached, then detached: the module is a plain fp32 Linear again.
    dlinspect.initialize(config=None, log_dir=tmpdir())
    m = Net()
    m.load_state_dict(state)
    h = dt.attach(m, fp8="current")
    c.ok(all("forward" in x.__dict__ for x in m.modules() if isinstance(x, torch.nn.Linear)), "fp8: Linear forwards replaced")
    emulated = train(m, 1)
    c.ok(not torch.equal(emulated[0][0], ref[0][0]), "fp8: the emulated output differs from fp32")
    h.detach()
    m.load_state_dict(state)
    c.ok(same(ref, train(m, 6)), "fp8 detached: outputs and gradients as fp32 again")
    dlinspect.end_debug()

    # names=: exactly these modules, under these names.
    d = tmpdir()
    cfg = """
mine:
  enabled: true
  layers: {exact_layer_names: [custom.input]}
  transformer_engine:
    LogTensorStats: {enabled: true, tensors: [activation], stats: [max]}
"""
    dlinspect.initialize(config=cfg, log_dir=d)
    m = Net()
    h = dt.attach(m, names={m.inp: "custom.input"})
    c.ok(list(h.layers) == ["custom.input"], f"names=: layers {list(h.layers)}")
    x = torch.randn(4, 3)
    m(x)
    dt.step()  # the step's statistics are written when it ends
    h.detach()
    dlinspect.end_debug()
    from torch_common import stats
    got = stats(d)
    c.ok([(n, it) for n, it, _ in got] == [("custom.input_activation_max", 0)], f"names=: logged {got}")
    c.ok(bool(got) and abs(got[0][2] - x.max().item()) <= 1e-7 * abs(x.max().item()), "names=: the value")

    # Names: "model", attribute paths, a ModuleList child by its layer_number when it has one.
    for numbered in (False, True):
        m = Net(numbered)
        names = {n for n in dt.layer_names(m).values()}
        k = (1, 2) if numbered else (0, 1)
        want = {"model", "model.inp", "model.out"} | {f"model.layers.{i}{s}" for i in k for s in ("", ".fc1", ".fc2")}
        c.ok(names == want, f"layer_names (numbered={numbered}): {sorted(names)}")
        dlinspect.initialize(config=None, log_dir=tmpdir())
        h = dt.attach(m)
        c.ok(set(h.layers) == want - {"model"} - {f"model.layers.{i}" for i in k}, f"attach's layers: {sorted(h.layers)}")
        c.ok(m.layers[0].fc1.name == f"model.layers.{k[0]}.fc1", "module.name assigned")
        h.detach()
        h = dt.attach(m, module_types=torch.nn.Linear)  # a single type as well as a tuple
        c.ok(set(h.layers) == want - {"model"} - {f"model.layers.{i}" for i in k},
             f"attach(module_types=torch.nn.Linear)'s layers: {sorted(h.layers)}")
        h.detach()
        dlinspect.end_debug()
        infer = getattr(dlinspect, "infer_and_assign_layer_names", None)
        if infer is not None:  # the package's own (pure Python) naming agrees
            m2 = Net(numbered)
            infer(m2)
            c.ok({getattr(x, "name", None) for x in m2.modules() if not isinstance(x, torch.nn.ModuleList)} == want,
                 "dlinspect.infer_and_assign_layer_names gives the same names")
    across_end_debug(c)
    step_back(c)
    keyword_input(c)
    broadcast_gradient(c)
    float64_layer(c)
    c.done()


if __name__ == "__main__":
    main()
