"""Checks one MPI run of reduce_rank (tests/mpi/run.sh): each rank's exact log against a reference
computed here over the concatenated shards of the tensor's group (in rank order), and the ranks of a
group against each other, bit for bit.

argv: <dir> <ranks> <tensor_parallel_size> <normal|fault>
"""
import glob
import math
import os
import re
import sys

import numpy as np

d, P, TP, MODE = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ITERS = 2
STATS = ["min", "max", "mean", "std", "var", "l1_norm", "l2_norm", "cur_amax", "dynamic_range",
         "nan_count", "inf_count", "zero%"]
FP8_STATS = ["underflows%", "overflows%", "scale_inv_min", "scale_inv_max", "mse", "cos_sim",
             "sqnr_db"]
EXACT = {"min", "max", "cur_amax", "nan_count", "inf_count", "zero%"}
errors = []


def err(msg):
    errors.append(msg)


def read_log(rank):
    vals, msgs = {}, []
    path = os.path.join(d, "exact-rank%d.txt" % rank)
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("S "):
                _, name, it, v = line.split(" ")
                key = (name, int(it))
                if key in vals:
                    err("rank %d: %s at iteration %s logged twice" % (rank, name, it))
                vals[key] = v
            elif line.startswith("M "):
                msgs.append(line[2:])
    return vals, msgs


def shard(layer, tensor, it, rank):
    out = []
    for mb in range(1 if tensor == "weight" else 2):
        p = os.path.join(d, "shard-%s-%s-%d-%d-%d.f32" % (layer, tensor, it, rank, mb))
        if os.path.exists(p):
            out.append(np.fromfile(p, dtype=np.float32))
    return out


def group(layer, tensor, rank, it):
    """The ranks whose shards make the logged value, and whether it is marked per rank."""
    if tensor == "weight":
        if layer == "fc2" or TP == 1:
            return [rank], False
        first = rank - rank % TP
        g = list(range(first, first + TP))
    else:
        g = list(range(P))
    if MODE == "fault" and it == 1 and P - 1 in g and len(g) > 1:
        return [rank], True  # not reduced: the last rank never joined this step
    return g, False


def reference(x):
    """The statistics of x (float32 values) in long double."""
    x = x.astype(np.longdouble)
    n = len(x)
    if n == 0:
        return None
    mean = x.sum() / n
    var = ((x - mean) ** 2).sum() / (n - 1) if n > 1 else float("nan")
    a = np.abs(x)
    nz = a[a != 0]
    return {
        "min": float(x.min()), "max": float(x.max()), "mean": float(mean),
        "var": float(var), "std": float(np.sqrt(var)), "l1_norm": float(a.sum()),
        "l2_norm": float(np.sqrt((x * x).sum())), "cur_amax": float(a.max()),
        "dynamic_range": float(np.log2(a.max()) - np.log2(nz.min())) if len(nz) else math.inf,
        "nan_count": 0.0, "inf_count": 0.0,
        "zero%": 100.0 * float(np.sum(x == 0)) / float(n),
    }


