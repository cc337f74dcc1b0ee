"""Workarounds every backend shares, since ONNX and ExecuTorch export through ``DynamoExporter.export_program``:
patches on torch.export itself (stage 2, ``installed_patches("dynamo", without)``), fixes of the program it
returns (stage 6, ``apply_fx_program_fixes(program, "dynamo")``), and the patch the second-shape picker reads the
program's guards under (``installed_patches(SECOND_SHAPE)``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.export import ExportedProgram

from exporters.utils import record_hit, register_fx_program_fix, register_patch

__all__ = ["SECOND_SHAPE"]


@register_patch(
    "dynamo", "torch.fx.experimental.symbolic_shapes.DimConstraints.solve", dependency="torch", counts_itself=True,
)  # fmt: skip
def _patch_dim_constraint_solver_gives_up(original: Callable) -> Callable:
    """Let an export whose shape guards sympy cannot solve end as torch.export would without the solver.

    After tracing, non-strict torch.export produces the program's guards and then always runs
    ``DimConstraints.solve`` (torch/_export/non_strict_utils.py, ``produce_guards_and_solve_constraints``),
    which only simplifies the guards into *suggested fixes* for its error message. With floor divisions in a
    guard, sympy's ``solve_univariate_inequality`` raises ``NotImplementedError`` and the export dies with
    sympy's error although nothing was violated: XcodecModel (an audio length a whole number of 320-sample
    hops: ``x - 320*(((x/40)//8)) <= 0``) and Sam2HieraDetModel (the image grid filling its windows). Here the
    solver's ``NotImplementedError`` ends the suggestions instead: the guards were already produced, so a
    violated named ``Dim`` still raises its constraint violation (only its suggested fix is lost), and a
    ``Dim.AUTO`` dim keeps them as the program's input guards (``_guards_fn``), which the second-shape
    inputs must pass. pytorch/pytorch#131897 (closed) reported this error for ``TruncToInt`` guards and was
    answered with "ignore solving guards with these complicated functions"; floor divisions still reach the
    solver in torch 2.13. Draft with reproducer: docs/upstream-drafts/_patch_dim_constraint_solver_gives_up.md.
    """

    def solve(self: Any) -> None:
        try:
            original(self)
        except NotImplementedError as error:
            if "solve_univariate_inequality" not in str(error):
                raise
            record_hit("_patch_dim_constraint_solver_gives_up")

    return solve


@register_fx_program_fix("dynamo", upstream="https://github.com/pytorch/executorch/issues/11870", dependency="torch")
def _fix_parameter_updated_in_forward(program: ExportedProgram) -> bool:
    """Compute an in-place update of a parameter out of place, so that the program leaves its weights alone.

    RWKV rescales two weights of each block in its first inference call (``RwkvModel._rescale_layers``:
    ``weight.div_(2 ** (block_id // rescale_every))`` under ``no_grad``, then ``layers_are_rescaled = True``),
    and torch.export keeps that ``div_`` on the parameter (pytorch/pytorch#159661 added parameter mutation in
    inference mode for this model). What each backend makes of it is wrong: the ``.pt2``'s module divides its
    weight again on every call, and ExecuTorch, whose emitter drops only buffer mutations from a method's
    outputs (pytorch/executorch#11870 for the same leftover with input mutations), returns the updated
    weights as extra outputs. Eager computes with the updated weight on every call (a later call skips the
    update and uses the stored result), so computing it from the stored weight on each call, without writing
    it back, gives each call eager's answer. Only updates whose op has an out-of-place overload are rewritten.
    The program gets its own copy of each such weight: its state dict shares storage with the model, whose
    next eager call (validation's) updates the weight in place, and the program would then update it twice.
    """
    parameters = program.graph_signature.inputs_to_parameters
    rewritten = 0
    for node in program.graph.nodes:
        written = _written_argument(node)
        if written is None or written.name not in parameters:
            continue
        out_of_place = _out_of_place(node.target)
        if out_of_place is None:
            continue
        later = {user for user in written.users if user is not node and _after(node, user)}
        node.target = out_of_place
        for user in later:
            user.replace_input_with(written, node)
        weight = program.state_dict[parameters[written.name]]
        program.state_dict[parameters[written.name]] = torch.nn.Parameter(weight.detach().clone(), weight.requires_grad)
        rewritten += 1
    if rewritten:
        program.graph_module.recompile()
    return rewritten > 0


def _written_argument(node: torch.fx.Node) -> torch.fx.Node | None:
    """The node a call's schema says it writes to in place (``self`` of ``div_``), if any."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return None
    for index, argument in enumerate(node.target._schema.arguments):
        if argument.alias_info is not None and argument.alias_info.is_write and index < len(node.args):
            value = node.args[index]
            return value if isinstance(value, torch.fx.Node) else None
    return None


def _out_of_place(target: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """``aten.div.Tensor`` for ``aten.div_.Tensor``: the same overload of the op without the trailing ``_``."""
    name = target._schema.name.split("::")[-1]
    if not name.endswith("_"):
        return None
    packet = getattr(getattr(torch.ops, target.namespace), name[:-1], None)
    return getattr(packet, target._overloadname, None) if packet is not None else None


def _after(node: torch.fx.Node, other: torch.fx.Node) -> bool:
    """Whether ``other`` comes after ``node`` in graph order."""
    following = node.next
    while following.op != "root":
        if following is other:
            return True
        following = following.next
    return False


# ── The second-shape picker's patch (backend "dynamo.second-shape": installed only while it reads the guards) ──
SECOND_SHAPE = "dynamo.second-shape"  # every backend's dynamic validation picks its second shape this way


@register_patch(SECOND_SHAPE, "torch.export._unlift._ok_to_generate_guards_fn", dependency="torch")
def _patch_guards_fn_whoever_calls(original: Callable[[], bool]) -> Callable[[], bool]:
    """``program.module()`` with its input guards (``_guards_fn``) whoever calls it.

    torch builds ``_guards_fn`` only when no frame on the call stack has "executorch", "modai", "on_device_ai" or
    "torchao" in its file path (``_ok_to_generate_guards_fn``, torch/export/_unlift.py:740), a stopgap for
    ExecuTorch passes that cannot take the call_module it adds (pytorch/pytorch#162532). Our ExecuTorch exporter
    lives in ``exporters/executorch/exporter.py``, so the second-shape picker it calls got a module without guards
    and took sizes the program was not exported for: MusicgenMelodyForConditionalGeneration's decoder rows 7,
    not a multiple of its 4 codebooks, where eager itself fails. Installed only around the picker's ``module()``
    call, never during a lowering. Draft with reproducer: docs/upstream-drafts/_patch_guards_fn_whoever_calls.md.
    """

    def ok_to_generate_guards_fn() -> bool:
        return True

    return ok_to_generate_guards_fn
