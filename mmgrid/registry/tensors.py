"""Tensor plumbing: streaming a state dict or safetensors files in, lazy tensors out."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from mmgrid.errors import RegistryError
from mmgrid.fileio.safetensors import dtype_name, torch_dtype
from mmgrid.registry.errors import UnsafeFormatError, UnsafePathError
from mmgrid.registry.names import inside

if TYPE_CHECKING:  # pragma: no cover
    import torch  # lazy: torch (~2-4 s) stays out of `import mmgrid.registry`

    from mmgrid.registry.manifest import Manifest
    from mmgrid.registry.store import BlobStore

UNSAFE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib", ".npy", ".npz")


def unsafe_error(path: Path) -> UnsafeFormatError:
    return UnsafeFormatError(
        f"{path} is a pickle-based checkpoint; mmgrid never unpickles (loading a pickle can run "
        "arbitrary code). Convert it to safetensors where you trust the file, e.g. "
        "`model.save_pretrained(out, safe_serialization=True)` or "
        "`safetensors.torch.save_file(torch.load(path, weights_only=True), 'model.safetensors')`, "
        "then pass the .safetensors file or folder."
    )


def safetensors_files(path: Path) -> list[Path]:
    """The .safetensors files of a file or folder (sharded folders too); refuses pickles."""
    if not path.exists():
        raise RegistryError(f"{path} does not exist; give a .safetensors file or a folder holding them.")
    if path.is_file():
        if path.suffix.lower() in UNSAFE_SUFFIXES:
            raise unsafe_error(path)
        if path.suffix.lower() != ".safetensors":
            raise RegistryError(f"{path} is not a .safetensors file; only safetensors are read.")
        return [path]
    found = [member(path, f) for f in sorted(path.glob("*.safetensors"))]
    if not found:
        unsafe = sorted(p for p in path.iterdir() if p.suffix.lower() in UNSAFE_SUFFIXES)
        if unsafe:
            raise unsafe_error(unsafe[0])
        raise RegistryError(f"{path} holds no .safetensors file; export the model with safe_serialization=True.")
    return found


def link_root(folder: Path) -> Path:
    """Where symlinks inside ``folder`` may point: the folder itself or, for a Hugging Face
    cache snapshot (``.../models--ORG--NAME/snapshots/REV``, whose files are symlinks into
    ``../../blobs``), that model's cache folder ``models--ORG--NAME``."""
    base = folder.resolve()
    if base.parent.name == "snapshots" and base.parent.parent.name.startswith("models--"):
        return base.parent.parent
    return base


def member(folder: Path, f: Path) -> Path:
    """``f`` (an entry of ``folder``) if reading it stays inside :func:`link_root`.

    Raises:
        UnsafePathError: ``f`` is a symlink to somewhere else.
    """
    if f.is_symlink():
        root = link_root(folder)
        if not inside(root, f):
            raise UnsafePathError(
                f"{f} is a symlink to {f.resolve()}, outside {root}; mmgrid follows a symlink in an imported "
                "folder only when it stays inside that folder (or, for a Hugging Face cache snapshot, inside "
                "its models--ORG--NAME folder). Copy the file into the folder if you trust it. Nothing was stored."
            )
    return f


def describe(state_or_path: Any) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, safetensors dtype) of a state dict or safetensors files, no data read."""
    from safetensors import SafetensorError, safe_open  # lazy: safetensors' torch bindings import torch

    if not isinstance(state_or_path, (str, Path)):
        return {name: (tuple(t.shape), dtype_name(t.dtype)) for name, t in iter_state(state_or_path)}
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for f in safetensors_files(Path(state_or_path)):
        try:
            with safe_open(str(f), framework="pt", device="cpu") as fh:
                for name in fh.keys():
                    sl = fh.get_slice(name)
                    out[name] = (tuple(sl.get_shape()), sl.get_dtype())
        except SafetensorError as exc:
            raise RegistryError(f"{f} is not a valid safetensors file ({exc}); re-export it.") from exc
    return out


def iter_path(path: Path) -> Iterator[tuple[str, "torch.Tensor"]]:
    """Tensors of safetensors files one at a time (never the whole checkpoint in memory)."""
    from safetensors import SafetensorError, safe_open  # lazy: safetensors' torch bindings import torch

    for f in safetensors_files(path):
        try:
            with safe_open(str(f), framework="pt", device="cpu") as fh:
                for name in fh.keys():
                    yield name, fh.get_tensor(name)
        except SafetensorError as exc:
            raise RegistryError(f"{f} is not a valid safetensors file ({exc}); re-export it.") from exc


def iter_state(state_or_path: Any) -> Iterator[tuple[str, "torch.Tensor"]]:
    import torch  # lazy: torch (~2-4 s) stays out of `import mmgrid.registry`

    if isinstance(state_or_path, (str, Path)):
        yield from iter_path(Path(state_or_path))
        return
    if not isinstance(state_or_path, Mapping):
        raise RegistryError(f"put() takes a state dict or a .safetensors path, got {type(state_or_path).__name__}.")
    for name, tensor in state_or_path.items():
        if not isinstance(tensor, torch.Tensor):
            raise RegistryError(f"state entry {name!r} is a {type(tensor).__name__}, not a tensor; put non-tensor data in meta= or files=.")
        yield name, tensor


class LazyTensors(Mapping):
    """Name -> tensor, each read from its blob only when looked up; nothing is cached.

    ``loader(name)`` gives a zero-argument callable for code that schedules reads itself;
    ``info`` holds (shape, dtype) of every tensor without reading any.
    """

    def __init__(self, store: "BlobStore", manifest: "Manifest", dtype: "torch.dtype | None" = None, device: str = "cpu") -> None:
        self._store, self._m, self._dtype, self._device = store, manifest, dtype, device
        self.id = manifest.id

    def __getitem__(self, name: str) -> "torch.Tensor":
        ref = self._m.blobs.get(name)
        if ref is None:
            raise KeyError(name)
        t = self._store.read_tensor(ref.sha256, where=f"tensor {name} of {self.id}", device=self._device)
        if self._dtype is not None and t.is_floating_point():
            t = t.to(self._dtype)
        return t

    def __iter__(self) -> Iterator[str]:
        return iter(self._m.blobs)

    def __len__(self) -> int:
        return len(self._m.blobs)

    def loader(self, name: str) -> Callable[[], "torch.Tensor"]:
        if name not in self._m.blobs:
            raise KeyError(name)
        return lambda: self[name]

    @property
    def info(self) -> "dict[str, tuple[tuple[int, ...], torch.dtype]]":
        return {k: (b.shape, torch_dtype(b.dtype)) for k, b in self._m.blobs.items()}

    def shape(self, name: str) -> tuple[int, ...]:
        return self._m.blobs[name].shape

    def dtype(self, name: str) -> "torch.dtype":
        return torch_dtype(self._m.blobs[name].dtype)

    def sha256(self, name: str) -> str:
        """Blob hash: equal hashes mean bitwise-equal tensors (merge code can skip work)."""
        return self._m.blobs[name].sha256
