"""Which auto-mapped classes the tiny factory can build and run: ``build_tiny`` plus one eager forward, per class.

Every class runs in a child forked from this warm process (torch and transformers imported once), in its own
process group under a memory cap and a timeout (``bot.run.worker.supervise``), so a segfault or a hang is a
record, not the end of the census. One JSON line per class is appended (and fsynced) to RESULTS; ``--resume``
skips the classes already there, so an interrupted census loses nothing.

    HF_HUB_OFFLINE=1 nice -n 19 python scripts/tiny_census.py --results sweeps/tiny-census.jsonl --resume
    python scripts/tiny_census.py --summary sweeps/tiny-census.jsonl     # counts and causes, no runs

Re-running classes after a builder fix appends their new lines to their own shard's file (later lines supersede):

    for i in 1 2 3 4 5 6 7 8; do python scripts/tiny_census.py --only fixed.txt --shard $i/8 \
        --results sweeps/tiny-census/shard-$i-of-8.jsonl; done

Statuses: ``ok`` (built and ran), ``build-error`` (config, model or sample inputs could not be made),
``forward-error`` (eager forward raised on the generated inputs), ``crashed``, ``timeout``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.run.worker import kill_group, preload, supervise
from bot.sweep.catalogue import enumerate_model_classes
from bot.sweep.reports import census_causes
from bot.sweep.results import ResultsWriter, repair_tail
from bot.sweep.tasks import select_classes

OK, BUILD_ERROR, FORWARD_ERROR, CRASHED, TIMEOUT = "ok", "build-error", "forward-error", "crashed", "timeout"


def census_one(name: str) -> dict[str, Any]:
    """Build ``name`` tiny and run one eager forward; the record says which step failed and how."""
    import torch

    from exporters.tiny import build_tiny

    started = time.perf_counter()
    step = BUILD_ERROR
    try:
        tiny = build_tiny(name)
        step = FORWARD_ERROR
        with torch.no_grad():
            tiny.model(**tiny.inputs)
        status, error, error_type = OK, None, None
    except Exception as exception:  # the record is the result: every failure is kept with its text
        status, error, error_type = step, str(exception)[:2000], type(exception).__name__
        where = traceback.extract_tb(exception.__traceback__)[-1]
        error = f"{error} [at {Path(where.filename).name}:{where.lineno} in {where.name}]"
    return {"model": name, "status": status, "error_type": error_type, "error": error,
            "seconds": round(time.perf_counter() - started, 3)}  # fmt: skip


def run_child(name: str, timeout: float, memory_gb: float) -> dict[str, Any]:
    """Fork a child for one class; its record comes back through a pipe, or the report says how it died."""
    read_end, write_end = os.pipe()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        code = 70
        try:
            os.setpgid(0, 0)
            os.close(read_end)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            limit = int(memory_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            with os.fdopen(write_end, "w") as pipe:
                pipe.write(json.dumps(census_one(name)))
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    try:
        report = supervise(pid, timeout, started)
    finally:
        kill_group(pid)
    with os.fdopen(read_end) as pipe:
        text = pipe.read()
    if text and not report.timed_out:
        return json.loads(text)
    status = TIMEOUT if report.timed_out else CRASHED
    return {"model": name, "status": status, "error_type": None, "seconds": report.wall_seconds,
            "error": f"no record (wait status {report.wait_status})"}  # fmt: skip


def read(path: Path) -> list[dict[str, Any]]:
    latest = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            latest[record["model"]] = record  # a rerun supersedes
    return [latest[name] for name in sorted(latest)]


def summary(path: Path, top: int) -> str:
    records = read(path)
    counts = Counter(r["status"] for r in records)
    lines = [f"{path}: {len(records)} classes, " + ", ".join(f"{s} {n}" for s, n in counts.most_common())]
    for key, models in census_causes(records)[:top]:
        lines.append(f"{len(models):4d}  {key[:160]}  e.g. {', '.join(models[:3])}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("sweeps/tiny-census.jsonl"))
    parser.add_argument("--resume", action="store_true", help="skip classes RESULTS already has")
    parser.add_argument("--only", type=Path, help="run the classes listed in this file (one per line; with --shard, that shard's only)")
    parser.add_argument("--shard", help="i/n, as `exportbot sweep run --shard`")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--memory-gb", type=float, default=6.0)
    parser.add_argument("--summary", type=Path, help="print counts and causes of a results file and exit")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    if args.summary:
        print(summary(args.summary, args.top))
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    preload([])  # what every build imports, once, before the forks (as the sweep's warm worker does)
    torch.set_num_threads(1)
    shard = tuple(int(p) for p in args.shard.split("/")) if args.shard else None
    if args.only:  # with --shard: the listed classes of that shard only, so a rerun goes to its shard's file
        listed = [line.strip() for line in args.only.read_text().splitlines() if line.strip()]
        classes = select_classes(listed, shard=shard)  # type: ignore[arg-type]
    else:
        classes = select_classes(enumerate_model_classes(), shard=shard)  # type: ignore[arg-type]
    done: set[str] = set()
    if args.resume and args.results.exists():
        repair_tail(args.results)
        done = {r["model"] for r in read(args.results)}
    todo = [name for name in classes if name not in done]
    print(f"{len(classes)} classes, {len(todo)} to run", flush=True)
    writer = ResultsWriter(args.results)
    try:
        for number, name in enumerate(todo, 1):
            record = run_child(name, args.timeout, args.memory_gb)
            writer.write(record)
            print(f"[{number}/{len(todo)}] {name}: {record['status']}", flush=True)
    finally:
        writer.close()


if __name__ == "__main__":
    main()
