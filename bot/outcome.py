"""What one export ended as: the statuses and the request and outcome records every layer shares.

``exportbot export`` and every sweep child make an ``ExportOutcome`` (``bot.run.runner.export_one``); the sweep
writes it, the audit's decisions read it (``bot.audit``), the PR and the coverage table show it. Plain data,
so that the pure layers can name a status without importing the code that runs exports.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from exporters.export_options import ExportOptions

BACKENDS = ("dynamo", "onnx", "executorch")

# Outcome statuses. Only PASS means the artifact was shown to match eager.
PASS = "pass"
FAILED = "failed"  # the export (or the run of the artifact) raised
MISMATCH = "mismatch"
INCONCLUSIVE = "inconclusive"
NONDETERMINISTIC = "nondeterministic"
SKIPPED = "skipped"  # gated by a ledger entry, or (generation) no KV cache to carry; never a pass
INTERRUPTED = "interrupted"  # Ctrl-C: in the failure record only (export_one re-raises the KeyboardInterrupt)
BUILD_ERROR = "build-error"  # the tiny model or its inputs could not be made


@dataclass
class ExportRequest:
    """What to export and how; ``model`` is a transformers class name or a local checkpoint directory."""

    model: str
    backend: str = "dynamo"
    dynamic: bool = False
    optimize: bool | None = None  # ONNX only; None = follow the ledger
    ort_fusions: bool = False  # ONNX only: ONNX Runtime's fused operators (exporters/onnx/fusions.py)
    et_backend: str = "xnnpack"
    without: tuple[str, ...] = ()
    ignore_ledger: tuple[str, ...] = ()  # entry ids, or ("all",)
    repro: str | None = None  # a ledger entry id: export its reproducer, without the ledger (as the audit)
    validate: bool = True
    seed: int = 0
    out_dir: Path | None = None
    options: ExportOptions | None = None  # task, shapes, dtype, opset, tolerances; None: the defaults

    def __post_init__(self) -> None:
        if self.options is None:
            from exporters.export_options import ExportOptions

            self.options = ExportOptions()


@dataclass
class ExportOutcome:
    model: str
    backend: str
    dynamic: bool
    status: str
    seconds: float
    error: str | None = None
    error_type: str | None = None
    traceback_tail: str | None = None
    ledger_entry: str | None = None
    ledger_reason: str | None = None
    optimize: bool | None = None
    max_abs_diff: dict[str, float] = field(default_factory=dict)
    workarounds_fired: dict[str, int] = field(default_factory=dict)
    workarounds_disabled: list[str] = field(default_factory=list)
    # The axes each input kept dynamic in the artifact ({} for a static export): a dynamic export whose dims
    # were all specialised ran at the sample shape only, and a reader must be able to tell it from one that moved.
    dynamic_dims: dict[str, list[int]] = field(default_factory=dict)
    # Of those, the axes the second validated shape left at the sample's size: no other size within reach
    # passed the program's guards, so the artifact was compared there at one size only (``unmoved_dims``).
    unmoved_dims: dict[str, list[int]] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)  # what this process ran with, failed or not
    files: dict[str, str] = field(default_factory=dict)
    repro: str | None = None  # the entry whose reproducer was exported
    repro_source: str | None = None  # "default tiny model", "tiny model with config, inputs", "script …"
    # Ledger entries that apply to this export and were left off: gate skipped, or optimizer on instead
    # of off. The audit's evidence that a pass really ran without the workaround.
    workaround_off: list[str] = field(default_factory=list)
    registry: str | None = None  # the ledger directory this process read
    options: dict[str, Any] = field(default_factory=dict)  # as recorded in the metadata (ExportOptions.record)
    # A quantized export's manifest section (docs/quantization.md): scheme, fidelity per output, quality worst.
    quantization: dict[str, Any] = field(default_factory=dict)
    failed_stage: str | None = None  # the innermost stage an exception left (exporters.stages)
    cause: str | None = None  # the innermost exception, one line
    hint: str | None = None  # what to try next (bot.errors.hint_for)

    @property
    def mode(self) -> str:
        return "dynamic" if self.dynamic else "static"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
