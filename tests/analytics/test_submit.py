"""``deploy/spark-submit.sh`` runs the job through spark-submit with the package shipped as a zip.

No cluster here, so ``--master local[2]`` through the spark-submit of the pip-installed PySpark.
What a cluster adds is that its driver and executors do not have this repository: the driver
Python below hides the working tree and the editable install, so ``analytics`` (and the
``superpeer.trace`` it imports) can only come from the zip the wrapper ships. This starts its own
JVM (spark-submit's), the one exception to the single session of the test run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"

BOOTSTRAP = """
import os, runpy, sys
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path = [p for p in sys.path if p and p.rstrip("/") not in ({root!r}, {root!r} + "/analytics")]
script, sys.argv = sys.argv[1], sys.argv[1:]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    if "analytics" in sys.modules:
        with open(os.environ["IMPORTED_FROM"], "w") as marker:
            for name in ("analytics", "superpeer.trace"):
                marker.write(getattr(sys.modules.get(name), "__file__", name) + "\\n")
"""


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.skipif(not SPARK_SUBMIT.exists(), reason="no spark-submit beside this Python")
def test_spark_submit_wrapper_ships_the_package(traces: Path, tmp_path: Path) -> None:
    bootstrap = tmp_path / "bootstrap.py"
    bootstrap.write_text(BOOTSTRAP.format(root=str(ROOT)))
    driver = tmp_path / "driver-python"
    driver.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{bootstrap}" "$@"\n')
    driver.chmod(0o755)
    environment = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))},
        "MASTER": "local[2]",
        "SPARK_SUBMIT": str(SPARK_SUBMIT),
        "PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": str(driver),
        "IMPORTED_FROM": str(tmp_path / "imported-from"),
    }
    out = tmp_path / "report"
    result = subprocess.run(
        ["bash", str(ROOT / "deploy" / "spark-submit.sh"), "--driver-memory", "1g", "--",
         str(traces), "--out", str(out), "--no-progress"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "report written to" in result.stdout
    imported_from = (tmp_path / "imported-from").read_text()
    assert "analytics.zip/analytics/__init__.py" in imported_from
    assert "analytics.zip/superpeer/trace.py" in imported_from
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<h2>Load per super-peer</h2>" in page
    assert (out / "tables" / "kinds.parquet").is_dir()


def test_wrapper_without_arguments_prints_its_usage() -> None:
    result = subprocess.run(
        ["bash", str(ROOT / "deploy" / "spark-submit.sh")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "LOGDIR --out REPORTDIR" in result.stderr
