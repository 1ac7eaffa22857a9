"""TLS for `nexus-agent serve` (--tls-cert, --tls-key): the server's SSL context, loaded once at start with a clear
error for a bad file. uvicorn speaks TLS with it (server.listen); each handshake runs on the event loop, so a client
that connects and never speaks holds up no one."""

from __future__ import annotations

import ssl
from pathlib import Path

from server.config import ServeConfig
from server.errors import ServeError, ServeSettingError


def tls_context(config: ServeConfig) -> ssl.SSLContext | None:
    """The context of the server's tls_cert / tls_key, or None when it serves plain HTTP."""
    return None if config.tls_cert is None else server_context(config.tls_cert, config.tls_key)


def server_context(cert: Path, key: Path | None = None) -> ssl.SSLContext:
    """The context the listener wraps each connection in: `cert` (PEM, the chain; it may hold the key too) and `key`
    (PEM, not encrypted). TLS 1.2 at least, Python's default server ciphers."""
    for setting, path in (("tls_cert", cert), ("tls_key", key)):
        if path is not None and not Path(path).is_file():
            raise ServeSettingError(setting, f"{path}: no such file")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(cert), None if key is None else str(key), password=_no_password)
    except _EncryptedKey:
        raise ServeError(
            f"the TLS key in {key or cert} is encrypted; give an unencrypted key (e.g. `openssl pkey -in KEY -out "
            "PLAIN`), readable by this user only"
        ) from None
    except ssl.SSLError as exc:
        hint = "" if key is not None else " (the certificate file holds no key: give the key's file too, tls_key)"
        raise ServeError(
            f"cannot load the TLS certificate {cert}{'' if key is None else f' with the key {key}'}: "
            f"{exc.reason or exc}{hint}"
        ) from None
    return context


class _EncryptedKey(Exception):
    pass


def _no_password() -> str:
    raise _EncryptedKey  # never prompt on the terminal for a passphrase
