"""The compiler launcher in front of sccache: path-free arguments, and a shard's compile filter.

Run as a script (``python -I launch.py SCCACHE COMPILER ARGS...``), once per compiler process,
so it imports only the standard library. It does two things, each steered by the environment
the build gives it:

**Path-free arguments** (``ASSEMBLE_PATH_ROOTS``: JSON ``[[prefix, anchor], ...]``). sccache
0.16 strips ``SCCACHE_BASEDIRS`` from the preprocessed output, not from the arguments it hashes:
``-ffile-prefix-map=/home/a/ws/...=x`` or ``-DDIR=/home/a/...`` made every key hold the
workspace's path. So every argument that names a path below a root (the workspace, the
assembler cache and the real directories its toolchains link to) is rewritten relative to the
compiler's working directory, which lies inside the workspace at a fixed place
(``.assemble/build/<dep>/...``): the workspace is spelled ``../../..`` and the cache through
the link ``.assemble/roots/cache``. The same sources and flags then make the same arguments from
any workspace path and any ``ASSEMBLE_CACHE``. Every occurrence is rewritten, also inside
``-ffile-prefix-map=OLD=NEW``, so a prefix map still matches the paths gcc sees (the binaries
keep their path-free ``__FILE__``), and depfiles name paths relative to where ninja runs.

**A shard's filter** (``ASSEMBLE_SHARD``: JSON ``[unit, ...]``, set by ``assemble build
--shard k/N``; ``ASSEMBLE_CHECKOUT`` names the checkout). A compile of a translation unit of
the checkout (or of a
generated stub) that is not in ``units`` does not run: its object is left empty. A link of a
shared object does not run either (the shard links nothing). The shard's build tree is thrown
away afterwards, so no empty object is ever linked.

nvcc needs one more step: it hands its sub-tools (cudafe++, cicc), whose arguments sccache hashes
one by one, the input's real absolute path (``--orig_src_path_name``), which no relative
spelling changes. So a CUDA unit is compiled through a one-line stub at a path that is the same
everywhere, ``/tmp/assemble-units/<digest>/unit.cu``, which includes the source by its file name
through an ``-I`` of the source's directory (spelled relatively like every other path); the
digest covers only the path-free spelling of the source, so every workspace writes the same
stub there (atomically), and the bytes nvcc compiles are the source's own. nvcc itself runs by
a full path (its toolkit's alias, below, else its real path), since it adds include directories
relative to where it is called from.

**The toolkit at a path that is the same everywhere.** nvcc names its toolkit in what it hands
its sub-steps: the host compile of the unit gets ``-I<toolkit>/bin/../include`` from
nvcc.profile, and CCCL's ``__FILE__`` puts the toolkit's path into the preprocessed text. So two
caches (or machines) holding the same toolkit at different paths made different keys for every
CUDA unit (issue 28: 8 hits, 1 miss). nvcc therefore runs through a link at a fixed path,
``/tmp/assemble-units/toolkit-<identity>/cuda``, to the toolkit's real root, and every argument
naming that root (nvcc's own, or for another compiler ``CUDA_HOME``, which assemble sets) names
the link instead. The identity covers the toolkit's version records and its components, never
its path (``toolkit_identity``); a toolkit without a record gets no link and runs from its real
path. The link lives in a directory of this user that nobody else may write, in a shared root
that only this user or root owns (``_shared_root``): a link or directory someone else planted
there means the real path, never theirs.

**Header paths as spelled.** GCC replaces a system header's path by its real path when that is
shorter (``-fcanonical-system-headers``, its default), so whether the preprocessed text,
``__FILE__`` and the depfile hold the spelling above or ``/home/me/.cache/...`` would depend on
how long the real path happens to be: a GCC compile gets ``-fno-canonical-system-headers``
(``spelled_headers``).

``ASSEMBLE_UNIT_TIMES``: a file each compile appends ``{"unit": ..., "seconds": ...}`` to,
from which ``plan --matrix --shards`` estimates the next split (``builder.shards``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

ROOTS_ENV = "ASSEMBLE_PATH_ROOTS"
SHARD_ENV = "ASSEMBLE_SHARD"
CHECKOUT_ENV = "ASSEMBLE_CHECKOUT"
TIMES_ENV = "ASSEMBLE_UNIT_TIMES"
SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu")
STUB_PREFIX = "assembler_pyinit_"  # the helper's generated PyInit stubs (AssemblerStableExtension.cmake)
STUB_ROOT = "/tmp/assemble-units"  # the same on every machine: nvcc's sub-tools see it (through_stub, toolkit_alias)
CANONICAL_OFF = "-fno-canonical-system-headers"  # GCC's; see spelled_headers
TOOLKIT_ENV = "CUDA_HOME"  # the toolkit assemble selected, for compilers other than nvcc (CudaToolkit.environment)
# What tells toolkits apart (toolkit_identity): NVIDIA's version record in the root, and the record
# a hermetic toolkit keeps beside it (toolchain.cuda.MARKER: every wheel's version).
TOOLKIT_RECORDS = ("version.json", "../.assemble-toolkit.json")
NO_LAUNCHER = "-"  # a link: the compiler itself, no sccache
NOT_LINKS = ("-c", "-E", "-S", "-M", "-MM", "--version", "-dryrun", "--dryrun")


def relative_spellings(roots: list[tuple[str, str]], cwd: str) -> list[tuple[str, str]]:
    """(absolute prefix, its spelling from ``cwd``), longest prefix first. An anchor below the
    workspace is spelled as the way up from ``cwd`` to the workspace plus the anchor's place in
    it, never shortened, so every path keeps the same shape from the same ``cwd``."""
    spelled = []
    for prefix, anchor in roots:
        spelled.append((prefix.rstrip("/") or "/", os.path.relpath(anchor, cwd)))
    return sorted(spelled, key=lambda pair: -len(pair[0]))


def rewrite(argument: str, spellings: list[tuple[str, str]]) -> str:
    """``argument`` with each absolute path below a root spelled relatively (a prefix matches
    only whole path components). A define keeps its value: a path there may be read from
    somewhere else than the working directory."""
    if argument.startswith(("-D", "-U")):
        return argument
    out, i = [], 0
    while i < len(argument):
        if argument[i] == "/" and (i == 0 or argument[i - 1] in "=,:;\"'" or argument[:i].lstrip("-").isalpha()):
            for prefix, relative in spellings:
                end = i + len(prefix)
                if argument.startswith(prefix, i) and (end == len(argument) or argument[end] in "/=,:;"):
                    out.append(relative)
                    i = end
                    break
            else:
                out.append(argument[i])
                i += 1
            continue
        out.append(argument[i])
        i += 1
    return "".join(out)


def unit_key(path: str, checkout: str) -> str | None:
    """How a shard names a compiled file: its path in the checkout, or a stub's file name;
    None for anything else (a configure probe), which always compiles."""
    full = os.path.realpath(path)
    base = os.path.basename(full)
    if base.startswith(STUB_PREFIX):
        return base
    root = os.path.realpath(checkout)
    if full.startswith(root + os.sep):
        return os.path.relpath(full, root)
    return None


def compiled_sources(arguments: list[str]) -> list[str]:
    return [arg for arg in arguments if arg.endswith(SOURCE_SUFFIXES) and not arg.startswith("-")]


def output_of(arguments: list[str]) -> str | None:
    for index, arg in enumerate(arguments):
        if arg == "-o" and index + 1 < len(arguments):
            return arguments[index + 1]
        if arg.startswith("-o") and len(arg) > 2 and not arg.startswith("-o="):
            return arg[2:]
    return None


def skipped(arguments: list[str], units: set[str], checkout: str) -> bool:
    """Whether a shard leaves this compiler process out (and only touches its output)."""
    output = output_of(arguments)
    if output is None:
        return False
    is_link = not any(arg in NOT_LINKS for arg in arguments)
    if is_link:
        return output.endswith(".so")
    if "-c" not in arguments:
        return False
    keys = [unit_key(source, checkout) for source in compiled_sources(arguments)]
    return any(key is not None and key not in units for key in keys)


def stand_in(compiler: str, arguments: list[str]) -> int:
    """What a shard leaves in place of a compile or link it skips: an empty object (and depfile),
    or for a link an empty shared library, so the backend's packing steps still run. None of it
    is ever used: the shard's build tree is removed and it publishes no artifact."""
    output = output_of(arguments)
    assert output is not None
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    if "-c" not in arguments:
        driver = "c++" if "nvcc" in os.path.basename(compiler) else compiler
        os.execvp(driver, [driver, "-shared", "-x", "c", os.devnull, "-o", output])
    open(output, "wb").close()
    for index, arg in enumerate(arguments[:-1]):
        if arg in ("-MF", "--dependency-output"):
            with open(arguments[index + 1], "w") as depfile:
                depfile.write(f"{output}:\n")
    return 0


