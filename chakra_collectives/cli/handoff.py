"""How a command reports the ASTRA-sim directory it wrote (``synth --astra-sim``, ``demo``)."""

from __future__ import annotations

from chakra_collectives.astra_sim import AstraSimDir
from chakra_collectives.cli.app import console, err_console
from chakra_collectives.units import format_time_ns


def print_astra_sim_dir(written: AstraSimDir) -> None:
    console.print(f"ASTRA-sim: {written.directory}/ (system.json, remote_memory.json, {written.workload}, run.sh"
                  + (", network.yml)" if written.network is not None else ")"), soft_wrap=True)
    if written.network is None:
        console.print(f"  no network.yml: {written.network_reason}; pass your own --network-configuration", soft_wrap=True)
    console.print(f"  run: {written.command()}", soft_wrap=True, markup=False)
    if written.expected_ns is not None:
        console.print(f"  expect: sys[*] finished, {written.expected_ns:,.0f} cycles ({format_time_ns(written.expected_ns)}, our model of ASTRA-sim)")
    for warning in written.warnings:
        err_console.print(f"chakra-coll: warning: {warning}", markup=False, soft_wrap=True)
