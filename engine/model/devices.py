"""Which torch device scoring runs on: `resolve_device` turns "auto", "cpu", "cuda:1",
"mps", ... into a `torch.device` that exists on this machine, or a `BackendError` that
says what this torch offers (`available_devices`) and how to get a CUDA build.

Example:
    >>> resolve_device("cpu")
    device(type='cpu')
    >>> available_devices().startswith("cpu")
    True

torch is imported lazily (inside functions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import BackendError

if TYPE_CHECKING:
    import torch

__all__ = ["available_devices", "resolve_device"]


def resolve_device(device: str = "auto") -> torch.device:
    """ "auto" picks cuda, then mps, then cpu; anything else must be a device this torch has.

    Asking for a device that is not there is a `BackendError` that says what was asked,
    what this torch offers, and how to get a CUDA build (not torch's own AssertionError
    at the first tensor moved there).

    Example:
        >>> resolve_device("cpu")
        device(type='cpu')
        >>> try:
        ...     resolve_device("tpu9")
        ... except BackendError as exc:
        ...     print(str(exc).split(";")[0])
        unknown device 'tpu9'
    """
    import torch

    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    try:
        wanted = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise BackendError(
            f"unknown device {device!r}; this torch offers: {available_devices()}"
        ) from exc
    _check_device_available(device, wanted)
    return wanted


def _mps_available() -> bool:
    import torch

    mps = getattr(torch.backends, "mps", None)
    return mps is not None and mps.is_available()


def available_devices() -> str:
    """The devices this torch can use, in words: "cpu", "cuda (2 devices)", "mps".

    Example:
        >>> available_devices().startswith("cpu")
        True
    """
    import torch

    offered = ["cpu"]
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        offered.append(f"cuda ({count} device{'s' if count != 1 else ''}: cuda:0..{count - 1})")
    if _mps_available():
        offered.append("mps")
    return ", ".join(offered)


_CUDA_INSTALL_HINT = (
    "to use an NVIDIA GPU, install the CUDA build of torch, e.g. "
    "`pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu128` "
    "(pick the command for your CUDA driver at https://pytorch.org/get-started/locally/)"
)


def _check_device_available(asked: str, wanted: torch.device) -> None:
    """BackendError unless `wanted` (parsed from `asked`) exists on this machine."""
    import torch

    if wanted.type == "cpu":
        return
    offers = f"this torch ({torch.__version__}) offers: {available_devices()}"
    if wanted.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            why = (
                "it is a CPU-only build"
                if torch.version.cuda is None
                else f"it is built for CUDA {torch.version.cuda} but sees no GPU (driver, "
                "CUDA_VISIBLE_DEVICES?)"
            )
            raise BackendError(
                f"device {asked!r} was asked for, but {offers}; {why}; {_CUDA_INSTALL_HINT}"
            )
        if wanted.index is not None and wanted.index >= count:
            raise BackendError(f"device {asked!r} was asked for, but {offers}")
        return
    if wanted.type == "mps":
        if not _mps_available():
            raise BackendError(
                f"device {asked!r} was asked for, but {offers}; mps needs Apple silicon "
                "and macOS 12.3 or later"
            )
        return
    try:  # other backends (xpu, ...): a tensor there is the test
        torch.empty(0, device=wanted)
    except (RuntimeError, AssertionError, ValueError) as exc:
        raise BackendError(f"device {asked!r} was asked for, but {offers}") from exc
