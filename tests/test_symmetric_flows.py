"""The multicommodity-flow LP solved per class of sources under the fabric's symmetries."""

import numpy as np
import pytest

from chakra_collectives.flow.multicommodity import commodity_flows
from chakra_collectives.flow.symmetric import demand_symmetries, symmetric_commodity_flows
from chakra_collectives.topology import load_topology


def all_to_all_within(topology, groups):
    """Sources and needs of an all-to-all inside each group (one chunk per ordered pair)."""
    sources = np.array([s for g in groups for s in g])
    need = np.zeros((len(sources), topology.num_nodes))
    row = 0
    for g in groups:
        for s in g:
            need[row, [t for t in g if t != s]] = 1.0
            row += 1
    return sources, need


def delivered(topology, sources, flows):
    """Per commodity, what each node keeps of the flow (in - out; the source's is negative)."""
    arrays = topology.link_arrays
    kept = np.zeros((len(sources), topology.num_nodes))
    for i in range(len(sources)):
        np.add.at(kept[i], arrays["dst"], flows[i])
        np.subtract.at(kept[i], arrays["src"], flows[i])
    return kept


CASES = [
    ("torus2d:4x4", [tuple(range(4 * r, 4 * r + 4)) for r in range(4)]),     # rows
    ("torus2d:4x4", [tuple(range(c, 16, 4)) for c in range(4)]),             # columns
    ("torus2d:4x4", [tuple(range(16))]),                                     # the whole fabric
    ("dgx:2x4", [(g, g + 4) for g in range(4)]),                             # one GPU per server, through the switch
]


@pytest.mark.parametrize(("spec", "groups"), CASES)
def test_same_optimum_as_the_full_lp_and_a_feasible_flow(spec, groups):
    topology = load_topology(spec)
    sources, need = all_to_all_within(topology, groups)
    chunk_bytes = 2**20
    full = commodity_flows(topology, sources, need, chunk_bytes)
    found = symmetric_commodity_flows(topology, sources, need, chunk_bytes, fewest_hops=True)
    assert found is not None
    time_ns, flows = found
    assert time_ns == pytest.approx(full[0], rel=1e-6)
    # every commodity delivers exactly its needs (conservation), and no link carries more than T allows
    kept = delivered(topology, sources, flows)
    for i, s in enumerate(sources):
        expected = need[i].copy()
        expected[s] = -need[i].sum()
        assert np.allclose(kept[i], expected, atol=1e-6)
    assert flows.min() >= -1e-9
    rate = topology.link_arrays["bandwidth_gbps"] * 2**30 / 1e9 / chunk_bytes   # chunks per ns
    assert np.all(flows.sum(axis=0) <= time_ns * rate * (1 + 1e-6) + 1e-9)


def test_an_irregular_demand_has_no_symmetry():
    topology = load_topology("torus2d:4x4")
    sources, need = all_to_all_within(topology, [(0, 1, 6)])
    assert demand_symmetries(topology, sources, need) is None
    assert symmetric_commodity_flows(topology, sources, need, 1.0) is None


def test_the_symmetries_kept_are_a_group_that_keeps_the_demand():
    topology = load_topology("torus2d:4x4")
    sources, need = all_to_all_within(topology, [tuple(range(4 * r, 4 * r + 4)) for r in range(4)])
    elements = demand_symmetries(topology, sources, need)
    assert len(elements) == 16   # every translation carries rows onto rows
    keys = {e.tobytes() for e in elements}
    assert all(a[b].tobytes() in keys for a in elements for b in elements)   # closed under composition
    # pairs down the first two rows: only the translations along the rows keep them
    pairs = [(0, 4), (1, 5), (2, 6), (3, 7)]
    sources, need = all_to_all_within(topology, pairs)
    assert len(demand_symmetries(topology, sources, need)) == 4   # the translations along the rows
