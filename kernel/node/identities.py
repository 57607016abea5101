"""Identities: who may call a node, with which scopes (spec/04-effects.md §9.8).

An identity has a name, a set of **scopes** (`read`, `read:params`, `send`, `operate`,
`deploy`, `govern`, `task`, `admin`), the **roles** it holds for human tasks, and a bearer
**token**: `aos_` and 43 characters of 32 random bytes, shown once when the identity is made
and stored only as its BLAKE3 hash, with an optional expiry and a revocation time. Nothing
here is journaled: identities are the node's door, not the world's history.

The identities of a world live in its directory (`identities.json`, mode 0600), beside the
human inbox and the owner record, so a world carries its own door to whichever node serves it
and one node serving several worlds (§9.6) keeps their callers apart; `aos node up
--identities FILE` points every world of a process at one file instead. `aos identity
create|list|revoke` writes the file (atomically, under a lock); a running node sees a change at
the next request (it compares the file's size, inode and change time), so a revocation takes
effect at once.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aos.kernel.errors import AosError
from aos.kernel.hashing import hash_bytes
from aos.kernel.node.audit import AuditLog

IDENTITIES_FILE_NAME = "identities.json"
"""The identities file, in the world directory."""
IDENTITIES_FILE_VERSION = 1
TOKEN_PREFIX = "aos_"
TOKEN_BYTES = 32
TOKEN_CHARS = len(TOKEN_PREFIX) + 43  # 32 bytes, unpadded base64url
IDENTITIES_MAX_DEFAULT = 10_000
"""Most identities (revoked ones included) one file holds."""
IDENTITIES_FILE_BYTES_MAX = 16 * 1024 * 1024
"""Largest identities file a node or the CLI reads."""
IDENTITY_NAME_CHARS_MAX = 128
IDENTITY_ROLES_MAX = 64
ROLE_CHARS_MAX = 128
TTL_MS_MAX = 10 * 365 * 24 * 3600 * 1000
"""Longest a token may live (ten years); no TTL means it lives until revoked."""
FIRST_ADMIN_NAME = "admin"

READ = "read"
READ_PARAMS = "read:params"
SEND = "send"
OPERATE = "operate"
DEPLOY = "deploy"
GOVERN = "govern"
TASK = "task"
ADMIN = "admin"
SCOPES = (READ, READ_PARAMS, SEND, OPERATE, DEPLOY, GOVERN, TASK, ADMIN)
"""Every scope an identity may hold; what each allows is in spec/04 §9.8."""

PUBLIC = "public"
AUTHENTICATED = "authenticated"
ADAPTER = "adapter"
PSEUDO_SCOPES = (PUBLIC, AUTHENTICATED, ADAPTER)
"""What a route may declare besides a scope: anyone; any identity; a signed adapter."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]*")
_TTL = re.compile(r"([0-9]{1,12})(ms|s|m|h|d)")
_TTL_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


# --------------------------------------------------------------------------------------------
# Errors


class AuthError(AosError):
    code = "auth.error"


class UnauthenticatedError(AuthError):
    code = "auth.unauthenticated"
    hint = (
        "send a token as `Authorization: Bearer aos_...` (the CLI: --token, AOS_TOKEN or "
        "--token-file); `aos identity create` makes one"
    )


class TokenInvalidError(AuthError):
    code = "auth.token_invalid"
    hint = "the token is not one of this world's identities: check --token / AOS_TOKEN"


class TokenExpiredError(AuthError):
    code = "auth.token_expired"
    hint = "the identity's TTL passed; `aos identity create` makes a new one"


class TokenRevokedError(AuthError):
    code = "auth.token_revoked"
    hint = "the identity was revoked (`aos identity list` shows when)"


class ForbiddenError(AuthError):
    code = "auth.forbidden"
    hint = (
        "the identity lacks the scope this route needs (detail: needs, has); an admin grants "
        "it with a new identity: `aos identity create NAME --scope SCOPE`"
    )


class ImpersonationError(AuthError):
    code = "auth.impersonation"
    hint = (
        "a request acts as its authenticated identity: `user`, `approver` and `roles` may only "
        "name that identity and roles it holds (leave them out)"
    )


class CrossSiteError(AuthError):
    code = "auth.cross_site"
    hint = "a state-changing request with the inspector's cookie must come from its own pages"


class IdentityExistsError(AuthError):
    code = "auth.identity_exists"
    hint = "names are never reused, even once revoked: choose another name"


