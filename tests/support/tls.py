"""Test certificates made with the openssl CLI: a CA, certificates it signs, and a stranger's CA.

EC P-256 keys (fast to make); every certificate names 127.0.0.1 and localhost, so one serves
every daemon of a test cluster on loopback (and as its client certificate).
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


@dataclass(frozen=True)
class Pki:
    ca: Path
    ca_key: Path
    dir: Path

    def issue(self, name: str, days: int = 2) -> tuple[Path, Path]:
        """A certificate ``name`` signed by this CA, for 127.0.0.1 and localhost, usable as a
        server and as a client certificate: (cert, key)."""
        cert, key, csr = (self.dir / f"{name}.{ext}" for ext in ("crt", "key", "csr"))
        ext = self.dir / f"{name}.ext"
        ext.write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
        )
        openssl("req", *_EC, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}")
        openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.ca_key),
            "-CAcreateserial", "-out", str(cert), "-days", str(days), "-extfile", str(ext),
        )  # fmt: skip
        key.chmod(0o600)
        return cert, key


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30)


def make_ca(directory: Path, name: str = "test-ca") -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = directory / f"{name}.crt", directory / f"{name}.key"
    openssl(
        "req", "-x509", *_EC, "-keyout", str(ca_key), "-out", str(ca), "-days", "2",
        "-subj", f"/CN={name}",
    )  # fmt: skip
    return Pki(ca, ca_key, directory)


async def peer_name(port: int, context: ssl.SSLContext) -> str:
    """The common name of the certificate the TLS port ``port`` on 127.0.0.1 presents to a new
    connection."""
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        cert = writer.get_extra_info("peercert")
        return str(dict(x[0] for x in cert["subject"])["commonName"])
    finally:
        writer.close()
