#!/usr/bin/env bash
# The protobuf-facing protocol tests (and the Flower tests) on the lowest and on the highest supported
# protobuf, each in its own venv, so the interpreter that runs the main suite is untouched.
#
#   low:  protobuf 5.29.*, grpcio 1.70.0, grpcio-tools 1.70.0 (the pinned codegen: the
#         byte-exact stub freshness test runs here), flwr[simulation] 1.42.0 (tests/flower
#         run here, the example app's `flwr run` in the simulation engine too)
#   high: the newest protobuf < 8, grpcio and grpcio-tools
#
# Fails when either run fails. The venvs are kept under $OMNIFC_MATRIX_DIR (default
# /tmp/omnifc-protobuf-matrix) and rebuilt when setup.cfg or the pins below change.
# Usage: bash .ci/protobuf_matrix.sh [low|high]...   (default: low high)
#
# What runs: the tests marked `protobuf` (the modules that load the stubs, parse and build
# the wire format, run both transports and TLS, mark themselves with
# `pytestmark = pytest.mark.protobuf`; tests/flower/conftest.py marks every Flower test), so
# a renamed test file keeps its place. MATRIX_MARK overrides the marker expression (e.g.
# MATRIX_MARK="protobuf and not slow" leaves out the Flower example's simulation and
# deployment runs), MATRIX_TESTS the paths (e.g. MATRIX_TESTS=tests/protocols MATRIX_MARK=
# for every protocol test).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BASE=${OMNIFC_MATRIX_DIR:-/tmp/omnifc-protobuf-matrix}
PYTHON=${PYTHON:-python}
read -r -a TESTS <<< "${MATRIX_TESTS:-tests/protocols tests/flower}"
MARK=${MATRIX_MARK-protobuf}

pins() {
    case "$1" in
        low) echo "protobuf==5.29.* grpcio==1.70.0 grpcio-tools==1.70.0 flwr[simulation]==1.42.0" ;;
        high) echo "protobuf<8 grpcio grpcio-tools" ;;
        *) echo "unknown matrix entry '$1' (expected low or high)" >&2; return 2 ;;
    esac
}

make_venv() {
    local name=$1 venv="$BASE/$1" spec stamp
    spec=$(pins "$name")
    # what the venv is built from: setup.cfg's requirements and this entry's pins
    stamp=$( (cat setup.cfg; echo "$spec") | sha256sum | cut -c1-16)
    if [[ -f "$venv/.stamp" && "$(cat "$venv/.stamp")" == "$stamp" ]]; then
        return 0
    fi
    rm -rf "$venv"
    mkdir -p "$BASE"
    "$PYTHON" -m venv "$venv"
    # shellcheck disable=SC2086  # the pins are separate words
    "$venv/bin/pip" install -q --upgrade -e "$ROOT[test]" $spec
    echo "$stamp" > "$venv/.stamp"
}

status=0
for name in "${@:-low high}"; do
    for entry in $name; do
        start=$SECONDS
        make_venv "$entry"
        versions=$("$BASE/$entry/bin/python" -c 'import google.protobuf as p, grpc; print(f"protobuf {p.__version__}, grpcio {grpc.__version__}")')
        echo "== protobuf matrix [$entry]: $versions"
        select=()
        if [[ -n "$MARK" ]]; then select=(-m "$MARK"); fi
        if ! "$BASE/$entry/bin/python" -m pytest "${TESTS[@]}" "${select[@]}" -q \
                -p no:cacheprovider -o addopts="-ra --strict-markers"; then
            echo "== protobuf matrix [$entry]: FAILED" >&2
            status=1
        fi
        echo "== protobuf matrix [$entry]: $((SECONDS - start)) s"
    done
done
exit $status
