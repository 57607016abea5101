"""Data files shipped inside the package (the WIT world, the flow interpreter's sources, the
flow world's manifest), found through the package they belong to, so an installed wheel and
an editable checkout find them the same way."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from aos.kernel.errors import AosError


class PackageDataMissingError(AosError):
    code = "install.data_missing"
    hint = "reinstall aos: the package is missing a data folder it ships with"


def package_path(package: str, *parts: str) -> Path:
    """The folder or file `parts` inside `package`, as a real path (the build tools and the
    manifest loader read files by path, so a zipped install is refused here, early)."""
    found = resources.files(package).joinpath(*parts)
    path = Path(str(found))
    if not isinstance(found, Path) or not path.exists():
        raise PackageDataMissingError(f"{package} has no {'/'.join(parts)}", path=str(path))
    return path
