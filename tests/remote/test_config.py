"""``[policy]``: the remote's endpoint and keys, refused by key when they would expose the robot."""

from __future__ import annotations

import pytest

from runtime.errors import ConfigError
from runtime.remote.config import RemotePolicyConfig


def test_no_endpoint_is_the_daemons_own_engine() -> None:
    assert not RemotePolicyConfig().remote
    with pytest.raises(ConfigError, match=r"^policy.server_public_key: set only with policy.endpoint"):
        RemotePolicyConfig(server_public_key="s.key")
    with pytest.raises(ConfigError, match=r"^policy.fallback: set only with policy.endpoint"):
        RemotePolicyConfig(fallback=True)


def test_loopback_and_ipc_need_no_keys_another_host_does() -> None:
    assert RemotePolicyConfig("tcp://127.0.0.1:5555").remote
    assert RemotePolicyConfig("ipc:///run/lerobot-runtime/policy.sock").remote
    for host in ("10.0.0.2", "workstation.local", "*"):
        with pytest.raises(ConfigError) as e:
            RemotePolicyConfig(f"tcp://{host}:5555")
        assert str(e.value).startswith(f"policy.endpoint: tcp://{host}:5555 is another host: ")
        assert "policy.server_public_key" in str(e.value) and "policy.client_secret_key" in str(e.value)
    assert RemotePolicyConfig("tcp://10.0.0.2:5555", "server.key", "robot.key_secret").remote


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"endpoint": "http://h:1"}, "policy.endpoint: expected tcp://host:port or ipc://path, got 'http://h:1'"),
        ({"server_public_key": "s.key"}, "policy.client_secret_key: expected a key file with the other CURVE key"),
        ({"client_secret_key": "r.key"}, "policy.server_public_key: expected a key file with the other CURVE key"),
        ({"timeout_s": 0.0}, "policy.timeout_s: expected 0.02 to 10 seconds, got 0.0"),
        ({"ping_s": 1.0}, "policy.ping_s: expected 0.01 s to policy.timeout_s (0.5 s), got 1.0"),
        ({"connect_wait_s": -1.0}, "policy.connect_wait_s: expected seconds >= 0, got -1.0"),
        ({"fallback_after_s": -0.1}, "policy.fallback_after_s: expected 0 to 60 seconds, got -0.1"),
        (
            {"request_timeout_s": 0.1},
            "policy.request_timeout_s: expected policy.timeout_s (0.5 s) to 60 seconds, got 0.1",
        ),
    ],
)
def test_a_bad_value_is_refused_by_key(fields: dict[str, object], message: str) -> None:
    values: dict[str, object] = {"endpoint": "tcp://127.0.0.1:5555", **fields}
    with pytest.raises(ConfigError) as e:
        RemotePolicyConfig(**values)  # type: ignore[arg-type]
    assert str(e.value).startswith(message)
