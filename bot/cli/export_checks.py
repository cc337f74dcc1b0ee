"""``exportbot export`` before and after the work: every input checked first, the files published whole.

``check_request`` refuses, as one line and exit code 2, anything that would fail later: an unwritable
``--out`` (first: it would otherwise be found after a 75 s lowering), options that contradict each other or
the backend, a GPU backend without a GPU, ``--without`` names that are unknown or belong to another backend,
a model argument that is no class, directory or reachable hub id. ``check_repro`` does the same for
``--repro ENTRY_ID``: the entry exists and the export is one of its re-runs (the audit's re-runs pass the same
flag, so a mistake there shows as a one-line usage error, never as an export of something else).

Publishing is the bundle's (``exporters.bundle.format``): the export is staged in a hidden sibling of ``--out`` and
renamed into place only once validated, so ``--out`` is always the previous bundle or the new one; a
failure, Ctrl-C included, is recorded beside it in ``<out>.failed.json``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bot.errors import UsageProblem
from exporters.export_options import DynamicDim, ExportOptions, OptionError, did_you_mean
from exporters.ledger import LedgerError, default_registry_dir, load_ledger


def check_request(
    model: str, backend: str, dynamic: bool, out_dir: Path, *, et_backend: str | None, no_optimize: bool,
    without: tuple[str, ...], dynamic_dims: tuple[str, ...], ort_fusions: bool = False, **option_values: object,
) -> ExportOptions:  # fmt: skip
    """The ``ExportOptions`` of a valid request; ``UsageProblem`` (exit 2) for the first problem found."""
    check_generation_request(backend, out_dir, et_backend=et_backend, no_optimize=no_optimize, without=(),
                             ort_fusions=ort_fusions)
    try:
        options = ExportOptions(dynamic_dims=tuple(DynamicDim.parse(d) for d in dynamic_dims), **option_values)
        options.check(backend, dynamic, et_backend or "xnnpack")
    except OptionError as error:
        raise UsageProblem(str(error)) from None
    if et_backend == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageProblem("--et-backend cuda needs a CUDA GPU; torch.cuda.is_available() is False here "
                               "(use --et-backend xnnpack)")
    check_without(without, backend, et_backend or "xnnpack")
    check_model(model, options.task)
    if options.init_scale is not None and (Path(model).exists() or "/" in model):
        raise UsageProblem(f"--init-scale scales a tiny model built from a class name; {model} is a checkpoint")
    return options


def check_generation_request(backend: str, out_dir: Path | None, *, et_backend: str | None,
                             no_optimize: bool, without: tuple[str, ...], ort_fusions: bool = False,
                             cache: str | None = None) -> None:
    """``check_request``'s checks that apply to a generation export (its own options are checked where it
    starts, before any work): ``--out``, the backend's options, the ``--without`` names, ``--cache``."""
    if out_dir is not None:
        check_writable(out_dir)
    if et_backend is not None and backend != "executorch":
        raise UsageProblem(f"--et-backend {et_backend} is an ExecuTorch option; --backend is {backend}")
    for flag, given in (("--no-optimize", no_optimize), ("--ort-fusions", ort_fusions)):
        if given and backend != "onnx":
            raise UsageProblem(f"{flag} is an ONNX option; --backend is {backend}")
    if cache == "in-place" and backend not in ("executorch", "onnx"):
        raise UsageProblem(f"--cache in-place serves --backend executorch or onnx; --backend is {backend}")
    check_without(without, backend, et_backend or "xnnpack")


def check_writable(out_dir: Path) -> None:
    """``out_dir`` can be created and written: probe its nearest existing ancestor with a real file."""
    from exporters.bundle.format import BundleError, check_replaceable

    try:
        check_replaceable(out_dir)  # a bundle replaces --out whole: never a directory of other files
    except BundleError as error:
        raise UsageProblem(f"--out {error}") from None
    ancestor = out_dir
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UsageProblem(f"--out {out_dir}: {ancestor} is not a directory")
    try:
        with tempfile.NamedTemporaryFile(dir=ancestor, prefix=".exportbot-probe-"):
            pass
    except OSError as error:
        raise UsageProblem(f"--out {out_dir}: cannot write in {ancestor} ({error.strerror or error})") from None


