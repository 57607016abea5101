"""The `file` tool's work (spec/11-flows.md §1.2): reading and writing resource files of the
flow language (`<data.json>`), inside one base directory.

The base is what the adapter serving the world (`aos adapter run tool-file --base DIR`) or
`aos flow run --local` names; a path is relative to it, and one that escapes it (`..`, an
absolute path elsewhere, a symbolic link out) is refused. Reading is by content: JSON, then
JSON text sequences (RFC 7464, or one JSON value a line), then YAML, all strict; writing is
JSON, or YAML for a `.yaml` / `.yml` path, replacing the file atomically."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from aos.flows.define.document import read_document
from aos.flows.errors import FlowError
from aos.flows.limits import DefinitionLimits

FILE_BYTES_MAX_DEFAULT = 8 * 1024 * 1024
"""The largest file the tool reads or writes, unless the adapter says otherwise."""
_RECORD_SEPARATOR = "\x1e"


class FileToolError(Exception):
    """Why a read or write failed: a stable `code` (`file.*`) and a message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def resolve(base: Path | None, path: Any) -> Path:
    """`path` inside `base`, or FileToolError `file.escape` / `file.no_base`."""
    if base is None:
        raise FileToolError("file.no_base", "no base directory is set for the file tool")
    if not isinstance(path, str) or not path or "\x00" in path:
        raise FileToolError("file.path_invalid", f"path {path!r} is a non-empty relative path")
    root = base.resolve()
    target = (root / path).resolve()
    if target != root and root not in target.parents:
        raise FileToolError("file.escape", f"{path!r} is outside the base directory")
    return target


def read_resource(base: Path | None, path: Any, bytes_max: int = FILE_BYTES_MAX_DEFAULT) -> Any:
    target = resolve(base, path)
    try:
        size = target.stat().st_size
        if size > bytes_max:
            raise FileToolError(
                "file.too_large", f"{path} is {size} bytes; the limit is {bytes_max}"
            )
        data = target.read_bytes()[: bytes_max + 1]
    except OSError as error:
        raise FileToolError("file.unreadable", f"{path}: {error.strerror}") from None
    if len(data) > bytes_max:
        raise FileToolError("file.too_large", f"{path} grew past {bytes_max} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FileToolError("file.decode", f"{path}: not UTF-8 (byte {error.start})") from None
    return parse_content(text, str(path), bytes_max)


def parse_content(text: str, source: str, bytes_max: int) -> Any:
    """JSON, a JSON text sequence (a list), or YAML: whichever the content is."""
    limits = DefinitionLimits(definition_bytes_max=max(bytes_max, 1))
    stripped = text.strip()
    if stripped.startswith(_RECORD_SEPARATOR) or _is_json_lines(stripped):
        return [_document(part, source, limits) for part in _records(stripped)]
    return _document(text, source, limits)


def _is_json_lines(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2 or not all(line.lstrip()[:1] in "{[" for line in lines):
        return False
    try:
        json.loads(lines[0])
        return True
    except ValueError:
        return False


def _records(text: str) -> list[str]:
    if text.startswith(_RECORD_SEPARATOR):
        return [part for part in text.split(_RECORD_SEPARATOR) if part.strip()]
    return [line for line in text.splitlines() if line.strip()]


def _document(text: str, source: str, limits: DefinitionLimits) -> Any:
    try:
        # Named in brackets: a resource is data even when its name ends in `.flow`.
        return read_document(text, source=f"<{source}>", limits=limits)
    except FlowError as error:
        raise FileToolError("file.decode", str(error)) from None


def write_resource(
    base: Path | None, path: Any, value: Any, bytes_max: int = FILE_BYTES_MAX_DEFAULT
) -> dict[str, Any]:
    target = resolve(base, path)
    if target.suffix in (".yaml", ".yml"):
        text = yaml.safe_dump(value, sort_keys=False, allow_unicode=True)
    else:
        text = json.dumps(value, ensure_ascii=False, sort_keys=False) + "\n"
    data = text.encode("utf-8")
    if len(data) > bytes_max:
        raise FileToolError(
            "file.too_large", f"{len(data)} bytes to write; the limit is {bytes_max}"
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, scratch = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(scratch, target)
    except OSError as error:
        raise FileToolError("file.unwritable", f"{path}: {error.strerror}") from None
    return {"path": str(path), "bytes": len(data)}
