"""How long `aos world status` takes on a small world, as a person runs it (not run by
`bench.run`; issue 32 asks for under 0.3 s): a fresh flow world with one finished execution,
then the command as a new process `--runs` times, its wall time (median and best), and the
imports that cost most in one more run (`python -X importtime`, cumulative).

    .venv/bin/python -m bench.cli_status [--runs 10] [--imports 12]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_AOS = [sys.executable, "-c", "from aos.cli.main import main; main()"]
HELLO = Path(__file__).resolve().parent.parent / "flows" / "examples" / "hello.yaml"


def make_small_world(folder: Path) -> Path:
    """A flow world kept by `aos flow run hello.yaml --local --keep`: one finished execution."""
    world = folder / "world"
    command = [*_AOS, "flow", "run", str(HELLO), "--local", "--keep", str(world)]
    subprocess.run(command, check=True, capture_output=True)
    return world


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--imports", type=int, default=12, help="Most costly imports shown.")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="aos-bench-status-") as folder:
        world = make_small_world(Path(folder))
        command = [*_AOS, "world", "status", "--world", str(world)]
        subprocess.run(command, check=True, capture_output=True)  # warm the OS's file cache
        seconds = []
        for _ in range(options.runs):
            started = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True)
            seconds.append(time.perf_counter() - started)
        traced = subprocess.run(
            [sys.executable, "-X", "importtime", *command[1:]], capture_output=True, text=True
        )
    median, best = statistics.median(seconds), min(seconds)
    print(f"aos world status: median {median:.3f} s, best {best:.3f} s over {options.runs} runs")
    print(f"  slowest imports (cumulative ms, of {imports_ms(traced.stderr, 0)[0][1]:.0f} ms):")
    for name, ms in imports_ms(traced.stderr, options.imports)[1:]:
        print(f"  {ms:8.1f}  {name}")


def imports_ms(trace: str, shown: int) -> list[tuple[str, float]]:
    """The top-level total, then the `shown` imports with the most cumulative time."""
    rows = []
    for line in trace.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        rows.append((name.rstrip(), int(cumulative) / 1000))
    top_level = sum(ms for name, ms in rows if not name.startswith("  "))
    ordered = sorted(((name.strip(), ms) for name, ms in rows), key=lambda row: -row[1])
    return [("(all)", top_level), *ordered[:shown]]


if __name__ == "__main__":
    main()
