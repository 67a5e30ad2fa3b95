"""A SwiftPM package of a user's own (Tests/fixtures/observation-app) that depends on tabd
by path: it imports the TabdObservation product, binds a TabdRoom to a room of a running
tabd, watches its selection with Observation's tracking while another client selects, and
prints what it saw. Built and run as a user would, with `swift run` (its own build of
tabd's modules: about 15 s here once the project is built)."""
import json
import os
import subprocess

from conftest import ROOT

APP = os.path.join(ROOT, "Tests", "fixtures", "observation-app")


def test_a_package_that_depends_on_tabd_by_path_binds_a_room_and_observes_it(daemon, tmp_path):
    scratch = str(tmp_path / "build")
    run = subprocess.run(["swift", "run", "--package-path", APP, "--scratch-path", scratch, "App", daemon.http],
                         capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen == {"before": "home", "after": "profile", "observed": True, "tabs": 3}, seen
