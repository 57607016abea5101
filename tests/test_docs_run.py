"""The docs run top to bottom (issue 32): every shell block of README.md and docs/*.md, in order.

Each page runs as one bash session (so `export`, `cd`, `&` and `kill %1` carry from block to
block, as in a reader's terminal) in a scratch folder of its own that holds the checkout's
top-level entries as links, with a fresh `HOME` and no `AOS_*` variable but the module build
cache (`AOS_CACHE_DIR`, keyed by source hash, so sharing it changes no result). Two things
of the text are rewritten, and only so that runs cannot collide: `/tmp/` becomes the page's
own scratch `tmp/`, and each `127.0.0.1:PORT` a free port the OS gave.

A block in prompt form (`$ command` lines, the lines after a command being what it prints)
is checked by shape: the exit code (0; non-zero with the code when the output shows
`error[CODE]`; N when the command's comment says `exit N`), and the shown output's key lines
(each line's first word that is not a number) in order among what the command printed. A
block in plain form (no `$`) runs each line and checks only the exit code. A command ending
in `&` starts a background process and is not checked; the page must stop what it started
(the reader needs that too): a job still running at the page's end fails it.

A page that names `$PGURL` runs against a real PostgreSQL server, a throwaway cluster
(tests/pg_cluster.py) the runner starts for it. A block the runner must not run is preceded
by `<!-- docs-run: skip: WHY -->` naming what it needs that a test run does not have. `test_repository_paths_exist` checks that every
repository path the docs write in backticks exists.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.pg_cluster import PgCluster

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PAGE_S_MAX = 900
"""A page's whole run; past it the page fails and its processes are killed."""
JOB_EXIT_S_MAX = 15
"""How long a background process the page stopped may take to exit before it counts as left."""
SLOWEST_SHOWN = 3
"""The slowest commands of a page printed (`pytest -rA` shows them): where its time goes."""
SKIP_MARK = re.compile(r"<!--\s*docs-run:\s*skip:\s*(?P<why>\S.*?)\s*-->")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<info>\S*)")
ERROR_LINE = re.compile(r"error\[(?P<code>[a-z0-9_.]+)\]")
EXIT_COMMENT = re.compile(r"\bexit (?P<rc>\d+)\b")
COMMENT = re.compile(r"\s#\s(?P<text>.*)$")
PORT = re.compile(r"127\.0\.0\.1:(?P<port>\d{4,5})")
MARK = "@@aos-docs"
VOLATILE = re.compile(r"(?P<kind>blake3:)[0-9a-f.]*|(?P<token>aos_)(?:\.\.\.|[\w-]{20,})")
"""A hash or a token differs from run to run: a label is compared without it."""
HEX = re.compile(r"[0-9a-f]{16,}")


@dataclass
class Command:
    text: str
    expected: list[str] = field(default_factory=list)
    prompt: bool = True

    @property
    def background(self) -> bool:
        last = _strip_comment(self.text.splitlines()[-1])
        return last.endswith("&") and not last.endswith("&&")

    def expected_rc(self) -> int | None:
        """0, None for "any non-zero" (the output shows an error), or what the comment says."""
        if any(ERROR_LINE.match(line.strip()) for line in self.expected):
            return None
        comment = COMMENT.search(self.text.splitlines()[0])
        if comment and (said := EXIT_COMMENT.search(comment.group("text"))):
            return int(said.group("rc"))
        return 0


@dataclass
class Block:
    line: int
    commands: list[Command]
    skip: str | None


def _strip_comment(line: str) -> str:
    match = COMMENT.search(line)
    return (line[: match.start()] if match else line).rstrip()


