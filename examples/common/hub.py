"""`--push_to_hub`: the best model of a run, uploaded so that it loads anywhere."""

import shutil
from pathlib import Path

import huggingface_hub
from transformers import AutoConfig

import talk_hf

from .models import is_ours


def hub_folder(output_dir):
    """`output_dir/hub`: a copy of best/ that loads anywhere, ours with `trust_remote_code=True`.

    For our model types the modeling code is copied in (`talk_hf.export_for_remote_code`), so the
    uploaded checkpoint does not need `talk_hf` installed; transformers' own models need nothing.
    """
    folder = Path(output_dir) / "hub"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(Path(output_dir) / "best", folder)
    if is_ours(AutoConfig.from_pretrained(folder)):
        talk_hf.export_for_remote_code(folder)
    return folder


def upload(accelerator, args):
    """best/ (with its tokenizer and, for our models, their code) to `--hub_model_id`, with `--push_to_hub`."""
    if args.push_to_hub and accelerator.is_main_process:
        huggingface_hub.create_repo(args.hub_model_id, exist_ok=True)
        huggingface_hub.upload_folder(repo_id=args.hub_model_id, folder_path=hub_folder(args.output_dir))
