"""A clone needs nothing beside it: no code, test, notebook, benchmark or script reads
../shared (the fixtures live in tests/data/fixtures with their licences)."""
from __future__ import annotations

import re
import subprocess

from conftest import FIXTURES, REPO

PATTERN = re.compile(r"""\.\./shared|["']shared["']\s*\)|/ ?["']shared["']|/work/shared""")


def test_nothing_reads_a_folder_beside_the_clone():
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    hits = []
    for f in files:
        if not f.endswith((".py", ".ipynb", ".sh", ".toml", ".cfg")) or f.startswith("tests/data/"):
            continue
        if f == "tests/test_repo_self_contained.py":
            continue
        for i, line in enumerate((REPO / f).read_text(errors="replace").splitlines(), 1):
            if PATTERN.search(line):
                hits.append(f"{f}:{i}: {line.strip()[:100]}")
    assert not hits, "\n".join(hits)


def test_the_fixtures_are_in_the_repository_with_their_licences():
    for folder in ("polygraphy-models", "trex-a100-resnet"):
        assert (FIXTURES / folder / "LICENSE.txt").is_file(), folder
    assert any((FIXTURES / "trt86-h200").glob("*.layers.json"))
