"""Export a saved checkpoint so that it loads with ``trust_remote_code=True`` without talk_hf.

transformers copies a checkpoint's code files into one flat module folder and resolves only
single-dot relative imports there.  The package is nested (``models/talk/modeling_talk.py``
imports ``...layers``, ``...ops``), so :func:`export_for_remote_code` copies every module the
modeling and configuration files need, flat, rewrites their package-relative imports to
``from .<module> import``, and writes a full ``auto_map`` (AutoConfig, AutoModel and the
generative head's Auto class) into ``config.json``.  The copies run the PyTorch path of the ops.
Each copy starts with `COPY_MARKER`: exporting again replaces the copies, and refuses to replace a
file of the same name that it did not write (a user's ``cache.py``), unless told to.  A talk_hf model's
``save_pretrained`` (and ``push_to_hub``) into a folder that holds copies exports it again, and so does a
save of a model loaded from an exported folder, whose configuration keeps the ``auto_map``
(`refresh_remote_code`).

    model.save_pretrained("ckpt")
    export_for_remote_code("ckpt")
    # optional: huggingface_hub.upload_folder(repo_id=..., folder_path="ckpt")
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from pathlib import Path

from .models.conv_modeling import ConvPreTrainedModel
from .models.families import family_of

_FROM_RELATIVE = re.compile(r"^(\s*)from\s+\.+[\w.]*\s+import\b")
# The first line of every module copy, by which an export recognises its own copies.
COPY_MARKER = "# Copied by talk_hf.export_for_remote_code"


def _module_file(module_name: str) -> Path:
    return Path(sys.modules[module_name].__file__)


def _flat_name(module_name: str) -> str:
    """``talk_hf.layers.talk_mixer`` -> ``talk_mixer``; a package's ``__init__`` takes the package's name."""
    return module_name.rsplit(".", 1)[-1]


def _relative_imports(module_name: str) -> list[tuple[ast.ImportFrom, list[str]]]:
    """Each relative ``from ... import`` of the module with the absolute module(s) it imports.

    ``from .x import a`` imports module ``x``; ``from . import a, b`` imports modules ``a`` and ``b``.
    """
    path = _module_file(module_name)
    package = module_name if path.name == "__init__.py" else module_name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            targets = [base] if node.module else [f"{base}.{alias.name}" for alias in node.names]
            found.append((node, targets))
    return found


def _collect(entry_modules: list[str]) -> list[str]:
    """The entry modules and every talk_hf module they import, transitively."""
    ordered, pending = [], list(entry_modules)
    while pending:
        name = pending.pop()
        if name in ordered:
            continue
        ordered.append(name)
        importlib.import_module(name)
        pending.extend(target for _, targets in _relative_imports(name) for target in targets)
    return ordered


def _flattened_source(module_name: str) -> str:
    """The module's source with each relative import rewritten against the flat folder.

    ``from ..x.y import a`` becomes ``from .y import a``.  ``from . import m`` stays valid, but
    transformers copies only files named by ``from .<name> import`` lines, so such a line gets
    ``from .m import __name__ as _m_module`` in front of it.
    """
    lines = _module_file(module_name).read_text(encoding="utf-8").splitlines(keepends=True)
    header = f"{COPY_MARKER} from {module_name}; exporting again replaces this file.\n"
    for node, targets in _relative_imports(module_name):
        index = node.lineno - 1
        if node.module:
            lines[index] = _FROM_RELATIVE.sub(rf"\1from .{_flat_name(targets[0])} import", lines[index], count=1)
        else:
            indent = lines[index][: len(lines[index]) - len(lines[index].lstrip())]
            markers = "".join(
                f"{indent}from .{_flat_name(target)} import __name__ as _{_flat_name(target)}_module\n"
                for target in targets
            )
            names = ", ".join(
                _flat_name(target) + (f" as {alias.asname}" if alias.asname else "")
                for target, alias in zip(targets, node.names, strict=True)
            )
            lines[index] = f"{markers}{indent}from . import {names}\n"
            for continuation in range(index + 1, node.end_lineno):
                lines[continuation] = ""
    return header + "".join(lines)


def _is_own_copy(path: Path) -> bool:
    """Whether ``path`` is a module copy an export wrote (its first line is `COPY_MARKER`'s)."""
    if not path.is_file():
        return False
    with path.open(encoding="utf-8", errors="replace") as file:
        return file.readline().startswith(COPY_MARKER)


def _check_nothing_foreign_replaced(save_directory: Path, file_names: list[str], overwrite: bool) -> None:
    """Refuse, unless ``overwrite``, to replace a file of ``save_directory`` that no export wrote."""
    foreign = sorted(
        name for name in file_names if (save_directory / name).exists() and not _is_own_copy(save_directory / name)
    )
    if foreign and not overwrite:
        raise FileExistsError(
            f"{save_directory} holds {', '.join(foreign)}, which export_for_remote_code did not write but would "
            f"replace with the module copies of the same names: move them out of the checkpoint folder, or pass "
            f"overwrite=True to replace them"
        )


def export_for_remote_code(save_directory: str | Path, *, overwrite: bool = False) -> dict[str, str]:
    """Make a ``save_pretrained`` folder of a talk_hf model loadable with ``trust_remote_code=True``.

    Args:
        save_directory: a folder holding the ``config.json`` of a talk_hf model.
        overwrite: replace files named like a module copy (``cache.py``, ``version.py``, ...) that an
            export did not write; without it they are refused, and nothing is written.

    Returns:
        The ``auto_map`` written into ``config.json``.

    Raises:
        FileNotFoundError: ``save_directory`` holds no ``config.json``.
        FileExistsError: naming the files of ``save_directory`` that an export did not write and would replace.
    """
    save_directory = Path(save_directory)
    config_path = save_directory / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(
            f"export_for_remote_code: {save_directory} has no config.json; pass the folder that a talk_hf model's "
            "save_pretrained (or the training scripts' best/) wrote"
        )
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config_class, base_class, head_class, head_auto_class = family_of(config.get("model_type"))

    modules = _collect([config_class.__module__, head_class.__module__])
    flat_names = [_flat_name(name) for name in modules]
    clashes = {name for name in flat_names if flat_names.count(name) > 1}
    if clashes:
        raise RuntimeError(f"talk_hf modules with the same file name cannot be flattened: {sorted(clashes)}")
    _check_nothing_foreign_replaced(save_directory, [f"{name}.py" for name in flat_names], overwrite)
    for module_name in modules:
        (save_directory / f"{_flat_name(module_name)}.py").write_text(_flattened_source(module_name), encoding="utf-8")

    config_module, modeling_module = _flat_name(config_class.__module__), _flat_name(head_class.__module__)
    auto_map = {
        "AutoConfig": f"{config_module}.{config_class.__name__}",
        "AutoModel": f"{modeling_module}.{base_class.__name__}",
        head_auto_class: f"{modeling_module}.{head_class.__name__}",
    }
    config["auto_map"] = auto_map
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return auto_map


def refresh_remote_code(folder: Path) -> None:
    """Export ``folder`` again (`export_for_remote_code`) where it holds a module copy that an export wrote, or
    where its config.json has an ``auto_map`` whose code is not there.

    A talk_hf model's ``save_pretrained`` calls it after writing into ``folder`` (and ``push_to_hub`` before the
    upload).  Into an exported folder, transformers' config.json has no ``auto_map``, and loading with
    ``trust_remote_code=True`` would stop working while the copies stayed.  A model loaded from an exported
    folder keeps the ``auto_map`` in its configuration, so saving it elsewhere wrote a config.json naming code
    files the new folder lacks: ``trust_remote_code=True`` loading of it failed.  Exporting, rather than writing
    the old ``auto_map`` back or dropping it, keeps the folder loadable both ways, with copies that are the code
    of the talk_hf that wrote the new config.json and weights (an older export's copies may not read them).  A
    file of a copy's name that no export wrote is refused as `export_for_remote_code` refuses it
    (FileExistsError), after the save.
    """
    if any(_is_own_copy(path) for path in folder.glob("*.py")) or _names_missing_code(folder):
        export_for_remote_code(folder)


def _names_missing_code(folder: Path) -> bool:
    """Whether ``folder``'s config.json has an ``auto_map`` naming a module file that ``folder`` lacks (entries
    ``module.Class``; ``repo--module.Class`` names another repository's code, and a tokenizer's pair may hold None)."""
    config_path = folder / "config.json"
    if not config_path.is_file():
        return False
    auto_map = json.loads(config_path.read_text(encoding="utf-8")).get("auto_map") or {}
    references = [name for value in auto_map.values() for name in (value if isinstance(value, list) else [value])]
    return any(
        not (folder / f"{reference.rsplit('.', 1)[0]}.py").is_file()
        for reference in references
        if isinstance(reference, str) and "--" not in reference
    )


ConvPreTrainedModel.refresh_remote_code = staticmethod(refresh_remote_code)
