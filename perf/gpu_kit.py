"""An offline GPU kit: everything `perf/gpu_check.py` needs on a machine with no network, in one folder.

`make gpu-kit` (``python -m perf.gpu_kit build``) writes, for a named Python and platform:

- ``project.tar.gz``: the checkout (its files as git sees them, ignored ones left out) with the demo data
  prebuilt (``data/demo_movie``);
- ``wheels/``: the packages the target lacks, at the versions tested here: the closure of what the GPU
  check imports, less what a stock CUDA image carries (``IMAGE``: the lent machines' image, as read
  there) unless the image's version is known to be too old (``IMAGE_VERSIONS``);
- ``requirements.txt``: what the kit expects the image to provide, checked on the target before anything runs;
- ``run_gpu_check.sh OUT [SECONDS] [--collect DIR] [gpu_check flags]``: installs the wheels into
  ``OUT/site``, unpacks the project, checks the environment, and runs gpu_check under a time limit, its
  tables and logs in ``OUT``; ``--collect`` copies the log and the runs' small files into ``DIR`` at the end.

The kit must stay under ``LIMIT_MIB`` (a lent machine takes 64 MiB a call). It trains a model shape
(``--model-shape``, random weights): the embedded model's wheel is not in it.

    python -m perf.gpu_kit build [--python 3.12] [--platform manylinux_2_28_x86_64] [--out outputs/gpu_kit]
    python -m perf.gpu_kit check     # on the target: every requirement met?
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
import tarfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from perf import ROOT
from rectune.core.io import RecTuneError
from rectune.core.outputs import output_set

LIMIT_MIB = 60
# what the GPU check imports (train, GRPO, evaluation, `transformers serve`), as this checkout requires them
# (LLMRec's text metrics, the embedded model's GGUF reader, duckdb and W&B load only where used: left out)
ROOTS = ["transformers", "peft", "trl", "accelerate", "datasets", "rapidfuzz", "pyyaml", "tqdm", "matplotlib",
         "scipy", "bm25s", "pyarrow", "openai", "fastapi", "uvicorn", "starlette", "rich", "pydantic"]  # fmt: skip
EXTRA_WHEELS = ["liger-kernel==0.8.5"]  # GPU-only (its Triton kernels): not installed here, fetched for the kit
# the lent machines' image, 'cuda' (the device tool's KINDS.md, read there on 2026-11-17)
IMAGE = """absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build
certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core
cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock
flatbuffers flax fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx
huggingface-hub humanize hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax
llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-ml-py
onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache
protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest
pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml
regex requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece
sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate
tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer
typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp"""
IMAGE_VERSIONS = {"transformers": "5.17.0", "accelerate": "1.15.0", "huggingface-hub": "1.33.0",
                  "safetensors": "0.8.0", "tokenizers": "0.23.2", "torch": "2.11.0", "numpy": "2.5.2"}  # fmt: skip


def image_packages(listed: str = IMAGE) -> set[str]:
    return {canonicalize_name(name) for name in listed.split()}


def kit_packages(python: str, roots: list[str] = ROOTS, image: set[str] | None = None) -> tuple[dict, list]:
    """``({name: version to carry}, [requirements the image must meet])``: the closure of ``roots`` over the
    installed distributions' requirements (markers for Linux and ``python``), carrying what the image lacks
    or has too old a version of, and stopping at what it provides."""
    image = image_packages() if image is None else image
    environment = {**default_environment(), "python_version": python, "python_full_version": f"{python}.0",
                   "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64"}  # fmt: skip
    carried: dict[str, str] = {}
    expected: list[Requirement] = []
    pinned = project_requirements()
    todo = [pinned.get(canonicalize_name(root), Requirement(root)) for root in roots]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        known = IMAGE_VERSIONS.get(name)
        if name in image and (known is None or requirement.specifier.contains(known, prereleases=True)):
            expected.append(requirement)
            continue
        if name in carried:
            continue
        carried[name] = importlib.metadata.version(name)
        for line in importlib.metadata.requires(name) or []:
            needed = Requirement(line)
            if needed.marker is None or needed.marker.evaluate({**environment, "extra": ""}):
                todo.append(needed)
    return carried, sorted({str(r) for r in expected if canonicalize_name(r.name) not in carried})


def project_requirements() -> dict[str, Requirement]:
    """This checkout's own requirements (pyproject.toml), by name: a root's version range."""
    import tomllib

    listed = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    return {canonicalize_name(Requirement(line).name): Requirement(line) for line in listed}


def download(packages: dict[str, str], extra: list[str], python: str, platform: str, folder: Path) -> None:
    folder.mkdir(parents=True)
    wanted = [f"{name}=={version}" for name, version in sorted(packages.items())] + extra
    platforms = [f"--platform={p}" for p in (platform, "manylinux_2_17_x86_64", "manylinux2014_x86_64")]
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
               f"--python-version={python}", "--implementation=cp", *platforms, "-d", str(folder), *wanted]  # fmt: skip
    subprocess.run(command, check=True)


def project_archive(path: Path) -> None:
    """The checkout's files as they are (git's tracked and untracked ones, not the ignored) with the demo
    data built (gpu_check's data) as ``project.tar.gz``."""
    if not (ROOT / "data/demo_movie/train.jsonl").is_file():
        subprocess.run(["make", "-s", "data-demo", f"PY={sys.executable}", "STAMP="], cwd=ROOT, check=True)
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True, text=True).stdout.split("\0")  # fmt: skip
    demo = [str(p.relative_to(ROOT)) for p in (ROOT / "data/demo_movie").rglob("*") if p.is_file()]
    with tarfile.open(path, "w:gz") as bundle:
        for name in sorted({*filter(None, listed), *demo}):
            if (ROOT / name).is_file():  # a file deleted but not yet committed is left out
                bundle.add(ROOT / name, arcname=name, recursive=False)


