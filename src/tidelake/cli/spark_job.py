"""The Python file ``spark-submit`` runs: any ``tidelake`` verb inside a submitted driver.

``tidelake submit … ingest --once`` (cli/submit.py) names this file as the application;
its arguments are the verb's. Kept free of logic: the verb does the work.
"""

from tidelake.cli import main

if __name__ == "__main__":
    main()
