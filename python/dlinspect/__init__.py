"""dlinspect: numerical debugging for low-precision training, from Python.

One global context, as nvdlfw_inspect's ``debug_api`` has: ``initialize()``, then the
TransformerEngine call set (``fp8_gemm_enabled``, ``inspect_tensor``, ...) by layer name or through
a cached handle (``layer(name)``, the fast path), ``step()`` at the end of each iteration and
``end_debug()``. The calls run in C (the ``_dlinspect`` extension); tensors are read in place
through DLPack or the buffer protocol. numpy and torch are optional. See docs/python.md.
"""

import atexit
import functools
import json
import logging as _logging
import math
import operator
import os
import re
import sys
import warnings

from . import _dlinspect as _c
from . import logging  # the Python loggers (registers their sink with the extension)
from ._dlinspect import (  # noqa: F401  (re-exported)
    NEVER,
    ConfigError,
    Error,
    Layer,
    StopRequested,
    fp8_gemm_enabled,
    get_mode,
    initialize_training_step,
    inspect_tensor,
    inspect_tensor_enabled,
    inspect_tensor_postquantize,
    inspect_tensor_postquantize_enabled,
    iteration,
    layer,
    log_tensor_stats,
    modify_tensor_enabled,
    set_mode,
    step,
)

__all__ = [
    "NEVER", "ConfigError", "Error", "Layer", "Plan", "Quantizer", "StopRequested",
    "as_nvdlfw_inspect", "end_debug",
    "explain_features", "fp8_gemm_enabled", "get_mode", "get_tensor_reduction_group",
    "infer_and_assign_layer_names",
    "initialize", "initialize_training_step", "inspect_tensor", "inspect_tensor_enabled",
    "inspect_tensor_postquantize", "inspect_tensor_postquantize_enabled", "is_initialized",
    "iteration", "layer", "list_features", "log_message", "log_tensor_stats", "modify_tensor",
    "modify_tensor_enabled", "plugin_dirs", "set_mode", "set_tensor_reduction_group", "step",
    "transformer_engine",
]

__version__ = "0.1.0"

#: The plugin modules shipped with the package, beside the extension module: in a wheel the
#: package's plugins/, in the build tree (and an editable install) build/python/dlinspect/plugins/.
PACKAGE_PLUGIN_DIR = os.path.join(os.path.dirname(os.path.abspath(_c.__file__)), "plugins")

_LEVELS = {"ERROR": 0, "WARNING": 1, "INFO": 2, "DEBUG": 3}


def plugin_dirs(feature_dirs=None):
    """The plugin search path initialize() uses: ``feature_dirs``, then $DLINSPECT_PLUGIN_PATH,
    then the package's own plugins/ (where an installed dlinspect keeps its plugin dir: a module
    of the same name found earlier wins, as on PATH)."""
    if isinstance(feature_dirs, (str, bytes, os.PathLike)):
        feature_dirs = [feature_dirs]
    dirs = [os.fsdecode(d) for d in (feature_dirs or [])]  # the extension takes str
    dirs += [d for d in os.environ.get("DLINSPECT_PLUGIN_PATH", "").split(":") if d]
    if os.path.isdir(PACKAGE_PLUGIN_DIR):
        dirs.append(PACKAGE_PLUGIN_DIR)
    return dirs


def _json_default(o):
    # numpy scalars and other numbers that json does not know.
    for conv in (int, float):
        try:
            v = conv(o)
            if v == o:
                return v
        except (TypeError, ValueError):
            pass
    raise TypeError(f"dlinspect: a config value of type {type(o).__name__} has no YAML form: {o!r}")


_NONFINITE = {"\0nan\0": ".nan", "\0inf\0": ".inf", "\0-inf\0": "-.inf"}


def _yaml_scalars(o, inside=()):
    # YAML spells the non-finite floats .nan, .inf; json would write NaN, Infinity.
    if isinstance(o, float) and not math.isfinite(o):
        return "\0nan\0" if math.isnan(o) else ("\0inf\0" if o > 0 else "\0-inf\0")
    if isinstance(o, (dict, list, tuple)):
        # A dict inside itself has no text: say so, not "maximum recursion depth exceeded".
        if id(o) in inside:
            raise ValueError(f"dlinspect: the config holds a {type(o).__name__} inside itself, "
                             f"which has no YAML text")
        inside = inside + (id(o),)
        if isinstance(o, dict):
            return {str(k): _yaml_scalars(v, inside) for k, v in o.items()}
        return [_yaml_scalars(v, inside) for v in o]
    return o


