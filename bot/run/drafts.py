"""Drafts' I/O: the tracked items, a reproducer described for a standalone script, that script run in a fresh
process where exportbot is not importable, a workaround's ``--without`` probe, and the draft files.

Why a fresh process with no site initialisation: the checkout's virtual environment holds exportbot as an
editable install (a ``.pth`` finder), so ``python script.py`` there could import it without saying so. The child
here starts with ``python -I -S`` and puts only the environment's site-packages directories on its path (no
``.pth`` file runs), checks that neither ``exporters`` nor ``bot`` can be found, records that and the installed
upstream versions, then runs the script from a scratch directory as ``python ID.py`` would. Its output
(stdout and stderr, in order) is the draft's "Actual"; paths to the scratch directory and site-packages are
shortened so the output reads the same on any machine.
"""

from __future__ import annotations

import datetime
import importlib.util
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.audit.drafts import (
    DRAFTS_DIR,
    ENTRY,
    NOTES,
    RUNS_FILE,
    SCRIPTS,
    DraftError,
    DraftNotes,
    DraftRecord,
    ProbeRun,
    ScriptRun,
    TrackedItem,
    entry_item,
    excerpt,
    matches,
    parse_notes,
    script_digest,
    workaround_item,
)
from bot.audit.standalone import LITERAL_ELEMENTS, DimSpec, ScriptSpec, TensorSpec
from bot.audit.verdict import first_error_line
from bot.audit.workaround_index import load_index, select_probes
from bot.sweep.records import ended_without_outcome

UPSTREAM_PACKAGES = ("torch", "transformers", "onnx", "onnxscript", "onnxruntime", "executorch", "torchao")
_BOOTSTRAP = r"""
import importlib.util, json, os, platform, runpy, sys, traceback
from importlib import metadata
report, script, *sites = sys.argv[1:]
sys.path.extend(sites)
versions = {}
for name in PACKAGES:
    try:
        versions[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        pass
importable = [name for name in ("exporters", "bot") if importlib.util.find_spec(name) is not None]
with open(report, "w") as handle:
    json.dump({"versions": versions, "python": platform.python_version(),
               "platform": f"{platform.system()} {platform.machine()}", "exportbot_importable": bool(importable)}, handle)
sys.argv = [script]
sys.path.insert(0, os.path.dirname(script))
try:
    runpy.run_path(script, run_name="__main__")
except SystemExit:
    raise
except BaseException as error:  # printed as `python script.py` would: from the script's own frame on
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != script:
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb or error.__traceback__)
    sys.exit(1)
"""


# ── The items and the draft files ──
def module_path(module: str) -> str:
    """``exporters/onnx/translations.py`` for ``exporters.onnx.translations``: where a workaround is defined, the
    same in every checkout."""
    spec = importlib.util.find_spec(module)
    package = spec is not None and spec.submodule_search_locations is not None
    return module.replace(".", "/") + ("/__init__.py" if package else ".py")


def tracked_items(registry_dir: Path | None = None) -> list[TrackedItem]:
    """Every ledger entry (file order) and every registered workaround (registration order)."""
    import exporters
    from exporters.ledger import default_registry_dir, load_ledger
    from exporters.utils import all_workarounds

    directory = registry_dir or default_registry_dir()
    ledger = load_ledger(directory)
    items = [entry_item(entry, f"{directory.name}/{entry.path.name}") for entry in ledger.entries]
    exporters.load_all_workarounds()
    items += [workaround_item(w, module_path(inspect.unwrap(w.func).__module__)) for w in all_workarounds()]
    return items


@dataclass
class DraftFiles:
    """docs/upstream-drafts/ as read: scripts, notes and run records by item id."""

    directory: Path
    scripts: dict[str, str] = field(default_factory=dict)
    notes: dict[str, DraftNotes] = field(default_factory=dict)
    runs: dict[str, DraftRecord] = field(default_factory=dict)

    def script_path(self, item_id: str) -> Path:
        return self.directory / SCRIPTS / f"{item_id}.py"

    def page_path(self, item_id: str) -> Path:
        return self.directory / f"{item_id}.md"

    def write_runs(self) -> None:
        from bot.audit.drafts import dump_runs

        (self.directory / RUNS_FILE).write_text(dump_runs(self.runs), encoding="utf-8")


