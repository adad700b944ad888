"""Checks the jsonl logger's file from the demo run in test_plugins_examples.sh.

Every line must be JSON with name, iteration and value. The ClampOutliers counts must equal
counts recomputed here from the demo's own data (examples/demo.c: splitmix64, seeded per step and
Linear). The same scalars must also be in the file logger's statistics log.

With --edge, checks instead the file jsonl_edge.c wrote: non-finite values as the strings "NaN",
"Infinity" and "-Infinity" (docs/plugins.md), names escaped, exact values.

With --stats, checks the file logger's log of a run of docs/plugins.md's statistics feature on
every fc1 activation (stats: [min, max]) against the demo's data recomputed here.

usage: check_output.py JSONL FILE_LOG
       check_output.py --edge JSONL
       check_output.py --stats FILE_LOG
"""
import json
import re
import struct
import sys

STEPS, LAYERS, DIM = 3, 4, 64
LINEARS = ["self_attention.qkv", "self_attention.proj", "mlp.fc1", "mlp.fc2"]
M64 = (1 << 64) - 1


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def fill(seed, scale):
    """examples/demo.c fill(): DIM*DIM floats, scale * uniform[-1, 1) (scale a power of 2)."""
    state, out = seed, []
    for _ in range(DIM * DIM):
        state = (state + 0x9E3779B97F4A7C15) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        out.append(scale * f32((z >> 11) / 9007199254740992.0 * 2.0 - 1.0))
    return out


def clamped(values, max_abs):
    m = f32(max_abs)
    return sum(1 for v in values if abs(v) > m)


def expected():
    want = {}
    for s in range(STEPS):
        for layer in range(LAYERS):
            i = layer * len(LINEARS) + LINEARS.index("mlp.fc1")
            name = f"model.layers.{layer}.mlp.fc1_activation_clamped"
            want[(name, s)] = clamped(fill(s * 1000003 + i, 1.0), 0.9)
        # The weight is clamped for fprop and for dgrad: two calls a step, counts added.
        name = "model.layers.0.self_attention.qkv_weight_clamped"
        want[(name, s)] = 2 * clamped(fill(1000 + 0, 0.125), 0.1)
    return want


def main(jsonl, file_log):
    ok = True
    got = {}
    with open(jsonl, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                rec = json.loads(line)
            except ValueError as e:
                print(f"FAIL: {jsonl}:{n}: not JSON ({e}): {line!r}")
                ok = False
                continue
            if sorted(rec) != ["iteration", "name", "value"]:
                print(f"FAIL: {jsonl}:{n}: keys {sorted(rec)}")
                ok = False
                continue
            got[(rec["name"], rec["iteration"])] = rec["value"]

    want = expected()
    clamp_got = {k: v for k, v in got.items() if k[0].endswith("_clamped")}
    if clamp_got != want:
        for k in sorted(set(want) | set(clamp_got)):
            if want.get(k) != clamp_got.get(k):
                print(f"FAIL: {k[0]} at {k[1]}: expected {want.get(k)}, got {clamp_got.get(k)}")
        ok = False
    if not all(0 < v < DIM * DIM for v in want.values()):
        print("FAIL: the config's max_abs should clamp some elements but not all")
        ok = False

    line_re = re.compile(r" - INFO - (\S+) \t+ iteration=(\d+) \t+ value=(\S+)$")
    logged = {}
    with open(file_log, encoding="utf-8") as f:
        for line in f:
            m = line_re.search(line.rstrip("\n"))
            if m:
                logged[(m.group(1), int(m.group(2)))] = float(m.group(3))
    if logged != {k: float(v) for k, v in got.items()}:
        print(f"FAIL: the JSONL file and the file logger disagree:\n  jsonl: {got}\n  file: {logged}")
        ok = False
    if ok:
        print(f"ok: {len(got)} JSON lines, {len(want)} clamp counts as expected")
    return 0 if ok else 1


def edge(jsonl):
    want = [
        {"name": "nan", "iteration": 1, "value": "NaN"},
        {"name": "inf", "iteration": 2, "value": "Infinity"},
        {"name": "-inf", "iteration": 3, "value": "-Infinity"},
        {"name": 'q"b\\s/\t\n\x01', "iteration": 4, "value": 0.1},
        {"name": "big", "iteration": 5000000000, "value": -1e300},
    ]
    with open(jsonl, encoding="utf-8") as f:
        lines = f.read().splitlines()
    try:
        # parse_constant: the bare tokens NaN/Infinity are not JSON; the logger must not write them.
        got = [json.loads(line, parse_constant=lambda c: f"bare {c}") for line in lines]
    except ValueError as e:
        print(f"FAIL: {jsonl}: not JSON Lines ({e}):", *lines, sep="\n  ")
        return 1
    if got != want:
        print(f"FAIL: {jsonl}:", *lines, sep="\n  ")
        return 1
    print("ok: NaN, infinities, escapes and large iterations")
    return 0


def stats(file_log):
    """min and max of every fc1 activation at every step, as the demo feeds them unclamped."""
    want = {}
    for s in range(STEPS):
        for layer in range(LAYERS):
            values = fill(s * 1000003 + layer * len(LINEARS) + LINEARS.index("mlp.fc1"), 1.0)
            want[(f"model.layers.{layer}.mlp.fc1_activation_min", s)] = min(values)
            want[(f"model.layers.{layer}.mlp.fc1_activation_max", s)] = max(values)
    line_re = re.compile(r" - INFO - (\S+) \t+ iteration=(\d+) \t+ value=(\S+)$")
    got = {}
    with open(file_log, encoding="utf-8") as f:
        for line in f:
            m = line_re.search(line.rstrip("\n"))
            if m:
                got[(m.group(1), int(m.group(2)))] = float(m.group(3))
    bad = [k for k in sorted(set(want) | set(got))
           if k not in want or k not in got or abs(got[k] - want[k]) > 1e-6 * abs(want[k])]
    for k in bad:
        print(f"FAIL: {k[0]} at {k[1]}: expected {want.get(k)}, got {got.get(k)}")
    if not bad:
        print(f"ok: {len(got)} statistics of the page's feature as expected")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--stats"]:
        sys.exit(stats(sys.argv[2]))
    if sys.argv[1:2] == ["--edge"]:
        sys.exit(edge(sys.argv[2]))
    sys.exit(main(*sys.argv[1:]))
