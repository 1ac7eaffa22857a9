"""`nexus-agent serve --tls-cert/--tls-key`: HTTPS with a real self-signed certificate (made by the openssl CLI),
spoken to by this project's clients and the real `openai` client; clear errors for bad files and for a client that
does not trust the certificate or speaks the wrong protocol; a silent connection holds up nobody."""

from __future__ import annotations

import socket
import ssl
import subprocess
from pathlib import Path

import openai
import pytest
from sessionlib import words

from agent.backends.openai_compat import OpenAICompatConfig, OpenAICompatModel
from agent.errors import AgentError
from agent.protocols import Sampling
from cli.serve_cmd import _access_line
from pipeline.backends import server_settings
from pipeline.errors import RunError
from server.config import ServeConfig, ServeError
from server.tls import server_context

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": words(30)}]


def self_signed(folder: Path, name: str = "server", encrypt: bool = False) -> tuple[Path, Path]:
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    cmd = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-days", "2"]
    cmd += ["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
    cmd += ["-keyout", str(key), "-out", str(cert)] + (["-passout", "pass:secret"] if encrypt else ["-noenc"])
    subprocess.run(cmd, check=True, capture_output=True)
    return cert, key


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> tuple[Path, Path]:
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def settings():
    server_settings.cache_clear()
    yield server_settings
    server_settings.cache_clear()


def test_https_serves_this_projects_clients_and_openai(make_server, certs, settings, monkeypatch) -> None:
    cert, key = certs
    server = make_server(tls_cert=cert, tls_key=key)
    assert server.url.startswith("https://127.0.0.1:")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client trusts the self-signed certificate
    assert settings(server.url)["policy"] == "nexus-agent"
    model = OpenAICompatModel(OpenAICompatConfig(model="tiny-qwen3", base_url=server.url, retries=0))
    assert model.reply(list(MESSAGES), Sampling(max_new_tokens=4, temperature=0.0)).stats["session_id"]
    with openai.OpenAI(base_url=server.url, api_key="none", max_retries=0) as client:
        answer = client.chat.completions.create(model="tiny-qwen3", messages=MESSAGES, max_tokens=3, temperature=0)
        assert answer.usage.completion_tokens >= 1
        pieces = client.chat.completions.create(model="tiny-qwen3", messages=MESSAGES, max_tokens=3, stream=True)
        assert [p for p in pieces if p.choices and p.choices[0].delta.content]


def test_a_client_that_does_not_trust_it_or_speaks_plain_http_is_told_what_to_do(
    make_server, certs, settings, monkeypatch
) -> None:
    cert, key = certs
    server = make_server(tls_cert=cert, tls_key=key)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with pytest.raises(RunError, match="not trusted here.*SSL_CERT_FILE"):
        settings(server.url)
    plain = server.url.replace("https://", "http://")
    with pytest.raises(RunError, match="started with --tls-cert, give https://"):
        settings(plain)
    # a connection that never starts its handshake holds up nobody: handshakes run in each connection's thread
    with socket.create_connection(("127.0.0.1", server.port)):
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        settings.cache_clear()
        assert settings(server.url)["policy"] == "nexus-agent"


def test_the_agents_model_client_is_told_too_and_does_not_retry_a_tls_failure(make_server, certs, monkeypatch) -> None:
    cert, key = certs
    server = make_server(tls_cert=cert, tls_key=key)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    waits: list[float] = []
    monkeypatch.setattr("agent.backends.client.time.sleep", waits.append)

    def reply(url: str):
        model = OpenAICompatModel(OpenAICompatConfig(model="tiny-qwen3", base_url=url, retries=2))
        return model.reply(list(MESSAGES), Sampling(max_new_tokens=2, temperature=0.0))

    with pytest.raises(AgentError, match="not trusted here.*SSL_CERT_FILE"):
        reply(server.url)
    assert waits == []  # an untrusted certificate stays untrusted: no retry
    with pytest.raises(AgentError, match="started with --tls-cert, give https://"):
        reply(server.url.replace("https://", "http://"))
    assert len(waits) == 2  # a dropped connection may be a restart: retried first, the hint comes with the last


def test_https_to_a_plain_server_is_told_to_use_http(make_server, settings) -> None:
    server = make_server()
    with pytest.raises(RunError, match="does not speak TLS there: give http://"):
        settings(server.url.replace("http://", "https://"))


def test_bad_certificate_files_are_one_line_errors(tmp_path, certs) -> None:
    cert, key = certs
    other_cert, other_key = self_signed(tmp_path, "other")
    with pytest.raises(ServeError, match="no such file"):
        server_context(tmp_path / "missing.crt", key)
    with pytest.raises(ServeError, match="cannot load the TLS certificate"):
        server_context(cert, other_key)  # a key that is not the certificate's
    with pytest.raises(ServeError, match="holds no key: give the key's file too, tls_key"):
        server_context(cert)
    with pytest.raises(ServeError, match="is encrypted"):
        server_context(*self_signed(tmp_path, "locked", encrypt=True))
    combined = tmp_path / "both.pem"
    combined.write_text(other_cert.read_text() + other_key.read_text())
    assert isinstance(server_context(combined), ssl.SSLContext)  # the key may sit in the certificate file
    with pytest.raises(ServeError, match="tls_key needs a tls_cert"):
        ServeConfig(tls_key=key)


def test_an_api_key_without_tls_beyond_this_machine_is_flagged(certs) -> None:
    cert, key = certs
    assert "in clear" in _access_line(ServeConfig(host="0.0.0.0", api_key="k"))
    line = _access_line(ServeConfig(host="0.0.0.0", api_key="k", tls_cert=cert, tls_key=key))
    assert "warning" not in line and "TLS: on" in line
    assert "warning" not in _access_line(ServeConfig(api_key="k"))
