"""``exportbot audit`` against the fake GitHub server through the real PyGithub client.

Every test writes its own ledger into a temporary registry. Re-runs go through an injected runner
(``FakeRunner``) except :func:`test_end_to_end_real_subprocess_export`, which runs a real isolated export.
"""

from __future__ import annotations

import datetime
import json
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fake_github import (
    FakeGitHub,
    Fault,
    fake_github_fixture,  # noqa: F401 (provides the fake_github fixture)
)
from github import Auth, Github

from bot.audit.plan import plan_entry
from bot.audit.verification import Verification, load_verification, save_verification
from bot.cli.audit import audit_command
from bot.cli.audit_render import render_markdown
from bot.github.tracker import Tracker
from bot.run.audit_run import EXIT_ATTENTION, EXIT_NOTHING, EXIT_REMOVABLE, run_audit, verification_records
from exporters.ledger import load_ledger

REPO = "pytorch/pytorch"
PINS = {"torch": "2.13.0", "transformers": "5.23.0", "onnx": "1.23.2", "onnxscript": "0.7.2",
        "onnxruntime": "1.32.0"}  # fmt: skip
PIN_TEXT = "".join(f"{k}=={v}\n" for k, v in PINS.items())
FAILURE = r"Could not guard on data-dependent expression"


def write_registry(root: Path, entries: list[dict[str, Any]]) -> Path:
    """A registry with ``entries`` (EXPORT_SKIPS unless ``list`` says ONNX_DISABLE_OPTIMIZE)."""
    registry = root / "registry"
    registry.mkdir()
    files = {"EXPORT_SKIPS": "export_skips.toml", "ONNX_DISABLE_OPTIMIZE": "onnx_disable_optimize.toml"}
    texts = dict.fromkeys(files, "")
    for fields in entries:
        fields = dict(fields)
        list_name = fields.pop("list", "EXPORT_SKIPS")
        block = "[[entry]]\n"
        for key, value in fields.items():
            block += f"{key} = {value}\n" if key == "added" else f"{key} = {json.dumps(value)}\n"
        texts[list_name] += block + "\n"
    for list_name, name in files.items():
        (registry / name).write_text(texts[list_name])
    (root / "constraints.txt").write_text(PIN_TEXT)
    return registry


def skip_entry(entry_id: str, upstream: str | None, **overrides: Any) -> dict[str, Any]:
    fields = {
        "id": entry_id, "models": ["BertModel"], "backend": "dynamo", "scope": "static",
        "dependency": "torch", "reason": "test entry", "model_change": "none", "failure": FAILURE,
        "added": "2026-01-01",
    }  # fmt: skip
    if upstream:
        fields["upstream"] = upstream
    return fields | overrides


def web(number: int) -> str:
    return f"https://github.com/{REPO}/issues/{number}"


def tracker(server: FakeGitHub, **options: Any) -> Tracker:
    client = Github(base_url=server.url, auth=Auth.Token("ghp_FAKEtoken"), retry=None, timeout=2,
                    seconds_between_requests=0, seconds_between_writes=0)  # fmt: skip
    settings = {"retries": 2, "backoff": 0.01, "max_wait": 5.0, "web_host": "github.com"} | options
    return Tracker.from_env(github=client, **settings)


class FakeRunner:
    """An injected entry runner: answers like ``export --repro ID`` would (the reproducer ran with the
    entry's workaround off, at the pins), with ``status`` and ``error``, and counts calls."""

    def __init__(self, status: str = "pass", error: str | None = None) -> None:
        self.status, self.error, self.calls = status, error, 0

    def __call__(self, entry_id: str):
        def run_export(model: str, backend: str, dynamic: bool) -> dict[str, Any]:
            self.calls += 1
            diffs = {"last_hidden_state": 1e-6} if self.status == "pass" else {}
            optimize = True if backend == "onnx" else None
            return {"model": model, "backend": backend, "dynamic": dynamic, "status": self.status,
                    "error": self.error, "max_abs_diff": diffs, "seconds": 0.1, "repro": entry_id,
                    "workaround_off": [entry_id], "optimize": optimize, "versions": dict(PINS)}  # fmt: skip

        return run_export


