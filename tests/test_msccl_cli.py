"""``chakra-coll import-msccl``: documents, warnings and JSON as a user sees them."""

from __future__ import annotations

import json

from chakra_collectives.converters.chakra_et import read_algorithm
from chakra_collectives.verify import verify_algorithm

from msccl_text import algo, gpu, line_of, step, tb


def test_import_json_describes_what_was_written(cli, interop, tmp_path):
    result = cli("import-msccl", interop / "msccl" / "ar_hier_g4_n2_i1_auto.xml", "--size", "8MiB", "-o", tmp_path / "ar", "--json")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["collective"] == "all-reduce" and summary["num_ranks"] == 8 and summary["chunk_count"] == 8
    assert summary["chunk_bytes"] == 2**20 and summary["inplace"] is True
    steps, ops = summary["steps"], summary["ops"]
    assert ops["SEND"] == steps["s"] + steps["rcs"] + steps["rrs"]
    assert ops["RECV"] == steps["r"] + steps["rcs"] + steps["rrc"] + steps["rrs"]
    assert ops["REDUCE"] == steps["rrc"] + steps["rrs"]
    assert len(summary["files"]) == 8 and summary["warnings"] == []
    assert verify_algorithm(read_algorithm(tmp_path / "ar")).ok


def test_several_documents_need_an_index(cli, interop, tmp_path):
    path = tmp_path / "two.xml"
    path.write_text((interop / "msccl" / "custom_collective_1.xml").read_text() + (interop / "msccl" / "ag_simple_ring_n4.xml").read_text())
    result = cli("import-msccl", path, "-o", tmp_path / "x")
    assert result.exit_code == 2 and "holds 2 <algo> documents, choose one with --index" in result.stderr
    assert not list(tmp_path.glob("x.*"))
    chosen = cli("import-msccl", path, "-o", tmp_path / "x", "--index", "1")
    # at 80 columns the line wraps on spaces (never inside the long path): compare words
    assert chosen.exit_code == 0 and "all-gather over 4 ranks" in " ".join(chosen.stdout.split())
    assert str(path) in chosen.stdout.splitlines()[0]
    assert len(list(tmp_path.glob("x.*.et"))) == 4


def test_warnings_go_to_stderr_and_the_files_are_still_written(cli, tmp_path):
    text = algo(
        "custom",
        1,
        2,
        gpu(0, 2, 2, 0, tb(0, -1, -1, 0, step(0, "cpy", src="i0", dst="o0")), tb(1, -1, -1, 1, step(0, "cpy", src="i1", dst="o1", dep=(0, 0)))),
    )
    path = tmp_path / "a.xml"
    path.write_text(text)
    result = cli("import-msccl", path, "-o", tmp_path / "a")
    assert result.exit_code == 0
    dependent = line_of(text, 'depid="0"')
    assert f"chakra-coll: warning: {path}:{dependent}: gpu 0 tb 1 step 0 (cpy)" in result.stderr
    assert "hasdep=0" in result.stderr and (tmp_path / "a.0.et").exists()


def test_collective_and_root_can_be_stated(cli, interop, tmp_path):
    bcast = interop / "msccl" / "az_bcast_tree_n8_k4_i1.xml"
    assert cli("import-msccl", bcast, "-o", tmp_path / "b", "--root", "2", "--json").exit_code == 0
    assert read_algorithm(tmp_path / "b").root == 2
    wrong = cli("verify", tmp_path / "b")
    assert wrong.exit_code == 1 and "counterexample" in wrong.stdout
    ring = interop / "msccl" / "ar_ring_n4_c1_i1_simple.xml"
    assert cli("import-msccl", ring, "-o", tmp_path / "c", "--collective", "custom").exit_code == 0
    assert read_algorithm(tmp_path / "c").collective.value == "custom"


