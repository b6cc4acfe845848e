"""Every Flower test runs on the lowest protobuf, beside flwr 1.42 (.ci/protobuf_matrix.sh:
the `protobuf` marker; the high venv has no flwr, so there they skip)."""

import pytest


def pytest_collection_modifyitems(config, items):
    here = __file__.rsplit("/", 1)[0]
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.protobuf)