def audit(tmp_path: Path, server: FakeGitHub, entries: list[dict[str, Any]], runner: FakeRunner,
          verification: dict[str, Verification] | None = None, **options: Any):  # fmt: skip
    ledger = load_ledger(write_registry(tmp_path, entries))
    return run_audit(ledger, tracker(server), PINS, verification or {}, None, entry_runner=runner, **options)


def verified(entry_id: str, **versions: str) -> dict[str, Verification]:
    stack = {"torch": PINS["torch"], "transformers": PINS["transformers"]} | versions
    return {entry_id: Verification(entry_id, datetime.date(2026, 1, 2), stack, "x", "still-needed", "open")}


def only(report):
    [row] = report.entries
    return row.verdict


def failed_at_older_torch(entry_id: str) -> dict[str, Verification]:
    """The entry's reproducer was seen failing at torch 2.12.0; the pin has moved to 2.13.0 since."""
    return verified(entry_id, torch="2.12.0")


# ── Verdicts ──
def test_closed_completed_and_passing_after_a_pin_move_is_removable(tmp_path, fake_github):
    number = fake_github.add_issue(REPO, state="closed", state_reason="completed")
    runner = FakeRunner()
    report = audit(tmp_path, fake_github, [skip_entry("bert", web(number))], runner,
                   verification=failed_at_older_torch("bert"))  # fmt: skip
    result = only(report)
    assert result.verdict == "removable" and runner.calls == 2  # scope static × 2 runs
    assert "closed:completed" in result.reasons[0] and result.evidence[0]["max_abs_diff"] == 1e-6
    assert report.exit_code() == EXIT_REMOVABLE


def test_passing_but_never_seen_failing_is_not_reproduced(tmp_path, fake_github):
    number = fake_github.add_issue(REPO, state="closed", state_reason="completed")
    report = audit(tmp_path, fake_github, [skip_entry("bert", web(number))], FakeRunner())
    result = only(report)
    assert result.verdict == "not-reproduced" and "never seen failing" in result.reasons[0]
    assert report.exit_code() == EXIT_ATTENTION
    assert "### Needs a human" in render_markdown(report) and "`bert`: **not-reproduced**" in render_markdown(report)


def test_passing_because_a_registered_workaround_took_over_is_superseded(tmp_path, fake_github):
    """Nothing moved, the reproducer passes with ``_fix_x`` firing, and fails as recorded with it disabled:
    superseded, exit 3, remembered in verified.toml; without that probe runner it stays not-reproduced."""
    number = fake_github.add_issue(REPO)
    asked: list[tuple[str, tuple[str, ...]]] = []

    def passing(entry_id: str):
        run = FakeRunner()(entry_id)
        return lambda *export: run(*export) | {"workarounds_fired": {"_fix_x": 1}}

    def without(entry_id: str, names):
        asked.append((entry_id, tuple(names)))
        fail = FakeRunner("failed", "Could not guard on data-dependent expression Eq(u0, 1)")(entry_id)
        return lambda *export: fail(*export) | {"workarounds_disabled": list(names)}

    entries = [skip_entry("bert", web(number))]
    report = audit(tmp_path, fake_github, entries, passing, verification=verified("bert"), force_all=True,
                   supersession_runner=without)  # fmt: skip
    result = only(report)
    assert (result.verdict, result.superseded_by, asked) == ("superseded", ("_fix_x",), [("bert", ("_fix_x",))])
    assert report.exit_code() == EXIT_REMOVABLE
    [row] = report.as_dict()["entries"]
    assert row["superseded_by"] == ["_fix_x"] and row["supersession"][0]["proves"] is True
    [record] = verification_records(report, datetime.date(2026, 12, 1))
    assert record.verdict == "superseded" and record.versions == {"torch": "2.13.0", "transformers": "5.23.0"}
    (tmp_path / "again").mkdir()
    stays = audit(tmp_path / "again", fake_github, entries, passing, verification=verified("bert"), force_all=True)
    assert only(stays).verdict == "not-reproduced"


