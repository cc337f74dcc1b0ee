"""ONNX stage 7, quantization: ONNX Runtime's quantizers on the finished graph, and their PyTorch reference.

* ``int8``: ``onnxruntime.quantization.quantize_dynamic``: each weight ``MatMul`` becomes ``DynamicQuantizeLinear``
  (its input, uint8, one scale per tensor, computed at run time) and ``MatMulInteger`` against int8 weights with
  one scale per tensor.
* ``int4``: ``MatMulNBitsQuantizer``: each weight ``MatMul`` becomes a ``MatMulNBits`` of int4 weights, symmetric,
  one scale per ``block_size`` input channels; activations stay float (accuracy level 0: float arithmetic).
* ``embeddings``: the token embedding ``Gather`` too (int8: a dequantized int8 table; int4: ``GatherBlockQuantized``).

Only ``MatMul`` nodes whose weight is one of the model's ``nn.Linear`` (or transformers ``Conv1D``) weights are
quantized, found by value (torch.onnx folds ``weight.T`` into an initializer that equals it bit for bit): the
fidelity reference is then the eager model with exactly those layers' weights replaced by the dequantized
values read from the quantized graph (the same scales), and, for ``int8``, their inputs put through the same
quantize-dequantize as ``DynamicQuantizeLinear`` (round half to even, saturating). A weight ``MatMul`` with
no such layer is left float, recorded in ``kept_float``.
"""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import torch

from exporters.quantize.record import QuantizedExport
from exporters.quantize.schemes import QuantizeConfig, QuantizeError


def _multiplies_its_input(module: torch.nn.Module) -> bool:
    """An ``nn.Linear`` (subclasses too: Falcon's ``FalconLinear``) or transformers' ``Conv1D``: a module that
    computes ``input @ weight(.T)``, so its input is the MatMul's (what ``DynamicQuantizeLinear`` quantizes)."""
    return isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D"


def quantize_onnx(model: ir.Model, float_model: torch.nn.Module, config: QuantizeConfig) -> tuple[ir.Model, QuantizedExport]:
    """The quantized graph and its record (the PyTorch reference built from the graph's own scales)."""
    proto = ir.serde.serialize_model(model)
    layers, kept_float = _weight_layers(proto, float_model)
    embeddings = _embedding_gathers(proto, float_model) if config.embeddings else {}
    if not layers:
        raise QuantizeError(f"--quantize {config.scheme}: no MatMul of the graph multiplies by an nn.Linear or "
                            "Conv1D weight of the model, so nothing would be quantized")
    chosen = [*sorted(layers), *sorted(embeddings)]
    quantized = _quantize_int8(proto, chosen, config) if config.scheme == "int8" else _quantize_int4(proto, chosen, config)
    _require_quantized(quantized, len(layers), len(embeddings), config)
    reference = _reference(float_model, quantized, layers, embeddings, dynamic_inputs=config.scheme == "int8")
    method = (f"onnxruntime quantize_dynamic(weight_type=QInt8, per_channel=False, op_types_to_quantize="
              f"{_op_types(config)})" if config.scheme == "int8" else
              f"onnxruntime MatMulNBitsQuantizer(bits=4, block_size={config.block_size}, is_symmetric=True, "
              f"accuracy_level=0, op_types_to_quantize={_op_types(config)})")
    record = QuantizedExport(config, "onnx", reference, method,
                             quantized=[layers[n][0] for n in sorted(layers)] + [embeddings[n] for n in sorted(embeddings)],
                             kept_float=kept_float,
                             requantized=[layers[n][0] for n in sorted(layers)] if config.scheme == "int8" else [])
    return ir.serde.deserialize_model(quantized), record


def _op_types(config: QuantizeConfig) -> list[str]:
    return ["MatMul", "Gather"] if config.embeddings else ["MatMul"]


def _initializers(proto: onnx.ModelProto) -> dict[str, onnx.TensorProto]:
    return {tensor.name: tensor for tensor in proto.graph.initializer}


