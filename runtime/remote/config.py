"""``[policy]``: where the loop's policy runs. Empty ``endpoint``: in this daemon (``[engine]``);
``tcp://host:port``: a lerobot-runtime on another machine, reached with CURVE keys off this host."""

from __future__ import annotations

from dataclasses import dataclass

from runtime.errors import ConfigError
from runtime.server.endpoints import is_local_endpoint


@dataclass(frozen=True)
class RemotePolicyConfig:
    """``endpoint``: the remote server (``tcp://host:port``; ``ipc://`` for one on this machine).
    ``server_public_key``: that server's public key file; ``client_secret_key``: this robot's own key
    pair (the ``.key_secret`` file; its public half goes in the remote's ``authorized_keys_dir``).
    ``timeout_s``: the silence bound: a ping not answered within it and the link counts as lost (the
    loop holds). ``ping_s``: how often the link is checked (while chunks are computed too).
    ``request_timeout_s``: the longest a request waits for its chunk (the model's time included).
    ``connect_wait_s``: how long start-up waits for the remote's first answer (it tells the loop what
    the policy takes). ``fallback``: when the remote is lost, after holding ``fallback_after_s``, the
    small local bundle of ``[engine]`` drives until the next ``control start``."""

    endpoint: str = ""
    server_public_key: str = ""
    client_secret_key: str = ""
    timeout_s: float = 0.5
    ping_s: float = 0.1
    request_timeout_s: float = 5.0
    connect_wait_s: float = 60.0
    fallback: bool = False
    fallback_after_s: float = 0.5

    @property
    def remote(self) -> bool:
        return bool(self.endpoint)

    def __post_init__(self) -> None:
        ep = self.endpoint
        if not ep:
            given = [k for k in ("server_public_key", "client_secret_key", "fallback") if getattr(self, k)]
            if given:
                raise ConfigError(f"policy.{given[0]}: set only with policy.endpoint (the remote server), got none")
            return
        if not ep.startswith(("tcp://", "ipc://")):
            raise ConfigError(f"policy.endpoint: expected tcp://host:port or ipc://path, got {ep!r}")
        keys = (self.server_public_key, self.client_secret_key)
        if any(keys) and not all(keys):
            missing = "server_public_key" if not self.server_public_key else "client_secret_key"
            raise ConfigError(f"policy.{missing}: expected a key file with the other CURVE key, got none")
        if not is_local_endpoint(ep) and not all(keys):
            raise ConfigError(
                f"policy.endpoint: {ep} is another host: observations and chunks would cross the network "
                "unencrypted and unauthenticated; set policy.server_public_key (the remote's public key) and "
                "policy.client_secret_key (this robot's key pair; make one with 'lerobot-runtime keys')"
            )
        if not 0.02 <= self.timeout_s <= 10:
            raise ConfigError(f"policy.timeout_s: expected 0.02 to 10 seconds, got {self.timeout_s}")
        if not 0.01 <= self.ping_s <= self.timeout_s:
            raise ConfigError(
                f"policy.ping_s: expected 0.01 s to policy.timeout_s ({self.timeout_s} s), got {self.ping_s}"
            )
        if not self.timeout_s <= self.request_timeout_s <= 60:
            raise ConfigError(
                f"policy.request_timeout_s: expected policy.timeout_s ({self.timeout_s} s) to 60 seconds, "
                f"got {self.request_timeout_s}"
            )
        if not 0 <= self.fallback_after_s <= 60:
            raise ConfigError(f"policy.fallback_after_s: expected 0 to 60 seconds, got {self.fallback_after_s}")
        if self.connect_wait_s < 0:
            raise ConfigError(f"policy.connect_wait_s: expected seconds >= 0, got {self.connect_wait_s}")
