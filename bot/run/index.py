"""Ask the package index which releases exist and when they were uploaded, as every install would see it.

Why through pip: the watch must see exactly what ``pip install -c constraints.txt`` (``scripts/setup.sh``,
the candidate environments of bot.run.venvs) would install from, so it asks pip itself with the same
configuration (``pip.conf``, ``PIP_INDEX_URL``, ``PIP_EXTRA_INDEX_URL``, ``PIP_FIND_LINKS``):

* ``pip index versions PKG``: the versions every configured index and find-links location offer;
* upload times: the JSON simple API (PEP 691) of the primary index (pip's configured ``index-url``, else
  PyPI), whose files carry ``upload-time`` (PEP 700). A version that index does not list, a ``file://``
  index or a find-links folder gives no time (the watch then cannot show the release is old enough).

Every request is counted (:class:`IndexSession`), so ``benchmarks/`` can say what a watch run costs.
"""

from __future__ import annotations

import datetime
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)

from bot.audit.pins import normalize_name
from bot.audit.releases import Release

DEFAULT_INDEX = "https://pypi.org/simple"
_AVAILABLE = re.compile(r"^Available versions:\s*(.+)$", re.MULTILINE)
_SCOPES = (":env:", "site", "user", "global")  # pip's precedence: the environment first, then site, user, global
_JSON_SIMPLE = "application/vnd.pypi.simple.v1+json"


class IndexFailure(RuntimeError):
    """The index could not be asked (pip failed for another reason than an unknown package, no network)."""


@dataclass
class IndexSession:
    """Asks ``python``'s pip; counts what it asked (``pip index versions`` runs, HTTP requests)."""

    python: Path = Path(sys.executable)
    timeout: float = 120.0
    pip_runs: int = 0
    http_requests: int = 0
    _index_url: str | None = field(default=None, repr=False)

    def versions(self, package: str) -> list[str]:
        """What ``pip index versions PACKAGE`` lists (every configured index and find-links location)."""
        self.pip_runs += 1
        done = subprocess.run(
            [str(self.python), "-m", "pip", "index", "versions", package, "--disable-pip-version-check"],
            capture_output=True, text=True, timeout=self.timeout,
        )  # fmt: skip
        if done.returncode != 0 and "No matching distribution found" in done.stderr:
            return []
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip()[-300:]
            raise IndexFailure(f"pip index versions {package} failed: {tail}")
        return parse_index_versions(done.stdout)

    @property
    def index_url(self) -> str:
        """pip's configured primary index (``pip config list``), else PyPI's simple index."""
        if self._index_url is None:
            self.pip_runs += 1
            done = subprocess.run([str(self.python), "-m", "pip", "config", "list"], capture_output=True, text=True,
                                  timeout=self.timeout)  # fmt: skip
            self._index_url = configured_index(done.stdout) or DEFAULT_INDEX
        return self._index_url

    def upload_times(self, package: str) -> dict[str, datetime.datetime]:
        """Version → its earliest file's upload time, from the primary index's JSON simple page; {} when that
        index gives none (file:// index, an index without PEP 691/700, the package absent there)."""
        url = f"{self.index_url.rstrip('/')}/{normalize_name(package)}/"
        if not url.startswith(("http://", "https://")):
            return {}
        self.http_requests += 1
        request = urllib.request.Request(url, headers={"Accept": _JSON_SIMPLE})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                if _JSON_SIMPLE not in answer.headers.get("Content-Type", ""):
                    return {}
                page = json.loads(answer.read().decode("utf-8"))
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return {}
            raise IndexFailure(f"{url}: HTTP {error.code}") from None
        except (urllib.error.URLError, TimeoutError, ValueError) as error:
            raise IndexFailure(f"{url}: {error}") from None
        return earliest_uploads(page)

    def releases(self, package: str) -> list[Release]:
        times = self.upload_times(package)
        return [Release(package, version, times.get(version)) for version in self.versions(package)]


def parse_index_versions(output: str) -> list[str]:
    """The versions listed by ``pip index versions PKG`` (its ``Available versions:`` line)."""
    found = _AVAILABLE.search(output)
    if found is None:
        raise IndexFailure(f"pip index versions printed no 'Available versions:' line: {output.strip()[-300:]}")
    return [v.strip() for v in found.group(1).split(",") if v.strip()]


def configured_index(pip_config_list: str) -> str | None:
    """The ``index-url`` pip would use, from ``pip config list`` output (environment over site, user, global)."""
    found: dict[str, str] = {}
    for line in pip_config_list.splitlines():
        key, _, value = line.partition("=")
        scope, _, name = key.strip().rpartition(".")
        if name == "index-url" and value:
            found[scope] = value.strip().strip("'\"").split()[0]
    return next((found[scope] for scope in _SCOPES if scope in found), None)


def earliest_uploads(page: dict) -> dict[str, datetime.datetime]:
    """Version → earliest ``upload-time`` over its files, from a PEP 691 JSON simple page."""
    times: dict[str, datetime.datetime] = {}
    for item in page.get("files") or []:
        stamp, filename = item.get("upload-time"), str(item.get("filename") or "")
        if not stamp:
            continue
        try:
            version = str(parse_wheel_filename(filename)[1] if filename.endswith(".whl") else parse_sdist_filename(filename)[1])
        except (InvalidWheelFilename, InvalidSdistFilename):
            continue
        when = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        times[version] = min(times.get(version, when), when)
    return times
