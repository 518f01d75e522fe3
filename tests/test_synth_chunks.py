"""``synthesize`` without a chunk count picks K by predicted time."""

from __future__ import annotations

from chakra_collectives.samples import sample_topology
from chakra_collectives.synth import auto_chunk_counts, synthesize
from chakra_collectives.topology import load_topology


def test_k_is_the_fastest_of_those_tried_and_each_time_is_what_that_k_gives():
    topology = sample_topology()
    chosen = synthesize(topology, "all-reduce", "12MiB", algorithm="tacos")
    tried = chosen.chunks_tried
    assert list(tried)[:2] == [1, 2] and chosen.chunks_per_npu in tried
    assert chosen.predicted_ns == min(tried.values()) == tried[chosen.chunks_per_npu]
    for k, predicted in tried.items():
        assert synthesize(topology, "all-reduce", "12MiB", algorithm="tacos", chunks_per_npu=k).predicted_ns == predicted
    # doubling stops at the first K that is not faster than the best so far
    times = list(tried.values())
    assert all(b < a for a, b in zip(times[:-2], times[1:-1])) and (len(times) == len(auto_chunk_counts(8)) or times[-1] >= min(times[:-1]))


def test_a_given_k_is_used_as_is():
    result = synthesize(load_topology("ring:8"), "all-gather", "8MiB", chunks_per_npu=3, algorithm="ring")
    assert result.chunks_per_npu == 3 and result.chunks_tried == {} and result.algorithm.chunk_count == 24


def test_large_topologies_try_only_one_chunk_per_npu():
    assert auto_chunk_counts(1024) == [1] and auto_chunk_counts(32) == [1, 2, 4, 8, 16] and auto_chunk_counts(64) == [1, 2, 4]


def test_json_lists_the_chunk_counts_tried(cli):
    import json

    result = cli("synth", "-t", "ring:4", "-c", "all-gather", "-s", "4MiB", "-a", "ring", "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    tried = summary["chunks_per_npu_tried"]
    assert set(tried) >= {"1", "2"} and str(summary["chunks_per_npu"]) == min(tried, key=tried.get)
