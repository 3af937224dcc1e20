"""The Flower federation's key material: a CA, the SuperLink's certificate, a key pair per
SuperNode and the shared secrets, as PEM/OpenSSH text (pure `cryptography`, no Flower).

What Flower 1.42 takes, read in its source: the SuperLink serves its Fleet, Control and Runtime
APIs over TLS from `--ssl-certfile/--ssl-keyfile` (uvicorn; `--ssl-ca-certfile` is handed to
the SuperExec it starts); a SuperNode verifies it with `--root-certificates` (the CA) and
proves who it is with `--auth-supernode-private-key`, an EC key on a NIST curve in OpenSSH
format (`load_ssh_private_key`), whose OpenSSH public key is registered with the SuperLink
(`flwr supernode register`, the Control API's RegisterNode). The Control API token and the
SuperExec secrets are random text (pipeline.federated.superlink says who reads them).

Both the local rehearsal (pipeline.federated.credentials writes these to files) and `baton k8s`
(k8s.federated puts them in Secrets) use this module; `k8s` never imports `pipeline`, hence
here. Operator material is checked here too (`check_server_certificate`), so both refuse the
same mistakes with the same words.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import ipaddress
import secrets
from collections.abc import Iterable, Sequence

CURVE_BITS = 384  # P-384: Flower's docs use it for node keys; a NIST curve as it requires
LOOPBACK = ("127.0.0.1", "localhost")  # the SuperExec dials the SuperLink's Runtime API here


@dataclasses.dataclass(frozen=True)
class Authority:
    """A CA: its certificate (what every SuperNode and CLI trusts) and its private key."""

    cert_pem: str
    key_pem: str


@dataclasses.dataclass(frozen=True)
class ServerIdentity:
    """The SuperLink's certificate (signed by the CA) and private key, PEM."""

    cert_pem: str
    key_pem: str


@dataclasses.dataclass(frozen=True)
class NodeKeyPair:
    """A SuperNode's authentication key pair in OpenSSH format."""

    private_openssh: str
    public_openssh: str


def _ec() -> object:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP384R1())


def _pem_key(key: object) -> str:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode()


def _name(common: str) -> object:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Baton federation"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_authority(common_name: str = "Baton federation CA", days: int = 365) -> Authority:
    """A self-signed CA that signs the SuperLink's certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization

    key = _ec()
    now = _dt.datetime.now(_dt.UTC)
    name = _name(common_name)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)  # type: ignore[arg-type]
            .public_key(key.public_key())  # type: ignore[attr-defined]
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(minutes=5))
            .not_valid_after(now + _dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA384()))  # type: ignore[arg-type]
    return Authority(cert.public_bytes(serialization.Encoding.PEM).decode(), _pem_key(key))


def _san(hosts: Iterable[str]) -> list[object]:
    from cryptography import x509

    out: list[object] = []
    for h in dict.fromkeys(hosts):  # ordered, no repeats
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            out.append(x509.DNSName(h))
    return out


def issue_server(ca: Authority, hosts: Sequence[str], days: int = 365) -> ServerIdentity:
    """The SuperLink's certificate for `hosts` (names and IPs the SuperNodes dial; the
    loopback names are always added: the SuperExec dials the Runtime API there)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca_key = serialization.load_pem_private_key(ca.key_pem.encode(), None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.encode())
    key = _ec()
    now = _dt.datetime.now(_dt.UTC)
    names = [*hosts, *LOOPBACK]
    cert = (x509.CertificateBuilder().subject_name(_name(names[0]))  # type: ignore[arg-type]
            .issuer_name(ca_cert.subject).public_key(key.public_key())  # type: ignore[attr-defined]
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _dt.timedelta(minutes=5))
            .not_valid_after(now + _dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(_san(names)),  # type: ignore[arg-type]
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA384()))  # type: ignore[arg-type]
    return ServerIdentity(cert.public_bytes(serialization.Encoding.PEM).decode(), _pem_key(key))


def node_key_pair() -> NodeKeyPair:
    """A SuperNode's EC P-384 key pair, OpenSSH-encoded as Flower reads and registers it."""
    from cryptography.hazmat.primitives import serialization

    key = _ec()
    private = key.private_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return NodeKeyPair(private, public + "\n")


def token() -> str:
    """A random secret as text (the Control API token, a SuperExec secret): 256 bits, hex."""
    return secrets.token_hex(32)


def check_public_key(field: str, text: str) -> str | None:
    """None when `text` is an OpenSSH EC public key on a NIST curve, else what is wrong."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        key = serialization.load_ssh_public_key(text.strip().encode())
    except (ValueError, UnsupportedAlgorithm) as exc:
        return f"{field}: not an OpenSSH public key ({exc})"
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name not in (
            "secp256r1", "secp384r1", "secp521r1"):
        return (f"{field}: Flower registers EC keys on a NIST curve (P-256, P-384, P-521); "
                f"received a {type(key).__name__.lstrip('_')}")
    return None


def check_key_pair(field: str, private_openssh: str, public_openssh: str) -> str | None:
    """None when the OpenSSH private key is the public key's pair, else what is wrong."""
    from cryptography.hazmat.primitives import serialization

    try:
        key = serialization.load_ssh_private_key(private_openssh.encode(), None)
    except (ValueError, TypeError) as exc:
        return f"{field}: not an unencrypted OpenSSH private key ({exc})"
    mine = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                         serialization.PublicFormat.OpenSSH)
    theirs = public_openssh.split()[:2]
    if mine.decode().split()[:2] != theirs:
        return f"{field}: the private key is not the pair of public_key"
    return None


def check_server_certificate(field: str, cert_pem: str, ca_pem: str,
                             hosts: Sequence[str]) -> list[str]:
    """What is wrong with an operator's SuperLink certificate: not signed by the CA, expired,
    or missing one of `hosts` (the loopback names included) from its subjectAltName."""
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

    try:
        cert = x509.load_pem_x509_certificate(cert_pem.encode())
        ca = x509.load_pem_x509_certificate(ca_pem.encode())
    except ValueError as exc:
        return [f"{field}: not a PEM certificate ({exc})"]
    problems = []
    pub = ca.public_key()
    try:
        if isinstance(pub, ec.EllipticCurvePublicKey):
            pub.verify(cert.signature, cert.tbs_certificate_bytes,
                       ec.ECDSA(cert.signature_hash_algorithm))  # type: ignore[arg-type]
        elif isinstance(pub, rsa.RSAPublicKey):
            pub.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(),
                       cert.signature_hash_algorithm)  # type: ignore[arg-type]
        else:
            problems.append(f"{field}: the CA's key type {type(pub).__name__} is not checked here")
    except Exception:  # noqa: BLE001 - cryptography's InvalidSignature and friends
        problems.append(f"{field}: the certificate is not signed by the CA given in ca_certfile")
    if cert.not_valid_after_utc < _dt.datetime.now(_dt.UTC):
        problems.append(f"{field}: the certificate expired on {cert.not_valid_after_utc:%Y-%m-%d}")
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = {str(v) for v in san.get_values_for_type(x509.DNSName)} | {
            str(v) for v in san.get_values_for_type(x509.IPAddress)}
    except x509.ExtensionNotFound:
        names = set()
    missing = [h for h in dict.fromkeys([*hosts, LOOPBACK[0]]) if h not in names]
    if missing:
        problems.append(f"{field}: its subjectAltName lacks {missing} (the SuperNodes dial the "
                        "SuperLink by these, and its SuperExec by 127.0.0.1). Received names: "
                        f"{sorted(names)}")
    return problems
