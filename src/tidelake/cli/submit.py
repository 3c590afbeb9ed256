"""``tidelake submit``: a tidelake Spark verb (the ingest, a query) under ``spark-submit``.

The command line carries what a submitted driver cannot set once its JVM runs: the master,
the driver memory, ``--jars`` from the jar cache (Hudi, S3A) and every other setting of the
one session builder (lake/spark.py) as ``--conf``. Secrets never appear there: S3 keys are
set on the running session's Hadoop configuration by the job itself. Inside the submitted
driver, :func:`tidelake.lake.spark.build_spark_session` leaves spark-submit's own settings
alone (it sees ``PYSPARK_GATEWAY_PORT``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from tidelake.config import Config
from tidelake.lake.spark import SUBMIT_OWNED, session_conf

#: The application file spark-submit runs.
SPARK_JOB = Path(__file__).with_name("spark_job.py")


def spark_submit_binary(environ: dict[str, str] | None = None) -> str:
    """``$SPARK_HOME/bin/spark-submit``, else the one of the installed PySpark."""
    env = os.environ if environ is None else environ
    if env.get("SPARK_HOME"):
        return str(Path(env["SPARK_HOME"]) / "bin" / "spark-submit")
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def submit_argv(
    config: Config,
    job_args: Sequence[str],
    *,
    master: str | None = None,
    deploy_mode: str = "client",
    app_name: str = "tidelake",
) -> list[str]:
    """The ``spark-submit`` command line running ``tidelake <job_args>`` on ``master``."""
    conf = session_conf(config, app_name)
    argv = [
        spark_submit_binary(),
        "--master",
        master or conf["spark.master"],
        "--deploy-mode",
        deploy_mode,
        "--name",
        app_name,
        "--driver-memory",
        conf["spark.driver.memory"],
        "--driver-java-options",
        conf["spark.driver.extraJavaOptions"],
        "--jars",
        conf["spark.jars"],
    ]
    # The driver runs tidelake: this interpreter (a cluster's executors run no Python).
    conf.setdefault("spark.pyspark.driver.python", sys.executable)
    conf.setdefault("spark.pyspark.python", sys.executable)
    for key, value in conf.items():
        if key not in SUBMIT_OWNED and key != "spark.app.name":
            argv += ["--conf", f"{key}={value}"]
    return [*argv, str(SPARK_JOB), *job_args]
