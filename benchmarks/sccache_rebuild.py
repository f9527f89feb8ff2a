"""(a) Edit one source file of a dependency with 40 C++ units, then rebuild it in a fresh build
tree (a CI runner, another workspace, a configuration switched and back): with sccache's local
cache warm (the default now) against the same build without a compiler cache (what every
rebuild cost before). The in-tree incremental rebuild (ninja, same build tree) is printed too.

The dependency is generated at run time: a git repository with 40 translation units, each a
Stable-ABI operator (torch/csrc/stable headers, as real kernels include them), built by the
helper backend. CPU only.

    python benchmarks/sccache_rebuild.py [--units 40] [--rounds 2] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from assembler.cache import cache_root  # noqa: E402
from assembler.toolchain.cuda import select_cuda  # noqa: E402
from assembler.toolchain.torchenv import ensure_build_env  # noqa: E402
from tests.gitrepo import git  # noqa: E402

TORCH = "2.13.0"
CUDA = "13.2"
UNIT = """\
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

namespace many {{

torch::stable::Tensor op{index}(const torch::stable::Tensor& a, double alpha) {{
  STD_TORCH_CHECK(a.scalar_type() == torch::headeronly::ScalarType::Float, "many::op{index}: expected float32");
  torch::stable::Tensor x = torch::stable::view(torch::stable::contiguous(a), {{-1}});
  torch::stable::Tensor out = torch::stable::empty_like(x);
  const float* xp = x.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {{
    op[i] = xp[i] * static_cast<float>(alpha) + {index}.0f + {edit}.0f;
  }}
  return torch::stable::view(out, a.sizes());
}}

}}  // namespace many

STABLE_TORCH_LIBRARY_FRAGMENT(many, m) {{
  m.def("op{index}(Tensor a, float alpha) -> Tensor");
}}

STABLE_TORCH_LIBRARY_IMPL(many, CPU, m) {{
  m.impl("op{index}", TORCH_BOX(&many::op{index}));
}}
"""
MANIFEST = """\
[bundle]
name = "many-units"
version = "0.1.0"
python-abi = "3.9"
torch-target = "2.10"
torch = "{torch}"
cuda-archs = ["9.0a"]

[mirrors]
"https://example.invalid/bench/" = "upstreams/"

[deps.many]
upstream = "https://example.invalid/bench/many.git"
commit = "{commit}"
track = "main"
torch-target = "2.10"

[deps.many.build]
python-packages = ["many"]

[[deps.many.build.extensions]]
name = "_many_C"
sources = [{sources}]
language = "cxx"
"""


def make_workspace(root: Path, units: int) -> Path:
    """A workspace whose one dependency has ``units`` translation units, with its upstream repository."""
    source = root / "src"
    (source / "csrc").mkdir(parents=True)
    (source / "many").mkdir()
    (source / "many" / "__init__.py").write_text("from . import _many_C  # noqa: F401\n")
    for index in range(units):
        (source / "csrc" / f"u{index:02d}.cpp").write_text(UNIT.format(index=index, edit=0))
    git(source, "init", "-q", "-b", "main")
    git(source, "add", "-A")
    git(source, "commit", "-q", "-m", "many units")
    commit = git(source, "rev-parse", "HEAD")
    ws = root / "ws"
    (ws / "upstreams").mkdir(parents=True)
    git(root, "clone", "-q", "--bare", str(source), str(ws / "upstreams" / "many.git"))
    sources = ", ".join(f'"csrc/u{index:02d}.cpp"' for index in range(units))
    (ws / "deps.toml").write_text(MANIFEST.format(torch=TORCH, commit=commit, sources=sources))
    return ws


def build(ws: Path, cache: Path, jobs: int, sccache: bool) -> tuple[float, dict[str, object]]:
    env = {**os.environ, "ASSEMBLE_CACHE": str(cache), "ASSEMBLE_SCCACHE": "1" if sccache else "0"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "assembler", "-C", str(ws), "build", "--cuda", CUDA, "--only", "many",
                           "--jobs", str(jobs), "--json"], env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"build failed ({done.returncode}):\n{done.stderr[-3000:]}")
    [dep] = json.loads(done.stdout)["deps"]
    if dep["status"] != "built":
        sys.exit(f"expected a build, got {dep['status']}")
    return elapsed, dep


def fresh_tree(ws: Path, cache: Path) -> None:
    """What a new runner or a configuration switch starts from: no build tree, no artifact."""
    shutil.rmtree(ws / ".assemble" / "build", ignore_errors=True)
    shutil.rmtree(ws / ".assemble" / "artifacts", ignore_errors=True)
    shutil.rmtree(cache / "artifacts", ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--units", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    shared = cache_root()
    select_cuda(CUDA)
    ensure_build_env(TORCH)
    with tempfile.TemporaryDirectory(prefix="assemble-bench-sccache-") as temporary:
        root = Path(temporary)
        cache = root / "cache"
        cache.mkdir()
        for name in ("venvs", "toolchains"):
            (cache / name).symlink_to(shared / name, target_is_directory=True)
        ws = make_workspace(root, args.units)
        cold, first = build(ws, cache, args.jobs, sccache=True)
        print(f"cold build, {args.units} units, sccache empty: {cold:6.1f} s  ({first['compiler_cache']})")
        unit = ws / "forks" / "many" / "csrc" / "u07.cpp"
        times: dict[str, list[float]] = {"without sccache (full rebuild)": [], "with sccache (warm local cache)": [],
                                         "in-tree incremental (ninja), for reference": []}
        stats: dict[str, object] = {}
        for round_ in range(args.rounds):
            unit.write_text(UNIT.format(index=7, edit=3 * round_ + 1))  # one file edited (its code): a new key
            fresh_tree(ws, cache)
            elapsed, _ = build(ws, cache, args.jobs, sccache=False)
            times["without sccache (full rebuild)"].append(elapsed)
            unit.write_text(UNIT.format(index=7, edit=3 * round_ + 2))  # new again: sccache has not seen it
            fresh_tree(ws, cache)
            elapsed, dep = build(ws, cache, args.jobs, sccache=True)
            times["with sccache (warm local cache)"].append(elapsed)
            stats = dict(dep["compiler_cache"] or {})  # type: ignore[call-overload]
            unit.write_text(UNIT.format(index=7, edit=3 * round_ + 3))
            shutil.rmtree(ws / ".assemble" / "artifacts", ignore_errors=True)
            shutil.rmtree(cache / "artifacts", ignore_errors=True)
            elapsed, _ = build(ws, cache, args.jobs, sccache=True)
            times["in-tree incremental (ninja), for reference"].append(elapsed)
        print(f"one file edited, rebuilt in a fresh build tree (--jobs {args.jobs}), median of {args.rounds}:")
        for label, values in times.items():
            print(f"  {label:<45} {statistics.median(values):6.1f} s   {' '.join(f'{v:.1f}' for v in values)}")
        full, cached = (statistics.median(times[k]) for k in list(times)[:2])
        print(f"  sccache stats of the last warm rebuild: {stats}")
        print(f"  speed-up: {full / cached:.1f}x")


if __name__ == "__main__":
    main()
