"""The bundle "done when" matrix: each model x backend x mode exported, then loaded back in fresh processes.

For every case:

1. export (in the matrix's own process, which imports torch once for all cases): build the tiny model,
   export, ``result.save(bundle)`` (validated from the written files), and keep the inputs at the sample
   shape and (dynamic) a second shape with eager's outputs at each;
2. load: a fresh interpreter that imports only ``exporters`` and calls ``exporters.load(bundle)`` at each
   shape, checking the output class, field names and every tensor against eager; for static exports it
   also checks that another size is refused with ``InputError``;
3. standalone (ONNX and .pte only): another fresh interpreter, ``scripts/run_bundle_without_exportbot.py``
   with those inputs, by the manifest's input names, compared with eager, and no exportbot module imported.

    python scripts/bundle_matrix.py                      # all 30 cases, results to docs/bundle-matrix.{md,json}
    python scripts/bundle_matrix.py --models BertModel --backends onnx --out /tmp/m

Slow (ExecuTorch lowering is 15-75 s per case); run by hand, commit the results.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("LlamaForCausalLM", "BertForSequenceClassification", "ViTForImageClassification",
          "WhisperForConditionalGeneration", "T5ForConditionalGeneration")
BACKENDS = ("dynamo", "onnx", "executorch")
MODES = ("static", "dynamic")
TIMEOUT = 900


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}


def export_case(model: str, backend: str, mode: str, case: Path) -> None:
    """Step 1, run in its own process: export, save the bundle, keep inputs and eager outputs per shape."""
    import torch

    from bot.outcome import ExportRequest
    from bot.run.runner import make_exporter
    from exporters.tiny import build_tiny
    from exporters.validation import named_tensors

    tiny = build_tiny(model)
    request = ExportRequest(model, backend, mode == "dynamic")
    started = time.perf_counter()
    result = make_exporter(request, optimize=True).export(tiny.model, tiny.inputs)
    export_seconds = time.perf_counter() - started
    started = time.perf_counter()
    result.save(case / "bundle")
    save_seconds = time.perf_counter() - started
    shapes = {"sample": result.inputs}
    if result.second_inputs is not None:
        shapes["second"] = result.second_inputs
    expected = {}
    for label, inputs in shapes.items():
        with torch.no_grad():
            outputs = result.model(**inputs)
        expected[label] = {
            "inputs": inputs,
            "class": type(outputs).__name__,
            "fields": list(outputs.keys()) if hasattr(outputs, "keys") else None,
            "outputs": named_tensors(outputs),
        }
    torch.save({"expected": expected, "atol": result.atol, "rtol": result.rtol,
                "export_seconds": export_seconds, "save_seconds": save_seconds,
                "validation": result.validation.status}, case / "expected.pt")


LOAD_CHECK = r"""
import json, sys, torch
import exporters
from exporters.validation import named_tensors

case = sys.argv[1]
data = torch.load(case + "/expected.pt", weights_only=False)
model = exporters.load(case + "/bundle")
report = {}
for label, want in data["expected"].items():
    got = model(**want["inputs"])
    names = [n for n, _ in named_tensors(got)]
    problems = []
    if type(got).__name__ != want["class"]:
        problems.append(f"class {type(got).__name__} != {want['class']}")
    if want["fields"] is not None and list(got.keys()) != want["fields"]:
        problems.append(f"fields {list(got.keys())} != {want['fields']}")
    if names != [n for n, _ in want["outputs"]]:
        problems.append("output names differ")
    worst = 0.0
    for (name, expected), (_, actual) in zip(want["outputs"], named_tensors(got)):
        diff = (actual.double() - expected.double()).abs()
        worst = max(worst, diff.max().item() if diff.numel() else 0.0)
        if not bool((diff <= data["atol"] + data["rtol"] * expected.double().abs()).all()):
            problems.append(f"{name} off by {diff.max().item():.3g}")
    shapes = {k: list(v.shape) for k, v in want["inputs"].items()}
    report[label] = {"ok": not problems, "problems": problems, "max_abs_diff": worst, "shapes": shapes}