SCRIPT = r"""#!/usr/bin/env bash
# The GPU check from this kit, offline:
#   bash run_gpu_check.sh OUT [SECONDS] [--collect DIR] [perf/gpu_check.py flags]
# --collect DIR: at the end, even after the time limit, gpu_check.log and runs.tgz (the runs' logs, trainer
# states and profile tables; no weights, optimizer states, model shapes or traces) are copied into DIR
set -euo pipefail
if [ $# -lt 1 ]; then
    echo "usage: bash run_gpu_check.sh OUT [SECONDS] [--collect DIR] [perf/gpu_check.py flags]" >&2
    exit 2
fi
kit=$(cd "$(dirname "$0")" && pwd)
collect=""
if [ "${3:-}" = "--collect" ]; then collect=${4:?--collect needs a folder}; fi
# refused before anything is written: OUT holding anything this script did not write, or DIR holding its files
if [ -e "$1" ] && [ -n "$(ls -A "$1" 2>/dev/null)" ] && [ ! -f "$1/.gpu_kit_run" ]; then
    echo "run_gpu_check.sh: $1 exists and was not written by this script; choose another folder" >&2
    exit 1
fi
if [ -n "$collect" ] && { [ -e "$collect/gpu_check.log" ] || [ -e "$collect/runs.tgz" ]; }; then
    echo "run_gpu_check.sh: $collect already holds gpu_check.log or runs.tgz; choose another folder" >&2
    exit 1
fi
out=$(mkdir -p "$1" && cd "$1" && pwd); limit=${2:-540}; shift $(( $# < 2 ? $# : 2 ))
if [ -n "$collect" ]; then
    collect=$(mkdir -p "$collect" && cd "$collect" && pwd); shift 2
fi
touch "$out/.gpu_kit_run"
rm -rf "$out/site" "$out/project"  # an earlier run's install, replaced whole
python=${PYTHON:-python3}
mkdir -p "$out/site" "$out/project"
"$python" -m pip install --quiet --no-index --no-deps --no-compile --target "$out/site" "$kit"/wheels/*.whl \
    > "$out/install.log" 2>&1 || { tail -20 "$out/install.log"; exit 1; }
tar -xzf "$kit/project.tar.gz" -C "$out/project"
export PYTHONPATH="$out/site:$out/project" PATH="$out/site/bin:$PATH" HF_HUB_OFFLINE=1 WANDB_MODE=disabled
export PYTHONUNBUFFERED=1  # the steps' logs are whole up to the moment the time limit stops them
cd "$out/project"
"$python" -m perf.gpu_kit check --requirements "$kit/requirements.txt"
status=0
timeout --kill-after=20 "$limit" "$python" -m perf.gpu_check --out "$out/gpu_check" "$@" 2>&1 \
    | tee "$out/gpu_check.log" || status=$?
if [ -n "$collect" ]; then
    cp "$out/gpu_check.log" "$collect/gpu_check.log"
    tar -czf "$collect/runs.tgz" -C "$out" --exclude='shape-*' --exclude='*.safetensors' --exclude='*.pt' \
        --exclude='*.bin' --exclude='trace-*' gpu_check
fi
exit "$status"
"""