def test_closed_but_still_failing_is_still_needed(tmp_path, fake_github):
    number = fake_github.add_issue(REPO, state="closed")
    runner = FakeRunner("failed", "Could not guard on data-dependent expression Eq(u0, 1)")
    report = audit(tmp_path, fake_github, [skip_entry("bert", web(number))], runner)
    assert only(report).verdict == "still-needed" and report.exit_code() == EXIT_NOTHING


def test_failing_differently_is_changed_and_shows_both_errors(tmp_path, fake_github):
    number = fake_github.add_issue(REPO, state="closed")
    runner = FakeRunner("failed", "RuntimeError: shape mismatch in attention")
    report = audit(tmp_path, fake_github, [skip_entry("bert", web(number))], runner)
    result = only(report)
    assert result.verdict == "changed" and report.exit_code() == EXIT_ATTENTION
    assert FAILURE in result.reasons[0] and "shape mismatch" in result.reasons[0]


@pytest.mark.parametrize("reason", ["not_planned", "duplicate"])
def test_closed_not_planned_goes_to_a_human_without_rerun(tmp_path, fake_github, reason):
    number = fake_github.add_issue(REPO, state="closed", state_reason=reason)
    runner = FakeRunner()
    report = audit(tmp_path, fake_github, [skip_entry("bert", web(number))], runner)
    assert only(report).verdict == "human" and runner.calls == 0


def test_reopened_goes_to_a_human(tmp_path, fake_github):
    number = fake_github.add_issue(REPO, state="closed")
    fake_github.reopen_issue(REPO, number)
    runner = FakeRunner()
    report = audit(
        tmp_path, fake_github, [skip_entry("bert", web(number))], runner, verification=verified("bert")
    )
    assert only(report).verdict == "human" and runner.calls == 0


def test_missing_issue_is_unknown(tmp_path, fake_github):
    fake_github.add_repo(REPO)
    runner = FakeRunner()
    report = audit(
        tmp_path, fake_github, [skip_entry("bert", web(999))], runner, verification=verified("bert")
    )
    assert only(report).verdict == "unknown" and runner.calls == 0


def test_server_error_then_success_is_retried(tmp_path, fake_github):
    number = fake_github.add_issue(REPO, state="closed")
    fake_github.inject(f"/repos/{REPO}/issues/{number}", Fault.error(500))
    report = audit(tmp_path, fake_github, [skip_entry("bert", web(number))], FakeRunner(),
                   verification=failed_at_older_torch("bert"))  # fmt: skip
    assert only(report).verdict == "removable"


def test_malformed_json_is_unknown_never_closed(tmp_path, fake_github):
    number = fake_github.add_issue(REPO, state="closed")
    fake_github.inject(f"/repos/{REPO}/issues/{number}", Fault.malformed())
    runner = FakeRunner()
    report = audit(
        tmp_path, fake_github, [skip_entry("bert", web(number))], runner, verification=verified("bert")
    )
    assert only(report).verdict == "unknown" and runner.calls == 0


@pytest.mark.parametrize(
    "fault",
    [Fault.rate_limited(reset_in=3600), Fault.too_many_requests(retry_after=3600)],
    ids=["403", "429"],
)
def test_rate_limit_gives_partial_report_with_every_entry(tmp_path, fake_github, fault):
    first = fake_github.add_issue(REPO, state="closed")
    numbers = [fake_github.add_issue(REPO) for _ in range(2)]
    fake_github.inject(f"/repos/{REPO}/issues/{numbers[0]}", fault, times=None)
    entries = [
        skip_entry("first", web(first)),
        skip_entry("second", web(numbers[0]), models=["GPT2Model"]),
        skip_entry("third", web(numbers[1]), models=["T5Model"]),
    ]
    report = audit(tmp_path, fake_github, entries, FakeRunner(), verification=failed_at_older_torch("first"))
    data = report.as_dict()
    assert data["partial"] and data["rate_limited_until"]
    assert [e["id"] for e in data["entries"]] == ["first", "second", "third"]
    assert [e["verdict"] for e in data["entries"]] == ["removable", "unknown", "unknown"]
    assert data["entries"][2]["reasons"][0].startswith("rate limited until ")
    assert fake_github.count(f"/repos/{REPO}/issues/{numbers[1]}") == 0  # stopped querying


