"""chakra-coll search's design space: parsing, placeholders, candidates (ports, cost, skips), workload variants."""

from __future__ import annotations

import pytest

from chakra_collectives.errors import InputError
from chakra_collectives.ir import Collective
from chakra_collectives.search.candidates import BuiltTopology, Skipped, build_choice, measure
from chakra_collectives.search.space import grid_shape, load_space, parse_space
from chakra_collectives.search.workloads import WorkloadVariant, prepare, workload_variants
from chakra_collectives.topology import load_topology
from chakra_collectives.workload import data_parallel, uniform_model


def _error(text: str) -> InputError:
    with pytest.raises(InputError) as caught:
        parse_space(text)
    return caught.value


@pytest.mark.parametrize(
    "text, line, words",
    [
        ("npus: 8\ntopologies:\n  - ring:8\n  - [oops\n", 5, ["invalid YAML"]),
        ("npus: 8\ntopologies: [ring:8]\nchunks_per_npu: 0\n", 3, ["chunks_per_npu", "minimum"]),
        ("npus: 8\ntopologies: [ring:8]\nbogus: 1\n", 1, ["unknown key", "bogus"]),
        ("npus: 8\ntopologies:\n  - ring:8\n  - {spec: ring:8, file: x.yaml}\n", 4, ["exactly one of spec or file"]),
        ("npus: 8\ntopologies: [ring:8]\nalgorithms:\n  - tacos\n  - nope\n", 5, ["unknown algorithm 'nope'", "valid: best, tacos, ring"]),
        ("npus: 8\ntopologies: [ring:8]\nalgorithms: [{all-reduce: tacos, donut: ring}]\n", 3, ["unknown collective 'donut'", "valid:"]),
        ("npus: 8\ntopologies:\n  - ring:8\n  - \"ring:{n}\"\n", 4, ["unknown placeholder {n}", "{npus}"]),
        ("topologies:\n  - \"ring:{npus}\"\n", 2, ["{npus}", "no npus"]),
        ("npus: 24\ntopologies:\n  - \"hypercube:{log2}\"\n", 3, ["24 NPUs is not a power of two"]),
        ("npus: 8\ntopologies:\n  - {spec: \"ring:{npus}\", vary: {npus: [1]}}\n", 3, ["built-in placeholder"]),
        ("npus: 8\ntopologies: [ring:8]\ngroup_algorithm: tacos2\n", 3, ["unknown group algorithm", "valid:"]),
        ("npus: 8\ntopologies: [ring:8]\nworkload: {kind: training}\n", 3, ["workload/kind", "training"]),
        ("npus: 8\ntopologies: [ring:8]\nport: {latency: 5 parsecs}\n", 3, ["malformed duration"]),
    ],
)
def test_malformed_spaces_name_the_line(text, line, words):
    error = _error(text)
    assert error.line == line, str(error)
    for word in words:
        assert word in str(error)


def test_an_unquoted_placeholder_in_a_flow_list_gets_a_hint():
    error = _error("npus: 16\ntopologies: [torus2d:{grid2}]\n")
    assert error.line == 2 and 'quote specs with placeholders: "torus2d:{grid2}"' in str(error)


