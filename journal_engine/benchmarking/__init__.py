"""Durability benchmarks as a product: `journal-engine bench`.

One module per job: ``workloads`` (the records and the shapes of work: the one place a workload is
defined, shared with the developers' bench/ suite), ``peers`` (the stores measured and how each is
set up), ``machine`` (the machine's facts and its own limits), ``runner`` (the plan and the
interleaved rounds), ``report`` (terminal table, JSON with ``report.schema.json``, Markdown),
``plots`` (PNG) and ``progress`` (the bar). rich, matplotlib and the peers come with
``pip install '.[bench]'`` (in the checkout).

``--served`` measures brokers instead of stores: ``served_workload`` (the raw STOMP clients, in child
processes), ``celery_workload`` (Celery tasks/s on one broker), ``served_peers`` (our server, RabbitMQ,
ActiveMQ Classic and Redis, each started in a scratch directory on free loopback ports and stopped
after), ``served_runner`` (the interleaved rounds) and ``served_report`` (table, JSON with
``served_report.schema.json``, Markdown, PNG).
"""
