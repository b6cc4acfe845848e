"""Exact finite-field arithmetic for OmniFC: quantization, Lagrange coding, modular kernels.

This is the low-level layer ("hazmat"): it computes exactly what it is told and assumes the
caller keeps noise and shares secret. It imports only numpy, numba and threadpoolctl (BLAS
thread counts; galois is the test oracle, never imported here); a test proves it never
imports the layers above. Names load lazily: importing the package costs only the
exception classes until a kernel is used.
"""

import logging

from ._errors import (AuthenticationError, DeadlineError, DeviationError, InputError,
                      IntegrityError, OmniFCError, ParameterError, PeerError, ProtocolError)
from ._lazy import lazy_exports

# Everything else loads on first use (PEP 562): ``from finite_field import ParameterError``
# must not pay for compiling or loading the numba kernels.
__getattr__, __dir__ = lazy_exports(__name__, {
    "._aggregate": ["add_reduced", "add_upload", "mask_words", "masked_upload",
                    "masked_upload_streams", "symmetrize_mod"],
    "._attribution": ["Attribution", "attribute", "located_errors"],
    "._crt": ["crt_combine"],
    "._decode": ["WrapAroundError", "decode_residues", "decode_upper"],
    "._kernels": ["DistanceTiles", "cross_sq_distances", "distances_from_gram", "encode_blocks",
                  "gram_matrix", "paired_sq_distances", "sq_distances", "sq_distances_tile",
                  "weighted_sum"],
    "._jit": ["warm_up", "warm_up_in_background"],
    "._kernels._tasks": ["KeptThreads"],
    "._integrity_masks": ["MaskGroup", "choose_mask_groups", "cyclic_groups",
                          "exposed_coalitions", "integrity_rows", "integrity_upload",
                          "mask_groups", "null_space", "party_mask", "rank_mod",
                          "spans_complement"],
    "._lagrange": ["LagrangeCode", "lagrange_basis_at", "min_parties"],
    "._plan": ["INTEGRITY_POLICIES", "CodingPlan", "Tolerance", "check_adversaries",
               "decoding_radius", "make_plan", "parties_needed", "tolerance"],
    "._primes": ["MAX_PRIME", "choose_primes", "fast_primes", "validate_prime"],
    "._quantize": ["Quantized", "Quantizer"],
    "._reed_solomon": ["CheckedSum", "Decoding", "ReedSolomonCheck", "checked_sum",
                       "decode_evaluations", "dual_multipliers", "weighted_sums"],
    "._random": ["SYSTEM_RANDOM", "ByteSource", "SystemRandom", "uniform_elements"],
    "._steps": ["decode_sum", "encode_row_blocks", "encode_rows", "evaluate_shares",
                "weight_evaluation"],
})

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "OmniFCError", "ParameterError", "InputError", "ProtocolError", "PeerError",
    "DeadlineError", "AuthenticationError", "IntegrityError", "DeviationError",
    "MAX_PRIME", "validate_prime", "fast_primes", "choose_primes",
    "ByteSource", "SystemRandom", "SYSTEM_RANDOM", "uniform_elements",
    "Quantizer", "Quantized",
    "LagrangeCode", "min_parties", "lagrange_basis_at",
    "CodingPlan", "make_plan", "parties_needed", "tolerance", "Tolerance",
    "INTEGRITY_POLICIES", "decoding_radius", "check_adversaries",
    "encode_blocks", "weighted_sum", "sq_distances", "cross_sq_distances",
    "paired_sq_distances",
    "gram_matrix", "distances_from_gram", "sq_distances_tile", "DistanceTiles",
    "crt_combine", "decode_residues", "decode_upper", "WrapAroundError",
    "masked_upload", "masked_upload_streams", "mask_words", "add_upload", "add_reduced",
    "symmetrize_mod", "warm_up", "warm_up_in_background", "KeptThreads",
    "encode_rows", "encode_row_blocks", "evaluate_shares", "weight_evaluation", "decode_sum",
    "ReedSolomonCheck", "Decoding", "CheckedSum", "checked_sum", "decode_evaluations", "weighted_sums",
    "dual_multipliers",
    "MaskGroup", "integrity_rows", "null_space", "rank_mod", "cyclic_groups", "mask_groups",
    "choose_mask_groups", "party_mask", "exposed_coalitions", "spans_complement",
    "integrity_upload", "Attribution", "attribute", "located_errors", "lazy_exports",
]
