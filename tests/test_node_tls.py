"""TLS (spec/04 §9.8): `aos node up --tls-cert --tls-key [--tls-client-ca]` serves HTTPS, and
mutual TLS with a client CA; the CLI (`aos --ca`), the flow client and the adapter SDK verify
the node against a private CA and present a client certificate; what cannot be used is
`tls.config_invalid`; a handshake that never comes is closed at the head timeout; a
PostgreSQL store URL keeps libpq's TLS parameters, and a store verifies its server by them.
The CAs are made here, with `cryptography`, for each test."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import pwd
import shutil
import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
from click.testing import CliRunner
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from aos.cli.main import main
from aos.flows.serve.flow_client import NodeFlows
from aos.kernel.adapters.sdk import AdapterNodeRefusedError, NodeClient, RetryPolicy
from aos.kernel.errors import AosError
from aos.kernel.node.errors import NodeUnreachableError
from aos.kernel.node.tls import (
    CA_ENV,
    CLIENT_CERT_ENV,
    CLIENT_KEY_ENV,
    TlsConfigError,
    TlsFiles,
    client_verify,
)
from aos.kernel.signing.keys import write_seed
from aos.kernel.store.errors import StoreUnavailableError
from aos.kernel.store.pg_store import open_pg_store
from aos.kernel.store.url import parse_store_url
from tests.auth_fixtures import admin_token, node_http
from tests.pg_cluster import PgCluster
from tests.test_node_process import ADAPTER, make_world, node_process
from tests.test_receipts import ADAPTER_SEED

TLS_ENV = (CA_ENV, CLIENT_CERT_ENV, CLIENT_KEY_ENV)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


class Authority:
    """A throwaway certificate authority that signs leaf certificates into a folder."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.name = name
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"aos test {name}")])
        self.subject = subject
        self.cert = (
            self._builder(subject, self.key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.path = folder / f"{name}-ca.pem"
        self.path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def _builder(
        self, subject: x509.Name, public_key: ec.EllipticCurvePublicKey
    ) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(getattr(self, "subject", subject))
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    def issue(self, name: str, *, server: bool) -> Pair:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        builder = self._builder(subject, key.public_key()).add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        if server:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        pair = Pair(self.folder / f"{name}.pem", self.folder / f"{name}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pair.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        pair.key.chmod(0o600)
        return pair


@pytest.fixture(name="ca")
def ca_fixture(tmp_path: Path) -> Authority:
    return Authority(tmp_path, "node")


@pytest.fixture(autouse=True)
def no_tls_env() -> Iterator[None]:
    """Each test starts without the client TLS variables, and `aos --ca` setting them in
    this process is undone after it."""
    saved = {variable: os.environ.pop(variable, None) for variable in TLS_ENV}
    yield
    for variable, value in saved.items():
        os.environ.pop(variable, None)
        if value is not None:
            os.environ[variable] = value


def served(ca: Authority, *extra: str) -> list[str]:
    pair = ca.issue("node", server=True)
    return ["--tls-cert", str(pair.cert), "--tls-key", str(pair.key), *extra]


def test_a_node_serves_https_that_a_private_ca_verifies(tmp_path: Path, ca: Authority) -> None:
    key_file = tmp_path / "human.key"
    write_seed(key_file, ADAPTER_SEED)
    human = ["--human-adapter", ADAPTER, "--human-key", str(key_file)]
    with node_process(make_world(tmp_path / "w"), *served(ca, *human)) as (url, _):
        assert url.startswith("https://127.0.0.1:")
        trusted = ssl.create_default_context(cafile=ca.path)
        assert node_http.get(f"{url}/v1/world", verify=trusted).status_code == 200
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{url}/v1/world")  # the system's CAs do not know it
        runner = CliRunner()
        unverified = runner.invoke(main, ["task", "ls", "--node", url, "--json"])
        assert json.loads(unverified.stdout)["error"]["code"] == "node.unreachable"
        listed = runner.invoke(main, ["--ca", str(ca.path), "task", "ls", "--node", url, "--json"])
        assert listed.exit_code == 0, listed.output
        assert json.loads(listed.stdout) == {"adapter": ADAPTER, "tasks": []}


def test_the_flow_client_and_the_adapter_sdk_verify_with_aos_ca(
    tmp_path: Path, ca: Authority, monkeypatch: pytest.MonkeyPatch
) -> None:
    with node_process(make_world(tmp_path / "w"), *served(ca)) as (url, _):
        with pytest.raises(NodeUnreachableError), NodeFlows(url) as flows:
            flows.listing()
        sdk = NodeClient(url, retry=RetryPolicy(attempts_max=1))
        with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
            sdk.request("GET", "/v1/world")
        sdk.close()
        monkeypatch.setenv(CA_ENV, str(ca.path))
        assert flow_answer(url) == "world.workflow_unknown"  # the node's own answer
        assert node_answer(url) == "auth.unauthenticated"  # the node's own typed refusal


def flow_answer(url: str) -> str:
    """The code of the node's answer to a flow listing (the world has no flows)."""
    with pytest.raises(AosError) as refused, NodeFlows(url, token=admin_token(url)) as flows:
        flows.listing()
    return refused.value.code


def node_answer(url: str) -> str:
    """The code of the node's answer to the adapter SDK's unsigned read: an answer at all
    means the TLS handshake was verified both ways."""
    sdk = NodeClient(url, retry=RetryPolicy(attempts_max=1))
    try:
        with pytest.raises(AdapterNodeRefusedError) as refused:
            sdk.request("GET", "/v1/world")
    finally:
        sdk.close()
    return str(refused.value.detail["node_code"])


def test_mutual_tls_admits_only_clients_the_client_ca_signed(
    tmp_path: Path, ca: Authority, monkeypatch: pytest.MonkeyPatch
) -> None:
    clients = Authority(tmp_path, "clients")
    strangers = Authority(tmp_path, "strangers")
    member = clients.issue("member", server=False)
    stranger = strangers.issue("stranger", server=False)
    options = served(ca, "--tls-client-ca", str(clients.path))
    with node_process(make_world(tmp_path / "w"), *options) as (url, _):
        for pair in (None, stranger):
            context = ssl.create_default_context(cafile=ca.path)
            if pair is not None:
                context.load_cert_chain(pair.cert, pair.key)
            with pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)):
                httpx.get(f"{url}/v1/world", verify=context).raise_for_status()
        monkeypatch.setenv(CA_ENV, str(ca.path))
        monkeypatch.setenv(CLIENT_CERT_ENV, str(member.cert))
        monkeypatch.setenv(CLIENT_KEY_ENV, str(member.key))
        assert flow_answer(url) == "world.workflow_unknown"
        assert node_answer(url) == "auth.unauthenticated"  # the node's own typed refusal


def test_tls_files_that_cannot_be_used_are_refused(tmp_path: Path, ca: Authority) -> None:
    pair = ca.issue("node", server=True)
    with pytest.raises(TlsConfigError):
        TlsFiles.given(str(pair.cert), None, None)
    with pytest.raises(TlsConfigError):
        TlsFiles.given(None, None, str(ca.path))
    other = Authority(tmp_path, "other").issue("other", server=True)
    with pytest.raises(TlsConfigError, match="cannot use"):
        TlsFiles.given(str(pair.cert), str(other.key), None)  # not the certificate's key
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    os.environ[CA_ENV] = str(tmp_path / "gone.pem")  # a client's stale CA: said when used
    with pytest.raises(TlsConfigError), NodeFlows("https://127.0.0.1:1") as flows:
        flows.listing()
    assert client_verify("http://127.0.0.1:1") is False  # a plain node never reads it
    world = make_world(tmp_path / "w")
    up = ["node", "up", "--world", str(world), "--bind", "127.0.0.1:0", "--json"]
    refused = CliRunner().invoke(
        main, [*up, "--tls-cert", str(garbage), "--tls-key", str(pair.key)]
    )
    assert refused.exit_code == 1
    assert json.loads(refused.stdout)["error"]["code"] == "tls.config_invalid"


def test_a_postgresql_store_verifies_its_server_as_the_url_says(
    tmp_path: Path, ca: Authority
) -> None:
    with PgCluster.start() as cluster:
        pair = ca.issue("postgres", server=True)
        for source, name in ((pair.cert, "server.crt"), (pair.key, "server.key")):
            target = cluster.data / name
            shutil.copyfile(source, target)
            target.chmod(0o600)
            if cluster.user is not None:
                record = pwd.getpwnam(cluster.user)
                os.chown(target, record.pw_uid, record.pw_gid)
        cluster.psql("ALTER SYSTEM SET ssl = on; SELECT pg_reload_conf();")
        stranger = Authority(tmp_path, "stranger")
        base = cluster.dsn() + "?world=tls&sslmode=verify-full&sslrootcert="
        with pytest.raises(StoreUnavailableError, match="certificate verify failed"):
            location = parse_store_url(base + str(stranger.path))
            open_pg_store(location.conninfo, location.world, connect_wait_ms_max=0)
        location = parse_store_url(base + str(ca.path))
        open_pg_store(location.conninfo, location.world, sync=False).close()
        with psycopg.connect(location.conninfo) as conn:
            row = conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            assert row.fetchone() == (True,)


def test_a_postgresql_store_url_keeps_its_tls_parameters() -> None:
    location = parse_store_url(
        "postgresql://aos@db.example/aos?world=shop&sslmode=verify-full&sslrootcert=/etc/ca.pem"
    )
    assert location.world == "shop"
    assert location.conninfo == (
        "postgresql://aos@db.example/aos?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem"
    )


def test_a_tls_handshake_that_never_comes_is_closed_at_the_head_timeout(
    tmp_path: Path, ca: Authority
) -> None:
    options = served(ca, "--header-timeout-ms", "1000")
    with node_process(make_world(tmp_path / "w"), *options) as (url, _):
        host, port = url.split("//", 1)[1].rsplit(":", 1)
        silent = socket.create_connection((host, int(port)))
        silent.settimeout(10)
        started = time.monotonic()
        assert silent.recv(1) == b""  # closed by the node, no byte ever sent
        assert time.monotonic() - started < 5
        silent.close()
        trusted = ssl.create_default_context(cafile=ca.path)
        assert node_http.get(f"{url}/v1/world", verify=trusted).status_code == 200
