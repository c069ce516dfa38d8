#!/usr/bin/env bash
# A Spark standalone cluster on 127.0.0.1 (a master and two workers, with their web UIs), from the
# PySpark installed in the repository's venv:
#
#   deploy/spark-cluster.sh start [--workers 2] [--cores 1] [--memory 2g] [--port 7077] [--dir DIR]
#   deploy/spark-cluster.sh status [--dir DIR]
#   deploy/spark-cluster.sh stop [--dir DIR]
#
# Then: SPARK_LOCAL_IP=127.0.0.1 hypercup-analyze LOGDIR --out REPORT --master spark://127.0.0.1:7077
# See deploy/spark_cluster.py. PYTHON overrides the Python (default: the venv's, else python3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
  if [[ -x "$root/.venv/bin/python" ]]; then python="$root/.venv/bin/python"; else python=python3; fi
fi
cd "$root"
exec "$python" -m deploy.spark_cluster "$@"
