"""The Hugging Face example (examples/python/train_hf.py), a short version of its story: 40 steps,
one corrupted sequence at step 10. The fp32 run ignores it (the loss of a clean run within 1%); in FP8 with delayed scaling the statistics single out model.projector's activation (most of
it underflows, none would with current scaling, and a Llama Linear stays clean); the fix config
runs and brings the loss below the broken run's."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import Checker, stats, tmpdir  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(SRC, "examples", "python", "train_hf.py")
CONFIGS = os.path.join(SRC, "examples", "python", "configs")
SHORT = ["--steps", "40", "--bad-step", "10", "--quiet"]


def train(*args):
    p = subprocess.run([sys.executable, EXAMPLE] + SHORT + list(args), capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout, p.stderr, file=sys.stderr)
        raise SystemExit(f"FAIL: train_hf.py {' '.join(args)} exited {p.returncode}")
    m = re.search(r"loss, mean of the last \d+ steps: ([0-9.]+)", p.stdout)
    if not m:
        raise SystemExit(f"FAIL: no loss line in: {p.stdout}")
    return float(m.group(1)), p.stdout


def main():
    c = Checker()
    clean, _ = train("--precision", "fp32", "--no-dlinspect", "--bad-step", "-1")
    bad32, _ = train("--precision", "fp32", "--no-dlinspect")
    # Not bit for bit: the corrupted step averages its loss over one sequence fewer.
    c.ok(abs(bad32 - clean) < 0.01 * clean, f"fp32 barely notices the masked sequence: {bad32} vs {clean}")

    # The story's debug config at freq 10 instead of 50, for a 40-step run.
    d = tmpdir()
    with open(os.path.join(CONFIGS, "hf_debug.yaml")) as f:
        cfg = f.read().replace("freq: 50", "freq: 10")
    c.ok(cfg.count("freq: 10") == 2, "hf_debug.yaml has the two freq: 50 it documents")
    path = os.path.join(d, "debug.yaml")
    with open(path, "w") as f:
        f.write(cfg)
    bad8, out = train("--precision", "fp8", "--config", path, "--log-dir", d)
    v = {(n, it): x for n, it, x in stats(d)}
    p = "model.projector_activation_"
    c.ok(v.get((p + "underflows%", 0), 100) < 5, f"projector underflows at 0: {v.get((p + 'underflows%', 0))}")
    c.ok(v.get((p + "cur_amax", 10)) == 1e5, f"the corrupted step's amax: {v.get((p + 'cur_amax', 10))}")
    for it in (20, 30):
        c.ok(v.get((p + "underflows%", it), 0) > 50, f"projector underflows% at {it}: {v.get((p + 'underflows%', it))}")
        c.ok(v.get((p + "fp8_current_scaling_underflows%", it), 100) < 1,
             f"projector current-scaling underflows% at {it}: {v.get((p + 'fp8_current_scaling_underflows%', it))}")
        c.close(v.get((p + "scale_inv_max", it), 0), 1e5 / 448, 1e-6, f"projector scale_inv at {it}")
        q = "model.llm.model.layers.0.self_attn.q_proj_activation_underflows%"
        c.ok(v.get((q, it), 100) < 1, f"q_proj activation underflows% at {it}: {v.get((q, it))}")
    c.ok("model.projector_activation" in out, "the example's summary names the tensor")

    fixed, _ = train("--precision", "fp8", "--config", os.path.join(CONFIGS, "hf_fix.yaml"), "--log-dir", tmpdir())
    c.ok(bad8 > 1.05 * clean, f"FP8 with the corrupted sequence: loss {bad8} well above fp32's {clean}")
    c.ok(fixed < bad8, f"PerTensorScaling fix: loss {fixed} below the broken run's {bad8}")
    fixed2, _ = train("--precision", "fp8", "--config", os.path.join(CONFIGS, "hf_fix_disable.yaml"), "--log-dir", tmpdir())
    c.ok(fixed2 < bad8, f"DisableFP8GEMM fix: loss {fixed2} below the broken run's {bad8}")
    print(f"losses: fp32 {clean:.4f}, fp8 corrupted {bad8:.4f}, fixed {fixed:.4f} / {fixed2:.4f}")
    c.done()


if __name__ == "__main__":
    main()