class IdentityUnknownError(AuthError):
    code = "auth.identity_unknown"
    hint = "`aos identity list` shows the identities"


class IdentityInvalidError(AuthError):
    code = "auth.identity_invalid"
    hint = (
        "a name is letters, digits, '.', '_', '@', '-' (at most 128); scopes are "
        + ", ".join(SCOPES)
        + "; a TTL is digits and a unit: 90s, 30m, 12h, 30d"
    )


class IdentitiesUnreadableError(AuthError):
    code = "auth.identities_unreadable"
    hint = (
        "the identities file is missing its fields, too large or not JSON; restore it (a node "
        "refuses every caller meanwhile)"
    )


class IdentitiesFullError(AuthError):
    code = "auth.identities_full"
    hint = "the file holds identities_max identities; a node takes no more"


class InsecureBindError(AuthError):
    code = "auth.insecure_bind"
    hint = "--insecure-local serves without authentication, so only on a loopback address"


# --------------------------------------------------------------------------------------------
# Identities and tokens


@dataclass(frozen=True)
class Identity:
    name: str
    scopes: frozenset[str]
    roles: tuple[str, ...] = ()
    token_hash: str | None = None
    created_unix_ms: int = 0
    expires_unix_ms: int | None = None
    revoked_unix_ms: int | None = None

    def to_json(self, *, with_hash: bool = False) -> dict[str, Any]:
        found: dict[str, Any] = {
            "name": self.name,
            "scopes": sorted(self.scopes, key=SCOPES.index),
            "roles": list(self.roles),
            "created_unix_ms": self.created_unix_ms,
            "expires_unix_ms": self.expires_unix_ms,
            "revoked_unix_ms": self.revoked_unix_ms,
        }
        if with_hash:
            found["token_hash"] = self.token_hash
        return found

    @classmethod
    def from_json(cls, value: Any) -> Identity:
        fields = ("name", "scopes", "roles", "token_hash", "created_unix_ms")
        if not isinstance(value, dict) or not all(name in value for name in fields):
            raise IdentitiesUnreadableError("an identity lacks a field")
        scopes, roles = value["scopes"], value["roles"]
        if not isinstance(scopes, list) or not isinstance(roles, list):
            raise IdentitiesUnreadableError(f"identity {value['name']!r}: scopes, roles are lists")
        return cls(
            name=str(value["name"]),
            scopes=frozenset(str(s) for s in scopes) & frozenset(SCOPES),
            roles=tuple(str(r) for r in roles),
            token_hash=value["token_hash"] if isinstance(value["token_hash"], str) else None,
            created_unix_ms=_int(value["created_unix_ms"]),
            expires_unix_ms=_int_or_none(value.get("expires_unix_ms")),
            revoked_unix_ms=_int_or_none(value.get("revoked_unix_ms")),
        )


def _int(value: Any) -> int:
    if type(value) is not int:
        raise IdentitiesUnreadableError(f"{value!r} is not an integer")
    return value


def _int_or_none(value: Any) -> int | None:
    return None if value is None else _int(value)


def new_token() -> str:
    raw = secrets.token_bytes(TOKEN_BYTES)
    return TOKEN_PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def token_hash(token: str) -> str:
    """What the file keeps of a token: its BLAKE3 hash (a token is 256 random bits, so a
    fast hash is as good as a slow one)."""
    return str(hash_bytes(token.encode("utf-8")))


def parse_ttl(text: str) -> int:
    """A TTL as `aos identity create --ttl` takes it (`90s`, `30m`, `12h`, `30d`), in ms."""
    found = _TTL.fullmatch(text.strip())
    if found is None:
        raise IdentityInvalidError(f"{text!r} is not a TTL", path="$.ttl")
    ttl_ms = int(found.group(1)) * _TTL_UNIT_MS[found.group(2)]
    if not 0 < ttl_ms <= TTL_MS_MAX:
        raise IdentityInvalidError(f"a TTL is more than 0 and at most {TTL_MS_MAX} ms")
    return ttl_ms


def check_identity(name: str, scopes: Iterable[str], roles: Iterable[str]) -> None:
    if len(name) > IDENTITY_NAME_CHARS_MAX or _NAME.fullmatch(name) is None:
        raise IdentityInvalidError(f"{name[:IDENTITY_NAME_CHARS_MAX]!r} is no name", path="$.name")
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise IdentityInvalidError(f"unknown scopes {', '.join(unknown)}", path="$.scopes")
    roles = list(roles)
    if len(roles) > IDENTITY_ROLES_MAX:
        raise IdentityInvalidError(f"at most {IDENTITY_ROLES_MAX} roles", path="$.roles")
    for role in roles:
        if not role or len(role) > ROLE_CHARS_MAX:
            raise IdentityInvalidError(f"a role is 1..{ROLE_CHARS_MAX} characters", path="$.roles")


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


