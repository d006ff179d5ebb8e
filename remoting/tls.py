"""TLS for the remoting ports, the HA port and the connections a daemon makes (Python's ssl).

A daemon with TLS on has one certificate and key (``tls_cert``, ``tls_key``), one CA file
(``tls_ca_file``: what it trusts, as a client and for client certificates) and one switch,
``tls_verify_client`` (mutual TLS on the cluster-internal ports). :class:`DaemonTls` builds every
context from them:

- the *internal* listener (the HA port): with ``verify_client`` a peer must present a certificate
  the CA signed, or the handshake fails;
- the *shared* listeners (a broker's client port, a controller's port: clients, brokers and Raft
  peers all use them): with ``verify_client`` a certificate is asked for but not required, one
  that is presented must verify, and :class:`ClientCertGate` refuses the cluster-internal
  requests (Raft messages, requests signed as the cluster, the broker-to-controller codes) of a
  connection that presented none. Clients and rmqctl need no certificate of their own;
- the *client* context, for every connection the daemon makes (to controllers, to its master's
  HA port, to Raft peers): verifies the server against the CA and presents the daemon's own
  certificate.

:meth:`DaemonTls.reload` (SIGHUP) reads the files again; the listeners keep one context each,
whose ``sni_callback`` hands every new handshake to the newest one, so connections made after a
reload use the new certificate and CA, and the ones already open go on untouched. A reload that
fails (a missing file, a key that does not match) keeps the old contexts and says why.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog

from protocol.codes import ControllerCode
from protocol.remoting import Frame
from protocol.request_auth import CLUSTER_ACCESS_KEY, claimed_signer
from remoting.auth import RefusalLog
from remoting.client import wall_ms
from remoting.server import Connection, Guard

log = structlog.get_logger(__name__)

#: The refusal's remark on a shared port, without a client certificate.
NO_CLIENT_CERT: Final = "client certificate required"
#: Its reason, in the refusal metrics and the log.
NO_CLIENT_CERT_REASON: Final = "no_client_cert"


class TlsError(ValueError):
    """A certificate, key or CA file that cannot be used; the message names the file."""


def check_key_file(path: Path, what: str) -> None:
    """Raise :class:`TlsError` when ``path`` cannot be read or anyone may read it (a daemon with
    security on refuses to start with a world-readable key)."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise TlsError(f"{what} {path}: {exc.strerror}") from None
    if mode & 0o007:
        raise TlsError(
            f"{what} {path} may be read by anyone (mode {mode & 0o777:o}); chmod 600 (or 640) it"
        )


@dataclass(frozen=True, kw_only=True)
class TlsFiles:
    cert: Path
    key: Path
    ca_file: Path | None = None
    verify_client: bool = False


def _load_chain(ctx: ssl.SSLContext, cert: Path, key: Path) -> None:
    try:
        ctx.load_cert_chain(str(cert), str(key))
    except FileNotFoundError as exc:
        raise TlsError(f"cannot read {exc.filename}: {exc.strerror}") from None
    except (ssl.SSLError, OSError) as exc:
        raise TlsError(f"certificate {cert} with key {key}: {exc}") from None


def _load_ca(ctx: ssl.SSLContext, ca_file: Path) -> None:
    try:
        ctx.load_verify_locations(cafile=str(ca_file))
    except FileNotFoundError as exc:
        raise TlsError(f"cannot read CA file {ca_file}: {exc.strerror}") from None
    except (ssl.SSLError, OSError) as exc:
        raise TlsError(f"CA file {ca_file}: {exc}") from None