# ── Plans ──
def test_pin_change_makes_entry_due_and_names_the_pin(tmp_path, fake_github):
    number = fake_github.add_issue(REPO)
    entry = skip_entry("onnx-entry", web(number), backend="onnx", list="ONNX_DISABLE_OPTIMIZE")
    del entry["model_change"]
    old = {"onnx-entry": Verification("onnx-entry", datetime.date(2026, 1, 2),
                                      dict(PINS) | {"onnx": "1.22.0"}, "x", "still-needed", "open")}  # fmt: skip
    runner = FakeRunner()
    report = audit(tmp_path, fake_github, [entry], runner, verification=old)
    row = report.entries[0]
    assert row.plan.due and "onnx 1.22.0 → 1.23.2" in row.plan.reasons
    assert row.verdict.verdict == "removable" and "onnx 1.22.0 → 1.23.2" in row.verdict.reasons[0]


def test_nothing_moved_is_not_due_and_runs_nothing(tmp_path, fake_github):
    number = fake_github.add_issue(REPO)
    runner = FakeRunner()
    report = audit(
        tmp_path, fake_github, [skip_entry("bert", web(number))], runner, verification=verified("bert")
    )
    assert only(report).verdict == "not-due" and runner.calls == 0 and report.exit_code() == EXIT_NOTHING


def test_closure_already_rechecked_at_these_pins_is_not_due(tmp_path, fake_github):
    number = fake_github.add_issue(REPO, state="closed")
    ledger = load_ledger(write_registry(tmp_path, [skip_entry("bert", web(number))]))
    record = verified("bert")
    record["bert"] = Verification("bert", datetime.date(2026, 1, 2), record["bert"].versions, "x",
                                  "still-needed", "closed:completed")  # fmt: skip
    plan = plan_entry(ledger.entries[0], tracker(fake_github).state(web(number)), PINS, record)
    assert not plan.due and "still failing at these pins" in plan.reasons[0]


def test_force_and_candidate(tmp_path, fake_github):
    number = fake_github.add_issue(REPO)
    runner = FakeRunner("failed", "Could not guard on data-dependent expression")
    report = audit(tmp_path, fake_github, [skip_entry("bert", web(number))], runner,
                   verification=verified("bert"), candidate="torch==2.14.0")  # fmt: skip
    row = report.entries[0]
    assert row.plan.due and row.plan.candidate == "torch==2.14.0" and row.verdict.verdict == "still-needed"


# ── Verification file ──
def test_verification_roundtrip_keeps_unchanged_bytes(tmp_path):
    records = verified("bert")
    assert save_verification(tmp_path, records.values())
    before = (tmp_path / "verified.toml").read_text()
    assert not save_verification(tmp_path, records.values())
    assert (tmp_path / "verified.toml").read_text() == before
    assert load_verification(tmp_path) == records
    save_verification(tmp_path, [], keep_ids=[])
    assert load_verification(tmp_path) == {}


# ── End to end: real PyGithub, real CLI, real isolated subprocess export ──
def run_cli(tmp_path: Path, registry: Path, *extra: str) -> tuple[int, str, dict[str, Any] | None]:
    report_file = tmp_path / "report.json"
    args = ["--registry", str(registry), "--github-url", fake_github_url(registry), "--web-host", "github.com",
            "--runs", "1", "--timeout", "300", "--json", str(report_file), *extra]  # fmt: skip
    result = CliRunner().invoke(audit_command, args, env={"GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md")})
    report = json.loads(report_file.read_text()) if report_file.is_file() else None
    return result.exit_code, result.output, report


