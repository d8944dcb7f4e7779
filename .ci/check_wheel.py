"""Fail when a built wheel lacks a tracked package file (or kernel source) the package needs at run time.

python .ci/check_wheel.py dist/talk_hf-*.whl
"""

import subprocess
import sys
import zipfile

RUNTIME_SUFFIXES = (".py", ".cu", ".cuh", ".cpp", ".h")

wheel_path = sys.argv[1]
tracked = subprocess.run(
    ["git", "ls-files", "talk_hf", "csrc"], check=True, capture_output=True, text=True
).stdout.split()
# csrc/ (the kernel sources, top level in the repository) is installed as the package's talk_hf/csrc
needed = {
    "talk_hf/" + path if path.startswith("csrc/") else path for path in tracked if path.endswith(RUNTIME_SUFFIXES)
}
in_wheel = set(zipfile.ZipFile(wheel_path).namelist())
missing = sorted(needed - in_wheel)
if missing:
    sys.exit(f"{wheel_path} lacks {len(missing)} package files: {missing}")
print(f"wheel carries all {len(needed)} runtime files of talk_hf")
