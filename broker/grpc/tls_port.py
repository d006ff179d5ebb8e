"""The certificate of the gRPC TLS port (``grpc_tls_listen``), reloaded on SIGHUP.

grpcio's server asks :meth:`ServerCertificate.fetch` for a newer configuration at each new
connection's handshake (``grpc.dynamic_ssl_server_credentials``); :meth:`reload` reads the
files again and hands them to the next handshake, so connections made after a reload get the
new certificate and the ones already open go on, as on the broker's other TLS ports
(:mod:`remoting.tls`). A reload that fails keeps the pair loaded before.
"""

from __future__ import annotations

import ssl
import threading
from pathlib import Path
from typing import Any

import grpc
import structlog

from remoting.tls import TlsError, TlsFiles, check_key_file, server_context

log = structlog.get_logger(__name__)


class ServerCertificate:
    """The gRPC TLS port's certificate chain and key, read from ``cert`` and ``key``. Raises
    :class:`remoting.tls.TlsError` (naming the file) when they cannot be used."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert = cert
        self.key = key
        self._lock = threading.Lock()
        self._pending: Any = None
        self._initial = self._read()

    def credentials(self) -> Any:
        """The server credentials to pass to ``add_secure_port``."""
        return grpc.dynamic_ssl_server_credentials(
            self._initial, self.fetch, require_client_authentication=False
        )

    def reload(self) -> None:
        """Read the files again; the next handshakes use them. On
        :class:`remoting.tls.TlsError` nothing changes."""
        config = self._read()
        with self._lock:
            self._pending = config

    def fetch(self) -> Any:
        """grpcio's callback (a thread of its own, at each handshake): the configuration read
        by the last reload, once; None when nothing changed."""
        with self._lock:
            config, self._pending = self._pending, None
        return config

    def _read(self) -> Any:
        # The same checks as the other TLS ports: a key anyone may read, a missing file or a
        # key of another certificate is refused with the file's name.
        check_key_file(self.key, "TLS key")
        server_context(TlsFiles(cert=self.cert, key=self.key), ssl.CERT_NONE)
        return grpc.ssl_server_certificate_configuration(
            [(self.key.read_bytes(), self.cert.read_bytes())]
        )


def reload_logged(certificate: ServerCertificate) -> bool:
    """SIGHUP's work on the gRPC TLS port, its outcome logged in one line as
    :func:`remoting.tls.reload_tls` logs the other ports'. True when the new files are in use."""
    try:
        certificate.reload()
    except TlsError as exc:
        log.error(
            "gRPC TLS reload failed; the certificate loaded before stays in use", error=str(exc)
        )
        return False
    log.info("gRPC TLS certificate reloaded", cert=str(certificate.cert))
    return True
