"""rmq-console's configuration: every key, its type, default and meaning.

The TOML file uses these names and flags override them, read and checked as every daemon's
(:mod:`daemon.config`: an unknown key or a bad value is one line naming it, exit status 2). One
key is the console's own: the ``[clusters]`` table, a name for each set of controller
addresses the console can be pointed at::

    listen = "127.0.0.1:8080"

    [clusters]
    prod = "10.0.0.1:9878;10.0.0.2:9878;10.0.0.3:9878"
    staging = "10.1.0.1:9878"

``controllers`` (``--controllers``) names one cluster more, ``default``. The first cluster (in
the file's order, ``default`` first) is the one the console opens on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from daemon.config import (
    ConfigError,
    address,
    address_list,
    at_least,
    build,
    field,
    load_toml,
    log_format_field,
    log_level_field,
)

DEFAULT_CLUSTER: Final = "default"
_NAME_RE: Final = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def http_url(value: Any) -> str | None:
    """Empty, or an http:// or https:// URL with a host (no query or fragment)."""
    if value == "":
        return None
    parts = urlsplit(str(value))
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        return "must be an http:// or https:// URL such as http://127.0.0.1:9090"
    return None


@dataclass(frozen=True, kw_only=True)
class ConsoleConfig:
    listen: str = field(
        "127.0.0.1:8080",
        "host:port of the console's web listener (HTTP, HTTPS with tls_*)",
        address,
    )
    controllers: str = field(
        "",
        "controller addresses separated by ';' of the cluster named 'default' (the [clusters] "
        "table names more)",
        address_list,
    )
    credentials_file: Path | None = field(
        None,
        "TOML file with access_key and secret_key (mode 600): the console signs every request "
        "to the clusters with them when authentication is on there (with login: only the "
        "reads of a logged-in user's rules, which need a super user)",
    )
    auth_key_file: Path | None = field(
        None,
        "the cluster's auth key: sign as the cluster itself (a super user), as rmqctl "
        "--auth-key-file does, on a host that holds it (make run SECURE=1); not with "
        "credentials_file",
    )
    cluster_tls: bool = field(
        False,
        "connect to the clusters over TLS (their tls_enabled), checking their certificates "
        "against the system's CAs or cluster_ca_file",
    )
    cluster_ca_file: Path | None = field(
        None, "PEM CA the clusters' certificates chain to (a private CA); implies cluster_tls"
    )
    cluster_cert_file: Path | None = field(
        None,
        "PEM client certificate presented to clusters that ask for one (tls_verify_client: "
        "signing with auth_key_file); needs cluster_key_file, implies cluster_tls",
    )
    cluster_key_file: Path | None = field(None, "PEM private key of cluster_cert_file")
    tls_cert_file: Path | None = field(
        None, "PEM certificate of the console's own listener (HTTPS); needs tls_key_file"
    )
    tls_key_file: Path | None = field(None, "PEM private key of tls_cert_file")
    login: bool = field(
        False,
        "log in with the cluster's own users (authentication on there): each page and action "
        "signs with the user's credentials, so the cluster's rules decide; super users get "
        "every action, other users what their rules allow (read with credentials_file or "
        "auth_key_file; without them, read only)",
    )
    session_hours: float = field(12.0, "a login lasts this long, in hours", at_least(0.01))
    prometheus_url: str = field(
        "",
        "base URL of a Prometheus scraping the clusters (http://host:9090): the cluster page "
        "shows the alerts firing there (its /api/v1/alerts); empty: no alerts shown",
        http_url,
    )
    refresh_seconds: float = field(
        2.0, "how often the cluster page updates itself, in seconds", at_least(0.5)
    )
    request_timeout: float = field(
        5.0, "seconds the console waits for a controller or broker answer", at_least(0.1)
    )
    log_format: str = log_format_field()
    log_level: str = log_level_field()

    def __post_init__(self) -> None:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ConfigError("config keys 'tls_cert_file' and 'tls_key_file' go together")
        if (self.cluster_cert_file is None) != (self.cluster_key_file is None):
            raise ConfigError("config keys 'cluster_cert_file' and 'cluster_key_file' go together")
        if self.auth_key_file is not None and self.credentials_file is not None:
            raise ConfigError("config keys 'auth_key_file' and 'credentials_file': give one")

    @property
    def host(self) -> str:
        return self.listen.rpartition(":")[0]

    @property
    def port(self) -> int:
        return int(self.listen.rpartition(":")[2])


def _clusters(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise ConfigError("config key 'clusters' must be a table of name = \"addresses\"")
    out: dict[str, str] = {}
    for name, addresses in raw.items():
        if not _NAME_RE.fullmatch(name):
            raise ConfigError(
                f"config key 'clusters': name {name!r} may hold letters, digits, '_', '.' and "
                "'-' (at most 64)"
            )
        if not isinstance(addresses, str) or not addresses.strip():
            raise ConfigError(f"config key 'clusters.{name}' must be addresses separated by ';'")
        problem = address_list(addresses)
        if problem:
            raise ConfigError(f"config key 'clusters.{name}' {problem}")
        out[name] = addresses
    return out


@dataclass(frozen=True)
class Settings:
    """The console's keys and the clusters it shows (name -> controller addresses, in order)."""

    config: ConsoleConfig
    clusters: dict[str, str]


def load_config(config_file: Path | None, overrides: dict[str, Any]) -> Settings:
    """The file (if any), then the non-None flags: the ``[clusters]`` table checked here, every
    other key by :func:`daemon.config.build`. :class:`ConfigError` when there is no cluster."""
    file_values = dict(load_toml(config_file)) if config_file else {}
    clusters = _clusters(file_values.pop("clusters", {}))
    config = build(ConsoleConfig, file_values, overrides)
    if config.controllers:
        clusters = {DEFAULT_CLUSTER: config.controllers, **clusters}
    if not clusters:
        raise ConfigError(
            "no cluster to show: give --controllers (config key 'controllers') or a [clusters] "
            "table"
        )
    return Settings(config, clusters)