if "second" not in data["expected"]:
    wider = {k: torch.cat([v, v[:1]]) for k, v in data["expected"]["sample"]["inputs"].items()}
    try:
        model(**wider)
        report["other size refused"] = {"ok": False, "problems": ["a static export accepted another batch size"]}
    except exporters.InputError as error:
        report["other size refused"] = {"ok": True, "message": str(error)}
print(json.dumps(report))
"""


def load_case(case: Path) -> dict:
    """Step 2: a fresh interpreter that imports exporters only."""
    completed = subprocess.run([sys.executable, "-c", LOAD_CHECK, str(case)], capture_output=True, text=True,
                               env=_env(), timeout=TIMEOUT, cwd=tempfile.gettempdir())
    if completed.returncode != 0:
        return {"error": completed.stderr.strip().splitlines()[-1:] or ["exit " + str(completed.returncode)]}
    return json.loads(completed.stdout.strip().splitlines()[-1])


def standalone_case(case: Path) -> dict:
    """Step 3: the ONNX or .pte file run by its runtime alone, from the manifest's input names."""
    import numpy as np
    import torch

    data = torch.load(case / "expected.pt", weights_only=False)
    manifest = json.loads((case / "bundle" / "export.json").read_text())
    component = manifest["components"]["model"]
    from exporters.validation import named_tensors

    labels = list(data["expected"])
    for label in labels:
        leaves = dict(named_tensors(data["expected"][label]["inputs"]))
        np.savez(case / f"{label}-in.npz", **{s["name"]: leaves[s["name"]].numpy() for s in component["inputs"]})
    completed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "run_bundle_without_exportbot.py"), str(case / "bundle"),
         "--inputs", *[str(case / f"{label}-in.npz") for label in labels],
         "--outputs", *[str(case / f"{label}-out.npz") for label in labels]],
        capture_output=True, text=True, timeout=TIMEOUT, cwd=tempfile.gettempdir(),
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    if completed.returncode != 0:
        return {"error": completed.stderr.strip().splitlines()[-1:] or ["exit " + str(completed.returncode)]}
    imported = json.loads(completed.stdout.strip().splitlines()[-1])["imported"]
    report = {}
    for label in labels:
        want = data["expected"][label]
        got = np.load(case / f"{label}-out.npz")
        problems = [m for m in ("exporters", "bot") if m in imported]
        worst = 0.0
        for name, expected in want["outputs"]:
            expected = expected.double().numpy()
            diff = np.abs(got[name].astype(np.float64) - expected)
            worst = max(worst, float(diff.max()) if diff.size else 0.0)
            if not (diff <= data["atol"] + data["rtol"] * np.abs(expected)).all():
                problems.append(f"{name} off by {diff.max():.3g}")
        report[label] = {"ok": not problems, "problems": problems, "max_abs_diff": worst,
                         "imported_transformers": "transformers" in imported}
    return report


def run_case(model: str, backend: str, mode: str, root: Path) -> dict:
    case = root / f"{model}-{backend}-{mode}"
    case.mkdir(parents=True, exist_ok=True)
    record: dict = {"model": model, "backend": backend, "mode": mode}
    started = time.perf_counter()
    try:
        export_case(model, backend, mode, case)
    except Exception as error:  # a failed export is a result of the matrix, not the end of it
        record.update(export="failed", error=f"{type(error).__name__}: {error}"[:500])
        return record
    record["export_case_seconds"] = round(time.perf_counter() - started, 1)
    import torch

    data = torch.load(case / "expected.pt", weights_only=False)
    record.update(export="pass", validation=data["validation"], export_seconds=round(data["export_seconds"], 2),
                  save_and_validate_seconds=round(data["save_seconds"], 2))
    record["load"] = load_case(case)
    if backend in ("onnx", "executorch"):
        record["standalone"] = standalone_case(case)
    checks = [c for part in ("load", "standalone") for c in record.get(part, {}).values() if isinstance(c, dict)]
    record["ok"] = bool(checks) and all(c.get("ok") for c in checks) and "error" not in record["load"]
    return record


