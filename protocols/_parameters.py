"""The public session parameters, declared once.

:data:`PARAMETERS` is a table with one :class:`Parameter` per public session parameter:
its name, type, default, allowed values, one-line help, the TOML table it lives in, whether
the session fingerprint covers it, its command-line flag and whether ``omnifc audit`` takes
it. Everything else follows from the table, in the spirit of scikit-learn's
``_parameter_constraints``:

- :class:`SessionParameters` (this module): its fields, defaults, checks and docstring,
  and its proto conversion (``to_proto`` / ``from_proto`` iterate the table);
- the session config (:mod:`protocols._config`): the ``[parameters]`` fields of
  :class:`~protocols.ConfigParameters`, the ``[session]`` keys mode, integrity and
  adversaries, reading and writing TOML, the canonical JSON the fingerprint hashes, and
  :func:`~protocols.parameters_from_config`;
- the command-line options of ``omnifc session new`` / ``certs``, ``audit``, ``demo``
  and ``simulate`` (:func:`add_parameter_options`) and the session fields of
  :class:`omnifc.audit.AuditParameters`.

Every message about a bad value comes from the checks of this module: the session
object's messages name the bare field (``mode must be one of ('masked', 'transparent'),
got 'open'``), the config's name the key in its table (``[session] mode must be one of
['masked', 'transparent'], got 'open'``).

Adding a parameter: one :class:`Parameter` row in :data:`PARAMETERS` (and a proto field in
``proto/omnifc/v1/omnifc.proto`` when it goes on the wire); tests/protocols/
test_parameter_table.py proves that the row reaches the config, the proto, the
fingerprint, the CLI and the audit.

>>> from protocols._parameters import PARAMETERS, SessionParameters
>>> [p.name for p in PARAMETERS if p.table == "session"]
['mode', 'integrity', 'adversaries']
>>> SessionParameters(dim=4, bound=8.0).mode
'masked'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional

import numpy as np

from finite_field import (INTEGRITY_POLICIES, CodingPlan, ParameterError, Quantizer,
                          check_adversaries, choose_primes, make_plan, min_parties)

from ._layouts import (DEFAULT_MAX_LANDMARKS, DEFAULT_MAX_PAIRS, LAYOUTS, MAX_PAIRS,
                       check_layout, layout_rows)
from ._mask_graph import check_distance_mask_degree, check_mask_degree

__all__ = ["Parameter", "PARAMETERS", "PARAMETER", "SessionParameters", "MODES", "KINDS",
           "INTEGRITY", "DEFAULT_CHUNK_BYTES", "DEFAULT_MAX_ROWS_PER_PARTY",
           "DEFAULT_MAX_ROWS_TOTAL", "MAX_DIM", "MAX_ROWS", "REQUIRED", "parameter_fields",
           "table_fields", "check_parameters", "check_config_fields", "show",
           "add_parameter_options", "values_from_options", "LAYOUTS"]

#: Aggregation modes: "masked" (default; the coordinator learns only D) and "transparent"
#: (opt-in; the coordinator sees every per-party evaluation, i.e. per-segment distances).
MODES = ("masked", "transparent")
#: What a session computes: pairwise squared distances, or a secure sum of vectors.
KINDS = ("distance", "sum")
#: Integrity policies (docs/protocol.md): Reed-Solomon checks on the uploads, and what a
#: detected deviation does: "detect" excludes the parties at fault and reruns (or aborts),
#: "correct" corrects located errors and names the parties, "off" is the unchecked
#: weighted-pairwise-mask upload.
INTEGRITY = INTEGRITY_POLICIES
#: Payload bytes per share chunk or evaluation tile (well under gRPC's 4 MB default).
DEFAULT_CHUNK_BYTES = 1 << 20
#: Public row caps (per party and in total) of a session unless its config says otherwise.
DEFAULT_MAX_ROWS_PER_PARTY = 1_000_000
DEFAULT_MAX_ROWS_TOTAL = 2_000_000
#: Largest d a session config accepts (2^20 features; an image of 224 x 224 x 3 has 150528).
MAX_DIM = 2**20
#: Largest row cap a session config accepts (D alone would have 10^14 entries).
MAX_ROWS = 10_000_000

#: The default of a parameter every caller must give (d and R of a SessionParameters).
REQUIRED = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()
_SAME = object()


def show(value) -> str:
    """repr of a value for an error message, shortened."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# --- the checks (every message about one value comes from here) -------------------------

