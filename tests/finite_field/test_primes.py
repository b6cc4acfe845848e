"""Prime validation, the fast-prime list and residue-number-system planning."""

from __future__ import annotations

import math

import numpy as np
import pytest

from finite_field import MAX_PRIME, ParameterError, choose_primes, fast_primes, validate_prime


def test_accepts_every_fixture_prime(prime, oracle):
    assert oracle.is_prime(prime)
    assert validate_prime(prime) == prime
    assert type(validate_prime(np.int64(prime))) is int


def test_max_prime_is_the_mersenne_prime(oracle):
    assert MAX_PRIME == 2**31 - 1 and oracle.is_prime(MAX_PRIME)
    assert validate_prime(2**31 - 1) == 2_147_483_647


@pytest.mark.parametrize("composite", [4, 9, 15, 91, 65535, 2**31 - 3, 46337 * 46337])
def test_rejects_composites_and_names_the_value(composite, oracle):
    assert not oracle.is_prime(composite)
    with pytest.raises(ParameterError, match=rf"must be prime, got {composite} \(composite\)"):
        validate_prime(composite)


@pytest.mark.parametrize("value", [1, 2, 0, -7, -2147483647, 2147483659, 2**61 - 1])
def test_rejects_out_of_range_and_names_the_range(value):
    # 2 is prime but cannot host two distinct evaluation points; 2147483659 is the first
    # prime above 2^31 and 2^61-1 a Mersenne prime: both too wide for the int64 kernels.
    with pytest.raises(ParameterError, match=rf"prime in \[3, 2\^31-1\], got {value}$"):
        validate_prime(value)


@pytest.mark.parametrize("value, type_name", [(True, "bool"), (False, "bool"), (13.0, "float"),
                                              (np.float64(13), "float64"), ("13", "str"),
                                              (None, "NoneType")])
def test_rejects_non_integers_and_names_the_type(value, type_name):
    with pytest.raises(ParameterError, match=rf"integer prime, got {type_name}$"):
        validate_prime(value)


def test_parameter_error_is_a_value_error():
    with pytest.raises(ValueError):
        validate_prime(15)


def test_what_names_the_parameter_in_the_message():
    with pytest.raises(ParameterError, match=r"^my prime must be prime, got 15"):
        validate_prime(15, what="my prime")


def test_fast_primes_are_the_largest_primes_below_2_31(oracle):
    primes = fast_primes(4)
    assert primes[0] == MAX_PRIME
    assert list(primes) == sorted(primes, reverse=True)
    assert all(oracle.is_prime(p) for p in primes)
    # No prime was skipped between 2^31-1 and the smallest one returned.
    skipped = [k for k in range(primes[-1], MAX_PRIME + 1) if oracle.is_prime(k)]
    assert skipped == sorted(primes)
    assert fast_primes(1) == (MAX_PRIME,)


@pytest.mark.parametrize("bound", [1, 13, 2**31 - 1, 2**31, 2**40, 2**62, 2**62 + 1,
                                   2**63 - 1])
def test_choose_primes_uses_the_fewest_primes_whose_product_exceeds_the_bound(bound):
    primes = choose_primes(bound)
    assert math.prod(primes) >= bound          # every value < bound is representable
    assert len(primes) == 1 or math.prod(primes[:-1]) < bound  # one fewer would not do
    assert primes == fast_primes(len(primes))


def test_choose_primes_counts():
    assert len(choose_primes(2**31 - 1)) == 1
    assert len(choose_primes(2**31)) == 2
    assert len(choose_primes(2**63 - 1)) == 3


def test_choose_primes_rejects_more_than_63_bits():
    with pytest.raises(ParameterError, match=r"needed 64\.0 bits, at most 63 are supported"):
        choose_primes(2**64)
    with pytest.raises(ParameterError, match=r"at most 63"):
        choose_primes(2**63)


def test_choose_primes_keeps_valid_user_primes():
    assert choose_primes(100, (13, 11)) == (13, 11)
    assert choose_primes(143, (13, 11)) == (13, 11)   # values < 143 fit in [0, 143)


def test_choose_primes_rejects_a_product_that_is_too_small():
    with pytest.raises(ParameterError,
                       match=r"product of the primes \(7\.2 bits\) must exceed the largest "
                             r"squared distance \(7\.2 bits\): results would wrap around"):
        choose_primes(144, (13, 11))
    with pytest.raises(ParameterError, match=r"\(3\.7 bits\).*\(40\.0 bits\).*wrap around"):
        choose_primes(2**40, [13])


@pytest.mark.parametrize("bad, message", [
    ([13, 15], r"^primes\[1\] must be prime, got 15 \(composite\)$"),
    ([13, 1], r"^primes\[1\] must be a prime in \[3, 2\^31-1\], got 1$"),
    ([2**31 + 11], r"^primes\[0\] must be a prime in \[3, 2\^31-1\], got 2147483659$"),
    ([13, True], r"^primes\[1\] must be an integer prime, got bool$"),
    ([13, 2.0], r"^primes\[1\] must be an integer prime, got float$"),
])
def test_choose_primes_validates_user_primes(bad, message):
    with pytest.raises(ParameterError, match=message):
        choose_primes(10, bad)


def test_choose_primes_rejects_repeated_primes():
    with pytest.raises(ParameterError, match=r"distinct, got \[13, 13\]"):
        choose_primes(100, [13, 13])


# Strong pseudoprimes to the first bases (OEIS A014233): each fools Miller-Rabin with fewer
# bases than _is_prime uses; 3215031751 fools all four and is where exactness ends.
STRONG_PSEUDOPRIMES = [2047, 1373653, 25326001]


@pytest.mark.parametrize("start", [0, 65_000, 2**31 - 3000])
def test_own_primality_test_agrees_with_the_oracle_on_ranges(start, oracle):
    from finite_field._primes import _is_prime
    import galois  # a second, independent oracle: the test oracle is Miller-Rabin too

    numbers = range(start, start + 3000)
    assert [n for n in numbers if _is_prime(n)] == [n for n in numbers if oracle.is_prime(n)]
    assert [n for n in numbers if _is_prime(n)] == [n for n in numbers if galois.is_prime(n)]


@pytest.mark.parametrize("composite", STRONG_PSEUDOPRIMES + [561, 41041, 2**31 - 1 - 2 * 3])
def test_own_primality_test_rejects_pseudoprimes_and_carmichael_numbers(composite, oracle):
    from finite_field._primes import _is_prime
    assert not oracle.is_prime(composite) and not _is_prime(composite)


def test_own_primality_test_refuses_where_it_stops_being_exact():
    from finite_field._primes import _is_prime
    with pytest.raises(ParameterError, match="primality is decided only below 3215031751"):
        _is_prime(3_215_031_751)  # composite, yet passes all four bases


def test_fast_primes_are_the_oracles_previous_primes(oracle):
    import galois
    expected, p = [], MAX_PRIME
    while len(expected) < 40:
        expected.append(p)
        p = int(galois.prev_prime(p - 1))
    assert fast_primes(40) == tuple(expected)