# --------------------------------------------------------------------------------------------
# The store


@dataclass
class _Loaded:
    by_name: dict[str, Identity] = field(default_factory=dict)
    by_hash: dict[str, Identity] = field(default_factory=dict)
    stamp: tuple[int, int, int] | None = None  # (inode, size, change time ns) when read
    error: AuthError | None = None  # the file could not be read: refuse everyone


class IdentityStore:
    """The identities of one file (or, with no `path`, of memory: tests, embedded nodes).
    Thread-safe; re-read when the file changes."""

    def __init__(
        self,
        path: Path | None,
        *,
        identities_max: int = IDENTITIES_MAX_DEFAULT,
        clock_ms: Callable[[], int] = wall_ms,
    ) -> None:
        self.path = path
        self.identities_max = identities_max
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._loaded = _Loaded()

    @classmethod
    def of_world(cls, world_dir: str | os.PathLike[str]) -> IdentityStore:
        return cls(Path(world_dir) / IDENTITIES_FILE_NAME)

    def exists(self) -> bool:
        return self.path is None or self.path.exists()

    # -- reading -----------------------------------------------------------------------------

    def identities(self) -> list[Identity]:
        return list(self._current().by_name.values())

    def get(self, name: str) -> Identity:
        found = self._current().by_name.get(name)
        if found is None:
            raise IdentityUnknownError(f"no identity {name}", name=name)
        return found

    def by_token(self, token: str) -> Identity:
        """The live identity whose token this is; raises `auth.*` otherwise."""
        loaded = self._current()
        if loaded.error is not None:
            raise loaded.error
        if not token.startswith(TOKEN_PREFIX) or len(token) != TOKEN_CHARS:
            raise TokenInvalidError("the token is not an aos token")
        identity = loaded.by_hash.get(token_hash(token))
        if identity is None:
            raise TokenInvalidError("no identity has this token")
        if identity.revoked_unix_ms is not None:
            raise TokenRevokedError(f"identity {identity.name} was revoked", name=identity.name)
        if identity.expires_unix_ms is not None and self._clock_ms() >= identity.expires_unix_ms:
            raise TokenExpiredError(f"identity {identity.name}'s token expired", name=identity.name)
        return identity

    def _current(self) -> _Loaded:
        if self.path is None:
            return self._loaded
        stamp = _stamp(self.path)
        with self._lock:
            if stamp != self._loaded.stamp:
                self._loaded = _read(self.path, stamp)
            return self._loaded

    # -- writing -----------------------------------------------------------------------------

    def create(
        self,
        name: str,
        scopes: Iterable[str],
        roles: Iterable[str] = (),
        *,
        ttl_ms: int | None = None,
    ) -> tuple[Identity, str]:
        """A new identity and its token (the only time the token is seen)."""
        scopes, roles = list(scopes), list(dict.fromkeys(roles))
        check_identity(name, scopes, roles)
        token = new_token()
        now = self._clock_ms()
        identity = Identity(
            name=name,
            scopes=frozenset(scopes),
            roles=tuple(roles),
            token_hash=token_hash(token),
            created_unix_ms=now,
            expires_unix_ms=None if ttl_ms is None else now + ttl_ms,
        )

        def add(found: dict[str, Identity]) -> None:
            if name in found:
                raise IdentityExistsError(f"an identity {name} exists", name=name)
            if len(found) >= self.identities_max:
                raise IdentitiesFullError(f"{len(found)} identities", limit=self.identities_max)
            found[name] = identity

        self._change(add)
        return identity, token

    def revoke(self, name: str) -> Identity:
        """Revoke `name`'s token (kept, marked, so the name is not reused)."""
        revoked: list[Identity] = []

        def mark(found: dict[str, Identity]) -> None:
            identity = found.get(name)
            if identity is None:
                raise IdentityUnknownError(f"no identity {name}", name=name)
            if identity.revoked_unix_ms is None:
                identity = replace(identity, revoked_unix_ms=self._clock_ms())
                found[name] = identity
            revoked.append(identity)

        self._change(mark)
        return revoked[0]

    def _change(self, change: Callable[[dict[str, Identity]], None]) -> None:
        if self.path is None:
            with self._lock:
                found = dict(self._loaded.by_name)
                change(found)
                self._loaded = _index(found.values(), None)
            return
        with _locked(self.path):
            loaded = _read(self.path, _stamp(self.path))
            if loaded.error is not None:
                raise loaded.error
            found = dict(loaded.by_name)
            change(found)
            _write(self.path, found.values())
        with self._lock:
            self._loaded = _Loaded(stamp=None)  # re-read at the next look


