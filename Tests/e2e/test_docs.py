"""The docs name only what exists: every file or folder of the repository a document cites
(a Markdown link, or a path in backticks such as `Sources/Outbox/Outbox.swift`), every
anchor a link names; the README fits on a screen; and the option synopsis at the top of
PROTOCOL.md names every option `tabd --help` lists."""
import glob
import os
import re
import subprocess

from conftest import ROOT, TABD

DOCS = [os.path.join(ROOT, p) for p in ["README.md", "CHANGELOG.md", "contrib/README.md"]] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
# Top-level folders and files of the repository a path in backticks may start with.
ROOTS = ("Sources/", "Tests/", "docs/", "scripts/", "bench/", "contrib/", "web/", ".ci/", "Package.swift", "Makefile", "VERSION",
         "CHANGELOG.md", "LICENSE")
# Paths that name what tabd or a run makes, not what the repository holds.
MADE = ("test-output/", ".build", ".tabd/", ".venv/", "Sources/CBuildInfo/build_commit.h")


def anchors(path):
    """GitHub's anchors of a Markdown file's headings."""
    out = set()
    seen = {}
    for line in open(path, encoding="utf-8"):
        m = re.match(r"^#{1,6} (.+?)\s*$", line)
        if not m:
            continue
        a = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower().replace("`", "")).replace(" ", "-")
        n = seen.get(a, 0)
        seen[a] = n + 1
        out.add(a if n == 0 else f"{a}-{n}")
    return out


def cited(doc):
    """(what, path relative to the repository, anchor or None) for each citation of `doc`."""
    text = open(doc, encoding="utf-8").read()
    # Code blocks hold commands and output, not citations.
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    here = os.path.dirname(doc)
    out = []
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(here, path)) if path else doc
        out.append((f"link {target}", os.path.relpath(full, ROOT), anchor or None))
    for m in re.finditer(r"`([^`\s]+)`", text):
        path = m.group(1).rstrip(".,:;")
        if path.startswith(ROOTS) and not path.startswith(MADE) and not re.search(r"[*?{}<>$…]|\.\.\.|[A-Z]{3,}\b", path.split("/")[-1] + "/"):
            out.append((f"path `{path}`", path.split("#")[0].split(":")[0].rstrip("/"), None))
    return out


def test_every_file_and_anchor_the_docs_cite_exists():
    missing = []
    for doc in DOCS:
        for what, path, anchor in cited(doc):
            full = os.path.join(ROOT, path)
            # A test or type named without its extension (`Tests/CoordinatorTests/FoldTests`).
            if not os.path.exists(full) and not os.path.exists(full + ".swift"):
                missing.append(f"{os.path.relpath(doc, ROOT)}: {what}")
            elif anchor and full.endswith(".md") and anchor not in anchors(full):
                missing.append(f"{os.path.relpath(doc, ROOT)}: {what} (no such heading)")
    assert not missing, "\n".join(missing)


def test_the_readme_fits_on_a_screen():
    lines = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read().count("\n")
    assert lines <= 150, f"README.md has {lines} lines"


def test_the_protocols_option_synopsis_names_every_option_tabd_has():
    help_text = subprocess.run([TABD, "--help"], capture_output=True, text=True, check=True).stdout
    options = set(re.findall(r"^\s+(--[a-z][a-z0-9-]*)", help_text, re.M)) - {"--help", "--version"}
    protocol = open(os.path.join(ROOT, "docs", "PROTOCOL.md"), encoding="utf-8").read()
    synopsis = protocol[protocol.index("## Running tabd"):protocol.index("### Numbers")]
    missing = sorted(o for o in options if not re.search(re.escape(o) + r"\b", synopsis))
    assert not missing, f"PROTOCOL.md's 'Running tabd' does not name {missing}"
