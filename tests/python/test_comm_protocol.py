"""initialize(comm=...) with a communicator written in Python (docs/distributed.md,
"torch.distributed"): the extension's C table (python/pycomm.c) calls its methods from dli_step,
taking the GIL, and turns its exceptions into the core's errors. No torch: this runs in every
build, ASan included.

The communicator says it is rank 0 of 2 and plays rank 1 itself by sending back this rank's own
record twice, so the reduced statistics are those of the tensor concatenated with itself (numpy
reference). Then its failures: a time-out naming rank 1 (the step is logged per rank, marked), a
foreign exception, a reply of the wrong size, a group that cannot be made; the doctor's C entry
points; and initialize()'s refusals."""
import math
import os
import sys
import tempfile

import numpy as np

import dlinspect
from dlinspect import _dlinspect as _c
from dlinspect.distributed import CommError

HERE = os.path.dirname(os.path.abspath(dlinspect.__file__))
# The exact logger (tests/mpi) of this build: hex floats, messages included.
EXACT_DIR = os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "mpi")
STATS = ["min", "max", "mean", "var", "l1_norm", "l2_norm", "cur_amax", "zero%"]
CONFIG = {
    "loggers": {"exact": {}},
    "s": {"enabled": True, "layers": {"layer_name_regex_pattern": "^fc1$"},
          "transformer_engine": {"LogTensorStats": {"enabled": True, "tensors": ["activation"],
                                                    "stats": STATS, "freq": 1}}},
}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


class Mirror:
    """Rank 0 of 2; rank 1 sends what rank 0 sends."""

    name = "mirror"

    def __init__(self, mode="ok", rank=0, size=2):
        self.rank, self.size, self.mode = rank, size, mode
        self.calls = []

    def group(self, ranks):
        self.calls.append(("group", ranks))
        if self.mode == "nogroup":
            raise CommError("no such group here")
        return ("g", ranks)

    def allgather(self, g, data, timeout):
        self.calls.append(("allgather", g, len(data), timeout))
        assert isinstance(data, bytes)
        if self.mode == "timeout":
            raise CommError(f"time limit of {timeout:g} s reached: rank 1 is asleep",
                            timed_out=True, missing=[1])
        if self.mode == "foreign":
            raise ZeroDivisionError("the backend fell over")
        if self.mode == "short":
            return data
        return data * len(g[1])

    def barrier(self, g, timeout):
        self.allgather(g, b"\1", timeout)


def read_log(d):
    vals, msgs = {}, []
    with open(os.path.join(d, "exact-rank0.txt")) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("S "):
                _, name, it, v = line.split(" ")
                vals[(name, int(it))] = float.fromhex(v)
            elif line.startswith("M "):
                msgs.append(line[2:])
    return vals, msgs


def reference(x):
    x = x.astype(np.longdouble)
    n = len(x)
    mean = x.sum() / n
    a = np.abs(x)
    return {"min": float(x.min()), "max": float(x.max()), "mean": float(mean),
            "var": float(((x - mean) ** 2).sum() / (n - 1)), "l1_norm": float(a.sum()),
            "l2_norm": float(np.sqrt((x * x).sum())), "cur_amax": float(a.max()),
            "zero%": 100.0 * float(np.sum(x == 0)) / n, "n": n}