def config_to_yaml(config):
    """The YAML text of a config given as a dict: JSON, one key a line, which YAML reads as is
    (so a ConfigError's line:column points into this text)."""
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict or a YAML string, not {type(config).__name__}")
    text = json.dumps(_yaml_scalars(config), indent=2, default=_json_default)
    for k, v in _NONFINITE.items():
        text = text.replace(json.dumps(k), v)
    return text + "\n"


def initialize(config_file=None, feature_dirs=None, statistics_logger=None, log_dir=".",
               init_training_step=0, default_logging_enabled=False, *, config=None,
               tensor_names=None, log_level=None, comm=None, tb_writer=None, **ignored):
    """Creates the context: reads the config, loads the plugins it names, opens the loggers.
    The positional order is nvdlfw_inspect's (config_file, feature_dirs, statistics_logger,
    log_dir, init_training_step).

    config_file: path of a YAML config (None: $DLINSPECT_CONFIG, and if unset no config, so every
    call answers its default), or the config as a dict, as nvdlfw_inspect takes it. config: the
    config itself instead, as YAML text or a dict.
    feature_dirs: extra plugin dirs, searched first. log_dir: where the logs go (None:
    $DLINSPECT_LOG_DIR, else "."). init_training_step: the first iteration. tensor_names: the
    host's own tensor names besides the standard six (docs/config.md, "Tensor names").
    log_level: "error", "warning", "info" or "debug" (None: $DLINSPECT_LOG_LEVEL, else info).
    statistics_logger: a Python logger (dlinspect.logging.BaseLogger: any object with
    log_scalar(name, value, iteration)); tb_writer: a torch SummaryWriter (add_scalar): both
    receive every statistic, at the end of each step() (docs/python.md, "Python loggers").
    Which other loggers run is the config's `loggers` key; without one, the file logger, whose
    statistics log is written only when no Python logger is there or default_logging_enabled is
    True, as nvdlfw_inspect decides (its message log always is). A config error raises
    ConfigError with its file:line:column; nothing exits the process.
    Any other keyword (extensions=, which nvdlfw_inspect's own docs pass) is ignored with a
    warning that names it, where nvdlfw_inspect ignores it silently.
    comm: how statistics are reduced across ranks (docs/distributed.md, "torch.distributed"):
    None (the default) follows $DLINSPECT_COMMUNICATOR when set ("torch", or a module's name),
    else uses torch.distributed when the host initialized it; "torch" requires it; a torch ProcessGroup reduces within
    that group (dlinspect's ranks are the group's); False uses none (each rank logs its own
    shards, unless $DLINSPECT_COMMUNICATOR names a module); any other object implementing the
    protocol of dlinspect.distributed is used as is.
    """
    if ignored:
        # nvdlfw_inspect's initialize() takes **kwargs and reads only tb_writer and
        # default_logging_enabled from them: scripts written for it may pass more.
        # TransformerEngine's docs name statistics_logger `logger`, which nvdlfw_inspect ignores.
        hint = "; the statistics' logger is statistics_logger=" if "logger" in ignored else ""
        warnings.warn(f"dlinspect.initialize(): ignored keyword arguments: "
                      f"{', '.join(sorted(ignored))} (nvdlfw_inspect ignores them too){hint}",
                      stacklevel=2)
    if isinstance(statistics_logger, (str, bytes, os.PathLike)):
        raise TypeError(
            "initialize(): the third positional argument is statistics_logger, as in "
            f"nvdlfw_inspect, not a path ({statistics_logger!r}): pass log_dir=...")
    # A feature dir that is not there is a typo to say, as nvdlfw_inspect says it (a dir of
    # Python features, TransformerEngine's, is accepted: dlinspect's features are its plugins).
    # A list once: an iterator checked here must still reach plugin_dirs() below.
    feature_dirs = [feature_dirs] if isinstance(feature_dirs, (str, bytes, os.PathLike)) \
        else list(feature_dirs or [])
    for d in feature_dirs:
        if not os.path.isdir(d):
            raise (NotADirectoryError if os.path.exists(d) else FileNotFoundError)(
                f"initialize(): feature_dirs: {os.fsdecode(d)!r} is not a directory")
    new_loggers = []
    if statistics_logger is not None:
        new_loggers.append(logging._check(statistics_logger))
    if tb_writer is not None:
        new_loggers.append(logging.wrap_tensorboard_writer(tb_writer))
    file_statistics = bool(default_logging_enabled) or not (
        new_loggers or logging.MetricLogger.enabled_loggers)
    yaml_text = None
    if isinstance(config_file, dict):
        # nvdlfw_inspect's config_file may be the config itself, as a dict.
        if config is not None:
            raise ValueError("initialize(): pass config_file or config, not both")
        config_file, config = None, config_file
    if config is not None:
        if config_file:
            raise ValueError("initialize(): pass config_file or config, not both")
        yaml_text = config if isinstance(config, str) else config_to_yaml(config)
    if isinstance(tensor_names, (str, bytes)):
        raise TypeError(f"initialize(): tensor_names must be a list of names, not a str: pass "
                        f"tensor_names=[{tensor_names!r}]")
    if tensor_names is not None:
        tensor_names = list(tensor_names)
        for i, t in enumerate(tensor_names):
            # str(1) would declare a tensor "1" that no call of the host names.
            if not isinstance(t, str):
                raise TypeError(f"initialize(): tensor_names[{i}] must be a str, not "
                                f"{type(t).__name__}")
    # int(1.5) would start at step 1 without a word; numpy integers pass (operator.index).
    try:
        step = operator.index(init_training_step)
    except TypeError:
        raise TypeError(f"initialize(): init_training_step must be an integer, not "
                        f"{type(init_training_step).__name__}") from None
    if log_level is None:
        level = -1
    else:
        try:
            level = _LEVELS[str(log_level).upper()]
        except KeyError:
            raise ValueError(f"log_level must be one of error, warning, info, debug, not {log_level!r}") from None
    communicator = _communicator(comm)
    rank, world_size = (0, 0) if communicator is not None else _host_rank()
    _c._init(os.fspath(config_file) if config_file else None, yaml_text,
             os.fspath(log_dir) if log_dir is not None else None, plugin_dirs(feature_dirs),
             step, tensor_names,
             level, communicator, rank, world_size, not file_statistics,
             "Python dictionary" if isinstance(config, dict) else None)
    global _comm, _reduction_group
    _comm, _reduction_group = communicator, None
    logging.MetricLogger.enabled_loggers.extend(new_loggers)
    _c._scalars_wanted(True)
    # nvdlfw_inspect's lines, so that its message log and dlinspect's say the same.
    if statistics_logger is not None:
        _c._log(2, "Using the provided logger for logging tensor statistics.")
    if tb_writer is not None:
        _c._log(2, "TB Writer found. Logging to Tensorboard..")


