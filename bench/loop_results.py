"""What a long loop of large results costs, now that results go by reference (spec/11 §3.1).

    python -m bench.loop_results [--items 1000] [--item-bytes 20000] [--tool python|echo]
                                 [--no-sync] [--keep DIR]

Runs a NoETL v10 playbook on a fresh flow world with the tool adapters in process (as `aos
flow run --local` does): a sequential loop of `--items` python tasks, each returning a map
with a `--item-bytes` text, then a step that reads the loop's aggregate
(`{{ fan.results | length }}`). It drives the world one receipt at a time and prints one JSON
object: the execution's end, the wall time, the state's size (largest, and at the end), the
process's resident memory (VmRSS before the run and after it, and its peak: a first run on a
cold build cache compiles the interpreter, which the peak then includes) and the python
worker's (the adapter's child process, after the run), the journal (records and bytes, as
stored), the CAS (objects and bytes, and how many of them `aos world gc` would
keep) and the store on disk (allocated blocks of the world folder: LMDB reserves its file
16 MiB at a time, so this is coarse), each also per item. Before results went by reference this loop stopped at item ~50 (the step's output
over 1 MiB). Not run by `bench.run`: it measures a scenario, not a hot path.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from aos.flows.define.document import load_flow
from aos.flows.serve import flow_operations as ops
from aos.flows.serve.flow_world import create_flow_world
from aos.flows.serve.local import LocalAdapters
from aos.kernel import cbor
from aos.kernel.audit import gc
from aos.kernel.world.world import CLOCK_MANUAL, World

PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: loop-results, path: bench/loop-results}}
workload: {{n: {items}, size: {item_bytes}}}
workflow:
  - step: start
    tool: {{kind: python, code: "result = 0"}}
    next: {{arcs: [{{step: fan}}]}}
  - step: fan
    loop: {{in: "{{{{ range(workload.n) | list }}}}", iterator: i, spec: {{mode: sequential}}}}
    tool: {tool}
    next:
      arcs:
        - step: done
          when: "{{{{ event.name == 'loop.done' }}}}"
          args: {{count: "{{{{ fan.results | length }}}}"}}
  - step: done
    tool: {{kind: python, args: {{count: "{{{{ count }}}}"}}, code: "result = {{'count': count}}"}}
"""
TOOLS = {
    "python": (
        '{kind: python, args: {i: "{{ iter.i }}", size: "{{ workload.size }}"},'
        ' code: "result = {\\"i\\": i, \\"blob\\": \\"x\\" * size}"}'
    ),
    "echo": '{kind: echo, args: {i: "{{ iter.i }}", blob: "{{ \'x\' * workload.size }}"}}',
}
KIB = 1024


def rss_kib(pid: int | str = "self", field: str = "VmRSS") -> int:
    """A memory field of a process's status (VmRSS; RssAnon, the heap; RssFile, mostly the
    store's memory map), in KiB (Linux only; 0 when the process is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return 0
    return 0


def children_rss_kib() -> int:
    """The VmRSS of this process's live children (the python tool's worker)."""
    own = str(os.getpid())
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == own:
            total += rss_kib(stat.parent.name)
    return total


def journal_bytes(world: World) -> int:
    return sum(len(raw) for _, raw in world.store.journal.read_encoded(1, world.height))


def allocated_bytes(folder: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def run(items: int, item_bytes: int, tool: str, sync: bool, folder: Path) -> dict[str, Any]:
    text = PLAYBOOK.format(items=items, item_bytes=item_bytes, tool=TOOLS[tool])
    definition = load_flow(text, source="loop-results.yaml")
    world, keys = create_flow_world(folder / "world", clock=CLOCK_MANUAL, sync=sync)
    with world:
        adapters = LocalAdapters(world, keys)
        ops.deploy(world, definition)
        rss_before = rss_kib()
        anon_before = rss_kib(field="RssAnon")
        began = time.perf_counter()
        ops.start(world, definition.name, exec_id="loop")
        state_max = 0
        while world.reader.open_intents():
            adapters.drain(rounds_max=1)
            state_max = max(state_max, len(cbor.encode(ops.status(world, "loop"))))
        wall_s = time.perf_counter() - began
        rss_after, worker_rss = rss_kib(), children_rss_kib()
        anon, mapped = rss_kib(field="RssAnon"), rss_kib(field="RssFile")
        state = ops.status(world, "loop")
        records = world.height
        journal = journal_bytes(world)
    store = allocated_bytes(folder / "world")
    cas = gc.collect(folder / "world")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    steps = state["business"]["steps"]
    return {
        "items": items,
        "item_bytes": item_bytes,
        "tool": tool,
        "sync": sync,
        "status": state["status"],
        "error": ops.failure(state),
        "done": steps.get("done"),
        "aggregate": (steps.get("fan") or {}).get("results"),
        "wall_s": round(wall_s, 1),
        "wall_ms_per_item": round(wall_s * 1000 / items, 1),
        "state_bytes_max": state_max,
        "state_bytes_end": len(cbor.encode(state)),
        "rss_before_mib": round(rss_before / KIB, 1),
        "rss_after_mib": round(rss_after / KIB, 1),
        "rss_growth_kib_per_item": round((rss_after - rss_before) / items, 1),
        "rss_before_anon_mib": round(anon_before / KIB, 1),
        "rss_after_anon_mib": round(anon / KIB, 1),
        "rss_after_file_mib": round(mapped / KIB, 1),
        "rss_peak_mib": round(peak / KIB, 1),
        "python_worker_rss_mib": round(worker_rss / KIB, 1),
        "journal_records": records,
        "journal_records_per_item": round(records / items, 2),
        "journal_bytes": journal,
        "journal_bytes_per_item": round(journal / items),
        "cas_objects": cas.objects,
        "cas_bytes": cas.bytes,
        "cas_bytes_per_item": round(cas.bytes / items),
        "cas_live_bytes": cas.live_bytes,
        "store_bytes": store,
        "store_bytes_per_item": round(store / items),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--item-bytes", type=int, default=20_000)
    parser.add_argument("--tool", choices=sorted(TOOLS), default="python")
    parser.add_argument("--no-sync", action="store_true", help="no fsync per flush")
    parser.add_argument("--keep", type=Path, default=None, help="build the world here")
    args = parser.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=False)
        found = run(args.items, args.item_bytes, args.tool, not args.no_sync, args.keep)
    else:
        with tempfile.TemporaryDirectory(prefix="aos-loop-results-") as scratch:
            found = run(args.items, args.item_bytes, args.tool, not args.no_sync, Path(scratch))
    print(json.dumps(cbor.to_json(found), indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
