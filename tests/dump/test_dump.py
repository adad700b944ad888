#!/usr/bin/env python3
"""DumpTensors' files read back by independent readers: dump_driver.c feeds known tensors through the
real core and module and writes what it fed (expect/*.bin, manifest.jsonl); this test finds each
expected entry in the right file (the file name computed here from the rules in docs/logging.md),
bit for bit through the safetensors package, with the metadata the docs promise, no other entry, no
file outside the rank's dump directory, and `dlinspect stats` reading the files (FP8 included)
with counts matching numpy/ml_dtypes. Then disk full (RLIMIT_FSIZE: EFBIG): one clear error, the
other dumps intact, no temp file left, training going on; a small queue_mib: every dump written
(the step waited), and what cannot fit said, not dropped silently; and calls from 4 threads at once
into a queue that each step fills. And the same tensors in TransformerEngine's torch.save files
(format: torch), read with Python's zipfile (CRCs) and pickle, no PyTorch: the globals and
persistent ids torch.load's weights-only reader takes, every tensor's bytes, dtype, shape and
contiguous strides, the records aligned to 64 bytes, TransformerEngine's file-name rule (the torch
tests read the same files with torch.load).

argv: dump_driver, the dlinspect binary, tests/pyenv.sh, optionally a scratch directory.
"""
import collections
import errno
import glob
import io
import json
import pickle
import struct
import zipfile
import os
import re
import shutil
import subprocess
import sys
import tempfile

DRIVER = os.path.abspath(sys.argv[1])
TOOL = os.path.abspath(sys.argv[2])
PYENV = sys.argv[3]
PACKAGES = ["numpy", "safetensors", "ml_dtypes"]


def ensure_venv():
    if os.environ.get("DLI_DUMP_IN_VENV"):
        return
    r = subprocess.run([PYENV] + PACKAGES, stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        print("FAIL: no Python environment with %s (see the message above)" % " ".join(PACKAGES))
        sys.exit(1)
    py = r.stdout.strip()
    sys.stdout.flush()
    os.execve(py, [py] + sys.argv, dict(os.environ, DLI_DUMP_IN_VENV="1"))


ensure_venv()

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import safetensors  # noqa: E402
from safetensors import safe_open  # noqa: E402

failures = 0
checks = 0
NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "BF16": ml_dtypes.bfloat16,
      "F8_E4M3": ml_dtypes.float8_e4m3fn, "F8_E5M2": ml_dtypes.float8_e5m2, "I8": np.int8,
      "U8": np.uint8, "I32": np.int32, "I64": np.int64}
TOOL_DTYPE = {"F32": "f32", "F16": "f16", "BF16": "bf16", "F8_E4M3": "e4m3", "F8_E5M2": "e5m2"}


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", what)


# ---- The file-name rules of docs/logging.md, written again from the docs ----