logs = {r: read_log(r) for r in range(P)}
d_ranks = d
d = os.path.join(d_ranks, "pooled")
pooled = read_log(0)[0]
d = d_ranks
checked = 0
for rank in range(P):
    vals, msgs = logs[rank]
    seen = set()
    for it in range(ITERS):
        if MODE == "fault" and it == 1 and rank == P - 1:
            continue  # it left before this step
        for layer in ("fc1", "fc2"):
            for tensor in ("activation", "gradient", "weight"):
                members, marked = group(layer, tensor, rank, it)
                x = np.concatenate([s for r in members for s in shard(layer, tensor, it, r)] or
                                   [np.zeros(0, np.float32)])
                ref = reference(x)
                mark = "_rank%d" % rank if marked else ""
                for stat in STATS:
                    name = "%s_%s_%s%s" % (layer, tensor, stat, mark)
                    key = (name, it)
                    seen.add(key)
                    if ref is None:
                        if key in vals:
                            err("rank %d: %s logged for an empty tensor" % (rank, name))
                        continue
                    if key not in vals:
                        err("rank %d: %s at iteration %d missing" % (rank, name, it))
                        continue
                    got = float.fromhex(vals[key])
                    want = ref[stat]
                    checked += 1
                    if stat in EXACT:
                        ok = got == want
                    elif stat == "dynamic_range":
                        # log2 of two exact extremes, subtracted: an absolute error (in bits)
                        # at double rounding, however small the difference.
                        ok = abs(got - want) <= 1e-12
                    elif stat == "mean":
                        # Its rounding error scales with the magnitudes added, not with the
                        # mean: relative to max(|mean|, std) (sum |x| / n is at most their sum).
                        ok = abs(got - want) <= 1e-12 * max(abs(want), ref["std"])
                    else:
                        # The independent reference over the whole tensor: the kernels sum f32
                        # in double lanes, so the shards' reduction holds the issue's 1e-12.
                        ok = math.isclose(got, want, rel_tol=1e-12, abs_tol=0)
                    if not ok:
                        err("rank %d: %s at iteration %d is %r, reference over ranks %s: %r"
                            % (rank, name, it, got, members, want))
                    # The single process over the same pieces of the whole tensor: only the
                    # order of the merges differs, so 1e-12 (and exact for the extrema and
                    # counts) holds the reduction itself to the rule.
                    if tensor != "weight" and len(members) == P:
                        pv = pooled.get(("%s_%s_%s" % (layer, tensor, stat), it))
                        if pv is None:
                            err("pooled run: %s at iteration %d missing" % (name, it))
                            continue
                        pv = float.fromhex(pv)
                        checked += 1
                        same = got == pv if stat in EXACT else \
                            math.isclose(got, pv, rel_tol=1e-12, abs_tol=0)
                        if not same:
                            err("rank %d: %s at iteration %d is %r, the single process's %r"
                                % (rank, name, it, got, pv))
        # LogFp8TensorStats (fc1 only): current scaling's what-if per piece, merged; held to
        # the single process over the same pieces (exact counts and scale range, 1e-12 else).
        for tensor in ("activation", "gradient"):
            members, marked = group("fc1", tensor, rank, it)
            if MODE == "fault" and it == 1 and rank == P - 1:
                continue
            for stat in FP8_STATS:
                name = "fc1_%s_fp8_current_scaling_%s%s" % (tensor, stat,
                                                          "_rank%d" % rank if marked else "")
                key = (name, it)
                seen.add(key)
                empty = sum(len(x) for r in members for x in shard("fc1", tensor, it, r)) == 0
                if empty:
                    if key in vals:
                        err("rank %d: %s logged for an empty tensor" % (rank, name))
                    continue
                if key not in vals:
                    err("rank %d: %s at iteration %d missing" % (rank, name, it))
                    continue
                if marked:
                    continue  # this rank's pieces only: the bit-identity check skips it too
                got = float.fromhex(vals[key])
                pv = pooled.get(("fc1_%s_fp8_current_scaling_%s" % (tensor, stat), it))
                checked += 1
                if pv is None:
                    err("pooled run: %s at iteration %d missing" % (name, it))
                    continue
                pv = float.fromhex(pv)
                exact = stat in ("underflows%", "overflows%", "scale_inv_min", "scale_inv_max")
                same = got == pv if exact else math.isclose(got, pv, rel_tol=1e-12, abs_tol=0)
                if not same:
                    err("rank %d: %s at iteration %d is %r, the single process's %r"
                        % (rank, name, it, got, pv))
                if stat == "underflows%" and tensor == "activation" and not got > 0:
                    err("rank %d: %s is %r: the data has underflows" % (rank, name, got))
    extra = set(vals) - seen
    if extra:
        err("rank %d: unexpected lines %s" % (rank, sorted(extra)[:5]))

# Bit-identical within a group: the same hex text on every member.
for rank in range(P):
    for (name, it), v in logs[rank][0].items():
        if name.endswith("_rank%d" % rank):
            continue
        m = re.match(r"(fc\d)_(activation|gradient|weight)_", name)
        for other in group(m.group(1), m.group(2), rank, it)[0]:
            ov = logs[other][0].get((name, it))
            if ov != v:
                err("rank %d and rank %d differ on %s at iteration %d: %s vs %s"
                    % (rank, other, name, it, v, ov))

# The collectives: one per group and step, two at a group's first step (the capacity).
if P > 1:
    for rank in range(P):
        msgs = logs[rank][1]
        world = "[0-%d]" % (P - 1) if P > 2 else "[0, 1]"
        lines = [m for m in msgs if "reduced across group %s:" % world in m]
        want_steps = 1 if MODE == "fault" else 2
        if len(lines) != want_steps:
            err("rank %d: %d DEBUG lines for group %s, expected %d: %s"
                % (rank, len(lines), world, want_steps, lines))
        for i, m in enumerate(lines):
            c = re.search(r": (\d+) records, (\d+) collective\(s\), (\d+) bytes", m)
            if not c or int(c.group(1)) != 6 or int(c.group(2)) != (2 if i == 0 else 1):
                err("rank %d: unexpected reduction line: %s" % (rank, m))
if MODE == "fault":
    for rank in range(P - 1):
        msgs = logs[rank][1]
        bad = [m for m in msgs if "were not reduced across group [0-3]" in m and
               "missing ranks [3]" in m and "iteration 1" in m]
        if not bad:
            err("rank %d: no message naming the group and the missing rank 3: %s"
                % (rank, [m for m in msgs if m.startswith("0 ")]))
    # The file logger's own files are there too, one per rank.
files = glob.glob(os.path.join(d, "nvdlfw_inspect_statistics_logs", "*globalrank-*.log"))
if len(files) != P:
    err("%d file-logger statistics files, expected %d" % (len(files), P))

if errors:
    print("\n".join(errors[:40]))
    print("%d problem(s), %d values checked" % (len(errors), checked))
    sys.exit(1)
print("%d ranks (%s): %d values equal to the reference, identical across each group"
      % (P, MODE, checked))
