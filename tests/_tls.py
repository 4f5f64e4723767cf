"""A throwaway PKI and TLS-only redis-servers for tests/test_tls.py.

:func:`make_pki` writes a private CA, certificates it signs (servers and a client) and an
unrelated CA. It uses the ``cryptography`` package when it is installed (it comes with the
[adk] extra) and otherwise the ``openssl`` command; with neither the test is skipped (failed
under RAS_REQUIRE_SERVERS=1). ``RAS_TLS_CERTS=openssl`` forces the command, to check that
path where ``cryptography`` is installed. Nothing here touches the network.

:func:`start_tls_server` starts the ``redis-server`` on PATH listening on a free loopback
port with TLS only (``--port 0``); :meth:`TlsServer.stop` stops exactly that process.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from _servers import REQUIRE_SERVERS

__all__ = [
    "AuthClients",
    "KeyPair",
    "Pki",
    "TlsServer",
    "make_pki",
    "require_or_skip",
    "start_tls_server",
]

Generator = Literal["cryptography", "openssl"]
AuthClients = Literal["yes", "no", "optional"]

START_SECONDS = 20.0


def require_or_skip(reason: str) -> None:
    """Skips the test, or fails it when RAS_REQUIRE_SERVERS=1 (as CI sets)."""
    if REQUIRE_SERVERS:
        pytest.fail(f"{reason} but RAS_REQUIRE_SERVERS=1")
    pytest.skip(reason)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: Path
    """The private CA's certificate: it signed every certificate below."""
    server: KeyPair
    """For ``localhost`` and ``127.0.0.1`` (DNS and IP SANs), serverAuth."""
    localhost_only: KeyPair
    """For ``localhost`` only (no IP SAN): a hostname check against 127.0.0.1 fails."""
    client: KeyPair
    """A client certificate (clientAuth), for servers with ``--tls-auth-clients yes``."""
    other_ca: Path
    """An unrelated CA's certificate, which signed none of the above."""
    generator: Generator


def make_pki(directory: Path) -> Pki:
    """Writes the PKI under ``directory`` (valid from a day ago to two days from now)."""
    generator = _generator()
    directory.mkdir(parents=True, exist_ok=True)
    if generator == "cryptography":
        return _with_cryptography(directory)
    return _with_openssl(directory)


def _generator() -> Generator:
    forced = os.environ.get("RAS_TLS_CERTS")
    if forced not in (None, "", "cryptography", "openssl"):
        pytest.fail(f"RAS_TLS_CERTS must be cryptography or openssl, not {forced!r}")
    if forced != "openssl":
        try:
            import cryptography  # noqa: F401
        except ImportError:
            if forced == "cryptography":
                pytest.fail("RAS_TLS_CERTS=cryptography but cryptography is not installed")
        else:
            return "cryptography"
    if shutil.which("openssl") is None:
        require_or_skip("neither the cryptography package nor the openssl command is available")
    return "openssl"


# -- with the cryptography package -----------------------------------------------------------


