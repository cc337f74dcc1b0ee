"""What an exported program takes and returns, described for the bundle manifest: leaf names, dtypes, shapes
whose dynamic dims are named by their role, the dims' ranges, and the input/output pytree specs.

Only the ``torch.export`` program is asked: a dim is static when the program specialised it, dynamic when it
stayed symbolic, and two dims share a name exactly when they share a symbol (torch.export proved them
equal). The ONNX graph's input/output shapes are written from this description (``exporter_onnx``), so the
artifact, the manifest and the loader's checks say the same thing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import sympy
import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from exporters.bundle.format import ComponentSpec, ConstantLeaf, DimRange, TensorSpec, TracedInt
from exporters.flatten import leaves_with_path
from exporters.validation import leaf_name

__all__ = ["constant_outputs", "describe_component", "dim_role", "dtype_name", "map_traced_constants", "output_structure", "pytree_type_names",
           "user_input_placeholders"]

# (leaf name, dim index) → role. The role names the dim only when the program left it symbolic. Leaves of a
# cache (``past_key_values.…``) and encoder outputs are matched by their first path part.
_INPUT_DIM_ROLES: dict[tuple[str, int], str] = {
    ("input_ids", 1): "sequence",
    ("attention_mask", 1): "sequence",
    ("token_type_ids", 1): "sequence",
    ("position_ids", 1): "sequence",
    ("bbox", 1): "sequence",
    ("inputs_embeds", 1): "sequence",
    ("cache_position", 0): "sequence",
    ("decoder_input_ids", 1): "decoder_sequence",
    ("decoder_attention_mask", 1): "decoder_sequence",
    ("decoder_inputs_embeds", 1): "decoder_sequence",
    ("decoder_position_ids", 1): "decoder_sequence",
    ("pixel_values", 1): "channels",
    ("pixel_values", 2): "height",
    ("pixel_values", 3): "width",
    ("pixel_mask", 1): "height",
    ("pixel_mask", 2): "width",
    ("input_values", 1): "samples",
    # Whisper's features are (batch, mel bins, frames), Speech2Text's (batch, frames, features): the conv or
    # linear stem fixes the feature axis, so at most one of the two stays symbolic, and that one is frames.
    ("input_features", 1): "frames",
    ("input_features", 2): "frames",
    ("past_key_values", 2): "past_sequence",
    ("encoder_outputs", 1): "encoder_sequence",
    ("encoder_hidden_states", 1): "encoder_sequence",
}


def dim_role(leaf: str, index: int) -> str | None:
    """The role of dim ``index`` of input leaf ``leaf`` (``batch``, ``sequence``, ...), None when unknown."""
    head = leaf.split(".", 1)[0]
    role = _INPUT_DIM_ROLES.get((leaf, index)) or _INPUT_DIM_ROLES.get((head, index))
    if role is None and index == 0:
        role = "batch"
    return role


def _identifier(text: str) -> str:
    return re.sub(r"\W+", "_", text).strip("_")


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def user_input_placeholders(program: ExportedProgram) -> list[torch.fx.Node]:
    """The program's user-input placeholder nodes, in the order the program takes them."""
    user_inputs = set(program.graph_signature.user_inputs)
    return [node for node in program.graph.nodes if node.op == "placeholder" and node.name in user_inputs]


def output_structure(program: ExportedProgram) -> Any:
    """The program's user outputs in their pytree structure, as the graph's fake values (no execution)."""
    output_node = next(n for n in reversed(program.graph.nodes) if n.op == "output")
    user_count = len(program.graph_signature.user_outputs)
    metas = [arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg for arg in output_node.args[0]]
    leaves = metas[len(metas) - user_count :]
    out_spec = program.call_spec.out_spec
    return pytree.tree_unflatten(leaves, out_spec) if out_spec is not None else leaves


