"""``exportbot watch`` end to end on a real release (slow): a local package index on 127.0.0.1 with the real wheels of
onnxscript 0.7.0 and 0.7.1, a test ledger pinned at 0.7.0 whose entry's reproducer fails there and passes at 0.7.1
(tests/real_releases: the Dinov2 antialiased-Resize bug, fixed by microsoft/onnxscript#2916), and the project's
fake GitHub through the real PyGithub client. Every command runs as the bot runs it: ``python -m bot ...`` in a
subprocess, building real layered environments from that index.

1. ``audit --candidate onnxscript==0.7.0 --update-verification`` records the entry failing at 0.7.0;
2. ``watch --apply`` finds 0.7.1, builds its environment, re-runs the entry (removable) and the regression sample,
   and opens ``exportbot/bump-onnxscript``: constraints.txt 0.7.0 → 0.7.1, the entry removed, its record dropped;
3. a second run makes no write (the open PR already proposes 0.7.1);
4. a maintainer closes the PR unmerged: the next run proposes nothing for 0.7.1;
5. the index gains 0.7.1.post1, a wheel built here from the real 0.7.1 with the optimizer raising (a release that
   breaks every optimized ONNX export): a draft PR titled with the regression, no removal.

The measured figures go to tests/real_releases/measured.json with ``EXPORTBOT_RECORD_MEASURED=1``; what a watch
run costs is measured by benchmarks/bench_watch.py. About 2 to 4 minutes on 2 cores.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from fake_github import FakeGitHub
from github import Auth, Github
from package_index import PackageIndex
from test_real_releases import record

from bot.audit.pins import constraints_with

REPO = Path(__file__).resolve().parents[1]
REGISTRY = REPO / "tests" / "real_releases" / "registry"
SNAPSHOT = REPO / "registry" / "upstream-snapshot.json"
WHEELS = REPO / ".exportbot-cache" / "index-wheels"  # the real wheels, downloaded once
ENTRY = "dinov2-registers-antialias-resize-onnx"
GITHUB_REPO = "acme/exportbot"
BRANCH = "exportbot/bump-onnxscript"


def real_wheel(version: str, name: str = "onnxscript") -> Path:
    """The real wheel of ``name==version`` from the configured index (PyPI), downloaded once."""
    pattern = f"{name}-{version}-py3-none-any.whl"
    found = sorted(WHEELS.glob(pattern))
    if found:
        return found[0]
    WHEELS.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(WHEELS),
                    f"{name}=={version}"], check=True, capture_output=True, timeout=600)  # fmt: skip
    return next(WHEELS.glob(pattern))


def broken_wheel(source: Path, folder: Path, version: str) -> Path:
    """``source`` rebuilt as ``version`` with ``optimize_ir`` raising: a release that breaks an export."""
    old_version = source.name.split("-")[1]
    target = folder / f"onnxscript-{version}-py3-none-any.whl"
    old_info, new_info = f"onnxscript-{old_version}.dist-info", f"onnxscript-{version}.dist-info"
    files: dict[str, bytes] = {}
    with zipfile.ZipFile(source) as wheel:
        for name in wheel.namelist():
            data = wheel.read(name)
            if name == "onnxscript/optimizer/_optimizer.py":
                data = data.replace(b"    \"\"\"Optimizes a model.", b"    raise RuntimeError(\"optimize_ir is broken in "
                                    b"this test build\")\n    \"\"\"Optimizes a model.", 1)  # fmt: skip
                assert b"broken in this test build" in data
            if name == f"{old_info}/METADATA":
                data = data.replace(f"Version: {old_version}".encode(), f"Version: {version}".encode(), 1)
            if not name.endswith("/RECORD"):
                files[name.replace(old_info, new_info)] = data
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([name, f"sha256={digest}", len(data)])
    writer.writerow([f"{new_info}/RECORD", "", ""])
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(f"{new_info}/RECORD", rows.getvalue())
    return target


def writes(server: FakeGitHub) -> int:
    return sum(1 for r in server.requests if r.method != "GET")


def bot(*args: str, env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bot", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=3600)  # fmt: skip
    return done, round(time.perf_counter() - started, 1)


def real_index(root: Path) -> Path:
    """A folder for the local index holding the real onnxscript 0.7.0 and 0.7.1 wheels."""
    folder = root / "index"
    folder.mkdir()
    for version in ("0.7.0", "0.7.1"):
        shutil.copy(real_wheel(version), folder)
    return folder


def index_env(index: PackageIndex) -> dict[str, str]:
    """The environment of every ``python -m bot`` run here: pip sees this index only (no pip.conf: no extra index,
    find-links or machine-wide constraint), offline hub, this repository on the path, no CI."""
    env = os.environ | {"PIP_INDEX_URL": index.url, "PIP_CONFIG_FILE": os.devnull, "HF_HUB_OFFLINE": "1",
                        "GITHUB_TOKEN": "ghp_FAKEtoken", "PYTHONPATH": str(REPO)}  # fmt: skip
    for name in ("PIP_FIND_LINKS", "CI"):
        env.pop(name, None)
    return env


def real_checkout(root: Path, onnxscript: str, config: str = "") -> tuple[Path, str]:
    """A checkout of the real-release ledger pinned at ``onnxscript`` (its pin text returned too), with a
    [tool.exportbot] naming the fake repository and the regression class list the tests sample."""
    checkout = root / "checkout"
    shutil.copytree(REGISTRY, checkout / "registry")
    pin_text = constraints_with((REPO / "constraints.txt").read_text(), "onnxscript", onnxscript)
    (checkout / "constraints.txt").write_text(pin_text)
    (checkout / "pyproject.toml").write_text(f'[tool.exportbot]\nrepository = "{GITHUB_REPO}"\nruns = 1\n{config}')
    (checkout / "classes.txt").write_text("BertModel onnx/static\n")
    return checkout, pin_text


@pytest.mark.slow
def test_watch_finds_a_real_release_and_proposes_the_bump_with_its_removal(tmp_path):
    folder = real_index(tmp_path)
    checkout, pin_text = real_checkout(tmp_path, "0.7.0", "min_release_age_days = 3\ndashboard = true\n")
    cache = REPO / ".exportbot-cache" / "venvs"
    with PackageIndex(folder) as index, FakeGitHub() as github:
        env = index_env(index)
        common = ["--registry", str(checkout / "registry"), "--pins", str(checkout / "constraints.txt"),
                  "--tracker", str(SNAPSHOT), "--cache-dir", str(cache)]  # fmt: skip

        # 1. The entry recorded failing at the old release (a non-pinned stack of the project's own .venv).
        done, old_seconds = bot("audit", *common, "--candidate", "onnxscript==0.7.0", "--entry", ENTRY, "--runs", "1",
                                "--update-verification", "--regression-sample", "0", "--timeout", "900",
                                "--json", str(tmp_path / "old.json"), env=env, cwd=checkout)  # fmt: skip
        old = json.loads((tmp_path / "old.json").read_text())
        [old_row] = [e for e in old["entries"] if e["id"] == ENTRY]
        assert old_row["verdict"] == "still-needed", (old_row, done.stderr[-2000:])
        verified = (checkout / "registry" / "verified.toml").read_text()
        assert 'onnxscript = "0.7.0"' in verified

        github.add_repo(GITHUB_REPO, files={
            "constraints.txt": pin_text, "pyproject.toml": (checkout / "pyproject.toml").read_text(),
            **{f"registry/{p.name}": p.read_text() for p in (checkout / "registry").glob("*.toml")},
        })  # fmt: skip
        dashboard_number = github.add_issue(GITHUB_REPO, "exportbot ledger dashboard", labels=("exportbot",),
                                            body="<!-- exportbot:dashboard -->\nUpdated in place by exportbot.\n\n"
                                                 "<!-- exportbot:dashboard-rows [] -->\n")  # fmt: skip
        repo = Github(base_url=github.url, auth=Auth.Token("ghp_FAKEtoken"), retry=None, seconds_between_requests=0,
                      seconds_between_writes=0).get_repo(GITHUB_REPO)  # fmt: skip
        watch = ["watch", *common, "--group", "onnxscript", "--no-workarounds", "--regression-sample", "1",
                 "--regression-classes", str(checkout / "classes.txt"), "--github-url", github.url,
                 "--config", str(checkout / "pyproject.toml"), "--timeout", "900", "--apply"]  # fmt: skip

        # 2. The release found, its environment built, the entry removable there: the bump PR.
        done, first_seconds = bot(*watch, "--json", str(tmp_path / "first.json"), env=env, cwd=checkout)
        assert done.returncode == 0, done.stderr[-3000:]
        first = json.loads((tmp_path / "first.json").read_text())
        [group] = first["groups"]
        [row] = group["report"]["entries"]
        assert (row["id"], row["verdict"]) == (ENTRY, "removable"), row["reasons"]
        [pull] = list(repo.get_pulls(state="open"))
        assert pull.head.ref == BRANCH and not pull.draft
        assert pull.title == "exportbot: bump onnxscript 0.7.0 → 0.7.1, removing 1 workaround"
        assert github.read_file(GITHUB_REPO, BRANCH, "constraints.txt") == pin_text.replace("onnxscript==0.7.0",
                                                                                            "onnxscript==0.7.1")
        assert ENTRY not in (github.read_file(GITHUB_REPO, BRANCH, "registry/export_skips.toml") or "")
        assert ENTRY not in (github.read_file(GITHUB_REPO, BRANCH, "registry/verified.toml") or "")
        assert f"exportbot export Dinov2WithRegistersModel --backend onnx --static --repro {ENTRY}" in pull.body
        dashboard = repo.get_issue(dashboard_number).body or ""
        assert "`onnxscript`: onnxscript 0.7.0 → 0.7.1: open" in dashboard and "1 removal(s)" in dashboard

        # 3. Nothing new: no audit, no write.
        before = writes(github)
        done, second_seconds = bot(*watch, env=env, cwd=checkout)
        assert done.returncode == 0 and "already proposes these versions" in done.stderr, done.stderr[-2000:]
        assert writes(github) == before

        # 4. A maintainer closes it unmerged: 0.7.1 is not proposed again.
        repo.get_pull(pull.number).edit(state="closed")
        before = writes(github)
        done, _ = bot(*watch, env=env, cwd=checkout)
        assert done.returncode == 0 and "closed unmerged: not proposed again" in done.stderr, done.stderr[-2000:]
        assert writes(github) == before

        # 5. A later release that breaks an export: a draft naming the regression, no removal.
        broken_wheel(real_wheel("0.7.1"), folder, "0.7.1.post1")
        done, broken_seconds = bot(*watch, "--json", str(tmp_path / "broken.json"), env=env, cwd=checkout)
        assert done.returncode == 0, done.stderr[-3000:]
        broken = json.loads((tmp_path / "broken.json").read_text())
        [pull] = list(repo.get_pulls(state="open"))
        assert pull.draft and pull.title == "exportbot: bump onnxscript 0.7.0 → 0.7.1.post1: 1 regression (draft)"
        assert "BertModel onnx/static" in pull.body and "optimize_ir is broken in this test build" in pull.body
        assert "### Removals this release allows (0)" in pull.body
        assert ENTRY in (github.read_file(GITHUB_REPO, BRANCH, "registry/export_skips.toml") or "")
        assert github.read_file(GITHUB_REPO, BRANCH, "constraints.txt") == pin_text.replace(
            "onnxscript==0.7.0", "onnxscript==0.7.1.post1")

    [broken_group] = broken["groups"]
    record("watch onnxscript 0.7.0 -> 0.7.1 (local index, fake GitHub)", {
        "entry": ENTRY, "verified_at": "onnxscript 0.7.0 (audit --candidate ... --update-verification)",
        "verdict_at_old": old_row["verdict"], "candidate": "onnxscript==0.7.1", "verdict_at_candidate": row["verdict"],
        "reasons_at_candidate": row["reasons"], "pr_title": group["pr"]["title"], "pr_removals": group["pr"]["removals"],
        "breaking_candidate": "onnxscript==0.7.1.post1 (0.7.1 with optimize_ir raising)",
        "breaking_pr_title": broken_group["pr"]["title"],
        "seconds": {"record_at_old": old_seconds, "first_watch": first_seconds, "second_watch": second_seconds,
                    "breaking_watch": broken_seconds},
    })  # fmt: skip


@pytest.mark.slow
def test_pin_check_of_someone_elses_move_runs_the_same_audit_and_posts_one_comment_and_check(tmp_path):
    """A Dependabot-style PR moving onnxscript 0.7.0 → 0.7.1: ``pin-check run`` (the untrusted job: the PR's
    checkout, the index only) audits it against the base's pins, ``pin-check publish`` (the trusted job) posts the
    sticky comment with the removal's commit to apply and a successful check run."""
    folder = real_index(tmp_path)
    checkout, _ = real_checkout(tmp_path, "0.7.1")
    base_text = constraints_with((REPO / "constraints.txt").read_text(), "onnxscript", "0.7.0")
    (tmp_path / "base-constraints.txt").write_text(base_text)
    stack = {"torch": "2.13.0", "transformers": "5.23.0", "onnx": "1.23.2", "onnxscript": "0.7.0", "onnxruntime": "1.32.0"}
    (checkout / "registry" / "verified.toml").write_text(  # what test 1's audit --candidate wrote at 0.7.0
        f'[{ENTRY}]\nverified_on = 2026-12-05\nverdict = "still-needed"\nupstream_state = "unknown"\n\n[{ENTRY}.versions]\n'
        + "".join(f'{k} = "{v}"\n' for k, v in stack.items()))  # fmt: skip
    with PackageIndex(folder) as index, FakeGitHub() as github:
        env = index_env(index)
        env.pop("GITHUB_TOKEN")  # the untrusted job has no token
        done, run_seconds = bot("pin-check", "run", "--base-pins", str(tmp_path / "base-constraints.txt"),
                                "--registry", str(checkout / "registry"), "--pins", str(checkout / "constraints.txt"),
                                "--tracker", str(SNAPSHOT), "--no-workarounds", "--regression-sample", "1",
                                "--regression-classes", str(checkout / "classes.txt"), "--timeout", "900",
                                "--config", str(checkout / "pyproject.toml"), "--out", str(tmp_path / "check.json"),
                                env=env, cwd=checkout)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads((tmp_path / "check.json").read_text())
        assert result["moves"] == {"onnxscript": ["0.7.0", "0.7.1"]} and result["removals"] == [ENTRY]
        assert result["regressions"] == [] and f'-id = "{ENTRY}"' in result["patch"]

        github.add_repo(GITHUB_REPO, files={"constraints.txt": base_text})
        number = github.add_pull(GITHUB_REPO, "Bump onnxscript from 0.7.0 to 0.7.1", head="dependabot/onnxscript",
                                 files={"constraints.txt": (checkout / "constraints.txt").read_text()})  # fmt: skip
        sha = github.branch_sha(GITHUB_REPO, "dependabot/onnxscript") or ""
        done, _ = bot("pin-check", "publish", "--result", str(tmp_path / "check.json"), "--pr", str(number),
                      "--head-sha", sha, "--repo", GITHUB_REPO, "--github-url", github.url, "--apply",
                      env=env | {"GITHUB_TOKEN": "ghp_FAKEtoken"}, cwd=checkout)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        [comment] = github.comments_of(GITHUB_REPO, number)
        assert f"Removals this move allows (1): `{ENTRY}`" in comment and "```diff" in comment
        [check] = github.check_runs_of(GITHUB_REPO, sha)
        assert check["conclusion"] == "success"
    record("pin-check onnxscript 0.7.0 -> 0.7.1 (Dependabot-style PR)", {
        "removals": result["removals"], "regressions": len(result["regressions"]), "check": check["conclusion"],
        "checked": result["checked"], "seconds": run_seconds,
    })  # fmt: skip