def server_context(files: TlsFiles, client_cert: ssl.VerifyMode) -> ssl.SSLContext:
    """A listener's context: ``files``' certificate; client certificates checked against its CA
    as ``client_cert`` says (CERT_NONE, CERT_OPTIONAL or CERT_REQUIRED)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(ctx, files.cert, files.key)
    if client_cert != ssl.CERT_NONE:
        if files.ca_file is None:
            raise TlsError("verifying client certificates needs a CA file (tls_ca_file)")
        _load_ca(ctx, files.ca_file)
    ctx.verify_mode = client_cert
    return ctx


def client_context(
    ca_file: Path | None = None, cert: Path | None = None, key: Path | None = None
) -> ssl.SSLContext:
    """A connecting side's context: the server's certificate verified against ``ca_file`` (None:
    the system's CAs) with its host name or address; ``cert`` and ``key`` presented when the
    server asks for a client certificate."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_file is None:
        ctx.load_default_certs()
    else:
        _load_ca(ctx, ca_file)
    if cert is not None:
        _load_chain(ctx, cert, key if key is not None else cert)
    return ctx


class _Listener:
    """A listener's stable context: each handshake switches to the newest ``current``."""

    def __init__(self, first: ssl.SSLContext) -> None:
        self.current = first
        self.context = first
        first.sni_callback = self._switch

    def _switch(self, obj: ssl.SSLObject | ssl.SSLSocket, _name: str | None, _ctx: object) -> None:
        if obj.context is not self.current:
            obj.context = self.current


class DaemonTls:
    """Every TLS context of one daemon, built from its :class:`TlsFiles`; :meth:`reload` on
    SIGHUP. Raises :class:`TlsError` when the files cannot be used."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        check_key_file(files.key, "TLS key")
        internal, shared, client = self._build(files)
        self._internal = _Listener(internal)
        self._shared = _Listener(shared)
        self._client = client
        self.reloads = 0

    @staticmethod
    def _build(files: TlsFiles) -> tuple[ssl.SSLContext, ssl.SSLContext, ssl.SSLContext]:
        verify = files.verify_client
        internal = server_context(files, ssl.CERT_REQUIRED if verify else ssl.CERT_NONE)
        shared = server_context(files, ssl.CERT_OPTIONAL if verify else ssl.CERT_NONE)
        client = client_context(files.ca_file, files.cert, files.key)
        return internal, shared, client

    @property
    def internal_listener(self) -> ssl.SSLContext:
        """The context of a port only the cluster uses (the HA port)."""
        return self._internal.context

    @property
    def shared_listener(self) -> ssl.SSLContext:
        """The context of a port clients and the cluster share (client port, controller port)."""
        return self._shared.context

    @property
    def client(self) -> ssl.SSLContext:
        """The context of the connections this daemon makes (the newest)."""
        return self._client

    def reload(self) -> None:
        """Read the files again; new connections use them. On :class:`TlsError` nothing
        changes."""
        check_key_file(self.files.key, "TLS key")
        internal, shared, client = self._build(self.files)
        self._internal.current = internal
        self._shared.current = shared
        self._client = client
        self.reloads += 1


def has_client_cert(conn: Connection) -> bool:
    """Whether ``conn`` presented a certificate its server verified (cached per connection)."""
    known = conn.attrs.get("tls_client_cert")
    if known is None:
        tr = conn.transport
        known = bool(tr is not None and tr.get_extra_info("peercert"))
        conn.attrs["tls_client_cert"] = known
    return bool(known)


class ClientCertGate:
    """The guard of a shared port with ``tls_verify_client``: a cluster-internal request (a code
    in ``internal_codes``, RAFT_MESSAGE, or one signed as the cluster, AUTHENTICATE included) from
    a connection without a verified client certificate is refused NO_PERMISSION, counted
    (``on_refused("no_client_cert")``) and logged at most once per source host per minute with
    ``server``'s name, as the authentication guard's refusals are (:class:`RefusalLog`);
    everything else goes on to ``inner`` (the authentication guard, if any)."""

    def __init__(
        self,
        inner: Guard | None,
        internal_codes: Iterable[int] = (),
        on_refused: Callable[[str], None] | None = None,
        clock_ms: Callable[[], int] = wall_ms,
        *,
        server: str = "",
    ) -> None:
        self.inner = inner
        self._internal = frozenset(int(c) for c in internal_codes) | {
            int(ControllerCode.RAFT_MESSAGE)
        }
        self._server = server
        self._clock_ms = clock_ms
        self._refusals = RefusalLog("request refused", on_refused)

    def __call__(self, conn: Connection, req: Frame) -> Frame | None:
        signer = claimed_signer(req.header)
        if (req.code in self._internal or signer == CLUSTER_ACCESS_KEY) and not has_client_cert(
            conn
        ):
            return self._refusals.refuse(
                conn,
                req,
                self._clock_ms(),
                NO_CLIENT_CERT_REASON,
                NO_CLIENT_CERT,
                server=self._server,
                user=signer,
                remark=NO_CLIENT_CERT,
            )
        if self.inner is None:
            return None
        return self.inner(conn, req)


def files_from_config(
    *,
    enabled: bool,
    cert: Path | None,
    key: Path | None,
    ca_file: Path | None,
    verify_client: bool,
    other_tls_port: bool = False,
) -> TlsFiles | None:
    """A daemon's TLS keys checked together: the files with ``tls_enabled`` (None without),
    every context built once so a bad file stops the daemon at start. Raises
    :class:`TlsError` whose message starts with the config key at fault. ``other_tls_port``:
    the key also serves another TLS port (the broker's gRPC one), so it is checked too."""
    if not enabled:
        if key is not None and other_tls_port and key.exists():  # a missing one: said later
            try:
                check_key_file(key, "TLS key")
            except TlsError as exc:
                raise TlsError(f"config key 'tls_key': {exc}") from None
        return None
    if cert is None or key is None:
        raise TlsError("config key 'tls_enabled' needs tls_cert and tls_key")
    if verify_client and ca_file is None:
        raise TlsError("config key 'tls_verify_client' needs tls_ca_file")
    files = TlsFiles(cert=cert, key=key, ca_file=ca_file, verify_client=verify_client)
    try:
        check_key_file(key, "TLS key")
    except TlsError as exc:
        raise TlsError(f"config key 'tls_key': {exc}") from None
    try:
        DaemonTls(files)
    except TlsError as exc:
        raise TlsError(f"config key 'tls_cert': {exc}") from None
    return files


def reload_tls(tls: DaemonTls | None, daemon: str) -> bool:
    """SIGHUP's work in a daemon: reload ``tls`` and log the outcome in one line (a failed
    reload keeps the files loaded before). True when new files are in use."""
    if tls is None:
        log.info("SIGHUP: nothing to reload (TLS is off)", daemon=daemon)
        return False
    try:
        tls.reload()
    except TlsError as exc:
        log.error("TLS reload failed; the certificates loaded before stay in use", error=str(exc))
        return False
    log.info(
        "TLS certificates reloaded", daemon=daemon, cert=str(tls.files.cert), reloads=tls.reloads
    )
    return True
