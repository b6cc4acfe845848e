#!/usr/bin/env bash
# The protobuf-facing protocol tests (and the Flower tests) on the lowest and on the highest supported
# protobuf, each in its own venv, so the interpreter that runs the main suite is untouched.
#
#   low:  protobuf 5.29.*, grpcio 1.70.0, grpcio-tools 1.70.0 (the pinned codegen: the
#         byte-exact stub freshness test runs here), flwr 1.42.0 (tests/flower run here)
#   high: the newest protobuf < 8, grpcio and grpcio-tools
#
# Fails when either run fails. The venvs are kept under $OMNIFC_MATRIX_DIR (default
# /tmp/omnifc-protobuf-matrix) and rebuilt when setup.cfg or this script changes.
# Usage: bash .ci/protobuf_matrix.sh [low|high]...   (default: low high)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BASE=${OMNIFC_MATRIX_DIR:-/tmp/omnifc-protobuf-matrix}
PYTHON=${PYTHON:-python}
STAMP=$(cat setup.cfg .ci/protobuf_matrix.sh | sha256sum | cut -c1-16)
# The tests that touch protobuf and grpc (the stubs, the wire format, both transports, TLS)
# plus the Flower tests; MATRIX_TESTS overrides (e.g. MATRIX_TESTS=tests/protocols).
read -r -a TESTS <<< "${MATRIX_TESTS:-tests/protocols/test_codegen.py \
tests/protocols/test_wire_bites.py tests/protocols/test_messages_bites.py \
tests/protocols/test_messages_bites2.py tests/protocols/test_sansio.py \
tests/protocols/test_memory.py tests/protocols/test_grpc.py tests/protocols/test_tls.py \
tests/protocols/test_integrity_grpc.py tests/protocols/test_session_fingerprint_tls.py \
tests/flower}"

pins() {
    case "$1" in
        low) echo "protobuf==5.29.* grpcio==1.70.0 grpcio-tools==1.70.0 flwr==1.42.0" ;;
        high) echo "protobuf<8 grpcio grpcio-tools" ;;
        *) echo "unknown matrix entry '$1' (expected low or high)" >&2; return 2 ;;
    esac
}

make_venv() {
    local name=$1 venv="$BASE/$1" spec
    spec=$(pins "$name")
    if [[ -f "$venv/.stamp" && "$(cat "$venv/.stamp")" == "$STAMP" ]]; then
        return 0
    fi
    rm -rf "$venv"
    mkdir -p "$BASE"
    "$PYTHON" -m venv "$venv"
    # shellcheck disable=SC2086  # the pins are separate words
    "$venv/bin/pip" install -q --upgrade -e "$ROOT[test]" $spec
    echo "$STAMP" > "$venv/.stamp"
}

status=0
for name in "${@:-low high}"; do
    for entry in $name; do
        start=$SECONDS
        make_venv "$entry"
        versions=$("$BASE/$entry/bin/python" -c 'import google.protobuf as p, grpc; print(f"protobuf {p.__version__}, grpcio {grpc.__version__}")')
        echo "== protobuf matrix [$entry]: $versions"
        if ! "$BASE/$entry/bin/python" -m pytest "${TESTS[@]}" -q -p no:cacheprovider \
                -o addopts="-ra --strict-markers"; then
            echo "== protobuf matrix [$entry]: FAILED" >&2
            status=1
        fi
        echo "== protobuf matrix [$entry]: $((SECONDS - start)) s"
    done
done
exit $status