def _weight_layers(proto: onnx.ModelProto, model: torch.nn.Module) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """``{MatMul node: (layer name, weight initializer)}`` for each MatMul whose constant weight is a layer's, and
    ``{node: why}`` for weight MatMuls left float."""
    initializers = _initializers(proto)
    by_shape: dict[tuple[int, ...], list[tuple[str, torch.Tensor]]] = {}
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if _multiplies_its_input(module) and isinstance(weight, torch.Tensor) and weight.dim() == 2:
            as_matmul = weight.detach().T if isinstance(module, torch.nn.Linear) else weight.detach()
            by_shape.setdefault(tuple(as_matmul.shape), []).append((name, as_matmul))
    layers: dict[str, tuple[str, str]] = {}
    kept: dict[str, str] = {}
    for node in proto.graph.node:
        if node.op_type != "MatMul" or len(node.input) < 2 or node.input[1] not in initializers:
            continue
        weight = torch.from_numpy(onnx.numpy_helper.to_array(initializers[node.input[1]]).copy())
        owner = next((name for name, value in by_shape.get(tuple(weight.shape), []) if torch.equal(value, weight)), None)
        if owner is None:
            kept[node.name] = "its weight is no nn.Linear or Conv1D weight of the model, so PyTorch has no reference"
        else:
            layers[node.name] = (owner, node.input[1])
    return layers, kept


def _embedding_gathers(proto: onnx.ModelProto, model: torch.nn.Module) -> dict[str, str]:
    """``{Gather node: embedding module}`` for each Gather of an ``nn.Embedding``'s table (found by value)."""
    initializers = _initializers(proto)
    tables = [(name, module.weight.detach()) for name, module in model.named_modules()
              if isinstance(module, torch.nn.Embedding)]
    found = {}
    for node in proto.graph.node:
        if node.op_type == "Gather" and node.input[0] in initializers:
            table = torch.from_numpy(onnx.numpy_helper.to_array(initializers[node.input[0]]).copy())
            owner = next((name for name, weight in tables if weight.shape == table.shape and torch.equal(weight, table)), None)
            if owner is not None:
                found[node.name] = owner
    return found


def _quantize_int8(proto: onnx.ModelProto, chosen: list[str], config: QuantizeConfig) -> onnx.ModelProto:
    """``quantize_dynamic`` of the ``chosen`` nodes only (its ``nodes_to_quantize`` restricts)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="exportbot-quantize-") as directory:
        path = Path(directory) / "quantized.onnx"
        quantize_dynamic(proto, path, op_types_to_quantize=_op_types(config), nodes_to_quantize=chosen,
                         per_channel=False, weight_type=QuantType.QInt8,
                         extra_options={"MatMulConstBOnly": True})
        return onnx.load(str(path))


def _quantize_int4(proto: onnx.ModelProto, chosen: list[str], config: QuantizeConfig) -> onnx.ModelProto:
    """``MatMulNBitsQuantizer`` of the ``chosen`` nodes only: its ``nodes_to_include`` only adds nodes to those
    of its op types, so every other node is excluded by name."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    excluded = [node.name for node in proto.graph.node if node.name not in set(chosen)]
    quantizer = MatMulNBitsQuantizer(proto, bits=4, block_size=config.block_size, is_symmetric=True,
                                     accuracy_level=None, nodes_to_exclude=excluded,
                                     op_types_to_quantize=tuple(_op_types(config)))
    quantizer.process()
    return quantizer.model.model


QUANTIZED_OPS = {"int8": ("MatMulInteger", "Gather"), "int4": ("MatMulNBits", "GatherBlockQuantized")}


def _require_quantized(model: onnx.ModelProto, layers: int, tables: int, config: QuantizeConfig) -> None:
    """The quantizer quantized exactly the layers and tables asked for: a node the PyTorch reference does not
    quantize would fail fidelity, and here it is named as what it is."""
    matmul, gather = QUANTIZED_OPS[config.scheme]
    found = sum(node.op_type == matmul for node in model.graph.node)
    quantized_tables = sum(node.op_type == gather and node.input[0].endswith(("_quantized", "_Q4"))
                           for node in model.graph.node)
    if (found, quantized_tables) != (layers, tables):
        raise QuantizeError(f"ONNX Runtime's quantizer made {found} {matmul} and {quantized_tables} quantized "
                            f"{gather} nodes; {layers} and {tables} were asked for")


# ── The PyTorch reference: the same scales, dequantized ──
def _reference(model: torch.nn.Module, quantized: onnx.ModelProto, layers: dict[str, tuple[str, str]],
               embeddings: dict[str, str], dynamic_inputs: bool) -> torch.nn.Module:
    """A copy of ``model`` with each quantized layer's weight dequantized from ``quantized`` (its own attribute,
    so a weight tied to the embedding table unties), and, with ``dynamic_inputs``, its input quantized as
    ``DynamicQuantizeLinear`` does."""
    reference = copy.deepcopy(model).eval()
    weights = dict(_dequantized_weights(quantized))
    for layer, initializer in layers.values():
        module = reference.get_submodule(layer)
        matrix = weights[initializer]  # [K, N], as the MatMul takes it
        module.weight = torch.nn.Parameter(matrix.T.contiguous() if isinstance(module, torch.nn.Linear) else matrix,
                                           requires_grad=False)
        if dynamic_inputs:
            module.register_forward_pre_hook(_quantize_input)
    tables = dict(_dequantized_tables(quantized))
    for node, name in embeddings.items():
        reference.get_submodule(name).weight = torch.nn.Parameter(tables[node], requires_grad=False)
    return reference


