"""The engine's connection over TLS and with credentials: a private CA made with `openssl`,
three NATS JetStream servers whose client port requires TLS and a user and password, tabd
nodes that reach them (the options, or their TABD_ variables), and every way a node with
wrong or missing credentials or TLS files stops at start: a non-zero exit status, libnats'
own reason, the file named when a file is the problem.

The engine is started by the tests (Tests/support/natscluster.py), never expected to run.
"""
import os
import signal
import subprocess
import sys
import uuid

import pytest

from conftest import ROOT, TABD, Client, Daemon, cluster_secret_file
from test_install import environment, refused

sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from natscluster import NatsCluster  # noqa: E402
from natsjwt import NKey, OperatorAuth  # noqa: E402

USER = "tabd"
# A `"` and a `\`: libnats puts the password into its CONNECT JSON as it is, so tabd has to
# escape them (written raw, single-quoted, in the server's configuration).
PASSWORD = 'engine-"pass\\word'


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def certificate(directory, name, ca, extensions):
    """`name`.pem and `name`-key.pem (P-256) in `directory`, signed by the CA called `ca`."""
    with open(os.path.join(directory, f"{name}.ext"), "w") as f:
        f.write(extensions + "\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}-key.pem", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=directory)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}-key.pem", "-CAcreateserial",
            "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext", cwd=directory)