SAFE = set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for c in data:
        h = ((h ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def safe_name(name):
    out = bytearray()
    altered = len(name) == 0 or len(name) > 200 or re.search(rb"-[0-9a-f]{16}\Z", name) is not None
    for c in name:
        if c not in SAFE or (c == ord(".") and (not out or out[-1] == ord("."))):
            c = ord("_")
            altered = True
        out.append(c)
    if altered:
        out = out[:200 - 17] + b"-%016x" % fnv1a64(name)
    return out.decode()


# ---- torch.save files (format: torch), read without PyTorch ----

TE_CHARS = set(b'/\\:*?"<>| .')
TORCH_DTYPES = {"FloatStorage": "F32", "HalfStorage": "F16", "BFloat16Storage": "BF16",
                "DoubleStorage": "F64", "CharStorage": "I8", "ByteStorage": "U8",
                "IntStorage": "I32", "LongStorage": "I64"}
FP8_DTYPES = {"float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2"}
SIZES = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I8": 1, "U8": 1, "I32": 4, "I64": 8,
         "F8_E4M3": 1, "F8_E5M2": 1}


def te_name(name, limit):
    """The name of docs/logging.md's torch files: TransformerEngine's characters replaced; None
    when the name must be altered (its hash then identifies it)."""
    if not name or re.search(rb"-[0-9a-f]{16}\Z", name) or any(c < 0x20 or c == 0x7F for c in name):
        return None
    try:
        name.decode("utf-8")
    except UnicodeDecodeError:
        return None
    out = bytes(ord("_") if c in TE_CHARS else c for c in name)
    return out.decode() if len(out) <= limit else None


class Tensor(collections.namedtuple("Tensor", "dtype shape stride data")):
    pass


def _rebuild(storage, offset, size, stride, requires_grad, hooks, dtype=None):
    cls, data, numel = storage
    if dtype is None:
        dtype = TORCH_DTYPES[cls]
    else:
        check(cls == "UntypedStorage", "torch file: FP8 storage %s" % cls)
        dtype = FP8_DTYPES[dtype]
    check(offset == 0 and not requires_grad and isinstance(hooks, collections.OrderedDict),
          "torch file: offset %r, requires_grad %r, hooks %r" % (offset, requires_grad, hooks))
    unit = 1 if cls == "UntypedStorage" else SIZES[dtype]
    check(numel * unit == len(data), "torch file: storage numel %d for %d bytes" % (numel, len(data)))
    return Tensor(dtype, list(size), list(stride), data)


class TorchUnpickler(pickle.Unpickler):
    """What torch.load(weights_only=True) takes, and nothing else."""

    def __init__(self, f, zf, top):
        super().__init__(f)
        self.zf, self.top = zf, top

    def find_class(self, module, name):
        if (module, name) in (("torch._utils", "_rebuild_tensor_v2"),
                              ("torch._utils", "_rebuild_tensor_v3")):
            return _rebuild
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch" and name in TORCH_DTYPES or (module, name) == ("torch.storage",
                                                                             "UntypedStorage"):
            return "storage:" + name
        if module == "torch" and name in FP8_DTYPES:
            return name
        raise pickle.UnpicklingError("global %s.%s" % (module, name))

    def persistent_load(self, pid):
        kind, cls, key, location, numel = pid
        check(kind == "storage" and location == "cpu" and cls.startswith("storage:"),
              "torch file: persistent id %r" % (pid,))
        return cls[len("storage:"):], self.zf.read(self.top + "data/" + key), numel


def read_torch_file(path):
    """The dict of a torch.save file, checking its zip: CRCs, records, 64-byte alignment."""
    zf = zipfile.ZipFile(path)
    check(zf.testzip() is None, "%s: a record's CRC is wrong" % path)
    names = zf.namelist()
    top = names[0].split("/")[0] + "/"
    for want in ("data.pkl", "byteorder", "version"):
        check(top + want in names, "%s: no %s" % (path, want))
    check(zf.read(top + "byteorder") == b"little" and zf.read(top + "version") == b"3\n",
          "%s: byteorder/version" % path)
    with open(path, "rb") as f:
        raw = f.read()
    for info in zf.infolist():
        check(info.compress_type == zipfile.ZIP_STORED, "%s: %s compressed" % (path, info.filename))
        if "/data/" in info.filename:
            n, m = struct.unpack_from("<HH", raw, info.header_offset + 26)
            start = info.header_offset + 30 + n + m
            check(start % 64 == 0, "%s: %s data at %d" % (path, info.filename, start))
    return TorchUnpickler(io.BytesIO(zf.read(top + "data.pkl")), zf, top).load()


def contiguous_strides(shape):
    out, n = [], 1
    for s in reversed(shape):
        out.insert(0, n)
        n *= max(s, 1)
    return out


