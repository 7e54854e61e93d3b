"""Pretrained weights for a network: torchvision's by name, or a file; offline first.

torchvision's weights are read from its cache, torch.hub.get_dir()/checkpoints/ (under
$TORCH_HOME, ~/.cache/torch by default), and downloaded there only when the file is missing.
A file is a state_dict (.pt/.pth), or a checkpoint written by train.py.
"""

import argparse
import contextlib
import difflib
import os
import re
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlparse

import torch
import torchvision
from torch import nn

from . import UsageError, checkpoint, transforms
from .transforms import Preprocessing

BUILTIN = "builtin"
LIST_COMMAND = "python -c 'import torchvision.models as m; print(m.list_models(module=m))'"
HASH_IN_NAME = re.compile(r"-([a-f0-9]+)\.")  # torchvision's files: <name>-<first hex digits of sha256>.pth
WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DataParallel/DistributedDataParallel, torch.compile


def backbone_name(text: str) -> str:
    """The type of --backbone: builtin, or a classification model that torchvision lists."""
    names = torchvision.models.list_models(module=torchvision.models)
    if text == BUILTIN or text in names:
        return text
    close = difflib.get_close_matches(text, names, n=3)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    raise argparse.ArgumentTypeError(f"unknown backbone {text!r}{hint}; builtin, or one of: {LIST_COMMAND}")


class Weights(NamedTuple):
    """What --weights names: torchvision weights (`enum`) or the contents of a file (`state`)."""

    source: str  # for messages: ResNet50_Weights.IMAGENET1K_V2, or the file's path
    name: str  # what --weights is saved as: IMAGENET1K_V2 (never DEFAULT, whose meaning changes), or the path
    enum: Any = None  # a torchvision WeightsEnum member
    state: dict[str, Any] | None = None


def resolve(backbone: str, weights: str) -> Weights | None:
    """Check --weights against --backbone; a file is read here. None for --weights none; UsageError if bad."""
    if weights == "none":
        return None
    path = Path(weights).expanduser()
    if path.suffix in (".pt", ".pth") or os.sep in weights or path.exists():
        return Weights(str(path), str(path), state=_read(path))
    if backbone == BUILTIN:
        raise UsageError(f"--weights {weights}: the builtin backbone has no torchvision weights; give a .pt/.pth file")
    family = torchvision.models.get_model_weights(backbone)
    weights = weights.removeprefix(f"{family.__name__}.")  # ResNet50_Weights.IMAGENET1K_V2 as torchvision writes it
    if weights not in family.__members__:
        names = ", ".join(["DEFAULT", *(member.name for member in family)])
        raise UsageError(f"--weights {weights}: {backbone} has the weights {names}, or give a .pt/.pth file")
    enum = family[weights]  # DEFAULT is an alias of the newest
    return Weights(f"{family.__name__}.{enum.name}", enum.name, enum=enum)


def choose(backbone: str, weights: str, img_size: int | None) -> tuple[Weights | None, Preprocessing]:
    """resolve() and preprocessing() in one: the weights a fresh run starts from, and how it feeds images."""
    resolved = resolve(backbone, weights)
    return resolved, preprocessing(resolved, backbone, img_size)


def preprocessing(weights: Weights | None, backbone: str, img_size: int | None) -> Preprocessing:
    """The preprocessing the weights were trained with, at --img-size when given.

    torchvision weights bring theirs (weights.transforms()); a train.py checkpoint brings the one
    it saved; a plain state_dict is taken to come from the architecture's default torchvision
    weights. Without weights: images squashed to 32x32 (or --img-size), scaled to [-1, 1].
    """
    channels = None if backbone == BUILTIN else 3  # pretrained networks take RGB
    if weights is not None and weights.state is not None and "model_config" in weights.state:
        prep = transforms.from_checkpoint(weights.state)
    elif weights is not None and backbone != BUILTIN:
        enum = weights.enum or torchvision.models.get_model_weights(backbone).DEFAULT
        prep = transforms.from_weights(enum.transforms(), channels)
    else:
        prep = Preprocessing(crop_size=32, channels=channels)
    return prep if img_size is None else prep.resized(img_size)


def fetch(weights: Weights) -> dict[str, Any]:
    """The weights' file contents: the given file's, or torchvision's from the cache, downloaded if missing."""
    if weights.state is not None:
        return weights.state
    path = cache_path(weights.enum.url)
    if not path.is_file():
        _download(weights.enum.url, path)
    return _read(path)


def cache_path(url: str) -> Path:
    """Where torchvision keeps the weights file of `url`."""
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(url).path)


