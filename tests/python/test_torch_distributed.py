"""Statistics reduced across the ranks of a torchrun job through torch.distributed (gloo), with no
communicator named: dlinspect.initialize() finds torch.distributed initialized
(docs/distributed.md, "torch.distributed").

Each rank inspects its shard of two tensors (uneven shards, two microbatches, an empty shard at 3
ranks) for two steps. Every logged value (the exact logger's hex floats) must equal a long-double
numpy reference over the whole tensor (exact for min, max, amax and the counts; 1e-12 for the
moments, as tests/mpi/check.py: the kernels sum f32 in double lanes), one process fed the same pieces
(1e-12), and the other ranks' value bit for bit. At 4 ranks with tensor_parallel_size 2, a weight
split between the two ranks of each TP group is reduced within the group (messages between its
members alone; ranks 0 and 2 enter their two groups in opposite orders). At 4 ranks with
comm=<a ProcessGroup>, each data-parallel group [0, 2], [1, 3] is dlinspect's world: its values are
those of its two members' shards. At 4 ranks with set_tensor_reduction_group(<the rank's
data-parallel group>) after initialize and the layer's first handle (nvdlfw_inspect's and
TransformerEngine's call), the world is the communicator's and each DP group reduces alone, its
ranks logging under their world ranks. A run whose last rank
hangs at the second step: the others name it after DLINSPECT_COMM_TIMEOUT and log that step's
statistics per rank, marked.

argv: <dir of exact_logger.so>          (the driver: runs torchrun)
      worker <dir> <mode>               (one rank, under torchrun)
"""
import math
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

STATS = ["min", "max", "mean", "std", "var", "l1_norm", "l2_norm", "cur_amax", "dynamic_range",
         "nan_count", "inf_count", "zero%"]
EXACT = {"min", "max", "cur_amax", "nan_count", "inf_count", "zero%"}
TENSORS = ("activation", "gradient")
ITERS = 2
TIMEOUT_FAULT = 3
CONFIG = """
loggers: {exact: {}}
fc1_stats:
  enabled: true
  layers: {layer_name_regex_pattern: '^fc1$'}
  transformer_engine:
    LogTensorStats:
      enabled: true
      tensors: [%s]
      stats: [%s]
      freq: 1
      tensor_parallel_size: %d
"""
TP = 2  # mode "tp": 4 ranks, two tensor-parallel groups, each holding a weight in two shards


def tensors(mode):
    return TENSORS + ("weight",) if mode == "tp" else TENSORS


def config(mode):
    return CONFIG % (", ".join(tensors(mode)),
                     ", ".join("'zero%'" if s == "zero%" else s for s in STATS),
                     TP if mode == "tp" else 1)


def whole(tensor, it):
    """The whole tensor of a step: the same on every rank (a seeded generator)."""
    rng = np.random.default_rng(1000 * it + {"activation": 3, "gradient": 7, "weight": 11}[tensor])
    n = {"activation": 4099, "gradient": 1531, "weight": 777}[tensor]
    x = (rng.standard_normal(n) * (3.0 if tensor == "activation" else 1e-3)).astype(np.float32)
    x[rng.integers(0, n, 40)] = 0.0
    x[5] = -17.25 - it  # a known extreme
    return x


def pieces(tensor, it, rank, P):
    """This rank's shard, as its microbatches: uneven cuts; at 3 ranks rank 1's activation of
    step 0 is empty. A weight (mode tp) is split between the TP ranks, uneven, and the same on
    every data-parallel replica."""
    x = whole(tensor, it)
    if tensor == "weight":
        cut = len(x) * 2 // 5
        return [x[:cut] if rank % TP == 0 else x[cut:]]
    w = [r + 1 for r in range(P)]
    if P == 3 and tensor == "activation" and it == 0:
        w[1] = 0
    cuts = np.round(np.cumsum([0] + w) / sum(w) * len(x)).astype(int)
    s = x[cuts[rank]:cuts[rank + 1]]
    if tensor == "activation":
        h = len(s) // 3
        return [s[:h], s[h:]]
    return [s]


