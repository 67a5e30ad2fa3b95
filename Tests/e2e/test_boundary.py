"""The room and the coordinator know a log, not the cluster behind it (docs/ARCHITECTURE.md,
"The room's log: one boundary, two implementations").

Sources/Coordinator, Sources/TabdProtocol and Sources/TabdServer/Rooms import neither the cluster's modules nor
name any type they declare: the cluster lives behind `Durability`, `SharedLog` and
`CommandRouter` (Sources/TabdServer/Cluster implements the last two). A change that reaches
through the boundary fails here, naming the file, the line and the type.
"""
import os
import re

from conftest import ROOT

ENGINE_MODULES = ("Cluster", "JetStream", "CNATS")
INSIDE = [os.path.join(ROOT, "Sources", "Coordinator"), os.path.join(ROOT, "Sources", "TabdProtocol"),
          os.path.join(ROOT, "Sources", "TabdServer", "Rooms")]
# Top-level declarations only (nested ones, `State` or `Action`, are named through their
# outer type, which is caught).
DECLARATION = re.compile(r"^(?:(?:public|package|internal|private|fileprivate|final|indirect)\s+)*"
                         r"(?:struct|class|enum|actor|protocol|typealias)\s+([A-Z][A-Za-z0-9_]*)", re.M)


def swift_files(folder):
    for base, _, names in os.walk(folder):
        for name in sorted(names):
            if name.endswith(".swift"):
                yield os.path.join(base, name)


def engine_types():
    names = set()
    for module in ENGINE_MODULES:
        for path in swift_files(os.path.join(ROOT, "Sources", module)):
            with open(path) as f:
                names.update(DECLARATION.findall(f.read()))
    return names


def code_lines(path):
    """The file's lines with comments and string literals blanked (a comment may speak of a
    cluster; code may not name its types)."""
    with open(path) as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    for n, line in enumerate(text.split("\n"), 1):
        line = re.sub(r'"(?:\\.|[^"\\])*"', '""', line)
        yield n, line.split("//", 1)[0]


def test_the_coordinator_and_the_rooms_name_nothing_of_the_cluster():
    types = engine_types()
    assert {"ClusterNode", "ClusterRoom", "ForwardRequest", "ForwardingPlan", "EngineClient"} <= types, "the scan finds the engine's types"
    found = []
    for folder in INSIDE:
        for path in swift_files(folder):
            for n, line in code_lines(path):
                imported = re.match(r"\s*(?:@[\w()]+\s+)*import\s+(\w+)", line)
                if imported and imported.group(1) in ENGINE_MODULES:
                    found.append(f"{os.path.relpath(path, ROOT)}:{n}: import {imported.group(1)}")
                for word in set(re.findall(r"\b[A-Z][A-Za-z0-9_]*\b", line)) & types:
                    found.append(f"{os.path.relpath(path, ROOT)}:{n}: {word}")
    assert not found, "the boundary is crossed:\n" + "\n".join(found)
