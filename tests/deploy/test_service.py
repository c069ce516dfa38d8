"""The service units and their example configurations, and ``superpeer check-config``."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from superpeer.config import ConfigError, config_from_mapping, load_config

UNITS = Path(__file__).parents[2] / "deploy" / "systemd"
INSTALLED = "/opt/semantic-pubsub/bin"
"""Where the units expect the package (a venv); the tests point them at this one instead."""


def check_config(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "superpeer.cli", "check-config", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_example_configuration_is_valid_and_says_what_it_means(tmp_path):
    text = (UNITS / "superpeer.toml").read_text()
    text = text.replace("/var/lib/semantic-pubsub/superpeer", str(tmp_path / "data"))
    identity = tmp_path / "data" / "identity"
    identity.mkdir(parents=True)
    for name in ("key.pem", "cert.pem", "ca.pem"):
        (identity / name).write_text("placeholder\n")
    (tmp_path / "sp.toml").write_text(text)
    result = check_config(str(tmp_path / "sp.toml"))
    assert result.returncode == 0, result.stderr
    assert "HTTP endpoint http://127.0.0.1:9400/ (metrics, health, status page)" in result.stdout
    assert "log json at INFO, repeats at most every 10 s" in result.stdout
    assert f"TLS with key {identity / 'key.pem'}" in result.stdout


@pytest.mark.slow
def test_check_config_names_what_is_wrong(tmp_path):
    (tmp_path / "typo.toml").write_text('[http]\nlisten = "127.0.0.1:9400"\nmetric = true\n')
    result = check_config(str(tmp_path / "typo.toml"))
    assert result.returncode == 2
    assert "unknown key(s) ['metric']" in result.stderr
    (tmp_path / "missing.toml").write_text(
        f'data_dir = "{tmp_path / "d"}"\n[security]\nkey = "{tmp_path / "nokey.pem"}"\n'
    )
    result = check_config(str(tmp_path / "missing.toml"))
    assert result.returncode == 2
    assert f"security.key: {tmp_path / 'nokey.pem'} does not exist" in result.stderr
    assert check_config(str(tmp_path / "absent.toml")).returncode == 2


def test_the_endpoint_is_off_by_default_and_on_loopback_unless_a_host_is_named():
    assert not load_config(None).http.enabled
    assert config_from_mapping({"http": {"listen": "9400"}}).http.bind == ("127.0.0.1", 9400)
    named = config_from_mapping({"http": {"listen": "0.0.0.0:9400"}})
    assert named.http.bind == ("0.0.0.0", 9400)
    with pytest.raises(ConfigError, match=r"http\.listen must be HOST:PORT"):
        config_from_mapping({"http": {"listen": "everywhere"}})
    with pytest.raises(ConfigError, match=r"http\.max_header_bytes must be positive"):
        config_from_mapping({"http": {"listen": "9400", "max_header_bytes": 0}})
    with pytest.raises(ConfigError, match=r"logging\.format"):
        config_from_mapping({"logging": {"format": "xml"}})
    with pytest.raises(ConfigError, match=r"logging\.level 'loud'"):
        config_from_mapping({"logging": {"level": "loud"}})


def test_a_bad_http_option_is_a_usage_error():
    result = subprocess.run(
        [sys.executable, "-m", "superpeer.cli", "run", "--http", "nowhere"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "--http: http.listen must be HOST:PORT, got 'nowhere'" in result.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not found")
@pytest.mark.parametrize("unit", ["superpeer.service", "peer.service"])
def test_systemd_analyze_verifies_the_units(unit, tmp_path):
    text = (UNITS / unit).read_text()
    assert INSTALLED in text
    for hardening in ("NoNewPrivileges=yes", "ProtectSystem=strict", "StateDirectory=",
                      "RestrictAddressFamilies="):  # fmt: skip
        assert hardening in text
    (tmp_path / unit).write_text(text.replace(INSTALLED, str(Path(sys.executable).parent)))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(tmp_path / unit)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_the_store_section_says_how_durable_a_commit_is_and_how_many_inputs_share_one(tmp_path):
    default = config_from_mapping({})
    assert (default.store.sync, default.store.max_inputs_per_commit) == ("full", 256)
    store = config_from_mapping({"store": {"sync": "normal", "max_inputs_per_commit": 16}}).store
    assert (store.sync, store.max_inputs_per_commit) == ("normal", 16)
    with pytest.raises(ConfigError, match=r"store\.sync must be one of 'full', 'normal'"):
        config_from_mapping({"store": {"sync": "off"}})
    with pytest.raises(ConfigError, match=r"store\.max_inputs_per_commit must be positive"):
        config_from_mapping({"store": {"max_inputs_per_commit": 0}})
    with pytest.raises(ConfigError, match="unknown key"):
        config_from_mapping({"store": {"fsync": True}})
    (tmp_path / "sp.toml").write_text(
        f'data_dir = "{tmp_path / "d"}"\n[store]\nsync = "normal"\nmax_inputs_per_commit = 8\n'
    )
    result = check_config(str(tmp_path / "sp.toml"))
    assert result.returncode == 0, result.stderr
    assert "sync normal (survives a killed process, not a power loss)" in result.stdout
    assert "at most 8 inputs per commit" in result.stdout
