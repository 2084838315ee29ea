"""The payload bytes of MPICH's allreduce and broadcast per rank (training/transport/traffic.py): no MPI, no process."""
import ast
import math
from collections import Counter
from fractions import Fraction

import pytest

from training.transport import collectives, traffic

ALGORITHMS = traffic.ALLREDUCE_ALGORITHMS
SIZES = range(2, 10)
# Divisible or not by the ranks, below, at and above the largest power of two of 2..9 ranks, and a large odd count.
COUNTS = (0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 13, 16, 17, 63, 100, 1001, 1_000_003)
M = 4 * 1_000_003  # bytes of the buffer used in the explicit cases


def per_rank(function, size, *args, **kwargs):
    """allreduce_bytes(algorithm, rank, size, count) for every rank."""
    return [function(*args[:1], rank, size, *args[1:], **kwargs) for rank in range(size)]


def bcast_per_rank(size, count, **kwargs):
    return [traffic.bcast_bytes(rank, size, count, **kwargs) for rank in range(size)]


def test_the_module_imports_only_the_standard_library():
    with open(traffic.__file__) as source:
        tree = ast.parse(source.read())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported == {"math"}


def test_names_are_mpichs_and_the_collective_flags():
    assert ALGORITHMS == ("ring", "recursive_doubling", "reduce_scatter_allgather")
    for flag, algorithm in collectives.MPI_ALGORITHMS.items():
        assert traffic.canonical(flag) == algorithm == traffic.canonical(algorithm)
        assert traffic.allreduce_bytes(flag, 1, 5, 1001) == traffic.allreduce_bytes(algorithm, 1, 5, 1001)
    with pytest.raises(ValueError, match="unknown allreduce algorithm 'tree'"):
        traffic.allreduce_bytes("tree", 0, 4, 10)
    with pytest.raises(ValueError, match="rank 4 of 4"):
        traffic.allreduce_bytes("ring", 4, 4, 10)


def test_the_pinned_broadcast_is_mpichs_binomial_tree():
    assert traffic.BCAST_ENVIRONMENT == {"MPIR_CVAR_BCAST_INTRA_ALGORITHM": "binomial"}


def test_blocks_are_split_as_mpich_splits_them():
    # Ring: ceil(count / size) per block from the first, the rest for the last non-empty one.
    assert traffic.ring_blocks(4, 10) == [3, 3, 3, 1]
    assert traffic.ring_blocks(4, 5) == [2, 2, 1, 0]
    assert traffic.ring_blocks(4, 12) == [3, 3, 3, 3]
    assert traffic.ring_blocks(3, 1_000_003) == [333_335, 333_335, 333_333]
    assert traffic.ring_blocks(8, 3) == [1, 1, 1, 0, 0, 0, 0, 0]
    # Rabenseifner: count // p each, the first count % p one more.
    assert traffic.halving_blocks(4, 10) == [3, 3, 2, 2]
    assert traffic.halving_blocks(2, 1_000_003) == [500_002, 500_001]
    assert [traffic.largest_power_of_two(n) for n in range(1, 10)] == [1, 2, 2, 4, 4, 4, 4, 8, 8]


