"""The ``[server.curve]`` table: both keys or neither (the rest of ``[server]`` is in test_socket_limits.py)."""

from __future__ import annotations

import pytest

from runtime import protocol
from runtime.errors import ConfigError
from runtime.server.config import DEFAULT_ENDPOINTS, CurveConfig, ServerConfig


@pytest.mark.parametrize(
    ("secret", "keys", "message"),
    [
        (
            "server.key_secret",
            "",
            "server.curve: set both server_secret_key and authorized_keys_dir, got "
            "server_secret_key='server.key_secret', authorized_keys_dir=''",
        ),
        (
            "",
            "/etc/keys",
            "server.curve: set both server_secret_key and authorized_keys_dir, got "
            "server_secret_key='', authorized_keys_dir='/etc/keys'",
        ),
    ],
)
def test_one_curve_key_without_the_other_is_refused_naming_both(secret: str, keys: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        CurveConfig(secret, keys)
    assert str(err.value) == message


def test_curve_is_on_with_both_keys_and_off_with_neither() -> None:
    both = CurveConfig("server.key_secret", "/etc/keys")
    assert (both.server_secret_key, both.authorized_keys_dir, both.enabled) == (
        "server.key_secret",
        "/etc/keys",
        True,
    )
    assert not CurveConfig().enabled
    assert not ServerConfig().curve.enabled


def test_the_server_listens_on_its_ipc_socket_and_loopback_by_default() -> None:
    cfg = ServerConfig()
    assert DEFAULT_ENDPOINTS == ("ipc://policy.sock", "tcp://127.0.0.1:5555")
    assert cfg.endpoints == DEFAULT_ENDPOINTS
    assert (cfg.queue_depth, cfg.latest_observation_wins, cfg.max_message_bytes) == (4, True, 0)
    assert (cfg.canary_interval_s, cfg.allow_non_finite, cfg.history_max_gap_s, cfg.noise_seed) == (
        5.0,
        (),
        2.0,
        None,
    )


def test_the_protocol_package_names_what_clients_use() -> None:
    assert protocol.PROTOCOL_VERSION == 1
    assert protocol.KINDS[:4] == ("hello", "infer", "ping", "stats")
    for name in protocol.__all__:  # each name exported is there
        getattr(protocol, name)
