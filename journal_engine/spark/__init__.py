"""Journals as Spark DataFrames (PySpark 4's Python Data Source API); docs/spark.md.

    import journal_engine.spark
    spark = journal_engine.spark.session()          # or any SparkSession, then register(spark)
    df = spark.read.format("journal_engine").load(["/data/broker-1", "/data/broker-2"])

``register(spark)`` makes ``format("journal_engine")`` known to a session; ``session()`` starts one
the way ``journal-engine analyze`` does (Java 17+ found, the workers on this interpreter, Spark's
logs at WARN). The source (source.py) and its schema (columns.py) need pyspark and pyarrow: the
``spark`` extra (``pip install '.[spark]'`` in the checkout); importing this package imports them.
"""
from __future__ import annotations

from .environment import session
from .source import SOURCE_NAME, register

__all__ = ["register", "session", "SOURCE_NAME"]
