#!/usr/bin/env bash
# `make install-check`: what a user gets from `pip install aos-*.whl`, away from the checkout,
# and whether the flow interpreter the wheel carries is the pinned one, rebuilt from scratch.
#
# 1. A fresh copy of the checkout (the files a clone would have, uncommitted edits included)
#    builds the wheel into an empty build cache: setup.py rebuilds the flow interpreter and
#    refuses a wheel whose interpreter is not the one flows/interpreter.pin.json pins.
# 2. A second fresh copy, with __pycache__ folders, compiled bytecode, editor swap files and
#    backups in the interpreter's, the SDK's and the counter module's sources, rebuilds the
#    interpreter into another empty cache: the same hash again. The counter module
#    (modules/examples/counter_py) built from each copy, with that copy's SDK and WIT world,
#    into empty caches: one hash.
# 3. The wheel alone, no extras, in a fresh virtualenv in a temporary folder: `aos --version`
#    names the shipped interpreter, a playbook and a `.flow` file run `--local`, and nothing
#    is built (the build cache stays empty; componentize-py is not installed).
# 4. With the build extra added: an example world whose Python module is built from source
#    (so the WIT world and the SDK must come from the installed package): create, send,
#    replay --verify.
# It prints the wheel's size, the virtualenv's size without and with the build extra, and the
# time each step took.
set -euo pipefail
checkout="$(cd "$(dirname "$0")/.." && pwd)"
python="${PYTHON:-python3}"
dev="$checkout/.venv/bin/python"
work="$(mktemp -d "${TMPDIR:-/tmp}/aos-install-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
started=$SECONDS

step() { printf '\n== %s (at %ss)\n' "$*" "$((SECONDS - started))"; }
size() { du -sb "$1" | cut -f1; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# The files a clone of the checkout would have: tracked ones (as edited) and new ones git
# does not ignore, links kept as links; never __pycache__, build output or virtualenvs.
fresh_copy() {
    "$dev" - "$checkout" "$1" <<'PY'
import os, shutil, subprocess, sys
source, target = sys.argv[1:]
listed = subprocess.run(
    ["git", "-C", source, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
    capture_output=True, check=True,
).stdout.decode().split("\0")
for name in sorted(set(filter(None, listed))):
    origin, copy = os.path.join(source, name), os.path.join(target, name)
    if not os.path.lexists(origin):
        continue  # deleted in the working tree
    os.makedirs(os.path.dirname(copy), exist_ok=True)
    if os.path.islink(origin):
        os.symlink(os.readlink(origin), copy)
    else:
        shutil.copyfile(origin, copy)
PY
}

# What a working folder gathers besides its sources.
add_strays() {
    for folder in "$@"; do
        mkdir -p "$folder/__pycache__"
        for source in "$folder"/*.py; do
            name="$(basename "$source" .py)"
            "$dev" -c "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2])" \
                "$source" "$folder/__pycache__/$name.cpython-314.pyc"
            printf 'vim swap' > "$folder/.$name.py.swp"
            cp "$source" "$folder/$name.py~"
        done
    done
}

step "fresh copy; the wheel, its interpreter rebuilt into an empty cache and checked"
fresh_copy "$work/clean"
AOS_CACHE_DIR="$work/cache-wheel" "$dev" -m pip wheel --quiet --no-deps \
    --wheel-dir "$work/dist" "$work/clean"
wheel="$(ls "$work"/dist/aos-*.whl)"
pinned="$("$dev" -c 'import json, sys; print(json.load(open(sys.argv[1]))["wasm_hash"])' \
    "$checkout/flows/interpreter.pin.json")"
echo "pinned interpreter: $pinned"

step "a second fresh copy, with bytecode and editor files in the sources: the same hash"
fresh_copy "$work/stray"
add_strays "$work/stray/modules/flow" "$work/stray/modules/sdk/aos_sdk" \
    "$work/stray/modules/examples/counter_py"
"$dev" -m aos.flows.interpreter build --checkout "$work/stray" --cache-dir "$work/cache-stray"

step "the counter module from each copy, into empty caches: one hash"
counter_hash() {
    "$dev" - "$1" "$2" <<'PY'
import sys
from pathlib import Path
from aos.kernel.wasm.build import build_python
root, cache = Path(sys.argv[1]), Path(sys.argv[2])
built = build_python(
    root / "modules/examples/counter_py",
    cache_dir=cache,
    sdk_dir=root / "modules/sdk",
    wit_dir=root / "kernel/wasm/wit",
)
assert built.reproducible and not built.cached, built
print(built.wasm_hash)
PY
}
clean_counter="$(counter_hash "$work/clean" "$work/cache-counter-clean")"
stray_counter="$(counter_hash "$work/stray" "$work/cache-counter-stray")"
echo "counter: $clean_counter (clean copy), $stray_counter (copy with strays)"
test "$clean_counter" = "$stray_counter"

step "the wheel alone (no extras) in a fresh virtualenv"
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet "$wheel"
aos="$work/venv/bin/aos"
plain_bytes="$(size "$work/venv")"
cd "$work"
unset PYTHONPATH AOS_NODE AOS_WORLD
export AOS_CACHE_DIR="$work/cache-run"
"$work/venv/bin/python" - "$pinned" <<'PY'
import importlib.util, sys
import aos.kernel, aos_sdk
for module in (aos.kernel, aos_sdk):
    assert "site-packages" in module.__file__, module.__file__
assert importlib.util.find_spec("componentize_py") is None, "componentize-py is installed"
from aos.flows.interpreter import shipped_component
shipped = shipped_component()
assert shipped is not None and str(shipped[1].wasm_hash) == sys.argv[1], shipped
PY
version="$("$aos" --version)"
echo "$version"
grep -q "flow interpreter $pinned (shipped, as pinned)" <<< "$version"

step "a playbook and a .flow file, --local, from the installed package"
for flow in hello.yaml merge.flow; do
    # The run's summary names its status on a line of its own ("status    completed  (...)").
    ended="$("$aos" flow run "$work/clean/flows/examples/$flow" --local | grep '^status ')"
    echo "$flow: $ended"
    grep -Eq '^status +completed' <<< "$ended"
done
if compgen -G "$AOS_CACHE_DIR/builds/*.wasm" > /dev/null; then
    echo "install-check: running flows built a module" >&2
    exit 1
fi

step "the build extra: an example world with a Python module built from source"
"$work/venv/bin/python" -m pip install --quiet "$wheel[build]"
build_bytes="$(size "$work/venv")"
mkdir -p "$work/example"
cp -r "$checkout/manifests/counter" "$work/example/manifest"
cp -r "$checkout/modules/examples/counter_py" "$work/example/counter_py"
sed -i 's#path: .*counter_py#path: ../../counter_py#' "$work/example/manifest/defs/counter.yaml"
export AOS_WORLD="$work/world"
"$aos" world create "$AOS_WORLD" --manifest example/manifest
"$aos" world send demo/CounterEvent@1 \
    --value-json '{"$tag": "Increment", "$value": {"id": "a", "by": 7}}'
"$aos" world state get demo/counter@1 a
"$aos" world replay --verify

step "figures"
echo "wheel:                       $(mib "$(stat -c %s "$wheel")")  $(basename "$wheel")"
echo "virtualenv, no extras:       $(mib "$plain_bytes")"
echo "virtualenv, with [build]:    $(mib "$build_bytes")"
echo "install-check took ${SECONDS}s"
echo "install-check ok"
