"""Run transformers' own ``ModelTesterMixin`` against every talk_hf model, for the installed transformers.

    python .ci/transformers_common_tests.py [--cache-dir DIR] [pytest arguments ...]

transformers' wheel does not ship its tests; its source distribution on PyPI ships the top-level
``tests/test_*_common.py`` files (``test_modeling_common.py`` among them) but not the subfolders
they import from.  This script

1. downloads the sdist of exactly the installed version with pip (``pip download --no-binary
   :all: --no-deps transformers==X``) into a cache folder (default
   ``~/.cache/talk_hf-ci/transformers-sdist``), once per version;
2. unpacks ``tests/test_modeling_common.py`` as the package ``transformers_tests`` (not ``tests``,
   which is talk_hf's own test package) and adds the two modules it imports that the sdist lacks,
   ``generation/test_utils.py`` and ``exporters/test_export.py``, as empty mixins: the generation
   and export checks are left out (talk_hf's own generation tests cover generate());
3. installs ``parameterized`` (imported by ``test_modeling_common.py``) when it is missing;
4. runs pytest over ``tests_transformers_common/`` with that package importable; the exit status
   is pytest's, so any failure fails the run.

It fails with a clear message when the sdist lacks ``tests/test_modeling_common.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import transformers

ROOT = Path(__file__).resolve().parents[1]
COMMON_TESTS = "tests/test_modeling_common.py"
# The modules test_modeling_common.py imports relatively that the sdist does not ship: empty mixins.
MISSING_HELPERS = {
    "generation/test_utils.py": "GenerationTesterMixin",
    "exporters/test_export.py": "ExportTesterMixin",
}


def download_sdist(version: str, cache_dir: Path) -> Path:
    """The path of ``transformers-<version>.tar.gz`` in ``cache_dir``, downloaded with pip if absent."""
    sdist = cache_dir / f"transformers-{version}.tar.gz"
    if not sdist.exists():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-binary",
                ":all:",
                "--no-deps",
                f"transformers=={version}",
                "--dest",
                str(cache_dir),
            ],
            check=True,
        )
    return sdist


def unpack_common_tests(sdist: Path, target: Path) -> None:
    """Write ``target/transformers_tests``: the sdist's common modeling tests plus empty stand-ins
    for the helpers it does not ship."""
    package = target / "transformers_tests"
    with tarfile.open(sdist) as archive:
        member = f"{sdist.name.removesuffix('.tar.gz')}/{COMMON_TESTS}"
        try:
            source = archive.extractfile(member).read()
        except KeyError:
            sys.exit(f"{sdist} has no {COMMON_TESTS}: transformers' common tests cannot run from this sdist")
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "test_modeling_common.py").write_bytes(source)
    for path, mixin in MISSING_HELPERS.items():
        module = package / path
        module.parent.mkdir(exist_ok=True)
        (module.parent / "__init__.py").write_text("")
        module.write_text(f'"""Not in the sdist; left out by talk_hf\'s CI."""\n\n\nclass {mixin}:\n    pass\n')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "talk_hf-ci" / "transformers-sdist")
    args, pytest_args = parser.parse_known_args()
    version = transformers.__version__
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    unpacked = args.cache_dir / version
    unpack_common_tests(download_sdist(version, args.cache_dir), unpacked)
    if importlib.util.find_spec("parameterized") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "parameterized"], check=True)
    print(f"transformers {version}: ModelTesterMixin from {unpacked / 'transformers_tests'}", flush=True)
    env = dict(os.environ, TRANSFORMERS_COMMON_TESTS=str(unpacked), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    # transformers registers its pytest marks (flash_attn_test, ...) in its repository's conftest.py,
    # which the sdist lacks: silence pytest's warning about unknown marks.
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-W",
        "ignore::pytest.PytestUnknownMarkWarning",
        "tests_transformers_common",
        *pytest_args,
    ]
    return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