def blocks(page: Path) -> list[Block]:
    """The page's `sh` blocks, in order, each with its commands and their shown output."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        end = index + 1
        while not lines[end].strip().startswith("```"):
            end += 1
        if fence.group("info") == "sh":
            indent = len(fence.group("indent"))
            body = [raw[indent:] for raw in lines[index + 1 : end]]
            before = lines[index - 1] if index else ""
            skip = SKIP_MARK.search(before)
            found.append(Block(index + 1, _commands(body), skip.group("why") if skip else None))
        index = end + 1
    return found


def _commands(body: list[str]) -> list[Command]:
    prompt = any(line.startswith("$ ") for line in body)
    commands: list[Command] = []
    index = 0
    while index < len(body):
        line = body[index]
        if prompt and not line.startswith("$ "):
            if commands:
                commands[-1].expected.append(line)
            index += 1
            continue
        text = line[2:] if prompt else line
        if not prompt and (not text.strip() or text.lstrip().startswith("#")):
            index += 1
            continue
        parts = [text]
        heredoc = re.search(r"<<-?'?(?P<tag>[A-Z]+)'?", text)
        while parts[-1].endswith("\\") or (heredoc and parts[-1].strip() != heredoc["tag"]):
            index += 1
            parts.append(body[index])
        commands.append(Command("\n".join(parts), prompt=prompt))
        index += 1
    return commands


def _key(line: str) -> str | None:
    """A shown line's first word that is not a number (its label), or None for `...`."""
    for word in line.split():
        if word == "...":
            return None
        if word.startswith("{") and ":" in word:  # a JSON answer: its first field names it
            return word.split(":", 1)[0]
        if not re.fullmatch(r"[\d.,:]+", word):
            return "<hex>" if HEX.fullmatch(word) else VOLATILE.sub(_volatile, word)
    return None


def _volatile(match: re.Match[str]) -> str:
    return match.group("kind") or "aos_<token>"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _checkout_entries() -> set[str]:
    """The top-level names of the files git tracks."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
    ).stdout.decode()
    return {name.split("/", 1)[0] for name in listed.split("\0") if name}


def _scratch(tmp: Path) -> Path:
    work = tmp / "work"
    work.mkdir()
    # What a fresh clone holds, and its virtualenv: never what earlier runs left in the
    # checkout (a `make demo`'s `.aos-demo/`, which the page's own `make demo` would replace).
    for name in sorted(_checkout_entries() | {".venv"}):
        if (ROOT / name).exists():
            (work / name).symlink_to(ROOT / name)
    (tmp / "home").mkdir()
    (tmp / "tmp").mkdir()
    return work


def _environment(tmp: Path) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AOS_", "PG", "VIRTUAL_ENV", "PYTEST", "PYTHON"))
    }
    cache = os.environ.get("AOS_CACHE_DIR") or str(Path.home() / ".cache" / "aos")
    env.update(
        HOME=str(tmp / "home"),
        AOS_CACHE_DIR=cache,
        PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        TMPDIR=str(tmp / "tmp"),
    )
    return env


def _script(page: Path, found: list[Block], tmp: Path) -> tuple[str, list[Command]]:
    ports = {port: _free_port() for port in set(PORT.findall(page.read_text()))}

    def local(text: str) -> str:
        text = text.replace("/tmp/", f"{tmp / 'tmp'}/")
        return PORT.sub(lambda m: f"127.0.0.1:{ports[m.group('port')]}", text)

    run: list[Command] = []
    lines = ["shopt -s expand_aliases", "exec 2>&1"]
    for block in found:
        if block.skip:
            continue
        for command in block.commands:
            lines.append(f"printf '\\n{MARK}-begin {len(run)} %s\\n' $EPOCHREALTIME")
            lines.append(local(command.text))
            lines.append(f"printf '\\n{MARK}-end {len(run)} %s %s\\n' $? $EPOCHREALTIME")
            run.append(command)
    # A process the page stopped may take a moment to exit (a node drains on SIGTERM).
    lines.append(
        f'for _ in $(seq {JOB_EXIT_S_MAX * 5}); do [ -z "$(jobs -pr)" ] && break; sleep 0.2; done'
    )
    lines.append(f"printf '\\n{MARK}-jobs %s\\n' \"$(jobs -pr | tr '\\n' ' ')\"")
    return "\n".join(lines) + "\n", run


def _segments(output: str) -> tuple[dict[int, tuple[list[str], int]], dict[int, float], str]:
    """Each command's printed lines and exit code, its seconds, and the jobs left running."""
    found: dict[int, tuple[list[str], int]] = {}
    seconds: dict[int, float] = {}
    current: list[str] = []
    began = 0.0
    jobs = ""
    for line in output.splitlines():
        if line.startswith(f"{MARK}-begin "):
            current = []
            began = _seconds(line.split()[2])
        elif line.startswith(f"{MARK}-end "):
            _, index, rc, ended = line.split()
            found[int(index)] = (current, int(rc))
            seconds[int(index)] = _seconds(ended) - began
        elif line.startswith(f"{MARK}-jobs"):
            jobs = line.removeprefix(f"{MARK}-jobs").strip()
        else:
            current.append(line)
    return found, seconds, jobs


