"""rectune.core.memory_limit: an address-space cap turns an allocation without bound into one line, and leaves
the process's own limit as it was."""

import resource

import pytest

from rectune.core.io import RecTuneError
from rectune.core.memory_limit import address_space, memory_limit

MIB = 2**20
pytestmark = pytest.mark.skipif(address_space() is None, reason="the platform does not say what a process holds")


def test_an_allocation_past_the_cap_is_one_line_and_the_limit_is_set_again():
    before = resource.getrlimit(resource.RLIMIT_AS)
    with (
        pytest.raises(RecTuneError, match="^the template asked too much$"),
        memory_limit(64 * MIB, "the template asked too much"),
    ):
        assert resource.getrlimit(resource.RLIMIT_AS)[0] <= address_space() + 64 * MIB  # capped, or the loop is not
        built = "x"
        while True:  # doubling, as a template's loop does: 128 MiB passes the cap
            built += built
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    assert len(bytearray(256 * MIB)) == 256 * MIB  # the cap is gone


def test_work_within_the_cap_runs_as_it_would():
    with memory_limit(64 * MIB, "unused"):
        assert len(bytearray(16 * MIB)) == 16 * MIB


def test_a_tighter_limit_set_before_stays_while_the_block_runs():
    before = resource.getrlimit(resource.RLIMIT_AS)
    tight = address_space() + 512 * MIB
    resource.setrlimit(resource.RLIMIT_AS, (tight, before[1]))
    try:
        with memory_limit(4096 * MIB, "unused"):
            assert resource.getrlimit(resource.RLIMIT_AS)[0] == tight
        assert resource.getrlimit(resource.RLIMIT_AS)[0] == tight
    finally:
        resource.setrlimit(resource.RLIMIT_AS, before)


def test_what_the_machine_refuses_is_one_line_too():
    with pytest.raises(RecTuneError, match="^too much$"), memory_limit(64 * MIB, "too much"):
        "x" * 10**15  # a petabyte: refused whatever the cap