def close(stat, got, ref):
    """Whether a logged value equals the long-double reference: exactly for the extrema and the
    counts, to 1e-12 for the moments (the mean's error scales with the magnitudes added, so it is
    relative to max(|mean|, std); dynamic_range, a difference of two log2, is absolute)."""
    want = ref[stat]
    if stat in EXACT:
        return got == want
    if got is None:
        return False
    if stat == "dynamic_range":
        return abs(got - want) <= 1e-12
    if stat == "mean":
        return abs(got - want) <= 1e-12 * max(abs(want), ref["std"])
    return math.isclose(got, want, rel_tol=1e-12, abs_tol=0)


def reference(x):
    x = x.astype(np.longdouble)
    n = len(x)
    if n == 0:
        return None
    mean = x.sum() / n
    var = ((x - mean) ** 2).sum() / (n - 1) if n > 1 else float("nan")
    a = np.abs(x)
    nz = a[a != 0]
    return {
        "min": float(x.min()), "max": float(x.max()), "mean": float(mean), "var": float(var),
        "std": float(np.sqrt(var)), "l1_norm": float(a.sum()),
        "l2_norm": float(np.sqrt((x * x).sum())), "cur_amax": float(a.max()),
        "dynamic_range": float(np.log2(a.max()) - np.log2(nz.min())) if len(nz) else math.inf,
        "nan_count": 0.0, "inf_count": 0.0, "zero%": 100.0 * float(np.sum(x == 0)) / float(n),
    }


# ---- One rank ----

def worker(d, mode):
    import torch
    import torch.distributed as dist
    import dlinspect
    dist.init_process_group("gloo")
    rank, P = dist.get_rank(), dist.get_world_size()
    if mode == "pg":
        # comm=<a ProcessGroup>: each data-parallel group [0, 2], [1, 3] is dlinspect's world
        # (every rank makes both, in one order, as torch requires), logging to a dir of its own.
        dp = [dist.new_group([0, 2]), dist.new_group([1, 3])][rank % 2]
        d = os.path.join(d, f"dp{rank % 2}")
        os.makedirs(d, exist_ok=True)
        dlinspect.initialize(config=config(mode), log_dir=d, log_level="debug", comm=dp)
    else:
        dlinspect.initialize(config=config(mode), log_dir=d, log_level="debug")
    fc1 = dlinspect.layer("fc1")
    if mode == "rg":
        dp = [dist.new_group([0, 2]), dist.new_group([1, 3])][rank % 2]
        dlinspect.set_tensor_reduction_group(dp)
        assert dlinspect.get_tensor_reduction_group() is dp
    for it in range(ITERS):
        for t in tensors(mode):
            for p in pieces(t, it, rank, P):
                fc1.inspect_tensor(t, torch.from_numpy(p.copy()))
        if mode == "hang" and it == 1 and rank == P - 1:
            time.sleep(TIMEOUT_FAULT + 6)  # never reaches step(): the others give up on it
            os._exit(0)
        dlinspect.step()
    dlinspect.end_debug()
    if rank == 0 and mode not in ("pg", "rg"):
        # One process fed the same pieces in rank order, for the 1e-12 comparison (not the
        # weight: one process counts a weight once per step).
        pooled = os.path.join(d, "pooled")
        os.makedirs(pooled)
        dlinspect.initialize(config=config("normal"), log_dir=pooled, comm=False)
        fc1 = dlinspect.layer("fc1")
        for it in range(ITERS):
            for t in TENSORS:
                for r in range(P):
                    for p in pieces(t, it, r, P):
                        fc1.inspect_tensor(t, torch.from_numpy(p.copy()))
            dlinspect.step()
        dlinspect.end_debug()
    dist.destroy_process_group()


# ---- The driver ----

def read_log(path):
    vals, msgs = {}, []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("S "):
                _, name, it, v = line.split(" ")
                vals[(name, int(it))] = v
            elif line.startswith("M "):
                msgs.append(line[2:])
    return vals, msgs


