"""``omnifc session``: assemble a session config from public cards, show its fingerprint.

Also the helpers every command that reads a session config shares: :func:`load_config`
(the config validated completely at load, including the clustering request against
omnifc's clustering registry, with ``--keys`` applied) and :func:`announce_session` (the
session fingerprint and the transparent-mode notice printed before the first round).
"""

from __future__ import annotations

import logging

from finite_field import ParameterError
from protocols import (PARAMETER, PARAMETERS, add_parameter_options, table_fields,
                       values_from_options)

logger = logging.getLogger(__name__)

#: The options of ``session new`` / ``certs``: every parameter the session config holds.
CONFIG_PARAMETERS = tuple(p.name for p in PARAMETERS if p.in_config)

#: Methods of :func:`omnifc.cluster` that choose the number of clusters themselves
#: (``fit_method`` requires n_clusters of every other method).
_CHOOSE_THEIR_OWN_K = ("dbscan",)


# --- shared by serve, join, audit, certs -----------------------------------------------

def validate_clustering(config) -> None:
    """The validation hook omnifc gives :func:`protocols.load_session_config`: the
    ``[clustering]`` request must name a method of omnifc's registry, with the parameters
    that method needs.

    >>> from protocols import PartyEntry, SessionConfig, TLSSettings, ClusteringRequest
    >>> from omnifc.cli.cmd_session import validate_clustering
    >>> parties = tuple(PartyEntry(n, bytes([i]) * 32) for i, n in enumerate("abc"))
    >>> config = SessionConfig("ab" * 16, "127.0.0.1:0", parties,
    ...                        tls=TLSSettings(enabled=False),
    ...                        clustering=ClusteringRequest("kmenas", 3))
    >>> validate_clustering(config)
    Traceback (most recent call last):
    ...
    finite_field._errors.ParameterError: [clustering] method 'kmenas' is not a clustering method of omnifc; valid methods: kmeans, ...
    """
    from .._clustering import METHODS

    request = config.clustering
    if request.method not in METHODS:
        raise ParameterError(f"[clustering] method {request.method!r} is not a clustering "
                             f"method of omnifc; valid methods: {', '.join(METHODS)}")
    if request.n_clusters is None and request.method not in _CHOOSE_THEIR_OWN_K:
        raise ParameterError(f"[clustering] method {request.method!r} needs n_clusters")
    cap = config.parameters.max_rows_total
    if request.n_clusters is not None and request.n_clusters > cap:
        raise ParameterError(f"[clustering] n_clusters = {request.n_clusters} exceeds "
                             f"[parameters] max_rows_total = {cap}")


def load_config(path, *, keys=None, who=None):
    """Load a session config as every omnifc command does: validated completely (the
    clustering request included).

    ``who`` is a party name or ``"coordinator"`` (the config's coordinator, whatever its
    name): with ``keys`` its private key files are taken from that folder
    (:meth:`protocols.SessionConfig.with_keys`), and with TLS on they are checked against
    what the config pins for it (:func:`protocols.check_own_keys`), so a wrong folder or a
    config built from another card fails here, naming the participant.
    """
    from protocols import load_session_config
    from protocols import check_own_keys

    config = load_session_config(path, validate=validate_clustering)
    if who is None:
        if keys is not None:
            raise ParameterError("--keys needs to know whose keys they are")
        return config
    coordinator = who == "coordinator" and who not in config.party_names
    name = (config.tls.coordinator_name or "coordinator") if coordinator else who
    if not coordinator:
        config.party(name)  # a clear error for a name the config does not list
    if keys is not None:
        if coordinator and config.tls.coordinator_name is None:
            raise ParameterError("--keys needs a session config built from cards ('omnifc "
                                 "session new' or 'omnifc certs'); this one names its key "
                                 "files in [tls]")
        config = config.with_keys(name, keys)
    if not config.insecure:
        check_own_keys(config, name)
    return config