def _download(url: str, path: Path) -> None:
    made = [folder for folder in (path.parent, *path.parent.parents) if not folder.exists()]  # deepest first
    match = HASH_IN_NAME.search(path.name)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"downloading {url} to {path}")
        # A temporary file, renamed once the download is complete and its hash checked.
        torch.hub.download_url_to_file(url, str(path), hash_prefix=match.group(1) if match else None)
    except (OSError, RuntimeError) as err:  # URLError is an OSError; a wrong hash a RuntimeError
        for folder in made:  # the cache folders this attempt made, if they are still empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        reason = str(getattr(err, "reason", None) or err).strip().splitlines()[0]
        raise UsageError(f"cannot download {url} ({reason}); without network, put that file at {path}") from None


def _read(path: Path) -> dict[str, Any]:
    if path.is_dir():
        raise UsageError(f"--weights {path} is a folder; name a .pt/.pth file in it, such as a run's best.pt")
    if not path.is_file():
        raise UsageError(f"--weights file {path} does not exist")
    state = checkpoint.read(path, "--weights file")
    if not isinstance(state, dict):
        raise UsageError(f"--weights file {path} holds a {type(state).__name__}, not a state_dict")
    return state


def load_into(network: nn.Module, weights: Weights, contents: dict[str, Any], config: Any, classes: list[str]) -> str:
    """Copy the weights into `network` (the model's .network); return a line saying what was loaded.

    The backbone must match exactly: a missing, unexpected or differently shaped tensor is a
    UsageError naming the first one. The old head is dropped, except a train.py checkpoint's
    with the same classes (training on from an earlier fine-tuning run).
    """
    state, keep_head = _network_state(weights, contents, network, config, classes)
    if not keep_head:
        state = {key: value for key, value in state.items() if not key.startswith("head.")}
    state = _fit_position_embedding(network, state)
    own = network.state_dict()
    wanted = [key for key in own if keep_head or not key.startswith("head.")]
    for key in wanted:
        if key not in state:
            raise UsageError(f"--weights {weights.source} does not fit --backbone {config.backbone}: {key} is missing")
        if state[key].shape != own[key].shape:
            raise UsageError(
                f"--weights {weights.source} does not fit --backbone {config.backbone}: {key} has shape "
                f"{tuple(state[key].shape)} in the file, {tuple(own[key].shape)} in the model"
            )
    for key in state:
        if key not in own:
            raise UsageError(f"--weights {weights.source} does not fit --backbone {config.backbone}: unexpected {key}")
    network.load_state_dict(state, strict=keep_head)
    head = "its head" if keep_head else f"a new head for {config.num_classes} classes"
    return f"loaded {weights.source} into the {config.backbone} backbone, with {head}"


def _network_state(
    weights: Weights, contents: dict[str, Any], network: nn.Module, config: Any, classes: list[str]
) -> tuple[dict[str, torch.Tensor], bool]:
    """The tensors under the network's own names (backbone.*, head.*), and whether the head fits."""
    if "model_config" in contents:  # a train.py checkpoint: the moving average if it has one
        if contents["model_config"].get("backbone", BUILTIN) != config.backbone:
            saved = contents["model_config"].get("backbone", BUILTIN)
            raise UsageError(f"--weights {weights.source} holds a {saved} network, not --backbone {config.backbone}")
        tensors = contents.get("ema") or contents["model"]
        state = {key.removeprefix("network."): value for key, value in tensors.items() if key.startswith("network.")}
        return state, contents.get("classes") == classes
    for container in ("state_dict", "model"):  # common wrappers of a state_dict
        if isinstance(contents.get(container), dict):
            contents = contents[container]
    state = {}
    for key, value in contents.items():
        while key.startswith(WRAPPER_PREFIXES):
            key = key.split(".", 1)[1]
        state[key] = value
    if all(key.startswith(("backbone.", "head.")) for key in state):  # saved from this project's network
        return state, False
    # A torchvision model's own state_dict: its final layer (fc, classifier.1, ...) is the one the network replaced.
    final = getattr(network, "classifier_name", None)
    return {f"backbone.{key}": value for key, value in state.items() if not _under(key, final)}, False


def _under(key: str, module_name: str | None) -> bool:
    return module_name is not None and (key == module_name or key.startswith(f"{module_name}."))


def _fit_position_embedding(network: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A vision transformer trained at another image size: interpolate its position embedding to this one."""
    backbone = getattr(network, "backbone", None)
    key = "backbone.encoder.pos_embedding"
    if not isinstance(backbone, torchvision.models.VisionTransformer) or key not in state:
        return state
    if state[key].shape == backbone.encoder.pos_embedding.shape:
        return state
    resized = torchvision.models.vision_transformer.interpolate_embeddings(
        backbone.image_size, backbone.patch_size, {"encoder.pos_embedding": state[key]}
    )
    return {**state, key: resized["encoder.pos_embedding"]}
