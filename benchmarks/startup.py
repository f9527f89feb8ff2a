"""Start-up of the everyday commands, end to end, against `git status` in the same workspace.

assemble is installed as users get it (benchmarks/installed.py: a uv venv, regular install,
byte-code compiled) unless ``--python`` names an interpreter. A fresh copy of
examples/stable-abi is checked out once (mirrors, clones, series) and its tracked branches
fetched (`assemble patches`); then each of `assemble deps`, a no-op `assemble checkout` and
`assemble patches --offline` (nothing changed since: the stored classification is reused) runs
in a fresh interpreter ``--rounds`` times (median and best wall time, median CPU time; the rounds interleave the
commands), as does `git status` in one checkout for comparison. Budget (issue 12): under 100 ms each. For the
record it also times `patches --offline` when the classification has to be computed (its
record removed before each run): that is not a start-up path. With ``--checkout-ratio`` it also
runs benchmarks/checkout_noop.py with the same interpreter (first vs no-op checkout, target >= 10x
end to end).

With ``--tricks`` it prices each start-up shortcut instead (issue 31): what the shortcut avoids,
timed in a fresh interpreter that first imports every module the command itself imports (so
what the command loads anyway is not counted twice), against the shortcut's own work, best and
median of ``--rounds``. A shortcut that saves under 10 ms on every path is not worth its second
copy of a rule and goes (TRICK_FLOOR_MS).

    python benchmarks/startup.py [--rounds 11] [--checkout-ratio] [--tricks] [--python PATH]

Issue 31, 2 shared cores (load 2.6-10), CPython 3.11.7, installed venv. ``--tricks --rounds 21``
(ms of CPU each shortcut saved; deps / no-op checkout / patches --offline):

    sha256: hashlib vs CPython's private _sha256 (fsutil)        4.1 / 3.4 / 3.0   deleted
    cache dir: platformdirs vs a copy of its XDG rule (cache)    7.3 / 8.5 / 8.4   deleted
    --help width: shutil vs report.output (cli)                  3.0 / 2.9 / 4.7   deleted
    CheckoutState: @dataclass vs hand __eq__/__repr__            8.6 / 7.1 / 0.6   deleted (patches already
                                                                                   imports dataclasses)
    manifest: tomllib parse vs its JSON cache (manifest.load)    6.3 / 6.3 / 4.7   deleted (second pass)

End to end, the four deletions together (before, then after; two pairs back to back, CPU ms,
best wall beside it; the wall medians swing with the shared machine's load):

    assemble deps               CPU 81 / 75 -> 96 / 89    best 88 / 99 -> 98 / 82
    assemble checkout (no-op)   CPU 67 / 61 -> 86 / 79    best 56 / 71 -> 88 / 86
    assemble patches --offline  CPU 96 / 81 -> 97 / 89    best 82 / 80 -> 96 / 86

Quiet machine (load 2.6), after: deps 79 ms, no-op checkout 72 ms, patches --offline 75 ms median,
all within the 100 ms budget (CPU 77 / 68 / 74 ms): the four cost ~15 ms together, each under 10.

The fifth, the JSON cache of deps.toml's parse (manifest/load.py kept it in ``<cache>/manifests/``),
deleted after: every run parses with tomllib. Before (with the cache) and after, ``--rounds 15``,
median wall / CPU ms, deps / no-op checkout / patches --offline:

    quiet (load 0.4-1.2)   before  57 / 52 / 64 wall, CPU 59 / 50 / 64;  68 / 57 / 66 wall, CPU 68 / 55 / 64
                           after   72 / 66 / 71 wall, CPU 72 / 64 / 70;  73 / 64 / 72 wall, CPU 72 / 62 / 71
    loaded (load 3.6-5.4)  before  CPU 86 / 76 / 89 (best wall 152 / 114 / 141)
                           after   CPU 90 / 83 / 98, 84 / 77 / 87 (best wall 84 / 127 / 79, 75 / 72 / 74)

About 5 ms of CPU each (the shortcut's price above), and every path stays under the 100 ms budget
on a quiet machine; a loaded one (other jobs on both cores) doubles the wall medians either way.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.installed import installed_python, run_env  # noqa: E402
from tests.example import EXAMPLE, make_upstreams  # noqa: E402

BUDGET_MS = 100.0
TRICK_FLOOR_MS = 10.0  # a start-up shortcut that saves less than this is not kept (issue 31)
# name -> (the work the shortcut avoids, the shortcut's own work): Python run after the preload
TRICKS: dict[str, tuple[str, str]] = {
    "sha256: hashlib (OpenSSL) vs CPython's _sha256 (fsutil)": (
        "import hashlib; hashlib.sha256(b'series').hexdigest()",
        "import _sha256; _sha256.sha256(b'series').hexdigest()",
    ),
    "cache dir: platformdirs vs a copy of its XDG rule (cache)": (
        "import platformdirs; platformdirs.user_cache_dir('assembler')",
        "import os; os.environ.get('XDG_CACHE_HOME', '').strip() or os.path.expanduser('~/.cache')",
    ),
    "--help width: shutil vs report.output (cli)": (
        "import shutil; shutil.get_terminal_size()",
        "import sys; from assembler.report.output import terminal_columns; terminal_columns(sys.__stdout__)",
    ),
    "CheckoutState: @dataclass vs hand __eq__/__repr__ (git.state)": (
        "import dataclasses\n@dataclasses.dataclass\nclass S:\n a: str\n b: str\n c: str\n d: str | None = None\n"
        " e: dict | None = None\n f: str = 'applying'\n g: int = 1",
        "class S:\n __slots__ = ('a', 'b', 'c', 'd', 'e', 'f', 'g')\n def __eq__(self, o): return self is o\n"
        " def __repr__(self): return 'S()'",
    ),
    "manifest: tomllib parse vs the JSON cache of it (manifest.load)": (
        "import tomllib; tomllib.loads(TEXT)",
        "import json; json.loads(RECORD)",
    ),
}
COMMANDS: dict[str, list[str]] = {
    "assemble deps": ["deps"],
    "assemble checkout (no-op)": ["checkout"],
    "assemble patches --offline": ["patches", "--offline"],
}


class Timed:
    """One command of the benchmark and its timings (ms)."""

    def __init__(self, argv: list[str], cwd: Path, before_each: Callable[[], None] = lambda: None) -> None:
        self.argv, self.cwd, self.before_each = argv, cwd, before_each
        self.walls: list[float] = []
        self.cpus: list[float] = []

    def run(self, env: dict[str, str], record: bool = True) -> None:
        """Once; wall time, and CPU time (user + system of the child: what it costs on a busy machine)."""
        self.before_each()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(self.argv, env=env, cwd=self.cwd, check=True, capture_output=True)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if record:
            self.walls.append(wall * 1000)
            self.cpus.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000)


def measure(commands: dict[str, Timed], env: dict[str, str], rounds: int) -> None:
    """A warm-up of each, then ``rounds`` rounds that run every command once in turn: a machine
    that slows down or speeds up meanwhile (a shared VM) shifts all of them alike."""
    for command in commands.values():
        command.run(env, record=False)
    for _ in range(rounds):
        for command in commands.values():
            command.run(env)


def imported(python: str, words: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    """The modules `assemble WORDS` imports, in order (``-X importtime``), less the entry point."""
    done = subprocess.run([python, "-X", "importtime", "-m", "assembler", *words], env=env, cwd=cwd, check=True,
                          capture_output=True, text=True)
    names = [line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")]
    return [name for name in names if name not in ("__main__", "assembler.__main__")
            and not name.startswith("encodings")]


def price(python: str, preload: list[str], work: str, env: dict[str, str],
          globals_: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) milliseconds of ``work`` in a fresh interpreter that has imported ``preload``
    first. CPU time is what decides on a shared machine: wall time there counts waiting for a core."""
    script = (f"import sys, time\nfor m in {preload!r}:\n    try: __import__(m)\n    except Exception: pass\n"
              f"TEXT, RECORD = {globals_['TEXT']!r}, {globals_['RECORD']!r}\n"
              f"t, c = time.perf_counter(), time.process_time()\nexec(compile({work!r}, 'work', 'exec'))\n"
              f"print((time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000)")
    done = subprocess.run([python, "-c", script], env=env, check=True, capture_output=True, text=True)
    wall, cpu = done.stdout.split()
    return float(wall), float(cpu)


