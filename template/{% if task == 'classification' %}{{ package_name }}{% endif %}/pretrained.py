"""Pretrained weights: torchvision's by name, read from its cache (downloaded only if missing), or a file.

A file is a state_dict (.pt/.pth) or a checkpoint written by train.py.
"""

import argparse
import collections
import dataclasses
import difflib
import os
import re
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torchvision
from torch import nn
from torchvision.models.vision_transformer import interpolate_embeddings

from . import UsageError, transforms
from .harness import checkpoint, downloads
from .transforms import Preprocessing

BUILTIN = "builtin"
LIST_COMMAND = "python -c 'import torchvision.models as m; print(m.list_models(module=m))'"
# DataParallel/DistributedDataParallel, torch.compile, and the model file's class around the network (network.*).
WRAPPER_PREFIXES = re.compile(r"^(module\.|_orig_mod\.|network\.)+")
AUX_HEADS = ("aux1.", "aux2.", "AuxLogits.")  # googlenet's and inception_v3's, which networks.py builds without
LEGACY_DENSENET = re.compile(r"(denselayer\d+\.(?:norm|relu|conv))\.([12])\.")  # its files' norm.1 is norm1 now


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


def _names_file(weights: str) -> bool:
    path = Path(weights).expanduser()
    return path.suffix in (".pt", ".pth") or os.sep in weights or path.exists()


def resolve(backbone: str, weights: str) -> Weights | None:
    """Check --weights against --backbone; a file is read here. None for --weights none; UsageError if bad."""
    if weights == "none":
        return None
    if _names_file(weights):
        path = Path(weights).expanduser()
        if path.is_dir():
            raise UsageError(f"--weights {path} is a folder; name a .pt/.pth file in it, such as a run's best.pt")
        if not path.is_file():
            raise UsageError(f"--weights file {path} does not exist")
        state = checkpoint.read(path, "--weights file")
        if not isinstance(state, dict):
            raise UsageError(f"--weights file {path} holds a {type(state).__name__}, not a state_dict")
        return Weights(str(path), os.path.abspath(path), state=state)  # saved absolute: found from any folder
    if backbone == BUILTIN:
        raise UsageError(f"--weights {weights}: the builtin backbone has no torchvision weights; give a .pt/.pth file")
    family = torchvision.models.get_model_weights(backbone)
    weights = weights.removeprefix(f"{family.__name__}.")  # ResNet50_Weights.IMAGENET1K_V2 as torchvision writes it
    if weights not in family.__members__:
        names = ", ".join(["DEFAULT", *(member.name for member in family)])
        raise UsageError(f"--weights {weights}: {backbone} has the weights {names}, or give a .pt/.pth file")
    enum = family[weights]  # DEFAULT is an alias of the newest
    return Weights(f"{family.__name__}.{enum.name}", enum.name, enum=enum)


def weights_id(backbone: str, weights: str) -> str:
    """What --weights stands for, whatever its spelling: "none", a file's absolute path, or torchvision's full name.

    Reads no file; a name that does not resolve stands for itself.
    """
    if weights == "none":
        return weights
    if _names_file(weights):
        return str(Path(weights).expanduser().resolve())
    try:
        return resolve(backbone, weights).source
    except UsageError:
        return weights


def choose(backbone: str, weights: str, img_size: int | None) -> tuple[Weights | None, Preprocessing]:
    """The weights a fresh run starts from (resolve()), and how it feeds images, at --img-size when given.

    The preprocessing of the torchvision weights (a file by torchvision's name for it too), of a train.py checkpoint,
    or for another state_dict the architecture's DEFAULT weights'; without weights 32x32 in [-1, 1]. --img-size keeps
    the resize's ratio to the crop.
    """
    resolved = resolve(backbone, weights)
    if resolved is not None and resolved.state is not None and "model_config" in resolved.state:
        prep = transforms.from_checkpoint(resolved.state)
    elif resolved is not None and backbone != BUILTIN:
        family = torchvision.models.get_model_weights(backbone)  # a file of theirs, copied, is known by its name
        named = [member for member in family if Path(member.url).name == Path(resolved.source).name]
        given = (resolved.enum or (named or [family.DEFAULT])[0]).transforms()
        crop, resize = given.crop_size[0], given.resize_size[0]
        prep = Preprocessing(crop, resize, given.mean, given.std, given.interpolation.value, channels=3)
    else:
        prep = Preprocessing(crop_size=32, channels=None if backbone == BUILTIN else 3)  # torchvision's take RGB
    if img_size is not None:
        resize = None if prep.resize_size is None else round(img_size * prep.resize_size / prep.crop_size)
        prep = dataclasses.replace(prep, crop_size=img_size, resize_size=resize)
    return resolved, prep


