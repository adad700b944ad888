"""The dlinspect package from Python: statistics through the Python path against numpy and
ml_dtypes (read back from the file logger), the tensor paths (DLPack versioned and legacy, buffer
protocol, numpy's array interface for ml_dtypes), non-contiguous input, wrong dtypes, no reference
kept after a call, config errors with file:line:column, initialize from a file, a YAML string and
a dict, end_debug twice, the handle and by-name call sets and their schedules."""
import array
import errno
import gc
import math
import os
import re
import subprocess
import sys
import tempfile
import traceback
import weakref

import ml_dtypes
import numpy as np

import dlinspect

STATS = ["min", "max", "mean", "std", "var", "l1_norm", "l2_norm", "cur_amax", "dynamic_range",
         "nan_count", "inf_count", "zero%"]

LINE = re.compile(r"^\S+ \S+ - INFO - (\S+) \t\t\t\t iteration=(\d+) \t\t\t\t value=(\S+)$")


def stats_config(tensors=("activation",), stats=STATS, freq=1, regex=".*"):
    return {
        "stats": {
            "enabled": True,
            "layers": {"layer_name_regex_pattern": regex},
            "transformer_engine": {
                "LogTensorStats": {"enabled": True, "tensors": list(tensors),
                                   "stats": list(stats), "freq": freq},
            },
        }
    }


def read_stats(log_dir):
    """{(name, iteration): value} from the file logger's statistics log (docs/logging.md)."""
    path = os.path.join(log_dir, "nvdlfw_inspect_statistics_logs", "nvdlfw_inspect_globalrank-0.log")
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            m = LINE.match(line.rstrip("\n"))
            assert m, f"unexpected statistics line {line!r}"
            out[(m.group(1), int(m.group(2)))] = float(m.group(3))
    return out


def reference(x):
    """Each statistic of x (any float dtype) computed in float64 by numpy."""
    v = np.asarray(x, dtype=np.float64).ravel()
    n = v.size
    a = np.abs(v)
    nz = a[a != 0]
    return {
        "min": v.min(), "max": v.max(), "mean": v.mean(), "std": v.std(ddof=1),
        "var": v.var(ddof=1), "l1_norm": a.sum(), "l2_norm": math.sqrt((v * v).sum()),
        "cur_amax": a.max(),
        "dynamic_range": math.log2(a.max()) - math.log2(nz.min()) if nz.size else math.inf,
        "nan_count": float(np.isnan(v).sum()), "inf_count": float(np.isinf(v).sum()),
        "zero%": 100.0 * (v == 0).sum() / n,
    }


def assert_stats(got, layer, tensor, it, x):
    ref = reference(x)
    for s in STATS:
        key = (f"{layer}_{tensor}_{s}", it)
        assert key in got, f"{key} not logged; logged: {sorted(got)[:8]}..."
        r, g = ref[s], got[key]
        # The pass sums in float lanes within blocks and the log keeps 9 digits.
        assert math.isclose(g, r, rel_tol=2e-6, abs_tol=1e-6), f"{key}: dlinspect {g!r}, numpy {r!r}"


class Run:
    """A context in a fresh log dir, closed on exit."""

    def __init__(self, config=None, **kw):
        self.dir = tempfile.mkdtemp(prefix="dli-py-")
        self.config, self.kw = config, kw

    def __enter__(self):
        dlinspect.initialize(config=self.config, log_dir=self.dir, **self.kw)
        return self

    def __exit__(self, *exc):
        dlinspect.end_debug()

    def stats(self):
        return read_stats(self.dir)


def sample(shape=(64, 33), seed=1):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3 + 0.5).astype(np.float32)
    x.ravel()[::7] = 0  # zeros for zero%, and a min nonzero |x| for dynamic_range
    return x


# ---- tests ----

def test_stats_f32_handle_and_name():
    x = sample()
    with Run(stats_config()) as r:
        dlinspect.layer("model.fc1").inspect_tensor("activation", x)
        dlinspect.inspect_tensor("model.fc2", "activation", x)  # by name
        dlinspect.transformer_engine.inspect_tensor(layer_name="model.fc3", tensor_name="activation",
                                                    tensor=x, iteration=0)
        dlinspect.step()
    got = r.stats()
    for layer in ("model.fc1", "model.fc2", "model.fc3"):
        assert_stats(got, layer, "activation", 0, x)


def test_stats_bf16_ml_dtypes():
    x = sample(seed=2).astype(ml_dtypes.bfloat16)  # no DLPack, no buffer: the array interface
    with Run(stats_config()) as r:
        dlinspect.layer("l").inspect_tensor("activation", x)
        dlinspect.step()
    assert_stats(r.stats(), "l", "activation", 0, x.astype(np.float64))


def test_stats_f16_and_fp8_dtypes():
    x16 = sample(seed=3).astype(np.float16)
    x8 = np.clip(sample(seed=4), -400, 400).astype(ml_dtypes.float8_e4m3fn)
    x5 = sample(seed=5).astype(ml_dtypes.float8_e5m2)
    with Run(stats_config(tensors=("activation", "gradient", "output"))) as r:
        L = dlinspect.layer("l")
        L.inspect_tensor("activation", x16)
        L.inspect_tensor("gradient", x8)
        L.inspect_tensor("output", x5)
        dlinspect.step()
    got = r.stats()
    assert_stats(got, "l", "activation", 0, x16.astype(np.float64))
    assert_stats(got, "l", "gradient", 0, x8.astype(np.float64))
    assert_stats(got, "l", "output", 0, x5.astype(np.float64))


def test_buffer_protocol():
    x = sample(shape=(1000,), seed=6)
    buf = array.array("f", x.tolist())  # no __dlpack__: the buffer protocol
    assert not hasattr(buf, "__dlpack__")
    with Run(stats_config()) as r:
        dlinspect.layer("l").inspect_tensor("activation", buf)
        dlinspect.step()
    assert_stats(r.stats(), "l", "activation", 0, x)


class DLPackOnly:
    """Exports an array through DLPack alone; `legacy` refuses max_version like a pre-1.0
    producer, so the consumer must fall back to the unversioned capsule."""

    def __init__(self, arr, legacy=False):
        self.arr, self.legacy, self.calls = arr, legacy, []

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()

    def __dlpack__(self, stream=None, max_version=None, **kw):
        if self.legacy and max_version is not None:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        self.calls.append(max_version)
        cap = self.arr.__dlpack__() if max_version is None else self.arr.__dlpack__(max_version=max_version)
        self.capsule_name = re.search(r'"(\w+)"', repr(cap)).group(1)
        return cap


def test_dlpack_versioned_and_legacy_and_no_reference_kept():
    for legacy in (False, True):
        x = sample(seed=7)
        ref = reference(x)
        arr = x.copy()
        alive = weakref.ref(arr)
        src = DLPackOnly(arr, legacy=legacy)
        before = sys.getrefcount(arr)
        with Run(stats_config()) as r:
            dlinspect.layer("l").inspect_tensor("activation", src)
            assert src.capsule_name == ("dltensor" if legacy else "dltensor_versioned"), src.capsule_name
            assert src.calls == [None] if legacy else src.calls[0] == (1, 1), src.calls
            # The capsule's deleter ran: the array's count is back, and freeing it frees it.
            assert sys.getrefcount(arr) == before, (sys.getrefcount(arr), before)
            del src, arr
            gc.collect()
            assert alive() is None, "the array outlived the call: a reference was kept"
            dlinspect.step()  # statistics of a freed tensor: computed during the call
        got = r.stats()
        assert math.isclose(got[("l_activation_max", 0)], ref["max"], rel_tol=1e-7)
        assert math.isclose(got[("l_activation_std", 0)], ref["std"], rel_tol=2e-6)


def test_numpy_refcount_after_call():
    x = sample(seed=8)
    before = sys.getrefcount(x)
    with Run(stats_config()):
        for _ in range(100):
            dlinspect.layer("l").inspect_tensor("activation", x)
        assert sys.getrefcount(x) == before


def test_non_contiguous_is_copied():
    x = sample(shape=(40, 30), seed=9)
    with Run(stats_config(tensors=("activation", "gradient", "output"))) as r:
        L = dlinspect.layer("l")
        L.inspect_tensor("activation", x.T)          # transposed
        L.inspect_tensor("gradient", x[:, ::3])      # strided
        L.inspect_tensor("output", x[::-2, 1:])      # negative strides
        dlinspect.step()
    got = r.stats()
    assert_stats(got, "l", "activation", 0, x.T)
    assert_stats(got, "l", "gradient", 0, x[:, ::3])
    assert_stats(got, "l", "output", 0, x[::-2, 1:])


def test_column_block_views_match_their_copies():
    # Q, K and V thirds of a fused [T, 3h] output go to the core as strided views (inner dim
    # contiguous, runs of h floats): the same statistics, to the last printed digit, as their
    # contiguous copies, and numpy's.
    T, h = 48, 160
    fused = sample(shape=(T, 3 * h), seed=11)
    with Run(stats_config(tensors=("activation", "gradient", "weight", "output", "wgrad",
                                   "dgrad"))) as r:
        L = dlinspect.layer("l")
        for k, (view, copy) in enumerate((("activation", "gradient"), ("weight", "output"),
                                          ("wgrad", "dgrad"))):
            part = fused[:, k * h:(k + 1) * h]
            assert not part.flags["C_CONTIGUOUS"]
            L.inspect_tensor(view, part)
            L.inspect_tensor(copy, np.ascontiguousarray(part))
        dlinspect.step()
    got = r.stats()
    for k, (view, copy) in enumerate((("activation", "gradient"), ("weight", "output"),
                                      ("wgrad", "dgrad"))):
        assert_stats(got, "l", view, 0, fused[:, k * h:(k + 1) * h])
        for s in STATS:
            assert got[(f"l_{view}_{s}", 0)] == got[(f"l_{copy}_{s}", 0)], (view, s)


