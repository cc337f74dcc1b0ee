"""A package index on 127.0.0.1 serving a folder of real wheels, as PyPI serves them, for ``exportbot watch``.

Why not ``--find-links``: the watch asks the index when each release was uploaded (PEP 700 ``upload-time`` in the
JSON simple API, PEP 691), which a folder cannot say. This server answers both forms pip and the watch ask for:

* ``GET /simple/<name>/`` with ``Accept: application/vnd.pypi.simple.v1+json``: JSON (``files`` with ``url``,
  ``hashes``, ``upload-time``; ``versions``); otherwise the PEP 503 HTML page of links;
* ``GET /files/<filename>``: the wheel itself.

``upload_times`` says when each version counts as uploaded (default: long ago, so it is old enough). Every
request is logged in :attr:`PackageIndex.requests` (method, path), so a test can count what a run asked.
"""

from __future__ import annotations

import datetime
import hashlib
import html
import json
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

JSON_SIMPLE = "application/vnd.pypi.simple.v1+json"
LONG_AGO = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


class PackageIndex:
    """Serves every ``*.whl`` of ``folder``; use as a context manager. ``url`` is the simple index's URL."""

    def __init__(self, folder: Path, upload_times: Mapping[str, datetime.datetime] | None = None) -> None:
        self.folder = Path(folder)
        self.upload_times = dict(upload_times or {})  # version → upload time
        self.requests: list[tuple[str, str]] = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                index.requests.append(("GET", self.path))
                parts = [p for p in self.path.split("?")[0].split("/") if p]
                if len(parts) == 2 and parts[0] == "files":
                    return self._file(parts[1])
                if len(parts) == 2 and parts[0] == "simple":
                    return self._project(parts[1], JSON_SIMPLE in (self.headers.get("Accept") or ""))
                self.send_error(404)

            def _file(self, name: str) -> None:
                path = index.folder / name
                if not path.is_file() or path.suffix != ".whl":
                    return self.send_error(404)
                data = path.read_bytes()
                self._send(200, "application/octet-stream", data)

            def _project(self, name: str, as_json: bool) -> None:
                wheels = list(index.wheels(name))
                if not wheels:
                    return self.send_error(404)
                if as_json:
                    files = [{"filename": w.name, "url": f"/files/{w.name}", "hashes": {"sha256": _sha256(w)},
                              "upload-time": index.uploaded(w).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                              "requires-python": ">=3.9", "yanked": False} for w in wheels]  # fmt: skip
                    versions = sorted({str(parse_wheel_filename(w.name)[1]) for w in wheels})
                    body = {"meta": {"api-version": "1.1"}, "name": name, "files": files, "versions": versions}
                    return self._send(200, JSON_SIMPLE, json.dumps(body).encode())
                links = "".join(f'<a href="/files/{html.escape(w.name)}#sha256={_sha256(w)}">{html.escape(w.name)}</a>\n'
                                for w in wheels)  # fmt: skip
                self._send(200, "text/html", f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode())

            def _send(self, status: int, kind: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/simple"

    def wheels(self, name: str) -> Iterator[Path]:
        wanted = canonicalize_name(name)
        for path in sorted(self.folder.glob("*.whl")):
            if canonicalize_name(parse_wheel_filename(path.name)[0]) == wanted:
                yield path

    def uploaded(self, wheel: Path) -> datetime.datetime:
        return self.upload_times.get(str(parse_wheel_filename(wheel.name)[1]), LONG_AGO)

    def __enter__(self) -> PackageIndex:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
