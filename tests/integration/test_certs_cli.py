"""`causeway certs create` as an operator runs it, judged by real TLS peers: Python's ssl (OpenSSL)
on both ends of a mutual-TLS connection over loopback, and Java's keytool reading the keystore."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import sys
from functools import partial
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parents[2]


def certs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "deploy.cli", "certs", "create", *args],
                          capture_output=True, text=True, timeout=120, cwd=REPO)


async def _handshake(out: Path, server_host: str, client: str | None) -> tuple[str, str]:
    """Connect to a TLS server holding broker b1's certificate (client certificates required) as
    `client`, checking the server's name `server_host`: what the client saw ("ok" or why it
    refused the server) and what the server saw (the client's subject, or "refused")."""
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(out / "ca.crt"))
    server_ctx.load_cert_chain(out / "b1.pem")
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    client_ctx = ssl.create_default_context(cafile=str(out / "ca.crt"))
    if client is not None:
        client_ctx.load_cert_chain(out / f"{client}.crt", out / f"{client}.key")
    seen: list[str] = []
    served = trio.Event()

    async def serve(stream: trio.SocketStream) -> None:
        tls = trio.SSLStream(stream, server_ctx, server_side=True)
        try:
            await tls.do_handshake()
            peer = tls.getpeercert()
            seen.append(",".join(f"{k}={v}" for rdn in peer["subject"] for k, v in rdn) if peer else "")
            await tls.send_all(b"ok")
        except (trio.BrokenResourceError, ssl.SSLError):
            seen.append("refused")
        finally:
            await tls.aclose()
            served.set()

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
            port = listeners[0].socket.getsockname()[1]
            tcp = await trio.open_tcp_stream("127.0.0.1", port)
            tls = trio.SSLStream(tcp, client_ctx, server_hostname=server_host)
            try:
                await tls.do_handshake()
                client_saw = (await tls.receive_some(2)).decode()
            except trio.BrokenResourceError as exc:
                # trio wraps the ssl module's error: the cause says why the client refused.
                cause = exc.__cause__
                client_saw = cause.verify_message if isinstance(cause, ssl.SSLCertVerificationError) else "closed"
            finally:
                await tls.aclose()
            await served.wait()
            nursery.cancel_scope.cancel()
    return client_saw, seen[0]


def test_mutual_tls_works_with_what_it_writes(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    done = certs("--dir", str(out), "--broker", "b1=localhost,127.0.0.1", "--client", "alice")
    assert done.returncode == 0, done.stderr
    assert "CA: created" in done.stdout and "client alice: issued (User:CN=alice)" in done.stdout
    for host in ("localhost", "127.0.0.1"):
        assert trio.run(_handshake, out, host, "alice") == ("ok", "commonName=alice")


def test_a_host_the_certificate_does_not_name_and_a_client_without_one_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    assert certs("--dir", str(out), "--broker", "b1=localhost", "--client", "alice").returncode == 0
    client_saw, _ = trio.run(_handshake, out, "127.0.0.1", "alice")
    assert "IP address mismatch" in client_saw
    assert trio.run(_handshake, out, "localhost", None)[1] == "refused"


def test_a_client_of_another_ca_is_refused(tmp_path: Path) -> None:
    out, other = tmp_path / "certs", tmp_path / "other"
    assert certs("--dir", str(out), "--broker", "b1=localhost").returncode == 0
    assert certs("--dir", str(other), "--client", "mallory").returncode == 0
    for suffix in (".crt", ".key"):
        shutil.copy(other / f"mallory{suffix}", out / f"mallory{suffix}")
    assert trio.run(_handshake, out, "localhost", "mallory")[1] == "refused"


def test_java_reads_the_pkcs12_keystore_with_its_password(tmp_path: Path) -> None:
    keytool = shutil.which("keytool")
    assert keytool, "keytool (Java 17) is installed by `make system-deps`"
    out = tmp_path / "certs"
    assert certs("--dir", str(out), "--client", "alice").returncode == 0
    password = (out / "alice.p12.password").read_text().strip()
    listed = subprocess.run([keytool, "-list", "-v", "-storetype", "PKCS12", "-keystore", str(out / "alice.p12"),
                             "-storepass", password], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "Owner: CN=alice" in listed.stdout and "Certificate chain length: 2" in listed.stdout
    wrong = subprocess.run([keytool, "-list", "-storetype", "PKCS12", "-keystore", str(out / "alice.p12"),
                            "-storepass", "not-the-password"], capture_output=True, text=True, timeout=120)
    assert wrong.returncode != 0


def test_a_damaged_ca_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    assert certs("--dir", str(out)).returncode == 0
    (out / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\ntruncated")
    before = sorted(p.name for p in out.iterdir())
    done = certs("--dir", str(out), "--client", "bob")
    assert done.returncode == 1
    assert f"causeway certs: {out / 'ca.crt'} is not a PEM certificate" in done.stderr
    assert sorted(p.name for p in out.iterdir()) == before


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    for args, message in [(("--client", "alice=host"), "names no hosts"),
                          (("--client", "../alice"), "cannot be an identity name"),
                          (("--broker", "b1=bad_host!"), "neither an IP address nor a DNS name"),
                          (("--broker", "b1="), "no host after")]:
        done = certs("--dir", str(tmp_path), *args)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)
    assert not any(tmp_path.iterdir())