def through_stub(compiler: str, arguments: list[str], spellings: list[tuple[str, str]]) -> list[str]:
    """nvcc's ``arguments`` with its one CUDA source under a root replaced by the stub that
    includes it (see the module's docstring); unchanged when that does not apply or the stub
    directory cannot be written."""
    if os.path.basename(compiler) != "nvcc" or "-c" not in arguments:
        return arguments
    sources = [index for index, arg in enumerate(arguments) if arg.endswith(".cu") and not arg.startswith("-")]
    if len(sources) != 1:
        return arguments
    source = os.path.abspath(arguments[sources[0]])
    spelled = rewrite(source, spellings)  # relative to the working directory, which has the same place everywhere
    if spelled == source:  # not below a root: its path is not the workspace's
        return arguments
    import hashlib

    text = (f"// Written by assemble (toolchain/launch.py): {spelled}, compiled from a path that is the same "
            "everywhere.\n"
            f'#include "{os.path.basename(source)}"\n')
    directory = os.path.join(STUB_ROOT, hashlib.sha256(text.encode()).hexdigest()[:20])
    stub = os.path.join(directory, "unit.cu")
    try:
        if not _stub_in_place(directory, stub, text):
            return arguments
    except OSError:
        return arguments
    changed = list(arguments)
    changed[sources[0]] = stub
    return [f"-I{os.path.dirname(source)}", *changed]


