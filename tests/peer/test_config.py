"""Configuration: the TOML file, command-line options on top, clear errors for typos."""

import json
from pathlib import Path

import platformdirs
import pytest

import qel
from peer.config import ConfigError, SecurityConfig, format_address, load_config, parse_address


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:7400", ("127.0.0.1", 7400)),
        ("example.org:1", ("example.org", 1)),
        ("[::1]:7400", ("::1", 7400)),
    ],
)
def test_addresses(text, expected):
    assert parse_address(text, what="--superpeer") == expected
    assert parse_address(format_address(expected), what="x") == expected


@pytest.mark.parametrize("text", ["7400", "host:", ":7400", "host:0", "host:65536", "host:http"])
def test_bad_addresses_name_the_option(text):
    with pytest.raises(ConfigError, match="--superpeer must be HOST:PORT"):
        parse_address(text, what="--superpeer")


def test_defaults_put_the_data_under_the_users_data_dir():
    base = Path(platformdirs.user_data_dir("semantic-pubsub"))
    assert load_config(None).data_dir == base / "peer-default"
    named = load_config(None, name="alice")
    assert (named.data_dir, named.name, named.superpeers) == (base / "peer-alice", "alice", ())
    assert named.control_path == base / "peer-alice" / "control.sock"


def test_a_file_with_options_on_top(tmp_path, monkeypatch):
    config_file = tmp_path / "conf" / "peer.toml"
    config_file.parent.mkdir()
    config_file.write_text(
        """
superpeer = "127.0.0.1:7400"
data_dir = "data"
name = "alice"
request_timeout = 5
locate_timeout = 2.5
reconnect_initial = 0.25
reconnect_max = 4.0
inbox_group = 8
ack_delay_seconds = 0
ack_every = 4

[advertisement]
schemas = ["dc"]
values = {"dc:date" = [{min = 2004-01-01, type = "date"}]}
"""
    )
    monkeypatch.chdir(tmp_path)
    config = load_config(str(config_file))
    assert config.data_dir == tmp_path / "conf" / "data", "relative to the file"
    assert config.superpeers == (("127.0.0.1", 7400),)
    assert (config.request_timeout, config.reconnect_initial, config.reconnect_max) == (5, 0.25, 4)
    assert (config.locate_timeout, load_config(None).locate_timeout) == (2.5, 10.0)
    assert (config.inbox_group, load_config(None).inbox_group) == (8, 64)
    assert (config.ack_delay_seconds, config.ack_every) == (0.0, 4), "no delay is allowed"
    assert (load_config(None).ack_delay_seconds, load_config(None).ack_every) == (0.04, 16)
    assert config.advertisement is not None
    assert json.loads(config.advertisement)["values"]["dc:date"] == [
        {"min": "2004-01-01", "type": "date"}
    ]
    qel.parse_advertisement(config.advertisement)
    overridden = load_config(
        str(config_file), data_dir="elsewhere", name="bob", superpeer="[::1]:9"
    )
    assert overridden.data_dir == tmp_path / "elsewhere", "relative to the working directory"
    assert (overridden.name, overridden.superpeers) == ("bob", (("::1", 9),))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("superpeer = 7400", "superpeer must be an address or a list"),
        ("superpeers = '127.0.0.1:7400'", r"unknown configuration key\(s\) \['superpeers'\]"),
        ("request_timeout = 0", "request_timeout must be a positive number"),
        ("locate_timeout = -1", "locate_timeout must be a positive number"),
        ("max_frame_bytes = 1.5", "max_frame_bytes must be a positive integer"),
        ("inbox_group = 0", "inbox_group must be a positive integer"),
        ("ack_every = 0", "ack_every must be a positive integer"),
        ("ack_delay_seconds = -0.1", "ack_delay_seconds must be a non-negative number"),
        ("reconnect_initial = 5\nreconnect_max = 1", "reconnect_max must be at least"),
        ("name = 'a b'", "name 'a b' is not a valid peer name"),
        ("advertisement = 'dc'", "advertisement must be a table"),
        ("superpeer = [", "is not valid TOML"),
    ],
)
def test_configuration_errors_name_the_key(tmp_path, content, message):
    config_file = tmp_path / "peer.toml"
    config_file.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_config(str(config_file))


def test_a_missing_file_and_a_bad_name_option_are_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the configuration"):
        load_config(str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match=r"--name '\.\./x' is not a valid peer name"):
        load_config(None, name="../x")


FINGERPRINT = "pk1-fvyrmqvxe2yeialcpsu7xlbs6xefgd5rsa6mjwycewdrpeq2jcaq"


def test_security_defaults_to_tls_with_nothing_trusted_yet(tmp_path):
    config = load_config(None, data_dir=str(tmp_path))
    assert config.security == SecurityConfig(tls=True)
    assert config.security.trust is None, "serve_peer refuses to start without ca or pin"
    assert config.key_path == tmp_path / "identity" / "key.pem"
    assert config.identity_dir == tmp_path / "identity"


