"""ClickHouse URLs: the scheme decides TLS, and credentials never travel in clear (issue 14).

clickhouse-connect picks TLS by port when it is not told, so ``https://user:pass@host:8123``
used to send the password over plain HTTP. These tests listen on a loopback socket and look at
the first bytes the client sends."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from rankscope.sinks.clickhouse import InsecureClickHouseURL, connect

PASSWORD = "Sup3rSecretCanary"


class FirstBytes:
    """A loopback listener that records what the first client sends, then hangs up."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.received = b""
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        conn.settimeout(5)
        try:
            self.received = conn.recv(4096)
        finally:
            conn.close()
            self.done.set()


@pytest.fixture
def listener() -> Iterator[FirstBytes]:
    fb = FirstBytes()
    yield fb
    fb.sock.close()


def test_an_https_url_starts_with_a_tls_handshake_whatever_the_port(
    listener: FirstBytes,
) -> None:
    # the listener's port is neither 443 nor 8443, the case clickhouse-connect got wrong
    url = f"https://writer:{PASSWORD}@127.0.0.1:{listener.port}/rankscope"
    with pytest.raises(Exception):  # noqa: B017 - the listener hangs up mid-handshake
        connect(url, connect_timeout=5, send_receive_timeout=5)
    assert listener.done.wait(10)
    assert listener.received[:2] == b"\x16\x03", listener.received[:40]  # TLS ClientHello
    assert PASSWORD.encode() not in listener.received
    assert b"HTTP/1.1" not in listener.received


def test_plain_http_with_a_password_to_a_remote_host_is_refused_before_connecting() -> None:
    with pytest.raises(InsecureClickHouseURL) as err:
        connect(f"http://writer:{PASSWORD}@clickhouse.invalid:8123")
    assert PASSWORD not in str(err.value)  # the one-line error names no secret
    assert "https://" in str(err.value)


def test_plain_http_with_a_password_goes_only_where_allowed(
    listener: FirstBytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    # loopback never leaves the host, so the local engine's URL keeps working
    with pytest.raises(Exception):  # noqa: B017 - the listener is not ClickHouse
        connect(
            f"http://writer:{PASSWORD}@127.0.0.1:{listener.port}",
            connect_timeout=5,
            send_receive_timeout=5,
        )
    assert listener.done.wait(10)
    assert listener.received.split(b" ")[0] in (b"GET", b"POST")
    # a remote host only with the explicit switch: it then gets as far as resolving the name
    monkeypatch.setenv("RANKSCOPE_CLICKHOUSE_ALLOW_INSECURE", "1")
    with pytest.raises(Exception) as err:  # the name does not resolve
        connect(
            f"http://writer:{PASSWORD}@clickhouse.invalid:8123",
            connect_timeout=2,
            send_receive_timeout=2,
        )
    assert not isinstance(err.value, InsecureClickHouseURL)


def test_an_unknown_scheme_is_refused_without_echoing_the_url() -> None:
    with pytest.raises(ValueError) as err:
        connect(f"ftp://writer:{PASSWORD}@host/x")
    assert PASSWORD not in str(err.value)