def test_reduce_scatter_allgather_falls_back_to_recursive_doubling_below_the_power_of_two():
    assert traffic.allreduce_algorithm("binary-blocks", 5, 3) == "recursive_doubling"  # 3 < 4
    assert traffic.allreduce_algorithm("binary-blocks", 5, 4) == "reduce_scatter_allgather"
    assert traffic.allreduce_algorithm("binary-blocks", 9, 7) == "recursive_doubling"  # 7 < 8
    assert traffic.allreduce_algorithm("binary-blocks", 3, 1) == "recursive_doubling"
    assert traffic.allreduce_algorithm("ring", 5, 1) == "ring"
    for size in SIZES:
        for rank in range(size):
            assert (traffic.allreduce_bytes("reduce_scatter_allgather", rank, size, 1)
                    == traffic.allreduce_bytes("recursive_doubling", rank, size, 1))
    # Nothing crosses with one rank (MPI_Allreduce returns early) or no element.
    assert traffic.allreduce_algorithm("ring", 1, 100) is None
    for algorithm in ALGORITHMS:
        assert traffic.allreduce_bytes(algorithm, 0, 1, 100) == (0, 0)
        assert traffic.allreduce_bytes(algorithm, 2, 5, 0) == (0, 0)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_byte_sent_is_received(algorithm):
    for size in SIZES:
        for count in COUNTS:
            totals = per_rank(traffic.allreduce_bytes, size, algorithm, count)
            assert sum(sent for sent, _ in totals) == sum(received for _, received in totals), (size, count)
            # Message by message: what rank a sends to b is what b receives from a.
            sent, received = Counter(), Counter()
            for rank in range(size):
                for to, n_sent, source, n_received in traffic.allreduce_steps(algorithm, rank, size, count):
                    assert n_sent or n_received
                    if n_sent:
                        sent[rank, to, n_sent] += 1
                    if n_received:
                        received[source, rank, n_received] += 1
            assert sent == received, (size, count)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_power_of_two_ranks_match_the_textbook_within_one_block(algorithm):
    for size in (2, 4, 8, 16):
        for count in COUNTS + tuple(range(size * size, size * size + 40)):
            if count < size:
                continue  # reduce_scatter_allgather would fall back; ring blocks are mostly empty
            figure = traffic.textbook(algorithm, size, 4 * count)
            totals = per_rank(traffic.allreduce_bytes, size, algorithm, count)
            # On average over the ranks, exactly the textbook figure.
            exact = (Fraction(2 * (size - 1), size) * 4 * count if algorithm != "recursive_doubling"
                     else int(math.log2(size)) * 4 * count)
            assert Fraction(sum(sent for sent, _ in totals), size) == exact
            assert Fraction(sum(received for _, received in totals), size) == exact
            block = 4 * -(-count // size)
            for sent, received in totals:
                if count % size == 0:
                    assert sent == received == figure  # equal blocks: no rounding at all
                elif count >= size * size:
                    assert abs(sent - figure) < block and abs(received - figure) < block, (size, count)
                else:  # a few elements per block: the last blocks are short or empty
                    assert abs(sent - figure) < 2 * block and abs(received - figure) < 2 * block, (size, count)


def test_the_textbook_figures():
    assert traffic.textbook("ring", 4, 1000) == 1500
    assert traffic.textbook("binary-blocks", 8, 800) == 1400
    assert traffic.textbook("butterfly", 8, 100) == 300
    assert traffic.textbook("butterfly", 2, 100) == traffic.textbook("ring", 2, 100) == 100


def test_three_ranks_fold_rank_0_into_rank_1_which_carries_the_whole_buffer_twice_more():
    # Recursive doubling: rank 0 sends its buffer to rank 1 and gets the result back; ranks 1 and 2 swap their
    # whole buffers once; rank 1 then sends the result to rank 0.
    assert per_rank(traffic.allreduce_bytes, 3, "recursive_doubling", 1_000_003) == [(M, M), (2 * M, 2 * M), (M, M)]
    assert traffic.allreduce_steps("butterfly", 1, 3, 1_000_003) == [
        (None, 0, 0, 1_000_003), (2, 1_000_003, 2, 1_000_003), (0, 1_000_003, None, 0)]
    # Rabenseifner: the same folding; ranks 1 and 2 swap halves of 500,002 and 500,001 elements twice
    # (reduce-scatter, then allgather), which adds up to the whole buffer each way: the same bytes as recursive
    # doubling, 1.0 M each way for ranks 0 and 2, 2.0 M for rank 1 (the textbook says 4/3 M).
    assert per_rank(traffic.allreduce_bytes, 3, "reduce_scatter_allgather", 1_000_003) == [
        (M, M), (2 * M, 2 * M), (M, M)]
    assert traffic.allreduce_steps("binary-blocks", 1, 3, 1_000_003) == [
        (None, 0, 0, 1_000_003), (2, 500_001, 2, 500_002), (2, 500_002, 2, 500_001), (0, 1_000_003, None, 0)]
    assert traffic.allreduce_steps("binary-blocks", 2, 3, 1_000_003) == [
        (1, 500_002, 1, 500_001), (1, 500_001, 1, 500_002)]
    # Ring: no folding; blocks 333,335, 333,335, 333,333; rank r sends all but blocks r and r + 1 and receives
    # all but r - 1 and r: 1,333,336 or 1,333,338 elements (the textbook: 1,333,337.3).
    assert per_rank(traffic.allreduce_bytes, 3, "ring", 1_000_003) == [
        (4 * 1_333_336, 4 * 1_333_338), (4 * 1_333_338, 4 * 1_333_336), (4 * 1_333_338, 4 * 1_333_338)]
    assert per_rank(traffic.allreduce_bytes, 3, "ring", 10) == [(48, 56), (56, 48), (56, 56)]  # blocks 4, 4, 2


def test_other_folded_sizes():
    c = 1000  # 4000 bytes
    # 5 ranks: rank 0 folds into rank 1; four ranks then run the power-of-two algorithm.
    assert per_rank(traffic.allreduce_bytes, 5, "butterfly", c) == [
        (4000, 4000), (12000, 12000), (8000, 8000), (8000, 8000), (8000, 8000)]
    assert per_rank(traffic.allreduce_bytes, 5, "binary-blocks", c) == [
        (4000, 4000), (4000 + 6000, 4000 + 6000), (6000, 6000), (6000, 6000), (6000, 6000)]
    # 6 ranks: ranks 0 and 2 fold into 1 and 3.
    totals = per_rank(traffic.allreduce_bytes, 6, "binary-blocks", c)
    assert [sent for sent, _ in totals] == [4000, 10000, 4000, 10000, 6000, 6000]
    # 7 ranks: ranks 0, 2, 4 fold into 1, 3, 5; 9 ranks: rank 0 into 1, eight ranks swap 3 times.
    assert [s for s, _ in per_rank(traffic.allreduce_bytes, 7, "butterfly", c)] == [4000, 12000] * 3 + [8000]
    assert [s for s, _ in per_rank(traffic.allreduce_bytes, 9, "butterfly", c)] == [4000, 16000] + [12000] * 7


def test_binomial_broadcast():
    assert bcast_per_rank(3, 1_000_003) == [(2 * M, 0), (0, M), (0, M)]
    assert bcast_per_rank(4, 10) == [(80, 0), (0, 40), (40, 40), (0, 40)]
    assert traffic.bcast_steps(2, 4, 10) == [(None, 0, 0, 10), (3, 10, None, 0)]
    assert bcast_per_rank(8, 1)[0] == (12, 0)  # the root sends log2(8) times
    assert bcast_per_rank(5, 3, itemsize=8, root=2) == [(0, 24), (0, 24), (72, 0), (0, 24), (24, 24)]
    assert traffic.bcast_bytes(0, 1, 100) == traffic.bcast_bytes(1, 4, 0) == (0, 0)
    for size in SIZES:
        for root in (0, size - 1):
            totals = bcast_per_rank(size, 7, root=root)
            assert sum(sent for sent, _ in totals) == sum(received for _, received in totals) == (size - 1) * 28
            assert [received for _, received in totals] == [0 if rank == root else 28 for rank in range(size)]
            assert totals[root][0] == 28 * math.ceil(math.log2(size))
