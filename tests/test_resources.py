"""Data shipped inside the package is found through the package (`make install-check` does the
same from an installed wheel, away from the checkout)."""

from __future__ import annotations

import pytest

from aos.kernel.package_data import PackageDataMissingError, package_path


def test_shipped_data_is_found_through_the_package() -> None:
    assert (package_path("aos.kernel.wasm", "wit") / "workflow.wit").is_file()
    assert (package_path("aos.flows", "interpreter-module") / "bundle.txt").is_file()
    assert (package_path("aos.flows", "world-manifest") / "manifest.yaml").is_file()


def test_missing_data_is_a_typed_error() -> None:
    with pytest.raises(PackageDataMissingError) as caught:
        package_path("aos.kernel.wasm", "no-such-folder")
    assert caught.value.code == "install.data_missing"
