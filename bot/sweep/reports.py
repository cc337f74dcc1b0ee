"""Summaries of sweep records: per backend/mode counts and the Markdown of docs/coverage.md (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.outcome import BUILD_ERROR, PASS
from bot.sweep.causes import Cause, explain
from bot.sweep.records import SCHEMA, STATUSES, merge_records, started_at
from bot.sweep.tasks import GENERATE
from bot.sweep.triage import failure_signature, normalize_error, triage


@dataclass
class SummaryRow:
    """Status counts of one backend and mode."""

    backend: str
    mode: str
    counts: Counter[str]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def pass_rate(self) -> float:
        """Passes over every record, skipped ones included: a skip is never a pass."""
        return self.counts[PASS] / self.total if self.total else 0.0

    @property
    def built_pass_rate(self) -> float:
        """Passes over the records whose tiny model could be built: the exporter's own rate (issue targets)."""
        built = self.total - self.counts[BUILD_ERROR]
        return self.counts[PASS] / built if built else 0.0

    def as_dict(self) -> dict[str, Any]:
        """``sweep ... --json``'s summary row (docs/sweep-results.md): counts in ``STATUSES`` order, rates 0-1."""
        counts = {status: self.counts[status] for status in summary_statuses([self])}
        return {"backend": self.backend, "mode": self.mode, "total": self.total, "counts": counts,
                "pass_rate": round(self.pass_rate, 4), "built_pass_rate": round(self.built_pass_rate, 4)}


def summarize(records: Iterable[Mapping[str, Any]]) -> list[SummaryRow]:
    rows: dict[tuple[str, str], SummaryRow] = {}
    for record in records:
        backend, mode = record["backend"], record["mode"]
        rows.setdefault((backend, mode), SummaryRow(backend, mode, Counter())).counts[record["status"]] += 1
    return [rows[key] for key in sorted(rows)]


def summary_statuses(rows: Sequence[SummaryRow]) -> list[str]:
    """The statuses that occur, in ``STATUSES`` order, then any unknown ones (a newer schema's)."""
    seen = {status for row in rows for status in row.counts}
    return [s for s in STATUSES if s in seen] + sorted(seen - set(STATUSES))


def _md_cell(text: Any) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(_md_cell(cell) for cell in row) + " |" for row in rows]


def summary_markdown(records: Sequence[Mapping[str, Any]], top: int = 10) -> str:
    """The per backend/mode table and the biggest failure groups, for ``--summary-md`` and CI step summaries."""
    rows = summarize(records)
    statuses = summary_statuses(rows)
    lines = [f"## Sweep summary ({len(records)} exports)", ""]
    lines += _md_table(
        ["backend", "mode", "total", *statuses, "pass rate", "pass rate (built)"],
        (
            [r.backend, r.mode, r.total, *(r.counts[s] for s in statuses), f"{r.pass_rate:.0%}",
             f"{r.built_pass_rate:.0%}"]
            for r in rows
        ),
    )
    groups = triage(records)[:top]
    if groups:
        lines += ["", f"### Top failure groups ({len(groups)} shown)", ""]
        lines += _md_table(
            ["count", "signature", "examples"], ([g.count, g.signature, ", ".join(g.examples())] for g in groups)
        )
    return "\n".join(lines) + "\n"


