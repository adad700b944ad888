#!/usr/bin/env python3
"""A Hugging Face Llama, trained on the CPU in fp32 or emulated FP8, debugged with dlinspect.

The model is transformers' LlamaForCausalLM built from a small LlamaConfig with random weights
(nothing is downloaded). Its input comes through `inputs_embeds` from a projector Linear, as a
multimodal model's projector feeds its language model: each position is a noisy sensor reading of
a hidden token, and the model predicts the next hidden token. The hidden tokens follow a fixed
random Markov chain, so the best reachable loss is known: the chain's conditional entropy.

At --bad-step, one sequence of the batch is corrupted: every feature reads 1e5, as a sensor's
missing-data sentinel would. Its labels are masked (-100), so the loss ignores it and fp32
training does not notice. Delayed FP8 scaling does: see README.md, "PyTorch and Hugging Face".

    python examples/python/train_hf.py --precision fp8 --bad-step 100 \
        --config examples/python/configs/hf_debug.yaml --log-dir /tmp/hf_debug
"""
import argparse
import math
import os
import re
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--vocab", type=int, default=64, help="hidden tokens")
    p.add_argument("--features", type=int, default=16, help="sensor features per position")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--code-scale", type=float, default=0.1, help="std of the sensor readings' means")
    p.add_argument("--noise", type=float, default=0.03, help="sensor noise std")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--precision", choices=("fp32", "fp8"), default="fp8")
    p.add_argument("--recipe", choices=("delayed", "current"), default="delayed",
                   help="FP8 scaling recipe (delayed: 1024-step amax history, max)")
    p.add_argument("--bad-step", type=int, default=-1, help="corrupt one sequence at this step")
    p.add_argument("--bad-value", type=float, default=1e5)
    p.add_argument("--config", default=os.environ.get("DLINSPECT_CONFIG"))
    p.add_argument("--log-dir", default="./dlinspect_hf_logs")
    p.add_argument("--no-dlinspect", action="store_true", help="make no dlinspect call at all")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--losses", help="write every step's loss (repr, all digits) to this file")
    p.add_argument("--print-every", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--bench", action="store_true",
                   help="overhead of attach with no config selected, modes alternated")
    p.add_argument("--bench-rounds", type=int, default=21)
    p.add_argument("--bench-steps", type=int, default=20)
    return p.parse_args(argv)


class MarkovSensors:
    """Hidden tokens from a fixed random Markov chain (each token has 4 likely successors) and
    their noisy sensor readings: features = code[token] + noise."""

    def __init__(self, a, gen):
        v, f = a.vocab, a.features
        self.a = a
        self.gen = gen
        logits = torch.full((v, v), -float("inf"))
        for s in range(v):
            succ = torch.randperm(v, generator=gen)[:4]
            logits[s, succ] = torch.randn(4, generator=gen)
        self.trans = torch.softmax(logits, dim=1)
        p = self.trans.clamp_min(1e-30)
        self.entropy = -(self.trans * p.log()).sum(1)  # nats, per current token
        self.code = torch.randn(v, f, generator=gen) * a.code_scale

    def batch(self, bad=False):
        a = self.a
        tok = torch.empty(a.batch, a.seq, dtype=torch.long)
        tok[:, 0] = torch.randint(a.vocab, (a.batch,), generator=self.gen)
        for t in range(1, a.seq):
            tok[:, t] = torch.multinomial(self.trans[tok[:, t - 1]], 1, generator=self.gen)[:, 0]
        feats = self.code[tok] + a.noise * torch.randn(a.batch, a.seq, a.features, generator=self.gen)
        labels = tok.clone()
        if bad:
            feats[0] = a.bad_value
            labels[0] = -100
        # The loss's floor for this batch: the entropy of each predicted position's distribution.
        floor = self.entropy[tok[1:, :-1] if bad else tok[:, :-1]].mean().item()
        return feats, labels, floor


class SensorLM(torch.nn.Module):
    """A projector Linear in front of transformers' LlamaForCausalLM (inputs_embeds)."""

    def __init__(self, a):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=2 * a.hidden,
                          num_hidden_layers=a.layers, num_attention_heads=a.heads,
                          num_key_value_heads=a.heads, max_position_embeddings=a.seq,
                          tie_word_embeddings=False)
        cfg._attn_implementation = "eager"
        self.projector = torch.nn.Linear(a.features, a.hidden)
        self.llm = LlamaForCausalLM(cfg)

    def forward(self, feats, labels):
        return self.llm(inputs_embeds=self.projector(feats), labels=labels, use_cache=False).loss