def read_drafts(directory: Path = DRAFTS_DIR) -> DraftFiles:
    """The draft inputs under ``directory``; :class:`DraftError` names a file that cannot be used."""
    from bot.audit.drafts import load_runs

    files = DraftFiles(directory)
    for path in sorted((directory / SCRIPTS).glob("*.py")):
        files.scripts[path.stem] = path.read_text(encoding="utf-8")
    for path in sorted((directory / NOTES).glob("*.md")):
        files.notes[path.stem] = parse_notes(path.read_text(encoding="utf-8"), str(path))
    runs = directory / RUNS_FILE
    if runs.is_file():
        files.runs = load_runs(runs.read_text(encoding="utf-8"), str(runs))
    return files


# ── A reproducer as a standalone script's data ──
@dataclass(frozen=True)
class ProbeExport:
    """The export a draft reproduces: a ledger entry's reproducer, or the export a workaround's probe re-runs."""

    model: str
    backend: str
    dynamic: bool
    entry_id: str | None = None  # the ledger entry whose [entry.repro] builds the model (None: default tiny)


def probe_export(item: TrackedItem, registry_dir: Path | None = None, index_path: Path | None = None) -> ProbeExport:
    """Which export stands for ``item``: an entry's first model in its first mode; a workaround's first probe
    (bot.audit.workaround_index.select_probes over the committed index)."""
    if item.kind == ENTRY:
        from exporters.ledger import default_registry_dir, load_ledger

        entry = load_ledger(registry_dir or default_registry_dir()).by_id(item.id)
        if entry.scope == "generate":
            raise DraftError(f"{item.id}: a generation export (scope generate) cannot be written as one export call; "
                             f"write docs/upstream-drafts/scripts/{item.id}.py by hand")  # fmt: skip
        return ProbeExport(entry.models[0], entry.backend, entry.modes()[0], entry.id)
    from bot.audit.workaround_index import DEFAULT_JSON

    probes = select_probes(load_index(index_path or DEFAULT_JSON).exports_of(item.id), limit=1)
    if not probes:
        raise DraftError(f"{item.id}: no passing export of the committed sweeps fired it, so there is no export to "
                         f"reproduce; write docs/upstream-drafts/scripts/{item.id}.py by hand")  # fmt: skip
    probe = probes[0]
    return ProbeExport(probe.model, probe.backend, probe.dynamic)


def _tensor_spec(name: str, tensor: Any) -> TensorSpec:
    dtype, shape = str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape)
    flat = tensor.flatten()
    if tensor.numel() == 0 or bool((flat == flat[0]).all()):
        return TensorSpec(name, shape, dtype, "full", flat[0].item() if tensor.numel() else 0)
    if tensor.is_floating_point() or tensor.is_complex():
        return TensorSpec(name, shape, dtype, "randn")
    if tensor.numel() <= LITERAL_ELEMENTS:
        return TensorSpec(name, shape, dtype, "literal", tensor.tolist())
    return TensorSpec(name, shape, dtype, "randint", (int(flat.min()), int(flat.max()) + 1))


def _dim_spec(dim: Any) -> DimSpec:
    from torch.export import Dim
    from torch.export.dynamic_shapes import _DimHint

    if isinstance(dim, _DimHint):
        return DimSpec(None, dim.min, dim.max, static=dim.type == Dim.STATIC.type)
    if isinstance(dim, type) and hasattr(dim, "min"):  # a named Dim is a class
        return DimSpec(dim.__name__, dim.min, dim.max)
    raise DraftError(f"a dynamic dim {dim!r} cannot be written in a standalone script")


def _dynamic_shapes(export: ProbeExport, inputs: Mapping[str, Any], options: Mapping[str, Any]) -> Any:
    """The spec exportbot passes torch.export for this export (the exporters' own functions compute it)."""
    if not export.dynamic:
        return None
    from exporters.dynamo.exporter import DynamoConfig, dynamic_shapes_for, without_static_dims

    static = options.get("static_dims", {})
    if export.backend == "executorch":
        from exporters.executorch.exporter import (
            DEFAULT_MAX_BATCH,
            DEFAULT_MAX_SEQUENCE,
            bounded_dynamic_shapes,
        )

        spec = bounded_dynamic_shapes(inputs, options.get("max_batch", DEFAULT_MAX_BATCH),
                                      options.get("max_sequence", DEFAULT_MAX_SEQUENCE))  # fmt: skip
        spec = without_static_dims(spec, inputs, static)
    else:
        spec = dynamic_shapes_for(inputs, DynamoConfig(dynamic=True, static_dims=static))
    return {name: None if dims is None else {axis: _dim_spec(dim) for axis, dim in dims.items()}
            for name, dims in spec.items()}  # fmt: skip