def toolkit_identity(root: str) -> str | None:
    """A digest of what tells the toolkit at ``root`` from another one on this machine and names
    nothing of where it lives: its version records and the names in its include/ (its
    components). None when it has no record (then it gets no alias)."""
    import hashlib

    real = os.path.realpath(root)
    records = []
    for name in TOOLKIT_RECORDS:
        try:
            with open(os.path.normpath(os.path.join(real, name)), "rb") as record:
                records.append(record.read(1 << 20))
        except OSError:
            records.append(b"")
    if not any(records):
        return None
    try:
        names = sorted(os.listdir(os.path.join(real, "include")))
    except OSError:
        names = []
    return hashlib.sha256(b"\0".join([*records, "\n".join(names).encode()])).hexdigest()[:20]


def toolkit_alias(root: str) -> str | None:
    """``STUB_ROOT/toolkit-<identity>/cuda``, a link to the toolkit at ``root`` at a path that is
    the same on every machine (see the module's docstring); None when the toolkit has no
    identity or the place is not safely this user's."""
    identity = toolkit_identity(root)
    if identity is None:
        return None
    directory = os.path.join(STUB_ROOT, f"toolkit-{identity}")
    alias = os.path.join(directory, "cuda")
    try:
        return alias if _link_in_place(directory, alias, os.path.realpath(root)) else None
    except OSError:
        return None


