"""Helpers of the dlinspect.torch tests (py-torch): skip without torch, read the statistics log."""
import os
import re
import sys
import tempfile

try:
    import torch  # noqa: F401
except ImportError:
    print("SKIP: torch is not importable in this Python", file=sys.stderr)
    sys.exit(77)

import dlinspect  # noqa: E402
import dlinspect.torch  # noqa: E402,F401

_LINE = re.compile(r" - INFO - (\S+)\s+iteration=(\d+)\s+value=(\S+)")
STD = ("activation", "gradient", "weight", "output", "wgrad", "dgrad")


def tmpdir():
    return tempfile.mkdtemp(prefix="dli-torch-test-")


def stats(log_dir):
    """[(name, iteration, value)] of the statistics log, in file order."""
    path = os.path.join(log_dir, "nvdlfw_inspect_statistics_logs", "nvdlfw_inspect_globalrank-0.log")
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            m = _LINE.search(line)
            if m:
                out.append((m.group(1), int(m.group(2)), float(m.group(3))))
    return out


class Checker:
    def __init__(self):
        self.failed = 0
        self.passed = 0

    def ok(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL: {what}", file=sys.stderr)
        return cond

    def close(self, got, want, rel, what):
        import math
        good = (math.isnan(got) and math.isnan(want)) or abs(got - want) <= rel * max(abs(want), 1e-30)
        return self.ok(good, f"{what}: got {got!r}, want {want!r}")

    def done(self):
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)
