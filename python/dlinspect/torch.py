"""PyTorch integration: dlinspect on any torch model, with or without TransformerEngine.

    import dlinspect, dlinspect.torch
    dlinspect.initialize(config_file="debug.yaml", log_dir="logs")
    handle = dlinspect.torch.attach(model)             # every nn.Linear, fp32 as it is
    handle = dlinspect.torch.attach(model, fp8="delayed")   # or: FP8 emulated on the CPU
    for batch in data:
        loss = model(batch).loss; loss.backward(); opt.step(); opt.zero_grad()
        dlinspect.torch.step()                         # ends the iteration (dlinspect.step())
    handle.detach()

Layer names are those nvdlfw_inspect's infer_and_assign_layer_names gives (`model.`, then the
attribute path, a ModuleList child named by its `layer_number` when it has one), and each selected
module also gets them as `module.name`, as there.

Two modes (docs/python-torch.md):
- fp8=None: hooks. A forward-pre hook hands dlinspect the layer input (`activation`) and `weight`,
  a forward hook the `output`; at a scheduled iteration, gradient hooks on the output
  (`gradient`), on a view of the input (`dgrad`, this layer's share of the input's gradient) and a
  post-accumulate-grad hook on the weight (`wgrad`, read from weight.grad). modify_tensor acts on
  output, dgrad and wgrad there (the model's GEMMs stay as they are).
- fp8="delayed" or "current": the Linear's forward is replaced by an autograd Function that runs
  the three GEMMs (fprop, dgrad, wgrad) as TransformerEngine's Linear does: activation and weight
  cast to E4M3, the gradient to E5M2 (the HYBRID format), each with per-tensor delayed scaling (an
  amax history, `max` of it) or current scaling, the GEMM on the dequantized values in fp32.
  fp8_gemm_enabled (DisableFP8GEMM/Layer) keeps a GEMM in fp32, modify_tensor (PerTensorScaling,
  FakeQuant) replaces a GEMM's operand, and inspect_tensor gets the host's FP8 codes and scale_inv.

Between two iterations the config schedules, a layer's hook compares two ints and returns: the
layer handle's plan() says which iteration to ask again at. The model's root module reads
dlinspect.iteration() once per forward (one C call per model call, not per layer).
"""
import inspect
import math
import struct
import weakref

import torch

import dlinspect as _dli
from dlinspect import _dlinspect as _c

__all__ = ["attach", "emulate_fp8", "step", "set_mode", "layer_names", "Attachment", "fp8_scale",
           "fp8_quantize", "fp8_dequantize", "Fp8Quantizer", "E4M3", "E5M2"]

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
_FLT_MAX = 3.4028234663852886e38
_FLT_MIN = 1.1754943508222875e-38
_GEMMS = ("fprop", "dgrad", "wgrad")
_NEVER = 2 ** 63 - 1
_NOTHING = frozenset()
_NO_MODIFY = {g: _NOTHING for g in _GEMMS}
_ALL_FP8 = {g: True for g in _GEMMS}
# The GEMMs each input feeds, row-wise first (REFERENCE.md; examples/trainer/linear.c).
_FEEDS = {"activation": ("fprop", "wgrad"), "weight": ("fprop", "dgrad"),
          "gradient": ("dgrad", "wgrad")}


def _f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def fp8_scale(amax, dtype, margin=0.0):
    """The per-tensor scale fp8_max / amax / 2^margin, as a float32 value (dlinspect's
    dli_fp8_current_scale: 1 for a zero, infinite or NaN amax)."""
    amax = float(amax)
    if not amax > 0.0 or math.isinf(amax):
        return 1.0
    s = torch.finfo(dtype).max / amax / 2.0 ** margin
    if math.isnan(s):
        return 1.0
    if s >= _FLT_MAX:
        return _FLT_MAX
    if s < _FLT_MIN:
        return _FLT_MIN
    return _f32(s)


