"""DumpTensors' default format is TransformerEngine's: one torch.save file per layer, tensor and
iteration at {log_dir}/tensor_dumps/rank_{rank}/iter_{iteration:06d}/{layer}_{tensor}.pt, the names
with TransformerEngine's characters replaced by '_', each a dict that torch.load (weights_only, its
default) reads back: high_precision as the host passed it, quantized and quantized.scale_inv for
the FP8 tensor, later microbatches under '{k}.' keys. Checked here with torch's own reader, bit for
bit against the tensors fed, for f32, bf16, f16 and both FP8 formats, 0-d and empty tensors."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_common import Checker, tmpdir  # noqa: E402

import torch  # noqa: E402
import dlinspect  # noqa: E402

CONFIG = """
dump:
  enabled: true
  layers: {layer_name_regex_pattern: '.*'}
  transformer_engine:
    DumpTensors:
      enabled: true
      freq: 2
      tensors_struct:
        - {tensor: activation, high_precision_tensor: true, quantized_tensor: true}
        - {tensor: weight, high_precision_tensor: true}
        - {tensor: gradient, high_precision_tensor: true, dump_quantized_internals: true}
        - {tensor: output, high_precision_tensor: true}
"""


def te_name(name):
    """TransformerEngine's DumpTensors file-name rule, as its documentation states it."""
    for ch in '/\\:*?"<>| .':
        name = name.replace(ch, "_")
    return name


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def main():
    c = Checker()
    d = tmpdir()
    dlinspect.initialize(config=CONFIG, log_dir=d)
    g = torch.Generator().manual_seed(3)
    fed = {}  # (iteration, layer, tensor) -> {key: tensor}
    layers = ["model.layers.0.mlp.fc1", "enc/attn:qkv"]
    for it in range(4):
        for li, layer in enumerate(layers):
            files = {}
            for mb in range(2):  # two microbatches of the activation and the gradient
                x = torch.randn(3, 17, generator=g) * 10 ** (li - 1)
                scale_inv = torch.tensor([0.5 + it], dtype=torch.float32)
                codes = (x / scale_inv).clamp(-448, 448).to(torch.float8_e4m3fn)
                dlinspect.inspect_tensor(layer, "activation", x,
                                         rowwise_quantized_tensor=(codes, scale_inv))
                pre = "" if mb == 0 else "%d." % mb
                files.setdefault("activation", {}).update({
                    pre + "high_precision": x, pre + "quantized": codes,
                    pre + "quantized.scale_inv": scale_inv})
                gr = torch.randn(17, 3, generator=g).to(torch.bfloat16)
                gcodes = gr.float().clamp(-57344, 57344).to(torch.float8_e5m2).t().contiguous()
                gsi = torch.tensor([2.0], dtype=torch.float32)
                dlinspect.inspect_tensor(layer, "gradient", gr,
                                         columnwise_quantized_tensor=(gcodes, gsi))
                files.setdefault("gradient", {}).update({
                    pre + "high_precision": gr, pre + "columnwise_data": gcodes,
                    pre + "columnwise_data.scale_inv": gsi})
            w = torch.randn(4, 5, generator=g).to(torch.float16)
            for _ in range(2):  # a weight counts once per step
                dlinspect.inspect_tensor(layer, "weight", w)
            files["weight"] = {"high_precision": w}
            o = torch.tensor(float(it)) if li == 0 else torch.empty(0, 6)
            dlinspect.inspect_tensor(layer, "output", o)
            files["output"] = {"high_precision": o}
            for t, want in files.items():
                fed[(it, layer, t)] = want
        dlinspect.step()
    dlinspect.end_debug()

    root = os.path.join(d, "tensor_dumps", "rank_0")
    want_paths = sorted(
        os.path.join("iter_%06d" % it, "%s_%s.pt" % (te_name(layer), t))
        for (it, layer, t) in fed if it % 2 == 0)
    got_paths = sorted(os.path.relpath(os.path.join(dp, f), root)
                       for dp, _, fs in os.walk(root) for f in fs)
    c.ok(got_paths == want_paths, "files: %s, want %s" % (got_paths, want_paths))
    c.ok(not os.path.exists(os.path.join(d, "nvdlfw_inspect_tensor_dumps")),
            "no .safetensors dumps by default")
    for (it, layer, t), want in sorted(fed.items()):
        if it % 2:
            continue
        path = os.path.join(root, "iter_%06d" % it, "%s_%s.pt" % (te_name(layer), t))
        if not os.path.exists(path):
            continue
        got = torch.load(path)  # weights_only=True: torch's default
        c.ok(list(got) == list(want), "%s: keys %s, want %s" % (path, list(got), list(want)))
        for k, v in want.items():
            c.ok(k in got and same_bits(got[k], v),
                    "%s[%r]: %r, want %r" % (path, k, got.get(k), v))
    # mmap'd reading takes the records' alignment
    any_path = os.path.join(root, want_paths[0])
    c.ok(os.path.exists(any_path) and isinstance(torch.load(any_path, mmap=True), dict),
         "mmap load")
    c.done()


if __name__ == "__main__":
    main()
