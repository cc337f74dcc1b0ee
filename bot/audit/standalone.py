"""A reproducer written out as a script an upstream maintainer can run: torch, transformers and the backend
package only (pure: plain data in, Python source out).

Why not exportbot's own reproducer: an upstream maintainer will not install exportbot to see a bug. So what
exportbot builds (the tiny model's config, its seed, the sample inputs, the export call with its dynamic
shapes and backend options) is described as data (:class:`ScriptSpec`, filled by ``bot.run.drafts`` from the
built reproducer) and written here as literal Python: the model from an inline config dict and a seed, the
inputs inline, eager once (so the report shows the model itself works), then the failing call, whose
traceback is the script's output. Nothing is caught: an export that fails exits non-zero with the error.

What the tiny builder does beyond the config (weight re-initialisation, BatchNorm recalibration) is not
copied; a reproducer that needs it does not fail as recorded, and its verification says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.audit.drafts import GENERATED_SCRIPT

LITERAL_ELEMENTS = 512  # integer and boolean inputs up to this size are written out value by value
_INDENT = "    "


@dataclass(frozen=True)
class TensorSpec:
    """One tensor input: ``kind`` is ``literal`` (``values``: nested lists), ``full`` (``values``: the fill),
    ``randint`` (``values``: [low, high)) or ``randn``."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # a torch dtype's name: "int64", "float32", "bool"
    kind: str
    values: Any = None


@dataclass(frozen=True)
class DimSpec:
    """A dynamic dim: ``Dim.AUTO`` (``Dim.STATIC`` with ``static``) when ``name`` is None, with its bounds
    when given; else the named ``Dim(name, min=, max=)`` every input using that name shares."""

    name: str | None = None
    min: int | None = None
    max: int | None = None
    static: bool = False

    @property
    def hint(self) -> str:
        """The hint as written in the script (a named Dim as the variable it is defined in)."""
        if self.name:
            return _var(self.name)
        base = "Dim.STATIC" if self.static else "Dim.AUTO"
        bounds = ", ".join(f"{key}={value}" for key, value in (("min", self.min), ("max", self.max)) if value is not None)
        return f"{base}({bounds})" if bounds else base


@dataclass(frozen=True)
class ScriptSpec:
    """Everything a standalone reproducer needs, as plain data."""

    item_id: str
    source: str  # what exportbot built it from, for the header
    model_class: str
    config_class: str
    config: Mapping[str, Any]
    seed: int
    backend: str  # "dynamo" | "onnx" | "executorch"
    inputs: tuple[TensorSpec, ...] = ()
    values: Mapping[str, Any] = field(default_factory=dict)  # non-tensor keyword arguments (flags, sizes)
    dynamic_shapes: Mapping[str, Mapping[int, DimSpec] | None] | None = None
    strict: bool = False
    opset_version: int | None = None
    optimize: bool = True
    init: tuple[Mapping[str, Any], ...] = ()  # [[entry.repro.init]] rules
    attn_implementation: str | None = None  # written only when not transformers' default, "sdpa"


def literal(value: Any, indent: int = 0) -> str:
    """``value`` (JSON-like data: dicts, lists, str, numbers, bool, None) as a Python literal, one dict key a line."""
    pad = _INDENT * indent
    if isinstance(value, Mapping):
        inline = "{" + ", ".join(f"{literal(key)}: {literal(item)}" for key, item in value.items()) + "}"
        if not value or (len(inline) <= 60 and not any(isinstance(item, Mapping) for item in value.values())):
            return inline
        items = [f"{pad}{_INDENT}{literal(key)}: {literal(item, indent + 1)}," for key, item in value.items()]
        return "{\n" + "\n".join(items) + f"\n{pad}}}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(literal(item, indent) for item in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, float) and not math.isfinite(value):
        return f'float("{value}")'
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value)
    raise TypeError(f"{type(value).__name__} cannot be written as a literal")


def _tensor(spec: TensorSpec) -> str:
    dtype, shape = f"torch.{spec.dtype}", literal(tuple(spec.shape))
    if spec.kind == "literal":
        return f"torch.tensor({literal(spec.values)}, dtype={dtype})"
    if spec.kind == "full":
        return f"torch.full({shape}, {literal(spec.values)}, dtype={dtype})"
    if spec.kind == "randint":
        low, high = spec.values
        return f"torch.randint({low}, {high}, {shape}, generator=generator, dtype={dtype})"
    if spec.kind == "randn":
        return f"torch.randn({shape}, generator=generator, dtype={dtype})"
    raise ValueError(f"unknown tensor kind {spec.kind!r}")


def _dims(spec: ScriptSpec) -> list[str]:
    """``dynamic_shapes = {...}``, each named Dim defined once above it (inputs sharing a Dim share the size)."""
    if spec.dynamic_shapes is None:
        return []
    named = {dim.name: dim for dims in spec.dynamic_shapes.values() for dim in (dims or {}).values() if dim.name}
    lines = [f'{_var(name)} = Dim("{name}", min={dim.min}, max={dim.max})' for name, dim in named.items()]
    body = []
    for name, dims in spec.dynamic_shapes.items():
        axes = ", ".join(f"{axis}: {dim.hint}" for axis, dim in (dims or {}).items())
        body.append(f"{_INDENT}{name!r}: {{{axes}}}," if dims is not None else f"{_INDENT}{name!r}: None,")
    return [*lines, "dynamic_shapes = {", *body, "}"]


