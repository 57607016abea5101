"""The flow interpreter component's entry module (spec/11): binds the world's `step` export
to the interpreter's workflow, `aos_flow.workflow` (the package holds the rest, so that no
module of the interpreter is imported under a generic top-level name)."""

from __future__ import annotations

from aos_flow.workflow import flow

from aos_sdk import export

WitWorld = export(flow)
