"""The node's audit log (spec/04-effects.md §9.8): every refused authentication or
authorization and every privileged request (one that needs a scope other than `read`), with
the identity that made it, never its token. JSON lines in the world directory
(`audit.jsonl`, mode 0600), turned over to `audit.jsonl.1` past `audit_bytes_max`; each line
also goes to the `aos.audit` logger. The journal remains the record of what changed the
world; this one says who asked, and who was turned away.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aos.kernel.errors import AosError

if TYPE_CHECKING:
    from aos.kernel.node.identities import Principal

AUDIT_FILE_NAME = "audit.jsonl"
AUDIT_BYTES_MAX_DEFAULT = 64 * 1024 * 1024
"""Size at which the audit file is turned over (one older file is kept)."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]

log = logging.getLogger("aos.audit")


class AuditLog:
    """Appends audit entries to `path` (None: only to the `aos.audit` logger)."""

    def __init__(self, path: Path | None, *, bytes_max: int = AUDIT_BYTES_MAX_DEFAULT) -> None:
        self.path = path
        self.bytes_max = bytes_max
        self._lock = threading.Lock()

    @classmethod
    def of_world(cls, world_dir: str | os.PathLike[str]) -> AuditLog:
        return cls(Path(world_dir) / AUDIT_FILE_NAME)

    def refused(self, scope: Scope, error: AosError, identity: str | None) -> None:
        self.write(
            "refused", scope, identity=identity, code=error.code, message=error.message[:300]
        )

    def acting(self, scope: Scope, principal: Principal, send: Send) -> Send:
        """`send`, noting the request with the status it was answered."""

        async def noting(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.write("acted", scope, identity=principal.name, status=message["status"])
            await send(message)

        return noting

    def write(self, event: str, scope: Scope | None = None, **fields: Any) -> None:
        entry: dict[str, Any] = {"at_unix_ms": time.time_ns() // 1_000_000, "event": event}
        if scope is not None:
            client = scope.get("client")
            entry.update(
                method=scope.get("method"),
                path=scope.get("path"),
                client=f"{client[0]}:{client[1]}" if client else None,
            )
        entry.update(fields)
        line = json.dumps(entry, sort_keys=True, separators=(",", ":"))
        log.info("%s", line)
        if self.path is None:
            return
        try:
            self._append(line + "\n")
        except OSError:
            log.exception("cannot write the audit log %s", self.path)

    def _append(self, line: str) -> None:
        assert self.path is not None
        data = line.encode("utf-8")
        with self._lock:
            try:
                size = self.path.stat().st_size
            except FileNotFoundError:
                size = 0
            if size + len(data) > self.bytes_max:
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                os.write(descriptor, data)
            finally:
                os.close(descriptor)
