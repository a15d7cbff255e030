#!/usr/bin/env python3
"""Checks that docs/layout.md names every source file of the workspace's
crates: each `.rs` file under a crate's `src/` (other than `lib.rs`,
`main.rs`, `mod.rs` and `tests.rs`, which their folder stands for) is
named by its file name, and each under `benches/` or `examples/` by its
name or by that folder's. Prints what is missing and exits 1; run by
.ci/run.
"""

import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
layout = (root / "docs" / "layout.md").read_text()
words = set(re.findall(r"[A-Za-z0-9_.\-/]+", layout))
folders = {w.rstrip(",.`").rstrip("/").split("/")[-1] for w in words if w.rstrip(",.`").endswith("/")}
files = set()
for w in words:
    w = w.rstrip(",.`")
    if w.endswith(".rs"):
        files.add(w.split("/")[-1])

missing = []
for crate in sorted((root / "crates").iterdir()):
    for part in ("src", "benches", "examples"):
        base = crate / part
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*.rs")):
            rel = path.relative_to(base)
            if path.name in ("lib.rs", "main.rs", "mod.rs", "tests.rs"):
                continue
            if path.name in files:
                continue
            # Benches and examples may be named as a folder of the crate's.
            if part != "src" and part in folders:
                continue
            missing.append(str(path.relative_to(root)))

if missing:
    print("docs/layout.md does not name these source files:")
    for m in missing:
        print("  " + m)
    sys.exit(1)
print("layout: every source file is named in docs/layout.md")