def _index(identities: Iterable[Identity], stamp: tuple[int, int, int] | None) -> _Loaded:
    loaded = _Loaded(stamp=stamp)
    for identity in identities:
        loaded.by_name[identity.name] = identity
        if identity.token_hash is not None:
            loaded.by_hash[identity.token_hash] = identity
    return loaded


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        status = path.stat()
    except FileNotFoundError:
        return None
    return status.st_ino, status.st_size, status.st_ctime_ns


def _read(path: Path, stamp: tuple[int, int, int] | None) -> _Loaded:
    """The file's identities; a missing file is none; one that cannot be read refuses all."""
    if stamp is None:
        return _Loaded(stamp=None)
    try:
        with open(path, "rb") as file:
            data = file.read(IDENTITIES_FILE_BYTES_MAX + 1)
        if len(data) > IDENTITIES_FILE_BYTES_MAX:
            raise IdentitiesUnreadableError(
                f"{path} is over {IDENTITIES_FILE_BYTES_MAX} bytes", limit=IDENTITIES_FILE_BYTES_MAX
            )
        value = json.loads(data.decode("utf-8"))
        if not isinstance(value, dict) or not isinstance(value.get("identities"), list):
            raise IdentitiesUnreadableError(f"{path} has no identities list")
        return _index((Identity.from_json(item) for item in value["identities"]), stamp)
    except AuthError as error:
        return _Loaded(stamp=stamp, error=error)
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as error:
        return _Loaded(stamp=stamp, error=IdentitiesUnreadableError(f"{path}: {error}"))


def _write(path: Path, identities: Iterable[Identity]) -> None:
    document = {
        "version": IDENTITIES_FILE_VERSION,
        "identities": [identity.to_json(with_hash=True) for identity in identities],
    }
    data = (json.dumps(document, indent=1, sort_keys=True) + "\n").encode("utf-8")
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One writer at a time (the CLI and a node's admin routes), across processes."""
    descriptor = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def create_first_admin(store: IdentityStore) -> tuple[Identity, str] | None:
    """The first identity of a store that has none: `admin`, with every scope. None when the
    store already has identities (or a file)."""
    if store.exists() and (store.path is not None or store.identities()):
        return None
    return store.create(FIRST_ADMIN_NAME, SCOPES)


# --------------------------------------------------------------------------------------------
# Callers


@dataclass(frozen=True)
class Principal:
    """The caller of one request: an identity, an adapter, or (insecure-local) the local
    user, whom the request itself names."""

    name: str
    scopes: frozenset[str]
    roles: tuple[str, ...] = ()
    kind: str = "identity"  # "identity", "adapter", "local" or "anonymous"

    def may(self, scope: str) -> bool:
        if scope == AUTHENTICATED:
            return self.kind in ("identity", "local")
        return scope in self.scopes

    @property
    def trusts_request(self) -> bool:
        """Insecure-local: the request's own `user` and `roles` are taken on trust."""
        return self.kind == "local"

    @classmethod
    def of(cls, identity: Identity) -> Principal:
        return cls(identity.name, identity.scopes, identity.roles)


ANONYMOUS = Principal("anonymous", frozenset({PUBLIC}), kind="anonymous")
LOCAL = Principal("local", frozenset(SCOPES), kind="local")


PAGE_KEY_BYTES = 32


class Authority:
    """A node's door: its identities, or none at all (`insecure_local`, loopback only)."""

    def __init__(
        self,
        store: IdentityStore | None,
        *,
        insecure_local: bool = False,
        audit: AuditLog | None = None,
    ) -> None:
        assert insecure_local or store is not None
        self.store = store
        self.insecure_local = insecure_local
        self.audit = audit or AuditLog(None)
        # This process's key for the inspector's page tokens (access.page_token): a restart
        # makes new ones, and a page from before it asks to be loaded again.
        self.page_key = secrets.token_bytes(PAGE_KEY_BYTES)

    @classmethod
    def in_memory(cls) -> Authority:
        return cls(IdentityStore(None))

    def identity(self, token: str) -> Principal:
        assert self.store is not None
        return Principal.of(self.store.by_token(token))
