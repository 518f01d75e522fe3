"""``chakra-coll search``: choose a fabric and its collective algorithms by simulating the job.

* :mod:`~chakra_collectives.search.space` -- the design space (a YAML file or flags);
* :mod:`~chakra_collectives.search.candidates` -- topology candidates built, measured, checked;
* :mod:`~chakra_collectives.search.workloads` -- workload variants written as ETs;
* :mod:`~chakra_collectives.search.tasks` -- synthesize + verify a collective; replay a workload;
* :mod:`~chakra_collectives.search.executors` -- in process or on Dask (local or remote cluster);
* :mod:`~chakra_collectives.search.engine` -- the plan, the task graph, resumable runs;
* :mod:`~chakra_collectives.search.table` -- the results table (Parquet, one part per row);
* :mod:`~chakra_collectives.search.report` -- ranking and Pareto fronts;
* :mod:`~chakra_collectives.search.winner` -- the winner's topology file, ETs, ASTRA-sim folder.
"""

from chakra_collectives.search.engine import SearchPlan, SearchRun, plan_search, run_search
from chakra_collectives.search.executors import DaskExecutor, InProcess, make_executor
from chakra_collectives.search.space import SearchSpace, load_space, parse_space
from chakra_collectives.search.table import ResultTable

__all__ = [
    "DaskExecutor",
    "InProcess",
    "ResultTable",
    "SearchPlan",
    "SearchRun",
    "SearchSpace",
    "load_space",
    "make_executor",
    "parse_space",
    "plan_search",
    "run_search",
]