def check(d, P, mode, errors):
    def err(m):
        errors.append(f"{P} ranks, {mode}: {m}")
    pooled = read_log(os.path.join(d, "pooled", "exact-rank0.txt"))[0]
    logs = {r: read_log(os.path.join(d, f"exact-rank{r}.txt")) for r in range(P)}
    checked = 0
    for rank in range(P):
        vals, msgs = logs[rank]
        if mode == "hang" and rank == P - 1:
            continue
        limit = TIMEOUT_FAULT if mode == "hang" else 60
        want_line = (f"statistics are reduced across ranks through communicator 'torch' "
                     f"(rank {rank} of {P}, time limit {limit:g} s")
        if not any(want_line in m for m in msgs):
            err(f"rank {rank}: no line '{want_line}' in {msgs[:3]}")
        seen = set()
        for it in range(ITERS):
            failed = mode == "hang" and it == 1
            for t in tensors(mode):
                if failed:
                    x = np.concatenate(pieces(t, it, rank, P))
                    mark = f"_rank{rank}"
                else:
                    x = whole(t, it)
                    mark = ""
                ref = reference(x)
                for stat in STATS:
                    key = (f"fc1_{t}_{stat}{mark}", it)
                    seen.add(key)
                    if key not in vals:
                        err(f"rank {rank}: {key} missing")
                        continue
                    got = float.fromhex(vals[key])
                    checked += 1
                    ok = close(stat, got, ref)
                    if not ok:
                        err(f"rank {rank}: {key} is {got!r}, numpy over the whole tensor: "
                            f"{ref[stat]!r}")
                    if failed:
                        continue
                    if t == "weight":
                        # Reduced within the TP group: the same bits on its members (and on
                        # the other group, which holds the same shards).
                        for other in range(P):
                            if logs[other][0].get(key) != vals[key]:
                                err(f"rank {rank} and {other} differ on {key}")
                        continue
                    pv = float.fromhex(pooled[(f"fc1_{t}_{stat}", it)])
                    same = got == pv if stat in EXACT else \
                        math.isclose(got, pv, rel_tol=1e-12, abs_tol=0)
                    if not same:
                        err(f"rank {rank}: {key} is {got!r}, one process fed the same "
                            f"pieces: {pv!r}")
                    for other in range(P):
                        if logs[other][0].get(key) != vals[key]:
                            err(f"rank {rank} and {other} differ on {key}: {vals[key]} vs "
                                f"{logs[other][0].get(key)}")
        extra = set(vals) - seen
        if extra:
            err(f"rank {rank}: unexpected values {sorted(extra)[:4]}")
        world = f"[0-{P - 1}]" if P > 2 else "[0, 1]"
        lines = [m for m in msgs if f"reduced across group {world}:" in m]
        want = [2, 1][:1 if mode == "hang" else 2]
        got = [int(re.search(r"(\d+) collective\(s\)", m).group(1)) for m in lines]
        if got != want:
            err(f"rank {rank}: collectives per step {got}, expected {want}: {lines}")
        if mode == "tp":
            tp = f"[{rank - rank % TP}, {rank - rank % TP + 1}]"
            got = [int(re.search(r"(\d+) collective\(s\)", m).group(1)) for m in msgs
                   if f"reduced across group {tp}:" in m]
            if got != [2, 1]:
                err(f"rank {rank}: collectives of TP group {tp} per step {got}, expected [2, 1]")
        if mode == "hang":
            bad = [m for m in msgs if "statistics of iteration 1 were not reduced across group "
                   f"{world} (communicator 'torch'): time limit reached, missing ranks [{P - 1}]"
                   in m]
            if not bad:
                err(f"rank {rank}: no ERROR naming the missing rank {P - 1}: "
                    f"{[m for m in msgs if m.startswith('0 ')]}")
    return checked