def fp8_quantize(x, scale, dtype):
    """x * scale rounded to nearest even in `dtype`, saturated to its finite max (NaN stays NaN)."""
    fmax = torch.finfo(dtype).max
    return (x.float() * scale).clamp_(-fmax, fmax).to(dtype)


def fp8_dequantize(codes, scale):
    """codes times scale_inv = 1 / scale, both float32, as TransformerEngine dequantizes (and
    dlinspect's FakeQuant and PerTensorScaling write)."""
    return codes.float() * torch.tensor(scale, dtype=torch.float32).reciprocal()


class Fp8Quantizer:
    """How this host casts a tensor, as modify_tensor's quantizer: format and current scale."""
    __slots__ = ("dtype", "scale", "amax")

    def __init__(self, dtype, scale, amax=None):
        self.dtype = dtype
        self.scale = scale
        self.amax = amax


def _inspect(lay, *args, **kwargs):
    """Layer.inspect_tensor from a hook. A tensor the core refuses (a float64 model's: the
    statistics read float32, float16, bfloat16 and FP8) was reported on stderr by the core, once per
    tensor, and is counted and reported again at the end; as for a C host, training goes on: an
    exception here would end the forward or backward pass."""
    try:
        lay.inspect_tensor(*args, **kwargs)
    except _dli.Error:
        pass


def _quantized(codes, scale):
    """The host's FP8 tensor as inspect_tensor takes it: (codes, scale_inv), the codes a torch
    float8 tensor, scale_inv a 1-element float32 tensor (the dequantized value is code * scale_inv)."""
    return (codes, torch.tensor([_f32(1.0 / scale)], dtype=torch.float32))


class _Fp8Meta:
    """One tensor's FP8 recipe state: format, amax history and scale (TransformerEngine's
    DelayedScaling with amax_compute_algo max or most_recent), or current scaling."""

    def __init__(self, dtype, recipe, history_len, algo, margin):
        if recipe not in ("delayed", "current"):
            raise ValueError(f"dlinspect.torch: fp8 recipe {recipe!r}: use 'delayed' or 'current'")
        if algo not in ("max", "most_recent"):
            raise ValueError(f"dlinspect.torch: amax_compute_algo {algo!r}: use 'max' or 'most_recent'")
        if history_len < 1:
            raise ValueError(f"dlinspect.torch: amax_history_len {history_len}: must be >= 1")
        self.dtype = dtype
        self.current = recipe == "current"
        self.algo_max = algo == "max"
        self.margin = margin
        self.history = [0.0] * history_len
        self.pos = 0
        self.scale = 1.0
        self.iteration = None  # the iteration whose amax the history's slot `pos` collects

    def _roll(self, iteration):
        # Delayed scaling: the scale for this iteration comes from the history of the earlier
        # ones (updated once per iteration in which the tensor was cast, at its first cast).
        if self.iteration is not None and iteration != self.iteration:
            a = self.history[self.pos]
            if self.algo_max:
                if not math.isnan(a):
                    for h in self.history:
                        if not h <= a:  # NaN wins
                            a = h
                            if math.isnan(a):
                                break
            self.scale = fp8_scale(a, self.dtype, self.margin)
            self.pos = (self.pos + 1) % len(self.history)
            self.history[self.pos] = 0.0
        self.iteration = iteration

    def quantize(self, x, iteration):
        """(codes, dequantized float32, scale) of x with this recipe; records x's amax."""
        amax = float(x.detach().abs().max()) if x.numel() else 0.0
        if self.current:
            self.scale = fp8_scale(amax, self.dtype, self.margin)
        else:
            if iteration != self.iteration:
                self._roll(iteration)
            h = self.history[self.pos]
            if not amax <= h:
                self.history[self.pos] = amax
        codes = fp8_quantize(x, self.scale, self.dtype)
        return codes, fp8_dequantize(codes, self.scale), self.scale

    def quantizer(self):
        return Fp8Quantizer(self.dtype, torch.tensor([self.scale], dtype=torch.float32))


