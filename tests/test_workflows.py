"""The GitHub Actions workflows in .github/workflows (docs/github-actions.md).

Four layers, cheapest first, none of them needing a network, a token or torch:

* **Structure** (always): a small Python validator of the workflow syntax this project uses (keys,
  events, dispatch inputs, cron, permissions, ``needs``, expressions and the contexts they read,
  ``bash -n`` of every ``run:`` script). A broken workflow fails it; see the negative tests.
* **actionlint** (when installed): rhysd/actionlint's checks on top. No PyPI wheel ships rhysd's binary
  (the wheels that install cleanly carry forks), so it is not a pinned dependency: the tests run
  whatever ``actionlint`` is on PATH, in .venv/bin or named by ``$ACTIONLINT``, and skip otherwise.
* **Policy**: timeout-minutes on every job, no ``pull_request_target``, every action pinned to a major
  version or a commit SHA, write permissions only in audit.yml's publish job, one audit at a time,
  no expression expanded inside a script, and ci.yml running what .ci/run runs.
* **CLI**: every ``exportbot ...`` command line in a ``run:`` script (and in the docs' shell blocks)
  names a registered command and only options it has. A command that is not registered yet fails the
  test: the workflow would fail on GitHub the same way.

The shell logic of the audit, publish and sweep-plan steps is also run here, with a stub ``exportbot``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW_DIR = ROOT / ".github" / "workflows"
WORKFLOWS = sorted([*WORKFLOW_DIR.glob("*.yml"), *WORKFLOW_DIR.glob("*.yaml")])
DOCS = ROOT / "docs" / "github-actions.md"
BASH = shutil.which("bash") or "/bin/bash"


# ── Loading: YAML 1.1 would read `on:` as the boolean True; GitHub reads YAML 1.2 booleans only ──
class _WorkflowLoader(yaml.SafeLoader):
    """SafeLoader with true/false as the only booleans and duplicate keys refused (GitHub refuses them)."""


_BOOL = "tag:yaml.org,2002:bool"
_WorkflowLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_WorkflowLoader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def _construct_mapping(loader: _WorkflowLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_WorkflowLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_workflow(path: Path) -> dict[str, Any]:
    data = yaml.load(path.read_text(encoding="utf-8"), Loader=_WorkflowLoader)
    assert isinstance(data, dict), f"{path.name}: not a mapping"
    return data


def _events(workflow: dict[str, Any]) -> dict[str, Any]:
    on = workflow.get("on")
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    return on if isinstance(on, dict) else {}


def _steps(workflow: dict[str, Any]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    for job_id, job in (workflow.get("jobs") or {}).items():
        for index, step in enumerate((job or {}).get("steps") or []):
            yield job_id, index, step


# ── Layer 1: structure ──
WORKFLOW_KEYS = {"name", "run-name", "on", "permissions", "env", "defaults", "concurrency", "jobs"}
JOB_KEYS = {
    "name", "needs", "runs-on", "permissions", "environment", "concurrency", "outputs", "env", "defaults",
    "if", "steps", "timeout-minutes", "strategy", "continue-on-error", "container", "services", "uses",
    "with", "secrets",
}  # fmt: skip
STEP_KEYS = {"id", "if", "name", "uses", "run", "working-directory", "shell", "with", "env",
             "continue-on-error", "timeout-minutes"}  # fmt: skip
EVENTS = {
    "branch_protection_rule", "check_run", "check_suite", "create", "delete", "deployment",
    "deployment_status", "discussion", "discussion_comment", "fork", "gollum", "issue_comment", "issues",
    "label", "merge_group", "milestone", "page_build", "public", "pull_request", "pull_request_review",
    "pull_request_review_comment", "pull_request_target", "push", "registry_package", "release",
    "repository_dispatch", "schedule", "status", "watch", "workflow_call", "workflow_dispatch", "workflow_run",
}  # fmt: skip
PERMISSION_SCOPES = {
    "actions", "attestations", "checks", "contents", "deployments", "discussions", "id-token", "issues",
    "models", "packages", "pages", "pull-requests", "repository-projects", "security-events", "statuses",
}  # fmt: skip
CONTEXTS = {"github", "env", "vars", "secrets", "inputs", "matrix", "needs", "steps", "job", "jobs",
            "runner", "strategy"}  # fmt: skip
FUNCTIONS = {"contains", "startsWith", "endsWith", "format", "join", "toJSON", "fromJSON", "hashFiles",
             "success", "always", "cancelled", "failure"}  # fmt: skip
_EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.S)
_STRING_LITERAL = re.compile(r"'(?:[^']|'')*'")
_NAME = re.compile(r"(?<![\w.\-])([A-Za-z_][\w]*)((?:\.[A-Za-z_*][\w\-]*|\[[^\]]*\])*)(\s*\()?")
_CRON_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))


def _cron_problems(cron: str) -> list[str]:
    fields = cron.split()
    if len(fields) != 5:
        return [f"cron {cron!r}: 5 fields expected, got {len(fields)}"]
    problems = []
    for text, (low, high) in zip(fields, _CRON_RANGES):
        for part in text.split(","):
            match = re.fullmatch(r"(\*|(\d+)(?:-(\d+))?)(?:/(\d+))?", part)
            numbers = [int(n) for n in (match.groups()[1:] if match else ()) if n is not None]
            if not match or any(not low <= n <= high for n in numbers[:2]) or (match.group(4) == "0"):
                problems.append(f"cron {cron!r}: bad field {part!r} (range {low}-{high})")
    return problems


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Every string in ``value`` (keys included, where GitHub forbids expressions anyway) with its path."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield f"{where}.{key}", str(key)
            yield from _strings(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{where}[{index}]")


def _expression_problems(text: str, where: str, known: dict[str, set[str] | None]) -> list[str]:
    """Unbalanced ``${{``, unknown contexts or functions, and properties that are not defined."""
    problems = []
    if text.count("${{") != len(_EXPRESSION.findall(text)):
        problems.append(f"{where}: unterminated ${{{{ expression")
    for body in _EXPRESSION.findall(text):
        code = _STRING_LITERAL.sub("''", body)
        for name, path, call in _NAME.findall(code):
            if call:
                if name not in FUNCTIONS:
                    problems.append(f"{where}: unknown function {name}() in ${{{{{body}}}}}")
                continue
            if name in {"true", "false", "null"} or re.fullmatch(r"\d+", name):
                continue
            if name not in CONTEXTS:
                problems.append(f"{where}: unknown context {name!r} in ${{{{{body}}}}}")
                continue
            allowed = known.get(name)
            first = path[1:].split(".")[0] if path.startswith(".") else None
            if allowed is not None and first and first != "*" and first not in allowed:
                problems.append(f"{where}: {name}.{first} is not defined (known: {', '.join(sorted(allowed)) or 'none'})")
    return problems


def _needs(job: dict[str, Any]) -> list[str]:
    needs = job.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)


def _matrix_keys(job: dict[str, Any]) -> set[str] | None:
    matrix = (job.get("strategy") or {}).get("matrix")
    if matrix is None:
        return set()
    if isinstance(matrix, str):  # a whole-matrix expression: keys unknown
        return None
    keys = {k for k in matrix if k not in {"include", "exclude"}}
    for extra in matrix.get("include") or []:
        if isinstance(extra, dict):
            keys |= set(extra)
    return keys


def _permission_problems(permissions: Any, where: str) -> list[str]:
    if permissions is None:
        return []
    if isinstance(permissions, str):
        return [] if permissions in {"read-all", "write-all"} else [f"{where}: bad permissions {permissions!r}"]
    if not isinstance(permissions, dict):
        return [f"{where}: permissions must be a mapping"]
    problems = [f"{where}: unknown permission scope {scope!r}" for scope in permissions if scope not in PERMISSION_SCOPES]
    problems += [f"{where}: permission {scope}: {value!r} is not read, write or none"
                 for scope, value in permissions.items() if value not in {"read", "write", "none"}]  # fmt: skip
    return problems


def _script_for_bash(script: str) -> str:
    return _EXPRESSION.sub("EXPR", script)


def _bash_syntax_problems(script: str, where: str) -> list[str]:
    result = subprocess.run([BASH, "-n"], input=_script_for_bash(script), capture_output=True, text=True, check=False)
    return [] if result.returncode == 0 else [f"{where}: bash -n: {result.stderr.strip()}"]


def structure_problems(workflow: dict[str, Any], name: str) -> list[str]:
    """What GitHub (or actionlint) would reject in ``workflow``; empty when it looks valid."""
    problems = [f"{name}: unknown top-level key {key!r}" for key in workflow if key not in WORKFLOW_KEYS]
    if "on" not in workflow:
        problems.append(f"{name}: no 'on' (triggers)")
    events = _events(workflow)
    problems += [f"{name}: unknown event {event!r}" for event in events if event not in EVENTS]
    for entry in (events.get("schedule") or []) if isinstance(events.get("schedule"), list) else []:
        problems += [f"{name}: {p}" for p in _cron_problems(str((entry or {}).get("cron", "")))]
    dispatch = events.get("workflow_dispatch") or {}
    inputs = (dispatch.get("inputs") or {}) if isinstance(dispatch, dict) else {}
    for input_name, spec in inputs.items():
        spec = spec or {}
        unknown = set(spec) - {"description", "required", "default", "type", "options"}
        if unknown:
            problems.append(f"{name}: input {input_name}: unknown keys {sorted(unknown)}")
        kind = spec.get("type", "string")
        if kind not in {"boolean", "choice", "number", "environment", "string"}:
            problems.append(f"{name}: input {input_name}: unknown type {kind!r}")
        default = spec.get("default")
        if kind == "boolean" and default is not None and not isinstance(default, bool):
            problems.append(f"{name}: input {input_name}: boolean default must be true or false, not {default!r}")
        if kind == "number" and default is not None and not isinstance(default, int | float):
            problems.append(f"{name}: input {input_name}: number default {default!r}")
        if kind == "choice" and default is not None and default not in (spec.get("options") or []):
            problems.append(f"{name}: input {input_name}: default {default!r} is not an option")
    problems += _permission_problems(workflow.get("permissions"), f"{name}: permissions")
    workflow_env = set(workflow.get("env") or {})

    jobs = workflow.get("jobs")
    if not isinstance(jobs, dict) or not jobs:
        return [*problems, f"{name}: no jobs"]
    for job_id, job in jobs.items():
        where = f"{name}: job {job_id}"
        if not isinstance(job, dict):
            problems.append(f"{where}: not a mapping")
            continue
        problems += [f"{where}: unknown key {key!r}" for key in job if key not in JOB_KEYS]
        if "uses" not in job and "runs-on" not in job:
            problems.append(f"{where}: no runs-on")
        if "uses" not in job and not job.get("steps"):
            problems.append(f"{where}: no steps")
        needs = _needs(job)
        problems += [f"{where}: needs {n!r}, which is not a job" for n in needs if n not in jobs]
        problems += _permission_problems(job.get("permissions"), f"{where}: permissions")
        step_ids = {s.get("id") for s in job.get("steps") or [] if isinstance(s, dict) and s.get("id")}
        job_env = workflow_env | set(job.get("env") or {})
        known_job = {
            "inputs": set(inputs) if inputs else None,
            "matrix": _matrix_keys(job),
            "needs": set(needs),
            "steps": step_ids,
        }
        for key in ("if", "name", "runs-on", "outputs", "env", "strategy", "concurrency", "with", "timeout-minutes"):
            for path, text in _strings(job.get(key), f"{where}.{key}"):
                # env: only the workflow's; steps: not in a job's name/runs-on/strategy (only in outputs)
                known = {**known_job, "env": workflow_env, "steps": step_ids if key == "outputs" else set()}
                problems += _expression_problems(text, path, known)
        if isinstance(job.get("if"), str) and "${{" not in job["if"]:
            problems += _expression_problems("${{ " + job["if"] + " }}", f"{where}.if", {**known_job, "env": workflow_env})
        seen_ids: set[str] = set()
        for index, step in enumerate(job.get("steps") or []):
            label = f"{where} step {index + 1}" + (f" ({step.get('name') or step.get('id') or step.get('uses') or 'run'})" if isinstance(step, dict) else "")
            if not isinstance(step, dict):
                problems.append(f"{label}: not a mapping")
                continue
            problems += [f"{label}: unknown key {key!r}" for key in step if key not in STEP_KEYS]
            if ("uses" in step) == ("run" in step):
                problems.append(f"{label}: needs exactly one of 'uses' and 'run'")
            if step.get("id"):
                if step["id"] in seen_ids:
                    problems.append(f"{label}: duplicate step id {step['id']!r}")
                seen_ids.add(step["id"])
            known = {**known_job, "env": job_env | set(step.get("env") or {}), "steps": set(seen_ids) - {step.get("id")}}
            for path, text in _strings(step, label):
                problems += _expression_problems(text, path, known)
            if isinstance(step.get("if"), str) and "${{" not in step["if"]:
                problems += _expression_problems("${{ " + step["if"] + " }}", f"{label}.if", known)
            if isinstance(step.get("run"), str):
                problems += _bash_syntax_problems(step["run"], label)
    problems += _cycle_problems(jobs, name)
    return problems


def _cycle_problems(jobs: dict[str, Any], name: str) -> list[str]:
    state: dict[str, int] = {}

    def visit(job_id: str) -> bool:
        if state.get(job_id) == 1:
            return True
        if state.get(job_id) == 2 or job_id not in jobs:
            return False
        state[job_id] = 1
        cyclic = any(visit(n) for n in _needs(jobs[job_id] or {}))
        state[job_id] = 2
        return cyclic

    return [f"{name}: jobs' needs form a cycle through {j!r}" for j in jobs if visit(j)][:1]


@pytest.fixture(scope="module")
def workflows() -> dict[str, dict[str, Any]]:
    return {path.name: load_workflow(path) for path in WORKFLOWS}


def test_the_workflows_exist():
    assert {"ci.yml", "audit.yml", "sweep.yml", "watch.yml", "pin-check.yml", "pin-check-publish.yml"} <= {
        p.name for p in WORKFLOWS}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_structure(path: Path):
    assert structure_problems(load_workflow(path), path.name) == []


BROKEN_WORKFLOW = """\
name: broken
on:
  push:
  pull_requests:
jobs:
  test:
    runs-on: ubuntu-latest
    needs: build
    timeout-minutes: 5
    steps:
      - uses: actions/checkout@v5
        run: echo both
      - run: echo ${{ matrix.python }}
      - run: |
          if [ -n "$X" ]; then
            echo unterminated
"""


def test_structure_check_rejects_a_broken_workflow(tmp_path: Path):
    path = tmp_path / "broken.yml"
    path.write_text(BROKEN_WORKFLOW)
    problems = "\n".join(structure_problems(load_workflow(path), path.name))
    assert "unknown event 'pull_requests'" in problems
    assert "needs 'build', which is not a job" in problems
    assert "exactly one of 'uses' and 'run'" in problems
    assert "matrix.python is not defined" in problems
    assert "bash -n" in problems


def test_structure_check_rejects_bad_yaml_and_values(tmp_path: Path):
    duplicate = tmp_path / "duplicate.yml"
    duplicate.write_text("on: push\njobs:\n  a:\n    runs-on: x\n    runs-on: y\n    steps: [{run: 'true'}]\n")
    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate key"):
        load_workflow(duplicate)
    workflow = {
        "on": {"schedule": [{"cron": "61 * * * *"}],
               "workflow_dispatch": {"inputs": {"dry-run": {"type": "boolean", "default": "yes"}}}},
        "permissions": {"contents": "admin"},
        "jobs": {"a": {"runs-on": "x", "steps": [{"run": "echo ${{ inputs.nope }} ${{ secret.X }}"}]}},
    }  # fmt: skip
    problems = "\n".join(structure_problems(workflow, "w.yml"))
    assert "bad field '61'" in problems
    assert "boolean default must be true or false" in problems
    assert "'admin' is not read, write or none" in problems
    assert "inputs.nope is not defined" in problems
    assert "unknown context 'secret'" in problems


def test_on_is_read_as_a_key_not_a_boolean(workflows):
    for name, workflow in workflows.items():
        assert "on" in workflow and True not in workflow, name


# ── Layer 2: actionlint, when installed ──
def find_actionlint() -> str | None:
    named = os.environ.get("ACTIONLINT")
    if named:
        return named
    beside_python = Path(sys.executable).parent / "actionlint"
    return str(beside_python) if beside_python.is_file() else shutil.which("actionlint")


def run_actionlint(*paths: Path) -> subprocess.CompletedProcess[str]:
    binary = find_actionlint()
    if binary is None:
        pytest.skip("actionlint is not installed (docs/github-actions.md); the structural checks still ran")
    return subprocess.run([binary, "-no-color", *map(str, paths)], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, check=False)  # fmt: skip


def test_actionlint_accepts_the_workflows():
    result = run_actionlint(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_rejects_a_broken_workflow(tmp_path: Path):
    path = tmp_path / "broken.yml"
    path.write_text(BROKEN_WORKFLOW)
    result = run_actionlint(path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert '"build"' in result.stdout and "matrix" in result.stdout, result.stdout


# ── Layer 3: policy ──
_PINNED = re.compile(r"^[\w.-]+/[\w.-]+(?:/[\w./-]+)?@(?:v\d+|[0-9a-f]{40})$")


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_job_has_a_timeout(path: Path):
    jobs = load_workflow(path)["jobs"]
    missing = [job_id for job_id, job in jobs.items() if "uses" not in job and "timeout-minutes" not in job]
    assert missing == [], f"{path.name}: jobs without timeout-minutes: {missing}"
    for job_id, index, step in _steps(load_workflow(path)):
        limit = step.get("timeout-minutes")
        if isinstance(limit, int):
            assert limit < jobs[job_id]["timeout-minutes"], f"{path.name}: {job_id} step {index + 1} outlasts its job"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_pull_request_target(path: Path):
    assert "pull_request_target" not in _events(load_workflow(path))
    assert "pull_request_target" not in path.read_text(), "not even in a comment or expression"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_actions_are_pinned_to_a_major_version_or_a_sha(path: Path):
    workflow = load_workflow(path)
    uses = [step["uses"] for _, _, step in _steps(workflow) if "uses" in step]
    uses += [job["uses"] for job in workflow["jobs"].values() if "uses" in job]
    unpinned = [u for u in uses if not u.startswith("./") and not _PINNED.match(u)]
    assert unpinned == [], f"{path.name}: pin these to @vN or a 40-character SHA: {unpinned}"


def _writes(permissions: Any) -> set[str]:
    if permissions == "write-all":
        return {"write-all"}
    return {scope for scope, value in (permissions or {}).items() if value == "write"} if isinstance(permissions, dict) else set()


# The only jobs that may write, and exactly what each may write. None of them runs a new release or a PR's code.
PUBLISHERS = {
    ("audit.yml", "publish"): {"contents", "pull-requests", "issues"},
    ("watch.yml", "publish"): {"contents", "pull-requests", "issues"},
    ("pin-check-publish.yml", "publish"): {"checks", "issues"},
}


def test_write_permissions_only_in_the_publish_jobs(workflows):
    for name, workflow in workflows.items():
        assert workflow.get("permissions") == {"contents": "read"}, f"{name}: top-level permissions must be contents: read"
        for job_id, job in workflow["jobs"].items():
            writes = _writes(job.get("permissions"))
            assert writes == PUBLISHERS.get((name, job_id), set()), f"{name}: job {job_id} writes {writes}"
    assert set(workflows["audit.yml"]["jobs"]["publish"]["permissions"]) == PUBLISHERS["audit.yml", "publish"]
    assert set(workflows["watch.yml"]["jobs"]["publish"]["permissions"]) == PUBLISHERS["watch.yml", "publish"]
    assert _writes(workflows["audit.yml"]["jobs"]["audit"].get("permissions")) == set()


def test_the_watch_job_that_installs_releases_cannot_write_and_publish_never_audits(workflows):
    watch = workflows["watch.yml"]
    assert _writes(watch["jobs"]["watch"]["permissions"]) == set()
    assert watch["on"]["schedule"] and watch["concurrency"] == {"group": "exportbot-watch", "cancel-in-progress": False}
    scripts = [step.get("run", "") for _, _, step in _steps(watch) if "run" in step]
    assert any("exportbot watch --dry-run --json watch.json" in s for s in scripts)
    publish = [step.get("run", "") for job, _, step in _steps(watch) if job == "publish" and "run" in step]
    assert any("exportbot watch --publish" in s for s in publish)
    assert not any("exportbot watch --dry-run --json" in s or "--candidate" in s for s in publish)


def test_the_pin_check_runs_untrusted_code_with_no_secret_and_publishes_from_the_base(workflows):
    """Trust model (docs/github-actions.md): the job running the PR's code holds no secret and no write
    permission; the job that writes runs on workflow_run with the default branch's code, reads the artifact as
    input and takes the commit from the event."""
    check, publish = workflows["pin-check.yml"], workflows["pin-check-publish.yml"]
    assert set(_events(check)) == {"pull_request"} and check["jobs"]["check"]["permissions"] == {"contents": "read"}
    assert "secrets." not in (WORKFLOW_DIR / "pin-check.yml").read_text()
    assert "workflow_run" in _events(publish)
    for _, _, step in _steps(publish):
        if step.get("uses", "").startswith("actions/checkout"):
            assert "ref" not in (step.get("with") or {}), "publish checks out the default branch only"
    script = next(step["run"] for _, _, step in _steps(publish) if "pin-check publish" in step.get("run", ""))
    assert '--head-sha "$HEAD_SHA"' in script
    head = next(step["env"]["HEAD_SHA"] for _, _, step in _steps(publish) if "pin-check publish" in step.get("run", ""))
    assert head == "${{ github.event.workflow_run.head_sha }}"


def test_audit_runs_one_at_a_time_and_is_never_cancelled(workflows):
    assert workflows["audit.yml"]["concurrency"] == {"group": "exportbot-audit", "cancel-in-progress": False}


def test_ci_cancels_only_superseded_pull_request_runs(workflows):
    concurrency = workflows["ci.yml"]["concurrency"]
    assert "github.event.pull_request.number" in concurrency["group"]
    assert concurrency["cancel-in-progress"] == "${{ github.event_name == 'pull_request' }}"


def test_no_expression_is_expanded_inside_a_script(workflows):
    """Values reach scripts through env:, so an input can never become shell code (script injection)."""
    for name, workflow in workflows.items():
        for job_id, index, step in _steps(workflow):
            assert "${{" not in step.get("run", ""), f"{name}: {job_id} step {index + 1}: pass it through env:"


def test_no_secret_is_echoed(workflows):
    for name, workflow in workflows.items():
        for job_id, index, step in _steps(workflow):
            for line in step.get("run", "").splitlines():
                if re.search(r"\b(echo|printf|cat)\b", line):
                    assert not re.search(r"TOKEN|PRIVATE_KEY|SECRET", line), f"{name}: {job_id} step {index + 1}: {line}"
            for key, value in (step.get("env") or {}).items():
                if "secrets." in str(value) or "token" in str(value):
                    assert key in {"GITHUB_TOKEN", "GH_TOKEN"}, f"{name}: {job_id}: secret in env {key}"


def test_ci_runs_what_ci_run_runs(workflows):
    """Every command of .ci/run (after the setup lines) is a step of ci.yml, and ci.yml is offline."""
    ci = workflows["ci.yml"]
    commands = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip().startswith(("scripts/", ".venv/bin/"))]  # fmt: skip
    scripts = "\n".join(step.get("run", "") for _, _, step in _steps(ci))
    assert commands and [c for c in commands if c not in scripts] == []
    assert ci["env"]["HF_HUB_OFFLINE"] == "1"
    assert set(_events(ci)) == {"push", "pull_request"}
    setup = next(step for _, _, step in _steps(ci) if step.get("uses", "").startswith("actions/setup-python@"))
    assert str(setup["with"]["python-version"]) == "3.11" and setup["with"]["cache"] == "pip"
    assert set(setup["with"]["cache-dependency-path"].split()) == {"constraints.txt", "pyproject.toml"}


def test_audit_triggers_and_token(workflows):
    audit = workflows["audit.yml"]
    events = _events(audit)
    assert events["push"]["paths"] == ["constraints.txt"]
    assert events["schedule"] and set(events["workflow_dispatch"]["inputs"]) == {"dry-run", "candidate", "entry"}
    assert events["workflow_dispatch"]["inputs"]["dry-run"] == {**events["workflow_dispatch"]["inputs"]["dry-run"],
                                                                "type": "boolean", "default": True}  # fmt: skip
    publish = audit["jobs"]["publish"]
    assert publish["needs"] == "audit"
    assert publish["if"] == (  # a --candidate run is never published
        "${{ !inputs.candidate && (needs.audit.outputs.exit-code == '0' || needs.audit.outputs.exit-code == '3') }}"
    )
    token = next(s for s in publish["steps"] if s.get("uses", "").startswith("actions/create-github-app-token@"))
    assert token["if"] == "vars.EXPORTBOT_APP_ID != ''"
    assert token["with"]["private-key"] == "${{ secrets.EXPORTBOT_APP_PRIVATE_KEY }}"
    pr_step = next(s for s in publish["steps"] if "exportbot pr" in s.get("run", ""))
    assert pr_step["env"]["GITHUB_TOKEN"] == "${{ steps.app-token.outputs.token || github.token }}"
    # The App's key never reaches the job that runs exports.
    assert "secrets." not in json.dumps(audit["jobs"]["audit"])


def test_sweep_matrix(workflows):
    sweep = workflows["sweep.yml"]
    job = sweep["jobs"]["sweep"]
    assert job["strategy"]["fail-fast"] is False
    assert set(job["strategy"]["matrix"]) == {"shard", "backend"}
    merge = sweep["jobs"]["merge"]
    assert set(merge["needs"]) >= {"sweep"} and "always()" in merge["if"]
    assert set(_events(sweep)["workflow_dispatch"]["inputs"]) == {"backends", "shards"}


# ── Layer 4: the exportbot command lines exist in the CLI ──
@dataclass(frozen=True)
class Invocation:
    where: str
    args: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.where}: exportbot {' '.join(self.args)}"


_CONDITIONAL = re.compile(r"^\$\{\w+:\+")  # ${NAME:+--option "$NAME"}: the option when NAME is set
_OPERATOR = set("();|&<>")


def invocations_in_script(script: str, where: str) -> list[Invocation]:
    """Each ``exportbot`` (or ``.venv/bin/exportbot``) command line in a shell script, with its arguments."""
    found = []
    for line in script.replace("\\\n", " ").splitlines():
        if "exportbot" not in line:
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError:  # an unbalanced quote: not a line we can read, so not one we can check
            continue
        for start, token in enumerate(tokens):
            if token == "exportbot" or token.endswith("/exportbot"):
                args, conditional = [], False
                for arg in tokens[start + 1 :]:
                    if set(arg) <= _OPERATOR:
                        break
                    if _CONDITIONAL.match(arg):
                        arg, conditional = _CONDITIONAL.sub("", arg), True
                    if conditional and arg.endswith("}"):
                        arg, conditional = arg[:-1], False
                    args.append(arg)
                found.append(Invocation(where, tuple(args)))
    return found


def _workflow_invocations() -> list[Invocation]:
    found = []
    for path in WORKFLOWS:
        for job_id, index, step in _steps(load_workflow(path)):
            found += invocations_in_script(step.get("run", ""), f"{path.name} {job_id}/{step.get('name') or index + 1}")
    return found


def _docs_invocations() -> list[Invocation]:
    if not DOCS.is_file():
        return []
    blocks = re.findall(r"```(?:bash|sh|shell|console)\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    return [inv for block in blocks for inv in invocations_in_script(block.replace("$ ", ""), DOCS.name)]


def cli_problems(invocation: Invocation) -> list[str]:
    """What is not registered: the command, an option, or a literal value outside a Choice."""
    import click

    from bot.cli.main import main

    command: click.Command = main
    path = ["exportbot"]
    args = list(invocation.args)
    problems = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-") and arg != "-":
            name, _, inline = arg.partition("=")
            options = {opt: p for p in command.params if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts)}
            options.update(dict.fromkeys(("--help", "-h")))
            if name not in options:
                problems.append(f"`{' '.join(path)}` has no option {name}")
            else:
                param = options[name]
                if param is not None and not param.is_flag and not param.count:
                    value = inline if inline else (args[i + 1] if i + 1 < len(args) else "")
                    i += 0 if inline else 1
                    if isinstance(param.type, click.Choice) and "$" not in value and value not in param.type.choices:
                        problems.append(f"`{' '.join(path)} {name}`: {value!r} is not one of {list(param.type.choices)}")
        elif isinstance(command, click.Group):
            sub = command.commands.get(arg)
            if sub is None:
                problems.append(f"`{' '.join(path)}` has no command {arg!r} (registered: {', '.join(sorted(command.commands))})")
                return problems
            command = sub
            path.append(arg)
        i += 1
    if isinstance(command, click.Group) and not problems:
        problems.append(f"`{' '.join(path)}` is a group: name one of its commands")
    return problems


WORKFLOW_INVOCATIONS = _workflow_invocations()


def test_the_workflows_run_exportbot():
    commands = {inv.args[0] for inv in WORKFLOW_INVOCATIONS if inv.args}
    assert {"lint", "audit", "pr", "sweep"} <= commands


@pytest.mark.parametrize("invocation", WORKFLOW_INVOCATIONS, ids=str)
def test_workflow_command_exists_in_the_cli(invocation: Invocation):
    assert cli_problems(invocation) == [], str(invocation)


@pytest.mark.parametrize("invocation", _docs_invocations() or [pytest.param(None, marks=pytest.mark.skip("no docs"))], ids=str)
def test_documented_command_exists_in_the_cli(invocation: Invocation):
    assert cli_problems(invocation) == [], str(invocation)


def test_cli_check_catches_unknown_commands_and_options():
    assert cli_problems(Invocation("t", ("audit", "--json", "a.json", "--update-verification"))) == []
    assert cli_problems(Invocation("t", ("--debug", "export", "BertModel", "--backend", "onnx"))) == []
    assert "no command 'nope'" in cli_problems(Invocation("t", ("nope",)))[0]
    assert "no option --nope" in cli_problems(Invocation("t", ("audit", "--nope")))[0]
    assert "not one of" in cli_problems(Invocation("t", ("export", "X", "--backend", "tflite")))[0]
    assert cli_problems(Invocation("t", ("export", "X", "--backend", "$BACKEND"))) == []


def test_invocations_are_read_from_scripts():
    script = 'code=0\nexportbot audit --json a.json \\\n  ${CANDIDATE:+--candidate "$CANDIDATE"} || code=$?\n' \
             'echo "::notice title=exportbot audit::x"  # exportbot pr in a comment\n.venv/bin/exportbot lint\n'
    assert [inv.args for inv in invocations_in_script(script, "t")] == [
        ("audit", "--json", "a.json", "--candidate", "$CANDIDATE"), ("lint",),
    ]  # fmt: skip


# ── The shell logic of the steps, with a stub exportbot ──
def _step(workflow: str, job: str, predicate) -> dict[str, Any]:
    return next(s for s in load_workflow(WORKFLOW_DIR / workflow)["jobs"][job]["steps"] if predicate(s))


def _run_step(step: dict[str, Any], tmp_path: Path, env: dict[str, str], stub_exit: int = 0) -> tuple[int, str, dict[str, str]]:
    """Run a step's script as GitHub would (bash -eo pipefail), exportbot replaced by a stub recording its args."""
    stub_dir = tmp_path / "bin"
    stub_dir.mkdir(exist_ok=True)
    stub = stub_dir / "exportbot"
    stub.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$*" >> "{tmp_path}/calls"\nexit {stub_exit}\n')
    stub.chmod(0o755)
    output, summary = tmp_path / "output", tmp_path / "summary"
    output.write_text("")
    full_env = {"PATH": f"{stub_dir}{os.pathsep}{os.environ['PATH']}", "GITHUB_OUTPUT": str(output),
                "GITHUB_STEP_SUMMARY": str(summary), "STATE_DIR": str(tmp_path / "state"), **env}  # fmt: skip
    result = subprocess.run([BASH, "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], env=full_env,
                            cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    calls = (tmp_path / "calls").read_text() if (tmp_path / "calls").exists() else ""
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    return result.returncode, calls, outputs


@pytest.mark.parametrize(("audit_exit", "job_exit"), [(0, 0), (3, 0), (4, 0), (5, 0), (1, 1), (2, 2)])
def test_audit_exit_codes_3_4_and_5_do_not_fail_the_job(tmp_path: Path, audit_exit: int, job_exit: int):
    step = _step("audit.yml", "audit", lambda s: s.get("id") == "audit")
    code, calls, outputs = _run_step(step, tmp_path, {"CANDIDATE": "", "ENTRY": ""}, stub_exit=audit_exit)
    assert code == job_exit
    assert outputs["exit-code"] == str(audit_exit)
    assert calls.startswith("audit --json audit.json --markdown summary.md --update-verification")
    assert "--candidate" not in calls and "--entry" not in calls


def test_audit_passes_dispatch_inputs_as_options(tmp_path: Path):
    step = _step("audit.yml", "audit", lambda s: s.get("id") == "audit")
    _, calls, _ = _run_step(step, tmp_path, {"CANDIDATE": "onnx==1.24.0", "ENTRY": "t5-cast-folding"})
    assert calls.split()[-4:] == ["--candidate", "onnx==1.24.0", "--entry", "t5-cast-folding"]
    assert "--update-verification" not in calls  # a candidate is not pinned: nothing is recorded


@pytest.mark.parametrize(("dry_run", "applies"), [("true", False), ("false", True), ("", True)])
def test_publish_applies_unless_dry_run(tmp_path: Path, dry_run: str, applies: bool):
    step = _step("audit.yml", "publish", lambda s: "exportbot pr" in s.get("run", ""))
    code, calls, _ = _run_step(step, tmp_path, {"DRY_RUN": dry_run, "AUDIT_EXIT": "3"})
    assert code == 0
    assert calls.split()[:3] == ["pr", "--report", "audit-report/audit.json"]
    # Explicit either way: without a flag, exportbot pr posts whenever CI=true and a token is set.
    assert calls.split()[3:] == (["--apply"] if applies else ["--dry-run"])


def test_pin_diff_names_the_moved_packages(tmp_path: Path):
    step = _step("audit.yml", "audit", lambda s: s.get("name") == "Packages whose pins moved")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "constraints.txt").write_text("# pins\ntorch==2.13.0\nonnx==1.23.2\nclick==8.5.1\n")
    subprocess.run([*git, "commit", "-qam", "a", "--allow-empty"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "constraints.txt"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "b"], cwd=tmp_path, check=True)
    before = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
    (tmp_path / "constraints.txt").write_text("# pins, moved\ntorch==2.13.0\nonnx==1.24.0\nclick==8.5.1\nrich==14.3.4\n")
    subprocess.run([*git, "commit", "-qam", "c"], cwd=tmp_path, check=True)
    after = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
    code, _, _ = _run_step(step, tmp_path, {"BEFORE": before, "GITHUB_SHA": after})
    assert code == 0
    assert "onnx rich (the entries" in (tmp_path / "summary").read_text()
    code, _, _ = _run_step(step, tmp_path, {"BEFORE": after, "GITHUB_SHA": after})
    assert code == 0 and "none (the entries" in (tmp_path / "summary").read_text()
    code, _, _ = _run_step(step, tmp_path, {"BEFORE": "0" * 40, "GITHUB_SHA": after})
    assert code == 0


@pytest.mark.parametrize(
    ("backends", "shards", "expected"),
    [("onnx executorch", "8", {"backends": '["onnx","executorch"]', "shards": "[1,2,3,4,5,6,7,8]", "count": "8"}),
     ("dynamo", "1", {"backends": '["dynamo"]', "shards": "[1]", "count": "1"}),
     ("tflite", "8", None), ("onnx", "0", None), ("onnx", "x", None), ("", "8", None)],
)  # fmt: skip
def test_sweep_plan(tmp_path: Path, backends: str, shards: str, expected: dict[str, str] | None):
    step = _step("sweep.yml", "plan", lambda s: s.get("id") == "plan")
    code, _, outputs = _run_step(step, tmp_path, {"BACKENDS": backends, "SHARDS": shards})
    if expected is None:
        assert code == 1
    else:
        assert code == 0 and outputs == expected
        assert json.loads(outputs["backends"]) and json.loads(outputs["shards"])
