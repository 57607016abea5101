"""What failed, in NoETL 2.13.1's words (`noetl/core/errors.py`, `ErrorKind` and its
`classify_*` functions), as every tool error names it beside aos's code and the flow error
category (`error_kind`, spec/11 §3.3)."""

from __future__ import annotations

from typing import Any

import pytest

from aos.flows.tools.outcomes import failure, timed_out


@pytest.mark.parametrize(
    ("code", "kind", "message", "extra", "named"),
    [
        ("http.status", "transport", "", {"http": {"status": 502}}, "server_error"),
        ("http.status", "transport", "", {"http": {"status": 418}}, "client_error"),
        ("http.status", "transport", "", {"http": {}}, "unknown"),
        ("http.connect", "transport", "refused", {}, "connection"),
        ("http.transport", "transport", "reset", {}, "connection"),
        (
            "python.raised",
            "expression",
            "ValueError: x",
            {"py": {"exception": "ValueError"}},
            "schema",
        ),
        (
            "python.raised",
            "expression",
            "IndexError: x",
            {"py": {"exception": "IndexError"}},
            "schema",
        ),
        (
            "python.raised",
            "expression",
            "JSONDecodeError: x",
            {"py": {"exception": "JSONDecodeError"}},
            "parse",
        ),
        (
            "python.raised",
            "expression",
            "RuntimeError: bad json",
            {"py": {"exception": "RuntimeError"}},
            "parse",
        ),
        (
            "python.raised",
            "expression",
            "OSError: timeout",
            {"py": {"exception": "OSError"}},
            "timeout",
        ),
        (
            "python.raised",
            "expression",
            "ZeroDivisionError: x",
            {"py": {"exception": "ZeroDivisionError"}},
            "unknown",
        ),
        ("python.result_invalid", "transport", "", {}, "schema"),
        ("python.code_refused", "authorization", "", {}, "auth"),
        ("python.crashed", "transport", "", {}, "unknown"),
        ("postgres.error", "transport", "", {"pg": {"sqlstate": "40P01"}}, "db_deadlock"),
        ("postgres.error", "transport", "", {"pg": {"sqlstate": "23505"}}, "db_constraint"),
        ("postgres.error", "transport", "", {"pg": {"sqlstate": "08006"}}, "db_connection"),
        ("postgres.error", "transport", "", {"pg": {"sqlstate": "57014"}}, "db_timeout"),
        ("postgres.error", "authorization", "", {"pg": {"sqlstate": "28000"}}, "auth"),
        ("postgres.error", "transport", "", {"pg": {"sqlstate": "42P01"}}, "unknown"),
        ("postgres.connect", "transport", "", {}, "db_connection"),
        ("postgres.auth", "authorization", "", {}, "auth"),
        ("keychain.missing", "authorization", "", {}, "auth"),
        ("shell.start", "transport", "", {}, "unknown"),
    ],
)
def test_each_failure_names_noetls_kind(
    code: str, kind: str, message: str, extra: dict[str, Any], named: str
) -> None:
    payload = failure(code, message, kind=kind, **extra).payload
    assert (payload["kind"], payload["code"], payload["error_kind"]) == (kind, code, named)


def test_a_timeout_is_noetls_timeout_or_a_databases() -> None:
    assert timed_out("http.timeout", "late").payload["error_kind"] == "timeout"
    assert timed_out("postgres.timeout", "late").payload["error_kind"] == "db_timeout"
