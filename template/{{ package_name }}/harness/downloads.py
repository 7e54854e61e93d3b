"""torchvision's weights, offline first: read from its cache ($TORCH_HOME/hub/checkpoints/), downloaded if missing."""

import contextlib
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch

from . import UsageError, checkpoint


def fetch(url: str) -> dict[str, Any]:
    """The weights (a state_dict) at `url`, from the cache or downloaded there; offline, a UsageError names the URL."""
    path = cache_path(url)
    if not path.is_file():
        made = [folder for folder in (path.parent, *path.parent.parents) if not folder.exists()]  # deepest first
        match = torch.hub.HASH_REGEX.search(path.name)  # torchvision's names: <name>-<first hex digits of sha256>.pth
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            print(f"downloading {url} to {path}")
            # A temporary file, renamed once the download is complete and its hash checked.
            torch.hub.download_url_to_file(url, str(path), hash_prefix=match.group(1) if match else None)
        except (OSError, RuntimeError) as err:  # URLError is an OSError; a wrong hash a RuntimeError
            for folder in made:  # the cache folders this attempt made, if they are still empty
                with contextlib.suppress(OSError):
                    folder.rmdir()
            why = checkpoint.reason(getattr(err, "reason", err))  # URLError's reason: the socket's error
            raise UsageError(f"cannot download {url} ({why}); without network, put that file at {path}") from None
    return checkpoint.read(path, "weights file")


def cache_path(url: str) -> Path:
    """Where torchvision keeps the weights file of `url`."""
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(url).path)