def _integer(value, key: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """The config's integer check: ``[parameters] dim must be >= 0, got -1``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ParameterError(f"{key} must be an integer, got {show(value)}")
    if minimum is not None and value < minimum:
        raise ParameterError(f"{key} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ParameterError(f"{key} must be <= {maximum}, got {value}")
    return int(value)


def _positive_number(value, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ParameterError(f"{key} must be a finite number > 0, got {show(value)}")
    return float(value)


def _boolean(value, key: str) -> bool:
    if not isinstance(value, bool):
        raise ParameterError(f"{key} must be true or false, got {show(value)}")
    return value


def _config_primes(value, key: str) -> tuple:
    from finite_field import validate_prime

    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise ParameterError(f"{key} must be a list of integers, got {show(value)}")
    primes = tuple(value)
    for p in primes:
        _integer(p, f"{key} entries")
        validate_prime(p, what=f"{key} entry")
    if len(set(primes)) != len(primes):
        raise ParameterError(f"{key} must be distinct, got {list(primes)}")
    return primes


def _choice(value, key: str, choices: tuple, *, listed: bool) -> str:
    """``key must be one of ...``: the object's messages show a tuple and repr, the
    config's a list and a shortened repr."""
    if value not in choices:
        raise ParameterError(f"{key} must be one of {list(choices) if listed else choices}, "
                             f"got {show(value) if listed else repr(value)}")
    return value


def _row_cap(value, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or not 1 <= int(value) < 1 << 40:
        raise ParameterError(f"{key} must be an integer in [1, 2^40), got {value!r}")
    return int(value)


def _chunk_bytes(value, key: str) -> int:
    if not 4096 <= int(value) <= 3 << 20:
        raise ParameterError(f"{key} must be in [4096, 3 MiB], got {value}")
    return value


def _adversaries(value, key: str):
    if value is None:
        return None
    if isinstance(value, bool) or not hasattr(value, "__index__") or int(value) < 0:
        raise ParameterError(f"{key} (A) must be an integer >= 0, got {value!r}")
    return int(value)


#: Longest reconnect grace period a session accepts (seconds).
MAX_RECONNECT_GRACE = 3600.0
#: The default grace period (seconds): a connection reset, a NAT timeout or a brief outage
#: costs a reconnect, not the round.
DEFAULT_RECONNECT_GRACE = 30.0
#: Longest keepalive interval a session accepts (seconds).
MAX_KEEPALIVE = 3600.0
#: The default keepalive (seconds): a link that went silent without closing (half-open)
#: is noticed within about twice this, then reconnected like a reset.
DEFAULT_KEEPALIVE = 30.0


def _finite_real(value) -> bool:
    """A finite int or float (numpy's included), not a bool: a number of seconds."""
    return not isinstance(value, bool) and \
        isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(value)


def _grace(value, key: str) -> float:
    if value is None:  # unset on the wire: the default (0.0 is a value: no reconnect)
        return DEFAULT_RECONNECT_GRACE
    if not _finite_real(value) or not 0 <= value <= MAX_RECONNECT_GRACE:
        raise ParameterError(f"{key} must be a number of seconds in [0, "
                             f"{MAX_RECONNECT_GRACE:g}] (0: no reconnect), got {show(value)}")
    return float(value)


def _keepalive(value, key: str) -> float:
    if value is None:  # unset on the wire (an older coordinator): the default
        return DEFAULT_KEEPALIVE
    if not _finite_real(value) or not (value == 0 or 1 <= value <= MAX_KEEPALIVE):
        raise ParameterError(f"{key} must be 0 (no keepalive) or a number of seconds in "
                             f"[1, {MAX_KEEPALIVE:g}], got {show(value)}")
    return float(value)


def _points(value, key: str):
    return None if value is None else tuple(int(v) for v in value)


def _session_mask_degree(value, values: dict) -> int:
    # distance sessions: 0 or k >= t + 1 (the coordinator can leave r = 0, and then the
    # pairwise masks alone must withstand t colluders); sums have no t
    if values.get("kind") == "sum":
        return check_mask_degree(value)
    return check_distance_mask_degree(value, values.get("noise_segments"))


def _config_mask_degree(value, values: dict) -> int:
    _integer(value, "[parameters] mask_degree (0 = every pair masks)", 0, (1 << 20) - 1)
    return check_distance_mask_degree(value, values.get("noise_segments"),
                                      name="[parameters] mask_degree")


def _session_layout(value, values: dict) -> str:
    """The layout's checks that need no roster (:func:`protocols._layouts.check_layout`),
    and a landmark row of uploads must fit one tile (4 bytes per landmark)."""
    check_layout(value, values["layout_rows"], values["n_landmarks"],
                 max_landmarks=values["max_landmarks"], max_pairs=values["max_pairs"],
                 kind=values.get("kind", "distance"))
    count = len(values["layout_rows"]) or values["n_landmarks"]
    if value == "landmarks" and 4 * count > values["chunk_bytes"]:
        raise ParameterError(f"{count} landmarks make a row of {4 * count} bytes, more than "
                             f"chunk_bytes = {values['chunk_bytes']} (one tile)")
    return value


def _config_layout(value, values: dict) -> str:
    check_layout(value, values["layout_rows"], values["n_landmarks"],
                 max_landmarks=values["max_landmarks"], max_pairs=values["max_pairs"],
                 prefix="[parameters] ")
    return value


# --- the table --------------------------------------------------------------------------

@dataclass(frozen=True)
class Parameter:
    """One public session parameter: everything any layer needs to know about it.

    Attributes
    ----------
    name, annotation, help
        Field name, its type (as a string annotation) and a one-line help text (the CLI's
        help; the TOML comment unless ``comment`` is given).
    default
        The default of :class:`SessionParameters` (:data:`REQUIRED`: none).
    doc
        A longer description for the docstring (defaults to ``help``).
    check
        ``check(value, key)`` -> the stored value; ParameterError naming ``key``. The check
        of :class:`SessionParameters`.
    cross_check
        ``cross_check(value, values)`` -> the stored value, for a value whose validity
        depends on other fields (given as ``values``); runs after every ``check``.
    table
        ``"parameters"`` or ``"session"``: the TOML table of the session config it lives
        in; None: not in the config (decided per session, e.g. the kind or the points).
    config_default, config_check
        The config's default (when it differs from ``default``) and its check
        (``config_check(value, key)``, or ``(value, values)`` for a ``config_cross``).
    comment
        The comment the TOML writer puts next to the key.
    fingerprint
        ``"always"``, ``"unless-default"`` (left out at the default so that older configs
        keep their fingerprint) or ``"never"``. Only config fields are fingerprinted.
    flag, metavar, choices, cli_type
        The command-line option (``--mask-degree``), how it parses.
    audit
        Whether :class:`omnifc.audit.AuditParameters` takes it.
    wire, wire_missing, from_plan
        The proto field (``Parameters.<wire>``; None: not sent), the value an empty wire
        field means (proto3 has no "unset" for scalars), and ``from_plan(parameters,
        plan)``: the value sent when the plan fixes it (the primes chosen, A resolved, the
        points).
    example
        A valid value other than the default, valid together with every other row's
        example (a session of 9 parties): tests/protocols/test_parameter_table.py writes,
        reads, fingerprints, sends and parses every config and audit row with it, so a new
        row brings its own test value. Required of the rows in the config or the audit.
    """

    name: str
    annotation: str
    help: str
    default: Any = REQUIRED
    doc: str = ""
    check: Optional[Callable] = None
    cross_check: Optional[Callable] = None
    table: Optional[str] = None
    config_default: Any = _SAME
    config_check: Optional[Callable] = None
    config_cross: Optional[Callable] = None
    config_label: Optional[str] = None
    comment: Optional[str] = None
    fingerprint: str = "always"
    flag: Optional[str] = None
    metavar: Optional[str] = None
    choices: Optional[tuple] = None
    cli_type: Any = None
    audit: bool = False
    wire: Optional[str] = _SAME
    wire_missing: Any = _SAME
    repeated: bool = False
    optional_on_wire: bool = False
    from_plan: Optional[Callable] = None
    example: Any = _SAME

    @property
    def in_config(self) -> bool:
        return self.table is not None

    @property
    def default_in_config(self):
        return self.default if self.config_default is _SAME else self.config_default

    @property
    def wire_name(self) -> Optional[str]:
        return self.name if self.wire is _SAME else self.wire

    @property
    def option(self) -> str:
        """The flag, ``--dim`` for ``dim`` unless given."""
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def key(self) -> str:
        """How config messages name it: ``[parameters] dim``."""
        return f"[{self.table}] {self.config_label or self.name}"


def _coding_points(index: int):
    def points(parameters, plan):
        return tuple(getattr(plan.codes[0], ("alphas", "betas")[index])) \
            if isinstance(plan, CodingPlan) else None
    return points


PARAMETERS: tuple[Parameter, ...] = (
    Parameter(
        "dim", "int", "d; 0 = taken from the data at join, must match",
        doc="d (distance sessions) or the vector length k (sum sessions). 0 in a "
            "distance session means \"taken from the data\": every party must then hold "
            "the same d.",
        table="parameters", config_default=0, comment="d; 0 = taken from the data at join "
        "(must match)", config_check=lambda v, k: _integer(v, k, 0, MAX_DIM), audit=True,
        example=6),
    Parameter(
        "bound", "float", "R: public clip bound",
        doc="R, the public clip bound of the quantization.",
        table="parameters", config_default=8.0, config_check=_positive_number, audit=True,
        cli_type=float, example=3.0),
    Parameter(
        "scale_bits", "int", "q: quantization step 2^-q", 16,
        table="parameters", config_check=lambda v, k: _integer(v, k, 0, 30), audit=True,
        example=12),
    Parameter(
        "segments", "int", "l: data segments per row", 1, comment="l",
        doc="l, the data segments of a row (distance sessions).",
        table="parameters", config_check=lambda v, k: _integer(v, k, 1), audit=True, example=2),
    Parameter(
        "noise_segments", "int", "t: random segments; any t parties learn nothing", 1,
        comment="t: any t parties learn nothing",
        doc="t, the random segments (distance sessions): any t parties learn nothing.",
        table="parameters", config_check=lambda v, k: _integer(v, k, 1), audit=True, example=2),
    Parameter(
        "nonnegative", "bool", "all features lie in [0, R]", False,
        comment="all features in [0, R]",
        doc="All features lie in [0, R] (a fourfold smaller no-wrap bound).",
        table="parameters", config_check=_boolean, audit=True, cli_type=bool, example=True),
    Parameter(
        "primes", "tuple | None", "explicit moduli (default: chosen automatically)", None,
        comment="empty: chosen automatically",
        doc="Moduli; chosen automatically (fewest primes with no wrap-around) when "
            "omitted (an empty list in the config).",
        check=lambda v, k: None if v is None else tuple(int(p) for p in v),
        table="parameters", config_default=(), config_check=_config_primes, audit=True,
        metavar="P1,P2", cli_type=tuple, repeated=True, wire_missing=None,
        from_plan=lambda parameters, plan: tuple(plan.primes), example=(2147483647, 2147483629)),
    Parameter(
        "mode", "str", "masked (default): the coordinator learns only D; transparent leaks "
        "per-segment distances", "masked",
        comment="'masked' (default) or 'transparent' (leaks per-segment distances when l > 1)",
        doc="Masked uploads (default) or raw per-party evaluations (leaks per-segment "
            "distances).",
        check=lambda v, k: _choice(v, k, MODES, listed=False), table="session",
        config_check=lambda v, k: _choice(v, k, MODES, listed=True), choices=MODES,
        audit=True, example="transparent"),
    Parameter(
        "kind", "str", "distance: pairwise squared distances; sum: a secure sum", "distance",
        check=lambda v, k: _choice(v, k, KINDS, listed=False), choices=KINDS),
    Parameter(
        "rows", "int", "sum sessions: rows of every contribution (shape (rows, dim))", 1),
    Parameter(
        "chunk_bytes", "int", "payload bytes per share chunk or evaluation tile",
        DEFAULT_CHUNK_BYTES, check=_chunk_bytes, example=8192),
    Parameter(
        "max_rows_per_party", "int", "public row cap per party", DEFAULT_MAX_ROWS_PER_PARTY,
        doc="Public row cap: the coordinator refuses a hello, and every party a roster, "
            "announcing more rows for one party, before allocating anything.",
        check=_row_cap, table="parameters",
        config_check=lambda v, k: _integer(v, k, 1, MAX_ROWS),
        wire_missing=DEFAULT_MAX_ROWS_PER_PARTY, example=500),
    Parameter(
        "max_rows_total", "int", "public row cap, all parties", DEFAULT_MAX_ROWS_TOTAL,
        doc="Public row cap over all parties (checked like ``max_rows_per_party``).",
        check=_row_cap, table="parameters",
        config_check=lambda v, k: _integer(v, k, 1, MAX_ROWS),
        wire_missing=DEFAULT_MAX_ROWS_TOTAL, example=900),
    Parameter(
        "integrity", "str", "Reed-Solomon checks on the uploads: detect (default: exclude "
        "and rerun, or abort), correct (correct and name), off", "detect",
        comment="'detect' (default), 'correct' or 'off': Reed-Solomon checks on the uploads",
        doc="Reed-Solomon checks on the evaluations D is decoded from (distance sessions "
            "with r = |B| - (2l+2t-1) >= 1 redundant responders; see docs/protocol.md). "
            "\"detect\" (default): a detected deviation excludes the parties at fault and "
            "reruns, or aborts with :class:`~finite_field.DeviationError`; \"correct\": "
            "located errors are corrected and the parties named in the result; \"off\": "
            "unchecked uploads.",
        check=lambda v, k: _choice(v, k, INTEGRITY, listed=False), table="session",
        config_check=lambda v, k: _choice(v, k, INTEGRITY, listed=True), choices=INTEGRITY,
        audit=True, wire_missing="detect", example="correct"),
    Parameter(
        "mask_degree", "int", "pairwise-mask partners per party: 0 (default) every other "
        "party; else K >= t + 1, the masks then withstand K - 1 colluding parties", 0,
        comment="mask partners per party: 0 = all; k >= t+1 withstands k-1 colluders",
        doc="0 (default): every pair of responders shares a pairwise mask. k >= 1: each "
            "responder masks only with its neighbours in the Harary graph H_{k,|B|} over "
            "the ordered responding set (:mod:`protocols._mask_graph`), so the masks "
            "withstand a coordinator colluding with up to k - 1 parties. Distance sessions "
            "refuse 1 <= k <= t: the coordinator chooses B and can leave r = 0 (no "
            "integrity checks), and then these masks alone protect each c_j * g(beta_j), "
            "so k >= t + 1 is required (sums: any k >= 1). At most m - 1; a round with "
            "|B| - 1 <= k uses every pair.",
        cross_check=_session_mask_degree, table="parameters",
        config_cross=_config_mask_degree, fingerprint="unless-default", metavar="K", example=3),
    Parameter(
        "adversaries", "int | None", "the most parties that may deviate together; detect "
        "needs r >= A, correct r >= 2A (r = m - (2l+2t-1)); default: the largest the "
        "parties allow (r, or floor(r/2) with correct); 0: best effort, nothing "
        "guaranteed", None,
        comment="A: most parties deviating together (detect: <= r, correct: <= r/2)",
        doc="A, the most parties that may deviate together (compute or share wrongly). "
            "Checked against the redundancy r = m - (2l+2t-1) when the plan is made "
            "(:func:`finite_field.check_adversaries`): \"detect\" needs 1 <= A <= r, "
            "\"correct\" 1 <= A <= floor(r/2); with ``integrity=\"off\"`` or r = 0 it is 0. "
            "None (default): the strongest the redundancy allows (r for \"detect\", "
            "floor(r/2) for \"correct\"); a smaller A lets \"detect\" locate, exclude and "
            "rerun, and leaves checks for stragglers. Against any A parties the session "
            "returns the exact D or raises :class:`~finite_field.DeviationError`, and names "
            "no one outside them (docs/integrity.md, \"Declared adversaries\").",
        check=_adversaries, table="session", metavar="A", audit=True,
        optional_on_wire=True,
        from_plan=lambda parameters, plan: parameters.adversary_bound(plan.parties), example=1),
    Parameter(
        "layout", "str", "which entries of D: full (default), landmarks (D[:, L]) or pairs "
        "(listed pairs)", "full",
        comment="'full' (default), 'landmarks' (D[:, L]) or 'pairs' (the listed pairs)",
        doc="Which entries of D the session computes (docs/protocol.md, \"Layouts\"): "
            "\"full\" (default) every pair; \"landmarks\" D[:, L], every row against the "
            "landmark rows L (listed in ``layout_rows``, or ``n_landmarks`` of them drawn "
            "from the run's public randomness); \"pairs\" the pairs listed in "
            "``layout_rows``. Each is a set of entries of D: the coordinator learns no more.",
        check=lambda v, k: _choice(v, k, LAYOUTS, listed=False), cross_check=_session_layout,
        table="parameters", config_check=lambda v, k: _choice(v, k, LAYOUTS, listed=True),
        config_cross=_config_layout, fingerprint="unless-default", choices=LAYOUTS,
        wire_missing="full", example="landmarks"),
    Parameter(
        "layout_rows", "tuple", "landmarks: the landmark rows; pairs: i0,j0,i1,j1,... "
        "(global row indices)", (),
        comment="landmarks: landmark rows; pairs: i0, j0, i1, j1, ...",
        doc="Global row indices of the layout: the landmark rows (distinct; empty: "
            "``n_landmarks`` are drawn), or the pairs flattened, i0, j0, i1, j1, ... "
            "(distinct in either order, never a row with itself; ``((i0, j0), ...)`` is "
            "accepted and flattened). Every party checks them against the roster's n "
            "before anything is shared.",
        check=layout_rows, table="parameters", config_check=layout_rows,
        fingerprint="unless-default", metavar="I,J", cli_type=tuple, repeated=True,
        example=(1, 4)),
    Parameter(
        "n_landmarks", "int", "landmarks: L rows drawn from the run's public randomness "
        "(0: the listed rows)", 0, comment="L drawn from the run's randomness (0: listed)",
        doc="L, the landmarks drawn uniformly from the roster digest (every party's "
            "signed fresh run nonce: no party or coordinator chooses them) when "
            "``layout_rows`` is empty; 0 or len(layout_rows) otherwise.",
        check=lambda v, k: _integer(v, k, 0, MAX_ROWS), table="parameters",
        config_check=lambda v, k: _integer(v, k, 0, MAX_ROWS),
        fingerprint="unless-default", metavar="L", example=2),
    Parameter(
        "max_landmarks", "int", "public cap on L (at most 2^18: a row of D[:, L] fills one "
        "tile)", DEFAULT_MAX_LANDMARKS,
        check=lambda v, k: _integer(v, k, 1, 1 << 18), table="parameters",
        config_check=lambda v, k: _integer(v, k, 1, 1 << 18),
        fingerprint="unless-default", wire_missing=DEFAULT_MAX_LANDMARKS, example=64),
    Parameter(
        "max_pairs", "int", "public cap on the number of pairs (at most 2^19: the list "
        "travels in the roster)", DEFAULT_MAX_PAIRS,
        check=lambda v, k: _integer(v, k, 1, MAX_PAIRS), table="parameters",
        config_check=lambda v, k: _integer(v, k, 1, MAX_PAIRS),
        fingerprint="unless-default", wire_missing=DEFAULT_MAX_PAIRS, example=1000),
    Parameter(
        "reconnect_grace", "float", "seconds a party whose connection broke may take to "
        "reconnect and resume (0: no reconnect, it is a dropout at once)",
        DEFAULT_RECONNECT_GRACE,
        comment="seconds to reconnect and resume after a broken stream (0: dropout at once)",
        doc="Seconds a party whose stream to the coordinator broke (a transport error, not "
            "a protocol error) may take to reconnect, authenticate as the same party of the "
            "same run and resume (docs/protocol.md, \"Reconnect\"); only when they have "
            "passed is it a dropout. 0: no reconnect (a broken stream is a dropout at once). "
            "At most 3600.",
        check=_grace, table="parameters", config_check=_grace, cli_type=float,
        fingerprint="unless-default", metavar="SECONDS", optional_on_wire=True,
        example=5.0),
    Parameter(
        "keepalive", "float", "seconds of silence after which either end of a party's "
        "connection pings the other, and waits as long for the answer (0: no keepalive)",
        DEFAULT_KEEPALIVE,
        comment="seconds between keepalive pings; no answer within as long: broken (0: off)",
        doc="Seconds of silence on a party's connection to the coordinator after which "
            "either end sends a keepalive ping; with no answer within as many seconds the "
            "connection counts as broken, as after a reset, so a link that went silent "
            "without closing (half-open) is reconnected and resumed within "
            "``reconnect_grace`` (docs/protocol.md, \"Faults on the network\"). 0: no "
            "keepalive (such a link is then noticed only by the phase deadlines). 0 or 1 "
            "to 3600. A link so slow that a ping waits longer than this behind the bytes "
            "already sent is taken for broken (and resumed): raise it there.",
        check=_keepalive, table="parameters", config_check=_keepalive, cli_type=float,
        fingerprint="unless-default", metavar="SECONDS", optional_on_wire=True,
        example=7.0),
    Parameter(
        "alphas", "tuple | None", "interpolation points (l+t)", None,
        doc="Interpolation points alpha_1..alpha_{l+t} (default 1..l+t).",
        check=_points, metavar="A1,A2", cli_type=tuple, audit=True, repeated=True,
        wire_missing=None, from_plan=_coding_points(0), example=(11, 12, 13, 14)),
    Parameter(
        "betas", "tuple | None", "party points (m)", None,
        doc="Party points beta_1..beta_m (default l+t+1..l+t+m).",
        check=_points, metavar="B1,B2", cli_type=tuple, audit=True, repeated=True,
        wire_missing=None, from_plan=_coding_points(1), example=tuple(range(21, 30))),
)

#: The table by name.
PARAMETER = {p.name: p for p in PARAMETERS}


def table_fields(table: str) -> tuple[Parameter, ...]:
    """The parameters of one TOML table (``"session"`` or ``"parameters"``)."""
    return tuple(p for p in PARAMETERS if p.table == table)


def parameter_fields(fields, *, config: bool = False, after: str | None = None,
                     defaults: dict | None = None):
    """Decorator: make ``cls`` a frozen dataclass whose fields are ``fields`` (in table
    order) with their defaults (the config's with ``config=True``; ``defaults`` overrides
    some by name), before the fields the class declares itself, or right after its field
    ``after``.

    Fields with a default must follow the required ones, as in any dataclass.
    """
    fields = tuple(fields)

    def decorate(cls):
        declared = list(cls.__dict__.get("__annotations__", {}).items())
        at = 0 if after is None else [n for n, _ in declared].index(after) + 1
        own = [(f.name, f.annotation) for f in fields]
        cls.__annotations__ = dict(declared[:at] + own + declared[at:])
        for f in fields:
            default = f.default_in_config if config else f.default
            default = (defaults or {}).get(f.name, default)
            if default is not REQUIRED:
                setattr(cls, f.name, default)
        return dataclass(frozen=True)(cls)
    return decorate


def _run_checks(obj, fields, single: str, cross: str, label) -> None:
    """Every field's ``single`` check (named by ``label(field)``), then every ``cross``
    check over all values, on the frozen dataclass ``obj``; normalized values are stored."""
    for f in fields:
        check = getattr(f, single)
        if check is not None:
            object.__setattr__(obj, f.name, check(getattr(obj, f.name), label(f)))
    values = {f.name: getattr(obj, f.name) for f in fields}
    for f in fields:
        check = getattr(f, cross)
        if check is not None:
            object.__setattr__(obj, f.name, check(getattr(obj, f.name), values))


def check_parameters(obj, fields) -> None:
    """The checks of :class:`SessionParameters` on ``obj`` (a frozen dataclass): every
    field's ``check``, then every ``cross_check``; normalized values are stored."""
    _run_checks(obj, fields, "check", "cross_check", lambda f: f.name)


def check_config_fields(obj, fields) -> None:
    """The config's checks on ``obj`` (messages name ``[table] key``)."""
    _run_checks(obj, fields, "config_check", "config_cross", lambda f: f.key)


def _docstring(summary: str, fields) -> str:
    import textwrap

    lines = [summary, "", "Parameters", "----------"]
    for f in fields:
        text = f.doc or f.help + "."
        choices = "{" + ", ".join(repr(c) for c in f.choices) + "}" if f.choices else None
        lines.append(f"{f.name} : {choices or f.annotation.replace(' | None', ', optional')}")
        lines += textwrap.wrap(text, 84, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(lines) + "\n"


# --- the session object -----------------------------------------------------------------

@parameter_fields(PARAMETERS)
class SessionParameters:
    def __post_init__(self) -> None:
        check_parameters(self, PARAMETERS)
        if self.kind == "sum" and self.mode != "masked":
            raise ParameterError("a secure sum is always masked; transparent mode is for "
                                 "distance sessions only")
        if self.kind == "sum" and self.adversaries:
            raise ParameterError("a secure sum has no integrity checks: adversaries "
                                 f"must be 0, got {self.adversaries}")
        if self.dim == 0 and self.kind == "sum":
            raise ParameterError("a secure sum needs the vector length (dim > 0)")

    def plan(self, parties: int):
        """The :class:`CodingPlan` (distance) or :class:`SumPlan` (sum) for m parties."""
        from ._messages import SumPlan

        if self.mask_degree > parties - 1:
            raise ParameterError(f"mask_degree must be at most m - 1 = {parties - 1} (each "
                                 f"party has {parties - 1} possible mask partners), got "
                                 f"{self.mask_degree}")
        if self.kind == "distance":
            self.adversary_bound(parties)
            return make_plan(self.dim, bound=self.bound, scale_bits=self.scale_bits,
                             segments=self.segments, noise_segments=self.noise_segments,
                             parties=parties, nonnegative=self.nonnegative, primes=self.primes,
                             alphas=self.alphas, betas=self.betas)
        if parties < 2:
            raise ParameterError(f"a secure sum needs at least 2 parties, got {parties}")
        quantizer = Quantizer(scale_bits=self.scale_bits, bound=self.bound,
                              nonnegative=self.nonnegative)
        # |sum| <= m M; signed values need 2 m M + 1 residues without wrap-around.
        primes = choose_primes(2 * parties * quantizer.max_magnitude + 1, self.primes)
        return SumPlan(quantizer=quantizer, primes=primes, parties=parties,
                       length=self.rows * self.dim)

    def adversary_bound(self, parties: int) -> int:
        """A for m parties, resolved and checked (:func:`finite_field.check_adversaries`)."""
        if self.kind != "distance":
            return 0
        return check_adversaries(parties, self.segments, self.noise_segments,
                                 self.adversaries, self.integrity)

    def min_responders(self, parties: int) -> int:
        if self.kind == "sum":
            return parties
        return min_parties(self.segments, self.noise_segments)

    def to_proto(self, plan):
        """The ``Parameters`` message: every field of the table that goes on the wire,
        with what the plan fixes (primes, points, the resolved A) written explicitly."""
        from ._generated import omnifc_pb2 as pb

        values = {}
        for f in PARAMETERS:
            if f.wire_name is None:
                continue
            value = f.from_plan(self, plan) if f.from_plan else getattr(self, f.name)
            if value is not None:
                values[f.wire_name] = value
        return pb.Parameters(**values)

    @classmethod
    def from_proto(cls, msg) -> "SessionParameters":
        values = {}
        for f in PARAMETERS:
            if f.wire_name is None:
                continue
            if f.optional_on_wire:
                values[f.name] = getattr(msg, f.wire_name) if msg.HasField(f.wire_name) \
                    else None
                continue
            value = getattr(msg, f.wire_name)
            if f.repeated:
                value = tuple(value)
            if f.wire_missing is not _SAME and not value:
                value = f.wire_missing
            values[f.name] = value
        return cls(**values)

    def with_plan(self, plan) -> "SessionParameters":
        """These parameters with what the plan fixes (primes, points, A) made explicit."""
        return replace(self, **{f.name: f.from_plan(self, plan) for f in PARAMETERS
                                if f.from_plan is not None
                                and f.from_plan(self, plan) is not None})


SessionParameters.__doc__ = _docstring(
    "What every party of a session agrees on before it starts (all public).\n\n"
    "Its fields, defaults and checks come from :data:`protocols._parameters.PARAMETERS`.",
    PARAMETERS)


# --- command-line options ---------------------------------------------------------------

def _default_text(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "none"
    return str(value)


def add_parameter_options(group, names, *, defaults=None, show_defaults=True,
                          no_defaults: bool = False, help=None) -> None:
    """Add the options of the parameters ``names`` (from the table) to an argparse group.

    ``defaults`` overrides a default by name (e.g. the config's, or the demo's);
    ``no_defaults=True`` gives every option the default None (a command that merges
    the flags given over another source, like ``omnifc audit --config``); ``help``
    overrides a help text by name.
    """
    defaults, help = defaults or {}, help or {}
    for name in names:
        f = PARAMETER[name]
        default = None if no_defaults else defaults.get(name, f.default)
        text = help.get(name, f.help)
        if show_defaults and "default" not in text and f.cli_type is not bool:
            shown = defaults.get(name, f.default)
            text += f" (default: {_default_text(shown)})"
        kwargs = dict(dest=f.name, help=text)
        if f.cli_type is bool:
            group.add_argument(f.option, action="store_true",
                               default=None if no_defaults else bool(default), **kwargs)
            continue
        if f.choices:
            kwargs["choices"] = f.choices
        if f.cli_type is tuple:
            kwargs["type"] = str
            default = (None if default is None else ",".join(map(str, default))) \
                if not no_defaults else None
        else:
            kwargs["type"] = f.cli_type or (int if f.annotation.startswith("int") else str)
        if f.metavar:
            kwargs["metavar"] = f.metavar
        group.add_argument(f.option, default=default, **kwargs)


def _ints(text, flag):
    if text is None:
        return None
    try:
        return tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ParameterError(f"{flag} must be comma-separated integers, got {text!r}") \
            from None


def values_from_options(args, names) -> dict:
    """The values of the options :func:`add_parameter_options` added (lists of integers
    parsed; ParameterError naming the flag otherwise)."""
    values = {}
    for name in names:
        f = PARAMETER[name]
        value = getattr(args, f.name)
        if f.cli_type is tuple:
            value = _ints(value, f.option)
        values[name] = value
    return values