def fake_github_url(registry: Path) -> str:
    return (registry / "github-url").read_text()


def e2e_registry(tmp_path: Path, server: FakeGitHub, entry: dict[str, Any], record: Verification) -> Path:
    registry = write_registry(tmp_path, [entry])
    (registry / "github-url").write_text(server.url)
    save_verification(registry, [record])
    return registry


def test_end_to_end_export_skip_is_rerun_from_the_audits_registry(tmp_path, fake_github):
    """The class is gated only in this temporary registry: the child must read it (--registry reaches it)
    and skip that gate (--repro), or the run is no pass (the entry is unknown to the child's own registry,
    or the class is skipped there)."""
    number = fake_github.add_issue(REPO, state="closed", state_reason="completed")
    record = Verification("bert-static", datetime.date(2026, 1, 2), dict(PINS) | {"torch": "2.12.0"}, "x",
                          "still-needed", "open")  # fmt: skip
    registry = e2e_registry(tmp_path, fake_github, skip_entry("bert-static", web(number)), record)
    code, output, report = run_cli(tmp_path, registry, "--update-verification")
    assert code == EXIT_REMOVABLE, output
    [entry] = report["entries"]
    assert entry["verdict"] == "removable", entry
    [run] = entry["evidence"]
    assert run["status"] == "pass" and run["max_abs_diff"] is not None and run["max_abs_diff"] < 1e-3
    assert run["workaround_off"] == ["bert-static"]
    stored = load_verification(registry)["bert-static"]
    assert stored.verdict == "removable"
    assert stored.versions == {"torch": metadata.version("torch"), "transformers": metadata.version("transformers")}
    assert "bert-static" in (tmp_path / "summary.md").read_text()


def test_end_to_end_disable_optimize_is_rerun_with_the_optimizer_on(tmp_path, fake_github):
    """An ONNX_DISABLE_OPTIMIZE re-run that kept the optimizer off would pass too: the outcome must show it
    was on, or the pass is no evidence."""
    number = fake_github.add_issue(REPO)
    entry = skip_entry("bert-onnx-optimizer", web(number), backend="onnx", list="ONNX_DISABLE_OPTIMIZE",
                       dependency="onnxscript")  # fmt: skip
    del entry["model_change"]
    record = Verification("bert-onnx-optimizer", datetime.date(2026, 1, 2),
                          dict(PINS) | {"onnxscript": "0.7.1"}, "x", "still-needed", "open")  # fmt: skip
    registry = e2e_registry(tmp_path, fake_github, entry, record)
    code, output, report = run_cli(tmp_path, registry)
    [row] = report["entries"]
    assert (code, row["verdict"]) == (EXIT_REMOVABLE, "removable"), output
    [run] = row["evidence"]
    assert run["status"] == "pass" and run["workaround_off"] == ["bert-onnx-optimizer"]
    assert "onnxscript 0.7.1 → 0.7.2" in row["reasons"][0]


def test_interpreter_without_the_pins_is_a_one_line_error_before_any_rerun(tmp_path, fake_github):
    number = fake_github.add_issue(REPO, state="closed", state_reason="completed")
    registry = e2e_registry(tmp_path, fake_github, skip_entry("bert-static", web(number)),
                            Verification("bert-static", datetime.date(2026, 1, 2), dict(PINS), "x", "still-needed", "open"))  # fmt: skip
    (tmp_path / "constraints.txt").write_text(PIN_TEXT.replace("torch==2.13.0", "torch==2.12.0"))
    code, output, report = run_cli(tmp_path, registry)
    assert code == 2 and report is None
    [line] = output.strip().splitlines()
    assert "does not hold the pinned stack of bert-static: torch " in line and "(pinned 2.12.0)" in line
