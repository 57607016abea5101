#!/usr/bin/env bash
# `make install-check`: what a user gets from `pip install aos-*.whl`, away from the checkout.
# Builds the wheel, installs it (with the build extra) into a fresh virtualenv in a temporary
# folder, copies an example world there (the Python counter, built from source into a fresh
# build cache, so the WIT world and the SDK must come from the installed package), and runs
# create, send and replay --verify from that folder; then a local flow run, which needs the
# flow world's manifest and interpreter sources shipped in the package.
set -euo pipefail
checkout="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/aos-install-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT

step() { printf '\n== %s\n' "$*"; }

step "wheel"
"$checkout/.venv/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" "$checkout"
wheel="$(ls "$work"/dist/aos-*.whl)"

step "fresh virtualenv"
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet "$wheel[build]"
aos="$work/venv/bin/aos"

step "example world outside the checkout"
mkdir -p "$work/example"
cp -r "$checkout/manifests/counter" "$work/example/manifest"
cp -r "$checkout/modules/examples/counter_py" "$work/example/counter_py"
sed -i 's#path: .*counter_py#path: ../../counter_py#' "$work/example/manifest/defs/counter.yaml"

cd "$work"
AOS_CACHE_DIR_SHARED="${AOS_CACHE_DIR:-}"
export AOS_CACHE_DIR="$work/cache" AOS_WORLD="$work/world"
unset PYTHONPATH
"$work/venv/bin/python" - <<'PY'
import aos.kernel, aos_sdk
for module in (aos.kernel, aos_sdk):
    assert "site-packages" in module.__file__, module.__file__
PY
"$aos" world create "$AOS_WORLD" --manifest example/manifest
"$aos" world send demo/CounterEvent@1 \
    --value-json '{"$tag": "Increment", "$value": {"id": "a", "by": 7}}'
"$aos" world state get demo/counter@1 a
"$aos" world replay --verify

step "a local flow run (the flow world ships in the package)"
# The shared build cache: the interpreter's sources are found through the installed package
# either way, and a cache hit keeps this step from rebuilding the largest component.
AOS_CACHE_DIR="${AOS_CACHE_DIR_SHARED:-}" "$aos" flow run \
    "$checkout/flows/examples/hello.flow.yaml" --local --workload '{"names": ["ann", "bo"]}' \
    | tail -1
echo "install-check ok"