def _seconds(epoch: str) -> float:
    """bash's $EPOCHREALTIME, whose decimal mark is the locale's."""
    return float(epoch.replace(",", "."))


def _check(index: int, command: Command, printed: list[str], rc: int) -> list[str]:
    where = f"command {index}: $ {command.text.splitlines()[0]}"
    if command.background:
        return []
    problems: list[str] = []
    expected = command.expected_rc()
    text = "\n".join(printed)
    if expected is None:
        codes = [m["code"] for line in command.expected if (m := ERROR_LINE.match(line.strip()))]
        if rc == 0 or not all(f"error[{code}]" in text for code in codes):
            problems.append(f"{where}\n  expected exit != 0 with {codes}, got {rc}:\n{text}")
    elif rc != expected:
        problems.append(f"{where}\n  expected exit {expected}, got {rc}:\n{text}")
    keys = [_key(line) for line in printed]
    at = 0
    for line in command.expected:
        key = _key(line)
        if key is None:
            continue
        while at < len(keys) and keys[at] != key:
            at += 1
        if at == len(keys):
            problems.append(f"{where}\n  shown line {line.strip()!r} not printed:\n{text}")
            break
        at += 1
    return problems


@contextlib.contextmanager
def _postgres(page: Path) -> Iterator[dict[str, str]]:
    """A page that names `$PGURL` gets a real server: a throwaway cluster, its database `aos`
    owned by a role `aos`, the URL in `PGURL` and the password in `PGPASSWORD` (as the page
    tells a reader to keep it out of the URL)."""
    if "$PGURL" not in page.read_text():
        yield {}
        return
    cluster = PgCluster.start()
    try:
        password = secrets.token_hex(16)
        cluster.psql(f"CREATE ROLE aos LOGIN PASSWORD '{password}'")
        cluster.psql("CREATE DATABASE aos OWNER aos")
        yield {"PGURL": cluster.dsn("aos", user="aos"), "PGPASSWORD": password}
    finally:
        cluster.stop()


@pytest.mark.slow
@pytest.mark.docs
# A page is one bash session of many `aos` commands (the flows page ~5 minutes on busy cores):
# its own bound, PAGE_S_MAX, ends it with its output; the per-test limit sits just above.
@pytest.mark.timeout(PAGE_S_MAX + 60)
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_runs(page: Path, tmp_path: Path) -> None:
    with _postgres(page) as server:
        _run_page(page, tmp_path, server)


def _run_page(page: Path, tmp_path: Path, server: dict[str, str]) -> None:
    found = blocks(page)
    work = _scratch(tmp_path)
    script, run = _script(page, found, tmp_path)
    (tmp_path / "page.sh").write_text(script)
    started = time.monotonic()
    process = subprocess.Popen(
        ["bash", str(tmp_path / "page.sh")],
        cwd=work,
        env={**_environment(tmp_path), **server},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=PAGE_S_MAX)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"{page.name} ran over {PAGE_S_MAX} s:\n{output[-4000:]}")
    finally:
        _kill_group(process.pid)
    (tmp_path / "page.out").write_text(output)
    segments, seconds, jobs = _segments(output)
    slowest = sorted(seconds, key=seconds.__getitem__, reverse=True)[:SLOWEST_SHOWN]
    for index in slowest:
        print(f"{seconds[index]:7.1f} s  $ {run[index].text.splitlines()[0]}")
    problems = [f"{page.name}: still running at the page's end: jobs {jobs}"] if jobs else []
    for index, command in enumerate(run):
        if index not in segments:
            problems.append(f"command {index} never finished: $ {command.text}")
            continue
        problems.extend(_check(index, command, *segments[index]))
    took = time.monotonic() - started
    assert not problems, f"{page.name} ({took:.0f} s):\n\n" + "\n\n".join(problems)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


