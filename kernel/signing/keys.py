"""Adapter key files: one Ed25519 private key seed per file.

A key file holds the 32-byte seed as 64 lowercase hex digits and a newline, and nothing else;
it is created with mode 0600 because whoever reads it can sign receipts as the adapter. The
public half goes into the manifest (`defadapter.public_key`, see `signing.public_key_of`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from aos.kernel.errors import AosError
from aos.kernel.signing.signatures import SEED_BYTES

KEY_FILE_MODE = 0o600
_HEX_DIGITS = "0123456789abcdef"


class KeyFileError(AosError):
    code = "adapter.key_invalid"
    hint = (
        "a key file holds 64 hex digits (a 32-byte Ed25519 seed); `aos adapter keygen` writes one"
    )


def read_seed(path: str | os.PathLike[str]) -> bytes:
    """The seed in a key file. Surrounding whitespace is tolerated (editors add newlines);
    anything else that is not exactly 64 hex digits is refused."""
    source = Path(path)
    try:
        text = source.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise KeyFileError(f"no key file at {source}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise KeyFileError(f"cannot read key file {source}: {error}") from None
    if len(text) != 2 * SEED_BYTES or any(c not in _HEX_DIGITS for c in text.lower()):
        raise KeyFileError(f"{source} does not hold {2 * SEED_BYTES} hex digits")
    return bytes.fromhex(text)


def write_seed(path: str | os.PathLike[str], seed: bytes, *, overwrite: bool = False) -> None:
    """Write a key file with mode 0600. An existing file is refused unless `overwrite`, since
    replacing a key orphans the public key already in manifests. The file appears whole or
    not at all (written and fsynced under a temporary name, then linked or renamed into
    place), so a crash never leaves an empty key file that every later start refuses."""
    if len(seed) != SEED_BYTES:
        raise KeyFileError(f"a seed is {SEED_BYTES} bytes, not {len(seed)}")
    target = Path(path)
    if not overwrite and target.exists():
        raise KeyFileError(f"{target} exists; refusing to replace a key")
    try:
        descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    except OSError as error:
        raise KeyFileError(f"cannot write key file {target}: {error}") from None
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as file:
            os.fchmod(file.fileno(), KEY_FILE_MODE)
            file.write(seed.hex() + "\n")
            file.flush()
            os.fsync(file.fileno())
        _place(Path(temporary), target, overwrite=overwrite)
    finally:
        Path(temporary).unlink(missing_ok=True)


def _place(temporary: Path, target: Path, *, overwrite: bool) -> None:
    if overwrite:
        os.replace(temporary, target)
        return
    try:
        os.link(temporary, target)  # fails if the target appeared meanwhile: never replaced
    except FileExistsError:
        raise KeyFileError(f"{target} exists; refusing to replace a key") from None
    except OSError as error:
        raise KeyFileError(f"cannot write key file {target}: {error}") from None