def run(mode, x):
    d = tempfile.mkdtemp()
    comm = Mirror(mode)
    dlinspect.initialize(config=CONFIG, log_dir=d, feature_dirs=[EXACT_DIR], log_level="debug",
                         comm=comm)
    fc1 = dlinspect.layer("fc1")
    fc1.inspect_tensor("activation", x[: len(x) // 2])
    fc1.inspect_tensor("activation", x[len(x) // 2:])
    dlinspect.step()
    dlinspect.end_debug()
    return read_log(d), comm


def compare(vals, ref, suffix, what):
    for s in STATS:
        got = vals.get((f"fc1_activation_{s}{suffix}", 0))
        want = ref[s]
        if s in ("min", "max", "cur_amax", "zero%"):
            ok = got == want
        else:
            tol = 1e-6 * ref["l1_norm"] / ref["n"] if s == "mean" else 0
            ok = got is not None and math.isclose(got, want, rel_tol=1e-6, abs_tol=tol)
        check(ok, f"{what}: {s}{suffix} is {got}, numpy: {want}")


def main():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(1000) * 2).astype(np.float32)
    x[::97] = 0

    # The mirror: every value is that of x twice over; the core's messages name the communicator.
    (vals, msgs), comm = run("ok", x)
    compare(vals, reference(np.concatenate([x, x])), "", "reduced")
    check(any("through communicator 'mirror' (rank 0 of 2, time limit 300 s" in m for m in msgs),
          f"no announcement naming 'mirror': {msgs[:3]}")
    check(any("reduced across group [0, 1]: 1 records, 2 collective(s)" in m for m in msgs),
          f"no DEBUG line of the reduction: {[m for m in msgs if 'reduced' in m]}")
    gathers = [c for c in comm.calls if c[0] == "allgather"]
    check(len(gathers) == 2 and all(c[3] == 300 for c in gathers),
          f"two all-gathers (capacity, then records) with the default limit: {comm.calls}")
    check(comm.calls[0] == ("group", (0, 1)), f"the group of the world first: {comm.calls[:1]}")

    # A time-out naming rank 1: the step is this rank's own, marked, and the ERROR says who.
    (vals, msgs), _ = run("timeout", x)
    compare(vals, reference(x), "_rank0", "timed out")
    check(any("(communicator 'mirror'): time limit reached, missing ranks [1]" in m
              for m in msgs), f"no ERROR naming rank 1: {msgs}")
    check(any("communicator 'mirror': time limit of 300 s reached: rank 1 is asleep" in m
              for m in msgs), f"the communicator's own text is not logged: {msgs}")

    # Foreign exceptions and a reply of the wrong size: per rank, the type named.
    for mode, text in (("foreign", "allgather(): ZeroDivisionError: the backend fell over"),
                       ("short", "bytes, expected 2 members'"),
                       ("nogroup", "could not make group [0, 1]: no such group here")):
        (vals, msgs), _ = run(mode, x)
        compare(vals, reference(x), "_rank0", mode)
        check(any(text in m for m in msgs), f"{mode}: no message with {text!r}: {msgs}")

    # The doctor's entry points: the same table, from C with the GIL released.
    m = Mirror()
    check(_c._comm_allgather(m, (0, 1), b"abc", 2.5) == b"abcabc", "_comm_allgather")
    check(_c._comm_barrier(m, [0, 1], 2.5) is None, "_comm_barrier")
    try:
        _c._comm_allgather(Mirror("timeout"), (0, 1), b"abc", 1.5)
        check(False, "_comm_allgather of a time-out raised nothing")
    except dlinspect.Error as e:
        check(e.code == -110 and e.missing == [1] and "rank 1 is asleep" in e.message,
              f"time-out: code {e.code}, missing {e.missing}, {e.message!r}")
    try:
        _c._comm_barrier(Mirror("foreign"), (0, 1), 1.5)
        check(False, "_comm_barrier of a foreign exception raised nothing")
    except dlinspect.Error as e:
        check(e.code == -5 and e.missing == [] and "ZeroDivisionError" in e.message,
              f"foreign: code {e.code}, {e.message!r}")

    # initialize()'s refusals.
    def refused(exc, text, **kw):
        try:
            dlinspect.initialize(config=CONFIG, log_dir=tempfile.mkdtemp(),
                                 feature_dirs=[EXACT_DIR], **kw)
        except exc as e:
            check(text in str(e), f"{kw}: {e!r} lacks {text!r}")
        else:
            dlinspect.end_debug()
            check(False, f"{kw}: accepted")
    refused(dlinspect.Error, "communicator 'mirror' says rank 3 of 2", comm=Mirror(rank=3))
    refused(TypeError, "has no group() method", comm=object())
    refused(ValueError, "comm must be None, False", comm="mpi")
    os.environ["DLINSPECT_COMMUNICATOR"] = "torch"
    refused(ValueError, "comm=False), but DLINSPECT_COMMUNICATOR=torch", comm=False)
    del os.environ["DLINSPECT_COMMUNICATOR"]
    check(not dlinspect.is_initialized(), "a refused initialize left a context")

    # Without a communicator (comm=False) in a job whose host initialized torch.distributed:
    # the log files are named by torch's rank, as nvdlfw_inspect's, not all rank 0's. A stand-in
    # torch.distributed says rank 3 of 4.
    import types
    fake = types.ModuleType("torch.distributed")
    fake.is_available = lambda: True
    fake.is_initialized = lambda: True
    fake.get_rank = lambda group=None: 3
    fake.get_world_size = lambda group=None: 4
    sys.modules["torch.distributed"] = fake
    try:
        d = tempfile.mkdtemp()
        dlinspect.initialize(config=CONFIG, log_dir=d, feature_dirs=[EXACT_DIR], comm=False)
        dlinspect.inspect_tensor("fc1", "activation", np.ones(8, np.float32))
        dlinspect.step()
        dlinspect.end_debug()
        check(os.path.exists(os.path.join(d, "exact-rank3.txt")) and
              not os.path.exists(os.path.join(d, "exact-rank0.txt")),
              f"comm=False under torch.distributed rank 3: files {sorted(os.listdir(d))}")
    finally:
        del sys.modules["torch.distributed"]

    if failures:
        print(f"{len(failures)} failure(s)")
        sys.exit(1)
    print("ok")


main()
