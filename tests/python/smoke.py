"""What a user does right after `pip install .`, from a directory outside the repository: the
installed package finds its own plugins, logs statistics of a numpy array, and they are right."""
import math
import os
import sys
import tempfile

import numpy as np

import dlinspect

repo = os.path.realpath(sys.argv[1])
where = os.path.realpath(dlinspect._dlinspect.__file__)
assert not where.startswith(repo + os.sep) or "--editable" in sys.argv, f"imported from the repo: {where}"
assert os.path.isdir(dlinspect.PACKAGE_PLUGIN_DIR), dlinspect.PACKAGE_PLUGIN_DIR
assert os.environ.get("DLINSPECT_PLUGIN_PATH", "") == ""
print("package:", os.path.dirname(where))
print("plugins:", dlinspect.PACKAGE_PLUGIN_DIR)

log_dir = tempfile.mkdtemp(prefix="dli-smoke-")
dlinspect.initialize(config="""
stats:
  enabled: true
  layers: {layer_name_regex_pattern: fc1}
  transformer_engine:
    LogTensorStats: {enabled: true, tensors: [activation], stats: [min, max, std], freq: 1}
""", log_dir=log_dir)
x = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32)
dlinspect.layer("model.fc1").inspect_tensor("activation", x)
dlinspect.step()
dlinspect.end_debug()
path = os.path.join(log_dir, "nvdlfw_inspect_statistics_logs", "nvdlfw_inspect_globalrank-0.log")
got = {}
for line in open(path):
    name = line.split(" - INFO - ")[1].split()[0]
    got[name] = float(line.rsplit("value=", 1)[1])
ref = {"min": float(x.min()), "max": float(x.max()), "std": float(x.astype(np.float64).std(ddof=1))}
for k, v in ref.items():
    g = got[f"model.fc1_activation_{k}"]
    assert math.isclose(g, v, rel_tol=1e-6), (k, g, v)
print("smoke: statistics logged and equal numpy's:", {k: got[f"model.fc1_activation_{k}"] for k in ref})