def announce_session(config, role: str) -> None:
    """Print the session fingerprint (to compare out of band before the first round) and,
    in transparent mode, what that mode reveals. ``role`` is 'coordinator' or a party."""
    print(f"session {config.session_id}: fingerprint {config.fingerprint}", flush=True)
    print("  every participant must see this same fingerprint; compare it out of band "
          "(phone, video call) before going on", flush=True)
    if config.mode == "transparent":
        print("NOTICE: transparent mode: the coordinator sees every party's evaluation, i.e. "
              "every per-segment distance matrix (with segments = dim: every coordinate up "
              "to shift and reflection), not only the distance matrix D. Use mode = "
              "\"masked\" unless every party accepts that.", flush=True)
    parties = len(config.parties)
    needed = 2 * config.parameters.segments + 2 * config.parameters.noise_segments - 1
    if config.integrity == "off":
        print("NOTICE: integrity = \"off\": the uploads are not checked; a party that "
              "computes or shares wrongly silently corrupts D.", flush=True)
    elif parties <= needed:
        print(f"NOTICE: no integrity check is possible: {parties} parties and decoding needs "
              f"2l+2t-1 = {needed}, so r = 0 redundant evaluations; a party that computes "
              "or shares wrongly would silently corrupt D (add parties to detect it).",
              flush=True)
    elif config.adversaries == 0:
        print(f"NOTICE: integrity = \"{config.integrity}\" with adversaries = 0: best "
              "effort; any deviation the checks see ends the session, nothing is promised "
              "against a deviating party.", flush=True)
    else:
        a, r = config.adversaries, parties - needed
        what = ("detected (the session returns the exact D or ends)"
                if config.integrity == "detect" else "corrected")
        print(f"integrity: {config.integrity}, A = {a} of r = {r} redundant: every deviation "
              f"by up to {a} part{'y' if a == 1 else 'ies'} together is {what}; nobody outside "
              f"them is named. More than {a} together is outside the guarantee.", flush=True)
    if config.insecure:
        print(f"NOTICE: TLS is disabled in this session config: {role}'s traffic is "
              "neither authenticated nor encrypted.", flush=True)
    warn_mask_degree(config)


def warn_mask_degree(config) -> None:
    """One WARNING when the session's mask graph is sparser than every pair (1 <= k < m - 1):
    its masks withstand only k - 1 colluding parties (the load already refused k <= t)."""
    k, m = config.parameters.mask_degree, len(config.parties)
    if 1 <= k < m - 1:
        logger.warning("session %s: mask_degree = %d: the pairwise masks withstand the "
                       "coordinator colluding with only %d parties (a Harary graph of "
                       "degree %d; %d colluders that separate it give the coordinator "
                       "partial sums of the other parties' evaluations); mask_degree = 0 "
                       "masks every pair", config.session_id, k, k - 1, k, k)


def add_session_parameters(parser) -> None:
    """The session options of ``session new`` and ``certs`` (written to the config)."""
    from protocols import Deadlines

    defaults = Deadlines()
    session = parser.add_argument_group("session parameters (written to the config)")
    # every parameter of the config's [session] and [parameters] tables, from the table,
    # with the config's defaults
    add_parameter_options(session, CONFIG_PARAMETERS,
                          defaults={name: PARAMETER[name].default_in_config
                                    for name in CONFIG_PARAMETERS})
    session.add_argument("--method", default="kmeans",
                         help="clustering method the coordinator runs (default: kmeans)")
    session.add_argument("--n-clusters", type=int, default=3,
                         help="number of clusters (default: 3)")
    session.add_argument("--deadline", action="append", default=[], metavar="[PHASE=]SECONDS",
                         help="SECONDS for every phase, or PHASE=SECONDS for one phase "
                              "(join, shares, evaluation, result); repeatable (defaults: " + ", ".join(
                             f"{k}={v:g}" for k, v in vars(defaults).items()) + ")")


def parse_deadlines(items, base=None):
    """``--deadline`` values, the same spelling in every command: ``SECONDS`` sets every
    phase, ``PHASE=SECONDS`` one phase (repeatable; later values win). Returns
    :class:`protocols.Deadlines` built on ``base`` (a Deadlines, or its defaults)."""
    import dataclasses

    from protocols import Deadlines

    values = dataclasses.asdict(base) if base is not None else {}
    for item in items:
        phase, sep, seconds = str(item).rpartition("=")
        try:
            number = float(seconds)
        except ValueError:
            raise ParameterError(f"--deadline must look like SECONDS or PHASE=SECONDS, got "
                                 f"{item!r}") from None
        if sep:
            values[phase.strip()] = number
        else:
            values = {f.name: number for f in dataclasses.fields(Deadlines)}
    try:
        return Deadlines(**values)
    except TypeError:
        raise ParameterError(f"--deadline phases are join, shares, evaluation and result; "
                             f"got {', '.join(sorted(values))}") from None