def test_security_from_the_file_and_the_command_line_on_top(tmp_path, monkeypatch):
    config_file = tmp_path / "conf" / "peer.toml"
    config_file.parent.mkdir()
    config_file.write_text(f'[security]\npin = "{FINGERPRINT.upper()}"\nkey = "keys/alice.pem"\n')
    monkeypatch.chdir(tmp_path)
    config = load_config(str(config_file))
    assert config.security == SecurityConfig(
        pin=FINGERPRINT, key=tmp_path / "conf" / "keys" / "alice.pem"
    ), "the pin is canonical, the key relative to the file"
    assert config.key_path == tmp_path / "conf" / "keys" / "alice.pem"
    assert config.security.trust == f"pin {FINGERPRINT}"

    by_ca = load_config(str(config_file), ca="ca.pem")
    assert (by_ca.security.ca, by_ca.security.pin) == (tmp_path / "ca.pem", None)
    assert by_ca.security.key == config.security.key, "the key setting stays"
    plain = load_config(str(config_file), no_tls=True)
    assert (plain.security.tls, plain.security.ca, plain.security.pin) == (False, None, None)
    config_file.write_text('[security]\nca = "network-ca.pem"\n')
    assert load_config(str(config_file)).security.ca == tmp_path / "conf" / "network-ca.pem"
    assert load_config(str(config_file), pin=FINGERPRINT).security == SecurityConfig(
        pin=FINGERPRINT
    )


@pytest.mark.parametrize(
    ("content", "options", "message"),
    [
        (f'[security]\nca = "a.pem"\npin = "{FINGERPRINT}"', {}, "give ca or pin, not both"),
        ('[security]\ntls = false\nca = "a.pem"', {}, "tls = false contradicts ca and pin"),
        ("[security]\ntls = 'no'", {}, "security.tls must be true or false"),
        ("[security]\ncert = 'x'", {}, r"unknown security key\(s\) \['cert'\]"),
        ("security = 'tls'", {}, "security must be a table"),
        (
            '[security]\npin = "sha256:ab"',
            {},
            "security.pin must be a super-peer's key fingerprint",
        ),
        ("", {"pin": "pk1-nope"}, "--pin must be a super-peer's key fingerprint"),
        ("", {"ca": "a.pem", "pin": FINGERPRINT}, "--ca, --pin and --no-tls exclude each other"),
        ("", {"ca": "a.pem", "no_tls": True}, "--ca, --pin and --no-tls exclude each other"),
    ],
)
def test_security_errors_name_the_setting(tmp_path, content, options, message):
    config_file = tmp_path / "peer.toml"
    config_file.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_config(str(config_file), **options)


def test_the_web_app_is_on_by_default_on_loopback_and_configurable(tmp_path):
    default = load_config(None)
    assert (default.ui.listen, default.ui.desktop_notifications) == (("127.0.0.1", 0), True)
    assert default.ui_url_path == default.data_dir / "ui.url"
    config_file = tmp_path / "peer.toml"
    config_file.write_text(
        '[ui]\nlisten = "9000"\nallowed_hosts = ["Peer.Example"]\ndesktop_notifications = false\n'
        "max_upload_bytes = 1000\nmax_request_bytes = 2000\n"
    )
    config = load_config(str(config_file))
    assert config.ui.listen == ("127.0.0.1", 9000)
    assert config.ui.allowed_hosts == ("peer.example",)
    assert (config.ui.desktop_notifications, config.ui.max_upload_bytes) == (False, 1000)
    assert config.ui.max_request_bytes == 2000
    assert load_config(str(config_file), ui="0.0.0.0:8080").ui.listen == ("0.0.0.0", 8080)
    assert load_config(str(config_file), ui="[::1]:0").ui.listen == ("::1", 0)
    assert load_config(str(config_file), no_ui=True).ui.listen is None
    config_file.write_text("[ui]\nlisten = false\n")
    assert load_config(str(config_file)).ui.listen is None
    assert load_config(str(config_file), ui="8080").ui.listen == ("127.0.0.1", 8080)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[ui]\nport = 1\n", r"unknown ui key\(s\) \['port'\]"),
        ('[ui]\nlisten = "host:http"\n', "ui.listen must be HOST:PORT or PORT"),
        ("[ui]\nlisten = 8080\n", "ui.listen must be HOST:PORT, a PORT, or false"),
        ('[ui]\nallowed_hosts = "peer.example"\n', "allowed_hosts must be a list"),
        ('[ui]\ndesktop_notifications = "no"\n', "desktop_notifications must be true or false"),
        ("[ui]\nmax_upload_bytes = 0\n", "max_upload_bytes must be a positive integer"),
        ("ui = 1\n", "ui must be a table"),
    ],
)
def test_web_app_settings_that_cannot_be_used_are_named(tmp_path, text, message):
    config_file = tmp_path / "peer.toml"
    config_file.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(str(config_file))


def test_ui_and_no_ui_exclude_each_other():
    with pytest.raises(ConfigError, match="--ui and --no-ui exclude each other"):
        load_config(None, ui="8080", no_ui=True)
    with pytest.raises(ConfigError, match="--ui must be HOST:PORT or PORT"):
        load_config(None, ui="127.0.0.1:70000")
