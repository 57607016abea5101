"""The flow world: `manifests/flow` with this deployment's own adapter keys.

A world that runs flows needs the interpreter module and one adapter identity per tool kind
and for human tasks. The committed manifest carries placeholder public keys; `create` writes
a copy with keys generated for this world (private keys in a key folder, mode 0600, never in
the world) and creates the world from it. The copy names the interpreter an installed wheel
carries, with its pinned hash (`aos.flows.interpreter`), or else, in a checkout, the
interpreter's sources, which the world builds through the build cache.

    world, keys = create_flow_world(Path("orders"), keys_dir=Path("orders.keys"))
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aos.flows import interpreter
from aos.flows.serve.cell_status import EXEC_WORKFLOW as EXEC_WORKFLOW
from aos.kernel.package_data import package_path
from aos.kernel.signing.keys import read_seed, write_seed
from aos.kernel.signing.signatures import generate_seed, public_key_of
from aos.kernel.wasm import WasmEngine
from aos.kernel.world.world import CLOCK_WALL, World, WorldLimits
from aos.kernel.world_store import create_world

# Shipped inside this package (a link to manifests/flow in a checkout).
FLOW_MANIFEST_DATA = "world-manifest"

REGISTRY_WORKFLOW = "aos/FlowRegistry@1"
DEPLOY_EVENT = "aos/FlowDeploy@1"
START_EVENT = "aos/FlowStart@1"
SIGNAL_EVENT = "aos/FlowSignal@1"
CANCEL_EVENT = "aos/FlowCancel@1"
MIGRATE_EVENT = "aos/FlowMigrate@1"
HUMAN_EFFECT = "aos/human.task@1"

# Adapter identity -> the key file's name in a key folder.
ADAPTER_KEY_FILES = {
    "aos/echo@1": "echo.key",
    "aos/http@1": "http.key",
    "aos/python@1": "python.key",
    "aos/postgres@1": "postgres.key",
    "aos/duckdb@1": "duckdb.key",
    "aos/shell@1": "shell.key",
    "aos/transfer@1": "transfer.key",
    "aos/keychain@1": "keychain.key",
    "aos/file@1": "file.key",
    "aos/human@1": "human.key",
}
HUMAN_ADAPTER = "aos/human@1"

_ADAPTER_BLOCK = re.compile(r"(name: (?P<name>aos/[a-z]+@1)\npublic_key: )\"?[0-9a-f]{64}\"?")
_ARTIFACT_PATH = re.compile(r"(artifact:\n  path: ).*")


@dataclass(frozen=True)
class FlowKeys:
    """The adapter seeds of one flow world, by adapter name, and where they are kept."""

    seeds: dict[str, bytes]
    folder: Path | None

    def seed(self, adapter: str) -> bytes:
        return self.seeds[adapter]

    def key_file(self, adapter: str) -> Path:
        if self.folder is None:
            raise ValueError("these keys are not kept in a folder")
        return self.folder / ADAPTER_KEY_FILES[adapter]


def load_or_make_keys(folder: Path | None) -> FlowKeys:
    """Read the key folder's keys, making the missing ones (None: throwaway keys in memory,
    for `aos flow run --local` and tests)."""
    if folder is None:
        return FlowKeys({name: generate_seed() for name in ADAPTER_KEY_FILES}, None)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    seeds: dict[str, bytes] = {}
    for name, file_name in ADAPTER_KEY_FILES.items():
        path = folder / file_name
        if not path.exists():
            write_seed(path, generate_seed())
        seeds[name] = read_seed(path)
    return FlowKeys(seeds, folder)


def write_manifest(out_dir: Path, keys: FlowKeys) -> Path:
    """A copy of the flow manifest folder with these keys' public halves and the
    interpreter's artifact (see the module doc) named relative to where the copy is."""
    shutil.copytree(package_path("aos.flows", FLOW_MANIFEST_DATA), out_dir, dirs_exist_ok=True)
    effects = out_dir / "defs" / "effects.yaml"
    effects.write_text(_ADAPTER_BLOCK.sub(lambda m: _with_key(m, keys), effects.read_text()))
    workflows = out_dir / "defs" / "workflows.yaml"
    artifact = _interpreter_artifact(workflows.parent)
    workflows.write_text(_ARTIFACT_PATH.sub(lambda m: m.group(1) + artifact, workflows.read_text()))
    return out_dir


def _interpreter_artifact(folder: Path) -> str:
    """The `artifact:` lines after `path: `: the shipped component and its pinned hash (the
    loader refuses other bytes, `air.hash_mismatch`), else the sources' folder."""
    shipped = interpreter.shipped_component()
    if shipped is None:
        sources = interpreter.InterpreterSources.installed().module_dir.resolve()
        return os.path.relpath(sources, folder)  # artifact paths are relative
    component, pin = shipped
    return f'{os.path.relpath(component.resolve(), folder)}\n  hash: "{pin.wasm_hash}"'


def _with_key(match: re.Match[str], keys: FlowKeys) -> str:
    public = public_key_of(keys.seed(match.group("name"))).hex()
    return f'{match.group(1)}"{public}"'


def create_flow_world(
    path: Path,
    *,
    keys_dir: Path | None = None,
    clock: str = CLOCK_WALL,
    sync: bool = True,
    engine: WasmEngine | None = None,
    limits: WorldLimits | None = None,
    store_url: str | None = None,
    **options: Any,
) -> tuple[World, FlowKeys]:
    """Create a flow world at `path` with adapter keys from `keys_dir` (made if missing;
    None: throwaway keys), on the PostgreSQL world `store_url` names when given (`path` then
    points at it). Builds the interpreter module through the build cache."""
    keys = load_or_make_keys(keys_dir)
    with tempfile.TemporaryDirectory(prefix="aos-flow-manifest-") as scratch:
        manifest = write_manifest(Path(scratch) / "flow", keys)
        world = create_world(
            path,
            manifest,
            store_url=store_url,
            clock=clock,
            sync=sync,
            engine=engine,
            limits=limits,
            **options,
        )
    return world, keys


def default_keys_dir(world_path: Path) -> Path:
    """Where `aos flow world create` keeps a world's adapter keys: beside it, not in it."""
    return world_path.with_name(world_path.name + ".keys")


def is_flow_world(world: World) -> bool:
    return EXEC_WORKFLOW in world.runtime.workflows and REGISTRY_WORKFLOW in world.runtime.workflows


def environment_keys_dir() -> Path | None:
    found = os.environ.get("AOS_FLOW_KEYS")
    return Path(found) if found else None
