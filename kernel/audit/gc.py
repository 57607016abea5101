"""Garbage collection of a world's CAS.

Roots are the head checkpoint, the states the journal tail after it names, the retained
snapshots, every manifest the journal names, and the blobs receipts, events and steps name.
From a checkpoint or snapshot the walk reaches its manifest, each CellIndex root, every index
node and every cell state; from a manifest, its definitions and module binaries. Everything
else (superseded checkpoints, index nodes and states of older heads) is garbage. A dry run is
the default; nothing reachable is ever deleted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aos.kernel.air.model import Manifest
from aos.kernel.hashing import Hash, is_hash
from aos.kernel.store import open_store
from aos.kernel.store.interface import Store
from aos.kernel.world import records
from aos.kernel.world.errors import WorldMissingError

DELETE_BATCH_OBJECTS_MAX = 1_000


@dataclass
class GcReport:
    objects: int
    bytes: int
    live_objects: int
    live_bytes: int
    garbage_objects: int
    garbage_bytes: int
    deleted: bool
    snapshots_kept: int
    snapshots_dropped: int

    def to_value(self) -> dict[str, Any]:
        return dict(self.__dict__)


def collect(
    world_dir: str | Path, *, apply: bool = False, keep_snapshots: int | None = None
) -> GcReport:
    root = Path(world_dir)
    if not (root / "store").is_dir():
        raise WorldMissingError(f"no world at {root}")
    with open_store(root) as store:
        snapshots = _snapshots(store)
        kept = snapshots if keep_snapshots is None else snapshots[len(snapshots) - keep_snapshots :]
        live = reachable(store, [hash_ for _, hash_ in kept])
        sizes = {hash_: len(store.cas.get(hash_)) for hash_ in store.cas.hashes()}
        garbage = sorted(h for h in sizes if h not in live)
        report = GcReport(
            objects=len(sizes),
            bytes=sum(sizes.values()),
            live_objects=len(sizes) - len(garbage),
            live_bytes=sum(size for h, size in sizes.items() if h in live),
            garbage_objects=len(garbage),
            garbage_bytes=sum(sizes[h] for h in garbage),
            deleted=apply,
            snapshots_kept=len(kept),
            snapshots_dropped=len(snapshots) - len(kept),
        )
        if apply:
            for start in range(0, len(garbage), DELETE_BATCH_OBJECTS_MAX):
                with store.batch() as batch:
                    for hash_ in garbage[start : start + DELETE_BATCH_OBJECTS_MAX]:
                        batch.cas_delete(hash_)
                    if start == 0 and len(kept) != len(snapshots):
                        batch.meta_put("world.snapshots", [[s, str(h)] for s, h in kept])
        return report


def _get(store: Store, hash_: Hash) -> Any:
    """A stored value, typed loosely: the walk checks the shapes it relies on."""
    return store.cas.get_value(hash_)


def _snapshots(store: Store) -> list[tuple[int, Hash]]:
    value: Any = store.meta.get("world.snapshots", [])
    return [(int(seq), Hash(str(hash_))) for seq, hash_ in value]


def reachable(store: Store, snapshots: list[Hash]) -> set[Hash]:
    """Every blob the head, the given snapshots and the journal name (what gc keeps)."""
    live: set[Hash] = set()
    heads = [Hash(str(store.meta.get("world.head"))), *snapshots]
    for head in heads:
        _mark_head(store, head, live)
    head_height = int(_get(store, heads[0])["height"])
    for seq, value in store.journal.read(1):
        record = records.parse(value)  # a record gc misread could lose a blob it names
        if isinstance(record, records.StepRecord):
            _mark_step(store, record, seq > head_height, live)
        elif isinstance(record, records.ManifestRecord):
            _mark_manifest(store, Hash(record.manifest), live)
        elif isinstance(record, records.GovernanceRecord):
            # Governance history must stay replayable: proposals keep their patch and their
            # proposed manifest (with its definitions and modules), shadows their report.
            if record.action == records.PROPOSED:
                live.add(Hash(str(record.patch)))
                _mark_manifest(store, Hash(str(record.manifest)), live)
            elif record.action == records.SHADOWED:
                live.add(Hash(str(record.report)))
        elif isinstance(record, records.EffectReceipt):
            # A payload may name blobs by hash (large bodies uploaded by an adapter).
            _mark_named(store, record.body["payload"], live)
        elif isinstance(record, records.IngressEvent | records.DerivedEvent):
            # An event may name a blob put before it (a deployed flow's definition, which
            # every later start of that version reads).
            _mark_named(store, record.value, live)
    return live


def _mark_named(store: Store, value: Any, live: set[Hash]) -> None:
    """Every stored blob whose hash is a text anywhere in `value`."""
    for hash_ in _hashes_in(value):
        if store.cas.has(hash_):
            live.add(hash_)


def _mark_step(store: Store, record: records.StepRecord, in_tail: bool, live: set[Hash]) -> None:
    """A step names the blobs it wrote (spec/08 §4.4): they stay while the journal does, as
    blobs a receipt names do. The journal tail after the head checkpoint names states no index
    holds yet (spec/05 §1.1): they are roots until the next checkpoint."""
    for written in record.writes or ():
        if store.cas.has(Hash(written)):
            live.add(Hash(written))
    if in_tail and record.state:
        state = Hash(record.state)
        if store.cas.has(state):
            live.add(state)


def _hashes_in(value: Any) -> Iterator[Hash]:
    if isinstance(value, str) and is_hash(value):
        yield Hash(value)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _hashes_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from _hashes_in(item)


def _mark_head(store: Store, head: Hash, live: set[Hash]) -> None:
    if head in live:
        return
    live.add(head)
    content = _get(store, head)
    _mark_manifest(store, Hash(str(content["manifest"])), live)
    for root in content["roots"].values():
        for hash_ in _index_objects(store, Hash(str(root))):
            live.add(hash_)


def _mark_manifest(store: Store, manifest_hash: Hash, live: set[Hash]) -> None:
    if manifest_hash in live:
        return
    live.add(manifest_hash)
    manifest = Manifest.model_validate(store.cas.get_value(manifest_hash))
    for refs in manifest.ref_lists().values():
        for ref in refs:
            if ref.hash_ is None or not store.cas.has(Hash(ref.hash_)):
                continue  # built-in sys/ definitions are not stored
            live.add(Hash(ref.hash_))
            definition = _get(store, Hash(ref.hash_))
            if definition.get("$kind") == "defmodule":
                live.add(Hash(str(definition["artifact"]["hash"])))


def _index_objects(store: Store, root: Hash) -> Iterator[Hash]:
    yield root
    node = _get(store, root)
    if "leaf" in node:
        for _, entry in node["leaf"]:
            yield Hash(str(entry["state"]))
        return
    for child, _count in node["branch"].values():
        yield from _index_objects(store, Hash(str(child)))
