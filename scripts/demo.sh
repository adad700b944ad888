#!/usr/bin/env bash
# Installs the dependencies, builds dlinspect and runs the demo host on configs/demo.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== running the demo"
meson devenv -C build dlinspect-demo --config "$PWD/configs/demo.yaml" --log-dir "$PWD/dlinspect_demo_logs" "$@"