def pytree_type_names(*specs: pytree.TreeSpec) -> list[str]:
    """Serialized names of the non-builtin node types in the specs: what a fresh process must register."""
    names: list[str] = []

    def visit(spec: pytree.TreeSpec) -> None:
        node_type = spec.type
        if node_type is not None and node_type.__module__ not in ("builtins", "collections"):
            entry = pytree.SUPPORTED_SERIALIZED_TYPES.get(node_type)
            name = entry.serialized_type_name if entry is not None else None
            if not name or name == pytree.NO_SERIALIZED_TYPE_NAME_FOUND:
                name = f"{node_type.__module__}.{node_type.__qualname__}"
            if name not in names:
                names.append(name)
        for child in spec.children():
            visit(child)

    for spec in specs:
        visit(spec)
    return names


class _DimNamer:
    """Names a program's symbols by the role of the first dim that carries them; collects their ranges."""

    def __init__(self, program: ExportedProgram):
        self.program = program
        self.names: dict[sympy.Symbol, str] = {}
        self.dims: dict[str, DimRange] = {}

    def name(self, symbol: sympy.Symbol, leaf: str, index: int) -> str:
        if symbol in self.names:
            return self.names[symbol]
        role = dim_role(leaf, index)
        candidates = [role, f"{_identifier(leaf)}_{role}"] if role else []
        candidates.append(f"{_identifier(leaf)}_dim{index}")
        taken = set(self.dims)
        chosen = next((c for c in candidates if c not in taken), None)
        counter = 2
        while chosen is None or chosen in taken:
            chosen = f"{candidates[-1]}_{counter}"
            counter += 1
        self.names[symbol] = chosen
        self.dims[chosen] = self._range(symbol)
        return chosen

    def _range(self, symbol: sympy.Symbol) -> DimRange:
        bounds = self.program.range_constraints.get(symbol)
        if bounds is None:
            return DimRange(None, None)
        lower = int(bounds.lower) if isinstance(bounds.lower, sympy.Integer) else None
        upper = int(bounds.upper) if isinstance(bounds.upper, sympy.Integer) else None
        return DimRange(lower, upper)

    def traced(self, value: TracedInt) -> TracedInt:
        """A traced constant with its expression in dim names; ``expr`` None when a symbol it depends on
        is no named dim (no input or output size carries it, so a loader cannot recompute it)."""
        if value.expr is None:
            return value
        expr = sympy.sympify(value.expr)
        by_name = {str(symbol): name for symbol, name in self.names.items()}
        if any(str(symbol) not in by_name for symbol in expr.free_symbols):
            return TracedInt(int(value), None)
        return TracedInt(int(value), str(expr.xreplace({s: sympy.Symbol(by_name[str(s)]) for s in expr.free_symbols})))

    def shape(self, sizes: Any, leaf: str) -> list[int | str]:
        shape: list[int | str] = []
        for index, size in enumerate(sizes):
            expr = size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(int(size))
            if not expr.free_symbols:
                shape.append(int(expr))
                continue
            for symbol in sorted(expr.free_symbols, key=str):
                self.name(symbol, leaf, index)
            renamed = expr.xreplace({s: sympy.Symbol(self.names[s]) for s in expr.free_symbols})
            shape.append(str(renamed))
        return shape


def map_traced_constants(spec: pytree.TreeSpec, function: Callable[[TracedInt], TracedInt]) -> pytree.TreeSpec:
    """``spec`` with ``function`` applied to every ``TracedInt`` of a walked type's context
    (``[(attribute, value), …]``, also inside a value's lists, tuples and dicts, such as DeepSeek-V4's
    ``entry_count``); ``spec`` itself when it holds none. The manifest writer names their expressions; the
    loader evaluates them at each call's sizes."""
    if spec.is_leaf():
        return spec
    old_children = spec.children()
    children = [map_traced_constants(child, function) for child in old_children]
    context = spec.context
    traced = isinstance(context, list) and any(_is_traced(item) for item in context)
    if not traced and all(new is old for new, old in zip(children, old_children)):
        return spec
    if traced:
        context = [(item[0], _mapped(item[1], function)) if _is_traced(item) else item for item in context]
    return pytree.TreeSpec(spec.type, context, children)


def _is_traced(item: Any) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and _holds_traced(item[1])


