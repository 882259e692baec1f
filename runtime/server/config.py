"""The ``[server]`` table: endpoints, queue bounds, message size limit and CURVE keys."""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.errors import ConfigError

DEFAULT_ENDPOINTS = ("ipc://policy.sock", "tcp://127.0.0.1:5555")


@dataclass(frozen=True)
class CurveConfig:
    """CURVE encryption and client authentication (``[server.curve]``).

    ``server_secret_key`` is the server's ``.key_secret`` file and ``authorized_keys_dir`` a folder of
    client public ``.key`` files, both in the format ``lerobot-runtime keys`` (``zmq.auth``) writes.
    When set, every ``tcp://`` endpoint requires CURVE; ``ipc://`` endpoints rely on the runtime
    directory's file permissions. Without them only loopback and ipc endpoints may be bound.
    """

    server_secret_key: str = ""
    authorized_keys_dir: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.server_secret_key or self.authorized_keys_dir)

    def __post_init__(self) -> None:
        if bool(self.server_secret_key) != bool(self.authorized_keys_dir):
            raise ConfigError(
                "server.curve: set both server_secret_key and authorized_keys_dir, got "
                f"server_secret_key={self.server_secret_key!r}, "
                f"authorized_keys_dir={self.authorized_keys_dir!r}"
            )


@dataclass(frozen=True)
class ServerConfig:
    """Where the server listens and how much it buffers.

    Relative ``ipc://`` paths live in the runtime directory (``$RUNTIME_DIRECTORY`` under systemd).
    ``queue_depth`` bounds the infer requests waiting for the engine; past it clients get ``busy``.
    With ``latest_observation_wins`` a newer infer from the same client replaces its queued older
    one, which is answered ``superseded``. ``max_message_bytes`` 0 means twice the policy's inputs
    plus 64 KiB. Observations with NaN or infinity are refused ``bad_input`` unless the input is
    named in ``allow_non_finite``. ``canary_interval_s``: how often the bundle's test case is
    replayed and checked between requests while serving (0: never); a failed check stops serving
    until a reload.

    For a policy that takes several observations at once (the manifest's ``observation_history``),
    each client's history restarts from its next observation when the previous one is older than
    ``history_max_gap_s`` (0: never). ``noise_seed`` seeds the generator that draws a generative
    policy's sampling noise per request (absent: fresh entropy at each start); set it to reproduce
    a run's chunks.
    """

    endpoints: tuple[str, ...] = DEFAULT_ENDPOINTS
    queue_depth: int = 4
    latest_observation_wins: bool = True
    max_message_bytes: int = 0
    canary_interval_s: float = 5.0
    curve: CurveConfig = field(default_factory=CurveConfig)
    allow_non_finite: tuple[str, ...] = ()
    history_max_gap_s: float = 2.0
    noise_seed: int | None = None

    def __post_init__(self) -> None:
        if not self.endpoints:
            raise ConfigError("server.endpoints: expected at least one endpoint, got an empty list")
        for ep in self.endpoints:
            if not ep.startswith(("ipc://", "tcp://")):
                raise ConfigError(f"server.endpoints: expected ipc://PATH or tcp://HOST:PORT, got {ep!r}")
        if self.queue_depth < 1:
            raise ConfigError(f"server.queue_depth: expected >= 1, got {self.queue_depth}")
        if not (self.canary_interval_s == 0 or 0.01 <= self.canary_interval_s <= 86400):
            raise ConfigError(
                "server.canary_interval_s: expected 0 (off) or a period in [0.01, 86400] seconds, "
                f"got {self.canary_interval_s}"
            )
        if not (self.history_max_gap_s >= 0 and self.history_max_gap_s < float("inf")):
            raise ConfigError(
                f"server.history_max_gap_s: expected 0 (never restart) or seconds > 0, got {self.history_max_gap_s}"
            )
        if self.noise_seed is not None and not 0 <= self.noise_seed < 2**64:
            raise ConfigError(f"server.noise_seed: expected an integer in [0, 2**64), got {self.noise_seed}")
        if self.max_message_bytes < 0:
            raise ConfigError(
                f"server.max_message_bytes: expected 0 (auto) or a byte count, got {self.max_message_bytes}"
            )
