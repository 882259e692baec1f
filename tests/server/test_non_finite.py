"""NaN and infinity in an observation are refused per input (bad_input naming it), unless allowed."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from runtime.client import PolicyClient
from runtime.errors import ConfigError
from runtime.protocol.errors import ServerError
from runtime.server import PolicyServer
from runtime.server.synthetic import DEMO, STATE, example_observation


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_state_is_refused_naming_the_input(server: PolicyServer, bad: float) -> None:
    obs = example_observation(DEMO, seed=2)
    obs[STATE] = obs[STATE].copy()
    obs[STATE][3] = bad
    with PolicyClient(server.bound_endpoints[0], timeout_s=5) as client:
        with pytest.raises(ServerError) as err:
            client.infer(obs)
        assert err.value.code == "bad_input" and err.value.field == STATE
        assert "1 of 6 values are not finite" in err.value.message and "index [3]" in err.value.message
        assert err.value.request_id is not None
        obs[STATE][3] = 0.0
        assert client.infer(obs).actions.shape == (DEMO.chunk, 6)


def test_allowed_input_may_carry_nan(make_server: Callable[..., PolicyServer]) -> None:
    server = make_server(allow_non_finite=(STATE,))
    obs = example_observation(DEMO, seed=2)
    obs[STATE] = obs[STATE].copy()
    obs[STATE][0] = np.nan
    with PolicyClient(server.bound_endpoints[0], timeout_s=5) as client:
        assert client.infer(obs).actions.shape == (DEMO.chunk, 6)


def test_allow_list_names_must_be_inputs(make_server: Callable[..., PolicyServer]) -> None:
    with pytest.raises(ConfigError, match=r"server.allow_non_finite: 'observation.nope' is not an input"):
        make_server(allow_non_finite=("observation.nope",))