def check_pg(d, P, errors):
    """Mode pg: each DP group reduced alone, its members' logs named by their rank in it."""
    checked = 0
    for k in range(2):
        members = [k, k + 2]
        logs = [read_log(os.path.join(d, f"dp{k}", f"exact-rank{gr}.txt")) for gr in range(2)]
        for gr, (vals, msgs) in enumerate(logs):
            want = f"through communicator 'torch' (rank {gr} of 2,"
            if not any(want in m for m in msgs):
                errors.append(f"pg: group {members} rank {gr}: no line with '{want}'")
            for it in range(ITERS):
                for t in TENSORS:
                    x = np.concatenate([p for r in members for p in pieces(t, it, r, P)])
                    ref = reference(x)
                    for stat in STATS:
                        key = (f"fc1_{t}_{stat}", it)
                        got = float.fromhex(vals[key]) if key in vals else None
                        checked += 1
                        ok = close(stat, got, ref)
                        if not ok:
                            errors.append(f"pg: group {members} rank {gr}: {key} is {got!r}, numpy "
                                          f"over the group's shards: {ref[stat]!r}")
                        if logs[1 - gr][0].get(key) != vals.get(key):
                            errors.append(f"pg: group {members}: its ranks differ on {key}")
            if len(vals) != ITERS * len(TENSORS) * len(STATS):
                errors.append(f"pg: group {members} rank {gr}: {len(vals)} values logged")
    return checked


def check_rg(d, P, errors):
    """Mode rg: the tensor reduction group of each rank is its DP group; the logs are the world's."""
    checked = 0
    logs = {r: read_log(os.path.join(d, f"exact-rank{r}.txt")) for r in range(P)}
    for rank in range(P):
        members = [rank % 2, rank % 2 + 2]
        vals, msgs = logs[rank]
        want = f"through communicator 'torch' (rank {rank} of {P},"
        if not any(want in m for m in msgs):
            errors.append(f"rg: rank {rank}: no line with '{want}'")
        want = f"reduced across [{members[0]}, {members[1]}] from the next step on"
        if not any(want in m for m in msgs):
            errors.append(f"rg: rank {rank}: no line with '{want}'")
        for it in range(ITERS):
            for t in TENSORS:
                x = np.concatenate([p for r in members for p in pieces(t, it, r, P)])
                ref = reference(x)
                for stat in STATS:
                    key = (f"fc1_{t}_{stat}", it)
                    got = float.fromhex(vals[key]) if key in vals else None
                    checked += 1
                    if not close(stat, got, ref):
                        errors.append(f"rg: rank {rank}: {key} is {got!r}, numpy over the shards "
                                      f"of {members}: {ref[stat]!r}")
                    other = members[1] if rank == members[0] else members[0]
                    if logs[other][0].get(key) != vals.get(key):
                        errors.append(f"rg: ranks {members} differ on {key}")
        if len(vals) != ITERS * len(TENSORS) * len(STATS):
            errors.append(f"rg: rank {rank}: {len(vals)} values logged")
        lines = [m for m in msgs if f"reduced across group [{members[0]}, {members[1]}]:" in m]
        if len(lines) != ITERS:
            errors.append(f"rg: rank {rank}: {len(lines)} reductions across its DP group: {lines}")
    return checked


def main(exact_dir):
    errors = []
    env = dict(os.environ)
    env["DLINSPECT_PLUGIN_PATH"] = ":".join(
        p for p in (env.get("DLINSPECT_PLUGIN_PATH", ""), exact_dir) if p)
    env.pop("DLINSPECT_COMMUNICATOR", None)
    with tempfile.TemporaryDirectory() as top:
        for P, mode in ((2, "normal"), (3, "normal"), (4, "tp"), (4, "pg"), (4, "rg"),
                        (2, "hang")):
            d = os.path.join(top, f"{P}-{mode}")
            os.makedirs(d)
            env["DLINSPECT_COMM_TIMEOUT"] = str(TIMEOUT_FAULT if mode == "hang" else 60)
            t0 = time.monotonic()
            r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                "--nproc_per_node", str(P), os.path.abspath(__file__), "worker",
                                d, mode], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=600)
            took = time.monotonic() - t0
            if r.returncode != 0:
                errors.append(f"{P} ranks, {mode}: torchrun exited {r.returncode}:\n"
                              f"{r.stdout[-4000:]}")
                continue
            try:
                n = (check_pg(d, P, errors) if mode == "pg" else
                     check_rg(d, P, errors) if mode == "rg" else check(d, P, mode, errors))
            except (OSError, KeyError) as e:
                errors.append(f"{P} ranks, {mode}: {type(e).__name__}: {e}\n{r.stdout[-3000:]}")
                continue
            print(f"{P} ranks, {mode}: {n} values checked ({took:.1f} s)")
    if errors:
        print("\n".join(errors[:30]))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1])
