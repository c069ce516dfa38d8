#!/usr/bin/env bash
# Run hypercup-analyze through spark-submit: on a Spark cluster, or locally to try it.
#
#   deploy/spark-submit.sh [SPARK-SUBMIT OPTIONS --] LOGDIR --out REPORTDIR [hypercup-analyze options]
#
# Everything before a `--` goes to spark-submit as it is (--deploy-mode, --executor-memory,
# --num-executors, --conf ...); everything after it (or all arguments, without a `--`) goes to
# hypercup-analyze. The analytics package and superpeer/trace.py (the record it reads) are zipped
# and shipped with --py-files; analytics/submit_entry.py is the application spark-submit runs.
#
# Environment:
#   MASTER                  --master for spark-submit (default: local[*]), e.g. yarn,
#                           spark://host:7077, k8s://https://host:6443
#   SPARK_SUBMIT            the spark-submit to run (default: spark-submit on PATH, else
#                           $SPARK_HOME/bin/spark-submit)
#   PYTHON                  the Python that zips the package (default: python3)
#   PYSPARK_DRIVER_PYTHON   the driver's Python (default: $PYTHON); it needs pyspark and
#                           matplotlib. Executors run no Python code: every step is a DataFrame
#                           operation, so they need none of this package's dependencies.
#
# On a cluster, LOGDIR is read by the executors (hdfs://, s3a://, or a path on the default file
# system), while REPORTDIR (report.md, report.html, plots) is written by the driver; pass
# --warehouse with a shared URI for the Parquet and CSV tables (and --parquet-dir for the Parquet
# copy of the events), since executors write those.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"
master="${MASTER:-local[*]}"
submit_options=()
for argument in "$@"; do
  if [[ "$argument" == "--" ]]; then
    while [[ "$1" != "--" ]]; do
      submit_options+=("$1")
      shift
    done
    shift
    break
  fi
done
if [[ $# -eq 0 ]]; then
  sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi

if [[ -n "${SPARK_SUBMIT:-}" ]]; then
  submit="$SPARK_SUBMIT"
elif command -v spark-submit >/dev/null 2>&1; then
  submit="spark-submit"
elif [[ -n "${SPARK_HOME:-}" ]]; then
  submit="$SPARK_HOME/bin/spark-submit"
else
  echo "spark-submit.sh: no spark-submit: put it on PATH, set SPARK_HOME or SPARK_SUBMIT" >&2
  exit 2
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/hypercup-analyze.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$python" - "$root" "$work/analytics.zip" <<'EOF'
import sys
import zipfile
from pathlib import Path

root, target = Path(sys.argv[1]), sys.argv[2]
# superpeer/trace.py defines the record and imports only the standard library.
sources = [*sorted((root / "analytics").rglob("*.py")), root / "superpeer" / "__init__.py",
           root / "superpeer" / "trace.py"]
with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
    for source in sources:
        archive.write(source, source.relative_to(root).as_posix())
EOF

export PYSPARK_DRIVER_PYTHON="${PYSPARK_DRIVER_PYTHON:-$python}"
"$submit" \
  --master "$master" \
  --name hypercup-analyze \
  --conf spark.sql.session.timeZone=UTC \
  --conf spark.ui.showConsoleProgress=true \
  --py-files "$work/analytics.zip" \
  ${submit_options[@]+"${submit_options[@]}"} \
  "$root/analytics/submit_entry.py" "$@"