def _config_data(config: Any) -> dict[str, Any]:
    """The config as the fields that differ from its class's defaults, when that rebuilds the same config; else
    every field."""
    diff = {key: value for key, value in config.to_diff_dict().items() if key != "transformers_version"}
    rebuilt = type(config).from_dict(diff)
    same = {k: v for k, v in rebuilt.to_diff_dict().items() if k != "transformers_version"} == diff
    return diff if same else {k: v for k, v in config.to_dict().items() if k != "transformers_version"}


def describe_reproducer(item: TrackedItem, export: ProbeExport, registry_dir: Path | None = None) -> ScriptSpec:
    """``export`` built as exportbot builds it, described as data for bot.audit.standalone.render_script."""
    import torch
    import transformers

    from exporters.ledger import default_registry_dir, load_ledger
    from exporters.ledger.repro import build_reproducer

    ledger = load_ledger(registry_dir or default_registry_dir())
    entry = ledger.by_id(export.entry_id) if export.entry_id else None
    reproducer = build_reproducer(entry, export.model)
    model, config = reproducer.model, getattr(reproducer.model, "config", None)
    names = (type(model).__name__, type(config).__name__)
    if config is None or not all(hasattr(transformers, name) for name in names):
        raise DraftError(f"{item.id}: {names[0]} is not a transformers model built from a transformers config; "
                         f"write docs/upstream-drafts/scripts/{item.id}.py by hand")  # fmt: skip
    tensors, values = [], {}
    for name, value in reproducer.inputs.items():
        if isinstance(value, torch.Tensor):
            tensors.append(_tensor_spec(name, value))
        elif value is None or isinstance(value, (bool, int, float, str)):
            values[name] = value
        else:
            raise DraftError(f"{item.id}: input {name!r} is a {type(value).__name__}, which a standalone script "
                             f"cannot write inline; write docs/upstream-drafts/scripts/{item.id}.py by hand")  # fmt: skip
    options = reproducer.export
    optimize = options.get("optimize", True)
    if entry is None and ledger.disable_optimize(export.model, export.dynamic) is not None:
        optimize = False  # the probe ran with the ledger, which turns the optimizer off for this class
    repro = entry.repro if entry is not None else None
    source = (f"the reproducer of ledger entry {entry.id} ({reproducer.source}, {export.model}, "
              f"{'dynamic' if export.dynamic else 'static'})" if entry is not None else
              f"the export its --without probe re-runs ({export.model} through {export.backend}, "
              f"{'dynamic' if export.dynamic else 'static'}; exportbot's tiny model)")  # fmt: skip
    return ScriptSpec(
        item.id, source, names[0], names[1], _config_data(config), reproducer.seed, export.backend,
        tuple(tensors), values, _dynamic_shapes(export, reproducer.inputs, options), bool(options.get("strict")),
        options.get("opset_version"), optimize, tuple(repro.init) if repro is not None else (),
        getattr(config, "_attn_implementation", None),
    )  # fmt: skip


# ── Running a script ──
def _site_directories(python: str) -> list[str]:
    if Path(python).resolve() == Path(sys.executable).resolve():
        paths = sysconfig.get_paths()
        return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))
    code = "import json, sysconfig; p = sysconfig.get_paths(); print(json.dumps([p['purelib'], p['platlib']]))"
    done = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, check=True)
    return list(dict.fromkeys(json.loads(done.stdout)))


def _shortened(text: str, replacements: Iterable[tuple[str, str]]) -> str:
    for old, new in sorted(replacements, key=lambda pair: -len(pair[0])):
        text = text.replace(old, new)
    return text


