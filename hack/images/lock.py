"""Pin vc-apiserver's runtime dependencies for its image: the versions pip resolves today for
pyproject.toml's ``dependencies`` on CPython 3.11 / manylinux x86_64, each with the SHA256 of its
wheel, into ``requirements.txt`` beside this file. The image installs exactly those
(``--require-hashes``), so a rebuild months later installs the same bytes."""

from __future__ import annotations

import json
import sys
import tempfile
import tomllib
from pathlib import Path

from hack.images.build import MANYLINUX, REPO, REQUIREMENTS, run


def lock(out: Path = REQUIREMENTS) -> str:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    plats = [a for p in MANYLINUX for a in ("--platform", p)]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        run([sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
             "--report", str(report), "--target", str(Path(tmp) / "t"), "--only-binary=:all:", *plats,
             "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
             "--disable-pip-version-check", *deps], "pip install --dry-run --report")
        items = json.loads(report.read_text())["install"]
    lines = ["# vc-apiserver's runtime dependencies for its image (python -m hack.images lock writes this file;",
             "# pyproject.toml's dependencies resolved for CPython 3.11 on manylinux x86_64)."]
    for item in sorted(items, key=lambda i: i["metadata"]["name"].lower()):
        sha = item["download_info"]["archive_info"]["hashes"]["sha256"]
        lines.append(f"{item['metadata']['name']}=={item['metadata']['version']} --hash=sha256:{sha}")
    out.write_text("\n".join(lines) + "\n")
    return f"{out}: {len(items)} packages"
