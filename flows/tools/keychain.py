"""The keychain (spec/11 §1.7, §2.1): credentials a flow names, resolved by an effect, their
secrets never journaled.

A flow's `keychain: [{name, kind, ...spec}]` says which credentials it needs. Before its
first step runs, the interpreter asks for them with one effect, `aos/keychain.resolve@1`
(params `{exec, entries}`), settled by the keychain adapter `aos/keychain@1`. The adapter looks
each name up in its **source** and answers with **references**, never values:

    {entries: {NAME: "${keychain:NAME}"                      a secret that is one text
                   | {FIELD: "${keychain:NAME.FIELD}", ...}}, a secret that is a map
     refs:    {NAME: {kind, fingerprint}}}

The interpreter keeps `entries` as the template namespace `keychain` (so `{{ keychain.api }}`
renders to its placeholder) and starts the flow; a name the source does not have fails the
execution with kind `authorization` (`keychain.missing`). The adapter that runs a tool puts
the secret in right before use: the postgres tool's `auth: NAME` connects with entry NAME,
the http tool replaces placeholders in its `headers`, the shell tool in its `env`, each only
where the call's `Grants` allow (where the definition wrote `keychain.NAME`, never a
placeholder that came in a value). So the journal, the state, the annotations and every
effect's params hold only names and placeholders. `fingerprint` is a keyed BLAKE3 of the
secret (key derived from the keychain adapter's own signing seed): runs that used the same
secret have the same fingerprint, and it cannot be brute-forced from the journal without
that seed.

**Source** (for local development and single-host deployments): a secrets file (YAML or
JSON: `NAME: text` or `NAME: {field: text, ...}`), then environment variables
`<prefix><NAME>` (default prefix `AOS_SECRET_`; a value that starts with `{` is a JSON map).
Which file and prefix come from the flow world's tool config (`flows/tools/config.py`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3

from aos.flows.tools.outcomes import ToolOutcome, failure
from aos.kernel import cbor
from aos.kernel.adapters.sdk import Adapter, Lease, Result
from aos.kernel.errors import InvalidInputError
from aos.kernel.text import yamltext

KEYCHAIN_EFFECT = "aos/keychain.resolve@1"
KEYCHAIN_ADAPTER = "aos/keychain@1"
ENV_PREFIX_DEFAULT = "AOS_SECRET_"
SECRETS_FILE_BYTES_MAX = 1024 * 1024
SECRET_BYTES_MAX = 64 * 1024
SECRET_FIELDS_MAX = 64
ENTRIES_MAX = 256
"""As the CFD's `keychain_entries_max`: a resolve request names at most this many."""
GRANTS_MAX = 1024
"""A call lists at most this many places a secret may go (`Grants`)."""
GRANT_PATH_DEPTH_MAX = 64
"""A grant's path is at most this deep (a definition nests at most 64 levels)."""
FINGERPRINT_CONTEXT = "aos keychain fingerprint v1"
SCRUB_KEPT = frozenset({"kind", "error_kind", "code", "retryable", "pg"})

NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
PLACEHOLDER = re.compile(r"\$\{keychain:(" + NAME_PATTERN + r")(?:\.(" + NAME_PATTERN + r"))?\}")
_NAME = re.compile(NAME_PATTERN)

Secret = str | dict[str, str]


class KeychainMissingError(Exception):
    """A name (or a field of it) the source does not have."""


class KeychainSourceError(Exception):
    """The source itself is unusable (a secrets file that does not parse, too large, ...)."""


def placeholder(name: str, field_name: str | None = None) -> str:
    return "${keychain:" + name + ("" if field_name is None else "." + field_name) + "}"