def test_wrong_dtype_is_a_type_error():
    cases = [np.zeros(4, np.complex64), np.zeros(4, bool), np.zeros(4, np.uint16),
             np.zeros(4, np.int16)]
    with Run(stats_config()):
        L = dlinspect.layer("l")
        for a in cases:
            try:
                L.inspect_tensor("activation", a)
            except TypeError as e:
                name = {np.complex64: "complex64", np.bool_: "bool", np.uint16: "uint16",
                        np.int16: "int16"}[a.dtype.type]
                assert name in str(e), str(e)
            else:
                raise AssertionError(f"{a.dtype} accepted")
        for bad in (object(), [1.0, 2.0], "text"):
            try:
                L.inspect_tensor("activation", bad)
            except TypeError as e:
                assert "DLPack" in str(e) or "buffer" in str(e), str(e)
            else:
                raise AssertionError(f"{bad!r} accepted")


def test_nothing_selected_touches_no_tensor():
    # A layer no section selects: inspect_tensor returns before reading its argument.
    with Run(stats_config(regex="^selected$")) as r:
        assert dlinspect.layer("other").inspect_tensor("activation", object()) is None
        assert dlinspect.inspect_tensor_enabled("other", "activation") is False
        assert dlinspect.fp8_gemm_enabled("other", "fprop") is True
        dlinspect.step()
    assert r.stats() == {}


