#!/usr/bin/env bash
# The tests that exercise the protobuf runtime on the lowest and on the highest supported
# protobuf, each in its own venv, so the interpreter that runs the main suite is untouched.
#
#   low:  protobuf 5.29.*, grpcio 1.70.0, grpcio-tools 1.70.0 (the pinned codegen: the
#         byte-exact stub freshness test runs here), flwr 1.42.* (the Flower workflow and
#         strategy tests run here, over an in-process Grid)
#   high: the newest protobuf < 8, grpcio and grpcio-tools
#
# The venvs are made with --system-site-packages and only override those packages (numpy,
# numba, scikit-learn, pytest... come from the interpreter that runs the main suite, which
# .ci/run set up with `pip install -e ".[test]"`), so a fresh one builds in seconds. The
# checkout itself is imported through PYTHONPATH, not installed. Before the tests run, each
# entry prints the versions its interpreter imports and fails unless they are the entry's
# (an override that did not take effect is a failure, not a silent run on the main
# interpreter's protobuf).
#
# What runs: the tests marked `protobuf_matrix` (stubs load, the wire format and the
# messages round trip, the codegen freshness at the pinned grpcio-tools, the sans-IO and
# in-memory sessions through serialized envelopes, one gRPC+mutual-TLS session, the Flower
# workflow and strategy tests). MATRIX_MARK overrides the marker expression (e.g.
# MATRIX_MARK=protobuf for every test that loads the stubs: tens of minutes), MATRIX_TESTS
# the paths. Fails when either entry fails, when pytest collects nothing (exit 5) and when a
# version does not match.
#
# The venvs are kept under $OMNIFC_MATRIX_DIR (default /tmp/omnifc-protobuf-matrix) and
# rebuilt when this script or setup.cfg changes.
# Usage: bash .ci/protobuf_matrix.sh [low|high]...   (default: low high)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BASE=${OMNIFC_MATRIX_DIR:-/tmp/omnifc-protobuf-matrix}
PYTHON=${PYTHON:-python}
read -r -a TESTS <<< "${MATRIX_TESTS:-tests/protocols tests/flower}"
MARK=${MATRIX_MARK-protobuf_matrix}

pins() {
    case "$1" in
        low) echo "protobuf==5.29.* grpcio==1.70.0 grpcio-tools==1.70.0 flwr==1.42.*" ;;
        high) echo "protobuf<8 grpcio grpcio-tools" ;;
        *) echo "unknown matrix entry '$1' (expected low or high)" >&2; return 2 ;;
    esac
}

# What each entry's interpreter must import: name=version-prefix (a prefix of the version;
# "7." for the high entry: the newest major the stubs support). Each must come from the
# venv's own site-packages, not from the main interpreter's.
expected() {
    case "$1" in
        low) echo "google.protobuf=5.29. grpc=1.70.0 grpc_tools=1.70.0 flwr=1.42." ;;
        high) echo "google.protobuf=7. grpc= grpc_tools=" ;;
    esac
}

make_venv() {
    local name=$1 venv="$BASE/$1" spec stamp
    spec=$(pins "$name")
    # what the venv is built from: this script, setup.cfg and the interpreter
    stamp=$( (cat "$0" setup.cfg; "$PYTHON" -VV) | sha256sum | cut -c1-16)
    if [[ -f "$venv/.stamp" && "$(cat "$venv/.stamp")" == "$stamp" ]]; then
        return 0
    fi
    rm -rf "$venv"
    mkdir -p "$BASE"
    "$PYTHON" -m venv --system-site-packages "$venv"
    # the venv's bundled pip can be older than the main interpreter's packages' metadata
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
    # protobuf, grpcio and grpcio-tools go into the venv even when the main interpreter has
    # a satisfying version (--ignore-installed; else the high entry would silently test the
    # main interpreter's protobuf), without their dependencies (--no-deps: numpy and the rest
    # stay the main interpreter's); then whatever the entry still lacks (flwr and its
    # dependencies) is resolved against both
    # shellcheck disable=SC2086  # the pins are separate words
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --ignore-installed \
        --no-deps $(tr ' ' '\n' <<< "$spec" | grep -E '^(protobuf|grpcio|grpcio-tools)([=<>!~].*)?$' \
        | tr '\n' ' ')
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install -q --disable-pip-version-check $spec
    echo "$stamp" > "$venv/.stamp"
}

check_versions() {
    local name=$1 venv="$BASE/$1"
    # shellcheck disable=SC2046
    "$venv/bin/python" - "$venv" $(expected "$name") <<'EOF'
import importlib, os, sys
venv, wanted = os.path.realpath(sys.argv[1]), sys.argv[2:]
found, bad = [], []
for item in wanted:
    module, prefix = item.split("=", 1)
    mod = importlib.import_module(module)
    version = getattr(mod, "__version__", None)
    if version is None:  # grpc_tools has no __version__
        from importlib.metadata import version as dist_version
        version = dist_version(module.replace("_", "-").replace("grpc-tools", "grpcio-tools"))
    where = os.path.realpath(mod.__file__)
    found.append(f"{module} {version}")
    if not str(version).startswith(prefix):
        bad.append(f"{module} {version} (expected {prefix}*)")
    if not where.startswith(venv + os.sep):
        bad.append(f"{module} from {where} (not from the venv {venv})")
print(", ".join(found))
if bad:
    sys.exit("version mismatch: " + "; ".join(bad))
EOF
}

status=0
for name in "${@:-low high}"; do
    for entry in $name; do
        start=$SECONDS
        make_venv "$entry"
        built=$((SECONDS - start))
        if ! versions=$(check_versions "$entry"); then
            echo "== protobuf matrix [$entry]: FAILED ($versions)" >&2
            status=1
            continue
        fi
        echo "== protobuf matrix [$entry]: $versions (venv ready in $built s)"
        select=()
        if [[ -n "$MARK" ]]; then select=(-m "$MARK"); fi
        code=0
        PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$BASE/$entry/bin/python" -m pytest \
            "${TESTS[@]}" "${select[@]}" -q -p no:cacheprovider -p no:xdist \
            -o addopts="-ra --strict-markers" || code=$?
        if [[ $code -ne 0 ]]; then  # 5 (nothing collected) fails too
            echo "== protobuf matrix [$entry]: FAILED (pytest exit $code)" >&2
            status=1
        fi
        echo "== protobuf matrix [$entry]: $((SECONDS - start)) s"
    done
done
exit $status
