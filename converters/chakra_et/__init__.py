"""Chakra ET: one protobuf stream per rank, as ASTRA-sim reads custom collectives."""

from chakra_collectives.converters.chakra_et.reader import read_algorithm, rank_files
from chakra_collectives.converters.chakra_et.writer import rank_path, write_algorithm

__all__ = ["rank_files", "rank_path", "read_algorithm", "write_algorithm"]