# ---------------------------------------------------------------------------- --astra-sim DIR
def test_import_hands_the_algorithm_to_astra_sim(cli, interop, tmp_path):
    import jsonschema
    import yaml

    from schema_helpers import schema

    ring = interop / "msccl" / "ar_ring_n4_c1_i1_simple.xml"
    result = cli("import-msccl", ring, "-s", "1MiB", "-o", tmp_path / "ar", "--astra-sim", tmp_path / "astra", "-t", "ring:4")
    assert result.exit_code == 0, result.stderr
    assert "AstraSim_Analytical_Congestion_Aware --workload-configuration=workload/all_reduce_4npus_1MB" in result.stdout
    assert "expect: sys[*] finished" in result.stdout
    assert {p.name for p in (tmp_path / "astra").iterdir()} == {"collectives", "network.yml", "remote_memory.json", "run.sh", "system.json", "workload"}
    assert verify_algorithm(read_algorithm(tmp_path / "astra" / "collectives" / "all_reduce")).ok
    # ASTRA-sim's ring all-reduce (docs/et-conventions.md): 2(N-1) x int(latency + (S/N) / bandwidth) ns,
    # 50 GB/s and 500 ns per link, plus at most 1 ns per reduction on the path (a COMP of no duration)
    hop = int(500 + (2**20 / 4) / (50 * 1.073741824))
    summary = json.loads(cli("import-msccl", ring, "-s", "1MiB", "-o", tmp_path / "ar", "--astra-sim", tmp_path / "astra", "-t", "ring:4", "--json").stdout)
    jsonschema.validate(summary, schema("import-msccl"))
    assert 6 * hop <= summary["astra_sim"]["expected_ns"] <= 6 * hop + 6
    # without -t: the GPUs on one switch
    allpairs = interop / "msccl" / "ar_allpairs_v2_n8_i1.xml"
    summary = json.loads(cli("import-msccl", allpairs, "-o", tmp_path / "ap", "--astra-sim", tmp_path / "switch", "--json").stdout)
    network = yaml.safe_load((tmp_path / "switch" / "network.yml").read_text())
    assert network["topology"] == ["Switch"] and network["npus_count"] == [8]
    assert summary["astra_sim"]["network_reason"] is None and summary["astra_sim"]["expected_ns"] > 0
    assert cli("import-msccl", allpairs, "-o", tmp_path / "ap").exit_code == 0  # and without --astra-sim, no directory
    assert json.loads(cli("import-msccl", allpairs, "-o", tmp_path / "ap", "--json").stdout)["astra_sim"] is None


def test_import_writes_nothing_when_astra_sim_cannot_take_it(cli, interop, tmp_path):
    cases = [
        ((interop / "msccl" / "custom_collective_1.xml", "--astra-sim", tmp_path / "a"), "ASTRA-sim runs custom"),
        ((interop / "msccl" / "ar_ring_n4_c1_i1_simple.xml", "--astra-sim", tmp_path / "a", "-t", "ring:5"), "has 4 ranks but ring:5 has 5 NPUs"),
        ((interop / "msccl" / "ar_ring_n4_c1_i1_simple.xml", "-t", "ring:4"), "give --astra-sim too"),
    ]
    for args, message in cases:
        result = cli("import-msccl", *args, "-o", tmp_path / "out" / "x")
        assert result.exit_code == 2 and message in result.stderr and result.stderr.count("\n") == 1, result.stderr
        assert not (tmp_path / "out").exists() and not (tmp_path / "a").exists()


def test_export_says_it_kept_the_imported_threadblocks(cli, interop, tmp_path):
    hier = interop / "msccl" / "ar_hier_g4_n2_i1_auto.xml"
    assert cli("import-msccl", hier, "-o", tmp_path / "ar").exit_code == 0
    said = cli("export-msccl", tmp_path / "ar", "-o", tmp_path / "ar.xml")
    assert said.exit_code == 0 and "threadblocks and channels as imported from MSCCL-IR" in said.stdout
    summary = json.loads(cli("export-msccl", tmp_path / "ar", "-o", tmp_path / "ar.xml", "--json").stdout)
    original = sum(1 for line in hier.read_text().splitlines() if "<tb " in line)
    assert summary["layout_note"] == "threadblocks and channels as imported from MSCCL-IR" and summary["threadblocks"] == original
