"""What ``exportbot watch`` costs on the real example: requests per run, environment build, re-runs, minutes.

The example of tests/test_watch_real.py: a local package index on 127.0.0.1 with the real onnxscript 0.7.0 and
0.7.1 wheels, the real-release ledger pinned at 0.7.0 (its Dinov2 entry recorded failing there), the fake GitHub
through the real PyGithub client. Measured, each in its own ``python -m bot`` process:

* the first watch run (finds 0.7.1, builds the environments from scratch: the one at the pins and the candidate's,
  both layered on .venv; audits; opens the bump PR): requests to the index
  (``pip index versions`` runs, HTTP requests the index logged) and to GitHub (reads, writes), the environment
  build and audit seconds, export processes, minutes for the candidate;
* the second run (nothing new): requests and seconds, with no audit;
* the baseline in the same script: ``exportbot audit --candidate onnxscript==0.7.1`` of the same entry with the
  same regression sample and its own fresh environment, i.e. the candidate audit alone; the watch's overhead
  (the index, the GitHub reads and writes, the environment at the pins) is the ratio of the two.

Run: ``.venv/bin/python benchmarks/bench_watch.py`` (about 2 minutes on 2 cores; the wheels are downloaded once
into .exportbot-cache/index-wheels); the figures are printed and saved to ``benchmarks/results/watch.json``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fake_github import FakeGitHub  # noqa: E402
from package_index import PackageIndex  # noqa: E402
from test_watch_real import (  # noqa: E402
    ENTRY,
    GITHUB_REPO,
    SNAPSHOT,
    bot,
    index_env,
    real_checkout,
    real_index,
)

RESULT = ROOT / "benchmarks" / "results" / "watch.json"


def github_requests(server: FakeGitHub, since: int = 0) -> dict[str, int]:
    logged = server.requests[since:]
    return {"reads": sum(1 for r in logged if r.method == "GET"), "writes": sum(1 for r in logged if r.method != "GET")}


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-watch-") as scratch:
        work = Path(scratch)
        folder = real_index(work)
        checkout, pin_text = real_checkout(work, "0.7.0")
        cache = work / "venvs"  # fresh: every environment is built, as on a CI runner with a warm pip cache
        with PackageIndex(folder) as index, FakeGitHub() as github:
            env = index_env(index)
            common = ["--registry", str(checkout / "registry"), "--pins", str(checkout / "constraints.txt"),
                      "--tracker", str(SNAPSHOT), "--cache-dir", str(cache), "--timeout", "900"]  # fmt: skip
            sample = ["--regression-sample", "1", "--regression-classes", str(checkout / "classes.txt")]
            done, _ = bot("audit", *common, "--candidate", "onnxscript==0.7.0", "--entry", ENTRY, "--runs", "1",
                          "--update-verification", "--regression-sample", "0", env=env, cwd=checkout)  # fmt: skip
            assert done.returncode == 0, done.stderr[-2000:]
            github.add_repo(GITHUB_REPO, files={"constraints.txt": pin_text,
                                                **{f"registry/{p.name}": p.read_text()
                                                   for p in (checkout / "registry").glob("*.toml")}})  # fmt: skip
            watch = ["watch", *common, "--group", "onnxscript", "--no-workarounds", *sample, "--github-url", github.url,
                     "--config", str(checkout / "pyproject.toml"), "--apply"]  # fmt: skip

            index.requests.clear()
            done, first_seconds = bot(*watch, "--json", str(work / "first.json"), env=env, cwd=checkout)
            assert done.returncode == 0, done.stderr[-2000:]
            first = json.loads((work / "first.json").read_text())
            [group] = first["groups"]
            first_github, first_index = github_requests(github), len(index.requests)

            since, index.requests[:] = len(github.requests), []
            done, second_seconds = bot(*watch, "--json", str(work / "second.json"), env=env, cwd=checkout)
            assert done.returncode == 0 and "already proposes these versions" in done.stderr, done.stderr[-2000:]
            second_github, second_index = github_requests(github, since), len(index.requests)

            fresh = [*common[:-4], "--cache-dir", str(work / "venvs-baseline"), *common[-2:]]  # built again, as the watch's
            done, baseline_seconds = bot("audit", *fresh, "--candidate", "onnxscript==0.7.1", "--entry", ENTRY,
                                         "--runs", "1", *sample, "--json", str(work / "baseline.json"),
                                         env=env, cwd=checkout)  # fmt: skip
            baseline = json.loads((work / "baseline.json").read_text())
            assert [e["verdict"] for e in baseline["entries"]] == ["removable"], done.stderr[-2000:]

    candidate_seconds = group["environment_seconds"] + group["audit_seconds"]
    figures = {
        "example": "onnxscript 0.7.0 -> 0.7.1, ledger tests/real_releases (Dinov2 entry removable), 1 run, sample 1",
        "first_run": {
            "seconds": first_seconds, "pip_index_runs": first["index"]["pip_runs"],
            "index_http_requests_by_the_watch": first["index"]["http_requests"],
            "index_requests_logged (pip and installs included)": first_index, "github": first_github,
            "environment_build_seconds": group["environment_seconds"], "audit_seconds": group["audit_seconds"],
            "export_processes": group["export_processes"], "minutes_per_candidate": round(candidate_seconds / 60, 2),
        },
        "second_run_nothing_new": {"seconds": second_seconds, "index_requests_logged": second_index,
                                   "github": second_github, "export_processes": 0},
        "baseline_audit_candidate_seconds": baseline_seconds,
        "watch_over_candidate_audit": round(first_seconds / baseline_seconds, 2),
    }  # fmt: skip
    RESULT.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
