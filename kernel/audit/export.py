"""`aos world export` and `aos world verify --export`: a journal someone else can check
holding only the world's public key (spec/05 §7.1).

An export is one canonical CBOR map:

    {"format": "aos.world.export/1", "world": <world id>, "public_key": <32 bytes>,
     "records": [<record bytes>, ...], "signed": [[seq, chain hash, signature], ...],
     "marks": [[seq, chain hash], ...], "chain": [seq, chain hash]}

`records` are the journal's records 1..N as their stored canonical bytes; `signed` are the
world's signed chain heads (one per snapshot, and one the export makes over its last record
when the world's key file is at hand); `marks` the world's flush marks (unsigned: they only
narrow down where a changed record is); `chain` is the chain head at N. Exporting checks the
world's chain first (verify.py), so an export never signs a journal that was changed. A
verifier recomputes the chain from the world id (the hash of record 1), checks every
signature with the public key it was given and the chain at every signed head, and says how
far the journal is authenticated. Both sides are bounded by `export_bytes_max`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aos.kernel import cbor
from aos.kernel.audit.integrity import verify_chain, world_id
from aos.kernel.hashing import hash_value
from aos.kernel.store import open_store
from aos.kernel.store.interface import Store
from aos.kernel.world import chain as journal_chain
from aos.kernel.world import worldkey
from aos.kernel.world.chain import JournalChain
from aos.kernel.world.errors import WorldError, WorldMissingError
from aos.kernel.world.worldkey import ChainSignatureInvalidError, WorldKeyMissingError

EXPORT_FORMAT = "aos.world.export/1"
EXPORT_BYTES_MAX_DEFAULT = 256 * 1024 * 1024


class ExportTooLargeError(WorldError):
    code = "world.export_too_large"
    hint = "raise the limit with --bytes-max, or export a world with a shorter journal"


class ExportInvalidError(WorldError):
    code = "world.export_invalid"
    hint = "the file is not an aos world export (`aos world export` writes one)"


@dataclass
class ExportReport:
    records: int
    signed: int  # signed chain heads in the export
    authenticated_seq: int  # the last record a signature covers (0: none)
    chain: bytes
    bytes: int = 0

    def to_value(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "signed_heads": self.signed,
            "authenticated_seq": self.authenticated_seq,
            "chain": self.chain.hex(),
            "bytes": self.bytes,
        }


def export_world(
    world_dir: str | Path, out: str | Path, *, bytes_max: int = EXPORT_BYTES_MAX_DEFAULT
) -> ExportReport:
    """Write the export of the world at `world_dir` to `out` (whole or not at all)."""
    root = Path(world_dir)
    if not (root / "store").is_dir():
        raise WorldMissingError(f"no world at {root}")
    with open_store(root, readonly=True) as store, store.consistent():
        checked = verify_chain(store)
        ident = world_id(store)
        public_key = store.meta.get(worldkey.META_PUBLIC_KEY, None)
        if not isinstance(public_key, bytes):
            raise WorldKeyMissingError(f"the world at {root} has no key: it cannot be exported")
        raws = _bounded_records(store.journal.read_encoded(1, checked.end_seq), bytes_max)
        signed = worldkey.signed_heads(store)
        marks = _marks(store, checked.end_seq)
    seed = worldkey.load_seed(root)
    if seed is not None and checked.end_seq:
        signed.append(worldkey.sign(seed, ident, checked.chain))
    value = {
        "format": EXPORT_FORMAT,
        "world": ident,
        "public_key": public_key,
        "records": raws,
        "signed": signed,
        "marks": marks,
        "chain": checked.chain.to_value(),
    }
    data = cbor.encode(value)
    _check_size(len(data), bytes_max)
    _write_whole(Path(out), data)
    report = _authenticated(signed, checked.chain, len(raws))
    report.bytes = len(data)
    return report


def verify_export(
    path: str | Path, public_key: bytes, *, bytes_max: int = EXPORT_BYTES_MAX_DEFAULT
) -> ExportReport:
    """Check an export with only the world's public key: `world.chain_broken` names the
    first bad sequence, `world.chain_signature_invalid` a signature that does not check."""
    value = _read(Path(path), bytes_max)
    if value["public_key"] != public_key:
        raise ChainSignatureInvalidError("the export was made by a world with another key")
    raws: list[bytes] = value["records"]
    ident = str(value["world"])
    if not raws or _first_record_id(raws[0]) != ident:
        raise journal_chain.broken(1, 1)  # the world id is the hash of its first record
    witnesses: dict[int, bytes] = {}
    for entry in value["signed"]:
        seq, chain_hash = worldkey.check(public_key, ident, entry)
        if not 1 <= seq <= len(raws) or witnesses.setdefault(seq, chain_hash) != chain_hash:
            raise ExportInvalidError(f"a signed chain head at seq {seq} does not fit the export")
    if not witnesses:
        raise ExportInvalidError("the export carries no signed chain head")
    for seq, chain_hash in value["marks"]:
        if witnesses.setdefault(seq, chain_hash) != chain_hash:
            raise journal_chain.broken(seq, seq)
    raws_by_seq = enumerate(raws, start=1)
    chain = journal_chain.follow(JournalChain.genesis(ident), raws_by_seq, witnesses.get)
    return _authenticated(value["signed"], chain, len(raws))


def _first_record_id(raw: bytes) -> str | None:
    try:
        return str(hash_value(cbor.decode(raw, bytes_max=len(raw))))
    except cbor.CborError:
        return None


def _marks(store: Store, end: int) -> list[list[Any]]:
    witness = journal_chain.marks(store)
    found = ((seq, witness(seq)) for seq in range(1, end + 1))
    return [[seq, mark] for seq, mark in found if mark is not None]


def _bounded_records(records: Iterable[tuple[int, bytes]], bytes_max: int) -> list[bytes]:
    raws: list[bytes] = []
    total = 0
    for _, raw in records:
        total += len(raw)
        _check_size(total, bytes_max)
        raws.append(raw)
    return raws


def _check_size(size_bytes: int, bytes_max: int) -> None:
    if size_bytes > bytes_max:
        raise ExportTooLargeError(
            f"the export would be over {bytes_max} bytes (export_bytes_max)",
            limit="export_bytes_max",
            limit_value=bytes_max,
            size_bytes=size_bytes,
        )


def _authenticated(signed: list[Any], chain: JournalChain, records: int) -> ExportReport:
    last = max((int(entry[0]) for entry in signed), default=0)
    return ExportReport(
        records=records, signed=len(signed), authenticated_seq=last, chain=chain.head
    )


def _read(path: Path, bytes_max: int) -> dict[str, Any]:
    try:
        size = path.stat().st_size
        _check_size(size, bytes_max)
        data = path.read_bytes()
    except OSError as error:
        raise ExportInvalidError(f"cannot read {path}: {error}") from None
    value: Any
    try:
        value = cbor.decode(data, bytes_max=bytes_max)
    except cbor.CborError as error:
        raise ExportInvalidError(f"{path} is not canonical CBOR: {error}") from None
    if (
        not isinstance(value, dict)
        or value.get("format") != EXPORT_FORMAT
        or not isinstance(value.get("world"), str)
        or not isinstance(value.get("public_key"), bytes)
        or not isinstance(value.get("records"), list)
        or not all(isinstance(raw, bytes) for raw in value["records"])
        or not isinstance(value.get("signed"), list)
        or not isinstance(value.get("marks"), list)
        or not all(_is_mark(mark) for mark in value["marks"])
    ):
        raise ExportInvalidError(f"{path} is not an {EXPORT_FORMAT} file")
    return value


def _is_mark(mark: Any) -> bool:
    return (
        isinstance(mark, list)
        and len(mark) == 2
        and isinstance(mark[0], int)
        and isinstance(mark[1], bytes)
    )


def _write_whole(out: Path, data: bytes) -> None:
    """Write under a temporary name and rename, so a failed export leaves no partial file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, out)
    finally:
        Path(temporary).unlink(missing_ok=True)