def check_torch_files(mode, out, manifest, rank):
    """Every expected entry in its layer's and tensor's torch file, bit for bit, nothing else."""
    root = os.path.join(out, "logs", "tensor_dumps", "rank_%d" % rank)
    want = {}  # (iteration, layer, tensor) -> {dict key: manifest entry}
    for m in manifest:
        tensor, key = m["key"].split(".", 1)
        want.setdefault((m["iteration"], m["layer"], tensor), {})[key] = m
    present = {}
    for d, _, files in os.walk(root):
        for f in files:
            present[os.path.relpath(os.path.join(d, f), root)] = True
    check(len(present) == len(want), "%s: %d torch files, expected %d" % (mode, len(present),
                                                                         len(want)))
    claimed = set()
    for (it, layer, tensor), entries in sorted(want.items()):
        d = "iter_%06d" % it
        plain = te_name(layer, 160)
        suffix = "-%016x_%s.pt" % (fnv1a64(layer), tensor)
        # its altered name when it has one (a clash, or a name the rule leaves unfit), else the
        # rule's name
        cands = [p for p in present if p.startswith(d + "/") and p.endswith(suffix)]
        if not cands and plain is not None:
            cands = [p for p in present if p == "%s/%s_%s.pt" % (d, plain, tensor)]
        check(len(cands) == 1, "%s: %r %s at %d: files %s" % (mode, layer, tensor, it, cands))
        if len(cands) != 1:
            continue
        check(cands[0] not in claimed, "%s: %s claimed twice" % (mode, cands[0]))
        claimed.add(cands[0])
        check(len(os.path.basename(cands[0]).encode()) <= 255, "%s: %s too long" % (mode, cands[0]))
        got = read_torch_file(os.path.join(root, cands[0]))
        check(list(got) == list(entries), "%s: %s keys %s, expected %s" % (mode, cands[0],
                                                                          list(got), list(entries)))
        for key, m in entries.items():
            g = got.get(key)
            if g is None:
                continue
            with open(m["bin"], "rb") as f:
                data = f.read()
            check(g.dtype == m["dtype"] and g.shape == m["shape"] and
                  g.stride == contiguous_strides(m["shape"]) and g.data == data,
                  "%s: %s[%s]: %s %s %s, expected %s %s" % (mode, cands[0], key, g.dtype, g.shape,
                                                           g.stride, m["dtype"], m["shape"]))


