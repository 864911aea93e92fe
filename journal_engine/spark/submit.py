"""The file to give spark-submit: the ``journal-engine`` command line, run as a script.

    spark-submit --master spark://host:7077 \\
        $(python -c 'import journal_engine.spark.submit as s; print(s.__file__)') analyze /shared/journals

spark-submit runs a Python application as a file, not as a module: ``journal_engine/cli/__init__.py`` run
so has no package, and its relative imports fail. This file imports the package absolutely. Under
spark-submit, ``journal_engine.spark.session()`` keeps spark-submit's ``--master`` and, unless
``spark.pyspark.python`` (or ``PYSPARK_PYTHON``) names the executors' interpreter, gives them the driver's
own (docs/spark.md, "On a cluster").
"""
import sys

from journal_engine.cli import main

if __name__ == "__main__":
    sys.exit(main())
