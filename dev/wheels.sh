#!/usr/bin/env bash
# Wheels of what ampbench needs beyond torch and torchvision, for a GPU machine with no package index: run
# it where an index is reachable, copy $DIR over, and install there as a user would:
#   pip install --no-index --find-links wheels --no-build-isolation -e '.[nvml,fp8]'
#   PY=3.12 DIR=wheels dev/wheels.sh            # the GPU machine's Python (default 3.12)
#   EXTRA="pytest-benchmark>=5.3 sqlalchemy>=2.0 psycopg[binary]>=3.1 ruptures>=1.1 jinja2>=3.1 nvidia-ml-py>=12 torchao>=0.17 setuptools>=69" \
#     dev/wheels.sh   # only these: what an image with torch, numpy, scipy, scikit-learn, matplotlib, pytest and an older pytest-benchmark lacks
# torch and torchvision are left out: the machine's own CUDA build is kept (the README's Install); setuptools
# is in, for the editable install without build isolation.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-3.12}
DIR=${DIR:-wheels}
PIP=${PIP:-python3 -m pip}
# the requirements of pyproject.toml's dependencies and of its nvml and fp8 extras, torch's pair left out
default=$(python3 - <<'PYEOF'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
reqs = project["dependencies"] + project["optional-dependencies"]["nvml"] + project["optional-dependencies"]["fp8"]
print(" ".join(r for r in reqs if not r.startswith(("torch>", "torch=", "torchvision"))), "setuptools>=69")
PYEOF
)
read -r -a reqs <<< "${EXTRA:-$default}"
mkdir -p "$DIR"
# each requirement with what it needs, as binary wheels for that Python on Linux x86_64
$PIP download --quiet --only-binary=:all: --python-version "$PY" --platform manylinux2014_x86_64 \
  --platform manylinux_2_28_x86_64 --platform any -d "$DIR" "${reqs[@]}"
echo "dev/wheels.sh: $(ls "$DIR" | wc -l) wheels for Python $PY in $DIR"
