"""A flow world whose in-process adapters read secrets from a file beside it, with a tool
config (spec/11 §2.1) written there too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aos.flows.serve.local import LocalAdapters
from aos.flows.tools.config import load_config
from tests.flows_world.support import FlowWorld, make_flow_world


def secrets_world(path: Path, secrets_file: dict[str, Any], **config: Any) -> FlowWorld:
    """A flow world at `path`; its keychain source is `secrets.yaml` in the parent folder,
    and `config` adds sections to its tool config (`duckdb={"data_dir": "db"}`)."""
    (path.parent / "secrets.yaml").write_text(json.dumps(secrets_file))
    sections = {"keychain": {"file": "secrets.yaml", "env_prefix": None}, **config}
    (path.parent / "tools.yaml").write_text(json.dumps(sections))
    flows = make_flow_world(path)
    flows.adapters = LocalAdapters(
        flows.world, flows.keys, config=load_config(path.parent / "tools.yaml")
    )
    return flows
