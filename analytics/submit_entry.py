"""The application ``spark-submit`` runs for ``deploy/spark-submit.sh`` (spark-submit runs files,
not ``-m`` modules).

The wrapper ships this package as a zip with ``--py-files``. PySpark puts those files on
``sys.path`` only when the driver's SparkContext starts, so the session comes first and the
package is imported after it; ``hypercup-analyze`` then runs in that session (spark-submit's
master, resources and ``--conf`` settings).
"""

import sys

from pyspark.sql import SparkSession


def run() -> int:
    spark = SparkSession.builder.appName("hypercup-analyze").getOrCreate()
    try:
        from analytics.cli import main
        from analytics.session import configure_logging

        configure_logging(spark)
        return main()
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(run())
