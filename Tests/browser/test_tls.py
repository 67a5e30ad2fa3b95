"""The page over HTTPS: tabd with --tls-cert/--tls-key (a test CA's certificate, made by
the test with openssl), Chromium trusting that certificate's key, the page's WebSocket on
wss:// (it picks the scheme from its own), live with another client over wss.

How Chromium trusts the test certificate: --ignore-certificate-errors-spki-list with the
SHA-256 of the server key. That pins exactly one key (every other certificate is still
checked); --ignore-certificate-errors, which would accept anything, is not used. A
browser without the pin is shown to refuse the page, so the pin is what makes it load.
"""
import os
import ssl
import sys

from browserkit import ROOT, SYNC, WAIT, Remote

sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from tlscerts import Certificates  # noqa: E402


def test_the_page_over_https_connects_over_wss_and_stays_in_sync(make_daemon, browsers, tmp_path):
    certs = Certificates(tmp_path / "certs")
    d = make_daemon("--tls-cert", certs.a, "--tls-key", certs.a_key)
    d.ssl_context = ssl.create_default_context(cafile=certs.ca)
    assert d.http.startswith("https://")
    b = browsers(extra_args=[f"--ignore-certificate-errors-spki-list={certs.spki_sha256(certs.a)}"])
    b.record_sockets().open(d)
    assert b.js("return location.protocol") == "https:"
    sockets = b.js("return window.__sockets")
    assert sockets and all(url.startswith(f"wss://127.0.0.1:{d.port}/") for url in sockets), sockets
    remote = Remote(d, name="over-wss")
    try:
        remote.command("select", tab="profile")
        b.wait_selected("profile", SYNC)  # a command sent over wss shows on the page
        b.click_tab("favorites")
        b.wait(lambda: remote.snapshot()["selected"] == "favorites", WAIT, "a click on the https page reaches tabd")
    finally:
        remote.close()


def test_without_trusting_the_certificate_chromium_refuses_the_page(make_daemon, browsers, tmp_path):
    certs = Certificates(tmp_path / "certs")
    d = make_daemon("--tls-cert", certs.a, "--tls-key", certs.a_key)
    b = browsers()
    b.allow_console(r"ERR_CERT|certificate")
    b.driver.get(d.http)
    b.wait(lambda: b.js("return !window.__tabd") and "ERR_CERT_AUTHORITY_INVALID" in b.driver.page_source, WAIT,
           "Chromium shows its certificate error instead of the page")
