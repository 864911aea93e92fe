"""Durability benchmarks as a product: `journal-engine bench`.

One module per job: ``workloads`` (the records and the shapes of work: the one place a workload is
defined, shared with the developers' bench/ suite), ``peers`` (the stores measured and how each is
set up), ``machine`` (the machine's facts and its own limits), ``runner`` (the plan and the
interleaved rounds), ``report`` (terminal table, JSON with ``report.schema.json``, Markdown) and
``plots`` (PNG). rich, matplotlib and the peers come with ``pip install '.[bench]'`` (in the checkout).
"""
