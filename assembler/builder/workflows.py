"""The CI fan-out of a release as workflow files (`assemble ci github|buildkite`): plan one job
per dependency (`plan --matrix`), build each (`build --only DEP --artifacts out/`), then merge,
audit and verify the one wheel. Text templates, so no YAML library is needed to write them; the
tests read them back and validate them against the GitHub Actions and Buildkite schemas.

GitHub Actions expands the plan's `strategy.matrix` itself. Buildkite has no matrix from a
job's output, so its pipeline is dynamic: a first step runs the plan and uploads the build
steps that `assemble ci buildkite --from-matrix` prints for it (`buildkite-agent pipeline
upload`), as vLLM's CI generates its own.

With ``--shards N`` (`github_sharded`, `buildkite(cuda, shards)`) the plan is `plan --matrix
--shards N` and its jobs come before each final build: GitHub runs the ``shards`` matrix, then
the ``final`` matrix (which ``needs:`` the shard job), then the merge; Buildkite uploads the
pipeline `plan --matrix --shards N --buildkite` prints (each final step ``depends_on`` its own
shards). The shard and final jobs must share the compiler cache ([cache] remote, docs/ci.md).

Every job installs assembler from where the one writing the workflow has it (`Install`,
`assembler_requirement`): this repository's own path when assembler is part of it (``.`` for a
clone of assembler itself), the VCS URL and commit or the archive URL pip recorded (PEP 610
``direct_url.json``), the version from the index it came from, or what ``--assembler-requirement``
says. assembler is not on PyPI, so ``pip install assembler`` would install nothing that exists."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, NamedTuple

SHELL_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/")
PYTHON = "3.12"  # the runners' Python for assembler (setup-python on GitHub; a venv of python3 on Buildkite)
BUILDKITE_VENV = ".venv-ci"  # per step, in the agent's checkout: a system Python may refuse pip (PEP 668)
OPTION = "--assembler-requirement"


class Install(NamedTuple):
    """What a CI job installs assembler from, and how that was decided (the workflow says so)."""

    requirement: str  # a path relative to the repository root (".", "./tools/assembler"), or a PEP 508 requirement
    origin: str

    @property
    def pip(self) -> str:
        return f"pip install {shlex.quote(self.requirement)}"

    def with_extra(self, extra: str) -> Install:
        """The same source with ``extra`` (``s3`` for an s3:// artifact store: boto3)."""
        path = _PATH_RE.match(self.requirement)
        if _is_path(self.requirement) and path is not None:
            extras = sorted({*filter(None, (path["extras"] or "[]")[1:-1].split(",")), extra})
            return self._replace(requirement=f"{path['path']}[{','.join(extras)}]")
        from packaging.requirements import Requirement

        requirement = Requirement(self.requirement)
        requirement.extras.add(extra)
        return self._replace(requirement=str(requirement))


_URL_SCHEME_RE = re.compile(r"^((git|hg|svn|bzr)\+(https|http|ssh|git|file)|https|http|file)$")  # what pip fetches
_PATH_RE = re.compile(r"^(?P<path>.+?)(?P<extras>\[[A-Za-z0-9_.,-]*\])?$")


def _is_path(text: str) -> bool:
    """A local path (what pip installs from a directory or an archive), not a requirement."""
    if "://" in text or "@" in text:
        return False
    return text.startswith((".", "~")) or "/" in text or re.search(r"\.(whl|tar\.gz|zip)(\[|$)", text) is not None


def _is_assembler(path: Path) -> bool:
    """Whether ``path`` is something pip installs assembler from: its project directory or a wheel or sdist of it."""
    if path.is_file():
        return re.match(r"^assembler-\d", path.name) is not None and path.name.endswith((".whl", ".tar.gz", ".zip"))
    import tomllib

    try:
        project = tomllib.loads((path / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
    except (OSError, ValueError):
        return False
    return isinstance(project, dict) and project.get("name") == "assembler"


def _local(path: Path, repository: Path, origin: str, extras: str = "") -> Install:
    """assembler at ``path`` on this machine: installable by a runner only from inside the repository it checks out."""
    from assembler.errors import InputError

    path, repository = path.resolve(), repository.resolve()
    if not path.is_relative_to(repository):
        raise InputError(f"assembler comes from {path}, outside the repository {repository}: "
                         "a CI runner has no copy of it",
                         hint=f"pass {OPTION} with what a runner can install, e.g. "
                              "'assembler @ git+https://HOST/OWNER/assembler@COMMIT', or keep assembler in the "
                              "repository (a submodule) and pass its path")
    relative = path.relative_to(repository).as_posix()
    where = "this repository" if relative == "." else f"{relative} in this repository"
    return Install(("." if relative == "." else f"./{relative}") + extras, f"{where} ({origin})")


def _from_direct_url(record: dict[str, Any], version: str, repository: Path) -> Install:
    """What pip recorded about where it installed assembler from (PEP 610 direct_url.json)."""
    from urllib.parse import unquote, urlsplit

    url = str(record.get("url", ""))
    local = Path(unquote(urlsplit(url).path)) if url.startswith("file://") else None
    if "vcs_info" in record and local is None:
        vcs = record["vcs_info"]
        commit = vcs["commit_id"]
        return Install(f"assembler @ {vcs.get('vcs', 'git')}+{url}@{commit}", f"{url} at {commit[:12]}")
    if "archive_info" in record and local is None:
        sha256 = record["archive_info"].get("hashes", {}).get("sha256")
        return Install(f"assembler @ {url}" + (f"#sha256={sha256}" if sha256 else ""), url)
    if local is not None:
        return _local(local, repository, f"where this assemble {version} was installed from")
    raise ValueError(f"a direct_url.json without vcs_info, archive_info or a file URL: {url!r}")


def assembler_requirement(given: str | None, base: Path, repository: Path,
                          distribution: metadata.Distribution | None = None) -> Install:
    """What the workflow's jobs install: ``given`` (``--assembler-requirement``; a path is read
    against ``base`` and must lie in ``repository``, the root the runners check out), else where
    this assembler came from (``distribution``, by default the installed one's record). InputError
    when that is nothing a runner can install."""
    from assembler.errors import InputError

    if given is not None:
        if any(ord(char) < 0x20 or ord(char) == 0x7F for char in given) or not given.strip():
            raise InputError(f"{OPTION} {given[:80]!r} is not a requirement",
                             hint="pass one line, e.g. . or 'assembler @ URL'")
        if _is_path(given):
            match = _PATH_RE.match(given)
            assert match is not None
            path = (base / Path(match["path"]).expanduser()).resolve()
            if not _is_assembler(path):
                raise InputError(f"{OPTION} {given}: {path} is neither assembler's project directory nor a wheel of it",
                                 hint="pass the directory holding assembler's pyproject.toml, or an assembler-*.whl")
            return _local(path, repository, f"{OPTION} {given}", match["extras"] or "")
        from packaging.requirements import InvalidRequirement, Requirement
        from packaging.utils import canonicalize_name

        try:
            requirement = Requirement(given)
        except InvalidRequirement as error:
            raise InputError(f"{OPTION} {given[:80]!r} is not a requirement: {error}",
                             hint="pass e.g. 'assembler @ git+https://HOST/OWNER/assembler@COMMIT' or a path") from None
        if canonicalize_name(requirement.name) != "assembler":
            raise InputError(f"{OPTION} {given[:80]!r} names {requirement.name}, not assembler",
                             hint="pass a requirement of assembler itself")
        if requirement.url is not None:
            from urllib.parse import unquote, urlsplit

            scheme = urlsplit(requirement.url).scheme if "://" in requirement.url else ""
            if not _URL_SCHEME_RE.match(scheme):
                raise InputError(f"{OPTION} {given[:80]!r} is not a requirement pip installs: "
                                 f"{requirement.url!r} is no URL it fetches",
                                 hint="pass e.g. 'assembler @ git+https://HOST/OWNER/assembler@COMMIT'")
            if scheme.endswith("file"):  # this machine's path: a runner has it only inside the repository
                path = Path(unquote(urlsplit(requirement.url).path.split("@")[0]))
                return _local(path, repository, f"{OPTION} {given}", f"[{','.join(sorted(requirement.extras))}]"
                              if requirement.extras else "")
        return Install(given, f"{OPTION} {given}")
    if distribution is None:
        source = Path(__file__).resolve().parents[2]
        if _is_assembler(source):  # this assemble runs from a source tree: a clone, an editable install
            return _local(source, repository, "the source tree this assemble runs from")
        try:
            distribution = metadata.distribution("assembler")
        except metadata.PackageNotFoundError:
            raise InputError("where assembler was installed from is not recorded",
                             hint=f"pass {OPTION} with what a CI runner can install") from None
    text = distribution.read_text("direct_url.json")
    if text is None:  # from an index: the same version from the same index (the runners need its configuration)
        return Install(f"assembler=={distribution.version}", "the package index this assemble was installed from")
    try:
        return _from_direct_url(json.loads(text), distribution.version, repository)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise InputError(f"where assembler was installed from is not readable ({error})",
                         hint=f"pass {OPTION} with what a CI runner can install") from None


def _quoted(value: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is YAML's)."""
    return json.dumps(value)


def _setup(install: Install) -> str:
    """The first steps of every GitHub job: the repository, a Python that pip may install into, assembler."""
    return f"""      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: {_quoted(PYTHON)}
      - run: {_quoted(install.pip)}
"""


def _header(install: Install) -> str:
    origin = re.sub(r"[\x00-\x1f\x7f]", "?", install.origin)  # a comment line stays one line
    return f"# assembler is installed from {origin}; another source: `assemble ci {OPTION} REQ`\n"


def _on(profile: str | None) -> str:
    """The option every plan and build of a workflow on a build profile carries."""
    return f" --profile {profile}" if profile else ""


def _trigger(profile: str | None) -> str:
    """A release workflow runs on a version tag (the full build); one on a build profile is a
    pull request's check (its wheel is labelled +cuXY.PROFILE, never a release)."""
    if profile:
        return f"""name: pr-{profile}
"on":
  pull_request: {{}}
  workflow_dispatch: {{}}
"""
    return """name: release
"on":
  push:
    tags: ["v*"]
  workflow_dispatch: {}
"""


def _what(profile: str | None) -> str:
    return f"a pull request's build on profile {profile}, never a release" if profile else "the release fan-out"


def _artifact_steps(cuda: str, install: Install, profile: str | None = None) -> str:
    """The steps of a job that builds ``matrix.dep`` into out/ and uploads it as its artifact."""
    build = (f"assemble build --cuda {cuda}{_on(profile)} --only ${{{{ matrix.dep }}}} --artifacts out/ --json > "
             "build.json")
    return f"""    steps:
{_setup(install)}      - run: {_quoted(build)}
      - uses: actions/upload-artifact@v4
        with:
          name: artifact-${{{{ matrix.dep }}}}
          path: out/
"""


def _merge_job(cuda: str, install: Install, needs: str) -> str:
    """The last job of both workflows: merge every artifact, audit and verify the one wheel."""
    return f"""  merge:
    needs: {needs}
    runs-on: ubuntu-24.04
    steps:
{_setup(install)}      - uses: actions/download-artifact@v4
        with:
          pattern: artifact-*
          path: artifacts/
      - run: {_quoted(f"assemble merge --cuda {cuda} artifacts/*/ --output dist/ --json > merge.json")}
      - run: "assemble audit --check all dist/*.whl"
      - run: "assemble verify dist/*.whl"
      - uses: actions/upload-artifact@v4
        with:
          name: wheel
          path: dist/
"""


def github(cuda: str, install: Install, profile: str | None = None) -> str:
    """A GitHub Actions workflow: plan -> one build job per dependency -> merge, audit, verify;
    on ``profile``, a pull request's workflow building that reduced configuration.
    ``"on"`` is quoted: YAML 1.1 readers (PyYAML) take a bare ``on`` for true."""
    matrix_step = (f"echo \"matrix=$(assemble plan --matrix --cuda {cuda}{_on(profile)} --json | jq -c .)\" >> "
                   "\"$GITHUB_OUTPUT\"")
    return f"""# generated by `assemble ci github --cuda {cuda}{_on(profile)}`: {_what(profile)} (docs/ci.md)
{_header(install)}{_trigger(profile)}jobs:
  plan:
    runs-on: ubuntu-24.04
    outputs:
      matrix: ${{{{ steps.plan.outputs.matrix }}}}
    steps:
{_setup(install)}      - id: plan
        run: {_quoted(matrix_step)}
  build:
    needs: plan
    runs-on: ubuntu-24.04
    strategy:
      fail-fast: false
      matrix: ${{{{ fromJSON(needs.plan.outputs.matrix) }}}}
{_artifact_steps(cuda, install, profile)}{_merge_job(cuda, install, "build")}"""


def github_sharded(cuda: str, shards: int, install: Install, profile: str | None = None) -> str:
    """A GitHub Actions workflow with each dependency's compile jobs split over up to ``shards``
    runners: plan -> shard jobs (``build --shard K/N``, filling the shared compiler cache) ->
    one final build per dependency (every compile a hit; it links and uploads the artifact) ->
    merge, audit, verify. A matrix is one job, so the final jobs wait for every shard job; an
    empty matrix is an error, so the shard job is skipped when the plan split nothing."""
    plan_command = f"assemble plan --matrix --shards {shards} --cuda {cuda}{_on(profile)} --json | jq -c ."
    plan_step = f"echo \"plan=$({plan_command})\" >> \"$GITHUB_OUTPUT\""
    plan = "fromJSON(needs.plan.outputs.plan)"
    dep, part = "${{ matrix.dep }}", "${{ matrix.shard }}"
    shard = f"assemble build --cuda {cuda}{_on(profile)} --only {dep} --shard {part} --json > shard.json"
    return f"""# generated by `assemble ci github --cuda {cuda} --shards {shards}{_on(profile)}`: {_what(profile)}, \
sharded (docs/ci.md)
# the shard and final jobs must share the compiler cache: [cache] remote in deps.toml
{_header(install)}{_trigger(profile)}jobs:
  plan:
    runs-on: ubuntu-24.04
    outputs:
      plan: ${{{{ steps.plan.outputs.plan }}}}
    steps:
{_setup(install)}      - id: plan
        run: {_quoted(plan_step)}
  shard:
    needs: plan
    if: ${{{{ {plan}.shard_count > 0 }}}}
    runs-on: ubuntu-24.04
    strategy:
      fail-fast: false
      matrix: ${{{{ {plan}.shards }}}}
    steps:
{_setup(install)}      - run: {_quoted(shard)}
  final:
    needs: [plan, shard]
    if: ${{{{ !failure() && !cancelled() }}}}
    runs-on: ubuntu-24.04
    strategy:
      fail-fast: false
      matrix: ${{{{ {plan}.final }}}}
{_artifact_steps(cuda, install, profile)}{_merge_job(cuda, install, "final")}"""


def buildkite_install(install: Install) -> str:
    """What each Buildkite step runs before its own command: a venv of the agent's python3 with assembler in it."""
    return f"python3 -m venv {BUILDKITE_VENV} && . {BUILDKITE_VENV}/bin/activate && {install.pip}"


def buildkite(cuda: str, install: Install, shards: int = 0, profile: str | None = None) -> str:
    """The Buildkite pipeline to commit: one step that plans and uploads the build steps (with
    ``shards``: the shard steps, each final step after its own shards, then the merge), each
    with assembler's install before it; every plan and build on ``profile`` when given (a pull
    request's pipeline)."""
    option = f"{OPTION} {shlex.quote(install.requirement)}"
    on = _on(profile)
    if shards:
        upload = (f"{buildkite_install(install)} && assemble plan --matrix --shards {shards} --cuda {cuda}{on} "
                  f"--buildkite > pipeline.json && assemble ci buildkite {option} --from-pipeline pipeline.json "
                  "| buildkite-agent pipeline upload")
        return f"""# generated by `assemble ci buildkite --cuda {cuda} --shards {shards}{on}`: {_what(profile)}, \
sharded (docs/ci.md)
# the shard and final steps must share the compiler cache ([cache] remote), the final steps and the merge \
the artifact store
{_header(install)}steps:
  - label: "plan"
    key: "plan"
    command: {_quoted(upload)}
"""
    upload = (f"{buildkite_install(install)} && assemble plan --matrix --cuda {cuda}{on} --json > matrix.json && "
              f"assemble ci buildkite --cuda {cuda}{on} {option} --from-matrix matrix.json "
              "| buildkite-agent pipeline upload")
    return f"""# generated by `assemble ci buildkite --cuda {cuda}{on}`: {_what(profile)} (docs/ci.md)
{_header(install)}steps:
  - label: "plan"
    key: "plan"
    command: {_quoted(upload)}
"""


def buildkite_steps(cuda: str, deps: Sequence[str], install: Install, profile: str | None = None) -> str:
    """The steps uploaded by the plan step: one build per dependency of the matrix (most
    expensive first, as planned; on ``profile`` when given), a wait, then merge, audit and verify."""
    for dep in deps:
        if not dep or not set(dep) <= SHELL_SAFE:  # names come from deps.toml (validated), but they reach a shell
            raise ValueError(f"{dep!r} is not a dependency name")
    setup = buildkite_install(install)
    lines = [f"# generated by `assemble ci buildkite --cuda {cuda}{_on(profile)} --from-matrix`", "steps:"]
    for dep in deps:
        command = (f"{setup} && assemble build --cuda {cuda}{_on(profile)} --only {dep} --artifacts out/ --json > "
                   f"build-{dep}.json && buildkite-agent artifact upload 'out/{dep}/**/*'")
        lines += [f"  - label: {_quoted(f'build {dep}')}", f"    key: {_quoted(f'build-{dep}')}",
                  f"    command: {_quoted(command)}"]
    merge = (f"{setup} && buildkite-agent artifact download 'out/**/*' . && "
             f"assemble merge --cuda {cuda} out/ --output dist/ --json > merge.json && "
             "assemble audit --check all dist/*.whl && assemble verify dist/*.whl && "
             "buildkite-agent artifact upload 'dist/*.whl'")
    lines += ["  - wait", '  - label: "merge, audit, verify"', f"    command: {_quoted(merge)}", ""]
    return "\n".join(lines)


def with_install(pipeline: dict[str, Any], install: Install) -> dict[str, Any]:
    """A Buildkite pipeline (what `plan --matrix --shards N --buildkite` prints) whose every
    command step first installs assembler."""
    steps = pipeline.get("steps")
    if not isinstance(steps, list):
        raise ValueError("no steps")
    setup = buildkite_install(install)
    out = []
    for step in steps:
        if isinstance(step, dict) and isinstance(step.get("command"), str):
            step = {**step, "command": f"{setup} && {step['command']}"}
        elif not (isinstance(step, str | dict)):
            raise ValueError(f"a step that is neither a command nor a wait: {step!r}")
        out.append(step)
    return {**pipeline, "steps": out}