def test_schedule_and_next():
    x = sample(seed=10)
    with Run(stats_config(freq=3)) as r:
        L = dlinspect.layer("l")
        seen = []
        for it in range(7):
            assert dlinspect.iteration() == it
            on, nxt = L.inspect_tensor_enabled("activation", next=True)
            assert on == (it % 3 == 0), (it, on)
            # The first iteration whose answer may differ: the next one after a selected
            # iteration, the next multiple of freq otherwise.
            assert nxt == (it + 1 if on else (it // 3 + 1) * 3), (it, nxt)
            assert L.inspect_tensor_enabled("activation", iteration=it) is on
            p = L.plan()
            assert p.iteration == it and p.any == on and p.next == nxt, p
            assert p.inspect == (frozenset({"activation"}) if on else frozenset()), p
            if on:
                seen.append(it)
            L.inspect_tensor("activation", x * (it + 1))
            dlinspect.step()
        try:
            L.inspect_tensor_enabled("activation", iteration=3)
        except ValueError as e:
            assert "iteration=3" in str(e) and "7" in str(e), str(e)
        else:
            raise AssertionError("a wrong iteration was accepted")
    got = r.stats()
    assert sorted({k[1] for k in got}) == [0, 3, 6]
    for it in (0, 3, 6):
        assert_stats(got, "l", "activation", it, x * np.float32(it + 1))


def test_transformer_engine_namespace_answers_as_its_api_does():
    """debug_api.transformer_engine.*_enabled answer TransformerEngine's (bool, next iteration),
    None where the answer never changes, as its namespace API does (its tests read answer[0];
    its layers skip every call until the next iteration). dlinspect's own calls keep their bool."""
    te = dlinspect.transformer_engine
    # Without a context: TransformerEngine's defaults.
    assert te.fp8_gemm_enabled("l", gemm="fprop", iteration=0) == (True, None)
    assert te.inspect_tensor_enabled("l", tensor_name="activation", iteration=0) == (False, None)
    cfg = {"s": {"enabled": True, "layers": {"layer_types": ["qkv"]},
                 "transformer_engine": {
                     "DisableFP8GEMM": {"enabled": True, "gemms": ["dgrad"]},
                     "LogTensorStats": {"enabled": True, "stats": ["max"],
                                        "tensors": ["activation"], "freq": 3, "start_step": 1}}}}
    with Run(cfg):
        for it in range(5):
            kw = {"layer_name": "m.qkv", "iteration": it}
            assert te.fp8_gemm_enabled(gemm="fprop", **kw) == (True, None), it
            # Not the default: TE must run the layer's debug path again next iteration, as
            # its own DisableFP8GEMM answers (False, iteration + 1).
            assert te.fp8_gemm_enabled(gemm="dgrad", **kw) == (False, it + 1), it
            assert te.fp8_gemm_enabled("m.qkv", "dgrad", it)[0] is False, it
            on = it == 3
            assert te.inspect_tensor_enabled(tensor_name="activation", **kw) == \
                (on, it + 1 if on else 3 if it < 3 else 6), it
            assert te.modify_tensor_enabled(gemm="fprop", tensor_name="activation", **kw) == \
                (False, None), it
            assert te.inspect_tensor_postquantize_enabled(
                gemm="fprop", tensor_name="activation", **kw) == (False, None), it
            assert dlinspect.fp8_gemm_enabled("m.qkv", "dgrad") is False
            assert dlinspect.inspect_tensor_enabled("m.qkv", "activation") is on
            dlinspect.step()


def test_transformer_engine_layers_miss_no_iteration_a_feature_acts_in():
    """TransformerEngine's layers (module/base.py, debug_quantization.py) run their debug path in
    an iteration only if the answers of the last iteration they ran it in named it (the least
    next iteration; none ever again when every answer says None), and there ask every call.
    Played over 40 iterations of schedules with every kind of answer, they must run it in every
    iteration where one of dlinspect's own answers is not the default, and so act on it."""
    te = dlinspect.transformer_engine
    cfg = {
        "stats": {"enabled": True, "layers": {"layer_types": ["fc1"]},
                  "transformer_engine": {
                      "LogTensorStats": {"enabled": True, "stats": ["max"], "tensors": ["activation"],
                                         "freq": 4, "start_step": 3, "end_step": 20},
                      "LogFp8TensorStats": {"enabled": True, "stats": ["underflows%"],
                                            "tensors": ["gradient"],
                                            "start_end_list": [[5, 6], [30, 31]]}}},
        "fp8": {"enabled": True, "layers": {"layer_types": ["fc2"]},
                "transformer_engine": {
                    "DisableFP8GEMM": {"enabled": True, "gemms": ["wgrad"]},
                    "FakeQuant": {"enabled": True, "gemms": ["fprop"], "tensors": ["activation"],
                                  "quant_format": "FP8E4M3"}}},
    }
    calls = [("fp8_gemm_enabled", True, {"gemm": g}) for g in ("fprop", "dgrad", "wgrad")]
    calls += [("inspect_tensor_enabled", False, {"tensor_name": t})
              for t in ("activation", "gradient", "weight")]
    calls += [(c, False, {"gemm": g, "tensor_name": t})
              for c in ("modify_tensor_enabled", "inspect_tensor_postquantize_enabled")
              for g, t in (("fprop", "activation"), ("wgrad", "gradient"), ("dgrad", "weight"))]
    names = ("m.fc1", "m.fc2", "m.proj")
    next_run = {n: 0 for n in names}  # TE's next_iter_when_debug_should_be_run starts at 0
    acted, ran = {n: [] for n in names}, {n: [] for n in names}
    with Run(cfg):
        for it in range(40):
            for name in names:
                truth = [getattr(dlinspect, c)(name, **kw) != d for c, d, kw in calls]
                if any(truth):
                    acted[name].append(it)
                if next_run[name] is None or it < next_run[name]:
                    continue
                answers = [getattr(te, c)(layer_name=name, iteration=it, **kw)
                           for c, d, kw in calls]
                for (c, d, kw), a, t in zip(calls, answers, truth):
                    assert isinstance(a, tuple) and len(a) == 2 and (a[0] != d) == t, \
                        (name, it, c, a)
                if any(truth):
                    ran[name].append(it)
                nexts = [a[1] for a in answers if a[1] is not None]
                assert all(n > it for n in nexts), (name, it, answers)
                next_run[name] = min(nexts) if nexts else None
            dlinspect.step()
    assert ran == acted, f"TE would act in {ran}, dlinspect's answers in {acted}"
    assert acted == {"m.fc1": [4, 5, 6, 8, 12, 16, 20, 30, 31], "m.fc2": list(range(40)),
                     "m.proj": []}, acted


def test_transformer_engine_before_2_7_gets_bare_answers():
    """TransformerEngine's layers before 2.7 test an *_enabled answer itself (a tuple would always
    be true); from 2.7 on they take (answer, next)."""
    te = dlinspect.transformer_engine
    had = sys.modules.get("transformer_engine")
    try:
        for version, want in (("2.6.0.post1+cu12", False), ("1.13.0", False),
                              ("2.7.0.dev0", (False, None)), ("2.20.2", (False, None))):
            sys.modules["transformer_engine"] = type(sys)("transformer_engine")
            sys.modules["transformer_engine"].__version__ = version
            assert te.inspect_tensor_enabled("l", tensor_name="activation", iteration=0) == want, \
                version
    finally:
        if had is None:
            sys.modules.pop("transformer_engine", None)
        else:
            sys.modules["transformer_engine"] = had


def test_initialize_file_string_dict_alike():
    yaml_text = """stats:
  enabled: true
  layers:
    layer_name_regex_pattern: .*
  transformer_engine:
    LogTensorStats:
      enabled: true
      tensors: [activation]
      stats: [min, max, mean, std, var, l1_norm, l2_norm, cur_amax, dynamic_range, nan_count, inf_count, zero%]
"""
    x = sample(seed=11)
    results = []
    d = tempfile.mkdtemp(prefix="dli-py-")
    path = os.path.join(d, "config.yaml")
    with open(path, "w") as f:
        f.write(yaml_text)
    for how in ("file", "string", "dict", "dict as config_file"):
        log_dir = tempfile.mkdtemp(prefix="dli-py-")
        if how == "file":
            dlinspect.initialize(path, log_dir=log_dir)
        elif how == "string":
            dlinspect.initialize(config=yaml_text, log_dir=log_dir)
        elif how == "dict":
            dlinspect.initialize(config=stats_config(), log_dir=log_dir)
        else:  # nvdlfw_inspect's config_file takes a dict too
            dlinspect.initialize(stats_config(), log_dir=log_dir)
        dlinspect.inspect_tensor("l", "activation", x)
        dlinspect.step()
        dlinspect.end_debug()
        got = read_stats(log_dir)
        assert_stats(got, "l", "activation", 0, x)
        results.append(got)
    assert results[0] == results[1] == results[2] == results[3]
    expect_error(lambda: dlinspect.initialize(stats_config(), config=yaml_text), ValueError,
                 "not both")


def expect_config_error(fn, file, line, column, *words):
    try:
        fn()
    except dlinspect.ConfigError as e:
        assert isinstance(e, dlinspect.Error) and isinstance(e, RuntimeError)
        assert (e.file, e.line, e.column) == (file, line, column), (e.file, e.line, e.column, str(e))
        assert str(e) == f"{file}:{line}:{column}: {e.message}", str(e)
        for w in words:
            assert w in e.message, (w, e.message)
        assert not dlinspect.is_initialized()
        return e
    raise AssertionError("no ConfigError")


def test_config_errors_carry_file_line_column():
    bad = """stats:
  enabled: true
  layers:
    layer_name_regex_pattern: .*
  transformer_engine:
    LogTensorStats:
      enabled: true
      tensors: [activation]
      stats: [min]
      freqq: 3
"""
    d = tempfile.mkdtemp(prefix="dli-py-")
    path = os.path.join(d, "bad.yaml")
    with open(path, "w") as f:
        f.write(bad)
    expect_config_error(lambda: dlinspect.initialize(path, log_dir=d), path, 10, 7, "freqq", "freq")
    expect_config_error(lambda: dlinspect.initialize(config=bad, log_dir=d), "<string>", 10, 7, "freqq")
    # A dict: the position in its YAML form (dlinspect.config_to_yaml), which the error names.
    cfg = stats_config()
    cfg["stats"]["transformer_engine"]["LogTensorStats"]["tensors"] = ["activaton"]
    text = dlinspect.config_to_yaml(cfg)
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "activaton" in l)
    col = text.splitlines()[line - 1].index('"activaton"') + 1
    # (With tensor_names declared, an unknown tensor name is an error, not a host's own name.)
    expect_config_error(lambda: dlinspect.initialize(config=cfg, log_dir=d, tensor_names=[]),
                        "<string>", line, col,
                        "activaton", "activation")
    # A missing file has no position: a plain dlinspect.Error naming it.
    try:
        dlinspect.initialize(os.path.join(d, "missing.yaml"), log_dir=d)
    except dlinspect.Error as e:
        assert not isinstance(e, dlinspect.ConfigError)
        assert "missing.yaml" in str(e) and "No such file" in str(e), str(e)
    else:
        raise AssertionError("missing config accepted")


def test_end_debug_twice_and_reinitialize():
    x = sample(seed=12)
    dlinspect.end_debug()  # never initialized: nothing to do
    L = dlinspect.layer("l")
    assert L.inspect_tensor_enabled("activation") is False  # no context: defaults
    assert L.fp8_gemm_enabled("fprop") is True
    L.inspect_tensor("activation", x)
    dlinspect.step()  # no-op without a context, as nvdlfw_inspect's
    with Run(stats_config()) as r:
        try:
            dlinspect.initialize(config=stats_config(), log_dir=r.dir)
        except dlinspect.Error as e:
            assert "already initialized" in str(e)
        else:
            raise AssertionError("a second initialize was accepted")
        assert L.inspect_tensor_enabled("activation") is True  # the old handle finds its layer
        L.inspect_tensor("activation", x)
        dlinspect.step()
    dlinspect.end_debug()
    dlinspect.end_debug()
    assert not dlinspect.is_initialized()
    assert_stats(r.stats(), "l", "activation", 0, x)
    try:
        dlinspect.iteration()
    except dlinspect.Error as e:
        assert "initialize" in str(e)
    else:
        raise AssertionError("iteration() without a context")
    with Run(stats_config(), init_training_step=5) as r2:
        assert dlinspect.iteration() == 5
        dlinspect.initialize_training_step(9)
        assert dlinspect.iteration() == 9
        L.inspect_tensor("activation", x)
        dlinspect.step()
    assert_stats(r2.stats(), "l", "activation", 9, x)


def test_argument_errors():
    with Run(stats_config()):
        L = dlinspect.layer("l")
        for call, exc, words in [
            (lambda: L.fp8_gemm_enabled("fpropp"), ValueError, "fpropp"),
            (lambda: L.fp8_gemm_enabled(3), TypeError, "gemm"),
            (lambda: L.inspect_tensor_enabled(3), TypeError, "tensor name"),
            (lambda: dlinspect.inspect_tensor_enabled(3, "activation"), TypeError, "layer_name"),
            (lambda: dlinspect.fp8_gemm_enabled("l", gemm="fprop", bogus=1), TypeError, "bogus"),
            (lambda: L.inspect_tensor("activation"), TypeError, "obj"),
            (lambda: dlinspect.set_mode("test"), ValueError, "train"),
        ]:
            try:
                call()
            except exc as e:
                assert words in str(e), (words, str(e))
            else:
                raise AssertionError(f"no {exc.__name__} for {words}")
        # Unknown tensor names answer defaults (nothing selects them).
        assert L.inspect_tensor_enabled("no_such_tensor") is False


def test_eval_mode_and_messages():
    x = sample(seed=13)
    with Run(stats_config()) as r:
        L = dlinspect.layer("l")
        dlinspect.set_mode("eval")
        assert dlinspect.get_mode() == "eval"
        assert L.inspect_tensor_enabled("activation") is False
        L.inspect_tensor("activation", x * 100)  # an evaluation batch: not in the statistics
        dlinspect.set_mode("train")
        L.inspect_tensor("activation", x)
        dlinspect.log_message("hello from python", layer_name="l")
        dlinspect.step()
    assert_stats(r.stats(), "l", "activation", 0, x)
    with open(os.path.join(r.dir, "nvdlfw_inspect_logs", "nvdlfw_inspect_globalrank-0.log")) as f:
        # nvdlfw_inspect's layout: "{asctime} - INFO - LAYER={layer_name}: {message}"
        assert re.search(r"^\S+ \S+ - INFO - LAYER=l: hello from python$", f.read(), re.M)


def test_features_listed():
    names = dlinspect.list_features()
    for n in ("transformer_engine.LogTensorStats", "transformer_engine.DisableFP8GEMM",
              "transformer_engine.FakeQuant"):
        assert n in names, names
    text = dlinspect.explain_features("LogTensorStats")
    assert "\n  stats  " in text and "\n  freq  " in text, text


# The lines under a parameter that say which values it takes: "one of: ..." and "in [a, b]",
# ">= a", "<= b" (tools/plugins.c).
VALUES_LINE = re.compile(r"^(one of: .*|in \[.*\]|[<>]= \S+)$")


def values_lines(text, indent):
    """[(key, line)] for each values line of `text`, under the parameter whose line starts with
    `indent` spaces (its continuation lines are indented further)."""
    out, key = [], None
    for line in text.splitlines():
        if line.startswith(" " * indent) and line[indent:indent + 1] not in ("", " "):
            key = line.split()[0]
        elif not line.startswith(" " * (indent + 1)):
            key = None
        elif key and VALUES_LINE.match(line.strip()):
            out.append((key, line.strip()))
    return out


def test_explain_features_shows_choices_and_ranges_as_the_cli_does():
    """explain_features lists a parameter's choices and range under it, worded and ordered as
    `dlinspect plugins --explain` prints them for the same feature."""
    tool = os.environ.get("DLINSPECT_TOOL") or os.path.join(
        os.path.dirname(dlinspect.__file__), "..", "..", "tools", "dlinspect")
    for name in ("DetectNonFinite", "FakeQuant"):
        r = subprocess.run([tool, "plugins", "--explain", name], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, r.stdout
        cli = values_lines(r.stdout, 8)
        text = dlinspect.explain_features(name)
        assert values_lines(text, 2) == cli, f"{name}: python:\n{text}\ncli:\n{r.stdout}"
    # What the CLI prints for DetectNonFinite, so that an empty comparison cannot pass.
    text = dlinspect.explain_features("DetectNonFinite")
    assert values_lines(text, 2) == [("frame_size", "in [1, 100000]"),
                                     ("on_detect", "one of: stop continue"),
                                     ("abort_after_batch_num", ">= -1")], text
    assert "\n  on_detect        string               default stop\n" in text, text
    assert "\n                   one of: stop continue\n" in text, text


def key_names(text, indent):
    """The keys `text` lists, in order: the lines starting with a name at `indent` spaces (not
    the lines that say where a feature comes from or where it is placed)."""
    out = []
    for line in text.splitlines():
        if line.startswith(" " * indent) and line[indent:indent + 1] not in ("", " "):
            word = line.split()[0]
            if not word.endswith(":") and word not in ("placed", "also"):
                out.append(word)
    return out


def test_explain_features_lists_every_key_the_cli_lists():
    """explain_features lists the keys the core reads for a feature (enabled, gemms, tensors,
    the schedule) before its own, as `dlinspect plugins --explain` does, and where it is placed."""
    tool = os.environ.get("DLINSPECT_TOOL") or os.path.join(
        os.path.dirname(dlinspect.__file__), "..", "..", "tools", "dlinspect")
    for name in ("FakeQuant", "DetectNonFinite", "DisableFP8GEMM"):
        r = subprocess.run([tool, "plugins", "--explain", name], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        assert r.returncode == 0, r.stdout
        text = dlinspect.explain_features(name)
        assert key_names(text, 2) == key_names(r.stdout, 8), f"python:\n{text}\ncli:\n{r.stdout}"
        placed = [line.strip() for line in r.stdout.splitlines() if "placed " in line]
        assert placed and [line.strip() for line in text.splitlines() if "placed " in line] == placed
    text = dlinspect.explain_features("FakeQuant")
    assert key_names(text, 2)[:5] == ["enabled", "gemms", "tensors", "in_eval", "quant_format"], text
    assert "\n  enabled          bool                 required\n" in text, text


def fc1_fp8_config(**more_features):
    """model.fc1's wgrad out of FP8 and its fprop activation fake-quantized, and more_features."""
    return {
        "fp8": {
            "enabled": True, "layers": {"layer_name_regex_pattern": "fc1$"},
            "transformer_engine": {
                "DisableFP8GEMM": {"enabled": True, "gemms": ["wgrad"]},
                "FakeQuant": {"enabled": True, "gemms": ["fprop"], "tensors": ["activation"],
                              "quant_format": "FP8E4M3"},
                **more_features,
            },
        }
    }


def test_fp8_gemm_and_fake_quant_modify():
    x = sample(seed=14)
    with Run(fc1_fp8_config()):
        L = dlinspect.layer("model.fc1")
        assert L.fp8_gemm_enabled("wgrad") is False
        assert L.fp8_gemm_enabled("dgrad") is True
        assert L.modify_tensor_enabled("fprop", "activation") is True
        assert L.modify_tensor_enabled("dgrad", "activation") is False
        y = L.modify_tensor("fprop", "activation", x)
        assert isinstance(y, np.ndarray) and y.shape == x.shape and y.dtype == x.dtype
        # Reference: current scaling, round to E4M3 with ml_dtypes, back to f32 as
        # TransformerEngine dequantizes (codes times scale_inv = 1 / scale, both f32).
        scale = np.float32(448.0) / np.abs(x).max()
        ref = ((x * scale).astype(ml_dtypes.float8_e4m3fn).astype(np.float32) *
               (np.float32(1) / scale))
        assert np.array_equal(y, ref), np.abs(y - ref).max()
        out = np.empty_like(x)
        assert dlinspect.modify_tensor("model.fc1", "fprop", "activation", x, out=out) is out
        assert np.array_equal(out, y)
        assert L.modify_tensor("dgrad", "activation", x) is None
        assert dlinspect.layer("model.fc2").modify_tensor("fprop", "activation", x) is None
        try:
            L.modify_tensor("fprop", "activation", x, out=np.empty((64, 66), np.float32)[:, ::2])
        except ValueError as e:
            assert "contiguous" in str(e)
        else:
            raise AssertionError("a strided out was accepted")


def test_fake_quant_and_pts_write_the_inputs_half_dtype():
    """f16 and bf16 tensors get their modified copy in their own dtype, as TransformerEngine's
    dequantize() writes it: the f32 dequantized values (the same call with an f32 out) rounded
    to nearest even, by numpy (f16) and ml_dtypes (bf16)."""
    x = sample(shape=(48, 64), seed=21)
    x.ravel()[5] = 70000.0  # beyond f16's range: f16 input saturates to inf, a NaN-free amax
    for fmt in ("FP8E4M3", "FP8E5M2", "MXFP8E4M3", "FP8BLOCKE4M3", "NVFP4", None):
        feature = ({"PerTensorScaling": {"enabled": True, "gemms": ["fprop"],
                                         "tensors": ["activation"]}} if fmt is None else
                   {"FakeQuant": {"enabled": True, "gemms": ["fprop"], "tensors": ["activation"],
                                  "quant_format": fmt}})
        cfg = {"m": {"enabled": True, "layers": {"layer_name_regex_pattern": ".*"},
                     "transformer_engine": feature}}
        for half in (np.float16, ml_dtypes.bfloat16):
            with np.errstate(over="ignore"):
                xh = x.astype(half)
            with Run(cfg):
                L = dlinspect.layer("l")
                as_f32 = L.modify_tensor("fprop", "activation", xh,
                                         out=np.empty(x.shape, np.float32))
                y = L.modify_tensor("fprop", "activation", xh)
            what = "%s %s" % (fmt or "PerTensorScaling", np.dtype(half).name)
            assert y.dtype == xh.dtype and y.shape == x.shape, what
            ref = as_f32.astype(half)
            same = (y.view(np.uint16) == ref.view(np.uint16)) | (np.isnan(as_f32))
            assert same.all(), (what, np.flatnonzero(~same)[:5])
            assert np.isnan(y.astype(np.float32)).sum() == np.isnan(as_f32).sum(), what


class TEFloat8Tensor:
    """The attributes of TransformerEngine's Float8Tensor that dlinspect reads."""

    def __init__(self, codes, scale_inv, fp8_dtype):
        self._data, self._scale_inv, self._fp8_dtype = codes, scale_inv, fp8_dtype


def test_postquantize_and_modify_queries_are_their_own():
    """inspect_tensor_postquantize_enabled answers DumpTensors' quantized dumps, modify_tensor_enabled
    FakeQuant: each query reaches its own feature call, not the other's."""
    cfg = {
        "dump": {
            "enabled": True, "layers": {"layer_name_regex_pattern": "fc1$"},
            "transformer_engine": {
                "DumpTensors": {"enabled": True, "tensors": ["activation"],
                                "quantized_tensor": True, "freq": 2},
            },
        }
    }
    with Run(cfg):
        L = dlinspect.layer("model.fc1")
        assert L.inspect_tensor_postquantize_enabled("fprop", "activation") is True
        assert L.inspect_tensor_postquantize_enabled("fprop", "gradient") is False
        assert L.modify_tensor_enabled("fprop", "activation") is False
        dlinspect.step()
        on, nxt = L.inspect_tensor_postquantize_enabled("fprop", "activation", next=True)
        assert on is False and nxt == 2
        assert dlinspect.layer("model.fc2").inspect_tensor_postquantize_enabled(
            "fprop", "activation") is False


# Each *_enabled query: its Layer method's argument names, then the answers a config below gives
# (subjects -> answer), one of each kind so that a call reaching another query's answer shows.
ENABLED_QUERIES = [
    ("fp8_gemm_enabled", ["gemm"], [(("wgrad",), False), (("dgrad",), True)]),
    ("inspect_tensor_enabled", ["tensor"], [(("activation",), True), (("weight",), False)]),
    ("modify_tensor_enabled", ["gemm", "tensor"],
     [(("fprop", "activation"), True), (("dgrad", "activation"), False)]),
    ("inspect_tensor_postquantize_enabled", ["gemm", "tensor"],
     [(("dgrad", "gradient"), True), (("fprop", "activation"), False)]),
]


def expect_type_error(call, message):
    try:
        call()
    except TypeError as e:
        assert str(e) == message, (message, str(e))
    else:
        raise AssertionError(f"no TypeError: {message}")


def check_enabled_call_forms(fn, name, names, subjects, want):
    """fn answers `want` for `subjects` however they are passed, and rejects bad argument lists
    with Python's messages naming `name` and `names` (its required ones, iteration, next)."""
    nreq = len(subjects)
    assert fn(*subjects) is want, (name, subjects)
    assert fn(**dict(zip(names, subjects))) is want, (name, "keywords")
    assert fn(*subjects[:1], **dict(zip(names[1:nreq], subjects[1:]))) is want, (name, "mixed")
    assert fn(*subjects, 0) is want and fn(*subjects, iteration=0) is want, (name, "iteration")
    assert fn(*subjects, None, False) is want and fn(*subjects, next=False) is want, (name, "next")
    pair = fn(*subjects, next=True)
    assert isinstance(pair, tuple) and pair[0] is want, (name, pair)
    assert fn(*subjects, None, True) == pair and fn(*subjects, 0, next=True) == pair, (name, pair)
    expect_type_error(lambda: fn(), f"{name}() missing required argument '{names[0]}'")
    expect_type_error(lambda: fn(*subjects[:-1]),
                      f"{name}() missing required argument '{names[nreq - 1]}'")
    expect_type_error(lambda: fn(*subjects, None, False, 1),
                      f"{name}() takes at most {nreq + 2} positional arguments ({nreq + 3} given)")
    expect_type_error(lambda: fn(*subjects, bogus=1),
                      f"{name}() got an unexpected keyword argument 'bogus'")
    expect_type_error(lambda: fn(*subjects, **{names[0]: subjects[0]}),
                      f"{name}() got multiple values for argument '{names[0]}'")
    expect_type_error(lambda: fn(*subjects, None, iteration=None),
                      f"{name}() got multiple values for argument 'iteration'")
    try:
        fn(*subjects, iteration=5)
    except ValueError as e:
        assert "iteration=5" in str(e), str(e)
    else:
        raise AssertionError(f"{name}: a wrong iteration was accepted")


def test_enabled_queries_take_their_arguments_every_way():
    """The four *_enabled queries, as Layer methods and as module functions (the layer's name or
    handle first, `tensor_name` for `tensor`): positional, keyword and mixed arguments, iteration
    and next, and the exact TypeError of every bad argument list."""
    cfg = fc1_fp8_config(
        LogTensorStats={"enabled": True, "tensors": ["activation"], "stats": ["max"]},
        DumpTensors={"enabled": True, "tensors": ["gradient"], "quantized_tensor": True})
    with Run(cfg):
        L = dlinspect.layer("model.fc1")
        for name, names, answers in ENABLED_QUERIES:
            module_names = ["layer_name"] + ["tensor_name" if n == "tensor" else n for n in names]
            for subjects, want in answers:
                check_enabled_call_forms(getattr(L, name), name, names + ["iteration", "next"],
                                         subjects, want)
                for layer in ("model.fc1", L):
                    check_enabled_call_forms(getattr(dlinspect, name), name,
                                             module_names + ["iteration", "next"],
                                             (layer,) + subjects, want)
            # Another layer, which the config does not select: the query's default.
            subjects = answers[0][0]
            default = name == "fp8_gemm_enabled"
            assert getattr(dlinspect.layer("model.fc2"), name)(*subjects) is default, name
            assert getattr(dlinspect, name)("model.fc2", *subjects) is default, name


def test_quantized_tensors_tuple_and_te_object():
    cfg = {"q": {"enabled": True, "layers": {"layer_name_regex_pattern": ".*"},
                 "transformer_engine": {"LogFp8TensorStats": {
                     "enabled": True, "tensors": ["activation"],
                     "stats": ["underflows%", "scale_inv_min", "scale_inv_max", "cos_sim"]}}}}
    rng = np.random.default_rng(15)
    x = (rng.standard_normal(4096) * np.where(rng.random(4096) < 0.3, 1e-6, 1.0)).astype(np.float32)
    scale = np.float32(448.0) / np.abs(x).max()
    q = (x * scale).astype(ml_dtypes.float8_e4m3fn)
    deq = q.astype(np.float64) / np.float64(scale)
    ref_under = 100.0 * np.sum((x != 0) & (q.astype(np.float32) == 0)) / x.size
    assert ref_under > 1
    ref_cos = float(np.dot(x.astype(np.float64), deq) /
                    (np.linalg.norm(x.astype(np.float64)) * np.linalg.norm(deq)))
    si = np.array([1.0 / scale], np.float32)
    forms = {
        "tuple": (q, float(si[0])),
        "codes": (q.view(np.uint8), si, "float8_e4m3fn"),
        "te": TEFloat8Tensor(q.view(np.uint8), si, "DType.kFloat8E4M3"),
    }
    for form, qt in forms.items():
        with Run(cfg) as r:
            dlinspect.inspect_tensor(layer_name="l", tensor_name="activation", tensor=x,
                                     iteration=0, rowwise_quantized_tensor=qt,
                                     columnwise_quantized_tensor=None, quantizer=None,
                                     tp_group=None, tp_size=1)
            # TransformerEngine's postquantize call shape: no gemm, rowwise=...; no feature here
            # takes it, so it only has to be accepted.
            dlinspect.transformer_engine.inspect_tensor_postquantize(
                layer_name="l", tensor=qt, tensor_name="activation", iteration=0, tp_group=None,
                tp_size=1, rowwise=True)
            for _ in range(2):  # one call site: written once
                dlinspect.log_message("once", layer_name="l", extra_cachable_args=("fprop",))
            dlinspect.step()
        got = r.stats()
        assert math.isclose(got[("l_activation_underflows%", 0)], ref_under, rel_tol=1e-6), (form, got)
        assert math.isclose(got[("l_activation_scale_inv_min", 0)], float(si[0]), rel_tol=1e-7), form
        assert math.isclose(got[("l_activation_scale_inv_max", 0)], float(si[0]), rel_tol=1e-7), form
        assert math.isclose(got[("l_activation_cos_sim", 0)], ref_cos, rel_tol=1e-6), (form, got, ref_cos)
        with open(os.path.join(r.dir, "nvdlfw_inspect_logs", "nvdlfw_inspect_globalrank-0.log")) as f:
            assert f.read().count("l: once") == 1


def test_host_fp8_copies_with_non_finite_microbatches():
    """Microbatches of one step, some holding NaN or an infinity and some clean, each with the
    host's per-tensor FP8 copy: the step's statistics are those of all the elements, whichever
    microbatch held the non-finite ones and in whichever order they came. The reference is the
    definition in docs/features.md, computed here with ml_dtypes over the concatenated elements:
    an infinity saturates (an overflow) and makes mse inf, a NaN counts in n, the denominator of
    the percentages, and mse averages the non-NaN elements."""
    cfg = {"q": {"enabled": True, "layers": {"layer_name_regex_pattern": ".*"},
                 "transformer_engine": {"LogFp8TensorStats": {
                     "enabled": True, "tensors": ["activation"],
                     "stats": ["underflows%", "overflows%", "mse"]}}}}
    rng = np.random.default_rng(41)

    def batch(n, special=()):
        x = (rng.standard_normal(n) * np.where(rng.random(n) < 0.2, 1e-4, 3.0)).astype(np.float32)
        for i, v in enumerate(special):
            x[7 * i + 3] = v
        return x

    scale = np.float32(64.0)  # |x| > 7 overflows: a few per batch
    si = np.float32(1.0) / scale
    orders = {
        "inf, clean": [batch(300, [np.inf]), batch(200)],
        "clean, inf": [batch(200), batch(300, [-np.inf])],
        "nan, clean": [batch(300, [np.nan]), batch(200)],
        "clean, nan and inf, clean": [batch(100), batch(300, [np.nan, np.inf]), batch(50)],
    }
    for name, xs in orders.items():
        with Run(cfg) as r:
            for x in xs:
                q = np.clip(x * scale, -448, 448).astype(ml_dtypes.float8_e4m3fn)
                dlinspect.inspect_tensor(layer_name="l", tensor_name="activation", tensor=x,
                                         iteration=0, rowwise_quantized_tensor=(q, float(si)))
            dlinspect.step()
        got = r.stats()
        x = np.concatenate(xs)
        finite = np.isfinite(x)
        with np.errstate(invalid="ignore"):
            q = np.clip(x * scale, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
            over = np.isinf(x) | (finite & (np.abs(x * scale) > 448))
            dq = (q * si).astype(np.float64)
        under = finite & (x != 0) & (q == 0)
        want = {"underflows%": 100.0 * under.sum() / x.size,
                "overflows%": 100.0 * over.sum() / x.size,
                "mse": math.inf if np.isinf(x).any() else
                float(np.mean((x[finite].astype(np.float64) - dq[finite]) ** 2))}
        assert under.sum() > 0 and over.sum() > np.isinf(x).sum(), name
        for stat, w in want.items():
            g = got[(f"l_activation_{stat}", 0)]
            assert g == w if math.isinf(w) else math.isclose(g, w, rel_tol=1e-6), (name, stat, g, w)


def test_host_fp8_copy_overflows_at_the_limit():
    """overflows% of the host's per-tensor copy counts x beyond fp8_max * scale_inv, that product
    rounded to float32 as TransformerEngine computes it (compute_fp8_delayed_scaling_overflows_num:
    a float32 tensor product, then x > it in float32). Tensors whose scale comes from their own
    amax put their largest element right at that limit: the rounding of the product decides, and
    it must be the same as TransformerEngine's. The reference follows that definition in numpy."""
    cfg = {"q": {"enabled": True, "layers": {"layer_name_regex_pattern": ".*"},
                 "transformer_engine": {"LogFp8TensorStats": {
                     "enabled": True, "tensors": ["activation", "gradient"],
                     "stats": ["overflows%"]}}}}
    rng = np.random.default_rng(43)
    formats = {"activation": (ml_dtypes.float8_e4m3fn, 448.0),
               "gradient": (ml_dtypes.float8_e5m2, 57344.0)}
    want, spurious = {}, 0
    with Run(cfg) as r:
        for k in range(200):
            dtype = (np.float32, ml_dtypes.bfloat16)[k % 2]
            x = (rng.standard_normal(16) * 2.0 ** rng.integers(-30, 30)).astype(dtype)
            if k % 5 == 0:
                x[:] = x[0]  # every element at the amax
            xf = x.astype(np.float32)
            for tensor, (fmt, fmax) in formats.items():
                scale = np.float32(fmax) / np.abs(xf).max()
                si = np.float32(1) / scale
                q = np.clip(xf * scale, -fmax, fmax).astype(fmt)
                dlinspect.inspect_tensor(layer_name=f"l{k}", tensor_name=tensor, tensor=x,
                                         iteration=0, rowwise_quantized_tensor=(q, float(si)))
                limit = np.float32(fmax) * si  # a float32 product
                over = np.sum(np.abs(xf) > limit)
                want[(f"l{k}_{tensor}_overflows%", 0)] = 100.0 * over / x.size
                spurious += over > 0
        dlinspect.step()
    got = r.stats()
    # The amax is beyond the rounded limit in some of these (TransformerEngine counts it then).
    assert 0 < spurious < len(want), spurious
    bad = [(k, got.get(k), w) for k, w in want.items() if got.get(k) != w]
    assert not bad, f"{len(bad)} of {len(want)} differ, e.g. {bad[:4]}"


def test_infer_and_assign_layer_names_duck_typed():
    class M:
        def __init__(self, children):
            self.children = children

        def named_children(self):
            return list(self.children.items())

    leaf1, leaf2 = M({}), M({})
    root = M({"encoder": M({"fc1": leaf1}), "head": leaf2})
    dlinspect.infer_and_assign_layer_names(root)
    assert root.name == "model" and leaf1.name == "model.encoder.fc1" and leaf2._debug_name == "model.head"
    # Initialized, each name goes to the message log in nvdlfw_inspect's words, where its docs
    # tell users to look up the names a config can select.
    with Run(stats_config()) as r:
        dlinspect.infer_and_assign_layer_names([root])
    with open(os.path.join(r.dir, "nvdlfw_inspect_logs", "nvdlfw_inspect_globalrank-0.log")) as f:
        got = [line.split(" - INFO - ", 1)[1].rstrip("\n") for line in f if "Assigned" in line]
    want = [f"Assigned layer name: model{n}" for n in ("", ".encoder", ".encoder.fc1", ".head")]
    assert got == want, got


def expect_error(call, exc, *words):
    """call() raises exc, whose text holds every one of words."""
    try:
        call()
    except exc as e:
        assert all(w in str(e) for w in words), (words, str(e))
    else:
        raise AssertionError(f"no {exc.__name__}: {words}")


def test_names_holding_nul_are_refused():
    """The core ends a name at its first NUL: "a\0b" would be the layer "a", "activation\0x" the
    tensor "activation". Every way a name enters C refuses it, as log_message does."""
    x = sample(seed=16)
    with Run(stats_config()) as r:
        L = dlinspect.layer("a")
        for call in [
            lambda: dlinspect.layer("a\0b"),
            lambda: dlinspect.inspect_tensor("a\0b", "activation", x),
            lambda: dlinspect.inspect_tensor_enabled("a\0b", "activation"),
            lambda: dlinspect.fp8_gemm_enabled("a\0b", "fprop"),
            lambda: dlinspect.modify_tensor("a\0b", "fprop", "activation", x),
            lambda: dlinspect.log_tensor_stats("a\0b", tensor_name="t", tensor=x),
        ]:
            expect_error(call, ValueError, "layer name", "NUL")
        for call in [
            lambda: L.inspect_tensor_enabled("activation\0junk"),
            lambda: L.inspect_tensor("activation\0junk", x),
            lambda: dlinspect.inspect_tensor_enabled("a", "activation\0junk"),
            lambda: L.modify_tensor_enabled("fprop", "activation\0junk"),
            lambda: L.log_tensor_stats("activation\0junk", x),
            lambda: dlinspect.tensor_id("activation\0junk"),
        ]:
            expect_error(call, ValueError, "tensor name", "NUL")
        expect_error(lambda: dlinspect.log_message("m", layer_name="a\0b"), ValueError, "null")
        L.inspect_tensor("activation", x)
        dlinspect.step()
    assert sorted({k[0].split("_")[0] for k in r.stats()}) == ["a"], r.stats()
    assert_stats(r.stats(), "a", "activation", 0, x)
    d = tempfile.mkdtemp(prefix="dli-py-")
    expect_error(lambda: dlinspect.initialize(log_dir=d, tensor_names=["q\0k"]), ValueError,
                 "tensor name", "NUL")
    assert not dlinspect.is_initialized()


def test_initialize_refuses_what_its_parts_refuse():
    d = tempfile.mkdtemp(prefix="dli-py-")
    expect_error(lambda: dlinspect.initialize(log_dir=d, tensor_names="qkv"), TypeError,
                 "tensor_names must be a list", "tensor_names=['qkv']")
    expect_error(lambda: dlinspect.initialize(log_dir=d, init_training_step=-5), ValueError,
                 "the training step must be >= 0, not -5")
    # Neither truncated (1.5 -> 1) nor converted (1 -> "1"), as initialize_training_step refuses.
    expect_error(lambda: dlinspect.initialize(log_dir=d, init_training_step=1.5), TypeError,
                 "init_training_step must be an integer, not float")
    expect_error(lambda: dlinspect.initialize(log_dir=d, tensor_names=["qkv", 1]), TypeError,
                 "tensor_names[1] must be a str, not int")
    loop = {"s": {"enabled": True}}
    loop["s"]["layers"] = loop
    expect_error(lambda: dlinspect.initialize(log_dir=d, config=loop), ValueError,
                 "the config holds a dict inside itself, which has no YAML text")
    assert not dlinspect.is_initialized()
    # nvdlfw_inspect's positional order: the third is statistics_logger, the fourth log_dir.
    expect_error(lambda: dlinspect.initialize(None, None, d), TypeError,
                 "the third positional argument is statistics_logger", "pass log_dir=")
    dlinspect.initialize(None, None, None, d, 3, config=stats_config())
    assert dlinspect.iteration() == 3
    dlinspect.log_message("here")
    dlinspect.end_debug()
    assert os.path.isdir(os.path.join(d, "nvdlfw_inspect_logs")), os.listdir(d)
    with Run(stats_config(tensors=("qkv",)), tensor_names=["qkv"]):
        expect_error(lambda: dlinspect.initialize_training_step(-5), ValueError,
                     "the training step must be >= 0, not -5")
        assert dlinspect.tensor_id("qkv") >= 6 and dlinspect.tensor_id("q") == -1


def test_initialize_ignores_unknown_keywords_with_a_warning():
    """nvdlfw_inspect's initialize(**kwargs) ignores keywords it does not read: extensions= (its
    docs), logger= (TransformerEngine's docs' name for statistics_logger). dlinspect ignores them
    too, saying so, and the logger= hint names the keyword that takes a logger."""
    import warnings

    class Logger:
        def __init__(self):
            self.got = []

        def log_scalar(self, name, value, iteration, **kwargs):
            self.got.append(name)

    d, lg = tempfile.mkdtemp(prefix="dli-py-"), Logger()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dlinspect.initialize(None, config=stats_config(), log_dir=d, logger=lg, extensions=["x"])
    try:
        dlinspect.inspect_tensor("l", "activation", sample())
        dlinspect.step()
    finally:
        dlinspect.end_debug()
    assert [str(w.message) for w in caught] == [
        "dlinspect.initialize(): ignored keyword arguments: extensions, logger (nvdlfw_inspect "
        "ignores them too); the statistics' logger is statistics_logger="], caught
    assert caught[0].filename == __file__, caught[0].filename
    assert lg.got == [] and read_stats(d), (lg.got, read_stats(d))


class DLPackRefuses:
    """A DLPack producer that refuses to export (as torch does a sparse or conjugate tensor)."""

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None, max_version=None, **kw):
        raise BufferError("Can't export tensors with layout other than torch.strided")


class DLPackDevice:
    """A DLPack producer whose __dlpack_device__ answers `device`."""

    def __init__(self, arr, device):
        self.arr, self.device = arr, device

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, **kw):
        return self.arr.__dlpack__()


def test_argument_error_messages_say_what_is_wrong():
    x = sample(shape=(4, 6), seed=17)
    cfg = stats_config()
    cfg.update(fc1_fp8_config())
    with Run(cfg):
        L = dlinspect.layer("model.fc1")
        q = x.astype(ml_dtypes.float8_e4m3fn)
        expect_error(lambda: L.inspect_tensor("activation", x, rowwise=(q,)), TypeError,
                     "rowwise_quantized_tensor must be a tuple (data, scale_inv[, format]) of 2 "
                     "or 3 items, not 1")
        for dev in ("cpu", (1,)):
            expect_error(lambda: L.inspect_tensor("activation", DLPackDevice(x, dev)), TypeError,
                         "DLPackDevice", "__dlpack_device__() that returned " + repr(dev),
                         "(device_type, device_id)")
        L.inspect_tensor("activation", DLPackDevice(x, (1, 0)))  # a well-formed answer is read
        # The producer's own reason, not "must support DLPack", which it does.
        expect_error(lambda: L.inspect_tensor("activation", DLPackRefuses()), TypeError,
                     "the tensor, a DLPackRefuses, cannot be read: its __dlpack__() refused it "
                     "(Can't export tensors with layout other than torch.strided), and it has no "
                     "buffer protocol")
        for shape in ((2, 2), (6, 4), (24,), (4, 6, 1)):
            expect_error(lambda: L.modify_tensor("fprop", "activation", x,
                                                 out=np.empty(shape, np.float32)),
                         ValueError, f"out has shape {shape}", "the tensor (4, 6)")
        out = np.empty((4, 6), np.float32)
        assert L.modify_tensor("fprop", "activation", x, out=out) is out


def test_log_dir_may_be_any_file_system_path():
    """log_dir takes what os.fsencode takes: a str holding bytes that are not UTF-8
    (os.fsdecode's surrogates), or bytes."""
    x = sample(seed=18)
    base = tempfile.mkdtemp(prefix="dli-py-").encode()
    for i, log_dir in enumerate((os.fsdecode(base + b"/bad\xff"), base + b"/raw\xfe")):
        os.makedirs(log_dir)
        dlinspect.initialize(config=stats_config(), log_dir=log_dir)
        dlinspect.inspect_tensor("l", "activation", x)
        dlinspect.step()
        dlinspect.end_debug()
        assert_stats(read_stats(os.fsdecode(log_dir)), "l", "activation", 0, x)


def test_broadcast_views_are_read_as_they_read():
    """A stride-0 dimension, outer or inner, is copied like any other layout: the statistics are
    those of the tensor as it reads (each element as often as it appears), the same either way."""
    col = np.arange(1, 5, dtype=np.float32)
    outer = np.broadcast_to(col, (100, 4))            # strides (0, 4)
    inner = np.broadcast_to(col[:, None], (4, 100))   # strides (4, 0)
    with Run(stats_config(tensors=("activation", "gradient", "output"))) as r:
        L = dlinspect.layer("l")
        L.inspect_tensor("activation", outer)
        L.inspect_tensor("gradient", inner)
        L.inspect_tensor("output", np.broadcast_to(np.float32(2), (3, 5)))  # every stride 0
        dlinspect.step()
    got = r.stats()
    assert_stats(got, "l", "activation", 0, np.ascontiguousarray(outer))
    assert_stats(got, "l", "gradient", 0, np.ascontiguousarray(inner))
    assert_stats(got, "l", "output", 0, np.full((3, 5), 2, np.float32))
    assert got[("l_activation_l1_norm", 0)] == got[("l_gradient_l1_norm", 0)] == 1000


BASE_STATS = ["min", "max", "mean", "std", "l1_norm", "l2_norm"]


def test_log_tensor_stats_feeds_the_base_namespace():
    """nvdlfw_inspect's log_tensor_stats(layer_name, tensor_name=, tensor=): the base
    LogTensorStats logs the tensor's statistics at once, one line each, at the current iteration or
    at `iteration=`; a name it does not select logs nothing; TransformerEngine's LogTensorStats
    takes nothing from it."""
    cfg = {"base": {"enabled": True, "layers": {"layer_name_regex_pattern": "fc1$"},
                    "LogTensorStats": {"enabled": True, "tensors": ["tensor1", "relu_act"],
                                       "stats": ["MIN", "max", "mean", "std", "l1_norm", "l2_norm"]}}}
    cfg.update(stats_config(tensors=("activation",), regex="fc1$"))
    x, y, z = sample(seed=19), sample(shape=(40, 90), seed=20), sample(shape=(7,), seed=21)
    with Run(cfg) as r:
        dlinspect.log_tensor_stats("model.fc1", tensor_name="tensor1", tensor=x)
        dlinspect.log_tensor_stats("model.fc1", tensor_name="other", tensor=x)   # not selected
        dlinspect.log_tensor_stats("model.fc2", tensor_name="tensor1", tensor=x)  # not selected
        dlinspect.log_tensor_stats("model.fc1", tensor_name="activation", tensor=x)  # TE's: no
        dlinspect.step()
        L = dlinspect.layer("model.fc1")
        L.log_tensor_stats("relu_act", y[:, 10:50], skip_reduction=True)  # a strided view
        dlinspect.log_tensor_stats(L, "tensor1", z, iteration=7, reduction_group=None)
        expect_error(lambda: L.log_tensor_stats("tensor1", z, iteration=-1), ValueError,
                     "must be >= 0")
        expect_error(lambda: L.log_tensor_stats(tensor_name=3, tensor=z), TypeError,
                     "tensor_name must be a str")
        expect_error(lambda: dlinspect.log_tensor_stats("model.fc1", tensor=z), TypeError,
                     "missing required argument 'tensor_name'")
        dlinspect.step()
    got = r.stats()
    want = {}
    for name, it, t in (("tensor1", 0, x), ("relu_act", 1, y[:, 10:50]), ("tensor1", 7, z)):
        ref = reference(t)
        for s in BASE_STATS:
            want[(f"model.fc1_{name}_{s}", it)] = ref[s]
    assert sorted(got) == sorted(want), sorted(got)
    for key, r_ in want.items():
        assert math.isclose(got[key], r_, rel_tol=2e-6, abs_tol=1e-6), (key, got[key], r_)
    dlinspect.log_tensor_stats("model.fc1", tensor_name="tensor1", tensor=x)  # no context: no-op
    # Without a config (debugging off: the default run) nothing selects the tensor, as
    # nvdlfw_inspect returns {} then; a script that calls it in every run must not fail.
    with Run(None) as r:
        dlinspect.log_tensor_stats("model.fc1", tensor_name="tensor1", tensor=x)
        dlinspect.layer("model.fc1").log_tensor_stats("tensor1", x, iteration=3)
        dlinspect.step()
    assert r.stats() == {}, r.stats()


def test_log_tensor_stats_reads_float64_and_integers_as_float32():
    """nvdlfw_inspect's log_tensor_stats takes any torch dtype and logs float32 values: float64
    and integer tensors (contiguous, a view read in place, one copied) give the statistics of
    their float32 rounding (numpy's astype), where the statistics passes refuse those dtypes."""
    cfg = {"base": {"enabled": True, "layers": {"layer_name_regex_pattern": "fc1$"},
                    "LogTensorStats": {"enabled": True, "tensors": ["t"], "stats": BASE_STATS}}}
    rng = np.random.default_rng(23)
    f64 = rng.standard_normal((9, 40)) * 1e3
    tensors = [f64, f64[:, 5:30], f64.T, rng.integers(-2**40, 2**40, size=(5, 8)),
               rng.integers(-100, 100, size=30).astype(np.int32)[::3],
               rng.integers(0, 255, size=17).astype(np.uint8), np.array([-128, 7], np.int8)]
    with Run(cfg) as r:
        for it, t in enumerate(tensors):
            dlinspect.log_tensor_stats("model.fc1", tensor_name="t", tensor=t, iteration=it)
    got = r.stats()
    for it, t in enumerate(tensors):
        ref = reference(np.asarray(t).astype(np.float32))
        for s in BASE_STATS:
            key = (f"model.fc1_t_{s}", it)
            assert key in got, (key, sorted(got))
            assert math.isclose(got[key], ref[s], rel_tol=2e-6), (key, got[key], ref[s], t.dtype)


def test_exit_without_end_debug_writes_everything():
    """A script that ends without end_debug(), as TransformerEngine's docs leave it: what the
    context still held is written at exit (an atexit hook), not lost with the process: the lines of
    a log_tensor_stats after the last step, the TensorBoard records that flush_secs holds back, and
    every queued dump, whole (no .tmp left)."""
    log_dir = tempfile.mkdtemp(prefix="dli-py-exit-")
    script = (
        "import numpy as np, dlinspect, sys\n"
        "dlinspect.initialize(config=sys.argv[2], log_dir=sys.argv[1])\n"
        "x = np.arange(1, 1 + (1 << 20), dtype=np.float32)\n"
        "for it in range(2):\n"
        "    for l in range(3):\n"
        "        dlinspect.inspect_tensor(f'L{l}', 'activation', x)\n"
        "    dlinspect.step()\n"
        "dlinspect.log_tensor_stats('L0', 'mine', x)\n"  # logged at once, at iteration 2
    )
    cfg = ("loggers: {file: {}, tensorboard: {flush_secs: 100000}}\n"
           "s:\n  enabled: true\n  layers: {layer_name_regex_pattern: '.*'}\n"
           "  transformer_engine:\n"
           "    LogTensorStats: {enabled: true, tensors: [activation], stats: [max]}\n"
           "    DumpTensors: {enabled: true, format: safetensors, tensors: [activation],\n"
           "                  high_precision_tensor: true,\n"
           "                  start_step: 0, end_step: 1}\n"
           "  LogTensorStats: {enabled: true, tensors: [mine], stats: [max]}\n")
    r = subprocess.run([sys.executable, "-c", script, log_dir, cfg], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    got = read_stats(log_dir)
    assert got.get(("L0_mine_max", 2)) == float(1 << 20), sorted(got)
    tb = os.path.join(log_dir, "tensorboard")
    events = os.listdir(tb) if os.path.isdir(tb) else []
    assert len(events) == 1, events
    with open(os.path.join(tb, events[0]), "rb") as f:
        assert b"L2_activation_max" in f.read()
    dumps = os.path.join(log_dir, "nvdlfw_inspect_tensor_dumps", "rank_0")
    want = sorted(f"L{l}_iter_{i:06d}.safetensors" for l in range(3) for i in range(2))
    assert sorted(os.listdir(dumps)) == want, os.listdir(dumps)


def test_a_stop_asked_for_raises_at_step():
    """DetectNonFinite's on_detect: stop makes step() raise StopRequested (a dlinspect.Error)
    naming the layer, after taking the step, and every later step() too; on_detect: continue and a
    clean run raise nothing."""
    def cfg(on_detect):
        return {"nan": {"enabled": True, "layers": {"layer_name_regex_pattern": ".*"},
                        "DetectNonFinite": {"enabled": True, "tensors": ["activation"],
                                            "on_detect": on_detect}}}
    bad = np.array([1.0, np.nan, 2.0], np.float32)
    with Run(cfg("stop")):
        dlinspect.inspect_tensor("model.fc2", "activation", np.ones(3, np.float32))
        dlinspect.step()  # clean: nothing raised
        dlinspect.inspect_tensor("model.fc2", "activation", bad)
        for it in (2, 3):
            try:
                dlinspect.step()
                raise AssertionError("step() after a NaN with on_detect: stop did not raise")
            except dlinspect.StopRequested as e:
                assert isinstance(e, dlinspect.Error)
                assert "model.fc2" in str(e) and "activation" in str(e), str(e)
                assert e.code == -errno.ECANCELED, e.code
            assert dlinspect.iteration() == it, dlinspect.iteration()
    with Run(cfg("continue")):
        dlinspect.inspect_tensor("model.fc2", "activation", bad)
        dlinspect.step()
        assert dlinspect.iteration() == 1
    # A Python logger that raises in the step that stops: the stop is raised, the logger's
    # error rides along as its __context__.
    class Broken(dlinspect.logging.BaseLogger):
        def log_scalar(self, name, value, iteration, **kwargs):
            raise OSError("disk gone")

    both = dict(cfg("stop"), **stats_config(stats=["max"]))
    with Run(both, statistics_logger=Broken()):
        dlinspect.inspect_tensor("model.fc2", "activation", bad)
        try:
            dlinspect.step()
            raise AssertionError("no StopRequested")
        except dlinspect.StopRequested as e:
            assert isinstance(e.__context__, OSError) and "disk gone" in str(e.__context__), \
                repr(e.__context__)
        assert dlinspect.iteration() == 1


def test_tensor_reduction_group_is_checked():
    """set_tensor_reduction_group (nvdlfw_inspect's call): ValueError before initialize, as
    nvdlfw_inspect's; in a one-process run the world and this rank alone change nothing, and
    every other group is refused with the reason (the four-rank reduction: the torch tests)."""
    for call in (lambda: dlinspect.set_tensor_reduction_group(None),
                 dlinspect.get_tensor_reduction_group):
        try:
            call()
            raise AssertionError("no ValueError before initialize()")
        except ValueError as e:
            assert "initialize" in str(e), str(e)
    with Run(stats_config()):
        assert dlinspect.get_tensor_reduction_group() is None
        dlinspect.set_tensor_reduction_group([0], layer_name="model.fc1")
        assert dlinspect.get_tensor_reduction_group() == [0]
        dlinspect.set_tensor_reduction_group(None)
        for group, why in (([0, 1], "holds ranks outside the world"),
                           ([1, 0], "holds ranks outside the world"),  # sorted first
                           ([0, 0], "is not a sorted list of distinct ranks"),
                           ([-1], "holds ranks outside the world")):
            try:
                dlinspect.set_tensor_reduction_group(group)
                raise AssertionError(f"{group} accepted")
            except dlinspect.Error as e:
                assert why in str(e) and "world size 1, this rank 0" in str(e), str(e)
        try:
            dlinspect.set_tensor_reduction_group("dp")
            raise AssertionError("a str accepted")
        except TypeError as e:
            assert "ProcessGroup" in str(e), str(e)
        assert dlinspect.get_tensor_reduction_group() is None


class Recorder(dlinspect.logging.BaseLogger):
    """A statistics logger that keeps what it is given, in order."""

    def __init__(self):
        self.got = []

    def log_scalar(self, name, value, iteration, **kwargs):
        self.got.append((name, value, iteration))

    def as_dict(self):
        return {(n, i): v for n, v, i in self.got}


class FakeWriter:
    """What initialize(tb_writer=) needs of a torch SummaryWriter: add_scalar(tag, value, step)."""

    def __init__(self):
        self.got = []

    def add_scalar(self, tag, value, step):
        self.got.append((tag, value, step))


def message_lines(log_dir):
    path = os.path.join(log_dir, "nvdlfw_inspect_logs", "nvdlfw_inspect_globalrank-0.log")
    with open(path) as f:
        return [line.rstrip("\n").split(" - ", 2)[2] for line in f]


def test_statistics_logger_gets_what_the_file_log_gets():
    """A Python logger, with default_logging_enabled=True beside it, receives every statistic the
    file log holds, the same names, iterations and values (to the log's 9 digits), each step's
    right after its step(); the values are numpy's."""
    xs = [sample(seed=s) for s in range(3)]
    rec = Recorder()
    with Run(stats_config(), statistics_logger=rec, default_logging_enabled=True) as r:
        for it, x in enumerate(xs):
            dlinspect.layer("model.fc1").inspect_tensor("activation", x)
            dlinspect.layer("model.fc2").inspect_tensor("activation", 2 * x)
            assert all(i < it for _, _, i in rec.got), "statistics came before their step()"
            dlinspect.step()
            assert {i for _, _, i in rec.got} == set(range(it + 1)), rec.got[-3:]
    got, file = rec.as_dict(), r.stats()
    assert len(rec.got) == len(got) == len(file) == 3 * 2 * len(STATS), (len(rec.got), len(file))
    assert set(got) == set(file)
    for k, v in got.items():
        assert isinstance(v, float) and isinstance(k[1], int), (k, v)
        assert v == file[k] or math.isclose(v, file[k], rel_tol=1e-8), (k, v, file[k])
    for it, x in enumerate(xs):
        assert_stats(got, "model.fc1", "activation", it, x)
        assert_stats(got, "model.fc2", "activation", it, 2 * x)
    lines = message_lines(r.dir)
    assert "Using the provided logger for logging tensor statistics." in lines, lines
    assert f"Default logging to file enabled at {r.dir}" in lines, lines


def test_statistics_logger_alone_leaves_the_statistics_file_out():
    """As nvdlfw_inspect: a Python logger without default_logging_enabled means no statistics file
    (the message log is still written); with no Python logger the file logger writes them."""
    rec = Recorder()
    with Run(stats_config(stats=["max"]), statistics_logger=rec) as r:
        dlinspect.layer("l").inspect_tensor("activation", np.full(8, 3, np.float32))
        dlinspect.step()
    assert rec.got == [("l_activation_max", 3.0, 0)], rec.got
    assert not os.path.exists(os.path.join(r.dir, "nvdlfw_inspect_statistics_logs")), \
        os.listdir(r.dir)
    lines = message_lines(r.dir)
    assert not any(l.startswith("Default logging to file") for l in lines), lines
    with Run(stats_config(stats=["max"])) as r:
        dlinspect.layer("l").inspect_tensor("activation", np.full(8, 3, np.float32))
        dlinspect.step()
    assert r.stats() == {("l_activation_max", 0): 3.0}
    assert f"Default logging to file enabled at {r.dir}" in message_lines(r.dir)
    # A config's `loggers` key is followed as written, Python logger or not.
    cfg = dict(stats_config(stats=["max"]), loggers={"file": {}})
    rec = Recorder()
    with Run(cfg, statistics_logger=rec) as r:
        dlinspect.layer("l").inspect_tensor("activation", np.full(8, 3, np.float32))
        dlinspect.step()
    assert r.stats() == {("l_activation_max", 0): 3.0} and len(rec.got) == 1


def test_tb_writer_and_metric_logger():
    """tb_writer (a SummaryWriter's add_scalar), MetricLogger.add_logger after initialize (from
    the next step on), MetricLogger.log_scalar of the host's own scalar (to the file log and the
    Python loggers at once), and end_debug emptying the list, as nvdlfw_inspect's."""
    from dlinspect.logging import MetricLogger, wrap_tensorboard_writer
    tb, late = FakeWriter(), Recorder()
    x = np.arange(6, dtype=np.float32)
    with Run(stats_config(stats=["max", "min"]), tb_writer=tb, default_logging_enabled=True) as r:
        assert "TB Writer found. Logging to Tensorboard.." in message_lines(r.dir)
        dlinspect.layer("l").inspect_tensor("activation", x)
        dlinspect.step()
        MetricLogger.add_logger(late)
        dlinspect.layer("l").inspect_tensor("activation", x + 1)
        dlinspect.step()
        MetricLogger.log_scalar("loss", np.float32(0.25), 2)
        assert late.got[-1] == ("loss", 0.25, 2), late.got
        assert len(MetricLogger.enabled_loggers) == 2
    assert MetricLogger.enabled_loggers == []
    assert tb.got == [("l_activation_max", 5.0, 0), ("l_activation_min", 0.0, 0),
                      ("l_activation_max", 6.0, 1), ("l_activation_min", 1.0, 1),
                      ("loss", 0.25, 2)], tb.got
    assert late.got == tb.got[2:], late.got
    assert r.stats()[("loss", 2)] == 0.25
    # Added before initialize, a logger stays until end_debug; wrap_tensorboard_writer as
    # nvdlfw_inspect's.
    tb2 = FakeWriter()
    MetricLogger.add_logger(wrap_tensorboard_writer(tb2))
    with Run(stats_config(stats=["max"])) as r:
        dlinspect.layer("l").inspect_tensor("activation", x)
        dlinspect.step()
    assert tb2.got == [("l_activation_max", 5.0, 0)] and MetricLogger.enabled_loggers == []
    assert not os.path.exists(os.path.join(r.dir, "nvdlfw_inspect_statistics_logs"))
    # Without a context, log_scalar reaches the Python loggers alone.
    rec = Recorder()
    MetricLogger.add_logger(rec)
    MetricLogger.log_scalar("lr", 3, 7)
    MetricLogger.enabled_loggers.clear()
    assert rec.got == [("lr", 3.0, 7)], rec.got


def test_python_loggers_refused_and_failing():
    """Objects that are not loggers are refused before anything starts; a logger that raises
    does not keep the others from their statistics, and step() raises its error after the step
    was taken."""
    d = tempfile.mkdtemp(prefix="dli-py-")
    expect_error(lambda: dlinspect.initialize(log_dir=d, statistics_logger=object()), TypeError,
                 "log_scalar(name, value, iteration)", "object has none")
    expect_error(lambda: dlinspect.initialize(log_dir=d, tb_writer="runs/"), TypeError,
                 "add_scalar(tag, value, step)", "str has none")
    expect_error(lambda: dlinspect.initialize(log_dir=d, feature_dirs=[d, d + "/nope"]),
                 FileNotFoundError, "feature_dirs:", "/nope' is not a directory")
    open(d + "/f", "w").close()
    expect_error(lambda: dlinspect.initialize(log_dir=d, feature_dirs=d + "/f"),
                 NotADirectoryError, "/f' is not a directory")
    expect_error(lambda: dlinspect.logging.MetricLogger.add_logger(print), TypeError,
                 "log_scalar")
    expect_error(lambda: dlinspect.logging.MetricLogger.log_scalar("", 1.0, 0), ValueError,
                 "the name is empty")
    expect_error(lambda: dlinspect.logging.MetricLogger.log_scalar("a", 1.0, -1), ValueError,
                 "iteration must be >= 0")
    assert not dlinspect.is_initialized() and dlinspect.logging.MetricLogger.enabled_loggers == []

    class Broken(dlinspect.logging.BaseLogger):
        def log_scalar(self, name, value, iteration, **kwargs):
            raise OSError("disk gone")

    rec = Recorder()
    with Run(stats_config(stats=["max", "min"]), statistics_logger=Broken()):
        dlinspect.logging.MetricLogger.add_logger(rec)
        dlinspect.layer("l").inspect_tensor("activation", np.ones(4, np.float32))
        expect_error(dlinspect.step, OSError, "disk gone")
        assert dlinspect.iteration() == 1
        assert [n for n, _, _ in rec.got] == ["l_activation_max", "l_activation_min"], rec.got

def test_nvdlfw_alias():
    """dlinspect under nvdlfw_inspect's name: `python -m dlinspect.nvdlfw_alias script.py args`
    runs an unchanged nvdlfw_inspect script on dlinspect; DEBUG_MANAGER as TransformerEngine reads
    it; the parts of nvdlfw_inspect dlinspect does not have refused with the reason; a real
    nvdlfw_inspect imported first makes as_nvdlfw_inspect() refuse. In subprocesses: the alias
    changes sys.modules."""
    d = tempfile.mkdtemp(prefix="dli-py-")
    script = os.path.join(d, "train.py")
    with open(script, "w") as f:
        f.write(
            "import sys\n"
            "import numpy as np\n"
            "import nvdlfw_inspect.api as debug_api\n"
            "from nvdlfw_inspect.logging import BaseLogger, MetricLogger\n"
            "import dlinspect\n"
            "assert debug_api.log_tensor_stats is dlinspect.log_tensor_stats\n"
            "assert MetricLogger is dlinspect.logging.MetricLogger\n"
            "print('argv', sys.argv[1:], __name__)\n"
            "print('manager', debug_api.DEBUG_MANAGER)\n"
            "debug_api.initialize(sys.argv[1], log_dir=sys.argv[2])\n"
            "m = debug_api.DEBUG_MANAGER\n"
            "for it in range(3):\n"
            "    debug_api.log_tensor_stats('m.fc', tensor=np.full(4, it, np.float32), tensor_name='a')\n"
            "    debug_api.step()\n"
            "print('iteration', m._trainer_iteration_count)\n"
            "debug_api.list_features()\n"
            "debug_api.end_debug()\n"
            "print('manager', debug_api.DEBUG_MANAGER)\n"
            "try:\n"
            "    from nvdlfw_inspect.registry import Registry\n"
            "except ImportError as e:\n"
            "    print('refused', type(e).__name__, e)\n")
    cfg = os.path.join(d, "c.yaml")
    with open(cfg, "w") as f:
        f.write("s:\n  enabled: true\n  layers: {layer_name_regex_pattern: .*}\n"
                "  LogTensorStats: {enabled: true, stats: [max], tensors: [a], freq: 1}\n")
    p = subprocess.run([sys.executable, "-m", "dlinspect.nvdlfw_alias", script, cfg, d],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout.splitlines()
    assert out[0] == f"argv [{cfg!r}, {d!r}] __main__", out
    assert out[1] == "manager None" and out[2] == "iteration 3", out
    assert "'base.LogTensorStats'" in out[3] and out[4] == "manager None", out
    assert out[5].startswith("refused ModuleNotFoundError No module named "
                             "'nvdlfw_inspect.registry': dlinspect stands in for nvdlfw_inspect"), out
    assert read_stats(d) == {("m.fc_a_max", i): float(i) for i in range(3)}, read_stats(d)
    # Usage, and a real nvdlfw_inspect (here a stand-in) imported first.
    p = subprocess.run([sys.executable, "-m", "dlinspect.nvdlfw_alias"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "usage: python -m dlinspect.nvdlfw_alias SCRIPT" in p.stderr, p
    p = subprocess.run([sys.executable, "-c",
                        "import sys, types, dlinspect\n"
                        "a = dlinspect.as_nvdlfw_inspect()\n"
                        "assert dlinspect.as_nvdlfw_inspect() is a  # twice: nothing more\n"
                        "del sys.modules['nvdlfw_inspect']\n"
                        "sys.modules['nvdlfw_inspect'] = types.ModuleType('nvdlfw_inspect')\n"
                        "dlinspect.as_nvdlfw_inspect()\n"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1 and "RuntimeError: dlinspect.as_nvdlfw_inspect(): nvdlfw_inspect " \
        "was imported already" in p.stderr, p.stderr


def test_feature_dirs_of_any_iterable_or_bytes_are_searched():
    """feature_dirs given as an iterator (checked, then searched: not consumed by the check) or
    as bytes paths reach the plugin search path first, as a list of str paths does."""
    d = tempfile.mkdtemp(prefix="dli-py-")
    seen, real = [], dlinspect._c._init

    def spy(*args):
        seen.append(args[3])
        return real(*args)

    dlinspect._c._init = spy
    try:
        for fd in ([d], iter([d]), (x for x in [d]), os.fsencode(d), [os.fsencode(d)]):
            dlinspect.initialize(log_dir=d, feature_dirs=fd)
            dlinspect.end_debug()
            assert seen[-1][0] == d, (fd, seen[-1])
    finally:
        dlinspect._c._init = real


def main():
    tests = [(k, v) for k, v in globals().items() if k.startswith("test_") and callable(v)]
    only = sys.argv[1:]
    failed = 0
    for name, fn in tests:
        if only and name not in only:
            continue
        try:
            fn()
            print(f"ok   {name}")
        except Exception:
            failed += 1
            print(f"FAIL {name}")
            traceback.print_exc()
            dlinspect.end_debug()
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
