"""`--push_to_hub`: the best model of a run, uploaded so that it loads anywhere, with talk_hf's model card.

The card's pipeline tag is the task that the script records in the model's configuration (`record_task`),
so that every later upload of a checkpoint, by any route, names it too. What an upload needs is checked
at the start (`check_upload`): a run of hours must not end in an upload that could never work. The
upload itself (`upload`) says what failed, and how to send the folder once the network is back.
"""

import shutil
from pathlib import Path

import huggingface_hub
from huggingface_hub.errors import HFValidationError
from transformers import AutoConfig

import talk_hf
from talk_hf.model_card import CARD_NAME, checkpoint_model_card

from .atomic_files import remove_entry
from .messages import fail, first_line
from .models import is_ours


def check_upload(args):
    """With `--push_to_hub`, refuse at the start an upload that would fail at the end: a
    `--hub_model_id` that is no repository id, offline mode (`HF_HUB_OFFLINE`), no token, a token
    that may only read, or a Hub that cannot be reached. Asks the Hub who the token is (`whoami`)."""
    if not args.push_to_hub:
        return
    if not args.hub_model_id:
        fail("--push_to_hub needs --hub_model_id")
    try:
        huggingface_hub.utils.validate_repo_id(args.hub_model_id)
    except HFValidationError as error:
        fail(f"--hub_model_id {args.hub_model_id!r} is no Hub repository id ({first_line(error)})")
    if huggingface_hub.is_offline_mode():
        fail(
            "--push_to_hub uploads at the end of the run, but HF_HUB_OFFLINE is set: unset it (the Hub must be "
            "reachable), or drop --push_to_hub and upload output_dir/best later"
        )
    try:
        user = huggingface_hub.whoami()
    except Exception as error:  # no token, a refused token, or no network: huggingface_hub and httpx raise many kinds
        fail(
            f"--push_to_hub: the Hub does not answer who the token is ({type(error).__name__}: {first_line(error)}). "
            "Log in (`hf auth login`, or `export HF_TOKEN=hf_...`) and check the network, or drop --push_to_hub"
        )
    role = user.get("auth", {}).get("accessToken", {}).get("role")
    if role == "read":
        fail(
            f"--push_to_hub: the token of {user.get('name')} may only read: give a token with write access "
            "(Hub settings, Access Tokens)"
        )


def translation_task(source_lang, target_lang):
    """The configuration's key of translation from `source_lang` into `target_lang` (language codes), as T5's
    checkpoints name it: ``translation_de_to_en``."""
    return f"translation_{source_lang}_to_{target_lang}"


def record_task(config, task, generation):
    """Name in `config` (a model's configuration) the one task its script trains it for, as transformers' own
    checkpoints do (T5's, BART-CNN's): ``task_specific_params = {task: generation}``, `task` being
    ``summarization`` or a `translation_task`, `generation` the settings of ``generate`` (a dict) that the
    script evaluates with. ``save_pretrained`` writes it into config.json (transformers 5 keeps the key it no
    longer declares through saving and loading), whence `talk_hf.model_card.pipeline_tag` gives the card of
    every upload of the checkpoint its pipeline tag (``summarization``, ``translation``): `upload`'s,
    ``model.push_to_hub``'s and those of ONNX folders exported from it. The tasks a checkpoint named before (a
    T5 fine-tuned by a script) are replaced: the model is now trained for this one."""
    config.task_specific_params = {task: dict(generation)}


def hub_folder(output_dir):
    """`output_dir/hub`: a copy of best/ that loads anywhere, ours with `trust_remote_code=True`.

    For our model types the modeling code is copied in (`talk_hf.export_for_remote_code`), so the
    uploaded checkpoint does not need `talk_hf` installed; transformers' own models need nothing.
    """
    folder = Path(output_dir) / "hub"
    remove_entry(folder)  # a link there is removed, never written through
    shutil.copytree(Path(output_dir) / "best", folder)
    if is_ours(AutoConfig.from_pretrained(folder)):
        talk_hf.export_for_remote_code(folder)
    return folder


def add_model_card(folder, repo_id):
    """talk_hf's model card (`talk_hf.model_card.checkpoint_model_card`) as README.md of the hub `folder` of
    one of our models, to be pushed to `repo_id`: ``library_name: talk_hf``, the tags ``talk_hf`` and the model
    type, the pipeline tag of its config.json, and how to load it, after ``import talk_hf`` and (the folder holds
    the code) with ``trust_remote_code=True``. A README.md that best/ holds stays as it is.

    transformers' own models (the baselines) get no card: transformers' push writes its generic one only after
    asking the Hub whether the repository has one (``create_and_tag_model_card``), and they load by
    transformers' Auto classes alone."""
    path = Path(folder) / CARD_NAME
    if path.exists() or not is_ours(AutoConfig.from_pretrained(folder)):
        return
    # best/ holds a generative head: the scripts build and reload it with AutoModelFor{Seq2Seq,Causal}LM
    checkpoint_model_card(repo_id, Path(folder), head=True, tags=[]).save(path)


def upload(accelerator, args):
    """best/ (with its tokenizer and, for our models, their code and model card: `add_model_card`) to
    `--hub_model_id`, with `--push_to_hub`. An upload that fails (the network went down during the run) stops
    the script naming the folder that is ready to upload and the command that sends it."""
    if not (args.push_to_hub and accelerator.is_main_process):
        return
    folder = hub_folder(args.output_dir)
    add_model_card(folder, args.hub_model_id)
    try:
        huggingface_hub.create_repo(args.hub_model_id, exist_ok=True)
        huggingface_hub.upload_folder(repo_id=args.hub_model_id, folder_path=folder)
    except Exception as error:  # huggingface_hub and httpx raise many kinds
        fail(
            f"--push_to_hub: uploading {folder} to {args.hub_model_id} failed ({type(error).__name__}: "
            f"{first_line(error)}). The run itself is complete; once the Hub is reachable, upload the folder with "
            f"`hf upload {args.hub_model_id} {folder}`"
        )
