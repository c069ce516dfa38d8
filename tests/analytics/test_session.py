"""The Java check: Spark 4 needs Java 17 or newer, and without this check a missing or old Java
shows up as a Py4J traceback naming neither. Fake ``java`` scripts stand in for real runtimes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from analytics.session import (
    JavaRuntimeError,
    check_java,
    find_java,
    java_major_version,
    rows_fit,
    tune_for_input,
)


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment (build 17.0.15+6)', 17),
        ('java version "1.8.0_392"\nJava(TM) SE Runtime Environment (build 1.8.0_392-b08)', 8),
        ('openjdk version "11.0.21" 2023-10-17 LTS', 11),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "22-ea" 2024-03-19', 22),
        ('Picked up JAVA_TOOL_OPTIONS: -Xss4m\nopenjdk version "17.0.2" 2022-01-18', 17),
    ],
)
def test_java_major_version(output: str, major: int) -> None:
    assert java_major_version(output) == major


def test_unreadable_version_output() -> None:
    with pytest.raises(JavaRuntimeError, match="cannot read the Java version"):
        java_major_version("bash: java: command not found")


def fake_java(directory: Path, version: str) -> Path:
    """A ``java`` that answers ``-version`` as a JDK does: on stderr."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "java"
    script.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2024-01-01' >&2\n")
    script.chmod(0o755)
    return script


def test_missing_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_java() is None
    with pytest.raises(JavaRuntimeError, match=r"no Java runtime found .*Java 17 or newer"):
        check_java()


def test_java_too_old(tmp_path: Path) -> None:
    java = fake_java(tmp_path, "11.0.21")
    with pytest.raises(JavaRuntimeError, match=r"Java 11 at .* is too old: .*Java 17 or newer"):
        check_java(str(java))


def test_java_home_comes_first(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    java = fake_java(tmp_path / "jdk-21" / "bin", "21.0.1")
    fake_java(tmp_path / "path", "11.0.21")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk-21"))
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    assert find_java() == str(java)
    assert check_java() == 21


def test_command_line_without_java_fails_before_starting_spark(
    traces: Path, tmp_path: Path
) -> None:
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("JAVA_HOME", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")
    }
    environment["PATH"] = str(tmp_path / "empty")
    result = subprocess.run(
        [sys.executable, "-m", "analytics.cli", str(traces), "--out", str(tmp_path / "report")],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("hypercup-analyze: error: no Java runtime found")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "report").exists()


@pytest.mark.slow
@pytest.mark.spark
def test_sizing_by_the_input(spark: SparkSession) -> None:
    """Small traces are kept as rows, traces larger than memory as columns; the test session's
    explicit shuffle partitions stand."""
    assert rows_fit(spark, 10**6)
    assert not rows_fit(spark, 10**13)
    assert tune_for_input(spark, 10**12) == int(spark.conf.get("spark.sql.shuffle.partitions") or 0)
