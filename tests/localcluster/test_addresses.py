"""Pod addresses: round-robin in the cluster's block; blocks claimed exclusively."""
import random

import pytest

from localcluster.addresses import AddressPool, claim_block
from localcluster.errors import KubeletError


def test_addresses_are_not_reused_while_others_are_free():
    pool = AddressPool("127.9.8")
    a, b = pool.allocate(), pool.allocate()
    assert (a, b) == ("127.9.8.1", "127.9.8.2")
    pool.release(a)
    assert pool.allocate() == "127.9.8.3"  # not .1 again


def test_pool_wraps_around_and_runs_out():
    pool = AddressPool("127.9.8")
    got = [pool.allocate() for _ in range(254)]
    assert len(set(got)) == 254 and got[-1] == "127.9.8.254"
    with pytest.raises(KubeletError, match="no free address left in"):
        pool.allocate()
    pool.release("127.9.8.7")
    assert pool.allocate() == "127.9.8.7"


@pytest.mark.parametrize("prefix", ["10.0.0", "127.0", "127.1.2.3", "127.300.1"])
def test_pool_rejects_a_bad_prefix(prefix):
    with pytest.raises(ValueError, match="address block prefix must look like 127.A.B"):
        AddressPool(prefix)


def test_a_claimed_block_is_not_claimed_twice(tmp_path):
    first, lock = claim_block(str(tmp_path), random.Random(1))
    try:
        second, lock2 = claim_block(str(tmp_path), random.Random(1))  # same random sequence
        assert second != first
        lock2.close()
    finally:
        lock.close()
    again, lock3 = claim_block(str(tmp_path), random.Random(1))  # released: free again
    lock3.close()
    assert again == first