def run_driver(mode, scratch):
    out = os.path.join(scratch, mode)
    r = subprocess.run([DRIVER, mode, out], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    check(r.returncode == 0, "%s: driver exit %d: %s" % (mode, r.returncode, r.stderr[-2000:]))
    text = r.stdout.decode(errors="replace")  # last errors quote layer names of any bytes
    rcs = [line.split()[1:] for line in text.splitlines() if line.startswith("rc ")]
    run_driver.stdout = text
    with open(os.path.join(out, "manifest.jsonl")) as f:
        manifest = [json.loads(line) for line in f]
    for m in manifest:
        m["layer"] = bytes.fromhex(m["layer_hex"])
    return out, rcs, manifest, r.stderr.decode(errors="replace")


def message_log(out):
    text = ""
    for p in glob.glob(os.path.join(out, "logs", "nvdlfw_inspect_logs", "*.log")):
        with open(p, encoding="utf-8", errors="replace") as f:
            text += f.read()
    return text


def check_files(mode, out, manifest, rank, world_size):
    """Every expected entry bit for bit in its file, nothing else in the files, nothing elsewhere."""
    dump_dir = os.path.join(out, "logs", "nvdlfw_inspect_tensor_dumps", "rank_%d" % rank)
    by_file = {}
    for m in manifest:
        name = "%s_iter_%06d.safetensors" % (safe_name(m["layer"]), m["iteration"])
        by_file.setdefault(name, []).append(m)
    present = sorted(os.listdir(dump_dir)) if os.path.isdir(dump_dir) else []
    check(present == sorted(by_file), "%s: files %s, expected %s" % (mode, present, sorted(by_file)))
    # Nothing escaped the dump directory: the log dir holds the message logs and the dumps only.
    for root, dirs, files in os.walk(os.path.join(out, "logs")):
        for f in files:
            p = os.path.relpath(os.path.join(root, f), os.path.join(out, "logs"))
            check(p.startswith("nvdlfw_inspect_logs/") or
                  p.startswith("nvdlfw_inspect_tensor_dumps/rank_%d/" % rank) and "/" not in
                  p[len("nvdlfw_inspect_tensor_dumps/rank_%d/" % rank):],
                  "%s: unexpected file %s" % (mode, p))
    check(sorted(os.listdir(out)) == ["expect", "logs", "manifest.jsonl"],
          "%s: the scratch dir holds %s" % (mode, os.listdir(out)))
    for name, entries in sorted(by_file.items()):
        path = os.path.join(dump_dir, name)
        if not os.path.exists(path):
            continue
        check(len(name.encode()) <= 255, "%s: file name too long: %s" % (mode, name))
        umask = os.umask(0o022)
        os.umask(umask)
        check(os.stat(path).st_mode & 0o777 == 0o666 & ~umask,
              "%s: %s has mode %o (umask %o)" % (mode, name, os.stat(path).st_mode & 0o777, umask))
        with open(path, "rb") as f:
            raw = f.read()
        got = dict(safetensors.deserialize(raw))
        want_keys = [m["key"] for m in entries]
        check(sorted(got) == sorted(want_keys),
              "%s: %s holds %s, expected %s" % (mode, name, sorted(got), sorted(want_keys)))
        for m in entries:
            g = got.get(m["key"])
            if g is None:
                continue
            with open(m["bin"], "rb") as f:
                want = f.read()
            check(g["dtype"] == m["dtype"] and list(g["shape"]) == m["shape"],
                  "%s: %s %s is %s %s, expected %s %s" % (mode, name, m["key"], g["dtype"],
                                                          g["shape"], m["dtype"], m["shape"]))
            check(bytes(g["data"]) == want, "%s: %s %s: bytes differ" % (mode, name, m["key"]))
        with safe_open(path, "numpy") as f:
            meta = f.metadata()
            for m in entries:
                if m["dtype"] in ("F32", "F16"):
                    with open(m["bin"], "rb") as b:
                        want = b.read()
                    check(f.get_tensor(m["key"]).tobytes() == want,
                          "%s: %s %s through safe_open differs" % (mode, name, m["key"]))
        layer = entries[0]["layer"]
        check(meta.get("layer") == layer.decode("utf-8", errors="replace"),
              "%s: %s metadata layer %r, expected %r" % (mode, name, meta.get("layer"), layer))
        tensors = []
        for m in entries:
            t = m["key"].split(".")[0]
            if t not in tensors:
                tensors.append(t)
        check(meta.get("tensors") == ",".join(tensors),
              "%s: %s metadata tensors %r, expected %r" % (mode, name, meta.get("tensors"),
                                                           ",".join(tensors)))
        check(meta.get("iteration") == str(entries[0]["iteration"]) and
              meta.get("rank") == str(rank) and meta.get("world_size") == str(world_size),
              "%s: %s metadata %s" % (mode, name, meta))
        # Each per-tensor scaled FP8 entry's scale: 1 / its scale_inv.
        for m in entries:
            if m["dtype"].startswith("F8"):
                sinv = np.frombuffer(bytes(got[m["key"] + ".scale_inv"]["data"]), np.float32)[0]
                s = meta.get(m["key"] + ".scale")
                check(s is not None and abs(float(s) - 1.0 / float(sinv)) <= 1e-8 / float(sinv),
                      "%s: %s %s.scale is %s, scale_inv %s" % (mode, name, m["key"], s, sinv))
    return by_file, dump_dir


def check_stats_tool(mode, path, entries):
    """`dlinspect stats FILE --tensor KEY --json` reads each entry: dtype, shape, and counts as numpy
    finds them in the bytes the driver fed."""
    for m in entries:
        if m["dtype"] not in TOOL_DTYPE:
            continue
        r = subprocess.run([TOOL, "stats", path, "--tensor", m["key"], "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        check(r.returncode == 0, "%s: dlinspect stats %s --tensor %s: %s" % (mode, path, m["key"],
                                                                           r.stderr))
        if r.returncode:
            continue
        doc = json.loads(r.stdout.splitlines()[0])
        with open(m["bin"], "rb") as f:
            x = np.frombuffer(f.read(), NP[m["dtype"]]).astype(np.float64)
        check(doc["tensor"] == m["key"] and doc["dtype"] == TOOL_DTYPE[m["dtype"]] and
              doc["shape"] == m["shape"], "%s: stats header %s for %s" % (mode, doc, m))
        if x.size == 0:
            check(doc["stats"] == {}, "%s: stats of an empty tensor: %s" % (mode, doc))
            continue
        st = doc["stats"]
        want = {"nan_count": int(np.isnan(x).sum()), "inf_count": int(np.isinf(x).sum()),
                "zero%": 100.0 * float((x == 0).sum()) / x.size}
        for k, v in want.items():
            check(k in st and abs(st[k] - v) <= 1e-9 * max(1.0, abs(v)),
                  "%s: %s %s: %s is %s, numpy %s" % (mode, path, m["key"], k, st.get(k), v))
        finite = x[np.isfinite(x)]
        if finite.size == x.size:
            amax = float(np.abs(x).max())
            check(abs(st["cur_amax"] - amax) <= 1e-6 * amax,
                  "%s: %s %s cur_amax %s, numpy %s" % (mode, path, m["key"], st["cur_amax"], amax))


def test_basic(scratch):
    out, rcs, manifest, stderr = run_driver("basic", scratch)
    n_layers = 13
    # dgrad in device memory: refused (-ENOTSUP) at the scheduled steps 0, 2, 4.
    cuda = [int(v) for what, v in rcs if what == "inspect-dgrad-cuda"]
    check(cuda.count(-95) == 3 * n_layers and cuda.count(0) == 2 * n_layers,
          "basic: device-memory refusals %s" % cuda)
    # Each refused call's dli_last_error says why (the message log says it once per reason).
    # (Counted in the whole output: a layer name may hold a newline.)
    text = run_driver.stdout
    n_err = text.count("\nlast-error-dgrad-cuda inspect_tensor failed on layer ")
    n_why = text.count(": DumpTensors: 'dgrad.high_precision' (64 bytes) was not dumped: it is in "
                       "device memory, and this dlinspect copies only host memory")
    check(n_err == 3 * n_layers and n_why == n_err,
          "basic: %d refused calls' last errors, %d with the reason, expected %d"
          % (n_err, n_why, 3 * n_layers))
    others = [(w, v) for w, v in rcs if w != "inspect-dgrad-cuda"]
    check(others and all(v == "0" for w, v in others),
          "basic: failed calls %s" % [o for o in others if o[1] != "0"])
    by_file, dump_dir = check_files("basic", out, manifest, 3, 4)
    check(len(by_file) == 3 * n_layers, "basic: %d files, expected %d" % (len(by_file),
                                                                        3 * n_layers))
    # The layer names that collide once their unsafe bytes are replaced have files of their own.
    names = {safe_name(bytes.fromhex(m["layer_hex"])) for m in manifest}
    check(len(names) == n_layers, "basic: %d distinct file names for %d layers" % (len(names),
                                                                                 n_layers))
    check("a_b" in names and any(n.startswith("a_b-") for n in names), "basic: names %s" % names)
    log = message_log(out)
    refusals = re.findall(r"tensor 'dgrad', iteration \d+: 'dgrad.high_precision' \(64 bytes\) was "
                          r"not dumped: it is in device memory", log)
    check(len(refusals) == n_layers, "basic: %d device-memory messages, expected one per layer (%d)"
          % (len(refusals), n_layers))
    check(log.count("DumpTensors: wrote ") == 3 * n_layers, "basic: 'wrote' lines in the log")
    first = os.path.join(dump_dir, "model.layers.0.mlp.fc1_iter_000000.safetensors")
    check_stats_tool("basic", first, by_file.get(os.path.basename(first), []))
    # The whole file, as `dlinspect stats` lists it without --tensor.
    r = subprocess.run([TOOL, "stats", first], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    check(r.returncode == 0 and "activation.quantized  e4m3  [8, 16]" in r.stdout,
          "basic: dlinspect stats %s: %s %s" % (first, r.stdout[:300], r.stderr))


def test_torch(scratch):
    out, rcs, manifest, stderr = run_driver("torch", scratch)
    others = [(w, v) for w, v in rcs if w != "inspect-dgrad-cuda"]
    check(others and all(v == "0" for w, v in others),
          "torch: failed calls %s" % [o for o in others if o[1] != "0"])
    check_torch_files("torch", out, manifest, 3)
    check(not os.path.exists(os.path.join(out, "logs", "nvdlfw_inspect_tensor_dumps")),
          "torch: a .safetensors dump too")
    # The layers TransformerEngine's rule makes one name (a/b, a:b, a?b, a_b): one keeps it.
    it0 = os.listdir(os.path.join(out, "logs", "tensor_dumps", "rank_3", "iter_000000"))
    check("a_b_weight.pt" in it0 and sum(f.startswith("a_b-") and f.endswith("_weight.pt")
                                         for f in it0) == 3, "torch: names %s" % sorted(it0))
    check("model_layers_0_mlp_fc1_activation.pt" in it0, "torch: names %s" % sorted(it0))


def test_diskfull(scratch):
    out, rcs, manifest, stderr = run_driver("diskfull", scratch)
    check(rcs and all(v == "0" for w, v in rcs), "diskfull: calls failed %s (training must go on)"
          % rcs)
    check(sum(1 for w, v in rcs if w == "step") == 5, "diskfull: steps %s" % rcs)
    by_file, dump_dir = check_files("diskfull", out, manifest, 0, 1)
    check(sorted(by_file) == ["model.fc1_iter_%06d.safetensors" % i for i in (0, 2, 4)],
          "diskfull: %s" % sorted(by_file))
    check(not glob.glob(os.path.join(dump_dir, ".*")), "diskfull: temp files left: %s"
          % os.listdir(dump_dir))
    log = message_log(out)
    first = re.findall(r"DumpTensors: could not write .*model\.fc1_iter_000001\.safetensors "
                       r"\(layer 'model\.fc1', iteration 1\): File too large; the dump is lost, "
                       r"earlier dumps are intact, training goes on", log)
    check(len(first) == 1 and log.count("could not write") == 1,
          "diskfull: the first failure must be said once in the message log:\n" + log[-3000:])
    check("2 of 5 dump files could not be written" in log, "diskfull: no total at the end")
    check(stderr.count("could not write") == 1 and "File too large" in stderr,
          "diskfull: stderr must say it once:\n" + stderr[-2000:])


def test_queue(scratch):
    out, rcs, manifest, stderr = run_driver("queue", scratch)
    inspects = [int(v) for w, v in rcs if w == "inspect"]
    check(len(inspects) == 44 and inspects.count(-105) == 1 and inspects[42] == -105,
          "queue: results %s (only C at step 20 may be refused, -ENOBUFS)" % inspects)
    by_file, dump_dir = check_files("queue", out, manifest, 0, 1)
    want = sorted(["%s_iter_%06d.safetensors" % (l, i) for i in range(21) for l in "AB"] +
                  ["A_iter_000021.safetensors"])
    check(sorted(by_file) == want, "queue: files %s" % sorted(by_file))
    log = message_log(out)
    check(len(re.findall(r"layer 'C', tensor 'activation', iteration 20: "
                         r"'activation.high_precision' \(32768 bytes\) was not dumped: the step's "
                         r"copies fill queue_mib \(raise it\)", log)) == 1,
          "queue: the refusal must be said:\n" + log[-3000:])
    check("1 tensors were not dumped because queue_mib was full" in log, "queue: no total")


def test_threads(scratch):
    out, rcs, manifest, stderr = run_driver("threads", scratch)
    check(len(rcs) == 90 and all(v == "0" for w, v in rcs), "threads: calls failed %s" % rcs)
    by_file, dump_dir = check_files("threads", out, manifest, 0, 1)
    check(len(by_file) == 80, "threads: %d files, expected 80" % len(by_file))


def test_nodir(scratch):
    out, rcs, manifest, stderr = run_driver("nodir", scratch)
    check(len(rcs) == 4 and all(v == "0" for w, v in rcs), "nodir: calls failed %s" % rcs)
    log = message_log(out)
    check(len(re.findall(r"DumpTensors: could not create the directory for .*/rank_0/"
                         r"model\.fc1_iter_000000\.safetensors \(layer 'model\.fc1', iteration 0\): "
                         r"Not a directory", log)) == 1 and log.count("could not create") == 1,
          "nodir: the failure must be said once:\n" + log[-3000:])
    check("2 of 2 dump files could not be written" in log, "nodir: no total")
    check(stderr.count("could not create the directory") == 1, "nodir: stderr:\n" + stderr)


def test_reload(scratch):
    out, rcs, manifest, stderr = run_driver("reload", scratch)
    check(len(rcs) == 7 and all(v == "0" for w, v in rcs), "reload: calls failed %s" % rcs)
    # check_files wants the scratch dir to hold only what the others hold: the config goes first.
    os.unlink(os.path.join(out, "config.yaml"))
    by_file, dump_dir = check_files("reload", out, manifest, 0, 1)
    check(sorted(by_file) == ["model.fc1_iter_000000.safetensors",
                              "model.fc1_iter_000002.safetensors"], "reload: %s" % sorted(by_file))


def test_longtensor(scratch):
    # A tensor name longer than the keys' buffers: refused with a message, never dumped under a
    # cut or garbage key (its torch key was read past the end of the cut one).
    out, rcs, manifest, stderr = run_driver("longtensor", scratch)
    check(rcs == [["tensor-id", "0"], ["inspect", str(-errno.ENAMETOOLONG)], ["step", "0"]],
          "longtensor: results %s (the call refused, -ENAMETOOLONG)" % rcs)
    files = [f for _, _, fs in os.walk(os.path.join(out, "logs", "tensor_dumps")) for f in fs]
    check(files == [], "longtensor: dumped as %s" % files)
    check("longer than DumpTensors' keys take" in message_log(out), "longtensor: no message")


def test_tenames(scratch):
    # a.b and a_b, one name by TransformerEngine's rule: a_b alone at iteration 0, both at 1.
    # Each tensor keeps its file name from one iteration to the next (a_b's is never a.b's).
    out, rcs, manifest, stderr = run_driver("tenames", scratch)
    check(all(rc[1] == "0" for rc in rcs), "tenames: results %s" % rcs)
    root = os.path.join(out, "logs", "tensor_dumps", "rank_0")
    names = {}  # tensor -> its file name at each iteration
    for m in manifest:
        tensor = m["key"].rsplit(".", 1)[0]
        with open(m["bin"], "rb") as f:
            data = f.read()
        d = os.path.join(root, "iter_%06d" % m["iteration"])
        found = [f for f in os.listdir(d)
                 if read_torch_file(os.path.join(d, f))["high_precision"].data == data]
        check(len(found) == 1, "tenames: %s at %d in %s" % (tensor, m["iteration"], found))
        names.setdefault(tensor, set()).update(found)
    check(names.get("a_b") and len(names["a_b"]) == 1,
          "tenames: a_b's files at the two iterations: %s" % names.get("a_b"))
    check(not (names.get("a_b", set()) & names.get("a.b", set())),
          "tenames: one file name for both tensors: %s" % names)


def test_clash(scratch):
    """A host tensor named "activation.1" would give the key of activation's second call a second
    time, and safetensors refuses a header with a key twice: the later one is refused, said once,
    and the file holds both calls of activation."""
    out, rcs, manifest, stderr = run_driver("clash", scratch)
    check(rcs == [["tensor-id", "0"], ["inspect", "0"], ["inspect", "0"], ["inspect", "-17"],
                  ["step", "0"]], "clash: results %s (the third call refused, -EEXIST)" % rcs)
    by_file, dump_dir = check_files("clash", out, manifest, 0, 1)
    check(sorted(by_file) == ["model.fc1_iter_000000.safetensors"], "clash: %s" % sorted(by_file))
    log = message_log(out)
    check(len(re.findall(r"DumpTensors: layer 'model\.fc1', tensor 'activation\.1', iteration 0: "
                         r"'activation\.1\.high_precision' \(64 bytes\) was not dumped: another "
                         r"tensor's call took that key in this file", log)) == 1,
          "clash: the refusal must be said once:\n" + log[-3000:])


def main():
    scratch = sys.argv[4] if len(sys.argv) > 4 else tempfile.mkdtemp(prefix="dli-dump-")
    try:
        test_basic(scratch)
        test_torch(scratch)
        test_diskfull(scratch)
        test_queue(scratch)
        test_threads(scratch)
        test_nodir(scratch)
        test_reload(scratch)
        test_clash(scratch)
        test_longtensor(scratch)
        test_tenames(scratch)
    finally:
        if len(sys.argv) <= 4:
            shutil.rmtree(scratch, ignore_errors=True)
    print("%d checks, %d failures" % (checks, failures))
    sys.exit(1 if failures else 0)


main()