def _quantize_input(_module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    return (dynamic_quantize_linear(args[0]), *args[1:])


def dynamic_quantize_linear(x: torch.Tensor) -> torch.Tensor:
    """``x`` through ONNX's ``DynamicQuantizeLinear`` and back: uint8, one scale for the tensor over [min(0, x),
    max(0, x)], zero point and values rounded half to even and saturated."""
    low, high = torch.clamp(x.min(), max=0.0), torch.clamp(x.max(), min=0.0)
    scale = (high - low) / 255.0
    if float(scale) == 0.0:
        return x
    zero_point = torch.clamp(torch.round(-low / scale), 0, 255)
    return (torch.clamp(torch.round(x / scale) + zero_point, 0, 255) - zero_point) * scale


def _dequantized_weights(proto: onnx.ModelProto) -> Iterator[tuple[str, torch.Tensor]]:
    """``(float weight initializer name, [K, N] dequantized)`` for each weight the quantizer replaced."""
    tensors = _initializers(proto)

    def initializer(name: str) -> torch.Tensor:
        return torch.from_numpy(onnx.numpy_helper.to_array(tensors[name]).copy())

    for node in proto.graph.node:
        if node.op_type == "MatMulInteger":  # inputs: A, B (int8), A zero point, B zero point; B's scale: <B>_scale
            weight = node.input[1]
            original = weight.removesuffix("_quantized")
            scale, zero_point = initializer(f"{original}_scale"), initializer(node.input[3])
            yield original, (initializer(weight).double() - zero_point.double()).mul(scale.double()).float()
        elif node.op_type == "MatMulNBits":  # inputs: A, B (packed uint4 [N, blocks, bytes]), scales[, zero points]
            attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            yield node.input[1].removesuffix(f"_Q{attributes['bits']}"), _unpack_nbits(
                initializer(node.input[1]), initializer(node.input[2]), attributes)


def _unpack_nbits(packed: torch.Tensor, scales: torch.Tensor, attributes: dict[str, Any]) -> torch.Tensor:
    """MatMulNBits' weight as ``[K, N]`` float: 4-bit values two to a byte, low nibble first, symmetric around 8,
    one scale per block of ``block_size`` along K."""
    rows, columns, block = attributes["K"], attributes["N"], attributes["block_size"]
    data = packed.to(torch.int16).reshape(columns, -1)
    values = torch.stack([data & 0x0F, data >> 4], dim=-1).reshape(columns, -1)  # [N, blocks * block]
    centred = values.double() - 8.0
    per_block = scales.double().reshape(columns, -1)
    weight = (centred.reshape(columns, per_block.shape[1], block) * per_block[..., None]).reshape(columns, -1)
    return weight[:, :rows].T.float().contiguous()


def _dequantized_tables(proto: onnx.ModelProto) -> Iterator[tuple[str, torch.Tensor]]:
    """``(Gather node name, table)`` for each embedding table the quantizer replaced: int8 through
    DequantizeLinear (``quantize_dynamic``), int4 through ``GatherBlockQuantized``."""
    arrays = {name: onnx.numpy_helper.to_array(t) for name, t in _initializers(proto).items()}
    for node in proto.graph.node:
        if node.op_type == "Gather" and node.input[0].endswith("_quantized") and node.input[0] in arrays:
            original = node.input[0].removesuffix("_quantized")
            table = arrays[node.input[0]].astype(np.float64) - arrays[f"{original}_zero_point"].astype(np.float64)
            yield node.name, torch.from_numpy(table * arrays[f"{original}_scale"].astype(np.float64)).float()
        elif node.op_type == "GatherBlockQuantized":
            attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            data = arrays[node.input[0]].astype(np.float64)  # int4 values (numpy_helper unpacks them)
            scales = arrays[node.input[2]].astype(np.float64)
            block = attributes.get("block_size", 128)
            rows, width = data.shape
            table = (data.reshape(rows, -1, block) * scales.reshape(rows, -1, 1)).reshape(rows, width)
            yield node.name.removesuffix("_Q4"), torch.from_numpy(table).float()