def _holds_traced(value: Any) -> bool:
    if isinstance(value, TracedInt):
        return True
    if isinstance(value, dict):
        return any(_holds_traced(v) for v in value.values())
    return type(value) in (list, tuple) and any(_holds_traced(v) for v in value)


def _mapped(value: Any, function: Callable[[TracedInt], TracedInt]) -> Any:
    if isinstance(value, TracedInt):
        return function(value)
    if isinstance(value, dict):
        return {k: _mapped(v, function) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_mapped(v, function) for v in value)
    return value


_CONSTANT_TYPES = (int, float, bool, str, type(None))


def constant_outputs(out_flat: list[tuple[Any, Any]]) -> list[ConstantLeaf]:
    """The output leaves that are constants of the program, not graph values, by position among all leaves.

    An output that is a Python value (MaskFormerSwin's ``hidden_states_spatial_dimensions`` ints, a cache
    layer's ``None`` slot) is written into the program's output node as it is: the program returns it for
    every input it accepts, so no artifact computes it. A size computed at run time (a ``SymInt`` of a
    dynamic export) is no constant and cannot be a bundle output: that raises.
    """
    constants = []
    for index, (path, value) in enumerate(out_flat):
        if isinstance(value, torch.Tensor):
            continue
        if type(value) not in _CONSTANT_TYPES:
            raise ValueError(
                f"the program returns {leaf_name(path)!r} as a {type(value).__name__}, which is neither a tensor "
                "nor a constant: a bundle's outputs are tensors, and Python constants recorded in the manifest"
            )
        constants.append(ConstantLeaf(index, leaf_name(path), value))
    return constants


def _value_range(value: torch.Tensor) -> list[int] | None:
    """``[min, max]`` of an integer sample input (ids, masks, token types), None for floats, bools or empty."""
    if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool or value.numel() == 0:
        return None
    return [int(value.min()), int(value.max())]


def describe_component(
    program: ExportedProgram, inputs: Mapping[str, Any], file: str, runtime: str, method: str = "forward"
) -> ComponentSpec:
    """The manifest entry for one exported program: its inputs as the caller passes them (leaf names in
    flattening order), its outputs as eager returns them, both pytree specs, and every named dim's range."""
    arguments = list(inputs)
    # leaves_with_path, not pytree's own: a transformers release before 5.13 registers its ModelOutputs
    # without keys, and pytree.tree_flatten_with_path refuses them (exporters.flatten).
    flat, in_spec = leaves_with_path(dict(inputs)), pytree.tree_structure(dict(inputs))
    tensor_leaves = [(leaf_name(path), leaf) for path, leaf in flat if isinstance(leaf, torch.Tensor)]
    placeholders = [n for n in user_input_placeholders(program) if isinstance(n.meta.get("val"), torch.Tensor)]
    if len(placeholders) != len(tensor_leaves):
        raise ValueError(
            f"the program takes {len(placeholders)} tensors, the inputs hold {len(tensor_leaves)}: "
            "only tensors (and pytrees of tensors) can be inputs of a bundle"
        )
    namer = _DimNamer(program)
    input_specs = [
        TensorSpec(name, dtype_name(node.meta["val"].dtype), namer.shape(node.meta["val"].shape, name),
                   _value_range(value))
        for (name, value), node in zip(tensor_leaves, placeholders)
    ]
    outputs = output_structure(program)
    out_flat, out_spec = leaves_with_path(outputs), pytree.tree_structure(outputs)
    output_specs = [
        TensorSpec(leaf_name(path), dtype_name(value.dtype), namer.shape(value.shape, leaf_name(path)))
        for path, value in out_flat
        if isinstance(value, torch.Tensor)
    ]
    constants = constant_outputs(out_flat)
    out_spec = map_traced_constants(out_spec, namer.traced)
    return ComponentSpec(
        file=file,
        runtime=runtime,
        arguments=arguments,
        inputs=input_specs,
        outputs=output_specs,
        in_spec=pytree.treespec_dumps(in_spec),
        out_spec=pytree.treespec_dumps(out_spec),
        pytree_types=pytree_type_names(in_spec, out_spec),
        dims=namer.dims,
        method=method,
        constants=constants,
    )
