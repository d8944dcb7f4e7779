"""`.ci/oldest.txt`, the releases CI's last pass installs, pins every dependency of setup.py that has a
floor (``>=``) at exactly that floor, torch aside (CI keeps its CPU wheel): the floors the package
declares are the releases that pass."""

from __future__ import annotations

import runpy
from pathlib import Path
from unittest import mock

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def declared_requirements() -> list[Requirement]:
    """Every requirement of setup.py: install_requires and every extra's."""
    arguments = {}
    with mock.patch("setuptools.setup", lambda **kwargs: arguments.update(kwargs)):
        runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    lines = arguments["install_requires"] + [line for extra in arguments["extras_require"].values() for line in extra]
    return [Requirement(line) for line in lines]


def test_oldest_txt_pins_every_floor_of_setup_py():
    floors = {}
    for requirement in declared_requirements():
        for specifier in requirement.specifier:
            if specifier.operator == ">=":
                floors[canonicalize_name(requirement.name)] = Version(specifier.version)
    assert floors.pop("torch") == Version("2.11")
    pinned = {}
    for line in (ROOT / ".ci" / "oldest.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            assert specifier.operator == "==", line
            pinned[canonicalize_name(requirement.name)] = Version(specifier.version)
    assert pinned == floors
