"""Chakra ET: one protobuf stream per rank (``PREFIX.{rank}.et``), as ASTRA-sim reads them.

* algorithms -- :func:`read_algorithm` / :func:`write_algorithm` (:mod:`.reader`, :mod:`.writer`):
  a :class:`~chakra_collectives.ir.CollectiveAlgorithm` as a custom collective;
* workloads -- :func:`read_workload` / :class:`WorkloadBuilder` (:mod:`.workload_reader`,
  :mod:`.workload_writer`): what ASTRA-sim's workload feeder runs, read into a
  :class:`~chakra_collectives.ir.workload.Workload`;
* :mod:`.nodes`, :mod:`.one_parse` and :mod:`.stream` -- the framing and node decoding both
  readers share (every node of a file in one protobuf parse); :mod:`.columns_file` -- a
  workload's columns kept beside large rank files, read back while the files are unchanged;
  :mod:`.attributes` -- every attribute we write and the one ``ET_VERSION``.
"""

from chakra_collectives.converters.chakra_et.reader import GROUP_FIELD, group_prefixes, rank_files, read_algorithm
from chakra_collectives.converters.chakra_et.workload_reader import read_workload
from chakra_collectives.converters.chakra_et.workload_writer import WorkloadBuilder, single_collective_workload
from chakra_collectives.converters.chakra_et.writer import rank_path, write_algorithm, write_parts

__all__ = [
    "GROUP_FIELD",
    "WorkloadBuilder",
    "group_prefixes",
    "rank_files",
    "rank_path",
    "read_algorithm",
    "read_workload",
    "single_collective_workload",
    "write_algorithm",
    "write_parts",
]
