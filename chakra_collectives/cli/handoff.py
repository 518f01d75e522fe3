"""How a command reports the ASTRA-sim directory it wrote (``synth --astra-sim``, ``demo``)."""

from __future__ import annotations

from chakra_collectives.astra_sim import AstraSimDir
from chakra_collectives.cli.app import console, say
from chakra_collectives.cli.options import warn
from chakra_collectives.units import format_time_ns


def print_astra_sim_dir(written: AstraSimDir) -> None:
    files = f"system.json, remote_memory.json, {written.workload}, run.sh" + (", network.yml" if written.network is not None else "")
    say(f"{written.directory}/ ({files})", prefix="ASTRA-sim ")
    if written.network is None:
        say(f"no network.yml: {written.network_reason}; pass your own --network-configuration", prefix="  ")
    say("run it (one line):", prefix="  ")
    console.print(f"    {written.command()}", soft_wrap=True, markup=False, highlight=False)
    if written.expected_ns is not None:
        say(f"sys[*] finished, {written.expected_ns:,.0f} cycles ({format_time_ns(written.expected_ns)}, our model of ASTRA-sim)", prefix="  expect: ")
    for warning in written.warnings:
        warn(warning)
