"""A local HTTP server for playbook runs: the endpoints the corpus and seed examples call."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlparse

PAGES = 3
"""/data and /endpoints/* pages: 1..PAGES."""
WEATHER = {"37.7749": (18.5, 11.0), "40.7128": (31.5, 7.5), "51.5074": (12.0, 20.25)}
"""/v1/forecast (open-meteo's shape) by latitude: (temperature, windspeed)."""
RECORDS = [
    {"id": n, "userId": 10 + n, "title": f"post {n}", "meta": {"tag": f"t{n}"}} for n in range(1, 6)
]
"""/records: `{data: {items: RECORDS}}` (a transfer's http source)."""


class Handler(BaseHTTPRequestHandler):
    """GET /get echoes the query; /flaky 503s twice, then 200; /data?page=N pages through
    PAGES pages; /ep/ok?page=N pages too, page 2 503s twice; /pages?page=N pages too, page 2
    503s once; /ep/missing is 404; /status/N answers status N; /records holds RECORDS;
    /v1/forecast?latitude=L answers `current_weather` for the latitudes of WEATHER."""

    calls: ClassVar[list[str]] = []
    counts: ClassVar[dict[str, int]] = {}

    def do_GET(self) -> None:
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        self.calls.append(self.path)
        key = f"{url.path}?{query.get('page', '')}"
        count = self.counts[key] = self.counts.get(key, 0) + 1
        if url.path == "/get":
            self._answer(200, {"args": query, "url": self.path})
        elif url.path == "/flaky":
            self._answer(503 if count <= 2 else 200, {"try": count})
        elif url.path in ("/data", "/ep/ok", "/pages"):
            page = int(query.get("page", "1"))
            busy = {"/ep/ok": 2, "/pages": 1}.get(url.path, 0)
            if page == 2 and count <= busy:
                self._answer(503, {"error": "busy"})
                return
            items = [f"p{page}-{i}" for i in range(2)]
            paging = {"hasMore": page < PAGES, "page": page}
            self._answer(200, {"paging": paging, "items": items, "data": items})
        elif url.path.startswith("/status/") and url.path[len("/status/") :].isdigit():
            self._answer(int(url.path[len("/status/") :]), {"status": url.path})
        elif url.path == "/records":
            self._answer(200, {"data": {"items": RECORDS}})
        elif url.path == "/v1/forecast" and query.get("latitude") in WEATHER:
            temperature, windspeed = WEATHER[query["latitude"]]
            current = {"temperature": temperature, "windspeed": windspeed}
            self._answer(200, {"latitude": float(query["latitude"]), "current_weather": current})
        else:
            self._answer(404, {"error": "not found"})

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: Any) -> None:
        return None


@contextmanager
def serving() -> Iterator[str]:
    Handler.calls = []
    Handler.counts = {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