_comm = None             # the communicator object of the context, for the groups' ranks
_reduction_group = None  # what set_tensor_reduction_group was given


def set_tensor_reduction_group(group, layer_name=None):
    """nvdlfw_inspect's and TransformerEngine's call: from the next step on, the statistics of every
    tensor but the weight are reduced across `group` instead of all ranks (weights keep their
    tensor-parallel groups). group: a torch ProcessGroup (its members must be in dlinspect's
    world), a list of dlinspect's ranks, or None for the whole world again. Every rank calls it,
    each with its own group. layer_name is accepted as nvdlfw_inspect accepts it, and not used:
    the group is every layer's. docs/distributed.md, "The tensor reduction group"."""
    global _reduction_group
    if not _c._initialized():
        raise ValueError("dlinspect: set_tensor_reduction_group() before initialize(): call "
                         "dlinspect.initialize() first")
    _c._reduction_group_set(_group_ranks(group))
    _reduction_group = group


def get_tensor_reduction_group():
    """What set_tensor_reduction_group was last given in this context (None: the whole world)."""
    if not _c._initialized():
        raise ValueError("dlinspect: get_tensor_reduction_group() before initialize(): call "
                         "dlinspect.initialize() first")
    return _reduction_group


def _group_ranks(group):
    """dlinspect's world ranks of `group` (None: None, the world)."""
    if group is None:
        return None
    if isinstance(group, (list, tuple, range)):
        ranks = []
        for r in group:
            try:
                ranks.append(operator.index(r))
            except TypeError:
                raise TypeError(f"set_tensor_reduction_group(): ranks must be integers, not "
                                f"{type(r).__name__}") from None
        return sorted(ranks)
    if not type(group).__module__.startswith("torch"):
        raise TypeError(f"set_tensor_reduction_group(): group must be a torch ProcessGroup, a "
                        f"list of ranks or None, not {type(group).__name__}")
    dist = sys.modules["torch.distributed"]
    members = [int(r) for r in dist.get_process_group_ranks(group)]
    world = getattr(_comm, "global_ranks", None)
    if world is None:
        # No torch communicator: the core's ranks are torch's own (or 0 alone).
        return sorted(members)
    outside = [r for r in members if r not in world]
    if outside:
        raise ValueError(f"set_tensor_reduction_group(): global ranks {outside} of the group are "
                         f"not in dlinspect's world (the process group given to initialize: "
                         f"global ranks {list(world)})")
    return sorted(world.index(r) for r in members)


