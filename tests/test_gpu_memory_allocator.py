"""The caching allocator simulation follows CUDACachingAllocator.cpp's rules
(perfseer_rt/gpu/allocator.py)."""

import pytest

from perfseer_rt.gpu import allocator as A

MIB = 1 << 20


@pytest.mark.parametrize("nbytes, rounded", [(1, 512), (512, 512), (513, 1024), (1000, 1024),
                                             (MIB, MIB), (MIB + 1, MIB + 512)])
def test_requests_round_up_to_512_bytes(nbytes, rounded):
    assert A.round_size(nbytes) == rounded


@pytest.mark.parametrize("rounded, segment", [(512, 2 * MIB), (MIB, 2 * MIB), (MIB + 512, 20 * MIB),
                                              (10 * MIB - 512, 20 * MIB), (10 * MIB, 10 * MIB),
                                              (11 * MIB, 12 * MIB), (21 * MIB + 1, 22 * MIB)])
def test_segment_sizes_follow_the_three_regimes(rounded, segment):
    assert A.segment_size(rounded) == segment


def test_small_requests_share_one_2mib_segment():
    a = A.CachingAllocator()
    for i in range(4):
        a.malloc(i, 256 * 1024)
    assert a.reserved == 2 * MIB and a.allocated == MIB
    a.malloc("more", 1024 * 1024)  # exactly the 1 MiB left in the segment
    assert a.reserved == 2 * MIB
    a.malloc("next", 512)
    assert a.reserved == 4 * MIB   # a second small segment


def test_a_large_block_is_not_split_when_the_rest_is_at_most_1mib():
    a = A.CachingAllocator()
    a.malloc("x", 19 * MIB + 512)   # >= 10 MiB: a segment rounded up to 20 MiB
    assert a.reserved == 20 * MIB
    assert a.allocated == 20 * MIB  # rest under 1 MiB: not split, the whole block is allocated
    a.free("x")
    a.malloc("y", 18 * MIB)         # the cached block, rest 2 MiB: split
    assert a.reserved == 20 * MIB and a.allocated == 18 * MIB


def test_medium_requests_split_a_20mib_segment_and_merge_back():
    a = A.CachingAllocator()
    a.malloc("a", 4 * MIB)
    a.malloc("b", 4 * MIB)
    assert a.reserved == 20 * MIB and a.segments == 1
    a.free("a")
    a.free("b")
    a.malloc("c", 18 * MIB)         # only fits if the freed pieces merged into 20 MiB
    assert a.segments == 1 and a.reserved == 20 * MIB


def test_best_fit_picks_the_smallest_cached_block():
    a = A.CachingAllocator()
    a.malloc("big", 40 * MIB)
    a.malloc("mid", 12 * MIB)
    a.free("big")
    a.free("mid")
    a.malloc("x", 11 * MIB)
    assert a._live["x"].segment == 2   # the 12 MiB segment, not the 40 MiB one
    assert a.reserved == 52 * MIB


def test_capacity_releases_cached_segments_before_giving_up():
    a = A.CachingAllocator(capacity_bytes=30 * MIB)
    a.malloc("a", 24 * MIB)
    a.free("a")
    a.malloc("b", 28 * MIB)          # the cached 24 MiB segment is released first
    assert a.reserved == 28 * MIB
    with pytest.raises(A.OutOfMemory):
        a.malloc("c", 4 * MIB)


def test_replay_reports_peaks_and_reset():
    events = [("+", 1, 30 * MIB), ("-", 1, 30 * MIB), ("+", 2, 12 * MIB), ("-", 2, 12 * MIB)]
    a = A.replay(events)
    assert a.peak_allocated == 30 * MIB and a.peak_reserved == 30 * MIB
    b = A.replay(events, reset_at=2)
    assert b.peak_allocated == 12 * MIB   # split out of the cached 30 MiB block
    assert b.peak_reserved == 30 * MIB