def build(python: str, platform: str, out: Path, *, overwrite: bool = False) -> int:
    """Write the kit to ``out``, whole or not at all (a download cut short leaves the earlier kit); 1 when it
    is over ``LIMIT_MIB``. ``out`` must be new, empty or an earlier kit holding nothing else (``overwrite``: any)."""
    with output_set(out, "gpu kit", overwrite=overwrite) as staging:
        carried, expected = kit_packages(python)
        download(carried, EXTRA_WHEELS, python, platform, staging / "wheels")
        project_archive(staging / "project.tar.gz")
        (staging / "requirements.txt").write_text("\n".join(expected) + "\n")
        (staging / "run_gpu_check.sh").write_text(SCRIPT, encoding="utf-8")
        size = sum(path.stat().st_size for path in staging.rglob("*") if path.is_file())
    print(f"gpu-kit: {out}: {len(carried) + len(EXTRA_WHEELS)} wheels for Python {python} on {platform}, "
          f"the project and its demo data: {size / 2**20:.1f} MiB (limit {LIMIT_MIB})")  # fmt: skip
    print(f"  carried: {', '.join(f'{n} {v}' for n, v in sorted(carried.items()))}, {', '.join(EXTRA_WHEELS)}")
    print(f"  on the target: bash {out / 'run_gpu_check.sh'} /tmp/kit 540 --collect OUT --model-shape qwen2.5-3b")
    return 0 if size <= LIMIT_MIB * 2**20 else 1


def unmet(requirements: list[str]) -> list[str]:
    """The requirements this environment does not meet, each with what it has."""
    missing = []
    for line in requirements:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            found = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(f"{requirement}: not installed")
            continue
        if not requirement.specifier.contains(Version(found), prereleases=True):
            missing.append(f"{requirement}: {found} installed")
    return missing


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("build", help="write the kit")
    make.add_argument("--python", default="3.12", help="the target's Python (the lent machines': 3.12)")
    make.add_argument("--platform", default="manylinux_2_28_x86_64")
    make.add_argument("--out", default="outputs/gpu_kit")
    make.add_argument("--overwrite", action="store_true", help="replace --out, whoever wrote it")
    check = sub.add_parser("check", help="on the target: are the image's packages what the kit expects?")
    check.add_argument("--requirements", required=True)
    args = parser.parse_args()
    if args.command == "build":
        try:
            sys.exit(build(args.python, args.platform, (ROOT / args.out).resolve(), overwrite=args.overwrite))
        except RecTuneError as refused:
            sys.exit(f"gpu-kit: {refused}")
    lines = [line for line in Path(args.requirements).read_text(encoding="utf-8").splitlines() if line.strip()]
    missing = unmet(lines)
    if missing:
        sys.exit("gpu-kit: this environment lacks what the kit expects of it:\n  " + "\n  ".join(missing))
    print(f"gpu-kit: the {len(lines)} requirements on the image are met")


if __name__ == "__main__":
    main()
