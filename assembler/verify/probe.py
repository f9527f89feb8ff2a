"""Runs inside a torch venv (``python -I -B probe.py``): load, check and smoke-test a wheel.

Standalone on purpose: the torch venvs hold torch only, not assembler. Its input comes on stdin
(read whole before anything of the wheel runs, then closed): the plan (the directory the wheel
was installed into and, per dependency, its extensions, expected op schemas and smoke call),
the number of an inherited pipe and a per-run nonce. Results go down that pipe as JSON lines,
each behind the nonce, flushed one by one and each step announced before it runs, so when an
extension kills the process the parent still knows which step did it. What the wheel's code
prints, or writes to files it can name, is no result: the parent reads only lines that carry the
nonce, and any other line on the pipe fails the run as tampered with.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import site
import sys
import traceback
from typing import Any, TextIO

WHEEL_PTH = "processing the wheel's .pth files"  # the step in which the wheel's own .pth lines run
IMPORTING_TORCH = "importing torch"  # the last step in which a death is the environment's, not the wheel's


class Recorder:
    def __init__(self, out: TextIO, nonce: str) -> None:
        self.out = out
        self._nonce = nonce

    def emit(self, **event: Any) -> None:
        self.out.write(f"{self._nonce} {json.dumps(event)}\n")
        self.out.flush()

    def check(self, dep: str, kind: str, target: str, status: str, detail: str = "", **extra: Any) -> None:
        self.emit(event="check", dep=dep, kind=kind, target=target, status=status, detail=detail, **extra)


def first_line(error: BaseException) -> str:
    """``Type: first line``, of the root cause when one error wraps another (torch.ops.load_library
    hides the dynamic loader's message, which names the missing symbol, in its __cause__)."""
    while error.__cause__ is not None:
        error = error.__cause__
    text = str(error).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {line}" if line else type(error).__name__


def load_extension(torch: Any, site_dir: str, ext: dict[str, Any]) -> None:
    """A module exporting PyInit_* is imported as Python would; anything else is an op library."""
    if ext["module"]:
        importlib.import_module(ext["module"])
    else:
        torch.ops.load_library(os.path.join(site_dir, ext["path"]))


def registered_ops(torch: Any) -> set[str]:
    """Every operator name the dispatcher knows ("ns::name"): what a load adds is what it registered."""
    try:
        return set(torch._C._dispatch_get_all_op_names())
    except (AttributeError, RuntimeError):
        return set()


def report_registered(rec: Recorder, dep: str, ext: dict[str, Any], ops: list[str]) -> None:
    """The ops an extension's load registered (its STABLE_TORCH_LIBRARY namespace), with or without
    a [verify] section; an extension built to define ops that registered none FAILs."""
    if not ops and not ext.get("defines_ops"):
        return  # no torch library in it (a plain Python module, a helper library)
    namespaces = sorted({op.split("::", 1)[0] for op in ops})
    if ops:
        listing = ", ".join(ops[:8]) + (f", +{len(ops) - 8} more" if len(ops) > 8 else "")
        rec.check(dep, "registered", ext["path"], "PASS", f"{len(ops)} op(s) in {', '.join(namespaces)}: {listing}",
                  ops=ops)
    else:
        rec.check(dep, "registered", ext["path"], "FAIL",
                  "registers no op: it calls STABLE_TORCH_LIBRARY's shim, but loading it added no operator to the "
                  "dispatcher", ops=[])


def check_op(torch: Any, spec: str) -> str:
    """Raises when ``spec`` ("ns::name[.overload](args) -> ret", or just the name) is not
    registered with exactly that schema; returns the registered schema."""
    name, paren, _ = spec.partition("(")
    namespace, sep, op = name.strip().partition("::")
    if not sep:
        raise ValueError(f"{spec!r} has no namespace: write it as ns::name(...) -> ...")
    op, _, overload = op.partition(".")
    try:
        packet = getattr(getattr(torch.ops, namespace), op)
        actual = str(getattr(packet, overload or "default")._schema)
    except (AttributeError, RuntimeError):
        raise LookupError(f"{name.strip()} is not registered") from None
    if paren:
        expected = str(torch._C.parse_schema(spec))
        if " ".join(expected.split()) != " ".join(actual.split()):
            raise ValueError(f"schema mismatch: registered {actual!r}, expected {expected!r}")
    return actual


def run_smoke(smoke: str, dep: str) -> None:
    """``module:function`` is called; anything else is a snippet run with ``torch`` imported.
    Either compares against its own reference (assert) and raises on a mismatch."""
    if ":" in smoke and "\n" not in smoke and " " not in smoke.strip():
        module, _, function = smoke.strip().partition(":")
        target: Any = importlib.import_module(module)
        for part in function.split("."):
            target = getattr(target, part)
        target()
        return
    import torch

    filename = f"<smoke {dep}>"
    exec(compile(smoke, filename, "exec"), {"__name__": "__smoke__", "torch": torch})


def smoke_error(error: BaseException, smoke: str, dep: str) -> str:
    """The exception, plus the snippet line it came from (a bare ``assert`` says nothing alone)."""
    message = first_line(error)
    lines = smoke.splitlines()
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        if frame.filename == f"<smoke {dep}>" and frame.lineno and frame.lineno <= len(lines):
            return f"{message} (smoke line {frame.lineno}: {lines[frame.lineno - 1].strip()})"
    return message


def has_driver(soname: str) -> bool:
    import ctypes

    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def verify_dep(torch: Any, rec: Recorder, site_dir: str, dep: dict[str, Any], has_cuda: bool, gpu: bool) -> None:
    name = dep["name"]
    torch_desc = f"torch {torch.__version__}"
    cuda_needs = sorted({lib for ext in dep["extensions"] for lib in ext["cuda_libs"]})
    if (dep["requires_cuda"] or cuda_needs) and not has_cuda:
        why = ", ".join([*(["requires-cuda"] if dep["requires_cuda"] else []),
                         *(["needs " + ", ".join(cuda_needs)] if cuda_needs else [])])
        rec.check(name, "cuda", "", "SKIPPED", f"CUDA-only ({why}); {torch_desc} is a CPU-only build")
        return
    driver = [lib for lib in cuda_needs if lib.startswith("libcuda.so")]
    if driver and not has_driver(driver[0]):
        rec.check(name, "cuda", "", "SKIPPED", f"needs the CUDA driver ({driver[0]}), which this machine lacks")
        return
    loaded = True
    for ext in dep["extensions"]:
        rec.emit(event="start", dep=name, step=f"loading {ext['path']}")
        before = registered_ops(torch)
        try:
            load_extension(torch, site_dir, ext)
            rec.check(name, "load", ext["path"], "PASS", "import" if ext["module"] else "torch.ops.load_library")
        except BaseException as error:  # an extension can raise anything, SystemExit included
            loaded = False
            rec.check(name, "load", ext["path"], "FAIL", first_line(error))
            continue
        report_registered(rec, name, ext, sorted(registered_ops(torch) - before))
    for spec in dep["ops"]:
        if not loaded:
            rec.check(name, "op", spec, "SKIPPED", "not checked: an extension failed to load")
            continue
        rec.emit(event="start", dep=name, step=f"checking op {spec}")
        try:
            rec.check(name, "op", spec, "PASS", check_op(torch, spec))
        except Exception as error:
            rec.check(name, "op", spec, "FAIL", first_line(error))
    smoke = dep["smoke"]
    if not smoke:
        return
    if not loaded:
        rec.check(name, "smoke", "", "SKIPPED", "not run: an extension failed to load")
    elif dep["requires_cuda"] and not gpu:
        rec.check(name, "smoke", "", "SKIPPED", f"needs a GPU; torch.cuda.is_available() is False ({torch_desc})")
    else:
        rec.emit(event="start", dep=name, step="running the smoke call")
        try:
            run_smoke(smoke, name)
            rec.check(name, "smoke", "", "PASS")
        except BaseException as error:
            rec.check(name, "smoke", "", "FAIL", smoke_error(error, smoke, name))


def read_input() -> dict[str, Any]:
    """The run's input from stdin, which is then closed: nothing the wheel runs can read it again."""
    with os.fdopen(0, "rb", closefd=True) as stdin:
        data: dict[str, Any] = json.loads(stdin.read())
    null = os.open(os.devnull, os.O_RDONLY)
    if null != 0:
        os.dup2(null, 0)
        os.close(null)
    return data


def main() -> int:
    given = read_input()
    plan = given["plan"]
    with os.fdopen(given["fd"], "w") as out:
        rec = Recorder(out, given["nonce"])
        del given
        rec.emit(event="start", dep=None, step=IMPORTING_TORCH)
        import torch

        site_dir = plan["site"]
        has_cuda = torch.version.cuda is not None
        gpu = bool(has_cuda and torch.cuda.is_available())
        # whose exports a load failure is checked against
        torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
        rec.emit(event="env", torch=torch.__version__, cuda=torch.version.cuda, gpu=gpu, python=sys.version.split()[0],
                 torch_lib=torch_lib, sandbox=os.environ.get("ASSEMBLE_PROBE_SANDBOX", ""))
        rec.emit(event="start", dep=None, step=WHEEL_PTH)
        sys.path.insert(0, site_dir)
        site.addsitedir(site_dir)  # .pth files of the wheel, as a real install would process
        for ext in plan["preload"]:  # a restarted probe: what the dead one had loaded, already reported
            rec.emit(event="start", dep=None, step=f"reloading {ext['path']}")
            with contextlib.suppress(BaseException):  # its failure is in the first probe's report
                load_extension(torch, site_dir, ext)
        for dep in plan["deps"]:
            rec.emit(event="dep", dep=dep["name"])
            verify_dep(torch, rec, site_dir, dep, has_cuda, gpu)
            rec.emit(event="done", dep=dep["name"])
        rec.emit(event="end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