@dataclass(frozen=True)
class Keychain:
    """Where secrets come from: `file` (read on each lookup, so a rotated secret applies to
    the next call), then `<env_prefix><NAME>` in `environ` (no prefix: no environment)."""

    file: Path | None = None
    env_prefix: str | None = ENV_PREFIX_DEFAULT
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    def lookup(self, name: str) -> Secret | None:
        if not _NAME.fullmatch(name):
            return None
        if self.file is not None:
            found = _read_file(self.file).get(name)
            if found is not None:
                return found
        if self.env_prefix is None:
            return None
        raw = self.environ.get(self.env_prefix + name)
        return None if raw is None else _env_secret(self.env_prefix + name, raw)

    def require(self, name: str) -> Secret:
        found = self.lookup(name)
        if found is None:
            raise KeychainMissingError(f"keychain entry {name!r} is not in {self.describe()}")
        return found

    def describe(self) -> str:
        """Where lookups go, for messages (names of places, never contents)."""
        places = []
        if self.file is not None:
            places.append(f"the secrets file {self.file}")
        if self.env_prefix is not None:
            places.append(f"the environment ({self.env_prefix}NAME)")
        return " or ".join(places) or "no source (the keychain is not configured)"


def _read_file(path: Path) -> dict[str, Secret]:
    try:
        with path.open("rb") as stream:
            data = stream.read(SECRETS_FILE_BYTES_MAX + 1)
    except OSError as error:
        raise KeychainSourceError(f"the secrets file {path}: {error.strerror}") from None
    if len(data) > SECRETS_FILE_BYTES_MAX:
        raise KeychainSourceError(f"the secrets file {path} is over {SECRETS_FILE_BYTES_MAX} bytes")
    try:
        loaded = yamltext.parse(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise KeychainSourceError(f"the secrets file {path} is not UTF-8 text") from None
    except InvalidInputError as error:
        # The parser's message may quote the file, which may hold a secret: say only where.
        line = error.detail.get("line")
        where = f" (line {line})" if line is not None else ""
        what = "is not YAML" if isinstance(error, yamltext.YamlInvalidError) else "is too large"
        raise KeychainSourceError(f"the secrets file {path} {what}{where}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise KeychainSourceError(f"the secrets file {path} is a map NAME -> secret")
    return {str(name): _secret(f"{path}: {name}", value) for name, value in loaded.items()}


def _env_secret(variable: str, raw: str) -> Secret:
    if not raw.startswith("{"):
        return _secret(variable, raw)
    try:
        value = json.loads(raw)
    except ValueError:
        raise KeychainSourceError(f"{variable} starts with {{ but is not a JSON map") from None
    return _secret(variable, value)


def _secret(where: str, value: Any) -> Secret:
    """Text, or a map of field names to text (numbers are kept as their text)."""
    if isinstance(value, str):
        if len(value.encode()) > SECRET_BYTES_MAX:
            raise KeychainSourceError(f"{where}: a secret is at most {SECRET_BYTES_MAX} bytes")
        return value
    if not isinstance(value, dict) or not value or len(value) > SECRET_FIELDS_MAX:
        raise KeychainSourceError(
            f"{where}: a secret is text or a map of 1..{SECRET_FIELDS_MAX} fields"
        )
    fields: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not _NAME.fullmatch(key):
            raise KeychainSourceError(f"{where}: field names are identifiers")
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise KeychainSourceError(f"{where}.{key}: a field is text or a number")
        fields[key] = str(item)
    if sum(len(v.encode()) for v in fields.values()) > SECRET_BYTES_MAX:
        raise KeychainSourceError(f"{where}: a secret is at most {SECRET_BYTES_MAX} bytes")
    return fields


# -- resolving (the keychain adapter) ----------------------------------------------------------


def fingerprint_key(seed: bytes) -> bytes:
    """The fingerprint key of a keychain adapter with signing seed `seed`."""
    return blake3.blake3(seed, derive_key_context=FINGERPRINT_CONTEXT).digest()


def resolve(params: Any, keychain: Keychain, key: bytes) -> ToolOutcome:
    """Settle an `aos/keychain.resolve@1` call: references for every entry, or an
    `authorization` error naming each missing one (never a value)."""
    entries = params.get("entries") if isinstance(params, dict) else None
    if not isinstance(entries, list) or len(entries) > ENTRIES_MAX:
        return failure(
            "keychain.invalid", f"params.entries is a list of at most {ENTRIES_MAX} entries"
        )
    references: dict[str, Any] = {}
    refs: dict[str, Any] = {}
    missing: list[str] = []
    for entry in entries:
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            return failure("keychain.invalid", "each entry is a map with an identifier name")
        try:
            secret = keychain.lookup(name)
        except KeychainSourceError as error:
            return failure("keychain.source", str(error), kind="authorization")
        if secret is None:
            missing.append(name)
            continue
        references[name] = references_of(name, secret)
        refs[name] = {"kind": entry.get("kind"), "fingerprint": fingerprint(secret, key)}
    if missing:
        return failure(
            "keychain.missing",
            f"keychain entries {missing} are not in {keychain.describe()}",
            kind="authorization",
            missing=missing,
        )
    return ToolOutcome("ok", {"entries": references, "refs": refs})


def make_keychain_adapter(
    *, seed: bytes, node: str, keychain: Keychain, name: str | None = None, **options: Any
) -> Adapter:
    """The keychain adapter (`aos adapter run keychain`): settles `aos/keychain.resolve@1`
    from `keychain`, fingerprints keyed by its own seed. `options` go to `Adapter`."""
    adapter = Adapter(name=name or KEYCHAIN_ADAPTER, seed=seed, node=node, **options)
    key = fingerprint_key(seed)

    @adapter.effect(KEYCHAIN_EFFECT)
    def handle(params: Any, lease: Lease) -> Result:
        return resolve(params, keychain, key).to_result()

    return adapter


def references_of(name: str, secret: Secret) -> Any:
    """What templates see for an entry: its placeholder, or one per field."""
    if isinstance(secret, str):
        return placeholder(name)
    return {field_name: placeholder(name, field_name) for field_name in secret}


def fingerprint(secret: Secret, key: bytes) -> str:
    return "blake3k:" + blake3.blake3(cbor.encode(secret), key=key).hexdigest()


# -- using (the tool adapters) -----------------------------------------------------------------

Path_ = tuple[str | int, ...]


class GrantsInvalidError(ValueError):
    """A call's `keychain` field is not a list of `{path, names}` within the bounds."""


@dataclass(frozen=True)
class Grants:
    """Where a call may have which entries' secrets put in (spec/11 §1.7): the call's
    `keychain` field, `[{path, names}]`, each path into the call's `tool` (the interpreter
    lists a template of the definition's tool that reads `keychain.NAME` of a declared entry).
    A placeholder is replaced only inside the value at such a path and only of its names, so
    one that arrived in a workload, a signal or a result is text wherever it lands."""

    paths: tuple[tuple[Path_, frozenset[str]], ...] = ()

    @classmethod
    def of_call(cls, params: Any) -> Grants:
        """The grants of an `aos/ToolCall@1` (none when it has no `keychain`)."""
        found = params.get("keychain") if isinstance(params, dict) else None
        if found is None:
            return cls()
        if not isinstance(found, list) or len(found) > GRANTS_MAX:
            raise GrantsInvalidError(f"keychain is a list of at most {GRANTS_MAX} grants")
        return cls(tuple(_grant(item) for item in found))

    def within(self, *prefix: str | int) -> Grants:
        """The grants of the value at `prefix`, with paths relative to it (a grant of a path
        around it covers all of it)."""
        inner = []
        for path, names in self.paths:
            common = min(len(path), len(prefix))
            if path[:common] == prefix[:common]:
                inner.append((path[len(prefix) :], names))
        return Grants(tuple(inner))

    def names_at(self, path: Path_) -> frozenset[str]:
        """The names granted to the value at `path` (by a grant of it or of a path around it)."""
        names: frozenset[str] = frozenset()
        for granted, found in self.paths:
            if path[: len(granted)] == granted:
                names |= found
        return names


def _grant(item: Any) -> tuple[Path_, frozenset[str]]:
    path = item.get("path") if isinstance(item, dict) else None
    names = item.get("names") if isinstance(item, dict) else None
    if (
        not isinstance(path, list)
        or len(path) > GRANT_PATH_DEPTH_MAX
        or not all(isinstance(p, str) or (type(p) is int and p >= 0) for p in path)
    ):
        raise GrantsInvalidError(
            f"a grant's path is a list of at most {GRANT_PATH_DEPTH_MAX} keys and indexes"
        )
    if (
        not isinstance(names, list)
        or len(names) > ENTRIES_MAX
        or not all(isinstance(n, str) and _NAME.fullmatch(n) for n in names)
    ):
        raise GrantsInvalidError(f"a grant's names are at most {ENTRIES_MAX} entry names")
    return tuple(path), frozenset(names)


def field_grants(tool: dict[str, Any], grants: Grants, name: str) -> Grants:
    """The grants of the tool's field `name` where the tool reads it: beside `spec`, else in
    it (`outcomes.with_spec`)."""
    return grants.within(name) if name in tool else grants.within("spec", name)


def substitute(
    value: Any,
    keychain: Keychain | None,
    grants: Grants,
    used: list[str] | None = None,
    path: Path_ = (),
) -> Any:
    """`value` (at `path` of what `grants` are relative to) with each placeholder that
    `grants` allows where it stands replaced by the secret it names (maps and lists walked;
    keys kept), each secret put in also appended to `used` (for `scrubbed`); any other
    placeholder stays text. Raises KeychainMissingError for an allowed name or field the
    source does not have, or a map secret used whole inside text."""
    if isinstance(value, str):
        allowed = grants.names_at(path) if "${keychain:" in value else frozenset()
        if not allowed:
            return value
        return PLACEHOLDER.sub(lambda match: _secret_text(match, keychain, used, allowed), value)
    if isinstance(value, dict):
        return {
            key: substitute(item, keychain, grants, used, (*path, key))
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [
            substitute(item, keychain, grants, used, (*path, index))
            for index, item in enumerate(value)
        ]
    return value


def _secret_text(
    match: re.Match[str], keychain: Keychain | None, used: list[str] | None, allowed: frozenset[str]
) -> str:
    name, field_name = match.group(1), match.group(2)
    if name not in allowed:
        return match.group(0)
    if keychain is None:
        raise KeychainMissingError("this adapter has no keychain configured")
    secret = keychain.require(name)
    if field_name is None:
        if not isinstance(secret, str):
            raise KeychainMissingError(
                f"keychain entry {name!r} is a map; name one of its fields ({name}.FIELD)"
            )
        text = secret
    elif isinstance(secret, str) or field_name not in secret:
        raise KeychainMissingError(f"keychain entry {name!r} has no field {field_name!r}")
    else:
        text = secret[field_name]
    if used is not None:
        used.append(text)
    return text


def keychain_failure(error: KeychainMissingError | KeychainSourceError) -> ToolOutcome:
    """The `authorization` outcome of a call whose secret could not be had."""
    code = "keychain.source" if isinstance(error, KeychainSourceError) else "keychain.missing"
    return failure(code, str(error), kind="authorization")


def scrubbed(outcome: ToolOutcome, secrets: list[str]) -> ToolOutcome:
    """`outcome` with every occurrence of each secret text in its payload's strings replaced
    by `***` (for messages that quote what they were given); the error's kind, code and
    details (`pg`) are kept as they are, whatever a short secret would match."""
    ordered = sorted({text for text in secrets if text}, key=len, reverse=True)
    if not ordered:
        return outcome

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            for text in ordered:
                value = value.replace(text, "***")
            return value
        if isinstance(value, dict):
            return {key: clean(item) for key, item in value.items()}
        if isinstance(value, list):
            return [clean(item) for item in value]
        return value

    payload = outcome.payload
    if outcome.status != "ok" and isinstance(payload, dict):
        return ToolOutcome(
            outcome.status,
            {k: v if k in SCRUB_KEPT else clean(v) for k, v in payload.items()},
        )
    return ToolOutcome(outcome.status, clean(payload))


def entry_name(auth: Any) -> str | None:
    """The entry an `auth` field names: `NAME`, `${keychain:NAME}`, NoETL's
    `{source: credential, key: NAME}`, or a rendered map reference (any of its
    placeholders)."""
    if isinstance(auth, str):
        match = PLACEHOLDER.fullmatch(auth)
        if match is not None:
            return match.group(1)
        return auth if _NAME.fullmatch(auth) else None
    if isinstance(auth, dict) and auth.get("source") == "credential" and "key" in auth:
        return entry_name(auth["key"])
    if isinstance(auth, dict) and auth:
        names = {entry_name(item) for item in auth.values()}
        return names.pop() if len(names) == 1 else None
    return None
