"""TLS of the connections the ``rmq`` source and sink open (options ``tls`` and ``caFile``).

Options travel to the executors pickled, and an :class:`ssl.SSLContext` does not pickle, so the
options keep only the CA file's path: :meth:`ClientTls.context` builds the context where a pool
is made (driver or task). The path must therefore exist on every executor too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from ssl import SSLContext

from pipeline.errors import OptionError
from remoting.client import advise_tls
from remoting.tls import TlsError, client_context


@dataclass(frozen=True, slots=True)
class ClientTls:
    """Connect over TLS, checking the servers' certificates against ``ca_file`` (None: the
    system's CAs) and the address dialled. Clients present no certificate of their own."""

    ca_file: str | None = None

    def context(self) -> SSLContext:
        """A fresh client context; a CA file that cannot be read is an :class:`OptionError`
        naming the option (raised on the driver first: its snapshot connects before any task)."""
        try:
            return client_context(Path(self.ca_file) if self.ca_file is not None else None)
        except TlsError as exc:
            raise OptionError(f"option caFile: {exc}") from None


def context_of(tls: ClientTls | None) -> SSLContext | None:
    """The context for a connection pool (None: plaintext). Every pool of the source and sink
    is made with it: a connection that reaches a port speaking the other protocol says how to
    fix it with the options' names (rmq-pipeline words them as its flags)."""
    advise_tls("set option tls or caFile", "drop options tls and caFile")
    return tls.context() if tls is not None else None