def first_line(text: str | None, limit: int = 160) -> str:
    line = next((line.strip() for line in (text or "").splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _versions_line(records: Iterable[Mapping[str, Any]]) -> str:
    seen: dict[str, set[str]] = {}
    for record in records:
        for package, version in (record.get("versions") or {}).items():
            seen.setdefault(package, set()).add(version)
    return " · ".join(f"{package} {', '.join(sorted(seen[package]))}" for package in sorted(seen)) or "unknown"


CENSUS_OK = "ok"


def census_causes(census: Iterable[Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """Tiny-factory census records (``scripts/tiny_census.py``) that did not build and run, grouped by their status
    and normalised error, biggest group first: the builder gaps by cause."""
    groups: dict[str, list[str]] = {}
    for record in census:
        if record["status"] != CENSUS_OK:
            message = normalize_error(record.get("error") or "", record["model"])
            key = ": ".join(part for part in (record["status"], record.get("error_type"), message) if part)
            groups.setdefault(key, []).append(record["model"])
    return sorted(((key, sorted(models)) for key, models in groups.items()), key=lambda g: (-len(g[1]), g[0]))


def census_markdown(census: Sequence[Mapping[str, Any]]) -> list[str]:
    """The tiny-factory section: how many classes build and run one eager forward, and every gap by cause."""
    latest = {record["model"]: record for record in census}  # a rerun supersedes
    counts = Counter(record["status"] for record in latest.values())
    lines = [
        "## Tiny models (`build_tiny` plus one eager forward)",
        "",
        f"{counts[CENSUS_OK]} of {len(latest)} classes build and run one eager forward on their generated inputs "
        f"({', '.join(f'{status} {n}' for status, n in counts.most_common())}). An export can only be tried on "
        "those; the rest are builder gaps (or optional dependencies missing here), listed by cause. Configs whose "
        "default backbone is timm's (the DETR family) are built with `use_timm_backbone=False`, their native ResNet "
        "or Swin backbone, whether or not timm is installed (`exporters.tiny.shrink.default_config`). "
        "timm and Pillow stay out of the environment (the TimmWrapper, EdgeTam, FastVlm, PeVideo and PeAudioVideo "
        "gaps, TimmBackbone): timm imports torchvision, and the only torchvision for torch 2.13 that pip reaches "
        "here, PyPI's 0.28.0, is a CUDA 13 build (it bundles libcudart) whose operators do not register against "
        "torch 2.13.0+cpu (`import torchvision` fails: `operator torchvision::nms does not exist`); the matching "
        "CPU build is on download.pytorch.org only, which is unreachable here:",
        "",
    ]
    return lines + _md_table(
        ["classes", "cause", "examples"],
        ([len(models), key, ", ".join(models[:4]) + (" …" if len(models) > 4 else "")]
         for key, models in census_causes(latest.values())),
    )  # fmt: skip


def runnable_markdown(records: Sequence[Mapping[str, Any]], census: Sequence[Mapping[str, Any]]) -> list[str]:
    """Pass rates over the swept classes the tiny factory builds and runs eagerly: the exporter's own share,
    since an export of a model that cannot run its own forward fails whatever the exporter does."""
    latest = {record["model"]: record["status"] for record in census}
    runnable = [record for record in records if latest.get(record["model"]) == CENSUS_OK]
    rows = summarize(runnable)
    lines = ["### Over the classes that build and run eagerly", ""]
    return lines + _md_table(
        ["backend", "mode", "classes", "pass", "not pass", "pass rate"],
        ([r.backend, r.mode, r.total, r.counts[PASS], r.total - r.counts[PASS], f"{r.pass_rate:.0%}"] for r in rows),
    )


def causes_markdown(
    records: Sequence[Mapping[str, Any]], causes: Sequence[Cause], census: Sequence[Mapping[str, Any]] = ()
) -> list[str]:
    """Every export that did not pass, in one bucket each: gated by the ledger, a builder gap, a reviewed cause
    of ``sweeps/causes.toml`` (with its level, reason and action), or untriaged (listed one by one, the work left)."""
    census_ok = {record["model"]: record["status"] == CENSUS_OK for record in census} if census else None
    explanation = explain(records, causes, census_ok)
    total = len(explanation.ledger) + len(explanation.builder_gap) + explanation.triaged + len(explanation.untriaged)
    lines = [
        "## Why the rest do not pass",
        "",
        f"{total} exports did not pass: {len(explanation.ledger)} are gated by a ledger entry (registry/), "
        f"{len(explanation.builder_gap)} are builder gaps (the class does not build or run eagerly, see below), "
        f"{explanation.triaged} have a reviewed cause (`sweeps/causes.toml`), {len(explanation.untriaged)} are "
        "untriaged.",
        "",
    ]
    per_mode: dict[tuple[str, str], Counter[str]] = {}
    buckets = [("ledger", explanation.ledger), ("builder gap", explanation.builder_gap),
               ("triaged", [r for rs in explanation.by_cause.values() for r in rs]),
               ("untriaged", explanation.untriaged)]  # fmt: skip
    for bucket, bucket_records in buckets:
        for record in bucket_records:
            per_mode.setdefault((record["backend"], record["mode"]), Counter())[bucket] += 1
    lines += _md_table(
        ["backend", "mode", "not pass", *(bucket for bucket, _ in buckets)],
        ([backend, mode, sum(counts.values()), *(counts[bucket] for bucket, _ in buckets)]
         for (backend, mode), counts in sorted(per_mode.items())),
    )  # fmt: skip
    if causes:
        lines += ["", "### Reviewed causes", ""]
        lines += _md_table(
            ["cause", "level", "exports", "examples", "reason", "action"],
            ([cause.id, cause.level, len(explanation.by_cause[cause.id]),
              ", ".join(sorted({r["model"] for r in explanation.by_cause[cause.id]})[:4]), cause.reason, cause.action]
             for cause in causes),
        )  # fmt: skip
    if explanation.untriaged:
        lines += ["", f"### Untriaged ({len(explanation.untriaged)})", ""]
        lines += _md_table(
            ["class", "backend", "mode", "signature"],
            ([r["model"], r["backend"], r["mode"], failure_signature(r)]
             for r in sorted(explanation.untriaged, key=lambda r: (r["model"], r["backend"], r["mode"]))),
        )  # fmt: skip
    return lines


def _exporter_line(records: Sequence[Mapping[str, Any]]) -> str:
    """Which exporter code the records ran on, from the records alone (docs/sweep-results.md, "Exporter code"):
    when they were made, the hash the newest one carries and how many share it, how many ran on other hashes,
    how many carry none. Not against today's code, whose hash changes with every commit to the exporters (the
    page would go stale with each); scripts/check_generated.py makes that comparison."""
    hashes = Counter(record.get("exporter_version") or "" for record in records)
    unhashed = hashes.pop("", 0)
    dated = [(moment, index) for index, record in enumerate(records) if (moment := started_at(record)) is not None]
    if not dated:
        return f"Exporter code: {len(records) - unhashed} of {len(records)} records carry an exporter hash."
    (first, _), (last, newest) = min(dated), max(dated)
    code = records[newest].get("exporter_version") or ""
    others = len(hashes) - (1 if code else 0)
    parts = [f"the records were made from {first:%Y-%m-%d} to {last:%Y-%m-%d %H:%M} UTC (`started_at`)"]
    if code:
        parts.append(f"the newest ran on exporter code `{code}` (`exporter_version`, the hash of the exporters' "
                     f"source), as do {hashes[code]} of the {len(records)}")
    else:
        parts.append("the newest carries no exporter hash (`exporter_version`)")
    if others:
        parts.append(f"{sum(hashes.values()) - hashes[code]} ran on {others} {'other ' if code else ''}"
                     f"hash{'es' if others != 1 else ''} (earlier code, or a branch's)")
    if unhashed:
        parts.append(f"{unhashed} carry none (made before the field existed)")
    return f"Exporter code: {'; '.join(parts)}. `scripts/check_generated.py` says how many differ from the code now."


def _specialised_line(records: Sequence[Mapping[str, Any]]) -> str:
    """How many dynamic passes say which dims stayed dynamic, how many of those kept none (validated at the
    sample shape only: it shows the export works, not that it is dynamic), and how many kept a dim the second
    shape could not move (the program's guards admit no other size within reach: one size checked there)."""
    passes = [r for r in records if r["mode"] == "dynamic" and r["status"] == PASS]
    told = [r for r in passes if "dynamic_dims" in r]
    static = sorted(r["model"] for r in told if not r["dynamic_dims"])
    unmoved = sorted(r["model"] for r in told if r.get("unmoved_dims"))
    return (
        f"Dynamic passes whose record names the dims kept dynamic: {len(told)} of {len(passes)} (records made "
        f"before 2026-12-02 do not); {len(static)} of them kept none, every dim specialised by torch.export, and "
        f"were validated at the sample shape only{_named(static)}; {len(unmoved)} kept a dim that the second "
        f"shape left at the sample's size, because the program's guards admit no other size within reach"
        f"{_named(unmoved)}."
    )


def _named(models: Sequence[str]) -> str:
    return f": {', '.join(models[:8])}{' …' if len(models) > 8 else ''}" if models else ""


def generation_markdown(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The generation column: per class and backend, the generation export's status (mode ``generate``,
    ``sweep run --task``) beside the same class's single-graph dynamic export; empty without generate records."""
    generation = [record for record in records if record["mode"] == GENERATE]
    if not generation:
        return []
    dynamic = {(r["model"], r["backend"]): r["status"] for r in records if r["mode"] == "dynamic"}
    passed = sum(record["status"] == PASS for record in generation)
    lines = [
        "", "## Generation (`sweep run --task …`: prefill + decode with a KV cache, `generate()` token for token)", "",
        f"{passed} of {len(generation)} generation exports pass: both components validated from the written bundle "
        "at two shapes and 16 greedy tokens of two padded prompts equal to eager `generate()` (docs/generation.md). "
        "`dynamic export` is the same class's single-graph dynamic record, where one exists.", "",
    ]  # fmt: skip
    return lines + _md_table(
        ["class", "backend", "dynamic export", "generation", "detail"],
        ([r["model"], r["backend"], dynamic.get((r["model"], r["backend"]), "—"), r["status"],
          first_line(r.get("error")) or (r.get("ledger_entry") or "")] for r in generation),
    )  # fmt: skip


def coverage_markdown(
    records: Sequence[Mapping[str, Any]],
    command: str,
    census: Sequence[Mapping[str, Any]] = (),
    causes: Sequence[Cause] = (),
) -> str:
    """``docs/coverage.md``: generated from result files (and the tiny census and reviewed causes) by ``command``,
    never by hand."""
    records = merge_records(records)
    lines = [
        f"<!-- Generated by `{command}`. Do not edit by hand: rerun the command. -->",
        "# Export coverage",
        "",
        f"Generated by `{command}` from {len(records)} records.",
        "",
        f"Versions: {_versions_line(records)}.",
        "",
        _exporter_line(records),
        "",
        f"Statuses are those of `docs/sweep-results.md` (schema {SCHEMA}); only `pass` means the artifact was "
        "shown to match eager.",
        "",
    ]
    lines += summary_markdown(records).splitlines()
    lines += ["", _specialised_line(records)]
    if census:
        lines += ["", *runnable_markdown(records, census)]
    lines += ["", *causes_markdown(records, causes, census)]
    if census:
        lines += ["", *census_markdown(census)]
    lines += generation_markdown(records)
    lines += ["", "## Every export", ""]
    lines += _md_table(
        ["class", "backend", "mode", "status", "seconds", "workarounds fired", "ledger entry", "error"],
        (
            [
                r["model"],
                r["backend"],
                r["mode"],
                r["status"],
                f"{r.get('seconds') or 0:.1f}",
                ", ".join(f"{name}×{n}" for name, n in sorted((r.get("workarounds_fired") or {}).items())),
                (r.get("ledger_entry") or "") + (f" ({r['ledger_match']})" if r.get("ledger_match") else ""),
                first_line(r.get("error")),
            ]
            for r in records
        ),
    )
    return "\n".join(lines) + "\n"