class _Replace(torch.autograd.Function):
    """Forward: `new` in place of `old`; backward: the gradient goes to `old` unchanged (a
    modified output keeps the graph of the original)."""

    @staticmethod
    def forward(ctx, old, new):
        return new

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _Fp8Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, lay):
        return lay._fp8_forward(ctx, x, weight, bias)

    @staticmethod
    def backward(ctx, dy):
        dx, dw, db = ctx.lay._fp8_backward(ctx, dy)
        return dx, dw, db, None


_attached = weakref.WeakKeyDictionary()  # module -> its _Layer, while attached


def _input_name(forward):
    """The name by which forward's input may be passed (nn.Linear's `input`), or None."""
    try:
        params = inspect.signature(forward).parameters.values()
    except (TypeError, ValueError):  # no signature to read
        return None
    for p in params:
        return p.name if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) else None
    return None


class _Layer:
    """One attached module: its dlinspect layer handle, its cached plan and its hooks."""

    def __init__(self, att, module, name):
        if module in _attached:
            raise RuntimeError(f"dlinspect.torch: layer {name} is already attached (as "
                               f"{_attached[module].name}): detach it first")
        self.att = att
        self.module = module
        self.name = name
        self.layer = _dli.layer(name) if att.use_dlinspect else None
        self.next = 0 if self.layer is not None else _NEVER
        self.any = False
        self.live = False
        self.fp8 = _ALL_FP8
        self.inspect = _NOTHING
        self.modify = _NO_MODIFY
        self.wgrad_armed = False
        self.wgrad_hook = None
        self.metas = None
        self.handles = []
        if att.fp8 is not None:
            if not isinstance(module, torch.nn.Linear):
                raise TypeError(f"dlinspect.torch: layer {name}: FP8 emulation needs a torch.nn.Linear, "
                                f"not {type(module).__name__}")
            r = att.fp8
            self.metas = {t: _Fp8Meta(E5M2 if t == "gradient" else E4M3, r, att.amax_history_len,
                                      att.amax_compute_algo, att.margin) for t in _FEEDS}
            if "forward" in module.__dict__:
                raise RuntimeError(f"dlinspect.torch: layer {name}: its forward is already replaced "
                                   "by something else")
            module.forward = self._emulated_forward
        else:
            self.input_name = _input_name(module.forward)
            self.handles.append(module.register_forward_pre_hook(self._pre_hook, with_kwargs=True))
            self.handles.append(module.register_forward_hook(self._post_hook))
        _attached[module] = self

    def detach(self):
        if _attached.get(self.module) is self:
            del _attached[self.module]
        for h in self.handles:
            h.remove()
        self.handles = []
        if self.wgrad_hook is not None:
            self.wgrad_hook.remove()
            self.wgrad_hook = None
        if self.metas is not None:
            self.module.__dict__.pop("forward", None)

    def _query(self):
        p = self.layer.plan()
        self.next = p.next
        self.any = p.any
        self.fp8 = p.fp8
        self.inspect = p.inspect
        self.modify = p.modify

    # ---- hook mode ----

    def _pre_hook(self, module, args, kwargs):
        # The only work between scheduled iterations: these two compares.
        if self.att.iteration >= self.next:
            self._query()
        self.live = self.any
        if not self.any:
            return None
        # The input, positional or by its name (lin(input=x)).
        by_name = not args and self.input_name in kwargs
        if not args and not by_name:
            return None
        lay, ins, mod = self.layer, self.inspect, self.modify
        x = kwargs[self.input_name] if by_name else args[0]
        if "activation" in ins:
            _inspect(lay, "activation", x.detach())
        w = getattr(module, "weight", None)
        if w is not None:
            if "weight" in ins:
                _inspect(lay, "weight", w.detach())
            if ("wgrad" in ins or "wgrad" in mod["wgrad"]) and w.requires_grad and torch.is_grad_enabled():
                self.wgrad_armed = True
                if self.wgrad_hook is None:
                    self.wgrad_hook = w.register_post_accumulate_grad_hook(self._wgrad_hook)
        if (("dgrad" in ins or "dgrad" in mod["dgrad"]) and torch.is_tensor(x) and x.requires_grad
                and torch.is_grad_enabled()):
            # A view of its own, so that the hook sees this layer's share of the input's gradient
            # (q, k and v projections read the same tensor).
            x = x.view_as(x)
            x.register_hook(self._dgrad_hook)
            if by_name:
                return args, {**kwargs, self.input_name: x}
            return (x,) + tuple(args[1:]), kwargs
        return None

    def _post_hook(self, module, args, out):
        if not self.live:
            return None
        self.live = False
        if not torch.is_tensor(out):
            return None
        lay, ins, mod = self.layer, self.inspect, self.modify
        new = None
        if "output" in mod["fprop"]:
            m = lay.modify_tensor("fprop", "output", out.detach())
            if m is not None:
                new = _Replace.apply(out, m) if out.requires_grad and torch.is_grad_enabled() else m
        y = out if new is None else new
        if "output" in ins:
            _inspect(lay, "output", y.detach())
        if "gradient" in ins and y.requires_grad and torch.is_grad_enabled():
            y.register_hook(self._gradient_hook)
        return new

    def _gradient_hook(self, g):
        _inspect(self.layer, "gradient", g)
        return None

    def _dgrad_hook(self, g):
        lay = self.layer
        new = None
        if "dgrad" in self.modify["dgrad"]:
            new = lay.modify_tensor("dgrad", "dgrad", g)
            g = g if new is None else new
        if "dgrad" in self.inspect:
            _inspect(lay, "dgrad", g)
        return new

    def _wgrad_hook(self, w):
        if not self.wgrad_armed:
            return
        self.wgrad_armed = False
        g = w.grad
        if g is None:
            return
        lay = self.layer
        if "wgrad" in self.modify["wgrad"]:
            m = lay.modify_tensor("wgrad", "wgrad", g)
            if m is not None:
                with torch.no_grad():
                    g.copy_(m)
        if "wgrad" in self.inspect:
            _inspect(lay, "wgrad", g)

    # ---- FP8 emulation mode ----

    def _emulated_forward(self, input):  # nn.Linear.forward's name: lin(input=x) works too
        if self.att.iteration >= self.next:
            self._query()
        m = self.module
        return _Fp8Linear.apply(input, m.weight, m.bias, self)

    def _operands(self, t, hp, it, fp8, mod, ins, lay):
        """The two operands tensor t gives the GEMMs it feeds: a feature's modified copy, the FP8
        cast (dequantized), or hp itself; inspect_tensor gets hp and the cast when one is used."""
        g0, g1 = _FEEDS[t]
        hp = hp.detach()  # a Parameter still requires grad inside the Function
        use0 = fp8[g0] and t not in mod[g0]
        use1 = fp8[g1] and t not in mod[g1]
        dq = q = meta = None
        if use0 or use1:
            meta = self.metas[t]
            codes, dq, scale = meta.quantize(hp, it)
            if t in ins:
                q = _quantized(codes, scale)
        ops = []
        for g, use in ((g0, use0), (g1, use1)):
            op = None
            if t in mod[g]:
                # the copy comes in hp's dtype (bf16 for a bf16 model); the GEMMs run in float32
                op = lay.modify_tensor(g, t, hp, quantizer=self.metas[t].quantizer())
                # None: no feature modifies it now after all: the unmodified high precision
                op = hp.float() if op is None else op.float()
            ops.append(op if op is not None else dq if use else hp.float())
        if t in ins:
            _inspect(lay, t, hp, rowwise=q if use0 else None, columnwise=q if use1 else None)
        return ops

    def _result(self, gemm, t, y, mod, ins, lay):
        if t in mod[gemm]:
            m = lay.modify_tensor(gemm, t, y)
            y = y if m is None else m
        if t in ins:
            _inspect(lay, t, y)
        return y

    def _fp8_forward(self, ctx, x, weight, bias):
        it = self.att.iteration
        fp8 = self.fp8
        if self.any:
            lay, ins, mod = self.layer, self.inspect, self.modify
        else:
            lay, ins, mod = None, _NOTHING, _NO_MODIFY
        a_fprop, a_wgrad = self._operands("activation", x, it, fp8, mod, ins, lay)
        w_fprop, w_dgrad = self._operands("weight", weight, it, fp8, mod, ins, lay)
        y = torch.nn.functional.linear(a_fprop, w_fprop, None if bias is None else bias.float())
        y = self._result("fprop", "output", y.to(x.dtype), mod, ins, lay)
        ctx.lay = self
        ctx.plan = (it, fp8, lay, ins, mod)
        ctx.a_wgrad = a_wgrad
        ctx.w_dgrad = w_dgrad
        ctx.has_bias = bias is not None
        ctx.x_dtype, ctx.w_dtype = x.dtype, weight.dtype
        return y

    def _fp8_backward(self, ctx, dy):
        it, fp8, lay, ins, mod = ctx.plan
        a, w = ctx.a_wgrad, ctx.w_dgrad
        ctx.a_wgrad = ctx.w_dgrad = None
        dy = dy.contiguous()
        g_dgrad, g_wgrad = self._operands("gradient", dy, it, fp8, mod, ins, lay)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = self._result("dgrad", "dgrad", g_dgrad.matmul(w).to(ctx.x_dtype), mod, ins, lay)
        if ctx.needs_input_grad[1]:
            n_out, n_in = w.shape
            dw = g_wgrad.reshape(-1, n_out).t().mm(a.reshape(-1, n_in))
            dw = self._result("wgrad", "wgrad", dw.to(ctx.w_dtype), mod, ins, lay)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = dy.reshape(-1, dy.shape[-1]).sum(0)
        return dx, dw, db


