"""The journal hash chain, `aos world verify`, the world key and signed exports (spec/05
§1.2, §1.3, §7). A record changed on disk (written into LMDB directly, as an attacker on the
host would) is found by the chain, which names the first bad sequence; every refusal leaves
the store as it was."""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path
from typing import Any

import lmdb
import pytest
from click.testing import CliRunner

from aos.cli.main import main as aos_main
from aos.kernel import cbor
from aos.kernel.audit import export, integrity, replay
from aos.kernel.hashing import Hash
from aos.kernel.store import open_store
from aos.kernel.world import chain as journal_chain
from aos.kernel.world import records, worldkey
from aos.kernel.world.chain import ChainBrokenError, JournalChain
from aos.kernel.world.world import World, WorldLimits
from aos.kernel.world.worldkey import ChainSignatureInvalidError, WorldKeyMissingError
from tests.test_world import EVENT, create, inc, reopen

TAIL_ONLY = WorldLimits(snapshot_every_records=None, checkpoint_every_records=None)


def counter_world(path: Path, *, sends_after_snapshot: int = 3, **options: Any) -> int:
    """A counter world with a snapshot; the seq of the first ingress after it."""
    with create(path, **options) as world:
        for n in range(4):
            world.send(EVENT, inc(f"k{n % 2}", n + 1))
        seq, _ = world.snapshot()
        for n in range(sends_after_snapshot):
            world.send(EVENT, inc(f"k{n % 3}", 1))
    return seq + 1


def rewrite_record(path: Path, seq: int, change: Any) -> None:
    env = lmdb.open(str(path / "store"), max_dbs=8)
    with env.begin(write=True, db=env.open_db(b"journal")) as txn:
        record = cbor.decode(txn.get(seq.to_bytes(8, "big")))
        change(record)
        txn.put(seq.to_bytes(8, "big"), cbor.encode(record))
    env.close()


def flip_entropy(record: dict[str, Any]) -> None:
    entropy = bytearray(record["stamp"]["entropy"])
    entropy[0] ^= 0x01
    record["stamp"]["entropy"] = bytes(entropy)


def store_digest(path: Path) -> str:
    """The store's bytes and the folder's file names: what a refusal must leave unchanged."""
    names = sorted(p.name for p in path.rglob("*") if p.name != "writer.lock")
    data = (path / "store" / "data.mdb").read_bytes()
    return hashlib.sha256(data + repr(names).encode()).hexdigest()


def public_key(path: Path) -> bytes:
    with open_store(path, readonly=True) as store:
        value = store.meta.get(worldkey.META_PUBLIC_KEY)
    assert isinstance(value, bytes)
    return value


# -- the chain ---------------------------------------------------------------------------


def test_the_chain_is_blake3_over_each_records_bytes_from_the_world_id(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path)
    with open_store(path, readonly=True) as store:
        world_id = integrity.world_id(store)
        chain = JournalChain.genesis(world_id)
        for _, record in store.journal.read(1):
            chain.advance(cbor.encode(record))
        head: Any = store.cas.get_value(Hash(str(store.meta.get("world.head"))))
        assert store.meta.get(journal_chain.META_CHAIN) == [chain.seq, chain.head]
        assert head["chain"] == [chain.seq, chain.head] and head["height"] == chain.seq
        [(snapshot_seq, snapshot_hash)] = [
            (int(s), Hash(str(h)))
            for s, h in store.meta.get("world.snapshots")  # type: ignore[union-attr]
        ]
        snapshot: Any = store.cas.get_value(snapshot_hash)
        assert snapshot["chain"][0] == snapshot_seq - 1  # at the snapshot's height
    import blake3

    assert (
        JournalChain.genesis(world_id).head
        == blake3.blake3(b"aos.journal.chain/1\x00" + world_id.encode()).digest()
    )
    report = integrity.verify_integrity(path)
    assert report.chain.end_seq == chain.seq and report.chain.signed == 1
    assert replay.verify_replay(path).ok


