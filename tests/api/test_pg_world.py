"""`aos.create(path, store=URL)` and `aos.open(URL)` on a PostgreSQL flow world (spec/11
§12.1): the world lives in the database, is opened again by its store URL with its adapter
keys named, and runs a playbook's python tasks the same."""

from __future__ import annotations

from pathlib import Path

import pytest

import aos

HELLO = Path(__file__).resolve().parents[2] / "flows" / "examples" / "hello.yaml"


def test_a_postgresql_flow_world_by_its_directory_and_by_its_url(
    pg_store_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"{pg_store_dsn}?world=api-flows"
    with aos.create(tmp_path / "w", store=url) as flows:
        first = flows.run(HELLO).wait()
    assert first.ok and (tmp_path / "w" / "store" / "url").is_file()
    with aos.open(tmp_path / "w") as flows:
        assert flows.execution(first.exec).wait().result == {"sum": 14}
    with aos.open(url, keys=tmp_path / "w.keys") as flows:
        second = flows.run("examples/hello-playbook").wait()
        assert second.ok and flows.executions().count == 2
    monkeypatch.delenv("AOS_FLOW_KEYS", raising=False)
    with pytest.raises(aos.AosError) as no_keys:
        aos.open(url)
    assert no_keys.value.code == "flow.local_world_invalid"