REPO_PATH = re.compile(
    r"(?<![\w/.-])(?P<path>(?:kernel|cli|flows|modules|manifests|spec|tests|bench|docs|\.ci)"
    r"/[\w./-]*)"
)
PLACEHOLDER = re.compile(r"[*<>{}]|\.\.\.|[A-Z]{3,}")
NOT_A_PATH_AFTER = "<{*@"
"""A path cut short by a placeholder (`bench/bench_<topic>.py`), a glob or a name (`bench/noop@1`)."""
WRITTEN_BY_RUNS = ("bench/results/",)
"""Paths the docs name that a run writes (not versioned)."""
SPEC_SHORT = re.compile(r"spec/\d\d")
"""`spec/12 §6`: a spec part by its number."""


def backticked_paths(page: Path) -> list[tuple[int, str]]:
    """Repository paths a page writes in backticks (placeholders and globs left out)."""
    found: list[tuple[int, str]] = []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        for span in re.findall(r"`([^`]+)`", line):
            for match in REPO_PATH.finditer(span):
                path = match.group("path").rstrip(".,:;)")
                after = span[match.end() : match.end() + 1]
                if PLACEHOLDER.search(path) or (after and after in NOT_A_PATH_AFTER):
                    continue
                if not path.startswith(WRITTEN_BY_RUNS) and not SPEC_SHORT.fullmatch(path):
                    found.append((number, path))
    return found


def test_repository_paths_exist() -> None:
    pages = [*PAGES, ROOT / "bench" / "README.md"]
    missing = [
        f"{page.relative_to(ROOT)}:{number}: `{path}`"
        for page in pages
        for number, path in backticked_paths(page)
        if not (ROOT / path).exists()
    ]
    assert not missing, "paths the docs name that do not exist:\n" + "\n".join(missing)


def test_blocks_parse_as_shown() -> None:
    """The parser on a block of each form, so a page's check means what it says."""
    page = [
        "$ aos world send x --value-json '{}'   # exit 3: failed",
        "admitted  seq 2  blake3:...",
        "...",
        "$ cat > f <<'EOF'",
        "a: 1",
        "EOF",
        "$ aos world verify",
        "error[world.chain_broken]: the chain breaks",
    ]
    commands = _commands(page)
    assert [c.text.splitlines()[0] for c in commands] == [
        "aos world send x --value-json '{}'   # exit 3: failed",
        "cat > f <<'EOF'",
        "aos world verify",
    ]
    assert commands[0].expected_rc() == 3
    assert commands[1].text.endswith("EOF") and commands[1].expected == []
    assert commands[2].expected_rc() is None
    assert [_key(line) for line in commands[0].expected] == ["admitted", None]
    assert _key('{"world":"shop","epoch":2}') == '{"world"'
    assert shlex.split(commands[0].text)[0] == "aos"
    plain = _commands(["make bench   # quick", "# a comment", "make \\", "  docs"])
    assert [c.text for c in plain] == ["make bench   # quick", "make \\\n  docs"]
    assert not any(c.prompt for c in plain)
    assert _check(0, Command("false", ["error[x.y]: no"]), ["error[x.y]: no"], 1) == []
    assert _check(0, Command("true"), [], 1) != []
    assert _check(0, Command("true", ["ok: 1"]), ["nope"], 0) != []
    printed = f"{MARK}-begin 0 10,5\nhi\n{MARK}-end 0 3 12.0\n{MARK}-jobs 42\n"
    assert _segments(printed) == ({0: (["hi"], 3)}, {0: 1.5}, "42")
