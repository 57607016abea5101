"""TLS for a node and its clients (spec/04 §9.8).

A node serves HTTPS with `aos node up --tls-cert FILE --tls-key FILE`, and requires every
client to present a certificate its CA signed with `--tls-client-ca FILE` (mutual TLS).

Clients (the CLI's writes through a node and `aos task`, `aos flow --node`, the adapter SDK)
verify an `https://` node against the system's CAs, or against the CA bundle in `AOS_CA`
(`aos --ca FILE`) for a private CA; with `AOS_CLIENT_CERT` and `AOS_CLIENT_KEY`
(`aos --client-cert FILE --client-key FILE`) they present that certificate. A plain `http://`
node needs no TLS context, whose certificate store costs milliseconds to load.
"""

from __future__ import annotations

import functools
import os
import ssl
from dataclasses import dataclass
from typing import Any

from aos.kernel.errors import AosError

CA_ENV = "AOS_CA"
CLIENT_CERT_ENV = "AOS_CLIENT_CERT"
CLIENT_KEY_ENV = "AOS_CLIENT_KEY"


class TlsConfigError(AosError):
    """A certificate, key or CA file that cannot be used."""

    code = "tls.config_invalid"
    hint = (
        "certificates, keys and CA bundles are PEM files; a key must be the certificate's own "
        "(node: --tls-cert/--tls-key/--tls-client-ca; clients: AOS_CA, AOS_CLIENT_CERT/KEY)"
    )


@dataclass(frozen=True)
class TlsFiles:
    """A node's own TLS files."""

    cert: str
    key: str
    client_ca: str | None = None

    @classmethod
    def given(cls, cert: str | None, key: str | None, client_ca: str | None) -> TlsFiles | None:
        """The files `aos node up` was given (None: plain HTTP), checked by loading them."""
        if cert is None and key is None and client_ca is None:
            return None
        if cert is None or key is None:
            raise TlsConfigError(
                "give --tls-cert and --tls-key together (--tls-client-ca needs both)"
            )
        files = cls(cert, key, client_ca)
        files.server_context()  # a bad file is refused here, not at the first connection
        return files

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert, self.key)
            if self.client_ca is not None:
                context.load_verify_locations(cafile=self.client_ca)
                context.verify_mode = ssl.CERT_REQUIRED
        except (OSError, ssl.SSLError, ValueError) as error:
            raise TlsConfigError(f"cannot use the node's TLS files: {error}") from None
        return context


def uvicorn_options(files: TlsFiles | None) -> dict[str, Any]:
    """uvicorn's `Config` options serving `files` (none for plain HTTP): the context uvicorn
    builds from them is `server_context`'s (TLS 1.2 at least, Python's default)."""
    if files is None:
        return {}
    options: dict[str, Any] = {"ssl_certfile": files.cert, "ssl_keyfile": files.key}
    if files.client_ca is not None:
        options.update(ssl_ca_certs=files.client_ca, ssl_cert_reqs=ssl.CERT_REQUIRED)
    return options


def client_verify(url: str) -> ssl.SSLContext | bool:
    """What an HTTP client of the node at `url` verifies it with (httpx's `verify`): nothing
    for `http://`; for `https://` the system's CAs, or a context with `AOS_CA`'s and the client
    certificate of `AOS_CLIENT_CERT`/`AOS_CLIENT_KEY`."""
    if not url.startswith("https://"):
        return False
    return _client_context(
        os.environ.get(CA_ENV) or None,
        os.environ.get(CLIENT_CERT_ENV) or None,
        os.environ.get(CLIENT_KEY_ENV) or None,
    )


@functools.lru_cache(maxsize=8)
def _client_context(ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext | bool:
    if ca is None and cert is None:
        return True
    if (cert is None) != (key is None):
        raise TlsConfigError(f"give {CLIENT_CERT_ENV} and {CLIENT_KEY_ENV} together")
    try:
        context = ssl.create_default_context(cafile=ca)
        if cert is not None:
            context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError, ValueError) as error:
        raise TlsConfigError(f"cannot use the client's TLS files: {error}") from None
    return context