def test_a_flipped_entropy_byte_fails_verify_and_replay_naming_its_seq(tmp_path: Path) -> None:
    """The issue's reproduction: an ingress stamp's entropy changed in the journal replays
    consistently (the replay feeds the recorded stamp back), so only the chain shows it."""
    path = tmp_path / "w"
    seq = counter_world(path)
    rewrite_record(path, seq, flip_entropy)
    before = store_digest(path)
    with pytest.raises(ChainBrokenError) as raised:
        integrity.verify_integrity(path)
    assert raised.value.detail["seq"] == seq
    report = replay.verify_replay(path)
    assert not report.ok and report.divergence is not None
    assert (report.divergence.what, report.divergence.seq) == ("chain_broken", seq)
    runner = CliRunner()
    for args in (["world", "verify"], ["world", "replay", "--verify"]):
        result = runner.invoke(aos_main, [*args, "--world", str(path)])
        assert result.exit_code == 1
        assert f"seq {seq}" in result.output and "chain" in result.output
    assert store_digest(path) == before  # verifying changes nothing


def test_a_changed_tail_record_refuses_the_open_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "w"
    world = create(path, limits=TAIL_ONLY)  # checkpointed at genesis only
    world.send(EVENT, inc("a", 1))
    world.send(EVENT, inc("b", 2))
    world.store.close()  # as a kill would: the two sends are a journal tail
    second = 4  # genesis 1, the first send 2..3, the second send's input
    rewrite_record(path, second, flip_entropy)
    before = store_digest(path)
    with pytest.raises(ChainBrokenError) as raised:
        reopen(path)
    assert raised.value.code == "world.chain_broken"
    assert raised.value.detail["seq"] == second
    with pytest.raises(ChainBrokenError), World.reading(path):
        pass
    assert store_digest(path) == before


@pytest.mark.parametrize("raw", [b"\xd9\xd9\xf7\xff", b"\xd9\xd9\xf7\x18\x01", b"\x01"])
def test_undecodable_tail_bytes_refuse_the_open_as_a_chain_break(
    tmp_path: Path, raw: bytes
) -> None:
    """The open hashes the tail's bytes as stored, without decoding them first: bytes that
    are not canonical CBOR break the chain at their flush, before the fold reads them."""
    path = tmp_path / "w"
    world = create(path, limits=TAIL_ONLY)
    world.send(EVENT, inc("a", 1))
    world.send(EVENT, inc("b", 2))
    world.store.close()
    env = lmdb.open(str(path / "store"), max_dbs=8)
    with env.begin(write=True, db=env.open_db(b"journal")) as txn:
        txn.put((5).to_bytes(8, "big"), raw)  # the second send's step record
    env.close()
    before = store_digest(path)
    with pytest.raises(ChainBrokenError) as raised:
        reopen(path)
    assert raised.value.detail["seq"] == 4  # the first record of the flush that wrote it
    assert store_digest(path) == before


def test_an_untouched_tail_reopens_and_goes_on_chaining(tmp_path: Path) -> None:
    path = tmp_path / "w"
    world = create(path, limits=TAIL_ONLY)
    world.send(EVENT, inc("a", 1))
    world.store.close()
    with reopen(path, limits=TAIL_ONLY) as world:
        world.send(EVENT, inc("a", 2))
    integrity.verify_integrity(path)
    assert replay.verify_replay(path).ok


def test_a_changed_record_before_the_checkpoint_is_found_by_verify(tmp_path: Path) -> None:
    """Opening checks only the tail; verify checks from genesis."""
    path = tmp_path / "w"
    counter_world(path, sends_after_snapshot=0)
    rewrite_record(path, 2, flip_entropy)
    with pytest.raises(ChainBrokenError) as raised:
        integrity.verify_integrity(path)
    assert raised.value.detail["seq"] == 2


def test_a_world_from_before_chains_gets_one_from_genesis_at_its_first_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w"
    counter_world(path)
    _strip_chain(path)
    with World.reading(path) as world:
        assert world.journaler.chain is None  # read-only: nothing to chain
    assert replay.verify_replay(path).ok  # an old head is compared without a chain
    with reopen(path) as world:
        world.send(EVENT, inc("z", 1))
        world.snapshot()
    report = integrity.verify_integrity(path)
    assert report.chain.witnesses >= 2
    assert replay.verify_replay(path).ok