def _host_rank():
    """(rank, world size) of torch.distributed when the host imported and initialized it, else
    (0, 0): without a communicator object, the core still names its log files by rank
    (nvdlfw_inspect_globalrank-<rank>.log, as nvdlfw_inspect does from torch.distributed), so that
    the ranks of a job do not all write rank 0's files. A communicator module
    (DLINSPECT_COMMUNICATOR) that says otherwise is refused by the core."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # a torch without a default group: the ranks are not known
        pass
    return 0, 0


def _communicator(comm):
    """The communicator object initialize(comm=...) gives the core, or None."""
    env = os.environ.get("DLINSPECT_COMMUNICATOR", "")
    if comm is None:
        if env == "torch":
            comm = "torch"
        elif env:
            return None  # a communicator module: the core loads it
        else:
            # Only a torch the host imported: dlinspect never imports it for a check.
            dist = sys.modules.get("torch.distributed")
            if dist is None or not (dist.is_available() and dist.is_initialized()):
                return None
            comm = "torch"
    if comm is False:
        if env == "torch":
            raise ValueError("initialize(comm=False), but DLINSPECT_COMMUNICATOR=torch")
        return None
    if isinstance(comm, str):
        if comm != "torch":
            raise ValueError(f"comm must be None, False, \"torch\", a torch ProcessGroup or a "
                             f"communicator object, not {comm!r}")
        from .distributed import TorchCommunicator
        return TorchCommunicator()
    if type(comm).__module__.startswith("torch"):
        from .distributed import TorchCommunicator
        return TorchCommunicator(group=comm)
    return comm


def end_debug():
    """Writes what the loggers and DumpTensors still hold, closes the loggers and frees the
    context (statistics of an iteration that step() did not end are not logged: they are logged at
    step(), as TransformerEngine's are). Called at exit when a script did not. Safe to call
    twice, or without initialize(); initialize() may follow. Layer handles stay usable: they
    answer defaults until the next initialize(), then find their layer again. The Python loggers
    get what is left of the queue, then dlinspect.logging.MetricLogger's list is emptied, as
    nvdlfw_inspect's end_debug() empties it. TransformerEngine's debug state, where it is loaded,
    is reset as its namespace resets it at nvdlfw_inspect's end_debug()."""
    was = _c._initialized()
    try:
        _c._destroy()
    finally:
        _c._scalars_wanted(False)
        logging.MetricLogger.enabled_loggers.clear()
        if was:
            _reset_te_debug_state()


def _reset_te_debug_state():
    """What TransformerEngine's Python namespace does when nvdlfw_inspect's end_debug() runs
    (TEDebugState._reset): its layers forget that debugging was on and which were set up, so
    that a model built after the next initialize() (or without one) is not refused. dlinspect
    does not load that namespace (its features are plugins), so it does this itself, for TE's
    modules as they are when loaded (nothing is imported here)."""
    state = sys.modules.get("transformer_engine.debug.pytorch.debug_state")
    te = getattr(state, "TEDebugState", None)
    if te is None:
        return
    te.debug_enabled = None
    layers = getattr(te, "layers_initialized", None)
    if hasattr(layers, "clear"):
        layers.clear()
    buffers = getattr(sys.modules.get("transformer_engine.debug.features.utils.stats_buffer"),
                      "STATS_BUFFERS", None)
    if hasattr(buffers, "reset"):
        buffers.reset()


def is_initialized():
    return _c._initialized()


def _end_debug_at_exit():
    """A script that ends without end_debug() (TransformerEngine's and nvdlfw_inspect's docs never
    call it) still gets what the context holds written: the dumps queued for the writer thread,
    the TensorBoard records a flush_secs holds back, the lines of a last log_tensor_stats. Without
    this they die with the process, the last dump as a .tmp file."""
    if _c._initialized():
        _c._destroy()


atexit.register(_end_debug_at_exit)


_logged_once = set()


def log_message(message, layer_name=None, level="INFO", extra_cachable_args=None):
    """Writes a line to the message log (file logger: nvdlfw_inspect_logs/), prefixed with
    "LAYER={layer_name}: " when a layer is named, as nvdlfw_inspect writes it. level: "ERROR",
    "WARNING", "INFO", "DEBUG" or a `logging` level number. With extra_cachable_args (as
    TransformerEngine passes), a message is written once per (calling line, layer, args) and
    context, as nvdlfw_inspect keys it: a line whose text changes (TransformerEngine's plan of a
    tensor) is written the first time only."""
    if extra_cachable_args is not None:
        caller = sys._getframe(1)
        key = (_c._generation(), caller.f_code.co_filename, caller.f_lineno, str(layer_name),
               repr(extra_cachable_args))
        if key in _logged_once:
            return
        _logged_once.add(key)
    if isinstance(level, int):
        lv = 0 if level >= _logging.ERROR else 1 if level >= _logging.WARNING else \
            2 if level >= _logging.INFO else 3
    else:
        try:
            lv = _LEVELS[str(level).upper()]
        except KeyError:
            raise ValueError(f"level must be ERROR, WARNING, INFO or DEBUG, not {level!r}") from None
    if isinstance(layer_name, Layer):
        layer_name = layer_name.name
    # nvdlfw_inspect's prefix, so that a grep or parser written for its message log finds it.
    _c._log(lv, f"LAYER={layer_name}: {message}" if layer_name else str(message))


def _modules():
    return _c._modules(plugin_dirs())


def as_nvdlfw_inspect():
    """Makes ``import nvdlfw_inspect.api`` (TransformerEngine's, a script's) give dlinspect; call
    it before anything imports nvdlfw_inspect. See dlinspect.nvdlfw_alias."""
    from . import nvdlfw_alias
    return nvdlfw_alias.install()


def list_features():
    """Every feature the plugin dirs provide, as "namespace.Name" (or "Name" for generic ones)."""
    out = []
    for m in _modules():
        for f in m["features"]:
            out.append(f"{m['namespace']}.{f['name']}" if m["namespace"] else f["name"])
    return out


def explain_features(names=None):
    """The features' parameters and docs, as text (all of them, or those named)."""
    if isinstance(names, str):
        names = [names]
    wanted = None if names is None else set(names)
    lines = []
    for m in _modules():
        for f in m["features"]:
            full = f"{m['namespace']}.{f['name']}" if m["namespace"] else f["name"]
            if wanted is not None and not ({full, f["name"], *f["aliases"]} & wanted):
                continue
            lines.append(f"{full}: {f['doc'] or ''}")
            if f["aliases"]:
                lines.append(f"  also spelled: {', '.join(f['aliases'])}")
            lines.append(f"  module: {m['name']} ({m['path']})")
            lines.append("  placed " + ("directly in a section or in its namespace block"
                                        if f["generic"] else "in the section's namespace block"))
            # The keys the core reads for every feature of its kind, then the feature's own.
            for k in f["shared"]:
                lines.append(f"  {k['key']:<16} {k['type']:<20} {k['default']}")
                lines.append(f"  {'':<16} {k['doc']}")
            for p in f["params"]:
                dflt = "required" if p["required"] else f"default {p['default'] or '(none)'}"
                lines.append(f"  {p['key']:<16} {p['type']:<20} {dflt}")
                if p["doc"]:
                    lines.append(f"  {'':<16} {p['doc']}")
                # Worded as `dlinspect plugins --explain` words them (tools/plugins.c).
                if p["choices"]:
                    lines.append(f"  {'':<16} one of: {' '.join(p['choices'])}")
                if p["range"]:
                    lines.append(f"  {'':<16} {p['range']}")
    if wanted is not None and not lines:
        raise ValueError(f"no feature named {', '.join(sorted(wanted))} (dlinspect.list_features() lists them)")
    return "\n".join(lines) + "\n"


def infer_and_assign_layer_names(model):
    """Names every module of a torch model (or a list of models) as nvdlfw_inspect does:
    "model" for the root, then ".child" per level; a ModuleList's children take their
    `layer_number` attribute when they have one. The name goes to `module.name` and
    `module._debug_name`, and, when initialized, to the message log as nvdlfw_inspect writes it
    ("Assigned layer name: model.fc1", one INFO line a module), where its docs send users to
    find the names a config selects from."""
    log = _c._initialized()
    try:
        import torch
        module_list = torch.nn.ModuleList
        module_type = torch.nn.Module
    except ImportError:  # duck-typed models
        module_list = module_type = None

    def visit(module, name):
        if module_list is not None and isinstance(module, module_list):
            for child_name, child in module.named_children():
                visit(child, f"{name}.{getattr(child, 'layer_number', child_name)}")
            return
        if (module_type is not None and not isinstance(module, module_type)
                and not hasattr(module, "named_children")):
            inner = getattr(module, "module", None)
            if inner is None:
                raise TypeError(f"cannot name {type(module).__name__}: not a torch.nn.Module")
            visit(inner, name)
            return
        module.name = name
        module._debug_name = name
        if log:
            _c._log(_LEVELS["INFO"], f"Assigned layer name: {name}")
        for child_name, child in module.named_children():
            visit(child, f"{name}.{child_name}")

    for m in model if isinstance(model, list) else [model]:
        visit(m, "model")


class Plan:
    """A layer's answers at one iteration (Layer.plan()): no call is needed until `next`."""

    __slots__ = ("iteration", "next", "any", "fp8", "inspect", "modify", "postquantize")

    def __repr__(self):
        return (f"Plan(iteration={self.iteration}, next={self.next}, any={self.any}, "
                f"fp8={self.fp8}, inspect={set(self.inspect) or '{}'}, modify={self.modify}, "
                f"postquantize={self.postquantize})")


_GEMMS = ("fprop", "dgrad", "wgrad")
_STD_TENSORS = ("activation", "gradient", "weight", "output", "wgrad", "dgrad")
_tensor_names_by_id = {}


def _names(mask):
    out = []
    i = 0
    while mask:
        if mask & 1:
            out.append(_STD_TENSORS[i] if i < len(_STD_TENSORS) else _tensor_names_by_id.get(i, f"#{i}"))
        mask >>= 1
        i += 1
    return frozenset(out)


def _plan(self):
    it, nxt, any_, fp8, insp, mod, pq = self._plan()
    p = Plan()
    p.iteration, p.next, p.any = it, nxt, any_
    p.fp8 = dict(zip(_GEMMS, fp8))
    p.inspect = _names(insp)
    p.modify = {g: _names(m) for g, m in zip(_GEMMS, mod)}
    p.postquantize = {g: _names(m) for g, m in zip(_GEMMS, pq)}
    return p


def tensor_id(name):
    """The core's id of a tensor name (-1: a name nothing selects)."""
    i = _c._tensor_id(name)
    if i >= len(_STD_TENSORS):
        _tensor_names_by_id[i] = name
    return i


class Quantizer:
    """How the host would quantize a tensor, for modify_tensor: format "float8_e4m3fn" or
    "float8_e5m2", and its current scale and amax when it has them."""

    __slots__ = ("format", "scale", "amax")

    def __init__(self, format, scale=None, amax=None):
        self.format, self.scale, self.amax = format, scale, amax


def _quantizer_args(q):
    if q is None:
        return None, None, None
    fmt = getattr(q, "format", None)
    if fmt is None:  # a torch dtype, or TransformerEngine's quantizer (.dtype)
        fmt = getattr(q, "dtype", None)
    fmt = str(fmt).replace("torch.", "")
    scale = getattr(q, "scale", None)
    amax = getattr(q, "amax", None)
    return fmt, None if scale is None else float(scale), None if amax is None else float(amax)


def _new_like(obj):
    """A contiguous tensor of obj's shape and dtype, from obj's own library (torch) or numpy."""
    mod = type(obj).__module__.split(".")[0]
    if mod == "torch":
        import torch
        return torch.empty(obj.shape, dtype=obj.dtype, device=obj.device)
    import numpy
    return numpy.empty(obj.shape, dtype=obj.dtype)


def _layer_modify_tensor(self, gemm, tensor, obj, out=None, quantizer=None, stream=None):
    """Lets the feature that modifies (gemm, tensor) at this iteration write its result: into
    `out` when given (contiguous, obj's shape), else into a new tensor of obj's kind. Returns
    that tensor, or None when no feature modifies it now."""
    if not self.modify_tensor_enabled(gemm, tensor):
        return None
    dst = _new_like(obj) if out is None else out
    fmt, scale, amax = _quantizer_args(quantizer)
    done = self._modify(gemm, tensor, obj, dst, fmt, scale, amax, stream)
    return dst if done else None


_c._layer_attach("plan", _plan)
_c._layer_attach("modify_tensor", _layer_modify_tensor)


def modify_tensor(layer_name, gemm, tensor_name, tensor, default_quantizer=None, out=None,
                  iteration=None, **kwargs):
    """TransformerEngine's modify_tensor: the modified tensor (new, or `out`), or None when no
    feature modifies (gemm, tensor_name) of this layer now. dtype= (TransformerEngine's keyword):
    a new tensor of another dtype is converted to it, as its features return it."""
    l = layer_name if isinstance(layer_name, Layer) else layer(layer_name)
    if iteration is not None and _c._initialized() and iteration != _c.iteration():
        raise ValueError(f"iteration={iteration}, but dlinspect is at iteration {_c.iteration()}")
    r = l.modify_tensor(gemm, tensor_name, tensor, out=out, quantizer=default_quantizer,
                        stream=kwargs.get("stream"))
    dtype = kwargs.get("dtype")
    if dtype is not None and r is not None and out is None and getattr(r, "dtype", dtype) != dtype:
        r = r.to(dtype) if hasattr(r, "to") else r.astype(dtype)
    return r


def _te_takes_tuples():
    """Whether the TransformerEngine loaded (if any) reads an *_enabled answer as a tuple: its
    layers do from 2.7 on; before, they test the answer itself, which a tuple would always pass."""
    version = getattr(sys.modules.get("transformer_engine"), "__version__", None)
    return _te_version_takes_tuples(version) if isinstance(version, str) else True


@functools.lru_cache(maxsize=8)
def _te_version_takes_tuples(version):
    m = re.match(r"(\d+)\.(\d+)", version)
    return not m or (int(m[1]), int(m[2])) >= (2, 7)


def _te_answer(enabled_call, default):
    """An *_enabled call answering as TransformerEngine's namespace does: (answer, the iteration
    at which its layer must run its debug path again, or None for never). TE runs a layer's debug
    path only in the iterations those answers name (module/base.py: none at all once every answer
    says None), and only there do the answers act: an answer other than the default (`default`:
    FP8 on, nothing inspected or modified) needs it again at the very next iteration however long
    it lasts, as TE's own features answer (DisableFP8GEMM: (False, iteration + 1)); the default
    needs it again where dlinspect says it may change (None for NEVER). A TransformerEngine older
    than 2.7 gets the bare answer it tests."""
    def call(*args, **kwargs):
        kwargs["next"] = True
        answer, nxt = enabled_call(*args, **kwargs)
        if not _te_takes_tuples():
            return answer
        if answer != default:
            return answer, _c.iteration() + 1  # a non-default answer needs a context
        return answer, None if nxt == NEVER else nxt
    call.__name__ = call.__qualname__ = enabled_call.__name__
    call.__doc__ = enabled_call.__doc__
    return staticmethod(call)


class _TransformerEngineAPI:
    """dlinspect.transformer_engine: the call set under the name TransformerEngine calls it by
    (debug_api.transformer_engine.X). Its *_enabled calls answer a tuple (bool, next iteration or
    None), as TransformerEngine's own do: its layers skip the calls until then, and its tests
    read answer[0]."""

    fp8_gemm_enabled = _te_answer(fp8_gemm_enabled, True)
    inspect_tensor_enabled = _te_answer(inspect_tensor_enabled, False)
    inspect_tensor = staticmethod(inspect_tensor)
    modify_tensor_enabled = _te_answer(modify_tensor_enabled, False)
    modify_tensor = staticmethod(modify_tensor)
    inspect_tensor_postquantize_enabled = _te_answer(inspect_tensor_postquantize_enabled, False)
    inspect_tensor_postquantize = staticmethod(inspect_tensor_postquantize)


transformer_engine = _TransformerEngineAPI()