def with_toolkit(spellings: list[tuple[str, str]], root: str, alias: str) -> list[tuple[str, str]]:
    """``spellings`` with the toolkit's root (as given and real) spelled as its alias, longest
    prefix first like the rest."""
    extra = [(place.rstrip("/"), alias) for place in dict.fromkeys((os.path.abspath(root), os.path.realpath(root)))]
    return sorted([*spellings, *extra], key=lambda pair: -len(pair[0]))


def spelled_headers(compiler: str, arguments: list[str]) -> list[str]:
    """``arguments`` with ``-fno-canonical-system-headers`` for a GCC host compiler (through
    ``-Xcompiler`` for nvcc's). GCC replaces a system header's path by its real path when that
    is shorter, so whether the preprocessed text, ``__FILE__`` and the depfile read
    ``../../../roots/cache/...`` (or the toolkit's alias) or ``/home/me/.cache/...`` would depend
    on how long the real path is on this machine. Another compiler is left as it is."""
    import re
    import shutil

    def gcc(name: str) -> bool:
        real = os.path.basename(os.path.realpath(shutil.which(name) or name))
        return re.search(r"(^|-)(gcc|g\+\+|c\+\+|cc)(-[0-9.]+)?$", real) is not None

    if os.path.basename(compiler) != "nvcc":
        return [*arguments, CANONICAL_OFF] if gcc(compiler) else arguments
    host = "gcc"  # nvcc's default host compiler on Linux
    for index, arg in enumerate(arguments[:-1]):
        if arg in ("-ccbin", "--compiler-bindir"):
            host = arguments[index + 1]
    for arg in arguments:
        if arg.startswith(("-ccbin=", "--compiler-bindir=")):
            host = arg.partition("=")[2]
    if os.path.isdir(host):
        host = os.path.join(host, "gcc")
    return [*arguments, f"-Xcompiler={CANONICAL_OFF}"] if gcc(host) else arguments


def names_toolkit(arguments: list[str], root: str) -> bool:
    """Whether any argument names the toolkit's root (as given or real): only then does a host
    compile need its alias."""
    places = {os.path.abspath(root).rstrip("/"), os.path.realpath(root)}
    return any(place in argument for argument in arguments for place in places)


def _link_in_place(directory: str, link: str, target: str) -> bool:
    """``link`` -> ``target`` in ``directory`` (made private to this user), replaced atomically
    when it leads elsewhere: a toolkit of the same identity at another path on this machine
    (another cache) is the same files, so the link follows the build that runs now."""
    if not _shared_root():
        return False
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o755)
    if not _private(directory, is_dir=True):
        return False
    with contextlib.suppress(OSError):
        if os.readlink(link) == target:
            return True
    temporary = f"{link}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)
    os.symlink(target, temporary)
    os.replace(temporary, link)
    return True


def _shared_root() -> bool:
    """Make STUB_ROOT when it is missing (sticky and writable by all, like /tmp); whether it is a
    directory (never a link) that no other user can change entries of: this user's or root's,
    and sticky where others may write. The owner of a shared root (or anyone, in one that is not
    sticky) could rename our private directories away and plant theirs between the check and
    the compile."""
    import stat

    if not os.path.lexists(STUB_ROOT):
        with contextlib.suppress(FileExistsError):
            os.makedirs(STUB_ROOT, mode=0o777)
            with contextlib.suppress(OSError):
                os.chmod(STUB_ROOT, 0o1777)  # shared by every user, like /tmp
    info = os.lstat(STUB_ROOT)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid not in (os.getuid(), 0):
        return False
    return not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or bool(info.st_mode & stat.S_ISVTX)


