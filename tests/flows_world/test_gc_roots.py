"""What `aos world gc --apply` keeps of a flow world (spec/05 §5.2): the definitions deployed
flows run (a blob a deploy event names) and the results steps wrote by reference (a step's
`writes`), so that after a collection a deployed flow still starts and a finished loop's
results still read; what nothing names goes."""

from __future__ import annotations

from pathlib import Path

from aos.flows.serve import flow_operations as ops
from aos.flows.serve.local import LocalAdapters
from aos.kernel.audit import gc
from aos.kernel.world.world import World
from tests.flows_world.support import make_flow_world
from tests.flows_world.test_results_by_reference import LOOP
from tests.test_world import engine


def test_deployed_definitions_and_written_results_survive_gc(tmp_path: Path) -> None:
    flows = make_flow_world(tmp_path / "w")
    deployed = flows.deploy(LOOP)
    ops.start(flows.world, deployed.name, workload={"n": 30, "size": 5_000}, exec_id="before")
    flows.adapters.drain()
    before = flows.state("before")
    assert before["status"] == "completed", ops.failure(before)
    results = before["business"]["steps"]["fan"]["results"]
    assert set(results) == {"$ref", "size"}  # the loop's results went by reference
    orphan = flows.world.put_blob(b"nothing journaled names this")
    flows.world.close()

    report = gc.collect(flows.path, apply=True)

    assert report.garbage_objects >= 1
    with World.open(flows.path, engine=engine()) as world:
        assert not world.store.cas.has(orphan)
        assert ops.definition_blob(world, deployed.definition) is not None
        assert world.read_blob(results["$ref"]) is not None
        ops.start(world, deployed.name, workload={"n": 3, "size": 10}, exec_id="after")
        LocalAdapters(world, flows.keys).drain()
        after = ops.status(world, "after")
        assert after["status"] == "completed", ops.failure(after)