def run_script(
    item_id: str, script: str, expected: str | None, *, timeout: float, python: str = sys.executable,
    today: Callable[[], datetime.date] = datetime.date.today,
) -> ScriptRun:  # fmt: skip
    """Run ``script`` in a fresh process without exportbot (see the module docstring), stopped after
    ``timeout`` s; the record says what it printed (an excerpt) and whether that matched ``expected``."""
    sites = _site_directories(python)
    with tempfile.TemporaryDirectory(prefix="exportbot-draft-") as scratch:
        directory = Path(scratch).resolve()
        path, report = directory / f"{item_id}.py", directory / "child.json"
        path.write_text(script, encoding="utf-8")
        bootstrap = _BOOTSTRAP.replace("PACKAGES", repr(UPSTREAM_PACKAGES))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")} | {"HF_HUB_OFFLINE": "1"}
        started = time.monotonic()
        child = subprocess.Popen([python, "-I", "-S", "-u", "-c", bootstrap, str(report), str(path), *sites], cwd=directory,
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            output, _ = child.communicate(timeout=timeout)
            code: int | None = child.returncode
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            output, _ = child.communicate()
            code = None
        seconds = round(time.monotonic() - started, 1)
        facts = json.loads(report.read_text(encoding="utf-8")) if report.is_file() else {}
    text = output.decode("utf-8", errors="replace")
    stdlib = sysconfig.get_paths()["stdlib"]
    text = _shortened(text, [(f"{directory}/", ""), (str(directory), "."), *((site, "site-packages") for site in sites),
                             (stdlib, f"python{sys.version_info.major}.{sys.version_info.minor}")])  # fmt: skip
    if code is None:
        text = text.rstrip("\n") + f"\n[stopped: timed out after {timeout:g} s]"
    elif code < 0:  # a crash prints nothing of its own; say it as a probe's crash is said (probe_cause)
        text = text.rstrip("\n") + f"\n[{ended_without_outcome(None, code)}]"
    return ScriptRun(script_digest(script), today().isoformat(), facts.get("versions", {}), facts.get("python", "?"),
                     facts.get("platform", "?"), code, seconds, excerpt(text, expected), expected,
                     matches(expected, text), bool(facts.get("exportbot_importable", True)))  # fmt: skip


def run_probe(
    item: TrackedItem, export: ProbeExport, *, timeout: float,
    today: Callable[[], datetime.date] = datetime.date.today,
) -> ProbeRun:  # fmt: skip
    """A workaround's ``--without`` probe: ``exportbot export MODEL --without NAME`` in its own process (the
    audit's re-run, bot.run.reruns), and the error it recorded."""
    from bot.run.reruns import subprocess_runner

    outcome = subprocess_runner(timeout, without=[item.id])(export.model, export.backend, export.dynamic)
    error = (outcome.get("error") or "").strip()
    return ProbeRun(outcome.get("command", ""), today().isoformat(), outcome.get("status", "?"), probe_cause(outcome),
                    error[:3000], dict(outcome.get("versions") or {}))  # fmt: skip


_PROGRESS = re.compile(r":\s+\[\s*\d+(?:\.\d+)?s\]")  # ": [  1.7s] Model: step", the export's progress on stderr


def probe_cause(outcome: Mapping[str, Any]) -> str:
    """The innermost error a probe recorded; for a crash, only how the process ended ("killed by signal 8
    (SIGFPE)"): what follows it is the export's progress on stderr, which no standalone script repeats."""
    error = (outcome.get("error") or "").strip()
    cause = outcome.get("cause") or (first_error_line(outcome) if error else "")
    return _PROGRESS.split(cause, maxsplit=1)[0]


# ── Which drafts a change touched ──
def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ValueError(f"git {' '.join(args)}: {(done.stderr or done.stdout).strip().splitlines()[-1:] or '?'}")
    return done.stdout


def changed_draft_ids(base: str, directory: Path = DRAFTS_DIR) -> list[str]:
    """Items whose draft inputs differ between git revision ``base`` and the working tree (committed or not):
    a script, notes or page changed, or their record in runs.json; ``ValueError`` for a revision git lacks."""
    from bot.audit.drafts import load_runs

    root = Path(_git(directory, "rev-parse", "--show-toplevel").strip())
    where = str(directory.resolve().relative_to(root))
    paths = _git(root, "diff", "--name-only", base, "--", where).splitlines()
    paths += _git(root, "ls-files", "--others", "--exclude-standard", "--", where).splitlines()
    ids: set[str] = set()
    for name in paths:
        relative = Path(name).relative_to(where)
        if relative.parts[0] in (SCRIPTS, NOTES) and len(relative.parts) == 2:
            ids.add(Path(relative.parts[1]).stem)
        elif len(relative.parts) == 1 and relative.suffix == ".md" and relative.name != "README.md":
            ids.add(relative.stem)
        elif relative.name == RUNS_FILE:
            try:
                old = load_runs(_git(root, "show", f"{base}:{where}/{RUNS_FILE}"))
            except (ValueError, DraftError):
                old = {}
            new = load_runs((directory / RUNS_FILE).read_text(encoding="utf-8"))
            ids |= {item for item in set(old) | set(new) if old.get(item) != new.get(item)}
    return sorted(ids)
