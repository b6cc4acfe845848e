"""Every Flower test loads the stubs beside flwr 1.42 (the `protobuf` marker). The main
interpreter has no flwr, so they skip there; .ci/run runs the in-process ones (marked
`protobuf_matrix`: the workflow and the strategy) in the low venv of .ci/protobuf_matrix.sh,
which has flwr 1.42; the example's and the benchmark's runs (real Flower processes, minutes)
run with MATRIX_MARK=protobuf or in any venv with flwr."""

import pytest


def pytest_collection_modifyitems(config, items):
    here = __file__.rsplit("/", 1)[0]
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.protobuf)