class Pki:
    """A private CA, the servers' certificate (localhost and 127.0.0.1), one for the wrong
    name, a client certificate for mutual TLS, a second CA and a client certificate it signed,
    and the password files; paths by name (`pki.ca`, `pki.path("server.pem")`)."""

    def __init__(self, directory):
        self.dir = str(directory)
        for ca in ("ca", "other-ca"):
            openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", f"{ca}-key.pem", "-out", f"{ca}.pem", "-days", "2", "-subj", f"/CN=tabd test {ca}",
                    "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                    cwd=self.dir)
        certificate(self.dir, "server", "ca", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth")
        certificate(self.dir, "elsewhere", "ca", "subjectAltName=DNS:elsewhere.example\nextendedKeyUsage=serverAuth")
        certificate(self.dir, "node", "ca", "extendedKeyUsage=clientAuth")
        certificate(self.dir, "stranger", "other-ca", "extendedKeyUsage=clientAuth")
        self.ca = self.path("ca.pem")
        self.password_file = self.secret("password", PASSWORD + "\n")
        self.wrong_password_file = self.secret("wrong-password", "not the password\n")

    def path(self, name):
        return os.path.join(self.dir, name)

    def secret(self, name, text):
        path = self.path(name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o600)
        return path

    def tls_block(self, cert="server", verify=False):
        """The client port's `tls { … }`: `verify` asks every client for a certificate the CA signed."""
        return (f'tls {{\n  cert_file: "{self.path(cert + ".pem")}"\n  key_file: "{self.path(cert + "-key.pem")}"\n'
                f'  ca_file: "{self.ca}"\n' + ("  verify: true\n" if verify else "") + "  timeout: 5\n}")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def engine(pki, tmp_path_factory):
    """Three JetStream servers (R3 streams) whose clients need TLS, a user and a password."""
    extra = pki.tls_block() + f"\nauthorization {{\n  user: {USER}\n  password: '{PASSWORD}'\n}}"
    with NatsCluster(3, base_dir=str(tmp_path_factory.mktemp("nats")), extra=extra) as c:
        yield c


@pytest.fixture(scope="module")
def operator_engine(pki, tmp_path_factory):
    """Three JetStream servers in NATS's operator mode (users are JWTs signed by an account
    the operator signed) whose clients need TLS; and the accounts' keys (`.auth`)."""
    auth = OperatorAuth(tmp_path_factory.mktemp("operator"))
    with NatsCluster(3, base_dir=str(tmp_path_factory.mktemp("nats")), extra=pki.tls_block() + "\n" + auth.server_config()) as c:
        c.auth = auth
        yield c


def tls_urls(engine):
    return ",".join(f"tls://127.0.0.1:{p}" for p in engine.client_ports)


def with_password(pki, password_file=None):
    return ("--cluster-tls-ca", pki.ca, "--cluster-user", USER, "--cluster-password-file", password_file or pki.password_file)


def stopped_at_start(*args, env=None):
    """A node that must not start: (exit status, stderr); it never said it listens."""
    code, out, err = refused(TABD, ROOT, environment() if env is None else env, "--port", "0", *args,
                             "--cluster-secret-file", cluster_secret_file())
    assert "listening" not in out, out
    return code, err


def engine_connections(engine):
    """Every client connection of the engine's servers: /connz with the user each logged in as."""
    return [c for i in range(engine.size) for c in (engine.monitor(i, "/connz?auth=true") or {}).get("connections") or []]


def room_name():
    return "r" + uuid.uuid4().hex[:10]


async def test_two_nodes_over_tls_with_a_user_and_password_serve_one_room(make_daemon, engine, pki):
    # One node from its options and tls:// URLs, the other from TABD_ variables and nats://
    # URLs with the CA.
    a = make_daemon("--cluster", tls_urls(engine), "--node-name", "tls-a", *with_password(pki))
    b = make_daemon("--port", "0", "--node-name", "tls-b", bare=True, env=environment(
        TABD_CLUSTER=engine.url_arg, TABD_CLUSTER_TLS_CA=pki.ca, TABD_CLUSTER_USER=USER,
        TABD_CLUSTER_PASSWORD_FILE=pki.password_file, TABD_CLUSTER_SECRET_FILE=cluster_secret_file()))
    room = room_name()
    ca = await Client.connect(a.ws, room=room, name="on-a")
    cb = await Client.connect(b.ws, room=room, name="on-b")
    assert ca.welcome["epoch"] == cb.welcome["epoch"]
    events, ack = await ca.command("select", tab="profile")
    assert ack["type"] == "ack"
    await cb.until_seq(ack["seq"])
    assert cb.batches[-1] == events
    _, back = await cb.command("push", route="detail")
    assert back["type"] == "ack"
    await ca.until_seq(back["seq"])
    # Both nodes are on the engine over TLS, logged in as the user.
    mine = [c for c in engine_connections(engine) if c.get("name") in ("tabd tls-a", "tabd tls-b")]
    assert {c["name"] for c in mine} == {"tabd tls-a", "tabd tls-b"}, mine
    assert all(c.get("tls_version") and c.get("authorized_user") == USER for c in mine), mine
    await ca.close()
    await cb.close()
    assert a.stop() == 0 and b.stop() == 0
    assert f"over TLS (CA '{pki.ca}') as user '{USER}': 3 copies of every room" in a.stderr, a.stderr
    assert PASSWORD not in a.stderr + b.stderr


def test_a_wrong_password_stops_the_node_with_the_engine_s_reason(engine, pki):
    code, err = stopped_at_start("--cluster", tls_urls(engine), *with_password(pki, pki.wrong_password_file))
    assert code == 1, err
    assert "Authorization Violation" in err and f"as user '{USER}'" in err, err
    assert "not the password" not in err


def test_no_credentials_at_all_are_refused_by_the_engine(engine, pki):
    code, err = stopped_at_start("--cluster", tls_urls(engine), "--cluster-tls-ca", pki.ca)
    assert code == 1 and "Authorization Violation" in err, err


async def test_a_node_whose_password_the_engine_stops_taking_stops_with_the_reason(make_daemon, pki, tmp_path):
    # libnats stops reconnecting once a server refused the credentials twice in a row: the
    # node would be useless for good, so it stops as a refused start does.
    auth = f"authorization {{\n  user: {USER}\n  password: '{PASSWORD}'\n}}"
    with NatsCluster(1, base_dir=str(tmp_path / "nats"), extra=pki.tls_block() + "\n" + auth) as single:
        node = make_daemon("--cluster", single.urls[0], "--node-name", "rotated", *with_password(pki))
        c = await Client.connect(node.ws, room=room_name())
        _, ack = await c.command("select", tab="profile")
        assert ack["type"] == "ack"
        await c.close()
        with open(single.conf_path(0)) as f:
            config = f.read()
        with open(single.conf_path(0), "w") as f:
            f.write(config.replace(PASSWORD, "a new password"))
        single.kill(0, signal.SIGHUP)  # the server reads its configuration again
        try:
            code = node.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
        assert node.stop() == 1 and code == 1, node.stderr
    assert "the engine connection is closed for good: Authorization Violation; stopping" in node.stderr, node.stderr


@pytest.mark.parametrize("option", ["--cluster-tls-ca", "--cluster-password-file", "--cluster-tls-cert", "--cluster-tls-key"])
def test_a_missing_file_is_named(engine, pki, tmp_path, option):
    missing = str(tmp_path / "no-such-file")
    files = {"--cluster-tls-ca": pki.ca, "--cluster-password-file": pki.password_file,
             "--cluster-tls-cert": pki.path("node.pem"), "--cluster-tls-key": pki.path("node-key.pem")}
    files[option] = missing
    args = [a for name, path in files.items() for a in (name, path)]
    code, err = stopped_at_start("--cluster", tls_urls(engine), "--cluster-user", USER, *args)
    assert code == 1, err
    assert f"'{missing}' ({option}): No such file or directory" in err, err


def test_an_empty_password_file_or_a_ca_file_without_certificates_is_an_error(engine, pki, tmp_path):
    empty = tmp_path / "empty"
    empty.write_text("\n")
    code, err = stopped_at_start("--cluster", tls_urls(engine), *with_password(pki, str(empty)))
    assert code == 1 and f"password file '{empty}'" in err and "is empty" in err, err
    not_a_ca = tmp_path / "not-a-ca.pem"
    not_a_ca.write_text("hello\n")
    code, err = stopped_at_start("--cluster", tls_urls(engine), "--cluster-tls-ca", str(not_a_ca),
                                 "--cluster-user", USER, "--cluster-password-file", pki.password_file)
    assert code == 1 and str(not_a_ca) in err and "no certificate" in err, err


@pytest.mark.parametrize("ca", [None, "other-ca.pem"])
def test_a_server_certificate_the_node_cannot_verify_stops_it_with_the_tls_reason(engine, pki, ca):
    # Without a CA the system's are used: none of them signed the test CA's certificates.
    extra = ("--cluster-tls-ca", pki.path(ca)) if ca else ()
    code, err = stopped_at_start("--cluster", tls_urls(engine), *extra, "--cluster-user", USER,
                                 "--cluster-password-file", pki.password_file)
    assert code == 1, err
    assert "SSL handshake error" in err and "unable to get local issuer certificate" in err, err


def test_a_server_certificate_for_another_name_is_refused(pki, tmp_path):
    with NatsCluster(1, base_dir=str(tmp_path / "nats"), extra=pki.tls_block(cert="elsewhere")) as other:
        code, err = stopped_at_start("--cluster", other.urls[0].replace("nats://", "tls://"), "--cluster-tls-ca", pki.ca)
    assert code == 1, err
    assert "SSL handshake error" in err and "IP address mismatch" in err, err


def test_tls_urls_never_fall_back_to_plain_tcp(pki, tmp_path):
    # libnats alone would speak plain TCP to a tls:// URL whose server does not require TLS.
    with NatsCluster(1, base_dir=str(tmp_path / "nats")) as plain:
        url = plain.urls[0]
        code, err = stopped_at_start("--cluster", url.replace("nats://", "tls://"))
        assert code == 1 and "Secure Connection not available" in err, err
        code, err = stopped_at_start("--cluster", url, "--cluster-tls-ca", pki.ca)
        assert code == 1 and "Secure Connection not available" in err, err


async def test_mutual_tls_accepts_a_node_with_its_certificate_and_refuses_one_without(make_daemon, pki, tmp_path):
    with NatsCluster(1, base_dir=str(tmp_path / "nats"), extra=pki.tls_block(verify=True)) as mutual:
        url = mutual.urls[0].replace("nats://", "tls://")
        node = make_daemon("--cluster", url, "--node-name", "mtls", "--cluster-tls-ca", pki.ca,
                           "--cluster-tls-cert", pki.path("node.pem"), "--cluster-tls-key", pki.path("node-key.pem"))
        c = await Client.connect(node.ws, room=room_name())
        _, ack = await c.command("select", tab="favorites")
        assert ack["type"] == "ack"
        await c.close()
        connections = [x for x in engine_connections(mutual) if x.get("name") == "tabd mtls"]
        assert connections and all(x.get("tls_version") for x in connections), connections

        code, err = stopped_at_start("--cluster", url, "--cluster-tls-ca", pki.ca)
        assert code == 1 and "does it require a client certificate?" in err, err
        code, err = stopped_at_start("--cluster", url, "--cluster-tls-ca", pki.ca, "--cluster-tls-cert", pki.path("stranger.pem"),
                                     "--cluster-tls-key", pki.path("stranger-key.pem"))
        assert code == 1 and "does it trust this client certificate?" in err, err
        # A key that is not the certificate's is named before any connection.
        code, err = stopped_at_start("--cluster", url, "--cluster-tls-ca", pki.ca, "--cluster-tls-cert", pki.path("node.pem"),
                                     "--cluster-tls-key", pki.path("server-key.pem"))
        assert code == 1 and pki.path("server-key.pem") in err and "key values mismatch" in err, err
        assert node.stop() == 0


async def test_two_nodes_with_credentials_files_serve_one_room(make_daemon, operator_engine, pki):
    auth = operator_engine.auth
    a = make_daemon("--cluster", tls_urls(operator_engine), "--node-name", "creds-a", "--cluster-tls-ca", pki.ca,
                    "--cluster-creds", auth.user_creds("creds-a"))
    b = make_daemon("--port", "0", "--node-name", "creds-b", bare=True, env=environment(
        TABD_CLUSTER=tls_urls(operator_engine), TABD_CLUSTER_TLS_CA=pki.ca, TABD_CLUSTER_CREDS=auth.user_creds("creds-b"),
        TABD_CLUSTER_SECRET_FILE=cluster_secret_file()))
    room = room_name()
    ca = await Client.connect(a.ws, room=room)
    cb = await Client.connect(b.ws, room=room)
    events, ack = await ca.command("tap", tab="favorites")
    assert ack["type"] == "ack"
    await cb.until_seq(ack["seq"])
    assert cb.batches[-1] == events
    await ca.close()
    await cb.close()
    assert a.stop() == 0 and b.stop() == 0
    assert "with the credentials file" in a.stderr and "3 copies of every room" in a.stderr, a.stderr


def test_a_credentials_file_the_engine_does_not_trust_is_refused(operator_engine, pki, tmp_path):
    stranger = NKey("A", str(tmp_path), "stranger")
    creds = operator_engine.auth.user_creds("stranger", account=stranger)
    code, err = stopped_at_start("--cluster", tls_urls(operator_engine), "--cluster-tls-ca", pki.ca, "--cluster-creds", creds)
    assert code == 1 and "Authorization Violation" in err and creds in err, err


def test_a_missing_or_malformed_credentials_file_stops_the_node_naming_it(engine, pki, tmp_path):
    missing = str(tmp_path / "no.creds")
    code, err = stopped_at_start("--cluster", tls_urls(engine), "--cluster-tls-ca", pki.ca, "--cluster-creds", missing)
    assert code == 1 and f"'{missing}'" in err and "No such file or directory" in err, err
    malformed = tmp_path / "malformed.creds"
    malformed.write_text("-----BEGIN NATS USER JWT-----\nnot a jwt\n------END NATS USER JWT------\n")
    malformed.chmod(0o600)
    code, err = stopped_at_start("--cluster", tls_urls(engine), "--cluster-tls-ca", pki.ca, "--cluster-creds", str(malformed))
    assert code == 1, err
    assert f"no nkey user seed found in '{malformed}'" in err, err


@pytest.mark.parametrize("args, variables, message", [
    (("--cluster-creds", "x.creds", "--cluster-user", "u", "--cluster-password-file", "pw"), {},
     "--cluster-creds and --cluster-user exclude each other"),
    (("--cluster-creds", "x.creds", "--cluster-password-file", "pw"), {},
     "--cluster-creds and --cluster-password-file exclude each other"),
    # The command line's user sets the variable's credentials file aside: half a pair is left.
    (("--cluster-user", "u"), {"TABD_CLUSTER_CREDS": "x.creds"}, "--cluster-user needs --cluster-password-file too"),
    ((), {"TABD_CLUSTER_CREDS": "x.creds", "TABD_CLUSTER_USER": "u", "TABD_CLUSTER_PASSWORD_FILE": "pw"},
     "TABD_CLUSTER_CREDS and TABD_CLUSTER_USER exclude each other"),
    (("--cluster-user", "u"), {}, "--cluster-user needs --cluster-password-file too"),
    (("--cluster-tls-cert", "c.pem"), {}, "--cluster-tls-cert needs --cluster-tls-key too"),
    (("--cluster-password", "secret"), {}, "--cluster-password is not taken"),
    ((), {"TABD_CLUSTER_PASSWORD": "secret"}, "TABD_CLUSTER_PASSWORD is not taken"),
])
def test_credentials_given_two_ways_or_half_given_are_usage_errors(args, variables, message):
    code, err = stopped_at_start("--cluster", "nats://127.0.0.1:1", *args, env=environment(**variables))
    assert code == 2 and f"tabd: {message}" in err, err
    assert "secret" not in err


@pytest.mark.parametrize("args, variables, name", [
    (("--cluster-tls-ca", "ca.pem"), {}, "--cluster-tls-ca"),
    (("--state", ":memory:", "--cluster-creds", "x.creds"), {}, "--cluster-creds"),
    ((), {"TABD_CLUSTER_USER": "u", "TABD_CLUSTER_PASSWORD_FILE": "pw"}, "TABD_CLUSTER_USER"),
])
def test_the_engine_s_options_need_cluster(args, variables, name):
    code, err = stopped_at_start(*args, env=environment(**variables))
    assert code == 2 and f"tabd: {name} is for a node of a cluster: it needs --cluster" in err, err


def test_with_state_on_the_command_line_the_engine_s_variables_are_set_aside(tmp_path):
    # As TABD_CLUSTER is: the command line chose a node of its own.
    d = Daemon("--state", ":memory:", env=environment(TABD_CLUSTER="nats://127.0.0.1:1", TABD_CLUSTER_USER="u",
                                                      TABD_CLUSTER_PASSWORD_FILE=str(tmp_path / "none")))
    assert d.stop() == 0 and "state in memory" in d.stderr