def _with_cryptography(directory: Path) -> Pki:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.timezone.utc)

    def name(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    def write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )

    def write_cert(cert: x509.Certificate, path: Path) -> None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def builder(
        subject: str, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
    ) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
        )

    def make_ca(common_name: str, stem: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            builder(common_name, name(common_name), key)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
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
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()),
                critical=False,
            )
            .sign(key, hashes.SHA256())
        )
        write_cert(cert, directory / f"{stem}.crt")
        write_key(key, directory / f"{stem}.key")
        return cert, key

    ca_cert, ca_key = make_ca("redis-agent-sessions test CA", "ca")
    make_ca("an unrelated test CA", "other-ca")

    def leaf(
        stem: str, common_name: str, usage: x509.ObjectIdentifier, san: list[x509.GeneralName]
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        built = (
            builder(common_name, ca_cert.subject, key)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=True,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if san:
            built = built.add_extension(x509.SubjectAlternativeName(san), critical=False)
        pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
        write_cert(built.sign(ca_key, hashes.SHA256()), pair.cert)
        write_key(key, pair.key)
        return pair

    server_auth, client_auth = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH
    localhost = x509.DNSName("localhost")
    loopback = x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
    return Pki(
        ca=directory / "ca.crt",
        server=leaf("server", "localhost", server_auth, [localhost, loopback]),
        localhost_only=leaf("localhost-only", "localhost", server_auth, [localhost]),
        client=leaf("client", "ras-test-client", client_auth, []),
        other_ca=directory / "other-ca.crt",
        generator="cryptography",
    )


# -- with the openssl command ----------------------------------------------------------------

# Everything the commands read comes from here, not from the system's openssl.cnf.
_OPENSSL_CNF = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyAgreement
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
subjectAltName = DNS:localhost, IP:127.0.0.1
[localhost_only]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyAgreement
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
subjectAltName = DNS:localhost
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyAgreement
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
"""


def _with_openssl(directory: Path) -> Pki:
    cnf = directory / "openssl.cnf"
    cnf.write_text(_OPENSSL_CNF)

    def openssl(*args: str | Path) -> None:
        done = subprocess.run(
            ["openssl", *map(str, args)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode:
            pytest.fail(f"openssl {' '.join(map(str, args))} failed:\n{done.stderr}")

    def request(stem: str, common_name: str) -> Path:
        """A new P-256 key in ``<stem>.key`` and its signing request."""
        csr = directory / f"{stem}.csr"
        openssl(
            "req", "-new", "-config", cnf, "-newkey", "ec",
            "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", directory / f"{stem}.key", "-out", csr, "-subj", f"/CN={common_name}",
        )  # fmt: skip
        return csr

    def sign(stem: str, section: str, *issuer: str | Path) -> Path:
        cert = directory / f"{stem}.crt"
        openssl(
            "x509", "-req", "-in", directory / f"{stem}.csr", *issuer,
            "-set_serial", str(secrets.randbits(63)), "-days", "2", "-sha256",
            "-extfile", cnf, "-extensions", section, "-out", cert,
        )  # fmt: skip
        return cert

    for stem, common_name in (("ca", "redis-agent-sessions test CA"), ("other-ca", "unrelated")):
        request(stem, common_name)
        sign(stem, "ca", "-signkey", directory / f"{stem}.key")
    by_ca = ("-CA", directory / "ca.crt", "-CAkey", directory / "ca.key")
    pairs = {}
    for stem, common_name, section in (
        ("server", "localhost", "server"),
        ("localhost-only", "localhost", "localhost_only"),
        ("client", "ras-test-client", "client"),
    ):
        request(stem, common_name)
        pairs[stem] = KeyPair(sign(stem, section, *by_ca), directory / f"{stem}.key")
    return Pki(
        ca=directory / "ca.crt",
        server=pairs["server"],
        localhost_only=pairs["localhost-only"],
        client=pairs["client"],
        other_ca=directory / "other-ca.crt",
        generator="openssl",
    )


# -- TLS-only redis-servers ------------------------------------------------------------------


@dataclass
class TlsServer:
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    def tail(self) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stops the process this helper started, by its Popen handle."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_tls_server(
    directory: Path, pair: KeyPair, ca: Path, *, auth_clients: AuthClients
) -> TlsServer:
    """The redis-server on PATH, TLS only, on a free loopback port, serving ``pair`` and
    checking client certificates against ``ca`` as ``auth_clients`` says; once it accepts
    TCP connections. Skips without redis-server (fails under RAS_REQUIRE_SERVERS=1)."""
    binary = shutil.which("redis-server")
    if binary is None:
        require_or_skip("redis-server is not on PATH")
    assert binary is not None
    directory.mkdir(parents=True, exist_ok=True)
    last = ""
    for _ in range(3):  # another process may take the free port before the server binds it
        port = _free_port()
        log = directory / f"redis-{port}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    binary,
                    "--port", "0",
                    "--tls-port", str(port),
                    "--bind", "127.0.0.1",
                    "--tls-cert-file", str(pair.cert),
                    "--tls-key-file", str(pair.key),
                    "--tls-ca-cert-file", str(ca),
                    "--tls-auth-clients", auth_clients,
                    "--save", "",
                    "--appendonly", "no",
                    "--dir", str(directory),
                    "--daemonize", "no",
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        server = TlsServer(port, proc, log)
        deadline = time.monotonic() + START_SECONDS
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:
                time.sleep(0.05)
            else:
                return server
        server.stop()
        last = server.tail()
        if "Bad directive" in last and "tls-" in last:  # built without TLS
            require_or_skip(f"the redis-server on PATH has no TLS support:\n{last}")
        if "Address already in use" not in last:
            break
    pytest.fail(f"redis-server with TLS did not start:\n{last}")
