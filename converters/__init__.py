"""Every external file format, read and written (nothing else in the package parses or writes one).

* :mod:`.chakra_et` -- Chakra execution traces (``PREFIX.{rank}.et``): collective algorithms
  (custom collectives) and workloads, read and written;
* :mod:`.msccl` -- MSCCL-IR XML (MSCCLang's output, the MSCCL runtime's input), read and write;
* :mod:`.astra_sim` -- ASTRA-sim's analytical network file and system configuration;
* :mod:`.pytorch` -- PyTorch execution traces and Kineto traces, read into workload ETs.

Converters turn files into the IR (:mod:`chakra_collectives.ir`) or topologies and back; they
never import the engines (network model, synthesizers, replayer, verifier).
"""
