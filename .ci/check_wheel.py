"""Fail when a built wheel lacks a tracked package file the package needs at run time.

    python .ci/check_wheel.py dist/talk_hf-*.whl
"""

import subprocess
import sys
import zipfile

RUNTIME_SUFFIXES = (".py", ".cu", ".cuh", ".cpp", ".h")

wheel_path = sys.argv[1]
tracked = subprocess.run(["git", "ls-files", "talk_hf"], check=True, capture_output=True, text=True).stdout.split()
needed = {path for path in tracked if path.endswith(RUNTIME_SUFFIXES)}
in_wheel = set(zipfile.ZipFile(wheel_path).namelist())
missing = sorted(needed - in_wheel)
if missing:
    sys.exit(f"{wheel_path} lacks {len(missing)} package files: {missing}")
print(f"wheel carries all {len(needed)} runtime files of talk_hf")
