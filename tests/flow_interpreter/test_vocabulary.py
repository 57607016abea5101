"""The interpreter (a component: it cannot import the host package) keeps its own copy of the
definition's vocabulary. The copies must say the same as aos.flows, or a definition the host
accepts would be one the interpreter reads differently."""

from __future__ import annotations

from aos_flow import definition, tasks

from aos.flows.define import cfd
from aos.flows.define.tool_schema import TOOL_KINDS
from aos.flows.limits import EXECUTION_LIMITS
from aos.flows.tools import dispatch


def test_actions_agree() -> None:
    assert tuple(definition.ACTIONS) == tuple(cfd.ACTIONS)
    assert set(tasks.HANDLERS) == set(cfd.ACTIONS)
    assert set(definition.ACTION_READERS) == set(cfd.ACTIONS)


def test_tool_kinds_and_their_effects_agree() -> None:
    assert tuple(definition.TOOL_KINDS) == tuple(TOOL_KINDS)
    assert {dispatch.EFFECT_OF_KIND[kind] for kind in TOOL_KINDS} == set(dispatch.TOOL_EFFECTS)


def test_execution_limit_defaults_agree() -> None:
    host = {name: default for name, (default, _ceiling) in EXECUTION_LIMITS.items()}
    assert host == definition.LIMIT_DEFAULTS


def test_rule_actions_agree() -> None:
    then = cfd.Then.model_json_schema()["properties"]["do"]
    allowed = then.get("enum") or [item["const"] for item in then.get("anyOf", [])]
    assert set(definition.RULE_ACTIONS) == set(allowed)
