"""The owner record: where a world's node serves it, so that the CLI's writes go through it.

`aos node up` writes `<world>/node.json` (`{"pid", "url", "world_id"}`) once it listens and
removes it when it stops. A record whose process is gone (a node killed with SIGKILL) is
stale and ignored; so is one that does not parse or is larger than `OWNER_BYTES_MAX`.

    url = owner_url(world_dir)      # None: no live node owns the world
"""

from __future__ import annotations

import json
import os
from pathlib import Path

OWNER_FILE_NAME = "node.json"
OWNER_BYTES_MAX = 4096
"""Largest owner record read; a larger file is not one this code wrote."""


def write_owner(world_dir: str | os.PathLike[str], url: str, world_id: str) -> Path:
    """Record (atomically) that this process serves the world at `url`."""
    path = Path(world_dir) / OWNER_FILE_NAME
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps({"pid": os.getpid(), "url": url, "world_id": world_id}))
    os.replace(temporary, path)
    return path


def remove_owner(world_dir: str | os.PathLike[str]) -> None:
    """Remove the record if this process wrote it."""
    path = Path(world_dir) / OWNER_FILE_NAME
    record = _read(path)
    if record is not None and record.get("pid") == os.getpid():
        path.unlink(missing_ok=True)


def owner_url(world_dir: str | os.PathLike[str]) -> str | None:
    """The URL of the live node that serves the world, or None."""
    record = _read(Path(world_dir) / OWNER_FILE_NAME)
    if record is None:
        return None
    pid, url = record.get("pid"), record.get("url")
    if not isinstance(pid, int) or not isinstance(url, str) or not _alive(pid):
        return None
    return url


def _read(path: Path) -> dict[str, object] | None:
    try:
        with path.open("rb") as file:
            data = file.read(OWNER_BYTES_MAX + 1)
    except OSError:
        return None
    if len(data) > OWNER_BYTES_MAX:
        return None
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True
