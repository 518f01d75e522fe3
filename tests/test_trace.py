"""The Perfetto / Chrome trace: valid Trace Event Format, slices that nest on every track,
collectives on their own tracks, the workload's node names, and flows from send to receive."""

from __future__ import annotations

import json
from collections import defaultdict

import jsonschema
import pytest

from chakra_collectives.converters.chakra_et import WorkloadBuilder, read_workload
from chakra_collectives.replay import ProcessGroups, replay, write_trace
from chakra_collectives.topology import load_topology

from conftest import REPO

SAMPLES = REPO / "sample_traces"
TOPOLOGY = SAMPLES / "topology/two_servers.yaml"

# The Trace Event Format's events we write (Google's "Trace Event Format" document): complete
# events (X), metadata (M) and flow events (s, f).
TRACE_EVENT = {
    "type": "object",
    "required": ["ph", "pid"],
    "oneOf": [
        {"properties": {"ph": {"const": "X"}, "name": {"type": "string"}, "cat": {"type": "string"}, "pid": {"type": "integer"},
                        "tid": {"type": "integer"}, "ts": {"type": "number", "minimum": 0}, "dur": {"type": "number", "minimum": 0},
                        "args": {"type": "object"}},
         "required": ["name", "pid", "tid", "ts", "dur"], "additionalProperties": False},
        {"properties": {"ph": {"const": "M"}, "name": {"enum": ["process_name", "thread_name", "process_sort_index", "thread_sort_index"]},
                        "pid": {"type": "integer"}, "tid": {"type": "integer"}, "args": {"type": "object"}},
         "required": ["name", "args"], "additionalProperties": False},
        {"properties": {"ph": {"enum": ["s", "f"]}, "name": {"type": "string"}, "cat": {"type": "string"}, "id": {"type": "integer"},
                        "pid": {"type": "integer"}, "tid": {"type": "integer"}, "ts": {"type": "number", "minimum": 0}, "bp": {"const": "e"}},
         "required": ["name", "cat", "id", "tid", "ts"], "additionalProperties": False},
    ],
}
TRACE = {"type": "object", "required": ["traceEvents"], "properties": {"traceEvents": {"type": "array", "items": TRACE_EVENT}, "displayTimeUnit": {"enum": ["ms", "ns"]}}}


def _load(path):
    document = json.loads(path.read_text())
    jsonschema.validate(document, TRACE)
    return document["traceEvents"]


def _assert_nested(events):
    """On every (process, thread), slices either follow each other or nest (never half overlap)."""
    tracks = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            tracks[e["pid"], e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    eps = 1e-9
    for key, slices in tracks.items():
        open_ends: list[float] = []
        for begin, end in sorted(slices, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= begin + eps:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1] + eps, (key, begin, end, open_ends[-1])
            open_ends.append(end)


def _threads(events):
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}


@pytest.fixture(scope="module")
def step_trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("trace")
    topology = load_topology(str(TOPOLOGY))
    result = replay(SAMPLES / "workload/train_step", topology, record_links=True)  # ring all-reduces overlap the backward pass
    return _load(write_trace(result, topology, out / "step.json")), result


def test_valid_format_and_every_track_nests(step_trace):
    events, result = step_trace
    _assert_nested(events)
    threads = _threads(events)
    assert all((e["pid"], e["tid"]) in threads for e in events if e["ph"] == "X")
    end = max(e["ts"] + e["dur"] for e in events if e["ph"] == "X")
    assert end * 1000 == pytest.approx(result.total_ns)


def test_collectives_have_their_own_tracks_and_the_nodes_names(step_trace):
    events, result = step_trace
    threads = _threads(events)
    by_cat = defaultdict(set)
    for e in events:
        if e["ph"] == "X" and e["pid"] <= result.expanded.workload.num_ranks:
            by_cat[e["cat"]].add(threads[e["pid"], e["tid"]].split(" (")[0])
    assert by_cat["COMP"] == {"compute"} and by_cat["COMM_COLL"] == {"collectives"}
    names = {e["name"] for e in events if e["ph"] == "X" and e["cat"] in ("COMP", "COMM_COLL")}
    assert {"forward embedding", "backward head", "optimizer step", "all-reduce gradients embedding"} <= names
    # overlapping all-reduces on one rank are on separate lanes, named as such
    assert any(name == "collectives (2)" for name in threads.values())
    link_names = {e["name"] for e in events if e["ph"] == "X" and e["cat"] == "link"}
    assert link_names and link_names <= {n for n in names if n.startswith("all-reduce")}


def test_hybrid_names_tensor_parallel_calls(tmp_path):
    topology = load_topology(str(TOPOLOGY))
    result = replay(SAMPLES / "workload/hybrid_step", topology, groups=ProcessGroups.load(SAMPLES / "workload/hybrid_step.json", num_ranks=8), record_links=True)
    events = _load(write_trace(result, topology, tmp_path / "hybrid.json"))
    _assert_nested(events)
    calls = [e for e in events if e["ph"] == "X" and e["cat"] == "COMM_COLL"]
    assert any(e["name"].startswith("tp all-reduce") for e in calls)
    assert {e["args"]["group"] for e in calls} == {str(g) for g in range(1, 7)}


def test_point_to_point_messages_have_flows(tmp_path):
    b = WorkloadBuilder(2)
    compute = b.comp(0, duration_ns=5000, name="produce")
    b.send(0, 1, 2**20, deps=[compute])
    b.recv(1, 0, 2**20)
    b.write(tmp_path / "p2p")
    topology = load_topology("ring:2")
    result = replay(tmp_path / "p2p", topology, record_links=True)
    events = _load(write_trace(result, topology, tmp_path / "p2p.json"))
    _assert_nested(events)
    slices = {e["name"]: e for e in events if e["ph"] == "X" and e["cat"] in ("COMM_SEND", "COMM_RECV")}
    send, recv = slices["SEND 0->1"], slices["RECV 1<-0"]  # the names the nodes have in the files
    start = next(e for e in events if e["ph"] == "s")
    finish = next(e for e in events if e["ph"] == "f")
    assert start["id"] == finish["id"] and (start["pid"], start["tid"], start["ts"]) == (send["pid"], send["tid"], send["ts"])
    assert (finish["pid"], finish["tid"]) == (recv["pid"], recv["tid"]) and recv["ts"] <= finish["ts"] <= recv["ts"] + recv["dur"]
    assert _threads(events)[send["pid"], send["tid"]] == "send/recv"