def test_errors_name_the_file(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("npus: 8\ntopologies: [ring:8]\nalgorithms: [nope]\n")
    with pytest.raises(InputError) as caught:
        load_space(path)
    assert str(caught.value).startswith(f"{path}:3: unknown algorithm 'nope'")
    with pytest.raises(InputError, match="cannot read search space"):
        load_space(tmp_path / "missing.yaml")


def test_overrides_replace_keys_and_their_errors_name_the_flag():
    space = parse_space("npus: 8\ntopologies: [ring:8]\nalgorithms: [tacos]\n", overrides={"algorithms": ["ring", "best"]})
    assert [a.label for a in space.algorithms] == ["ring", "best"]
    with pytest.raises(InputError) as caught:
        parse_space("topologies: [ring:8]\n", overrides={"chunks_per_npu": [0]})
    assert caught.value.line is None and str(caught.value).startswith("--chunks-per-npu (command line)")


def test_placeholders_and_vary_expand_per_npu_count():
    space = parse_space(
        "npus: [16, 32]\n"
        "topologies:\n"
        "  - \"torus2d:{grid2}\"\n"
        "  - {spec: \"circulant:{npus},strides=1,{s}\", vary: {s: [3, 5]}, label: \"circ {s} of {npus}\"}\n"
    )
    assert [c.label for c in space.topology_choices(32)] == ["torus2d:4x8", "circ 3 of 32", "circ 5 of 32"]
    assert [c.entry for c in space.topology_choices(16)] == ["torus2d:{grid2}", "circ {s} of {npus}", "circ {s} of {npus}"]
    assert [c.spec for c in space.topology_choices(16)][1:] == ["circulant:16,strides=1,3", "circulant:16,strides=1,5"]


@pytest.mark.parametrize("n", [2, 6, 12, 16, 30, 64, 96, 1024])
def test_grid_shapes_multiply_to_n_and_are_most_balanced(n):
    for dims in (2, 3):
        shape = grid_shape(n, dims)
        assert len(shape) == dims and list(shape) == sorted(shape)
        product = 1
        for side in shape:
            product *= side
        assert product == n
        # no other factorization of n into `dims` factors is more balanced
        def shapes(m, k, least=1):
            if k == 1:
                return [(m,)] if m >= least else []
            return [(f, *rest) for f in range(least, m + 1) if m % f == 0 for rest in shapes(m // f, k - 1, f)]
        assert max(shape) - min(shape) == min(max(s) - min(s) for s in shapes(n, dims))


def _built(text: str, npus: int | None) -> list[BuiltTopology | Skipped]:
    space = parse_space(text)
    return [build_choice(c, space, npus) for c in space.topology_choices(npus)]


def test_candidates_take_the_space_ports_unless_the_spec_says_otherwise():
    built = _built("npus: 8\nport: {bandwidth: 25, latency: 100ns}\ntopologies: [ring:8, \"ring:8,bw=100\", \"dgx:2x4\"]\n", 8)
    ring, fast, dgx = (b.topology for b in built)
    assert {(l.bandwidth_gbps, l.latency_ns) for l in ring.links} == {(25.0, 100.0)}
    assert {l.bandwidth_gbps for l in fast.links} == {100.0} and {l.latency_ns for l in fast.links} == {100.0}
    assert dgx.num_npus == 8  # a builder without bandwidth_gbps keeps its own defaults instead of failing


def test_ports_cost_and_diameter_follow_their_definitions():
    space = parse_space("topologies: [ring:8]\nport: {bandwidth: 50}\ncost: {switch_port: 2}\n")
    torus = measure(load_topology("torus2d:4x4"), space)
    assert (torus.diameter, torus.ports_per_npu, torus.cost, torus.links) == (4, 4.0, 64.0, 64)
    one_way = measure(load_topology("ring:8,bidirectional=false"), space)
    assert (one_way.diameter, one_way.ports_per_npu, one_way.cost) == (7, 1.0, 8.0)
    # a fat-tree of 2 levels (radix 8 < 16 NPUs): NPU ports + 2 x (leaf ports + both ends of the uplinks)
    tree = load_topology("fattree:16,degree=2,radix=8")
    facts = measure(tree, space)
    assert facts.ports_per_npu == 2.0 and facts.diameter == 2
    assert facts.cost == 16 * 2 + 2 * (16 * 2 * (2 * 2 - 1))


def test_cost_equivalent_scales_bandwidth_to_the_reference_cost():
    built = _built(
        "npus: 16\ncost: {switch_port: 3}\ntopologies:\n"
        "  - totientperms:16,degree=4\n"
        "  - {spec: \"fattree:16,degree=4\", cost_equivalent_to: \"totientperms:16,degree=4\"}\n"
        "  - {spec: \"fattree:16,degree=4,bw=10\", cost_equivalent_to: \"totientperms:16,degree=4\"}\n",
        16,
    )
    reference, tree, explicit = built
    assert tree.facts.cost == pytest.approx(reference.facts.cost) == explicit.facts.cost
    assert tree.facts.bandwidth_scale == pytest.approx(1 / 4)  # NPU ports + 3 x as many switch ports
    assert tree.topology.links[0].bandwidth_gbps == pytest.approx(4 * 50 / 4)
    assert "bw=10" in explicit.label and explicit.topology.links[0].bandwidth_gbps == pytest.approx(4 * 50 / 4)


def test_candidates_that_cannot_be_used_are_skipped_with_the_reason():
    built = _built(
        "npus: 8\nports_per_npu: 4\ntopologies:\n"
        "  - torus2d:4x4\n"              # another NPU count
        "  - hypercube:3\n"              # 3 ports: fine
        "  - fully-connected:8\n"        # 7 ports
        "  - \"totientperms:{npus},degree=9\"\n",  # cannot be built at 8 NPUs
        8,
    )
    reasons = [b.reason if isinstance(b, Skipped) else None for b in built]
    assert reasons[0] == "has 16 NPUs, not 8"
    assert reasons[1] is None
    assert reasons[2] == "needs 7 ports per NPU, the space allows 4"
    assert "degree 9 is larger than N - 1 = 7" in reasons[3]
    assert [b.line for b in built if isinstance(b, Skipped)] == [4, 6, 7]


def test_an_unknown_family_is_an_error_listing_the_valid_ones():
    space = parse_space("npus: 8\ntopologies:\n  - ring:8\n  - \"donut:{npus}\"\n")
    with pytest.raises(InputError) as caught:
        build_choice(space.topology_choices(8)[1], space, 8)
    assert caught.value.line == 4 and "unknown topology 'donut' (valid: " in str(caught.value) and " circulant, " in str(caught.value)


def test_workload_variants_and_what_they_synthesize(tmp_path):
    space = parse_space(
        "topologies: [ring:8]\nworkloads:\n"
        "  - {kind: data-parallel, layers: 3, gradient: 4MiB}\n"
        "  - {kind: hybrid, layers: 2, tp: [2, 3, 4]}\n"
        "  - {kind: collective, collective: all-gather, sizes: [1MiB, 4KiB]}\n"
    )
    variants = workload_variants(space, 8)
    labels = [v.label if isinstance(v, WorkloadVariant) else f"skipped {v.label}: {v.reason}" for v in variants]
    assert labels == [
        "data-parallel",
        "hybrid tp=2 dp=4",
        "skipped hybrid tp=3: 3 does not divide 8 NPUs (tp must divide the NPU count)",
        "hybrid tp=4 dp=2",  # forward 50us / 4 rounded to 13 us (a note), not skipped
        "all-gather 1 MiB",
        "all-gather 4 KiB",
    ]
    prepared = {v.label: prepare(v, tmp_path) for v in variants if isinstance(v, WorkloadVariant)}
    assert prepared["data-parallel"].world == {Collective.ALL_REDUCE: 4 * 2**20}
    assert prepared["data-parallel"].group_collectives == 0
    assert prepared["hybrid tp=2 dp=4"].world == {} and prepared["hybrid tp=2 dp=4"].group_collectives == 8 * 2 * 3
    assert prepared["all-gather 4 KiB"].world == {Collective.ALL_GATHER: 4096}
    assert sorted(p.name for p in (tmp_path / "8npus").iterdir())[:3] == ["all-gather_1_MiB.0.et", "all-gather_1_MiB.1.et", "all-gather_1_MiB.2.et"]


def test_the_synthesized_size_is_the_one_carrying_the_most_bytes(tmp_path):
    model_file = tmp_path / "model.yaml"
    model_file.write_text("layers:\n  - {forward: 10us, gradient: 1MiB, repeat: 5}\n  - {forward: 10us, gradient: 4MiB}\n")
    space = parse_space("topologies: [ring:4]\nworkload: {kind: data-parallel, model: model.yaml}\n", base=tmp_path)
    (variant,) = workload_variants(space, 4)
    assert prepare(variant, tmp_path / "w").world == {Collective.ALL_REDUCE: 2**20}  # 5 MiB at 1 MiB beats 4 MiB at 4 MiB


def test_prefix_workloads_must_match_the_npu_count(tmp_path):
    data_parallel(uniform_model(layers=2, forward="10us", gradient="1MiB"), 4).write(tmp_path / "step")
    space = parse_space("topologies: [ring:4]\nworkload: {kind: prefix, prefix: step}\n", base=tmp_path)
    (variant,) = workload_variants(space, 4)
    assert variant.kind == "prefix" and prepare(variant, tmp_path).world == {Collective.ALL_REDUCE: 2**20}
    with pytest.raises(InputError, match="workload .*step has 4 ranks, but the space asks for 8 NPUs"):
        workload_variants(space, 8)


def test_the_port_takes_bandwidth_and_latency_units():
    space = parse_space("port: {bandwidth: 400Gbps, latency: 0.5us}\ntopologies: [ring:4]\n")
    assert (space.port_bandwidth_gbps, space.port_latency_ns) == (50.0, 500.0)
    with pytest.raises(InputError) as caught:
        parse_space("topologies: [ring:4]\nport:\n  bandwidth: fast\n")
    assert caught.value.line == 3 and "malformed bandwidth 'fast'" in str(caught.value)
