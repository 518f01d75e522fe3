#!/bin/sh
# Run ASTRA-sim's analytical backend on ring:8 (written by chakra-coll).
# Set ASTRA_SIM to your astra-sim checkout (built with build/astra_analytical/build.sh),
# or ASTRA_SIM_BIN to the binary itself.
# chakra-coll's model of ASTRA-sim predicts: sys[*] finished, 41181 cycles
set -e
cd "$(dirname "$0")"
BIN="${ASTRA_SIM_BIN:-${ASTRA_SIM:?set ASTRA_SIM to your astra-sim checkout}/build/astra_analytical/build/bin/AstraSim_Analytical_Congestion_Aware}"
exec "$BIN" \
    --workload-configuration=workload/all_reduce_8npus_1MB \
    --system-configuration=system.json \
    --remote-memory-configuration=remote_memory.json \
    --network-configuration=network.yml
