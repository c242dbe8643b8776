"""The broker image holds every package of kafkasim: the registry build's context (its
.dockerignore allow-list) and the offline build's wheel (compose/build-offline.sh) both take
each folder that kafkasim/ links to. A package missing there was missing in the containers:
their brokers failed at start-up with "No module named 'kafkasim.console'"."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = sorted(p.name for p in (ROOT / "kafkasim").iterdir() if p.is_symlink())


def test_the_registry_build_context_allows_every_package() -> None:
    allowed = {
        line[1:].strip()
        for line in (ROOT / "compose" / "broker.Dockerfile.dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    assert "console" in PACKAGES
    assert set(PACKAGES) | {"kafkasim"} <= allowed, sorted(set(PACKAGES) - allowed)


def test_the_offline_build_takes_its_source_folders_from_the_links() -> None:
    script = (ROOT / "compose" / "build-offline.sh").read_text()
    start = script.index("SOURCE_FILES=(")
    end = script.index("SOURCE_DIRS=(", start)
    end = script.index("\n", end)
    probe = f'REPO={ROOT}\n{script[start:end]}\nprintf "%s\\n" "${{SOURCE_DIRS[@]}}"\n'
    out = subprocess.run(["bash", "-c", probe], check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["kafkasim", *PACKAGES]
