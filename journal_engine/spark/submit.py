"""The file to give spark-submit: the ``journal-engine`` command line, run as a script.

    spark-submit --master spark://host:7077 \\
        $(python -c 'import journal_engine.spark.submit as s; print(s.__file__)') analyze /shared/journals

spark-submit runs a Python application as a file, not as a module: ``journal_engine/cli/__init__.py`` run
so has no package, and its relative imports fail. This file imports the package absolutely. Under
spark-submit, ``journal_engine.spark.session()`` keeps spark-submit's ``--master`` and, unless
``spark.pyspark.python`` (or ``PYSPARK_PYTHON``) names the executors' interpreter, gives them the driver's
own (docs/spark.md, "On a cluster").

spark-submit starts the driver's JVM before this file runs, with Spark's own log settings (INFO): its
start-up lines reach the terminal before journal_engine can quiet them. ``JAVA_OPTIONS`` is the driver
option that gives that JVM journal_engine's log settings from its start:

    spark-submit --driver-java-options "$(python -c 'import journal_engine.spark.submit as s; print(s.JAVA_OPTIONS)')" ...
"""
import sys

from journal_engine.cli import main
from journal_engine.spark.environment import LOG4J2_JAVA_OPTION

#: the driver's JVM option that applies journal_engine's log settings (WARN) from the JVM's start
JAVA_OPTIONS = LOG4J2_JAVA_OPTION

if __name__ == "__main__":
    sys.exit(main())