def _strip_chain(path: Path) -> None:
    """Make the world look as one written before chains: no chain in its head, no chain
    head, no key, no signed heads in meta."""
    with open_store(path) as store:
        head: Any = store.cas.get_value(Hash(str(store.meta.get("world.head"))))
        del head["chain"]
        with store.batch() as batch:
            batch.meta_put("world.head", str(batch.cas_put_value(head)))
            for key in (journal_chain.META_CHAIN, worldkey.META_SIGNED, worldkey.META_PUBLIC_KEY):
                batch.meta_delete(key)
    (path / worldkey.KEY_FILE).unlink()


# -- CAS integrity -----------------------------------------------------------------------


def test_verify_names_a_damaged_or_missing_blob(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path)
    with open_store(path, readonly=True) as store:
        head: Any = store.cas.get_value(Hash(str(store.meta.get("world.head"))))
        root = Hash(str(next(iter(head["roots"].values()))))
        state = next(
            Hash(str(r["state"]))
            for _, r in store.journal.read(1)
            if isinstance(r, dict) and r["kind"] == records.STEP
        )
    env = lmdb.open(str(path / "store"), max_dbs=8)
    with env.begin(write=True, db=env.open_db(b"cas")) as txn:
        txn.put(root.digest, b"\xa0")  # other bytes under the root's name
    env.close()
    before = store_digest(path)
    with pytest.raises(integrity.CasBrokenError) as raised:
        integrity.verify_integrity(path)
    assert raised.value.code == "world.cas_broken" and raised.value.detail["hash"] == root
    assert store_digest(path) == before
    env = lmdb.open(str(path / "store"), max_dbs=8)
    with env.begin(write=True, db=env.open_db(b"cas")) as txn:
        txn.put(root.digest, b"")
        txn.delete(root.digest)
        assert txn.get(state.digest) is not None
    env.close()
    with pytest.raises(integrity.CasBrokenError):
        integrity.verify_integrity(path)


# -- the world key and exports -----------------------------------------------------------


def test_a_world_key_is_a_0600_file_outside_the_store(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path)
    key_file = path / worldkey.KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    seed = bytes.fromhex(key_file.read_text().strip())
    assert seed not in (path / "store" / "data.mdb").read_bytes()
    from aos.kernel.signing.signatures import public_key_of

    assert public_key(path) == public_key_of(seed)


def test_an_export_verifies_with_only_the_public_key(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path)
    out = tmp_path / "journal.export"
    made = export.export_world(path, out)
    with open_store(path, readonly=True) as store:
        end = store.journal.head()
    assert made.records == end and made.authenticated_seq == end
    checked = export.verify_export(out, public_key(path))
    assert (checked.records, checked.authenticated_seq, checked.chain) == (end, end, made.chain)
    key_hex = public_key(path).hex()
    runner = CliRunner()
    result = runner.invoke(aos_main, ["world", "key", "--world", str(path)])
    assert result.exit_code == 0 and result.output.strip() == key_hex
    result = runner.invoke(
        aos_main, ["world", "verify", "--export", str(out), "--public-key", key_hex]
    )
    assert result.exit_code == 0, result.output
    assert f"through seq {end}" in result.output


def test_a_changed_export_record_is_named(tmp_path: Path) -> None:
    path = tmp_path / "w"
    seq = counter_world(path)
    out = tmp_path / "journal.export"
    export.export_world(path, out)
    value: Any = cbor.decode(out.read_bytes(), bytes_max=1 << 30)
    record: Any = cbor.decode(value["records"][seq - 1])
    flip_entropy(record)
    value["records"][seq - 1] = cbor.encode(record)
    out.write_bytes(cbor.encode(value))
    with pytest.raises(ChainBrokenError) as raised:
        export.verify_export(out, public_key(path))
    assert raised.value.detail["seq"] == seq


def test_an_export_checked_with_another_key_or_forged_signature_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w"
    counter_world(path)
    out = tmp_path / "journal.export"
    export.export_world(path, out)
    with pytest.raises(ChainSignatureInvalidError):
        export.verify_export(out, bytes(32))
    value: Any = cbor.decode(out.read_bytes(), bytes_max=1 << 30)
    signature = bytearray(value["signed"][0][2])
    signature[5] ^= 0xFF
    value["signed"][0][2] = bytes(signature)
    out.write_bytes(cbor.encode(value))
    with pytest.raises(ChainSignatureInvalidError) as raised:
        export.verify_export(out, public_key(path))
    assert raised.value.code == "world.chain_signature_invalid"


