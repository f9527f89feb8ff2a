"""Audit PATHs: every ELF shared object read in place, classified for torch and CPython ABI.

Objects are independent, so large wheels are spread over threads: inflating (zlib releases the
GIL) dominates, and the biggest members go first so the longest one does not finish last.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from assembler.audit.cpython import classify_cpython, describe_source, format_py, is_entry_point, limited_api
from assembler.audit.elf import read_dynamic
from assembler.audit.gate import NOWHERE, PYTHON_FULL, PYTHON_LIMITED, PYTHON_NONE, CheckKind, findings
from assembler.audit.loadscope import Bundled, Library, judge, library_of
from assembler.audit.model import AuditReport, ElfReport
from assembler.audit.torch_abi import classify_torch
from assembler.audit.torchdata import DEFAULT_TABLE, TorchTable, load_table
from assembler.audit.torchlibs import TorchLibraries, resolver
from assembler.audit.wheelsource import FileJob, Job, PyVersion, open_job, open_target
from assembler.errors import InputError
from assembler.system import available_cpus

_PARALLEL_FROM = 16 << 20  # compressed bytes of deflated members worth a thread pool

CHECKS = tuple(kind.value for kind in CheckKind)


@dataclass(frozen=True)
class _Unjudged:
    """An object whose load scope was not judged for want of a library: what judging it again
    against the libraries of its own wheel needs."""

    strong: tuple[str, ...]
    needed: tuple[str, ...]
    runpath: tuple[str, ...]


def audit_object(job: Job, floor: PyVersion | None, table: TorchTable, libraries: TorchLibraries | None = None,
                 library_dirs: tuple[Path, ...] = (), unjudged: dict[str, _Unjudged] | None = None) -> ElfReport:
    """Read one shared object's dynamic section and classify it; with ``libraries``, also which
    of its torch symbols its DT_NEEDED tree cannot resolve; and which of its other imports no
    library of that tree defines, where every one is known here (``library_dirs`` first). An
    object left unjudged is noted in ``unjudged`` for :func:`_judge_in_target`."""
    source = open_job(job)
    try:
        info = read_dynamic(source, defined_prefixes=(b"Py", b"_Py"))
    except OSError as error:
        raise InputError(f"{source.name}: {error.strerror or error}") from None
    finally:
        source.close()
    undefined = [s.name for s in info.symbols if not s.defined]
    strong = [s.name for s in info.symbols if not s.defined and not s.weak]
    unresolved = libraries.unresolved(strong, info.needed) if libraries else {}
    scope = judge(strong, info.needed, libraries, library_dirs, origin=posixpath.dirname(job.name),
                  runpath=info.runpath)
    unresolved |= dict.fromkeys(scope.missing, NOWHERE)
    if scope.unjudged is not None and unjudged is not None:
        unjudged[job.name] = _Unjudged(tuple(strong), info.needed, info.runpath)
    extension = any(s.defined and not s.local and is_entry_point(s.name) for s in info.symbols)
    torch = classify_torch(undefined, table)
    python = classify_cpython(info.symbols, floor)
    api = (PYTHON_NONE if not (python.violations or python.min_python)
           else PYTHON_LIMITED if is_abi3_object(job.name, floor) else PYTHON_FULL)
    if api == PYTHON_FULL:  # the limited-API floor means nothing for a full-API build: report none
        python = replace(python, min_python=None, min_python_symbols=(), newer_than_tag={})
    return ElfReport(
        path=job.name,
        kind="extension" if extension else "library",
        torch_abi=torch.verdict,
        stable_shim=torch.stable_shim,
        unstable=len(torch.unstable_symbols),
        unstable_symbols=torch.unstable_symbols,
        min_torch=torch.min_torch,
        min_torch_symbols=torch.min_torch_symbols,
        unknown_shim_symbols=torch.unknown_shim_symbols,
        abi3_compliant=not python.violations,
        abi3_violations=python.violations,
        min_python=python.min_python,
        min_python_symbols=python.min_python_symbols,
        newer_than_tag=python.newer_than_tag,
        needed=info.needed,
        python_api=api,
        unresolved=unresolved,
        unjudged_imports=scope.unjudged,
    )


def torch_neighbours(torch_lib: Path | None) -> tuple[Path, ...]:
    """Where a pip-installed torch's own dependencies live (``site-packages/nvidia/*/lib``, found
    through torch's RPATH): the libraries of its tree below torch's."""
    if torch_lib is None:
        return ()
    site = torch_lib.parent.parent
    return (torch_lib, *sorted(p for p in site.glob("nvidia/**/lib") if p.is_dir()))


def is_abi3_object(name: str, floor: PyVersion | None) -> bool:
    """Built for the limited API: ``.abi3.`` in its name, or inside an abi3-tagged wheel unless its
    name carries one CPython's tag (``.cpython-311-x86_64-linux-gnu.so``)."""
    base = name.rsplit("/", 1)[-1]
    return ".abi3." in base or (floor is not None and re.search(r"\.cpython-\d", base) is None)


def _cost(job: Job) -> int:
    return 0 if isinstance(job, FileJob) or job.compress_type == 0 else job.compress_size