def price_tricks(python: str, workspace: Path, env: dict[str, str], rounds: int) -> None:
    """What each start-up shortcut saves on each everyday path (see the module's docstring)."""
    import json

    text = (workspace / "deps.toml").read_text()
    import tomllib

    record = json.dumps({"format": 1, "python": sys.version, "text": text, "data": tomllib.loads(text)})
    paths = {name: imported(python, ["-C", str(workspace), *words], env, workspace.parent)
             for name, words in COMMANDS.items()}
    print(f"{python}: what each start-up shortcut saves (ms of CPU, median of {rounds} fresh interpreters, after "
          f"the path's own imports; best wall time beside it); load {os.getloadavg()[0]:.1f}")
    names = {"TEXT": text, "RECORD": record}
    for trick, (avoided, kept) in TRICKS.items():
        print(f"  {trick}")
        for path, preload in paths.items():
            without, with_ = [], []
            for _ in range(rounds):  # interleaved: a machine that slows down shifts both alike
                without.append(price(python, preload, avoided, env, names))
                with_.append(price(python, preload, kept, env, names))
            saved = statistics.median(c for _, c in without) - statistics.median(c for _, c in with_)
            verdict = "keep" if saved >= TRICK_FLOOR_MS else "delete"
            print(f"    {path:<28} avoided {statistics.median(c for _, c in without):6.2f} CPU "
                  f"(best wall {min(w for w, _ in without):5.2f})  shortcut "
                  f"{statistics.median(c for _, c in with_):5.2f} "
                  f"CPU: saves {saved:5.2f} ms, {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15,
                        help="runs per command (median and best reported; default 15)")
    parser.add_argument("--checkout-ratio", action="store_true", help="also run benchmarks/checkout_noop.py")
    parser.add_argument("--tricks", action="store_true", help="price each start-up shortcut instead (issue 31)")
    parser.add_argument("--python", default=None,
                        help="the interpreter whose assemble is timed (default: a fresh uv venv with this checkout "
                             "installed, "
                             "as `uv tool install` / pipx give it)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        args.python = str(Path(args.python).absolute()) if args.python else str(installed_python(tmp / "venv"))
        workspace = tmp / "example"
        shutil.copytree(EXAMPLE, workspace, ignore=shutil.ignore_patterns("forks", "upstreams", "dist", ".assemble"))
        make_upstreams(workspace / "upstreams")
        env = run_env(ASSEMBLE_CACHE=str(tmp / "cache"))
        # the `assemble` script users run (no runpy), else `python -m assembler` for --python
        script = Path(args.python).parent / "assemble"
        launcher = [str(script)] if script.is_file() else [args.python, "-m", "assembler"]
        assemble = [*launcher, "-C", str(workspace)]
        subprocess.run([*assemble, "checkout"], env=env, check=True, capture_output=True)
        subprocess.run([*assemble, "patches"], env=env, check=True, capture_output=True)  # fetches the tracked branches
        # run from the workspace's parent: `python -m` puts the working directory first on sys.path, so a
        # run from the repository would time the source tree instead of --python's installed package
        if args.tricks:
            price_tricks(args.python, workspace, env, args.rounds)
            return
        records = tmp / "cache" / "classifications"  # upstreaming/classification_cache.DIRECTORY, in the user cache
        fork = next(path for path in sorted((workspace / "forks").iterdir()) if path.is_dir())
        commands = {name: Timed([*assemble, *words], tmp) for name, words in COMMANDS.items()}
        commands["patches --offline, classifying"] = Timed(
            [*assemble, "patches", "--offline"], tmp, before_each=lambda: shutil.rmtree(records, ignore_errors=True))
        commands["git status (one checkout)"] = Timed(["git", "status"], fork)
        commands["python -c pass"] = Timed([args.python, "-c", "pass"], tmp)
        measure(commands, env, args.rounds)
        load = os.getloadavg()[0]
        print(f"{args.python}: start-up over {args.rounds} interleaved rounds; load average {load:.1f} on "
              f"{os.cpu_count()} CPUs")
        print(f"  {'':<32} {'median':>9} {'best':>9} {'CPU':>9}")
        for name, command in commands.items():
            wall = statistics.median(command.walls)
            verdict = ("" if name not in COMMANDS
                       else ("  within budget" if wall < BUDGET_MS else f"  OVER the {BUDGET_MS:.0f} ms budget"))
            print(f"  {name:<32} {wall:6.1f} ms {min(command.walls):6.1f} ms {statistics.median(command.cpus):6.1f} "
                  f"ms{verdict}")
        if args.checkout_ratio:
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / "checkout_noop.py"), "--rounds", str(args.rounds),
                            "--python", args.python], check=True)


if __name__ == "__main__":
    main()
