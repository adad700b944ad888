"""The numpy reference for a strided view: the statistics dlinspect logged for the Q third of a
fused [T, 3h] tensor (passed with strides [3h, 1]) against numpy's on fused[:, :h], and the
DumpTensors file (a feature that gets the view's contiguous copy) against that slice, read with the
safetensors package."""
import glob
import math
import os
import re
import sys

import numpy as np
from safetensors.numpy import load_file

d = sys.argv[1]
fused = np.load(os.path.join(d, "fused.npy"))
h = fused.shape[1] // 3
view = fused[:, :h]
assert not view.flags["C_CONTIGUOUS"]
q = view.astype(np.float64)

logged = {}
for path in glob.glob(os.path.join(d, "nvdlfw_inspect_statistics_logs", "*.log")):
    for line in open(path):
        m = re.search(r"enc\.0\.fc1_activation_(\S+)\s+iteration=(\d+)\s+value=(\S+)", line)
        if m:
            logged[m.group(1)] = float(m.group(3))

a = np.abs(q)
nz = a[a > 0]
ref = {
    "min": q.min(), "max": q.max(), "mean": q.mean(), "std": q.std(ddof=1),
    "l1_norm": a.sum(), "l2_norm": math.sqrt((q * q).sum()), "cur_amax": a.max(),
    "dynamic_range": math.log2(a.max()) - math.log2(nz.min()),
    "nan_count": 0.0, "inf_count": 0.0, "zero%": 100.0 * (q == 0).sum() / q.size,
}
# The log prints %.9g: extrema, counts and percentages must agree to its 9 digits (they are exact
# in the kernels). Sums: the kernels add in float lanes inside blocks of 2048 elements and in
# double across blocks (docs/statistics.md), a relative error ~1e-7 of the sum of magnitudes in
# practice, so 1e-5 of that scale (of the mean of |x| for the mean, the value itself for std and
# the norms), as tests/stats-cli allows; a wrong view (another third, a shifted column) is off by
# far more.
scale = {"mean": a.mean(), "l1_norm": a.sum()}
bad = 0
for k, v in ref.items():
    got = logged.get(k)
    if k in ("min", "max", "cur_amax", "nan_count", "inf_count", "zero%", "dynamic_range"):
        tol = 1e-8 * abs(v) + 1e-30
    else:
        tol = 1e-5 * scale.get(k, abs(v))
    if got is None or not abs(got - v) <= tol:
        print(f"{k}: logged {got}, numpy {v!r}")
        bad += 1

dumps = glob.glob(os.path.join(d, "nvdlfw_inspect_tensor_dumps", "rank_0", "*.safetensors"))
if len(dumps) != 1:
    print("expected one dump file, found", dumps)
    bad += 1
else:
    t = load_file(dumps[0]).get("activation.high_precision")
    if t is None or t.shape != (fused.shape[0], h) or not np.array_equal(t, fused[:, :h]):
        print("the dumped activation is not fused[:, :h]")
        bad += 1
print(f"{len(ref) + 1} checks against numpy, {bad} failed")
sys.exit(1 if bad else 0)
