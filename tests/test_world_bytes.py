"""The bytes a world writes are fixed: a world built through every kind of input (events,
receipts accepted and refused, timers, an operator action, governance, snapshots) with pinned
stamps writes a journal and snapshots whose hashes are the constants below, computed before
the world was split into its parts (World, WorldReader, the journaler, the replaying world).
A change to any of those that moves one byte of the journal or of a snapshot fails here."""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from aos.kernel.audit import replay
from aos.kernel.governance import proposals as governance
from aos.kernel.governance import shadow
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.store import open_store
from aos.kernel.world import records
from aos.kernel.world.errors import WorldCorruptError
from aos.kernel.world.operations import CELL_RESET, Operation
from tests.test_governance import approve, drop_noop_patch, settle_all
from tests.test_receipts import open_intents, receipt
from tests.test_replay import _rewrite_record
from tests.test_world import SCRIPTED, create, engine, ping, reopen

KEYED = "demo/keyed@1"
PING = "demo/Ping@1"

# Computed on main at 8d340d2, before the split (the head: the last head checkpoint); pinned
# again when Python components began to link the SDK's compiled codec (issue 34): the scripted
# module's bytes, so its hash, moved, and with it everything named after the manifest (world
# id, signatures, snapshots, proposals). Compared record by record with the previous main's
# journal: no other field of any record differs, and every state is the same.
JOURNAL_HASH = "blake3:9de64c91dae23795085af1386dc64f0ba191275314b94ef1925518aed49a6a2d"
SNAPSHOTS = [
    (13, "blake3:f3e097d6b5170edb1bfdcc3c23326c2773b780b1f7a20c25dbc988875a246fca"),
    (48, "blake3:a87a282da9d793aefb99a4b78b73c0adbaa50782fa95dab8d2441e12e2ee95fd"),
]
HEIGHT = 48
HEAD = "blake3:51966ae1d3f93c24a3e35f270891f3354707b3cef6dcc06a310536404ac947f5"


def every_input_world(path: Path) -> None:
    with create(path, SCRIPTED, clock="manual") as world:
        first, second = open_intents(world, 2, "a")
        world.settle(receipt(world, first))
        world.run_to_idle()
        world.send(PING, ping("t", "timer", 50))
        world.snapshot()
        world.jump_next_timer()
        world.send(PING, ping("b", "emit"))
        world.send(PING, ping("c", "trap"))
        world.send(PING, ping("c"))  # dropped: the cell failed
        world.operate(Operation(CELL_RESET, workflow=KEYED, key=world.reader.key_bytes(KEYED, "c")))
        world.run_to_idle()
        world.settle(receipt(world, second, payload={"ok": "not a bool"}))
        world.run_to_idle()
        with pytest.raises(Exception):  # noqa: B017 - any refusal: it is journaled
            world.settle(receipt(world, "blake3:" + "0" * 64))
        with pytest.raises(Exception):  # noqa: B017
            world.send(PING, ping("k" * 2000))
        world.send(PING, ping("x", "effect", 1))
        proposal = governance.propose(world, drop_noop_patch(world))
    report = shadow.shadow(path, proposal, engine=engine())
    with reopen(path) as world:
        governance.record_shadow(world, proposal, report)
        approve(world, proposal)
        settle_all(world)
    report = shadow.shadow(path, proposal, engine=engine())
    with reopen(path) as world:
        governance.record_shadow(world, proposal, report)
        governance.apply(world, proposal)
        world.send(PING, ping("y"))
        world.snapshot()


def test_the_journal_and_snapshots_are_the_bytes_main_wrote(tmp_path: Path) -> None:
    every_input_world(tmp_path / "w")
    with reopen(tmp_path / "w") as world:
        raws = [raw for _, raw in world.store.journal.read_encoded(1, world.height)]
        snapshots = [(seq, str(hash_)) for seq, hash_ in world.snapshots]
        height = world.height
        head = str(world.store.meta.get("world.head"))
        kinds = {record["kind"] for _, record in world.store.journal.read(1)}  # type: ignore[index]
    assert kinds == set(records.KINDS)
    assert (str(hash_bytes(b"".join(raws))), snapshots, height, head) == (
        JOURNAL_HASH,
        SNAPSHOTS,
        HEIGHT,
        HEAD,
    )
    assert replay.verify_replay(tmp_path / "w").ok


def _lose_head_and_snapshots(path: Path) -> None:
    """Delete the head checkpoint's blob and forget the snapshots: the head must be rebuilt
    from genesis, through every governance action."""
    env = lmdb.open(str(path / "store"), max_dbs=8)
    with env.begin(write=True, db=env.open_db(b"cas")) as txn:
        assert txn.delete(Hash(HEAD).digest)
    env.close()
    with open_store(path) as store, store.batch() as batch:
        batch.meta_put("world.snapshots", [])


@pytest.mark.parametrize("rebuild", ["open", "replay.recover"])
def test_a_lost_head_is_rebuilt_to_the_same_bytes_through_every_governance_action(
    tmp_path: Path, rebuild: str
) -> None:
    """Opening takes recorded governance actions as recorded (kernel/world/governance_records.py);
    `replay.recover` checks them again as governance does: both rebuild the head main wrote."""
    path = tmp_path / "w"
    every_input_world(path)
    _lose_head_and_snapshots(path)
    if rebuild == "replay.recover":
        assert replay.recover(path).start == "genesis"
    with reopen(path) as world:
        assert str(world.store.meta.get("world.head")) == HEAD


def test_a_recorded_governance_action_missing_its_fields_fails_the_rebuild_closed(
    tmp_path: Path,
) -> None:
    """Opening applies recorded actions as recorded, but only whole ones: an approval without
    its approver is not an action the world can take, so the head is not rebuilt and the
    open fails with `world.corrupt`, naming the record."""
    path = tmp_path / "w"
    every_input_world(path)
    with reopen(path) as world:
        [seq] = [
            seq
            for seq, record in world.store.journal.read(1)
            if record["kind"] == records.GOVERNANCE and record["action"] == "approved"  # type: ignore[index]
        ]
    _rewrite_record(path, seq, lambda record: record.pop("approver"))
    _lose_head_and_snapshots(path)
    with pytest.raises(WorldCorruptError) as refused:
        reopen(path)
    assert refused.value.code == "world.corrupt" and refused.value.detail["seq"] == seq