def _private(path: str, is_dir: bool) -> bool:
    """Whether ``path`` itself (never a link) is a directory or regular file of this user that
    nobody else may write: what another user of the machine cannot change under us."""
    import stat

    info = os.lstat(path)
    kind = stat.S_ISDIR(info.st_mode) if is_dir else stat.S_ISREG(info.st_mode)
    return kind and info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _stub_in_place(directory: str, stub: str, text: str) -> bool:
    """Write ``stub`` (atomically) unless it already holds ``text``. The shared root is sticky
    like /tmp (and only this user's or root's: ``_shared_root``); the stub's own directory and
    file must be this user's and writable by nobody else, since a quoted include looks in the
    stub's directory first: a directory another user made (or a link) means no stub, and the
    unit is compiled from its own path (cached by path).
    """
    if not _shared_root():
        return False
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o755)
    if not _private(directory, is_dir=True):
        return False
    if os.path.lexists(stub):
        if not _private(stub, is_dir=False):
            return False
        with open(stub) as existing:
            if existing.read() == text:
                return True
    temporary = f"{stub}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as written:
        written.write(text)
    os.replace(temporary, stub)
    return True


def path_free(compiler: str, arguments: list[str], roots: list[tuple[str, str]], cwd: str,
              cuda_home: str | None) -> tuple[str, list[str]]:
    """The compile ``compiler arguments``, run from ``cwd``, as it is handed to sccache: every
    path below a root spelled from ``cwd``, a CUDA unit through its stub, the toolkit (nvcc's
    own, else ``cuda_home``) through its alias, header paths kept as spelled (the module's
    docstring says why each)."""
    spellings = relative_spellings(roots, cwd)
    nvcc = os.path.basename(compiler) == "nvcc"
    if nvcc and os.sep not in compiler:
        import shutil

        compiler = shutil.which(compiler) or compiler
    root = os.path.dirname(os.path.dirname(os.path.abspath(compiler))) if nvcc else cuda_home
    alias = toolkit_alias(root) if root and (nvcc or names_toolkit(arguments, root)) else None
    if root and alias:
        spellings = with_toolkit(spellings, root, alias)
    arguments = [rewrite(arg, spellings) for arg in through_stub(compiler, arguments, spellings)]
    arguments = spelled_headers(compiler, arguments)
    if nvcc:  # by a full path: nvcc finds its toolkit from where it is called
        compiler = os.path.join(alias, "bin", "nvcc") if alias else os.path.realpath(compiler)
    return compiler, arguments


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print("usage: launch.py SCCACHE|- COMPILER ARGS...", file=sys.stderr)
        return 2
    launcher, compiler, arguments = argv[1], argv[2], argv[3:]
    checkout = os.environ.get(CHECKOUT_ENV, "")
    shard_text = os.environ.get(SHARD_ENV)
    if shard_text and skipped(arguments, set(json.loads(shard_text)), checkout):
        return stand_in(compiler, arguments)
    roots_text = os.environ.get(ROOTS_ENV)
    if roots_text and "-c" in arguments:  # compiles only: a link's arguments are not a cache key
        roots = [(str(prefix), str(anchor)) for prefix, anchor in json.loads(roots_text)]
        compiler, arguments = path_free(compiler, arguments, roots, os.getcwd(), os.environ.get(TOOLKIT_ENV))
    command = [compiler, *arguments] if launcher == NO_LAUNCHER else [launcher, compiler, *arguments]
    times = os.environ.get(TIMES_ENV)
    if not times or "-c" not in arguments:
        os.execv(command[0], command)
    started = time.monotonic()
    import subprocess

    status = subprocess.call(command)
    if status == 0:
        record = [{"unit": key, "seconds": round(time.monotonic() - started, 3)}
                  for key in (unit_key(source, checkout) for source in compiled_sources(argv[3:])) if key is not None]
        if record:
            with open(times, "a") as out:  # one short append per compile: whole lines even side by side
                out.write("".join(json.dumps(item) + "\n" for item in record))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