class Run:
    """One training run: model, optimizer, data, and how it talks to dlinspect."""

    def __init__(self, a, mode):
        import dlinspect.torch as dt
        torch.manual_seed(a.seed)
        self.a = a
        self.model = SensorLM(a)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=a.lr, weight_decay=0.0)
        self.data = MarkovSensors(a, torch.Generator().manual_seed(a.seed + 1000))
        self.step_no = 0
        self.handle = None
        self.mode = mode  # "none": no dlinspect; "attach": dlinspect.torch.attach
        fp8 = a.recipe if a.precision == "fp8" else None
        if mode == "attach":
            self.handle = dt.attach(self.model, fp8=fp8)
        elif fp8 is not None:
            self.handle = dt.emulate_fp8(self.model, fp8)

    def lr(self):
        a, s = self.a, self.step_no
        warm = max(1, a.steps // 20)
        if s < warm:
            return a.lr * (s + 1) / warm
        return a.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, a.steps - warm))))

    def step(self):
        a = self.a
        feats, labels, floor = self.data.batch(bad=self.step_no == a.bad_step)
        for g in self.opt.param_groups:
            g["lr"] = self.lr()
        loss = self.model(feats, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if self.handle is not None:
            self.handle.step()  # dlinspect.step() when attached; the FP8 recipe's step otherwise
        self.step_no += 1
        return loss.item(), floor


def findings(log_dir):
    """The tensors whose FP8 cast zeroes more than 1% of the values at the last logged iteration."""
    path = os.path.join(log_dir, "nvdlfw_inspect_statistics_logs", "nvdlfw_inspect_globalrank-0.log")
    if not os.path.exists(path):
        return None, []
    val, last = {}, -1
    pat = re.compile(r" - INFO - (\S+)\s+iteration=(\d+)\s+value=(\S+)")
    with open(path) as f:
        for line in f:
            m = pat.search(line)
            if m:
                it = int(m.group(2))
                val[it, m.group(1)] = float(m.group(3))
                last = max(last, it)
    out = []
    for (it, name), v in sorted(val.items()):
        if it != last or not name.endswith("_underflows%") or name.endswith("scaling_underflows%"):
            continue
        t = name[:-len("_underflows%")]
        if v > 1:
            out.append((t, v, val.get((it, t + "_fp8_current_scaling_underflows%"), float("nan")),
                        val.get((it, t + "_scale_inv_max"), float("nan"))))
    return last, out


def train(a):
    import dlinspect
    use = not a.no_dlinspect
    if use:
        dlinspect.initialize(config_file=a.config, log_dir=a.log_dir)
    run = Run(a, "attach" if use else "none")
    every = a.print_every or max(1, a.steps // 10)
    losses = []
    t0 = time.perf_counter()
    try:
        for s in range(a.steps):
            loss, floor = run.step()
            losses.append((loss, floor))
            if not a.quiet and (s % every == 0 or s == a.steps - 1):
                print(f"step {s:4d}  loss {loss:.4f}  (floor {floor:.4f})")
    finally:
        if run.handle is not None:
            run.handle.detach()
        if use:
            dlinspect.end_debug()  # flushes the logs
    dt = time.perf_counter() - t0
    if a.losses:
        with open(a.losses, "w") as f:
            f.writelines(f"{s} {l!r}\n" for s, (l, _) in enumerate(losses))
    tail = losses[-50:]
    mean = sum(l for l, _ in tail) / len(tail)
    floor = sum(f for _, f in tail) / len(tail)
    what = a.precision + (f" ({a.recipe} scaling)" if a.precision == "fp8" else "")
    print(f"{what}, {a.steps} steps, bad step {a.bad_step if a.bad_step >= 0 else 'none'}: "
          f"loss, mean of the last {len(tail)} steps: {mean:.4f} (floor {floor:.4f}, "
          f"ratio {mean / floor:.3f}); {a.steps / dt:.1f} steps/s")
    if use and a.config:
        last, found = findings(a.log_dir)
        if last is not None:
            print("== what the statistics say: tensors whose FP8 cast zeroes more than 1% of the values")
            print(f"  at iteration {last}:")
            for t, v, cur, si in found:
                print(f"  {t:44s} underflows {v:6.2f}%  (current scaling: {cur:.2f}%)  scale_inv {si:.3g}")
            if not found:
                print("  none")
    return mean


def bench(a):
    """attach with no config selected against no dlinspect at all: two copies of the same run,
    stepped in alternation, each round starting with the other one (as dlinspect-train --bench)."""
    import dlinspect
    dlinspect.initialize(config=None, log_dir=a.log_dir)
    runs = {"none": Run(a, "none"), "attach": Run(a, "attach")}
    for r in runs.values():  # warm up (allocator, first-call paths)
        for _ in range(3):
            r.step()
    times = {k: [] for k in runs}  # wall-clock seconds per round
    cpu = {k: [] for k in runs}    # this thread's CPU seconds per round (torch runs one thread)
    order = list(runs)
    for rnd in range(a.bench_rounds):
        for k in (order if rnd % 2 == 0 else order[::-1]):
            r = runs[k]
            t0, c0 = time.perf_counter(), time.thread_time()
            for _ in range(a.bench_steps):
                r.step()
            times[k].append(time.perf_counter() - t0)
            cpu[k].append(time.thread_time() - c0)
    inside = direct_cost(runs["attach"])
    for r in runs.values():
        if r.handle is not None:
            r.handle.detach()
    dlinspect.end_debug()
    def median(v):
        return sorted(v)[len(v) // 2]
    med = median([b / n for b, n in zip(times["attach"], times["none"])])
    med_cpu = median([b / n for b, n in zip(cpu["attach"], cpu["none"])])
    tn = median(times["none"]) / a.bench_steps
    ta = median(times["attach"]) / a.bench_steps
    cn = median(cpu["none"]) / a.bench_steps
    print(f"step benchmark: {a.precision}, {a.layers} layers, hidden {a.hidden}, batch {a.batch}x{a.seq}; "
          f"{a.bench_rounds} rounds of {a.bench_steps} steps per mode, alternated in one process")
    print(f"  without dlinspect             {tn * 1e3:8.3f} ms/step (median round)")
    print(f"  attach, no config selected    {ta * 1e3:8.3f} ms/step (median round)")
    print(f"  ratio, median over rounds of attach/without, wall clock: {med:.4f} ({(med - 1) * 100:+.2f}%)")
    print(f"  ratio, the same in thread CPU time: {med_cpu:.4f} ({(med_cpu - 1) * 100:+.2f}%)  "
          f"target <= 1.0100: {'met' if med_cpu <= 1.01 else 'NOT met'}")
    print(f"  inside dlinspect (direct, CPU time): {inside * 1e6:.1f} us/step = {inside / cn * 100:.3f}% of "
          f"a step's {cn * 1e3:.3f} ms CPU without it (each Linear's idle hooks, the root's iteration read, the step)")
    return med_cpu


def direct_cost(run, n=20000):
    """What attach adds to a step when nothing is scheduled, timed call by call: each attached
    Linear's idle hook path (hooks) or its plan compare (FP8 mode, where the rest is the same
    emulation as without dlinspect), the root's iteration read, and dlinspect.step()."""
    import dlinspect
    import dlinspect.torch as dt
    h = run.handle
    lays = h._layers
    lay = lays[0]
    if lay.metas is None:
        # A Linear call with the layer's hooks against the same call without them: the hooks and
        # the slower path nn.Module.__call__ takes when a module has hooks.
        tiny = torch.nn.Linear(1, 1)
        x = torch.zeros(1, 1)

        def calls():  # CPU time of this thread: a shared machine's waits do not count
            t0 = time.thread_time()
            for _ in range(n):
                tiny(x)
            return time.thread_time() - t0
        deltas = []
        for _ in range(5):  # with and without, interleaved; the median difference
            bare = calls()
            handles = [tiny.register_forward_pre_hook(lay._pre_hook),
                       tiny.register_forward_hook(lay._post_hook)]
            hooked = calls()
            for hd in handles:
                hd.remove()
            deltas.append(hooked - bare)
        per_layer = max(0.0, sorted(deltas)[2]) / n
    else:
        t0 = time.thread_time()
        for _ in range(n):
            if h.iteration >= lay.next:
                lay._query()
        per_layer = (time.thread_time() - t0) / n
    t0 = time.thread_time()
    for _ in range(n):
        h._sync(run.model, ())
    sync = (time.thread_time() - t0) / n
    it = dlinspect.iteration()
    t0 = time.thread_time()
    for _ in range(n // 10):
        dt.step()
    stp = (time.thread_time() - t0) / (n // 10)
    dlinspect.initialize_training_step(it)
    h.iteration = it
    return per_layer * len(lays) + sync + stp


def main(argv=None):
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    if a.bench:
        bench(a)
    else:
        train(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
