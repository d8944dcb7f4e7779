"""The documentation works: every relative link of every Markdown file resolves (files and #anchors,
with GitHub's anchor rules), the README's Python code runs, and the command lines the docs show
name scripts that exist and flags those scripts accept."""

import argparse
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)


def markdown_files(root=ROOT):
    """The repository's Markdown files: what git tracks or would add (not what it ignores)."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        return sorted({root / name for name in listed if (root / name).is_file()})
    except (OSError, subprocess.CalledProcessError):  # no git (e.g. an unpacked source archive)
        skip = {".git", ".pytest_cache", "node_modules", "__pycache__"}
        return sorted(p for p in root.rglob("*.md") if not skip & set(p.relative_to(root).parts[:-1]))


def prose_lines(text, keep_code_spans=False):
    """(line number, line) outside fenced code blocks, with inline code spans blanked out unless
    `keep_code_spans` (headings keep their `code` in their anchors)."""
    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            inside = not inside
            continue
        if not inside:
            yield number, line if keep_code_spans else re.sub(r"`[^`]*`", "``", line)


def code_blocks(text, language):
    """The contents of the fenced blocks of `language` (e.g. "python", "bash"), in order."""
    blocks, current = [], None
    for line in text.splitlines():
        stripped = line.strip()
        if current is None and stripped.startswith("```") and stripped[3:].strip() == language:
            current = []
        elif current is not None and stripped.startswith("```"):
            blocks.append("\n".join(current) + "\n")
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def github_anchor(heading):
    """The anchor GitHub gives a heading's text: markup dropped, lower case, punctuation other than
    `-` and `_` removed, spaces to `-` (letters and digits of any script stay)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = text.strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path):
    """Every #anchor that `path` (a Markdown file) offers: its headings' (numbered -1, -2, ... when
    repeated, as GitHub does) and explicit `<a name=...>` / `id=...` ones."""
    found, seen = set(), {}
    for _, line in prose_lines(path.read_text(encoding="utf-8"), keep_code_spans=True):
        match = re.match(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if match:
            slug = github_anchor(match.group(2))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
        found.update(HTML_ANCHOR.findall(line))
    return found


def broken_links(path, root=ROOT):
    """`file:line: target (why)` for each relative link of `path` that does not resolve."""
    problems = []
    for number, line in prose_lines(path.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # http:, https:, mailto:, ...
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}:{number}: {target}"
            if file_part.startswith("/"):
                problems.append(f"{where} (absolute path: GitHub resolves it against the site, not the repository)")
            elif not resolved.exists():
                problems.append(f"{where} (no such file)")
            elif not resolved.is_relative_to(root):
                problems.append(f"{where} (outside the repository)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                problems.append(f"{where} (no heading or anchor #{anchor} in {resolved.relative_to(root)})")
    return problems


def test_every_relative_link_in_the_markdown_files_resolves():
    files = markdown_files()
    assert README in files and len(files) > 5
    problems = [problem for path in files for problem in broken_links(path)]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_the_link_check_finds_broken_files_and_anchors(tmp_path):
    """The check above can fail: a missing file, a missing anchor, an anchor of the file itself."""
    (tmp_path / "other.md").write_text("# Speculative decoding (`bench_speculative.py`)\n\n## Ops\n\n## Ops\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Top: a → b\n\n"
        "[ok](other.md#speculative-decoding-bench_speculativepy) [ok](other.md#ops-1) [ok](#top-a--b)\n"
        "[web](https://example.com/x.md#nowhere) `[code](missing.md)`\n"
        "```bash\n[also code](missing.md)\n```\n"
        "[gone](missing.md) [bad anchor](other.md#ops-2) ![image](pics/none.png) [self](#nowhere)\n"
    )
    problems = broken_links(page, root=tmp_path)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "missing.md (no such file)",
        "other.md#ops-2 (no heading or anchor #ops-2 in other.md)",
        "pics/none.png (no such file)",
        "#nowhere (no heading or anchor #nowhere in page.md)",
    ]
    assert all(p.startswith("page.md:8: ") for p in problems)


@pytest.mark.parametrize(
    "heading, anchor",
    [
        ("Generation speed (`bench_generate.py`)", "generation-speed-bench_generatepy"),
        ("Multi30k En→De on an H100", "multi30k-ende-on-an-h100"),
        ("On an H200 (the TaLK paper's Table 6 setting)", "on-an-h200-the-talk-papers-table-6-setting"),
        ("Load, generate, fine-tune", "load-generate-fine-tune"),
        (
            "Blocks of 2,048 (round `lm-long`, searched after the comparison)",
            "blocks-of-2048-round-lm-long-searched-after-the-comparison",
        ),
    ],
)
def test_anchors_follow_githubs_rules(heading, anchor):
    assert github_anchor(heading) == anchor


def _tiny_translation_run(folder):
    """What the main job leaves in runs/talk-multi30k/best, at a size that builds in a second."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from common.models import build_model
        from common.tokenizer import train_tokenizer
    finally:
        sys.path.remove(str(ROOT / "examples"))
    text = ["Ein Hund rennt über die Wiese.", "A dog runs across the meadow."] * 20
    tokenizer = train_tokenizer(text, kind="bpe", vocab_size=120, min_frequency=1, add_eos=True)
    model = build_model("talk", tokenizer, True, d_model=16, ffn_dim=32, heads=2, encoder_layers=1, decoder_layers=1)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.mark.slow
def test_the_readmes_python_code_runs(tmp_path):
    """Every ```python block of the README, in order, each in its own namespace, in a fresh
    process in an empty folder (where the main job's output folder is faked by a tiny model)."""
    blocks = code_blocks(README.read_text(encoding="utf-8"), "python")
    assert len(blocks) >= 3
    _tiny_translation_run(tmp_path / "runs" / "talk-multi30k" / "best")
    runner = "import json, sys\nfor i, block in enumerate(json.load(open(sys.argv[1]))):\n"
    runner += "    exec(compile(block, f'README.md python block {i + 1}', 'exec'), {'__name__': '__main__'})\n"
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "TALK_HF_BACKEND": "torch", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", runner, "blocks.json"], cwd=tmp_path, env=environment, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]


def test_the_readme_shows_the_test_command_ci_runs():
    """.ci/run runs "the README's test command, verbatim": the same line must stay in both."""
    commands = [
        line for block in code_blocks(README.read_text(encoding="utf-8"), "bash") for line in block.splitlines()
    ]
    assert "python -m pytest -q -n auto" in commands
    assert "python -m pytest -q -n auto" in (ROOT / ".ci" / "run").read_text().splitlines()


def shell_commands(text):
    """The commands of the ```bash blocks of a Markdown text: continuation lines joined, comments
    and `VAR=value` prefixes dropped, `a && b` split."""
    commands = []
    for block in code_blocks(text, "bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            for command in filter(None, (part.strip() for part in line.split("&&"))):
                words = shlex.split(command)
                while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
                    words = words[1:]
                if words:
                    commands.append(words)
    return commands


class _Parsed(Exception):
    """Raised by the patched argparse once a script's command line is parsed: no work is done."""


@pytest.fixture
def parse_only(monkeypatch):
    """argparse parses, then stops the program (outermost `parse_known_args` only); a wrong flag
    still ends in argparse's own error (SystemExit 2)."""
    original = argparse.ArgumentParser.parse_known_args
    depth = [0]

    def parse_known_args(self, args=None, namespace=None):
        depth[0] += 1
        try:
            result = original(self, args, namespace)
        finally:
            depth[0] -= 1
        if depth[0] == 0:
            raise _Parsed(result)
        return result

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", parse_known_args)


def _load(path):
    spec = importlib.util.spec_from_file_location("doc_checked_" + path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_command(words, monkeypatch):
    """Parse `words` with the argument parser of the program it runs, where that is one of ours.
    Returns what was checked ("" when the command is not one of ours)."""
    if words[:3] == ["python", "-m", "pytest"] or words[0] in ("pip", "curl", "tar", "huggingface-cli", "g++"):
        return ""
    scripts = [i for i, word in enumerate(words) if re.match(r"^(examples|benchmarks)/.*\.(py|sh)$", word)]
    if scripts:
        script = ROOT / words[scripts[0]]
        assert script.is_file(), f"{words[scripts[0]]} does not exist"
        argv = words[scripts[0] + 1 :]
        if script.suffix != ".py" or "..." in argv or script.parent.name == "results":
            return str(script.relative_to(ROOT))
        monkeypatch.syspath_prepend(str(script.parent))  # as when it runs: its folder first on the path
        module = _load(script)
        monkeypatch.setattr(sys, "argv", [str(script), *argv])
        with pytest.raises(_Parsed) as parsed:
            module.parse_args(argv) if hasattr(module, "parse_args") else module.main()
        namespace, extra = parsed.value.args[0]
        assert not extra, f"{' '.join(words)}: {script.name} does not take {extra}"
        return str(script.relative_to(ROOT))
    if words[:2] == ["python", "-m"]:
        module = importlib.import_module(words[2] + ("" if words[2].endswith(".build") else ".__main__"))
        with pytest.raises(_Parsed) as parsed:
            module.main(words[3:])
        assert not parsed.value.args[0][1], f"{' '.join(words)}: unknown {parsed.value.args[0][1]}"
        return words[2]
    return ""


@pytest.mark.parametrize(
    "document",
    [
        "README.md",
        "docs/backends.md",
        "docs/converting-fairseq.md",
        "docs/serving.md",
        "examples/README.md",
        "examples/results/README.md",
        "benchmarks/README.md",
    ],
)
def test_the_command_lines_the_docs_show_name_real_scripts_and_flags(document, parse_only, monkeypatch):
    commands = shell_commands((ROOT / document).read_text(encoding="utf-8"))
    checked = [check_command(words, monkeypatch) for words in commands]
    assert any(checked), f"no command of {document} was checked"


def test_a_flag_that_does_not_exist_fails_the_command_check(parse_only, monkeypatch):
    words = shlex.split("python examples/translation/train.py --output_dir x --max_train_hours 10")
    with pytest.raises(AssertionError, match=r"train.py does not take \['--max_train_hours', '10'\]"):
        check_command(words, monkeypatch)
    with pytest.raises(SystemExit):  # argparse's own error: a choice that does not exist
        check_command(shlex.split("python examples/translation/train.py --output_dir x --schedule linear"), monkeypatch)
    with pytest.raises(AssertionError, match="does not exist"):
        check_command(shlex.split("python examples/translation/train_all.py --output_dir x"), monkeypatch)
    assert check_command(shlex.split("python examples/translation/train.py --output_dir x --threads 1"), monkeypatch)


def test_a_clone_named_talk_hf_imports_as_an_empty_namespace_from_its_parent_folder(tmp_path):
    """What the README says about running Python from the folder that holds a clone named talk_hf:
    `import talk_hf` then finds the clone's folder (no __init__.py at the repository root), none of
    our code runs, and `talk_hf.__file__` is None."""
    (tmp_path / "talk_hf" / "talk_hf").mkdir(parents=True)  # the clone, and the package inside it
    probe = "import talk_hf; print(talk_hf.__file__, hasattr(talk_hf, 'TaLKConfig'))"
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.split() == ["None", "False"], result.stdout + result.stderr
    readme = " ".join(README.read_text(encoding="utf-8").split())
    assert 'python -c "import talk_hf; print(talk_hf.__file__)"` prints `None`' in readme
