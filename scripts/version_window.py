"""Measure which releases of each dependency the exporter works with: the window ``bisect`` searches.

For each (package, version) of :data:`MATRIX`, a candidate environment is built exactly as
``exportbot audit --candidate`` builds one (bot.run.venvs: layered on the pinned environment, only the moved
package and what it drags installed), and a few tiny exports run there, each in its own
``python -m bot export`` process. One JSON line per export goes to ``docs/version-window.jsonl``; the
table in ``docs/version-window.md`` is made from it (``--render``).

    nice -n 5 python scripts/version_window.py                       # the whole matrix (~30 min on 2 cores)
    nice -n 5 python scripts/version_window.py --only transformers   # one package
    python scripts/version_window.py --render                        # rewrite the Markdown table

The environments stay in ``.exportbot-cache/venvs`` (seconds to reuse).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bot.audit.pins import constraints_with, normalize_name  # noqa: E402
from bot.run.reruns import subprocess_runner  # noqa: E402
from bot.run.venvs import (  # noqa: E402
    DEFAULT_CACHE,
    Uninstallable,
    ensure_venv,
    project_dependencies,
    site_packages,
)

ONNX_EXPORTS = [("BertModel", "onnx", False), ("LlamaForCausalLM", "onnx", False), ("LlamaForCausalLM", "onnx", True)]
ET_EXPORTS = [("LlamaForCausalLM", "executorch", False)]
# Output types transformers < 5.13 registers with pytree without keys (CanineModelOutputWithPooling,
# MoeModelOutputWithPast): the project's own output naming must get through them at every release.
KEYLESS_OUTPUT_EXPORTS = [("CanineModel", "onnx", False), ("MixtralModel", "onnx", False)]
# The window's two edges and a middle release of each package (the pinned release is the upper edge).
MATRIX: dict[str, tuple[list[str], list[tuple[str, str, bool]]]] = {
    "transformers": (["5.0.0", "5.6.2", "5.12.1", "5.18.0", "5.23.0"],
                     ONNX_EXPORTS[:2] + KEYLESS_OUTPUT_EXPORTS + ET_EXPORTS),
    "onnxscript": (["0.5.7", "0.6.0", "0.6.2", "0.7.0", "0.7.1"], ONNX_EXPORTS),
    "onnx": (["1.21.0", "1.22.0"], ONNX_EXPORTS),
    "onnxruntime": (["1.27.0", "1.30.0"], ONNX_EXPORTS),
    "executorch": (["1.3.1", "1.4.0", "1.4.1", "1.5.0"], ET_EXPORTS),
}
JSONL = REPO / "docs" / "version-window.jsonl"
MARKDOWN = REPO / "docs" / "version-window.md"
TABLE_START, TABLE_END = "<!-- measured:start -->", "<!-- measured:end -->"


def first_line(text: str | None) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0][:160] if lines else ""


def measure(package: str, version: str, exports: list[tuple[str, str, bool]], timeout: float) -> list[dict]:
    pins = (REPO / "constraints.txt").read_text(encoding="utf-8")
    directory = DEFAULT_CACHE / f"window-{normalize_name(package)}-{version}"
    started = time.perf_counter()
    try:
        python = ensure_venv(directory, constraints_with(pins, package, version), project_dependencies(),
                             base=site_packages())  # fmt: skip
    except Uninstallable as refused:
        return [{"package": package, "version": version, "model": None, "status": "uninstallable",
                 "error": first_line(str(refused)), "seconds": 0.0}]  # fmt: skip
    build = round(time.perf_counter() - started, 1)
    run = subprocess_runner(timeout, plain=True, python=python, pythonpath=REPO)
    rows = []
    for model, backend, dynamic in exports:
        outcome = run(model, backend, dynamic)
        rows.append({
            "package": package, "version": version, "model": model, "backend": backend,
            "mode": "dynamic" if dynamic else "static", "status": outcome.get("status"),
            "error": first_line(outcome.get("error")), "seconds": outcome.get("seconds"),
            "ran_with": (outcome.get("versions") or {}).get(package), "env_build_seconds": build,
        })  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def render(rows: list[dict]) -> str:
    lines = ["| package | version | export | result | s | first error line |", "|---|---|---|---|---|---|"]
    for row in rows:
        export = f"{row['model']} {row.get('backend')}/{row.get('mode')}" if row.get("model") else "(install)"
        error = (row.get("error") or "").replace("|", "\\|")
        lines.append(f"| {row['package']} | {row['version']} | {export} | {row['status']} | "
                     f"{row.get('seconds') or ''} | {error} |")  # fmt: skip
    return "\n".join(lines)


def write_markdown(rows: list[dict]) -> None:
    text = MARKDOWN.read_text(encoding="utf-8")
    head, _, rest = text.partition(TABLE_START)
    _, _, tail = rest.partition(TABLE_END)
    MARKDOWN.write_text(f"{head}{TABLE_START}\n{render(rows)}\n{TABLE_END}{tail}", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="Measure only this package (repeatable).")
    parser.add_argument("--version", action="append", help="Measure only these versions (repeatable).")
    parser.add_argument("--timeout", type=float, default=600.0, help="Seconds before one export is killed.")
    parser.add_argument("--render", action="store_true", help="Only rewrite docs/version-window.md.")
    args = parser.parse_args()
    old = [json.loads(line) for line in JSONL.read_text().splitlines()] if JSONL.is_file() else []
    if not args.render:
        for package, (versions, exports) in MATRIX.items():
            if args.only and package not in args.only:
                continue
            for version in versions:
                if args.version and version not in args.version:
                    continue
                new = measure(package, version, exports, args.timeout)
                old = [r for r in old if (r["package"], r["version"]) != (package, version)] + new
                old.sort(key=lambda r: (r["package"], [int(p) for p in r["version"].split(".")]))
                JSONL.write_text("".join(json.dumps(r) + "\n" for r in old), encoding="utf-8")
    write_markdown(old)


if __name__ == "__main__":
    main()
