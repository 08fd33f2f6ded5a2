"""Where a checkpoint lives: a local folder, or a Hub id fetched into its cache."""

import os
import re

# "owner/name" as the Hub spells repository ids.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# Seconds before a Hub request gives up, so that a blocked network fails fast.
HUB_TIMEOUT = 10


def is_hub_id(source):
    """Whether `source` reads as a Hub id rather than a local path: of the
    form owner/name, not existing here, and not a path into a folder that
    does (`runs/ft` where `runs/` exists is a local path with a typo)."""
    return (
        isinstance(source, str)
        and not os.path.exists(source)
        and bool(_HUB_ID.match(source))
        and not source.endswith(".keras")
        and not os.path.isdir(source.split("/")[0])
    )


def _hub_patterns(allow_pickle, variant):
    suffix = f".{variant}" if variant else ""
    patterns = ["*.json", f"*diffusion_pytorch_model{suffix}.safetensors"]
    if allow_pickle:
        patterns.append(f"*diffusion_pytorch_model{suffix}.bin")
    return patterns


def _hub_error(repo_id, reason):
    return ValueError(
        f"Cannot fetch the Hub id {repo_id!r} ({reason}). Download it where "
        "there is a network (huggingface-cli download "
        f"{repo_id} --local-dir DIR) and pass the local folder instead."
    )


def download(repo_id, allow_pickle=False, variant=None):
    """The local snapshot folder of a Hub id: the cache first, then the Hub.

    Offline (`HF_HUB_OFFLINE=1`), without `huggingface_hub`, or when the Hub
    cannot be reached within `HUB_TIMEOUT` seconds, raises a one-line
    `ValueError` naming the id and how to use a local folder.
    """
    try:
        import huggingface_hub
    except ImportError:
        reason = 'huggingface_hub is not installed: pip install "keras-diffusion[hub]"'
        raise _hub_error(repo_id, reason) from None
    patterns = _hub_patterns(allow_pickle, variant)
    try:
        return huggingface_hub.snapshot_download(
            repo_id, allow_patterns=patterns, local_files_only=True
        )
    except Exception:  # not cached: try the network below
        pass
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise _hub_error(repo_id, "not in the cache and HF_HUB_OFFLINE is set")
    try:
        return huggingface_hub.snapshot_download(
            repo_id, allow_patterns=patterns, etag_timeout=HUB_TIMEOUT
        )
    except Exception as error:
        reason = (str(error).splitlines() or [type(error).__name__])[0]
        raise _hub_error(repo_id, reason[:200]) from None


def resolve_source(source, allow_pickle=False, variant=None):
    """(local folder, display name) of a `from_diffusers` source.

    Raises:
        TypeError: when `source` is not a path.
        ValueError: naming `source` when it is neither a folder nor a Hub id.
    """
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(
            f"Argument `source` must be a folder or a Hub id. Received: {source!r}"
        )
    path = os.fspath(source)
    if os.path.isdir(path):
        return path, repr(path)
    if is_hub_id(path):
        return download(path, allow_pickle, variant), f"Hub id {path!r}"
    if os.path.exists(path):
        raise ValueError(
            f"Argument `source` must be a folder, not a file. Received: source={path!r}"
        )
    raise ValueError(
        f"No such file or folder: {path!r} (and not a Hub id: those read owner/name)"
    )