def test_export_refuses_a_broken_chain_and_writes_nothing(tmp_path: Path) -> None:
    """An export signs the current head, so it must never sign a changed journal."""
    path = tmp_path / "w"
    seq = counter_world(path)
    rewrite_record(path, seq, flip_entropy)
    out = tmp_path / "journal.export"
    with pytest.raises(ChainBrokenError):
        export.export_world(path, out)
    assert not out.exists() and list(tmp_path.glob(".journal.export*")) == []


def test_export_bytes_max_is_enforced_at_the_edge(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path)
    out = tmp_path / "journal.export"
    size = export.export_world(path, out).bytes
    assert export.export_world(path, out, bytes_max=size).bytes == size
    export.verify_export(out, public_key(path), bytes_max=size)
    with pytest.raises(export.ExportTooLargeError) as raised:
        export.export_world(path, tmp_path / "small", bytes_max=size - 1)
    assert raised.value.detail["limit"] == "export_bytes_max"
    assert not (tmp_path / "small").exists()
    with pytest.raises(export.ExportTooLargeError):
        export.verify_export(out, public_key(path), bytes_max=size - 1)


@pytest.mark.parametrize(
    "content",
    [b"", b"not cbor", cbor.encode({"format": "other"}), cbor.encode([1, 2])],
)
def test_a_file_that_is_not_an_export_is_refused(tmp_path: Path, content: bytes) -> None:
    out = tmp_path / "x.export"
    out.write_bytes(content)
    with pytest.raises(export.ExportInvalidError):
        export.verify_export(out, bytes(32))


def test_an_export_without_a_signed_head_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path)
    out = tmp_path / "journal.export"
    export.export_world(path, out)
    value: Any = cbor.decode(out.read_bytes(), bytes_max=1 << 30)
    value["signed"] = []
    out.write_bytes(cbor.encode(value))
    with pytest.raises(export.ExportInvalidError):
        export.verify_export(out, public_key(path))


def test_a_world_without_a_key_cannot_export(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path)
    _strip_chain(path)
    with reopen(path) as world:
        world.snapshot()  # no key file: nothing is signed
    with open_store(path, readonly=True) as store:
        assert worldkey.signed_heads(store) == []
    with pytest.raises(WorldKeyMissingError):
        export.export_world(path, tmp_path / "out")
    integrity.verify_integrity(path)


def test_verify_cli_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(aos_main, ["world", "verify", "--export", str(tmp_path / "x")])
    assert result.exit_code == 2 and "--public-key" in result.output
    result = runner.invoke(
        aos_main,
        ["world", "verify", "--export", str(tmp_path / "x"), "--public-key", "zz"],
    )
    assert result.exit_code == 2


def test_a_replay_from_a_snapshot_checks_the_chain_from_the_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "w"
    seq = counter_world(path)
    rewrite_record(path, seq, flip_entropy)
    report = replay.verify_replay(path, from_snapshot=str(seq - 1))
    assert report.start_seq == seq and report.divergence is not None
    assert (report.divergence.what, report.divergence.seq) == ("chain_broken", seq)
    assert report.divergence.kind == records.DOMAIN_EVENT


def test_a_changed_chain_mark_is_a_break_at_its_seq(tmp_path: Path) -> None:
    path = tmp_path / "w"
    seq = counter_world(path)
    with open_store(path) as store:
        mark = journal_chain.mark_key(seq + 1)  # the flush of that send ends at its step
        assert isinstance(store.meta.get(mark), bytes)
        store.meta.put(mark, bytes(32))
    with pytest.raises(ChainBrokenError) as raised:
        integrity.verify_integrity(path)
    assert raised.value.detail["seq"] == seq


def test_a_world_from_before_chains_killed_after_its_first_flush_reopens(tmp_path: Path) -> None:
    path = tmp_path / "w"
    counter_world(path)
    _strip_chain(path)
    world = reopen(path, limits=TAIL_ONLY)
    world.send(EVENT, inc("z", 1))
    world.store.close()  # as a kill would
    with reopen(path, limits=TAIL_ONLY) as world:
        world.send(EVENT, inc("z", 2))
        assert world.reader.state("demo/counter@1", "z")["count"] == 3
    integrity.verify_integrity(path)
    assert replay.verify_replay(path).ok
