"""Traffic analytics of super-peer trace logs on Apache Spark (``hypercup-analyze``).

``load`` reads the traces (JSON lines or their Parquet copy) against the explicit schema in
``schema``; ``figures`` computes each figure as a DataFrame transform; ``report`` writes the report;
``session`` starts Spark (after checking Java); ``cli`` is the command; ``reference`` computes the
same figures in plain Python, for the benchmark.
"""
