"""Every attribute chakra-collectives writes into Chakra ET files, with its protobuf type.

The first group is what ASTRA-sim's feeder reads (names and types exactly as in
``docs/et-conventions.md``); the ``cc_*`` group is ours: ASTRA-sim ignores attributes it does not
know, and ours keep an algorithm verifiable and re-scalable after it is written.
``schemas/et-attributes.json`` is generated from :data:`ATTRIBUTES` (a test keeps it current).

>>> ATTRIBUTES["comm_size"].field
'int64_val'
>>> sorted(a.name for a in ATTRIBUTES.values() if a.where == "metadata")[:3]
['cc_buffer_chunks', 'cc_chunk_count', 'cc_collective']
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

FORMAT = "chakra-collectives/1"
"""Value of ``cc_format`` in the GlobalMetadata of every file we write."""

ET_VERSION = "0.0.4"
"""``GlobalMetadata.version`` (the Chakra schema version ASTRA-sim's own examples carry)."""

BUFFER_CODES = {"input": 0, "output": 1, "scratch": 2}


@dataclass(frozen=True)
class Attribute:
    name: str
    field: str
    """The ``AttributeProto`` oneof field that holds the value."""
    where: str
    """``metadata``, or the node types that carry it (``SEND``, ``RECV``, ``COMP``)."""
    meaning: str
    reader: str
    """Who reads it: ``astra-sim`` or ``chakra-collectives``."""


def _attrs(*items: Attribute) -> dict[str, Attribute]:
    return {a.name: a for a in items}


ATTRIBUTES: dict[str, Attribute] = _attrs(
    # ---- read by ASTRA-sim
    Attribute("comm_type", "int64_val", "SEND RECV", "COMM_SEND_NODE (5) or COMM_RECV_NODE (6), as ASTRA-sim's own custom collectives write it", "astra-sim"),
    Attribute("comm_dst", "int32_val", "SEND", "receiving rank (position in the communicator)", "astra-sim"),
    Attribute("comm_src", "int32_val", "RECV", "sending rank", "astra-sim"),
    Attribute("comm_size", "int64_val", "SEND RECV", "message bytes for the collective size the file was written for (never 0)", "astra-sim"),
    Attribute("comm_tag", "int32_val", "SEND RECV", "sends and receives pair on (src, dst, tag); chakra-collectives gives every message between two ranks its own tag", "astra-sim"),
    Attribute("is_cpu_op", "bool_val", "COMP", "always false (GPU work)", "astra-sim"),
    # ---- ours
    Attribute("cc_format", "string_val", "metadata", f"'{FORMAT}': the file was written by chakra-collectives", "chakra-collectives"),
    Attribute("cc_collective", "string_val", "metadata", "the collective the algorithm claims: all-gather, reduce-scatter, all-reduce, all-to-all, broadcast, reduce, custom", "chakra-collectives"),
    Attribute("cc_num_ranks", "int64_val", "metadata", "ranks in the algorithm (= number of rank files)", "chakra-collectives"),
    Attribute("cc_rank", "int64_val", "metadata", "the rank this file belongs to", "chakra-collectives"),
    Attribute("cc_chunk_count", "int64_val", "metadata", "C: the collective's size is cut into C chunks of ceil(size / C) bytes", "chakra-collectives"),
    Attribute("cc_size_bytes", "int64_val", "metadata", "the collective size (bytes of the larger per-rank buffer) comm_size values were computed for", "chakra-collectives"),
    Attribute("cc_buffer_chunks", "int64_list", "metadata", "[input, output, scratch] buffer sizes of this rank, in chunks", "chakra-collectives"),
    Attribute("cc_inplace", "bool_val", "metadata", "the algorithm is for the in-place call (see the IR's aliasing rules)", "chakra-collectives"),
    Attribute("cc_root", "int64_val", "metadata", "root rank of broadcast / reduce (absent otherwise)", "chakra-collectives"),
    Attribute("cc_name", "string_val", "metadata", "free-form algorithm name (absent when empty)", "chakra-collectives"),
    Attribute("cc_placement", "int64_list", "metadata", "the fabric NPU of every rank, in rank order, for an algorithm made for a process group embedded in a larger fabric (its cc_route paths name fabric nodes); absent: rank r on NPU r", "chakra-collectives"),
    Attribute("cc_pattern", "string_list", "metadata", "a pattern collective's chunks, one 'holders>targets' line each (ranks comma-separated; absent otherwise)", "chakra-collectives"),
    Attribute("cc_provenance", "string_list", "metadata", "key=value strings: which tool/options produced the algorithm (absent when empty)", "chakra-collectives"),
    Attribute("cc_src", "int64_list", "SEND COMP", "[buffer, offset, count]: chunks read (buffer 0 input, 1 output, 2 scratch)", "chakra-collectives"),
    Attribute("cc_dst", "int64_list", "RECV COMP", "[buffer, offset, count]: chunks written (for a reduction: accumulated into)", "chakra-collectives"),
    Attribute("cc_ranges", "int64_list", "SEND RECV", "[offset, count, offset, count, ...]: the further chunk ranges of a message that carries several, in the buffer cc_src (SEND) or cc_dst (RECV) names, after the range named there; the message is all of them in order, comm_size counts them all (absent: one range)", "chakra-collectives"),
    Attribute("cc_route", "int64_list", "SEND", "the message's path through the network, when the algorithm chose it: node ids from the sending rank's NPU to the receiving rank's (rank r on NPU r, or on cc_placement[r]), switches (numbered after the NPUs) in between; absent: the network's own route", "chakra-collectives"),
    Attribute("cc_threadblock", "int64_list", "SEND RECV COMP", "[threadblock, channel]: the MSCCL-IR threadblock (and its channel) the operation was imported from; export-msccl keeps that layout when it is valid (absent: not imported from MSCCL-IR)", "chakra-collectives"),
    Attribute("cc_op", "string_val", "COMP", "'reduce' (dst = dst + src) or 'copy' (dst = src); absent on opaque compute", "chakra-collectives"),
    Attribute("cc_duration_ns", "double_val", "COMP", "exact duration in ns when known (duration_micros is whole microseconds)", "chakra-collectives"),
)


def schema_document() -> str:
    """The JSON written to ``schemas/et-attributes.json``."""
    document = {
        "description": (
            "Attributes chakra-collectives writes into Chakra ET files (Node.attr / GlobalMetadata.attr). "
            "'field' is the AttributeProto oneof member that carries the value."
        ),
        "et_version": ET_VERSION,
        "format": FORMAT,
        "buffer_codes": BUFFER_CODES,
        "node_fields": {
            "id": "index of the operation in its rank's program (0..n-1)",
            "name": "'SEND a->b', 'RECV b<-a', 'REDUCE', 'COPY' or 'COMPUTE'",
            "type": "COMM_SEND_NODE (5), COMM_RECV_NODE (6) or COMP_NODE (4)",
            "data_deps": "ids of the operations of the same rank this one waits for",
            "duration_micros": "COMP only: round(duration in ns / 1000)",
        },
        "attributes": [asdict(a) for a in ATTRIBUTES.values()],
    }
    return json.dumps(document, indent=2) + "\n"