def layer_names(model):
    """{module: name} as nvdlfw_inspect's infer_and_assign_layer_names names them: the root is
    "model" (each model of a list too), a child is "<parent>.<attribute>", and a ModuleList's
    child "<parent>.<layer_number>" when it has that attribute (Megatron), else its index. A
    ModuleList itself gets no name; a module reachable twice keeps the last name."""
    names = {}

    def walk(module, prefix):
        if isinstance(module, torch.nn.ModuleList):
            for key, child in module.named_children():
                walk(child, f"{prefix}.{getattr(child, 'layer_number', key)}")
        elif isinstance(module, torch.nn.Module):
            names[module] = prefix
            for key, child in module.named_children():
                walk(child, f"{prefix}.{key}")
        else:
            inner = getattr(module, "module", None)
            if inner is None:
                raise ValueError(f"dlinspect.torch: {type(module).__name__} is not a torch.nn.Module "
                                 "and has no .module")
            walk(inner, prefix)

    for m in (model if isinstance(model, (list, tuple)) else [model]):
        walk(m, "model")
    return names


_live = []


class Attachment:
    """What attach() returns: .layers ({name: module}), .iteration, .step(), .detach()."""

    def __init__(self, model, module_types, names, fp8, amax_history_len, amax_compute_algo,
                 margin, use_dlinspect):
        if fp8 not in (None, "delayed", "current"):
            raise ValueError(f"dlinspect.torch: fp8={fp8!r}: use None, 'delayed' or 'current'")
        self.use_dlinspect = use_dlinspect
        self.fp8 = fp8
        self.amax_history_len = int(amax_history_len)
        self.amax_compute_algo = amax_compute_algo
        self.margin = float(margin)
        self.iteration = _dli.iteration() if use_dlinspect else 0
        self.plans = _c._plan_state()[0]
        self._layers = []
        self._roots = []
        all_names = layer_names(model)
        if names is None:
            types = module_types if isinstance(module_types, type) else tuple(module_types)
            chosen = {m: n for m, n in all_names.items() if isinstance(m, types)}
        else:
            chosen = {}
            for m, n in names.items():
                if not isinstance(m, torch.nn.Module):
                    raise TypeError("dlinspect.torch: names maps modules to layer names")
                chosen[m] = str(n)
        try:
            for m, n in chosen.items():
                m.name = n  # as nvdlfw_inspect's infer_and_assign_layer_names does
                self._layers.append(_Layer(self, m, n))
            if use_dlinspect:
                for root in (model if isinstance(model, (list, tuple)) else [model]):
                    if isinstance(root, torch.nn.Module):
                        # First, before a layer's own hook when the root is a layer too.
                        self._roots.append(root.register_forward_pre_hook(self._sync, prepend=True))
        except BaseException:
            self.detach()
            raise
        _live.append(self)

    @property
    def layers(self):
        return {l.name: l.module for l in self._layers}

    def _sync(self, module, args):
        self._follow(*_c._plan_state())

    def _follow(self, plans, iteration):
        """Takes dlinspect's iteration, and makes every layer plan again at its next call when a
        plan taken before may no longer hold (initialize, end_debug, a step back, a mode switch).
        Without a context the iteration stays, and the layers' plans answer the defaults."""
        if plans != self.plans:
            self.plans = plans
            for lay in self._layers:
                lay.next = 0
        if iteration is not None:
            self.iteration = iteration

    def step(self):
        """Ends the iteration: dlinspect.step() (or, for emulate_fp8 alone, the counter)."""
        if self.use_dlinspect:
            step()
        else:
            self.iteration += 1

    def detach(self):
        """Removes every hook and restores every replaced forward; the model is as before."""
        for l in self._layers:
            l.detach()
        for h in self._roots:
            h.remove()
        self._layers = []
        self._roots = []
        if self in _live:
            _live.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.detach()