def session_settings(args) -> dict:
    """mode, parameters, clustering and deadlines from :func:`add_session_parameters`."""
    from protocols import ClusteringRequest, ConfigParameters

    values = values_from_options(args, CONFIG_PARAMETERS)
    parameters = ConfigParameters(**{f.name: values[f.name] for f in table_fields("parameters")})
    return {**{f.name: values[f.name] for f in table_fields("session")},
            "parameters": parameters,
            "clustering": ClusteringRequest(method=args.method, n_clusters=args.n_clusters),
            "deadlines": parse_deadlines(args.deadline)}


# --- the command ------------------------------------------------------------------------

def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "session", help="assemble a session config from public cards; show its fingerprint",
        description="Build the session config every participant shares from the public "
                    "cards 'omnifc keygen' wrote (no private key is needed or read), or "
                    "show the fingerprint of an existing one.")
    commands = parser.add_subparsers(dest="session_command", metavar="SUBCOMMAND")
    new = commands.add_parser(
        "new", help="assemble a session config from cards",
        description="Assemble a session config from the parties' and the coordinator's "
                    "public cards: it embeds and pins every certificate and identity key. "
                    "Prints the session fingerprint every participant compares before "
                    "joining. The parties' roster order is the order of --card.")
    new.add_argument("--card", action="append", required=True, metavar="FILE",
                     help="a party's card (NAME.card.toml); repeat for every party, in "
                          "roster order")
    new.add_argument("--coordinator-card", required=True, metavar="FILE",
                     help="the coordinator's card")
    new.add_argument("--address", required=True, metavar="HOST:PORT",
                     help="where the parties dial the coordinator; HOST must be in the "
                          "coordinator's certificate (keygen --coordinator --host)")
    new.add_argument("--out", required=True, metavar="FILE",
                     help="the session config to write (e.g. session.toml)")
    new.add_argument("--force", action="store_true",
                     help="overwrite an existing --out file (never a symbolic link)")
    add_session_parameters(new)
    new.set_defaults(handler=run_new)
    show = commands.add_parser(
        "fingerprint", help="show the fingerprint of a session config",
        description="Validate a session config and print its session fingerprint and the "
                    "card fingerprint of every participant.")
    show.add_argument("config", help="session config (TOML)")
    show.set_defaults(handler=run_fingerprint)
    parser.set_defaults(handler=lambda args: _usage(parser))


def _usage(parser) -> int:
    parser.print_help()
    return 2


def _print_cards(config) -> None:
    tls = config.tls
    if tls.coordinator_fingerprint is not None:
        print(f"  coordinator {tls.coordinator_name:<20} card {tls.coordinator_fingerprint}")
    for party in config.parties:
        shown = party.fingerprint or "(no card: certificate pinned by SHA-256 only)"
        print(f"  party       {party.name:<20} card {shown}")


def run_new(args) -> int:
    from pathlib import Path

    from protocols import dump_session_config
    from protocols import load_card, new_session_config
    from protocols import prepare_output_folder

    cards = [load_card(path) for path in args.card]
    hub = load_card(args.coordinator_card)
    config = new_session_config(cards, hub, args.address, **session_settings(args))
    validate_clustering(config)
    out = Path(args.out)
    prepare_output_folder(out.absolute().parent)
    dump_session_config(config, out, overwrite=args.force)
    print(f"wrote {out}: session {config.session_id} for {', '.join(config.party_names)} "
          f"(coordinator {config.tls.coordinator_name!r} at {config.coordinator})")
    print("cards (check each against what its owner read out to you):")
    _print_cards(config)
    print(f"session fingerprint: {config.fingerprint}")
    print(f"send {out.name} to every participant; each checks the fingerprint with "
          "'omnifc session fingerprint', and serve/join print it again")
    return 0


def run_fingerprint(args) -> int:
    config = load_config(args.config)
    print(f"session {config.session_id}: {', '.join(config.party_names)}; coordinator at "
          f"{config.coordinator}; mode {config.mode}")
    _print_cards(config)
    print(f"session fingerprint: {config.fingerprint}")
    return 0
