"""CellIndex: the content-addressed map from cell key hash to cell entry, one per keyed workflow.

The index is a hash trie stored in the CAS. Its shape is a pure function of its contents:

    node(S, depth) = leaf(S sorted by key hash)                 if |S| <= BUCKET_ENTRIES_MAX
                   = branch({nibble: node(S_nibble, depth + 1)}) otherwise

where `S_nibble` are the entries whose key hash has that nibble at position `depth`. Inserts
split an overfull leaf and deletes collapse a branch that has become small enough, so the same
set of entries always gives the same nodes and the same root hash, whatever the order of the
updates that produced it. Updates are applied in batches: only the paths they touch are
rewritten.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aos.kernel import cbor
from aos.kernel.errors import KernelInvariantError
from aos.kernel.hashing import Hash, digest_bytes

BUCKET_ENTRIES_MAX = 16
NODES_CACHED_MAX_DEFAULT = 512
"""Decoded index nodes kept in memory (~9 KB each for a full leaf): the nodes a checkpoint
wrote are the ones the next one reads, so a world whose changes stay within this many nodes
never decodes one from the CAS again."""
KEY_HASH_BYTES = 32
DEPTH_MAX = 2 * KEY_HASH_BYTES  # one nibble per level


class NodeStore(Protocol):
    """What the index needs from a CAS: canonical bytes in, canonical values out."""

    def put(self, data: bytes) -> Hash: ...

    def get_value(self, hash_: Hash) -> Any: ...


@dataclass(frozen=True, slots=True)
class CellEntry:
    """One cell as the index records it."""

    key: bytes  # canonical CBOR of the cell key
    state: Hash  # value hash of the cell state, stored in the CAS
    size_bytes: int  # length of the canonical state bytes
    last_active_seq: int  # journal sequence of the last input that stepped the cell
    failed: bool = False  # a step of this cell faulted; it takes no further events

    def to_value(self) -> dict[str, Any]:
        """The entry as a leaf holds it, its keys in canonical order (spec/01 §3)."""
        return {
            "key": self.key,
            "state": str(self.state),
            "failed": self.failed,
            "size_bytes": self.size_bytes,
            "last_active_seq": self.last_active_seq,
        }

    @staticmethod
    def from_value(value: Any) -> CellEntry:
        try:
            return CellEntry(
                key=value["key"],
                state=Hash(value["state"]),
                size_bytes=value["size_bytes"],
                last_active_seq=value["last_active_seq"],
                failed=value["failed"],
            )
        except (KeyError, TypeError) as exc:
            raise KernelInvariantError(f"malformed cell index entry: {exc}") from exc


def key_hash(key_bytes: bytes) -> bytes:
    """The trie position of a cell: the BLAKE3 digest of its canonical key bytes."""
    return digest_bytes(key_bytes)


def _nibble(digest: bytes, depth: int) -> int:
    byte = digest[depth // 2]
    return byte >> 4 if depth % 2 == 0 else byte & 0x0F


class CellIndex:
    """Reads and batch-updates CellIndex tries in a `NodeStore`."""

    def __init__(
        self,
        store: NodeStore,
        *,
        bucket_entries_max: int = BUCKET_ENTRIES_MAX,
        nodes_cached_max: int = NODES_CACHED_MAX_DEFAULT,
    ) -> None:
        if bucket_entries_max < 1:
            raise ValueError("bucket_entries_max must be at least 1")
        if nodes_cached_max < 0:
            raise ValueError("nodes_cached_max must be at least 0")
        self._store = store
        self._bucket_max = bucket_entries_max
        # Nodes by hash, oldest first. A node is content-addressed, so what is kept is what
        # the CAS holds under that hash; nothing here mutates a node it loaded or built.
        self._nodes: dict[Hash, dict[str, Any]] = {}
        self._nodes_max = nodes_cached_max
        # While an update tracks what it supersedes: the nodes it read and wrote, and the
        # states of the entries it replaced.
        self._loaded: set[Hash] | None = None
        self._written: set[Hash] | None = None
        self._old_states: set[Hash] | None = None
        self.empty_root = self._put({"leaf": []})

    # -- reads --------------------------------------------------------------------------

    def get(self, root: Hash, digest: bytes) -> CellEntry | None:
        node = self._load(root)
        depth = 0
        while "branch" in node:
            child = node["branch"].get(_nibble(digest, depth))
            if child is None:
                return None
            node = self._load(Hash.trusted(child[0]))
            depth += 1
        for entry_digest, entry in node["leaf"]:
            if entry_digest == digest:
                return CellEntry.from_value(entry)
        return None

    def count(self, root: Hash) -> int:
        node = self._load(root)
        return int(node["count"]) if "branch" in node else len(node["leaf"])

    def items(self, root: Hash) -> Iterator[tuple[bytes, CellEntry]]:
        """Every entry, in key-hash order."""
        node = self._load(root)
        if "leaf" in node:
            for entry_digest, entry in node["leaf"]:
                yield entry_digest, CellEntry.from_value(entry)
            return
        for nibble in sorted(node["branch"]):
            yield from self.items(Hash.trusted(node["branch"][nibble][0]))

    def items_after(self, root: Hash, after: bytes | None) -> Iterator[tuple[bytes, CellEntry]]:
        """The entries whose key hash is greater than `after` (every one when None), in
        key-hash order, lazily: only the nodes on `after`'s path and right of it are read,
        and only as far as the caller goes (a page of a million cells reads a few nodes)."""
        yield from self._items_after(self._load(root), after, 0)

    def _items_after(
        self, node: dict[str, Any], after: bytes | None, depth: int
    ) -> Iterator[tuple[bytes, CellEntry]]:
        if "leaf" in node:
            for entry_digest, entry in node["leaf"]:
                if after is None or bytes(entry_digest) > after:
                    yield bytes(entry_digest), CellEntry.from_value(entry)
            return
        start = -1 if after is None else _nibble(after, depth)
        for nibble in sorted(node["branch"]):
            if nibble < start:
                continue
            child = self._load(Hash.trusted(node["branch"][nibble][0]))
            yield from self._items_after(child, after if nibble == start else None, depth + 1)

    # -- updates ------------------------------------------------------------------------

    def update(
        self,
        root: Hash,
        changes: Mapping[bytes, CellEntry | None],
        superseded: set[Hash] | None = None,
    ) -> Hash:
        """Apply upserts (an entry) and deletes (None) keyed by key hash; return the new root.

        Given a `superseded` set, add to it the references the old root held and the new one
        dropped: every index node the update read (on the changed paths, and under branches
        that collapsed into leaves) and the states of replaced or deleted entries. A node it
        read and wrote again (a leaf that became a branch's child, say) is superseded through
        its old reference and named again through the write, so the caller sees the reference
        carried over, not a second one. Whether such an object is garbage also depends on who
        else names it (the caller's business)."""
        if not changes:
            return root
        for digest in changes:
            if len(digest) != KEY_HASH_BYTES:
                raise KernelInvariantError("cell key hashes are 32 bytes")
        ordered = sorted(changes.items())
        if superseded is None:
            return self._put(self._apply(self._load(root), ordered, 0))
        self._loaded, self._written, self._old_states = set(), set(), set()
        try:
            new_root = self._put(self._apply(self._load(root), ordered, 0))
            new_states = {entry.state for entry in changes.values() if entry is not None}
            superseded |= self._loaded - {self.empty_root}
            superseded |= self._old_states - new_states
        finally:
            self._loaded = self._written = self._old_states = None
        return new_root

    def _apply(
        self, node: dict[str, Any], changes: list[tuple[bytes, CellEntry | None]], depth: int
    ) -> dict[str, Any]:
        if "leaf" in node:
            merged = {bytes(d): e for d, e in node["leaf"]}
            for digest, entry in changes:
                old = merged.get(digest)
                if old is not None and self._old_states is not None:
                    self._old_states.add(Hash.trusted(old["state"]))
                if entry is None:
                    merged.pop(digest, None)
                else:
                    merged[digest] = entry.to_value()
            return self._build(sorted(merged.items()), depth)
        # A branch maps nibble -> [child hash, entries under the child].
        branch: dict[int, list[Any]] = dict(node["branch"])
        for nibble, group in _group_by_nibble(changes, depth):
            slot = branch.get(nibble)
            child = self._load(Hash.trusted(slot[0])) if slot else {"leaf": []}
            new_child = self._apply(child, group, depth + 1)
            count = _node_count(new_child)
            if count == 0:
                branch.pop(nibble, None)
            else:
                branch[nibble] = [str(self._put(new_child)), count]
        total = sum(int(slot[1]) for slot in branch.values())
        if total <= self._bucket_max:
            return {"leaf": sorted(self._collect(branch))}
        return {"count": total, "branch": dict(sorted(branch.items()))}

    def _build(self, entries: list[tuple[bytes, Any]], depth: int) -> dict[str, Any]:
        """The canonical node for a sorted entry list at `depth`."""
        if len(entries) <= self._bucket_max:
            return {"leaf": [[d, e] for d, e in entries]}
        if depth >= DEPTH_MAX:
            raise KernelInvariantError("more colliding key hashes than a bucket holds")
        groups: dict[int, list[tuple[bytes, Any]]] = {}
        for digest, entry in entries:
            groups.setdefault(_nibble(digest, depth), []).append((digest, entry))
        branch = {
            nibble: [str(self._put(self._build(group, depth + 1))), len(group)]
            for nibble, group in sorted(groups.items())
        }
        return {"count": len(entries), "branch": branch}

    def _collect(self, branch: Mapping[int, list[Any]]) -> Iterator[list[Any]]:
        for nibble in sorted(branch):
            node = self._load(Hash.trusted(branch[nibble][0]))
            if "leaf" in node:
                yield from ([bytes(d), e] for d, e in node["leaf"])
            else:
                yield from self._collect(node["branch"])

    def _load(self, hash_: Hash) -> dict[str, Any]:
        if self._loaded is not None:
            self._loaded.add(hash_)
        node = self._nodes.get(hash_)
        if node is not None:
            return node
        node = self._store.get_value(hash_)
        if not isinstance(node, dict) or not ({"leaf"} == node.keys() or "branch" in node):
            raise KernelInvariantError(f"{hash_} is not a cell index node")
        self._keep(hash_, node)
        return node

    def _put(self, node: dict[str, Any]) -> Hash:
        # Nodes are built here from entries the index made or strictly decoded from the CAS,
        # every map in canonical key order (entries by `to_value`, a branch's count before
        # its nibbles in ascending order) and no float in them: encoded as they are, with no
        # validation walk (a materialize writes hundreds of ~2 KB nodes).
        hash_ = self._store.put(cbor.encode_ordered(node))
        if self._written is not None:
            self._written.add(hash_)
        self._keep(hash_, node)
        return hash_

    def _keep(self, hash_: Hash, node: dict[str, Any]) -> None:
        nodes = self._nodes
        if hash_ in nodes or not self._nodes_max:
            return
        if len(nodes) >= self._nodes_max:
            del nodes[next(iter(nodes))]
        nodes[hash_] = node


def _node_count(node: Mapping[str, Any]) -> int:
    return int(node["count"]) if "branch" in node else len(node["leaf"])


def _group_by_nibble(
    changes: list[tuple[bytes, CellEntry | None]], depth: int
) -> Iterator[tuple[int, list[tuple[bytes, CellEntry | None]]]]:
    groups: dict[int, list[tuple[bytes, CellEntry | None]]] = {}
    for digest, entry in changes:
        groups.setdefault(_nibble(digest, depth), []).append((digest, entry))
    return iter(sorted(groups.items()))
