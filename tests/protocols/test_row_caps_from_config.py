"""The session config's public row caps reach the protocol: the coordinator and every party
refuse a party above the cap before allocating anything for it."""

import numpy as np
import pytest

from protocols import (ConfigParameters, InputError, PartyEntry, PeerError, SessionConfig, TLSSettings,
                       parameters_from_config, run_memory_session)

pytestmark = pytest.mark.timeout(60)


def _config(per_party: int, total: int) -> SessionConfig:
    parties = tuple(PartyEntry(name, bytes([i + 1]) * 32) for i, name in enumerate("abc"))
    return SessionConfig(session_id="ab" * 16, coordinator="127.0.0.1:50051", parties=parties,
                         tls=TLSSettings(enabled=False),
                         parameters=ConfigParameters(dim=3, bound=4.0, scale_bits=6,
                                                     max_rows_per_party=per_party,
                                                     max_rows_total=total))


def test_config_caps_become_session_parameters():
    params = parameters_from_config(_config(7, 19))
    assert (params.max_rows_per_party, params.max_rows_total) == (7, 19)


def _data(rows):
    rng = np.random.default_rng(5)
    return {name: rng.uniform(-1, 1, (n, 3)) for name, n in zip("abc", rows)}


def test_a_party_above_the_configured_cap_is_refused():
    params = parameters_from_config(_config(5, 100))
    outcome, _ = run_memory_session(_data([5, 5, 5]), params)      # at the cap: fine
    assert outcome.integer.shape == (15, 15)
    # an honest party over the cap refuses before it sends anything (a lying hello is
    # refused by the coordinator: tests/protocols/test_malicious_coordinator.py)
    with pytest.raises(InputError, match="party 'b'.*max_rows_per_party = 5"):
        run_memory_session(_data([5, 6, 5]), params)


def test_a_roster_above_the_configured_total_is_refused():
    params = parameters_from_config(_config(10, 14))
    with pytest.raises(PeerError, match="max_rows_total = 14"):
        run_memory_session(_data([5, 5, 5]), params)