def check_without(names: tuple[str, ...], backend: str, et_backend: str) -> None:
    """Every ``--without`` name is registered and is a workaround of this backend (Dynamo's apply to all)."""
    if not names:
        return
    from exporters import load_all_workarounds
    from exporters.utils import all_workarounds

    load_all_workarounds()
    registered = {w.name: w for w in all_workarounds()}
    for name in names:
        if name not in registered:
            raise UsageProblem(f"no workaround named {name!r}{did_you_mean(name, registered)} "
                               "(see `exportbot list-workarounds`)")
        owner = registered[name].backend
        if not applies_to(owner, backend, et_backend):
            raise UsageProblem(f"--without {name}: a workaround of {owner}, not of --backend {backend}"
                               + (f" --et-backend {et_backend}" if backend == "executorch" else ""))


def applies_to(owner: str, backend: str, et_backend: str) -> bool:
    """Whether a workaround registered for ``owner`` can fire in an export through ``backend``: Dynamo's
    (``dynamo``, and its narrower ``dynamo.pt2-load``, ``dynamo.second-shape``) in every export, a backend's own,
    and an ExecuTorch partitioner's (``executorch.xnnpack``, narrowed to ``executorch.xnnpack.dynamic``) with
    that partitioner."""
    narrow = f"{backend}.{et_backend}" if backend == "executorch" else backend
    return owner == backend or any(owner == scope or owner.startswith(f"{scope}.") for scope in ("dynamo", narrow))


def check_model(model: str, task: str | None) -> None:
    """``model`` is a checkpoint directory, a reachable hub id or a class name, and ``task`` fits it."""
    from exporters import hub
    from exporters.export_options import resolve_class_name
    from exporters.tiny import TinyModelError, model_class

    path = Path(model)
    if path.exists():
        if not (path / "config.json").is_file():
            raise UsageProblem(f"{model}: not a checkpoint directory (no readable config.json)")
    elif hub.is_hub_id(model):
        pass  # resolve_class_name loads its config, or says in one line why it cannot
    elif "/" in model or model.startswith("."):
        raise UsageProblem(f"{model}: no such directory")
    else:
        try:
            model_class(model)
        except TinyModelError as error:
            raise UsageProblem(f"{error}{did_you_mean(model, model_class_names())}") from None
    try:
        resolve_class_name(model, task)
    except (OptionError, hub.HubUnavailableError) as error:
        raise UsageProblem(str(error)) from None
    except ValueError as error:  # a config.json transformers cannot read
        raise UsageProblem(f"{model}: {str(error).splitlines()[0]}") from None


def model_class_names() -> list[str]:
    """Public transformers names that look like model classes (for "did you mean")."""
    import transformers

    return [n for n in dir(transformers) if n[:1].isupper() and ("For" in n or n.endswith(("Model", "LMHeadModel")))]


def check_repro(entry_id: str, model: str, backend: str, dynamic: bool) -> None:
    """Raise :class:`UsageProblem` unless ``model`` through ``backend`` in this mode re-runs ``entry_id``."""
    registry = default_registry_dir()
    try:
        entry = load_ledger(registry).by_id(entry_id)
    except KeyError:
        raise UsageProblem(f"--repro: no ledger entry {entry_id!r} in {registry}") from None
    except LedgerError as error:
        raise UsageProblem(f"--repro: the ledger in {registry} is invalid: {error.problems[0]}") from None
    if model not in entry.models:
        raise UsageProblem(f"--repro {entry_id}: {model} is not one of its models ({', '.join(entry.models)})")
    if backend != entry.backend:
        raise UsageProblem(f"--repro {entry_id}: a {entry.backend} entry; pass --backend {entry.backend}")
    if dynamic not in entry.modes():
        wanted = "--dynamic" if entry.modes() == [True] else "--static"
        raise UsageProblem(f"--repro {entry_id}: it does not re-run in this shape mode; pass {wanted}")