def write_markdown(records: list[dict], path: Path, note: str = "") -> None:
    lines = [
        "# Bundle matrix: exported, loaded in a fresh process, run without exportbot",
        "",
        "Generated by `python scripts/bundle_matrix.py` (results also in bundle-matrix.json). Per case: the",
        "export saved its bundle (validated from the written files); a fresh process with only `exporters`",
        "imported loaded it and matched eager (class, fields, every tensor) at the sample shape and, for",
        "dynamic exports, a second shape (static ones must refuse another batch size with `InputError`); ONNX",
        "and .pte files also ran in `scripts/run_bundle_without_exportbot.py` (onnxruntime / executorch.runtime,",
        "no exportbot import) from the manifest's input names and matched eager.",
        *(["", note] if note else []),
        "",
        "| model | backend | mode | export (s) | save+validate (s) | fresh load | without exportbot | ok |",
        "|---|---|---|---:|---:|---|---|---|",
    ]

    def cell(part: dict | None) -> str:
        if part is None:
            return "n/a"
        if "error" in part:
            return "error: " + " ".join(part["error"])[:80]
        return ", ".join(f"{label} {'ok' if c.get('ok') else 'FAIL ' + '; '.join(c.get('problems', []))[:60]}"
                         for label, c in part.items())

    for r in records:
        if r.get("export") == "not run":
            lines.append(f"| {r['model']} | {r['backend']} | {r['mode']} | not run | | | | not run |")
            continue
        if r.get("export") != "pass":
            lines.append(f"| {r['model']} | {r['backend']} | {r['mode']} | failed: {r.get('error', '')[:80]} | | | | no |")
            continue
        lines.append(f"| {r['model']} | {r['backend']} | {r['mode']} | {r['export_seconds']} | "
                     f"{r['save_and_validate_seconds']} | {cell(r.get('load'))} | {cell(r.get('standalone'))} | "
                     f"{'yes' if r['ok'] else 'no'} |")
    passed = sum(1 for r in records if r.get("ok"))
    not_run = sum(1 for r in records if r.get("export") == "not run")
    lines += ["", f"{passed} of {len(records)} cases ok" + (f", {not_run} not run." if not_run else ".")]
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--backends", nargs="*", default=list(BACKENDS))
    parser.add_argument("--modes", nargs="*", default=list(MODES))
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "exportbot-bundle-matrix")
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--records", type=Path, nargs="*", default=[], help="JSON Lines of finished cases: "
                        "skipped when run again (resume); new cases are appended to the first file")
    parser.add_argument("--note", default="", help="a line for the table's header (which commit ran it, load)")
    parser.add_argument("--report-only", action="store_true", help="write the tables from --records; cases "
                        "without a record are listed as not run")
    args = parser.parse_args()
    done = {}
    for records_file in args.records:
        for line in records_file.read_text().splitlines() if records_file.exists() else []:
            record = json.loads(line)
            done[record["model"], record["backend"], record["mode"]] = record
    records = []
    for model in args.models:
        for backend in args.backends:
            for mode in args.modes:
                record = done.get((model, backend, mode))
                if record is None and args.report_only:
                    record = {"model": model, "backend": backend, "mode": mode, "export": "not run"}
                elif record is None:
                    record = run_case(model, backend, mode, args.work)
                    if args.records:
                        with args.records[0].open("a") as stream:
                            stream.write(json.dumps(record) + "\n")
                print(json.dumps(record), flush=True)
                records.append(record)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bundle-matrix.json").write_text(json.dumps(records, indent=2) + "\n")
    write_markdown(records, args.out / "bundle-matrix.md", args.note)
    return 0 if all(r.get("ok") for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