def _audit_or_report(job: Job, floor: PyVersion | None, table: TorchTable, libraries: TorchLibraries | None,
                     library_dirs: tuple[Path, ...] = (), unjudged: dict[str, _Unjudged] | None = None) -> ElfReport:
    """audit_object, with an object that cannot be read reported INCOMPLETE (its reason kept)."""
    try:
        return audit_object(job, floor, table, libraries, library_dirs, unjudged)
    except InputError as error:
        return ElfReport.unreadable(job.name, error.message)


def _judge_in_target(report: ElfReport, facts: _Unjudged, jobs: Sequence[Job], name: str,
                     libraries: TorchLibraries | None,
                     library_dirs: tuple[Path, ...]) -> ElfReport:
    """``report`` judged again with the libraries shipped beside it (loadscope.Bundled): a
    wheel's own ``libdgl.so``, reached through ``$ORIGIN``, is part of its load scope."""
    by_name = {job.name: job for job in jobs}

    @functools.cache
    def read(path: str) -> Library | None:
        return library_of(open_job(by_name[path]))

    bundled = Bundled(frozenset(by_name), read)
    scope = judge(facts.strong, facts.needed, libraries, library_dirs, origin=posixpath.dirname(name),
                  runpath=facts.runpath,
                  bundled=bundled)
    return replace(report, unresolved={**report.unresolved, **dict.fromkeys(scope.missing, NOWHERE)},
                   unjudged_imports=scope.unjudged)


def unreadable(reports: Iterable[AuditReport]) -> list[str]:
    """The reasons objects of ``reports`` could not be read, one line each."""
    return [f"{e.error}" for report in reports for e in report.extensions if e.error is not None]


def audit_paths(
    paths: Iterable[Path], table_path: Path = DEFAULT_TABLE, workers: int | None = None, torch_lib: Path | None = None,
    keep_going: bool = False, library_dirs: Iterable[Path] = (),
) -> list[AuditReport]:
    """One report per path; InputError (exit 2) for a missing path, a bad wheel or a broken ELF.
    With ``keep_going``, an object that cannot be read (a limit, corruption) is reported
    INCOMPLETE with its reason and the others are still audited (see :func:`unreadable`).

    Torch symbols are resolved against ``torch_lib`` (a torch's ``torch/lib``) over the shipped
    library table, or against the shipped table alone (:mod:`assembler.audit.torchlibs`); other
    libraries are looked for in ``library_dirs`` (a CUDA toolkit's ``lib``), then where the
    dynamic linker looks (:mod:`assembler.audit.loadscope`)."""
    table = load_table(table_path)
    dirs = (*library_dirs, *torch_neighbours(torch_lib))
    libraries = resolver(torch_lib)
    audit = _audit_or_report if keep_going else audit_object
    targets = [open_target(Path(p)) for p in paths]
    work = [(t, job) for t in targets for job in t.jobs]
    floors = {t.path: t.abi3_floor for t in targets}
    if workers is None:
        workers = available_cpus() if sum(_cost(j) for _, j in work) >= _PARALLEL_FROM else 1
    order = sorted(range(len(work)), key=lambda i: -_cost(work[i][1]))
    results: dict[int, ElfReport] = {}
    unjudged: dict[str, _Unjudged] = {}
    if workers > 1 and len(work) > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            pool.submit(limited_api)  # import abi3info while the first members inflate
            pool.submit(describe_source)
            futures = {i: pool.submit(audit, work[i][1], floors[work[i][0].path], table, libraries, dirs, unjudged)
                       for i in order}
            try:
                for i, future in futures.items():
                    results[i] = future.result()
            except BaseException:
                pool.shutdown(cancel_futures=True)  # one broken object fails the run: stop the rest
                raise
    else:
        for i in order:
            results[i] = audit(work[i][1], floors[work[i][0].path], table, libraries, dirs, unjudged)
    for i, (target, job) in enumerate(work):
        if job.name in unjudged and len(target.jobs) > 1:
            results[i] = _judge_in_target(results[i], unjudged[job.name], target.jobs, job.name, libraries, dirs)
    sources = {"torch": table.describe(), "cpython": describe_source()}
    if libraries is not None:
        sources["torch_libraries"] = libraries.describe()
    reports = []
    for target in targets:
        floor = target.abi3_floor
        reports.append(
            AuditReport(
                path=target.path,
                kind=target.kind,
                tags=target.tags,
                abi3_floor=format_py(floor) if floor else None,
                extensions=tuple(results[i] for i, (t, _) in enumerate(work) if t is target),
                sources=sources,
                requires_torch=target.requires_torch,
                requires_python=target.requires_python,
                not_elf=target.not_elf,
                unsafe_names=target.unsafe_names,
            )
        )
    return reports


def check(report: AuditReport, what: str) -> list[str]:
    """Gate findings for ``what`` (torch | abi3 | all), one line each; empty means it passes."""
    try:
        kind = CheckKind(what)
    except ValueError:
        raise InputError(f"unknown audit check {what!r}", hint=f"use one of: {', '.join(CHECKS)}") from None
    return [finding.line for finding in findings(report, kind)]
