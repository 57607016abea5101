"""Load an authored AIR folder into checked definitions and a manifest with every hash filled.

An authored folder holds:

* exactly one `manifest.json`, `manifest.yaml` or `manifest.yml` at its top: refs by name
  (with a hash, the placeholder `blake3:000...0`, or no hash) and routing;
* any number of other `.json`, `.yaml` or `.yml` files, in any sub-folder, each holding one
  definition, a list of definitions, or (YAML) several documents of either form. Hidden files
  and folders (`.name`) are skipped, as are files with other suffixes.

The loader fills each placeholder hash with the computed one and reports a given hash that
differs (`air.hash_mismatch`). A `defmodule` may name its WASM by `artifact.path` (relative to
the file that names it); an `ArtifactResolver` turns that into a hash. The default hashes the
file's raw bytes; a build step can pass its own resolver that builds sources first. Every
problem of the whole folder is collected and raised as one `AirCheckError`.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from pydantic import ValidationError

from aos.kernel.air import builtins
from aos.kernel.air.base import loc_to_path
from aos.kernel.air.check import AnyDefinition, check_definitions, check_manifest
from aos.kernel.air.errors import AirCheckError, AirError, Issue
from aos.kernel.air.limits import StepLimits
from aos.kernel.air.model import (
    DEF_MODELS,
    REF_LISTS,
    Artifact,
    DefModule,
    DefSchema,
    DefWorkflow,
    Manifest,
    NamedRef,
    def_hash,
    resolve_determinism,
)
from aos.kernel.air.names import name_problem
from aos.kernel.errors import InvalidInputError
from aos.kernel.hashing import Hash, hash_bytes
from aos.kernel.text import jsontext, yamltext

AIR_FILE_SUFFIXES = (".json", ".yaml", ".yml")
MANIFEST_FILE_NAMES = ("manifest.json", "manifest.yaml", "manifest.yml")
AIR_FILE_BYTES_MAX = 4 * 1024 * 1024
AIR_FILES_MAX = 1024
DEFINITIONS_MAX = 4096
DOCUMENT_DEPTH_MAX = 128
"""Most nested JSON/YAML containers in one authored document (keeps every later walk of a
definition far from Python's recursion limit)."""
DOCUMENT_NODES_MAX = yamltext.YAML_NODES_MAX_DEFAULT
"""Most values of one YAML file, each alias counted as the values it repeats (a few hundred
bytes of nested aliases would otherwise expand into an exponential walk)."""
MODULE_BYTES_MAX = 256 * 1024 * 1024
"""Largest WASM artifact the default resolver reads."""


class ModuleMissingError(AirError):
    """A defmodule's artifact path names no readable file."""

    code = "air.module_missing"
    hint = "build the module first, or fix artifact.path (it is relative to the definition file)"


ArtifactResolver = Callable[[Path], Hash]
"""Turns the absolute path a defmodule names into the WASM's hash; raises an `AirError`
(`air.module_missing` and the like) when it cannot."""


def hash_artifact_file(path: Path) -> Hash:
    """The default `ArtifactResolver`: the hash of the file's raw bytes."""
    if not path.is_file():
        raise ModuleMissingError(f"no WASM file at {path}")
    size = path.stat().st_size
    if size > MODULE_BYTES_MAX:
        raise ModuleMissingError(f"{path} is {size} bytes; the limit is {MODULE_BYTES_MAX}")
    return hash_bytes(path.read_bytes())


@dataclass(frozen=True)
class LoadedManifest:
    """A checked world definition: the manifest with every hash filled, the definitions it
    refers to, and what the runtime derives from them."""

    manifest: Manifest
    manifest_hash: Hash
    definitions: Mapping[str, AnyDefinition]
    """User definitions by name (sorted), modules with `artifact.hash` only."""
    hashes: Mapping[str, Hash]
    """Definition hashes by name, for user definitions and the built-ins the manifest lists."""
    artifacts: Mapping[str, Path]
    """Module name -> the WASM file it was hashed from (modules given by path)."""
    files: Mapping[str, str]
    """Definition name -> authored file, relative to the folder."""
    root: Path | None = None

    @functools.cached_property
    def schemas(self) -> Mapping[str, DefSchema]:
        """User and built-in schemas by name: what `normalize` needs for refs."""
        found = dict(builtins.BUILTIN_SCHEMAS)
        for name, definition in self.definitions.items():
            if isinstance(definition, DefSchema):
                found[name] = definition
        return MappingProxyType(dict(sorted(found.items())))

    @functools.cached_property
    def workflows(self) -> Mapping[str, DefWorkflow]:
        """Workflows by name."""
        return MappingProxyType(
            {n: d for n, d in self.definitions.items() if isinstance(d, DefWorkflow)}
        )

    def determinism(self, workflow: str) -> Literal["strict", "checked"]:
        """The workflow's resolved determinism mode (see `resolve_determinism`)."""
        definition = self.workflows[workflow]
        module = self.definitions[definition.impl.module]
        assert isinstance(module, DefModule)
        return resolve_determinism(definition, module)

    def step_limits(self, workflow: str) -> StepLimits:
        """The workflow's effective step limits."""
        return self.workflows[workflow].step_limits()

    def counts(self) -> dict[str, int]:
        """How many definitions of each kind, and routes."""
        found = {kind: 0 for kind in DEF_MODELS}
        for definition in self.definitions.values():
            found[definition.kind] += 1
        found["subscriptions"] = len(self.manifest.routing.subscriptions)
        return found


def load_manifest_dir(
    path: str | os.PathLike[str], *, artifact_resolver: ArtifactResolver = hash_artifact_file
) -> LoadedManifest:
    """Load, fill and check an authored folder. Raises `AirCheckError` with every issue."""
    root = Path(path)
    if not root.is_dir():
        raise AirCheckError([Issue("air.folder_missing", str(root), "not a folder")])
    collector = _Collector(root)
    manifest_raw = collector.read_folder()
    definitions, artifacts = collector.resolve_modules(artifact_resolver)
    issues = collector.issues
    issues.extend(check_definitions(definitions, files=collector.files))
    manifest = collector.parse_manifest(manifest_raw)
    if manifest is None:
        raise AirCheckError(issues)
    manifest = _fill_hashes(manifest, definitions)
    issues.extend(
        check_manifest(
            manifest, definitions, files=collector.files, manifest_file=collector.manifest_file
        )
    )
    if issues:
        raise AirCheckError(issues)
    return _assemble(manifest, definitions, artifacts, collector.files, root)


def assemble_manifest(
    manifest: Manifest, definitions: Mapping[str, AnyDefinition]
) -> LoadedManifest:
    """Check a manifest and definitions that did not come from a folder (a patch result, a
    world's stored manifest): placeholders are filled, and every issue is raised together."""
    manifest = _fill_hashes(manifest, definitions)
    issues = check_definitions(definitions) + check_manifest(manifest, definitions)
    for kind, refs in manifest.ref_lists().items():
        for index, ref in enumerate(refs):
            if not ref.filled and ref.name in definitions:
                # Only a module without an artifact hash stays unfilled; say why.
                try:
                    def_hash(definitions[ref.name])
                except AirError as error:
                    path = f"manifest.{REF_LISTS[kind]}[{index}].hash"
                    issues.append(Issue(error.code, path, error.message))
    if issues:
        raise AirCheckError(issues)
    return _assemble(manifest, definitions, {}, {}, None)


def _assemble(
    manifest: Manifest,
    definitions: Mapping[str, AnyDefinition],
    artifacts: Mapping[str, Path],
    files: Mapping[str, str],
    root: Path | None,
) -> LoadedManifest:
    hashes = {name: def_hash(definitions[name]) for name in sorted(definitions)}
    for refs in manifest.ref_lists().values():
        for ref in refs:
            hashes.setdefault(ref.name, Hash(ref.hash_ or ""))
    return LoadedManifest(
        manifest=manifest,
        manifest_hash=def_hash(manifest),
        definitions=MappingProxyType(dict(sorted(definitions.items()))),
        hashes=MappingProxyType(dict(sorted(hashes.items()))),
        artifacts=MappingProxyType(dict(sorted(artifacts.items()))),
        files=MappingProxyType(dict(sorted(files.items()))),
        root=root,
    )


def _fill_hashes(manifest: Manifest, definitions: Mapping[str, AnyDefinition]) -> Manifest:
    """Fill refs that have no hash (or the placeholder) with the definition's hash. Refs to
    unknown names, or to modules whose artifact is unresolved, stay as they are; the checks
    report them."""
    updates: dict[str, list[NamedRef]] = {}
    for kind, refs in manifest.ref_lists().items():
        filled = []
        for ref in refs:
            definition = definitions.get(ref.name) or builtins.BUILTIN_DEFINITIONS.get(ref.name)
            if not ref.filled and definition is not None:
                with contextlib.suppress(AirError):  # reported by check_manifest
                    ref = NamedRef(name=ref.name, hash=def_hash(definition))
            filled.append(ref)
        updates[REF_LISTS[kind]] = filled
    return manifest.model_copy(update=updates)


# --------------------------------------------------------------------------------------------
# Reading files


class _Collector:
    """Reads every file of a folder, collecting definitions and issues."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.issues: list[Issue] = []
        self.definitions: dict[str, AnyDefinition] = {}
        self.files: dict[str, str] = {}
        self.module_dirs: dict[str, Path] = {}
        self.manifest_file: str | None = None

    def add(self, code: str, path: str, message: str, file: str | None) -> None:
        self.issues.append(Issue(code, path, message, file))

    def read_folder(self) -> Any:
        """Read every AIR file; return the raw manifest document (or None)."""
        manifests = [
            self.root / name for name in MANIFEST_FILE_NAMES if (self.root / name).is_file()
        ]
        if not manifests:
            self.add(
                "air.manifest_missing",
                "manifest",
                f"the folder has none of {', '.join(MANIFEST_FILE_NAMES)}",
                None,
            )
        for extra in manifests[1:]:
            self.add(
                "air.manifest_duplicate",
                "manifest",
                f"{extra.name} and {manifests[0].name}: a folder has one manifest",
                extra.name,
            )
        manifest_raw = None
        if manifests:
            self.manifest_file = manifests[0].name
            documents = self._read_documents(manifests[0])
            if documents is not None and len(documents) != 1:
                self.add(
                    "air.file_invalid",
                    "manifest",
                    "a manifest file holds one object",
                    self.manifest_file,
                )
            elif documents is not None:
                manifest_raw = documents[0]
        files = list(self._air_files(manifests))
        if len(files) > AIR_FILES_MAX:
            self.add("air.too_many_files", ".", f"more than {AIR_FILES_MAX} AIR files", None)
            files = files[:AIR_FILES_MAX]
        for file in files:
            self._read_definition_file(file)
        return manifest_raw

    def _air_files(self, manifests: list[Path]) -> Iterator[Path]:
        for directory, subdirs, names in os.walk(self.root):
            # Sorted in place, so the walk (and every issue list) has one order everywhere.
            subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
            for name in sorted(names):
                file = Path(directory) / name
                if name.startswith(".") or file.suffix not in AIR_FILE_SUFFIXES:
                    continue
                if file not in manifests:
                    yield file

    def _relative(self, file: Path) -> str:
        return file.relative_to(self.root).as_posix()

    def _read_documents(self, file: Path) -> list[Any] | None:
        relative = self._relative(file)
        size = file.stat().st_size
        if size > AIR_FILE_BYTES_MAX:
            self.add(
                "air.file_invalid",
                relative,
                f"{size} bytes; the limit is {AIR_FILE_BYTES_MAX}",
                relative,
            )
            return None
        try:
            text = file.read_bytes().decode("utf-8")
            documents = _parse_text(text, yaml_syntax=file.suffix != ".json")
        except (ValueError, InvalidInputError) as error:
            # ValueError: text that is not UTF-8.
            message = str(error).splitlines()[0] if str(error) else type(error).__name__
            self.add("air.file_invalid", relative, f"cannot parse: {message}", relative)
            return None
        return documents

    def _read_definition_file(self, file: Path) -> None:
        documents = self._read_documents(file)
        if documents is None:
            return
        relative = self._relative(file)
        items: list[tuple[str, Any]] = []
        for doc_index, document in enumerate(documents):
            doc_root = relative if len(documents) == 1 else f"{relative}#{doc_index}"
            if isinstance(document, list):
                items.extend((f"{doc_root}[{i}]", item) for i, item in enumerate(document))
            else:
                items.append((doc_root, document))
        for root, item in items:
            self._read_definition(item, root, relative, file.parent)

    def _read_definition(self, item: Any, root: str, relative: str, directory: Path) -> None:
        if not isinstance(item, dict) or not isinstance(item.get("$kind"), str):
            self.add("air.kind_unknown", root, "a definition is an object with a $kind", relative)
            return
        kind = item["$kind"]
        model = DEF_MODELS.get(kind)
        if model is None:
            hint = "the manifest belongs in manifest.json|yaml" if kind == "manifest" else ""
            self.add(
                "air.kind_unknown",
                f"{root}.$kind",
                f"unknown $kind {kind!r} (kinds: {', '.join(DEF_MODELS)}){'; ' + hint if hint else ''}",
                relative,
            )
            return
        name = item.get("name")
        named_root = name if isinstance(name, str) and name_problem(name) is None else root
        try:
            definition: AnyDefinition = model.model_validate(item)  # type: ignore[assignment]
        except ValidationError as error:
            self.issues.extend(_pydantic_issues(error, named_root, relative))
            return
        self._add_definition(definition, relative, directory)

    def _add_definition(self, definition: AnyDefinition, relative: str, directory: Path) -> None:
        name = definition.name
        if name in self.definitions:
            self.add(
                "air.duplicate_name",
                name,
                f"{name} is defined in {self.files[name]} and again in {relative}",
                relative,
            )
            return
        if len(self.definitions) >= DEFINITIONS_MAX:
            self.add("air.too_many_definitions", name, f"more than {DEFINITIONS_MAX}", relative)
            return
        self.definitions[name] = definition
        self.files[name] = relative
        self.module_dirs[name] = directory

    def resolve_modules(
        self, resolver: ArtifactResolver
    ) -> tuple[dict[str, AnyDefinition], dict[str, Path]]:
        """Turn artifact paths into hashes. A module that fails is reported and kept as it is,
        so that refs to it still resolve and only the real problem is reported."""
        resolved: dict[str, AnyDefinition] = {}
        artifacts: dict[str, Path] = {}
        for name in sorted(self.definitions):
            definition = self.definitions[name]
            if isinstance(definition, DefModule) and definition.artifact.path is not None:
                file = (self.module_dirs[name] / definition.artifact.path).resolve()
                module = self._resolve_module(definition, file, resolver)
                if module is not None:
                    artifacts[name] = file
                    definition = module
            resolved[name] = definition
        return resolved, artifacts

    def _resolve_module(
        self, module: DefModule, file: Path, resolver: ArtifactResolver
    ) -> DefModule | None:
        relative = self.files[module.name]
        try:
            found = resolver(file)
        except AirError as error:
            self.add(error.code, f"{module.name}.artifact.path", error.message, relative)
            return None
        given = module.artifact.hash_
        if given is not None and given != found:
            self.add(
                "air.hash_mismatch",
                f"{module.name}.artifact.hash",
                f"{module.artifact.path} hashes to {found}, the definition says {given}",
                relative,
            )
            return None
        return module.model_copy(update={"artifact": Artifact(hash=found)})

    def parse_manifest(self, raw: Any) -> Manifest | None:
        if raw is None:
            return None
        if not isinstance(raw, dict) or raw.get("$kind", "manifest") != "manifest":
            self.add(
                "air.kind_unknown",
                "manifest",
                'a manifest is an object with "$kind": "manifest"',
                self.manifest_file,
            )
            return None
        try:
            return Manifest.model_validate(raw)
        except ValidationError as error:
            self.issues.extend(_pydantic_issues(error, "manifest", self.manifest_file))
            return None


def _pydantic_issues(error: ValidationError, root: str, file: str | None) -> list[Issue]:
    issues = []
    for detail in error.errors():
        code = detail["type"] if detail["type"].startswith("air.") else "air.def_invalid"
        issues.append(Issue(code, loc_to_path(detail["loc"], root), detail["msg"], file))
    return issues


# --------------------------------------------------------------------------------------------
# Strict JSON and YAML: duplicate keys are errors, YAML dates stay text.


class DocumentInvalidError(AirError):
    """A JSON or YAML file that cannot be read as exactly one value."""

    code = "air.file_invalid"
    hint = "JSON or YAML (.json, .yaml, .yml), one document, no duplicate keys"


def read_document(path: str | os.PathLike[str]) -> Any:
    """Read one JSON or YAML value from a file (by suffix: `.json` is JSON, `.yaml` and `.yml`
    are YAML), with the loader's strict rules: no duplicate keys, no NaN, dates stay text."""
    file = Path(path)
    if file.suffix not in AIR_FILE_SUFFIXES:
        raise DocumentInvalidError(f"{file.name} is not .json, .yaml or .yml", path=str(file))
    if file.stat().st_size > AIR_FILE_BYTES_MAX:
        raise DocumentInvalidError(f"larger than {AIR_FILE_BYTES_MAX} bytes", path=str(file))
    try:
        documents = _parse_text(
            file.read_bytes().decode("utf-8"), yaml_syntax=file.suffix != ".json"
        )
    except (ValueError, InvalidInputError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise DocumentInvalidError(f"cannot parse: {message}", path=str(file)) from None
    if len(documents) != 1:
        raise DocumentInvalidError(f"{len(documents)} documents; one was expected", path=str(file))
    return documents[0]


def _parse_text(text: str, *, yaml_syntax: bool) -> list[Any]:
    """The documents of one file, nesting and size bounded as they are parsed (so no later
    walk of a definition can recurse too deeply or expand an alias bomb)."""
    if not yaml_syntax:
        # The one strict reader of outside JSON: no duplicate keys, no NaN, depth bounded.
        return [jsontext.parse(text, depth_max=DOCUMENT_DEPTH_MAX)]
    documents = yamltext.parse_all(text, depth_max=DOCUMENT_DEPTH_MAX, nodes_max=DOCUMENT_NODES_MAX)
    return [doc for doc in documents if doc is not None]
