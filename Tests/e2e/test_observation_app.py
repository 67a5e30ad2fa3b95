"""A SwiftPM package of a user's own (Tests/fixtures/observation-app) that depends on tabd
by path: it imports the TabdObservation product, binds a TabdRoom to a room of a running
tabd, watches its selection with Observation's tracking while another client selects, and
prints what it saw. Built and run as a user would, with `swift run` (its own build of
tabd's modules: about 15 s here once the project is built).

The same build compiles the Swift examples of docs/CLIENTS.md (each block in a function of
its own on the main actor, where an app's UI code runs, beside stubs for what a block names
from the app: its back end), and its link
line is checked: an app of the client libraries links none of the server's modules."""
import json
import os
import re
import shutil
import subprocess

from conftest import ROOT

APP = os.path.join(ROOT, "Tests", "fixtures", "observation-app")
# The server's modules: an app of TabdClient and TabdObservation links none of them.
SERVER_MODULES = ["Coordinator", "TabdServer", "Cluster", "JetStream", "StateStore", "Auth", "WebSockets", "CSQLite", "CNATS"]

# What the docs' examples name from the app around them.
PRELUDE = """
import Foundation
import TabdClient
import TabdObservation

/// The app's back end, as the docs' examples call it.
struct DocBackend: Sendable {
    func tabdToken(room: String) async throws -> String? { "a.b.c" }
}
let backend = DocBackend()
func load(_ route: String?) {}
"""


def doc_examples():
    """docs/CLIENTS.md's Swift blocks as functions (imports lifted out); the SwiftUI sketch
    (Apple platforms) and the Package.swift lines are not compiled here."""
    text = open(os.path.join(ROOT, "docs", "CLIENTS.md")).read()
    blocks = re.findall(r"```swift\n(.*?)```", text, re.S)
    out, used = [], 0
    for n, block in enumerate(blocks):
        if block.startswith("// Package.swift") or ": View" in block:
            continue
        body = "\n".join(line for line in block.splitlines() if not line.startswith("import "))
        out.append(f"@MainActor func docExample{n}() async throws {{\n{body}\n}}\n")
        used += 1
    return used, PRELUDE + "\n".join(out)


def test_a_package_that_depends_on_tabd_by_path_binds_a_room_and_observes_it(daemon, tmp_path):
    app = tmp_path / "app"
    shutil.copytree(APP, app)
    package = (app / "Package.swift").read_text().replace('path: "../../.."', f'path: "{ROOT}"')
    (app / "Package.swift").write_text(package)
    used, examples = doc_examples()
    assert used >= 3, "the docs' Swift examples"
    (app / "Sources" / "App" / "DocExamples.swift").write_text(examples)
    scratch = str(tmp_path / "build")
    run = subprocess.run(["swift", "run", "--package-path", str(app), "--scratch-path", scratch, "App", daemon.http],
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen == {"before": "home", "after": "profile", "observed": True, "tabs": 3, "bindingError": None,
                    "literal": '{"cart":[1,"two"],"open":true}', "codable": True}, seen
    # The link line: the client libraries and what they need, none of the server's modules.
    (link_list,) = [os.path.join(d, f) for d, _, fs in os.walk(scratch) for f in fs
                    if f == "Objects.LinkFileList" and "App.product" in d]
    linked = open(link_list).read()
    for module in ["TabdObservation", "TabdClient", "TabdProtocol"]:
        assert f"/{module}.build/" in linked, f"{module} is not linked: {linked}"
    for module in SERVER_MODULES:
        assert f"/{module}.build/" not in linked, f"the app links the server's {module}"
