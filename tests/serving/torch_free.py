"""Run an exported folder's own runner in a fresh process where talk_hf, torch and transformers
cannot be imported, as on a serving host with only onnxruntime and numpy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def generate_without_torch(folder: Path, ids: list, mask: list, requests: list[dict]) -> list:
    """The tokens (nested lists) of ``runner.OnnxGenerator(folder).generate(ids, mask, **request)`` for
    each of ``requests``, decoded by the folder's ``runner.py`` with the files beside it; the
    process's stderr in the assertion message if it fails."""
    script = (
        "import sys, json, numpy as np\n"
        "sys.modules.update(dict.fromkeys(['talk_hf', 'torch', 'transformers']))\n"
        f"sys.path.insert(0, {str(folder)!r})\n"
        "import runner\n"
        f"generator = runner.OnnxGenerator({str(folder)!r}, threads=1)\n"
        f"ids, mask = np.array({ids!r}), np.array({mask!r})\n"
        f"print(json.dumps([generator.generate(ids, mask, **r).tolist() for r in {requests!r}]))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)