def fetch(weights: Weights) -> dict[str, Any]:
    """The weights' file contents: the given file's, or torchvision's from the cache, downloaded if missing."""
    return weights.state if weights.state is not None else downloads.fetch(weights.enum.url)


def load_into(network: nn.Module, weights: Weights, contents: dict[str, Any], config: Any, classes: list[str]) -> str:
    """Copy the weights into `network` (the model's .network); return a line saying what was loaded.

    UsageError naming the first missing, unexpected or differently shaped tensor of the backbone. The old
    head is dropped, except a train.py checkpoint's with the same classes.
    """
    state, keep_head = _network_state(weights, contents, network, config, classes)
    state = {key: value for key, value in state.items() if keep_head or not key.startswith("head.")}
    current = network.state_dict()
    own = {key: value for key, value in current.items() if keep_head or not key.startswith("head.")}
    vit, key = getattr(network, "backbone", None), "backbone.encoder.pos_embedding"
    if isinstance(vit, torchvision.models.VisionTransformer) and key in state:
        # Trained at another image size: the position embedding is interpolated to this one (kept at the same size).
        resized = interpolate_embeddings(vit.image_size, vit.patch_size, {"encoder.pos_embedding": state[key]})
        state[key] = resized["encoder.pos_embedding"]
    fits = f"--weights {weights.source} does not fit --backbone {config.backbone}"
    for key, tensor in own.items():
        if key not in state and key.endswith(".num_batches_tracked"):
            state[key] = tensor  # files saved before PyTorch 0.4.1 lack them (torchvision's resnet18): the model's 0
            continue
        if key not in state:
            raise UsageError(f"{fits}: {key} is missing")
        if state[key].shape != tensor.shape:
            shapes = f"{tuple(state[key].shape)} in the file, {tuple(tensor.shape)} in the model"
            raise UsageError(f"{fits}: {key} has shape {shapes}")
    if unexpected := [key for key in state if key not in own]:
        raise UsageError(f"{fits}: unexpected {unexpected[0]}")
    state = collections.OrderedDict(state)  # with the module versions this code has (mnasnet's loading reads its own)
    state._metadata = current._metadata
    network.load_state_dict(state, strict=keep_head)
    head = "its head" if keep_head else f"a new head for {config.num_classes} classes"
    return f"loaded {weights.source} into the {config.backbone} backbone, with {head}"


def _network_state(
    weights: Weights, contents: dict[str, Any], network: nn.Module, config: Any, classes: list[str]
) -> tuple[dict[str, torch.Tensor], bool]:
    """The tensors under the network's own names (backbone.*, head.*), and whether the head fits."""
    if "model_config" in contents:  # a train.py checkpoint: the moving average if it has one
        saved = contents["model_config"].get("backbone", BUILTIN)
        if saved != config.backbone:
            raise UsageError(f"--weights {weights.source} holds a {saved} network, not --backbone {config.backbone}")
        tensors = contents.get("ema") or contents["model"]
        state = {key.removeprefix("network."): value for key, value in tensors.items() if key.startswith("network.")}
        return state, contents.get("classes") == classes
    for container in ("state_dict", "model"):  # common wrappers of a state_dict
        if isinstance(contents.get(container), dict):
            contents = contents[container]
    state = {LEGACY_DENSENET.sub(r"\1\2.", WRAPPER_PREFIXES.sub("", key)): value for key, value in contents.items()}
    if all(key.startswith(("backbone.", "head.")) for key in state):  # saved from this project's network
        return state, False
    # A torchvision model's own state_dict: its final layer (fc, classifier.1, ...) is the one the network replaced.
    dropped = (f"{network.classifier_name}.", *AUX_HEADS) if hasattr(network, "classifier_name") else AUX_HEADS
    return {f"backbone.{key}": value for key, value in state.items() if not key.startswith(dropped)}, False
