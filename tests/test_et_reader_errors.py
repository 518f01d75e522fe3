"""Bad ET input: one line naming file, rank and node; the right exit code; never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from chakra.schema.protobuf.et_def_pb2 import COMM_COLL_NODE, COMM_SEND_NODE, AttributeProto, Node
from chakra.src.third_party.utils import protolib
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chakra_collectives.converters.chakra_et import read_algorithm, write_algorithm
from chakra_collectives.errors import AlgorithmError, ChakraCollError, InputError
from chakra_collectives.ir import Collective
from chakra_collectives.synth.baselines import ring

import et_edit


@pytest.fixture
def ring_files(tmp_path) -> Path:
    write_algorithm(ring(Collective.ALL_REDUCE, 4, size_bytes=2**20), tmp_path / "ar")
    return tmp_path / "ar"


def _read_error(prefix: Path) -> ChakraCollError:
    with pytest.raises(ChakraCollError) as caught:
        read_algorithm(prefix)
    message = str(caught.value)
    assert "\n" not in message
    return caught.value


def test_missing_rank_file_is_named(ring_files):
    Path(f"{ring_files}.2.et").unlink()
    error = _read_error(ring_files)
    assert isinstance(error, InputError) and error.rank == 2
    assert str(error).startswith(f"{ring_files}.2.et: rank 2: missing rank file")


def test_no_files_at_all(tmp_path):
    error = _read_error(tmp_path / "nothing")
    assert "no rank files" in str(error)


def test_fewer_files_than_the_metadata_says(ring_files):
    Path(f"{ring_files}.3.et").unlink()
    assert "metadata says 4 ranks but 3 rank files exist" in str(_read_error(ring_files))


def test_truncated_file(ring_files):
    path = Path(f"{ring_files}.1.et")
    path.write_bytes(path.read_bytes()[:-7])
    error = _read_error(ring_files)
    assert isinstance(error, InputError) and error.path == str(path) and "truncated" in str(error)


def test_empty_file(ring_files):
    Path(f"{ring_files}.0.et").write_bytes(b"")
    assert "empty file" in str(_read_error(ring_files))


def test_not_protobuf(ring_files):
    Path(f"{ring_files}.0.et").write_bytes(b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")
    error = _read_error(ring_files)
    assert isinstance(error, InputError) and error.path.endswith("ar.0.et")


def test_file_without_global_metadata(ring_files):
    path = Path(f"{ring_files}.0.et")
    metadata, nodes = et_edit.load(path)
    et_edit.save(path, nodes[0], nodes[1:])  # a Node where the GlobalMetadata belongs
    assert "not a Chakra GlobalMetadata" in str(_read_error(ring_files))


def test_only_metadata(ring_files):
    et_edit.edit(Path(f"{ring_files}.1.et"), lambda nodes: [])
    assert "no nodes" in str(_read_error(ring_files))


def test_dangling_dependency(ring_files):
    def dangle(nodes):
        nodes[3].data_deps.append(999)

    et_edit.edit(Path(f"{ring_files}.2.et"), dangle)
    error = _read_error(ring_files)
    assert isinstance(error, AlgorithmError) and error.exit_code == 1
    assert (error.rank, error.node) == (2, 3) and "depends on node 999" in str(error)


def test_duplicate_node_id(ring_files):
    def duplicate(nodes):
        nodes[4].id = 2

    et_edit.edit(Path(f"{ring_files}.1.et"), duplicate)
    error = _read_error(ring_files)
    assert isinstance(error, AlgorithmError) and error.node == 2 and "duplicate node id" in str(error)


def test_unknown_node_type(ring_files):
    def retype(nodes):
        nodes[1].type = 42

    et_edit.edit(Path(f"{ring_files}.0.et"), retype)
    error = _read_error(ring_files)
    assert (error.rank, error.node) == (0, 1) and "unknown node type 42" in str(error)


def test_collective_node_inside_an_algorithm(ring_files):
    def retype(nodes):
        nodes[0].type = COMM_COLL_NODE

    et_edit.edit(Path(f"{ring_files}.0.et"), retype)
    assert "COMM_COLL_NODE cannot be part of a collective algorithm" in str(_read_error(ring_files))


@pytest.mark.parametrize(
    "field, expected",
    [("double_val", "comm_size is double_val; ASTRA-sim needs an integer type"), ("string_val", "comm_size is string_val")],
)
def test_wrong_attribute_type(ring_files, field, expected):
    def change(nodes):
        send = next(n for n in nodes if n.type == COMM_SEND_NODE)
        attr = et_edit.attr(send, "comm_size")
        attr.CopyFrom(AttributeProto(name="comm_size", **{field: 1.5 if field == "double_val" else "big"}))

    et_edit.edit(Path(f"{ring_files}.3.et"), change)
    error = _read_error(ring_files)
    assert expected in str(error) and error.rank == 3


def test_missing_required_attribute(ring_files):
    def drop(nodes):
        send = next(n for n in nodes if n.type == COMM_SEND_NODE)
        kept = [a for a in send.attr if a.name != "comm_tag"]
        del send.attr[:]
        send.attr.extend(kept)

    et_edit.edit(Path(f"{ring_files}.0.et"), drop)
    assert "missing attribute comm_tag (ASTRA-sim aborts without it)" in str(_read_error(ring_files))


def test_bad_chunk_reference(ring_files):
    def corrupt(nodes):
        send = next(n for n in nodes if n.type == COMM_SEND_NODE)
        del et_edit.attr(send, "cc_src").int64_list.values[2]

    et_edit.edit(Path(f"{ring_files}.0.et"), corrupt)
    assert "cc_src must be an int64_list [buffer, offset, count]" in str(_read_error(ring_files))


def test_inconsistent_metadata(ring_files):
    path = Path(f"{ring_files}.2.et")
    metadata, nodes = et_edit.load(path)
    et_edit.attr(metadata, "cc_chunk_count").int64_val = 99
    et_edit.save(path, metadata, nodes)
    assert "cc_chunk_count = 99 differs from rank 0's 4" in str(_read_error(ring_files))


def test_zero_comm_size_is_refused(ring_files):
    def zero(nodes):
        et_edit.attr(nodes[0], "comm_size").int64_val = 0

    et_edit.edit(Path(f"{ring_files}.0.et"), zero)
    assert "comm_size must be positive" in str(_read_error(ring_files))


@pytest.mark.parametrize(
    "args, code, needle",
    [
        (["verify", "{p}.nope"], 2, "no rank files"),
        (["inspect", "{p}.nope"], 2, "no rank files"),
        (["verify", "{p}", "--collective", "allsum"], 2, "unknown collective 'allsum'"),
        (["verify", "{p}", "--send-semantics", "lazy"], 2, "--send-semantics must be"),
        (["inspect", "{p}", "--size", "12XB"], 2, "malformed size '12XB'"),
    ],
)
def test_cli_bad_input_is_one_line(cli, ring_files, args, code, needle):
    result = cli(*[a.format(p=ring_files) for a in args])
    assert result.exit_code == code
    assert needle in result.stderr and result.stderr.count("\n") == 1
    assert result.stderr.startswith("chakra-coll: error: ") and "Traceback" not in result.stderr


def test_cli_reports_a_broken_file_with_its_location(cli, ring_files):
    path = Path(f"{ring_files}.1.et")
    path.write_bytes(path.read_bytes()[:-3])
    result = cli("verify", ring_files)
    assert result.exit_code == 2 and f"{path}: rank 1: truncated" in result.stderr


@pytest.fixture(scope="module")
def real_file_bytes(tmp_path_factory) -> bytes:
    prefix = tmp_path_factory.mktemp("real") / "ar"
    write_algorithm(ring(Collective.ALL_REDUCE, 3, size_bytes=3 * 1024), prefix, reduce_bandwidth_gbps=10.0)
    return Path(f"{prefix}.1.et").read_bytes()


def _read_single(tmp_path: Path, data: bytes) -> None:
    prefix = tmp_path / "fuzz"
    Path(f"{prefix}.0.et").write_bytes(data)
    try:
        read_algorithm(prefix)
    except ChakraCollError as error:
        assert "\n" not in str(error)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300))
def test_random_bytes_only_raise_the_tools_own_errors(tmp_path, data):
    _read_single(tmp_path, data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(0, 10**6), flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3))
def test_truncated_and_corrupted_real_files_only_raise_the_tools_own_errors(tmp_path, real_file_bytes, cut, flips):
    data = bytearray(real_file_bytes[: cut % (len(real_file_bytes) + 1)])
    for position, value in flips:
        if data:
            data[position % len(data)] = value
    _read_single(tmp_path, bytes(data))


def test_metadata_with_foreign_fields_is_refused(tmp_path):
    prefix = tmp_path / "m"
    with open(f"{prefix}.0.et", "wb") as handle:
        protolib.encodeMessage(handle, Node(id=5, type=COMM_SEND_NODE))  # field 1 is an int here, a string in GlobalMetadata
        protolib.encodeMessage(handle, Node(id=1, type=COMM_SEND_NODE))
    assert "not a Chakra GlobalMetadata" in str(_read_error(prefix))


@pytest.mark.parametrize("workers", [1, 2])
def test_an_attribute_protobuf_cannot_decode_names_its_rank_and_node(tmp_path, workers):
    from chakra_collectives.converters.chakra_et.nodes import decode_rank_files
    from chakra_collectives.converters.chakra_et.reader import rank_files

    write_algorithm(ring(Collective.ALL_GATHER, 4, size_bytes=4096), tmp_path / "ag")
    attribute = AttributeProto(name="comm_tag", int32_val=0).SerializeToString()
    path = tmp_path / "ag.2.et"
    data = path.read_bytes()
    assert attribute in data
    path.write_bytes(data.replace(attribute, b"\xff" * len(attribute), 1))  # the record still frames; its attribute does not parse
    with pytest.raises(InputError, match=r"ag\.2\.et.*rank 2.*node \d+.*malformed attribute"):
        decode_rank_files(rank_files(tmp_path / "ag"), workers=workers)