def _var(name: str) -> str:
    return "dim_" + "".join(c if c.isalnum() else "_" for c in name)


def _init_lines(rules: Sequence[Mapping[str, Any]], seed: int) -> list[str]:
    """The ``[[entry.repro.init]]`` rules as loops over the model's modules (exporters.ledger.repro's formulas)."""
    if not rules:
        return []
    lines = [f"init_generator = torch.Generator().manual_seed({seed + 1})", "with torch.no_grad():"]
    for rule in rules:
        modules, parameter = sorted(rule["modules"]), rule.get("parameter", "weight")
        lines += [f"{_INDENT}for module in model.modules():",
                  f"{_INDENT * 2}tensor = getattr(module, {parameter!r}, None)",
                  f"{_INDENT * 2}if type(module).__name__ in {literal(modules)} and isinstance(tensor, torch.Tensor):",
                  f"{_INDENT * 3}tensor.copy_({_drawn(rule)})"]  # fmt: skip
    return lines


def _drawn(rule: Mapping[str, Any]) -> str:
    kind = rule["rule"]
    draw = "torch.{}(tensor.shape, generator=init_generator, dtype=tensor.dtype)"
    if kind == "constant":
        return f"torch.full_like(tensor, {float(rule['value'])!r})"
    if kind == "uniform":
        low, high = rule["range"]
        return f"{draw.format('rand')} * {high - low!r} + {low!r}"
    if kind == "normal":
        return f"{draw.format('randn')} * {rule['std']!r} + {rule.get('mean', 0.0)!r}"
    fan_in = "(tensor[0].numel() if tensor.dim() > 1 else tensor.numel())"
    if kind == "kaiming_normal":
        return f"{draw.format('randn')} * (2.0 / {fan_in}) ** 0.5"
    return f"({draw.format('rand')} * 2 - 1) * (6.0 / {fan_in}) ** 0.5"  # kaiming_uniform


def _export_lines(spec: ScriptSpec) -> list[str]:
    shapes = "dynamic_shapes" if spec.dynamic_shapes is not None else "None"
    lines = [
        "with torch.no_grad():",
        f"{_INDENT}program = torch.export.export(model, (), kwargs=inputs, dynamic_shapes={shapes}, "
        f"strict={spec.strict})",
        'print("torch.export.export: OK")',
    ]
    if spec.backend == "onnx":
        opset = f", opset_version={spec.opset_version}" if spec.opset_version else ""
        lines += [f"onnx_program = torch.onnx.export(program, (), kwargs=inputs, dynamo=True, "
                  f"optimize={spec.optimize}{opset})",
                  'print("torch.onnx.export: OK")',
                  "# loaded from a file as exportbot checks it: ONNX Runtime's own checks fail some models here",
                  f'path = Path(tempfile.mkdtemp()) / "{spec.item_id}.onnx"',
                  "onnx_program.save(path)",
                  'onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])',
                  'print("onnxruntime load: OK")']  # fmt: skip
    elif spec.backend == "executorch":
        lines += ["edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])",
                  "edge.to_executorch()", 'print("to_edge_transform_and_lower + to_executorch (XNNPACK): OK")']  # fmt: skip
    return lines


def render_script(spec: ScriptSpec) -> str:
    """The reproducer's source. Its first line says the bot generated it (bot.audit.drafts.is_generated_script),
    so ``exportbot upstream draft`` may write it again when the reproducer changes; a hand-written one it keeps."""
    imports = ["import torch", "import transformers"]
    if spec.backend == "onnx":
        imports = ["import tempfile", "from pathlib import Path", "", "import onnxruntime", *imports]
    if spec.dynamic_shapes is not None:
        imports.append("from torch.export import Dim")
    if spec.backend == "executorch":
        imports += ["from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner",
                    "from executorch.exir import to_edge_transform_and_lower"]  # fmt: skip
    packages = "torch, transformers" + {"onnx": ", onnxscript (torch.onnx), onnxruntime", "executorch": ", executorch"}.get(
        spec.backend, "")
    inputs = [f"{_INDENT}{spec_input.name!r}: {_tensor(spec_input)}," for spec_input in spec.inputs]
    inputs += [f"{_INDENT}{name!r}: {literal(value)}," for name, value in spec.values.items()]
    lines = [
        f"{GENERATED_SCRIPT} {spec.item_id}` from {spec.source}.",
        f"# Standalone: imports only {packages}. Run: python {spec.item_id}.py",
        *imports,
        "",
        f"torch.manual_seed({spec.seed})",
        f"config = transformers.{spec.config_class}.from_dict({literal(spec.config)})",
        *([f"config._attn_implementation = {spec.attn_implementation!r}"]
          if spec.attn_implementation not in (None, "sdpa") else []),
        f"model = transformers.{spec.model_class}(config).eval()",
        *_init_lines(spec.init, spec.seed),
        f"generator = torch.Generator().manual_seed({spec.seed})",
        "inputs = {",
        *inputs,
        "}",
        'print("torch", torch.__version__, "| transformers", transformers.__version__)',
        "with torch.no_grad():",
        f"{_INDENT}model(**inputs)",
        'print("eager: OK")',
        "",
        *_dims(spec),
        *_export_lines(spec),
    ]
    return "\n".join(lines) + "\n"