def attach(model, module_types=(torch.nn.Linear,), names=None, *, fp8=None, amax_history_len=1024,
           amax_compute_algo="max", margin=0.0):
    """Feeds dlinspect (initialized before) the tensors of every module of `module_types` in
    `model` (a module or a list of them), named as nvdlfw_inspect names them, or of the modules of
    `names` ({module: layer name}). fp8: None (hooks, the model runs as it is), "delayed" or
    "current" (each nn.Linear's GEMMs emulated in FP8, see the module doc). Returns an Attachment;
    call dlinspect.torch.step() (or dlinspect.step()) once per iteration, after optimizer.step()."""
    return Attachment(model, module_types, names, fp8, amax_history_len, amax_compute_algo, margin,
                      True)


def emulate_fp8(model, fp8="delayed", module_types=(torch.nn.Linear,), names=None, *,
                amax_history_len=1024, amax_compute_algo="max", margin=0.0):
    """The FP8 emulation alone, without dlinspect (a baseline run); call .step() once per
    iteration so delayed scaling moves on."""
    if fp8 is None:
        raise ValueError("dlinspect.torch.emulate_fp8: fp8 must be 'delayed' or 'current'")
    return Attachment(model, module_types, names, fp8, amax_history_len, amax_compute_algo, margin,
                      False)


def _follow_all():
    state = _c._plan_state()
    for a in _live:
        if a.use_dlinspect:
            a._follow(*state)


def set_mode(mode):
    """dlinspect.set_mode("train"|"eval"), and every attached layer asks for its plan again at its
    next call (a mode switch may change what the config selects: docs/config.md)."""
    _dli.set_mode(mode)
    _follow_all()


def step():
    """dlinspect.step(), and every attachment's iteration moves with it. Without a context it does
    nothing, as dlinspect.step(). The attachments follow even when it raises StopRequested (the
    step was taken)."""
    try:
        _dli.step()
    finally:
        _follow_all()
