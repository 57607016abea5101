"""A fixed clock for build tools: a tiny preload library, compiled with the build's own Zig.

The interpreter componentize-py snapshots reads the wall and monotonic clocks while it
initializes, and what it read stays in the snapshot. Those reads go through the C library's
`clock_gettime` (the vDSO answers them, so no seccomp filter ever sees them); a library loaded
with `LD_PRELOAD` answers them instead, always 1980-01-01T00:00:00Z (the time the entropy
supervisor also gives every file). The tool's own timers do not depend on the clock moving.

The library is built once per source and Zig version into the build cache
(`fixed-clock-<hash>.so`); None when it cannot be built (no Zig, another platform), in
which case a build is not reproducible and says so.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from aos.kernel.hashing import hash_value
from aos.kernel.wasm.seccomp import FIXED_TIME_S

COMPILE_TIMEOUT_S = 120.0
_TARGETS = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}
# No headers and no libc: the library defines the time functions and calls nothing.
SOURCE = f"""
struct aos_timespec {{ long tv_sec; long tv_nsec; }};
struct aos_timeval {{ long tv_sec; long tv_usec; }};
#define AOS_FIXED_TIME_S {FIXED_TIME_S}L
int clock_gettime(int clock, struct aos_timespec *ts) {{
    (void)clock;
    if (ts) {{ ts->tv_sec = AOS_FIXED_TIME_S; ts->tv_nsec = 0; }}
    return 0;
}}
int gettimeofday(struct aos_timeval *tv, void *tz) {{
    (void)tz;
    if (tv) {{ tv->tv_sec = AOS_FIXED_TIME_S; tv->tv_usec = 0; }}
    return 0;
}}
long time(long *t) {{
    if (t) *t = AOS_FIXED_TIME_S;
    return AOS_FIXED_TIME_S;
}}
int timespec_get(struct aos_timespec *ts, int base) {{
    if (ts) {{ ts->tv_sec = AOS_FIXED_TIME_S; ts->tv_nsec = 0; }}
    return base;
}}
"""


def library(cache_dir: Path) -> Path | None:
    """The preload library (built into `cache_dir` if needed), or None when it cannot be."""
    target = _TARGETS.get(platform.machine())
    if sys.platform != "linux" or target is None:
        return None
    try:
        zig = metadata.version("ziglang")
    except metadata.PackageNotFoundError:
        return None
    key = hash_value({"source": SOURCE, "target": target, "ziglang": zig})
    path = cache_dir / f"fixed-clock-{key.hex[:32]}.so"
    if path.is_file():
        return path
    return path if _compile(path, target) else None


def _compile(path: Path, target: str) -> bool:
    # Built beside its final place, so that the rename is atomic.
    with tempfile.TemporaryDirectory(prefix=".aos-clock-", dir=path.parent) as work:
        source = Path(work) / "fixed_clock.c"
        source.write_text(SOURCE)
        built = Path(work) / "fixed_clock.so"
        command = [
            sys.executable,
            "-m",
            "ziglang",
            "cc",
            "-shared",
            "-fPIC",
            "-nostdlib",
            "-O2",
            "-target",
            target,
            str(source),
            "-o",
            str(built),
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, timeout=COMPILE_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        if done.returncode != 0 or not built.is_file():
            return False
        os.replace(built, path)
    return True
